//! Fill-reducing orderings for the sparse Cholesky factorization: the choice offered by
//! [`CholeskyOrdering`] and a nested-dissection ordering computed by METIS
//! (`METIS_NodeND`, vendored C sources built by the `metis-sys` crate, no system library and
//! no bindgen; the `metis` wrapper crate does not expose `METIS_NodeND`, so it is called through
//! `metis-sys` directly).
//!
//! # Why nested dissection
//!
//! Eliminating the unknowns of a 3D mesh of `N` nodes in approximate-minimum-degree (AMD) order
//! leaves large fronts in the interior of the mesh; nested dissection splits the graph by small
//! vertex separators, orders both halves recursively and the separator last. For a 3D grid
//! graph it attains the optimal `O(N^{4/3})` entries in `L` and `O(N²)` flops. On the
//! Kuhn-cube FEM systems of this project it needs 0.7× AMD's multiply-adds at 10⁴ unknowns
//! (3 per node) and 0.4× at 3·10⁴ (scalar), see [`AUTO_FLOP_RATIO`] for what that buys.
//!
//! # Node graph
//!
//! A vector-valued FEM system interleaves the `b` components of a node: rows `b·i .. b·i + b`
//! have identical column patterns. Such consecutive rows are *indistinguishable* vertices of the
//! matrix graph, and eliminating them together costs no extra fill, so the ordering works on the
//! compressed graph with one vertex per run of consecutive rows sharing a pattern
//! ([`node_groups`]), weights each vertex by its number of rows (so separators balance unknowns,
//! not nodes), and expands the node permutation back to unknowns with the rows of a node kept
//! consecutive. A partially constrained node (say 2 of its 3 components free) simply forms a
//! smaller group; a scalar system gives groups of one row. [`uniform_block_size`] reports the
//! common group size `b ∈ {1, 2, 3}` of a purely interleaved system.
//!
//! # Convention
//!
//! A [`Permutation`] maps new positions to original unknowns: `forward[k]` is the original index
//! of the unknown eliminated `k`-th, `inverse[forward[k]] = k`. The factorized matrix is
//! `P A Pᵀ` with `(P A Pᵀ)[k, l] = A[forward[k], forward[l]]`; this is faer's convention for
//! `SymmetricOrdering::Custom`.

use crate::sparse::CsrMatrix;
use std::sync::Mutex;
use thiserror::Error;

/// Which fill-reducing ordering [`crate::CholeskySolver`] uses in its symbolic analysis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CholeskyOrdering {
    /// AMD, switching to nested dissection where it pays (see below).
    ///
    /// The first factorization of a pattern uses AMD (its analysis is cheap). If that
    /// factorization needs at least [`AUTO_MIN_FLOPS`] multiply-adds, the second factorization
    /// of the same pattern (a Newton or time step) runs the nested-dissection analysis too and
    /// switches to it, for this and all later factorizations, when it needs at most
    /// [`AUTO_FLOP_RATIO`] times AMD's multiply-adds.
    ///
    /// The switch waits for a refactorization because the METIS call costs far more than AMD:
    /// about 0.2 s for the 28 830-unknown scalar P1 Kuhn cube of `examples/bench_thermal.rs
    /// --n 30`, where it saves 0.13 s in each numeric factorization, so a matrix factored once
    /// is better off with AMD.
    #[default]
    Auto,
    /// Approximate minimum degree (faer's own AMD).
    Amd,
    /// Nested dissection of the node graph ([`nested_dissection`]).
    NestedDissection,
}

/// Under [`CholeskyOrdering::Auto`], AMD orderings whose factorization needs fewer
/// multiply-adds than this (a few milliseconds on one core) are kept without trying nested
/// dissection: there it saves too little (it runs fewer multiply-adds per second, see
/// [`AUTO_FLOP_RATIO`]) to repay the METIS call.
pub const AUTO_MIN_FLOPS: f64 = 1e8;

/// Under [`CholeskyOrdering::Auto`], nested dissection is kept when its factorization needs at
/// most this fraction of AMD's multiply-adds. Measured with faer 0.24 on this project's 3D
/// meshes, factorizations in nested-dissection order run about 20 % fewer multiply-adds per
/// second than in AMD order: on the 5 103-unknown Tet4 pad of
/// `examples/bench_ogden_pad.rs` equal counts (6.0·10⁷) took 7.0 ms vs 5.3 ms, on the
/// 9 450-unknown cube of `examples/bench_ogden.rs` 0.71× the count took 0.85× the time.
pub const AUTO_FLOP_RATIO: f64 = 0.8;

/// A symmetric permutation of the unknowns (see the module docs for the convention).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permutation {
    /// `forward[k]`: original index of the unknown at new position `k`.
    pub forward: Vec<usize>,
    /// `inverse[i]`: new position of original unknown `i`.
    pub inverse: Vec<usize>,
}

impl Permutation {
    /// The permutation that keeps every unknown in place.
    pub fn identity(n: usize) -> Self {
        Permutation { forward: (0..n).collect(), inverse: (0..n).collect() }
    }

    /// The permutation with the given forward map; `inverse` is computed from it.
    ///
    /// # Panics
    /// If `forward` is not a permutation of `0..forward.len()` (an internal invariant of the
    /// orderings of this module).
    fn from_forward(forward: Vec<usize>) -> Self {
        let n = forward.len();
        let mut inverse = vec![usize::MAX; n];
        for (k, &i) in forward.iter().enumerate() {
            assert!(i < n && inverse[i] == usize::MAX, "forward map is not a permutation at {k}");
            inverse[i] = k;
        }
        Permutation { forward, inverse }
    }

    /// Number of unknowns permuted.
    pub fn len(&self) -> usize {
        self.forward.len()
    }

    /// Whether the permutation acts on no unknowns.
    pub fn is_empty(&self) -> bool {
        self.forward.is_empty()
    }
}

/// Failure to compute a nested-dissection ordering.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum OrderingError {
    /// The node graph does not fit METIS's 32-bit indices.
    #[error(
        "node graph with {vertices} vertices and {adjacency} adjacency entries exceeds METIS's \
         32-bit indices"
    )]
    TooLarge {
        /// Vertices (node groups) of the compressed graph.
        vertices: usize,
        /// Adjacency entries (twice the edges) of the compressed graph.
        adjacency: usize,
    },
    /// `METIS_NodeND` returned an error code (-2 input, -3 memory, -4 other).
    #[error("METIS_NodeND failed with status {status} on a graph of {vertices} vertices")]
    Metis {
        /// The METIS status code.
        status: i32,
        /// Vertices (node groups) of the compressed graph.
        vertices: usize,
    },
}

/// Start rows of the runs of consecutive rows of `a` with identical column patterns.
///
/// Returns `starts` of length `groups + 1`: group `g` holds rows `starts[g]..starts[g + 1]`
/// (`starts[0] = 0`, `starts[groups] = n_rows`). Costs one comparison of each row with its
/// predecessor, O(nnz).
pub fn node_groups(a: &CsrMatrix) -> Vec<usize> {
    let row = |i: usize| &a.col_idx[a.row_ptr[i]..a.row_ptr[i + 1]];
    let mut starts = Vec::with_capacity(a.n_rows + 1);
    for i in 0..a.n_rows {
        if i == 0 || row(i) != row(i - 1) {
            starts.push(i);
        }
    }
    starts.push(a.n_rows);
    starts
}

/// The number of unknowns per node `b ∈ {1, 2, 3}` of an interleaved vector system: the largest
/// `b` such that `b` divides `n` and each row block `b·i .. b·i + b` has one column pattern.
/// Any other system (including the empty one) gives 1.
pub fn uniform_block_size(a: &CsrMatrix) -> usize {
    let row = |i: usize| &a.col_idx[a.row_ptr[i]..a.row_ptr[i + 1]];
    let n = a.n_rows;
    [3, 2]
        .into_iter()
        .find(|&b| {
            n > 0
                && n.is_multiple_of(b)
                && (0..n).step_by(b).all(|i| (i + 1..i + b).all(|j| row(j) == row(i)))
        })
        .unwrap_or(1)
}

/// The compressed graph of `a` (one vertex per group of [`node_groups`]) in METIS's CSR form:
/// symmetric (an entry `(i, j)` links both ways, so a one-triangle pattern works too), without
/// self-loops, each adjacency list sorted.
fn node_graph(a: &CsrMatrix, starts: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let n_groups = starts.len() - 1;
    let mut group_of = vec![0usize; a.n_rows];
    for g in 0..n_groups {
        group_of[starts[g]..starts[g + 1]].fill(g);
    }
    // Rows of a group share their pattern: the first row stands for all of them.
    let links = |g: usize| {
        let r = starts[g];
        a.col_idx[a.row_ptr[r]..a.row_ptr[r + 1]]
            .iter()
            .map(|&j| group_of[j as usize])
            .filter(move |&h| h != g)
    };
    let mut degree = vec![0usize; n_groups + 1];
    for g in 0..n_groups {
        for h in links(g) {
            degree[g + 1] += 1;
            degree[h + 1] += 1;
        }
    }
    for g in 0..n_groups {
        degree[g + 1] += degree[g];
    }
    let raw_ptr = degree;
    let mut fill = raw_ptr.clone();
    let mut raw = vec![0usize; raw_ptr[n_groups]];
    for g in 0..n_groups {
        for h in links(g) {
            raw[fill[g]] = h;
            fill[g] += 1;
            raw[fill[h]] = g;
            fill[h] += 1;
        }
    }
    // Remove duplicates (each link of a symmetric pattern was entered from both ends).
    let mut xadj = Vec::with_capacity(n_groups + 1);
    let mut adjncy = Vec::with_capacity(raw.len() / 2);
    let mut seen = vec![usize::MAX; n_groups];
    xadj.push(0);
    for g in 0..n_groups {
        let begin = adjncy.len();
        for &h in &raw[raw_ptr[g]..raw_ptr[g + 1]] {
            if seen[h] != g {
                seen[h] = g;
                adjncy.push(h);
            }
        }
        adjncy[begin..].sort_unstable();
        xadj.push(adjncy.len());
    }
    (xadj, adjncy)
}

/// METIS keeps process-wide state during a call (it installs handlers for SIGABRT and SIGTERM
/// and restores them on return); calls are serialized so that concurrent solvers cannot leave
/// the wrong handlers behind.
static METIS_LOCK: Mutex<()> = Mutex::new(());

/// METIS's nested-dissection ordering of a compressed graph with vertex weights. Returns the
/// forward map (new position → vertex).
fn metis_node_nd(
    xadj: &[usize],
    adjncy: &[usize],
    weights: &[usize],
) -> Result<Vec<usize>, OrderingError> {
    use metis_sys::idx_t;
    let n = xadj.len() - 1;
    let too_large = || OrderingError::TooLarge { vertices: n, adjacency: adjncy.len() };
    let to_idx = |v: usize| idx_t::try_from(v).map_err(|_| too_large());
    if weights.iter().sum::<usize>() > idx_t::MAX as usize {
        return Err(too_large());
    }
    let mut nvtxs = to_idx(n)?;
    let mut xadj = xadj.iter().map(|&v| to_idx(v)).collect::<Result<Vec<_>, _>>()?;
    let mut adjncy = adjncy.iter().map(|&v| to_idx(v)).collect::<Result<Vec<_>, _>>()?;
    let mut vwgt = weights.iter().map(|&v| to_idx(v)).collect::<Result<Vec<_>, _>>()?;
    let mut options = [0 as idx_t; metis_sys::METIS_NOPTIONS as usize];
    let mut perm = vec![0 as idx_t; n];
    let mut iperm = vec![0 as idx_t; n];
    let status = {
        let _guard = METIS_LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // SAFETY: `options` has METIS_NOPTIONS entries as METIS_SetDefaultOptions requires.
        // METIS_NodeND reads `nvtxs`, `xadj` (nvtxs + 1 entries), `adjncy` (xadj[nvtxs]
        // entries, each in 0..nvtxs, symmetric, no self-loops), `vwgt` (nvtxs entries) and
        // `options`, and writes nvtxs entries to `perm` and `iperm`; all buffers live until it
        // returns and are not aliased. METIS may reorder nothing in the inputs it reads.
        unsafe {
            metis_sys::METIS_SetDefaultOptions(options.as_mut_ptr());
            options[metis_sys::moptions_et_METIS_OPTION_NUMBERING as usize] = 0;
            metis_sys::METIS_NodeND(
                &mut nvtxs,
                xadj.as_mut_ptr(),
                adjncy.as_mut_ptr(),
                vwgt.as_mut_ptr(),
                options.as_mut_ptr(),
                perm.as_mut_ptr(),
                iperm.as_mut_ptr(),
            )
        }
    };
    if status != metis_sys::rstatus_et_METIS_OK {
        return Err(OrderingError::Metis { status, vertices: n });
    }
    // METIS's `perm[k]` is the vertex at new position k (`A' = A(perm, perm)`).
    let forward: Vec<usize> = perm.iter().map(|&v| v as usize).collect();
    Ok(forward)
}

/// Nested-dissection ordering of the symmetric matrix `a` computed by METIS on its node graph
/// (see the module docs). Only the pattern of `a` is read; a pattern that is not symmetric is
/// symmetrized. A graph without edges (diagonal matrix, or `n ≤ 1`) gets the identity.
pub fn nested_dissection(a: &CsrMatrix) -> Result<Permutation, OrderingError> {
    assert_eq!(a.n_rows, a.n_cols, "an ordering needs a square matrix");
    let starts = node_groups(a);
    let (xadj, adjncy) = node_graph(a, &starts);
    if adjncy.is_empty() {
        return Ok(Permutation::identity(a.n_rows));
    }
    let weights: Vec<usize> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    let node_forward = metis_node_nd(&xadj, &adjncy, &weights)?;
    let mut forward = Vec::with_capacity(a.n_rows);
    for &g in &node_forward {
        forward.extend(starts[g]..starts[g + 1]);
    }
    Ok(Permutation::from_forward(forward))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_matrices::grid_system;
    use rstest::rstest;

    /// CSR matrix with the given full (both triangles) pattern per row and unit values.
    fn pattern(rows: Vec<Vec<usize>>) -> CsrMatrix {
        let n = rows.len();
        let mut row_ptr = vec![0];
        let mut col_idx = Vec::new();
        for mut r in rows {
            r.sort_unstable();
            r.dedup();
            col_idx.extend(r.into_iter().map(|j| j as u32));
            row_ptr.push(col_idx.len());
        }
        let values = vec![1.0; col_idx.len()];
        CsrMatrix { n_rows: n, n_cols: n, row_ptr, col_idx, values }
    }

    /// Pattern of the 7-point stencil on an m × m × m grid with `b` interleaved unknowns per
    /// grid point (full b × b coupling blocks).
    fn grid_pattern(m: usize, b: usize) -> CsrMatrix {
        let ones = vec![1.0; b];
        let block: Vec<&[f64]> = (0..b).map(|_| &ones[..]).collect();
        grid_system(m, &block, 0.0)
    }

    fn assert_valid(p: &Permutation, n: usize) {
        assert_eq!(p.forward.len(), n);
        assert_eq!(p.inverse.len(), n);
        let mut seen = vec![false; n];
        for (k, &i) in p.forward.iter().enumerate() {
            assert!(i < n && !seen[i], "forward[{k}] = {i} repeats or is out of range");
            seen[i] = true;
            assert_eq!(p.inverse[i], k);
        }
    }

    #[rstest]
    #[case::scalar(1)]
    #[case::planar(2)]
    #[case::solid(3)]
    fn grid_ordering_is_a_valid_permutation_keeping_nodes_together(#[case] b: usize) {
        let a = grid_pattern(6, b);
        let p = nested_dissection(&a).unwrap();
        assert_valid(&p, a.n_rows);
        assert!(p.forward != (0..a.n_rows).collect::<Vec<_>>(), "ND reordered nothing");
        for node in p.forward.chunks(b) {
            assert_eq!(node[0] % b, 0, "a node starts at a component other than 0: {node:?}");
            assert!(node.iter().enumerate().all(|(c, &i)| i == node[0] + c), "{node:?}");
        }
    }

    #[rstest]
    #[case::scalar(1, 1)]
    #[case::planar(2, 2)]
    #[case::solid(3, 3)]
    fn block_size_of_interleaved_grid(#[case] b: usize, #[case] expected: usize) {
        let a = grid_pattern(4, b);
        assert_eq!(uniform_block_size(&a), expected);
        let starts = node_groups(&a);
        assert_eq!(starts.len() - 1, 64);
        assert!(starts.windows(2).all(|w| w[1] - w[0] == b));
    }

    #[test]
    fn partially_constrained_node_forms_a_smaller_group() {
        // Three 3-dof nodes in a chain, the middle one with its last component removed.
        let node_cols = [vec![0, 1, 2, 3, 4], vec![0, 1, 2, 3, 4, 5, 6, 7], vec![3, 4, 5, 6, 7]];
        let rows = vec![
            node_cols[0].clone(),
            node_cols[0].clone(),
            node_cols[0].clone(),
            node_cols[1].clone(),
            node_cols[1].clone(),
            node_cols[2].clone(),
            node_cols[2].clone(),
            node_cols[2].clone(),
        ];
        let a = pattern(rows);
        assert_eq!(node_groups(&a), vec![0, 3, 5, 8]);
        assert_eq!(uniform_block_size(&a), 1, "8 rows cannot be blocks of 2 or 3");
        assert_valid(&nested_dissection(&a).unwrap(), 8);
    }

    #[test]
    fn upper_triangle_pattern_falls_back_to_single_rows() {
        let a = pattern(vec![vec![0, 1, 2], vec![1, 2], vec![2]]);
        assert_eq!(uniform_block_size(&a), 1);
        assert_eq!(node_groups(&a), vec![0, 1, 2, 3]);
        assert_valid(&nested_dissection(&a).unwrap(), 3);
    }

    #[test]
    fn empty_and_single_unknown_get_the_identity() {
        let empty = pattern(vec![]);
        assert_eq!(uniform_block_size(&empty), 1);
        assert_eq!(nested_dissection(&empty).unwrap(), Permutation::identity(0));
        let one = pattern(vec![vec![0]]);
        assert_eq!(nested_dissection(&one).unwrap(), Permutation::identity(1));
        let diagonal = pattern((0..5).map(|i| vec![i]).collect());
        assert_eq!(nested_dissection(&diagonal).unwrap(), Permutation::identity(5));
    }

    #[test]
    fn disconnected_graph_is_ordered_whole() {
        // Two separate 4 × 4 × 4 grids side by side, plus an isolated unknown between them.
        let g = grid_pattern(4, 1);
        let m = g.n_rows;
        let mut rows: Vec<Vec<usize>> = (0..m)
            .map(|i| {
                g.col_idx[g.row_ptr[i]..g.row_ptr[i + 1]].iter().map(|&j| j as usize).collect()
            })
            .collect();
        rows.push(vec![m]);
        for i in 0..m {
            rows.push(
                g.col_idx[g.row_ptr[i]..g.row_ptr[i + 1]]
                    .iter()
                    .map(|&j| j as usize + m + 1)
                    .collect(),
            );
        }
        let a = pattern(rows);
        assert_valid(&nested_dissection(&a).unwrap(), 2 * m + 1);
    }
}
