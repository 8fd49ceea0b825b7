//! `gradfem optimize`: the registered design parameters by the method of moving asymptotes
//! (MMA, with constraints `quantity ≤ upper`), bounded L-BFGS (without constraints; with them
//! inside an augmented Lagrangian when asked for), or Newton-CG in a trust region with exact
//! Hessian-vector products ([`gradfem_solvers::trust`]; constraints by the same augmented
//! Lagrangian, whose Hessian products add the active constraints').
//!
//! The optimizer works in scaled variables x_i = m_i / s_i with s_i the magnitude of the
//! starting value (1 where it is zero; the mesh size for node coordinates), so parameters of
//! very different units are equally conditioned. Each evaluation solves the forward problem
//! once and differentiates the objective and every constraint with the same converged state
//! (one adjoint solve each). Bounds come from the registry (`[parameters] bounds`). MMA sees
//! the objective divided by its starting magnitude and each constraint divided by its bound's
//! (so its tolerances are relative).
//!
//! # Temperature limits that hold
//!
//! A `peak` constraint bounds the largest nodal temperature of a group. Its gradient is that of
//! the Kreisselmeier–Steinhauser aggregate (smooth, [`gradfem_thermal::objective`]); with MMA
//! its value at every iterate is the true peak itself — the aggregate corrected by its offset
//! from the true maximum at that iterate — so a converged design meets the limit on the true
//! peak, not on a smoothed stand-in. With L-BFGS (whose line search needs one consistent
//! function) the aggregate itself is constrained, which bounds the peak from above (a design
//! below the limit by up to ln(n)/ρ). The true peak of every `peak` or `max` (p-norm)
//! quantity is reported beside its aggregate in the history and the outcome.
//!
//! The design returned is the last iterate when the method converged; otherwise (iteration
//! limit, Ctrl-C) the best design seen: feasible first, then the lowest objective.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use gradfem_solvers::mma::{MmaConvergence, MmaParams, MmaStatus, minimize_mma};
use gradfem_solvers::optimize::{
    AugLagParams, AugLagResult, AugLagStatus, Control, ConvergenceReason, IterationRecord,
    LbfgsbParams, Status, augmented_lagrangian, minimize_lbfgsb,
};
use gradfem_solvers::params::{ParamKind, ParamVector};
use gradfem_solvers::trust::{NewtonCgParams, augmented_lagrangian_newton_cg, minimize_newton_cg};
use gradfem_solvers::watch::{WatchRow, Watcher};
use gradfem_thermal::ObjectiveKind;

use crate::app::{AppError, ObjectiveSet, Problem, objective_terms};
use crate::problem::{ProblemError, ProblemFile};
use crate::run::RunError;

/// Relative feasibility tolerance: a constraint holds when `value − upper ≤ FEASIBILITY_TOL ×
/// scale` (the scale of its bound; 0.45 mK for a 450 K limit).
pub const FEASIBILITY_TOL: f64 = 1e-6;

/// A thermal quantity whose true nodal peak is reported beside it.
#[derive(Clone, Debug, PartialEq)]
pub struct PeakWatch {
    /// The volume group.
    pub group: String,
    /// True for `peak` (KS aggregate), false for `max` (p-norm mean).
    pub aggregate_is_ks: bool,
}

/// One constraint: `value(quantity) ≤ upper`.
#[derive(Clone, Debug)]
pub struct Constraint {
    /// Its name in histories, plots and messages.
    pub label: String,
    /// The constrained quantity.
    pub quantity: ObjectiveSet,
    /// The bound.
    pub upper: f64,
    /// A `peak` or `max` temperature quantity: the group whose true peak is reported.
    pub peak: Option<PeakWatch>,
}

/// The optimization method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// The method of moving asymptotes ([`gradfem_solvers::mma`]).
    Mma,
    /// Bounded L-BFGS; constraints by an augmented Lagrangian.
    Lbfgs,
    /// Newton-CG in a trust region with exact Hessian-vector products (second-order
    /// adjoint); constraints by the augmented Lagrangian.
    NewtonCg,
}

/// The `[optimize]` settings with the constraints resolved against the mesh.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Maximize the objective instead of minimizing it.
    pub maximize: bool,
    /// Iterations (MMA), or iterations of each inner L-BFGS run.
    pub max_iterations: usize,
    /// Outer iterations of the augmented Lagrangian.
    pub max_outer: usize,
    /// Projected-gradient (L-BFGS) or KKT (MMA) tolerance of the scaled problem.
    pub gtol: f64,
    /// MMA: the relative step below which a feasible design has converged.
    pub xtol: f64,
    /// The method (resolved from `auto`).
    pub method: Method,
    /// The constraints.
    pub constraints: Vec<Constraint>,
    /// The design variables (registered names); empty: every registered parameter.
    pub design: Vec<String>,
    /// Write `history.csv` and `history.png` into this directory after every iteration (the
    /// CLI's `--watch DIR`), so a long run can be followed while it goes.
    pub watch: Option<PathBuf>,
    /// Continue an interrupted run from the last row of this `history.csv` (the CLI's
    /// `--resume`): the design starts there, iterations and evaluations count on, and the new
    /// rows are appended to the old ones.
    pub resume: Option<PathBuf>,
}

/// The temperature quantity of a constraint whose true peak can be reported, if any.
fn peak_watch(set: &ObjectiveSet) -> Option<PeakWatch> {
    match set.thermal.as_slice() {
        [term] if set.electrical.is_empty() && set.mechanical.is_empty() => match &term.kind {
            ObjectiveKind::Peak { group, .. } => {
                Some(PeakWatch { group: group.clone(), aggregate_is_ks: true })
            }
            ObjectiveKind::Max { group, .. } => {
                Some(PeakWatch { group: group.clone(), aggregate_is_ks: false })
            }
            _ => None,
        },
        _ => None,
    }
}

/// Read `[optimize]` (defaults when absent).
pub fn settings(file: &ProblemFile, problem: &Problem) -> Result<Settings, AppError> {
    let spec = file.spec.optimize.clone().unwrap_or_default();
    let invalid = |message: String| {
        AppError::Problem(ProblemError::invalid_in(&file.path, &file.source, message))
    };
    for name in &spec.design {
        if !problem.registry().contains(name) {
            return Err(invalid(format!(
                "[optimize] design names '{name}', which is not registered; registered: {}",
                problem.registry().names().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    for (key, value) in [("gtol", spec.gtol), ("xtol", spec.xtol)] {
        if !(value.is_finite() && value > 0.0) {
            return Err(invalid(format!(
                "[optimize] {key} = {value}: must be finite and positive"
            )));
        }
    }
    let mesh = problem.mesh();
    let mut constraints = Vec::new();
    for c in &spec.constraints {
        let parts = objective_terms(file, mesh, &[c.quantity()], "[[optimize.constraint]]")?;
        let missing = if !parts.terminal.is_empty() && problem.electrical().is_none() {
            Some("electrical")
        } else if !parts.mechanical.is_empty() && problem.mechanical().is_none() {
            Some("mechanical")
        } else {
            None
        };
        if let Some(field) = missing {
            return Err(invalid(format!(
                "constraint '{}' is {field}, but the problem has no [{field}] table",
                c.label()
            )));
        }
        if !c.upper.is_finite() {
            return Err(invalid(format!(
                "constraint '{}': upper = {} must be finite",
                c.label(),
                c.upper
            )));
        }
        let quantity = parts.into_set();
        let peak = peak_watch(&quantity);
        if peak.as_ref().is_some_and(|p| !p.aggregate_is_ks) {
            tracing::warn!(
                "{}: constraint '{}' bounds a p-norm mean, which lies below the true maximum \
                 temperature; kind = \"peak\" bounds the maximum itself",
                file.path.display(),
                c.label()
            );
        }
        constraints.push(Constraint { label: c.label(), quantity, upper: c.upper, peak });
    }
    let method = match spec.method.get_ref().as_str() {
        "auto" if constraints.is_empty() => Method::Lbfgs,
        "auto" | "mma" => Method::Mma,
        "lbfgs" => Method::Lbfgs,
        "newton-cg" => {
            if let Err(why) = problem.second_order_support() {
                return Err(invalid(format!(
                    "line {}: [optimize] method = 'newton-cg' needs Hessian-vector products: {why}; \
                     use 'lbfgs' or 'mma'",
                    file.line_of(&spec.method)
                )));
            }
            Method::NewtonCg
        }
        other => {
            return Err(invalid(format!(
                "line {}: [optimize] method = '{other}': expected auto, mma, lbfgs or newton-cg",
                file.line_of(&spec.method)
            )));
        }
    };
    Ok(Settings {
        maximize: spec.maximize,
        max_iterations: spec.max_iterations,
        max_outer: spec.max_outer,
        gtol: spec.gtol,
        xtol: spec.xtol,
        method,
        constraints,
        design: spec.design.clone(),
        watch: None,
        resume: None,
    })
}

/// One evaluation at a design.
#[derive(Clone, Debug)]
struct Evaluation {
    /// The scaled design.
    x: Vec<f64>,
    /// J with the sign the optimizer minimizes.
    objective: f64,
    /// ∂(sign J)/∂x in scaled variables.
    grad: Vec<f64>,
    /// dJ/dm per design parameter (J as stated; a field parameter: the sum over its entries,
    /// the derivative for a uniform change of the field).
    param_gradient: Vec<f64>,
    /// Per constraint: value − upper as the optimizer sees it (the true peak for a `peak`
    /// constraint under MMA).
    constraints: Vec<f64>,
    /// Their gradients in scaled variables.
    jacobian: Vec<Vec<f64>>,
    /// Per constraint: the quantity's own value (the aggregate for `peak`/`max`).
    values: Vec<f64>,
    /// Per constraint: its true nodal peak temperature, for `peak`/`max` quantities.
    peaks: Vec<Option<f64>>,
}

/// The outcome of a run.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The watched history: one row per iteration (parameters, gradients, constraint values
    /// and true peaks).
    pub watcher: Watcher,
    /// Objective at the start and at the returned design (as the user states it, not negated).
    pub initial_objective: f64,
    pub final_objective: f64,
    /// Constraint quantities at the returned design (the aggregate for `peak`/`max`).
    pub final_constraints: Vec<f64>,
    /// True nodal peak temperature of each `peak`/`max` constraint at the returned design.
    pub final_peaks: Vec<Option<f64>>,
    /// The returned design's parameter vector (unscaled).
    pub design: Vec<f64>,
    /// The returned design per watched parameter (fields by their mean), as in the history.
    pub final_params: Vec<f64>,
    /// The method used.
    pub method: Method,
    /// Why it stopped, in words.
    pub status: String,
    /// Whether the method's convergence test passed.
    pub converged: bool,
    /// Whether every constraint holds at the returned design (within [`FEASIBILITY_TOL`]).
    pub feasible: bool,
    /// Iterations, counted across augmented-Lagrangian runs and a resumed run.
    pub iterations: usize,
    /// Objective evaluations (forward solves), a resumed run's included.
    pub evaluations: usize,
    /// True when Ctrl-C (or the stop flag) ended the run.
    pub stopped: bool,
}

impl Outcome {
    /// The constraints that do not hold at the returned design, in words (empty: feasible).
    pub fn violations(&self, settings: &Settings) -> Vec<String> {
        settings
            .constraints
            .iter()
            .zip(&self.final_constraints)
            .zip(&self.final_peaks)
            .filter_map(|((c, &v), peak)| {
                let checked = if c.peak.as_ref().is_some_and(|p| p.aggregate_is_ks)
                    && self.method == Method::Mma
                {
                    peak.unwrap_or(v)
                } else {
                    v
                };
                (checked - c.upper > FEASIBILITY_TOL * constraint_scale(c.upper, checked)).then(
                    || format!("'{}' = {checked:.6e} exceeds its bound {:.6e}", c.label, c.upper),
                )
            })
            .collect()
    }
}

/// The magnitude constraint `value ≤ upper` is divided by (its bound's, or the value's when
/// the bound is zero).
fn constraint_scale(upper: f64, value: f64) -> f64 {
    if upper != 0.0 {
        upper.abs()
    } else if value != 0.0 {
        value.abs()
    } else {
        1.0
    }
}

struct Evaluator<'a> {
    problem: &'a mut Problem,
    pv: ParamVector,
    scale: Vec<f64>,
    sign: f64,
    constraints: &'a [Constraint],
    /// Whether `peak` constraints are given the true peak as their value.
    exact_peaks: bool,
    recent: Vec<Evaluation>,
    count: usize,
    /// Hessian-vector products computed (Newton-CG).
    hessian_products: usize,
    /// The design the problem was last solved at (a cached evaluation may be of another).
    solved_at: Option<Vec<f64>>,
}

impl Evaluator<'_> {
    fn evaluate(&mut self, x: &[f64]) -> Result<Evaluation, RunError> {
        if let Some(e) = self.recent.iter().find(|e| e.x == x) {
            return Ok(e.clone());
        }
        let m: Vec<f64> = x.iter().zip(&self.scale).map(|(a, s)| a * s).collect();
        let Evaluator { pv, problem, .. } = self;
        pv.scatter(problem.registry_mut(), &m)?;
        self.problem.apply_parameters()?;
        self.problem.solve()?;
        self.solved_at = Some(x.to_vec());
        self.count += 1;
        let (j, g, _) = self.problem.gradient()?;
        let flat = g.flatten(&self.pv);
        let grad: Vec<f64> = flat.iter().zip(&self.scale).map(|(d, s)| self.sign * d * s).collect();
        let param_gradient = self
            .pv
            .ids()
            .iter()
            .map(|&id| flat[self.pv.range(id).expect("in vector")].iter().sum())
            .collect();
        let n_c = self.constraints.len();
        let (mut constraints, mut jacobian) = (Vec::with_capacity(n_c), Vec::with_capacity(n_c));
        let (mut values, mut peaks) = (Vec::with_capacity(n_c), Vec::with_capacity(n_c));
        for c in self.constraints {
            let old = self.problem.swap_objective(c.quantity.clone());
            let result = self.problem.gradient();
            self.problem.swap_objective(old);
            let (v, gc, _) = result?;
            let peak =
                c.peak.as_ref().map(|p| self.problem.temperature_peak(&p.group)).transpose()?;
            let exact = self.exact_peaks && c.peak.as_ref().is_some_and(|p| p.aggregate_is_ks);
            let seen = if exact { peak.unwrap_or(v) } else { v };
            constraints.push(seen - c.upper);
            values.push(v);
            peaks.push(peak);
            jacobian
                .push(gc.flatten(&self.pv).iter().zip(&self.scale).map(|(d, s)| d * s).collect());
        }
        let e = Evaluation {
            x: x.to_vec(),
            objective: self.sign * j,
            grad,
            param_gradient,
            constraints,
            jacobian,
            values,
            peaks,
        };
        if self.recent.len() >= 8 {
            self.recent.remove(0);
        }
        self.recent.push(e.clone());
        Ok(e)
    }

    /// The Hessian of the (scaled, signed) objective at `x` applied to `v`: solves at `x`
    /// first when the problem holds another design.
    fn hessian_vector(&mut self, x: &[f64], v: &[f64]) -> Result<Vec<f64>, RunError> {
        let mut w = vec![0.0; 1 + self.constraints.len()];
        w[0] = 1.0;
        self.weighted_hessian_vector(x, &w, v, &[])
    }

    /// Σ_k w_k ∇²g_k(x)·v in the scaled variables, g₀ the signed objective and gᵢ the i-th
    /// constraint divided by `c_scale[i]` (as the optimizer sees them): one product per
    /// non-zero weight, each constraint's through its quantity swapped in as the objective.
    fn weighted_hessian_vector(
        &mut self,
        x: &[f64],
        w: &[f64],
        v: &[f64],
        c_scale: &[f64],
    ) -> Result<Vec<f64>, RunError> {
        if self.solved_at.as_deref() != Some(x) {
            self.recent.retain(|e| e.x != x);
            self.evaluate(x)?;
        }
        let dm: Vec<f64> = v.iter().zip(&self.scale).map(|(a, s)| a * s).collect();
        let mut total = vec![0.0; dm.len()];
        for (k, &wk) in w.iter().enumerate() {
            if wk == 0.0 {
                continue;
            }
            let (hm, factor) = if k == 0 {
                (self.problem.hessian_vector_selection(&self.pv, &dm)?, self.sign)
            } else {
                let old = self.problem.swap_objective(self.constraints[k - 1].quantity.clone());
                let r = self.problem.hessian_vector_selection(&self.pv, &dm);
                self.problem.swap_objective(old);
                (r?, 1.0 / c_scale[k - 1])
            };
            self.hessian_products += 1;
            total.iter_mut().zip(&hm).for_each(|(t, h)| *t += wk * factor * h);
        }
        Ok(total.iter().zip(&self.scale).map(|(h, s)| h * s).collect())
    }
}

/// Column names of the history: every design parameter (per-element and coordinate fields
/// by their mean), then per constraint its quantity and, for `peak`/`max`, the true peak.
fn column_names(
    problem: &Problem,
    pv: &ParamVector,
    constraints: &[Constraint],
) -> (Vec<String>, Vec<String>) {
    let reg = problem.registry();
    let names = pv
        .ids()
        .iter()
        .map(|&id| reg.get(id))
        .map(|spec| match spec.kind {
            ParamKind::Scalar => spec.name.clone(),
            _ => format!("{} (mean)", spec.name),
        })
        .collect();
    let mut extras = Vec::new();
    for c in constraints {
        match &c.peak {
            Some(p) => {
                let what = if p.aggregate_is_ks { "KS aggregate" } else { "p-norm mean" };
                extras.push(format!("{} {what} (≤ {})", c.label, c.upper));
                extras.push(format!("{} true peak over {} (K)", c.label, p.group));
            }
            None => extras.push(format!("{} (≤ {})", c.label, c.upper)),
        }
    }
    (names, extras)
}

/// Watched values: parameters (fields by their mean), then the constraint columns.
fn columns(pv: &ParamVector, m: &[f64], e: &Evaluation) -> (Vec<f64>, Vec<f64>) {
    let params = pv
        .ids()
        .iter()
        .map(|&id| {
            let v = &m[pv.range(id).expect("in vector")];
            v.iter().sum::<f64>() / v.len() as f64
        })
        .collect();
    let mut extras = Vec::new();
    for (v, peak) in e.values.iter().zip(&e.peaks) {
        extras.push(*v);
        if let Some(p) = peak {
            extras.push(*p);
        }
    }
    (params, extras)
}

/// The human-readable reason an L-BFGS run ended.
fn lbfgs_status(status: &Status, gtol: f64, max_iterations: usize) -> String {
    match status {
        Status::Converged(ConvergenceReason::ProjectedGradient { norm }) => {
            format!("converged: projected gradient {norm:.2e} ≤ gtol {gtol:.0e}")
        }
        Status::Converged(ConvergenceReason::RelativeDecrease { decrease }) => format!(
            "converged: the objective changed by {decrease:.2e} (relative) in the last iteration"
        ),
        Status::MaxIterations => format!(
            "not converged: stopped at the iteration limit ({max_iterations}, [optimize] max_iterations)"
        ),
        Status::Stopped => "stopped by the user".into(),
        Status::LineSearchFailed { grad_norm } => format!(
            "not converged: no step decreased the objective (projected gradient {grad_norm:.2e}); \
             `gradfem check-gradient` tests the gradient"
        ),
        Status::NonFiniteStart => {
            "not converged: the objective or its gradient is not finite at the start".into()
        }
    }
}

/// The human-readable reason an MMA run ended.
fn mma_status(status: &MmaStatus, settings: &Settings) -> String {
    match status {
        MmaStatus::Converged(MmaConvergence::Kkt { residual }) => {
            format!("converged: KKT residual {residual:.2e} ≤ gtol {:.0e}", settings.gtol)
        }
        MmaStatus::Converged(MmaConvergence::Step { step }) => format!(
            "converged: the last step was {step:.2e} of the design range (≤ xtol {:.0e}) at a feasible design",
            settings.xtol
        ),
        MmaStatus::MaxIterations => format!(
            "not converged: stopped at the iteration limit ({}, [optimize] max_iterations)",
            settings.max_iterations
        ),
        MmaStatus::Stopped => "stopped by the user".into(),
        MmaStatus::NonFinite { iteration } => format!(
            "not converged: the objective, a constraint or a gradient was not finite at iteration {iteration}"
        ),
    }
}

/// The rows of an interrupted run's history and the scaled design of its last row.
fn resume_from(
    path: &Path,
    problem: &Problem,
    pv: &ParamVector,
    names: &[String],
    extras: &[String],
) -> Result<(Watcher, Vec<f64>), RunError> {
    let setup = |m: String| RunError::Setup(format!("--resume {}: {m}", path.display()));
    let old = Watcher::read_csv(path, names.len()).map_err(|e| setup(e.to_string()))?;
    if old.names() != names || old.extra_names() != extras {
        return Err(setup(format!(
            "its columns ({}) are not this problem's ({}); was it written for another problem?",
            old.names().iter().chain(old.extra_names()).cloned().collect::<Vec<_>>().join(", "),
            names.iter().chain(extras).cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    let reg = problem.registry();
    if let Some(&id) = pv.ids().iter().find(|&&id| reg.get(id).kind != ParamKind::Scalar) {
        return Err(setup(format!(
            "'{}' is a field, which the history keeps by its mean only; a run over field parameters cannot be resumed",
            reg.get(id).name
        )));
    }
    let Some(last) = old.history().last() else {
        return Err(setup("the history has no rows".into()));
    };
    let design = last.params.clone();
    if design.iter().any(|v| !v.is_finite()) {
        return Err(setup(format!(
            "its last row (iteration {}) has a non-finite design",
            last.iteration
        )));
    }
    let mut watcher = Watcher::with_extras(names.to_vec(), extras.to_vec());
    for row in old.history() {
        watcher.push(row.clone());
    }
    Ok((watcher, design))
}

/// Run the optimization. `stop` ends it at the next iteration (Ctrl-C); `progress` sees each
/// iteration's number and objective. The problem is left at the returned design, solved.
pub fn run(
    problem: &mut Problem,
    settings: &Settings,
    stop: Arc<AtomicBool>,
    mut progress: impl FnMut(usize, f64),
) -> Result<Outcome, RunError> {
    let pv = if settings.design.is_empty() {
        ParamVector::all(problem.registry())
    } else {
        let ids = settings
            .design
            .iter()
            .map(|n| problem.registry().id(n))
            .collect::<Result<Vec<_>, _>>()?;
        ParamVector::new(problem.registry(), &ids)
    };
    if pv.is_empty() {
        return Err(RunError::Setup(
            "no parameters are registered: `[parameters] register = [...]` names the design variables".into(),
        ));
    }
    let (names, extra_names) = column_names(problem, &pv, &settings.constraints);
    let (mut watcher, start_iteration, start_evaluations) = match &settings.resume {
        Some(path) => {
            let (w, design) = resume_from(path, problem, &pv, &names, &extra_names)?;
            let last = w.history().last().expect("checked");
            let (it, ev) = (last.iteration + 1, last.evaluations);
            pv.scatter(problem.registry_mut(), &design)?;
            problem.apply_parameters()?;
            tracing::info!("resuming from {} at iteration {it}", path.display());
            (w, it, ev)
        }
        None => (Watcher::with_extras(names, extra_names), 0, 0),
    };
    let resumed = settings.resume.is_some();
    let m0 = pv.gather(problem.registry());
    let (lo, hi) = pv.bounds();
    let mut scale: Vec<f64> = m0.iter().map(|v| if *v != 0.0 { v.abs() } else { 1.0 }).collect();
    for &id in pv.ids() {
        if matches!(problem.registry().get(id).kind, ParamKind::NodeCoordinates) {
            let r = pv.range(id).expect("in vector");
            let (a, b) = m0[r.clone()]
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
            for s in &mut scale[r] {
                *s = (b - a).max(f64::MIN_POSITIVE);
            }
        }
    }
    let x0: Vec<f64> = m0.iter().zip(&scale).map(|(v, s)| v / s).collect();
    let lower: Vec<f64> = lo.iter().zip(&scale).map(|(v, s)| v / s).collect();
    let upper: Vec<f64> = hi.iter().zip(&scale).map(|(v, s)| v / s).collect();
    let sign = if settings.maximize { -1.0 } else { 1.0 };
    let eval = RefCell::new(Evaluator {
        problem,
        pv: pv.clone(),
        scale: scale.clone(),
        sign,
        constraints: &settings.constraints,
        exact_peaks: settings.method == Method::Mma,
        recent: Vec::new(),
        count: 0,
        hessian_products: 0,
        solved_at: None,
    });
    let initial = eval.borrow_mut().evaluate(&x0)?;
    let c_scale: Vec<f64> = settings
        .constraints
        .iter()
        .zip(&initial.constraints)
        .map(|(c, v)| constraint_scale(c.upper, v + c.upper))
        .collect();
    let feasible_at =
        |e: &Evaluation| e.constraints.iter().zip(&c_scale).all(|(c, s)| *c <= FEASIBILITY_TOL * s);
    let watcher_cell = RefCell::new(&mut watcher);
    let iterations = RefCell::new(start_iteration);
    // One history row per iterate, numbered across the augmented Lagrangian's inner runs (and
    // a resumed run), with J itself (not the penalized merit) and cumulative evaluations.
    let push_row = |e: &Evaluation, grad_norm: f64| {
        let m: Vec<f64> = e.x.iter().zip(&scale).map(|(a, s)| a * s).collect();
        let (params, extras) = columns(&pv, &m, e);
        let mut it = iterations.borrow_mut();
        let evaluations = start_evaluations + eval.borrow().count;
        watcher_cell.borrow_mut().push(WatchRow {
            iteration: *it,
            objective: sign * e.objective,
            params,
            gradient: e.param_gradient.clone(),
            grad_norm,
            evaluations,
            extras,
        });
        *it += 1;
        if let Some(dir) = &settings.watch {
            let w = watcher_cell.borrow();
            // Watching is best effort: a failed write is logged and the run goes on.
            let written = std::fs::create_dir_all(dir)
                .map_err(|e| e.to_string())
                .and_then(|()| w.write_csv(dir.join("history.csv")).map_err(|e| e.to_string()))
                .and_then(|()| w.write_png(dir.join("history.png")).map_err(|e| e.to_string()));
            if let Err(e) = written {
                tracing::warn!("--watch {}: {e}", dir.display());
            }
        }
    };
    let best: RefCell<Option<(bool, f64, Vec<f64>)>> = RefCell::new(None);
    let record = |e: &Evaluation| {
        let feasible = feasible_at(e);
        let mut b = best.borrow_mut();
        let better = match &*b {
            None => true,
            Some((f, j, _)) => (feasible && !f) || (feasible == *f && e.objective < *j),
        };
        if better {
            *b = Some((feasible, e.objective, e.x.clone()));
        }
    };
    record(&initial);
    // A resumed run's start is the last row of its history already.
    if !resumed {
        push_row(&initial, f64::NAN);
    }
    let callback = |rec: &IterationRecord| -> Control {
        let evaluated = (rec.iteration > 0).then(|| eval.borrow_mut().evaluate(&rec.x));
        if let Some(Ok(e)) = evaluated {
            record(&e);
            push_row(&e, rec.grad_norm);
            progress(*iterations.borrow() - 1, sign * e.objective);
        }
        if stop.load(Ordering::SeqCst) { Control::Stop } else { Control::Continue }
    };
    let inner = LbfgsbParams {
        max_iterations: settings.max_iterations,
        gtol: settings.gtol,
        history_x: false,
        ..Default::default()
    };
    let objective = |x: &[f64], g: &mut [f64]| -> Result<f64, RunError> {
        let e = eval.borrow_mut().evaluate(x)?;
        record(&e);
        g.copy_from_slice(&e.grad);
        Ok(e.objective)
    };
    // The constraints as the augmented Lagrangian sees them: each divided by its scale.
    let constraints_of = |x: &[f64], c: &mut [f64], jac: &mut [f64]| -> Result<(), RunError> {
        let e = eval.borrow_mut().evaluate(x)?;
        let n = x.len();
        for i in 0..settings.constraints.len() {
            c[i] = e.constraints[i] / c_scale[i];
            for j in 0..n {
                jac[i * n + j] = e.jacobian[i][j] / c_scale[i];
            }
        }
        Ok(())
    };
    let al_status = |result: &AugLagResult, params: &AugLagParams, inner: String| -> String {
        match result.status {
            AugLagStatus::Converged => format!(
                "converged (augmented Lagrangian): constraints and complementarity within {:.0e} after {} outer iteration(s); last inner run {inner}",
                params.constraint_tol, result.outer_iterations
            ),
            AugLagStatus::MaxOuterIterations => format!(
                "not converged: stopped at the outer iteration limit ({}, [optimize] max_outer) with violation {:.2e}; last inner run {inner}",
                settings.max_outer, result.violation
            ),
            AugLagStatus::Stopped => "stopped by the user".into(),
        }
    };
    let (status, converged, last_x) = match settings.method {
        Method::Mma => {
            let n_c = settings.constraints.len();
            let f_scale = if initial.objective != 0.0 { initial.objective.abs() } else { 1.0 };
            let params = MmaParams {
                max_iterations: settings.max_iterations,
                xtol: settings.xtol,
                kkt_tol: settings.gtol,
                feasibility_tol: FEASIBILITY_TOL,
                ..Default::default()
            };
            let result = minimize_mma(
                |x: &[f64], df: &mut [f64], c: &mut [f64], dc: &mut [f64]| {
                    let e = eval.borrow_mut().evaluate(x)?;
                    record(&e);
                    let n = x.len();
                    for j in 0..n {
                        df[j] = e.grad[j] / f_scale;
                    }
                    for i in 0..n_c {
                        c[i] = e.constraints[i] / c_scale[i];
                        for j in 0..n {
                            dc[i * n + j] = e.jacobian[i][j] / c_scale[i];
                        }
                    }
                    Ok::<f64, RunError>(e.objective / f_scale)
                },
                n_c,
                &x0,
                &lower,
                &upper,
                &params,
                callback,
            )?;
            (mma_status(&result.status, settings), result.status.is_converged(), result.x)
        }
        Method::NewtonCg if !settings.constraints.is_empty() => {
            let n_c = settings.constraints.len();
            let params =
                AugLagParams { inner, max_outer: settings.max_outer, ..Default::default() };
            let newton = NewtonCgParams {
                max_iterations: settings.max_iterations,
                gtol: settings.gtol,
                ..Default::default()
            };
            let (result, products) = augmented_lagrangian_newton_cg(
                objective,
                &constraints_of,
                |x: &[f64], w: &[f64], v: &[f64]| -> Result<Vec<f64>, RunError> {
                    eval.borrow_mut().weighted_hessian_vector(x, w, v, &c_scale)
                },
                n_c,
                &x0,
                &lower,
                &upper,
                &params,
                &newton,
                callback,
            )?;
            let last_inner = result.inner_status.last().copied().unwrap_or(Status::MaxIterations);
            let inner = format!(
                "{} ({products} Hessian-vector products in all)",
                lbfgs_status(&last_inner, settings.gtol, settings.max_iterations)
            );
            (al_status(&result, &params, inner), result.status == AugLagStatus::Converged, result.x)
        }
        Method::NewtonCg => {
            let params = NewtonCgParams {
                max_iterations: settings.max_iterations,
                gtol: settings.gtol,
                ..Default::default()
            };
            let hessian_vector = |x: &[f64], v: &[f64]| -> Result<Vec<f64>, RunError> {
                eval.borrow_mut().hessian_vector(x, v)
            };
            let result = minimize_newton_cg(
                objective,
                hessian_vector,
                &x0,
                &lower,
                &upper,
                &params,
                callback,
            )?;
            let r = &result.result;
            let reason = match r.status {
                Status::Converged(ConvergenceReason::RelativeDecrease { decrease }) => format!(
                    "converged: the quadratic model predicts a relative decrease of only \
                     {decrease:.2e} for the next step"
                ),
                ref other => lbfgs_status(other, settings.gtol, settings.max_iterations),
            };
            let status = format!(
                "{reason} ({} Hessian-vector products, {} CG iterations)",
                result.hessian_products, result.cg_iterations
            );
            (status, r.status.is_converged(), result.result.x)
        }
        Method::Lbfgs if settings.constraints.is_empty() => {
            let result = minimize_lbfgsb(objective, &x0, &lower, &upper, &inner, callback)?;
            let status = lbfgs_status(&result.status, settings.gtol, settings.max_iterations);
            (status, result.status.is_converged(), result.x)
        }
        Method::Lbfgs => {
            let n_c = settings.constraints.len();
            let params =
                AugLagParams { inner, max_outer: settings.max_outer, ..Default::default() };
            let result = augmented_lagrangian(
                objective,
                &constraints_of,
                n_c,
                &x0,
                &lower,
                &upper,
                &params,
                callback,
            )?;
            let last_inner = result.inner_status.last().copied().unwrap_or(Status::MaxIterations);
            let inner = lbfgs_status(&last_inner, settings.gtol, settings.max_iterations);
            (al_status(&result, &params, inner), result.status == AugLagStatus::Converged, result.x)
        }
    };
    let stopped = stop.load(Ordering::SeqCst);
    // A converged method returns its last iterate; otherwise the best design seen.
    let x_best =
        if converged { last_x } else { best.borrow().clone().expect("the start is recorded").2 };
    let final_eval = eval.borrow_mut().evaluate(&x_best)?;
    // Leave the problem at the returned design, solved.
    let evaluations = {
        let mut ev = eval.borrow_mut();
        let m: Vec<f64> = x_best.iter().zip(&scale).map(|(a, s)| a * s).collect();
        let Evaluator { pv, problem, .. } = &mut *ev;
        pv.scatter(problem.registry_mut(), &m)?;
        ev.problem.apply_parameters()?;
        ev.problem.solve()?;
        start_evaluations + ev.count
    };
    let iterations = iterations.into_inner().saturating_sub(1);
    let design: Vec<f64> = x_best.iter().zip(&scale).map(|(a, s)| a * s).collect();
    let feasible = feasible_at(&final_eval);
    let final_params = columns(&pv, &design, &final_eval).0;
    Ok(Outcome {
        watcher,
        initial_objective: sign * initial.objective,
        final_objective: sign * final_eval.objective,
        final_constraints: final_eval.values.clone(),
        final_peaks: final_eval.peaks.clone(),
        design,
        final_params,
        method: settings.method,
        status: if stopped && !status.starts_with("stopped") {
            format!("stopped by the user; {status}")
        } else {
            status
        },
        converged,
        feasible,
        iterations,
        evaluations,
        stopped,
    })
}
