//! Discrete adjoint gradients against Taylor tests and central finite differences, for every
//! integrator, with respect to every parameter and every initial-state component.

mod common;

use common::*;
use gradfem_dynamics::prelude::*;
use gradfem_solvers::params::ParamVector;
use gradfem_solvers::taylor::{TaylorParams, random_direction, taylor_test};
use rstest::rstest;

/// Adjoint gradient of `test_objective` with respect to every parameter and every initial-state
/// component of `sys` from `x0` against fourth-order central differences (1e-7 relative) and a
/// Taylor test (rate 2).
fn check<I: StepVjp + Copy>(integ: I, dt: f64, n: usize, mut sys: System, x0: State) {
    let obj = test_objective(n);
    let res = Simulation::new(&sys, integ, dt, n).gradient(&x0, &obj, Memory::StoreAll).unwrap();
    let pv = ParamVector::all(&sys.registry);
    let np = pv.len();
    let mut m = pv.gather(&sys.registry);
    m.extend(x0.to_flat());
    let mut g = res.params.flatten(&pv);
    g.extend(res.initial_state.to_flat());
    let m_orig = m.clone();

    // Central finite differences, entry by entry, fourth order (Richardson-combined central
    // differences, truncation O(d⁴)): the contact law makes J strongly curved, and the
    // second-order formula cannot reach 1e-7 before rounding takes over.
    let gmax = g.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    let mut worst = 0.0f64;
    let mut jat = |i: usize, d: f64| {
        let mut mp = m_orig.clone();
        mp[i] += d;
        j_of(&mut sys, integ, dt, n, &obj, &mp)
    };
    let mut names = Vec::new();
    for i in 0..m.len() {
        let d = 1e-4 * m[i].abs().max(1e-1);
        let c1 = jat(i, d) - jat(i, -d);
        let c2 = jat(i, 2.0 * d) - jat(i, -2.0 * d);
        let fd = (8.0 * c1 - c2) / (12.0 * d);
        let err = (fd - g[i]).abs() / (g[i].abs() + 1e-6 * gmax);
        names.push((i, fd, err));
        worst = worst.max(err);
    }
    for (i, fd, err) in names {
        let name = if i < np { pv.entry_name(i) } else { sys.layout().component_name(i - np) };
        assert!(
            err < 1e-7,
            "{}: entry {name}: adjoint {} vs FD {fd}: rel err {err:.2e}",
            integ.name(),
            g[i]
        );
    }
    eprintln!("{}: worst FD relative error {worst:.2e}", integ.name());

    // Taylor test along a random direction in (parameters, x0).
    let dm: Vec<f64> = random_direction(m.len(), 3)
        .iter()
        .zip(&m_orig)
        .map(|(u, x)| u * x.abs().max(0.1))
        .collect();
    let tr = taylor_test(
        |x| Ok::<_, ()>(j_of(&mut sys, integ, dt, n, &obj, x)),
        &m_orig,
        &g,
        &dm,
        &TaylorParams { h0: 1e-3, steps: 5, ..Default::default() },
    )
    .unwrap();
    assert!(
        tr.passed && tr.rates_used >= 2,
        "{}: Taylor test failed:\n{}",
        integ.name(),
        tr.table()
    );
    eprintln!("{}: Taylor rates {:?}", integ.name(), tr.rates);
    assert!(tr.min_rate() > 1.9, "{}:\n{}", integ.name(), tr.table());
    j_of(&mut sys, integ, dt, n, &obj, &m_orig);
}

#[rstest]
fn explicit_euler_gradient() {
    check(ExplicitEuler, 5e-4, 600, two_body_system(1e-2), two_body_x0());
}

#[rstest]
fn rk4_gradient() {
    check(Rk4, 2e-3, 150, two_body_system(1e-2), two_body_x0());
}

#[rstest]
fn velocity_verlet_gradient() {
    check(VelocityVerlet, 1e-3, 300, two_body_system(1e-2), two_body_x0());
}

/// Spinning rigid spheres colliding: friction at the contact point couples the spins, so the
/// gradient runs through the torques and the angular velocities of both bodies.
#[rstest]
#[case::explicit_euler(ExplicitEuler, 5e-4, 600)]
#[case::rk4(Rk4, 2e-3, 150)]
#[case::velocity_verlet(VelocityVerlet, 1e-3, 300)]
fn spinning_sphere_contact_gradient<I: StepVjp + Copy>(
    #[case] integ: I,
    #[case] dt: f64,
    #[case] n: usize,
) {
    let (sys, x0) = (spinning_spheres_system(1e-2), spinning_spheres_x0());
    let end = Simulation::new(&sys, integ, dt, n).run(&x0).unwrap().pop().unwrap();
    let dw: f64 =
        (0..3).map(|k| (end.angular_velocity[1][k] - x0.angular_velocity[1][k]).abs()).sum();
    assert!(dw > 0.5, "{}: the collision did not couple the spins (|Δω_1| = {dw})", integ.name());
    check(integ, dt, n, sys, x0);
}
