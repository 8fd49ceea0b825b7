//! Device selection: `[solver] device`, `Model::device` and `ThermalProblem::device_gradient`.
//! Without the `cuda` feature (or without a GPU) choosing `cuda` is an error naming the reason;
//! a problem without device kernels runs on the CPU.

use gradfem::api::{Model, Objective};
use gradfem::run::LinearChoice;
use gradfem::thermal::{CgParams, Device, Preconditioner, ThermalProblem};
use gradfem_mesh::CellType;
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_thermal::{BcKind, BcSpec, ConductivityLaw, ObjectiveKind, ObjectiveTerm, RegionSpec};

fn plate() -> Model {
    Model::new("plate")
        .mesh_box([0.1, 0.05, 0.01], [4, 2, 2], "tet4")
        .conductivity("domain", 120.0)
        .heat_source("domain", 5.0e6)
        .fixed_temperature("xmin", 300.0)
        .objective(Objective::AverageTemperature { group: "domain".into() }, 1.0)
}

#[test]
fn problem_file_device_key_is_checked() {
    assert!(plate().device("cpu").build().is_ok());
    let refused = |m: Model, why: &str| match m.build() {
        Ok(_) => panic!("{why}"),
        Err(e) => e,
    };
    let e = refused(plate().device("tpu"), "an unknown device is refused");
    assert!(e.to_string().contains(r#"expected "cpu" or "cuda""#), "{e}");
    match gradfem_gpu::cuda_ready() {
        Ok(_) => {
            // a GPU: the file's fields solve on it, to the CPU's answer
            let mut cpu = plate().build().unwrap();
            let mut gpu = plate().device("cuda").build().unwrap();
            let (a, b) = (cpu.objective().unwrap(), gpu.objective().unwrap());
            assert!((a - b).abs() <= 1e-8 * a.abs(), "{a} vs {b}");
        }
        Err(_) => {
            let text = refused(plate().device("cuda"), "no usable GPU here").to_string();
            assert!(text.contains(r#"[solver] device = "cuda""#), "{text}");
            if gradfem_gpu::CUDA_BUILT {
                assert!(
                    text.contains("no CUDA driver")
                        || text.contains("no CUDA device")
                        || text.contains("NVRTC"),
                    "{text}"
                );
            } else {
                assert!(text.contains("`cuda` feature"), "{text}");
            }
        }
    }
}

/// An electro-thermo-mechanical bar: 2 V across its length heats it (Joule), the heat leaves
/// through its clamped end and a film on one side, and the thermal strain bends it sideways
/// while a traction on its free end bends it down; the tip's sideways deflection and
/// displacement along the traction are the objective.
fn bar() -> Model {
    Model::new("bar")
        .mesh_box([1.0e-3, 0.2e-3, 0.1e-3], [8, 3, 2], "hex8")
        .conductivity("domain", 30.0)
        .fixed_temperature("xmin", 300.0)
        .convection("ymax", 2.0e3, 300.0)
        .conductor("domain", 2.0e4)
        .voltage("xmax", 2.0)
        .ground("xmin")
        .elastic("domain", 160.0e9, 0.22)
        .thermal_expansion("domain", 2.6e-6, 300.0)
        .fixed("xmin")
        .traction("xmax", [0.0, 0.0, -5.0e4])
        .objective(
            Objective::AverageDisplacement { group: "xmax".into(), direction: [0.0, 1.0, -1.0] },
            1.0e6,
        )
        .register("load.xmax.voltage")
        .register("thermal.k.domain")
        .register("mechanical.young.domain")
}

#[rstest::rstest]
#[case::jacobi(false, "twin-cg")]
#[case::amg(true, "twin-amg-cg")]
fn fields_solve_with_the_device_solver_to_the_cpu_answer(
    #[case] amg: bool,
    #[case] expected: &str,
) {
    // The device CG through its CPU twin (the GPU's arithmetic, one thread) in place of the
    // fields' own solvers: the coupled solve and its adjoint gradient agree with the direct
    // solvers'.
    let mut cpu = bar().build().unwrap();
    let g_cpu = cpu.gradient().unwrap();
    let mut twin = bar().build().unwrap();
    let params = CgParams { rel_tol: 1e-13, max_iterations: 100_000 };
    gradfem::app::solve_fields_with(&mut twin.problem().engine, |field, modes, coarse| {
        let s = gradfem_gpu::DeviceCgSolver::new(field, Device::Cpu, params);
        Box::new(if amg { s.with_amg(modes).with_coarse_space(coarse) } else { s })
    });
    let g_twin = twin.gradient().unwrap();
    let engine = &twin.problem().engine;
    for name in ["electrical", "thermal", "mechanical"] {
        let solver = match name {
            "electrical" => {
                engine.find::<gradfem::electrical::ElectricalField>().unwrap().linear_solver()
            }
            "thermal" => engine
                .find::<gradfem_coupling::fields::thermal::ThermalField>()
                .unwrap()
                .linear_solver(),
            _ => engine.find::<gradfem::mechanical::MechanicalField>().unwrap().linear_solver(),
        };
        assert_eq!(solver, expected, "{name}");
    }
    assert!(g_cpu.value.abs() > 0.0);
    assert!(
        (g_twin.value - g_cpu.value).abs() <= 1e-8 * g_cpu.value.abs(),
        "J: {} (device CG) vs {} (direct)",
        g_twin.value,
        g_cpu.value
    );
    for (name, g) in &g_cpu.by_name {
        let t = g_twin.get(name).unwrap();
        assert!(g.iter().all(|v| v.abs() > 0.0), "{name}: dJ/dp = {g:?} tells nothing");
        for (a, b) in t.iter().zip(g) {
            assert!((a - b).abs() <= 1e-6 * b.abs(), "{name}: {a} vs {b}");
        }
    }
}

/// A cantilever of quadratic tetrahedra under an end traction (mechanics only).
fn tet10_beam() -> Model {
    Model::new("beam")
        .mesh_box([1.0, 0.2, 0.2], [12, 3, 3], "tet10")
        .elastic("domain", 200.0e9, 0.3)
        .fixed("xmin")
        .traction("xmax", [0.0, 0.0, -1.0e6])
        .objective(
            Objective::AverageDisplacement { group: "xmax".into(), direction: [0.0, 0.0, 1.0] },
            1.0e3,
        )
}

#[test]
fn the_device_amg_starts_quadratic_cells_from_the_vertices() {
    // p-multigrid on the device path: the hierarchy the twin runs starts from the vertex
    // displacement, as the CPU's AMG-CG does, and converges in the iterations of Tet4 instead
    // of the plain aggregation's (measured: 29 against 50, to 1e-10).
    let mut cpu = tet10_beam().build().unwrap();
    let j_cpu = cpu.objective().unwrap();
    let params = CgParams { rel_tol: 1e-10, max_iterations: 10_000 };
    let iterations = |coarse_level: bool| {
        let mut twin = tet10_beam().build().unwrap();
        gradfem::app::solve_fields_with(&mut twin.problem().engine, |field, modes, coarse| {
            let s = gradfem_gpu::DeviceCgSolver::new(field, Device::Cpu, params).with_amg(modes);
            Box::new(if coarse_level { s.with_coarse_space(coarse) } else { s })
        });
        let j = twin.objective().unwrap();
        assert!((j - j_cpu).abs() <= 1e-8 * j_cpu.abs(), "J: {j} (device CG) vs {j_cpu}");
        let engine = &twin.problem().engine;
        let field = engine.find::<gradfem::mechanical::MechanicalField>().unwrap();
        assert_eq!(field.linear_solver(), "twin-amg-cg");
        field.last_cg_iterations().expect("a CG solve")
    };
    let (from_vertices, plain) = (iterations(true), iterations(false));
    assert!(
        from_vertices <= 32 && 3 * from_vertices <= 2 * plain,
        "CG iterations: {from_vertices} from the vertices, {plain} by plain aggregation"
    );
}

/// What choosing `cuda` answers on a machine that cannot use it: the missing driver, device
/// or NVRTC, or the missing `cuda` feature (`text` the error, with its context).
fn assert_no_usable_gpu(text: &str) {
    if gradfem_gpu::CUDA_BUILT {
        assert!(text.contains("no CUDA") || text.contains("NVRTC"), "{text}");
    } else {
        assert!(text.contains("`cuda` feature"), "{text}");
    }
}

fn heat3d(cell: CellType) -> ThermalProblem {
    heat3d_with(cell, &[])
}

/// The heat3d cube on `cell` cells with the boundary conditions `extra` beside T = 0 on x = 0.
fn heat3d_with(cell: CellType, extra: &[BcSpec]) -> ThermalProblem {
    heat3d_problem(cell, ConductivityLaw::Constant, LinearChoice::Cholesky, extra)
}

/// The heat3d cube: k = k(T) by `law`, Q = 1, T = 0 on x = 0 and `extra`, J = Σ T².
fn heat3d_problem(
    cell: CellType,
    law: ConductivityLaw,
    linear: LinearChoice,
    extra: &[BcSpec],
) -> ThermalProblem {
    let mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [1.0; 3],
        divisions: [4; 3],
        cell_type: cell,
    });
    ThermalProblem::new(
        mesh,
        &[RegionSpec { group: "domain".into(), k0: 1.0, law, source: 1.0 }],
        &[&[BcSpec { group: "xmin".into(), kind: BcKind::Temperature { value: 0.0 } }], extra]
            .concat(),
        vec![ObjectiveTerm { weight: 1.0, kind: ObjectiveKind::NodalSumSquares }],
        linear,
    )
    .unwrap()
}

#[test]
fn cpu_device_gradient_is_the_adjoint_gradient() {
    let mut p = heat3d(CellType::Tet4);
    let id = p.register("thermal.k_elem.domain", None).unwrap();
    let n_el = p.model.n_volume_elements();
    let k: Vec<f64> = (0..n_el).map(|e| 1.0 + 0.4 * (0.3 * e as f64).cos()).collect();
    p.registry_mut().set_values(id, &k).unwrap();
    p.apply_parameters().unwrap();
    let (j, grad, _) = p.gradient().unwrap();
    let mut g_ref = vec![0.0; n_el];
    for (i, e) in p.model.regions[0].elements.clone().enumerate() {
        g_ref[e] = grad.get(id)[i];
    }
    let d = p.device_gradient(Device::Cpu, &CgParams::default(), Preconditioner::Jacobi).unwrap();
    assert!(d.backend.starts_with("cpu"), "{}", d.backend);
    assert!((d.objective - j).abs() <= 1e-12 * j.abs());
    let scale = g_ref.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for (a, b) in d.gradient.iter().zip(&g_ref) {
        assert!((a - b).abs() <= 1e-12 * scale, "{a} vs {b}");
    }

    let cuda = p.device_gradient(
        Device::Cuda,
        &CgParams { rel_tol: 1e-13, max_iterations: 10_000 },
        Preconditioner::Amg,
    );
    match cuda {
        Ok(r) => {
            // a GPU ran it: the same gradient
            assert!(r.backend.starts_with("cuda"), "{}", r.backend);
            for (a, b) in r.gradient.iter().zip(&g_ref) {
                assert!((a - b).abs() <= 1e-10 * scale, "{a} vs {b}");
            }
        }
        Err(e) => assert_no_usable_gpu(&e.to_string()),
    }
}

#[test]
fn problems_without_device_kernels_run_on_the_cpu() {
    // A temperature-dependent conductivity has no device kernel yet: the whole problem runs
    // on the CPU.
    let law = ConductivityLaw::Polynomial { t_ref: 0.0, coefficients: vec![1e-3] };
    for cell in [CellType::Tet4, CellType::Hex8] {
        let mut p = heat3d_problem(cell, law.clone(), LinearChoice::Lu, &[]);
        let d =
            p.device_gradient(Device::Cuda, &CgParams::default(), Preconditioner::Jacobi).unwrap();
        assert!(d.backend.starts_with("cpu"), "{cell:?}: {}", d.backend);
        assert_eq!(d.gradient.len(), p.model.n_volume_elements());
        // J = Σ T² > 0, and a uniformly better conductor is cooler
        assert!(d.objective > 0.0 && d.gradient.iter().sum::<f64>() < 0.0);
    }
}

#[test]
fn convection_goes_to_the_device() {
    // Convection has no k in it: its matrix and load are assembled once on the CPU and the
    // rest runs on the device, so `cuda` runs it on a GPU or names what is missing.
    let convection =
        BcSpec { group: "zmax".into(), kind: BcKind::Convection { h: 2.0, t_inf: 0.0 } };
    let mut p = heat3d_with(CellType::Hex8, std::slice::from_ref(&convection));
    match p.device_gradient(Device::Cuda, &CgParams::default(), Preconditioner::Amg) {
        Ok(r) => assert!(r.backend.starts_with("cuda"), "{}", r.backend),
        Err(e) => assert_no_usable_gpu(&e.to_string()),
    }
}

#[test]
fn hexahedral_and_quadratic_cells_go_to_the_device() {
    // Hex8, Hex20 and Tet10 have device kernels: `cuda` runs them on a GPU, or names what
    // is missing (feature, driver, device, NVRTC) instead of falling back.
    for cell in [CellType::Hex8, CellType::Hex20, CellType::Tet10] {
        let mut p = heat3d(cell);
        match p.device_gradient(
            Device::Cuda,
            &CgParams { rel_tol: 1e-12, max_iterations: 10_000 },
            Preconditioner::Jacobi,
        ) {
            Ok(r) => assert!(r.backend.starts_with("cuda"), "{cell:?}: {}", r.backend),
            Err(e) => assert_no_usable_gpu(&format!("{cell:?}: {e}")),
        }
    }
}

/// elastic3d (clamped on x = 0, traction on x = 1) with `objective`, E varying per element.
fn elastic_cube(
    objective: Vec<gradfem_mechanical::ObjectiveTerm>,
) -> (gradfem_coupling::CoupledProblem, gradfem_solvers::params::ParamId) {
    use gradfem::mechanical::MechanicalField;
    let mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [1.0; 3],
        divisions: [5; 3],
        cell_type: CellType::Hex8,
    });
    let (region, bcs) = gradfem_mechanical::linear::elastic3d_specs();
    let mut field = MechanicalField::new(&mesh, &[region], &bcs, objective).unwrap();
    field.set_linear(LinearChoice::Cholesky, 1e-12);
    let n_el = field.model.n_volume_elements();
    let e: Vec<f64> = (0..n_el).map(|e| 1.0 + 0.5 * (0.37 * e as f64).sin()).collect();
    let mut p = gradfem_coupling::CoupledProblem::new(mesh);
    p.add_field(Box::new(field)).unwrap();
    let id = p.register("mechanical.young_elem.domain", None).unwrap();
    p.registry_mut().set_values(id, &e).unwrap();
    p.apply_parameters().unwrap();
    (p, id)
}

#[test]
fn elastic_gradient_on_the_device_pipeline_is_the_adjoint_gradient() {
    use gradfem::device::elastic_gradient;
    use gradfem::mechanical::MechanicalField;
    use gradfem_mechanical::{ObjectiveKind as K, ObjectiveTerm as T};
    let compliance = vec![T { weight: 3.0, kind: K::Compliance }];
    let tip = vec![
        T { weight: 1.0, kind: K::Compliance },
        T { weight: 10.0, kind: K::VonMisesPNorm { group: "domain".into(), p: 4.0 } },
        T {
            weight: 5.0,
            kind: K::AverageDisplacement { group: "xmax".into(), direction: [0.0, 0.0, -1.0] },
        },
    ];
    for (terms, on_device) in [(compliance, true), (tip, false)] {
        let (mut p, id) = elastic_cube(terms);
        let (j, grad, _) = p.gradient().unwrap();
        let g_ref = grad.get(id).to_vec();
        let f = p.find::<MechanicalField>().unwrap();
        let params = CgParams { rel_tol: 1e-13, max_iterations: 50_000 };
        for pre in [Preconditioner::Jacobi, Preconditioner::Amg] {
            let d = elastic_gradient(f, Device::Cpu, &params, pre).unwrap();
            assert_eq!(d.backend, "cpu-twin");
            assert_eq!(d.solution.is_empty(), on_device, "the solution stays on the device");
            assert!((d.objective - j).abs() <= 1e-10 * j.abs(), "{} vs {j}", d.objective);
            let scale = g_ref.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for (a, b) in d.gradient.iter().zip(&g_ref) {
                assert!((a - b).abs() <= 1e-8 * scale, "{pre:?}: {a} vs {b}");
            }
        }
        match elastic_gradient(f, Device::Cuda, &params, Preconditioner::Amg) {
            Ok(r) => assert!(r.backend.starts_with("cuda"), "{}", r.backend),
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("mechanical on the cuda device"), "{text}");
            }
        }
    }
}
