//! From a problem file to a solved, differentiable problem, and from results to files.

use std::path::{Path, PathBuf};

use gradfem_io::h5::{CellSelection, Centering, Field, FieldValues, Results, Step};
use gradfem_solvers::params::{Gradient, ParamKind};
use gradfem_thermal::{BcSpec, ObjectiveKind, ObjectiveTerm, RegionSpec};
use serde::Serialize;

use crate::electrothermal::{
    CoupledGradientTimings, CoupledSolveTimings, CouplingParams, CouplingScheme,
    ElectroThermalProblem, TerminalReport, TerminalTerm,
};
use crate::problem::{ProblemError, ProblemFile, read_sensors};
use crate::thermal::{GradientTimings, LinearChoice, RunError, SolveTimings, ThermalProblem};
use gradfem_electrical::TerminalFunctional;

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
pub const DEFAULT_PROBLEM: &str = include_str!("../examples/heat_sink.toml");

/// A problem built from a problem file: the thermal field alone, or electro-thermal when the
/// file has an `[electrical]` table.
pub enum Problem {
    Thermal(Box<ThermalProblem>),
    ElectroThermal(Box<ElectroThermalProblem>),
}

impl Problem {
    /// The thermal field (alone or inside the coupled problem).
    pub fn thermal(&self) -> &ThermalProblem {
        match self {
            Problem::Thermal(p) => p,
            Problem::ElectroThermal(p) => &p.thermal,
        }
    }

    /// The one parameter registry.
    pub fn registry(&self) -> &gradfem_solvers::params::ParamRegistry {
        &self.thermal().registry
    }

    /// The one parameter registry, to change values (then call
    /// [`apply_parameters`](Self::apply_parameters)).
    pub fn registry_mut(&mut self) -> &mut gradfem_solvers::params::ParamRegistry {
        match self {
            Problem::Thermal(p) => &mut p.registry,
            Problem::ElectroThermal(p) => &mut p.thermal.registry,
        }
    }

    /// Copy the registry's values into the models (invalidates the solution).
    pub fn apply_parameters(&mut self) -> Result<(), RunError> {
        match self {
            Problem::Thermal(p) => p.apply_parameters(),
            Problem::ElectroThermal(p) => p.apply_parameters(),
        }
    }

    /// Replace the objective (thermal terms and terminal functionals); returns the old one.
    /// The solution stays valid: only the functional changes.
    pub fn swap_objective(
        &mut self,
        thermal: Vec<ObjectiveTerm>,
        electrical: Vec<TerminalTerm>,
    ) -> (Vec<ObjectiveTerm>, Vec<TerminalTerm>) {
        match self {
            Problem::Thermal(p) => (std::mem::replace(&mut p.objective, thermal), Vec::new()),
            Problem::ElectroThermal(p) => (
                std::mem::replace(&mut p.thermal.objective, thermal),
                std::mem::replace(&mut p.electrical_objective, electrical),
            ),
        }
    }

    /// Solve the forward problem.
    pub fn solve(&mut self) -> Result<(), RunError> {
        match self {
            Problem::Thermal(p) => p.solve().map(|_| ()),
            Problem::ElectroThermal(p) => p.solve(),
        }
    }

    /// J and its gradient, with the total timings and, for the coupled problem, per block.
    pub fn gradient(
        &mut self,
    ) -> Result<(f64, Gradient, GradientTimings, Option<CoupledGradientTimings>), RunError> {
        match self {
            Problem::Thermal(p) => p.gradient().map(|(j, g, t)| (j, g, t, None)),
            Problem::ElectroThermal(p) => {
                let (j, g, t) = p.gradient()?;
                Ok((j, g, t.totals(), Some(t)))
            }
        }
    }

    /// Taylor test over every registered parameter; leaves the problem as it was.
    pub fn taylor_test(
        &mut self,
        params: &gradfem_solvers::taylor::TaylorParams,
        progress: impl FnMut(usize),
    ) -> Result<gradfem_solvers::taylor::TaylorResult, RunError> {
        match self {
            Problem::Thermal(p) => p.taylor_test(params, progress),
            Problem::ElectroThermal(p) => p.taylor_test(params, progress),
        }
    }
}

/// Build the thermal problem described by a problem file; a file with an `[electrical]` table
/// is an error here (use [`build_problem`]).
pub fn build(file: &ProblemFile) -> Result<ThermalProblem, AppError> {
    match build_problem(file)? {
        Problem::Thermal(p) => Ok(*p),
        Problem::ElectroThermal(_) => Err(invalid(
            file,
            "this problem is electro-thermal ([electrical]); build it with app::build_problem",
        )),
    }
}

/// Build the problem described by a problem file: electro-thermal when it has an
/// `[electrical]` table, thermal otherwise.
pub fn build_problem(file: &ProblemFile) -> Result<Problem, AppError> {
    let run_err = |source: RunError| AppError::Run { file: file.path.clone(), source };
    let (thermal, terminal_terms) = build_thermal(file)?;
    let spec = &file.spec;
    let mut problem = match &spec.electrical {
        None => {
            if spec.coupling.is_some() {
                return Err(invalid(file, "[coupling] needs an [electrical] table"));
            }
            Problem::Thermal(Box::new(thermal))
        }
        Some(el) => {
            let mut conductors = Vec::new();
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
                    sigma: c.sigma,
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
            let et = ElectroThermalProblem::new(
                thermal,
                &conductors,
                &terminals,
                terminal_terms.into_iter().map(|(_, t)| t).collect(),
                coupling,
            )
            .map_err(run_err)?;
            Problem::ElectroThermal(Box::new(et))
        }
    };
    if let Problem::Thermal(_) = problem
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
        let r = match &mut problem {
            Problem::Thermal(p) => p.register(name.get_ref(), bounds),
            Problem::ElectroThermal(p) => p.register(name.get_ref(), bounds),
        };
        r.map_err(|e| {
            AppError::Problem(ProblemError::Invalid {
                file: file.path.clone(),
                message: format!("line {}: {e}", file.line_of(name)),
            })
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
    Ok(problem)
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

/// Thermal objective terms, and terminal functionals with the line that named each.
pub type ObjectiveParts = (Vec<ObjectiveTerm>, Vec<(usize, TerminalTerm)>);

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
    for o in specs {
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
            "max" => ObjectiveKind::Max { group: group(context)?, p: o.p.unwrap_or(8.0) },
            "integral_square" => ObjectiveKind::IntegralSquare { group: group(context)? },
            "nodal_sum_squares" => ObjectiveKind::NodalSumSquares,
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
                        "unknown objective kind '{other}'; expected point, average, max, integral_square, nodal_sum_squares, misfit, current, voltage or resistance"
                    ),
                ));
            }
        };
        terms.push(ObjectiveTerm { weight: o.weight, kind });
    }
    Ok((terms, terminal_terms))
}

/// The thermal problem of a problem file (without registered parameters), and the terminal
/// objective terms with their lines.
#[allow(clippy::type_complexity)]
fn build_thermal(
    file: &ProblemFile,
) -> Result<(ThermalProblem, Vec<(usize, TerminalTerm)>), AppError> {
    let run_err = |source: RunError| AppError::Run { file: file.path.clone(), source };
    let mesh = file.build_mesh()?;
    let spec = &file.spec;
    let mut regions = Vec::new();
    for m in &spec.thermal.materials {
        file.check_group(&mesh, &m.group, "[[thermal.material]]")?;
        regions.push(RegionSpec {
            group: m.group.get_ref().clone(),
            k0: m.k,
            law: m.law.clone(),
            source: m.source,
        });
    }
    let mut bcs = Vec::new();
    for b in &spec.thermal.bcs {
        file.check_group(&mesh, &b.group, "[[thermal.bc]]")?;
        bcs.push(BcSpec { group: b.group.get_ref().clone(), kind: file.bc_kind(b)? });
    }
    let (mut terms, terminal_terms) =
        objective_terms(file, &mesh, &spec.objectives, "[[objective]]")?;
    if terms.is_empty() && terminal_terms.is_empty() {
        terms.push(ObjectiveTerm {
            weight: 1.0,
            kind: ObjectiveKind::Average { group: "*".into() },
        });
    }
    let linear = LinearChoice::parse(&spec.solver.linear).map_err(run_err)?;
    let mut problem = ThermalProblem::new(mesh, &regions, &bcs, terms, linear).map_err(run_err)?;
    problem.newton.rel_tol = spec.solver.rel_tol;
    problem.newton.abs_tol = spec.solver.abs_tol;
    problem.newton.max_iterations = spec.solver.max_iterations;
    problem.set_cg_tolerance(spec.solver.cg_rel_tol);
    if let Some(init) = &spec.initial_state {
        let path = file.resolve_path(&init.ansys);
        let (t, info) = crate::ansys_import::initial_temperature(&path, init.set, &problem.mesh)
            .map_err(|source| AppError::InitialState { file: file.path.clone(), source })?;
        problem.set_initial_temperature(&t);
        problem.initial_state = Some(format!(
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
    Ok((problem, terminal_terms))
}

fn invalid(file: &ProblemFile, message: &str) -> AppError {
    AppError::Problem(ProblemError::Invalid { file: file.path.clone(), message: message.into() })
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
}

/// Summarize the solved problem.
pub fn summary(title: &str, problem: &Problem) -> Result<Summary, RunError> {
    let mut s = thermal_summary(title, problem.thermal())?;
    if let Problem::ElectroThermal(p) = problem {
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
    })
}

/// Write `results.h5` + `results.xdmf` into `dir`: temperature, heat flux, and any per-element
/// gradients as cell fields. Returns the path of the `.xdmf`.
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
    let mut results = Results::new(&problem.mesh, CellSelection::TopDimension);
    let mut fields = vec![
        Field {
            name: "temperature".into(),
            centering: Centering::Node,
            values: FieldValues::Scalar(t.to_vec()),
        },
        Field {
            name: "heat_flux".into(),
            centering: Centering::Cell,
            values: FieldValues::Vector(flux_cells),
        },
        Field {
            name: "conductivity".into(),
            centering: Centering::Cell,
            values: FieldValues::Scalar(k_cells),
        },
    ];
    if let Problem::ElectroThermal(p) = whole
        && let Some(phi) = p.potential()
    {
        fields.push(Field {
            name: "potential".into(),
            centering: Centering::Node,
            values: FieldValues::Scalar(phi.to_vec()),
        });
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
        fields.push(Field {
            name: "current_density".into(),
            centering: Centering::Cell,
            values: FieldValues::Vector(j_cells),
        });
        fields.push(Field {
            name: "joule_power".into(),
            centering: Centering::Cell,
            values: FieldValues::Scalar(q_cells),
        });
    }
    if let (Some(g), Problem::ElectroThermal(p)) = (gradient, whole) {
        for (name, values) in p.element_gradient_fields(g) {
            fields.push(Field {
                name,
                centering: Centering::Cell,
                values: FieldValues::Scalar(values),
            });
        }
    }
    if let Some(g) = gradient {
        for (name, values) in problem.element_gradient_fields(g) {
            fields.push(Field {
                name,
                centering: Centering::Cell,
                values: FieldValues::Scalar(values),
            });
        }
    }
    results.add_step(Step { time: 0.0, fields });
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
    pub objective: f64,
    pub gradients: std::collections::BTreeMap<String, GradValue>,
    pub values: std::collections::BTreeMap<String, GradValue>,
    pub timings: GradientReportTimings,
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
    let coupled_forward = match whole {
        Problem::ElectroThermal(p) => Some(p.last_solve.clone()),
        Problem::Thermal(_) => None,
    };
    let mut gradients = std::collections::BTreeMap::new();
    let mut values = std::collections::BTreeMap::new();
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
    }
    GradientReport {
        objective,
        gradients,
        values,
        timings: GradientReportTimings {
            forward: problem.last_solve.clone(),
            gradient: timings,
            coupled_forward,
            blocks,
        },
    }
}

/// Write `gradients.json` atomically.
pub fn write_gradients(path: &Path, report: &GradientReport) -> Result<(), AppError> {
    let text = serde_json::to_string_pretty(report).expect("serializable");
    gradfem_io::atomic::write_bytes_atomic(path, text.as_bytes())
        .map_err(|e| AppError::Write { path: path.to_path_buf(), message: e.to_string() })
}
