//! Transient heat from problem files (`[transient]`): the cooling of a slab against its series
//! solution, gradients of every parameter kind by Taylor tests (each scheme, time objective and
//! memory mode), and the CLI's time series.

use std::path::Path;
use std::process::Command;

use gradfem::app::{self, Problem};
use gradfem::problem::ProblemFile;
use gradfem_solvers::params::ParamVector;
use gradfem_solvers::taylor::TaylorParams;
use rstest::rstest;

const L: f64 = 0.02;
const K: f64 = 45.0;
const RHO_C: f64 = 3.6e6;
const T0: f64 = 600.0;
const TS: f64 = 300.0;

fn build(text: &str) -> Problem {
    let pf = ProblemFile::parse(Path::new("transient.toml"), text.to_string()).expect("parses");
    app::build_problem(&pf).unwrap_or_else(|e| panic!("{e}"))
}

fn slab(transient: &str, extra: &str) -> String {
    format!(
        r#"
[mesh]
box = {{ lengths = [{L}, 0.002, 0.002], divisions = [24, 1, 1], cell = "hex20" }}

[[thermal.material]]
group = "domain"
k = {K}

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = {TS}

[[thermal.bc]]
group = "xmax"
kind = "temperature"
value = {TS}

[transient]
heat_capacity = [{{ group = "domain", rho_c = {RHO_C} }}]
initial_temperature = {T0}
{transient}

[[objective]]
kind = "point"
point = [{}, 0.001, 0.001]
{extra}
"#,
        L / 2.0
    )
}

/// T(L/2, t) of a slab at T0 whose faces are held at TS from t = 0 (separation of variables).
fn series_centre(t: f64) -> f64 {
    let a = K / RHO_C;
    let mut s = 0.0;
    for n in (1..2000).step_by(2) {
        let n = n as f64;
        let k = n * std::f64::consts::PI / L;
        s += 4.0 / (n * std::f64::consts::PI)
            * (n * std::f64::consts::PI / 2.0).sin()
            * (-a * k * k * t).exp();
    }
    TS + (T0 - TS) * s
}

#[rstest]
#[case::crank_nicolson("crank_nicolson", 0.05, 2e-3)]
#[case::bdf2("bdf2", 0.05, 2e-3)]
#[case::implicit_euler("implicit_euler", 0.01, 4e-3)]
fn a_slab_cools_as_the_series_solution_says(
    #[case] scheme: &str,
    #[case] dt: f64,
    #[case] tol: f64,
) {
    let t_end = 4.0;
    let steps = (t_end / dt).round() as usize;
    let mut p = build(&slab(&format!("dt = {dt}\nsteps = {steps}\nscheme = \"{scheme}\""), ""));
    p.solve().unwrap();
    let j = p.objective_terms().unwrap().0;
    let want = series_centre(t_end);
    eprintln!("{scheme}: T(L/2, {t_end} s) = {j} (series {want})");
    assert!((j - want).abs() < tol * (T0 - TS), "{scheme}: {j} vs {want}");
    assert!(want - TS > 0.3 * (T0 - TS), "the test should stop well before equilibrium");
}

fn taylor_passes(text: &str) {
    let mut p = build(text);
    p.solve().unwrap();
    let r = p.taylor_test(&TaylorParams { h0: 1e-2, steps: 5, min_rate: 1.9 }, |_| {}).unwrap();
    assert!(r.passed, "{}", r.table());
}

fn convective(transient: &str, register: &str) -> String {
    format!(
        r#"
[mesh]
box = {{ lengths = [{L}, 0.004, 0.002], divisions = [6, 2, 1], cell = "hex8" }}

[[thermal.material]]
group = "domain"
k = {K}
source = 2e6

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = {TS}

[[thermal.bc]]
group = "xmax"
kind = "convection"
h = 800.0
t_inf = 290.0

[transient]
heat_capacity = [{{ group = "domain", rho_c = {RHO_C} }}]
initial_temperature = 450.0
{transient}

[[objective]]
kind = "max"
group = "domain"
p = 6.0

[[objective]]
kind = "point"
point = [0.013, 0.001, 0.001]

[parameters]
register = [{register}]
"#
    )
}

/// The heat balance of the last step closes (sources + inflow = convection + fixed + stored)
/// for every scheme and both mass forms, and the stored heat is what a cooling body releases.
#[rstest]
fn the_last_steps_heat_balance_closes_with_the_stored_heat(
    #[values("implicit_euler", "crank_nicolson", "bdf2")] scheme: &str,
    #[values("consistent", "lumped")] mass: &str,
) {
    let transient = format!("dt = 0.2\nsteps = 6\nscheme = \"{scheme}\"\nmass = \"{mass}\"");
    let mut p = build(&convective(&transient, "\"bc.xmax.h\""));
    p.solve().unwrap();
    let s = app::summary("balance", &p).unwrap();
    let hb = &s.heat_balance;
    assert!(hb.generated_w > 0.0 && hb.convection_out_w > 0.0, "{hb:?}");
    assert!(hb.stored_w < 0.0, "the block starts hot and cools: {hb:?}");
    assert!(hb.relative_imbalance().abs() < 1e-10, "{scheme}/{mass}: {hb:?}");
    let closing =
        hb.generated_w + hb.flux_in_w - hb.convection_out_w - hb.fixed_out_w - hb.stored_w;
    assert!(closing.abs() < 1e-9 * hb.generated_w, "{closing} W left over: {hb:?}");
    let per_bc: f64 = hb.per_boundary_w.iter().map(|(_, w)| w).sum();
    assert!(
        (per_bc - hb.convection_out_w - hb.fixed_out_w + hb.flux_in_w).abs()
            < 1e-9 * hb.generated_w,
        "the per-boundary terms add up: {hb:?}"
    );
}

#[rstest]
fn transient_gradients_pass_taylor_tests(
    #[values(
        "\"thermal.k.domain\"",
        "\"thermal.k_elem.domain\"",
        "\"thermal.q.domain\"",
        "\"thermal.rho_c.domain\"",
        "\"thermal.initial_temperature\"",
        "\"bc.xmax.h\"",
        "\"bc.xmax.t_inf\"",
        "\"bc.xmin.temperature\"",
        "\"mesh.coordinates\""
    )]
    register: &str,
    #[values("bdf2", "crank_nicolson")] scheme: &str,
    #[values("final", "integral")] objective: &str,
) {
    let transient =
        format!("dt = 0.2\nsteps = 12\nscheme = \"{scheme}\"\nobjective = \"{objective}\"");
    taylor_passes(&convective(&transient, register));
}

#[test]
fn adaptive_steps_run_and_differentiate() {
    let transient = "adaptive = { end_time = 3.0, tolerance = 0.05, dt_initial = 0.05 }\nscheme = \"crank_nicolson\"\nobjective = \"sum\"";
    let text =
        convective(transient, "\"thermal.k.domain\", \"bc.xmax.h\", \"thermal.rho_c.domain\"");
    let mut p = build(&text);
    p.solve().unwrap();
    let report = p.transient().unwrap().report.clone();
    assert!((report.final_time_s - 3.0).abs() < 1e-9 && report.steps > 4, "{report:?}");
    assert!(report.adaptive_accepted.unwrap() > 1);
    taylor_passes(&text);
}

#[test]
fn checkpointing_gives_the_gradient_of_store_all() {
    let grad = |checkpoints: usize| {
        let transient =
            format!("dt = 0.1\nsteps = 30\nobjective = \"sum\"\ncheckpoints = {checkpoints}");
        let mut p =
            build(&convective(&transient, "\"thermal.k.domain\", \"thermal.rho_c.domain\""));
        p.solve().unwrap();
        let (j, g, _) = p.gradient().unwrap();
        let pv = ParamVector::all(p.registry());
        let peak = p.transient().unwrap().report.peak_stored_states.unwrap();
        (j, g.flatten(&pv), peak)
    };
    let (j_all, g_all, peak_all) = grad(0);
    let (j_cp, g_cp, peak_cp) = grad(4);
    assert_eq!(j_all, j_cp);
    assert_eq!(g_all, g_cp, "recomputed states are bitwise those of the first pass");
    assert!(peak_cp <= 4 && peak_all > 4, "{peak_cp} vs {peak_all}");
}

#[test]
fn transient_errors_name_what_is_wrong() {
    let bad = |transient: &str, want: &str| {
        let text = slab(transient, "").replace(
            "heat_capacity = [{ group = \"domain\", rho_c = 3600000 }]",
            "heat_capacity = []",
        );
        let text = if transient.contains("KEEP_RHO") {
            slab(&transient.replace("KEEP_RHO", ""), "")
        } else {
            text
        };
        let pf = ProblemFile::parse(Path::new("t.toml"), text).unwrap();
        let e = app::build_problem(&pf).err().expect("an error").to_string();
        assert!(e.contains(want), "expected '{want}' in: {e}");
    };
    bad("dt = 0.1\nsteps = 3", "material 'domain' has none");
    bad("KEEP_RHO\ndt = 0.1", "needs either `dt` and `steps`");
    bad("KEEP_RHO\ndt = 0.1\nsteps = 3\nscheme = \"rk4\"", "scheme 'rk4'");
    bad("KEEP_RHO\ndt = -0.1\nsteps = 3", "time step");
    bad("KEEP_RHO\ndt = 0.1\nsteps = 3\nobjective = \"mean\"", "objective 'mean'");
}

#[test]
fn run_writes_a_time_series() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slab.toml");
    std::fs::write(&file, slab("dt = 0.1\nsteps = 10\noutput_every = 5", "")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .current_dir(dir.path())
        .args(["run", file.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["transient"]["steps"], 10);
    assert_eq!(v["transient"]["max_temperature_over_time_K"].as_f64().unwrap(), T0);
    let xdmf = std::fs::read_to_string(dir.path().join("results/slab/results.xdmf")).unwrap();
    // States 0, 5 and 10.
    assert_eq!(xdmf.matches("Grid Name=\"step ").count(), 3, "{xdmf}");
    assert!(xdmf.contains("<Time Value=\"0.5\"/>") && xdmf.contains("<Time Value=\"1.0\"/>"));
}
