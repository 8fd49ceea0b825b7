//! Hessian-vector products through time steps: the tangent-linear model of a transient heat
//! run and the second-order adjoint of its steps, through the library API. Second-order Taylor
//! tests (remainders at rate 3) for every time integrator, linear and nonlinear conduction,
//! consistent and lumped mass and every time rule (final state, sum, integral, value at a
//! time, smooth maximum over time, misfit to a measured series), with every kind of thermal
//! parameter (k per region and per element, Q, h, T∞, q_in, a fixed temperature, ρc, the
//! initial temperature); the product against central differences of adjoint gradients, the
//! symmetry of the dense Hessian; the whole chain I → Q → T(t) → u(t) (the electrical field
//! solved once, the mechanical field at every state) under every time rule, and finite strain
//! following a temperature in time; the chain with ρ(T), whose φ ⇄ T cycle steps as one
//! coupled solve per step, under every integrator and time rule, checkpointed, staggered and
//! with every node coordinate; the Laplace posterior of a misfit in time; and what is not
//! covered (node coordinates with a lumped mass) refused with a message.

use std::collections::BTreeMap;

use gradfem::api::Simulation;
use gradfem_solvers::taylor::random_direction_scaled;
use rstest::rstest;

#[path = "support/heated_strip.rs"]
mod heated_strip;
use heated_strip::{ALL, strip, transient};

/// A slab cooling from 600 K: a fixed face, convection, a heat flux and a source; `scheme`
/// the `[transient]` integrator lines, `rule` the time rule lines, `law` the conductivity's
/// temperature dependence, `objective` the `[[objective]]` body.
fn slab(scheme: &str, rule: &str, law: &str, objective: &str) -> String {
    format!(
        r#"
[mesh]
box = {{ lengths = [0.02, 0.01, 0.004], divisions = [5, 2, 1], cell = "hex8" }}

[[thermal.material]]
group = "domain"
k = 40.0
source = 2.0e7
{law}

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0

[[thermal.bc]]
group = "zmax"
kind = "convection"
h = 800.0
t_inf = 295.0

[[thermal.bc]]
group = "ymin"
kind = "heat_flux"
q_in = 2.0e4

[transient]
dt = 0.4
steps = 8
{scheme}
heat_capacity = [{{ group = "domain", rho_c = 3.0e6 }}]
initial_temperature = 600.0
{rule}

[[objective]]
{objective}

[parameters]
register = ["thermal.k_elem.domain", "thermal.q.domain", "bc.zmax.h", "bc.zmax.t_inf",
            "bc.ymin.flux", "bc.xmin.temperature", "thermal.rho_c.domain",
            "thermal.initial_temperature"]

[solver]
rel_tol = 1e-13
"#
    )
}

const POLYNOMIAL: &str =
    r#"law = { kind = "polynomial", t_ref = 300.0, coefficients = [-1.5e-3, 2.0e-6] }"#;
const POINT: &str = "kind = \"point\"\npoint = [0.01, 0.005, 0.002]";
const AVERAGE: &str = "kind = \"average\"\ngroup = \"domain\"";
const INTEGRAL_SQUARE: &str = "kind = \"integral_square\"\ngroup = \"domain\"";
const MAX6: &str = "kind = \"max\"\ngroup = \"domain\"\np = 6.0";

/// The measured series of the misfit cases: (time, value) rows between the states.
const MEASURED: &str = "time,value\n0.2,580.0\n0.6,520.0\n1.0,490.0\n1.4,470.0\n1.8,455.0\n\
                        2.2,440.0\n2.8,430.0\n3.2,420.0\n";

/// The slab's simulation, written with the measured series beside it (for `objective =
/// "misfit"`).
fn simulation(scheme: &str, rule: &str, law: &str, objective: &str) -> Simulation {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("measured.csv"), MEASURED).unwrap();
    let file = dir.path().join("slab.toml");
    let sim = Simulation::from_toml(&file, &slab(scheme, rule, law, objective)).unwrap();
    // The series is read while the problem is set up.
    drop(dir);
    sim
}

#[rstest]
#[case::bdf2_final_point("scheme = \"bdf2\"", "objective = \"final\"", "", POINT)]
#[case::euler_sum_integral_square(
    "scheme = \"implicit_euler\"",
    "objective = \"sum\"",
    "",
    INTEGRAL_SQUARE
)]
#[case::crank_nicolson_nonlinear_integral(
    "scheme = \"crank_nicolson\"",
    "objective = \"integral\"",
    POLYNOMIAL,
    MAX6
)]
#[case::theta_nonlinear_at(
    "scheme = \"theta\"\ntheta = 0.7",
    "objective = \"at\"\ntime = 1.3",
    POLYNOMIAL,
    AVERAGE
)]
#[case::bdf2_nonlinear_max_over_time(
    "scheme = \"bdf2\"",
    "objective = \"max\"\nsharpness = 0.05",
    POLYNOMIAL,
    POINT
)]
#[case::lumped_euler_misfit(
    "scheme = \"implicit_euler\"\nmass = \"lumped\"",
    "objective = \"misfit\"\nmeasured = \"measured.csv\"",
    "",
    POINT
)]
#[case::crank_nicolson_nonlinear_misfit(
    "scheme = \"crank_nicolson\"",
    "objective = \"misfit\"\nmeasured = \"measured.csv\"",
    POLYNOMIAL,
    AVERAGE
)]
fn transient_second_order_taylor_remainders_fall_at_rate_three(
    #[case] scheme: &str,
    #[case] rule: &str,
    #[case] law: &str,
    #[case] objective: &str,
) {
    let mut sim = simulation(scheme, rule, law, objective);
    let p = sim.parameter_vector();
    let dir = random_direction_scaled(&p, 5);
    let t = sim.taylor_test_second_order(&dir, 0.05, 5).unwrap();
    eprintln!("{scheme} {rule}: remainders {:?} rates {:?}", t.remainders, t.rates);
    assert!(t.second.abs() > 0.0, "δpᵀHδp vanished: nothing was tested");
    let rate = t.min_rate().expect("remainders above round-off");
    assert!(rate >= 2.9, "second-order rate {rate:.3} (remainders {:?})", t.remainders);
    assert!(t.remainders_first[0] > 10.0 * t.remainders[0]);
}

/// H·δp against central differences of adjoint gradients, entry by entry (k per element
/// among them), on a nonlinear Crank–Nicolson run with the smooth maximum over time.
#[test]
fn transient_hessian_vector_product_matches_differences_of_gradients() {
    let mut sim = simulation(
        "scheme = \"crank_nicolson\"",
        "objective = \"max\"\nsharpness = 0.05",
        POLYNOMIAL,
        MAX6,
    );
    let dir = random_direction_scaled(&sim.parameter_vector(), 13);
    assert_hvp_matches_differences(&mut sim, &dir);
}

/// H·δp along `dir` against central differences of adjoint gradients at p ± 1e-4 δp, entry by
/// entry.
fn assert_hvp_matches_differences(sim: &mut Simulation, dir: &[f64]) {
    let p0 = sim.parameter_vector();
    let sizes: Vec<(String, usize)> = sim
        .registered()
        .into_iter()
        .map(|n| (n.clone(), sim.parameter(&n).unwrap().len()))
        .collect();
    let split = |v: &[f64]| {
        let mut out = BTreeMap::new();
        let mut at = 0;
        for (name, n) in &sizes {
            out.insert(name.clone(), v[at..at + n].to_vec());
            at += n;
        }
        out
    };
    let hv = sim.hvp(&split(dir)).unwrap();
    let hv = sim.flatten(&hv);
    let gradient_at = |sim: &mut Simulation, s: f64| {
        let p: Vec<f64> = p0.iter().zip(dir).map(|(a, b)| a + s * b).collect();
        for (name, v) in split(&p) {
            sim.set_parameter_values(&name, &v).unwrap();
        }
        let g = sim.gradient().unwrap();
        sim.flatten(&g)
    };
    let h = 1e-4;
    let gp = gradient_at(sim, h);
    let gm = gradient_at(sim, -h);
    let largest = hv.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    for i in 0..hv.len() {
        let fd = (gp[i] - gm[i]) / (2.0 * h);
        let scale = hv[i].abs().max(fd.abs()).max(1e-300);
        assert!(
            (hv[i] - fd).abs() <= 1e-5 * scale + 1e-9 * largest,
            "entry {i}: H·δp {} vs differences {fd}",
            hv[i]
        );
    }
}

/// The dense Hessian of the shipped quenched plate (BDF2, 40 steps, k, ρc, h, T⁰) is
/// symmetric: the tangent-linear steps and the second-order adjoint are each other's
/// transposes. With a constant conductivity the temperatures are affine in T⁰, so its row
/// vanishes on the diagonal but not across (T⁰ scales the response to k, ρc and h).
#[test]
fn transient_dense_hessian_is_symmetric() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sim = Simulation::from_file(root.join("examples/transient_slab.toml")).unwrap();
    let n = sim.parameter_vector().len();
    let h = sim.hessian().unwrap();
    for i in 0..3 {
        assert!(h[i * n + i] != 0.0, "H[{i}][{i}] vanished");
        assert!(h[i * n + 3] != 0.0, "H[{i}][3] vanished");
    }
    assert!(h[3 * n + 3].abs() <= 1e-12 * h[3 * n].abs(), "T⁰ enters J affinely");
    for i in 0..n {
        for j in 0..i {
            let (a, b) = (h[i * n + j], h[j * n + i]);
            let local = (h[i * n + i].abs() * h[j * n + j].abs()).sqrt().max(a.abs()).max(1e-300);
            assert!((a - b).abs() <= 1e-8 * local, "H[{i}][{j}] = {a} but H[{j}][{i}] = {b}");
        }
    }
}

/// A resistive bar switched on at t = 0 (0.5 V across x; both ends at 293.15 K, a cooled
/// top; clamped at x = 0): the electrical field solved once, the thermal field stepped in
/// time, the mechanical field at every state. `rule` is the `[transient]` objective lines,
/// `objectives` the `[[objective]]` tables, `scheme` the integrator lines.
fn chain(rule: &str, objectives: &str, scheme: &str) -> Simulation {
    Simulation::from_toml("chain.toml", &chain_text(rule, objectives, scheme)).unwrap()
}

/// The text of [`chain`].
fn chain_text(rule: &str, objectives: &str, scheme: &str) -> String {
    format!(
        r#"
[mesh]
box = {{ lengths = [0.01, 0.002, 0.0005], divisions = [8, 2, 1], cell = "tet4" }}

[[thermal.material]]
group = "domain"
k = 30.0
law = {{ kind = "polynomial", t_ref = 293.15, coefficients = [-1.0e-3] }}

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 293.15

[[thermal.bc]]
group = "xmax"
kind = "temperature"
value = 293.15

[[thermal.bc]]
group = "zmax"
kind = "convection"
h = 500.0
t_inf = 293.15

[[electrical.conductor]]
group = "domain"
sigma = 2.0e4

[[electrical.terminal]]
group = "xmin"
kind = "voltage"
value = 0.5

[[electrical.terminal]]
group = "xmax"
kind = "ground"

[[mechanical.material]]
group = "domain"
young = 160.0e9
poisson = 0.22
alpha = 2.6e-6
t_ref = 293.15

[[mechanical.bc]]
group = "xmin"
kind = "fixed"

[mechanical]
tip = "xmax"

{objectives}

[transient]
dt = 0.05
steps = 10
{scheme}
heat_capacity = [{{ group = "domain", rho_c = 1.6e6 }}]
initial_temperature = 293.15
{rule}

[parameters]
register = ["load.xmin.voltage", "electrical.sigma_elem.domain", "thermal.k.domain",
            "bc.zmax.h", "mechanical.alpha.domain", "mechanical.young.domain",
            "thermal.rho_c.domain"]

[solver]
rel_tol = 1e-13
"#
    )
}

/// A measured history for the chain's misfit rule (times of its states, values near its
/// objective's), written once per test process into cargo's scratch directory.
fn chain_history() -> String {
    static PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let path = PATH.get_or_init(|| {
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("chain_history.csv");
        let rows: String = (1..=10)
            .map(|k| format!("{:.2},{:.6}\n", 0.05 * k as f64, 0.06 + 0.004 * k as f64))
            .collect();
        std::fs::write(&path, format!("time_s,value\n{rows}")).unwrap();
        path
    });
    path.display().to_string()
}

const TIP: &str = "[[objective]]\nkind = \"average_displacement\"\ngroup = \"xmax\"\ndirection = [1.0, 0.0, 0.0]\nweight = 1.0e6\n";
const HOT: &str = "[[objective]]\nkind = \"max\"\ngroup = \"domain\"\np = 8.0\nweight = 0.01\n";
const CURRENT_OUT: &str = "[[objective]]\nkind = \"current\"\nterminal = \"xmax\"\nweight = 0.1\n";

/// The chain I → Q → T(t) → u(t): the electrical field's tangent and second-order adjoint once,
/// the steps', and the mechanical field's at every state, under every kind of time rule and
/// with objective terms on all three fields (a terminal current, a term on the electrical
/// unknowns, inside a misfit over time too: unlike a smooth maximum, a misfit sees the
/// derivative of a term that is the same at every state).
#[rstest]
#[case::final_tip("objective = \"final\"", TIP, "scheme = \"bdf2\"")]
#[case::integral_of_all_three(
    "objective = \"integral\"",
    &format!("{TIP}{HOT}{CURRENT_OUT}"),
    "scheme = \"crank_nicolson\""
)]
#[case::max_over_time("objective = \"max\"\nsharpness = 2.0", &format!("{TIP}{HOT}"), "scheme = \"bdf2\"")]
#[case::misfit_over_time_with_a_terminal_current(
    &format!("objective = \"misfit\"\nmeasured = \"{}\"", chain_history()),
    &format!("{TIP}{CURRENT_OUT}"),
    "scheme = \"bdf2\""
)]
#[case::at_a_time("objective = \"at\"\ntime = 0.27", TIP, "scheme = \"implicit_euler\"")]
fn the_whole_chain_in_time_passes_the_second_order_taylor_test(
    #[case] rule: &str,
    #[case] objectives: &str,
    #[case] scheme: &str,
) {
    let mut sim = chain(rule, objectives, scheme);
    let dir = random_direction_scaled(&sim.parameter_vector(), 3);
    let t = sim.taylor_test_second_order(&dir, 0.05, 5).unwrap();
    eprintln!("{rule}: remainders {:?} rates {:?}", t.remainders, t.rates);
    assert!(t.second.abs() > 0.0, "δpᵀHδp vanished: nothing was tested");
    let rate = t.min_rate().expect("remainders above round-off");
    assert!(rate >= 2.9, "second-order rate {rate:.3} (remainders {:?})", t.remainders);
}

/// The shipped step response of the microactuator (examples/microactuator_step.toml: the
/// tet10 actuator, 0 → 5 V, 30 BDF2 steps, the tip deflection at the end) with its
/// hot-arm-width morph: the second-order Taylor test through the whole chain in time.
#[test]
fn the_microactuator_step_response_has_exact_hessian_vector_products() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sim = Simulation::from_file(root.join("examples/microactuator_step.toml")).unwrap();
    assert!(sim.registered().iter().any(|n| n == "morph.hot_arm_width"));
    let dir = random_direction_scaled(&sim.parameter_vector(), 7);
    let t = sim.taylor_test_second_order(&dir, 0.05, 4).unwrap();
    eprintln!("step response: remainders {:?} rates {:?}", t.remainders, t.rates);
    assert!(t.second.abs() > 0.0, "δpᵀHδp vanished: nothing was tested");
    let rate = t.min_rate().expect("remainders above round-off");
    assert!(rate >= 2.9, "second-order rate {rate:.3} (remainders {:?})", t.remainders);
}

/// The chain with a resistivity that depends on T, whose electrical and thermal fields step
/// together (a φ ⇄ T cycle, one coupled solve per step) and the mechanical field at every
/// state; `rule`, `objectives` and `scheme` as in [`chain_text`], `extra` more `[coupling]`
/// or `[transient]` lines. The resistivity's coefficient, the fixed temperature and the
/// initial temperature are registered too.
fn cycle_chain(rule: &str, objectives: &str, scheme: &str) -> Simulation {
    let text = chain_text(rule, objectives, scheme)
        .replace("sigma = 2.0e4", "sigma = 2.0e4\nalpha_r = 1.0e-3\nt_ref = 293.15")
        .replace(
            "\"thermal.rho_c.domain\"]",
            "\"thermal.rho_c.domain\", \"electrical.alpha_r.domain\",\n            \
             \"bc.xmin.temperature\", \"thermal.initial_temperature\"]",
        );
    Simulation::from_toml("cycle.toml", &text).unwrap()
}

/// Products through the steps of a cycle: the φ ⇄ T chain in time under every integrator
/// (θ < 1 brings the explicit share's second-order products), every kind of time rule, a
/// run kept by checkpoints and a staggered cycle.
#[rstest]
#[case::bdf2_final_tip("objective = \"final\"", TIP, "scheme = \"bdf2\"")]
#[case::crank_nicolson_integral_of_all_three(
    "objective = \"integral\"",
    &format!("{TIP}{HOT}{CURRENT_OUT}"),
    "scheme = \"crank_nicolson\""
)]
#[case::theta_max_over_time(
    "objective = \"max\"\nsharpness = 2.0",
    &format!("{TIP}{HOT}"),
    "scheme = \"theta\"\ntheta = 0.6"
)]
#[case::implicit_euler_misfit(
    &format!("objective = \"misfit\"\nmeasured = \"{}\"", chain_history()),
    &format!("{TIP}{CURRENT_OUT}"),
    "scheme = \"implicit_euler\""
)]
#[case::checkpointed_crank_nicolson(
    "objective = \"integral\"",
    &format!("{TIP}{HOT}"),
    "scheme = \"crank_nicolson\"\ncheckpoints = 3"
)]
fn the_chain_stepped_on_a_cycle_passes_the_second_order_taylor_test(
    #[case] rule: &str,
    #[case] objectives: &str,
    #[case] scheme: &str,
) {
    let mut sim = cycle_chain(rule, objectives, scheme);
    let dir = random_direction_scaled(&sim.parameter_vector(), 5);
    assert_rate_three(&mut sim, &dir, 0.05, rule);
}

/// A staggered cycle in time: its product is that of the converged steps (the monolithic
/// step Jacobian), so it agrees with the monolithic cycle's to the cycle's tolerance, and
/// passes the second-order Taylor test.
#[test]
fn a_staggered_cycle_in_time_has_the_monolithic_products() {
    let text = |scheme: &str| {
        chain_text("objective = \"integral\"", TIP, "scheme = \"bdf2\"")
            .replace("sigma = 2.0e4", "sigma = 2.0e4\nalpha_r = 1.0e-3\nt_ref = 293.15")
            .replace(
                "[transient]",
                &format!("[coupling]\nscheme = \"{scheme}\"\ntol = 1e-12\n\n[transient]"),
            )
    };
    let mut mono = Simulation::from_toml("mono.toml", &text("monolithic")).unwrap();
    let mut stag = Simulation::from_toml("stag.toml", &text("staggered")).unwrap();
    let direction: BTreeMap<String, Vec<f64>> = [
        ("load.xmin.voltage", 0.1),
        ("thermal.k.domain", 3.0),
        ("bc.zmax.h", -40.0),
        ("thermal.rho_c.domain", 2.0e5),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), vec![v]))
    .collect();
    let a = mono.hvp(&direction).unwrap();
    let b = stag.hvp(&direction).unwrap();
    assert!(a.value.abs() > 0.0);
    assert!((a.value - b.value).abs() <= 1e-7 * a.value.abs(), "{} vs {}", a.value, b.value);
    // Entry by entry in the parameters' own units (p·(H·δp)), against the largest.
    let scaled = |sim: &mut Simulation, g: &gradfem::api::Gradients| -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for (name, x) in &g.by_name {
            let p = sim.parameter(name).unwrap();
            out.extend(x.iter().zip(p).map(|(v, p)| (name.clone(), v * p)));
        }
        out
    };
    let (sa, sb) = (scaled(&mut mono, &a), scaled(&mut stag, &b));
    let largest = sa.iter().fold(0.0f64, |m, (_, v)| m.max(v.abs()));
    for ((name, x), (_, y)) in sa.iter().zip(&sb) {
        assert!((x - y).abs() <= 1e-7 * largest, "{name}: monolithic {x} vs staggered {y}");
    }
    let dir = random_direction_scaled(&stag.parameter_vector(), 9);
    assert_rate_three(&mut stag, &dir, 0.05, "staggered");
}

/// Shape parameters through a cycle's steps: every node coordinate registered beside the
/// chain's parameters, the mass moving with det J, under an integrator with an explicit share
/// and one without; and H·δp against central differences of gradients, entry by entry.
#[rstest]
#[case::crank_nicolson_integral("objective = \"integral\"", "scheme = \"crank_nicolson\"")]
#[case::bdf2_max("objective = \"max\"\nsharpness = 2.0", "scheme = \"bdf2\"")]
fn the_chain_stepped_on_a_cycle_with_shape_passes_the_second_order_taylor_test(
    #[case] rule: &str,
    #[case] scheme: &str,
) {
    let mut sim = cycle_chain_with_coordinates(rule, &format!("{TIP}{HOT}"), scheme);
    let d = moving_direction(&mut sim, 3, 2e-5);
    assert_rate_three(&mut sim, &d, 0.05, rule);
}

#[test]
fn a_cycle_in_time_with_shape_has_the_hessian_vector_product_of_differences_of_gradients() {
    let mut sim =
        cycle_chain_with_coordinates("objective = \"integral\"", TIP, "scheme = \"bdf2\"");
    let dir = moving_direction(&mut sim, 11, 2e-5);
    assert_hvp_matches_differences(&mut sim, &dir);
}

/// [`cycle_chain`] with every node coordinate registered.
fn cycle_chain_with_coordinates(rule: &str, objectives: &str, scheme: &str) -> Simulation {
    let text = chain_text(rule, objectives, scheme)
        .replace("sigma = 2.0e4", "sigma = 2.0e4\nalpha_r = 1.0e-3\nt_ref = 293.15")
        .replace(
            "\"thermal.rho_c.domain\"]",
            "\"thermal.rho_c.domain\", \"electrical.alpha_r.domain\", \"mesh.coordinates\"]",
        );
    Simulation::from_toml("cycle.toml", &text).unwrap()
}

/// The dense Hessian through a cycle's steps (Crank–Nicolson, so the explicit share's products
/// count; ~100 entries, the per-element σ₀ among them) is symmetric: the engine's tangent-linear
/// steps and its second-order adjoint are each other's transposes.
#[test]
fn the_dense_hessian_through_a_cycles_steps_is_symmetric() {
    let mut sim = cycle_chain(
        "objective = \"integral\"",
        &format!("{TIP}{HOT}"),
        "scheme = \"crank_nicolson\"",
    );
    let n = sim.parameter_vector().len();
    assert!(n > 90, "{n} entries");
    let h = sim.hessian().unwrap();
    // In the parameters' own units, pᵢ Hᵢⱼ pⱼ: entries that vanish to round-off (the tip does
    // not feel E under free expansion) are compared against the largest.
    let p = sim.parameter_vector();
    let s = |i: usize, j: usize| h[i * n + j] * p[i] * p[j];
    let largest = (0..n * n).fold(0.0f64, |m, k| m.max(s(k / n, k % n).abs()));
    let mut largest_off_diagonal = 0.0f64;
    for i in 0..n {
        for j in 0..i {
            let (a, b) = (s(i, j), s(j, i));
            largest_off_diagonal = largest_off_diagonal.max(a.abs());
            let local = (s(i, i).abs() * s(j, j).abs()).sqrt().max(a.abs());
            assert!(
                (a - b).abs() <= 1e-8 * local + 1e-12 * largest,
                "H[{i}][{j}] = {} but H[{j}][{i}] = {}",
                h[i * n + j],
                h[j * n + i]
            );
        }
    }
    assert!(largest_off_diagonal > 1e-6 * largest, "no coupling between the entries was tested");
}

/// What products through a cycle's steps cannot do is refused with a message naming it: node
/// coordinates with a lumped mass.
#[test]
fn shape_parameters_on_a_cycle_with_a_lumped_mass_are_refused_with_a_message() {
    let text = chain_text("objective = \"final\"", TIP, "scheme = \"bdf2\"\nmass = \"lumped\"")
        .replace("sigma = 2.0e4", "sigma = 2.0e4\nalpha_r = 1.0e-3\nt_ref = 293.15")
        .replace("\"thermal.rho_c.domain\"]", "\"thermal.rho_c.domain\", \"mesh.coordinates\"]");
    let mut sim = Simulation::from_toml("cycle.toml", &text).unwrap();
    let e = sim.hvp(&BTreeMap::new()).unwrap_err().to_string();
    assert!(e.contains("lumped") && e.contains("coordinate"), "{e}");
}

/// A direction over the registered parameters (scaled random entries) whose node
/// coordinates move by a smooth field of up to `amplitude` metres.
fn moving_direction(sim: &mut Simulation, seed: u64, amplitude: f64) -> Vec<f64> {
    let mut dir = random_direction_scaled(&sim.parameter_vector(), seed);
    let mut at = 0;
    for name in sim.registered() {
        let values = sim.parameter(&name).unwrap();
        if name == "mesh.coordinates" {
            for (d, x) in dir[at..at + values.len()].chunks_exact_mut(3).zip(values.chunks_exact(3))
            {
                d[0] = amplitude * (310.0 * x[0] + 170.0 * x[1]).sin();
                d[1] = amplitude * (230.0 * x[1] + 450.0 * x[2]).cos();
                d[2] = 0.5 * amplitude * (190.0 * x[0] + 700.0 * x[2]).sin();
            }
        }
        at += values.len();
    }
    dir
}

/// The second-order Taylor test along `dir` from step `h0`: δpᵀHδp is not zero and the
/// remainders fall at rate ≥ 2.9.
fn assert_rate_three(sim: &mut Simulation, dir: &[f64], h0: f64, label: &str) {
    let t = sim.taylor_test_second_order(dir, h0, 5).unwrap();
    eprintln!("{label}: remainders {:?} rates {:?}", t.remainders, t.rates);
    assert!(t.second.abs() > 0.0, "{label}: δpᵀHδp vanished: nothing was tested");
    let rate = t.min_rate().expect("remainders above round-off");
    assert!(rate >= 2.9, "{label}: rate {rate:.3} (remainders {:?})", t.remainders);
}

/// A point inside one cell of the slab (`POINT` lies on a face between two, where moving the
/// nodes makes the value non-smooth).
const INNER_POINT: &str = "kind = \"point\"\npoint = [0.0103, 0.0037, 0.0021]";

const THICKNESS_MORPH: &str = "\n[[morph]]\nname = \"thickness\"\nvalue = 0.004\naxis = \"z\"\nknots = [[0.0, 0.0], [0.004, 1.0]]\ndirection = [0.0, 0.0, 1.0]\n";

/// Shape parameters in time: the cooling slab with every node coordinate and a thickness
/// morph registered beside the thermal, heat-capacity and initial-temperature parameters.
/// The mass moves with det J, the objective terms with the nodes (a point value's reference
/// point, integrals over the domain); the second-order Taylor remainders fall at rate 3 for
/// every integrator and kinds of time rule, with k(T) and without.
#[rstest]
#[case::bdf2_final_point("scheme = \"bdf2\"", "objective = \"final\"", "", INNER_POINT)]
#[case::crank_nicolson_nonlinear_integral(
    "scheme = \"crank_nicolson\"",
    "objective = \"integral\"",
    POLYNOMIAL,
    MAX6
)]
#[case::bdf2_nonlinear_max_over_time(
    "scheme = \"bdf2\"",
    "objective = \"max\"\nsharpness = 0.05",
    POLYNOMIAL,
    INTEGRAL_SQUARE
)]
#[case::theta_misfit(
    "scheme = \"theta\"\ntheta = 0.7",
    "objective = \"misfit\"\nmeasured = \"measured.csv\"",
    "",
    AVERAGE
)]
fn transient_shape_second_order_taylor_remainders_fall_at_rate_three(
    #[case] scheme: &str,
    #[case] rule: &str,
    #[case] law: &str,
    #[case] objective: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("measured.csv"), MEASURED).unwrap();
    let text = slab(scheme, rule, law, objective).replace(
        "\"thermal.initial_temperature\"]",
        "\"thermal.initial_temperature\", \"morph.thickness\", \"mesh.coordinates\"]",
    ) + THICKNESS_MORPH;
    let mut sim = Simulation::from_toml(dir.path().join("slab.toml"), &text).unwrap();
    let d = moving_direction(&mut sim, 5, 1e-4);
    assert_rate_three(&mut sim, &d, 0.05, &format!("{scheme} {rule}"));
}

/// Shape parameters through the whole chain in time: the electrical field's and the
/// mechanical field's coordinate products beside the steps', with terms on all three fields.
#[rstest]
#[case::integral_of_all_three(
    "objective = \"integral\"",
    &format!("{TIP}{HOT}{CURRENT_OUT}"),
    "scheme = \"crank_nicolson\""
)]
#[case::max_over_time("objective = \"max\"\nsharpness = 2.0", &format!("{TIP}{HOT}"), "scheme = \"bdf2\"")]
fn the_whole_chain_in_time_with_shape_passes_the_second_order_taylor_test(
    #[case] rule: &str,
    #[case] objectives: &str,
    #[case] scheme: &str,
) {
    let text = chain_text(rule, objectives, scheme)
        .replace("\"thermal.rho_c.domain\"]", "\"thermal.rho_c.domain\", \"mesh.coordinates\"]");
    let mut sim = Simulation::from_toml("chain.toml", &text).unwrap();
    let d = moving_direction(&mut sim, 3, 2e-5);
    assert_rate_three(&mut sim, &d, 0.05, rule);
}

/// H·δp with shape parameters in time against central differences of adjoint gradients,
/// entry by entry (every node coordinate's entry included), on a nonlinear Crank–Nicolson run
/// with the smooth maximum over time of a point value (its reference point follows the
/// nodes).
#[test]
fn transient_shape_hessian_vector_product_matches_differences_of_gradients() {
    let text = slab(
        "scheme = \"crank_nicolson\"",
        "objective = \"max\"\nsharpness = 0.05",
        POLYNOMIAL,
        INNER_POINT,
    )
    .replace(
        "\"thermal.initial_temperature\"]",
        "\"thermal.initial_temperature\", \"mesh.coordinates\"]",
    );
    let mut sim = Simulation::from_toml("slab.toml", &text).unwrap();
    let dir = moving_direction(&mut sim, 13, 1e-4);
    assert_hvp_matches_differences(&mut sim, &dir);
}

/// A linear-Gaussian identification in time: with a constant conductivity the temperatures
/// are affine in q_in, the fixed and ambient temperatures and T⁰, so the misfit's exact
/// Hessian is GᵀG and the Laplace covariance is the closed form σ² (GᵀG)⁻¹. G comes here from
/// differences of the point's history (exact for an affine map, to round-off), independently
/// of both the tangent-linear run and the second-order adjoint.
#[test]
fn laplace_covariance_of_a_linear_gaussian_identification_in_time_is_the_closed_form() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("measured.csv"), MEASURED).unwrap();
    let text = slab(
        "scheme = \"crank_nicolson\"",
        "objective = \"misfit\"\nmeasured = \"measured.csv\"",
        "",
        POINT,
    )
    .replace(
        r#"register = ["thermal.k_elem.domain", "thermal.q.domain", "bc.zmax.h", "bc.zmax.t_inf",
            "bc.ymin.flux", "bc.xmin.temperature", "thermal.rho_c.domain",
            "thermal.initial_temperature"]"#,
        r#"register = ["bc.ymin.flux", "bc.xmin.temperature", "bc.zmax.t_inf",
            "thermal.initial_temperature"]"#,
    );
    let mut sim = Simulation::from_toml(dir.path().join("linear.toml"), &text).unwrap();
    let sigma = 0.2;
    let report = gradfem::hessian::compute(sim.problem(), Some(sigma), |_, _| {}).unwrap();
    let posterior = report.posterior.as_ref().expect("a misfit in time has a posterior");
    let rows: Vec<[f64; 2]> = MEASURED
        .lines()
        .skip(1)
        .map(|l| {
            let v: Vec<f64> = l.split(',').map(|x| x.parse().unwrap()).collect();
            [v[0], v[1]]
        })
        .collect();
    // The point's value at the measured times, linear between the states (Δt = 0.4 s).
    let history = |sim: &mut Simulation| -> Vec<f64> {
        sim.solve().unwrap();
        let j = sim.problem().state_values().unwrap();
        rows.iter()
            .map(|[t, _]| {
                let n = ((t / 0.4).floor() as usize).min(j.len() - 2);
                let s = t / 0.4 - n as f64;
                (1.0 - s) * j[n] + s * j[n + 1]
            })
            .collect()
    };
    let names = sim.registered();
    let base = history(&mut sim);
    let n = names.len();
    let m = rows.len();
    let mut g = vec![vec![0.0; n]; m];
    for (j, name) in names.iter().enumerate() {
        let p0 = sim.parameter(name).unwrap()[0];
        let step = 0.1 * p0.abs();
        sim.set_parameter(name, p0 + step).unwrap();
        let moved = history(&mut sim);
        sim.set_parameter(name, p0).unwrap();
        for s in 0..m {
            g[s][j] = (moved[s] - base[s]) / step;
        }
    }
    // The exact Hessian (second-order adjoint) is GᵀG (differences), entry by entry.
    let hessian = &report.hessian;
    for i in 0..n {
        for j in 0..n {
            let gtg: f64 = (0..m).map(|s| g[s][i] * g[s][j]).sum();
            let scale = (hessian[i][i].abs() * hessian[j][j].abs()).sqrt().max(1e-300);
            assert!(
                (hessian[i][j] - gtg).abs() <= 1e-8 * scale,
                "H[{i}][{j}] = {:e}, GᵀG = {gtg:e}",
                hessian[i][j]
            );
        }
    }
    // C = σ² (GᵀG)⁻¹: C GᵀG / σ² = I (in the scaled variables' conditioning).
    for i in 0..n {
        for j in 0..n {
            let product: f64 = (0..n)
                .map(|k| {
                    let gtg: f64 = (0..m).map(|s| g[s][k] * g[s][j]).sum();
                    posterior.covariance[i][k] * gtg
                })
                .sum::<f64>()
                / (sigma * sigma);
            let scale = (posterior.covariance[i][i] / posterior.covariance[j][j]).sqrt();
            let expected = if i == j { 1.0 } else { 0.0 };
            assert!(
                (product - expected).abs() <= 1e-6 * scale.max(1.0),
                "(C GᵀG/σ²)[{i}][{j}] = {product}"
            );
        }
    }
    assert!(posterior.gauss_newton_difference < 1e-10, "{}", posterior.gauss_newton_difference);
}

/// `gradfem CMD FILE -o OUT --json` (CMD and its options in `args`), which must succeed, as
/// JSON.
fn gradfem_json(
    args: &[&str],
    file: &std::path::Path,
    out_dir: &std::path::Path,
) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .arg("--quiet")
        .args(args)
        .arg(file)
        .arg("-o")
        .arg(out_dir)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// examples/quench_identify.toml: k and ρc of the quenched plate from its thermocouple
/// history. Newton-CG with exact products through the 40 BDF2 steps reaches L-BFGS's fit in
/// fewer than half its evaluations, and the Laplace posterior at the fit holds the values the
/// synthetic data were made with (k = 45, ρc = 3.6e6) within three standard deviations, with
/// the strong positive correlation of a history that fixes the diffusivity k/ρc best.
#[test]
fn newton_cg_identifies_conductivity_and_heat_capacity_from_a_temperature_history() {
    identify_both_ways(
        "quench_identify",
        "quench_thermocouple.csv",
        [
            Start { name: "thermal.k.domain", line: "k = 30.0", key: "k = ", truth: 45.0 },
            Start {
                name: "thermal.rho_c.domain",
                line: "rho_c = 2.5e6",
                key: "rho_c = ",
                truth: 3.6e6,
            },
        ],
    );
}

/// One fitted parameter of an identification example: its registered name, the line of the
/// file that starts it, that line's key and the value the synthetic data were made with.
struct Start {
    name: &'static str,
    line: &'static str,
    key: &'static str,
    truth: f64,
}

/// An identification example (`examples/{name}.toml` reading `examples/data/{data}`, Newton-CG)
/// fitted by L-BFGS and by Newton-CG in a scratch directory: Newton-CG in fewer than half
/// L-BFGS's evaluations and at the same fit; then the Laplace posterior at the fit
/// (`gradfem hessian`), which holds each truth within three standard deviations, correlates
/// the two parameters strongly and draws its PNG. Returns the posterior.
fn identify_both_ways(name: &str, data: &str, params: [Start; 2]) -> serde_json::Value {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(format!("examples/{name}.toml"))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::copy(root.join("examples/data").join(data), dir.path().join("data").join(data))
        .unwrap();
    let run = |method: &str| -> serde_json::Value {
        let file = dir.path().join(format!("{method}.toml"));
        let edited = text.replace("method = \"newton-cg\"", &format!("method = \"{method}\""));
        std::fs::write(&file, edited).unwrap();
        gradfem_json(&["optimize"], &file, &dir.path().join(method))
    };
    let (lbfgs, newton) = (run("lbfgs"), run("newton-cg"));
    let evaluations = |v: &serde_json::Value| v["evaluations"].as_u64().unwrap();
    assert!(
        2 * evaluations(&newton) < evaluations(&lbfgs),
        "{name}: Newton-CG {} evaluations, L-BFGS {}",
        evaluations(&newton),
        evaluations(&lbfgs)
    );
    let value = |v: &serde_json::Value, name: &str| v["design"][name][0].as_f64().unwrap();
    let mut fitted = text.clone();
    for p in &params {
        let v = value(&newton, p.name);
        assert!((v - value(&lbfgs, p.name)).abs() <= 1e-5 * v.abs(), "{}: {v}", p.name);
        fitted = fitted.replace(p.line, &format!("{}{v:e}", p.key));
    }
    let file = dir.path().join("fitted.toml");
    std::fs::write(&file, fitted).unwrap();
    let report = gradfem_json(&["hessian"], &file, &dir.path().join("posterior"));
    let post = report["posterior"].clone();
    for (i, p) in params.iter().enumerate() {
        let (v, sd) = (value(&newton, p.name), post["std_dev"][i].as_f64().unwrap());
        assert!((v - p.truth).abs() < 3.0 * sd, "{}: {v} ± {sd}, made with {}", p.name, p.truth);
    }
    let correlation = post["correlation"][0][1].as_f64().unwrap();
    assert!(correlation > 0.9, "{name}: correlation {correlation}");
    let png = std::fs::read(dir.path().join("posterior/posterior.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    post
}

/// Identification through the steps of a cycle: the bar with ρ(T) (the φ ⇄ T cycle stepped
/// in time) at 2 V and the history of its tip deflection plus its current, synthetic from α_R = 1.5·10⁻³/K and k = 36 W/(m·K);
/// fitted from α_R = 1·10⁻³/K and k = 30 by a misfit over time. Newton-CG with exact products
/// through the cycle's steps reaches the values the history was made with, in fewer than half
/// the objective evaluations of L-BFGS (9 against 23 when written), and the exact Hessian at
/// the fit agrees with the Gauss–Newton one of the state values' tangents.
#[test]
fn newton_cg_identifies_a_resistivity_coefficient_through_the_steps_of_a_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let measured = dir.path().join("tip_history.csv");
    let text = |alpha_r: f64, k: f64, optimize: &str| -> String {
        let text = chain_text(
            &format!("objective = \"misfit\"\nmeasured = \"{}\"", measured.display()),
            &format!("{TIP}{CURRENT_OUT}"),
            "scheme = \"bdf2\"",
        )
        .replace("value = 0.5", "value = 2.0")
        .replace("sigma = 2.0e4", &format!("sigma = 2.0e4\nalpha_r = {alpha_r:e}\nt_ref = 293.15"))
        .replace("k = 30.0\nlaw", &format!("k = {k:e}\nlaw"));
        let start = text.find("register = [").unwrap();
        let end = start + text[start..].find(']').unwrap() + 1;
        format!(
            "{}register = [\"electrical.alpha_r.domain\", \"thermal.k.domain\"]{}\n{optimize}",
            &text[..start],
            &text[end..]
        )
    };
    // The history at the true values (the misfit's own series is read only by the objective,
    // so any file serves while the states are computed).
    std::fs::write(&measured, "time_s,value\n0.05,0.0\n").unwrap();
    let mut truth = Simulation::from_toml("truth.toml", &text(1.5e-3, 36.0, "")).unwrap();
    let problem = truth.problem();
    problem.solve().unwrap();
    let values = problem.transient_state_values().unwrap();
    let rows: String = values
        .iter()
        .enumerate()
        .skip(1)
        .map(|(n, v)| format!("{:.2},{v:.12e}\n", 0.05 * n as f64))
        .collect();
    std::fs::write(&measured, format!("time_s,value\n{rows}")).unwrap();
    let run = |method: &str| -> serde_json::Value {
        let file = dir.path().join(format!("{method}.toml"));
        let optimize = format!("[optimize]\nmethod = \"{method}\"\ngtol = 1e-9\n");
        std::fs::write(&file, text(1.0e-3, 30.0, &optimize)).unwrap();
        gradfem_json(&["optimize"], &file, &dir.path().join(method))
    };
    let (lbfgs, newton) = (run("lbfgs"), run("newton-cg"));
    let evaluations = |v: &serde_json::Value| v["evaluations"].as_u64().unwrap();
    eprintln!("Newton-CG {} evaluations, L-BFGS {}", evaluations(&newton), evaluations(&lbfgs));
    let value = |v: &serde_json::Value, name: &str| v["design"][name][0].as_f64().unwrap();
    let (alpha_r, k) =
        (value(&newton, "electrical.alpha_r.domain"), value(&newton, "thermal.k.domain"));
    assert!((alpha_r / 1.5e-3 - 1.0).abs() < 1e-5, "α_R = {alpha_r}");
    assert!((k / 36.0 - 1.0).abs() < 1e-5, "k = {k}");
    assert!(
        2 * evaluations(&newton) < evaluations(&lbfgs),
        "Newton-CG {} evaluations, L-BFGS {}",
        evaluations(&newton),
        evaluations(&lbfgs)
    );
    // At the fit (exact data: residuals near zero) the exact Hessian from the second-order
    // adjoint equals the Gauss–Newton GᵀG, whose G comes from the tangent-linear run alone.
    let file = dir.path().join("fitted.toml");
    std::fs::write(&file, text(alpha_r, k, "")).unwrap();
    let report = gradfem_json(&["hessian"], &file, &dir.path().join("posterior"));
    let difference = report["posterior"]["gauss_newton_difference"].as_f64().unwrap();
    assert!(difference < 1e-6, "|H − GᵀG| / |H| = {difference}");
}

/// examples/bar_resistivity_identify.toml: α_R and k of a resistive bar from the current it
/// draws under a voltage step, through the 20 BDF2 steps of its φ ⇄ T cycle. Newton-CG reaches
/// L-BFGS's fit in fewer than half its evaluations, and the Laplace posterior at the fit holds
/// the values the synthetic data were made with (α_R = 1.5·10⁻³/K, k = 36) within three
/// standard deviations, strongly correlated (a hotter bar, from a smaller k, lowers the current
/// as a larger α_R does), with the Gauss–Newton approximation close by.
#[test]
fn newton_cg_identifies_a_resistors_temperature_coefficient_from_its_current() {
    let post = identify_both_ways(
        "bar_resistivity_identify",
        "bar_current.csv",
        [
            Start {
                name: "electrical.alpha_r.domain",
                line: "alpha_r = 1.0e-3",
                key: "alpha_r = ",
                truth: 1.5e-3,
            },
            Start { name: "thermal.k.domain", line: "k = 30.0", key: "k = ", truth: 36.0 },
        ],
    );
    let difference = post["gauss_newton_difference"].as_f64().unwrap();
    assert!(difference < 1e-3, "|H − GᵀG| / |H| = {difference}");
}

/// Finite strain in time: the heated silicone strip of tests/transient_finite_strain.rs (the
/// thermal field stepped, an Ogden strip held stretched by 20 % following at every state
/// through its load steps), J a rule over the history of the pulling force.
#[rstest]
#[case::integral("integral", "")]
#[case::smooth_max("max", "sharpness = 1.0")]
fn finite_strain_in_time_passes_the_second_order_taylor_test(
    #[case] rule: &str,
    #[case] extra: &str,
) {
    let text = strip(&format!("{}\n{extra}", transient(200.0, 5, rule)), ALL);
    let mut sim = Simulation::from_toml("strip.toml", &text).unwrap();
    let dir = random_direction_scaled(&sim.parameter_vector(), 5);
    let t = sim.taylor_test_second_order(&dir, 0.05, 5).unwrap();
    eprintln!("{rule}: remainders {:?} rates {:?}", t.remainders, t.rates);
    assert!(t.second.abs() > 0.0, "δpᵀHδp vanished: nothing was tested");
    let rate = t.min_rate().expect("remainders above round-off");
    assert!(rate >= 2.9, "second-order rate {rate:.3} (remainders {:?})", t.remainders);
}
