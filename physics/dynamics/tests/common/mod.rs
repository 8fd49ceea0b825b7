//! Shared test systems.
#![allow(dead_code)]

use gradfem_dynamics::prelude::*;
use gradfem_solvers::params::{ParamSpec, ParamVector};
use gradfem_solvers::taylor::random_direction;

/// Two rigid bodies (one with a registered mass, one with a registered moment of inertia), a spring between them, a spring to a fixed point,
/// a damper, gravity and soft ground contact with friction; body 0 hits the ground after about
/// 0.2 s. `eps` is the contact smoothing length.
pub fn two_body_system(eps: f64) -> System {
    let mut sys = System::new();
    sys.gravity = [0.0, 0.0, -9.81];
    let m1 = sys.param(ParamSpec::scalar("body.1.mass", 2.0).with_bounds(Some(0.0), None)).unwrap();
    let k = sys.param(ParamSpec::scalar("spring.k", 30.0)).unwrap();
    let rest = sys.param(ParamSpec::scalar("spring.rest", 1.0)).unwrap();
    let ka = sys.param(ParamSpec::scalar("spring.anchor.k", 20.0)).unwrap();
    let c = sys.param(ParamSpec::scalar("damper.c", 0.5)).unwrap();
    let kc = sys.param(ParamSpec::scalar("contact.stiffness", 1e3)).unwrap();
    let mu = sys
        .param(ParamSpec::scalar("contact.friction", 0.3).with_bounds(Some(0.0), Some(1.0)))
        .unwrap();
    let se = sys.param(ParamSpec::scalar("contact.smoothing", eps)).unwrap();
    let i0 = sys.param(ParamSpec::scalar("body.0.inertia.x", 4e-3)).unwrap();
    let b0 = sys.add_rigid_body(1.0, [i0, 6e-3.into(), 8e-3.into()]);
    let b1 = sys.add_rigid_body(m1, [0.02.into(), 0.03.into(), 0.045.into()]);
    sys.add_force(Spring { a: Anchor::Body(b0), b: Anchor::Body(b1), k, rest_length: rest });
    sys.add_force(Spring {
        a: Anchor::Body(b1),
        b: Anchor::Fixed([0.0, 0.0, 2.0]),
        k: ka,
        rest_length: 0.5.into(),
    });
    sys.add_force(Damper { a: Anchor::Body(b0), b: Anchor::Body(b1), c });
    // v_ε = 0.05: with the default 1e-3 the body sticks during the impact and J becomes so
    // curved (∝ 1/v_ε) in every parameter that finite differences cannot reach 1e-7.
    let mut contact = GroundContact::ground(vec![(b0, 0.1), (b1, 0.1)], kc, mu, se);
    contact.slip_velocity = 5e-2;
    sys.add_force(contact);
    sys
}

/// Initial state of [`two_body_system`] with spin.
pub fn two_body_x0() -> State {
    let mut x0 = State::at_rest(2);
    x0.position = vec![[0.0, 0.0, 0.3], [0.5, 0.2, 1.2]];
    x0.velocity = vec![[1.0, 0.0, -1.0], [0.0, 0.5, 0.0]];
    let q: [f64; 4] = [0.9, 0.1, -0.3, 0.2];
    let nq = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    x0.orientation = vec![q.map(|v| v / nq), [1.0, 0.0, 0.0, 0.0]];
    x0.angular_velocity = vec![[0.3, -0.2, 1.0], [2.0, 0.0, 0.5]];
    x0
}

/// Position misfit to a fixed made-up trajectory plus a final-state term on every component
/// (so quaternions and angular velocities matter).
pub fn test_objective(n_steps: usize) -> Sum<PositionMisfit, FinalState> {
    let observed = (0..=n_steps)
        .map(|k| {
            let t = k as f64 / n_steps as f64;
            Some(vec![[0.3 * t, 0.0, 0.2], [0.5, 0.1 * t, 1.0]])
        })
        .collect();
    let w = random_direction(26, 7).iter().map(|v| 1.0 + v).collect::<Vec<_>>();
    let target = State::from_flat(&random_direction(26, 11));
    Sum(
        PositionMisfit { observed, weight: 1.0 / n_steps as f64 },
        FinalState { target, weight: State::from_flat(&w) },
    )
}

/// J as a function of m = (all parameters, flat x0): sets the registry from m, runs, restores
/// nothing (the caller restores).
pub fn j_of<I: StepVjp + Copy>(
    sys: &mut System,
    integ: I,
    dt: f64,
    n: usize,
    obj: &impl Objective,
    m: &[f64],
) -> f64 {
    let pv = ParamVector::all(&sys.registry);
    let np = pv.len();
    pv.scatter(&mut sys.registry, &m[..np]).unwrap();
    let x0 = State::from_flat(&m[np..]);
    Simulation::new(&*sys, integ, dt, n).objective(&x0, obj).unwrap()
}

/// Two rigid spheres (radii 0.1 and 0.12; body 0 with a registered moment of inertia and
/// unequal moments, so its orientation matters; body 1 with a registered mass) and sphere
/// contact with friction between them, no other force: the spinning sphere 0 strikes the
/// spinning sphere 1 off-centre after about 0.03 s. `eps` is the contact smoothing length.
pub fn spinning_spheres_system(eps: f64) -> System {
    let mut sys = System::new();
    let m1 = sys.param(ParamSpec::scalar("body.1.mass", 1.5).with_bounds(Some(0.0), None)).unwrap();
    let i0 = sys.param(ParamSpec::scalar("body.0.inertia.x", 4e-3)).unwrap();
    let kc = sys.param(ParamSpec::scalar("contact.stiffness", 1e3)).unwrap();
    let mu = sys
        .param(ParamSpec::scalar("contact.friction", 0.3).with_bounds(Some(0.0), Some(1.0)))
        .unwrap();
    let se = sys.param(ParamSpec::scalar("contact.smoothing", eps)).unwrap();
    let b0 = sys.add_rigid_body(1.0, [i0, 5e-3.into(), 3.5e-3.into()]);
    let b1 = sys.add_rigid_body(m1, [8.6e-3.into(); 3]);
    sys.add_force(SphereContact {
        spheres: vec![(b0, 0.1), (b1, 0.12)],
        stiffness: kc,
        friction: mu,
        smoothing: se,
        slip_velocity: 5e-2,
    });
    sys
}

/// Initial state of [`spinning_spheres_system`]: both spheres spin, sphere 0 moves towards 1.
pub fn spinning_spheres_x0() -> State {
    let mut x0 = State::at_rest(2);
    x0.position = vec![[-0.25, 0.03, 0.01], [0.0, 0.0, 0.0]];
    x0.velocity = vec![[1.0, 0.0, 0.1], [0.0, 0.05, 0.0]];
    let q: [f64; 4] = [0.9, 0.1, -0.3, 0.2];
    let nq = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    x0.orientation = vec![q.map(|v| v / nq), [1.0, 0.0, 0.0, 0.0]];
    x0.angular_velocity = vec![[0.5, 4.0, -15.0], [2.0, 0.0, 1.0]];
    x0
}
