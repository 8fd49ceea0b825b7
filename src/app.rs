//! From a problem file to a solved, differentiable problem, and from results to files.

use std::path::{Path, PathBuf};

use gradfem_io::h5::{CellSelection, Centering, Field, FieldValues, Results, Step};
use gradfem_solvers::params::{Gradient, ParamKind};
use gradfem_thermal::{BcSpec, ObjectiveKind, ObjectiveTerm, RegionSpec};
use serde::Serialize;

use crate::problem::{ProblemError, ProblemFile, read_sensors};
use crate::thermal::{GradientTimings, LinearChoice, RunError, SolveTimings, ThermalProblem};

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

/// Build the thermal problem described by a problem file.
pub fn build(file: &ProblemFile) -> Result<ThermalProblem, AppError> {
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
    let mut terms = Vec::new();
    for o in &spec.objectives {
        let group = |ctx: &str| -> Result<String, AppError> {
            match &o.group {
                Some(g) => {
                    file.check_group(&mesh, g, ctx)?;
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
            "average" => ObjectiveKind::Average { group: group("[[objective]]")? },
            "max" => ObjectiveKind::Max { group: group("[[objective]]")?, p: o.p.unwrap_or(8.0) },
            "integral_square" => ObjectiveKind::IntegralSquare { group: group("[[objective]]")? },
            "nodal_sum_squares" => ObjectiveKind::NodalSumSquares,
            "misfit" => {
                let path = o.sensors.as_ref().ok_or_else(|| {
                    invalid(file, "a 'misfit' objective needs `sensors = \"file.csv\"`")
                })?;
                ObjectiveKind::Misfit { sensors: read_sensors(&file.resolve_path(path))? }
            }
            other => {
                return Err(invalid(
                    file,
                    &format!(
                        "unknown objective kind '{other}'; expected point, average, max, integral_square, nodal_sum_squares or misfit"
                    ),
                ));
            }
        };
        terms.push(ObjectiveTerm { weight: o.weight, kind });
    }
    if terms.is_empty() {
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
    for name in &spec.parameters.register {
        let bounds = spec.parameters.bounds.get(name.get_ref()).copied();
        problem.register(name.get_ref(), bounds).map_err(|e| {
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
    /// The starting guess, when `[initial_state]` gave one (file, set, field, mapping).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_state: Option<String>,
}

/// Summarize the solved problem.
pub fn summary(title: &str, problem: &ThermalProblem) -> Result<Summary, RunError> {
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
        initial_state: problem.initial_state.clone(),
    })
}

/// Write `results.h5` + `results.xdmf` into `dir`: temperature, heat flux, and any per-element
/// gradients as cell fields. Returns the path of the `.xdmf`.
pub fn write_results(
    dir: &Path,
    problem: &ThermalProblem,
    gradient: Option<&Gradient>,
) -> Result<PathBuf, AppError> {
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
}

/// Collect the gradient of every registered parameter for `gradients.json`.
pub fn gradient_report(
    problem: &ThermalProblem,
    objective: f64,
    grad: &Gradient,
    timings: GradientTimings,
) -> GradientReport {
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
        timings: GradientReportTimings { forward: problem.last_solve.clone(), gradient: timings },
    }
}

/// Write `gradients.json` atomically.
pub fn write_gradients(path: &Path, report: &GradientReport) -> Result<(), AppError> {
    let text = serde_json::to_string_pretty(report).expect("serializable");
    gradfem_io::atomic::write_bytes_atomic(path, text.as_bytes())
        .map_err(|e| AppError::Write { path: path.to_path_buf(), message: e.to_string() })
}
