//! Numerical safety: the opt-in NaN/∞ scan names the step, body and field; clamped forces pass
//! no gradient.

use gradfem_dynamics::prelude::*;
use gradfem_solvers::params::ParamSpec;

/// Two particles; a user force that returns NaN on body 1's y force from t > 0.045 on, i.e.
/// from step 5 (dt = 0.01, step k maps x_k at t_k to x_{k+1}). With `vjp_nan_step`, the force is fine but its VJP is NaN at that
/// step.
fn nan_system(vjp_nan_step: Option<usize>) -> System {
    let mut sys = System::new();
    let k = sys.param(ParamSpec::scalar("spring.k", 3.0)).unwrap();
    let a = sys.add_body(1.0);
    let b = sys.add_body(2.0);
    sys.add_force(Spring { a: Anchor::Body(a), b: Anchor::Body(b), k, rest_length: 1.0.into() });
    let force_nan = vjp_nan_step.is_none();
    sys.add_force(UserForce::new(
        move |_x, ctx, f| {
            if force_nan && ctx.t > 0.045 {
                f[1][1] += f64::NAN;
            }
        },
        move |_x, ctx, _fb, xb, _pb| {
            if let Some(s) = vjp_nan_step
                && (ctx.t - s as f64 * 0.01).abs() < 1e-9
            {
                xb[3] = f64::INFINITY; // position[1].x
            }
        },
    ));
    sys
}

fn x0() -> State {
    let mut s = State::at_rest(2);
    s.position = vec![[0.0; 3], [1.5, 0.0, 0.0]];
    s
}

fn objective() -> FinalState {
    let mut w = State::zeros(2);
    w.position = vec![[1.0; 3]; 2];
    FinalState { target: State::zeros(2), weight: w }
}

#[test]
fn finite_scan_reports_first_nan_with_step_body_and_field() {
    let sys = nan_system(None);
    let sim = Simulation::new(&sys, ExplicitEuler, 0.01, 20).with_finite_check(true);
    let err = sim.run(&x0()).unwrap_err();
    match &err {
        DynamicsError::NonFiniteState { step, body, field, name, value, .. } => {
            assert_eq!((*step, *body, *field), (5, 1, "velocity"), "{err}");
            assert_eq!(name, "velocity[1].y");
            assert!(value.is_nan());
        }
        other => panic!("expected NonFiniteState, got {other:?}"),
    }
    assert!(err.to_string().contains("step 5") && err.to_string().contains("body 1 velocity"));
    // The gradient reports the same place (its forward pass is scanned too).
    let gerr = sim.gradient(&x0(), &objective(), Memory::Binomial { snapshots: 3 }).unwrap_err();
    assert_eq!(gerr.to_string(), err.to_string());
}

#[test]
fn finite_scan_is_opt_in() {
    let sys = nan_system(None);
    let sim = Simulation::new(&sys, ExplicitEuler, 0.01, 20);
    assert!(!sim.check_finite);
    let traj = sim.run(&x0()).unwrap();
    // Step 5 (from t = 0.05) gives x_6: the first state with a NaN.
    assert!(traj[6].velocity[1][1].is_nan() && traj[5].velocity[1][1].is_finite());
    assert!(sim.objective(&x0(), &objective()).unwrap().is_nan());
}

#[test]
fn finite_scan_reports_nan_adjoint() {
    let sys = nan_system(Some(7));
    let sim = Simulation::new(&sys, ExplicitEuler, 0.01, 20).with_finite_check(true);
    let err = sim.gradient(&x0(), &objective(), Memory::StoreAll).unwrap_err();
    match &err {
        DynamicsError::NonFiniteAdjoint { step, body, field, name, .. } => {
            assert_eq!((*step, *body, *field, name.as_str()), (7, 1, "position", "position[1].x"));
        }
        other => panic!("expected NonFiniteAdjoint, got {other:?}"),
    }
    // Without the scan the NaN reaches the gradient silently.
    let sim = Simulation::new(&sys, ExplicitEuler, 0.01, 20);
    let g = sim.gradient(&x0(), &objective(), Memory::StoreAll).unwrap();
    assert!(g.params.by_name(&sys.registry, "spring.k").unwrap()[0].is_nan());
}

#[test]
fn clamp_with_grad_is_zero_where_clamped() {
    assert_eq!(clamp_with_grad(0.5, -1.0, 1.0), (0.5, 1.0));
    assert_eq!(clamp_with_grad(3.0, -1.0, 1.0), (1.0, 0.0));
    assert_eq!(clamp_with_grad(-3.0, -1.0, 1.0), (-1.0, 0.0));
    assert_eq!(clamp_with_grad(1.0, -1.0, 1.0), (1.0, 0.0));
}

/// One particle on a spring (k registered) to the origin, stretched along x only, force
/// clamped to |F_d| ≤ limit; J = ½ |r_N|² after 10 Euler steps.
fn clamped_gradient(limit: Option<f64>) -> (f64, State) {
    let mut sys = System::new();
    let k = sys.param(ParamSpec::scalar("spring.k", 50.0)).unwrap();
    let b = sys.add_body(1.0);
    let spring =
        Spring { a: Anchor::Body(b), b: Anchor::Fixed([0.0; 3]), k, rest_length: 0.5.into() };
    match limit {
        Some(l) => sys.add_force(ClampForce::new(spring, l)),
        None => sys.add_force(spring),
    }
    let mut x0 = State::at_rest(1);
    x0.position[0] = [2.0, 0.0, 0.0]; // |F_x| = 75 at the start
    let mut w = State::zeros(1);
    w.position[0] = [1.0; 3];
    let obj = FinalState { target: State::zeros(1), weight: w };
    let g = Simulation::new(&sys, ExplicitEuler, 1e-3, 10)
        .gradient(&x0, &obj, Memory::StoreAll)
        .unwrap();
    (g.params.by_name(&sys.registry, "spring.k").unwrap()[0], g.initial_state)
}

#[test]
fn clamped_force_has_zero_gradient() {
    let (gk_free, x_free) = clamped_gradient(None);
    assert!(gk_free.abs() > 1e-6, "{gk_free}");
    // Limit far above the force: the wrapper is transparent, bitwise.
    let (gk_loose, x_loose) = clamped_gradient(Some(1e6));
    assert_eq!(gk_loose.to_bits(), gk_free.to_bits());
    assert_eq!(x_loose, x_free);
    // Clamped during all 10 steps (F_x ≈ −75 stays below −10): J no longer depends on k, and
    // the gradient is exactly 0; the initial position's x enters only through r itself.
    let (gk, x) = clamped_gradient(Some(10.0));
    assert_eq!(gk, 0.0);
    let dt = 1e-3;
    // r_N = r_0 + N h v_0 + h² Σ (N−1−k) F_max ⇒ ∂r_N,x/∂r_0,x = 1 exactly, ∂/∂v_0,x = N h.
    let r_n = 2.0 + dt * dt * (0..10).map(|k| (9 - k) as f64).sum::<f64>() * -10.0;
    assert!((x.position[0][0] - r_n).abs() < 1e-12, "{} vs {r_n}", x.position[0][0]);
    assert!((x.velocity[0][0] - 10.0 * dt * r_n).abs() < 1e-12, "{}", x.velocity[0][0]);
}
