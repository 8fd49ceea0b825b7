//! Traits and small helpers shared by every field crate.
//!
//! A field crate says what happens at a quadrature point and on one element; this crate holds
//! what all of them share: the scalar bound under which point laws are written once for `f64`
//! and for dual numbers, and the description of a field's degrees of freedom.

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
