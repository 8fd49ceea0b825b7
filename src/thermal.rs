//! A thermal problem on its own: the coupling engine with one field, the thermal one, for code
//! that builds a conduction problem directly (validation studies, benchmarks).
//!
//! [`ThermalProblem`] dereferences to the [`ThermalField`] it holds (its model, Newton settings,
//! objective and timings), and adds what the engine gives any problem: parameters by name, the
//! solve, the adjoint gradient and the Taylor test.

use std::ops::{Deref, DerefMut};

use gradfem_coupling::fields::thermal::ThermalField;
use gradfem_coupling::{CoupledProblem, GradientTimings, LinearChoice, RunError};
use gradfem_mesh::Mesh;
use gradfem_solvers::params::{Gradient, ParamId, ParamRegistry};
use gradfem_thermal::{BcSpec, ObjectiveTerm, RegionSpec};

pub use crate::device::{CgParams, Device, DeviceGradient, GpuError, Preconditioner};
pub use gradfem_coupling::fields::thermal::SolveTimings;
pub use gradfem_coupling::taylor::direction;

/// A steady thermal problem: one thermal field in a coupled problem of its own.
pub struct ThermalProblem {
    problem: CoupledProblem,
}

impl ThermalProblem {
    /// Set up the thermal field on `mesh`.
    pub fn new(
        mesh: Mesh,
        regions: &[RegionSpec],
        bcs: &[BcSpec],
        objective: Vec<ObjectiveTerm>,
        linear: LinearChoice,
    ) -> Result<Self, RunError> {
        let field = ThermalField::new(&mesh, regions, bcs, objective, linear)?;
        Self::from_field(mesh, field)
    }

    /// The problem of a thermal field built on `mesh`.
    pub fn from_field(mesh: Mesh, field: ThermalField) -> Result<Self, RunError> {
        let mut problem = CoupledProblem::new(mesh);
        problem.add_field(Box::new(field))?;
        Ok(ThermalProblem { problem })
    }

    /// The coupled problem it is.
    pub fn problem(&self) -> &CoupledProblem {
        &self.problem
    }

    /// The coupled problem, mutably.
    pub fn problem_mut(&mut self) -> &mut CoupledProblem {
        &mut self.problem
    }

    /// The mesh.
    pub fn mesh(&self) -> &Mesh {
        self.problem.mesh()
    }

    /// The parameter registry.
    pub fn registry(&self) -> &ParamRegistry {
        self.problem.registry()
    }

    /// The registry, to change values (then [`apply_parameters`](Self::apply_parameters)).
    pub fn registry_mut(&mut self) -> &mut ParamRegistry {
        self.problem.registry_mut()
    }

    /// Register a parameter by name (see [`CoupledProblem::register`]).
    pub fn register(&mut self, name: &str, bounds: Option<[f64; 2]>) -> Result<ParamId, RunError> {
        self.problem.register(name, bounds)
    }

    /// Copy the registry's values into the model; forgets the solution.
    pub fn apply_parameters(&mut self) -> Result<(), RunError> {
        self.problem.apply_parameters()
    }

    /// Solve; returns the nodal temperature.
    pub fn solve(&mut self) -> Result<&[f64], RunError> {
        self.problem.solve()?;
        Ok(self.field().temperature().expect("solved"))
    }

    /// Solve (if needed) and return J.
    pub fn objective_value(&mut self) -> Result<f64, RunError> {
        Ok(self.problem.objective_terms()?.0)
    }

    /// J and dJ/dp of every registered parameter (the adjoint).
    pub fn gradient(&mut self) -> Result<(f64, Gradient, GradientTimings), RunError> {
        self.problem.gradient()
    }

    /// Taylor test over every registered parameter; leaves the problem as it was.
    pub fn taylor_test(
        &mut self,
        params: &gradfem_solvers::taylor::TaylorParams,
        progress: impl FnMut(usize),
    ) -> Result<gradfem_solvers::taylor::TaylorResult, RunError> {
        self.problem.taylor_test(params, progress)
    }

    /// Per-element parameter gradients as cell fields over the mesh's top-dimensional cells.
    pub fn element_gradient_fields(&self, grad: &Gradient) -> Vec<(String, Vec<f64>)> {
        self.field()
            .element_gradient_fields(self.problem.mesh(), grad)
            .into_iter()
            .map(|(id, v)| (format!("dJ/d{}", self.registry().get(id).name), v))
            .collect()
    }

    /// One forward solve and the gradient dJ/dk_e of the objective with respect to the
    /// conductivity of every volume element (model element order), on `device`, at the
    /// model's current parameters. A device run leaves the problem's own solution as it was;
    /// the CPU path solves the problem as [`solve`](Self::solve) does.
    ///
    /// [`Device::Cuda`] runs the GPU backend (`gradfem-gpu`): element matrices, gathered
    /// assembly, CG preconditioned by `preconditioner` (Jacobi, or AMG built on the host) to
    /// `cg.rel_tol`, adjoint CG and the per-element gradient on the device, J and ∂J/∂T on the
    /// host. It is an error when this build has no `cuda` feature, or the machine no driver,
    /// device or NVRTC. A problem without device kernels (cells other than Tet4, Tet10, Hex8,
    /// Hex20 and Hex27, mixed cell types, a temperature-dependent k, a Joule source) runs on
    /// the CPU instead, and says so once in the log.
    ///
    /// [`Device::Cpu`] runs the CPU path: the field's direct or AMG solver and adjoint.
    pub fn device_gradient(
        &mut self,
        device: Device,
        cg: &CgParams,
        preconditioner: Preconditioner,
    ) -> Result<DeviceGradient, RunError> {
        if device == Device::Cuda {
            let field = self.field();
            let model = &field.model;
            match gradfem_gpu::DeviceSystem::thermal(model, &field.pattern) {
                Ok(system) => {
                    let objective = |t: &[f64]| {
                        let e =
                            gradfem_thermal::objective::evaluate(model, &field.objective, t, false)
                                .map_err(|e| GpuError::Input(e.to_string()))?;
                        Ok((e.value, gradfem_gpu::Seed::Vector(e.d_temperature)))
                    };
                    let k = &model.k_elem[..model.n_volume_elements()];
                    let run =
                        gradfem_gpu::run_on(device, &system, k, cg, preconditioner, objective)
                            .map_err(|e| RunError::Setup(format!("thermal on the GPU: {e}")))?;
                    return Ok(DeviceGradient {
                        backend: run.backend,
                        objective: run.objective,
                        gradient: run.gradient,
                        solution: run.solution,
                        cg_iterations: Some([run.forward_cg.iterations, run.adjoint_cg.iterations]),
                        forward_s: run.forward_s,
                        gradient_s: run.objective_s + run.gradient_s,
                        setup_s: run.setup_s,
                    });
                }
                Err(GpuError::Unsupported(why)) => {
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| {
                        tracing::warn!("thermal: {why}; this problem runs on the CPU");
                    });
                }
                Err(e) => return Err(RunError::Setup(format!("thermal on the GPU: {e}"))),
            }
        }
        self.cpu_conductivity_gradient()
    }

    /// The CPU path of [`device_gradient`](Self::device_gradient).
    fn cpu_conductivity_gradient(&mut self) -> Result<DeviceGradient, RunError> {
        let t0 = std::time::Instant::now();
        let t = self.solve()?.to_vec();
        let field = self.problem.find_mut::<ThermalField>().expect("the thermal field");
        let forward_s = t0.elapsed().as_secs_f64();
        let t1 = std::time::Instant::now();
        let eval = field.evaluate_objective(false)?;
        let lambda = field.adjoint_solve_nodal(&eval.d_temperature)?;
        let want = gradfem_thermal::VjpRequest {
            conductivity: true,
            source: false,
            boundary: false,
            temperature: false,
            coords: false,
        };
        let vjp = field.model.parameter_vjp(&t, &lambda, want);
        let gradient_s = t1.elapsed().as_secs_f64();
        let solver = field.last_solve.linear_solver.clone();
        Ok(DeviceGradient {
            backend: format!("cpu ({solver})"),
            objective: eval.value,
            gradient: vjp.k_elem.iter().map(|v| -v).collect(),
            solution: t,
            cg_iterations: None,
            forward_s,
            gradient_s,
            setup_s: 0.0,
        })
    }

    fn field(&self) -> &ThermalField {
        self.problem.find::<ThermalField>().expect("the thermal field")
    }
}

impl Deref for ThermalProblem {
    type Target = ThermalField;
    fn deref(&self) -> &ThermalField {
        self.field()
    }
}

impl DerefMut for ThermalProblem {
    fn deref_mut(&mut self) -> &mut ThermalField {
        self.problem.find_mut::<ThermalField>().expect("the thermal field")
    }
}
