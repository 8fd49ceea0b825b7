//! `gradfem optimize`: bounded L-BFGS over every registered parameter, with inequality
//! constraints `quantity ≤ upper` by an augmented Lagrangian.
//!
//! The optimizer works in scaled variables x_i = m_i / s_i with s_i the magnitude of the
//! starting value (1 where it is zero; the mesh size for node coordinates), so parameters of
//! very different units are equally conditioned. Each evaluation solves the forward problem
//! once and differentiates the objective and every constraint with the same converged state
//! (one adjoint solve each). Bounds come from the registry (`[parameters] bounds`). The
//! best design seen (feasible first, then lowest objective) is kept and is what a run stopped
//! by Ctrl-C returns.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use gradfem_solvers::optimize::{
    AugLagParams, Control, IterationRecord, LbfgsbParams, augmented_lagrangian, minimize_lbfgsb,
};
use gradfem_solvers::params::{ParamKind, ParamVector};
use gradfem_solvers::watch::{WatchRow, Watcher};

use crate::app::{AppError, ObjectiveSet, Problem, objective_terms};
use crate::problem::{OptimizeSpec, ProblemFile};
use crate::thermal::RunError;

/// One constraint: `value(quantity) ≤ upper`.
#[derive(Clone, Debug)]
pub struct Constraint {
    pub label: String,
    /// The constrained quantity.
    pub quantity: ObjectiveSet,
    pub upper: f64,
}

/// The `[optimize]` settings with the constraints resolved against the mesh.
#[derive(Clone, Debug)]
pub struct Settings {
    pub maximize: bool,
    pub max_iterations: usize,
    pub max_outer: usize,
    pub gtol: f64,
    pub constraints: Vec<Constraint>,
    /// The design variables (registered names); empty: every registered parameter.
    pub design: Vec<String>,
    /// Write `history.csv` and `history.png` into this directory after every iteration (the
    /// CLI's `--watch DIR`), so a long run can be followed while it goes.
    pub watch: Option<std::path::PathBuf>,
}

/// Read `[optimize]` (defaults when absent).
pub fn settings(file: &ProblemFile, problem: &Problem) -> Result<Settings, AppError> {
    let spec = file.spec.optimize.clone().unwrap_or(OptimizeSpec {
        maximize: false,
        max_iterations: 50,
        max_outer: 10,
        gtol: 1e-6,
        constraints: Vec::new(),
        design: Vec::new(),
    });
    for name in &spec.design {
        if !problem.registry().contains(name) {
            return Err(AppError::Problem(crate::problem::ProblemError::Invalid {
                file: file.path.clone(),
                message: format!(
                    "[optimize] design names '{name}', which is not registered; registered: {}",
                    problem.registry().names().collect::<Vec<_>>().join(", ")
                ),
            }));
        }
    }
    let mesh = &problem.thermal().mesh;
    let mut constraints = Vec::new();
    for c in &spec.constraints {
        let parts = objective_terms(file, mesh, &[c.quantity()], "[[optimize.constraint]]")?;
        let missing = if !parts.terminal.is_empty() && problem.electro_thermal().is_none() {
            Some("electrical")
        } else if !parts.mechanical.is_empty() && problem.mechanical.is_none() {
            Some("mechanical")
        } else {
            None
        };
        if let Some(field) = missing {
            return Err(AppError::Problem(crate::problem::ProblemError::Invalid {
                file: file.path.clone(),
                message: format!(
                    "constraint '{}' is {field}, but the problem has no [{field}] table",
                    c.label()
                ),
            }));
        }
        constraints.push(Constraint {
            label: c.label(),
            quantity: parts.into_set(),
            upper: c.upper,
        });
    }
    Ok(Settings {
        maximize: spec.maximize,
        max_iterations: spec.max_iterations,
        max_outer: spec.max_outer,
        gtol: spec.gtol,
        constraints,
        design: spec.design.clone(),
        watch: None,
    })
}

/// One evaluation: J, ∂J/∂x, and per constraint c_i = value − upper with its gradient (all
/// in scaled variables; J with the sign the optimizer minimizes).
#[derive(Clone, Debug)]
struct Evaluation {
    x: Vec<f64>,
    objective: f64,
    grad: Vec<f64>,
    constraints: Vec<f64>,
    jacobian: Vec<Vec<f64>>,
}

/// The outcome of a run.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The watched history: one row per iteration (parameters, then constraint quantities).
    pub watcher: Watcher,
    /// Objective at the start and at the returned design (as the user states it, not negated).
    pub initial_objective: f64,
    pub final_objective: f64,
    /// Constraint quantities at the returned design (compare with their `upper`).
    pub final_constraints: Vec<f64>,
    /// The returned design's parameter vector (unscaled).
    pub design: Vec<f64>,
    /// Why it stopped.
    pub status: String,
    /// Objective evaluations (forward solves).
    pub evaluations: usize,
    /// True when Ctrl-C (or the stop flag) ended the run.
    pub stopped: bool,
}

struct Evaluator<'a> {
    problem: &'a mut Problem,
    pv: ParamVector,
    scale: Vec<f64>,
    sign: f64,
    constraints: &'a [Constraint],
    recent: Vec<Evaluation>,
    count: usize,
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
        self.count += 1;
        let (j, g, _, _) = self.problem.gradient()?;
        let grad: Vec<f64> =
            g.flatten(&self.pv).iter().zip(&self.scale).map(|(d, s)| self.sign * d * s).collect();
        let mut constraints = Vec::with_capacity(self.constraints.len());
        let mut jacobian = Vec::with_capacity(self.constraints.len());
        for c in self.constraints {
            let old = self.problem.swap_objective(c.quantity.clone());
            let result = self.problem.gradient();
            self.problem.swap_objective(old);
            let (v, gc, _, _) = result?;
            constraints.push(v - c.upper);
            jacobian
                .push(gc.flatten(&self.pv).iter().zip(&self.scale).map(|(d, s)| d * s).collect());
        }
        let e = Evaluation { x: x.to_vec(), objective: self.sign * j, grad, constraints, jacobian };
        if self.recent.len() >= 8 {
            self.recent.remove(0);
        }
        self.recent.push(e.clone());
        Ok(e)
    }
}

/// Column names of the history: every design parameter (per-element and coordinate fields
/// by their mean), then every constraint quantity.
fn column_names(problem: &Problem, pv: &ParamVector, constraints: &[Constraint]) -> Vec<String> {
    let reg = problem.registry();
    let mut names: Vec<String> = pv
        .ids()
        .iter()
        .map(|&id| reg.get(id))
        .map(|spec| match spec.kind {
            ParamKind::Scalar => spec.name.clone(),
            _ => format!("{} (mean)", spec.name),
        })
        .collect();
    names.extend(constraints.iter().map(|c| format!("{} (≤ {})", c.label, c.upper)));
    names
}

/// Watched values: parameters (fields by their mean) and constraint quantities.
fn columns(pv: &ParamVector, m: &[f64], e: &Evaluation, c: &[Constraint]) -> Vec<f64> {
    let mut out: Vec<f64> = pv
        .ids()
        .iter()
        .map(|&id| {
            let r = pv.range(id).expect("in vector");
            let v = &m[r];
            v.iter().sum::<f64>() / v.len() as f64
        })
        .collect();
    out.extend(e.constraints.iter().zip(c).map(|(ci, c)| ci + c.upper));
    out
}

/// Run the optimization. `stop` ends it at the next iteration (Ctrl-C); `progress` sees each
/// iteration's row. The problem is left at the returned design, solved.
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
    let names = column_names(problem, &pv, &settings.constraints);
    let watcher = RefCell::new(Watcher::new(names));
    let best: RefCell<Option<(bool, f64, Vec<f64>)>> = RefCell::new(None);
    let eval = RefCell::new(Evaluator {
        problem,
        pv: pv.clone(),
        scale: scale.clone(),
        sign,
        constraints: &settings.constraints,
        recent: Vec::new(),
        count: 0,
    });
    let initial = eval.borrow_mut().evaluate(&x0)?;
    let iterations = RefCell::new(0usize);
    // One history row per accepted iterate, numbered across the augmented Lagrangian's inner
    // runs, with the objective J itself (not the penalized merit the optimizer reports).
    let push_row = |e: &Evaluation, grad_norm: f64, evaluations: usize| {
        let m: Vec<f64> = e.x.iter().zip(&scale).map(|(a, s)| a * s).collect();
        let cols = columns(&pv, &m, e, &settings.constraints);
        let n = cols.len();
        let mut it = iterations.borrow_mut();
        watcher.borrow_mut().push(WatchRow {
            iteration: *it,
            objective: sign * e.objective,
            params: cols,
            gradient: vec![f64::NAN; n],
            grad_norm,
            evaluations,
        });
        *it += 1;
        if let Some(dir) = &settings.watch {
            let w = watcher.borrow();
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
    let record = |e: &Evaluation| {
        let feasible = e.constraints.iter().all(|&c| c <= 1e-9 * (1.0 + c.abs()));
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
    push_row(&initial, f64::NAN, 1);
    let callback = |rec: &IterationRecord| -> Control {
        if rec.iteration > 0
            && let Ok(e) = eval.borrow_mut().evaluate(&rec.x)
        {
            record(&e);
            push_row(&e, rec.grad_norm, rec.evaluations);
            progress(*iterations.borrow(), sign * e.objective);
        }
        if stop.load(Ordering::SeqCst) { Control::Stop } else { Control::Continue }
    };
    let inner = LbfgsbParams {
        max_iterations: settings.max_iterations,
        gtol: settings.gtol,
        history_x: false,
        ..Default::default()
    };
    let status = if settings.constraints.is_empty() {
        let result = minimize_lbfgsb(
            |x: &[f64], g: &mut [f64]| -> Result<f64, RunError> {
                let e = eval.borrow_mut().evaluate(x)?;
                record(&e);
                g.copy_from_slice(&e.grad);
                Ok(e.objective)
            },
            &x0,
            &lower,
            &upper,
            &inner,
            callback,
        )?;
        format!("{:?}", result.status)
    } else {
        let n_c = settings.constraints.len();
        let params = AugLagParams { inner, max_outer: settings.max_outer, ..Default::default() };
        let result = augmented_lagrangian(
            |x: &[f64], g: &mut [f64]| -> Result<f64, RunError> {
                let e = eval.borrow_mut().evaluate(x)?;
                record(&e);
                g.copy_from_slice(&e.grad);
                Ok(e.objective)
            },
            |x: &[f64], c: &mut [f64], jac: &mut [f64]| -> Result<(), RunError> {
                let e = eval.borrow_mut().evaluate(x)?;
                c.copy_from_slice(&e.constraints);
                let n = x.len();
                for (i, row) in e.jacobian.iter().enumerate() {
                    jac[i * n..(i + 1) * n].copy_from_slice(row);
                }
                Ok(())
            },
            n_c,
            &x0,
            &lower,
            &upper,
            &params,
            callback,
        )?;
        format!(
            "{} outer iteration(s), constraint violation {:.2e}, multipliers {:?}",
            result.outer_iterations, result.violation, result.multipliers
        )
    };
    let stopped = stop.load(Ordering::SeqCst);
    let (_, _, x_best) = best.borrow().clone().expect("the start is recorded");
    let final_eval = eval.borrow_mut().evaluate(&x_best)?;
    // Leave the problem at the returned design, solved.
    let evaluations = {
        let mut ev = eval.borrow_mut();
        let m: Vec<f64> = x_best.iter().zip(&scale).map(|(a, s)| a * s).collect();
        let Evaluator { pv, problem, .. } = &mut *ev;
        pv.scatter(problem.registry_mut(), &m)?;
        ev.problem.apply_parameters()?;
        ev.problem.solve()?;
        ev.count
    };
    let design: Vec<f64> = x_best.iter().zip(&scale).map(|(a, s)| a * s).collect();
    Ok(Outcome {
        watcher: watcher.into_inner(),
        initial_objective: sign * initial.objective,
        final_objective: sign * final_eval.objective,
        final_constraints: final_eval
            .constraints
            .iter()
            .zip(&settings.constraints)
            .map(|(c, s)| c + s.upper)
            .collect(),
        design,
        status: if stopped { format!("stopped by the user; {status}") } else { status },
        evaluations,
        stopped,
    })
}
