//! Transient problems of the whole chain: a voltage step heats a resistive bar (electrical
//! field quasi-static, thermal field stepped in time, mechanical field quasi-static at every
//! state). The long-time state is the steady solution, the gradients of the end-time and the
//! time-integral objectives pass their Taylor tests parameter by parameter, the CLI writes the
//! history, and a coupling that is not stepped in time yet is refused with a clear error.

use std::path::Path;
use std::process::Command;

use gradfem::app;
use gradfem::problem::ProblemFile;
use gradfem_solvers::taylor::TaylorParams;

/// A polysilicon-like bar between a voltage terminal (x = 0) and ground (x = L), held at the
/// ambient temperature at both ends, cooled on top, clamped at x = 0 and free to expand.
fn bar(transient: &str, extra_conductor: &str) -> String {
    format!(
        r#"title = "heated bar"

[mesh]
box = {{ lengths = [0.01, 0.002, 0.0005], divisions = [10, 2, 1], cell = "tet4" }}

[[thermal.material]]
group = "domain"
k = 30.0

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 293.15

[[thermal.bc]]
group = "xmax"
kind = "temperature"
value = 293.15

[[thermal.bc]]
group = "zmax"
kind = "convection"
h = 500.0
t_inf = 293.15

[[electrical.conductor]]
group = "domain"
sigma = 2.0e4
{extra_conductor}

[[electrical.terminal]]
group = "xmin"
kind = "voltage"
value = 0.5

[[electrical.terminal]]
group = "xmax"
kind = "ground"

[[mechanical.material]]
group = "domain"
young = 160.0e9
poisson = 0.22
alpha = 2.6e-6
t_ref = 293.15

[[mechanical.bc]]
group = "xmin"
kind = "fixed"

[mechanical]
tip = "xmax"

[[objective]]
kind = "average_displacement"
group = "xmax"
direction = [1.0, 0.0, 0.0]
weight = 1.0e6

{transient}

[parameters]
register = [
    "load.xmin.voltage",
    "electrical.sigma.domain",
    "thermal.k.domain",
    "bc.zmax.h",
    "mechanical.alpha.domain",
    "mechanical.young.domain",
    {rho_c}
]
"#,
        rho_c = if transient.is_empty() { "" } else { "\"thermal.rho_c.domain\"," }
    )
}

fn step(dt: f64, steps: usize, objective: &str) -> String {
    format!(
        "[transient]\ndt = {dt}\nsteps = {steps}\nscheme = \"bdf2\"\nheat_capacity = [{{ group = \"domain\", rho_c = 1.6e6 }}]\ninitial_temperature = 293.15\nobjective = \"{objective}\""
    )
}

fn build(dir: &Path, text: &str) -> Result<(ProblemFile, app::Problem), String> {
    let path = dir.join("bar.toml");
    std::fs::write(&path, text).unwrap();
    let file = ProblemFile::read(&path).map_err(|e| e.to_string())?;
    let problem = app::build_problem(&file).map_err(|e| e.to_string())?;
    Ok((file, problem))
}

#[test]
fn a_long_run_ends_at_the_steady_solution() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut steady) = build(dir.path(), &bar("", "")).unwrap();
    let j_steady = steady.objective_terms().unwrap().0;
    // τ = L² ρc / (π² k) ≈ 0.5 s: 150 s is far past it.
    let (_, mut long) = build(dir.path(), &bar(&step(1.5, 100, "final"), "")).unwrap();
    let j_long = long.objective_terms().unwrap().0;
    assert!(j_steady > 0.0, "the bar expands: {j_steady}");
    assert!((j_long - j_steady).abs() <= 1e-8 * j_steady, "{j_long} vs steady {j_steady}");
    // The gradient by the steady parameters reaches the steady one too (ρc's goes to zero).
    let (_, g_steady, _) = steady.gradient().unwrap();
    let (_, g_long, _) = long.gradient().unwrap();
    for name in ["load.xmin.voltage", "electrical.sigma.domain", "thermal.k.domain", "bc.zmax.h"] {
        let id = steady.registry().id(name).unwrap();
        let id_long = long.registry().id(name).unwrap();
        let (a, b) = (g_steady.get(id)[0], g_long.get(id_long)[0]);
        assert!((a - b).abs() <= 1e-6 * a.abs(), "{name}: steady {a} vs long run {b}");
    }
}

#[rstest::rstest]
#[case::end_time("final", "")]
#[case::time_integral("integral", "")]
#[case::between_two_states("at", "time = 0.325")]
#[case::maximum_over_time("max", "sharpness = 50.0")]
#[case::misfit_to_a_history("misfit", "measured = \"measured.csv\"")]
fn every_parameter_passes_its_taylor_test(#[case] objective: &str, #[case] key: &str) {
    let dir = tempfile::tempdir().unwrap();
    // Measured deflections (µm) that the bar at 0.5 V does not quite reach.
    std::fs::write(
        dir.path().join("measured.csv"),
        "time_s,tip_um\n0.1,0.02\n0.3,0.05\n0.55,0.07\n",
    )
    .unwrap();
    // 0.6 s: the bar is still heating, so ρc matters.
    let (_, mut p) =
        build(dir.path(), &bar(&format!("{}\n{key}", step(0.05, 12, objective)), "")).unwrap();
    let params = TaylorParams { h0: 1e-2, steps: 4, min_rate: 1.9 };
    let parts = p.taylor_test_per_parameter(&params, |_| {}).unwrap();
    assert_eq!(parts.len(), 7);
    for part in &parts {
        assert!(part.result.passed, "{} ({objective}):\n{}", part.name, part.result.table());
    }
    let rho_c = parts.iter().find(|t| t.name == "thermal.rho_c.domain").unwrap();
    assert!(rho_c.result.dj_dm.abs() > 1e-3 * rho_c.result.j0.abs(), "ρc matters here");
}

#[test]
fn the_cli_writes_the_step_response() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bar.toml");
    std::fs::write(&path, bar(&step(0.1, 20, "final"), "")).unwrap();
    let out = dir.path().join("out");
    let status = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .args(["--quiet", "run"])
        .arg(&path)
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let csv = std::fs::read_to_string(out.join("time_history.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "time_s,max_temperature_K,tip_displacement_x_m,tip_displacement_y_m,tip_displacement_z_m,objective"
    );
    let rows: Vec<Vec<f64>> =
        lines.map(|l| l.split(',').map(|v| v.parse().unwrap()).collect()).collect();
    assert_eq!(rows.len(), 21);
    assert_eq!(rows[0][0], 0.0);
    assert!((rows[20][0] - 2.0).abs() < 1e-12);
    // A step response: the temperature and the expansion rise monotonically from rest.
    assert!(rows[0][2].abs() < 1e-20);
    for w in rows.windows(2) {
        assert!(w[1][1] >= w[0][1] && w[1][2] > w[0][2], "{w:?}");
    }
    // The objective column is the tip displacement in µm (weight 1e6).
    assert!((rows[20][5] - 1e6 * rows[20][2]).abs() < 1e-9 * rows[20][5]);
    let png = std::fs::read(out.join("time_history.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // Every output step of the results holds the displacement of its state.
    let results = gradfem::io::h5::read_results(&out.join("results.h5")).unwrap();
    assert_eq!(results.steps.len(), 21);
    for s in &results.steps {
        assert!(s.fields.iter().any(|f| f.name == "displacement"), "t = {}", s.time);
    }
}

#[test]
fn a_temperature_dependent_resistivity_is_refused_in_time() {
    let dir = tempfile::tempdir().unwrap();
    // Refused when the problem is built, before anything is solved.
    let Err(e) = build(dir.path(), &bar(&step(0.1, 5, "final"), "alpha_r = 1.0e-3")) else {
        panic!("a two-way electro-thermal problem in time must be refused");
    };
    assert!(e.contains("resistivity independent of T") && e.contains("alpha_r"), "{e}");
}

/// J of the bar with the `[transient]` objective rule `objective` and its extra key.
fn j_of(dir: &Path, objective: &str, key: &str) -> f64 {
    let (_, mut p) = build(dir, &bar(&format!("{}\n{key}", step(0.1, 20, objective)), "")).unwrap();
    p.objective_terms().unwrap().0
}

#[test]
fn the_time_rules_agree_with_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let last = j_of(dir.path(), "final", "");
    assert!((j_of(dir.path(), "at", "time = 2.0") - last).abs() <= 1e-12 * last);
    // Between the states at 1.0 s and 1.1 s: linear.
    let (a, b) = (j_of(dir.path(), "at", "time = 1.0"), j_of(dir.path(), "at", "time = 1.1"));
    let mid = j_of(dir.path(), "at", "time = 1.025");
    assert!((mid - (0.75 * a + 0.25 * b)).abs() <= 1e-12 * mid, "{mid} vs {a}, {b}");
    // The deflection rises monotonically: its smooth maximum lies within ln(N + 1)/ρ above
    // the final value.
    let rho = 200.0;
    let ks = j_of(dir.path(), "max", &format!("sharpness = {rho}"));
    assert!(ks >= last && ks <= last + (21.0f64).ln() / rho, "{ks} vs {last}");
    // A history measured on the model itself fits exactly.
    let rows: String = [0.3, 0.75, 1.5]
        .iter()
        .map(|t| format!("{t},{:e}\n", j_of(dir.path(), "at", &format!("time = {t}"))))
        .collect();
    std::fs::write(dir.path().join("self.csv"), format!("# t, u (um)\n{rows}")).unwrap();
    let fit = j_of(dir.path(), "misfit", "measured = \"self.csv\"");
    assert!(fit.abs() < 1e-24, "{fit}");
}

#[rstest::rstest]
#[case::after_the_run("at", "time = 2.5", "t = 2.5 s lies outside the run, 0 … 2 s")]
#[case::no_sharpness("max", "", "objective = \"max\" needs `sharpness`")]
#[case::stray_time("final", "time = 1.0", "`time` goes with objective = \"at\", not \"final\"")]
#[case::bad_row("misfit", "measured = \"bad.csv\"", "bad.csv:3:1: expected two numbers")]
#[case::time_not_increasing(
    "misfit",
    "measured = \"back.csv\"",
    "back.csv:2:1: time 0.5 s does not increase"
)]
fn bad_time_rules_are_refused(#[case] objective: &str, #[case] key: &str, #[case] message: &str) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.csv"), "t,u\n0.5,1\n1.0\n").unwrap();
    std::fs::write(dir.path().join("back.csv"), "1.0,1\n0.5,2\n").unwrap();
    let text = bar(&format!("{}\n{key}", step(0.1, 20, objective)), "");
    let e = match build(dir.path(), &text) {
        Err(e) => e,
        Ok((_, mut p)) => p.objective_terms().unwrap_err().to_string(),
    };
    assert!(e.contains(message), "{e}");
}
