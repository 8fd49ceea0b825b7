//! The generated microactuator (`data/microactuator/README.md`): layout against the README,
//! volumes and areas against the analytic union, conformity, orientation, quality, and the
//! parameters (hot-arm width, refinement, cell order).

use std::collections::HashMap;

use gradfem_mesh::{
    ActuatorSpec, CellId, CellType, Mesh, Rect, actuator_mesh, add_plane_group, exterior_facets,
    facet_nodes, group_measure, surface_normal,
};
use rstest::rstest;

const UM: f64 = 1e-6;

/// The six surface groups that partition the exterior, as in the shared gmsh meshes.
const PARTITION: [&str; 6] = [
    "anchor_hot_outer_base",
    "anchor_hot_inner_base",
    "anchor_cold_base",
    "dimple_bases",
    "upper_surface",
    "other_exterior_surfaces",
];

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs())
}

fn assert_rect_um(r: Rect, expected: [f64; 4], what: &str) {
    let got = [r.x0, r.y0, r.width, r.height].map(|v| v / UM);
    for (g, e) in got.iter().zip(expected) {
        assert!((g - e).abs() < 1e-9, "{what}: {got:?} µm, README {expected:?}");
    }
}

/// Analytic volume and plan areas of the union: (layer area, support areas, volume).
fn analytic(spec: &ActuatorSpec) -> (f64, [f64; 6], f64) {
    let lay = spec.layout();
    let rects = lay.layer_rectangles();
    for (a, r) in rects.iter().enumerate() {
        for s in &rects[a + 1..] {
            assert!(!r.overlaps(s), "layer rectangles {r:?} and {s:?} overlap");
        }
    }
    let layer: f64 = rects.iter().map(Rect::area).sum();
    let supports = lay.supports().map(|r| r.area());
    let volume = layer * spec.thickness + supports.iter().sum::<f64>() * spec.post_height;
    (layer, supports, volume)
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

fn sorted_vertices(mesh: &Mesh, id: CellId) -> Vec<usize> {
    let ct = mesh.cell_type(id);
    let mut v = mesh.cell_nodes(id)[..ct.n_vertices()].to_vec();
    v.sort_unstable();
    v
}

#[test]
fn default_layout_is_the_readme_layout() {
    let spec = ActuatorSpec::default();
    let lay = spec.layout();
    let readme = [
        [90.0, 0.0, 150.0, 15.0],
        [50.0, 12.0, 40.0, 3.0],
        [40.0, 0.0, 10.0, 15.0],
        [35.0, 18.0, 205.0, 3.0],
        [25.0, 0.0, 10.0, 21.0],
        [10.0, 24.0, 230.0, 3.0],
        [0.0, 24.0, 10.0, 21.0],
        [237.0, 21.0, 3.0, 3.0],
        [237.0, 15.0, 3.0, 3.0],
    ];
    for (r, e) in lay.layer_rectangles().into_iter().zip(readme) {
        assert_rect_um(r, e, "layer rectangle");
    }
    assert_rect_um(lay.anchor_hot_outer, [3.0, 32.0, 4.0, 10.0], "outer hot-arm post");
    assert_rect_um(lay.anchor_hot_inner, [28.0, 3.0, 4.0, 10.0], "inner hot-arm post");
    assert_rect_um(lay.anchor_cold, [43.0, 3.0, 4.0, 10.0], "cold-arm post");
    let r = 1.5;
    let side = r * std::f64::consts::PI.sqrt();
    for (d, xc) in lay.dimples.iter().zip([202.5, 165.0, 127.5]) {
        assert_rect_um(*d, [xc - side / 2.0, 7.5 - side / 2.0, side, side], "dimple");
        assert!(close(d.area(), std::f64::consts::PI * (r * UM).powi(2), 1e-14));
    }
    // The posts stand under their pads, the dimples under the cold arm.
    let inside =
        |a: &Rect, b: &Rect| a.x0 >= b.x0 && a.x1() <= b.x1() && a.y0 >= b.y0 && a.y1() <= b.y1();
    assert!(inside(&lay.anchor_hot_outer, &lay.long_hot_pad));
    assert!(inside(&lay.anchor_hot_inner, &lay.short_hot_pad));
    assert!(inside(&lay.anchor_cold, &lay.cold_pad));
    assert!(lay.dimples.iter().all(|d| inside(d, &lay.cold_arm)));
}

/// Volumes, areas, groups, conformity, orientation and quality of one actuator mesh.
fn check_mesh(spec: &ActuatorSpec) -> Mesh {
    let mesh = actuator_mesh(spec).unwrap();
    mesh.validate().unwrap();
    let ct = spec.cell_type;
    let facet_type = ct.facets()[0].cell_type;
    assert_eq!(mesh.blocks.len(), 2);
    assert_eq!(mesh.blocks[0].cell_type, ct);
    assert_eq!(mesh.blocks[1].cell_type, facet_type);

    // Volumes against the analytic union.
    let (layer_area, supports, volume) = analytic(spec);
    let v_layer = group_measure(&mesh, mesh.group("polysilicon_layer").unwrap());
    let v_posts = group_measure(&mesh, mesh.group("posts").unwrap());
    assert!(close(v_layer, layer_area * spec.thickness, 1e-12), "layer {v_layer:e}");
    let v_supports = supports.iter().sum::<f64>() * spec.post_height;
    assert!(close(v_posts, v_supports, 1e-12), "posts {v_posts:e} vs {v_supports:e}");
    assert!(close(v_layer + v_posts, volume, 1e-12));
    let n_vol = mesh.blocks[0].len();
    assert_eq!(
        mesh.group("polysilicon_layer").unwrap().cells.len()
            + mesh.group("posts").unwrap().cells.len(),
        n_vol
    );

    // Areas of the surface groups.
    let area = |name: &str| group_measure(&mesh, mesh.group(name).unwrap());
    for (name, expected) in PARTITION[..3].iter().zip(&supports[..3]) {
        assert!(close(area(name), *expected, 1e-12), "{name}: {:e} vs {expected:e}", area(name));
    }
    let dimples: f64 = supports[3..].iter().sum();
    assert!(close(area("dimple_bases"), dimples, 1e-12));
    assert!(close(area("upper_surface"), layer_area, 1e-12));
    let lay = spec.layout();
    let tip_height = lay.long_hot_arm.y1() - lay.cold_arm.y0;
    assert!(close(area("free_end"), tip_height * spec.thickness, 1e-12));
    // Exterior area: top + bottom of the layer + the side walls of layer and supports.
    let total: f64 = PARTITION.iter().map(|g| area(g)).sum();
    assert!(total > 2.0 * layer_area);

    // Every node is used, no two nodes coincide.
    let mut used = vec![false; mesh.n_nodes()];
    for &n in &mesh.blocks[0].connectivity {
        used[n] = true;
    }
    assert!(used.iter().all(|&u| u), "unused nodes");
    let mut points: Vec<[u64; 3]> =
        mesh.coords.iter().map(|p| p.map(|x| (x / UM * 1e6).round() as u64)).collect();
    points.sort_unstable();
    let n = points.len();
    points.dedup();
    assert_eq!(points.len(), n, "duplicate nodes");

    // Conformity: each hex face is shared by at most two cells, and the faces of one cell are
    // exactly the exterior facets.
    let mut faces: HashMap<Vec<usize>, usize> = HashMap::new();
    let hex = &mesh.blocks[0];
    for nodes in hex.cells() {
        for f in ct.facets() {
            let mut key: Vec<usize> = f.nodes[..4].iter().map(|&l| nodes[l]).collect();
            key.sort_unstable();
            *faces.entry(key).or_default() += 1;
        }
    }
    assert!(faces.values().all(|&c| c == 1 || c == 2), "a face shared by more than two cells");
    let mut single: Vec<Vec<usize>> =
        faces.into_iter().filter(|(_, c)| *c == 1).map(|(k, _)| k).collect();
    single.sort();
    let exterior = exterior_facets(&mesh);
    let mut from_index: Vec<Vec<usize>> = exterior
        .iter()
        .map(|&f| {
            let (_, nodes) = facet_nodes(&mesh, f);
            let mut v = nodes[..4].to_vec();
            v.sort_unstable();
            v
        })
        .collect();
    from_index.sort();
    assert_eq!(single, from_index);

    // The six groups partition the exterior facets; the facet block is exactly that partition.
    let mut in_groups: Vec<Vec<usize>> = Vec::new();
    let mut seen = vec![false; mesh.blocks[1].len()];
    for name in PARTITION {
        let g = mesh.group(name).unwrap();
        assert_eq!(g.dim, 2, "{name}");
        assert!(!g.cells.is_empty(), "{name}");
        assert!(g.cells.windows(2).all(|w| w[0] < w[1]), "{name}: cells not sorted");
        for &c in &g.cells {
            assert_eq!(mesh.cell_type(c), facet_type);
            assert!(!seen[c.index], "{name}: facet {c:?} in two groups");
            seen[c.index] = true;
            in_groups.push(sorted_vertices(&mesh, c));
        }
    }
    assert!(seen.iter().all(|&s| s), "a facet cell in no group");
    in_groups.sort();
    assert_eq!(in_groups, from_index);
    let other = &mesh.group("other_exterior_surfaces").unwrap().cells;
    let free_end = &mesh.group("free_end").unwrap().cells;
    assert!(!free_end.is_empty());
    assert!(free_end.iter().all(|c| other.binary_search(c).is_ok()));

    // Orientation: facet normals point out of their cell; bases down, top up, tip along +x.
    let owner: HashMap<Vec<usize>, usize> = exterior
        .iter()
        .map(|&f| {
            let (_, nodes) = facet_nodes(&mesh, f);
            let mut v = nodes[..4].to_vec();
            v.sort_unstable();
            (v, f.cell.index)
        })
        .collect();
    let mut coords = Vec::new();
    let mut expect_normal = |name: &str, want: Option<[f64; 3]>| {
        for &c in &mesh.group(name).unwrap().cells {
            mesh.cell_coords_into(c, &mut coords);
            let nrm = surface_normal(&coords, facet_type, [0.0; 3]);
            let cell = owner[&sorted_vertices(&mesh, c)];
            let out = centroid(&mesh, mesh.cell_nodes(c));
            let inside = centroid(&mesh, hex.cell(cell));
            let d: f64 = (0..3).map(|k| nrm[k] * (out[k] - inside[k])).sum();
            assert!(d > 0.0, "{name}: facet {c:?} points inwards");
            if let Some(w) = want {
                assert!((0..3).all(|k| (nrm[k] - w[k]).abs() < 1e-12), "{name}: {nrm:?}");
            }
        }
    };
    for name in &PARTITION[..4] {
        expect_normal(name, Some([0.0, 0.0, -1.0]));
    }
    expect_normal("upper_surface", Some([0.0, 0.0, 1.0]));
    expect_normal("free_end", Some([1.0, 0.0, 0.0]));
    expect_normal("other_exterior_surfaces", None);

    // Quality: positive Jacobians everywhere, no shape warnings.
    let report = mesh.check();
    assert!(report.is_ok(), "{report}");
    assert!(report.min_det_j > 0.0);

    // Cell sizes respect the limits.
    for nodes in hex.cells() {
        let (lo, hi) = (mesh.coords[nodes[0]], mesh.coords[nodes[6]]);
        for k in 0..3 {
            let h = hi[k] - lo[k];
            assert!(h > 0.0 && h <= spec.max_cell_size[k] * (1.0 + 1e-9), "edge {h:e} on axis {k}");
        }
    }
    mesh
}

#[rstest]
fn default_actuator_mesh(#[values(CellType::Hex8, CellType::Hex20, CellType::Hex27)] ct: CellType) {
    let spec = ActuatorSpec { cell_type: ct, ..Default::default() };
    let mesh = check_mesh(&spec);
    let linear = check_mesh(&ActuatorSpec { cell_type: CellType::Hex8, ..Default::default() });
    // Same cells and facets whatever the order; second-order facets carry the face's mid nodes.
    assert_eq!(mesh.blocks[0].len(), linear.blocks[0].len());
    assert_eq!(mesh.blocks[1].len(), linear.blocks[1].len());
    assert_eq!(mesh.blocks[0].tags, linear.blocks[0].tags);
    assert_eq!(mesh.blocks[1].tags, linear.blocks[1].tags);
    assert_eq!(mesh.groups, linear.groups);
    let expected_nodes = match ct {
        CellType::Hex8 => linear.n_nodes(),
        _ => {
            let hex = &linear.blocks[0];
            let mut edges = std::collections::HashSet::new();
            let mut faces = std::collections::HashSet::new();
            for nodes in hex.cells() {
                for [a, b] in CellType::Hex8.edges() {
                    edges.insert((nodes[*a].min(nodes[*b]), nodes[*a].max(nodes[*b])));
                }
                for f in CellType::Hex8.facets() {
                    let mut k: Vec<usize> = f.nodes.iter().map(|&l| nodes[l]).collect();
                    k.sort_unstable();
                    faces.insert(k);
                }
            }
            let extra = if ct == CellType::Hex27 { faces.len() + hex.len() } else { 0 };
            linear.n_nodes() + edges.len() + extra
        }
    };
    assert_eq!(mesh.n_nodes(), expected_nodes);
}

#[test]
fn wider_hot_arms_move_the_layout() {
    let base = ActuatorSpec::default();
    let spec = ActuatorSpec { hot_arm_width: 4e-6, cell_type: CellType::Hex8, ..base.clone() };
    let (a, b) = (base.layout(), spec.layout());
    assert!(close(b.short_hot_arm.height, 4e-6, 1e-12));
    assert!(close(b.long_hot_arm.height, 4e-6, 1e-12));
    assert!(close(b.flexure.height, 4e-6, 1e-12));
    // The gaps are kept: cold arm | g | short arm | g | long arm.
    assert!(close(b.short_hot_arm.y0 - b.cold_arm.y1(), spec.gap, 1e-12));
    assert!(close(b.long_hot_arm.y0 - b.short_hot_arm.y1(), spec.gap, 1e-12));
    assert!(close(b.long_hot_arm.y0, 25e-6, 1e-12));
    assert!(close(b.long_hot_pad.height, 22e-6, 1e-12));
    // The tip links fill the gaps at x = L.
    assert!(close(b.tip_links[0].y0, b.short_hot_arm.y1(), 1e-12));
    assert!(close(b.tip_links[0].y1(), b.long_hot_arm.y0, 1e-12));
    assert!(close(b.tip_links[1].x0, spec.length - 4e-6, 1e-12));
    // Lengths along x do not depend on the hot-arm width.
    assert_eq!(a.cold_arm, b.cold_arm);
    assert_eq!(a.long_hot_arm.width, b.long_hot_arm.width);
    let mesh = check_mesh(&spec);
    let base_mesh = check_mesh(&ActuatorSpec { cell_type: CellType::Hex8, ..base });
    let (va, vb) = (
        group_measure(&base_mesh, base_mesh.group("polysilicon_layer").unwrap()),
        group_measure(&mesh, mesh.group("polysilicon_layer").unwrap()),
    );
    assert!(vb > va);
}

#[test]
fn refinement_halves_the_cells() {
    let spec = ActuatorSpec { cell_type: CellType::Hex8, ..Default::default() };
    let fine = spec.refined(2);
    for k in 0..3 {
        assert_eq!(fine.max_cell_size[k], spec.max_cell_size[k] / 2.0);
    }
    let coarse_mesh = check_mesh(&spec);
    let fine_mesh = check_mesh(&fine);
    // Every coarse interval is split into at least as many parts, so the fine grid has at
    // least 2^3 cells per coarse cell where a cell edge exceeded half the limit; overall the
    // count grows by well over 4.
    assert!(fine_mesh.blocks[0].len() > 4 * coarse_mesh.blocks[0].len());
    let v = |m: &Mesh| {
        group_measure(m, m.group("polysilicon_layer").unwrap())
            + group_measure(m, m.group("posts").unwrap())
    };
    assert!(close(v(&coarse_mesh), v(&fine_mesh), 1e-12));
}

#[test]
fn free_end_matches_the_plane_selection() {
    let mut mesh = actuator_mesh(&ActuatorSpec::default()).unwrap();
    let n = add_plane_group(&mut mesh, "tip", 0, 240e-6, 1e-9).unwrap();
    assert_eq!(n, mesh.group("free_end").unwrap().cells.len());
    assert_eq!(mesh.group("tip").unwrap().cells, mesh.group("free_end").unwrap().cells);
    // The substrate plane z = 0 holds exactly the post and dimple bases.
    let n = add_plane_group(&mut mesh, "substrate", 2, 0.0, 1e-9).unwrap();
    let bases: usize = PARTITION[..4].iter().map(|g| mesh.group(g).unwrap().cells.len()).sum();
    assert_eq!(n, bases);
}
