//! `gradfem uq`: known moments of a thermal slab, first-order shares against the closed form,
//! byte-identical results for sharded + reduced and resumed runs, failed samples reported by
//! index, and located errors for bad `[uq]` tables.
//!
//! The slab: a box 1 m long, held at T₀ = 300 K on x = 0, insulated elsewhere, with a
//! uniform source q. Its discrete solution is T₀ + (q/k)·v exactly (the stiffness is k times
//! that of k = 1 and the load is q times that of q = 1), so the mean temperature is
//! J = T₀ + c·q/k with c from one solve; with k ~ N(μ_k, σ_k²) and q ~ N(μ_q, σ_q²)
//! independent, E J and Var J follow from E[1/k] and E[1/k²], computed by quadrature.

use std::path::{Path, PathBuf};
use std::process::Command;

use gradfem::problem::ProblemFile;
use gradfem::uq::{self, Log, Shard, Study};

#[path = "support/uq_slab.rs"]
mod uq_slab;
use uq_slab::slab;

const T0: f64 = 300.0;

fn write_problem(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gradfem"))
}

fn run_ok(args: &[&str]) -> String {
    let out = bin().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "gradfem {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// ∫ f(z) φ(z) dz over [−8, 8] by Simpson's rule: the integrands are smooth there, and the
/// normal's mass beyond (1e-15; it includes k ≤ 0, where 1/k has no mean) is left out, as
/// the sampling of a few hundred points leaves it out.
fn gauss_expectation(f: impl Fn(f64) -> f64) -> f64 {
    let n = 16_000;
    let h = 16.0 / n as f64;
    let phi = |z: f64| (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let mut s = 0.0;
    for i in 0..=n {
        let z = -8.0 + i as f64 * h;
        let w = if i == 0 || i == n {
            1.0
        } else if i % 2 == 1 {
            4.0
        } else {
            2.0
        };
        s += w * f(z) * phi(z);
    }
    s * h / 3.0
}

fn report(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("uq.json")).unwrap()).unwrap()
}

fn output<'a>(r: &'a serde_json::Value, q: &str) -> &'a serde_json::Value {
    r["outputs"].as_array().unwrap().iter().find(|o| o["quantity"] == q).unwrap()
}

/// Mean and std of J = T₀ + c q/k within 3 reported standard errors; the first-order
/// gradient, variance and shares against the closed form.
#[test]
fn slab_moments_and_shares_match_the_closed_form() {
    let dir = tempfile::tempdir().unwrap();
    let (mk, sk, mq, sq) = (10.0, 1.0, 1000.0, 200.0);
    let text = slab(
        r#"[uq]
design = "monte_carlo"
seed = 7
samples = 400
batch = 50
quantiles = [0.5]

[[uq.input]]
parameter = "thermal.k.domain"
distribution = "normal"
std = 1.0

[[uq.input]]
parameter = "thermal.q.domain"
distribution = "normal"
cv = 0.2

[[uq.output]]
quantity = "mean_temperature"
"#,
    );
    let path = write_problem(dir.path(), "slab.toml", &text);
    let out = dir.path().join("out");
    run_ok(&["--quiet", "uq", path.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let r = report(&out);
    let o = output(&r, "mean_temperature");
    let lin = &o["linearized"];
    // c from the solve at the means: J(μ) = T₀ + c μ_q/μ_k.
    let c = (lin["value_at_mean"].as_f64().unwrap() - T0) * mk / mq;
    let e1 = gauss_expectation(|z| 1.0 / (mk + sk * z));
    let e2 = gauss_expectation(|z| 1.0 / (mk + sk * z).powi(2));
    let mean = T0 + c * mq * e1;
    let var = c * c * ((mq * mq + sq * sq) * e2 - mq * mq * e1 * e1);
    let got_mean = o["mean"].as_f64().unwrap();
    let se_mean = o["se_mean"].as_f64().unwrap();
    let got_std = o["std"].as_f64().unwrap();
    let se_std = o["se_std"].as_f64().unwrap();
    assert_eq!(o["n"], 400);
    assert!((got_mean - mean).abs() <= 3.0 * se_mean, "mean {got_mean} vs {mean} (se {se_mean})");
    assert!(
        (got_std - var.sqrt()).abs() <= 3.0 * se_std,
        "std {got_std} vs {} (se {se_std})",
        var.sqrt()
    );
    // The standard errors are the sizes they should be: σ/√n.
    assert!((se_mean / (var.sqrt() / 20.0) - 1.0).abs() < 0.15, "se {se_mean}");

    // First order at the means: g_k = −c μ_q/μ_k², g_q = c/μ_k.
    let gk = lin["gradient"]["thermal.k.domain"].as_f64().unwrap();
    let gq = lin["gradient"]["thermal.q.domain"].as_f64().unwrap();
    assert!((gk / (-c * mq / (mk * mk)) - 1.0).abs() < 1e-9, "dJ/dk {gk}");
    assert!((gq / (c / mk) - 1.0).abs() < 1e-9, "dJ/dq {gq}");
    let (a, b) = ((c * mq * sk / (mk * mk)).powi(2), (c * sq / mk).powi(2));
    let v = lin["variance"].as_f64().unwrap();
    assert!((v / (a + b) - 1.0).abs() < 1e-9, "variance {v} vs {}", a + b);
    // Relative spreads 0.1 and 0.2: shares 1/5 and 4/5.
    let shares = &lin["share_by_input"];
    assert!((shares["thermal.k.domain"].as_f64().unwrap() - 0.2).abs() < 1e-9);
    assert!((shares["thermal.q.domain"].as_f64().unwrap() - 0.8).abs() < 1e-9);
    // And the sampled variance is close to the linearized one at these spreads.
    assert!((got_std / v.sqrt() - 1.0).abs() < 0.1);
}

/// With correlated inputs the first-order variance is gᵀ C g.
#[test]
fn correlated_inputs_enter_the_variance_as_g_c_g() {
    let dir = tempfile::tempdir().unwrap();
    let text = slab(
        r#"[uq]
samples = 16
correlation = [[1.0, 0.5], [0.5, 1.0]]

[[uq.input]]
parameter = "thermal.k.domain"
distribution = "normal"
cv = 0.1

[[uq.input]]
parameter = "thermal.q.domain"
distribution = "normal"
cv = 0.2
"#,
    );
    let path = write_problem(dir.path(), "slab.toml", &text);
    let out = dir.path().join("out");
    run_ok(&["--quiet", "uq", path.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let r = report(&out);
    let lin = &output(&r, "objective")["linearized"];
    let gk = lin["gradient"]["thermal.k.domain"].as_f64().unwrap();
    let gq = lin["gradient"]["thermal.q.domain"].as_f64().unwrap();
    let (sk, sq) = (1.0, 200.0);
    let want = (gk * sk).powi(2) + (gq * sq).powi(2) + 2.0 * 0.5 * gk * sk * gq * sq;
    assert!((lin["variance"].as_f64().unwrap() / want - 1.0).abs() < 1e-12);
    // Here g_k σ_k and g_q σ_q have opposite signs: the correlation lowers the variance.
    assert!(want < (gk * sk).powi(2) + (gq * sq).powi(2));
}

fn files_equal(a: &Path, b: &Path) {
    for f in ["uq.json", "samples.json", "samples.csv", "convergence.png"] {
        let (x, y) = (std::fs::read(a.join(f)).unwrap(), std::fs::read(b.join(f)).unwrap());
        assert!(x == y, "{f} differs between {} and {}", a.display(), b.display());
    }
}

/// Shards in any order, then `--reduce`, give the bytes of one run; so does a run resumed
/// after losing a chunk; and an interrupted reduction names the missing chunks.
#[rstest::rstest]
#[case("sobol", "samples = 40\nbatch = 8")]
#[case("latin_hypercube", "samples = 30\nbatch = 7")]
#[case(
    "monte_carlo",
    "batch = 4\n[uq.stop]\nrule = \"relative_se\"\ntarget = 0.004\nmax_samples = 64"
)]
fn sharded_reduced_and_resumed_runs_are_byte_identical(#[case] design: &str, #[case] rest: &str) {
    let dir = tempfile::tempdir().unwrap();
    let text = slab(&format!(
        r#"[uq]
design = "{design}"
seed = 11
{rest}

[[uq.input]]
parameter = "thermal.k.domain"
distribution = "lognormal"
cv = 0.1

[[uq.input]]
parameter = "thermal.q.domain"
distribution = "truncated_normal"
cv = 0.3
lower = 800.0

[[uq.output]]
quantity = "mean_temperature"
upper = 335.0

[[uq.output]]
quantity = "max_temperature"
"#
    ));
    let path = write_problem(dir.path(), "slab.toml", &text);
    let p = path.to_str().unwrap();
    let one = dir.path().join("one");
    run_ok(&["--quiet", "uq", p, "-o", one.to_str().unwrap()]);
    let sharded = dir.path().join("sharded");
    let s = sharded.to_str().unwrap();
    run_ok(&["--quiet", "uq", p, "-o", s, "--shard", "2/3"]);
    run_ok(&["--quiet", "uq", p, "-o", s, "--shard", "0/3"]);
    let early = bin().args(["uq", "--reduce", s]).output().unwrap();
    assert_eq!(early.status.code(), Some(2));
    let err = String::from_utf8_lossy(&early.stderr);
    assert!(err.contains("not written yet") && err.contains("chunk(s) 1"), "{err}");
    run_ok(&["--quiet", "uq", p, "-o", s, "--shard", "1/3"]);
    run_ok(&["--quiet", "uq", "--reduce", s]);
    files_equal(&one, &sharded);

    // Resume: lose a chunk (and the results), run again.
    std::fs::remove_file(one.join("parts/chunk-000001.json")).unwrap();
    std::fs::remove_file(one.join("uq.json")).unwrap();
    let text = run_ok(&["uq", p, "-o", one.to_str().unwrap()]);
    assert!(text.contains("resumed"), "{text}");
    files_equal(&one, &sharded);

    let r = report(&one);
    if design == "monte_carlo" {
        // The relative-SE rule stops at a chunk boundary before its most samples.
        let n = r["samples"].as_u64().unwrap();
        assert!(n.is_multiple_of(4) && n < 64 && r["stop_met"] == true, "{n}");
    }
}

/// A rerun with another `[uq]` table into the same directory is refused.
#[test]
fn parts_of_another_study_are_not_mixed() {
    let dir = tempfile::tempdir().unwrap();
    let input =
        "[[uq.input]]\nparameter = \"thermal.k.domain\"\ndistribution = \"normal\"\ncv = 0.1\n";
    let a = write_problem(
        dir.path(),
        "a.toml",
        &slab(&format!("[uq]\nsamples = 8\nseed = 1\n{input}")),
    );
    let b = write_problem(
        dir.path(),
        "b.toml",
        &slab(&format!("[uq]\nsamples = 8\nseed = 2\n{input}")),
    );
    let out = dir.path().join("out");
    run_ok(&["--quiet", "uq", a.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let o = bin().args(["uq", b.to_str().unwrap(), "-o", out.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("another study"));
}

/// A film coefficient that a wide normal makes negative: those samples fail (the parameter's
/// bound refuses them), are reported by index, and the others go on.
#[test]
fn failed_samples_are_reported_by_index_and_the_rest_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let text = slab(
        r#"[[thermal.bc]]
group = "xmax"
kind = "convection"
h = 50.0
t_inf = 300.0

[uq]
samples = 24

[[uq.input]]
parameter = "bc.xmax.h"
distribution = "normal"
cv = 1.0
"#,
    );
    let path = write_problem(dir.path(), "slab.toml", &text);
    let out = dir.path().join("out");
    let text = run_ok(&["uq", path.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let r = report(&out);
    let failed: Vec<u64> =
        r["failures"].as_array().unwrap().iter().map(|f| f["index"].as_u64().unwrap()).collect();
    // The failed samples are exactly those with h < 0.
    let csv = std::fs::read_to_string(out.join("samples.csv")).unwrap();
    let negative: Vec<u64> = csv
        .lines()
        .skip(1)
        .filter(|l| l.split(',').nth(2).unwrap().parse::<f64>().unwrap() < 0.0)
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect();
    assert!(!negative.is_empty(), "the seed gives no negative h: choose another");
    assert_eq!(failed, negative);
    assert_eq!(r["samples_ok"].as_u64().unwrap() as usize, 24 - failed.len());
    assert!(text.contains(&format!("sample {} failed", failed[0])), "{text}");
}

/// The library runs a study without the command line, and the unsharded run's order of
/// evaluation does not matter: running the chunks backwards gives the same report. A chunk's
/// JSON reads back to the same bits.
#[test]
fn chunks_in_any_order_reduce_to_the_same_report() {
    let dir = tempfile::tempdir().unwrap();
    let text = slab(
        "[uq]\nsamples = 24\nbatch = 6\n[[uq.input]]\nparameter = \"thermal.k.domain\"\ndistribution = \"uniform\"\nlower = 8.0\nupper = 12.0\n",
    );
    let path = write_problem(dir.path(), "slab.toml", &text);
    let pf = ProblemFile::read(&path).unwrap();
    let forward = dir.path().join("forward");
    let mut study = Study::new(pf.clone()).unwrap();
    uq::run(&mut study, &forward, Shard::ALL, &mut Log::open(&forward, "run"), |_| {}).unwrap();
    let a = uq::reduce(&forward).unwrap();
    let backward = dir.path().join("backward");
    let mut study = Study::new(pf).unwrap();
    let parts = uq::Parts::of(&backward);
    parts.start(&study.plan).unwrap();
    for c in (0..study.plan.chunks()).rev() {
        let chunk = study.chunk(c, |_| {});
        parts.write_chunk(&chunk).unwrap();
        // The JSON of a chunk reads back to the same bits.
        assert_eq!(parts.read_chunk(&study.plan, c).unwrap(), chunk);
    }
    parts.write_mean(&study.mean_part().unwrap()).unwrap();
    let b = uq::reduce(&backward).unwrap();
    assert_eq!(a.report, b.report);
    files_equal(&forward, &backward);
}

/// Bad `[uq]` tables: a located error (file:line:column) naming the key, never a panic.
#[rstest::rstest]
#[case(
    "[[uq.input]]\nparameter = \"thermal.k.nowhere\"\ndistribution = \"normal\"\ncv = 0.1\n",
    2,
    "unknown parameter 'thermal.k.nowhere'"
)]
#[case(
    "[[uq.input]]\nparameter = \"thermal.k.domain\"\ndistribution = \"gamma\"\ncv = 0.1\n",
    3,
    "expected normal, lognormal, uniform or truncated_normal"
)]
#[case(
    "[[uq.input]]\nparameter = \"thermal.k.domain\"\ndistribution = \"normal\"\nstd = 1.0\ncv = 0.1\n",
    4,
    "give std or cv, not both"
)]
#[case(
    "[[uq.input]]\nparameter = \"thermal.k.domain\"\ndistribution = \"normal\"\ncv = -0.1\n",
    4,
    "[[uq.input]] 'thermal.k.domain' cv"
)]
#[case(
    "[[uq.input]]\nparameter = \"thermal.k.domain\"\ndistribution = \"normal\"\n",
    3,
    "a normal input needs std or cv"
)]
#[case(
    "design = \"halton\"\n[[uq.input]]\nparameter = \"thermal.k.domain\"\ndistribution = \"normal\"\ncv = 0.1\n",
    1,
    "expected monte_carlo, latin_hypercube or sobol"
)]
#[case(
    "[[uq.input]]\nparameter = \"thermal.k.domain\"\ndistribution = \"normal\"\ncv = 0.1\n[[uq.output]]\nquantity = \"max_stress\"\n",
    6,
    "unknown quantity 'max_stress'"
)]
#[case(
    "correlation = [[1.0, 0.9], [0.9, 1.0]]\n[[uq.input]]\nparameter = \"thermal.k.domain\"\ndistribution = \"normal\"\ncv = 0.1\n",
    1,
    "2 rows for 1 inputs"
)]
#[case(
    "samples = 0\n[[uq.input]]\nparameter = \"thermal.k.domain\"\ndistribution = \"normal\"\ncv = 0.1\n",
    1,
    "[uq] samples: must be at least 1"
)]
#[case(
    "[[uq.input]]\nparameter = \"thermal.k.domain\"\ndistribution = \"lognormal\"\ncv = 0.1\ncorrelation_length = 0.2\n",
    5,
    "'thermal.k.domain' is not a per-element parameter"
)]
#[case(
    "[[uq.input]]\nparameter = \"thermal.k_elem.domain\"\ndistribution = \"lognormal\"\ncv = 0.1\nmodes = 4\n",
    5,
    "belongs to a random field, which needs correlation_length"
)]
#[case(
    "[[uq.input]]\nparameter = \"thermal.k_elem.domain\"\ndistribution = \"lognormal\"\ncv = 0.1\ncorrelation_length = 0.2\nmodes = 37\n",
    6,
    "37: between 1 and the group's 36 cells"
)]
#[case(
    "[[uq.input]]\nparameter = \"thermal.k_elem.domain\"\ndistribution = \"uniform\"\ncv = 0.1\ncorrelation_length = 0.2\n",
    3,
    "a random field is normal or lognormal"
)]
#[case(
    "[[uq.input]]\nparameter = \"thermal.k_elem.domain\"\ndistribution = \"lognormal\"\nstd = 1.0\ncorrelation_length = 0.2\n",
    4,
    "give its spread as cv"
)]
#[case(
    "[[uq.input]]\nparameter = \"thermal.k_elem.domain\"\ndistribution = \"lognormal\"\ncv = 0.1\ncorrelation_length = 0.2\ncovariance = \"matern\"\n",
    6,
    "expected exponential or squared_exponential"
)]
#[case(
    "[[uq.input]]\nparameter = \"thermal.k_elem.domain\"\ndistribution = \"lognormal\"\ncv = 0.1\ncorrelation_length = 0.2\nenergy = 1.5\n",
    6,
    "1.5 is not a share in (0, 1]"
)]
#[case("colour = 1\n", 1, "unknown field `colour`")]
#[case("samples = 4\n", 0, "no [[uq.input]]")]
#[case(
    "[[uq.input]]\nparameter = \"thermal.k.domain\"\ndistribution = \"truncated_normal\"\ncv = 0.01\nlower = 50.0\n",
    3,
    "holds no probability"
)]
#[case(
    "[[uq.input]]\nparameter = \"thermal.k.domain\"\ndistribution = \"normal\"\ncv = 0.1\n[uq.stop]\nrule = \"forever\"\n",
    6,
    "expected count, relative_se or seed_check"
)]
fn bad_uq_tables_give_located_errors(
    #[case] table: &str,
    #[case] line: usize,
    #[case] message: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let text = slab(&format!("[uq]\n{table}"));
    let uq_line = text.lines().position(|l| l == "[uq]").unwrap() + 1;
    let path = write_problem(dir.path(), "bad.toml", &text);
    let o = bin()
        .args(["uq", path.to_str().unwrap(), "-o", dir.path().join("o").to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(message), "{err}");
    let want = format!("bad.toml:{}:", uq_line + line);
    assert!(err.contains(&want), "expected {want} in: {err}");
}

#[test]
fn a_problem_without_a_uq_table_is_refused_with_a_pointer_to_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_problem(dir.path(), "plain.toml", &slab(""));
    let o = bin().args(["uq", path.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs a [uq] table"));
    let o = bin().args(["uq", "--shard", "3/2", path.to_str().unwrap()]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("the shard must be in 0..2"));
}

/// The results replace their directory as a whole, so `-o .` is refused before any sample.
#[test]
fn the_current_directory_is_refused_as_output_before_any_sample() {
    let dir = tempfile::tempdir().unwrap();
    let text = slab(
        "[uq]\nsamples = 8\n[[uq.input]]\nparameter = \"thermal.k.domain\"\ndistribution = \"normal\"\ncv = 0.1\n",
    );
    write_problem(dir.path(), "slab.toml", &text);
    let o = bin().current_dir(dir.path()).args(["uq", "slab.toml", "-o", "."]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("name a directory of its own"));
    assert!(!dir.path().join("parts").exists());
}

// ---------------------------------------------------------------------------------------------
// Random fields: a per-element conductivity sampled cell by cell.

/// The slab's conductivity as a log-normal random field.
fn field_slab(divisions: usize, field: &str, rest: &str) -> String {
    slab(&format!(
        r#"[uq]
{rest}

[[uq.input]]
parameter = "thermal.k_elem.domain"
distribution = "lognormal"
{field}

[[uq.output]]
quantity = "mean_temperature"
"#
    ))
    .replace("divisions = [6, 1, 1]", &format!("divisions = [{divisions}, 1, 1]"))
}

/// A correlation length a million times the slab's: every cell takes the same factor f, a
/// log-normal of mean 1 and cv 0.2, so J = T₀ + a/f with E[1/f] = e^{s²} and
/// E[1/f²] = e^{3s²} (s² = ln(1 + cv²)); the one mode carries all the variance.
#[test]
fn a_fully_correlated_field_is_one_lognormal_factor() {
    let dir = tempfile::tempdir().unwrap();
    let cv: f64 = 0.2;
    let text = field_slab(
        6,
        &format!("cv = {cv}\ncorrelation_length = 1e6\nmodes = 1"),
        "seed = 3\nsamples = 400\nbatch = 50",
    );
    let path = write_problem(dir.path(), "slab.toml", &text);
    let out = dir.path().join("out");
    run_ok(&["--quiet", "uq", path.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let r = report(&out);
    let field = &r["inputs"][0]["field"];
    assert_eq!(field["modes"], 1);
    assert_eq!(field["cells"], 36);
    assert!(field["captured"].as_f64().unwrap() > 1.0 - 1e-6, "{field}");
    let o = output(&r, "mean_temperature");
    let s2 = (1.0 + cv * cv).ln();
    // At ξ = 0 the field is its median e^{−s²/2}: J(0) = T₀ + a e^{s²/2}.
    let lin = &o["linearized"];
    let a = (lin["value_at_mean"].as_f64().unwrap() - T0) * (-0.5 * s2).exp();
    let mean = T0 + a * s2.exp();
    let std = a * ((3.0 * s2).exp() - (2.0 * s2).exp()).sqrt();
    let (got_mean, se_mean) = (o["mean"].as_f64().unwrap(), o["se_mean"].as_f64().unwrap());
    let (got_std, se_std) = (o["std"].as_f64().unwrap(), o["se_std"].as_f64().unwrap());
    assert!((got_mean - mean).abs() <= 3.0 * se_mean, "mean {got_mean} vs {mean} (se {se_mean})");
    assert!((got_std - std).abs() <= 3.0 * se_std, "std {got_std} vs {std} (se {se_std})");
    // dJ/dξ at 0: −a e^{s²/2} s.
    let g = lin["gradient"]["thermal.k_elem.domain[ξ1]"].as_f64().unwrap();
    let want = -a * (0.5 * s2).exp() * s2.sqrt();
    assert!((g / want - 1.0).abs() < 1e-5, "dJ/dξ1 {g} vs {want}");
    assert!((lin["share_by_input"]["thermal.k_elem.domain"].as_f64().unwrap() - 1.0).abs() < 1e-12);
    // The samples carry the mode coefficient, by name.
    let csv = std::fs::read_to_string(out.join("samples.csv")).unwrap();
    assert!(csv.starts_with("index,ok,thermal.k_elem.domain[ξ1],mean_temperature,error"), "{csv}");
}

/// A field with a correlation length of a fifth of the slab: the adjoint gradient by each
/// mode coefficient against central differences of the outputs, the energy rule's truncation,
/// the sampled spread against the first-order one (cv 0.05: nearly linear), and the
/// averaging that shorter correlation brings (a lower spread than the fully correlated
/// field's).
#[test]
fn field_modes_have_adjoint_gradients_and_the_sampled_spread() {
    let text = field_slab(
        12,
        "cv = 0.05\ncorrelation_length = 0.2\nmodes = 24\nenergy = 0.9",
        "seed = 5\nsamples = 256\nbatch = 64",
    );
    let dir = tempfile::tempdir().unwrap();
    let path = write_problem(dir.path(), "slab.toml", &text);
    let file = ProblemFile::read(&path).unwrap();
    let mut study = Study::new(file).unwrap();
    let f = study.plan.inputs[0].field.clone().unwrap();
    assert!(f.captured >= 0.9 && f.modes < 24, "{f:?}");
    let kl = study.field(0).unwrap();
    assert!(kl.captured(f.modes - 1) < 0.9);
    let mean = study.mean_part().unwrap();
    let g = mean.gradients[0].clone().unwrap();
    assert_eq!(g.len(), f.modes);
    let h = 1e-4;
    for k in [0, 1, f.modes - 1] {
        let mut x = vec![0.0; f.modes];
        x[k] = h;
        let up = study.evaluate(&x).unwrap()[0];
        x[k] = -h;
        let down = study.evaluate(&x).unwrap()[0];
        let fd = (up - down) / (2.0 * h);
        assert!((g[k] - fd).abs() <= 1e-6 * g[0].abs(), "mode {}: adjoint {} vs {fd}", k + 1, g[k]);
    }

    let out = dir.path().join("out");
    run_ok(&["--quiet", "uq", path.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let r = report(&out);
    let o = output(&r, "mean_temperature");
    let lin_std = o["linearized"]["std"].as_f64().unwrap();
    let (std, se_std) = (o["std"].as_f64().unwrap(), o["se_std"].as_f64().unwrap());
    assert!((std - lin_std).abs() <= 3.0 * se_std + 0.03 * lin_std, "{std} vs {lin_std}");
    // Fully correlated, the first-order std would be J's sensitivity to one common factor:
    // Σ_e dJ/dk_e k_e · cv.
    let j0 = o["linearized"]["value_at_mean"].as_f64().unwrap();
    let common = (j0 - T0) * 0.05;
    assert!(lin_std < 0.8 * common, "{lin_std} vs {common}");
}

/// Shards and resumed runs of a random-field study (scrambled Sobol over its modes) give the
/// bytes of one run (each rank or shard expands the field itself).
#[test]
fn random_field_studies_shard_to_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let text = field_slab(
        8,
        "cv = 0.1\ncorrelation_length = 0.3\nmodes = 6",
        "design = \"sobol\"\nseed = 2\nsamples = 24\nbatch = 8",
    );
    let path = write_problem(dir.path(), "slab.toml", &text);
    let p = path.to_str().unwrap();
    let one = dir.path().join("one");
    run_ok(&["--quiet", "uq", p, "-o", one.to_str().unwrap()]);
    let sharded = dir.path().join("sharded");
    let s = sharded.to_str().unwrap();
    for shard in ["1/2", "0/2"] {
        run_ok(&["--quiet", "uq", p, "-o", s, "--shard", shard]);
    }
    run_ok(&["--quiet", "uq", "--reduce", s]);
    files_equal(&one, &sharded);
    let text = run_ok(&["uq", p, "-o", one.to_str().unwrap()]);
    assert!(text.contains("random field over 48 cells"), "{text}");
}
