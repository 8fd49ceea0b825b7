//! The thermal problem wired together: model, assembly, Newton, objective, registered
//! parameters and the adjoint gradient.
//!
//! The tape of a thermal problem has two blocks: the solve block R(T; p) = 0 and the
//! functional J(T, p). The reverse pass seeds T̄ = ∂J/∂T, solves (∂R/∂T)ᵀ λ = T̄ with the
//! factorization of the converged forward state, and accumulates p̄ = ∂J/∂p − λᵀ ∂R/∂p element by
//! element; fixed temperatures receive T̄ at their nodes minus λᵀ ∂R/∂T_fixed.

use std::time::Instant;

use gradfem_mesh::Mesh;
use gradfem_solvers::assembly::AssemblyPattern;
use gradfem_solvers::error::SolverError;
use gradfem_solvers::linear::{CholeskySolver, LinearSolver};
use gradfem_solvers::newton::{NewtonInfo, NewtonParams, NonlinearProblem, newton};
use gradfem_solvers::params::{Gradient, ParamId, ParamKind, ParamRegistry, ParamSpec};
use gradfem_solvers::sparse::CsrMatrix;
use gradfem_solvers::tape::{Adjoints, Block, Tape};
use gradfem_thermal::{BcKind, BcSpec, ObjectiveEval, ObjectiveTerm, RegionSpec, ThermalModel};
use serde::Serialize;

use crate::run::{LinearChoice, RunError};

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
    Coordinates,
    /// A morph (index into the shape's morphs).
    Morph(usize),
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

/// Timings of one gradient evaluation.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GradientTimings {
    /// Adjoint solve plus element-wise accumulation of parameter derivatives.
    pub gradient_s: f64,
    pub adjoint_solve_s: f64,
    pub accumulate_s: f64,
}

/// The thermal field, ready to solve and differentiate.
pub struct ThermalProblem {
    pub mesh: Mesh,
    pub model: ThermalModel,
    pub pattern: AssemblyPattern,
    solver: Box<dyn LinearSolver>,
    pub objective: Vec<ObjectiveTerm>,
    pub registry: ParamRegistry,
    bindings: Vec<(ParamId, Binding)>,
    /// The shape parameters (node coordinates, morphs), shared by every field of the problem.
    pub shape: crate::shape::Shape,
    pub newton: NewtonParams,
    /// Free temperatures of the last solve.
    unknowns: Vec<f64>,
    /// Nodal temperatures of the last solve (None before the first solve or after a parameter
    /// change).
    temperature: Option<Vec<f64>>,
    pub last_solve: SolveTimings,
    /// Where the starting guess of the solve came from (e.g. an ANSYS result set), for the
    /// run summary; `None` for the default start (free temperatures 0).
    pub initial_state: Option<String>,
    linear_choice: LinearChoice,
    cg_rel_tol: f64,
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

impl ThermalProblem {
    /// Set up the thermal problem on `mesh`.
    pub fn new(
        mesh: Mesh,
        regions: &[RegionSpec],
        bcs: &[BcSpec],
        objective: Vec<ObjectiveTerm>,
        linear: LinearChoice,
    ) -> Result<Self, RunError> {
        let model = ThermalModel::new(&mesh, regions, bcs)?;
        let shape = crate::shape::Shape::new(model.coords.clone());
        let pattern =
            AssemblyPattern::new(model.n_unknowns(), model.element_offsets(), model.element_dofs());
        let mut p = ThermalProblem {
            mesh,
            model,
            pattern,
            solver: Box::new(CholeskySolver::new("thermal")),
            objective,
            registry: ParamRegistry::new(),
            bindings: Vec::new(),
            shape,
            newton: NewtonParams::default(),
            unknowns: Vec::new(),
            temperature: None,
            last_solve: SolveTimings::default(),
            initial_state: None,
            linear_choice: linear,
            cg_rel_tol: 1e-10,
        };
        // Start Newton from the boundary conditions' mean temperature, not 0 K: a T-dependent
        // conductivity may be unphysical far from its reference.
        p.unknowns = vec![p.model.reference_temperature(); p.model.n_unknowns()];
        p.solver = p.make_solver();
        Ok(p)
    }

    /// Relative tolerance of the iterative solver, when one is used.
    pub fn set_cg_tolerance(&mut self, rel_tol: f64) {
        self.cg_rel_tol = rel_tol;
        self.solver = self.make_solver();
    }

    fn make_solver(&self) -> Box<dyn LinearSolver> {
        let choice = match self.linear_choice {
            _ if !self.model.is_symmetric() => LinearChoice::Lu,
            other => other,
        };
        crate::run::spd_solver("thermal", choice, self.cg_rel_tol, None)
    }

    /// Register a parameter by name: `thermal.k.<group>`, `thermal.k_elem.<group>`,
    /// `thermal.q.<group>`, `bc.<group>.temperature|h|t_inf|flux`, `mesh.coordinates`.
    pub fn register(&mut self, name: &str, bounds: Option<[f64; 2]>) -> Result<ParamId, RunError> {
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
        let id = self.registry.register(spec)?;
        match binding {
            Binding::Coordinates => self.shape.set_coordinates(id),
            Binding::Morph(k) => self.shape.register_morph(id, k),
            _ => {}
        }
        self.bindings.push((id, binding));
        Ok(id)
    }

    /// Every parameter name this problem can register.
    pub fn available_parameters(&self) -> Vec<String> {
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
        names.push("mesh.coordinates".into());
        for m in self.shape.morphs() {
            names.push(format!("morph.{}", m.name));
        }
        names
    }

    fn binding_for(&self, name: &str) -> Result<(Binding, ParamSpec), RunError> {
        let unknown = || {
            RunError::Setup(format!(
                "cannot register '{name}': this problem offers {}",
                self.available_parameters().join(", ")
            ))
        };
        let region = |g: &str| self.model.regions.iter().position(|r| r.name == g);
        let bc = |g: &str| self.model.boundaries.iter().position(|b| b.name == g);
        if name == "mesh.coordinates" {
            let values = self.model.coords.iter().flat_map(|p| p.iter().copied()).collect();
            return Ok((
                Binding::Coordinates,
                ParamSpec::vector(name, ParamKind::NodeCoordinates, values)
                    .with_doc("node coordinates x, y, z per node", "m"),
            ));
        }
        if let Some(m) = name.strip_prefix("morph.") {
            let k = self.shape.morph_index(m).ok_or_else(unknown)?;
            let morph = &self.shape.morphs()[k];
            let bounds = morph.bounds.map_or((None, None), |[a, b]| (Some(a), Some(b)));
            return Ok((
                Binding::Morph(k),
                ParamSpec::scalar(name, morph.reference)
                    .with_bounds(bounds.0, bounds.1)
                    .with_doc("morph: the nodes move by (value − initial value) × its field", "m"),
            ));
        }
        if let Some(g) = name.strip_prefix("thermal.k_elem.") {
            let r = region(g).ok_or_else(unknown)?;
            let values =
                self.model.regions[r].elements.iter().map(|&e| self.model.k_elem[e]).collect();
            return Ok((
                Binding::ElementK(r),
                ParamSpec::vector(name, ParamKind::PerElement { group: g.to_string() }, values)
                    .with_bounds(Some(0.0), None)
                    .with_doc("conductivity k₀ of each cell of the group", "W/(m·K)"),
            ));
        }
        if let Some(g) = name.strip_prefix("thermal.k.") {
            let r = region(g).ok_or_else(unknown)?;
            let e0 = self.model.regions[r].elements[0];
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

    /// Copy the registry's values into the model (after an optimizer or a Taylor test moved
    /// them). Invalidates the last solution.
    pub fn apply_parameters(&mut self) -> Result<(), RunError> {
        for (id, binding) in self.bindings.clone() {
            let v = self.registry.values(id).to_vec();
            match binding {
                Binding::RegionK(r) => {
                    for &e in &self.model.regions[r].elements {
                        self.model.k_elem[e] = v[0];
                    }
                }
                Binding::ElementK(r) => {
                    for (i, &e) in self.model.regions[r].elements.clone().iter().enumerate() {
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
                Binding::Coordinates | Binding::Morph(_) => {}
            }
        }
        if self.shape.is_active() {
            self.model.coords = self.shape.coordinates(&self.registry);
            self.model.check_coordinates()?;
        }
        self.temperature = None;
        Ok(())
    }

    /// Solve the forward problem (Newton; one step when linear). The solver keeps the
    /// factorization of the converged state for the adjoint.
    pub fn solve(&mut self) -> Result<&[f64], RunError> {
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
        self.temperature = None;
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

    /// Solve (if needed) and return J.
    pub fn objective_value(&mut self) -> Result<f64, RunError> {
        if self.temperature.is_none() {
            self.solve()?;
        }
        Ok(self.evaluate_objective(false)?.value)
    }

    fn has_coordinates(&self) -> bool {
        self.shape.is_active()
    }

    /// The gradient of the objective with respect to every registered parameter, by the
    /// adjoint method on a tape of two blocks (the solve and the functional).
    pub fn gradient(&mut self) -> Result<(f64, Gradient, GradientTimings), RunError> {
        self.gradient_seeded(None)
    }

    /// As [`gradient`](Self::gradient), with `extra_t` (per node) added to the temperature
    /// seed ∂J/∂T: the adjoint of a field downstream of T (the thermal stress of the
    /// mechanical field) enters the thermal adjoint this way.
    pub fn gradient_seeded(
        &mut self,
        extra_t: Option<&[f64]>,
    ) -> Result<(f64, Gradient, GradientTimings), RunError> {
        if self.temperature.is_none() {
            self.solve()?;
        }
        let t0 = Instant::now();
        let with_coords = self.has_coordinates();
        let eval = self.evaluate_objective(with_coords)?;
        let mut tape: Tape<ThermalProblem> = Tape::new();
        let temperature = tape.add_variable("temperature", self.model.n_nodes());
        tape.push(Box::new(SolveBlock { temperature, timings: GradientTimings::default() }));
        let mut adj = Adjoints::new(&self.registry, tape.variable_lens());
        adj.vars[temperature].copy_from_slice(&eval.d_temperature);
        if let Some(extra) = extra_t {
            for (v, e) in adj.vars[temperature].iter_mut().zip(extra) {
                *v += e;
            }
        }
        // Direct dependence of J on parameters: the node coordinates.
        if let Some(dx) = &eval.d_coords {
            self.shape.add_partials(&mut adj.grad, dx, 1.0);
        }
        let timings = tape.reverse(self, &mut adj)?;
        let mut gt = GradientTimings::default();
        for t in &timings {
            gt.adjoint_solve_s += t.solve_s;
            gt.accumulate_s += t.accumulate_s;
        }
        gt.gradient_s = t0.elapsed().as_secs_f64();
        Ok((eval.value, adj.grad, gt))
    }

    /// The factorization-backed adjoint solve (∂R/∂T)ᵀ λ = T̄ and the accumulation of
    /// −λᵀ ∂R/∂p into the gradient.
    fn adjoint_of_solve(
        &mut self,
        t_bar: &[f64],
        grad: &mut Gradient,
    ) -> Result<(f64, f64), RunError> {
        let ts = Instant::now();
        let lambda = self.adjoint_solve(t_bar)?;
        let solve_s = ts.elapsed().as_secs_f64();
        let ta = Instant::now();
        self.accumulate_adjoint(&lambda, t_bar, grad)?;
        Ok((solve_s, ta.elapsed().as_secs_f64()))
    }

    /// The adjoint λ per node (0 at fixed nodes) of (∂R/∂T)ᵀ λ = T̄ restricted to the
    /// unknowns, with the factorization of the last solve (the tangent at fixed external
    /// source). `t_bar` is per node.
    pub fn adjoint_solve(&mut self, t_bar: &[f64]) -> Result<Vec<f64>, RunError> {
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

    /// Accumulate −λᵀ ∂R/∂p into `grad` for this field's registered parameters, with λ per
    /// node (0 at fixed nodes); a fixed temperature also receives Σ T̄ over its nodes (`t_bar`
    /// per node: the direct dependence of J on the fixed values).
    pub fn accumulate_adjoint(
        &self,
        lambda: &[f64],
        t_bar: &[f64],
        grad: &mut Gradient,
    ) -> Result<(), RunError> {
        let t = self.temperature.as_deref().ok_or_else(|| RunError::Setup("solve first".into()))?;
        let has = |f: fn(&Binding) -> bool| self.bindings.iter().any(|(_, b)| f(b));
        let want = gradfem_thermal::VjpRequest {
            conductivity: has(|b| matches!(b, Binding::RegionK(_) | Binding::ElementK(_))),
            source: has(|b| matches!(b, Binding::Source(_))),
            boundary: has(|b| {
                matches!(b, Binding::BcH(_) | Binding::BcTInf(_) | Binding::BcFlux(_))
            }),
            temperature: has(|b| matches!(b, Binding::BcTemperature(_))),
            coords: self.shape.is_active(),
        };
        let vjp = self.model.parameter_vjp(t, lambda, want);
        let owner = self.model.fixed_owner();
        for (id, binding) in &self.bindings {
            let g = grad.get_mut(*id);
            match *binding {
                Binding::RegionK(r) => {
                    g[0] -=
                        self.model.regions[r].elements.iter().map(|&e| vjp.k_elem[e]).sum::<f64>();
                }
                Binding::ElementK(r) => {
                    for (gi, &e) in g.iter_mut().zip(&self.model.regions[r].elements) {
                        *gi -= vjp.k_elem[e];
                    }
                }
                Binding::Source(r) => g[0] -= vjp.source[r],
                Binding::BcTemperature(b) => {
                    let direct: f64 =
                        (0..owner.len()).filter(|&n| owner[n] == Some(b)).map(|n| t_bar[n]).sum();
                    g[0] += direct - vjp.temperature[b];
                }
                Binding::BcH(b) => g[0] -= vjp.h[b],
                Binding::BcTInf(b) => g[0] -= vjp.t_inf[b],
                Binding::BcFlux(b) => g[0] -= vjp.q_in[b],
                Binding::Coordinates | Binding::Morph(_) => {}
            }
        }
        if let Some(dx) = &vjp.coords {
            self.shape.add_partials(grad, dx, -1.0);
        }
        Ok(())
    }

    /// Which steady parameter kinds are registered (what a transient gradient must compute).
    pub fn vjp_request(&self) -> gradfem_thermal::VjpRequest {
        let has = |f: fn(&Binding) -> bool| self.bindings.iter().any(|(_, b)| f(b));
        gradfem_thermal::VjpRequest {
            conductivity: has(|b| matches!(b, Binding::RegionK(_) | Binding::ElementK(_))),
            source: has(|b| matches!(b, Binding::Source(_))),
            boundary: has(|b| {
                matches!(b, Binding::BcH(_) | Binding::BcTInf(_) | Binding::BcFlux(_))
            }),
            temperature: has(|b| matches!(b, Binding::BcTemperature(_))),
            coords: self.shape.is_active(),
        }
    }

    /// Add the total derivatives of a transient run (dJ/dp per steady parameter kind) to the
    /// registered parameters' gradient.
    pub fn add_transient_gradient(
        &self,
        g: &crate::transient::TransientGradient,
        grad: &mut Gradient,
    ) {
        for (id, binding) in &self.bindings {
            let v = grad.get_mut(*id);
            match *binding {
                Binding::RegionK(r) => v[0] += g.k_region[r],
                Binding::ElementK(r) => {
                    for (gi, &e) in v.iter_mut().zip(&self.model.regions[r].elements) {
                        *gi += g.k_elem[e];
                    }
                }
                Binding::Source(r) => v[0] += g.source[r],
                Binding::BcTemperature(b) => v[0] += g.temperature[b],
                Binding::BcH(b) => v[0] += g.h[b],
                Binding::BcTInf(b) => v[0] += g.t_inf[b],
                Binding::BcFlux(b) => v[0] += g.q_in[b],
                Binding::Coordinates | Binding::Morph(_) => {}
            }
        }
        if let Some(dx) = &g.coords {
            self.shape.add_partials(grad, dx, 1.0);
        }
    }

    /// Take nodal temperatures computed elsewhere (a transient run's last state) as the
    /// solution: summaries and outputs report them.
    pub fn set_solution(&mut self, nodal: Vec<f64>) {
        assert_eq!(nodal.len(), self.model.n_nodes(), "set_solution: one value per node");
        self.unknowns = self.model.dofs.gather(&nodal);
        self.temperature = Some(nodal);
    }

    /// Free temperatures of the last solve (Newton's start for the next one).
    pub fn unknowns(&self) -> &[f64] {
        &self.unknowns
    }

    /// Set Newton's start for the next solve (free temperatures); forgets the last solution.
    pub fn set_unknowns(&mut self, unknowns: Vec<f64>) {
        assert_eq!(unknowns.len(), self.model.n_unknowns(), "set_unknowns: wrong length");
        self.unknowns = unknowns;
        self.temperature = None;
    }

    /// Values of the registered parameters as one flat vector, with the parameter vector.
    pub fn parameter_vector(&self) -> gradfem_solvers::params::ParamVector {
        gradfem_solvers::params::ParamVector::all(&self.registry)
    }

    /// Taylor test of the gradient over every registered parameter, in a deterministic
    /// direction scaled by each entry's magnitude. Leaves the problem as it was.
    pub fn taylor_test(
        &mut self,
        params: &gradfem_solvers::taylor::TaylorParams,
        mut progress: impl FnMut(usize),
    ) -> Result<gradfem_solvers::taylor::TaylorResult, RunError> {
        let pv = self.parameter_vector();
        let (_, grad, _) = self.gradient()?;
        let converged = self.unknowns.clone();
        let g = grad.flatten(&pv);
        let m0 = pv.gather(&self.registry);
        let dm = direction(&m0, &pv, &self.registry, &self.shape);
        let mut reg = std::mem::take(&mut self.registry);
        let mut count = 0;
        let result = gradfem_solvers::taylor::taylor_test_registry(
            &mut reg,
            &pv,
            &g,
            &dm,
            params,
            |r: &ParamRegistry| -> Result<f64, RunError> {
                self.registry = r.clone();
                self.apply_parameters()?;
                count += 1;
                progress(count);
                self.objective_value()
            },
        );
        // Restore the problem exactly: parameters, and the converged unknowns as Newton's start,
        // so the final solve takes no step and only refactors at the solution.
        self.registry = reg;
        self.apply_parameters()?;
        self.unknowns = converged;
        self.solve()?;
        result
    }

    /// A mesh cell index (over the top-dimension blocks, in block order) for each volume
    /// element, to write per-element fields as cell data.
    pub fn element_output_index(&self) -> Vec<usize> {
        let dim = self.mesh.dim();
        let mut offsets = vec![usize::MAX; self.mesh.blocks.len()];
        let mut acc = 0;
        for (b, blk) in self.mesh.blocks.iter().enumerate() {
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

    /// Number of cells of the top dimension (the length of a cell field).
    pub fn n_output_cells(&self) -> usize {
        self.mesh.n_cells_of_dim(self.mesh.dim())
    }

    /// The mesh's element tags of the entries of each per-element parameter, in the
    /// parameter's order (for `gradients.json`).
    pub fn element_parameter_tags(&self) -> Vec<(ParamId, Vec<u64>)> {
        let mut out = Vec::new();
        for (id, b) in &self.bindings {
            if let Binding::ElementK(r) = *b {
                let tags = self.model.regions[r]
                    .elements
                    .iter()
                    .map(|&e| {
                        let c = self.model.element_cell(e);
                        self.mesh.blocks[c.block].tags[c.index]
                    })
                    .collect();
                out.push((*id, tags));
            }
        }
        out
    }

    /// Per-element parameter gradients as cell fields (name, values over the output cells; NaN
    /// where a cell is not in the parameter's group).
    pub fn element_gradient_fields(&self, grad: &Gradient) -> Vec<(String, Vec<f64>)> {
        let index = self.element_output_index();
        let mut out = Vec::new();
        for (id, b) in &self.bindings {
            if let Binding::ElementK(r) = *b {
                let mut v = vec![f64::NAN; self.n_output_cells()];
                for (gi, &e) in grad.get(*id).iter().zip(&self.model.regions[r].elements) {
                    v[index[e]] = *gi;
                }
                out.push((format!("dJ/d{}", self.registry.get(*id).name), v));
            }
        }
        out
    }
}

/// A deterministic Taylor direction: pseudo-random entries in [−1, 1] scaled by each entry's
/// magnitude (10⁻³ for a zero entry; for coordinates: a thousandth of the mesh size, so the
/// mesh is not inverted; for a morph at value 0: a move of the nodes by a thousandth of the
/// mesh size).
pub fn direction(
    m0: &[f64],
    pv: &gradfem_solvers::params::ParamVector,
    reg: &ParamRegistry,
    shape: &crate::shape::Shape,
) -> Vec<f64> {
    let mut d = gradfem_solvers::taylor::random_direction(m0.len(), 7);
    for id in pv.ids() {
        let range = pv.range(*id).expect("in vector");
        let spec = reg.get(*id);
        let scale = if matches!(spec.kind, ParamKind::NodeCoordinates) {
            // A fraction of the bounding-box size.
            let (lo, hi) = spec
                .values
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
            (hi - lo) * 1e-3
        } else {
            0.0
        };
        let morph = spec.name.strip_prefix("morph.").and_then(|m| shape.morph_scale(m));
        for i in range {
            let s = if scale > 0.0 {
                scale
            } else if m0[i] != 0.0 {
                m0[i].abs()
            } else {
                morph.unwrap_or(1e-3)
            };
            d[i] *= s;
        }
    }
    d
}

/// The solve block on the tape: its adjoint is one transposed solve plus element-wise products.
struct SolveBlock {
    temperature: usize,
    timings: GradientTimings,
}

impl Block<ThermalProblem> for SolveBlock {
    fn name(&self) -> &str {
        "thermal solve"
    }
    fn adjoint(
        &mut self,
        problem: &mut ThermalProblem,
        adj: &mut Adjoints,
    ) -> Result<gradfem_solvers::tape::BlockTiming, SolverError> {
        let t_bar = std::mem::take(&mut adj.vars[self.temperature]);
        let (solve_s, accumulate_s) = problem
            .adjoint_of_solve(&t_bar, &mut adj.grad)
            .map_err(|e| SolverError::Other { field: "thermal".into(), message: e.to_string() })?;
        self.timings.adjoint_solve_s = solve_s;
        self.timings.accumulate_s = accumulate_s;
        Ok(gradfem_solvers::tape::BlockTiming {
            block: self.name().to_string(),
            solve_s,
            accumulate_s,
        })
    }
}
