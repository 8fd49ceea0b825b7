//! Electro-thermal bar: resistance, Joule power and the Joule-heated temperature profile against
//! closed forms, through the problem file and the CLI; gradients by Taylor tests.

use std::path::Path;
use std::process::Command;

use gradfem::app::{self, Problem};
use gradfem::problem::ProblemFile;

const L: f64 = 0.1;
const W: f64 = 0.01;
const SIGMA: f64 = 5e4;
const K: f64 = 34.0;
const V: f64 = 0.5;
const T0: f64 = 300.0;

/// The bar of data/benchmarks/README.md §6: voltage V at x = 0, ground at x = L, both ends at
/// T₀, insulated sides.
fn bar(cell: &str, div: [usize; 3], extra: &str) -> String {
    format!(
        r#"
title = "Joule-heated bar"
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

[[electrical.terminal]]
group = "xmin"
kind = "voltage"
value = {V}

[[electrical.terminal]]
group = "xmax"
kind = "ground"
{extra}
"#,
        div[0], div[1], div[2]
    )
}

fn build(text: &str) -> Problem {
    let pf = ProblemFile::parse(Path::new("bar.toml"), text.to_string()).expect("parses");
    app::build_problem(&pf).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn joule_heated_bar_matches_the_closed_form() {
    let mut p = build(&bar("hex20", [8, 1, 1], ""));
    p.solve().expect("solve");
    assert!(p.electrical().is_some(), "electro-thermal expected");
    let t = p.thermal().temperature().expect("solved");
    let coords = &p.thermal().model.coords;
    let mut err: f64 = 0.0;
    for (n, x) in coords.iter().enumerate() {
        let x = x[0];
        let exact = T0 + SIGMA * V * V / (2.0 * K * L * L) * x * (L - x);
        err = err.max((t[n] - exact).abs());
    }
    // ΔT_max = σV²/(8k) = 45.956 K; P2 in x reproduces the quadratic exactly.
    assert!((SIGMA * V * V / (8.0 * K) - 45.956).abs() < 1e-3);
    assert!(err < 1e-8, "max nodal error {err:e} K");
    let s = app::summary("bar", &p).expect("summary");
    let r_exact = L / (SIGMA * W * W);
    let r = s.resistance_ohm.expect("resistance");
    assert!((r - r_exact).abs() < 1e-10 * r_exact, "R = {r} vs {r_exact}");
    let power = s.joule_power_w.expect("power");
    let vi = s.voltage_v.unwrap() * s.current_a.unwrap();
    assert!((power - V * V / r_exact).abs() < 1e-9 * power, "P = {power}");
    assert!((power - vi).abs() < 1e-9 * power, "∫Q = {power} vs V·I = {vi}");
    assert!((s.max_temperature_k - (T0 + 45.956)).abs() < 1e-3, "{}", s.max_temperature_k);
}

#[test]
fn cli_run_json_reports_resistance_and_power() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bar.toml");
    let out = dir.path().join("out");
    std::fs::write(&file, bar("tet10", [6, 1, 1], "")).expect("write");
    let o = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .args(["run", file.to_str().unwrap(), "--json", "--output", out.to_str().unwrap()])
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let r_exact = L / (SIGMA * W * W);
    let r = v["resistance_ohm"].as_f64().expect("resistance_ohm");
    assert!((r - r_exact).abs() < 1e-9 * r_exact, "R = {r}");
    let p = v["joule_power_W"].as_f64().expect("joule_power_W");
    assert!((p - V * V / r_exact).abs() < 1e-9 * p);
    assert!((v["current_A"].as_f64().unwrap() - V / r_exact).abs() < 1e-9 * p);
    assert!((v["voltage_V"].as_f64().unwrap() - V).abs() < 1e-12);
    assert!((v["max_temperature_K"].as_f64().unwrap() - (T0 + 45.956)).abs() < 1e-3);
}

fn taylor(p: &mut Problem) -> gradfem::solvers::taylor::TaylorResult {
    p.solve().expect("solve");
    let r = p.taylor_test(&Default::default(), |_| {}).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{}", r.table());
    r
}

#[test]
fn one_way_taylor_max_temperature() {
    let extra = r#"
[[objective]]
kind = "max"
group = "domain"

[parameters]
register = ["electrical.sigma.domain", "thermal.k.domain", "load.xmin.voltage", "bc.xmin.temperature", "mesh.coordinates"]
"#;
    let mut p = build(&bar("hex8", [6, 2, 2], extra));
    let r = taylor(&mut p);
    assert!(r.passed && r.min_rate() >= 1.9, "{}", r.table());
}

#[test]
fn one_way_taylor_mean_temperature_and_resistance_with_current_terminal() {
    let text = bar("tet4", [6, 2, 2], "")
        .replace("kind = \"voltage\"\nvalue = 0.5", "kind = \"current\"\ncurrent = 2.5")
        + r#"
[[objective]]
kind = "average"
group = "domain"

[[objective]]
kind = "resistance"
drive = "xmin"
reference = "xmax"
weight = 1e3

[parameters]
register = ["electrical.sigma_elem.domain", "load.xmin.current", "thermal.k.domain", "mesh.coordinates"]
"#;
    let mut p = build(&text);
    let r = taylor(&mut p);
    assert!(r.passed && r.min_rate() >= 1.9, "{}", r.table());
}

const MAX_T: &str = "[[objective]]\nkind = \"max\"\ngroup = \"domain\"\n";
const MEAN_T: &str = "[[objective]]\nkind = \"average\"\ngroup = \"domain\"\n";
const RES: &str =
    "[[objective]]\nkind = \"resistance\"\ndrive = \"xmin\"\nreference = \"xmax\"\nweight = 1e3\n";
const CUR: &str = "[[objective]]\nkind = \"current\"\nterminal = \"xmax\"\n";

/// One-way, one parameter at a time, with a convective side so `h` matters.
#[rstest::rstest]
#[case::sigma("electrical.sigma.domain", MAX_T)]
#[case::sigma_elem("electrical.sigma_elem.domain", MEAN_T)]
#[case::voltage("load.xmin.voltage", MAX_T)]
#[case::voltage_current("load.xmin.voltage", CUR)]
#[case::sigma_resistance("electrical.sigma.domain", RES)]
#[case::k("thermal.k.domain", MAX_T)]
#[case::h("bc.ymax.h", MEAN_T)]
#[case::coords("mesh.coordinates", MAX_T)]
#[case::coords_current("mesh.coordinates", CUR)]
fn one_way_taylor_per_parameter(#[case] param: &str, #[case] objective: &str) {
    let extra = format!(
        "[[thermal.bc]]\ngroup = \"ymax\"\nkind = \"convection\"\nh = 50.0\nt_inf = 290.0\n\n{objective}\n[parameters]\nregister = [\"{param}\"]\n"
    );
    let mut p = build(&bar("tet10", [4, 1, 1], &extra));
    let r = taylor(&mut p);
    assert!(r.passed && r.min_rate() >= 1.9, "{param}:\n{}", r.table());
}

#[rstest::rstest]
#[case::unknown_key("sigma = 50000", "sigma = 50000\ncolour = 1", "unknown field `colour`")]
#[case::unknown_group(
    "group = \"xmin\"\nkind = \"voltage\"",
    "group = \"xmiin\"\nkind = \"voltage\"",
    "unknown group 'xmiin'"
)]
#[case::no_value("kind = \"voltage\"\nvalue = 0.5", "kind = \"voltage\"", "needs `value`")]
#[case::bad_kind("kind = \"ground\"", "kind = \"earth\"", "unknown terminal kind 'earth'")]
#[case::both("sigma = 50000", "sigma = 50000\nresistivity = 2e-5", "exactly one of")]
fn problem_file_errors_name_the_problem(
    #[case] from: &str,
    #[case] to: &str,
    #[case] expect: &str,
) {
    let text = bar("hex8", [2, 1, 1], "").replacen(from, to, 1);
    assert_ne!(text, bar("hex8", [2, 1, 1], ""), "replacement applied");
    let pf = ProblemFile::parse(Path::new("bar.toml"), text);
    let msg = match pf {
        Err(e) => e.to_string(),
        Ok(pf) => app::build_problem(&pf).err().expect("an error").to_string(),
    };
    assert!(msg.contains(expect), "{msg}");
    assert!(msg.contains("bar.toml"), "{msg}");
}

#[test]
fn unknown_parameters_and_terminals_are_errors() {
    let e = |extra: &str| {
        let pf = ProblemFile::parse(Path::new("bar.toml"), bar("hex8", [2, 1, 1], extra)).unwrap();
        app::build_problem(&pf).err().expect("an error").to_string()
    };
    let m = e("[parameters]\nregister = [\"electrical.sigma.nowhere\"]\n");
    let located =
        m.strip_prefix("bar.toml:").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()));
    assert!(m.contains("electrical.sigma.domain") && located, "{m}");
    let m = e("[parameters]\nregister = [\"electrical.alpha_r.domain\"]\n");
    assert!(m.contains("no linear resistivity law"), "{m}");
    let m = e("[[objective]]\nkind = \"current\"\nterminal = \"ymin\"\n");
    assert!(m.contains("'ymin' is not a terminal"), "{m}");
    // A thermal-only build of an electro-thermal file is refused.
    let pf = ProblemFile::parse(Path::new("bar.toml"), bar("hex8", [2, 1, 1], "")).unwrap();
    assert!(app::build(&pf).is_err());
}
