//! Transient heat conduction ρc ∂T/∂t − ∇·(k∇T) = Q and its exact discrete adjoint.
//!
//! Semi-discrete form M dU/dt + R(U) = 0 on the free temperatures U, with the steady residual R
//! of [`ThermalModel`] and the mass matrix M_ab = Σₑ ∫ ρcₑ N_a N_b dΩ (consistent, or lumped by
//! the HRZ rule: the element diagonal scaled to the element's total mass, which stays positive on
//! P2 cells where row sums do not). Fixed temperatures hold at every step; they are constant in
//! time, so the mass couplings to fixed nodes cancel (M_fc (T_c − T_c) = 0).
//!
//! Every step k (U^k → U^{k+1}, fixed step Δt) solves
//!
//! F_k(U^{k+1}) = M (a₀ U^{k+1} + a₁ U^k + a₂ U^{k−1}) / Δt + θ R(U^{k+1}) + (1 − θ) R(U^k) = 0,
//!
//! - θ-scheme ([`TimeScheme::Theta`]; implicit Euler θ = 1, Crank–Nicolson θ = ½): a = (1, −1, 0);
//! - BDF2: a = (3/2, −2, 1/2), θ = 1, started by one implicit-Euler step (a = (1, −1, 0)).
//!
//! With a constant conductivity R is affine and one factorization of A = a₀ M/Δt + θK serves
//! every step (two for BDF2: the start step has its own a₀), forward and adjoint (A is
//! symmetric: Cholesky). With k(T) each step runs Newton with A(U) = a₀ M/Δt + θ K(U), LU.
//!
//! Objective J = Σ_{n=0}^{N} j_n(T^n, X) ([`TimeObjective`]). Discrete adjoint (reverse over k,
//! Ū^{k+1} the accumulated ∂J/∂U^{k+1}, μ the step multiplier):
//!
//! Aᵀ μ = Ū^{k+1},   Ū^k += −a₁ M μ/Δt − (1 − θ) K(U^k)ᵀ μ,   Ū^{k−1} += −a₂ M μ/Δt,
//! p̄ −= θ (∂R/∂p)ᵀ|_{k+1} μ + (1 − θ) (∂R/∂p)ᵀ|_k μ + μᵀ (∂M/∂p) (a₀U^{k+1} + a₁U^k + a₂U^{k−1})/Δt,
//!
//! and the initial temperature receives Ū^0. ∂M/∂ρcₑ is the element mass at ρc = 1, and
//! ∂(det J)/∂X_bi = det J (∇N_b)ᵢ gives μᵀ ∂M/∂X_bi w = Σ_q w_q det J ρc μ(x_q) w(x_q) (∇N_b)ᵢ.
//! States are held or recomputed by [`gradfem_solvers::checkpoint`] (store all or binomial):
//! recomputed steps are bitwise those of the first pass, so both give the same gradient.
//!
//! Step sizes are fixed (Δt) or a given sequence Δt_k (θ-schemes), e.g. the one chosen by
//! [`TransientProblem::adapt_steps`] (step doubling); the gradient is that of the run with the
//! step sizes held fixed, and a linear problem refactors only when Δt changes.
//!
//! Hessian-vector products through the steps (the tangent-linear model and the second-order
//! adjoint) are in [`second_order`].
//!
//! This module lives in the facade because it assembles and solves (field crates know nothing of
//! solvers); the mass-matrix element kernel is the thermal model's
//! (`ThermalModel::element_mass_into`).

use std::cell::RefCell;

use gradfem_mesh::geometry;
use gradfem_solvers::assembly::AssemblyPattern;
use gradfem_solvers::checkpoint::{Checkpointing, SweepStats, reverse_sweep};
use gradfem_solvers::error::SolverError;
use gradfem_solvers::linear::{CholeskySolver, LinearSolver, LuSolver};
use gradfem_solvers::sparse::CsrMatrix;
use rayon::prelude::*;
use thiserror::Error;

use gradfem_thermal::model::{HeatBalance, MAX_NODES, ThermalError, ThermalModel, VjpRequest};
use gradfem_thermal::objective::{ObjectiveEval, ObjectiveKind, ObjectiveTerm, evaluate};

pub mod second_order;
pub use second_order::{StateSeeds, TransientDirection};

/// Time integrator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TimeScheme {
    /// θ-scheme with θ ∈ [½, 1] (unconditionally stable range).
    Theta {
        /// Implicitness θ.
        theta: f64,
    },
    /// Second-order backward differentiation, started by one implicit-Euler step.
    Bdf2,
}

impl TimeScheme {
    /// Implicit (backward) Euler, θ = 1: first order, L-stable.
    pub const IMPLICIT_EULER: TimeScheme = TimeScheme::Theta { theta: 1.0 };
    /// Crank–Nicolson, θ = ½: second order, A-stable (not L-stable).
    pub const CRANK_NICOLSON: TimeScheme = TimeScheme::Theta { theta: 0.5 };

    /// Coefficients (a₀, a₁, a₂, θ) of step k (module docs).
    pub fn coefficients(self, k: usize) -> [f64; 4] {
        match self {
            TimeScheme::Theta { theta } => [1.0, -1.0, 0.0, theta],
            TimeScheme::Bdf2 if k == 0 => [1.0, -1.0, 0.0, 1.0],
            TimeScheme::Bdf2 => [1.5, -2.0, 0.5, 1.0],
        }
    }
}

/// Mass matrix form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MassKind {
    /// M_ab = ∫ ρc N_a N_b.
    Consistent,
    /// HRZ lumping: diagonal M_aa ∫ρc / Σ_b M_bb per element (positive on P2 cells).
    Lumped,
}

/// Time-stepping data of a transient problem.
#[derive(Clone, Debug, PartialEq)]
pub struct TransientSpec {
    /// Volumetric heat capacity ρc [J/(m³·K)] of each region of the model, in region order.
    pub heat_capacity: Vec<f64>,
    /// Time step Δt \[s\] (fixed).
    pub dt: f64,
    /// Number of steps N (the final time is N Δt).
    pub n_steps: usize,
    /// Time integrator.
    pub scheme: TimeScheme,
    /// Mass matrix form.
    pub mass: MassKind,
}

/// Errors of a transient run.
#[derive(Debug, Error)]
pub enum TransientError {
    #[error(transparent)]
    Thermal(#[from] ThermalError),
    /// A linear solve of the step from t_k (`step` = k) to `time` failed; shown 1-based.
    #[error("transient thermal, time step {} (to t = {time:.6e} s): {source}", step + 1)]
    Solver { step: usize, time: f64, source: SolverError },
    /// Newton did not converge in the step from t_k (`step` = k) to `time`; shown 1-based,
    /// with ‖F‖₂ of every iterate.
    #[error(
        "transient thermal, time step {} (to t = {time:.6e} s): Newton did not converge in {iterations} iterations (residual {residual:.3e}, initial {initial:.3e}); residual norms: [{}]",
        step + 1,
        residuals.iter().map(|r| format!("{r:.3e}")).collect::<Vec<_>>().join(", ")
    )]
    NoConvergence {
        step: usize,
        time: f64,
        iterations: usize,
        residual: f64,
        initial: f64,
        residuals: Vec<f64>,
    },
    #[error("transient thermal: {what} must be {requirement}, got {value}")]
    InvalidValue { what: String, requirement: &'static str, value: f64 },
    #[error("transient thermal: {0}")]
    Unsupported(&'static str),
}

/// Where a term of a time objective is evaluated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepInfo {
    /// Step index n (0 = the initial state).
    pub step: usize,
    /// Number of steps N.
    pub n_steps: usize,
    /// Time t_n.
    pub time: f64,
    /// The step that ends at state n (0 for n = 0).
    pub dt_before: f64,
    /// The step that starts at state n (0 for n = N).
    pub dt_after: f64,
}

/// A time-summed objective J = Σ_n j_n(T^n, X).
pub trait TimeObjective: Sync {
    /// j_n with ∂j_n/∂T (and ∂j_n/∂X when `with_coords`) at nodal temperatures `t`, or `None`
    /// when step n contributes nothing.
    fn eval(
        &self,
        model: &ThermalModel,
        at: StepInfo,
        t: &[f64],
        with_coords: bool,
    ) -> Result<Option<ObjectiveEval>, ThermalError>;
}

/// Weights w_n of a time sum Σ_n w_n j(T^n).
#[derive(Clone, Debug, PartialEq)]
pub enum StepWeights {
    /// Only the final state: w_N = 1.
    Final,
    /// Every state: w_n = 1.
    EveryStep,
    /// Trapezoidal rule for ∫₀^{t_N} j dt: w_n = (Δt_{n−1} + Δt_n)/2 (Δt/2 at both ends).
    Trapezoid,
    /// Given weights, one per state (length N + 1).
    Custom(Vec<f64>),
}

impl StepWeights {
    /// w_n.
    pub fn weight(&self, at: StepInfo) -> f64 {
        match self {
            StepWeights::Final => f64::from(u8::from(at.step == at.n_steps)),
            StepWeights::EveryStep => 1.0,
            StepWeights::Trapezoid => 0.5 * (at.dt_before + at.dt_after),
            StepWeights::Custom(w) => {
                assert_eq!(w.len(), at.n_steps + 1, "one weight per state (N + 1)");
                w[at.step]
            }
        }
    }
}

/// J = Σ_n w_n j(T^n) with j a weighted sum of steady objective terms.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightedTerms {
    /// The steady terms j.
    pub terms: Vec<ObjectiveTerm>,
    /// The time weights w_n.
    pub weights: StepWeights,
}

impl TimeObjective for WeightedTerms {
    fn eval(
        &self,
        model: &ThermalModel,
        at: StepInfo,
        t: &[f64],
        with_coords: bool,
    ) -> Result<Option<ObjectiveEval>, ThermalError> {
        let w = self.weights.weight(at);
        if w == 0.0 {
            return Ok(None);
        }
        let mut e = evaluate(model, &self.terms, t, with_coords)?;
        scale_eval(&mut e, w);
        Ok(Some(e))
    }
}

/// The misfit of sensor temperature histories: J = w/2 Σ_n Σ_s (T^n(x_s) − d_s^n)² over the
/// steps where data are given.
#[derive(Clone, Debug, PartialEq)]
pub struct SensorHistory {
    /// Sensor positions x_s.
    pub points: Vec<[f64; 3]>,
    /// Measured d_s^n per state n (length N + 1; `None` where nothing was measured), one value
    /// per sensor.
    pub data: Vec<Option<Vec<f64>>>,
    /// Weight w.
    pub weight: f64,
}

impl TimeObjective for SensorHistory {
    fn eval(
        &self,
        model: &ThermalModel,
        at: StepInfo,
        t: &[f64],
        with_coords: bool,
    ) -> Result<Option<ObjectiveEval>, ThermalError> {
        let Some(Some(d)) = self.data.get(at.step) else { return Ok(None) };
        assert_eq!(d.len(), self.points.len(), "one measured value per sensor");
        let sensors = self.points.iter().zip(d).map(|(p, &v)| [p[0], p[1], p[2], v]).collect();
        let term = ObjectiveTerm { weight: self.weight, kind: ObjectiveKind::Misfit { sensors } };
        Ok(Some(evaluate(model, &[term], t, with_coords)?))
    }
}

fn scale_eval(e: &mut ObjectiveEval, w: f64) {
    e.value *= w;
    e.d_temperature.iter_mut().for_each(|v| *v *= w);
    if let Some(c) = &mut e.d_coords {
        c.iter_mut().flatten().for_each(|v| *v *= w);
    }
}

/// The state carried from step to step: U^k, and U^{k−1} for BDF2 after its first step.
#[derive(Clone, Debug, PartialEq)]
pub struct TimeState {
    /// Free temperatures U^k.
    pub u: Vec<f64>,
    /// U^{k−1} (BDF2 only).
    pub u_prev: Option<Vec<f64>>,
}

/// Settings of [`TransientProblem::adapt_steps`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptParams {
    /// Final time.
    pub t_end: f64,
    /// Largest accepted local error estimate per step (max norm, K).
    pub tolerance: f64,
    /// First step size tried.
    pub dt_initial: f64,
    /// Smallest step size (a step at this size is accepted whatever its error).
    pub dt_min: f64,
    /// Largest step size.
    pub dt_max: f64,
}

/// What [`TransientProblem::adapt_steps`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AdaptInfo {
    /// Accepted step pairs (each gives two steps of the sequence).
    pub accepted: usize,
    /// Rejected attempts.
    pub rejected: usize,
    /// Largest error estimate of an accepted step.
    pub max_error: f64,
    /// Numeric factorizations.
    pub factorizations: usize,
}

/// Result of a forward run.
#[derive(Clone, Debug, PartialEq)]
pub struct Trajectory {
    /// Times t_0 = 0 … t_N.
    pub times: Vec<f64>,
    /// Nodal temperatures T^0 … T^N.
    pub temperatures: Vec<Vec<f64>>,
    /// Total Newton iterations (N for a linear problem).
    pub newton_iterations: usize,
    /// Number of numeric factorizations.
    pub factorizations: usize,
}

/// dJ/dp of a transient run, for every parameter kind.
#[derive(Clone, Debug, PartialEq)]
pub struct TransientGradient {
    /// J.
    pub value: f64,
    /// Per volume element: dJ/dk₀ₑ.
    pub k_elem: Vec<f64>,
    /// Per region: dJ/dk₀ (the sum over its elements).
    pub k_region: Vec<f64>,
    /// Per region: dJ/dQ.
    pub source: Vec<f64>,
    /// Per boundary condition: dJ/dh (convection), dJ/dT∞, dJ/dq_in, dJ/dT_fixed.
    pub h: Vec<f64>,
    /// See `h`.
    pub t_inf: Vec<f64>,
    /// See `h`.
    pub q_in: Vec<f64>,
    /// See `h`.
    pub temperature: Vec<f64>,
    /// Per volume element: dJ/dρcₑ.
    pub heat_capacity_elem: Vec<f64>,
    /// Per region: dJ/dρc.
    pub heat_capacity: Vec<f64>,
    /// Per node: dJ/dT⁰ (zero at fixed nodes, whose initial value is the fixed one).
    pub initial: Vec<f64>,
    /// Per quadrature point of the volume elements: dJ/dQ of the external source (the Joule
    /// heat of an electrical field upstream), held constant in time; empty without one.
    pub external_source: Vec<f64>,
    /// Per node: dJ/dX (when requested).
    pub coords: Option<Vec<[f64; 3]>>,
    /// Work and memory of the reverse sweep.
    pub stats: SweepStats,
}

impl TransientGradient {
    /// All zeros for `model` (with a zero coordinate gradient when `coords`).
    pub fn zeros(model: &ThermalModel, coords: bool) -> Self {
        let n_vol = model.n_volume_elements();
        let n_bc = model.boundaries.len();
        let n_regions = model.regions.len();
        TransientGradient {
            value: 0.0,
            k_elem: vec![0.0; n_vol],
            k_region: vec![0.0; n_regions],
            source: vec![0.0; n_regions],
            h: vec![0.0; n_bc],
            t_inf: vec![0.0; n_bc],
            q_in: vec![0.0; n_bc],
            temperature: vec![0.0; n_bc],
            heat_capacity_elem: vec![0.0; n_vol],
            heat_capacity: vec![0.0; n_regions],
            initial: vec![0.0; model.n_nodes()],
            external_source: match model.external_source() {
                Some(q) => vec![0.0; q.len()],
                None => Vec::new(),
            },
            coords: coords.then(|| vec![[0.0; 3]; model.n_nodes()]),
            stats: SweepStats::default(),
        }
    }

    /// Subtract a vector-Jacobian product of the steady residual, kind by kind.
    fn subtract_parameter_vjp(&mut self, v: &gradfem_thermal::ParameterVjp) {
        sub_into(&mut self.k_elem, &v.k_elem);
        sub_into(&mut self.source, &v.source);
        sub_into(&mut self.h, &v.h);
        sub_into(&mut self.t_inf, &v.t_inf);
        sub_into(&mut self.q_in, &v.q_in);
        sub_into(&mut self.temperature, &v.temperature);
        if let (Some(c), Some(vc)) = (&mut self.coords, &v.coords) {
            for (a, b) in c.iter_mut().zip(vc) {
                for i in 0..3 {
                    a[i] -= b[i];
                }
            }
        }
    }

    /// The per-region sums of the per-element entries (k₀ and ρc).
    fn sum_regions(&mut self, model: &ThermalModel) {
        for (r, region) in model.regions.iter().enumerate() {
            self.k_region[r] = region.elements.clone().map(|e| self.k_elem[e]).sum();
            self.heat_capacity[r] =
                region.elements.clone().map(|e| self.heat_capacity_elem[e]).sum();
        }
    }
}

/// A transient thermal problem: the steady model, ρc per volume element, the initial
/// temperature and the time stepping.
#[derive(Clone, Debug)]
pub struct TransientProblem {
    /// The steady model (k, Q, boundary conditions, coordinates).
    pub model: ThermalModel,
    /// ρc of each volume element [J/(m³·K)].
    pub rho_c: Vec<f64>,
    /// Initial nodal temperature T⁰ (values at fixed nodes are ignored).
    pub initial: Vec<f64>,
    /// Time step Δt (when `step_sizes` is `None`).
    pub dt: f64,
    /// Number of steps (equal to `step_sizes.len()` when those are given).
    pub n_steps: usize,
    /// Variable step sizes Δt_k, k = 0 … N − 1 (θ-schemes only), as set by
    /// [`TransientProblem::adapt_steps`]; `None` for the fixed step `dt`.
    pub step_sizes: Option<Vec<f64>>,
    /// Integrator.
    pub scheme: TimeScheme,
    /// Mass form.
    pub mass: MassKind,
    /// Newton relative tolerance ‖F‖ ≤ rtol ‖F₀‖ per step (k(T) only); a step also ends when
    /// the update falls below 10⁻¹⁴ of the temperatures (round-off).
    pub newton_rtol: f64,
    /// Newton iteration limit per step.
    pub newton_max_iterations: usize,
    /// What the passes over this problem's run share (off unless the engine turns it on).
    kept: KeptStepper,
}

/// The set-up a [`Stepper`] makes before its first step (assembly pattern, mass matrix,
/// element masses) and the factorizations it made, handed from one pass over a run to the
/// next (the forward run, the gradient, the tangent-linear run, the second-order adjoint) when
/// the problem keeps them ([`TransientProblem::keep_stepper`]). A clone of the problem starts
/// without.
#[derive(Default)]
struct KeptStepper(Option<std::sync::Mutex<Option<StepperParts>>>);

impl Clone for KeptStepper {
    fn clone(&self) -> Self {
        KeptStepper(None)
    }
}

impl std::fmt::Debug for KeptStepper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "KeptStepper(on)" } else { "KeptStepper(off)" })
    }
}

impl TransientProblem {
    /// Set up from a model, the time data and the initial nodal temperature (one per node).
    pub fn new(
        model: ThermalModel,
        spec: &TransientSpec,
        initial: Vec<f64>,
    ) -> Result<Self, TransientError> {
        if spec.heat_capacity.len() != model.regions.len() {
            return Err(TransientError::InvalidValue {
                what: format!(
                    "the number of heat capacities ({} given for {} regions)",
                    spec.heat_capacity.len(),
                    model.regions.len()
                ),
                requirement: "one per region",
                value: spec.heat_capacity.len() as f64,
            });
        }
        for (r, &c) in spec.heat_capacity.iter().enumerate() {
            if !(c.is_finite() && c > 0.0) {
                return Err(TransientError::InvalidValue {
                    what: format!("heat capacity of region '{}'", model.regions[r].name),
                    requirement: "finite and > 0",
                    value: c,
                });
            }
        }
        if !(spec.dt.is_finite() && spec.dt > 0.0) {
            return Err(TransientError::InvalidValue {
                what: "time step".into(),
                requirement: "finite and > 0",
                value: spec.dt,
            });
        }
        if let TimeScheme::Theta { theta } = spec.scheme
            && !(0.5..=1.0).contains(&theta)
        {
            return Err(TransientError::InvalidValue {
                what: "θ".into(),
                requirement: "in [0.5, 1]",
                value: theta,
            });
        }
        assert_eq!(initial.len(), model.n_nodes(), "one initial temperature per node");
        let rho_c = (0..model.n_volume_elements())
            .map(|e| spec.heat_capacity[model.element_region(e)])
            .collect();
        Ok(Self {
            model,
            rho_c,
            initial,
            dt: spec.dt,
            n_steps: spec.n_steps,
            step_sizes: None,
            scheme: spec.scheme,
            mass: spec.mass,
            newton_rtol: 1e-12,
            newton_max_iterations: 30,
            kept: KeptStepper::default(),
        })
    }

    /// Keep the stepper's set-up and factorizations between the passes over this problem's
    /// runs (forward, gradient, products), for a problem that is no longer changed: with a
    /// constant conductivity every pass after the first then factors nothing. Changing the
    /// problem through its methods forgets what was kept; changing its public fields after
    /// this call is a logic error (the kept matrices would be those of the old values).
    pub(crate) fn keep_stepper(&mut self) {
        self.kept = KeptStepper(Some(Default::default()));
    }

    /// Drop what was kept of the stepper (the problem changed).
    fn forget_stepper(&mut self) {
        if let Some(kept) = &self.kept.0 {
            *kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        }
    }

    /// Set ρc of region `r` on all its elements.
    pub fn set_heat_capacity(&mut self, r: usize, value: f64) {
        self.forget_stepper();
        for e in self.model.regions[r].elements.clone() {
            self.rho_c[e] = value;
        }
    }

    /// The element mass matrix of element `e` (row-major nn×nn; zero for facets), added into
    /// `me`, with ρc = `rho_c`.
    pub fn element_mass(&self, e: usize, rho_c: f64, me: &mut [f64]) {
        self.model.element_mass_into(e, rho_c, self.mass == MassKind::Lumped, me);
    }

    /// Δt_k, the size of step k.
    pub fn step_size(&self, k: usize) -> f64 {
        self.step_sizes.as_ref().map_or(self.dt, |s| s[k])
    }

    /// Time t_n of state n.
    pub fn time(&self, n: usize) -> f64 {
        match &self.step_sizes {
            Some(s) => s[..n].iter().sum(),
            None => n as f64 * self.dt,
        }
    }

    fn check_steps(&self) -> Result<(), TransientError> {
        if let Some(s) = &self.step_sizes {
            assert_eq!(s.len(), self.n_steps, "n_steps must equal the number of step sizes");
            if self.scheme == TimeScheme::Bdf2 {
                return Err(TransientError::Unsupported(
                    "variable step sizes with BDF2 (use a θ-scheme)",
                ));
            }
        }
        Ok(())
    }

    /// State n of a run: U^n and, for BDF2 after its first step, U^{n−1} (what
    /// [`Stepper::step`] returns).
    fn stored_state(&self, traj: &Trajectory, n: usize) -> TimeState {
        let gather = |t: &[f64]| self.model.dofs.gather(t);
        TimeState {
            u: gather(&traj.temperatures[n]),
            u_prev: (matches!(self.scheme, TimeScheme::Bdf2) && n >= 1)
                .then(|| gather(&traj.temperatures[n - 1])),
        }
    }

    fn initial_state(&self) -> TimeState {
        TimeState { u: self.model.dofs.gather(&self.initial), u_prev: None }
    }

    /// The heat balance of the last step of `traj` (None before the first step): the fluxes
    /// the step balanced (θ-weighted) and the heat stored at the rate of the scheme's own
    /// difference quotient, so that it closes to the Newton tolerance for every scheme
    /// ([`ThermalModel::transient_heat_balance`]).
    pub fn last_step_heat_balance(&self, traj: &Trajectory) -> Option<HeatBalance> {
        let n = traj.temperatures.len().checked_sub(1).filter(|&n| n >= 1)?;
        let k = n - 1;
        let [a0, a1, a2, theta] = self.scheme.coefficients(k);
        let dt = self.step_size(k);
        let t_new = &traj.temperatures[n];
        let t_old = &traj.temperatures[n - 1];
        let t_older = if a2 != 0.0 && n >= 2 { Some(&traj.temperatures[n - 2]) } else { None };
        let rate: Vec<f64> = (0..t_new.len())
            .map(|i| (a0 * t_new[i] + a1 * t_old[i] + t_older.map_or(0.0, |t| a2 * t[i])) / dt)
            .collect();
        Some(self.model.transient_heat_balance(
            t_new,
            t_old,
            theta,
            &rate,
            &self.rho_c,
            self.mass == MassKind::Lumped,
        ))
    }

    /// Run the forward problem.
    pub fn simulate(&self) -> Result<Trajectory, TransientError> {
        self.check_steps()?;
        let stepper = RefCell::new(Stepper::new(self)?);
        let mut x = self.initial_state();
        let mut temperatures = vec![self.model.nodal_temperature(&x.u)];
        for k in 0..self.n_steps {
            let time = self.time(k);
            gradfem_solvers::interrupt::check("transient thermal", || format!("step {k}"))
                .map_err(|source| TransientError::Solver { step: k, time, source })?;
            x = stepper.borrow_mut().step(k, &x)?;
            temperatures.push(self.model.nodal_temperature(&x.u));
        }
        let s = stepper.into_inner();
        let (newton_iterations, factorizations) = (s.newton_iterations, s.factorizations);
        s.finish();
        Ok(Trajectory {
            times: (0..=self.n_steps).map(|n| self.time(n)).collect(),
            temperatures,
            newton_iterations,
            factorizations,
        })
    }

    /// Choose the step sizes up to `params.t_end` by step doubling (θ-schemes): from each
    /// state, one step of Δt and two of Δt/2; the error of the pair is estimated as
    /// e = ‖U_{Δt/2,Δt/2} − U_Δt‖∞ / (2^p − 1) (p = 2 for Crank–Nicolson, 1 otherwise). The step
    /// is accepted when e ≤ `tolerance` (or Δt/2 reached `dt_min`), keeping the two half steps;
    /// the next Δt is Δt · clamp(0.9 (tol/e)^{1/(p+1)}, 0.2, 2), within [`dt_min`, `dt_max`].
    ///
    /// Sets `step_sizes` and `n_steps` to the accepted half steps: [`Self::simulate`] then
    /// reproduces the accepted trajectory bit for bit, and [`Self::gradient`] differentiates it
    /// with the step sizes held fixed (they are not differentiated: a standard choice, exact for
    /// the discrete map that was run). A linear problem refactors whenever Δt changes.
    ///
    /// [`dt_min`]: AdaptParams::dt_min
    /// [`dt_max`]: AdaptParams::dt_max
    pub fn adapt_steps(&mut self, params: &AdaptParams) -> Result<AdaptInfo, TransientError> {
        let TimeScheme::Theta { theta } = self.scheme else {
            return Err(TransientError::Unsupported("adaptive steps with BDF2 (use a θ-scheme)"));
        };
        for (what, v) in [
            ("t_end", params.t_end),
            ("tolerance", params.tolerance),
            ("dt_initial", params.dt_initial),
            ("dt_min", params.dt_min),
            ("dt_max", params.dt_max),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(TransientError::InvalidValue {
                    what: format!("adaptive {what}"),
                    requirement: "finite and > 0",
                    value: v,
                });
            }
        }
        let order = if theta == 0.5 { 2 } else { 1 };
        let denom = f64::from((1u32 << order) - 1);
        self.step_sizes = None;
        let mut stepper = Stepper::new(self)?;
        let mut info = AdaptInfo::default();
        let mut x = self.initial_state();
        let mut t = 0.0;
        let mut dt = params.dt_initial.clamp(params.dt_min, params.dt_max);
        let mut steps = Vec::new();
        while t < params.t_end * (1.0 - 1e-12) {
            let h = dt.min(params.t_end - t);
            let big = stepper.step_with(0, h, &x)?;
            let half = stepper.step_with(0, 0.5 * h, &x)?;
            let two = stepper.step_with(0, 0.5 * h, &half)?;
            let err =
                two.u.iter().zip(&big.u).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max) / denom;
            let accept = err <= params.tolerance || 0.5 * h <= params.dt_min;
            if accept {
                x = two;
                t += h;
                steps.extend([0.5 * h, 0.5 * h]);
                info.accepted += 1;
                info.max_error = info.max_error.max(err);
            } else {
                info.rejected += 1;
            }
            let factor = if err == 0.0 {
                2.0
            } else {
                (0.9 * (params.tolerance / err).powf(1.0 / f64::from(order + 1))).clamp(0.2, 2.0)
            };
            dt = (h * factor).clamp(params.dt_min, params.dt_max);
            tracing::trace!(t, h, err, accept, "adaptive step");
        }
        info.factorizations = stepper.factorizations;
        self.n_steps = steps.len();
        self.step_sizes = Some(steps);
        tracing::debug!(?info, "adaptive time steps chosen");
        Ok(info)
    }

    /// J = Σ_n j_n(T^n).
    pub fn objective(&self, obj: &impl TimeObjective) -> Result<f64, TransientError> {
        let traj = self.simulate()?;
        self.objective_of(&traj, obj)
    }

    /// J = Σ_n j_n(T^n) of a trajectory this problem computed (no new simulation).
    pub fn objective_of(
        &self,
        traj: &Trajectory,
        obj: &impl TimeObjective,
    ) -> Result<f64, TransientError> {
        let mut j = 0.0;
        for (n, t) in traj.temperatures.iter().enumerate() {
            if let Some(e) = obj.eval(&self.model, self.step_info(n), t, false)? {
                j += e.value;
            }
        }
        Ok(j)
    }

    /// Where state n lies in time (its step, time and neighbouring step sizes).
    pub fn step_info(&self, n: usize) -> StepInfo {
        StepInfo {
            step: n,
            n_steps: self.n_steps,
            time: self.time(n),
            dt_before: if n == 0 { 0.0 } else { self.step_size(n - 1) },
            dt_after: if n == self.n_steps { 0.0 } else { self.step_size(n) },
        }
    }

    /// J and dJ/dp by the discrete adjoint, with the states kept by `memory`. `want.coords`
    /// adds dJ/dX (consistent mass only); the other flags of `want` select the steady
    /// parameter kinds as in [`ThermalModel::parameter_vjp`]. ρc and T⁰ always get gradients.
    pub fn gradient(
        &self,
        obj: &impl TimeObjective,
        memory: Checkpointing,
        want: VjpRequest,
    ) -> Result<TransientGradient, TransientError> {
        self.gradient_with(obj, memory, want, None, None)
    }

    /// [`gradient`](Self::gradient) of a run whose states are at hand (`traj`, this
    /// problem's): with [`Checkpointing::StoreAll`] the reverse sweep takes them instead of
    /// stepping forward again (the same states bit for bit); binomial checkpointing still
    /// recomputes from its snapshots.
    pub fn gradient_of_run(
        &self,
        traj: &Trajectory,
        obj: &impl TimeObjective,
        memory: Checkpointing,
        want: VjpRequest,
    ) -> Result<TransientGradient, TransientError> {
        assert_eq!(traj.temperatures.len(), self.n_steps + 1, "a trajectory of this problem");
        self.gradient_with(obj, memory, want, Some(traj), None)
    }

    /// [`gradient_of_run`](Self::gradient_of_run) with every state kept, and the first-order
    /// adjoint μ of every step (the unknowns' layout, step k at index k) for the products taken
    /// at the same run and seeds (the `first_adjoints` of [`hessian_vector`]), which then
    /// solve for it no more.
    ///
    /// [`hessian_vector`]: Self::hessian_vector
    pub fn gradient_of_run_with_adjoints(
        &self,
        traj: &Trajectory,
        obj: &impl TimeObjective,
        want: VjpRequest,
    ) -> Result<(TransientGradient, Vec<Vec<f64>>), TransientError> {
        assert_eq!(traj.temperatures.len(), self.n_steps + 1, "a trajectory of this problem");
        let mut adjoints = vec![Vec::new(); self.n_steps];
        let g = self.gradient_with(
            obj,
            Checkpointing::StoreAll,
            want,
            Some(traj),
            Some(&mut adjoints),
        )?;
        Ok((g, adjoints))
    }

    /// The gradient (of the run `traj` when given), with the adjoint of every step written
    /// into `adjoints` when given.
    fn gradient_with(
        &self,
        obj: &impl TimeObjective,
        memory: Checkpointing,
        want: VjpRequest,
        traj: Option<&Trajectory>,
        mut adjoints: Option<&mut Vec<Vec<f64>>>,
    ) -> Result<TransientGradient, TransientError> {
        if want.coords && self.mass == MassKind::Lumped {
            return Err(TransientError::Unsupported(
                "coordinate gradients with a lumped mass matrix (use the consistent mass)",
            ));
        }
        self.check_steps()?;
        let model = &self.model;
        let stepper = RefCell::new(Stepper::new(self)?);
        let owner = model.fixed_owner();
        let mut g = TransientGradient::zeros(model, want.coords);
        let n_u = model.n_unknowns();
        // Ū^{k+1} and the pending Ū^k (BDF2), as unknown vectors.
        let mut bar = vec![0.0; n_u];
        let mut bar_prev = vec![0.0; n_u];
        // Adds the objective term of state n at nodal temperatures t into J, Ū (`bar`), and the
        // fixed-temperature and coordinate gradients.
        let objective_term = |n: usize,
                              t: &[f64],
                              bar: &mut [f64],
                              g: &mut TransientGradient|
         -> Result<(), TransientError> {
            if let Some(e) = obj.eval(model, self.step_info(n), t, want.coords)? {
                g.value += e.value;
                for (i, &node) in model.dofs.node_of_unknown.iter().enumerate() {
                    bar[i] += e.d_temperature[node];
                }
                for (node, o) in owner.iter().enumerate() {
                    if let Some(b) = o {
                        g.temperature[*b] += e.d_temperature[node];
                    }
                }
                if let (Some(c), Some(dc)) = (&mut g.coords, &e.d_coords) {
                    for (a, b) in c.iter_mut().zip(dc) {
                        for i in 0..3 {
                            a[i] += b[i];
                        }
                    }
                }
            }
            Ok(())
        };
        let stats = reverse_sweep(
            self.n_steps,
            &self.initial_state(),
            memory,
            |k, x| match (traj, memory) {
                (Some(traj), Checkpointing::StoreAll) => Ok(self.stored_state(traj, k + 1)),
                _ => stepper.borrow_mut().step(k, x),
            },
            |k, xk, xk1| {
                let time = self.time(k + 1);
                gradfem_solvers::interrupt::check("transient thermal adjoint", || {
                    format!("step {k}")
                })
                .map_err(|source| TransientError::Solver {
                    step: k,
                    time,
                    source,
                })?;
                let t1 = model.nodal_temperature(&xk1.u);
                objective_term(k + 1, &t1, &mut bar, &mut g)?;
                let t0 = model.nodal_temperature(&xk.u);
                let tm = xk.u_prev.as_ref().map(|u| model.nodal_temperature(u));
                let (new_bar, new_prev, mu) = stepper.borrow_mut().adjoint_step(
                    k,
                    [&t1, &t0, tm.as_deref().unwrap_or(&[])],
                    &bar,
                    &bar_prev,
                    want,
                    &mut g,
                )?;
                bar = new_bar;
                bar_prev = new_prev;
                if let Some(kept) = adjoints.as_deref_mut() {
                    kept[k] = mu;
                }
                Ok::<(), TransientError>(())
            },
        )?;
        let t0 = model.nodal_temperature(&self.initial_state().u);
        objective_term(0, &t0, &mut bar, &mut g)?;
        // BDF2 never leaves a pending Ū^{−1}; the θ-scheme never creates one.
        model.dofs.scatter(&bar, &mut g.initial);
        g.sum_regions(model);
        g.stats = stats;
        stepper.into_inner().finish();
        tracing::debug!(value = g.value, stats = ?g.stats, "transient thermal adjoint done");
        Ok(g)
    }
}

/// Largest number of factorizations a linear run keeps.
const MAX_CACHED_FACTORS: usize = 4;

/// The most factor memory a run keeps between its passes ([`TransientProblem::keep_stepper`]).
const KEPT_FACTOR_BYTES: usize = 1 << 30;

/// The most bytes a run spends on keeping its element masses ([`ElementMasses`]).
const ELEMENT_MASS_BUDGET: usize = 256 << 20;

/// The element masses at ρc = 1 (row-major nn×nn per volume element), kept for a run when they
/// fit in [`ELEMENT_MASS_BUDGET`]: the adjoint and the second-order products contract them at
/// every step (the mass is linear in ρc, the lumped one too).
struct ElementMasses {
    offsets: Vec<usize>,
    values: Vec<f64>,
}

impl ElementMasses {
    /// The masses of `p`'s volume elements, or `None` when they would not fit the budget.
    fn new(p: &TransientProblem) -> Option<Self> {
        let model = &p.model;
        let n_vol = model.n_volume_elements();
        let mut offsets = Vec::with_capacity(n_vol + 1);
        offsets.push(0);
        for e in 0..n_vol {
            let nn = model.element_nodes(e).len();
            offsets.push(offsets[e] + nn * nn);
        }
        let total = offsets[n_vol];
        if total.saturating_mul(std::mem::size_of::<f64>()) > ELEMENT_MASS_BUDGET {
            return None;
        }
        let mut values = vec![0.0; total];
        let chunks =
            gradfem_kernel::split_runs(&mut values, offsets.windows(2).map(|w| w[1] - w[0]));
        chunks.into_par_iter().enumerate().for_each(|(e, me)| p.element_mass(e, 1.0, me));
        Some(Self { offsets, values })
    }

    fn of(&self, e: usize) -> &[f64] {
        &self.values[self.offsets[e]..self.offsets[e + 1]]
    }
}

/// Σ over the `pairs` (x, y) of xᵀ Mₑ y at ρc = 1: the element mass read (or formed) once for
/// all of them.
fn unit_mass_forms(
    p: &TransientProblem,
    masses: Option<&ElementMasses>,
    e: usize,
    pairs: &[(&[f64], &[f64])],
) -> f64 {
    let nodes = p.model.element_nodes(e);
    let nn = nodes.len();
    let computed;
    let me = match masses {
        Some(m) => m.of(e),
        None => {
            let mut v = vec![0.0; nn * nn];
            p.element_mass(e, 1.0, &mut v);
            computed = v;
            &computed
        }
    };
    let mut s = 0.0;
    for &(x, y) in pairs {
        for a in 0..nn {
            let row: f64 = (0..nn).map(|b| me[a * nn + b] * y[nodes[b]]).sum();
            s += x[nodes[a]] * row;
        }
    }
    s
}

/// Assembly and factorizations of one run.
struct Stepper<'p> {
    p: &'p TransientProblem,
    parts: StepperParts,
    linear: bool,
    newton_iterations: usize,
    factorizations: usize,
}

/// What a [`Stepper`] builds and factors for its problem (kept between passes when the
/// problem asks for it).
struct StepperParts {
    pattern: AssemblyPattern,
    mass: CsrMatrix,
    /// The element masses at ρc = 1, when kept.
    masses: Option<ElementMasses>,
    a: CsrMatrix,
    /// Factorizations of A for (a₀, θ, Δt), linear problems: the BDF2 start and main steps,
    /// and the step sizes tried last by the adaptive control.
    cache: Vec<([f64; 3], CholeskySolver)>,
    /// The LU of the last nonlinear factorization, with the step coefficients (a₀, θ, Δt) and
    /// the temperature it was made at: refactored in place for a new state (its symbolic
    /// analysis kept: the pattern never changes), returned as it is for the same one (the
    /// first- and second-order adjoints of one step).
    nonlinear: Option<([f64; 3], Vec<f64>, LuSolver)>,
}

impl StepperParts {
    /// The pattern and mass matrix of `p`, nothing factored yet.
    fn new(p: &TransientProblem) -> Self {
        let model = &p.model;
        let pattern = AssemblyPattern::new(
            model.n_unknowns(),
            &model.element_offsets(),
            &model.element_dofs(),
        );
        let masses = ElementMasses::new(p);
        let mass = assemble_mass(p, &pattern, masses.as_ref(), &p.rho_c);
        let a = pattern.new_matrix();
        StepperParts { pattern, mass, masses, a, cache: Vec::new(), nonlinear: None }
    }

    /// The mass matrix at the heat capacities `rho_c` (one per volume element), free rows and
    /// columns: M(ρc) itself, or δM = M(δρc) along a direction (M is linear in ρc).
    fn mass_at(&self, p: &TransientProblem, rho_c: &[f64]) -> CsrMatrix {
        assemble_mass(p, &self.pattern, self.masses.as_ref(), rho_c)
    }
}

/// Σₑ ρcₑ Mₑ over `pattern` (the kept unit element masses where there are, formed again
/// where not).
fn assemble_mass(
    p: &TransientProblem,
    pattern: &AssemblyPattern,
    masses: Option<&ElementMasses>,
    rho_c: &[f64],
) -> CsrMatrix {
    let n_vol = p.model.n_volume_elements();
    let mut mass = pattern.new_matrix();
    pattern.assemble_matrix_into(&mut mass, |e, me| {
        if e >= n_vol || rho_c[e] == 0.0 {
            return;
        }
        match masses {
            Some(m) => me.iter_mut().zip(m.of(e)).for_each(|(a, b)| *a += rho_c[e] * b),
            None => p.element_mass(e, rho_c[e], me),
        }
    });
    mass
}

impl<'p> Stepper<'p> {
    /// The stepper of `p`: what an earlier pass kept, or built now.
    fn new(p: &'p TransientProblem) -> Result<Self, TransientError> {
        let model = &p.model;
        let kept = p
            .kept
            .0
            .as_ref()
            .and_then(|k| k.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take());
        let parts = match kept {
            Some(parts) => parts,
            None => StepperParts::new(p),
        };
        Ok(Self { p, parts, linear: model.is_linear(), newton_iterations: 0, factorizations: 0 })
    }

    /// Hand the set-up and factorizations to the problem's next pass (when it keeps them).
    /// The factorizations are kept while their factors take at most
    /// [`KEPT_FACTOR_BYTES`]; larger ones are dropped (the next pass factors again) so that a
    /// large run does not hold them while other fields factor theirs.
    fn finish(mut self) {
        if let Some(k) = &self.p.kept.0 {
            // 8 bytes per value and 4 per row index of the supernodal factor.
            let bytes: usize = self.parts.cache.iter().map(|(_, s)| 12 * s.factor_nnz()).sum();
            if bytes > KEPT_FACTOR_BYTES {
                self.parts.cache.clear();
            }
            *k.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(self.parts);
        }
    }

    /// Assemble R(T) (free rows) and, when `tangent` = (a₀, θ, Δt), A = a₀M/Δt + θK(T) into
    /// `self.parts.a`.
    fn residual(&mut self, t: &[f64], tangent: Option<[f64; 3]>) -> Vec<f64> {
        let model = &self.p.model;
        let mut r = vec![0.0; model.n_unknowns()];
        match tangent {
            Some([a0, theta, dt]) => {
                self.parts.pattern.assemble_into(&mut self.parts.a, &mut r, |e, ke, fe| {
                    model.element_residual_tangent(e, t, Some(ke), fe)
                });
                let c = a0 / dt;
                for (a, m) in self.parts.a.values.iter_mut().zip(&self.parts.mass.values) {
                    *a = c * m + theta * *a;
                }
            }
            None => self.parts.pattern.assemble_vector_into(&mut r, |e, fe| {
                model.element_residual_tangent(e, t, None, fe)
            }),
        }
        r
    }

    /// A factorization of A = a₀M/Δt + θK(t) for step k with step size `dt` (cached when
    /// linear; the last one kept when not).
    fn factor(
        &mut self,
        k: usize,
        dt: f64,
        t: &[f64],
    ) -> Result<&mut dyn LinearSolver, TransientError> {
        let [a0, _, _, theta] = self.p.scheme.coefficients(k);
        let key = [a0, theta, dt];
        let time = self.p.time(k) + dt;
        let failed = |source| TransientError::Solver { step: k, time, source };
        if !self.linear {
            let same = self.parts.nonlinear.as_ref().is_some_and(|(c, at, _)| *c == key && at == t);
            if !same {
                self.residual(t, Some(key));
                let (_, at, solver) = self
                    .parts
                    .nonlinear
                    .get_or_insert_with(|| (key, Vec::new(), LuSolver::new("thermal-transient")));
                // Forget the state first: a failed factorization is not the one of `t`.
                at.clear();
                solver.factor(&self.parts.a).map_err(failed)?;
                self.factorizations += 1;
                let kept = self.parts.nonlinear.as_mut().expect("inserted above");
                kept.0 = key;
                kept.1.extend_from_slice(t);
            }
            return Ok(&mut self.parts.nonlinear.as_mut().expect("factored above").2);
        }
        let found = self.parts.cache.iter().position(|(c, _)| *c == key);
        let idx = match found {
            Some(i) => i,
            None => {
                self.residual(t, Some(key));
                let mut solver = CholeskySolver::new("thermal-transient");
                solver.factor(&self.parts.a).map_err(failed)?;
                self.factorizations += 1;
                if self.parts.cache.len() >= MAX_CACHED_FACTORS {
                    self.parts.cache.remove(0);
                }
                self.parts.cache.push((key, solver));
                self.parts.cache.len() - 1
            }
        };
        Ok(&mut self.parts.cache[idx].1)
    }

    /// One forward step U^k → U^{k+1} (Newton from U^k; one iteration when linear).
    fn step(&mut self, k: usize, x: &TimeState) -> Result<TimeState, TransientError> {
        self.step_with(k, self.p.step_size(k), x)
    }

    /// One step of size `dt` with the coefficients of step k.
    fn step_with(&mut self, k: usize, dt: f64, x: &TimeState) -> Result<TimeState, TransientError> {
        let p = self.p;
        let model = &p.model;
        let [a0, a1, a2, theta] = p.scheme.coefficients(k);
        let time = p.time(k) + dt;
        let tk = model.nodal_temperature(&x.u);
        let rk = if theta < 1.0 { self.residual(&tk, None) } else { Vec::new() };
        // Known part of the mass term: M (a₁U^k + a₂U^{k−1})/Δt.
        let mut known = vec![0.0; x.u.len()];
        for (i, v) in known.iter_mut().enumerate() {
            *v = a1 * x.u[i] + x.u_prev.as_ref().map_or(0.0, |u| a2 * u[i]);
        }
        let mut v = x.u.clone();
        let mut w = vec![0.0; v.len()];
        let mut mw = vec![0.0; v.len()];
        let mut initial = 0.0;
        let mut residuals = Vec::new();
        for it in 0.. {
            if self.linear && it == 1 {
                // R is affine: one Newton step from any guess solves F = 0 (to rounding).
                break;
            }
            let t = model.nodal_temperature(&v);
            // F(v) = M (a₀v + known)/Δt + θR(v) + (1 − θ)R(U^k).
            let mut f = self.residual(&t, None);
            for i in 0..v.len() {
                w[i] = (a0 * v[i] + known[i]) / dt;
            }
            self.parts.mass.mul_vec_into(&w, &mut mw);
            for i in 0..v.len() {
                f[i] = mw[i] + theta * f[i] + if theta < 1.0 { (1.0 - theta) * rk[i] } else { 0.0 };
            }
            let norm = f.iter().map(|x| x * x).sum::<f64>().sqrt();
            residuals.push(norm);
            if it == 0 {
                initial = norm;
            }
            if !self.linear && (norm <= p.newton_rtol * initial || norm == 0.0) {
                break;
            }
            if it == p.newton_max_iterations {
                return Err(TransientError::NoConvergence {
                    step: k,
                    time,
                    iterations: it,
                    residual: norm,
                    initial,
                    residuals,
                });
            }
            let solver = self.factor(k, dt, &t)?;
            solver.solve_in_place(&mut f).map_err(|source| TransientError::Solver {
                step: k,
                time,
                source,
            })?;
            let mut dmax: f64 = 0.0;
            let mut vmax: f64 = 0.0;
            for (vi, d) in v.iter_mut().zip(&f) {
                *vi -= d;
                dmax = dmax.max(d.abs());
                vmax = vmax.max(vi.abs());
            }
            self.newton_iterations += 1;
            // Stagnation at round-off: the residual can no longer fall by the relative
            // tolerance when the update is at the last digits of the temperatures.
            if !self.linear && dmax <= 1e-14 * vmax.max(1.0) {
                break;
            }
        }
        let u_prev = matches!(p.scheme, TimeScheme::Bdf2).then(|| x.u.clone());
        Ok(TimeState { u: v, u_prev })
    }

    /// The reverse of step k: from Ū^{k+1} (`bar`) and the pending Ū^k (`bar_prev`, BDF2),
    /// return (Ū^k, pending Ū^{k−1}, the step's adjoint μ) and accumulate parameter gradients
    /// into `g`. `t` holds the nodal T^{k+1}, T^k and T^{k−1} (empty when absent).
    #[allow(clippy::type_complexity)]
    fn adjoint_step(
        &mut self,
        k: usize,
        t: [&[f64]; 3],
        bar: &[f64],
        bar_prev: &[f64],
        want: VjpRequest,
        g: &mut TransientGradient,
    ) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>), TransientError> {
        let p = self.p;
        let model = &p.model;
        let [a0, a1, a2, theta] = p.scheme.coefficients(k);
        let dt = p.step_size(k);
        let time = p.time(k + 1);
        let [t1, t0, tm] = t;
        let mut mu = bar.to_vec();
        self.factor(k, dt, t1)?
            .solve_transpose_in_place(&mut mu)
            .map_err(|source| TransientError::Solver { step: k, time, source })?;
        let mut mu_nodal = vec![0.0; model.n_nodes()];
        model.dofs.scatter(&mu, &mut mu_nodal);
        // Ū^k = pending − a₁Mμ/Δt − (1 − θ)K(U^k)ᵀμ;  Ū^{k−1} = −a₂Mμ/Δt.
        let mut m_mu = vec![0.0; mu.len()];
        self.parts.mass.mul_vec_into(&mu, &mut m_mu);
        let mut new_bar: Vec<f64> =
            bar_prev.iter().zip(&m_mu).map(|(b, m)| b - a1 * m / dt).collect();
        if theta < 1.0 {
            let kt = model.tangent_transpose_product(t0, &mu_nodal);
            for (i, &node) in model.dofs.node_of_unknown.iter().enumerate() {
                new_bar[i] -= (1.0 - theta) * kt[node];
            }
        }
        let new_prev: Vec<f64> = m_mu.iter().map(|m| -a2 * m / dt).collect();
        // A source constant in time enters both ends of the step, weights θ and 1 − θ: Q̄ −= μᵀ ∂R/∂Q.
        if !g.external_source.is_empty() {
            sub_into(&mut g.external_source, &model.external_source_vjp(&mu_nodal));
        }
        // p̄ −= θ(∂R/∂p)ᵀ|_{k+1}μ + (1 − θ)(∂R/∂p)ᵀ|_kμ.
        let steady = want.conductivity || want.source || want.boundary || want.temperature;
        for (tt, c) in [(t1, theta), (t0, 1.0 - theta)] {
            if c == 0.0 || !(steady || want.coords) {
                continue;
            }
            let lam: Vec<f64> = mu_nodal.iter().map(|m| c * m).collect();
            g.subtract_parameter_vjp(&model.parameter_vjp(tt, &lam, want));
        }
        // Mass term: w = (a₀T^{k+1} + a₁T^k + a₂T^{k−1})/Δt (zero at fixed nodes).
        let w: Vec<f64> = (0..model.n_nodes())
            .map(|n| {
                let s = a0 * t1[n] + a1 * t0[n] + if a2 != 0.0 { a2 * tm[n] } else { 0.0 };
                if model.dofs.unknown_of_node[n].is_some() { s / dt } else { 0.0 }
            })
            .collect();
        let n_vol = model.n_volume_elements();
        let masses = self.parts.masses.as_ref();
        let per_elem: Vec<f64> = (0..n_vol)
            .into_par_iter()
            .map(|e| unit_mass_forms(p, masses, e, &[(&mu_nodal, &w)]))
            .collect();
        sub_into(&mut g.heat_capacity_elem, &per_elem);
        if let Some(c) = &mut g.coords {
            let locals: Vec<[f64; 3 * MAX_NODES]> = (0..n_vol)
                .into_par_iter()
                .map(|e| mass_coordinate_vjp(model, e, p.rho_c[e], &mu_nodal, &w))
                .collect();
            for (e, local) in locals.iter().enumerate() {
                for (a, &node) in model.element_nodes(e).iter().enumerate() {
                    for i in 0..3 {
                        c[node][i] -= local[3 * a + i];
                    }
                }
            }
        }
        Ok((new_bar, new_prev, mu))
    }
}

/// μᵀ ∂(M w)/∂X on volume element e (consistent mass): Σ_q w_q det J ρc μ(x_q) w(x_q) (∇N_b)ᵢ
/// per local node b and direction i (the shape values at the points do not move with X), 3
/// per local node of a cell of at most 27 nodes (the rest zero).
pub fn mass_coordinate_vjp(
    model: &ThermalModel,
    e: usize,
    rho_c: f64,
    mu: &[f64],
    w: &[f64],
) -> [f64; 3 * MAX_NODES] {
    let table = model.element_table(e);
    let x = model.element_coords(e);
    let nodes = model.element_nodes(e);
    let nn = nodes.len();
    let mut g = [[0.0; 3]; MAX_NODES];
    let mut local = [0.0; 3 * MAX_NODES];
    for q in 0..table.n_points() {
        let det = geometry::physical_gradients_into(3, table.grad(q), &x[..nn], &mut g[..nn]);
        let n = table.shape(q);
        let (mut mq, mut wq) = (0.0, 0.0);
        for a in 0..nn {
            mq += n[a] * mu[nodes[a]];
            wq += n[a] * w[nodes[a]];
        }
        let s = table.weights[q] * det * rho_c * mq * wq;
        for b in 0..nn {
            for i in 0..3 {
                local[3 * b + i] += s * g[b][i];
            }
        }
    }
    local
}

/// (∂(M w)/∂X δX) on volume element e (consistent mass), per local node a, added into
/// `local`: Σ_q w_q det J tr(∇δX) ρc N_a w(x_q) (only det J moves with the nodes).
pub fn mass_coordinate_jvp(
    model: &ThermalModel,
    e: usize,
    rho_c: f64,
    dx: &[[f64; 3]],
    w: &[f64],
    local: &mut [f64],
) {
    let table = model.element_table(e);
    let x = model.element_coords(e);
    let nodes = model.element_nodes(e);
    let nn = nodes.len();
    let mut g = [[0.0; 3]; MAX_NODES];
    for q in 0..table.n_points() {
        let det = geometry::physical_gradients_into(3, table.grad(q), &x[..nn], &mut g[..nn]);
        let n = table.shape(q);
        let mut wq = 0.0;
        let mut trace = 0.0;
        for a in 0..nn {
            wq += n[a] * w[nodes[a]];
            trace += (0..3).map(|i| dx[nodes[a]][i] * g[a][i]).sum::<f64>();
        }
        let s = table.weights[q] * det * rho_c * wq * trace;
        for a in 0..nn {
            local[a] += s * n[a];
        }
    }
}

/// The mass's second-order coordinate products on volume element e (consistent mass). With
/// s_q = w_q det J ρc μ(x_q) w(x_q) and G = ∇δX, μᵀ∂(Mw)/∂X_b = Σ_q s_q ∇N_b moves along
/// (δρc, δμ, δw, δX) by Σ_q [δs_q ∇N_b − s_q Gᵀ∇N_b],
/// δs_q = w_q det J [δρc μ w + ρc (δμ w + μ δw) + ρc μ w tr G] (first, 3 per local node); and
/// μᵀ(∂²M/∂ρc∂X δX)w = Σ_q w_q det J μ w tr G, the unit heat capacity's share (returned);
/// the first is added into `local` (3 per local node).
#[allow(clippy::too_many_arguments)]
pub fn mass_coordinate_second_order(
    model: &ThermalModel,
    e: usize,
    rho_c: f64,
    d_rho_c: f64,
    mu: &[f64],
    d_mu: &[f64],
    w: &[f64],
    d_w: &[f64],
    dx: &[[f64; 3]],
    local: &mut [f64],
) -> f64 {
    let table = model.element_table(e);
    let x = model.element_coords(e);
    let nodes = model.element_nodes(e);
    let nn = nodes.len();
    let mut g = [[0.0; 3]; MAX_NODES];
    let mut capacity = 0.0;
    for q in 0..table.n_points() {
        let det = geometry::physical_gradients_into(3, table.grad(q), &x[..nn], &mut g[..nn]);
        let n = table.shape(q);
        let (mut mq, mut dmq, mut wq, mut dwq) = (0.0, 0.0, 0.0, 0.0);
        let mut grad_dx = [[0.0; 3]; 3];
        for a in 0..nn {
            let node = nodes[a];
            mq += n[a] * mu[node];
            dmq += n[a] * d_mu[node];
            wq += n[a] * w[node];
            dwq += n[a] * d_w[node];
            for i in 0..3 {
                for j in 0..3 {
                    grad_dx[i][j] += dx[node][i] * g[a][j];
                }
            }
        }
        let trace = grad_dx[0][0] + grad_dx[1][1] + grad_dx[2][2];
        let wd = table.weights[q] * det;
        let s = wd * rho_c * mq * wq;
        let ds = wd * (d_rho_c * mq * wq + rho_c * (dmq * wq + mq * dwq) + rho_c * mq * wq * trace);
        capacity += wd * mq * wq * trace;
        for b in 0..nn {
            for i in 0..3 {
                let gt_g: f64 = (0..3).map(|k| grad_dx[k][i] * g[b][k]).sum();
                local[3 * b + i] += ds * g[b][i] - s * gt_g;
            }
        }
    }
    capacity
}

fn sub_into(acc: &mut [f64], v: &[f64]) {
    acc.iter_mut().zip(v).for_each(|(a, b)| *a -= b);
}

#[cfg(test)]
mod tests {
    use super::*;
    use gradfem_mesh::CellType;
    use gradfem_mesh::generate::{BoxSpec, box_mesh};
    use gradfem_thermal::law::ConductivityLaw;
    use gradfem_thermal::model::{BcSpec, RegionSpec};
    use rstest::rstest;

    fn problem(ct: CellType, scheme: TimeScheme, mass: MassKind) -> TransientProblem {
        let mesh = box_mesh(&BoxSpec {
            origin: [0.0; 3],
            lengths: [1.0, 0.5, 0.25],
            divisions: [2, 1, 1],
            cell_type: ct,
        });
        let model = ThermalModel::new(
            &mesh,
            &[RegionSpec {
                group: "domain".into(),
                k0: 2.0,
                law: ConductivityLaw::Constant,
                source: 10.0,
            }],
            &[BcSpec { group: "xmin".into(), kind: BcKind::Temperature { value: 1.0 } }],
        )
        .unwrap();
        let n = model.n_nodes();
        let spec = TransientSpec { heat_capacity: vec![3.0], dt: 0.1, n_steps: 4, scheme, mass };
        TransientProblem::new(model, &spec, vec![2.0; n]).unwrap()
    }

    use gradfem_thermal::model::BcKind;

    /// Σ_ab M_ab = ∫ρc = ρc · volume, for both mass forms and linear and quadratic cells.
    #[rstest]
    fn mass_integrates_heat_capacity(
        #[values(CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex27)] ct: CellType,
        #[values(MassKind::Consistent, MassKind::Lumped)] mass: MassKind,
    ) {
        let p = problem(ct, TimeScheme::IMPLICIT_EULER, mass);
        let mut total = 0.0;
        for e in 0..p.model.n_volume_elements() {
            let nn = p.model.element_nodes(e).len();
            let mut me = vec![0.0; nn * nn];
            p.element_mass(e, p.rho_c[e], &mut me);
            total += me.iter().sum::<f64>();
            for a in 0..nn {
                for b in 0..nn {
                    assert!((me[a * nn + b] - me[b * nn + a]).abs() < 1e-15, "not symmetric");
                }
            }
        }
        assert!((total - 3.0 * 0.125).abs() < 1e-12, "∫ρc = {total}");
    }

    /// The closed-form μᵀ ∂(M w)/∂X against central differences of the element mass.
    #[test]
    fn mass_coordinate_vjp_matches_finite_differences() {
        let p = problem(CellType::Tet10, TimeScheme::IMPLICIT_EULER, MassKind::Consistent);
        let n = p.model.n_nodes();
        let mu: Vec<f64> = (0..n).map(|i| (0.37 * i as f64).sin()).collect();
        let w: Vec<f64> = (0..n).map(|i| (0.91 * i as f64).cos()).collect();
        let e = 3;
        let nodes = p.model.element_nodes(e).to_vec();
        let nn = nodes.len();
        let local = mass_coordinate_vjp(&p.model, e, 3.0, &mu, &w);
        let form = |q: &TransientProblem| {
            let mut me = vec![0.0; nn * nn];
            q.element_mass(e, 3.0, &mut me);
            let mut s = 0.0;
            for a in 0..nn {
                for b in 0..nn {
                    s += mu[nodes[a]] * me[a * nn + b] * w[nodes[b]];
                }
            }
            s
        };
        let h = 1e-6;
        for (b, &node) in nodes.iter().enumerate() {
            for i in 0..3 {
                let mut q = p.clone();
                q.model.coords[node][i] += h;
                let jp = form(&q);
                q.model.coords[node][i] -= 2.0 * h;
                let jm = form(&q);
                let fd = (jp - jm) / (2.0 * h);
                assert!(
                    (fd - local[3 * b + i]).abs() < 1e-7 * (1.0 + fd.abs()),
                    "node {b} dir {i}: fd {fd}, closed form {}",
                    local[3 * b + i]
                );
            }
        }
    }

    /// The mass's coordinate tangent and second-order coordinate products against central
    /// differences of the first-order ones along (δρc, δμ, δw, δX), on a curved Tet10.
    #[test]
    fn mass_coordinate_second_order_matches_differences() {
        let mut p = problem(CellType::Tet10, TimeScheme::IMPLICIT_EULER, MassKind::Consistent);
        let n = p.model.n_nodes();
        let wave = |s: f64| -> Vec<f64> { (0..n).map(|i| (s * (i as f64 + 1.0)).sin()).collect() };
        let (mu, d_mu, w, d_w) = (wave(0.37), wave(1.13), wave(0.91), wave(0.53));
        let dx: Vec<[f64; 3]> = p
            .model
            .coords
            .iter()
            .map(|x| {
                // Not divergence-free: det J moves.
                let (a, b, c) = (0.1 * (3.0 * x[1]).sin(), 0.05 * x[0] * x[2], 0.07 * x[2] * x[2]);
                [a + 0.08 * x[0] * x[0], b + 0.03 * x[1], c - 0.07 * (2.0 * x[0]).cos()]
            })
            .collect();
        // Bend the mid-edge nodes so the element is curved.
        for x in p.model.coords.iter_mut().skip(4) {
            x[2] += 0.02 * (5.0 * x[0]).sin();
        }
        let (rc, drc, e) = (3.0, 0.7, 3);
        let nn = p.model.element_nodes(e).len();
        let mut tangent = vec![0.0; nn];
        mass_coordinate_jvp(&p.model, e, rc, &dx, &w, &mut tangent);
        let mut second = vec![0.0; 3 * nn];
        let capacity = mass_coordinate_second_order(
            &p.model,
            e,
            rc,
            drc,
            &mu,
            &d_mu,
            &w,
            &d_w,
            &dx,
            &mut second,
        );
        let h = 1e-6;
        let moved = |s: f64| {
            let mut q = p.clone();
            for (x, d) in q.model.coords.iter_mut().zip(&dx) {
                (0..3).for_each(|i| x[i] += s * d[i]);
            }
            q
        };
        let (qp, qm) = (moved(h), moved(-h));
        let plus = |v: &[f64], d: &[f64], s: f64| -> Vec<f64> {
            v.iter().zip(d).map(|(a, b)| a + s * b).collect()
        };
        let nodes = p.model.element_nodes(e).to_vec();
        let mass_times = |q: &TransientProblem| {
            let mut me = vec![0.0; nn * nn];
            q.element_mass(e, rc, &mut me);
            (0..nn).map(|a| (0..nn).map(|b| me[a * nn + b] * w[nodes[b]]).sum()).collect()
        };
        let (mp, mm): (Vec<f64>, Vec<f64>) = (mass_times(&qp), mass_times(&qm));
        for a in 0..nn {
            let fd = (mp[a] - mm[a]) / (2.0 * h);
            assert!((fd - tangent[a]).abs() < 1e-7 * (1.0 + fd.abs()), "{fd} vs {}", tangent[a]);
        }
        let vjp = |q: &TransientProblem, s: f64| {
            mass_coordinate_vjp(&q.model, e, rc + s * drc, &plus(&mu, &d_mu, s), &plus(&w, &d_w, s))
        };
        let (vp, vm) = (vjp(&qp, h), vjp(&qm, -h));
        for k in 0..3 * nn {
            let fd = (vp[k] - vm[k]) / (2.0 * h);
            assert!((fd - second[k]).abs() < 1e-6 * (1.0 + fd.abs()), "{k}: {fd} vs {}", second[k]);
        }
        let unit_form = |q: &TransientProblem| {
            let mut me = vec![0.0; nn * nn];
            q.element_mass(e, 1.0, &mut me);
            (0..nn)
                .map(|a| mu[nodes[a]] * (0..nn).map(|b| me[a * nn + b] * w[nodes[b]]).sum::<f64>())
                .sum::<f64>()
        };
        let fd = (unit_form(&qp) - unit_form(&qm)) / (2.0 * h);
        assert!((fd - capacity).abs() < 1e-7 * (1.0 + fd.abs()), "{fd} vs {capacity}");
    }

    #[test]
    fn linear_problem_factors_once_per_step_kind() {
        let p = problem(CellType::Tet4, TimeScheme::CRANK_NICOLSON, MassKind::Consistent);
        assert_eq!(p.simulate().unwrap().factorizations, 1);
        let p = problem(CellType::Tet4, TimeScheme::Bdf2, MassKind::Consistent);
        let traj = p.simulate().unwrap();
        assert_eq!(traj.factorizations, 2);
        assert_eq!(traj.newton_iterations, 4);
        assert_eq!(traj.temperatures.len(), 5);
    }

    #[rstest]
    #[case::linear(true)]
    #[case::nonlinear(false)]
    fn a_kept_stepper_gives_the_same_bits_and_factors_nothing_again(#[case] linear: bool) {
        let fresh = || {
            let mut p = problem(CellType::Tet4, TimeScheme::Bdf2, MassKind::Consistent);
            if !linear {
                p.model.regions[0].law =
                    ConductivityLaw::Polynomial { t_ref: 1.0, coefficients: vec![0.3] };
            }
            p
        };
        let objective = WeightedTerms {
            terms: vec![ObjectiveTerm { weight: 1.0, kind: ObjectiveKind::NodalSumSquares }],
            weights: StepWeights::EveryStep,
        };
        let (plain, mut kept) = (fresh(), fresh());
        kept.keep_stepper();
        let (traj, traj_kept) = (plain.simulate().unwrap(), kept.simulate().unwrap());
        assert_eq!(traj.temperatures, traj_kept.temperatures);
        let want = VjpRequest::ALL;
        let memory = Checkpointing::StoreAll;
        let g = plain.gradient_of_run(&traj, &objective, memory, want).unwrap();
        for _ in 0..2 {
            // Every pass after the forward run takes its set-up and factorizations.
            let g_kept = kept.gradient_of_run(&traj_kept, &objective, memory, want).unwrap();
            assert_eq!(g_kept.k_elem, g.k_elem);
            assert_eq!(g_kept.initial, g.initial);
            assert_eq!(g_kept.heat_capacity, g.heat_capacity);
        }
        let stepper = Stepper::new(&kept).unwrap();
        if linear {
            assert_eq!(stepper.parts.cache.len(), 2, "the BDF2 start and main steps");
        } else {
            assert!(stepper.parts.nonlinear.is_some());
        }
        // A clone starts without, and a changed problem forgets.
        assert!(Stepper::new(&kept.clone()).unwrap().parts.cache.is_empty());
        stepper.finish();
        kept.set_heat_capacity(0, 2.0);
        let stepper = Stepper::new(&kept).unwrap();
        assert!(stepper.parts.cache.is_empty() && stepper.parts.nonlinear.is_none());
    }

    #[rstest]
    #[case::bdf2_linear(TimeScheme::Bdf2, true)]
    #[case::crank_nicolson_nonlinear(TimeScheme::CRANK_NICOLSON, false)]
    fn products_with_the_gradients_step_adjoints_equal_those_that_solve_for_them(
        #[case] scheme: TimeScheme,
        #[case] linear: bool,
    ) {
        let mut p = problem(CellType::Tet4, scheme, MassKind::Consistent);
        if !linear {
            p.model.regions[0].law =
                ConductivityLaw::Polynomial { t_ref: 1.0, coefficients: vec![0.3] };
        }
        p.keep_stepper();
        let traj = p.simulate().unwrap();
        let terms = vec![ObjectiveTerm { weight: 1.0, kind: ObjectiveKind::NodalSumSquares }];
        let weights: Vec<f64> = (0..=p.n_steps).map(|n| 1.0 + 0.1 * n as f64).collect();
        let d_weights: Vec<f64> = (0..=p.n_steps).map(|n| 0.01 * n as f64).collect();
        let none = vec![None; p.n_steps + 1];
        let obj =
            WeightedTerms { terms: terms.clone(), weights: StepWeights::Custom(weights.clone()) };
        let want = VjpRequest { coords: false, ..VjpRequest::ALL };
        let (g, mu) = p.gradient_of_run_with_adjoints(&traj, &obj, want).unwrap();
        assert_eq!(g, p.gradient_of_run(&traj, &obj, Checkpointing::StoreAll, want).unwrap());
        let mut dir = TransientDirection::zeros(&p.model);
        dir.steady.k_elem.iter_mut().enumerate().for_each(|(e, v)| *v = 0.1 + 0.01 * e as f64);
        dir.heat_capacity_elem.iter_mut().for_each(|v| *v = 0.2);
        let tangents = p.tangent_states(&traj, &dir, &terms, None).unwrap();
        let product = |first: Option<&[Vec<f64>]>| {
            let seeds = StateSeeds { first: &none, second: &none };
            let request = gradfem_kernel::CoordinateRequest::None;
            let args = (&traj, &terms, &weights, &d_weights, seeds, &dir, &tangents, want, request);
            p.hessian_vector(
                args.0, args.1, args.2, args.3, args.4, args.5, args.6, args.7, args.8, first,
            )
            .unwrap()
            .0
        };
        let (solved, kept) = (product(None), product(Some(&mu)));
        let close = |a: &[f64], b: &[f64]| {
            let scale = a.iter().fold(1e-300f64, |m, v| m.max(v.abs()));
            a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-12 * scale)
        };
        assert!(close(&solved.k_elem, &kept.k_elem), "{:?} vs {:?}", solved.k_elem, kept.k_elem);
        assert!(close(&solved.heat_capacity_elem, &kept.heat_capacity_elem));
        assert!(close(&solved.initial, &kept.initial));
        assert!(solved.k_elem.iter().any(|v| *v != 0.0), "a product that is not zero");
    }

    #[test]
    fn a_nonlinear_run_analyses_its_pattern_once_and_factors_a_state_once() {
        let mut p = problem(CellType::Tet4, TimeScheme::Bdf2, MassKind::Consistent);
        p.model.regions[0].law =
            ConductivityLaw::Polynomial { t_ref: 1.0, coefficients: vec![0.3] };
        assert!(!p.model.is_linear());
        let traj = p.simulate().unwrap();
        // One factorization per Newton iteration, on one symbolic analysis.
        assert_eq!(traj.factorizations, traj.newton_iterations);
        let mut stepper = Stepper::new(&p).unwrap();
        let (t1, t2) = (&traj.temperatures[1], &traj.temperatures[2]);
        let dt = p.step_size(1);
        let solve = |stepper: &mut Stepper, t: &[f64]| {
            let mut x = vec![1.0; p.model.n_unknowns()];
            stepper.factor(1, dt, t).unwrap().solve_transpose_in_place(&mut x).unwrap();
            x
        };
        let first = solve(&mut stepper, t1);
        // The same state again (the second-order adjoint's second solve): no new factorization.
        assert_eq!(solve(&mut stepper, t1), first);
        assert_eq!(stepper.factorizations, 1);
        // Another state: refactored, the analysis kept.
        let other = solve(&mut stepper, t2);
        assert_ne!(other, first);
        assert_eq!(stepper.factorizations, 2);
        assert_eq!(stepper.parts.nonlinear.as_ref().unwrap().2.symbolic_count(), 1);
        // Back to the first state: its factorization again, not the second one's.
        assert_eq!(solve(&mut stepper, t1), first);
        assert_eq!(stepper.factorizations, 3);
    }

    #[test]
    fn bad_data_is_an_error() {
        let p = problem(CellType::Tet4, TimeScheme::Bdf2, MassKind::Consistent);
        let spec = |scheme, c: f64, dt: f64| TransientSpec {
            heat_capacity: vec![c],
            dt,
            n_steps: 2,
            scheme,
            mass: MassKind::Consistent,
        };
        let init = p.initial.clone();
        let m = p.model.clone();
        assert!(
            TransientProblem::new(m.clone(), &spec(TimeScheme::Bdf2, -1.0, 0.1), init.clone())
                .is_err()
        );
        assert!(
            TransientProblem::new(m.clone(), &spec(TimeScheme::Bdf2, 1.0, 0.0), init.clone())
                .is_err()
        );
        assert!(
            TransientProblem::new(
                m.clone(),
                &spec(TimeScheme::Theta { theta: 0.2 }, 1.0, 0.1),
                init.clone()
            )
            .is_err()
        );
        let mut q = p.clone();
        q.step_sizes = Some(vec![0.1, 0.2, 0.1, 0.1]);
        assert!(matches!(q.simulate(), Err(TransientError::Unsupported(_))));
        let adapt =
            AdaptParams { t_end: 1.0, tolerance: 1e-3, dt_initial: 0.1, dt_min: 1e-4, dt_max: 1.0 };
        assert!(matches!(q.adapt_steps(&adapt), Err(TransientError::Unsupported(_))));
    }
}
