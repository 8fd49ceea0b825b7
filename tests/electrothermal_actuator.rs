//! The electro-thermal microactuator (data/microactuator/README.md) on the tet4 mesh: 5 V
//! between the hot-arm anchors, substrate at 293.15 K under the posts and dimples, air-gap
//! convection elsewhere. Checks conservation (current in = current out, ∫Q = V·I), the
//! physics (hot arms far hotter than the cold arm) and the coupled gradient.

use std::path::Path;
use std::time::Instant;

use gradfem::app::{self, Problem};
use gradfem::problem::ProblemFile;

fn actuator(alpha_r: Option<f64>, scheme: &str, extra: &str) -> String {
    let mesh = concat!(env!("CARGO_MANIFEST_DIR"), "/data/gmsh/actuator_tet4_v41_binary.msh");
    let law = alpha_r.map_or(String::new(), |a| format!("alpha_r = {a}\nt_ref = 293.15\n"));
    let mut conductors = String::new();
    let mut materials = String::new();
    for g in ["polysilicon_layer", "posts"] {
        conductors
            .push_str(&format!("[[electrical.conductor]]\ngroup = \"{g}\"\nsigma = 5e4\n{law}\n"));
        materials.push_str(&format!("[[thermal.material]]\ngroup = \"{g}\"\nk = 34.0\n\n"));
    }
    let mut bcs = String::new();
    for g in ["anchor_hot_outer_base", "anchor_hot_inner_base", "anchor_cold_base", "dimple_bases"]
    {
        bcs.push_str(&format!(
            "[[thermal.bc]]\ngroup = \"{g}\"\nkind = \"temperature\"\nvalue = 293.15\n\n"
        ));
    }
    format!(
        r#"
title = "electro-thermal microactuator"
[mesh]
file = "{mesh}"

{materials}
{bcs}
[[thermal.bc]]
group = "other_exterior_surfaces"
kind = "convection"
h = 2e4
t_inf = 293.15

[[thermal.bc]]
group = "upper_surface"
kind = "convection"
h = 400.0
t_inf = 293.15

{conductors}
[[electrical.terminal]]
group = "anchor_hot_outer_base"
kind = "voltage"
value = 5.0

[[electrical.terminal]]
group = "anchor_hot_inner_base"
kind = "ground"

[coupling]
scheme = "{scheme}"

{extra}
"#
    )
}

fn build(text: &str) -> Problem {
    let pf = ProblemFile::parse(Path::new("actuator.toml"), text.to_string()).expect("parses");
    app::build_problem(&pf).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn one_way_actuator_conserves_current_and_power() {
    let mut p = build(&actuator(None, "monolithic", ""));
    let t0 = Instant::now();
    p.solve().expect("solve");
    let solve_s = t0.elapsed().as_secs_f64();
    let s = app::summary("actuator", &p).expect("summary");
    let terms = s.terminals.as_ref().expect("terminals");
    let (i_in, i_out) = (terms[0].current_a, terms[1].current_a);
    assert!(i_in > 0.0 && (i_in + i_out).abs() < 1e-9 * i_in, "I in {i_in}, out {i_out}");
    let power = s.joule_power_w.unwrap();
    assert!((power - 5.0 * i_in).abs() < 1e-9 * power, "∫Q = {power} vs V·I = {}", 5.0 * i_in);
    // Heat balance: Joule power = heat leaving through the fixed bases + convection, within
    // 0.1 % (it holds to solver tolerance).
    let hb = &s.heat_balance;
    assert!((hb.generated_w - power).abs() < 1e-9 * power, "{hb:?} vs P = {power}");
    assert!(hb.relative_imbalance().abs() < 1e-3, "{hb:?}");
    assert!(hb.fixed_out_w > 0.0 && hb.convection_out_w > 0.0, "{hb:?}");
    let r = s.resistance_ohm.unwrap();
    // Two hot arms of 3×2 µm² in series, ≈ 435 µm long: R ≈ L/(σA) ≈ 1.45 kΩ plus pads.
    assert!(r > 1.0e3 && r < 3.0e3, "R = {r} Ω");
    assert!(s.max_temperature_k > 400.0 && s.max_temperature_k < 2000.0, "{}", s.max_temperature_k);
    eprintln!(
        "actuator one-way: R = {r:.4} Ω, I = {i_in:.4e} A, P = {power:.4e} W, T_max = {:.3} K, solve {solve_s:.3} s",
        s.max_temperature_k
    );
}

#[test]
fn two_way_actuator_gradient_passes_its_taylor_test() {
    let extra = r#"
[[objective]]
kind = "max"
group = "polysilicon_layer"

[[objective]]
kind = "resistance"
drive = "anchor_hot_outer_base"
reference = "anchor_hot_inner_base"
weight = 0.1

[parameters]
register = ["electrical.sigma.polysilicon_layer", "electrical.alpha_r.polysilicon_layer", "thermal.k.polysilicon_layer", "bc.other_exterior_surfaces.h", "load.anchor_hot_outer_base.voltage"]
"#;
    for scheme in ["monolithic", "staggered"] {
        let mut p = build(&actuator(Some(1.25e-3), scheme, extra));
        let t0 = Instant::now();
        p.solve().expect("solve");
        let solve_s = t0.elapsed().as_secs_f64();
        let (_, _, gt) = p.gradient().expect("gradient");
        let cycle = &p.cycles()[0];
        eprintln!(
            "actuator two-way {scheme}: {} coupling iterations, solve {solve_s:.3} s, gradient {:.3} s, adjoint iterations {}",
            cycle.iterations, gt.gradient_s, cycle.adjoint_iterations
        );
        let r = p.taylor_test(&Default::default(), |_| {}).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.passed && r.min_rate() >= 1.9, "{scheme}:\n{}", r.table());
    }
}
