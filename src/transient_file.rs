//! Transient heat from a problem file: the `[transient]` table, the run it describes, and the
//! mapping of its discrete-adjoint gradient onto the registered parameters.
//!
//! ```toml
//! [transient]
//! dt = 0.5                        # s (fixed step), with
//! steps = 200                     # the number of steps; or, instead of both:
//! # adaptive = { end_time = 100.0, tolerance = 0.01, dt_initial = 0.1, dt_min = 1e-4, dt_max = 10.0 }
//! scheme = "bdf2"                 # implicit_euler, crank_nicolson, bdf2, or theta (with theta = 0.6)
//! mass = "consistent"             # or lumped
//! heat_capacity = [{ group = "domain", rho_c = 2.4e6 }]   # J/(m³·K), every thermal material
//! initial_temperature = 293.15    # K, uniform (default: [initial_state], else the mean of the
//!                                 # fixed temperatures)
//! objective = "final"             # the [[objective]] terms at the last state; "sum" over every
//!                                 # state, or "integral" (trapezoidal rule in time)
//! checkpoints = 0                 # 0: keep every state; N > 0: at most N (binomial)
//! output_every = 1                # every k-th state goes to the XDMF time series
//! ```
//!
//! With `adaptive`, the first solve chooses the step sizes (step doubling) and later solves of
//! the same problem — after parameter changes in an optimization or a Taylor test — keep them:
//! the gradient is that of the discrete map with the step sizes held fixed, and re-choosing
//! them would make J jump between step sequences.
//!
//! Extra parameters: `thermal.rho_c.<group>` (heat capacity of a material) and
//! `thermal.initial_temperature` (the uniform starting temperature of the free nodes); every
//! steady thermal parameter (k, Q, boundary values, coordinates, morphs) gets its gradient
//! through the same checkpointed time adjoint.

use gradfem_solvers::checkpoint::Checkpointing;
use gradfem_solvers::params::{Gradient, ParamId, ParamRegistry, ParamSpec};
use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::run::RunError;
use crate::thermal::ThermalProblem;
use crate::transient::{
    AdaptInfo, AdaptParams, MassKind, StepInfo, StepWeights, TimeObjective, TimeScheme, Trajectory,
    TransientGradient, TransientProblem, TransientSpec, WeightedTerms,
};

/// One material's heat capacity.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeatCapacitySpec {
    pub group: Spanned<String>,
    /// ρc [J/(m³·K)].
    pub rho_c: f64,
}

/// Adaptive step control (θ-schemes; see [`TransientProblem::adapt_steps`]).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveSpec {
    pub end_time: f64,
    pub tolerance: f64,
    pub dt_initial: Option<f64>,
    pub dt_min: Option<f64>,
    pub dt_max: Option<f64>,
}

/// The `[transient]` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransientFileSpec {
    pub dt: Option<f64>,
    pub steps: Option<usize>,
    pub adaptive: Option<AdaptiveSpec>,
    #[serde(default = "bdf2")]
    pub scheme: String,
    pub theta: Option<f64>,
    #[serde(default = "consistent")]
    pub mass: String,
    pub heat_capacity: Vec<HeatCapacitySpec>,
    pub initial_temperature: Option<f64>,
    #[serde(default = "final_state")]
    pub objective: String,
    /// `objective = "at"`: the time [s] at which the objective terms are taken.
    pub time: Option<f64>,
    /// `objective = "max"`: the sharpness ρ of the Kreisselmeier–Steinhauser maximum over
    /// the states [1/(the terms' unit)].
    pub sharpness: Option<f64>,
    /// `objective = "misfit"`: a CSV file of (time [s], value) rows, relative to the problem
    /// file: J = ½ Σₖ (j(tₖ) − dₖ)².
    pub measured: Option<String>,
    #[serde(default)]
    pub checkpoints: usize,
    #[serde(default = "one")]
    pub output_every: usize,
}

fn bdf2() -> String {
    "bdf2".into()
}
fn consistent() -> String {
    "consistent".into()
}
fn final_state() -> String {
    "final".into()
}
fn one() -> usize {
    1
}

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
    /// The largest nodal temperature over every state [K].
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

/// How J is made of the objective terms' values jₙ at the states.
#[derive(Clone, Debug, PartialEq)]
enum TimeAggregate {
    /// Σₙ wₙ jₙ with fixed weights: the final state, every state, the trapezoidal integral.
    Weighted(StepWeights),
    /// j(t) at a time t, linear between the states around it.
    At(f64),
    /// The Kreisselmeier–Steinhauser maximum over the states with sharpness ρ:
    /// max ≤ J ≤ max + ln(N + 1)/ρ.
    Max { rho: f64 },
    /// ½ Σₖ (j(tₖ) − dₖ)² over measured (tₖ, dₖ), j linear between the states.
    Misfit(Vec<[f64; 2]>),
}

/// The weights (wₙ, wₙ₊₁) that interpolate linearly at `t` between the states at `times`, with
/// the index n; an error outside [t₀, t_N].
fn interpolation(times: &[f64], t: f64, what: &str) -> Result<(usize, f64, f64), RunError> {
    let last = *times.last().expect("the initial state at least");
    let tol = 1e-12 * last.abs().max(f64::MIN_POSITIVE);
    if !(t >= times[0] - tol && t <= last + tol) {
        return Err(setup(format!(
            "[transient] {what}: t = {t} s lies outside the run, 0 … {last} s"
        )));
    }
    if times.len() == 1 {
        return Ok((0, 1.0, 0.0));
    }
    // The step [tₙ, tₙ₊₁] that holds t (the last one for t = t_N).
    let n = times.partition_point(|&x| x <= t).saturating_sub(1).min(times.len() - 2);
    let (a, b) = (times[n], times[n + 1]);
    let s = ((t - a) / (b - a)).clamp(0.0, 1.0);
    Ok((n, 1.0 - s, s))
}

impl TimeAggregate {
    /// J from the values jₙ at the states at `times`, and dJ/djₙ.
    fn value_and_weights(
        &self,
        j: &[f64],
        times: &[f64],
        info: impl Fn(usize) -> StepInfo,
    ) -> Result<(f64, Vec<f64>), RunError> {
        let mut w = vec![0.0; j.len()];
        let value = match self {
            TimeAggregate::Weighted(sw) => {
                for (n, wn) in w.iter_mut().enumerate() {
                    *wn = sw.weight(info(n));
                }
                j.iter().zip(&w).map(|(a, b)| a * b).sum()
            }
            TimeAggregate::At(t) => {
                let (n, a, b) = interpolation(times, *t, "objective = \"at\"")?;
                w[n] += a;
                if b != 0.0 {
                    w[n + 1] += b;
                }
                a * j[n] + if b != 0.0 { b * j[n + 1] } else { 0.0 }
            }
            TimeAggregate::Max { rho } => {
                let m = j.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = j.iter().map(|v| (rho * (v - m)).exp()).collect();
                let sum: f64 = e.iter().sum();
                for (wn, en) in w.iter_mut().zip(&e) {
                    *wn = en / sum;
                }
                m + sum.ln() / rho
            }
            TimeAggregate::Misfit(data) => {
                let mut total = 0.0;
                for (k, [t, d]) in data.iter().enumerate() {
                    let (n, a, b) =
                        interpolation(times, *t, &format!("measured row {} (time {t} s)", k + 1))?;
                    let jt = a * j[n] + if b != 0.0 { b * j[n + 1] } else { 0.0 };
                    let r = jt - d;
                    total += 0.5 * r * r;
                    w[n] += r * a;
                    if b != 0.0 {
                        w[n + 1] += r * b;
                    }
                }
                total
            }
        };
        Ok((value, w))
    }
}

/// Read a measured time series: `time,value` rows (blank lines, `#` comments and a non-numeric
/// first row skipped), times increasing; errors name the file and line.
pub fn read_time_series(path: &std::path::Path) -> Result<Vec<[f64; 2]>, RunError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| setup(format!("{}: cannot read: {e}", path.display())))?;
    let mut out: Vec<[f64; 2]> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = line.split(',').map(str::trim).collect();
        let nums: Vec<Option<f64>> = cols.iter().map(|c| c.parse::<f64>().ok()).collect();
        if out.is_empty() && nums.iter().all(Option::is_none) {
            continue; // a header
        }
        let at = |m: String| setup(format!("{}:{}: {m}", path.display(), i + 1));
        let [Some(t), Some(v)] = nums[..] else {
            return Err(at(format!("expected two numbers, time (s) and value; got '{line}'")));
        };
        if !(t.is_finite() && v.is_finite()) {
            return Err(at("time and value must be finite".into()));
        }
        if out.last().is_some_and(|p| t <= p[0]) {
            return Err(at(format!("time {t} s does not increase")));
        }
        out.push([t, v]);
    }
    if out.is_empty() {
        return Err(setup(format!("{}: no (time, value) rows", path.display())));
    }
    Ok(out)
}

/// A transient run set up from a problem file.
pub struct TransientRun {
    scheme: TimeScheme,
    mass: MassKind,
    dt: f64,
    steps: usize,
    adaptive: Option<AdaptParams>,
    /// ρc per thermal region.
    pub heat_capacity: Vec<f64>,
    /// Uniform initial temperature, or the nodal field of `[initial_state]`.
    initial: Initial,
    aggregate: TimeAggregate,
    memory: Checkpointing,
    /// Every k-th state is written to the results.
    pub output_every: usize,
    bindings: Vec<(ParamId, TBinding)>,
    /// The problem of the last run (with its chosen step sizes) and its trajectory.
    run: Option<(TransientProblem, Trajectory)>,
    /// Adaptive runs: the step sizes the first solve chose, held fixed afterwards.
    chosen_steps: Option<(Vec<f64>, AdaptInfo)>,
    pub report: TransientReport,
}

#[derive(Clone, Debug)]
enum Initial {
    Uniform(f64),
    Nodal(Vec<f64>),
}

fn setup(msg: impl Into<String>) -> RunError {
    RunError::Setup(msg.into())
}

fn transient_err(e: crate::transient::TransientError) -> RunError {
    RunError::Setup(e.to_string())
}

impl TransientRun {
    /// Check `[transient]` against the thermal problem. `initial_nodal` is the starting field of
    /// `[initial_state]`, if any.
    pub fn new(
        spec: &TransientFileSpec,
        thermal: &ThermalProblem,
        initial_nodal: Option<Vec<f64>>,
        measured: Option<Vec<[f64; 2]>>,
    ) -> Result<Self, RunError> {
        let scheme = match spec.scheme.as_str() {
            "implicit_euler" => TimeScheme::Theta { theta: 1.0 },
            "crank_nicolson" => TimeScheme::Theta { theta: 0.5 },
            "bdf2" => TimeScheme::Bdf2,
            "theta" => TimeScheme::Theta {
                theta: spec
                    .theta
                    .ok_or_else(|| setup("[transient] scheme = \"theta\" needs `theta`"))?,
            },
            other => {
                return Err(setup(format!(
                    "[transient] scheme '{other}': expected implicit_euler, crank_nicolson, bdf2 or theta"
                )));
            }
        };
        if spec.theta.is_some() && spec.scheme != "theta" {
            return Err(setup("[transient] `theta` goes with scheme = \"theta\""));
        }
        let mass = match spec.mass.as_str() {
            "consistent" => MassKind::Consistent,
            "lumped" => MassKind::Lumped,
            other => {
                return Err(setup(format!(
                    "[transient] mass '{other}': expected consistent or lumped"
                )));
            }
        };
        let (dt, steps, adaptive) = match (&spec.adaptive, spec.dt, spec.steps) {
            (None, Some(dt), Some(n)) if n > 0 => (dt, n, None),
            (Some(a), None, None) => {
                let dt0 = a.dt_initial.unwrap_or(a.end_time / 100.0);
                let p = AdaptParams {
                    t_end: a.end_time,
                    tolerance: a.tolerance,
                    dt_initial: dt0,
                    dt_min: a.dt_min.unwrap_or(dt0 * 1e-4),
                    dt_max: a.dt_max.unwrap_or(a.end_time),
                };
                (dt0, 1, Some(p))
            }
            _ => {
                return Err(setup(
                    "[transient] needs either `dt` and `steps` (≥ 1), or `adaptive = { end_time, tolerance, … }`",
                ));
            }
        };
        let model = &thermal.model;
        let mut heat_capacity = vec![f64::NAN; model.regions.len()];
        for h in &spec.heat_capacity {
            let r =
                model.regions.iter().position(|r| &r.name == h.group.get_ref()).ok_or_else(|| {
                    setup(format!(
                        "[transient] heat_capacity: '{}' is not a thermal material; the materials are: {}",
                        h.group.get_ref(),
                        model.regions.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", ")
                    ))
                })?;
            heat_capacity[r] = h.rho_c;
        }
        if let Some(r) = heat_capacity.iter().position(|c| c.is_nan()) {
            return Err(setup(format!(
                "[transient] heat_capacity: material '{}' has none",
                model.regions[r].name
            )));
        }
        let initial = match (spec.initial_temperature, initial_nodal) {
            (Some(_), Some(_)) => {
                return Err(setup(
                    "give the initial temperature either by [transient] initial_temperature or by [initial_state], not both",
                ));
            }
            (Some(t), None) => Initial::Uniform(t),
            (None, Some(field)) => Initial::Nodal(field),
            (None, None) => Initial::Uniform(model.reference_temperature()),
        };
        let kind = spec.objective.as_str();
        let takes = |key: &str, given: bool, wanted: &str| -> Result<(), RunError> {
            match (given, kind == wanted) {
                (true, false) => Err(setup(format!(
                    "[transient] `{key}` goes with objective = \"{wanted}\", not \"{kind}\""
                ))),
                (false, true) => {
                    Err(setup(format!("[transient] objective = \"{wanted}\" needs `{key}`")))
                }
                _ => Ok(()),
            }
        };
        takes("time", spec.time.is_some(), "at")?;
        takes("sharpness", spec.sharpness.is_some(), "max")?;
        takes("measured", spec.measured.is_some(), "misfit")?;
        let aggregate = match kind {
            "final" => TimeAggregate::Weighted(StepWeights::Final),
            "sum" => TimeAggregate::Weighted(StepWeights::EveryStep),
            "integral" => TimeAggregate::Weighted(StepWeights::Trapezoid),
            "at" => {
                let t = spec.time.expect("checked");
                if !(t.is_finite() && t >= 0.0) {
                    return Err(setup(format!("[transient] time = {t}: a time ≥ 0 s")));
                }
                TimeAggregate::At(t)
            }
            "max" => {
                let rho = spec.sharpness.expect("checked");
                if !(rho.is_finite() && rho > 0.0) {
                    return Err(setup(format!(
                        "[transient] sharpness = {rho}: a positive number (1/the terms' unit)"
                    )));
                }
                TimeAggregate::Max { rho }
            }
            "misfit" => TimeAggregate::Misfit(
                measured
                    .ok_or_else(|| setup("[transient] objective = \"misfit\" needs `measured`"))?,
            ),
            other => {
                return Err(setup(format!(
                    "[transient] objective '{other}': expected final, sum, integral, at, max or misfit"
                )));
            }
        };
        let memory = if spec.checkpoints == 0 {
            Checkpointing::StoreAll
        } else {
            Checkpointing::Binomial { snapshots: spec.checkpoints }
        };
        if spec.output_every == 0 {
            return Err(setup("[transient] output_every must be at least 1"));
        }
        let run = TransientRun {
            scheme,
            mass,
            dt,
            steps,
            adaptive,
            heat_capacity,
            initial,
            aggregate,
            memory,
            output_every: spec.output_every,
            bindings: Vec::new(),
            run: None,
            chosen_steps: None,
            report: TransientReport::default(),
        };
        // Fail early on bad values (ρc ≤ 0, θ outside [½, 1], Δt ≤ 0).
        run.problem(thermal)?;
        Ok(run)
    }

    /// True when `name` is a transient parameter.
    pub fn owns(name: &str) -> bool {
        name.starts_with("thermal.rho_c.") || name == "thermal.initial_temperature"
    }

    /// Parameter names of the run.
    pub fn available_parameters(&self, thermal: &ThermalProblem) -> Vec<String> {
        let mut names: Vec<String> =
            thermal.model.regions.iter().map(|r| format!("thermal.rho_c.{}", r.name)).collect();
        if matches!(self.initial, Initial::Uniform(_)) {
            names.push("thermal.initial_temperature".into());
        }
        names
    }

    /// Register `thermal.rho_c.<group>` or `thermal.initial_temperature`.
    pub fn register(
        &mut self,
        thermal: &mut ThermalProblem,
        name: &str,
        bounds: Option<[f64; 2]>,
    ) -> Result<ParamId, RunError> {
        let unknown = || {
            setup(format!(
                "cannot register '{name}': the transient run offers {}",
                self.available_parameters(thermal).join(", ")
            ))
        };
        let (binding, spec) = if let Some(g) = name.strip_prefix("thermal.rho_c.") {
            let r = thermal.model.regions.iter().position(|r| r.name == g).ok_or_else(unknown)?;
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
        let id = thermal.registry.register(spec)?;
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
        self.run = None;
    }

    fn problem(&self, thermal: &ThermalProblem) -> Result<TransientProblem, RunError> {
        let model = thermal.model.clone();
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

    /// Run the time stepping with the thermal problem's current model; the thermal problem
    /// then holds the last state (for summaries and outputs).
    pub fn solve(&mut self, thermal: &mut ThermalProblem) -> Result<(), RunError> {
        let t0 = std::time::Instant::now();
        let mut p = self.problem(thermal)?;
        p.newton_rtol = thermal.newton.rel_tol.min(1e-10);
        p.newton_max_iterations = thermal.newton.max_iterations;
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
        thermal.set_solution(last);
        self.run = Some((p, traj));
        Ok(())
    }

    fn objective(thermal: &ThermalProblem, weights: StepWeights) -> WeightedTerms {
        WeightedTerms { terms: thermal.objective.clone(), weights }
    }

    /// The thermal objective terms' value jₙ at every state of the last run (zeros without
    /// thermal terms).
    pub fn state_objective(&self, thermal: &ThermalProblem) -> Result<Vec<f64>, RunError> {
        let (_, traj) = self.run.as_ref().ok_or_else(|| setup("transient: solve first"))?;
        if thermal.objective.is_empty() {
            return Ok(vec![0.0; traj.temperatures.len()]);
        }
        traj.temperatures
            .iter()
            .map(|t| {
                gradfem_thermal::objective::evaluate(&thermal.model, &thermal.objective, t, false)
                    .map(|e| e.value)
                    .map_err(RunError::from)
            })
            .collect()
    }

    /// J = F(j₀ … j_N) of the `[transient] objective` rule for the values jₙ of the objective
    /// terms at the states, and dJ/djₙ.
    pub fn aggregate(&self, j: &[f64]) -> Result<(f64, Vec<f64>), RunError> {
        let (p, traj) = self.run.as_ref().ok_or_else(|| setup("transient: solve first"))?;
        self.aggregate.value_and_weights(j, &traj.times, |n| p.step_info(n))
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

    /// The adjoint of Σₙ wₙ jₙ(Tⁿ) + the seeds: `weights` (dJ/djₙ, from
    /// [`aggregate`](Self::aggregate)) weigh the thermal terms at each state, and `seeds[n]` =
    /// (value, ∂/∂T per node) of state n is added (the weighted adjoints of quasi-static
    /// fields downstream of the temperature; shorter than the run or `None`: nothing).
    /// Returns that sum, dJ/dp, and dJ/dQ per quadrature point of the thermal model's
    /// external source (empty without one), for the field upstream that makes it.
    pub fn gradient_seeded(
        &mut self,
        thermal: &ThermalProblem,
        seeds: &[Option<(f64, Vec<f64>)>],
        weights: &[f64],
    ) -> Result<(f64, Gradient, Vec<f64>), RunError> {
        let (p, _) = self.run.as_ref().ok_or_else(|| setup("transient: solve first"))?;
        let weights = StepWeights::Custom(weights.to_vec());
        let obj = SeededTerms { terms: Self::objective(thermal, weights), seeds };
        let g: TransientGradient =
            p.gradient(&obj, self.memory, thermal.vjp_request()).map_err(transient_err)?;
        let mut grad = Gradient::zeros(&thermal.registry);
        thermal.add_transient_gradient(&g, &mut grad);
        let owner = thermal.model.fixed_owner();
        for (id, b) in &self.bindings {
            let v = grad.get_mut(*id);
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
        self.report.recomputed_steps = Some(g.stats.forward_steps.saturating_sub(p.n_steps));
        self.report.peak_stored_states = Some(g.stats.max_stored_states);
        Ok((g.value, grad, g.external_source))
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

/// The thermal objective terms weighted in time, plus per-state seeds (value, ∂/∂T) of the
/// fields downstream.
struct SeededTerms<'a> {
    terms: WeightedTerms,
    seeds: &'a [Option<(f64, Vec<f64>)>],
}

impl TimeObjective for SeededTerms<'_> {
    fn eval(
        &self,
        model: &gradfem_thermal::ThermalModel,
        at: StepInfo,
        t: &[f64],
        with_coords: bool,
    ) -> Result<Option<gradfem_thermal::ObjectiveEval>, gradfem_thermal::ThermalError> {
        let own = if self.terms.terms.is_empty() {
            None
        } else {
            self.terms.eval(model, at, t, with_coords)?
        };
        let Some(Some((value, d_t))) = self.seeds.get(at.step) else { return Ok(own) };
        let mut e = own.unwrap_or_else(|| gradfem_thermal::ObjectiveEval {
            value: 0.0,
            terms: Vec::new(),
            d_temperature: vec![0.0; t.len()],
            d_coords: with_coords.then(|| vec![[0.0; 3]; t.len()]),
        });
        e.value += value;
        for (a, b) in e.d_temperature.iter_mut().zip(d_t) {
            *a += b;
        }
        Ok(Some(e))
    }
}
