//! Errors of the mesh crate.

use thiserror::Error;

/// What can go wrong with a mesh: bad geometry, an unknown group, an unmatched facet.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum MeshError {
    #[error("unknown group '{name}'; the mesh has: {}", known.join(", "))]
    UnknownGroup { name: String, known: Vec<String> },
    #[error("inconsistent mesh: {0}")]
    Inconsistent(String),
}
