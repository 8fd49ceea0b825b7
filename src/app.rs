//! From a problem file to a solved, differentiable problem, and from results to files.

use std::path::{Path, PathBuf};

use gradfem_io::h5::{CellSelection, Field, FieldValues, Results, Step};
use gradfem_solvers::params::{Gradient, ParamId, ParamKind};
use gradfem_thermal::{BcSpec, ObjectiveKind, ObjectiveTerm, RegionSpec};
use serde::Serialize;

use crate::electrothermal::{
    CoupledGradientTimings, CoupledSolveTimings, CouplingParams, CouplingScheme,
    ElectroThermalProblem, TerminalReport, TerminalTerm,
};
use crate::hyperelastic_file::{HyperelasticReport, HyperelasticRun};
use crate::mechanical::{ForceBalance, MechanicalField, MechanicalSolveTimings};
use crate::problem::{ProblemError, ProblemFile, read_sensors};
use crate::run::{LinearChoice, RunError};
use crate::thermal::{GradientTimings, SolveTimings, ThermalProblem};
use crate::transient_file::{TransientReport, TransientRun};
use gradfem_electrical::TerminalFunctional;
use gradfem_mechanical::linear::objective::{
    ObjectiveKind as MechObjectiveKind, ObjectiveTerm as MechObjectiveTerm,
};
use gradfem_solvers::graph::CouplingGraph;

/// Any error of the application layer.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Problem(#[from] ProblemError),
    #[error("{file}: {source}")]
    Run { file: PathBuf, source: RunError },
    #[error("{path}: cannot write: {message}")]
    Write { path: PathBuf, message: String },
    #[error("{file}: [initial_state]: {source}")]
    InitialState { file: PathBuf, source: crate::ansys_import::ImportError },
}

/// The problem file embedded in the binary: `cargo run --release` with no arguments runs it.
pub const DEFAULT_PROBLEM: &str = include_str!("../examples/microactuator_builtin.toml");

/// The upstream fields of a problem: the thermal field alone, or electro-thermal.
pub enum Fields {
    Thermal(Box<ThermalProblem>),
    ElectroThermal(Box<ElectroThermalProblem>),
}

/// A problem built from a problem file: the thermal field alone or electro-thermal (when the
/// file has an `[electrical]` table), and optionally the mechanical field downstream of the
/// temperature (`[mechanical]`): the chain I → Q → T → σ → u.
pub struct Problem {
    /// The coupling graph of the fields present; [`Problem::solve`] follows its schedule.
    pub coupling: CouplingGraph,
    pub fields: Fields,
    pub mechanical: Option<Box<MechanicalField>>,
    /// Transient heat (`[transient]`): the thermal field is stepped in time instead of solved
    /// for its steady state.
    pub transient: Option<Box<TransientRun>>,
    /// Finite-strain hyperelasticity (`[hyperelastic]`): load steps, their adjoint.
    pub hyperelastic: Option<Box<HyperelasticRun>>,
    /// A transient problem with a mechanical field: its quasi-static state at every time
    /// step of the last run.
    pub mechanical_history: Option<MechanicalHistory>,
    /// The unit of the objective J ([`objective_unit`]); empty for a problem not built from a
    /// problem file.
    pub objective_unit: String,
}

/// The mechanical field of a transient problem at every state of the last run: quasi-static,
/// solved with that state's temperature.
#[derive(Clone, Debug, Default)]
pub struct MechanicalHistory {
    /// The mechanical objective terms (weighted sum) at each state.
    pub objective: Vec<f64>,
    /// The mean displacement of the tip group at each state [m] (empty without a tip group).
    pub tip: Vec<[f64; 3]>,
    /// The nodal displacement (`3·n_nodes`) at each state [m].
    pub displacement: Vec<Vec<f64>>,
}

/// The objective (or a constraint quantity) of a problem, per field.
#[derive(Clone, Debug, Default)]
pub struct ObjectiveSet {
    pub thermal: Vec<ObjectiveTerm>,
    pub electrical: Vec<TerminalTerm>,
    pub mechanical: Vec<MechObjectiveTerm>,
}

impl From<Box<ThermalProblem>> for Problem {
    fn from(p: Box<ThermalProblem>) -> Self {
        let mut p = Problem {
            coupling: CouplingGraph::new(),
            fields: Fields::Thermal(p),
            mechanical: None,
            transient: None,
            hyperelastic: None,
            mechanical_history: None,
            objective_unit: String::new(),
        };
        p.coupling = p.physical_graph();
        p
    }
}

impl From<Box<ElectroThermalProblem>> for Problem {
    fn from(p: Box<ElectroThermalProblem>) -> Self {
        let mut p = Problem {
            coupling: CouplingGraph::new(),
            fields: Fields::ElectroThermal(p),
            mechanical: None,
            transient: None,
            hyperelastic: None,
            mechanical_history: None,
            objective_unit: String::new(),
        };
        p.coupling = p.physical_graph();
        p
    }
}

impl Fields {
    /// The thermal field (alone or inside the coupled problem). A method of the fields rather
    /// than of [`Problem`], so that it borrows them apart from the other members.
    pub fn thermal(&self) -> &ThermalProblem {
        match self {
            Fields::Thermal(p) => p,
            Fields::ElectroThermal(p) => &p.thermal,
        }
    }

    /// The thermal field, mutably.
    pub fn thermal_mut(&mut self) -> &mut ThermalProblem {
        match self {
            Fields::Thermal(p) => p,
            Fields::ElectroThermal(p) => &mut p.thermal,
        }
    }

    /// J and dJ/dp of the thermal (or electro-thermal) fields with the extra temperature seed
    /// `t_bar` (dJ/dT per node from a downstream field) added to their adjoint; the total
    /// timings and, for the coupled problem, per block.
    fn gradient_seeded(
        &mut self,
        t_bar: Option<&[f64]>,
    ) -> Result<(f64, Gradient, GradientTimings, Option<CoupledGradientTimings>), RunError> {
        Ok(match self {
            Fields::Thermal(p) => {
                let (j, g, t) = p.gradient_seeded(t_bar)?;
                (j, g, t, None)
            }
            Fields::ElectroThermal(p) => {
                let (j, g, t) = p.gradient_seeded(t_bar)?;
                (j, g, t.totals(), Some(t))
            }
        })
    }
}

impl Problem {
    /// The coupling graph of the fields present: `electrical -> thermal` (Joule heat),
    /// `thermal -> electrical` (a temperature-dependent resistivity), `thermal -> mechanical`
    /// (thermal strain), `thermal -> hyperelastic` (finite-strain thermal expansion
    /// F_θ = (1 + α (T − T_ref)) I, when the finite-strain field takes the temperature).
    pub fn physical_graph(&self) -> CouplingGraph {
        let mut g = CouplingGraph::new();
        let add = |g: &mut CouplingGraph, f: &str| {
            g.add_field(f).expect("each field once");
        };
        let link = |g: &mut CouplingGraph, name: &str, a: &str, b: &str| {
            g.add_transfer(name, a, b).expect("fields exist, one transfer each");
        };
        if let Some(et) = self.electro_thermal() {
            add(&mut g, "electrical");
            add(&mut g, "thermal");
            link(&mut g, "joule_heat", "electrical", "thermal");
            if et.is_two_way() {
                link(&mut g, "resistivity", "thermal", "electrical");
            }
        } else {
            add(&mut g, "thermal");
        }
        if self.mechanical.is_some() {
            add(&mut g, "mechanical");
            link(&mut g, "thermal_strain", "thermal", "mechanical");
        }
        // A finite-strain field driven by the temperature; one without a temperature is
        // solved on its own after the stages.
        if self.hyperelastic.as_ref().is_some_and(|h| h.takes_temperature()) {
            add(&mut g, "hyperelastic");
            link(&mut g, "thermal_expansion", "thermal", "hyperelastic");
        }
        g
    }

    /// The thermal field (alone or inside the coupled problem).
    pub fn thermal(&self) -> &ThermalProblem {
        self.fields.thermal()
    }

    fn thermal_mut(&mut self) -> &mut ThermalProblem {
        self.fields.thermal_mut()
    }

    /// The electro-thermal problem, when there is an electrical field.
    pub fn electro_thermal(&self) -> Option<&ElectroThermalProblem> {
        match &self.fields {
            Fields::ElectroThermal(p) => Some(p),
            Fields::Thermal(_) => None,
        }
    }

    /// The one parameter registry.
    pub fn registry(&self) -> &gradfem_solvers::params::ParamRegistry {
        &self.thermal().registry
    }

    /// The one parameter registry, to change values (then call
    /// [`apply_parameters`](Self::apply_parameters)).
    pub fn registry_mut(&mut self) -> &mut gradfem_solvers::params::ParamRegistry {
        &mut self.thermal_mut().registry
    }

    /// Every parameter name the problem can register.
    pub fn available_parameters(&self) -> Vec<String> {
        let mut names = match &self.fields {
            Fields::Thermal(p) => p.available_parameters(),
            Fields::ElectroThermal(p) => p.available_parameters(),
        };
        if let Some(m) = &self.mechanical {
            names.extend(m.available_parameters());
        }
        if let Some(t) = &self.transient {
            names.extend(t.available_parameters(self.thermal()));
        }
        if let Some(h) = &self.hyperelastic {
            names.extend(h.available_parameters());
        }
        names
    }

    /// Register a parameter of any field by name (see the fields' `register`).
    pub fn register(
        &mut self,
        name: &str,
        bounds: Option<[f64; 2]>,
    ) -> Result<gradfem_solvers::params::ParamId, RunError> {
        if let Some(m) = &mut self.mechanical
            && MechanicalField::owns(name)
        {
            let reg = &mut self.fields.thermal_mut().registry;
            return m.register(reg, name, bounds);
        }
        if let Some(h) = &mut self.hyperelastic
            && HyperelasticRun::owns(name)
        {
            let reg = &mut self.fields.thermal_mut().registry;
            return h.register(reg, name, bounds);
        }
        if let Some(t) = &mut self.transient
            && TransientRun::owns(name)
        {
            let th = self.fields.thermal_mut();
            return t.register(th, name, bounds);
        }
        let r = match &mut self.fields {
            Fields::Thermal(p) => p.register(name, bounds),
            Fields::ElectroThermal(p) => p.register(name, bounds),
        };
        let more_fields =
            self.mechanical.is_some() || self.transient.is_some() || self.hyperelastic.is_some();
        r.map_err(|e| match (e, more_fields) {
            (RunError::Setup(_), true) => RunError::Setup(format!(
                "cannot register '{name}': this problem offers {}",
                self.available_parameters().join(", ")
            )),
            (e, _) => e,
        })
    }

    /// Copy the registry's values into the models (invalidates the solution).
    pub fn apply_parameters(&mut self) -> Result<(), RunError> {
        self.mechanical_history = None;
        match &mut self.fields {
            Fields::Thermal(p) => p.apply_parameters()?,
            Fields::ElectroThermal(p) => p.apply_parameters()?,
        }
        if let Some(m) = &mut self.mechanical {
            let t = self.fields.thermal();
            m.apply_parameters(&t.registry, &t.shape)?;
        }
        if let Some(tr) = &mut self.transient {
            let reg = &self.fields.thermal().registry;
            tr.apply_parameters(reg);
        }
        if let Some(h) = &mut self.hyperelastic {
            let t = self.fields.thermal();
            h.apply_parameters(&t.registry, &t.shape)?;
        }
        Ok(())
    }

    /// The largest nodal temperature over a volume group (`"*"`: the whole model) in the
    /// solved state.
    pub fn temperature_peak(&self, group: &str) -> Result<f64, RunError> {
        let th = self.thermal();
        let t = th.temperature().ok_or_else(|| RunError::Setup("solve first".into()))?;
        Ok(gradfem_thermal::objective::group_peak(&th.model, group, t)?.0)
    }

    /// Replace the objective; returns the old one. The solution stays valid: only the
    /// functional changes.
    pub fn swap_objective(&mut self, new: ObjectiveSet) -> ObjectiveSet {
        let mechanical = match &mut self.mechanical {
            Some(m) => std::mem::replace(&mut m.objective, new.mechanical),
            None => Vec::new(),
        };
        match &mut self.fields {
            Fields::Thermal(p) => ObjectiveSet {
                thermal: std::mem::replace(&mut p.objective, new.thermal),
                electrical: Vec::new(),
                mechanical,
            },
            Fields::ElectroThermal(p) => ObjectiveSet {
                thermal: std::mem::replace(&mut p.thermal.objective, new.thermal),
                electrical: std::mem::replace(&mut p.electrical_objective, new.electrical),
                mechanical,
            },
        }
    }

    /// Solve the forward problem: the upstream fields, then the mechanical or finite-strain
    /// field with their temperature.
    pub fn solve(&mut self) -> Result<(), RunError> {
        if let Some(tr) = &mut self.transient {
            // The graph's stages in time: the electrical field and its Joule heat once (a
            // step of the voltage at t = 0), the thermal field stepped in time, and the
            // mechanical field quasi-static at every state.
            self.mechanical_history = None;
            if let Fields::ElectroThermal(et) = &mut self.fields {
                et.solve_source()?;
            }
            tr.solve(self.fields.thermal_mut())?;
            if let Some(m) = &mut self.mechanical {
                let (_, states) = tr.states().expect("solved above");
                let mut history = MechanicalHistory::default();
                for t in states {
                    let u = m.solve(Some(t))?.to_vec();
                    history.objective.push(m.objective_terms()?.0);
                    if let Some(tip) = &m.tip_group {
                        history.tip.push(m.mean_displacement(tip)?);
                    }
                    history.displacement.push(u);
                }
                self.mechanical_history = Some(history);
            }
            return Ok(());
        }
        // The stages of the coupling graph in order: the electrical and thermal fields (one
        // coupled stage when ρ depends on T, else electrical then thermal: the electro-thermal
        // problem solves both, in that order), then the mechanical or finite-strain field.
        let mut upstream_done = false;
        let mut hyperelastic_done = false;
        for stage in self.coupling.schedule_names() {
            if stage.iter().any(|f| f == "hyperelastic") {
                let h = self.hyperelastic.as_mut().expect("the graph names it");
                let t = self.fields.thermal().temperature().ok_or_else(|| {
                    RunError::Setup("hyperelastic: the thermal field is not solved".into())
                })?;
                h.set_temperature(t)?;
                h.solve()?;
                hyperelastic_done = true;
            } else if stage.iter().any(|f| f == "mechanical") {
                let m = self.mechanical.as_mut().expect("the graph names it");
                let t = match &self.fields {
                    Fields::Thermal(p) => p.temperature(),
                    Fields::ElectroThermal(p) => p.temperature(),
                };
                m.solve(t)?;
                // A prescribed temperature from outside is the problem's temperature field
                // (summaries and outputs show it, not the placeholder thermal field's).
                if let Some(imp) = m.imported_temperature() {
                    let field = imp.field();
                    self.thermal_mut().set_solution(field);
                }
            } else if !upstream_done {
                match &mut self.fields {
                    Fields::Thermal(p) => p.solve().map(|_| ())?,
                    Fields::ElectroThermal(p) => p.solve()?,
                }
                upstream_done = true;
            }
        }
        // A finite-strain field without a temperature (the thermal field is then a placeholder
        // held at fixed values, solved above for summaries).
        if let Some(h) = self.hyperelastic.as_mut().filter(|_| !hyperelastic_done) {
            h.solve()?;
        }
        Ok(())
    }

    /// True when the forward state is solved for the current parameters.
    pub fn is_solved(&self) -> bool {
        if let Some(tr) = &self.transient {
            return tr.is_solved()
                && (self.mechanical.is_none() || self.mechanical_history.is_some());
        }
        let up = match &self.fields {
            Fields::Thermal(p) => p.temperature().is_some(),
            Fields::ElectroThermal(p) => p.temperature().is_some() && p.potential().is_some(),
        };
        if let Some(h) = &self.hyperelastic {
            return up && h.is_solved();
        }
        up && self.mechanical.as_ref().is_none_or(|m| m.displacement().is_some())
    }

    /// J at the last solution (solving first if needed), with each weighted term: thermal
    /// terms, terminal functionals, then mechanical terms.
    pub fn objective_terms(&mut self) -> Result<(f64, Vec<f64>), RunError> {
        if !self.is_solved() {
            self.solve()?;
        }
        if self.transient.is_some() {
            let j = self.transient_objective()?;
            return Ok((j, vec![j]));
        }
        if let Some(h) = &self.hyperelastic {
            return h.objective_terms();
        }
        let (mut value, mut terms) = match &self.fields {
            Fields::Thermal(p) => {
                let e = p.evaluate_objective(false)?;
                (e.value, e.terms)
            }
            Fields::ElectroThermal(p) => p.objective_terms()?,
        };
        if let Some(m) = &self.mechanical {
            let (v, t) = m.objective_terms()?;
            value += v;
            terms.extend(t);
        }
        Ok((value, terms))
    }

    /// J = Σₙ wₙ (j_thermal(Tⁿ) + j_mechanical(uⁿ)) of a solved transient problem.
    fn transient_objective(&self) -> Result<f64, RunError> {
        Ok(self.transient_state_objective()?.0)
    }

    /// The objective terms' values jₙ at every state of a solved transient problem, thermal
    /// and mechanical terms together (unweighted in time).
    pub fn transient_state_values(&self) -> Result<Vec<f64>, RunError> {
        let tr = self.transient.as_ref().expect("a transient problem");
        let mut j = tr.state_objective(self.thermal())?;
        if let Some(h) = &self.mechanical_history {
            for (a, b) in j.iter_mut().zip(&h.objective) {
                *a += b;
            }
        }
        Ok(j)
    }

    /// J = F(j₀ … j_N) of a solved transient problem's `[transient] objective` rule over
    /// [`transient_state_values`](Self::transient_state_values), and dJ/djₙ.
    fn transient_state_objective(&self) -> Result<(f64, Vec<f64>), RunError> {
        let tr = self.transient.as_ref().expect("a transient problem");
        tr.aggregate(&self.transient_state_values()?)
    }

    /// J and its gradient, with the total timings and, for the coupled problem, per block.
    /// With a mechanical field the reverse sweep starts there: its adjoint hands the
    /// temperature seed T̄ to the upstream fields' adjoint.
    pub fn gradient(
        &mut self,
    ) -> Result<(f64, Gradient, GradientTimings, Option<CoupledGradientTimings>), RunError> {
        if !self.is_solved() {
            self.solve()?;
        }
        let t0 = std::time::Instant::now();
        // J = F(j₀ … j_N) of a transient problem: its derivative by each state's terms weighs
        // their adjoints.
        let time_objective =
            self.transient.is_some().then(|| self.transient_state_objective()).transpose()?;
        if let (Some((j, weights)), Some(tr)) = (time_objective, &mut self.transient) {
            // Reverse order of the stages: the mechanical adjoint of every weighted state
            // seeds dJ/dTⁿ, the thermal adjoint runs back in time and hands dJ/dQ of the
            // Joule heat to the electrical adjoint.
            let mut g_mech = Gradient::zeros(&self.fields.thermal().registry);
            let mut seeds: Vec<Option<(f64, Vec<f64>)>> = Vec::new();
            if let Some(m) = &mut self.mechanical {
                let states: Vec<Vec<f64>> = tr.states().expect("solved").1.to_vec();
                let shape = &self.fields.thermal().shape;
                let mut timings = crate::mechanical::MechanicalGradientTimings::default();
                seeds = vec![None; states.len()];
                for (n, t) in states.iter().enumerate() {
                    let w = weights[n];
                    if w == 0.0 {
                        continue;
                    }
                    m.solve(Some(t))?;
                    let mut g = Gradient::zeros(&self.fields.thermal().registry);
                    let (j, t_bar) = m.adjoint(shape, &mut g, &mut timings)?;
                    g_mech.add_scaled(w, &g);
                    seeds[n] = Some((w * j, t_bar.iter().map(|v| w * v).collect()));
                }
                if let Some(last) = states.last() {
                    m.solve(Some(last))?;
                }
                m.last_gradient = timings;
            }
            let (_, mut g, q_bar) = tr.gradient_seeded(self.fields.thermal(), &seeds, &weights)?;
            g.add_scaled(1.0, &g_mech);
            if let Fields::ElectroThermal(et) = &mut self.fields
                && !q_bar.is_empty()
            {
                et.source_adjoint(&q_bar, &mut g)?;
            }
            let timings =
                GradientTimings { gradient_s: t0.elapsed().as_secs_f64(), ..Default::default() };
            return Ok((j, g, timings, None));
        }
        if let Some(h) = &self.hyperelastic {
            let th = self.fields.thermal();
            let (mut j, mut g, t_bar) = h.gradient_and_temperature_seed(&th.registry, &th.shape)?;
            // The T → u transfer: T̄ = dJ/dT seeds the upstream fields' adjoint, whose
            // parameters (conductivity, convection, sources, voltages, …) get their share.
            let mut blocks = None;
            let mut timings = GradientTimings::default();
            if let Some(t_bar) = t_bar.filter(|_| h.takes_temperature()) {
                let (ju, gu, tu, bu) = self.fields.gradient_seeded(Some(&t_bar))?;
                j += ju;
                g.add_scaled(1.0, &gu);
                (timings, blocks) = (tu, bu);
            }
            timings.gradient_s = t0.elapsed().as_secs_f64();
            return Ok((j, g, timings, blocks));
        }
        let mut mech_part = None;
        if let Some(m) = &mut self.mechanical {
            let t = self.fields.thermal();
            let mut g = Gradient::zeros(&t.registry);
            let mut timings = crate::mechanical::MechanicalGradientTimings::default();
            let (j, t_bar) = m.adjoint(&t.shape, &mut g, &mut timings)?;
            mech_part = Some((j, g, t_bar, timings));
        }
        let extra = mech_part.as_ref().map(|(_, _, t, _)| t.as_slice());
        let (mut j, mut g, mut t, blocks) = self.fields.gradient_seeded(extra)?;
        if let Some((jm, gm, _, mt)) = mech_part {
            j += jm;
            g.add_scaled(1.0, &gm);
            t.adjoint_solve_s += mt.adjoint_solve_s;
            t.accumulate_s += mt.accumulate_s;
            t.gradient_s = t0.elapsed().as_secs_f64();
            if let Some(m) = &mut self.mechanical {
                m.last_gradient = mt;
            }
        }
        Ok((j, g, t, blocks))
    }

    /// Taylor test over every registered parameter; leaves the problem as it was.
    pub fn taylor_test(
        &mut self,
        params: &gradfem_solvers::taylor::TaylorParams,
        mut progress: impl FnMut(usize),
    ) -> Result<gradfem_solvers::taylor::TaylorResult, RunError> {
        if self.mechanical.is_none() && self.transient.is_none() && self.hyperelastic.is_none() {
            return match &mut self.fields {
                Fields::Thermal(p) => p.taylor_test(params, progress),
                Fields::ElectroThermal(p) => p.taylor_test(params, progress),
            };
        }
        let pv = gradfem_solvers::params::ParamVector::all(self.registry());
        let (_, grad, _, _) = self.gradient()?;
        let g = grad.flatten(&pv);
        let m0 = pv.gather(self.registry());
        let dm = crate::thermal::direction(&m0, &pv, self.registry(), &self.thermal().shape);
        let mut reg = std::mem::take(self.registry_mut());
        let mut count = 0;
        let result = gradfem_solvers::taylor::taylor_test_registry(
            &mut reg,
            &pv,
            &g,
            &dm,
            params,
            |r: &gradfem_solvers::params::ParamRegistry| -> Result<f64, RunError> {
                *self.registry_mut() = r.clone();
                self.apply_parameters()?;
                count += 1;
                progress(count);
                Ok(self.objective_terms()?.0)
            },
        );
        *self.registry_mut() = reg;
        self.apply_parameters()?;
        self.solve()?;
        result
    }

    /// The direction of the combined Taylor test of [`taylor_test`](Self::taylor_test), over
    /// every registered entry in registration order (see [`TAYLOR_DIRECTION_SEED`]).
    pub fn taylor_direction(&self) -> Vec<f64> {
        let pv = gradfem_solvers::params::ParamVector::all(self.registry());
        let m0 = pv.gather(self.registry());
        crate::thermal::direction(&m0, &pv, self.registry(), &self.thermal().shape)
    }

    /// How the combined Taylor test's direction was drawn: seed, scaling, its 2-norm, `h0`.
    pub fn taylor_direction_report(
        &self,
        params: &gradfem_solvers::taylor::TaylorParams,
    ) -> TaylorDirection {
        let d = self.taylor_direction();
        TaylorDirection {
            seed: Some(TAYLOR_DIRECTION_SEED),
            scaling: COMBINED_SCALING.to_string(),
            norm: norm2(&d),
            h0: params.h0,
            step: None,
        }
    }

    /// Taylor tests of every registered parameter on its own (`gradfem check-gradient
    /// --per-parameter`): the adjoint gradient, then one test per parameter along the combined
    /// direction restricted to it — for a scalar the full step ±h0·s (s its magnitude, as in
    /// the combined direction), for a vector parameter (node coordinates, a per-element field)
    /// the seeded random entries of its block. Leaves the problem as it was.
    pub fn taylor_test_per_parameter(
        &mut self,
        params: &gradfem_solvers::taylor::TaylorParams,
        progress: impl FnMut(usize),
    ) -> Result<Vec<ParameterTaylor>, RunError> {
        let (_, grad, _, _) = self.gradient()?;
        let pv = gradfem_solvers::params::ParamVector::all(self.registry());
        let g = grad.flatten(&pv);
        self.taylor_test_gradient_per_parameter(&g, params, progress)
    }

    /// [`taylor_test_per_parameter`](Self::taylor_test_per_parameter) of a given gradient
    /// `grad`, flat in the order of `ParamVector::all` ([`Gradient::flatten`]) — to check a
    /// gradient computed elsewhere. An error when its length is not the registry's. Each test
    /// evaluates `h0`'s `steps` points; `progress` sees the count of forward evaluations
    /// (1 + parameters × steps in all).
    pub fn taylor_test_gradient_per_parameter(
        &mut self,
        grad: &[f64],
        params: &gradfem_solvers::taylor::TaylorParams,
        mut progress: impl FnMut(usize),
    ) -> Result<Vec<ParameterTaylor>, RunError> {
        use gradfem_solvers::taylor::{
            TaylorPart, direction_within_bounds, random_direction, restrict,
            taylor_test_parts_registry,
        };
        if !(params.h0 > 0.0 && params.h0.is_finite()) || params.steps < 2 {
            return Err(RunError::Setup(format!(
                "Taylor test: h0 = {} must be a positive number and steps = {} at least 2",
                params.h0, params.steps
            )));
        }
        let pv = gradfem_solvers::params::ParamVector::all(self.registry());
        if grad.len() != pv.len() {
            return Err(RunError::Setup(format!(
                "Taylor test: the gradient has {} entries, the registered parameters {}",
                grad.len(),
                pv.len()
            )));
        }
        if !self.is_solved() {
            self.solve()?;
        }
        let m0 = pv.gather(self.registry());
        let d = self.taylor_direction();
        let u = random_direction(m0.len(), TAYLOR_DIRECTION_SEED);
        let (lo, hi) = pv.bounds();
        let mut parts = Vec::new();
        let mut described = Vec::new();
        for &id in pv.ids() {
            let spec = self.registry().get(id);
            let range = pv.range(id).expect("in the vector");
            let mut dm = restrict(&d, range.clone());
            let scalar = matches!(spec.kind, ParamKind::Scalar) && range.len() == 1;
            if scalar {
                // The whole scale s of the entry, with the random entry's sign: d = u s.
                let i = range.start;
                dm[i] = if u[i] != 0.0 {
                    d[i] / u[i].abs()
                } else if m0[i] != 0.0 {
                    m0[i].abs()
                } else {
                    1e-3
                };
            }
            let dm = direction_within_bounds(&m0, &dm, &lo, &hi, params.h0);
            let direction = if scalar {
                TaylorDirection {
                    seed: None,
                    scaling: SCALAR_SCALING.to_string(),
                    norm: norm2(&dm),
                    h0: params.h0,
                    step: Some(params.h0 * dm[range.start]),
                }
            } else {
                TaylorDirection {
                    seed: Some(TAYLOR_DIRECTION_SEED),
                    scaling: if matches!(spec.kind, ParamKind::NodeCoordinates) {
                        COORDINATE_SCALING.to_string()
                    } else {
                        BLOCK_SCALING.to_string()
                    },
                    norm: norm2(&dm),
                    h0: params.h0,
                    step: None,
                }
            };
            described.push((spec.name.clone(), spec.kind.to_string(), range.len(), direction));
            parts.push(TaylorPart { name: spec.name.clone(), dm });
        }
        // Newton starts from the converged state at every evaluation (and at the final solve),
        // so the evaluations differ by the parameters only.
        let restart = self.transient.is_none();
        let converged = self.thermal().unknowns().to_vec();
        let mut reg = std::mem::take(self.registry_mut());
        let mut count = 0;
        let results = taylor_test_parts_registry(
            &mut reg,
            &pv,
            grad,
            &parts,
            params,
            |r: &gradfem_solvers::params::ParamRegistry| -> Result<f64, RunError> {
                *self.registry_mut() = r.clone();
                if restart {
                    self.thermal_mut().set_unknowns(converged.clone());
                }
                self.apply_parameters()?;
                count += 1;
                progress(count);
                Ok(self.objective_terms()?.0)
            },
        );
        *self.registry_mut() = reg;
        if restart {
            self.thermal_mut().set_unknowns(converged);
        }
        self.apply_parameters()?;
        self.solve()?;
        Ok(described
            .into_iter()
            .zip(results?)
            .map(|((name, kind, entries, direction), result)| ParameterTaylor {
                name,
                kind,
                entries,
                direction,
                dj_dm: result.dj_dm,
                remainders: result.remainders.clone(),
                rates: result.rates.clone(),
                rates_zeroth: result.rates_zeroth.clone(),
                rates_used: result.rates_used,
                observed_min_rate: result.min_rate(),
                min_rate: result.threshold,
                passed: result.passed,
                verdict: result.verdict().to_string(),
                note: result.note.clone(),
                result,
            })
            .collect())
    }

    /// The thermal field, mutably (for set-up).
    pub fn thermal_field_mut(&mut self) -> &mut ThermalProblem {
        self.thermal_mut()
    }
}

/// The seed of the Taylor directions of `gradfem check-gradient`: the combined direction
/// ([`crate::thermal::direction`]) draws its entries u_i ∈ [−1, 1) from SplitMix64 with it
/// ([`gradfem_solvers::taylor::random_direction`]), and the per-parameter directions are its
/// restrictions.
pub const TAYLOR_DIRECTION_SEED: u64 = 7;

/// How the combined direction is scaled (see [`crate::thermal::direction`]).
const COMBINED_SCALING: &str = "dm_i = u_i s_i: s_i = |m_i|, 1e-3 where m_i = 0 (a morph at 0: \
     its move of a thousandth of the mesh size), node coordinates: 1e-3 of their range";
/// How a scalar's direction is scaled.
const SCALAR_SCALING: &str =
    "dm = ±s: s = |m|, 1e-3 where m = 0 (a morph at 0: its move of a thousandth of the mesh size)";
/// How the block of a vector parameter is scaled.
const BLOCK_SCALING: &str =
    "dm_i = u_i s_i on the block, 0 elsewhere: s_i = |m_i|, 1e-3 where m_i = 0";
/// How the block of the node coordinates is scaled.
const COORDINATE_SCALING: &str =
    "dm_i = u_i s on the block, 0 elsewhere: s = 1e-3 of the coordinates' range";

fn norm2(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// How the direction `dm` of a Taylor test was drawn (`gradfem check-gradient` reports it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaylorDirection {
    /// Seed of the pseudo-random entries u_i ∈ [−1, 1) ([`TAYLOR_DIRECTION_SEED`]); `None` for
    /// a scalar, stepped by its whole scale.
    pub seed: Option<u64>,
    /// How the entries are scaled.
    pub scaling: String,
    /// ‖dm‖₂.
    pub norm: f64,
    /// The first step: the points are m + h_i dm with h_i = h0 / 2^i.
    pub h0: f64,
    /// For a scalar: the first perturbation h0·dm of its value (in its unit); `None` for the
    /// others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<f64>,
}

/// The Taylor test of one registered parameter in a direction of its own
/// ([`Problem::taylor_test_per_parameter`]); serialized for `check-gradient --json`.
#[derive(Clone, Debug, Serialize)]
pub struct ParameterTaylor {
    /// Registry name.
    pub name: String,
    /// Its kind (`scalar`, `node coordinates`, `per-element (group)`, `field`).
    pub kind: String,
    /// Number of entries.
    pub entries: usize,
    /// The direction it was tested in.
    pub direction: TaylorDirection,
    /// ⟨∇J, dm⟩ from the gradient under test.
    pub dj_dm: f64,
    /// First-order remainders |J(m + h_i dm) − J(m) − h_i dJ|, one per step h_i = h0 / 2^i.
    pub remainders: Vec<f64>,
    /// Observed rates of the first-order remainder (2 for a right gradient).
    pub rates: Vec<f64>,
    /// Observed rates of the zeroth-order remainder (1).
    pub rates_zeroth: Vec<f64>,
    /// How many leading rates entered the decision (those before round-off).
    pub rates_used: usize,
    /// The smallest rate among those used (`null` in JSON when none could be measured).
    pub observed_min_rate: f64,
    /// The threshold: the smallest rate that passes (`[taylor] min_rate`).
    pub min_rate: f64,
    /// Whether the parameter's derivative passed.
    pub passed: bool,
    /// `passed`, `passed (remainders at round-off)`, `gradient zero, residual at round-off`
    /// or `FAILED`.
    pub verdict: String,
    /// Why the decision was not a plain comparison of rates, if so.
    pub note: Option<String>,
    /// The whole test, for its table.
    #[serde(skip)]
    pub result: gradfem_solvers::taylor::TaylorResult,
}

/// Build the thermal problem described by a problem file; a file with an `[electrical]` or
/// `[mechanical]` table is an error here (use [`build_problem`]).
pub fn build(file: &ProblemFile) -> Result<ThermalProblem, AppError> {
    let p = build_problem(file)?;
    match (p.fields, p.mechanical) {
        (Fields::Thermal(p), None) => Ok(*p),
        _ => Err(invalid(
            file,
            "this problem has more fields than the thermal one; build it with app::build_problem",
        )),
    }
}
pub fn build_problem(file: &ProblemFile) -> Result<Problem, AppError> {
    let run_err = |source: RunError| AppError::Run { file: file.path.clone(), source };
    let (mut thermal, terminal_terms, mechanical_terms) = build_thermal(file)?;
    let spec = &file.spec;
    for m in &spec.morphs {
        let morph = m
            .build(&thermal.model.coords, &thermal.mesh.node_tags, &file.resolve_path("."))
            .map_err(|e| invalid(file, &e.to_string()))?;
        thermal.shape.define_morph(morph).map_err(|e| invalid(file, &e.to_string()))?;
    }
    let mechanical = match &spec.mechanical {
        Some(ms) => Some(Box::new(build_mechanical(file, &thermal.mesh, ms, mechanical_terms)?)),
        None => {
            if !mechanical_terms.is_empty() {
                return Err(invalid(
                    file,
                    "displacement, compliance and von Mises objectives need a [mechanical] table",
                ));
            }
            None
        }
    };
    let mut problem = match &spec.electrical {
        None => {
            if spec.coupling.as_ref().is_some_and(|c| c.transfers.is_none()) {
                return Err(invalid(
                    file,
                    "[coupling] sets how the electro-thermal cycle is solved and needs an [electrical] table (or declares `transfers`)",
                ));
            }
            Problem::from(Box::new(thermal))
        }
        Some(el) => {
            let mut conductors = Vec::new();
            no_repeated_group(
                file,
                "[[electrical.conductor]]",
                el.conductors.iter().map(|c| &c.group),
            )?;
            for c in &el.conductors {
                file.check_group(&thermal.mesh, &c.group, "[[electrical.conductor]]")?;
                let line = file.line_of(&c.group);
                let law = match (c.alpha_r, &c.law) {
                    (Some(_), Some(_)) => {
                        return Err(invalid(
                            file,
                            &format!("line {line}: give either `alpha_r` or `law`, not both"),
                        ));
                    }
                    (Some(a), None) => gradfem_electrical::ResistivityLaw::Linear { alpha_r: a },
                    (None, Some(l)) => l.clone(),
                    (None, None) => gradfem_electrical::ResistivityLaw::Constant,
                };
                if c.sigma.is_some() == c.resistivity.is_some() {
                    return Err(invalid(
                        file,
                        &format!(
                            "line {line}: a conductor needs exactly one of `sigma` (S/m) and `resistivity` (Ω·m)"
                        ),
                    ));
                }
                conductors.push(gradfem_electrical::ConductorSpec {
                    group: c.group.get_ref().clone(),
                    // Values from a file replace it once the model is built.
                    sigma: c.sigma.as_ref().map(|s| s.uniform().unwrap_or(1.0)),
                    resistivity: c.resistivity,
                    law,
                    t_ref: c.t_ref.unwrap_or(293.15),
                });
            }
            let mut terminals = Vec::new();
            for t in &el.terminals {
                file.check_group(&thermal.mesh, &t.group, "[[electrical.terminal]]")?;
                let line = file.line_of(&t.kind);
                let need = |v: Option<f64>, key: &str| {
                    v.ok_or_else(|| {
                        invalid(
                            file,
                            &format!(
                                "line {line}: a '{}' terminal needs `{key}`",
                                t.kind.get_ref()
                            ),
                        )
                    })
                };
                let kind = match t.kind.get_ref().as_str() {
                    "voltage" => {
                        gradfem_electrical::TerminalKind::Voltage { value: need(t.value, "value")? }
                    }
                    "ground" => gradfem_electrical::TerminalKind::Ground,
                    "current" => gradfem_electrical::TerminalKind::Current {
                        current: need(t.current, "current")?,
                    },
                    other => {
                        return Err(invalid(
                            file,
                            &format!(
                                "line {line}: unknown terminal kind '{other}'; expected voltage, ground or current"
                            ),
                        ));
                    }
                };
                terminals.push(gradfem_electrical::TerminalSpec {
                    group: t.group.get_ref().clone(),
                    kind,
                });
            }
            let cs = spec.coupling.clone().unwrap_or_default();
            let coupling = CouplingParams {
                scheme: CouplingScheme::parse(&cs.scheme).map_err(run_err)?,
                tol: cs.tol,
                max_iterations: cs.max_iterations,
            };
            let names: Vec<String> = terminals.iter().map(|t| t.group.clone()).collect();
            for (line, term) in &terminal_terms {
                let named: Vec<&String> = match &term.functional {
                    TerminalFunctional::Current { terminal }
                    | TerminalFunctional::Voltage { terminal } => vec![terminal],
                    TerminalFunctional::Resistance { drive, reference } => vec![drive, reference],
                };
                for n in named {
                    if !names.contains(n) {
                        return Err(invalid(
                            file,
                            &format!(
                                "line {line}: '{n}' is not a terminal; the terminals are: {}",
                                names.join(", ")
                            ),
                        ));
                    }
                }
            }
            let mut et = ElectroThermalProblem::new(
                thermal,
                &conductors,
                &terminals,
                terminal_terms.into_iter().map(|(_, t)| t).collect(),
                coupling,
            )
            .map_err(run_err)?;
            for c in &el.conductors {
                let Some(sigma) = &c.sigma else { continue };
                let model = &et.electrical;
                let k = model.conductors.iter().position(|x| x.name == *c.group.get_ref());
                let elements = model.conductors[k.expect("a conductor per spec")].elements.clone();
                let tags: Vec<u64> = elements.iter().map(|&e| model.element_cell_tag(e)).collect();
                let at =
                    ConstantAt { group: &c.group, table: "[[electrical.conductor]]", key: "sigma" };
                if let Some(values) =
                    element_constant(file, &et.thermal.mesh, sigma, &at, &tags, |v| {
                        (v <= 0.0).then_some("the conductivity must be positive")
                    })?
                {
                    for (&e, v) in elements.iter().zip(values) {
                        et.electrical.sigma_elem[e] = v;
                    }
                }
            }
            et.set_linear(
                LinearChoice::parse(&spec.solver.linear).map_err(run_err)?,
                spec.solver.cg_rel_tol,
            );
            Problem::from(Box::new(et))
        }
    };
    problem.mechanical = mechanical;
    if let Some(hs) = &spec.hyperelastic {
        let mut run = HyperelasticRun::new(file, &problem.thermal().mesh, hs)?;
        if let Some(init) = &spec.initial_state {
            let path = file.resolve_path(&init.ansys);
            let (u, info) =
                crate::ansys_import::initial_displacement(&path, init.set, &problem.thermal().mesh)
                    .map_err(|source| AppError::InitialState { file: file.path.clone(), source })?;
            run.set_initial_displacement(u);
            problem.thermal_mut().initial_state = Some(format!(
                "{} set {} ({}, {})",
                info.file,
                info.set,
                info.dof,
                match info.mapping {
                    crate::ansys_import::MappingKind::ByNodeNumber => "by node number",
                    crate::ansys_import::MappingKind::Interpolated => "interpolated",
                }
            ));
        }
        problem.hyperelastic = Some(Box::new(run));
    }
    if let Some(ts) = &spec.transient {
        if problem.hyperelastic.is_some() {
            return Err(invalid(
                file,
                "[transient] steps the thermal field with the electrical and linear mechanical fields quasi-static; finite strain ([hyperelastic]) is not stepped in time yet",
            ));
        }
        let th = problem.thermal();
        let initial =
            spec.initial_state.as_ref().map(|_| th.model.nodal_temperature(th.unknowns()));
        let measured = match &ts.measured {
            Some(path) => Some(
                crate::transient_file::read_time_series(&file.resolve_path(path))
                    .map_err(run_err)?,
            ),
            None => None,
        };
        let run = TransientRun::new(ts, th, initial, measured).map_err(run_err)?;
        problem.transient = Some(Box::new(run));
    }
    if problem.electro_thermal().is_none()
        && let Some((line, _)) = terminal_terms_lines(file).first()
    {
        {
            return Err(invalid(
                file,
                &format!(
                    "line {line}: current, voltage and resistance objectives need an [electrical] table"
                ),
            ));
        }
    }
    for name in &spec.parameters.register {
        let bounds = spec.parameters.bounds.get(name.get_ref()).copied();
        problem.register(name.get_ref(), bounds).map_err(|e| {
            AppError::Problem(ProblemError::invalid(
                &file.path,
                format!("line {}: {e}", file.line_of(name)),
            ))
        })?;
    }
    for name in spec.parameters.bounds.keys() {
        if !spec.parameters.register.iter().any(|r| r.get_ref() == name) {
            return Err(invalid(
                file,
                &format!("bounds given for '{name}', which is not registered"),
            ));
        }
    }
    // After registration: a registered α_R makes the electro-thermal coupling two-way.
    problem.coupling = problem.physical_graph();
    problem.objective_unit = objective_unit(
        &spec.objectives,
        spec.hyperelastic.is_some(),
        spec.transient.as_ref().map(|t| t.objective.as_str()),
    );
    if let Some(declared) = spec.coupling.as_ref().and_then(|c| c.transfers.as_ref()) {
        check_declared_graph(file, &problem.coupling, declared)?;
    }
    Ok(problem)
}

/// A declared coupling graph must be the one the file's physics makes.
fn check_declared_graph(
    file: &ProblemFile,
    physical: &CouplingGraph,
    declared: &[toml::Spanned<String>],
) -> Result<(), AppError> {
    let why = |from: &str, to: &str| match (from, to) {
        ("electrical", "thermal") => "Joule heat",
        ("thermal", "electrical") => "a resistivity that depends on temperature (alpha_r or law)",
        ("thermal", "mechanical") => "thermal strain",
        ("thermal", "hyperelastic") => {
            "finite-strain thermal expansion (a [thermal] table or [hyperelastic] temperature)"
        }
        _ => "no transfer gradfem knows",
    };
    let mut seen = Vec::new();
    for d in declared {
        let line = file.line_of(d);
        let (from, to) = CouplingGraph::parse_transfer(d.get_ref())
            .map_err(|e| invalid(file, &format!("line {line}: {e}")))?;
        for f in [&from, &to] {
            if physical.field(f).is_none() {
                return Err(invalid(
                    file,
                    &format!(
                        "line {line}: [coupling] transfers names the field '{f}', which this problem does not have; its fields are: {}",
                        physical.fields().join(", ")
                    ),
                ));
            }
        }
        if !physical.has_transfer(&from, &to) {
            return Err(invalid(
                file,
                &format!(
                    "line {line}: [coupling] declares {from} -> {to} ({}), but the problem as described has no such transfer",
                    why(&from, &to)
                ),
            ));
        }
        seen.push((from, to));
    }
    for t in physical.transfers() {
        let (a, b) = (&physical.fields()[t.from], &physical.fields()[t.to]);
        if !seen.iter().any(|(x, y)| x == a && y == b) {
            return Err(invalid(
                file,
                &format!(
                    "[coupling] transfers does not list {a} -> {b} ({}), which the problem has; declare it",
                    why(a, b)
                ),
            ));
        }
    }
    Ok(())
}

/// The mechanical field of a problem file.
fn build_mechanical(
    file: &ProblemFile,
    mesh: &gradfem_mesh::Mesh,
    spec: &crate::problem::MechanicalSpec,
    objective: Vec<MechObjectiveTerm>,
) -> Result<MechanicalField, AppError> {
    let run_err = |source: RunError| AppError::Run { file: file.path.clone(), source };
    let mut regions = Vec::new();
    no_repeated_group(file, "[[mechanical.material]]", spec.materials.iter().map(|m| &m.group))?;
    for m in &spec.materials {
        file.check_group(mesh, &m.group, "[[mechanical.material]]")?;
        let line = file.line_of(&m.group);
        let bad = |key: &str, v: f64, why: &str| {
            Err(invalid(
                file,
                &format!("line {line}: `{key}` = {v}: {why} (material on '{}')", m.group.get_ref()),
            ))
        };
        let young = m.young.uniform().unwrap_or(1.0);
        let values = [("young", young), ("poisson", m.poisson), ("alpha", m.alpha)];
        if let Some((key, v)) = values
            .iter()
            .chain(&[("t_ref", m.t_ref.unwrap_or(293.15))])
            .find(|(_, v)| !v.is_finite())
        {
            return bad(key, *v, "must be a finite number");
        }
        if m.body_force.iter().any(|v| !v.is_finite()) {
            return Err(invalid(file, &format!("line {line}: `body_force` must be finite")));
        }
        if young <= 0.0 {
            return bad("young", young, "Young's modulus must be positive");
        }
        if !(m.poisson > -1.0 && m.poisson < 0.5) {
            return bad(
                "poisson",
                m.poisson,
                "Poisson's ratio must lie in (−1, 0.5); 0.5 is incompressible, which linear elements cannot represent",
            );
        }
        if m.t_ref.is_some_and(|t| t <= 0.0) {
            return bad(
                "t_ref",
                m.t_ref.unwrap_or_default(),
                "a temperature in kelvin must be above 0 K",
            );
        }
        regions.push(gradfem_mechanical::RegionSpec {
            group: m.group.get_ref().clone(),
            // Values from a file replace it once the model is built.
            young,
            poisson: m.poisson,
            alpha: m.alpha,
            t_ref: m.t_ref.unwrap_or(293.15),
            body_force: m.body_force,
        });
    }
    let mut bcs = Vec::new();
    for b in &spec.bcs {
        file.check_group(mesh, &b.group, "[[mechanical.bc]]")?;
        bcs.push(gradfem_mechanical::BcSpec {
            group: b.group.get_ref().clone(),
            kind: file.mechanical_bc_kind(b)?,
        });
    }
    let mut field = MechanicalField::new(mesh, &regions, &bcs, objective).map_err(run_err)?;
    for m in &spec.materials {
        let model = &field.model;
        let r = model.regions.iter().position(|x| x.name == *m.group.get_ref());
        let elements = model.regions[r.expect("a region per material")].elements.clone();
        let tags: Vec<u64> = elements.iter().map(|&e| model.element_cell_tag(e)).collect();
        let at = ConstantAt { group: &m.group, table: "[[mechanical.material]]", key: "young" };
        if let Some(values) = element_constant(file, mesh, &m.young, &at, &tags, |v| {
            (v <= 0.0).then_some("Young's modulus must be positive")
        })? {
            for (&e, v) in elements.iter().zip(values) {
                field.model.young_elem[e] = v;
            }
        }
    }
    let linear = LinearChoice::parse(&file.spec.solver.linear).map_err(run_err)?;
    field.set_linear(linear, file.spec.solver.cg_rel_tol);
    if let Some(tip) = &spec.tip {
        file.check_group(mesh, tip, "[mechanical] tip")?;
        field.tip_group = Some(tip.get_ref().clone());
    }
    if let Some(t) = &spec.temperature {
        match (&t.ansys, t.uniform) {
            (Some(path), None) => {
                let path = file.resolve_path(path);
                let unit =
                    file.temperature_unit(&t.temperature_unit, "[mechanical] temperature")?;
                let (values, info) = crate::ansys_import::initial_temperature(
                    &path,
                    t.set,
                    mesh,
                    unit,
                    "[mechanical] temperature",
                )
                .map_err(|source| AppError::InitialState { file: file.path.clone(), source })?;
                field.set_imported_temperature(crate::mechanical::ImportedTemperature::new(
                    values,
                    t.scale,
                    t.offset,
                    format!("{} set {}{}", info.file, info.set, unit_note(&info)),
                ));
            }
            (None, Some(_)) => {
                if t.scale != 1.0 || t.offset != 0.0 || t.temperature_unit.is_some() {
                    return Err(invalid(
                        file,
                        "[mechanical] temperature: `scale`, `offset` and `temperature_unit` go with `ansys` (`uniform` is in kelvin)",
                    ));
                }
            }
            _ => {
                return Err(invalid(
                    file,
                    "[mechanical] temperature needs exactly one of `uniform` and `ansys`",
                ));
            }
        }
    }
    Ok(field)
}

/// Lines of the terminal objectives of a file.
fn terminal_terms_lines(file: &ProblemFile) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for o in &file.spec.objectives {
        if matches!(o.kind.as_str(), "current" | "voltage" | "resistance") {
            let line = [&o.terminal, &o.drive, &o.reference]
                .iter()
                .find_map(|v| v.as_ref().map(|v| file.line_of(v)))
                .unwrap_or(0);
            out.push((line, o.kind.clone()));
        }
    }
    out
}

/// Objective terms of `[[objective]]`-shaped entries, per field; terminal functionals with the
/// line that named each.
#[derive(Clone, Debug, Default)]
pub struct ObjectiveParts {
    pub thermal: Vec<ObjectiveTerm>,
    pub terminal: Vec<(usize, TerminalTerm)>,
    pub mechanical: Vec<MechObjectiveTerm>,
}

impl ObjectiveParts {
    /// True when there is no term at all.
    pub fn is_empty(&self) -> bool {
        self.thermal.is_empty() && self.terminal.is_empty() && self.mechanical.is_empty()
    }

    /// The terms without their lines.
    pub fn into_set(self) -> ObjectiveSet {
        ObjectiveSet {
            thermal: self.thermal,
            electrical: self.terminal.into_iter().map(|(_, t)| t).collect(),
            mechanical: self.mechanical,
        }
    }
}

/// The unit of one `[[objective]]` term's value: `K` for temperatures, `A`, `V`, `Ω`, `m`,
/// `J` (compliance), `Pa`, `N` (reaction) and the squares of the least-squares kinds.
fn term_unit(o: &crate::problem::ObjectiveSpec, hyperelastic: bool) -> String {
    let base = match o.kind.as_str() {
        "point" | "average" | "max" | "peak" => "K",
        "integral_square" => "K²·m³",
        "nodal_sum_squares" | "misfit" => "K²",
        "current" => "A",
        "voltage" => "V",
        "resistance" => "Ω",
        "displacement" | "average_displacement" => "m",
        "compliance" => "J",
        "von_mises" => "Pa",
        "reaction" => "N",
        _ => "",
    };
    // A hyperelastic term with measurements is the misfit Σ w (q − m)².
    if hyperelastic && o.measured.is_some() && !base.is_empty() {
        format!("{base}²")
    } else {
        base.to_string()
    }
}

/// The unit of the objective J = Σ w_i q_i of a problem file's `[[objective]]` terms (the
/// weights are numbers): the terms' common unit, times `s` for a transient objective
/// integrated over time; `mixed (K, Pa)` and the like when the terms' units differ, and `1`
/// without terms.
pub fn objective_unit(
    specs: &[crate::problem::ObjectiveSpec],
    hyperelastic: bool,
    transient_weights: Option<&str>,
) -> String {
    let mut units: Vec<String> = Vec::new();
    for o in specs {
        let u = term_unit(o, hyperelastic);
        if !units.contains(&u) {
            units.push(u);
        }
    }
    let unit = match units.as_slice() {
        [] => return "1".into(),
        [one] if one.is_empty() => return "unknown".into(),
        [one] => one.clone(),
        many => return format!("mixed ({})", many.join(", ")),
    };
    match transient_weights {
        Some("integral") => format!("{unit}·s"),
        // ½ Σ (j(t) − d)²
        Some("misfit") if unit.chars().all(char::is_alphanumeric) => format!("{unit}²"),
        Some("misfit") => format!("({unit})²"),
        _ => unit,
    }
}

/// The objective terms of `[[objective]]`-shaped entries (also used by `[[optimize.constraint]]`):
/// thermal terms, and terminal functionals with the line that named them.
pub fn objective_terms(
    file: &ProblemFile,
    mesh: &gradfem_mesh::Mesh,
    specs: &[crate::problem::ObjectiveSpec],
    context: &str,
) -> Result<ObjectiveParts, AppError> {
    let mut terms = Vec::new();
    let mut terminal_terms = Vec::new();
    let mut mechanical = Vec::new();
    for (index, o) in specs.iter().enumerate() {
        // Where the entry is: its group's line, else its position among the entries.
        let at = || match &o.group {
            Some(g) => format!("line {}: {context} '{}'", file.line_of(g), o.kind),
            None => format!("{context} entry {} ('{}')", index + 1, o.kind),
        };
        let exponent = |default: f64| -> Result<f64, AppError> {
            let p = o.p.unwrap_or(default);
            if p.is_finite() && p >= 1.0 {
                Ok(p)
            } else {
                Err(invalid(
                    file,
                    &format!(
                        "{}: p = {p}: the p-norm's exponent must be a finite number ≥ 1 (p < 1 \
                         is no maximum: p = 1 is the mean; larger p is sharper)",
                        at()
                    ),
                ))
            }
        };
        if !o.weight.is_finite() {
            return Err(invalid(file, &format!("{}: weight = {} must be finite", at(), o.weight)));
        }
        let group = |ctx: &str| -> Result<String, AppError> {
            match &o.group {
                Some(g) => {
                    file.check_group(mesh, g, ctx)?;
                    Ok(g.get_ref().clone())
                }
                None => Ok("*".into()),
            }
        };
        let kind = match o.kind.as_str() {
            "point" => ObjectiveKind::Point {
                point: o.point.ok_or_else(|| {
                    invalid(file, "a 'point' objective needs `point = [x, y, z]`")
                })?,
            },
            "average" => ObjectiveKind::Average { group: group(context)? },
            "max" => ObjectiveKind::Max { group: group(context)?, p: exponent(8.0)? },
            "peak" => {
                let rho = o.rho.unwrap_or(gradfem_thermal::objective::DEFAULT_PEAK_RHO);
                if !(rho.is_finite() && rho > 0.0) {
                    return Err(invalid(
                        file,
                        &format!(
                            "{}: rho = {rho}: the sharpness of the peak aggregate must be a \
                             positive number (1/K)",
                            at()
                        ),
                    ));
                }
                ObjectiveKind::Peak { group: group(context)?, rho }
            }
            "integral_square" => ObjectiveKind::IntegralSquare { group: group(context)? },
            "nodal_sum_squares" => ObjectiveKind::NodalSumSquares,
            "displacement" | "average_displacement" | "compliance" | "von_mises" => {
                let direction = || {
                    o.direction.ok_or_else(|| {
                        invalid(
                            file,
                            &format!("a '{}' objective needs `direction = [dx, dy, dz]`", o.kind),
                        )
                    })
                };
                let kind = match o.kind.as_str() {
                    "displacement" => MechObjectiveKind::PointDisplacement {
                        point: o.point.ok_or_else(|| {
                            invalid(file, "a 'displacement' objective needs `point = [x, y, z]`")
                        })?,
                        direction: direction()?,
                    },
                    "average_displacement" => MechObjectiveKind::AverageDisplacement {
                        group: group(context)?,
                        direction: direction()?,
                    },
                    "compliance" => MechObjectiveKind::Compliance,
                    _ => MechObjectiveKind::VonMisesPNorm {
                        group: group(context)?,
                        p: exponent(8.0)?,
                    },
                };
                mechanical.push(MechObjectiveTerm { weight: o.weight, kind });
                continue;
            }
            "misfit" => {
                let path = o.sensors.as_ref().ok_or_else(|| {
                    invalid(file, "a 'misfit' objective needs `sensors = \"file.csv\"`")
                })?;
                ObjectiveKind::Misfit { sensors: read_sensors(&file.resolve_path(path))? }
            }
            "current" | "voltage" | "resistance" => {
                let key = |v: &Option<toml::Spanned<String>>, k: &str| {
                    v.as_ref().map(|s| (file.line_of(s), s.get_ref().clone())).ok_or_else(|| {
                        invalid(
                            file,
                            &format!("a '{}' objective needs `{k} = \"<terminal group>\"`", o.kind),
                        )
                    })
                };
                let (line, functional) = match o.kind.as_str() {
                    "current" => {
                        let (l, t) = key(&o.terminal, "terminal")?;
                        (l, TerminalFunctional::Current { terminal: t })
                    }
                    "voltage" => {
                        let (l, t) = key(&o.terminal, "terminal")?;
                        (l, TerminalFunctional::Voltage { terminal: t })
                    }
                    _ => {
                        let (l, d) = key(&o.drive, "drive")?;
                        let (_, r) = key(&o.reference, "reference")?;
                        (l, TerminalFunctional::Resistance { drive: d, reference: r })
                    }
                };
                terminal_terms.push((line, TerminalTerm { weight: o.weight, functional }));
                continue;
            }
            other => {
                return Err(invalid(
                    file,
                    &format!(
                        "unknown objective kind '{other}'; expected point, average, max, peak, integral_square, nodal_sum_squares, misfit, current, voltage, resistance, displacement, average_displacement, compliance or von_mises"
                    ),
                ));
            }
        };
        terms.push(ObjectiveTerm { weight: o.weight, kind });
    }
    Ok(ObjectiveParts { thermal: terms, terminal: terminal_terms, mechanical })
}

/// The thermal problem of a problem file (without registered parameters), the terminal
/// objective terms with their lines, and the mechanical objective terms.
#[allow(clippy::type_complexity)]
fn build_thermal(
    file: &ProblemFile,
) -> Result<(ThermalProblem, Vec<(usize, TerminalTerm)>, Vec<MechObjectiveTerm>), AppError> {
    let run_err = |source: RunError| AppError::Run { file: file.path.clone(), source };
    let mesh = file.build_mesh()?;
    let spec = &file.spec;
    let mut regions = Vec::new();
    let mut bcs = Vec::new();
    match (&spec.thermal, &spec.mechanical) {
        (Some(thermal), _) => {
            if spec.mechanical.as_ref().is_some_and(|m| m.temperature.is_some()) {
                return Err(invalid(
                    file,
                    "[mechanical] temperature prescribes the temperature, and [thermal] solves for it: give one of them",
                ));
            }
            no_repeated_group(
                file,
                "[[thermal.material]]",
                thermal.materials.iter().map(|m| &m.group),
            )?;
            for m in &thermal.materials {
                file.check_group(&mesh, &m.group, "[[thermal.material]]")?;
                let line = file.line_of(&m.group);
                if let Some(k) = m.k.uniform()
                    && !(k.is_finite() && k > 0.0)
                {
                    return Err(invalid(
                        file,
                        &format!(
                            "line {line}: `k` = {k}: the conductivity must be a positive number (material on '{}')",
                            m.group.get_ref()
                        ),
                    ));
                }
                if !m.source.is_finite() {
                    return Err(invalid(
                        file,
                        &format!("line {line}: `source` = {} must be a finite number", m.source),
                    ));
                }
                regions.push(RegionSpec {
                    group: m.group.get_ref().clone(),
                    // Values from a file replace it once the model is built.
                    k0: m.k.uniform().unwrap_or(1.0),
                    law: m.law.clone(),
                    source: m.source,
                });
            }
            for b in &thermal.bcs {
                file.check_group(&mesh, &b.group, "[[thermal.bc]]")?;
                bcs.push(BcSpec { group: b.group.get_ref().clone(), kind: file.bc_kind(b)? });
            }
        }
        (None, Some(mech)) => {
            // A prescribed temperature: every node of the mechanical regions is held, so the
            // thermal field has no unknowns; its fixed values are parameters
            // (`bc.<group>.temperature`).
            let uniform = mech.temperature.as_ref().and_then(|t| t.uniform);
            for m in &mech.materials {
                file.check_group(&mesh, &m.group, "[[mechanical.material]]")?;
                regions.push(RegionSpec {
                    group: m.group.get_ref().clone(),
                    k0: 1.0,
                    law: gradfem_thermal::ConductivityLaw::Constant,
                    source: 0.0,
                });
                bcs.push(BcSpec {
                    group: m.group.get_ref().clone(),
                    kind: gradfem_thermal::BcKind::Temperature {
                        value: uniform.unwrap_or(m.t_ref.unwrap_or(293.15)),
                    },
                });
            }
        }
        (None, None) => {
            let Some(hyper) = &spec.hyperelastic else {
                return Err(invalid(
                    file,
                    "a problem needs a [thermal], [mechanical] or [hyperelastic] table",
                ));
            };
            // A hyperelastic problem without [thermal]: a thermal field held at fixed values
            // everywhere carries the mesh, the registry and the shape parameters; with
            // `[hyperelastic] temperature = { uniform }` it is the field's temperature (each
            // material's group's value registrable as `bc.<group>.temperature`).
            let uniform = hyper.temperature.as_ref().map(|t| t.uniform);
            no_repeated_group(
                file,
                "[[hyperelastic.material]]",
                hyper.materials.iter().map(|m| &m.group),
            )?;
            for m in &hyper.materials {
                file.check_group(&mesh, &m.group, "[[hyperelastic.material]]")?;
                regions.push(RegionSpec {
                    group: m.group.get_ref().clone(),
                    k0: 1.0,
                    law: gradfem_thermal::ConductivityLaw::Constant,
                    source: 0.0,
                });
                bcs.push(BcSpec {
                    group: m.group.get_ref().clone(),
                    kind: gradfem_thermal::BcKind::Temperature {
                        value: uniform.unwrap_or(m.t_ref.unwrap_or(293.15)),
                    },
                });
            }
        }
    }
    if let Some(hyper) = &spec.hyperelastic {
        if spec.mechanical.is_some() {
            return Err(invalid(
                file,
                "[hyperelastic] and [mechanical] are two models of the same solid: give one of them",
            ));
        }
        if spec.thermal.is_some() && hyper.temperature.is_some() {
            return Err(invalid(
                file,
                "[hyperelastic] temperature prescribes the temperature, and [thermal] solves for it: give one of them",
            ));
        }
    }
    // A hyperelastic problem reads its objectives over the load path itself.
    let parts = if spec.hyperelastic.is_some() {
        ObjectiveParts::default()
    } else {
        objective_terms(file, &mesh, &spec.objectives, "[[objective]]")?
    };
    let no_terms = parts.is_empty();
    let ObjectiveParts { thermal: mut terms, terminal: terminal_terms, mut mechanical } = parts;
    if spec.hyperelastic.is_some() {
        // No thermal terms.
    } else if no_terms && spec.thermal.is_none() {
        mechanical.push(MechObjectiveTerm { weight: 1.0, kind: MechObjectiveKind::Compliance });
    } else if no_terms {
        terms.push(ObjectiveTerm {
            weight: 1.0,
            kind: ObjectiveKind::Average { group: "*".into() },
        });
    }
    let linear = LinearChoice::parse(&spec.solver.linear).map_err(run_err)?;
    let mut problem = ThermalProblem::new(mesh, &regions, &bcs, terms, linear).map_err(run_err)?;
    for m in spec.thermal.iter().flat_map(|t| &t.materials) {
        let model = &problem.model;
        let r = model.regions.iter().position(|x| x.name == *m.group.get_ref());
        let elements = model.regions[r.expect("a region per material")].elements.clone();
        let tags: Vec<u64> = elements.iter().map(|&e| model.element_cell_tag(e)).collect();
        let at = ConstantAt { group: &m.group, table: "[[thermal.material]]", key: "k" };
        if let Some(values) = element_constant(file, &problem.mesh, &m.k, &at, &tags, |v| {
            (v <= 0.0).then_some("the conductivity must be positive")
        })? {
            for (&e, v) in elements.iter().zip(values) {
                problem.model.k_elem[e] = v;
            }
        }
    }
    problem.newton.rel_tol = spec.solver.rel_tol;
    problem.newton.abs_tol = spec.solver.abs_tol;
    problem.newton.max_iterations = spec.solver.max_iterations;
    problem.set_cg_tolerance(spec.solver.cg_rel_tol);
    if let Some(init) = spec.initial_state.as_ref().filter(|_| spec.hyperelastic.is_none()) {
        let path = file.resolve_path(&init.ansys);
        let unit = file.temperature_unit(&init.temperature_unit, "[initial_state]")?;
        let (t, info) = crate::ansys_import::initial_temperature(
            &path,
            init.set,
            &problem.mesh,
            unit,
            "[initial_state]",
        )
        .map_err(|source| AppError::InitialState { file: file.path.clone(), source })?;
        problem.set_initial_temperature(&t);
        problem.initial_state = Some(format!(
            "{} set {} ({}, {}{})",
            info.file,
            info.set,
            info.dof,
            match info.mapping {
                crate::ansys_import::MappingKind::ByNodeNumber => "by node number",
                crate::ansys_import::MappingKind::Interpolated => "interpolated",
            },
            unit_note(&info)
        ));
    }
    Ok((problem, terminal_terms, mechanical))
}

/// Two entries of `table` on one group are an error at the second, naming the first's line (a
/// cell has one material).
fn no_repeated_group<'a>(
    file: &ProblemFile,
    table: &str,
    groups: impl Iterator<Item = &'a toml::Spanned<String>>,
) -> Result<(), AppError> {
    let mut seen: Vec<&toml::Spanned<String>> = Vec::new();
    for g in groups {
        if let Some(first) = seen.iter().find(|s| s.get_ref() == g.get_ref()) {
            return Err(invalid(
                file,
                &format!(
                    "line {}: a second {table} on group '{}' (the first is at line {}); a cell \
                     has one material: merge the two entries",
                    file.line_of(g),
                    g.get_ref(),
                    file.line_of(first)
                ),
            ));
        }
        seen.push(g);
    }
    Ok(())
}

/// Where a material constant is given, for its errors.
struct ConstantAt<'a> {
    group: &'a toml::Spanned<String>,
    table: &'a str,
    key: &'a str,
}

/// A material constant given as values per element: the value of each element (by its tag),
/// read and checked by `check` (which says why a value is refused); `None` for one number,
/// which the caller checks.
fn element_constant(
    file: &ProblemFile,
    mesh: &gradfem_mesh::Mesh,
    values: &crate::element_values::ElementValues,
    at: &ConstantAt,
    tags: &[u64],
    check: impl Fn(f64) -> Option<&'static str>,
) -> Result<Option<Vec<f64>>, AppError> {
    let crate::element_values::ElementValues::File(source) = values else { return Ok(None) };
    let base = file.path.parent().unwrap_or(Path::new(""));
    let where_ = || {
        format!(
            "line {}: `{}` of {} on '{}'",
            file.line_of(at.group),
            at.key,
            at.table,
            at.group.get_ref()
        )
    };
    let by_tag = crate::element_values::read_element_values(source, base, mesh, tags)
        .map_err(|e| invalid(file, &format!("{}: {e}", where_())))?;
    crate::element_values::per_element(&by_tag, tags, check)
        .map(Some)
        .map_err(|e| invalid(file, &format!("{}: {}: {e}", where_(), source.file)))
}

fn invalid(file: &ProblemFile, message: &str) -> AppError {
    AppError::Problem(ProblemError::invalid(&file.path, message))
}

/// The summary of a run, as printed by `gradfem run --json`.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub title: String,
    pub nodes: usize,
    pub elements: usize,
    pub unknowns: usize,
    #[serde(rename = "max_temperature_K")]
    pub max_temperature_k: f64,
    #[serde(rename = "min_temperature_K")]
    pub min_temperature_k: f64,
    #[serde(rename = "mean_temperature_K")]
    pub mean_temperature_k: f64,
    pub objective: f64,
    pub objective_terms: Vec<f64>,
    pub timings: SolveTimings,
    /// Where the heat goes: sources, fluxes, convection and reactions at fixed temperatures [W].
    pub heat_balance: gradfem_thermal::HeatBalance,
    /// The starting guess, when `[initial_state]` gave one (file, set, field, mapping).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_state: Option<String>,
    /// Electro-thermal problems: the drive terminal's current [A] (see
    /// [`ElectroThermalProblem::default_terminals`]).
    #[serde(rename = "current_A", skip_serializing_if = "Option::is_none")]
    pub current_a: Option<f64>,
    /// Voltage between the drive and the reference terminal [V].
    #[serde(rename = "voltage_V", skip_serializing_if = "Option::is_none")]
    pub voltage_v: Option<f64>,
    /// Resistance between the drive and the reference terminal [Ω].
    #[serde(rename = "resistance_ohm", skip_serializing_if = "Option::is_none")]
    pub resistance_ohm: Option<f64>,
    /// Total Joule power ∫ σ|∇φ|² dΩ [W].
    #[serde(rename = "joule_power_W", skip_serializing_if = "Option::is_none")]
    pub joule_power_w: Option<f64>,
    /// Every terminal's current and voltage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminals: Option<Vec<TerminalReport>>,
    /// Timings of the coupled solve.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coupling: Option<CoupledSolveTimings>,
    /// The schedule of the coupling graph, e.g. `[electrical ⇄ thermal] → mechanical`.
    pub coupling_schedule: String,
    /// Mechanical problems: the mean displacement vector over the tip group (`[mechanical]
    /// tip`, default `free_end`) [m].
    #[serde(rename = "tip_displacement_m", skip_serializing_if = "Option::is_none")]
    pub tip_displacement_m: Option<[f64; 3]>,
    /// The largest von Mises stress at the quadrature points [Pa].
    #[serde(rename = "max_von_mises_Pa", skip_serializing_if = "Option::is_none")]
    pub max_von_mises_pa: Option<f64>,
    /// The largest nodal displacement magnitude [m].
    #[serde(rename = "max_displacement_m", skip_serializing_if = "Option::is_none")]
    pub max_displacement_m: Option<f64>,
    /// Reactions and external loads of the mechanical field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub force_balance: Option<ForceBalance>,
    /// Timings of the mechanical solve.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mechanical: Option<MechanicalSolveTimings>,
    /// Transient runs: steps, final time, the largest temperature over time (the temperature
    /// keys above are those of the last state).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transient: Option<TransientReport>,
    /// Hyperelastic runs: load factors, Newton iterations, cut-backs, reactions at the last step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hyperelastic: Option<HyperelasticReport>,
    /// Every `max` (p-norm) and `peak` (KS) objective term beside the true peak it stands for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub temperature_peaks: Vec<PeakReport>,
}

/// A smooth-maximum objective term of the temperature and the true nodal peak of its group.
#[derive(Clone, Debug, Serialize)]
pub struct PeakReport {
    /// Index of the term among the objective's terms.
    pub term: usize,
    /// `max` (p-norm mean) or `peak` (Kreisselmeier–Steinhauser aggregate).
    pub kind: &'static str,
    /// The volume group.
    pub group: String,
    /// The term's value (the aggregate) [K].
    #[serde(rename = "aggregate_K")]
    pub aggregate_k: f64,
    /// The largest nodal temperature of the group [K].
    #[serde(rename = "true_peak_K")]
    pub true_peak_k: f64,
}

/// The `max` and `peak` terms of the thermal objective with the true peaks of their groups.
fn temperature_peaks(problem: &ThermalProblem, terms: &[f64]) -> Result<Vec<PeakReport>, RunError> {
    let Some(t) = problem.temperature() else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for (i, term) in problem.objective.iter().enumerate() {
        let (kind, group) = match &term.kind {
            ObjectiveKind::Max { group, .. } => ("max", group),
            ObjectiveKind::Peak { group, .. } => ("peak", group),
            _ => continue,
        };
        let (peak, _) = gradfem_thermal::objective::group_peak(&problem.model, group, t)?;
        out.push(PeakReport {
            term: i,
            kind,
            group: group.clone(),
            aggregate_k: terms.get(i).copied().unwrap_or(f64::NAN),
            true_peak_k: peak,
        });
    }
    Ok(out)
}

/// Summarize the solved problem.
pub fn summary(title: &str, problem: &Problem) -> Result<Summary, RunError> {
    let mut s = thermal_summary(title, problem.thermal())?;
    s.coupling_schedule = problem.coupling.to_string();
    if let Some(p) = problem.electro_thermal() {
        let (value, terms) = p.objective_terms()?;
        s.objective = value;
        s.objective_terms = terms;
        let report = p.terminal_report()?;
        if let Some((d, r)) = p.default_terminals() {
            let v = report[d].voltage_v - report[r].voltage_v;
            s.current_a = Some(report[d].current_a);
            s.voltage_v = Some(v);
            s.resistance_ohm = Some(v / report[d].current_a);
        }
        s.joule_power_w = Some(p.joule_power()?);
        s.terminals = Some(report);
        s.coupling = Some(p.last_solve.clone());
    }
    if let Some(tr) = &problem.transient {
        let j = problem.transient_objective()?;
        s.objective = j;
        s.objective_terms = vec![j];
        s.transient = Some(tr.report.clone());
        if let Some(balance) = tr.heat_balance() {
            s.heat_balance = balance;
        }
    }
    if let Some(h) = &problem.hyperelastic {
        let (j, terms) = h.objective_terms()?;
        s.objective = j;
        s.objective_terms = terms;
        s.hyperelastic = Some(h.report.clone());
        if let Some(tip) = &h.tip {
            s.tip_displacement_m = h.mean_displacement(tip);
        }
        if let Some((_, u)) = h.states().last() {
            s.max_displacement_m = Some(
                u.chunks_exact(3)
                    .map(|c| (c[0] * c[0] + c[1] * c[1] + c[2] * c[2]).sqrt())
                    .fold(0.0, f64::max),
            );
        }
    }
    if let Some(m) = &problem.mechanical {
        if problem.transient.is_none() {
            let (value, terms) = m.objective_terms()?;
            s.objective += value;
            s.objective_terms.extend(terms);
        }
        if let Some(tip) = &m.tip_group {
            s.tip_displacement_m = Some(m.mean_displacement(tip)?);
        }
        s.max_von_mises_pa = Some(m.max_von_mises()?);
        let u = m.displacement().ok_or_else(|| RunError::Setup("solve first".into()))?;
        s.max_displacement_m = Some(
            u.chunks_exact(3)
                .map(|c| (c[0] * c[0] + c[1] * c[1] + c[2] * c[2]).sqrt())
                .fold(0.0, f64::max),
        );
        s.force_balance = Some(m.force_balance()?);
        s.mechanical = Some(m.last_solve.clone());
    }
    Ok(s)
}

fn thermal_summary(title: &str, problem: &ThermalProblem) -> Result<Summary, RunError> {
    let t = problem.temperature().ok_or_else(|| RunError::Setup("solve first".into()))?;
    let active: Vec<f64> = t.iter().copied().filter(|v| v.is_finite()).collect();
    let eval = problem.evaluate_objective(false)?;
    let mean = gradfem_thermal::objective::evaluate(
        &problem.model,
        &[ObjectiveTerm { weight: 1.0, kind: ObjectiveKind::Average { group: "*".into() } }],
        t,
        false,
    )?
    .value;
    let temperature_peaks = temperature_peaks(problem, &eval.terms)?;
    Ok(Summary {
        title: title.to_string(),
        nodes: problem.model.n_nodes(),
        elements: problem.model.n_volume_elements(),
        unknowns: problem.model.n_unknowns(),
        max_temperature_k: active.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        min_temperature_k: active.iter().copied().fold(f64::INFINITY, f64::min),
        mean_temperature_k: mean,
        objective: eval.value,
        objective_terms: eval.terms,
        timings: problem.last_solve.clone(),
        heat_balance: problem.model.heat_balance(t),
        initial_state: problem.initial_state.clone(),
        current_a: None,
        voltage_v: None,
        resistance_ohm: None,
        joule_power_w: None,
        terminals: None,
        coupling: None,
        coupling_schedule: String::new(),
        tip_displacement_m: None,
        max_von_mises_pa: None,
        max_displacement_m: None,
        force_balance: None,
        mechanical: None,
        transient: None,
        hyperelastic: None,
        temperature_peaks,
    })
}

/// Write `results.h5` + `results.xdmf` into `dir`: temperature, heat flux, the electrical and
/// mechanical fields present, any per-element gradients as cell fields and a shape gradient as
/// a node field, every field with its unit. Returns the path of the `.xdmf`.
pub fn write_results(
    dir: &Path,
    whole: &Problem,
    gradient: Option<&Gradient>,
) -> Result<PathBuf, AppError> {
    let problem = whole.thermal();
    let werr = |path: &Path, e: &dyn std::fmt::Display| AppError::Write {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| werr(dir, &e))?;
    let t = problem.temperature().expect("solved before writing");
    let n_cells = problem.n_output_cells();
    let index = problem.element_output_index();
    let flux = problem.model.cell_heat_flux(t);
    let mut flux_cells = vec![[f64::NAN; 3]; n_cells];
    let mut k_cells = vec![f64::NAN; n_cells];
    for (e, &c) in index.iter().enumerate() {
        flux_cells[c] = flux[e];
        k_cells[c] = problem.model.k_elem[e];
    }
    // The unit of dJ/dp for the registered parameter `name`.
    let gradient_unit = |name: &str| {
        let by = problem.registry.id(name).map_or("", |id| problem.registry.get(id).units.as_str());
        gradfem_io::h5::derivative_unit(&whole.objective_unit, by)
    };
    let gradient_field = |name: String, values: Vec<f64>| {
        let unit = gradient_unit(name.strip_prefix("dJ/d").unwrap_or(&name));
        Field::cell(name, unit, FieldValues::Scalar(values))
    };
    let mut results = Results::new(&problem.mesh, CellSelection::TopDimension);
    let mut fields = vec![
        Field::node("temperature", "K", FieldValues::Scalar(t.to_vec())),
        Field::cell("heat_flux", "W/m²", FieldValues::Vector(flux_cells)),
        Field::cell("conductivity", "W/(m·K)", FieldValues::Scalar(k_cells)),
    ];
    if let Some(p) = whole.electro_thermal()
        && let Some(phi) = p.potential()
    {
        fields.push(Field::node("potential", "V", FieldValues::Scalar(phi.to_vec())));
        let t = if p.is_two_way() { p.temperature() } else { None };
        let j = p.electrical.cell_current_density(phi, t);
        let power = p.electrical.joule_power_elements(phi, t);
        let mut j_cells = vec![[f64::NAN; 3]; n_cells];
        let mut q_cells = vec![f64::NAN; n_cells];
        let th_of_cell: std::collections::HashMap<_, _> = (0..problem.model.n_volume_elements())
            .map(|e| (problem.model.element_cell(e), e))
            .collect();
        for e in 0..p.electrical.n_volume_elements() {
            if let Some(&te) = th_of_cell.get(&p.electrical.element_cell(e)) {
                j_cells[index[te]] = j[e];
                q_cells[index[te]] = power[e];
            }
        }
        fields.push(Field::cell("current_density", "A/m²", FieldValues::Vector(j_cells)));
        // The Joule power of each cell (its integral over the cell).
        fields.push(Field::cell("joule_power", "W", FieldValues::Scalar(q_cells)));
    }
    if let Some(m) = &whole.mechanical
        && let Some(u) = m.displacement()
    {
        let cell_of = m.cell_output_index(&problem.mesh);
        mechanical_fields(m, u, &cell_of, n_cells, &mut fields);
        if let Some(g) = gradient {
            for (id, values) in m.element_gradient_fields(g) {
                let mut cells = vec![f64::NAN; n_cells];
                for (e, c) in cell_of.iter().enumerate() {
                    if let Some(c) = c {
                        cells[*c] = values[e];
                    }
                }
                let name = format!("dJ/d{}", problem.registry.get(id).name);
                fields.push(gradient_field(name, cells));
            }
        }
    }
    if let (Some(g), Some(p)) = (gradient, whole.electro_thermal()) {
        for (name, values) in p.element_gradient_fields(g) {
            fields.push(gradient_field(name, values));
        }
    }
    if let Some(g) = gradient {
        for (name, values) in problem.element_gradient_fields(g) {
            fields.push(gradient_field(name, values));
        }
        if let Ok(id) = problem.registry.id("mesh.coordinates") {
            // The shape gradient: dJ/dx of every node, a vector per node.
            let dx = g.get(id);
            if dx.len() == 3 * problem.mesh.n_nodes() {
                fields.push(Field::node(
                    "dJ/dmesh.coordinates",
                    gradient_unit("mesh.coordinates"),
                    FieldValues::Vector(dx.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect()),
                ));
            }
        }
    }
    if let Some(h) = &whole.hyperelastic {
        // One output step per load step (time = load factor): displacement, reactions, Cauchy
        // stress, J and stretches; the last step also holds the upstream fields.
        let loads: Vec<f64> = h.states().iter().map(|s| s.0).collect();
        let cell_of = h.cell_output_index(&problem.mesh);
        let herr = |e: RunError| werr(dir, &format!("the finite-strain output: {e}"));
        for (i, &load) in loads.iter().enumerate() {
            let mut step_fields = h.step_fields(i, &cell_of, n_cells).map_err(herr)?;
            if i + 1 == loads.len() {
                fields.retain(|f| {
                    !matches!(f.name.as_str(), "temperature" | "heat_flux" | "conductivity")
                        && step_fields.iter().all(|g| g.name != f.name)
                });
                step_fields.append(&mut fields);
            }
            results.add_step(Step { time: load, fields: step_fields });
        }
        let path = dir.join("results.xdmf");
        results.write(&path).map_err(|e| werr(&path, &e))?;
        return Ok(path);
    }
    match &whole.transient {
        Some(tr) => {
            // Every output state holds the temperature and, with a mechanical field, its
            // quasi-static displacement; the last one every field.
            let states = tr.output_states();
            let indices = tr.output_indices();
            let last = states.len().saturating_sub(1);
            for (i, (time, t)) in states.iter().enumerate() {
                if i == last {
                    results.add_step(Step { time: *time, fields: std::mem::take(&mut fields) });
                } else {
                    let mut step =
                        vec![Field::node("temperature", "K", FieldValues::Scalar(t.to_vec()))];
                    if let Some(h) = &whole.mechanical_history {
                        let u = &h.displacement[indices[i]];
                        step.push(Field::node(
                            "displacement",
                            "m",
                            FieldValues::Vector(
                                u.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect(),
                            ),
                        ));
                    }
                    results.add_step(Step { time: *time, fields: step });
                }
            }
        }
        None => {
            results.add_step(Step { time: 0.0, fields });
        }
    }
    let path = dir.join("results.xdmf");
    results.write(&path).map_err(|e| werr(&path, &e))?;
    Ok(path)
}

/// One parameter's gradient in `gradients.json`: a number for scalars, an array otherwise.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum GradValue {
    Scalar(f64),
    Array(Vec<f64>),
}

/// The content of `gradients.json`.
#[derive(Clone, Debug, Serialize)]
pub struct GradientReport {
    /// J.
    pub objective: f64,
    /// The unit of J ([`objective_unit`]).
    pub objective_unit: String,
    /// dJ/dp of every registered parameter.
    pub gradients: std::collections::BTreeMap<String, GradValue>,
    /// The value of every registered parameter.
    pub values: std::collections::BTreeMap<String, GradValue>,
    /// The unit of every registered parameter's value (`1` for a number).
    pub units: std::collections::BTreeMap<String, String>,
    /// The unit of every gradient: J's unit over the parameter's.
    pub gradient_units: std::collections::BTreeMap<String, String>,
    /// For parameters with one entry per element or per node: the mesh's tags of those
    /// entities, in the order of the entries (a node's three coordinates share its tag).
    pub tags: std::collections::BTreeMap<String, EntityTags>,
    /// Wall times.
    pub timings: GradientReportTimings,
}

/// The mesh entities the entries of a parameter belong to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EntityTags {
    /// `element` (gmsh element tags / ANSYS element numbers) or `node` (node tags / numbers).
    pub entity: &'static str,
    /// Entries per entity: 1, or 3 for node coordinates (x, y, z).
    pub per_entity: usize,
    /// One tag per entity.
    pub tags: Vec<u64>,
}

/// Timings in `gradients.json`.
#[derive(Clone, Debug, Serialize)]
pub struct GradientReportTimings {
    pub forward: SolveTimings,
    pub gradient: GradientTimings,
    /// Electro-thermal: per-field forward timings and coupling iterations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coupled_forward: Option<CoupledSolveTimings>,
    /// Electro-thermal: adjoint timings per tape block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<CoupledGradientTimings>,
    /// The mechanical field's solve.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mechanical_forward: Option<MechanicalSolveTimings>,
    /// The mechanical field's share of the gradient (its adjoint solve and accumulation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mechanical_gradient: Option<crate::mechanical::MechanicalGradientTimings>,
    /// The finite-strain field's load stepping (s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hyperelastic_forward_s: Option<f64>,
    /// The whole forward solve, every field and transfer, wall clock (s); set by the caller
    /// that timed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forward_total_s: Option<f64>,
    /// The whole gradient, every adjoint and accumulation, wall clock (s); set by the caller
    /// that timed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gradient_total_s: Option<f64>,
}

/// ", in °C as the problem file says, converted to K" and the like, for provenance strings.
fn unit_note(info: &crate::ansys_import::InitialStateInfo) -> String {
    match (info.temperature_unit, info.temperature_unit_from) {
        (Some(u), Some(from)) => format!(", in {} as the {from} says, converted to K", u.symbol()),
        _ => String::new(),
    }
}

/// Collect the gradient of every registered parameter for `gradients.json`.
pub fn gradient_report(
    whole: &Problem,
    objective: f64,
    grad: &Gradient,
    timings: GradientTimings,
    blocks: Option<CoupledGradientTimings>,
) -> GradientReport {
    let problem = whole.thermal();
    let coupled_forward = whole.electro_thermal().map(|p| p.last_solve.clone());
    let mut gradients = std::collections::BTreeMap::new();
    let mut values = std::collections::BTreeMap::new();
    let mut units = std::collections::BTreeMap::new();
    let mut gradient_units = std::collections::BTreeMap::new();
    let mut element_tags: Vec<(ParamId, Vec<u64>)> = problem.element_parameter_tags();
    if let Some(p) = whole.electro_thermal() {
        element_tags.extend(p.element_parameter_tags());
    }
    if let Some(m) = &whole.mechanical {
        element_tags.extend(m.element_parameter_tags());
    }
    if let Some(h) = &whole.hyperelastic {
        element_tags.extend(h.problem.element_parameter_tags());
    }
    let mut tags = std::collections::BTreeMap::new();
    for (id, spec) in problem.registry.iter() {
        let as_value = |v: &[f64]| {
            if matches!(spec.kind, ParamKind::Scalar) {
                GradValue::Scalar(v[0])
            } else {
                GradValue::Array(v.to_vec())
            }
        };
        gradients.insert(spec.name.clone(), as_value(grad.get(id)));
        values.insert(spec.name.clone(), as_value(&spec.values));
        let unit = if spec.units.is_empty() { "1" } else { spec.units.as_str() };
        units.insert(spec.name.clone(), unit.to_string());
        gradient_units.insert(
            spec.name.clone(),
            gradfem_io::h5::derivative_unit(&whole.objective_unit, unit),
        );
        if let Some((_, t)) = element_tags.iter().find(|(i, _)| *i == id) {
            let entry = EntityTags { entity: "element", per_entity: 1, tags: t.clone() };
            tags.insert(spec.name.clone(), entry);
        } else if matches!(spec.kind, ParamKind::NodeCoordinates)
            && spec.values.len() == 3 * problem.mesh.n_nodes()
        {
            let entry =
                EntityTags { entity: "node", per_entity: 3, tags: problem.mesh.node_tags.clone() };
            tags.insert(spec.name.clone(), entry);
        }
    }
    GradientReport {
        objective,
        objective_unit: whole.objective_unit.clone(),
        gradients,
        values,
        units,
        gradient_units,
        tags,
        timings: GradientReportTimings {
            forward: problem.last_solve.clone(),
            gradient: timings,
            coupled_forward,
            blocks,
            mechanical_forward: whole.mechanical.as_ref().map(|m| m.last_solve.clone()),
            mechanical_gradient: whole.mechanical.as_ref().map(|m| m.last_gradient.clone()),
            hyperelastic_forward_s: whole.hyperelastic.as_ref().map(|h| h.report.solve_s),
            forward_total_s: None,
            gradient_total_s: None,
        },
    }
}

/// Write `gradients.json` atomically.
pub fn write_gradients(path: &Path, report: &GradientReport) -> Result<(), AppError> {
    let text = serde_json::to_string_pretty(report).expect("serializable");
    gradfem_io::atomic::write_bytes_atomic(path, text.as_bytes())
        .map_err(|e| AppError::Write { path: path.to_path_buf(), message: e.to_string() })
}

/// Displacement (nodes), the stress tensor and von Mises (cells: element means of the
/// quadrature values; nodes: recovered by volume-weighted averaging), for the XDMF output. The
/// stress is a symmetric tensor (XDMF `Tensor6`), which ParaView shows with its components
/// and invariants. `cell_of` is the field's [`MechanicalField::cell_output_index`] among the
/// `n_cells` output cells.
fn mechanical_fields(
    m: &MechanicalField,
    u: &[f64],
    cell_of: &[Option<usize>],
    n_cells: usize,
    fields: &mut Vec<Field>,
) {
    fields.push(Field::node(
        "displacement",
        "m",
        FieldValues::Vector(u.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect()),
    ));
    let stress = m.model.stress(u);
    fields.push(Field::node(
        "von_mises_nodal",
        "Pa",
        FieldValues::Scalar(stress.nodal_von_mises.clone()),
    ));
    fields.push(Field::node(
        "stress_nodal",
        "Pa",
        FieldValues::symmetric_from_voigt(&stress.nodal),
    ));
    let qo = m.model.qp_offsets();
    let mut vm = vec![f64::NAN; n_cells];
    let mut sigma = vec![[f64::NAN; 6]; n_cells];
    for (e, c) in cell_of.iter().enumerate() {
        let Some(c) = *c else { continue };
        let r = qo[e]..qo[e + 1];
        let n = r.len() as f64;
        vm[c] = stress.qp_von_mises[r.clone()].iter().sum::<f64>() / n;
        let mut mean = [0.0; 6];
        for q in r {
            for k in 0..6 {
                mean[k] += stress.qp[q][k] / n;
            }
        }
        sigma[c] = mean;
    }
    fields.push(Field::cell("von_mises", "Pa", FieldValues::Scalar(vm)));
    fields.push(Field::cell("stress", "Pa", FieldValues::symmetric_from_voigt(&sigma)));
}

#[cfg(test)]
mod taylor_direction_tests {
    use gradfem_solvers::params::{ParamKind, ParamRegistry, ParamSpec, ParamVector};

    /// The seed reported by `check-gradient` is the one the combined direction draws from.
    #[test]
    fn the_reported_seed_is_the_direction_s() {
        let mut reg = ParamRegistry::new();
        reg.register(ParamSpec::scalar("a", 2.0)).unwrap();
        reg.register(ParamSpec::vector("b", ParamKind::Field, vec![-0.5, 0.25])).unwrap();
        let pv = ParamVector::all(&reg);
        let m0 = pv.gather(&reg);
        let d = crate::thermal::direction(&m0, &pv, &reg, &crate::shape::Shape::new(Vec::new()));
        let u = gradfem_solvers::taylor::random_direction(3, super::TAYLOR_DIRECTION_SEED);
        for i in 0..3 {
            assert!((d[i] - u[i] * m0[i].abs()).abs() <= 1e-15 * m0[i].abs(), "{d:?} {u:?}");
        }
    }
}
