//! gradfem's GPU backend: device execution of assembled finite-element systems.
//!
//! What runs on the device today is the steady, linear thermal field on one kind of volume
//! cell (Tet4 in closed form; Tet10, Hex8, Hex20 and Hex27 by the CPU model's quadrature) with
//! a per-element conductivity, fixed temperatures and a volume heat source: element matrices,
//! deterministic assembly into CSR by gathering through the CPU assembly's slot table,
//! Jacobi-preconditioned CG (host loop, device SpMV / dot / axpy kernels), the adjoint solve
//! with the same operator and the per-element gradient dJ/dk_e = −λ_eᵀ K_e⁰ T_e. The
//! objective and ∂J/∂T are evaluated on the host from the downloaded temperature.
//!
//! - [`kernels`]: the CUDA C sources, compiled at run time by NVRTC.
//! - [`twin`]: a CPU twin of every kernel (same arithmetic, same order) and [`twin::CpuTwin`],
//!   the pipeline on the CPU.
//! - [`backend`]: the pipeline written once over a [`backend::Backend`].
//! - `cuda` (feature `cuda`): the CUDA backend over cudarc, which loads `libcuda.so.1` and
//!   `libnvrtc.so.13` at run time, so the crate builds without a CUDA toolkit.

pub mod backend;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod error;
pub mod kernels;
pub mod system;
pub mod twin;

pub use backend::{Backend, CgInfo, CgParams, ThermalPipeline};
pub use error::GpuError;
pub use system::ThermalSystem;

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

/// The result of one forward solve + adjoint gradient on a backend.
#[derive(Clone, Debug, PartialEq)]
pub struct ThermalRun {
    /// What ran the kernels (`cpu-twin` or `cuda (<device name>)`).
    pub backend: String,
    /// Nodal temperature.
    pub temperature: Vec<f64>,
    /// The objective J.
    pub objective: f64,
    /// dJ/dk_e per element (model element order).
    pub dj_dk: Vec<f64>,
    /// The forward CG.
    pub forward_cg: CgInfo,
    /// The adjoint CG.
    pub adjoint_cg: CgInfo,
    /// Seconds: setting up the backend (device: compiling and uploading), forward (assembly +
    /// solve + download of T), objective on the host, adjoint + gradient.
    pub setup_s: f64,
    /// See [`setup_s`](Self::setup_s).
    pub forward_s: f64,
    /// See [`setup_s`](Self::setup_s).
    pub objective_s: f64,
    /// See [`setup_s`](Self::setup_s).
    pub gradient_s: f64,
}

/// Forward solve and gradient of `system` with conductivities `k` on `backend`; `objective`
/// maps the nodal temperature to (J, ∂J/∂T per node) on the host.
pub fn run_thermal<B: Backend>(
    backend: impl FnOnce() -> Result<B, GpuError>,
    k: &[f64],
    params: &CgParams,
    objective: impl FnOnce(&[f64]) -> Result<(f64, Vec<f64>), GpuError>,
) -> Result<ThermalRun, GpuError> {
    let t0 = std::time::Instant::now();
    let mut pipeline = ThermalPipeline::new(backend()?)?;
    let setup_s = t0.elapsed().as_secs_f64();
    let t1 = std::time::Instant::now();
    let (temperature, forward_cg) = pipeline.forward(k, params)?;
    let forward_s = t1.elapsed().as_secs_f64();
    let t2 = std::time::Instant::now();
    let (value, t_bar) = objective(&temperature)?;
    let objective_s = t2.elapsed().as_secs_f64();
    let t3 = std::time::Instant::now();
    let (dj_dk, adjoint_cg) = pipeline.gradient(&t_bar, params)?;
    let gradient_s = t3.elapsed().as_secs_f64();
    Ok(ThermalRun {
        backend: pipeline.backend().name(),
        temperature,
        objective: value,
        dj_dk,
        forward_cg,
        adjoint_cg,
        setup_s,
        forward_s,
        objective_s,
        gradient_s,
    })
}

/// [`run_thermal`] on `device`: the CPU twins for [`Device::Cpu`], the GPU for
/// [`Device::Cuda`] (an error naming the reason when this build or machine cannot).
pub fn run_thermal_on(
    device: Device,
    system: &ThermalSystem,
    k: &[f64],
    params: &CgParams,
    objective: impl FnOnce(&[f64]) -> Result<(f64, Vec<f64>), GpuError>,
) -> Result<ThermalRun, GpuError> {
    match device {
        Device::Cpu => run_thermal(|| Ok(twin::CpuTwin::new(system)), k, params, objective),
        Device::Cuda => {
            #[cfg(feature = "cuda")]
            {
                run_thermal(|| cuda::CudaBackend::new(system), k, params, objective)
            }
            #[cfg(not(feature = "cuda"))]
            {
                let _ = (system, k, params, objective);
                Err(GpuError::NotBuilt)
            }
        }
    }
}
