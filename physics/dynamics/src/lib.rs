//! gradfem-dynamics: differentiable particle and rigid-body dynamics with discrete adjoints.
//!
//! Bodies are particles or rigid bodies (principal inertia, Euler's equations, quaternion
//! orientation renormalized after every step); every gradient is the discrete adjoint of the
//! integrator's steps, exact to rounding.
//!
//! - [`state`]: the named state (`position`, `velocity`, `orientation`, `angular_velocity`) and
//!   its flat layout;
//! - [`system`]: bodies, parameters (a [`gradfem_solvers::params::ParamRegistry`]), equations of
//!   motion and their vector-Jacobian product;
//! - [`forces`]: springs, dampers, soft ground and sphere–sphere contact with friction, user
//!   forces;
//! - [`integrators`]: explicit Euler, RK4, velocity Verlet, user steps, finite-difference VJP;
//! - [`adjoint`]: simulation, objectives, discrete adjoint with store-all, binomial
//!   checkpointing or truncated backpropagation; opt-in NaN/∞ scan;
//! - [`watch`]: per-iteration record of an optimization, CSV and PNG output;
//! - [`scenes`]: ready-made systems of the examples and benchmarks (sliding box, spring chain).
//!
//! ```
//! use gradfem_dynamics::prelude::*;
//! use gradfem_solvers::params::ParamSpec;
//!
//! let mut sys = System::new();
//! let k = sys.param(ParamSpec::scalar("spring.k", 4.0).with_bounds(Some(0.0), None))?;
//! let b = sys.add_body(1.0);
//! sys.add_force(Spring { a: Anchor::Body(b), b: Anchor::Fixed([0.0; 3]), k, rest_length: 1.0.into() });
//! let mut x0 = State::at_rest(1);
//! x0.position[0] = [1.5, 0.0, 0.0];
//! let sim = Simulation::new(&sys, Rk4, 0.01, 100);
//! let mut weight = State::zeros(1);
//! weight.position[0] = [1.0, 0.0, 0.0];
//! let obj = FinalState { target: State::zeros(1), weight };
//! let g = sim.gradient(&x0, &obj, Memory::StoreAll)?;
//! assert!(g.params.by_name(&sys.registry, "spring.k")?[0].is_finite());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod adjoint;
pub mod error;
pub mod forces;
pub mod integrators;
pub mod scenes;
pub mod state;
pub mod system;
/// Parameter watching lives in `gradfem-solvers` (it watches any optimization).
pub use gradfem_solvers::watch;

/// The items most programs need.
pub mod prelude {
    pub use crate::adjoint::{
        AdjointResult, FinalState, Memory, Objective, PositionMisfit, Simulation, Sum, SweepStats,
    };
    pub use crate::error::DynamicsError;
    pub use crate::forces::{
        Anchor, ClampForce, ContactPoint, Damper, GroundContact, SphereContact, Spring, UserForce,
        clamp_with_grad,
    };
    pub use crate::integrators::{
        ExplicitEuler, FiniteDifferenceVjp, Rk4, Step, StepAt, StepVjp, VelocityVerlet,
    };
    pub use crate::state::State;
    pub use crate::system::{Ctx, ForceLaw, ParamValues, System, Value};
}
