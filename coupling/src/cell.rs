//! The element-level view of a field that a monolithic cycle assembles.
//!
//! A strongly coupled group (a cycle of the coupling graph, such as φ ⇄ T through σ(T)) can be
//! solved by one Newton on all its unknowns. The engine builds that system from the fields'
//! element kernels: on every mesh cell it joins the elements the cycle's fields have there into
//! one combined element (the fields' dofs one after the other, in the cycle's order), fills its
//! diagonal blocks with each field's own tangent and its off-diagonal blocks by the chain rule
//! through the transfers:
//!
//! - a receiving field's residual depends on an input port (∂fe/∂x,
//!   [`CellKernels::element_input_tangent`]);
//! - a nodal input carried from another field's state is that state, so ∂fe/∂x is the block
//!   against the source field's dofs of the same nodes;
//! - an input at quadrature points carried from a derived output y = g(u, x') (the Joule heat
//!   from φ and T) adds (∂fe/∂x)(∂y/∂u) against the source's dofs and (∂fe/∂x)(∂y/∂x')
//!   against the dofs of whichever cycle field feeds x' ([`CellKernels::element_output_jacobian`]).
//!
//! Facet and constraint elements (convection faces, a current terminal's row) enter alone.
//! Couplings act through volume cells, where every field of the cycle sees the same nodes in the
//! same order; the engine checks that when it builds the combined elements.

use gradfem_mesh::CellId;

/// Element kernels of a field, at the state and inputs placed in it (a read-only view the
/// engine assembles from in parallel; the field places states through
/// [`crate::Field::place_unknowns`]).
pub trait CellKernels: Sync {
    /// Number of unknowns.
    fn n_unknowns(&self) -> usize;

    /// Number of elements (volume elements first, then facets and constraint elements).
    fn n_elements(&self) -> usize;

    /// Unknowns per node in [`element_dofs`](Self::element_dofs) (1 for a scalar field).
    fn components(&self) -> usize;

    /// The dofs of element `e`, node by node with the components of a node together;
    /// `gradfem_solvers::assembly::CONSTRAINED` for prescribed values.
    fn element_dofs(&self, e: usize) -> &[usize];

    /// The mesh nodes of element `e`.
    fn element_nodes(&self, e: usize) -> &[usize];

    /// The mesh cell of element `e` when it is a volume element; `None` for facets and
    /// constraint rows.
    fn element_cell(&self, e: usize) -> Option<CellId>;

    /// The adjoint's right-hand side on the unknowns for a seed over the state (the transpose
    /// of the map from unknowns to the state).
    fn unknowns_adjoint(&self, state_bar: &[f64]) -> Vec<f64>;

    /// λ over the state entries from λ on the unknowns (zero at prescribed entries).
    fn lambda_from_unknowns(&self, lambda: &[f64]) -> Vec<f64>;

    /// Residual `fe` and, when given, tangent `ke` (row-major, both zeroed by the caller) of
    /// element `e` against its own dofs, at the placed state and inputs.
    fn element_residual_tangent(&self, e: usize, ke: Option<&mut [f64]>, fe: &mut [f64]);

    /// ∂fe/∂x of element `e` against input port `port`'s values local to the element (nodal:
    /// the element's nodes × the port's components; points: the element's points), added
    /// row-major into `out` (element dofs × local values). False when the element does not
    /// depend on that port (`out` untouched).
    fn element_input_tangent(&self, e: usize, port: usize, out: &mut [f64]) -> bool;

    /// For a derived output `port` at points, volume element `e`'s share: its number of
    /// points, ∂y/∂u against the element's state entries (points × nodes·components,
    /// row-major) and, for every input port the output reads, ∂y/∂x against the element's
    /// local values of that port (port, points × local values). `None` when the port has no
    /// values on this element.
    #[allow(clippy::type_complexity)]
    fn element_output_jacobian(
        &self,
        e: usize,
        port: usize,
    ) -> Option<(usize, Vec<f64>, Vec<(usize, Vec<f64>)>)>;

    /// A description of unknown `dof` for error messages (node, position, component).
    fn describe_dof(&self, dof: usize) -> String;

    /// The placed state (the layout of the field's output port 0).
    fn state(&self) -> &[f64];

    /// The element capacity (mass) matrix of volume element `e` of a field stepped in time,
    /// added row-major into `out` (element dofs × element dofs); false for a field without a
    /// capacity term or an element without one.
    fn element_capacity(&self, e: usize, out: &mut [f64]) -> bool {
        let _ = (e, out);
        false
    }
}
