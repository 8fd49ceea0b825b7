//! What the runs of every field share: the error of a run ([`RunError`]) and the choice of
//! linear solver ([`LinearChoice`]). The engine, every field and the problem-file layer use
//! them; this module depends on none of them.

use gradfem_solvers::amg::{AmgParams, CoarseSpace, NearNullspace};
use gradfem_solvers::cg::CgParams;
use gradfem_solvers::error::SolverError;
use gradfem_solvers::gmres::BlockGmresSolver;
use gradfem_solvers::linear::{LinearSolver, LuSolver};
use gradfem_solvers::params::ParamError;
use gradfem_solvers::route::{Route, SpdSolver};
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
    /// For symmetric systems Cholesky or AMG-CG, whichever the cost model predicts cheaper
    /// ([`gradfem_solvers::route`]); LU when the tangent is not symmetric.
    Auto,
    Cholesky,
    Lu,
    AmgCg,
}

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

/// The solver of a field's non-symmetric system (nonlinear conduction's tangent): LU when
/// asked for, else GMRES preconditioned by the Cholesky factor of the symmetric part
/// ([`BlockGmresSolver`], which falls back to LU by itself where that does not work).
pub fn nonsymmetric_solver(field: &str, choice: LinearChoice) -> Box<dyn LinearSolver> {
    match choice {
        LinearChoice::Lu => Box::new(LuSolver::new(field)),
        _ => Box::new(BlockGmresSolver::new(field, Vec::new())),
    }
}

/// The solver of a field's symmetric positive definite system for `choice`: LU when asked for,
/// else [`SpdSolver`] routing by cost (`Auto`) or forced to Cholesky or AMG-CG, with CG to
/// `cg_rel_tol` and, for vector fields, the near-nullspace `modes` (nodes of several unknowns;
/// `None`: scalar aggregation) and the AMG's first coarse level `coarse` (p-multigrid for
/// quadratic cells; `None`: aggregation from the finest level).
pub fn spd_solver(
    field: &str,
    choice: LinearChoice,
    cg_rel_tol: f64,
    modes: Option<NearNullspace>,
    coarse: Option<CoarseSpace>,
) -> Box<dyn LinearSolver> {
    let route = match choice {
        LinearChoice::Lu => return Box::new(LuSolver::new(field)),
        LinearChoice::Auto => Route::Auto,
        LinearChoice::Cholesky => Route::Cholesky,
        LinearChoice::AmgCg => Route::AmgCg,
    };
    let cg = CgParams { rel_tol: cg_rel_tol, ..Default::default() };
    let mut solver = SpdSolver::new(field, route, AmgParams::default(), cg);
    if let Some(m) = modes {
        solver = solver.with_near_nullspace(m);
    }
    if let Some(c) = coarse {
        solver = solver.with_coarse_space(c);
    }
    Box::new(solver)
}
