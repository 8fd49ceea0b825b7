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
    assert!(dir.path().join("results/identify.json").exists());
    assert!(dir.path().join("results/fit.png").metadata().unwrap().len() > 1000);
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
    fails(&p, "torsion");
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
    assert!(dir.path().join("results/identify.json").exists());
    assert!(dir.path().join("results/fit.png").metadata().unwrap().len() > 1000);
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
