//! From a problem file to a solved, differentiable problem, and from results to files.
//!
//! [`build_problem`] reads the tables of a problem file into fields of the coupling engine
//! ([`gradfem_coupling`]) — thermal, electrical, linear mechanical, finite-strain mechanical —
//! and the transfers between them, registers the parameters and sets the time stepping; the
//! engine then solves and differentiates whatever combination the file describes. This module
//! also turns a solved problem into its summary, `results.h5` + `results.xdmf` and
//! `gradients.json`.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};

use gradfem_coupling::fields::electrical::{ElectricalField, TerminalReport, TerminalTerm};
use gradfem_coupling::fields::hyperelastic::{HyperelasticField, HyperelasticReport};
use gradfem_coupling::fields::mechanical::{ForceBalance, MechanicalField, MechanicalSolveTimings};
use gradfem_coupling::fields::thermal::ThermalField;
use gradfem_coupling::fields::thermal_transient::{ThermalTransient, TransientReport};
use gradfem_coupling::{CoupledProblem, CycleParams, CycleReport, CycleScheme};
use gradfem_io::h5::{CellSelection, Field, FieldValues, Results, Step};
use gradfem_solvers::graph::CouplingGraph;
use gradfem_solvers::params::{Gradient, ParamId, ParamKind};
use gradfem_thermal::{BcSpec, ObjectiveKind, ObjectiveTerm, RegionSpec};
use serde::Serialize;

use crate::problem::{ProblemError, ProblemFile, read_sensors};
use crate::run::{LinearChoice, RunError};
use crate::thermal::{SolveTimings, ThermalProblem};
use gradfem_electrical::TerminalFunctional;
use gradfem_mechanical::linear::objective::{
    ObjectiveKind as MechObjectiveKind, ObjectiveTerm as MechObjectiveTerm,
};

pub use gradfem_coupling::GradientTimings;
pub use gradfem_coupling::taylor::{ParameterTaylor, TAYLOR_DIRECTION_SEED, TaylorDirection};

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

/// A problem built from a problem file: the coupled problem of its fields, and the unit of its
/// objective. It dereferences to the [`CoupledProblem`] (solve, gradient, parameters, Taylor
/// tests); the accessors below find the fields a problem file can hold, for reports and
/// outputs.
pub struct Problem {
    /// The coupled problem.
    pub engine: CoupledProblem,
    /// The unit of the objective J ([`objective_unit`]); empty for a problem not built from a
    /// problem file.
    pub objective_unit: String,
}

impl Deref for Problem {
    type Target = CoupledProblem;
    fn deref(&self) -> &CoupledProblem {
        &self.engine
    }
}

impl DerefMut for Problem {
    fn deref_mut(&mut self) -> &mut CoupledProblem {
        &mut self.engine
    }
}

/// The mean displacement of the tip group of a nodal displacement (None without a tip).
type TipOf<'a> = dyn Fn(&[f64]) -> Option<[f64; 3]> + 'a;

/// The mechanical field of a transient problem at every state of the last run: quasi-static,
/// solved with that state's temperature.
#[derive(Clone, Debug, Default)]
pub struct MechanicalHistory {
    /// The mechanical objective terms (weighted sum) at each state.
    pub objective: Vec<f64>,
    /// The mean displacement of the tip group at each state \[m\] (empty without a tip group).
    pub tip: Vec<[f64; 3]>,
    /// The nodal displacement (`3·n_nodes`) at each state \[m\].
    pub displacement: Vec<Vec<f64>>,
}

/// The objective (or a constraint quantity) of a problem, per field.
#[derive(Clone, Debug, Default)]
pub struct ObjectiveSet {
    pub thermal: Vec<ObjectiveTerm>,
    pub electrical: Vec<TerminalTerm>,
    pub mechanical: Vec<MechObjectiveTerm>,
}

impl Problem {
    /// A problem of the coupled problem `engine`.
    pub fn new(engine: CoupledProblem) -> Self {
        Problem { engine, objective_unit: String::new() }
    }

    /// The coupling graph of the fields present.
    pub fn coupling(&self) -> CouplingGraph {
        self.engine.graph()
    }

    /// The thermal field (every problem file has one: solved for, or holding a prescribed
    /// temperature).
    pub fn thermal(&self) -> &ThermalField {
        self.engine.find::<ThermalField>().expect("a problem file's problem has a thermal field")
    }

    /// The thermal field, mutably.
    pub fn thermal_mut(&mut self) -> &mut ThermalField {
        self.engine
            .find_mut::<ThermalField>()
            .expect("a problem file's problem has a thermal field")
    }

    /// The electrical field, if any.
    pub fn electrical(&self) -> Option<&ElectricalField> {
        self.engine.find::<ElectricalField>()
    }

    /// The linear mechanical field, if any.
    pub fn mechanical(&self) -> Option<&MechanicalField> {
        self.engine.find::<MechanicalField>()
    }

    /// The linear mechanical field, mutably.
    pub fn mechanical_mut(&mut self) -> Option<&mut MechanicalField> {
        self.engine.find_mut::<MechanicalField>()
    }

    /// The finite-strain field, if any.
    pub fn hyperelastic(&self) -> Option<&HyperelasticField> {
        self.engine.find::<HyperelasticField>()
    }

    /// The mesh's element tags of the entries of every per-element parameter, in each
    /// parameter's order.
    pub fn element_parameter_tags(&self) -> Vec<(ParamId, Vec<u64>)> {
        let mut tags = self.thermal().element_parameter_tags();
        if let Some(p) = self.electrical() {
            tags.extend(p.element_parameter_tags());
        }
        if let Some(m) = self.mechanical() {
            tags.extend(m.element_parameter_tags());
        }
        if let Some(h) = self.hyperelastic() {
            tags.extend(h.problem.element_parameter_tags());
        }
        tags
    }

    /// The thermal field's time stepping, for a transient problem.
    pub fn transient(&self) -> Option<&ThermalTransient> {
        self.thermal().transient.as_ref()
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
        let ObjectiveSet { thermal, electrical, mechanical } = new;
        let mechanical = match self.engine.find_mut::<MechanicalField>() {
            Some(m) => std::mem::replace(&mut m.objective, mechanical),
            None => Vec::new(),
        };
        let electrical = match self.engine.find_mut::<ElectricalField>() {
            Some(e) => std::mem::replace(&mut e.objective, electrical),
            None => Vec::new(),
        };
        let thermal = std::mem::replace(&mut self.thermal_mut().objective, thermal);
        ObjectiveSet { thermal, electrical, mechanical }
    }

    /// The objective terms' values jₙ at every state of a solved transient problem, every
    /// field's terms together (unweighted in time).
    pub fn transient_state_values(&self) -> Result<Vec<f64>, RunError> {
        self.engine.state_values()
    }

    /// The mechanical field (linear or finite-strain) at every state of the last transient
    /// run.
    pub fn mechanical_history(&self) -> Option<MechanicalHistory> {
        let history = self.engine.time_history()?;
        let (name, tip): (&str, Box<TipOf>) = match (self.mechanical(), self.hyperelastic()) {
            (Some(m), _) => (
                "mechanical",
                Box::new(|u: &[f64]| {
                    let g = m.tip_group.as_ref()?;
                    m.mean_displacement_of(u, g).ok()
                }),
            ),
            (None, Some(h)) => {
                ("hyperelastic", Box::new(|u: &[f64]| h.mean_displacement_of(u, h.tip.as_ref()?)))
            }
            (None, None) => return None,
        };
        let f = self.engine.field_index(name)?;
        let k = history.fields.iter().position(|&i| i == f)?;
        // The downstream fields' terms at each state (the mechanical field's alone unless a
        // field downstream of it has terms too).
        let mut out =
            MechanicalHistory { objective: history.objective.clone(), ..Default::default() };
        for states in &history.states {
            let u = states[k].clone();
            if let Some(t) = tip(&u) {
                out.tip.push(t);
            }
            out.displacement.push(u);
        }
        Some(out)
    }

    /// The problem's temperature field as reported and written: the thermal field's, or a
    /// temperature imported from outside for the mechanical field (the thermal field then only
    /// holds the mesh's prescribed placeholder values).
    pub fn reported_temperature(&self) -> Option<Vec<f64>> {
        if let Some(imp) = self.mechanical().and_then(|m| m.imported_temperature()) {
            return Some(imp.field());
        }
        self.thermal().temperature().map(<[f64]>::to_vec)
    }

    /// What the last solve of each cycle did (iterations, residuals or changes, timings).
    pub fn cycles(&self) -> &[CycleReport] {
        &self.engine.cycle_reports
    }
}

/// Build the thermal problem described by a problem file; a file with more fields than the
/// thermal one is an error here (use [`build_problem`]).
pub fn build(file: &ProblemFile) -> Result<ThermalProblem, AppError> {
    let run_err = |source: RunError| AppError::Run { file: file.path.clone(), source };
    let spec = &file.spec;
    check_device(file)?;
    if spec.electrical.is_some()
        || spec.mechanical.is_some()
        || spec.hyperelastic.is_some()
        || spec.transient.is_some()
    {
        return Err(invalid(
            file,
            "this problem has more fields than the thermal one; build it with app::build_problem",
        ));
    }
    let mesh = file.build_mesh()?;
    let (thermal, _, _) = build_thermal(file, &mesh)?;
    let mut problem = ThermalProblem::from_field(mesh, thermal).map_err(run_err)?;
    place_on_device(file, problem.problem_mut())?;
    for m in &spec.morphs {
        let morph = m
            .build(&problem.model.coords, &problem.mesh().node_tags, &file.resolve_path("."))
            .map_err(|e| invalid(file, &e.to_string()))?;
        problem
            .problem_mut()
            .shape_mut()
            .define_morph(morph)
            .map_err(|e| invalid(file, &e.to_string()))?;
    }
    for name in &spec.parameters.register {
        let bounds = spec.parameters.bounds.get(name.get_ref()).copied();
        problem.register(name.get_ref(), bounds).map_err(|e| {
            AppError::Problem(ProblemError::invalid_in(
                &file.path,
                &file.source,
                format!("line {}: {e}", file.line_of(name)),
            ))
        })?;
    }
    Ok(problem)
}

/// The electrical field of a problem file's `[electrical]` table, with its terminal objective
/// terms.
fn build_electrical(
    file: &ProblemFile,
    thermal_mesh: &gradfem_mesh::Mesh,
    el: &crate::problem::ElectricalSpec,
    terminal_terms: Vec<(usize, TerminalTerm)>,
) -> Result<ElectricalField, AppError> {
    let run_err = |source: RunError| AppError::Run { file: file.path.clone(), source };
    let spec = &file.spec;
    let mut conductors = Vec::new();
    no_repeated_group(file, "[[electrical.conductor]]", el.conductors.iter().map(|c| &c.group))?;
    for c in &el.conductors {
        file.check_group(thermal_mesh, &c.group, "[[electrical.conductor]]")?;
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
        file.check_group(thermal_mesh, &t.group, "[[electrical.terminal]]")?;
        let line = file.line_of(&t.kind);
        let need = |v: Option<f64>, key: &str| {
            v.ok_or_else(|| {
                invalid(
                    file,
                    &format!("line {line}: a '{}' terminal needs `{key}`", t.kind.get_ref()),
                )
            })
        };
        let kind = match t.kind.get_ref().as_str() {
            "voltage" => {
                gradfem_electrical::TerminalKind::Voltage { value: need(t.value, "value")? }
            }
            "ground" => gradfem_electrical::TerminalKind::Ground,
            "current" => {
                gradfem_electrical::TerminalKind::Current { current: need(t.current, "current")? }
            }
            other => {
                return Err(invalid(
                    file,
                    &format!(
                        "line {line}: unknown terminal kind '{other}'; expected voltage, ground or current"
                    ),
                ));
            }
        };
        terminals.push(gradfem_electrical::TerminalSpec { group: t.group.get_ref().clone(), kind });
    }
    let names: Vec<String> = terminals.iter().map(|t| t.group.clone()).collect();
    for (line, term) in &terminal_terms {
        let named: Vec<&String> = match &term.functional {
            TerminalFunctional::Current { terminal } | TerminalFunctional::Voltage { terminal } => {
                vec![terminal]
            }
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
    let mut field = ElectricalField::new(
        thermal_mesh,
        &conductors,
        &terminals,
        terminal_terms.into_iter().map(|(_, t)| t).collect(),
    )
    .map_err(run_err)?;
    for c in &el.conductors {
        let Some(sigma) = &c.sigma else { continue };
        let model = &field.model;
        let k = model.conductors.iter().position(|x| x.name == *c.group.get_ref());
        let elements = model.conductors[k.expect("a conductor per spec")].elements.clone();
        let tags: Vec<u64> = elements.iter().map(|&e| model.element_cell_tag(e)).collect();
        let at = ConstantAt { group: &c.group, table: "[[electrical.conductor]]", key: "sigma" };
        if let Some(values) = element_constant(file, thermal_mesh, sigma, &at, &tags, |v| {
            (v <= 0.0).then_some("the conductivity must be positive")
        })? {
            for (&e, v) in elements.iter().zip(values) {
                field.model.sigma_elem[e] = v;
            }
        }
    }
    field.set_linear(
        LinearChoice::parse(&spec.solver.linear).map_err(run_err)?,
        spec.solver.cg_rel_tol,
    );
    Ok(field)
}

/// Build the problem a problem file describes: its fields, the transfers between them, the
/// time stepping and the registered parameters.
pub fn build_problem(file: &ProblemFile) -> Result<Problem, AppError> {
    let run_err = |source: RunError| AppError::Run { file: file.path.clone(), source };
    let spec = &file.spec;
    check_device(file)?;
    let mesh = file.build_mesh()?;
    let (mut thermal, terminal_terms, mechanical_terms) = build_thermal(file, &mesh)?;
    let mechanical = match &spec.mechanical {
        Some(ms) => Some(build_mechanical(file, &mesh, ms, mechanical_terms)?),
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
    if spec.electrical.is_none() {
        if spec.coupling.as_ref().is_some_and(|c| c.transfers.is_none()) {
            return Err(invalid(
                file,
                "[coupling] sets how the electro-thermal cycle is solved and needs an [electrical] table (or declares `transfers`)",
            ));
        }
        if let Some((line, _)) = terminal_terms_lines(file).first() {
            return Err(invalid(
                file,
                &format!(
                    "line {line}: current, voltage and resistance objectives need an [electrical] table"
                ),
            ));
        }
    }
    let electrical = match &spec.electrical {
        Some(el) => Some(build_electrical(file, &mesh, el, terminal_terms)?),
        None => None,
    };
    let hyperelastic = match &spec.hyperelastic {
        Some(hs) => {
            let mut field = crate::hyperelastic_file::build_field(file, &mesh, hs)?;
            if let Some(init) = &spec.initial_state {
                let path = file.resolve_path(&init.ansys);
                let (u, info) =
                    crate::ansys_import::initial_displacement(&path, init.set, &mesh, file.strict)
                        .map_err(|source| AppError::InitialState {
                            file: file.path.clone(),
                            source,
                        })?;
                field.set_initial_displacement(u);
                thermal.initial_state = Some(format!(
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
            Some(field)
        }
        None => None,
    };
    if let Some(ts) = &spec.transient {
        let initial = spec
            .initial_state
            .as_ref()
            .map(|_| thermal.model.nodal_temperature(thermal.unknowns()));
        let stepping = crate::transient_file::build_time_stepping(ts, &thermal.model, initial)
            .map_err(|e| in_table(file, "[transient]", e))?;
        thermal.transient = Some(stepping);
    }
    let takes_temperature = hyperelastic.as_ref().is_some_and(HyperelasticField::takes_temperature);
    let mut engine = CoupledProblem::new(mesh);
    for m in &spec.morphs {
        let morph = m
            .build(&engine.mesh().coords, &engine.mesh().node_tags, &file.resolve_path("."))
            .map_err(|e| invalid(file, &e.to_string()))?;
        engine.shape_mut().define_morph(morph).map_err(|e| invalid(file, &e.to_string()))?;
    }
    let cs = spec.coupling.clone().unwrap_or_default();
    engine.cycle = CycleParams {
        scheme: CycleScheme::parse(&cs.scheme).map_err(run_err)?,
        tol: cs.tol,
        max_iterations: cs.max_iterations,
        newton: thermal.newton.clone(),
        lu: spec.solver.linear == "lu",
    };
    let (has_electrical, has_mechanical) = (electrical.is_some(), mechanical.is_some());
    let has_hyperelastic = hyperelastic.is_some();
    // Fields in the order a cycle between them is swept (the electrical field first) and their
    // objective terms listed thermal, electrical, mechanical, finite-strain.
    if let Some(e) = electrical {
        engine.add_field(Box::new(e)).map_err(run_err)?;
    }
    engine.add_field(Box::new(thermal)).map_err(run_err)?;
    if let Some(m) = mechanical {
        engine.add_field(Box::new(m)).map_err(run_err)?;
    }
    if let Some(h) = hyperelastic {
        engine.add_field(Box::new(h)).map_err(run_err)?;
    }
    engine.set_term_order(&["thermal", "electrical", "mechanical", "hyperelastic"]);
    let transfer = |engine: &mut CoupledProblem, name: &str, a: [&str; 2], b: [&str; 2]| {
        engine.add_transfer(name, a[0], a[1], b[0], b[1]).map_err(run_err)
    };
    if has_electrical {
        transfer(
            &mut engine,
            "joule_heat",
            ["electrical", "joule_heat"],
            ["thermal", "heat_source"],
        )?;
    }
    if has_mechanical {
        transfer(
            &mut engine,
            "thermal_strain",
            ["thermal", "temperature"],
            ["mechanical", "temperature"],
        )?;
    }
    if has_hyperelastic && takes_temperature {
        transfer(
            &mut engine,
            "thermal_expansion",
            ["thermal", "temperature"],
            ["hyperelastic", "temperature"],
        )?;
    }
    let mut problem = Problem::new(engine);
    for name in &spec.parameters.register {
        let bounds = spec.parameters.bounds.get(name.get_ref()).copied();
        problem.register(name.get_ref(), bounds).map_err(|e| {
            AppError::Problem(ProblemError::invalid_in(
                &file.path,
                &file.source,
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
    if problem.electrical().is_some_and(ElectricalField::needs_temperature) {
        transfer(
            &mut problem.engine,
            "resistivity",
            ["thermal", "temperature"],
            ["electrical", "temperature"],
        )?;
    }
    if let Some(ts) = &spec.transient {
        let base = file.path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let rule = crate::transient_file::time_rule(&base, ts)
            .map_err(|e| in_table(file, "[transient]", e))?;
        problem.engine.set_time_rule(rule);
        problem.engine.check_time_setup().map_err(run_err)?;
    }
    place_on_device(file, &mut problem.engine)?;
    problem.objective_unit = objective_unit(
        &spec.objectives,
        spec.hyperelastic.is_some(),
        spec.transient.as_ref().map(|t| t.objective.as_str()),
    );
    if let Some(declared) = spec.coupling.as_ref().and_then(|c| c.transfers.as_ref()) {
        check_declared_graph(file, &problem.coupling(), declared)?;
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
        let table = "[[mechanical.material]]";
        let young_values = file.required(m.young.as_ref(), &m.group, table, "young")?;
        let poisson = *file.required(m.poisson.as_ref(), &m.group, table, "poisson")?;
        let bad = |key: &str, v: f64, why: &str| {
            Err(invalid(
                file,
                &format!("line {line}: `{key}` = {v}: {why} (material on '{}')", m.group.get_ref()),
            ))
        };
        let young = young_values.uniform().unwrap_or(1.0);
        let values = [("young", young), ("poisson", poisson), ("alpha", m.alpha)];
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
        if !(poisson > -1.0 && poisson < 0.5) {
            return bad(
                "poisson",
                poisson,
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
            poisson,
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
        let young = m.young.as_ref().expect("checked above");
        if let Some(values) = element_constant(file, mesh, young, &at, &tags, |v| {
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
                    file.strict,
                )
                .map_err(|source| AppError::InitialState { file: file.path.clone(), source })?;
                field.set_imported_temperature(crate::mechanical::ImportedTemperature::new(
                    values,
                    t.scale,
                    t.offset,
                    format!("{} set {}{}", info.file, info.set, unit_note(&info)),
                ));
            }
            (None, Some(uniform)) => {
                if !(uniform.is_finite() && uniform > 0.0) {
                    return Err(invalid(
                        file,
                        &format!(
                            "{}[mechanical] temperature `uniform` = {uniform}: temperatures are absolute, in kelvin, and must be above 0 K",
                            file.at_key("temperature")
                        ),
                    ));
                }
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
                // The sensor file's own error (its row) in the context of the key that names it.
                let sensors = read_sensors(&file.resolve_path(path)).map_err(|e| {
                    let index = file.spec.objectives.iter().position(|x| std::ptr::eq(x, o));
                    let at = index.map_or(String::new(), |k| {
                        file.at_table("[[objective]]", k, Some("sensors"))
                    });
                    invalid(file, &format!("{at}`sensors`: {e}"))
                })?;
                ObjectiveKind::Misfit { sensors }
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
                let index = file.spec.objectives.iter().position(|x| std::ptr::eq(x, o));
                let at = index
                    .map_or(String::new(), |k| file.at_table("[[objective]]", k, Some("kind")));
                return Err(invalid(
                    file,
                    &format!(
                        "{at}unknown objective kind '{other}'; expected point, average, max, peak, integral_square, nodal_sum_squares, misfit, current, voltage, resistance, displacement, average_displacement, compliance or von_mises"
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
    mesh: &gradfem_mesh::Mesh,
) -> Result<(ThermalField, Vec<(usize, TerminalTerm)>, Vec<MechObjectiveTerm>), AppError> {
    let run_err = |source: RunError| AppError::Run { file: file.path.clone(), source };
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
                file.check_group(mesh, &m.group, "[[thermal.material]]")?;
                let line = file.line_of(&m.group);
                let k_values =
                    file.required(m.k.as_ref(), &m.group, "[[thermal.material]]", "k")?;
                if let Some(k) = k_values.uniform()
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
                    k0: k_values.uniform().unwrap_or(1.0),
                    law: m.law.clone(),
                    source: m.source,
                });
            }
            for b in &thermal.bcs {
                file.check_group(mesh, &b.group, "[[thermal.bc]]")?;
                bcs.push(BcSpec { group: b.group.get_ref().clone(), kind: file.bc_kind(b)? });
            }
        }
        (None, Some(mech)) => {
            // A prescribed temperature: every node of the mechanical regions is held, so the
            // thermal field has no unknowns; its fixed values are parameters
            // (`bc.<group>.temperature`).
            let uniform = mech.temperature.as_ref().and_then(|t| t.uniform);
            for m in &mech.materials {
                file.check_group(mesh, &m.group, "[[mechanical.material]]")?;
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
                file.check_group(mesh, &m.group, "[[hyperelastic.material]]")?;
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
        objective_terms(file, mesh, &spec.objectives, "[[objective]]")?
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
    let mut problem = ThermalField::new(mesh, &regions, &bcs, terms, linear).map_err(run_err)?;
    for m in spec.thermal.iter().flat_map(|t| &t.materials) {
        let model = &problem.model;
        let r = model.regions.iter().position(|x| x.name == *m.group.get_ref());
        let elements = model.regions[r.expect("a region per material")].elements.clone();
        let tags: Vec<u64> = elements.clone().map(|e| model.element_cell_tag(e)).collect();
        let at = ConstantAt { group: &m.group, table: "[[thermal.material]]", key: "k" };
        let k = m.k.as_ref().expect("checked when the regions were made");
        if let Some(values) = element_constant(file, mesh, k, &at, &tags, |v| {
            (v <= 0.0).then_some("the conductivity must be positive")
        })? {
            for (e, v) in elements.zip(values) {
                problem.model.k_elem[e] = v;
            }
        }
    }
    check_solver(file)?;
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
            mesh,
            unit,
            "[initial_state]",
            file.strict,
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
                    "line {}: a second {table} on group '{}' ({}); a cell has one material: \
                     merge the two entries",
                    file.line_of(g),
                    g.get_ref(),
                    match file.line_of(first) {
                        0 => "the first is given in code".to_string(),
                        line => format!("the first is at line {line}"),
                    }
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

/// A set-up error of the table `header` located in the file: at the key its message names
/// (in backquotes, or as `[table] key …`), else at the table; other errors as they are.
fn in_table(file: &ProblemFile, header: &str, e: RunError) -> AppError {
    let RunError::Setup(message) = &e else {
        return AppError::Run { file: file.path.clone(), source: e };
    };
    let named = message.split('`').nth(1).filter(|k| !k.contains(' ')).or_else(|| {
        let rest = message.strip_prefix(header)?.trim_start();
        let key = rest.split([' ', '=', ':']).next()?;
        (!key.is_empty() && key.chars().all(|c| c.is_alphanumeric() || c == '_')).then_some(key)
    });
    let at = file.at_table(header, 0, named);
    if at.is_empty() {
        return AppError::Run { file: file.path.clone(), source: e };
    }
    invalid(file, &format!("{at}{message}"))
}

/// `[solver]`'s values, at their lines, before any solve uses them.
fn check_solver(file: &ProblemFile) -> Result<(), AppError> {
    let s = &file.spec.solver;
    let refuse = |key: &str, value: String, why: &str| {
        Err(invalid(file, &format!("{}[solver] `{key}` = {value}: {why}", file.at_key(key))))
    };
    if !(s.rel_tol.is_finite() && s.rel_tol >= 0.0) {
        return refuse("rel_tol", s.rel_tol.to_string(), "a tolerance must be finite and ≥ 0");
    }
    if !(s.abs_tol.is_finite() && s.abs_tol >= 0.0) {
        return refuse("abs_tol", s.abs_tol.to_string(), "a tolerance must be finite and ≥ 0");
    }
    if s.max_iterations == 0 {
        return refuse("max_iterations", "0".into(), "Newton needs at least one iteration");
    }
    if !(s.cg_rel_tol.is_finite() && s.cg_rel_tol > 0.0 && s.cg_rel_tol < 1.0) {
        return refuse("cg_rel_tol", s.cg_rel_tol.to_string(), "must lie in (0, 1)");
    }
    Ok(())
}

/// `[solver] device`: `cpu` runs on the CPU; `cuda` checks that this build and this machine
/// can use the GPU (the `cuda` feature, a driver, a device and NVRTC) and is otherwise an error
/// naming what is missing. The fields are then put on the device by [`place_on_device`].
pub fn check_device(file: &ProblemFile) -> Result<(), AppError> {
    match file.device()? {
        gradfem_gpu::Device::Cpu => Ok(()),
        gradfem_gpu::Device::Cuda => match gradfem_gpu::cuda_ready() {
            Ok(name) => {
                tracing::info!("[solver] device = \"cuda\": {name}");
                Ok(())
            }
            Err(e) => Err(invalid(file, &format!("[solver] device = \"cuda\": {e}"))),
        },
    }
}

/// With `[solver] device = "cuda"`, solve the linear systems of every field that has a device
/// path by AMG-preconditioned CG on the GPU ([`gradfem_gpu::DeviceCgSolver`] to
/// `[solver] cg_rel_tol`; the hierarchy built on the CPU and copied at each factorization,
/// for the mechanical field from its rigid-body modes and, on quadratic cells, from the
/// displacement on the vertices): the electrical field, a thermal field
/// with constant conductivities and the linear mechanical field. Assembly stays on the CPU;
/// see [`solve_fields_with`] for what stays on the CPU entirely.
pub fn place_on_device(file: &ProblemFile, engine: &mut CoupledProblem) -> Result<(), AppError> {
    let device = file.device()?;
    if device == gradfem_gpu::Device::Cpu {
        return Ok(());
    }
    let params =
        gradfem_gpu::CgParams { rel_tol: file.spec.solver.cg_rel_tol, max_iterations: 200_000 };
    solve_fields_with(engine, |field, modes, coarse| {
        Box::new(
            gradfem_gpu::DeviceCgSolver::new(field, device, params)
                .with_amg(modes)
                .with_coarse_space(coarse),
        )
    });
    Ok(())
}

/// Give every field whose systems are symmetric positive definite the linear solver
/// `make(field name, near-nullspace, coarse space)` (the mechanical field's
/// [`MechanicalField::amg_spaces`]: its rigid-body modes and, on quadratic cells, the vertices'
/// coarse level; `None` for scalar fields): the electrical field, a thermal field with constant conductivities and
/// the linear mechanical field. What keeps its own solvers is named once in the log: a thermal
/// field with k(T) (a nonsymmetric Newton tangent), transient steps, the finite-strain field
/// and a monolithic coupled cycle (LU on the whole block system).
pub fn solve_fields_with(
    engine: &mut CoupledProblem,
    make: impl Fn(
        &str,
        Option<gradfem_solvers::amg::NearNullspace>,
        Option<gradfem_solvers::amg::CoarseSpace>,
    ) -> Box<dyn gradfem_solvers::linear::LinearSolver>,
) {
    let mut kept = Vec::new();
    if let Some(f) = engine.find_mut::<ElectricalField>() {
        f.set_solver(make("electrical", None, None));
    }
    if let Some(f) = engine.find_mut::<ThermalField>() {
        if f.is_symmetric() {
            f.set_solver(make("thermal", None, None));
        } else {
            kept.push("the thermal field (a temperature-dependent conductivity)");
        }
        if f.transient.is_some() {
            kept.push("the transient time steps");
        }
    }
    if let Some(f) = engine.find_mut::<MechanicalField>() {
        let (modes, coarse) = f.amg_spaces();
        f.set_solver(make("mechanical", modes, coarse));
    }
    if engine.find::<HyperelasticField>().is_some() {
        kept.push("the finite-strain field");
    }
    if engine.has_cycle() && engine.cycle.scheme == CycleScheme::Monolithic {
        kept.push("the monolithic coupled cycle");
    }
    if engine.is_transient() {
        kept.push("the coupled time steps");
    }
    if !kept.is_empty() {
        tracing::warn!("no device path for {}: they solve on the CPU", kept.join(", "));
    }
}

fn invalid(file: &ProblemFile, message: &str) -> AppError {
    AppError::Problem(ProblemError::invalid_in(&file.path, &file.source, message))
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
    /// Where the heat goes: sources, fluxes, convection and reactions at fixed temperatures \[W\].
    pub heat_balance: gradfem_thermal::HeatBalance,
    /// The starting guess, when `[initial_state]` gave one (file, set, field, mapping).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_state: Option<String>,
    /// Electro-thermal problems: the drive terminal's current \[A\] (see
    /// [`ElectricalField::default_terminals`]).
    #[serde(rename = "current_A", skip_serializing_if = "Option::is_none")]
    pub current_a: Option<f64>,
    /// Voltage between the drive and the reference terminal \[V\].
    #[serde(rename = "voltage_V", skip_serializing_if = "Option::is_none")]
    pub voltage_v: Option<f64>,
    /// Resistance between the drive and the reference terminal \[Ω\].
    #[serde(rename = "resistance_ohm", skip_serializing_if = "Option::is_none")]
    pub resistance_ohm: Option<f64>,
    /// Total Joule power ∫ σ|∇φ|² dΩ \[W\].
    #[serde(rename = "joule_power_W", skip_serializing_if = "Option::is_none")]
    pub joule_power_w: Option<f64>,
    /// Every terminal's current and voltage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminals: Option<Vec<TerminalReport>>,
    /// What the solve of a strongly coupled group (a cycle such as φ ⇄ T) did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coupling: Option<CycleReport>,
    /// Seconds of the electrical field's last solve.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub electrical_s: Option<f64>,
    /// The schedule of the coupling graph, e.g. `[electrical ⇄ thermal] → mechanical`.
    pub coupling_schedule: String,
    /// Mechanical problems: the mean displacement vector over the tip group (`[mechanical]
    /// tip`, default `free_end`) \[m\].
    #[serde(rename = "tip_displacement_m", skip_serializing_if = "Option::is_none")]
    pub tip_displacement_m: Option<[f64; 3]>,
    /// The largest von Mises stress at the quadrature points \[Pa\].
    #[serde(rename = "max_von_mises_Pa", skip_serializing_if = "Option::is_none")]
    pub max_von_mises_pa: Option<f64>,
    /// The largest nodal displacement magnitude \[m\].
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
    /// The term's value (the aggregate) \[K\].
    #[serde(rename = "aggregate_K")]
    pub aggregate_k: f64,
    /// The largest nodal temperature of the group \[K\].
    #[serde(rename = "true_peak_K")]
    pub true_peak_k: f64,
}

/// The `max` and `peak` terms of the thermal objective with the true peaks of their groups.
fn temperature_peaks(
    problem: &ThermalField,
    t: &[f64],
    terms: &[f64],
) -> Result<Vec<PeakReport>, RunError> {
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
    let t = problem.reported_temperature().ok_or_else(|| RunError::Setup("solve first".into()))?;
    let mut s = thermal_summary(title, problem.thermal(), &t)?;
    s.coupling_schedule = problem.coupling().to_string();
    let (value, terms) = problem.objective_terms_solved()?;
    s.objective = value;
    s.objective_terms = terms;
    if let Some(p) = problem.electrical() {
        let report = p.terminal_report()?;
        if let Some((d, r)) = p.default_terminals() {
            let v = report[d].voltage_v - report[r].voltage_v;
            s.current_a = Some(report[d].current_a);
            s.voltage_v = Some(v);
            s.resistance_ohm = Some(v / report[d].current_a);
        }
        s.joule_power_w = Some(p.joule_power()?);
        s.terminals = Some(report);
        s.electrical_s = Some(p.last_solve_s);
    }
    s.coupling = problem.cycles().first().cloned();
    if let Some(tr) = problem.transient() {
        s.transient = Some(tr.report.clone());
        if let Some(balance) = tr.heat_balance() {
            s.heat_balance = balance;
        }
    }
    if let Some(h) = problem.hyperelastic() {
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
    if let Some(m) = problem.mechanical() {
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

fn thermal_summary(title: &str, problem: &ThermalField, t: &[f64]) -> Result<Summary, RunError> {
    let active: Vec<f64> = t.iter().copied().filter(|v| v.is_finite()).collect();
    let eval = gradfem_thermal::objective::evaluate(&problem.model, &problem.objective, t, false)?;
    let mean = gradfem_thermal::objective::evaluate(
        &problem.model,
        &[ObjectiveTerm { weight: 1.0, kind: ObjectiveKind::Average { group: "*".into() } }],
        t,
        false,
    )?
    .value;
    let temperature_peaks = temperature_peaks(problem, t, &eval.terms)?;
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
        electrical_s: None,
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
    let mesh = whole.mesh();
    let registry = whole.registry();
    let werr = |path: &Path, e: &dyn std::fmt::Display| AppError::Write {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| werr(dir, &e))?;
    let t = whole.reported_temperature().expect("solved before writing");
    let t = t.as_slice();
    let n_cells = mesh.n_cells_of_dim(mesh.dim());
    let index = problem.element_output_index(mesh);
    let flux = problem.model.cell_heat_flux(t);
    let mut flux_cells = vec![[f64::NAN; 3]; n_cells];
    let mut k_cells = vec![f64::NAN; n_cells];
    for (e, &c) in index.iter().enumerate() {
        flux_cells[c] = flux[e];
        k_cells[c] = problem.model.k_elem[e];
    }
    // The unit of dJ/dp for the registered parameter `name`.
    let gradient_unit = |name: &str| {
        let by = registry.id(name).map_or("", |id| registry.get(id).units.as_str());
        gradfem_io::h5::derivative_unit(&whole.objective_unit, by)
    };
    let gradient_field = |name: String, values: Vec<f64>| {
        let unit = gradient_unit(name.strip_prefix("dJ/d").unwrap_or(&name));
        Field::cell(name, unit, FieldValues::Scalar(values))
    };
    let mut results = Results::new(mesh, CellSelection::TopDimension);
    let mut fields = vec![
        Field::node("temperature", "K", FieldValues::Scalar(t.to_vec())),
        Field::cell("heat_flux", "W/m²", FieldValues::Vector(flux_cells)),
        Field::cell("conductivity", "W/(m·K)", FieldValues::Scalar(k_cells)),
    ];
    if let Some(p) = whole.electrical()
        && let Some(phi) = p.potential()
    {
        fields.push(Field::node("potential", "V", FieldValues::Scalar(phi.to_vec())));
        let t = p.temperature();
        let j = p.model.cell_current_density(phi, t);
        let power = p.model.joule_power_elements(phi, t);
        let mut j_cells = vec![[f64::NAN; 3]; n_cells];
        let mut q_cells = vec![f64::NAN; n_cells];
        let th_of_cell: std::collections::HashMap<_, _> = (0..problem.model.n_volume_elements())
            .map(|e| (problem.model.element_cell(e), e))
            .collect();
        for e in 0..p.model.n_volume_elements() {
            if let Some(&te) = th_of_cell.get(&p.model.element_cell(e)) {
                j_cells[index[te]] = j[e];
                q_cells[index[te]] = power[e];
            }
        }
        fields.push(Field::cell("current_density", "A/m²", FieldValues::Vector(j_cells)));
        // The Joule power of each cell (its integral over the cell).
        fields.push(Field::cell("joule_power", "W", FieldValues::Scalar(q_cells)));
    }
    if let Some(m) = whole.mechanical()
        && let Some(u) = m.displacement()
    {
        let cell_of = m.cell_output_index(mesh);
        mechanical_fields(m, u, &cell_of, n_cells, &mut fields);
        if let Some(g) = gradient {
            for (id, values) in m.element_gradient_fields(g) {
                let mut cells = vec![f64::NAN; n_cells];
                for (e, c) in cell_of.iter().enumerate() {
                    if let Some(c) = c {
                        cells[*c] = values[e];
                    }
                }
                let name = format!("dJ/d{}", registry.get(id).name);
                fields.push(gradient_field(name, cells));
            }
        }
    }
    if let (Some(g), Some(p)) = (gradient, whole.electrical()) {
        for (id, elements, values) in p.element_gradients(g) {
            let tags = elements.iter().map(|&e| p.model.element_cell_tag(e));
            let cell_of = gradfem_coupling::fields::mechanical::output_cell_index(mesh, tags);
            let mut cells = vec![f64::NAN; n_cells];
            for (c, v) in cell_of.iter().zip(values) {
                if let Some(c) = c {
                    cells[*c] = v;
                }
            }
            fields.push(gradient_field(format!("dJ/d{}", registry.get(id).name), cells));
        }
    }
    if let Some(g) = gradient {
        for (id, values) in problem.element_gradient_fields(mesh, g) {
            fields.push(gradient_field(format!("dJ/d{}", registry.get(id).name), values));
        }
        if let Ok(id) = registry.id("mesh.coordinates") {
            // The shape gradient: dJ/dx of every node, a vector per node.
            let dx = g.get(id);
            if dx.len() == 3 * mesh.n_nodes() {
                fields.push(Field::node(
                    "dJ/dmesh.coordinates",
                    gradient_unit("mesh.coordinates"),
                    FieldValues::Vector(dx.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect()),
                ));
            }
        }
    }
    // A finite-strain field's last load step: displacement, reactions, Cauchy stress, J and
    // stretches (they replace the fields of the same names).
    let finite_strain_last = |fields: &mut Vec<Field>| -> Result<(), AppError> {
        let Some(h) = whole.hyperelastic() else { return Ok(()) };
        let Some(k) = h.states().len().checked_sub(1) else { return Ok(()) };
        let cell_of = h.cell_output_index(mesh);
        let herr = |e: RunError| werr(dir, &format!("the finite-strain output: {e}"));
        let step = crate::hyperelastic_file::step_fields(h, k, &cell_of, n_cells).map_err(herr)?;
        fields.retain(|f| step.iter().all(|g| g.name != f.name));
        fields.extend(step);
        Ok(())
    };
    match (whole.transient(), whole.hyperelastic()) {
        (Some(tr), _) => {
            // Every output state holds the temperature and the quasi-static state of every
            // field downstream of it (the displacement); the last one every field.
            let states = tr.output_states();
            let indices = tr.output_indices();
            let history = whole.time_history();
            let last = states.len().saturating_sub(1);
            for (i, (time, t)) in states.iter().enumerate() {
                if i == last {
                    finite_strain_last(&mut fields)?;
                    results.add_step(Step { time: *time, fields: std::mem::take(&mut fields) });
                    continue;
                }
                let mut step =
                    vec![Field::node("temperature", "K", FieldValues::Scalar(t.to_vec()))];
                for h in history.iter().filter(|h| !h.states.is_empty()) {
                    for (k, &f) in h.fields.iter().enumerate() {
                        let port = &whole.fields()[f].outputs()[0];
                        if let Some(field) = state_field(port, &h.states[indices[i]][k]) {
                            step.push(field);
                        }
                    }
                }
                results.add_step(Step { time: *time, fields: step });
            }
        }
        (None, Some(h)) => {
            // One output step per load step (time = load factor): displacement, reactions,
            // Cauchy stress, J and stretches; the last step also holds the upstream fields.
            let loads: Vec<f64> = h.states().iter().map(|s| s.0).collect();
            let cell_of = h.cell_output_index(mesh);
            let herr = |e: RunError| werr(dir, &format!("the finite-strain output: {e}"));
            for (i, &load) in loads.iter().enumerate() {
                let mut step_fields =
                    crate::hyperelastic_file::step_fields(h, i, &cell_of, n_cells).map_err(herr)?;
                if i + 1 == loads.len() {
                    fields.retain(|f| {
                        !matches!(f.name.as_str(), "temperature" | "heat_flux" | "conductivity")
                            && step_fields.iter().all(|g| g.name != f.name)
                    });
                    step_fields.append(&mut fields);
                }
                results.add_step(Step { time: load, fields: step_fields });
            }
        }
        (None, None) => {
            results.add_step(Step { time: 0.0, fields });
        }
    }
    let path = dir.join("results.xdmf");
    results.write(&path).map_err(|e| werr(&path, &e))?;
    Ok(path)
}

/// A field's nodal state as a results field: its port's name, the unit of the quantities the
/// fields hold (K, V, m), a scalar or a vector per node; `None` for a layout that is neither.
fn state_field(port: &gradfem_coupling::Port, values: &[f64]) -> Option<Field> {
    let unit = match port.name.as_str() {
        "temperature" => "K",
        "potential" => "V",
        "displacement" => "m",
        _ => "",
    };
    match port.layout {
        gradfem_coupling::Layout::Nodal { components: 1 } => {
            Some(Field::node(port.name.clone(), unit, FieldValues::Scalar(values.to_vec())))
        }
        gradfem_coupling::Layout::Nodal { components: 3 } => Some(Field::node(
            port.name.clone(),
            unit,
            FieldValues::Vector(values.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect()),
        )),
        _ => None,
    }
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
    /// Strongly coupled groups (cycles): scheme, iterations forward and adjoint, timings.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cycles: Vec<CycleReport>,
    /// The electrical field's forward solve (s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub electrical_forward_s: Option<f64>,
    /// The mechanical field's solve.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mechanical_forward: Option<MechanicalSolveTimings>,
    /// The mechanical field's share of the gradient (its adjoint solve and accumulation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mechanical_gradient:
        Option<gradfem_coupling::fields::mechanical::MechanicalGradientTimings>,
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
) -> GradientReport {
    let mesh = whole.mesh();
    let mut gradients = std::collections::BTreeMap::new();
    let mut values = std::collections::BTreeMap::new();
    let mut units = std::collections::BTreeMap::new();
    let mut gradient_units = std::collections::BTreeMap::new();
    let element_tags = whole.element_parameter_tags();
    let mut tags = std::collections::BTreeMap::new();
    for (id, spec) in whole.registry().iter() {
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
            && spec.values.len() == 3 * mesh.n_nodes()
        {
            let entry = EntityTags { entity: "node", per_entity: 3, tags: mesh.node_tags.clone() };
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
            forward: whole.thermal().last_solve.clone(),
            gradient: timings,
            cycles: whole.cycles().to_vec(),
            electrical_forward_s: whole.electrical().map(|p| p.last_solve_s),
            mechanical_forward: whole.mechanical().map(|m| m.last_solve.clone()),
            mechanical_gradient: whole.mechanical().map(|m| m.last_gradient.clone()),
            hyperelastic_forward_s: whole.hyperelastic().map(|h| h.report.solve_s),
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
