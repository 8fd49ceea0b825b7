//! Identification of two conductivities from interior temperature sensors.
//!
//! Source problem: the classical inverse heat-conduction parameter estimation of Beck & Arnold,
//! *Parameter Estimation in Engineering and Science* (1977), ch. 7, and Özişik & Orlande,
//! *Inverse Heat Transfer* (2000), ch. 2 (estimation of thermal conductivity by least squares
//! on sensor data): minimize ½ Σ (T(x_s; k) − d_s)² over k.
//!
//! Set-up: box [0,1]×[0,0.5]×[0,0.5] of Hex20 cells split at x = 0.5 into volume groups "left"
//! (true k = 2) and "right" (true k = 5), uniform source Q = 10³ W/m³, T = 300 K at x = 0,
//! convection h = 20, T∞ = 300 at x = 1, other faces insulated. Twenty interior sensors at
//! deterministic pseudo-random positions; data = the true solution plus, in the noisy case,
//! Gaussian noise of 0.5 % of each sensor's temperature rise (SplitMix64 + Box–Muller, no rand
//! crate). L-BFGS-B (`gradfem_solvers::optimize::minimize_lbfgsb`) with bounds [0.1, 100] from
//! k = (1, 1), gradients from the adjoint of `ThermalProblem`.

mod common;

use gradfem::run::{LinearChoice, RunError};
use gradfem::thermal::ThermalProblem;
use gradfem_mesh::CellType;
use gradfem_solvers::optimize::{Control, LbfgsbParams, minimize_lbfgsb};
use gradfem_solvers::params::ParamVector;
use gradfem_thermal::{BcKind, ObjectiveKind, ObjectiveTerm};
use rstest::rstest;

const K_TRUE: [f64; 2] = [2.0, 5.0];
const T_REF: f64 = 300.0;

fn problem(k: [f64; 2], sensors: Vec<[f64; 4]>, weight: f64) -> ThermalProblem {
    let mut mesh = common::box_of([0.0; 3], [1.0, 0.5, 0.5], [6, 3, 3], CellType::Hex20);
    common::add_volume_group(&mut mesh, "left", 11, |c| c[0] < 0.5);
    common::add_volume_group(&mut mesh, "right", 12, |c| c[0] >= 0.5);
    let regions = [common::region("left", k[0], 1e3), common::region("right", k[1], 1e3)];
    let bcs = [
        common::bc("xmin", BcKind::Temperature { value: T_REF }),
        common::bc("xmax", BcKind::Convection { h: 20.0, t_inf: T_REF }),
    ];
    let objective = vec![ObjectiveTerm { weight, kind: ObjectiveKind::Misfit { sensors } }];
    ThermalProblem::new(mesh, &regions, &bcs, objective, LinearChoice::Auto).expect("set-up")
}

/// Synthetic data: 20 sensors at pseudo-random interior points, the true temperatures there,
/// plus noise of `noise` × (T − T_ref).
fn synthetic_sensors(noise: f64) -> Vec<[f64; 4]> {
    let mut rng = common::SplitMix(2024);
    let points: Vec<[f64; 3]> = (0..20)
        .map(|_| {
            [0.05 + 0.9 * rng.uniform(), 0.05 + 0.4 * rng.uniform(), 0.05 + 0.4 * rng.uniform()]
        })
        .collect();
    // Probe the true field with point objectives (one solve; the point values are the terms).
    let mut truth = problem(K_TRUE, vec![], 1.0);
    truth.objective = points
        .iter()
        .map(|&point| ObjectiveTerm { weight: 1.0, kind: ObjectiveKind::Point { point } })
        .collect();
    truth.solve().expect("solve");
    let eval = truth.evaluate_objective(false).expect("probe");
    points
        .iter()
        .zip(&eval.terms)
        .map(|(p, &t)| [p[0], p[1], p[2], t + noise * (t - T_REF) * rng.normal()])
        .collect()
}

#[rstest]
#[case::exact_data(0.0, 1e-6)]
#[case::noisy_data(0.005, 0.02)]
fn recovers_two_conductivities(#[case] noise: f64, #[case] tol: f64) {
    let sensors = synthetic_sensors(noise);
    // Scale the misfit so that J is O(1) at the start: 1 / Σ (d − T_ref)².
    let scale: f64 = sensors.iter().map(|s| (s[3] - T_REF).powi(2)).sum();
    let mut p = problem([1.0, 1.0], sensors, 1.0 / scale);
    p.register("thermal.k.left", Some([0.1, 100.0])).expect("register");
    p.register("thermal.k.right", Some([0.1, 100.0])).expect("register");
    let pv = ParamVector::all(p.registry());
    let (lower, upper) = pv.bounds();
    let x0 = pv.gather(p.registry());
    // J is O(1) at the start; with noisy data the minimum is J ≈ 1e-5, where a projected
    // gradient much below 1e-8 changes J by less than its round-off (the line search then fails).
    let params = LbfgsbParams { gtol: 1e-8, ftol: 0.0, max_iterations: 200, ..Default::default() };
    let result = minimize_lbfgsb(
        |x: &[f64], g: &mut [f64]| -> Result<f64, RunError> {
            pv.scatter(p.registry_mut(), x)?;
            p.apply_parameters()?;
            let (j, grad, _) = p.gradient()?;
            g.copy_from_slice(&grad.flatten(&pv));
            Ok(j)
        },
        &x0,
        &lower,
        &upper,
        &params,
        |_| Control::Continue,
    )
    .expect("optimizer");
    assert!(result.status.is_converged(), "noise {noise}: {:?}", result.status);
    let hist: Vec<f64> = result.history.iter().map(|r| r.f).collect();
    eprintln!(
        "noise {noise}: k = {:?} after {} iterations, {} evaluations, status {:?}\n  J history {hist:?}",
        result.x, result.iterations, result.evaluations, result.status
    );
    for (k, kt) in result.x.iter().zip(K_TRUE) {
        let rel = (k - kt).abs() / kt;
        assert!(
            rel <= tol,
            "noise {noise}: recovered k = {k}, true {kt}: relative error {rel:.2e}"
        );
    }
    // Monotone decrease of the objective (Armijo line search), up to round-off.
    for w in hist.windows(2) {
        assert!(w[1] <= w[0] + 1e-14 * w[0].abs(), "objective rose: {hist:?}");
    }
    assert!(hist.len() >= 3 && hist[hist.len() - 1] < 1e-3 * hist[0], "{hist:?}");
    if noise == 0.0 {
        assert!(result.f < 1e-16, "exact data must be fitted exactly, J = {:e}", result.f);
    }
}
