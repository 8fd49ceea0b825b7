//! Time integrators and the vector-Jacobian products of their steps.
//!
//! Every step maps the flat state x_k at time t_k to x_{k+1} and then renormalizes each
//! quaternion, q ← u/|u| (N below); the VJPs differentiate through N as well, so the adjoint is
//! that of the discrete map actually computed (discrete adjoint). With f(x) the right-hand side
//! of [`crate::system`] and h the step:
//!
//! - [`ExplicitEuler`]: x' = N(x + h f(x, t)).
//! - [`Rk4`]: k₁ = f(x, t), k₂ = f(x + h/2 k₁, t + h/2), k₃ = f(x + h/2 k₂, t + h/2),
//!   k₄ = f(x + h k₃, t + h), x' = N(x + h/6 (k₁ + 2k₂ + 2k₃ + k₄)).
//! - [`VelocityVerlet`] (kick–drift–kick): v½ = v + h/2 a(x, t), ω½ = ω + h/2 α(x, t),
//!   r' = r + h v½, q' = N(q + h q̇(ω½, q)), x½ = (r', v½, q', ω½),
//!   v' = v½ + h/2 a(x½, t + h), ω' = ω½ + h/2 α(x½, t + h). Symplectic for the translation
//!   under position-dependent forces (bounded energy error); velocity-dependent forces are
//!   evaluated at v½ (explicit, first order in them), and the rotation update (q by one
//!   explicit step with ω½) is second-order accurate only for particles, not symplectic.
//! - A user step: implement [`Step`] and [`StepVjp`]; or implement only [`Step`] and wrap it in
//!   [`FiniteDifferenceVjp`] (approximate).
//!
//! The VJPs are hand-written reverse sweeps through the stages; each stage's force VJP comes
//! from [`crate::system::System::rhs_vjp`] (local dual numbers per interaction).

use crate::system::{ParamValues, System, quat_rate, quat_rate_vjp};

/// Where a step is taken: the system, the parameter values, the start time t_k and the step
/// size h.
#[derive(Clone, Copy)]
pub struct StepAt<'a> {
    /// The system.
    pub sys: &'a System,
    /// Parameter values p.
    pub pv: &'a ParamValues,
    /// Time at the start of the step.
    pub t: f64,
    /// Step size.
    pub h: f64,
}

/// One time step x_{k+1} = S(x_k, p, t_k, h).
pub trait Step {
    /// Short name (for logs and example output).
    fn name(&self) -> String;
    /// The new state after one step of size `h` from `x` at time `t`.
    fn step(&self, at: &StepAt<'_>, x: &[f64]) -> Vec<f64>;
}

/// The vector-Jacobian product of a [`Step`].
pub trait StepVjp: Step {
    /// Given ȳ (adjoint of the new state), returns x̄ = (∂S/∂x)ᵀ ȳ and adds (∂S/∂p)ᵀ ȳ into
    /// `p_bar`.
    fn step_vjp(&self, at: &StepAt<'_>, x: &[f64], y_bar: &[f64], p_bar: &mut [f64]) -> Vec<f64>;
}

fn axpy(x: &[f64], a: f64, y: &[f64]) -> Vec<f64> {
    x.iter().zip(y).map(|(xi, yi)| xi + a * yi).collect()
}

/// Explicit (forward) Euler, first order.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExplicitEuler;

impl Step for ExplicitEuler {
    fn name(&self) -> String {
        "explicit_euler".into()
    }
    fn step(&self, at: &StepAt<'_>, x: &[f64]) -> Vec<f64> {
        let StepAt { sys, pv, t, h } = *at;
        let mut y = axpy(x, h, &sys.rhs(x, &sys.ctx(pv, t)));
        sys.normalize_quaternions(&mut y);
        y
    }
}

impl StepVjp for ExplicitEuler {
    fn step_vjp(&self, at: &StepAt<'_>, x: &[f64], y_bar: &[f64], p_bar: &mut [f64]) -> Vec<f64> {
        let StepAt { sys, pv, t, h } = *at;
        let ctx = sys.ctx(pv, t);
        let u = axpy(x, h, &sys.rhs(x, &ctx));
        let mut u_bar = y_bar.to_vec();
        sys.normalize_quaternions_vjp(&u, &mut u_bar);
        let mut x_bar = u_bar.clone();
        let f_bar: Vec<f64> = u_bar.iter().map(|v| h * v).collect();
        sys.rhs_vjp(x, &ctx, &f_bar, &mut x_bar, p_bar);
        x_bar
    }
}

/// Classical fourth-order Runge–Kutta.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rk4;

struct Rk4Stages {
    xs: [Vec<f64>; 4],
    u: Vec<f64>,
}

fn rk4_stages(sys: &System, pv: &ParamValues, t: f64, h: f64, x: &[f64]) -> Rk4Stages {
    let k1 = sys.rhs(x, &sys.ctx(pv, t));
    let x2 = axpy(x, 0.5 * h, &k1);
    let k2 = sys.rhs(&x2, &sys.ctx(pv, t + 0.5 * h));
    let x3 = axpy(x, 0.5 * h, &k2);
    let k3 = sys.rhs(&x3, &sys.ctx(pv, t + 0.5 * h));
    let x4 = axpy(x, h, &k3);
    let k4 = sys.rhs(&x4, &sys.ctx(pv, t + h));
    let u = (0..x.len())
        .map(|i| x[i] + h / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]))
        .collect();
    Rk4Stages { xs: [x.to_vec(), x2, x3, x4], u }
}

impl Step for Rk4 {
    fn name(&self) -> String {
        "rk4".into()
    }
    fn step(&self, at: &StepAt<'_>, x: &[f64]) -> Vec<f64> {
        let StepAt { sys, pv, t, h } = *at;
        let mut y = rk4_stages(sys, pv, t, h, x).u;
        sys.normalize_quaternions(&mut y);
        y
    }
}

impl StepVjp for Rk4 {
    fn step_vjp(&self, at: &StepAt<'_>, x: &[f64], y_bar: &[f64], p_bar: &mut [f64]) -> Vec<f64> {
        let StepAt { sys, pv, t, h } = *at;
        let st = rk4_stages(sys, pv, t, h, x);
        let mut u_bar = y_bar.to_vec();
        sys.normalize_quaternions_vjp(&st.u, &mut u_bar);
        let mut x_bar = u_bar.clone();
        // k̄ of each stage from u = x + h/6 (k1 + 2k2 + 2k3 + k4), then back through the stages:
        // stage s input x_s = x + c_s h k_{s-1}.
        let weights = [h / 6.0, h / 3.0, h / 3.0, h / 6.0];
        let times = [t, t + 0.5 * h, t + 0.5 * h, t + h];
        let coupling = [0.0, 0.5 * h, 0.5 * h, h];
        let mut k_bar: Vec<f64> = u_bar.iter().map(|v| weights[3] * v).collect();
        for s in (0..4).rev() {
            let mut xs_bar = vec![0.0; x.len()];
            sys.rhs_vjp(&st.xs[s], &sys.ctx(pv, times[s]), &k_bar, &mut xs_bar, p_bar);
            x_bar.iter_mut().zip(&xs_bar).for_each(|(a, b)| *a += b);
            if s > 0 {
                k_bar = (0..x.len())
                    .map(|i| weights[s - 1] * u_bar[i] + coupling[s] * xs_bar[i])
                    .collect();
            }
        }
        x_bar
    }
}

/// Velocity Verlet (kick–drift–kick), second order and symplectic for conservative forces.
#[derive(Debug, Clone, Copy, Default)]
pub struct VelocityVerlet;

struct VerletStages {
    u_q: Vec<f64>,
    x_mid: Vec<f64>,
}

fn verlet_stages(sys: &System, pv: &ParamValues, t: f64, h: f64, x: &[f64]) -> VerletStages {
    let l = sys.layout();
    let a0 = sys.accelerations(x, &sys.ctx(pv, t));
    let mut x_mid = x.to_vec();
    for i in 0..l.n {
        for d in 0..3 {
            let vh = x[l.v(i) + d] + 0.5 * h * a0[i][d];
            x_mid[l.v(i) + d] = vh;
            x_mid[l.r(i) + d] = x[l.r(i) + d] + h * vh;
            x_mid[l.w(i) + d] = x[l.w(i) + d] + 0.5 * h * a0[i][3 + d];
        }
        let q = [x[l.q(i)], x[l.q(i) + 1], x[l.q(i) + 2], x[l.q(i) + 3]];
        let qd = quat_rate(&l.get3(&x_mid, l.w(i)), &q);
        (0..4).for_each(|d| x_mid[l.q(i) + d] = q[d] + h * qd[d]);
    }
    let u_q = x_mid.clone();
    sys.normalize_quaternions(&mut x_mid);
    VerletStages { u_q, x_mid }
}

impl Step for VelocityVerlet {
    fn name(&self) -> String {
        "velocity_verlet".into()
    }
    fn step(&self, at: &StepAt<'_>, x: &[f64]) -> Vec<f64> {
        let StepAt { sys, pv, t, h } = *at;
        let l = sys.layout();
        let st = verlet_stages(sys, pv, t, h, x);
        let a1 = sys.accelerations(&st.x_mid, &sys.ctx(pv, t + h));
        let mut y = st.x_mid;
        for i in 0..l.n {
            for d in 0..3 {
                y[l.v(i) + d] += 0.5 * h * a1[i][d];
                y[l.w(i) + d] += 0.5 * h * a1[i][3 + d];
            }
        }
        y
    }
}

impl StepVjp for VelocityVerlet {
    fn step_vjp(&self, at: &StepAt<'_>, x: &[f64], y_bar: &[f64], p_bar: &mut [f64]) -> Vec<f64> {
        let StepAt { sys, pv, t, h } = *at;
        let l = sys.layout();
        let st = verlet_stages(sys, pv, t, h, x);
        // y = x_mid except v' = v½ + h/2 a1(x_mid), ω' = ω½ + h/2 α1(x_mid).
        let mut mid_bar = y_bar.to_vec();
        let a1_bar: Vec<[f64; 6]> = (0..l.n)
            .map(|i| {
                std::array::from_fn(|d| {
                    if d < 3 {
                        0.5 * h * y_bar[l.v(i) + d]
                    } else {
                        0.5 * h * y_bar[l.w(i) + d - 3]
                    }
                })
            })
            .collect();
        sys.accelerations_vjp(&st.x_mid, &sys.ctx(pv, t + h), &a1_bar, &mut mid_bar, p_bar);
        // x_mid = (r + h v½, v½, N(q + h q̇(ω½, q)), ω½).
        sys.normalize_quaternions_vjp(&st.u_q, &mut mid_bar);
        let mut x_bar = vec![0.0; x.len()];
        let mut a0_bar = vec![[0.0; 6]; l.n];
        for i in 0..l.n {
            let q = [x[l.q(i)], x[l.q(i) + 1], x[l.q(i) + 2], x[l.q(i) + 3]];
            let uq_bar: [f64; 4] = std::array::from_fn(|d| mid_bar[l.q(i) + d]);
            let qd_bar = uq_bar.map(|v| h * v);
            let (w_bar, q_bar) = quat_rate_vjp(&l.get3(&st.x_mid, l.w(i)), &q, &qd_bar);
            (0..4).for_each(|d| x_bar[l.q(i) + d] = uq_bar[d] + q_bar[d]);
            for d in 0..3 {
                let r_bar = mid_bar[l.r(i) + d];
                let vh_bar = mid_bar[l.v(i) + d] + h * r_bar;
                let wh_bar = mid_bar[l.w(i) + d] + w_bar[d];
                x_bar[l.r(i) + d] = r_bar;
                x_bar[l.v(i) + d] = vh_bar;
                x_bar[l.w(i) + d] = wh_bar;
                a0_bar[i][d] = 0.5 * h * vh_bar;
                a0_bar[i][3 + d] = 0.5 * h * wh_bar;
            }
        }
        sys.accelerations_vjp(x, &sys.ctx(pv, t), &a0_bar, &mut x_bar, p_bar);
        x_bar
    }
}

/// Wraps a black-box [`Step`] (no VJP available) and approximates its VJP by central finite
/// differences: for every input entry z_j (state and parameters),
/// z̄_j ≈ ȳ · (S(z + δ_j e_j) − S(z − δ_j e_j)) / (2 δ_j), δ_j = `rel_step` · max(|z_j|, 1).
///
/// **Approximate**: truncation error O(δ²) plus rounding O(ε_mach/δ) per entry (about 1e-10
/// relative at the default δ = 1e-5 for smooth steps), and 2(13n + n_p) step evaluations per
/// VJP. The gradient is therefore not exact to rounding; use it when the step is truly a black
/// box, and prefer a hand-written [`StepVjp`].
#[derive(Debug, Clone, Copy)]
pub struct FiniteDifferenceVjp<S> {
    /// The black-box step.
    pub inner: S,
    /// Relative perturbation size δ.
    pub rel_step: f64,
}

impl<S: Step> FiniteDifferenceVjp<S> {
    /// Wraps `inner` with δ = 1e-5.
    pub fn new(inner: S) -> Self {
        Self { inner, rel_step: 1e-5 }
    }
}

impl<S: Step> Step for FiniteDifferenceVjp<S> {
    fn name(&self) -> String {
        format!("fd_vjp({})", self.inner.name())
    }
    fn step(&self, at: &StepAt<'_>, x: &[f64]) -> Vec<f64> {
        self.inner.step(at, x)
    }
}

impl<S: Step> StepVjp for FiniteDifferenceVjp<S> {
    fn step_vjp(&self, at: &StepAt<'_>, x: &[f64], y_bar: &[f64], p_bar: &mut [f64]) -> Vec<f64> {
        let pv = at.pv;
        let dot = |a: &[f64], b: &[f64]| -> f64 {
            a.iter().zip(b).zip(y_bar).map(|((p, m), w)| w * (p - m)).sum()
        };
        let mut x_bar = vec![0.0; x.len()];
        let mut xp = x.to_vec();
        for j in 0..x.len() {
            let d = self.rel_step * x[j].abs().max(1.0);
            xp[j] = x[j] + d;
            let yp = self.inner.step(at, &xp);
            xp[j] = x[j] - d;
            let ym = self.inner.step(at, &xp);
            xp[j] = x[j];
            x_bar[j] = dot(&yp, &ym) / (2.0 * d);
        }
        let mut pp = pv.clone();
        for (j, pb) in p_bar.iter_mut().enumerate() {
            let d = self.rel_step * pv.p[j].abs().max(1.0);
            pp.p[j] = pv.p[j] + d;
            let yp = self.inner.step(&StepAt { pv: &pp, ..*at }, x);
            pp.p[j] = pv.p[j] - d;
            let ym = self.inner.step(&StepAt { pv: &pp, ..*at }, x);
            pp.p[j] = pv.p[j];
            *pb += dot(&yp, &ym) / (2.0 * d);
        }
        x_bar
    }
}
