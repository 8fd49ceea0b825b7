//! Measures the node-coordinate vector-Jacobian products of the electrical model — λᵀ ∂R/∂X
//! (`parameter_vjp` with `coords`) and Σ q̄ ∂Q/∂X (`joule_vjp` with coordinates) — next to the
//! same products without coordinates, on a Hex20 box of 8×8×8 cells and a Tet10 box of
//! 6·20·20·21 = 50 400 cells, with a linear temperature-dependent resistivity and a
//! non-uniform temperature.
//!
//! Run: `cargo run --release -p gradfem-electrical --example bench_coordinate_vjp -- [REPEATS]`
//! (default 5 repeats; the best time is kept).
//!
//! Prints one JSON line per mesh, e.g. `{"cells": 512, "cell_type": "Hex20", "nodes": 2673,
//! "parameter_vjp_s": …, "parameter_vjp_coords_s": …, "joule_vjp_s": …, "joule_vjp_coords_s":
//! …, "coords_checksum": […, …]}`; the checksums (fixed weighted sums of the two coordinate
//! products) tell apart runs that should agree.

use std::time::Instant;

use gradfem_electrical::{
    ConductorSpec, ElectricalModel, ResistivityLaw, TerminalKind, TerminalSpec, VjpRequest,
};
use gradfem_mesh::CellType;
use gradfem_mesh::generate::{BoxSpec, box_mesh};

fn best_of(repeats: usize, mut f: impl FnMut() -> f64) -> (f64, f64) {
    let mut best = f64::INFINITY;
    let mut value = 0.0;
    for _ in 0..repeats {
        let start = Instant::now();
        value = f();
        best = best.min(start.elapsed().as_secs_f64());
    }
    (best, value)
}

fn run(cell_type: CellType, divisions: [usize; 3], repeats: usize) {
    let mesh =
        box_mesh(&BoxSpec { origin: [0.0; 3], lengths: [1.0, 0.8, 0.6], divisions, cell_type });
    let m = ElectricalModel::new(
        &mesh,
        &[ConductorSpec::with_resistivity(
            "domain",
            1.7e-8,
            ResistivityLaw::Linear { alpha_r: 3.9e-3 },
            293.15,
        )],
        &[
            TerminalSpec { group: "xmin".into(), kind: TerminalKind::Ground },
            TerminalSpec { group: "xmax".into(), kind: TerminalKind::Voltage { value: 0.1 } },
        ],
    )
    .expect("the box is a valid conductor");
    let t: Vec<f64> = m.coords.iter().map(|p| 300.0 + 40.0 * p[0] - 10.0 * p[1] * p[2]).collect();
    let phi: Vec<f64> =
        m.coords.iter().map(|p| 0.1 * p[0] + 0.01 * (3.0 * p[1]).sin() * p[2]).collect();
    let lambda: Vec<f64> = (0..m.n_nodes()).map(|n| (0.37 * n as f64).sin()).collect();
    let q_bar: Vec<f64> =
        (0..*m.qp_offsets().last().unwrap()).map(|k| (0.11 * k as f64).cos()).collect();
    let without = VjpRequest { coords: false, ..VjpRequest::ALL };
    let sum = |c: &Option<Vec<[f64; 3]>>| -> f64 {
        let weighted =
            |(n, d): (usize, &[f64; 3])| (n as f64).sin() * (d[0] + 2.0 * d[1] + 3.0 * d[2]);
        c.as_ref().map_or(0.0, |c| c.iter().enumerate().map(weighted).sum())
    };
    let (pv, _) =
        best_of(repeats, || m.parameter_vjp(&phi, Some(&t), &lambda, without).sigma_elem[0]);
    let (pvc, s1) =
        best_of(repeats, || sum(&m.parameter_vjp(&phi, Some(&t), &lambda, VjpRequest::ALL).coords));
    let (jv, _) = best_of(repeats, || m.joule_vjp(&phi, Some(&t), &q_bar, false).phi[0]);
    let (jvc, s2) = best_of(repeats, || sum(&m.joule_vjp(&phi, Some(&t), &q_bar, true).coords));
    println!(
        "{{\"cells\": {}, \"cell_type\": \"{}\", \"nodes\": {}, \"threads\": {}, \
         \"parameter_vjp_s\": {pv:.4e}, \"parameter_vjp_coords_s\": {pvc:.4e}, \
         \"joule_vjp_s\": {jv:.4e}, \"joule_vjp_coords_s\": {jvc:.4e}, \
         \"coords_checksum\": [{s1:.12e}, {s2:.12e}]}}",
        m.n_volume_elements(),
        cell_type,
        m.n_nodes(),
        rayon::current_num_threads(),
    );
}

fn main() {
    let repeats = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    run(CellType::Hex20, [8, 8, 8], repeats);
    run(CellType::Tet10, [20, 20, 21], repeats.min(2));
}
