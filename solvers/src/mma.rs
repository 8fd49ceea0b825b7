//! The method of moving asymptotes (MMA) for `min f(x)` subject to `c_i(x) ≤ 0` and
//! `lower ≤ x ≤ upper`: one evaluation (values and gradients) per iteration, no line search.
//!
//! # Why MMA
//!
//! A design problem in gradfem costs one forward solve and one adjoint per function and
//! constraint, so the count of evaluations is what matters. The augmented Lagrangian over
//! L-BFGS-B ([`crate::optimize::augmented_lagrangian`]) spends line searches and several outer
//! runs on a handful of design variables; MMA (Svanberg 1987, "The method of moving asymptotes —
//! a new method for structural optimization", IJNME 24; the variant of Svanberg 2007, "MMA and
//! GCMMA — two methods for nonlinear optimization") builds at every iterate a separable convex
//! approximation of the objective and of every constraint and moves to its solution. It is the
//! method of choice of structural and topology optimization, from one variable to millions.
//!
//! # The subproblem
//!
//! At the iterate `xᵏ` each function `f_i` (i = 0 the objective) is replaced by
//!
//! `f̃_i(x) = r_i + Σ_j p_ij/(U_j − x_j) + q_ij/(x_j − L_j)`,
//!
//! `p_ij = (U_j − x_j)² (1.001 (∂f_i/∂x_j)⁺ + 0.001 (∂f_i/∂x_j)⁻ + 10⁻⁵/Δ_j)`, `q_ij` alike with
//! the parts swapped and `(x_j − L_j)²`, `r_i` so that `f̃_i(xᵏ) = f_i(xᵏ)`; `Δ_j` is the width of
//! the box (a finite stand-in where a bound is infinite). The asymptotes `L < x < U` start at
//! `x ∓ 0.5 Δ` and then widen (×1.2) where a variable moved the same way twice and narrow
//! (×0.7) where it oscillated. The step stays within the move limits
//! `max(lower, L + 0.1 (x − L), x − 0.5 Δ) ≤ x ≤ min(upper, U − 0.1 (U − x), x + 0.5 Δ)`.
//! Elastic variables `yᵢ ≥ 0` with cost `1000 yᵢ + ½ yᵢ²` keep the subproblem feasible when the
//! approximations are (`f̃_i − y_i ≤ 0`).
//!
//! The subproblem is solved through its concave dual in the multipliers `λ ≥ 0` (one per
//! constraint): for fixed `λ` the minimizing `x_j` has the closed form
//! `x_j = (√P_j L_j + √Q_j U_j)/(√P_j + √Q_j)` clipped to the move limits, with
//! `P_j = p_0j + Σ λ_i p_ij`, `Q_j` alike, and `y_i = max(0, λ_i − 1000)`; the dual is
//! maximized by a projected Newton method with backtracking.
//!
//! # Stopping
//!
//! After each step: converged when the design is feasible (`max c_i ≤ feasibility_tol`) and
//! either the KKT residual (the projected gradient of the Lagrangian with the subproblem's
//! multipliers, and complementarity `λ_i |c_i|`) is at most `kkt_tol`, or the largest step
//! relative to `Δ_j` is at most `xtol`. Scale the objective and the constraints to order one
//! (the caller's job): the tolerances and the elastic cost are absolute.

use crate::optimize::{Control, IterationRecord};

/// Settings of [`minimize_mma`].
#[derive(Debug, Clone, PartialEq)]
pub struct MmaParams {
    /// Largest number of iterations (evaluations after the start). Default 100.
    pub max_iterations: usize,
    /// Converged (on the step) when the largest `|Δx_j| / Δ_j` of an iteration is at most this
    /// and the design is feasible. Default 1e-4.
    pub xtol: f64,
    /// Converged (KKT) when the KKT residual is at most this and the design is feasible.
    /// Default 1e-6.
    pub kkt_tol: f64,
    /// Feasible when every `c_i ≤ feasibility_tol`. Default 1e-6.
    pub feasibility_tol: f64,
    /// The width `Δ_j` used for a variable whose box is wider (or unbounded). Default 1 (the
    /// caller's variables are scaled to order one).
    pub max_range: f64,
}

impl Default for MmaParams {
    fn default() -> Self {
        Self {
            max_iterations: 100,
            xtol: 1e-4,
            kkt_tol: 1e-6,
            feasibility_tol: 1e-6,
            max_range: 1.0,
        }
    }
}

/// Why an MMA run was judged converged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MmaConvergence {
    /// Feasible with a KKT residual at most `kkt_tol`.
    Kkt {
        /// The residual reached.
        residual: f64,
    },
    /// Feasible, and the last step was at most `xtol` (relative to the box widths).
    Step {
        /// The relative step.
        step: f64,
    },
}

/// How an MMA run ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MmaStatus {
    /// A convergence test passed.
    Converged(MmaConvergence),
    /// `max_iterations` reached.
    MaxIterations,
    /// The callback returned [`Control::Stop`].
    Stopped,
    /// A value or gradient was not finite at the start or at an iterate.
    NonFinite {
        /// The iteration whose evaluation was not finite (0 = the start).
        iteration: usize,
    },
}

impl MmaStatus {
    /// Whether the run converged.
    pub fn is_converged(&self) -> bool {
        matches!(self, MmaStatus::Converged(_))
    }
}

/// Result of [`minimize_mma`]: the last iterate and how the run went.
#[derive(Debug, Clone, PartialEq)]
pub struct MmaResult {
    /// The last iterate (for a non-finite evaluation: the iterate before it).
    pub x: Vec<f64>,
    /// `f(x)`.
    pub f: f64,
    /// `c(x)`.
    pub constraints: Vec<f64>,
    /// The multipliers of the last subproblem (estimates of the Lagrange multipliers at `x`).
    pub multipliers: Vec<f64>,
    /// KKT residual at `x` with those multipliers.
    pub kkt_residual: f64,
    /// Iterations done.
    pub iterations: usize,
    /// Evaluations done (the start included).
    pub evaluations: usize,
    /// How the run ended.
    pub status: MmaStatus,
}

/// One evaluation of the problem at a point.
struct Point {
    x: Vec<f64>,
    f: f64,
    df: Vec<f64>,
    c: Vec<f64>,
    /// Row-major `m × n`.
    dc: Vec<f64>,
}

impl Point {
    fn is_finite(&self) -> bool {
        self.f.is_finite() && self.df.iter().chain(&self.c).chain(&self.dc).all(|v| v.is_finite())
    }

    fn max_violation(&self) -> f64 {
        self.c.iter().fold(0.0, |m, &c| m.max(c))
    }
}

/// Minimizes `f(x)` subject to `c_i(x) ≤ 0` (i < `n_constraints`) and `lower ≤ x ≤ upper` by
/// MMA (see the module docs).
///
/// `evaluate(x, df, c, dc)` returns `f(x)` and writes `∇f(x)` into `df`, `c(x)` into `c` and the
/// Jacobian row-major into `dc` (`dc[i * n + j] = ∂c_i/∂x_j`); an error from it ends the run and
/// is returned. `x0` is projected onto the box first. The callback sees every iterate (0 = the
/// start; its `grad_norm` is the KKT residual) and may stop the run. Panics if the lengths
/// differ or some `lower_i > upper_i` (programming mistakes).
pub fn minimize_mma<E>(
    mut evaluate: impl FnMut(&[f64], &mut [f64], &mut [f64], &mut [f64]) -> Result<f64, E>,
    n_constraints: usize,
    x0: &[f64],
    lower: &[f64],
    upper: &[f64],
    params: &MmaParams,
    mut callback: impl FnMut(&IterationRecord) -> Control,
) -> Result<MmaResult, E> {
    let n = x0.len();
    let m = n_constraints;
    assert!(
        lower.len() == n && upper.len() == n,
        "minimize_mma: x0 has {n} entries, lower {}, upper {}",
        lower.len(),
        upper.len()
    );
    if let Some(i) = (0..n).find(|&i| lower[i].is_nan() || upper[i].is_nan() || lower[i] > upper[i])
    {
        panic!("minimize_mma: entry {i}: lower {} > upper {}", lower[i], upper[i]);
    }
    let mut eval_at = |x: Vec<f64>| -> Result<Point, E> {
        let (mut df, mut c, mut dc) = (vec![0.0; n], vec![0.0; m], vec![0.0; m * n]);
        let f = evaluate(&x, &mut df, &mut c, &mut dc)?;
        Ok(Point { x, f, df, c, dc })
    };
    let x0: Vec<f64> = (0..n).map(|j| x0[j].max(lower[j]).min(upper[j])).collect();
    let mut current = eval_at(x0)?;
    let mut evaluations = 1;
    let range: Vec<f64> = (0..n)
        .map(|j| {
            let w = upper[j] - lower[j];
            if w.is_finite() && w > 0.0 { w.min(params.max_range) } else { params.max_range }
        })
        .collect();
    let mut lambda = vec![0.0; m];
    let finish = |p: Point, lambda: Vec<f64>, kkt: f64, iterations, evaluations, status| {
        tracing::info!(?status, f = p.f, iterations, evaluations, "MMA finished");
        MmaResult {
            x: p.x,
            f: p.f,
            constraints: p.c,
            multipliers: lambda,
            kkt_residual: kkt,
            iterations,
            evaluations,
            status,
        }
    };
    let mut kkt = kkt_residual(&current, &lambda, lower, upper);
    let record = |p: &Point, iteration: usize, kkt: f64, evaluations: usize| IterationRecord {
        iteration,
        x: p.x.clone(),
        f: p.f,
        grad_norm: kkt,
        evaluations,
    };
    if !current.is_finite() {
        return Ok(finish(
            current,
            lambda,
            kkt,
            0,
            evaluations,
            MmaStatus::NonFinite { iteration: 0 },
        ));
    }
    if callback(&record(&current, 0, kkt, evaluations)) == Control::Stop {
        return Ok(finish(current, lambda, kkt, 0, evaluations, MmaStatus::Stopped));
    }
    let (mut low, mut upp) = (vec![0.0; n], vec![0.0; n]);
    let (mut x_prev, mut x_prev2): (Option<Vec<f64>>, Option<Vec<f64>>) = (None, None);
    for iteration in 1..=params.max_iterations {
        let x = &current.x;
        // Asymptotes.
        for j in 0..n {
            match (&x_prev, &x_prev2) {
                (Some(p1), Some(p2)) => {
                    let trend = (x[j] - p1[j]) * (p1[j] - p2[j]);
                    let gamma = if trend < 0.0 {
                        0.7
                    } else if trend > 0.0 {
                        1.2
                    } else {
                        1.0
                    };
                    low[j] = x[j] - gamma * (p1[j] - low[j]);
                    upp[j] = x[j] + gamma * (upp[j] - p1[j]);
                    let (d_min, d_max) = (0.01 * range[j], 10.0 * range[j]);
                    low[j] = low[j].clamp(x[j] - d_max, x[j] - d_min);
                    upp[j] = upp[j].clamp(x[j] + d_min, x[j] + d_max);
                }
                _ => {
                    low[j] = x[j] - 0.5 * range[j];
                    upp[j] = x[j] + 0.5 * range[j];
                }
            }
        }
        let sub = Subproblem::new(&current, &low, &upp, lower, upper, &range);
        lambda = sub.solve_dual(&lambda);
        let (x_new, _) = sub.primal(&lambda);
        let step = (0..n).map(|j| (x_new[j] - x[j]).abs() / range[j]).fold(0.0, f64::max);
        let next = eval_at(x_new)?;
        evaluations += 1;
        if !next.is_finite() {
            let status = MmaStatus::NonFinite { iteration };
            return Ok(finish(current, lambda, kkt, iteration - 1, evaluations, status));
        }
        x_prev2 = x_prev.take();
        x_prev = Some(std::mem::replace(&mut current, next).x);
        kkt = kkt_residual(&current, &lambda, lower, upper);
        tracing::debug!(iteration, f = current.f, kkt, step, "MMA iteration");
        let control = callback(&record(&current, iteration, kkt, evaluations));
        let feasible = current.max_violation() <= params.feasibility_tol;
        let status = if feasible && kkt <= params.kkt_tol {
            Some(MmaStatus::Converged(MmaConvergence::Kkt { residual: kkt }))
        } else if feasible && step <= params.xtol {
            Some(MmaStatus::Converged(MmaConvergence::Step { step }))
        } else if control == Control::Stop {
            Some(MmaStatus::Stopped)
        } else if iteration == params.max_iterations {
            Some(MmaStatus::MaxIterations)
        } else {
            None
        };
        if let Some(status) = status {
            return Ok(finish(current, lambda, kkt, iteration, evaluations, status));
        }
    }
    // max_iterations = 0: only the start was evaluated.
    Ok(finish(current, lambda, kkt, 0, evaluations, MmaStatus::MaxIterations))
}

/// KKT residual at `p` with multipliers `lambda`: the largest of the projected gradient of the
/// Lagrangian (zero where a bound holds the variable against it), the complementarity
/// `λ_i |c_i|` and the violation `max(c_i, 0)`.
fn kkt_residual(p: &Point, lambda: &[f64], lower: &[f64], upper: &[f64]) -> f64 {
    let n = p.x.len();
    let mut r: f64 = 0.0;
    for j in 0..n {
        let g = p.df[j] + (0..lambda.len()).map(|i| lambda[i] * p.dc[i * n + j]).sum::<f64>();
        let at_lower = p.x[j] <= lower[j] + 1e-12 * (1.0 + lower[j].abs());
        let at_upper = p.x[j] >= upper[j] - 1e-12 * (1.0 + upper[j].abs());
        let projected = if (at_lower && g > 0.0) || (at_upper && g < 0.0) { 0.0 } else { g };
        r = r.max(projected.abs());
    }
    for (c, l) in p.c.iter().zip(lambda) {
        r = r.max((l * c).abs()).max(c.max(0.0));
    }
    r
}

/// Cost of the elastic variables: `ELASTIC_COST y + ½ y²`.
const ELASTIC_COST: f64 = 1000.0;

/// The separable convex approximation at one iterate.
struct Subproblem {
    n: usize,
    m: usize,
    low: Vec<f64>,
    upp: Vec<f64>,
    alpha: Vec<f64>,
    beta: Vec<f64>,
    /// `p_ij`, `q_ij` row-major `(m + 1) × n`, row 0 the objective.
    p: Vec<f64>,
    q: Vec<f64>,
    /// `r_i` of the constraints (the objective's constant does not move the solution).
    r: Vec<f64>,
}

impl Subproblem {
    fn new(
        at: &Point,
        low: &[f64],
        upp: &[f64],
        lower: &[f64],
        upper: &[f64],
        range: &[f64],
    ) -> Self {
        let n = at.x.len();
        let m = at.c.len();
        let x = &at.x;
        let alpha: Vec<f64> = (0..n)
            .map(|j| lower[j].max(low[j] + 0.1 * (x[j] - low[j])).max(x[j] - 0.5 * range[j]))
            .collect();
        let beta: Vec<f64> = (0..n)
            .map(|j| upper[j].min(upp[j] - 0.1 * (upp[j] - x[j])).min(x[j] + 0.5 * range[j]))
            .collect();
        let mut p = vec![0.0; (m + 1) * n];
        let mut q = vec![0.0; (m + 1) * n];
        let mut r = vec![0.0; m];
        for i in 0..=m {
            let (grad, value) =
                if i == 0 { (&at.df[..], at.f) } else { (&at.dc[(i - 1) * n..i * n], at.c[i - 1]) };
            let mut approx_at_x = 0.0;
            for j in 0..n {
                let (ux, xl) = (upp[j] - x[j], x[j] - low[j]);
                let (plus, minus) = (grad[j].max(0.0), (-grad[j]).max(0.0));
                let reg = 1e-5 / range[j];
                p[i * n + j] = ux * ux * (1.001 * plus + 0.001 * minus + reg);
                q[i * n + j] = xl * xl * (0.001 * plus + 1.001 * minus + reg);
                approx_at_x += p[i * n + j] / ux + q[i * n + j] / xl;
            }
            if i > 0 {
                r[i - 1] = value - approx_at_x;
            }
        }
        Self { n, m, low: low.to_vec(), upp: upp.to_vec(), alpha, beta, p, q, r }
    }

    /// The minimizing `x(λ)` and `y(λ)`.
    fn primal(&self, lambda: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let n = self.n;
        let x = (0..n)
            .map(|j| {
                let (mut pj, mut qj) = (self.p[j], self.q[j]);
                for (i, l) in lambda.iter().enumerate() {
                    pj += l * self.p[(i + 1) * n + j];
                    qj += l * self.q[(i + 1) * n + j];
                }
                let (sp, sq) = (pj.sqrt(), qj.sqrt());
                let xj = (sp * self.low[j] + sq * self.upp[j]) / (sp + sq);
                xj.max(self.alpha[j]).min(self.beta[j])
            })
            .collect();
        let y = lambda.iter().map(|l| (l - ELASTIC_COST).max(0.0)).collect();
        (x, y)
    }

    /// The approximated constraint `i` at `x`.
    fn constraint(&self, i: usize, x: &[f64]) -> f64 {
        let n = self.n;
        let row = (i + 1) * n;
        self.r[i]
            + (0..n)
                .map(|j| {
                    self.p[row + j] / (self.upp[j] - x[j]) + self.q[row + j] / (x[j] - self.low[j])
                })
                .sum::<f64>()
    }

    /// The dual function W(λ) and its gradient (the approximated constraints less y).
    fn dual(&self, lambda: &[f64]) -> (f64, Vec<f64>, Vec<f64>, Vec<f64>) {
        let n = self.n;
        let (x, y) = self.primal(lambda);
        let mut w = 0.0;
        for j in 0..n {
            w += self.p[j] / (self.upp[j] - x[j]) + self.q[j] / (x[j] - self.low[j]);
        }
        let mut grad = vec![0.0; self.m];
        for i in 0..self.m {
            let gi = self.constraint(i, &x);
            grad[i] = gi - y[i];
            w += lambda[i] * gi + ELASTIC_COST * y[i] + 0.5 * y[i] * y[i] - lambda[i] * y[i];
        }
        (w, grad, x, y)
    }

    /// Maximizes the concave dual over λ ≥ 0 by projected Newton steps with backtracking,
    /// starting from `start` (the previous iteration's multipliers).
    fn solve_dual(&self, start: &[f64]) -> Vec<f64> {
        let m = self.m;
        if m == 0 {
            return Vec::new();
        }
        let mut lambda: Vec<f64> = start.iter().map(|l| l.max(0.0)).collect();
        let (mut w, mut grad, mut x, mut y) = self.dual(&lambda);
        for _ in 0..200 {
            // Multipliers at zero whose constraint is satisfied stay there.
            let free: Vec<bool> = (0..m).map(|i| lambda[i] > 0.0 || grad[i] > 0.0).collect();
            let kkt = (0..m).filter(|&i| free[i]).map(|i| grad[i].abs()).fold(0.0, f64::max);
            let scale = 1.0 + self.r.iter().fold(0.0f64, |a, r| a.max(r.abs()));
            if kkt <= 1e-12 * scale {
                break;
            }
            // −H = Σ_j (∂g_i/∂x_j)(∂g_k/∂x_j)/ψ_jj over the x_j inside their move limits, plus
            // 1 on the diagonal where an elastic variable is active. Where the move limits
            // clip every x_j that a multiplier acts on, −H is singular; the same sum over all
            // x_j (clipped or not) bounds it from above and gives a shorter ascent step.
            let idx: Vec<usize> = (0..m).filter(|&i| free[i]).collect();
            let mut accepted = false;
            for include_clipped in [false, true] {
                let neg_h = self.neg_dual_hessian(&lambda, &x, &y, include_clipped);
                let Some(dir) = newton_direction(&neg_h, &grad, &idx, m) else {
                    continue;
                };
                // Backtracking on the projected path.
                let mut t = 1.0;
                for _ in 0..60 {
                    let trial: Vec<f64> =
                        (0..m).map(|i| (lambda[i] + t * dir[i]).max(0.0)).collect();
                    let (wt, gt, xt, yt) = self.dual(&trial);
                    let gain: f64 = (0..m).map(|i| grad[i] * (trial[i] - lambda[i])).sum();
                    if wt.is_finite() && wt >= w + 1e-4 * gain && trial != lambda {
                        (lambda, w, grad, x, y) = (trial, wt, gt, xt, yt);
                        accepted = true;
                        break;
                    }
                    t *= 0.5;
                }
                if accepted {
                    break;
                }
            }
            if !accepted {
                break;
            }
        }
        lambda
    }
}

impl Subproblem {
    /// −∂²W/∂λ² at `lambda` (row-major m × m), over the x_j strictly inside their move limits
    /// or, with `include_clipped`, over every x_j (an upper bound of the former).
    fn neg_dual_hessian(
        &self,
        lambda: &[f64],
        x: &[f64],
        y: &[f64],
        include_clipped: bool,
    ) -> Vec<f64> {
        let (n, m) = (self.n, self.m);
        let mut neg_h = vec![0.0; m * m];
        for j in 0..n {
            if !include_clipped && (x[j] <= self.alpha[j] || x[j] >= self.beta[j]) {
                continue;
            }
            let (ux, xl) = (self.upp[j] - x[j], x[j] - self.low[j]);
            let (mut pj, mut qj) = (self.p[j], self.q[j]);
            let dg: Vec<f64> = (0..m)
                .map(|i| {
                    let (pi, qi) = (self.p[(i + 1) * n + j], self.q[(i + 1) * n + j]);
                    pj += lambda[i] * pi;
                    qj += lambda[i] * qi;
                    pi / (ux * ux) - qi / (xl * xl)
                })
                .collect();
            let psi = 2.0 * pj / (ux * ux * ux) + 2.0 * qj / (xl * xl * xl);
            for a in 0..m {
                for b in 0..m {
                    neg_h[a * m + b] += dg[a] * dg[b] / psi;
                }
            }
        }
        for i in 0..m {
            if y[i] > 0.0 {
                neg_h[i * m + i] += 1.0;
            }
        }
        neg_h
    }
}

/// The Newton ascent direction `(−H_FF)⁻¹ ∇W_F` on the free multipliers `idx` (zero elsewhere);
/// None when −H_FF is not positive definite (a zero row: no x_j responds to that multiplier).
fn newton_direction(neg_h: &[f64], grad: &[f64], idx: &[usize], m: usize) -> Option<Vec<f64>> {
    let k = idx.len();
    let max_diag = idx.iter().map(|&i| neg_h[i * m + i]).fold(0.0, f64::max);
    // `is_gt` is false for NaN as well, so a NaN diagonal also means no direction.
    if idx
        .iter()
        .any(|&i| !neg_h[i * m + i].partial_cmp(&(1e-14 * max_diag)).is_some_and(|o| o.is_gt()))
    {
        return None;
    }
    let mut a = vec![0.0; k * k];
    let mut rhs: Vec<f64> = idx.iter().map(|&i| grad[i]).collect();
    for (r, &i) in idx.iter().enumerate() {
        for (c, &l) in idx.iter().enumerate() {
            // A relative shift keeps nearly dependent constraint gradients solvable.
            a[r * k + c] = neg_h[i * m + l] + if r == c { 1e-12 * max_diag } else { 0.0 };
        }
    }
    if !solve_spd(&mut a, &mut rhs, k) {
        return None;
    }
    let mut dir = vec![0.0; m];
    for (r, &i) in idx.iter().enumerate() {
        dir[i] = rhs[r];
    }
    Some(dir)
}

/// Solves `A z = b` in place for a symmetric positive definite `k × k` matrix by Cholesky;
/// false when a pivot is not positive.
fn solve_spd(a: &mut [f64], b: &mut [f64], k: usize) -> bool {
    for j in 0..k {
        let mut d = a[j * k + j];
        for l in 0..j {
            d -= a[j * k + l] * a[j * k + l];
        }
        if !d.partial_cmp(&0.0).is_some_and(|o| o.is_gt()) {
            return false;
        }
        let d = d.sqrt();
        a[j * k + j] = d;
        for i in j + 1..k {
            let mut s = a[i * k + j];
            for l in 0..j {
                s -= a[i * k + l] * a[j * k + l];
            }
            a[i * k + j] = s / d;
        }
    }
    for i in 0..k {
        let mut s = b[i];
        for l in 0..i {
            s -= a[i * k + l] * b[l];
        }
        b[i] = s / a[i * k + i];
    }
    for i in (0..k).rev() {
        let mut s = b[i];
        for l in i + 1..k {
            s -= a[l * k + i] * b[l];
        }
        b[i] = s / a[i * k + i];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    fn run(
        f: impl Fn(&[f64], &mut [f64], &mut [f64], &mut [f64]) -> f64,
        m: usize,
        x0: &[f64],
        lower: &[f64],
        upper: &[f64],
        params: &MmaParams,
    ) -> MmaResult {
        minimize_mma(
            |x: &[f64], df: &mut [f64], c: &mut [f64], dc: &mut [f64]| {
                Ok::<f64, Infallible>(f(x, df, c, dc))
            },
            m,
            x0,
            lower,
            upper,
            params,
            |_| Control::Continue,
        )
        .unwrap()
    }

    /// Svanberg's cantilever beam (IJNME 1987, §6.1): five segments of square cross-section
    /// x_j, weight 0.0624 Σ x_j under 61/x₁³ + 37/x₂³ + 19/x₃³ + 7/x₄³ + 1/x₅³ ≤ 1. The
    /// published optimum is x = (6.016, 5.309, 4.494, 3.502, 2.153), weight 1.340.
    #[test]
    fn svanberg_cantilever_reaches_the_published_optimum() {
        let coeff = [61.0, 37.0, 19.0, 7.0, 1.0];
        let r = run(
            |x, df, c, dc| {
                df.iter_mut().for_each(|d| *d = 0.0624);
                c[0] = coeff.iter().zip(x).map(|(a, xi)| a / xi.powi(3)).sum::<f64>() - 1.0;
                for j in 0..5 {
                    dc[j] = -3.0 * coeff[j] / x[j].powi(4);
                }
                0.0624 * x.iter().sum::<f64>()
            },
            1,
            &[5.0; 5],
            &[1.0; 5],
            &[10.0; 5],
            &MmaParams { max_range: 10.0, xtol: 1e-7, ..Default::default() },
        );
        assert!(r.status.is_converged(), "{:?}", r.status);
        let published = [6.016, 5.309, 4.494, 3.502, 2.153];
        for (x, p) in r.x.iter().zip(published) {
            assert!((x - p).abs() < 2e-3, "{:?}", r.x);
        }
        assert!((r.f - 1.340).abs() < 1e-3, "{}", r.f);
        assert!(r.constraints[0] <= 1e-6);
        // The constraint is active and its multiplier positive.
        assert!(r.multipliers[0] > 0.0 && r.constraints[0].abs() < 1e-6, "{r:?}");
        assert!(r.evaluations < 40, "{} evaluations", r.evaluations);
    }

    /// A bound-constrained quadratic without constraints: the minimum on the bound is found.
    #[test]
    fn bound_constrained_quadratic_stops_on_its_bound() {
        let r = run(
            |x, df, _, _| {
                df[0] = 2.0 * (x[0] - 2.0);
                df[1] = 2.0 * (x[1] + 0.3);
                (x[0] - 2.0).powi(2) + (x[1] + 0.3).powi(2)
            },
            0,
            &[0.5, 0.5],
            &[0.0, 0.0],
            &[1.0, 1.0],
            &MmaParams::default(),
        );
        assert!(r.status.is_converged(), "{:?}", r.status);
        assert!((r.x[0] - 1.0).abs() < 1e-6 && r.x[1].abs() < 1e-6, "{:?}", r.x);
    }

    /// Two constraints, one active, one not, from an infeasible start: the disc x² + y² ≤ 1
    /// with x ≤ 2 (inactive), minimizing −x − y: the optimum is (1/√2, 1/√2), λ = 1/√2.
    #[test]
    fn infeasible_start_reaches_the_active_constraint() {
        let r = run(
            |x, df, c, dc| {
                df[0] = -1.0;
                df[1] = -1.0;
                c[0] = x[0] * x[0] + x[1] * x[1] - 1.0;
                c[1] = x[0] - 2.0;
                dc[0] = 2.0 * x[0];
                dc[1] = 2.0 * x[1];
                dc[2] = 1.0;
                dc[3] = 0.0;
                -x[0] - x[1]
            },
            2,
            &[1.2, 1.1],
            &[-3.0, -3.0],
            &[3.0, 3.0],
            &MmaParams { max_range: 6.0, xtol: 1e-8, ..Default::default() },
        );
        assert!(r.status.is_converged(), "{:?}", r.status);
        let s = std::f64::consts::FRAC_1_SQRT_2;
        assert!((r.x[0] - s).abs() < 1e-5 && (r.x[1] - s).abs() < 1e-5, "{:?}", r.x);
        assert!((r.multipliers[0] - s).abs() < 1e-3, "{:?}", r.multipliers);
        assert!(r.multipliers[1].abs() < 1e-9, "{:?}", r.multipliers);
    }

    #[test]
    fn the_callback_stops_the_run() {
        let mut seen = 0;
        let r = minimize_mma(
            |x: &[f64], df: &mut [f64], _: &mut [f64], _: &mut [f64]| {
                df[0] = 2.0 * x[0];
                Ok::<f64, Infallible>(x[0] * x[0])
            },
            0,
            &[1.0],
            &[-2.0],
            &[2.0],
            &MmaParams::default(),
            |rec| {
                seen += 1;
                if rec.iteration == 1 { Control::Stop } else { Control::Continue }
            },
        )
        .unwrap();
        assert_eq!(r.status, MmaStatus::Stopped);
        assert_eq!((seen, r.iterations, r.evaluations), (2, 1, 2));
    }

    #[test]
    fn a_non_finite_start_is_reported() {
        let r = run(|_, _, _, _| f64::NAN, 0, &[1.0], &[0.0], &[2.0], &MmaParams::default());
        assert_eq!(r.status, MmaStatus::NonFinite { iteration: 0 });
    }
}
