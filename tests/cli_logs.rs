//! The command line in a pipeline: standard error redirected to a file or pipe (as every test
//! here runs it) gets no ANSI escape codes, plain progress lines while a stage runs, and the
//! summaries' balances and timings are the whole problem's.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_gradfem");

fn example(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples").join(file)
}

fn run(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).current_dir(cwd).env_remove("RUST_LOG").env_remove("NO_COLOR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("the gradfem binary runs");
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_redirected_log_has_plain_progress_lines_and_no_escape_codes() {
    let dir = tempfile::tempdir().unwrap();
    let file = example("microactuator_drive_optimize.toml");
    let out = run(
        dir.path(),
        &["optimize", file.to_str().unwrap(), "-o", "out"],
        &[("GRADFEM_PROGRESS_INTERVAL", "0.05"), ("RUST_LOG", "info")],
    );
    let stderr = text(&out.stderr);
    assert!(!stderr.contains('\x1b'), "escape codes in a redirected log:\n{stderr}");
    assert!(!stderr.contains('\r'), "carriage returns (an animation) in a log:\n{stderr}");
    assert!(stderr.contains(" INFO "), "the log is not empty (RUST_LOG=info):\n{stderr}");
    let iterations: Vec<&str> =
        stderr.lines().filter(|l| l.contains("] optimizing: iteration")).collect();
    assert!(iterations.len() >= 2, "one plain line per optimizer iteration:\n{stderr}");
    for line in &iterations {
        let seconds = line.trim_start_matches('[').split(" s]").next().unwrap().trim();
        seconds.parse::<f64>().unwrap_or_else(|_| panic!("a time stamp opens the line: {line}"));
    }
    assert!(stderr.contains("] optimizing: done in"), "a closing line:\n{stderr}");
}

#[test]
fn no_progress_and_no_colour_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let file = example("microactuator_drive_optimize.toml");
    let out = run(
        dir.path(),
        &["optimize", file.to_str().unwrap(), "-o", "out", "--quiet"],
        &[("GRADFEM_PROGRESS_INTERVAL", "0.05"), ("NO_COLOR", "1")],
    );
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("optimizing"), "--quiet prints no progress:\n{stderr}");
    assert!(!stderr.contains('\x1b'), "{stderr}");
}

#[test]
fn a_transient_summary_balances_the_stored_heat_and_reports_its_own_counts() {
    let dir = tempfile::tempdir().unwrap();
    let file = example("transient_slab.toml");
    let out = run(dir.path(), &["run", file.to_str().unwrap(), "-o", "out"], &[]);
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("heat balance of the last step"))
        .unwrap_or_else(|| panic!("no transient heat balance:\n{stdout}"));
    assert!(line.contains("stored"), "{line}");
    let imbalance: f64 = line
        .rsplit("imbalance ")
        .next()
        .and_then(|s| s.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no imbalance figure: {line}"));
    assert!(imbalance.abs() < 1e-9, "the balance closes with the stored heat: {line}");
    assert!(
        !stdout.contains("0 Newton iteration(s); assembly"),
        "no steady-solver line with zero counts for a transient run:\n{stdout}"
    );
    let transient = stdout.lines().find(|l| l.trim_start().starts_with("transient:")).unwrap();
    assert!(transient.contains("40 steps") && transient.contains("40 Newton"), "{transient}");
}

#[test]
fn gradient_timings_cover_the_whole_problem() {
    let dir = tempfile::tempdir().unwrap();
    let file = example("microactuator_builtin.toml");
    let out = run(dir.path(), &["gradient", file.to_str().unwrap(), "-o", "out"], &[]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("wall clock"), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("out/gradients.json")).unwrap(),
    )
    .unwrap();
    let timings = &report["timings"];
    let forward = timings["forward_total_s"].as_f64().expect("forward_total_s");
    let gradient = timings["gradient_total_s"].as_f64().expect("gradient_total_s");
    let thermal = &timings["forward"];
    let thermal_only = thermal["assembly_s"].as_f64().unwrap()
        + thermal["factor_s"].as_f64().unwrap()
        + thermal["solve_s"].as_f64().unwrap();
    assert!(forward >= thermal_only, "the whole forward includes the thermal stage: {timings}");
    assert!(gradient > 0.0, "{timings}");
}
