//! Benchmark: the full chain I → Q → T → σ → u, forward solve and adjoint gradient of one
//! objective with respect to every registered parameter.
//!
//! - `--file F` (default `examples/microactuator.toml`: the shared tet10 actuator mesh):
//!   the problem file as given.
//! - `--box N`: a thermo-mechanical box [0, 1]³ of N³ Hex8 cells (3 (N+1)³ mechanical
//!   unknowns; N = 69 gives 10⁶): heated by a source, held at T = 0 on x = 0 and clamped there,
//!   objective the mean displacement of the face x = 1, registered k, E, ν, α and the
//!   per-element E.
//! - `--et-box N [--alpha-r A]`: an electro-thermal box [0, 1]³ of N³ Hex8 cells, 1 V across
//!   x, ends held at 300 K; with α_R > 0 the coupling is two-way and solved by the staggered
//!   scheme (each field with its own solver, AMG-CG above 5·10⁴ unknowns); objective the
//!   smooth maximum temperature plus the resistance, registered σ, α_R, k and the voltage.
//!
//! Run: `cargo run --release --example bench_chain -- --box 40`
//! Prints one JSON line: the unknowns of each field, set-up, forward and gradient wall times
//! (and their ratio), the forward's per-field timings, peak RSS, J.

use std::path::PathBuf;
use std::time::Instant;

use gradfem::app;
use gradfem::problem::ProblemFile;

#[path = "common/rss.rs"]
mod rss;
use rss::peak_rss_mb;

fn box_problem(n: usize) -> String {
    format!(
        r#"
title = "thermo-mechanical box"

[mesh]
box = {{ lengths = [1.0, 1.0, 1.0], divisions = [{n}, {n}, {n}], cell = "hex8" }}

[[thermal.material]]
group = "domain"
k = 10.0
source = 100.0

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0

[[mechanical.material]]
group = "domain"
young = 1e9
poisson = 0.3
alpha = 1e-5
t_ref = 300.0

[[mechanical.bc]]
group = "xmin"
kind = "fixed"

[[objective]]
kind = "average_displacement"
group = "xmax"
direction = [1.0, 0.0, 0.0]

[parameters]
register = [
    "thermal.k.domain",
    "mechanical.young_elem.domain",
    "mechanical.poisson.domain",
    "mechanical.alpha.domain",
]
"#
    )
}

fn et_box_problem(n: usize, alpha_r: f64) -> String {
    format!(
        r#"
title = "electro-thermal box"

[mesh]
box = {{ lengths = [1.0, 1.0, 1.0], divisions = [{n}, {n}, {n}], cell = "hex8" }}

[[thermal.material]]
group = "domain"
k = 10.0

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0

[[thermal.bc]]
group = "xmax"
kind = "temperature"
value = 300.0

[[electrical.conductor]]
group = "domain"
sigma = 100.0
alpha_r = {alpha_r}
t_ref = 300.0

[[electrical.terminal]]
group = "xmin"
kind = "voltage"
value = 1.0

[[electrical.terminal]]
group = "xmax"
kind = "ground"

[coupling]
scheme = "staggered"
tol = 1e-10

[[objective]]
kind = "max"
group = "domain"
p = 8.0

[[objective]]
kind = "resistance"
drive = "xmin"
reference = "xmax"

[parameters]
register = [
    "electrical.sigma.domain",
    "electrical.alpha_r.domain",
    "thermal.k.domain",
    "load.xmin.voltage",
]
"#
    )
}

fn main() -> anyhow::Result<()> {
    let mut file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/microactuator.toml");
    let mut boxed = None;
    let mut et_box = None;
    let mut alpha_r = 0.0;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--file" => {
                file = PathBuf::from(
                    args.next().ok_or_else(|| anyhow::anyhow!("--file takes a path"))?,
                )
            }
            "--box" => {
                boxed = Some(
                    args.next()
                        .and_then(|v| v.parse::<usize>().ok())
                        .filter(|&v| v > 0)
                        .ok_or_else(|| anyhow::anyhow!("--box takes a positive N"))?,
                )
            }
            "--et-box" => {
                et_box = Some(
                    args.next()
                        .and_then(|v| v.parse::<usize>().ok())
                        .filter(|&v| v > 0)
                        .ok_or_else(|| anyhow::anyhow!("--et-box takes a positive N"))?,
                )
            }
            "--alpha-r" => {
                alpha_r = args
                    .next()
                    .and_then(|v| v.parse::<f64>().ok())
                    .ok_or_else(|| anyhow::anyhow!("--alpha-r takes a number"))?
            }
            other => anyhow::bail!(
                "unknown argument '{other}' (expected --file F, --box N or --et-box N [--alpha-r A])"
            ),
        }
    }
    let t_setup = Instant::now();
    let pf = match (boxed, et_box) {
        (Some(n), _) => ProblemFile::parse(std::path::Path::new("box.toml"), box_problem(n)),
        (None, Some(n)) => {
            ProblemFile::parse(std::path::Path::new("et_box.toml"), et_box_problem(n, alpha_r))
        }
        (None, None) => ProblemFile::read(&file),
    }
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut problem = app::build_problem(&pf).map_err(|e| anyhow::anyhow!("{e}"))?;
    let setup_s = t_setup.elapsed().as_secs_f64();
    let t_fwd = Instant::now();
    problem.solve().map_err(|e| anyhow::anyhow!("{e}"))?;
    let forward_s = t_fwd.elapsed().as_secs_f64();
    let t_grad = Instant::now();
    let (j, grad, timings) = problem.gradient().map_err(|e| anyhow::anyhow!("{e}"))?;
    let gradient_s = t_grad.elapsed().as_secs_f64();
    let th = problem.thermal();
    let mech = problem.mechanical();
    let out = serde_json::json!({
        "problem": pf.spec.title,
        "nodes": th.model.n_nodes(),
        "thermal_unknowns": th.model.n_unknowns(),
        "electrical_unknowns": problem.electrical().map(|p| p.model.n_unknowns()),
        "mechanical_unknowns": mech.map(|m| m.model.n_unknowns()),
        "electrical_solver": problem.electrical().map(|p| p.linear_solver()),
        "registered_entries": problem.registry().total_entries(),
        "setup_s": setup_s,
        "forward_s": forward_s,
        "gradient_s": gradient_s,
        "gradient_over_forward": gradient_s / forward_s,
        "thermal_forward": th.last_solve,
        "electrical_forward_s": problem.electrical().map(|p| p.last_solve_s),
        "cycles": problem.cycles(),
        "mechanical_forward": mech.map(|m| m.last_solve.clone()),
        "gradient": timings,
        "mechanical_gradient": mech.map(|m| m.last_gradient.clone()),
        "peak_rss_mb": peak_rss_mb(),
        "J": j,
        "gradient_norm_inf": grad.norm_inf(),
    });
    println!("{out}");
    Ok(())
}
