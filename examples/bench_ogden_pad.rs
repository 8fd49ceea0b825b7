//! Benchmark: identification of a compressed silicone pad, one-term Ogden (μ₁, α₁) with a
//! volumetric κ ½(J − 1)².
//!
//! The pad is a 20 × 26 × 4 mm block of 20 × 26 × 4 cubes, each cut into 6 tetrahedra along its
//! main diagonal (12,480 Tet4, or Tet10 with `--order 2`), in mm and MPa (forces in N). Its
//! bottom face (z = 0) is bonded (fixed) and its top face (z = 4 mm) is bonded to a rigid plate
//! pushed down by 1.2 mm (30 % compression) in 10 equal load steps. The objective is the misfit
//! of the plate's reaction force at every step, J = Σ_k (F_k − F̂_k)², against the "measured"
//! forces F̂_k of a run at μ₁ = 0.33 MPa, α₁ = 2.3 (the model has μ₁ = 0.3 MPa, α₁ = 2.5,
//! κ = 15 MPa). The gradient is dJ/d(μ₁, α₁, κ) by the adjoint through the load steps.
//!
//! Run: `cargo run --release --example bench_ogden_pad -- --order 1` (or `--order 2`;
//! `--solver direct|amg|auto` picks the linear solver, default `auto`: Cholesky below 60,000
//! unknowns, AMG-CG above).
//! Prints one JSON line: `tets`, `unknowns`, `newton_iterations`, `forward_s` (the load-stepping
//! Newton solve), `gradient_s` (the reverse sweep: tangents, transpose solves and parameter
//! products), `total_gradient_s` (the gradient call, which re-runs the forward pass),
//! `peak_rss_mb` (VmHWM), the misfit `J` and `dJ_dmu1`, `dJ_dalpha1`, `dJ_dkappa`.

use std::time::Instant;

use anyhow::{Context, bail};
use gradfem::finite_strain::{
    FiniteLinearSolver, FiniteStrainProblem, LoadPathObjective, LoadStepParams, PathTerm, Quantity,
};
use gradfem_mechanical::finite::{
    FiniteRegionSpec, FiniteStrainModel, FiniteVjpRequest, HyperelasticLaw,
};
use gradfem_mechanical::hyperelastic::Ogden;
use gradfem_mechanical::linear::{BcKind, BcSpec};
use gradfem_mesh::CellType;
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_solvers::checkpoint::Checkpointing;

/// `--solver`: `direct`, `amg` or `auto` (the default: AMG-CG from 60,000 unknowns on).
fn solver_named(name: &str) -> anyhow::Result<FiniteLinearSolver> {
    FiniteLinearSolver::from_name(name)
        .with_context(|| format!("--solver must be direct, amg or auto, got {name}"))
}

#[path = "common/rss.rs"]
mod rss;
use rss::peak_rss_mb;

/// The pad with Ogden (μ₁, α₁) and bulk modulus κ (MPa).
fn pad(
    cell_type: CellType,
    solver: &FiniteLinearSolver,
    mu: f64,
    alpha: f64,
    kappa: f64,
) -> anyhow::Result<FiniteStrainProblem> {
    let mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [20.0, 26.0, 4.0],
        divisions: [20, 26, 4],
        cell_type,
    });
    let region = FiniteRegionSpec {
        group: "domain".into(),
        law: HyperelasticLaw::Ogden(Ogden::new(&[(mu, alpha)], kappa)),
        alpha: 0.0,
        t_ref: 0.0,
        body_force: [0.0; 3],
    };
    let bcs = [
        BcSpec { group: "zmin".into(), kind: BcKind::Fixed },
        BcSpec {
            group: "zmax".into(),
            kind: BcKind::Displacement { value: [Some(0.0), Some(0.0), Some(-1.2)] },
        },
    ];
    let model = FiniteStrainModel::new(&mesh, &[region], &bcs).context("pad model")?;
    let params = LoadStepParams { linear_solver: solver.clone(), ..LoadStepParams::default() };
    Ok(FiniteStrainProblem::new(model, params))
}

fn main() -> anyhow::Result<()> {
    let mut order = 1;
    let mut solver = FiniteLinearSolver::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--order" => {
                order = args.next().and_then(|v| v.parse().ok()).context("--order takes 1 or 2")?
            }
            "--solver" => solver = solver_named(&args.next().context("--solver takes a name")?)?,
            other => bail!("unknown argument {other} (expected --order 1|2, --solver S)"),
        }
    }
    let cell_type = match order {
        1 => CellType::Tet4,
        2 => CellType::Tet10,
        _ => bail!("--order must be 1 or 2, got {order}"),
    };
    let loads: Vec<f64> = (1..=10).map(|k| k as f64 / 10.0).collect();
    let reaction = Quantity::Reaction { group: "zmax".into(), direction: [0.0, 0.0, -1.0] };
    let force_of = |problem: &FiniteStrainProblem| -> anyhow::Result<Vec<f64>> {
        let sum = LoadPathObjective {
            terms: vec![PathTerm::Sum { quantity: reaction.clone(), weight: 1.0 }],
        };
        let path = problem.solve(&loads)?;
        Ok(problem.evaluate(&path, &sum)?.1.remove(0))
    };

    // The "measured" forces.
    let measured = force_of(&pad(cell_type, &solver, 0.33, 2.3, 15.0)?)?;

    let problem = pad(cell_type, &solver, 0.3, 2.5, 15.0)?;
    let t = Instant::now();
    let path = problem.solve(&loads)?;
    let forward_s = t.elapsed().as_secs_f64();
    let newton_iterations: usize = path.steps.iter().map(|s| s.newton_iterations).sum();
    let objective = LoadPathObjective {
        terms: vec![PathTerm::Misfit {
            quantity: reaction,
            measured: measured.clone(),
            weight: 1.0,
        }],
    };
    let want = FiniteVjpRequest::MATERIAL;
    let t = Instant::now();
    let g = problem.gradient(&loads, &objective, Checkpointing::StoreAll, want)?;
    let total_gradient_s = t.elapsed().as_secs_f64();
    let out = serde_json::json!({
        "case": "ogden_pad",
        "order": order,
        "tets": problem.model.n_volume_elements(),
        "unknowns": problem.model.n_unknowns(),
        "load_steps": loads.len(),
        "newton_iterations": newton_iterations,
        "forward_s": forward_s,
        "gradient_s": g.time_adjoint_s,
        "total_gradient_s": total_gradient_s,
        "gradient_over_forward": g.time_adjoint_s / forward_s,
        "peak_rss_mb": peak_rss_mb(),
        "J": g.value,
        "dJ_dmu1": g.material[0][0],
        "dJ_dalpha1": g.material[0][1],
        "dJ_dkappa": g.material[0][2],
        "force_final_n": g.quantities[0].last(),
        "measured_final_n": measured.last(),
    });
    println!("{out}");
    Ok(())
}
