//! Errors of the dynamics crate.

use gradfem_solvers::params::ParamError;
use thiserror::Error;

/// Errors of a simulation or of its adjoint. Each carries the step where it happened.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum DynamicsError {
    /// A state component became NaN or infinite (step too large for the stiffness, or a
    /// user force that returned garbage). Reported by the opt-in scan
    /// ([`crate::adjoint::Simulation::check_finite`]): the first non-finite component of the
    /// first step that produced one.
    #[error(
        "step {step} (t = {time}): body {body} {field} (state component {component}, {name}) \
         is not finite: {value}"
    )]
    NonFiniteState {
        /// Index of the step whose result is not finite (the state after step `step`).
        step: usize,
        /// Time at the start of that step.
        time: f64,
        /// Body index.
        body: usize,
        /// Field of the body: `position`, `velocity`, `orientation` or `angular_velocity`.
        field: &'static str,
        /// Flat index of the component.
        component: usize,
        /// Its name, e.g. `velocity[2].z`.
        name: String,
        /// The value.
        value: f64,
    },
    /// The adjoint λ_k became NaN or infinite in the reverse sweep (a VJP that returned
    /// garbage, or an objective gradient that did). Reported by the opt-in scan.
    #[error(
        "adjoint of step {step}: body {body} {field} (component {component}, {name}) is not \
         finite: {value}"
    )]
    NonFiniteAdjoint {
        /// Step k of λ_k.
        step: usize,
        /// Body index.
        body: usize,
        /// Field of the body.
        field: &'static str,
        /// Flat index of the component.
        component: usize,
        /// Its name, e.g. `velocity[2].z`.
        name: String,
        /// The value.
        value: f64,
    },
    /// A body mass or moment of inertia is not strictly positive.
    #[error("body {body}: mass {mass} and moments of inertia {inertia:?} must be > 0")]
    NonPositiveMass {
        /// Body index.
        body: usize,
        /// The mass.
        mass: f64,
        /// The principal moments, for a rigid body.
        inertia: Option<[f64; 3]>,
    },
    /// A stop was requested ([`gradfem_solvers::interrupt`]); the run ended before `step`.
    #[error("dynamics: interrupted at {sweep} step {step}")]
    Interrupted {
        /// "forward" or "adjoint".
        sweep: &'static str,
        /// The step not taken.
        step: usize,
    },
    /// A parameter registry error (unknown name, out of bounds, …).
    #[error(transparent)]
    Param(#[from] ParamError),
}
