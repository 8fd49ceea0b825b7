//! gradfem-coupling: the coupled-problem engine.
//!
//! A problem is one mesh, fields on it ([`Field`]: electrical, thermal, linear mechanical,
//! finite-strain mechanical, …) and transfers between their ports (the Joule heat, the
//! temperature a resistivity or a thermal strain reads). [`CoupledProblem`] schedules the
//! graph by its strongly connected components, solves the stages in order (a cycle monolithic
//! or staggered), holds the one parameter registry and the shape parameters, and runs the
//! adjoint of the whole graph in reverse. Nothing in the engine names a field: each lives in
//! [`fields`] and reaches the engine through the [`Field`] trait.

pub mod cell;
mod cycle;
pub mod error;
pub mod field;
pub mod fields;
pub mod problem;
pub mod second_order;
pub mod shape;
pub mod taylor;
pub mod time;
mod time_cycle;

pub use error::{LinearChoice, RunError};
pub use field::{
    CycleAdapt, CyclePlan, CycleStep, Dynamic, Field, Layout, OutputVjp, Port, Reverse,
    SecondOrder, Seed, SolveMode, StepChoice, StepInfo, TimeInputSeeds, TimeTangents,
};
pub use problem::{
    CoupledProblem, CycleParams, CycleReport, CycleScheme, GradientTimings, Transfer,
};
pub use second_order::SecondOrderTaylor;
pub use shape::Shape;
