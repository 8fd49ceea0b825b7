//! The time stepping of the thermal field: ρc ∂T/∂t − ∇·(k∇T) = Q from an initial
//! temperature, with the discrete adjoint of [`crate::fields::transient`], as the field's
//! [`crate::Dynamic`] capability.
//!
//! With adaptive steps the first solve chooses the step sizes (step doubling) and later solves
//! of the same problem — after parameter changes in an optimization or a Taylor test — keep
//! them: the gradient is that of the discrete map with the step sizes held fixed, and
//! re-choosing them would make J jump between step sequences.
//!
//! Extra parameters: `thermal.rho_c.<group>` (heat capacity of a material) and
//! `thermal.initial_temperature` (the uniform starting temperature of the free nodes); every
//! steady thermal parameter (k, Q, boundary values, coordinates, morphs) gets its gradient
//! through the same checkpointed time adjoint.

use std::sync::OnceLock;

use gradfem_solvers::checkpoint::Checkpointing;
use gradfem_solvers::newton::NewtonParams;
use gradfem_solvers::params::{Gradient, ParamId, ParamRegistry, ParamSpec};
use gradfem_thermal::{ObjectiveEval, ObjectiveTerm, ThermalModel};
use serde::Serialize;

use crate::error::RunError;
use crate::field::{CycleAdapt, CyclePlan, CycleStep, Reverse, StepChoice, StepInfo, TimeTangents};
use crate::fields::transient::{
    AdaptInfo, AdaptParams, MassKind, StateSeeds, StepInfo as ThermalStepInfo, TimeObjective,
    TimeScheme, Trajectory, TransientDirection, TransientGradient, TransientProblem, TransientSpec,
    WeightedTerms,
};

/// How a registered transient parameter maps onto the run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum TBinding {
    HeatCapacity(usize),
    Initial,
}

/// Timings and counts of a transient run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TransientReport {
    pub steps: usize,
    pub final_time_s: f64,
    pub newton_iterations: usize,
    pub factorizations: usize,
    /// The largest nodal temperature over every state \[K\].
    #[serde(rename = "max_temperature_over_time_K")]
    pub max_temperature_over_time_k: f64,
    /// Adaptive runs: accepted and rejected step pairs and the largest error estimate.
    pub adaptive_accepted: Option<usize>,
    pub adaptive_rejected: Option<usize>,
    pub simulate_s: f64,
    /// The last gradient's reverse sweep: recomputed steps and the most states held at once.
    pub recomputed_steps: Option<usize>,
    pub peak_stored_states: Option<usize>,
}

/// The time stepping of a thermal field: its integrator, heat capacities, initial temperature
/// and memory scheme, and the last run.
pub struct ThermalTransient {
    /// Integrator.
    pub scheme: TimeScheme,
    /// Mass form.
    pub mass: MassKind,
    /// Fixed step (or the first adaptive one) \[s\].
    pub dt: f64,
    /// Number of fixed steps.
    pub steps: usize,
    /// Adaptive step control.
    pub adaptive: Option<AdaptParams>,
    /// ρc per thermal region.
    pub heat_capacity: Vec<f64>,
    /// Uniform initial temperature, or the nodal field of `[initial_state]`.
    pub initial: Initial,
    /// How the adjoint keeps states.
    pub memory: Checkpointing,
    /// Every k-th state is written to the results.
    pub output_every: usize,
    bindings: Vec<(ParamId, TBinding)>,
    /// The problem of the last run (with its chosen step sizes) and its trajectory.
    run: Option<(TransientProblem, Trajectory)>,
    /// Adaptive runs: the step sizes the first solve chose, held fixed afterwards.
    chosen_steps: Option<(Vec<f64>, AdaptInfo)>,
    pub report: TransientReport,
    /// The objective evaluated at every state of the last run, shared by the values, the
    /// gradient and the Hessian-vector products taken at that run; forgotten with the run.
    evals: OnceLock<StateEvals>,
    /// The first-order adjoints of the last gradient at the last run (every state kept, and
    /// they fit [`KEPT_PER_STATE_BYTES`]), for the products taken at the same run and seeds;
    /// forgotten with the run.
    adjoints: Option<StepAdjoints>,
}

/// The most memory a run spends on each of what it keeps per state beyond its states (the
/// objective's ∂j/∂T, the step adjoints): above it, the gradient and the products form them
/// again, as under checkpointing.
const KEPT_PER_STATE_BYTES: usize = 1 << 29;

/// Whether `n` vectors of `len` entries fit [`KEPT_PER_STATE_BYTES`].
fn fits(n: usize, len: usize) -> bool {
    n.saturating_mul(len).saturating_mul(8) <= KEPT_PER_STATE_BYTES
}

/// The adjoint μ of every step of a run, with the seeds it was solved for.
struct StepAdjoints {
    terms: Vec<ObjectiveTerm>,
    weights: Vec<f64>,
    seeds: Vec<Option<Vec<f64>>>,
    mu: Vec<Vec<f64>>,
}

/// `evals` when each holds its ∂j/∂T.
fn with_gradients(evals: &[ObjectiveEval]) -> Option<&[ObjectiveEval]> {
    evals.iter().all(|e| !e.d_temperature.is_empty()).then_some(evals)
}

/// Objective terms evaluated at every state of a run, node coordinates held.
#[derive(Clone)]
struct StateEvals {
    /// The terms evaluated.
    terms: Vec<ObjectiveTerm>,
    /// Per state: the value and ∂j/∂T per node (∂j/∂T kept only when the run keeps every
    /// state and they fit [`KEPT_PER_STATE_BYTES`]; empty otherwise: checkpointing bounds the
    /// memory to a few states).
    at: Vec<ObjectiveEval>,
}

/// The initial temperature of a run.
#[derive(Clone, Debug)]
pub enum Initial {
    /// The same value at every free node.
    Uniform(f64),
    /// A nodal field (one value per node).
    Nodal(Vec<f64>),
}

fn setup(msg: impl Into<String>) -> RunError {
    RunError::Setup(msg.into())
}

fn transient_err(e: crate::fields::transient::TransientError) -> RunError {
    RunError::Setup(e.to_string())
}

impl ThermalTransient {
    /// Time stepping with these settings for `model` (checked against it: one heat capacity
    /// per region, ρc > 0, θ in [½, 1], Δt > 0).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        model: &ThermalModel,
        scheme: TimeScheme,
        mass: MassKind,
        dt: f64,
        steps: usize,
        adaptive: Option<AdaptParams>,
        heat_capacity: Vec<f64>,
        initial: Initial,
        memory: Checkpointing,
        output_every: usize,
    ) -> Result<Self, RunError> {
        let run = ThermalTransient {
            scheme,
            mass,
            dt,
            steps,
            adaptive,
            heat_capacity,
            initial,
            memory,
            output_every,
            bindings: Vec::new(),
            run: None,
            chosen_steps: None,
            report: TransientReport::default(),
            evals: OnceLock::new(),
            adjoints: None,
        };
        // Fail early on bad values (ρc ≤ 0, θ outside [½, 1], Δt ≤ 0).
        run.problem(model)?;
        Ok(run)
    }

    /// True when `name` is a transient parameter.
    pub fn owns_name(name: &str) -> bool {
        name.starts_with("thermal.rho_c.") || name == "thermal.initial_temperature"
    }

    /// Parameter names of the run.
    pub fn available_parameters(&self, model: &ThermalModel) -> Vec<String> {
        let mut names: Vec<String> =
            model.regions.iter().map(|r| format!("thermal.rho_c.{}", r.name)).collect();
        if matches!(self.initial, Initial::Uniform(_)) {
            names.push("thermal.initial_temperature".into());
        }
        names
    }

    /// Register `thermal.rho_c.<group>` or `thermal.initial_temperature`.
    pub fn register(
        &mut self,
        model: &ThermalModel,
        registry: &mut ParamRegistry,
        name: &str,
        bounds: Option<[f64; 2]>,
    ) -> Result<ParamId, RunError> {
        let unknown = || RunError::UnknownParameter(name.to_string());
        let (binding, spec) = if let Some(g) = name.strip_prefix("thermal.rho_c.") {
            let r = model.regions.iter().position(|r| r.name == g).ok_or_else(unknown)?;
            (
                TBinding::HeatCapacity(r),
                ParamSpec::scalar(name, self.heat_capacity[r])
                    .with_bounds(Some(0.0), None)
                    .with_doc("volumetric heat capacity ρc", "J/(m³·K)"),
            )
        } else if name == "thermal.initial_temperature" {
            let Initial::Uniform(t) = self.initial else { return Err(unknown()) };
            (
                TBinding::Initial,
                ParamSpec::scalar(name, t).with_doc("uniform initial temperature", "K"),
            )
        } else {
            return Err(unknown());
        };
        let spec = match bounds {
            Some([lo, hi]) => spec.with_bounds(Some(lo), Some(hi)),
            None => spec,
        };
        let id = registry.register(spec)?;
        self.bindings.push((id, binding));
        Ok(id)
    }

    /// Copy registered values in; forgets the last run.
    pub fn apply_parameters(&mut self, reg: &ParamRegistry) {
        for (id, b) in &self.bindings {
            let v = reg.values(*id)[0];
            match b {
                TBinding::HeatCapacity(r) => self.heat_capacity[*r] = v,
                TBinding::Initial => self.initial = Initial::Uniform(v),
            }
        }
        self.replace_run(None);
    }

    /// The transient problem of `model` with these settings.
    pub fn problem(&self, model: &ThermalModel) -> Result<TransientProblem, RunError> {
        let model = model.clone();
        let initial = match &self.initial {
            Initial::Uniform(t) => vec![*t; model.n_nodes()],
            Initial::Nodal(f) => f.clone(),
        };
        let spec = TransientSpec {
            heat_capacity: self.heat_capacity.clone(),
            dt: self.dt,
            n_steps: self.steps,
            scheme: self.scheme,
            mass: self.mass,
        };
        TransientProblem::new(model, &spec, initial).map_err(transient_err)
    }

    /// True when the last run matches the parameters.
    pub fn is_solved(&self) -> bool {
        self.run.is_some()
    }

    /// Run the time stepping with the current `model` and Newton settings; returns the last
    /// state (nodal).
    pub fn solve(
        &mut self,
        model: &ThermalModel,
        newton: &NewtonParams,
    ) -> Result<Vec<f64>, RunError> {
        let t0 = std::time::Instant::now();
        let mut p = self.problem(model)?;
        p.newton_rtol = newton.rel_tol.min(1e-10);
        p.newton_max_iterations = newton.max_iterations;
        let mut adapt: Option<AdaptInfo> = None;
        match (&self.adaptive, &self.chosen_steps) {
            (Some(_), Some((steps, info))) => {
                p.n_steps = steps.len();
                p.step_sizes = Some(steps.clone());
                adapt = Some(*info);
            }
            (Some(a), None) => {
                let info = p.adapt_steps(a).map_err(transient_err)?;
                adapt = Some(info);
                self.chosen_steps = p.step_sizes.clone().map(|s| (s, info));
            }
            (None, _) => {}
        }
        // The gradient and the products at this run reuse the forward run's factorizations.
        p.keep_stepper();
        let traj = p.simulate().map_err(transient_err)?;
        let last = traj.temperatures.last().expect("the initial state at least").clone();
        self.report = TransientReport {
            steps: p.n_steps,
            final_time_s: *traj.times.last().expect("times"),
            newton_iterations: traj.newton_iterations,
            factorizations: traj.factorizations,
            max_temperature_over_time_k: traj
                .temperatures
                .iter()
                .flatten()
                .copied()
                .filter(|v| v.is_finite())
                .fold(f64::NEG_INFINITY, f64::max),
            adaptive_accepted: adapt.map(|a| a.accepted),
            adaptive_rejected: adapt.map(|a| a.rejected),
            simulate_s: t0.elapsed().as_secs_f64(),
            recomputed_steps: None,
            peak_stored_states: None,
        };
        self.replace_run(Some((p, traj)));
        Ok(last)
    }

    /// Replace the last run (and forget what was evaluated at its states).
    fn replace_run(&mut self, run: Option<(TransientProblem, Trajectory)>) {
        self.run = run;
        self.evals = OnceLock::new();
        self.adjoints = None;
    }

    /// The `objective` terms evaluated at every state of the last run: those kept for these
    /// terms, else evaluated now (and kept when nothing is).
    fn evaluations(
        &self,
        model: &ThermalModel,
        objective: &[ObjectiveTerm],
    ) -> Result<std::borrow::Cow<'_, StateEvals>, RunError> {
        if let Some(kept) = self.evals.get().filter(|k| k.terms == objective) {
            return Ok(std::borrow::Cow::Borrowed(kept));
        }
        let (_, traj) = self.run.as_ref().ok_or_else(|| setup("transient: solve first"))?;
        let keep_gradients = self.keeps_objective_gradients(model);
        let mut at = Vec::with_capacity(traj.temperatures.len());
        for t in &traj.temperatures {
            let mut e = gradfem_thermal::objective::evaluate(model, objective, t, false)?;
            if !keep_gradients {
                e.d_temperature = Vec::new();
            }
            at.push(e);
        }
        let evals = StateEvals { terms: objective.to_vec(), at };
        if self.evals.get().is_none() {
            let _ = self.evals.set(evals);
            return Ok(std::borrow::Cow::Borrowed(self.evals.get().expect("just set")));
        }
        Ok(std::borrow::Cow::Owned(evals))
    }

    /// Whether the last run keeps the objective's ∂j/∂T at its states: every state is kept
    /// and they fit [`KEPT_PER_STATE_BYTES`].
    fn keeps_objective_gradients(&self, model: &ThermalModel) -> bool {
        let n_states = self.run.as_ref().map_or(0, |(_, traj)| traj.temperatures.len());
        self.memory == Checkpointing::StoreAll && fits(n_states, model.n_nodes())
    }

    /// The objective terms' value jₙ at every state of the last run (zeros without terms).
    pub fn state_objective(
        &self,
        model: &ThermalModel,
        objective: &[ObjectiveTerm],
    ) -> Result<Vec<f64>, RunError> {
        let (_, traj) = self.run.as_ref().ok_or_else(|| setup("transient: solve first"))?;
        if objective.is_empty() {
            return Ok(vec![0.0; traj.temperatures.len()]);
        }
        Ok(self.evaluations(model, objective)?.at.iter().map(|e| e.value).collect())
    }

    /// The kept ∂jₙ/∂T of the `objective` terms at every state of the last run, when they are
    /// kept (every state kept, the terms evaluated since the run).
    fn kept_objective_evals(&self, objective: &[ObjectiveTerm]) -> Option<&[ObjectiveEval]> {
        let kept = self.evals.get().filter(|k| k.terms == objective)?;
        with_gradients(&kept.at)
    }

    /// Where state n of the last run lies.
    pub fn step_info(&self, n: usize) -> StepInfo {
        let (p, _) = self.run.as_ref().expect("a run");
        let s = p.step_info(n);
        StepInfo {
            step: s.step,
            n_steps: s.n_steps,
            time: s.time,
            dt_before: s.dt_before,
            dt_after: s.dt_after,
        }
    }

    /// The heat balance of the last step of the last run, stored heat included (None before a
    /// run or when it took no step).
    pub fn heat_balance(&self) -> Option<gradfem_thermal::HeatBalance> {
        let (p, traj) = self.run.as_ref()?;
        p.last_step_heat_balance(traj)
    }

    /// Times and nodal temperatures of every state of the last run.
    pub fn states(&self) -> Option<(&[f64], &[Vec<f64>])> {
        self.run.as_ref().map(|(_, traj)| (traj.times.as_slice(), traj.temperatures.as_slice()))
    }

    /// The adjoint of Σₙ wₙ jₙ(Tⁿ) + Σₙ ⟨sₙ, Tⁿ⟩ (j the `objective` terms, sₙ = `seeds[n]`,
    /// per node) over the last run: dJ/dp per steady parameter kind (`want`) with ρc and T⁰
    /// added into `rev` for this run's parameters; returns the whole [`TransientGradient`]
    /// (the steady kinds' share still to be mapped, and dJ/dQ of the external source).
    pub fn gradient_seeded(
        &mut self,
        model: &ThermalModel,
        objective: &[ObjectiveTerm],
        seeds: &[Option<Vec<f64>>],
        weights: &[f64],
        want: gradfem_thermal::VjpRequest,
        rev: &mut Reverse,
    ) -> Result<TransientGradient, RunError> {
        let (g, n_steps, kept) = {
            let (p, traj) = self.run.as_ref().ok_or_else(|| setup("transient: solve first"))?;
            // The terms' ∂jₙ/∂T at the states, evaluated once per run when it keeps them.
            // (Not evaluated here when the run cannot keep them: the sweep evaluates anyway.)
            let evals = if objective.is_empty() || !self.keeps_objective_gradients(model) {
                None
            } else {
                Some(self.evaluations(model, objective)?)
            };
            let known = evals.as_deref().and_then(|e| with_gradients(&e.at));
            let terms = WeightedTerms {
                terms: objective.to_vec(),
                weights: crate::fields::transient::StepWeights::Custom(weights.to_vec()),
            };
            let obj = SeededTerms { terms, seeds, known };
            if self.memory == Checkpointing::StoreAll && fits(p.n_steps, model.n_unknowns()) {
                // Keep the step adjoints for the products that follow at this run.
                let (g, mu) =
                    p.gradient_of_run_with_adjoints(traj, &obj, want).map_err(transient_err)?;
                let kept = StepAdjoints {
                    terms: objective.to_vec(),
                    weights: weights.to_vec(),
                    seeds: seeds.to_vec(),
                    mu,
                };
                (g, p.n_steps, Some(kept))
            } else {
                let g = p.gradient_of_run(traj, &obj, self.memory, want).map_err(transient_err)?;
                (g, p.n_steps, None)
            }
        };
        self.adjoints = kept;
        self.add_run_parameters(model, &g, rev);
        self.report.recomputed_steps = Some(g.stats.forward_steps.saturating_sub(n_steps));
        self.report.peak_stored_states = Some(g.stats.max_stored_states);
        Ok(g)
    }

    /// Add the run's own parameters' share of `g` (ρc per region, the uniform initial
    /// temperature over the free nodes) into `rev`.
    fn add_run_parameters(&self, model: &ThermalModel, g: &TransientGradient, rev: &mut Reverse) {
        let owner = model.fixed_owner();
        for (id, b) in &self.bindings {
            let v = rev.grad.get_mut(*id);
            match b {
                TBinding::HeatCapacity(r) => v[0] += g.heat_capacity[*r],
                TBinding::Initial => {
                    v[0] += (0..owner.len())
                        .filter(|&n| owner[n].is_none())
                        .map(|n| g.initial[n])
                        .sum::<f64>()
                }
            }
        }
    }

    /// The direction of the run along `params`: `steady` (the steady model's part, fixed
    /// temperatures at their nodes) with δρc and δT⁰ of this run's registered parameters.
    pub fn direction(
        &self,
        model: &ThermalModel,
        params: &Gradient,
        steady: gradfem_thermal::ThermalDirection,
    ) -> TransientDirection {
        let mut d = TransientDirection::zeros(model);
        d.steady = steady;
        let owner = model.fixed_owner();
        for (id, b) in &self.bindings {
            let v = params.get(*id)[0];
            match b {
                TBinding::HeatCapacity(r) => {
                    for e in model.regions[*r].elements.clone() {
                        d.heat_capacity_elem[e] += v;
                    }
                }
                TBinding::Initial => {
                    for (n, o) in owner.iter().enumerate() {
                        if o.is_none() {
                            d.initial[n] += v;
                        }
                    }
                }
            }
        }
        d
    }

    /// The tangent-linear model of the last run along `dir` with the derivatives of the
    /// `objective` terms.
    pub fn tangents(
        &self,
        objective: &[ObjectiveTerm],
        dir: &TransientDirection,
    ) -> Result<TimeTangents, RunError> {
        let (p, traj) = self.run.as_ref().ok_or_else(|| setup("transient: solve first"))?;
        let known = self.kept_objective_evals(objective);
        p.tangent_states(traj, dir, objective, known).map_err(transient_err)
    }

    /// H·δp of J = F(j₀ … j_N) + (the fields downstream) over the last run (`weights`
    /// wₙ = ∂F/∂jₙ and their derivatives `d_weights` along `dir`, the downstream fields' seeds
    /// `other`, the run's `tangents` along `dir`): the run's own parameters' share added into
    /// `rev`, the whole product returned (the steady kinds' share still to be mapped) with
    /// the first-order seed of the external source.
    #[allow(clippy::too_many_arguments)]
    pub fn hessian_vector(
        &self,
        model: &ThermalModel,
        objective: &[ObjectiveTerm],
        weights: &[f64],
        d_weights: &[f64],
        other: StateSeeds,
        dir: &TransientDirection,
        tangents: &TimeTangents,
        want: gradfem_thermal::VjpRequest,
        rev: &mut Reverse,
    ) -> Result<(TransientGradient, Vec<f64>), RunError> {
        let (p, traj) = self.run.as_ref().ok_or_else(|| setup("transient: solve first"))?;
        let coords = rev.coordinate_request();
        // The last gradient's step adjoints, when it was taken for the same seeds.
        let first = self
            .adjoints
            .as_ref()
            .filter(|a| a.terms == objective && a.weights == weights && a.seeds == other.first)
            .map(|a| a.mu.as_slice());
        let (hv, source_bar, part) = p
            .hessian_vector(
                traj, objective, weights, d_weights, other, dir, tangents, want, coords, first,
            )
            .map_err(transient_err)?;
        self.add_run_parameters(model, &hv, rev);
        rev.add_coordinate_part(&part, 1.0);
        Ok((hv, source_bar))
    }

    /// ρc of every volume element of `model`.
    pub fn heat_capacity_elem(&self, model: &ThermalModel) -> Vec<f64> {
        (0..model.n_volume_elements())
            .map(|e| self.heat_capacity[model.element_region(e)])
            .collect()
    }

    /// Whether the mass matrix is lumped.
    pub fn lumped(&self) -> bool {
        self.mass == MassKind::Lumped
    }

    /// The steps the engine takes when the field lies on a cycle (see
    /// [`crate::Dynamic::cycle_plan`]): the scheme's coefficients with fixed steps, the steps
    /// an adaptive run chose, or the rule that chooses them (θ-schemes only).
    pub fn cycle_plan(&self, model: &ThermalModel) -> Result<CyclePlan, RunError> {
        let p = self.problem(model)?;
        let initial = model.nodal_temperature(&model.dofs.gather(&p.initial));
        let coefficients = |k: usize| {
            let [a0, a1, a2, theta] = self.scheme.coefficients(k);
            ([a0, a1, a2], theta)
        };
        let (steps, adaptive) = match (&self.adaptive, &self.chosen_steps) {
            (None, _) => {
                let steps = (0..self.steps)
                    .map(|k| {
                        let (a, theta) = coefficients(k);
                        CycleStep { dt: self.dt, a, theta }
                    })
                    .collect();
                (steps, None)
            }
            (Some(_), Some((sizes, _))) => {
                let steps = sizes
                    .iter()
                    .enumerate()
                    .map(|(k, &dt)| {
                        let (a, theta) = coefficients(k);
                        CycleStep { dt, a, theta }
                    })
                    .collect();
                (steps, None)
            }
            (Some(a), None) => {
                let TimeScheme::Theta { theta } = self.scheme else {
                    return Err(setup(
                        "[transient] adaptive steps need a θ-scheme (implicit_euler, crank_nicolson or theta), not bdf2",
                    ));
                };
                let rule = CycleAdapt {
                    end_time: a.t_end,
                    tolerance: a.tolerance,
                    dt_initial: a.dt_initial,
                    dt_min: a.dt_min,
                    dt_max: a.dt_max,
                    theta,
                };
                (Vec::new(), Some(rule))
            }
        };
        Ok(CyclePlan { initial, steps, adaptive, memory: self.memory })
    }

    /// Keep the step sizes the engine chose on a cycle (an adaptive plan) for later runs.
    pub fn set_chosen_steps(&mut self, steps: Vec<f64>, choice: StepChoice) {
        let info = AdaptInfo {
            accepted: choice.accepted,
            rejected: choice.rejected,
            max_error: choice.max_error,
            factorizations: 0,
        };
        self.chosen_steps = Some((steps, info));
    }

    /// Record what the engine's reverse sweep over a cycle's steps cost.
    pub fn set_sweep_stats(&mut self, recomputed_steps: usize, peak_stored_states: usize) {
        self.report.recomputed_steps = Some(recomputed_steps);
        self.report.peak_stored_states = Some(peak_stored_states);
    }

    /// The transient problem with the step sizes an adaptive run chose.
    fn problem_with_chosen_steps(
        &self,
        model: &ThermalModel,
    ) -> Result<TransientProblem, RunError> {
        let mut p = self.problem(model)?;
        if let (Some(_), Some((steps, _))) = (&self.adaptive, &self.chosen_steps) {
            p.n_steps = steps.len();
            p.step_sizes = Some(steps.clone());
        }
        Ok(p)
    }

    /// Take a run the engine made (a temperature on a cycle) as the last run.
    pub fn set_run(
        &mut self,
        model: &ThermalModel,
        times: Vec<f64>,
        temperatures: Vec<Vec<f64>>,
        newton_iterations: usize,
    ) -> Result<(), RunError> {
        let mut p = self.problem_with_chosen_steps(model)?;
        p.keep_stepper();
        let traj = Trajectory {
            times,
            temperatures,
            newton_iterations,
            factorizations: newton_iterations,
        };
        let adapt = self.adaptive.and(self.chosen_steps.as_ref().map(|(_, info)| *info));
        self.report = TransientReport {
            steps: p.n_steps,
            final_time_s: *traj.times.last().expect("the initial state at least"),
            newton_iterations,
            factorizations: newton_iterations,
            max_temperature_over_time_k: traj
                .temperatures
                .iter()
                .flatten()
                .copied()
                .filter(|v| v.is_finite())
                .fold(f64::NEG_INFINITY, f64::max),
            adaptive_accepted: adapt.map(|a| a.accepted),
            adaptive_rejected: adapt.map(|a| a.rejected),
            simulate_s: 0.0,
            recomputed_steps: None,
            peak_stored_states: None,
        };
        self.replace_run(Some((p, traj)));
        Ok(())
    }

    /// Add −μᵀ (∂M/∂ρc) w per region (`per_region`: Σ over the region's elements of
    /// μₑᵀ Mₑ(ρc = 1) wₑ) to the registered heat capacities.
    pub fn add_capacity_gradient(&self, per_region: &[f64], rev: &mut Reverse) {
        for (id, b) in &self.bindings {
            if let TBinding::HeatCapacity(r) = b {
                rev.grad.get_mut(*id)[0] -= per_region[*r];
            }
        }
    }

    /// Add the seed `t_bar` on the initial nodal temperature to the initial temperature (its
    /// free nodes).
    pub fn add_initial_gradient(&self, model: &ThermalModel, t_bar: &[f64], rev: &mut Reverse) {
        for (id, b) in &self.bindings {
            if let TBinding::Initial = b {
                let free: f64 = (0..model.n_nodes())
                    .filter(|&n| model.dofs.unknown_of_node[n].is_some())
                    .map(|n| t_bar[n])
                    .sum();
                rev.grad.get_mut(*id)[0] += free;
            }
        }
    }

    /// The states to write: (time, nodal temperature) every `output_every` steps and the last.
    pub fn output_states(&self) -> Vec<(f64, &[f64])> {
        let Some((_, traj)) = &self.run else { return Vec::new() };
        self.output_indices()
            .into_iter()
            .map(|i| (traj.times[i], traj.temperatures[i].as_slice()))
            .collect()
    }

    /// The indices of the states [`output_states`](Self::output_states) writes.
    pub fn output_indices(&self) -> Vec<usize> {
        let Some((_, traj)) = &self.run else { return Vec::new() };
        let n = traj.temperatures.len();
        (0..n).filter(|&i| i % self.output_every == 0 || i == n - 1).collect()
    }
}

/// The thermal objective terms weighted in time, plus per-state seeds (∂/∂T per node) of the
/// fields downstream.
struct SeededTerms<'a> {
    terms: WeightedTerms,
    seeds: &'a [Option<Vec<f64>>],
    /// The terms' unweighted evaluations at every state, when kept (node coordinates held).
    known: Option<&'a [ObjectiveEval]>,
}

impl TimeObjective for SeededTerms<'_> {
    fn eval(
        &self,
        model: &gradfem_thermal::ThermalModel,
        at: ThermalStepInfo,
        t: &[f64],
        with_coords: bool,
    ) -> Result<Option<gradfem_thermal::ObjectiveEval>, gradfem_thermal::ThermalError> {
        let own = match self.known {
            _ if self.terms.terms.is_empty() => None,
            Some(known) if !with_coords => {
                let w = self.terms.weights.weight(at);
                (w != 0.0).then(|| {
                    let e = &known[at.step];
                    ObjectiveEval {
                        value: w * e.value,
                        terms: e.terms.clone(),
                        d_temperature: e.d_temperature.iter().map(|v| w * v).collect(),
                        d_coords: None,
                    }
                })
            }
            _ => self.terms.eval(model, at, t, with_coords)?,
        };
        let Some(Some(d_t)) = self.seeds.get(at.step) else { return Ok(own) };
        let mut e = own.unwrap_or_else(|| gradfem_thermal::ObjectiveEval {
            value: 0.0,
            terms: Vec::new(),
            d_temperature: vec![0.0; t.len()],
            d_coords: with_coords.then(|| vec![[0.0; 3]; t.len()]),
        });
        for (a, b) in e.d_temperature.iter_mut().zip(d_t) {
            *a += b;
        }
        Ok(Some(e))
    }
}
