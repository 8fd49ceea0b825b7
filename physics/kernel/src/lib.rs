//! Traits and small helpers shared by every field crate.
//!
//! A field crate says what happens at a quadrature point and on one element; this crate holds
//! what all of them share: the scalar bound under which point laws are written once for `f64`
//! and for dual numbers, and the description of a field's degrees of freedom.

pub mod coordinates;
pub mod generic;
pub mod offsets;
pub mod point;

pub use coordinates::{
    CoordinatePart, CoordinateRequest, dual_coordinates, element_motion, hyper_dual_coordinates,
    mat_mul, motion_gradient, seed_pick, symmetric_times, trace,
};
pub use offsets::{Offsets, RunStarts};
pub use point::{PointSample, point_sample_along};

use rayon::prelude::*;

/// `compute(e)` for every element of `0..n_elements` in parallel, handed to `consume(e, value)`
/// in element order, a chunk at a time: the per-element values of one chunk share a buffer
/// reused from chunk to chunk (no array over all elements is allocated and zeroed anew per
/// call), and sums `consume` forms do not depend on the thread count.
pub fn for_each_element_ordered<T: Send>(
    n_elements: usize,
    compute: impl Fn(usize) -> T + Sync + Send,
    mut consume: impl FnMut(usize, &T),
) {
    const CHUNK: usize = 1 << 12;
    let mut buf: Vec<T> = Vec::with_capacity(CHUNK.min(n_elements));
    let mut start = 0;
    while start < n_elements {
        let end = (start + CHUNK).min(n_elements);
        (start..end).into_par_iter().map(&compute).collect_into_vec(&mut buf);
        for (k, v) in buf.iter().enumerate() {
            consume(start + k, v);
        }
        start = end;
    }
}

/// `buf` cut into consecutive runs of the given `lengths` (which sum to at most its length),
/// so that the runs can be filled in parallel.
pub fn split_runs<T>(buf: &mut [T], lengths: impl IntoIterator<Item = usize>) -> Vec<&mut [T]> {
    let lengths = lengths.into_iter();
    let mut runs = Vec::with_capacity(lengths.size_hint().0);
    let mut rest = buf;
    for len in lengths {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(len);
        runs.push(head);
        rest = tail;
    }
    runs
}

/// Compute `width` values per local node of elements `0..n_elements` in parallel and add them to
/// a nodal array (`width` entries per node) in element order, a chunk of elements at a time, so
/// the result does not depend on the thread count and memory stays bounded. Element `e` has the
/// nodes `nodes[offsets.start(e)..offsets.start(e + 1)]`; `compute(e, local)` writes its values
/// into the zeroed `local` (`width` per local node, node-major).
pub fn scatter_chunked(
    n_elements: usize,
    offsets: &(impl RunStarts + ?Sized),
    nodes: &[usize],
    out: &mut [f64],
    width: usize,
    compute: impl Fn(usize, &mut [f64]) + Sync,
) {
    scatter_chunked_with_values(n_elements, offsets, nodes, out, width, None, |e, local| {
        compute(e, local);
        0.0
    });
}

/// [`scatter_chunked`] where `compute` also returns one value per element, stored in
/// `values[e]` when given (`values` has `n_elements` entries).
pub fn scatter_chunked_with_values(
    n_elements: usize,
    offsets: &(impl RunStarts + ?Sized),
    nodes: &[usize],
    out: &mut [f64],
    width: usize,
    mut values: Option<&mut [f64]>,
    compute: impl Fn(usize, &mut [f64]) -> f64 + Sync,
) {
    const CHUNK: usize = 1 << 14;
    if let Some(v) = &values {
        assert_eq!(v.len(), n_elements, "one value per element");
    }
    let mut chunk_values: Vec<f64> = Vec::new();
    let mut buf: Vec<f64> = Vec::new();
    let mut start = 0;
    while start < n_elements {
        let end = (start + CHUNK).min(n_elements);
        buf.clear();
        buf.resize(width * (offsets.start(end) - offsets.start(start)), 0.0);
        let mut slices: Vec<(usize, &mut [f64])> = (start..end)
            .zip(split_runs(
                &mut buf,
                (start..end).map(|e| width * (offsets.start(e + 1) - offsets.start(e))),
            ))
            .collect();
        match values.as_deref_mut() {
            Some(v) => {
                slices
                    .par_iter_mut()
                    .map(|(e, s)| compute(*e, s))
                    .collect_into_vec(&mut chunk_values);
                v[start..end].copy_from_slice(&chunk_values);
            }
            None => slices.par_iter_mut().for_each(|(e, s)| {
                compute(*e, s);
            }),
        }
        for (e, s) in slices {
            for (a, &n) in nodes[offsets.start(e)..offsets.start(e + 1)].iter().enumerate() {
                for k in 0..width {
                    out[width * n + k] += s[width * a + k];
                }
            }
        }
        start = end;
    }
}

/// Where a degree of freedom lives, for error messages: "node 17 (tag 18) at (0.1, 0, 0)".
pub trait DescribeDof {
    /// A human description of unknown `dof`.
    fn describe_dof(&self, dof: usize) -> String;
}

/// Numbering of a nodal field's unknowns: each active node is either an unknown or constrained
/// (Dirichlet), and inactive nodes (touched by no cell of the field) carry nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodalDofMap {
    /// For each mesh node: its unknown index, or `None` when the node is constrained or
    /// inactive.
    pub unknown_of_node: Vec<Option<usize>>,
    /// For each unknown: its mesh node.
    pub node_of_unknown: Vec<usize>,
}

impl NodalDofMap {
    /// Number the nodes for which `is_free(node)` holds, in node order.
    pub fn new(n_nodes: usize, is_free: impl Fn(usize) -> bool) -> Self {
        let mut unknown_of_node = vec![None; n_nodes];
        let mut node_of_unknown = Vec::new();
        for (n, slot) in unknown_of_node.iter_mut().enumerate() {
            if is_free(n) {
                *slot = Some(node_of_unknown.len());
                node_of_unknown.push(n);
            }
        }
        NodalDofMap { unknown_of_node, node_of_unknown }
    }

    /// Number of unknowns.
    pub fn n_unknowns(&self) -> usize {
        self.node_of_unknown.len()
    }

    /// Scatter unknown values into a nodal vector (constrained entries left untouched).
    pub fn scatter(&self, unknowns: &[f64], nodal: &mut [f64]) {
        for (i, &n) in self.node_of_unknown.iter().enumerate() {
            nodal[n] = unknowns[i];
        }
    }

    /// Gather unknown values from a nodal vector.
    pub fn gather(&self, nodal: &[f64]) -> Vec<f64> {
        self.node_of_unknown.iter().map(|&n| nodal[n]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_is_consumed_once_in_order_for_any_thread_count() {
        // More elements than one chunk, and not a multiple of it.
        let n = 3 * (1 << 12) + 17;
        let run = || {
            let mut seen = Vec::with_capacity(n);
            let mut sum = 0.0;
            for_each_element_ordered(
                n,
                |e| [e as f64, 1.0 / (e as f64 + 1.0)],
                |e, v| {
                    seen.push(e);
                    assert_eq!(v[0], e as f64);
                    sum += v[1];
                },
            );
            (seen, sum)
        };
        let (seen, sum) = run();
        assert!(seen.iter().copied().eq(0..n));
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let (_, sum1) = one.install(run);
        assert_eq!(sum.to_bits(), sum1.to_bits());
        let mut none = 0;
        for_each_element_ordered(0, |e| e, |_, _| none += 1);
        assert_eq!(none, 0);
    }

    #[test]
    fn scatter_adds_in_element_order_for_any_thread_count() {
        // Two triangles sharing an edge: nodes 0-1-2 and 1-3-2.
        let offsets = [0, 3, 6];
        let nodes = [0, 1, 2, 1, 3, 2];
        let run = || {
            let mut out = vec![0.0; 4];
            scatter_chunked(2, &offsets[..], &nodes, &mut out, 1, |e, local| {
                for (a, v) in local.iter_mut().enumerate() {
                    *v = (e * 10 + a) as f64 + 0.1;
                }
            });
            out
        };
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap().install(run);
        let two = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap().install(run);
        assert_eq!(one, vec![0.1, 1.1 + 10.1, 2.1 + 12.1, 11.1]);
        assert_eq!(one, two);
    }

    #[test]
    fn numbering_skips_constrained_nodes() {
        let map = NodalDofMap::new(5, |n| n != 1 && n != 3);
        assert_eq!(map.n_unknowns(), 3);
        assert_eq!(map.unknown_of_node, vec![Some(0), None, Some(1), None, Some(2)]);
        let mut nodal = vec![9.0; 5];
        map.scatter(&[1.0, 2.0, 3.0], &mut nodal);
        assert_eq!(nodal, vec![1.0, 9.0, 2.0, 9.0, 3.0]);
        assert_eq!(map.gather(&nodal), vec![1.0, 2.0, 3.0]);
    }
}
