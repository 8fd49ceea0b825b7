//! Compressed sparse row matrices, the storage every solver in this crate shares.

/// A square or rectangular sparse matrix in compressed sparse row form with sorted column
/// indices inside each row.
///
/// For the symmetric systems of this crate the CSR arrays are also the CSC arrays of the same
/// matrix. Column indices are `u32` (12 bytes per entry with the value instead of 16: the
/// fine-level matrix is the largest array of a solve, and every product and smoothing sweep
/// streams it), so a matrix has fewer than 2³² columns; faer's factorizations get the indices
/// widened at factorization time.
#[derive(Clone, Debug, PartialEq)]
pub struct CsrMatrix {
    pub n_rows: usize,
    pub n_cols: usize,
    /// `row_ptr[i]..row_ptr[i + 1]` are the entries of row `i`; length `n_rows + 1`.
    pub row_ptr: Vec<usize>,
    /// Column index of each stored entry, sorted within each row.
    pub col_idx: Vec<u32>,
    /// Value of each stored entry.
    pub values: Vec<f64>,
}

impl CsrMatrix {
    /// A matrix with the given structure and all values zero.
    pub fn zeros(n_rows: usize, n_cols: usize, row_ptr: Vec<usize>, col_idx: Vec<u32>) -> Self {
        assert!(
            u32::try_from(n_cols).is_ok(),
            "a CSR matrix of {n_cols} columns: column indices are 32-bit (at most {})",
            u32::MAX
        );
        assert_eq!(
            row_ptr.len(),
            n_rows + 1,
            "row_ptr has {} entries for {n_rows} rows",
            row_ptr.len()
        );
        assert_eq!(
            *row_ptr.last().unwrap(),
            col_idx.len(),
            "row_ptr ends at {} but there are {} column indices",
            row_ptr.last().unwrap(),
            col_idx.len()
        );
        let nnz = col_idx.len();
        CsrMatrix { n_rows, n_cols, row_ptr, col_idx, values: vec![0.0; nnz] }
    }

    /// Number of stored entries.
    pub fn nnz(&self) -> usize {
        self.col_idx.len()
    }

    /// The stored column indices and values of row `i`.
    #[inline]
    pub fn row(&self, i: usize) -> (&[u32], &[f64]) {
        let r = self.row_ptr[i]..self.row_ptr[i + 1];
        (&self.col_idx[r.clone()], &self.values[r])
    }

    /// The position of entry `(i, j)` in `col_idx`/`values`, if it is stored.
    pub fn find(&self, i: usize, j: usize) -> Option<usize> {
        let r = self.row_ptr[i]..self.row_ptr[i + 1];
        let j = u32::try_from(j).ok()?;
        self.col_idx[r.clone()].binary_search(&j).ok().map(|k| r.start + k)
    }

    /// y = A x.
    pub fn mul_vec_into(&self, x: &[f64], y: &mut [f64]) {
        assert_eq!(x.len(), self.n_cols, "x has {} entries for {} columns", x.len(), self.n_cols);
        assert_eq!(y.len(), self.n_rows, "y has {} entries for {} rows", y.len(), self.n_rows);
        for (i, yi) in y.iter_mut().enumerate() {
            let (cols, vals) = self.row(i);
            *yi = cols.iter().zip(vals).map(|(&j, &v)| v * x[j as usize]).sum();
        }
    }

    /// y = Aᵀ x.
    pub fn mul_transpose_vec_into(&self, x: &[f64], y: &mut [f64]) {
        assert_eq!(x.len(), self.n_rows, "x has {} entries for {} rows", x.len(), self.n_rows);
        assert_eq!(y.len(), self.n_cols, "y has {} entries for {} columns", y.len(), self.n_cols);
        y.fill(0.0);
        for (i, &xi) in x.iter().enumerate() {
            let (cols, vals) = self.row(i);
            for (&j, &v) in cols.iter().zip(vals) {
                y[j as usize] += v * xi;
            }
        }
    }

    /// The diagonal (zero where not stored).
    pub fn diagonal(&self) -> Vec<f64> {
        (0..self.n_rows.min(self.n_cols))
            .map(|i| self.find(i, i).map_or(0.0, |k| self.values[k]))
            .collect()
    }
}
