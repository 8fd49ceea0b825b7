//! The shipped temperature-limited optimizations keep their limit on the true peak: the
//! largest nodal temperature in their `results.h5` is at most the limit + 0.5 K, the history
//! is valid CSV with filled gradient columns and cumulative evaluation counts, and the JSON
//! outcome says the design converged and is feasible.

use std::path::Path;
use std::process::Command;

use gradfem_io::h5::{FieldValues, read_results};
use rstest::rstest;

/// The largest nodal temperature of the last step of a results file.
fn peak_temperature(results: &Path) -> f64 {
    let data = read_results(results).unwrap();
    let step = data.steps.last().expect("a step");
    let field = step.fields.iter().find(|f| f.name == "temperature").expect("temperature");
    match &field.values {
        FieldValues::Scalar(t) => t.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        other => panic!("temperature is not scalar: {other:?}"),
    }
}

/// Splits one CSV record into fields (RFC 4180 quoting, no line breaks inside fields).
fn csv_fields(line: &str) -> Vec<String> {
    let (mut fields, mut field, mut quoted, mut chars) =
        (Vec::new(), String::new(), false, line.chars().peekable());
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    fields.push(field);
    fields
}

#[rstest]
#[case("microactuator_drive_optimize.toml", 450.0, 1)]
#[case("microactuator_builtin.toml", 600.0, 2)]
fn shipped_limits_hold_on_the_true_peak(
    #[case] example: &str,
    #[case] limit: f64,
    #[case] n_design: usize,
) {
    let dir = tempfile::tempdir().unwrap();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(example);
    let o = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .args(["optimize", file.to_str().unwrap(), "--json", "-o", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["converged"], true, "{r}");
    assert_eq!(r["feasible"], true, "{r}");
    assert_eq!(r["method"], "mma", "{r}");
    assert!(r["status"].as_str().unwrap().starts_with("converged"), "{r}");

    // The limit holds on the true peak of the written field, and is active (the objective
    // wants heat): within 0.5 K below it too.
    let peak = peak_temperature(&dir.path().join("results.h5"));
    assert!(peak <= limit + 0.5 && peak >= limit - 0.5, "{example}: true peak {peak} K");
    let c = &r["constraints"][0];
    assert!((c["true_peak_K"].as_f64().unwrap() - peak).abs() < 1e-9, "{r}");
    // The KS aggregate bounds the peak from above.
    assert!(c["value"].as_f64().unwrap() >= peak, "{r}");
    // MMA needs a handful of evaluations (the augmented Lagrangian took 66 and 79).
    let evaluations = r["evaluations"].as_u64().unwrap();
    assert!(evaluations <= 15, "{evaluations} evaluations");

    // history.csv: every record has the header's field count, gradients are filled, the
    // evaluation count only grows and ends at the run's total less the final re-solve.
    let csv = std::fs::read_to_string(dir.path().join("history.csv")).unwrap();
    let mut lines = csv.lines();
    let header = csv_fields(lines.next().unwrap());
    assert_eq!(header.len(), 4 + 2 * n_design + 2, "{header:?}");
    assert!(header.iter().any(|h| h.contains("true peak")), "{header:?}");
    let rows: Vec<Vec<f64>> = lines
        .map(|l| {
            let f = csv_fields(l);
            assert_eq!(f.len(), header.len(), "{l}");
            f.iter().map(|v| v.parse::<f64>().unwrap()).collect()
        })
        .collect();
    assert!(rows.len() >= 2);
    let mut previous = 0.0;
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row[0], i as f64);
        assert!(row[3] > previous, "evaluations must grow: {row:?}");
        previous = row[3];
        for g in &row[4 + n_design..4 + 2 * n_design] {
            assert!(g.is_finite() && *g != 0.0, "gradient column of row {i}: {row:?}");
        }
    }
    let last = rows.last().unwrap();
    assert!((last[last.len() - 1] - peak).abs() < 1e-9, "{last:?} vs {peak}");
}

/// The gradient of a `peak` objective passes the Taylor test through the whole problem
/// (conductivity, source, a fixed temperature and the node coordinates).
#[test]
fn the_peak_objective_passes_its_taylor_test() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("peak.toml");
    std::fs::write(
        &path,
        r#"
[mesh]
box = { lengths = [1.0, 0.5, 0.5], divisions = [6, 3, 3], cell = "tet10" }
[[thermal.material]]
group = "domain"
k = 2.0
source = 10.0
[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0
[[thermal.bc]]
group = "xmax"
kind = "convection"
h = 3.0
t_inf = 290.0
[[objective]]
kind = "peak"
group = "domain"
rho = 4.0
[parameters]
register = ["thermal.k.domain", "thermal.q.domain", "bc.xmin.temperature", "mesh.coordinates"]
# The aggregate bends sharply (rho = 4/K): steps inside its asymptotic range.
[taylor]
h0 = 0.002
"#,
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .args(["check-gradient", path.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&o.stderr)));
    assert!(o.status.success() && r["passed"] == true, "{r}");
}
