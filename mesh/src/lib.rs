//! Meshes, cell types, reference elements, quadrature, geometry and quality checks.
//!
//! This crate knows nothing of physics or solvers: it describes where the nodes are, how cells
//! connect them, and how to integrate over a cell.
//!
//! - [`cell`]: cell types, node counts, outward facet tables (local node order = gmsh order);
//! - [`mesh`]: [`Mesh`], cell blocks, physical groups;
//! - [`cell_runs`]: the mesh cell behind each element of a model, stored as runs;
//! - [`reference`](mod@reference): reference cells, shape functions and gradients;
//! - [`quadrature`](mod@quadrature): quadrature rules and tabulated shape functions ([`ElementTable`]);
//! - [`geometry`]: the isoparametric map, Jacobians, measures, normals;
//! - [`boundary`]: exterior facets and boundary-group matching;
//! - [`quality`]: inverted / degenerate / badly shaped cells ([`Mesh::check`]);
//! - [`generate`]: box and rectangle meshes, conversion to second order;
//! - [`actuator`]: the two-hot-arm microactuator built from its plan-view rectangles;
//! - [`select`](mod@select): groups selected by geometry (exterior facets on a plane).

pub mod actuator;
pub mod boundary;
pub mod cell;
pub mod cell_runs;
pub mod error;
pub mod generate;
pub mod geometry;
pub mod mesh;
pub mod quadrature;
pub mod quality;
pub mod reference;
pub mod select;

pub use actuator::{ActuatorLayout, ActuatorSpec, Rect, actuator_mesh};
pub use boundary::{BoundaryFacet, FacetIndex, exterior_facets, facet_nodes, group_facets};
pub use cell::{CellType, LocalFacet};
pub use cell_runs::CellRuns;
pub use error::MeshError;
pub use generate::{BoxSpec, box_mesh, rectangle_mesh, to_second_order};
pub use geometry::{
    cell_measure, det3, group_measure, inverse3, jacobian, measure_density,
    physical_gradients_into, surface_normal,
};
pub use mesh::{CellBlock, CellId, Mesh, PhysicalGroup};
pub use quadrature::{
    ElementTable, QuadratureRule, default_degree, max_quadrature_degree, quadrature,
};
pub use quality::{CellIssue, IssueKind, QualityReport, QualityThresholds, signed_jacobians};
pub use reference::{
    reference_measure, reference_nodes, shape_functions_into, shape_gradients_into,
    shape_hessians_into,
};
pub use select::add_plane_group;
