//! The electrical field: steady current conduction −∇·(σ(T) ∇φ) = 0 on P1 and P2 cells (Tet4,
//! Tet10, Hex8, Hex20, Hex27, Prism6), with voltage, ground and current terminals, insulated
//! elsewhere; current density J = −σ ∇φ and Joule heat Q = σ |∇φ|².
//!
//! Like the thermal crate, this crate says what happens at a quadrature point ([`law`]) and on
//! one element ([`model::ElectricalModel`]'s kernels and vector-Jacobian products), plus the
//! terminal functionals ([`functional`]); it knows nothing of sparse matrices or solvers.

pub mod functional;
pub mod law;
pub mod model;
pub mod second_order;

pub use functional::{TerminalFunctional, TerminalFunctionalEval};
pub use law::{ResistivityLaw, conductivity, current_density, joule_heat};
pub use model::{
    CONSTRAINED, ConductorSpec, ElectricalError, ElectricalModel, ElectricalVjp, JouleVjp,
    TerminalKind, TerminalSpec, VjpRequest,
};
pub use second_order::{ElectricalDirection, ElectricalSecondOrder};
