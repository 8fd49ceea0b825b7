//! Benchmark: linear elasticity on the unit cube, forward solve and the compliance gradient with
//! respect to a per-element Young's modulus (the peers' `elastic3d`, `../shared/peers`).
//!
//! The unit cube split into N×N×N cubes, each cut into 6 tetrahedra along its main diagonal
//! (Kuhn split; (N+1)³ nodes, 6N³ Tet4), isotropic linear elasticity with E_e = 1 per element
//! (registered as the per-element field `mechanical.young_elem.domain`) and ν = 0.3, clamped
//! (u = 0) on x = 0, the traction t = (0, 0, −1) on x = 1. The objective is the compliance
//! C = fᵀu and the gradient dC/dE_e (for this problem Σ_e E_e dC/dE_e = −C exactly, which the
//! JSON reports as `identity_check`).
//!
//! Run: `cargo run --release --example bench_elastic -- --n 31` (`--solver auto|cholesky|amg-cg`,
//! default `auto`; `--repeat R`: forward + gradient R times on the same set-up, the fastest
//! reported, as the peers do; `--cell tet10|hex8|hex20`: the same cube in other cells, for
//! the routing measurements — the peers' problem is Tet4).
//! Prints one JSON line: n, unknowns, elements, setup_s (model + pattern), assembly_s,
//! factor_s (factorization or AMG set-up), solve_s, forward_s, gradient_s (adjoint solve +
//! element products), adjoint_solve_s, accumulate_s, peak_rss_mb, J (the compliance), dJ_dE
//! (Σ_e dC/dE_e), dJ_dEe_norm, identity_check, linear_solver, cg_iterations.
//!
//! `--device cuda` (a build with `--features cuda`) runs the forward solve and the gradient
//! through the device pipeline on the GPU instead (gradfem-gpu: element stiffness matrices and
//! gathered assembly on the device, CG to `--cg-rel-tol`, default 1e-10, preconditioned by
//! `--preconditioner amg` (default: the AMG V-cycle on the device, its hierarchy with the
//! rigid-body modes built on the host) or `jacobi`, the
//! compliance's adjoint taken from the forward solution, dC/dE_e on the device); `--device
//! twin` runs the same pipeline on the CPU (one thread, the device's arithmetic). Either prints
//! device, device_setup_s, forward_s, gradient_s, CG iterations, J and dJ_dE; `--check` adds
//! the CPU path's J and gradient (direct solver) and their relative differences.

use std::time::Instant;

use gradfem::device::{CgParams, Device, Preconditioner, elastic_gradient};
use gradfem::mechanical::MechanicalField;
use gradfem::run::LinearChoice;
use gradfem_coupling::CoupledProblem;
use gradfem_mechanical::linear::objective::{ObjectiveKind, ObjectiveTerm};
use gradfem_mesh::CellType;
use gradfem_mesh::generate::{BoxSpec, box_mesh};

#[path = "common/rss.rs"]
mod rss;
use rss::peak_rss_mb;

fn main() -> anyhow::Result<()> {
    let mut n = 20usize;
    let mut solver = "auto".to_string();
    let mut repeat = 1usize;
    let mut cell = CellType::Tet4;
    let mut device: Option<Device> = None;
    let mut cg_rel_tol = 1e-10;
    let mut check = false;
    let mut preconditioner = Preconditioner::Amg;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--n" => {
                n = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&v| v > 0)
                    .ok_or_else(|| anyhow::anyhow!("--n takes a positive integer"))?
            }
            "--solver" => {
                solver = args.next().ok_or_else(|| anyhow::anyhow!("--solver takes a name"))?
            }
            "--repeat" => {
                repeat = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&v| v > 0)
                    .ok_or_else(|| anyhow::anyhow!("--repeat takes a positive integer"))?
            }
            "--cell" => {
                cell = match args.next().as_deref() {
                    Some("tet4") => CellType::Tet4,
                    Some("tet10") => CellType::Tet10,
                    Some("hex8") => CellType::Hex8,
                    Some("hex20") => CellType::Hex20,
                    other => {
                        anyhow::bail!("--cell takes tet4, tet10, hex8 or hex20, got {other:?}")
                    }
                }
            }
            "--device" => {
                device = match args.next().as_deref() {
                    Some("cuda") => Some(Device::Cuda),
                    Some("twin") => Some(Device::Cpu),
                    other => anyhow::bail!("--device takes cuda or twin, got {other:?}"),
                }
            }
            "--cg-rel-tol" => {
                cg_rel_tol = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&v: &f64| v > 0.0 && v < 1.0)
                    .ok_or_else(|| anyhow::anyhow!("--cg-rel-tol takes a number in (0, 1)"))?
            }
            "--check" => check = true,
            "--preconditioner" => {
                preconditioner = args
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--preconditioner takes jacobi|amg"))?
                    .parse()?
            }
            other => anyhow::bail!(
                "unknown argument '{other}' (expected --n N [--solver S] [--repeat R] [--cell C] \
                 [--device cuda|twin [--cg-rel-tol T] [--preconditioner P] [--check]])"
            ),
        }
    }
    let t_mesh = Instant::now();
    let mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [1.0; 3],
        divisions: [n; 3],
        cell_type: cell,
    });
    let mesh_s = t_mesh.elapsed().as_secs_f64();
    let t_setup = Instant::now();
    let (region, bcs) = gradfem_mechanical::linear::elastic3d_specs();
    let objective = vec![ObjectiveTerm { weight: 1.0, kind: ObjectiveKind::Compliance }];
    let mut field = MechanicalField::new(&mesh, &[region], &bcs, objective)?;
    field.set_linear(LinearChoice::parse(&solver)?, 1e-10);
    let mut problem = CoupledProblem::new(mesh);
    problem.add_field(Box::new(field))?;
    let id = problem.register("mechanical.young_elem.domain", None)?;
    problem.apply_parameters()?;
    let setup_s = t_setup.elapsed().as_secs_f64();
    if let Some(device) = device {
        let how = (device, preconditioner, cg_rel_tol, check);
        return device_run(&mut problem, id, how, n, cell, setup_s);
    }

    let mut best: Option<serde_json::Value> = None;
    let mut best_total = f64::INFINITY;
    for _ in 0..repeat {
        // Every repetition pays the whole forward solve (assembly and factorization included).
        problem.apply_parameters()?;
        let t_fwd = Instant::now();
        problem.solve()?;
        let forward_s = t_fwd.elapsed().as_secs_f64();
        let t_grad = Instant::now();
        let (j, grad, gt) = problem.gradient()?;
        let gradient_s = t_grad.elapsed().as_secs_f64();
        let field = problem.find::<MechanicalField>().expect("the mechanical field");
        let cg_iterations = field.last_cg_iterations();
        let g = grad.get(id);
        let dj_de: f64 = g.iter().sum();
        let norm = g.iter().map(|v| v * v).sum::<f64>().sqrt();
        let s = &field.last_solve;
        let total = forward_s + gradient_s;
        if total < best_total {
            best_total = total;
            best = Some(serde_json::json!({
                "bench": "elastic3d",
                "n": n,
                "cell": format!("{cell:?}"),
                "unknowns": field.model.n_unknowns(),
                "entries": field.pattern().nnz(),
                "elements": field.model.n_volume_elements(),
                "mesh_s": mesh_s,
                "setup_s": setup_s,
                "assembly_s": s.assembly_s,
                "factor_s": s.factor_s,
                "solve_s": s.solve_s,
                "forward_s": forward_s,
                "gradient_s": gradient_s,
                "adjoint_solve_s": gt.adjoint_solve_s,
                "accumulate_s": gt.accumulate_s,
                "total_s": total,
                "J": j,
                "dJ_dE": dj_de,
                "dJ_dEe_norm": norm,
                "identity_check": ((dj_de + j) / j).abs(),
                "linear_solver": s.linear_solver,
                "cg_iterations": cg_iterations,
                "threads": rayon::current_num_threads(),
            }));
        }
    }
    let mut out = best.expect("at least one repetition");
    out["peak_rss_mb"] = serde_json::json!(peak_rss_mb());
    out["repeats"] = serde_json::json!(repeat);
    println!("{out}");
    Ok(())
}

/// `--device`: forward + gradient through the device pipeline, with `--check` the CPU path.
fn device_run(
    problem: &mut CoupledProblem,
    id: gradfem_solvers::params::ParamId,
    (device, preconditioner, cg_rel_tol, check): (Device, Preconditioner, f64, bool),
    n: usize,
    cell: CellType,
    setup_s: f64,
) -> anyhow::Result<()> {
    let params = CgParams { rel_tol: cg_rel_tol, max_iterations: 200_000 };
    let field = problem.find::<MechanicalField>().expect("the mechanical field");
    let d = elastic_gradient(field, device, &params, preconditioner)?;
    let dj_de: f64 = d.gradient.iter().sum();
    let mut out = serde_json::json!({
        "bench": "elastic3d",
        "n": n,
        "cell": format!("{cell:?}"),
        "unknowns": field.model.n_unknowns(),
        "elements": field.model.n_volume_elements(),
        "device": d.backend,
        "setup_s": setup_s,
        "device_setup_s": d.setup_s,
        "forward_s": d.forward_s,
        "gradient_s": d.gradient_s,
        "total_s": d.forward_s + d.gradient_s,
        "cg_rel_tol": cg_rel_tol,
        "preconditioner": format!("{preconditioner:?}"),
        "cg_iterations": d.cg_iterations,
        "J": d.objective,
        "dJ_dE": dj_de,
        "dJ_dEe_norm": d.gradient.iter().map(|v| v * v).sum::<f64>().sqrt(),
        "identity_check": ((dj_de + d.objective) / d.objective).abs(),
    });
    if check {
        let t = Instant::now();
        problem.solve()?;
        let (j, grad, _) = problem.gradient()?;
        let cpu_s = t.elapsed().as_secs_f64();
        let g = grad.get(id);
        let scale = g.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let dg = d.gradient.iter().zip(g).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        let field = problem.find::<MechanicalField>().expect("the mechanical field");
        out["cpu_check"] = serde_json::json!({
            "linear_solver": field.last_solve.linear_solver,
            "total_s": cpu_s,
            "J": j,
            "J_rel_diff": (d.objective - j).abs() / j.abs(),
            "dJ_dEe_max_rel_diff": dg / scale,
        });
    }
    out["peak_rss_mb"] = serde_json::json!(peak_rss_mb());
    println!("{out}");
    Ok(())
}
