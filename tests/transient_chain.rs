//! Transient problems of the whole chain: a voltage step heats a resistive bar (electrical
//! field quasi-static, thermal field stepped in time, mechanical field quasi-static at every
//! state). The long-time state is the steady solution, the gradients of the end-time and the
//! time-integral objectives pass their Taylor tests parameter by parameter, the CLI writes the
//! history. With a resistivity that depends on T the φ ⇄ T cycle is stepped as one coupled
//! solve per step; what it cannot do in time is refused with its reason.

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
fn adaptive_steps_carry_the_whole_chain() {
    let dir = tempfile::tempdir().unwrap();
    let transient = "[transient]\nadaptive = { end_time = 0.6, tolerance = 0.05, dt_initial = 0.02 }\nscheme = \"implicit_euler\"\nheat_capacity = [{ group = \"domain\", rho_c = 1.6e6 }]\ninitial_temperature = 293.15\nobjective = \"integral\"";
    let (_, mut p) = build(dir.path(), &bar(transient, "")).unwrap();
    p.solve().unwrap();
    let report = p.transient().unwrap().report.clone();
    assert!((report.final_time_s - 0.6).abs() < 1e-12 && report.steps > 4, "{report:?}");
    assert!(report.adaptive_accepted.unwrap() > 1, "{report:?}");
    // The mechanical field follows every chosen state.
    let history = p.mechanical_history().unwrap();
    assert_eq!(history.displacement.len(), report.steps + 1);
    let params = TaylorParams { h0: 1e-2, steps: 4, min_rate: 1.9 };
    for part in p.taylor_test_per_parameter(&params, |_| {}).unwrap() {
        assert!(part.passed, "{}: {}\n{}", part.name, part.verdict, part.result.table());
    }
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

/// The bar with a resistivity that depends on T: the φ ⇄ T cycle, stepped in time as one
/// coupled (monolithic) solve per step.
fn two_way(transient: &str) -> String {
    let initial = if transient.is_empty() { "" } else { "\n    \"thermal.initial_temperature\"," };
    bar(transient, "alpha_r = 1.0e-3").replace(
        "    \"mechanical.young.domain\",",
        &format!(
            "    \"mechanical.young.domain\",\n    \"electrical.alpha_r.domain\",\n    \"bc.xmin.temperature\",{initial}"
        ),
    )
}

#[test]
fn a_resistivity_that_depends_on_t_is_stepped_in_time_to_the_steady_state() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut steady) = build(dir.path(), &two_way("")).unwrap();
    assert_eq!(steady.coupling().to_string(), "[electrical ⇄ thermal] → mechanical");
    let (j_steady, g_steady, _) = steady.gradient().unwrap();
    let (_, mut long) = build(dir.path(), &two_way(&step(1.5, 100, "final"))).unwrap();
    long.solve().unwrap();
    assert!(long.is_solved(), "a run in time leaves every field solved");
    let (j_long, g_long, _) = long.gradient().unwrap();
    assert!(long.is_solved(), "the reverse sweep leaves the last state in place");
    assert!((j_long - j_steady).abs() <= 1e-8 * j_steady, "{j_long} vs steady {j_steady}");
    for name in ["load.xmin.voltage", "electrical.alpha_r.domain", "thermal.k.domain", "bc.zmax.h"]
    {
        let a = g_steady.get(steady.registry().id(name).unwrap())[0];
        let b = g_long.get(long.registry().id(name).unwrap())[0];
        assert!((a - b).abs() <= 1e-6 * a.abs(), "{name}: steady {a} vs long run {b}");
    }
    // The run's report and history come from the coupled steps.
    let report = &long.transient().unwrap().report;
    assert_eq!(report.steps, 100);
    // Newton steps while the bar heats, none once a step starts at the steady state.
    assert!(report.newton_iterations > 10 && report.newton_iterations < 100, "{report:?}");
    assert_eq!(long.transient_state_values().unwrap().len(), 101);
}

#[rstest::rstest]
#[case::time_integral("integral", "")]
#[case::maximum_over_time("max", "sharpness = 50.0")]
fn a_resistivity_that_depends_on_t_passes_its_taylor_tests_in_time(
    #[case] objective: &str,
    #[case] key: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let text = two_way(&format!("{}\n{key}", step(0.05, 12, objective)))
        .replace("    \"bc.zmax.h\",", "    \"bc.zmax.h\",\n    \"mesh.coordinates\",");
    let (_, mut p) = build(dir.path(), &text).unwrap();
    let params = TaylorParams { h0: 1e-2, steps: 4, min_rate: 1.9 };
    let parts = p.taylor_test_per_parameter(&params, |_| {}).unwrap();
    assert_eq!(parts.len(), 11);
    for part in &parts {
        assert!(
            part.passed,
            "{} ({objective}): {}\n{}",
            part.name,
            part.verdict,
            part.result.table()
        );
    }
    let alpha_r = parts.iter().find(|t| t.name == "electrical.alpha_r.domain").unwrap();
    assert!(alpha_r.result.dj_dm.abs() > 1e-6 * alpha_r.result.j0.abs(), "α_R matters here");
}

/// The two-way bar stepped by `scheme` (with its extra keys) for `steps` steps of `dt`.
fn two_way_scheme(scheme: &str, dt: f64, steps: usize, objective: &str, extra: &str) -> String {
    let transient = step(dt, steps, objective)
        .replace("scheme = \"bdf2\"", &format!("scheme = \"{scheme}\"\n{extra}"));
    two_way(&transient)
}

#[rstest::rstest]
#[case::crank_nicolson("crank_nicolson", "")]
#[case::theta("theta", "theta = 0.6")]
#[case::crank_nicolson_checkpointed("crank_nicolson", "checkpoints = 3")]
fn theta_schemes_on_a_cycle_pass_their_taylor_tests(#[case] scheme: &str, #[case] extra: &str) {
    let dir = tempfile::tempdir().unwrap();
    let text = two_way_scheme(scheme, 0.05, 12, "integral", extra)
        .replace("    \"bc.zmax.h\",", "    \"bc.zmax.h\",\n    \"mesh.coordinates\",");
    let (_, mut p) = build(dir.path(), &text).unwrap();
    let params = TaylorParams { h0: 1e-2, steps: 4, min_rate: 1.9 };
    let parts = p.taylor_test_per_parameter(&params, |_| {}).unwrap();
    assert_eq!(parts.len(), 11);
    for part in &parts {
        assert!(part.passed, "{} ({scheme}): {}\n{}", part.name, part.verdict, part.result.table());
    }
}

#[rstest::rstest]
#[case::crank_nicolson("crank_nicolson", "")]
#[case::theta("theta", "theta = 0.6")]
#[case::implicit_euler("implicit_euler", "")]
fn a_cycle_whose_coupling_vanishes_steps_as_the_field_alone(
    #[case] scheme: &str,
    #[case] extra: &str,
) {
    // α_R = 1e-13 /K keeps the φ ⇄ T cycle (stepped by the engine, explicit share and all)
    // while changing ρ by 1e-10 at most: J agrees with the one-way chain, whose temperature
    // the thermal field steps on its own.
    let dir = tempfile::tempdir().unwrap();
    let cycle = two_way_scheme(scheme, 0.05, 12, "integral", extra)
        .replace("alpha_r = 1.0e-3", "alpha_r = 1.0e-13");
    let (_, mut coupled) = build(dir.path(), &cycle).unwrap();
    assert_eq!(coupled.coupling().to_string(), "[electrical ⇄ thermal] → mechanical");
    let transient = step(0.05, 12, "integral")
        .replace("scheme = \"bdf2\"", &format!("scheme = \"{scheme}\"\n{extra}"));
    let (_, mut alone) = build(dir.path(), &bar(&transient, "")).unwrap();
    assert_eq!(alone.coupling().to_string(), "electrical → thermal → mechanical");
    let (a, b) = (coupled.objective_terms().unwrap().0, alone.objective_terms().unwrap().0);
    assert!((a - b).abs() <= 1e-9 * b.abs(), "{scheme}: cycle {a} vs alone {b}");
    let (_, ga, _) = coupled.gradient().unwrap();
    let (_, gb, _) = alone.gradient().unwrap();
    for name in ["load.xmin.voltage", "thermal.k.domain", "bc.zmax.h", "thermal.rho_c.domain"] {
        let x = ga.get(coupled.registry().id(name).unwrap())[0];
        let y = gb.get(alone.registry().id(name).unwrap())[0];
        assert!((x - y).abs() <= 1e-8 * y.abs(), "{scheme} {name}: cycle {x} vs alone {y}");
    }
}

#[rstest::rstest]
#[case::implicit_euler("implicit_euler", 1.0)]
#[case::crank_nicolson("crank_nicolson", 2.0)]
#[case::bdf2("bdf2", 2.0)]
fn the_cycle_in_time_converges_at_the_order_of_its_scheme(
    #[case] scheme: &str,
    #[case] order: f64,
) {
    // The tip displacement at t = 0.4 s (the bar still heating, τ ≈ 0.5 s) with 8, 16 and 32
    // steps: successive differences shrink by 2^order.
    let dir = tempfile::tempdir().unwrap();
    let j: Vec<f64> = [8, 16, 32]
        .iter()
        .map(|&n| {
            let text = two_way_scheme(scheme, 0.4 / n as f64, n, "final", "");
            build(dir.path(), &text).unwrap().1.objective_terms().unwrap().0
        })
        .collect();
    let rate = ((j[0] - j[1]) / (j[1] - j[2])).abs().log2();
    assert!((rate - order).abs() < 0.15, "{scheme}: J {j:?}, observed order {rate:.3}");
}

#[rstest::rstest]
#[case::bdf2("bdf2")]
#[case::crank_nicolson("crank_nicolson")]
fn checkpoints_on_a_cycle_give_the_gradient_of_every_state_kept(#[case] scheme: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut all) =
        build(dir.path(), &two_way_scheme(scheme, 0.05, 20, "integral", "")).unwrap();
    let (_, mut few) =
        build(dir.path(), &two_way_scheme(scheme, 0.05, 20, "integral", "checkpoints = 3"))
            .unwrap();
    let (ja, ga, _) = all.gradient().unwrap();
    let (jf, gf, _) = few.gradient().unwrap();
    assert_eq!(ja, jf, "the same forward run");
    for (name, _) in all.registry().iter().map(|(id, s)| (s.name.clone(), id)).collect::<Vec<_>>() {
        let x = ga.get(all.registry().id(&name).unwrap());
        let y = gf.get(few.registry().id(&name).unwrap());
        for (a, b) in x.iter().zip(y) {
            assert!((a - b).abs() <= 1e-13 * a.abs().max(1e-300), "{scheme} {name}: {a} vs {b}");
        }
    }
    let report = &few.transient().unwrap().report;
    assert!(report.recomputed_steps.unwrap() > 0, "{report:?}");
    assert!(report.peak_stored_states.unwrap() <= 3, "{report:?}");
    assert!(few.is_solved(), "the reverse sweep leaves the last state in place");
    assert_eq!(few.objective_terms().unwrap().0, jf);
}

#[test]
fn adaptive_steps_on_a_cycle_are_chosen_once_and_pass_the_taylor_test() {
    let dir = tempfile::tempdir().unwrap();
    let transient = "[transient]\nadaptive = { end_time = 0.6, tolerance = 0.05, dt_initial = 0.02 }\nscheme = \"crank_nicolson\"\nheat_capacity = [{ group = \"domain\", rho_c = 1.6e6 }]\ninitial_temperature = 293.15\nobjective = \"integral\"";
    let (_, mut p) = build(dir.path(), &two_way(transient)).unwrap();
    p.solve().unwrap();
    let report = p.transient().unwrap().report.clone();
    assert!((report.final_time_s - 0.6).abs() < 1e-12 && report.steps > 4, "{report:?}");
    assert!(report.adaptive_accepted.unwrap() > 1, "{report:?}");
    // The mechanical field follows every chosen state.
    assert_eq!(p.mechanical_history().unwrap().displacement.len(), report.steps + 1);
    // The steps hold when a parameter changes (the Taylor test relies on it).
    let params = TaylorParams { h0: 1e-2, steps: 4, min_rate: 1.9 };
    for part in p.taylor_test_per_parameter(&params, |_| {}).unwrap() {
        assert!(part.passed, "{}: {}\n{}", part.name, part.verdict, part.result.table());
    }
    assert_eq!(p.transient().unwrap().report.steps, report.steps);
    // The error of J against a fine fixed-step run follows the tolerance down.
    let fine = two_way_scheme("crank_nicolson", 0.6 / 400.0, 400, "integral", "");
    let j_fine = build(dir.path(), &fine).unwrap().1.objective_terms().unwrap().0;
    let loose = (p.objective_terms().unwrap().0 - j_fine).abs() / j_fine;
    let tight = two_way(&transient.replace("tolerance = 0.05", "tolerance = 0.005"));
    let (_, mut t) = build(dir.path(), &tight).unwrap();
    let tight = (t.objective_terms().unwrap().0 - j_fine).abs() / j_fine;
    assert!(
        loose < 5e-3 && tight < 0.5 * loose,
        "relative errors: {loose:.3e} (0.05 K), {tight:.3e} (0.005 K)"
    );
    assert!(t.transient().unwrap().report.steps > report.steps);
}

/// The same bar, its steps solved staggered instead of monolithically.
fn staggered(text: &str) -> String {
    text.replace("[transient]", "[coupling]\nscheme = \"staggered\"\n\n[transient]")
}

/// Staggered steps (block Gauss–Seidel per step, the stepped field's Newton with its time
/// terms, the transposed iteration per step in reverse) solve the same discrete equations as
/// monolithic ones: the same J and gradient, to the cycle's tolerance.
#[rstest::rstest]
#[case::bdf2("bdf2", "")]
#[case::crank_nicolson("crank_nicolson", "")]
#[case::theta("theta", "theta = 0.6")]
#[case::implicit_euler_checkpointed("implicit_euler", "checkpoints = 3")]
fn staggered_steps_on_a_cycle_agree_with_monolithic_ones(
    #[case] scheme: &str,
    #[case] extra: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let text = two_way_scheme(scheme, 0.05, 12, "integral", extra);
    let (_, mut mono) = build(dir.path(), &text).unwrap();
    let (_, mut stag) = build(dir.path(), &staggered(&text)).unwrap();
    let (ja, ga, _) = mono.gradient().unwrap();
    let (jb, gb, _) = stag.gradient().unwrap();
    assert!((ja - jb).abs() <= 1e-9 * ja.abs(), "{scheme}: monolithic {ja} vs staggered {jb}");
    let mut compared = 0;
    let names: Vec<String> = stag.registry().names().map(String::from).collect();
    for name in names {
        let id = mono.registry().id(&name).unwrap();
        let (a, b) = (ga.get(id), gb.get(stag.registry().id(&name).unwrap()));
        // Sensitivities J depends on (dJ/dp·p) to 1e-12 of J are compared; the others (E of a
        // freely expanding bar) are rounding noise on both sides.
        let values = mono.registry().values(id);
        let scale = a.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let reach = a.iter().zip(values).fold(0.0f64, |m, (g, p)| m.max((g * p).abs()));
        if reach <= 1e-12 * ja.abs() {
            continue;
        }
        for (x, y) in a.iter().zip(b) {
            assert!(
                (x - y).abs() <= 1e-7 * scale,
                "{scheme}, {name}: monolithic {x} vs staggered {y}"
            );
        }
        compared += 1;
    }
    assert!(compared >= 8, "{compared} parameters compared");
    let report = &stag.transient().unwrap().report;
    assert_eq!(report.steps, 12);
    assert!(report.newton_iterations > 0, "{report:?}");
}

#[test]
fn staggered_steps_on_a_cycle_pass_their_taylor_tests() {
    let dir = tempfile::tempdir().unwrap();
    let text = staggered(
        &two_way_scheme("crank_nicolson", 0.05, 12, "integral", "")
            .replace("    \"bc.zmax.h\",", "    \"bc.zmax.h\",\n    \"mesh.coordinates\","),
    );
    let (_, mut p) = build(dir.path(), &text).unwrap();
    let params = TaylorParams { h0: 1e-2, steps: 4, min_rate: 1.9 };
    let parts = p.taylor_test_per_parameter(&params, |_| {}).unwrap();
    assert_eq!(parts.len(), 11);
    for part in &parts {
        assert!(part.passed, "{}: {}\n{}", part.name, part.verdict, part.result.table());
    }
}

/// Step doubling on staggered steps chooses the steps monolithic ones choose.
#[test]
fn adaptive_staggered_steps_follow_the_monolithic_ones() {
    let dir = tempfile::tempdir().unwrap();
    let transient = "[transient]\nadaptive = { end_time = 0.6, tolerance = 0.05, dt_initial = 0.02 }\nscheme = \"crank_nicolson\"\nheat_capacity = [{ group = \"domain\", rho_c = 1.6e6 }]\ninitial_temperature = 293.15\nobjective = \"integral\"";
    let (_, mut mono) = build(dir.path(), &two_way(transient)).unwrap();
    let (_, mut stag) = build(dir.path(), &staggered(&two_way(transient))).unwrap();
    let (ja, jb) = (mono.objective_terms().unwrap().0, stag.objective_terms().unwrap().0);
    let (a, b) = (&mono.transient().unwrap().report, &stag.transient().unwrap().report);
    assert_eq!(a.steps, b.steps);
    assert!(a.steps > 4, "{a:?}");
    assert!((ja - jb).abs() <= 1e-9 * ja.abs(), "monolithic {ja} vs staggered {jb}");
}

/// A step whose staggered iteration cannot converge names the step and the way out.
#[test]
fn a_staggered_step_that_does_not_converge_names_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let text = staggered(&two_way_scheme("implicit_euler", 0.05, 4, "final", ""))
        .replace("scheme = \"staggered\"", "scheme = \"staggered\"\nmax_iterations = 2");
    let (_, mut p) = build(dir.path(), &text).unwrap();
    let e = p.solve().unwrap_err().to_string();
    assert!(
        e.contains("time step to t = 5.000000e-2")
            && e.contains("did not converge in 2 sweeps")
            && e.contains("monolithic"),
        "{e}"
    );
}

#[rstest::rstest]
#[case::adaptive_bdf2(
    "dt = 0.1\nsteps = 5",
    "adaptive = { end_time = 0.5, tolerance = 0.01 }",
    "θ-scheme"
)]
fn what_a_cycle_cannot_do_in_time_is_refused_early(
    #[case] from: &str,
    #[case] to: &str,
    #[case] reason: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let text = two_way(&step(0.1, 5, "final")).replace(from, to);
    let Err(e) = build(dir.path(), &text) else {
        panic!("'{to}' with a cycle in time must be refused");
    };
    assert!(e.contains(reason) && e.contains("bar.toml"), "{e}");
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
