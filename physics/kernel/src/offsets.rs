//! [`Offsets`]: where each run of a flat per-element array starts (an element's nodes, its
//! dofs, its quadrature points, its slot table), without an array when every run has the same
//! length.

/// The starts of consecutive runs in a flat array: a stride when every run has the same length
/// (a mesh of one cell type: no array at all, where the offsets would take 8 bytes per element),
/// the offsets otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Offsets {
    /// `count` runs of `len` entries each.
    Uniform {
        /// Entries per run.
        len: usize,
        /// Number of runs.
        count: usize,
    },
    /// Run e is `offsets[e]..offsets[e + 1]` (`offsets[0] = 0`, one more entry than runs).
    Varying(Vec<usize>),
}

impl Default for Offsets {
    fn default() -> Self {
        Offsets::Uniform { len: 0, count: 0 }
    }
}

impl Offsets {
    /// The runs that `offsets` describes (`offsets[0] = 0`, one more entry than runs).
    ///
    /// # Panics
    /// If `offsets` is empty or decreases somewhere.
    pub fn of(offsets: &[usize]) -> Self {
        assert!(!offsets.is_empty(), "offsets have one more entry than runs (got none)");
        Self::from_lengths(offsets.windows(2).map(|w| {
            assert!(w[0] <= w[1], "offsets must be non-decreasing");
            w[1] - w[0]
        }))
    }

    /// The runs of the given lengths, in order.
    pub fn from_lengths(lengths: impl IntoIterator<Item = usize>) -> Self {
        let mut out = Offsets::default();
        for len in lengths {
            out.push(len);
        }
        out
    }

    /// Appends a run of `len` entries (a uniform table turns into offsets at the first run of
    /// another length).
    pub fn push(&mut self, len: usize) {
        match self {
            Offsets::Uniform { len: l, count } if *count == 0 || *l == len => {
                *l = len;
                *count += 1;
            }
            Offsets::Uniform { len: l, count } => {
                let mut o: Vec<usize> = (0..=*count).map(|e| e * *l).collect();
                o.push(o[*count] + len);
                *self = Offsets::Varying(o);
            }
            Offsets::Varying(o) => o.push(o[o.len() - 1] + len),
        }
    }

    /// The number of runs.
    pub fn count(&self) -> usize {
        match self {
            Offsets::Uniform { count, .. } => *count,
            Offsets::Varying(o) => o.len() - 1,
        }
    }

    /// The number of entries of all runs together.
    pub fn total(&self) -> usize {
        self.start(self.count())
    }

    /// Where run e starts (`e = count()`: the total).
    #[inline(always)]
    pub fn start(&self, e: usize) -> usize {
        match self {
            Offsets::Uniform { len, .. } => e * len,
            Offsets::Varying(o) => o[e],
        }
    }

    /// The entries of run e.
    #[inline(always)]
    pub fn range(&self, e: usize) -> std::ops::Range<usize> {
        match self {
            Offsets::Uniform { len, .. } => e * len..(e + 1) * len,
            Offsets::Varying(o) => o[e]..o[e + 1],
        }
    }

    /// The offsets as an array (`count() + 1` entries, starting at 0).
    pub fn to_vec(&self) -> Vec<usize> {
        match self {
            Offsets::Uniform { len, count } => (0..=*count).map(|e| e * len).collect(),
            Offsets::Varying(o) => o.clone(),
        }
    }
}

/// Where run e of a flat per-element array starts: read from an offsets array or an
/// [`Offsets`] alike.
pub trait RunStarts: Sync {
    /// The start of run `e` (`e` = the number of runs: the total).
    fn start(&self, e: usize) -> usize;
}

impl RunStarts for [usize] {
    #[inline(always)]
    fn start(&self, e: usize) -> usize {
        self[e]
    }
}

impl RunStarts for Vec<usize> {
    #[inline(always)]
    fn start(&self, e: usize) -> usize {
        self[e]
    }
}

impl RunStarts for Offsets {
    #[inline(always)]
    fn start(&self, e: usize) -> usize {
        Offsets::start(self, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_runs_stay_a_stride_and_another_length_turns_them_into_offsets() {
        let mut o = Offsets::default();
        assert_eq!((o.count(), o.total(), o.to_vec()), (0, 0, vec![0]));
        for _ in 0..3 {
            o.push(4);
        }
        assert_eq!(o, Offsets::Uniform { len: 4, count: 3 });
        assert_eq!((o.range(2), o.total()), (8..12, 12));
        o.push(3);
        o.push(6);
        assert_eq!(o, Offsets::Varying(vec![0, 4, 8, 12, 15, 21]));
        assert_eq!((o.count(), o.range(3), o.start(5)), (5, 12..15, 21));
        assert_eq!(Offsets::of(&o.to_vec()), o);
        assert_eq!(Offsets::of(&[0, 2, 4]), Offsets::Uniform { len: 2, count: 2 });
        assert_eq!(Offsets::from_lengths([0, 0]), Offsets::Uniform { len: 0, count: 2 });
    }

    #[test]
    #[should_panic(expected = "non-decreasing")]
    fn decreasing_offsets_are_refused() {
        Offsets::of(&[0, 3, 2]);
    }
}
