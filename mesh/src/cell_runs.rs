//! [`CellRuns`]: which mesh cell (and file tag) lies behind each element of a model, stored as
//! runs of consecutive cells instead of one [`CellId`] and one tag per element.
//!
//! A model numbers its elements group by group, and the cells of a group are sorted, so the
//! elements of a generated mesh form one run per block and those of a gmsh or ANSYS file a few
//! runs per group (tags are consecutive inside a block there too). At 6·10⁷ tetrahedra the
//! per-element arrays would take 1.4 GB; the runs take bytes. The worst case (no two
//! consecutive elements on consecutive cells) costs 32 bytes per element, 8 more than the
//! arrays.

use crate::mesh::CellId;

/// One run: elements `first..` lie on cells `index..` of block `block`, with tags `tag..`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Run {
    first: usize,
    block: usize,
    index: usize,
    tag: u64,
}

/// The mesh cell and its file tag of each element of a sequence, stored as runs (see the module
/// documentation). Elements are appended with [`push`](Self::push) and looked up in O(log runs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CellRuns {
    runs: Vec<Run>,
    len: usize,
}

impl CellRuns {
    /// No element yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of runs (the storage is 32 bytes per run).
    pub fn n_runs(&self) -> usize {
        self.runs.len()
    }

    /// Appends an element on `cell`, whose tag in the source file is `tag`.
    pub fn push(&mut self, cell: CellId, tag: u64) {
        let e = self.len;
        self.len += 1;
        if let Some(last) = self.runs.last() {
            let k = e - last.first;
            if last.block == cell.block
                && last.index.checked_add(k) == Some(cell.index)
                && last.tag.checked_add(k as u64) == Some(tag)
            {
                return;
            }
        }
        self.runs.push(Run { first: e, block: cell.block, index: cell.index, tag });
    }

    fn run(&self, e: usize) -> (&Run, usize) {
        assert!(e < self.len, "element {e} of {}", self.len);
        let r = self.runs.partition_point(|run| run.first <= e) - 1;
        let run = &self.runs[r];
        (run, e - run.first)
    }

    /// The mesh cell of element `e`.
    ///
    /// # Panics
    /// If `e` is not below [`len`](Self::len).
    pub fn cell(&self, e: usize) -> CellId {
        let (run, k) = self.run(e);
        CellId { block: run.block, index: run.index + k }
    }

    /// The source file's tag of the cell of element `e`.
    ///
    /// # Panics
    /// If `e` is not below [`len`](Self::len).
    pub fn tag(&self, e: usize) -> u64 {
        let (run, k) = self.run(e);
        run.tag + k as u64
    }

    /// The cells of all elements, in order (a walk over the runs, no search).
    pub fn cells(&self) -> impl Iterator<Item = CellId> + '_ {
        self.runs.iter().enumerate().flat_map(|(r, run)| {
            let end = self.runs.get(r + 1).map_or(self.len, |next| next.first);
            (0..end - run.first).map(|k| CellId { block: run.block, index: run.index + k })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(block: usize, index: usize) -> CellId {
        CellId { block, index }
    }

    #[test]
    fn runs_break_where_block_index_or_tag_jumps() {
        let cells = [
            (id(0, 0), 1),
            (id(0, 1), 2),
            (id(0, 2), 3),
            (id(1, 3), 4), // another block
            (id(1, 4), 5),
            (id(1, 6), 6), // index jumps
            (id(1, 7), 9), // tag jumps
            (id(1, 8), 10),
            (id(0, 2), 3), // back to an earlier cell
        ];
        let mut runs = CellRuns::new();
        for &(c, t) in &cells {
            runs.push(c, t);
        }
        assert_eq!(runs.len(), cells.len());
        assert_eq!(runs.n_runs(), 5);
        for (e, &(c, t)) in cells.iter().enumerate() {
            assert_eq!((runs.cell(e), runs.tag(e)), (c, t), "element {e}");
        }
        assert_eq!(runs.cells().collect::<Vec<_>>(), cells.map(|(c, _)| c).to_vec());
    }

    #[test]
    fn a_generated_block_is_one_run() {
        let mut runs = CellRuns::new();
        for i in 0..10_000 {
            runs.push(id(2, i), i as u64 + 1);
        }
        assert_eq!(runs.n_runs(), 1);
        assert_eq!((runs.cell(9_999), runs.tag(9_999)), (id(2, 9_999), 10_000));
        assert!(CellRuns::new().is_empty());
    }

    #[test]
    #[should_panic(expected = "element 3 of 3")]
    fn out_of_range_panics_with_the_index() {
        let mut runs = CellRuns::new();
        for i in 0..3 {
            runs.push(id(0, i), 1);
        }
        runs.cell(3);
    }
}
