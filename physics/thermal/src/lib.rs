//! The thermal field: steady heat conduction −∇·(k(T) ∇T) = Q with fixed temperatures, heat
//! fluxes and convection on boundary groups, on P1 and P2 cells (Tet4, Tet10, Hex8, Hex20,
//! Hex27, Prism6).
//!
//! This crate says what happens at a quadrature point ([`law`]) and on one element
//! ([`model::ThermalModel`]'s kernels and vector-Jacobian products); it knows nothing of sparse
//! matrices or solvers. The facade crate assembles and solves.

pub mod law;
pub mod model;
pub mod objective;
pub mod second_order;

pub use law::{ConductivityLaw, heat_flux};
pub use model::{
    BcKind, BcSpec, HeatBalance, ParameterVjp, RegionSpec, ThermalError, ThermalModel, VjpRequest,
};
pub use objective::{ObjectiveEval, ObjectiveKind, ObjectiveTerm};
pub use second_order::ThermalDirection;
