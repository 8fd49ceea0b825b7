//! Errors of the mesh crate.

use thiserror::Error;

/// What can go wrong with a mesh: bad geometry, an unknown group, an unmatched facet.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum MeshError {
    #[error("unknown group '{name}'; the mesh has: {}", known.join(", "))]
    UnknownGroup { name: String, known: Vec<String> },
    #[error("inconsistent mesh: {0}")]
    Inconsistent(String),
    /// A cell of a boundary group is not the face of any top-dimensional cell.
    #[error(
        "group '{group}': facet with tag {facet_tag} at ({:.6e}, {:.6e}, {:.6e}) is not a face of any cell of the mesh",
        centroid[0], centroid[1], centroid[2]
    )]
    UnmatchedFacet { group: String, facet_tag: u64, centroid: [f64; 3] },
    /// A group used as a boundary does not have dimension `mesh.dim() - 1`.
    #[error(
        "group '{group}' has dimension {dim}, but boundary groups of this mesh have dimension {expected}"
    )]
    GroupDimension { group: String, dim: usize, expected: usize },
}
