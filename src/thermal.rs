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
