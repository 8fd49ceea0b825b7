//! Measures the assembly pattern build, the parallel P1 assembly and the direct solvers on a
//! Kuhn-split unit cube (6 tetrahedra per cell), and prints one JSON object.
//!
//! Run: `cargo run --release -p gradfem-solvers --example bench_assembly -- [N] [N_FACTOR]`
//! (defaults N = 60: 1.3 M tets; N_FACTOR = 24 for the Cholesky/LU timings, 0 skips them).
//!
//! Prints e.g. `{"n": 60, "tets": 1296000, ..., "assembly_tets_per_s_1_thread": 7.1e6, ...}`:
//! pattern build time, assembly throughput with 1 thread and with all threads (synthetic P1
//! Laplacian kernel computed from the coordinates), factor/solve times with sequential and
//! rayon-parallel numeric factorization, and for each Cholesky fill-reducing ordering the
//! entries of `L`, the first factorization (symbolic analysis included) and the best of three
//! refactorizations, on the Laplacian and on the 3-unknowns-per-node system `kron(A, B)` with a
//! dense SPD 3 × 3 `B` (the pattern of a 3D elasticity tangent).

use gradfem_solvers::CsrMatrix;
use gradfem_solvers::assembly::{AssemblyPattern, CONSTRAINED};
use gradfem_solvers::linear::{
    CholeskyOrdering, CholeskySolver, LinearSolver, LuSolver, residual_norm,
};
use std::time::Instant;

fn kuhn_box(n: usize) -> (Vec<[f64; 3]>, Vec<[usize; 4]>) {
    let m = n + 1;
    let id = |i: usize, j: usize, k: usize| i + m * (j + m * k);
    let h = 1.0 / n as f64;
    let mut x = Vec::with_capacity(m * m * m);
    for k in 0..m {
        for j in 0..m {
            for i in 0..m {
                x.push([i as f64 * h, j as f64 * h, k as f64 * h]);
            }
        }
    }
    const PERMS: [[usize; 3]; 6] =
        [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
    let mut tets = Vec::with_capacity(6 * n * n * n);
    for k in 0..n {
        for j in 0..n {
            for i in 0..n {
                for p in PERMS {
                    let mut c = [i, j, k];
                    let mut t = [id(i, j, k); 4];
                    for (s, &axis) in p.iter().enumerate() {
                        c[axis] += 1;
                        t[s + 1] = id(c[0], c[1], c[2]);
                    }
                    tets.push(t);
                }
            }
        }
    }
    (x, tets)
}

/// P1 Laplacian kₐᵦ = |T| ∇λₐ·∇λᵦ, fₐ = |T|/4.
#[inline]
fn p1_laplacian(x: &[[f64; 3]; 4], ke: &mut [f64], fe: &mut [f64]) {
    let d = |a: usize, c: usize| x[a][c] - x[0][c];
    let j = [[d(1, 0), d(2, 0), d(3, 0)], [d(1, 1), d(2, 1), d(3, 1)], [d(1, 2), d(2, 2), d(3, 2)]];
    let c00 = j[1][1] * j[2][2] - j[1][2] * j[2][1];
    let c01 = j[0][2] * j[2][1] - j[0][1] * j[2][2];
    let c02 = j[0][1] * j[1][2] - j[0][2] * j[1][1];
    let det = j[0][0] * c00 + j[1][0] * c01 + j[2][0] * c02;
    let inv_det = 1.0 / det;
    let rows = [
        [c00, c01, c02],
        [
            j[1][2] * j[2][0] - j[1][0] * j[2][2],
            j[0][0] * j[2][2] - j[0][2] * j[2][0],
            j[0][2] * j[1][0] - j[0][0] * j[1][2],
        ],
        [
            j[1][0] * j[2][1] - j[1][1] * j[2][0],
            j[0][1] * j[2][0] - j[0][0] * j[2][1],
            j[0][0] * j[1][1] - j[0][1] * j[1][0],
        ],
    ];
    let mut g = [[0.0; 3]; 4];
    for c in 0..3 {
        g[1][c] = rows[0][c] * inv_det;
        g[2][c] = rows[1][c] * inv_det;
        g[3][c] = rows[2][c] * inv_det;
        g[0][c] = -(g[1][c] + g[2][c] + g[3][c]);
    }
    let vol = det.abs() / 6.0;
    for a in 0..4 {
        for b in 0..4 {
            ke[4 * a + b] = vol * (g[a][0] * g[b][0] + g[a][1] * g[b][1] + g[a][2] * g[b][2]);
        }
        fe[a] = 0.25 * vol;
    }
}

fn dirichlet(x: &[[f64; 3]], tets: &[[usize; 4]]) -> (usize, Vec<usize>, Vec<usize>) {
    let on_boundary = |p: &[f64; 3]| p.iter().any(|&c| c.abs() < 1e-12 || (c - 1.0).abs() < 1e-12);
    let mut number = vec![CONSTRAINED; x.len()];
    let mut nu = 0;
    for (i, p) in x.iter().enumerate() {
        if !on_boundary(p) {
            number[i] = nu;
            nu += 1;
        }
    }
    let dofs = tets.iter().flat_map(|t| t.iter().map(|&v| number[v])).collect();
    let offsets = (0..=tets.len()).map(|e| 4 * e).collect();
    (nu, offsets, dofs)
}

/// `kron(A, B)` with the 3 unknowns of each node interleaved: the pattern of a 3D vector
/// (elasticity-like) system on the same mesh, symmetric positive definite when `A` and `B` are.
fn kron_3x3(a: &CsrMatrix, block: [[f64; 3]; 3]) -> CsrMatrix {
    let mut row_ptr = vec![0];
    let (mut col_idx, mut values) = (Vec::new(), Vec::new());
    for i in 0..a.n_rows {
        for brow in &block {
            for k in a.row_ptr[i]..a.row_ptr[i + 1] {
                for (c, b) in brow.iter().enumerate() {
                    col_idx.push(3 * a.col_idx[k] + c as u32);
                    values.push(a.values[k] * b);
                }
            }
            row_ptr.push(col_idx.len());
        }
    }
    CsrMatrix { n_rows: 3 * a.n_rows, n_cols: 3 * a.n_cols, row_ptr, col_idx, values }
}

fn time_assembly(p: &AssemblyPattern, x: &[[f64; 3]], tets: &[[usize; 4]], threads: usize) -> f64 {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    pool.install(|| {
        let mut a = p.new_matrix();
        let mut f = vec![0.0; p.n_unknowns()];
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t = Instant::now();
            p.assemble_into(&mut a, &mut f, |e, ke, fe| {
                p1_laplacian(&tets[e].map(|v| x[v]), ke, fe)
            });
            best = best.min(t.elapsed().as_secs_f64());
        }
        best
    })
}

fn main() {
    let args: Vec<usize> =
        std::env::args().skip(1).map(|a| a.parse().expect("N must be an integer")).collect();
    let n = args.first().copied().unwrap_or(60);
    let n_factor = args.get(1).copied().unwrap_or(24);
    let threads = rayon::current_num_threads();

    let (x, tets) = kuhn_box(n);
    let (nu, offsets, dofs) = dirichlet(&x, &tets);
    let t = Instant::now();
    let p = AssemblyPattern::new(nu, &offsets, &dofs);
    let pattern_s = t.elapsed().as_secs_f64();
    let t1 = time_assembly(&p, &x, &tets, 1);
    let tn = time_assembly(&p, &x, &tets, threads);
    let ne = tets.len() as f64;
    let mut out = vec![
        format!("\"n\": {n}"),
        format!("\"tets\": {}", tets.len()),
        format!("\"unknowns\": {nu}"),
        format!("\"nnz\": {}", p.nnz()),
        format!("\"colours\": {}", p.n_colours()),
        format!("\"pattern_s\": {pattern_s:.4}"),
        format!("\"threads\": {threads}"),
        format!("\"assembly_s_1_thread\": {t1:.4}"),
        format!("\"assembly_tets_per_s_1_thread\": {:.4e}", ne / t1),
        format!("\"assembly_s_all_threads\": {tn:.4}"),
        format!("\"assembly_tets_per_s_all_threads\": {:.4e}", ne / tn),
    ];

    if n_factor > 0 {
        let (x, tets) = kuhn_box(n_factor);
        let (nu, offsets, dofs) = dirichlet(&x, &tets);
        let p = AssemblyPattern::new(nu, &offsets, &dofs);
        let mut a = p.new_matrix();
        let mut b = vec![0.0; nu];
        p.assemble_into(&mut a, &mut b, |e, ke, fe| p1_laplacian(&tets[e].map(|v| x[v]), ke, fe));
        out.push(format!("\"factor_unknowns\": {nu}"));
        let a3 = kron_3x3(&a, [[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]]);
        out.push(format!("\"factor_unknowns_3_dof\": {}", a3.n_rows));
        for (system, matrix) in [("cholesky", &a), ("cholesky_3_dof", &a3)] {
            for (name, ordering) in [
                ("amd", CholeskyOrdering::Amd),
                ("nd", CholeskyOrdering::NestedDissection),
                ("auto", CholeskyOrdering::Auto),
            ] {
                let mut s = CholeskySolver::new("bench").with_ordering(ordering);
                let t = Instant::now();
                s.factor(matrix).unwrap();
                let first = t.elapsed().as_secs_f64();
                let mut refactor = f64::INFINITY;
                for _ in 0..3 {
                    let t = Instant::now();
                    s.factor(matrix).unwrap();
                    refactor = refactor.min(t.elapsed().as_secs_f64());
                }
                out.push(format!(
                    "\"{system}_order_{name}\": {{\"nnz_l\": {}, \"flops\": {:.4e}, \"first_factor_s\": {first:.4}, \"refactor_s\": {refactor:.4}, \"used\": \"{:?}\"}}",
                    s.factor_nnz(),
                    s.factor_flops(),
                    s.ordering_used().expect("factored")
                ));
            }
        }
        for (name, parallel) in [("seq", false), ("rayon", true)] {
            let solvers: [(&str, Box<dyn LinearSolver>); 2] = [
                (
                    "cholesky",
                    Box::new(CholeskySolver::new("bench").with_parallel_factorization(parallel)),
                ),
                ("lu", Box::new(LuSolver::new("bench").with_parallel_factorization(parallel))),
            ];
            for (kind, mut s) in solvers {
                let t = Instant::now();
                s.factor(&a).unwrap();
                let first = t.elapsed().as_secs_f64();
                let t = Instant::now();
                s.factor(&a).unwrap();
                let refactor = t.elapsed().as_secs_f64();
                let mut xs = b.clone();
                let t = Instant::now();
                s.solve_in_place(&mut xs).unwrap();
                let solve = t.elapsed().as_secs_f64();
                let res = residual_norm(&a, &xs, &b);
                out.push(format!(
                    "\"{kind}_{name}\": {{\"first_factor_s\": {first:.4}, \"refactor_s\": {refactor:.4}, \"solve_s\": {solve:.4}, \"residual\": {res:.3e}}}"
                ));
            }
        }
    }
    println!("{{{}}}", out.join(", "));
}
