//! Checkpointing: binomial schedules give the store-all gradient bitwise with bounded memory;
//! truncated backpropagation is exact for windows ≥ N and an approximation below.

mod common;

use common::*;
use gradfem_dynamics::prelude::*;
use gradfem_solvers::params::ParamSpec;
use rstest::rstest;

#[rstest]
#[case(1)]
#[case(2)]
#[case(3)]
#[case(5)]
#[case(12)]
fn binomial_matches_store_all_bitwise(#[case] snapshots: usize) {
    let sys = two_body_system(1e-2);
    let (dt, n) = (2e-3, 150);
    let obj = test_objective(n);
    let x0 = two_body_x0();
    let sim = Simulation::new(&sys, Rk4, dt, n);
    let all = sim.gradient(&x0, &obj, Memory::StoreAll).unwrap();
    let cp = sim.gradient(&x0, &obj, Memory::Binomial { snapshots }).unwrap();
    assert_eq!(all.stats.max_stored_states, n + 1);
    assert!(
        cp.stats.max_stored_states <= snapshots,
        "{} stored states > {snapshots} snapshots",
        cp.stats.max_stored_states
    );
    assert_eq!(cp.value.to_bits(), all.value.to_bits());
    let bits = |r: &AdjointResult| -> Vec<u64> {
        let mut v: Vec<u64> = r
            .params
            .to_entries(&sys.registry)
            .iter()
            .flat_map(|e| e.values.clone())
            .map(f64::to_bits)
            .collect();
        v.extend(r.initial_state.to_flat().iter().map(|x| x.to_bits()));
        v
    };
    assert_eq!(bits(&cp), bits(&all), "binomial gradient differs from store-all");
    // Recomputation cost: with s snapshots and r repetitions, at most r·n extra steps.
    let mut r = 1;
    while binom(snapshots + r, snapshots) < n as u128 {
        r += 1;
    }
    eprintln!(
        "snapshots {snapshots}: stored {}, forward steps {} (n = {n}, r = {r})",
        cp.stats.max_stored_states, cp.stats.forward_steps
    );
    if snapshots > 1 {
        assert!(cp.stats.forward_steps <= n + r * n, "{} forward steps", cp.stats.forward_steps);
    }
}

fn binom(a: usize, b: usize) -> u128 {
    (1..=b as u128).fold(1u128, |acc, i| acc * (a as u128 - b as u128 + i) / i)
}

/// A damped oscillator, misfit to a trajectory of another stiffness: truncation windows.
fn damped() -> (System, State, PositionMisfit, usize) {
    let mut sys = System::new();
    let k = sys.param(ParamSpec::scalar("spring.k", 4.0)).unwrap();
    let c = sys.param(ParamSpec::scalar("damper.c", 1.0)).unwrap();
    let b = sys.add_body(1.0);
    sys.add_force(Spring {
        a: Anchor::Body(b),
        b: Anchor::Fixed([0.0; 3]),
        k,
        rest_length: 0.5.into(),
    });
    sys.add_force(Damper { a: Anchor::Body(b), b: Anchor::Fixed([0.0; 3]), c });
    let mut x0 = State::at_rest(1);
    x0.position[0] = [1.0, 0.2, 0.0];
    let n = 400;
    let observed =
        (0..=n).map(|k| Some(vec![[0.5 + 0.3 * (k as f64 * 0.02).cos(), 0.1, 0.0]])).collect();
    (sys, x0, PositionMisfit { observed, weight: 0.01 }, n)
}

#[test]
fn truncated_backprop_is_exact_for_long_windows_and_approximate_below() {
    let (sys, x0, obj, n) = damped();
    let sim = Simulation::new(&sys, VelocityVerlet, 0.01, n);
    let exact = sim.gradient(&x0, &obj, Memory::StoreAll).unwrap();
    let long = sim.gradient(&x0, &obj, Memory::Truncated { window: n }).unwrap();
    assert_eq!(long.params, exact.params);
    let gk = exact.params.by_name(&sys.registry, "spring.k").unwrap()[0];
    let mut errs = Vec::new();
    for window in [10, 40, 160] {
        let t = sim.gradient(&x0, &obj, Memory::Truncated { window }).unwrap();
        let g = t.params.by_name(&sys.registry, "spring.k").unwrap()[0];
        errs.push(((g - gk) / gk).abs());
    }
    eprintln!("truncation relative errors in dJ/dk for S = 10, 40, 160: {errs:?}");
    assert!(errs[0] > 1e-3, "a 10-step window should be visibly approximate: {errs:?}");
    assert!(
        errs[0] > errs[1] && errs[1] > errs[2],
        "error should decrease with the window: {errs:?}"
    );
}
