//! Finite-strain hyperelastic solves with load stepping, and their adjoint through the load steps.
