//! The device pipeline of a steady, linear field problem (thermal or elastic), written once
//! over a [`Backend`]: the
//! CPU twins ([`crate::twin::CpuTwin`]) or the CUDA kernels (`crate::cuda::CudaBackend`, with
//! the `cuda` feature). The host loop (Jacobi-preconditioned CG, the order of the kernels) is
//! this one function for both, so a device run and its twin do the same operations.

use crate::error::GpuError;
use crate::system::DeviceSystem;
use gradfem_solvers::amg::{AmgHierarchy, AmgParams, HierarchyExport};
use gradfem_solvers::sparse::CsrMatrix;

use crate::amg::DeviceAmg;

/// The kernels of the pipeline over vectors of some memory (host or device).
pub trait Backend {
    /// A vector of f64 in the backend's memory.
    type Vector;
    /// A CSR matrix in the backend's memory (the AMG hierarchy's operators and transfers).
    type Matrix;

    /// What runs the kernels, for logs and reports.
    fn name(&self) -> String;
    /// The system the backend holds.
    fn system(&self) -> &DeviceSystem;
    /// A new vector of `n` zeros.
    fn zeros(&mut self, n: usize) -> Result<Self::Vector, GpuError>;
    /// A new vector with the values of `host`.
    fn upload(&mut self, host: &[f64]) -> Result<Self::Vector, GpuError>;
    /// The values of `v`, on the host.
    fn download(&mut self, v: &Self::Vector) -> Result<Vec<f64>, GpuError>;
    /// `dst` = `src` (same length).
    fn copy(&mut self, src: &Self::Vector, dst: &mut Self::Vector) -> Result<(), GpuError>;
    /// Element matrices `ke` (m² per element, m the local unknowns of an element) and
    /// residuals at zero free unknowns `re` (m per element) for the per-element coefficients
    /// `coefficient` (k_e or E_e).
    fn element_matrices(
        &mut self,
        coefficient: &Self::Vector,
        ke: &mut Self::Vector,
        re: &mut Self::Vector,
    ) -> Result<(), GpuError>;
    /// CSR values gathered from the element matrices.
    fn assemble_matrix(
        &mut self,
        ke: &Self::Vector,
        values: &mut Self::Vector,
    ) -> Result<(), GpuError>;
    /// The right-hand side b = −R(u_free = 0): the system's coefficient-free load minus the
    /// gathered element residuals.
    fn assemble_rhs(&mut self, re: &Self::Vector, b: &mut Self::Vector) -> Result<(), GpuError>;
    /// 1 / diagonal of the matrix.
    fn inverse_diagonal(
        &mut self,
        values: &Self::Vector,
        inv: &mut Self::Vector,
    ) -> Result<(), GpuError>;
    /// y = A x.
    fn spmv(
        &mut self,
        values: &Self::Vector,
        x: &Self::Vector,
        y: &mut Self::Vector,
    ) -> Result<(), GpuError>;
    /// xᵀy, by the fixed-order block reduction.
    fn dot(&mut self, x: &Self::Vector, y: &Self::Vector) -> Result<f64, GpuError>;
    /// y = y + a x.
    fn axpy(&mut self, a: f64, x: &Self::Vector, y: &mut Self::Vector) -> Result<(), GpuError>;
    /// y = x + a y.
    fn xpay(&mut self, x: &Self::Vector, a: f64, y: &mut Self::Vector) -> Result<(), GpuError>;
    /// z = inv ∘ r.
    fn jacobi(
        &mut self,
        inv: &Self::Vector,
        r: &Self::Vector,
        z: &mut Self::Vector,
    ) -> Result<(), GpuError>;
    /// Nodal values: the unknowns `u` at free values, `fixed` at constrained ones.
    fn to_nodal(
        &mut self,
        u: &Self::Vector,
        fixed: &Self::Vector,
        out: &mut Self::Vector,
    ) -> Result<(), GpuError>;
    /// A matrix with the pattern and values of `a`.
    fn upload_matrix(&mut self, a: &CsrMatrix) -> Result<Self::Matrix, GpuError>;
    /// `v` = `host` (same length).
    fn write(&mut self, host: &[f64], v: &mut Self::Vector) -> Result<(), GpuError>;
    /// x = 0.
    fn fill_zero(&mut self, x: &mut Self::Vector) -> Result<(), GpuError>;
    /// y = A x, or y = y + A x when `accumulate`.
    fn matrix_spmv(
        &mut self,
        a: &Self::Matrix,
        x: &Self::Vector,
        y: &mut Self::Vector,
        accumulate: bool,
    ) -> Result<(), GpuError>;
    /// d = c · inv ∘ r.
    fn scale_diag(
        &mut self,
        c: f64,
        inv: &Self::Vector,
        r: &Self::Vector,
        d: &mut Self::Vector,
    ) -> Result<(), GpuError>;
    /// r = b − A x; d = c · inv ∘ r.
    #[allow(clippy::too_many_arguments)]
    fn residual_and_scale(
        &mut self,
        a: &Self::Matrix,
        b: &Self::Vector,
        x: &Self::Vector,
        r: &mut Self::Vector,
        d: &mut Self::Vector,
        inv: &Self::Vector,
        c: f64,
    ) -> Result<(), GpuError>;
    /// One Chebyshev step: r = r − A d; x = x + d; d_new = α d + γ · inv ∘ r.
    #[allow(clippy::too_many_arguments)]
    fn cheb_step(
        &mut self,
        a: &Self::Matrix,
        inv: &Self::Vector,
        d: &Self::Vector,
        d_new: &mut Self::Vector,
        r: &mut Self::Vector,
        x: &mut Self::Vector,
        alpha: f64,
        gamma: f64,
    ) -> Result<(), GpuError>;
    /// r = r − A d; x = x + d.
    fn residual_update(
        &mut self,
        a: &Self::Matrix,
        d: &Self::Vector,
        r: &mut Self::Vector,
        x: &mut Self::Vector,
    ) -> Result<(), GpuError>;
    /// dJ/dc_e = −λ_eᵀ K_e⁰ u_e per element (c the coefficient, K_e⁰ the element matrix at
    /// c = 1), from the nodal solution u and adjoint λ.
    fn coefficient_gradient(
        &mut self,
        solution: &Self::Vector,
        lambda: &Self::Vector,
        out: &mut Self::Vector,
    ) -> Result<(), GpuError>;
}

/// The preconditioner of the device CG.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Preconditioner {
    /// z = D⁻¹ r.
    #[default]
    Jacobi,
    /// One V-cycle of smoothed-aggregation AMG, the hierarchy built on the host by
    /// `gradfem_solvers::amg` (default parameters; the rigid-body modes as near-nullspace for
    /// elasticity) and copied once per matrix ([`crate::amg::DeviceAmg`]).
    Amg,
}

impl std::str::FromStr for Preconditioner {
    type Err = GpuError;
    fn from_str(s: &str) -> Result<Self, GpuError> {
        match s {
            "jacobi" => Ok(Preconditioner::Jacobi),
            "amg" => Ok(Preconditioner::Amg),
            other => Err(GpuError::Input(format!(
                "unknown preconditioner '{other}' (expected \"jacobi\" or \"amg\")"
            ))),
        }
    }
}

/// Settings of the device CG.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CgParams {
    /// Stop when ‖r‖ ≤ `rel_tol` ‖b‖.
    pub rel_tol: f64,
    /// Most iterations.
    pub max_iterations: usize,
}

impl Default for CgParams {
    fn default() -> Self {
        CgParams { rel_tol: 1e-10, max_iterations: 100_000 }
    }
}

/// How one CG solve ended.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CgInfo {
    /// Iterations done.
    pub iterations: usize,
    /// ‖r‖ / ‖b‖ at the end (0 for a zero right-hand side).
    pub relative_residual: f64,
}

/// The forward solve and the adjoint gradient of a steady, linear field problem on a backend:
/// the per-element coefficients (k_e or E_e) go in, the nodal solution and dJ/dc_e come out.
pub struct Pipeline<B: Backend> {
    backend: B,
    n_el: usize,
    coefficient: B::Vector,
    ke: B::Vector,
    re: B::Vector,
    values: B::Vector,
    inv_diag: B::Vector,
    b: B::Vector,
    x: B::Vector,
    r: B::Vector,
    z: B::Vector,
    p: B::Vector,
    q: B::Vector,
    zero_u: B::Vector,
    fixed: B::Vector,
    zero_nodal: B::Vector,
    u_nodal: B::Vector,
    lambda_nodal: B::Vector,
    grad: B::Vector,
    solved: bool,
    amg: Option<DeviceAmg<B>>,
    preconditioner: Preconditioner,
}

impl<B: Backend> Pipeline<B> {
    /// Allocate the vectors of the pipeline on `backend`.
    pub fn new(mut backend: B) -> Result<Self, GpuError> {
        let (n_el, m, n, n_values, nnz) = {
            let s = backend.system();
            (s.n_elements(), s.element_size(), s.n_unknowns, s.n_values(), s.nnz())
        };
        let fixed = backend.system().fixed.clone();
        Ok(Pipeline {
            n_el,
            coefficient: backend.zeros(n_el)?,
            ke: backend.zeros(m * m * n_el)?,
            re: backend.zeros(m * n_el)?,
            values: backend.zeros(nnz)?,
            inv_diag: backend.zeros(n)?,
            b: backend.zeros(n)?,
            x: backend.zeros(n)?,
            r: backend.zeros(n)?,
            z: backend.zeros(n)?,
            p: backend.zeros(n)?,
            q: backend.zeros(n)?,
            zero_u: backend.zeros(n)?,
            fixed: backend.upload(&fixed)?,
            zero_nodal: backend.zeros(n_values)?,
            u_nodal: backend.zeros(n_values)?,
            lambda_nodal: backend.zeros(n_values)?,
            grad: backend.zeros(n_el)?,
            solved: false,
            amg: None,
            preconditioner: Preconditioner::Jacobi,
            backend,
        })
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Assemble the matrix and the right-hand side for the per-element coefficients
    /// `coefficient` (one per element, each finite and > 0) without solving.
    pub fn assemble(&mut self, coefficient: &[f64]) -> Result<(), GpuError> {
        let what = self.backend.system().coefficient_name();
        if coefficient.len() != self.n_el {
            return Err(GpuError::Input(format!(
                "{} values of the {what} for {} elements",
                coefficient.len(),
                self.n_el
            )));
        }
        if let Some((e, v)) =
            coefficient.iter().enumerate().find(|(_, v)| !(v.is_finite() && **v > 0.0))
        {
            return Err(GpuError::Input(format!(
                "the {what} of element {e} is {v}; it must be finite and positive"
            )));
        }
        self.solved = false;
        self.coefficient = self.backend.upload(coefficient)?;
        let be = &mut self.backend;
        be.element_matrices(&self.coefficient, &mut self.ke, &mut self.re)?;
        be.assemble_matrix(&self.ke, &mut self.values)?;
        be.assemble_rhs(&self.re, &mut self.b)?;
        be.inverse_diagonal(&self.values, &mut self.inv_diag)
    }

    /// The assembled CSR values (after [`assemble`](Self::assemble)), on the host.
    pub fn matrix_values(&mut self) -> Result<Vec<f64>, GpuError> {
        self.backend.download(&self.values)
    }

    /// The assembled right-hand side b = −R(u_free = 0), on the host.
    pub fn load(&mut self) -> Result<Vec<f64>, GpuError> {
        self.backend.download(&self.b)
    }

    /// Solve K u = b for the per-element coefficients `coefficient`; returns the nodal
    /// solution (fixed values at constrained nodal values) and how CG ended.
    pub fn forward(
        &mut self,
        coefficient: &[f64],
        params: &CgParams,
    ) -> Result<(Vec<f64>, CgInfo), GpuError> {
        let info = self.forward_on_device(coefficient, params)?;
        Ok((self.backend.download(&self.u_nodal)?, info))
    }

    /// [`forward`](Self::forward) leaving the solution on the device.
    pub fn forward_on_device(
        &mut self,
        coefficient: &[f64],
        params: &CgParams,
    ) -> Result<CgInfo, GpuError> {
        self.assemble(coefficient)?;
        if self.preconditioner == Preconditioner::Amg {
            self.build_amg(&AmgParams::default())?;
        }
        let info = self.pcg(params)?;
        self.backend.to_nodal(&self.x, &self.fixed, &mut self.u_nodal)?;
        self.solved = true;
        Ok(info)
    }

    /// The compliance fᵀu of the last forward solve under homogeneous constraints, by a dot
    /// product on the device (f the right-hand side, which is then the load): nothing but the
    /// number comes back. Refused when a constrained value is nonzero or a thermal strain loads
    /// the body.
    pub fn compliance(&mut self) -> Result<f64, GpuError> {
        if !self.solved {
            return Err(GpuError::Input("the compliance before a forward solve".into()));
        }
        if let Err(why) = self.backend.system().compliance_is_self_adjoint() {
            return Err(GpuError::Input(format!("the compliance fᵀu is not bᵀx: {why}")));
        }
        self.backend.dot(&self.b, &self.x)
    }

    /// The adjoint of the last [`forward`](Self::forward): solve K λ = ∂J/∂u (the operator is
    /// symmetric) for `u_bar` given per nodal value, then dJ/dc_e = −λ_eᵀ K_e⁰ u_e per element.
    pub fn gradient(
        &mut self,
        u_bar: &[f64],
        params: &CgParams,
    ) -> Result<(Vec<f64>, CgInfo), GpuError> {
        if !self.solved {
            return Err(GpuError::Input("gradient before a forward solve".into()));
        }
        let s = self.backend.system();
        if u_bar.len() != s.n_values() {
            return Err(GpuError::Input(format!(
                "∂J/∂u has {} values for {} nodal values",
                u_bar.len(),
                s.n_values()
            )));
        }
        let mut rhs = vec![0.0; s.n_unknowns];
        for (v, &d) in s.dof_of_value.iter().enumerate() {
            if d >= 0 {
                rhs[d as usize] = u_bar[v];
            }
        }
        self.b = self.backend.upload(&rhs)?;
        let info = self.pcg(params)?;
        let be = &mut self.backend;
        be.to_nodal(&self.x, &self.zero_nodal, &mut self.lambda_nodal)?;
        be.coefficient_gradient(&self.u_nodal, &self.lambda_nodal, &mut self.grad)?;
        Ok((be.download(&self.grad)?, info))
    }

    /// The gradient of an objective whose adjoint is the forward solution itself (the
    /// compliance J = fᵀu, whose ∂J/∂u is the load, under homogeneous constraints): no solve,
    /// dJ/dc_e = −u_eᵀ K_e⁰ u_e. Refused when a constrained value is nonzero or a thermal
    /// strain loads the body (then λ ≠ u).
    pub fn gradient_self_adjoint(&mut self) -> Result<Vec<f64>, GpuError> {
        if !self.solved {
            return Err(GpuError::Input("gradient before a forward solve".into()));
        }
        if let Err(why) = self.backend.system().compliance_is_self_adjoint() {
            return Err(GpuError::Input(format!("the adjoint is not the forward solution: {why}")));
        }
        let be = &mut self.backend;
        be.coefficient_gradient(&self.u_nodal, &self.u_nodal, &mut self.grad)?;
        be.download(&self.grad)
    }
    /// The preconditioner of [`forward`](Self::forward) (and its adjoint): with
    /// [`Preconditioner::Amg`] each forward builds the hierarchy of the assembled matrix
    /// ([`build_amg`](Self::build_amg)).
    pub fn set_preconditioner(&mut self, preconditioner: Preconditioner) {
        self.preconditioner = preconditioner;
        if preconditioner == Preconditioner::Jacobi {
            self.amg = None;
        }
    }

    /// Precondition the following solves by the AMG hierarchy `h` (built on the host for the
    /// current matrix), copied to the backend once.
    pub fn use_amg(&mut self, h: &HierarchyExport) -> Result<(), GpuError> {
        self.amg = Some(DeviceAmg::new(&mut self.backend, h)?);
        Ok(())
    }

    /// Precondition the following solves by Jacobi (the default).
    pub fn use_jacobi(&mut self) {
        self.amg = None;
    }

    /// Build the AMG hierarchy of the current matrix (after [`assemble`](Self::assemble) or
    /// [`set_matrix`](Self::set_matrix)) on the host with `params` — the matrix comes back
    /// once, its hierarchy goes over once — and precondition the following solves by it. An
    /// elastic system gets its rigid-body modes as the near-nullspace, or starts from its
    /// coarse space ([`DeviceSystem::with_coarse_space`]) when it has one.
    pub fn build_amg(&mut self, params: &AmgParams) -> Result<(), GpuError> {
        let values = self.backend.download(&self.values)?;
        let s = self.backend.system();
        let n = s.n_unknowns;
        let a = CsrMatrix {
            n_rows: n,
            n_cols: n,
            row_ptr: s.row_ptr.iter().map(|&v| v as usize).collect(),
            col_idx: s.col_idx.clone(),
            values,
        };
        let setup = |e: gradfem_solvers::SolverError| {
            GpuError::Input(format!("the AMG set-up on the host: {e}"))
        };
        let h = match (&s.coarse_space, s.near_nullspace()) {
            (Some(c), _) => AmgHierarchy::with_coarse_space(&a, params, c.clone()),
            (None, Some(nns)) => {
                AmgHierarchy::with_near_nullspace(&a, params, std::sync::Arc::new(nns))
            }
            (None, None) => AmgHierarchy::new(&a, params),
        }
        .map_err(setup)?;
        self.use_amg(&h.export())
    }

    /// Levels of the AMG preconditioner (0: Jacobi).
    pub fn amg_levels(&self) -> usize {
        self.amg.as_ref().map_or(0, DeviceAmg::n_levels)
    }

    /// Take the matrix from its CSR `values` (the pattern of the backend's system, assembled
    /// elsewhere) instead of assembling it: the operator of the following
    /// [`solve`](Self::solve)s.
    pub fn set_matrix(&mut self, values: &[f64]) -> Result<(), GpuError> {
        let nnz = self.backend.system().nnz();
        if values.len() != nnz {
            return Err(GpuError::Input(format!(
                "{} matrix values for a pattern of {nnz} entries",
                values.len()
            )));
        }
        self.solved = false;
        self.values = self.backend.upload(values)?;
        self.backend.inverse_diagonal(&self.values, &mut self.inv_diag)
    }

    /// Solve A x = `b` (one value per unknown) with the current matrix; returns x and how CG
    /// ended.
    pub fn solve(&mut self, b: &[f64], params: &CgParams) -> Result<(Vec<f64>, CgInfo), GpuError> {
        let n = self.backend.system().n_unknowns;
        if b.len() != n {
            return Err(GpuError::Input(format!(
                "a right-hand side of {} values for {n} unknowns",
                b.len()
            )));
        }
        self.b = self.backend.upload(b)?;
        let info = self.pcg(params)?;
        Ok((self.backend.download(&self.x)?, info))
    }

    /// Jacobi-preconditioned CG from x = 0 on the assembled matrix, right-hand side `b`.
    fn pcg(&mut self, params: &CgParams) -> Result<CgInfo, GpuError> {
        let be = &mut self.backend;
        be.copy(&self.zero_u, &mut self.x)?;
        if be.system().n_unknowns == 0 {
            return Ok(CgInfo::default());
        }
        let bb = be.dot(&self.b, &self.b)?;
        if !bb.is_finite() {
            return Err(GpuError::Input(format!("the right-hand side's ‖b‖² is {bb}")));
        }
        if bb == 0.0 {
            return Ok(CgInfo::default());
        }
        let b_norm = bb.sqrt();
        be.copy(&self.b, &mut self.r)?;
        precondition(be, &mut self.amg, &self.inv_diag, &self.r, &mut self.z)?;
        be.copy(&self.z, &mut self.p)?;
        let mut rz = be.dot(&self.r, &self.z)?;
        let mut rel = 1.0;
        for it in 1..=params.max_iterations {
            be.spmv(&self.values, &self.p, &mut self.q)?;
            let pq = be.dot(&self.p, &self.q)?;
            if !(pq > 0.0 && pq.is_finite()) {
                return Err(GpuError::Breakdown { iteration: it, curvature: pq });
            }
            let alpha = rz / pq;
            be.axpy(alpha, &self.p, &mut self.x)?;
            be.axpy(-alpha, &self.q, &mut self.r)?;
            rel = be.dot(&self.r, &self.r)?.sqrt() / b_norm;
            if !rel.is_finite() {
                return Err(GpuError::Breakdown { iteration: it, curvature: pq });
            }
            if rel <= params.rel_tol {
                return Ok(CgInfo { iterations: it, relative_residual: rel });
            }
            precondition(be, &mut self.amg, &self.inv_diag, &self.r, &mut self.z)?;
            let rz_new = be.dot(&self.r, &self.z)?;
            be.xpay(&self.z, rz_new / rz, &mut self.p)?;
            rz = rz_new;
        }
        Err(GpuError::NotConverged { iterations: params.max_iterations, relative_residual: rel })
    }
}

/// z = M⁻¹ r: one AMG V-cycle, or Jacobi.
fn precondition<B: Backend>(
    be: &mut B,
    amg: &mut Option<DeviceAmg<B>>,
    inv_diag: &B::Vector,
    r: &B::Vector,
    z: &mut B::Vector,
) -> Result<(), GpuError> {
    match amg {
        Some(h) => h.apply(be, r, z),
        None => be.jacobi(inv_diag, r, z),
    }
}
