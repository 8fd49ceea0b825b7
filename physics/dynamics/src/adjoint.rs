//! Simulation, objectives, and the discrete adjoint with checkpointing.
//!
//! The objective is a sum over the computed states, J = Σ_{k=0}^{N} J_k(x_k, p) (a misfit
//! summed over steps, a final-state term, or both). The discrete adjoint runs the steps
//! backwards:
//!
//! λ_N = ∂J_N/∂x_N,   λ_k = (∂S_k/∂x_k)ᵀ λ_{k+1} + ∂J_k/∂x_k,
//! dJ/dp = Σ_k (∂S_k/∂p)ᵀ λ_{k+1} + Σ_k ∂J_k/∂p,   dJ/dx_0 = λ_0,
//!
//! where S_k is the integrator step actually taken, so the gradient is that of the computed
//! trajectory, exact to rounding (Taylor rate 2, agreement with finite differences).
//!
//! Memory ([`Memory`]):
//! - **store all**: keep x_0 … x_N (N+1 states);
//! - **binomial** (Griewank's Revolve idea): keep at most `snapshots` states; the reverse sweep
//!   recomputes the states it needs from the nearest checkpoint. The schedule is the binomial
//!   recursion: with s stored states available (the start of the range included) and r
//!   recomputations allowed, β(s, r) = C(s + r, s) steps can be reversed, and
//!   β(s, r) = β(s − 1, r) + β(s, r − 1) splits a range into a right part reversed first with
//!   one more checkpoint at its start and s − 1 slots, and a left part with s slots and r − 1
//!   recomputations. Recomputed states are bitwise equal to the first forward pass, so the
//!   gradient is bitwise equal to store-all;
//! - **truncated** backpropagation over windows of S steps: an explicit **approximation**: at
//!   every window boundary k = jS (k > 0) the adjoint arriving from later steps is dropped,
//!   λ_k ← ∂J_k/∂x_k. Parameter gradients then only see the effect of a parameter within the
//!   window where it acts; dJ/dx_0 only sees the first window. Exact when S ≥ N; the error
//!   decays with S for dissipative systems and need not for conservative ones.

use gradfem_solvers::checkpoint::{Checkpointing, reverse_sweep};
use gradfem_solvers::params::Gradient;

use crate::error::DynamicsError;
use crate::integrators::{StepAt, StepVjp};
use crate::state::State;
use crate::system::{ParamValues, System};

/// One term J_k(x_k, p) of a summed objective J = Σ_k J_k.
pub trait Objective {
    /// J_k at step k (0 ≤ k ≤ N = `n_steps`) and flat state x; when `grad` is given, adds
    /// ∂J_k/∂x into its first slice and ∂J_k/∂p into its second.
    fn term(
        &self,
        k: usize,
        n_steps: usize,
        x: &[f64],
        pv: &ParamValues,
        grad: Option<(&mut [f64], &mut [f64])>,
    ) -> f64;
}

/// Position misfit summed over steps: J = w/2 Σ_{k ∈ observed} Σ_i |r_i(x_k) − r̂_{k,i}|²,
/// with `observed[k]` the observed positions of all bodies at step k (`None` where nothing was
/// observed).
#[derive(Debug, Clone, PartialEq)]
pub struct PositionMisfit {
    /// Observed positions per step (length N + 1), each n × 3.
    pub observed: Vec<Option<Vec<[f64; 3]>>>,
    /// Weight w.
    pub weight: f64,
}

impl PositionMisfit {
    /// Misfit to a full observed trajectory (every step observed).
    pub fn from_trajectory(traj: &[State], weight: f64) -> Self {
        Self { observed: traj.iter().map(|s| Some(s.position.clone())).collect(), weight }
    }
}

impl Objective for PositionMisfit {
    fn term(
        &self,
        k: usize,
        _n_steps: usize,
        x: &[f64],
        _pv: &ParamValues,
        grad: Option<(&mut [f64], &mut [f64])>,
    ) -> f64 {
        let Some(Some(obs)) = self.observed.get(k) else { return 0.0 };
        let mut j = 0.0;
        let mut g = grad;
        for (i, o) in obs.iter().enumerate() {
            for d in 0..3 {
                let e = x[3 * i + d] - o[d];
                j += 0.5 * self.weight * e * e;
                if let Some((xb, _)) = g.as_mut() {
                    xb[3 * i + d] += self.weight * e;
                }
            }
        }
        j
    }
}

/// Final-state objective J = ½ Σ_j w_j (x_N,j − x̂_j)² with weights and target given as
/// states (zero weight ignores a component).
#[derive(Debug, Clone, PartialEq)]
pub struct FinalState {
    /// Target x̂.
    pub target: State,
    /// Weights w (same shapes).
    pub weight: State,
}

impl Objective for FinalState {
    fn term(
        &self,
        k: usize,
        n_steps: usize,
        x: &[f64],
        _pv: &ParamValues,
        grad: Option<(&mut [f64], &mut [f64])>,
    ) -> f64 {
        if k != n_steps {
            return 0.0;
        }
        let (t, w) = (self.target.to_flat(), self.weight.to_flat());
        let mut g = grad;
        let mut j = 0.0;
        for i in 0..x.len() {
            let e = x[i] - t[i];
            j += 0.5 * w[i] * e * e;
            if let Some((xb, _)) = g.as_mut() {
                xb[i] += w[i] * e;
            }
        }
        j
    }
}

/// Sum of two objectives.
pub struct Sum<A, B>(pub A, pub B);

impl<A: Objective, B: Objective> Objective for Sum<A, B> {
    fn term(
        &self,
        k: usize,
        n: usize,
        x: &[f64],
        pv: &ParamValues,
        grad: Option<(&mut [f64], &mut [f64])>,
    ) -> f64 {
        match grad {
            Some((xb, pb)) => {
                self.0.term(k, n, x, pv, Some((&mut *xb, &mut *pb)))
                    + self.1.term(k, n, x, pv, Some((xb, pb)))
            }
            None => self.0.term(k, n, x, pv, None) + self.1.term(k, n, x, pv, None),
        }
    }
}

/// How the reverse sweep gets the states it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// Keep all N + 1 states.
    StoreAll,
    /// Binomial checkpointing with at most this many stored states (≥ 1; x_0 counts).
    Binomial {
        /// Maximum number of stored states.
        snapshots: usize,
    },
    /// Truncated backpropagation over windows of this many steps (an approximation; see the
    /// module docs). States are recomputed from at most `window` binomial checkpoints.
    Truncated {
        /// Window length S ≥ 1.
        window: usize,
    },
}

/// Counts of a reverse sweep (forward steps including recomputations, adjoint steps, peak
/// number of stored states).
pub use gradfem_solvers::checkpoint::SweepStats;

/// Result of [`Simulation::gradient`].
#[derive(Debug, Clone, PartialEq)]
pub struct AdjointResult {
    /// J.
    pub value: f64,
    /// dJ/dp for every registered parameter, in the registry's shapes.
    pub params: Gradient,
    /// dJ/dx_0 in the state's shapes.
    pub initial_state: State,
    /// How the sweep went.
    pub stats: SweepStats,
}

/// A simulation: system, integrator, fixed step `dt`, `n_steps` steps from `t0`.
///
/// # Numerical safety
///
/// With [`Simulation::check_finite`] on (opt-in, [`Simulation::with_finite_check`]) every
/// state x_{k+1} is scanned after its step and every adjoint λ_k after its VJP, and the first
/// NaN or ±∞ ends the run with [`DynamicsError::NonFiniteState`] /
/// [`DynamicsError::NonFiniteAdjoint`], naming the step, the body and the field. The scan is
/// one pass over the 13n numbers of the state per step (and one over λ per adjoint step),
/// against the force evaluations of a step itself: measured 3–10 % on a 4-particle spring
/// chain whose whole step costs about 2 µs (`examples/bench_memory.rs --check-finite`), less
/// for systems with more force laws per body. Off (the default), a NaN runs on
/// silently: the states that follow and J are NaN, which an optimizer reports as a failed start
/// or line search, without saying where it came from.
pub struct Simulation<'a, I> {
    /// The system (forces, bodies, parameters).
    pub system: &'a System,
    /// The integrator.
    pub integrator: I,
    /// Step size h.
    pub dt: f64,
    /// Number of steps N.
    pub n_steps: usize,
    /// Start time.
    pub t0: f64,
    /// Whether to scan every state and adjoint for NaN/∞ (see "Numerical safety").
    pub check_finite: bool,
}

/// The first non-finite entry of `x`: (index, value).
fn first_non_finite(x: &[f64]) -> Option<(usize, f64)> {
    x.iter().position(|v| !v.is_finite()).map(|c| (c, x[c]))
}

impl<'a, I: StepVjp> Simulation<'a, I> {
    /// A simulation starting at t = 0.
    pub fn new(system: &'a System, integrator: I, dt: f64, n_steps: usize) -> Self {
        Self { system, integrator, dt, n_steps, t0: 0.0, check_finite: false }
    }

    /// Turns the per-step NaN/∞ scan on or off (builder style).
    pub fn with_finite_check(mut self, on: bool) -> Self {
        self.check_finite = on;
        self
    }

    fn check_adjoint(&self, k: usize, lam: &[f64]) -> Result<(), DynamicsError> {
        if !self.check_finite {
            return Ok(());
        }
        match first_non_finite(lam) {
            None => Ok(()),
            Some((c, value)) => {
                let l = self.system.layout();
                let (body, field) = l.body_field(c);
                Err(DynamicsError::NonFiniteAdjoint {
                    step: k,
                    body,
                    field,
                    component: c,
                    name: l.component_name(c),
                    value,
                })
            }
        }
    }

    fn time(&self, k: usize) -> f64 {
        self.t0 + k as f64 * self.dt
    }

    fn at<'b>(&'b self, pv: &'b ParamValues, k: usize) -> StepAt<'b> {
        StepAt { sys: self.system, pv, t: self.time(k), h: self.dt }
    }

    fn advance(&self, pv: &ParamValues, k: usize, x: &[f64]) -> Result<Vec<f64>, DynamicsError> {
        if gradfem_solvers::interrupt::requested() {
            return Err(DynamicsError::Interrupted { sweep: "forward", step: k });
        }
        let y = self.integrator.step(&self.at(pv, k), x);
        if self.check_finite
            && let Some((c, value)) = first_non_finite(&y)
        {
            let l = self.system.layout();
            let (body, field) = l.body_field(c);
            return Err(DynamicsError::NonFiniteState {
                step: k,
                time: self.time(k),
                body,
                field,
                component: c,
                name: l.component_name(c),
                value,
            });
        }
        Ok(y)
    }

    fn start(&self, x0: &State) -> Result<(ParamValues, Vec<f64>), DynamicsError> {
        assert_eq!(
            x0.n_bodies(),
            self.system.n_bodies(),
            "initial state has {} bodies, the system {}",
            x0.n_bodies(),
            self.system.n_bodies()
        );
        let pv = self.system.param_values();
        self.system.check(&pv)?;
        Ok((pv, x0.to_flat()))
    }

    /// Runs the simulation and returns all N + 1 states.
    pub fn run(&self, x0: &State) -> Result<Vec<State>, DynamicsError> {
        let (pv, mut x) = self.start(x0)?;
        let mut out = vec![State::from_flat(&x)];
        for k in 0..self.n_steps {
            x = self.advance(&pv, k, &x)?;
            out.push(State::from_flat(&x));
        }
        Ok(out)
    }

    /// J = Σ_k J_k(x_k) along the computed trajectory.
    pub fn objective(&self, x0: &State, obj: &impl Objective) -> Result<f64, DynamicsError> {
        let (pv, mut x) = self.start(x0)?;
        let mut j = obj.term(0, self.n_steps, &x, &pv, None);
        for k in 0..self.n_steps {
            x = self.advance(&pv, k, &x)?;
            j += obj.term(k + 1, self.n_steps, &x, &pv, None);
        }
        Ok(j)
    }

    /// J and its discrete adjoint gradient with respect to the parameters and the initial
    /// state (module docs), with the given memory strategy.
    pub fn gradient(
        &self,
        x0: &State,
        obj: &impl Objective,
        memory: Memory,
    ) -> Result<AdjointResult, DynamicsError> {
        let (pv, x0f) = self.start(x0)?;
        let n = self.n_steps;
        let window = match memory {
            Memory::Truncated { window } => {
                assert!(window >= 1, "Memory::Truncated: window must be ≥ 1");
                Some(window)
            }
            _ => None,
        };
        let checkpointing = match memory {
            Memory::Binomial { snapshots } => {
                assert!(snapshots >= 1, "Memory::Binomial: snapshots must be ≥ 1");
                Checkpointing::Binomial { snapshots }
            }
            Memory::StoreAll => Checkpointing::StoreAll,
            // Truncation limits how far λ travels back; the states themselves are recomputed
            // from binomial checkpoints, so memory stays at `window` states as well.
            Memory::Truncated { window } => {
                Checkpointing::Binomial { snapshots: window.min(n.max(1)) }
            }
        };
        let mut j = obj.term(0, n, &x0f, &pv, None);
        let mut p_bar = vec![0.0; pv.p.len()];
        let mut lam = vec![0.0; x0f.len()];
        if n == 0 {
            obj.term(0, 0, &x0f, &pv, Some((&mut lam, &mut p_bar)));
            self.check_adjoint(0, &lam)?;
        }
        // The first pass (steps 0, 1, … in order) adds the objective's terms; recomputations
        // from checkpoints do not.
        let mut first_pass = 0;
        let stats = reverse_sweep(
            n,
            &x0f,
            checkpointing,
            |k, x: &Vec<f64>| {
                let next = self.advance(&pv, k, x)?;
                if k == first_pass {
                    first_pass += 1;
                    j += obj.term(k + 1, n, &next, &pv, None);
                }
                Ok(next)
            },
            |k, xk: &Vec<f64>, xnext: &Vec<f64>| {
                if k + 1 == n {
                    // Seed λ_n from the last term.
                    obj.term(n, n, xnext, &pv, Some((&mut lam, &mut p_bar)));
                    self.check_adjoint(n, &lam)?;
                }
                if gradfem_solvers::interrupt::requested() {
                    return Err(DynamicsError::Interrupted { sweep: "adjoint", step: k });
                }
                // One adjoint step: λ_k from λ_{k+1}, given x_k.
                lam = self.integrator.step_vjp(&self.at(&pv, k), xk, &lam, &mut p_bar);
                if window.is_some_and(|s| k > 0 && k.is_multiple_of(s)) {
                    lam.iter_mut().for_each(|v| *v = 0.0);
                }
                obj.term(k, n, xk, &pv, Some((&mut lam, &mut p_bar)));
                self.check_adjoint(k, &lam)
            },
        )?;
        tracing::debug!(j, ?stats, "dynamics adjoint done");
        Ok(AdjointResult {
            value: j,
            params: pv.to_gradient(&self.system.registry, &p_bar),
            initial_state: State::from_flat(&lam),
            stats,
        })
    }
}
