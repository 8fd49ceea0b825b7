//! `gradfem optimize`: bounds, constraints (MMA and the augmented Lagrangian), peak limits,
//! resuming, outputs.

use std::process::Command;

fn write_problem(dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
title = "optimize test block"
[mesh]
box = {{ lengths = [1.0, 0.5, 0.5], divisions = [6, 3, 3], cell = "tet4" }}

[[thermal.material]]
group = "domain"
k = 2.0
source = 10.0

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0

[[objective]]
kind = "average"
group = "domain"
{extra}
"#
    );
    let path = dir.join("p.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn run(path: &std::path::Path, out: &std::path::Path) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .args(["optimize", path.to_str().unwrap(), "--json", "-o", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn an_unconstrained_run_stops_at_the_bound_that_lowers_the_objective() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_problem(
        dir.path(),
        r#"[parameters]
register = ["thermal.k.domain"]
bounds = { "thermal.k.domain" = [1.0, 50.0] }"#,
    );
    let r = run(&p, dir.path());
    let k = r["design"]["thermal.k.domain"][0].as_f64().unwrap();
    // The mean temperature falls as k grows: the optimum is the upper bound.
    assert!((k - 50.0).abs() < 1e-9, "{r}");
    assert!(r["final_objective"].as_f64().unwrap() < r["initial_objective"].as_f64().unwrap());
    for f in ["history.csv", "history.png", "results.xdmf", "results.h5"] {
        assert!(dir.path().join(f).exists(), "{f} missing");
    }
    let png = std::fs::read(dir.path().join("history.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let csv = std::fs::read_to_string(dir.path().join("history.csv")).unwrap();
    assert!(csv.starts_with("iteration,objective"), "{csv}");
}

#[test]
fn a_temperature_limit_is_met_with_equality_at_the_optimum() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_problem(
        dir.path(),
        r#"[parameters]
register = ["thermal.q.domain"]
bounds = { "thermal.q.domain" = [0.0, 1000.0] }

[optimize]
maximize = true

[[optimize.constraint]]
kind = "max"
group = "domain"
p = 8.0
upper = 301.0"#,
    );
    let r = run(&p, dir.path());
    let c = &r["constraints"][0];
    let (v, upper) = (c["value"].as_f64().unwrap(), c["upper"].as_f64().unwrap());
    // T − 300 is proportional to q: the largest heating within the limit makes it active. The
    // start (q = 10) overshoots the limit, so the optimum lies below it, at q = 10 · 1/ΔT₀.
    assert!((v - upper).abs() < 1e-6 * (upper - 300.0), "{r}");
    let q = r["design"]["thermal.q.domain"][0].as_f64().unwrap();
    assert!(q > 1.0 && q < 10.0, "{r}");
}

#[test]
fn design_subsets_hold_the_other_parameters_and_watch_writes_the_history_as_it_goes() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_problem(
        dir.path(),
        r#"[parameters]
register = ["thermal.k.domain", "thermal.q.domain"]
bounds = { "thermal.k.domain" = [1.0, 50.0] }

[optimize]
design = ["thermal.k.domain"]"#,
    );
    let watch = dir.path().join("watch");
    let o = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .args(["optimize", p.to_str().unwrap(), "--json", "-o"])
        .arg(dir.path())
        .arg("--watch")
        .arg(&watch)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // q would grow the mean temperature without bound; held, it keeps its value.
    assert_eq!(r["design"]["thermal.q.domain"][0].as_f64().unwrap(), 10.0, "{r}");
    assert!((r["design"]["thermal.k.domain"][0].as_f64().unwrap() - 50.0).abs() < 1e-9);
    let csv = std::fs::read_to_string(watch.join("history.csv")).unwrap();
    assert!(csv.lines().next().unwrap().contains("thermal.k.domain"), "{csv}");
    assert!(!csv.lines().next().unwrap().contains("thermal.q.domain"), "{csv}");
    assert!(watch.join("history.png").exists());
    // A design name that is not registered is an error that lists the registered ones.
    let p = write_problem(
        dir.path(),
        "[parameters]\nregister = [\"thermal.k.domain\"]\n\n[optimize]\ndesign = [\"thermal.q.domain\"]",
    );
    let o = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .args(["optimize", p.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("thermal.k.domain"), "{err}");
}

const PEAK_LIMIT: &str = r#"[parameters]
register = ["thermal.q.domain"]
bounds = { "thermal.q.domain" = [0.0, 1000.0] }

[optimize]
maximize = true
{settings}

[[optimize.constraint]]
name = "peak T, hot side"
kind = "peak"
group = "domain"
upper = 305.0"#;

fn peak_problem(dir: &std::path::Path, settings: &str) -> std::path::PathBuf {
    write_problem(dir, &PEAK_LIMIT.replace("{settings}", settings))
}

/// With L-BFGS the KS aggregate itself is bounded: the true peak stays below the limit (by at
/// most ln(n)/ρ), where MMA puts it on the limit.
#[test]
fn a_peak_limit_holds_on_the_true_peak_with_either_method() {
    let dir = tempfile::tempdir().unwrap();
    let mma = run(&peak_problem(dir.path(), ""), dir.path());
    let c = &mma["constraints"][0];
    let peak = c["true_peak_K"].as_f64().unwrap();
    assert!((peak - 305.0).abs() < 1e-3, "{mma}");
    assert!(c["value"].as_f64().unwrap() > peak, "the aggregate bounds the peak: {mma}");
    assert_eq!(
        (&mma["method"], &mma["converged"], &mma["feasible"]),
        (&"mma".into(), &true.into(), &true.into())
    );

    let dir = tempfile::tempdir().unwrap();
    let lbfgs = run(&peak_problem(dir.path(), r#"method = "lbfgs""#), dir.path());
    let c = &lbfgs["constraints"][0];
    let (aggregate, peak_l) = (c["value"].as_f64().unwrap(), c["true_peak_K"].as_f64().unwrap());
    // The augmented Lagrangian ends within its outer-iteration limit, close to the bound.
    assert!((aggregate - 305.0).abs() < 1e-2 && aggregate <= 305.0 + 1e-6 * 305.0, "{lbfgs}");
    assert!(peak_l < 305.0 && peak_l > 305.0 - (200f64).ln(), "{lbfgs}");
    // Both heat as much as the limit allows: q ∝ the temperature rise.
    let (qm, ql) = (
        mma["design"]["thermal.q.domain"][0].as_f64().unwrap(),
        lbfgs["design"]["thermal.q.domain"][0].as_f64().unwrap(),
    );
    assert!(ql < qm && (qm / ql - (peak - 300.0) / (peak_l - 300.0)).abs() < 1e-3, "{qm} {ql}");
    assert!(mma["evaluations"].as_u64() < lbfgs["evaluations"].as_u64(), "{mma} {lbfgs}");
}

/// An interrupted run (here: stopped at its iteration limit) continues with `--resume` from
/// the last row of its history; iterations and evaluations count on, and the end is the same
/// design as an uninterrupted run's.
#[test]
fn resume_continues_an_interrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let p = peak_problem(dir.path(), "max_iterations = 2");
    let first = run(&p, dir.path());
    assert_eq!(first["converged"], false, "{first}");
    assert!(first["status"].as_str().unwrap().contains("iteration limit (2"), "{first}");
    let rows_before = std::fs::read_to_string(dir.path().join("history.csv")).unwrap();
    let p = peak_problem(dir.path(), "max_iterations = 30");
    let o = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .args(["optimize", p.to_str().unwrap(), "--json", "--resume", "-o"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let resumed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(resumed["converged"], true, "{resumed}");
    let csv = std::fs::read_to_string(dir.path().join("history.csv")).unwrap();
    assert!(csv.starts_with(&rows_before), "the old rows are kept:\n{rows_before}\n---\n{csv}");
    let iterations: Vec<usize> =
        csv.lines().skip(1).map(|l| l.split(',').next().unwrap().parse().unwrap()).collect();
    assert_eq!(iterations, (0..iterations.len()).collect::<Vec<_>>(), "{csv}");
    assert!(resumed["evaluations"].as_u64() > first["evaluations"].as_u64());

    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = run(&peak_problem(fresh_dir.path(), ""), fresh_dir.path());
    let q = |r: &serde_json::Value| r["design"]["thermal.q.domain"][0].as_f64().unwrap();
    assert!((q(&resumed) / q(&fresh) - 1.0).abs() < 1e-4, "{resumed} {fresh}");

    // Without a history there is nothing to resume.
    let empty = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .args(["optimize", p.to_str().unwrap(), "--resume", "-o"])
        .arg(empty.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("history.csv does not exist"), "{err}");
}

#[test]
fn an_unknown_method_names_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = peak_problem(dir.path(), r#"method = "newton""#);
    let o = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .args(["optimize", p.to_str().unwrap(), "-o", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    let line =
        std::fs::read_to_string(&p).unwrap().lines().position(|l| l.starts_with("method")).unwrap()
            + 1;
    assert!(
        err.contains("p.toml")
            && err.contains("method = 'newton'")
            && err.contains(&format!("p.toml:{line}:")),
        "{err}"
    );
}
