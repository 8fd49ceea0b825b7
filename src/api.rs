//! The library API: build a problem in code or read a problem file, solve it, read its fields
//! and quantities, change any registered parameter by name and solve again, and differentiate:
//! the gradient of the objective, the vector-Jacobian product of any output field or quantity,
//! and the Taylor test.
//!
//! A [`Model`] speaks the vocabulary of problem files (`docs/problem-file.md`): a mesh (a gmsh
//! or ANSYS file, a generated box, the built-in actuator, or a [`Mesh`] made from arrays),
//! materials per volume group, conditions per surface group, objectives and the parameters to
//! differentiate by. It fills a typed [`ProblemSpec`], the description a problem file is read
//! into, so [`Model::build`] and a problem file share one set-up and one set of checks; a
//! problem file is the same description written as TOML ([`Model::to_toml`] writes it). An
//! error of a value given in code names its table, group and key; one of a file names its
//! line.
//!
//! ```
//! use gradfem::api::{Model, Objective};
//!
//! // A heated plate held at 300 K on one face and cooled by air on the top.
//! let mut sim = Model::new("plate")
//!     .mesh_box([0.1, 0.05, 0.01], [10, 5, 2], "tet4")
//!     .conductivity("domain", 120.0)
//!     .heat_source("domain", 5.0e6)
//!     .fixed_temperature("xmin", 300.0)
//!     .convection("zmax", 25.0, 293.0)
//!     .objective(Objective::AverageTemperature { group: "domain".into() }, 1.0)
//!     .register("thermal.k.domain")
//!     .build()?;
//! let q = sim.quantities()?;
//! assert!(q["max_temperature"] > 300.0);
//! let g = sim.gradient()?;
//! assert!(g.scalar("thermal.k.domain").unwrap() < 0.0); // better conduction, cooler plate
//!
//! // Change a parameter by name and solve again (patterns and orderings are kept).
//! sim.set_parameter("thermal.k.domain", 240.0)?;
//! assert!(sim.quantities()?["mean_temperature"] < q["mean_temperature"]);
//! # Ok::<(), gradfem::api::ApiError>(())
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gradfem_mesh::Mesh;
use gradfem_solvers::params::ParamVector;
use gradfem_solvers::taylor::{TaylorParams, TaylorResult};
use gradfem_thermal::ConductivityLaw;
use toml::{Table, Value};

use crate::app::{self, AppError, ObjectiveSet, Problem};
use crate::element_values::{ElementFile, ElementValues};
use crate::problem::{
    ActuatorMeshSpec, BoxMeshSpec, ConductorFileSpec, ElectricalSpec, MechanicalBcSpec,
    MechanicalMaterialSpec, MechanicalSpec, MeshSpec, ObjectiveSpec, PlaneGroupSpec, ProblemError,
    ProblemFile, ProblemSpec, TerminalFileSpec, ThermalBcSpec, ThermalMaterialSpec, ThermalSpec,
    unlocated,
};
use crate::run::RunError;
use crate::shape::MorphSpec;
use gradfem_coupling::fields::electrical::TerminalTerm;

/// An error of the API: a problem that cannot be built (located in its file, or naming the
/// entry of a model given in code), a solve or gradient that failed, or a request the problem
/// cannot meet (an unknown field, quantity or parameter), which says what it offers.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Build(Box<AppError>),
    #[error("{name}: {source}")]
    Run { name: String, source: Box<RunError> },
    #[error("{name}: {message}")]
    Request { name: String, message: String },
}

impl From<AppError> for ApiError {
    fn from(e: AppError) -> Self {
        ApiError::Build(Box::new(e))
    }
}

impl From<ProblemError> for ApiError {
    fn from(e: ProblemError) -> Self {
        AppError::Problem(e).into()
    }
}

/// An objective term of a [`Model`] (the `[[objective]]` kinds of problem files).
#[derive(Clone, Debug, PartialEq)]
pub enum Objective {
    /// Temperature at a point \[K\].
    PointTemperature { point: [f64; 3] },
    /// Mean temperature over a volume group (`"*"`: the whole model) \[K\].
    AverageTemperature { group: String },
    /// Smooth maximum (p-norm mean) of the temperature over a volume group \[K\].
    MaxTemperature { group: String, p: f64 },
    /// Kreisselmeier–Steinhauser bound of the peak nodal temperature, sharpness `rho` [1/K].
    PeakTemperature { group: String, rho: f64 },
    /// ∫ T² over a volume group [K² m³].
    IntegralSquareTemperature { group: String },
    /// ½ Σ (T(xₛ) − dₛ)² over the sensors of a CSV file (x, y, z, value) \[K²\].
    SensorMisfit { sensors: PathBuf },
    /// Current into the device through a terminal \[A\].
    Current { terminal: String },
    /// Voltage of a terminal \[V\].
    Voltage { terminal: String },
    /// (V_drive − V_reference) / I_drive \[Ω\].
    Resistance { drive: String, reference: String },
    /// d · u at a point \[m\].
    PointDisplacement { point: [f64; 3], direction: [f64; 3] },
    /// d · ū, the mean over a volume or surface group \[m\].
    AverageDisplacement { group: String, direction: [f64; 3] },
    /// fᵀu, the work of the loads \[J\].
    Compliance,
    /// (∫ σ_vm^p / ∫ 1)^{1/p} over a volume group \[Pa\].
    VonMisesPNorm { group: String, p: f64 },
}

impl Objective {
    /// The `[[objective]]` entry of this term with `weight`.
    pub fn spec(&self, weight: f64) -> ObjectiveSpec {
        let mut o = ObjectiveSpec {
            kind: String::new(),
            weight,
            group: None,
            point: None,
            p: None,
            rho: None,
            sensors: None,
            terminal: None,
            drive: None,
            reference: None,
            direction: None,
            measured: None,
        };
        let named = |s: &String| Some(unlocated(s.clone()));
        o.kind = match self {
            Objective::PointTemperature { point } => {
                o.point = Some(*point);
                "point"
            }
            Objective::AverageTemperature { group } => {
                o.group = named(group);
                "average"
            }
            Objective::MaxTemperature { group, p } => {
                (o.group, o.p) = (named(group), Some(*p));
                "max"
            }
            Objective::PeakTemperature { group, rho } => {
                (o.group, o.rho) = (named(group), Some(*rho));
                "peak"
            }
            Objective::IntegralSquareTemperature { group } => {
                o.group = named(group);
                "integral_square"
            }
            Objective::SensorMisfit { sensors } => {
                o.sensors = Some(sensors.to_string_lossy().into_owned());
                "misfit"
            }
            Objective::Current { terminal } => {
                o.terminal = named(terminal);
                "current"
            }
            Objective::Voltage { terminal } => {
                o.terminal = named(terminal);
                "voltage"
            }
            Objective::Resistance { drive, reference } => {
                (o.drive, o.reference) = (named(drive), named(reference));
                "resistance"
            }
            Objective::PointDisplacement { point, direction } => {
                (o.point, o.direction) = (Some(*point), Some(*direction));
                "displacement"
            }
            Objective::AverageDisplacement { group, direction } => {
                (o.group, o.direction) = (named(group), Some(*direction));
                "average_displacement"
            }
            Objective::Compliance => "compliance",
            Objective::VonMisesPNorm { group, p } => {
                (o.group, o.p) = (named(group), Some(*p));
                "von_mises"
            }
        }
        .into();
        o
    }
}

/// A problem described in code: a typed [`ProblemSpec`], the same description a problem file
/// is read into, so a model and a file go through one set-up and one set of checks
/// ([`Model::build`]). Each method fills one entry; a material or a condition on a group that
/// already has one changes it. [`Model::to_toml`] writes the problem file the model stands
/// for, and [`Model::with_spec`] reaches every table a problem file has.
///
/// An error of a value given in code names the table, the group and the key (there is no line
/// to name); a model read from tables ([`Model::from_table`]) keeps the lines of their text.
#[derive(Clone, Debug)]
pub struct Model {
    name: String,
    base_dir: PathBuf,
    spec: ProblemSpec,
    /// The text the spec was read from ([`Model::from_table`]); empty for a model built in code.
    source: String,
}

impl Model {
    /// An empty model named `name` (its errors and its default output directory use it);
    /// relative paths resolve against the current directory.
    pub fn new(name: &str) -> Self {
        let spec = ProblemSpec { title: name.into(), ..ProblemSpec::default() };
        Model { name: name.into(), base_dir: PathBuf::new(), spec, source: String::new() }
    }

    /// A model from the tables of a problem file (what a TOML file holds, as a table: the
    /// bindings of other languages build one from their own dictionaries). The tables are
    /// read as a problem file is: an unknown key or a wrong type is an error here, located in
    /// the text the tables make ([`toml::to_string`] of `table`).
    pub fn from_table(name: &str, mut table: Table) -> Result<Self, ApiError> {
        table.entry("title").or_insert_with(|| Value::String(name.into()));
        let path = PathBuf::from(format!("{name} (model)"));
        let source = toml::to_string(&table).map_err(|e| {
            AppError::Problem(ProblemError::Invalid {
                file: path.clone(),
                message: format!("the tables do not make a problem file: {e}"),
            })
        })?;
        let file = ProblemFile::parse(&path, source)?;
        Ok(Model {
            name: name.into(),
            base_dir: PathBuf::new(),
            spec: file.spec,
            source: file.source,
        })
    }

    /// Resolve relative paths (mesh files, sensors, value files) against `dir`.
    pub fn base_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.base_dir = dir.into();
        self
    }

    /// The typed description built so far.
    pub fn spec(&self) -> &ProblemSpec {
        &self.spec
    }

    /// Change any table of the description directly, for the keys without a method of their
    /// own (`[transient]`, `[optimize]`, `[uq]`, `[hyperelastic]`, `[initial_state]`, solver
    /// tolerances …). Names of groups and parameters given here take
    /// [`unlocated`] values.
    ///
    /// ```
    /// use gradfem::api::{Model, Objective};
    /// use gradfem::problem::unlocated;
    ///
    /// let model = Model::new("slab")
    ///     .mesh_box([0.01, 0.01, 0.001], [4, 4, 1], "hex8")
    ///     .conductivity("domain", 20.0)
    ///     .heat_source("domain", 1e7)
    ///     .fixed_temperature("zmin", 300.0)
    ///     .objective(Objective::AverageTemperature { group: "domain".into() }, 1.0)
    ///     .with_spec(|spec| {
    ///         spec.solver.rel_tol = 1e-12;
    ///         spec.parameters.register.push(unlocated("thermal.q.domain".into()));
    ///     });
    /// assert!(model.to_toml()?.contains("\"thermal.q.domain\""));
    /// let g = model.build()?.gradient()?;
    /// assert!(g.scalar("thermal.q.domain").unwrap() > 0.0);
    /// # Ok::<(), gradfem::api::ApiError>(())
    /// ```
    pub fn with_spec(mut self, change: impl FnOnce(&mut ProblemSpec)) -> Self {
        change(&mut self.spec);
        self
    }

    fn thermal(&mut self) -> &mut ThermalSpec {
        self.spec.thermal.get_or_insert_with(|| ThermalSpec { materials: vec![], bcs: vec![] })
    }

    fn thermal_material(&mut self, group: &str) -> &mut ThermalMaterialSpec {
        let list = &mut self.thermal().materials;
        entry_by_group(
            list,
            group,
            |e| e.group.get_ref(),
            || ThermalMaterialSpec {
                group: unlocated(group.into()),
                k: None,
                source: 0.0,
                law: ConductivityLaw::Constant,
            },
        )
    }

    fn thermal_bc(
        mut self,
        group: &str,
        kind: &str,
        change: impl FnOnce(&mut ThermalBcSpec),
    ) -> Self {
        let mut bc = ThermalBcSpec {
            group: unlocated(group.into()),
            kind: kind.into(),
            value: None,
            q_in: None,
            h: None,
            t_inf: None,
        };
        change(&mut bc);
        replace_by_group(&mut self.thermal().bcs, bc, |b| b.group.get_ref());
        self
    }

    fn electrical(&mut self) -> &mut ElectricalSpec {
        self.spec
            .electrical
            .get_or_insert_with(|| ElectricalSpec { conductors: vec![], terminals: vec![] })
    }

    fn conductor_entry(&mut self, group: &str) -> &mut ConductorFileSpec {
        let list = &mut self.electrical().conductors;
        entry_by_group(
            list,
            group,
            |e| e.group.get_ref(),
            || ConductorFileSpec {
                group: unlocated(group.into()),
                sigma: None,
                resistivity: None,
                alpha_r: None,
                law: None,
                t_ref: None,
            },
        )
    }

    fn terminal(
        mut self,
        group: &str,
        kind: &str,
        value: Option<f64>,
        current: Option<f64>,
    ) -> Self {
        let t = TerminalFileSpec {
            group: unlocated(group.into()),
            kind: unlocated(kind.into()),
            value,
            current,
        };
        replace_by_group(&mut self.electrical().terminals, t, |t| t.group.get_ref());
        self
    }

    fn mechanical(&mut self) -> &mut MechanicalSpec {
        self.spec.mechanical.get_or_insert_with(|| MechanicalSpec {
            materials: vec![],
            bcs: vec![],
            tip: None,
            temperature: None,
        })
    }

    fn elastic_material(&mut self, group: &str) -> &mut MechanicalMaterialSpec {
        let list = &mut self.mechanical().materials;
        entry_by_group(
            list,
            group,
            |e| e.group.get_ref(),
            || MechanicalMaterialSpec {
                group: unlocated(group.into()),
                young: None,
                poisson: None,
                alpha: 0.0,
                t_ref: None,
                body_force: [0.0; 3],
            },
        )
    }

    fn mechanical_bc(
        mut self,
        group: &str,
        kind: &str,
        change: impl FnOnce(&mut MechanicalBcSpec),
    ) -> Self {
        let mut bc = MechanicalBcSpec {
            group: unlocated(group.into()),
            kind: unlocated(kind.into()),
            components: None,
            value: None,
            traction: None,
            pressure: None,
        };
        change(&mut bc);
        replace_by_group(&mut self.mechanical().bcs, bc, |b| b.group.get_ref());
        self
    }

    /// Where the mesh comes from: one source at a time.
    fn mesh_source(mut self, set: impl FnOnce(&mut MeshSpec)) -> Self {
        let m = &mut self.spec.mesh;
        (m.file, m.generated, m.actuator, m.given) = (None, None, None, None);
        set(m);
        self
    }

    /// The mesh of a gmsh (`.msh`) or ANSYS (`.cdb`, `.rst`, `.rth`) file.
    pub fn mesh_file(self, path: impl AsRef<Path>) -> Self {
        let p = path.as_ref().to_string_lossy().into_owned();
        self.mesh_source(|m| m.file = Some(p))
    }

    /// A generated box at the origin: `lengths` \[m\], `divisions` per axis, `cell` one of
    /// `tet4`, `tet10`, `hex8`, `hex20`, `hex27`; its groups are `domain`, `xmin`, `xmax`, …
    /// `zmax`.
    pub fn mesh_box(self, lengths: [f64; 3], divisions: [usize; 3], cell: &str) -> Self {
        let b = BoxMeshSpec { origin: [0.0; 3], lengths, divisions, cell: cell.into() };
        self.mesh_source(|m| m.generated = Some(b))
    }

    /// The two-hot-arm microactuator built by gradfem (its default dimensions and cells).
    pub fn mesh_actuator(self) -> Self {
        self.mesh_source(|m| m.actuator = Some(ActuatorMeshSpec::default()))
    }

    /// A mesh made in code (e.g. with [`mesh_from_arrays`]), coordinates in metres.
    pub fn mesh(self, mesh: Mesh) -> Self {
        self.mesh_source(|m| m.given = Some(Arc::new(mesh)))
    }

    /// The length unit of a mesh file's coordinates (`mm`, `um`, …).
    pub fn mesh_unit(mut self, unit: &str) -> Self {
        self.spec.mesh.unit = Some(unlocated(unit.into()));
        self
    }

    /// Straighten second-order cells that the mesh generator folded.
    pub fn straighten_inverted(mut self) -> Self {
        self.spec.mesh.straighten_inverted = true;
        self
    }

    /// A surface group `name` of the exterior facets on the plane `axis` (x, y or z) = `value`.
    pub fn plane_group(mut self, name: &str, axis: &str, value: f64) -> Self {
        let g = PlaneGroupSpec { name: name.into(), axis: axis.into(), value };
        self.spec.mesh.plane_group.push(g);
        self
    }

    /// Thermal conductivity k₀ [W/(m·K)] of a volume group.
    pub fn conductivity(mut self, group: &str, k: f64) -> Self {
        self.thermal_material(group).k = Some(ElementValues::Uniform(k));
        self
    }

    /// Thermal conductivity per element from a file (see `[thermal.material.k]` of the
    /// problem-file reference): a CSV or HDF5 path, and for HDF5 a dataset or a results field.
    pub fn conductivity_from_file(mut self, group: &str, file: &str, select: FileSelect) -> Self {
        self.thermal_material(group).k = Some(select.values(file));
        self
    }

    /// A conductivity law k(T) of a volume group (`gradfem_thermal::ConductivityLaw`).
    pub fn conductivity_law(mut self, group: &str, law: ConductivityLaw) -> Self {
        self.thermal_material(group).law = law;
        self
    }

    /// Volumetric heat source [W/m³] of a volume group (which also needs a conductivity).
    pub fn heat_source(mut self, group: &str, q: f64) -> Self {
        self.thermal_material(group).source = q;
        self
    }

    /// A fixed temperature \[K\] on a surface group.
    pub fn fixed_temperature(self, group: &str, value: f64) -> Self {
        self.thermal_bc(group, "temperature", |b| b.value = Some(value))
    }

    /// A heat flux into the body [W/m²] on a surface group.
    pub fn heat_flux(self, group: &str, q_in: f64) -> Self {
        self.thermal_bc(group, "heat_flux", |b| b.q_in = Some(q_in))
    }

    /// Convection to an ambient `t_inf` \[K\] with film coefficient `h` [W/(m²·K)].
    pub fn convection(self, group: &str, h: f64, t_inf: f64) -> Self {
        self.thermal_bc(group, "convection", |b| (b.h, b.t_inf) = (Some(h), Some(t_inf)))
    }

    /// An electrical conductor: σ₀ [S/m] of a volume group (makes the problem electro-thermal).
    pub fn conductor(mut self, group: &str, sigma: f64) -> Self {
        self.conductor_entry(group).sigma = Some(ElementValues::Uniform(sigma));
        self
    }

    /// A linear temperature coefficient α_R [1/K] of a conductor's resistivity about `t_ref`
    /// \[K\]: the coupling becomes two-way.
    pub fn resistivity_coefficient(mut self, group: &str, alpha_r: f64, t_ref: f64) -> Self {
        let c = self.conductor_entry(group);
        (c.alpha_r, c.t_ref) = (Some(alpha_r), Some(t_ref));
        self
    }

    /// The reference temperature \[K\] of a conductor's resistivity law.
    pub fn conductor_reference_temperature(mut self, group: &str, t_ref: f64) -> Self {
        self.conductor_entry(group).t_ref = Some(t_ref);
        self
    }

    /// A voltage terminal \[V\] on a surface group.
    pub fn voltage(self, group: &str, value: f64) -> Self {
        self.terminal(group, "voltage", Some(value), None)
    }

    /// A grounded terminal (0 V) on a surface group.
    pub fn ground(self, group: &str) -> Self {
        self.terminal(group, "ground", None, None)
    }

    /// A terminal that drives `current` \[A\] into the device.
    pub fn current(self, group: &str, current: f64) -> Self {
        self.terminal(group, "current", None, Some(current))
    }

    /// A linear elastic material: Young's modulus \[Pa\] and Poisson's ratio of a volume group.
    pub fn elastic(mut self, group: &str, young: f64, poisson: f64) -> Self {
        let m = self.elastic_material(group);
        (m.young, m.poisson) = (Some(ElementValues::Uniform(young)), Some(poisson));
        self
    }

    /// Thermal expansion α [1/K] of an elastic material, stress-free at `t_ref` \[K\].
    pub fn thermal_expansion(mut self, group: &str, alpha: f64, t_ref: f64) -> Self {
        let m = self.elastic_material(group);
        (m.alpha, m.t_ref) = (alpha, Some(t_ref));
        self
    }

    /// A body force per volume [N/m³] on an elastic material.
    pub fn body_force(mut self, group: &str, force: [f64; 3]) -> Self {
        self.elastic_material(group).body_force = force;
        self
    }

    /// All displacement components held at zero on a group.
    pub fn fixed(self, group: &str) -> Self {
        self.mechanical_bc(group, "fixed", |_| {})
    }

    /// The listed components (`"x"`, `"y"`, `"z"`) held at zero on a group.
    pub fn roller(self, group: &str, components: &[&str]) -> Self {
        let c = components.iter().map(|c| c.to_string()).collect();
        self.mechanical_bc(group, "roller", |b| b.components = Some(c))
    }

    /// A prescribed displacement \[m\] on a group.
    pub fn displacement(self, group: &str, value: [f64; 3]) -> Self {
        self.mechanical_bc(group, "displacement", |b| b.value = Some(value))
    }

    /// A traction \[Pa\] on a surface group.
    pub fn traction(self, group: &str, traction: [f64; 3]) -> Self {
        self.mechanical_bc(group, "traction", |b| b.traction = Some(traction))
    }

    /// A pressure \[Pa\] on a surface group (positive pushes into the body).
    pub fn pressure(self, group: &str, pressure: f64) -> Self {
        self.mechanical_bc(group, "pressure", |b| b.pressure = Some(pressure))
    }

    /// The group whose mean displacement is reported as `tip_displacement`.
    pub fn tip(mut self, group: &str) -> Self {
        self.mechanical().tip = Some(unlocated(group.into()));
        self
    }

    /// A morph: the scalar design parameter `morph.<name>` (initial `value`) moves the nodes
    /// by (s − value) · f(coordinate `axis`) · `direction`, f linear between `knots`
    /// (coordinate, factor) pairs; `bounds` for optimization.
    pub fn morph(
        mut self,
        name: &str,
        value: f64,
        axis: &str,
        knots: &[[f64; 2]],
        direction: [f64; 3],
        bounds: Option<[f64; 2]>,
    ) -> Self {
        self.spec.morphs.push(MorphSpec {
            name: name.into(),
            value,
            axis: Some(axis.into()),
            knots: Some(knots.to_vec()),
            direction: Some(direction),
            file: None,
            bounds,
        });
        self
    }

    /// Add a weighted term to the objective J.
    pub fn objective(mut self, term: Objective, weight: f64) -> Self {
        self.spec.objectives.push(term.spec(weight));
        self
    }

    /// Differentiate by the parameter `name` (e.g. `thermal.k.domain`, `mesh.coordinates`;
    /// see "Registrable parameter names" in the problem-file reference).
    pub fn register(mut self, name: &str) -> Self {
        let list = &mut self.spec.parameters.register;
        if !list.iter().any(|v| v.get_ref() == name) {
            list.push(unlocated(name.into()));
        }
        self
    }

    /// Bounds of a registered parameter (for optimization and the Taylor test).
    pub fn bounds(mut self, name: &str, lower: f64, upper: f64) -> Self {
        self.spec.parameters.bounds.insert(name.into(), [lower, upper]);
        self
    }

    /// The linear solver: `auto`, `cholesky`, `lu`, `gmres` or `amg-cg`.
    pub fn linear_solver(mut self, name: &str) -> Self {
        self.spec.solver.linear = name.into();
        self
    }

    /// Where to solve: `cpu` (the default) or `cuda` (`[solver] device`). With `cuda` the
    /// linear fields' systems are solved on the GPU ([`crate::app::place_on_device`]); without
    /// a usable GPU [`build`](Self::build) answers with the reason (no `cuda` feature, no
    /// driver, device or NVRTC). The whole forward + gradient on the device is
    /// [`ThermalProblem::device_gradient`](crate::thermal::ThermalProblem::device_gradient) and
    /// [`crate::device::elastic_gradient`].
    pub fn device(mut self, name: &str) -> Self {
        self.spec.solver.device = name.into();
        self
    }

    /// The problem file this model stands for: `gradfem run` on it sets up the same problem.
    /// A mesh given in code is not part of it (a comment says so).
    pub fn to_toml(&self) -> Result<String, ApiError> {
        let text = toml::to_string(&self.spec).map_err(|e| {
            AppError::Problem(ProblemError::Invalid {
                file: self.path(),
                message: format!("cannot be written as a problem file: {e}"),
            })
        })?;
        Ok(if self.spec.mesh.given.is_some() {
            format!("# [mesh]: a mesh given in code\n{text}")
        } else {
            text
        })
    }

    fn path(&self) -> PathBuf {
        self.base_dir.join(format!("{} (model)", self.name))
    }

    /// Set the problem up: the set-up and the checks of a problem file, on this description.
    pub fn build(self) -> Result<Simulation, ApiError> {
        let file = ProblemFile {
            path: self.path(),
            source: self.source,
            spec: self.spec,
            allow_large: false,
            strict: false,
        };
        Simulation::from_problem_file(file)
    }
}

/// The entry of `list` on `group`, made by `make` and added at the end when there is none.
fn entry_by_group<'a, T>(
    list: &'a mut Vec<T>,
    group: &str,
    group_of: impl Fn(&T) -> &String,
    make: impl FnOnce() -> T,
) -> &'a mut T {
    let at = match list.iter().position(|e| group_of(e) == group) {
        Some(i) => i,
        None => {
            list.push(make());
            list.len() - 1
        }
    };
    &mut list[at]
}

/// Put `entry` in place of the entry of `list` on the same group, or at the end.
fn replace_by_group<T>(list: &mut Vec<T>, entry: T, group: impl Fn(&T) -> &String) {
    match list.iter().position(|e| group(e) == group(&entry)) {
        Some(i) => list[i] = entry,
        None => list.push(entry),
    }
}

/// Which values of an HDF5 file [`Model::conductivity_from_file`] reads (nothing for CSV).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum FileSelect {
    /// A CSV file: one value per cell, or `element_tag,value` rows.
    #[default]
    Csv,
    /// An f64 dataset of an HDF5 file, by its path.
    Dataset(String),
    /// A cell field of a gradfem results file, at a step (default: the last holding it).
    Field { name: String, step: Option<usize> },
}

impl FileSelect {
    fn values(&self, file: &str) -> ElementValues {
        let mut f = ElementFile { file: file.into(), dataset: None, field: None, step: None };
        match self {
            FileSelect::Csv => {}
            FileSelect::Dataset(d) => f.dataset = Some(d.clone()),
            FileSelect::Field { name, step } => (f.field, f.step) = (Some(name.clone()), *step),
        }
        ElementValues::File(f)
    }
}

/// A mesh from plain arrays: node coordinates, the cells of each type as flat connectivity
/// (0-based node indices, gmsh node order), and named groups as (name, block index, cell
/// indices in that block). Element tags are the cells' 1-based positions over all blocks. The
/// mesh is validated (indices in range, groups of one dimension).
///
/// ```
/// use gradfem::api::mesh_from_arrays;
/// use gradfem::mesh::CellType;
/// let points = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
/// let mesh = mesh_from_arrays(
///     &points,
///     &[(CellType::Tet4, vec![0, 1, 2, 3]), (CellType::Tri3, vec![0, 1, 2])],
///     &[("solid", 0, vec![0]), ("bottom", 1, vec![0])],
/// )?;
/// assert_eq!(mesh.n_cells_of_dim(3), 1);
/// # Ok::<(), gradfem::mesh::MeshError>(())
/// ```
pub fn mesh_from_arrays(
    points: &[[f64; 3]],
    cells: &[(gradfem_mesh::CellType, Vec<usize>)],
    groups: &[(&str, usize, Vec<usize>)],
) -> Result<Mesh, gradfem_mesh::MeshError> {
    use gradfem_mesh::mesh::{CellBlock, CellId, PhysicalGroup};
    let mut blocks = Vec::with_capacity(cells.len());
    let mut tag = 0u64;
    for (b, (cell_type, connectivity)) in cells.iter().enumerate() {
        let n = cell_type.n_nodes();
        if connectivity.len() % n != 0 {
            return Err(gradfem_mesh::MeshError::Inconsistent(format!(
                "block {b} ({}): {} node indices are not a whole number of {n}-node cells",
                cell_type.name(),
                connectivity.len()
            )));
        }
        let count = connectivity.len() / n;
        let tags = (0..count)
            .map(|_| {
                tag += 1;
                tag
            })
            .collect();
        blocks.push(CellBlock { cell_type: *cell_type, connectivity: connectivity.clone(), tags });
    }
    let mut out_groups = Vec::with_capacity(groups.len());
    for (i, (name, block, indices)) in groups.iter().enumerate() {
        let Some(dim) = blocks.get(*block).map(|b: &CellBlock| b.cell_type.dim()) else {
            return Err(gradfem_mesh::MeshError::Inconsistent(format!(
                "group '{name}': block {block} does not exist ({} blocks)",
                blocks.len()
            )));
        };
        let mut cells: Vec<CellId> =
            indices.iter().map(|&index| CellId { block: *block, index }).collect();
        cells.sort();
        out_groups.push(PhysicalGroup { name: name.to_string(), tag: i as i32 + 1, dim, cells });
    }
    let mesh = Mesh {
        coords: points.to_vec(),
        node_tags: (1..=points.len() as u64).collect(),
        blocks,
        groups: out_groups,
    };
    mesh.validate()?;
    Ok(mesh)
}

/// One cell of a per-element parameter ([`Simulation::element_cells`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ElementCell {
    /// The mesh's element tag.
    pub tag: u64,
    /// The centroid of its vertices.
    pub centroid: [f64; 3],
    /// Its volume (area in 2D).
    pub volume: f64,
}

/// The gradient of a scalar (the objective, or a cotangent's pairing with the outputs) with
/// respect to every registered parameter, by name: one entry for a scalar parameter, one per
/// entry for a vector one (per-element fields in their group's cell order, node coordinates
/// x, y, z per node).
#[derive(Clone, Debug, PartialEq)]
pub struct Gradients {
    /// The scalar differentiated.
    pub value: f64,
    /// dvalue/dp per registered parameter.
    pub by_name: BTreeMap<String, Vec<f64>>,
}

impl Gradients {
    /// The derivative by a parameter.
    pub fn get(&self, name: &str) -> Option<&[f64]> {
        self.by_name.get(name).map(Vec::as_slice)
    }

    /// The derivative by a scalar parameter.
    pub fn scalar(&self, name: &str) -> Option<f64> {
        self.get(name).filter(|v| v.len() == 1).map(|v| v[0])
    }
}

/// A cotangent on the outputs of a problem: weights on whole nodal fields and on quantities.
/// [`Simulation::vjp`] returns the gradient of ⟨cotangent, outputs⟩, the vector-Jacobian
/// product a loss computed outside gradfem (PyTorch, JAX) needs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cotangent {
    fields: Vec<(String, Vec<f64>)>,
    quantities: Vec<(String, f64)>,
}

impl Cotangent {
    /// No weights.
    pub fn new() -> Self {
        Self::default()
    }

    /// Weights on a nodal field: `temperature` (one per node) or `displacement` (three per
    /// node, x y z).
    pub fn field(mut self, name: &str, weights: Vec<f64>) -> Self {
        self.fields.push((name.into(), weights));
        self
    }

    /// A weight on a differentiable quantity (see [`Simulation::differentiable_quantities`]).
    pub fn quantity(mut self, name: &str, weight: f64) -> Self {
        self.quantities.push((name.into(), weight));
        self
    }
}

/// A problem set up and ready to solve, from a problem file or a [`Model`].
pub struct Simulation {
    file: ProblemFile,
    problem: Problem,
}

impl std::fmt::Debug for Simulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation").field("file", &self.file.path).finish_non_exhaustive()
    }
}

/// The nodal fields a solved problem offers.
const FIELD_NAMES: [&str; 3] = ["temperature", "potential", "displacement"];

impl Simulation {
    /// Read and set up a problem file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ApiError> {
        Self::from_problem_file(ProblemFile::read(path.as_ref())?)
    }

    /// Set up problem-file text; `path` names it in errors and anchors relative paths.
    pub fn from_toml(path: impl AsRef<Path>, text: &str) -> Result<Self, ApiError> {
        Self::from_problem_file(ProblemFile::parse(path.as_ref(), text.to_string())?)
    }

    /// Set up a parsed problem file.
    pub fn from_problem_file(file: ProblemFile) -> Result<Self, ApiError> {
        let problem = app::build_problem(&file)?;
        Ok(Simulation { file, problem })
    }

    fn name(&self) -> String {
        self.file.path.display().to_string()
    }

    fn run<T>(&self, r: Result<T, RunError>) -> Result<T, ApiError> {
        r.map_err(|source| ApiError::Run { name: self.name(), source: Box::new(source) })
    }

    fn request(&self, message: String) -> ApiError {
        ApiError::Request { name: self.name(), message }
    }

    /// The problem file (parsed) behind this simulation.
    pub fn problem_file(&self) -> &ProblemFile {
        &self.file
    }

    /// The set-up problem, for what the API does not wrap.
    pub fn problem(&mut self) -> &mut Problem {
        &mut self.problem
    }

    /// The mesh (in metres, with its groups).
    pub fn mesh(&self) -> &Mesh {
        self.problem.mesh()
    }

    /// Solve the forward problem (all fields, load steps or time steps).
    pub fn solve(&mut self) -> Result<(), ApiError> {
        let r = self.problem.solve();
        self.run(r)
    }

    fn ensure_solved(&mut self) -> Result<(), ApiError> {
        if !self.problem.is_solved() { self.solve() } else { Ok(()) }
    }

    /// The objective J at the solution (solving first when needed).
    pub fn objective(&mut self) -> Result<f64, ApiError> {
        let r = self.problem.objective_terms();
        Ok(self.run(r)?.0)
    }

    /// The names of the nodal fields of this problem (`temperature`, `potential`,
    /// `displacement`).
    pub fn field_names(&self) -> Vec<&'static str> {
        let p = &self.problem;
        FIELD_NAMES
            .into_iter()
            .filter(|n| match *n {
                "temperature" => true,
                "potential" => p.electrical().is_some(),
                _ => p.mechanical().is_some() || p.hyperelastic().is_some(),
            })
            .collect()
    }

    /// A nodal field of the solution: `temperature` \[K\] (one value per node; NaN at nodes
    /// outside the thermal field), `potential` \[V\], `displacement` \[m\] (x, y, z per node; the
    /// last load step of a finite-strain problem). None before a solve or for a field the
    /// problem does not have.
    pub fn field(&self, name: &str) -> Option<&[f64]> {
        let p = &self.problem;
        match name {
            "temperature" => p.thermal().temperature(),
            "potential" => p.electrical().and_then(|e| e.potential()),
            "displacement" => match (p.mechanical(), p.hyperelastic()) {
                (Some(m), _) => m.displacement(),
                (None, Some(h)) => h.states().last().map(|s| s.1),
                _ => None,
            },
            _ => None,
        }
    }

    /// The quantities of the solution (solving first when needed), in SI units:
    /// `objective`, `max_temperature`, `min_temperature`, `mean_temperature` \[K\]; with an
    /// electrical field `current` \[A\], `voltage` \[V\], `resistance` \[Ω\] of the drive terminal,
    /// `joule_power` \[W\] and `terminal.<group>.current`, `terminal.<group>.voltage`; with a
    /// mechanical field `max_displacement` \[m\], `max_von_mises` \[Pa\] (linear elasticity) and,
    /// with a tip group, `tip_displacement.x|y|z` \[m\].
    pub fn quantities(&mut self) -> Result<BTreeMap<String, f64>, ApiError> {
        self.ensure_solved()?;
        let s = app::summary(&self.file.spec.title, &self.problem);
        let s = self.run(s)?;
        let mut q = BTreeMap::new();
        q.insert("objective".into(), s.objective);
        q.insert("max_temperature".into(), s.max_temperature_k);
        q.insert("min_temperature".into(), s.min_temperature_k);
        q.insert("mean_temperature".into(), s.mean_temperature_k);
        let mut opt = |k: &str, v: Option<f64>| {
            if let Some(v) = v {
                q.insert(k.into(), v);
            }
        };
        opt("current", s.current_a);
        opt("voltage", s.voltage_v);
        opt("resistance", s.resistance_ohm);
        opt("joule_power", s.joule_power_w);
        opt("max_displacement", s.max_displacement_m);
        opt("max_von_mises", s.max_von_mises_pa);
        if let Some(tip) = s.tip_displacement_m {
            for (axis, v) in ["x", "y", "z"].iter().zip(tip) {
                q.insert(format!("tip_displacement.{axis}"), v);
            }
        }
        for t in s.terminals.iter().flatten() {
            q.insert(format!("terminal.{}.current", t.name), t.current_a);
            q.insert(format!("terminal.{}.voltage", t.name), t.voltage_v);
        }
        Ok(q)
    }

    /// Every parameter name the problem can register.
    pub fn parameter_names(&self) -> Vec<String> {
        self.problem.available_parameters()
    }

    /// The registered parameters, in registration order (what [`gradient`](Self::gradient)
    /// and [`vjp`](Self::vjp) differentiate by).
    pub fn registered(&self) -> Vec<String> {
        self.problem.registry().names().map(str::to_owned).collect()
    }

    /// True when the registered parameter `name` is one number (a scalar), false for a
    /// per-element field, node coordinates or another vector; None when it is not
    /// registered.
    pub fn is_scalar_parameter(&self, name: &str) -> Option<bool> {
        let reg = self.problem.registry();
        let id = reg.id(name).ok()?;
        Some(matches!(reg.get(id).kind, gradfem_solvers::params::ParamKind::Scalar))
    }

    /// The cells of a per-element parameter's entries, in its order: (element tag, centroid,
    /// volume) each; None when `name` is not a registered per-element parameter.
    pub fn element_cells(&self, name: &str) -> Option<Vec<ElementCell>> {
        let id = self.problem.registry().id(name).ok()?;
        let tags = self.problem.element_parameter_tags().into_iter().find(|(i, _)| *i == id)?.1;
        let mesh = self.problem.mesh();
        let by_tag: std::collections::HashMap<u64, gradfem_mesh::CellId> =
            mesh.cells_of_dim(mesh.dim()).map(|c| (mesh.cell_tag(c), c)).collect();
        tags.iter()
            .map(|&tag| {
                let c = *by_tag.get(&tag)?;
                Some(ElementCell {
                    tag,
                    centroid: mesh.cell_centroid(c),
                    volume: gradfem_mesh::geometry::cell_measure(mesh, c),
                })
            })
            .collect()
    }

    /// The bounds (lower, upper) of a registered parameter; None where unbounded, or when
    /// it is not registered.
    pub fn parameter_bounds(&self, name: &str) -> Option<(Option<f64>, Option<f64>)> {
        let reg = self.problem.registry();
        let spec = reg.get(reg.id(name).ok()?);
        Some((spec.lower, spec.upper))
    }

    /// Register a parameter by name (nothing when it is registered already).
    pub fn register(&mut self, name: &str) -> Result<(), ApiError> {
        if self.problem.registry().contains(name) {
            return Ok(());
        }
        let r = self.problem.register(name, None).map(|_| ());
        self.run(r)
    }

    /// The value(s) of a parameter (registering it when needed).
    pub fn parameter(&mut self, name: &str) -> Result<Vec<f64>, ApiError> {
        self.register(name)?;
        let reg = self.problem.registry();
        let id = reg.id(name).expect("registered");
        Ok(reg.values(id).to_vec())
    }

    /// Set a scalar parameter by name (registering it when needed); the next output solves
    /// again, reusing the sparsity patterns and symbolic factorizations.
    pub fn set_parameter(&mut self, name: &str, value: f64) -> Result<(), ApiError> {
        self.set_parameter_values(name, &[value])
    }

    /// Set a parameter's values by name: one for a scalar, one per cell of the group for a
    /// per-element field (`thermal.k_elem.<group>`, …, in the group's cell order), 3 per node
    /// for `mesh.coordinates`. A wrong count names the expected one. Setting the values it
    /// has already keeps the solution.
    pub fn set_parameter_values(&mut self, name: &str, values: &[f64]) -> Result<(), ApiError> {
        self.register(name)?;
        let reg = self.problem.registry();
        let id = reg.id(name).expect("registered");
        let expected = reg.values(id).len();
        if values.len() != expected {
            return Err(self.request(format!(
                "'{name}' takes {expected} value(s) ({}), given {}",
                reg.get(id).kind,
                values.len()
            )));
        }
        // The same values keep the solution (a re-solve from it would differ in the last bits
        // where Newton or a coupled iteration starts from the previous state).
        let same = reg.values(id).iter().zip(values).all(|(a, b)| a.to_bits() == b.to_bits());
        if same {
            return Ok(());
        }
        if let Err(e) = self.problem.registry_mut().set_values(id, values) {
            return Err(self.request(e.to_string()));
        }
        let r = self.problem.apply_parameters();
        self.run(r)
    }

    /// The objective J and its gradient by every registered parameter (the adjoint method:
    /// one reverse sweep through the coupled fields).
    pub fn gradient(&mut self) -> Result<Gradients, ApiError> {
        self.ensure_solved()?;
        let r = self.problem.gradient();
        let (value, g, _) = self.run(r)?;
        Ok(self.by_name(value, &g))
    }

    fn by_name(&self, value: f64, g: &gradfem_solvers::params::Gradient) -> Gradients {
        let reg = self.problem.registry();
        let by_name =
            reg.iter().map(|(id, spec)| (spec.name.clone(), g.get(id).to_vec())).collect();
        Gradients { value, by_name }
    }

    /// The quantities a [`Cotangent`] may weigh: `objective`, `mean_temperature`; with an
    /// electrical field `current`, `voltage`, `resistance` (of the drive terminal) and
    /// `terminal.<group>.current|voltage`; with a linear mechanical field that names a tip
    /// group (`[mechanical] tip`, [`Model::tip`]) `tip_displacement.x|y|z`.
    pub fn differentiable_quantities(&self) -> Vec<String> {
        let mut out = vec!["objective".to_string(), "mean_temperature".to_string()];
        if let Some(et) = self.problem.electrical() {
            out.extend(["current", "voltage", "resistance"].map(String::from));
            for t in &et.model.terminals {
                out.push(format!("terminal.{}.current", t.name));
                out.push(format!("terminal.{}.voltage", t.name));
            }
        }
        if self.problem.mechanical().is_some_and(|m| m.tip_group.is_some()) {
            out.extend(["x", "y", "z"].map(|a| format!("tip_displacement.{a}")));
        }
        out
    }

    /// The vector-Jacobian product: the gradient of ⟨w, outputs⟩ (the cotangent's weights on
    /// whole nodal fields and on quantities) by every registered parameter, by one adjoint
    /// sweep. The problem's own objective is left as it was.
    pub fn vjp(&mut self, cotangent: &Cotangent) -> Result<Gradients, ApiError> {
        if self.problem.is_transient() || self.problem.hyperelastic().is_some() {
            return Err(self.request(
                "vector-Jacobian products of transient and finite-strain problems are not available yet; their `gradient` differentiates the objective".into(),
            ));
        }
        let set = self.cotangent_objective(cotangent)?;
        self.ensure_solved()?;
        let old = self.problem.swap_objective(set);
        let r = self.problem.gradient();
        self.problem.swap_objective(old);
        let (value, g, _) = self.run(r)?;
        Ok(self.by_name(value, &g))
    }

    /// The objective whose gradient is the VJP of `cotangent`.
    fn cotangent_objective(&self, c: &Cotangent) -> Result<ObjectiveSet, ApiError> {
        use gradfem_mechanical::linear::objective::{
            ObjectiveKind as MechKind, ObjectiveTerm as MechTerm,
        };
        use gradfem_thermal::{ObjectiveKind, ObjectiveTerm};
        let p = &self.problem;
        let n_nodes = self.mesh().n_nodes();
        let mut set = ObjectiveSet::default();
        for (name, w) in &c.fields {
            match name.as_str() {
                "temperature" => {
                    if w.len() != n_nodes {
                        return Err(self.request(format!(
                            "a temperature cotangent has one weight per node: expected {n_nodes}, given {}",
                            w.len()
                        )));
                    }
                    set.thermal.push(ObjectiveTerm {
                        weight: 1.0,
                        kind: ObjectiveKind::Linear { weights: w.clone() },
                    });
                }
                "displacement" if p.mechanical().is_some() => {
                    if w.len() != 3 * n_nodes {
                        return Err(self.request(format!(
                            "a displacement cotangent has three weights per node: expected {}, given {}",
                            3 * n_nodes,
                            w.len()
                        )));
                    }
                    set.mechanical.push(MechTerm {
                        weight: 1.0,
                        kind: MechKind::Linear { weights: w.clone() },
                    });
                }
                other => {
                    return Err(self.request(format!(
                        "no cotangent on the field '{other}'; this problem takes cotangents on: {}",
                        if p.mechanical().is_some() {
                            "temperature, displacement"
                        } else {
                            "temperature"
                        }
                    )));
                }
            }
        }
        for (name, w) in &c.quantities {
            let w = *w;
            let unknown = || {
                self.request(format!(
                    "'{name}' is not a differentiable quantity of this problem; it has: {}",
                    self.differentiable_quantities().join(", ")
                ))
            };
            let terminal = |kind: &str| -> Result<TerminalTerm, ApiError> {
                use gradfem_electrical::TerminalFunctional as F;
                let et = p.electrical().ok_or_else(unknown)?;
                let names = |i: usize| et.model.terminals[i].name.clone();
                let (drive, reference) = et.default_terminals().ok_or_else(unknown)?;
                let functional = match kind {
                    "current" => F::Current { terminal: names(drive) },
                    "voltage" => F::Voltage { terminal: names(drive) },
                    _ => F::Resistance { drive: names(drive), reference: names(reference) },
                };
                Ok(TerminalTerm { weight: w, functional })
            };
            match name.as_str() {
                "objective" => {
                    // The problem's own terms, scaled.
                    let own = self.own_objective();
                    set.thermal.extend(own.thermal.into_iter().map(|mut t| {
                        t.weight *= w;
                        t
                    }));
                    set.electrical.extend(own.electrical.into_iter().map(|mut t| {
                        t.weight *= w;
                        t
                    }));
                    set.mechanical.extend(own.mechanical.into_iter().map(|mut t| {
                        t.weight *= w;
                        t
                    }));
                }
                "mean_temperature" => set.thermal.push(ObjectiveTerm {
                    weight: w,
                    kind: ObjectiveKind::Average { group: "*".into() },
                }),
                "current" | "voltage" | "resistance" => set.electrical.push(terminal(name)?),
                _ => {
                    if let Some(rest) = name.strip_prefix("terminal.") {
                        use gradfem_electrical::TerminalFunctional as F;
                        let et = p.electrical().ok_or_else(unknown)?;
                        let (group, what) = rest.rsplit_once('.').ok_or_else(unknown)?;
                        if !et.model.terminals.iter().any(|t| t.name == group) {
                            return Err(unknown());
                        }
                        let terminal = group.to_string();
                        let functional = match what {
                            "current" => F::Current { terminal },
                            "voltage" => F::Voltage { terminal },
                            _ => return Err(unknown()),
                        };
                        set.electrical.push(TerminalTerm { weight: w, functional });
                    } else if let Some(axis) = name.strip_prefix("tip_displacement.") {
                        let m = p.mechanical().ok_or_else(unknown)?;
                        let k =
                            ["x", "y", "z"].iter().position(|a| *a == axis).ok_or_else(unknown)?;
                        let mut direction = [0.0; 3];
                        direction[k] = 1.0;
                        let group = m.tip_group.clone().ok_or_else(unknown)?;
                        set.mechanical.push(MechTerm {
                            weight: w,
                            kind: MechKind::AverageDisplacement { group, direction },
                        });
                    } else {
                        return Err(unknown());
                    }
                }
            }
        }
        Ok(set)
    }

    /// A copy of the problem's own objective terms.
    fn own_objective(&self) -> ObjectiveSet {
        let p = &self.problem;
        ObjectiveSet {
            thermal: p.thermal().objective.clone(),
            electrical: p.electrical().map(|e| e.objective.clone()).unwrap_or_default(),
            mechanical: p.mechanical().map(|m| m.objective.clone()).unwrap_or_default(),
        }
    }

    /// The Hessian of the objective applied to a parameter direction: H·δp by one
    /// tangent-linear and one second-order adjoint solve (exact, not finite differences).
    /// `direction` gives δp by registered name (a scalar's one entry, a per-element field's
    /// entries in its group's cell order); names left out are zero. For steady thermal,
    /// electro-thermal, linear thermo-elastic and finite-strain problems (through the load
    /// steps), a ρ(T) cycle solved monolithic or staggered, and problems in time (a ρ(T) cycle
    /// stepped in time included), shape parameters included; what is not covered gives an
    /// error that says so.
    pub fn hvp(&mut self, direction: &BTreeMap<String, Vec<f64>>) -> Result<Gradients, ApiError> {
        let reg = self.problem.registry();
        let mut dir = gradfem_solvers::params::Gradient::zeros(reg);
        for (name, values) in direction {
            let id = reg.id(name).map_err(|e| self.request(e.to_string()))?;
            let want = reg.values(id).len();
            if values.len() != want {
                return Err(self.request(format!(
                    "direction of '{name}': {} values for a parameter of {want}",
                    values.len()
                )));
            }
            if let Some(bad) = values.iter().position(|v| !v.is_finite()) {
                return Err(self.request(format!(
                    "direction of '{name}': entry {bad} is {} (not finite)",
                    values[bad]
                )));
            }
            dir.get_mut(id).copy_from_slice(values);
        }
        self.ensure_solved()?;
        let r = self.problem.hessian_vector(&dir);
        let hv = self.run(r)?;
        let value: f64 = {
            let reg = self.problem.registry();
            reg.iter()
                .map(|(id, _)| dir.get(id).iter().zip(hv.get(id)).map(|(a, b)| a * b).sum::<f64>())
                .sum()
        };
        Ok(self.by_name(value, &hv))
    }

    /// The dense Hessian of the objective over every registered entry, row-major in the
    /// order of [`parameter_vector`](Self::parameter_vector): one [`hvp`](Self::hvp) per
    /// entry, so for up to a few hundred entries.
    pub fn hessian(&mut self) -> Result<Vec<f64>, ApiError> {
        self.ensure_solved()?;
        let r = self.problem.dense_hessian(|_| {});
        self.run(r)
    }

    /// The second-order Taylor test along a flat direction (the order of
    /// [`parameter_vector`](Self::parameter_vector)): the remainders of the first-order
    /// expansion corrected by ½h²δpᵀHδp fall at rate 3 when the Hessian-vector product is
    /// exact.
    pub fn taylor_test_second_order(
        &mut self,
        direction: &[f64],
        h0: f64,
        steps: usize,
    ) -> Result<gradfem_coupling::SecondOrderTaylor, ApiError> {
        let r = self.problem.taylor_test_second_order(direction, h0, steps);
        self.run(r)
    }

    /// The Taylor test of the gradient over every registered parameter, with the `[taylor]`
    /// settings of the problem (h0, steps); the result's `passed` tells whether the
    /// remainders fall at rate ≈ 2.
    pub fn taylor_test(&mut self) -> Result<TaylorResult, ApiError> {
        if self.problem.registry().is_empty() {
            return Err(self.request("the Taylor test needs a registered parameter".into()));
        }
        let t = &self.file.spec.taylor;
        let params = TaylorParams { h0: t.h0, steps: t.steps, min_rate: t.min_rate };
        let r = self.problem.taylor_test(&params, |_| {});
        self.run(r)
    }

    /// The flat vector of every registered parameter's values, in registration order (the
    /// layout of [`Gradients`] flattened the same way by [`Simulation::flatten`]).
    pub fn parameter_vector(&self) -> Vec<f64> {
        let reg = self.problem.registry();
        ParamVector::all(reg).gather(reg)
    }

    /// A [`Gradients`] flattened in the order of [`parameter_vector`](Self::parameter_vector).
    pub fn flatten(&self, g: &Gradients) -> Vec<f64> {
        let reg = self.problem.registry();
        reg.names().flat_map(|n| g.by_name.get(n).cloned().unwrap_or_default()).collect()
    }

    /// Write `results.xdmf` and `results.h5` (every field of the solution) into `dir` as one
    /// output set ([`gradfem_io::output_set`]: the directory is replaced whole, so it must not
    /// be the current directory); returns the XDMF path.
    pub fn write_results(&mut self, dir: &Path) -> Result<PathBuf, ApiError> {
        self.ensure_solved()?;
        let set = gradfem_io::output_set::OutputSet::begin(dir).map_err(|e| {
            app::AppError::Write { path: dir.to_path_buf(), message: e.to_string() }
        })?;
        app::write_results(set.dir(), &self.problem, None)?;
        set.commit().map_err(|e| app::AppError::Write {
            path: dir.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(dir.join("results.xdmf"))
    }
}
