//! Finite-strain hyperelastic solves with load stepping, and their adjoint through the load
//! steps.
//!
//! # Forward: load stepping
//!
//! The model ([`FiniteStrainModel`]) has residual R(u; s, p) with the load factor s scaling
//! every load (prescribed displacements, dead tractions, pressures, body forces and the
//! temperature change). [`FiniteStrainProblem::solve`] reaches the requested load factors
//! 0 < s₁ < … < s_n one after the other. Between two of them it takes adaptive increments:
//!
//! - each increment starts from the last converged state, extrapolated linearly along the
//!   last increment (a secant predictor), and runs Newton with a backtracking line search
//!   (Armijo on ‖R‖₂; a trial that inverts an element counts as a rejected step length);
//! - the Newton corrections are inexact to the forcing term η = min(10⁻², 0.1‖R‖/ref), ref the
//!   reference of the convergence test below, floored at a tenth of the tolerance over ‖R‖ (so
//!   the last correction is as good as a direct solve): with the direct solvers the increment's first tangent is factored and CG
//!   preconditioned with that factorization solves the later tangents of the increment
//!   ([`ReusedCholesky`]: a fresh factorization when CG would need more work than one). Each
//!   increment starts without a factorization, so its result depends on its start alone;
//! - a tangent that Cholesky finds indefinite when it factors it (each increment's first, and
//!   any whose CG meets negative curvature) cuts the increment back (for a stable material
//!   that means a predictor too far out; CG that converges on a mildly indefinite tangent
//!   still gives its Newton correction); after 3 such cut-backs in one step, or at the
//!   smallest increment (a genuinely unstable state), LU solves that increment, and the next
//!   increment tries Cholesky again. With AMG-CG an indefinite tangent goes to the direct
//!   solvers as before;
//! - convergence: ‖R‖₂ ≤ max(abs_tol, rel_tol · max(‖R(u_pred)‖₂, ‖R_full(u_pred)‖₂)), the
//!   second reference being the force level (reactions and loads) of the increment; two
//!   round-off stops cover tolerances below the round-off level of the assembled residual
//!   (which is about ε·μ·h² per node whatever the loads): a Newton update with
//!   ‖δu‖∞ ≤ `step_tol`·‖u‖∞, or a line search that finds no decrease once
//!   ‖R‖₂ ≤ `stagnation_tol` · reference;
//! - on failure (an inverted element, a failed line search, divergence, too many iterations,
//!   a singular tangent) the increment is cut by `cut_factor` and retried; after an increment
//!   that converged in at most `easy_iterations` Newton iterations the next one grows by
//!   `grow_factor` (up to `max_increment`); an increment below `min_increment` is an error
//!   ([`FiniteStrainSolveError::IncrementTooSmall`]) that names the step, the load factor, the
//!   last failure with its Newton iteration (an inverted element with its cell tag, centroid and
//!   det F, say) and the residual norms of that last try.
//!
//! # Adjoint
//!
//! The objective is a sum over the requested steps, J = Σ_k j_k(u_k, p), with quantities that
//! are linear in the displacement and in the full residual (the reactions):
//! q_k = aᵀ u_k + cᵀ R_full(u_k; s_k, p). For a hyperelastic body with dead loads the
//! equilibrium of step k, R(u_k; s_k, p) = 0, does not depend on the earlier steps once p is
//! given (the load path does not matter: the converged state is a function of s_k alone, the
//! intermediate increments only help Newton). Hence
//!
//! dJ/dp = Σ_k [∂j_k/∂p − λ_kᵀ ∂R/∂p (u_k)],  K(u_k)ᵀ λ_k = ∂j_k/∂u_k,
//!
//! one transposed solve per step, in reverse step order, with no coupling between steps. With
//! μ_k = c_k − λ_k (λ_k zero at constrained dofs, c_k the reaction weights at them),
//! ∂j_k/∂u_free = a + (∂R_full/∂u)ᵀ c and dJ/dp = Σ_k μ_kᵀ ∂R_full/∂p (the reaction's explicit
//! dependence included). For a path-dependent material (plasticity, damage) this would not hold
//! and the adjoint would couple consecutive steps.
//!
//! The tangent at u_k is the one the last Newton iteration assembled at the converged state
//! (kept with the state when `store_tangents` is on and the last step was a full Newton step;
//! re-assembled otherwise, bit for bit the same); it is factorized in the reverse sweep and
//! the transpose solve uses that factorization — except where the workspace still holds the
//! factorization of the increment that converged to u_k and one solve is due (the last step
//! right after the forward pass; with checkpoints, a re-solved step whose adjoint directly
//! follows it): then CG preconditioned with that factorization solves K(u_k)ᵀ λ_k to a
//! relative residual of 1e-12 (the tangent is symmetric: Cholesky, with LU
//! when Cholesky fails; one solver instance serves every Newton iteration and every adjoint
//! step, so the symbolic analysis is done once). Large systems are solved by AMG-preconditioned
//! CG instead ([`FiniteLinearSolver`], by default from 60,000 unknowns on), falling back to the
//! direct solvers when CG fails.
//!
//! # Quantities
//!
//! [`Quantity`]: the displacement of the node nearest to a point, the displacement
//! interpolated at a material point (whose element and ξ depend on the node coordinates: an
//! explicit coordinate term), the mean displacement of a group's nodes, and the reaction of a
//! fixed, roller or displacement condition. [`PathTerm`]: a weighted sum over the steps, a
//! misfit Σ_k w (q_k − m_k)² to a measured curve, or the squared norm of the whole
//! displacement Σ_k w_k ‖u_k‖² (not linear in u: its seed 2 w_k u_k enters a directly).
//! A step where every seed vanishes (a term that weighs only other steps) costs no
//! factorization in the reverse sweep: its λ_k and its products are zero.
//!
//! # Parameters
//!
//! [`FiniteStrainProblem::register`] binds registry names (`hyperelastic.mu1.<group>`,
//! `hyperelastic.scale_elem.<group>`, `bc.<group>.displacement`, …; see
//! [`FiniteStrainProblem::available_parameters`]) to the model,
//! [`FiniteStrainProblem::apply_parameters`] copies registry values in and
//! [`FiniteStrainProblem::gradient_to_registry`] writes a gradient out. Node coordinates are
//! in [`FiniteStrainGradient::coords`] for the caller's shape parameter.
//!
//! # Memory
//!
//! [`Checkpointing::StoreAll`] keeps every converged state: (n + 1) states of two vectors of
//! 3·n_nodes f64 (the displacement and the predictor's slope), i.e. 48·n_nodes·(n + 1) bytes,
//! plus nnz(K) f64 per state with `store_tangents`.
//! [`Checkpointing::Binomial`] keeps at most `snapshots` of them and re-solves the steps in
//! between from the nearest checkpoint (gradfem_solvers::checkpoint). A re-solved increment
//! repeats the first pass bit for bit (it starts without a factorization either way) once the
//! Cholesky ordering is settled: a pattern large enough for nested dissection switches to it
//! at its second factorization, so the first pass's first increment ran on AMD and a re-solve
//! of it does not, and its state then agrees to round-off. Stored and checkpointed sweeps also
//! differ where one of them solves an adjoint step by CG with a held factorization (above), to
//! that solve's tolerance.

use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use gradfem_mechanical::finite::{FiniteStrainError, FiniteStrainModel, FiniteVjpRequest};
use gradfem_mechanical::hyperelastic::StrainEnergy;
use gradfem_mechanical::linear::BcKind;
use gradfem_mesh::{geometry, reference};
use gradfem_solvers::amg::{AmgCgSolver, AmgParams, CoarseSpace, NearNullspace};
use gradfem_solvers::assembly::AssemblyPattern;
use gradfem_solvers::cg::CgParams;
use gradfem_solvers::checkpoint::{Checkpointing, SweepStats, reverse_sweep};
use gradfem_solvers::error::SolverError;
use gradfem_solvers::linear::{LinearSolver, LuSolver};
use gradfem_solvers::newton::{ARMIJO_C, NewtonParams};
use gradfem_solvers::params::{Gradient, ParamError, ParamId, ParamKind, ParamRegistry, ParamSpec};
use gradfem_solvers::reuse::{ReuseRoute, ReusedCholesky};
use gradfem_solvers::sparse::CsrMatrix;
use thiserror::Error;

pub mod second_order;

/// Settings of the load-stepping driver (module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct LoadStepParams {
    /// Newton settings per increment (tolerances, iterations, line search, divergence).
    pub newton: NewtonParams,
    /// First increment of the load factor (None: the first requested step).
    pub initial_increment: Option<f64>,
    /// Smallest increment before giving up.
    pub min_increment: f64,
    /// Largest increment.
    ///
    /// Newton converging is no proof of the right equilibrium: one solve from rest to a large
    /// stretch can land on a spurious folded state of the discrete body (J > 0 at every Gauss
    /// point; a 2×2×2 Hex8 block pulled from λ = 1 to 7 in one increment did), so bound the
    /// increment where the loads are large.
    pub max_increment: f64,
    /// Factor applied to the increment after a failure (in (0, 1)).
    pub cut_factor: f64,
    /// Factor applied to the increment after an easy convergence (≥ 1).
    pub grow_factor: f64,
    /// An increment that converged in at most this many Newton iterations is easy.
    pub easy_iterations: usize,
    /// Secant predictor along the last increment (else start from the last state).
    pub extrapolate: bool,
    /// Round-off stop: an increment also converges when a Newton update satisfies
    /// ‖δu‖∞ ≤ step_tol · ‖u‖∞ (the residual tolerance may lie below the round-off level of
    /// the assembled residual when the loads are tiny).
    pub step_tol: f64,
    /// Round-off stop: a line search that finds no decrease counts as convergence when
    /// ‖R‖₂ ≤ stagnation_tol · max(‖R(u_pred)‖₂, ‖R_full(u_pred)‖₂) (the Newton direction is a
    /// descent direction, so no decrease means the residual is at its round-off level).
    pub stagnation_tol: f64,
    /// Keep the tangent at each converged state (when the last Newton iterate assembled it) for
    /// the adjoint, instead of re-assembling it there: nnz f64 more per stored state.
    pub store_tangents: bool,
    /// The linear solver of the Newton and adjoint systems.
    pub linear_solver: FiniteLinearSolver,
}

/// The linear solver of the Newton and adjoint systems (the tangent is symmetric).
#[derive(Clone, Debug, PartialEq)]
pub enum FiniteLinearSolver {
    /// Sparse Cholesky (AMD, or nested dissection once a large pattern is refactored), LU
    /// when Cholesky fails: exact, but its fill and work grow fast on 3D meshes (about 7 s per
    /// factorization at 10⁵ Tet4 unknowns with AMD).
    Direct,
    /// Conjugate gradients preconditioned by smoothed-aggregation AMG (3 unknowns per node),
    /// to the relative tolerance of `cg`; the direct solver takes over when the set-up or a
    /// solve fails (an indefinite tangent, no convergence).
    AmgCg {
        /// CG tolerance and iteration limit.
        cg: CgParams,
    },
    /// AMG-CG from `min_unknowns` unknowns on, the direct solver below.
    Auto {
        /// Smallest system solved by AMG-CG.
        min_unknowns: usize,
        /// CG tolerance and iteration limit.
        cg: CgParams,
    },
}

impl FiniteLinearSolver {
    /// By name: `direct`, `amg` (CG to a relative residual of 1e-12) or `auto` (the default);
    /// `None` for any other name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "direct" => Some(FiniteLinearSolver::Direct),
            "amg" => Some(FiniteLinearSolver::AmgCg {
                cg: CgParams { rel_tol: 1e-12, ..CgParams::default() },
            }),
            "auto" => Some(FiniteLinearSolver::default()),
            _ => None,
        }
    }
}

impl Default for FiniteLinearSolver {
    /// AMG-CG (relative tolerance 1e-12) from 60,000 unknowns on, Cholesky below.
    fn default() -> Self {
        FiniteLinearSolver::Auto {
            min_unknowns: 60_000,
            cg: CgParams { rel_tol: 1e-12, ..CgParams::default() },
        }
    }
}

impl Default for LoadStepParams {
    fn default() -> Self {
        LoadStepParams {
            newton: NewtonParams { rel_tol: 1e-10, abs_tol: 1e-12, ..NewtonParams::default() },
            initial_increment: None,
            min_increment: 1e-6,
            max_increment: 1.0,
            cut_factor: 0.5,
            grow_factor: 1.5,
            easy_iterations: 4,
            extrapolate: true,
            step_tol: 1e-13,
            stagnation_tol: 1e-6,
            store_tangents: true,
            linear_solver: FiniteLinearSolver::default(),
        }
    }
}

/// Why one increment failed (the driver cuts the increment and retries).
#[derive(Clone, Debug, PartialEq, Error)]
pub enum IncrementFailure {
    /// An element inverted (or the law failed) at the predictor or at a Newton iterate.
    #[error("Newton iteration {iteration}: {}", without_field_prefix(source))]
    Element {
        /// Newton iteration.
        iteration: usize,
        /// The element error.
        source: Box<FiniteStrainError>,
    },
    /// No step length of the line search decreased the residual.
    #[error(
        "Newton iteration {iteration}: line search failed (‖R‖ = {residual:.3e}, \
         last trial: {last_trial})"
    )]
    LineSearch {
        /// Newton iteration.
        iteration: usize,
        /// ‖R‖₂ at the current iterate.
        residual: f64,
        /// What the last trial gave.
        last_trial: String,
    },
    /// The residual grew past the divergence factor or the iterations ran out.
    #[error(
        "Newton iteration {iteration}: {reason} (‖R‖ = {residual:.3e}, tolerance {tolerance:.3e})"
    )]
    NoConvergence {
        /// Newton iteration.
        iteration: usize,
        /// ‖R‖₂.
        residual: f64,
        /// The tolerance.
        tolerance: f64,
        /// Diverged or out of iterations.
        reason: &'static str,
    },
    /// The linear solver failed.
    #[error("Newton iteration {iteration}: {source}")]
    Linear {
        /// Newton iteration.
        iteration: usize,
        /// The solver's error.
        source: SolverError,
    },
}

/// An element error as part of a message that already says "finite strain".
fn without_field_prefix(e: &FiniteStrainError) -> String {
    let text = e.to_string();
    text.strip_prefix("finite strain: ").map(str::to_string).unwrap_or(text)
}

/// `; residual norms of that try: [r₀, r₁, …]` (three significant digits), or nothing when
/// the try failed before its first residual.
fn residual_list(norms: &[f64]) -> String {
    if norms.is_empty() {
        return String::new();
    }
    let items: Vec<String> = norms.iter().map(|r| format!("{r:.3e}")).collect();
    format!("; residual norms of that try: [{}]", items.join(", "))
}

impl IncrementFailure {
    fn iteration_and_residual(&self) -> (usize, f64) {
        match self {
            IncrementFailure::Element { iteration, .. }
            | IncrementFailure::Linear { iteration, .. } => (*iteration, f64::NAN),
            IncrementFailure::LineSearch { iteration, residual, .. }
            | IncrementFailure::NoConvergence { iteration, residual, .. } => {
                (*iteration, *residual)
            }
        }
    }

    /// Cholesky found the tangent indefinite (and LU was not allowed to take over).
    fn is_indefinite_tangent(&self) -> bool {
        matches!(
            self,
            IncrementFailure::Linear { source: SolverError::NotPositiveDefinite { .. }, .. }
        )
    }
}

/// A failed increment: why, and ‖R‖₂ at each Newton iterate of that try.
type FailedTry = (IncrementFailure, Vec<f64>);

/// Errors of a load-stepping solve or its gradient.
#[derive(Debug, Error)]
pub enum FiniteStrainSolveError {
    /// The model (set-up, or an evaluation outside Newton).
    #[error(transparent)]
    Model(#[from] FiniteStrainError),
    /// The adaptive increment fell below the minimum.
    #[error(
        "finite strain, load step {step} (load factor {load_factor:.6e}): the increment was cut \
         to {increment:.3e}, below the minimum; the last try failed in {cause}{}",
        residual_list(residuals)
    )]
    IncrementTooSmall {
        /// Requested step (1-based).
        step: usize,
        /// The load factor the failed increment aimed at.
        load_factor: f64,
        /// The increment.
        increment: f64,
        /// Newton iteration of the last failure.
        iteration: usize,
        /// Residual at the last failure (NaN when it could not be evaluated).
        residual: f64,
        /// The last failure.
        cause: Box<IncrementFailure>,
        /// ‖R‖₂ of the last try at each of its Newton iterations, from the predictor on.
        residuals: Vec<f64>,
    },
    /// The adjoint's linear solve failed.
    #[error("finite strain, adjoint of load step {step}: {source}")]
    Adjoint {
        /// Requested step (1-based).
        step: usize,
        /// The solver's error.
        source: SolverError,
    },
    /// Invalid Newton settings.
    #[error("finite strain: {0}")]
    Params(SolverError),
    /// A stop was requested (`gradfem_solvers::interrupt`).
    #[error("finite strain, load step {step}: {source}")]
    Interrupted {
        /// Requested step (1-based).
        step: usize,
        /// Where it stopped.
        source: SolverError,
    },
    /// A registry parameter that cannot be bound, or a registry error.
    #[error("finite strain: {0}")]
    Registry(String),
    /// Bad input.
    #[error("finite strain: {what} must be {requirement}, got {value}")]
    InvalidValue {
        /// Which value.
        what: String,
        /// What it must be.
        requirement: &'static str,
        /// The value.
        value: f64,
    },
}

/// A converged state.
#[derive(Clone, Debug, PartialEq)]
pub struct EquilibriumState {
    /// Load factor s.
    pub load: f64,
    /// Full displacement (`3·n_nodes`).
    pub u: Vec<f64>,
    /// du/ds along the last increment (empty before the first one).
    slope: Vec<f64>,
    /// Values of the tangent K(u) on the unknowns (the pattern's order), when kept.
    tangent: Option<Vec<f64>>,
    /// The increment the driver will try next.
    next_increment: f64,
}

impl EquilibriumState {
    /// Whether the tangent at this state is kept for the adjoint.
    pub fn has_tangent(&self) -> bool {
        self.tangent.is_some()
    }
}

/// What the driver did to reach one requested step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepInfo {
    /// Load factor of the step.
    pub load: f64,
    /// Accepted increments.
    pub increments: usize,
    /// Failed (cut) increments.
    pub cut_backs: usize,
    /// Newton iterations of the accepted increments.
    pub newton_iterations: usize,
    /// The failures that caused the cut-backs, in order.
    pub failures: Vec<IncrementFailure>,
}

/// The solution at every requested step.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadPath {
    /// Converged states, one per requested step.
    pub states: Vec<EquilibriumState>,
    /// Driver statistics per requested step.
    pub steps: Vec<StepInfo>,
    /// Reactions per boundary condition at every step.
    pub reactions: Vec<Vec<[f64; 3]>>,
}

/// A scalar read from one converged state.
#[derive(Clone, Debug, PartialEq)]
pub enum Quantity {
    /// d · u at the mesh node nearest to `point` (a material point: the node, so no coordinate
    /// dependence).
    NodeDisplacement {
        /// Point (reference configuration).
        point: [f64; 3],
        /// Direction d.
        direction: [f64; 3],
    },
    /// d · u(X_p) interpolated at the material point X_p (reference configuration) in the
    /// element containing it. X_p is held fixed when nodes move, so q depends on the node
    /// coordinates through ξ(X): ∂q/∂X_bk = −N_b(ξ) (dᵀ ∇u)_k.
    PointDisplacement {
        /// X_p.
        point: [f64; 3],
        /// Direction d.
        direction: [f64; 3],
    },
    /// d · (mean of u over the nodes of a group).
    GroupDisplacement {
        /// Any mesh group.
        group: String,
        /// Direction d.
        direction: [f64; 3],
    },
    /// d · reaction of the boundary condition on `group` (N).
    Reaction {
        /// The group of a fixed, roller or displacement condition.
        group: String,
        /// Direction d.
        direction: [f64; 3],
    },
}

/// One term of a load-path objective.
#[derive(Clone, Debug, PartialEq)]
pub enum PathTerm {
    /// Σ_k w q_k.
    Sum {
        /// The quantity.
        quantity: Quantity,
        /// w.
        weight: f64,
    },
    /// Σ_k w (q_k − m_k)² against measured values m_k (one per requested step).
    Misfit {
        /// The quantity.
        quantity: Quantity,
        /// m_k.
        measured: Vec<f64>,
        /// w.
        weight: f64,
    },
    /// Σ_k w_k ‖u_k‖² = Σ_k w_k Σ_i u_k,i², the squared Euclidean norm of the full
    /// displacement (3 entries per node, constrained dofs included), with one weight per
    /// requested step (0 leaves a step out). Its adjoint seed is ∂j_k/∂u_k = 2 w_k u_k.
    SquaredDisplacement {
        /// w_k, one per requested step.
        weights: Vec<f64>,
    },
}

/// A quantity as weights on the full displacement (a) and on the full residual (c), with the
/// interpolation data of a point quantity (for its explicit coordinate derivative).
#[derive(Clone, Debug)]
struct Resolved {
    a: Vec<(usize, f64)>,
    c: Vec<(usize, f64)>,
    probe: Option<PointProbe>,
}

/// Shape functions N_a(ξ_p) and physical gradients ∇N_a(ξ_p) at a located point, with the
/// reference data its second derivatives in the node coordinates need.
#[derive(Clone, Debug)]
struct PointProbe {
    element: usize,
    nodes: Vec<usize>,
    shape: Vec<f64>,
    grads: Vec<[f64; 3]>,
    /// Reference gradients ∇_ξN_a(ξ_p).
    reference_grads: Vec<[f64; 3]>,
    /// Reference Hessians ∇²_ξN_a(ξ_p).
    reference_hessians: Vec<[[f64; 3]; 3]>,
    /// The element's node coordinates.
    coords: Vec<[f64; 3]>,
    direction: [f64; 3],
}

impl PointProbe {
    /// Adds w ∂q/∂X = −w N_b (dᵀ ∇u) to `coords`.
    fn add_coordinate_derivative(&self, u: &[f64], w: f64, coords: &mut [[f64; 3]]) {
        let mut du = [0.0; 3];
        for (a, &n) in self.nodes.iter().enumerate() {
            let dua: f64 = (0..3).map(|i| self.direction[i] * u[3 * n + i]).sum();
            for k in 0..3 {
                du[k] += dua * self.grads[a][k];
            }
        }
        for (b, &n) in self.nodes.iter().enumerate() {
            for k in 0..3 {
                coords[n][k] -= w * self.shape[b] * du[k];
            }
        }
    }
}

impl Resolved {
    fn new(model: &FiniteStrainModel, q: &Quantity) -> Result<Self, FiniteStrainSolveError> {
        let bad = |message: String| FiniteStrainError::BadGroup { message };
        Ok(match q {
            Quantity::NodeDisplacement { point, direction } => {
                let n = model.nearest_node(*point);
                Resolved {
                    a: (0..3).map(|i| (3 * n + i, direction[i])).collect(),
                    c: vec![],
                    probe: None,
                }
            }
            Quantity::PointDisplacement { point, direction } => {
                let (e, xi) = model.locate(*point)?;
                let ct = model.element_cell_type(e);
                let nodes = model.element_nodes(e).to_vec();
                let nn = nodes.len();
                let mut shape = vec![0.0; nn];
                let mut dn = vec![[0.0; 3]; nn];
                reference::shape_functions_into(ct, xi, &mut shape);
                reference::shape_gradients_into(ct, xi, &mut dn);
                let x: Vec<[f64; 3]> = nodes.iter().map(|&n| model.coords[n]).collect();
                let mut grads = vec![[0.0; 3]; nn];
                geometry::physical_gradients_into(3, &dn, &x, &mut grads);
                let mut hn = vec![[[0.0; 3]; 3]; nn];
                reference::shape_hessians_into(ct, xi, &mut hn);
                let a = nodes
                    .iter()
                    .zip(&shape)
                    .flat_map(|(&n, &na)| (0..3).map(move |i| (3 * n + i, na * direction[i])))
                    .collect();
                Resolved {
                    a,
                    c: vec![],
                    probe: Some(PointProbe {
                        element: e,
                        nodes,
                        shape,
                        grads,
                        reference_grads: dn,
                        reference_hessians: hn,
                        coords: x,
                        direction: *direction,
                    }),
                }
            }
            Quantity::GroupDisplacement { group, direction } => {
                let nodes = model.group_nodes(group)?;
                if nodes.is_empty() {
                    return Err(bad(format!("group '{group}' has no node of the model")).into());
                }
                let w = 1.0 / nodes.len() as f64;
                Resolved {
                    a: nodes
                        .iter()
                        .flat_map(|&n| (0..3).map(move |i| (3 * n + i, w * direction[i])))
                        .collect(),
                    c: vec![],
                    probe: None,
                }
            }
            Quantity::Reaction { group, direction } => {
                let b = model
                    .boundaries()
                    .iter()
                    .position(|bc| {
                        &bc.name == group
                            && matches!(
                                bc.kind,
                                BcKind::Fixed | BcKind::Roller { .. } | BcKind::Displacement { .. }
                            )
                    })
                    .ok_or_else(|| {
                        bad(format!(
                            "no fixed, roller or displacement condition on group '{group}' \
                             for a reaction"
                        ))
                    })?;
                let c = model
                    .constraint_owner()
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| **o == Some(b))
                    .map(|(d, _)| (d, direction[d % 3]))
                    .collect();
                Resolved { a: vec![], c, probe: None }
            }
        })
    }

    /// q = aᵀu + cᵀ R_full(u; s), the reaction part over the elements that touch c.
    fn value(
        &self,
        model: &FiniteStrainModel,
        u: &[f64],
        load: f64,
    ) -> Result<f64, FiniteStrainError> {
        let a: f64 = self.a.iter().map(|&(d, w)| w * u[d]).sum();
        if self.c.is_empty() {
            return Ok(a);
        }
        let mut c = vec![0.0; u.len()];
        for &(d, w) in &self.c {
            c[d] += w;
        }
        Ok(a + model.residual_dot(u, load, &c)?)
    }
}

/// A sum over load steps of per-step terms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadPathObjective {
    /// The terms.
    pub terms: Vec<PathTerm>,
}

/// The gradient of a load-path objective.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FiniteStrainGradient {
    /// J.
    pub value: f64,
    /// Per term, the quantity at every step.
    pub quantities: Vec<Vec<f64>>,
    /// dJ/dp per region, per law parameter.
    pub material: Vec<Vec<f64>>,
    /// dJ/dsₑ of the per-element field.
    pub element_scale: Vec<f64>,
    /// dJ/dX per node.
    pub coords: Vec<[f64; 3]>,
    /// dJ/db per region.
    pub body_force: Vec<[f64; 3]>,
    /// dJ/dt per boundary condition (traction conditions).
    pub traction: Vec<[f64; 3]>,
    /// dJ/dp per boundary condition (pressure conditions).
    pub pressure: Vec<f64>,
    /// dJ/dū per boundary condition and component (displacement conditions).
    pub displacement: Vec<[f64; 3]>,
    /// dJ/dα per region (with a temperature field).
    pub alpha: Vec<f64>,
    /// dJ/dT_ref per region (with a temperature field).
    pub t_ref: Vec<f64>,
    /// dJ/dT per node (with a temperature field; the reverse of the T → u transfer).
    pub temperature: Option<Vec<f64>>,
    /// Forward and reverse work.
    pub stats: SweepStats,
    /// Seconds spent in forward steps (recomputations included).
    pub time_forward_s: f64,
    /// Seconds spent in adjoint steps (tangent, transpose solve, parameter products).
    pub time_adjoint_s: f64,
}

impl FiniteStrainGradient {
    /// All derivatives zero, shaped after `m` (no quantities recorded).
    pub fn zeros(m: &FiniteStrainModel) -> Self {
        let (nr, nb) = (m.regions.len(), m.boundaries().len());
        FiniteStrainGradient {
            material: m.regions.iter().map(|r| vec![0.0; r.law.parameters().len()]).collect(),
            element_scale: vec![0.0; m.n_volume_elements()],
            coords: vec![[0.0; 3]; m.n_nodes()],
            body_force: vec![[0.0; 3]; nr],
            traction: vec![[0.0; 3]; nb],
            pressure: vec![0.0; nb],
            displacement: vec![[0.0; 3]; nb],
            alpha: vec![0.0; nr],
            t_ref: vec![0.0; nr],
            temperature: m.temperature().map(|_| vec![0.0; m.n_nodes()]),
            ..Default::default()
        }
    }
}

impl From<ParamError> for FiniteStrainSolveError {
    fn from(e: ParamError) -> Self {
        FiniteStrainSolveError::Registry(e.to_string())
    }
}

/// A model quantity bound to a registry parameter (see [`FiniteStrainProblem::register`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FiniteBinding {
    /// Law parameter `index` of region `region`.
    Material {
        /// Region.
        region: usize,
        /// Index in the law's parameter vector.
        index: usize,
    },
    /// The per-element field over the elements of a region.
    ElementScale(usize),
    /// α of a region.
    Alpha(usize),
    /// T_ref of a region.
    TRef(usize),
    /// Body force of a region (3 entries).
    BodyForce(usize),
    /// Traction of a condition (3 entries).
    Traction(usize),
    /// Pressure of a condition.
    Pressure(usize),
    /// Prescribed components of a displacement condition (in x, y, z order).
    Displacement(usize, Vec<usize>),
}

/// Cut-backs for an indefinite tangent in one load step before LU may take an increment on.
const INDEFINITE_CUTS: usize = 3;

/// Linear algebra for the driver: Cholesky first, LU when Cholesky fails; AMG-preconditioned
/// CG instead when [`LoadStepParams::linear_solver`] asks for it, with the direct solvers as
/// the fallback when its set-up or a solve fails (an indefinite tangent, no convergence).
struct Workspace {
    k: CsrMatrix,
    cholesky: ReusedCholesky,
    lu: LuSolver,
    /// Cholesky met an indefinite matrix in this increment (or adjoint step): LU until the
    /// next one.
    use_lu: bool,
    amg: Option<AmgCgSolver>,
    /// The rigid-body modes of the reference configuration, the AMG's near-nullspace.
    modes: Option<NearNullspace>,
    /// For quadratic cells, the AMG's first coarse level: the vertices (p-multigrid).
    coarse: Option<Arc<CoarseSpace>>,
    /// ln(relative residual) per CG iteration of the first AMG-CG Newton solve of the current
    /// increment, while later tangents of the increment reuse that solve's hierarchy
    /// (`None`: the next Newton solve sets up a fresh one).
    amg_rate: Option<f64>,
    /// Whether the last `factor` set up AMG-CG (else the direct solvers are factorized).
    amg_active: bool,
    /// The converged state whose increment left the held Cholesky factorization (its
    /// [`StateKey`]), while nothing has replaced that factorization since.
    held_for: Option<StateKey>,
    /// The adjoint step's matrix is in `k` unfactored: its solve runs CG preconditioned with
    /// the held factorization (see [`FiniteStrainProblem::factor_tangent_at`]).
    adjoint_preconditioned: bool,
    /// The converged state whose tangent `k` holds factorized, set by
    /// [`FiniteStrainProblem::factor_tangent_at`] and cleared by every assembly and
    /// factorization and by new parameters: the next adjoint or second-order step at that
    /// state solves with it as it is.
    factored_at: Option<StateKey>,
}

/// Relative residual of an adjoint solve by CG preconditioned with the factorization of a
/// nearby tangent. λ's relative error is at most cond(K) times it; measured against a new
/// factorization, dL/dp of the Kuhn cube (N = 14) moved by 3e-15 relative, the unit test's
/// gradient by less than 1e-9.
const PRECONDITIONED_ADJOINT_REL_TOL: f64 = 1e-12;

/// Identifies a converged state bit for bit (its load factor and an FNV-1a hash of its
/// displacement), to recognize the state whose increment left the held factorization.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StateKey {
    load: u64,
    hash: u64,
}

impl StateKey {
    fn of(u: &[f64], load: f64) -> Self {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for v in u {
            h = (h ^ v.to_bits()).wrapping_mul(0x0000_0100_0000_01b3);
        }
        StateKey { load: load.to_bits(), hash: h }
    }
}

impl Workspace {
    /// The CG settings when `choice` selects AMG-CG for this system's size.
    fn amg_settings<'c>(&self, choice: &'c FiniteLinearSolver) -> Option<&'c CgParams> {
        let n = self.k.n_rows;
        match choice {
            FiniteLinearSolver::Direct => None,
            FiniteLinearSolver::AmgCg { cg } => Some(cg),
            FiniteLinearSolver::Auto { min_unknowns, cg } => (n >= *min_unknowns).then_some(cg),
        }
    }

    fn uses_amg(&self, choice: &FiniteLinearSolver) -> bool {
        self.amg_settings(choice).is_some()
    }

    fn factor(&mut self, choice: &FiniteLinearSolver) -> Result<(), SolverError> {
        self.factored_at = None;
        self.amg_active = false;
        self.adjoint_preconditioned = false;
        self.held_for = None;
        let n = self.k.n_rows;
        if let Some(cg) = self.amg_settings(choice) {
            let (modes, coarse) = (&self.modes, &self.coarse);
            let amg = self.amg.get_or_insert_with(|| {
                // Three unknowns per node when the count allows (aggregation on nodes); the
                // rigid-body modes aggregate by nodes themselves.
                let block_size = if n.is_multiple_of(3) { 3 } else { 1 };
                let solver = AmgCgSolver::new(
                    "finite strain",
                    AmgParams { block_size, ..AmgParams::default() },
                    cg.clone(),
                );
                let solver = match modes {
                    Some(m) => solver.with_near_nullspace(m.clone()),
                    None => solver,
                };
                match coarse {
                    Some(c) => solver.with_coarse_space(c.clone()),
                    None => solver,
                }
            });
            match amg.factor(&self.k) {
                Ok(()) => {
                    self.amg_active = true;
                    return Ok(());
                }
                Err(e) => {
                    tracing::debug!(%e, "finite strain: AMG set-up failed, direct solver instead");
                    self.amg = None;
                }
            }
        }
        self.factor_direct()
    }

    fn factor_direct(&mut self) -> Result<(), SolverError> {
        self.factored_at = None;
        self.amg_active = false;
        self.held_for = None;
        if !self.use_lu {
            match self.cholesky.factor(&self.k) {
                Ok(()) => return Ok(()),
                Err(SolverError::NotPositiveDefinite { .. })
                | Err(SolverError::Singular { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        self.use_lu = true;
        self.lu.factor(&self.k)
    }

    fn solve(&mut self, b: &mut [f64], transpose: bool) -> Result<(), SolverError> {
        if self.adjoint_preconditioned {
            // K is symmetric: the transpose solve is the same solve. Every solve with this K
            // runs CG until one of them factors K itself (then the later ones are direct).
            let route = self.cholesky.solve(&self.k, b, PRECONDITIONED_ADJOINT_REL_TOL);
            match route {
                Ok(ReuseRoute::Preconditioned { .. }) => return Ok(()),
                Ok(ReuseRoute::Factored) => {
                    self.adjoint_preconditioned = false;
                    self.held_for = None;
                    return Ok(());
                }
                Err(SolverError::NotPositiveDefinite { .. })
                | Err(SolverError::Singular { .. }) => {
                    self.adjoint_preconditioned = false;
                    self.held_for = None;
                    self.use_lu = true;
                    self.lu.factor(&self.k)?;
                }
                Err(e) => return Err(e),
            }
        }
        if let (true, Some(amg)) = (self.amg_active, self.amg.as_mut()) {
            let rhs = b.to_vec();
            // The tangent is symmetric: the transpose solve is the same solve.
            match amg.solve_in_place(b) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::debug!(%e, "finite strain: AMG-CG failed, direct solver instead");
                    b.copy_from_slice(&rhs);
                    self.factor_direct()?;
                }
            }
        }
        if !self.use_lu {
            // Symmetric: the transpose solve is the same solve.
            return self.cholesky.solve_factored(b);
        }
        if transpose { self.lu.solve_transpose_in_place(b) } else { self.lu.solve_in_place(b) }
    }

    /// The Newton correction: overwrite `b` with K⁻¹ b for the assembled tangent K, to the
    /// relative residual `rel_tol` (the forcing term of the inexact Newton method).
    ///
    /// With the direct solvers, the Cholesky factorization of an earlier tangent of the same
    /// increment preconditions CG on K while that converges quickly (see
    /// [`ReusedCholesky`]); K is factored when it does not. An indefinite K is an error unless
    /// `allow_lu`, with which LU solves it and the rest of the increment. AMG-CG sets up its
    /// hierarchy for K and solves to its own tolerance.
    fn newton_solve(
        &mut self,
        choice: &FiniteLinearSolver,
        b: &mut [f64],
        rel_tol: f64,
        allow_lu: bool,
    ) -> Result<(), SolverError> {
        self.held_for = None;
        self.adjoint_preconditioned = false;
        if self.uses_amg(choice) && !self.use_lu {
            // AMG-CG stops at the forcing term too (never below its own tolerance), and the
            // later tangents of an increment keep the hierarchy of its first one while CG
            // converges at least half as fast per iteration as with it
            let floor = self.amg_settings(choice).map_or(0.0, |cg| cg.rel_tol);
            let reuse = self.amg_rate.is_some() && self.amg_active && self.amg.is_some();
            if reuse {
                let amg = self.amg.as_mut().expect("checked");
                if amg.update_operator(&self.k).is_err() {
                    self.amg_rate = None;
                    return self.newton_solve(choice, b, rel_tol, allow_lu);
                }
            } else {
                self.factor(choice)?;
            }
            if let (true, Some(amg)) = (self.amg_active, self.amg.as_mut()) {
                let rhs = b.to_vec();
                match amg.solve_with_tolerance(b, rel_tol.max(floor)) {
                    Ok(()) => {
                        let info = amg.last_info().expect("solved");
                        let rate = info.relative_residual().max(1e-300).ln()
                            / info.iterations.max(1) as f64;
                        match self.amg_rate {
                            None => self.amg_rate = Some(rate),
                            Some(fresh) if rate > 0.5 * fresh => self.amg_rate = None,
                            Some(_) => {}
                        }
                        return Ok(());
                    }
                    Err(e) if reuse => {
                        tracing::debug!(%e, "finite strain: AMG-CG with a kept hierarchy failed; a fresh one");
                        b.copy_from_slice(&rhs);
                        self.amg_rate = None;
                        return self.newton_solve(choice, b, rel_tol, allow_lu);
                    }
                    Err(e) => {
                        tracing::debug!(%e, "finite strain: AMG-CG failed, direct solver instead");
                        b.copy_from_slice(&rhs);
                        self.factor_direct()?;
                    }
                }
            }
            return self.solve(b, false);
        }
        if self.use_lu {
            self.factor(choice)?;
            return self.solve(b, false);
        }
        self.amg_active = false;
        match self.cholesky.solve(&self.k, b, rel_tol) {
            Ok(_) => return Ok(()),
            Err(e @ SolverError::NotPositiveDefinite { .. }) if !allow_lu => return Err(e),
            Err(SolverError::NotPositiveDefinite { .. }) | Err(SolverError::Singular { .. }) => {}
            Err(e) => return Err(e),
        }
        self.use_lu = true;
        self.lu.factor(&self.k)?;
        self.lu.solve_in_place(b)
    }
}

/// A finite-strain problem: the model, its assembly pattern and the driver settings.
pub struct FiniteStrainProblem {
    /// The model (parameters, coordinates and loads may be changed between solves).
    pub model: FiniteStrainModel,
    /// Driver settings.
    pub params: LoadStepParams,
    pattern: AssemblyPattern,
    work: Mutex<Workspace>,
    bindings: Vec<(ParamId, FiniteBinding)>,
}

fn norm2(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

impl FiniteStrainProblem {
    /// Builds the assembly pattern of `model`.
    pub fn new(model: FiniteStrainModel, params: LoadStepParams) -> Self {
        let pattern =
            AssemblyPattern::new(model.n_unknowns(), model.element_offsets(), model.element_dofs());
        let work = Workspace {
            k: pattern.new_matrix(),
            cholesky: ReusedCholesky::new("finite strain"),
            lu: LuSolver::new("finite strain"),
            use_lu: false,
            amg: None,
            amg_rate: None,
            modes: {
                let unknowns: Vec<(usize, usize)> =
                    model.dofs().node_of_unknown.iter().map(|&d| (d / 3, d % 3)).collect();
                NearNullspace::rigid_body_modes(&model.coords, &unknowns).ok()
            },
            coarse: crate::fields::mechanical::vertex_coarse_space(
                &model.coords,
                model.vertex_interpolation(),
            )
            .map(Arc::new),
            amg_active: false,
            held_for: None,
            adjoint_preconditioned: false,
            factored_at: None,
        };
        FiniteStrainProblem { model, params, pattern, work: Mutex::new(work), bindings: Vec::new() }
    }

    /// The linear-algebra workspace (a panic elsewhere cannot leave it half-updated in a way
    /// that matters: every use starts by loading or assembling the matrix it needs).
    fn workspace(&self) -> std::sync::MutexGuard<'_, Workspace> {
        self.work.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check_loads(&self, loads: &[f64]) -> Result<(), FiniteStrainSolveError> {
        let mut prev = 0.0;
        for (k, &s) in loads.iter().enumerate() {
            if !(s.is_finite() && s > prev) {
                return Err(FiniteStrainSolveError::InvalidValue {
                    what: format!("load factor of step {}", k + 1),
                    requirement: "finite and greater than the previous one (the first > 0)",
                    value: s,
                });
            }
            prev = s;
        }
        let p = &self.params;
        if let Some(v) = p.initial_increment
            && !(v > 0.0 && v.is_finite())
        {
            return Err(FiniteStrainSolveError::InvalidValue {
                what: "LoadStepParams::initial_increment".into(),
                requirement: "positive",
                value: v,
            });
        }
        if !(p.min_increment > 0.0 && p.max_increment >= p.min_increment) {
            return Err(FiniteStrainSolveError::InvalidValue {
                what: "LoadStepParams::min_increment".into(),
                requirement: "positive and ≤ max_increment",
                value: p.min_increment,
            });
        }
        if !(p.cut_factor > 0.0 && p.cut_factor < 1.0) {
            return Err(FiniteStrainSolveError::InvalidValue {
                what: "LoadStepParams::cut_factor".into(),
                requirement: "in (0, 1)",
                value: p.cut_factor,
            });
        }
        if p.grow_factor.is_nan() || p.grow_factor < 1.0 {
            return Err(FiniteStrainSolveError::InvalidValue {
                what: "LoadStepParams::grow_factor".into(),
                requirement: "≥ 1",
                value: p.grow_factor,
            });
        }
        p.newton.validate().map_err(FiniteStrainSolveError::Params)
    }

    /// The undeformed state at s = 0.
    pub fn initial_state(&self, loads: &[f64]) -> EquilibriumState {
        let first = loads.first().copied().unwrap_or(1.0);
        EquilibriumState {
            load: 0.0,
            u: vec![0.0; 3 * self.model.n_nodes()],
            slope: Vec::new(),
            tangent: None,
            next_increment: self.params.initial_increment.unwrap_or(first),
        }
    }

    /// Solve at every requested load factor (increasing, in (0, ∞); usually ending at 1).
    pub fn solve(&self, loads: &[f64]) -> Result<LoadPath, FiniteStrainSolveError> {
        self.solve_from(self.initial_state(loads), loads, true)
    }

    /// [`Self::solve`] from `start` (e.g. [`Self::initial_state`] with a displacement from
    /// another solver as the first Newton start). Without `keep_tangents` the path's states
    /// drop their stored tangents as they are recorded (a reverse sweep that recomputes from
    /// checkpoints does not read them), so the path holds only displacements.
    pub fn solve_from(
        &self,
        start: EquilibriumState,
        loads: &[f64],
        keep_tangents: bool,
    ) -> Result<LoadPath, FiniteStrainSolveError> {
        self.check_loads(loads)?;
        let mut state = start;
        let mut path = LoadPath { states: Vec::new(), steps: Vec::new(), reactions: Vec::new() };
        for (k, &s) in loads.iter().enumerate() {
            let (next, info) = self.advance(k, &state, s)?;
            path.reactions.push(self.model.reactions(&next.u, s)?);
            path.steps.push(info);
            path.states.push(EquilibriumState {
                load: next.load,
                u: next.u.clone(),
                slope: next.slope.clone(),
                tangent: if keep_tangents { next.tangent.clone() } else { None },
                next_increment: next.next_increment,
            });
            state = next;
        }
        Ok(path)
    }

    /// From a converged state to the one at load factor `target` (requested step `k`, 0-based),
    /// with adaptive increments.
    pub fn advance(
        &self,
        k: usize,
        from: &EquilibriumState,
        target: f64,
    ) -> Result<(EquilibriumState, StepInfo), FiniteStrainSolveError> {
        let p = &self.params;
        let mut state = EquilibriumState {
            load: from.load,
            u: from.u.clone(),
            slope: from.slope.clone(),
            tangent: None,
            next_increment: from.next_increment,
        };
        let mut info = StepInfo { load: target, ..StepInfo::default() };
        let mut inc = from.next_increment.min(p.max_increment);
        // Increments cut back because Cholesky found the tangent indefinite.
        let mut indefinite = 0;
        while state.load < target {
            gradfem_solvers::interrupt::check("finite strain", || {
                format!("load factor {:.6e}", state.load)
            })
            .map_err(|source| FiniteStrainSolveError::Interrupted { step: k + 1, source })?;
            let mut ds = inc.min(target - state.load);
            // Avoid a sliver at the end of the step.
            if target - (state.load + ds) < 1e-3 * ds {
                ds = target - state.load;
            }
            let s = if ds == target - state.load { target } else { state.load + ds };
            let mut u = state.u.clone();
            if p.extrapolate && !state.slope.is_empty() {
                for (ui, vi) in u.iter_mut().zip(&state.slope) {
                    *ui += ds * vi;
                }
            }
            // An indefinite tangent usually means an increment too large for a stable material
            // (a far predictor): cut back. LU takes it on only after `INDEFINITE_CUTS` such
            // cuts in this step, or when the increment cannot be cut any more (a genuinely
            // unstable state: buckling, snap-through).
            let allow_lu = indefinite >= INDEFINITE_CUTS || ds * p.cut_factor < p.min_increment;
            match self.newton_increment(&mut u, s, allow_lu) {
                Ok((iterations, tangent)) => {
                    let mut work = self.workspace();
                    let direct = !work.use_lu && !work.amg_active;
                    work.held_for = direct.then(|| StateKey::of(&u, s));
                    drop(work);
                    info.increments += 1;
                    info.newton_iterations += iterations;
                    let slope = u.iter().zip(&state.u).map(|(a, b)| (a - b) / ds).collect();
                    // Grow after an easy increment of the planned size; keep the plan after
                    // an easy one shortened to hit the step; else go on with what worked.
                    inc = if iterations > p.easy_iterations {
                        ds
                    } else if ds < inc {
                        inc
                    } else {
                        (ds * p.grow_factor).min(p.max_increment)
                    };
                    state = EquilibriumState { load: s, u, slope, tangent, next_increment: inc };
                    tracing::debug!(step = k + 1, load = s, iterations, "finite strain increment");
                }
                Err((failure, residuals)) => {
                    info.cut_backs += 1;
                    if failure.is_indefinite_tangent() {
                        indefinite += 1;
                    }
                    tracing::debug!(step = k + 1, load = s, %failure, "finite strain cut-back");
                    inc = ds * p.cut_factor;
                    if inc < p.min_increment {
                        let (iteration, residual) = failure.iteration_and_residual();
                        return Err(FiniteStrainSolveError::IncrementTooSmall {
                            step: k + 1,
                            load_factor: s,
                            increment: inc,
                            iteration,
                            residual,
                            cause: Box::new(failure),
                            residuals,
                        });
                    }
                    info.failures.push(failure);
                }
            }
        }
        state.next_increment = inc;
        Ok((state, info))
    }

    /// Residual (and tangent into the workspace) on the unknowns at the full displacement `u`.
    fn assemble(
        &self,
        work: &mut Workspace,
        u: &[f64],
        s: f64,
        r: &mut [f64],
        with_tangent: bool,
    ) -> Result<(), FiniteStrainError> {
        let first: std::sync::Mutex<Option<(usize, FiniteStrainError)>> = Default::default();
        let record = |e: usize, err: FiniteStrainError| {
            let mut f = first.lock().unwrap_or_else(|p| p.into_inner());
            if f.as_ref().is_none_or(|(k, _)| e < *k) {
                *f = Some((e, err));
            }
        };
        let m = &self.model;
        if with_tangent {
            work.factored_at = None;
            self.pattern.assemble_into(&mut work.k, r, |e, ke, fe| {
                if let Err(err) = m.element_residual_tangent(e, u, s, Some(ke), fe) {
                    record(e, err);
                }
            });
        } else {
            self.pattern.assemble_vector_into(r, |e, fe| {
                if let Err(err) = m.element_residual_tangent(e, u, s, None, fe) {
                    record(e, err);
                }
            });
        }
        match first.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some((_, err)) => Err(err),
            None => Ok(()),
        }
    }

    /// Newton with line search for R(u; s) = 0 from the full displacement `u` (overwritten
    /// with the solution); returns the number of iterations.
    fn newton_increment(
        &self,
        u: &mut Vec<f64>,
        s: f64,
        allow_lu: bool,
    ) -> Result<(usize, Option<Vec<f64>>), FailedTry> {
        let mut residuals = Vec::new();
        self.newton_iterations(u, s, allow_lu, &mut residuals).map_err(|f| (f, residuals))
    }

    /// [`Self::newton_increment`]'s iterations; `residuals` receives ‖R‖₂ of each iterate.
    fn newton_iterations(
        &self,
        u: &mut Vec<f64>,
        s: f64,
        allow_lu: bool,
        residuals: &mut Vec<f64>,
    ) -> Result<(usize, Option<Vec<f64>>), IncrementFailure> {
        let np = &self.params.newton;
        let m = &self.model;
        let n = m.n_unknowns();
        let mut work = self.workspace();
        // The increment's result depends on its start alone, not on the factorizations
        // earlier increments left behind (checkpointed recomputation repeats it bit for bit).
        // Cholesky first again: an indefinite tangent (a far predictor) sends only the rest of
        // its increment to LU.
        work.cholesky.forget();
        work.amg_rate = None;
        work.held_for = None;
        work.use_lu = false;
        let mut x = m.dofs().gather(u);
        *u = m.nodal_displacement(&x, s);
        let element = |iteration| {
            move |source| IncrementFailure::Element { iteration, source: Box::new(source) }
        };
        let force = norm2(&m.full_residual(u, s).map_err(element(0))?);
        let mut r = vec![0.0; n];
        self.assemble(&mut work, u, s, &mut r, true).map_err(element(0))?;
        let norm0 = norm2(&r);
        residuals.push(norm0);
        let tol = np.abs_tol.max(np.rel_tol * norm0.max(force));
        let mut norm = norm0;
        let mut du = vec![0.0; n];
        let mut r_trial = vec![0.0; n];
        let mut iteration = 0;
        let mut have_tangent = true;
        while norm > tol {
            if iteration == np.max_iterations {
                return Err(IncrementFailure::NoConvergence {
                    iteration,
                    residual: norm,
                    tolerance: tol,
                    reason: "maximum of Newton iterations reached",
                });
            }
            if !have_tangent {
                self.assemble(&mut work, u, s, &mut r, true).map_err(element(iteration))?;
            }
            for (d, ri) in du.iter_mut().zip(&r) {
                *d = -ri;
            }
            // Forcing term: a linear residual far below the quadratic convergence's next
            // residual (0.1 ‖R‖/‖R₀‖, at most 10⁻²), and never needlessly below a tenth of the
            // Newton tolerance.
            let eta = (0.1 * tol / norm).max((0.1 * norm / norm0.max(force)).min(1e-2));
            work.newton_solve(&self.params.linear_solver, &mut du, eta, allow_lu)
                .map_err(|source| IncrementFailure::Linear { iteration, source })?;
            iteration += 1;
            let du_max = du.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let u_max = u.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            if du_max <= self.params.step_tol * u_max {
                x.iter_mut().zip(&du).for_each(|(a, b)| *a += b);
                *u = m.nodal_displacement(&x, s);
                tracing::debug!(iteration, residual = norm, tol, "finite strain: round-off stop");
                return Ok((iteration, None));
            }
            let mut alpha = 1.0;
            let mut steps = 0;
            loop {
                let xt: Vec<f64> = x.iter().zip(&du).map(|(a, b)| a + alpha * b).collect();
                let ut = m.nodal_displacement(&xt, s);
                // The full step also evaluates the tangent: it is accepted most times.
                let with_tangent = steps == 0;
                let outcome = self.assemble(&mut work, &ut, s, &mut r_trial, with_tangent);
                let trial = match outcome {
                    Ok(()) => {
                        let t = norm2(&r_trial);
                        if t.is_finite()
                            && (!np.line_search || t <= (1.0 - ARMIJO_C * alpha) * norm)
                        {
                            x = xt;
                            *u = ut;
                            std::mem::swap(&mut r, &mut r_trial);
                            norm = t;
                            residuals.push(t);
                            have_tangent = with_tangent;
                            break;
                        }
                        format!("‖R‖ = {t:.3e} at step length {alpha:.3e}")
                    }
                    Err(e) => format!("{e} at step length {alpha:.3e}"),
                };
                if !np.line_search || steps == np.max_line_search_steps {
                    if norm <= self.params.stagnation_tol * norm0.max(force) {
                        tracing::debug!(
                            iteration,
                            residual = norm,
                            tol,
                            "finite strain: round-off stop"
                        );
                        return Ok((iteration - 1, None));
                    }
                    return Err(IncrementFailure::LineSearch {
                        iteration,
                        residual: norm,
                        last_trial: trial,
                    });
                }
                steps += 1;
                alpha *= 0.5;
            }
            if norm > np.divergence_factor * norm0.max(tol) {
                return Err(IncrementFailure::NoConvergence {
                    iteration,
                    residual: norm,
                    tolerance: tol,
                    reason: "residual grew past the divergence factor",
                });
            }
        }
        let tangent = (have_tangent && self.params.store_tangents).then(|| work.k.values.clone());
        Ok((iteration, tangent))
    }

    fn resolve(
        &self,
        objective: &LoadPathObjective,
        n_steps: usize,
    ) -> Result<Vec<Resolved>, FiniteStrainSolveError> {
        objective
            .terms
            .iter()
            .map(|t| {
                let per_step = |what: &str, len: usize| {
                    if len == n_steps {
                        Ok(())
                    } else {
                        Err(FiniteStrainSolveError::InvalidValue {
                            what: format!("number of {what}"),
                            requirement: "one per load step",
                            value: len as f64,
                        })
                    }
                };
                let q = match t {
                    PathTerm::Sum { quantity, .. } => quantity,
                    PathTerm::Misfit { quantity, measured, .. } => {
                        per_step("measured values of a misfit term", measured.len())?;
                        quantity
                    }
                    PathTerm::SquaredDisplacement { weights } => {
                        per_step("weights of a squared-displacement term", weights.len())?;
                        return Ok(Resolved { a: vec![], c: vec![], probe: None });
                    }
                };
                Resolved::new(&self.model, q)
            })
            .collect()
    }

    /// J and the per-term quantities of a solved load path.
    pub fn evaluate(
        &self,
        path: &LoadPath,
        objective: &LoadPathObjective,
    ) -> Result<(f64, Vec<Vec<f64>>), FiniteStrainSolveError> {
        let resolved = self.resolve(objective, path.states.len())?;
        let mut value = 0.0;
        let mut quantities = vec![Vec::new(); resolved.len()];
        for (k, st) in path.states.iter().enumerate() {
            let (v, q, _) = self.step_terms(objective, &resolved, k, st)?;
            value += v;
            for (t, qk) in q.into_iter().enumerate() {
                quantities[t].push(qk);
            }
        }
        Ok((value, quantities))
    }

    /// Solve and evaluate J.
    pub fn objective(
        &self,
        loads: &[f64],
        objective: &LoadPathObjective,
    ) -> Result<f64, FiniteStrainSolveError> {
        let path = self.solve(loads)?;
        Ok(self.evaluate(&path, objective)?.0)
    }

    /// Value, quantities and dJ/dq_t of every term at step k.
    fn step_terms(
        &self,
        objective: &LoadPathObjective,
        resolved: &[Resolved],
        k: usize,
        st: &EquilibriumState,
    ) -> Result<(f64, Vec<f64>, Vec<f64>), FiniteStrainSolveError> {
        let mut value = 0.0;
        let mut q = Vec::with_capacity(resolved.len());
        let mut dq = Vec::with_capacity(resolved.len());
        for (t, res) in objective.terms.iter().zip(resolved) {
            // (q_k, dj_k/dq_k); the squared norm is not linear in u, so the adjoint step adds
            // its seed itself and its dj/dq is 0 here.
            let (v, d) = match t {
                PathTerm::SquaredDisplacement { weights } => {
                    let v: f64 = st.u.iter().map(|x| x * x).sum();
                    value += weights[k] * v;
                    (v, 0.0)
                }
                PathTerm::Sum { weight, .. } => {
                    let v = res.value(&self.model, &st.u, st.load)?;
                    value += weight * v;
                    (v, *weight)
                }
                PathTerm::Misfit { measured, weight, .. } => {
                    let v = res.value(&self.model, &st.u, st.load)?;
                    let d = v - measured[k];
                    value += weight * d * d;
                    (v, 2.0 * weight * d)
                }
            };
            q.push(v);
            dq.push(d);
        }
        Ok((value, q, dq))
    }

    /// J and its gradient with respect to the region parameters, the element field, node
    /// coordinates, loads, prescribed displacements and the thermal inputs (module docs), with
    /// the states kept or recomputed as `memory` says; `want` selects the parameter products
    /// (the others are left zero).
    pub fn gradient(
        &self,
        loads: &[f64],
        objective: &LoadPathObjective,
        memory: Checkpointing,
        want: FiniteVjpRequest,
    ) -> Result<FiniteStrainGradient, FiniteStrainSolveError> {
        self.gradient_from(self.initial_state(loads), loads, objective, memory, want)
    }

    /// [`Self::gradient`] with the forward steps started from `start` (as [`Self::solve_from`]).
    pub fn gradient_from(
        &self,
        start: EquilibriumState,
        loads: &[f64],
        objective: &LoadPathObjective,
        memory: Checkpointing,
        want: FiniteVjpRequest,
    ) -> Result<FiniteStrainGradient, FiniteStrainSolveError> {
        self.check_loads(loads)?;
        let resolved = self.resolve(objective, loads.len())?;
        let m = &self.model;
        let out = RefCell::new(FiniteStrainGradient {
            quantities: vec![vec![0.0; loads.len()]; resolved.len()],
            ..FiniteStrainGradient::zeros(m)
        });
        let x0 = start;
        let (t_forward, t_adjoint) = (Cell::new(0.0), Cell::new(0.0));
        let stats = reverse_sweep(
            loads.len(),
            &x0,
            memory,
            |k, x| {
                let t = Instant::now();
                let next = self.advance(k, x, loads[k]).map(|(s, _)| s);
                t_forward.set(t_forward.get() + t.elapsed().as_secs_f64());
                next
            },
            |k, _, x| {
                let t = Instant::now();
                let done =
                    self.adjoint_step(objective, &resolved, k, x, want, &mut out.borrow_mut());
                t_adjoint.set(t_adjoint.get() + t.elapsed().as_secs_f64());
                done
            },
        )?;
        let mut g = out.into_inner();
        g.stats = stats;
        g.time_forward_s = t_forward.get();
        g.time_adjoint_s = t_adjoint.get();
        tracing::debug!(
            steps = loads.len(),
            forward_s = g.time_forward_s,
            adjoint_s = g.time_adjoint_s,
            "finite strain gradient"
        );
        Ok(g)
    }

    /// The gradient of [`FiniteStrainProblem::gradient`] from a path that [`solve`] returned
    /// for the same loads and parameters: the reverse sweep over its stored states (and
    /// tangents), without running the forward steps again.
    ///
    /// [`solve`]: FiniteStrainProblem::solve
    pub fn gradient_from_path(
        &self,
        path: &LoadPath,
        objective: &LoadPathObjective,
        want: FiniteVjpRequest,
    ) -> Result<FiniteStrainGradient, FiniteStrainSolveError> {
        let n = path.states.len();
        let resolved = self.resolve(objective, n)?;
        let mut g = FiniteStrainGradient {
            quantities: vec![vec![0.0; n]; resolved.len()],
            ..FiniteStrainGradient::zeros(&self.model)
        };
        let t = Instant::now();
        for k in (0..n).rev() {
            self.adjoint_step(objective, &resolved, k, &path.states[k], want, &mut g)?;
        }
        g.stats = SweepStats { forward_steps: 0, adjoint_steps: n, max_stored_states: n };
        g.time_adjoint_s = t.elapsed().as_secs_f64();
        Ok(g)
    }

    fn adjoint_step(
        &self,
        objective: &LoadPathObjective,
        resolved: &[Resolved],
        k: usize,
        st: &EquilibriumState,
        want: FiniteVjpRequest,
        g: &mut FiniteStrainGradient,
    ) -> Result<(), FiniteStrainSolveError> {
        let (value, q, dq) = self.step_terms(objective, resolved, k, st)?;
        g.value += value;
        for (t, qk) in q.into_iter().enumerate() {
            g.quantities[t][k] = qk;
        }
        self.seeded_adjoint_step(objective, resolved, k, st, &dq, want, g, false)
    }

    /// Load K(u_k) (stored or re-assembled) into the workspace and factor it — or, for
    /// `single_solve`, keep the factorization the increment that converged to u_k left, for
    /// a CG solve preconditioned with it.
    fn factor_tangent_at(
        &self,
        k: usize,
        st: &EquilibriumState,
        single_solve: bool,
    ) -> Result<(), FiniteStrainSolveError> {
        let mut work = self.workspace();
        let key = StateKey::of(&st.u, st.load);
        if work.factored_at == Some(key) {
            // Factorized at this state by the last call, untouched since.
            work.adjoint_preconditioned = false;
            return Ok(());
        }
        // A converged state's tangent is tried with Cholesky whatever the last increment used.
        work.use_lu = false;
        work.factored_at = None;
        match &st.tangent {
            Some(values) => work.k.values.copy_from_slice(values),
            None => {
                let mut r = vec![0.0; self.model.n_unknowns()];
                self.assemble(&mut work, &st.u, st.load, &mut r, true)?;
            }
        }
        // Right after the increment that converged to this state (the last step of a sweep),
        // the factorization it left preconditions CG on K(u_k) instead of a new one.
        let direct = !work.uses_amg(&self.params.linear_solver);
        if single_solve && direct && work.held_for == Some(key) {
            work.adjoint_preconditioned = true;
            return Ok(());
        }
        work.adjoint_preconditioned = false;
        work.factor(&self.params.linear_solver)
            .map_err(|source| FiniteStrainSolveError::Adjoint { step: k + 1, source })?;
        work.factored_at = Some(key);
        Ok(())
    }

    /// The adjoint of step k for the seed Σ_t dq_t ∂q_t/∂u (plus the squared-displacement
    /// terms' own seeds): one transposed solve with K(u_k), then −μᵀ ∂R/∂p added into `g`.
    /// With `factored`, the workspace already holds the factorization of K(u_k)
    /// ([`Self::factor_tangent_at`]); otherwise it is factored here, only when there is a seed.
    #[allow(clippy::too_many_arguments)]
    fn seeded_adjoint_step(
        &self,
        objective: &LoadPathObjective,
        resolved: &[Resolved],
        k: usize,
        st: &EquilibriumState,
        dq: &[f64],
        want: FiniteVjpRequest,
        g: &mut FiniteStrainGradient,
        factored: bool,
    ) -> Result<(), FiniteStrainSolveError> {
        let m = &self.model;
        if want.coords {
            for (res, w) in resolved.iter().zip(dq) {
                if let Some(probe) = &res.probe {
                    probe.add_coordinate_derivative(&st.u, *w, &mut g.coords);
                }
            }
        }
        let nf = 3 * m.n_nodes();
        let (mut a, c) = weighted_seeds(resolved, dq, nf);
        add_squared_displacement_seed(objective, k, &st.u, &mut a);
        if a.iter().chain(&c).all(|v| *v == 0.0) {
            // No seed at this step (e.g. a term that weighs only other steps): λ = μ = 0 and
            // every product vanishes, so the tangent is neither factorized nor solved.
            return Ok(());
        }
        // The factorization (sequential) runs beside the reaction rows Kᵀc (parallel).
        let right_hand_side = || -> Result<Vec<f64>, FiniteStrainSolveError> {
            let mut rhs_full = a.clone();
            if c.iter().any(|v| *v != 0.0) {
                let kc = m.tangent_transpose_product(&st.u, st.load, &c)?;
                rhs_full.iter_mut().zip(&kc).for_each(|(r, v)| *r += v);
            }
            Ok(m.dofs().gather(&rhs_full))
        };
        let (factoring, rhs) = rayon::join(
            || if factored { Ok(()) } else { self.factor_tangent_at(k, st, true) },
            right_hand_side,
        );
        factoring?;
        let mut lambda = rhs?;
        self.workspace()
            .solve(&mut lambda, true)
            .map_err(|source| FiniteStrainSolveError::Adjoint { step: k + 1, source })?;
        // μ = c − λ (λ zero at constrained dofs).
        let mut lam_full = vec![0.0; nf];
        m.dofs().scatter(&lambda, &mut lam_full);
        let mu: Vec<f64> = c.iter().zip(&lam_full).map(|(c, l)| c - l).collect();
        self.add_parameter_products(st, &a, &mu, want, g)
    }

    /// Add `μᵀ ∂R_full/∂q` at state `st` into `g` for the requested parameters, with the
    /// prescribed values' chain: a displacement condition's value ū moves its dofs by s ū, so
    /// it also collects `s a_c` of the explicit seed `a` on the displacement (full dofs).
    fn add_parameter_products(
        &self,
        st: &EquilibriumState,
        a: &[f64],
        mu: &[f64],
        want: FiniteVjpRequest,
        g: &mut FiniteStrainGradient,
    ) -> Result<(), FiniteStrainSolveError> {
        let m = &self.model;
        let vjp = m.parameter_vjp(&st.u, st.load, mu, want)?;
        for (gr, vr) in g.material.iter_mut().zip(&vjp.material) {
            gr.iter_mut().zip(vr).for_each(|(a, b)| *a += b);
        }
        g.element_scale.iter_mut().zip(&vjp.element_scale).for_each(|(a, b)| *a += b);
        if let Some(cv) = &vjp.coords {
            for (gx, vx) in g.coords.iter_mut().zip(cv) {
                for i in 0..3 {
                    gx[i] += vx[i];
                }
            }
        }
        for r in 0..vjp.alpha.len() {
            g.alpha[r] += vjp.alpha[r];
            g.t_ref[r] += vjp.t_ref[r];
        }
        if let (Some(gt), Some(vt)) = (&mut g.temperature, &vjp.temperature) {
            gt.iter_mut().zip(vt).for_each(|(a, b)| *a += b);
        }
        for (r, b) in vjp.body_force.iter().enumerate() {
            for i in 0..3 {
                g.body_force[r][i] += b[i];
            }
        }
        for b in 0..vjp.traction.len() {
            for i in 0..3 {
                g.traction[b][i] += vjp.traction[b][i];
            }
            g.pressure[b] += vjp.pressure[b];
        }
        // Prescribed values: s a_c (explicit) + s (K_fullᵀ μ)_c, for displacement conditions.
        for (d, o) in m.constraint_owner().iter().enumerate() {
            if let Some(b) = *o
                && want.displacement
                && matches!(m.boundaries()[b].kind, BcKind::Displacement { .. })
            {
                g.displacement[b][d % 3] += st.load * a[d];
            }
        }
        for (b, bc) in m.boundaries().iter().enumerate() {
            if matches!(bc.kind, BcKind::Displacement { .. }) {
                for i in 0..3 {
                    g.displacement[b][i] += vjp.displacement[b][i];
                }
            }
        }
        Ok(())
    }
}

/// Σ_t w_t a_t and Σ_t w_t c_t: the displacement and residual weights of the quantities of
/// `resolved` (full dofs), each term weighted by `w_t`.
fn weighted_seeds(resolved: &[Resolved], weights: &[f64], nf: usize) -> (Vec<f64>, Vec<f64>) {
    let mut a = vec![0.0; nf];
    let mut c = vec![0.0; nf];
    for (res, w) in resolved.iter().zip(weights) {
        if *w == 0.0 {
            continue;
        }
        for &(d, v) in &res.a {
            a[d] += w * v;
        }
        for &(d, v) in &res.c {
            c[d] += w * v;
        }
    }
    (a, c)
}

/// Add 2 w_k v to `a` for every squared-displacement term with a weight at step k: the seed
/// ∂j_k/∂u_k at v = u_k, or its derivative along v = δu_k.
fn add_squared_displacement_seed(
    objective: &LoadPathObjective,
    k: usize,
    v: &[f64],
    a: &mut [f64],
) {
    for t in &objective.terms {
        if let PathTerm::SquaredDisplacement { weights } = t
            && weights[k] != 0.0
        {
            let w2 = 2.0 * weights[k];
            a.iter_mut().zip(v).for_each(|(ai, vi)| *ai += w2 * vi);
        }
    }
}

/// The quantities q_{t,k} (per term t, per step k) and their derivatives dq_{t,k}/dp.
pub type QuantityGradients = (Vec<Vec<f64>>, Vec<Vec<FiniteStrainGradient>>);

/// Derivatives of every quantity at every step, for least-squares fits.
impl FiniteStrainProblem {
    /// The quantities q_{t,k} of every term t at every step k of a solved `path` and their
    /// derivatives dq_{t,k}/dp (for a squared-displacement term q = ‖u_k‖²), one
    /// [`FiniteStrainGradient`] per term and step (its `value` and `quantities` left empty).
    ///
    /// With dead loads each equilibrium R(u_k; s_k, p) = 0 ties u_k to p alone, not to the
    /// earlier states, so the adjoint of q_{t,k} lives at step k only: every row costs one
    /// transposed solve with the tangent K(u_k) (stored, or assembled at u_k) and one
    /// parameter product −μᵀ ∂R/∂p, on the states the forward run already holds — for one
    /// term the work of one [`FiniteStrainProblem::gradient`] reverse sweep. Forward
    /// sensitivities would take one solve per parameter and step, and a Jacobian-vector
    /// product of ∂R/∂p that the model does not offer.
    pub fn quantity_gradients(
        &self,
        path: &LoadPath,
        objective: &LoadPathObjective,
        want: FiniteVjpRequest,
    ) -> Result<QuantityGradients, FiniteStrainSolveError> {
        let n = path.states.len();
        let resolved = self.resolve(objective, n)?;
        let m = &self.model;
        let zero = FiniteStrainGradient::zeros(m);
        let nt = objective.terms.len();
        let mut values = vec![vec![0.0; n]; nt];
        let mut grads = vec![vec![zero; n]; nt];
        // Terms other than Σ|u|² carry their seed in `dq`: an objective without terms then
        // adds nothing of its own.
        let no_terms = LoadPathObjective { terms: Vec::new() };
        for (k, st) in path.states.iter().enumerate() {
            let (_, q, _) = self.step_terms(objective, &resolved, k, st)?;
            // One factorization of K(u_k) serves every term's transposed solve.
            if nt > 0 {
                // With several terms a factorization serves them all.
                self.factor_tangent_at(k, st, nt == 1)?;
            }
            for (t, term) in objective.terms.iter().enumerate() {
                values[t][k] = q[t];
                // A one-term objective whose seed at step k is ∂q_{t,k}/∂u.
                let (single, dq) = match term {
                    PathTerm::SquaredDisplacement { .. } => {
                        let mut weights = vec![0.0; n];
                        weights[k] = 1.0;
                        (
                            LoadPathObjective {
                                terms: vec![PathTerm::SquaredDisplacement { weights }],
                            },
                            0.0,
                        )
                    }
                    _ => (no_terms.clone(), 1.0),
                };
                self.seeded_adjoint_step(
                    &single,
                    &resolved[t..=t],
                    k,
                    st,
                    &[dq],
                    want,
                    &mut grads[t][k],
                    true,
                )?;
            }
        }
        Ok((values, grads))
    }
}

/// Registry parameters.
impl FiniteStrainProblem {
    /// The names [`FiniteStrainProblem::register`] accepts: `hyperelastic.<p>.<group>` for every
    /// law parameter p of a region (`mu1`, `alpha1`, …, `kappa`; `mu`; `c10`, `c01`; `young`,
    /// `poisson`), `hyperelastic.scale_elem.<group>` (the per-element field, one entry per cell
    /// of the region), `hyperelastic.alpha.<group>`, `hyperelastic.t_ref.<group>`,
    /// `hyperelastic.body_force.<group>` (3 entries), `bc.<group>.traction` (3),
    /// `bc.<group>.pressure`, `bc.<group>.displacement` (the prescribed components, x, y, z order).
    pub fn available_parameters(&self) -> Vec<String> {
        let m = &self.model;
        let mut names = Vec::new();
        for r in &m.regions {
            for p in r.law.parameter_names() {
                names.push(format!("hyperelastic.{p}.{}", r.name));
            }
            for what in ["scale_elem", "alpha", "t_ref", "body_force"] {
                names.push(format!("hyperelastic.{what}.{}", r.name));
            }
        }
        for b in m.boundaries() {
            match b.kind {
                BcKind::Traction { .. } => names.push(format!("bc.{}.traction", b.name)),
                BcKind::Pressure { .. } => names.push(format!("bc.{}.pressure", b.name)),
                BcKind::Displacement { .. } => names.push(format!("bc.{}.displacement", b.name)),
                _ => {}
            }
        }
        names
    }

    fn binding_for(
        &self,
        name: &str,
    ) -> Result<(FiniteBinding, ParamSpec), FiniteStrainSolveError> {
        let unknown = || {
            FiniteStrainSolveError::Registry(format!(
                "cannot register '{name}': the finite-strain field offers {}",
                self.available_parameters().join(", ")
            ))
        };
        let m = &self.model;
        if let Some(rest) = name.strip_prefix("hyperelastic.") {
            let (what, g) = rest.split_once('.').ok_or_else(unknown)?;
            let r = m.regions.iter().position(|r| r.name == g).ok_or_else(unknown)?;
            let region = &m.regions[r];
            return Ok(match what {
                "scale_elem" => (
                    FiniteBinding::ElementScale(r),
                    ParamSpec::vector(
                        name,
                        ParamKind::PerElement { group: g.to_string() },
                        region.elements.iter().map(|&e| m.element_scale[e]).collect(),
                    )
                    .with_bounds(Some(0.0), None)
                    .with_doc("scale of the shear-like law parameters in each cell", "1"),
                ),
                "alpha" => (
                    FiniteBinding::Alpha(r),
                    ParamSpec::scalar(name, region.alpha)
                        .with_doc("thermal expansion coefficient α", "1/K"),
                ),
                "t_ref" => (
                    FiniteBinding::TRef(r),
                    ParamSpec::scalar(name, region.t_ref).with_doc("stress-free temperature", "K"),
                ),
                "body_force" => (
                    FiniteBinding::BodyForce(r),
                    ParamSpec::vector(name, ParamKind::Field, region.body_force.to_vec())
                        .with_doc("body force per reference volume (x, y, z)", "N/m³"),
                ),
                p => {
                    let names = region.law.parameter_names();
                    let index = names.iter().position(|n| n == p).ok_or_else(unknown)?;
                    let value = region.law.parameters()[index];
                    let spec = ParamSpec::scalar(name, value);
                    let spec = match p {
                        "kappa" | "young" => spec.with_bounds(Some(0.0), None),
                        "poisson" => spec.with_bounds(Some(-1.0), Some(0.5)),
                        _ => spec,
                    };
                    (
                        FiniteBinding::Material { region: r, index },
                        spec.with_doc(
                            format!("{} parameter {p}", region.law.name()),
                            // Moduli in Pa; exponents and Poisson's ratio are numbers.
                            if p.starts_with("alpha") || p == "poisson" { "1" } else { "Pa" },
                        ),
                    )
                }
            });
        }
        let rest = name.strip_prefix("bc.").ok_or_else(unknown)?;
        let (g, field) = rest.rsplit_once('.').ok_or_else(unknown)?;
        let b = m.boundaries().iter().position(|b| b.name == g).ok_or_else(unknown)?;
        Ok(match (field, &m.boundaries()[b].kind) {
            ("pressure", BcKind::Pressure { pressure }) => (
                FiniteBinding::Pressure(b),
                ParamSpec::scalar(name, *pressure).with_doc("dead pressure into the body", "Pa"),
            ),
            ("traction", BcKind::Traction { traction }) => (
                FiniteBinding::Traction(b),
                ParamSpec::vector(name, ParamKind::Field, traction.to_vec())
                    .with_doc("dead traction vector (x, y, z)", "Pa"),
            ),
            ("displacement", BcKind::Displacement { value }) => {
                let comps: Vec<usize> = (0..3).filter(|&c| value[c].is_some()).collect();
                let values: Vec<f64> = comps.iter().filter_map(|&c| value[c]).collect();
                let spec = if values.len() == 1 {
                    ParamSpec::scalar(name, values[0])
                } else {
                    ParamSpec::vector(name, ParamKind::Field, values)
                };
                (
                    FiniteBinding::Displacement(b, comps),
                    spec.with_doc("prescribed displacement components at load factor 1", "m"),
                )
            }
            _ => return Err(unknown()),
        })
    }

    /// Register parameter `name` (see [`FiniteStrainProblem::available_parameters`]) with its
    /// current value, optionally with bounds, and bind it to the model.
    pub fn register(
        &mut self,
        registry: &mut ParamRegistry,
        name: &str,
        bounds: Option<[f64; 2]>,
    ) -> Result<ParamId, FiniteStrainSolveError> {
        let (binding, spec) = self.binding_for(name)?;
        let spec = match bounds {
            Some([lo, hi]) => spec.with_bounds(Some(lo), Some(hi)),
            None => spec,
        };
        let id = registry.register(spec)?;
        self.bindings.push((id, binding));
        Ok(id)
    }

    /// The registered parameters and what they are bound to.
    pub fn bindings(&self) -> &[(ParamId, FiniteBinding)] {
        &self.bindings
    }

    /// The mesh's element tags of the entries of each per-element parameter, in the
    /// parameter's order (for `gradients.json`).
    pub fn element_parameter_tags(&self) -> Vec<(ParamId, Vec<u64>)> {
        let mut out = Vec::new();
        for (id, b) in &self.bindings {
            if let FiniteBinding::ElementScale(r) = b {
                let tags = self.model.regions[*r]
                    .elements
                    .iter()
                    .map(|&e| self.model.element_cell_tag(e))
                    .collect();
                out.push((*id, tags));
            }
        }
        out
    }

    /// Copy the registry's values of the bound parameters into the model.
    pub fn apply_parameters(&mut self, reg: &ParamRegistry) -> Result<(), FiniteStrainSolveError> {
        self.workspace().factored_at = None;
        for (id, binding) in &self.bindings {
            let v = reg.values(*id);
            let m = &mut self.model;
            match binding {
                FiniteBinding::Material { region, index } => {
                    let mut p = m.region_parameters(*region);
                    p[*index] = v[0];
                    m.set_region_parameters(*region, &p)?;
                }
                FiniteBinding::ElementScale(r) => {
                    for (i, e) in m.regions[*r].elements.clone().into_iter().enumerate() {
                        m.element_scale[e] = v[i];
                    }
                }
                FiniteBinding::Alpha(r) => m.regions[*r].alpha = v[0],
                FiniteBinding::TRef(r) => m.regions[*r].t_ref = v[0],
                FiniteBinding::BodyForce(r) => m.regions[*r].body_force = [v[0], v[1], v[2]],
                FiniteBinding::Pressure(b) => {
                    m.set_boundary_kind(*b, BcKind::Pressure { pressure: v[0] })
                }
                FiniteBinding::Traction(b) => {
                    m.set_boundary_kind(*b, BcKind::Traction { traction: [v[0], v[1], v[2]] })
                }
                FiniteBinding::Displacement(b, comps) => {
                    let mut value = [None; 3];
                    for (k, &c) in comps.iter().enumerate() {
                        value[c] = Some(v[k]);
                    }
                    m.set_boundary_kind(*b, BcKind::Displacement { value });
                }
            }
        }
        Ok(())
    }

    /// The parameter products the bound parameters need (coordinates never: they belong to a
    /// shape parameter handled by the caller; ask [`FiniteVjpRequest::ALL`] for them).
    pub fn vjp_request(&self) -> FiniteVjpRequest {
        let mut want = FiniteVjpRequest {
            material: false,
            loads: false,
            displacement: false,
            thermal: false,
            coords: false,
        };
        for (_, b) in &self.bindings {
            match b {
                FiniteBinding::Material { .. } | FiniteBinding::ElementScale(_) => {
                    want.material = true
                }
                FiniteBinding::Alpha(_) | FiniteBinding::TRef(_) => want.thermal = true,
                FiniteBinding::BodyForce(_)
                | FiniteBinding::Traction(_)
                | FiniteBinding::Pressure(_) => want.loads = true,
                FiniteBinding::Displacement(..) => want.displacement = true,
            }
        }
        want
    }

    /// Write the derivatives of `g` into the entries of the bound parameters of `out`.
    pub fn gradient_to_registry(&self, g: &FiniteStrainGradient, out: &mut Gradient) {
        for (id, binding) in &self.bindings {
            let d = out.get_mut(*id);
            match binding {
                FiniteBinding::Material { region, index } => d[0] = g.material[*region][*index],
                FiniteBinding::ElementScale(r) => {
                    for (i, &e) in self.model.regions[*r].elements.iter().enumerate() {
                        d[i] = g.element_scale[e];
                    }
                }
                FiniteBinding::Alpha(r) => d[0] = g.alpha[*r],
                FiniteBinding::TRef(r) => d[0] = g.t_ref[*r],
                FiniteBinding::BodyForce(r) => d.copy_from_slice(&g.body_force[*r]),
                FiniteBinding::Traction(b) => d.copy_from_slice(&g.traction[*b]),
                FiniteBinding::Pressure(b) => d[0] = g.pressure[*b],
                FiniteBinding::Displacement(b, comps) => {
                    for (k, &c) in comps.iter().enumerate() {
                        d[k] = g.displacement[*b][c];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gradfem_mechanical::finite::{FiniteRegionSpec, HyperelasticLaw};
    use gradfem_mechanical::hyperelastic::{NeoHookean, Volumetric};
    use gradfem_mechanical::linear::BcSpec;
    use gradfem_mesh::CellType;
    use gradfem_mesh::generate::{BoxSpec, box_mesh};

    /// The unit cube of `cell` cells (`n` per side) of one material `law`, clamped on x = 0
    /// and pulled by the dead `traction` on x = 1 (the tests of this module and its children).
    pub(super) fn pulled_block(
        n: usize,
        cell: CellType,
        law: HyperelasticLaw,
        traction: [f64; 3],
    ) -> FiniteStrainProblem {
        let mesh = box_mesh(&BoxSpec::unit_cube(n, cell));
        let model = FiniteStrainModel::new(
            &mesh,
            &[FiniteRegionSpec {
                group: "domain".into(),
                law,
                alpha: 0.0,
                t_ref: 0.0,
                body_force: [0.0; 3],
            }],
            &[
                BcSpec { group: "xmin".into(), kind: BcKind::Fixed },
                BcSpec { group: "xmax".into(), kind: BcKind::Traction { traction } },
            ],
        )
        .unwrap();
        FiniteStrainProblem::new(model, LoadStepParams::default())
    }

    fn problem() -> FiniteStrainProblem {
        let law = HyperelasticLaw::NeoHookean(NeoHookean {
            mu: 1.0,
            kappa: 2.0,
            volumetric: Volumetric::Quadratic,
        });
        pulled_block(1, CellType::Hex8, law, [0.3, 0.0, 0.0])
    }

    #[test]
    fn load_factors_and_settings_are_checked() {
        let mut p = problem();
        for loads in [&[0.5, 0.5][..], &[0.0], &[f64::NAN], &[-1.0]] {
            assert!(
                matches!(p.solve(loads), Err(FiniteStrainSolveError::InvalidValue { .. })),
                "{loads:?}"
            );
        }
        p.params.cut_factor = 1.0;
        assert!(matches!(p.solve(&[1.0]), Err(FiniteStrainSolveError::InvalidValue { .. })));
        p.params.cut_factor = 0.5;
        p.params.newton.max_iterations = 0;
        assert!(matches!(p.solve(&[1.0]), Err(FiniteStrainSolveError::Params(_))));
    }

    #[test]
    fn quantities_are_resolved_or_named() {
        let p = problem();
        let reaction = |group: &str| {
            Resolved::new(
                &p.model,
                &Quantity::Reaction { group: group.into(), direction: [1.0, 0.0, 0.0] },
            )
        };
        // xmin is fixed: four nodes, each with its x component.
        assert_eq!(reaction("xmin").unwrap().c.len(), 12);
        let err = reaction("xmax").unwrap_err().to_string();
        assert!(err.contains("xmax"), "{err}");
        let mean = Resolved::new(
            &p.model,
            &Quantity::GroupDisplacement { group: "xmax".into(), direction: [0.0, 0.0, 2.0] },
        )
        .unwrap();
        let total: f64 = mean.a.iter().map(|(_, w)| w).sum();
        assert!((total - 2.0).abs() < 1e-15);
        let objective = LoadPathObjective {
            terms: vec![PathTerm::Misfit {
                quantity: Quantity::GroupDisplacement {
                    group: "xmax".into(),
                    direction: [1.0, 0.0, 0.0],
                },
                measured: vec![0.1],
                weight: 1.0,
            }],
        };
        assert!(matches!(
            p.gradient(&[0.5, 1.0], &objective, Checkpointing::StoreAll, FiniteVjpRequest::ALL),
            Err(FiniteStrainSolveError::InvalidValue { .. })
        ));
    }

    #[test]
    fn traction_loaded_block_grows_its_increments() {
        let p = problem();
        let path = p.solve(&[0.1, 0.2, 0.3, 1.0]).unwrap();
        assert_eq!(path.states.len(), 4);
        // The reaction balances the dead load: 0.3 N/m² on a unit face.
        let r = path.reactions[3][0][0];
        assert!((r + 0.3).abs() < 1e-9, "{r}");
        // Easy increments: the last step (0.7 of load) starts from a grown increment.
        assert!(path.steps[3].increments <= 3 && path.steps[3].cut_backs == 0, "{:?}", path.steps);
    }

    #[test]
    fn gradient_from_a_solved_path_equals_the_recomputing_sweep() {
        let p = problem();
        let loads = [0.25, 0.5, 1.0];
        let objective = LoadPathObjective {
            terms: vec![PathTerm::Misfit {
                quantity: Quantity::GroupDisplacement {
                    group: "xmax".into(),
                    direction: [1.0, 0.0, 0.0],
                },
                measured: vec![0.01, 0.02, 0.05],
                weight: 1.0,
            }],
        };
        let swept = p.gradient(&loads, &objective, Checkpointing::StoreAll, FiniteVjpRequest::ALL);
        let path = p.solve(&loads).unwrap();
        let stored = p.gradient_from_path(&path, &objective, FiniteVjpRequest::ALL).unwrap();
        let swept = swept.unwrap();
        assert!(stored.value > 0.0);
        assert_eq!(stored.value, swept.value);
        assert_eq!(stored.quantities, swept.quantities);
        assert_eq!(stored.material, swept.material);
        assert_eq!(stored.coords, swept.coords);
        assert_eq!(stored.traction, swept.traction);
        assert_eq!(stored.stats.forward_steps, 0);
    }

    /// An increment depends on its start alone, not on what the workspace solved before: the
    /// re-solve of a checkpointed step repeats the first pass bit for bit.
    #[test]
    fn an_increment_repeats_bit_for_bit_whatever_was_solved_before() {
        let p = problem();
        let x0 = p.initial_state(&[0.5, 1.0]);
        let (first, _) = p.advance(0, &x0, 0.5).unwrap();
        let (second, _) = p.advance(1, &first, 1.0).unwrap();
        // Other solves in between leave other factorizations in the workspace.
        p.solve(&[0.3, 0.9]).unwrap();
        let (again, _) = p.advance(1, &first, 1.0).unwrap();
        assert_eq!(again.u, second.u);
        let (first_again, _) = p.advance(0, &x0, 0.5).unwrap();
        assert_eq!(first_again.u, first.u);
    }

    /// The last step's adjoint right after the forward pass solves by CG with the factorization
    /// its increment left; the gradient equals the one from a new factorization of K(u_n).
    #[test]
    fn last_step_adjoint_reuses_the_increments_factorization() {
        let p = problem();
        let loads = [0.5, 1.0];
        let objective = LoadPathObjective {
            terms: vec![PathTerm::Misfit {
                quantity: Quantity::GroupDisplacement {
                    group: "xmax".into(),
                    direction: [1.0, 0.0, 0.0],
                },
                measured: vec![0.02, 0.05],
                weight: 1.0,
            }],
        };
        let path = p.solve(&loads).unwrap();
        let stats = |p: &FiniteStrainProblem| p.workspace().cholesky.stats();
        let before = stats(&p);
        let reused = p.gradient_from_path(&path, &objective, FiniteVjpRequest::ALL).unwrap();
        let after = stats(&p);
        // Step 2 by CG (no factorization), step 1 by a new factorization.
        assert_eq!(after.preconditioned_solves, before.preconditioned_solves + 1);
        assert_eq!(after.factorizations, before.factorizations + 1);
        // Again, with nothing held for the last state: two new factorizations.
        p.workspace().held_for = None;
        let fresh = p.gradient_from_path(&path, &objective, FiniteVjpRequest::ALL).unwrap();
        assert_eq!(stats(&p).factorizations, after.factorizations + 2);
        let close = |a: &[f64], b: &[f64]| {
            let scale = b.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
            assert!(scale > 0.0);
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= 1e-9 * scale, "{x} vs {y} (scale {scale})");
            }
        };
        close(&reused.material[0], &fresh.material[0]);
        let flat = |t: &[[f64; 3]]| t.iter().flatten().copied().collect::<Vec<f64>>();
        close(&flat(&reused.traction), &flat(&fresh.traction));
    }
}
