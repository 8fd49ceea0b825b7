//! Benchmark of AMG-preconditioned CG on the project's reference problem: 3D P1 Poisson on the
//! unit cube of N×N×N cubes, each cut into 6 tetrahedra (Kuhn split), k = 1, f = 1,
//! Dirichlet u = 0 on x = 0; one setup, one forward solve and one adjoint (transpose) solve
//! reusing the hierarchy and starting from the forward solve's recycled search directions, to a
//! relative residual of 1e-10 (`--no-recycle` starts the adjoint from zero).
//!
//! With `--elastic`: the peers' elastic3d instead (P1 elasticity, E = 1, ν = 0.3, clamped on
//! x = 0, traction (0, 0, −1) on x = 1), aggregated by nodes with the six rigid-body modes as
//! near-nullspace (`--translations`: the translations only).
//!
//! Run: `cargo run --release -p gradfem-solvers --example bench_amg -- --n 79`
//! (optional: `--degree D --ratio R` Chebyshev degree and interval ratio, `--gs` symmetric Gauss–Seidel, `--theta T`
//! strength threshold, `--coarse C` coarse size).
//!
//! Prints one JSON line: {"n", "unknowns", "nnz", "assembly_s", "setup_s", "solve_s",
//! "adjoint_solve_s", "iterations", "adjoint_iterations", "levels", "level_sizes", "operator_complexity", "peak_rss_mb"}.
//! `assembly_s` is this example's simple sequential assembler, not the project's.

#[path = "../tests/amg_kuhn.rs"]
mod kuhn;

use std::time::Instant;

use gradfem_solvers::amg::{AmgCgSolver, AmgHierarchy, AmgParams, NearNullspace, Smoother};
use gradfem_solvers::cg::CgParams;
use gradfem_solvers::linear::LinearSolver;

fn arg<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok())
}

/// Peak resident set size (VmHWM) in MiB, 0 where /proc is unavailable.
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = arg(&args, "--n").unwrap_or(46);
    let mut params = AmgParams::default();
    if let Some(d) = arg::<usize>(&args, "--degree") {
        let ratio = arg(&args, "--ratio").unwrap_or(30.0);
        params.smoother = Smoother::Chebyshev { degree: d, ratio };
    }
    if args.iter().any(|a| a == "--gs") {
        params.smoother = Smoother::SymmetricGaussSeidel;
    }
    if let Some(t) = arg(&args, "--theta") {
        params.strength_threshold = t;
    }
    if let Some(c) = arg(&args, "--coarse") {
        params.coarse_size = c;
    }

    let t0 = Instant::now();
    let elastic = args.iter().any(|a| a == "--elastic");
    let (a, b, modes) = if elastic {
        // the peers' elastic3d: 3 unknowns per node, rigid-body modes unless --translations
        let p = kuhn::KuhnElasticity::new([n; 3], [1.0; 3]);
        params.block_size = 3;
        let modes = (!args.iter().any(|a| a == "--translations"))
            .then(|| NearNullspace::rigid_body_modes(&p.coords, &p.unknowns).expect("modes"));
        (p.a, p.b, modes)
    } else {
        let p = kuhn::KuhnPoisson::new(n);
        (p.a, p.b, None)
    };
    let assembly_s = t0.elapsed().as_secs_f64();

    let recycle = if args.iter().any(|a| a == "--no-recycle") {
        0
    } else {
        gradfem_solvers::amg::DEFAULT_RECYCLED_DIRECTIONS
    };
    let mut solver =
        AmgCgSolver::new("thermal", params.clone(), CgParams::default()).with_recycling(recycle);
    let nns = modes.clone();
    if let Some(m) = modes {
        solver = solver.with_near_nullspace(m);
    }
    // `--repeat R`: the set-up time is the fastest of R hierarchies built anew
    let repeat: usize = arg(&args, "--repeat").unwrap_or(1);
    let mut setup_s = f64::INFINITY;
    for _ in 1..repeat {
        let t0 = Instant::now();
        let h = match &nns {
            Some(m) => AmgHierarchy::with_near_nullspace(&a, &params, m.clone().into()),
            None => AmgHierarchy::new(&a, &params),
        };
        h.expect("AMG setup");
        setup_s = setup_s.min(t0.elapsed().as_secs_f64());
    }
    let t0 = Instant::now();
    solver.factor(&a).expect("AMG setup");
    setup_s = setup_s.min(t0.elapsed().as_secs_f64());

    let mut x = b.clone();
    let t0 = Instant::now();
    solver.solve_in_place(&mut x).expect("forward solve");
    let solve_s = t0.elapsed().as_secs_f64();
    let iterations = solver.last_info().unwrap().iterations;

    // The adjoint of J = Σ xᵢ²: right-hand side 2x, solved with the recycled directions.
    let mut y: Vec<f64> = x.iter().map(|v| 2.0 * v).collect();
    let t0 = Instant::now();
    solver.solve_transpose_in_place(&mut y).expect("adjoint solve");
    let adjoint_solve_s = t0.elapsed().as_secs_f64();
    let adjoint_iterations = solver.last_info().unwrap().iterations;

    let h = solver.hierarchy().unwrap();
    println!(
        "{{\"n\": {n}, \"unknowns\": {}, \"nnz\": {}, \"assembly_s\": {assembly_s:.3}, \
         \"setup_s\": {setup_s:.3}, \"solve_s\": {solve_s:.3}, \"adjoint_solve_s\": {adjoint_solve_s:.3}, \
         \"iterations\": {iterations}, \"adjoint_iterations\": {adjoint_iterations}, \"levels\": {}, \"level_sizes\": {:?}, \
         \"operator_complexity\": {:.3}, \"peak_rss_mb\": {:.0}}}",
        a.n_rows,
        a.nnz(),
        h.levels(),
        h.level_sizes(),
        h.operator_complexity(),
        peak_rss_mb()
    );
}
