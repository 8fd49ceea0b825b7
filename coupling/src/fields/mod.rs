//! The fields of gradfem as [`crate::Field`]s: each wires one physics crate's model to
//! assembly, the nonlinear and linear solvers and its adjoint.

pub mod electrical;
pub mod finite_strain;
pub mod hyperelastic;
pub mod mechanical;
pub mod thermal;
pub mod thermal_transient;
pub mod transient;
