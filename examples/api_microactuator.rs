//! The electro-thermo-mechanical microactuator of `examples/microactuator.toml`, built in code
//! with the library API: the shared gmsh tet10 mesh, polysilicon conduction, Joule heating,
//! convection, thermal expansion, the hot-arm-width morph, the lateral tip deflection as the
//! objective, and its gradient by voltage, α, k, h and the hot-arm width.
//!
//! It prints the quantities and the gradient of the model built in code beside those of the
//! problem file, with their relative difference (the two go through the same set-up, so they
//! agree to round-off), then changes the voltage by name and solves again.
//!
//!   cargo run --release --example api_microactuator            # a table
//!   cargo run --release --example api_microactuator -- --json  # the same as JSON

use std::path::Path;

use gradfem::api::{Model, Objective, Simulation};

/// The actuator, as examples/microactuator.toml describes it.
pub fn actuator(root: &Path) -> Model {
    let ambient = 293.15;
    let mut m = Model::new("microactuator (API)")
        .base_dir(root)
        .mesh_file("data/gmsh/actuator_tet10_v41_ascii.msh")
        .straighten_inverted()
        .plane_group("free_end", "x", 240.0e-6);
    for group in ["polysilicon_layer", "posts"] {
        m = m
            .conductivity(group, 34.0)
            .conductor(group, 5.0e4)
            .conductor_reference_temperature(group, ambient)
            .elastic(group, 160.0e9, 0.22)
            .thermal_expansion(group, 2.6e-6, ambient);
    }
    for base in
        ["anchor_hot_outer_base", "anchor_hot_inner_base", "anchor_cold_base", "dimple_bases"]
    {
        m = m.fixed_temperature(base, ambient);
    }
    m.convection("other_exterior_surfaces", 2.0e4, ambient)
        .convection("upper_surface", 400.0, ambient)
        .voltage("anchor_hot_outer_base", 5.0)
        .ground("anchor_hot_inner_base")
        .fixed("anchor_hot_outer_base")
        .fixed("anchor_hot_inner_base")
        .fixed("anchor_cold_base")
        // The dimples slide on the substrate: no motion normal to it.
        .roller("dimple_bases", &["z"])
        .tip("free_end")
        // Widening both hot arms by δ (nodes above y = 18 µm move up, linearly across each arm).
        .morph(
            "hot_arm_width",
            3.0e-6,
            "y",
            &[[18.0e-6, 0.0], [21.0e-6, 1.0], [24.0e-6, 1.0], [27.0e-6, 2.0]],
            [0.0, 1.0, 0.0],
            Some([2.0e-6, 5.0e-6]),
        )
        // The lateral tip deflection towards the cold arm (−y), in µm.
        .objective(
            Objective::AverageDisplacement {
                group: "free_end".into(),
                direction: [0.0, -1.0, 0.0],
            },
            1.0e6,
        )
        .register("load.anchor_hot_outer_base.voltage")
        .register("mechanical.alpha.polysilicon_layer")
        .register("thermal.k.polysilicon_layer")
        .register("bc.other_exterior_surfaces.h")
        .register("morph.hot_arm_width")
}

/// The quantities and the gradient (scalars) of a simulation, by name.
fn numbers(sim: &mut Simulation) -> Result<Vec<(String, f64)>, gradfem::api::ApiError> {
    let mut out: Vec<(String, f64)> = sim.quantities()?.into_iter().collect();
    let g = sim.gradient()?;
    for (name, v) in &g.by_name {
        for (i, x) in v.iter().enumerate() {
            let label =
                if v.len() == 1 { format!("dJ/d{name}") } else { format!("dJ/d{name}[{i}]") };
            out.push((label, *x));
        }
    }
    Ok(out)
}

fn main() {
    // Errors in their located form (file:line, the parameter, what the problem offers).
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let json = std::env::args().any(|a| a == "--json");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut code = actuator(root).build()?;
    let mut file = Simulation::from_file(root.join("examples/microactuator.toml"))?;
    let a = numbers(&mut code)?;
    let b = numbers(&mut file)?;
    let rel = |x: f64, y: f64| {
        let s = x.abs().max(y.abs());
        if s == 0.0 { 0.0 } else { (x - y).abs() / s }
    };
    let rows: Vec<(String, f64, f64, f64)> = a
        .iter()
        .zip(&b)
        .map(|((n, x), (m, y))| {
            assert_eq!(n, m, "the two versions report the same names");
            (n.clone(), *x, *y, rel(*x, *y))
        })
        .collect();
    let max_rel = rows.iter().map(|r| r.3).fold(0.0, f64::max);

    // A parameter changed by name, solved again on the same set-up.
    let deflection_5v = code.objective()?;
    code.set_parameter("load.anchor_hot_outer_base.voltage", 4.0)?;
    let deflection_4v = code.objective()?;

    if json {
        let values: serde_json::Map<String, serde_json::Value> = rows
            .iter()
            .map(|(n, x, y, r)| {
                (n.clone(), serde_json::json!({ "api": x, "toml": y, "rel_diff": r }))
            })
            .collect();
        let out = serde_json::json!({
            "values": values,
            "max_rel_diff": max_rel,
            "tip_deflection_um": { "5V": deflection_5v, "4V": deflection_4v },
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("{:<44} {:>16} {:>16} {:>9}", "", "built in code", "problem file", "rel diff");
        for (n, x, y, r) in &rows {
            println!("{n:<44} {x:>16.9e} {y:>16.9e} {r:>9.1e}");
        }
        println!("largest relative difference: {max_rel:.1e}");
        println!(
            "tip deflection: {deflection_5v:.6} µm at 5 V, {deflection_4v:.6} µm at 4 V (Joule heat ∝ V², and this chain is linear in it: ratio {:.4})",
            deflection_4v / deflection_5v
        );
    }
    Ok(())
}
