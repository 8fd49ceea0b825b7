//! The heated silicone strip of tests/transient_finite_strain.rs and
//! tests/second_order_transient.rs: `examples/hyperelastic_thermal.toml`'s strip (a heater
//! in an Ogden strip held stretched by 20 %, J the pulling force) with a `[transient]` table.

/// Every parameter of the strip the tests register: conduction, source, convection, heat
/// capacity, thermal expansion and the first Ogden modulus.
pub const ALL: &str = "\"thermal.k.domain\", \"thermal.q.domain\", \"bc.xmax.h\", \"thermal.rho_c.domain\", \"hyperelastic.alpha.domain\", \"hyperelastic.mu1.domain\"";

/// The strip of `examples/hyperelastic_thermal.toml` with a `[transient]` table (or none).
pub fn strip(transient: &str, register: &str) -> String {
    format!(
        r#"title = "heated silicone strip in tension, switched on"

[mesh]
box = {{ lengths = [0.06, 0.01, 0.004], divisions = [6, 2, 1], cell = "hex8" }}

[[thermal.material]]
group = "domain"
k = 0.25
source = 4e4

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 293.15

[[thermal.bc]]
group = "xmax"
kind = "convection"
h = 25.0
t_inf = 293.15

[[hyperelastic.material]]
group = "domain"
law = "ogden"
mu = [0.3e6, 0.01e6]
alpha = [2.0, -2.0]
kappa = 5e7
thermal_expansion = 3e-4
t_ref = 293.15

[[hyperelastic.bc]]
group = "xmin"
kind = "fixed"

[[hyperelastic.bc]]
group = "xmax"
kind = "displacement"
value = [0.012, 0.0, 0.0]
components = ["x"]

[hyperelastic]
steps = 2
tip = "xmax"

[[objective]]
kind = "reaction"
group = "xmax"
direction = [1.0, 0.0, 0.0]

{transient}

[parameters]
register = [{register}]
"#
    )
}

/// The strip's `[transient]` table: `steps` steps of `dt` from 293.15 K, with the time
/// rule `objective`.
pub fn transient(dt: f64, steps: usize, objective: &str) -> String {
    format!(
        "[transient]\ndt = {dt}\nsteps = {steps}\nheat_capacity = [{{ group = \"domain\", rho_c = 1.5e6 }}]\ninitial_temperature = 293.15\nobjective = \"{objective}\""
    )
}
