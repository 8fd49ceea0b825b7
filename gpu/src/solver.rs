//! A [`LinearSolver`] that solves symmetric positive definite systems assembled on the CPU by
//! preconditioned CG on a device (Jacobi, or an AMG V-cycle whose hierarchy is built on the
//! host): the matrix values go in at each factorization, each
//! right-hand side goes in and its solution comes out. This is how a field without device
//! element kernels (or a problem file's field) solves on the GPU: assembly stays on the CPU.

use std::sync::Arc;

use gradfem_solvers::SolverError;
use gradfem_solvers::amg::{AmgHierarchy, AmgParams, CoarseSpace, NearNullspace};
use gradfem_solvers::linear::{LinearSolver, PatternKey, check_finite_matrix, check_finite_vector};
use gradfem_solvers::sparse::CsrMatrix;

use crate::backend::{CgParams, Pipeline};
use crate::error::GpuError;
use crate::system::DeviceSystem;
use crate::twin::CpuTwin;
use crate::{CgInfo, Device};

/// The pipeline of one pattern on one backend.
enum Solver {
    Twin(Box<Pipeline<CpuTwin>>),
    #[cfg(feature = "cuda")]
    Cuda(Box<Pipeline<crate::cuda::CudaBackend>>),
}

/// Preconditioned CG on a device as a [`LinearSolver`] for SPD systems (the transposed solve
/// is the solve): Jacobi, or AMG with [`with_amg`](Self::with_amg). [`Device::Cuda`] runs on the GPU; [`Device::Cpu`] runs the same pipeline with the
/// CPU twins (one thread; for checking). The device's kernels are compiled and the pattern
/// uploaded at the first factorization and again only when the pattern changes.
pub struct DeviceCgSolver {
    field: String,
    device: Device,
    params: CgParams,
    pattern: Option<PatternKey>,
    solver: Option<Solver>,
    last: Option<CgInfo>,
    backend: String,
    setups: usize,
    /// With AMG: how its hierarchy starts and the host hierarchy (refreshed for new values).
    amg: Option<HostAmg>,
}

/// The host side of [`DeviceCgSolver`]'s AMG: what its hierarchy starts from and the last one
/// built.
struct HostAmg {
    /// The rigid-body modes for elasticity (`None`: the constant per component).
    near_nullspace: Option<Arc<NearNullspace>>,
    /// The first coarse level of quadratic cells (p-multigrid; `None`: aggregation from the
    /// finest level).
    coarse_space: Option<Arc<CoarseSpace>>,
    hierarchy: Option<AmgHierarchy>,
}

impl DeviceCgSolver {
    /// A solver for `field`'s systems on `device`, to the CG settings `params`.
    pub fn new(field: &str, device: Device, params: CgParams) -> Self {
        DeviceCgSolver {
            field: field.into(),
            device,
            params,
            pattern: None,
            solver: None,
            last: None,
            backend: String::new(),
            setups: 0,
            amg: None,
        }
    }

    /// Precondition by smoothed-aggregation AMG instead of Jacobi: the hierarchy is built on
    /// the host at each factorization (for new values on the same pattern, keeping the
    /// aggregates) and copied to the device; `near_nullspace` for elasticity (the rigid-body
    /// modes), `None` for scalar fields.
    pub fn with_amg(mut self, near_nullspace: Option<NearNullspace>) -> Self {
        self.amg = Some(HostAmg {
            near_nullspace: near_nullspace.map(Arc::new),
            coarse_space: None,
            hierarchy: None,
        });
        self
    }

    /// AMG ([`with_amg`](Self::with_amg)) whose hierarchy starts from `coarse` (p-multigrid
    /// for quadratic cells: the displacement on the vertices, with its own near-nullspace;
    /// [`AmgHierarchy::with_coarse_space`]); `None` changes nothing. Switches AMG on.
    pub fn with_coarse_space(mut self, coarse: Option<CoarseSpace>) -> Self {
        let Some(coarse) = coarse else { return self };
        let amg = self.amg.get_or_insert(HostAmg {
            near_nullspace: None,
            coarse_space: None,
            hierarchy: None,
        });
        amg.coarse_space = Some(Arc::new(coarse));
        self
    }

    /// What ran the last factorization (`cuda (<device>)` or `cpu-twin`; empty before).
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// How many times the backend was set up (kernels compiled, pattern uploaded): once per
    /// pattern.
    pub fn setups(&self) -> usize {
        self.setups
    }

    /// How the last solve ended.
    pub fn last_info(&self) -> Option<CgInfo> {
        self.last
    }

    fn error(&self, e: GpuError) -> SolverError {
        let field = self.field.clone();
        match e {
            GpuError::NotConverged { iterations, relative_residual } => {
                SolverError::IterativeNoConvergence {
                    field,
                    iterations,
                    residual: relative_residual,
                }
            }
            GpuError::Breakdown { iteration, curvature } => SolverError::NotPositiveDefinite {
                field,
                detail: format!(
                    "device CG met the curvature pᵀAp = {curvature:e} in iteration {iteration}"
                ),
            },
            other => SolverError::Other {
                field,
                message: format!("on the {} device: {other}", self.device),
            },
        }
    }

    fn new_solver(&self, system: &DeviceSystem) -> Result<Solver, GpuError> {
        match self.device {
            Device::Cpu => Ok(Solver::Twin(Box::new(Pipeline::new(CpuTwin::new(system))?))),
            Device::Cuda => {
                #[cfg(feature = "cuda")]
                {
                    let backend = crate::cuda::CudaBackend::new(system)?;
                    Ok(Solver::Cuda(Box::new(Pipeline::new(backend)?)))
                }
                #[cfg(not(feature = "cuda"))]
                {
                    let _ = system;
                    Err(GpuError::NotBuilt)
                }
            }
        }
    }

    fn factor_inner(&mut self, a: &CsrMatrix) -> Result<(), GpuError> {
        let key = PatternKey::of(a);
        let same = self.pattern == Some(key);
        if !same || self.solver.is_none() {
            self.solver = None;
            let system = DeviceSystem::matrix(a)?;
            let solver = self.new_solver(&system)?;
            self.backend = match &solver {
                Solver::Twin(p) => crate::Backend::name(p.backend()),
                #[cfg(feature = "cuda")]
                Solver::Cuda(p) => crate::Backend::name(p.backend()),
            };
            tracing::info!(
                "{}: linear solves by {}-preconditioned CG on {} ({} unknowns, {} entries)",
                self.field,
                if self.amg.is_some() { "AMG" } else { "Jacobi" },
                self.backend,
                a.n_rows,
                a.nnz()
            );
            self.solver = Some(solver);
            self.setups += 1;
            self.pattern = Some(key);
        }
        match self.solver.as_mut().expect("set above") {
            Solver::Twin(p) => p.set_matrix(&a.values)?,
            #[cfg(feature = "cuda")]
            Solver::Cuda(p) => p.set_matrix(&a.values)?,
        }
        let Some(amg) = self.amg.as_mut() else { return Ok(()) };
        let setup = |e: SolverError| GpuError::Input(format!("the AMG set-up on the host: {e}"));
        match amg.hierarchy.as_mut() {
            Some(h) if same => h.refresh_values(a).map_err(setup)?,
            _ => {
                let params = AmgParams::default();
                amg.hierarchy = Some(
                    match (&amg.coarse_space, &amg.near_nullspace) {
                        (Some(c), _) => AmgHierarchy::with_coarse_space(a, &params, c.clone()),
                        (None, Some(n)) => AmgHierarchy::with_near_nullspace(a, &params, n.clone()),
                        (None, None) => AmgHierarchy::new(a, &params),
                    }
                    .map_err(setup)?,
                );
            }
        }
        let export = amg.hierarchy.as_ref().expect("built above").export();
        match self.solver.as_mut().expect("set above") {
            Solver::Twin(p) => p.use_amg(&export),
            #[cfg(feature = "cuda")]
            Solver::Cuda(p) => p.use_amg(&export),
        }
    }

    fn solve_inner(&mut self, b: &mut [f64]) -> Result<(), GpuError> {
        let params = self.params;
        let (x, info) = match self.solver.as_mut() {
            None => return Err(GpuError::Input("a solve before the first factorization".into())),
            Some(Solver::Twin(p)) => p.solve(b, &params)?,
            #[cfg(feature = "cuda")]
            Some(Solver::Cuda(p)) => p.solve(b, &params)?,
        };
        b.copy_from_slice(&x);
        self.last = Some(info);
        Ok(())
    }
}

impl LinearSolver for DeviceCgSolver {
    fn factor(&mut self, a: &CsrMatrix) -> Result<(), SolverError> {
        if let Err(e) = check_finite_matrix(&self.field, a) {
            self.solver = None;
            return Err(e);
        }
        self.factor_inner(a).map_err(|e| {
            self.solver = None;
            self.error(e)
        })
    }

    fn solve_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError> {
        check_finite_vector(&self.field, "right-hand side", b)?;
        self.solve_inner(b).map_err(|e| self.error(e))
    }

    fn solve_transpose_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError> {
        self.solve_in_place(b)
    }

    fn name(&self) -> &'static str {
        match (self.device, self.amg.is_some()) {
            (Device::Cpu, false) => "twin-cg",
            (Device::Cpu, true) => "twin-amg-cg",
            (Device::Cuda, false) => "cuda-cg",
            (Device::Cuda, true) => "cuda-amg-cg",
        }
    }

    fn last_iterations(&self) -> Option<usize> {
        self.last.map(|i| i.iterations)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gradfem_solvers::linear::CholeskySolver;

    /// The 7-point 3-D Laplacian plus `shift`·I on an n³ grid (SPD for shift ≥ 0), as CSR.
    fn laplacian(n: usize, shift: f64) -> CsrMatrix {
        let id = |i: usize, j: usize, k: usize| (i * n + j) * n + k;
        let mut row_ptr = vec![0];
        let (mut col_idx, mut values) = (Vec::new(), Vec::new());
        for i in 0..n {
            for j in 0..n {
                for k in 0..n {
                    let r = id(i, j, k);
                    let mut row = vec![(r, 6.0 + shift)];
                    for (c, step) in [(i, n * n), (j, n), (k, 1)] {
                        if c > 0 {
                            row.push((r - step, -1.0));
                        }
                        if c + 1 < n {
                            row.push((r + step, -1.0));
                        }
                    }
                    row.sort_by_key(|&(c, _)| c);
                    for (c, v) in row {
                        col_idx.push(c as u32);
                        values.push(v);
                    }
                    row_ptr.push(col_idx.len());
                }
            }
        }
        CsrMatrix { n_rows: n * n * n, n_cols: n * n * n, row_ptr, col_idx, values }
    }

    #[test]
    fn twin_cg_solves_as_cholesky_does_and_reuses_the_pattern() {
        let mut a = laplacian(6, 0.1);
        let b: Vec<f64> = (0..a.n_rows).map(|i| (0.3 * i as f64).sin()).collect();
        let params = CgParams { rel_tol: 1e-13, max_iterations: 1000 };
        let mut cg = DeviceCgSolver::new("test", Device::Cpu, params);
        let mut direct = CholeskySolver::new("test");
        for shift in [0.1, 2.0] {
            for v in a.values.iter_mut().filter(|v| **v > 0.0) {
                *v = 6.0 + shift;
            }
            cg.factor(&a).unwrap();
            direct.factor(&a).unwrap();
            let (mut x, mut y) = (b.clone(), b.clone());
            cg.solve_in_place(&mut x).unwrap();
            direct.solve_in_place(&mut y).unwrap();
            let d = x.iter().zip(&y).fold(0.0f64, |m, (p, q)| m.max((p - q).abs()));
            assert!(d <= 1e-11, "shift {shift}: CG and Cholesky differ by {d:e}");
            let mut z = b.clone();
            cg.solve_transpose_in_place(&mut z).unwrap();
            assert_eq!(x, z, "the transposed solve of an SPD system is the solve");
        }
        assert_eq!(cg.backend(), "cpu-twin");
        assert_eq!(cg.setups(), 1, "new values on the same pattern reuse the set-up");
        let other = laplacian(4, 0.5);
        cg.factor(&other).unwrap();
        assert_eq!(cg.setups(), 2, "a new pattern is set up again");
        assert!(cg.last_iterations().is_some_and(|i| i > 0));
    }

    #[test]
    fn twin_amg_cg_solves_in_few_iterations_and_keeps_the_aggregates() {
        let mut a = laplacian(12, 0.0);
        let b: Vec<f64> = (0..a.n_rows).map(|i| (0.3 * i as f64).sin()).collect();
        let params = CgParams { rel_tol: 1e-12, max_iterations: 1000 };
        let mut jacobi = DeviceCgSolver::new("test", Device::Cpu, params);
        let mut amg = DeviceCgSolver::new("test", Device::Cpu, params).with_amg(None);
        assert_eq!((jacobi.name(), amg.name()), ("twin-cg", "twin-amg-cg"));
        let mut direct = CholeskySolver::new("test");
        for round in 0..2 {
            for v in a.values.iter_mut().filter(|v| **v > 0.0) {
                *v = 6.0 + 0.5 * round as f64;
            }
            direct.factor(&a).unwrap();
            let mut y = b.clone();
            direct.solve_in_place(&mut y).unwrap();
            for s in [&mut jacobi, &mut amg] {
                s.factor(&a).unwrap();
                let mut x = b.clone();
                s.solve_in_place(&mut x).unwrap();
                let d = x.iter().zip(&y).fold(0.0f64, |m, (p, q)| m.max((p - q).abs()));
                assert!(d <= 1e-10, "{}: differs from Cholesky by {d:e}", s.name());
            }
            let (ij, ia) = (jacobi.last_iterations().unwrap(), amg.last_iterations().unwrap());
            assert!(ia * 3 < ij && ia <= 20, "AMG {ia} iterations against Jacobi's {ij}");
        }
        assert_eq!(amg.setups(), 1);
    }

    #[test]
    fn failures_are_solver_errors_naming_the_field() {
        let a = laplacian(3, 0.0);
        let mut indefinite = a.clone();
        indefinite.values.iter_mut().for_each(|v| *v = -*v);
        let mut cg = DeviceCgSolver::new("thermal", Device::Cpu, CgParams::default());
        cg.factor(&indefinite).unwrap();
        let mut b = vec![1.0; a.n_rows];
        match cg.solve_in_place(&mut b) {
            Err(SolverError::NotPositiveDefinite { field, detail }) => {
                assert_eq!(field, "thermal");
                assert!(detail.contains("curvature"), "{detail}");
            }
            other => panic!("expected NotPositiveDefinite, got {other:?}"),
        }
        let few = CgParams { rel_tol: 1e-14, max_iterations: 2 };
        let mut cg = DeviceCgSolver::new("mechanical", Device::Cpu, few);
        cg.factor(&a).unwrap();
        let mut b = vec![1.0; a.n_rows];
        assert!(matches!(
            cg.solve_in_place(&mut b),
            Err(SolverError::IterativeNoConvergence { iterations: 2, .. })
        ));
        let mut nan = a.clone();
        nan.values[7] = f64::NAN;
        let mut cg = DeviceCgSolver::new("thermal", Device::Cpu, CgParams::default());
        match cg.factor(&nan) {
            Err(SolverError::NonFinite { quantity: "matrix", dof, .. }) => {
                assert_eq!(dof, nan.row_ptr.partition_point(|&p| p <= 7) - 1)
            }
            other => panic!("expected NonFinite, got {other:?}"),
        }
        cg.factor(&a).unwrap();
        let mut b = vec![1.0; a.n_rows];
        b[5] = f64::INFINITY;
        assert!(matches!(
            cg.solve_in_place(&mut b),
            Err(SolverError::NonFinite { quantity: "right-hand side", dof: 5, .. })
        ));
        let mut b = vec![1.0; a.n_rows];
        let mut fresh = DeviceCgSolver::new("electrical", Device::Cpu, CgParams::default());
        let e = fresh.solve_in_place(&mut b).unwrap_err().to_string();
        assert!(e.contains("electrical") && e.contains("before the first factorization"), "{e}");
        #[cfg(not(feature = "cuda"))]
        {
            let mut gpu = DeviceCgSolver::new("thermal", Device::Cuda, CgParams::default());
            let e = gpu.factor(&a).unwrap_err().to_string();
            assert!(e.contains("thermal") && e.contains("`cuda` feature"), "{e}");
        }
    }
}
