//! `gradfem hessian`: the exact Hessian of the objective over the registered parameters (one
//! Hessian-vector product per entry, by the second-order adjoint), its eigen-decomposition, and
//! for a sensor misfit the Laplace posterior of the parameters: covariance σ² H⁻¹, standard
//! deviations, correlations and the eigen-directions the data do not determine, beside the
//! Gauss–Newton approximation GᵀG (G the sensors' sensitivities, from tangent-linear solves)
//! that least-squares fits usually report.
//!
//! The Hessian is analysed in scaled variables xᵢ = pᵢ/sᵢ (sᵢ the magnitude of the parameter)
//! so that parameters of different units compare: an eigenvalue of the scaled Hessian is the
//! curvature of J per relative change along its eigenvector.

use serde::Serialize;

use gradfem_coupling::fields::finite_strain::{PathTerm, Quantity};
use gradfem_coupling::time::TimeRule;
use gradfem_solvers::dense::symmetric_eigen;
use gradfem_solvers::params::ParamVector;
use gradfem_thermal::ObjectiveKind;

use crate::app::Problem;
use crate::run::RunError;

/// The most registered entries a dense Hessian is computed for (one product each).
pub const MAX_DENSE_ENTRIES: usize = 400;

/// One eigen-direction of the scaled Hessian.
#[derive(Clone, Debug, Serialize)]
pub struct Direction {
    /// Its eigenvalue (curvature of J per relative change of the parameters, squared).
    pub eigenvalue: f64,
    /// The unit direction over the entries (in scaled variables).
    pub vector: Vec<f64>,
}

/// The Laplace approximation of the posterior of the parameters of a least-squares misfit.
#[derive(Clone, Debug, Serialize)]
pub struct Posterior {
    /// The observations' noise σ (in `unit`): given, or estimated as √(2J/w / (m − n)) from
    /// the misfit at the optimum (m observations, n entries).
    pub noise: f64,
    /// The unit of the observations and of `noise` (K for temperature sensors, N for
    /// reaction forces, Pa for stress curves).
    pub unit: &'static str,
    /// Whether `noise` was estimated from the residuals.
    pub noise_estimated: bool,
    /// The number of observations (a misfit's sensors, a fit's data points).
    pub sensors: usize,
    /// Posterior covariance w σ² H⁻¹ (row-major over the entries, in the parameters' units).
    pub covariance: Vec<Vec<f64>>,
    /// √diag(covariance).
    pub std_dev: Vec<f64>,
    /// The correlation matrix of the covariance.
    pub correlation: Vec<Vec<f64>>,
    /// The Gauss–Newton approximation of the same: σ² (GᵀG)⁻¹, its standard deviations.
    pub gauss_newton_std_dev: Vec<f64>,
    /// The Gauss–Newton covariance (row-major; NaN when GᵀG is singular).
    pub gauss_newton_covariance: Vec<Vec<f64>>,
    /// max |H − w GᵀG| / max |H| (in scaled variables): how far the fit is from the
    /// linear-Gaussian case, where the two agree.
    pub gauss_newton_difference: f64,
}

/// What `gradfem hessian` reports.
#[derive(Clone, Debug, Serialize)]
pub struct HessianReport {
    /// The registered entries, in the order of the rows (a per-element field's entries as
    /// `name[i]`).
    pub entries: Vec<String>,
    /// The parameters' values.
    pub values: Vec<f64>,
    /// The scale sᵢ of each entry (its magnitude; 1 where zero).
    pub scale: Vec<f64>,
    /// J.
    pub objective: f64,
    /// dJ/dp.
    pub gradient: Vec<f64>,
    /// d²J/dp², row-major (rows as arrays).
    pub hessian: Vec<Vec<f64>>,
    /// max |H − Hᵀ| / max |H|: the symmetry of the computed Hessian (round-off level).
    pub asymmetry: f64,
    /// Eigen-directions of the scaled Hessian S H S, smallest eigenvalue first.
    pub eigen: Vec<Direction>,
    /// Whether the Hessian is positive definite (every eigenvalue above 1e-12 of the largest).
    pub positive_definite: bool,
    /// For a sensor misfit: the Laplace posterior.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub posterior: Option<Posterior>,
    /// Hessian-vector products computed.
    pub hessian_products: usize,
    /// Wall time of the products \[s\].
    pub seconds: f64,
}

/// A least-squares objective J = w · ½ Σ rᵢ²: its weight, the unit of the residuals and the
/// sensitivities G = dr/dp (one row per observation, over the registered entries).
struct LeastSquares {
    weight: f64,
    unit: &'static str,
    sensitivities: Vec<Vec<f64>>,
}

/// The objective as a least-squares misfit, when it is one: a thermal sensor misfit alone
/// (G by one tangent-linear solve per entry), or finite-strain force or displacement curves
/// fitted by misfit terms of one weight w (J = w Σ (q_k − m_k)² = 2w · ½ Σ r², G by one
/// transposed solve per observation, [`HyperelasticField::quantity_jacobian`]).
///
/// [`HyperelasticField::quantity_jacobian`]: gradfem_coupling::fields::hyperelastic::HyperelasticField::quantity_jacobian
fn least_squares(
    problem: &mut Problem,
    pv: &ParamVector,
) -> Result<Option<LeastSquares>, RunError> {
    let n = pv.len();
    if problem.is_transient() {
        return transient_least_squares(problem, pv);
    }
    let sensor_term = match problem.thermal().objective.as_slice() {
        [t] => match &t.kind {
            ObjectiveKind::Misfit { sensors } => Some((t.weight, sensors.clone())),
            _ => None,
        },
        _ => None,
    };
    if let Some((weight, sensors)) = sensor_term {
        let thermal = problem.thermal();
        let locations = sensors
            .iter()
            .map(|s| gradfem_thermal::objective::locate(&thermal.model, [s[0], s[1], s[2]]))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| RunError::Setup(format!("sensor misfit: {e}")))?;
        let nodes: Vec<Vec<usize>> =
            locations.iter().map(|l| thermal.model.element_nodes(l.element).to_vec()).collect();
        let mut g = vec![vec![0.0; n]; sensors.len()];
        let mut e = vec![0.0; n];
        for j in 0..n {
            e[j] = 1.0;
            let dt = problem.tangent_flat("thermal", &e)?;
            e[j] = 0.0;
            for (s, (loc, nn)) in locations.iter().zip(&nodes).enumerate() {
                g[s][j] = nn.iter().zip(&loc.shape).map(|(&a, &sh)| sh * dt[a]).sum();
            }
        }
        return Ok(Some(LeastSquares { weight, unit: "K", sensitivities: g }));
    }
    let Some(h) = problem.hyperelastic() else { return Ok(None) };
    let misfits: Vec<(usize, f64)> = h.misfit_terms().iter().map(|m| (m.0, m.2)).collect();
    let weight = misfits.first().map(|m| m.1);
    let one_weight = misfits.iter().all(|m| Some(m.1) == weight);
    if misfits.is_empty() || misfits.len() != h.objective.terms.len() || !one_weight {
        return Ok(None);
    }
    // Nothing else may weigh in J (another field's objective terms).
    let (j_path, _) = h.objective_terms()?;
    let (j_all, _) = problem.objective_terms()?;
    if (j_all - j_path).abs() > 1e-12 * j_all.abs().max(f64::MIN_POSITIVE) {
        return Ok(None);
    }
    let h = problem.hyperelastic().expect("checked");
    let (_, rows) = h.quantity_jacobian(problem.registry())?;
    let sensitivities =
        misfits.iter().flat_map(|&(t, _)| rows[t].iter().map(|g| g.flatten(pv))).collect();
    let unit = if h
        .objective
        .terms
        .iter()
        .all(|t| matches!(t, PathTerm::Misfit { quantity: Quantity::Reaction { .. }, .. }))
    {
        "N"
    } else {
        "the curves' units"
    };
    Ok(Some(LeastSquares { weight: 2.0 * weight.expect("a misfit"), unit, sensitivities }))
}

/// A transient problem's objective as a least-squares misfit, when its time rule is one:
/// J = ½ Σₖ (j(tₖ) − dₖ)² over a measured series (`[transient] objective = "misfit"`), G by
/// one tangent-linear run per entry.
fn transient_least_squares(
    problem: &mut Problem,
    pv: &ParamVector,
) -> Result<Option<LeastSquares>, RunError> {
    if !matches!(problem.time_rule(), Some(TimeRule::Misfit(_))) {
        return Ok(None);
    }
    let n = pv.len();
    let mut columns = Vec::with_capacity(n);
    let mut e = vec![0.0; n];
    for j in 0..n {
        e[j] = 1.0;
        let (dj, times) = problem.state_value_tangents(&e)?;
        e[j] = 0.0;
        let rule = problem.time_rule().expect("checked");
        columns.push(rule.misfit_tangents(&dj, &times)?.expect("a misfit"));
    }
    let m = columns.first().map_or(0, Vec::len);
    let sensitivities = (0..m).map(|k| columns.iter().map(|c| c[k]).collect()).collect();
    // The series is in the objective terms' unit: kelvin when the thermal field is alone and
    // every term is a temperature (a point value, an average or a smooth maximum) of weight 1.
    let thermal_alone = problem.field_names().len() == 1;
    let terms = &problem.thermal().objective;
    let kelvin = thermal_alone
        && !terms.is_empty()
        && terms.iter().all(|t| {
            t.weight == 1.0
                && matches!(
                    t.kind,
                    ObjectiveKind::Point { .. }
                        | ObjectiveKind::Average { .. }
                        | ObjectiveKind::Max { .. }
                        | ObjectiveKind::Peak { .. }
                )
        });
    let unit = if kelvin { "K" } else { "the series' unit" };
    Ok(Some(LeastSquares { weight: 1.0, unit, sensitivities }))
}

/// The inverse of a symmetric positive definite matrix from its eigen-decomposition.
fn inverse_from_eigen(values: &[f64], vectors: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let n = values.len();
    (0..n)
        .map(|i| {
            (0..n)
                .map(|j| (0..n).map(|k| vectors[k][i] * vectors[k][j] / values[k]).sum())
                .collect()
        })
        .collect()
}

/// Compute the report: the dense Hessian by products, its eigen-directions and, for a sensor
/// misfit, the Laplace posterior with noise `noise` (estimated from the residuals when `None`).
/// `progress` sees the count of products done.
pub fn compute(
    problem: &mut Problem,
    noise: Option<f64>,
    mut progress: impl FnMut(usize, usize),
) -> Result<HessianReport, RunError> {
    let pv = ParamVector::all(problem.registry());
    let n = pv.len();
    if n == 0 {
        return Err(RunError::Setup(
            "`gradfem hessian` needs registered parameters ([parameters] register)".into(),
        ));
    }
    if n > MAX_DENSE_ENTRIES {
        return Err(RunError::Setup(format!(
            "the dense Hessian of {n} entries would take {n} Hessian-vector products; \
             `gradfem hessian` computes it for up to {MAX_DENSE_ENTRIES} (register fewer, or use \
             the library's `hvp` for products along chosen directions)"
        )));
    }
    if let Some(s) = noise
        && !(s.is_finite() && s > 0.0)
    {
        return Err(RunError::Setup(format!("--noise {s}: the sensors' noise must be positive")));
    }
    let values = pv.gather(problem.registry());
    let (objective, grad, _) = problem.gradient()?;
    let gradient = grad.flatten(&pv);
    let started = std::time::Instant::now();
    let hessian = problem.dense_hessian(|k| progress(k, n))?;
    let seconds = started.elapsed().as_secs_f64();
    let entries: Vec<String> = (0..n).map(|i| pv.entry_name(i)).collect();
    let misfit = match least_squares(problem, &pv)? {
        Some(LeastSquares { weight, unit, sensitivities: g }) => {
            let m = g.len();
            let (sigma, estimated) = match noise {
                Some(s) => (s, false),
                None if m > n => (((2.0 * objective / weight) / (m - n) as f64).sqrt(), true),
                None => {
                    return Err(RunError::Setup(format!(
                        "{m} observations for {n} parameter entries: the noise cannot be \
                         estimated from the residuals; give it (in {unit}) with --noise"
                    )));
                }
            };
            let gauss_newton = (0..n * n)
                .map(|k| (0..m).map(|s| g[s][k / n] * g[s][k % n]).sum::<f64>())
                .collect();
            Some(Misfit {
                weight,
                noise: sigma,
                noise_estimated: estimated,
                observations: m,
                unit,
                gauss_newton,
            })
        }
        None => None,
    };
    Ok(analyze(entries, values, objective, gradient, &hessian, misfit, n, seconds))
}

/// The scale of each entry for the analysis in scaled variables: its magnitude (1 where zero).
fn scales(values: &[f64]) -> Vec<f64> {
    values.iter().map(|v| if *v != 0.0 { v.abs() } else { 1.0 }).collect()
}

/// A least-squares misfit J = w · ½ Σ r², for its Laplace posterior.
#[derive(Clone, Debug)]
pub struct Misfit {
    /// w.
    pub weight: f64,
    /// The observations' noise σ (the unit of r).
    pub noise: f64,
    /// Whether `noise` was estimated from the residuals.
    pub noise_estimated: bool,
    /// The number of observations.
    pub observations: usize,
    /// The unit of the observations (and of `noise`).
    pub unit: &'static str,
    /// The Gauss–Newton matrix GᵀG (G = dr/dp, n × n row-major, the parameters' units).
    pub gauss_newton: Vec<f64>,
}

/// The report of a dense Hessian (row-major, n × n over `entries` at `values`): symmetry,
/// eigen-directions in scaled variables and, for a least-squares `misfit` whose Hessian is
/// positive definite, the Laplace posterior w σ² H⁻¹ beside Gauss–Newton's σ² (GᵀG)⁻¹.
/// Used by `gradfem hessian` and by `gradfem identify`.
pub fn analyze(
    entries: Vec<String>,
    values: Vec<f64>,
    objective: f64,
    gradient: Vec<f64>,
    hessian: &[f64],
    misfit: Option<Misfit>,
    hessian_products: usize,
    seconds: f64,
) -> HessianReport {
    let n = values.len();
    let scale = scales(&values);
    let h = |i: usize, j: usize| hessian[i * n + j];
    let h_max = hessian.iter().fold(0.0f64, |a, v| a.max(v.abs())).max(f64::MIN_POSITIVE);
    let scaled: Vec<f64> = (0..n * n).map(|k| scale[k / n] * hessian[k] * scale[k % n]).collect();
    let s_max = scaled.iter().fold(0.0f64, |a, v| a.max(v.abs())).max(f64::MIN_POSITIVE);
    let asymmetry = (0..n)
        .flat_map(|i| (0..n).map(move |j| (i, j)))
        .fold(0.0f64, |a, (i, j)| a.max((h(i, j) - h(j, i)).abs()))
        / h_max;
    let eig = symmetric_eigen(&scaled, n);
    let largest = eig.values.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    let positive_definite = eig.values.iter().all(|&v| v > 1e-12 * largest);
    let eigen = eig
        .values
        .iter()
        .zip(&eig.vectors)
        .map(|(&eigenvalue, vector)| Direction { eigenvalue, vector: vector.clone() })
        .collect();
    let posterior = misfit.filter(|_| positive_definite).map(|m| {
        // J = w · ½ Σ r² and the negative log-likelihood Σ r²/(2σ²) = J/(w σ²): its Hessian is
        // H/(w σ²), so C = w σ² H⁻¹; Gauss–Newton's H ≈ w GᵀG gives σ² (GᵀG)⁻¹.
        let inv_scaled = inverse_from_eigen(&eig.values, &eig.vectors);
        let variance = m.noise * m.noise;
        let factor = variance * m.weight;
        let covariance: Vec<Vec<f64>> = (0..n)
            .map(|i| (0..n).map(|j| factor * scale[i] * inv_scaled[i][j] * scale[j]).collect())
            .collect();
        let std_dev: Vec<f64> = (0..n).map(|i| covariance[i][i].sqrt()).collect();
        let correlation = (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| (covariance[i][j] / (std_dev[i] * std_dev[j])).clamp(-1.0, 1.0))
                    .collect()
            })
            .collect();
        let gtg: Vec<f64> =
            (0..n * n).map(|k| scale[k / n] * m.gauss_newton[k] * scale[k % n]).collect();
        let gauss_newton_difference =
            (0..n * n).fold(0.0f64, |a, k| a.max((scaled[k] - m.weight * gtg[k]).abs())) / s_max;
        let gn = symmetric_eigen(&gtg, n);
        let gn_pd = gn.values.iter().all(|&v| v > 1e-12 * gn.values[n - 1].abs());
        let gauss_newton_covariance: Vec<Vec<f64>> = if gn_pd {
            let inv = inverse_from_eigen(&gn.values, &gn.vectors);
            (0..n)
                .map(|i| (0..n).map(|j| variance * scale[i] * inv[i][j] * scale[j]).collect())
                .collect()
        } else {
            vec![vec![f64::NAN; n]; n]
        };
        let gauss_newton_std_dev = (0..n).map(|i| gauss_newton_covariance[i][i].sqrt()).collect();
        Posterior {
            noise: m.noise,
            unit: m.unit,
            noise_estimated: m.noise_estimated,
            sensors: m.observations,
            covariance,
            std_dev,
            correlation,
            gauss_newton_std_dev,
            gauss_newton_covariance,
            gauss_newton_difference,
        }
    });
    HessianReport {
        entries,
        values,
        scale,
        objective,
        gradient,
        hessian: (0..n).map(|i| hessian[i * n..(i + 1) * n].to_vec()).collect(),
        asymmetry,
        eigen,
        positive_definite,
        posterior,
        hessian_products,
        seconds,
    }
}

/// The most parameters drawn in the posterior plot (the first ones, in registration order).
pub const MAX_PLOTTED: usize = 5;

/// Draw the posterior: marginal densities on the diagonal and the 1σ and 2σ ellipses of every
/// pair below it, the Laplace posterior (exact Hessian) in blue and Gauss–Newton in red.
pub fn plot_posterior(report: &HessianReport, file: &std::path::Path) -> Result<(), String> {
    use plotters::prelude::*;
    let Some(post) = &report.posterior else {
        return Err("no posterior to plot (the objective is not a sensor misfit)".into());
    };
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let k = report.entries.len().min(MAX_PLOTTED);
    let side = 260u32;
    let root =
        BitMapBackend::new(file, (side * k as u32, side * k as u32 + 30)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let root = root
        .titled("Laplace posterior (blue) and Gauss–Newton (red)", ("sans-serif", 18))
        .map_err(|x| e(&x))?;
    let panels = root.split_evenly((k, k));
    let blue = RGBColor(31, 119, 180);
    let red = RGBColor(214, 39, 40);
    let span = |i: usize| {
        let s = post.std_dev[i].max(post.gauss_newton_std_dev[i].abs().min(f64::MAX));
        let s = if s.is_finite() && s > 0.0 { s } else { report.scale[i] * 1e-3 };
        (report.values[i] - 3.5 * s)..(report.values[i] + 3.5 * s)
    };
    for i in 0..k {
        for j in 0..k {
            let panel = &panels[i * k + j];
            if j > i {
                continue;
            }
            let x_range = span(j);
            if i == j {
                let density = |sd: f64, x: f64| {
                    let z = (x - report.values[i]) / sd;
                    (-0.5 * z * z).exp() / (sd * (2.0 * std::f64::consts::PI).sqrt())
                };
                let peak = 1.05
                    / (post.std_dev[i].min(post.gauss_newton_std_dev[i].max(0.0))
                        * (2.0 * std::f64::consts::PI).sqrt());
                let peak = if peak.is_finite() {
                    peak
                } else {
                    density(post.std_dev[i], report.values[i]) * 1.05
                };
                let mut chart = ChartBuilder::on(panel)
                    .margin(8)
                    .x_label_area_size(30)
                    .y_label_area_size(10)
                    .caption(&report.entries[i], ("sans-serif", 13))
                    .build_cartesian_2d(x_range.clone(), 0.0..peak)
                    .map_err(|x| e(&x))?;
                chart
                    .configure_mesh()
                    .disable_y_mesh()
                    .disable_y_axis()
                    .x_labels(3)
                    .draw()
                    .map_err(|x| e(&x))?;
                let xs: Vec<f64> = (0..=200)
                    .map(|t| x_range.start + (x_range.end - x_range.start) * t as f64 / 200.0)
                    .collect();
                for (sd, colour) in [(post.std_dev[i], blue), (post.gauss_newton_std_dev[i], red)] {
                    if sd.is_finite() && sd > 0.0 {
                        chart
                            .draw_series(LineSeries::new(
                                xs.iter().map(|&x| (x, density(sd, x))),
                                colour.stroke_width(2),
                            ))
                            .map_err(|x| e(&x))?;
                    }
                }
            } else {
                let mut chart = ChartBuilder::on(panel)
                    .margin(8)
                    .x_label_area_size(30)
                    .y_label_area_size(50)
                    .build_cartesian_2d(x_range, span(i))
                    .map_err(|x| e(&x))?;
                chart.configure_mesh().x_labels(3).y_labels(3).draw().map_err(|x| e(&x))?;
                for (cov, colour) in
                    [(&post.covariance, blue), (&post.gauss_newton_covariance, red)]
                {
                    // The pair's 2×2 covariance: x = entry j, y = entry i.
                    let (a, b, c) = (cov[j][j], cov[j][i], cov[i][i]);
                    if !(a.is_finite() && b.is_finite() && c.is_finite()) {
                        continue;
                    }
                    let eig = symmetric_eigen(&[a, b, b, c], 2);
                    if eig.values.iter().any(|v| *v <= 0.0) {
                        continue;
                    }
                    for radius in [1.0, 2.0] {
                        let pts: Vec<(f64, f64)> = (0..=120)
                            .map(|t| {
                                let th = 2.0 * std::f64::consts::PI * t as f64 / 120.0;
                                let (u, v) = (
                                    radius * eig.values[0].sqrt() * th.cos(),
                                    radius * eig.values[1].sqrt() * th.sin(),
                                );
                                (
                                    report.values[j]
                                        + u * eig.vectors[0][0]
                                        + v * eig.vectors[1][0],
                                    report.values[i]
                                        + u * eig.vectors[0][1]
                                        + v * eig.vectors[1][1],
                                )
                            })
                            .collect();
                        chart
                            .draw_series(LineSeries::new(
                                pts,
                                colour.stroke_width(if radius == 1.0 { 2 } else { 1 }),
                            ))
                            .map_err(|x| e(&x))?;
                    }
                }
            }
        }
    }
    root.present().map_err(|x| e(&x))
}
