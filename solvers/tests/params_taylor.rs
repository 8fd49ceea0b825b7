//! Taylor tests on analytic functionals: exact gradients pass with rate 2, a 1 % error fails
//! with rate ≈ 1, linear functionals pass on round-off, and the registry version always leaves
//! the registry as it found it.

use gradfem_solvers::params::{ParamError, ParamKind, ParamRegistry, ParamSpec, ParamVector};
use gradfem_solvers::taylor::{
    TaylorParams, direction_within_bounds, random_direction, random_direction_scaled, taylor_test,
    taylor_test_registry,
};
use rstest::rstest;
use std::convert::Infallible;

/// J(m) = Σ exp(0.3 m_i) sin(m_i) + 0.5 (Σ m_i²)², with its gradient.
fn smooth(m: &[f64]) -> (f64, Vec<f64>) {
    let s2: f64 = m.iter().map(|v| v * v).sum();
    let j = m.iter().map(|&v| (0.3 * v).exp() * v.sin()).sum::<f64>() + 0.5 * s2 * s2;
    let g = m.iter().map(|&v| (0.3 * v).exp() * (0.3 * v.sin() + v.cos()) + 2.0 * s2 * v).collect();
    (j, g)
}

#[rstest]
#[case(1, 1)]
#[case(7, 2)]
#[case(50, 3)]
fn exact_gradient_passes_with_rate_two(#[case] n: usize, #[case] seed: u64) {
    let m: Vec<f64> = random_direction(n, seed + 100).iter().map(|v| 1.0 + v).collect();
    let (_, g) = smooth(&m);
    let dm = random_direction_scaled(&m, seed);
    let r =
        taylor_test(|x| Ok::<_, Infallible>(smooth(x).0), &m, &g, &dm, &TaylorParams::default())
            .unwrap();
    assert!(r.passed, "{}", r.table());
    assert!((r.min_rate() - 2.0).abs() < 0.1, "{}", r.table());
    assert!(r.rates_zeroth.iter().all(|q| (q - 1.0).abs() < 0.1), "{}", r.table());
    assert_eq!(r.h.len(), 5);
    assert_eq!(r.rates.len(), 4);
}

#[rstest]
#[case(0.01)]
#[case(-0.01)]
fn one_percent_wrong_gradient_fails_with_rate_one(#[case] error: f64) {
    let m = vec![0.7, -0.4, 1.3];
    let (_, mut g) = smooth(&m);
    g.iter_mut().for_each(|v| *v *= 1.0 + error);
    let dm = random_direction_scaled(&m, 9);
    let params = TaylorParams { h0: 1e-3, ..Default::default() };
    let r = taylor_test(|x| Ok::<_, Infallible>(smooth(x).0), &m, &g, &dm, &params).unwrap();
    assert!(!r.passed, "{}", r.table());
    assert!((r.rates.last().unwrap() - 1.0).abs() < 0.15, "{}", r.table());
}

/// With the default h0 = 1e-2 the second-order term still dominates the first steps, but the
/// rates drift towards 1 and the test fails all the same.
#[rstest]
#[case(1)]
#[case(2)]
#[case(3)]
fn one_percent_wrong_gradient_fails_with_default_params(#[case] seed: u64) {
    let m: Vec<f64> = random_direction(4, seed + 50).iter().map(|v| 1.0 + v).collect();
    let (_, mut g) = smooth(&m);
    g.iter_mut().for_each(|v| *v *= 1.01);
    let dm = random_direction_scaled(&m, seed);
    let r =
        taylor_test(|x| Ok::<_, Infallible>(smooth(x).0), &m, &g, &dm, &TaylorParams::default())
            .unwrap();
    assert!(!r.passed, "{}", r.table());
    assert!(r.min_rate() < 1.5, "{}", r.table());
}

#[test]
fn linear_functional_passes_on_roundoff() {
    let c = [3.0, -1.5, 2.25, 10.0];
    let j =
        |x: &[f64]| Ok::<_, Infallible>(5.0 + x.iter().zip(&c).map(|(a, b)| a * b).sum::<f64>());
    let m = [1.0, 2.0, 3.0, 4.0];
    let dm = random_direction_scaled(&m, 4);
    let r = taylor_test(j, &m, &c, &dm, &TaylorParams::default()).unwrap();
    assert!(r.passed, "{}", r.table());
    assert!(r.note.as_deref().unwrap().contains("round-off"), "{:?}", r.note);
    // ... while a wrong gradient of the same linear functional fails.
    let wrong: Vec<f64> = c.iter().map(|v| v * 1.01).collect();
    let r = taylor_test(j, &m, &wrong, &dm, &TaylorParams::default()).unwrap();
    assert!(!r.passed, "{}", r.table());
}

#[test]
fn quadratic_reaching_roundoff_uses_rates_before_the_floor() {
    // J = 1e8 + 0.5 x²: remainders 0.5 h² dm² drop below 1e-12·|J| = 1e-4 after a few halvings.
    let j = |x: &[f64]| Ok::<_, Infallible>(1e8 + 0.5 * x[0] * x[0]);
    let params = TaylorParams { h0: 0.1, steps: 8, min_rate: 1.9 };
    let r = taylor_test(j, &[2.0], &[2.0], &[1.0], &params).unwrap();
    assert!(r.passed, "{}", r.table());
    assert!(r.rates_used >= 1 && r.rates_used < 7, "{}", r.table());
    assert!(r.note.as_deref().unwrap().contains("round-off"), "{}", r.table());
    // The same, with a wrong gradient: the rates before the floor catch it.
    let r = taylor_test(j, &[2.0], &[2.5], &[1.0], &params).unwrap();
    assert!(!r.passed, "{}", r.table());
}

#[test]
fn noisy_functional_rates_below_the_floor_are_ignored() {
    // J = 1e3 + 0.5 x² plus deterministic noise of 1e-11 (below the floor 1e-12·|J| = 1e-9):
    // once 0.5 h² drops under the noise, the observed rates are garbage and must be ignored.
    let noise = |x: f64| 1e-11 * random_direction(1, x.to_bits())[0];
    let j = |x: &[f64]| Ok::<_, Infallible>(1e3 + 0.5 * x[0] * x[0] + noise(x[0]));
    let params = TaylorParams { h0: 1e-3, steps: 14, min_rate: 1.9 };
    let r = taylor_test(j, &[0.5], &[0.5], &[1.0], &params).unwrap();
    assert!(r.passed, "{}", r.table());
    assert!(r.rates_used >= 3, "{}", r.table());
    assert!(
        r.rates[r.rates_used..].iter().any(|&q| q.is_nan() || q < 1.9),
        "garbage rates expected: {}",
        r.table()
    );
    // A 1 % wrong gradient is still caught before the floor.
    let r = taylor_test(j, &[0.5], &[0.505], &[1.0], &params).unwrap();
    assert!(!r.passed, "{}", r.table());
}

#[test]
fn table_mentions_verdict() {
    let m = [0.5, 0.25];
    let (_, g) = smooth(&m);
    let r = taylor_test(
        |x| Ok::<_, Infallible>(smooth(x).0),
        &m,
        &g,
        &[1.0, -1.0],
        &TaylorParams::default(),
    )
    .unwrap();
    let t = r.table();
    assert!(t.contains("PASSED") && t.lines().count() >= 7, "{t}");
}

fn registry() -> (ParamRegistry, ParamVector) {
    let mut reg = ParamRegistry::new();
    let a = reg
        .register(ParamSpec::scalar("thermal.k.silicon", 148.0).with_bounds(Some(0.0), None))
        .unwrap();
    let b = reg
        .register(ParamSpec::vector(
            "thermal.kappa.domain",
            ParamKind::PerElement { group: "domain".into() },
            vec![0.3, 0.6, 0.9],
        ))
        .unwrap();
    reg.register(ParamSpec::scalar("bc.anchor.h", 1e4)).unwrap();
    let pv = ParamVector::new(&reg, &[a, b]);
    (reg, pv)
}

/// J(reg) = k² Σ κ_i³ / 1e4 + h (h is not selected and must not move).
fn j_reg(reg: &ParamRegistry) -> f64 {
    let k = reg.values(reg.id("thermal.k.silicon").unwrap())[0];
    let kappa = reg.values(reg.id("thermal.kappa.domain").unwrap());
    k * k * kappa.iter().map(|v| v * v * v).sum::<f64>() / 1e4
        + reg.values(reg.id("bc.anchor.h").unwrap())[0]
}

fn grad_reg(reg: &ParamRegistry) -> Vec<f64> {
    let k = reg.values(reg.id("thermal.k.silicon").unwrap())[0];
    let kappa = reg.values(reg.id("thermal.kappa.domain").unwrap());
    let mut g = vec![2.0 * k * kappa.iter().map(|v| v * v * v).sum::<f64>() / 1e4];
    g.extend(kappa.iter().map(|v| k * k * 3.0 * v * v / 1e4));
    g
}

#[derive(Debug)]
enum TestError {
    Param(#[allow(dead_code)] ParamError),
    Solve { call: usize },
}

impl From<ParamError> for TestError {
    fn from(e: ParamError) -> Self {
        TestError::Param(e)
    }
}

#[test]
fn registry_restored_after_success() {
    let (mut reg, pv) = registry();
    let before: Vec<Vec<f64>> = reg.iter().map(|(_, s)| s.values.clone()).collect();
    let g = grad_reg(&reg);
    let dm = random_direction_scaled(&pv.gather(&reg), 11);
    let r =
        taylor_test_registry::<TestError>(&mut reg, &pv, &g, &dm, &TaylorParams::default(), |r| {
            Ok(j_reg(r))
        })
        .unwrap();
    assert!(r.passed, "{}", r.table());
    let after: Vec<Vec<f64>> = reg.iter().map(|(_, s)| s.values.clone()).collect();
    assert_eq!(before, after);
}

#[test]
fn registry_restored_after_error_midway() {
    let (mut reg, pv) = registry();
    let before: Vec<Vec<f64>> = reg.iter().map(|(_, s)| s.values.clone()).collect();
    let g = grad_reg(&reg);
    let dm = random_direction_scaled(&pv.gather(&reg), 11);
    let mut calls = 0;
    let mut seen_perturbed = false;
    let out = taylor_test_registry(&mut reg, &pv, &g, &dm, &TaylorParams::default(), |r| {
        calls += 1;
        seen_perturbed |= r.values(pv.ids()[0])[0] != 148.0;
        if calls == 3 { Err(TestError::Solve { call: calls }) } else { Ok(j_reg(r)) }
    });
    assert!(matches!(out, Err(TestError::Solve { call: 3 })), "{out:?}");
    assert!(seen_perturbed, "the closure must see perturbed values");
    let after: Vec<Vec<f64>> = reg.iter().map(|(_, s)| s.values.clone()).collect();
    assert_eq!(before, after);
}

#[test]
fn registry_restored_after_bounds_error() {
    let (mut reg, pv) = registry();
    let before: Vec<Vec<f64>> = reg.iter().map(|(_, s)| s.values.clone()).collect();
    let g = grad_reg(&reg);
    // A step that drives k below its lower bound 0.
    let dm = vec![-1e5, 0.0, 0.0, 0.0];
    let out =
        taylor_test_registry::<TestError>(&mut reg, &pv, &g, &dm, &TaylorParams::default(), |r| {
            Ok(j_reg(r))
        });
    assert!(matches!(out, Err(TestError::Param(ParamError::OutOfBounds { .. }))), "{out:?}");
    let after: Vec<Vec<f64>> = reg.iter().map(|(_, s)| s.values.clone()).collect();
    assert_eq!(before, after);
}

#[test]
fn registry_wrong_gradient_fails() {
    let (mut reg, pv) = registry();
    let mut g = grad_reg(&reg);
    g[2] *= 1.01;
    let dm = random_direction_scaled(&pv.gather(&reg), 5);
    let params = TaylorParams { h0: 1e-3, ..Default::default() };
    let r = taylor_test_registry::<TestError>(&mut reg, &pv, &g, &dm, &params, |r| Ok(j_reg(r)))
        .unwrap();
    assert!(!r.passed, "{}", r.table());
}

#[test]
fn registry_restored_after_panic() {
    let (mut reg, pv) = registry();
    let before: Vec<Vec<f64>> = reg.iter().map(|(_, s)| s.values.clone()).collect();
    let g = grad_reg(&reg);
    let dm = random_direction_scaled(&pv.gather(&reg), 11);
    let mut calls = 0;
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        taylor_test_registry::<TestError>(&mut reg, &pv, &g, &dm, &TaylorParams::default(), |r| {
            calls += 1;
            assert!(calls < 3, "objective panicked");
            Ok(j_reg(r))
        })
    }));
    assert!(out.is_err());
    let after: Vec<Vec<f64>> = reg.iter().map(|(_, s)| s.values.clone()).collect();
    assert_eq!(before, after);
}

#[test]
fn parameters_at_their_bounds_are_tested_inside_the_box() {
    // κ entries sit on their bounds 0 and 1; a random direction would leave the box.
    let mut reg = ParamRegistry::new();
    let id = reg
        .register(
            ParamSpec::vector("topo.rho", ParamKind::Field, vec![0.0, 1.0, 0.5, 0.0])
                .with_bounds(Some(0.0), Some(1.0)),
        )
        .unwrap();
    let pv = ParamVector::new(&reg, &[id]);
    let j = |r: &ParamRegistry| -> Result<f64, ParamError> {
        Ok(r.values(id).iter().enumerate().map(|(i, v)| (i as f64 + 1.0) * v.powi(3) + v).sum())
    };
    let m = pv.gather(&reg);
    let grad: Vec<f64> =
        m.iter().enumerate().map(|(i, v)| 3.0 * (i as f64 + 1.0) * v * v + 1.0).collect();
    let params = TaylorParams::default();
    let raw: Vec<f64> =
        random_direction(4, 3).iter().map(|v| v.signum() * (0.5 + v.abs())).collect();
    let (lo, hi) = pv.bounds();
    let dm = direction_within_bounds(&m, &raw, &lo, &hi, params.h0);
    assert_ne!(raw, dm, "the raw direction must leave the box for this test to mean something");
    let out = taylor_test_registry(&mut reg, &pv, &grad, &raw, &params, j);
    assert!(matches!(out, Err(ParamError::OutOfBounds { .. })), "{out:?}");
    let r = taylor_test_registry(&mut reg, &pv, &grad, &dm, &params, j).unwrap();
    assert!(r.passed, "{}", r.table());
    assert_eq!(pv.gather(&reg), m);
}
