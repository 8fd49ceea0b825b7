//! The `[uq]` table of problem files, as parsed (checked by [`crate::uq::plan`]; see
//! `docs/problem-file.md#uq`).

use serde::{Deserialize, Serialize};
use toml::Spanned;

/// `[uq]`: the uncertain inputs, the outputs followed, the design and the stopping rule.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UqSpec {
    /// `monte_carlo` (default), `latin_hypercube` or `sobol`.
    pub design: Option<Spanned<String>>,
    /// The seed of the design (default 0).
    #[serde(default)]
    pub seed: u64,
    /// The number of samples of the `count` and `seed_check` rules (default 32).
    pub samples: Option<Spanned<usize>>,
    /// Samples per chunk: the unit of work of shards and ranks, of resuming and of the
    /// stopping test (default 8).
    pub batch: Option<Spanned<usize>>,
    /// `sobol`: independent Owen scrambles the samples cycle through (default 4).
    pub replicates: Option<Spanned<usize>>,
    /// Probabilities of the quantiles reported (default 0.05, 0.5, 0.95).
    pub quantiles: Option<Spanned<Vec<f64>>>,
    /// Linearized variance shares from the adjoint gradient at the means (default true).
    #[serde(default = "yes")]
    pub sensitivities: bool,
    /// The stopping rule (default: `count`).
    pub stop: Option<UqStopSpec>,
    /// An acceptance rule std(output) < fraction · mean(output).
    pub accept: Option<UqAcceptSpec>,
    /// The uncertain inputs.
    #[serde(default, rename = "input")]
    pub inputs: Vec<UqInputSpec>,
    /// The outputs followed (default: `objective`).
    #[serde(default, rename = "output")]
    pub outputs: Vec<UqOutputSpec>,
    /// The inputs' correlation matrix, in input order (default: independent).
    pub correlation: Option<Spanned<Vec<Vec<f64>>>>,
}

fn yes() -> bool {
    true
}

/// `[[uq.input]]`: one registered parameter and its distribution.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UqInputSpec {
    /// A registered parameter name (`thermal.k.domain`, `bc.top.h`, …); a per-element field
    /// or another vector parameter is scaled as a whole by a factor with this distribution,
    /// or, with `correlation_length`, cell by cell by a random field.
    pub parameter: Spanned<String>,
    /// `normal`, `lognormal`, `uniform` or `truncated_normal`.
    pub distribution: Spanned<String>,
    /// The mean (default: the parameter's value in the problem; 1 for a vector parameter's
    /// factor).
    pub mean: Option<Spanned<f64>>,
    /// The standard deviation.
    pub std: Option<Spanned<f64>>,
    /// The standard deviation relative to |mean| (instead of `std`).
    pub cv: Option<Spanned<f64>>,
    /// Lower bound (`uniform`, `truncated_normal`).
    pub lower: Option<Spanned<f64>>,
    /// Upper bound (`uniform`, `truncated_normal`).
    pub upper: Option<Spanned<f64>>,
    /// A per-element parameter sampled as a random field: its correlation length (in the
    /// mesh's unit of length).
    pub correlation_length: Option<Spanned<f64>>,
    /// The field's correlation function: `exponential` (default) or `squared_exponential`.
    pub covariance: Option<Spanned<String>>,
    /// The most Karhunen–Loève modes kept (default 32, at most the group's cells).
    pub modes: Option<Spanned<usize>>,
    /// Keep the fewest modes that carry this share of the field's variance (default: all of
    /// `modes`).
    pub energy: Option<Spanned<f64>>,
}

/// `[[uq.output]]`: a quantity followed, with optional limits whose violation probability is
/// reported.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UqOutputSpec {
    /// A quantity of the solution (`objective`, `max_temperature`, `tip_displacement.y`, …).
    pub quantity: Spanned<String>,
    /// Report P(quantity > upper).
    pub upper: Option<f64>,
    /// Report P(quantity < lower).
    pub lower: Option<f64>,
}

/// `[uq.stop]`: when to stop sampling.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UqStopSpec {
    /// `count`, `relative_se` or `seed_check`.
    pub rule: Spanned<String>,
    /// `relative_se`, `seed_check`: the output judged (default: the first output).
    pub output: Option<Spanned<String>>,
    /// `relative_se`: the target se(mean)/|mean|.
    pub target: Option<Spanned<f64>>,
    /// `relative_se`: samples before the first test (default 2 batches).
    pub min_samples: Option<Spanned<usize>>,
    /// `relative_se`: the most samples (default 1024).
    pub max_samples: Option<Spanned<usize>>,
}

/// `[uq.accept]`: the acceptance rule std(output) < fraction · |mean(output)|.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UqAcceptSpec {
    /// The output judged (default: the first output).
    pub output: Option<Spanned<String>>,
    /// The fraction (default 0.05, the seed's rule).
    pub fraction: Option<Spanned<f64>>,
}
