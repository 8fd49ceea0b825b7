//! The CUDA backend (feature `cuda`): cudarc with dynamic loading, kernels compiled by NVRTC.
//!
//! cudarc panics when a library it loads is missing, so every entry point first checks that
//! the driver (`libcuda.so.1`) or NVRTC (`libnvrtc.so.13`) loads, and the calls that reach the
//! driver run under `catch_unwind`: a missing library, symbol or device is a [`GpuError`].

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DeviceRepr, LaunchArgs, LaunchConfig,
    PushKernelArg, ValidAsZeroBits,
};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx, compile_ptx_with_opts};

use crate::backend::Backend;
use crate::error::GpuError;
use crate::kernels::{self, BLOCK, KernelSource, NVRTC_OPTIONS, dot_blocks};
use crate::system::{DeviceSystem, Physics};
use crate::twin::{no_element_kernels, no_quadrature};
use gradfem_solvers::sparse::CsrMatrix;

/// Run `f`, turning a panic inside cudarc into a [`GpuError::Driver`].
fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, GpuError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let message = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic inside cudarc".into());
        GpuError::Driver { what: what.into(), message }
    })
}

fn driver_err(what: &str) -> impl FnOnce(cudarc::driver::DriverError) -> GpuError + '_ {
    move |e| GpuError::Driver { what: what.into(), message: e.to_string() }
}

/// Whether the CUDA driver library loads.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library under its candidate names.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether the NVRTC library loads.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library under its candidate names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Compile one program with NVRTC (no GPU needed); checks that every kernel it should define
/// is in the PTX.
pub fn compile(program: &KernelSource) -> Result<Ptx, GpuError> {
    if !nvrtc_present() {
        return Err(GpuError::NoNvrtc);
    }
    let opts = CompileOptions {
        options: NVRTC_OPTIONS.iter().map(|s| s.to_string()).collect(),
        name: Some(program.name.into()),
        ..Default::default()
    };
    let ptx = guarded("compiling with NVRTC", || compile_ptx_with_opts(program.source, opts))?
        .map_err(|e| GpuError::Compile {
            program: program.name.into(),
            log: match e {
                CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
                other => format!("{other:?}"),
            },
        })?;
    let text = ptx.to_src();
    for f in program.functions {
        if !text.contains(&format!(".entry {f}(")) {
            return Err(GpuError::Compile {
                program: program.name.into(),
                log: format!("the PTX has no kernel `{f}`"),
            });
        }
    }
    Ok(ptx)
}

/// The device found by [`probe`].
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceInfo {
    /// Number of CUDA devices.
    pub count: usize,
    /// Name of device 0, the one used.
    pub name: String,
}

/// Check that the driver loads and reports a device, without panicking.
pub fn probe() -> Result<DeviceInfo, GpuError> {
    if !driver_present() {
        return Err(GpuError::NoDriver);
    }
    let count = guarded("initialising the driver", CudaContext::device_count)?
        .map_err(|e| GpuError::NoDevice(format!("the driver answered {e}")))?;
    if count <= 0 {
        return Err(GpuError::NoDevice("the driver reports no device".into()));
    }
    let ctx = guarded("opening device 0", || CudaContext::new(0))?
        .map_err(|e| GpuError::NoDevice(format!("device 0 could not be opened: {e}")))?;
    let name = ctx.name().map_err(driver_err("reading the device name"))?;
    Ok(DeviceInfo { count: count as usize, name })
}

/// A device vector of `len` entries (its buffer holds at least one, since the driver does not
/// allocate zero bytes).
pub struct DeviceVec<T> {
    buf: CudaSlice<T>,
    len: usize,
}

struct Kernels {
    element_matrices: CudaFunction,
    conductivity_gradient: CudaFunction,
    csr_gather: CudaFunction,
    rhs_gather: CudaFunction,
    inverse_diagonal: CudaFunction,
    spmv: CudaFunction,
    dot_partial: CudaFunction,
    dot_finish: CudaFunction,
    axpy: CudaFunction,
    xpay: CudaFunction,
    jacobi: CudaFunction,
    to_nodal: CudaFunction,
    quad_element_matrices: CudaFunction,
    quad_conductivity_gradient: CudaFunction,
    elastic_element_matrices: CudaFunction,
    elastic_young_gradient: CudaFunction,
    matrix_spmv: CudaFunction,
    scale_diag: CudaFunction,
    residual_and_scale: CudaFunction,
    cheb_step: CudaFunction,
    residual_update: CudaFunction,
    fill_zero: CudaFunction,
}

/// A CSR matrix on the device.
pub struct DeviceCsr {
    n_rows: usize,
    row_ptr: DeviceVec<u32>,
    col_idx: DeviceVec<u32>,
    values: DeviceVec<f64>,
}

/// The pipeline's kernels on CUDA device 0, with the system's constant arrays uploaded once.
pub struct CudaBackend {
    sys: DeviceSystem,
    device: String,
    stream: Arc<CudaStream>,
    k: Kernels,
    coords: DeviceVec<f64>,
    nodes: DeviceVec<u32>,
    /// The thermal source or the elastic Poisson's ratio, per element.
    element_data: DeviceVec<f64>,
    load: DeviceVec<f64>,
    /// The coefficient-free matrix part (empty without one).
    base: DeviceVec<f64>,
    /// The elastic thermal strain's α and T_ref per element and nodal temperature (empty
    /// without one).
    th_alpha: DeviceVec<f64>,
    th_t_ref: DeviceVec<f64>,
    th_temperature: DeviceVec<f64>,
    fixed: DeviceVec<f64>,
    dof: DeviceVec<i32>,
    row_ptr: DeviceVec<u32>,
    col_idx: DeviceVec<u32>,
    mg_ptr: DeviceVec<u32>,
    mg_idx: DeviceVec<u32>,
    rg_ptr: DeviceVec<u32>,
    rg_idx: DeviceVec<u32>,
    partial: DeviceVec<f64>,
    dot_out: DeviceVec<f64>,
    /// The reference quadrature of the quadrature kernels (empty for Tet4).
    q_weights: DeviceVec<f64>,
    q_shape: DeviceVec<f64>,
    q_grad: DeviceVec<f64>,
}

fn cfg(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(BLOCK as usize) as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn launch(what: &str, args: &mut LaunchArgs<'_>, c: LaunchConfig) -> Result<(), GpuError> {
    // SAFETY: every launch passes the argument list of its kernel's CUDA signature (checked
    // by the GPU tests against the twins), and the sizes bound every index the kernel reads.
    unsafe { args.launch(c) }.map(|_| ()).map_err(driver_err(what))
}

impl CudaBackend {
    /// Compile the kernels, open device 0 and upload `system`.
    pub fn new(system: &DeviceSystem) -> Result<Self, GpuError> {
        let info = probe()?;
        let ptx: Vec<Ptx> = kernels::ALL.iter().map(compile).collect::<Result<_, _>>()?;
        let ctx = guarded("opening device 0", || CudaContext::new(0))?
            .map_err(driver_err("opening device 0"))?;
        let stream = ctx.default_stream();
        let mut modules = Vec::new();
        for (p, src) in ptx.into_iter().zip(kernels::ALL) {
            modules.push(
                guarded("loading a module", || ctx.load_module(p))?
                    .map_err(driver_err(&format!("loading {}", src.name)))?,
            );
        }
        let f = |m: usize, name: &str| {
            modules[m].load_function(name).map_err(driver_err(&format!("finding {name}")))
        };
        let k = Kernels {
            element_matrices: f(0, "tet4_element_matrices")?,
            conductivity_gradient: f(0, "tet4_conductivity_gradient")?,
            quad_element_matrices: f(3, "quad_element_matrices")?,
            quad_conductivity_gradient: f(3, "quad_conductivity_gradient")?,
            elastic_element_matrices: f(4, "elastic_element_matrices")?,
            elastic_young_gradient: f(4, "elastic_young_gradient")?,
            matrix_spmv: f(5, "matrix_spmv")?,
            scale_diag: f(5, "scale_diag")?,
            residual_and_scale: f(5, "residual_and_scale")?,
            cheb_step: f(5, "cheb_step")?,
            residual_update: f(5, "residual_update")?,
            fill_zero: f(5, "fill_zero")?,
            csr_gather: f(1, "csr_gather")?,
            rhs_gather: f(1, "rhs_gather")?,
            inverse_diagonal: f(1, "csr_inverse_diagonal")?,
            spmv: f(2, "csr_spmv")?,
            dot_partial: f(2, "dot_partial")?,
            dot_finish: f(2, "dot_finish")?,
            axpy: f(2, "axpy")?,
            xpay: f(2, "xpay")?,
            jacobi: f(2, "jacobi")?,
            to_nodal: f(2, "to_nodal")?,
        };
        let s = system;
        let thermal = match &s.physics {
            Physics::Elastic { thermal: Some(t), .. } => Some(t),
            _ => None,
        };
        let up_u32 = |v: &[u32]| upload_any(&stream, v);
        Ok(CudaBackend {
            coords: upload_any(&stream, &s.coords)?,
            nodes: up_u32(&s.nodes)?,
            element_data: upload_any(
                &stream,
                match &s.physics {
                    Physics::Thermal { source } => source,
                    Physics::Elastic { poisson, .. } => poisson,
                    Physics::Matrix => &[],
                },
            )?,
            load: upload_any(&stream, &s.load)?,
            base: upload_any(&stream, s.base_values.as_deref().unwrap_or(&[]))?,
            th_alpha: upload_any(&stream, thermal.map_or(&[][..], |t| &t.alpha))?,
            th_t_ref: upload_any(&stream, thermal.map_or(&[][..], |t| &t.t_ref))?,
            th_temperature: upload_any(&stream, thermal.map_or(&[][..], |t| &t.temperature))?,
            fixed: upload_any(&stream, &s.fixed)?,
            dof: upload_any(&stream, &s.dof_of_value)?,
            row_ptr: up_u32(&s.row_ptr)?,
            col_idx: up_u32(&s.col_idx)?,
            mg_ptr: up_u32(&s.matrix_gather_ptr)?,
            mg_idx: up_u32(&s.matrix_gather_idx)?,
            rg_ptr: up_u32(&s.rhs_gather_ptr)?,
            rg_idx: up_u32(&s.rhs_gather_idx)?,
            partial: zeros_any(&stream, dot_blocks(s.n_unknowns.max(s.n_values())))?,
            dot_out: zeros_any(&stream, 1)?,
            q_weights: upload_any(&stream, s.quadrature.as_ref().map_or(&[][..], |q| &q.weights))?,
            q_shape: upload_any(&stream, s.quadrature.as_ref().map_or(&[][..], |q| &q.shape))?,
            q_grad: upload_any(
                &stream,
                &s.quadrature.as_ref().map_or(Vec::new(), |q| q.grad.concat()),
            )?,
            sys: system.clone(),
            device: info.name,
            stream,
            k,
        })
    }
}

impl CudaBackend {
    /// 1 when the elastic system has a thermal strain (the kernels' `has_thermal`).
    fn has_thermal(&self) -> i32 {
        matches!(self.sys.physics, Physics::Elastic { thermal: Some(_), .. }) as i32
    }
}

fn upload_any<T: DeviceRepr + ValidAsZeroBits + Copy>(
    stream: &Arc<CudaStream>,
    host: &[T],
) -> Result<DeviceVec<T>, GpuError> {
    if host.is_empty() {
        return zeros_any(stream, 0);
    }
    let buf = stream.clone_htod(host).map_err(driver_err("copying to the device"))?;
    Ok(DeviceVec { buf, len: host.len() })
}

fn zeros_any<T: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    len: usize,
) -> Result<DeviceVec<T>, GpuError> {
    let buf = stream.alloc_zeros::<T>(len.max(1)).map_err(driver_err("allocating"))?;
    Ok(DeviceVec { buf, len })
}

fn same_len(what: &str, a: usize, b: usize) -> Result<(), GpuError> {
    if a == b {
        Ok(())
    } else {
        Err(GpuError::Input(format!("{what}: vectors of {a} and {b} entries")))
    }
}

impl Backend for CudaBackend {
    type Vector = DeviceVec<f64>;
    type Matrix = DeviceCsr;

    fn upload_matrix(&mut self, a: &CsrMatrix) -> Result<DeviceCsr, GpuError> {
        if u32::try_from(a.nnz()).is_err() || u32::try_from(a.n_rows).is_err() {
            return Err(GpuError::Unsupported(format!(
                "a matrix of {} rows and {} entries does not fit the kernels' 32-bit indices",
                a.n_rows,
                a.nnz()
            )));
        }
        let rp: Vec<u32> = a.row_ptr.iter().map(|&v| v as u32).collect();
        Ok(DeviceCsr {
            n_rows: a.n_rows,
            row_ptr: upload_any(&self.stream, &rp)?,
            col_idx: upload_any(&self.stream, &a.col_idx)?,
            values: upload_any(&self.stream, &a.values)?,
        })
    }
    fn write(&mut self, host: &[f64], v: &mut Self::Vector) -> Result<(), GpuError> {
        same_len("write", host.len(), v.len)?;
        if host.is_empty() {
            return Ok(());
        }
        self.stream.memcpy_htod(host, &mut v.buf).map_err(driver_err("copying to the device"))
    }
    fn fill_zero(&mut self, x: &mut Self::Vector) -> Result<(), GpuError> {
        let n = x.len;
        if n == 0 {
            return Ok(());
        }
        let n32 = n as u32;
        let mut a = self.stream.launch_builder(&self.k.fill_zero);
        a.arg(&n32).arg(&mut x.buf);
        launch("fill_zero", &mut a, cfg(n))
    }
    fn matrix_spmv(
        &mut self,
        m: &DeviceCsr,
        x: &Self::Vector,
        y: &mut Self::Vector,
        accumulate: bool,
    ) -> Result<(), GpuError> {
        same_len("matrix_spmv", m.n_rows, y.len)?;
        let n = y.len;
        if n == 0 {
            return Ok(());
        }
        let (n32, acc) = (n as u32, accumulate as i32);
        let mut a = self.stream.launch_builder(&self.k.matrix_spmv);
        a.arg(&n32).arg(&m.row_ptr.buf).arg(&m.col_idx.buf).arg(&m.values.buf);
        a.arg(&x.buf).arg(&mut y.buf).arg(&acc);
        launch("matrix_spmv", &mut a, cfg(n))
    }
    fn scale_diag(
        &mut self,
        c: f64,
        inv: &Self::Vector,
        r: &Self::Vector,
        d: &mut Self::Vector,
    ) -> Result<(), GpuError> {
        same_len("scale_diag", r.len, d.len)?;
        let n = d.len;
        if n == 0 {
            return Ok(());
        }
        let n32 = n as u32;
        let mut a = self.stream.launch_builder(&self.k.scale_diag);
        a.arg(&n32).arg(&c).arg(&inv.buf).arg(&r.buf).arg(&mut d.buf);
        launch("scale_diag", &mut a, cfg(n))
    }
    fn residual_and_scale(
        &mut self,
        m: &DeviceCsr,
        b: &Self::Vector,
        x: &Self::Vector,
        r: &mut Self::Vector,
        d: &mut Self::Vector,
        inv: &Self::Vector,
        c: f64,
    ) -> Result<(), GpuError> {
        same_len("residual_and_scale", m.n_rows, r.len)?;
        let n = r.len;
        if n == 0 {
            return Ok(());
        }
        let n32 = n as u32;
        let mut a = self.stream.launch_builder(&self.k.residual_and_scale);
        a.arg(&n32).arg(&m.row_ptr.buf).arg(&m.col_idx.buf).arg(&m.values.buf);
        a.arg(&b.buf).arg(&x.buf).arg(&mut r.buf).arg(&mut d.buf).arg(&inv.buf).arg(&c);
        launch("residual_and_scale", &mut a, cfg(n))
    }
    fn cheb_step(
        &mut self,
        m: &DeviceCsr,
        inv: &Self::Vector,
        d: &Self::Vector,
        d_new: &mut Self::Vector,
        r: &mut Self::Vector,
        x: &mut Self::Vector,
        alpha: f64,
        gamma: f64,
    ) -> Result<(), GpuError> {
        same_len("cheb_step", m.n_rows, r.len)?;
        let n = r.len;
        if n == 0 {
            return Ok(());
        }
        let n32 = n as u32;
        let mut a = self.stream.launch_builder(&self.k.cheb_step);
        a.arg(&n32).arg(&m.row_ptr.buf).arg(&m.col_idx.buf).arg(&m.values.buf);
        a.arg(&inv.buf).arg(&d.buf).arg(&mut d_new.buf).arg(&mut r.buf).arg(&mut x.buf);
        a.arg(&alpha).arg(&gamma);
        launch("cheb_step", &mut a, cfg(n))
    }
    fn residual_update(
        &mut self,
        m: &DeviceCsr,
        d: &Self::Vector,
        r: &mut Self::Vector,
        x: &mut Self::Vector,
    ) -> Result<(), GpuError> {
        same_len("residual_update", m.n_rows, r.len)?;
        let n = r.len;
        if n == 0 {
            return Ok(());
        }
        let n32 = n as u32;
        let mut a = self.stream.launch_builder(&self.k.residual_update);
        a.arg(&n32).arg(&m.row_ptr.buf).arg(&m.col_idx.buf).arg(&m.values.buf);
        a.arg(&d.buf).arg(&mut r.buf).arg(&mut x.buf);
        launch("residual_update", &mut a, cfg(n))
    }

    fn name(&self) -> String {
        format!("cuda ({})", self.device)
    }
    fn system(&self) -> &DeviceSystem {
        &self.sys
    }
    fn zeros(&mut self, n: usize) -> Result<Self::Vector, GpuError> {
        zeros_any(&self.stream, n)
    }
    fn upload(&mut self, host: &[f64]) -> Result<Self::Vector, GpuError> {
        upload_any(&self.stream, host)
    }
    fn download(&mut self, v: &Self::Vector) -> Result<Vec<f64>, GpuError> {
        let mut all = self.stream.clone_dtoh(&v.buf).map_err(driver_err("copying to the host"))?;
        self.stream.synchronize().map_err(driver_err("waiting for the device"))?;
        all.truncate(v.len);
        Ok(all)
    }
    fn copy(&mut self, src: &Self::Vector, dst: &mut Self::Vector) -> Result<(), GpuError> {
        same_len("copy", src.len, dst.len)?;
        self.stream.memcpy_dtod(&src.buf, &mut dst.buf).map_err(driver_err("copying a vector"))
    }
    fn element_matrices(
        &mut self,
        coefficient: &Self::Vector,
        ke: &mut Self::Vector,
        re: &mut Self::Vector,
    ) -> Result<(), GpuError> {
        let n = coefficient.len;
        if n == 0 {
            return Ok(());
        }
        let n32 = n as u32;
        let nn = self.sys.nodes_per_element as u32;
        match (&self.sys.physics, &self.sys.quadrature) {
            (Physics::Thermal { .. }, None) => {
                let mut a = self.stream.launch_builder(&self.k.element_matrices);
                a.arg(&n32).arg(&self.coords.buf).arg(&self.nodes.buf).arg(&coefficient.buf);
                a.arg(&self.element_data.buf).arg(&self.fixed.buf);
                a.arg(&mut ke.buf).arg(&mut re.buf);
                launch("tet4_element_matrices", &mut a, cfg(n))
            }
            (Physics::Thermal { .. }, Some(q)) => {
                let nq = q.n_points as u32;
                let mut a = self.stream.launch_builder(&self.k.quad_element_matrices);
                a.arg(&n32).arg(&nn).arg(&nq).arg(&self.coords.buf).arg(&self.nodes.buf);
                a.arg(&self.q_weights.buf).arg(&self.q_shape.buf).arg(&self.q_grad.buf);
                a.arg(&coefficient.buf).arg(&self.element_data.buf).arg(&self.fixed.buf);
                a.arg(&mut ke.buf).arg(&mut re.buf);
                launch("quad_element_matrices", &mut a, cfg(n))
            }
            (Physics::Elastic { .. }, q) => {
                let nq = q.as_ref().ok_or_else(no_quadrature)?.n_points as u32;
                let has_thermal = self.has_thermal();
                let mut a = self.stream.launch_builder(&self.k.elastic_element_matrices);
                a.arg(&n32).arg(&nn).arg(&nq).arg(&self.coords.buf).arg(&self.nodes.buf);
                a.arg(&self.q_weights.buf).arg(&self.q_shape.buf).arg(&self.q_grad.buf);
                a.arg(&coefficient.buf).arg(&self.element_data.buf).arg(&self.fixed.buf);
                a.arg(&has_thermal).arg(&self.th_alpha.buf).arg(&self.th_t_ref.buf);
                a.arg(&self.th_temperature.buf).arg(&mut ke.buf).arg(&mut re.buf);
                launch("elastic_element_matrices", &mut a, cfg(n))
            }
            (Physics::Matrix, _) => Err(no_element_kernels()),
        }
    }
    fn assemble_matrix(
        &mut self,
        ke: &Self::Vector,
        values: &mut Self::Vector,
    ) -> Result<(), GpuError> {
        let n = values.len;
        if n == 0 {
            return Ok(());
        }
        let n32 = n as u32;
        let has_base = self.sys.base_values.is_some() as i32;
        let mut a = self.stream.launch_builder(&self.k.csr_gather);
        a.arg(&n32).arg(&self.mg_ptr.buf).arg(&self.mg_idx.buf).arg(&ke.buf);
        a.arg(&self.base.buf).arg(&has_base).arg(&mut values.buf);
        launch("csr_gather", &mut a, cfg(n))
    }
    fn assemble_rhs(&mut self, re: &Self::Vector, b: &mut Self::Vector) -> Result<(), GpuError> {
        let n = b.len;
        if n == 0 {
            return Ok(());
        }
        let n32 = n as u32;
        let mut a = self.stream.launch_builder(&self.k.rhs_gather);
        a.arg(&n32).arg(&self.rg_ptr.buf).arg(&self.rg_idx.buf).arg(&re.buf);
        a.arg(&self.load.buf).arg(&mut b.buf);
        launch("rhs_gather", &mut a, cfg(n))
    }
    fn inverse_diagonal(
        &mut self,
        values: &Self::Vector,
        inv: &mut Self::Vector,
    ) -> Result<(), GpuError> {
        let n = inv.len;
        if n == 0 {
            return Ok(());
        }
        let n32 = n as u32;
        let mut a = self.stream.launch_builder(&self.k.inverse_diagonal);
        a.arg(&n32).arg(&self.row_ptr.buf).arg(&self.col_idx.buf).arg(&values.buf);
        a.arg(&mut inv.buf);
        launch("csr_inverse_diagonal", &mut a, cfg(n))
    }
    fn spmv(
        &mut self,
        values: &Self::Vector,
        x: &Self::Vector,
        y: &mut Self::Vector,
    ) -> Result<(), GpuError> {
        let n = y.len;
        same_len("spmv", x.len, n)?;
        if n == 0 {
            return Ok(());
        }
        let n32 = n as u32;
        let mut a = self.stream.launch_builder(&self.k.spmv);
        a.arg(&n32).arg(&self.row_ptr.buf).arg(&self.col_idx.buf).arg(&values.buf);
        a.arg(&x.buf).arg(&mut y.buf);
        launch("csr_spmv", &mut a, cfg(n))
    }
    fn dot(&mut self, x: &Self::Vector, y: &Self::Vector) -> Result<f64, GpuError> {
        same_len("dot", x.len, y.len)?;
        let n = x.len;
        if n == 0 {
            return Ok(0.0);
        }
        let blocks = dot_blocks(n);
        if blocks > self.partial.len {
            self.partial = zeros_any(&self.stream, blocks)?;
        }
        let (n32, m32) = (n as u32, blocks as u32);
        let mut a = self.stream.launch_builder(&self.k.dot_partial);
        a.arg(&n32).arg(&x.buf).arg(&y.buf).arg(&mut self.partial.buf);
        let c =
            LaunchConfig { grid_dim: (m32, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 };
        launch("dot_partial", &mut a, c)?;
        let mut a = self.stream.launch_builder(&self.k.dot_finish);
        a.arg(&m32).arg(&self.partial.buf).arg(&mut self.dot_out.buf);
        let one = LaunchConfig { grid_dim: (1, 1, 1), ..c };
        launch("dot_finish", &mut a, one)?;
        let out = self.stream.clone_dtoh(&self.dot_out.buf).map_err(driver_err("reading a dot"))?;
        self.stream.synchronize().map_err(driver_err("waiting for the device"))?;
        Ok(out[0])
    }
    fn axpy(&mut self, alpha: f64, x: &Self::Vector, y: &mut Self::Vector) -> Result<(), GpuError> {
        same_len("axpy", x.len, y.len)?;
        let n = y.len;
        if n == 0 {
            return Ok(());
        }
        let n32 = n as u32;
        let mut a = self.stream.launch_builder(&self.k.axpy);
        a.arg(&n32).arg(&alpha).arg(&x.buf).arg(&mut y.buf);
        launch("axpy", &mut a, cfg(n))
    }
    fn xpay(&mut self, x: &Self::Vector, alpha: f64, y: &mut Self::Vector) -> Result<(), GpuError> {
        same_len("xpay", x.len, y.len)?;
        let n = y.len;
        if n == 0 {
            return Ok(());
        }
        let n32 = n as u32;
        let mut a = self.stream.launch_builder(&self.k.xpay);
        a.arg(&n32).arg(&x.buf).arg(&alpha).arg(&mut y.buf);
        launch("xpay", &mut a, cfg(n))
    }
    fn jacobi(
        &mut self,
        inv: &Self::Vector,
        r: &Self::Vector,
        z: &mut Self::Vector,
    ) -> Result<(), GpuError> {
        same_len("jacobi", r.len, z.len)?;
        let n = z.len;
        if n == 0 {
            return Ok(());
        }
        let n32 = n as u32;
        let mut a = self.stream.launch_builder(&self.k.jacobi);
        a.arg(&n32).arg(&inv.buf).arg(&r.buf).arg(&mut z.buf);
        launch("jacobi", &mut a, cfg(n))
    }
    fn to_nodal(
        &mut self,
        u: &Self::Vector,
        fixed: &Self::Vector,
        out: &mut Self::Vector,
    ) -> Result<(), GpuError> {
        let n = out.len;
        if n == 0 {
            return Ok(());
        }
        let n32 = n as u32;
        let mut a = self.stream.launch_builder(&self.k.to_nodal);
        a.arg(&n32).arg(&self.dof.buf).arg(&u.buf).arg(&fixed.buf).arg(&mut out.buf);
        launch("to_nodal", &mut a, cfg(n))
    }
    fn coefficient_gradient(
        &mut self,
        solution: &Self::Vector,
        lambda: &Self::Vector,
        out: &mut Self::Vector,
    ) -> Result<(), GpuError> {
        let n = out.len;
        if n == 0 {
            return Ok(());
        }
        let n32 = n as u32;
        let nn = self.sys.nodes_per_element as u32;
        match (&self.sys.physics, &self.sys.quadrature) {
            (Physics::Thermal { .. }, None) => {
                let mut a = self.stream.launch_builder(&self.k.conductivity_gradient);
                a.arg(&n32).arg(&self.coords.buf).arg(&self.nodes.buf).arg(&solution.buf);
                a.arg(&lambda.buf).arg(&mut out.buf);
                launch("tet4_conductivity_gradient", &mut a, cfg(n))
            }
            (Physics::Thermal { .. }, Some(q)) => {
                let nq = q.n_points as u32;
                let mut a = self.stream.launch_builder(&self.k.quad_conductivity_gradient);
                a.arg(&n32).arg(&nn).arg(&nq).arg(&self.coords.buf).arg(&self.nodes.buf);
                a.arg(&self.q_weights.buf).arg(&self.q_grad.buf).arg(&solution.buf);
                a.arg(&lambda.buf).arg(&mut out.buf);
                launch("quad_conductivity_gradient", &mut a, cfg(n))
            }
            (Physics::Elastic { .. }, q) => {
                let nq = q.as_ref().ok_or_else(no_quadrature)?.n_points as u32;
                let has_thermal = self.has_thermal();
                let mut a = self.stream.launch_builder(&self.k.elastic_young_gradient);
                a.arg(&n32).arg(&nn).arg(&nq).arg(&self.coords.buf).arg(&self.nodes.buf);
                a.arg(&self.q_weights.buf).arg(&self.q_shape.buf).arg(&self.q_grad.buf);
                a.arg(&self.element_data.buf).arg(&has_thermal).arg(&self.th_alpha.buf);
                a.arg(&self.th_t_ref.buf).arg(&self.th_temperature.buf).arg(&solution.buf);
                a.arg(&lambda.buf).arg(&mut out.buf);
                launch("elastic_young_gradient", &mut a, cfg(n))
            }
            (Physics::Matrix, _) => Err(no_element_kernels()),
        }
    }
}
