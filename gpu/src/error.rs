//! The errors of the GPU backend.

use thiserror::Error;

/// Why a device run could not be done or did not succeed.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum GpuError {
    /// The library was built without the `cuda` cargo feature.
    #[error(
        "this build of gradfem has no CUDA support: rebuild with the `cuda` feature \
         (`cargo build --release --features cuda`) to run on a GPU"
    )]
    NotBuilt,
    /// The NVIDIA driver library could not be loaded.
    #[error(
        "no CUDA driver (libcuda.so.1) found: install the NVIDIA driver, or add the folder \
         holding libcuda.so.1 to LD_LIBRARY_PATH"
    )]
    NoDriver,
    /// The driver loaded but reports no usable device.
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    /// The NVRTC library could not be loaded.
    #[error(
        "no NVRTC library (libnvrtc.so.13) found: install the CUDA 13.0 toolkit or PyPI's \
         `nvidia-cuda-nvrtc==13.0.*` wheel and add its lib folder to LD_LIBRARY_PATH"
    )]
    NoNvrtc,
    /// NVRTC rejected a kernel source.
    #[error("NVRTC could not compile {program}: {log}")]
    Compile {
        /// The program's name.
        program: String,
        /// NVRTC's log (or the error it returned).
        log: String,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver error while {what}: {message}")]
    Driver {
        /// What was being done.
        what: String,
        /// The driver's error.
        message: String,
    },
    /// The problem has something without a device kernel.
    #[error("not supported on the device: {0}")]
    Unsupported(String),
    /// An input of the wrong size or value.
    #[error("invalid input: {0}")]
    Input(String),
    /// Conjugate gradients stopped before the tolerance.
    #[error(
        "device CG did not converge: relative residual {relative_residual:.3e} after \
         {iterations} iterations"
    )]
    NotConverged {
        /// Iterations done.
        iterations: usize,
        /// ‖r‖ / ‖b‖ at the end.
        relative_residual: f64,
    },
    /// Conjugate gradients met a non-positive or non-finite curvature.
    #[error(
        "device CG broke down at iteration {iteration}: pᵀAp = {curvature:e} (the matrix is \
         not symmetric positive definite, or a value overflowed)"
    )]
    Breakdown {
        /// The iteration.
        iteration: usize,
        /// The curvature pᵀAp found.
        curvature: f64,
    },
}
