//! The thermal slab of the `gradfem uq` tests (tests/uq.rs, tests/uq_mpi.rs): a box 1 m long
//! held at 300 K on x = 0, insulated elsewhere, with a uniform source, and its mean
//! temperature as the objective; `uq` is appended (a `[uq]` table).

/// The slab's problem file with the text `uq` after it.
pub fn slab(uq: &str) -> String {
    format!(
        r#"title = "slab"
[mesh]
box = {{ lengths = [1.0, 0.1, 0.1], divisions = [6, 1, 1], cell = "tet4" }}

[[thermal.material]]
group = "domain"
k = 10.0
source = 1000.0

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0

[[objective]]
kind = "average"
group = "domain"

{uq}"#
    )
}
