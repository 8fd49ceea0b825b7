//! The cost of a random field's Karhunen–Loève expansion: the modes of an exponential field
//! over n cells of a regular 3D grid (unit cells, correlation length a fifth of the box),
//! for each n given; the best of `--repeat` runs. Prints one JSON object; BENCHMARKS.md has
//! a row.
//!
//!   cargo run --release -p gradfem-uq --example bench_random_field -- [--cells 1000,4000,16000] [--modes 32] [--repeat 3]

use std::time::Instant;

use gradfem_uq::field::{Covariance, KarhunenLoeve};

fn arg<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cells: Vec<usize> = arg::<String>(&args, "--cells")
        .unwrap_or_else(|| "1000,4000,16000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let modes: usize = arg(&args, "--modes").unwrap_or(32);
    let repeat: usize = arg(&args, "--repeat").unwrap_or(3);
    let mut rows = Vec::new();
    for &n in &cells {
        // An a × a × a/4 grid of unit cells with about n cells.
        let a = ((4 * n) as f64).cbrt().round().max(1.0) as usize;
        let c = (a / 4).max(1);
        let points: Vec<[f64; 3]> = (0..a * a * c)
            .map(|k| [(k % a) as f64 + 0.5, ((k / a) % a) as f64 + 0.5, (k / (a * a)) as f64 + 0.5])
            .collect();
        let weights = vec![1.0; points.len()];
        let length = a as f64 / 5.0;
        let mut best = f64::INFINITY;
        let mut captured = 0.0;
        for _ in 0..repeat.max(1) {
            let t = Instant::now();
            let kl =
                KarhunenLoeve::compute(&points, &weights, Covariance::Exponential, length, modes)
                    .expect("the expansion converges");
            best = best.min(t.elapsed().as_secs_f64());
            captured = kl.captured(modes);
        }
        rows.push(format!(
            r#"{{"cells": {}, "modes": {modes}, "correlation_length": {length}, "seconds": {best:.4}, "captured": {captured:.4}}}"#,
            points.len()
        ));
    }
    println!(
        r#"{{"benchmark": "random_field", "threads": {}, "runs": [{}]}}"#,
        rayon::current_num_threads(),
        rows.join(", ")
    );
}
