//! Benchmark: steady heat conduction on the unit cube, forward solve and adjoint gradient.
//!
//! The problem any FEM code can run identically: the unit cube split into N×N×N cubes, each cut
//! into 6 tetrahedra along its main diagonal (Kuhn/Freudenthal split; (N+1)³ nodes, 6N³ tets),
//! P1, k = 1, Q = 1, T = 0 on the face x = 0, insulated elsewhere, objective J = Σᵢ Tᵢ² over all
//! nodes. The gradient is taken with respect to the per-element conductivity; dJ/dk for a uniform
//! k is the sum of the per-element derivatives.
//!
//! Run: `cargo run --release --example bench_thermal -- --n 46`
//! Prints one JSON line: n, unknowns, elements, assembly_s, factor_s, solve_s, gradient_s,
//! forward_s, peak_rss_mb, J, dJ_dk, dJ_dke_norm, linear_solver.
//!
//! `--device cuda` (a build with `--features cuda`) runs the forward solve and the gradient on
//! the GPU instead (gradfem-gpu: gathered assembly, Jacobi-PCG to `--cg-rel-tol`, default
//! 1e-10, preconditioned by `--preconditioner amg` (default: the AMG V-cycle on the device,
//! its hierarchy built on the host) or `jacobi`, adjoint and per-element gradient on the
//! device) and prints device, setup_s (kernel
//! compilation and upload), forward_s, gradient_s, CG iterations, J, dJ_dk and dJ_dke_norm.
//! `--check` adds the CPU path's J and gradient and their relative differences.
//!
//! `--cell tet10|hex8|hex20|hex27` cuts the cube into N×N×N cells of that type instead (the
//! device runs them by quadrature).

use std::time::Instant;

use gradfem::run::LinearChoice;
use gradfem::thermal::{CgParams, Device, Preconditioner, ThermalProblem};
use gradfem_mesh::CellType;
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_thermal::{BcKind, BcSpec, ConductivityLaw, ObjectiveKind, ObjectiveTerm, RegionSpec};

#[path = "common/rss.rs"]
mod rss;
use rss::peak_rss_mb;

fn fail(message: &str) -> ! {
    eprintln!("bench_thermal: {message}");
    std::process::exit(2)
}

fn main() {
    let mut n = 20usize;
    let mut solver = "auto".to_string();
    let mut device = Device::Cpu;
    let mut cg_rel_tol = 1e-10;
    let mut check = false;
    let mut preconditioner = Preconditioner::Amg;
    let mut cell = CellType::Tet4;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--n" => {
                n = args.next().and_then(|v| v.parse().ok()).expect("--n takes a positive integer")
            }
            "--solver" => solver = args.next().expect("--solver takes auto|cholesky|lu|amg-cg"),
            "--device" => {
                device = match args.next().as_deref().map(str::parse::<Device>) {
                    Some(Ok(d)) => d,
                    _ => fail("--device takes cpu|cuda"),
                }
            }
            "--cg-rel-tol" => {
                cg_rel_tol = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|v: &f64| *v > 0.0)
                    .unwrap_or_else(|| fail("--cg-rel-tol takes a positive number"))
            }
            "--check" => check = true,
            "--preconditioner" => {
                preconditioner = match args.next().as_deref().map(str::parse) {
                    Some(Ok(p)) => p,
                    _ => fail("--preconditioner takes jacobi|amg"),
                }
            }
            "--cell" => {
                cell = args
                    .next()
                    .and_then(|v| CellType::from_name(&v))
                    .filter(|c| {
                        use CellType::*;
                        matches!(c, Tet4 | Tet10 | Hex8 | Hex20 | Hex27)
                    })
                    .unwrap_or_else(|| fail("--cell takes tet4|tet10|hex8|hex20|hex27"))
            }
            other => fail(&format!(
                "unknown argument '{other}' (expected --n N [--solver S] [--device cpu|cuda] \
                 [--cg-rel-tol TOL] [--preconditioner jacobi|amg] [--check] [--cell C])"
            )),
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
    let mut problem = ThermalProblem::new(
        mesh,
        &[RegionSpec {
            group: "domain".into(),
            k0: 1.0,
            law: ConductivityLaw::Constant,
            source: 1.0,
        }],
        &[BcSpec { group: "xmin".into(), kind: BcKind::Temperature { value: 0.0 } }],
        vec![ObjectiveTerm { weight: 1.0, kind: ObjectiveKind::NodalSumSquares }],
        LinearChoice::parse(&solver).expect("valid solver"),
    )
    .expect("valid problem");
    let id = problem.register("thermal.k_elem.domain", None).expect("registered");
    let setup_s = t_setup.elapsed().as_secs_f64();
    if device == Device::Cuda {
        let params = CgParams { rel_tol: cg_rel_tol, max_iterations: 100_000 };
        let d = problem
            .device_gradient(Device::Cuda, &params, preconditioner)
            .unwrap_or_else(|e| fail(&format!("--device cuda: {e}")));
        let dj_dk: f64 = d.gradient.iter().sum();
        let norm = d.gradient.iter().map(|v| v * v).sum::<f64>().sqrt();
        let mut out = serde_json::json!({
            "n": n,
            "cell": format!("{cell:?}"),
            "unknowns": problem.model.n_unknowns(),
            "elements": problem.model.n_volume_elements(),
            "device": d.backend,
            "mesh_s": mesh_s,
            "setup_s": setup_s,
            "device_setup_s": d.setup_s,
            "forward_s": d.forward_s,
            "gradient_s": d.gradient_s,
            "forward_plus_gradient_s": d.forward_s + d.gradient_s,
            "cg_rel_tol": cg_rel_tol,
            "preconditioner": format!("{preconditioner:?}"),
            "cg_iterations": d.cg_iterations,
            "peak_rss_mb": peak_rss_mb(),
            "J": d.objective,
            "dJ_dk": dj_dk,
            "dJ_dke_norm": norm,
        });
        if check {
            let c = problem
                .device_gradient(Device::Cpu, &params, preconditioner)
                .unwrap_or_else(|e| fail(&format!("the CPU check: {e}")));
            let scale = c.gradient.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let dg =
                d.gradient.iter().zip(&c.gradient).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
            out["cpu_check"] = serde_json::json!({
                "backend": c.backend,
                "forward_s": c.forward_s,
                "gradient_s": c.gradient_s,
                "J": c.objective,
                "J_rel_diff": (d.objective - c.objective).abs() / c.objective.abs(),
                "dJ_dke_max_rel_diff": dg / scale,
            });
        }
        println!("{out}");
        return;
    }

    let t_fwd = Instant::now();
    problem.solve().expect("forward solve");
    let forward_s = t_fwd.elapsed().as_secs_f64();
    let (j, grad, gt) = problem.gradient().expect("gradient");
    let g = grad.get(id);
    let dj_dk: f64 = g.iter().sum();
    let norm = g.iter().map(|v| v * v).sum::<f64>().sqrt();
    let s = &problem.last_solve;
    let out = serde_json::json!({
        "n": n,
        "cell": format!("{cell:?}"),
        "unknowns": problem.model.n_unknowns(),
        "elements": problem.model.n_volume_elements(),
        "mesh_s": mesh_s,
        "setup_s": setup_s,
        "assembly_s": s.assembly_s,
        "factor_s": s.factor_s,
        "solve_s": s.solve_s,
        "forward_s": forward_s,
        "gradient_s": gt.gradient_s,
        "adjoint_solve_s": gt.adjoint_solve_s,
        "accumulate_s": gt.accumulate_s,
        "peak_rss_mb": peak_rss_mb(),
        "J": j,
        "dJ_dk": dj_dk,
        "dJ_dke_norm": norm,
        "linear_solver": s.linear_solver,
        "newton_iterations": s.newton_iterations,
        "threads": rayon::current_num_threads(),
    });
    println!("{out}");
}
