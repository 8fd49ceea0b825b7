//! The finite-strain mechanical field: hyperelastic load stepping (`finite_strain`) with its
//! objective over the load path, as one [`Field`] of a coupled problem.
//!
//! Its input `temperature` (per node) drives the thermal expansion F_θ = (1 + α s (T − T_ref)) I
//! ramped with the load factor s (the `thermal -> hyperelastic` transfer). Its objective is a
//! functional of the whole load path (reactions and displacements at every step, misfits to
//! measured curves), so its reverse pass — one transposed solve per load step, store-all or
//! binomial checkpoints — runs as the objective's seed: it adds dJ/dp into the gradient and
//! puts T̄ = dJ/dT on the input. The field's displacement is an output for reports; no
//! transfer may read it (its adjoint takes no seed on the state).

use std::any::Any;

use gradfem_mechanical::StrainEnergy;
use gradfem_mesh::Mesh;
use gradfem_solvers::checkpoint::Checkpointing;
use gradfem_solvers::params::{Gradient, ParamId, ParamRegistry};
use serde::Serialize;

use crate::error::RunError;
use crate::field::{Direction, Field, OutputVjp, Port, Reverse, SecondOrder, Seed, SolveMode};
use crate::fields::finite_strain::{
    EquilibriumState, FiniteStrainProblem, LoadPath, LoadPathObjective, PathTerm,
};

/// What a run reports.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HyperelasticReport {
    pub load_factors: Vec<f64>,
    pub newton_iterations: usize,
    pub cut_backs: usize,
    /// Reactions (N) of each constraint condition at the last step.
    pub reactions: Vec<(String, [f64; 3])>,
    pub solve_s: f64,
}

/// The finite-strain mechanical field: load steps from rest to the full loads, the
/// objective over the load path, and its load-stepping adjoint.
pub struct HyperelasticField {
    pub problem: FiniteStrainProblem,
    pub loads: Vec<f64>,
    pub objective: LoadPathObjective,
    pub memory: Checkpointing,
    path: Option<LoadPath>,
    pub tip: Option<String>,
    pub report: HyperelasticReport,
    /// A starting displacement for the first increment's Newton iterations (e.g. an ANSYS
    /// result): full vector, 3 per node.
    initial: Option<Vec<f64>>,
    /// Whether the temperature of the thermal field drives this field (a `[thermal]` table
    /// or a prescribed `temperature`): the `thermal -> hyperelastic` transfer.
    takes_temperature: bool,
    /// Whether the last run belongs to the current inputs and parameters.
    solved: bool,
}

impl HyperelasticField {
    /// The field of `problem` stepped through the load factors `loads` (positive,
    /// increasing), with its objective, the adjoint's memory scheme, the group whose mean
    /// displacement reports as the tip, and whether a temperature drives it.
    pub fn new(
        problem: FiniteStrainProblem,
        loads: Vec<f64>,
        objective: LoadPathObjective,
        memory: Checkpointing,
        tip: Option<String>,
        takes_temperature: bool,
    ) -> Self {
        HyperelasticField {
            problem,
            loads,
            objective,
            memory,
            path: None,
            tip,
            report: HyperelasticReport::default(),
            initial: None,
            takes_temperature,
            solved: false,
        }
    }

    /// Whether the temperature of the thermal field drives this field (the problem file has a
    /// `[thermal]` table or `[hyperelastic] temperature`).
    pub fn takes_temperature(&self) -> bool {
        self.takes_temperature
    }

    /// Hand the nodal temperature `t` (K, one value per mesh node) to the model. Every node of
    /// a hyperelastic element needs a finite temperature; the others are not read (set to 0).
    /// The last run is forgotten when the temperature changed.
    pub fn set_temperature(&mut self, t: &[f64]) -> Result<(), RunError> {
        let m = &self.problem.model;
        assert_eq!(t.len(), m.n_nodes(), "set_temperature: one value per node");
        let mut used = vec![false; m.n_nodes()];
        for e in 0..m.n_volume_elements() {
            for &n in m.element_nodes(e) {
                used[n] = true;
            }
        }
        if let Some(n) = (0..t.len()).find(|&n| used[n] && !t[n].is_finite()) {
            return Err(RunError::Setup(format!(
                "hyperelastic: node {n} (at {:?}) has no temperature: every hyperelastic material needs a thermal material",
                m.coords[n]
            )));
        }
        let t: Vec<f64> = t.iter().zip(&used).map(|(&v, &u)| if u { v } else { 0.0 }).collect();
        if m.temperature() != Some(t.as_slice()) {
            self.problem
                .model
                .set_temperature(Some(t))
                .map_err(|e| RunError::Setup(e.to_string()))?;
            self.path = None;
            self.solved = false;
        }
        Ok(())
    }

    /// True when `name` is a parameter of the finite-strain field.
    pub fn owns_name(name: &str) -> bool {
        name.starts_with("hyperelastic.")
            || name.ends_with(".traction")
            || name.ends_with(".pressure")
            || name.ends_with(".displacement")
    }

    /// Start the first increment's Newton iterations from `u` (3 per node) instead of zero:
    /// a deformed state from another solver. Prescribed components take their values from the
    /// conditions as usual; the converged states do not depend on the start, only the Newton
    /// iterations do.
    pub fn set_initial_displacement(&mut self, u: Vec<f64>) {
        assert_eq!(u.len(), 3 * self.problem.model.n_nodes(), "3 values per node");
        self.initial = Some(u);
        self.path = None;
    }

    /// The state the first increment starts from: rest, or the displacement of
    /// [`Self::set_initial_displacement`].
    fn start(&self) -> EquilibriumState {
        let mut start = self.problem.initial_state(&self.loads);
        if let Some(u0) = &self.initial {
            start.u.clone_from(u0);
        }
        start
    }

    /// Run the load steps.
    pub fn run_load_steps(&mut self) -> Result<(), RunError> {
        let t0 = std::time::Instant::now();
        let err = |e: crate::fields::finite_strain::FiniteStrainSolveError| {
            RunError::Setup(e.to_string())
        };
        let start = self.start();
        // With checkpoints the gradient recomputes what it needs; the path keeps displacements
        // (for the objective) but not the tangents.
        let keep_tangents = matches!(self.memory, Checkpointing::StoreAll);
        let path = self.problem.solve_from(start, &self.loads, keep_tangents).map_err(err)?;
        let last = path.reactions.last().cloned().unwrap_or_default();
        let owner = self.problem.model.constraint_owner();
        let reactions = self
            .problem
            .model
            .boundaries()
            .iter()
            .enumerate()
            .filter(|(b, _)| owner.contains(&Some(*b)))
            .map(|(b, bc)| (bc.name.clone(), last[b]))
            .collect();
        self.report = HyperelasticReport {
            load_factors: self.loads.clone(),
            newton_iterations: path.steps.iter().map(|s| s.newton_iterations).sum(),
            cut_backs: path.steps.iter().map(|s| s.cut_backs).sum(),
            reactions,
            solve_s: t0.elapsed().as_secs_f64(),
        };
        self.path = Some(path);
        self.solved = true;
        Ok(())
    }

    /// J of the last run and each term's value summed over the steps.
    pub fn objective_terms(&self) -> Result<(f64, Vec<f64>), RunError> {
        let path = self.path.as_ref().ok_or_else(|| RunError::Setup("solve first".into()))?;
        if self.objective.terms.is_empty() {
            return Ok((0.0, Vec::new()));
        }
        let (j, q) = self
            .problem
            .evaluate(path, &self.objective)
            .map_err(|e| RunError::Setup(e.to_string()))?;
        Ok((j, q.iter().map(|v| v.iter().sum()).collect()))
    }

    /// dJ/dp by the load-stepping adjoint, added into `rev`, and, when the model has a
    /// temperature field, the temperature seed T̄ = dJ/dT per node (Σ_k −λ_kᵀ ∂R/∂T over the
    /// load steps plus the reactions' explicit dependence) for the upstream fields' adjoint.
    pub fn path_gradient(&self, rev: &mut Reverse) -> Result<Option<Vec<f64>>, RunError> {
        if self.objective.terms.is_empty() {
            return Ok(None);
        }
        let mut want = self.problem.vjp_request();
        want.coords = rev.wants_coordinates();
        want.thermal |= self.problem.model.temperature().is_some();
        // With every state kept, the reverse sweep runs over the solved path; with
        // checkpoints it recomputes the forward steps it needs.
        let g = match (&self.path, self.memory) {
            (Some(path), Checkpointing::StoreAll) => {
                self.problem.gradient_from_path(path, &self.objective, want)
            }
            _ => self.problem.gradient_from(
                self.start(),
                &self.loads,
                &self.objective,
                self.memory,
                want,
            ),
        }
        .map_err(|e| RunError::Setup(e.to_string()))?;
        self.problem.gradient_to_registry(&g, rev.grad);
        if rev.wants_coordinates() {
            rev.add_coordinates(&g.coords, 1.0);
        }
        Ok(g.temperature)
    }

    /// The states of the last run: (load factor, full displacement).
    pub fn states(&self) -> Vec<(f64, &[f64])> {
        self.path
            .as_ref()
            .map(|p| p.states.iter().map(|s| (s.load, s.u.as_slice())).collect())
            .unwrap_or_default()
    }

    /// The output cell of each volume element of the model on `mesh`, the mesh it was built
    /// on (see [`crate::fields::mechanical::output_cell_index`]).
    pub fn cell_output_index(&self, mesh: &Mesh) -> Vec<Option<usize>> {
        let model = &self.problem.model;
        crate::fields::mechanical::output_cell_index(
            mesh,
            (0..model.n_volume_elements()).map(|e| model.element_cell_tag(e)),
        )
    }

    /// The mean displacement of a group's nodes at the last step.
    pub fn mean_displacement(&self, group: &str) -> Option<[f64; 3]> {
        let (_, u) = *self.states().last()?;
        self.mean_displacement_of(u, group)
    }

    /// The mean over a group's nodes of the nodal displacement `u` (3 per node).
    pub fn mean_displacement_of(&self, u: &[f64], group: &str) -> Option<[f64; 3]> {
        let nodes = self.problem.model.group_nodes(group).ok()?;
        if nodes.is_empty() {
            return None;
        }
        let mut m = [0.0; 3];
        for &n in nodes {
            for k in 0..3 {
                m[k] += u[3 * n + k] / nodes.len() as f64;
            }
        }
        Some(m)
    }

    /// Region parameters, for reports.
    pub fn parameters(&self) -> Vec<(String, Vec<(String, f64)>)> {
        self.problem
            .model
            .regions
            .iter()
            .map(|r| {
                let names = r.law.parameter_names();
                let values = r.law.parameters();
                (r.name.clone(), names.into_iter().zip(values).collect())
            })
            .collect()
    }
}

impl HyperelasticField {
    /// The misfit terms Σ_k w (q_k − m_k)² of the objective: (index of the term among the
    /// objective's terms, measured m_k per load step, weight w).
    pub fn misfit_terms(&self) -> Vec<(usize, &[f64], f64)> {
        self.objective
            .terms
            .iter()
            .enumerate()
            .filter_map(|(t, term)| match term {
                PathTerm::Misfit { measured, weight, .. } => {
                    Some((t, measured.as_slice(), *weight))
                }
                _ => None,
            })
            .collect()
    }

    /// The quantity q_{t,k} of every objective term t at every load step k of the last run.
    pub fn step_quantities(&self) -> Result<Vec<Vec<f64>>, RunError> {
        let path = self.path.as_ref().ok_or_else(|| RunError::Setup("solve first".into()))?;
        self.problem
            .evaluate(path, &self.objective)
            .map(|(_, q)| q)
            .map_err(|e| RunError::Setup(e.to_string()))
    }

    /// The dense Hessian of the misfit terms Σ w (q_k − m_k)² of the objective (the other
    /// terms left out) at the last run, with respect to the scalar parameters `ids` of `reg`
    /// (row-major, `ids.len()` squared): one Hessian-vector product through the load steps per
    /// parameter, every step factorized once for all of them
    /// ([`FiniteStrainProblem::hessian_vectors_from_path`]).
    pub fn misfit_hessian(
        &self,
        reg: &ParamRegistry,
        ids: &[ParamId],
    ) -> Result<Vec<f64>, RunError> {
        let path = self.path.as_ref().ok_or_else(|| RunError::Setup("solve first".into()))?;
        let misfits = LoadPathObjective {
            terms: self
                .objective
                .terms
                .iter()
                .filter(|t| matches!(t, PathTerm::Misfit { .. }))
                .cloned()
                .collect(),
        };
        let want = self.problem.vjp_request();
        let n = ids.len();
        let dirs: Vec<_> = ids
            .iter()
            .map(|&id| {
                let mut dir = Gradient::zeros(reg);
                dir.get_mut(id)[0] = 1.0;
                self.problem.path_direction(&dir, None)
            })
            .collect();
        let columns = self
            .problem
            .hessian_vectors_from_path(path, &misfits, &dirs, want)
            .map_err(|e| RunError::Setup(e.to_string()))?;
        let mut h = vec![0.0; n * n];
        for (j, hv) in columns.iter().enumerate() {
            let mut g = Gradient::zeros(reg);
            self.problem.gradient_to_registry(hv, &mut g);
            for (i, &row) in ids.iter().enumerate() {
                h[i * n + j] = g.get(row)[0];
            }
        }
        Ok(h)
    }

    /// The quantities of the last run and their derivatives dq_{t,k}/dp with respect to the
    /// registered parameters of `reg`, one gradient per term and step, by one transposed
    /// solve per term and step ([`FiniteStrainProblem::quantity_gradients`]). Shape
    /// parameters are not covered: their rows are left zero.
    #[allow(clippy::type_complexity)]
    pub fn quantity_jacobian(
        &self,
        reg: &ParamRegistry,
    ) -> Result<(Vec<Vec<f64>>, Vec<Vec<Gradient>>), RunError> {
        let path = self.path.as_ref().ok_or_else(|| RunError::Setup("solve first".into()))?;
        let (q, dq) = self
            .problem
            .quantity_gradients(path, &self.objective, self.problem.vjp_request())
            .map_err(|e| RunError::Setup(e.to_string()))?;
        let rows = dq
            .iter()
            .map(|per_step| {
                per_step
                    .iter()
                    .map(|g| {
                        let mut out = Gradient::zeros(reg);
                        self.problem.gradient_to_registry(g, &mut out);
                        out
                    })
                    .collect()
            })
            .collect();
        Ok((q, rows))
    }
}

impl Field for HyperelasticField {
    fn name(&self) -> &str {
        "hyperelastic"
    }

    fn outputs(&self) -> Vec<Port> {
        vec![Port::nodal("displacement", 3)]
    }

    fn inputs(&self) -> Vec<Port> {
        vec![Port::nodal("temperature", 1)]
    }

    fn available_parameters(&self) -> Vec<String> {
        self.problem.available_parameters()
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
        self.problem.register(registry, name, bounds).map_err(|e| RunError::Setup(e.to_string()))
    }

    fn apply_parameters(
        &mut self,
        registry: &ParamRegistry,
        coordinates: Option<&[[f64; 3]]>,
    ) -> Result<(), RunError> {
        self.problem.apply_parameters(registry).map_err(|e| RunError::Setup(e.to_string()))?;
        if let Some(x) = coordinates {
            self.problem.model.coords = x.to_vec();
            self.problem.model.check_coordinates().map_err(|e| RunError::Setup(e.to_string()))?;
        }
        self.path = None;
        self.solved = false;
        Ok(())
    }

    fn set_input(&mut self, port: usize, values: &[f64]) -> Result<(), RunError> {
        debug_assert_eq!(port, 0, "the finite-strain field has one input");
        self.set_temperature(values)
    }

    fn solve(&mut self, _mode: SolveMode) -> Result<(), RunError> {
        if self.solved && self.path.is_some() {
            return Ok(());
        }
        self.run_load_steps()
    }

    fn is_solved(&self) -> bool {
        self.solved && self.path.is_some()
    }

    fn state(&self) -> Option<&[f64]> {
        self.path.as_ref().and_then(|p| p.states.last()).map(|s| s.u.as_slice())
    }

    fn start_state(&self) -> Vec<f64> {
        vec![0.0; 3 * self.problem.model.n_nodes()]
    }

    fn objective(&self) -> Result<(f64, Vec<f64>), RunError> {
        self.objective_terms()
    }

    fn objective_seed(&self, rev: &mut Reverse) -> Result<Seed, RunError> {
        let t_bar = self.path_gradient(rev)?;
        let inputs = match t_bar {
            Some(t) if self.takes_temperature => vec![(0, t)],
            _ => Vec::new(),
        };
        Ok(Seed { inputs, ..Default::default() })
    }

    fn adjoint_solve(
        &mut self,
        state_bar: &[f64],
        _unknowns_bar: &[f64],
    ) -> Result<Vec<f64>, RunError> {
        if state_bar.iter().any(|v| *v != 0.0) {
            return Err(RunError::Setup(
                "hyperelastic: the finite-strain displacement cannot feed another field's adjoint (its reverse pass runs over the load path)".into(),
            ));
        }
        Ok(vec![0.0; state_bar.len()])
    }

    fn input_vjp(&self, _port: usize, lambda: &[f64]) -> Result<Vec<f64>, RunError> {
        Ok(vec![0.0; lambda.len() / 3])
    }

    fn accumulate(
        &self,
        lambda: &[f64],
        _state_bar: &[f64],
        _rev: &mut Reverse,
        inputs: &[usize],
    ) -> Result<Vec<(usize, Vec<f64>)>, RunError> {
        Ok(inputs.iter().map(|&p| (p, vec![0.0; lambda.len() / 3])).collect())
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

/// Second order over the load path: the tangent of the last step's state for
/// [`SecondOrder::tangent`], and the whole path's second-order adjoint (three solves per step,
/// [`FiniteStrainProblem::hessian_vector_from_path`]) as the objective's Hessian, which puts
/// the temperature part on the input like the first-order seed does.
impl SecondOrder for HyperelasticField {
    fn prescribed_tangent(&self, params: &Gradient) -> Vec<f64> {
        let dir = self.problem.path_direction(params, None);
        let load = self.loads.last().copied().unwrap_or(0.0);
        self.problem.prescribed_tangent(load, &dir)
    }

    fn residual_jvp(&self, _dir: &Direction) -> Result<Vec<f64>, RunError> {
        Err(RunError::Setup(
            "hyperelastic: the finite-strain field cannot be part of a coupled cycle".into(),
        ))
    }

    fn tangent(
        &mut self,
        params: &Gradient,
        coordinates: &[[f64; 3]],
        inputs: &[Vec<f64>],
    ) -> Result<Vec<f64>, RunError> {
        let path = self.path.as_ref().ok_or_else(|| RunError::Setup("solve first".into()))?;
        let Some(last) = path.states.last() else {
            return Ok(self.start_state());
        };
        let mut dir = self.problem.path_direction(params, inputs.first().map(Vec::as_slice));
        dir.model.coordinates = coordinates.to_vec();
        self.problem
            .state_tangent(path.states.len() - 1, last, &dir)
            .map_err(|e| RunError::Setup(e.to_string()))
    }

    fn covers_shape(&self) -> bool {
        true
    }

    fn second_order_vjp(
        &self,
        lambda: &[f64],
        _dir: &Direction,
        _rev: &mut Reverse,
    ) -> Result<OutputVjp, RunError> {
        // The field's adjoint runs inside its objective's seed (λ here is zero), and so does
        // its second-order adjoint (objective_hessian).
        debug_assert!(lambda.iter().all(|v| *v == 0.0));
        Ok(OutputVjp::default())
    }

    fn objective_hessian(&self, dir: &Direction, rev: &mut Reverse) -> Result<Seed, RunError> {
        if self.objective.terms.is_empty() {
            return Ok(Seed::default());
        }
        let path = self.path.as_ref().ok_or_else(|| RunError::Setup("solve first".into()))?;
        let mut want = self.problem.vjp_request();
        want.thermal |= self.problem.model.temperature().is_some();
        want.coords = rev.wants_coordinates();
        let mut pd = self.problem.path_direction(dir.params, dir.inputs.first().map(Vec::as_slice));
        pd.model.coordinates = dir.coordinates.to_vec();
        let hv = self
            .problem
            .hessian_vector_from_path(path, &self.objective, &pd, want)
            .map_err(|e| RunError::Setup(e.to_string()))?;
        let mut g = Gradient::zeros(rev.registry);
        self.problem.gradient_to_registry(&hv, &mut g);
        rev.grad.add_scaled(1.0, &g);
        if rev.wants_coordinates() {
            rev.add_coordinates(&hv.coords, 1.0);
        }
        let inputs = match hv.temperature {
            Some(t) if self.takes_temperature => vec![(0, t)],
            _ => Vec::new(),
        };
        Ok(Seed { inputs, ..Default::default() })
    }
}
