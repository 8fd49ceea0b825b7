//! Friction between spinning spheres: spin passes from one sphere to the other through the
//! contact point, the total angular momentum (orbital plus spin) is conserved, topspin throws
//! the struck sphere the expected way, and the friction force stays within the Coulomb bound.

use gradfem_dynamics::forces::sphere_contact_wrench;
use gradfem_dynamics::prelude::*;
use gradfem_solvers::params::ParamSpec;

const RADIUS: f64 = 0.1;
const MASS: f64 = 1.0;
const STIFFNESS: f64 = 1e4;
const FRICTION: f64 = 0.3;
const SMOOTHING: f64 = 1e-4;
const SLIP: f64 = 1e-2;

/// Two equal uniform spheres (I = 2/5 m R²), no gravity, sphere contact only.
fn two_spheres(mu: f64) -> System {
    let mut sys = System::new();
    let kc = sys.param(ParamSpec::scalar("contact.stiffness", STIFFNESS)).unwrap();
    let mu = sys
        .param(ParamSpec::scalar("contact.friction", mu).with_bounds(Some(0.0), Some(1.0)))
        .unwrap();
    let eps = sys.param(ParamSpec::scalar("contact.smoothing", SMOOTHING)).unwrap();
    let i = Value::Fixed(0.4 * MASS * RADIUS * RADIUS);
    for _ in 0..2 {
        sys.add_rigid_body(MASS, [i; 3]);
    }
    sys.add_force(SphereContact {
        spheres: vec![(0, RADIUS), (1, RADIUS)],
        stiffness: kc,
        friction: mu,
        smoothing: eps,
        slip_velocity: SLIP,
    });
    sys
}

fn cross(a: &[f64; 3], b: &[f64; 3]) -> [f64; 3] {
    [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
}

/// L = Σ (r − p) × m v + I ω about the fixed point p (isotropic inertia: I ω in any frame).
fn angular_momentum(s: &State, p: [f64; 3]) -> [f64; 3] {
    let i = 0.4 * MASS * RADIUS * RADIUS;
    let mut l = [0.0; 3];
    for b in 0..2 {
        let arm: [f64; 3] = std::array::from_fn(|k| s.position[b][k] - p[k]);
        let mv = s.velocity[b].map(|v| MASS * v);
        let orbital = cross(&arm, &mv);
        (0..3).for_each(|k| l[k] += orbital[k] + i * s.angular_velocity[b][k]);
    }
    l
}

/// Sphere a spins about z and touches sphere b at rest, slightly overlapping (δ = 5e-3) with
/// no relative velocity of the centres: the normal force pushes them apart, and meanwhile
/// friction at the contact point slows a's spin and spins b the other way (like gears), with a
/// sideways push on both. The angular momentum about a fixed point off every symmetry axis is
/// conserved to the integrator's accuracy (its error falls ≈ 16× when dt halves, RK4), and the
/// friction force stays within μ F_n along the whole trajectory.
#[test]
fn friction_transfers_spin_and_conserves_angular_momentum() {
    let sys = two_spheres(FRICTION);
    let mut x0 = State::at_rest(2);
    // Line of centres off the axes, spin mostly normal to it (a little along it: no friction).
    let u = [0.9, 0.3, -0.2];
    let nu = u.iter().map(|x| x * x).sum::<f64>().sqrt();
    x0.position = vec![u.map(|x| (2.0 * RADIUS - 5e-3) * x / nu), [0.0; 3]];
    x0.angular_velocity[0] = [2.0, -3.0, 20.0];
    let p = [0.3, -0.7, 0.2];
    let l0 = angular_momentum(&x0, p);
    let horizon = 0.02;
    let drift = |dt: f64| {
        let n = (horizon / dt).round() as usize;
        let traj = Simulation::new(&sys, Rk4, dt, n).run(&x0).unwrap();
        let worst = traj
            .iter()
            .map(|s| {
                let l = angular_momentum(s, p);
                (0..3).map(|k| (l[k] - l0[k]).abs()).fold(0.0, f64::max)
            })
            .fold(0.0, f64::max);
        (worst, traj)
    };
    let (err, traj) = drift(2e-5);
    let (err_coarse, _) = drift(1e-4);
    let lz = l0[2];
    let end = traj.last().unwrap();
    eprintln!(
        "spin transfer: ω_a,z 20 → {:.4}, ω_b,z 0 → {:.4}, v_a,y {:.4}, v_b,y {:.4}; \
         max |ΔL| {err:.2e} (dt = 2e-5), {err_coarse:.2e} (dt = 1e-4), L_z = {lz:.4}",
        end.angular_velocity[0][2],
        end.angular_velocity[1][2],
        end.velocity[0][1],
        end.velocity[1][1],
    );
    // Spin went from a to b, opposite in sense; the tangential impulses are equal and opposite.
    assert!(end.angular_velocity[0][2] < 19.0, "a kept its spin: {:?}", end.angular_velocity);
    assert!(end.angular_velocity[1][2] < -1.0, "b did not spin up: {:?}", end.angular_velocity);
    assert!(end.velocity[0][1] > 0.01 && end.velocity[1][1] < -0.01, "{:?}", end.velocity);
    let dist = (0..3).map(|k| (end.position[0][k] - end.position[1][k]).powi(2)).sum::<f64>();
    assert!(dist.sqrt() > 2.0 * RADIUS + 40.0 * SMOOTHING, "still in contact at the end");
    // Conservation to integrator accuracy.
    assert!(err < 1e-10 * lz, "angular momentum drift {err:e} (L_z = {lz})");
    assert!(err_coarse < 1e-6 * lz, "angular momentum drift {err_coarse:e} at dt = 1e-4");
    // Linear momentum: equal and opposite forces.
    let p_end: f64 = (0..3).map(|k| (end.velocity[0][k] + end.velocity[1][k]).abs()).sum();
    assert!(p_end < 1e-12, "momentum {p_end:e}");
    // |F_t| ≤ μ F_n at every state of the trajectory.
    let mut max_ratio: f64 = 0.0;
    for s in &traj {
        let w = sphere_contact_wrench(
            &s.position[0],
            &s.position[1],
            &s.velocity[0],
            &s.velocity[1],
            &s.angular_velocity[0],
            &s.angular_velocity[1],
            STIFFNESS,
            FRICTION,
            SMOOTHING,
            RADIUS,
            RADIUS,
            SLIP,
        );
        let d: [f64; 3] = std::array::from_fn(|k| s.position[0][k] - s.position[1][k]);
        let l = d.iter().map(|x| x * x).sum::<f64>().sqrt();
        let fn_: f64 = (0..3).map(|k| w[k] * d[k] / l).sum();
        let ft = (0..3).map(|k| (w[k] - fn_ * d[k] / l).powi(2)).sum::<f64>().sqrt();
        assert!(ft <= FRICTION * fn_ * (1.0 + 1e-12), "|F_t| {ft} > μ F_n = {}", FRICTION * fn_);
        if fn_ > 1.0 {
            max_ratio = max_ratio.max(ft / fn_);
        }
    }
    // While the contact slips fast (|v_t| ≫ v_ε) friction sits at the bound.
    assert!(max_ratio > 0.99 * FRICTION, "friction never reached μ F_n: {max_ratio}");
}

/// A sphere rolling in +x with topspin (ω = v/R about +y) strikes a resting one head-on. The
/// striker's contact point (ahead of it, ρ_a = +R e_x) moves down at ω R, so friction pushes
/// the struck sphere down (v_z < 0) and the striker up (v_z > 0), and spins the struck sphere
/// about −y while the striker loses topspin. Without friction nothing leaves the x axis.
#[test]
fn topspin_throws_the_struck_sphere_down() {
    let (v0, w0) = (1.0, 1.0 / RADIUS);
    let mut x0 = State::at_rest(2);
    x0.position = vec![[-2.0 * RADIUS - 0.02, 0.0, 0.0], [0.0; 3]];
    x0.velocity[0] = [v0, 0.0, 0.0];
    x0.angular_velocity[0] = [0.0, w0, 0.0];
    let (dt, n) = (2e-5, 2500);
    let run = |mu: f64| Simulation::new(&two_spheres(mu), Rk4, dt, n).run(&x0).unwrap();
    let end = run(FRICTION).pop().unwrap();
    let (va, vb) = (end.velocity[0], end.velocity[1]);
    let (wa, wb) = (end.angular_velocity[0], end.angular_velocity[1]);
    eprintln!("topspin: striker v {va:?} ω {wa:?}; struck v {vb:?} ω {wb:?}");
    assert!(vb[0] > 0.9 * v0 && va[0].abs() < 0.1 * v0, "no head-on transfer: {va:?} {vb:?}");
    assert!(vb[2] < -1e-3 && va[2] > 1e-3, "throw has the wrong sign: {va:?} {vb:?}");
    assert!((va[2] + vb[2]).abs() < 1e-12, "tangential impulses differ: {va:?} {vb:?}");
    assert!(wb[1] < -0.1 && wa[1] < w0 - 0.1, "spins: striker {wa:?}, struck {wb:?}");
    let frictionless = run(0.0).pop().unwrap();
    assert!(
        frictionless.velocity.iter().all(|v| v[2].abs() < 1e-14),
        "without friction: {:?}",
        frictionless.velocity
    );
}
