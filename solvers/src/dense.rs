//! Small dense symmetric matrices: the eigen-decomposition of a Hessian or a covariance of a
//! few hundred parameters by cyclic Jacobi rotations (accurate eigenvalues of every size, small
//! ones included, which is what tells which parameter combinations data do not determine).

/// Eigenvalues (ascending) and orthonormal eigenvectors of a symmetric matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct SymmetricEigen {
    /// λ₁ ≤ λ₂ ≤ … ≤ λₙ.
    pub values: Vec<f64>,
    /// `vectors[k]` is the unit eigenvector of `values[k]`.
    pub vectors: Vec<Vec<f64>>,
}

/// The eigen-decomposition of the symmetric `n × n` matrix `a` (row-major; its upper and lower
/// triangles are averaged) by cyclic Jacobi sweeps until the off-diagonal part is below
/// round-off. Deterministic; O(n³) per sweep, a handful of sweeps.
pub fn symmetric_eigen(a: &[f64], n: usize) -> SymmetricEigen {
    assert_eq!(a.len(), n * n, "symmetric_eigen: {} entries for n = {n}", a.len());
    let mut m: Vec<f64> = (0..n * n)
        .map(|k| {
            let (i, j) = (k / n, k % n);
            0.5 * (a[i * n + j] + a[j * n + i])
        })
        .collect();
    let mut v = vec![0.0; n * n];
    for i in 0..n {
        v[i * n + i] = 1.0;
    }
    let frobenius: f64 = m.iter().map(|x| x * x).sum::<f64>().sqrt();
    for _sweep in 0..100 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| m[i * n + j] * m[i * n + j])
            .sum::<f64>()
            .sqrt();
        if off <= 1e-15 * frobenius || frobenius == 0.0 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = m[p * n + q];
                if apq == 0.0 {
                    continue;
                }
                let (app, aqq) = (m[p * n + p], m[q * n + q]);
                // The rotation that zeroes a_pq: t = tan θ, the smaller root.
                let theta = (aqq - app) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (mkp, mkq) = (m[k * n + p], m[k * n + q]);
                    m[k * n + p] = c * mkp - s * mkq;
                    m[k * n + q] = s * mkp + c * mkq;
                }
                for k in 0..n {
                    let (mpk, mqk) = (m[p * n + k], m[q * n + k]);
                    m[p * n + k] = c * mpk - s * mqk;
                    m[q * n + k] = s * mpk + c * mqk;
                }
                for k in 0..n {
                    let (vkp, vkq) = (v[k * n + p], v[k * n + q]);
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| m[a * n + a].total_cmp(&m[b * n + b]));
    SymmetricEigen {
        values: order.iter().map(|&k| m[k * n + k]).collect(),
        vectors: order.iter().map(|&k| (0..n).map(|i| v[i * n + k]).collect()).collect(),
    }
}

/// The Cholesky factor L (A = L Lᵀ, row-major lower triangle) of a small dense symmetric
/// positive definite matrix: the coarsest level of a multigrid hierarchy (a few hundred
/// unknowns). Row-oriented (Cholesky–Banachiewicz): every entry is one contiguous dot
/// product, no workspace beyond the factor, deterministic.
#[derive(Clone, Debug, PartialEq)]
pub struct DenseCholesky {
    n: usize,
    l: Vec<f64>,
}

impl DenseCholesky {
    /// Factor the symmetric `n × n` matrix `a` (row-major; its lower triangle is read).
    /// Returns the row whose pivot is not positive when `a` is not positive definite.
    pub fn factor(a: &[f64], n: usize) -> Result<Self, usize> {
        assert_eq!(a.len(), n * n, "DenseCholesky::factor: {} entries for n = {n}", a.len());
        let mut l = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..=i {
                let (ri, rj) = (&l[i * n..i * n + j], &l[j * n..j * n + j]);
                let mut s = a[i * n + j];
                for (x, y) in ri.iter().zip(rj) {
                    s -= x * y;
                }
                if i == j {
                    if !(s > 0.0 && s.is_finite()) {
                        return Err(i);
                    }
                    l[i * n + i] = s.sqrt();
                } else {
                    l[i * n + j] = s / l[j * n + j];
                }
            }
        }
        Ok(DenseCholesky { n, l })
    }

    /// The order of the matrix.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Overwrite `b` with A⁻¹ b.
    pub fn solve_in_place(&self, b: &mut [f64]) {
        let n = self.n;
        assert_eq!(b.len(), n, "DenseCholesky::solve_in_place: {} entries for n = {n}", b.len());
        // L y = b
        for i in 0..n {
            let row = &self.l[i * n..i * n + i];
            let mut s = b[i];
            for (x, y) in row.iter().zip(&b[..i]) {
                s -= x * y;
            }
            b[i] = s / self.l[i * n + i];
        }
        // Lᵀ x = y, by columns of Lᵀ (rows of L)
        for i in (0..n).rev() {
            b[i] /= self.l[i * n + i];
            let xi = b[i];
            for (bk, lik) in b[..i].iter_mut().zip(&self.l[i * n..i * n + i]) {
                *bk -= lik * xi;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_cholesky_solves_a_symmetric_positive_definite_system() {
        // A = B Bᵀ + n I for a fixed B.
        let n = 37;
        let b: Vec<f64> = (0..n * n).map(|k| ((k * 7919) % 101) as f64 / 50.0 - 1.0).collect();
        let mut a = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                a[i * n + j] = (0..n).map(|k| b[i * n + k] * b[j * n + k]).sum::<f64>()
                    + if i == j { n as f64 } else { 0.0 };
            }
        }
        let x_true: Vec<f64> = (0..n).map(|i| (i as f64).sin()).collect();
        let mut rhs: Vec<f64> =
            (0..n).map(|i| (0..n).map(|j| a[i * n + j] * x_true[j]).sum()).collect();
        let c = DenseCholesky::factor(&a, n).unwrap();
        c.solve_in_place(&mut rhs);
        for (x, t) in rhs.iter().zip(&x_true) {
            assert!((x - t).abs() < 1e-12, "{x} vs {t}");
        }
    }

    #[test]
    fn dense_cholesky_names_the_first_non_positive_pivot() {
        // The leading 2 × 2 block is positive definite, the 3 × 3 matrix is not.
        let a = [4.0, 2.0, 0.0, 2.0, 5.0, 3.0, 0.0, 3.0, 1.0];
        assert_eq!(DenseCholesky::factor(&a, 3), Err(2));
    }

    #[test]
    fn reconstructs_the_matrix_and_orders_the_values() {
        let n = 5;
        // A symmetric matrix with eigenvalues spread over 12 orders of magnitude.
        let a: Vec<f64> = (0..n * n)
            .map(|k| {
                let (i, j) = (k / n, k % n);
                let d = if i == j { 10f64.powi(3 * i as i32 - 6) } else { 0.0 };
                d + 1e-7 * ((i + j) as f64).cos()
            })
            .collect();
        let e = symmetric_eigen(&a, n);
        assert!(e.values.windows(2).all(|w| w[0] <= w[1]));
        for i in 0..n {
            for j in 0..n {
                let r: f64 = (0..n).map(|k| e.values[k] * e.vectors[k][i] * e.vectors[k][j]).sum();
                assert!(
                    (r - a[i * n + j]).abs() <= 1e-12 * 1e6,
                    "({i},{j}): {r} vs {}",
                    a[i * n + j]
                );
                let dot: f64 = (0..n).map(|k| e.vectors[i][k] * e.vectors[j][k]).sum();
                assert!((dot - if i == j { 1.0 } else { 0.0 }).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn two_by_two_in_closed_form() {
        // [[2, 1], [1, 2]]: 1 along (1, −1)/√2, 3 along (1, 1)/√2.
        let e = symmetric_eigen(&[2.0, 1.0, 1.0, 2.0], 2);
        assert!((e.values[0] - 1.0).abs() < 1e-15 && (e.values[1] - 3.0).abs() < 1e-15);
        assert!((e.vectors[1][0].abs() - 0.5f64.sqrt()).abs() < 1e-15);
        assert!((e.vectors[0][0] + e.vectors[0][1]).abs() < 1e-15);
    }
}
