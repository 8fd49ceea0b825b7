//! The library API in ten lines (the example of README.md, which a test keeps identical to
//! the lines between the markers below): a heated plate built in code, its gradient, a
//! parameter changed by name, and the vector-Jacobian product of the temperature field.
//!
//!   cargo run --release --example api_plate

pub fn main() -> Result<(), gradfem::api::ApiError> {
    // README begin
    use gradfem::api::{Cotangent, Model, Objective};

    let mut sim = Model::new("plate")
        .mesh_box([0.1, 0.05, 0.01], [10, 5, 2], "tet4") // or .mesh_file("part.msh")
        .conductivity("domain", 120.0)
        .heat_source("domain", 5.0e6)
        .fixed_temperature("xmin", 300.0)
        .convection("zmax", 25.0, 293.0)
        .objective(Objective::AverageTemperature { group: "domain".into() }, 1.0)
        .register("thermal.k.domain")
        .register("bc.zmax.h")
        .build()?;
    let dj = sim.gradient()?; // dJ/dk, dJ/dh by name
    sim.set_parameter("thermal.k.domain", 150.0)?; // re-solves on the same set-up
    let t_max = sim.quantities()?["max_temperature"];
    let w = vec![1.0; sim.mesh().n_nodes()]; // a cotangent on T (e.g. from PyTorch)
    let vjp = sim.vjp(&Cotangent::new().field("temperature", w))?; // d⟨w, T⟩/dp by name
    // README end
    println!("J = {:.6} K at k = 120 W/(m K)", dj.value);
    for (name, g) in &dj.by_name {
        println!("  dJ/d{name} = {:.6e}", g[0]);
    }
    println!("max T = {t_max:.3} K at k = 150 W/(m K)");
    println!("d(sum of nodal T)/dk = {:.6e}", vjp.scalar("thermal.k.domain").unwrap_or(f64::NAN));
    Ok(())
}
