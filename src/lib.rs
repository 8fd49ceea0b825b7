//! gradfem: differentiable multiphysics finite elements.
//!
//! This facade puts the crates together for users: meshes ([`gradfem_mesh`]), files
//! ([`gradfem_io`]), the coupling engine with its fields ([`gradfem_coupling`]) and solvers with
//! the adjoint machinery ([`gradfem_solvers`]). It holds problem files and their translation
//! into fields of the engine, the library API, outputs and the CLI's building blocks.

pub mod ansys_import;
pub mod api;
pub mod app;
pub mod device;
pub mod element_values;
pub mod hessian;
pub mod hyperelastic_file;
pub mod identify;
pub mod identify_fem;
pub mod identify_report;
pub mod mesh_report;
pub mod optimize;
pub mod problem;
pub mod progress;
#[cfg(feature = "mpi")]
pub mod ranks;
pub mod thermal;
pub mod time_history;
pub mod transient_file;
pub mod uq;
pub mod uq_file;
pub mod uq_plot;

pub use gradfem_coupling as coupling;
pub use gradfem_coupling::error as run;
pub use gradfem_coupling::fields::{electrical, finite_strain, mechanical, transient};
pub use gradfem_coupling::shape;
pub use gradfem_io as io;
pub use gradfem_mesh as mesh;
pub use gradfem_solvers as solvers;
pub use gradfem_thermal as thermal_field;
