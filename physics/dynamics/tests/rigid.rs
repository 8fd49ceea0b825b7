//! Rigid-body rotation: a torque-free asymmetric top conserves energy and angular momentum
//! (Euler's equations), and a sliding sphere ends up rolling at 5/7 of its initial speed
//! (contact friction torque).

use gradfem_dynamics::prelude::*;
use gradfem_dynamics::system::rotation_matrix;
use gradfem_solvers::params::ParamSpec;

fn energy_and_momentum(s: &State, inertia: [f64; 3]) -> (f64, [f64; 3]) {
    let r = rotation_matrix(&s.orientation[0]);
    let w = s.angular_velocity[0];
    let wb: [f64; 3] = std::array::from_fn(|a| (0..3).map(|k| r[k][a] * w[k]).sum());
    let e = 0.5 * (0..3).map(|a| inertia[a] * wb[a] * wb[a]).sum::<f64>();
    let l = std::array::from_fn(|k| (0..3).map(|a| r[k][a] * inertia[a] * wb[a]).sum());
    (e, l)
}

#[test]
fn torque_free_top_conserves_energy_and_angular_momentum() {
    let inertia = [1.0, 2.0, 3.5];
    let mut sys = System::new();
    sys.add_rigid_body(1.0, inertia.map(Value::Fixed));
    let mut x0 = State::at_rest(1);
    // Near the unstable intermediate axis: the body tumbles (Dzhanibekov effect).
    x0.angular_velocity[0] = [0.05, 3.0, 0.02];
    let traj = Simulation::new(&sys, Rk4, 1e-3, 10_000).run(&x0).unwrap();
    let (e0, l0) = energy_and_momentum(&traj[0], inertia);
    let mut max_rel: f64 = 0.0;
    for s in &traj {
        let (e, l) = energy_and_momentum(s, inertia);
        max_rel = max_rel.max(((e - e0) / e0).abs());
        for k in 0..3 {
            max_rel = max_rel.max((l[k] - l0[k]).abs() / 6.0);
        }
    }
    eprintln!("torque-free top, RK4 dt = 1e-3, 10 s: max relative drift of E and L {max_rel:.2e}");
    assert!(max_rel < 1e-6, "energy / angular momentum drift {max_rel:.2e}");
    // It does tumble: the body-frame ω₂ = (Rᵀ ω)₂ changes sign (the body flips).
    let body_w2 = |s: &State| {
        let r = rotation_matrix(&s.orientation[0]);
        (0..3).map(|k| r[k][1] * s.angular_velocity[0][k]).sum::<f64>()
    };
    let wmin = traj.iter().map(body_w2).fold(f64::INFINITY, f64::min);
    assert!(wmin < -2.0, "no tumbling (min body ω₂ = {wmin})");
}

#[test]
fn sliding_sphere_ends_rolling_at_five_sevenths() {
    let (m, radius, v0, g) = (1.0, 0.1, 1.0, 9.81);
    let mut sys = System::new();
    sys.gravity = [0.0, 0.0, -g];
    let kc = sys.param(ParamSpec::scalar("contact.stiffness", 1e5)).unwrap();
    let mu = sys
        .param(ParamSpec::scalar("contact.friction", 0.3).with_bounds(Some(0.0), Some(1.0)))
        .unwrap();
    let eps = sys.param(ParamSpec::scalar("contact.smoothing", 1e-4)).unwrap();
    let i = 0.4 * m * radius * radius;
    let b = sys.add_rigid_body(m, [Value::Fixed(i); 3]);
    sys.add_force(GroundContact::ground(vec![(b, radius)], kc, mu, eps));
    let mut x0 = State::at_rest(1);
    x0.position[0] = [0.0, 0.0, radius - m * g / 1e5];
    x0.velocity[0] = [v0, 0.0, 0.0];
    let traj = Simulation::new(&sys, Rk4, 1e-4, 5000).run(&x0).unwrap();
    let end = &traj[5000];
    let (vx, wy) = (end.velocity[0][0], end.angular_velocity[0][1]);
    eprintln!(
        "sliding sphere after 0.5 s: v = {vx:.5} (5/7 v0 = {:.5}), ω R = {:.5}",
        5.0 / 7.0 * v0,
        wy * radius
    );
    assert!((vx - 5.0 / 7.0 * v0).abs() < 5e-3 * v0, "v = {vx}");
    assert!((wy * radius - vx).abs() < 5e-3 * v0, "not rolling: ω R = {}, v = {vx}", wy * radius);
}
