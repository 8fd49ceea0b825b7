//! End-to-end tests of the ANSYS commands of the `gradfem` binary: `import-ansys` (CSV header
//! and row order against the reference dumps of data/ansys, HDF5/XDMF read back), `mesh-info`
//! on result files and archives, and `[initial_state]` in a problem file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gradfem_io::h5::{FieldValues, read_results};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_gradfem");

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/ansys").join(name)
}

fn gradfem_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .env_remove("RUST_LOG")
        .output()
        .expect("the gradfem binary runs")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn rows(text: &str) -> Vec<Vec<f64>> {
    text.lines().skip(1).map(|l| l.split(',').map(|x| x.parse().unwrap()).collect()).collect()
}

/// The CSV has `node,x,y,z,<DOFs>` and one row per node in ascending node number, with the
/// reference dump's coordinates and nodal solution (which are sorted by node number too).
#[test]
fn import_csv_matches_the_reference_dumps() {
    let dir = tempfile::tempdir().unwrap();
    for (file, dofs) in [("file.rth", "TEMP"), ("beam_static_bc.rst", "UX,UY,UZ")] {
        let out = dir.path().join(format!("{file}.csv"));
        ok(&gradfem_in(
            dir.path(),
            &["import-ansys", data(file).to_str().unwrap(), "-o", out.to_str().unwrap()],
        ));
        let text = std::fs::read_to_string(&out).unwrap();
        assert_eq!(text.lines().next().unwrap(), format!("node,x,y,z,{dofs}"));
        let got = rows(&text);
        let nodes = rows(&std::fs::read_to_string(data(&format!("{file}.nodes.csv"))).unwrap());
        let sol =
            rows(&std::fs::read_to_string(data(&format!("{file}.nodal_solution.csv"))).unwrap());
        assert_eq!(got.len(), nodes.len());
        assert!(got.windows(2).all(|w| w[0][0] < w[1][0]), "rows ascend by node number");
        for ((g, n), s) in got.iter().zip(&nodes).zip(&sol) {
            assert_eq!(g[..4], n[..4], "node {}", n[0]);
            assert_eq!(s[0], n[0]);
            for (a, b) in g[4..].iter().zip(&s[1..]) {
                // The dump prints 17 significant digits; ours is the shortest round-trip text.
                assert!((a - b).abs() <= 1e-15 * b.abs().max(1e-300), "node {}: {a} vs {b}", n[0]);
            }
        }
    }
}

#[test]
fn import_archive_gives_the_mesh_only() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sub/hexbeam.csv");
    ok(&gradfem_in(
        dir.path(),
        &["import-ansys", data("HexBeam.cdb").to_str().unwrap(), "-o", out.to_str().unwrap()],
    ));
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.lines().next().unwrap(), "node,x,y,z");
    // Same mesh as beam_static_bc.rst (data/ansys/README.md).
    let nodes = rows(&std::fs::read_to_string(data("beam_static_bc.rst.nodes.csv")).unwrap());
    assert_eq!(rows(&text), nodes);
}

#[test]
fn import_h5_writes_displacement_and_components() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("beam.xdmf");
    let stdout = ok(&gradfem_in(
        dir.path(),
        &[
            "import-ansys",
            data("beam_static_bc.rst").to_str().unwrap(),
            "--set",
            "1",
            "-o",
            out.to_str().unwrap(),
        ],
    ));
    assert!(stdout.contains("displacement"), "{stdout}");
    assert!(dir.path().join("beam.h5").exists());
    let xdmf = std::fs::read_to_string(&out).unwrap();
    assert!(xdmf.contains("displacement") && xdmf.contains("UZ"), "{xdmf}");
    let r = read_results(&out).unwrap();
    assert_eq!(r.mesh.n_nodes(), 321);
    assert_eq!(r.steps.len(), 1);
    let f = |name: &str| r.steps[0].fields.iter().find(|f| f.name == name).unwrap();
    let (FieldValues::Vector(u), FieldValues::Scalar(ux)) =
        (&f("displacement").values, &f("UX").values)
    else {
        panic!("field kinds")
    };
    // data/ansys/README.md: max |UX| = 0.0156996 at node 10.
    let i = r.mesh.node_tags.iter().position(|&t| t == 10).unwrap();
    assert!((ux[i].abs() - 0.0156996).abs() < 1e-6, "{}", ux[i]);
    assert!(u.iter().zip(ux).all(|(v, x)| v[0] == *x));
    let max = ux.iter().map(|v| v.abs()).fold(0.0, f64::max);
    assert_eq!(max, ux[i].abs());
}

#[test]
fn import_rejects_a_missing_set_and_a_bad_extension() {
    let dir = tempfile::tempdir().unwrap();
    let out = gradfem_in(
        dir.path(),
        &["import-ansys", data("file.rth").to_str().unwrap(), "--set", "2", "-o", "t.csv"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no result set 2") && err.contains("file.rth"), "{err}");
    assert!(!dir.path().join("t.csv").exists());
    let out = gradfem_in(
        dir.path(),
        &["import-ansys", data("file.rth").to_str().unwrap(), "-o", "t.vtu"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("t.vtu"));
}

#[test]
fn mesh_info_json_lists_sets_dofs_and_element_types() {
    let dir = tempfile::tempdir().unwrap();
    let out =
        ok(&gradfem_in(dir.path(), &["mesh-info", data("file.rth").to_str().unwrap(), "--json"]));
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["nodes"], 2720);
    assert_eq!(j["cells_by_type"]["hex20"], 450);
    let a = &j["ansys"];
    assert_eq!(a["kind"], "result");
    assert_eq!(a["dof_names"], serde_json::json!(["TEMP"]));
    let sets = a["result_sets"].as_array().unwrap();
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0]["index"], 1);
    assert_eq!(sets[0]["load_step"], 1);
    assert_eq!(sets[0]["time_or_frequency"], 1.0);
    let et = &a["element_types"][0];
    assert_eq!((et["number"].as_u64(), et["ansys_type"].as_u64()), (Some(1), Some(90)));
    assert_eq!((et["name"].as_str(), et["count"].as_u64()), (Some("SOLID90"), Some(450)));

    let text = ok(&gradfem_in(dir.path(), &["mesh-info", data("HexBeam.cdb").to_str().unwrap()]));
    assert!(text.contains("ANSYS archive") && text.contains("SOLID186"), "{text}");
    assert!(text.contains("result sets: 0"), "{text}");
}

/// A nonlinear k(T) problem on a box that fills the plate of file.rth: with the ANSYS
/// temperatures as the starting guess (interpolated: other node numbers), Newton needs fewer
/// iterations than from zero and reaches the same solution; the summary says where the start
/// came from.
#[test]
fn initial_state_from_rth_starts_newton_closer() {
    let dir = tempfile::tempdir().unwrap();
    let problem = |init: bool| {
        format!(
            r#"
[mesh]
box = {{ origin = [-0.3, -0.46, -0.2], lengths = [0.6, 1.8, 0.02], divisions = [3, 9, 1], cell = "hex20" }}

[[thermal.material]]
group = "domain"
k = 45.0
law = {{ kind = "polynomial", t_ref = 323.15, coefficients = [4e-3] }}

[[thermal.bc]]
group = "ymin"
kind = "temperature"
value = 278.15

[[thermal.bc]]
group = "ymax"
kind = "temperature"
value = 373.15
{}"#,
            if init {
                format!(
                    "\n[initial_state]\nansys = {:?}\nset = 1\ntemperature_unit = \"C\"\n",
                    data("file.rth")
                )
            } else {
                String::new()
            }
        )
    };
    let run = |init: bool| -> Value {
        let path = dir.path().join(format!("p{init}.toml"));
        std::fs::write(&path, problem(init)).unwrap();
        let out = ok(&gradfem_in(dir.path(), &["run", path.to_str().unwrap(), "--json"]));
        serde_json::from_str(&out).unwrap()
    };
    let cold = run(false);
    let warm = run(true);
    assert!(cold.get("initial_state").is_none());
    let init = warm["initial_state"].as_str().unwrap();
    assert!(init.contains("file.rth") && init.contains("interpolated"), "{init}");
    assert!(init.contains("°C"), "the summary says the unit it converted from: {init}");
    let it = |v: &Value| v["timings"]["newton_iterations"].as_u64().unwrap();
    eprintln!("Newton iterations: cold {}, warm {}", it(&cold), it(&warm));
    assert!(it(&warm) < it(&cold), "warm {} vs cold {}", it(&warm), it(&cold));
    for key in ["max_temperature_K", "min_temperature_K", "mean_temperature_K"] {
        let (a, b) = (cold[key].as_f64().unwrap(), warm[key].as_f64().unwrap());
        assert!((a - b).abs() < 1e-8 * 100.0, "{key}: {a} vs {b}");
    }
}

#[test]
fn initial_state_errors_name_the_problem_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(
        &path,
        format!(
            "[mesh]\nbox = {{ lengths = [1, 1, 1], divisions = [2, 2, 2], cell = \"hex8\" }}\n\
             [[thermal.material]]\ngroup = \"domain\"\nk = 1.0\n\
             [[thermal.bc]]\ngroup = \"xmin\"\nkind = \"temperature\"\nvalue = 1.0\n\
             [initial_state]\nansys = {:?}\ntemperature_unit = \"K\"\n",
            data("file.rth")
        ),
    )
    .unwrap();
    let out = gradfem_in(dir.path(), &["run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    // The unit box lies far outside the plate: the nodes outside are counted.
    assert!(err.contains("p.toml") && err.contains("[initial_state]"), "{err}");
    assert!(err.contains("outside the source mesh"), "{err}");
}

/// file.rth's /UNITS is user defined, so its 5–100 degree field has no unit of its own: the
/// problem file must choose one, and a unit that puts the field below 0 K is an error.
#[test]
fn an_ansys_temperature_without_a_unit_is_a_required_choice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    let text = |unit: &str| {
        format!(
            "[mesh]\nfile = {:?}\n\
             plane_group = [{{ name = \"root\", axis = \"y\", value = -0.46 }}]\n\
             [[thermal.material]]\ngroup = \"material_1\"\nk = 45.0\n\
             [[thermal.bc]]\ngroup = \"root\"\nkind = \"temperature\"\nvalue = 300.0\n\
             [initial_state]\nansys = {:?}\n{unit}",
            data("file.rth"),
            data("file.rth")
        )
    };
    std::fs::write(&path, text("")).unwrap();
    let out = gradfem_in(dir.path(), &["run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("temperature_unit") && err.contains("User Defined"), "{err}");
    assert!(err.contains("[initial_state]") && !err.contains("panicked"), "{err}");
    std::fs::write(&path, text("temperature_unit = \"F\"\n")).unwrap();
    let out = ok(&gradfem_in(dir.path(), &["run", path.to_str().unwrap(), "--json"]));
    let summary: Value = serde_json::from_str(&out).unwrap();
    let init = summary["initial_state"].as_str().unwrap();
    assert!(init.contains("°F") && init.contains("by node number"), "{init}");
    std::fs::write(&path, text("temperature_unit = \"Q\"\n")).unwrap();
    let out = gradfem_in(dir.path(), &["run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected K, C or F") && err.contains(":13:"), "{err}");
}

/// `[mesh] file = ...` reads ANSYS meshes (result files and archives) with their
/// `material_<n>` / `etype_<n>` groups and ANSYS node numbers.
#[rstest::rstest]
#[case("file.rth", 2720, 450)]
#[case("HexBeam.cdb", 321, 40)]
fn problem_files_read_ansys_meshes(#[case] file: &str, #[case] nodes: usize, #[case] cells: usize) {
    let text = format!(
        "[mesh]\nfile = {:?}\n[[thermal.material]]\ngroup = \"material_1\"\nk = 1.0\n",
        data(file)
    );
    let pf = gradfem::problem::ProblemFile::parse(Path::new("p.toml"), text).unwrap();
    let mesh = pf.build_mesh().unwrap();
    assert_eq!((mesh.n_nodes(), mesh.n_cells_of_dim(3)), (nodes, cells));
    assert!(mesh.groups.iter().any(|g| g.name == "material_1" && g.dim == 3));
    assert_eq!(mesh.node_tags.iter().min(), Some(&1));
}

/// A result file cut short of the length its standard header declares (word 27) is read as far
/// as its records are whole, with a warning that names the file and both sizes, by
/// `mesh-info`, `import-ansys` and a problem file's `[mesh] file`; `--strict` makes it an
/// error. The shared files are cut inside their last declared word, so every record used is
/// whole.
#[test]
fn a_result_file_cut_short_warns_and_strict_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(data("file.rth")).unwrap();
    let word = |i: usize| i32::from_le_bytes(bytes[8 + 4 * i..12 + 4 * i].try_into().unwrap());
    let declared = 4 * word(26) as usize;
    let cut = declared - 4;
    std::fs::write(dir.path().join("cut.rth"), &bytes[..cut]).unwrap();
    let warning = format!(
        "cut.rth: cut short: the standard header declares {declared} bytes, the file has {cut}"
    );
    let problem = "[mesh]\nfile = \"cut.rth\"\n\
                   plane_group = [{ name = \"root\", axis = \"y\", value = -0.46 }]\n\
                   [[thermal.material]]\ngroup = \"material_1\"\nk = 45.0\n\
                   [[thermal.bc]]\ngroup = \"root\"\nkind = \"temperature\"\nvalue = 300.0\n";
    std::fs::write(dir.path().join("p.toml"), problem).unwrap();
    let commands: [&[&str]; 3] = [
        &["mesh-info", "cut.rth"],
        &["import-ansys", "cut.rth", "-o", "t.csv"],
        &["run", "p.toml", "-o", "out"],
    ];
    for args in commands {
        let out = gradfem_in(dir.path(), args);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        ok(&out);
        assert!(err.contains(&warning) && err.contains("--strict"), "{args:?}: {err}");
        let strict: Vec<&str> = ["--strict"].into_iter().chain(args.iter().copied()).collect();
        let out = gradfem_in(dir.path(), &strict);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{strict:?}: {err}");
        assert!(
            err.contains(&format!("declares {declared} bytes"))
                && err.contains(&format!("the file has {cut}"))
                && err.contains("cut.rth"),
            "{strict:?}: {err}"
        );
    }
    // The whole file draws no warning.
    let out = gradfem_in(dir.path(), &["mesh-info", data("file.rth").to_str().unwrap()]);
    ok(&out);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("cut short"));
}
