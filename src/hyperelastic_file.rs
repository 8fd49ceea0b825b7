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

use gradfem_mechanical::BcSpec;
use gradfem_mechanical::finite::{FiniteRegionSpec, FiniteStrainModel, HyperelasticLaw};
use gradfem_mechanical::hyperelastic::{
    MooneyRivlin, NeoHookean, Ogden, OgdenTerm, SaintVenantKirchhoff, Volumetric,
};
use gradfem_mesh::Mesh;
use gradfem_solvers::checkpoint::Checkpointing;

use gradfem_coupling::RunError;
use gradfem_coupling::fields::finite_strain::{
    FiniteStrainProblem, LoadPathObjective, LoadStepParams, PathTerm, Quantity,
};
use gradfem_coupling::fields::hyperelastic::HyperelasticField;

pub use crate::problem::{HyperMaterialSpec, HyperTemperatureSpec, HyperelasticSpec};
use crate::problem::{ObjectiveSpec, ProblemError, ProblemFile};

/// The most load steps a `[hyperelastic]` table may ask for.
pub const MAX_LOAD_STEPS: usize = 100_000;

fn invalid(file: &ProblemFile, message: String) -> ProblemError {
    ProblemError::invalid_in(&file.path, &file.source, message)
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
pub fn read_curve(file: &ProblemFile, path: &str, loads: &[f64]) -> Result<Vec<f64>, ProblemError> {
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

/// The finite-strain field of a problem file's `[hyperelastic]` table on `mesh`.
pub fn build_field(
    file: &ProblemFile,
    mesh: &Mesh,
    spec: &HyperelasticSpec,
) -> Result<HyperelasticField, ProblemError> {
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
        bcs.push(BcSpec { group: b.group.get_ref().clone(), kind: file.mechanical_bc_kind(b)? });
    }
    if let Some(n) = spec.steps
        && n > MAX_LOAD_STEPS
    {
        return Err(invalid(
            file,
            format!(
                "{}[hyperelastic] `steps` = {n}: at most {MAX_LOAD_STEPS} load steps (the \
                 increments adapt within each step; a few tens are usual)",
                file.at_table("[hyperelastic]", 0, Some("steps"))
            ),
        ));
    }
    let loads = match (spec.steps, &spec.load_factors) {
        (Some(n), None) if n > 0 => (1..=n).map(|k| k as f64 / n as f64).collect(),
        (None, Some(l)) if !l.is_empty() => l.clone(),
        _ => {
            let key = if spec.load_factors.is_some() { "load_factors" } else { "steps" };
            return Err(invalid(
                file,
                format!(
                    "{}[hyperelastic] needs `steps` (≥ 1) or `load_factors` (not both)",
                    file.at_table("[hyperelastic]", 0, Some(key))
                ),
            ));
        }
    };
    if loads.windows(2).any(|w| w[1] <= w[0]) || loads.iter().any(|&s| s.is_nan() || s <= 0.0) {
        return Err(invalid(
            file,
            format!(
                "{}[hyperelastic] `load_factors` must be positive and increasing: {loads:?}",
                file.at_table("[hyperelastic]", 0, Some("load_factors"))
            ),
        ));
    }
    let model =
        FiniteStrainModel::new(mesh, &regions, &bcs).map_err(|e| invalid(file, e.to_string()))?;
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
    let memory = if spec.checkpoints == 0 {
        Checkpointing::StoreAll
    } else {
        Checkpointing::Binomial { snapshots: spec.checkpoints }
    };
    Ok(HyperelasticField::new(
        FiniteStrainProblem::new(model, params),
        loads,
        objective,
        memory,
        tip,
        file.spec.thermal.is_some() || spec.temperature.is_some(),
    ))
}

/// The results-file fields of load step `k` (an index into [`HyperelasticField::states`]): `displacement` and `reaction_force` (nodes:
/// the full residual at the constrained dofs, zero elsewhere, so that its sum over a
/// condition's nodes is that condition's reaction), and per volume cell the means over its
/// quadrature points of the Cauchy stress (`cauchy_stress`, a `Tensor6`), its von Mises
/// value, the volume ratio `J` and the principal stretches λ₁ ≥ λ₂ ≥ λ₃ (NaN in cells the
/// model does not cover).
///
/// `cell_of` is [`HyperelasticField::cell_output_index`] of the mesh, and `n_cells`
/// the mesh's number of top-dimensional cells: computed once for every step.
pub fn step_fields(
    field: &HyperelasticField,
    k: usize,
    cell_of: &[Option<usize>],
    n_cells: usize,
) -> Result<Vec<gradfem_io::h5::Field>, RunError> {
    use gradfem_io::h5::{Field, FieldValues};
    use gradfem_mechanical::finite::PointOutput;
    let states = field.states();
    let &(load, u) = states.get(k).ok_or_else(|| {
        RunError::Setup(format!("load step {k} of {} does not exist", states.len()))
    })?;
    let model = &field.problem.model;
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
