//! The mechanical field: small-strain linear thermo-elasticity ([`linear`]) and finite-strain
//! hyperelasticity ([`hyperelastic`]: strain-energy densities generic over the scalar, Ogden,
//! Neo-Hookean, Mooney–Rivlin, Saint Venant–Kirchhoff), with the closed-form homogeneous
//! deformations used to identify material parameters from test-rig curves ([`homogeneous`]).
//!
//! Like every field crate, this one says what happens at a quadrature point and on one element;
//! it knows nothing of sparse matrices or solvers.

pub mod homogeneous;
pub mod hyperelastic;
pub mod linear;
