//! The thermal field: steady conduction R(T; Q, p) = 0 wired to assembly, Newton, a linear
//! solver and its adjoint, as one [`Field`] of a coupled problem.
//!
//! Its state is the nodal temperature (fixed temperatures are not unknowns: their values are
//! parameters, `bc.<group>.temperature`); its input is a heat source per quadrature point of
//! its volume elements (`heat_source`: the Joule heat of an electrical field upstream). The
//! reverse pass solves (∂R/∂T)ᵀ λ = T̄ with the factorization of the converged forward state,
//! accumulates p̄ = −λᵀ ∂R/∂p element by element (fixed temperatures also receive T̄ at their
//! nodes), and hands Q̄ = −λᵀ ∂R/∂Q to whatever made the source.

use std::any::Any;
use std::borrow::Cow;
use std::time::Instant;

use gradfem_mesh::{CellId, Mesh};
use gradfem_solvers::assembly::AssemblyPattern;
use gradfem_solvers::linear::{CholeskySolver, LinearSolver};
use gradfem_solvers::newton::{NewtonInfo, NewtonParams, NonlinearProblem, newton};
use gradfem_solvers::params::{Gradient, ParamId, ParamKind, ParamRegistry, ParamSpec};
use gradfem_solvers::sparse::CsrMatrix;
use gradfem_thermal::model::MAX_NODES;
use gradfem_thermal::{BcKind, BcSpec, ObjectiveEval, ObjectiveTerm, RegionSpec, ThermalModel};
use rayon::prelude::*;
use serde::Serialize;

use crate::cell::CellKernels;
use crate::error::{LinearChoice, RunError};
use crate::field::{
    CyclePlan, Direction, Dynamic, Field, Layout, OutputVjp, Port, Reverse, SecondOrder, Seed,
    SolveMode, StepChoice, StepInfo, TimeInputSeeds, TimeTangents,
};
use crate::fields::thermal_transient::ThermalTransient;
use crate::fields::transient::StateSeeds;

/// How one registered parameter maps onto the model.
#[derive(Clone, Debug, PartialEq)]
enum Binding {
    RegionK(usize),
    ElementK(usize),
    Source(usize),
    BcTemperature(usize),
    BcH(usize),
    BcTInf(usize),
    BcFlux(usize),
}

/// Timings of one forward solve.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SolveTimings {
    pub assembly_s: f64,
    pub factor_s: f64,
    pub solve_s: f64,
    pub newton_iterations: usize,
    pub residual_history: Vec<f64>,
    pub linear_solver: String,
}

/// The thermal field, ready to solve and differentiate.
pub struct ThermalField {
    pub model: ThermalModel,
    pub pattern: AssemblyPattern,
    solver: Box<dyn LinearSolver>,
    /// The objective terms on the temperature.
    pub objective: Vec<ObjectiveTerm>,
    bindings: Vec<(ParamId, Binding)>,
    pub newton: NewtonParams,
    /// Free temperatures of the last solve (Newton's start for the next one).
    unknowns: Vec<f64>,
    /// Nodal temperatures: of the last solve, or placed by a monolithic cycle.
    temperature: Option<Vec<f64>>,
    /// Whether `temperature` solves the field at its current inputs and parameters.
    solved: bool,
    pub last_solve: SolveTimings,
    /// Where the starting guess of the solve came from (e.g. an ANSYS result set), for the
    /// run summary; `None` for the default start.
    pub initial_state: Option<String>,
    linear_choice: LinearChoice,
    cg_rel_tol: f64,
    /// The time stepping, when the field is stepped in time.
    pub transient: Option<ThermalTransient>,
    /// Whether the engine steps the field on a cycle, where its steady products serve each
    /// state of the run.
    stepped_on_cycle: bool,
}

struct Residual<'a> {
    model: &'a ThermalModel,
    pattern: &'a AssemblyPattern,
    assembly_s: f64,
}

impl NonlinearProblem for Residual<'_> {
    fn field(&self) -> &str {
        "thermal"
    }
    fn n_unknowns(&self) -> usize {
        self.model.n_unknowns()
    }
    fn tangent_pattern(&self) -> CsrMatrix {
        self.pattern.new_matrix()
    }
    fn residual(&mut self, u: &[f64], r: &mut [f64]) {
        let t0 = Instant::now();
        let t = self.model.nodal_temperature(u);
        self.pattern
            .assemble_vector_into(r, |e, fe| self.model.element_residual_tangent(e, &t, None, fe));
        self.assembly_s += t0.elapsed().as_secs_f64();
    }
    fn residual_and_tangent(&mut self, u: &[f64], r: &mut [f64], k: &mut CsrMatrix) {
        let t0 = Instant::now();
        let t = self.model.nodal_temperature(u);
        self.pattern.assemble_into(k, r, |e, ke, fe| {
            self.model.element_residual_tangent(e, &t, Some(ke), fe)
        });
        self.assembly_s += t0.elapsed().as_secs_f64();
    }
    fn describe_dof(&self, dof: usize) -> String {
        self.model.describe_dof(dof)
    }
    fn is_linear(&self) -> bool {
        self.model.is_linear()
    }
}

impl ThermalField {
    /// Set up the thermal field on `mesh`.
    pub fn new(
        mesh: &Mesh,
        regions: &[RegionSpec],
        bcs: &[BcSpec],
        objective: Vec<ObjectiveTerm>,
        linear: LinearChoice,
    ) -> Result<Self, RunError> {
        let model = ThermalModel::new(mesh, regions, bcs)?;
        let pattern = AssemblyPattern::new(
            model.n_unknowns(),
            &model.element_offsets(),
            &model.element_dofs(),
        );
        let mut p = ThermalField {
            model,
            pattern,
            solver: Box::new(CholeskySolver::new("thermal")),
            objective,
            bindings: Vec::new(),
            newton: NewtonParams::default(),
            unknowns: Vec::new(),
            temperature: None,
            solved: false,
            last_solve: SolveTimings::default(),
            initial_state: None,
            linear_choice: linear,
            cg_rel_tol: 1e-10,
            transient: None,
            stepped_on_cycle: false,
        };
        // Start Newton from the boundary conditions' mean temperature, not 0 K: a T-dependent
        // conductivity may be unphysical far from its reference.
        p.unknowns = vec![p.model.reference_temperature(); p.model.n_unknowns()];
        p.solver = p.make_solver();
        Ok(p)
    }

    /// Solve the field's linear systems with `solver` (a device solver, or any other) until the
    /// next choice of the linear solver. The adjoint uses its transposed solve.
    pub fn set_solver(&mut self, solver: Box<dyn LinearSolver>) {
        self.solver = solver;
    }

    /// Whether the field's matrix is symmetric (constant conductivities and no terms that make
    /// it otherwise): an SPD solver such as CG applies.
    pub fn is_symmetric(&self) -> bool {
        self.model.is_symmetric()
    }

    /// Relative tolerance of the iterative solver, when one is used.
    pub fn set_cg_tolerance(&mut self, rel_tol: f64) {
        self.cg_rel_tol = rel_tol;
        self.solver = self.make_solver();
    }

    fn make_solver(&self) -> Box<dyn LinearSolver> {
        if !self.model.is_symmetric() {
            return crate::error::nonsymmetric_solver("thermal", self.linear_choice);
        }
        crate::error::spd_solver("thermal", self.linear_choice, self.cg_rel_tol, None, None)
    }

    /// The linear solver's name.
    pub fn linear_solver(&self) -> &'static str {
        self.solver.name()
    }

    fn binding_for(&self, name: &str) -> Result<(Binding, ParamSpec), RunError> {
        let unknown = || RunError::UnknownParameter(name.to_string());
        let region = |g: &str| self.model.regions.iter().position(|r| r.name == g);
        let bc = |g: &str| self.model.boundaries.iter().position(|b| b.name == g);
        if let Some(g) = name.strip_prefix("thermal.k_elem.") {
            let r = region(g).ok_or_else(unknown)?;
            let values =
                self.model.regions[r].elements.clone().map(|e| self.model.k_elem[e]).collect();
            return Ok((
                Binding::ElementK(r),
                ParamSpec::vector(name, ParamKind::PerElement { group: g.to_string() }, values)
                    .with_bounds(Some(0.0), None)
                    .with_doc("conductivity k₀ of each cell of the group", "W/(m·K)"),
            ));
        }
        if let Some(g) = name.strip_prefix("thermal.k.") {
            let r = region(g).ok_or_else(unknown)?;
            let e0 = self.model.regions[r].elements.start;
            return Ok((
                Binding::RegionK(r),
                ParamSpec::scalar(name, self.model.k_elem[e0])
                    .with_bounds(Some(0.0), None)
                    .with_doc("conductivity k₀ of the group", "W/(m·K)"),
            ));
        }
        if let Some(g) = name.strip_prefix("thermal.q.") {
            let r = region(g).ok_or_else(unknown)?;
            return Ok((
                Binding::Source(r),
                ParamSpec::scalar(name, self.model.regions[r].source)
                    .with_doc("volumetric heat source", "W/m³"),
            ));
        }
        if let Some(rest) = name.strip_prefix("bc.") {
            let (g, field) = rest.rsplit_once('.').ok_or_else(unknown)?;
            let b = bc(g).ok_or_else(unknown)?;
            let kind = &self.model.boundaries[b].kind;
            let (binding, value, doc, units) = match (field, kind) {
                ("temperature", BcKind::Temperature { value }) => {
                    (Binding::BcTemperature(b), *value, "fixed temperature", "K")
                }
                ("h", BcKind::Convection { h, .. }) => {
                    (Binding::BcH(b), *h, "heat-transfer coefficient", "W/(m²·K)")
                }
                ("t_inf", BcKind::Convection { t_inf, .. }) => {
                    (Binding::BcTInf(b), *t_inf, "ambient temperature", "K")
                }
                ("flux", BcKind::HeatFlux { q_in }) => {
                    (Binding::BcFlux(b), *q_in, "heat flux into the body", "W/m²")
                }
                _ => return Err(unknown()),
            };
            let mut spec = ParamSpec::scalar(name, value).with_doc(doc, units);
            if binding == Binding::BcH(b) {
                spec = spec.with_bounds(Some(0.0), None);
            }
            return Ok((binding, spec));
        }
        Err(unknown())
    }

    /// Solve the forward problem (Newton; one step when linear). The solver keeps the
    /// factorization of the converged state for the adjoint.
    pub fn solve_alone(&mut self) -> Result<&[f64], RunError> {
        let mut residual = Residual { model: &self.model, pattern: &self.pattern, assembly_s: 0.0 };
        // Tolerances are relative to the size of the load, ‖R(T_free = 0)‖, not to the residual
        // of a warm start close to the solution, which would demand a residual below round-off.
        // From a zero start Newton's first residual is the load itself.
        let mut params = self.newton.clone();
        if self.unknowns.iter().any(|&v| v != 0.0) {
            let mut r0 = vec![0.0; self.model.n_unknowns()];
            residual.residual(&vec![0.0; self.model.n_unknowns()], &mut r0);
            let load = r0.iter().map(|v| v * v).sum::<f64>().sqrt();
            if !load.is_finite() {
                return Err(RunError::Setup(format!(
                    "thermal: the load ‖R(T = 0)‖ of the problem overflows ({load}): a value of \
                     the problem file is too large for double precision (a coefficient near \
                     1e308, say); rescale it"
                )));
            }
            params.abs_tol = params.abs_tol.max(params.rel_tol * load);
        }
        self.solved = false;
        let info: NewtonInfo =
            newton(&mut residual, &mut self.unknowns, self.solver.as_mut(), &params)?;
        self.last_solve = SolveTimings {
            assembly_s: residual.assembly_s,
            factor_s: info.time_factor_s,
            solve_s: info.time_solve_s,
            newton_iterations: info.iterations,
            residual_history: info.residual_history.clone(),
            linear_solver: self.solver.name().to_string(),
        };
        let t = self.model.nodal_temperature(&self.unknowns);
        self.model.check_conductivity(&t)?;
        self.temperature = Some(t);
        self.solved = true;
        Ok(self.temperature.as_deref().expect("set above"))
    }

    /// Set the starting guess of the next Newton solve from nodal temperatures (one per mesh
    /// node): the free temperatures take these values, fixed ones keep their conditions. It
    /// matters for a nonlinear k(T), where the start decides the iterations (and, for a
    /// non-monotone law, which solution is found); a linear problem ends in the same state.
    /// Forgets the last solution.
    pub fn set_initial_temperature(&mut self, nodal: &[f64]) {
        assert_eq!(
            nodal.len(),
            self.model.n_nodes(),
            "set_initial_temperature: {} values for {} nodes",
            nodal.len(),
            self.model.n_nodes()
        );
        self.unknowns = self.model.dofs.gather(nodal);
        self.forget();
    }

    fn forget(&mut self) {
        self.temperature = None;
        self.solved = false;
    }

    /// Nodal temperatures of the last solve.
    pub fn temperature(&self) -> Option<&[f64]> {
        self.temperature.as_deref()
    }

    /// The objective at the last solution.
    pub fn evaluate_objective(&self, with_coords: bool) -> Result<ObjectiveEval, RunError> {
        let t = self.temperature.as_deref().ok_or_else(|| RunError::Setup("solve first".into()))?;
        Ok(gradfem_thermal::objective::evaluate(&self.model, &self.objective, t, with_coords)?)
    }

    /// The adjoint λ per node (0 at fixed nodes) of (∂R/∂T)ᵀ λ = T̄ restricted to the
    /// unknowns, with the factorization of the last solve (the tangent at fixed external
    /// source). `t_bar` is per node.
    pub fn adjoint_solve_nodal(&mut self, t_bar: &[f64]) -> Result<Vec<f64>, RunError> {
        if self.temperature.is_none() {
            return Err(RunError::Setup("solve first".into()));
        }
        let mut rhs = self.model.dofs.gather(t_bar);
        if !rhs.is_empty() {
            self.solver.solve_transpose_in_place(&mut rhs)?;
        }
        let mut lambda = vec![0.0; self.model.n_nodes()];
        self.model.dofs.scatter(&rhs, &mut lambda);
        Ok(lambda)
    }

    /// Which steady parameter kinds are registered (what a transient gradient must compute);
    /// `coords` when the node coordinates are wanted.
    pub fn vjp_request(&self, coords: bool) -> gradfem_thermal::VjpRequest {
        let has = |f: fn(&Binding) -> bool| self.bindings.iter().any(|(_, b)| f(b));
        gradfem_thermal::VjpRequest {
            conductivity: has(|b| matches!(b, Binding::RegionK(_) | Binding::ElementK(_))),
            source: has(|b| matches!(b, Binding::Source(_))),
            boundary: has(|b| {
                matches!(b, Binding::BcH(_) | Binding::BcTInf(_) | Binding::BcFlux(_))
            }),
            temperature: has(|b| matches!(b, Binding::BcTemperature(_))),
            coords,
        }
    }

    /// Add the total derivatives of a transient run (dJ/dp per steady parameter kind) to the
    /// registered parameters' gradient.
    pub fn add_transient_gradient(
        &self,
        g: &crate::fields::transient::TransientGradient,
        rev: &mut Reverse,
    ) {
        for (id, binding) in &self.bindings {
            let v = rev.grad.get_mut(*id);
            match *binding {
                Binding::RegionK(r) => v[0] += g.k_region[r],
                Binding::ElementK(r) => {
                    for (gi, e) in v.iter_mut().zip(self.model.regions[r].elements.clone()) {
                        *gi += g.k_elem[e];
                    }
                }
                Binding::Source(r) => v[0] += g.source[r],
                Binding::BcTemperature(b) => v[0] += g.temperature[b],
                Binding::BcH(b) => v[0] += g.h[b],
                Binding::BcTInf(b) => v[0] += g.t_inf[b],
                Binding::BcFlux(b) => v[0] += g.q_in[b],
            }
        }
        if let Some(dx) = &g.coords {
            rev.add_coordinates(dx, 1.0);
        }
    }

    /// Take nodal temperatures computed elsewhere (a transient run's last state) as the
    /// solution: summaries and outputs report them.
    pub fn set_solution(&mut self, nodal: Vec<f64>) {
        assert_eq!(nodal.len(), self.model.n_nodes(), "set_solution: one value per node");
        self.unknowns = self.model.dofs.gather(&nodal);
        self.temperature = Some(nodal);
        self.solved = true;
    }

    /// Free temperatures of the last solve (Newton's start for the next one).
    pub fn unknowns(&self) -> &[f64] {
        &self.unknowns
    }

    /// Set Newton's start for the next solve (free temperatures); forgets the last solution.
    pub fn set_unknowns(&mut self, unknowns: Vec<f64>) {
        assert_eq!(unknowns.len(), self.model.n_unknowns(), "set_unknowns: wrong length");
        self.unknowns = unknowns;
        self.forget();
    }

    /// A mesh cell index (over the top-dimension blocks, in block order) for each volume
    /// element, to write per-element fields as cell data.
    pub fn element_output_index(&self, mesh: &Mesh) -> Vec<usize> {
        let dim = mesh.dim();
        let mut offsets = vec![usize::MAX; mesh.blocks.len()];
        let mut acc = 0;
        for (b, blk) in mesh.blocks.iter().enumerate() {
            if blk.cell_type.dim() == dim {
                offsets[b] = acc;
                acc += blk.len();
            }
        }
        (0..self.model.n_volume_elements())
            .map(|e| {
                let c = self.model.element_cell(e);
                offsets[c.block] + c.index
            })
            .collect()
    }

    /// The mesh's element tags of the entries of each per-element parameter, in the
    /// parameter's order (for `gradients.json`).
    pub fn element_parameter_tags(&self) -> Vec<(ParamId, Vec<u64>)> {
        let mut out = Vec::new();
        for (id, b) in &self.bindings {
            if let Binding::ElementK(r) = *b {
                let tags = self.model.regions[r]
                    .elements
                    .clone()
                    .map(|e| self.model.element_cell_tag(e))
                    .collect();
                out.push((*id, tags));
            }
        }
        out
    }

    /// Per-element parameter gradients as cell fields (registry id, values over the output
    /// cells of `mesh`; NaN where a cell is not in the parameter's group).
    pub fn element_gradient_fields(
        &self,
        mesh: &Mesh,
        grad: &Gradient,
    ) -> Vec<(ParamId, Vec<f64>)> {
        let index = self.element_output_index(mesh);
        let n_cells = mesh.n_cells_of_dim(mesh.dim());
        let mut out = Vec::new();
        for (id, b) in &self.bindings {
            if let Binding::ElementK(r) = *b {
                let mut v = vec![f64::NAN; n_cells];
                for (gi, e) in grad.get(*id).iter().zip(self.model.regions[r].elements.clone()) {
                    v[index[e]] = *gi;
                }
                out.push((*id, v));
            }
        }
        out
    }

    /// The points of the heat-source input: the volume elements' quadrature points.
    fn source_layout(&self) -> Layout {
        Layout::Points {
            offsets: self.model.qp_offsets().to_vec(),
            cells: (0..self.model.n_volume_elements())
                .map(|e| self.model.element_cell(e))
                .collect(),
        }
    }
}

impl ThermalField {
    /// The parameter direction `dir` (registry layout) in the model's terms, with the fixed
    /// nodes' temperature changes of registered fixed temperatures.
    fn thermal_direction(&self, dir: &Gradient) -> gradfem_thermal::ThermalDirection {
        let mut d = gradfem_thermal::ThermalDirection::zeros(&self.model);
        let owner = self.model.fixed_owner();
        for (id, binding) in &self.bindings {
            let v = dir.get(*id);
            match *binding {
                Binding::RegionK(r) => {
                    for e in self.model.regions[r].elements.clone() {
                        d.k_elem[e] += v[0];
                    }
                }
                Binding::ElementK(r) => {
                    for (e, vi) in self.model.regions[r].elements.clone().zip(v) {
                        d.k_elem[e] += vi;
                    }
                }
                Binding::Source(r) => d.source[r] += v[0],
                Binding::BcTemperature(b) => {
                    for (n, o) in owner.iter().enumerate() {
                        if *o == Some(b) {
                            d.temperature[n] += v[0];
                        }
                    }
                }
                Binding::BcH(b) => d.h[b] += v[0],
                Binding::BcTInf(b) => d.t_inf[b] += v[0],
                Binding::BcFlux(b) => d.q_in[b] += v[0],
            }
        }
        d
    }

    /// Subtract the parameter products λᵀ∂R/∂p of `vjp` from the registered parameters'
    /// gradient; with `t_bar` (∂J/∂T per node) a fixed temperature also gets its direct term
    /// Σ T̄ over its nodes.
    fn subtract_parameter_products(
        &self,
        vjp: &gradfem_thermal::ParameterVjp,
        t_bar: Option<&[f64]>,
        grad: &mut Gradient,
    ) {
        let owner = self.model.fixed_owner();
        for (id, binding) in &self.bindings {
            let g = grad.get_mut(*id);
            match *binding {
                Binding::RegionK(r) => {
                    g[0] -=
                        self.model.regions[r].elements.clone().map(|e| vjp.k_elem[e]).sum::<f64>();
                }
                Binding::ElementK(r) => {
                    for (gi, e) in g.iter_mut().zip(self.model.regions[r].elements.clone()) {
                        *gi -= vjp.k_elem[e];
                    }
                }
                Binding::Source(r) => g[0] -= vjp.source[r],
                Binding::BcTemperature(b) => {
                    let direct: f64 = t_bar.map_or(0.0, |t_bar| {
                        (0..owner.len()).filter(|&n| owner[n] == Some(b)).map(|n| t_bar[n]).sum()
                    });
                    g[0] += direct - vjp.temperature[b];
                }
                Binding::BcH(b) => g[0] -= vjp.h[b],
                Binding::BcTInf(b) => g[0] -= vjp.t_inf[b],
                Binding::BcFlux(b) => g[0] -= vjp.q_in[b],
            }
        }
    }

    /// Refuse what the second-order products do not cover yet; the solved temperature.
    fn check_second_order(&self) -> Result<&[f64], RunError> {
        if self.transient.is_some() && !self.stepped_on_cycle {
            return Err(RunError::Setup(
                "thermal: the steady second-order products do not apply to a field stepped in time (its products run through the steps)"
                    .into(),
            ));
        }
        self.temperature.as_deref().ok_or_else(|| RunError::Setup("thermal: solve first".into()))
    }

    /// The model direction of `params` with the state tangent `state` (empty: the prescribed
    /// part only) and the node coordinates' tangent `coordinates` (empty: zero).
    fn direction_with_state(
        &self,
        params: &Gradient,
        state: &[f64],
        coordinates: &[[f64; 3]],
    ) -> gradfem_thermal::ThermalDirection {
        let mut d = self.thermal_direction(params);
        if !state.is_empty() {
            d.temperature.copy_from_slice(state);
        }
        d.coords = coordinates.to_vec();
        d
    }

    /// An error unless the mass is consistent: its node-coordinate products need it.
    fn consistent_mass_with_coordinates(&self) -> Result<(), RunError> {
        let tr = self.transient.as_ref().expect("a transient field");
        if tr.lumped() {
            return Err(RunError::Setup(
                "transient: coordinate derivatives with a lumped mass matrix (use the consistent mass)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Σₑ (Mₑ(ρcₑ) v + `extra`(e)) over the volume elements, per node and zero at the fixed
    /// nodes, in parallel and in element order (the result does not depend on the thread
    /// count). Mₑ at ρc = `rho_c[e]` (lumped as the run's is; skipped where ρcₑ = 0);
    /// `extra(e, local)` adds one value per local node.
    fn mass_product_with(
        &self,
        rho_c: &[f64],
        v: &[f64],
        extra: impl Fn(usize, &mut [f64]) + Sync,
    ) -> Vec<f64> {
        let tr = self.transient.as_ref().expect("a transient field");
        let lumped = tr.lumped();
        let n_vol = rho_c.len();
        let model = &self.model;
        let mut out = vec![0.0; model.n_nodes()];
        model.scatter_chunked(&mut out, 1, |e, local| {
            if e >= n_vol {
                return;
            }
            if rho_c[e] != 0.0 {
                let nodes = model.element_nodes(e);
                let nn = nodes.len();
                let mut me = [0.0; MAX_NODES * MAX_NODES];
                model.element_mass_into(e, rho_c[e], lumped, &mut me[..nn * nn]);
                for a in 0..nn {
                    local[a] += (0..nn).map(|b| me[a * nn + b] * v[nodes[b]]).sum::<f64>();
                }
            }
            extra(e, local);
        });
        for (n, o) in out.iter_mut().enumerate() {
            if self.model.dofs.unknown_of_node[n].is_none() {
                *o = 0.0;
            }
        }
        out
    }

    /// M(ρc) v over the nodes (ρc per volume element), zero at the fixed nodes.
    fn mass_product(&self, rho_c: &[f64], v: &[f64]) -> Vec<f64> {
        self.mass_product_with(rho_c, v, |_, _| {})
    }

    /// `per_element(e, local)` over the first `n_vol` (volume) elements in parallel: the
    /// element forms of the capacity's parameter products. Its values are summed per region
    /// (returned); the 3 values per local node it writes into `local` (given only with
    /// `coords`) are added into `coords`. Both in element order.
    fn capacity_element_pass(
        &self,
        n_vol: usize,
        coords: Option<&mut Vec<[f64; 3]>>,
        per_element: impl Fn(usize, Option<&mut [f64]>) -> f64 + Sync,
    ) -> Vec<f64> {
        let mut units = vec![0.0; self.model.n_elements()];
        match coords {
            Some(c) => {
                let mut nodal = vec![0.0; 3 * self.model.n_nodes()];
                self.model.scatter_chunked_with_values(&mut nodal, 3, &mut units, |e, local| {
                    if e < n_vol { per_element(e, Some(local)) } else { 0.0 }
                });
                for (cn, l) in c.iter_mut().zip(nodal.chunks_exact(3)) {
                    for i in 0..3 {
                        cn[i] += l[i];
                    }
                }
            }
            None => units[..n_vol]
                .par_iter_mut()
                .enumerate()
                .for_each(|(e, u)| *u = per_element(e, None)),
        }
        let mut per_region = vec![0.0; self.model.regions.len()];
        for (e, u) in units[..n_vol].iter().enumerate() {
            per_region[self.model.element_region(e)] += u;
        }
        per_region
    }

    /// dR/dε at every node along `d` and the source tangent `dq` (per point; empty: zero).
    fn nodal_residual_jvp(
        &self,
        t: &[f64],
        d: &gradfem_thermal::ThermalDirection,
        dq: &[f64],
    ) -> Vec<f64> {
        let mut jvp = self.model.residual_jvp(t, d);
        if self.model.external_source().is_some() {
            if !d.coords.is_empty() {
                add_into(&mut jvp, &self.model.external_source_jvp_moving(dq, &d.coords));
            } else if !dq.is_empty() {
                add_into(&mut jvp, &self.model.external_source_jvp(dq));
            }
        }
        jvp
    }
}

fn add_into(acc: &mut [f64], v: &[f64]) {
    acc.iter_mut().zip(v).for_each(|(a, b)| *a += b);
}

fn input_or_empty(inputs: &[Vec<f64>], port: usize) -> &[f64] {
    inputs.get(port).map_or(&[], |v| v.as_slice())
}

impl SecondOrder for ThermalField {
    fn prescribed_tangent(&self, params: &Gradient) -> Vec<f64> {
        self.thermal_direction(params).temperature
    }

    fn residual_jvp(&self, dir: &Direction) -> Result<Vec<f64>, RunError> {
        let t = self.check_second_order()?;
        let d = self.direction_with_state(dir.params, dir.state, dir.coordinates);
        Ok(self.model.dofs.gather(&self.nodal_residual_jvp(t, &d, input_or_empty(dir.inputs, 0))))
    }

    fn tangent(
        &mut self,
        params: &Gradient,
        coordinates: &[[f64; 3]],
        inputs: &[Vec<f64>],
    ) -> Result<Vec<f64>, RunError> {
        let t = self.check_second_order()?.to_vec();
        let d = self.direction_with_state(params, &[], coordinates);
        let jvp = self.nodal_residual_jvp(&t, &d, input_or_empty(inputs, 0));
        let mut rhs = self.model.dofs.gather(&jvp);
        rhs.iter_mut().for_each(|v| *v = -*v);
        if !rhs.is_empty() {
            self.solver.solve_in_place(&mut rhs)?;
        }
        let mut dt = d.temperature;
        self.model.dofs.scatter(&rhs, &mut dt);
        Ok(dt)
    }

    fn second_order_vjp(
        &self,
        lambda: &[f64],
        dir: &Direction,
        rev: &mut Reverse,
    ) -> Result<OutputVjp, RunError> {
        // The residual is linear in the external source with coefficients that depend on the
        // coordinates alone: input terms only when the nodes move.
        let coords = rev.coordinate_request();
        let t = self.check_second_order()?;
        let d = self.direction_with_state(dir.params, dir.state, dir.coordinates);
        let (s_t, s_p, part) = self.model.second_order_vjp(t, lambda, &d, coords);
        self.subtract_parameter_products(&s_p, None, rev.grad);
        rev.add_coordinate_part(&part, -1.0);
        let mut inputs = Vec::new();
        if !coords.is_none() && self.model.external_source().is_some() {
            let dq = input_or_empty(dir.inputs, 0);
            let (per_point, part) =
                self.model.external_source_second_order(lambda, dq, dir.coordinates, coords);
            rev.add_coordinate_part(&part, -1.0);
            inputs.push((0, per_point.into_iter().map(|v| -v).collect()));
        }
        Ok(OutputVjp { state: s_t.into_iter().map(|v| -v).collect(), inputs })
    }

    fn objective_hessian(&self, dir: &Direction, rev: &mut Reverse) -> Result<Seed, RunError> {
        // The objective terms depend on the temperature and, for integrals over groups, on the
        // node coordinates.
        let t = self.check_second_order()?;
        if !rev.wants_coordinates() {
            let state = gradfem_thermal::objective::hessian_product(
                &self.model,
                &self.objective,
                t,
                dir.state,
            )?;
            return Ok(Seed { state, ..Seed::default() });
        }
        let (state, part) = gradfem_thermal::objective::hessian_product_with_coords(
            &self.model,
            &self.objective,
            t,
            dir.state,
            dir.coordinates,
            rev.coordinate_request(),
        )?;
        rev.add_coordinate_part(&part, 1.0);
        Ok(Seed { state, ..Seed::default() })
    }

    fn covers_shape(&self) -> bool {
        true
    }
}

impl Field for ThermalField {
    fn name(&self) -> &str {
        "thermal"
    }

    fn expect_solves(&mut self, per_factorization: usize) {
        self.solver.expect_solves(per_factorization);
    }

    fn outputs(&self) -> Vec<Port> {
        vec![Port::nodal("temperature", 1)]
    }

    fn inputs(&self) -> Vec<Port> {
        vec![Port { name: "heat_source".into(), layout: self.source_layout() }]
    }

    fn available_parameters(&self) -> Vec<String> {
        let mut names = Vec::new();
        for r in &self.model.regions {
            names.push(format!("thermal.k.{}", r.name));
            names.push(format!("thermal.k_elem.{}", r.name));
            names.push(format!("thermal.q.{}", r.name));
        }
        for b in &self.model.boundaries {
            match b.kind {
                BcKind::Temperature { .. } => names.push(format!("bc.{}.temperature", b.name)),
                BcKind::HeatFlux { .. } => names.push(format!("bc.{}.flux", b.name)),
                BcKind::Convection { .. } => {
                    names.push(format!("bc.{}.h", b.name));
                    names.push(format!("bc.{}.t_inf", b.name));
                }
            }
        }
        if let Some(tr) = &self.transient {
            names.extend(tr.available_parameters(&self.model));
        }
        names
    }

    fn owns(&self, name: &str) -> bool {
        ["thermal.k.", "thermal.k_elem.", "thermal.q."].iter().any(|p| name.starts_with(p))
            || ThermalTransient::owns_name(name)
            || (name.starts_with("bc.")
                && [".temperature", ".h", ".t_inf", ".flux"].iter().any(|s| name.ends_with(s)))
    }

    fn register(
        &mut self,
        registry: &mut ParamRegistry,
        name: &str,
        bounds: Option<[f64; 2]>,
    ) -> Result<ParamId, RunError> {
        if ThermalTransient::owns_name(name) {
            let tr = self
                .transient
                .as_mut()
                .ok_or_else(|| RunError::UnknownParameter(name.to_string()))?;
            return tr.register(&self.model, registry, name, bounds);
        }
        let (binding, spec) = self.binding_for(name)?;
        let spec = match bounds {
            Some([lo, hi]) => spec.with_bounds(Some(lo), Some(hi)),
            None => spec,
        };
        let conflict = match binding {
            Binding::ElementK(r) => self.bindings.iter().any(|(_, b)| *b == Binding::RegionK(r)),
            Binding::RegionK(r) => self.bindings.iter().any(|(_, b)| *b == Binding::ElementK(r)),
            _ => false,
        };
        if conflict {
            return Err(RunError::Setup(format!(
                "'{name}': a region's conductivity is either one scalar (thermal.k.<group>) or a per-element field (thermal.k_elem.<group>), not both"
            )));
        }
        let id = registry.register(spec)?;
        self.bindings.push((id, binding));
        Ok(id)
    }

    fn apply_parameters(
        &mut self,
        registry: &ParamRegistry,
        coordinates: Option<&[[f64; 3]]>,
    ) -> Result<(), RunError> {
        for (id, binding) in self.bindings.clone() {
            let v = registry.values(id).to_vec();
            match binding {
                Binding::RegionK(r) => {
                    for e in self.model.regions[r].elements.clone() {
                        self.model.k_elem[e] = v[0];
                    }
                }
                Binding::ElementK(r) => {
                    for (i, e) in self.model.regions[r].elements.clone().enumerate() {
                        self.model.k_elem[e] = v[i];
                    }
                }
                Binding::Source(r) => self.model.regions[r].source = v[0],
                Binding::BcTemperature(b) => self.model.set_fixed_temperature(b, v[0]),
                Binding::BcH(b) => {
                    if let BcKind::Convection { t_inf, .. } = self.model.boundaries[b].kind {
                        self.model.set_boundary_kind(b, BcKind::Convection { h: v[0], t_inf });
                    }
                }
                Binding::BcTInf(b) => {
                    if let BcKind::Convection { h, .. } = self.model.boundaries[b].kind {
                        self.model.set_boundary_kind(b, BcKind::Convection { h, t_inf: v[0] });
                    }
                }
                Binding::BcFlux(b) => {
                    self.model.set_boundary_kind(b, BcKind::HeatFlux { q_in: v[0] })
                }
            }
        }
        if let Some(x) = coordinates {
            self.model.coords = x.to_vec();
            self.model.check_coordinates()?;
        }
        if let Some(tr) = &mut self.transient {
            tr.apply_parameters(registry);
        }
        self.forget();
        Ok(())
    }

    fn set_input(&mut self, port: usize, values: &[f64]) -> Result<(), RunError> {
        debug_assert_eq!(port, 0, "the thermal field has one input");
        self.model.set_external_source(Some(values.to_vec()));
        self.solved = false;
        Ok(())
    }

    fn solve(&mut self, mode: SolveMode) -> Result<(), RunError> {
        match mode {
            SolveMode::Alone => {
                self.solve_alone()?;
            }
            // Inside a staggered iteration a warm start within the Newton tolerance would be
            // accepted without a step, freezing T while its source still changes (the
            // iteration would then stop on a zero change): a linear field is solved from zero
            // (one exact step), a nonlinear one with its relative tolerance tightened to 1e-13.
            SolveMode::InCycle if self.model.is_linear() => {
                self.unknowns = vec![0.0; self.model.n_unknowns()];
                self.solve_alone()?;
            }
            SolveMode::InCycle => {
                let saved = self.newton.clone();
                self.newton.rel_tol = saved.rel_tol.min(1e-13);
                let r = self.solve_alone().map(|_| ());
                self.newton = saved;
                r?;
            }
        }
        Ok(())
    }

    fn is_solved(&self) -> bool {
        self.solved && self.temperature.is_some()
    }

    fn state(&self) -> Option<&[f64]> {
        self.temperature.as_deref()
    }

    fn start_state(&self) -> Vec<f64> {
        self.model.nodal_temperature(&self.unknowns)
    }

    fn objective(&self) -> Result<(f64, Vec<f64>), RunError> {
        if self.objective.is_empty() {
            return Ok((0.0, Vec::new()));
        }
        let e = self.evaluate_objective(false)?;
        Ok((e.value, e.terms))
    }

    fn objective_seed(&self, rev: &mut Reverse) -> Result<Seed, RunError> {
        if self.objective.is_empty() {
            return Ok(Seed::default());
        }
        let eval = self.evaluate_objective(rev.wants_coordinates())?;
        if let Some(dx) = &eval.d_coords {
            rev.add_coordinates(dx, 1.0);
        }
        Ok(Seed { state: eval.d_temperature, ..Default::default() })
    }

    fn adjoint_solve(
        &mut self,
        state_bar: &[f64],
        _unknowns_bar: &[f64],
    ) -> Result<Vec<f64>, RunError> {
        self.adjoint_solve_nodal(state_bar)
    }

    fn input_vjp(&self, port: usize, lambda: &[f64]) -> Result<Vec<f64>, RunError> {
        debug_assert_eq!(port, 0, "the thermal field has one input");
        let mut s = self.model.external_source_vjp(lambda);
        s.iter_mut().for_each(|v| *v = -*v);
        Ok(s)
    }

    fn accumulate(
        &self,
        lambda: &[f64],
        t_bar: &[f64],
        rev: &mut Reverse,
        inputs: &[usize],
    ) -> Result<Vec<(usize, Vec<f64>)>, RunError> {
        let t = self.temperature.as_deref().ok_or_else(|| RunError::Setup("solve first".into()))?;
        let has = |f: fn(&Binding) -> bool| self.bindings.iter().any(|(_, b)| f(b));
        let want = gradfem_thermal::VjpRequest {
            conductivity: has(|b| matches!(b, Binding::RegionK(_) | Binding::ElementK(_))),
            source: has(|b| matches!(b, Binding::Source(_))),
            boundary: has(|b| {
                matches!(b, Binding::BcH(_) | Binding::BcTInf(_) | Binding::BcFlux(_))
            }),
            temperature: has(|b| matches!(b, Binding::BcTemperature(_))),
            coords: rev.wants_coordinates(),
        };
        let vjp = self.model.parameter_vjp(t, lambda, want);
        self.subtract_parameter_products(&vjp, Some(t_bar), rev.grad);
        if let Some(dx) = &vjp.coords {
            rev.add_coordinates(dx, -1.0);
        }
        inputs.iter().map(|&p| Ok((p, self.input_vjp(p, lambda)?))).collect()
    }

    fn cell_kernels(&self) -> Option<Box<dyn CellKernels + '_>> {
        let t = match &self.temperature {
            Some(t) => Cow::Borrowed(t.as_slice()),
            None => Cow::Owned(self.model.nodal_temperature(&self.unknowns)),
        };
        let capacity =
            self.transient.as_ref().map(|tr| (tr.heat_capacity_elem(&self.model), tr.lumped()));
        let dofs = self.model.element_dofs();
        Some(Box::new(ThermalCells { model: &self.model, dofs, t, capacity }))
    }

    fn cell_unknowns(&self) -> Vec<f64> {
        self.unknowns.clone()
    }

    fn place_unknowns(&mut self, unknowns: &[f64]) {
        self.unknowns.copy_from_slice(unknowns);
        self.temperature = Some(self.model.nodal_temperature(unknowns));
        self.solved = false;
    }

    fn finish_cycle_solve(&mut self, info: &NewtonInfo) -> Result<(), RunError> {
        let t = self
            .temperature
            .as_deref()
            .ok_or_else(|| RunError::Setup("thermal: no placed state".into()))?;
        self.model.check_conductivity(t)?;
        self.last_solve = SolveTimings {
            assembly_s: info.time_residual_s,
            factor_s: info.time_factor_s,
            solve_s: info.time_solve_s,
            newton_iterations: info.iterations,
            residual_history: info.residual_history.clone(),
            linear_solver: format!("{} (monolithic cycle)", info.linear_solver),
        };
        self.solved = true;
        Ok(())
    }

    fn warm_start(&self) -> Vec<f64> {
        self.unknowns.clone()
    }

    fn set_warm_start(&mut self, start: Vec<f64>) {
        self.set_unknowns(start);
    }

    fn dynamic(&self) -> Option<&dyn Dynamic> {
        self.transient.is_some().then_some(self as &dyn Dynamic)
    }

    fn dynamic_mut(&mut self) -> Option<&mut dyn Dynamic> {
        if self.transient.is_some() { Some(self as &mut dyn Dynamic) } else { None }
    }

    fn second_order_ref(&self) -> Option<&dyn SecondOrder> {
        Some(self)
    }

    fn second_order(&mut self) -> Option<&mut dyn SecondOrder> {
        Some(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Dynamic for ThermalField {
    fn simulate(&mut self) -> Result<(), RunError> {
        let tr = self.transient.as_mut().expect("a transient field");
        let last = tr.solve(&self.model, &self.newton)?;
        self.set_solution(last);
        Ok(())
    }

    fn trajectory(&self) -> Option<(&[f64], &[Vec<f64>])> {
        self.transient.as_ref()?.states()
    }

    fn step_info(&self, n: usize) -> StepInfo {
        self.transient.as_ref().expect("a transient field").step_info(n)
    }

    fn show_state(&mut self, n: usize) -> Result<(), RunError> {
        let t = {
            let (_, states) = self
                .trajectory()
                .ok_or_else(|| RunError::Setup("transient: solve first".into()))?;
            states.get(n).cloned().ok_or_else(|| {
                RunError::Setup(format!("transient: state {n} of {} does not exist", states.len()))
            })?
        };
        self.set_solution(t);
        Ok(())
    }

    fn state_objective(&self) -> Result<Vec<f64>, RunError> {
        self.transient
            .as_ref()
            .expect("a transient field")
            .state_objective(&self.model, &self.objective)
    }

    fn cycle_plan(&self) -> Result<CyclePlan, RunError> {
        self.transient.as_ref().expect("a transient field").cycle_plan(&self.model)
    }

    fn set_cycle_steps(&mut self, steps: Vec<f64>, choice: StepChoice) -> Result<(), RunError> {
        self.transient.as_mut().expect("a transient field").set_chosen_steps(steps, choice);
        Ok(())
    }

    fn set_cycle_sweep_stats(&mut self, recomputed_steps: usize, peak_stored_states: usize) {
        self.transient
            .as_mut()
            .expect("a transient field")
            .set_sweep_stats(recomputed_steps, peak_stored_states);
    }

    fn set_cycle_trajectory(
        &mut self,
        times: Vec<f64>,
        states: Vec<Vec<f64>>,
        newton_iterations: usize,
    ) -> Result<(), RunError> {
        let last = states.last().cloned().expect("the initial state at least");
        self.stepped_on_cycle = true;
        let tr = self.transient.as_mut().expect("a transient field");
        tr.set_run(&self.model, times, states, newton_iterations)?;
        self.set_solution(last);
        Ok(())
    }

    fn capacity_product(&self, v: &[f64]) -> Vec<f64> {
        let tr = self.transient.as_ref().expect("a transient field");
        self.mass_product(&tr.heat_capacity_elem(&self.model), v)
    }

    fn covers_cycle_second_order(&self) -> bool {
        true
    }

    fn capacity_tangent_product(
        &self,
        params: &Gradient,
        coordinates: &[[f64; 3]],
        v: &[f64],
    ) -> Result<Vec<f64>, RunError> {
        let tr = self.transient.as_ref().expect("a transient field");
        let steady = gradfem_thermal::ThermalDirection::zeros(&self.model);
        let d = tr.direction(&self.model, params, steady);
        if coordinates.is_empty() {
            return Ok(self.mass_product(&d.heat_capacity_elem, v));
        }
        let model = &self.model;
        // The mass moves with det J: δM_X v, in the same pass.
        self.consistent_mass_with_coordinates()?;
        let rho_c = tr.heat_capacity_elem(&self.model);
        let out = self.mass_product_with(&d.heat_capacity_elem, v, |e, local| {
            crate::fields::transient::mass_coordinate_jvp(
                model,
                e,
                rho_c[e],
                coordinates,
                v,
                local,
            );
        });
        Ok(out)
    }

    fn capacity_second_order_vjp(
        &self,
        mu: &[f64],
        w: &[f64],
        params: &Gradient,
        coordinates: &[[f64; 3]],
        rev: &mut Reverse,
    ) -> Result<(), RunError> {
        if coordinates.is_empty() && !rev.wants_coordinates() {
            // Linear in ρc, and nothing moves the nodes.
            return Ok(());
        }
        self.consistent_mass_with_coordinates()?;
        let tr = self.transient.as_ref().expect("a transient field");
        let steady = gradfem_thermal::ThermalDirection::zeros(&self.model);
        let d = tr.direction(&self.model, params, steady);
        let rho_c = tr.heat_capacity_elem(&self.model);
        let n = self.model.n_nodes();
        let zero_x = vec![[0.0; 3]; n];
        let dx = if coordinates.is_empty() { &zero_x[..] } else { coordinates };
        let model = &self.model;
        let zeros = vec![0.0; n];
        let mut coords = rev.wants_coordinates().then(|| vec![[0.0; 3]; n]);
        let per_region = self.capacity_element_pass(rho_c.len(), coords.as_mut(), |e, local| {
            let mut scratch = [0.0; 3 * MAX_NODES];
            crate::fields::transient::mass_coordinate_second_order(
                model,
                e,
                rho_c[e],
                d.heat_capacity_elem[e],
                mu,
                &zeros,
                w,
                &zeros,
                dx,
                local.unwrap_or(&mut scratch),
            )
        });
        tr.add_capacity_gradient(&per_region, rev);
        if let Some(c) = &coords {
            rev.add_coordinates(c, -1.0);
        }
        Ok(())
    }

    fn initial_tangent(&self, params: &Gradient) -> Result<Vec<f64>, RunError> {
        let tr = self.transient.as_ref().expect("a transient field");
        let d = tr.direction(&self.model, params, self.thermal_direction(params));
        Ok(d.steady.temperature.iter().zip(&d.initial).map(|(a, b)| a + b).collect())
    }

    fn capacity_vjp(&self, mu: &[f64], w: &[f64], rev: &mut Reverse) -> Result<(), RunError> {
        let tr = self.transient.as_ref().expect("a transient field");
        if rev.wants_coordinates() {
            self.consistent_mass_with_coordinates()?;
        }
        let rho_c = tr.heat_capacity_elem(&self.model);
        let model = &self.model;
        let lumped = tr.lumped();
        let mut coords = rev.wants_coordinates().then(|| vec![[0.0; 3]; self.model.n_nodes()]);
        let per_region = self.capacity_element_pass(rho_c.len(), coords.as_mut(), |e, local| {
            let nodes = model.element_nodes(e);
            let nn = nodes.len();
            let mut me = [0.0; MAX_NODES * MAX_NODES];
            model.element_mass_into(e, 1.0, lumped, &mut me[..nn * nn]);
            let mut s = 0.0;
            for a in 0..nn {
                for b in 0..nn {
                    s += mu[nodes[a]] * me[a * nn + b] * w[nodes[b]];
                }
            }
            if let Some(local) = local {
                let l = crate::fields::transient::mass_coordinate_vjp(model, e, rho_c[e], mu, w);
                local.copy_from_slice(&l[..3 * nn]);
            }
            s
        });
        tr.add_capacity_gradient(&per_region, rev);
        if let Some(c) = &coords {
            rev.add_coordinates(c, -1.0);
        }
        Ok(())
    }

    fn initial_vjp(&self, t_bar: &[f64], rev: &mut Reverse) {
        let tr = self.transient.as_ref().expect("a transient field");
        tr.add_initial_gradient(&self.model, t_bar, rev);
        // The fixed temperatures' direct share at the initial state.
        let owner = self.model.fixed_owner();
        for (id, binding) in &self.bindings {
            if let Binding::BcTemperature(b) = *binding {
                let direct: f64 =
                    (0..owner.len()).filter(|&n| owner[n] == Some(b)).map(|n| t_bar[n]).sum();
                rev.grad.get_mut(*id)[0] += direct;
            }
        }
    }

    fn covers_second_order(&self) -> bool {
        true
    }

    fn time_tangents(
        &mut self,
        params: &Gradient,
        coordinates: &[[f64; 3]],
        inputs: &[Vec<f64>],
    ) -> Result<TimeTangents, RunError> {
        let tr = self.transient.as_ref().expect("a transient field");
        let steady = self.direction_with_state(params, &[], coordinates);
        let mut dir = tr.direction(&self.model, params, steady);
        dir.external_source = input_or_empty(inputs, 0).to_vec();
        let mut tangents = tr.tangents(&self.objective, &dir)?;
        tangents.inputs = inputs.to_vec();
        Ok(tangents)
    }

    fn time_hessian_vector(
        &mut self,
        weights: &[f64],
        d_weights: &[f64],
        seeds: &[Option<Vec<f64>>],
        d_seeds: &[Option<Vec<f64>>],
        params: &Gradient,
        coordinates: &[[f64; 3]],
        tangents: &TimeTangents,
        rev: &mut Reverse,
        inputs: &[usize],
    ) -> Result<TimeInputSeeds, RunError> {
        let want = self.vjp_request(rev.wants_coordinates());
        let tr = self.transient.as_ref().expect("a transient field");
        let steady = self.direction_with_state(params, &[], coordinates);
        let mut dir = tr.direction(&self.model, params, steady);
        dir.external_source = input_or_empty(&tangents.inputs, 0).to_vec();
        let other = StateSeeds { first: seeds, second: d_seeds };
        let (hv, source_bar) = tr.hessian_vector(
            &self.model,
            &self.objective,
            weights,
            d_weights,
            other,
            &dir,
            tangents,
            want,
            rev,
        )?;
        self.add_transient_gradient(&hv, rev);
        let mut out = TimeInputSeeds::default();
        if inputs.contains(&0) && !source_bar.is_empty() {
            out.first.push((0, source_bar));
            out.second.push((0, hv.external_source));
        }
        Ok(out)
    }

    fn time_gradient(
        &mut self,
        weights: &[f64],
        seeds: &[Option<Vec<f64>>],
        rev: &mut Reverse,
        inputs: &[usize],
    ) -> Result<Vec<(usize, Vec<f64>)>, RunError> {
        let want = self.vjp_request(rev.wants_coordinates());
        let tr = self.transient.as_mut().expect("a transient field");
        let g = tr.gradient_seeded(&self.model, &self.objective, seeds, weights, want, rev)?;
        self.add_transient_gradient(&g, rev);
        Ok(if inputs.contains(&0) && !g.external_source.is_empty() {
            vec![(0, g.external_source)]
        } else {
            Vec::new()
        })
    }
}

/// The thermal field's element kernels at a placed temperature.
struct ThermalCells<'a> {
    model: &'a ThermalModel,
    /// The local dofs of every element (the model's layout; it keeps no copy).
    dofs: Vec<usize>,
    t: Cow<'a, [f64]>,
    /// ρc per volume element and whether the mass is lumped, for a field stepped in time.
    capacity: Option<(Vec<f64>, bool)>,
}

impl CellKernels for ThermalCells<'_> {
    fn n_unknowns(&self) -> usize {
        self.model.n_unknowns()
    }
    fn n_elements(&self) -> usize {
        self.model.n_elements()
    }
    fn components(&self) -> usize {
        1
    }
    fn element_dofs(&self, e: usize) -> &[usize] {
        &self.dofs[self.model.element_entries(e)]
    }
    fn element_nodes(&self, e: usize) -> &[usize] {
        self.model.element_nodes(e)
    }
    fn element_cell(&self, e: usize) -> Option<CellId> {
        (e < self.model.n_volume_elements()).then(|| self.model.element_cell(e))
    }
    fn unknowns_adjoint(&self, state_bar: &[f64]) -> Vec<f64> {
        self.model.dofs.gather(state_bar)
    }
    fn lambda_from_unknowns(&self, lambda: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; self.model.n_nodes()];
        self.model.dofs.scatter(lambda, &mut out);
        out
    }
    fn element_residual_tangent(&self, e: usize, ke: Option<&mut [f64]>, fe: &mut [f64]) {
        self.model.element_residual_tangent(e, &self.t, ke, fe);
    }
    fn element_input_tangent(&self, e: usize, port: usize, out: &mut [f64]) -> bool {
        debug_assert_eq!(port, 0, "the thermal field has one input");
        self.model.element_source_tangent(e, out)
    }
    fn element_output_jacobian(
        &self,
        _e: usize,
        _port: usize,
    ) -> Option<(usize, Vec<f64>, Vec<(usize, Vec<f64>)>)> {
        None
    }
    fn describe_dof(&self, dof: usize) -> String {
        self.model.describe_dof(dof)
    }
    fn state(&self) -> &[f64] {
        &self.t
    }
    fn element_capacity(&self, e: usize, out: &mut [f64]) -> bool {
        let Some((rho_c, lumped)) = &self.capacity else { return false };
        if e >= self.model.n_volume_elements() {
            return false;
        }
        self.model.element_mass_into(e, rho_c[e], *lumped, out);
        true
    }
}
