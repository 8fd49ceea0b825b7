//! Direct solvers against dense references: solve and transpose-solve, symbolic reuse, typed
//! errors for non-SPD, singular and non-finite input.

#![allow(clippy::needless_range_loop)] // dense reference code reads best with indices

use gradfem_solvers::error::SolverError;
use gradfem_solvers::linear::{CholeskySolver, LinearSolver, LuSolver, residual_norm};
use gradfem_solvers::sparse::CsrMatrix;
use rstest::rstest;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn from_dense(a: &[Vec<f64>]) -> CsrMatrix {
    let n = a.len();
    let mut row_ptr = vec![0];
    let mut col_idx = Vec::new();
    let mut values = Vec::new();
    for row in a {
        for (j, &v) in row.iter().enumerate() {
            if v != 0.0 {
                col_idx.push(j);
                values.push(v);
            }
        }
        row_ptr.push(col_idx.len());
    }
    let col_idx = col_idx.into_iter().map(|j: usize| j as u32).collect();
    let mut m = CsrMatrix::zeros(n, n, row_ptr, col_idx);
    m.values = values;
    m
}

/// Random sparse matrix with ~`density` off-diagonal fill; symmetric positive definite
/// (diagonally dominant) when `spd`, else non-symmetric in pattern and values.
fn random_dense(n: usize, density: f64, spd: bool, seed: u64) -> Vec<Vec<f64>> {
    let mut r = Lcg(seed);
    let mut a = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in 0..n {
            if i != j && r.next() < density {
                let v = r.next() - 0.5;
                if spd {
                    a[i][j] = v;
                    a[j][i] = v;
                } else {
                    a[i][j] = v + 0.3; // biased: clearly non-symmetric
                }
            }
        }
    }
    for i in 0..n {
        let off: f64 = (0..n).filter(|&j| j != i).map(|j| a[i][j].abs().max(a[j][i].abs())).sum();
        a[i][i] = off + 0.5 + r.next();
    }
    a
}

/// Dense Gaussian elimination with partial pivoting (reference).
fn dense_solve(a: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
    let n = a.len();
    let mut m: Vec<Vec<f64>> = a
        .iter()
        .zip(b)
        .map(|(r, &bi)| {
            let mut r = r.clone();
            r.push(bi);
            r
        })
        .collect();
    for k in 0..n {
        let p = (k..n).max_by(|&i, &j| m[i][k].abs().total_cmp(&m[j][k].abs())).unwrap();
        m.swap(k, p);
        for i in k + 1..n {
            let f = m[i][k] / m[k][k];
            for j in k..=n {
                m[i][j] -= f * m[k][j];
            }
        }
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let s: f64 = (i + 1..n).map(|j| m[i][j] * x[j]).sum();
        x[i] = (m[i][n] - s) / m[i][i];
    }
    x
}

fn transpose(a: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let n = a.len();
    (0..n).map(|i| (0..n).map(|j| a[j][i]).collect()).collect()
}

fn max_diff(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max)
}

fn make(kind: &str) -> Box<dyn LinearSolver> {
    match kind {
        "cholesky" => Box::new(CholeskySolver::new("test")),
        "cholesky-par" => Box::new(CholeskySolver::new("test").with_parallel_factorization(true)),
        "lu" => Box::new(LuSolver::new("test")),
        _ => Box::new(LuSolver::new("test").with_parallel_factorization(true)),
    }
}

#[rstest]
#[case("cholesky", true)]
#[case("cholesky-par", true)]
#[case("lu", true)]
#[case("lu", false)]
#[case("lu-par", false)]
fn solve_and_transpose_solve_match_dense(
    #[case] kind: &str,
    #[case] spd: bool,
    #[values(1, 7, 120)] n: usize,
) {
    let ad = random_dense(n, 0.05, spd, 42 + n as u64);
    let a = from_dense(&ad);
    let mut r = Lcg(7);
    let b: Vec<f64> = (0..n).map(|_| r.next() - 0.5).collect();
    let mut s = make(kind);
    s.factor(&a).unwrap();
    let mut x = b.clone();
    s.solve_in_place(&mut x).unwrap();
    let x_ref = dense_solve(&ad, &b);
    assert!(max_diff(&x, &x_ref) < 1e-12, "{kind}: solve differs by {}", max_diff(&x, &x_ref));
    assert!(residual_norm(&a, &x, &b) < 1e-12);
    let mut y = b.clone();
    s.solve_transpose_in_place(&mut y).unwrap();
    let y_ref = dense_solve(&transpose(&ad), &b);
    assert!(
        max_diff(&y, &y_ref) < 1e-12,
        "{kind}: transpose solve differs by {}",
        max_diff(&y, &y_ref)
    );
    if !spd && n > 1 {
        // The non-symmetric case must really distinguish A from Aᵀ.
        assert!(max_diff(&x, &y) > 1e-6);
    }
}

#[rstest]
#[case("cholesky")]
#[case("lu")]
fn symbolic_analysis_is_reused_while_the_pattern_is_unchanged(#[case] kind: &str) {
    let n = 60;
    let ad = random_dense(n, 0.08, true, 3);
    let mut a = from_dense(&ad);
    let mut chol = CholeskySolver::new("test");
    let mut lu = LuSolver::new("test");
    let b: Vec<f64> = (0..n).map(|i| (i as f64).sin()).collect();
    for round in 0..3 {
        // New values, same pattern: scale the off-diagonals.
        let mut ad2 = ad.clone();
        for (i, row) in ad2.iter_mut().enumerate() {
            for (j, v) in row.iter_mut().enumerate() {
                if i != j {
                    *v *= 1.0 - 0.3 * round as f64;
                }
            }
        }
        a.values = from_dense(&ad2).values;
        let x_ref = dense_solve(&ad2, &b);
        let mut x = b.clone();
        let count = if kind == "cholesky" {
            chol.factor(&a).unwrap();
            chol.solve_in_place(&mut x).unwrap();
            chol.symbolic_count()
        } else {
            lu.factor(&a).unwrap();
            lu.solve_in_place(&mut x).unwrap();
            lu.symbolic_count()
        };
        assert_eq!(count, 1, "round {round}");
        assert!(max_diff(&x, &x_ref) < 1e-12);
    }
    // A different pattern triggers a new analysis and still solves correctly.
    let ad3 = random_dense(n, 0.15, true, 9);
    let a3 = from_dense(&ad3);
    let mut x = b.clone();
    let count = if kind == "cholesky" {
        chol.factor(&a3).unwrap();
        chol.solve_in_place(&mut x).unwrap();
        chol.symbolic_count()
    } else {
        lu.factor(&a3).unwrap();
        lu.solve_in_place(&mut x).unwrap();
        lu.symbolic_count()
    };
    assert_eq!(count, 2);
    assert!(max_diff(&x, &dense_solve(&ad3, &b)) < 1e-12);
}

#[test]
fn indefinite_matrix_is_not_positive_definite_for_cholesky() {
    let a = from_dense(&[vec![2.0, 1.0, 0.0], vec![1.0, -3.0, 1.0], vec![0.0, 1.0, 2.0]]);
    let err = CholeskySolver::new("thermal").factor(&a).unwrap_err();
    match &err {
        SolverError::NotPositiveDefinite { field, detail } => {
            assert_eq!(field, "thermal");
            // Unknown 1 (diagonal −3) fails whatever the elimination order.
            assert!(detail.contains("pivot") && detail.contains("unknown 1"), "{detail}");
        }
        other => panic!("expected NotPositiveDefinite, got {other:?}"),
    }
    // LU handles the same indefinite matrix.
    let mut lu = LuSolver::new("thermal");
    lu.factor(&a).unwrap();
    let mut x = vec![1.0, 2.0, 3.0];
    lu.solve_in_place(&mut x).unwrap();
    assert!(residual_norm(&a, &x, &[1.0, 2.0, 3.0]) < 1e-14);
}

#[rstest]
#[case::rank_one(vec![vec![1.0, 1.0], vec![1.0, 1.0]])]
#[case::zero_row(vec![vec![1.0, 0.0, 0.0], vec![0.0, 0.0, 0.0], vec![0.0, 0.0, 2.0]])]
#[case::dependent_rows(vec![vec![1.0, 2.0, 0.0], vec![2.0, 4.0, 0.0], vec![0.0, 1.0, 3.0]])]
fn singular_matrix_gives_singular(#[case] dense: Vec<Vec<f64>>) {
    let mut a = from_dense(&dense);
    // Keep the diagonal stored (an assembled pattern always has it).
    if a.find(1, 1).is_none() {
        a = CsrMatrix::zeros(3, 3, vec![0, 1, 2, 3], vec![0, 1, 2]);
        a.values = vec![1.0, 0.0, 2.0];
    }
    let err = LuSolver::new("electrical").factor(&a).unwrap_err();
    assert!(
        matches!(&err, SolverError::Singular { field, .. } if field == "electrical"),
        "{err:?}"
    );
    let err = CholeskySolver::new("electrical").factor(&a).unwrap_err();
    assert!(matches!(err, SolverError::NotPositiveDefinite { .. }), "{err:?}");
}

#[test]
fn non_finite_matrix_or_rhs_is_reported() {
    let mut a = from_dense(&[vec![2.0, 1.0], vec![1.0, 2.0]]);
    a.values[3] = f64::NAN;
    for s in [&mut CholeskySolver::new("t") as &mut dyn LinearSolver, &mut LuSolver::new("t")] {
        match s.factor(&a).unwrap_err() {
            SolverError::NonFinite { quantity, dof, .. } => {
                assert_eq!((quantity, dof), ("matrix", 1))
            }
            other => panic!("{other:?}"),
        }
    }
    a.values[3] = 2.0;
    for s in [&mut CholeskySolver::new("t") as &mut dyn LinearSolver, &mut LuSolver::new("t")] {
        s.factor(&a).unwrap();
        let mut b = vec![1.0, f64::INFINITY];
        match s.solve_in_place(&mut b).unwrap_err() {
            SolverError::NonFinite { quantity, dof, .. } => {
                assert_eq!((quantity, dof), ("right-hand side", 1))
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn empty_system_works() {
    let a = CsrMatrix::zeros(0, 0, vec![0], vec![]);
    for s in [&mut CholeskySolver::new("t") as &mut dyn LinearSolver, &mut LuSolver::new("t")] {
        s.factor(&a).unwrap();
        let mut b: Vec<f64> = vec![];
        s.solve_in_place(&mut b).unwrap();
        s.solve_transpose_in_place(&mut b).unwrap();
    }
}
