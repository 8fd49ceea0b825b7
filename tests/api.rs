//! The library API: a model built in code is the problem file it stands for, parameters set by
//! name re-solve to what a fresh set-up gives, and vector-Jacobian products of whole fields and
//! of quantities agree with central finite differences, through the electro-thermal and the
//! thermo-mechanical chains.

use std::path::Path;

use gradfem::api::{ApiError, Cotangent, Model, Objective, Simulation, mesh_from_arrays};
use gradfem::element_values::volume_cells;

fn rel(a: f64, b: f64) -> f64 {
    let s = a.abs().max(b.abs());
    if s == 0.0 { 0.0 } else { (a - b).abs() / s }
}

/// A heated block: conduction, a source, a fixed face and convection, with four parameters.
fn block() -> Model {
    Model::new("block")
        .mesh_box([0.02, 0.01, 0.004], [4, 2, 2], "tet4")
        .conductivity("domain", 40.0)
        .heat_source("domain", 2.0e6)
        .fixed_temperature("xmin", 300.0)
        .convection("zmax", 150.0, 290.0)
        .objective(Objective::AverageTemperature { group: "domain".into() }, 1.0)
        .register("thermal.k.domain")
        .register("thermal.q.domain")
        .register("bc.zmax.h")
        .register("bc.xmin.temperature")
}

/// ⟨w, T⟩ at the parameters `x` (flat, registration order).
fn pairing(sim: &mut Simulation, x: &[f64], field: &str, w: &[f64]) -> f64 {
    let names = sim.registered();
    let mut at = 0;
    for n in &names {
        let len = sim.parameter(n).unwrap().len();
        sim.set_parameter_values(n, &x[at..at + len]).unwrap();
        at += len;
    }
    sim.solve().unwrap();
    let f = sim.field(field).unwrap();
    f.iter().zip(w).filter(|(v, _)| v.is_finite()).map(|(v, w)| v * w).sum()
}

/// Central differences of `value(x)` along each scalar parameter, relative step `h`.
fn check_against_fd(
    sim: &mut Simulation,
    g: &[f64],
    h: f64,
    tol: f64,
    mut value: impl FnMut(&mut Simulation, &[f64]) -> f64,
) {
    let x0 = sim.parameter_vector();
    for i in 0..x0.len() {
        let step = h * x0[i].abs().max(1e-3);
        let mut xp = x0.clone();
        xp[i] += step;
        let mut xm = x0.clone();
        xm[i] -= step;
        let fd = (value(sim, &xp) - value(sim, &xm)) / (2.0 * step);
        assert!(
            rel(g[i], fd) < tol || (g[i] - fd).abs() < 1e-12,
            "entry {i} ({}): adjoint {} vs central difference {fd}",
            sim.registered().join(", "),
            g[i]
        );
    }
    value(sim, &x0);
}

#[test]
fn a_temperature_cotangent_matches_finite_differences() {
    let mut sim = block().build().unwrap();
    sim.solve().unwrap();
    let n = sim.mesh().n_nodes();
    let w: Vec<f64> = (0..n).map(|i| ((i * 7) % 13) as f64 / 13.0 - 0.4).collect();
    let v = sim.vjp(&Cotangent::new().field("temperature", w.clone())).unwrap();
    let t = sim.field("temperature").unwrap().to_vec();
    let pairing_now: f64 = t.iter().zip(&w).map(|(a, b)| a * b).sum();
    assert!(rel(v.value, pairing_now) < 1e-13, "{} vs {pairing_now}", v.value);
    let g = sim.flatten(&v);
    check_against_fd(&mut sim, &g, 1e-5, 1e-6, |s, x| pairing(s, x, "temperature", &w));
    // The problem's own objective is untouched.
    let own = sim.gradient().unwrap();
    assert!(rel(own.value, sim.quantities().unwrap()["mean_temperature"]) < 1e-12);
}

#[test]
fn vjps_are_linear_and_the_objective_cotangent_is_the_gradient() {
    let mut sim = block().build().unwrap();
    let n = sim.mesh().n_nodes();
    let w1: Vec<f64> = (0..n).map(|i| (i % 5) as f64).collect();
    let w2: Vec<f64> = (0..n).map(|i| 1.0 / (1.0 + i as f64)).collect();
    let a = sim.vjp(&Cotangent::new().field("temperature", w1.clone())).unwrap();
    let b = sim.vjp(&Cotangent::new().field("temperature", w2.clone())).unwrap();
    let combined: Vec<f64> = w1.iter().zip(&w2).map(|(x, y)| 3.0 * x + y).collect();
    let c = sim
        .vjp(&Cotangent::new().field("temperature", combined).quantity("objective", -2.0))
        .unwrap();
    let g = sim.gradient().unwrap();
    for name in sim.registered() {
        let expect = 3.0 * a.scalar(&name).unwrap() + b.scalar(&name).unwrap()
            - 2.0 * g.scalar(&name).unwrap();
        assert!(rel(c.scalar(&name).unwrap(), expect) < 1e-10, "{name}");
    }
    let j = sim.vjp(&Cotangent::new().quantity("objective", 1.0)).unwrap();
    assert_eq!(j.by_name.keys().collect::<Vec<_>>(), g.by_name.keys().collect::<Vec<_>>());
    for (name, v) in &g.by_name {
        assert!(rel(j.get(name).unwrap()[0], v[0]) < 1e-12, "{name}");
    }
}

/// A resistive heater: a strip between a voltage terminal and ground, cooled by convection.
fn heater() -> Model {
    Model::new("heater")
        .mesh_box([0.01, 0.002, 0.0005], [10, 2, 1], "tet4")
        .conductivity("domain", 30.0)
        .conductor("domain", 2.0e4)
        .resistivity_coefficient("domain", 1.0e-3, 293.15)
        .fixed_temperature("xmin", 293.15)
        .fixed_temperature("xmax", 293.15)
        .convection("zmax", 500.0, 293.15)
        .voltage("xmin", 0.5)
        .ground("xmax")
        .objective(Objective::MaxTemperature { group: "domain".into(), p: 8.0 }, 1.0)
        .register("load.xmin.voltage")
        .register("electrical.sigma.domain")
        .register("thermal.k.domain")
}

#[test]
fn electro_thermal_cotangents_on_temperature_and_current() {
    let mut sim = heater().build().unwrap();
    sim.solve().unwrap();
    let q = sim.quantities().unwrap();
    assert!(q["max_temperature"] > 300.0, "{q:?}");
    let n = sim.mesh().n_nodes();
    let w: Vec<f64> = (0..n).map(|i| (i % 3) as f64 - 0.5).collect();
    let v = sim
        .vjp(&Cotangent::new().field("temperature", w.clone()).quantity("current", 1.0e3))
        .unwrap();
    let g = sim.flatten(&v);
    check_against_fd(&mut sim, &g, 1e-5, 1e-6, |s, x| {
        pairing(s, x, "temperature", &w) + 1.0e3 * s.quantities().unwrap()["current"]
    });
    // A terminal's own quantity by name: the ground's current is minus the drive's.
    let drive = sim.vjp(&Cotangent::new().quantity("terminal.xmin.current", 1.0)).unwrap();
    let ground = sim.vjp(&Cotangent::new().quantity("terminal.xmax.current", 1.0)).unwrap();
    for name in sim.registered() {
        let (a, b) = (drive.scalar(&name).unwrap(), ground.scalar(&name).unwrap());
        assert!(rel(a, -b) < 1e-8, "{name}: {a} vs {b}");
    }
}

/// A bimaterial-free thermal actuator: a bar heated inside, fixed at one end, expanding.
fn hot_bar() -> Model {
    Model::new("hot bar")
        .mesh_box([0.04, 0.004, 0.004], [8, 1, 1], "hex8")
        .conductivity("domain", 50.0)
        .heat_source("domain", 1.0e6)
        .fixed_temperature("xmin", 293.15)
        .convection("ymax", 200.0, 293.15)
        .elastic("domain", 70.0e9, 0.3)
        .thermal_expansion("domain", 2.3e-5, 293.15)
        .fixed("xmin")
        .tip("xmax")
        .objective(Objective::Compliance, 1.0)
        .register("thermal.k.domain")
        .register("mechanical.alpha.domain")
        .register("mechanical.young.domain")
        .register("bc.ymax.h")
}

#[test]
fn displacement_cotangents_through_the_thermal_chain() {
    let mut sim = hot_bar().build().unwrap();
    sim.solve().unwrap();
    let n = sim.mesh().n_nodes();
    let w: Vec<f64> = (0..3 * n).map(|i| ((i * 11) % 7) as f64 - 3.0).collect();
    let v = sim
        .vjp(&Cotangent::new().field("displacement", w.clone()).quantity("tip_displacement.x", 1e3))
        .unwrap();
    let g = sim.flatten(&v);
    check_against_fd(&mut sim, &g, 1e-5, 1e-6, |s, x| {
        pairing(s, x, "displacement", &w) + 1e3 * s.quantities().unwrap()["tip_displacement.x"]
    });
    assert!(sim.quantities().unwrap()["tip_displacement.x"] > 0.0, "the bar expands");
}

#[test]
fn set_parameter_re_solves_to_a_fresh_set_up() {
    let mut sim = heater().build().unwrap();
    let before = sim.objective().unwrap();
    sim.set_parameter("load.xmin.voltage", 0.7).unwrap();
    sim.set_parameter("thermal.k.domain", 25.0).unwrap();
    let changed = sim.objective().unwrap();
    let fresh =
        heater().voltage("xmin", 0.7).conductivity("domain", 25.0).build().unwrap().objective();
    let fresh = fresh.unwrap();
    assert!(changed > before);
    assert!(rel(changed, fresh) < 1e-10, "{changed} vs {fresh}");
    // A parameter that was not registered is registered on first use, and then differentiated.
    sim.set_parameter("bc.zmax.h", 800.0).unwrap();
    assert!(sim.registered().contains(&"bc.zmax.h".to_string()));
    assert!(sim.gradient().unwrap().scalar("bc.zmax.h").unwrap() < 0.0);
}

#[test]
fn a_per_element_field_set_from_a_slice() {
    let mut sim = Model::new("field")
        .mesh_box([0.02, 0.01, 0.004], [4, 2, 2], "tet4")
        .conductivity("domain", 40.0)
        .heat_source("domain", 2.0e6)
        .fixed_temperature("xmin", 300.0)
        .build()
        .unwrap();
    let k = sim.parameter("thermal.k_elem.domain").unwrap();
    assert!(k.iter().all(|&v| v == 40.0));
    let uniform = sim.objective().unwrap();
    let doubled: Vec<f64> = k.iter().map(|v| 2.0 * v).collect();
    sim.set_parameter_values("thermal.k_elem.domain", &doubled).unwrap();
    let j2 = sim.objective().unwrap();
    assert!(j2 < uniform);
    let g = sim.gradient().unwrap();
    assert_eq!(g.get("thermal.k_elem.domain").unwrap().len(), k.len());
    let err = sim.set_parameter_values("thermal.k_elem.domain", &[1.0]).unwrap_err().to_string();
    assert!(
        err.contains(&format!("takes {} value(s)", k.len())) && err.contains("given 1"),
        "{err}"
    );
}

#[test]
fn a_mesh_from_arrays_gives_the_box_answer() {
    let mut boxed = block().build().unwrap();
    let j_box = boxed.objective().unwrap();
    // The same cells and facets as plain arrays, the groups by cell index.
    let m = boxed.mesh();
    let cells: Vec<_> = m.blocks.iter().map(|b| (b.cell_type, b.connectivity.clone())).collect();
    let groups: Vec<(String, usize, Vec<usize>)> = m
        .groups
        .iter()
        .flat_map(|g| {
            let blocks: std::collections::BTreeSet<usize> =
                g.cells.iter().map(|c| c.block).collect();
            blocks.into_iter().map(move |b| {
                let idx = g.cells.iter().filter(|c| c.block == b).map(|c| c.index).collect();
                (g.name.clone(), b, idx)
            })
        })
        .collect();
    let groups: Vec<(&str, usize, Vec<usize>)> =
        groups.iter().map(|(n, b, i)| (n.as_str(), *b, i.clone())).collect();
    let mesh = mesh_from_arrays(&m.coords, &cells, &groups).unwrap();
    assert_eq!(volume_cells(&mesh).len(), volume_cells(m).len());
    let mut arrays = block().mesh(mesh).build().unwrap();
    let j = arrays.objective().unwrap();
    assert!(rel(j, j_box) < 1e-12, "{j} vs {j_box}");
    let text = block().mesh(Mesh::default()).to_toml().unwrap();
    assert!(text.starts_with("# [mesh]: a mesh given in code"), "{text}");
}

use gradfem::mesh::Mesh;

/// The problem file a model writes sets up the same problem: the same J and gradients, on
/// the electro-thermal heater and the thermo-elastic bar.
#[rstest::rstest]
#[case::heater(heater())]
#[case::hot_bar(hot_bar())]
#[case::block_with_a_morph(block().morph("height", 0.0, "z", &[[0.0, 0.0], [0.004, 1.0]], [0.0, 0.0, 1.0], None).register("morph.height"))]
fn a_model_is_the_problem_file_it_writes(#[case] model: Model) {
    let text = model.to_toml().unwrap();
    let mut from_text = Simulation::from_toml(Path::new("model.toml"), &text).unwrap();
    let mut built = model.build().unwrap();
    assert_eq!(from_text.objective().unwrap(), built.objective().unwrap(), "{text}");
    let (a, b) = (from_text.gradient().unwrap(), built.gradient().unwrap());
    assert_eq!(a, b, "{text}");
}

#[test]
fn errors_of_a_model_name_the_entry_and_what_is_offered() {
    // Given in code: no line to name, but the table, the group and what the mesh has.
    let err = block().conductivity("dommain", 3.0).build().unwrap_err().to_string();
    assert!(
        err.starts_with("block (model): unknown group 'dommain' in [[thermal.material]]"),
        "{err}"
    );
    assert!(err.contains("domain, xmin"), "{err}");
    let cube = || Model::new("cube").mesh_box([1.0; 3], [1; 3], "hex8");
    let err = cube().heat_source("domain", 1.0).build().unwrap_err().to_string();
    assert_eq!(err, "cube (model): [[thermal.material]] on 'domain' needs `k`");
    let cube = || cube().conductivity("domain", 1.0).fixed_temperature("xmin", 300.0);
    let err = cube().thermal_expansion("domain", 1e-5, 300.0);
    let err = err.build().unwrap_err().to_string();
    assert_eq!(err, "cube (model): [[mechanical.material]] on 'domain' needs `young`");

    // Read from tables: the line and column of the text they make.
    let mut table = toml::Table::new();
    let text = block().conductivity("dommain", 3.0).to_toml().unwrap();
    table.extend(toml::from_str::<toml::Table>(&text).unwrap());
    let model = Model::from_table("block", table.clone()).unwrap();
    let err = model.build().unwrap_err().to_string();
    let rendered = toml::to_string(&table).unwrap();
    let line = rendered.lines().position(|l| l.contains("\"dommain\"")).unwrap() + 1;
    let column = rendered.lines().nth(line - 1).unwrap().find("\"dommain\"").unwrap() + 1;
    assert!(
        err.contains(&format!("block (model):{line}:{column}: unknown group 'dommain'")),
        "{err}\n{rendered}"
    );
    table.insert("colour".into(), "blue".into());
    let err = Model::from_table("block", table).unwrap_err().to_string();
    assert!(err.contains("unknown field `colour`"), "{err}");

    let mut sim = block().build().unwrap();
    let e = sim.vjp(&Cotangent::new().field("potential", vec![0.0; 3])).unwrap_err();
    assert!(e.to_string().contains("takes cotangents on: temperature"), "{e}");
    let e = sim.vjp(&Cotangent::new().field("temperature", vec![0.0; 3])).unwrap_err();
    assert!(e.to_string().contains("expected 45, given 3"), "{e}");
    let e = sim.vjp(&Cotangent::new().quantity("max_temperature", 1.0)).unwrap_err();
    assert!(e.to_string().contains("it has: objective, mean_temperature"), "{e}");
    let e = sim.set_parameter("thermal.k.nowhere", 1.0).unwrap_err();
    assert!(matches!(e, ApiError::Run { .. }) && e.to_string().contains("thermal.k.domain"), "{e}");
}

#[test]
fn the_taylor_test_passes_through_the_api() {
    let mut sim = hot_bar().build().unwrap();
    let t = sim.taylor_test().unwrap();
    assert!(t.passed, "{}", t.table());
}

/// The model of `examples/api_microactuator.rs`, the file itself.
#[allow(dead_code)]
#[path = "../examples/api_microactuator.rs"]
mod api_example;

#[test]
fn the_api_actuator_is_the_problem_file_actuator() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut code = api_example::actuator(root).build().unwrap();
    let mut file = Simulation::from_file(root.join("examples/microactuator.toml")).unwrap();
    let (a, b) = (code.quantities().unwrap(), file.quantities().unwrap());
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (k, v) in &a {
        assert!(rel(*v, b[k]) <= 1e-10, "{k}: {v} vs {}", b[k]);
    }
    // The tip deflection of the shared tet10 mesh in BENCHMARKS.md: 1.45428 µm.
    assert!((a["objective"] - 1.45428).abs() < 1e-5, "{}", a["objective"]);
    let (ga, gb) = (code.gradient().unwrap(), file.gradient().unwrap());
    assert_eq!(ga.by_name.len(), 5);
    for (k, v) in &ga.by_name {
        assert!(rel(v[0], gb.get(k).unwrap()[0]) <= 1e-10, "{k}");
    }
}

/// The README's example, the file itself.
#[path = "../examples/api_plate.rs"]
mod api_plate;

#[test]
fn the_readme_example_runs_and_is_the_example_file() {
    api_plate::main().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(root.join("examples/api_plate.rs")).unwrap();
    let begin = source.find("// README begin\n").unwrap() + "// README begin\n".len();
    let end = source.find("    // README end").unwrap();
    let body: String = source[begin..end]
        .lines()
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("```rust\n{body}```")),
        "README.md's Rust example differs from examples/api_plate.rs:\n{body}"
    );
}

/// Every shipped problem file is a description the typed spec holds whole: written back as
/// TOML and read again, it is the same description (every table and key survives).
#[test]
fn every_shipped_problem_file_survives_the_typed_description() {
    let mut seen = 0;
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")).unwrap()
    {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let raw: toml::Table = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        if raw.contains_key("experiment") {
            continue; // an identification file (`gradfem identify`), not a problem file
        }
        let file = gradfem::problem::ProblemFile::read(&path).unwrap();
        let text = toml::to_string(&file.spec).unwrap();
        let again = gradfem::problem::ProblemFile::parse(&path, text.clone())
            .unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()));
        assert_eq!(toml::to_string(&again.spec).unwrap(), text, "{}", path.display());
        seen += 1;
    }
    assert!(seen >= 15, "{seen} problem files");
}
