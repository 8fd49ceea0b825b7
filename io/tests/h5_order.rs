//! The XDMF topology written to `/mesh/topology` is in VTK node order: checked geometrically on
//! single box/simplex elements whose nodes are placed from gradfem's (gmsh) definitions, against
//! VTK's definitions written out here independently of the library's tables.

use std::path::Path;

use gradfem_io::h5::{CellSelection, Results};
use gradfem_mesh::cell::CellType;
use gradfem_mesh::mesh::{CellBlock, Mesh};
use rstest::rstest;

type P = [f64; 3];

fn mid(a: P, b: P) -> P {
    std::array::from_fn(|k| 0.5 * (a[k] + b[k]))
}

fn mean(ps: &[P]) -> P {
    std::array::from_fn(|k| ps.iter().map(|p| p[k]).sum::<f64>() / ps.len() as f64)
}

/// Reference nodes of a cell in gmsh order, from gradfem's documented vertices, its `edges()`
/// (mid-edge nodes) and `facets()` (face centres of `Hex27`), then mapped to a box
/// `[1,3] × [-2,4] × [0.5,5.5]` (an affine map keeps midpoints and centres).
fn gmsh_nodes(ct: CellType) -> Vec<P> {
    let hex = [
        [-1., -1., -1.],
        [1., -1., -1.],
        [1., 1., -1.],
        [-1., 1., -1.],
        [-1., -1., 1.],
        [1., -1., 1.],
        [1., 1., 1.],
        [-1., 1., 1.],
    ];
    let mut p: Vec<P> = match ct.linear() {
        CellType::Hex8 => hex.to_vec(),
        CellType::Tet4 => vec![[0., 0., 0.], [1., 0., 0.], [0., 1., 0.], [0., 0., 1.]],
        CellType::Prism6 => {
            vec![
                [0., 0., -1.],
                [1., 0., -1.],
                [0., 1., -1.],
                [0., 0., 1.],
                [1., 0., 1.],
                [0., 1., 1.],
            ]
        }
        CellType::Quad4 => hex[..4].iter().map(|q| [q[0], q[1], 0.0]).collect(),
        CellType::Tri3 => vec![[0., 0., 0.], [1., 0., 0.], [0., 1., 0.]],
        other => panic!("no reference nodes for {other}"),
    };
    if ct.order() == 2 {
        for [a, b] in ct.edges() {
            p.push(mid(p[*a], p[*b]));
        }
    }
    if ct == CellType::Hex27 {
        for facet in ct.facets() {
            let corners: Vec<P> = facet.nodes[..4].iter().map(|&i| p[i]).collect();
            assert_eq!(facet.nodes[8], p.len(), "face centres come in facet order");
            p.push(mean(&corners));
        }
        p.push([0.0; 3]);
    }
    if ct == CellType::Quad9 {
        p.push([0.0; 3]);
    }
    assert_eq!(p.len(), ct.n_nodes(), "{ct}");
    p.iter().map(|q| [2.0 + q[0], 1.0 + 3.0 * q[1], 3.0 + 2.5 * q[2]]).collect()
}

/// Write one cell of type `ct` and read back its topology row as coordinates.
fn vtk_cell_coords(ct: CellType, dir: &Path) -> Vec<P> {
    let coords = gmsh_nodes(ct);
    let mut blk = CellBlock::new(ct);
    // Nodes stored in reverse so node index and local position differ.
    let n = coords.len();
    let stored: Vec<P> = coords.iter().rev().copied().collect();
    let local: Vec<usize> = (0..n).map(|i| n - 1 - i).collect();
    blk.push(&local, 7);
    let mesh = Mesh {
        coords: stored.clone(),
        node_tags: (1..=n as u64).collect(),
        blocks: vec![blk],
        groups: vec![],
    };
    let path = dir.join(format!("{ct}.h5"));
    Results::new(&mesh, CellSelection::All).write(&path).unwrap();
    let f = hdf5_pure::File::open(&path).unwrap();
    let ds = f.dataset(&format!("/mesh/topology/0_{ct}")).unwrap();
    assert_eq!(ds.shape().unwrap(), [1, n as u64]);
    ds.read_i64().unwrap().iter().map(|&i| stored[i as usize]).collect()
}

fn assert_close(a: P, b: P, what: &str) {
    assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-12), "{what}: {a:?} vs {b:?}");
}

/// VTK's mid-edge node order for the quadratic hexahedron.
const VTK_HEX_EDGES: [[usize; 2]; 12] = [
    [0, 1],
    [1, 2],
    [2, 3],
    [3, 0],
    [4, 5],
    [5, 6],
    [6, 7],
    [7, 4],
    [0, 4],
    [1, 5],
    [2, 6],
    [3, 7],
];

#[rstest]
#[case(CellType::Hex20)]
#[case(CellType::Hex27)]
fn hex_mid_edges_lie_on_vtk_edges(#[case] ct: CellType) {
    let dir = tempfile::tempdir().unwrap();
    let p = vtk_cell_coords(ct, dir.path());
    let g = gmsh_nodes(ct);
    assert_eq!(&p[..8], &g[..8], "vertices keep their order");
    for (m, [a, b]) in VTK_HEX_EDGES.iter().enumerate() {
        assert_close(p[8 + m], mid(p[*a], p[*b]), &format!("{ct} node {}", 8 + m));
    }
}

#[test]
fn hex27_face_centres_follow_vtk_order() {
    let dir = tempfile::tempdir().unwrap();
    let p = vtk_cell_coords(CellType::Hex27, dir.path());
    // Box [1,3] × [-2,4] × [0.5,5.5]: VTK's faces x-, x+, y-, y+, z-, z+, then the centre.
    let c = [2.0, 1.0, 3.0];
    let expected = [
        [1.0, c[1], c[2]],
        [3.0, c[1], c[2]],
        [c[0], -2.0, c[2]],
        [c[0], 4.0, c[2]],
        [c[0], c[1], 0.5],
        [c[0], c[1], 5.5],
        c,
    ];
    for (m, e) in expected.iter().enumerate() {
        assert_close(p[20 + m], *e, &format!("hex27 node {}", 20 + m));
    }
}

#[test]
fn tet10_mid_edges_follow_vtk_order() {
    let dir = tempfile::tempdir().unwrap();
    let p = vtk_cell_coords(CellType::Tet10, dir.path());
    let vtk_edges = [[0, 1], [1, 2], [2, 0], [0, 3], [1, 3], [2, 3]];
    for (m, [a, b]) in vtk_edges.iter().enumerate() {
        assert_close(p[4 + m], mid(p[*a], p[*b]), &format!("tet10 node {}", 4 + m));
    }
}

#[test]
fn wedge_base_faces_away_from_the_top() {
    let dir = tempfile::tempdir().unwrap();
    let p = vtk_cell_coords(CellType::Prism6, dir.path());
    let (a, b) = (sub(p[1], p[0]), sub(p[2], p[0]));
    let normal = [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
    let up = sub(p[3], p[0]);
    assert!(normal.iter().zip(&up).map(|(x, y)| x * y).sum::<f64>() < 0.0);
    // Edges 0-3, 1-4, 2-5 are the vertical ones.
    for i in 0..3 {
        let d = sub(p[i + 3], p[i]);
        assert!(d[0].abs() < 1e-12 && d[1].abs() < 1e-12, "vertical edge {i}");
    }
}

fn sub(a: P, b: P) -> P {
    std::array::from_fn(|k| a[k] - b[k])
}

#[rstest]
#[case(CellType::Tri6, &[[0, 1], [1, 2], [2, 0]])]
#[case(CellType::Quad8, &[[0, 1], [1, 2], [2, 3], [3, 0]])]
#[case(CellType::Quad9, &[[0, 1], [1, 2], [2, 3], [3, 0]])]
fn surface_cells_keep_vtk_order(#[case] ct: CellType, #[case] vtk_edges: &[[usize; 2]]) {
    let dir = tempfile::tempdir().unwrap();
    let p = vtk_cell_coords(ct, dir.path());
    let nv = ct.n_vertices();
    for (m, [a, b]) in vtk_edges.iter().enumerate() {
        assert_close(p[nv + m], mid(p[*a], p[*b]), &format!("{ct} node {}", nv + m));
    }
    if ct == CellType::Quad9 {
        assert_close(p[8], mean(&p[..4]), "quad9 centre");
    }
}
