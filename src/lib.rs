//! gradfem: differentiable multiphysics finite elements.
//!
//! This facade wires the crates together: meshes ([`gradfem_mesh`]), files ([`gradfem_io`]),
//! fields ([`gradfem_thermal`]) and solvers with the adjoint engine ([`gradfem_solvers`]), and
//! holds problem files, the thermal problem with its gradient, and the CLI's building blocks.

pub mod ansys_import;
pub mod api;
pub mod app;
pub mod electrothermal;
pub mod element_values;
pub mod finite_strain;
pub mod hyperelastic_file;
pub mod identify;
pub mod identify_fem;
pub mod identify_report;
pub mod mechanical;
pub mod mesh_report;
pub mod optimize;
pub mod problem;
pub mod progress;
pub mod run;
pub mod shape;
pub mod thermal;
pub mod time_history;
pub mod transient;
pub mod transient_file;

pub use gradfem_io as io;
pub use gradfem_mesh as mesh;
pub use gradfem_solvers as solvers;
pub use gradfem_thermal as thermal_field;
