//! Results files: round trip through `read_results`, structure of the `.xdmf` against the `.h5`,
//! and the `.h5` read by h5py.

use std::path::{Path, PathBuf};
use std::process::Command;

use gradfem_io::h5::{
    CellSelection, Centering, Field, FieldValues, H5Error, Results, ResultsData, Step,
    mesh_group_fields, read_results,
};
use gradfem_mesh::cell::CellType;
use gradfem_mesh::mesh::{CellBlock, CellId, Mesh, PhysicalGroup};
use rstest::rstest;

/// Two tets sharing face 1-2-3, two boundary triangles, overlapping groups, tags that are not
/// positions, and a group name that needs escaping in HDF5 and XDMF.
fn mixed_mesh() -> Mesh {
    let coords =
        vec![[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 1.0]];
    let node_tags = vec![10, 11, 12, 13, 17];
    let mut tets = CellBlock::new(CellType::Tet4);
    tets.push(&[0, 1, 2, 3], 101);
    tets.push(&[1, 2, 3, 4], 102);
    let mut tris = CellBlock::new(CellType::Tri3);
    tris.push(&[0, 2, 1], 201);
    tris.push(&[0, 1, 3], 202);
    let groups = vec![
        PhysicalGroup {
            name: "solid".into(),
            tag: 1,
            dim: 3,
            cells: vec![CellId { block: 1, index: 0 }, CellId { block: 1, index: 1 }],
        },
        PhysicalGroup {
            name: "corner".into(),
            tag: 5,
            dim: 3,
            cells: vec![CellId { block: 1, index: 1 }],
        },
        PhysicalGroup {
            name: "bottom".into(),
            tag: 2,
            dim: 2,
            cells: vec![CellId { block: 0, index: 0 }],
        },
        PhysicalGroup {
            name: "front face/y=0".into(),
            tag: 3,
            dim: 2,
            cells: vec![CellId { block: 0, index: 1 }],
        },
    ];
    // Triangles first, so the tets (top dimension) do not start at cell 0 under `All`.
    let mesh = Mesh { coords, node_tags, blocks: vec![tris, tets], groups };
    mesh.validate().unwrap();
    mesh
}

/// Values with awkward bits (negative zero, subnormals, tiny differences) to catch any
/// conversion on the way.
fn awkward(i: usize, t: f64) -> f64 {
    match i % 4 {
        0 => -0.0,
        1 => f64::MIN_POSITIVE / 8.0,
        2 => 0.1 + t + i as f64 * f64::EPSILON,
        _ => -1.0e300 * (1.0 + t),
    }
}

fn step(mesh: &Mesh, n_cells: usize, time: f64) -> Step {
    let t_field: Vec<f64> =
        mesh.coords.iter().map(|p| p[0] + 2.0 * p[1] + 3.0 * p[2] + time).collect();
    let u: Vec<[f64; 3]> =
        (0..mesh.n_nodes()).map(|i| [awkward(i, time), i as f64, -(i as f64) * time]).collect();
    let node_tensor: Vec<[f64; 9]> =
        (0..mesh.n_nodes()).map(|i| std::array::from_fn(|j| awkward(i + j, time))).collect();
    let sigma: Vec<[f64; 9]> =
        (0..n_cells).map(|c| std::array::from_fn(|j| (10 * c + j) as f64 + time)).collect();
    let vm: Vec<f64> = (0..n_cells).map(|c| awkward(c, time)).collect();
    let flux: Vec<[f64; 3]> = (0..n_cells).map(|c| [c as f64, time, 0.5]).collect();
    let sym: Vec<[f64; 6]> =
        (0..n_cells).map(|c| std::array::from_fn(|j| awkward(6 * c + j, time))).collect();
    Step {
        time,
        fields: vec![
            Field::node("T", "K", FieldValues::Scalar(t_field)),
            Field::node("displacement", "m", FieldValues::Vector(u)),
            Field::node("strain at nodes", "1", FieldValues::Tensor(node_tensor)),
            Field::cell("stress", "Pa", FieldValues::Tensor(sigma)),
            Field::cell("von Mises", "Pa", FieldValues::Scalar(vm)),
            Field::cell("heat flux", "W/m²", FieldValues::Vector(flux)),
            Field::cell("stress tensor6", "Pa", FieldValues::SymTensor(sym)),
        ],
    }
}

/// Write the mixed mesh with group fields, a static parameter field and two steps.
fn write_sample(dir: &Path, sel: CellSelection) -> (PathBuf, Mesh, Vec<Field>, Vec<Step>) {
    let mesh = mixed_mesh();
    let mut results = Results::new(&mesh, sel);
    let n_cells = results.n_cells();
    let mut statics = mesh_group_fields(&mesh, sel);
    statics.push(Field::cell(
        "conductivity",
        "W/(m·K)",
        FieldValues::Scalar((0..n_cells).map(|c| 1.5 * c as f64).collect()),
    ));
    for f in &statics {
        results.add_static_cell_field(f.clone());
    }
    let steps = vec![step(&mesh, n_cells, 0.0), step(&mesh, n_cells, 0.25)];
    for s in &steps {
        results.add_step(s.clone());
    }
    let path = dir.join("run.xdmf");
    results.write(&path).unwrap();
    (path, mesh, statics, steps)
}

fn bits(v: &FieldValues) -> Vec<u64> {
    v.as_flat().iter().map(|x| x.to_bits()).collect()
}

#[rstest]
#[case(CellSelection::All, 4)]
#[case(CellSelection::TopDimension, 2)]
fn round_trip_is_bit_exact(#[case] sel: CellSelection, #[case] n_cells: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (path, mesh, statics, steps) = write_sample(dir.path(), sel);
    assert!(dir.path().join("run.h5").exists());
    assert!(dir.path().join("run.xdmf").exists());

    // Either file name reads the .h5.
    let data: ResultsData = read_results(&dir.path().join("run.h5")).unwrap();
    assert_eq!(data, read_results(&path).unwrap());
    assert_eq!(data.mesh, mesh);
    assert_eq!(data.selection, sel);
    assert_eq!(data.steps.len(), 2);
    assert_eq!(data.steps[1].time, 0.25);

    let check = |got: &[Field], want: &[Field]| {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.name, w.name);
            assert_eq!(g.centering, w.centering);
            assert_eq!(g.values.kind_name(), w.values.kind_name(), "{}", w.name);
            assert_eq!(g.unit, w.unit, "{}", w.name);
            assert_eq!(bits(&g.values), bits(&w.values), "{}", w.name);
        }
    };
    check(&data.static_fields, &statics);
    for (g, w) in data.steps.iter().zip(&steps) {
        assert_eq!(g.time.to_bits(), w.time.to_bits());
        check(&g.fields, &w.fields);
    }
    let stress = data.steps[0].fields.iter().find(|f| f.name == "stress").unwrap();
    assert_eq!(stress.values.len(), n_cells);
}

#[test]
fn group_fields_tag_and_mask_cells() {
    let mesh = mixed_mesh();
    let all = mesh_group_fields(&mesh, CellSelection::All);
    let names: Vec<&str> = all.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        ["physical_tag", "group:solid", "group:corner", "group:bottom", "group:front face/y=0"]
    );
    let vals = |f: &Field| f.values.as_flat().to_vec();
    // Cells: tri 0, tri 1, tet 0, tet 1. Tet 1 is in "solid" (tag 1) and "corner" (tag 5):
    // the first group wins.
    assert_eq!(vals(&all[0]), [2.0, 3.0, 1.0, 1.0]);
    assert_eq!(vals(&all[2]), [0.0, 0.0, 0.0, 1.0]);
    assert_eq!(vals(&all[4]), [0.0, 1.0, 0.0, 0.0]);
    assert!(all.iter().all(|f| f.centering == Centering::Cell));

    let top = mesh_group_fields(&mesh, CellSelection::TopDimension);
    let names: Vec<&str> = top.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["physical_tag", "group:solid", "group:corner"]);
    assert_eq!(vals(&top[0]), [1.0, 1.0]);
}

#[test]
#[should_panic(expected = "has 3 values, the mesh has 5 nodes")]
fn wrong_field_length_is_a_caller_error() {
    let mesh = mixed_mesh();
    let mut results = Results::new(&mesh, CellSelection::All);
    results.add_step(Step {
        time: 0.0,
        fields: vec![Field::node("T", "K", FieldValues::Scalar(vec![0.0; 3]))],
    });
}

#[test]
fn bad_paths_and_files_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mesh = mixed_mesh();
    let r = Results::new(&mesh, CellSelection::All);
    assert!(matches!(r.write(&dir.path().join("run.vtu")), Err(H5Error::Extension { .. })));
    let missing = read_results(&dir.path().join("nothing.h5")).unwrap_err();
    assert!(matches!(missing, H5Error::Io { .. }), "{missing}");
    assert!(missing.to_string().contains("nothing.h5"));

    // An HDF5 file that is not ours names what it found.
    let mut fb = hdf5_pure::FileBuilder::new();
    fb.create_dataset("x").with_f64_data(&[1.0]);
    let other = dir.path().join("other.h5");
    fb.write(&other).unwrap();
    let e = read_results(&other).unwrap_err();
    assert!(matches!(e, H5Error::NotResults { .. }), "{e}");

    // A results file with a dataset of the wrong shape names the dataset.
    let (_, mesh, ..) = write_sample(dir.path(), CellSelection::All);
    let mut fb = hdf5_pure::FileBuilder::new();
    fb.set_attr("format", hdf5_pure::AttrValue::String("gradfem-results".into()));
    fb.set_attr("version", hdf5_pure::AttrValue::I64(1));
    fb.set_attr("cell_selection", hdf5_pure::AttrValue::String("all".into()));
    let mut g = fb.create_group("mesh");
    g.create_dataset("coordinates").with_f64_data(mesh.coords.as_flattened());
    fb.add_group(g.finish());
    let bad = dir.path().join("bad.h5");
    fb.write(&bad).unwrap();
    let e = read_results(&bad).unwrap_err();
    match &e {
        H5Error::Malformed { object, .. } => assert_eq!(object, "/mesh/coordinates"),
        other => panic!("expected Malformed, got {other}"),
    }
}

#[test]
fn rewriting_replaces_both_files() {
    let dir = tempfile::tempdir().unwrap();
    write_sample(dir.path(), CellSelection::All);
    let mesh = mixed_mesh();
    let mut r = Results::new(&mesh, CellSelection::TopDimension);
    r.add_step(Step { time: 9.0, fields: vec![] });
    r.write(&dir.path().join("run.h5")).unwrap();
    let data = read_results(&dir.path().join("run.h5")).unwrap();
    assert_eq!(data.steps.len(), 1);
    assert_eq!(data.steps[0].time, 9.0);
    let xdmf = std::fs::read_to_string(dir.path().join("run.xdmf")).unwrap();
    assert!(xdmf.contains("<Time Value=\"9.0\"/>"), "{xdmf}");
    // No temporaries left behind.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains(".tmp-")), "{names:?}");
}

// ---------------------------------------------------------------------------------------------
// XDMF structure

/// Parse a `Dimensions` attribute.
fn dims(node: roxmltree::Node<'_, '_>) -> Vec<u64> {
    node.attribute("Dimensions")
        .unwrap_or_else(|| panic!("DataItem without Dimensions: {node:?}"))
        .split_whitespace()
        .map(|d| d.parse().unwrap())
        .collect()
}

/// Check one `Format="HDF"` DataItem against the .h5 file and return its dimensions.
fn check_heavy_item(dir: &Path, item: roxmltree::Node<'_, '_>) -> Vec<u64> {
    let text = item.text().unwrap().trim();
    let (file, object) = text.split_once(":/").unwrap_or_else(|| panic!("bad reference {text}"));
    assert_eq!(file, "run.h5", "reference must be relative to the .xdmf");
    let h5 = hdf5_pure::File::open(dir.join(file)).unwrap();
    let ds = h5.dataset(&format!("/{object}")).unwrap_or_else(|e| panic!("{text}: {e}"));
    let shape = ds.shape().unwrap();
    let d = dims(item);
    assert_eq!(shape, d, "{text}: dataset shape vs Dimensions");
    let (number_type, precision) =
        (item.attribute("NumberType").unwrap(), item.attribute("Precision").unwrap());
    let expected = match (number_type, precision) {
        ("Float", "8") => hdf5_pure::DType::F64,
        ("Int", "8") => hdf5_pure::DType::I64,
        other => panic!("{text}: unexpected number type {other:?}"),
    };
    assert_eq!(ds.dtype().unwrap(), expected, "{text}");
    d
}

#[rstest]
#[case(CellSelection::All)]
#[case(CellSelection::TopDimension)]
fn xdmf_refers_to_existing_datasets_with_the_right_dimensions(#[case] sel: CellSelection) {
    let dir = tempfile::tempdir().unwrap();
    let (path, mesh, statics, steps) = write_sample(dir.path(), sel);
    let text = std::fs::read_to_string(&path).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "Xdmf");
    assert_eq!(root.attribute("Version"), Some("3.0"));
    // Whole datasets only: a hyperslab would be dropped by ParaView's readers.
    assert!(!text.contains("HyperSlab"), "{text}");

    let temporal = root
        .descendants()
        .find(|n| n.has_tag_name("Grid") && n.attribute("CollectionType") == Some("Temporal"))
        .unwrap();
    let step_grids: Vec<_> = temporal.children().filter(|n| n.has_tag_name("Grid")).collect();
    assert_eq!(step_grids.len(), steps.len());
    let n_cells = sel.n_cells(&mesh) as u64;
    for (g, st) in step_grids.iter().zip(&steps) {
        // One uniform grid per step with every written cell.
        assert_eq!(g.attribute("GridType"), Some("Uniform"));
        let time = g.children().find(|n| n.has_tag_name("Time")).unwrap();
        assert_eq!(time.attribute("Value").unwrap().parse::<f64>().unwrap(), st.time);
        let topo = g.children().find(|n| n.has_tag_name("Topology")).unwrap();
        let n_el: u64 = topo.attribute("NumberOfElements").unwrap().parse().unwrap();
        assert_eq!(n_el, n_cells);
        let item = topo.children().find(|n| n.has_tag_name("DataItem")).unwrap();
        let d = check_heavy_item(dir.path(), item);
        match sel {
            // Triangles and tetrahedra: a mixed topology, [type, nodes…] per cell.
            CellSelection::All => {
                assert_eq!(topo.attribute("TopologyType"), Some("Mixed"));
                assert_eq!(d, [2 * (1 + 3) + 2 * (1 + 4)]);
            }
            CellSelection::TopDimension => {
                assert_eq!(topo.attribute("TopologyType"), Some("Tetrahedron"));
                assert_eq!(d, [2, 4]);
            }
        }
        let geo = g.children().find(|n| n.has_tag_name("Geometry")).unwrap();
        assert_eq!(geo.attribute("GeometryType"), Some("XYZ"));
        let item = geo.children().find(|n| n.has_tag_name("DataItem")).unwrap();
        assert_eq!(check_heavy_item(dir.path(), item), [mesh.n_nodes() as u64, 3]);

        let attrs: Vec<_> = g.children().filter(|n| n.has_tag_name("Attribute")).collect();
        assert_eq!(attrs.len(), statics.len() + st.fields.len());
        for a in attrs {
            let name = a.attribute("Name").unwrap();
            let field = statics.iter().chain(&st.fields).find(|f| f.name == name).unwrap();
            let c = field.values.n_components() as u64;
            assert_eq!(a.attribute("AttributeType"), Some(field.values.xdmf_type()), "{name}");
            let item = a.children().find(|n| n.has_tag_name("DataItem")).unwrap();
            let entities = match (field.centering, a.attribute("Center")) {
                (Centering::Node, Some("Node")) => mesh.n_nodes() as u64,
                (Centering::Cell, Some("Cell")) => n_cells,
                other => panic!("{name}: centering {other:?}"),
            };
            let expect_dims = if c == 1 { vec![entities] } else { vec![entities, c] };
            assert_eq!(check_heavy_item(dir.path(), item), expect_dims, "{name}");
        }
    }
}

/// The mixed topology lists each cell's XDMF type and its nodes in VTK order, blocks in
/// mesh order: the same cells as the per-block topologies.
#[test]
fn the_mixed_topology_holds_every_block_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mesh, _, _) = write_sample(dir.path(), CellSelection::All);
    let h5 = hdf5_pure::File::open(dir.path().join("run.h5")).unwrap();
    let mixed = h5.dataset("/mesh/topology/mixed").unwrap().read_i64().unwrap();
    let mut expected = Vec::new();
    for (b, blk) in mesh.blocks.iter().enumerate() {
        let topo = h5
            .dataset(&format!("/mesh/topology/{b}_{}", blk.cell_type.name()))
            .unwrap()
            .read_i64()
            .unwrap();
        let code = match blk.cell_type.name() {
            "tri3" => 0x4,
            "tet4" => 0x6,
            other => panic!("{other}"),
        };
        for cell in topo.chunks_exact(blk.cell_type.n_nodes()) {
            expected.push(code);
            expected.extend_from_slice(cell);
        }
    }
    assert_eq!(mixed, expected);
}

#[test]
fn xdmf_without_steps_is_one_uniform_grid() {
    let dir = tempfile::tempdir().unwrap();
    let mesh = mixed_mesh();
    let mut r = Results::new(&mesh, CellSelection::All);
    for f in mesh_group_fields(&mesh, CellSelection::All) {
        r.add_static_cell_field(f);
    }
    r.write(&dir.path().join("mesh.h5")).unwrap();
    let text = std::fs::read_to_string(dir.path().join("mesh.xdmf")).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let domain = doc.root_element().children().find(|n| n.has_tag_name("Domain")).unwrap();
    let top: Vec<_> = domain.children().filter(|n| n.has_tag_name("Grid")).collect();
    assert_eq!(top.len(), 1);
    assert_eq!(top[0].attribute("GridType"), Some("Uniform"));
    // The group masks refer to their whole datasets, over facets and volume cells alike.
    assert!(text.contains("Name=\"group:front face/y=0\""), "{text}");
    assert!(text.contains("mesh.h5:/static/group%3Afront%20face%2Fy=0"), "{text}");
    assert!(!text.contains("HyperSlab"), "{text}");
    let data = read_results(&dir.path().join("mesh.xdmf")).unwrap();
    assert!(data.steps.is_empty());
    assert_eq!(data.static_fields.len(), 5);
}

// ---------------------------------------------------------------------------------------------
// h5py

/// Whether `python3` can import h5py and numpy.
fn h5py_available() -> bool {
    Command::new(python())
        .args(["-c", "import h5py, numpy"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn h5py_reads_the_layout() {
    if !h5py_available() {
        if std::env::var("GRADFEM_REQUIRE_H5PY").as_deref() == Ok("1") {
            panic!("GRADFEM_REQUIRE_H5PY=1 but `python3 -c 'import h5py, numpy'` fails");
        }
        println!("skipped: h5py not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_, mesh, ..) = write_sample(dir.path(), CellSelection::All);
    // A second file with quadratic cells checks the VTK permutation from Python as well.
    let quad = quadratic_mesh();
    let mut r = Results::new(&quad, CellSelection::All);
    r.add_step(Step {
        time: 2.0,
        fields: vec![Field::node(
            "T",
            "K",
            FieldValues::Scalar(
                quad.coords.iter().map(|p| p[0] + 2.0 * p[1] + 3.0 * p[2] + 2.0).collect(),
            ),
        )],
    });
    r.write(&dir.path().join("quad.h5")).unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/check_h5.py");
    for (file, n_nodes) in [("run.h5", mesh.n_nodes()), ("quad.h5", quad.n_nodes())] {
        let out = Command::new(python())
            .arg(&script)
            .arg(dir.path().join(file))
            .arg(n_nodes.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "check_h5.py {file} failed:\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
    }
}

/// One Tet10 and one Prism6 (blocks of different dimension orders are not needed here).
fn quadratic_mesh() -> Mesh {
    let mut coords = vec![[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    let mut tet = CellBlock::new(CellType::Tet10);
    let mut nodes: Vec<usize> = (0..4).collect();
    for [a, b] in CellType::Tet10.edges() {
        let (pa, pb) = (coords[*a], coords[*b]);
        coords.push(std::array::from_fn(|k| 0.5 * (pa[k] + pb[k])));
        nodes.push(coords.len() - 1);
    }
    tet.push(&nodes, 1);
    let base = coords.len();
    for p in [
        [0.0, 0.0, 2.0],
        [1.0, 0.0, 2.0],
        [0.0, 1.0, 2.0],
        [0.0, 0.0, 3.0],
        [1.0, 0.0, 3.0],
        [0.0, 1.0, 3.0],
    ] {
        coords.push(p);
    }
    let mut prism = CellBlock::new(CellType::Prism6);
    prism.push(&(base..base + 6).collect::<Vec<_>>(), 2);
    let node_tags = (1..=coords.len() as u64).collect();
    Mesh { coords, node_tags, blocks: vec![tet, prism], groups: vec![] }
}

/// Timing of a 10⁶-node write and read (run with `--ignored --nocapture`): a 100³-node Hex8
/// grid with a nodal scalar and vector and a cell scalar over two steps.
#[test]
#[ignore = "timing run, ~1e6 nodes"]
fn large_mesh_timing() {
    let n = 100;
    let idx = |i: usize, j: usize, k: usize| (k * n + j) * n + i;
    let mut coords = Vec::with_capacity(n * n * n);
    for k in 0..n {
        for j in 0..n {
            for i in 0..n {
                coords.push([i as f64, j as f64, k as f64]);
            }
        }
    }
    let mut hex = CellBlock::new(CellType::Hex8);
    hex.connectivity.reserve(8 * (n - 1).pow(3));
    for k in 0..n - 1 {
        for j in 0..n - 1 {
            for i in 0..n - 1 {
                let c = [
                    idx(i, j, k),
                    idx(i + 1, j, k),
                    idx(i + 1, j + 1, k),
                    idx(i, j + 1, k),
                    idx(i, j, k + 1),
                    idx(i + 1, j, k + 1),
                    idx(i + 1, j + 1, k + 1),
                    idx(i, j + 1, k + 1),
                ];
                hex.push(&c, hex.len() as u64 + 1);
            }
        }
    }
    let n_nodes = coords.len();
    let mesh = Mesh {
        node_tags: (1..=n_nodes as u64).collect(),
        coords,
        blocks: vec![hex],
        groups: vec![],
    };
    let n_cells = mesh.blocks[0].len();
    let mut r = Results::new(&mesh, CellSelection::All);
    for s in 0..2 {
        let t = s as f64;
        r.add_step(Step {
            time: t,
            fields: vec![
                Field::node(
                    "T",
                    "K",
                    FieldValues::Scalar(mesh.coords.iter().map(|p| p[0] + t).collect()),
                ),
                Field::node("u", "m", FieldValues::Vector(mesh.coords.clone())),
                Field::cell("q", "W/m³", FieldValues::Scalar(vec![t; n_cells])),
            ],
        });
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.h5");
    let t0 = std::time::Instant::now();
    r.write(&path).unwrap();
    let write_s = t0.elapsed().as_secs_f64();
    let size = std::fs::metadata(&path).unwrap().len();
    let t0 = std::time::Instant::now();
    let data = read_results(&path).unwrap();
    let read_s = t0.elapsed().as_secs_f64();
    assert_eq!(data.mesh.n_nodes(), n_nodes);
    println!(
        "{n_nodes} nodes, {n_cells} hex8, 2 steps: write {write_s:.2} s, read {read_s:.2} s, {:.0} MB",
        size as f64 / 1e6
    );
}

/// The Python interpreter of the checks: `GRADFEM_PYTHON` (the project venv that
/// `scripts/test.sh` sets up), else `python3` on the PATH.
fn python() -> String {
    std::env::var("GRADFEM_PYTHON").unwrap_or_else(|_| "python3".to_string())
}
