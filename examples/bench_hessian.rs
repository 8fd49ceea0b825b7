//! Benchmark: the cost of an exact Hessian-vector product (tangent-linear solve + second-order
//! adjoint) against a gradient (adjoint), on nonlinear steady heat conduction.
//!
//! The unit cube in N×N×N cubes of 6 tetrahedra (P1), k(T) = k₀(1 − 2·10⁻³(T − 300)),
//! a source, T = 300 K on x = 0, convection on z = 1; objective the p-norm maximum (p = 8);
//! registered: the per-element conductivity, the source and the heat-transfer coefficient.
//! Timings are the fastest of `--repeat` runs, each after the forward solve (which the
//! gradient and the product share).
//!
//! With `--physics electrothermal` the cube also conducts current (0.5 V from x = 0 to x = 1,
//! σ₀ = 5·10⁴ S/m, ρ(T) linear with α_R = 1.25·10⁻³/K, the ρ(T) cycle solved monolithic), both
//! x faces held at 300 K: registered the per-element σ₀, the voltage, α_R, k and h. With
//! `--physics thermoelastic` the heated cube also expands (E = 160 GPa, ν = 0.22,
//! α = 2.6·10⁻⁶/K, clamped at x = 0; objective the mean deflection of x = 1 along y and z): the
//! whole chain I → Q → T → u, registered the voltage, α_R, k, h, E per element, ν and α.
//! With `--physics hyperelastic` the cube is the peers' ogden3d solid (one-term compressible
//! Ogden, μ = 1, α = 3, κ = 10, clamped at x = 0, the dead traction (0.5, 0, 0) on x = 1 in 3
//! load steps; objective the mean x-displacement of x = 1 summed over the steps): registered
//! μ₁, α₁, κ, the per-element factor of μ₁ and the traction. Its gradient runs the load
//! steps' adjoint (one transposed solve per step), its product three solves per step.
//!
//! With `--physics transient` (or `transient-linear`, without k(T)) the thermal cube heats up
//! from 300 K, stepped in time (BDF2, 20 steps of 0.05 s, ρc = 1), with the time integral of
//! the p-norm maximum as objective; registered also ρc and the initial temperature. Its
//! gradient is the discrete adjoint of the steps, its product the tangent-linear run and the
//! second-order adjoint of the steps (with k(T) every step factors its matrix once in each
//! pass; a constant k factors once per step kind). `--physics transient-chain` steps the
//! thermo-elastic cube's chain I → Q → T(t) → u(t) in the same way (σ without α_R, so the
//! electrical field is solved once; objective the time integral of the mean deflection;
//! registered the voltage, k, h, E per element, ν, α and ρc). `--physics transient-cycle`
//! keeps α_R: the φ ⇄ T cycle is stepped as one coupled (monolithic) solve per step, its
//! product the engine's tangent-linear run and second-order adjoint through the cycle's
//! steps (each refactors the step's coupled Jacobian; registered also α_R).
//!
//! `--shape` adds a shape parameter to every cube (steady and in time): the
//! morph `height` (s₀ = 1) that stretches the cube along z, X_z ↦ X_z + (s − 1) X_z, registered
//! beside the others (its products differentiate every element along the morph field).
//!
//! `--linear lu` solves the non-symmetric systems (the thermal tangent, the cycle's Jacobian)
//! by sparse LU instead of the default block-preconditioned GMRES (and every other field by LU
//! too: compare it on `thermal` and `electrothermal`).
//!
//! Run: `cargo run --release --example bench_hessian -- --n 30 [--physics electrothermal]
//! [--shape]`. Prints one JSON line: physics, shape, n, unknowns, elements, entries, forward_s,
//! gradient_s, hvp_s, hvp_over_gradient, hvp_over_forward_plus_gradient, linear_solver.

use std::collections::BTreeMap;
use std::time::Instant;

use gradfem::api::Simulation;

fn main() -> anyhow::Result<()> {
    let mut n = 20usize;
    let mut repeat = 3usize;
    let mut physics = String::from("thermal");
    let mut linear = String::from("auto");
    let mut shape = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--n" => {
                n = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&v| v > 0)
                    .ok_or_else(|| anyhow::anyhow!("--n takes a positive integer"))?
            }
            "--repeat" => {
                repeat = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&v| v > 0)
                    .ok_or_else(|| anyhow::anyhow!("--repeat takes a positive count"))?
            }
            "--physics" => {
                physics =
                    args.next().ok_or_else(|| anyhow::anyhow!("--physics takes a physics name"))?
            }
            "--linear" => {
                linear = args.next().ok_or_else(|| anyhow::anyhow!("--linear takes auto or lu"))?
            }
            "--shape" => shape = true,
            other => anyhow::bail!(
                "unknown argument '{other}' (expected --n N [--repeat R] [--physics thermal|electrothermal|thermoelastic|hyperelastic|transient|transient-linear|transient-chain|transient-cycle] [--linear auto|lu] [--shape])"
            ),
        }
    }
    let text = match physics.as_str() {
        "thermal" => thermal_cube(n),
        "electrothermal" => electrothermal_cube(n),
        "thermoelastic" => thermoelastic_cube(n),
        "hyperelastic" => ogden_cube(n),
        "transient" => transient_cube(n, true),
        "transient-linear" => transient_cube(n, false),
        "transient-chain" => transient_chain_cube(n),
        "transient-cycle" => transient_cycle_cube(n),
        other => anyhow::bail!(
            "--physics {other}: expected thermal, electrothermal, thermoelastic, hyperelastic, transient, transient-linear, transient-chain or transient-cycle"
        ),
    }
    .replace(
        "[solver]\nrel_tol = 1e-10\n",
        &format!("[solver]\nrel_tol = 1e-10\nlinear = \"{linear}\"\n"),
    );
    let text = if shape {
        text.replacen("register = [", "register = [\"morph.height\", ", 1) + HEIGHT_MORPH
    } else {
        text
    };
    let mut sim = Simulation::from_toml("bench_hessian.toml", &text)?;
    let t = Instant::now();
    sim.solve()?;
    let forward_s = t.elapsed().as_secs_f64();
    let names = sim.registered();
    let mut direction = BTreeMap::new();
    for (k, name) in names.iter().enumerate() {
        let values = sim.parameter(name)?;
        let d: Vec<f64> = values
            .iter()
            .enumerate()
            .map(|(i, v)| 0.1 * v * ((i + k) as f64 * 0.37).sin())
            .collect();
        direction.insert(name.clone(), d);
    }
    let (mut gradient_s, mut hvp_s) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..repeat {
        let t = Instant::now();
        let g = sim.gradient()?;
        gradient_s = gradient_s.min(t.elapsed().as_secs_f64());
        std::hint::black_box(g);
        let t = Instant::now();
        let h = sim.hvp(&direction)?;
        hvp_s = hvp_s.min(t.elapsed().as_secs_f64());
        std::hint::black_box(h);
    }
    let entries = sim.parameter_vector().len();
    let (unknowns, solver) = match sim.problem().hyperelastic() {
        Some(h) => (h.problem.model.n_unknowns(), format!("{:?}", h.problem.params.linear_solver)),
        None => {
            let thermal = sim.problem().thermal();
            (thermal.model.n_unknowns(), thermal.last_solve.linear_solver.clone())
        }
    };
    let elements = sim.mesh().n_cells_of_dim(3);
    println!(
        "{}",
        serde_json::json!({
            "physics": physics,
            "shape": shape,
            "n": n,
            "unknowns": unknowns,
            "elements": elements,
            "entries": entries,
            "forward_s": forward_s,
            "gradient_s": gradient_s,
            "hvp_s": hvp_s,
            "hvp_over_gradient": hvp_s / gradient_s,
            "hvp_over_forward_plus_gradient": hvp_s / (forward_s + gradient_s),
            "linear_solver": solver,
        })
    );
    Ok(())
}

/// The morph of `--shape`: the cube's height.
const HEIGHT_MORPH: &str = r#"
[[morph]]
name = "height"
value = 1.0
axis = "z"
knots = [[0.0, 0.0], [1.0, 1.0]]
direction = [0.0, 0.0, 1.0]
"#;

/// Nonlinear conduction on the unit cube (module docs).
fn thermal_cube(n: usize) -> String {
    format!(
        r#"
[mesh]
box = {{ lengths = [1.0, 1.0, 1.0], divisions = [{n}, {n}, {n}], cell = "tet4" }}

[[thermal.material]]
group = "domain"
k = 1.0
source = 100.0
law = {{ kind = "polynomial", t_ref = 300.0, coefficients = [-2.0e-3] }}

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0

[[thermal.bc]]
group = "zmax"
kind = "convection"
h = 5.0
t_inf = 300.0

[[objective]]
kind = "max"
group = "domain"
p = 8.0

[parameters]
register = ["thermal.k_elem.domain", "thermal.q.domain", "bc.zmax.h"]

[solver]
rel_tol = 1e-10
"#
    )
}

/// The thermal cube stepped in time (module docs); `nonlinear`: with k(T).
fn transient_cube(n: usize, nonlinear: bool) -> String {
    let mut text =
        thermal_cube(n).replace("[[objective]]", &(transient_table(20, 1.0) + "[[objective]]"));
    text = text.replace(
        r#"register = ["thermal.k_elem.domain", "thermal.q.domain", "bc.zmax.h"]"#,
        r#"register = ["thermal.k_elem.domain", "thermal.q.domain", "bc.zmax.h", "thermal.rho_c.domain", "thermal.initial_temperature"]"#,
    );
    if !nonlinear {
        text = text.replace(
            "law = { kind = \"polynomial\", t_ref = 300.0, coefficients = [-2.0e-3] }\n",
            "",
        );
    }
    text
}

/// The thermo-elastic cube stepped in time, without ρ(T) (module docs).
fn transient_chain_cube(n: usize) -> String {
    thermoelastic_cube(n)
        .replace("alpha_r = 1.25e-3\n", "")
        .replace("\"electrical.alpha_r.domain\", ", "")
        .replace(
            "\"mechanical.alpha.domain\"]",
            "\"mechanical.alpha.domain\", \"thermal.rho_c.domain\"]",
        )
        .replace("[[objective]]", &(transient_table(10, 1.0e3) + "[[objective]]"))
}

/// The thermo-elastic cube stepped in time with ρ(T): the φ ⇄ T cycle in time (module docs).
fn transient_cycle_cube(n: usize) -> String {
    thermoelastic_cube(n)
        .replace(
            "\"mechanical.alpha.domain\"]",
            "\"mechanical.alpha.domain\", \"thermal.rho_c.domain\"]",
        )
        .replace("[[objective]]", &(transient_table(10, 1.0e3) + "[[objective]]"))
}

/// The `[transient]` table of the cubes in time: BDF2 steps of 0.05 s from 300 K, the time
/// integral of the objective.
fn transient_table(steps: usize, rho_c: f64) -> String {
    format!(
        "[transient]\ndt = 0.05\nsteps = {steps}\nscheme = \"bdf2\"\n\
         heat_capacity = [{{ group = \"domain\", rho_c = {rho_c:e} }}]\n\
         initial_temperature = 300.0\nobjective = \"integral\"\n\n"
    )
}

/// The cube heated by its own current, on the ρ(T) cycle (module docs).
fn electrothermal_cube(n: usize) -> String {
    format!(
        r#"
[mesh]
box = {{ lengths = [1.0, 1.0, 1.0], divisions = [{n}, {n}, {n}], cell = "tet4" }}

[[thermal.material]]
group = "domain"
k = 50.0

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0

[[thermal.bc]]
group = "xmax"
kind = "temperature"
value = 300.0

[[thermal.bc]]
group = "zmax"
kind = "convection"
h = 5.0
t_inf = 300.0

[[electrical.conductor]]
group = "domain"
sigma = 5.0e4
alpha_r = 1.25e-3
t_ref = 300.0

[[electrical.terminal]]
group = "xmin"
kind = "voltage"
value = 0.5

[[electrical.terminal]]
group = "xmax"
kind = "ground"

[coupling]
scheme = "monolithic"

[[objective]]
kind = "max"
group = "domain"
p = 8.0

[parameters]
register = ["electrical.sigma_elem.domain", "load.xmin.voltage", "electrical.alpha_r.domain", "thermal.k.domain", "bc.zmax.h"]

[solver]
rel_tol = 1e-10
"#
    )
}

/// The heated cube as an actuator: the electro-thermal cube with thermo-elasticity (module
/// docs).
fn thermoelastic_cube(n: usize) -> String {
    let text = electrothermal_cube(n)
        .replace(
            "[[objective]]\nkind = \"max\"\ngroup = \"domain\"\np = 8.0",
            "[[objective]]\nkind = \"average_displacement\"\ngroup = \"xmax\"\ndirection = [0.0, 1.0, 1.0]\nweight = 1.0e6",
        )
        .replace(
            "register = [\"electrical.sigma_elem.domain\", \"load.xmin.voltage\", \"electrical.alpha_r.domain\", \"thermal.k.domain\", \"bc.zmax.h\"]",
            "register = [\"load.xmin.voltage\", \"electrical.alpha_r.domain\", \"thermal.k.domain\", \"bc.zmax.h\", \"mechanical.young_elem.domain\", \"mechanical.poisson.domain\", \"mechanical.alpha.domain\"]",
        );
    text + r#"
[[mechanical.material]]
group = "domain"
young = 160.0e9
poisson = 0.22
alpha = 2.6e-6
t_ref = 300.0

[[mechanical.bc]]
group = "xmin"
kind = "fixed"
"#
}

/// The ogden3d cube under a dead traction in 3 load steps (module docs).
fn ogden_cube(n: usize) -> String {
    format!(
        r#"
[mesh]
box = {{ lengths = [1.0, 1.0, 1.0], divisions = [{n}, {n}, {n}], cell = "tet4" }}

[[hyperelastic.material]]
group = "domain"
law = "ogden"
mu = [1.0]
alpha = [3.0]
kappa = 10.0

[[hyperelastic.bc]]
group = "xmin"
kind = "fixed"

[[hyperelastic.bc]]
group = "xmax"
kind = "traction"
traction = [0.5, 0.0, 0.0]

[hyperelastic]
steps = 3

[[objective]]
kind = "average_displacement"
group = "xmax"
direction = [1.0, 0.0, 0.0]

[parameters]
register = ["hyperelastic.mu1.domain", "hyperelastic.alpha1.domain", "hyperelastic.kappa.domain", "hyperelastic.scale_elem.domain", "bc.xmax.traction"]

[solver]
rel_tol = 1e-10
"#
    )
}
