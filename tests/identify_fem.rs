//! `gradfem identify` with finite-element experiments: recovery of the true parameters from
//! noise-free synthetic curves, the adjoint Jacobian against central differences, standard
//! errors that scale with the noise, the example's recorded data, and located errors for bad
//! identification files.

use std::path::{Path, PathBuf};

use gradfem::identify::{Identification, IdentifyReport};
use rstest::rstest;

const MU: f64 = 0.3e6;
const ALPHA: f64 = 2.5;
const KAPPA: f64 = 15e6;
/// Standard deviation of the example's force noise (N).
const NOISE_N: f64 = 0.05;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A compression (5 steps) or shear (4 steps) specimen on a small mesh, reading `csv`.
fn specimen(shear: bool, csv: &str, misfit: bool) -> String {
    let (lengths, bc, steps, direction) = if shear {
        ("[0.01, 0.01, 0.005]", "value = [4e-3, 0.0, 0.0]", 4, "[1.0, 0.0, 0.0]")
    } else {
        (
            "[0.01, 0.01, 0.004]",
            "value = [0.0, 0.0, -1.2e-3]\ncomponents = [\"z\"]",
            5,
            "[0.0, 0.0, -1.0]",
        )
    };
    let measured = if misfit { format!("measured = \"{csv}\"") } else { String::new() };
    format!(
        "[mesh]\nbox = {{ lengths = {lengths}, divisions = [2, 2, 1], cell = \"hex20\" }}\n\
         [[hyperelastic.material]]\ngroup = \"domain\"\nlaw = \"ogden\"\nmu = [{MU}]\n\
         alpha = [{ALPHA}]\nkappa = {KAPPA}\n\
         [[hyperelastic.bc]]\ngroup = \"zmin\"\nkind = \"fixed\"\n\
         [[hyperelastic.bc]]\ngroup = \"zmax\"\nkind = \"displacement\"\n{bc}\n\
         [hyperelastic]\nsteps = {steps}\n\
         [[objective]]\nkind = \"reaction\"\ngroup = \"zmax\"\ndirection = {direction}\n{measured}\n"
    )
}

fn write_curve(path: &Path, loads: &[f64], values: &[f64]) {
    let mut text = String::from("load_factor,value\n");
    for (s, v) in loads.iter().zip(values) {
        text += &format!("{s},{v:.17e}\n");
    }
    std::fs::write(path, text).unwrap();
}

fn parameter(name: &str, start: f64, bounds: [f64; 2]) -> String {
    format!(
        "[[parameter]]\nname = \"{name}\"\nstart = {start:e}\nbounds = [{:e}, {:e}]\n",
        bounds[0], bounds[1]
    )
}

fn experiments() -> &'static str {
    "[[experiment]]\nmode = \"fem\"\nname = \"compression\"\nproblem = \"compression.toml\"\n\
     [[experiment]]\nmode = \"fem\"\nname = \"shear\"\nproblem = \"shear.toml\"\n"
}

/// The fitted parameters (μ₁, α₁ and optionally κ) with their starting values.
fn parameters(start: &[f64]) -> String {
    let names =
        ["hyperelastic.mu1.domain", "hyperelastic.alpha1.domain", "hyperelastic.kappa.domain"];
    let bounds = [[1e4, 5e6], [0.5, 10.0], [1e6, 1e9]];
    start.iter().enumerate().map(|(i, &s)| parameter(names[i], s, bounds[i])).collect()
}

/// Two specimens in `dir` whose measured curves are the model at the true values plus
/// `noise(k)` times the model value (k counts the residuals); returns the noise-free curves.
fn synthetic(dir: &Path, noise: impl Fn(usize) -> f64) -> Vec<Vec<f64>> {
    for (shear, name) in [(false, "compression"), (true, "shear")] {
        std::fs::write(
            dir.join(format!("{name}.toml")),
            specimen(shear, &format!("{name}.csv"), true),
        )
        .unwrap();
        let loads: Vec<f64> =
            if shear { vec![0.25, 0.5, 0.75, 1.0] } else { vec![0.2, 0.4, 0.6, 0.8, 1.0] };
        write_curve(&dir.join(format!("{name}.csv")), &loads, &vec![0.0; loads.len()]);
    }
    let file = dir.join("true.toml");
    std::fs::write(&file, parameters(&[MU, ALPHA]) + experiments()).unwrap();
    let mut id = Identification::read(&file).unwrap();
    let curves = id.fem_mut().unwrap().curves(&[MU, ALPHA]).unwrap();
    let mut k = 0;
    for c in &curves {
        let noisy: Vec<f64> = c
            .model
            .iter()
            .map(|q| {
                k += 1;
                q * (1.0 + noise(k - 1))
            })
            .collect();
        write_curve(&dir.join(format!("{}.csv", c.experiment)), &c.load_factors, &noisy);
    }
    curves.into_iter().map(|c| c.model).collect()
}

fn fit(dir: &Path, start: &[f64]) -> (IdentifyReport, Vec<f64>) {
    let file = dir.join("fit.toml");
    std::fs::write(&file, parameters(start) + experiments()).unwrap();
    let mut id = Identification::read(&file).unwrap_or_else(|e| panic!("{e}"));
    id.run(|_| {}).unwrap_or_else(|e| panic!("{e}"))
}

#[rstest]
#[case::both_low(&[0.7 * MU, 0.7 * ALPHA])]
#[case::both_high(&[1.3 * MU, 1.3 * ALPHA])]
#[case::crossed(&[1.3 * MU, 0.7 * ALPHA])]
#[case::with_kappa(&[0.7 * MU, 1.3 * ALPHA, 1.3 * KAPPA])]
fn recovers_the_true_parameters_from_noise_free_data(#[case] start: &[f64]) {
    let dir = tempfile::tempdir().unwrap();
    let curves = synthetic(dir.path(), |_| 0.0);
    // The shear force is positive along the plate's motion, the compressive force too.
    assert!(curves.iter().flatten().all(|q| *q > 0.0), "{curves:?}");
    let (report, x) = fit(dir.path(), start);
    let truth = [MU, ALPHA, KAPPA];
    for (i, v) in x.iter().enumerate() {
        assert!(
            (v / truth[i] - 1.0).abs() < 1e-6,
            "parameter {i}: {v} against {}; {report:?}",
            truth[i]
        );
    }
    let info = report.fem.as_ref().unwrap();
    assert!(info.converged && info.iterations < 30, "{info:?}");
    assert_eq!(info.residuals, 9);
    for e in &report.experiments {
        assert!(e.rms_relative_error < 1e-7, "{e:?}");
        assert_eq!(e.mode, "fem");
    }
}

#[rstest]
#[case::two_parameters(&[0.8 * MU, 1.2 * ALPHA])]
#[case::with_kappa(&[1.1 * MU, 0.9 * ALPHA, 0.8 * KAPPA])]
fn the_adjoint_jacobian_equals_central_differences(#[case] x: &[f64]) {
    let dir = tempfile::tempdir().unwrap();
    synthetic(dir.path(), |k| 0.01 * (k as f64).sin());
    let file = dir.path().join("fit.toml");
    std::fs::write(&file, parameters(x) + experiments()).unwrap();
    let mut id = Identification::read(&file).unwrap();
    let fem = id.fem_mut().unwrap();
    let (r, jac) = fem.residuals_and_jacobian(x).unwrap();
    assert_eq!((r.len(), jac.len()), (9, 9));
    for j in 0..x.len() {
        let h = 1e-5 * x[j];
        let mut plus = x.to_vec();
        plus[j] += h;
        let mut minus = x.to_vec();
        minus[j] -= h;
        let rp = fem.residuals(&plus).unwrap();
        let rm = fem.residuals(&minus).unwrap();
        let column_max = jac.iter().map(|row| row[j].abs()).fold(0.0, f64::max);
        assert!(column_max > 0.0);
        for i in 0..r.len() {
            let fd = (rp[i] - rm[i]) / (2.0 * h);
            assert!(
                (fd - jac[i][j]).abs() <= 1e-6 * column_max,
                "residual {i}, parameter {j}: adjoint {} against differences {fd}",
                jac[i][j]
            );
        }
    }
}

/// The exact Hessian of Σ r² (second-order adjoint through each specimen's load steps) is the
/// derivative of the adjoint gradient 2 Jᵀr, and at a noisy fit the Laplace posterior it gives
/// is reported beside Gauss–Newton's.
#[test]
fn the_exact_hessian_is_the_derivative_of_the_gradient_and_gives_the_laplace_posterior() {
    let dir = tempfile::tempdir().unwrap();
    synthetic(dir.path(), |k| 0.02 * (k as f64 * 1.7).sin());
    let x = [1.1 * MU, 0.9 * ALPHA, 0.8 * KAPPA];
    let file = dir.path().join("fit.toml");
    std::fs::write(&file, parameters(&x) + experiments()).unwrap();
    let mut id = Identification::read(&file).unwrap();
    let fem = id.fem_mut().unwrap();
    let h = fem.exact_hessian(&x).unwrap();
    let gradient = |fem: &mut gradfem::identify_fem::FemIdentification, x: &[f64]| -> Vec<f64> {
        let (r, jac) = fem.residuals_and_jacobian(x).unwrap();
        (0..x.len())
            .map(|j| 2.0 * jac.iter().zip(&r).map(|(row, r)| row[j] * r).sum::<f64>())
            .collect()
    };
    let n = x.len();
    for j in 0..n {
        let step = 1e-5 * x[j];
        let mut plus = x.to_vec();
        plus[j] += step;
        let mut minus = x.to_vec();
        minus[j] -= step;
        let (gp, gm) = (gradient(fem, &plus), gradient(fem, &minus));
        for i in 0..n {
            let fd = (gp[i] - gm[i]) / (2.0 * step);
            let scale = (h[i * n + i].abs() * h[j * n + j].abs()).sqrt();
            assert!(
                (fd - h[i * n + j]).abs() <= 1e-6 * scale,
                "H[{i}][{j}] = {} against differences of the gradient {fd}",
                h[i * n + j]
            );
        }
    }
    let (report, _) = fit(dir.path(), &[0.7 * MU, 1.3 * ALPHA]);
    let laplace = report.laplace.as_ref().expect("a Laplace posterior");
    let post = laplace.posterior.as_ref().expect("positive definite at the fit");
    assert_eq!(post.sensors, 9);
    for (i, name) in ["hyperelastic.mu1.domain", "hyperelastic.alpha1.domain"].iter().enumerate() {
        assert_eq!(&laplace.entries[i], name);
        // The Gauss–Newton standard error of the report, and the Laplace one within 20 %:
        // the residuals are small, the data nearly linear in the parameters.
        let gn = report.std_errors[*name];
        assert!((post.gauss_newton_std_dev[i] / gn - 1.0).abs() < 1e-6, "{name}");
        assert!((post.std_dev[i] / gn - 1.0).abs() < 0.2, "{name}: {} vs {gn}", post.std_dev[i]);
    }
}

#[test]
fn standard_errors_match_the_scatter_of_repeated_fits() {
    // Independent force noise of one standard deviation on every point, the model the
    // Gauss–Newton covariance σ² (JᵀJ)⁻¹ assumes: over 16 noise draws the fitted values
    // scatter as the reported standard errors say.
    let n = 16;
    let dir = tempfile::tempdir().unwrap();
    let q: Vec<f64> = synthetic(dir.path(), |_| 0.0).into_iter().flatten().collect();
    let (mut fits, mut errors) = (Vec::new(), Vec::new());
    for seed in 0..n {
        let z = normal_noise(100 + seed, q.len());
        synthetic(dir.path(), |k| NOISE_N * z[k] / q[k]);
        let (report, x) = fit(dir.path(), &[0.7 * MU, 1.3 * ALPHA]);
        errors.push([
            report.std_errors["hyperelastic.mu1.domain"],
            report.std_errors["hyperelastic.alpha1.domain"],
        ]);
        fits.push(x);
    }
    for (j, truth) in [MU, ALPHA].into_iter().enumerate() {
        let scatter = (fits.iter().map(|x| (x[j] - truth).powi(2)).sum::<f64>() / n as f64).sqrt();
        let se = errors.iter().map(|e| e[j]).sum::<f64>() / n as f64;
        assert!(
            (0.6..1.5).contains(&(scatter / se)),
            "parameter {j}: scatter {scatter}, mean standard error {se}"
        );
    }
}

#[test]
fn standard_errors_scale_with_the_noise() {
    // One noise pattern at three amplitudes: σ and the standard errors are proportional to it
    // (to first order), and the fit stays within a few standard errors of the truth.
    let pattern = |k: usize| [0.8, -1.1, 0.3, 1.4, -0.6, -0.9, 1.2, -0.2, 0.5][k];
    let mut errors = Vec::new();
    for eps in [1e-2, 1e-3, 1e-4] {
        let dir = tempfile::tempdir().unwrap();
        synthetic(dir.path(), |k| eps * pattern(k));
        let (report, x) = fit(dir.path(), &[0.7 * MU, 1.3 * ALPHA]);
        let se: Vec<f64> = report.std_errors.values().copied().collect();
        assert!(se.iter().all(|v| v.is_finite() && *v > 0.0), "{report:?}");
        for (v, (t, name)) in x.iter().zip([(MU, "mu1"), (ALPHA, "alpha1")]) {
            let s = report.std_errors[&format!("hyperelastic.{name}.domain")];
            assert!((v - t).abs() < 4.0 * s, "{name}: {v} against {t} ± {s}");
        }
        errors.push((report.sigma, se));
    }
    for w in errors.windows(2) {
        let ratio = w[0].0 / w[1].0;
        assert!((ratio / 10.0 - 1.0).abs() < 0.05, "σ ratio {ratio}");
        for (a, b) in w[0].1.iter().zip(&w[1].1) {
            assert!((a / b / 10.0 - 1.0).abs() < 0.1, "standard error ratio {}", a / b);
        }
    }
}

/// Standard normal numbers from splitmix64 by Box–Muller: the noise of the example's data.
fn normal_noise(seed: u64, n: usize) -> Vec<f64> {
    let mut state = seed;
    let mut uniform = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u1, u2) = (uniform(), uniform());
            (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        })
        .collect()
}

/// The example's measured forces: the model at the true values plus 0.05 N × z, z from
/// `normal_noise(6, ·)` over the compression then the shear steps, rounded to 0.1 mN.
fn example_data() -> Vec<(String, Vec<f64>, Vec<f64>)> {
    let mut id = Identification::read(&root().join("examples/pad_identify.toml")).unwrap();
    let curves = id.fem_mut().unwrap().curves(&[MU, ALPHA]).unwrap();
    let z = normal_noise(6, curves.iter().map(|c| c.model.len()).sum());
    let mut k = 0;
    curves
        .into_iter()
        .map(|c| {
            let noisy = c
                .model
                .iter()
                .map(|q| {
                    k += 1;
                    ((q + NOISE_N * z[k - 1]) * 1e4).round() / 1e4
                })
                .collect();
            (c.experiment, c.load_factors, noisy)
        })
        .collect()
}

fn read_csv(path: &Path) -> Vec<[f64; 2]> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .skip(1)
        .map(|l| {
            let (a, b) = l.split_once(',').unwrap();
            [a.trim().parse().unwrap(), b.trim().parse().unwrap()]
        })
        .collect()
}

#[test]
fn the_example_data_are_the_stated_model_and_noise() {
    for (name, loads, values) in example_data() {
        let rows = read_csv(&root().join(format!("examples/pad_identify_{name}.csv")));
        assert_eq!(rows.len(), loads.len(), "{name}");
        for ((row, s), v) in rows.iter().zip(&loads).zip(&values) {
            assert_eq!(row[0], *s, "{name}");
            assert!(
                (row[1] - v).abs() < 1.5e-4,
                "{name} at {s}: {} recorded, {v} regenerated",
                row[1]
            );
        }
    }
}

/// Writes the example's CSV files from the stated true values and noise:
/// `cargo test --release -p gradfem --test identify_fem -- --ignored regenerate`.
#[test]
#[ignore = "rewrites examples/pad_identify_*.csv"]
fn regenerate_the_example_data() {
    for (name, loads, values) in example_data() {
        let mut text = format!(
            "# Force (N) of pad_identify_{name}.toml at each load factor, synthetic: computed by \
             gradfem with Ogden\n# mu1 = 0.3 MPa, alpha1 = 2.5, kappa = 15 MPa, plus 0.05 N × z, \
             z standard normal from splitmix64\n# with seed 6 by Box-Muller over the compression \
             then the shear steps (tests/identify_fem.rs),\n# rounded to 0.1 mN.\n\
             load_factor,force_N\n"
        );
        for (s, v) in loads.iter().zip(&values) {
            text += &format!("{s},{v:.4}\n");
        }
        std::fs::write(root().join(format!("examples/pad_identify_{name}.csv")), text).unwrap();
    }
}

/// Errors of identification files: each names the file, and the problem file where it is at
/// fault.
#[rstest]
#[case::missing_problem(
    "[[parameter]]\nname = \"hyperelastic.mu1.domain\"\nbounds = [1e4, 1e7]\n\
     [[experiment]]\nmode = \"fem\"\nproblem = \"missing.toml\"\n",
    &["missing.toml"]
)]
#[case::no_misfit(
    "[[parameter]]\nname = \"hyperelastic.mu1.domain\"\nbounds = [1e4, 1e7]\n\
     [[experiment]]\nmode = \"fem\"\nproblem = \"plain.toml\"\n",
    &["plain.toml", "measured"]
)]
#[case::unknown_parameter(
    "[[parameter]]\nname = \"hyperelastic.nu1.domain\"\n\
     [[experiment]]\nmode = \"fem\"\nproblem = \"compression.toml\"\n",
    &["hyperelastic.nu1.domain", "identify_me.toml:2:8:", "hyperelastic.mu1.domain, hyperelastic.alpha1.domain"]
)]
#[case::start_outside_bounds(
    "[[parameter]]\nname = \"hyperelastic.mu1.domain\"\nstart = 2e7\nbounds = [1e4, 1e7]\n\
     [[experiment]]\nmode = \"fem\"\nproblem = \"compression.toml\"\n",
    &["hyperelastic.mu1.domain", "outside its bounds"]
)]
#[case::bounds_not_increasing(
    "[[parameter]]\nname = \"hyperelastic.kappa.domain\"\nbounds = [1e8, 1e6]\n\
     [[experiment]]\nmode = \"fem\"\nproblem = \"compression.toml\"\n",
    &["hyperelastic.kappa.domain", "increasing"]
)]
#[case::unstable_bounds(
    "[[parameter]]\nname = \"hyperelastic.alpha1.domain\"\nstart = 2.0\nbounds = [-3.0, 5.0]\n\
     [[experiment]]\nmode = \"fem\"\nproblem = \"compression.toml\"\n",
    &["hyperelastic.alpha1.domain", "μ_p α_p > 0"]
)]
#[case::sign_against_the_partner(
    "[[parameter]]\nname = \"hyperelastic.alpha1.domain\"\nstart = -2.0\nbounds = [-5.0, -0.5]\n\
     [[experiment]]\nmode = \"fem\"\nproblem = \"compression.toml\"\n",
    &["hyperelastic.mu1.domain", "μ_p α_p > 0"]
)]
#[case::ogden_term_without_bounds(
    "[[parameter]]\nname = \"hyperelastic.mu1.domain\"\n\
     [[experiment]]\nmode = \"fem\"\nproblem = \"compression.toml\"\n",
    &["hyperelastic.mu1.domain", "bounds"]
)]
#[case::no_parameters(
    "[[experiment]]\nmode = \"fem\"\nproblem = \"compression.toml\"\n",
    &["[[parameter]]"]
)]
#[case::mixed_levels(
    "[[parameter]]\nname = \"hyperelastic.mu1.domain\"\nbounds = [1e4, 1e7]\n\
     [[experiment]]\nmode = \"fem\"\nproblem = \"compression.toml\"\n\
     [[experiment]]\nmode = \"uniaxial\"\nfile = \"u.csv\"\n",
    &["cannot be mixed"]
)]
#[case::duplicate_experiment_names(
    "[[parameter]]\nname = \"hyperelastic.mu1.domain\"\nbounds = [1e4, 1e7]\n\
     [[experiment]]\nname = \"pad\"\nmode = \"fem\"\nproblem = \"compression.toml\"\n\
     [[experiment]]\nname = \"pad\"\nmode = \"fem\"\nproblem = \"compression.toml\"\n",
    &["'pad'", "distinct"]
)]
#[case::problem_without_hyperelastic(
    "[[parameter]]\nname = \"hyperelastic.mu1.domain\"\nbounds = [1e4, 1e7]\n\
     [[experiment]]\nmode = \"fem\"\nproblem = \"thermal.toml\"\n",
    &["thermal.toml", "[hyperelastic]"]
)]
fn bad_fem_identification_files_are_named_errors(#[case] text: &str, #[case] want: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("compression.toml"), specimen(false, "compression.csv", true)).unwrap();
    write_curve(&d.join("compression.csv"), &[0.2, 0.4, 0.6, 0.8, 1.0], &[1.0; 5]);
    std::fs::write(d.join("plain.toml"), specimen(false, "compression.csv", false)).unwrap();
    std::fs::write(
        d.join("thermal.toml"),
        std::fs::read_to_string(root().join("examples/heat_sink.toml")).unwrap(),
    )
    .unwrap();
    let file = d.join("identify_me.toml");
    std::fs::write(&file, text).unwrap();
    let err = match Identification::read(&file) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("identify_me.toml"), "the identification file is named: {err}");
    for w in want {
        assert!(err.contains(w), "expected '{w}' in: {err}");
    }
}

#[test]
fn every_combination_of_starting_values_is_tried() {
    let dir = tempfile::tempdir().unwrap();
    synthetic(dir.path(), |_| 0.0);
    let file = dir.path().join("starts.toml");
    let text = format!(
        "[[parameter]]\nname = \"hyperelastic.mu1.domain\"\nstart = [{}, {}]\nbounds = [1e4, 5e6]\n\
         [[parameter]]\nname = \"hyperelastic.alpha1.domain\"\nstart = [{}, {}, {}]\n\
         bounds = [0.5, 10.0]\n{}",
        0.7 * MU,
        1.3 * MU,
        0.7 * ALPHA,
        ALPHA,
        1.3 * ALPHA,
        experiments()
    );
    std::fs::write(&file, text).unwrap();
    let mut id = Identification::read(&file).unwrap();
    assert_eq!(id.starts(), 6);
    let mut seen = Vec::new();
    let (report, x) = id.run(|p| seen.push(*p)).unwrap();
    assert_eq!(report.starts, 6);
    // The objective at each starting point, and where each start ended: every start moves
    // (all are off the truth) and ends far below where it began; the best end is the report's.
    assert_eq!(report.start_objectives.len(), 6);
    assert_eq!(report.final_objectives.len(), 6);
    for (a, b) in report.start_objectives.iter().zip(&report.final_objectives) {
        assert!(a.is_finite() && b.is_finite(), "{report:?}");
        assert!(*b < 1e-3 * a, "start {a:e} -> end {b:e}");
    }
    let least = report.final_objectives.iter().copied().fold(f64::INFINITY, f64::min);
    assert_eq!(least, report.objective);
    assert!(report.start_objectives.iter().all(|&a| a > report.objective));
    // Distinct starting points have distinct starting objectives.
    let mut starts = report.start_objectives.clone();
    starts.sort_by(f64::total_cmp);
    starts.dedup();
    assert_eq!(starts.len(), 6, "{:?}", report.start_objectives);
    // The correlation of μ₁ and α₁: symmetric, unit diagonal, within [−1, 1].
    let c = &report.correlation;
    assert_eq!(c.names, ["hyperelastic.mu1.domain", "hyperelastic.alpha1.domain"]);
    assert_eq!(c.matrix[0][0], 1.0);
    assert_eq!(c.matrix[1][1], 1.0);
    assert_eq!(c.matrix[0][1], c.matrix[1][0]);
    assert!(c.matrix[0][1].abs() < 1.0, "{c:?}");
    assert!(report.parameter_convention.as_deref().unwrap().contains("2μ_p/α_p²"));
    let info = report.fem.unwrap();
    assert!(info.iterations > 0, "{info:?}");
    // Progress: each finished start, and the accepted steps in between.
    let finished: Vec<usize> =
        seen.iter().filter(|p| p.iteration == 0).map(|p| p.starts_done).collect();
    assert_eq!(finished, [1, 2, 3, 4, 5, 6]);
    assert!(seen.iter().any(|p| p.iteration > 0));
    assert!((x[0] / MU - 1.0).abs() < 1e-6 && (x[1] / ALPHA - 1.0).abs() < 1e-6, "{x:?}");
}
