//! Finite strain in time: a silicone strip whose embedded heater is switched on at t = 0 and
//! which is held stretched by 20 %. The thermal field is stepped in time; at every state the
//! finite-strain field runs its load steps at that state's temperature (thermal expansion
//! F_θ = (1 + α s (T − T_ref)) I), and J is a rule over the history of the pulling force. The
//! long run reaches the steady problem's force, every parameter's gradient passes its Taylor
//! test, and the results hold the displacement of every output state.

use gradfem::app;
use gradfem::problem::ProblemFile;
use gradfem_solvers::taylor::TaylorParams;

#[path = "support/heated_strip.rs"]
mod heated_strip;
use heated_strip::{ALL, strip, transient};

fn build(text: &str) -> app::Problem {
    let pf = ProblemFile::parse(std::path::Path::new("strip.toml"), text.to_string())
        .unwrap_or_else(|e| panic!("{e}"));
    app::build_problem(&pf).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_long_run_reaches_the_steady_force() {
    let steady_register = "\"thermal.k.domain\", \"hyperelastic.alpha.domain\"";
    let mut steady = build(&strip("", steady_register));
    let (j_steady, g_steady, _) = steady.gradient().unwrap();
    // The strip's thermal time constant ρc L²/k is 2·10⁴ s: 4·10⁵ s is far past it.
    let register = format!("{steady_register}, \"thermal.rho_c.domain\"");
    let mut long = build(&strip(&transient(2e4, 20, "final"), &register));
    assert_eq!(long.coupling().to_string(), "thermal → hyperelastic");
    let (j_long, g_long, _) = long.gradient().unwrap();
    assert!((j_long - j_steady).abs() <= 1e-8 * j_steady.abs(), "{j_long} vs steady {j_steady}");
    for name in ["thermal.k.domain", "hyperelastic.alpha.domain"] {
        let a = g_steady.get(steady.registry().id(name).unwrap())[0];
        let b = g_long.get(long.registry().id(name).unwrap())[0];
        assert!((a - b).abs() <= 1e-6 * a.abs(), "{name}: {b} vs steady {a}");
    }
    // The heat capacity no longer matters once the steady state is reached.
    let rho_c = g_long.get(long.registry().id("thermal.rho_c.domain").unwrap())[0];
    assert!(rho_c.abs() * 1.5e6 <= 1e-6 * j_long.abs(), "dJ/dρc = {rho_c}");
}

#[rstest::rstest]
#[case::integral("integral")]
#[case::at_a_time("at\ntime = 500.0")]
#[case::smooth_max("max\nsharpness = 1.0")]
fn every_parameter_passes_its_taylor_test(#[case] objective: &str) {
    let (rule, key) = objective.split_once('\n').unwrap_or((objective, ""));
    let text = strip(&format!("{}\n{key}", transient(200.0, 5, rule)), ALL);
    let mut p = build(&text);
    let params = TaylorParams::default();
    for t in p.taylor_test_per_parameter(&params, |_| {}).unwrap() {
        assert!(t.passed, "{objective}: {}: {}\n{}", t.name, t.verdict, t.result.table());
    }
}

#[test]
fn the_results_hold_the_displacement_of_every_output_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = build(&strip(&transient(200.0, 5, "integral"), ALL));
    p.solve().unwrap();
    let history = p.mechanical_history().expect("the finite-strain field follows in time");
    assert_eq!(history.displacement.len(), 6);
    assert_eq!(history.tip.len(), 6);
    // The pull is prescribed: the tip moves by 12 mm at every state.
    for tip in &history.tip {
        assert!((tip[0] - 0.012).abs() < 1e-12, "{tip:?}");
    }
    // The pulling force falls as the strip warms and expands.
    let j = p.transient_state_values().unwrap();
    assert!(j.windows(2).all(|w| w[1] < w[0]), "{j:?}");
    let xdmf = app::write_results(dir.path(), &p, None).unwrap();
    let results = gradfem::io::h5::read_results(&xdmf.with_extension("h5")).unwrap();
    assert_eq!(results.steps.len(), 6);
    for s in &results.steps {
        assert!(s.fields.iter().any(|f| f.name == "displacement"), "t = {}", s.time);
    }
}
