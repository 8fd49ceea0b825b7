//! `gradfem identify`: hyperelastic material parameters from test-rig curves.
//!
//! The homogeneous level: each experiment is a homogeneous deformation (uniaxial, equibiaxial
//! or pure shear of an incompressible specimen) whose nominal stress has a closed form in the
//! law's parameters ([`gradfem_mechanical::homogeneous`]), so a fit takes milliseconds and
//! needs no mesh. The misfit is relative, ½ Σ (P_model/P − 1)², over every experiment at once;
//! it is minimized by projected L-BFGS from one starting point per sign pattern of the Ogden
//! exponents (μ_p α_p > 0 is kept by bounds: μ_p ≥ 0 and each α_p keeps its sign), and the best
//! run is reported with Gauss–Newton standard errors (σ² (JᵀJ)⁻¹ at the optimum), the rms
//! relative error of each experiment, a JSON file and a PNG of data against the fitted curves.
//!
//! ```toml
//! title = "Treloar's rubber"
//!
//! [model]
//! kind = "ogden"          # or "neo_hookean"
//! terms = 3
//!
//! [[experiment]]
//! mode = "uniaxial"       # equibiaxial, pure_shear
//! file = "uniaxial.csv"   # stretch, nominal stress (header line first), relative to this file
//! ```
//!
//! The finite-element level: `[[experiment]] mode = "fem"` names a `[hyperelastic]` problem
//! file whose objective holds measured misfits, and `[[parameter]]` tables name the shared
//! parameters to fit (see [`crate::identify_fem`]). Homogeneous and FEM experiments are not
//! mixed in one file: the homogeneous fit is of an incompressible law given by `[model]`, with
//! a relative misfit, the FEM fit of the registered parameters of compressible problems, with
//! the problem files' weighted misfits; one objective over both would weigh two unrelated
//! scales against each other, and the names do not correspond.

use std::path::{Path, PathBuf};

use gradfem_mechanical::homogeneous::{
    Experiment, FitSummary, Mode, OgdenFit, incompressible_nominal_stress, read_experiment_csv,
};
use gradfem_solvers::optimize::{Control, LbfgsbParams, minimize_lbfgsb};
use serde::{Deserialize, Serialize};

use crate::identify_fem::{FemFitInfo, FemIdentification, FemParameterSpec, FitSpec};

/// Errors of an identification run.
#[derive(Debug, thiserror::Error)]
pub enum IdentifyError {
    #[error("{file}: cannot read: {message}")]
    Io { file: PathBuf, message: String },
    #[error("{file}:{line}:{column}: {message}")]
    Syntax { file: PathBuf, line: usize, column: usize, message: String },
    #[error("{file}: {message}")]
    Invalid { file: PathBuf, message: String },
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
    /// the stresses).
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
    /// For an Ogden fit: the Neo-Hookean fit to the same data, for comparison.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub neo_hookean: Option<Box<IdentifyReport>>,
    /// For a FEM fit: iterations, solves and the objective reached from each start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fem: Option<FemFitInfo>,
}

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

/// A parsed identification file with its data.
pub struct Identification {
    pub path: PathBuf,
    pub spec: IdentifySpec,
    kind: Kind,
}

/// The two levels of identification.
enum Kind {
    Homogeneous(Homogeneous),
    Fem(Box<FemIdentification>),
}

/// Homogeneous experiments and their closed-form fit.
struct Homogeneous {
    title: String,
    model: ModelSpec,
    names: Vec<String>,
    fit: OgdenFit,
}

fn mode_of(s: &str) -> Option<Mode> {
    Mode::ALL.into_iter().find(|m| m.name() == s)
}

impl Identification {
    /// Read the file and its experiments (FEM experiments: their problem files, set up for
    /// the fitted parameters).
    pub fn read(path: &Path) -> Result<Self, IdentifyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| IdentifyError::Io { file: path.into(), message: e.to_string() })?;
        let spec: IdentifySpec = toml::from_str(&text).map_err(|e| {
            let (line, column) =
                e.span().map_or((0, 0), |s| crate::problem::line_col(&text, s.start));
            IdentifyError::Syntax {
                file: path.into(),
                line,
                column,
                message: e.message().to_string(),
            }
        })?;
        let invalid = |m: String| IdentifyError::Invalid { file: path.into(), message: m };
        if spec.experiments.is_empty() {
            return Err(invalid("no [[experiment]]".into()));
        }
        let fem: Vec<bool> = spec.experiments.iter().map(|e| e.mode == "fem").collect();
        let kind = if fem.iter().all(|f| *f) {
            Kind::Fem(Box::new(FemIdentification::new(path, &text, &spec)?))
        } else if let Some(k) = fem.iter().position(|f| *f) {
            let homogeneous = fem.iter().position(|f| !*f).expect("not all are FEM");
            return Err(invalid(format!(
                "experiment {} is mode = \"fem\" and experiment {} is mode = \"{}\": \
                 homogeneous and FEM experiments cannot be mixed (the homogeneous fit is of an \
                 incompressible [model] with a relative misfit, the FEM fit of the problem \
                 files' registered parameters with their weighted misfits); identify them in \
                 separate files",
                k + 1,
                homogeneous + 1,
                spec.experiments[homogeneous].mode
            )));
        } else {
            Kind::Homogeneous(Homogeneous::read(path, &spec)?)
        };
        Ok(Identification { path: path.into(), spec, kind })
    }

    /// Number of starting points [`run`](Self::run) tries.
    pub fn starts(&self) -> usize {
        match &self.kind {
            Kind::Homogeneous(h) => h.fit.starting_points(&h.sign_patterns()).len(),
            Kind::Fem(f) => f.starts(),
        }
    }

    /// The FEM identification, when the experiments are finite-element problems.
    pub fn fem_mut(&mut self) -> Option<&mut FemIdentification> {
        match &mut self.kind {
            Kind::Fem(f) => Some(f),
            Kind::Homogeneous(_) => None,
        }
    }

    /// Fit; `progress` sees each finished start (and, for FEM experiments, each accepted
    /// step). Returns the report (for a homogeneous Ogden model with the Neo-Hookean fit to the
    /// same data for comparison) and the fitted free vector.
    pub fn run(
        &mut self,
        mut progress: impl FnMut(&Progress),
    ) -> Result<(IdentifyReport, Vec<f64>), IdentifyError> {
        match &mut self.kind {
            Kind::Homogeneous(h) => {
                let starts = h.fit.starting_points(&h.sign_patterns()).len();
                Ok(h.run(|i| {
                    progress(&Progress {
                        starts_done: i,
                        starts,
                        iteration: 0,
                        objective: f64::NAN,
                    })
                }))
            }
            Kind::Fem(f) => f.run(progress),
        }
    }

    /// Write `identify.json` and `fit.png` (data against fitted curves) into `dir`; returns
    /// their paths. The PNG is skipped, with the reason, when no font is available.
    pub fn write(
        &mut self,
        dir: &Path,
        report: &IdentifyReport,
        x: &[f64],
    ) -> Result<(PathBuf, Result<PathBuf, String>), IdentifyError> {
        match &mut self.kind {
            Kind::Homogeneous(h) => h.write(dir, report, x),
            Kind::Fem(f) => f.write(dir, report, x),
        }
    }
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

/// Write `identify.json` (atomically) and `fit.png` into `dir`, the PNG drawn by `plot` into a
/// temporary file and renamed into place; returns both paths, the PNG's as the reason it was
/// skipped when drawing failed (e.g. no font).
pub(crate) fn write_outputs(
    dir: &Path,
    report: &IdentifyReport,
    plot: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<(PathBuf, Result<PathBuf, String>), IdentifyError> {
    let werr = |p: &Path, m: String| IdentifyError::Write { path: p.into(), message: m };
    std::fs::create_dir_all(dir).map_err(|e| werr(dir, e.to_string()))?;
    let json = dir.join("identify.json");
    let text = serde_json::to_string_pretty(report).expect("serializable");
    gradfem_io::atomic::write_bytes_atomic(&json, text.as_bytes())
        .map_err(|e| werr(&json, e.to_string()))?;
    let png = dir.join("fit.png");
    let tmp = dir.join(".fit.tmp.png");
    let plotted = match plot(&tmp) {
        Ok(()) => std::fs::rename(&tmp, &png).map(|()| png).map_err(|e| e.to_string()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    };
    Ok((json, plotted))
}

impl Homogeneous {
    fn read(path: &Path, spec: &IdentifySpec) -> Result<Self, IdentifyError> {
        let invalid = |m: String| IdentifyError::Invalid { file: path.into(), message: m };
        let Some(model) = spec.model.clone() else {
            return Err(invalid("homogeneous experiments need a [model] table".into()));
        };
        if !spec.parameters.is_empty() || spec.fit.is_some() {
            return Err(invalid(
                "[[parameter]] and [fit] belong to FEM experiments (mode = \"fem\"); a \
                 homogeneous fit takes its parameters from [model]"
                    .into(),
            ));
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let mut experiments: Vec<Experiment> = Vec::new();
        let mut names = Vec::new();
        for e in &spec.experiments {
            let mode = mode_of(&e.mode).ok_or_else(|| {
                invalid(format!(
                    "experiment mode '{}': expected uniaxial, equibiaxial, pure_shear or fem",
                    e.mode
                ))
            })?;
            let (Some(file), None) = (&e.file, &e.problem) else {
                return Err(invalid(format!(
                    "a '{}' experiment needs `file = \"curve.csv\"` and takes no `problem`",
                    e.mode
                )));
            };
            experiments.push(read_experiment_csv(&base.join(file), mode)?);
            names.push(e.name.clone().unwrap_or_else(|| mode.name().to_string()));
        }
        let fit = match model.kind.as_str() {
            "ogden" => {
                let n = model.terms.unwrap_or(2);
                if !(1..=6).contains(&n) {
                    return Err(invalid(format!("model.terms = {n}: expected 1 to 6")));
                }
                OgdenFit::ogden(experiments, n)
            }
            "neo_hookean" => {
                if model.terms.is_some() {
                    return Err(invalid("a neo_hookean model takes no `terms`".into()));
                }
                OgdenFit::neo_hookean(experiments)
            }
            other => {
                return Err(invalid(format!(
                    "model.kind '{other}': expected ogden or neo_hookean"
                )));
            }
        };
        Ok(Homogeneous { title: spec.title.clone(), model, names, fit })
    }

    /// The sign patterns of the free exponents: the first positive, the others ±.
    fn sign_patterns(&self) -> Vec<Vec<f64>> {
        let n = self.fit.fixed_alpha.iter().filter(|a| a.is_none()).count();
        (0..1usize << n.saturating_sub(1))
            .map(|bits| {
                (0..n).map(|i| if i > 0 && bits >> (i - 1) & 1 == 1 { -1.0 } else { 1.0 }).collect()
            })
            .collect()
    }

    fn run(&self, progress: impl FnMut(usize)) -> (IdentifyReport, Vec<f64>) {
        let (mut report, x) = self.fit_once(progress);
        if self.model.kind == "ogden" {
            let nh = Homogeneous {
                title: self.title.clone(),
                model: ModelSpec { kind: "neo_hookean".into(), terms: None },
                names: self.names.clone(),
                fit: OgdenFit::neo_hookean(self.fit.experiments.clone()),
            };
            report.neo_hookean = Some(Box::new(nh.fit_once(|_| {}).0));
        }
        (report, x)
    }

    fn fit_once(&self, mut progress: impl FnMut(usize)) -> (IdentifyReport, Vec<f64>) {
        let params =
            LbfgsbParams { gtol: 1e-10, ftol: 1e-15, max_iterations: 5000, ..Default::default() };
        let starts = self.fit.starting_points(&self.sign_patterns());
        let mut best: Option<(Vec<f64>, f64)> = None;
        for (i, (x0, signs)) in starts.iter().enumerate() {
            let (lo, hi) = self.fit.bounds(signs);
            let r = minimize_lbfgsb(
                |x: &[f64], g: &mut [f64]| {
                    Ok::<f64, std::convert::Infallible>(self.fit.objective(x, g))
                },
                x0,
                &lo,
                &hi,
                &params,
                |_| Control::Continue,
            )
            .unwrap_or_else(|e| match e {});
            if best.as_ref().is_none_or(|b| r.f < b.1) {
                best = Some((r.x, r.f));
            }
            progress(i + 1);
        }
        let x = best.expect("at least one starting point").0;
        let s: FitSummary = self.fit.summary(&x);
        let model = match self.model.kind.as_str() {
            "ogden" => format!("ogden{}", self.fit.fixed_alpha.len()),
            other => other.to_string(),
        };
        let report = IdentifyReport {
            title: self.title.clone(),
            model,
            parameters: s.parameters.iter().cloned().collect(),
            std_errors: s.std_errors.iter().cloned().collect(),
            experiments: self
                .fit
                .experiments
                .iter()
                .zip(&self.names)
                .zip(&s.rms_relative_error)
                .map(|((e, n), (_, err))| ExperimentFit {
                    name: n.clone(),
                    mode: e.mode.name().to_string(),
                    points: e.stretch.len(),
                    rms_relative_error: *err,
                    rms_error: None,
                    problem: None,
                })
                .collect(),
            shear_modulus: Some(s.shear_modulus),
            sigma: s.sigma,
            objective: s.objective,
            starts: starts.len(),
            neo_hookean: None,
            fem: None,
        };
        (report, x)
    }

    fn write(
        &self,
        dir: &Path,
        report: &IdentifyReport,
        x: &[f64],
    ) -> Result<(PathBuf, Result<PathBuf, String>), IdentifyError> {
        write_outputs(dir, report, |png| self.plot(png, x))
    }

    fn plot(&self, file: &Path, x: &[f64]) -> Result<(), String> {
        use plotters::prelude::*;
        let e = |x: &dyn std::fmt::Display| x.to_string();
        let terms = self.fit.terms::<f64>(x);
        let exps = &self.fit.experiments;
        let lmax = exps.iter().flat_map(|e| e.stretch.iter().copied()).fold(1.0, f64::max);
        let pmax = exps.iter().flat_map(|e| e.nominal_stress.iter().copied()).fold(0.0, f64::max);
        let root = BitMapBackend::new(file, (900, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let title = if self.title.is_empty() { "identification" } else { &self.title };
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(1.0..lmax * 1.02, 0.0..pmax * 1.08)
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc("stretch λ")
            .y_desc("nominal stress")
            .draw()
            .map_err(|x| e(&x))?;
        for (k, (ex, name)) in exps.iter().zip(&self.names).enumerate() {
            let l1 = ex.stretch.iter().copied().fold(1.0, f64::max);
            let curve: Vec<(f64, f64)> = (0..=200)
                .map(|i| 1.0 + (l1 - 1.0) * f64::from(i) / 200.0)
                .map(|l| (l, incompressible_nominal_stress(ex.mode, l, &terms)))
                .collect();
            draw_data_and_fit(
                &mut chart,
                Palette99::pick(k).to_rgba(),
                (ex.stretch.iter().copied().zip(ex.nominal_stress.iter().copied()), 3),
                curve,
                [format!("{name} (data)"), format!("{name} (fit)")],
            )?;
        }
        draw_legend(&mut chart)?;
        root.present().map_err(|x| e(&x))
    }
}
