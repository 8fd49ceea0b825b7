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

use crate::identify_fem::FemIdentification;
pub use crate::identify_report::{
    Correlation, ExperimentFit, ExperimentSpec, IdentifyError, IdentifyReport, IdentifySpec,
    ModelSpec, OGDEN_CONVENTION, Progress,
};
use crate::identify_report::{draw_data_and_fit, draw_legend, locate, write_outputs};

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
    /// The unit of the nominal stresses, from the CSV headers when they all name the same.
    stress_unit: Option<String>,
}

/// The unit a CSV header names for its stress column: `stress (MPa)`, `stress [MPa]` or
/// `nominal_stress_MPa`; `None` when it names none that is recognized.
fn unit_of_header(column: &str) -> Option<String> {
    let column = column.trim();
    for (open, close) in [('(', ')'), ('[', ']')] {
        if let (Some(a), Some(b)) = (column.rfind(open), column.rfind(close))
            && a < b
        {
            let unit = column[a + open.len_utf8()..b].trim();
            return (!unit.is_empty()).then(|| unit.to_string());
        }
    }
    let suffix = column.rsplit(['_', ' ']).next()?;
    const UNITS: [&str; 8] = ["Pa", "kPa", "MPa", "GPa", "psi", "ksi", "N/mm2", "N/mm²"];
    UNITS.iter().find(|u| u.eq_ignore_ascii_case(suffix)).map(|u| u.to_string())
}

/// The stress unit of a curve file's header line (its second column), if it names one.
fn stress_unit_of(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let header = text.lines().next()?;
    if header.split(',').nth(1)?.trim().parse::<f64>().is_ok() {
        return None;
    }
    unit_of_header(header.split(',').nth(1)?)
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
            Kind::Homogeneous(Homogeneous::read(path, &text, &spec)?)
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

impl Homogeneous {
    fn read(path: &Path, source: &str, spec: &IdentifySpec) -> Result<Self, IdentifyError> {
        let invalid = |m: String| IdentifyError::Invalid { file: path.into(), message: m };
        // A refused value at the `key` of the k-th `header` table (or at the table).
        let at = |header: &str, k: usize, key: Option<&str>, m: String| {
            IdentifyError::invalid_at(path, locate(source, header, k, key), m)
        };
        let Some(model) = spec.model.clone() else {
            return Err(invalid("homogeneous experiments need a [model] table".into()));
        };
        if !spec.parameters.is_empty() || spec.fit.is_some() {
            let table = if spec.parameters.is_empty() { "[fit]" } else { "[[parameter]]" };
            return Err(at(
                table,
                0,
                None,
                "[[parameter]] and [fit] belong to FEM experiments (mode = \"fem\"); a \
                 homogeneous fit takes its parameters from [model]"
                    .into(),
            ));
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let mut experiments: Vec<Experiment> = Vec::new();
        let mut names = Vec::new();
        let mut units = Vec::new();
        for (i, e) in spec.experiments.iter().enumerate() {
            let mode = mode_of(&e.mode).ok_or_else(|| {
                at(
                    "[[experiment]]",
                    i,
                    Some("mode"),
                    format!(
                        "experiment mode '{}': expected uniaxial, equibiaxial, pure_shear or fem",
                        e.mode
                    ),
                )
            })?;
            let (Some(file), None) = (&e.file, &e.problem) else {
                let key = e.problem.as_ref().map(|_| "problem");
                return Err(at(
                    "[[experiment]]",
                    i,
                    key,
                    format!(
                        "a '{}' experiment needs `file = \"curve.csv\"` and takes no `problem`",
                        e.mode
                    ),
                ));
            };
            experiments.push(read_experiment_csv(&base.join(file), mode)?);
            units.push(stress_unit_of(&base.join(file)));
            names.push(e.name.clone().unwrap_or_else(|| mode.name().to_string()));
        }
        let stress_unit = match units.split_first() {
            Some((Some(u), rest)) if rest.iter().all(|v| v.as_ref() == Some(u)) => Some(u.clone()),
            _ => None,
        };
        let fit = match model.kind.as_str() {
            "ogden" => {
                let n = model.terms.unwrap_or(2);
                if !(1..=6).contains(&n) {
                    let m = format!("model.terms = {n}: expected 1 to 6");
                    return Err(at("[model]", 0, Some("terms"), m));
                }
                OgdenFit::ogden(experiments, n)
            }
            "neo_hookean" => {
                if model.terms.is_some() {
                    let m = "a neo_hookean model takes no `terms`".to_string();
                    return Err(at("[model]", 0, Some("terms"), m));
                }
                OgdenFit::neo_hookean(experiments)
            }
            other => {
                let m = format!("model.kind '{other}': expected ogden or neo_hookean");
                return Err(at("[model]", 0, Some("kind"), m));
            }
        };
        Ok(Homogeneous { title: spec.title.clone(), model, names, fit, stress_unit })
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
                stress_unit: self.stress_unit.clone(),
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
        let mut start_objectives = Vec::with_capacity(starts.len());
        let mut final_objectives = Vec::with_capacity(starts.len());
        for (i, (x0, signs)) in starts.iter().enumerate() {
            let (lo, hi) = self.fit.bounds(signs);
            let mut g0 = vec![0.0; x0.len()];
            start_objectives.push(self.fit.objective(x0, &mut g0));
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
            final_objectives.push(r.f);
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
        let (residuals, jac) = self.fit.residuals_and_jacobian(&x);
        let correlation = Correlation::from_jacobian(self.fit.free_names(), &jac);
        let laplace = self.laplace(&x, &s, &residuals, &jac);
        let unit = self.stress_unit.as_deref().unwrap_or("the unit of the measured stresses");
        let convention = format!(
            "{OGDEN_CONVENTION}; incompressible (λ̄_i = λ_i); μ_p in {unit}{}",
            if self.model.kind == "neo_hookean" {
                "; Neo-Hookean: one term with α₁ = 2, ψ = μ₁/2 (I₁ − 3)"
            } else {
                ""
            }
        );
        let mu_tilde = self
            .fit
            .terms::<f64>(&x)
            .iter()
            .enumerate()
            .map(|(p, (mu, alpha))| (format!("mu_tilde{}", p + 1), 2.0 * mu / alpha))
            .collect();
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
            start_objectives,
            final_objectives,
            correlation,
            parameter_convention: Some(convention),
            mu_tilde,
            neo_hookean: None,
            fem: None,
            laplace: Some(laplace),
        };
        (report, x)
    }

    /// The exact Hessian of ½ Σ r² at the fit `x` and its Laplace posterior, with the noise σ
    /// of the Gauss–Newton errors (√(Σ r²/(m − n))) and JᵀJ beside it.
    fn laplace(
        &self,
        x: &[f64],
        s: &FitSummary,
        residuals: &[f64],
        jac: &[Vec<f64>],
    ) -> crate::hessian::HessianReport {
        let n = x.len();
        let started = std::time::Instant::now();
        let hessian = self.fit.hessian(x);
        let mut gradient = vec![0.0; n];
        let objective = self.fit.objective(x, &mut gradient);
        let gauss_newton = (0..n * n)
            .map(|k| jac.iter().map(|row| row[k / n] * row[k % n]).sum::<f64>())
            .collect();
        let misfit = crate::hessian::Misfit {
            weight: 1.0,
            noise: s.sigma,
            noise_estimated: true,
            observations: residuals.len(),
            unit: "(relative)",
            gauss_newton,
        };
        crate::hessian::analyze(
            self.fit.free_names(),
            x.to_vec(),
            objective,
            gradient,
            &hessian,
            Some(misfit),
            0,
            started.elapsed().as_secs_f64(),
        )
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
        let y = format!(
            "nominal stress P ({})",
            self.stress_unit.as_deref().unwrap_or("unit of the data")
        );
        chart.configure_mesh().x_desc("stretch λ (–)").y_desc(y).draw().map_err(|x| e(&x))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stress_units_are_read_from_headers() {
        assert_eq!(unit_of_header("nominal_stress_MPa").as_deref(), Some("MPa"));
        assert_eq!(unit_of_header(" stress (kPa) ").as_deref(), Some("kPa"));
        assert_eq!(unit_of_header("P [N/mm²]").as_deref(), Some("N/mm²"));
        assert_eq!(unit_of_header("nominal stress pa").as_deref(), Some("Pa"));
        assert_eq!(unit_of_header("nominal_stress"), None);
        assert_eq!(unit_of_header("stress ()"), None);
    }

    #[test]
    fn correlation_pairs_are_sorted_by_strength() {
        let c = Correlation {
            names: vec!["a".into(), "b".into(), "c".into()],
            matrix: vec![vec![1.0, 0.95, -0.99], vec![0.95, 1.0, 0.1], vec![-0.99, 0.1, 1.0]],
        };
        assert_eq!(c.strong_pairs(0.9), vec![(0, 2, -0.99), (0, 1, 0.95)]);
        assert!(c.strong_pairs(0.999).is_empty());
    }
}
