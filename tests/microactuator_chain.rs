//! The electro-thermo-mechanical microactuator (data/microactuator/README.md): the full chain
//! on the geometry gradfem builds and on the shared gmsh tet10 mesh; balances, agreement
//! between the two meshes, convergence under refinement, and the summary keys of `gradfem run
//! --json`.

use std::path::{Path, PathBuf};
use std::process::Command;

use gradfem::app;
use gradfem::problem::ProblemFile;

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples").join(name)
}

fn solved(path: &Path, edit: impl Fn(String) -> String) -> app::Summary {
    let text = edit(std::fs::read_to_string(path).unwrap());
    let pf = ProblemFile::parse(path, text).unwrap();
    let mut p = app::build_problem(&pf).unwrap_or_else(|e| panic!("{e}"));
    p.solve().unwrap();
    app::summary(&pf.spec.title, &p).unwrap()
}

fn refined(level: usize) -> impl Fn(String) -> String {
    move |t: String| {
        t.replace(
            "actuator = { cell = \"hex20\" }",
            &format!("actuator = {{ cell = \"hex20\", refine = {level} }}"),
        )
    }
}

#[test]
fn the_builtin_actuator_balances_heat_charge_and_force() {
    let s = solved(&example("microactuator_builtin.toml"), |t| t);
    let hb = &s.heat_balance;
    assert!(hb.relative_imbalance() < 1e-3, "heat balance {hb:?}");
    let (i, v, p) = (s.current_a.unwrap(), s.voltage_v.unwrap(), s.joule_power_w.unwrap());
    assert!((p - v * i).abs() < 1e-9 * p, "Joule power {p} vs V·I {}", v * i);
    assert!((hb.generated_w - p).abs() < 1e-9 * p);
    let fb = s.force_balance.as_ref().unwrap();
    assert!(fb.relative_imbalance < 1e-8, "{fb:?}");
    // Hotter hot arms bend the free end towards the cold arm (−y), by about 1.5 µm at 5 V.
    let tip = s.tip_displacement_m.unwrap();
    assert!(tip[1] < -1.0e-6 && tip[1] > -2.0e-6, "{tip:?}");
    assert!(tip[0].abs() < 0.05 * tip[1].abs() && tip[2].abs() < 0.05 * tip[1].abs(), "{tip:?}");
    assert!(s.max_temperature_k > 450.0 && s.max_temperature_k < 650.0);
    assert!(s.max_von_mises_pa.unwrap() > 1e7);
}

#[test]
fn builtin_and_gmsh_meshes_agree() {
    let a = solved(&example("microactuator_builtin.toml"), |t| t);
    let b = solved(&example("microactuator.toml"), |t| t);
    let (ta, tb) = (a.tip_displacement_m.unwrap()[1], b.tip_displacement_m.unwrap()[1]);
    assert!((ta - tb).abs() < 5e-3 * tb.abs(), "tip {ta} vs {tb}");
    let rel_t = (a.max_temperature_k - b.max_temperature_k).abs() / (b.max_temperature_k - 293.15);
    assert!(rel_t < 5e-3, "max T {} vs {}", a.max_temperature_k, b.max_temperature_k);
    let (ra, rb) = (a.resistance_ohm.unwrap(), b.resistance_ohm.unwrap());
    assert!((ra - rb).abs() < 2e-3 * rb, "resistance {ra} vs {rb}");
    let hb = &b.heat_balance;
    assert!(hb.relative_imbalance() < 1e-3, "tet10 heat balance {hb:?}");
    assert!(b.force_balance.unwrap().relative_imbalance < 1e-8);
}

#[test]
fn tip_displacement_and_max_temperature_converge_under_refinement() {
    let s: Vec<app::Summary> =
        (1..=3).map(|l| solved(&example("microactuator_builtin.toml"), refined(l))).collect();
    let tip: Vec<f64> = s.iter().map(|s| s.tip_displacement_m.unwrap()[1]).collect();
    let tmax: Vec<f64> = s.iter().map(|s| s.max_temperature_k).collect();
    eprintln!("tip {tip:?}\nmax T {tmax:?}");
    for (name, q) in [("tip displacement", &tip), ("max temperature", &tmax)] {
        let (d1, d2) = ((q[1] - q[0]).abs(), (q[2] - q[1]).abs());
        assert!(d2 < 0.5 * d1, "{name}: changes {d1:e} then {d2:e} do not shrink: {q:?}");
        assert!(d2 < 1e-3 * q[2].abs(), "{name}: {q:?}");
    }
}

#[test]
fn run_json_reports_tip_displacement_and_von_mises() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .current_dir(dir.path())
        .args(["run", example("microactuator_builtin.toml").to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tip = v["tip_displacement_m"].as_array().expect("tip_displacement_m");
    assert_eq!(tip.len(), 3);
    assert!(tip[1].as_f64().unwrap() < 0.0);
    assert!(v["max_von_mises_Pa"].as_f64().unwrap() > 0.0);
    let xdmf =
        std::fs::read_to_string(dir.path().join("results/microactuator_builtin/results.xdmf"))
            .unwrap();
    for field in [
        "displacement",
        "von_mises",
        "von_mises_nodal",
        "stress",
        "stress_nodal",
        "temperature",
        "potential",
    ] {
        assert!(xdmf.contains(&format!("Name=\"{field}\"")), "{field} missing from the XDMF");
    }
}
