//! End-to-end tests of the `gradfem` command line: every subcommand on real files, its JSON
//! output checked against independent facts (the gmsh manifest of `data/gmsh`, finite
//! differences, h5py), and bad input that must fail with exit code 2 and a located message,
//! never a panic.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rstest::rstest;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_gradfem");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn gmsh(file: &str) -> PathBuf {
    root().join("data/gmsh").join(file)
}

fn example(file: &str) -> PathBuf {
    root().join("examples").join(file)
}

/// Run the binary in `cwd` (a temporary directory, so that nothing lands in the repository).
fn gradfem_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .env_remove("RUST_LOG")
        .output()
        .expect("the gradfem binary runs")
}

fn gradfem(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    gradfem_in(dir.path(), args)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Assert success and return stdout.
fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Assert a clean failure with exit code 2 (no panic) and return stderr.
fn fails_with_2(out: &Output) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stdout:\n{}\nstderr:\n{stderr}", text(&out.stdout));
    assert!(!stderr.contains("panicked"), "panic instead of an error:\n{stderr}");
    assert!(stderr.contains("error:"), "{stderr}");
    stderr
}

fn json(stdout: &str) -> Value {
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON value ({e}):\n{stdout}"))
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn manifest() -> Value {
    let text = std::fs::read_to_string(gmsh("manifest.json")).expect("manifest.json");
    serde_json::from_str(&text).expect("manifest parses")
}

/// gradfem's cell-type name of a gmsh element type number (from the gmsh documentation, kept
/// apart from the library's table on purpose).
fn cell_name_of_gmsh_type(t: u64) -> &'static str {
    match t {
        1 => "line2",
        2 => "tri3",
        3 => "quad4",
        4 => "tet4",
        5 => "hex8",
        9 => "tri6",
        10 => "quad9",
        11 => "tet10",
        12 => "hex27",
        16 => "quad8",
        17 => "hex20",
        other => panic!("gmsh type {other} is not in this test's table"),
    }
}

/// `"Tetrahedron 10 (type 11)"` → 11.
fn gmsh_type_of_key(key: &str) -> u64 {
    let start = key.rfind("(type ").expect("'(type N)' in the key") + "(type ".len();
    key[start..].trim_end_matches(')').parse().expect("type number")
}

fn rel_close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs())
}

/// Inverted cells the quality check must find. `actuator_tet10_v41_ascii.msh` holds one curved
/// tet10 (gmsh element 5380, on a dimple's cylindrical face) whose det J is negative at its
/// second vertex (−3.9e-19 against +2.7e-18 at its centroid; checked independently with the
/// tet10 shape functions in numpy), so one inverted cell is the right answer there.
fn expected_inverted(file: &str) -> usize {
    if file == "actuator_tet10_v41_ascii.msh" { 1 } else { 0 }
}

#[rstest]
fn mesh_info_json_matches_manifest(
    #[values(
        "actuator_tet10_v41_ascii.msh",
        "actuator_tet4_v22_ascii.msh",
        "actuator_tet4_v41_binary.msh",
        "beam_hex20_v41_ascii.msh",
        "beam_hex27_v41_ascii.msh",
        "beam_hex8_v22_ascii.msh",
        "beam_hex8_v41_ascii.msh",
        "beam_tet10_v22_ascii.msh",
        "beam_tet10_v41_ascii.msh",
        "beam_tet4_v22_ascii.msh",
        "beam_tet4_v41_ascii.msh",
        "cook_membrane_quad4_v41_ascii.msh",
        "cube_hole_tet10_v22_ascii.msh",
        "cube_hole_tet4_v41_binary.msh",
        "lame_cylinder_hex8_v22_ascii.msh",
        "nafems_le10_tet10_v41_ascii.msh"
    )]
    file: &str,
) {
    let m = manifest();
    let want = &m[file];
    assert!(want.is_object(), "{file} is not in manifest.json");
    let path = gmsh(file);
    let r = json(&ok(&gradfem(&["mesh-info", p(&path), "--json"])));

    assert_eq!(r["nodes"], want["n_nodes"], "{file}: node count");

    let mut want_cells = BTreeMap::new();
    for (key, n) in want["elements_by_type"].as_object().expect("elements_by_type") {
        want_cells.insert(cell_name_of_gmsh_type(gmsh_type_of_key(key)).to_string(), n.clone());
    }
    let got_cells: BTreeMap<String, Value> =
        r["cells_by_type"].as_object().expect("cells_by_type").clone().into_iter().collect();
    assert_eq!(got_cells, want_cells, "{file}: cells per type");

    let groups = r["groups"].as_array().expect("groups");
    let want_groups = want["physical_groups"].as_array().expect("physical_groups");
    assert_eq!(groups.len(), want_groups.len(), "{file}: number of groups");
    for wg in want_groups {
        let name = wg["name"].as_str().expect("name");
        let g = groups
            .iter()
            .find(|g| g["name"] == wg["name"])
            .unwrap_or_else(|| panic!("{file}: group '{name}' missing from {groups:?}"));
        assert_eq!(g["dim"], wg["dim"], "{file}: {name}: dim");
        assert_eq!(g["tag"], wg["tag"], "{file}: {name}: tag");
        assert_eq!(g["cells"], wg["n_elements"], "{file}: {name}: cell count");
        let (got, exp) = (
            g["measure"].as_f64().expect("measure"),
            wg["measure_isoparametric"].as_f64().expect("manifest measure"),
        );
        assert!(rel_close(got, exp, 1e-9), "{file}: {name}: measure {got:e} vs gmsh {exp:e}");
    }

    let bb = &r["bounding_box"];
    let wbb = &want["bbox"];
    let scale = (0..3)
        .map(|k| wbb[1][k].as_f64().unwrap() - wbb[0][k].as_f64().unwrap())
        .fold(0.0, f64::max);
    for corner in 0..2 {
        for k in 0..3 {
            let (got, exp) = (bb[corner][k].as_f64().unwrap(), wbb[corner][k].as_f64().unwrap());
            assert!(
                (got - exp).abs() <= 1e-12 * scale,
                "{file}: bbox[{corner}][{k}] {got} vs {exp}"
            );
        }
    }

    let q = &r["quality"];
    let top_dim = want_groups.iter().map(|g| g["dim"].as_u64().unwrap()).max().unwrap();
    let top_cells: u64 = want["elements_by_type"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| {
            let name = cell_name_of_gmsh_type(gmsh_type_of_key(k));
            let dim = if name.starts_with("tet") || name.starts_with("hex") {
                3
            } else if name.starts_with("line") {
                1
            } else {
                2
            };
            dim == top_dim
        })
        .map(|(_, n)| n.as_u64().unwrap())
        .sum();
    assert_eq!(q["cells_checked"].as_u64(), Some(top_cells), "{file}: quality cells checked");
    assert_eq!(
        q["inverted"].as_u64(),
        Some(expected_inverted(file) as u64),
        "{file}: inverted cells; issues: {}",
        q["first_issues"]
    );
    if expected_inverted(file) == 0 {
        assert!(q["min_det_j"].as_f64().unwrap() > 0.0, "{file}: {q}");
    } else {
        let issues = q["first_issues"].to_string();
        assert!(issues.contains("Inverted tet10 cell 5380"), "{file}: {issues}");
    }
}

#[rstest]
#[case("beam_tet4_v41_ascii.msh")]
#[case("cube_hole_tet4_v41_binary.msh")]
#[case("cook_membrane_quad4_v41_ascii.msh")]
fn mesh_info_text_names_every_group(#[case] file: &str) {
    let m = manifest();
    let out = ok(&gradfem(&["mesh-info", p(&gmsh(file))]));
    assert!(out.contains(&format!("{} nodes", m[file]["n_nodes"])), "{out}");
    for g in m[file]["physical_groups"].as_array().unwrap() {
        let name = g["name"].as_str().unwrap();
        assert!(
            out.lines().any(|l| l.split_whitespace().next() == Some(name)),
            "group {name} not listed:\n{out}"
        );
    }
    assert!(out.contains("bounding box:") && out.contains("quality:"), "{out}");
}

/// Whether h5py can be imported; without it, the h5py checks are skipped with a note unless
/// `GRADFEM_REQUIRE_H5PY=1`.
fn have_h5py() -> bool {
    let found = Command::new(python())
        .args(["-c", "import h5py, numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        if std::env::var("GRADFEM_REQUIRE_H5PY").as_deref() == Ok("1") {
            panic!("GRADFEM_REQUIRE_H5PY=1 but python3 cannot import h5py and numpy");
        }
        eprintln!("note: python3 with h5py/numpy not found; skipping the h5py checks");
    }
    found
}

/// Run a checker script under tests/py and require "ok".
fn python_check(script: &str, args: &[&str]) {
    let out = Command::new(python())
        .arg(root().join("tests/py").join(script))
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success() && text(&out.stdout).trim_end().ends_with("ok"),
        "{script} failed:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The `Format="HDF"` data items of an XDMF file as (h5 file, dataset path).
fn hdf_items(xdmf: &str) -> Vec<(String, String)> {
    let doc = roxmltree::Document::parse(xdmf).expect("the .xdmf is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "Xdmf");
    doc.descendants()
        .filter(|n| n.has_tag_name("DataItem") && n.attribute("Format") == Some("HDF"))
        .map(|n| {
            let t = n.text().expect("data item text").trim();
            let (file, path) = t.split_once(':').expect("file.h5:/path");
            (file.to_string(), path.to_string())
        })
        .collect()
}

#[rstest]
#[case("beam_hex20_v41_ascii.msh")]
#[case("beam_tet10_v41_ascii.msh")]
fn mesh_convert_writes_xdmf_and_h5(#[case] file: &str) {
    let m = manifest();
    let want = &m[file];
    let dir = tempfile::tempdir().unwrap();
    let out_xdmf = dir.path().join("mesh.xdmf");
    let stdout = ok(&gradfem(&["mesh-convert", p(&gmsh(file)), p(&out_xdmf)]));
    assert!(stdout.contains("mesh.xdmf"), "{stdout}");
    let h5 = dir.path().join("mesh.h5");
    let bytes = std::fs::read(&h5).expect("mesh.h5 written beside the .xdmf");
    assert!(bytes.starts_with(b"\x89HDF\r\n\x1a\n"), "not an HDF5 file");

    let xdmf = std::fs::read_to_string(&out_xdmf).unwrap();
    let items = hdf_items(&xdmf);
    assert!(!items.is_empty(), "no HDF datasets referenced:\n{xdmf}");
    assert!(items.iter().all(|(f, _)| f == "mesh.h5"), "{items:?}");
    assert!(items.iter().any(|(_, d)| d == "/mesh/coordinates"), "{items:?}");
    let doc = roxmltree::Document::parse(&xdmf).unwrap();
    let n_nodes = want["n_nodes"].as_u64().unwrap();
    let geometry = doc
        .descendants()
        .find(|n| n.has_tag_name("Geometry"))
        .and_then(|g| g.children().find(|c| c.has_tag_name("DataItem")))
        .expect("a Geometry data item");
    assert_eq!(geometry.attribute("Dimensions"), Some(format!("{n_nodes} 3").as_str()));
    // One uniform grid with every cell: facets and volume cells in one Mixed topology, so
    // that the group masks are whole datasets (no hyperslabs, which ParaView dropped).
    let n_types = want["elements_by_type"].as_object().unwrap().len();
    assert!(n_types > 1);
    let uniform: Vec<_> =
        doc.descendants().filter(|n| n.attribute("GridType") == Some("Uniform")).collect();
    assert_eq!(uniform.len(), 1, "one uniform grid");
    let topology = uniform[0].children().find(|n| n.has_tag_name("Topology")).unwrap();
    assert_eq!(topology.attribute("TopologyType"), Some("Mixed"));
    assert_eq!(
        topology.attribute("NumberOfElements"),
        Some(want["n_elements"].to_string().as_str())
    );
    assert!(!xdmf.contains("HyperSlab"), "{xdmf}");
    let attributes: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("Attribute"))
        .filter_map(|n| n.attribute("Name"))
        .collect();
    let mut groups = serde_json::Map::new();
    for g in want["physical_groups"].as_array().unwrap() {
        let name = g["name"].as_str().unwrap();
        assert!(attributes.contains(&format!("group:{name}").as_str()), "{attributes:?}");
        groups.insert(name.into(), g["n_elements"].clone());
    }

    if have_h5py() {
        let mut datasets: Vec<String> = items.into_iter().map(|(_, d)| d).collect();
        datasets.sort();
        datasets.dedup();
        // Dataset names in the XDMF are percent-encoded the same way as in the file.
        let spec = serde_json::json!({
            "n_nodes": n_nodes,
            "n_cells": want["n_elements"],
            "groups": groups,
            "datasets": datasets,
        });
        let spec_path = dir.path().join("spec.json");
        std::fs::write(&spec_path, spec.to_string()).unwrap();
        python_check("check_mesh_h5.py", &[p(&h5), p(&spec_path)]);
    }
}

#[test]
fn run_json_summary_and_result_files() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let stdout = ok(&gradfem_in(
        dir.path(),
        &["run", p(&example("heat_sink.toml")), "--json", "-o", p(&out_dir)],
    ));
    assert_eq!(stdout.trim().lines().count(), 1, "one JSON line expected:\n{stdout}");
    let s = json(&stdout);
    assert!(s.is_object());
    for key in ["max_temperature_K", "min_temperature_K", "mean_temperature_K", "objective"] {
        assert!(s[key].as_f64().is_some_and(f64::is_finite), "{key} missing or not finite: {s}");
    }
    let (tmin, tmean, tmax, j) = (
        s["min_temperature_K"].as_f64().unwrap(),
        s["mean_temperature_K"].as_f64().unwrap(),
        s["max_temperature_K"].as_f64().unwrap(),
        s["objective"].as_f64().unwrap(),
    );
    // xmin is held at 300 K and heat only enters: the minimum is the fixed temperature.
    assert!((tmin - 300.0).abs() < 1e-9, "{s}");
    assert!(tmin < tmean && tmean < tmax, "{s}");
    // The objective is the p = 8 mean, between the mean and the maximum.
    assert!(tmean < j && j < tmax, "{s}");
    assert_eq!(s["nodes"].as_u64(), Some(17 * 9 * 5 + 16 * 9 * 5 + 17 * 8 * 5 + 17 * 9 * 4));
    assert!(out_dir.join("results.xdmf").is_file() && out_dir.join("results.h5").is_file());
    let xdmf = std::fs::read_to_string(out_dir.join("results.xdmf")).unwrap();
    assert!(xdmf.contains("Name=\"temperature\""), "{xdmf}");
    assert!(!hdf_items(&xdmf).is_empty());
    assert!(!dir.path().join("results").exists(), "-o must replace the default directory");
}

/// Registered parameter names of a problem file, in file order.
fn registered(file: &Path) -> Vec<String> {
    let pf = gradfem::problem::ProblemFile::read(file).expect("problem file reads");
    pf.spec.parameters.register.iter().map(|s| s.get_ref().clone()).collect()
}

#[test]
fn gradient_writes_every_registered_parameter() {
    let file = example("heat_sink.toml");
    let dir = tempfile::tempdir().unwrap();
    let stdout = ok(&gradfem_in(dir.path(), &["gradient", p(&file), "-o", "g"]));
    assert!(stdout.contains("gradients.json"), "{stdout}");
    let g: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("g/gradients.json")).unwrap(),
    )
    .expect("gradients.json parses");
    assert!(g["objective"].as_f64().is_some_and(f64::is_finite), "{g}");
    let grads = g["gradients"].as_object().expect("gradients");
    let names = registered(&file);
    assert_eq!(grads.len(), names.len(), "{:?}", grads.keys());
    let n_nodes = json(&ok(&gradfem(&["run", p(&file), "--json", "-o", p(&dir.path().join("r"))])))
        ["nodes"]
        .as_u64()
        .unwrap() as usize;
    for name in &names {
        let v = &grads[name.as_str()];
        if name == "mesh.coordinates" {
            let a = v.as_array().unwrap_or_else(|| panic!("{name}: expected an array, got {v}"));
            assert_eq!(a.len(), 3 * n_nodes, "{name}");
            assert!(a.iter().all(|x| x.as_f64().is_some_and(f64::is_finite)));
            assert!(a.iter().any(|x| x.as_f64().unwrap() != 0.0), "shape gradient is all zero");
        } else {
            assert!(v.as_f64().is_some_and(f64::is_finite), "{name}: expected a number, got {v}");
        }
    }
    // Raising the fixed temperature raises every temperature one for one (linear problem,
    // source and flux independent of T, convection relative to t_inf): dJ/dT_fix lies in (0, 1].
    let dt = grads["bc.xmin.temperature"].as_f64().unwrap();
    assert!(dt > 0.0 && dt <= 1.0 + 1e-9, "{dt}");
    let t = &g["timings"];
    assert!(t["forward"].is_object() && t["gradient"]["gradient_s"].as_f64().is_some(), "{t}");
}

/// `gradients.json` against a central finite difference of `gradfem run` (the conductivity of
/// the heat sink, edited in the problem text).
#[test]
fn gradient_matches_central_difference_of_run() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(example("heat_sink.toml")).unwrap();
    assert!(base.contains("k = 170.0"));
    let objective_at = |k: f64| -> f64 {
        let path = dir.path().join(format!("k_{k}.toml"));
        std::fs::write(&path, base.replace("k = 170.0", &format!("k = {k:?}"))).unwrap();
        let s = json(&ok(&gradfem_in(
            dir.path(),
            &["run", p(&path), "--json", "-o", p(&dir.path().join("o"))],
        )));
        s["objective"].as_f64().unwrap()
    };
    let h = 0.01;
    let fd = (objective_at(170.0 + h) - objective_at(170.0 - h)) / (2.0 * h);
    ok(&gradfem_in(dir.path(), &["gradient", p(&example("heat_sink.toml")), "-o", "g"]));
    let g: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("g/gradients.json")).unwrap(),
    )
    .unwrap();
    let adj = g["gradients"]["thermal.k.domain"].as_f64().unwrap();
    assert!(adj < 0.0, "more conductivity must cool the block: {adj}");
    assert!(rel_close(adj, fd, 1e-6), "adjoint {adj:e} vs central difference {fd:e}");
}

#[test]
fn check_gradient_passes_and_prints_rates() {
    let file = example("heat_sink.toml");
    let out = gradfem(&["check-gradient", p(&file)]);
    let table = ok(&out);
    assert!(table.contains("PASSED"), "{table}");
    let r = json(&ok(&gradfem(&["check-gradient", p(&file), "--json"])));
    assert_eq!(r["passed"], Value::Bool(true), "{r}");
    let rates = r["rates"].as_array().expect("rates");
    assert_eq!(rates.len(), 4, "5 steps give 4 rates: {r}");
    for rate in rates {
        let rate = rate.as_f64().unwrap();
        assert!((rate - 2.0).abs() < 0.1, "first-order remainder rate {rate}: {r}");
    }
    // `min_rate` is the threshold, `observed_min_rate` what the test measured.
    assert_eq!(r["min_rate"].as_f64(), Some(1.9), "{r}");
    assert!(r["observed_min_rate"].as_f64().unwrap() >= 1.9, "{r}");
    assert_eq!(r["all_passed"], Value::Bool(true), "{r}");
    assert!(r.get("per_parameter").is_none(), "only on request: {r}");
    // The combined direction: its seed and scaling.
    assert_eq!(r["direction"]["seed"].as_u64(), Some(gradfem::app::TAYLOR_DIRECTION_SEED), "{r}");
    assert!(r["direction"]["norm"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["direction"]["scaling"].as_str().unwrap().contains("|m_i|"), "{r}");
    let zeroth = r["rates_zeroth"].as_array().unwrap();
    assert!(zeroth.iter().all(|z| (z.as_f64().unwrap() - 1.0).abs() < 0.1), "{r}");
    assert!(table.contains("seed 7"), "the text names the direction: {table}");
}

#[test]
fn check_gradient_per_parameter_tests_every_registered_parameter() {
    let file = example("heat_sink.toml");
    let names = registered(&file);
    let r = json(&ok(&gradfem(&["check-gradient", p(&file), "--per-parameter", "--json"])));
    assert_eq!(r["all_passed"], Value::Bool(true), "{r}");
    let parts = r["per_parameter"].as_array().expect("per_parameter");
    let tested: Vec<&str> = parts.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(tested, names, "one test per registered parameter, in registration order");
    for t in parts {
        assert_eq!(t["passed"], Value::Bool(true), "{t}");
        assert_eq!(t["min_rate"].as_f64(), Some(1.9), "the threshold: {t}");
        let d = &t["direction"];
        if t["kind"] == "scalar" {
            assert_eq!(t["entries"].as_u64(), Some(1), "{t}");
            let step = d["step"].as_f64().expect("a scalar's step");
            assert!(step != 0.0 && d["seed"].is_null(), "{t}");
        } else {
            assert!(t["entries"].as_u64().unwrap() > 1, "{t}");
            assert_eq!(d["seed"].as_u64(), Some(gradfem::app::TAYLOR_DIRECTION_SEED), "{t}");
            assert!(d["norm"].as_f64().unwrap() > 0.0 && d.get("step").is_none(), "{t}");
        }
        // Measured rates near 2, or an exact pass at round-off.
        match t["observed_min_rate"].as_f64() {
            Some(rate) => assert!(rate >= 1.9, "{t}"),
            None => assert!(t["verdict"].as_str().unwrap().contains("round-off"), "{t}"),
        }
    }
    // The text table names every parameter with its verdict.
    let text = ok(&gradfem(&["check-gradient", p(&file), "--per-parameter"]));
    for n in &names {
        assert!(
            text.lines().any(|l| l.contains(n.as_str()) && l.contains("passed")),
            "{n}:\n{text}"
        );
    }
    assert!(text.contains("PASSED: every parameter"), "{text}");
}

#[test]
fn a_wrong_derivative_fails_the_per_parameter_check() {
    // The adjoint gradient of the heat sink with one entry 5 % off: that parameter's test
    // fails, the others pass.
    let file = example("heat_sink.toml");
    let pf = gradfem::problem::ProblemFile::read(&file).unwrap();
    let mut problem = gradfem::app::build_problem(&pf).unwrap();
    problem.solve().unwrap();
    let (_, grad, _) = problem.gradient().unwrap();
    let pv = gradfem::solvers::params::ParamVector::all(problem.registry());
    let mut g = grad.flatten(&pv);
    let wrong = problem.registry().id("bc.zmax.h").unwrap();
    g[pv.range(wrong).unwrap().start] *= 1.05;
    let params = gradfem::solvers::taylor::TaylorParams::default();
    let parts = problem.taylor_test_gradient_per_parameter(&g, &params, |_| {}).unwrap();
    for t in &parts {
        let want = t.name != "bc.zmax.h";
        assert_eq!(t.passed, want, "{}: {}\n{}", t.name, t.verdict, t.result.table());
    }
    let bad = parts.iter().find(|t| t.name == "bc.zmax.h").unwrap();
    assert!(bad.observed_min_rate < 1.5, "{}", bad.result.table());
    // A gradient of the wrong length is an error, not a panic.
    let err = problem.taylor_test_gradient_per_parameter(&g[1..], &params, |_| {}).unwrap_err();
    assert!(err.to_string().contains("entries"), "{err}");
    // The problem is left as it was: the right gradient passes afterwards.
    let parts = problem.taylor_test_per_parameter(&params, |_| {}).unwrap();
    assert!(parts.iter().all(|t| t.passed));
}

#[test]
fn check_gradient_rejects_bad_taylor_settings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("steps.toml");
    let text =
        std::fs::read_to_string(example("heat_sink.toml")).unwrap() + "\n[taylor]\nsteps = 1\n";
    std::fs::write(&path, text).unwrap();
    let stderr = fails_with_2(&gradfem_in(dir.path(), &["check-gradient", p(&path)]));
    assert!(stderr.contains("steps.toml") && stderr.contains("steps = 1"), "{stderr}");
}

#[test]
fn check_gradient_without_parameters_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none.toml");
    let objective = "\n[[objective]]\nkind = \"average\"\n";
    std::fs::write(&path, PLAIN_BOX.to_string() + BC_XMIN + objective).unwrap();
    let stderr = fails_with_2(&gradfem_in(dir.path(), &["check-gradient", p(&path)]));
    assert!(stderr.contains("no parameters are registered"), "{stderr}");
    assert!(stderr.contains("none.toml"), "{stderr}");
}

const PLAIN_BOX: &str = r#"[mesh]
box = { lengths = [1, 1, 1], divisions = [2, 2, 2], cell = "tet4" }

[[thermal.material]]
group = "domain"
k = 1.0
source = 1.0
"#;

const BC_XMIN: &str = r#"
[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0
"#;

/// Write a problem into a fresh directory and `gradfem run` it; expect exit 2, return stderr.
fn run_bad(name: &str, problem: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, problem).unwrap();
    let stderr = fails_with_2(&gradfem_in(dir.path(), &["run", p(&path), "-o", "out"]));
    assert!(!dir.path().join("out").exists(), "no results after an error");
    (dir, stderr)
}

#[test]
fn unknown_key_names_file_line_and_key() {
    let problem = format!("{PLAIN_BOX}colour = \"red\"\n{BC_XMIN}");
    let (_d, stderr) = run_bad("unknown_key.toml", &problem);
    let line = problem.lines().position(|l| l.starts_with("colour")).unwrap() + 1;
    assert!(stderr.contains(&format!("unknown_key.toml:{line}:")), "{stderr}");
    assert!(stderr.contains("colour"), "{stderr}");
}

#[test]
fn unknown_top_level_table_is_an_error() {
    let problem = format!("{PLAIN_BOX}{BC_XMIN}\n[solvr]\nlinear = \"lu\"\n");
    let (_d, stderr) = run_bad("typo.toml", &problem);
    assert!(stderr.contains("solvr"), "{stderr}");
    assert!(stderr.contains("typo.toml:"), "{stderr}");
}

#[test]
fn unknown_group_names_line_and_lists_groups() {
    let problem = format!("{PLAIN_BOX}{}", BC_XMIN.replace("\"xmin\"", "\"x_min\""));
    let (_d, stderr) = run_bad("bad_group.toml", &problem);
    let line = problem.lines().position(|l| l.contains("x_min")).unwrap() + 1;
    assert!(stderr.contains(&format!("bad_group.toml:{line}")), "{stderr}");
    assert!(stderr.contains("'x_min'"), "{stderr}");
    for g in ["domain", "xmin", "xmax", "ymin", "ymax", "zmin", "zmax"] {
        assert!(stderr.contains(g), "group {g} not listed: {stderr}");
    }
}

#[test]
fn unknown_parameter_names_line_and_offers_the_valid_ones() {
    let problem =
        format!("{PLAIN_BOX}{BC_XMIN}\n[parameters]\nregister = [\"thermal.k.dommain\"]\n");
    let (_d, stderr) = run_bad("bad_param.toml", &problem);
    let line = problem.lines().position(|l| l.contains("dommain")).unwrap() + 1;
    assert!(stderr.contains(&format!("bad_param.toml:{line}:")), "{stderr}");
    assert!(stderr.contains("thermal.k.domain") && stderr.contains("bc.xmin.temperature"));
}

#[test]
fn missing_mesh_file_is_named() {
    let problem = PLAIN_BOX.replace(
        "box = { lengths = [1, 1, 1], divisions = [2, 2, 2], cell = \"tet4\" }",
        "file = \"no_such_mesh.msh\"",
    );
    let (_d, stderr) = run_bad("missing_mesh.toml", &problem);
    assert!(stderr.contains("no_such_mesh.msh"), "{stderr}");
    assert!(stderr.contains("missing_mesh.toml"), "{stderr}");
}

#[test]
fn missing_problem_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let stderr = fails_with_2(&gradfem_in(dir.path(), &["run", "nowhere.toml"]));
    assert!(stderr.contains("nowhere.toml"), "{stderr}");
}

/// The reason of an I/O error is printed once. `ProblemError::Io` and `AppError::Run` put their
/// `source` both in their message and in `source()`; main prints each cause once.
#[test]
fn error_reason_is_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let stderr = fails_with_2(&gradfem_in(dir.path(), &["run", "nowhere.toml"]));
    assert_eq!(stderr.matches("os error 2").count(), 1, "{stderr}");
}

#[test]
fn missing_sensor_file_is_named() {
    let problem =
        format!("{PLAIN_BOX}{BC_XMIN}\n[[objective]]\nkind = \"misfit\"\nsensors = \"t.csv\"\n");
    let (_d, stderr) = run_bad("misfit.toml", &problem);
    assert!(stderr.contains("t.csv"), "{stderr}");
}

#[rstest]
#[case::v41_ascii_in_nodes("beam_tet4_v41_ascii.msh", 20_000, "truncated.msh:")]
#[case::v41_ascii_in_entities("beam_tet4_v41_ascii.msh", 300, "truncated.msh:")]
#[case::v41_ascii_in_elements("beam_tet4_v41_ascii.msh", 120_000, "truncated.msh:")]
#[case::v22_ascii_in_elements("beam_tet4_v22_ascii.msh", 100_000, "truncated.msh:")]
#[case::v41_binary_in_nodes("cube_hole_tet4_v41_binary.msh", 20_000, "byte offset ")]
#[case::v41_binary_in_elements("cube_hole_tet4_v41_binary.msh", 150_000, "byte offset ")]
fn truncated_mesh_is_a_located_error(
    #[case] file: &str,
    #[case] keep: usize,
    #[case] location: &str,
) {
    let bytes = std::fs::read(gmsh(file)).unwrap();
    assert!(keep < bytes.len(), "{file} has only {} bytes", bytes.len());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("truncated.msh");
    std::fs::write(&path, &bytes[..keep]).unwrap();
    let stderr = fails_with_2(&gradfem_in(dir.path(), &["mesh-info", p(&path)]));
    assert!(stderr.contains("truncated.msh"), "{stderr}");
    assert!(stderr.contains(location), "expected a {location}location: {stderr}");
    let n: usize = stderr
        .split(location)
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no number after '{location}': {stderr}"));
    if location == "byte offset " {
        assert!(n <= keep, "offset {n} beyond the {keep} bytes kept");
    } else {
        let lines = bytes[..keep].iter().filter(|&&b| b == b'\n').count() + 1;
        assert!(n >= 1 && n <= lines, "line {n} beyond the {lines} lines kept");
    }
}

#[test]
fn mesh_info_on_a_problem_file_is_an_error_not_a_panic() {
    let stderr = fails_with_2(&gradfem(&["mesh-info", p(&example("heat_sink.toml"))]));
    assert!(stderr.contains("heat_sink.toml"), "{stderr}");
}

#[test]
fn help_lists_every_subcommand() {
    let out = ok(&gradfem(&["--help"]));
    for cmd in ["run", "gradient", "check-gradient", "mesh-info", "mesh-convert"] {
        assert!(
            out.lines().any(|l| l.trim_start().starts_with(&format!("{cmd} "))),
            "'{cmd}' not listed:\n{out}"
        );
    }
    for cmd in ["run", "gradient", "check-gradient", "mesh-info", "mesh-convert"] {
        let sub = ok(&gradfem(&[cmd, "--help"]));
        assert!(sub.contains(&format!("Usage: gradfem {cmd}")), "{sub}");
    }
}

#[test]
fn unknown_subcommand_is_a_usage_error() {
    let out = gradfem(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("frobnicate"));
}

/// The Python interpreter of the checks: `GRADFEM_PYTHON` (the project venv that
/// `scripts/test.sh` sets up), else `python3` on the PATH.
fn python() -> String {
    std::env::var("GRADFEM_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

/// The default objective of a file without `[[objective]]`, as docs/problem-file.md states it:
/// the mean temperature of the whole model with `[thermal]`, the compliance of `[mechanical]`
/// alone. (`gradient`, `check-gradient` and `optimize` refuse such a file: tests/bad_inputs.)
#[test]
fn the_default_objective_is_the_documented_one() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, text: &str| -> Value {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        json(&ok(&gradfem_in(
            dir.path(),
            &["run", p(&path), "--json", "-o", &format!("out_{name}")],
        )))
    };
    let thermal = "[mesh]\nbox = { lengths = [0.01, 0.01, 0.002], divisions = [2, 2, 1], cell = \"tet4\" }\n\
                   [[thermal.material]]\ngroup = \"domain\"\nk = 150.0\nsource = 1e6\n\
                   [[thermal.bc]]\ngroup = \"xmin\"\nkind = \"convection\"\nh = 10.0\nt_inf = 300.0\n";
    let s = run("t.toml", thermal);
    let (j, mean) = (s["objective"].as_f64().unwrap(), s["mean_temperature_K"].as_f64().unwrap());
    assert!(j > 300.0 && (j - mean).abs() <= 1e-12 * mean, "J = {j}, mean temperature {mean}");
    let mechanical = "[mesh]\nbox = { lengths = [0.01, 0.002, 0.002], divisions = [4, 1, 1], cell = \"hex8\" }\n\
                      [[mechanical.material]]\ngroup = \"domain\"\nyoung = 200e9\npoisson = 0.3\n\
                      [[mechanical.bc]]\ngroup = \"xmin\"\nkind = \"fixed\"\n\
                      [[mechanical.bc]]\ngroup = \"xmax\"\nkind = \"traction\"\ntraction = [0.0, 0.0, -1e6]\n\
                      [mechanical]\ntemperature = { uniform = 300.0 }\n";
    let default = run("m.toml", mechanical)["objective"].as_f64().unwrap();
    let explicit =
        run("c.toml", &format!("{mechanical}[[objective]]\nkind = \"compliance\"\n"))["objective"]
            .as_f64()
            .unwrap();
    assert!(default > 0.0 && default == explicit, "default {default}, compliance {explicit}");
}
