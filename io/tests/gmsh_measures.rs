//! The measure of every physical group of every shared gmsh file matches gmsh's own
//! (`measure_isoparametric` in `data/gmsh/manifest.json`, 6th-order Gauss rules) to 1e-9.

mod gmsh_common;

use gmsh_common::data_file;
use gradfem_io::gmsh::read_msh;
use gradfem_mesh::geometry::group_measure;
use rstest::rstest;

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
fn group_measures_match_gmsh(#[case] name: &str) {
    let text = std::fs::read_to_string(data_file("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mesh = read_msh(&data_file(name)).unwrap();
    for g in manifest[name]["physical_groups"].as_array().unwrap() {
        let group = mesh.group(g["name"].as_str().unwrap()).unwrap();
        let want = g["measure_isoparametric"].as_f64().unwrap();
        let got = group_measure(&mesh, group);
        assert!(
            (got - want).abs() <= 1e-9 * want.abs(),
            "{name} group {}: {got} vs gmsh {want} (rel. {:.2e})",
            group.name,
            (got - want).abs() / want.abs()
        );
    }
}
