//! Device selection: `[solver] device`, `Model::device` and `ThermalProblem::device_gradient`.
//! Without the `cuda` feature (or without a GPU) choosing `cuda` is an error naming the reason;
//! a problem without device kernels runs on the CPU.

use gradfem::api::{Model, Objective};
use gradfem::run::LinearChoice;
use gradfem::thermal::{CgParams, Device, ThermalProblem};
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
    let e = refused(plate().device("cuda"), "cuda is not wired to problem files");
    let text = e.to_string();
    assert!(text.contains(r#"[solver] device = "cuda""#), "{text}");
    if gradfem_gpu::CUDA_BUILT {
        assert!(
            text.contains("no CUDA driver")
                || text.contains("no CUDA device")
                || text.contains("NVRTC")
                || text.contains("not yet supported"),
            "{text}"
        );
    } else {
        assert!(text.contains("`cuda` feature"), "{text}");
    }
}

fn heat3d(cell: CellType) -> ThermalProblem {
    heat3d_with(cell, &[])
}

/// The heat3d cube on `cell` cells with the boundary conditions `extra` beside T = 0 on x = 0.
fn heat3d_with(cell: CellType, extra: &[BcSpec]) -> ThermalProblem {
    let mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [1.0; 3],
        divisions: [4; 3],
        cell_type: cell,
    });
    ThermalProblem::new(
        mesh,
        &[RegionSpec {
            group: "domain".into(),
            k0: 1.0,
            law: ConductivityLaw::Constant,
            source: 1.0,
        }],
        &[&[BcSpec { group: "xmin".into(), kind: BcKind::Temperature { value: 0.0 } }], extra]
            .concat(),
        vec![ObjectiveTerm { weight: 1.0, kind: ObjectiveKind::NodalSumSquares }],
        LinearChoice::Cholesky,
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
    for (i, &e) in p.model.regions[0].elements.iter().enumerate() {
        g_ref[e] = grad.get(id)[i];
    }
    let d = p.device_gradient(Device::Cpu, &CgParams::default()).unwrap();
    assert!(d.backend.starts_with("cpu"), "{}", d.backend);
    assert!((d.objective - j).abs() <= 1e-12 * j.abs());
    let scale = g_ref.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for (a, b) in d.dj_dk.iter().zip(&g_ref) {
        assert!((a - b).abs() <= 1e-12 * scale, "{a} vs {b}");
    }

    let cuda =
        p.device_gradient(Device::Cuda, &CgParams { rel_tol: 1e-13, max_iterations: 10_000 });
    match cuda {
        Ok(r) => {
            // a GPU ran it: the same gradient
            assert!(r.backend.starts_with("cuda"), "{}", r.backend);
            for (a, b) in r.dj_dk.iter().zip(&g_ref) {
                assert!((a - b).abs() <= 1e-10 * scale, "{a} vs {b}");
            }
        }
        Err(e) => {
            let text = e.to_string();
            if gradfem_gpu::CUDA_BUILT {
                assert!(text.contains("no CUDA") || text.contains("NVRTC"), "{text}");
            } else {
                assert!(text.contains("`cuda` feature"), "{text}");
            }
        }
    }
}

#[test]
fn problems_without_device_kernels_run_on_the_cpu() {
    // Convection has no device kernel yet: the whole problem runs on the CPU.
    let convection =
        BcSpec { group: "zmax".into(), kind: BcKind::Convection { h: 2.0, t_inf: 0.0 } };
    for cell in [CellType::Tet4, CellType::Hex8] {
        let mut p = heat3d_with(cell, std::slice::from_ref(&convection));
        let d = p.device_gradient(Device::Cuda, &CgParams::default()).unwrap();
        assert!(d.backend.starts_with("cpu"), "{cell:?}: {}", d.backend);
        assert_eq!(d.dj_dk.len(), p.model.n_volume_elements());
        // J = Σ T² > 0, and a uniformly better conductor is cooler
        assert!(d.objective > 0.0 && d.dj_dk.iter().sum::<f64>() < 0.0);
    }
}

#[test]
fn hexahedral_and_quadratic_cells_go_to_the_device() {
    // Hex8, Hex20 and Tet10 have device kernels: `cuda` runs them on a GPU, or names what
    // is missing (feature, driver, device, NVRTC) instead of falling back.
    for cell in [CellType::Hex8, CellType::Hex20, CellType::Tet10] {
        let mut p = heat3d(cell);
        match p.device_gradient(Device::Cuda, &CgParams { rel_tol: 1e-12, max_iterations: 10_000 })
        {
            Ok(r) => assert!(r.backend.starts_with("cuda"), "{cell:?}: {}", r.backend),
            Err(e) => {
                let text = e.to_string();
                if gradfem_gpu::CUDA_BUILT {
                    assert!(text.contains("no CUDA") || text.contains("NVRTC"), "{text}");
                } else {
                    assert!(text.contains("`cuda` feature"), "{cell:?}: {text}");
                }
            }
        }
    }
}
