//! Bound-constrained optimization: a projected L-BFGS method (two-metric projection) and an
//! augmented-Lagrangian wrapper for inequality constraints.
//!
//! # Why hand-written
//!
//! No maintained pure-Rust L-BFGS-B with bounds is a dependency of this workspace (argmin's
//! L-BFGS has no bounds; the Fortran L-BFGS-B would need a C/Fortran toolchain), so the method
//! is written here and tested on Rosenbrock (free and with an active bound) and on an
//! ill-conditioned 100-dimensional quadratic with half the variables at bounds.
//!
//! # The method ([`minimize_lbfgsb`])
//!
//! A two-metric projected quasi-Newton method after Bertsekas (1982, "Projected Newton methods
//! for optimization problems with simple constraints") with an L-BFGS metric (Nocedal 1980),
//! rather than the generalized Cauchy point and subspace minimization of Byrd, Lu, Nocedal &
//! Zhu (1995). Each iteration at a feasible `x` with gradient `g`:
//!
//! 1. projected gradient `p = P(x − g) − x`, `P` the projection onto `[l, u]`; stop when
//!    `‖p‖∞ ≤ gtol`;
//! 2. working set `W` = variables within `ε_i = min(‖p‖₂, 1e-8 (1 + |b_i|))` of a bound `b_i`
//!    whose gradient pushes outward; they take a scaled steepest-descent step `d_W = −γ g_W`
//!    (the projection keeps them on the bound);
//! 3. the free variables `F` take the L-BFGS direction `d_F = −H_F g_F` from the two-loop
//!    recursion over the curvature pairs restricted to `F`; a pair with
//!    `s_Fᵀy_F ≤ 1e-10 ‖s_F‖ ‖y_F‖` is skipped, so `H_F` is positive definite and `d` is a
//!    descent direction; `γ = s_Fᵀy_F / y_Fᵀy_F` of the newest usable pair;
//! 4. line search along the projected path `x(α) = P(x + α d)`: backtracking (safeguarded
//!    quadratic interpolation) until the Armijo condition `f(x(α)) ≤ f(x) + c₁ gᵀ(x(α) − x)`,
//!    `c₁ = 1e-4`, holds; where the path is not bent by a bound, the weak Wolfe condition
//!    `∇f(x(α))ᵀd ≥ c₂ gᵀd`, `c₂ = 0.9`, is also sought by doubling/bisection (at most 8 extra
//!    evaluations), which gives better curvature pairs; the first step is `α = 1` with a
//!    quasi-Newton metric, `1/‖g‖₂` without; if the line search fails, the memory is dropped
//!    and steepest descent is tried once before giving up;
//! 5. the pair `s = x⁺ − x`, `y = g⁺ − g` is stored when `sᵀy > 1e-10 ‖s‖ ‖y‖`; stop when
//!    `(f − f⁺) / max(|f|, |f⁺|, 1) ≤ ftol` (as SciPy's L-BFGS-B).
//!
//! The best point evaluated is always kept and returned, also when the callback stops the run.
//!
//! ```
//! use gradfem_solvers::optimize::{Control, LbfgsbParams, minimize_lbfgsb};
//!
//! // Rosenbrock with x ≤ 0.5: the minimum (0.5, 0.25) lies on the bound.
//! let f = |x: &[f64], g: &mut [f64]| {
//!     g[0] = -2.0 * (1.0 - x[0]) - 400.0 * x[0] * (x[1] - x[0] * x[0]);
//!     g[1] = 200.0 * (x[1] - x[0] * x[0]);
//!     Ok::<f64, std::convert::Infallible>((1.0 - x[0]).powi(2) + 100.0 * (x[1] - x[0] * x[0]).powi(2))
//! };
//! let inf = f64::INFINITY;
//! let params = LbfgsbParams { gtol: 1e-9, ..Default::default() };
//! let r = minimize_lbfgsb(f, &[-1.2, 1.0], &[-inf, -inf], &[0.5, inf], &params, |_| Control::Continue)?;
//! assert!(r.status.is_converged());
//! assert!((r.x[0] - 0.5).abs() < 1e-9 && (r.x[1] - 0.25).abs() < 1e-7);
//! # Ok::<(), std::convert::Infallible>(())
//! ```
//!
//! # Constraints ([`augmented_lagrangian`])
//!
//! Inequalities `c_i(x) ≤ 0` through the Powell–Hestenes–Rockafellar augmented Lagrangian
//! `L_A(x) = f(x) + 1/(2ρ) Σ_i (max(0, λ_i + ρ c_i(x))² − λ_i²)`, minimized by
//! [`minimize_lbfgsb`] within the bounds, with multiplier updates `λ_i ← max(0, λ_i + ρ c_i)`
//! and `ρ` increased when the violation does not shrink (Nocedal & Wright, *Numerical
//! Optimization*, 2nd ed., §17.4; Birgin & Martínez 2014).

use std::collections::VecDeque;

/// Armijo sufficient-decrease constant.
const C1: f64 = 1e-4;
/// Weak Wolfe curvature constant: `∇f(x⁺)ᵀd ≥ c₂ ∇f(x)ᵀd`.
const C2: f64 = 0.9;
/// Extra evaluations a line search may spend on the curvature condition after Armijo holds.
const MAX_WOLFE_EXTRA: usize = 8;
/// Relative curvature threshold below which a pair is not used.
const CURVATURE_EPS: f64 = 1e-10;
/// Relative width of the ε-active band of the working set.
const ACTIVE_EPS: f64 = 1e-8;

/// Settings of [`minimize_lbfgsb`].
#[derive(Debug, Clone, PartialEq)]
pub struct LbfgsbParams {
    /// Number of curvature pairs kept. Default 10.
    pub memory: usize,
    /// Maximum number of iterations. Default 1000.
    pub max_iterations: usize,
    /// Stop when the projected gradient's infinity norm `‖P(x − g) − x‖∞` is at most this.
    /// Default 1e-6.
    pub gtol: f64,
    /// Stop when the relative decrease `(f − f⁺) / max(|f|, |f⁺|, 1)` of an iteration is at
    /// most this. Default 1e-12; 0 disables the test.
    pub ftol: f64,
    /// Maximum number of function evaluations per line search. Default 30.
    pub max_line_search: usize,
    /// Whether [`OptimizeResult::history`] keeps each iterate `x` (default true). Turn off for
    /// large parameter vectors (shape optimization with 10⁶ coordinates would keep 8 MB per
    /// iteration); the records then carry an empty `x` (the callback always sees the full one).
    pub history_x: bool,
}

impl Default for LbfgsbParams {
    fn default() -> Self {
        Self {
            memory: 10,
            max_iterations: 1000,
            gtol: 1e-6,
            ftol: 1e-12,
            max_line_search: 30,
            history_x: true,
        }
    }
}

/// State after one iteration, given to the callback and kept in the history.
#[derive(Debug, Clone, PartialEq)]
pub struct IterationRecord {
    /// Iteration number; 0 is the (projected) starting point.
    pub iteration: usize,
    /// Current point.
    pub x: Vec<f64>,
    /// Objective value at `x`.
    pub f: f64,
    /// Infinity norm of the projected gradient `P(x − g) − x`.
    pub grad_norm: f64,
    /// Function evaluations so far.
    pub evaluations: usize,
}

/// What the callback wants after an iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Go on.
    Continue,
    /// Stop now (e.g. Ctrl-C), returning the best point so far.
    Stop,
}

/// Why the optimizer judged the problem converged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ConvergenceReason {
    /// `‖P(x − g) − x‖∞ ≤ gtol`.
    ProjectedGradient {
        /// The norm reached.
        norm: f64,
    },
    /// The relative decrease of the last iteration was at most `ftol`.
    RelativeDecrease {
        /// The relative decrease.
        decrease: f64,
    },
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Status {
    /// A convergence test passed.
    Converged(ConvergenceReason),
    /// `max_iterations` reached.
    MaxIterations,
    /// The callback returned [`Control::Stop`].
    Stopped,
    /// No step decreased the objective (even steepest descent): often a gradient that does not
    /// match the objective (run a Taylor test), or noise in the objective below this level.
    LineSearchFailed {
        /// Projected-gradient norm at the last point.
        grad_norm: f64,
    },
    /// The objective or its gradient was not finite at the starting point.
    NonFiniteStart,
}

impl Status {
    /// Whether the run converged.
    pub fn is_converged(&self) -> bool {
        matches!(self, Status::Converged(_))
    }
}

/// Result of [`minimize_lbfgsb`]: the best point found and how the run went.
#[derive(Debug, Clone, PartialEq)]
pub struct OptimizeResult {
    /// Best point evaluated.
    pub x: Vec<f64>,
    /// Objective value at `x`.
    pub f: f64,
    /// Iterations done.
    pub iterations: usize,
    /// Function (and gradient) evaluations done.
    pub evaluations: usize,
    /// One record per iteration, starting with iteration 0 (`x` empty unless
    /// [`LbfgsbParams::history_x`]).
    pub history: Vec<IterationRecord>,
    /// How the run ended.
    pub status: Status,
}

fn project(x: &mut [f64], lower: &[f64], upper: &[f64]) {
    for ((xi, l), u) in x.iter_mut().zip(lower).zip(upper) {
        *xi = xi.max(*l).min(*u);
    }
}

/// `P(x − g) − x` entry by entry.
fn projected_gradient(x: &[f64], g: &[f64], lower: &[f64], upper: &[f64]) -> Vec<f64> {
    (0..x.len()).map(|i| (x[i] - g[i]).max(lower[i]).min(upper[i]) - x[i]).collect()
}

fn norm_inf(v: &[f64]) -> f64 {
    v.iter().fold(0.0, |m, x| m.max(x.abs()))
}

fn norm2(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Sum of `a_i b_i` over the free entries.
fn dot_free(a: &[f64], b: &[f64], free: &[bool]) -> f64 {
    (0..a.len()).filter(|&i| free[i]).map(|i| a[i] * b[i]).sum()
}

struct Pair {
    s: Vec<f64>,
    y: Vec<f64>,
}

/// Two-metric direction; returns `(d, has_metric)` where `has_metric` says whether at least one
/// curvature pair was usable on the free set.
fn direction(g: &[f64], free: &[bool], pairs: &VecDeque<Pair>) -> (Vec<f64>, bool) {
    let n = g.len();
    let mut q: Vec<f64> = (0..n).map(|i| if free[i] { g[i] } else { 0.0 }).collect();
    // First loop, newest to oldest, over usable pairs.
    let mut used: Vec<(usize, f64, f64)> = Vec::with_capacity(pairs.len()); // (index, rho, alpha)
    let mut gamma = None;
    for (k, p) in pairs.iter().enumerate().rev() {
        let sy = dot_free(&p.s, &p.y, free);
        let ss = dot_free(&p.s, &p.s, free);
        let yy = dot_free(&p.y, &p.y, free);
        if sy.is_nan() || sy <= CURVATURE_EPS * (ss * yy).sqrt() || yy == 0.0 {
            continue;
        }
        if gamma.is_none() {
            gamma = Some(sy / yy);
        }
        let rho = 1.0 / sy;
        let a = rho * dot_free(&p.s, &q, free);
        for i in 0..n {
            if free[i] {
                q[i] -= a * p.y[i];
            }
        }
        used.push((k, rho, a));
    }
    let scale = gamma.unwrap_or(1.0);
    q.iter_mut().for_each(|v| *v *= scale);
    // Second loop, oldest to newest.
    for &(k, rho, a) in used.iter().rev() {
        let p = &pairs[k];
        let b = rho * dot_free(&p.y, &q, free);
        for i in 0..n {
            if free[i] {
                q[i] += (a - b) * p.s[i];
            }
        }
    }
    let d = (0..n).map(|i| if free[i] { -q[i] } else { -scale * g[i] }).collect();
    (d, gamma.is_some())
}

/// Working-set flags: `true` for free variables.
fn free_set(x: &[f64], g: &[f64], lower: &[f64], upper: &[f64], pg_norm2: f64) -> Vec<bool> {
    (0..x.len())
        .map(|i| {
            let near_lower = x[i] - lower[i] <= pg_norm2.min(ACTIVE_EPS * (1.0 + lower[i].abs()));
            let near_upper = upper[i] - x[i] <= pg_norm2.min(ACTIVE_EPS * (1.0 + upper[i].abs()));
            !((near_lower && g[i] > 0.0) || (near_upper && g[i] < 0.0))
        })
        .collect()
}

/// Minimizes `f` within the box `[lower, upper]` by projected L-BFGS (see the module docs).
///
/// `f(x, grad)` returns `f(x)` and writes `∇f(x)` into `grad`; an error from it ends the run and
/// is returned. Infinite bounds are allowed; `x0` is projected onto the box first. The callback
/// sees every iteration (0 = the start) and may stop the run; the best point is returned in
/// every case. Panics if the lengths differ or some `lower_i > upper_i` (programming mistakes).
pub fn minimize_lbfgsb<E>(
    mut f: impl FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
    x0: &[f64],
    lower: &[f64],
    upper: &[f64],
    params: &LbfgsbParams,
    mut callback: impl FnMut(&IterationRecord) -> Control,
) -> Result<OptimizeResult, E> {
    let n = x0.len();
    assert!(
        lower.len() == n && upper.len() == n,
        "minimize_lbfgsb: x0 has {n} entries, lower {}, upper {}",
        lower.len(),
        upper.len()
    );
    if let Some(i) = (0..n).find(|&i| lower[i].is_nan() || upper[i].is_nan() || lower[i] > upper[i])
    {
        panic!("minimize_lbfgsb: entry {i}: lower {} > upper {}", lower[i], upper[i]);
    }
    let mut x = x0.to_vec();
    project(&mut x, lower, upper);
    let mut g = vec![0.0; n];
    let mut fx = f(&x, &mut g)?;
    let mut evaluations = 1;
    let mut history = Vec::new();
    let mut best = (x.clone(), fx);
    let finish = |best: (Vec<f64>, f64), iterations, evaluations, history, status| {
        tracing::info!(?status, f = best.1, iterations, evaluations, "L-BFGS-B finished");
        OptimizeResult { x: best.0, f: best.1, iterations, evaluations, history, status }
    };
    if !fx.is_finite() || g.iter().any(|v| !v.is_finite()) {
        return Ok(finish(best, 0, evaluations, history, Status::NonFiniteStart));
    }

    let mut pairs: VecDeque<Pair> = VecDeque::with_capacity(params.memory);
    let mut gt = vec![0.0; n];
    let mut xt = vec![0.0; n];
    let mut iteration = 0;
    loop {
        let pg = projected_gradient(&x, &g, lower, upper);
        let pg_inf = norm_inf(&pg);
        let record =
            IterationRecord { iteration, x: x.clone(), f: fx, grad_norm: pg_inf, evaluations };
        tracing::debug!(iteration, f = fx, pg = pg_inf, evaluations, "L-BFGS-B iteration");
        let control = callback(&record);
        history.push(if params.history_x {
            record
        } else {
            IterationRecord { x: Vec::new(), ..record }
        });
        if control == Control::Stop {
            return Ok(finish(best, iteration, evaluations, history, Status::Stopped));
        }
        if pg_inf <= params.gtol {
            let status = Status::Converged(ConvergenceReason::ProjectedGradient { norm: pg_inf });
            return Ok(finish(best, iteration, evaluations, history, status));
        }
        if iteration >= params.max_iterations {
            return Ok(finish(best, iteration, evaluations, history, Status::MaxIterations));
        }

        let free = free_set(&x, &g, lower, upper, norm2(&pg));
        let (mut d, mut has_metric) = direction(&g, &free, &pairs);
        let slope = dot(&g, &d);
        if slope.is_nan() || slope >= 0.0 || d.iter().any(|v| !v.is_finite()) {
            tracing::debug!(iteration, "L-BFGS direction not a descent direction; memory reset");
            pairs.clear();
            d = g.iter().map(|v| -v).collect();
            has_metric = false;
        }

        // Projected line search: Armijo on the projected path; where the path is not bent by
        // the bounds, also the weak Wolfe curvature condition by bracketing (better curvature
        // pairs); one retry with steepest descent.
        let mut accepted: Option<(f64, Vec<f64>, Vec<f64>)> = None; // (f, x, g)
        for attempt in 0..2 {
            let slope0 = dot(&g, &d);
            let mut alpha = if has_metric { 1.0 } else { 1.0 / norm2(&g).max(f64::MIN_POSITIVE) };
            let (mut lo, mut hi) = (0.0f64, f64::INFINITY);
            let mut extra = 0;
            for _ in 0..params.max_line_search.max(1) {
                let mut bent = false;
                for i in 0..n {
                    let t = x[i] + alpha * d[i];
                    xt[i] = t.max(lower[i]).min(upper[i]);
                    bent |= xt[i] != t;
                }
                if xt == x {
                    break; // the step vanished
                }
                let pred = (0..n).map(|i| g[i] * (xt[i] - x[i])).sum::<f64>();
                if pred.is_nan() || pred >= 0.0 {
                    hi = alpha;
                    alpha = if lo > 0.0 { 0.5 * (lo + hi) } else { 0.1 * alpha };
                    continue;
                }
                let ft = f(&xt, &mut gt)?;
                evaluations += 1;
                let finite = ft.is_finite() && gt.iter().all(|v| v.is_finite());
                if finite && ft < best.1 {
                    best = (xt.clone(), ft);
                }
                if finite && ft <= fx + C1 * pred {
                    if accepted.as_ref().is_none_or(|a| ft < a.0) {
                        accepted = Some((ft, xt.clone(), gt.clone()));
                    }
                    if bent || dot(&gt, &d) >= C2 * slope0 || extra >= MAX_WOLFE_EXTRA {
                        break;
                    }
                    extra += 1;
                    lo = alpha;
                    alpha = if hi.is_finite() { 0.5 * (lo + hi) } else { 2.0 * alpha };
                } else {
                    if accepted.is_some() {
                        extra += 1;
                        if extra > MAX_WOLFE_EXTRA {
                            break;
                        }
                    }
                    hi = alpha;
                    alpha = if lo > 0.0 {
                        0.5 * (lo + hi)
                    } else if finite {
                        // Minimizer of the quadratic through φ(0) = fx, φ'(0) = pred/α, φ(α) = ft.
                        let slope = pred / alpha;
                        let denom = 2.0 * (ft - fx - slope * alpha);
                        let aq =
                            if denom > 0.0 { -slope * alpha * alpha / denom } else { 0.5 * alpha };
                        aq.clamp(0.1 * alpha, 0.5 * alpha)
                    } else {
                        0.1 * alpha
                    };
                }
            }
            if accepted.is_some() || attempt == 1 || !has_metric {
                break;
            }
            tracing::debug!(iteration, "line search failed; retrying with steepest descent");
            pairs.clear();
            d = g.iter().map(|v| -v).collect();
            has_metric = false;
        }
        let Some((ft, xa, ga)) = accepted else {
            let status = Status::LineSearchFailed { grad_norm: pg_inf };
            return Ok(finish(best, iteration, evaluations, history, status));
        };
        xt.copy_from_slice(&xa);
        gt.copy_from_slice(&ga);

        let s: Vec<f64> = (0..n).map(|i| xt[i] - x[i]).collect();
        let y: Vec<f64> = (0..n).map(|i| gt[i] - g[i]).collect();
        if dot(&s, &y) > CURVATURE_EPS * norm2(&s) * norm2(&y) {
            if pairs.len() == params.memory {
                pairs.pop_front();
            }
            if params.memory > 0 {
                pairs.push_back(Pair { s, y });
            }
        }
        let decrease = (fx - ft) / fx.abs().max(ft.abs()).max(1.0);
        std::mem::swap(&mut x, &mut xt);
        std::mem::swap(&mut g, &mut gt);
        fx = ft;
        iteration += 1;
        if params.ftol > 0.0 && decrease <= params.ftol {
            let pg_inf = norm_inf(&projected_gradient(&x, &g, lower, upper));
            history.push(IterationRecord {
                iteration,
                x: if params.history_x { x.clone() } else { Vec::new() },
                f: fx,
                grad_norm: pg_inf,
                evaluations,
            });
            let status = Status::Converged(ConvergenceReason::RelativeDecrease { decrease });
            return Ok(finish(best, iteration, evaluations, history, status));
        }
    }
}

/// Settings of [`augmented_lagrangian`].
#[derive(Debug, Clone, PartialEq)]
pub struct AugLagParams {
    /// Settings of each inner bound-constrained minimization.
    pub inner: LbfgsbParams,
    /// Maximum number of outer (multiplier-update) iterations. Default 30.
    pub max_outer: usize,
    /// Converged when `max_i |min(−c_i, λ_i/ρ)| ≤ constraint_tol` (feasibility and
    /// complementarity) and the inner run converged. Default 1e-8.
    pub constraint_tol: f64,
    /// Initial penalty ρ. Default 10.
    pub penalty_initial: f64,
    /// Factor by which ρ grows when the violation did not shrink by 4. Default 10.
    pub penalty_growth: f64,
    /// Largest ρ. Default 1e10.
    pub penalty_max: f64,
}

impl Default for AugLagParams {
    fn default() -> Self {
        Self {
            inner: LbfgsbParams::default(),
            max_outer: 30,
            constraint_tol: 1e-8,
            penalty_initial: 10.0,
            penalty_growth: 10.0,
            penalty_max: 1e10,
        }
    }
}

/// How an augmented-Lagrangian run ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AugLagStatus {
    /// Feasible and complementary within `constraint_tol`, and the last inner run converged.
    Converged,
    /// `max_outer` reached.
    MaxOuterIterations,
    /// The callback stopped an inner run.
    Stopped,
}

/// Result of [`augmented_lagrangian`].
#[derive(Debug, Clone, PartialEq)]
pub struct AugLagResult {
    /// Final point.
    pub x: Vec<f64>,
    /// Objective `f(x)` (without penalty terms).
    pub f: f64,
    /// Constraint values `c(x)` (feasible where ≤ 0).
    pub constraints: Vec<f64>,
    /// Lagrange multipliers `λ ≥ 0`.
    pub multipliers: Vec<f64>,
    /// `max_i |min(−c_i, λ_i/ρ)|` at the end.
    pub violation: f64,
    /// Final penalty ρ.
    pub penalty: f64,
    /// Outer iterations done.
    pub outer_iterations: usize,
    /// Objective (and constraint) evaluations, all inner runs together.
    pub evaluations: usize,
    /// Status of each inner run.
    pub inner_status: Vec<Status>,
    /// How the run ended.
    pub status: AugLagStatus,
}

/// Minimizes `f(x)` subject to `c_i(x) ≤ 0` (i < `n_constraints`) and `lower ≤ x ≤ upper` by the
/// PHR augmented Lagrangian (see the module docs).
///
/// - `objective(x, grad)` returns `f(x)` and writes `∇f(x)`;
/// - `constraints(x, c, jac)` writes `c(x)` (length `n_constraints`) and the Jacobian, row-major
///   `n_constraints × n` (`jac[i * n + j] = ∂c_i/∂x_j`).
///
/// The callback sees every inner iteration (its `f` is the augmented Lagrangian's value) and may
/// stop the run. Errors from either closure are returned as is.
#[allow(clippy::too_many_arguments)] // the two closures, the problem data and the settings
pub fn augmented_lagrangian<E>(
    objective: impl FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
    constraints: impl FnMut(&[f64], &mut [f64], &mut [f64]) -> Result<(), E>,
    n_constraints: usize,
    x0: &[f64],
    lower: &[f64],
    upper: &[f64],
    params: &AugLagParams,
    callback: impl FnMut(&IterationRecord) -> Control,
) -> Result<AugLagResult, E> {
    let problem = AugLagProblem::new(objective, constraints, n_constraints, x0.len());
    augmented_lagrangian_with(
        &problem,
        x0,
        params,
        |la, x, _, _, cb| minimize_lbfgsb(la, x, lower, upper, &params.inner, cb),
        callback,
    )
}

/// The objective and constraints of an augmented-Lagrangian run, shared between its inner
/// minimizer and its outer loop (and, for Newton-CG, the Hessian products).
pub(crate) struct AugLagProblem<O, C> {
    objective: std::cell::RefCell<O>,
    constraints: std::cell::RefCell<C>,
    /// c(x) and the Jacobian (row-major m × n) at the last evaluation.
    buffers: std::cell::RefCell<(Vec<f64>, Vec<f64>)>,
    /// The point of the last evaluation.
    last_x: std::cell::RefCell<Vec<f64>>,
    m: usize,
    n: usize,
}

impl<O, C> AugLagProblem<O, C> {
    pub(crate) fn new(objective: O, constraints: C, m: usize, n: usize) -> Self {
        AugLagProblem {
            objective: std::cell::RefCell::new(objective),
            constraints: std::cell::RefCell::new(constraints),
            buffers: std::cell::RefCell::new((vec![0.0; m], vec![0.0; m * n])),
            last_x: std::cell::RefCell::new(Vec::new()),
            m,
            n,
        }
    }

    /// f(x) and ∇f into `grad`, then c(x) and its Jacobian into the buffers.
    pub(crate) fn evaluate<E>(&self, x: &[f64], grad: &mut [f64]) -> Result<f64, E>
    where
        O: FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
        C: FnMut(&[f64], &mut [f64], &mut [f64]) -> Result<(), E>,
    {
        let fx = (self.objective.borrow_mut())(x, grad)?;
        let mut b = self.buffers.borrow_mut();
        let (c, jac) = &mut *b;
        (self.constraints.borrow_mut())(x, c, jac)?;
        *self.last_x.borrow_mut() = x.to_vec();
        Ok(fx)
    }

    /// The augmented Lagrangian L(x) = f + Σ (max(0, λᵢ + ρcᵢ)² − λᵢ²)/(2ρ) and its gradient.
    pub(crate) fn lagrangian<E>(
        &self,
        x: &[f64],
        grad: &mut [f64],
        lambda: &[f64],
        rho: f64,
    ) -> Result<f64, E>
    where
        O: FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
        C: FnMut(&[f64], &mut [f64], &mut [f64]) -> Result<(), E>,
    {
        let mut value = self.evaluate(x, grad)?;
        let b = self.buffers.borrow();
        let (c, jac) = &*b;
        for i in 0..self.m {
            let t = (lambda[i] + rho * c[i]).max(0.0);
            value += (t * t - lambda[i] * lambda[i]) / (2.0 * rho);
            if t > 0.0 {
                for j in 0..self.n {
                    grad[j] += t * jac[i * self.n + j];
                }
            }
        }
        Ok(value)
    }

    /// The number of variables and of constraints.
    pub(crate) fn dims(&self) -> (usize, usize) {
        (self.n, self.m)
    }

    /// Whether the last evaluation was at `x`.
    pub(crate) fn evaluated_at(&self, x: &[f64]) -> bool {
        *self.last_x.borrow() == x
    }

    /// The active constraints' weights tᵢ = max(0, λᵢ + ρcᵢ) and gradients at the last
    /// evaluation.
    pub(crate) fn active(&self, lambda: &[f64], rho: f64) -> Vec<(usize, f64, Vec<f64>)> {
        let b = self.buffers.borrow();
        let (c, jac) = &*b;
        (0..self.m)
            .filter_map(|i| {
                let t = (lambda[i] + rho * c[i]).max(0.0);
                (t > 0.0).then(|| (i, t, jac[i * self.n..(i + 1) * self.n].to_vec()))
            })
            .collect()
    }
}

/// The outer loop of the augmented Lagrangian (module docs) around an inner bound-constrained
/// minimizer: `inner(la, x, λ, ρ, callback)` minimizes `la` from `x` for the multipliers λ and
/// penalty ρ and returns its run.
#[allow(clippy::type_complexity)]
pub(crate) fn augmented_lagrangian_with<O, C, E>(
    problem: &AugLagProblem<O, C>,
    x0: &[f64],
    params: &AugLagParams,
    mut inner: impl FnMut(
        &mut dyn FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
        &[f64],
        &[f64],
        f64,
        &mut dyn FnMut(&IterationRecord) -> Control,
    ) -> Result<OptimizeResult, E>,
    mut callback: impl FnMut(&IterationRecord) -> Control,
) -> Result<AugLagResult, E>
where
    O: FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
    C: FnMut(&[f64], &mut [f64], &mut [f64]) -> Result<(), E>,
{
    let (n, m) = (problem.n, problem.m);
    let mut lambda = vec![0.0; m];
    let mut rho = params.penalty_initial;
    let mut x = x0.to_vec();
    let mut evaluations = 0;
    let mut inner_status = Vec::new();
    let mut prev_violation = f64::INFINITY;
    let mut outer = 0;
    let violation_of = |c: &[f64], lambda: &[f64], rho: f64| -> f64 {
        c.iter().zip(lambda).fold(0.0, |v, (ci, li)| v.max((-ci).min(li / rho).abs()))
    };
    loop {
        outer += 1;
        let lam = lambda.clone();
        let mut la = |xv: &[f64], grad: &mut [f64]| problem.lagrangian(xv, grad, &lam, rho);
        let mut stopped = false;
        let mut cb = |r: &IterationRecord| {
            let ctl = callback(r);
            stopped |= ctl == Control::Stop;
            ctl
        };
        let res = inner(&mut la, &x, &lam, rho, &mut cb)?;
        evaluations += res.evaluations;
        inner_status.push(res.status);
        x = res.x;
        // Values at the returned point (the last evaluation may have been elsewhere).
        let mut grad = vec![0.0; n];
        let fx = problem.evaluate(&x, &mut grad)?;
        let c = problem.buffers.borrow().0.clone();
        evaluations += 1;
        for i in 0..m {
            lambda[i] = (lambda[i] + rho * c[i]).max(0.0);
        }
        let violation = violation_of(&c, &lambda, rho);
        tracing::info!(outer, f = fx, violation, rho, "augmented Lagrangian iteration");
        let status = if stopped {
            Some(AugLagStatus::Stopped)
        } else if violation <= params.constraint_tol && res.status.is_converged() {
            Some(AugLagStatus::Converged)
        } else if outer >= params.max_outer {
            Some(AugLagStatus::MaxOuterIterations)
        } else {
            None
        };
        if let Some(status) = status {
            return Ok(AugLagResult {
                x,
                f: fx,
                constraints: c,
                multipliers: lambda,
                violation,
                penalty: rho,
                outer_iterations: outer,
                evaluations,
                inner_status,
                status,
            });
        }
        if violation > 0.25 * prev_violation {
            rho = (rho * params.penalty_growth).min(params.penalty_max);
        }
        prev_violation = violation;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The L-BFGS operator satisfies the secant condition of its newest pair: `H y = s`, so the
    /// direction for `g = y` is `−s`; and it is positive definite (`gᵀHg > 0`).
    #[test]
    fn two_loop_satisfies_secant_condition() {
        let n = 6;
        let mut pairs = VecDeque::new();
        for k in 0..4u64 {
            let s = crate::taylor::random_direction(n, 10 + k);
            // y = A s with A = diag(1..n) + small coupling: sᵀy > 0.
            let y: Vec<f64> = (0..n)
                .map(|i| (i + 1) as f64 * s[i] + 0.1 * s[(i + 1) % n] + 0.1 * s[(i + n - 1) % n])
                .collect();
            pairs.push_back(Pair { s, y });
        }
        let free = vec![true; n];
        let last = pairs.back().unwrap();
        let (d, has_metric) = direction(&last.y, &free, &pairs);
        assert!(has_metric);
        for (i, (di, si)) in d.iter().zip(&last.s).enumerate() {
            assert!((di + si).abs() < 1e-12, "entry {i}: {di} vs {}", -si);
        }
        let g = crate::taylor::random_direction(n, 99);
        let (d, _) = direction(&g, &free, &pairs);
        assert!(dot(&g, &d) < 0.0);
    }

    /// Fixed variables get the scaled steepest-descent step, free ones the restricted metric.
    #[test]
    fn working_set_and_fixed_direction() {
        let x = [0.0, 0.5, 1.0, 1.0];
        let g = [1.0, 1.0, -1.0, 1.0];
        let (lo, hi) = ([0.0; 4], [1.0; 4]);
        let pg = projected_gradient(&x, &g, &lo, &hi);
        assert_eq!(pg, vec![0.0, -0.5, 0.0, -1.0]);
        let free = free_set(&x, &g, &lo, &hi, norm2(&pg));
        assert_eq!(free, vec![false, true, false, true]);
        let (d, has_metric) = direction(&g, &free, &VecDeque::new());
        assert!(!has_metric);
        assert_eq!(d, vec![-1.0, -1.0, 1.0, -1.0]);
    }
}
