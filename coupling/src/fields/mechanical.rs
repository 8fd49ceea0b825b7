//! The linear mechanical field: small-strain thermo-elasticity driven by a nodal temperature
//! (its input `temperature`, the `thermal -> mechanical` transfer of the coupling graph), as one
//! [`Field`] of a coupled problem.
//!
//! Forward: K u = f(T, p) with K the stiffness on the free displacement components (symmetric
//! positive definite once rigid-body motions are constrained), factored by sparse Cholesky.
//! K depends only on E, ν and the node coordinates, so its factorization is kept across
//! solves until one of those changes (a new temperature, voltage or load reuses it).
//!
//! Reverse: with the seeds ū = ∂J/∂u, solve K λ = ū (K is symmetric: the same factorization),
//! then p̄ −= λᵀ ∂R/∂p element by element for E, ν, α, T_ref, loads, prescribed displacements
//! and node coordinates, and hand T̄ = −λᵀ ∂R/∂T (per node) up the graph as the seed of
//! whatever made the temperature. A temperature imported from outside (an ANSYS result) takes
//! the place of the input through T = offset + scale · T_imported; T̄ then goes to those two
//! parameters and nothing flows upstream.

use std::any::Any;
use std::time::Instant;

use gradfem_mechanical::linear::objective::{
    ObjectiveKind as MechObjectiveKind, ObjectiveTerm as MechObjectiveTerm, evaluate,
};
use gradfem_mechanical::{
    BcKind, BcSpec, LinearElasticModel, MechanicalDirection, MechanicalSecondOrder, RegionSpec,
    VjpRequest,
};
use gradfem_mesh::Mesh;
use gradfem_solvers::assembly::AssemblyPattern;
use gradfem_solvers::error::SolverError;
use gradfem_solvers::linear::LinearSolver;
use gradfem_solvers::params::{Gradient, ParamId, ParamKind, ParamRegistry, ParamSpec};
use serde::Serialize;

use crate::error::{LinearChoice, RunError};
use crate::field::{Direction, Field, OutputVjp, Port, Reverse, SecondOrder, Seed, SolveMode};

/// How one registered parameter maps onto the mechanical model.
#[derive(Clone, Debug, PartialEq)]
enum MBinding {
    Young(usize),
    YoungElem(usize),
    Poisson(usize),
    Alpha(usize),
    TRef(usize),
    BodyForce(usize),
    Pressure(usize),
    Traction(usize),
    /// A displacement condition's constrained components, in order.
    Displacement(usize, Vec<usize>),
    /// The imported temperature's scale and offset.
    ImportScale,
    ImportOffset,
}

/// Timings of one mechanical solve.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MechanicalSolveTimings {
    pub assembly_s: f64,
    /// Zero when the factorization of an earlier solve was reused.
    pub factor_s: f64,
    pub solve_s: f64,
    pub refactored: bool,
    pub unknowns: usize,
    pub linear_solver: String,
}

/// Timings of the mechanical part of a gradient.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MechanicalGradientTimings {
    pub adjoint_solve_s: f64,
    pub accumulate_s: f64,
}

/// Force balance of the solved field: Σ reactions + Σ external loads = 0 (the thermal strain
/// is self-equilibrated).
#[derive(Clone, Debug, Serialize)]
pub struct ForceBalance {
    /// Reaction force of each constraint condition (N).
    pub reactions: Vec<(String, [f64; 3])>,
    /// Total external load (body forces, tractions, pressures) (N).
    pub external: [f64; 3],
    /// |Σ reactions + external| / (the largest of |reaction|, |external| and the largest
    /// nodal force of the loads at u = 0); 0 for an unloaded body.
    pub relative_imbalance: f64,
}

/// A temperature field from outside the problem (an ANSYS thermal result) as the mechanical
/// field's input, through the transfer T = offset + scale · T_imported, whose vector-Jacobian
/// product gives scale and offset their gradients: dJ/dscale = Σₙ T̄ₙ T_importedₙ,
/// dJ/doffset = Σₙ T̄ₙ.
#[derive(Clone, Debug)]
pub struct ImportedTemperature {
    /// The imported nodal field (one value per mesh node).
    pub values: Vec<f64>,
    pub scale: f64,
    pub offset: f64,
    /// Where it came from, for summaries.
    pub source: String,
}

impl ImportedTemperature {
    /// An imported field with its transfer coefficients.
    pub fn new(values: Vec<f64>, scale: f64, offset: f64, source: String) -> Self {
        ImportedTemperature { values, scale, offset, source }
    }

    /// T = offset + scale · T_imported.
    pub fn field(&self) -> Vec<f64> {
        self.values.iter().map(|v| self.offset + self.scale * v).collect()
    }
}

/// The AMG's near-nullspace (the rigid-body modes of the free displacement components) and,
/// on a mesh of quadratic cells, its first coarse level: the displacement on the vertices
/// ([`LinearElasticModel::vertex_interpolation`]) with the vertices' rigid-body modes.
fn amg_spaces(
    model: &LinearElasticModel,
) -> (Option<gradfem_solvers::amg::NearNullspace>, Option<gradfem_solvers::amg::CoarseSpace>) {
    (rigid_body_modes(model), vertex_coarse_space(&model.coords, model.vertex_interpolation()))
}

/// The rigid-body modes of `model`'s free displacement components.
fn rigid_body_modes(model: &LinearElasticModel) -> Option<gradfem_solvers::amg::NearNullspace> {
    gradfem_solvers::amg::NearNullspace::rigid_body_modes(
        &model.coords,
        &model.unknown_components(),
    )
    .ok()
}

/// The AMG's first coarse level for quadratic cells: P₀ of `vertices` with the rigid-body
/// modes of the vertex unknowns at `coords` (`None` without quadratic cells).
pub(crate) fn vertex_coarse_space(
    coords: &[[f64; 3]],
    vertices: Option<gradfem_mechanical::linear::VertexInterpolation>,
) -> Option<gradfem_solvers::amg::CoarseSpace> {
    use gradfem_solvers::amg::{CoarseSpace, NearNullspace};
    let v = vertices?;
    let p = gradfem_solvers::sparse::CsrMatrix {
        n_rows: v.row_ptr.len() - 1,
        n_cols: v.vertex_unknowns.len(),
        row_ptr: v.row_ptr,
        col_idx: v.col_idx,
        values: v.values,
    };
    let nns = NearNullspace::rigid_body_modes(coords, &v.vertex_unknowns).ok()?;
    CoarseSpace::new(&p, nns).ok()
}

/// The mechanical field, ready to solve and differentiate.
pub struct MechanicalField {
    pub model: LinearElasticModel,
    /// The stiffness pattern; each factorization assembles a fresh matrix on it and hands
    /// it to the solver (AMG-CG keeps it as its finest level; no second copy stays here).
    pattern: AssemblyPattern,
    solver: Box<dyn LinearSolver>,
    /// The objective terms on the displacement.
    pub objective: Vec<MechObjectiveTerm>,
    bindings: Vec<(ParamId, MBinding)>,
    /// Full nodal displacement of the last solve.
    u: Option<Vec<f64>>,
    /// The factorization no longer matches E, ν or the coordinates.
    stale: bool,
    pub last_solve: MechanicalSolveTimings,
    /// The mechanical share of the last gradient (its transposed solve; the accumulation is
    /// timed by the engine).
    pub last_gradient: MechanicalGradientTimings,
    /// The nodal temperature of the input (`None`: no thermal strain).
    temperature: Option<Vec<f64>>,
    solved: bool,
    /// The surface group whose mean displacement the summary reports as the tip displacement.
    pub tip_group: Option<String>,
    /// A temperature from outside (used instead of the thermal field's).
    imported: Option<ImportedTemperature>,
}

fn setup(msg: impl Into<String>) -> RunError {
    RunError::Setup(msg.into())
}

fn mech(e: gradfem_mechanical::MechanicalError) -> RunError {
    RunError::Setup(e.to_string())
}

impl MechanicalField {
    /// Set up the field on `mesh` (the same nodes as the thermal field).
    pub fn new(
        mesh: &Mesh,
        regions: &[RegionSpec],
        bcs: &[BcSpec],
        objective: Vec<MechObjectiveTerm>,
    ) -> Result<Self, RunError> {
        let model = LinearElasticModel::new(mesh, regions, bcs).map_err(mech)?;
        if model.n_unknowns() > 0 && model.constraint_owner().iter().all(Option::is_none) {
            return Err(mech(gradfem_mechanical::MechanicalError::NoSupport));
        }
        let pattern =
            AssemblyPattern::new(model.n_unknowns(), model.element_offsets(), model.element_dofs());
        let (modes, coarse) = amg_spaces(&model);
        let tip_group = mesh
            .groups
            .iter()
            .any(|g| g.name == "free_end" && g.dim == 2)
            .then(|| "free_end".to_string());
        Ok(MechanicalField {
            model,
            pattern,
            solver: crate::error::spd_solver(
                "mechanical",
                LinearChoice::Auto,
                1e-10,
                modes,
                coarse,
            ),
            objective,
            bindings: Vec::new(),
            u: None,
            stale: true,
            last_solve: MechanicalSolveTimings::default(),
            last_gradient: MechanicalGradientTimings::default(),
            tip_group,
            imported: None,
            temperature: None,
            solved: false,
        })
    }

    /// Choose the linear solver: `Auto` routes by predicted cost between sparse Cholesky and
    /// AMG-preconditioned CG with the rigid-body modes as near-nullspace
    /// ([`gradfem_solvers::route::SpdSolver`]), `Cholesky` and `AmgCg` force a route; both give
    /// the compliance's adjoint from the forward solution. LU is accepted (the stiffness is
    /// symmetric, so Cholesky does the same job cheaper).
    pub fn set_linear(&mut self, choice: LinearChoice, cg_rel_tol: f64) {
        let (modes, coarse) = amg_spaces(&self.model);
        self.solver = crate::error::spd_solver("mechanical", choice, cg_rel_tol, modes, coarse);
        self.stale = true;
    }

    /// Solve the field's linear systems with `solver` (a device solver, or any other) until the
    /// next choice of the linear solver. The adjoint uses its transposed solve.
    pub fn set_solver(&mut self, solver: Box<dyn LinearSolver>) {
        self.solver = solver;
        self.stale = true;
    }

    /// What an AMG of this field's systems starts from: the rigid-body modes of the free
    /// displacement components (its near-nullspace) and, on quadratic cells, the first coarse
    /// level (the displacement on the vertices, p-multigrid).
    pub fn amg_spaces(
        &self,
    ) -> (Option<gradfem_solvers::amg::NearNullspace>, Option<gradfem_solvers::amg::CoarseSpace>)
    {
        amg_spaces(&self.model)
    }

    /// The AMG's first coarse level on quadratic cells (the displacement on the vertices with
    /// their rigid-body modes); `None` on linear cells.
    pub fn vertex_coarse_space(&self) -> Option<gradfem_solvers::amg::CoarseSpace> {
        vertex_coarse_space(&self.model.coords, self.model.vertex_interpolation())
    }

    /// Take the temperature from `imported` instead of the thermal field.
    pub fn set_imported_temperature(&mut self, imported: ImportedTemperature) {
        self.imported = Some(imported);
        self.u = None;
    }

    /// The imported temperature, if any.
    pub fn imported_temperature(&self) -> Option<&ImportedTemperature> {
        self.imported.as_ref()
    }

    /// The linear solver's name.
    pub fn linear_solver(&self) -> &'static str {
        self.solver.name()
    }

    /// CG iterations of the last linear solve (`None` with a direct solver).
    pub fn last_cg_iterations(&self) -> Option<usize> {
        self.solver.last_iterations()
    }

    /// Adjoint solves answered from the forward solution (the self-adjoint compliance).
    pub fn self_adjoint_solves(&self) -> usize {
        self.solver.self_adjoint_solves()
    }

    /// Parameter names this field offers.
    fn parameter_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        if self.imported.is_some() {
            names.push("mechanical.temperature.scale".into());
            names.push("mechanical.temperature.offset".into());
        }
        for r in &self.model.regions {
            for p in ["young", "young_elem", "poisson", "alpha", "t_ref", "body_force"] {
                names.push(format!("mechanical.{p}.{}", r.name));
            }
        }
        for b in &self.model.boundaries {
            match b.kind {
                BcKind::Pressure { .. } => names.push(format!("bc.{}.pressure", b.name)),
                BcKind::Traction { .. } => names.push(format!("bc.{}.traction", b.name)),
                BcKind::Displacement { .. } => names.push(format!("bc.{}.displacement", b.name)),
                BcKind::Fixed | BcKind::Roller { .. } => {}
            }
        }
        names
    }

    /// True when `name` is a parameter of this field (whether or not it exists).
    fn owns_name(name: &str) -> bool {
        name.starts_with("mechanical.")
            || name.ends_with(".pressure")
            || name.ends_with(".traction")
            || name.ends_with(".displacement")
    }

    /// Register a mechanical parameter into the problem's registry: `mechanical.young.<g>`,
    /// `mechanical.young_elem.<g>` (per element), `mechanical.poisson.<g>`,
    /// `mechanical.alpha.<g>`, `mechanical.t_ref.<g>`, `mechanical.body_force.<g>` (3
    /// components), `bc.<g>.pressure`, `bc.<g>.traction` (3 components),
    /// `bc.<g>.displacement` (the condition's prescribed components, in order x, y, z).
    fn register_param(
        &mut self,
        registry: &mut ParamRegistry,
        name: &str,
        bounds: Option<[f64; 2]>,
    ) -> Result<ParamId, RunError> {
        let (binding, spec) = self.binding_for(name)?;
        let conflict = self.bindings.iter().any(|(_, b)| {
            matches!(
                (b, &binding),
                (MBinding::Young(a), MBinding::YoungElem(c))
                    | (MBinding::YoungElem(a), MBinding::Young(c)) if a == c
            )
        });
        if conflict {
            return Err(setup(format!(
                "'{name}': a region's Young's modulus is either one scalar (mechanical.young.<group>) or a per-element field (mechanical.young_elem.<group>), not both"
            )));
        }
        let spec = match bounds {
            Some([lo, hi]) => spec.with_bounds(Some(lo), Some(hi)),
            None => spec,
        };
        let id = registry.register(spec)?;
        self.bindings.push((id, binding));
        Ok(id)
    }

    fn binding_for(&self, name: &str) -> Result<(MBinding, ParamSpec), RunError> {
        let unknown = || RunError::UnknownParameter(name.to_string());
        let m = &self.model;
        if let Some(what) = name.strip_prefix("mechanical.temperature.") {
            let imp = self.imported.as_ref().ok_or_else(unknown)?;
            return Ok(match what {
                "scale" => (
                    MBinding::ImportScale,
                    ParamSpec::scalar(name, imp.scale)
                        .with_doc("scale of the imported temperature", "1"),
                ),
                "offset" => (
                    MBinding::ImportOffset,
                    ParamSpec::scalar(name, imp.offset)
                        .with_doc("offset of the imported temperature", "K"),
                ),
                _ => return Err(unknown()),
            });
        }
        if let Some(rest) = name.strip_prefix("mechanical.") {
            let (what, g) = rest.split_once('.').ok_or_else(unknown)?;
            let r = m.regions.iter().position(|r| r.name == g).ok_or_else(unknown)?;
            let region = &m.regions[r];
            let e0 = region.elements[0];
            let positive = |s: ParamSpec| s.with_bounds(Some(0.0), None);
            return Ok(match what {
                "young" => (
                    MBinding::Young(r),
                    positive(ParamSpec::scalar(name, m.young_elem[e0]))
                        .with_doc("Young's modulus E of the group", "Pa"),
                ),
                "young_elem" => (
                    MBinding::YoungElem(r),
                    positive(ParamSpec::vector(
                        name,
                        ParamKind::PerElement { group: g.to_string() },
                        region.elements.iter().map(|&e| m.young_elem[e]).collect(),
                    ))
                    .with_doc("Young's modulus E of each cell of the group", "Pa"),
                ),
                "poisson" => (
                    MBinding::Poisson(r),
                    ParamSpec::scalar(name, m.poisson_elem[e0])
                        .with_bounds(Some(-1.0), Some(0.5))
                        .with_doc("Poisson's ratio ν of the group", "1"),
                ),
                "alpha" => (
                    MBinding::Alpha(r),
                    ParamSpec::scalar(name, region.alpha)
                        .with_doc("thermal expansion coefficient α", "1/K"),
                ),
                "t_ref" => (
                    MBinding::TRef(r),
                    ParamSpec::scalar(name, region.t_ref).with_doc("stress-free temperature", "K"),
                ),
                "body_force" => (
                    MBinding::BodyForce(r),
                    ParamSpec::vector(name, ParamKind::Field, region.body_force.to_vec())
                        .with_doc("body force per volume (x, y, z)", "N/m³"),
                ),
                _ => return Err(unknown()),
            });
        }
        let rest = name.strip_prefix("bc.").ok_or_else(unknown)?;
        let (g, field) = rest.rsplit_once('.').ok_or_else(unknown)?;
        let b = m.boundaries.iter().position(|b| b.name == g).ok_or_else(unknown)?;
        Ok(match (field, &m.boundaries[b].kind) {
            ("pressure", BcKind::Pressure { pressure }) => (
                MBinding::Pressure(b),
                ParamSpec::scalar(name, *pressure).with_doc("pressure into the body", "Pa"),
            ),
            ("traction", BcKind::Traction { traction }) => (
                MBinding::Traction(b),
                ParamSpec::vector(name, ParamKind::Field, traction.to_vec())
                    .with_doc("traction vector (x, y, z)", "Pa"),
            ),
            ("displacement", BcKind::Displacement { value }) => {
                let comps: Vec<usize> = (0..3).filter(|&c| value[c].is_some()).collect();
                let values = comps.iter().map(|&c| value[c].expect("constrained")).collect();
                let spec = if comps.len() == 1 {
                    ParamSpec::scalar(name, value[comps[0]].expect("constrained"))
                } else {
                    ParamSpec::vector(name, ParamKind::Field, values)
                };
                (
                    MBinding::Displacement(b, comps),
                    spec.with_doc("prescribed displacement components", "m"),
                )
            }
            _ => return Err(unknown()),
        })
    }

    /// Copy the registry's values into the model and the coordinates (when given).
    /// Invalidates the solution; E, ν or coordinates invalidate the factorization.
    fn apply(
        &mut self,
        reg: &ParamRegistry,
        coordinates: Option<&[[f64; 3]]>,
    ) -> Result<(), RunError> {
        for (id, binding) in &self.bindings {
            let v = reg.values(*id);
            let m = &mut self.model;
            match binding {
                MBinding::Young(r) => {
                    for e in m.regions[*r].elements.clone() {
                        m.young_elem[e] = v[0];
                    }
                    self.stale = true;
                }
                MBinding::YoungElem(r) => {
                    for (i, e) in m.regions[*r].elements.clone().into_iter().enumerate() {
                        m.young_elem[e] = v[i];
                    }
                    self.stale = true;
                }
                MBinding::Poisson(r) => {
                    for e in m.regions[*r].elements.clone() {
                        m.poisson_elem[e] = v[0];
                    }
                    self.stale = true;
                }
                MBinding::Alpha(r) => m.regions[*r].alpha = v[0],
                MBinding::TRef(r) => m.regions[*r].t_ref = v[0],
                MBinding::BodyForce(r) => m.regions[*r].body_force = [v[0], v[1], v[2]],
                MBinding::Pressure(b) => {
                    m.set_boundary_kind(*b, BcKind::Pressure { pressure: v[0] })
                }
                MBinding::Traction(b) => {
                    m.set_boundary_kind(*b, BcKind::Traction { traction: [v[0], v[1], v[2]] })
                }
                MBinding::Displacement(b, comps) => {
                    let mut value = [None; 3];
                    for (k, &c) in comps.iter().enumerate() {
                        value[c] = Some(v[k]);
                    }
                    m.set_boundary_kind(*b, BcKind::Displacement { value });
                }
                MBinding::ImportScale => {
                    if let Some(i) = &mut self.imported {
                        i.scale = v[0];
                    }
                }
                MBinding::ImportOffset => {
                    if let Some(i) = &mut self.imported {
                        i.offset = v[0];
                    }
                }
            }
        }
        for &e in &self.model.young_elem {
            if !(e > 0.0 && e.is_finite()) {
                return Err(setup(format!(
                    "mechanical: Young's modulus must be positive and finite, got {e}"
                )));
            }
        }
        for &nu in &self.model.poisson_elem {
            if !(nu > -1.0 && nu < 0.5) {
                return Err(setup(format!(
                    "mechanical: Poisson's ratio must lie in (−1, 0.5), got {nu}"
                )));
            }
        }
        if let Some(x) = coordinates {
            self.model.coords = x.to_vec();
            self.model.check_coordinates().map_err(mech)?;
            self.stale = true;
        }
        self.u = None;
        self.solved = false;
        Ok(())
    }

    /// Solve for the displacement at the input temperature (one value per mesh node; none: no
    /// thermal strain) or the imported one. Every node of a mechanical element needs a finite
    /// temperature.
    pub fn solve_displacement(&mut self) -> Result<&[f64], RunError> {
        let imported = self.imported.as_ref().map(ImportedTemperature::field);
        let input = self.temperature.take();
        let t = imported.as_deref().or(input.as_deref());
        if let Some(t) = t {
            let mut bad = None;
            for e in 0..self.model.n_volume_elements() {
                if let Some(&n) = self.model.element_nodes(e).iter().find(|&&n| !t[n].is_finite()) {
                    bad = Some(n);
                    break;
                }
            }
            if let Some(n) = bad {
                return Err(setup(format!(
                    "mechanical: {} has no temperature: every mechanical region needs a thermal material",
                    self.model.describe_node(n)
                )));
            }
        }
        let set = self.model.set_temperature(t.map(<[f64]>::to_vec)).map_err(mech);
        self.temperature = input;
        set?;
        let n = self.model.n_unknowns();
        let ta = Instant::now();
        let u0 = self.model.nodal_displacement(&vec![0.0; n]);
        let mut rhs = vec![0.0; n];
        let model = &self.model;
        let matrix = if self.stale {
            let mut matrix = self.pattern.new_matrix();
            self.pattern.assemble_into(&mut matrix, &mut rhs, |e, ke, fe| {
                model.element_residual_tangent(e, &u0, Some(ke), fe)
            });
            Some(matrix)
        } else {
            self.pattern.assemble_vector_into(&mut rhs, |e, fe| {
                model.element_residual_tangent(e, &u0, None, fe)
            });
            None
        };
        let assembly_s = ta.elapsed().as_secs_f64();
        let tf = Instant::now();
        let refactored = matrix.is_some();
        if let Some(matrix) = matrix
            && n > 0
        {
            self.solver.factor_owned(matrix).map_err(|e| match e {
                // With E > 0 and −1 < ν < 0.5 (checked when the problem is read) the stiffness
                // is positive definite unless the supports leave a rigid motion free.
                SolverError::NotPositiveDefinite { detail, .. } => setup(format!(
                    "mechanical: the stiffness matrix is singular ({detail}): the supports do \
                     not hold the body against every rigid motion (3 translations, 3 \
                     rotations); fix more components, e.g. a `fixed` face, or rollers that \
                     block x, y and z and the rotations about them"
                )),
                other => other.into(),
            })?;
            self.stale = false;
        }
        let factor_s = tf.elapsed().as_secs_f64();
        let ts = Instant::now();
        rhs.iter_mut().for_each(|v| *v = -*v);
        if n > 0 {
            self.solver.solve_in_place(&mut rhs)?;
        }
        if let Some(i) = rhs.iter().position(|v| !v.is_finite()) {
            return Err(setup(format!(
                "mechanical: the solution is not finite at {}",
                self.model.describe_dof(i)
            )));
        }
        let u = self.model.nodal_displacement(&rhs);
        self.last_solve = MechanicalSolveTimings {
            assembly_s,
            factor_s,
            solve_s: ts.elapsed().as_secs_f64(),
            refactored,
            unknowns: n,
            linear_solver: self.solver.name().to_string(),
        };
        self.u = Some(u);
        self.solved = true;
        Ok(self.u.as_deref().expect("set above"))
    }

    /// The CSR pattern and element slot tables of the stiffness assembly.
    pub fn pattern(&self) -> &AssemblyPattern {
        &self.pattern
    }

    /// The full nodal displacement (`3·n_nodes`) of the last solve.
    pub fn displacement(&self) -> Option<&[f64]> {
        self.u.as_deref()
    }

    fn solved_displacement(&self) -> Result<&[f64], RunError> {
        self.u.as_deref().ok_or_else(|| setup("mechanical: solve first"))
    }

    /// The mechanical objective terms at the last solution: (Σ weighted, each weighted term).
    pub fn objective_terms(&self) -> Result<(f64, Vec<f64>), RunError> {
        self.objective_terms_of(self.solved_displacement()?)
    }

    /// The objective terms at the nodal displacement `u` (e.g. a state of a transient run's
    /// history, at the model's current temperature for the von Mises terms).
    pub fn objective_terms_of(&self, u: &[f64]) -> Result<(f64, Vec<f64>), RunError> {
        if self.objective.is_empty() {
            return Ok((0.0, Vec::new()));
        }
        let e = evaluate(&self.model, &self.objective, u, false).map_err(mech)?;
        let weighted = e.terms.iter().zip(&self.objective).map(|(v, t)| v * t.weight).collect();
        Ok((e.value, weighted))
    }

    fn want(&self, coords: bool, temperature: bool) -> VjpRequest {
        let has = |f: fn(&MBinding) -> bool| self.bindings.iter().any(|(_, b)| f(b));
        VjpRequest {
            material: has(|b| {
                matches!(b, MBinding::Young(_) | MBinding::YoungElem(_) | MBinding::Poisson(_))
            }),
            thermal: has(|b| matches!(b, MBinding::Alpha(_) | MBinding::TRef(_))),
            loads: has(|b| {
                matches!(b, MBinding::BodyForce(_) | MBinding::Pressure(_) | MBinding::Traction(_))
            }),
            displacement: has(|b| matches!(b, MBinding::Displacement(..))),
            temperature: temperature && self.model.temperature().is_some(),
            coords,
        }
    }

    /// Add per-element E and ν partials (times `scale`) to the registered E/ν parameters.
    fn add_material(&self, grad: &mut Gradient, d_young: &[f64], d_poisson: &[f64], scale: f64) {
        for (id, b) in &self.bindings {
            let g = grad.get_mut(*id);
            match b {
                MBinding::Young(r) => {
                    g[0] += scale
                        * self.model.regions[*r].elements.iter().map(|&e| d_young[e]).sum::<f64>();
                }
                MBinding::YoungElem(r) => {
                    for (gi, &e) in g.iter_mut().zip(&self.model.regions[*r].elements) {
                        *gi += scale * d_young[e];
                    }
                }
                MBinding::Poisson(r) => {
                    g[0] += scale
                        * self.model.regions[*r]
                            .elements
                            .iter()
                            .map(|&e| d_poisson[e])
                            .sum::<f64>();
                }
                _ => {}
            }
        }
    }

    /// The mean displacement vector over a group (volume or surface).
    pub fn mean_displacement(&self, group: &str) -> Result<[f64; 3], RunError> {
        self.mean_displacement_of(self.solved_displacement()?, group)
    }

    /// The mean of the nodal displacement `u` over a group (volume or surface).
    pub fn mean_displacement_of(&self, u: &[f64], group: &str) -> Result<[f64; 3], RunError> {
        let mut out = [0.0; 3];
        for (k, o) in out.iter_mut().enumerate() {
            let mut d = [0.0; 3];
            d[k] = 1.0;
            let term = MechObjectiveTerm {
                weight: 1.0,
                kind: MechObjectiveKind::AverageDisplacement { group: group.into(), direction: d },
            };
            *o = evaluate(&self.model, &[term], u, false).map_err(mech)?.value;
        }
        Ok(out)
    }

    /// The largest von Mises stress over the quadrature points (Pa).
    pub fn max_von_mises(&self) -> Result<f64, RunError> {
        let s = self.model.stress(self.solved_displacement()?);
        Ok(s.qp_von_mises.iter().copied().fold(0.0, f64::max))
    }

    /// Reactions per constraint and the total external load.
    pub fn force_balance(&self) -> Result<ForceBalance, RunError> {
        let u = self.solved_displacement()?;
        let reactions = self.model.reactions(u);
        let f = self.model.load_vector();
        let mut external = [0.0; 3];
        for (d, v) in f.iter().enumerate() {
            external[d % 3] += v;
        }
        let mut sum = external;
        // The size of the forces at play: external loads, reactions, and the largest nodal
        // force of the loads at u = 0 (thermal strain included), so that a free, stress-free
        // body's round-off reactions read as balanced.
        let r0 = self.model.full_residual(&vec![0.0; u.len()]);
        let mut scale = external
            .iter()
            .map(|v| v * v)
            .sum::<f64>()
            .sqrt()
            .max(r0.iter().fold(0.0, |a: f64, v| a.max(v.abs())));
        let mut list = Vec::new();
        for (b, r) in self.model.boundaries.iter().zip(&reactions) {
            if b.kind.constrained_values().iter().any(Option::is_some) {
                for k in 0..3 {
                    sum[k] += r[k];
                }
                scale = scale.max(r.iter().map(|v| v * v).sum::<f64>().sqrt());
                list.push((b.name.clone(), *r));
            }
        }
        let imbalance = sum.iter().map(|v| v * v).sum::<f64>().sqrt();
        Ok(ForceBalance {
            reactions: list,
            external,
            relative_imbalance: if scale > 0.0 { imbalance / scale } else { 0.0 },
        })
    }

    /// The output cell (index among the mesh's cells of the top dimension, in block order)
    /// of each volume element, matched by cell tag.
    pub fn cell_output_index(&self, mesh: &Mesh) -> Vec<Option<usize>> {
        let model = &self.model;
        output_cell_index(mesh, (0..model.n_volume_elements()).map(|e| model.element_cell_tag(e)))
    }

    /// Per-element gradient fields (per-element parameters) for the XDMF output: (parameter,
    /// value per volume element of the model, NaN elsewhere).
    pub fn element_gradient_fields(&self, grad: &Gradient) -> Vec<(ParamId, Vec<f64>)> {
        let mut out = Vec::new();
        for (id, b) in &self.bindings {
            if let MBinding::YoungElem(r) = b {
                let mut v = vec![f64::NAN; self.model.n_volume_elements()];
                for (gi, &e) in grad.get(*id).iter().zip(&self.model.regions[*r].elements) {
                    v[e] = *gi;
                }
                out.push((*id, v));
            }
        }
        out
    }

    /// The mesh's element tags of the entries of each per-element parameter, in the
    /// parameter's order (for `gradients.json`).
    pub fn element_parameter_tags(&self) -> Vec<(ParamId, Vec<u64>)> {
        let mut out = Vec::new();
        for (id, b) in &self.bindings {
            if let MBinding::YoungElem(r) = b {
                let tags = self.model.regions[*r]
                    .elements
                    .iter()
                    .map(|&e| self.model.element_cell_tag(e))
                    .collect();
                out.push((*id, tags));
            }
        }
        out
    }
}

/// The output cell (position among the mesh's top-dimensional cells, blocks in order: the
/// order of cell fields) of each element of a model, found by the element's cell tag; `None`
/// for an element whose tag no top-dimensional cell has.
pub fn output_cell_index(
    mesh: &Mesh,
    element_tags: impl Iterator<Item = u64>,
) -> Vec<Option<usize>> {
    let dim = mesh.dim();
    let mut by_tag = std::collections::HashMap::new();
    let mut acc = 0;
    for blk in mesh.blocks.iter().filter(|b| b.cell_type.dim() == dim) {
        for (i, &t) in blk.tags.iter().enumerate() {
            by_tag.insert(t, acc + i);
        }
        acc += blk.len();
    }
    element_tags.map(|t| by_tag.get(&t).copied()).collect()
}

// ----- second order ----------------------------------------------------------------------

impl MechanicalField {
    /// The summed weight of the compliance terms (0 without one).
    fn compliance_weight(&self) -> f64 {
        self.objective
            .iter()
            .filter(|t| t.kind == MechObjectiveKind::Compliance)
            .map(|t| t.weight)
            .sum()
    }

    /// Add `scale · vᵀ ∂f/∂p = −scale · vᵀ ∂R/∂p` for the registered loads (body forces,
    /// pressures, tractions): the explicit load partials of compliance fᵀu with v = u, and
    /// their derivative along a direction with v = δu.
    fn add_load_products(&self, u: &[f64], v: &[f64], scale: f64, grad: &mut Gradient) {
        if !self.want(false, false).loads {
            return;
        }
        let load_only = VjpRequest {
            material: false,
            thermal: false,
            loads: true,
            displacement: false,
            temperature: false,
            coords: false,
        };
        let l = self.model.parameter_vjp(u, v, load_only);
        for (id, b) in &self.bindings {
            let g = grad.get_mut(*id);
            match b {
                MBinding::BodyForce(r) => (0..3).for_each(|k| g[k] -= scale * l.body_force[*r][k]),
                MBinding::Pressure(bc) => g[0] -= scale * l.pressure[*bc],
                MBinding::Traction(bc) => (0..3).for_each(|k| g[k] -= scale * l.traction[*bc][k]),
                _ => {}
            }
        }
    }

    /// Add `scale` times the loads' second-order products (per region and boundary
    /// condition) to the registered loads' gradients.
    fn add_load_second_order(&self, so: &MechanicalSecondOrder, scale: f64, grad: &mut Gradient) {
        for (id, b) in &self.bindings {
            let g = grad.get_mut(*id);
            match b {
                MBinding::BodyForce(r) => (0..3).for_each(|k| g[k] += scale * so.body_force[*r][k]),
                MBinding::Pressure(bc) => g[0] += scale * so.pressure[*bc],
                MBinding::Traction(bc) => (0..3).for_each(|k| g[k] += scale * so.traction[*bc][k]),
                _ => {}
            }
        }
    }

    /// The model direction of `params` with the state tangent `state` (empty: the prescribed
    /// part) and the temperature input's tangent.
    fn mechanical_direction(&self, dir: &Direction) -> MechanicalDirection {
        let m = &self.model;
        let mut d = MechanicalDirection::zeros(m);
        for (id, b) in &self.bindings {
            let v = dir.params.get(*id);
            match b {
                MBinding::Young(r) => {
                    m.regions[*r].elements.iter().for_each(|&e| d.young_elem[e] += v[0])
                }
                MBinding::YoungElem(r) => {
                    for (&e, vi) in m.regions[*r].elements.iter().zip(v) {
                        d.young_elem[e] += vi;
                    }
                }
                MBinding::Poisson(r) => {
                    m.regions[*r].elements.iter().for_each(|&e| d.poisson_elem[e] += v[0])
                }
                MBinding::Alpha(r) => d.alpha[*r] += v[0],
                MBinding::TRef(r) => d.t_ref[*r] += v[0],
                MBinding::BodyForce(r) => (0..3).for_each(|k| d.body_force[*r][k] += v[k]),
                MBinding::Pressure(bc) => d.pressure[*bc] += v[0],
                MBinding::Traction(bc) => (0..3).for_each(|k| d.traction[*bc][k] += v[k]),
                MBinding::Displacement(..) | MBinding::ImportScale | MBinding::ImportOffset => {}
            }
        }
        d.displacement = if dir.state.is_empty() {
            self.prescribed_tangent(dir.params)
        } else {
            dir.state.to_vec()
        };
        if let Some(dt) = dir.inputs.first().filter(|v| !v.is_empty()) {
            d.temperature.copy_from_slice(dt);
        }
        d.coords = dir.coordinates.to_vec();
        // An imported temperature T = offset + scale · T_imported moves with its coefficients.
        if let Some(imp) = &self.imported {
            for (id, b) in &self.bindings {
                let v = dir.params.get(*id)[0];
                match b {
                    MBinding::ImportScale => {
                        d.temperature.iter_mut().zip(&imp.values).for_each(|(t, x)| *t += v * x)
                    }
                    MBinding::ImportOffset => d.temperature.iter_mut().for_each(|t| *t += v),
                    _ => {}
                }
            }
        }
        d
    }

    /// The imported temperature's transfer takes a temperature seed `t_bar`: its products with
    /// scale and offset (Σ T̄ₙ T_importedₙ and Σ T̄ₙ) go to their gradients.
    fn imported_products(&self, t_bar: &[f64], grad: &mut Gradient) {
        let Some(imp) = &self.imported else { return };
        for (id, b) in &self.bindings {
            let d = match b {
                MBinding::ImportScale => {
                    t_bar.iter().zip(&imp.values).map(|(tb, v)| tb * v).sum::<f64>()
                }
                MBinding::ImportOffset => t_bar.iter().sum::<f64>(),
                _ => continue,
            };
            grad.get_mut(*id)[0] += d;
        }
    }
}

impl MechanicalField {
    /// [`SecondOrder::objective_hessian`] with shape parameters: the mean displacement over a
    /// group (its area or volume moves with the nodes) and the compliance (its loads move)
    /// by hyper-dual numbers, and so is the von Mises p-norm; cotangents are free of X; a
    /// point displacement follows its located point as the nodes move (closed form).
    fn objective_hessian_moving(
        &self,
        u: &[f64],
        d: &MechanicalDirection,
        rev: &mut Reverse,
    ) -> Result<Seed, RunError> {
        use gradfem_mechanical::linear::objective;
        let mut state = vec![0.0; u.len()];
        for term in &self.objective {
            let w = term.weight;
            let coords = rev.coordinate_request();
            // Each term's (∂/∂u, ∂/∂X) parts along the direction.
            let (hu, hx) = match &term.kind {
                MechObjectiveKind::Linear { .. } | MechObjectiveKind::Compliance => continue,
                MechObjectiveKind::AverageDisplacement { group, direction } => {
                    objective::average_displacement_hessian(
                        &self.model,
                        group,
                        *direction,
                        u,
                        &d.displacement,
                        &d.coords,
                        coords,
                    )
                    .map_err(mech)?
                }
                MechObjectiveKind::PointDisplacement { point, direction } => {
                    objective::point_displacement_hessian(
                        &self.model,
                        *point,
                        *direction,
                        u,
                        &d.displacement,
                        &d.coords,
                        coords,
                    )
                    .map_err(mech)?
                }
                MechObjectiveKind::VonMisesPNorm { group, p } => {
                    let els = self.model.group_elements(group).map_err(mech)?;
                    let (hu, he, hn, hx) =
                        self.model.von_mises_pnorm_hessian_moving(els, *p, u, d, coords);
                    self.add_material(rev.grad, &he, &hn, w);
                    (hu, hx)
                }
            };
            state.iter_mut().zip(&hu).for_each(|(s, v)| *s += w * v);
            rev.add_coordinate_part(&hx, w);
        }
        let compliance = self.compliance_weight();
        if compliance != 0.0 {
            let ch = self.model.compliance_hessian(u, d, rev.coordinate_request());
            state.iter_mut().zip(&ch.displacement).for_each(|(s, v)| *s += compliance * v);
            self.add_load_second_order(&ch, compliance, rev.grad);
            rev.add_coordinate_part(&ch.coords, compliance);
        }
        Ok(Seed { state, ..Seed::default() })
    }
}

impl SecondOrder for MechanicalField {
    fn prescribed_tangent(&self, params: &Gradient) -> Vec<f64> {
        let owner = self.model.constraint_owner();
        let mut du = vec![0.0; 3 * self.model.n_nodes()];
        for (id, b) in &self.bindings {
            if let MBinding::Displacement(bc, comps) = b {
                let v = params.get(*id);
                for (k, &c) in comps.iter().enumerate() {
                    for n in 0..self.model.n_nodes() {
                        if owner[3 * n + c] == Some(*bc) {
                            du[3 * n + c] += v[k];
                        }
                    }
                }
            }
        }
        du
    }

    fn residual_jvp(&self, dir: &Direction) -> Result<Vec<f64>, RunError> {
        let u = self.solved_displacement()?;
        let d = self.mechanical_direction(dir);
        Ok(self.model.dofs.gather(&self.model.residual_jvp(u, &d)))
    }

    fn tangent(
        &mut self,
        params: &Gradient,
        coordinates: &[[f64; 3]],
        inputs: &[Vec<f64>],
    ) -> Result<Vec<f64>, RunError> {
        let u = self.solved_displacement()?.to_vec();
        let prescribed = self.prescribed_tangent(params);
        let d = self.mechanical_direction(&Direction {
            params,
            state: &prescribed,
            inputs,
            coordinates,
        });
        let mut rhs = self.model.dofs.gather(&self.model.residual_jvp(&u, &d));
        rhs.iter_mut().for_each(|v| *v = -*v);
        if !rhs.is_empty() {
            self.solver.solve_in_place(&mut rhs)?;
        }
        let mut du = prescribed;
        self.model.dofs.scatter(&rhs, &mut du);
        Ok(du)
    }

    fn second_order_vjp(
        &self,
        lambda: &[f64],
        dir: &Direction,
        rev: &mut Reverse,
    ) -> Result<OutputVjp, RunError> {
        let u = self.solved_displacement()?;
        let d = self.mechanical_direction(dir);
        let coords = rev.coordinate_request();
        let so = self.model.second_order_vjp(u, lambda, &d, coords);
        self.add_material(rev.grad, &so.young_elem, &so.poisson_elem, -1.0);
        // The loads have second-order terms only when the nodes move.
        if !coords.is_none() {
            self.add_load_second_order(&so, -1.0, rev.grad);
        }
        rev.add_coordinate_part(&so.coords, -1.0);
        for (id, b) in &self.bindings {
            match b {
                MBinding::Alpha(r) => rev.grad.get_mut(*id)[0] -= so.alpha[*r],
                MBinding::TRef(r) => rev.grad.get_mut(*id)[0] -= so.t_ref[*r],
                _ => {}
            }
        }
        let t_bar: Vec<f64> = so.temperature.into_iter().map(|v| -v).collect();
        let inputs = if self.imported.is_some() {
            self.imported_products(&t_bar, rev.grad);
            Vec::new()
        } else if self.model.temperature().is_some() {
            vec![(0, t_bar)]
        } else {
            Vec::new()
        };
        Ok(OutputVjp { state: so.displacement.into_iter().map(|v| -v).collect(), inputs })
    }

    fn objective_hessian(&self, dir: &Direction, rev: &mut Reverse) -> Result<Seed, RunError> {
        // Displacement, mean-displacement and cotangent terms are linear in u; compliance fᵀu
        // is bilinear in the loads and u (d/dε ∂C/∂u = δf, d/dε ∂C/∂p = (∂f/∂p)ᵀδu); the von
        // Mises p-norm is a function of u and μ(E, ν).
        let u = self.solved_displacement()?;
        let d = self.mechanical_direction(dir);
        if rev.wants_coordinates() {
            return self.objective_hessian_moving(u, &d, rev);
        }
        let mut state = vec![0.0; u.len()];
        for term in &self.objective {
            if let MechObjectiveKind::VonMisesPNorm { group, p } = &term.kind {
                let els = self.model.group_elements(group).map_err(mech)?;
                let (du, de, dn) = self.model.von_mises_pnorm_hessian(els, *p, u, &d);
                state.iter_mut().zip(&du).for_each(|(s, v)| *s += term.weight * v);
                self.add_material(rev.grad, &de, &dn, term.weight);
            }
        }
        let compliance = self.compliance_weight();
        if compliance != 0.0 && self.want(false, false).loads {
            let df = self.model.load_vector_jvp(&d);
            state.iter_mut().zip(&df).for_each(|(s, v)| *s += compliance * v);
            self.add_load_products(u, &d.displacement, compliance, rev.grad);
        }
        Ok(Seed { state, ..Seed::default() })
    }

    fn covers_shape(&self) -> bool {
        true
    }
}

impl Field for MechanicalField {
    fn name(&self) -> &str {
        "mechanical"
    }

    fn expect_solves(&mut self, per_factorization: usize) {
        self.solver.expect_solves(per_factorization);
    }

    fn outputs(&self) -> Vec<Port> {
        vec![Port::nodal("displacement", 3)]
    }

    fn inputs(&self) -> Vec<Port> {
        vec![Port::nodal("temperature", 1)]
    }

    fn available_parameters(&self) -> Vec<String> {
        self.parameter_names()
    }

    fn owns(&self, name: &str) -> bool {
        Self::owns_name(name)
    }

    fn register(
        &mut self,
        registry: &mut ParamRegistry,
        name: &str,
        bounds: Option<[f64; 2]>,
    ) -> Result<ParamId, RunError> {
        self.register_param(registry, name, bounds)
    }

    fn apply_parameters(
        &mut self,
        registry: &ParamRegistry,
        coordinates: Option<&[[f64; 3]]>,
    ) -> Result<(), RunError> {
        self.apply(registry, coordinates)
    }

    fn set_input(&mut self, port: usize, values: &[f64]) -> Result<(), RunError> {
        debug_assert_eq!(port, 0, "the mechanical field has one input");
        self.temperature = Some(values.to_vec());
        self.solved = false;
        Ok(())
    }

    fn solve(&mut self, _mode: SolveMode) -> Result<(), RunError> {
        self.solve_displacement().map(|_| ())
    }

    fn is_solved(&self) -> bool {
        self.solved && self.u.is_some()
    }

    fn state(&self) -> Option<&[f64]> {
        self.u.as_deref()
    }

    fn start_state(&self) -> Vec<f64> {
        vec![0.0; 3 * self.model.n_nodes()]
    }

    fn objective(&self) -> Result<(f64, Vec<f64>), RunError> {
        self.objective_terms()
    }

    fn objective_seed(&self, rev: &mut Reverse) -> Result<Seed, RunError> {
        if self.objective.is_empty() {
            return Ok(Seed::default());
        }
        let u = self.solved_displacement()?;
        let eval =
            evaluate(&self.model, &self.objective, u, rev.wants_coordinates()).map_err(mech)?;
        // Explicit partials: E and ν in von Mises terms, coordinates.
        self.add_material(rev.grad, &eval.d_young_elem, &eval.d_poisson_elem, 1.0);
        if let Some(dx) = &eval.d_coords {
            rev.add_coordinates(dx, 1.0);
        }
        // Compliance fᵀu depends on the loads explicitly: uᵀ ∂f/∂p = −uᵀ ∂R/∂p.
        let compliance = self.compliance_weight();
        if compliance != 0.0 {
            self.add_load_products(u, u, compliance, rev.grad);
        }
        Ok(Seed { state: eval.d_displacement, ..Default::default() })
    }

    fn adjoint_solve(
        &mut self,
        state_bar: &[f64],
        _unknowns_bar: &[f64],
    ) -> Result<Vec<f64>, RunError> {
        let ts = Instant::now();
        let mut rhs = self.model.dofs.gather(state_bar);
        if !rhs.is_empty() {
            self.solver.solve_transpose_in_place(&mut rhs)?;
        }
        let mut lambda = vec![0.0; 3 * self.model.n_nodes()];
        self.model.dofs.scatter(&rhs, &mut lambda);
        self.last_gradient.adjoint_solve_s = ts.elapsed().as_secs_f64();
        Ok(lambda)
    }

    fn input_vjp(&self, port: usize, lambda: &[f64]) -> Result<Vec<f64>, RunError> {
        debug_assert_eq!(port, 0, "the mechanical field has one input");
        let n_nodes = self.model.n_nodes();
        if self.imported.is_some() || self.model.temperature().is_none() {
            return Ok(vec![0.0; n_nodes]);
        }
        let only = VjpRequest {
            material: false,
            thermal: false,
            loads: false,
            displacement: false,
            temperature: true,
            coords: false,
        };
        let vjp = self.model.parameter_vjp(self.solved_displacement()?, lambda, only);
        Ok(vjp
            .temperature
            .map_or_else(|| vec![0.0; n_nodes], |t| t.into_iter().map(|v| -v).collect()))
    }

    fn accumulate(
        &self,
        lambda: &[f64],
        state_bar: &[f64],
        rev: &mut Reverse,
        inputs: &[usize],
    ) -> Result<Vec<(usize, Vec<f64>)>, RunError> {
        let u = self.solved_displacement()?;
        let n_nodes = self.model.n_nodes();
        let wants_t = inputs.contains(&0) || self.imported.is_some();
        let want = self.want(rev.wants_coordinates(), wants_t);
        let vjp = self.model.parameter_vjp(u, lambda, want);
        self.add_material(rev.grad, &vjp.young_elem, &vjp.poisson_elem, -1.0);
        let owner = self.model.constraint_owner();
        for (id, b) in &self.bindings {
            let g = rev.grad.get_mut(*id);
            match b {
                MBinding::Alpha(r) => g[0] -= vjp.alpha[*r],
                MBinding::TRef(r) => g[0] -= vjp.t_ref[*r],
                MBinding::BodyForce(r) => {
                    for k in 0..3 {
                        g[k] -= vjp.body_force[*r][k];
                    }
                }
                MBinding::Pressure(bc) => g[0] -= vjp.pressure[*bc],
                MBinding::Traction(bc) => {
                    for k in 0..3 {
                        g[k] -= vjp.traction[*bc][k];
                    }
                }
                MBinding::Displacement(bc, comps) => {
                    for (k, &c) in comps.iter().enumerate() {
                        let direct: f64 = (0..n_nodes)
                            .filter(|&n| owner[3 * n + c] == Some(*bc))
                            .map(|n| state_bar[3 * n + c])
                            .sum();
                        g[k] += direct - vjp.displacement[*bc][c];
                    }
                }
                MBinding::ImportScale | MBinding::ImportOffset => {}
                MBinding::Young(_) | MBinding::YoungElem(_) | MBinding::Poisson(_) => {}
            }
        }
        if let Some(dx) = &vjp.coords {
            rev.add_coordinates(dx, -1.0);
        }
        let t_bar = vjp
            .temperature
            .map_or_else(|| vec![0.0; n_nodes], |t| t.into_iter().map(|v| -v).collect::<Vec<_>>());
        // The imported temperature's transfer takes T̄; nothing flows upstream.
        if self.imported.is_some() {
            self.imported_products(&t_bar, rev.grad);
            return Ok(inputs.iter().map(|&p| (p, vec![0.0; n_nodes])).collect());
        }
        Ok(if inputs.contains(&0) { vec![(0, t_bar)] } else { Vec::new() })
    }

    fn second_order(&mut self) -> Option<&mut dyn SecondOrder> {
        Some(self)
    }

    fn second_order_ref(&self) -> Option<&dyn SecondOrder> {
        Some(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
