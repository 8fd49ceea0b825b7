//! What `gradfem identify` reads and reports, shared by its two levels (the homogeneous fit
//! in [`crate::identify`] and the finite-element fit in [`crate::identify_fem`]): the
//! identification file's tables, the report written to `identify.json` with its correlation
//! matrix and the Ogden convention, the errors, the output files (`identify.json`, `fit.png`
//! and the drawing helpers of the PNG), and the statistics of a least-squares fit (Gauss–Newton
//! standard errors and correlations from the residuals' Jacobian, with the small dense normal
//! equations both levels solve). Both levels depend on this module, never on each other's
//! types, except that the homogeneous entry point dispatches to the finite-element one.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::Spanned;

/// Errors of an identification run.
#[derive(Debug, thiserror::Error)]
pub enum IdentifyError {
    #[error("{file}: cannot read: {message}")]
    Io { file: PathBuf, message: String },
    #[error("{file}:{line}:{column}: {message}")]
    Syntax { file: PathBuf, line: usize, column: usize, message: String },
    #[error("{file}: {message}")]
    Invalid { file: PathBuf, message: String },
    /// A value the identification file refuses, at its line and column.
    #[error("{file}:{line}:{column}: {message}")]
    InvalidAt { file: PathBuf, line: usize, column: usize, message: String },
    #[error(transparent)]
    Data(#[from] gradfem_mechanical::HomogeneousError),
    #[error("{path}: cannot write: {message}")]
    Write { path: PathBuf, message: String },
    /// A problem file of a FEM experiment cannot be read or set up.
    #[error("{file}: experiment {experiment}: {source}")]
    Problem {
        file: PathBuf,
        experiment: String,
        #[source]
        source: Box<crate::problem::ProblemError>,
    },
    /// A FEM experiment failed to solve or to give its derivatives.
    #[error("{file}: experiment {experiment}: {message}")]
    Solve { file: PathBuf, experiment: String, message: String },
}

impl IdentifyError {
    /// A refused value at `at` (line, column) when it is known, else of the whole file.
    pub(crate) fn invalid_at(file: &Path, at: Option<(usize, usize)>, message: String) -> Self {
        match at {
            Some((line, column)) => {
                IdentifyError::InvalidAt { file: file.into(), line, column, message }
            }
            None => IdentifyError::Invalid { file: file.into(), message },
        }
    }
}

pub(crate) use crate::problem::locate;

/// The material model to fit.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// `ogden` or `neo_hookean`.
    pub kind: String,
    /// Ogden terms (default 2).
    pub terms: Option<usize>,
}

/// One measured curve, or (`mode = "fem"`) one specimen's problem file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    /// `uniaxial`, `equibiaxial`, `pure_shear` or `fem`.
    pub mode: String,
    /// Homogeneous modes: CSV of stretch and nominal stress, relative to the identification
    /// file.
    pub file: Option<String>,
    /// `fem`: the `[hyperelastic]` problem file, relative to the identification file.
    pub problem: Option<String>,
    /// A name for tables and plots (default: the mode, or the problem file's stem).
    pub name: Option<String>,
}

/// An identification file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentifySpec {
    #[serde(default)]
    pub title: String,
    /// The law of homogeneous experiments.
    pub model: Option<ModelSpec>,
    /// FEM experiments: the fitted parameters.
    #[serde(default, rename = "parameter")]
    pub parameters: Vec<FemParameterSpec>,
    /// FEM experiments: iteration settings.
    pub fit: Option<FitSpec>,
    #[serde(default, rename = "experiment")]
    pub experiments: Vec<ExperimentSpec>,
}

/// The result of a fit, as written to `identify.json`.
#[derive(Clone, Debug, Serialize)]
pub struct IdentifyReport {
    pub title: String,
    pub model: String,
    /// Fitted values (Ogden: ψ = Σ 2μ_p/α_p² (λ̄₁^α_p + λ̄₂^α_p + λ̄₃^α_p − 3); μ in the unit of
    /// the stresses; see `parameter_convention`).
    pub parameters: std::collections::BTreeMap<String, f64>,
    /// Gauss–Newton standard errors of the fitted parameters.
    pub std_errors: std::collections::BTreeMap<String, f64>,
    /// Per experiment: name, mode, points and rms relative error.
    pub experiments: Vec<ExperimentFit>,
    /// Initial shear modulus Σ μ_p (homogeneous fits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shear_modulus: Option<f64>,
    /// Residual standard deviation σ of the misfit: relative for homogeneous fits, of the
    /// weighted residuals √w (q − m) for FEM fits.
    pub sigma: f64,
    /// Homogeneous: ½ Σ (P_model/P − 1)²; FEM: Σ w (q − m)², the sum of the problem files'
    /// misfit objectives.
    pub objective: f64,
    /// Starting points tried.
    pub starts: usize,
    /// The objective (as `objective`) at each starting point, before any step.
    pub start_objectives: Vec<f64>,
    /// The objective at the end of each start (NaN, `null` in JSON, for a FEM start that
    /// failed); the least is `objective`.
    pub final_objectives: Vec<f64>,
    /// Correlation matrix of the fitted parameters, from their covariance σ² (JᵀJ)⁻¹.
    pub correlation: Correlation,
    /// The convention of the Ogden parameters, for fits that have them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameter_convention: Option<String>,
    /// Homogeneous fits: Ogden's published moduli μ̃_p = 2μ_p/α_p (`mu_tilde1`, …), for
    /// comparison with tables in the other form of the law.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mu_tilde: std::collections::BTreeMap<String, f64>,
    /// For an Ogden fit: the Neo-Hookean fit to the same data, for comparison.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub neo_hookean: Option<Box<IdentifyReport>>,
    /// For a FEM fit: iterations and solves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fem: Option<FemFitInfo>,
    /// Homogeneous fits: the exact Hessian of the misfit at the optimum (not only JᵀJ), its
    /// eigen-directions (which combinations the data do not determine) and the Laplace
    /// posterior σ² H⁻¹ beside Gauss–Newton's σ² (JᵀJ)⁻¹, as `gradfem hessian` reports them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub laplace: Option<crate::hessian::HessianReport>,
}

/// The correlation matrix of fitted parameters: ρ_ij = C_ij / √(C_ii C_jj) of the covariance
/// C = σ² (JᵀJ)⁻¹ (σ cancels). Symmetric, unit diagonal, entries in [−1, 1]; every entry NaN
/// (`null` in JSON) when JᵀJ is singular (the data do not determine the parameters).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Correlation {
    /// The parameters, in the order of the rows and columns.
    pub names: Vec<String>,
    /// ρ, row by row.
    pub matrix: Vec<Vec<f64>>,
}

impl Correlation {
    /// The correlation of the parameters `names` from the Jacobian of the residuals (one row
    /// per residual, one column per parameter).
    pub fn from_jacobian(names: Vec<String>, jac: &[Vec<f64>]) -> Self {
        let matrix = correlation_matrix(jac, names.len());
        Correlation { names, matrix }
    }

    /// The pairs (i < j) with |ρ_ij| above `limit`, strongest first.
    pub fn strong_pairs(&self, limit: f64) -> Vec<(usize, usize, f64)> {
        let mut pairs = Vec::new();
        for (i, row) in self.matrix.iter().enumerate() {
            for (j, &r) in row.iter().enumerate().skip(i + 1) {
                if r.abs() > limit {
                    pairs.push((i, j, r));
                }
            }
        }
        pairs.sort_by(|a, b| b.2.abs().total_cmp(&a.2.abs()));
        pairs
    }
}

/// The Ogden convention of `gradfem` (physics/mechanical `hyperelastic.rs`), as identify
/// states it.
pub const OGDEN_CONVENTION: &str = "Ogden: ψ = Σ_p 2μ_p/α_p² (λ̄₁^α_p + λ̄₂^α_p + λ̄₃^α_p − 3) \
     (+ κ U(J) for a compressible solid); initial shear modulus G = Σ_p μ_p; the stable laws \
     have μ_p α_p > 0. Ogden's published form Σ_p μ̃_p/α_p (λ₁^α_p + λ₂^α_p + λ₃^α_p − 3) has \
     μ̃_p = 2μ_p/α_p";

/// The fit of one experiment.
#[derive(Clone, Debug, Serialize)]
pub struct ExperimentFit {
    pub name: String,
    /// As in the identification file: `uniaxial`, `equibiaxial`, `pure_shear` or `fem`.
    pub mode: String,
    pub points: usize,
    /// √(mean ((model − measured)/measured)²), over the points with a non-zero measured value.
    pub rms_relative_error: f64,
    /// FEM: √(mean (q − m)²) over the points, in the quantity's unit (N for reactions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rms_error: Option<f64>,
    /// FEM: the problem file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// What a running fit reports to its caller.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    /// Starting points finished.
    pub starts_done: usize,
    /// Starting points in all.
    pub starts: usize,
    /// Accepted steps of the current start (0 when a start has just finished).
    pub iteration: usize,
    /// The objective at the current point.
    pub objective: f64,
}

/// The chart of a fit PNG: a bitmap with f64 axes.
pub(crate) type FitChart<'a, 'b> = plotters::chart::ChartContext<
    'a,
    plotters::prelude::BitMapBackend<'b>,
    plotters::prelude::Cartesian2d<
        plotters::coord::types::RangedCoordf64,
        plotters::coord::types::RangedCoordf64,
    >,
>;

/// Measured points (circles of `radius`) and a fitted curve in one colour, with their legend
/// entries `labels` = [data, fit].
pub(crate) fn draw_data_and_fit(
    chart: &mut FitChart<'_, '_>,
    colour: plotters::style::RGBAColor,
    (points, radius): (impl IntoIterator<Item = (f64, f64)>, i32),
    curve: Vec<(f64, f64)>,
    labels: [String; 2],
) -> Result<(), String> {
    use plotters::prelude::*;
    let [data, fit] = labels;
    chart
        .draw_series(points.into_iter().map(|p| Circle::new(p, radius, colour.filled())))
        .map_err(|x| x.to_string())?
        .label(data)
        .legend(move |(x, y)| Circle::new((x, y), radius, colour.filled()));
    chart
        .draw_series(LineSeries::new(curve, colour.stroke_width(2)))
        .map_err(|x| x.to_string())?
        .label(fit)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    Ok(())
}

/// The legend of a fit PNG, in the upper left.
pub(crate) fn draw_legend<'a, 'b: 'a>(chart: &mut FitChart<'a, 'b>) -> Result<(), String> {
    use plotters::prelude::*;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|x| x.to_string())
}

/// Write `identify.json` and `fit.png` into `dir` as one output set
/// ([`gradfem_io::output_set`]), the PNG drawn by `plot`; returns both paths, the PNG's as the
/// reason it was skipped when drawing failed (e.g. no font).
pub(crate) fn write_outputs(
    dir: &Path,
    report: &IdentifyReport,
    plot: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<(PathBuf, Result<PathBuf, String>), IdentifyError> {
    let werr = |p: &Path, m: String| IdentifyError::Write { path: p.into(), message: m };
    // One output set (identify.json and fit.png of one fit), put in place as a whole.
    let set =
        gradfem_io::output_set::OutputSet::begin(dir).map_err(|e| werr(dir, e.to_string()))?;
    let json = set.dir().join("identify.json");
    let text = serde_json::to_string_pretty(report).expect("serializable");
    gradfem_io::atomic::write_bytes_atomic(&json, text.as_bytes())
        .map_err(|e| werr(&dir.join("identify.json"), e.to_string()))?;
    let plotted = plot(&set.dir().join("fit.png")).map(|()| dir.join("fit.png"));
    if plotted.is_err() {
        let _ = std::fs::remove_file(set.dir().join("fit.png"));
    }
    // The Laplace posterior's marginals and pairwise ellipses, beside Gauss–Newton's.
    if let Some(l) = report.laplace.as_ref().filter(|l| l.posterior.is_some()) {
        let png = set.dir().join("posterior.png");
        if let Err(e) = crate::hessian::plot_posterior(l, &png) {
            tracing::warn!("identify: posterior.png not drawn: {e}");
            let _ = std::fs::remove_file(&png);
        }
    }
    set.commit().map_err(|e| werr(dir, e.to_string()))?;
    Ok((dir.join("identify.json"), plotted))
}

/// One fitted parameter of an identification file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FemParameterSpec {
    /// Registry name in the problem files, e.g. `hyperelastic.mu1.domain`.
    pub name: Spanned<String>,
    /// Starting value(s); default: the value in the first problem file.
    pub start: Option<StartValues>,
    /// [lower, upper]; default: the registry's bounds of the parameter (if any).
    pub bounds: Option<[f64; 2]>,
}

/// One starting value or several.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum StartValues {
    /// `start = 0.2e6`
    One(f64),
    /// `start = [0.2e6, 0.5e6]`
    Many(Vec<f64>),
}

/// The `[fit]` table: settings of the Levenberg–Marquardt iterations.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FitSpec {
    /// Accepted steps per starting point (default 50).
    #[serde(default = "default_iterations")]
    pub max_iterations: usize,
    /// Stop when a step changes no scaled variable x_i / |x_i,0| by more than this
    /// (relative to the largest scaled variable; default 1e-10).
    #[serde(default = "default_step_tol")]
    pub step_tol: f64,
    /// Stop when an accepted step lowers Σ r² by less than this fraction (default 1e-14).
    #[serde(default = "default_cost_tol")]
    pub cost_tol: f64,
}

fn default_iterations() -> usize {
    50
}
fn default_step_tol() -> f64 {
    1e-10
}
fn default_cost_tol() -> f64 {
    1e-14
}

impl Default for FitSpec {
    fn default() -> Self {
        FitSpec {
            max_iterations: default_iterations(),
            step_tol: default_step_tol(),
            cost_tol: default_cost_tol(),
        }
    }
}

/// How a fit went.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FemFitInfo {
    /// Accepted Levenberg–Marquardt steps of the best start.
    pub iterations: usize,
    /// Whether the best start met a stopping test (else it ran out of iterations).
    pub converged: bool,
    /// Forward runs of all experiments, over all starts.
    pub forward_runs: usize,
    /// Jacobian evaluations, over all starts.
    pub jacobians: usize,
    /// Residuals m and parameters n.
    pub residuals: usize,
    /// Wall time (s).
    pub time_s: f64,
}

pub(crate) fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A = J_sᵀ J_s and g = J_sᵀ r with J_s = J diag(scale).
pub(crate) fn normal_equations(
    jac: &[Vec<f64>],
    r: &[f64],
    scale: &[f64],
) -> (Vec<Vec<f64>>, Vec<f64>) {
    let n = scale.len();
    let mut a = vec![vec![0.0; n]; n];
    let mut g = vec![0.0; n];
    for (row, ri) in jac.iter().zip(r) {
        for i in 0..n {
            let ji = row[i] * scale[i];
            g[i] += ji * ri;
            for j in 0..n {
                a[i][j] += ji * row[j] * scale[j];
            }
        }
    }
    (a, g)
}

/// Solve A x = b for a small symmetric positive definite A; `None` when it is not.
pub(crate) fn cholesky_solve(a: &[Vec<f64>], b: &[f64]) -> Option<Vec<f64>> {
    let n = b.len();
    let mut l = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in 0..=i {
            let s = a[i][j] - (0..j).map(|k| l[i][k] * l[j][k]).sum::<f64>();
            if i == j {
                // A relative pivot test: a numerically singular A is not positive definite.
                if s.partial_cmp(&(1e-13 * a[i][i])) != Some(std::cmp::Ordering::Greater) {
                    return None;
                }
                l[i][i] = s.sqrt();
            } else {
                l[i][j] = s / l[j][j];
            }
        }
    }
    let mut y = vec![0.0; n];
    for i in 0..n {
        y[i] = (b[i] - (0..i).map(|k| l[i][k] * y[k]).sum::<f64>()) / l[i][i];
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        x[i] = (y[i] - (i + 1..n).map(|k| l[k][i] * x[k]).sum::<f64>()) / l[i][i];
    }
    Some(x)
}

/// √diag(σ² (JᵀJ)⁻¹), computed in variables scaled by the columns' norms; NaN where JᵀJ is
/// singular.
pub(crate) fn standard_errors(jac: &[Vec<f64>], sigma: f64, n: usize) -> Vec<f64> {
    let norms: Vec<f64> =
        (0..n).map(|j| jac.iter().map(|row| row[j] * row[j]).sum::<f64>().sqrt()).collect();
    if norms.iter().any(|v| v.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)) {
        return vec![f64::NAN; n];
    }
    let scale: Vec<f64> = norms.iter().map(|v| 1.0 / v).collect();
    let zero = vec![0.0; jac.len()];
    let (a, _) = normal_equations(jac, &zero, &scale);
    (0..n)
        .map(|i| {
            let mut e = vec![0.0; n];
            e[i] = 1.0;
            cholesky_solve(&a, &e).map_or(f64::NAN, |c| sigma * c[i].sqrt() * scale[i])
        })
        .collect()
}

/// The correlation matrix ρ_ij = C_ij / √(C_ii C_jj) of C = (JᵀJ)⁻¹ (any σ² factor cancels),
/// computed in variables scaled by the columns' norms; symmetric with a unit diagonal and
/// entries clamped to [−1, 1] (round-off). Every entry NaN when JᵀJ is singular.
pub(crate) fn correlation_matrix(jac: &[Vec<f64>], n: usize) -> Vec<Vec<f64>> {
    let undetermined = vec![vec![f64::NAN; n]; n];
    if jac.iter().any(|row| row.len() != n) {
        return undetermined;
    }
    let norms: Vec<f64> =
        (0..n).map(|j| jac.iter().map(|row| row[j] * row[j]).sum::<f64>().sqrt()).collect();
    if norms.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
        return undetermined;
    }
    let scale: Vec<f64> = norms.iter().map(|v| 1.0 / v).collect();
    let zero = vec![0.0; jac.len()];
    let (a, _) = normal_equations(jac, &zero, &scale);
    let mut c = Vec::with_capacity(n);
    for i in 0..n {
        let mut e = vec![0.0; n];
        e[i] = 1.0;
        match cholesky_solve(&a, &e) {
            Some(col) => c.push(col),
            None => return undetermined,
        }
    }
    (0..n)
        .map(|i| {
            (0..n)
                .map(|j| {
                    if i == j {
                        1.0
                    } else {
                        let cij = 0.5 * (c[i][j] + c[j][i]);
                        (cij / (c[i][i] * c[j][j]).sqrt()).clamp(-1.0, 1.0)
                    }
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_dense_solves_match() {
        let a = vec![vec![4.0, 1.0, 0.5], vec![1.0, 3.0, 0.2], vec![0.5, 0.2, 2.0]];
        let b = [1.0, -2.0, 0.5];
        let x = cholesky_solve(&a, &b).unwrap();
        for i in 0..3 {
            assert!((dot(&a[i], &x) - b[i]).abs() < 1e-14);
        }
        assert!(cholesky_solve(&[vec![1.0, 2.0], vec![2.0, 1.0]], &[1.0, 1.0]).is_none());
        // One parameter: σ² / Σ J² .
        let jac = vec![vec![2.0], vec![1.0]];
        let se = standard_errors(&jac, 0.5, 1);
        assert!((se[0] - 0.5 / 5f64.sqrt()).abs() < 1e-15);
        // Dependent columns: not determined.
        let jac = vec![vec![1.0, 2.0], vec![2.0, 4.0]];
        assert!(standard_errors(&jac, 1.0, 2).iter().all(|v| v.is_nan()));
    }

    #[test]
    fn correlation_of_a_known_jacobian() {
        // JᵀJ = [[2, 1], [1, 2]], (JᵀJ)⁻¹ = [[2, −1], [−1, 2]]/3: ρ = −1/2, whatever the
        // columns' scales.
        for s in [1.0, 1e6] {
            let jac = vec![vec![1.0 * s, 0.0], vec![1.0 * s, 1.0], vec![0.0, 1.0]];
            let c = correlation_matrix(&jac, 2);
            assert_eq!(c[0][0], 1.0);
            assert_eq!(c[1][1], 1.0);
            assert_eq!(c[0][1], c[1][0]);
            assert!((c[0][1] + 0.5).abs() < 1e-14, "{c:?}");
        }
        // Three parameters, random columns: symmetric, unit diagonal, in [−1, 1].
        let d = gradfem_solvers::taylor::random_direction(30, 3);
        let jac: Vec<Vec<f64>> = d.chunks(3).map(|r| vec![r[0], r[1] + 2.0 * r[0], r[2]]).collect();
        let c = correlation_matrix(&jac, 3);
        for i in 0..3 {
            assert_eq!(c[i][i], 1.0);
            for j in 0..3 {
                assert_eq!(c[i][j], c[j][i]);
                assert!((-1.0..=1.0).contains(&c[i][j]), "{c:?}");
            }
        }
        assert!(c[0][1] < -0.5, "the second column follows the first: {c:?}");
        // Dependent or zero columns: not determined.
        let jac = vec![vec![1.0, 2.0], vec![2.0, 4.0]];
        assert!(correlation_matrix(&jac, 2).iter().flatten().all(|v| v.is_nan()));
        let jac = vec![vec![1.0, 0.0], vec![2.0, 0.0]];
        assert!(correlation_matrix(&jac, 2).iter().flatten().all(|v| v.is_nan()));
        assert!(correlation_matrix(&[], 0).is_empty());
    }
}
