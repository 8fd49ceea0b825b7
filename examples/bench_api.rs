//! The library API in a loop, the way a user's optimizer or a Python binding drives it: set a
//! scalar parameter by name, then solve and differentiate, K times. Prints JSON with the
//! fastest and the median iteration; `python/examples/bench_api.py` is the same loop from
//! Python, for the overhead of the binding (BENCHMARKS.md).
//!
//!   cargo run --release --example bench_api -- examples/microactuator.toml thermal.k.polysilicon_layer 10

use std::time::Instant;

use gradfem::api::Simulation;

fn main() {
    // Errors in their located form (file:line, the parameter, what the problem offers).
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, file, param, k] = &args[..] else {
        return Err("usage: bench_api FILE PARAMETER ITERATIONS".into());
    };
    let iterations: usize = k.parse()?;
    let mut sim = Simulation::from_file(file)?;
    let base = sim.parameter(param)?[0];
    let mut times = Vec::with_capacity(iterations);
    let mut check = 0.0;
    for i in 0..iterations {
        let t0 = Instant::now();
        // Alternate the value, so that every iteration solves afresh.
        sim.set_parameter(param, base * (1.0 + 0.01 * (i % 2) as f64))?;
        let g = sim.gradient()?;
        times.push(t0.elapsed().as_secs_f64());
        check += g.value;
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let out = serde_json::json!({
        "side": "rust",
        "file": file,
        "iterations": iterations,
        "min_s": sorted[0],
        "median_s": sorted[sorted.len() / 2],
        "sum_of_objectives": check,
    });
    println!("{out}");
    Ok(())
}
