//! User forces (closure + VJP), a user step with its VJP, and the finite-difference VJP of a
//! black-box step against the exact one.

use gradfem_dynamics::prelude::*;
use gradfem_solvers::params::{ParamSpec, ParamVector};
use gradfem_solvers::taylor::{TaylorParams, taylor_test};

/// One body under a user force F = −a·r·|r|² (a registered `user.a`) and a linear drag
/// (Damper to a fixed point).
fn system() -> System {
    let mut sys = System::new();
    let a = sys.param(ParamSpec::scalar("user.a", 2.0)).unwrap();
    let c = sys.param(ParamSpec::scalar("drag.c", 0.3)).unwrap();
    let b = sys.add_body(1.5);
    sys.add_force(UserForce::new(
        move |x, ctx, f| {
            let a = ctx.value(a);
            let r2 = x[0] * x[0] + x[1] * x[1] + x[2] * x[2];
            (0..3).for_each(|d| f[0][d] -= a * x[d] * r2);
        },
        move |x, ctx, fb, xb, pb| {
            let av = ctx.value(a);
            let r2 = x[0] * x[0] + x[1] * x[1] + x[2] * x[2];
            let fr: f64 = (0..3).map(|d| fb[0][d] * x[d]).sum();
            // F_d = −a r_d r², ∂F_d/∂r_e = −a (δ_de r² + 2 r_d r_e).
            (0..3).for_each(|e| xb[e] -= av * (fb[0][e] * r2 + 2.0 * fr * x[e]));
            ctx.add_bar(a, pb, -fr * r2);
        },
    ));
    sys.add_force(Damper { a: Anchor::Body(b), b: Anchor::Fixed([0.0; 3]), c });
    sys
}

fn x0() -> State {
    let mut s = State::at_rest(1);
    s.position[0] = [1.0, 0.5, -0.2];
    s.velocity[0] = [0.0, 0.7, 0.1];
    s.angular_velocity[0] = [0.5, 0.0, -0.3];
    s
}

fn objective() -> FinalState {
    let mut weight = State::zeros(1);
    weight.position[0] = [1.0, 2.0, 1.0];
    weight.velocity[0] = [0.5, 0.5, 0.5];
    weight.orientation[0] = [1.0, 1.0, 1.0, 1.0];
    FinalState { target: x0(), weight }
}

/// Semi-implicit (symplectic) Euler written as a user step for one body: v' = v + h a(x),
/// r' = r + h v'; orientation and angular velocity are left unchanged.
#[derive(Clone, Copy)]
struct SymplecticEuler;

impl Step for SymplecticEuler {
    fn name(&self) -> String {
        "user_symplectic_euler".into()
    }
    fn step(&self, at: &StepAt<'_>, x: &[f64]) -> Vec<f64> {
        let StepAt { sys, pv, t, h } = *at;
        let a = sys.accelerations(x, &sys.ctx(pv, t));
        let mut y = x.to_vec();
        for d in 0..3 {
            y[3 + d] = x[3 + d] + h * a[0][d];
            y[d] = x[d] + h * y[3 + d];
        }
        y
    }
}

impl StepVjp for SymplecticEuler {
    fn step_vjp(&self, at: &StepAt<'_>, x: &[f64], y_bar: &[f64], p_bar: &mut [f64]) -> Vec<f64> {
        let StepAt { sys, pv, t, h } = *at;
        let mut x_bar = y_bar.to_vec();
        let mut a_bar = [[0.0; 6]];
        for d in 0..3 {
            let v_new_bar = y_bar[3 + d] + h * y_bar[d];
            x_bar[d] = y_bar[d];
            x_bar[3 + d] = v_new_bar;
            a_bar[0][d] = h * v_new_bar;
        }
        sys.accelerations_vjp(x, &sys.ctx(pv, t), &a_bar, &mut x_bar, p_bar);
        x_bar
    }
}

fn taylor<I: StepVjp + Copy>(integ: I) {
    let mut sys = system();
    let (dt, n) = (0.01, 200);
    let obj = objective();
    let g = Simulation::new(&sys, integ, dt, n).gradient(&x0(), &obj, Memory::StoreAll).unwrap();
    let pv = ParamVector::all(&sys.registry);
    let mut m = pv.gather(&sys.registry);
    m.extend(x0().to_flat());
    let mut grad = g.params.flatten(&pv);
    grad.extend(g.initial_state.to_flat());
    let dm: Vec<f64> = (0..m.len()).map(|i| 0.3 + 0.1 * (i % 5) as f64).collect();
    let tr = taylor_test(
        |z| {
            pv.scatter(&mut sys.registry, &z[..pv.len()]).unwrap();
            Simulation::new(&sys, integ, dt, n).objective(&State::from_flat(&z[pv.len()..]), &obj)
        },
        &m,
        &grad,
        &dm,
        &TaylorParams { h0: 1e-3, ..Default::default() },
    )
    .unwrap();
    assert!(tr.passed && tr.rates_used >= 2, "{}:\n{}", integ.name(), tr.table());
}

#[test]
fn user_force_gradient_passes_taylor_test() {
    taylor(Rk4);
    taylor(VelocityVerlet);
}

#[test]
fn user_step_gradient_passes_taylor_test() {
    taylor(SymplecticEuler);
}

#[test]
fn finite_difference_vjp_approximates_the_exact_one() {
    let sys = system();
    let obj = objective();
    let exact =
        Simulation::new(&sys, Rk4, 0.01, 200).gradient(&x0(), &obj, Memory::StoreAll).unwrap();
    let approx = Simulation::new(&sys, FiniteDifferenceVjp::new(Rk4), 0.01, 200)
        .gradient(&x0(), &obj, Memory::StoreAll)
        .unwrap();
    assert_eq!(exact.value, approx.value);
    let pv = ParamVector::all(&sys.registry);
    let (mut ge, mut ga) = (exact.params.flatten(&pv), approx.params.flatten(&pv));
    ge.extend(exact.initial_state.to_flat());
    ga.extend(approx.initial_state.to_flat());
    let scale = ge.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    let err = ge.iter().zip(&ga).fold(0.0f64, |a, (e, f)| a.max((e - f).abs())) / scale;
    eprintln!("finite-difference VJP: max error relative to ‖g‖∞ = {err:.2e}");
    assert!(err < 1e-6, "FD VJP too far from the exact one: {err:.2e}");
    assert!(err > 0.0, "FD VJP is approximate; bitwise agreement would be suspicious");
}
