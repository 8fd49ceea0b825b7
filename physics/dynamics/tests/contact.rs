//! Gradients through the moment of impact and the role of the contact smoothing ε.

use gradfem_dynamics::prelude::*;
use gradfem_solvers::params::{ParamSpec, ParamVector};
use gradfem_solvers::taylor::{TaylorParams, TaylorResult, taylor_test};

/// A ball (radius 0.1, m = 1) thrown at the ground from z = 0.4 with v = (0.5, 0, −1); final
/// position and velocity after the bounce. Taylor test along the initial height and the
/// contact stiffness, perturbations h·dm of 2e-4 … 6e-6 in z₀, with a time step dt = 2e-5
/// small enough that the ball moves less than ε = 1e-4 per step at impact (v·dt ≈ 5e-5).
fn bounce_taylor(eps: f64) -> (TaylorResult, f64) {
    let mut sys = System::new();
    sys.gravity = [0.0, 0.0, -9.81];
    let kc = sys.param(ParamSpec::scalar("contact.stiffness", 1e4)).unwrap();
    let mu = sys
        .param(ParamSpec::scalar("contact.friction", 0.3).with_bounds(Some(0.0), Some(1.0)))
        .unwrap();
    let se = sys.param(ParamSpec::scalar("contact.smoothing", eps)).unwrap();
    let b = sys.add_body(1.0);
    let mut c = GroundContact::ground(vec![(b, 0.1)], kc, mu, se);
    c.slip_velocity = 5e-2;
    sys.add_force(c);
    let mut x0 = State::at_rest(1);
    x0.position[0] = [0.0, 0.0, 0.4];
    x0.velocity[0] = [0.5, 0.0, -1.0];
    let (dt, n) = (2e-5, 25_000);
    let mut weight = State::zeros(1);
    weight.position[0] = [1.0, 1.0, 1.0];
    weight.velocity[0] = [1.0, 1.0, 1.0];
    let obj = FinalState { target: State::zeros(1), weight };
    let g = Simulation::new(&sys, Rk4, dt, n).gradient(&x0, &obj, Memory::StoreAll).unwrap();
    let pv = ParamVector::new(&sys.registry, &[sys.registry.id("contact.stiffness").unwrap()]);
    let g_kc = g.params.flatten(&pv)[0];
    let g_z0 = g.initial_state.position[0][2];
    assert!(g_kc.is_finite() && g_z0.is_finite());
    let m0 = [1e4, 0.4];
    let j = |m: &[f64]| {
        let mut s = System::new();
        s.gravity = sys.gravity;
        let kc = s.param(ParamSpec::scalar("contact.stiffness", m[0])).unwrap();
        let mu = s.param(ParamSpec::scalar("contact.friction", 0.3)).unwrap();
        let se = s.param(ParamSpec::scalar("contact.smoothing", eps)).unwrap();
        let b = s.add_body(1.0);
        let mut c = GroundContact::ground(vec![(b, 0.1)], kc, mu, se);
        c.slip_velocity = 5e-2;
        s.add_force(c);
        let mut x = x0.clone();
        x.position[0][2] = m[1];
        Simulation::new(&s, Rk4, dt, n).objective(&x, &obj)
    };
    let dm = [1e4 * 0.7, 0.8];
    let tr = taylor_test(
        j,
        &m0,
        &[g_kc, g_z0],
        &dm,
        &TaylorParams { h0: 2.5e-4, steps: 6, min_rate: 1.9 },
    )
    .unwrap();
    (tr, g_z0)
}

#[test]
fn smooth_contact_gradient_through_impact() {
    let (tr, g) = bounce_taylor(1e-4);
    eprintln!("ε = 1e-4: dJ/dz0 = {g:.6e}\n{}", tr.table());
    assert!(tr.passed && tr.rates_used >= 2, "ε = 1e-4 should pass:\n{}", tr.table());
}

#[test]
fn too_small_smoothing_breaks_the_taylor_test() {
    let (tr, g) = bounce_taylor(1e-10);
    eprintln!("ε = 1e-10: dJ/dz0 = {g:.6e}\n{}", tr.table());
    assert!(g.is_finite());
    assert!(!tr.passed, "with ε = 1e-10 the kink should show in the Taylor test:\n{}", tr.table());
}

/// Three spheres colliding (no gravity): the adjoint passes a Taylor test through the
/// collisions and the total momentum is conserved (equal and opposite contact forces).
#[test]
fn sphere_sphere_contact_gradient_and_momentum() {
    let build = |m: &[f64]| {
        let mut s = System::new();
        let kc = s.param(ParamSpec::scalar("contact.stiffness", m[0])).unwrap();
        let mu = s.param(ParamSpec::scalar("contact.friction", m[1])).unwrap();
        let se = s.param(ParamSpec::scalar("contact.smoothing", m[2])).unwrap();
        for _ in 0..3 {
            s.add_body(1.0);
        }
        s.add_force(SphereContact {
            spheres: vec![(0, 0.2), (1, 0.2), (2, 0.3)],
            stiffness: kc,
            friction: mu,
            smoothing: se,
            slip_velocity: 0.05,
        });
        s
    };
    let mut x0 = State::at_rest(3);
    x0.position = vec![[-1.0, 0.05, 0.0], [0.0, 0.0, 0.0], [1.0, -0.1, 0.02]];
    x0.velocity = vec![[2.0, 0.0, 0.0], [0.0, 0.0, 0.0], [-1.5, 0.3, 0.0]];
    let (dt, n) = (1e-3, 800);
    let mut weight = State::zeros(3);
    weight.position = vec![[1.0, 2.0, 3.0]; 3];
    weight.velocity = vec![[1.0, 0.5, 0.25]; 3];
    let obj = FinalState { target: State::zeros(3), weight };
    let m0 = [500.0, 0.4, 5e-3];
    let sys = build(&m0);
    let traj = Simulation::new(&sys, Rk4, dt, n).run(&x0).unwrap();
    let momentum = |s: &State| -> [f64; 3] {
        std::array::from_fn(|d| s.velocity.iter().map(|v| v[d]).sum::<f64>())
    };
    let (p0, p1) = (momentum(&traj[0]), momentum(&traj[n]));
    assert!((0..3).all(|d| (p0[d] - p1[d]).abs() < 1e-12), "momentum {p0:?} → {p1:?}");
    assert!((traj[n].velocity[0][0] - 2.0).abs() > 0.5, "no collision happened");
    let g = Simulation::new(&sys, Rk4, dt, n).gradient(&x0, &obj, Memory::StoreAll).unwrap();
    let np = 3;
    let mut m: Vec<f64> = m0.to_vec();
    m.extend(x0.to_flat());
    let mut grad = g.params.flatten(&ParamVector::all(&sys.registry));
    grad.extend(g.initial_state.to_flat());
    let dm: Vec<f64> =
        (0..m.len()).map(|i| (0.2 + 0.1 * (i % 7) as f64) * m[i].abs().max(0.1)).collect();
    let tr = taylor_test(
        |z: &[f64]| {
            Simulation::new(&build(&z[..np]), Rk4, dt, n)
                .objective(&State::from_flat(&z[np..]), &obj)
        },
        &m,
        &grad,
        &dm,
        &TaylorParams { h0: 1e-4, steps: 5, min_rate: 1.9 },
    )
    .unwrap();
    assert!(tr.passed && tr.rates_used >= 2, "sphere contact:\n{}", tr.table());
}
