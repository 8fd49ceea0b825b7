//! `gradfem identify`: Ogden and Neo-Hookean fits to Treloar's three curves from an
//! identification file, with standard errors, per-experiment misfits, JSON and PNG outputs, and
//! located errors for bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn gradfem_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gradfem")).current_dir(dir).args(args).output().unwrap()
}

#[test]
fn ogden_fit_to_treloar_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let file = root().join("examples/treloar_ogden3.toml");
    let out = gradfem_in(dir.path(), &["identify", file.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["model"], "ogden3");
    // The best 3-term fit (see physics/mechanical/examples/treloar_fit.rs).
    let p = &r["parameters"];
    assert!((p["mu1"].as_f64().unwrap() - 0.4023).abs() < 1e-3, "{p}");
    assert!((p["alpha1"].as_f64().unwrap() - 1.243).abs() < 1e-2, "{p}");
    for name in ["mu1", "mu2", "mu3", "alpha1", "alpha2", "alpha3"] {
        let se = r["std_errors"][name].as_f64().unwrap();
        assert!(se.is_finite() && se > 0.0, "{name}: {se}");
    }
    let exps = r["experiments"].as_array().unwrap();
    assert_eq!(exps.len(), 3);
    for e in exps {
        let err = e["rms_relative_error"].as_f64().unwrap();
        assert!(err > 0.0 && err < 0.1, "{e}");
    }
    // The Neo-Hookean comparison cannot follow the upturn.
    let nh = &r["neo_hookean"];
    assert!((nh["parameters"]["mu1"].as_f64().unwrap() - 0.388).abs() < 0.01, "{nh}");
    assert!(nh["experiments"][0]["rms_relative_error"].as_f64().unwrap() > 0.2, "{nh}");
    assert!(dir.path().join("results/treloar_ogden3/identify.json").exists());
    assert!(dir.path().join("results/treloar_ogden3/fit.png").metadata().unwrap().len() > 1000);
}

/// A correlation matrix from JSON: names and rows; checks it is symmetric with a unit
/// diagonal and entries in [−1, 1].
fn correlation(r: &serde_json::Value) -> (Vec<String>, Vec<Vec<f64>>) {
    let c = &r["correlation"];
    let names: Vec<String> =
        c["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
    let m: Vec<Vec<f64>> = c["matrix"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect())
        .collect();
    assert_eq!(m.len(), names.len(), "{c}");
    for (i, row) in m.iter().enumerate() {
        assert_eq!(row.len(), names.len(), "{c}");
        assert_eq!(row[i], 1.0, "unit diagonal: {c}");
        for (j, v) in row.iter().enumerate() {
            assert_eq!(*v, m[j][i], "symmetric: {c}");
            assert!((-1.0..=1.0).contains(v), "{c}");
        }
    }
    (names, m)
}

#[test]
fn treloar_fit_reports_correlations_convention_and_starts() {
    let dir = tempfile::tempdir().unwrap();
    let file = root().join("examples/treloar_ogden3.toml");
    let out = gradfem_in(dir.path(), &["identify", file.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (names, m) = correlation(&r);
    assert_eq!(names, ["mu1", "alpha1", "mu2", "alpha2", "mu3", "alpha3"]);
    // μ₂ and μ₃ (70–80 % standard errors) are determined only together.
    let strongest = (0..6)
        .flat_map(|i| (0..6).filter(move |&j| j != i).map(move |j| (i, j)))
        .map(|(i, j)| m[i][j].abs())
        .fold(0.0, f64::max);
    assert!(strongest > 0.9, "some pair is strongly correlated: {m:?}");
    // The objective at each starting point, and at each start's end: the fits move.
    let starts: Vec<f64> =
        r["start_objectives"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    let ends: Vec<f64> =
        r["final_objectives"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(starts.len(), r["starts"].as_u64().unwrap() as usize);
    assert_eq!(ends.len(), starts.len());
    let objective = r["objective"].as_f64().unwrap();
    assert_eq!(ends.iter().copied().fold(f64::INFINITY, f64::min), objective);
    for (a, b) in starts.iter().zip(&ends) {
        assert!(b < a, "start {a} -> end {b}");
    }
    assert!(starts.iter().all(|&a| a > 10.0 * objective), "{starts:?} vs {objective}");
    // The convention of μ_p, and Ogden's published μ̃_p = 2μ_p/α_p.
    let convention = r["parameter_convention"].as_str().unwrap();
    assert!(convention.contains("2μ_p/α_p²") && convention.contains("μ̃_p = 2μ_p/α_p"));
    assert!(convention.contains("MPa"), "the unit of the CSV headers: {convention}");
    let p = &r["parameters"];
    for k in 1..=3 {
        let (mu, alpha) =
            (p[format!("mu{k}")].as_f64().unwrap(), p[format!("alpha{k}")].as_f64().unwrap());
        let tilde = r["mu_tilde"][format!("mu_tilde{k}")].as_f64().unwrap();
        assert!((tilde - 2.0 * mu / alpha).abs() <= 1e-12 * tilde.abs(), "{tilde} {mu} {alpha}");
    }
    // The Neo-Hookean comparison: one parameter, its own trivial correlation.
    let (nh_names, nh) = correlation(&r["neo_hookean"]);
    assert_eq!((nh_names, nh), (vec!["mu1".to_string()], vec![vec![1.0]]));
    // identify.json holds the same.
    let written: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("results/treloar_ogden3/identify.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(written["correlation"], r["correlation"]);
    assert_eq!(written["parameter_convention"], r["parameter_convention"]);
    // The text names the convention and prints the matrix.
    let out = gradfem_in(dir.path(), &["identify", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("convention: Ogden: ψ = Σ_p 2μ_p/α_p²"), "{text}");
    assert!(text.contains("correlation of the fitted parameters"), "{text}");
    assert!(text.contains("strongly correlated"), "{text}");
    assert!(text.contains("μ̃_p = 2μ_p/α_p: mu_tilde1 = "), "{text}");
}

/// The Laplace posterior from the exact Hessian of the misfit: its Gauss–Newton part
/// reproduces the reported standard errors, the exact ones differ by the residual curvature,
/// and posterior.png shows both.
#[test]
fn treloar_fit_reports_the_laplace_posterior_beside_gauss_newton() {
    let dir = tempfile::tempdir().unwrap();
    let file = root().join("examples/treloar_ogden3.toml");
    let out = gradfem_in(dir.path(), &["identify", file.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let l = &r["laplace"];
    assert!(l["positive_definite"].as_bool().unwrap(), "{l}");
    assert!(l["asymmetry"].as_f64().unwrap() < 1e-12, "{l}");
    let entries: Vec<&str> =
        l["entries"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(entries, ["mu1", "alpha1", "mu2", "alpha2", "mu3", "alpha3"]);
    let post = &l["posterior"];
    for (i, name) in entries.iter().enumerate() {
        let gn = post["gauss_newton_std_dev"][i].as_f64().unwrap();
        let se = r["std_errors"][name].as_f64().unwrap();
        assert!((gn - se).abs() <= 1e-8 * se, "{name}: Gauss–Newton {gn} vs std error {se}");
        let exact = post["std_dev"][i].as_f64().unwrap();
        assert!(exact > 0.5 * se && exact < 2.0 * se, "{name}: Laplace {exact} vs {se}");
    }
    // The residuals are not zero: the exact Hessian is not JᵀJ.
    let d = post["gauss_newton_difference"].as_f64().unwrap();
    assert!(d > 1e-6 && d < 0.1, "{d}");
    let png = std::fs::read(dir.path().join("results/treloar_ogden3/posterior.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    let out = gradfem_in(dir.path(), &["identify", file.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Laplace posterior (exact Hessian"), "{text}");
    assert!(text.contains("least determined direction"), "{text}");
}

#[test]
fn neo_hookean_fits_worse_than_ogden() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("examples/treloar_ogden3.toml"))
        .unwrap()
        .replace("kind = \"ogden\"\nterms = 3", "kind = \"neo_hookean\"")
        .replace("../data", root().join("data").to_str().unwrap());
    let file = dir.path().join("nh.toml");
    std::fs::write(&file, text).unwrap();
    let out = gradfem_in(dir.path(), &["identify", file.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mu = r["parameters"]["mu1"].as_f64().unwrap();
    assert!((mu - 0.388).abs() < 0.01, "Neo-Hookean μ {mu}");
    assert_eq!(r["parameters"]["alpha1"].as_f64().unwrap(), 2.0);
    let uni = r["experiments"][0]["rms_relative_error"].as_f64().unwrap();
    assert!(uni > 0.2, "Neo-Hookean cannot follow the upturn: {uni}");
}

#[test]
fn bad_identification_files_are_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let fails = |p: &Path, want: &str| {
        let out = gradfem_in(dir.path(), &["identify", p.to_str().unwrap()]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(err.contains(want), "expected '{want}' in: {err}");
    };
    let p = write(
        "a.toml",
        "[model]\nkind = \"ogden\"\n[[experiment]]\nmode = \"torsion\"\nfile = \"x.csv\"\n",
    );
    fails(&p, "a.toml:4:1: experiment mode 'torsion'");
    // Value errors carry their line and column, like syntax errors.
    let treloar = root().join("data/treloar/treloar1944_uniaxial.csv");
    write("x.csv", &std::fs::read_to_string(treloar).unwrap());
    let p = write(
        "e.toml",
        "title = \"t\"\n[model]\nkind = \"ogden\"\n  terms = 9\n[[experiment]]\nmode = \"uniaxial\"\nfile = \"x.csv\"\n",
    );
    fails(&p, "e.toml:4:3: model.terms = 9: expected 1 to 6");
    let p = write(
        "f.toml",
        "[model]\nkind = \"ogden\"\n[[experiment]]\nmode = \"uniaxial\"\nfile = \"x.csv\"\n\
         [[experiment]]\nmode = \"uniaxial\"\nproblem = \"p.toml\"\n",
    );
    fails(&p, "f.toml:8:1: a 'uniaxial' experiment needs `file");
    write("bad_row.csv", "stretch,stress\n1.0,0\n1.5,abc\n");
    let p = write(
        "g.toml",
        "[model]\nkind = \"ogden\"\n[[experiment]]\nmode = \"uniaxial\"\nfile = \"bad_row.csv\"\n",
    );
    fails(&p, "bad_row.csv:3:1:");
    let p = write(
        "b.toml",
        "[model]\nkind = \"ogden\"\n[[experiment]]\nmode = \"uniaxial\"\nfile = \"missing.csv\"\n",
    );
    fails(&p, "missing.csv");
    write("bad.csv", "stretch,stress\n1.0,0\n1.5,abc\n");
    let p = write(
        "c.toml",
        "[model]\nkind = \"ogden\"\n[[experiment]]\nmode = \"uniaxial\"\nfile = \"bad.csv\"\n",
    );
    fails(&p, "bad.csv");
    let p = write("d.toml", "[model]\nkind = \"ogden\"\ncolour = 1\n");
    fails(&p, "d.toml:3");
}

#[test]
fn fem_identification_of_the_pad_example_from_the_cli() {
    // examples/pad_identify.toml: μ₁ and α₁ from a pad in compression and a block in shear,
    // synthetic forces at μ₁ = 0.3 MPa, α₁ = 2.5 with 0.05 N noise, the fit starting 30 % off.
    let dir = tempfile::tempdir().unwrap();
    let file = root().join("examples/pad_identify.toml");
    let t0 = std::time::Instant::now();
    let out = gradfem_in(dir.path(), &["identify", file.to_str().unwrap(), "--json"]);
    let seconds = t0.elapsed().as_secs_f64();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(seconds < 30.0, "the example takes {seconds} s");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["model"], "fem");
    for (name, truth) in [("mu1", 0.3e6), ("alpha1", 2.5)] {
        let key = format!("hyperelastic.{name}.domain");
        let v = r["parameters"][&key].as_f64().unwrap();
        let se = r["std_errors"][&key].as_f64().unwrap();
        assert!(se > 0.0 && se < 0.02 * truth, "{name}: ± {se}");
        assert!((v - truth).abs() < 3.0 * se, "{name}: {v} ± {se} against {truth}");
    }
    let exps = r["experiments"].as_array().unwrap();
    assert_eq!(exps.len(), 2);
    for (e, points) in exps.iter().zip([5, 4]) {
        assert_eq!(e["mode"], "fem");
        assert_eq!(e["points"], points);
        let rel = e["rms_relative_error"].as_f64().unwrap();
        let abs = e["rms_error"].as_f64().unwrap();
        // The noise is 0.05 N on forces of 6 to 63 N.
        assert!(rel > 0.0 && rel < 0.02, "{e}");
        assert!(abs > 0.01 && abs < 0.15, "{e}");
    }
    assert_eq!(r["fem"]["converged"], true);
    let (names, _) = correlation(&r);
    assert_eq!(names, ["hyperelastic.mu1.domain", "hyperelastic.alpha1.domain"]);
    // The fit starts 30 % off: the objective at the start is far above the optimum.
    let start = r["start_objectives"][0].as_f64().unwrap();
    let objective = r["objective"].as_f64().unwrap();
    assert!(start > 10.0 * objective, "{start} vs {objective}");
    assert_eq!(r["final_objectives"][0].as_f64(), Some(objective));
    assert!(dir.path().join("results/pad_identify/identify.json").exists());
    assert!(dir.path().join("results/pad_identify/fit.png").metadata().unwrap().len() > 1000);
    // The table names the parameters with their standard errors.
    let out = gradfem_in(dir.path(), &["identify", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("hyperelastic.mu1.domain =") && text.contains(" ± "), "{text}");
    assert!(text.contains("compression") && text.contains("shear"), "{text}");
}

#[test]
fn fem_identification_errors_name_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("fem.toml");
    std::fs::write(
        &p,
        "[[parameter]]\nname = \"hyperelastic.mu1.domain\"\nbounds = [1e4, 1e7]\n\
         [[experiment]]\nmode = \"fem\"\nproblem = \"nowhere.toml\"\n",
    )
    .unwrap();
    let out = gradfem_in(dir.path(), &["identify", p.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fem.toml") && err.contains("nowhere.toml"), "{err}");
}
