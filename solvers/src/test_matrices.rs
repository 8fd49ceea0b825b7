//! Test matrices shared by the unit tests of this crate.

use crate::sparse::CsrMatrix;

/// A dense SPD 3 × 3 coupling block, elasticity-like (interleaved unknowns per grid point).
pub(crate) const ELASTIC: [&[f64]; 3] = [&[4.0, 1.0, 0.5], &[1.0, 3.0, 0.2], &[0.5, 0.2, 2.0]];

/// CSR matrix from per-row `(column, value)` lists (columns sorted here).
pub(crate) fn csr(rows: Vec<Vec<(usize, f64)>>) -> CsrMatrix {
    let n = rows.len();
    let mut row_ptr = vec![0];
    let (mut col_idx, mut values) = (Vec::new(), Vec::new());
    for mut r in rows {
        r.sort_by_key(|&(j, _)| j);
        for (j, v) in r {
            col_idx.push(j as u32);
            values.push(v);
        }
        row_ptr.push(col_idx.len());
    }
    CsrMatrix { n_rows: n, n_cols: n, row_ptr, col_idx, values }
}

/// `kron(L + shift·I, B)` for the 7-point Laplacian `L` of an m × m × m grid and a dense
/// SPD `B` (b × b): a 3D Laplacian for `b = 1`, an elasticity-like interleaved system with
/// full coupling blocks for `b = 3`. Symmetric positive definite for `shift ≥ 0` (the stencil's
/// diagonal 6 dominates).
pub(crate) fn grid_system(m: usize, block: &[&[f64]], shift: f64) -> CsrMatrix {
    let b = block.len();
    let id = |x: usize, y: usize, z: usize| x + m * (y + m * z);
    let mut rows = Vec::with_capacity(m * m * m * b);
    for z in 0..m {
        for y in 0..m {
            for x in 0..m {
                let p = id(x, y, z);
                let mut nb = vec![(p, 6.0 + shift)];
                for (coord, step) in [(x, 1), (y, m), (z, m * m)] {
                    if coord > 0 {
                        nb.push((p - step, -1.0));
                    }
                    if coord + 1 < m {
                        nb.push((p + step, -1.0));
                    }
                }
                for r in 0..b {
                    let row = nb
                        .iter()
                        .flat_map(|&(p, l)| (0..b).map(move |c| (p * b + c, l * block[r][c])))
                        .collect();
                    rows.push(row);
                }
            }
        }
    }
    csr(rows)
}
