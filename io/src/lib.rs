//! File formats: gmsh `.msh` meshes, HDF5 + XDMF results, ANSYS MAPDL results and archives.
//!
//! This crate reads and writes files; it depends on `gradfem-mesh` and plain data, never on a
//! solver.

pub mod ansys;
pub mod atomic;
pub mod gmsh;
pub mod h5;
pub mod output_set;
