//! The coupled problem: fields and transfers as one graph, solved stage by stage and
//! differentiated in reverse.
//!
//! # Forward
//!
//! The coupling graph ([`gradfem_solvers::graph::CouplingGraph`]: fields as nodes, transfers as
//! edges) is scheduled by its strongly connected components in topological order. A stage of
//! one field is solved alone once its inputs are set from the outputs upstream. A stage of
//! several fields is a cycle, solved as [`CycleScheme`] says: `Monolithic` (one Newton on all
//! its unknowns, assembled from the fields' element kernels, [`crate::cell`]) or `Staggered`
//! (block Gauss–Seidel over the fields in stage order until the relative change of every state
//! is below the tolerance).
//!
//! # Reverse
//!
//! Every field's objective terms seed ū over its state (and x̄ over inputs they read). The
//! stages are then walked backwards: a single field solves (∂R/∂u)ᵀ λ = ū, accumulates its
//! parameter products and hands x̄ = −(∂R/∂x)ᵀ λ of each input back through the transfer that
//! feeds it (through the source's output VJP when the transfer carries a derived output), so
//! that when a stage is reached all of its seeds are complete. A cycle solves the transposed
//! coupled system: with the monolithic factorization in one transposed solve, or staggered by
//! the transposed block Gauss–Seidel iteration with each field's own factorization (the same
//! iteration matrix transposed, so it converges exactly when the forward iteration does). Both
//! give the same gradient to the solver tolerance.
//!
//! Nothing here names a field: a new field implements [`Field`] in its own module and is
//! added with [`CoupledProblem::add_field`]; a new transfer is one
//! [`CoupledProblem::add_transfer`] between ports.

use std::collections::HashMap;
use std::time::Instant;

use gradfem_mesh::{CellId, Mesh};
use gradfem_solvers::graph::{CouplingGraph, Stage};
use gradfem_solvers::newton::NewtonParams;
use gradfem_solvers::params::{Gradient, ParamId, ParamKind, ParamRegistry, ParamSpec};
use serde::Serialize;

use crate::cycle::Monolithic;
use crate::error::RunError;
use crate::field::{Field, Layout, Reverse, Seed, SolveMode};
use crate::shape::Shape;

/// How a strongly coupled group (a cycle of the graph) is solved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CycleScheme {
    /// One Newton on all the cycle's unknowns with the full coupled Jacobian (GMRES
    /// preconditioned by the fields' blocks, or LU: [`CycleParams::lu`]).
    Monolithic,
    /// Block Gauss–Seidel between the fields until the change is below the tolerance.
    Staggered,
}

impl CycleScheme {
    /// Parse `monolithic` or `staggered`.
    pub fn parse(s: &str) -> Result<Self, RunError> {
        match s {
            "monolithic" => Ok(CycleScheme::Monolithic),
            "staggered" => Ok(CycleScheme::Staggered),
            other => Err(RunError::Setup(format!(
                "unknown coupling scheme '{other}'; expected monolithic or staggered"
            ))),
        }
    }
}

/// Settings of the coupled solves of cycles.
#[derive(Clone, Debug, Serialize)]
pub struct CycleParams {
    /// Monolithic or staggered.
    pub scheme: CycleScheme,
    /// Relative change of the states (max norm) below which the staggered iteration stops;
    /// also the tolerance of the staggered adjoint.
    pub tol: f64,
    /// Staggered sweeps at most.
    pub max_iterations: usize,
    /// Newton settings of the monolithic solve (its relative tolerance is at most 1e-12, and
    /// it is relative to the load ‖R(0)‖; the default has no absolute floor, which would be
    /// loose for a small problem whose residuals are small numbers).
    #[serde(skip)]
    pub newton: NewtonParams,
    /// Solve the monolithic Jacobian by sparse LU (`[solver] linear = "lu"`) instead of GMRES
    /// preconditioned by Cholesky factors of the fields' diagonal blocks
    /// ([`gradfem_solvers::gmres::BlockGmresSolver`], the default, which falls back to LU
    /// by itself where it must).
    pub lu: bool,
}

impl Default for CycleParams {
    fn default() -> Self {
        CycleParams {
            scheme: CycleScheme::Monolithic,
            tol: 1e-11,
            max_iterations: 100,
            newton: NewtonParams { abs_tol: 0.0, ..NewtonParams::default() },
            lu: false,
        }
    }
}

/// How the values of a transfer's source port land on its target port.
#[derive(Clone, Debug)]
enum PortMap {
    /// The same layout: value i goes to value i.
    Identity,
    /// Target point i takes source point `map[i]`, or 0 where the source has no element on
    /// that cell.
    Points(Vec<Option<usize>>),
}

/// A transfer: an output of one field feeding an input of another.
#[derive(Clone, Debug)]
pub struct Transfer {
    /// What is handed over (`joule_heat`, `resistivity`, `thermal_strain`, …).
    pub name: String,
    /// Source field and its output port.
    pub from: usize,
    pub from_port: usize,
    /// Target field and its input port.
    pub to: usize,
    pub to_port: usize,
    map: PortMap,
    /// Number of values of the source port and of the target port.
    pub(crate) source_len: usize,
    pub(crate) target_len: usize,
}

impl Transfer {
    /// Source values → target values.
    pub(crate) fn forward(&self, y: &[f64], target_len: usize) -> Vec<f64> {
        match &self.map {
            PortMap::Identity => y.to_vec(),
            PortMap::Points(m) => {
                let mut x = vec![0.0; target_len];
                for (xi, s) in x.iter_mut().zip(m) {
                    if let Some(s) = s {
                        *xi = y[*s];
                    }
                }
                x
            }
        }
    }

    /// The transpose: a target seed → a source seed.
    pub(crate) fn reverse(&self, x_bar: &[f64], source_len: usize) -> Vec<f64> {
        match &self.map {
            PortMap::Identity => x_bar.to_vec(),
            PortMap::Points(m) => {
                let mut y = vec![0.0; source_len];
                for (xb, s) in x_bar.iter().zip(m) {
                    if let Some(s) = s {
                        y[*s] += xb;
                    }
                }
                y
            }
        }
    }
}

/// Timings of one gradient.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GradientTimings {
    /// The whole reverse pass (s).
    pub gradient_s: f64,
    /// Transposed solves (s).
    pub adjoint_solve_s: f64,
    /// Element-wise vector-Jacobian products and objective seeds (s).
    pub accumulate_s: f64,
}

/// What the last solve of each cycle did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CycleReport {
    /// The fields of the cycle, in stage order.
    pub fields: Vec<String>,
    /// `monolithic` or `staggered`.
    pub scheme: String,
    /// Newton iterations (monolithic) or block Gauss–Seidel sweeps (staggered).
    pub iterations: usize,
    /// Newton residuals, or the relative change of the states per sweep.
    pub history: Vec<f64>,
    /// Transposed block Gauss–Seidel iterations of the last adjoint (1 for monolithic).
    pub adjoint_iterations: usize,
    /// Seconds spent per field (staggered: summed over the sweeps; monolithic: the Newton).
    pub field_s: Vec<f64>,
    /// Seconds spent evaluating the cycle's transfers.
    pub transfer_s: f64,
}

/// Adjoint seeds gathered during a reverse pass: ū over each field's state, ∂J/∂u on its
/// unknowns, and x̄ per (field, input port). The seed of an input port that no transfer feeds
/// is empty or missing: nothing upstream reads it (see [`Bars::add_input_seed`]), and a
/// per-point port of a large mesh (the thermal field's heat source) would otherwise cost a
/// vector the size of the quadrature.
pub(crate) struct Bars {
    pub state: Vec<Vec<f64>>,
    pub unknowns: Vec<Vec<f64>>,
    pub inputs: Vec<Vec<Vec<f64>>>,
    /// When set, the reverse pass keeps what the second-order adjoint reuses.
    pub record: Option<ReverseRecord>,
}

impl Bars {
    /// Adds `x` to the seed of field `f`'s input port `p`. A port no transfer feeds has an
    /// empty or no seed (see [`Bars`]); nothing reads it, so `x` is dropped there.
    pub(crate) fn add_input_seed(&mut self, f: usize, p: usize, x: &[f64]) {
        if let Some(seed) = self.inputs[f].get_mut(p).filter(|s| !s.is_empty()) {
            add_into(seed, x);
        }
    }
}

/// What a reverse pass leaves for the second-order adjoint: every field's adjoint λ and the
/// seed ȳ of every transfer from a derived output (by transfer index).
#[derive(Clone, Debug, Default)]
pub(crate) struct ReverseRecord {
    pub lambda: Vec<Option<Vec<f64>>>,
    pub y_bar: Vec<Option<Vec<f64>>>,
}

impl ReverseRecord {
    /// An empty record for `fields` fields and `transfers` transfers.
    pub fn new(fields: usize, transfers: usize) -> Self {
        ReverseRecord { lambda: vec![None; fields], y_bar: vec![None; transfers] }
    }
}

/// A coupled problem on one mesh: fields, transfers, the parameter registry and the shape.
pub struct CoupledProblem {
    mesh: Mesh,
    fields: Vec<Box<dyn Field>>,
    transfers: Vec<Transfer>,
    registry: ParamRegistry,
    shape: Shape,
    /// The order in which fields' objective terms are listed (field indices).
    term_order: Vec<usize>,
    /// Settings of cycle solves.
    pub cycle: CycleParams,
    /// Monolithic systems, built at the first solve of each cycle (by stage).
    mono: HashMap<Vec<usize>, Monolithic>,
    /// What the last solve of each cycle did.
    pub cycle_reports: Vec<CycleReport>,
    /// Timings of the last gradient.
    pub last_gradient: GradientTimings,
    /// The objective's rule over time, for a problem with a field stepped in time.
    pub(crate) time: Option<crate::time::TimeRule>,
    /// The downstream fields at every state of the last run in time.
    pub(crate) history: Option<crate::time::TimeHistory>,
    /// What the last run in time left for the reverse sweep of the cycle that holds the
    /// stepped field (when it lies on one): its states, all or the first and last.
    pub(crate) cycle_states: Option<crate::time_cycle::CycleRecord>,
    /// The adjoints of the last steady gradient, which a Hessian-vector product at the same
    /// solution reuses; every mutable access forgets them.
    pub(crate) reverse_record: Option<ReverseRecord>,
    /// The downstream fields' first-order adjoints at each state of the last gradient in time
    /// (where its weight was nonzero), which a Hessian-vector product at the same solution
    /// reuses; forgotten with `reverse_record`.
    pub(crate) time_adjoints: Option<Vec<Option<crate::time::StateFirstOrder>>>,
}

fn setup(msg: impl Into<String>) -> RunError {
    RunError::Setup(msg.into())
}

impl CoupledProblem {
    /// An empty problem on `mesh` (its node coordinates are the shape's base).
    pub fn new(mesh: Mesh) -> Self {
        let shape = Shape::new(mesh.coords.clone());
        CoupledProblem {
            mesh,
            fields: Vec::new(),
            transfers: Vec::new(),
            registry: ParamRegistry::new(),
            shape,
            term_order: Vec::new(),
            cycle: CycleParams::default(),
            mono: HashMap::new(),
            cycle_reports: Vec::new(),
            last_gradient: GradientTimings::default(),
            time: None,
            history: None,
            cycle_states: None,
            reverse_record: None,
            time_adjoints: None,
        }
    }

    /// Forget the adjoints a gradient kept for a Hessian-vector product at the same solution.
    fn forget_adjoints(&mut self) {
        self.reverse_record = None;
        self.time_adjoints = None;
    }

    // ----- structure -----------------------------------------------------------------------

    /// Add a field; returns its index. Names are unique.
    pub fn add_field(&mut self, field: Box<dyn Field>) -> Result<usize, RunError> {
        self.forget_adjoints();
        if self.fields.iter().any(|f| f.name() == field.name()) {
            return Err(setup(format!("the field '{}' is added twice", field.name())));
        }
        self.fields.push(field);
        self.term_order.push(self.fields.len() - 1);
        self.mono.clear();
        Ok(self.fields.len() - 1)
    }

    /// Connect output `from_port` of field `from` to input `to_port` of field `to` (by names);
    /// `name` says what is handed over. Layouts must agree: nodal ports in their components,
    /// point ports cell by cell (every cell where the source has points needs an element of
    /// the target with as many points; target cells without a source element receive 0).
    pub fn add_transfer(
        &mut self,
        name: &str,
        from: &str,
        from_port: &str,
        to: &str,
        to_port: &str,
    ) -> Result<(), RunError> {
        self.forget_adjoints();
        let find = |f: &str| {
            self.field_index(f).ok_or_else(|| {
                setup(format!(
                    "transfer '{name}' names the field '{f}', which this problem does not have; its fields are: {}",
                    self.field_names().join(", ")
                ))
            })
        };
        let (a, b) = (find(from)?, find(to)?);
        if a == b {
            return Err(setup(format!("transfer '{name}' goes from the field '{from}' to itself")));
        }
        let outs = self.fields[a].outputs();
        let ins = self.fields[b].inputs();
        let pa = outs.iter().position(|p| p.name == from_port).ok_or_else(|| {
            setup(format!("transfer '{name}': the field '{from}' has no output '{from_port}'"))
        })?;
        let pb = ins.iter().position(|p| p.name == to_port).ok_or_else(|| {
            setup(format!("transfer '{name}': the field '{to}' has no input '{to_port}'"))
        })?;
        if self.transfers.iter().any(|t| t.to == b && t.to_port == pb) {
            return Err(setup(format!(
                "transfer '{name}': the input '{to_port}' of '{to}' is fed twice"
            )));
        }
        let map = match (&outs[pa].layout, &ins[pb].layout) {
            (Layout::Nodal { components: ca }, Layout::Nodal { components: cb }) if ca == cb => {
                PortMap::Identity
            }
            (
                Layout::Points { offsets: oa, cells: ca },
                Layout::Points { offsets: ob, cells: cb },
            ) => PortMap::Points(self.point_map(name, from, to, oa, ca, ob, cb)?),
            (la, lb) => {
                return Err(setup(format!(
                    "transfer '{name}' ({from}.{from_port} -> {to}.{to_port}): the layouts do not match ({la:?} against {lb:?})"
                )));
            }
        };
        let n = self.mesh.n_nodes();
        let (source_len, target_len) = (outs[pa].layout.len(n), ins[pb].layout.len(n));
        self.transfers.push(Transfer {
            name: name.to_string(),
            from: a,
            from_port: pa,
            to: b,
            to_port: pb,
            map,
            source_len,
            target_len,
        });
        self.mono.clear();
        Ok(())
    }

    /// Target point → source point, by the elements' cells.
    #[allow(clippy::too_many_arguments)]
    fn point_map(
        &self,
        name: &str,
        from: &str,
        to: &str,
        oa: &[usize],
        ca: &[CellId],
        ob: &[usize],
        cb: &[CellId],
    ) -> Result<Vec<Option<usize>>, RunError> {
        let target_of: HashMap<CellId, usize> =
            cb.iter().enumerate().map(|(e, c)| (*c, e)).collect();
        let mut map = vec![None; ob.last().copied().unwrap_or(0)];
        for (e, cell) in ca.iter().enumerate() {
            let Some(&t) = target_of.get(cell) else {
                return Err(setup(format!(
                    "transfer '{name}' ({from} -> {to}): cell {} of the {from} field is in no element of the {to} field; every cell of the {from} field needs one (give the {to} field a material on its group)",
                    self.mesh.blocks[cell.block].tags[cell.index]
                )));
            };
            let (na, nb) = (oa[e + 1] - oa[e], ob[t + 1] - ob[t]);
            if na != nb {
                return Err(setup(format!(
                    "transfer '{name}' ({from} -> {to}): cell {} has {na} points in the {from} field and {nb} in the {to} field",
                    self.mesh.blocks[cell.block].tags[cell.index]
                )));
            }
            for q in 0..na {
                map[ob[t] + q] = Some(oa[e] + q);
            }
        }
        Ok(map)
    }

    /// List the fields' objective terms in this order of fields (by name) instead of the order
    /// they were added.
    pub fn set_term_order(&mut self, names: &[&str]) {
        self.forget_adjoints();
        let mut order: Vec<usize> = names.iter().filter_map(|n| self.field_index(n)).collect();
        for i in 0..self.fields.len() {
            if !order.contains(&i) {
                order.push(i);
            }
        }
        self.term_order = order;
    }

    /// The mesh.
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    /// The fields, in the order added.
    pub fn fields(&self) -> &[Box<dyn Field>] {
        &self.fields
    }

    /// The field names, in the order added.
    pub fn field_names(&self) -> Vec<String> {
        self.fields.iter().map(|f| f.name().to_string()).collect()
    }

    /// The index of the field named `name`.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name() == name)
    }

    /// The field named `name` as its concrete type.
    pub fn field<T: Field>(&self, name: &str) -> Option<&T> {
        let i = self.field_index(name)?;
        self.fields[i].as_any().downcast_ref::<T>()
    }

    /// The field named `name` as its concrete type, mutably (invalidates nothing by itself).
    pub fn field_mut<T: Field>(&mut self, name: &str) -> Option<&mut T> {
        self.forget_adjoints();
        let i = self.field_index(name)?;
        self.fields[i].as_any_mut().downcast_mut::<T>()
    }

    /// The first field of type `T`.
    pub fn find<T: Field>(&self) -> Option<&T> {
        self.fields.iter().find_map(|f| f.as_any().downcast_ref::<T>())
    }

    /// The first field of type `T`, mutably.
    pub fn find_mut<T: Field>(&mut self) -> Option<&mut T> {
        self.forget_adjoints();
        self.fields.iter_mut().find_map(|f| f.as_any_mut().downcast_mut::<T>())
    }

    /// The transfers, in the order added.
    pub fn transfers(&self) -> &[Transfer] {
        &self.transfers
    }

    /// The coupling graph: one edge per pair of fields a transfer connects, named after the
    /// first such transfer.
    pub fn graph(&self) -> CouplingGraph {
        let mut g = CouplingGraph::new();
        for f in &self.fields {
            g.add_field(f.name()).expect("field names are unique");
        }
        for t in &self.transfers {
            let (a, b) = (self.fields[t.from].name(), self.fields[t.to].name());
            if !g.has_transfer(a, b) {
                g.add_transfer(&t.name, a, b).expect("fields exist, one edge per pair");
            }
        }
        g
    }

    /// The stages of the forward solve.
    pub fn schedule(&self) -> Vec<Stage> {
        self.graph().schedule()
    }

    /// True when some stage is a cycle.
    pub fn has_cycle(&self) -> bool {
        self.schedule().iter().any(Stage::is_coupled)
    }

    // ----- parameters ----------------------------------------------------------------------

    /// The one parameter registry.
    pub fn registry(&self) -> &ParamRegistry {
        &self.registry
    }

    /// The registry, to change values (then call [`apply_parameters`](Self::apply_parameters)).
    pub fn registry_mut(&mut self) -> &mut ParamRegistry {
        self.forget_adjoints();
        &mut self.registry
    }

    /// The shape parameters.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The shape, to define morphs before registration.
    pub fn shape_mut(&mut self) -> &mut Shape {
        self.forget_adjoints();
        &mut self.shape
    }

    /// Every parameter name the problem can register: the fields', then `mesh.coordinates` and
    /// the morphs.
    pub fn available_parameters(&self) -> Vec<String> {
        let mut names = Vec::new();
        for f in &self.fields {
            for n in f.available_parameters() {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
        names.push("mesh.coordinates".into());
        for m in self.shape.morphs() {
            names.push(format!("morph.{}", m.name));
        }
        names
    }

    fn unknown_parameter(&self, name: &str) -> RunError {
        setup(format!(
            "cannot register '{name}': this problem offers {}",
            self.available_parameters().join(", ")
        ))
    }

    /// Register a parameter by name: `mesh.coordinates`, `morph.<name>`, or a name one of the
    /// fields owns.
    pub fn register(&mut self, name: &str, bounds: Option<[f64; 2]>) -> Result<ParamId, RunError> {
        self.forget_adjoints();
        let with_bounds = |spec: ParamSpec| match bounds {
            Some([lo, hi]) => spec.with_bounds(Some(lo), Some(hi)),
            None => spec,
        };
        if name == "mesh.coordinates" {
            let values = self.mesh.coords.iter().flat_map(|p| p.iter().copied()).collect();
            let spec = ParamSpec::vector(name, ParamKind::NodeCoordinates, values)
                .with_doc("node coordinates x, y, z per node", "m");
            let id = self.registry.register(with_bounds(spec))?;
            self.shape.set_coordinates(id);
            return Ok(id);
        }
        if let Some(m) = name.strip_prefix("morph.") {
            let k = self.shape.morph_index(m).ok_or_else(|| self.unknown_parameter(name))?;
            let morph = &self.shape.morphs()[k];
            let (lo, hi) = morph.bounds.map_or((None, None), |[a, b]| (Some(a), Some(b)));
            let spec = ParamSpec::scalar(name, morph.reference)
                .with_bounds(lo, hi)
                .with_doc("morph: the nodes move by (value − initial value) × its field", "m");
            let id = self.registry.register(with_bounds(spec))?;
            self.shape.register_morph(id, k);
            return Ok(id);
        }
        let Some(i) = self.fields.iter().position(|f| f.owns(name)) else {
            return Err(self.unknown_parameter(name));
        };
        self.mono.clear();
        match self.fields[i].register(&mut self.registry, name, bounds) {
            Err(RunError::UnknownParameter(_)) => Err(self.unknown_parameter(name)),
            other => other,
        }
    }

    /// Copy the registry's values into every field (and the coordinates into every field when
    /// a shape parameter is registered). Invalidates the solution.
    pub fn apply_parameters(&mut self) -> Result<(), RunError> {
        self.forget_adjoints();
        let coords = self.shape.is_active().then(|| self.shape.coordinates(&self.registry));
        for f in &mut self.fields {
            f.apply_parameters(&self.registry, coords.as_deref())?;
        }
        Ok(())
    }

    // ----- forward -------------------------------------------------------------------------

    /// True when every field is solved for the current parameters (and, in time, the run
    /// and its history are).
    pub fn is_solved(&self) -> bool {
        self.fields.iter().all(|f| f.is_solved()) && (self.time.is_none() || self.history.is_some())
    }

    /// Make the problem time-dependent: the field with a time stepping ([`Field::dynamic`]) is
    /// stepped, and J is `rule` over the history ([`crate::time`]).
    pub fn set_time_rule(&mut self, rule: crate::time::TimeRule) {
        self.forget_adjoints();
        self.time = Some(rule);
        self.history = None;
    }

    /// The objective's rule over time, for a time-dependent problem.
    pub fn time_rule(&self) -> Option<&crate::time::TimeRule> {
        self.time.as_ref()
    }

    /// True for a time-dependent problem.
    pub fn is_transient(&self) -> bool {
        self.time.is_some()
    }

    /// The value of output `port` of field `i` at its solved state (the state: its start
    /// before the first solve, which a cycle's first sweep reads).
    pub(crate) fn output_of(&self, i: usize, port: usize) -> Result<Vec<f64>, RunError> {
        if port == 0 {
            let f = &self.fields[i];
            return Ok(f.state().map_or_else(|| f.start_state(), <[f64]>::to_vec));
        }
        self.fields[i].output(port)
    }

    /// Set every input of field `i` from the outputs feeding it.
    pub(crate) fn feed(&mut self, i: usize) -> Result<(), RunError> {
        for k in 0..self.transfers.len() {
            if self.transfers[k].to == i {
                self.feed_transfer(k)?;
            }
        }
        Ok(())
    }

    /// Solve every stage in order (in time: see [`crate::time`]).
    pub fn solve(&mut self) -> Result<(), RunError> {
        self.forget_adjoints();
        if self.time.is_some() {
            return self.solve_in_time();
        }
        self.cycle_reports.clear();
        for stage in self.schedule() {
            if stage.is_coupled() {
                let report = match self.cycle.scheme {
                    CycleScheme::Monolithic => self.solve_monolithic(&stage.fields)?,
                    CycleScheme::Staggered => self.solve_staggered(&stage.fields)?,
                };
                self.cycle_reports.push(report);
            } else {
                let i = stage.fields[0];
                self.feed(i)?;
                self.fields[i].solve(SolveMode::Alone)?;
            }
        }
        Ok(())
    }

    /// J and its weighted terms at the solution (solving first if needed), the fields' terms
    /// in term order.
    pub fn objective_terms(&mut self) -> Result<(f64, Vec<f64>), RunError> {
        if !self.is_solved() {
            self.solve()?;
        }
        self.objective_terms_solved()
    }

    /// J and its terms at the current solution, without solving (in time: J over the
    /// history, as its one term).
    pub fn objective_terms_solved(&self) -> Result<(f64, Vec<f64>), RunError> {
        if self.time.is_some() {
            let (j, _) = self.time_objective()?;
            return Ok((j, vec![j]));
        }
        let mut value = 0.0;
        let mut terms = Vec::new();
        for &i in &self.term_order {
            let (v, t) = self.fields[i].objective()?;
            value += v;
            terms.extend(t);
        }
        Ok((value, terms))
    }

    // ----- reverse -------------------------------------------------------------------------

    /// J and dJ/dp for every registered parameter, by the adjoint of the whole graph.
    pub fn gradient(&mut self) -> Result<(f64, Gradient, GradientTimings), RunError> {
        if !self.is_solved() {
            self.solve()?;
        }
        let t0 = Instant::now();
        let mut grad = Gradient::zeros(&self.registry);
        let mut timings = GradientTimings::default();
        if self.time.is_some() {
            let j = self.gradient_in_time(&mut grad, &mut timings)?;
            timings.gradient_s = t0.elapsed().as_secs_f64();
            self.last_gradient = timings.clone();
            return Ok((j, grad, timings));
        }
        let (j, _) = self.objective_terms_solved()?;
        let ta = Instant::now();
        let mut bars = self.seeds(&mut grad)?;
        timings.accumulate_s += ta.elapsed().as_secs_f64();
        if self.second_order_support().is_ok() {
            bars.record = Some(ReverseRecord::new(self.fields.len(), self.transfers.len()));
        }
        self.reverse_stages(&mut bars, &mut grad, &mut timings)?;
        self.reverse_record = bars.record.take();
        timings.gradient_s = t0.elapsed().as_secs_f64();
        self.last_gradient = timings.clone();
        Ok((j, grad, timings))
    }

    /// Zero adjoint seeds shaped like the fields' states and the input ports transfers feed
    /// (the others stay empty; a field no transfer feeds has no input seeds at all, so its
    /// ports are not even listed).
    pub(crate) fn zero_bars(&self) -> Bars {
        let n = self.mesh.n_nodes();
        let inputs = (0..self.fields.len())
            .map(|f| {
                let fed: Vec<&Transfer> = self.transfers.iter().filter(|t| t.to == f).collect();
                if fed.is_empty() {
                    return Vec::new();
                }
                let ports = self.fields[f].inputs();
                (0..ports.len())
                    .map(|p| {
                        if fed.iter().any(|t| t.to_port == p) {
                            vec![0.0; ports[p].layout.len(n)]
                        } else {
                            Vec::new()
                        }
                    })
                    .collect()
            })
            .collect();
        Bars {
            state: self.fields.iter().map(|f| vec![0.0; f.outputs()[0].layout.len(n)]).collect(),
            unknowns: vec![Vec::new(); self.fields.len()],
            inputs,
            record: None,
        }
    }

    /// The objective seeds of every field, their direct partials added to `grad`.
    pub(crate) fn seeds(&self, grad: &mut Gradient) -> Result<Bars, RunError> {
        let mut bars = self.zero_bars();
        for (i, f) in self.fields.iter().enumerate() {
            let mut rev = Reverse { registry: &self.registry, shape: &self.shape, grad };
            let Seed { state, unknowns, inputs } = f.objective_seed(&mut rev)?;
            add_into(&mut bars.state[i], &state);
            bars.unknowns[i] = unknowns;
            for (p, x) in inputs {
                bars.add_input_seed(i, p, &x);
            }
        }
        Ok(bars)
    }

    /// Walk the stages backwards from the seeds in `bars`.
    pub(crate) fn reverse_stages(
        &mut self,
        bars: &mut Bars,
        grad: &mut Gradient,
        timings: &mut GradientTimings,
    ) -> Result<(), RunError> {
        let stages: Vec<Vec<usize>> = self.schedule().into_iter().map(|s| s.fields).collect();
        self.reverse_stage_list(&stages, bars, grad, timings)
    }

    /// Walk `stages` (forward order) backwards from the seeds in `bars`.
    pub(crate) fn reverse_stage_list(
        &mut self,
        stages: &[Vec<usize>],
        bars: &mut Bars,
        grad: &mut Gradient,
        timings: &mut GradientTimings,
    ) -> Result<(), RunError> {
        for stage in stages.iter().rev() {
            let stage = Stage { fields: stage.clone() };
            if stage.is_coupled() {
                let iterations = match self.cycle.scheme {
                    CycleScheme::Monolithic => {
                        self.adjoint_monolithic(&stage.fields, bars, grad, timings)?
                    }
                    CycleScheme::Staggered => {
                        self.adjoint_staggered(&stage.fields, bars, grad, timings)?
                    }
                };
                if let Some(r) = self.cycle_reports.iter_mut().find(|r| {
                    r.fields
                        == stage
                            .fields
                            .iter()
                            .map(|&i| self.fields[i].name().to_string())
                            .collect::<Vec<_>>()
                }) {
                    r.adjoint_iterations = iterations;
                }
            } else {
                let i = stage.fields[0];
                let ts = Instant::now();
                let state_bar = std::mem::take(&mut bars.state[i]);
                let lambda = self.fields[i].adjoint_solve(&state_bar, &bars.unknowns[i])?;
                timings.adjoint_solve_s += ts.elapsed().as_secs_f64();
                let ta = Instant::now();
                self.accumulate_and_hand_back(i, &lambda, &state_bar, bars, grad, &[])?;
                timings.accumulate_s += ta.elapsed().as_secs_f64();
                if let Some(r) = &mut bars.record {
                    r.lambda[i] = Some(lambda);
                }
            }
        }
        Ok(())
    }

    /// Field `i`'s parameter products at its adjoint λ (with its whole state seed), and the
    /// seeds of its inputs handed upstream — x̄ = −(∂R/∂x)ᵀ λ plus what objective terms put on
    /// them — through every transfer into `i` whose source is not in `skip`.
    pub(crate) fn accumulate_and_hand_back(
        &self,
        i: usize,
        lambda: &[f64],
        state_bar: &[f64],
        bars: &mut Bars,
        grad: &mut Gradient,
        skip: &[usize],
    ) -> Result<(), RunError> {
        let incoming: Vec<&Transfer> =
            self.transfers.iter().filter(|t| t.to == i && !skip.contains(&t.from)).collect();
        let ports: Vec<usize> = incoming.iter().map(|t| t.to_port).collect();
        let x_bars = {
            let mut rev =
                Reverse { registry: &self.registry, shape: &self.shape, grad: &mut *grad };
            self.fields[i].accumulate(lambda, state_bar, &mut rev, &ports)?
        };
        for t in incoming {
            let mut x_bar = x_bars
                .iter()
                .find(|(p, _)| *p == t.to_port)
                .map(|(_, x)| x.clone())
                .unwrap_or_else(|| vec![0.0; t.target_len]);
            add_into(&mut x_bar, &bars.inputs[i][t.to_port]);
            let mut rev =
                Reverse { registry: &self.registry, shape: &self.shape, grad: &mut *grad };
            self.to_source(t, &x_bar, bars, Some(&mut rev))?;
        }
        Ok(())
    }

    /// A seed on transfer `t`'s target port, carried to its source: onto the source's state,
    /// or through the source's output VJP onto its state and inputs (with `rev`, the output's
    /// parameter partials too).
    pub(crate) fn to_source(
        &self,
        t: &Transfer,
        x_bar: &[f64],
        bars: &mut Bars,
        rev: Option<&mut Reverse>,
    ) -> Result<(), RunError> {
        let src = &self.fields[t.from];
        let y_bar = t.reverse(x_bar, t.source_len);
        // The parameter pass (with `rev`) sees every seed of a derived output exactly once.
        if let (Some(r), true) = (&mut bars.record, rev.is_some() && t.from_port != 0) {
            let k = self.transfers.iter().position(|u| std::ptr::eq(u, t)).expect("a transfer");
            match &mut r.y_bar[k] {
                Some(acc) => add_into(acc, &y_bar),
                slot => *slot = Some(y_bar.clone()),
            }
        }
        if t.from_port == 0 {
            add_into(&mut bars.state[t.from], &y_bar);
            return Ok(());
        }
        let ov = src.output_vjp(t.from_port, &y_bar, rev)?;
        add_into(&mut bars.state[t.from], &ov.state);
        for (p, x) in ov.inputs {
            bars.add_input_seed(t.from, p, &x);
        }
        Ok(())
    }

    /// What the adjoints `lambda` (by field index, `None` for fields outside) contribute to the
    /// seeds of the cycle's fields through the transfers between them; with `rev`, the
    /// transfers' parameter partials too. Returns the contributions per field (state seeds).
    pub(crate) fn cycle_contributions(
        &self,
        members: &[usize],
        lambda: &[Option<Vec<f64>>],
        mut rev: Option<&mut Reverse>,
        only: Option<usize>,
    ) -> Result<Bars, RunError> {
        let mut out = self.zero_bars();
        if rev.is_some() {
            out.record = Some(ReverseRecord::new(self.fields.len(), self.transfers.len()));
        }
        for t in &self.transfers {
            if !(members.contains(&t.from) && members.contains(&t.to)) {
                continue;
            }
            // A seed reaches `only` through this transfer when it lands on the source's state,
            // or through the source's output on the state of a field feeding that output.
            if let Some(o) = only {
                let reaches = t.from == o
                    || (t.from_port != 0
                        && self.transfers.iter().any(|u| u.to == t.from && u.from == o));
                if !reaches {
                    continue;
                }
            }
            let Some(l) = &lambda[t.to] else { continue };
            let x_bar = self.fields[t.to].input_vjp(t.to_port, l)?;
            self.to_source(t, &x_bar, &mut out, rev.as_deref_mut())?;
        }
        // Inputs of cycle fields fed from inside the cycle carry their seeds on to the state
        // that feeds them (a derived output reading another cycle field's state).
        for t in &self.transfers {
            if !(members.contains(&t.from) && members.contains(&t.to)) || t.from_port != 0 {
                continue;
            }
            let x = std::mem::take(&mut out.inputs[t.to][t.to_port]);
            if x.iter().any(|v| *v != 0.0) {
                let y = t.reverse(&x, t.source_len);
                add_into(&mut out.state[t.from], &y);
            }
            out.inputs[t.to][t.to_port] = vec![0.0; x.len()];
        }
        Ok(out)
    }

    /// Mutable access to the fields (for the cycle solvers and the time stepping).
    pub(crate) fn fields_mut(&mut self) -> &mut [Box<dyn Field>] {
        self.forget_adjoints();
        &mut self.fields
    }

    /// The monolithic system of a cycle, built on first use.
    pub(crate) fn take_monolithic(&mut self, members: &[usize]) -> Result<Monolithic, RunError> {
        match self.mono.remove(members) {
            Some(m) => Ok(m),
            None => Monolithic::build(self, members),
        }
    }

    /// Keep the monolithic system of a cycle for the adjoint and the next solve.
    pub(crate) fn put_monolithic(&mut self, members: &[usize], m: Monolithic) {
        self.mono.insert(members.to_vec(), m);
    }

    /// The monolithic system of a cycle, if built.
    pub(crate) fn monolithic_mut(&mut self, members: &[usize]) -> Option<&mut Monolithic> {
        self.mono.get_mut(members)
    }

    /// Split borrows for the reverse pass of a cycle: the registry and shape beside the
    /// fields.
    pub(crate) fn parts(&self) -> (&ParamRegistry, &Shape) {
        (&self.registry, &self.shape)
    }
}

/// a += b (b may be empty: nothing).
pub(crate) fn add_into(a: &mut [f64], b: &[f64]) {
    if b.is_empty() {
        return;
    }
    assert_eq!(a.len(), b.len(), "adjoint seeds of different lengths");
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// max |a − b| / max(max |a|, tiny), over finite entries.
pub(crate) fn rel_change(a: &[f64], b: &[f64]) -> f64 {
    let mut d: f64 = 0.0;
    let mut s: f64 = 0.0;
    for (x, y) in a.iter().zip(b) {
        if x.is_finite() && y.is_finite() {
            d = d.max((x - y).abs());
            s = s.max(x.abs());
        }
    }
    d / s.max(f64::MIN_POSITIVE)
}
