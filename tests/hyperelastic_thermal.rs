//! Finite-strain hyperelasticity driven by the temperature of the thermal (or electro-thermal)
//! field of the same problem file: free thermal expansion (exact), the reaction of a bar held
//! between two walls against the finite-strain closed form and the small-strain thermal stress,
//! the T → u transfer in the coupling graph, and Taylor tests of a finite-strain objective
//! with respect to thermal, electrical and expansion parameters through the chain.

use std::path::Path;

use gradfem::app;
use gradfem::problem::ProblemFile;
use gradfem_mechanical::homogeneous::{Mode, compressible_nominal_stress};
use gradfem_mechanical::hyperelastic::{NeoHookean, Volumetric};
use gradfem_solvers::taylor::TaylorParams;
use rstest::rstest;

fn build(text: &str) -> app::Problem {
    let pf = ProblemFile::parse(Path::new("hyperelastic_thermal.toml"), text.to_string())
        .unwrap_or_else(|e| panic!("{e}"));
    app::build_problem(&pf).unwrap_or_else(|e| panic!("{e}"))
}

fn build_err(text: &str) -> String {
    let pf = ProblemFile::parse(Path::new("hyperelastic_thermal.toml"), text.to_string()).unwrap();
    app::build_problem(&pf).err().expect("an error").to_string()
}

const T_REF: f64 = 293.15;
const ALPHA: f64 = 2.2e-4;

/// Thermal tables holding both ends at `t` (no source: T = t everywhere).
fn uniform_thermal(t: f64) -> String {
    format!(
        r#"
[[thermal.material]]
group = "domain"
k = 0.2

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = {t}

[[thermal.bc]]
group = "xmax"
kind = "temperature"
value = {t}
"#
    )
}

/// A 40 × 10 × 10 mm Neo-Hookean rubber bar with thermal expansion, on rollers at the three
/// coordinate planes, `extra` appended.
fn bar(kappa: f64, extra: &str) -> String {
    format!(
        r#"
title = "rubber bar"
[mesh]
box = {{ lengths = [0.04, 0.01, 0.01], divisions = [4, 1, 1], cell = "hex8" }}

[[hyperelastic.material]]
group = "domain"
law = "neo_hookean"
mu = [0.4e6]
kappa = {kappa}
thermal_expansion = {ALPHA}
t_ref = {T_REF}

[[hyperelastic.bc]]
group = "xmin"
kind = "roller"
components = ["x"]

[[hyperelastic.bc]]
group = "ymin"
kind = "roller"
components = ["y"]

[[hyperelastic.bc]]
group = "zmin"
kind = "roller"
components = ["z"]

[[objective]]
kind = "average_displacement"
group = "xmax"
direction = [1.0, 0.0, 0.0]
{extra}
"#
    )
}

/// Heated by ΔT = 60 K from the thermal solve, or by a prescribed uniform temperature, the
/// free bar stretches by θ_s = 1 + α s ΔT in every direction at load factor s (the thermal
/// strain ramps with the load factor), exactly and stress free.
#[rstest]
#[case::thermal_field(uniform_thermal(T_REF + 60.0))]
#[case::uniform_temperature(format!("temperature = {{ uniform = {} }}", T_REF + 60.0))]
fn a_heated_free_bar_expands_by_one_plus_alpha_delta_t(#[case] temperature: String) {
    let mut problem = build(&bar(2e8, &format!("[hyperelastic]\nsteps = 2\n{temperature}\n")));
    problem.solve().unwrap();
    let h = problem.hyperelastic().unwrap();
    assert!(h.takes_temperature());
    let states = h.states();
    assert_eq!(states.len(), 2);
    for (s, u) in states {
        let theta = 1.0 + ALPHA * s * 60.0;
        for (n, x) in h.problem.model.coords.iter().enumerate() {
            for i in 0..3 {
                let exact = (theta - 1.0) * x[i];
                assert!((u[3 * n + i] - exact).abs() < 1e-12, "s = {s}, node {n}: {u:?}");
            }
        }
    }
    for (name, r) in &h.report.reactions {
        assert!(r.iter().all(|v| v.abs() < 1e-9), "{name}: {r:?}");
    }
    let s = app::summary("bar", &problem).unwrap();
    assert_eq!(s.coupling_schedule, "thermal → hyperelastic");
    assert!((s.max_temperature_k - (T_REF + 60.0)).abs() < 1e-9);
}

/// A bar held between two walls (rollers in x at both ends) and heated by ΔT: F = diag(1, t, t)
/// with the mechanical part F/θ in uniaxial compression 1/θ, so the nominal stress is
/// P = P_m(1/θ)/θ (P_m the compressible uniaxial closed form of the law), equal to the FEM
/// reaction per reference area to 1e-8; and for small αΔT it is the small-strain thermal
/// stress −E α ΔT, E = 9κμ/(3κ + μ), to relative order αΔT.
#[rstest]
#[case::small(10.0)]
#[case::large(400.0)]
fn a_clamped_heated_bar_reacts_with_the_thermal_stress(#[case] dt: f64) {
    let (mu, kappa) = (0.4e6, 1e7);
    let extra = format!(
        "[[hyperelastic.bc]]\ngroup = \"xmax\"\nkind = \"roller\"\ncomponents = [\"x\"]\n\n\
         [hyperelastic]\nsteps = 3\n{}",
        uniform_thermal(T_REF + dt)
    );
    let mut problem = build(&bar(kappa, &extra));
    problem.solve().unwrap();
    let h = problem.hyperelastic().unwrap();
    let area = 0.01 * 0.01;
    let reaction = |g: &str| h.report.reactions.iter().find(|(n, _)| n == g).unwrap().1;
    let (rmin, rmax) = (reaction("xmin"), reaction("xmax"));
    assert!((rmin[0] + rmax[0]).abs() < 1e-9 * rmax[0].abs(), "{rmin:?} {rmax:?}");

    let law = NeoHookean { mu, kappa, volumetric: Volumetric::Quadratic };
    let theta = 1.0 + ALPHA * dt;
    let pm = compressible_nominal_stress(&law, Mode::Uniaxial, 1.0 / theta).unwrap();
    let exact = pm.nominal_stress / theta * area;
    assert!(rmax[0] < 0.0, "the walls push back: {rmax:?}");
    assert!((rmax[0] - exact).abs() < 1e-8 * exact.abs(), "FEM {} vs closed form {exact}", rmax[0]);

    let young = 9.0 * kappa * mu / (3.0 * kappa + mu);
    let linear = -young * ALPHA * dt * area;
    let gap = (rmax[0] - linear).abs() / linear.abs();
    let strain = ALPHA * dt;
    assert!(gap < 3.0 * strain && gap > 0.1 * strain, "gap {gap} for αΔT = {strain}");
}

/// A bar held at 293.15 K at xmin, cooled by convection at xmax and heated by a source,
/// stretched by 10 % at xmax in three load steps: T varies along the bar, so the expansion
/// α(T − T_ref) changes the reaction and the contraction, and both depend on k, h and q.
fn chain_problem(register: &[&str]) -> app::Problem {
    let names: Vec<String> = register.iter().map(|n| format!("\"{n}\"")).collect();
    let text = strip(
        "heated rubber strip",
        "source = 4e5\n",
        "",
        "law = \"ogden\"\nmu = [0.3e6, 0.02e6]\nalpha = [2.0, -1.5]\n",
        &format!(
            r#"
[[objective]]
kind = "average_displacement"
group = "ymax"
direction = [0.0, 1.0e4, 0.0]

[parameters]
register = [{}]
"#,
            names.join(", ")
        ),
    );
    build(&text)
}

/// The strip of [`chain_problem`]: 3 × 1 × 1 hex8 over 30 × 10 × 10 mm, held at 293.15 K at
/// xmin and cooled by convection at xmax, clamped at xmin and pulled by 3 mm at xmax in three
/// steps, with a reaction objective; `heat` ends the thermal material, `fields` adds tables
/// (an electrical field), `law` is the hyperelastic law without κ and α, `tail` ends the file.
fn strip(title: &str, heat: &str, fields: &str, law: &str, tail: &str) -> String {
    format!(
        r#"
title = "{title}"
[mesh]
box = {{ lengths = [0.03, 0.01, 0.01], divisions = [3, 1, 1], cell = "hex8" }}

[[thermal.material]]
group = "domain"
k = 0.25
{heat}
[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 293.15

[[thermal.bc]]
group = "xmax"
kind = "convection"
h = 40.0
t_inf = 300.0
{fields}
[[hyperelastic.material]]
group = "domain"
{law}kappa = 3e7
thermal_expansion = 3e-4

[[hyperelastic.bc]]
group = "xmin"
kind = "fixed"

[[hyperelastic.bc]]
group = "xmax"
kind = "displacement"
value = [0.003, 0.0, 0.0]
components = ["x"]

[hyperelastic]
steps = 3

[[objective]]
kind = "reaction"
group = "xmax"
direction = [1.0, 0.0, 0.0]
{tail}"#
    )
}

fn assert_taylor(problem: &mut app::Problem, what: &str) {
    let params = TaylorParams { h0: 1e-2, steps: 4, min_rate: 1.9 };
    let r = problem.taylor_test(&params, |_| {}).unwrap();
    assert!(r.passed && r.min_rate() >= 1.9, "{what}:\n{}", r.table());
}

/// Every thermal parameter reaches the finite-strain objective through T (the load-stepping
/// adjoint's T̄ seeds the thermal adjoint), and α directly: each alone and all together pass
/// a Taylor test over three load steps, and the gradient matches central differences.
#[rstest]
#[case::conductivity(&["thermal.k.domain"])]
#[case::convection(&["bc.xmax.h"])]
#[case::source(&["thermal.q.domain"])]
#[case::fixed_temperature(&["bc.xmin.temperature"])]
#[case::expansion(&["hyperelastic.alpha.domain"])]
#[case::all(&[
    "thermal.k.domain",
    "bc.xmax.h",
    "bc.xmax.t_inf",
    "thermal.q.domain",
    "hyperelastic.alpha.domain",
    "hyperelastic.mu1.domain",
])]
fn thermal_parameters_pass_taylor_tests_through_the_chain(#[case] names: &[&str]) {
    let mut problem = chain_problem(names);
    problem.solve().unwrap();
    let h = problem.hyperelastic().unwrap();
    assert_eq!(h.loads.len(), 3);
    assert_eq!(problem.coupling().to_string(), "thermal → hyperelastic");
    let t = problem.thermal().temperature().unwrap();
    let (lo, hi) = t.iter().fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    assert!(hi - lo > 20.0, "T from {lo} to {hi}");
    let (j, g, _) = problem.gradient().unwrap();
    assert!(j.is_finite());
    if let [name] = names {
        // Central differences of J in the one parameter.
        let id = problem.registry().id(name).unwrap();
        let p0 = problem.registry().values(id)[0];
        let d = g.get(id)[0];
        assert!(d != 0.0, "{name}: zero gradient");
        let step = 1e-5 * p0.abs();
        let mut at = |v: f64| {
            problem.registry_mut().set_values(id, &[v]).unwrap();
            problem.apply_parameters().unwrap();
            problem.objective_terms().unwrap().0
        };
        let fd = (at(p0 + step) - at(p0 - step)) / (2.0 * step);
        at(p0);
        assert!((fd - d).abs() < 1e-5 * fd.abs(), "{name}: gradient {d} vs differences {fd}");
    }
    assert_taylor(&mut problem, &names.join(", "));
}

/// The same strip heated by the Joule heat of a current instead of a source: the voltage and
/// the conductivity reach the finite-strain objective through φ → Q → T → u.
#[test]
fn electrical_parameters_reach_the_finite_strain_field() {
    let text = strip(
        "Joule-heated rubber strip",
        "",
        r#"
[[electrical.conductor]]
group = "domain"
sigma = 20.0

[[electrical.terminal]]
group = "xmin"
kind = "ground"

[[electrical.terminal]]
group = "xmax"
kind = "voltage"
value = 4.0
"#,
        "law = \"neo_hookean\"\nmu = [0.3e6]\n",
        r#"
[parameters]
register = ["load.xmax.voltage", "electrical.sigma.domain", "thermal.k.domain"]
"#,
    );
    let mut problem = build(&text);
    problem.solve().unwrap();
    assert_eq!(problem.coupling().to_string(), "electrical → thermal → hyperelastic");
    let t = problem.thermal().temperature().unwrap();
    assert!(t.iter().fold(0.0f64, |m, &v| m.max(v)) > 310.0, "Joule heating too weak");
    let (_, g, _) = problem.gradient().unwrap();
    assert!(problem.electrical().is_some());
    let v = problem.registry().id("load.xmax.voltage").unwrap();
    assert!(g.get(v)[0] != 0.0);
    assert_taylor(&mut problem, "voltage, σ, k");
}

#[test]
fn inconsistent_temperature_tables_are_named_errors() {
    let both = bar(
        2e8,
        &format!(
            "[hyperelastic]\nsteps = 1\ntemperature = {{ uniform = 300.0 }}\n{}",
            uniform_thermal(300.0)
        ),
    );
    assert!(build_err(&both).contains("give one of them"));
    let mech = bar(
        2e8,
        "[hyperelastic]\nsteps = 1\n\n[[mechanical.material]]\ngroup = \"domain\"\nyoung = 1e6\npoisson = 0.3\n",
    );
    assert!(build_err(&mech).contains("two models of the same solid"));
    // A declared graph must name the T → u transfer.
    let declared = bar(
        2e8,
        &format!(
            "[hyperelastic]\nsteps = 1\n[coupling]\ntransfers = []\n{}",
            uniform_thermal(300.0)
        ),
    );
    let e = build_err(&declared);
    assert!(e.contains("thermal -> hyperelastic"), "{e}");
    // Without a temperature the field is solved alone, with no transfer.
    let mut alone = build(&bar(2e8, "[hyperelastic]\nsteps = 1\n"));
    alone.solve().unwrap();
    assert!(!alone.hyperelastic().unwrap().takes_temperature());
    assert_eq!(alone.coupling().to_string(), "thermal, hyperelastic");
}

/// Without `[thermal]`, a prescribed uniform temperature is a parameter too
/// (`bc.<material group>.temperature`): the bar pulled at xmax, heated to 350 K.
#[test]
fn a_prescribed_temperature_is_a_parameter() {
    let extra = "[[hyperelastic.bc]]\ngroup = \"xmax\"\nkind = \"displacement\"\n\
                 value = [0.004, 0.0, 0.0]\ncomponents = [\"x\"]\n\n\
                 [hyperelastic]\nsteps = 3\ntemperature = { uniform = 350.0 }\n\n\
                 [[objective]]\nkind = \"reaction\"\ngroup = \"xmax\"\n\
                 direction = [1.0, 0.0, 0.0]\n\n\
                 [parameters]\nregister = [\"bc.domain.temperature\", \"hyperelastic.alpha.domain\"]\n";
    let mut problem = build(&bar(2e7, extra));
    problem.solve().unwrap();
    assert_eq!(problem.coupling().to_string(), "thermal → hyperelastic");
    let (_, g, _) = problem.gradient().unwrap();
    let t = problem.registry().id("bc.domain.temperature").unwrap();
    // Heating relaxes the pulled bar: less force.
    assert!(g.get(t)[0] < 0.0, "{:?}", g.get(t));
    assert_taylor(&mut problem, "uniform temperature, α");
}

/// examples/hyperelastic_thermal.toml: the strip's temperature is one-dimensional,
/// −k T'' = q with T(0) = T₀ and −k T'(L) = h (T(L) − T∞), T∞ = T₀, so
/// T(L) − T₀ = qL (1 + hL/(2k)) L/(k + hL) − qL²/(2k) = 41.142857… K, which linear elements
/// reproduce at the nodes; the load path reaches the prescribed 12 mm in 4 steps.
#[test]
fn the_example_heats_then_stretches_the_strip() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hyperelastic_thermal.toml");
    let pf = ProblemFile::read(&path).unwrap();
    let mut problem = app::build_problem(&pf).unwrap();
    problem.solve().unwrap();
    let (q, l, k, h) = (4e4, 0.06, 0.25, 25.0);
    let rise = q * l * (1.0 + h * l / (2.0 * k)) * l / (k + h * l) - q * l * l / (2.0 * k);
    let t = problem.thermal().temperature().unwrap();
    let hyper = problem.hyperelastic().unwrap();
    for &n in hyper.problem.model.group_nodes("xmax").unwrap() {
        assert!((t[n] - 293.15 - rise).abs() < 1e-9 * rise, "T = {} vs {}", t[n], 293.15 + rise);
    }
    let s = app::summary("strip", &problem).unwrap();
    assert_eq!(s.coupling_schedule, "thermal → hyperelastic");
    assert_eq!(s.hyperelastic.as_ref().unwrap().load_factors, vec![0.25, 0.5, 0.75, 1.0]);
    assert!((s.tip_displacement_m.unwrap()[0] - 0.012).abs() < 1e-15);
    assert!(s.objective > 0.0);
}
