//! Identification of a spring stiffness by L-BFGS-B on the adjoint gradient (the core of
//! `examples/spring_inverse.rs`), and quaternion normalization along a spinning trajectory.

mod common;

use gradfem_dynamics::prelude::*;
use gradfem_solvers::optimize::{Control, LbfgsbParams, minimize_lbfgsb};
use gradfem_solvers::params::{ParamSpec, ParamVector};
use rstest::rstest;

fn system(k0: f64) -> System {
    let mut sys = System::new();
    let k =
        sys.param(ParamSpec::scalar("spring.k", k0).with_bounds(Some(0.1), Some(100.0))).unwrap();
    let b = sys.add_body(1.0);
    sys.add_force(Spring {
        a: Anchor::Body(b),
        b: Anchor::Fixed([0.0; 3]),
        k,
        rest_length: 0.5.into(),
    });
    sys
}

#[rstest]
#[case::euler(ExplicitEuler)]
#[case::rk4(Rk4)]
#[case::verlet(VelocityVerlet)]
fn recovers_spring_stiffness<I: StepVjp + Copy>(#[case] integ: I) {
    let mut x0 = State::at_rest(1);
    x0.position[0] = [1.2, 0.3, 0.0];
    x0.velocity[0] = [0.0, 0.8, 0.1];
    let (dt, n) = (0.01, 200);
    let truth = Simulation::new(&system(4.0), integ, dt, n).run(&x0).unwrap();
    let obj = PositionMisfit::from_trajectory(&truth, 1.0);
    let mut sys = system(1.0);
    let pv = ParamVector::all(&sys.registry);
    let (lo, hi) = pv.bounds();
    let start = pv.gather(&sys.registry);
    let params = LbfgsbParams { gtol: 1e-10, ftol: 0.0, max_iterations: 100, ..Default::default() };
    let res = minimize_lbfgsb(
        |x, g| {
            pv.scatter(&mut sys.registry, x)?;
            let r = Simulation::new(&sys, integ, dt, n).gradient(&x0, &obj, Memory::StoreAll)?;
            g.copy_from_slice(&r.params.flatten(&pv));
            Ok::<_, DynamicsError>(r.value)
        },
        &start,
        &lo,
        &hi,
        &params,
        |_| Control::Continue,
    )
    .unwrap();
    let rel = (res.x[0] - 4.0).abs() / 4.0;
    assert!(
        rel < 1e-6,
        "{}: k = {} after {} iterations ({:?})",
        integ.name(),
        res.x[0],
        res.iterations,
        res.status
    );
}

#[rstest]
#[case::euler(ExplicitEuler)]
#[case::rk4(Rk4)]
#[case::verlet(VelocityVerlet)]
fn quaternions_stay_normalized<I: StepVjp + Copy>(#[case] integ: I) {
    let sys = common::two_body_system(1e-2);
    let traj = Simulation::new(&sys, integ, 1e-3, 500).run(&common::two_body_x0()).unwrap();
    for (k, s) in traj.iter().enumerate() {
        for q in &s.orientation {
            let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
            assert!((n - 1.0).abs() < 4.0 * f64::EPSILON, "step {k}: |q| = {n}");
        }
    }
    // The orientation does move (the bodies spin).
    assert!((traj[500].orientation[1][1] - traj[0].orientation[1][1]).abs() > 0.1);
}
