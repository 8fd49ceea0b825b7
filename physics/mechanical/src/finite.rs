//! Finite-strain hyperelastic elements: Total Lagrangian kernels and their vector-Jacobian products.
