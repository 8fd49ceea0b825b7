//! Every gmsh file in `data/gmsh` reads and matches `manifest.json`; the same mesh from 2.2 and
//! 4.1, ASCII and binary, and after a `write_msh41` round trip is identical.

mod gmsh_common;

use std::collections::BTreeMap;

use gmsh_common::{assert_same_mesh, data_file, msh22_bytes};
use gradfem_io::gmsh::{read_msh, read_msh_bytes, write_msh41};
use gradfem_mesh::Mesh;
use rstest::rstest;
use serde_json::Value;

fn manifest() -> Value {
    let text = std::fs::read_to_string(data_file("manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an unsigned integer: {v}"))
}

/// Elements per gmsh type number ("Tetrahedron 4 (type 4)" → 4).
fn manifest_types(entry: &Value) -> BTreeMap<i32, u64> {
    entry["elements_by_type"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let t = k.rsplit("(type ").next().unwrap().trim_end_matches(')');
            (t.parse().unwrap(), u(v))
        })
        .collect()
}

fn mesh_types(mesh: &Mesh) -> BTreeMap<i32, u64> {
    let mut m = BTreeMap::new();
    for b in &mesh.blocks {
        *m.entry(b.cell_type.gmsh_type()).or_insert(0) += b.len() as u64;
    }
    m
}

#[rstest]
#[case("actuator_tet10_v41_ascii.msh")]
#[case("actuator_tet4_v22_ascii.msh")]
#[case("actuator_tet4_v41_binary.msh")]
#[case("beam_hex20_v41_ascii.msh")]
#[case("beam_hex27_v41_ascii.msh")]
#[case("beam_hex8_v22_ascii.msh")]
#[case("beam_hex8_v41_ascii.msh")]
#[case("beam_tet10_v22_ascii.msh")]
#[case("beam_tet10_v41_ascii.msh")]
#[case("beam_tet4_v22_ascii.msh")]
#[case("beam_tet4_v41_ascii.msh")]
#[case("cook_membrane_quad4_v41_ascii.msh")]
#[case("cube_hole_tet10_v22_ascii.msh")]
#[case("cube_hole_tet4_v41_binary.msh")]
#[case("lame_cylinder_hex8_v22_ascii.msh")]
#[case("nafems_le10_tet10_v41_ascii.msh")]
fn file_matches_manifest(#[case] name: &str) {
    let manifest = manifest();
    let entry = &manifest[name];
    assert!(entry.is_object(), "{name} is not in manifest.json");
    let mesh = read_msh(&data_file(name)).unwrap_or_else(|e| panic!("{e}"));
    mesh.validate().unwrap();

    assert_eq!(mesh.n_nodes() as u64, u(&entry["n_nodes"]));
    assert_eq!(*mesh.node_tags.iter().min().unwrap(), u(&entry["node_tag_min"]));
    assert_eq!(*mesh.node_tags.iter().max().unwrap(), u(&entry["node_tag_max"]));
    let cell_tags: Vec<u64> = mesh.blocks.iter().flat_map(|b| b.tags.iter().copied()).collect();
    assert_eq!(cell_tags.len() as u64, u(&entry["n_elements"]));
    assert_eq!(*cell_tags.iter().min().unwrap(), u(&entry["elem_tag_min"]));
    assert_eq!(*cell_tags.iter().max().unwrap(), u(&entry["elem_tag_max"]));
    assert_eq!(mesh_types(&mesh), manifest_types(entry));

    let groups = entry["physical_groups"].as_array().unwrap();
    assert_eq!(mesh.groups.len(), groups.len(), "{:?}", mesh.group_names());
    for g in groups {
        let name = g["name"].as_str().unwrap();
        let ours = mesh.group(name).unwrap();
        assert_eq!(ours.dim as u64, u(&g["dim"]), "{name}");
        assert_eq!(i64::from(ours.tag), g["tag"].as_i64().unwrap(), "{name}");
        assert_eq!(ours.cells.len() as u64, u(&g["n_elements"]), "{name}");
        assert!(ours.cells.windows(2).all(|w| w[0] < w[1]), "{name} cells not sorted");
    }

    let bbox = mesh.bounding_box();
    for (side, ours) in bbox.iter().enumerate() {
        for k in 0..3 {
            let want = entry["bbox"][side][k].as_f64().unwrap();
            assert!((ours[k] - want).abs() <= 1e-12 * (1.0 + want.abs()), "bbox {bbox:?}");
        }
    }
}

#[rstest]
#[case("beam_hex8_v22_ascii.msh", "beam_hex8_v41_ascii.msh", 0.0)]
#[case("beam_tet4_v22_ascii.msh", "beam_tet4_v41_ascii.msh", 0.0)]
#[case("beam_tet10_v22_ascii.msh", "beam_tet10_v41_ascii.msh", 0.0)]
// ASCII holds 16 significant digits, binary the exact double.
#[case("actuator_tet4_v22_ascii.msh", "actuator_tet4_v41_binary.msh", 1e-15)]
fn same_mesh_from_both_versions(#[case] a: &str, #[case] b: &str, #[case] tol: f64) {
    let a = read_msh(&data_file(a)).unwrap();
    let b = read_msh(&data_file(b)).unwrap();
    assert_same_mesh(&a, &b, tol);
}

#[rstest]
#[case("beam_hex27_v41_ascii.msh")]
#[case("cook_membrane_quad4_v41_ascii.msh")]
#[case("cube_hole_tet4_v41_binary.msh")]
#[case("lame_cylinder_hex8_v22_ascii.msh")]
#[case("actuator_tet10_v41_ascii.msh")]
fn written_copies_read_back_identical(#[case] name: &str) {
    let mesh = read_msh(&data_file(name)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for binary in [false, true] {
        let path = dir.path().join(format!("copy_{binary}.msh"));
        write_msh41(&path, &mesh, binary).unwrap();
        let back = read_msh(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, mesh, "msh 4.1 binary={binary}");
    }
    for (binary, big_endian) in [(false, false), (true, false), (true, true)] {
        let bytes = msh22_bytes(&mesh, binary, big_endian);
        let back = read_msh_bytes("copy.msh", &bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, mesh, "msh 2.2 binary={binary} big_endian={big_endian}");
    }
}
