//! Bad input gets a located error, before anything is allocated or solved: each case is a
//! problem file with one wrong value, run by the CLI; the message must name the file, the line
//! where there is one, and the key or the cause, and the exit code must be 2 (no panic, no
//! abort).

use std::process::Command;

use rstest::rstest;

/// A small heated block: thermal field, one material, a fixed face and convection.
fn thermal(material: &str, bc: &str, objective: &str) -> String {
    format!(
        r#"[mesh]
box = {{ lengths = [0.01, 0.01, 0.002], divisions = [2, 2, 1], cell = "tet4" }}

[[thermal.material]]
group = "domain"
{material}

[[thermal.bc]]
group = "xmin"
{bc}

{objective}
"#
    )
}

const MATERIAL: &str = "k = 150.0\nsource = 1e6";
const FIXED: &str = "kind = \"temperature\"\nvalue = 300.0";
const MEAN: &str = "[[objective]]\nkind = \"average\"\ngroup = \"domain\"";

/// A compressed rubber block (finite strain) with the material keys `law`.
fn rubber(law: &str) -> String {
    format!(
        r#"[mesh]
box = {{ lengths = [0.01, 0.01, 0.004], divisions = [2, 2, 1], cell = "hex8" }}

[[hyperelastic.material]]
group = "domain"
{law}

[[hyperelastic.bc]]
group = "zmin"
kind = "fixed"

[[hyperelastic.bc]]
group = "zmax"
kind = "displacement"
value = [0.0, 0.0, -1e-3]
components = ["z"]

[hyperelastic]
steps = 2

[[objective]]
kind = "reaction"
group = "zmax"
direction = [0.0, 0.0, -1.0]
"#
    )
}

/// A steel bar on rollers at a uniform temperature.
fn steel(material: &str) -> String {
    format!(
        r#"[mesh]
box = {{ lengths = [0.01, 0.002, 0.002], divisions = [4, 1, 1], cell = "hex8" }}

[[mechanical.material]]
group = "domain"
{material}

[[mechanical.bc]]
group = "xmin"
kind = "fixed"

[mechanical]
temperature = {{ uniform = 350.0 }}

[[objective]]
kind = "compliance"
"#
    )
}

fn with_box(divisions: &str, cell: &str) -> String {
    thermal(MATERIAL, FIXED, MEAN).replace(
        "divisions = [2, 2, 1], cell = \"tet4\"",
        &format!("divisions = {divisions}, cell = \"{cell}\""),
    )
}

/// Run `gradfem --quiet <args…> run good.toml` on `text`; it must succeed.
fn runs(text: &str, args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("good.toml"), text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .current_dir(dir.path())
        .arg("--quiet")
        .args(args)
        .args(["run", "good.toml"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
}

/// Run `gradfem <command> bad.toml` on `text`; the exit code must be 2 and stderr must hold
/// every one of `expected`.
fn fails(command: &str, text: &str, expected: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.toml"), text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .current_dir(dir.path())
        .args(["--quiet", command, "bad.toml"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "exit code of {command} on:\n{text}\nstderr:\n{err}");
    assert!(err.contains("bad.toml"), "the file is not named:\n{err}");
    for e in expected {
        assert!(err.contains(e), "'{e}' missing from:\n{err}");
    }
    assert!(!err.contains("panicked") && !err.contains("memory allocation"), "{err}");
}

#[rstest]
#[case::huge_box(with_box("[100000, 100000, 100000]", "tet4"), &["bad.toml:2:", "GB", "--allow-large"])]
#[case::overflowing_box(with_box("[4294967296, 4294967296, 2]", "tet10"), &["bad.toml:2:", "overflow"])]
#[case::largest_integer_box(with_box("[9223372036854775807, 1, 1]", "hex27"), &["overflow"])]
#[case::negative_k(thermal("k = -150.0", FIXED, MEAN), &["bad.toml:5:", "`k` = -150", "positive"])]
#[case::nan_source(thermal("k = 1.0\nsource = nan", FIXED, MEAN), &["bad.toml:5:", "`source`", "finite"])]
#[case::negative_kelvin(
    thermal(MATERIAL, "kind = \"temperature\"\nvalue = -300.0", MEAN),
    &["bad.toml:10:", "`value` = -300", "0 K"]
)]
#[case::negative_h(
    thermal(MATERIAL, "kind = \"convection\"\nh = -5.0\nt_inf = 300.0", MEAN),
    &["bad.toml:10:", "`h` = -5"]
)]
#[case::overflowing_h(
    thermal(MATERIAL, "kind = \"convection\"\nh = 1e308\nt_inf = 300.0", MEAN),
    &["forward solve", "overflows", "too large"]
)]
#[case::max_with_p_zero(
    thermal(MATERIAL, FIXED, "[[objective]]\nkind = \"max\"\ngroup = \"domain\"\np = 0.0"),
    &["'max'", "p = 0", "≥ 1"]
)]
#[case::max_with_negative_p(
    thermal(MATERIAL, FIXED, "[[objective]]\nkind = \"max\"\ngroup = \"domain\"\np = -8.0"),
    &["p = -8", "mean"]
)]
#[case::peak_with_zero_rho(
    thermal(MATERIAL, FIXED, "[[objective]]\nkind = \"peak\"\ngroup = \"domain\"\nrho = 0.0"),
    &["rho = 0", "positive"]
)]
#[case::kappa_zero(
    rubber("law = \"neo_hookean\"\nmu = [0.4e6]\nkappa = 0.0"),
    &["bad.toml:5:", "`kappa` = 0", "bulk modulus"]
)]
#[case::kappa_negative(
    rubber("law = \"ogden\"\nmu = [0.4e6]\nalpha = [2.0]\nkappa = -1e6"),
    &["bad.toml:5:", "`kappa` = -1000000"]
)]
#[case::negative_shear_modulus(
    rubber("law = \"ogden\"\nmu = [-0.4e6]\nalpha = [2.0]\nkappa = 1e7"),
    &["bad.toml:5:", "shear modulus"]
)]
#[case::poisson_half(
    steel("young = 200e9\npoisson = 0.5\nalpha = 1.2e-5"),
    &["bad.toml:5:", "`poisson` = 0.5", "(−1, 0.5)"]
)]
#[case::negative_young(steel("young = -1.0\npoisson = 0.3"), &["bad.toml:5:", "`young` = -1"])]
#[case::no_conductivity(thermal("source = 1e6", FIXED, MEAN), &["bad.toml:5:", "[[thermal.material]] on 'domain' needs `k`"])]
#[case::no_poisson(steel("young = 2e11"), &["bad.toml:5:", "[[mechanical.material]] on 'domain' needs `poisson`"])]
fn a_bad_value_is_a_located_error(#[case] text: String, #[case] expected: &[&str]) {
    fails("run", &text, expected);
}

#[rstest]
#[case("gradient")]
#[case("check-gradient")]
#[case("optimize")]
fn differentiating_needs_an_objective(#[case] command: &str) {
    let text = thermal(MATERIAL, FIXED, "[parameters]\nregister = [\"thermal.k.domain\"]");
    fails(command, &text, &["needs an [[objective]]"]);
}

#[test]
fn a_large_box_is_built_when_asked() {
    // 4 × 4 × 4 always fits; --allow-large is accepted by every command.
    runs(&with_box("[4, 4, 4]", "tet4"), &["--allow-large"]);
}

#[test]
fn the_memory_estimate_grows_with_the_problem() {
    use gradfem::mesh::CellType;
    use gradfem::problem::box_memory_estimate;
    let small = box_memory_estimate(1_000, 5_000, CellType::Tet4, 1);
    let more = box_memory_estimate(8_000, 40_000, CellType::Tet4, 1);
    let vector = box_memory_estimate(8_000, 40_000, CellType::Tet4, 3);
    let quadratic = box_memory_estimate(8_000, 40_000, CellType::Tet10, 1);
    // Eight times the nodes, eight times the memory; three unknowns per node: nine times the
    // matrix (the mesh stays).
    assert!(small > 0.0 && more > 7.0 * small && vector > 4.0 * more && quadratic > more);
    // 10⁶ nodes of a scalar field on tets: at least the matrix and its preconditioner, 360 MB.
    assert!(box_memory_estimate(1_000_000, 6_000_000, CellType::Tet4, 1) > 3.6e8);
}

#[test]
fn a_failed_solve_names_the_file_the_step_and_the_element() {
    // The block crushed to −50 % of its thickness in one step: the load path fails after its
    // cut-backs, on an inverted element.
    let text = rubber("law = \"neo_hookean\"\nmu = [0.4e6]\nkappa = 4e6")
        .replace("value = [0.0, 0.0, -1e-3]", "value = [0.0, 0.0, -6e-3]")
        .replace("steps = 2", "steps = 1");
    fails(
        "run",
        &text,
        &["bad.toml: forward solve", "load step 1", "inverted", "Newton iteration"],
    );
}

/// The bases the cases mutate are good problems: each bad case differs by its one value.
#[rstest]
#[case::thermal(thermal(MATERIAL, FIXED, MEAN))]
#[case::rubber(rubber("law = \"neo_hookean\"\nmu = [0.4e6]\nkappa = 4e6"))]
#[case::steel(steel("young = 200e9\npoisson = 0.3\nalpha = 1.2e-5"))]
fn the_unmutated_problems_run(#[case] text: String) {
    runs(&text, &[]);
}

#[test]
fn a_sensor_file_with_nan_is_refused_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.csv"),
        "x,y,z,T\n0.005,0.005,0.001,310\n0.002,0.005,0.001,nan\n",
    )
    .unwrap();
    let text = thermal(MATERIAL, FIXED, "[[objective]]\nkind = \"misfit\"\nsensors = \"s.csv\"");
    std::fs::write(dir.path().join("bad.toml"), text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .current_dir(dir.path())
        .args(["--quiet", "run", "bad.toml"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("s.csv:3:") && err.contains("finite"), "{err}");
}

#[test]
fn two_materials_on_one_group_name_both_lines() {
    let text = thermal(MATERIAL, FIXED, MEAN).replace(
        "[[thermal.bc]]",
        "[[thermal.material]]\ngroup = \"domain\"\nk = 2.0\n\n[[thermal.bc]]",
    );
    fails("run", &text, &["bad.toml:10:", "second [[thermal.material]]", "line 5"]);
}

#[test]
fn a_body_free_to_move_is_named_as_such() {
    // One roller in x holds neither y, z nor the rotations.
    let text = steel("young = 200e9\npoisson = 0.3\nalpha = 1.2e-5")
        .replace("kind = \"fixed\"", "kind = \"roller\"\ncomponents = [\"x\"]");
    fails("run", &text, &["bad.toml: forward solve", "singular", "rigid motion"]);
}

#[test]
fn an_inverted_cell_of_a_mesh_file_is_a_mesh_error_for_every_field() {
    // The shared tet10 actuator mesh has one folded cell; a mechanical-only problem on it must
    // not report it under a thermal field it does not solve.
    let mesh = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("data/gmsh/actuator_tet10_v41_ascii.msh");
    let text = format!(
        "[mesh]\nfile = \"{}\"\n\n[[mechanical.material]]\ngroup = \"polysilicon_layer\"\n\
         young = 160e9\npoisson = 0.22\n\n[[mechanical.material]]\ngroup = \"posts\"\n\
         young = 160e9\npoisson = 0.22\n\n[[mechanical.bc]]\ngroup = \"anchor_cold_base\"\n\
         kind = \"fixed\"\n\n[mechanical]\ntemperature = {{ uniform = 300.0 }}\n\n\
         [[objective]]\nkind = \"compliance\"\n",
        mesh.display()
    );
    fails("run", &text, &["bad.toml: mesh:", "cell 5380 (tet10)", "straighten_inverted"]);
    // The key goes into [mesh], before the first material table.
    let fixed = text.replacen(
        "\n\n[[mechanical.material]]",
        "\nstraighten_inverted = true\n\n[[mechanical.material]]",
        1,
    );
    runs(&fixed, &[]);
}
