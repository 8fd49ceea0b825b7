//! Heater identification: recover a block's conductivity k and its convection coefficient h
//! from one sensor's temperature history, with exact gradients through every time step.
//!
//! A 40 × 20 × 10 mm block (Hex20) starts at 293.15 K; a heater pushes 5 kW/m² through its face
//! x = 0 and the top face loses heat by convection to 293.15 K. A thermocouple near the far end
//! records T every second for two minutes. The "measured" history is synthetic (true k = 120
//! W/(m·K), h = 40 W/(m²·K)), noise-free and with ±0.02 K noise; the fit starts from k = 60,
//! h = 10 and runs bounded L-BFGS on (k, h) scaled by their starting values. The gradient of
//! the misfit is the discrete adjoint of the Crank–Nicolson time stepping (binomial
//! checkpointing with 8 snapshots).
//!
//! Run: `cargo run --release --example heater_inverse -- [--json]`
//! Prints, per data set, the recovered k and h with their relative errors and iterations.

use gradfem::transient::{MassKind, SensorHistory, TimeScheme, TransientProblem, TransientSpec};
use gradfem_mesh::CellType;
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_solvers::checkpoint::Checkpointing;
use gradfem_solvers::optimize::{Control, LbfgsbParams, minimize_lbfgsb};
use gradfem_thermal::{BcKind, BcSpec, ConductivityLaw, RegionSpec, ThermalModel, VjpRequest};

const K_TRUE: f64 = 120.0;
const H_TRUE: f64 = 40.0;
const T0: f64 = 293.15;
const STEPS: usize = 120;
const SENSOR: [f64; 3] = [0.035, 0.01, 0.008];

fn problem(k: f64, h: f64) -> TransientProblem {
    let mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [0.04, 0.02, 0.01],
        divisions: [8, 4, 2],
        cell_type: CellType::Hex20,
    });
    let model = ThermalModel::new(
        &mesh,
        &[RegionSpec {
            group: "domain".into(),
            k0: k,
            law: ConductivityLaw::Constant,
            source: 0.0,
        }],
        &[
            BcSpec { group: "xmin".into(), kind: BcKind::HeatFlux { q_in: 5.0e3 } },
            BcSpec { group: "zmax".into(), kind: BcKind::Convection { h, t_inf: T0 } },
        ],
    )
    .expect("valid model");
    let n = model.n_nodes();
    let spec = TransientSpec {
        heat_capacity: vec![2.43e6], // aluminium: ρ c = 2700 kg/m³ · 900 J/(kg·K)
        dt: 1.0,
        n_steps: STEPS,
        scheme: TimeScheme::CRANK_NICOLSON,
        mass: MassKind::Consistent,
    };
    TransientProblem::new(model, &spec, vec![T0; n]).expect("valid transient problem")
}

/// The sensor's history for (k, h).
fn measure(k: f64, h: f64) -> Vec<f64> {
    let p = problem(k, h);
    let traj = p.simulate().expect("simulates");
    // Interpolate T at the sensor from each state.
    traj.temperatures
        .iter()
        .map(|t| {
            let term = gradfem_thermal::ObjectiveTerm {
                weight: 1.0,
                kind: gradfem_thermal::ObjectiveKind::Point { point: SENSOR },
            };
            gradfem_thermal::objective::evaluate(&p.model, &[term], t, false).expect("inside").value
        })
        .collect()
}

/// Deterministic pseudo-noise in [−a, a] (SplitMix64).
fn noise(i: usize, a: f64) -> f64 {
    let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    a * (2.0 * (z as f64 / u64::MAX as f64) - 1.0)
}

struct Fit {
    k: f64,
    h: f64,
    iterations: usize,
    misfit: f64,
}

fn fit(data: &[f64]) -> Fit {
    let (k0, h0) = (60.0, 10.0);
    let history = SensorHistory {
        points: vec![SENSOR],
        data: data.iter().map(|&d| Some(vec![d])).collect(),
        weight: 1.0,
    };
    let want = VjpRequest {
        conductivity: true,
        source: false,
        boundary: true,
        temperature: false,
        coords: false,
    };
    let eval = |x: &[f64], g: &mut [f64]| -> Result<f64, String> {
        let p = problem(x[0] * k0, x[1] * h0);
        let grad = p
            .gradient(&history, Checkpointing::Binomial { snapshots: 8 }, want)
            .map_err(|e| e.to_string())?;
        g[0] = grad.k_region[0] * k0;
        g[1] = grad.h[1] * h0;
        Ok(grad.value)
    };
    let params = LbfgsbParams { max_iterations: 60, gtol: 1e-10, ..Default::default() };
    let result =
        minimize_lbfgsb(eval, &[1.0, 1.0], &[0.01, 0.01], &[100.0, 100.0], &params, |_| {
            Control::Continue
        })
        .expect("objective evaluates");
    Fit {
        k: result.x[0] * k0,
        h: result.x[1] * h0,
        iterations: result.iterations,
        misfit: result.f,
    }
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let clean = measure(K_TRUE, H_TRUE);
    let noisy: Vec<f64> = clean.iter().enumerate().map(|(i, v)| v + noise(i, 0.02)).collect();
    let rise = clean.last().unwrap() - T0;
    let mut rows = Vec::new();
    for (name, data) in [("noise_free", &clean), ("noisy", &noisy)] {
        let f = fit(data);
        rows.push(serde_json::json!({
            "data": name,
            "k": f.k,
            "h": f.h,
            "k_rel_error": (f.k - K_TRUE) / K_TRUE,
            "h_rel_error": (f.h - H_TRUE) / H_TRUE,
            "iterations": f.iterations,
            "misfit": f.misfit,
        }));
        if !json {
            println!(
                "{name:>10}: k = {:.6} W/(m·K) ({:+.2e}), h = {:.6} W/(m²·K) ({:+.2e}), {} iterations",
                f.k,
                (f.k - K_TRUE) / K_TRUE,
                f.h,
                (f.h - H_TRUE) / H_TRUE,
                f.iterations
            );
        }
    }
    if json {
        let out = serde_json::json!({
            "k_true": K_TRUE,
            "h_true": H_TRUE,
            "sensor_rise_K": rise,
            "fits": rows,
        });
        println!("{out}");
    } else {
        println!("(true k = {K_TRUE}, h = {H_TRUE}; sensor rise {rise:.3} K over {STEPS} s)");
    }
}
