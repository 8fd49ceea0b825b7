//! AMG-preconditioned CG on 3D P1 Poisson (Kuhn-split unit cube, Dirichlet on x = 0), checked
//! against faer's sparse Cholesky; iteration counts pinned; bad inputs give typed errors.

#[path = "amg_kuhn.rs"]
mod kuhn;

use faer::Side;
use faer::linalg::solvers::Solve;
use faer::sparse::{SparseColMat, Triplet};
use gradfem_solvers::amg::{AmgCgSolver, AmgHierarchy, AmgParams, Smoother};
use gradfem_solvers::cg::{CgParams, CgStop, IdentityPreconditioner, JacobiPreconditioner, pcg};
use gradfem_solvers::error::SolverError;
use gradfem_solvers::linear::LinearSolver;
use gradfem_solvers::sparse::CsrMatrix;
use kuhn::KuhnPoisson;
use rstest::rstest;

/// x = A⁻¹ b by faer's sparse Cholesky.
fn cholesky_solve(a: &CsrMatrix, b: &[f64]) -> Vec<f64> {
    let mut t = Vec::with_capacity(a.nnz());
    for i in 0..a.n_rows {
        let (cols, vals) = a.row(i);
        for (&j, &v) in cols.iter().zip(vals) {
            t.push(Triplet::new(i, j as usize, v));
        }
    }
    let m = SparseColMat::<usize, f64>::try_new_from_triplets(a.n_rows, a.n_cols, &t).unwrap();
    let llt = m.sp_cholesky(Side::Lower).unwrap();
    let mut x = faer::Mat::<f64>::from_fn(b.len(), 1, |i, _| b[i]);
    llt.solve_in_place(x.as_mut());
    (0..b.len()).map(|i| x[(i, 0)]).collect()
}

fn rel_diff(x: &[f64], y: &[f64]) -> f64 {
    let d: f64 = x.iter().zip(y).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt();
    d / y.iter().map(|v| v * v).sum::<f64>().sqrt()
}

#[rstest]
#[case::identity(false)]
#[case::jacobi(true)]
fn plain_and_jacobi_pcg_match_cholesky(#[case] jacobi: bool) {
    let p = KuhnPoisson::new(6);
    let exact = cholesky_solve(&p.a, &p.b);
    let mut x = vec![0.0; p.b.len()];
    let params = CgParams { rel_tol: 1e-12, ..Default::default() };
    let info = if jacobi {
        pcg(&p.a, &p.b, &mut x, &JacobiPreconditioner::new(&p.a), &params)
    } else {
        pcg(&p.a, &p.b, &mut x, &IdentityPreconditioner, &params)
    };
    assert!(info.converged, "{info:?}");
    assert_eq!(info.residual_history.len(), info.iterations + 1);
    assert!(info.relative_residual() <= 1e-12);
    assert!(rel_diff(&x, &exact) < 1e-9, "{}", rel_diff(&x, &exact));
}

#[test]
fn amg_cg_on_poisson_n20_converges_fast_and_matches_cholesky() {
    let p = KuhnPoisson::new(20);
    let exact = cholesky_solve(&p.a, &p.b);
    let mut solver = AmgCgSolver::new("thermal", AmgParams::default(), CgParams::default());
    solver.factor(&p.a).unwrap();
    let mut x = p.b.clone();
    solver.solve_in_place(&mut x).unwrap();
    let info = solver.last_info().unwrap();
    assert!(info.converged && info.relative_residual() <= 1e-10, "{info:?}");
    assert!(info.iterations <= 14, "{} iterations", info.iterations);
    assert!(rel_diff(&x, &exact) < 1e-8, "{}", rel_diff(&x, &exact));
    let h = solver.hierarchy().unwrap();
    assert!(
        h.levels() >= 2 && h.operator_complexity() < 1.6,
        "{} {}",
        h.levels(),
        h.operator_complexity()
    );
    // adjoint solve: same matrix, same answer; the recycled directions of the forward solve
    // span its solution, so the adjoint starts (nearly) converged
    assert_eq!(solver.recycled_directions(), info.iterations);
    let mut y = p.b.clone();
    solver.solve_transpose_in_place(&mut y).unwrap();
    assert!(rel_diff(&y, &exact) < 1e-8, "{}", rel_diff(&y, &exact));
    assert!(solver.last_info().unwrap().iterations <= 1, "{:?}", solver.last_info());
}

/// The adjoint of J = Σ xᵢ² (right-hand side 2x) started from the forward solve's recycled
/// directions: the same solution as a solve from zero, in fewer iterations; the adjoint
/// tolerance is the documented default, and a tighter one can be asked for.
#[test]
fn recycled_adjoint_solve_matches_a_solve_from_zero() {
    let p = KuhnPoisson::new(16);
    let forward = |recycle: usize, adjoint_tol: Option<f64>| {
        // the forward tolerance bounds the adjoint one from below
        let cg = CgParams { rel_tol: adjoint_tol.unwrap_or(1e-10), ..Default::default() };
        let mut s = AmgCgSolver::new("thermal", AmgParams::default(), cg).with_recycling(recycle);
        if let Some(t) = adjoint_tol {
            s = s.with_adjoint_tolerance(t);
        }
        s.factor(&p.a).unwrap();
        let mut x = p.b.clone();
        s.solve_in_place(&mut x).unwrap();
        (s, x)
    };
    let (mut plain, x) = forward(0, Some(1e-12));
    assert_eq!(plain.recycled_directions(), 0);
    let rhs: Vec<f64> = x.iter().map(|v| 2.0 * v).collect();
    let exact = cholesky_solve(&p.a, &rhs);
    let mut y0 = rhs.clone();
    plain.solve_transpose_in_place(&mut y0).unwrap();
    let from_zero = plain.last_info().unwrap().clone();
    assert!(from_zero.relative_residual() <= 1e-12, "{from_zero:?}");

    let (mut recycled, _) = forward(32, Some(1e-12));
    assert!(recycled.recycled_directions() > 5);
    let mut y1 = rhs.clone();
    recycled.solve_transpose_in_place(&mut y1).unwrap();
    let info = recycled.last_info().unwrap();
    assert!(info.relative_residual() <= 1e-12, "{info:?}");
    assert!(
        info.iterations < from_zero.iterations,
        "{} vs {}",
        info.iterations,
        from_zero.iterations
    );
    assert!(rel_diff(&y1, &exact) < 1e-10, "{}", rel_diff(&y1, &exact));

    // the default adjoint tolerance
    let (mut default, _) = forward(32, None);
    let mut y2 = rhs.clone();
    default.solve_transpose_in_place(&mut y2).unwrap();
    let r = default.last_info().unwrap().relative_residual();
    assert!(r <= gradfem_solvers::amg::DEFAULT_ADJOINT_REL_TOL && r > 1e-12, "{r}");
    assert!(rel_diff(&y2, &exact) < 1e-6, "{}", rel_diff(&y2, &exact));
    // a refactorization forgets the directions (they belong to the old matrix)
    default.factor(&p.a).unwrap();
    assert_eq!(default.recycled_directions(), 0);
}

#[rstest]
#[case::chebyshev2(Smoother::Chebyshev { degree: 2, ratio: 6.0 }, 4)]
#[case::chebyshev3(Smoother::Chebyshev { degree: 3, ratio: 30.0 }, 4)]
#[case::gauss_seidel(Smoother::SymmetricGaussSeidel, 4)]
fn iteration_counts_are_mesh_independent(#[case] smoother: Smoother, #[case] spread: usize) {
    let params = AmgParams { smoother, ..Default::default() };
    let counts: Vec<usize> = [10, 20, 30]
        .iter()
        .map(|&n| {
            let p = KuhnPoisson::new(n);
            let h = AmgHierarchy::new(&p.a, &params).unwrap();
            let mut x = vec![0.0; p.b.len()];
            let info = pcg(&p.a, &p.b, &mut x, &h, &CgParams::default());
            assert!(info.converged, "N = {n}: {info:?}");
            eprintln!(
                "{smoother:?} N = {n}: {} iterations, {} levels",
                info.iterations,
                h.levels()
            );
            info.iterations
        })
        .collect();
    assert!(counts[2] <= counts[0] + spread && counts[2] <= 20, "{smoother:?}: {counts:?}");
}

#[test]
fn negative_definite_matrix_is_a_typed_error() {
    let mut p = KuhnPoisson::new(5);
    p.a.values.iter_mut().for_each(|v| *v = -*v);
    let mut solver = AmgCgSolver::new("thermal", AmgParams::default(), CgParams::default());
    match solver.factor(&p.a) {
        Err(SolverError::NotPositiveDefinite { field, detail }) => {
            assert_eq!(field, "thermal");
            assert!(detail.contains("row"), "{detail}");
        }
        other => panic!("expected NotPositiveDefinite, got {other:?}"),
    }
}

#[test]
fn indefinite_matrix_is_a_typed_error() {
    // A − σ I with σ well inside the spectrum: positive diagonal, indefinite.
    let mut p = KuhnPoisson::new(8);
    let h = 1.0 / 8.0;
    for i in 0..p.a.n_rows {
        let k = p.a.find(i, i).unwrap();
        p.a.values[k] -= 3.0 * h;
    }
    let mut solver = AmgCgSolver::new(
        "thermal",
        AmgParams::default(),
        CgParams { max_iterations: 200, ..Default::default() },
    );
    let result = solver.factor(&p.a).and_then(|_| {
        let mut x = p.b.clone();
        solver.solve_in_place(&mut x)
    });
    assert!(
        matches!(
            result,
            Err(SolverError::NotPositiveDefinite { .. }
                | SolverError::IterativeNoConvergence { .. })
        ),
        "{result:?}"
    );
}

#[test]
fn singular_neumann_problem_is_an_error_not_a_panic() {
    // 2D pure-Neumann 5-point Laplacian (constants in the kernel) with an inconsistent load.
    let n = 30;
    let id = |i: usize, j: usize| i * n + j;
    let mut row_ptr = vec![0];
    let (mut col_idx, mut values) = (Vec::new(), Vec::new());
    for i in 0..n {
        for j in 0..n {
            let mut row = Vec::new();
            if i > 0 {
                row.push(id(i - 1, j));
            }
            if j > 0 {
                row.push(id(i, j - 1));
            }
            if j + 1 < n {
                row.push(id(i, j + 1));
            }
            if i + 1 < n {
                row.push(id(i + 1, j));
            }
            let deg = row.len() as f64;
            row.push(id(i, j));
            row.sort_unstable();
            for c in row {
                col_idx.push(c);
                values.push(if c == id(i, j) { deg } else { -1.0 });
            }
            row_ptr.push(col_idx.len());
        }
    }
    let col_idx = col_idx.into_iter().map(|j: usize| j as u32).collect();
    let a = CsrMatrix { n_rows: n * n, n_cols: n * n, row_ptr, col_idx, values };
    let mut solver = AmgCgSolver::new(
        "electrical",
        AmgParams::default(),
        CgParams { max_iterations: 100, ..Default::default() },
    );
    let result = solver.factor(&a).and_then(|_| {
        let mut x = vec![1.0; n * n];
        solver.solve_in_place(&mut x)
    });
    match result {
        Err(SolverError::IterativeNoConvergence { field, iterations, residual }) => {
            assert_eq!(field, "electrical");
            assert!(iterations <= 100 && residual > 1e-10);
        }
        Err(SolverError::NotPositiveDefinite { .. }) => {}
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn refresh_with_scaled_values_scales_the_solution() {
    let p = KuhnPoisson::new(12);
    let mut solver = AmgCgSolver::new("thermal", AmgParams::default(), CgParams::default());
    solver.factor(&p.a).unwrap();
    let levels = solver.hierarchy().unwrap().level_sizes();
    let mut x = p.b.clone();
    solver.solve_in_place(&mut x).unwrap();
    let it1 = solver.last_info().unwrap().iterations;

    let mut a3 = p.a.clone();
    a3.values.iter_mut().for_each(|v| *v *= 3.0);
    solver.factor(&a3).unwrap(); // same pattern: refresh, aggregates reused
    assert_eq!(solver.hierarchy().unwrap().level_sizes(), levels);
    let mut y = p.b.clone();
    solver.solve_in_place(&mut y).unwrap();
    let it3 = solver.last_info().unwrap().iterations;
    let x3: Vec<f64> = x.iter().map(|v| v / 3.0).collect();
    assert!(rel_diff(&y, &x3) < 1e-9, "{}", rel_diff(&y, &x3));
    assert_eq!(it1, it3);
}

#[test]
fn hierarchy_refresh_matches_a_fresh_build() {
    let p = KuhnPoisson::new(10);
    let params = AmgParams::default();
    let mut h = AmgHierarchy::new(&p.a, &params).unwrap();
    let mut a2 = p.a.clone();
    a2.values.iter_mut().for_each(|v| *v *= 0.5);
    h.refresh_values(&a2).unwrap();
    let fresh = AmgHierarchy::new(&a2, &params).unwrap();
    let r: Vec<f64> = (0..p.b.len()).map(|i| (i as f64).sin()).collect();
    let (mut z1, mut z2) = (vec![0.0; r.len()], vec![0.0; r.len()]);
    use gradfem_solvers::cg::Preconditioner;
    h.apply(&r, &mut z1);
    fresh.apply(&r, &mut z2);
    assert!(rel_diff(&z1, &z2) < 1e-12);
}

#[test]
fn max_iterations_gives_no_convergence_with_the_numbers() {
    let p = KuhnPoisson::new(10);
    let mut solver = AmgCgSolver::new(
        "thermal",
        AmgParams::default(),
        CgParams { max_iterations: 2, ..Default::default() },
    );
    solver.factor(&p.a).unwrap();
    let mut x = p.b.clone();
    match solver.solve_in_place(&mut x) {
        Err(SolverError::IterativeNoConvergence { iterations, residual, .. }) => {
            assert_eq!(iterations, 2);
            assert!(residual > 1e-10 && residual < 1.0, "{residual}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(solver.last_info().unwrap().stop, CgStop::MaxIterations);
}

#[test]
fn block_size_three_solves_three_decoupled_poisson_problems() {
    // Interleave three copies of the Poisson matrix (a "vector Laplacian"), aggregate per node.
    let p = KuhnPoisson::new(8);
    let n = p.a.n_rows;
    let mut row_ptr = vec![0];
    let (mut col_idx, mut values) = (Vec::new(), Vec::new());
    for i in 0..n {
        for c in 0..3 {
            let (cols, vals) = p.a.row(i);
            for (&j, &v) in cols.iter().zip(vals) {
                col_idx.push(3 * j + c as u32);
                values.push(v * (c + 1) as f64);
            }
            row_ptr.push(col_idx.len());
        }
    }
    let a = CsrMatrix { n_rows: 3 * n, n_cols: 3 * n, row_ptr, col_idx, values };
    let b: Vec<f64> = (0..3 * n).map(|k| p.b[k / 3]).collect();
    let params = AmgParams { block_size: 3, ..Default::default() };
    let mut solver = AmgCgSolver::new("mechanical", params, CgParams::default());
    solver.factor(&a).unwrap();
    let mut x = b.clone();
    solver.solve_in_place(&mut x).unwrap();
    let scalar = cholesky_solve(&p.a, &p.b);
    for c in 0..3 {
        let xc: Vec<f64> = (0..n).map(|i| x[3 * i + c] * (c + 1) as f64).collect();
        assert!(rel_diff(&xc, &scalar) < 1e-8, "component {c}");
    }
    assert!(solver.last_info().unwrap().iterations <= 20);
}
