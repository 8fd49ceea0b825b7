//! Contact spheres at body-frame offsets: VJP against finite differences, a Taylor test of a
//! tumbling box through its corner impacts, and identification of μ and k_c of a sliding box
//! (the core of `examples/sliding_box.rs`).

use gradfem_dynamics::prelude::*;
use gradfem_dynamics::scenes::SlidingBox;
use gradfem_solvers::optimize::LbfgsbParams;
use gradfem_solvers::params::{ParamSpec, ParamVector};
use gradfem_solvers::taylor::{TaylorParams, random_direction, taylor_test};

/// A box falling tilted and spinning onto its corners; (μ, k_c, ε) registered.
fn tumbling(m: &[f64]) -> System {
    let mut sys = System::new();
    sys.gravity = [0.0, 0.0, -9.81];
    let mu = sys.param(ParamSpec::scalar("contact.friction", m[0])).unwrap();
    let kc = sys.param(ParamSpec::scalar("contact.stiffness", m[1])).unwrap();
    let eps = sys.param(ParamSpec::scalar("contact.smoothing", m[2])).unwrap();
    let b = sys.add_rigid_body(1.0, [0.011.into(), 0.017.into(), 0.021.into()]);
    let pts = [[0.2, 0.15], [0.2, -0.15], [-0.2, 0.15], [-0.2, -0.15]].map(|[x, y]| ContactPoint {
        body: b,
        offset: [x, y, -0.1],
        radius: 5e-3,
    });
    let mut c = GroundContact::ground(vec![(b, 0.05)], kc, mu, eps).with_points(pts);
    c.slip_velocity = 5e-2;
    sys.add_force(c);
    sys
}

fn tumbling_x0() -> State {
    let mut x0 = State::at_rest(1);
    x0.position[0] = [0.0, 0.0, 0.16];
    x0.velocity[0] = [0.8, -0.3, -0.6];
    let q: [f64; 4] = [0.97, 0.12, -0.18, 0.1];
    let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    x0.orientation[0] = q.map(|v| v / n);
    x0.angular_velocity[0] = [1.5, -2.0, 3.0];
    x0
}

fn tumbling_objective() -> FinalState {
    let w = random_direction(13, 5).iter().map(|v| 1.0 + 0.5 * v).collect::<Vec<_>>();
    FinalState { target: State::from_flat(&random_direction(13, 9)), weight: State::from_flat(&w) }
}

/// The corner spheres do hit the ground (the force is not zero) and the adjoint gradient with
/// respect to (μ, k_c, ε, x₀) — orientation and spin included — passes a Taylor test.
#[test]
fn offset_contact_gradient_passes_taylor_test() {
    let (dt, n) = (2e-4, 600);
    let m0 = [0.4, 2e3, 2e-3];
    let sys = tumbling(&m0);
    let x0 = tumbling_x0();
    let obj = tumbling_objective();
    let sim = Simulation::new(&sys, Rk4, dt, n);
    let traj = sim.run(&x0).unwrap();
    // Free fall would end at v_z = −0.6 − 9.81 · 0.12 ≈ −1.78: the corners stopped it.
    let vz = traj[n].velocity[0][2];
    assert!(vz > -1.0, "the box should land on its corners (v_z = {vz})");
    let spin_change = (traj[n].angular_velocity[0][2] - x0.angular_velocity[0][2]).abs();
    assert!(spin_change > 0.1, "corner friction should change the spin: {spin_change}");
    let g = sim.gradient(&x0, &obj, Memory::StoreAll).unwrap();
    let pv = ParamVector::all(&sys.registry);
    let mut grad = g.params.flatten(&pv);
    grad.extend(g.initial_state.to_flat());
    let mut m = m0.to_vec();
    m.extend(x0.to_flat());
    let mut dm = random_direction(m.len(), 3);
    dm[0] *= 0.1;
    dm[1] *= 500.0;
    dm[2] *= 5e-4;
    let j = |mm: &[f64]| {
        let s = tumbling(mm);
        Simulation::new(&s, Rk4, dt, n).objective(&State::from_flat(&mm[3..]), &obj)
    };
    let tr = taylor_test(j, &m, &grad, &dm, &TaylorParams { h0: 1e-2, steps: 5, min_rate: 1.9 })
        .unwrap();
    eprintln!("{}", tr.table());
    assert!(tr.passed && tr.rates_used >= 2, "{}", tr.table());
}

/// Noise-free observation: μ and k_c recovered to 1e-4 relative from (0.2, 10⁴).
#[test]
fn sliding_box_recovers_friction_and_stiffness() {
    let scene = SlidingBox::default();
    let obs = scene.observe(0.0, 2024).unwrap();
    let params = LbfgsbParams { gtol: 1e-12, ftol: 0.0, max_iterations: 200, ..Default::default() };
    let r = scene.recover(&obs, [0.2, 1e4], &params, None).unwrap();
    let e_mu = (r.friction - scene.friction_true).abs() / scene.friction_true;
    let e_kc = (r.stiffness - scene.stiffness_true).abs() / scene.stiffness_true;
    eprintln!("{r:?}: errors μ {e_mu:.2e}, k_c {e_kc:.2e}");
    assert!(e_mu < 1e-4 && e_kc < 1e-4, "{r:?}");
    // The box really slides and stops: it travels about v₀²/(2 μ g) and ends at rest.
    let sys = scene.system(scene.friction_true, scene.stiffness_true).unwrap();
    let traj = scene.simulation(&sys).run(&scene.x0()).unwrap();
    let end = &traj[scene.n_steps];
    let v0 = scene.v0[0].hypot(scene.v0[1]);
    let travel = end.position[0][0].hypot(end.position[0][1]);
    let expected = v0 * v0 / (2.0 * scene.friction_true * 9.81);
    assert!((travel - expected).abs() < 0.05 * expected, "travel {travel} vs {expected}");
    assert!(end.velocity[0][0].hypot(end.velocity[0][1]) < 1e-2, "{:?}", end.velocity);
}
