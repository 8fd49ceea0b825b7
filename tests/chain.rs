//! The full chain I → Q → T → σ → u through problem files: thermal expansion of free and
//! constrained bars against closed forms, and Taylor tests of objectives on the displacement
//! with respect to every kind of parameter, one-way and two-way coupled.

use std::path::Path;

use gradfem::app::{self, Problem};
use gradfem::problem::ProblemFile;
use gradfem_solvers::taylor::TaylorParams;
use rstest::rstest;

const L: f64 = 0.1;
const W: f64 = 0.01;
const E: f64 = 200e9;
const NU: f64 = 0.3;
const ALPHA: f64 = 1.2e-5;
const T_REF: f64 = 293.15;
const T1: f64 = 393.15;

fn build(text: &str) -> Problem {
    let pf = ProblemFile::parse(Path::new("chain.toml"), text.to_string()).expect("parses");
    app::build_problem(&pf).unwrap_or_else(|e| panic!("{e}"))
}

/// A bar at the uniform temperature T1 (both ends held at T1, no source) with mechanical
/// conditions `bcs`.
fn heated_bar(cell: &str, bcs: &str, extra: &str) -> String {
    format!(
        r#"
[mesh]
box = {{ lengths = [{L}, {W}, {W}], divisions = [6, 2, 2], cell = "{cell}" }}

[[thermal.material]]
group = "domain"
k = 50.0

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = {T1}

[[thermal.bc]]
group = "xmax"
kind = "temperature"
value = {T1}

[[mechanical.material]]
group = "domain"
young = {E}
poisson = {NU}
alpha = {ALPHA}
t_ref = {T_REF}
{bcs}
{extra}
"#
    )
}

const SYMMETRY: &str = r#"
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
"#;

#[rstest]
fn a_free_bar_expands_by_alpha_delta_t(#[values("hex8", "tet10", "hex20")] cell: &str) {
    let mut p = build(&heated_bar(cell, SYMMETRY, "[mechanical]\ntip = \"xmax\""));
    p.solve().unwrap();
    let s = app::summary("bar", &p).unwrap();
    let u = s.tip_displacement_m.expect("tip group given");
    let want = ALPHA * (T1 - T_REF) * L;
    assert!((u[0] - want).abs() < 1e-9 * want, "u_x {} vs {want}", u[0]);
    // Free expansion is stress-free.
    assert!(s.max_von_mises_pa.unwrap() < 1e-6 * E * ALPHA * (T1 - T_REF));
    assert!(s.force_balance.unwrap().relative_imbalance < 1e-12);
}

#[rstest]
fn a_bar_held_between_walls_carries_minus_e_alpha_delta_t(#[values("hex8", "hex20")] cell: &str) {
    // Ends held in x, lateral faces free (rollers only to remove rigid motions): σ_xx =
    // −E α ΔT, the other stresses 0, so von Mises = E α ΔT; the wall reactions balance.
    let bcs = r#"
[[mechanical.bc]]
group = "xmin"
kind = "roller"
components = ["x"]

[[mechanical.bc]]
group = "xmax"
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
"#;
    let mut p = build(&heated_bar(cell, bcs, ""));
    p.solve().unwrap();
    let s = app::summary("bar", &p).unwrap();
    let want = E * ALPHA * (T1 - T_REF);
    let vm = s.max_von_mises_pa.unwrap();
    assert!((vm - want).abs() < 1e-8 * want, "von Mises {vm} vs {want}");
    let fb = s.force_balance.unwrap();
    let wall = fb.reactions.iter().find(|(n, _)| n == "xmin").unwrap().1;
    // The wall pushes the bar with σ_xx A: at xmin the reaction points along +x.
    assert!((wall[0] - want * W * W).abs() < 1e-8 * want * W * W, "{wall:?}");
    assert!(fb.relative_imbalance < 1e-12, "{fb:?}");
}

/// An electro-thermo-mechanical plate: current through a bar heats it, the bar (clamped at
/// xmin, loaded by a pressure on ymax) bends; a morph stretches it along y.
fn chain(scheme: &str, alpha_r: f64, objective: &str, register: &str) -> String {
    format!(
        r#"
[mesh]
box = {{ lengths = [{L}, {W}, {W}], divisions = [5, 2, 2], cell = "hex8" }}

[[thermal.material]]
group = "domain"
k = 30.0

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0

[[thermal.bc]]
group = "ymax"
kind = "convection"
h = 200.0
t_inf = 290.0

[[electrical.conductor]]
group = "domain"
sigma = 2e4
alpha_r = {alpha_r}
t_ref = 300.0

[[electrical.terminal]]
group = "xmin"
kind = "voltage"
value = 0.4

[[electrical.terminal]]
group = "xmax"
kind = "ground"

[coupling]
scheme = "{scheme}"
tol = 1e-13

[[mechanical.material]]
group = "domain"
young = 1e9
poisson = 0.3
alpha = 2e-5
t_ref = 300.0

[[mechanical.bc]]
group = "xmin"
kind = "fixed"

[[mechanical.bc]]
group = "ymax"
kind = "pressure"
pressure = 2e4

[[mechanical.bc]]
group = "zmin"
kind = "traction"
traction = [1e3, 0.0, -2e3]

[[morph]]
name = "width"
value = {W}
axis = "y"
knots = [[0.0, 0.0], [{W}, 1.0]]
direction = [0.0, 1.0, 0.0]

{objective}

[parameters]
register = [{register}]

[taylor]
h0 = 1e-2
steps = 5
"#
    )
}

const OBJECTIVES: &str = r#"
[[objective]]
kind = "average_displacement"
group = "xmax"
direction = [0.3, -1.0, 0.5]
weight = 1e5

[[objective]]
kind = "von_mises"
group = "domain"
p = 4.0
weight = 1e-6

[[objective]]
kind = "displacement"
point = [0.07, 0.004, 0.006]
direction = [0.0, 1.0, 0.0]
weight = 3e4

[[objective]]
kind = "compliance"
weight = 10.0

[[objective]]
kind = "max"
group = "domain"
p = 6.0
weight = 1e-3

[[objective]]
kind = "resistance"
drive = "xmin"
reference = "xmax"
"#;

fn taylor(p: &mut Problem) -> gradfem_solvers::taylor::TaylorResult {
    p.solve().unwrap();
    p.taylor_test(&TaylorParams { h0: 1e-2, steps: 5, min_rate: 1.9 }, |_| {}).unwrap()
}

#[rstest]
#[case::voltage("\"load.xmin.voltage\"")]
#[case::sigma("\"electrical.sigma.domain\"")]
#[case::sigma_elem("\"electrical.sigma_elem.domain\"")]
#[case::alpha_r("\"electrical.alpha_r.domain\"")]
#[case::k("\"thermal.k.domain\"")]
#[case::h("\"bc.ymax.h\"")]
#[case::t_inf("\"bc.ymax.t_inf\"")]
#[case::t_fixed("\"bc.xmin.temperature\"")]
#[case::young("\"mechanical.young.domain\"")]
#[case::young_elem("\"mechanical.young_elem.domain\"")]
#[case::poisson("\"mechanical.poisson.domain\"")]
#[case::alpha("\"mechanical.alpha.domain\"")]
#[case::t_ref("\"mechanical.t_ref.domain\"")]
#[case::pressure("\"bc.ymax.pressure\"")]
#[case::traction("\"bc.zmin.traction\"")]
#[case::coordinates("\"mesh.coordinates\"")]
#[case::morph("\"morph.width\"")]
fn chain_gradients_pass_taylor_tests(
    #[case] register: &str,
    #[values("monolithic", "staggered")] scheme: &str,
    #[values(0.0, 2e-3)] alpha_r: f64,
) {
    if alpha_r == 0.0 && (scheme == "staggered" || register.contains("alpha_r")) {
        return; // one-way problems have no scheme; α_R = 0 is covered by the two-way case
    }
    let mut p = build(&chain(scheme, alpha_r, OBJECTIVES, register));
    let r = taylor(&mut p);
    assert!(r.passed, "{register} ({scheme}, α_R = {alpha_r}):\n{}", r.table());
}

#[test]
fn the_chain_gradient_is_the_same_for_both_coupling_schemes() {
    let register = "\"load.xmin.voltage\", \"electrical.alpha_r.domain\", \"thermal.k.domain\", \"mechanical.alpha.domain\", \"morph.width\"";
    let mut grads = Vec::new();
    for scheme in ["monolithic", "staggered"] {
        let mut p = build(&chain(scheme, 2e-3, OBJECTIVES, register));
        p.solve().unwrap();
        let (j, g, _) = p.gradient().unwrap();
        let pv = gradfem_solvers::params::ParamVector::all(p.registry());
        grads.push((j, g.flatten(&pv)));
    }
    let (a, b) = (&grads[0], &grads[1]);
    assert!((a.0 - b.0).abs() < 1e-9 * a.0.abs(), "{} vs {}", a.0, b.0);
    for (x, y) in a.1.iter().zip(&b.1) {
        assert!((x - y).abs() < 1e-7 * x.abs().max(1e-30), "{:?} vs {:?}", a.1, b.1);
    }
}

#[test]
fn the_morph_gradient_is_the_coordinate_gradient_contracted_with_its_field() {
    let mut p =
        build(&chain("monolithic", 2e-3, OBJECTIVES, "\"mesh.coordinates\", \"morph.width\""));
    p.solve().unwrap();
    let (_, g, _) = p.gradient().unwrap();
    let reg = p.registry();
    let dx = g.by_name(reg, "mesh.coordinates").unwrap();
    let dm = g.by_name(reg, "morph.width").unwrap()[0];
    let coords = &p.thermal().model.coords;
    let contracted: f64 = coords.iter().enumerate().map(|(n, x)| dx[3 * n + 1] * x[1] / W).sum();
    assert!((dm - contracted).abs() < 1e-10 * dm.abs(), "{dm} vs {contracted}");
}

#[test]
fn mechanical_problem_errors_name_the_line() {
    let text = heated_bar("hex8", "[[mechanical.bc]]\ngroup = \"xmin\"\nkind = \"roller\"\n", "");
    let pf = ProblemFile::parse(Path::new("bad.toml"), text).unwrap();
    let e = app::build_problem(&pf).err().expect("roller without components").to_string();
    // Located as file:line: message.
    let located =
        e.strip_prefix("bad.toml:").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()));
    assert!(e.contains("components") && located, "{e}");
    let text =
        heated_bar("hex8", SYMMETRY, "[parameters]\nregister = [\"mechanical.young.nowhere\"]\n");
    let pf = ProblemFile::parse(Path::new("bad.toml"), text).unwrap();
    let e = app::build_problem(&pf).err().expect("unknown group").to_string();
    assert!(e.contains("mechanical.young.domain"), "lists what is offered: {e}");
    let text = heated_bar("hex8", "", "");
    let pf = ProblemFile::parse(Path::new("bad.toml"), text).unwrap();
    let e = app::build_problem(&pf).err().expect("no support").to_string();
    assert!(e.contains("rigid-body"), "{e}");
}

#[test]
fn the_coupling_graph_orders_the_fields_and_a_declared_graph_must_match_the_physics() {
    let register = "\"load.xmin.voltage\"";
    let one_way = chain("monolithic", 0.0, OBJECTIVES, register);
    let p = build(&one_way);
    assert_eq!(p.coupling().to_string(), "electrical → thermal → mechanical");
    let two_way = build(&chain("monolithic", 2e-3, OBJECTIVES, register));
    assert_eq!(two_way.coupling().to_string(), "[electrical ⇄ thermal] → mechanical");

    let declare = |text: &str, transfers: &str| {
        text.replace("[coupling]\n", &format!("[coupling]\ntransfers = [{transfers}]\n"))
    };
    let ok = declare(&one_way, "\"electrical -> thermal\", \"thermal -> mechanical\"");
    build(&ok);
    let fails = |text: String, want: &str| {
        let pf = ProblemFile::parse(Path::new("graph.toml"), text).unwrap();
        let e = app::build_problem(&pf).err().expect("an error").to_string();
        assert!(e.contains(want), "expected '{want}' in: {e}");
    };
    fails(declare(&one_way, "\"electrical -> thermal\""), "does not list thermal -> mechanical");
    fails(
        declare(
            &one_way,
            "\"electrical -> thermal\", \"thermal -> electrical\", \"thermal -> mechanical\"",
        ),
        "resistivity that depends on temperature",
    );
    fails(declare(&one_way, "\"electrical -> magnetic\""), "'magnetic'");
    fails(declare(&one_way, "\"electrical thermal\""), "expected `from -> to`");
}
