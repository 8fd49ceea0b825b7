//! Transient problems from a problem file: the `[transient]` table, the thermal field's time
//! stepping it describes and the rule that makes J of the history.
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

use gradfem_coupling::RunError;
use gradfem_coupling::fields::thermal_transient::{Initial, ThermalTransient};
use gradfem_coupling::fields::transient::{AdaptParams, MassKind, TimeScheme};
use gradfem_coupling::time::{StepWeights, TimeRule};
use gradfem_solvers::checkpoint::Checkpointing;
use gradfem_thermal::ThermalModel;
use serde::{Deserialize, Serialize};
use toml::Spanned;

/// One material's heat capacity.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HeatCapacitySpec {
    pub group: Spanned<String>,
    /// ρc [J/(m³·K)].
    pub rho_c: f64,
}

/// Adaptive step control (θ-schemes; see [`crate::transient::TransientProblem::adapt_steps`]).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveSpec {
    pub end_time: f64,
    pub tolerance: f64,
    pub dt_initial: Option<f64>,
    pub dt_min: Option<f64>,
    pub dt_max: Option<f64>,
}

/// The `[transient]` table.
#[derive(Clone, Debug, Deserialize, Serialize)]
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
    /// `objective = "at"`: the time \[s\] at which the objective terms are taken.
    pub time: Option<f64>,
    /// `objective = "max"`: the sharpness ρ of the Kreisselmeier–Steinhauser maximum over
    /// the states [1/(the terms' unit)].
    pub sharpness: Option<f64>,
    /// `objective = "misfit"`: a CSV file of (time \[s\], value) rows, relative to the problem
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

/// The most fixed time steps a `[transient]` table may ask for (every state is kept).
pub const MAX_TIME_STEPS: usize = 1_000_000;

fn setup(msg: impl Into<String>) -> RunError {
    RunError::Setup(msg.into())
}

/// The thermal field's time stepping of `[transient]` for `model`; `initial_nodal` is the
/// starting field of `[initial_state]`, if any.
pub fn build_time_stepping(
    spec: &TransientFileSpec,
    model: &ThermalModel,
    initial_nodal: Option<Vec<f64>>,
) -> Result<ThermalTransient, RunError> {
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
    if !(dt.is_finite() && dt > 0.0) {
        return Err(setup(format!(
            "[transient] `dt` = {dt}: a time step is a positive number of seconds"
        )));
    }
    if adaptive.is_none() && steps > MAX_TIME_STEPS {
        return Err(setup(format!(
            "[transient] `steps` = {steps}: at most {MAX_TIME_STEPS} fixed steps (every state is \
             kept for the outputs and the adjoint); take a larger `dt`, or `adaptive` steps"
        )));
    }
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
    let memory = if spec.checkpoints == 0 {
        Checkpointing::StoreAll
    } else {
        Checkpointing::Binomial { snapshots: spec.checkpoints }
    };
    if spec.output_every == 0 {
        return Err(setup("[transient] output_every must be at least 1"));
    }
    ThermalTransient::new(
        model,
        scheme,
        mass,
        dt,
        steps,
        adaptive,
        heat_capacity,
        initial,
        memory,
        spec.output_every,
    )
}

/// The rule of `[transient] objective` that makes J of the objective terms' values at the
/// states (a measured series is read relative to the directory `base`).
pub fn time_rule(base: &std::path::Path, spec: &TransientFileSpec) -> Result<TimeRule, RunError> {
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
    let rule = match kind {
        "final" => TimeRule::Weighted(StepWeights::Final),
        "sum" => TimeRule::Weighted(StepWeights::EveryStep),
        "integral" => TimeRule::Weighted(StepWeights::Trapezoid),
        "at" => {
            let t = spec.time.expect("checked");
            if !(t.is_finite() && t >= 0.0) {
                return Err(setup(format!("[transient] time = {t}: a time ≥ 0 s")));
            }
            TimeRule::At(t)
        }
        "max" => {
            let rho = spec.sharpness.expect("checked");
            if !(rho.is_finite() && rho > 0.0) {
                return Err(setup(format!(
                    "[transient] sharpness = {rho}: a positive number (1/the terms' unit)"
                )));
            }
            TimeRule::Max { rho }
        }
        "misfit" => {
            let path = spec
                .measured
                .as_ref()
                .ok_or_else(|| setup("[transient] objective = \"misfit\" needs `measured`"))?;
            let series = read_time_series(&base.join(path)).map_err(|e| match e {
                RunError::Setup(m) => setup(format!("[transient] `measured`: {m}")),
                other => other,
            })?;
            TimeRule::Misfit(series)
        }
        other => {
            return Err(setup(format!(
                "[transient] objective '{other}': expected final, sum, integral, at, max or misfit"
            )));
        }
    };
    Ok(rule)
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
        let at = |m: String| setup(format!("{}:{}:1: {m}", path.display(), i + 1));
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
