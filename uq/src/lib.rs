//! gradfem-uq: the sampling and statistics of uncertainty propagation, independent of any
//! finite-element problem.
//!
//! - [`dist`]: input distributions (normal, log-normal, uniform, truncated normal) by their
//!   inverse CDFs, and correlation through a Gaussian copula (Cholesky factor).
//! - [`design`]: where each sample lies in (0, 1)^d — plain Monte Carlo, Latin hypercube,
//!   Sobol with Owen scrambling (hash-based nested uniform) — computed from (seed, index) alone, so samples split
//!   across ranks or shards draw the same numbers as one run.
//! - [`stats`]: mean, standard deviation, quantiles, exceedance probabilities, each with its
//!   standard error; stopping and acceptance rules.
//! - [`field`]: Gaussian random fields over cells (exponential or squared-exponential
//!   correlation) by their truncated Karhunen–Loève expansion, each mode one standard-normal
//!   input.
//! - [`sensitivity`]: the first-order variance gᵀ C g from a gradient at the mean and each
//!   input's share of it.
//!
//! The facade crate (`gradfem uq`) runs the finite-element samples and writes the reports.

pub mod design;
pub mod dist;
pub mod field;
pub mod rng;
pub mod sensitivity;
pub mod special;
pub mod stats;

pub use design::{Design, DesignKind};
pub use dist::{Correlation, Distribution};
pub use stats::{StopRule, Summary};
