//! gradfem's GPU backend: device execution of assembled finite-element systems.
//!
//! What runs on the device today is a steady, linear field on one kind of volume cell (Tet4,
//! Tet10, Hex8, Hex20, Hex27) with a per-element coefficient that scales its element matrix:
//! the thermal field (conductivity k_e, fixed temperatures, a volume heat source; Tet4 in
//! closed form, the others by the CPU model's quadrature) and small-strain linear elasticity
//! (Young's modulus E_e, Poisson's ratio per element, prescribed displacements, dead loads).
//! On the device: element matrices, deterministic assembly into CSR by gathering through the
//! CPU assembly's slot table, Jacobi-preconditioned CG (host loop, device SpMV / dot / axpy
//! kernels), the adjoint solve with the same operator (none for a self-adjoint objective such
//! as the compliance) and the per-element gradient dJ/dc_e = −λ_eᵀ K_e⁰ u_e. The objective
//! and ∂J/∂u are evaluated on the host from the downloaded solution.
//!
//! - [`kernels`]: the CUDA C sources, compiled at run time by NVRTC.
//! - [`twin`]: a CPU twin of every kernel (same arithmetic, same order) and [`twin::CpuTwin`],
//!   the pipeline on the CPU.
//! - [`backend`]: the pipeline written once over a [`backend::Backend`].
//! - `cuda` (feature `cuda`): the CUDA backend over cudarc, which loads `libcuda.so.1` and
//!   `libnvrtc.so.13` at run time, so the crate builds without a CUDA toolkit.

pub mod amg;
pub mod backend;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod error;
pub mod kernels;
pub mod solver;
pub mod system;
pub mod twin;

pub use backend::{Backend, CgInfo, CgParams, Pipeline, Preconditioner};
pub use error::GpuError;
pub use solver::DeviceCgSolver;
pub use system::{DeviceSystem, Physics};

/// Where assembled systems are solved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Device {
    /// The CPU assembly and solvers of gradfem.
    #[default]
    Cpu,
    /// An NVIDIA GPU through CUDA.
    Cuda,
}

impl Device {
    /// The name used in problem files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        }
    }
}

impl std::str::FromStr for Device {
    type Err = GpuError;
    fn from_str(s: &str) -> Result<Self, GpuError> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda),
            other => Err(GpuError::Input(format!(
                "unknown device '{other}' (expected \"cpu\" or \"cuda\")"
            ))),
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether this build has the CUDA backend (the `cuda` feature).
pub const CUDA_BUILT: bool = cfg!(feature = "cuda");

/// Check that a CUDA device can be used: the build has the `cuda` feature, the driver loads,
/// it reports a device and NVRTC loads. Returns the device's name; never panics.
pub fn cuda_ready() -> Result<String, GpuError> {
    #[cfg(feature = "cuda")]
    {
        let info = cuda::probe()?;
        if !cuda::nvrtc_present() {
            return Err(GpuError::NoNvrtc);
        }
        Ok(info.name)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(GpuError::NotBuilt)
    }
}

/// `$run(backend, args…)` with the backend of `$device` for `$system`: the CPU twins for
/// [`Device::Cpu`], the GPU for [`Device::Cuda`] ([`GpuError::NotBuilt`] without the `cuda`
/// feature).
macro_rules! on_device {
    ($device:expr, $system:expr, $run:ident($($arg:expr),* $(,)?)) => {
        match $device {
            Device::Cpu => $run(|| Ok(twin::CpuTwin::new($system)), $($arg),*),
            Device::Cuda => {
                #[cfg(feature = "cuda")]
                {
                    $run(|| cuda::CudaBackend::new($system), $($arg),*)
                }
                #[cfg(not(feature = "cuda"))]
                {
                    let _ = ($system, $($arg),*);
                    Err(GpuError::NotBuilt)
                }
            }
        }
    };
}

/// What the host objective answers for a nodal solution: how the adjoint is formed.
#[derive(Clone, Debug, PartialEq)]
pub enum Seed {
    /// ∂J/∂u per nodal value: the adjoint solve K λ = ∂J/∂u runs.
    Vector(Vec<f64>),
    /// The adjoint is `scale` times the forward solution (the compliance w·fᵀu under
    /// homogeneous constraints, scale = w): no solve ([`Pipeline::gradient_self_adjoint`]).
    Forward {
        /// λ = scale · u.
        scale: f64,
    },
}

/// The result of one forward solve + adjoint gradient on a backend.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceRun {
    /// What ran the kernels (`cpu-twin` or `cuda (<device name>)`).
    pub backend: String,
    /// Nodal solution (temperature, or displacement `3·node + i`); empty after
    /// [`run_compliance`], which leaves it on the device.
    pub solution: Vec<f64>,
    /// The objective J.
    pub objective: f64,
    /// dJ/dc_e per element (model element order), c the per-element coefficient.
    pub gradient: Vec<f64>,
    /// The forward CG.
    pub forward_cg: CgInfo,
    /// The adjoint CG (0 iterations when the adjoint is the forward solution).
    pub adjoint_cg: CgInfo,
    /// Seconds: setting up the backend (device: compiling and uploading), forward (assembly +
    /// solve + download of the solution), objective on the host, adjoint + gradient.
    pub setup_s: f64,
    /// See [`setup_s`](Self::setup_s).
    pub forward_s: f64,
    /// See [`setup_s`](Self::setup_s).
    pub objective_s: f64,
    /// See [`setup_s`](Self::setup_s).
    pub gradient_s: f64,
}

/// Forward solve and gradient on `backend` with the per-element coefficients `coefficient`;
/// `objective` maps the nodal solution to J and its [`Seed`] on the host.
pub fn run<B: Backend>(
    backend: impl FnOnce() -> Result<B, GpuError>,
    coefficient: &[f64],
    params: &CgParams,
    preconditioner: Preconditioner,
    objective: impl FnOnce(&[f64]) -> Result<(f64, Seed), GpuError>,
) -> Result<DeviceRun, GpuError> {
    let (mut pipeline, setup_s) = prepared_pipeline(backend, preconditioner)?;
    let t1 = std::time::Instant::now();
    let (solution, forward_cg) = pipeline.forward(coefficient, params)?;
    let forward_s = t1.elapsed().as_secs_f64();
    let t2 = std::time::Instant::now();
    let (value, seed) = objective(&solution)?;
    let objective_s = t2.elapsed().as_secs_f64();
    let t3 = std::time::Instant::now();
    let (gradient, adjoint_cg) = match seed {
        Seed::Vector(u_bar) => pipeline.gradient(&u_bar, params)?,
        Seed::Forward { scale } => {
            let g = pipeline.gradient_self_adjoint()?;
            (g.into_iter().map(|v| scale * v).collect(), CgInfo::default())
        }
    };
    let gradient_s = t3.elapsed().as_secs_f64();
    Ok(DeviceRun {
        backend: pipeline.backend().name(),
        solution,
        objective: value,
        gradient,
        forward_cg,
        adjoint_cg,
        setup_s,
        forward_s,
        objective_s,
        gradient_s,
    })
}

/// A pipeline on the backend `backend` makes, with `preconditioner` set, and the seconds that
/// took (the runs' `setup_s`).
fn prepared_pipeline<B: Backend>(
    backend: impl FnOnce() -> Result<B, GpuError>,
    preconditioner: Preconditioner,
) -> Result<(Pipeline<B>, f64), GpuError> {
    let t0 = std::time::Instant::now();
    let mut pipeline = Pipeline::new(backend()?)?;
    pipeline.set_preconditioner(preconditioner);
    Ok((pipeline, t0.elapsed().as_secs_f64()))
}

/// The compliance J = w·fᵀu and dJ/dc_e = −w·u_eᵀ K_e⁰ u_e of `system` (homogeneous
/// constraints) with the per-element coefficients `coefficient`, everything on `backend`: the
/// coefficients go in, J and the gradient come out, the solution stays on the device (the
/// run's `solution` is empty).
pub fn run_compliance<B: Backend>(
    backend: impl FnOnce() -> Result<B, GpuError>,
    coefficient: &[f64],
    params: &CgParams,
    preconditioner: Preconditioner,
    weight: f64,
) -> Result<DeviceRun, GpuError> {
    let (mut pipeline, setup_s) = prepared_pipeline(backend, preconditioner)?;
    let t1 = std::time::Instant::now();
    let forward_cg = pipeline.forward_on_device(coefficient, params)?;
    let forward_s = t1.elapsed().as_secs_f64();
    let t2 = std::time::Instant::now();
    let objective = weight * pipeline.compliance()?;
    let objective_s = t2.elapsed().as_secs_f64();
    let t3 = std::time::Instant::now();
    let gradient = pipeline.gradient_self_adjoint()?.into_iter().map(|v| weight * v).collect();
    let gradient_s = t3.elapsed().as_secs_f64();
    Ok(DeviceRun {
        backend: pipeline.backend().name(),
        solution: Vec::new(),
        objective,
        gradient,
        forward_cg,
        adjoint_cg: CgInfo::default(),
        setup_s,
        forward_s,
        objective_s,
        gradient_s,
    })
}

/// [`run_compliance`] on `device` (the CPU twins for [`Device::Cpu`]).
pub fn run_compliance_on(
    device: Device,
    system: &DeviceSystem,
    coefficient: &[f64],
    params: &CgParams,
    preconditioner: Preconditioner,
    weight: f64,
) -> Result<DeviceRun, GpuError> {
    on_device!(device, system, run_compliance(coefficient, params, preconditioner, weight))
}

/// [`run`] on `device`: the CPU twins for [`Device::Cpu`], the GPU for [`Device::Cuda`] (an
/// error naming the reason when this build or machine cannot).
pub fn run_on(
    device: Device,
    system: &DeviceSystem,
    coefficient: &[f64],
    params: &CgParams,
    preconditioner: Preconditioner,
    objective: impl FnOnce(&[f64]) -> Result<(f64, Seed), GpuError>,
) -> Result<DeviceRun, GpuError> {
    on_device!(device, system, run(coefficient, params, preconditioner, objective))
}
