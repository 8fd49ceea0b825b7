//! Every problem file in `examples/` builds, solves and passes its Taylor test through the
//! library; the folder is globbed, so a new example is covered without touching this file.
//! Example-specific facts (the sensor data fit their "true" parameters, the nonlinear example
//! needs several Newton steps, per-element and shape gradients have the right lengths) follow.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use gradfem::app;
use gradfem::problem::ProblemFile;
use gradfem::thermal::ThermalProblem;
use gradfem_solvers::taylor::TaylorParams;

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples")
}

fn problem_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .expect("examples/ exists")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        // Identification files (`gradfem identify`: [model] and [[experiment]] tables) are
        // not problems; tests/identify.rs runs them.
        .filter(|p| !std::fs::read_to_string(p).unwrap().contains("[[experiment]]"))
        .collect();
    files.sort();
    files
}

fn build_any(path: &Path) -> (ProblemFile, app::Problem) {
    let pf = ProblemFile::read(path).unwrap_or_else(|e| panic!("{e}"));
    let problem = app::build_problem(&pf).unwrap_or_else(|e| panic!("{e}"));
    (pf, problem)
}

fn build(path: &Path) -> (ProblemFile, ThermalProblem) {
    let pf = ProblemFile::read(path).unwrap_or_else(|e| panic!("{e}"));
    let problem = app::build(&pf).unwrap_or_else(|e| panic!("{e}"));
    (pf, problem)
}

#[test]
fn the_examples_folder_holds_the_documented_examples() {
    let names: Vec<String> = problem_files()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "heat_sink.toml",
        "conductivity_field.toml",
        "sensor_misfit.toml",
        "nonlinear_conductivity.toml",
        "beam_tet10.toml",
        "microactuator_electrothermal.toml",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
    }
}

#[test]
fn every_example_solves_and_passes_its_taylor_test() {
    let files = problem_files();
    assert!(!files.is_empty());
    let mut failures = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let t0 = Instant::now();
        let (pf, mut problem) = build_any(path);
        if let Err(e) = problem.solve() {
            failures.push(format!("{name}: solve: {e}"));
            continue;
        }
        let solve_s = t0.elapsed().as_secs_f64();
        let t = problem.thermal().temperature().expect("solved");
        if !t.iter().all(|v| v.is_finite()) {
            failures.push(format!("{name}: non-finite temperature"));
            continue;
        }
        assert!(!problem.registry().is_empty(), "{name}: registers no parameter");
        let before = problem.gradient().unwrap().0;
        let t_before = problem.thermal().temperature().expect("solved").to_vec();
        let params = TaylorParams {
            h0: pf.spec.taylor.h0,
            steps: pf.spec.taylor.steps,
            min_rate: pf.spec.taylor.min_rate.max(1.9),
        };
        let t1 = Instant::now();
        let result = match problem.taylor_test(&params, |_| {}) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{name}: taylor test: {e}"));
                continue;
            }
        };
        let taylor_s = t1.elapsed().as_secs_f64();
        eprintln!(
            "{name}: build+solve {solve_s:.3} s, Taylor test {taylor_s:.3} s, min rate {:.4}",
            result.min_rate()
        );
        if !result.passed || result.min_rate() < 1.9 || result.rates_used < 2 {
            failures.push(format!(
                "{name}: passed {}, min rate {}, rates used {}\n{}",
                result.passed,
                result.min_rate(),
                result.rates_used,
                result.table()
            ));
        }
        // The Taylor test leaves the problem as it found it: the same parameters, hence the
        // same temperatures up to the solver's round-off (it re-solves from a warm start), and
        // the same J (a misfit amplifies that round-off by the residuals, hence 1e-9).
        let after = problem.gradient().unwrap().0;
        let t_after = problem.thermal().temperature().expect("re-solved");
        let t_scale = t_before.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
        let dt = t_before.iter().zip(t_after).fold(0.0_f64, |m, (a, b)| m.max((a - b).abs()));
        if dt > 1e-11 * t_scale || (after - before).abs() > 1e-9 * before.abs() {
            failures.push(format!(
                "{name}: the Taylor test changed T by {dt:e} and J from {before} to {after}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn sensor_data_fit_the_parameters_they_were_made_with() {
    let (_pf, mut problem) = build(&examples_dir().join("sensor_misfit.toml"));
    let j_guess = problem.objective_value().unwrap();
    let k = problem.registry().id("thermal.k.domain").unwrap();
    let h = problem.registry().id("bc.zmax.h").unwrap();
    assert_eq!(problem.registry().values(k), &[80.0]);
    problem.registry_mut().set_values(k, &[100.0]).unwrap();
    problem.registry_mut().set_values(h, &[40.0]).unwrap();
    problem.apply_parameters().unwrap();
    let j_true = problem.objective_value().unwrap();
    // Readings are rounded to 0.01 K: 8 sensors leave at most ½·8·0.005² = 1e-4.
    assert!(j_true <= 1e-4, "misfit at the true parameters {j_true:e}");
    assert!(j_guess > 1.0, "the starting guess should be visibly off: {j_guess}");
    // From the guess, the gradient points towards more conductivity and more convection.
    problem.registry_mut().set_values(k, &[80.0]).unwrap();
    problem.registry_mut().set_values(h, &[25.0]).unwrap();
    problem.apply_parameters().unwrap();
    let (_, grad, _) = problem.gradient().unwrap();
    assert!(grad.get(k)[0] < 0.0 && grad.get(h)[0] < 0.0, "{:?} {:?}", grad.get(k), grad.get(h));
}

#[test]
fn nonlinear_example_takes_several_newton_steps_and_converges_fast() {
    let (_pf, mut problem) = build(&examples_dir().join("nonlinear_conductivity.toml"));
    assert!(!problem.model.is_linear());
    problem.solve().unwrap();
    let hist = &problem.last_solve.residual_history;
    assert!(problem.last_solve.newton_iterations >= 3, "{hist:?}");
    assert!(hist.last().unwrap() / hist[0] < 1e-12, "{hist:?}");
    // Quadratic convergence in the last step: with e_k = r_k / r_0, e_{k+1} ≈ C e_k², so the
    // number of digits gained roughly doubles: log e_{k+1} / log e_k ≳ 2.
    let n = hist.len();
    let (e1, e2) = (hist[n - 2] / hist[0], hist[n - 1] / hist[0]);
    assert!(e2.ln() / e1.ln() > 1.7, "{hist:?}");
}

#[test]
fn per_element_and_shape_gradients_have_their_lengths() {
    let (_pf, mut problem) = build(&examples_dir().join("conductivity_field.toml"));
    let (_, grad, _) = problem.gradient().unwrap();
    let id = problem.registry().id("thermal.k_elem.domain").unwrap();
    assert_eq!(grad.get(id).len(), problem.model.n_volume_elements());
    let fields = problem.element_gradient_fields(&grad);
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].0, "dJ/dthermal.k_elem.domain");
    assert!(fields[0].1.iter().all(|v| v.is_finite()), "every cell is in the domain group");

    let (_pf, mut problem) = build(&examples_dir().join("beam_tet10.toml"));
    assert_eq!(problem.mesh().n_nodes(), 6590);
    let (_, grad, _) = problem.gradient().unwrap();
    let id = problem.registry().id("mesh.coordinates").unwrap();
    assert_eq!(grad.get(id).len(), 3 * 6590);
}

#[test]
fn cli_check_gradient_on_an_example() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .args(["check-gradient", "--json"])
        .arg(examples_dir().join("sensor_misfit.toml"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(r["passed"], serde_json::Value::Bool(true));
    assert!(r["observed_min_rate"].as_f64().unwrap() >= 1.9, "{r}");
}
