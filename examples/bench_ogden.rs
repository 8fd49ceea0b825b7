//! Benchmark: a compressible Ogden cube under a dead-load traction, forward load stepping and
//! the adjoint gradient of a displacement norm with respect to the three material parameters.
//!
//! The unit cube [0, 1]³ is cut into N × N × N cubes of 6 Tet4 each (Kuhn split along the main
//! diagonal). The law is the one-term compressible Ogden solid
//! ψ = 2μ/α² (λ̄₁^α + λ̄₂^α + λ̄₃^α − 3) + κ/2 (J − 1)² (λ̄ the isochoric principal stretches;
//! [`Ogden::new`] with its default U(J) = ½(J − 1)²) with μ = 1, α = 3, κ = 10. The face x = 0
//! is clamped, the face x = 1 carries the dead-load traction (0.5, 0, 0) per unit reference
//! area, applied in 3 equal load steps. The loss is L = Σ_i u_i² over every dof at the last
//! step, and the gradient dL/d(μ, α, κ) comes from the adjoint through the load steps.
//!
//! Run: `cargo run --release --example bench_ogden -- --n 14` (`--solver direct|amg|auto`:
//! the linear solver, default `auto`: Cholesky below 60,000 unknowns, AMG-CG above;
//! `--rel-tol T`: Newton's relative residual tolerance, default 1e-10).
//! Prints one JSON line: `n`, `tets`, `unknowns`, `newton_iterations`, `forward_s` (the load
//! stepping), `gradient_s` (the reverse sweep: transpose solves and parameter products),
//! `forward_gradient_s` (the gradient call, which runs the forward pass again, so it is the
//! forward + gradient time), `peak_rss_mb` (VmHWM), `L`, `dL_dmu`, `dL_dalpha`, `dL_dkappa`.

use std::time::Instant;

use anyhow::{Context, bail};
use gradfem::finite_strain::{
    FiniteLinearSolver, FiniteStrainProblem, LoadPathObjective, LoadStepParams, PathTerm,
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

fn main() -> anyhow::Result<()> {
    let mut n = 14;
    let mut solver = FiniteLinearSolver::default();
    let mut rel_tol = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--n" => n = args.next().and_then(|v| v.parse().ok()).context("--n takes N ≥ 1")?,
            "--solver" => solver = solver_named(&args.next().context("--solver takes a name")?)?,
            "--rel-tol" => {
                rel_tol = Some(args.next().and_then(|v| v.parse().ok()).context("--rel-tol T")?)
            }
            other => bail!("unknown argument {other} (expected --n N, --solver S, --rel-tol T)"),
        }
    }
    if n == 0 {
        bail!("--n must be at least 1");
    }
    let t_setup = Instant::now();
    let mesh = box_mesh(&BoxSpec::unit_cube(n, CellType::Tet4));
    let region = FiniteRegionSpec {
        group: "domain".into(),
        law: HyperelasticLaw::Ogden(Ogden::new(&[(1.0, 3.0)], 10.0)),
        alpha: 0.0,
        t_ref: 0.0,
        body_force: [0.0; 3],
    };
    let bcs = [
        BcSpec { group: "xmin".into(), kind: BcKind::Fixed },
        BcSpec { group: "xmax".into(), kind: BcKind::Traction { traction: [0.5, 0.0, 0.0] } },
    ];
    let model = FiniteStrainModel::new(&mesh, &[region], &bcs).context("cube model")?;
    let mut params = LoadStepParams { linear_solver: solver, ..LoadStepParams::default() };
    if let Some(t) = rel_tol {
        params.newton.rel_tol = t;
    }
    let problem = FiniteStrainProblem::new(model, params);
    let setup_s = t_setup.elapsed().as_secs_f64();

    let loads = [1.0 / 3.0, 2.0 / 3.0, 1.0];
    let t = Instant::now();
    let path = problem.solve(&loads)?;
    let forward_s = t.elapsed().as_secs_f64();
    let newton_iterations: usize = path.steps.iter().map(|s| s.newton_iterations).sum();

    let objective = LoadPathObjective {
        terms: vec![PathTerm::SquaredDisplacement { weights: vec![0.0, 0.0, 1.0] }],
    };
    let want = FiniteVjpRequest::MATERIAL;
    let t = Instant::now();
    let g = problem.gradient(&loads, &objective, Checkpointing::StoreAll, want)?;
    let forward_gradient_s = t.elapsed().as_secs_f64();
    let out = serde_json::json!({
        "case": "ogden_cube",
        "n": n,
        "tets": problem.model.n_volume_elements(),
        "unknowns": problem.model.n_unknowns(),
        "newton_iterations": newton_iterations,
        "setup_s": setup_s,
        "forward_s": forward_s,
        "gradient_s": g.time_adjoint_s,
        "forward_gradient_s": forward_gradient_s,
        "peak_rss_mb": peak_rss_mb(),
        "L": g.value,
        "dL_dmu": g.material[0][0],
        "dL_dalpha": g.material[0][1],
        "dL_dkappa": g.material[0][2],
    });
    println!("{out}");
    Ok(())
}
