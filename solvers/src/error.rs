//! Errors of the solvers crate. (In progress: the solver-core helper completes this enum.)

use thiserror::Error;

/// Numerical failure of a linear or nonlinear solve, carrying where it happened.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SolverError {
    #[error("{field}: {message}")]
    Other { field: String, message: String },
}
