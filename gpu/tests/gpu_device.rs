//! The CUDA backend on a real device against the CPU path and the CPU twins.
//!
//! Without a usable device (no driver, no GPU, no NVRTC) each test says why and passes, unless
//! `GRADFEM_REQUIRE_GPU=1`, which turns a missing device into a failure (scripts/gpu-check.sh
//! sets it).
#![cfg(feature = "cuda")]

use gradfem_coupling::fields::thermal::ThermalField;
use gradfem_coupling::{CoupledProblem, LinearChoice};
use gradfem_gpu::cuda::CudaBackend;
use gradfem_gpu::twin::CpuTwin;
use gradfem_gpu::{
    Backend, CgParams, Device, DeviceSystem, GpuError, Pipeline, Preconditioner, cuda_ready, run_on,
};
use gradfem_mesh::CellType;
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_thermal::{BcKind, BcSpec, ConductivityLaw, ObjectiveKind, ObjectiveTerm, RegionSpec};
use rstest::rstest;

fn device_or_skip() -> bool {
    match cuda_ready() {
        Ok(name) => {
            eprintln!("CUDA device: {name}");
            true
        }
        Err(e) if std::env::var("GRADFEM_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            panic!("GRADFEM_REQUIRE_GPU=1 but no usable CUDA device: {e}")
        }
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

fn objective() -> Vec<ObjectiveTerm> {
    vec![ObjectiveTerm { weight: 1.0, kind: ObjectiveKind::NodalSumSquares }]
}

/// The heat3d problem (unit cube, T = 0 on x = 0, Q = 1) on `cell` cells with a varying k per
/// element, on the CPU with a direct solver.
fn cpu_problem(
    n: usize,
    cell: CellType,
) -> (CoupledProblem, gradfem_solvers::params::ParamId, Vec<f64>) {
    let mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [1.0; 3],
        divisions: [n; 3],
        cell_type: cell,
    });
    let field = ThermalField::new(
        &mesh,
        &[RegionSpec {
            group: "domain".into(),
            k0: 1.0,
            law: ConductivityLaw::Constant,
            source: 1.0,
        }],
        &[BcSpec { group: "xmin".into(), kind: BcKind::Temperature { value: 0.0 } }],
        objective(),
        LinearChoice::Cholesky,
    )
    .unwrap();
    let n_el = field.model.n_volume_elements();
    let k: Vec<f64> = (0..n_el).map(|e| 1.0 + 0.5 * (0.37 * e as f64).sin()).collect();
    let mut p = CoupledProblem::new(mesh);
    p.add_field(Box::new(field)).unwrap();
    let id = p.register("thermal.k_elem.domain", None).unwrap();
    p.registry_mut().set_values(id, &k).unwrap();
    p.apply_parameters().unwrap();
    (p, id, k)
}

fn rel_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / scale
}

fn bitwise(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[rstest]
#[case::tet4(CellType::Tet4, 12)]
#[case::tet10(CellType::Tet10, 6)]
#[case::hex8(CellType::Hex8, 12)]
#[case::hex20(CellType::Hex20, 6)]
fn device_forward_and_gradient_equal_the_cpu_path(#[case] cell: CellType, #[case] n: usize) {
    if !device_or_skip() {
        return;
    }
    let (mut p, id, k) = cpu_problem(n, cell);
    let (j_cpu, grad, _) = p.gradient().unwrap();
    let f = p.find::<ThermalField>().unwrap();
    let t_cpu = f.temperature().unwrap().to_vec();
    let sys = DeviceSystem::thermal(&f.model, &f.pattern).unwrap();
    let params = CgParams { rel_tol: 1e-14, max_iterations: 20_000 };
    let model = &f.model;
    let obj = |t: &[f64]| {
        let e = gradfem_thermal::objective::evaluate(model, &objective(), t, false)
            .map_err(|e| GpuError::Input(e.to_string()))?;
        Ok((e.value, gradfem_gpu::Seed::Vector(e.d_temperature)))
    };
    let gpu = run_on(Device::Cuda, &sys, &k, &params, Preconditioner::Jacobi, obj).unwrap();
    let twin = run_on(Device::Cpu, &sys, &k, &params, Preconditioner::Jacobi, obj).unwrap();
    let mut g_ref = vec![0.0; k.len()];
    for (i, e) in f.model.regions[0].elements.clone().enumerate() {
        g_ref[e] = grad.get(id)[i];
    }
    let dt = rel_diff(&gpu.solution, &t_cpu);
    let dj = (gpu.objective - j_cpu).abs() / j_cpu.abs();
    let dg = rel_diff(&gpu.gradient, &g_ref);
    println!(
        "GPU vs CPU (heat3d {cell:?} n = {n}, {} unknowns, varying k_e): T {dt:.2e}, J {dj:.2e}, \
         dJ/dk_e {dg:.2e}; CG {} + {} iterations on {}",
        sys.n_unknowns, gpu.forward_cg.iterations, gpu.adjoint_cg.iterations, gpu.backend
    );
    println!(
        "GPU vs CPU twin: T {:.2e} (bitwise: {}), dJ/dk_e {:.2e} (bitwise: {}), iterations {} / {}",
        rel_diff(&gpu.solution, &twin.solution),
        bitwise(&gpu.solution, &twin.solution),
        rel_diff(&gpu.gradient, &twin.gradient),
        bitwise(&gpu.gradient, &twin.gradient),
        gpu.forward_cg.iterations,
        twin.forward_cg.iterations
    );
    assert!(dt <= 1e-10 && dj <= 1e-10 && dg <= 1e-10, "GPU differs from the CPU path");
    assert!(rel_diff(&gpu.gradient, &twin.gradient) <= 1e-12, "GPU differs from its twin");
}

#[rstest]
#[case::tet4(CellType::Tet4, 7)]
#[case::tet10(CellType::Tet10, 4)]
#[case::hex8(CellType::Hex8, 7)]
#[case::hex20(CellType::Hex20, 4)]
#[case::hex27(CellType::Hex27, 3)]
fn device_kernels_equal_their_twins(#[case] cell: CellType, #[case] n: usize) {
    if !device_or_skip() {
        return;
    }
    let (p, _, k) = cpu_problem(n, cell);
    let f = p.find::<ThermalField>().unwrap();
    let sys = DeviceSystem::thermal(&f.model, &f.pattern).unwrap();
    assembly_equals_the_twins(&format!("thermal {cell:?}"), &sys, &k);

    // the blocked dot across block boundaries, and repeatable on the device
    let mut be = CudaBackend::new(&sys).unwrap();
    for len in [1usize, 255, 2048, 2049, 100_003] {
        let a: Vec<f64> = (0..len).map(|i| 1.0 + (0.013 * i as f64).sin()).collect();
        let b: Vec<f64> = (0..len).map(|i| (0.007 * i as f64).cos()).collect();
        let (da, db) = (be.upload(&a).unwrap(), be.upload(&b).unwrap());
        let d1 = be.dot(&da, &db).unwrap();
        let d2 = be.dot(&da, &db).unwrap();
        let t = gradfem_gpu::twin::dot(&a, &b);
        assert_eq!(d1.to_bits(), d2.to_bits(), "n = {len}: the device dot is not repeatable");
        assert!((d1 - t).abs() <= 1e-14 * t.abs().max(1.0), "n = {len}: {d1} vs twin {t}");
    }
}

/// elastic3d (unit cube, clamped on x = 0, traction (0, 0, −1) on x = 1, ν = 0.3) with a
/// varying E per element, compliance objective, on the CPU with a direct solver.
fn elastic_problem(
    n: usize,
    cell: CellType,
) -> (CoupledProblem, gradfem_solvers::params::ParamId, Vec<f64>) {
    use gradfem_coupling::fields::mechanical::MechanicalField;
    let mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [1.0; 3],
        divisions: [n; 3],
        cell_type: cell,
    });
    let (region, bcs) = gradfem_mechanical::linear::elastic3d_specs();
    let objective = vec![gradfem_mechanical::ObjectiveTerm {
        weight: 1.0,
        kind: gradfem_mechanical::ObjectiveKind::Compliance,
    }];
    let mut field = MechanicalField::new(&mesh, &[region], &bcs, objective).unwrap();
    field.set_linear(LinearChoice::Cholesky, 1e-12);
    let n_el = field.model.n_volume_elements();
    let e: Vec<f64> = (0..n_el).map(|e| 1.0 + 0.5 * (0.37 * e as f64).sin()).collect();
    let mut p = CoupledProblem::new(mesh);
    p.add_field(Box::new(field)).unwrap();
    let id = p.register("mechanical.young_elem.domain", None).unwrap();
    p.registry_mut().set_values(id, &e).unwrap();
    p.apply_parameters().unwrap();
    (p, id, e)
}

#[rstest]
#[case::tet4(CellType::Tet4, 8, Preconditioner::Jacobi)]
#[case::tet4_amg(CellType::Tet4, 12, Preconditioner::Amg)]
#[case::tet10(CellType::Tet10, 4, Preconditioner::Jacobi)]
#[case::hex8_amg(CellType::Hex8, 8, Preconditioner::Amg)]
#[case::hex20(CellType::Hex20, 4, Preconditioner::Amg)]
fn elastic_device_forward_and_gradient_equal_the_cpu_path(
    #[case] cell: CellType,
    #[case] n: usize,
    #[case] pre: Preconditioner,
) {
    use gradfem_coupling::fields::mechanical::MechanicalField;
    if !device_or_skip() {
        return;
    }
    let (mut p, id, young) = elastic_problem(n, cell);
    let (j_cpu, grad, _) = p.gradient().unwrap();
    let f = p.find::<MechanicalField>().unwrap();
    let u_cpu = f.displacement().unwrap().to_vec();
    let sys = DeviceSystem::elastic(&f.model, f.pattern()).unwrap();
    let params = CgParams { rel_tol: 1e-14, max_iterations: 50_000 };
    let model = &f.model;
    let obj = |u: &[f64]| {
        let e = gradfem_mechanical::linear::objective::evaluate(model, &f.objective, u, false)
            .map_err(|e| GpuError::Input(e.to_string()))?;
        Ok((e.value, gradfem_gpu::Seed::Forward { scale: 1.0 }))
    };
    let gpu = run_on(Device::Cuda, &sys, &young, &params, pre, obj).unwrap();
    let twin = run_on(Device::Cpu, &sys, &young, &params, pre, obj).unwrap();
    let du = rel_diff(&gpu.solution, &u_cpu);
    let dj = (gpu.objective - j_cpu).abs() / j_cpu.abs();
    let dg = rel_diff(&gpu.gradient, grad.get(id));
    println!(
        "GPU vs CPU (elastic3d {cell:?} n = {n}, {} unknowns, varying E_e): u {du:.2e}, J \
         {dj:.2e}, dC/dE_e {dg:.2e}; {pre:?}-CG {} iterations on {}",
        sys.n_unknowns, gpu.forward_cg.iterations, gpu.backend
    );
    println!(
        "GPU vs CPU twin: u {:.2e} (bitwise: {}), dC/dE_e {:.2e} (bitwise: {})",
        rel_diff(&gpu.solution, &twin.solution),
        bitwise(&gpu.solution, &twin.solution),
        rel_diff(&gpu.gradient, &twin.gradient),
        bitwise(&gpu.gradient, &twin.gradient),
    );
    assert!(du <= 1e-10 && dj <= 1e-10 && dg <= 1e-10, "GPU differs from the CPU path");
    assert!(rel_diff(&gpu.gradient, &twin.gradient) <= 1e-12, "GPU differs from its twin");
}

#[rstest]
#[case::tet4(CellType::Tet4, 5)]
#[case::hex27(CellType::Hex27, 2)]
fn elastic_device_kernels_equal_their_twins(#[case] cell: CellType, #[case] n: usize) {
    use gradfem_coupling::fields::mechanical::MechanicalField;
    if !device_or_skip() {
        return;
    }
    let (p, _, young) = elastic_problem(n, cell);
    let f = p.find::<MechanicalField>().unwrap();
    let mut sys = DeviceSystem::elastic(&f.model, f.pattern()).unwrap();
    assembly_equals_the_twins(&format!("elastic {cell:?}"), &sys, &young);
    // with a thermal strain (its load is formed on the device)
    let n_el = sys.n_elements();
    let temperature = f.model.coords.iter().map(|x| 300.0 + 50.0 * x[0] * x[1]).collect();
    if let gradfem_gpu::Physics::Elastic { thermal, .. } = &mut sys.physics {
        *thermal = Some(gradfem_gpu::system::ThermalStrain {
            alpha: vec![2e-5; n_el],
            t_ref: vec![293.0; n_el],
            temperature,
        });
    }
    assembly_equals_the_twins(&format!("heated elastic {cell:?}"), &sys, &young);
    let mut dev = Pipeline::new(CudaBackend::new(&sys).unwrap()).unwrap();
    let mut cpu = Pipeline::new(CpuTwin::new(&sys)).unwrap();
    let params = CgParams { rel_tol: 1e-12, max_iterations: 50_000 };
    let (ud, _) = dev.forward(&young, &params).unwrap();
    let (uc, _) = cpu.forward(&young, &params).unwrap();
    let seed: Vec<f64> = (0..ud.len()).map(|i| (0.1 * i as f64).sin()).collect();
    let (gd, _) = dev.gradient(&seed, &params).unwrap();
    let (gc, _) = cpu.gradient(&seed, &params).unwrap();
    println!(
        "heated elastic {cell:?}: u {:.2e} (bitwise: {}), dJ/dE_e {:.2e} (bitwise: {})",
        rel_diff(&ud, &uc),
        bitwise(&ud, &uc),
        rel_diff(&gd, &gc),
        bitwise(&gd, &gc)
    );
    assert!(rel_diff(&ud, &uc) <= 1e-12 && rel_diff(&gd, &gc) <= 1e-12);
}

/// The device's assembled matrix and right-hand side against the twins' for `coefficient`.
fn assembly_equals_the_twins(what: &str, sys: &DeviceSystem, coefficient: &[f64]) {
    let mut dev = Pipeline::new(CudaBackend::new(sys).unwrap()).unwrap();
    let mut cpu = Pipeline::new(CpuTwin::new(sys)).unwrap();
    dev.assemble(coefficient).unwrap();
    cpu.assemble(coefficient).unwrap();
    let (dv, cv) = (dev.matrix_values().unwrap(), cpu.matrix_values().unwrap());
    let (dl, cl) = (dev.load().unwrap(), cpu.load().unwrap());
    println!(
        "{what} assembly: CSR values {:.2e} (bitwise: {}), load {:.2e} (bitwise: {})",
        rel_diff(&dv, &cv),
        bitwise(&dv, &cv),
        rel_diff(&dl, &cl),
        bitwise(&dl, &cl)
    );
    assert!(rel_diff(&dv, &cv) <= 1e-14 && rel_diff(&dl, &cl) <= 1e-14, "{what}");
}

#[test]
fn elastic_compliance_wholly_on_the_device_equals_its_twin_and_the_cpu() {
    use gradfem_coupling::fields::mechanical::MechanicalField;
    if !device_or_skip() {
        return;
    }
    let (mut p, id, young) = elastic_problem(16, CellType::Tet4);
    let (j_cpu, grad, _) = p.gradient().unwrap();
    let f = p.find::<MechanicalField>().unwrap();
    let sys = DeviceSystem::elastic(&f.model, f.pattern()).unwrap();
    let params = CgParams { rel_tol: 1e-13, max_iterations: 50_000 };
    let pre = Preconditioner::Amg;
    let gpu = gradfem_gpu::run_compliance_on(Device::Cuda, &sys, &young, &params, pre, 1.0);
    let gpu = gpu.unwrap();
    let twin = gradfem_gpu::run_compliance_on(Device::Cpu, &sys, &young, &params, pre, 1.0);
    let twin = twin.unwrap();
    let dj = (gpu.objective - j_cpu).abs() / j_cpu;
    let dg = rel_diff(&gpu.gradient, grad.get(id));
    println!(
        "elastic3d n = 16 compliance on {}: J {dj:.2e}, dC/dE_e {dg:.2e} against the CPU; \
         {} AMG-CG iterations (twin {}); forward {:.4} s, gradient {:.4} s; twin gradient \
         bitwise: {}",
        gpu.backend,
        gpu.forward_cg.iterations,
        twin.forward_cg.iterations,
        gpu.forward_s,
        gpu.gradient_s,
        bitwise(&gpu.gradient, &twin.gradient)
    );
    assert!(dj <= 1e-10 && dg <= 1e-10, "GPU differs from the CPU path");
    assert!(rel_diff(&gpu.gradient, &twin.gradient) <= 1e-12, "GPU differs from its twin");
}
