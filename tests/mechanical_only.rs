//! Mechanical problems without a thermal field: a prescribed uniform temperature, and an
//! ANSYS thermal result as the temperature input through the transfer
//! T = offset + scale · T_ansys, on the ANSYS mesh itself, with gradients for scale and offset.

use std::path::{Path, PathBuf};

use gradfem::app::{self, Problem};
use gradfem::problem::ProblemFile;
use gradfem_solvers::params::ParamVector;
use gradfem_solvers::taylor::{TaylorParams, random_direction_scaled};

fn data(p: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data").join(p).display().to_string()
}

fn build(text: &str) -> Result<Problem, String> {
    let pf =
        ProblemFile::parse(Path::new("mech.toml"), text.to_string()).map_err(|e| e.to_string())?;
    app::build_problem(&pf).map_err(|e| e.to_string())
}

const E: f64 = 200e9;
const ALPHA: f64 = 1.2e-5;

fn plate(temperature: &str, register: &str) -> String {
    format!(
        r#"
[mesh]
file = "{rth}"
plane_group = [
    {{ name = "root", axis = "y", value = -0.46 }},
    {{ name = "tip", axis = "y", value = 1.34 }},
]

[[mechanical.material]]
group = "material_1"
young = {E}
poisson = 0.3
alpha = {ALPHA}
t_ref = 278.15

[[mechanical.bc]]
group = "root"
kind = "fixed"

[mechanical]
tip = "tip"
temperature = {temperature}

[[objective]]
kind = "average_displacement"
group = "tip"
direction = [0.0, 1.0, 0.0]
weight = 1e6

[[objective]]
kind = "von_mises"
group = "material_1"
p = 4.0
weight = 1e-8

[parameters]
register = [{register}]
"#,
        rth = data("ansys/file.rth")
    )
}

#[test]
fn an_ansys_temperature_drives_the_mechanical_field_on_the_ansys_mesh() {
    let text = plate(
        &format!("{{ ansys = \"{}\", set = 1, temperature_unit = \"C\" }}", data("ansys/file.rth")),
        "",
    );
    let mut p =
        build(&text.replace("register = []", "register = [\"mechanical.alpha.material_1\"]"))
            .unwrap();
    p.solve().unwrap();
    let m = p.mechanical().unwrap();
    let imported = m.imported_temperature().expect("imported");
    let (lo, hi) = imported
        .values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
    // data/ansys/README.md: the temperature range of file.rth, 4.99085 .. 100.009145 (°C).
    assert!(
        (lo - 278.14085).abs() < 1e-4 && (hi - 373.159145).abs() < 1e-4,
        "converted to kelvin: {lo} {hi}"
    );
    let s = app::summary("plate", &p).unwrap();
    // Summaries and outputs show the imported field as the problem's temperature.
    assert!((s.max_temperature_k - hi).abs() < 1e-12 && (s.min_temperature_k - lo).abs() < 1e-12);
    let tip = s.tip_displacement_m.unwrap();
    // The plate warms by up to 95 K above t_ref: its 1.8 m length grows by at most α ΔT L.
    assert!(tip[1] > 0.0 && tip[1] < ALPHA * 95.0 * 1.8, "{tip:?}");
    assert!(s.force_balance.unwrap().relative_imbalance < 1e-8);
    assert_eq!(s.coupling_schedule, "thermal → mechanical");
}

/// The plate driven by the ANSYS temperature through T = −3 K + 1.2 · T_ansys, with
/// `register`.
fn imported_plate(register: &str) -> String {
    let temp = format!(
        "{{ ansys = \"{}\", set = 1, scale = 1.2, offset = -3.0, temperature_unit = \"C\" }}",
        data("ansys/file.rth")
    );
    plate(&temp, register)
}

const REGISTER_IMPORTED: &str = "\"mechanical.temperature.scale\", \"mechanical.temperature.offset\", \"mechanical.young.material_1\", \"mechanical.alpha.material_1\"";

#[test]
fn scale_and_offset_of_the_imported_temperature_get_their_gradients() {
    let mut p = build(&imported_plate(REGISTER_IMPORTED)).unwrap();
    p.solve().unwrap();
    let r = p.taylor_test(&TaylorParams { h0: 1e-2, steps: 5, min_rate: 1.9 }, |_| {}).unwrap();
    assert!(r.passed, "{}", r.table());
    // The displacement is affine in the offset: a unit step changes the tip term by exactly
    // its derivative.
    let reg1 = "\"mechanical.temperature.offset\"";
    let only_tip = |t: String| t.replace("weight = 1e-8", "weight = 0.0");
    let mut p = build(&only_tip(imported_plate(reg1))).unwrap();
    let (j0, g, _) = p.gradient().unwrap();
    let id = p.registry().id("mechanical.temperature.offset").unwrap();
    let d = g.get(id)[0];
    p.registry_mut().set_values(id, &[-2.0]).unwrap();
    p.apply_parameters().unwrap();
    let (j1, _) = p.objective_terms().unwrap();
    assert!(((j1 - j0) - d).abs() < 1e-9 * d.abs(), "{} vs {d}", j1 - j0);
}

/// Second order through the imported temperature's transfer: H·δp with scale and offset among
/// the directions passes the second-order Taylor test (remainders at rate 3).
#[test]
fn scale_and_offset_of_the_imported_temperature_get_their_second_order_products() {
    let mut p = build(&imported_plate(REGISTER_IMPORTED)).unwrap();
    p.solve().unwrap();
    let pv = ParamVector::all(p.registry());
    let dir = random_direction_scaled(&pv.gather(p.registry()), 13);
    // Steps whose remainders stay far above J's rounding (J ≈ 2.4e3, remainders ≥ 1e-6).
    let t = p.taylor_test_second_order(&dir, 0.2, 5).unwrap();
    assert!(t.second.abs() > 0.0, "δpᵀHδp vanished: nothing was tested");
    let rate = t.min_rate().expect("remainders above round-off");
    assert!(rate >= 2.9, "second-order rate {rate:.3} (remainders {:?})", t.remainders);
    assert!(t.remainders_first[0] > 10.0 * t.remainders[0], "{t:?}");
}

#[test]
fn a_uniform_temperature_expands_a_free_block() {
    let text = r#"
[mesh]
box = { lengths = [0.2, 0.1, 0.1], divisions = [4, 2, 2], cell = "hex20" }

[[mechanical.material]]
group = "domain"
young = 1e9
poisson = 0.25
alpha = 2e-5
t_ref = 300.0

[[mechanical.bc]]
group = "xmin"
kind = "roller"
components = ["x"]

[[mechanical.bc]]
group = "ymin"
kind = "roller"
components = ["y"]

[[mechanical.bc]]
group = "zmin"
kind = "roller"
components = ["z"]

[mechanical]
tip = "xmax"
temperature = { uniform = 350.0 }

[parameters]
register = ["bc.domain.temperature"]
"#;
    let mut p = build(text).unwrap();
    p.solve().unwrap();
    let s = app::summary("block", &p).unwrap();
    let want = 2e-5 * 50.0 * 0.2;
    assert!((s.tip_displacement_m.unwrap()[0] - want).abs() < 1e-12, "{:?}", s.tip_displacement_m);
    // The default objective of a mechanical problem is the compliance (zero here: no loads).
    assert_eq!(s.objective_terms.len(), 1);
    let (_, g, _) = p.gradient().unwrap();
    assert_eq!(g.get(p.registry().id("bc.domain.temperature").unwrap()).len(), 1);
}

#[test]
fn temperature_sources_are_checked() {
    let thermal_and_prescribed = plate("{ uniform = 300.0 }", "").replace(
        "[[mechanical.material]]",
        "[[thermal.material]]\ngroup = \"material_1\"\nk = 1.0\n\n[[mechanical.material]]",
    );
    let e = build(&thermal_and_prescribed).err().unwrap();
    assert!(e.contains("give one of them"), "{e}");
    let e = build(&plate("{ uniform = 300.0, scale = 2.0 }", "")).err().unwrap();
    assert!(e.contains("`scale`, `offset` and `temperature_unit` go with `ansys`"), "{e}");
    let e = build(&plate("{ set = 1 }", "")).err().unwrap();
    assert!(e.contains("exactly one of `uniform` and `ansys`"), "{e}");
    let e = build(&plate("{ ansys = \"nowhere.rth\" }", "")).err().unwrap();
    assert!(e.contains("nowhere.rth"), "{e}");
    let e = build(
        "[mesh]\nbox = { lengths = [1.0, 1.0, 1.0], divisions = [1, 1, 1], cell = \"hex8\" }\n",
    )
    .err()
    .unwrap();
    assert!(e.contains("needs a [thermal], [mechanical] or [hyperelastic] table"), "{e}");
    let e = build(&plate(
        &format!("{{ ansys = \"{}\", temperature_unit = \"C\" }}", data("ansys/file.rth")),
        "\"mechanical.temperature.gain\"",
    ))
    .err()
    .unwrap();
    assert!(e.contains("mechanical.temperature.scale"), "{e}");
}
