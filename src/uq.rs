//! `gradfem uq`: uncertainty propagation through a problem file's `[uq]` table.
//!
//! The inputs are registered parameters with distributions ([`gradfem_uq::dist`]); each
//! sample sets them through the library API ([`crate::api::Simulation`]), solves and records
//! the followed quantities. The samples are computed in *chunks* of `batch` consecutive
//! indices, each written atomically to `parts/chunk-NNNNNN.json` in the output directory as
//! soon as it is done; the report (`uq.json`, `samples.json`, `samples.csv`,
//! `convergence.png`) is then *reduced* from the chunks in sample order. That one design
//! gives:
//!
//! - **resume**: a rerun skips the chunks already written;
//! - **shards** (`--shard i/n`): shard i computes chunks c with c mod n = i and writes them;
//!   `gradfem uq --reduce DIR` reduces once all are there;
//! - **ranks** (feature `mpi`, `crate::ranks`): rank r computes the chunks of shard r/R and
//!   sends them to rank 0, which writes and reduces;
//!
//! and the same bytes in every case: a sample's point depends on (seed, index) only, every
//! sample's solve starts from the same state (the problem's start before any solve), and the
//! reduction reads the chunks in sample order.
//!
//! Sensitivities: at the inputs' means the adjoint gradient g of each differentiable output
//! gives the first-order variance gᵀ C g and each input's share
//! ([`gradfem_uq::sensitivity`]); that solve is `parts/mean.json`, written by the unsharded
//! run, shard 0 or rank 0.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gradfem_uq::dist::{Correlation, Distribution, transform};
use gradfem_uq::field::{Covariance, KarhunenLoeve};
use gradfem_uq::sensitivity::{VarianceShares, variance_shares};
use gradfem_uq::stats::{self, Acceptance, Exceedance, StopRule, Summary};
use gradfem_uq::{Design, DesignKind};
use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::api::{ApiError, Cotangent, Simulation};
use crate::problem::{ProblemError, ProblemFile, line_col};
use crate::uq_file::UqInputSpec;

// ---------------------------------------------------------------------------------------------
// The checked plan: everything the reduction needs, stored in `parts/plan.json`.

/// One uncertain input, checked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InputPlan {
    /// The registered parameter.
    pub parameter: String,
    /// False for a vector parameter, whose nominal values are scaled by the sampled factor.
    pub scalar: bool,
    /// The distribution of the value (a scalar) or of the factor (a vector; for a random
    /// field, the factor of each cell).
    pub distribution: Distribution,
    /// A per-element parameter sampled as a random field: cell e's value is its nominal value
    /// times F⁻¹(Φ(g_e)), F the factor's distribution and g a Gaussian field whose
    /// Karhunen–Loève coefficients are this input's coordinates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<FieldPlan>,
}

impl InputPlan {
    /// The coordinates of the design this input takes: one, or one per kept mode.
    pub fn dims(&self) -> usize {
        self.field.as_ref().map_or(1, |f| f.modes)
    }
}

/// A random-field input, checked: its Karhunen–Loève expansion over the group's cells.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FieldPlan {
    /// The correlation function.
    pub covariance: Covariance,
    /// Its correlation length (the mesh's unit).
    pub correlation_length: f64,
    /// The group's cells.
    pub cells: usize,
    /// The modes kept: the input's coordinates, independent standard normals.
    pub modes: usize,
    /// The share of the variance asked for, if any.
    pub energy: Option<f64>,
    /// The share of the field's variance (integrated over the group) the kept modes carry.
    pub captured: f64,
    /// λ of each kept mode, over the group's volume.
    pub eigenvalues: Vec<f64>,
    /// The points of the eigenproblem: the cells, or bins of them on a large group.
    pub quadrature_points: usize,
    /// The bins' edge when the cells were binned (modes reach every cell by the Nyström
    /// extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bin_size: Option<f64>,
}

/// One followed output, checked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutputPlan {
    /// The quantity.
    pub quantity: String,
    /// P(q > upper) is reported.
    pub upper: Option<f64>,
    /// P(q < lower) is reported.
    pub lower: Option<f64>,
}

/// The acceptance rule, checked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AcceptPlan {
    /// The output judged.
    pub output: String,
    /// std < fraction · |mean|.
    pub fraction: f64,
}

/// A study, checked: what `parts/plan.json` holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The problem's title.
    pub title: String,
    /// The problem file's name.
    pub problem: String,
    /// The design's name.
    pub design: String,
    /// Its seed.
    pub seed: u64,
    /// Sobol replicates (1 otherwise).
    pub replicates: usize,
    /// Samples per chunk.
    pub batch: usize,
    /// The inputs.
    pub inputs: Vec<InputPlan>,
    /// The inputs' correlation matrix.
    pub correlation: Option<Vec<Vec<f64>>>,
    /// The outputs.
    pub outputs: Vec<OutputPlan>,
    /// The stopping rule.
    pub stop: StopRule,
    /// The acceptance rule.
    pub accept: Option<AcceptPlan>,
    /// Quantile probabilities.
    pub quantiles: Vec<f64>,
    /// Whether the gradient at the means is taken.
    pub sensitivities: bool,
}

impl Plan {
    /// The most samples.
    pub fn max_samples(&self) -> usize {
        self.stop.max_samples()
    }

    /// The number of chunks of the most samples.
    pub fn chunks(&self) -> usize {
        self.max_samples().div_ceil(self.batch)
    }

    /// The sample indices of chunk c.
    pub fn chunk_range(&self, c: usize) -> std::ops::Range<usize> {
        c * self.batch..((c + 1) * self.batch).min(self.max_samples())
    }

    /// The design of the plan.
    pub fn design(&self) -> Result<Design, UqError> {
        let kind = DesignKind::parse(&self.design)
            .ok_or_else(|| UqError::Parts(format!("unknown design '{}'", self.design)))?;
        Design::new(kind, self.dimension(), self.max_samples(), self.seed, self.replicates)
            .map_err(|e| UqError::Parts(e.to_string()))
    }

    /// The design's dimension: one coordinate per scalar or scaled input, one per mode of a
    /// random field.
    pub fn dimension(&self) -> usize {
        self.inputs.iter().map(InputPlan::dims).sum()
    }

    /// Each coordinate's name (`parameter`, or `parameter[ξk]` for mode k of a field) and
    /// distribution (a field's modes: standard normals).
    pub fn coordinates(&self) -> Vec<(String, Distribution)> {
        let mut out = Vec::with_capacity(self.dimension());
        for i in &self.inputs {
            match &i.field {
                None => out.push((i.parameter.clone(), i.distribution.clone())),
                // Zero-padded, so that the modes sort in order by name.
                Some(f) => out.extend((1..=f.modes).map(|k| {
                    let width = f.modes.to_string().len();
                    (
                        format!("{}[ξ{k:0width$}]", i.parameter),
                        Distribution::Normal { mean: 0.0, std: 1.0 },
                    )
                })),
            }
        }
        out
    }

    /// The coordinates' correlation: the inputs' matrix with each field's modes independent
    /// of everything else.
    pub fn coordinate_correlation(&self) -> Option<Vec<Vec<f64>>> {
        let r = self.correlation.as_ref()?;
        let owner: Vec<usize> = self
            .inputs
            .iter()
            .enumerate()
            .flat_map(|(k, i)| std::iter::repeat_n(k, i.dims()))
            .collect();
        let d = owner.len();
        Some(
            (0..d)
                .map(|a| {
                    (0..d)
                        .map(|b| {
                            if a == b {
                                1.0
                            } else if owner[a] == owner[b] {
                                0.0
                            } else {
                                r[owner[a]][owner[b]]
                            }
                        })
                        .collect()
                })
                .collect(),
        )
    }

    /// Sum per-coordinate values per input (variance shares).
    fn per_input(&self, values: &[f64]) -> Vec<f64> {
        let mut at = 0;
        self.inputs
            .iter()
            .map(|i| {
                let s = values[at..at + i.dims()].iter().sum();
                at += i.dims();
                s
            })
            .collect()
    }

    fn output_index(&self, name: &str) -> usize {
        self.outputs.iter().position(|o| o.quantity == name).unwrap_or(0)
    }
}

/// An error of `gradfem uq`.
#[derive(Debug, thiserror::Error)]
pub enum UqError {
    /// The problem file or its `[uq]` table.
    #[error(transparent)]
    Problem(#[from] ProblemError),
    /// Setting up or solving the problem (outside a sample).
    #[error(transparent)]
    Api(#[from] ApiError),
    /// Reading or writing the output directory.
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    /// Parts that do not fit together, or are missing.
    #[error("{0}")]
    Parts(String),
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> UqError {
    UqError::Io { path: path.to_path_buf(), message: e.to_string() }
}

/// A located error of the `[uq]` table: `file:line:column: key: message`.
fn at<T>(file: &ProblemFile, v: &Spanned<T>, key: &str, message: impl AsRef<str>) -> UqError {
    let (line, column) = line_col(&file.source, v.span().start);
    ProblemError::Syntax {
        file: file.path.clone(),
        line,
        column,
        message: format!("{key}: {}", message.as_ref()),
    }
    .into()
}

/// An error at the `[uq]` header (or the file when it has none).
fn at_table(file: &ProblemFile, message: impl AsRef<str>) -> UqError {
    let line = file.source.lines().position(|l| l.trim_start().starts_with("[uq")).map(|i| i + 1);
    match line {
        Some(line) => ProblemError::Syntax {
            file: file.path.clone(),
            line,
            column: 1,
            message: format!("[uq]: {}", message.as_ref()),
        }
        .into(),
        None => ProblemError::Invalid {
            file: file.path.clone(),
            message: format!("[uq]: {}", message.as_ref()),
        }
        .into(),
    }
}

/// The default quantile probabilities.
const DEFAULT_QUANTILES: [f64; 3] = [0.05, 0.5, 0.95];
/// The seed's sample count.
const SEED_SAMPLES: usize = 32;
/// The seed's acceptance fraction.
const SEED_FRACTION: f64 = 0.05;

fn positive(file: &ProblemFile, v: &Option<Spanned<f64>>, key: &str) -> Result<(), UqError> {
    if let Some(x) = v
        && !(x.get_ref().is_finite() && *x.get_ref() > 0.0)
    {
        return Err(at(file, x, key, format!("{} must be a positive number", x.get_ref())));
    }
    Ok(())
}

/// Check an input's distribution; `nominal` is the parameter's value (scalars) or 1.
fn input_distribution(
    file: &ProblemFile,
    i: &UqInputSpec,
    nominal: f64,
) -> Result<Distribution, UqError> {
    let key = |k: &str| format!("[[uq.input]] '{}' {k}", i.parameter.get_ref());
    positive(file, &i.cv, &key("cv"))?;
    if let Some(m) = &i.mean
        && !m.get_ref().is_finite()
    {
        return Err(at(file, m, &key("mean"), "must be a finite number"));
    }
    let mean = i.mean.as_ref().map_or(nominal, |m| *m.get_ref());
    let std = match (&i.std, &i.cv) {
        (Some(s), Some(_)) => {
            return Err(at(file, s, &key("std"), "give std or cv, not both"));
        }
        (Some(s), None) => {
            if !(s.get_ref().is_finite() && *s.get_ref() > 0.0) {
                return Err(at(
                    file,
                    s,
                    &key("std"),
                    format!("{} must be a positive number", s.get_ref()),
                ));
            }
            Some(*s.get_ref())
        }
        (None, Some(c)) => {
            if mean == 0.0 {
                return Err(at(file, c, &key("cv"), "a relative std needs a mean other than 0"));
            }
            Some(c.get_ref() * mean.abs())
        }
        (None, None) => None,
    };
    let bound = |b: &Option<Spanned<f64>>, name: &str| -> Result<Option<f64>, UqError> {
        match b {
            Some(v) if !v.get_ref().is_finite() => {
                Err(at(file, v, &key(name), "must be a finite number (leave it out for no bound)"))
            }
            Some(v) => Ok(Some(*v.get_ref())),
            None => Ok(None),
        }
    };
    let (lower, upper) = (bound(&i.lower, "lower")?, bound(&i.upper, "upper")?);
    let need_std = |what: &str| {
        std.ok_or_else(|| {
            at(file, &i.distribution, &key("distribution"), format!("{what} needs std or cv"))
        })
    };
    let no_bounds = |what: &str| -> Result<(), UqError> {
        for (b, name) in [(&i.lower, "lower"), (&i.upper, "upper")] {
            if let Some(v) = b {
                return Err(at(
                    file,
                    v,
                    &key(name),
                    format!("a {what} input takes no bounds (use truncated_normal)"),
                ));
            }
        }
        Ok(())
    };
    let d = match i.distribution.get_ref().as_str() {
        "normal" => {
            no_bounds("normal")?;
            Distribution::Normal { mean, std: need_std("a normal input")? }
        }
        "lognormal" => {
            no_bounds("lognormal")?;
            Distribution::LogNormal { mean, std: need_std("a log-normal input")? }
        }
        "uniform" => match (lower, upper, std) {
            (Some(lower), Some(upper), None) => Distribution::Uniform { lower, upper },
            (None, None, Some(s)) => {
                let half = 3f64.sqrt() * s;
                Distribution::Uniform { lower: mean - half, upper: mean + half }
            }
            _ => {
                return Err(at(
                    file,
                    &i.distribution,
                    &key("distribution"),
                    "a uniform input takes lower and upper, or a mean with std or cv",
                ));
            }
        },
        "truncated_normal" => Distribution::TruncatedNormal {
            mean,
            std: need_std("a truncated normal input")?,
            lower: lower.unwrap_or(f64::MIN),
            upper: upper.unwrap_or(f64::MAX),
        },
        other => {
            return Err(at(
                file,
                &i.distribution,
                &format!("[[uq.input]] '{}'", i.parameter.get_ref()),
                format!(
                    "distribution '{other}': expected normal, lognormal, uniform or truncated_normal"
                ),
            ));
        }
    };
    d.validate().map_err(|e| at(file, &i.distribution, &key("distribution"), e.to_string()))?;
    Ok(d)
}

/// The default number of Karhunen–Loève modes of a random field.
const DEFAULT_MODES: usize = 32;

/// Check a random-field input (one with field keys) and expand its field over the group's
/// cells; None for an input without them.
fn random_field(
    file: &ProblemFile,
    sim: &Simulation,
    i: &UqInputSpec,
    scalar: bool,
) -> Result<Option<(InputPlan, KarhunenLoeve)>, UqError> {
    let name = i.parameter.get_ref();
    let key = |k: &str| format!("[[uq.input]] '{name}' {k}");
    let Some(length) = &i.correlation_length else {
        for (v, k) in [
            (i.covariance.as_ref().map(Spanned::span), "covariance"),
            (i.modes.as_ref().map(Spanned::span), "modes"),
            (i.energy.as_ref().map(Spanned::span), "energy"),
        ] {
            if let Some(span) = v {
                let spanned = Spanned::new(span, ());
                return Err(at(
                    file,
                    &spanned,
                    &key(k),
                    "belongs to a random field, which needs correlation_length",
                ));
            }
        }
        return Ok(None);
    };
    let cells = if scalar { None } else { sim.element_cells(name) };
    let Some(cells) = cells else {
        return Err(at(
            file,
            length,
            &key("correlation_length"),
            format!(
                "'{name}' is not a per-element parameter: a random field varies cell by cell (thermal.k_elem.<group>, electrical.sigma_elem.<group>, mechanical.young_elem.<group>, hyperelastic.scale_elem.<group>)"
            ),
        ));
    };
    positive(file, &i.correlation_length, &key("correlation_length"))?;
    let covariance = match &i.covariance {
        None => Covariance::Exponential,
        Some(c) => Covariance::parse(c.get_ref()).ok_or_else(|| {
            at(
                file,
                c,
                &key("covariance"),
                format!("'{}': expected exponential or squared_exponential", c.get_ref()),
            )
        })?,
    };
    let n = cells.len();
    let modes = match &i.modes {
        None => DEFAULT_MODES.min(n),
        Some(m) if *m.get_ref() == 0 || *m.get_ref() > n => {
            return Err(at(
                file,
                m,
                &key("modes"),
                format!("{}: between 1 and the group's {n} cells", m.get_ref()),
            ));
        }
        Some(m) => *m.get_ref(),
    };
    let energy = match &i.energy {
        Some(e) if !(*e.get_ref() > 0.0 && *e.get_ref() <= 1.0) => {
            return Err(at(
                file,
                e,
                &key("energy"),
                format!("{} is not a share in (0, 1]", e.get_ref()),
            ));
        }
        e => e.as_ref().map(|e| *e.get_ref()),
    };
    // The factor's marginal: relative to the nominal field, by cv.
    for (v, k) in [(&i.mean, "mean"), (&i.std, "std"), (&i.lower, "lower"), (&i.upper, "upper")] {
        if let Some(v) = v {
            return Err(at(
                file,
                v,
                &key(k),
                "a random field scales the parameter's own values cell by cell: give its spread as cv (the factor's mean is 1)",
            ));
        }
    }
    let Some(cv) = &i.cv else {
        return Err(at(file, &i.distribution, &key("distribution"), "a random field needs cv"));
    };
    positive(file, &i.cv, &key("cv"))?;
    let distribution = match i.distribution.get_ref().as_str() {
        "normal" => Distribution::Normal { mean: 1.0, std: *cv.get_ref() },
        "lognormal" => Distribution::LogNormal { mean: 1.0, std: *cv.get_ref() },
        other => {
            return Err(at(
                file,
                &i.distribution,
                &key("distribution"),
                format!(
                    "'{other}': a random field is normal or lognormal (a positive quantity: lognormal)"
                ),
            ));
        }
    };
    let points: Vec<[f64; 3]> = cells.iter().map(|c| c.centroid).collect();
    let volumes: Vec<f64> = cells.iter().map(|c| c.volume).collect();
    let started = std::time::Instant::now();
    let mut kl = KarhunenLoeve::compute(&points, &volumes, covariance, *length.get_ref(), modes)
        .map_err(|e| at(file, length, &key("correlation_length"), e.to_string()))?;
    tracing::info!(
        "{name}: Karhunen–Loève expansion over {n} cells ({} quadrature points), {modes} modes in {:.2} s",
        kl.quadrature_points,
        started.elapsed().as_secs_f64()
    );
    if let Some(e) = energy {
        match kl.modes_for(e) {
            Some(m) => kl.truncate(m),
            None => tracing::warn!(
                "{name}: {modes} modes carry {:.1} % of the field's variance, less than energy = {e}; more modes (modes = …) or a longer correlation length reach it",
                100.0 * kl.captured(modes)
            ),
        }
    }
    if let Some(h) = kl.bin_size
        && h > 0.25 * length.get_ref()
    {
        tracing::warn!(
            "{name}: the group's {n} cells were binned at {h:e} for the field's eigenproblem, more than a quarter of the correlation length {:e}: the modes are coarse",
            length.get_ref()
        );
    }
    let field = FieldPlan {
        covariance,
        correlation_length: *length.get_ref(),
        cells: n,
        modes: kl.len(),
        energy,
        captured: kl.captured(kl.len()),
        eigenvalues: kl.eigenvalues.clone(),
        quadrature_points: kl.quadrature_points,
        bin_size: kl.bin_size,
    };
    Ok(Some((
        InputPlan { parameter: name.clone(), scalar: false, distribution, field: Some(field) },
        kl,
    )))
}

/// A checked study: the plan and what its samples need beside it.
pub struct Setup {
    /// The checked plan.
    pub plan: Plan,
    /// The nominal values of each vector input (empty for scalars).
    pub nominal: Vec<Vec<f64>>,
    /// Each input's random field (None but for random-field inputs).
    pub fields: Vec<Option<KarhunenLoeve>>,
}

/// Check a problem file's `[uq]` table against its set-up problem (one solve at the means
/// gives the quantities the outputs may name).
pub fn plan(file: &ProblemFile, sim: &mut Simulation) -> Result<Setup, UqError> {
    let Some(spec) = &file.spec.uq else {
        return Err(ProblemError::Invalid {
            file: file.path.clone(),
            message: "`gradfem uq` needs a [uq] table with [[uq.input]] entries (see docs/problem-file.md#uq)".into(),
        }
        .into());
    };
    if spec.inputs.is_empty() {
        return Err(at_table(file, "no [[uq.input]]: which parameters are uncertain?"));
    }
    let design = match &spec.design {
        None => DesignKind::MonteCarlo,
        Some(d) => DesignKind::parse(d.get_ref()).ok_or_else(|| {
            at(
                file,
                d,
                "[uq]",
                format!("design '{}': expected monte_carlo, latin_hypercube or sobol", d.get_ref()),
            )
        })?,
    };
    let known = sim.parameter_names();
    let mut inputs = Vec::new();
    let mut fields = Vec::new();
    for i in &spec.inputs {
        let name = i.parameter.get_ref();
        if inputs.iter().any(|p: &InputPlan| &p.parameter == name) {
            return Err(at(
                file,
                &i.parameter,
                "[[uq.input]] parameter",
                format!("'{name}' is uncertain twice"),
            ));
        }
        if !known.contains(name) {
            return Err(at(
                file,
                &i.parameter,
                "[[uq.input]] parameter",
                format!("unknown parameter '{name}'; the problem has: {}", known.join(", ")),
            ));
        }
        let values = sim.parameter(name)?;
        let scalar = sim.is_scalar_parameter(name).unwrap_or(values.len() == 1);
        if let Some((input, kl)) = random_field(file, sim, i, scalar)? {
            inputs.push(input);
            fields.push(Some(kl));
            continue;
        }
        let nominal = if scalar { values[0] } else { 1.0 };
        inputs.push(InputPlan {
            parameter: name.clone(),
            scalar,
            distribution: input_distribution(file, i, nominal)?,
            field: None,
        });
        fields.push(None);
    }
    let correlation = match &spec.correlation {
        None => None,
        Some(r) => {
            if r.get_ref().len() != inputs.len() {
                return Err(at(
                    file,
                    r,
                    "[uq] correlation",
                    format!("{} rows for {} inputs", r.get_ref().len(), inputs.len()),
                ));
            }
            for (k, input) in inputs.iter().enumerate() {
                let coupled = (0..inputs.len())
                    .find(|&j| j != k && r.get_ref()[k].get(j).is_some_and(|v| *v != 0.0));
                if let (Some(_), Some(j)) = (&input.field, coupled) {
                    return Err(at(
                        file,
                        r,
                        "[uq] correlation",
                        format!(
                            "row {} ('{}') correlates a random field with input {} ('{}'): a field's modes are independent of the other inputs (0 off the diagonal)",
                            k + 1,
                            input.parameter,
                            j + 1,
                            inputs[j].parameter
                        ),
                    ));
                }
            }
            Correlation::new(r.get_ref().clone()).map_err(|e| {
                let message = match e {
                    gradfem_uq::dist::DistError::Correlation(m) => m,
                    other => other.to_string(),
                };
                at(file, r, "[uq] correlation", message)
            })?;
            Some(r.get_ref().clone())
        }
    };
    // The outputs' names: the quantities of a solve at the means.
    let nominal = nominals(sim, &inputs)?;
    let available: Vec<String> = {
        set_inputs(sim, &inputs, &means(&inputs), &nominal, &fields)?;
        sim.quantities()?.into_keys().collect()
    };
    let mut outputs = Vec::new();
    for o in &spec.outputs {
        let q = o.quantity.get_ref();
        if !available.contains(q) {
            return Err(at(
                file,
                &o.quantity,
                "[[uq.output]] quantity",
                format!("unknown quantity '{q}'; the problem reports: {}", available.join(", ")),
            ));
        }
        if outputs.iter().any(|p: &OutputPlan| &p.quantity == q) {
            return Err(at(
                file,
                &o.quantity,
                "[[uq.output]] quantity",
                format!("'{q}' is followed twice"),
            ));
        }
        for (v, k) in [(o.upper, "upper"), (o.lower, "lower")] {
            if v.is_some_and(|v| !v.is_finite()) {
                return Err(at(
                    file,
                    &o.quantity,
                    &format!("[[uq.output]] '{q}' {k}"),
                    "must be a finite number",
                ));
            }
        }
        outputs.push(OutputPlan { quantity: q.clone(), upper: o.upper, lower: o.lower });
    }
    if outputs.is_empty() {
        outputs.push(OutputPlan { quantity: "objective".into(), upper: None, lower: None });
    }
    let output_named = |v: &Option<Spanned<String>>, key: &str| -> Result<String, UqError> {
        match v {
            None => Ok(outputs[0].quantity.clone()),
            Some(n) if outputs.iter().any(|o| &o.quantity == n.get_ref()) => {
                Ok(n.get_ref().clone())
            }
            Some(n) => Err(at(
                file,
                n,
                key,
                format!(
                    "'{}' is not a followed output ([[uq.output]]): {}",
                    n.get_ref(),
                    outputs.iter().map(|o| o.quantity.as_str()).collect::<Vec<_>>().join(", ")
                ),
            )),
        }
    };
    let batch = match &spec.batch {
        Some(b) if *b.get_ref() == 0 => {
            return Err(at(file, b, "[uq] batch", "must be at least 1"));
        }
        Some(b) => *b.get_ref(),
        None => 8,
    };
    let samples = match &spec.samples {
        Some(s) if *s.get_ref() == 0 => {
            return Err(at(file, s, "[uq] samples", "must be at least 1"));
        }
        Some(s) => Some(*s.get_ref()),
        None => None,
    };
    let mut accept = None;
    let stop = match &spec.stop {
        None => StopRule::Count { samples: samples.unwrap_or(SEED_SAMPLES) },
        Some(s) => match s.rule.get_ref().as_str() {
            "count" => StopRule::Count { samples: samples.unwrap_or(SEED_SAMPLES) },
            "seed_check" => {
                accept = Some(AcceptPlan {
                    output: output_named(&s.output, "[uq.stop] output")?,
                    fraction: SEED_FRACTION,
                });
                StopRule::Count { samples: samples.unwrap_or(SEED_SAMPLES) }
            }
            "relative_se" => {
                let Some(target) = &s.target else {
                    return Err(at(
                        file,
                        &s.rule,
                        "[uq.stop] target",
                        "the relative_se rule needs a target (e.g. 0.01)",
                    ));
                };
                positive(file, &s.target, "[uq.stop] target")?;
                if let Some(n) = &spec.samples {
                    return Err(at(
                        file,
                        n,
                        "[uq] samples",
                        "the relative_se rule takes [uq.stop] max_samples instead",
                    ));
                }
                let max_samples = s.max_samples.as_ref().map_or(1024, |m| *m.get_ref());
                let min_samples = s.min_samples.as_ref().map_or(2 * batch, |m| *m.get_ref());
                if max_samples == 0 || min_samples > max_samples {
                    let message = format!(
                        "max_samples = {max_samples} must be at least 1 and at least min_samples = {min_samples}"
                    );
                    return Err(match &s.max_samples {
                        Some(m) => at(file, m, "[uq.stop] max_samples", message),
                        None => at(file, &s.rule, "[uq.stop] max_samples", message),
                    });
                }
                StopRule::RelativeSe {
                    output: output_named(&s.output, "[uq.stop] output")?,
                    target: *target.get_ref(),
                    min_samples,
                    max_samples,
                }
            }
            other => {
                return Err(at(
                    file,
                    &s.rule,
                    "[uq.stop]",
                    format!("rule '{other}': expected count, relative_se or seed_check"),
                ));
            }
        },
    };
    if let Some(a) = &spec.accept {
        positive(file, &a.fraction, "[uq.accept] fraction")?;
        accept = Some(AcceptPlan {
            output: output_named(&a.output, "[uq.accept] output")?,
            fraction: a.fraction.as_ref().map_or(SEED_FRACTION, |f| *f.get_ref()),
        });
    }
    let replicates = match (&spec.replicates, design) {
        (Some(r), DesignKind::Sobol) if *r.get_ref() == 0 => {
            return Err(at(file, r, "[uq] replicates", "must be at least 1"));
        }
        (Some(r), DesignKind::Sobol) => *r.get_ref(),
        (Some(r), _) => {
            return Err(at(file, r, "[uq] replicates", "only the sobol design has replicates"));
        }
        (None, DesignKind::Sobol) => 4,
        (None, _) => 1,
    };
    let quantiles = match &spec.quantiles {
        None => DEFAULT_QUANTILES.to_vec(),
        Some(q) => {
            if let Some(p) = q.get_ref().iter().find(|p| !(**p > 0.0 && **p < 1.0)) {
                return Err(at(
                    file,
                    q,
                    "[uq] quantiles",
                    format!("{p} is not a probability in (0, 1)"),
                ));
            }
            q.get_ref().clone()
        }
    };
    let plan = Plan {
        title: file.spec.title.clone(),
        problem: file.path.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned()),
        design: design.name().into(),
        seed: spec.seed,
        replicates,
        batch,
        inputs,
        correlation,
        outputs,
        stop,
        accept,
        quantiles,
        sensitivities: spec.sensitivities,
    };
    plan.design().map_err(|e| {
        let fields = plan.inputs.iter().filter(|i| i.field.is_some()).count();
        let why = if fields > 0 {
            format!(
                "{e} (the design has {} coordinates: one per input and one per mode of the {fields} random field(s))",
                plan.dimension()
            )
        } else {
            e.to_string()
        };
        at_table(file, why)
    })?;
    Ok(Setup { plan, nominal, fields })
}

/// The coordinates' means: each scalar or scaled input's mean, a field's modes at 0 (the
/// field at its median).
fn means(inputs: &[InputPlan]) -> Vec<f64> {
    inputs
        .iter()
        .flat_map(|i| match &i.field {
            None => vec![i.distribution.mean()],
            Some(f) => vec![0.0; f.modes],
        })
        .collect()
}

/// The nominal values of each vector input (empty for scalars).
fn nominals(sim: &mut Simulation, inputs: &[InputPlan]) -> Result<Vec<Vec<f64>>, ApiError> {
    inputs
        .iter()
        .map(|i| if i.scalar { Ok(Vec::new()) } else { sim.parameter(&i.parameter) })
        .collect()
}

/// Set every input from the coordinates x: a scalar to its value, a vector to its nominal
/// values times the factor, a random field cell by cell.
fn set_inputs(
    sim: &mut Simulation,
    inputs: &[InputPlan],
    x: &[f64],
    nominal: &[Vec<f64>],
    fields: &[Option<KarhunenLoeve>],
) -> Result<(), ApiError> {
    let mut at = 0;
    for ((i, nom), kl) in inputs.iter().zip(nominal).zip(fields) {
        let xs = &x[at..at + i.dims()];
        at += i.dims();
        match kl {
            _ if i.scalar => sim.set_parameter(&i.parameter, xs[0])?,
            None => {
                let scaled: Vec<f64> = nom.iter().map(|n| n * xs[0]).collect();
                sim.set_parameter_values(&i.parameter, &scaled)?;
            }
            Some(kl) => {
                let g = kl.field(xs);
                let values: Vec<f64> = nom
                    .iter()
                    .zip(&g)
                    .map(|(n, g)| n * i.distribution.from_standard_normal(*g))
                    .collect();
                sim.set_parameter_values(&i.parameter, &values)?;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Samples and parts.

/// One sample: its inputs and either its outputs or the error that stopped it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleRecord {
    /// The sample's index.
    pub index: usize,
    /// The input values (factors for vector inputs), in input order.
    pub inputs: Vec<f64>,
    /// The outputs, in output order (None when the sample failed).
    pub outputs: Option<Vec<f64>>,
    /// Why the sample failed.
    pub error: Option<String>,
}

/// One chunk of samples: `parts/chunk-NNNNNN.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// The chunk's number.
    pub chunk: usize,
    /// Its samples, in index order.
    pub samples: Vec<SampleRecord>,
}

/// The solve and gradients at the means: `parts/mean.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeanPart {
    /// The inputs' means.
    pub inputs: Vec<f64>,
    /// Each output at the means.
    pub outputs: Vec<f64>,
    /// d output / d input per output (None where the output is not differentiable).
    pub gradients: Vec<Option<Vec<f64>>>,
    /// Why an output has no gradient.
    pub notes: Vec<Option<String>>,
}

/// A study ready to run samples: the plan, the problem and its design.
pub struct Study {
    /// The checked plan.
    pub plan: Plan,
    file: ProblemFile,
    sim: Simulation,
    design: Design,
    coordinates: Vec<Distribution>,
    correlation: Option<Correlation>,
    nominal: Vec<Vec<f64>>,
    fields: Vec<Option<KarhunenLoeve>>,
    start: Vec<Vec<f64>>,
}

impl Study {
    /// Set up the problem of `file` and check its `[uq]` table.
    pub fn new(file: ProblemFile) -> Result<Self, UqError> {
        let mut sim = Simulation::from_problem_file(file.clone())?;
        // Every sample's solve starts here: the start before any solve.
        let start = sim.problem().warm_starts();
        let Setup { plan, nominal, fields } = plan(&file, &mut sim)?;
        let design = plan.design()?;
        let coordinates = plan.coordinates().into_iter().map(|(_, d)| d).collect();
        let correlation = match plan.coordinate_correlation() {
            Some(r) => Some(Correlation::new(r).map_err(|e| UqError::Parts(e.to_string()))?),
            None => None,
        };
        Ok(Study { plan, file, sim, design, coordinates, correlation, nominal, fields, start })
    }

    /// The coordinates of sample i: the input values (factors for scaled vectors, mode
    /// coefficients for random fields).
    pub fn inputs_of(&self, i: usize) -> Vec<f64> {
        transform(&self.design.point(i), &self.coordinates, self.correlation.as_ref())
    }

    /// The random field of input k, if it is one.
    pub fn field(&self, k: usize) -> Option<&KarhunenLoeve> {
        self.fields.get(k)?.as_ref()
    }

    /// The followed outputs at coordinates x (in [`Plan::coordinates`] order), from the
    /// problem's start.
    pub fn evaluate(&mut self, x: &[f64]) -> Result<Vec<f64>, String> {
        if x.len() != self.plan.dimension() {
            return Err(format!(
                "{} coordinates for a design of {}",
                x.len(),
                self.plan.dimension()
            ));
        }
        set_inputs(&mut self.sim, &self.plan.inputs, x, &self.nominal, &self.fields)
            .map_err(|e| e.to_string())?;
        self.sim.problem().set_warm_starts(self.start.clone());
        let q = self.sim.quantities().map_err(|e| e.to_string())?;
        self.plan
            .outputs
            .iter()
            .map(|o| match q.get(&o.quantity) {
                Some(v) if v.is_finite() => Ok(*v),
                Some(v) => Err(format!("{} = {v} is not finite", o.quantity)),
                None => Err(format!("the solution reports no {}", o.quantity)),
            })
            .collect()
    }

    /// Run sample i: a failure (an error, or a panic, after which the problem is set up
    /// again) is recorded with its message, not returned.
    pub fn sample(&mut self, i: usize) -> SampleRecord {
        let x = self.inputs_of(i);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.evaluate(&x)));
        let r = match r {
            Ok(r) => r,
            Err(p) => {
                let what = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into());
                if let Ok(sim) = Simulation::from_problem_file(self.file.clone()) {
                    self.sim = sim;
                }
                Err(format!("panicked: {what}"))
            }
        };
        match r {
            Ok(out) => SampleRecord { index: i, inputs: x, outputs: Some(out), error: None },
            Err(e) => SampleRecord { index: i, inputs: x, outputs: None, error: Some(e) },
        }
    }

    /// Run the samples of chunk c; `each(index, record)` after each.
    pub fn chunk(&mut self, c: usize, mut each: impl FnMut(&SampleRecord)) -> Chunk {
        let samples = self
            .plan
            .chunk_range(c)
            .map(|i| {
                let r = self.sample(i);
                each(&r);
                r
            })
            .collect();
        Chunk { chunk: c, samples }
    }

    /// The solve at the means and the gradient of each differentiable output.
    pub fn mean_part(&mut self) -> Result<MeanPart, UqError> {
        let x = means(&self.plan.inputs);
        set_inputs(&mut self.sim, &self.plan.inputs, &x, &self.nominal, &self.fields)?;
        self.sim.problem().set_warm_starts(self.start.clone());
        let q = self.sim.quantities()?;
        let outputs: Vec<f64> = self
            .plan
            .outputs
            .iter()
            .map(|o| q.get(&o.quantity).copied().unwrap_or(f64::NAN))
            .collect();
        let differentiable = self.sim.differentiable_quantities();
        let mut gradients = Vec::new();
        let mut notes = Vec::new();
        for o in &self.plan.outputs {
            if !self.plan.sensitivities {
                gradients.push(None);
                notes.push(Some("sensitivities = false".to_string()));
                continue;
            }
            let g = if o.quantity == "objective" {
                Some(self.sim.gradient())
            } else if differentiable.contains(&o.quantity) {
                Some(self.sim.vjp(&Cotangent::new().quantity(&o.quantity, 1.0)))
            } else {
                None
            };
            match g {
                None => {
                    gradients.push(None);
                    notes.push(Some(format!(
                        "{} is not differentiable by the adjoint (differentiable: {}; an [[objective]] such as a peak or average term can stand for it)",
                        o.quantity,
                        differentiable.join(", ")
                    )));
                }
                Some(Err(e)) => {
                    gradients.push(None);
                    notes.push(Some(format!("gradient failed: {e}")));
                }
                Some(Ok(g)) => {
                    gradients.push(Some(self.coordinate_gradient(&g)));
                    notes.push(None);
                }
            }
        }
        Ok(MeanPart { inputs: x, outputs, gradients, notes })
    }

    /// d output / d coordinate at the means from the gradient by parameter.
    fn coordinate_gradient(&self, g: &crate::api::Gradients) -> Vec<f64> {
        let mut out = Vec::with_capacity(self.plan.dimension());
        for ((i, nom), kl) in self.plan.inputs.iter().zip(&self.nominal).zip(&self.fields) {
            let d = g.get(&i.parameter).unwrap_or(&[]);
            let dot = |w: &mut dyn Iterator<Item = f64>| {
                let mut s = 0.0;
                for (a, b) in d.iter().zip(w) {
                    s += a * b;
                }
                s
            };
            match kl {
                _ if i.scalar => out.push(d.first().copied().unwrap_or(0.0)),
                // d/ds J(s · nominal) = Σ_e g_e nominal_e.
                None => out.push(dot(&mut nom.iter().copied())),
                // d/dξ_k J(nominal · F⁻¹(Φ(g(ξ)))) at ξ = 0: Σ_e g_e nominal_e F'(0) √λ_k φ_k(e).
                Some(kl) => {
                    let slope = i.distribution.standard_normal_slope(0.0).unwrap_or(0.0);
                    for k in 0..kl.len() {
                        let mode = kl.scaled_mode(k);
                        out.push(dot(&mut nom.iter().zip(&mode).map(|(n, m)| n * slope * m)));
                    }
                }
            }
        }
        out
    }
}

/// The `parts/` directory of a study's output directory.
pub struct Parts {
    /// `<output>/parts`.
    pub dir: PathBuf,
}

fn to_json<T: Serialize>(v: &T) -> Vec<u8> {
    let mut s = serde_json::to_vec_pretty(v).expect("serializable");
    s.push(b'\n');
    s
}

fn read_json<T: for<'a> Deserialize<'a>>(path: &Path) -> Result<T, UqError> {
    let text = std::fs::read(path).map_err(|e| io_err(path, e))?;
    serde_json::from_slice(&text)
        .map_err(|e| io_err(path, format!("not a part of a gradfem uq run: {e}")))
}

impl Parts {
    /// The parts of the output directory `out`.
    pub fn of(out: &Path) -> Self {
        Parts { dir: out.join("parts") }
    }

    /// Create the directory and write `plan.json`, or check that the one there is the same
    /// plan (a rerun resumes only the same study).
    pub fn start(&self, plan: &Plan) -> Result<(), UqError> {
        // The result replaces the output directory as a whole (an output set), which cannot
        // be the current directory: refused now rather than after the samples.
        if let Some(out) = self.dir.parent()
            && let (Ok(cwd), Ok(target)) = (
                std::env::current_dir().and_then(std::fs::canonicalize),
                std::fs::canonicalize(if out.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    out
                }),
            )
            && cwd.starts_with(&target)
        {
            return Err(io_err(
                out,
                "the output directory is the current directory or holds it; the results replace \
                 their directory as a whole, so name a directory of its own, e.g. `-o results`",
            ));
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| io_err(&self.dir, e))?;
        let path = self.dir.join("plan.json");
        if path.exists() {
            let old: Plan = read_json(&path)?;
            if &old != plan {
                return Err(UqError::Parts(format!(
                    "{} holds parts of another study (its plan differs: problem, [uq] table or seed); remove {} or choose another output directory (-o)",
                    self.dir.display(),
                    self.dir.display()
                )));
            }
            return Ok(());
        }
        write(&path, &to_json(plan))
    }

    /// The plan of these parts.
    pub fn plan(&self) -> Result<Plan, UqError> {
        let path = self.dir.join("plan.json");
        if !path.exists() {
            return Err(UqError::Parts(format!(
                "{} has no plan.json: not the parts of a gradfem uq run",
                self.dir.display()
            )));
        }
        read_json(&path)
    }

    fn chunk_path(&self, c: usize) -> PathBuf {
        self.dir.join(format!("chunk-{c:06}.json"))
    }

    /// Whether chunk c is written.
    pub fn has_chunk(&self, c: usize) -> bool {
        self.chunk_path(c).is_file()
    }

    /// Write chunk c atomically.
    pub fn write_chunk(&self, chunk: &Chunk) -> Result<(), UqError> {
        write(&self.chunk_path(chunk.chunk), &to_json(chunk))
    }

    /// The serialized bytes of a chunk (what ranks send to rank 0).
    pub fn chunk_bytes(chunk: &Chunk) -> Vec<u8> {
        to_json(chunk)
    }

    /// Write chunk bytes received from another rank (checked to be chunk c).
    pub fn write_chunk_bytes(&self, c: usize, bytes: &[u8]) -> Result<(), UqError> {
        let chunk: Chunk = serde_json::from_slice(bytes)
            .map_err(|e| UqError::Parts(format!("chunk {c} received damaged: {e}")))?;
        if chunk.chunk != c {
            return Err(UqError::Parts(format!("received chunk {} for chunk {c}", chunk.chunk)));
        }
        write(&self.chunk_path(c), bytes)
    }

    /// Read chunk c, checked against the plan.
    pub fn read_chunk(&self, plan: &Plan, c: usize) -> Result<Chunk, UqError> {
        let path = self.chunk_path(c);
        let chunk: Chunk = read_json(&path)?;
        let range = plan.chunk_range(c);
        let ok = chunk.chunk == c
            && chunk.samples.len() == range.len()
            && chunk.samples.iter().zip(range).all(|(s, i)| {
                s.index == i
                    && s.inputs.len() == plan.dimension()
                    && s.outputs.as_ref().is_none_or(|o| o.len() == plan.outputs.len())
                    && (s.outputs.is_some() != s.error.is_some())
            });
        if !ok {
            return Err(io_err(
                &path,
                "does not hold the samples of its chunk (damaged, or from another study)",
            ));
        }
        Ok(chunk)
    }

    /// Write the part at the means.
    pub fn write_mean(&self, m: &MeanPart) -> Result<(), UqError> {
        write(&self.dir.join("mean.json"), &to_json(m))
    }

    /// Whether the part at the means is written.
    pub fn has_mean(&self) -> bool {
        self.dir.join("mean.json").is_file()
    }

    /// Read the part at the means.
    pub fn read_mean(&self) -> Result<MeanPart, UqError> {
        read_json(&self.dir.join("mean.json"))
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), UqError> {
    gradfem_io::atomic::write_bytes_atomic(path, bytes).map_err(|e| io_err(path, e))
}

// ---------------------------------------------------------------------------------------------
// The reduction.

/// A failed sample in the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Failure {
    /// Its index.
    pub index: usize,
    /// Why it failed.
    pub error: String,
}

/// The linearized variance of an output.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Linearized {
    /// The output at the means.
    pub value_at_mean: f64,
    /// d output / d coordinate, by coordinate (an input, or a mode `parameter[ξk]` of a
    /// random field).
    pub gradient: BTreeMap<String, f64>,
    /// gᵀ C g, √ of it and each coordinate's share.
    #[serde(flatten)]
    pub shares: VarianceShares,
    /// Each input's share by name (a random field's modes summed).
    pub share_by_input: BTreeMap<String, f64>,
}

/// One output's statistics.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutputReport {
    /// The quantity.
    pub quantity: String,
    /// Mean, std, quantiles with standard errors.
    #[serde(flatten)]
    pub summary: Summary,
    /// P(q > upper).
    pub probability_above: Option<Exceedance>,
    /// P(q < lower).
    pub probability_below: Option<Exceedance>,
    /// The first-order variance from the gradient at the means.
    pub linearized: Option<Linearized>,
    /// Why there is no linearized variance.
    pub note: Option<String>,
}

/// The running mean and its standard error after each chunk.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConvergencePoint {
    /// Samples run.
    pub samples: usize,
    /// Running mean of each output.
    pub mean: Vec<f64>,
    /// Its standard error.
    pub se: Vec<f64>,
}

/// An input in the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InputReport {
    /// The parameter.
    pub parameter: String,
    /// Its distribution.
    pub distribution: Distribution,
    /// True when the sampled value scales a vector parameter's nominal values.
    pub factor: bool,
    /// The distribution's mean.
    pub mean: f64,
    /// The distribution's standard deviation.
    pub std: f64,
    /// A random field's expansion (the distribution is each cell's factor).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<FieldPlan>,
}

/// `uq.json`: the result of a study, the same bytes however it was computed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// The problem's title.
    pub title: String,
    /// The problem file's name.
    pub problem: String,
    /// The design.
    pub design: String,
    /// Its seed.
    pub seed: u64,
    /// Sobol replicates.
    pub replicates: usize,
    /// The stopping rule.
    pub stop: StopRule,
    /// Whether the rule was met (a relative SE target can end at max_samples unmet).
    pub stop_met: bool,
    /// Samples run.
    pub samples: usize,
    /// Samples that gave outputs.
    pub samples_ok: usize,
    /// The failed samples.
    pub failures: Vec<Failure>,
    /// The inputs.
    pub inputs: Vec<InputReport>,
    /// Their correlation.
    pub correlation: Option<Vec<Vec<f64>>>,
    /// Each output's statistics.
    pub outputs: Vec<OutputReport>,
    /// The acceptance rule's verdict.
    pub acceptance: Option<Acceptance>,
    /// The running means after each chunk.
    pub convergence: Vec<ConvergencePoint>,
}

/// The statistics of the successful samples among `samples` for output k.
fn output_values(samples: &[SampleRecord], k: usize) -> (Vec<f64>, Vec<usize>) {
    samples.iter().filter_map(|s| s.outputs.as_ref().map(|o| (o[k], s.index))).unzip()
}

fn summarize(plan: &Plan, samples: &[SampleRecord], k: usize) -> Summary {
    let (v, idx) = output_values(samples, k);
    let reps: Vec<usize> = idx.iter().map(|i| i % plan.replicates).collect();
    stats::summarize(&v, &plan.quantiles, Some((&reps, plan.replicates)))
}

/// Whether the stopping rule is met by these samples (the first n, in order).
pub fn stop_met(plan: &Plan, samples: &[SampleRecord]) -> bool {
    let followed = match &plan.stop {
        StopRule::RelativeSe { output, .. } => {
            let s = summarize(plan, samples, plan.output_index(output));
            (s.n >= 2).then_some(s)
        }
        StopRule::Count { .. } => None,
    };
    plan.stop.met(samples.len(), followed.as_ref())
}

/// Read the chunks in order up to where the stopping rule is met; returns the samples and
/// whether the rule was met (false only at max_samples).
pub fn collect(parts: &Parts, plan: &Plan) -> Result<(Vec<SampleRecord>, bool), UqError> {
    let mut samples = Vec::new();
    let missing: Vec<usize> = (0..plan.chunks()).filter(|&c| !parts.has_chunk(c)).collect();
    for c in 0..plan.chunks() {
        if !parts.has_chunk(c) {
            let shown: Vec<String> = missing.iter().take(10).map(|c| c.to_string()).collect();
            return Err(UqError::Parts(format!(
                "{}: chunk(s) {}{} are not written yet (samples {}…): run the shards that own them (chunk c belongs to shard c mod n) or the study itself, which resumes",
                parts.dir.display(),
                shown.join(", "),
                if missing.len() > 10 { ", …" } else { "" },
                plan.chunk_range(c).start
            )));
        }
        samples.extend(parts.read_chunk(plan, c)?.samples);
        if stop_met(plan, &samples) {
            let met = match &plan.stop {
                StopRule::Count { .. } => true,
                StopRule::RelativeSe { output, target, .. } => {
                    let s = summarize(plan, &samples, plan.output_index(output));
                    s.mean != 0.0 && s.se_mean / s.mean.abs() <= *target
                }
            };
            return Ok((samples, met));
        }
    }
    Ok((samples, false))
}

/// The report of these samples.
pub fn report(plan: &Plan, samples: &[SampleRecord], met: bool, mean: Option<&MeanPart>) -> Report {
    let (names, coordinates): (Vec<String>, Vec<Distribution>) =
        plan.coordinates().into_iter().unzip();
    let sigma: Vec<f64> = coordinates.iter().map(Distribution::std).collect();
    let correlation = plan.coordinate_correlation();
    let outputs = plan
        .outputs
        .iter()
        .enumerate()
        .map(|(k, o)| {
            let (v, _) = output_values(samples, k);
            let summary = summarize(plan, samples, k);
            let (linearized, note) = match mean {
                None => (None, Some("sensitivities = false".to_string())),
                Some(m) => match &m.gradients[k] {
                    Some(g) => {
                        let shares = variance_shares(g, &sigma, correlation.as_deref());
                        let share_by_input = plan
                            .inputs
                            .iter()
                            .map(|i| i.parameter.clone())
                            .zip(plan.per_input(&shares.shares))
                            .collect();
                        (
                            Some(Linearized {
                                value_at_mean: m.outputs[k],
                                gradient: names.iter().cloned().zip(g.iter().copied()).collect(),
                                shares,
                                share_by_input,
                            }),
                            None,
                        )
                    }
                    None => (None, m.notes[k].clone()),
                },
            };
            OutputReport {
                quantity: o.quantity.clone(),
                summary,
                probability_above: o
                    .upper
                    .filter(|_| !v.is_empty())
                    .map(|u| stats::exceedance(&v, u, true)),
                probability_below: o
                    .lower
                    .filter(|_| !v.is_empty())
                    .map(|l| stats::exceedance(&v, l, false)),
                linearized,
                note,
            }
        })
        .collect::<Vec<_>>();
    let acceptance = plan.accept.as_ref().map(|a| {
        let k = plan.output_index(&a.output);
        stats::acceptance(&a.output, a.fraction, &outputs[k].summary)
    });
    let convergence = (1..=samples.len().div_ceil(plan.batch))
        .map(|c| {
            let n = (c * plan.batch).min(samples.len());
            let prefix = &samples[..n];
            let s: Vec<Summary> =
                (0..plan.outputs.len()).map(|k| summarize(plan, prefix, k)).collect();
            ConvergencePoint {
                samples: n,
                mean: s.iter().map(|s| s.mean).collect(),
                se: s.iter().map(|s| s.se_mean).collect(),
            }
        })
        .collect();
    Report {
        title: plan.title.clone(),
        problem: plan.problem.clone(),
        design: plan.design.clone(),
        seed: plan.seed,
        replicates: plan.replicates,
        stop: plan.stop.clone(),
        stop_met: met,
        samples: samples.len(),
        samples_ok: samples.iter().filter(|s| s.outputs.is_some()).count(),
        failures: samples
            .iter()
            .filter_map(|s| s.error.as_ref().map(|e| Failure { index: s.index, error: e.clone() }))
            .collect(),
        inputs: plan
            .inputs
            .iter()
            .map(|i| InputReport {
                parameter: i.parameter.clone(),
                distribution: i.distribution.clone(),
                factor: !i.scalar,
                mean: i.distribution.mean(),
                std: i.distribution.std(),
                field: i.field.clone(),
            })
            .collect(),
        correlation: plan.correlation.clone(),
        outputs,
        acceptance,
        convergence,
    }
}

/// Every sample as JSON: index, inputs and outputs by name, or the error.
fn samples_json(plan: &Plan, samples: &[SampleRecord]) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = samples
        .iter()
        .map(|s| {
            let mut at = 0;
            let inputs: serde_json::Map<String, serde_json::Value> = plan
                .inputs
                .iter()
                .map(|i| {
                    let xs = &s.inputs[at..at + i.dims()];
                    at += i.dims();
                    let v = match i.field {
                        None => xs[0].into(),
                        Some(_) => xs.to_vec().into(),
                    };
                    (i.parameter.clone(), v)
                })
                .collect();
            let outputs = s.outputs.as_ref().map(|o| {
                plan.outputs
                    .iter()
                    .zip(o)
                    .map(|(q, v)| (q.quantity.clone(), (*v).into()))
                    .collect::<serde_json::Map<String, serde_json::Value>>()
            });
            serde_json::json!({
                "index": s.index,
                "ok": s.outputs.is_some(),
                "inputs": inputs,
                "outputs": outputs,
                "error": s.error,
            })
        })
        .collect();
    serde_json::json!({ "samples": rows })
}

/// Every sample as CSV: index, ok, inputs, outputs (empty for a failed sample), error.
fn samples_csv(plan: &Plan, samples: &[SampleRecord]) -> String {
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let mut out = String::from("index,ok");
    for (name, _) in plan.coordinates() {
        out.push_str(&format!(",{name}"));
    }
    for o in &plan.outputs {
        out.push_str(&format!(",{}", o.quantity));
    }
    out.push_str(",error\n");
    for s in samples {
        out.push_str(&format!("{},{}", s.index, u8::from(s.outputs.is_some())));
        for v in &s.inputs {
            out.push_str(&format!(",{v:e}"));
        }
        match &s.outputs {
            Some(o) => o.iter().for_each(|v| out.push_str(&format!(",{v:e}"))),
            None => plan.outputs.iter().for_each(|_| out.push(',')),
        }
        out.push_str(&format!(",{}\n", s.error.as_deref().map(quote).unwrap_or_default()));
    }
    out
}

/// What [`reduce`] wrote.
pub struct Reduced {
    /// The report.
    pub report: Report,
    /// `uq.json`.
    pub json: PathBuf,
    /// `samples.json`.
    pub samples_json: PathBuf,
    /// `samples.csv`.
    pub samples_csv: PathBuf,
    /// `convergence.png`, or why it could not be drawn.
    pub png: Result<PathBuf, String>,
}

/// Reduce the parts of the output directory `out` into `uq.json`, `samples.json`,
/// `samples.csv` and `convergence.png`, which replace the previous ones as one output set
/// (`gradfem_io::output_set`; `parts/` and `logs/` are carried over).
pub fn reduce(out: &Path) -> Result<Reduced, UqError> {
    let parts = Parts::of(out);
    let plan = parts.plan()?;
    let (samples, met) = collect(&parts, &plan)?;
    let mean = if plan.sensitivities {
        if !parts.has_mean() {
            return Err(UqError::Parts(format!(
                "{}: mean.json (the gradient at the means) is not written yet: shard 0 writes it",
                parts.dir.display()
            )));
        }
        let m = parts.read_mean()?;
        if m.gradients.len() != plan.outputs.len() || m.outputs.len() != plan.outputs.len() {
            return Err(io_err(&parts.dir.join("mean.json"), "does not fit the plan's outputs"));
        }
        Some(m)
    } else {
        None
    };
    let report = report(&plan, &samples, met, mean.as_ref());
    // The four files replace the previous ones as one set (gradfem_io::output_set): written
    // into a staging directory, then swapped in with the parts and logs carried over.
    let set = gradfem_io::output_set::OutputSet::begin(out).map_err(|e| io_err(out, e))?;
    let stage = set.dir().to_path_buf();
    write(&stage.join("uq.json"), &to_json(&report))?;
    write(&stage.join("samples.json"), &to_json(&samples_json(&plan, &samples)))?;
    write(&stage.join("samples.csv"), samples_csv(&plan, &samples).as_bytes())?;
    let running = crate::uq_plot::Running {
        title: &report.title,
        design: &report.design,
        names: report.outputs.iter().map(|o| o.quantity.as_str()).collect(),
        samples: report.convergence.iter().map(|p| p.samples).collect(),
        mean: report.convergence.iter().map(|p| p.mean.as_slice()).collect(),
        se: report.convergence.iter().map(|p| p.se.as_slice()).collect(),
    };
    let png = out.join("convergence.png");
    let drawn = crate::uq_plot::convergence(&running, &stage.join("convergence.png"))
        .map_err(|e| format!("{}: {e}", png.display()));
    if drawn.is_err() {
        let _ = std::fs::remove_file(stage.join("convergence.png"));
    }
    set.commit().map_err(|e| io_err(out, e))?;
    let png = drawn.map(|()| png);
    let (json, samples_json_path, csv) =
        (out.join("uq.json"), out.join("samples.json"), out.join("samples.csv"));
    Ok(Reduced { report, json, samples_json: samples_json_path, samples_csv: csv, png })
}

// ---------------------------------------------------------------------------------------------
// Running.

/// Which part of the study this process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// 0-based shard.
    pub index: usize,
    /// Shards in all.
    pub count: usize,
}

impl Shard {
    /// The whole study.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// `i/n` with 0 ≤ i < n.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (i, n) =
            s.split_once('/').ok_or_else(|| format!("--shard '{s}': expected i/n, e.g. 0/4"))?;
        let (i, n): (usize, usize) = (
            i.trim().parse().map_err(|_| format!("--shard '{s}': '{i}' is not a shard number"))?,
            n.trim().parse().map_err(|_| format!("--shard '{s}': '{n}' is not a shard count"))?,
        );
        if n == 0 || i >= n {
            return Err(format!("--shard {i}/{n}: the shard must be in 0..{n}"));
        }
        Ok(Shard { index: i, count: n })
    }

    /// Whether chunk c is this shard's.
    pub fn owns(&self, c: usize) -> bool {
        c % self.count == self.index
    }
}

/// What one process did.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    /// Chunks computed now.
    pub computed: usize,
    /// Chunks found written (resumed).
    pub resumed: usize,
    /// Samples run now.
    pub samples: usize,
    /// Seconds in samples.
    pub seconds: f64,
}

/// A line of a per-process log.
pub struct Log {
    file: Option<std::fs::File>,
}

impl Log {
    /// `<out>/logs/<name>.log`, appended to (no log when it cannot be opened).
    pub fn open(out: &Path, name: &str) -> Self {
        let dir = out.join("logs");
        let file = std::fs::create_dir_all(&dir).ok().and_then(|()| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(format!("{name}.log")))
                .ok()
        });
        Log { file }
    }

    /// Write one line.
    pub fn line(&mut self, text: &str) {
        if let Some(f) = &mut self.file {
            use std::io::Write;
            let _ = writeln!(f, "{text}");
        }
    }
}

/// Run this shard's chunks (the whole study for [`Shard::ALL`]) into `out/parts`, resuming
/// from the chunks written; an unsharded run stops at the first chunk boundary where the
/// stopping rule is met, a shard computes all its chunks up to the rule's most samples. The
/// part at the means is computed by shard 0. `progress(done, total, record)` after each
/// sample.
pub fn run(
    study: &mut Study,
    out: &Path,
    shard: Shard,
    log: &mut Log,
    mut progress: impl FnMut(&SampleRecord),
) -> Result<RunStats, UqError> {
    let parts = Parts::of(out);
    parts.start(&study.plan)?;
    let mut stats = RunStats::default();
    let started = std::time::Instant::now();
    // The unsharded run follows the samples in order to stop where the reduction will.
    let mut so_far: Vec<SampleRecord> = Vec::new();
    for c in 0..study.plan.chunks() {
        if !shard.owns(c) {
            continue;
        }
        let chunk = if parts.has_chunk(c) {
            stats.resumed += 1;
            log.line(&format!("chunk {c}: already written, skipped"));
            parts.read_chunk(&study.plan, c)?
        } else {
            let t = std::time::Instant::now();
            let chunk = study.chunk(c, |r| {
                progress(r);
                log.line(&sample_line(r));
            });
            stats.samples += chunk.samples.len();
            parts.write_chunk(&chunk)?;
            stats.computed += 1;
            log.line(&format!("chunk {c}: written ({:.3} s)", t.elapsed().as_secs_f64()));
            chunk
        };
        if shard.count == 1 {
            so_far.extend(chunk.samples);
            if stop_met(&study.plan, &so_far) {
                break;
            }
        }
    }
    if shard.index == 0 && study.plan.sensitivities && !parts.has_mean() {
        let m = study.mean_part()?;
        parts.write_mean(&m)?;
        log.line("mean.json: written (gradient at the means)");
    }
    stats.seconds = started.elapsed().as_secs_f64();
    Ok(stats)
}

/// One log line for a sample.
pub fn sample_line(r: &SampleRecord) -> String {
    match (&r.outputs, &r.error) {
        (Some(o), _) => format!("sample {}: ok {:?}", r.index, o),
        (None, Some(e)) => format!("sample {}: FAILED: {e}", r.index),
        (None, None) => format!("sample {}: no outputs", r.index),
    }
}

/// The samples this shard has still to run at most (its chunks not written yet), for the
/// progress bar.
pub fn pending(study: &Study, out: &Path, shard: Shard) -> usize {
    let parts = Parts::of(out);
    (0..study.plan.chunks())
        .filter(|&c| shard.owns(c) && !parts.has_chunk(c))
        .map(|c| study.plan.chunk_range(c).len())
        .sum()
}
