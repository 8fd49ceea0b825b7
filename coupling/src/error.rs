//! What the runs of every field share: the error of a run ([`RunError`]) and the choice of
//! linear solver ([`LinearChoice`]). The engine, every field and the problem-file layer use
//! them; this module depends on none of them.

use gradfem_solvers::error::SolverError;
use gradfem_solvers::params::ParamError;
use gradfem_thermal::ThermalError;
use serde::Serialize;

/// Errors of a problem run, any field: set-up, solver, parameter and field errors.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Thermal(#[from] ThermalError),
    #[error(transparent)]
    Solver(#[from] SolverError),
    #[error(transparent)]
    Param(#[from] ParamError),
    /// Boxed: the electrical errors carry positions and names, and would make every result of
    /// this crate large.
    #[error(transparent)]
    Electrical(Box<gradfem_electrical::ElectricalError>),
    #[error("{0}")]
    Setup(String),
    /// A parameter name no field offers (the engine answers it with the problem's list).
    #[error("cannot register '{0}': no such parameter")]
    UnknownParameter(String),
}

impl From<gradfem_electrical::ElectricalError> for RunError {
    fn from(e: gradfem_electrical::ElectricalError) -> Self {
        RunError::Electrical(Box::new(e))
    }
}

/// Which linear solver a field uses (`[solver] linear`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum LinearChoice {
    /// Cholesky for symmetric systems up to [`AUTO_ITERATIVE_THRESHOLD`] unknowns, AMG-CG
    /// above; LU when the tangent is not symmetric.
    Auto,
    Cholesky,
    Lu,
    AmgCg,
}

/// Above this many unknowns, `auto` takes AMG-preconditioned CG for symmetric systems: in 3D the
/// fill of a direct factorization grows as n^{4/3} and its cost as n², and the measured
/// crossover on 2 cores lies near 5·10⁴ unknowns (see BENCHMARKS.md).
pub const AUTO_ITERATIVE_THRESHOLD: usize = 50_000;

impl LinearChoice {
    /// Parse `auto`, `cholesky`, `lu`, `amg-cg`.
    pub fn parse(s: &str) -> Result<Self, RunError> {
        Ok(match s {
            "auto" => LinearChoice::Auto,
            "cholesky" => LinearChoice::Cholesky,
            "lu" => LinearChoice::Lu,
            "amg-cg" => LinearChoice::AmgCg,
            other => {
                return Err(RunError::Setup(format!(
                    "unknown linear solver '{other}'; expected auto, cholesky, lu or amg-cg"
                )));
            }
        })
    }
}
