//! Parallel, deterministic finite-element assembly into a CSR matrix whose pattern is built once.
//!
//! [`AssemblyPattern::new`] takes the element → unknown map once and precomputes
//! - the symmetric CSR sparsity pattern (sorted columns, diagonal always stored),
//! - for every element the position in `values` of each local `(i, j)` pair (its *slots*), so
//!   that refilling is a gather/scatter with no search,
//! - an element colouring in which no two elements of one colour share an unknown.
//!
//! Assembly then runs colour by colour; inside a colour the elements run in parallel (rayon)
//! and write to disjoint slots, so the sum in every entry is formed in the same order whatever
//! the number of threads: the result is bitwise reproducible.
//!
//! This is written by hand rather than through a triplet/COO builder (`sprs::TriMat`, faer's
//! `try_new_from_triplets`) because those sort all `n_el · nd²` triplets at every refill; here
//! the pattern and the slots are computed once and each Newton step only scatters.

use crate::sparse::CsrMatrix;
use gradfem_kernel::Offsets;
use rayon::prelude::*;

/// Marks a local degree of freedom that is not an unknown (e.g. a Dirichlet node): its rows and
/// columns of the element matrix and its entry of the element vector are skipped.
pub const CONSTRAINED: usize = usize::MAX;

/// Default number of consecutive elements per colouring block (see
/// [`AssemblyPattern::with_block_size`]).
pub const DEFAULT_BLOCK_SIZE: usize = 64;

/// Per-element slot table. Entry (A, B) of an element holds where the column of its local node
/// B sits *inside the row* of its local node A (an offset from `row_ptr[row]`, not a position in
/// `values`), so the table's entries are as small as the longest row allows: one byte for
/// every P1/P2 mesh, two for anything else a mesh produces. `NONE` (the type's maximum) marks a
/// constrained column.
///
/// A node is a run of `b` consecutive unknowns (elasticity with supports that fix whole nodes:
/// `b` = 3) or a single unknown (`b` = 1). All rows of a node share its pattern, so entry
/// (b·A + i, b·B + k) sits at `row_ptr[d_A + i] + slot + k`: b² times fewer entries (the 3D
/// elastic3d N = 54 pattern: 15 MB instead of 544 MB), and a quarter of the absolute 32-bit
/// table for scalar Tet4 fields (16 bytes per element instead of 64).
#[derive(Clone, Debug)]
enum Slots {
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
}

/// The common size `b ∈ {3, 2}` of the nodes of a system whose every element lists its dofs
/// in runs of `b` that are either consecutive unknowns `d, d + 1, …` or all constrained, each
/// unknown always at the same place in its run; `None` otherwise (scalar systems, partly
/// constrained nodes).
fn node_size(n_unknowns: usize, offsets: &[usize], element_dofs: &[usize]) -> Option<usize> {
    'sizes: for b in [3usize, 2] {
        if n_unknowns == 0 || !n_unknowns.is_multiple_of(b) {
            continue;
        }
        // the first unknown of the run holding each unknown (usize::MAX: not seen yet)
        let mut first = vec![usize::MAX; n_unknowns];
        for w in offsets.windows(2) {
            let dofs = &element_dofs[w[0]..w[1]];
            if !dofs.len().is_multiple_of(b) {
                continue 'sizes;
            }
            for run in dofs.chunks_exact(b) {
                if run.iter().all(|&d| d == CONSTRAINED) {
                    continue;
                }
                let d0 = run[0];
                if d0 == CONSTRAINED || run.iter().enumerate().any(|(k, &d)| d != d0 + k) {
                    continue 'sizes;
                }
                for &d in run {
                    if first[d] == usize::MAX {
                        first[d] = d0;
                    } else if first[d] != d0 {
                        continue 'sizes;
                    }
                }
            }
        }
        return Some(b);
    }
    None
}

/// An index type for slot tables (an offset inside a row); `NONE` marks a skipped
/// (constrained) pair.
trait SlotIndex: Copy + PartialEq + Send + Sync + 'static {
    const NONE: Self;
    fn from_usize(k: usize) -> Self;
    fn to_usize(self) -> usize;
}

macro_rules! slot_index {
    ($($t:ty),*) => {$(
        impl SlotIndex for $t {
            const NONE: Self = <$t>::MAX;
            #[inline(always)]
            fn from_usize(k: usize) -> Self {
                debug_assert!(k < <$t>::MAX as usize);
                k as $t
            }
            #[inline(always)]
            fn to_usize(self) -> usize {
                self as usize
            }
        }
    )*};
}
slot_index!(u8, u16, u32);

/// A raw pointer that may cross threads. Used only for the colour-disjoint scatter, see the
/// SAFETY comments at its uses.
#[derive(Clone, Copy)]
struct SharedMut(*mut f64);
// SAFETY: the pointer is only dereferenced at indices that no other thread touches at the same
// time (elements of one colour share no unknown, hence no matrix slot and no vector entry).
unsafe impl Send for SharedMut {}
unsafe impl Sync for SharedMut {}

impl SharedMut {
    /// The pointer (a method, so closures capture the whole `Sync` wrapper, not the field).
    #[inline(always)]
    fn ptr(self) -> *mut f64 {
        self.0
    }
}

/// The sparsity pattern, element slot tables and element colouring of one assembled operator.
///
/// Build it once per mesh and space (and Dirichlet set); refill it at every Newton step with
/// [`assemble_into`](Self::assemble_into).
#[derive(Clone, Debug)]
pub struct AssemblyPattern {
    n_unknowns: usize,
    /// Where each element's dofs start in `element_dofs`.
    offsets: Offsets,
    /// The local dofs of every element, as unknowns (`u32::MAX`: constrained).
    element_dofs: Vec<u32>,
    row_ptr: Vec<usize>,
    col_idx: Vec<u32>,
    /// Unknowns per node of the slot table (1 for scalar fields and partly constrained nodes).
    node_size: usize,
    /// The slot-table entry of local node pair `(A, B)` of element `e` is at
    /// `slot_offsets[e] + A · nn + B` (`nn` nodes of `node_size` dofs).
    slot_offsets: Offsets,
    slots: Slots,
    /// Elements are grouped into blocks of `block_size` consecutive elements; the blocks of
    /// colour `c` are `colour_blocks[colour_ptr[c]..colour_ptr[c + 1]]`.
    block_size: usize,
    colour_ptr: Vec<usize>,
    colour_blocks: Vec<usize>,
    max_nd: usize,
}

impl AssemblyPattern {
    /// Builds the pattern for `n_unknowns` unknowns (rows and columns).
    ///
    /// Element `e` has local dofs `element_dofs[offsets[e]..offsets[e + 1]]`, each an unknown
    /// index `< n_unknowns` or [`CONSTRAINED`]. Entry `(i, j)` is stored when unknowns `i` and
    /// `j` share an element; the diagonal is always stored (also for an unknown in no element).
    ///
    /// Cost: O(Σ_rows (candidates · log candidates)) for the pattern, done in parallel; the
    /// colouring is a sequential greedy pass over the elements.
    ///
    /// # Panics
    /// If `offsets` is not non-decreasing, does not start at 0 or end at `element_dofs.len()`,
    /// or if a dof is neither `< n_unknowns` nor [`CONSTRAINED`].
    pub fn new(n_unknowns: usize, offsets: &[usize], element_dofs: &[usize]) -> Self {
        Self::with_block_size(n_unknowns, offsets, element_dofs, DEFAULT_BLOCK_SIZE)
    }

    /// As [`new`](Self::new), with the colouring done on blocks of `block_size` consecutive
    /// elements instead of the default [`DEFAULT_BLOCK_SIZE`].
    ///
    /// A block is assembled by one thread in element order, so consecutive elements (which
    /// share nodes in a well-ordered mesh) hit the cache; blocks of one colour share no unknown
    /// and run in parallel. The summation order, hence the bitwise result, depends on the block
    /// size but never on the number of threads.
    pub fn with_block_size(
        n_unknowns: usize,
        offsets: &[usize],
        element_dofs: &[usize],
        block_size: usize,
    ) -> Self {
        assert!(block_size > 0, "block_size must be ≥ 1");
        assert!(!offsets.is_empty(), "offsets must have n_elements + 1 entries (got none)");
        assert_eq!(offsets[0], 0, "offsets must start at 0");
        assert_eq!(
            *offsets.last().unwrap(),
            element_dofs.len(),
            "offsets end at {} but element_dofs has {} entries",
            offsets.last().unwrap(),
            element_dofs.len()
        );
        assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "offsets must be non-decreasing");
        if let Some((k, &d)) =
            element_dofs.iter().enumerate().find(|&(_, &d)| d >= n_unknowns && d != CONSTRAINED)
        {
            panic!(
                "element_dofs[{k}] = {d} is neither < n_unknowns = {n_unknowns} nor CONSTRAINED"
            );
        }
        assert!(
            u32::try_from(n_unknowns).is_ok(),
            "{n_unknowns} unknowns: CSR column indices are 32-bit (at most {})",
            u32::MAX
        );
        let n_elements = offsets.len() - 1;
        let max_nd = offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);

        // Unknown → elements adjacency, by counting sort.
        let mut adj_ptr = vec![0usize; n_unknowns + 1];
        for &d in element_dofs {
            if d != CONSTRAINED {
                adj_ptr[d + 1] += 1;
            }
        }
        for i in 0..n_unknowns {
            adj_ptr[i + 1] += adj_ptr[i];
        }
        let mut adj = vec![0usize; adj_ptr[n_unknowns]];
        {
            let mut next = adj_ptr.clone();
            for e in 0..n_elements {
                for &d in &element_dofs[offsets[e]..offsets[e + 1]] {
                    if d != CONSTRAINED {
                        adj[next[d]] = e;
                        next[d] += 1;
                    }
                }
            }
        }

        // Rows, in parallel chunks: gather the unknowns of the elements around each row,
        // deduplicate with a marker array (reset after each row), sort the short row.
        // `vec![false; n]` is a zeroed allocation, cheap even when rayon calls the init closure
        // for many splits.
        const ROWS_PER_CHUNK: usize = 4096;
        let chunks: Vec<(Vec<usize>, Vec<u32>)> = (0..n_unknowns.div_ceil(ROWS_PER_CHUNK))
            .into_par_iter()
            .map_init(
                || vec![false; n_unknowns],
                |mark, c| {
                    let rows = c * ROWS_PER_CHUNK..((c + 1) * ROWS_PER_CHUNK).min(n_unknowns);
                    let mut lens = Vec::with_capacity(rows.len());
                    let mut cols: Vec<u32> = Vec::with_capacity(rows.len() * 16);
                    for i in rows {
                        let start = cols.len();
                        mark[i] = true;
                        cols.push(i as u32);
                        for &e in &adj[adj_ptr[i]..adj_ptr[i + 1]] {
                            for &d in &element_dofs[offsets[e]..offsets[e + 1]] {
                                if d != CONSTRAINED && !mark[d] {
                                    mark[d] = true;
                                    cols.push(d as u32);
                                }
                            }
                        }
                        let row = &mut cols[start..];
                        for &d in row.iter() {
                            mark[d as usize] = false;
                        }
                        row.sort_unstable();
                        lens.push(row.len());
                    }
                    (lens, cols)
                },
            )
            .collect();
        let incidence = Incidence { n_unknowns, offsets, element_dofs, adj_ptr, adj };
        let nnz: usize = chunks.iter().map(|(_, c)| c.len()).sum();
        let mut row_ptr = Vec::with_capacity(n_unknowns + 1);
        row_ptr.push(0);
        let mut col_idx = Vec::with_capacity(nnz);
        for (lens, cols) in chunks {
            for l in lens {
                row_ptr.push(row_ptr.last().unwrap() + l);
            }
            col_idx.extend_from_slice(&cols);
        }

        // Slot tables: per node pair where the unknowns come in whole nodes, else per dof pair;
        // entries are offsets inside a row, as narrow as the longest row allows.
        let b = node_size(n_unknowns, offsets, element_dofs).unwrap_or(1);
        let mut slot_offsets = Vec::with_capacity(n_elements + 1);
        slot_offsets.push(0usize);
        for e in 0..n_elements {
            let nn = (offsets[e + 1] - offsets[e]) / b;
            slot_offsets.push(slot_offsets[e] + nn * nn);
        }
        let longest_row = row_ptr.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        let slots = if longest_row < u8::MAX as usize {
            Slots::U8(build_slots(&incidence, &row_ptr, &col_idx, &slot_offsets, b))
        } else if longest_row < u16::MAX as usize {
            Slots::U16(build_slots(&incidence, &row_ptr, &col_idx, &slot_offsets, b))
        } else {
            Slots::U32(build_slots(&incidence, &row_ptr, &col_idx, &slot_offsets, b))
        };
        drop(incidence);

        let (colour_ptr, colour_blocks) =
            colour_blocks(n_unknowns, offsets, element_dofs, block_size);
        tracing::debug!(
            n_unknowns,
            n_elements,
            nnz,
            n_colours = colour_ptr.len() - 1,
            "assembly pattern built"
        );

        AssemblyPattern {
            n_unknowns,
            offsets: Offsets::of(offsets),
            element_dofs: element_dofs
                .iter()
                .map(|&d| if d == CONSTRAINED { u32::MAX } else { d as u32 })
                .collect(),
            row_ptr,
            col_idx,
            node_size: b,
            slot_offsets: Offsets::of(&slot_offsets),
            slots,
            block_size,
            colour_ptr,
            colour_blocks,
            max_nd,
        }
    }

    /// Number of unknowns (rows and columns of the matrix).
    pub fn n_unknowns(&self) -> usize {
        self.n_unknowns
    }

    /// Number of elements.
    pub fn n_elements(&self) -> usize {
        self.offsets.count()
    }

    /// Number of stored matrix entries.
    pub fn nnz(&self) -> usize {
        self.col_idx.len()
    }

    /// Number of colours of element blocks.
    pub fn n_colours(&self) -> usize {
        self.colour_ptr.len() - 1
    }

    /// The elements of colour `c`, block by block. Two elements of one colour in different
    /// blocks share no unknown.
    pub fn colour_elements(&self, c: usize) -> impl Iterator<Item = usize> + '_ {
        self.colour_blocks[self.colour_ptr[c]..self.colour_ptr[c + 1]]
            .iter()
            .flat_map(move |&b| self.block_range(b))
    }

    fn block_range(&self, b: usize) -> std::ops::Range<usize> {
        b * self.block_size..((b + 1) * self.block_size).min(self.n_elements())
    }

    /// Local dofs of element `e` (unknown indices or [`CONSTRAINED`]).
    pub fn element_dofs(&self, e: usize) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.element_dofs[self.offsets.range(e)].iter().map(|&d| wide(d))
    }

    /// Local dof `a` of element `e` (an unknown index or [`CONSTRAINED`]).
    pub fn element_dof(&self, e: usize, a: usize) -> usize {
        wide(self.element_dofs[self.offsets.range(e)][a])
    }

    /// CSR row pointers of the pattern.
    pub fn row_ptr(&self) -> &[usize] {
        &self.row_ptr
    }

    /// CSR column indices of the pattern (sorted within each row).
    pub fn col_idx(&self) -> &[u32] {
        &self.col_idx
    }

    /// The position in `values` of local pair `(a, b)` of element `e`, or `None` when either
    /// local dof is constrained.
    pub fn slot(&self, e: usize, a: usize, b: usize) -> Option<usize> {
        let nd = self.offsets.range(e).len();
        assert!(
            a < nd && b < nd,
            "local pair ({a}, {b}) out of range for element {e} with {nd} dofs"
        );
        let size = self.node_size;
        let k = self.slot_offsets.start(e) + (a / size) * (nd / size) + b / size;
        let local = match &self.slots {
            Slots::U8(s) => (s[k] != u8::MAX).then_some(s[k] as usize),
            Slots::U16(s) => (s[k] != u16::MAX).then_some(s[k] as usize),
            Slots::U32(s) => (s[k] != u32::MAX).then_some(s[k] as usize),
        }?;
        // A constrained row's entries are all `NONE`, so `a` is an unknown here.
        Some(self.row_ptr[self.element_dof(e, a)] + local + b % size)
    }

    /// A matrix with this pattern and all values zero.
    pub fn new_matrix(&self) -> CsrMatrix {
        CsrMatrix::zeros(
            self.n_unknowns,
            self.n_unknowns,
            self.row_ptr.clone(),
            self.col_idx.clone(),
        )
    }

    fn check_matrix(&self, matrix: &CsrMatrix) {
        assert!(
            matrix.n_rows == self.n_unknowns
                && matrix.n_cols == self.n_unknowns
                && matrix.nnz() == self.nnz()
                && matrix.values.len() == self.nnz(),
            "matrix ({}×{}, {} entries) does not have this pattern ({n}×{n}, {} entries)",
            matrix.n_rows,
            matrix.n_cols,
            matrix.nnz(),
            self.nnz(),
            n = self.n_unknowns
        );
        debug_assert!(matrix.row_ptr == self.row_ptr && matrix.col_idx == self.col_idx);
    }

    /// Refills `matrix` (values zeroed first) and `vector` (zeroed first) from element
    /// contributions: `kernel(e, ke, fe)` writes the dense `nd × nd` row-major element matrix
    /// `ke` and the element vector `fe` (both pre-zeroed, `nd` = number of local dofs of `e`).
    ///
    /// K = Σₑ Pₑᵀ kₑ Pₑ and F = Σₑ Pₑᵀ fₑ, where Pₑ picks the unconstrained local dofs.
    /// Colour by colour, elements of a colour in parallel: the result is bitwise identical for
    /// any number of threads.
    ///
    /// # Panics
    /// If `matrix` does not have this pattern or `vector.len() != n_unknowns`.
    pub fn assemble_into(
        &self,
        matrix: &mut CsrMatrix,
        vector: &mut [f64],
        kernel: impl Fn(usize, &mut [f64], &mut [f64]) + Sync,
    ) {
        self.check_matrix(matrix);
        self.check_vector(vector);
        matrix.values.fill(0.0);
        vector.fill(0.0);
        self.scatter(Some(&mut matrix.values), Some(vector), &kernel);
    }

    /// Refills `vector` (zeroed first) from element vectors: `kernel(e, fe)` writes `fe`
    /// (pre-zeroed). F = Σₑ Pₑᵀ fₑ; bitwise identical for any number of threads.
    pub fn assemble_vector_into(
        &self,
        vector: &mut [f64],
        kernel: impl Fn(usize, &mut [f64]) + Sync,
    ) {
        self.check_vector(vector);
        vector.fill(0.0);
        self.scatter(None, Some(vector), &|e: usize, _ke: &mut [f64], fe: &mut [f64]| {
            kernel(e, fe)
        });
    }

    /// Refills `matrix` (values zeroed first) from element matrices: `kernel(e, ke)` writes the
    /// row-major `ke` (pre-zeroed). K = Σₑ Pₑᵀ kₑ Pₑ; bitwise identical for any number of
    /// threads.
    pub fn assemble_matrix_into(
        &self,
        matrix: &mut CsrMatrix,
        kernel: impl Fn(usize, &mut [f64]) + Sync,
    ) {
        self.check_matrix(matrix);
        matrix.values.fill(0.0);
        self.scatter(
            Some(&mut matrix.values),
            None,
            &|e: usize, ke: &mut [f64], _fe: &mut [f64]| kernel(e, ke),
        );
    }

    fn check_vector(&self, vector: &[f64]) {
        assert_eq!(
            vector.len(),
            self.n_unknowns,
            "vector has {} entries for {} unknowns",
            vector.len(),
            self.n_unknowns
        );
    }

    fn scatter<K: Fn(usize, &mut [f64], &mut [f64]) + Sync>(
        &self,
        values: Option<&mut [f64]>,
        vector: Option<&mut [f64]>,
        kernel: &K,
    ) {
        let b = self.node_size;
        match &self.slots {
            Slots::U8(s) => self.scatter_with(s, values, vector, kernel, b),
            Slots::U16(s) => self.scatter_with(s, values, vector, kernel, b),
            Slots::U32(s) => self.scatter_with(s, values, vector, kernel, b),
        }
    }

    /// The scatter with slots per pair of `b` × `b` blocks (`b` = 1: per dof pair).
    fn scatter_with<S: SlotIndex, K: Fn(usize, &mut [f64], &mut [f64]) + Sync>(
        &self,
        slots: &[S],
        values: Option<&mut [f64]>,
        vector: Option<&mut [f64]>,
        kernel: &K,
        b: usize,
    ) {
        let want_matrix = values.is_some();
        let want_vector = vector.is_some();
        let values = SharedMut(values.map_or(std::ptr::null_mut(), |v| v.as_mut_ptr()));
        let vector = SharedMut(vector.map_or(std::ptr::null_mut(), |v| v.as_mut_ptr()));
        let max_nd = self.max_nd;
        for c in 0..self.n_colours() {
            let blocks = &self.colour_blocks[self.colour_ptr[c]..self.colour_ptr[c + 1]];
            blocks.par_iter().for_each_init(
                || (vec![0.0; max_nd * max_nd], vec![0.0; max_nd]),
                |(ke_buf, fe_buf), &block| {
                    for e in self.block_range(block) {
                        let dofs = &self.element_dofs[self.offsets.range(e)];
                        let nd = dofs.len();
                        let ke = &mut ke_buf[..nd * nd];
                        let fe = &mut fe_buf[..nd];
                        ke.fill(0.0);
                        fe.fill(0.0);
                        kernel(e, ke, fe);
                        if want_matrix && b == 1 {
                            let s0 = self.slot_offsets.start(e);
                            let s = &slots[s0..s0 + nd * nd];
                            for ((&d, row_slots), row) in
                                dofs.iter().zip(s.chunks_exact(nd)).zip(ke.chunks_exact(nd))
                            {
                                if d == u32::MAX {
                                    continue;
                                }
                                let start = self.row_ptr[d as usize];
                                for (&k, &v) in row_slots.iter().zip(row) {
                                    if k != S::NONE {
                                        // SAFETY: `start + k < nnz` by construction of the slot
                                        // table (k is an offset inside row d), and blocks of one
                                        // colour share no unknown, so no other thread writes
                                        // row d during this colour.
                                        unsafe { *values.ptr().add(start + k.to_usize()) += v };
                                    }
                                }
                            }
                        } else if want_matrix {
                            let nn = nd / b;
                            let s0 = self.slot_offsets.start(e);
                            let s = &slots[s0..s0 + nn * nn];
                            for an in 0..nn {
                                let first = dofs[b * an];
                                if first == u32::MAX {
                                    continue;
                                }
                                let first = first as usize;
                                for i in 0..b {
                                    let start = self.row_ptr[first + i];
                                    let row = &ke[(b * an + i) * nd..(b * an + i + 1) * nd];
                                    for bn in 0..nn {
                                        let k = s[an * nn + bn];
                                        if k == S::NONE {
                                            continue;
                                        }
                                        let at = start + k.to_usize();
                                        for kk in 0..b {
                                            // SAFETY: row `first + i` holds node B's b columns
                                            // at `at..at + b < nnz` (`node_size` checked the
                                            // layout), and no other thread writes them during
                                            // this colour.
                                            unsafe {
                                                *values.ptr().add(at + kk) += row[b * bn + kk]
                                            };
                                        }
                                    }
                                }
                            }
                        }
                        if want_vector {
                            for (&d, &v) in dofs.iter().zip(fe.iter()) {
                                if d != u32::MAX {
                                    // SAFETY: `d < n_unknowns` (checked in `new`), and no
                                    // other block of this colour has unknown `d`.
                                    unsafe { *vector.ptr().add(d as usize) += v };
                                }
                            }
                        }
                    }
                },
            );
        }
    }
}

/// A stored dof (`u32::MAX`: constrained) as the public `usize` one.
#[inline(always)]
fn wide(d: u32) -> usize {
    if d == u32::MAX { CONSTRAINED } else { d as usize }
}

/// Element → unknown map and its inverse (unknown → elements), borrowed for the pattern build.
struct Incidence<'a> {
    n_unknowns: usize,
    offsets: &'a [usize],
    element_dofs: &'a [usize],
    adj_ptr: Vec<usize>,
    adj: Vec<usize>,
}

/// Slot of every local pair (of dofs for `b` = 1, of nodes of `b` unknowns otherwise: the
/// pair's first row and column), as the column's offset inside the row, computed row by row:
/// for row `i`, the offset of each column in the row is stored in a scratch array `pos`, then
/// every element around `i` looks its local columns up there (no search). Rows run in parallel; each writes the slot-table
/// rows `(e, a)` with `dofs_e[a] = i` (`a` a node's first dof for `b` > 1), which no other row
/// writes.
fn build_slots<S: SlotIndex>(
    inc: &Incidence<'_>,
    row_ptr: &[usize],
    col_idx: &[u32],
    slot_offsets: &[usize],
    b: usize,
) -> Vec<S> {
    #[derive(Clone, Copy)]
    struct SharedSlots<S>(*mut S);
    // SAFETY: see the write below: disjoint positions per row.
    unsafe impl<S> Send for SharedSlots<S> {}
    unsafe impl<S> Sync for SharedSlots<S> {}
    impl<S> SharedSlots<S> {
        #[inline(always)]
        fn ptr(self) -> *mut S {
            self.0
        }
    }

    let n = inc.n_unknowns;
    let mut slots = vec![S::NONE; *slot_offsets.last().unwrap()];
    let len = slots.len();
    let out = SharedSlots(slots.as_mut_ptr());
    const ROWS_PER_CHUNK: usize = 4096;
    (0..n.div_ceil(ROWS_PER_CHUNK)).into_par_iter().for_each_init(
        || vec![0usize; n],
        |pos, c| {
            for i in c * ROWS_PER_CHUNK..((c + 1) * ROWS_PER_CHUNK).min(n) {
                let start = row_ptr[i];
                for (k, &j) in col_idx[start..row_ptr[i + 1]].iter().enumerate() {
                    pos[j as usize] = k;
                }
                for &e in &inc.adj[inc.adj_ptr[i]..inc.adj_ptr[i + 1]] {
                    let dofs = &inc.element_dofs[inc.offsets[e]..inc.offsets[e + 1]];
                    let nn = dofs.len() / b;
                    for a in (0..nn).filter(|&a| dofs[b * a] == i) {
                        let base = slot_offsets[e] + a * nn;
                        for bn in 0..nn {
                            let j = dofs[b * bn];
                            if j != CONSTRAINED {
                                debug_assert!(base + bn < len);
                                // SAFETY: `base + bn < len` (slot_offsets sums nn² per
                                // element), and slot-table row (e, a) is written only while
                                // handling row `i = dofs[b·a]`, i.e. by exactly one task.
                                unsafe { *out.ptr().add(base + bn) = S::from_usize(pos[j]) };
                            }
                        }
                    }
                }
            }
        },
    );
    slots
}

/// Greedy colouring of blocks of `block_size` consecutive elements: each block takes the
/// smallest colour not used by a block that shares an unknown with it. Colours are tracked 64
/// at a time as bit masks per unknown; blocks that find no free colour in the current window of
/// 64 move on to the next window.
///
/// Returns (`colour_ptr`, `colour_blocks`), blocks sorted by colour and, inside a colour, by
/// index.
fn colour_blocks(
    n_unknowns: usize,
    offsets: &[usize],
    element_dofs: &[usize],
    block_size: usize,
) -> (Vec<usize>, Vec<usize>) {
    let n_elements = offsets.len() - 1;
    let n_blocks = n_elements.div_ceil(block_size);
    let block_dofs = |b: usize| {
        let e0 = b * block_size;
        let e1 = (e0 + block_size).min(n_elements);
        element_dofs[offsets[e0]..offsets[e1]].iter().copied().filter(|&d| d != CONSTRAINED)
    };
    let mut colour = vec![usize::MAX; n_blocks];
    let mut masks = vec![0u64; n_unknowns];
    let mut pending: Vec<usize> = (0..n_blocks).collect();
    let mut window = 0usize;
    while !pending.is_empty() {
        if window > 0 {
            masks.fill(0);
        }
        let mut next_pending = Vec::new();
        for &b in &pending {
            let used = block_dofs(b).fold(0u64, |m, d| m | masks[d]);
            if used == u64::MAX {
                next_pending.push(b);
                continue;
            }
            let c = (!used).trailing_zeros();
            colour[b] = window * 64 + c as usize;
            for d in block_dofs(b) {
                masks[d] |= 1u64 << c;
            }
        }
        pending = next_pending;
        window += 1;
    }
    let n_colours = colour.iter().map(|&c| c + 1).max().unwrap_or(0);
    let mut colour_ptr = vec![0usize; n_colours + 1];
    for &c in &colour {
        colour_ptr[c + 1] += 1;
    }
    for c in 0..n_colours {
        colour_ptr[c + 1] += colour_ptr[c];
    }
    let mut next = colour_ptr.clone();
    let mut colour_blocks = vec![0usize; n_blocks];
    for (b, &c) in colour.iter().enumerate() {
        colour_blocks[next[c]] = b;
        next[c] += 1;
    }
    (colour_ptr, colour_blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two triangles sharing edge 1–2: (0, 1, 2) and (1, 3, 2), node 3 constrained.
    fn two_triangles() -> AssemblyPattern {
        AssemblyPattern::new(3, &[0, 3, 6], &[0, 1, 2, 1, CONSTRAINED, 2])
    }

    #[test]
    fn tiny_pattern_by_hand() {
        let p = two_triangles();
        assert_eq!(p.n_unknowns(), 3);
        assert_eq!(p.n_elements(), 2);
        assert_eq!(p.row_ptr(), &[0, 3, 6, 9]);
        assert_eq!(p.col_idx(), &[0, 1, 2, 0, 1, 2, 0, 1, 2]);
        assert_eq!(p.nnz(), 9);
        // One block of two elements: one colour.
        assert_eq!(p.n_colours(), 1);
        // Elements share unknowns 1 and 2: two colours with blocks of one element.
        let p = AssemblyPattern::with_block_size(3, &[0, 3, 6], &[0, 1, 2, 1, CONSTRAINED, 2], 1);
        assert_eq!(p.n_colours(), 2);
        assert_eq!(p.slot(1, 0, 2), Some(5)); // (1, 2)
        assert_eq!(p.slot(1, 1, 0), None); // constrained row
        assert_eq!(p.slot(0, 2, 0), Some(6)); // (2, 0)
    }

    #[test]
    fn empty_and_fully_constrained_meshes() {
        let p = AssemblyPattern::new(0, &[0], &[]);
        assert_eq!((p.n_elements(), p.nnz(), p.n_colours()), (0, 0, 0));
        let mut a = p.new_matrix();
        p.assemble_into(&mut a, &mut [], |_, _, _| unreachable!());
        // One element whose dofs are all constrained contributes nothing.
        let p = AssemblyPattern::new(1, &[0, 2], &[CONSTRAINED, CONSTRAINED]);
        assert_eq!(p.nnz(), 1);
        let mut a = p.new_matrix();
        let mut f = vec![7.0];
        p.assemble_into(&mut a, &mut f, |_, ke, fe| {
            ke.fill(1.0);
            fe.fill(1.0);
        });
        assert_eq!((a.values[0], f[0]), (0.0, 0.0));
    }

    #[test]
    fn pattern_with_isolated_unknown_keeps_diagonal() {
        // Unknown 3 is in no element; unknown 0 and 2 never meet.
        let p = AssemblyPattern::new(4, &[0, 2, 4], &[0, 1, 1, 2]);
        assert_eq!(p.row_ptr(), &[0, 2, 5, 7, 8]);
        assert_eq!(p.col_idx(), &[0, 1, 0, 1, 2, 1, 2, 3]);
    }

    #[test]
    fn assembly_sums_element_contributions() {
        let p = two_triangles();
        let mut a = p.new_matrix();
        let mut f = vec![0.0; 3];
        p.assemble_into(&mut a, &mut f, |e, ke, fe| {
            for (k, v) in ke.iter_mut().enumerate() {
                *v = (10 * e + k) as f64;
            }
            fe.fill(1.0 + e as f64);
        });
        // (1, 1): e0 local (1,1) = 4, e1 local (0,0) = 10.
        assert_eq!(a.values[a.find(1, 1).unwrap()], 14.0);
        // (2, 1): e0 local (2,1) = 7, e1 local (2,0) = 16.
        assert_eq!(a.values[a.find(2, 1).unwrap()], 23.0);
        // (0, 0): only e0 local (0,0) = 0.
        assert_eq!(a.values[a.find(0, 0).unwrap()], 0.0);
        assert_eq!(f, vec![1.0, 3.0, 3.0]);
        // A refill overwrites rather than accumulates.
        p.assemble_vector_into(&mut f, |_, fe| fe.fill(1.0));
        assert_eq!(f, vec![1.0, 2.0, 2.0]);
        p.assemble_matrix_into(&mut a, |_, ke| ke.fill(1.0));
        assert_eq!(a.values[a.find(1, 2).unwrap()], 2.0);
    }

    /// A strip of triangles over 3-unknown nodes (node n free: unknowns 3f..3f + 3), some
    /// nodes fixed, optionally one node with a single constrained component.
    fn vector_strip(partial: bool) -> (usize, Vec<usize>, Vec<usize>) {
        let nodes = 12;
        let fixed = |n: usize| n == 0 || n == 7;
        let mut first = vec![CONSTRAINED; nodes];
        let mut count = 0;
        for n in 0..nodes {
            if !fixed(n) {
                first[n] = count;
                count += 3;
            }
        }
        let mut offsets = vec![0];
        let mut dofs = Vec::new();
        for t in 0..nodes - 2 {
            for n in [t, t + 1, t + 2] {
                for c in 0..3 {
                    let d = if first[n] == CONSTRAINED { CONSTRAINED } else { first[n] + c };
                    dofs.push(if partial && n == 5 && c == 1 { CONSTRAINED } else { d });
                }
            }
            offsets.push(dofs.len());
        }
        (count, offsets, dofs)
    }

    #[rstest::rstest]
    #[case::whole_nodes(false, true)]
    #[case::partly_constrained_node(true, false)]
    fn node_block_slots_assemble_like_a_dense_sum(#[case] partial: bool, #[case] blocks: bool) {
        let (n, offsets, dofs) = vector_strip(partial);
        let p = AssemblyPattern::new(n, &offsets, &dofs);
        assert_eq!(p.node_size == 3, blocks);
        let value = |e: usize, a: usize, b: usize| (1 + e * 81 + a * 9 + b) as f64 * 0.37;
        let mut a = p.new_matrix();
        p.assemble_matrix_into(&mut a, |e, ke| {
            for (k, v) in ke.iter_mut().enumerate() {
                *v = value(e, k / 9, k % 9);
            }
        });
        let mut dense = vec![0.0; n * n];
        for e in 0..offsets.len() - 1 {
            let d = &dofs[offsets[e]..offsets[e + 1]];
            for (la, &i) in d.iter().enumerate() {
                for (lb, &j) in d.iter().enumerate() {
                    if i != CONSTRAINED && j != CONSTRAINED {
                        dense[i * n + j] += value(e, la, lb);
                    }
                }
            }
        }
        for i in 0..n {
            for j in 0..n {
                let got = a.find(i, j).map_or(0.0, |k| a.values[k]);
                assert_eq!(got, dense[i * n + j], "({i}, {j})");
            }
        }
        // `slot` agrees with `find`
        for e in 0..offsets.len() - 1 {
            let d = &dofs[offsets[e]..offsets[e + 1]];
            for (la, &i) in d.iter().enumerate() {
                for (lb, &j) in d.iter().enumerate() {
                    let expect =
                        (i != CONSTRAINED && j != CONSTRAINED).then(|| a.find(i, j).unwrap());
                    assert_eq!(p.slot(e, la, lb), expect, "element {e} ({la}, {lb})");
                }
            }
        }
    }

    #[test]
    fn colours_share_no_unknown() {
        // A strip of 200 triangles: every element touches many neighbours.
        let n = 200;
        let mut dofs = Vec::new();
        for e in 0..n {
            dofs.extend_from_slice(&[e, e + 1, e + 2]);
        }
        let offsets: Vec<usize> = (0..=n).map(|e| 3 * e).collect();
        let p = AssemblyPattern::with_block_size(n + 2, &offsets, &dofs, 1);
        let mut seen = vec![usize::MAX; n + 2];
        for c in 0..p.n_colours() {
            for e in p.colour_elements(c) {
                for d in p.element_dofs(e) {
                    assert_ne!(seen[d], c, "colour {c} has two elements with unknown {d}");
                    seen[d] = c;
                }
            }
        }
        assert_eq!(p.n_colours(), 3);
        // Blocks of 10 consecutive triangles share two unknowns with the next block: 2 colours.
        let p = AssemblyPattern::with_block_size(n + 2, &offsets, &dofs, 10);
        assert_eq!(p.n_colours(), 2);
        let mut all: Vec<usize> = (0..2).flat_map(|c| p.colour_elements(c)).collect();
        all.sort_unstable();
        assert_eq!(all, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn more_than_64_colours() {
        // 100 elements all sharing unknown 0 need 100 colours.
        let n = 100;
        let mut dofs = Vec::new();
        for e in 0..n {
            dofs.extend_from_slice(&[0, e + 1]);
        }
        let offsets: Vec<usize> = (0..=n).map(|e| 2 * e).collect();
        let p = AssemblyPattern::with_block_size(n + 1, &offsets, &dofs, 1);
        assert_eq!(p.n_colours(), 100);
        let mut a = p.new_matrix();
        p.assemble_matrix_into(&mut a, |_, ke| ke.fill(1.0));
        assert_eq!(a.values[a.find(0, 0).unwrap()], 100.0);
    }

    /// A star: unknown 0 shares an element with each of `n` others, so row 0 has n + 1
    /// entries; the slot table takes the narrowest type that holds an offset in that row.
    #[rstest::rstest]
    #[case::one_byte(100, 1)]
    #[case::two_bytes(400, 2)]
    fn slot_width_follows_the_longest_row(#[case] n: usize, #[case] width: usize) {
        let mut dofs = Vec::new();
        for e in 0..n {
            // every third element has its centre constrained
            dofs.extend_from_slice(&[if e % 3 == 0 { CONSTRAINED } else { 0 }, e + 1]);
        }
        let offsets: Vec<usize> = (0..=n).map(|e| 2 * e).collect();
        let p = AssemblyPattern::new(n + 1, &offsets, &dofs);
        let got = match &p.slots {
            Slots::U8(_) => 1,
            Slots::U16(_) => 2,
            Slots::U32(_) => 4,
        };
        assert_eq!(got, width);
        let mut a = p.new_matrix();
        p.assemble_matrix_into(&mut a, |e, ke| {
            ke.copy_from_slice(&[1.0, 2.0 + e as f64, 3.0 + e as f64, 4.0]);
        });
        let star = (0..n).filter(|e| e % 3 != 0).count() as f64;
        assert_eq!(a.values[a.find(0, 0).unwrap()], star);
        for e in 0..n {
            let leaf = e + 1;
            assert_eq!(a.values[a.find(leaf, leaf).unwrap()], 4.0);
            let coupled = e % 3 != 0;
            assert_eq!(a.find(0, leaf).map(|k| a.values[k]), coupled.then_some(2.0 + e as f64));
            assert_eq!(a.find(leaf, 0).map(|k| a.values[k]), coupled.then_some(3.0 + e as f64));
            assert_eq!(p.slot(e, 1, 0), a.find(leaf, 0).filter(|_| coupled));
        }
    }
}
