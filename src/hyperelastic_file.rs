//! Finite-strain hyperelasticity from a problem file: the `[hyperelastic]` table, its load
//! path, objectives over the load steps, and the mapping of the load-stepping adjoint onto the
//! registered parameters.
//!
//! ```toml
//! [[hyperelastic.material]]
//! group = "pad"
//! law = "ogden"               # neo_hookean (mu), mooney_rivlin (c10, c01), svk (young, poisson)
//! mu = [0.3e6]                # Ogden: μ_p (Pa), ψ = Σ 2μ_p/α_p² (λ̄₁^α_p + λ̄₂^α_p + λ̄₃^α_p − 3)
//! alpha = [2.5]               # Ogden: α_p
//! kappa = 5e7                 # bulk modulus, + κ U(J)
//! volumetric = "quadratic"    # U = ½(J − 1)² (default), log_squared, simo_taylor
//! thermal_expansion = 2e-4    # optional: α (1/K) of F = F_m F_θ, F_θ = (1 + α s (T − T_ref)) I
//! t_ref = 293.15              # stress-free temperature T_ref (K, default 293.15)
//!
//! [[hyperelastic.bc]]         # as [[mechanical.bc]]: fixed, roller, displacement, traction,
//! group = "top"               # pressure; displacements and loads grow with the load factor
//! kind = "displacement"
//! value = [0.0, 0.0, -1.2e-3]
//! components = ["z"]
//!
//! [hyperelastic]
//! steps = 10                  # load factors 0.1, 0.2, …, 1 (or load_factors = [...])
//! checkpoints = 0             # 0: keep every state; N > 0: at most N (binomial)
//! tip = "top"                 # group whose mean displacement the summary reports
//! temperature = { uniform = 350.0 }  # optional, without [thermal]: a prescribed temperature
//!
//! [[objective]]
//! kind = "reaction"           # of a fixed/roller/displacement condition, in a direction;
//! group = "top"               # also displacement (point) and average_displacement (group)
//! direction = [0.0, 0.0, 1.0]
//! measured = "force.csv"      # optional: a misfit Σ_k w (q_k − m_k)² to (load factor, value)
//!                             # rows; without it the term is Σ_k w q_k
//! ```
//!
//! # Temperature
//!
//! With a `[thermal]` table (and optionally `[electrical]`) in the same file, the temperature
//! of the thermal (or electro-thermal) solve drives the finite-strain field: the coupling
//! graph has the transfer `thermal -> hyperelastic` (summaries print `thermal → hyperelastic`,
//! `[electrical ⇄ thermal] → hyperelastic`). Forward: the upstream fields are solved, their
//! nodal temperature T is handed to the finite-strain model, then the load steps run. The
//! thermal strain is a load like the others: at load factor s the expansion is
//! `θ = 1 + α s (T − T_ref)`, so the temperature change ramps with the load factor and is
//! fully applied at s = 1 (gradfem_mechanical::finite). Reverse: the load-stepping adjoint gives
//! T̄ = dJ/dT per node (Σ_k −λ_kᵀ ∂R/∂T, the reactions' explicit dependence included), handed
//! to the upstream adjoint as its temperature seed, so thermal parameters (`thermal.k.<g>`,
//! `thermal.q.<g>`, `bc.<g>.h`, `bc.<g>.temperature`, …) and electrical ones get their
//! gradients through the chain. Without `[thermal]`, `temperature = { uniform = T }` holds
//! every node of the hyperelastic materials at T (registrable as `bc.<group>.temperature`
//! of each material's group); with neither, the field has no temperature (θ = 1).
//! The objectives are those of the finite-strain field over the load path.
//!
//! Parameters: `hyperelastic.<p>.<group>` for every law parameter (`mu1`, `alpha1`, …,
//! `kappa`; `mu`; `c10`, `c01`; `young`, `poisson`), `hyperelastic.scale_elem.<group>`,
//! `hyperelastic.body_force.<group>`, `hyperelastic.alpha.<group>` (the thermal expansion
//! coefficient), `hyperelastic.t_ref.<group>`, `bc.<group>.traction|pressure|displacement`,
//! the upstream fields' parameters when the temperature is coupled, and the shape
//! parameters (`mesh.coordinates`, morphs). Fitting material parameters to measured
//! force–displacement curves of a full specimen is `gradfem optimize` with a misfit objective.

use gradfem_mechanical::finite::{FiniteRegionSpec, FiniteStrainModel, HyperelasticLaw};
use gradfem_mechanical::hyperelastic::{
    MooneyRivlin, NeoHookean, Ogden, OgdenTerm, SaintVenantKirchhoff, Volumetric,
};
use gradfem_mechanical::{BcSpec, StrainEnergy};
use gradfem_mesh::Mesh;
use gradfem_solvers::checkpoint::Checkpointing;
use gradfem_solvers::params::{Gradient, ParamId, ParamRegistry};
use serde::Serialize;

use crate::finite_strain::{
    EquilibriumState, FiniteStrainProblem, LoadPath, LoadPathObjective, LoadStepParams, PathTerm,
    Quantity,
};
pub use crate::problem::{HyperMaterialSpec, HyperTemperatureSpec, HyperelasticSpec};
use crate::problem::{ObjectiveSpec, ProblemError, ProblemFile};
use crate::run::RunError;
use crate::shape::Shape;

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

/// A finite-strain run set up from a problem file.
pub struct HyperelasticRun {
    pub problem: FiniteStrainProblem,
    pub loads: Vec<f64>,
    objective: LoadPathObjective,
    memory: Checkpointing,
    path: Option<LoadPath>,
    pub tip: Option<String>,
    pub report: HyperelasticReport,
    /// A starting displacement for the first increment's Newton iterations (e.g. an ANSYS
    /// result): full vector, 3 per node.
    initial: Option<Vec<f64>>,
    /// Whether the temperature of the thermal field drives this field (a `[thermal]` table
    /// or a prescribed `temperature`): the `thermal -> hyperelastic` transfer.
    takes_temperature: bool,
}

fn invalid(file: &ProblemFile, message: String) -> ProblemError {
    ProblemError::invalid(&file.path, message)
}

fn volumetric(file: &ProblemFile, v: &Option<String>) -> Result<Volumetric, ProblemError> {
    Ok(match v.as_deref() {
        None | Some("quadratic") => Volumetric::Quadratic,
        Some("log_squared") => Volumetric::LogSquared,
        Some("simo_taylor") => Volumetric::SimoTaylor,
        Some(other) => {
            return Err(invalid(
                file,
                format!("volumetric '{other}': expected quadratic, log_squared or simo_taylor"),
            ));
        }
    })
}

/// The admissible ranges of a material's constants, checked before any solve: moduli
/// positive (κ > 0: κ = 0 leaves the volume free, κ < 0 makes the solid unstable), the initial
/// shear modulus Σ μ_p (Ogden), μ (Neo-Hookean) or 2(C₁₀ + C₀₁) (Mooney–Rivlin) positive,
/// Young's modulus positive and −1 < ν < 0.5, every value finite, T_ref above 0 K.
fn check_constants(
    file: &ProblemFile,
    line: usize,
    m: &HyperMaterialSpec,
) -> Result<(), ProblemError> {
    let bad = |key: &str, value: String, why: &str| {
        Err(invalid(
            file,
            format!("line {line}: `{key}` = {value}: {why} (material on '{}')", m.group.get_ref()),
        ))
    };
    let mut values: Vec<(&str, f64)> = Vec::new();
    for (key, v) in [("mu", &m.mu), ("alpha", &m.alpha)] {
        values.extend(v.iter().flatten().map(|x| (key, *x)));
    }
    for (key, v) in [
        ("kappa", m.kappa),
        ("c10", m.c10),
        ("c01", m.c01),
        ("young", m.young),
        ("poisson", m.poisson),
        ("thermal_expansion", m.thermal_expansion),
        ("t_ref", m.t_ref),
    ] {
        values.extend(v.map(|x| (key, x)));
    }
    values.extend(m.body_force.iter().map(|x| ("body_force", *x)));
    if let Some((key, v)) = values.iter().find(|(_, v)| !v.is_finite()) {
        return bad(key, v.to_string(), "must be a finite number");
    }
    if let Some(k) = m.kappa
        && k <= 0.0
    {
        return bad(
            "kappa",
            k.to_string(),
            "the bulk modulus must be positive (κ = 0 leaves the volume unconstrained, κ < 0 makes the solid unstable)",
        );
    }
    if let Some(e) = m.young
        && e <= 0.0
    {
        return bad("young", e.to_string(), "Young's modulus must be positive");
    }
    if let Some(nu) = m.poisson
        && !(nu > -1.0 && nu < 0.5)
    {
        return bad("poisson", nu.to_string(), "Poisson's ratio must lie in (−1, 0.5)");
    }
    if let Some(t) = m.t_ref
        && t <= 0.0
    {
        return bad("t_ref", t.to_string(), "a temperature in kelvin must be above 0 K");
    }
    let shear = match m.law.as_str() {
        "ogden" | "neo_hookean" => m.mu.as_ref().map(|mu| ("mu", mu.iter().sum::<f64>())),
        "mooney_rivlin" => m.c10.zip(m.c01).map(|(a, b)| ("c10 + c01", 2.0 * (a + b))),
        _ => None,
    };
    if let Some((key, g)) = shear
        && g <= 0.0
    {
        return bad(
            key,
            format!("{:?}", m.mu.as_deref().unwrap_or(&[g])),
            "the initial shear modulus must be positive",
        );
    }
    Ok(())
}

fn law(file: &ProblemFile, m: &HyperMaterialSpec) -> Result<HyperelasticLaw, ProblemError> {
    let line = file.line_of(&m.group);
    let need = |v: Option<f64>, key: &str| {
        v.ok_or_else(|| invalid(file, format!("line {line}: a '{}' material needs `{key}`", m.law)))
    };
    let keys: [(&str, bool); 7] = [
        ("mu", m.mu.is_some()),
        ("alpha", m.alpha.is_some()),
        ("kappa", m.kappa.is_some()),
        ("c10", m.c10.is_some()),
        ("c01", m.c01.is_some()),
        ("young", m.young.is_some()),
        ("poisson", m.poisson.is_some()),
    ];
    let allowed: &[&str] = match m.law.as_str() {
        "ogden" => &["mu", "alpha", "kappa"],
        "neo_hookean" => &["mu", "kappa"],
        "mooney_rivlin" => &["c10", "c01", "kappa"],
        "svk" => &["young", "poisson"],
        other => {
            return Err(invalid(
                file,
                format!(
                    "line {line}: law '{other}': expected ogden, neo_hookean, mooney_rivlin or svk"
                ),
            ));
        }
    };
    if let Some((k, _)) = keys.iter().find(|(k, given)| *given && !allowed.contains(k)) {
        return Err(invalid(file, format!("line {line}: a '{}' material takes no `{k}`", m.law)));
    }
    check_constants(file, line, m)?;
    let vol = volumetric(file, &m.volumetric)?;
    Ok(match m.law.as_str() {
        "ogden" => {
            let mu = m.mu.clone().unwrap_or_default();
            let alpha = m.alpha.clone().unwrap_or_default();
            if mu.is_empty() || mu.len() != alpha.len() {
                return Err(invalid(
                    file,
                    format!(
                        "line {line}: an Ogden material needs `mu` and `alpha` lists of the same length"
                    ),
                ));
            }
            if alpha.contains(&0.0) {
                return Err(invalid(
                    file,
                    format!("line {line}: Ogden exponents must be non-zero"),
                ));
            }
            HyperelasticLaw::Ogden(Ogden {
                terms: mu.iter().zip(&alpha).map(|(&mu, &alpha)| OgdenTerm { mu, alpha }).collect(),
                kappa: need(m.kappa, "kappa")?,
                volumetric: vol,
            })
        }
        "neo_hookean" => {
            let mu = match m.mu.as_deref() {
                Some([v]) => *v,
                _ => {
                    return Err(invalid(
                        file,
                        format!("line {line}: a neo_hookean material needs `mu = [value]`"),
                    ));
                }
            };
            HyperelasticLaw::NeoHookean(NeoHookean {
                mu,
                kappa: need(m.kappa, "kappa")?,
                volumetric: vol,
            })
        }
        "mooney_rivlin" => HyperelasticLaw::MooneyRivlin(MooneyRivlin {
            c10: need(m.c10, "c10")?,
            c01: need(m.c01, "c01")?,
            kappa: need(m.kappa, "kappa")?,
            volumetric: vol,
        }),
        _ => HyperelasticLaw::SaintVenantKirchhoff(SaintVenantKirchhoff {
            young: need(m.young, "young")?,
            poisson: need(m.poisson, "poisson")?,
        }),
    })
}

/// Read (load factor, value) rows of a measured curve.
fn read_curve(file: &ProblemFile, path: &str, loads: &[f64]) -> Result<Vec<f64>, ProblemError> {
    let p = file.resolve_path(path);
    let text = std::fs::read_to_string(&p)
        .map_err(|source| ProblemError::Io { file: p.clone(), source })?;
    let mut rows = Vec::new();
    let mut first = true;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let header = std::mem::replace(&mut first, false);
        let cols: Vec<&str> = line.split(',').map(str::trim).collect();
        let parsed: Option<Vec<f64>> = cols.iter().map(|c| c.parse().ok()).collect();
        match parsed {
            Some(v) if v.len() == 2 && v.iter().all(|x: &f64| x.is_finite()) => rows.push(v),
            None if header => continue, // a header line
            _ => {
                return Err(ProblemError::Syntax {
                    file: p.clone(),
                    line: i + 1,
                    column: 1,
                    message: format!("expected two numbers: load factor, value; got '{line}'"),
                });
            }
        }
    }
    if rows.len() != loads.len()
        || rows.iter().zip(loads).any(|(r, s)| (r[0] - s).abs() > 1e-9 * s.abs().max(1.0))
    {
        return Err(ProblemError::Invalid {
            file: p,
            message: format!(
                "the measured curve must give one value per load step, at the load factors {loads:?}; it has {} row(s) at {:?}",
                rows.len(),
                rows.iter().map(|r| r[0]).collect::<Vec<_>>()
            ),
        });
    }
    Ok(rows.into_iter().map(|r| r[1]).collect())
}

fn objective(
    file: &ProblemFile,
    specs: &[ObjectiveSpec],
    loads: &[f64],
) -> Result<LoadPathObjective, ProblemError> {
    let mut terms = Vec::new();
    for o in specs {
        let direction = o.direction.ok_or_else(|| {
            invalid(file, format!("a '{}' objective needs `direction = [dx, dy, dz]`", o.kind))
        })?;
        let group = || {
            o.group
                .as_ref()
                .map(|g| g.get_ref().clone())
                .ok_or_else(|| invalid(file, format!("a '{}' objective needs `group`", o.kind)))
        };
        let quantity = match o.kind.as_str() {
            "reaction" => Quantity::Reaction { group: group()?, direction },
            "average_displacement" => Quantity::GroupDisplacement { group: group()?, direction },
            "displacement" => Quantity::PointDisplacement {
                point: o.point.ok_or_else(|| {
                    invalid(file, "a 'displacement' objective needs `point = [x, y, z]`".into())
                })?,
                direction,
            },
            other => {
                return Err(invalid(
                    file,
                    format!(
                        "objective kind '{other}' is not one of a hyperelastic problem's: reaction, displacement, average_displacement"
                    ),
                ));
            }
        };
        terms.push(match &o.measured {
            Some(path) => PathTerm::Misfit {
                quantity,
                measured: read_curve(file, path, loads)?,
                weight: o.weight,
            },
            None => PathTerm::Sum { quantity, weight: o.weight },
        });
    }
    Ok(LoadPathObjective { terms })
}

impl HyperelasticRun {
    /// Set up the run of a problem file on `mesh`.
    pub fn new(
        file: &ProblemFile,
        mesh: &Mesh,
        spec: &HyperelasticSpec,
    ) -> Result<Self, ProblemError> {
        let mut regions = Vec::new();
        for m in &spec.materials {
            file.check_group(mesh, &m.group, "[[hyperelastic.material]]")?;
            let alpha = m.thermal_expansion.unwrap_or(0.0);
            let t_ref = m.t_ref.unwrap_or(293.15);
            if !(alpha.is_finite() && t_ref.is_finite() && t_ref > 0.0) {
                return Err(invalid(
                    file,
                    format!(
                        "line {}: `thermal_expansion` must be finite and `t_ref` a positive temperature (K); got {alpha} and {t_ref}",
                        file.line_of(&m.group)
                    ),
                ));
            }
            regions.push(FiniteRegionSpec {
                group: m.group.get_ref().clone(),
                law: law(file, m)?,
                alpha,
                t_ref,
                body_force: m.body_force,
            });
        }
        let mut bcs = Vec::new();
        for b in &spec.bcs {
            file.check_group(mesh, &b.group, "[[hyperelastic.bc]]")?;
            bcs.push(BcSpec {
                group: b.group.get_ref().clone(),
                kind: file.mechanical_bc_kind(b)?,
            });
        }
        let loads = match (spec.steps, &spec.load_factors) {
            (Some(n), None) if n > 0 => (1..=n).map(|k| k as f64 / n as f64).collect(),
            (None, Some(l)) if !l.is_empty() => l.clone(),
            _ => {
                return Err(invalid(
                    file,
                    "[hyperelastic] needs `steps` (≥ 1) or `load_factors` (not both)".into(),
                ));
            }
        };
        if loads.windows(2).any(|w| w[1] <= w[0]) || loads.iter().any(|&s| s.is_nan() || s <= 0.0) {
            return Err(invalid(
                file,
                format!("[hyperelastic] load factors must be positive and increasing: {loads:?}"),
            ));
        }
        let model = FiniteStrainModel::new(mesh, &regions, &bcs)
            .map_err(|e| invalid(file, e.to_string()))?;
        let mut params = LoadStepParams::default();
        params.newton.rel_tol = file.spec.solver.rel_tol;
        params.newton.max_iterations = file.spec.solver.max_iterations;
        let objective = objective(file, &file.spec.objectives, &loads)?;
        let tip = match &spec.tip {
            Some(t) => {
                file.check_group(mesh, t, "[hyperelastic] tip")?;
                Some(t.get_ref().clone())
            }
            None => None,
        };
        Ok(HyperelasticRun {
            problem: FiniteStrainProblem::new(model, params),
            loads,
            objective,
            memory: if spec.checkpoints == 0 {
                Checkpointing::StoreAll
            } else {
                Checkpointing::Binomial { snapshots: spec.checkpoints }
            },
            path: None,
            tip,
            report: HyperelasticReport::default(),
            initial: None,
            takes_temperature: file.spec.thermal.is_some() || spec.temperature.is_some(),
        })
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
        }
        Ok(())
    }

    /// True when `name` is a parameter of the finite-strain field.
    pub fn owns(name: &str) -> bool {
        name.starts_with("hyperelastic.")
            || name.ends_with(".traction")
            || name.ends_with(".pressure")
            || name.ends_with(".displacement")
    }

    /// Register a parameter into the problem's registry.
    pub fn register(
        &mut self,
        registry: &mut ParamRegistry,
        name: &str,
        bounds: Option<[f64; 2]>,
    ) -> Result<ParamId, RunError> {
        self.problem.register(registry, name, bounds).map_err(|e| RunError::Setup(e.to_string()))
    }

    /// Names this field offers.
    pub fn available_parameters(&self) -> Vec<String> {
        self.problem.available_parameters()
    }

    /// Copy registry values (and the shape's coordinates) in; forgets the last run.
    pub fn apply_parameters(&mut self, reg: &ParamRegistry, shape: &Shape) -> Result<(), RunError> {
        self.problem.apply_parameters(reg).map_err(|e| RunError::Setup(e.to_string()))?;
        if shape.is_active() {
            self.problem.model.coords = shape.coordinates(reg);
            self.problem.model.check_coordinates().map_err(|e| RunError::Setup(e.to_string()))?;
        }
        self.path = None;
        Ok(())
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

    /// True when the last run matches the parameters.
    pub fn is_solved(&self) -> bool {
        self.path.is_some()
    }

    /// Run the load steps.
    pub fn solve(&mut self) -> Result<(), RunError> {
        let t0 = std::time::Instant::now();
        let err = |e: crate::finite_strain::FiniteStrainSolveError| RunError::Setup(e.to_string());
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

    /// J and dJ/dp by the load-stepping adjoint, into a gradient shaped like `reg`.
    pub fn gradient(
        &self,
        reg: &ParamRegistry,
        shape: &Shape,
    ) -> Result<(f64, Gradient), RunError> {
        self.gradient_and_temperature_seed(reg, shape).map(|(j, g, _)| (j, g))
    }

    /// J, dJ/dp into a gradient shaped like `reg`, and, when the model has a temperature
    /// field, the temperature seed T̄ = dJ/dT per node (Σ_k −λ_kᵀ ∂R/∂T over the load steps
    /// plus the reactions' explicit dependence) for the upstream fields' adjoint.
    pub fn gradient_and_temperature_seed(
        &self,
        reg: &ParamRegistry,
        shape: &Shape,
    ) -> Result<(f64, Gradient, Option<Vec<f64>>), RunError> {
        let mut grad = Gradient::zeros(reg);
        if self.objective.terms.is_empty() {
            return Ok((0.0, grad, None));
        }
        let mut want = self.problem.vjp_request();
        want.coords = shape.is_active();
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
        self.problem.gradient_to_registry(&g, &mut grad);
        if shape.is_active() {
            shape.add_partials(&mut grad, &g.coords, 1.0);
        }
        Ok((g.value, grad, g.temperature))
    }

    /// The states of the last run: (load factor, full displacement).
    pub fn states(&self) -> Vec<(f64, &[f64])> {
        self.path
            .as_ref()
            .map(|p| p.states.iter().map(|s| (s.load, s.u.as_slice())).collect())
            .unwrap_or_default()
    }

    /// The output cell of each volume element of the model on `mesh`, the mesh it was built
    /// on (see [`crate::mechanical::output_cell_index`]).
    pub fn cell_output_index(&self, mesh: &Mesh) -> Vec<Option<usize>> {
        let model = &self.problem.model;
        crate::mechanical::output_cell_index(
            mesh,
            (0..model.n_volume_elements()).map(|e| model.element_cell_tag(e)),
        )
    }

    /// The results-file fields of load step `k` (an index into [`states`](Self::states)): `displacement` and `reaction_force` (nodes:
    /// the full residual at the constrained dofs, zero elsewhere, so that its sum over a
    /// condition's nodes is that condition's reaction), and per volume cell the means over its
    /// quadrature points of the Cauchy stress (`cauchy_stress`, a `Tensor6`), its von Mises
    /// value, the volume ratio `J` and the principal stretches λ₁ ≥ λ₂ ≥ λ₃ (NaN in cells the
    /// model does not cover).
    ///
    /// `cell_of` is [`cell_output_index`](Self::cell_output_index) of the mesh, and `n_cells`
    /// the mesh's number of top-dimensional cells: computed once for every step.
    pub fn step_fields(
        &self,
        k: usize,
        cell_of: &[Option<usize>],
        n_cells: usize,
    ) -> Result<Vec<gradfem_io::h5::Field>, RunError> {
        use gradfem_io::h5::{Field, FieldValues};
        use gradfem_mechanical::finite::PointOutput;
        let states = self.states();
        let &(load, u) = states.get(k).ok_or_else(|| {
            RunError::Setup(format!("load step {k} of {} does not exist", states.len()))
        })?;
        let model = &self.problem.model;
        let err = |e: gradfem_mechanical::finite::FiniteStrainError| {
            RunError::Setup(format!("load factor {load}: {e}"))
        };
        let per_element = model.element_stresses(u, load).map_err(err)?;
        let residual = model.full_residual(u, load).map_err(err)?;
        let mut reaction = vec![[0.0; 3]; model.n_nodes()];
        for (d, owner) in model.constraint_owner().iter().enumerate() {
            if owner.is_some() {
                reaction[d / 3][d % 3] = residual[d];
            }
        }
        let mut cauchy = vec![[f64::NAN; 6]; n_cells];
        let mut von_mises = vec![f64::NAN; n_cells];
        let mut volume_ratio = vec![f64::NAN; n_cells];
        let mut stretches = vec![[f64::NAN; 3]; n_cells];
        for (e, points) in per_element.iter().enumerate() {
            let Some(c) = cell_of.get(e).copied().flatten() else { continue };
            let n = points.len() as f64;
            let (mut s, mut vm, mut j, mut l) = ([0.0; 6], 0.0, 0.0, [0.0; 3]);
            for (f, p) in points {
                let o = PointOutput::of(f, p);
                for i in 0..6 {
                    s[i] += o.cauchy[i] / n;
                }
                vm += gradfem_mechanical::linear::von_mises(&o.cauchy) / n;
                j += o.j / n;
                for i in 0..3 {
                    l[i] += o.stretches[i] / n;
                }
            }
            cauchy[c] = s;
            von_mises[c] = vm;
            volume_ratio[c] = j;
            stretches[c] = l;
        }
        Ok(vec![
            Field::node(
                "displacement",
                "m",
                FieldValues::Vector(u.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect()),
            ),
            Field::node("reaction_force", "N", FieldValues::Vector(reaction)),
            Field::cell("cauchy_stress", "Pa", FieldValues::symmetric_from_voigt(&cauchy)),
            Field::cell("von_mises", "Pa", FieldValues::Scalar(von_mises)),
            Field::cell("volume_ratio_J", "1", FieldValues::Scalar(volume_ratio)),
            Field::cell("principal_stretches", "1", FieldValues::Vector(stretches)),
        ])
    }

    /// The mean displacement of a group's nodes at the last step.
    pub fn mean_displacement(&self, group: &str) -> Option<[f64; 3]> {
        let (_, u) = *self.states().last()?;
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

/// Per-step misfits and their derivatives, for least-squares identification
/// ([`crate::identify_fem`]).
impl HyperelasticRun {
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
