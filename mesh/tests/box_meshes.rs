//! Generated meshes: volumes, exterior facets and their orientation, boundary-group matching,
//! quality checks, and the conversion to second order.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

use gradfem_mesh::{
    BoxSpec, CellId, CellType, ElementTable, IssueKind, Mesh, MeshError, PhysicalGroup, box_mesh,
    cell_measure, exterior_facets, facet_nodes, group_facets, group_measure,
    physical_gradients_into, rectangle_mesh, reference_nodes, surface_normal, to_second_order,
};
use rstest::rstest;

fn spec(ct: CellType) -> BoxSpec {
    BoxSpec {
        origin: [0.5, -1.0, 2.0],
        lengths: [2.0, 1.5, 0.75],
        divisions: [3, 2, 4],
        cell_type: ct,
    }
}

fn sub(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

fn centroid(mesh: &Mesh, nodes: &[usize]) -> [f64; 3] {
    let mut c = [0.0; 3];
    for &n in nodes {
        for k in 0..3 {
            c[k] += mesh.coords[n][k] / nodes.len() as f64;
        }
    }
    c
}

/// Centre of the reference facet cell (where the normal is evaluated).
fn facet_centre(ct: CellType) -> [f64; 3] {
    match ct.linear() {
        CellType::Tri3 => [1.0 / 3.0, 1.0 / 3.0, 0.0],
        _ => [0.0; 3],
    }
}

const ALL_BOX: [CellType; 5] =
    [CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Hex27];

#[rstest]
fn box_volume_areas_and_quality(
    #[values(CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Hex27)]
    ct: CellType,
) {
    let s = spec(ct);
    let mesh = box_mesh(&s);
    mesh.validate().unwrap();
    assert_eq!(mesh.blocks[0].cell_type, ct);
    let cubes = 3 * 2 * 4;
    let per_cube = if ct.linear() == CellType::Tet4 { 6 } else { 1 };
    assert_eq!(mesh.blocks[0].len(), cubes * per_cube);
    let vol = group_measure(&mesh, mesh.group("domain").unwrap());
    let [lx, ly, lz] = s.lengths;
    assert!((vol - lx * ly * lz).abs() < 1e-13, "{ct}: volume {vol}");
    let areas = [ly * lz, ly * lz, lx * lz, lx * lz, lx * ly, lx * ly];
    for (name, area) in ["xmin", "xmax", "ymin", "ymax", "zmin", "zmax"].iter().zip(areas) {
        let g = mesh.group(name).unwrap();
        assert_eq!(g.dim, 2);
        let a = group_measure(&mesh, g);
        assert!((a - area).abs() < 1e-13, "{ct} {name}: area {a} vs {area}");
    }
    let report = mesh.check();
    assert!(report.is_ok(), "{ct}: {report}");
    assert_eq!(report.n_cells, mesh.blocks[0].len());
    assert!(report.min_det_j > 0.0);
    // Cell tags are 1-based positions.
    assert_eq!(mesh.blocks[0].tags[0], 1);
    assert_eq!(*mesh.blocks[0].tags.last().unwrap(), mesh.blocks[0].len() as u64);
}

#[rstest]
fn exterior_facets_count_and_outward_normals(
    #[values(CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Hex27)]
    ct: CellType,
) {
    let mesh = box_mesh(&spec(ct));
    let facets = exterior_facets(&mesh);
    let (nx, ny, nz) = (3, 2, 4);
    let per_square = if ct.linear() == CellType::Tet4 { 2 } else { 1 };
    assert_eq!(facets.len(), 2 * (nx * ny + ny * nz + nx * nz) * per_square, "{ct}");
    let mut sorted = facets.clone();
    sorted.sort();
    assert_eq!(sorted, facets, "deterministic (block, index, facet) order");
    for f in &facets {
        let (ft, nodes) = facet_nodes(&mesh, *f);
        let coords: Vec<[f64; 3]> = nodes.iter().map(|&n| mesh.coords[n]).collect();
        let normal = surface_normal(&coords, ft, facet_centre(ft));
        let fc = centroid(&mesh, &nodes[..ft.n_vertices()]);
        let cc = mesh.cell_centroid(f.cell);
        assert!(dot(normal, sub(fc, cc)) > 0.0, "{ct} {f:?}: normal {normal:?} points inwards");
        // On a box every exterior normal is an axis direction.
        assert!((normal.iter().map(|v| v.abs()).fold(0.0, f64::max) - 1.0).abs() < 1e-12);
    }
}

#[rstest]
fn group_facets_match_every_box_side(
    #[values(CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Hex27)]
    ct: CellType,
) {
    let mesh = box_mesh(&spec(ct));
    let normals = [
        [-1.0, 0.0, 0.0],
        [1.0, 0.0, 0.0],
        [0.0, -1.0, 0.0],
        [0.0, 1.0, 0.0],
        [0.0, 0.0, -1.0],
        [0.0, 0.0, 1.0],
    ];
    let index = gradfem_mesh::FacetIndex::new(&mesh);
    let mut total = 0;
    for (name, n_out) in ["xmin", "xmax", "ymin", "ymax", "zmin", "zmax"].iter().zip(normals) {
        let g = mesh.group(name).unwrap();
        let matched = group_facets(&mesh, g).unwrap();
        assert_eq!(matched, index.group_facets(&mesh, g).unwrap());
        assert_eq!(matched.len(), g.cells.len());
        total += matched.len();
        for (gc, f) in g.cells.iter().zip(&matched) {
            let (ft, nodes) = facet_nodes(&mesh, *f);
            assert_eq!(ft, mesh.cell_type(*gc));
            // The generated facet cells carry exactly the face's nodes, mid nodes included,
            // in the same outward order.
            assert_eq!(nodes.as_slice(), mesh.cell_nodes(*gc), "{ct} {name}");
            let coords: Vec<[f64; 3]> = nodes.iter().map(|&n| mesh.coords[n]).collect();
            let normal = surface_normal(&coords, ft, facet_centre(ft));
            assert!(dot(normal, n_out) > 1.0 - 1e-12, "{ct} {name}: {normal:?}");
        }
    }
    assert_eq!(total, exterior_facets(&mesh).len());
}

#[test]
fn group_facet_errors_carry_the_evidence() {
    let mut mesh = box_mesh(&spec(CellType::Tet4));
    let err = group_facets(&mesh, mesh.group("domain").unwrap()).unwrap_err();
    assert!(matches!(err, MeshError::GroupDimension { dim: 3, expected: 2, .. }), "{err}");
    // A triangle through the interior that is not a face of any tet.
    let (b, blk) = mesh.block_mut(CellType::Tri3);
    let n = blk.len();
    blk.push(&[0, 5, 30], 999);
    mesh.groups.push(PhysicalGroup {
        name: "bogus".into(),
        tag: 9,
        dim: 2,
        cells: vec![CellId { block: b, index: n }],
    });
    let err = group_facets(&mesh, mesh.group("bogus").unwrap()).unwrap_err();
    match &err {
        MeshError::UnmatchedFacet { group, facet_tag, centroid } => {
            assert_eq!(group, "bogus");
            assert_eq!(*facet_tag, 999);
            let want = centroid_of(&mesh, &[0, 5, 30]);
            assert!((0..3).all(|k| (centroid[k] - want[k]).abs() < 1e-12), "{centroid:?}");
        }
        other => panic!("unexpected {other}"),
    }
    assert!(err.to_string().contains("999"));
}

fn centroid_of(mesh: &Mesh, nodes: &[usize]) -> [f64; 3] {
    centroid(mesh, nodes)
}

#[rstest]
fn inverted_cell_is_reported_with_id_tag_and_centroid(
    #[values(CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex27)] ct: CellType,
) {
    let mut mesh = box_mesh(&spec(ct));
    let nn = ct.n_nodes();
    let bad = 17;
    let conn = &mut mesh.blocks[0].connectivity[bad * nn..(bad + 1) * nn];
    // Swap two vertices (and, for quadratic cells, keep the mid nodes: the cell is still
    // turned inside out where it matters).
    conn.swap(1, 2);
    let report = mesh.check();
    let inverted: Vec<_> = report.inverted().collect();
    assert_eq!(inverted.len(), 1, "{ct}: {report}");
    let issue = inverted[0];
    assert_eq!(issue.cell, CellId { block: 0, index: bad });
    assert_eq!(issue.tag, bad as u64 + 1);
    assert_eq!(issue.cell_type, ct);
    assert_eq!(issue.centroid, mesh.cell_centroid(issue.cell));
    assert!(issue.value < 0.0);
    assert!(report.min_det_j < 0.0);
    assert!(!report.is_ok() && !report.is_usable());
    let dets = gradfem_mesh::signed_jacobians(&mesh, issue.cell);
    assert!(dets.iter().any(|&d| d < 0.0));
}

#[test]
fn flattened_cells_are_degenerate() {
    // Tet: four coplanar grid nodes (a face square of the first cube).
    let mut mesh = box_mesh(&spec(CellType::Tet4));
    let nx1 = 4;
    mesh.blocks[0].connectivity[4 * 5..4 * 6].copy_from_slice(&[0, 1, nx1 + 1, nx1]);
    let report = mesh.check();
    let deg: Vec<_> = report.degenerate().collect();
    assert_eq!(deg.len(), 1, "{report}");
    assert_eq!(deg[0].cell, CellId { block: 0, index: 5 });
    assert_eq!(deg[0].kind, IssueKind::Degenerate);
    assert_eq!(report.inverted().count(), 0);
    // Hex: top face collapsed onto the bottom face.
    let mut mesh = box_mesh(&spec(CellType::Hex8));
    let c: Vec<usize> = mesh.blocks[0].cell(2).to_vec();
    mesh.blocks[0].connectivity[2 * 8 + 4..2 * 8 + 8].copy_from_slice(&c[..4]);
    let report = mesh.check();
    assert_eq!(report.degenerate().map(|i| i.cell.index).collect::<Vec<_>>(), vec![2], "{report}");
}

#[test]
fn stretched_and_distorted_cells_are_flagged() {
    let mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [30.0, 1.0, 1.0],
        divisions: [1, 1, 1],
        cell_type: CellType::Hex8,
    });
    let report = mesh.check();
    assert_eq!(report.bad_aspect_ratio().count(), 1);
    assert!((report.max_aspect_ratio - 30.0).abs() < 1e-12);
    // A hex with one corner pushed towards the centre: det J varies a lot.
    let mut mesh = box_mesh(&BoxSpec::unit_cube(1, CellType::Hex8));
    let n6 = mesh.blocks[0].cell(0)[6];
    // det J at that corner ∝ 3s - 2 for the corner at (s, s, s): small but positive.
    mesh.coords[n6] = [0.69, 0.69, 0.69];
    let report = mesh.check();
    assert_eq!(report.bad_jacobian_ratio().count(), 1, "{report}");
    assert!(report.min_jacobian_ratio < 0.1);
}

#[rstest]
fn second_order_shares_mid_nodes_and_keeps_volumes(#[values(false, true)] complete: bool) {
    for ct in [CellType::Tet4, CellType::Hex8] {
        let linear = box_mesh(&spec(ct));
        let quad = to_second_order(&linear, complete);
        quad.validate().unwrap();
        // Every node is distinct: mid nodes are shared, never duplicated.
        let mut pts: Vec<[u64; 3]> =
            quad.coords.iter().map(|p| p.map(|v| (v * 1e9).round() as i64 as u64)).collect();
        pts.sort();
        pts.dedup();
        assert_eq!(pts.len(), quad.n_nodes(), "{ct}: duplicated nodes");
        // New node tags continue after the old ones.
        assert_eq!(quad.node_tags[linear.n_nodes()], linear.n_nodes() as u64 + 1);
        let v0 = group_measure(&linear, linear.group("domain").unwrap());
        let v1 = group_measure(&quad, quad.group("domain").unwrap());
        assert!((v0 - v1).abs() < 1e-13);
        for g in &quad.groups[1..] {
            for (gc, f) in g.cells.iter().zip(group_facets(&quad, g).unwrap()) {
                let (_, nodes) = facet_nodes(&quad, f);
                assert_eq!(nodes.as_slice(), quad.cell_nodes(*gc));
            }
        }
        assert_eq!(quad.groups, linear.groups);
    }
}

/// Quadratic fields are reproduced exactly (values and gradients) by every quadratic cell.
#[rstest]
fn quadratic_field_reproduced(
    #[values(CellType::Tet10, CellType::Hex20, CellType::Hex27)] ct: CellType,
) {
    let mut mesh = box_mesh(&spec(ct));
    // Distort the mesh affinely so that the test is not just on axis-aligned cells.
    for p in &mut mesh.coords {
        *p = [p[0] + 0.3 * p[1], p[1] - 0.2 * p[2], p[2] + 0.1 * p[0]];
    }
    let u = |x: [f64; 3]| {
        1.0 + 2.0 * x[0] - x[1] + 0.5 * x[2] + x[0] * x[0] - 3.0 * x[1] * x[2]
            + 0.7 * x[0] * x[1]
            + 1.5 * x[2] * x[2]
    };
    let grad = |x: [f64; 3]| {
        [
            2.0 + 2.0 * x[0] + 0.7 * x[1],
            -1.0 - 3.0 * x[2] + 0.7 * x[0],
            0.5 - 3.0 * x[1] + 3.0 * x[2],
        ]
    };
    let values: Vec<f64> = mesh.coords.iter().map(|x| u(*x)).collect();
    let t = ElementTable::new(ct, 3);
    let nn = ct.n_nodes();
    let mut dp = vec![[0.0; 3]; nn];
    let mut coords = Vec::new();
    for id in mesh.cells_of_dim(3) {
        mesh.cell_coords_into(id, &mut coords);
        let nodes = mesh.cell_nodes(id);
        for q in 0..t.n_points() {
            let mut x = [0.0; 3];
            let mut uh = 0.0;
            for a in 0..nn {
                for k in 0..3 {
                    x[k] += t.shape(q)[a] * coords[a][k];
                }
                uh += t.shape(q)[a] * values[nodes[a]];
            }
            assert!((uh - u(x)).abs() < 1e-11, "{ct} {id:?}: {uh} vs {}", u(x));
            let det = physical_gradients_into(3, t.grad(q), &coords, &mut dp);
            assert!(det > 0.0);
            let g = grad(x);
            for k in 0..3 {
                let gh: f64 = (0..nn).map(|a| dp[a][k] * values[nodes[a]]).sum();
                assert!((gh - g[k]).abs() < 1e-10, "{ct} d/dx{k}: {gh} vs {}", g[k]);
            }
        }
    }
    let _ = reference_nodes(ct);
}

#[rstest]
fn rectangle_meshes(#[values(CellType::Quad4, CellType::Tri3)] ct: CellType) {
    let mesh = rectangle_mesh([1.0, 2.0], [3.0, 0.5], [5, 3], ct);
    mesh.validate().unwrap();
    assert_eq!(mesh.dim(), 2);
    let area = group_measure(&mesh, mesh.group("domain").unwrap());
    assert!((area - 1.5).abs() < 1e-13);
    let ext = exterior_facets(&mesh);
    assert_eq!(ext.len(), 2 * (5 + 3));
    for f in &ext {
        let (ft, nodes) = facet_nodes(&mesh, *f);
        let coords: Vec<[f64; 3]> = nodes.iter().map(|&n| mesh.coords[n]).collect();
        let n = surface_normal(&coords, ft, [0.0; 3]);
        let fc = centroid(&mesh, &nodes);
        assert!(dot(n, sub(fc, mesh.cell_centroid(f.cell))) > 0.0);
    }
    for (name, len) in [("xmin", 0.5), ("xmax", 0.5), ("ymin", 3.0), ("ymax", 3.0)] {
        let g = mesh.group(name).unwrap();
        assert!((group_measure(&mesh, g) - len).abs() < 1e-13);
        for (gc, f) in g.cells.iter().zip(group_facets(&mesh, g).unwrap()) {
            assert_eq!(facet_nodes(&mesh, f).1.as_slice(), mesh.cell_nodes(*gc), "{name}");
        }
    }
    assert!(mesh.check().is_ok(), "{}", mesh.check());
    let quad = to_second_order(&mesh, true);
    let area2 = group_measure(&quad, quad.group("domain").unwrap());
    assert!((area2 - 1.5).abs() < 1e-13);
    for g in &quad.groups[1..] {
        for (gc, f) in g.cells.iter().zip(group_facets(&quad, g).unwrap()) {
            assert_eq!(facet_nodes(&quad, f).1.as_slice(), quad.cell_nodes(*gc));
        }
    }
    assert!(quad.check().is_ok());
    let _ = cell_measure(&quad, CellId { block: 0, index: 0 });
}

#[test]
fn tet_box_sizes() {
    let n = 5;
    let mesh = box_mesh(&BoxSpec::unit_cube(n, CellType::Tet4));
    assert_eq!(mesh.n_nodes(), (n + 1).pow(3));
    assert_eq!(mesh.blocks[0].len(), 6 * n.pow(3));
    assert_eq!(mesh.blocks[1].len(), 6 * 2 * n * n);
    // Node numbering i + (nx+1)(j + (ny+1)k).
    let (i, j, k) = (2, 3, 4);
    let x = mesh.coords[i + (n + 1) * (j + (n + 1) * k)];
    let want = [i as f64 / n as f64, j as f64 / n as f64, k as f64 / n as f64];
    assert!((0..3).all(|d| (x[d] - want[d]).abs() < 1e-15), "{x:?}");
    let _ = ALL_BOX;
}

/// The brief's performance target: a 100³-cube Tet4 box (6·10⁶ tets) in about a second.
#[test]
#[ignore = "performance measurement, run with --ignored"]
fn big_tet_box_is_fast() {
    let t0 = std::time::Instant::now();
    let mesh = box_mesh(&BoxSpec::unit_cube(100, CellType::Tet4));
    let dt = t0.elapsed();
    assert_eq!(mesh.blocks[0].len(), 6_000_000);
    assert!(dt.as_secs_f64() < 2.0, "box_mesh(100) took {dt:?}");
    let t1 = std::time::Instant::now();
    let ext = exterior_facets(&mesh);
    let dt_ext = t1.elapsed();
    assert_eq!(ext.len(), 120_000);
    let t2 = std::time::Instant::now();
    let report = mesh.check();
    let dt_check = t2.elapsed();
    assert!(report.is_ok());
    drop(mesh);
    let t3 = std::time::Instant::now();
    let tet10 = box_mesh(&BoxSpec::unit_cube(40, CellType::Tet10));
    let dt_tet10 = t3.elapsed();
    assert_eq!(tet10.n_nodes(), 81usize.pow(3));
    eprintln!(
        "box_mesh(100, tet4) {dt:?}, exterior_facets {dt_ext:?}, check {dt_check:?}, \
         box_mesh(40, tet10) {dt_tet10:?}"
    );
}

/// A prism mesh extruded from a triangulated rectangle: volume, exterior facets (triangles and
/// quadrilaterals) with outward normals, quality.
#[test]
fn extruded_prisms() {
    let base = rectangle_mesh([0.0, 0.0], [2.0, 1.0], [2, 1], CellType::Tri3);
    let n = base.n_nodes();
    let h = 0.5;
    let mut coords = base.coords.clone();
    coords.extend(base.coords.iter().map(|p| [p[0], p[1], h]));
    let mut prisms = gradfem_mesh::CellBlock::new(CellType::Prism6);
    for (i, t) in base.blocks[0].cells().enumerate() {
        prisms.push(&[t[0], t[1], t[2], t[0] + n, t[1] + n, t[2] + n], i as u64 + 1);
    }
    let mesh = Mesh {
        node_tags: (1..=coords.len() as u64).collect(),
        coords,
        blocks: vec![prisms],
        groups: vec![],
    };
    let vol: f64 = mesh.cells_of_dim(3).map(|c| cell_measure(&mesh, c)).sum();
    assert!((vol - 2.0 * 1.0 * h).abs() < 1e-14);
    let ext = exterior_facets(&mesh);
    assert_eq!(ext.len(), 4 + 4 + 2 * (2 + 1));
    for f in &ext {
        let (ft, nodes) = facet_nodes(&mesh, *f);
        let coords: Vec<[f64; 3]> = nodes.iter().map(|&n| mesh.coords[n]).collect();
        let normal = surface_normal(&coords, ft, facet_centre(ft));
        let fc = centroid(&mesh, &nodes);
        assert!(dot(normal, sub(fc, mesh.cell_centroid(f.cell))) > 0.0, "{f:?}");
    }
    assert!(mesh.check().is_ok(), "{}", mesh.check());
}

/// A surface mesh in 3D (the boundary of a box, as Quad4 cells) is checked with unsigned
/// area densities: no false "inverted" cells for faces whose normal is not +z.
#[test]
fn surface_mesh_in_3d_is_not_inverted() {
    let vol = box_mesh(&spec(CellType::Hex8));
    let mut surf = vol.clone();
    surf.blocks.truncate(2);
    surf.blocks[0] = gradfem_mesh::CellBlock::new(CellType::Hex8);
    surf.groups.retain(|g| g.dim == 2);
    assert_eq!(surf.dim(), 2);
    let report = surf.check();
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.n_cells, vol.blocks[1].len());
}
