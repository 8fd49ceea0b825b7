//! Calibration of the cost model of `route::SpdSolver` and the measured crossover between
//! sparse Cholesky and AMG-CG: 3D P1 Poisson and 3D P1 elasticity (the peers' heat3d and
//! elastic3d matrices, `tests/amg_kuhn.rs`) on the Kuhn-split unit cube for a range of N. For
//! each system: the symbolic analyses (AMD, nested dissection) with their multiply-adds and
//! nnz(L), the numeric factorization and two solves with the cheaper one (`cholesky_s`: the
//! AMD analysis, nested dissection's where that is the cheaper, the factorization and the
//! solves: the route from scratch), the AMG set-up, the
//! forward CG solve to 1e-10 and an adjoint solve (right-hand side 2x, to 1e-7, recycled
//! directions), the measured rates, and what the router decides with the default
//! `CostModel` and what it predicts.
//!
//! Run: `cargo run --release -p gradfem-solvers --example route_calibration -- [--elastic]
//! [--n N1,N2,...] [--repeat R]` (fastest of R runs of each part, default 2).
//! Prints one JSON line per N.

#[path = "../tests/amg_kuhn.rs"]
mod kuhn;

use std::time::Instant;

use gradfem_solvers::amg::{AmgCgSolver, AmgParams, NearNullspace};
use gradfem_solvers::cg::CgParams;
use gradfem_solvers::linear::{CholeskyOrdering, CholeskySolver, LinearSolver};
use gradfem_solvers::route::{Route, SpdSolver, level_separator};

fn fastest<T>(repeat: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut out = None;
    for _ in 0..repeat {
        let t = Instant::now();
        let r = f();
        best = best.min(t.elapsed().as_secs_f64());
        out = Some(r);
    }
    (best, out.unwrap())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let elastic = args.iter().any(|a| a == "--elastic");
    let value = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
    let sizes: Vec<usize> = value("--n")
        .map(|v| v.split(',').map(|s| s.parse().expect("--n N1,N2,...")).collect())
        .unwrap_or_else(|| if elastic { vec![8, 12, 16, 20, 24] } else { vec![16, 24, 32, 40] });
    let repeat: usize = value("--repeat").map_or(2, |v| v.parse().expect("--repeat R"));
    for n in sizes {
        let (a, b, modes) = if elastic {
            let p = kuhn::KuhnElasticity::new([n; 3], [1.0; 3]);
            let m = NearNullspace::rigid_body_modes(&p.coords, &p.unknowns).unwrap();
            (p.a, p.b, Some(m))
        } else {
            let p = kuhn::KuhnPoisson::new(n);
            (p.a, p.b, None)
        };
        let (separator_s, separator) = fastest(repeat, || level_separator(&a));
        // Cholesky: each ordering analysed, factored and solved twice; the route from scratch
        // pays the AMD analysis always (the router's first step) and nested dissection's when
        // it factors in that order
        let mut analyses = Vec::new();
        let mut routes = Vec::new();
        for ordering in [CholeskyOrdering::Amd, CholeskyOrdering::NestedDissection] {
            let (t, (flops, nnz_l)) = fastest(repeat, || {
                let mut c = CholeskySolver::new("calibration").with_ordering(ordering);
                c.analyse(&a, ordering).unwrap()
            });
            let mut chol = CholeskySolver::new("calibration").with_ordering(ordering);
            chol.analyse(&a, ordering).unwrap();
            let (factor_s, _) = fastest(repeat, || chol.factor(&a).unwrap());
            let (solve_s, _) = fastest(repeat, || {
                let mut x = b.clone();
                chol.solve_in_place(&mut x).unwrap();
                let mut y = x.clone();
                chol.solve_transpose_in_place(&mut y).unwrap();
            });
            analyses.push(serde_like(ordering, flops, nnz_l, t, factor_s, solve_s));
            routes.push((t, flops, nnz_l, factor_s, solve_s, ordering));
        }
        let amd_route = routes[0].0 + routes[0].3 + routes[0].4;
        let nd_route = routes[0].0 + routes[1].0 + routes[1].3 + routes[1].4;
        let best = if nd_route < amd_route { routes[1] } else { routes[0] };
        let cholesky_s = amd_route.min(nd_route);
        let (_, flops, nnz_l, factor_s, solve_s, ordering) = best;
        // AMG-CG
        let amg_params =
            AmgParams { block_size: if elastic { 3 } else { 1 }, ..Default::default() };
        let new_amg = || {
            let s = AmgCgSolver::new("calibration", amg_params.clone(), CgParams::default());
            match &modes {
                Some(m) => s.with_near_nullspace(m.clone()),
                None => s,
            }
        };
        let (setup_s, mut amg) = fastest(repeat, || {
            let mut s = new_amg();
            s.factor(&a).unwrap();
            s
        });
        let mut iterations = (0, 0);
        let (cg_s, _) = fastest(repeat, || {
            amg.factor(&a).unwrap();
            let mut x = b.clone();
            amg.solve_in_place(&mut x).unwrap();
            let it = amg.last_info().unwrap().iterations;
            let mut y: Vec<f64> = x.iter().map(|v| 2.0 * v).collect();
            amg.solve_transpose_in_place(&mut y).unwrap();
            iterations = (it, amg.last_info().unwrap().iterations);
        });
        // cg_s includes a refresh of the hierarchy's values; take it out with the set-up time
        let refresh_s = fastest(repeat, || amg.factor(&a).unwrap()).0;
        let cg_s = (cg_s - refresh_s).max(0.0);
        let (decide_s, route) = fastest(repeat, || {
            let mut s =
                SpdSolver::new("calibration", Route::Auto, amg_params.clone(), CgParams::default());
            if let Some(m) = &modes {
                s = s.with_near_nullspace(m.clone());
            }
            s.factor(&a).unwrap();
            s.decision().unwrap().clone()
        });
        let nnz = a.nnz();
        let out = format!(
            "{{\"problem\": \"{}\", \"n\": {n}, \"unknowns\": {}, \"nnz\": {nnz}, \"separator\": {separator}, \
             \"separator_s\": {separator_s:.4}, \"analyses\": [{}], \"ordering\": \"{ordering:?}\", \
             \"factor_s\": {factor_s:.4}, \"two_solves_s\": {solve_s:.4}, \"cholesky_s\": {:.4}, \
             \"factor_rate\": {:.3e}, \"solve_rate\": {:.3e}, \"separator_cube_over_flops\": {:.3}, \
             \"amg_setup_s\": {setup_s:.4}, \"amg_cg_s\": {cg_s:.4}, \"amg_s\": {:.4}, \"iterations\": [{}, {}], \
             \"setup_per_nnz\": {:.3e}, \"iteration_per_nnz\": {:.3e}, \
             \"route\": \"{:?}\", \"decide_s\": {decide_s:.4}, \"predicted_cholesky_s\": {}, \
             \"predicted_cholesky_lower_s\": {}, \"predicted_amg_s\": {}, \"measured_faster\": \"{}\"}}",
            if elastic { "elastic3d" } else { "heat3d" },
            a.n_rows,
            analyses.join(", "),
            cholesky_s,
            flops / factor_s,
            4.0 * nnz_l as f64 / solve_s,
            (separator as f64).powi(3) / 3.0 / flops,
            setup_s + cg_s,
            iterations.0,
            iterations.1,
            setup_s / nnz as f64,
            cg_s / nnz as f64 / (iterations.0 + iterations.1) as f64,
            route.route,
            opt(route.cholesky_seconds),
            opt(route.cholesky_lower_bound_seconds),
            opt(route.amg_seconds),
            if cholesky_s < setup_s + cg_s { "cholesky" } else { "amg-cg" },
        );
        println!("{out}");
    }
}

fn serde_like(
    ordering: CholeskyOrdering,
    flops: f64,
    nnz_l: usize,
    t: f64,
    factor_s: f64,
    solve_s: f64,
) -> String {
    format!(
        "{{\"ordering\": \"{ordering:?}\", \"flops\": {flops:.4e}, \"nnz_l\": {nnz_l}, \
         \"analyse_s\": {t:.4}, \"factor_s\": {factor_s:.4}, \"two_solves_s\": {solve_s:.4}}}"
    )
}

/// A JSON number or null.
fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "null".to_string(), |v| format!("{v:.4}"))
}
