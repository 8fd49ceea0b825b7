//! Material constants per element from files (`k = { file = "k.csv" }`, HDF5 datasets and the
//! cell fields of gradfem's own results): the same answers as the same values given through
//! the per-element parameters, the scaling laws of each field, and located errors.

use std::path::Path;

use gradfem::app::{self, Problem};
use gradfem::element_values::volume_cells;
use gradfem::problem::ProblemFile;
use rstest::rstest;

/// A heated block held at 300 K on x = 0: T − 300 is proportional to 1/k.
fn heated_block(k: &str) -> String {
    format!(
        r#"[mesh]
box = {{ lengths = [0.02, 0.01, 0.002], divisions = [4, 2, 1], cell = "tet4" }}

[[thermal.material]]
group = "domain"
k = {k}
source = 1e6

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0

[[objective]]
kind = "average"
group = "domain"
"#
    )
}

fn build(dir: &Path, text: &str) -> Result<Problem, String> {
    let file = ProblemFile::parse(&dir.join("problem.toml"), text.to_string())
        .map_err(|e| e.to_string())?;
    app::build_problem(&file).map_err(|e| e.to_string())
}

/// J of a problem file in `dir`.
fn objective(dir: &Path, text: &str) -> f64 {
    let mut p = build(dir, text).unwrap();
    p.solve().unwrap();
    p.objective_terms().unwrap().0
}

/// The element tags of the volume cells, in the mesh's order, and a varied conductivity per
/// cell.
fn tags_and_field(dir: &Path) -> (Vec<u64>, Vec<f64>) {
    let p = build(dir, &heated_block("1.0")).unwrap();
    let mesh = p.mesh();
    let tags: Vec<u64> = volume_cells(mesh).iter().map(|&c| mesh.cell_tag(c)).collect();
    let k = (0..tags.len()).map(|i| 20.0 + 7.0 * ((i * 5) % 11) as f64).collect();
    (tags, k)
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

fn one_column(values: &[f64]) -> String {
    let mut s = String::from("# conductivity per cell, W/(m K)\nk\n");
    for v in values {
        s.push_str(&format!("{v:e}\n"));
    }
    s
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-11 * a.abs().max(b.abs())
}

#[test]
fn a_uniform_file_is_the_number_and_twice_k_halves_the_rise() {
    let dir = tempfile::tempdir().unwrap();
    let n = tags_and_field(dir.path()).0.len();
    let j_number = objective(dir.path(), &heated_block("40.0"));
    write(dir.path(), "k40.csv", &one_column(&vec![40.0; n]));
    write(dir.path(), "k80.csv", &one_column(&vec![80.0; n]));
    let j40 = objective(dir.path(), &heated_block("{ file = \"k40.csv\" }"));
    let j80 = objective(dir.path(), &heated_block("{ file = \"k80.csv\" }"));
    assert!(close(j40, j_number), "{j40} vs {j_number}");
    assert!(close(j80 - 300.0, (j40 - 300.0) / 2.0), "{j80} vs {j40}");
}

#[test]
fn csv_layouts_hdf5_and_the_per_element_parameter_agree() {
    let dir = tempfile::tempdir().unwrap();
    let (tags, k) = tags_and_field(dir.path());

    // The reference: the same values set through the per-element parameter.
    let mut reference = build(dir.path(), &heated_block("1.0")).unwrap();
    let id = reference.register("thermal.k_elem.domain", None).unwrap();
    let order: Vec<u64> = {
        let m = &reference.thermal().model;
        m.regions[0].elements.clone().map(|e| m.element_cell_tag(e)).collect()
    };
    let by_tag: std::collections::HashMap<u64, f64> =
        tags.iter().copied().zip(k.iter().copied()).collect();
    let values: Vec<f64> = order.iter().map(|t| by_tag[t]).collect();
    reference.registry_mut().set_values(id, &values).unwrap();
    reference.apply_parameters().unwrap();
    reference.solve().unwrap();
    let j_ref = reference.objective_terms().unwrap().0;

    write(dir.path(), "k.csv", &one_column(&k));
    let j_csv = objective(dir.path(), &heated_block("{ file = \"k.csv\" }"));
    assert!(close(j_csv, j_ref), "one column {j_csv} vs parameter {j_ref}");

    // element_tag,value rows in reverse order, with a header.
    let mut rows = String::from("element_tag,k\n");
    for (t, v) in tags.iter().zip(&k).rev() {
        rows.push_str(&format!("{t},{v:e}\n"));
    }
    write(dir.path(), "k_tags.csv", &rows);
    let j_tags = objective(dir.path(), &heated_block("{ file = \"k_tags.csv\" }"));
    assert!(close(j_tags, j_ref), "tag rows {j_tags} vs parameter {j_ref}");

    // One run's conductivity field seeds the next: gradfem's results file, by field name and
    // by dataset path.
    let out = dir.path().join("run1");
    app::write_results(&out, &reference, None).unwrap();
    let j_field = objective(
        dir.path(),
        &heated_block("{ file = \"run1/results.h5\", field = \"conductivity\" }"),
    );
    assert!(close(j_field, j_ref), "results field {j_field} vs parameter {j_ref}");
    let j_dataset = objective(
        dir.path(),
        &heated_block("{ file = \"run1/results.h5\", dataset = \"/steps/0/conductivity\" }"),
    );
    assert!(close(j_dataset, j_ref), "dataset {j_dataset} vs parameter {j_ref}");

    // The registered per-element parameter starts from the file's values.
    let mut seeded = build(dir.path(), &heated_block("{ file = \"k.csv\" }")).unwrap();
    let id = seeded.register("thermal.k_elem.domain", None).unwrap();
    assert_eq!(seeded.registry().values(id), values.as_slice());
}

/// A cantilever with a traction on its free end: the compliance is proportional to 1/E.
fn cantilever(young: &str) -> String {
    format!(
        r#"[mesh]
box = {{ lengths = [0.04, 0.01, 0.01], divisions = [4, 1, 1], cell = "hex8" }}

[[mechanical.material]]
group = "domain"
young = {young}
poisson = 0.3

[[mechanical.bc]]
group = "xmin"
kind = "fixed"

[[mechanical.bc]]
group = "xmax"
kind = "traction"
traction = [0.0, 0.0, -1e5]

[mechanical.temperature]
uniform = 293.15

[[objective]]
kind = "compliance"
"#
    )
}

#[test]
fn young_per_element_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let n = {
        let p = build(dir.path(), &cantilever("1e9")).unwrap();
        volume_cells(p.mesh()).len()
    };
    write(dir.path(), "e.csv", &one_column(&vec![2e9; n]));
    let j1 = objective(dir.path(), &cantilever("1e9"));
    let j2 = objective(dir.path(), &cantilever("{ file = \"e.csv\" }"));
    assert!(close(j2, j1 / 2.0), "{j2} vs {j1}");
}

/// A resistive bar between a 1 V terminal and ground: the current is proportional to σ.
fn bar(sigma: &str) -> String {
    format!(
        r#"[mesh]
box = {{ lengths = [0.01, 0.002, 0.002], divisions = [5, 1, 1], cell = "tet4" }}

[[thermal.material]]
group = "domain"
k = 100.0

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0

[[thermal.bc]]
group = "xmax"
kind = "temperature"
value = 300.0

[[electrical.conductor]]
group = "domain"
sigma = {sigma}

[[electrical.terminal]]
group = "xmin"
kind = "voltage"
value = 1.0

[[electrical.terminal]]
group = "xmax"
kind = "ground"

[[objective]]
kind = "current"
terminal = "xmin"
"#
    )
}

#[test]
fn sigma_per_element_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let n = {
        let p = build(dir.path(), &bar("1e4")).unwrap();
        volume_cells(p.mesh()).len()
    };
    write(dir.path(), "s.csv", &one_column(&vec![3e4; n]));
    let i1 = objective(dir.path(), &bar("1e4"));
    let i3 = objective(dir.path(), &bar("{ file = \"s.csv\" }"));
    assert!(close(i3, 3.0 * i1), "{i3} vs {i1}");
}

/// Bad values files get an error naming the problem file and line, the key, the values file
/// and what is wrong (the line in the values file, the element tag, or the counts).
#[rstest]
#[case::too_few("short.csv", &["problem.toml:5", "`k` of [[thermal.material]] on 'domain'", "short.csv", "expected 48 values", "found 47"])]
#[case::unknown_tag("bad_tag.csv", &["bad_tag.csv:3", "element tag 999999 is not a volume cell"])]
#[case::repeated_tag("twice.csv", &["twice.csv:2", "element tag 1 again (first on line 1)"])]
#[case::missing_cells("partial.csv", &["partial.csv", "no value for 47 of the group's 48 cells"])]
#[case::not_positive("negative.csv", &["negative.csv", "value -5: the conductivity must be positive"])]
#[case::not_a_number("text.csv", &["text.csv:4", "'abc' is not a number"])]
#[case::three_columns("wide.csv", &["wide.csv:1", "3 columns"])]
fn bad_csv_files(#[case] name: &str, #[case] expected: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let (tags, k) = tags_and_field(dir.path());
    assert_eq!(tags.len(), 48);
    let text = match name {
        "short.csv" => one_column(&k[1..]),
        "bad_tag.csv" => format!("{},1.0\n{},2.0\n999999,3.0\n", tags[0], tags[1]),
        "twice.csv" => format!("{},1.0\n{},2.0\n", tags[0], tags[0]),
        "partial.csv" => format!("{},1.0\n", tags[0]),
        "negative.csv" => {
            let mut v = k.clone();
            v[3] = -5.0;
            one_column(&v)
        }
        "text.csv" => "1.0\n2.0\n3.0\nabc\n".into(),
        "wide.csv" => "1,2,3\n".into(),
        _ => unreachable!(),
    };
    write(dir.path(), name, &text);
    let err = build(dir.path(), &heated_block(&format!("{{ file = \"{name}\" }}")))
        .err()
        .expect("refused");
    for e in expected {
        assert!(err.contains(e), "{err:?} lacks {e:?}");
    }
}

#[rstest]
#[case::no_selector("{ file = \"run1/results.h5\" }", "exactly one of `dataset`")]
#[case::unknown_field(
    "{ file = \"run1/results.h5\", field = \"density\" }",
    "no cell field 'density'; its cell fields: conductivity"
)]
#[case::node_field(
    "{ file = \"run1/results.h5\", field = \"temperature\" }",
    "'temperature' is a node field"
)]
#[case::vector_field(
    "{ file = \"run1/results.h5\", field = \"heat_flux\" }",
    "'heat_flux' is a vector field"
)]
#[case::missing_dataset(
    "{ file = \"run1/results.h5\", dataset = \"/steps/0/density\" }",
    "/steps/0/density"
)]
#[case::wrong_shape(
    "{ file = \"run1/results.h5\", dataset = \"/mesh/coordinates\" }",
    "expected one value per volume cell"
)]
#[case::csv_with_field("{ file = \"k.csv\", field = \"k\" }", "a CSV file has none")]
#[case::missing_file("{ file = \"nowhere.csv\" }", "nowhere.csv: cannot read")]
fn bad_hdf5_sources(#[case] k: &str, #[case] expected: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut p = build(dir.path(), &heated_block("40.0")).unwrap();
    p.solve().unwrap();
    app::write_results(&dir.path().join("run1"), &p, None).unwrap();
    write(dir.path(), "k.csv", "40.0\n");
    let err = build(dir.path(), &heated_block(k)).err().expect("refused");
    assert!(err.contains("problem.toml:5"), "{err}");
    assert!(err.contains(expected), "{err:?} lacks {expected:?}");
}

#[test]
fn a_results_file_of_another_mesh_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let other = heated_block("40.0").replace("divisions = [4, 2, 1]", "divisions = [2, 2, 1]");
    let mut p = build(dir.path(), &other).unwrap();
    p.solve().unwrap();
    app::write_results(&dir.path().join("coarse"), &p, None).unwrap();
    let err = build(
        dir.path(),
        &heated_block("{ file = \"coarse/results.h5\", field = \"conductivity\" }"),
    )
    .err()
    .expect("refused");
    assert!(err.contains("its mesh has 24 volume cells and this problem's 48"), "{err}");
}
