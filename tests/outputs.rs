//! What `results.h5` and `gradients.json` hold for post-processing: a unit on every dataset,
//! the stress as a symmetric tensor (XDMF `Tensor6`), the finite-strain fields (Cauchy stress,
//! J, principal stretches, reactions), the shape gradient as a node field, the element and
//! node tags of per-entity gradients, and one output directory per problem file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gradfem_io::h5::{Centering, Field, FieldValues, ResultsData, read_results};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn gradfem_in(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .current_dir(dir)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gradfem {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn field<'a>(fields: &'a [Field], name: &str) -> &'a Field {
    fields.iter().find(|f| f.name == name).unwrap_or_else(|| {
        let names: Vec<_> = fields.iter().map(|f| f.name.as_str()).collect();
        panic!("no field '{name}' among {names:?}")
    })
}

/// `gradients.json` of the output directory `dir`.
fn gradients_json(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("gradients.json")).unwrap()).unwrap()
}

/// The element tags of the volume cells of a results file, in the order of its cell fields.
fn volume_cell_tags(data: &ResultsData) -> Vec<u64> {
    data.mesh
        .blocks
        .iter()
        .filter(|b| b.cell_type.dim() == 3)
        .flat_map(|b| b.tags.iter().copied())
        .collect()
}

fn every_field_has_a_unit(data: &ResultsData) {
    for f in data.static_fields.iter().chain(data.steps.iter().flat_map(|s| &s.fields)) {
        assert!(!f.unit.is_empty(), "field '{}' has no unit", f.name);
    }
}

/// A steel bar 10 × 2 × 2 mm heated by 100 K with its ends held in x (rollers on both x
/// faces, one roller each on y and z against rigid motion): σ_xx = −E α ΔT everywhere, the
/// other components zero.
const HELD_BAR: &str = r#"
[mesh]
box = { lengths = [0.01, 0.002, 0.002], divisions = [5, 1, 1], cell = "hex8" }

[[mechanical.material]]
group = "domain"
young = 200e9
poisson = 0.3
alpha = 1.2e-5
t_ref = 293.15

[[mechanical.bc]]
group = "xmin"
kind = "roller"
components = ["x"]

[[mechanical.bc]]
group = "xmax"
kind = "roller"
components = ["x"]

[[mechanical.bc]]
group = "ymin"
kind = "roller"
components = ["y"]

[[mechanical.bc]]
group = "zmin"
kind = "roller"
components = ["z"]

[mechanical]
temperature = { uniform = 393.15 }

[[objective]]
kind = "compliance"
"#;

#[test]
fn the_stress_is_a_symmetric_tensor_with_its_unit() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("held_bar.toml"), HELD_BAR).unwrap();
    gradfem_in(dir.path(), &["--quiet", "run", "held_bar.toml"]);
    // One directory per problem file.
    let data = read_results(&dir.path().join("results/held_bar/results.h5")).unwrap();
    every_field_has_a_unit(&data);
    let step = &data.steps[0].fields;
    let sigma_x = -200e9 * 1.2e-5 * 100.0;
    for name in ["stress", "stress_nodal"] {
        let f = field(step, name);
        assert_eq!(f.unit, "Pa");
        let FieldValues::SymTensor(s) = &f.values else { panic!("{name}: {:?}", f.values) };
        for t in s {
            // [xx, xy, xz, yy, yz, zz]
            assert!((t[0] - sigma_x).abs() < 1e-6 * sigma_x.abs(), "{name}: {t:?}");
            assert!(t[1..].iter().all(|v| v.abs() < 1e-6 * sigma_x.abs()), "{name}: {t:?}");
        }
    }
    assert_eq!(field(step, "displacement").unit, "m");
    assert_eq!(field(step, "temperature").unit, "K");
    // The XDMF names the type ParaView reads as a symmetric tensor.
    let xdmf = std::fs::read_to_string(dir.path().join("results/held_bar/results.xdmf")).unwrap();
    assert!(xdmf.contains("Name=\"stress\" AttributeType=\"Tensor6\""), "{xdmf}");
    assert!(!xdmf.contains("stress_normal"));
}

/// A Neo-Hookean block 10 × 4 × 4 mm stretched 20 % along x on rollers (x on both x faces,
/// y on ymin, z on zmin): a homogeneous uniaxial state.
const STRETCHED_BLOCK: &str = r#"
[mesh]
box = { lengths = [0.01, 0.004, 0.004], divisions = [3, 2, 2], cell = "hex8" }

[[hyperelastic.material]]
group = "domain"
law = "neo_hookean"
mu = [0.4e6]
kappa = 4e6

[[hyperelastic.bc]]
group = "xmin"
kind = "roller"
components = ["x"]

[[hyperelastic.bc]]
group = "ymin"
kind = "roller"
components = ["y"]

[[hyperelastic.bc]]
group = "zmin"
kind = "roller"
components = ["z"]

[[hyperelastic.bc]]
group = "xmax"
kind = "displacement"
value = [2e-3, 0.0, 0.0]
components = ["x"]

[hyperelastic]
steps = 4

[[objective]]
kind = "reaction"
group = "xmax"
direction = [1.0, 0.0, 0.0]
"#;

#[test]
fn finite_strain_results_hold_cauchy_stress_j_stretches_and_reactions() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("block.toml"), STRETCHED_BLOCK).unwrap();
    let out = gradfem_in(dir.path(), &["run", "block.toml", "--json"]);
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let data = read_results(&dir.path().join("results/block/results.h5")).unwrap();
    every_field_has_a_unit(&data);
    // One step per load factor, each with the finite-strain fields.
    assert_eq!(data.steps.len(), 4);
    let last = &data.steps[3];
    assert_eq!(last.time, 1.0);
    let FieldValues::Vector(stretch) = &field(&last.fields, "principal_stretches").values else {
        panic!()
    };
    let FieldValues::Scalar(j) = &field(&last.fields, "volume_ratio_J").values else { panic!() };
    let FieldValues::SymTensor(sigma) = &field(&last.fields, "cauchy_stress").values else {
        panic!()
    };
    assert_eq!(field(&last.fields, "cauchy_stress").unit, "Pa");
    // Homogeneous: λ₁ = 1.2 along x, the lateral stretches equal, J their product, σ uniaxial.
    let lateral = stretch[0][1];
    assert!(lateral < 1.0, "the block narrows: {lateral}");
    for (c, l) in stretch.iter().enumerate() {
        assert!((l[0] - 1.2).abs() < 1e-9, "cell {c}: {l:?}");
        assert!((l[1] - lateral).abs() < 1e-9 && (l[2] - lateral).abs() < 1e-9, "{l:?}");
        assert!((j[c] - l[0] * l[1] * l[2]).abs() < 1e-9, "{} vs {l:?}", j[c]);
    }
    let sxx = sigma[0][0];
    assert!(sxx > 0.0);
    for s in sigma {
        assert!((s[0] - sxx).abs() < 1e-6 * sxx, "{s:?}");
        assert!(s[1..].iter().all(|v| v.abs() < 1e-6 * sxx), "{s:?}");
    }
    // The reaction field sums over the loaded face to the summary's reaction, which carries
    // the Cauchy stress over the deformed cross-section.
    let reactions = summary["hyperelastic"]["reactions"].as_array().unwrap();
    let xmax = reactions.iter().find(|r| r[0] == "xmax").expect("xmax reaction");
    let rx = xmax[1][0].as_f64().unwrap();
    let f = field(&last.fields, "reaction_force");
    assert_eq!((f.centering, f.unit.as_str()), (Centering::Node, "N"));
    let FieldValues::Vector(r) = &f.values else { panic!() };
    let on_xmax: f64 = data
        .mesh
        .coords
        .iter()
        .zip(r)
        .filter(|(x, _)| (x[0] - 0.01).abs() < 1e-12)
        .map(|(_, r)| r[0])
        .sum();
    assert!((on_xmax - rx).abs() < 1e-9 * rx.abs(), "{on_xmax} vs {rx}");
    let area = 0.004 * lateral * 0.004 * lateral;
    assert!((sxx * area - rx.abs()).abs() < 1e-6 * rx.abs(), "{} vs {rx}", sxx * area);
}

#[test]
fn gradients_carry_units_and_the_tags_of_their_entities() {
    let dir = tempfile::tempdir().unwrap();
    let example = root().join("examples/conductivity_field.toml");
    gradfem_in(dir.path(), &["--quiet", "gradient", example.to_str().unwrap()]);
    let out = dir.path().join("results/conductivity_field");
    let g = gradients_json(&out);
    let name = "thermal.k_elem.domain";
    assert_eq!(g["units"][name], "W/(m·K)");
    let j_unit = g["objective_unit"].as_str().unwrap().to_string();
    assert!(!j_unit.is_empty() && !j_unit.starts_with("mixed"), "{j_unit}");
    assert_eq!(g["gradient_units"][name], format!("{j_unit}/(W/(m·K))"));
    // One element tag per entry, the tags of the mesh's volume cells.
    let tags = &g["tags"][name];
    assert_eq!(tags["entity"], "element");
    let tags: Vec<u64> =
        tags["tags"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
    assert_eq!(tags.len(), g["gradients"][name].as_array().unwrap().len());
    let data = read_results(&out.join("results.h5")).unwrap();
    let order = volume_cell_tags(&data);
    let (mut sorted, mut cell_tags) = (tags.clone(), order.clone());
    sorted.sort_unstable();
    cell_tags.sort_unstable();
    assert_eq!(sorted, cell_tags);
    // The cell field of the gradient puts each entry at the cell with that tag.
    let cells = field(&data.steps[0].fields, &format!("dJ/d{name}"));
    assert_eq!(cells.unit, format!("{j_unit}/(W/(m·K))"));
    let FieldValues::Scalar(cells) = &cells.values else { panic!() };
    let grads = g["gradients"][name].as_array().unwrap();
    for (k, t) in tags.iter().enumerate() {
        let c = order.iter().position(|o| o == t).unwrap();
        // JSON's decimal text reads back within an ulp or so.
        let g = grads[k].as_f64().unwrap();
        assert!((cells[c] - g).abs() <= 1e-14 * g.abs(), "element tag {t}: {} vs {g}", cells[c]);
    }
}

#[test]
fn the_shape_gradient_is_a_node_vector_field_tagged_by_node() {
    let dir = tempfile::tempdir().unwrap();
    let example = root().join("examples/beam_tet10.toml");
    gradfem_in(dir.path(), &["--quiet", "gradient", example.to_str().unwrap()]);
    let out = dir.path().join("results/beam_tet10");
    let g = gradients_json(&out);
    let name = "mesh.coordinates";
    assert_eq!(g["units"][name], "m");
    assert_eq!(
        (&g["tags"][name]["entity"], &g["tags"][name]["per_entity"]),
        (&"node".into(), &3.into())
    );
    let data = read_results(&out.join("results.h5")).unwrap();
    let tags: Vec<u64> =
        g["tags"][name]["tags"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
    assert_eq!(tags, data.mesh.node_tags);
    let f = field(&data.steps[0].fields, "dJ/dmesh.coordinates");
    assert_eq!(f.centering, Centering::Node);
    assert_eq!(f.unit, format!("{}/m", g["objective_unit"].as_str().unwrap()));
    let FieldValues::Vector(dx) = &f.values else { panic!() };
    let flat: Vec<f64> =
        g["gradients"][name].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(dx.len() * 3, flat.len());
    for (a, b) in dx.as_flattened().iter().zip(&flat) {
        assert!((a - b).abs() <= 1e-14 * b.abs(), "{a} vs {b}");
    }
}

#[test]
fn a_mesh_in_millimetres_is_scaled_to_metres() {
    // The gmsh beam (1 × 0.1 × 0.1 in its file) read as millimetres: coordinates ×10⁻³ and,
    // with fixed end temperatures, the heat flow k A ΔT / L ×10⁻³; the temperatures agree.
    let problem = |unit: &str| {
        format!(
            r#"
[mesh]
file = "{}"
{unit}

[[thermal.material]]
group = "beam"
k = 10.0

[[thermal.bc]]
group = "fixed"
kind = "temperature"
value = 300.0

[[thermal.bc]]
group = "tip"
kind = "temperature"
value = 400.0

[[objective]]
kind = "average"
group = "beam"
"#,
            root().join("data/gmsh/beam_hex8_v41_ascii.msh").display()
        )
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("metres.toml"), problem("")).unwrap();
    std::fs::write(dir.path().join("millimetres.toml"), problem("unit = \"mm\"")).unwrap();
    std::fs::write(dir.path().join("scaled.toml"), problem("scale = 1e-3")).unwrap();
    let run = |name: &str| -> (Value, ResultsData) {
        let out = gradfem_in(dir.path(), &["run", &format!("{name}.toml"), "--json"]);
        let s: Value = serde_json::from_slice(&out.stdout).unwrap();
        let d = read_results(&dir.path().join(format!("results/{name}/results.h5"))).unwrap();
        (s, d)
    };
    let (m_summary, m) = run("metres");
    for name in ["millimetres", "scaled"] {
        let (s, d) = run(name);
        for (a, b) in m.mesh.coords.iter().zip(&d.mesh.coords) {
            for k in 0..3 {
                assert!((b[k] - 1e-3 * a[k]).abs() <= 1e-15, "{name}: {a:?} {b:?}");
            }
        }
        let t = |d: &ResultsData| field(&d.steps[0].fields, "temperature").values.clone();
        let (FieldValues::Scalar(ta), FieldValues::Scalar(tb)) = (t(&m), t(&d)) else { panic!() };
        for (a, b) in ta.iter().zip(&tb) {
            assert!((a - b).abs() < 1e-9, "{name}: {a} vs {b}");
        }
        let q = |s: &Value| {
            let per = s["heat_balance"]["per_boundary_W"].as_array().unwrap();
            per.iter().find(|b| b[0] == "tip").expect("the tip's heat flow")[1].as_f64().unwrap()
        };
        assert!((q(&s) - 1e-3 * q(&m_summary)).abs() < 1e-9 * q(&m_summary).abs(), "{name}: {s}");
    }
    // Both keys, or an unknown unit, are errors that name the problem.
    std::fs::write(dir.path().join("both.toml"), problem("unit = \"mm\"\nscale = 1e-3")).unwrap();
    std::fs::write(dir.path().join("furlong.toml"), problem("unit = \"furlong\"")).unwrap();
    for (name, expect) in [("both", "not both"), ("furlong", "furlong")] {
        let out = Command::new(env!("CARGO_BIN_EXE_gradfem"))
            .current_dir(dir.path())
            .args(["run", &format!("{name}.toml")])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("{name}.toml")) && err.contains(expect), "{err}");
    }
}

#[test]
fn mesh_info_reads_a_results_file_as_a_mesh() {
    // HDF5 is recognised by its signature, not parsed as gmsh.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("held_bar.toml"), HELD_BAR).unwrap();
    gradfem_in(dir.path(), &["--quiet", "run", "held_bar.toml"]);
    let h5 = dir.path().join("results/held_bar/results.h5");
    let out = gradfem_in(dir.path(), &["mesh-info", h5.to_str().unwrap(), "--json"]);
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    let data = read_results(&h5).unwrap();
    assert_eq!(info["nodes"].as_u64(), Some(data.mesh.n_nodes() as u64), "{info}");
    assert_eq!(info["cells_by_type"]["hex8"].as_u64(), Some(5), "{info}");
    // A file that is not HDF5 but named .h5 is an error naming it.
    let bad = dir.path().join("bad.h5");
    std::fs::write(&bad, "not hdf5").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gradfem"))
        .args(["mesh-info", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.h5"));
}
