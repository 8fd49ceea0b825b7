//! Memory benchmark of the discrete adjoint: store-all, binomial checkpointing and truncated
//! backpropagation on 10⁵ steps.
//!
//! System: `gradfem_dynamics::scenes::SpringChain` (4 particles in a damped spring chain, 52
//! state numbers), velocity Verlet, dt = 10⁻³, N = 10⁵ steps (100 s; the chain is still ringing
//! at the end). Objective: J = 1/(2(N+1)) Σ_k Σ_i |r_i(t_k) − r̂_i(t_k)|² with the analytic
//! target r̂_i(t) = (i + 1 + 0.05 sin t, 0, 0) (no stored observation, so memory is that of the
//! adjoint alone). Gradient with respect to `spring.k`, `damper.c` and x₀.
//!
//! Modes: `store_all`, `binomial_10`, `binomial_50`, `binomial_200`, `truncated_100`,
//! `truncated_1000`. Each mode runs in a child process (this program started again with
//! `--mode NAME`) so that its peak resident set (VmHWM of /proc/self/status, Linux only; null
//! elsewhere) is its own.
//!
//! Run: `cargo run --release -p gradfem-dynamics --example bench_memory [-- --steps N]
//! [--damping C] [--check-finite]` (`--check-finite`: with the opt-in NaN/∞ scan; default c = 0.02: light damping, decay time m/c = 50 s; with c = 2 the
//! chain's memory is short and truncation becomes a good approximation).
//! Prints one JSON line per mode: `mode`, `steps`, `damping`, `snapshots` (null unless binomial),
//! `window` (null unless truncated), `stored_states` (peak), `stored_bytes` (= stored states ×
//! 52 × 8), `forward_steps`, `recomputed_steps` (= forward_steps − N), `seconds` (gradient
//! only), `peak_rss_kb`, `value`, `grad_rel_diff` (‖g − g_store_all‖ / ‖g_store_all‖ over the
//! parameters and x₀; 0 for store-all), `param_rel_diff` (the same over k and c only: truncation
//! drops most of dJ/dx₀ by design) and `dj_dk`.

use std::process::Command;
use std::time::Instant;

use gradfem_dynamics::prelude::*;
use gradfem_dynamics::scenes::SpringChain;
use gradfem_solvers::params::ParamVector;

const DT: f64 = 1e-3;
const MODES: [&str; 6] =
    ["store_all", "binomial_10", "binomial_50", "binomial_200", "truncated_100", "truncated_1000"];

/// J = w/2 Σ_k Σ_i |r_i(t_k) − r̂_i(t_k)|², r̂_i(t) = (i + 1 + 0.05 sin t, 0, 0).
struct AnalyticMisfit {
    n_bodies: usize,
    weight: f64,
}

impl Objective for AnalyticMisfit {
    fn term(
        &self,
        k: usize,
        _n_steps: usize,
        x: &[f64],
        _pv: &ParamValues,
        grad: Option<(&mut [f64], &mut [f64])>,
    ) -> f64 {
        let t = k as f64 * DT;
        let mut g = grad;
        let mut j = 0.0;
        for i in 0..self.n_bodies {
            let target = [(i + 1) as f64 + 0.05 * t.sin(), 0.0, 0.0];
            for d in 0..3 {
                let e = x[3 * i + d] - target[d];
                j += 0.5 * self.weight * e * e;
                if let Some((xb, _)) = g.as_mut() {
                    xb[3 * i + d] += self.weight * e;
                }
            }
        }
        j
    }
}

fn memory_of(mode: &str) -> Memory {
    let (kind, n) = mode.rsplit_once('_').unwrap_or((mode, ""));
    match kind {
        "binomial" => Memory::Binomial { snapshots: n.parse().expect("binomial_<snapshots>") },
        "truncated" => Memory::Truncated { window: n.parse().expect("truncated_<window>") },
        _ => Memory::StoreAll,
    }
}

fn peak_rss_kb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs one mode in this process and prints its JSON line with the raw gradient.
fn child(
    mode: &str,
    steps: usize,
    damping: f64,
    check: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let chain = SpringChain { c: damping, ..SpringChain::default() };
    let sys = chain.system(chain.k, chain.c)?;
    let obj = AnalyticMisfit { n_bodies: chain.n, weight: 1.0 / (steps + 1) as f64 };
    let sim = Simulation::new(&sys, VelocityVerlet, DT, steps).with_finite_check(check);
    let memory = memory_of(mode);
    let t = Instant::now();
    let r = sim.gradient(&chain.x0(), &obj, memory)?;
    let seconds = t.elapsed().as_secs_f64();
    let pv = ParamVector::all(&sys.registry);
    let mut g = r.params.flatten(&pv);
    g.extend(r.initial_state.to_flat());
    let state_len = sys.layout().len();
    let out = serde_json::json!({
        "mode": mode,
        "steps": steps,
        "damping": damping,
        "check_finite": check,
        "snapshots": match memory { Memory::Binomial { snapshots } => Some(snapshots), _ => None },
        "window": match memory { Memory::Truncated { window } => Some(window), _ => None },
        "stored_states": r.stats.max_stored_states,
        "stored_bytes": r.stats.max_stored_states * state_len * 8,
        "forward_steps": r.stats.forward_steps,
        "recomputed_steps": r.stats.forward_steps - steps,
        "seconds": seconds,
        "peak_rss_kb": peak_rss_kb(),
        "value": r.value,
        "gradient": g,
    });
    println!("{out}");
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
    let steps: usize = arg("--steps").map_or(Ok(100_000), |s| s.parse())?;
    let check = args.iter().any(|a| a == "--check-finite");
    let damping: f64 = arg("--damping").map_or(Ok(SpringChain::default().c), |s| s.parse())?;
    if let Some(mode) = arg("--mode") {
        return child(mode, steps, damping, check);
    }
    let exe = std::env::current_exe()?;
    let mut reference: Option<Vec<f64>> = None;
    for mode in MODES {
        let out = Command::new(&exe)
            .args(["--mode", mode, "--steps", &steps.to_string()])
            .args(["--damping", &damping.to_string()])
            .args(check.then_some("--check-finite"))
            .output()?;
        if !out.status.success() {
            return Err(
                format!("mode {mode} failed: {}", String::from_utf8_lossy(&out.stderr)).into()
            );
        }
        let mut v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let g: Vec<f64> = serde_json::from_value(v["gradient"].take())?;
        let reference = reference.get_or_insert_with(|| g.clone());
        let norm = |a: &[f64]| a.iter().map(|x| x * x).sum::<f64>().sqrt();
        let diff: Vec<f64> = g.iter().zip(reference.iter()).map(|(a, b)| a - b).collect();
        let obj = v.as_object_mut().ok_or("child output is not an object")?;
        obj.remove("gradient");
        obj.insert("grad_rel_diff".into(), (norm(&diff) / norm(reference)).into());
        let np = 2; // spring.k, damper.c
        let pdiff = norm(&diff[..np]) / norm(&reference[..np]);
        obj.insert("param_rel_diff".into(), pdiff.into());
        obj.insert("dj_dk".into(), g[0].into());
        println!("{v}");
    }
    Ok(())
}
