//! Errors of the mesh crate.

use thiserror::Error;

/// What can go wrong with a mesh: bad geometry, an unknown group, an unmatched facet.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum MeshError {
    /// No group of that name.
    #[error("unknown group '{name}'; the mesh has: {}", known.join(", "))]
    UnknownGroup {
        /// The name asked for.
        name: String,
        /// The names the mesh has.
        known: Vec<String>,
    },
    /// Connectivity, tags or groups that do not fit together (message says where).
    #[error("inconsistent mesh: {0}")]
    Inconsistent(String),
    /// A cell of a boundary group is not the face of any top-dimensional cell.
    #[error(
        "group '{group}': facet with tag {facet_tag} at ({:.6e}, {:.6e}, {:.6e}) is not a face of any cell of the mesh",
        centroid[0], centroid[1], centroid[2]
    )]
    UnmatchedFacet {
        /// Name of the boundary group.
        group: String,
        /// Tag of the group's cell (element number in the source file).
        facet_tag: u64,
        /// Centroid of that cell's vertices.
        centroid: [f64; 3],
    },
    /// A group used as a boundary does not have dimension `mesh.dim() - 1`.
    #[error(
        "group '{group}' has dimension {dim}, but boundary groups of this mesh have dimension {expected}"
    )]
    GroupDimension {
        /// Name of the group.
        group: String,
        /// The group's dimension.
        dim: usize,
        /// `mesh.dim() - 1`.
        expected: usize,
    },
}
