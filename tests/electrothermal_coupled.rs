//! Two-way electro-thermal coupling (ρ(T) = ρ₀ (1 + α_R (T − T₀))): the staggered solution
//! against a fine 1D finite-difference reference, and the coupled adjoint by Taylor tests, one
//! parameter at a time.

use std::path::Path;

use gradfem::app::{self, Problem};
use gradfem::problem::ProblemFile;
use rstest::rstest;

const L: f64 = 0.1;
const W: f64 = 0.01;
const SIGMA: f64 = 5e4;
const K: f64 = 34.0;
const V: f64 = 0.5;
const T0: f64 = 300.0;
const ALPHA: f64 = 4e-3;

fn bar_with(cell: &str, div: [usize; 3], scheme: &str, extra: &str) -> String {
    format!(
        r#"
[mesh]
box = {{ lengths = [{L}, {W}, {W}], divisions = [{}, {}, {}], cell = "{cell}" }}

[[thermal.material]]
group = "domain"
k = {K}

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = {T0}

[[thermal.bc]]
group = "xmax"
kind = "temperature"
value = {T0}

[[electrical.conductor]]
group = "domain"
sigma = {SIGMA}
alpha_r = {ALPHA}
t_ref = {T0}

[[electrical.terminal]]
group = "xmin"
kind = "voltage"
value = {V}

[[electrical.terminal]]
group = "xmax"
kind = "ground"

[coupling]
scheme = "{scheme}"
tol = 1e-12
{extra}
"#,
        div[0], div[1], div[2]
    )
}

fn build(text: &str) -> Problem {
    let pf = ProblemFile::parse(Path::new("bar.toml"), text.to_string()).expect("parses");
    app::build_problem(&pf).unwrap_or_else(|e| panic!("{e}"))
}

/// 1D reference: j = V / ∫ρ(T) dx is uniform, k T'' + j² ρ(T) = 0, T(0) = T(L) = T₀, solved
/// by Picard iteration on a fine grid (second-order central differences, tridiagonal solve).
fn reference(n: usize) -> Vec<f64> {
    let h = L / n as f64;
    let rho = |t: f64| (1.0 + ALPHA * (t - T0)) / SIGMA;
    let mut t = vec![T0; n + 1];
    for _ in 0..200 {
        let int: f64 = (0..n).map(|i| 0.5 * h * (rho(t[i]) + rho(t[i + 1]))).sum();
        let j = V / int;
        // −k (T_{i-1} − 2T_i + T_{i+1}) / h² = j² ρ(T_i), interior nodes (Thomas algorithm).
        let m = n - 1;
        let (a, b) = (-K / (h * h), 2.0 * K / (h * h));
        let mut c_prime = vec![0.0; m];
        let mut d_prime = vec![0.0; m];
        for i in 0..m {
            let mut d = j * j * rho(t[i + 1]);
            if i == 0 {
                d -= a * T0;
            }
            if i == m - 1 {
                d -= a * T0;
            }
            let denom = if i == 0 { b } else { b - a * c_prime[i - 1] };
            c_prime[i] = a / denom;
            d_prime[i] = if i == 0 { d / denom } else { (d - a * d_prime[i - 1]) / denom };
        }
        let mut new = vec![T0; n + 1];
        for i in (0..m).rev() {
            new[i + 1] = if i == m - 1 { d_prime[i] } else { d_prime[i] - c_prime[i] * new[i + 2] };
        }
        let change = new.iter().zip(&t).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        t = new;
        if change < 1e-13 {
            break;
        }
    }
    t
}

#[rstest]
fn coupled_bar_matches_a_fine_1d_reference(#[values("monolithic", "staggered")] scheme: &str) {
    let n = 4000;
    let t_ref = reference(n);
    let mut p = build(&bar_with("hex20", [16, 1, 1], scheme, ""));
    p.solve().expect("solve");
    assert!(p.electrical().is_some(), "electro-thermal expected");
    assert!(p.has_cycle(), "two-way: φ ⇄ T is a cycle");
    let cycle = &p.cycles()[0];
    assert!(cycle.iterations > 2, "{:?}", cycle.history);
    eprintln!("{scheme}: {} iterations, history {:?}", cycle.iterations, cycle.history);
    let t = p.thermal().temperature().unwrap();
    let mut err: f64 = 0.0;
    for (node, x) in p.thermal().model.coords.iter().enumerate() {
        let s = x[0] / L * n as f64;
        let i = (s.floor() as usize).min(n - 1);
        let f = s - i as f64;
        let r = t_ref[i] * (1.0 - f) + t_ref[i + 1] * f;
        err = err.max((t[node] - r).abs());
    }
    let rise = t_ref.iter().fold(0.0_f64, |a, &b| a.max(b - T0));
    // ρ grows with T, so the coupled rise is below the one-way 45.956 K.
    assert!(rise < 45.9 && rise > 30.0, "rise {rise}");
    eprintln!("{scheme}: max nodal error {err:e} K of a {rise:.3} K rise");
    assert!(err < 1e-3 * rise, "max nodal error {err:e} K of a {rise:.3} K rise");
}

fn with_convection(scheme: &str, objective: &str, register: &str) -> String {
    let mut text = bar_with("hex8", [6, 2, 2], scheme, "");
    text.push_str(
        "\n[[thermal.bc]]\ngroup = \"ymax\"\nkind = \"convection\"\nh = 50.0\nt_inf = 290.0\n",
    );
    text.push_str(&format!("\n{objective}\n[parameters]\nregister = [{register}]\n"));
    text
}

fn taylor_one(scheme: &str, param: &str, objective: &str) {
    let mut text = with_convection(scheme, objective, &format!("\"{param}\""));
    if param.ends_with(".current") {
        text = text.replacen(
            "kind = \"voltage\"\nvalue = 0.5",
            "kind = \"current\"\ncurrent = 10.0",
            1,
        );
    }
    let mut p = build(&text);
    p.solve().expect("solve");
    let r = p.taylor_test(&Default::default(), |_| {}).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.passed && r.min_rate() >= 1.9, "{scheme} {param}:\n{}", r.table());
}

const MAX_T: &str = "[[objective]]\nkind = \"max\"\ngroup = \"domain\"\n";
const MEAN_T: &str = "[[objective]]\nkind = \"average\"\ngroup = \"domain\"\n";
const RES: &str =
    "[[objective]]\nkind = \"resistance\"\ndrive = \"xmin\"\nreference = \"xmax\"\nweight = 1e3\n";

#[rstest]
#[case::sigma("electrical.sigma.domain", MAX_T)]
#[case::sigma_elem("electrical.sigma_elem.domain", MEAN_T)]
#[case::alpha_r("electrical.alpha_r.domain", MAX_T)]
#[case::alpha_r_resistance("electrical.alpha_r.domain", RES)]
#[case::voltage("load.xmin.voltage", RES)]
#[case::current("load.xmin.current", MAX_T)]
#[case::current_resistance("load.xmin.current", RES)]
#[case::k("thermal.k.domain", MEAN_T)]
#[case::h("bc.ymax.h", MAX_T)]
#[case::fixed_t("bc.xmax.temperature", RES)]
#[case::coords("mesh.coordinates", MAX_T)]
#[case::coords_resistance("mesh.coordinates", RES)]
fn two_way_taylor(
    #[values("monolithic", "staggered")] scheme: &str,
    #[case] param: &str,
    #[case] objective: &str,
) {
    taylor_one(scheme, param, objective);
}

/// Both schemes solve the same coupled residual and the same transposed system: states and
/// gradients agree to the solver tolerance.
#[test]
fn monolithic_and_staggered_gradients_agree() {
    let register = "\"electrical.sigma_elem.domain\", \"electrical.alpha_r.domain\", \"load.xmin.voltage\", \"thermal.k.domain\", \"bc.ymax.h\", \"bc.xmin.temperature\", \"mesh.coordinates\"";
    let objective = format!("{MAX_T}\n{RES}");
    let mut grads = Vec::new();
    for scheme in ["monolithic", "staggered"] {
        let mut p = build(&with_convection(scheme, &objective, register));
        p.solve().expect("solve");
        let (j, g, _) = p.gradient().expect("gradient");
        assert_eq!(p.cycles().len(), 1, "one coupled block");
        let pv = gradfem::solvers::params::ParamVector::all(p.registry());
        grads.push((j, g.flatten(&pv)));
    }
    let (j0, g0) = &grads[0];
    let (j1, g1) = &grads[1];
    assert!((j0 - j1).abs() <= 1e-10 * j0.abs(), "J {j0} vs {j1}");
    let scale = g0.iter().fold(0.0_f64, |a, b| a.max(b.abs()));
    let diff = g0.iter().zip(g1).fold(0.0_f64, |a, (x, y)| a.max((x - y).abs()));
    assert!(diff <= 1e-8 * scale, "max gradient difference {diff:e} of {scale:e}");
    // Not vacuous: every entry class is present and nonzero somewhere.
    assert!(g0.iter().filter(|v| v.abs() > 0.0).count() > g0.len() / 2);
}

#[test]
fn unknown_scheme_is_an_error() {
    let text = bar_with("hex8", [2, 1, 1], "implicit", "");
    let pf = ProblemFile::parse(Path::new("bar.toml"), text).expect("parses");
    let e = app::build_problem(&pf).err().expect("an error").to_string();
    assert!(e.contains("monolithic") && e.contains("staggered"), "{e}");
}

/// α_R registered at 0: the problem is one-way at the start, but α_R's derivative needs the
/// coupled form (∂σ/∂α_R acts through T).
#[rstest]
fn alpha_r_at_zero_is_differentiated_through_the_coupling(
    #[values("monolithic", "staggered")] scheme: &str,
) {
    let text = with_convection(scheme, MAX_T, "\"electrical.alpha_r.domain\"")
        .replace(&format!("alpha_r = {ALPHA}"), "alpha_r = 0.0");
    let mut p = build(&text);
    p.solve().expect("solve");
    let (_, g, _) = p.gradient().expect("gradient");
    assert!(g.get(p.registry().id("electrical.alpha_r.domain").unwrap())[0] < 0.0);
    let params = gradfem::solvers::taylor::TaylorParams { h0: 1e-3, ..Default::default() };
    // A zero parameter gets the Taylor direction's floor scale 1e-3: steps of 1e-6 /K.
    let r = p.taylor_test(&params, |_| {}).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.passed && r.min_rate() >= 1.9, "{scheme}:\n{}", r.table());
}

/// The staggered scheme with AMG-preconditioned CG for both fields (what large problems get)
/// reaches the state and gradient of the direct solvers.
#[test]
fn iterative_solvers_give_the_gradient_of_direct_ones() {
    let register = "\"electrical.sigma.domain\", \"electrical.alpha_r.domain\", \"load.xmin.voltage\", \"thermal.k.domain\", \"bc.ymax.h\"";
    let objective = format!("{MAX_T}\n{RES}");
    let mut grads = Vec::new();
    for linear in ["cholesky", "amg-cg"] {
        let text = with_convection("staggered", &objective, register)
            + &format!("\n[solver]\nlinear = \"{linear}\"\ncg_rel_tol = 1e-13\n");
        let mut p = build(&text);
        p.solve().expect("solve");
        let et = p.electrical().expect("electro-thermal");
        assert_eq!(et.linear_solver(), if linear == "cholesky" { "cholesky" } else { "amg-cg" });
        let (j, g, _) = p.gradient().expect("gradient");
        let pv = gradfem::solvers::params::ParamVector::all(p.registry());
        grads.push((j, g.flatten(&pv)));
    }
    let ((j0, g0), (j1, g1)) = (&grads[0], &grads[1]);
    assert!((j0 - j1).abs() <= 1e-9 * j0.abs(), "J {j0} vs {j1}");
    for (a, b) in g0.iter().zip(g1) {
        assert!((a - b).abs() <= 1e-6 * a.abs().max(1e-12), "{g0:?} vs {g1:?}");
    }
}
