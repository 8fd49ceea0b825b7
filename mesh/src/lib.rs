//! Meshes, cell types, reference elements, quadrature, geometry and quality checks.
//!
//! This crate knows nothing of physics or solvers: it describes where the nodes are, how cells
//! connect them, and how to integrate over a cell.

pub mod cell;
pub mod error;
pub mod mesh;

pub use cell::{CellType, LocalFacet};
pub use error::MeshError;
pub use mesh::{CellBlock, CellId, Mesh, PhysicalGroup};
