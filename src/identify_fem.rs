//! `gradfem identify` at the finite-element level: material parameters shared by several
//! specimens, each a `[hyperelastic]` problem file whose objective holds measured misfits.
//!
//! Each experiment is a problem file like `examples/rubber_pad.toml`: a mesh, a load path and
//! `[[objective]]` terms with `measured = "curve.csv"`, i.e. Σ_k w (q_k − m_k)² over the load
//! steps. The fit stacks, over every experiment, misfit term and load step, the residuals
//!
//! r = √w (q_k(p) − m_k)
//!
//! (q a reaction or displacement of the model, m the measured value, w the term's weight) and
//! minimizes Σ r², the sum of the problem files' misfit objectives, over the parameters p the
//! identification file lists, by a projected Levenberg–Marquardt method in variables scaled by
//! their starting magnitudes. Objective terms without `measured` do not take part.
//!
//! ```toml
//! title = "pad and block"
//!
//! [[parameter]]
//! name = "hyperelastic.mu1.domain"   # as registered in the problem files (every experiment
//! start = 0.2e6                      # must offer it); start: a value or a list (starting
//! bounds = [1e4, 5e6]                # points are all combinations); default: the value in
//!                                    # the first problem file
//! [[parameter]]
//! name = "hyperelastic.alpha1.domain"
//! start = [1.5, 4.0]
//! bounds = [0.5, 10.0]               # Ogden μ_p and α_p need bounds of one sign: μ_p α_p > 0
//!
//! [[experiment]]
//! mode = "fem"
//! problem = "pad.toml"               # relative to this file
//! name = "compression"               # default: the problem file's stem
//!
//! [fit]                              # optional
//! max_iterations = 50
//! step_tol = 1e-10                   # stop when a step moves no scaled variable more
//! ```
//!
//! # Jacobian
//!
//! Gauss–Newton needs dr/dp, one row per residual. With dead loads each load step's
//! equilibrium R(u_k; s_k, p) = 0 ties u_k to p alone, so the adjoint of q_k lives at step k
//! only: a row costs one transposed solve with the tangent at u_k and one parameter product
//! −μᵀ ∂R/∂p ([`crate::finite_strain::FiniteStrainProblem::quantity_gradients`]); all rows of
//! an experiment cost what one adjoint gradient costs, per misfit term. It is exact (to the
//! Newton tolerance of the forward states). Forward sensitivities would take one solve per
//! parameter and step and a Jacobian-vector product of ∂R/∂p that the model does not offer;
//! finite differences one forward sweep per parameter and a step-size choice.
//!
//! # Uncertainties
//!
//! At the optimum, with m residuals and n parameters, σ² = Σ r² / (m − n) and the covariance
//! is σ² (JᵀJ)⁻¹; the standard errors are the square roots of its diagonal (NaN, written as
//! `null`, when the data do not determine a parameter or m ≤ n).
//!
//! The Laplace posterior beside it: the exact Hessian H of Σ r² at the optimum (one
//! Hessian-vector product through the load steps per parameter and experiment, the per-step
//! second-order adjoint of [`crate::finite_strain::FiniteStrainProblem::hessian_vector_from_path`]),
//! covariance 2σ² H⁻¹, which equals σ² (JᵀJ)⁻¹ where the residuals vanish and the model is
//! linear in p, and differs from it by the residuals' curvature terms Σ rᵢ ∇²rᵢ otherwise
//! (`identify.json`'s `laplace`, drawn in `posterior.png`).
//!
//! # Stability
//!
//! An Ogden term is stable when μ_p α_p > 0. Fitted μ_p and α_p must have bounds of one sign
//! (both bounds non-zero), the same sign as the partner's bounds when the partner is fitted, or
//! as its value in every problem file when it is not; the box then holds only stable laws.

use std::path::{Path, PathBuf};
use std::time::Instant;

use gradfem_solvers::params::{ParamId, ParamRegistry};
use serde::Serialize;

use crate::identify_report::{
    Correlation, ExperimentFit, FemFitInfo, FitSpec, IdentifyError, IdentifyReport, IdentifySpec,
    OGDEN_CONVENTION, Progress, StartValues, cholesky_solve, dot, draw_data_and_fit, draw_legend,
    locate, normal_equations, standard_errors, write_outputs,
};
use crate::problem::ProblemFile;
use gradfem_coupling::Field;
use gradfem_coupling::fields::hyperelastic::HyperelasticField;

/// A fitted parameter with its bounds and starting values.
#[derive(Clone, Debug, PartialEq)]
pub struct FittedParameter {
    /// Registry name.
    pub name: String,
    /// Lower bound (−∞ when none).
    pub lower: f64,
    /// Upper bound (+∞ when none).
    pub upper: f64,
    /// Starting values.
    pub starts: Vec<f64>,
}

/// A misfit term of a problem: which objective term, measured values, weight.
#[derive(Clone, Debug)]
struct Misfit {
    term: usize,
    measured: Vec<f64>,
    weight: f64,
}

/// One specimen: its problem file set up for the fitted parameters.
struct FemExperiment {
    name: String,
    problem: PathBuf,
    run: HyperelasticField,
    registry: ParamRegistry,
    ids: Vec<ParamId>,
    misfits: Vec<Misfit>,
    /// The kind of each objective term (`reaction`, `displacement`, …), for the plot's axes.
    quantities: Vec<String>,
}

impl FemExperiment {
    /// √w (q_k − m_k) of every misfit term, step by step, from the quantities `q[term][step]`.
    fn push_residuals(&self, q: &[Vec<f64>], r: &mut Vec<f64>) {
        for m in &self.misfits {
            let s = m.weight.sqrt();
            r.extend(q[m.term].iter().zip(&m.measured).map(|(q, m)| s * (q - m)));
        }
    }

    /// A failed solve or product of this experiment of the identification file `file`.
    fn failed(&self, file: &Path, message: impl std::fmt::Display) -> IdentifyError {
        IdentifyError::Solve {
            file: file.to_path_buf(),
            experiment: self.name.clone(),
            message: message.to_string(),
        }
    }
}

/// Measured and model values of one misfit term of one experiment, over its load steps.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FemCurve {
    /// Experiment name.
    pub experiment: String,
    /// Index of the term among the problem's objective terms.
    pub term: usize,
    /// Load factors of the steps.
    pub load_factors: Vec<f64>,
    /// m_k.
    pub measured: Vec<f64>,
    /// q_k(p).
    pub model: Vec<f64>,
    /// w.
    pub weight: f64,
    /// What q is: the objective kind (`reaction` in N, `displacement` or
    /// `average_displacement` in m).
    pub quantity: String,
}

/// The axis label of an objective kind of a `[hyperelastic]` problem (SI units).
fn quantity_label(kind: &str) -> String {
    match kind {
        "reaction" => "reaction force (N)".into(),
        "displacement" => "displacement (m)".into(),
        "average_displacement" => "mean displacement (m)".into(),
        other => other.replace('_', " "),
    }
}

/// The outcome of one start.
#[derive(Clone, Debug)]
struct StartOutcome {
    /// Σ r² at the (clamped) starting point.
    initial_cost: f64,
    x: Vec<f64>,
    r: Vec<f64>,
    jac: Vec<Vec<f64>>,
    iterations: usize,
    converged: bool,
}

/// An identification over finite-element experiments.
pub struct FemIdentification {
    /// The identification file.
    pub path: PathBuf,
    /// Its title.
    pub title: String,
    /// The fitted parameters.
    pub parameters: Vec<FittedParameter>,
    /// Iteration settings.
    pub fit: FitSpec,
    experiments: Vec<FemExperiment>,
    forward_runs: usize,
    /// The parameter vector the experiments' runs were last solved at.
    solved_at: Option<Vec<f64>>,
    /// Why each experiment's last solve failed (None: it succeeded, or it is not this
    /// process's).
    solve_errors: Vec<Option<String>>,
    jacobians: usize,
    /// How the experiments are shared among processes (None: all solved here).
    split: Option<Box<dyn ExperimentSplit>>,
}

/// How the experiments of an identification are shared among processes (MPI ranks): each
/// process solves the experiments it owns, and the per-experiment results — residuals,
/// Jacobian rows, model curves, as one block of numbers each, or the error that stopped the
/// experiment — are exchanged so that every process holds all of them in experiment order.
/// Every process then takes the same Levenberg–Marquardt steps, and since each experiment's
/// history of solves is the same as in one process, so are the bits of the result.
pub trait ExperimentSplit {
    /// Whether this process solves experiment `e` (0-based, in file order).
    fn owns(&self, e: usize) -> bool;
    /// The blocks of every experiment, in order, given this process's `(experiment, block)`
    /// pairs; the same on every process.
    fn exchange(
        &self,
        mine: Vec<(usize, Result<Vec<f64>, String>)>,
        experiments: usize,
    ) -> Vec<Result<Vec<f64>, String>>;
}

/// What a per-experiment block holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    /// The residuals.
    Residuals,
    /// The residuals, then the Jacobian's rows (one value per fitted parameter each).
    Jacobian,
    /// The model values q(step) of each misfit term, term after term.
    Curves,
    /// The exact Hessian of the experiment's Σ r² over the fitted parameters (row-major).
    Hessian,
}

fn invalid(path: &Path, message: String) -> IdentifyError {
    IdentifyError::Invalid { file: path.into(), message }
}

/// `mu<p>` or `alpha<p>` of an Ogden region: (is μ, term p, group).
fn ogden_part(name: &str) -> Option<(bool, &str, &str)> {
    let rest = name.strip_prefix("hyperelastic.")?;
    let (what, group) = rest.split_once('.')?;
    let (is_mu, p) = match what.strip_prefix("mu") {
        Some(p) => (true, p),
        None => (false, what.strip_prefix("alpha")?),
    };
    (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())).then_some((is_mu, p, group))
}

impl FemIdentification {
    /// Set up the experiments of a parsed identification file (`path` anchors the problem
    /// files and names errors).
    pub fn new(path: &Path, source: &str, spec: &IdentifySpec) -> Result<Self, IdentifyError> {
        if spec.model.is_some() {
            return Err(IdentifyError::invalid_at(
                path,
                locate(source, "[model]", 0, None),
                "a [model] table belongs to homogeneous experiments; FEM experiments take the \
                 law from their problem files and the fitted names from [[parameter]]"
                    .into(),
            ));
        }
        if spec.parameters.is_empty() {
            return Err(invalid(
                path,
                "FEM experiments need [[parameter]] tables (name, start, bounds) naming what \
                 to fit"
                    .into(),
            ));
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let mut experiments = Vec::new();
        for (i, e) in spec.experiments.iter().enumerate() {
            // A refused value of this experiment: at its `key`, or at its table.
            let here = |key: Option<&str>| locate(source, "[[experiment]]", i, key);
            let label = e.name.clone().unwrap_or_else(|| format!("#{}", i + 1));
            let Some(problem) = &e.problem else {
                return Err(IdentifyError::invalid_at(
                    path,
                    here(None),
                    format!("experiment {label}: mode = \"fem\" needs `problem = \"file.toml\"`"),
                ));
            };
            if e.file.is_some() {
                return Err(IdentifyError::invalid_at(
                    path,
                    here(Some("file")),
                    format!(
                        "experiment {label}: a FEM experiment reads its measured curves from \
                         the problem's objective; remove `file`"
                    ),
                ));
            }
            let problem = base.join(problem);
            let name = e.name.clone().unwrap_or_else(|| {
                problem.file_stem().map_or(label.clone(), |s| s.to_string_lossy().into_owned())
            });
            if experiments.iter().any(|x: &FemExperiment| x.name == name) {
                return Err(IdentifyError::invalid_at(
                    path,
                    here(Some("name")),
                    format!(
                        "experiment {label}: the name '{name}' is taken by another experiment; \
                         give each a distinct `name` (it labels the residuals and the plot)"
                    ),
                ));
            }
            let in_problem = |source: crate::problem::ProblemError| IdentifyError::Problem {
                file: path.into(),
                experiment: name.clone(),
                source: Box::new(source),
            };
            let pf = ProblemFile::read(&problem).map_err(in_problem)?;
            let Some(hs) = &pf.spec.hyperelastic else {
                return Err(IdentifyError::invalid_at(
                    path,
                    here(None),
                    format!(
                        "experiment {name}: {} has no [hyperelastic] table; FEM identification \
                         fits finite-strain problems",
                        problem.display()
                    ),
                ));
            };
            let mesh = pf.build_mesh().map_err(in_problem)?;
            let run = crate::hyperelastic_file::build_field(&pf, &mesh, hs).map_err(in_problem)?;
            let misfits: Vec<Misfit> = run
                .misfit_terms()
                .into_iter()
                .map(|(term, m, weight)| Misfit { term, measured: m.to_vec(), weight })
                .collect();
            if misfits.is_empty() {
                return Err(IdentifyError::invalid_at(
                    path,
                    here(None),
                    format!(
                        "experiment {name}: {} has no [[objective]] with `measured = \"….csv\"`: \
                         nothing to fit",
                        problem.display()
                    ),
                ));
            }
            if let Some(m) = misfits.iter().find(|m| !(m.weight >= 0.0 && m.weight.is_finite())) {
                return Err(IdentifyError::invalid_at(
                    path,
                    here(None),
                    format!(
                        "experiment {name}: {}: objective term {} has weight {}; a least-squares \
                         misfit needs a weight ≥ 0",
                        problem.display(),
                        m.term + 1,
                        m.weight
                    ),
                ));
            }
            let quantities = pf.spec.objectives.iter().map(|o| o.kind.clone()).collect();
            experiments.push(FemExperiment {
                name,
                problem,
                run,
                registry: ParamRegistry::new(),
                ids: Vec::new(),
                misfits,
                quantities,
            });
        }
        let mut parameters = Vec::new();
        for p in &spec.parameters {
            let name = p.name.get_ref().clone();
            let at = format!("parameter '{name}'");
            let place = Some(crate::problem::line_col(source, p.name.span().start));
            if parameters.iter().any(|q: &FittedParameter| q.name == name) {
                return Err(IdentifyError::invalid_at(path, place, format!("{at}: listed twice")));
            }
            let mut first_value = None;
            // The registry bounds of every experiment hold together: their intersection.
            let (mut reg_lower, mut reg_upper) = (f64::NEG_INFINITY, f64::INFINITY);
            for e in &mut experiments {
                let id = e.run.register(&mut e.registry, &name, None).map_err(|_| {
                    IdentifyError::invalid_at(
                        path,
                        place,
                        format!(
                            "{at}: experiment {} ({}) has no such parameter; it offers {}",
                            e.name,
                            e.problem.display(),
                            e.run.available_parameters().join(", ")
                        ),
                    )
                })?;
                let values = e.registry.values(id);
                if values.len() != 1 {
                    return Err(IdentifyError::invalid_at(
                        path,
                        place,
                        format!(
                            "{at}: has {} entries; only scalar parameters are fitted",
                            values.len()
                        ),
                    ));
                }
                first_value.get_or_insert(values[0]);
                let s = e.registry.get(id);
                reg_lower = reg_lower.max(s.lower.unwrap_or(f64::NEG_INFINITY));
                reg_upper = reg_upper.min(s.upper.unwrap_or(f64::INFINITY));
                e.ids.push(id);
            }
            let [lower, upper] = p.bounds.unwrap_or([reg_lower, reg_upper]);
            if lower.is_nan() || upper.is_nan() || lower >= upper {
                return Err(IdentifyError::invalid_at(
                    path,
                    place,
                    format!("{at}: bounds [{lower}, {upper}] must be increasing"),
                ));
            }
            let starts = match &p.start {
                None => vec![first_value.expect("at least one experiment")],
                Some(StartValues::One(v)) => vec![*v],
                Some(StartValues::Many(v)) if !v.is_empty() => v.clone(),
                Some(StartValues::Many(_)) => {
                    return Err(IdentifyError::invalid_at(
                        path,
                        place,
                        format!("{at}: `start = []` holds no value"),
                    ));
                }
            };
            if let Some(s) = starts.iter().find(|s| !(lower..=upper).contains(*s)) {
                return Err(IdentifyError::invalid_at(
                    path,
                    place,
                    format!("{at}: start {s} is outside its bounds [{lower}, {upper}]"),
                ));
            }
            parameters.push(FittedParameter { name, lower, upper, starts });
        }
        let me = FemIdentification {
            path: path.into(),
            title: spec.title.clone(),
            parameters,
            fit: spec.fit.clone().unwrap_or_default(),
            experiments,
            forward_runs: 0,
            solved_at: None,
            solve_errors: Vec::new(),
            jacobians: 0,
            split: None,
        };
        me.check_stability(source, spec)?;
        Ok(me)
    }

    /// μ_p α_p > 0 over the whole box (module docs).
    fn check_stability(&self, source: &str, spec: &IdentifySpec) -> Result<(), IdentifyError> {
        for (p, ps) in self.parameters.iter().zip(&spec.parameters) {
            let Some((is_mu, term, group)) = ogden_part(&p.name) else { continue };
            let at = format!("parameter '{}'", p.name);
            let place = Some(crate::problem::line_col(source, ps.name.span().start));
            let partner =
                format!("hyperelastic.{}{term}.{group}", if is_mu { "alpha" } else { "mu" });
            let need = "an Ogden term is stable only where μ_p α_p > 0";
            if !(p.lower.is_finite() || p.upper.is_finite()) && ps.bounds.is_none() {
                return Err(IdentifyError::invalid_at(
                    self.path.as_path(),
                    place,
                    format!("{at}: {need}: give `bounds = [lower, upper]` of one sign"),
                ));
            }
            if (p.lower * p.upper).partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
                return Err(IdentifyError::invalid_at(
                    self.path.as_path(),
                    place,
                    format!(
                        "{at}: bounds [{}, {}]: {need}, so both bounds must be non-zero and of \
                         one sign",
                        p.lower, p.upper
                    ),
                ));
            }
            let sign = p.lower.signum();
            let partner_signs: Vec<(String, f64)> =
                match self.parameters.iter().find(|q| q.name == partner) {
                    Some(q) => vec![(format!("its bounds [{}, {}]", q.lower, q.upper), q.lower)],
                    None => self
                        .experiments
                        .iter()
                        .filter_map(|e| {
                            let (what, _) = partner
                                .strip_prefix("hyperelastic.")
                                .and_then(|r| r.split_once('.'))?;
                            let v = e
                                .run
                                .parameters()
                                .into_iter()
                                .find(|(r, _)| r == group)?
                                .1
                                .into_iter()
                                .find(|(n, _)| n == what)?
                                .1;
                            Some((format!("{} in {}", v, e.problem.display()), v))
                        })
                        .collect(),
                };
            if let Some((what, _)) = partner_signs.iter().find(|(_, v)| v.signum() != sign) {
                return Err(IdentifyError::invalid_at(
                    self.path.as_path(),
                    place,
                    format!(
                        "{at}: bounds [{}, {}] and {partner} = {what}: {need}; give both the \
                         same sign",
                        p.lower, p.upper
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Number of starting points: every combination of the parameters' starting values.
    pub fn starts(&self) -> usize {
        self.parameters.iter().map(|p| p.starts.len()).product()
    }

    /// The starting points, the first parameter's values varying slowest.
    pub fn starting_points(&self) -> Vec<Vec<f64>> {
        let mut points = vec![Vec::new()];
        for p in &self.parameters {
            points = points
                .into_iter()
                .flat_map(|x: Vec<f64>| {
                    p.starts.iter().map(move |&s| {
                        let mut y = x.clone();
                        y.push(s);
                        y
                    })
                })
                .collect();
        }
        points
    }

    /// Number of residuals: Σ over experiments and misfit terms of the load steps.
    pub fn residual_count(&self) -> usize {
        self.experiments.iter().map(|e| e.misfits.len() * e.run.loads.len()).sum()
    }

    /// Experiment names, in file order.
    pub fn experiment_names(&self) -> Vec<&str> {
        self.experiments.iter().map(|e| e.name.as_str()).collect()
    }

    /// Share the experiments among processes (see [`ExperimentSplit`]).
    pub fn set_split(&mut self, split: Box<dyn ExperimentSplit>) {
        self.split = Some(split);
        self.solved_at = None;
    }

    fn owns(&self, e: usize) -> bool {
        self.split.as_ref().is_none_or(|s| s.owns(e))
    }

    /// Solve this process's experiments at x. Every one is solved even when another fails,
    /// so that each experiment's history of solves does not depend on the others (nor on how
    /// they are shared out); the failures wait in `solve_errors`.
    fn solve_at(&mut self, x: &[f64]) {
        assert_eq!(x.len(), self.parameters.len(), "one value per fitted parameter");
        if self.solved_at.as_deref() == Some(x) {
            return;
        }
        let owned: Vec<bool> = (0..self.experiments.len()).map(|i| self.owns(i)).collect();
        self.solve_errors = vec![None; self.experiments.len()];
        for (i, e) in self.experiments.iter_mut().enumerate() {
            if !owned[i] {
                continue;
            }
            let r = (|| -> Result<(), String> {
                for (&id, &v) in e.ids.iter().zip(x) {
                    e.registry.set_values(id, &[v]).map_err(|m| m.to_string())?;
                }
                e.run.apply_parameters(&e.registry, None).map_err(|m| m.to_string())?;
                e.run.run_load_steps().map_err(|m| format!("at {x:?}: {m}"))?;
                Ok(())
            })();
            self.solve_errors[i] = r.err();
        }
        self.forward_runs += 1;
        self.solved_at = Some(x.to_vec());
    }

    /// One block per experiment at x (solving first), exchanged among the processes; the
    /// first failed experiment, in file order, is the error.
    fn blocks(&mut self, x: &[f64], what: Block) -> Result<Vec<Vec<f64>>, IdentifyError> {
        self.solve_at(x);
        let mut mine = Vec::new();
        for (i, e) in self.experiments.iter().enumerate() {
            if !self.owns(i) {
                continue;
            }
            let block = match &self.solve_errors[i] {
                Some(m) => Err(m.clone()),
                None => match what {
                    Block::Residuals => e.run.step_quantities().map(|q| {
                        let mut b = Vec::new();
                        e.push_residuals(&q, &mut b);
                        b
                    }),
                    Block::Curves => e.run.step_quantities().map(|q| {
                        e.misfits.iter().flat_map(|m| q[m.term].iter().copied()).collect()
                    }),
                    Block::Hessian => e.run.misfit_hessian(&e.registry, &e.ids),
                    Block::Jacobian => e.run.quantity_jacobian(&e.registry).map(|(q, rows)| {
                        let mut b = Vec::new();
                        e.push_residuals(&q, &mut b);
                        for m in &e.misfits {
                            let s = m.weight.sqrt();
                            for g in &rows[m.term] {
                                b.extend(e.ids.iter().map(|&id| s * g.get(id)[0]));
                            }
                        }
                        b
                    }),
                }
                .map_err(|m| m.to_string()),
            };
            mine.push((i, block));
        }
        let all = match &self.split {
            Some(s) => s.exchange(mine, self.experiments.len()),
            None => mine.into_iter().map(|(_, b)| b).collect(),
        };
        all.into_iter()
            .zip(&self.experiments)
            .map(|(b, e)| b.map_err(|m| e.failed(&self.path, m)))
            .collect()
    }

    /// r(x): one forward run of every experiment.
    pub fn residuals(&mut self, x: &[f64]) -> Result<Vec<f64>, IdentifyError> {
        Ok(self.blocks(x, Block::Residuals)?.concat())
    }

    /// r(x) and the Jacobian dr/dx (one row per residual, one column per parameter) by the
    /// per-step adjoint (module docs); the quantities come with their gradients.
    pub fn residuals_and_jacobian(
        &mut self,
        x: &[f64],
    ) -> Result<(Vec<f64>, Vec<Vec<f64>>), IdentifyError> {
        let n = x.len();
        let blocks = self.blocks(x, Block::Jacobian)?;
        let mut r = Vec::with_capacity(self.residual_count());
        let mut jac = Vec::with_capacity(self.residual_count());
        for (b, e) in blocks.iter().zip(&self.experiments) {
            let residuals: usize = e.misfits.iter().map(|m| m.measured.len()).sum();
            let (rb, jb) = b.split_at(residuals.min(b.len()));
            r.extend_from_slice(rb);
            jac.extend(jb.chunks(n.max(1)).map(<[f64]>::to_vec));
        }
        self.jacobians += 1;
        Ok((r, jac))
    }

    /// The exact Hessian of Σ r² at x over the fitted parameters (row-major), summed over the
    /// experiments: one Hessian-vector product through each experiment's load steps per
    /// parameter (the per-step second-order adjoint; module docs).
    pub fn exact_hessian(&mut self, x: &[f64]) -> Result<Vec<f64>, IdentifyError> {
        let n = x.len();
        let mut hessian = vec![0.0; n * n];
        for b in self.blocks(x, Block::Hessian)? {
            hessian.iter_mut().zip(&b).for_each(|(h, v)| *h += v);
        }
        Ok(hessian)
    }

    /// The Laplace posterior at the fit `o` (module docs): the exact Hessian of Σ r², summed
    /// over the experiments (one Hessian-vector product through the load steps per fitted
    /// parameter and experiment), beside Gauss–Newton's 2 JᵀJ; `None`, with a warning in the
    /// log, when a product fails.
    fn laplace(&mut self, o: &StartOutcome) -> Option<crate::hessian::HessianReport> {
        let n = o.x.len();
        let (m, objective) = (o.r.len(), dot(&o.r, &o.r));
        if n == 0 || m <= n {
            return None;
        }
        let started = Instant::now();
        let hessian = match self.exact_hessian(&o.x) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(%e, "identify: no Laplace posterior (the exact Hessian failed)");
                return None;
            }
        };
        let gradient: Vec<f64> = (0..n)
            .map(|j| 2.0 * o.jac.iter().zip(&o.r).map(|(row, r)| row[j] * r).sum::<f64>())
            .collect();
        let gauss_newton = (0..n * n)
            .map(|k| o.jac.iter().map(|row| row[k / n] * row[k % n]).sum::<f64>())
            .collect();
        // Σ r² = 2 · ½ Σ r²: the weight 2 of the misfit.
        let misfit = crate::hessian::Misfit {
            weight: 2.0,
            noise: (objective / (m - n) as f64).sqrt(),
            noise_estimated: true,
            observations: m,
            unit: "(the curves' units, weighted by √w)",
            gauss_newton,
        };
        Some(crate::hessian::analyze(
            self.parameters.iter().map(|p| p.name.clone()).collect(),
            o.x.clone(),
            objective,
            gradient,
            &hessian,
            Some(misfit),
            n * self.experiments.len(),
            started.elapsed().as_secs_f64(),
        ))
    }

    /// Measured against model curves at x.
    pub fn curves(&mut self, x: &[f64]) -> Result<Vec<FemCurve>, IdentifyError> {
        let blocks = self.blocks(x, Block::Curves)?;
        let mut out = Vec::new();
        for (b, e) in blocks.iter().zip(&self.experiments) {
            let steps = e.run.loads.len();
            for (k, m) in e.misfits.iter().enumerate() {
                let model = b.get(k * steps..(k + 1) * steps).unwrap_or(&[]).to_vec();
                out.push(FemCurve {
                    experiment: e.name.clone(),
                    term: m.term,
                    load_factors: e.run.loads.clone(),
                    measured: m.measured.clone(),
                    model,
                    weight: m.weight,
                    quantity: e.quantities.get(m.term).cloned().unwrap_or_default(),
                });
            }
        }
        Ok(out)
    }

    /// Projected Levenberg–Marquardt from `x0` (module docs); `progress` sees each accepted
    /// step (iteration, Σ r²).
    fn fit_from(
        &mut self,
        x0: &[f64],
        mut progress: impl FnMut(usize, f64),
    ) -> Result<StartOutcome, IdentifyError> {
        let n = x0.len();
        let (lo, hi): (Vec<f64>, Vec<f64>) =
            self.parameters.iter().map(|p| (p.lower, p.upper)).unzip();
        // Scales: the starting magnitudes (or the bounds' where a start is zero).
        let scale: Vec<f64> = (0..n)
            .map(|i| {
                let s = x0[i].abs();
                if s > 0.0 {
                    s
                } else {
                    let m = [lo[i].abs(), hi[i].abs()]
                        .into_iter()
                        .filter(|v| v.is_finite())
                        .fold(0.0, f64::max);
                    if m > 0.0 { m } else { 1.0 }
                }
            })
            .collect();
        let clamp = |x: &[f64]| -> Vec<f64> {
            x.iter().enumerate().map(|(i, v)| v.clamp(lo[i], hi[i])).collect()
        };
        let mut x = clamp(x0);
        let (mut r, mut jac) = self.residuals_and_jacobian(&x)?;
        let mut cost = dot(&r, &r);
        let initial_cost = cost;
        let mut lam = 1e-3;
        let mut iterations = 0;
        let mut converged = false;
        'outer: while iterations < self.fit.max_iterations {
            if cost == 0.0 {
                converged = true;
                break;
            }
            // Scaled Jacobian J_s = J diag(s): A = J_sᵀ J_s, g = J_sᵀ r.
            let (a, g) = normal_equations(&jac, &r, &scale);
            let dmax = (0..n).map(|i| a[i][i]).fold(0.0, f64::max);
            if dmax == 0.0 {
                converged = true;
                break;
            }
            let zmax = (0..n).map(|i| (x[i] / scale[i]).abs()).fold(1e-300, f64::max);
            for _ in 0..40 {
                let mut m = a.clone();
                for i in 0..n {
                    m[i][i] += lam * a[i][i].max(1e-12 * dmax);
                }
                let Some(delta) = cholesky_solve(&m, &g.iter().map(|v| -v).collect::<Vec<_>>())
                else {
                    lam *= 10.0;
                    continue;
                };
                let trial = clamp(&(0..n).map(|i| x[i] + scale[i] * delta[i]).collect::<Vec<_>>());
                let d: Vec<f64> = (0..n).map(|i| (trial[i] - x[i]) / scale[i]).collect();
                if d.iter().all(|v| v.abs() <= self.fit.step_tol * zmax) {
                    converged = true;
                    break 'outer;
                }
                let r_new = match self.residuals(&trial) {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::debug!(%e, "identify: trial point failed, shorter step");
                        lam *= 10.0;
                        continue;
                    }
                };
                let cost_new = dot(&r_new, &r_new);
                if cost_new < cost {
                    // Predicted decrease of ½ Σ r² by the linear model, for the damping update.
                    let ad: Vec<f64> = (0..n).map(|i| dot(&a[i], &d)).collect();
                    let pred = -(dot(&g, &d) + 0.5 * dot(&d, &ad));
                    let rho = 0.5 * (cost - cost_new) / pred.max(f64::MIN_POSITIVE);
                    lam *= (1.0 - (2.0 * rho - 1.0).powi(3)).max(1.0 / 3.0);
                    let small = cost - cost_new <= self.fit.cost_tol * cost;
                    x = trial;
                    r = r_new;
                    cost = cost_new;
                    // The run at x is kept (`solve_at`): this adds the adjoint products only.
                    jac = self.residuals_and_jacobian(&x)?.1;
                    iterations += 1;
                    progress(iterations, cost);
                    if small {
                        converged = true;
                        break 'outer;
                    }
                    continue 'outer;
                }
                lam *= 4.0;
            }
            // No decrease along any damped step: a minimum to the accuracy of the model.
            converged = true;
            break;
        }
        Ok(StartOutcome { initial_cost, x, r, jac, iterations, converged })
    }

    /// Fit from every starting point; `progress` sees each accepted step. Returns the report of
    /// the best start and its parameter vector.
    pub fn run(
        &mut self,
        mut progress: impl FnMut(&Progress),
    ) -> Result<(IdentifyReport, Vec<f64>), IdentifyError> {
        let t0 = Instant::now();
        self.forward_runs = 0;
        self.jacobians = 0;
        let starts = self.starting_points();
        let mut best: Option<StartOutcome> = None;
        let mut start_objectives = Vec::new();
        let mut final_objectives = Vec::new();
        let mut failures = Vec::new();
        for (i, x0) in starts.iter().enumerate() {
            let outcome = self.fit_from(x0, |iteration, objective| {
                progress(&Progress { starts_done: i, starts: starts.len(), iteration, objective })
            });
            match outcome {
                Ok(o) => {
                    let c = dot(&o.r, &o.r);
                    start_objectives.push(o.initial_cost);
                    final_objectives.push(c);
                    if best.as_ref().is_none_or(|b| c < dot(&b.r, &b.r)) {
                        best = Some(o);
                    }
                }
                Err(e) => {
                    tracing::warn!(start = ?x0, %e, "identify: a starting point failed");
                    // The objective at the start itself, when the start can be solved.
                    let clamped: Vec<f64> = x0
                        .iter()
                        .zip(&self.parameters)
                        .map(|(v, p)| v.clamp(p.lower, p.upper))
                        .collect();
                    let at_start = self.residuals(&clamped).map_or(f64::NAN, |r| dot(&r, &r));
                    start_objectives.push(at_start);
                    final_objectives.push(f64::NAN);
                    failures.push(format!("start {x0:?}: {e}"));
                }
            }
            progress(&Progress {
                starts_done: i + 1,
                starts: starts.len(),
                iteration: 0,
                objective: final_objectives[i],
            });
        }
        let Some(best) = best else {
            return Err(IdentifyError::Solve {
                file: self.path.clone(),
                experiment: "every".into(),
                message: format!("no starting point could be solved: {}", failures.join("; ")),
            });
        };
        let objectives = [start_objectives, final_objectives];
        let laplace = self.laplace(&best);
        let mut report = self.report(&best, objectives, t0.elapsed().as_secs_f64());
        report.laplace = laplace;
        Ok((report, best.x))
    }

    /// The report of the best start `o`, with the objective at the start and at the end of
    /// every start.
    fn report(&self, o: &StartOutcome, objectives: [Vec<f64>; 2], time_s: f64) -> IdentifyReport {
        let [start_objectives, final_objectives] = objectives;
        let m = o.r.len();
        let n = o.x.len();
        let objective = dot(&o.r, &o.r);
        let sigma = if m > n { (objective / (m - n) as f64).sqrt() } else { f64::NAN };
        let se = standard_errors(&o.jac, sigma, n);
        let names: Vec<String> = self.parameters.iter().map(|p| p.name.clone()).collect();
        let correlation = Correlation::from_jacobian(names, &o.jac);
        let parameter_convention =
            self.parameters.iter().any(|p| ogden_part(&p.name).is_some()).then(|| {
                format!(
                    "{}; λ̄_i = J^(-1/3) λ_i, κ the bulk modulus; μ_p and κ in the problem files' \
                 stress unit (Pa in SI)",
                    OGDEN_CONVENTION
                )
            });
        let mut experiments = Vec::new();
        let mut offset = 0;
        for e in &self.experiments {
            let (mut abs2, mut rel2, mut n_rel, mut points) = (0.0, 0.0, 0, 0);
            let scale = e
                .misfits
                .iter()
                .flat_map(|m| m.measured.iter())
                .fold(0.0, |a: f64, v| a.max(v.abs()));
            for mf in &e.misfits {
                let s = mf.weight.sqrt();
                for (k, meas) in mf.measured.iter().enumerate() {
                    let r = o.r[offset + k];
                    // q − m from the weighted residual (a zero weight leaves the point out).
                    if s > 0.0 {
                        let d = r / s;
                        abs2 += d * d;
                        points += 1;
                        if meas.abs() > 1e-12 * scale {
                            rel2 += (d / meas).powi(2);
                            n_rel += 1;
                        }
                    }
                }
                offset += mf.measured.len();
            }
            experiments.push(ExperimentFit {
                name: e.name.clone(),
                mode: "fem".into(),
                points,
                rms_relative_error: if n_rel > 0 { (rel2 / n_rel as f64).sqrt() } else { f64::NAN },
                rms_error: Some(if points > 0 { (abs2 / points as f64).sqrt() } else { f64::NAN }),
                problem: Some(e.problem.display().to_string()),
            });
        }
        IdentifyReport {
            title: self.title.clone(),
            model: "fem".into(),
            parameters: self
                .parameters
                .iter()
                .map(|p| p.name.clone())
                .zip(o.x.iter().copied())
                .collect(),
            std_errors: self.parameters.iter().map(|p| p.name.clone()).zip(se).collect(),
            experiments,
            shear_modulus: None,
            sigma,
            objective,
            starts: start_objectives.len(),
            start_objectives,
            final_objectives,
            correlation,
            parameter_convention,
            mu_tilde: Default::default(),
            neo_hookean: None,
            fem: Some(FemFitInfo {
                iterations: o.iterations,
                converged: o.converged,
                forward_runs: self.forward_runs,
                jacobians: self.jacobians,
                residuals: m,
                time_s,
            }),
            laplace: None,
        }
    }

    /// Write `identify.json` and `fit.png` (measured against fitted curves per experiment,
    /// over the load factor) into `dir`; returns their paths. The PNG is skipped, with the
    /// reason, when it cannot be drawn (e.g. no font).
    pub fn write(
        &mut self,
        dir: &Path,
        report: &IdentifyReport,
        x: &[f64],
    ) -> Result<(PathBuf, Result<PathBuf, String>), IdentifyError> {
        let curves = self.curves(x)?;
        write_outputs(dir, report, |png| plot(png, &self.title, &self.experiment_names(), &curves))
    }
}

/// One panel per experiment: measured points and the fitted curve (through the origin, where
/// every quantity of a dead-load path vanishes) against the load factor.
fn plot(file: &Path, title: &str, names: &[&str], curves: &[FemCurve]) -> Result<(), String> {
    use plotters::prelude::*;
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let root =
        BitMapBackend::new(file, (500 * names.len().clamp(1, 3) as u32, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let title = if title.is_empty() { "identification" } else { title };
    let root = root.titled(title, ("sans-serif", 22)).map_err(|x| e(&x))?;
    let panels = root.split_evenly((1, names.len().max(1)));
    for (panel, name) in panels.iter().zip(names) {
        let mine: Vec<&FemCurve> = curves.iter().filter(|c| c.experiment == *name).collect();
        let values = mine.iter().flat_map(|c| c.measured.iter().chain(&c.model).copied());
        let (ymin, ymax) = values.fold((0.0f64, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
        let pad = 0.08 * (ymax - ymin).max(f64::MIN_POSITIVE);
        let smax = mine.iter().flat_map(|c| c.load_factors.iter().copied()).fold(0.0, f64::max);
        let mut chart = ChartBuilder::on(panel)
            .caption(*name, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..smax * 1.02, (ymin - pad)..(ymax + pad))
            .map_err(|x| e(&x))?;
        let mut labels: Vec<String> = Vec::new();
        for c in &mine {
            let l = quantity_label(&c.quantity);
            if !labels.contains(&l) {
                labels.push(l);
            }
        }
        chart
            .configure_mesh()
            .x_desc("load factor (–)")
            .y_desc(labels.join(", "))
            .draw()
            .map_err(|x| e(&x))?;
        for (k, c) in mine.iter().enumerate() {
            let line: Vec<(f64, f64)> = std::iter::once((0.0, 0.0))
                .chain(c.load_factors.iter().copied().zip(c.model.iter().copied()))
                .collect();
            draw_data_and_fit(
                &mut chart,
                Palette99::pick(k).to_rgba(),
                (c.load_factors.iter().copied().zip(c.measured.iter().copied()), 4),
                line,
                [format!("term {} measured", c.term + 1), format!("term {} fitted", c.term + 1)],
            )?;
        }
        draw_legend(&mut chart)?;
    }
    root.present().map_err(|x| e(&x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ogden_names_are_recognized() {
        assert_eq!(ogden_part("hyperelastic.mu1.pad"), Some((true, "1", "pad")));
        assert_eq!(ogden_part("hyperelastic.alpha12.a.b"), Some((false, "12", "a.b")));
        assert_eq!(ogden_part("hyperelastic.mu.pad"), None);
        assert_eq!(ogden_part("hyperelastic.kappa.pad"), None);
        assert_eq!(ogden_part("bc.top.displacement"), None);
    }

    #[test]
    fn quantities_are_labelled_with_units() {
        assert_eq!(quantity_label("reaction"), "reaction force (N)");
        assert_eq!(quantity_label("displacement"), "displacement (m)");
        assert_eq!(quantity_label("average_displacement"), "mean displacement (m)");
    }
}
