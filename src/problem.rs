//! Problem files: a TOML description of mesh, materials, boundary conditions, registered
//! parameters, objective and outputs.
//!
//! ```toml
//! [mesh]
//! file = "part.msh"                      # or: box = { lengths = [1, 1, 1], divisions = [8, 8, 8], cell = "tet4" }
//!
//! [[thermal.material]]
//! group = "domain"
//! k = 150.0                              # W/(m K)
//! source = 1e6                           # W/m³
//! law = { kind = "polynomial", t_ref = 300.0, coefficients = [-1e-3] }   # optional
//!
//! [[thermal.bc]]
//! group = "xmin"
//! kind = "temperature"                   # or "heat_flux" (q_in), "convection" (h, t_inf)
//! value = 300.0
//!
//! [[objective]]
//! kind = "average"                       # point, average, max, integral_square, misfit
//! group = "domain"
//!
//! [parameters]
//! register = ["thermal.k.domain", "bc.xmin.temperature", "mesh.coordinates"]
//! ```
//!
//! With an `[electrical]` table the problem is electro-thermal (the Joule heat of the current
//! heats the thermal field; see [`crate::electrical`]):
//!
//! ```toml
//! [[electrical.conductor]]
//! group = "domain"
//! sigma = 5e4                            # S/m, or: resistivity = 2e-5 (Ω·m)
//! alpha_r = 1.25e-3                      # optional: ρ(T) = ρ₀ (1 + α_R (T − t_ref))
//! t_ref = 293.15                         # or: law = { kind = "table", temperatures = [..], multipliers = [..] }
//!
//! [[electrical.terminal]]
//! group = "xmin"
//! kind = "voltage"                       # or "ground", or "current" (current = 0.01, A into the device)
//! value = 5.0
//!
//! [coupling]
//! transfers = ["electrical -> thermal", "thermal -> electrical"]   # optional, checked
//! scheme = "monolithic"                  # or "staggered"; only matters when some ρ depends on T
//! tol = 1e-11                            # staggered: relative change to stop at
//! max_iterations = 100
//!
//! [[objective]]
//! kind = "resistance"                    # also: current / voltage with terminal = "<group>"
//! drive = "xmin"
//! reference = "xmax"
//! ```
//!
//! Electro-thermal parameters: `electrical.sigma.<group>`, `electrical.sigma_elem.<group>`,
//! `electrical.alpha_r.<group>`, `load.<terminal>.voltage`, `load.<terminal>.current`.
//!
//! Unknown keys are errors that name the line; unknown group names are errors that name the
//! line and list the groups the mesh has.

use std::path::{Path, PathBuf};

use gradfem_mesh::{CellType, Mesh};
use gradfem_thermal::{BcKind, ConductivityLaw};
use serde::{Deserialize, Serialize};
use toml::Spanned;

/// Errors in reading or checking a problem file.
#[derive(Debug, thiserror::Error)]
pub enum ProblemError {
    #[error("{file}: cannot read: {source}")]
    Io { file: PathBuf, source: std::io::Error },
    #[error("{}: {message}", place(file, *line, *column))]
    Syntax { file: PathBuf, line: usize, column: usize, message: String },
    #[error("{}: unknown group '{name}' in {context}; the mesh has: {}", place(file, *line, *column), known.join(", "))]
    UnknownGroup {
        file: PathBuf,
        line: usize,
        column: usize,
        name: String,
        context: String,
        known: Vec<String>,
    },
    /// A value or a combination the set-up refuses, where no line applies.
    #[error("{file}: {message}")]
    Invalid { file: PathBuf, message: String },
    /// A value the set-up refuses, at its line and column (the key's, where the message names
    /// a key on that line; else the line's first character), shown like a syntax error.
    #[error("{}: {message}", place(file, *line, *column))]
    InvalidAt { file: PathBuf, line: usize, column: usize, message: String },
    #[error("{file}: mesh: {message}")]
    Mesh { file: PathBuf, message: String },
}

impl ProblemError {
    /// The error for a refused value of `file`: a message that starts with `line N: ` (the
    /// form the set-up writes) becomes [`ProblemError::InvalidAt`], shown `file:N: …` like a
    /// syntax error; any other is [`ProblemError::Invalid`].
    pub fn invalid(file: &Path, message: impl Into<String>) -> Self {
        Self::invalid_in(file, "", message)
    }

    /// [`ProblemError::invalid`] with the file's text, which gives the column: that of the
    /// first key the message names in backquotes (`` `k` = -1 ``) where it stands as a key on
    /// the line, else the line's first non-blank character.
    pub fn invalid_in(file: &Path, source: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        let at = message.strip_prefix("line ").and_then(|rest| {
            let (n, tail) = rest.split_once(": ")?;
            Some((n.parse::<usize>().ok()?, tail.to_string()))
        });
        match at {
            Some((line, message)) if line > 0 => {
                let column = key_column(source, line, &message);
                ProblemError::InvalidAt { file: file.to_path_buf(), line, column, message }
            }
            // Line 0: a value given in code (see `unlocated`); the message names the entry.
            Some((_, message)) => ProblemError::Invalid { file: file.to_path_buf(), message },
            None => ProblemError::Invalid { file: file.to_path_buf(), message },
        }
    }
}

/// `file:line:column`, or `file` alone for line 0 (a value given in code).
fn place(file: &Path, line: usize, column: usize) -> String {
    if line == 0 {
        file.display().to_string()
    } else {
        format!("{}:{line}:{column}", file.display())
    }
}

/// The 1-based column on `line` of `source` of the first key that `message` names in
/// backquotes and that stands there as a key (followed by `=`); else of the line's first
/// non-blank character (1 for a line that is not there).
pub fn key_column(source: &str, line: usize, message: &str) -> usize {
    let Some(text) = source.lines().nth(line.saturating_sub(1)) else { return 1 };
    let is_key_char = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    for key in message.split('`').skip(1).step_by(2) {
        if key.is_empty() || !key.chars().all(is_key_char) {
            continue;
        }
        for (i, _) in text.match_indices(key) {
            let before = text[..i].chars().next_back();
            let after = text[i + key.len()..].trim_start();
            if !before.is_some_and(is_key_char) && after.starts_with('=') {
                return text[..i].chars().count() + 1;
            }
        }
    }
    text.chars().take_while(|c| c.is_whitespace()).count() + 1
}

/// Where the mesh comes from.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MeshSpec {
    /// A gmsh `.msh` file, or an ANSYS `.rst`/`.rth`/`.cdb` (groups `material_<n>`,
    /// `etype_<n>`), relative to the problem file.
    pub file: Option<String>,
    /// A generated box.
    #[serde(rename = "box")]
    pub generated: Option<BoxMeshSpec>,
    /// The two-hot-arm microactuator, built by gradfem (see [`gradfem_mesh::actuator`]).
    pub actuator: Option<ActuatorMeshSpec>,
    /// Surface groups of the exterior facets on a coordinate plane, added to the mesh:
    /// `plane_group = [{ name = "free_end", axis = "x", value = 240e-6 }]`.
    #[serde(default)]
    pub plane_group: Vec<PlaneGroupSpec>,
    /// Straighten second-order cells that a mesh generator curved until they fold (det J ≤ 0
    /// somewhere): their mid-side nodes move to the edge midpoints. Off by default: an
    /// inverted cell is then an error that names it.
    #[serde(default)]
    pub straighten_inverted: bool,
    /// The length unit of a mesh file's coordinates (`m`, `cm`, `mm`, `um`, `nm`, `in`,
    /// `ft`, …): they are converted to metres on reading. Default: what an ANSYS file's
    /// `/UNITS` says, else metres.
    pub unit: Option<Spanned<String>>,
    /// A factor from a mesh file's coordinates to metres (instead of `unit`).
    pub scale: Option<Spanned<f64>>,
    /// A mesh built in code ([`crate::api::Model::mesh`]), in metres; not a problem-file key.
    #[serde(skip)]
    pub given: Option<std::sync::Arc<Mesh>>,
}

/// Metres per unit of a length unit name; None for an unknown name.
pub fn metres_per(unit: &str) -> Option<f64> {
    Some(match unit.trim() {
        "m" => 1.0,
        "dm" => 0.1,
        "cm" => 1e-2,
        "mm" => 1e-3,
        "um" | "µm" | "μm" | "micron" => 1e-6,
        "nm" => 1e-9,
        "in" | "inch" => 0.0254,
        "ft" | "foot" => 0.3048,
        _ => return None,
    })
}

/// A lower bound of the memory (bytes) a problem on a generated box needs: the mesh
/// (coordinates, tags, connectivity) and, per unknown, one row of the assembled matrix
/// (values and column indices over the cell type's neighbour stencil) twice — the matrix and
/// its factor or preconditioner, which is at least as large. Factor fill, the AMG hierarchy
/// and solution vectors come on top.
pub fn box_memory_estimate(
    nodes: usize,
    cells: usize,
    cell_type: gradfem_mesh::CellType,
    unknowns_per_node: usize,
) -> f64 {
    use gradfem_mesh::CellType::*;
    // Neighbours of an interior node in the structured box (its matrix row's node count).
    let stencil = match cell_type {
        Tet4 => 15.0,
        Tet10 | Hex8 => 27.0,
        Hex20 => 81.0,
        _ => 125.0,
    };
    let (n, c, d) = (nodes as f64, cells as f64, unknowns_per_node as f64);
    let mesh = n * (24.0 + 8.0) + c * (cell_type.n_nodes() as f64 * 8.0 + 8.0);
    let matrix = n * d * stencil * d * (8.0 + 4.0);
    mesh + 2.0 * matrix
}

/// The memory the operating system reports available (`MemAvailable` of `/proc/meminfo`), in
/// bytes; `None` where it cannot be read.
pub fn available_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// A structured box mesh.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BoxMeshSpec {
    #[serde(default)]
    pub origin: [f64; 3],
    pub lengths: [f64; 3],
    pub divisions: [usize; 3],
    /// tet4, tet10, hex8, hex20 or hex27.
    pub cell: String,
}

/// The generated microactuator: every key is optional (defaults: the dimensions of
/// `data/microactuator/README.md`, Hex20 cells, refinement 1).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ActuatorMeshSpec {
    /// hex8, hex20 or hex27.
    pub cell: Option<String>,
    /// Divide the default cell size by this factor.
    pub refine: Option<usize>,
    /// Largest cell edge along x, y, z (m).
    pub max_cell_size: Option<[f64; 3]>,
    /// Hot-arm width d (m).
    pub hot_arm_width: Option<f64>,
    /// Cold-arm width dw (m).
    pub cold_arm_width: Option<f64>,
    /// Gap between the arms (m).
    pub gap: Option<f64>,
    /// Overall length L (m).
    pub length: Option<f64>,
}

/// A surface group made of the exterior facets on the plane `axis = value`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PlaneGroupSpec {
    pub name: String,
    /// x, y or z.
    pub axis: String,
    pub value: f64,
}

/// A material of the thermal field on a volume group.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ThermalMaterialSpec {
    pub group: Spanned<String>,
    /// Conductivity k₀ [W/(m·K)]: one number, or values per element from a file (required;
    /// the set-up names the material that lacks it).
    pub k: Option<crate::element_values::ElementValues>,
    /// Volumetric source [W/m³].
    #[serde(default)]
    pub source: f64,
    #[serde(default = "constant_law")]
    pub law: ConductivityLaw,
}

fn constant_law() -> ConductivityLaw {
    ConductivityLaw::Constant
}

/// A thermal boundary condition.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ThermalBcSpec {
    pub group: Spanned<String>,
    pub kind: String,
    pub value: Option<f64>,
    pub q_in: Option<f64>,
    pub h: Option<f64>,
    pub t_inf: Option<f64>,
}

/// The thermal field.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ThermalSpec {
    #[serde(rename = "material")]
    pub materials: Vec<ThermalMaterialSpec>,
    #[serde(default, rename = "bc")]
    pub bcs: Vec<ThermalBcSpec>,
}

/// One objective term.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectiveSpec {
    pub kind: String,
    #[serde(default = "one")]
    pub weight: f64,
    pub group: Option<Spanned<String>>,
    pub point: Option<[f64; 3]>,
    pub p: Option<f64>,
    /// Sharpness of a `peak` objective's aggregate [1/K] (default 1).
    pub rho: Option<f64>,
    /// CSV file of sensors (x, y, z, value), relative to the problem file.
    pub sensors: Option<String>,
    /// Terminal group of a `current` or `voltage` objective.
    pub terminal: Option<Spanned<String>>,
    /// Driven terminal of a `resistance` objective.
    pub drive: Option<Spanned<String>>,
    /// Reference terminal of a `resistance` objective.
    pub reference: Option<Spanned<String>>,
    /// Direction d of a `displacement` or `average_displacement` objective (d · u).
    pub direction: Option<[f64; 3]>,
    /// Hyperelastic problems: a CSV of (load factor, measured value) rows; the term is then
    /// the misfit Σ_k w (q_k − m_k)² over the load steps.
    pub measured: Option<String>,
}

/// A material of the mechanical field on a volume group.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MechanicalMaterialSpec {
    pub group: Spanned<String>,
    /// Young's modulus E \[Pa\]: one number, or values per element from a file (required).
    pub young: Option<crate::element_values::ElementValues>,
    /// Poisson's ratio ν (required).
    pub poisson: Option<f64>,
    /// Thermal expansion coefficient α [1/K].
    #[serde(default)]
    pub alpha: f64,
    /// Stress-free temperature \[K\] (default 293.15).
    pub t_ref: Option<f64>,
    /// Body force per volume [N/m³].
    #[serde(default)]
    pub body_force: [f64; 3],
}

/// A mechanical boundary condition: `kind = "fixed"`, `"roller"` (`components = ["z"]`),
/// `"displacement"` (`value = [ux, uy, uz]`, optionally `components` to prescribe only some),
/// `"traction"` (`traction = [tx, ty, tz]`, Pa) or `"pressure"` (`pressure`, Pa, into the body).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MechanicalBcSpec {
    pub group: Spanned<String>,
    pub kind: Spanned<String>,
    pub components: Option<Vec<String>>,
    pub value: Option<[f64; 3]>,
    pub traction: Option<[f64; 3]>,
    pub pressure: Option<f64>,
}

/// The mechanical field: linear thermo-elasticity, driven by the thermal field's temperature.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MechanicalSpec {
    #[serde(rename = "material")]
    pub materials: Vec<MechanicalMaterialSpec>,
    #[serde(default, rename = "bc")]
    pub bcs: Vec<MechanicalBcSpec>,
    /// The surface group whose mean displacement is the summary's `tip_displacement_m`
    /// (default: `free_end` when the mesh has it).
    pub tip: Option<Spanned<String>>,
    /// A prescribed temperature, for problems without a `[thermal]` table:
    /// `{ uniform = 350.0 }`, or `{ ansys = "file.rth", set = 1 }` (the TEMP field of an ANSYS
    /// result, by node number or interpolated) with T = offset + scale · T_ansys (registrable
    /// as `mechanical.temperature.scale` and `mechanical.temperature.offset`).
    pub temperature: Option<MechanicalTemperatureSpec>,
}

/// One material of the `[hyperelastic]` table.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HyperMaterialSpec {
    pub group: Spanned<String>,
    /// ogden, neo_hookean, mooney_rivlin or svk.
    pub law: String,
    pub mu: Option<Vec<f64>>,
    pub alpha: Option<Vec<f64>>,
    pub kappa: Option<f64>,
    pub c10: Option<f64>,
    pub c01: Option<f64>,
    pub young: Option<f64>,
    pub poisson: Option<f64>,
    /// quadratic (default), log_squared or simo_taylor.
    pub volumetric: Option<String>,
    /// Body force per reference volume (N/m³), scaled by the load factor.
    #[serde(default)]
    pub body_force: [f64; 3],
    /// Thermal expansion coefficient α (1/K) of `F_θ = (1 + α (T − T_ref)) I` (default 0).
    pub thermal_expansion: Option<f64>,
    /// Stress-free temperature T_ref (K, default 293.15).
    pub t_ref: Option<f64>,
}

/// A prescribed temperature of the finite-strain field, for problems without `[thermal]`:
/// `temperature = { uniform = 350.0 }`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HyperTemperatureSpec {
    /// The temperature (K) of every node of the hyperelastic materials.
    pub uniform: f64,
}

/// The `[hyperelastic]` table (set up by [`crate::hyperelastic_file`]).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HyperelasticSpec {
    #[serde(rename = "material")]
    pub materials: Vec<HyperMaterialSpec>,
    #[serde(default, rename = "bc")]
    pub bcs: Vec<MechanicalBcSpec>,
    /// Equal load steps up to 1.
    pub steps: Option<usize>,
    /// Or the load factors themselves (increasing, in (0, 1]).
    pub load_factors: Option<Vec<f64>>,
    #[serde(default)]
    pub checkpoints: usize,
    pub tip: Option<Spanned<String>>,
    /// A prescribed temperature (without a `[thermal]` table).
    pub temperature: Option<HyperTemperatureSpec>,
}

/// A prescribed temperature of the mechanical field (see [`MechanicalSpec::temperature`]).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MechanicalTemperatureSpec {
    pub uniform: Option<f64>,
    pub ansys: Option<String>,
    #[serde(default = "first_set")]
    pub set: usize,
    /// The unit of the ANSYS file's temperatures (`K`, `C`, `F`) when its `/UNITS` does not
    /// say; converted to kelvin before `scale` and `offset` apply.
    pub temperature_unit: Option<Spanned<String>>,
    #[serde(default = "one")]
    pub scale: f64,
    #[serde(default)]
    pub offset: f64,
}

/// A conductor of the electrical field on a volume group: give exactly one of `sigma` and
/// `resistivity`; `alpha_r` makes ρ(T) = ρ₀ (1 + α_R (T − t_ref)), `law` any
/// `gradfem_electrical::ResistivityLaw` (`{ kind = "table", temperatures = [..], multipliers = [..] }`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ConductorFileSpec {
    pub group: Spanned<String>,
    /// σ₀ [S/m]: one number, or values per element from a file.
    pub sigma: Option<crate::element_values::ElementValues>,
    /// ρ₀ [Ω·m].
    pub resistivity: Option<f64>,
    /// α_R [1/K] of a linear law.
    pub alpha_r: Option<f64>,
    /// A resistivity law (instead of `alpha_r`).
    pub law: Option<gradfem_electrical::ResistivityLaw>,
    /// Reference temperature T₀ \[K\] (default 293.15).
    pub t_ref: Option<f64>,
}

/// A terminal of the electrical field: `kind = "voltage"` (`value` \[V\]), `"ground"`, or
/// `"current"` (`current` \[A\] into the device).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalFileSpec {
    pub group: Spanned<String>,
    pub kind: Spanned<String>,
    pub value: Option<f64>,
    pub current: Option<f64>,
}

/// The electrical field.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ElectricalSpec {
    #[serde(rename = "conductor")]
    pub conductors: Vec<ConductorFileSpec>,
    #[serde(default, rename = "terminal")]
    pub terminals: Vec<TerminalFileSpec>,
}

/// The coupling of the fields: how the electro-thermal cycle is solved, and optionally the
/// graph itself, declared as transfers `"from -> to"` among `electrical`, `thermal`,
/// `mechanical` (`electrical -> thermal`: Joule heat; `thermal -> electrical`: ρ(T);
/// `thermal -> mechanical`: thermal strain). A declared graph must match the physics the file
/// describes; the solve follows its schedule either way.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CouplingSpec {
    /// Declared transfers (optional).
    pub transfers: Option<Vec<Spanned<String>>>,
    /// `monolithic` (default) or `staggered`; matters only when some resistivity depends on T.
    #[serde(default = "monolithic")]
    pub scheme: String,
    /// Relative change below which the staggered iteration stops.
    #[serde(default = "coupling_tol")]
    pub tol: f64,
    #[serde(default = "coupling_max_it")]
    pub max_iterations: usize,
}

impl Default for CouplingSpec {
    fn default() -> Self {
        CouplingSpec {
            transfers: None,
            scheme: monolithic(),
            tol: coupling_tol(),
            max_iterations: coupling_max_it(),
        }
    }
}

fn monolithic() -> String {
    "monolithic".into()
}
fn coupling_tol() -> f64 {
    1e-11
}
fn coupling_max_it() -> usize {
    100
}

fn one() -> f64 {
    1.0
}

/// Registered parameters.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ParametersSpec {
    #[serde(default)]
    pub register: Vec<Spanned<String>>,
    /// Bounds per parameter name: `bounds = { "thermal.k.domain" = [1.0, 500.0] }`.
    #[serde(default)]
    pub bounds: std::collections::BTreeMap<String, [f64; 2]>,
}

/// Linear and nonlinear solver settings.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SolverSpec {
    /// auto, cholesky, lu or amg-cg.
    #[serde(default = "auto")]
    pub linear: String,
    #[serde(default = "newton_tol")]
    pub rel_tol: f64,
    #[serde(default)]
    pub abs_tol: f64,
    #[serde(default = "max_it")]
    pub max_iterations: usize,
    /// Relative tolerance of the iterative linear solver (amg-cg).
    #[serde(default = "cg_tol")]
    pub cg_rel_tol: f64,
    /// Where the systems are solved: `cpu` or `cuda` (see [`ProblemFile::device`]).
    #[serde(default = "cpu")]
    pub device: String,
}

impl Default for SolverSpec {
    fn default() -> Self {
        SolverSpec {
            linear: auto(),
            rel_tol: newton_tol(),
            abs_tol: 0.0,
            max_iterations: max_it(),
            cg_rel_tol: cg_tol(),
            device: cpu(),
        }
    }
}

fn auto() -> String {
    "auto".into()
}
fn cpu() -> String {
    "cpu".into()
}
fn newton_tol() -> f64 {
    1e-10
}
fn max_it() -> usize {
    25
}
fn cg_tol() -> f64 {
    1e-10
}

/// Output settings.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSpec {
    /// Directory for results, relative to the current directory (default `results/<stem>`,
    /// the problem file's name without `.toml`: see [`ProblemFile::output_directory`]).
    pub directory: Option<String>,
}

/// The default output directory of a problem file: `results/<file stem>`, so that two problems
/// run from one directory do not write over each other's results.
pub fn default_output_directory(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "problem".into());
    // An embedded problem's pseudo-path ("<embedded name.toml>") names it inside brackets.
    let stem = stem.trim_start_matches("<embedded ").trim_end_matches('>').to_string();
    Path::new("results").join(stem)
}

/// Taylor-test settings.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TaylorSpec {
    /// First step as a fraction of each parameter's magnitude.
    #[serde(default = "h0")]
    pub h0: f64,
    #[serde(default = "steps")]
    pub steps: usize,
    #[serde(default = "min_rate")]
    pub min_rate: f64,
}

impl Default for TaylorSpec {
    fn default() -> Self {
        TaylorSpec { h0: h0(), steps: steps(), min_rate: min_rate() }
    }
}

fn h0() -> f64 {
    1e-2
}
fn steps() -> usize {
    5
}
fn min_rate() -> f64 {
    1.9
}

/// `[optimize]`: the design variables, the method (MMA for constrained problems, bounded
/// L-BFGS otherwise) and its stopping tests (see [`crate::optimize`]).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizeSpec {
    /// Maximize the objective instead of minimizing it.
    #[serde(default)]
    pub maximize: bool,
    /// Iterations of each inner L-BFGS run.
    #[serde(default = "opt_iterations")]
    pub max_iterations: usize,
    /// Outer (multiplier) iterations when there are constraints.
    #[serde(default = "opt_outer")]
    pub max_outer: usize,
    /// Stop when the projected gradient (L-BFGS) or the KKT residual (MMA) of the scaled
    /// problem is below this.
    #[serde(default = "opt_gtol")]
    pub gtol: f64,
    /// MMA: stop when the largest step of a design variable, relative to its range, is below
    /// this and the design is feasible.
    #[serde(default = "opt_xtol")]
    pub xtol: f64,
    /// `auto` (MMA with constraints, L-BFGS without), `mma`, or `lbfgs` (bounded L-BFGS;
    /// constraints by an augmented Lagrangian).
    #[serde(default = "auto_method")]
    pub method: Spanned<String>,
    /// Constraints `term ≤ upper`, each an objective-shaped entry with `upper`.
    #[serde(default, rename = "constraint")]
    pub constraints: Vec<ConstraintSpec>,
    /// The design variables: registered parameter names (default: every registered one; the
    /// others keep their values and still get gradients in `gradfem gradient`).
    #[serde(default)]
    pub design: Vec<String>,
}

impl Default for OptimizeSpec {
    fn default() -> Self {
        OptimizeSpec {
            maximize: false,
            max_iterations: opt_iterations(),
            max_outer: opt_outer(),
            gtol: opt_gtol(),
            xtol: opt_xtol(),
            method: auto_method(),
            constraints: Vec::new(),
            design: Vec::new(),
        }
    }
}

fn opt_iterations() -> usize {
    50
}
fn opt_outer() -> usize {
    10
}
fn opt_gtol() -> f64 {
    1e-6
}
fn opt_xtol() -> f64 {
    1e-4
}
fn auto_method() -> Spanned<String> {
    unlocated("auto".into())
}

/// A value given in code rather than read from a file: it has no place in any text, so
/// [`line_col`] answers (0, 0) for it and its errors name the entry without a line.
pub fn unlocated<T>(value: T) -> Spanned<T> {
    Spanned::new(usize::MAX..usize::MAX, value)
}

/// One constraint: an objective-shaped quantity and its upper bound.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ConstraintSpec {
    /// A name for the history and plot (default: the kind and group).
    pub name: Option<String>,
    /// The quantity's kind, as in `[[objective]]`.
    pub kind: String,
    pub group: Option<Spanned<String>>,
    pub point: Option<[f64; 3]>,
    pub p: Option<f64>,
    /// Sharpness of a `peak` constraint's aggregate [1/K] (default 1).
    pub rho: Option<f64>,
    pub sensors: Option<String>,
    pub terminal: Option<Spanned<String>>,
    pub drive: Option<Spanned<String>>,
    pub reference: Option<Spanned<String>>,
    pub direction: Option<[f64; 3]>,
    /// The bound: feasible when the quantity is ≤ upper.
    pub upper: f64,
}

impl ConstraintSpec {
    /// The constrained quantity as an objective entry (weight 1).
    pub fn quantity(&self) -> ObjectiveSpec {
        ObjectiveSpec {
            kind: self.kind.clone(),
            weight: 1.0,
            group: self.group.clone(),
            point: self.point,
            p: self.p,
            rho: self.rho,
            sensors: self.sensors.clone(),
            terminal: self.terminal.clone(),
            drive: self.drive.clone(),
            reference: self.reference.clone(),
            direction: self.direction,
            measured: None,
        }
    }

    /// The name shown in histories and plots.
    pub fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| match &self.group {
            Some(g) => format!("{} {}", self.kind, g.get_ref()),
            None => self.kind.clone(),
        })
    }
}

/// A whole problem file: the typed description of a problem that a TOML file and
/// [`crate::api::Model`] both produce.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProblemSpec {
    #[serde(default)]
    pub title: String,
    pub mesh: MeshSpec,
    /// The thermal field. A problem with a `[mechanical]` table may leave it out: the
    /// temperature is then prescribed (`[mechanical] temperature`, default each material's
    /// t_ref: no thermal strain).
    #[serde(default)]
    pub thermal: Option<ThermalSpec>,
    /// The electrical field (makes the problem electro-thermal).
    #[serde(default)]
    pub electrical: Option<ElectricalSpec>,
    /// Settings of the electro-thermal coupling.
    #[serde(default)]
    pub coupling: Option<CouplingSpec>,
    /// The mechanical field (thermal stress: the chain T → σ → u).
    #[serde(default)]
    pub mechanical: Option<MechanicalSpec>,
    /// Finite-strain hyperelasticity (see [`crate::hyperelastic_file`]).
    #[serde(default)]
    pub hyperelastic: Option<HyperelasticSpec>,
    /// Transient heat (see [`crate::transient_file`]).
    #[serde(default)]
    pub transient: Option<crate::transient_file::TransientFileSpec>,
    /// Morphs: scalar design parameters that move the nodes (see [`crate::shape`]).
    #[serde(default, rename = "morph")]
    pub morphs: Vec<crate::shape::MorphSpec>,
    #[serde(default, rename = "objective")]
    pub objectives: Vec<ObjectiveSpec>,
    #[serde(default)]
    pub parameters: ParametersSpec,
    #[serde(default)]
    pub solver: SolverSpec,
    #[serde(default)]
    pub output: OutputSpec,
    #[serde(default)]
    pub taylor: TaylorSpec,
    /// Starting state of the solve, read from an ANSYS result file.
    #[serde(default)]
    pub initial_state: Option<InitialStateSpec>,
    /// Settings of `gradfem optimize`.
    #[serde(default)]
    pub optimize: Option<OptimizeSpec>,
    /// Settings of `gradfem uq` (see [`crate::uq_file`]).
    #[serde(default)]
    pub uq: Option<crate::uq_file::UqSpec>,
}

/// `[initial_state] ansys = "file.rth", set = 1`: the `TEMP` field of that result set (path
/// relative to the problem file) is the starting guess of the thermal Newton solve, copied by
/// ANSYS node number when the mesh has the same nodes, interpolated otherwise (see
/// [`crate::ansys_import`]). In a `[hyperelastic]` problem the `UX`, `UY`, `UZ` field of a
/// structural result (`.rst`) is where the first load increment's Newton iterations start.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InitialStateSpec {
    /// ANSYS result file (`.rth`, `.rst`).
    pub ansys: String,
    /// 1-based result set.
    #[serde(default = "first_set")]
    pub set: usize,
    /// The unit of the file's temperatures (`K`, `C`, `F`) when its `/UNITS` does not say.
    pub temperature_unit: Option<Spanned<String>>,
}

fn first_set() -> usize {
    1
}

/// The diagonal of the bounding box of `coords` (0 for none).
fn bounding_diagonal(coords: &[[f64; 3]]) -> f64 {
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for c in coords {
        for i in 0..3 {
            lo[i] = lo[i].min(c[i]);
            hi[i] = hi[i].max(c[i]);
        }
    }
    if coords.is_empty() {
        return 0.0;
    }
    (0..3).map(|i| (hi[i] - lo[i]).powi(2)).sum::<f64>().sqrt()
}

/// A parsed problem file with its source text, for error locations.
#[derive(Clone, Debug)]
pub struct ProblemFile {
    /// Where the file was read from (relative paths in it resolve against its directory).
    pub path: PathBuf,
    /// Its text, for line numbers.
    pub source: String,
    /// The parsed tables.
    pub spec: ProblemSpec,
    /// Build a generated mesh even when its estimated memory exceeds the machine's available
    /// memory (`--allow-large`); false by default.
    pub allow_large: bool,
    /// Refuse an ANSYS result file shorter than the length its header declares instead of
    /// reading its whole records with a warning (`--strict`); false by default.
    pub strict: bool,
}

/// 1-based line and column of a byte offset; (0, 0) for an offset past the text (a value
/// given in code, see [`unlocated`]).
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    if offset > source.len() {
        return (0, 0);
    }
    let before = &source[..offset.min(source.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rfind('\n').map_or(before.len(), |p| before.len() - p - 1) + 1;
    (line, col)
}

impl ProblemFile {
    /// Where the results go: `[output] directory`, else [`default_output_directory`].
    pub fn output_directory(&self) -> PathBuf {
        match &self.spec.output.directory {
            Some(d) => PathBuf::from(d),
            None => default_output_directory(&self.path),
        }
    }

    /// Read and parse a problem file.
    pub fn read(path: &Path) -> Result<Self, ProblemError> {
        let source = std::fs::read_to_string(path)
            .map_err(|source| ProblemError::Io { file: path.to_path_buf(), source })?;
        Self::parse(path, source)
    }

    /// Parse problem text; `path` names it in errors and anchors relative paths.
    pub fn parse(path: &Path, source: String) -> Result<Self, ProblemError> {
        let spec: ProblemSpec = toml::from_str(&source).map_err(|e| {
            let (line, column) = e.span().map_or((0, 0), |s| line_col(&source, s.start));
            ProblemError::Syntax {
                file: path.to_path_buf(),
                line,
                column,
                message: e.message().to_string(),
            }
        })?;
        Ok(ProblemFile {
            path: path.to_path_buf(),
            source,
            spec,
            allow_large: false,
            strict: false,
        })
    }

    /// `[solver] device`, checked: `cpu` or `cuda`.
    pub fn device(&self) -> Result<gradfem_gpu::Device, ProblemError> {
        self.spec.solver.device.parse().map_err(|_| {
            self.invalid(format!(
                "[solver] device = \"{}\": expected \"cpu\" or \"cuda\"",
                self.spec.solver.device
            ))
        })
    }

    /// The line of a spanned value.
    pub fn line_of<T>(&self, v: &Spanned<T>) -> usize {
        line_col(&self.source, v.span().start).0
    }

    /// A path relative to the problem file's directory.
    pub fn resolve_path(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.path.parent().unwrap_or(Path::new(".")).join(p)
        }
    }

    /// The `temperature_unit` key of an ANSYS temperature import, checked (None when absent).
    pub fn temperature_unit(
        &self,
        key: &Option<Spanned<String>>,
        table: &str,
    ) -> Result<Option<crate::ansys_import::TemperatureUnit>, ProblemError> {
        let Some(k) = key else { return Ok(None) };
        crate::ansys_import::TemperatureUnit::parse(k.get_ref()).map(Some).ok_or_else(|| {
            self.invalid(format!(
                "line {}: {table} temperature_unit = '{}': expected K, C or F",
                self.line_of(k),
                k.get_ref()
            ))
        })
    }

    fn invalid(&self, message: impl Into<String>) -> ProblemError {
        ProblemError::invalid_in(&self.path, &self.source, message)
    }

    /// Build (read or generate) the mesh.
    pub fn build_mesh(&self) -> Result<Mesh, ProblemError> {
        let mut mesh = self.read_or_generate_mesh()?;
        if self.spec.mesh.straighten_inverted {
            let fixed = gradfem_mesh::quality::straighten_inverted(&mut mesh);
            if !fixed.is_empty() {
                let tags: Vec<String> = fixed.iter().take(10).map(|(_, t)| t.to_string()).collect();
                tracing::warn!(
                    "{}: straightened {} folded second-order cell(s) (tags {}{})",
                    self.path.display(),
                    fixed.len(),
                    tags.join(", "),
                    if fixed.len() > 10 { ", …" } else { "" }
                );
            }
        }
        // A folded or flat cell of a mesh file is the mesh's fault, not a field's: said here,
        // once, before any field is built (a generated box cannot have one).
        if self.spec.mesh.generated.is_none() {
            let report = mesh.check();
            let bad: Vec<_> = report.inverted().chain(report.degenerate()).collect();
            if let Some(first) = bad.first() {
                let hint = if first.cell_type.order() > 1 {
                    "; `[mesh] straighten_inverted = true` moves the mid-side nodes of folded \
                     second-order cells to their edge midpoints"
                } else {
                    ""
                };
                return Err(ProblemError::Mesh {
                    file: self.path.clone(),
                    message: format!(
                        "{} cell(s) inverted or degenerate; the first: cell {} ({}) with det J = \
                         {:.3e} near ({:.6e}, {:.6e}, {:.6e}){hint}",
                        bad.len(),
                        first.tag,
                        first.cell_type.name(),
                        first.value,
                        first.centroid[0],
                        first.centroid[1],
                        first.centroid[2]
                    ),
                });
            }
        }
        Ok(mesh)
    }

    fn read_or_generate_mesh(&self) -> Result<Mesh, ProblemError> {
        let mut mesh = self.base_mesh()?;
        for g in &self.spec.mesh.plane_group {
            let axis = match g.axis.as_str() {
                "x" => 0,
                "y" => 1,
                "z" => 2,
                other => {
                    return Err(self.invalid(format!(
                        "{}[mesh] plane_group '{}': `axis` = '{other}': expected x, y or z",
                        self.at_key("plane_group"),
                        g.name
                    )));
                }
            };
            gradfem_mesh::select::add_plane_group(&mut mesh, &g.name, axis, g.value, 1e-9)
                .map_err(|e| self.invalid(format!("mesh.plane_group '{}': {e}", g.name)))?;
        }
        Ok(mesh)
    }

    fn base_mesh(&self) -> Result<Mesh, ProblemError> {
        let m = &self.spec.mesh;
        let sources =
            [m.file.is_some(), m.generated.is_some(), m.actuator.is_some(), m.given.is_some()];
        if sources.iter().filter(|&&b| b).count() != 1 {
            return Err(self.invalid(if m.given.is_some() {
                "a mesh given in code cannot also have `file`, `box` or `actuator`".to_string()
            } else {
                format!(
                    "{}[mesh] needs exactly one of `file`, `box` or `actuator`",
                    self.at_table("[mesh]", 0, None)
                )
            }));
        }
        if let Some(mesh) = &m.given {
            if m.unit.is_some() || m.scale.is_some() {
                return Err(self.invalid(
                    "[mesh] `unit` and `scale` convert a mesh file's coordinates; a mesh given in code is in metres",
                ));
            }
            mesh.validate().map_err(|e| ProblemError::Mesh {
                file: self.path.clone(),
                message: e.to_string(),
            })?;
            return Ok(mesh.as_ref().clone());
        }
        if let Some(a) = &m.actuator {
            return self.actuator_mesh(a);
        }
        if m.file.is_none() && (m.unit.is_some() || m.scale.is_some()) {
            let key = if m.unit.is_some() { "unit" } else { "scale" };
            return Err(self.invalid(format!(
                "{}[mesh] `{key}` converts a mesh file's coordinates; `box` and `actuator` dimensions are in metres",
                self.at_key(key)
            )));
        }
        match (&self.spec.mesh.file, &self.spec.mesh.generated) {
            (Some(file), None) => {
                let p = self.resolve_path(file);
                let mesh_err =
                    |e: String| ProblemError::Mesh { file: self.path.clone(), message: e };
                let (mut mesh, file_unit) = if crate::ansys_import::is_ansys_path(&p) {
                    let f = crate::ansys_import::AnsysFile::read(&p, self.strict)
                        .map_err(|e| mesh_err(e.to_string()))?;
                    let unit = match &f {
                        crate::ansys_import::AnsysFile::Result(r) => {
                            crate::ansys_import::metres_per_mapdl_length(r.header.units)
                        }
                        crate::ansys_import::AnsysFile::Archive(_) => None,
                    };
                    (f.into_mesh(), unit)
                } else {
                    (gradfem_io::gmsh::read_msh(&p).map_err(|e| mesh_err(e.to_string()))?, None)
                };
                let scale = self.mesh_scale(file_unit)?;
                if scale != 1.0 {
                    for x in mesh.coords.iter_mut().flatten() {
                        *x *= scale;
                    }
                } else if m.unit.is_none() && m.scale.is_none() && file_unit.is_none() {
                    let diagonal = bounding_diagonal(&mesh.coords);
                    if diagonal >= 10.0 {
                        tracing::warn!(
                            "{}: the mesh {} spans {diagonal:.3e} m (coordinates taken as metres); if they are in mm set [mesh] unit = \"mm\"",
                            self.path.display(),
                            p.display()
                        );
                    }
                }
                Ok(mesh)
            }
            (None, Some(b)) => {
                let ct = CellType::from_name(&b.cell)
                    .filter(|c| {
                        matches!(
                            c,
                            CellType::Tet4
                                | CellType::Tet10
                                | CellType::Hex8
                                | CellType::Hex20
                                | CellType::Hex27
                        )
                    })
                    .ok_or_else(|| {
                        self.invalid(format!(
                            "{}[mesh] box `cell` = '{}': expected tet4, tet10, hex8, hex20 or hex27",
                            self.at_key("box"),
                            b.cell
                        ))
                    })?;
                if b.divisions.contains(&0) {
                    return Err(self.invalid(format!(
                        "{}[mesh] box `divisions` = {:?}: each must be at least 1",
                        self.at_key("box"),
                        b.divisions
                    )));
                }
                if b.lengths.iter().any(|&l| !(l.is_finite() && l > 0.0)) {
                    return Err(self.invalid(format!(
                        "{}[mesh] box `lengths` = {:?}: each must be a positive length (m)",
                        self.at_key("box"),
                        b.lengths
                    )));
                }
                let spec = gradfem_mesh::generate::BoxSpec {
                    origin: b.origin,
                    lengths: b.lengths,
                    divisions: b.divisions,
                    cell_type: ct,
                };
                self.check_box_size(&spec)?;
                Ok(gradfem_mesh::generate::box_mesh(&spec))
            }
            _ => Err(self.invalid(format!(
                "{}[mesh] needs exactly one of `file`, `box` or `actuator`",
                self.at_table("[mesh]", 0, None)
            ))),
        }
    }

    /// Refuse a generated box whose sizes overflow, or whose estimated memory
    /// ([`box_memory_estimate`]) exceeds the memory the machine has available, unless
    /// [`allow_large`](Self::allow_large) is set; before anything is allocated.
    fn check_box_size(&self, spec: &gradfem_mesh::generate::BoxSpec) -> Result<(), ProblemError> {
        let line = self.key_line("box").map_or(String::new(), |l| format!("line {l}: "));
        let Some((nodes, cells)) = spec.size_bound() else {
            return Err(self.invalid(format!(
                "{line}[mesh] box divisions {:?} give more nodes or cells than this machine can \
                 count (the product overflows a {}-bit integer)",
                spec.divisions,
                usize::BITS
            )));
        };
        if self.allow_large {
            return Ok(());
        }
        let dofs_per_node = self.unknowns_per_node();
        let needed = box_memory_estimate(nodes, cells, spec.cell_type, dofs_per_node);
        if let Some(available) = available_memory_bytes()
            && needed > available as f64
        {
            return Err(self.invalid(format!(
                "{line}[mesh] box divisions {:?} make about {nodes} nodes and {cells} cells; the \
                 problem needs at least {:.1} GB ({dofs_per_node} unknowns per node), more than \
                 the {:.1} GB this machine has available. Use fewer divisions, or run with \
                 --allow-large to try anyway",
                spec.divisions,
                needed / 1e9,
                available as f64 / 1e9
            )));
        }
        Ok(())
    }

    /// The unknowns per node of the fields the file has: 1 for `[thermal]`, 1 for
    /// `[electrical]`, 3 for `[mechanical]` or `[hyperelastic]` (at least 1).
    fn unknowns_per_node(&self) -> usize {
        let s = &self.spec;
        let n = usize::from(s.thermal.is_some())
            + usize::from(s.electrical.is_some())
            + 3 * usize::from(s.mechanical.is_some() || s.hyperelastic.is_some());
        n.max(1)
    }

    /// The 1-based line of the first top-level or table key `key` (`key =` at a line's start).
    /// `line N: ` of the first line that sets `key`, or nothing: the prefix that
    /// [`ProblemError::invalid_in`] turns into `file:N:col:`.
    pub fn at_key(&self, key: &str) -> String {
        self.key_line(key).map_or(String::new(), |l| format!("line {l}: "))
    }

    /// `line N: ` of the `k`-th table `header` (`[[objective]]`, `[transient]`), or of its
    /// `key` where that table sets it; nothing when there is no such table.
    pub fn at_table(&self, header: &str, k: usize, key: Option<&str>) -> String {
        locate(&self.source, header, k, key).map_or(String::new(), |(l, _)| format!("line {l}: "))
    }

    fn key_line(&self, key: &str) -> Option<usize> {
        self.source
            .lines()
            .position(|l| {
                l.trim_start().strip_prefix(key).is_some_and(|r| r.trim_start().starts_with('='))
            })
            .map(|i| i + 1)
    }

    /// Metres per mesh-file unit: `[mesh] unit` or `scale` (not both), else the file's own
    /// unit, else 1.
    fn mesh_scale(&self, file_unit: Option<(f64, &'static str)>) -> Result<f64, ProblemError> {
        let m = &self.spec.mesh;
        let given = match (&m.unit, &m.scale) {
            (Some(_), Some(_)) => {
                return Err(self.invalid("[mesh] give `unit` or `scale`, not both"));
            }
            (Some(u), None) => Some(metres_per(u.get_ref()).ok_or_else(|| {
                self.invalid(format!(
                    "line {}: [mesh] unit = '{}': expected m, dm, cm, mm, um, nm, in or ft",
                    self.line_of(u),
                    u.get_ref()
                ))
            })?),
            (None, Some(s)) => {
                let v = *s.get_ref();
                if !(v.is_finite() && v > 0.0) {
                    return Err(self.invalid(format!(
                        "line {}: [mesh] scale = {v}: expected a positive factor to metres",
                        self.line_of(s)
                    )));
                }
                Some(v)
            }
            (None, None) => None,
        };
        match (given, file_unit) {
            (Some(g), Some((f, name))) if (g - f).abs() > 1e-12 * f => {
                tracing::warn!(
                    "{}: the mesh file's /UNITS says {name}, [mesh] sets {g} m per unit; using {g}",
                    self.path.display()
                );
                Ok(g)
            }
            (Some(g), _) => Ok(g),
            (None, Some((f, _))) => Ok(f),
            (None, None) => Ok(1.0),
        }
    }

    fn actuator_mesh(&self, a: &ActuatorMeshSpec) -> Result<Mesh, ProblemError> {
        let mut spec = gradfem_mesh::actuator::ActuatorSpec::default();
        if let Some(c) = &a.cell {
            spec.cell_type = CellType::from_name(c)
                .filter(|c| matches!(c, CellType::Hex8 | CellType::Hex20 | CellType::Hex27))
                .ok_or_else(|| {
                    self.invalid(format!(
                        "mesh.actuator.cell = '{c}': expected hex8, hex20 or hex27"
                    ))
                })?;
        }
        if let Some(s) = a.max_cell_size {
            spec.max_cell_size = s;
        }
        if let Some(v) = a.hot_arm_width {
            spec.hot_arm_width = v;
        }
        if let Some(v) = a.cold_arm_width {
            spec.cold_arm_width = v;
        }
        if let Some(v) = a.gap {
            spec.gap = v;
        }
        if let Some(v) = a.length {
            spec.length = v;
        }
        if let Some(r) = a.refine {
            if r == 0 {
                return Err(self.invalid(format!(
                    "{}[mesh] actuator `refine` = 0: must be at least 1",
                    self.at_key("actuator")
                )));
            }
            spec = spec.refined(r);
        }
        gradfem_mesh::actuator::actuator_mesh(&spec)
            .map_err(|e| ProblemError::Mesh { file: self.path.clone(), message: e.to_string() })
    }

    /// Check that a group named in the file exists in the mesh.
    pub fn check_group(
        &self,
        mesh: &Mesh,
        name: &Spanned<String>,
        context: &str,
    ) -> Result<(), ProblemError> {
        if name.get_ref() == "*" || mesh.groups.iter().any(|g| &g.name == name.get_ref()) {
            return Ok(());
        }
        let (line, column) = line_col(&self.source, name.span().start);
        Err(ProblemError::UnknownGroup {
            file: self.path.clone(),
            line,
            column,
            name: name.get_ref().clone(),
            context: context.to_string(),
            known: mesh.group_names(),
        })
    }

    /// A key an entry must give: `value`, else an error at the entry's group naming `key`.
    pub fn required<'a, T>(
        &self,
        value: Option<&'a T>,
        group: &Spanned<String>,
        table: &str,
        key: &str,
    ) -> Result<&'a T, ProblemError> {
        value.ok_or_else(|| {
            self.invalid(format!(
                "line {}: {table} on '{}' needs `{key}`",
                self.line_of(group),
                group.get_ref()
            ))
        })
    }

    /// The thermal boundary condition kind of one `[[thermal.bc]]` entry.
    pub fn bc_kind(&self, bc: &ThermalBcSpec) -> Result<BcKind, ProblemError> {
        let line = self.line_of(&bc.group);
        let need = |v: Option<f64>, key: &str| {
            v.ok_or_else(|| {
                self.invalid(format!("line {line}: a '{}' condition needs `{key}`", bc.kind))
            })
        };
        // Admissible values: finite; temperatures in kelvin above 0 K; h ≥ 0.
        let finite = |v: f64, key: &str| {
            if v.is_finite() {
                Ok(v)
            } else {
                Err(self.invalid(format!("line {line}: `{key}` = {v} must be a finite number")))
            }
        };
        let kelvin = |v: f64, key: &str| {
            let v = finite(v, key)?;
            if v > 0.0 {
                Ok(v)
            } else {
                Err(self.invalid(format!(
                    "line {line}: `{key}` = {v}: temperatures are absolute, in kelvin, and must \
                     be above 0 K (for °C add 273.15)"
                )))
            }
        };
        let kind = match bc.kind.as_str() {
            "temperature" => {
                BcKind::Temperature { value: kelvin(need(bc.value, "value")?, "value")? }
            }
            "heat_flux" => BcKind::HeatFlux { q_in: finite(need(bc.q_in, "q_in")?, "q_in")? },
            "convection" => {
                let h = finite(need(bc.h, "h")?, "h")?;
                if h < 0.0 {
                    return Err(self.invalid(format!(
                        "line {line}: `h` = {h}: a heat-transfer coefficient cannot be negative"
                    )));
                }
                BcKind::Convection { h, t_inf: kelvin(need(bc.t_inf, "t_inf")?, "t_inf")? }
            }
            other => {
                return Err(self.invalid(format!(
                    "line {line}: unknown boundary condition kind '{other}'; expected temperature, heat_flux or convection"
                )));
            }
        };
        Ok(kind)
    }
}

impl ProblemFile {
    /// The mechanical boundary condition kind of one `[[mechanical.bc]]` entry.
    pub fn mechanical_bc_kind(
        &self,
        bc: &MechanicalBcSpec,
    ) -> Result<gradfem_mechanical::BcKind, ProblemError> {
        use gradfem_mechanical::BcKind as K;
        let line = self.line_of(&bc.kind);
        let kind = bc.kind.get_ref().as_str();
        let err = |m: String| self.invalid(format!("line {line}: {m}"));
        let components = || -> Result<Option<Vec<usize>>, ProblemError> {
            let Some(list) = &bc.components else { return Ok(None) };
            let mut out = Vec::new();
            for c in list {
                out.push(match c.as_str() {
                    "x" => 0,
                    "y" => 1,
                    "z" => 2,
                    other => return Err(err(format!("component '{other}': expected x, y or z"))),
                });
            }
            if out.is_empty() {
                return Err(err("`components` is empty".into()));
            }
            Ok(Some(out))
        };
        let unused = |keys: &[(&str, bool)]| -> Result<(), ProblemError> {
            match keys.iter().find(|(_, given)| *given) {
                Some((k, _)) => Err(err(format!("a '{kind}' condition takes no `{k}`"))),
                None => Ok(()),
            }
        };
        Ok(match kind {
            "fixed" => {
                unused(&[
                    ("components", bc.components.is_some()),
                    ("value", bc.value.is_some()),
                    ("traction", bc.traction.is_some()),
                    ("pressure", bc.pressure.is_some()),
                ])?;
                K::Fixed
            }
            "roller" => {
                unused(&[
                    ("value", bc.value.is_some()),
                    ("traction", bc.traction.is_some()),
                    ("pressure", bc.pressure.is_some()),
                ])?;
                let components = components()?.ok_or_else(|| {
                    err("a 'roller' condition needs `components` (e.g. [\"z\"])".into())
                })?;
                K::Roller { components }
            }
            "displacement" => {
                unused(&[
                    ("traction", bc.traction.is_some()),
                    ("pressure", bc.pressure.is_some()),
                ])?;
                let v = bc.value.ok_or_else(|| {
                    err("a 'displacement' condition needs `value = [ux, uy, uz]`".into())
                })?;
                let comps = components()?.unwrap_or(vec![0, 1, 2]);
                let mut value = [None; 3];
                for c in comps {
                    value[c] = Some(v[c]);
                }
                K::Displacement { value }
            }
            "traction" => {
                unused(&[
                    ("components", bc.components.is_some()),
                    ("value", bc.value.is_some()),
                    ("pressure", bc.pressure.is_some()),
                ])?;
                K::Traction {
                    traction: bc.traction.ok_or_else(|| {
                        err("a 'traction' condition needs `traction = [tx, ty, tz]`".into())
                    })?,
                }
            }
            "pressure" => {
                unused(&[
                    ("components", bc.components.is_some()),
                    ("value", bc.value.is_some()),
                    ("traction", bc.traction.is_some()),
                ])?;
                K::Pressure {
                    pressure: bc
                        .pressure
                        .ok_or_else(|| err("a 'pressure' condition needs `pressure`".into()))?,
                }
            }
            other => {
                return Err(err(format!(
                    "unknown mechanical condition kind '{other}'; expected fixed, roller, displacement, traction or pressure"
                )));
            }
        })
    }
}

/// Line and column (1-based) in a TOML text of the `k`-th (0-based) table `header` (`[model]`,
/// `[[experiment]]`, `[[objective]]`), or of its `key` where the table sets it; `None` when
/// there is no such table.
pub fn locate(source: &str, header: &str, k: usize, key: Option<&str>) -> Option<(usize, usize)> {
    let mut seen = 0;
    let mut found: Option<(usize, usize)> = None;
    for (i, raw) in source.lines().enumerate() {
        let text = raw.split('#').next().unwrap_or("").trim();
        let indent = raw.len() - raw.trim_start().len() + 1;
        if text.starts_with('[') {
            if found.is_some() {
                break; // the next table: the key is not set
            }
            if text == header {
                if seen == k {
                    found = Some((i + 1, indent));
                    if key.is_none() {
                        break;
                    }
                }
                seen += 1;
            }
            continue;
        }
        if let (Some(_), Some(key)) = (found, key)
            && let Some(rest) = text.strip_prefix(key)
            && rest.trim_start().starts_with('=')
        {
            return Some((i + 1, indent));
        }
    }
    found
}

/// Read a sensor CSV: `x, y, z, value` per line; a header line and `#` comments are skipped.
pub fn read_sensors(path: &Path) -> Result<Vec<[f64; 4]>, ProblemError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ProblemError::Io { file: path.to_path_buf(), source })?;
    let mut out = Vec::new();
    let mut seen_data_line = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let parsed: Result<Vec<f64>, _> = fields.iter().map(|f| f.parse::<f64>()).collect();
        let first = !seen_data_line;
        seen_data_line = true;
        match parsed {
            Ok(v) if v.len() == 4 && v.iter().all(|x| x.is_finite()) => {
                out.push([v[0], v[1], v[2], v[3]])
            }
            Err(_) if first => continue, // a header line
            _ => {
                // Non-finite numbers (`nan`, `inf`) are refused, as in every CSV gradfem reads.
                return Err(ProblemError::Syntax {
                    file: path.to_path_buf(),
                    line: i + 1,
                    column: 1,
                    message: format!("expected four finite numbers x, y, z, value; got '{line}'"),
                });
            }
        }
    }
    if out.is_empty() {
        return Err(ProblemError::invalid(path, "no sensor rows"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_values_are_located_like_syntax_errors() {
        let e = ProblemError::invalid(Path::new("p.toml"), "line 12: `k` = -1: must be positive");
        assert!(matches!(e, ProblemError::InvalidAt { line: 12, column: 1, .. }), "{e:?}");
        assert_eq!(e.to_string(), "p.toml:12:1: `k` = -1: must be positive");
        // With the text, the column is the key's.
        let source = "[mesh]\nbox = { lengths = [1, 1, 1], divisions = [0, 1, 1] }\n  k = 3\n";
        let e = ProblemError::invalid_in(Path::new("p.toml"), source, "line 2: `divisions` = 0");
        assert_eq!(e.to_string(), "p.toml:2:30: `divisions` = 0");
        let e = ProblemError::invalid_in(Path::new("p.toml"), source, "line 3: `k` = 3");
        assert_eq!(e.to_string(), "p.toml:3:3: `k` = 3");
        let e = ProblemError::invalid_in(Path::new("p.toml"), source, "line 3: no key named");
        assert_eq!(e.to_string(), "p.toml:3:3: no key named");
        for plain in ["no sensor rows", "line x: y", "lines 3: w"] {
            let e = ProblemError::invalid(Path::new("p.toml"), plain);
            assert_eq!(e.to_string(), format!("p.toml: {plain}"));
        }
        // Line 0: a value given in code, which has no line; the message names the entry.
        let e = ProblemError::invalid(Path::new("m (model)"), "line 0: `k` = -1 on 'domain'");
        assert_eq!(e.to_string(), "m (model): `k` = -1 on 'domain'");
        assert_eq!(line_col("ab\ncd", unlocated(()).span().start), (0, 0));
    }

    #[test]
    fn unknown_key_names_its_line() {
        let text = "[mesh]\nbox = { lengths = [1,1,1], divisions = [2,2,2], cell = \"tet4\" }\n\n[thermal]\nmaterial = [{ group = \"domain\", k = 1.0, colour = 3 }]\n";
        let err = ProblemFile::parse(Path::new("p.toml"), text.into()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("p.toml:5:"), "{msg}");
        assert!(msg.contains("colour"), "{msg}");
    }

    #[test]
    fn line_and_column_of_offsets() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }
}
