//! `gradfem optimize`: bounds, constraints by augmented Lagrangian, outputs.

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
