//! Soak: 1,000 gradient evaluations of one small problem in one process, through the library
//! API, each after a parameter change (a fresh solve and adjoint), must not grow the process's
//! memory: after a warm-up of 100 evaluations, the peak resident size (VmHWM of
//! /proc/self/status) may grow by at most 2 % and the resident size (VmRSS) too. Alone in its
//! test binary, so no other test's allocations count. Linux only (it reads /proc).

use gradfem::api::{Model, Objective};

/// `VmHWM` and `VmRSS` of this process, in kB.
fn memory_kb() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

#[test]
fn a_thousand_gradients_do_not_grow_memory() {
    if memory_kb().is_none() {
        eprintln!("no /proc/self/status: the soak test needs Linux");
        return;
    }
    let mut sim = Model::new("soak")
        .mesh_box([0.02, 0.01, 0.004], [8, 4, 2], "tet4")
        .conductivity("domain", 40.0)
        .heat_source("domain", 2.0e6)
        .fixed_temperature("xmin", 300.0)
        .convection("zmax", 150.0, 290.0)
        .objective(Objective::AverageTemperature { group: "domain".into() }, 1.0)
        .register("thermal.k.domain")
        .register("bc.zmax.h")
        .build()
        .unwrap();
    let mut evaluate = |i: usize| {
        // A new conductivity each time: every evaluation solves and runs the adjoint.
        sim.set_parameter("thermal.k.domain", 40.0 + (i % 17) as f64).unwrap();
        let g = sim.gradient().unwrap();
        assert!(g.value.is_finite());
    };
    const WARM_UP: usize = 100;
    const TOTAL: usize = 1000;
    for i in 0..WARM_UP {
        evaluate(i);
    }
    let (hwm0, rss0) = memory_kb().unwrap();
    for i in WARM_UP..TOTAL {
        evaluate(i);
    }
    let (hwm1, rss1) = memory_kb().unwrap();
    eprintln!("VmHWM {hwm0} -> {hwm1} kB, VmRSS {rss0} -> {rss1} kB");
    let grown = |a: u64, b: u64| b as f64 / a as f64 - 1.0;
    assert!(
        grown(hwm0, hwm1) <= 0.02,
        "peak memory grew from {hwm0} kB to {hwm1} kB over {} evaluations",
        TOTAL - WARM_UP
    );
    assert!(
        grown(rss0, rss1) <= 0.02,
        "resident memory grew from {rss0} kB to {rss1} kB over {} evaluations",
        TOTAL - WARM_UP
    );
}
