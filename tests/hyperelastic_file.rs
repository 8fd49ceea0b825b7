//! Finite-strain hyperelasticity from problem files: identification of Ogden parameters from a
//! specimen's force–compression curve with `gradfem optimize`, load-path outputs, and located
//! errors for bad input.

use std::path::{Path, PathBuf};
use std::process::Command;

use gradfem::app;
use gradfem::problem::ProblemFile;

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples").join(name)
}

#[test]
fn ogden_parameters_are_recovered_from_the_force_curve_of_a_pad() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .args(["optimize", example("rubber_pad.toml").to_str().unwrap(), "--json", "-o"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mu = r["design"]["hyperelastic.mu1.domain"][0].as_f64().unwrap();
    let alpha = r["design"]["hyperelastic.alpha1.domain"][0].as_f64().unwrap();
    // The data were computed at μ₁ = 0.3 MPa, α₁ = 2.5 and rounded to 1 mN.
    assert!((mu / 0.3e6 - 1.0).abs() < 1e-3, "μ₁ = {mu}");
    assert!((alpha / 2.5 - 1.0).abs() < 1e-3, "α₁ = {alpha}");
    assert!(r["final_objective"].as_f64().unwrap() < 1e-5);
    let xdmf = std::fs::read_to_string(dir.path().join("results.xdmf")).unwrap();
    assert_eq!(xdmf.matches("Grid Name=\"step ").count(), 5, "one output per load step");
}

#[test]
fn the_summary_reports_the_load_path() {
    let pf = ProblemFile::read(&example("rubber_pad.toml")).unwrap();
    let mut p = app::build_problem(&pf).unwrap();
    p.solve().unwrap();
    let s = app::summary("pad", &p).unwrap();
    let h = s.hyperelastic.as_ref().unwrap();
    assert_eq!(h.load_factors, vec![0.2, 0.4, 0.6, 0.8, 1.0]);
    assert!(h.newton_iterations >= 5);
    // The platens' reactions balance (no other load).
    let z: f64 = h.reactions.iter().map(|(_, r)| r[2]).sum();
    let top = h.reactions.iter().find(|(n, _)| n == "zmax").unwrap().1[2];
    assert!(z.abs() < 1e-9 * top.abs(), "{h:?}");
    let tip = s.tip_displacement_m.unwrap();
    assert!((tip[2] + 1.2e-3).abs() < 1e-12, "{tip:?}");
}

#[test]
fn bad_hyperelastic_input_is_a_named_error() {
    let base = std::fs::read_to_string(example("rubber_pad.toml")).unwrap();
    let base =
        base.replace("rubber_pad_force.csv", example("rubber_pad_force.csv").to_str().unwrap());
    let fails = |text: String, want: &str| {
        let pf = ProblemFile::parse(Path::new("pad.toml"), text).unwrap();
        let e = app::build_problem(&pf).err().expect("an error").to_string();
        assert!(e.contains(want), "expected '{want}' in: {e}");
    };
    fails(base.replace("alpha = [2.0]\n", ""), "same length");
    fails(base.replace("law = \"ogden\"", "law = \"arruda_boyce\""), "arruda_boyce");
    fails(base.replace("kappa = 15e6", "kappa = 15e6\nc10 = 1.0"), "takes no `c10`");
    fails(base.replace("steps = 5", "steps = 4"), "one value per load step");
    fails(base.replace("kind = \"reaction\"", "kind = \"compliance\""), "compliance");
    fails(
        base.replace(
            "[hyperelastic]\n",
            "[[mechanical.material]]\ngroup = \"domain\"\nyoung = 1e6\npoisson = 0.3\n\n[hyperelastic]\n",
        ),
        "two models of the same solid",
    );
    let dir = tempfile::tempdir().unwrap();
    let curve = dir.path().join("c.csv");
    std::fs::write(&curve, "load,force\n0.2,1\n0.4,x\n").unwrap();
    fails(
        base.replace(example("rubber_pad_force.csv").to_str().unwrap(), curve.to_str().unwrap()),
        "c.csv",
    );
}

/// An ANSYS displacement field as the starting point of the finite-strain Newton solve, on the
/// mesh read from the same result file: the converged state is the one reached from zero.
#[test]
fn an_ansys_displacement_starts_the_newton_solve() {
    let rst = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/ansys/beam_static_bc.rst");
    let text = |initial: bool| {
        format!(
            r#"
[mesh]
file = "{rst}"
plane_group = [
    {{ name = "root", axis = "z", value = 0.0 }},
    {{ name = "end", axis = "z", value = 5.0 }},
]

[[hyperelastic.material]]
group = "material_1"
law = "neo_hookean"
mu = [7.7e10]
kappa = 1.7e11

[[hyperelastic.bc]]
group = "root"
kind = "fixed"

[[hyperelastic.bc]]
group = "end"
kind = "displacement"
value = [0.01, 0.011, 0.012]

[hyperelastic]
load_factors = [1.0]
tip = "end"
{init}
"#,
            rst = rst.display(),
            init = if initial {
                format!("[initial_state]\nansys = \"{}\"\nset = 1\n", rst.display())
            } else {
                String::new()
            }
        )
    };
    let solve = |initial: bool| {
        let pf = ProblemFile::parse(Path::new("beam.toml"), text(initial)).unwrap();
        let mut p = app::build_problem(&pf).unwrap_or_else(|e| panic!("{e}"));
        p.solve().unwrap();
        let s = app::summary("beam", &p).unwrap();
        let u = p.hyperelastic().unwrap().states().last().unwrap().1.to_vec();
        (s, u)
    };
    let (s0, u0) = solve(false);
    let (s1, u1) = solve(true);
    let init = s1.initial_state.as_deref().expect("reported");
    assert!(init.contains("UX, UY, UZ") && init.contains("by node number"), "{init}");
    let scale = u0.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
    let diff = u0.iter().zip(&u1).fold(0.0_f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(diff < 1e-8 * scale, "the start changed the solution by {diff:e} of {scale:e}");
    let (n0, n1) = (
        s0.hyperelastic.as_ref().unwrap().newton_iterations,
        s1.hyperelastic.as_ref().unwrap().newton_iterations,
    );
    assert!(n0 > 0 && n1 > 0, "{n0} {n1}");
}
