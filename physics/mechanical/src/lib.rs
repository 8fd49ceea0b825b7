//! The mechanical field: small-strain linear thermo-elasticity ([`linear`]) and finite-strain
//! hyperelasticity ([`hyperelastic`]: strain-energy densities generic over the scalar, Ogden,
//! Neo-Hookean, Mooney–Rivlin, Saint Venant–Kirchhoff), with the closed-form homogeneous
//! deformations used to identify material parameters from test-rig curves ([`homogeneous`]).
//!
//! Like every field crate, this one says what happens at a quadrature point and on one element;
//! it knows nothing of sparse matrices or solvers.

pub mod finite;
pub mod homogeneous;
pub mod hyperelastic;
pub mod linear;

pub use linear::objective::{ObjectiveEval, ObjectiveKind, ObjectiveTerm};
pub use linear::second_order::{MechanicalDirection, MechanicalSecondOrder};
pub use linear::{
    BcKind, BcSpec, ElementParams, LinearElasticModel, MechanicalError, ParameterVjp, RegionSpec,
    StressField, VjpRequest, von_mises,
};

pub use finite::second_order::{FiniteDirection, FiniteSecondOrder};
pub use finite::{
    FiniteParameterVjp, FiniteRegion, FiniteRegionSpec, FiniteStrainError, FiniteStrainModel,
    FiniteVjpRequest, HyperelasticLaw,
};
pub use homogeneous::{
    Experiment, FitSummary, HomogeneousError, HomogeneousState, Mode, OgdenFit,
    compressible_nominal_stress, incompressible_nominal_stress,
    incompressible_nominal_stress_gradient, read_experiment_csv, read_treloar,
};
pub use hyperelastic::{
    HyperelasticError, Mat3, MooneyRivlin, NeoHookean, Ogden, OgdenTerm, SaintVenantKirchhoff,
    StrainEnergy, ThermalExpansion, Volumetric, first_piola, stress_and_tangent,
    stress_parameter_derivatives,
};
