//! Sparse assembly, linear and nonlinear solvers, the coupling graph's schedule, the parameter
//! registry, checkpointed reverse sweeps, Taylor tests and optimizers.
//!
//! This crate sees operators, residuals, tangents and vector-Jacobian products; it never names
//! an element type.

pub mod amg;
pub mod assembly;
pub mod cg;
pub mod checkpoint;
pub mod dense;
pub mod error;
pub mod gmres;
pub mod graph;
pub mod interrupt;
pub mod linear;
pub mod mma;
pub mod newton;
pub mod optimize;
pub mod ordering;
pub mod params;
pub mod reuse;
pub mod route;
pub mod sparse;
pub mod taylor;
#[cfg(test)]
pub(crate) mod test_matrices;
pub mod trust;
pub mod watch;

pub use assembly::{AssemblyPattern, CONSTRAINED};
pub use error::SolverError;
pub use linear::{CholeskySolver, LinearSolver, LuSolver, residual_norm};
pub use newton::{NewtonInfo, NewtonParams, NonlinearProblem, newton};
pub use sparse::CsrMatrix;
