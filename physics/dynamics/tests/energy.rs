//! Velocity Verlet keeps the energy of an undamped oscillator bounded over 10⁵ steps while RK4
//! drifts (at a step where the drift is visible: h = 0.2 with ω = 1).

use gradfem_dynamics::prelude::*;

fn energy(x: &[f64]) -> f64 {
    // m = k = 1, rest length 0: E = ½|v|² + ½|r|².
    0.5 * (x[3] * x[3] + x[4] * x[4] + x[5] * x[5])
        + 0.5 * (x[0] * x[0] + x[1] * x[1] + x[2] * x[2])
}

fn energy_history(integ: &impl Step, steps: usize, h: f64) -> Vec<f64> {
    let mut sys = System::new();
    let b = sys.add_body(1.0);
    sys.add_force(Spring {
        a: Anchor::Body(b),
        b: Anchor::Fixed([0.0; 3]),
        k: 1.0.into(),
        rest_length: 0.0.into(),
    });
    let pv = sys.param_values();
    let mut s = State::at_rest(1);
    s.position[0] = [1.0, 0.0, 0.0];
    s.velocity[0] = [0.0, 0.5, 0.0]; // an ellipse that never passes through the anchor
    let mut x = s.to_flat();
    let e0 = energy(&x);
    let mut out = Vec::with_capacity(steps);
    for k in 0..steps {
        x = integ.step(&StepAt { sys: &sys, pv: &pv, t: k as f64 * h, h }, &x);
        out.push((energy(&x) - e0) / e0);
    }
    out
}

#[test]
fn verlet_energy_bounded_rk4_drifts() {
    let (n, h) = (100_000, 0.2);
    let verlet = energy_history(&VelocityVerlet, n, h);
    let rk4 = energy_history(&Rk4, n, h);
    let max_abs = |v: &[f64]| v.iter().fold(0.0f64, |a, e| a.max(e.abs()));
    let (v_first, v_last) = (max_abs(&verlet[..1000]), max_abs(&verlet[n - 1000..]));
    eprintln!(
        "relative energy error over {n} steps, h = {h}: Verlet max {:.3e} (first 1000 steps {v_first:.3e}, \
         last 1000 {v_last:.3e}); RK4 final {:.3e}",
        max_abs(&verlet),
        rk4[n - 1]
    );
    assert!(max_abs(&verlet) < 0.02, "Verlet energy error not bounded: {}", max_abs(&verlet));
    assert!(v_last < 1.05 * v_first, "Verlet energy error grows: {v_first} → {v_last}");
    assert!(rk4[n - 1] < -0.05, "RK4 should lose energy visibly: {}", rk4[n - 1]);
    assert!(rk4[n - 1] < rk4[n / 2] && rk4[n / 2] < rk4[1000], "RK4 drift should be monotone");
}
