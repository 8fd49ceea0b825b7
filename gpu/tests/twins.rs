//! The CPU twins of the device kernels against gradfem's CPU path: the thermal field's
//! assembly (`AssemblyPattern` with the model's element kernels), its direct solve and its
//! adjoint gradient. Runs everywhere, no feature needed.

use gradfem_coupling::fields::thermal::ThermalField;
use gradfem_coupling::{CoupledProblem, LinearChoice};
use gradfem_gpu::twin::{self, CpuTwin};
use gradfem_gpu::{CgParams, Device, DeviceSystem, GpuError, Pipeline, Preconditioner, run_on};
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_mesh::{CellType, Mesh};
use gradfem_thermal::{
    BcKind, BcSpec, ConductivityLaw, ObjectiveKind, ObjectiveTerm, RegionSpec, ThermalModel,
};
use rstest::rstest;

/// A distorted box: interior nodes moved by up to 15 % of a cell (5 % for quadratic cells,
/// whose mid-edge nodes lie half a cell from the vertices).
fn mesh(n: usize, cell: CellType) -> Mesh {
    let mut m = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [1.0, 0.8, 0.6],
        divisions: [n, n + 1, n.max(2) - 1],
        cell_type: cell,
    });
    let quadratic = !matches!(cell, CellType::Tet4 | CellType::Hex8);
    let h = 0.6 / (n.max(2) - 1) as f64 * if quadratic { 1.0 / 3.0 } else { 1.0 };
    for (i, x) in m.coords.iter_mut().enumerate() {
        let inside = x[0] > 1e-9
            && x[0] < 1.0 - 1e-9
            && x[1] > 1e-9
            && x[1] < 0.8 - 1e-9
            && x[2] > 1e-9
            && x[2] < 0.6 - 1e-9;
        if inside {
            let s = i as f64;
            x[0] += 0.15 * h * (1.3 * s).sin();
            x[1] += 0.15 * h * (2.1 * s).cos();
            x[2] += 0.15 * h * (0.7 * s).sin();
        }
    }
    m
}

fn regions(law: ConductivityLaw) -> Vec<RegionSpec> {
    vec![RegionSpec { group: "domain".into(), k0: 2.5, law, source: 40.0 }]
}

fn bcs() -> Vec<BcSpec> {
    vec![
        BcSpec { group: "xmin".into(), kind: BcKind::Temperature { value: 300.0 } },
        BcSpec { group: "xmax".into(), kind: BcKind::Temperature { value: 310.0 } },
    ]
}

fn objective() -> Vec<ObjectiveTerm> {
    vec![
        ObjectiveTerm { weight: 1.0, kind: ObjectiveKind::NodalSumSquares },
        ObjectiveTerm { weight: 3.0, kind: ObjectiveKind::Average { group: "domain".into() } },
    ]
}

/// A per-element conductivity varying by a factor of ~3 across the mesh.
fn conductivities(n_el: usize) -> Vec<f64> {
    (0..n_el).map(|e| 2.5 * (1.0 + 0.5 * (0.37 * e as f64).sin())).collect()
}

fn max_abs(v: &[f64]) -> f64 {
    v.iter().fold(0.0, |m, x| m.max(x.abs()))
}

/// max |a − b| / max |b|.
fn rel_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let d = a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    d / max_abs(b)
}

/// The CPU problem: the thermal field with a direct solver and the per-element conductivity
/// registered and set to `k`.
fn cpu_problem(mesh: &Mesh, k: &[f64]) -> (CoupledProblem, gradfem_solvers::params::ParamId) {
    cpu_problem_with(mesh, k, &bcs())
}

/// [`cpu_problem`] with the boundary conditions `bcs`.
fn cpu_problem_with(
    mesh: &Mesh,
    k: &[f64],
    bcs: &[BcSpec],
) -> (CoupledProblem, gradfem_solvers::params::ParamId) {
    let field = ThermalField::new(
        mesh,
        &regions(ConductivityLaw::Constant),
        bcs,
        objective(),
        LinearChoice::Cholesky,
    )
    .unwrap();
    let mut p = CoupledProblem::new(mesh.clone());
    p.add_field(Box::new(field)).unwrap();
    let id = p.register("thermal.k_elem.domain", None).unwrap();
    p.registry_mut().set_values(id, k).unwrap();
    p.apply_parameters().unwrap();
    (p, id)
}

fn field(p: &CoupledProblem) -> &ThermalField {
    p.find::<ThermalField>().unwrap()
}

/// The CPU path's K and right-hand side −R(T_free = 0) of `f`, through the colour-parallel
/// scatter of its assembly pattern.
fn cpu_assembly(f: &ThermalField) -> (gradfem_solvers::sparse::CsrMatrix, Vec<f64>) {
    let mut mat = f.pattern.new_matrix();
    let mut r0 = vec![0.0; f.model.n_unknowns()];
    let t0 = f.model.nodal_temperature(&vec![0.0; f.model.n_unknowns()]);
    let model = &f.model;
    f.pattern.assemble_into(&mut mat, &mut r0, |e, ke, fe| {
        model.element_residual_tangent(e, &t0, Some(ke), fe)
    });
    (mat, r0.iter().map(|v| -v).collect())
}

fn host_objective(
    model: &ThermalModel,
) -> impl FnOnce(&[f64]) -> Result<(f64, gradfem_gpu::Seed), GpuError> + '_ {
    move |t: &[f64]| {
        let e = gradfem_thermal::objective::evaluate(model, &objective(), t, false)
            .map_err(|e| GpuError::Input(e.to_string()))?;
        Ok((e.value, gradfem_gpu::Seed::Vector(e.d_temperature)))
    }
}

#[rstest]
#[case::tet4(CellType::Tet4, 5)]
#[case::tet10(CellType::Tet10, 3)]
#[case::hex8(CellType::Hex8, 4)]
#[case::hex20(CellType::Hex20, 2)]
#[case::hex27(CellType::Hex27, 2)]
fn gathered_assembly_equals_the_cpu_assembly(#[case] cell: CellType, #[case] n: usize) {
    let m = mesh(n, cell);
    let k = conductivities(m.cells_of_dim(3).count());
    let (p, _) = cpu_problem(&m, &k);
    let f = field(&p);
    let sys = DeviceSystem::thermal(&f.model, &f.pattern).unwrap();
    assert_eq!(sys.n_elements(), k.len());
    assert_eq!((sys.cell_type, sys.quadrature.is_some()), (cell, cell != CellType::Tet4));

    let (mat, neg_r0) = cpu_assembly(f);

    let mut pipe = Pipeline::new(CpuTwin::new(&sys)).unwrap();
    pipe.assemble(&k).unwrap();
    let values = pipe.matrix_values().unwrap();
    let load = pipe.load().unwrap();
    let d = rel_diff(&values, &mat.values);
    assert!(d <= 1e-14, "CSR values differ by {d:e} (relative to max |K|)");
    // entry by entry too, where an entry is not a cancellation to round-off (quadrature
    // cells sum their points in another order than the CPU kernel, and entries that are
    // small sums of large point contributions keep that order's round-off)
    let scale = max_abs(&mat.values);
    let entry_tol = if cell == CellType::Tet4 { 8e-14 } else { 1e-11 };
    for (i, (a, b)) in values.iter().zip(&mat.values).enumerate() {
        if b.abs() > 1e-8 * scale {
            assert!((a - b).abs() <= entry_tol * b.abs(), "entry {i}: {a} vs {b}");
        }
    }
    let d = rel_diff(&load, &neg_r0);
    assert!(d <= 1e-14, "load differs by {d:e}");
    // a nonzero load from both the source and the fixed temperatures
    assert!(max_abs(&load) > 1.0);
}

#[test]
fn spmv_and_dot_twins_match_plain_loops() {
    let m = mesh(4, CellType::Tet4);
    let k = conductivities(m.cells_of_dim(3).count());
    let (p, _) = cpu_problem(&m, &k);
    let f = field(&p);
    let sys = DeviceSystem::thermal(&f.model, &f.pattern).unwrap();
    let mut pipe = Pipeline::new(CpuTwin::new(&sys)).unwrap();
    pipe.assemble(&k).unwrap();
    let values = pipe.matrix_values().unwrap();
    let mut mat = f.pattern.new_matrix();
    mat.values.copy_from_slice(&values);
    let n = sys.n_unknowns;
    let x: Vec<f64> = (0..n).map(|i| (0.1 * i as f64).cos()).collect();
    let mut y_twin = vec![0.0; n];
    twin::csr_spmv(&sys.row_ptr, &sys.col_idx, &values, &x, &mut y_twin);
    let mut y_cpu = vec![0.0; n];
    mat.mul_vec_into(&x, &mut y_cpu);
    assert!(rel_diff(&y_twin, &y_cpu) <= 1e-15);

    // the blocked dot against a plain sum, across block boundaries (2048 entries a block)
    for len in [0usize, 1, 7, 255, 256, 2047, 2048, 2049, 5000, 70_001] {
        let a: Vec<f64> = (0..len).map(|i| 1.0 + (0.013 * i as f64).sin()).collect();
        let b: Vec<f64> = (0..len).map(|i| (0.007 * i as f64).cos()).collect();
        let plain: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let blocked = twin::dot(&a, &b);
        let scale: f64 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum::<f64>().max(1e-300);
        assert!(
            (blocked - plain).abs() <= 1e-14 * scale,
            "n = {len}: blocked {blocked} vs plain {plain}"
        );
    }
    // the partials are what the device's first pass writes: one per 2048 entries
    let a = vec![1.0; 5000];
    let mut partial = vec![0.0; gradfem_gpu::kernels::dot_blocks(5000)];
    twin::dot_partial(&a, &a, &mut partial);
    assert_eq!(partial, vec![2048.0, 2048.0, 904.0]);
    assert_eq!(twin::dot_finish(&partial), 5000.0);
}

#[rstest]
#[case::tet4(CellType::Tet4, 6)]
#[case::tet10(CellType::Tet10, 3)]
#[case::hex8(CellType::Hex8, 5)]
#[case::hex20(CellType::Hex20, 3)]
#[case::hex27(CellType::Hex27, 2)]
fn twin_forward_and_gradient_equal_the_cpu_solve_and_adjoint(
    #[case] cell: CellType,
    #[case] n: usize,
) {
    let m = mesh(n, cell);
    let k = conductivities(m.cells_of_dim(3).count());
    let (mut p, id) = cpu_problem(&m, &k);
    let (j_cpu, grad, _) = p.gradient().unwrap();
    let f = field(&p);
    let t_cpu = f.temperature().unwrap().to_vec();
    let sys = DeviceSystem::thermal(&f.model, &f.pattern).unwrap();
    let params = CgParams { rel_tol: 1e-14, max_iterations: 10_000 };
    let run =
        run_on(Device::Cpu, &sys, &k, &params, Preconditioner::Jacobi, host_objective(&f.model))
            .unwrap();
    assert_eq!(run.backend, "cpu-twin");
    assert!(run.forward_cg.iterations > 5 && run.adjoint_cg.iterations > 5, "{cell:?}");

    let dt = rel_diff(&run.solution, &t_cpu);
    assert!(dt <= 1e-10, "temperature differs by {dt:e}");
    let dj = (run.objective - j_cpu).abs() / j_cpu.abs();
    assert!(dj <= 1e-10, "J: {} vs {j_cpu} ({dj:e})", run.objective);

    // dJ/dk_e of the CPU adjoint, in model element order
    let g_cpu = grad.get(id);
    let region = &f.model.regions[0].elements;
    let mut g_ref = vec![0.0; k.len()];
    for (i, e) in region.clone().enumerate() {
        g_ref[e] = g_cpu[i];
    }
    let dg = rel_diff(&run.gradient, &g_ref);
    eprintln!(
        "twin vs CPU: T {dt:.2e}, J {dj:.2e}, dJ/dk_e {dg:.2e} ({} + {} CG iterations)",
        run.forward_cg.iterations, run.adjoint_cg.iterations
    );
    assert!(dg <= 1e-10, "gradient differs by {dg:e}");
    assert!(max_abs(&g_ref) > 0.0);
}

#[test]
fn the_pipeline_is_bitwise_repeatable() {
    let m = mesh(4, CellType::Tet4);
    let k = conductivities(m.cells_of_dim(3).count());
    let (p, _) = cpu_problem(&m, &k);
    let f = field(&p);
    let sys = DeviceSystem::thermal(&f.model, &f.pattern).unwrap();
    let params = CgParams { rel_tol: 1e-12, max_iterations: 10_000 };
    let a =
        run_on(Device::Cpu, &sys, &k, &params, Preconditioner::Jacobi, host_objective(&f.model))
            .unwrap();
    let b =
        run_on(Device::Cpu, &sys, &k, &params, Preconditioner::Jacobi, host_objective(&f.model))
            .unwrap();
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a.solution), bits(&b.solution));
    assert_eq!(bits(&a.gradient), bits(&b.gradient));
}

#[test]
fn cg_reports_non_convergence_and_bad_input() {
    let m = mesh(4, CellType::Tet4);
    let k = conductivities(m.cells_of_dim(3).count());
    let (p, _) = cpu_problem(&m, &k);
    let f = field(&p);
    let sys = DeviceSystem::thermal(&f.model, &f.pattern).unwrap();
    let mut pipe = Pipeline::new(CpuTwin::new(&sys)).unwrap();
    let few = CgParams { rel_tol: 1e-14, max_iterations: 2 };
    assert!(matches!(pipe.forward(&k, &few), Err(GpuError::NotConverged { iterations: 2, .. })));
    let ok = CgParams::default();
    assert!(matches!(pipe.gradient(&vec![0.0; sys.n_nodes], &ok), Err(GpuError::Input(_))));
    assert!(matches!(pipe.forward(&k[1..], &ok), Err(GpuError::Input(_))));
    let mut bad = k.clone();
    bad[3] = -1.0;
    let e = pipe.forward(&bad, &ok).unwrap_err();
    assert!(e.to_string().contains("element 3"), "{e}");
    bad[3] = f64::NAN;
    assert!(matches!(pipe.forward(&bad, &ok), Err(GpuError::Input(_))));
    // a zero adjoint load gives a zero gradient without iterating
    pipe.forward(&k, &ok).unwrap();
    let (g, info) = pipe.gradient(&vec![0.0; sys.n_nodes], &ok).unwrap();
    assert_eq!(info.iterations, 0);
    assert!(g.iter().all(|&v| v == 0.0));
    assert!(matches!(pipe.gradient(&[1.0], &ok), Err(GpuError::Input(_))));
}

#[test]
fn what_has_no_device_kernel_is_named() {
    let unsupported = |m: &Mesh, regions: &[RegionSpec], bcs: &[BcSpec]| -> String {
        let model = ThermalModel::new(m, regions, bcs).unwrap();
        let pattern = gradfem_solvers::assembly::AssemblyPattern::new(
            model.n_unknowns(),
            &model.element_offsets(),
            &model.element_dofs(),
        );
        match DeviceSystem::thermal(&model, &pattern) {
            Err(GpuError::Unsupported(why)) => why,
            other => panic!("expected Unsupported, got {:?}", other.map(|_| ())),
        }
    };
    let plain = |cell| {
        box_mesh(&BoxSpec {
            origin: [0.0; 3],
            lengths: [1.0, 0.8, 0.6],
            divisions: [2, 2, 2],
            cell_type: cell,
        })
    };
    // Quadratic and hexahedral cells have their quadrature kernels.
    for cell in [CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Hex27] {
        let m = plain(cell);
        let model = ThermalModel::new(&m, &regions(ConductivityLaw::Constant), &bcs()).unwrap();
        let pattern = gradfem_solvers::assembly::AssemblyPattern::new(
            model.n_unknowns(),
            &model.element_offsets(),
            &model.element_dofs(),
        );
        let sys = DeviceSystem::thermal(&model, &pattern).unwrap();
        let q = sys.quadrature.as_ref().expect("a quadrature");
        assert_eq!(q.grad.len(), cell.n_nodes() * q.n_points);
    }
    let tet = mesh(3, CellType::Tet4);
    let law = ConductivityLaw::Polynomial { t_ref: 300.0, coefficients: vec![1e-3] };
    let why = unsupported(&tet, &regions(law), &bcs());
    assert!(why.contains("temperature-dependent"), "{why}");

    // a pattern of another model is refused
    let model = ThermalModel::new(&tet, &regions(ConductivityLaw::Constant), &bcs()).unwrap();
    let other =
        ThermalModel::new(&mesh(2, CellType::Tet4), &regions(ConductivityLaw::Constant), &bcs())
            .unwrap();
    let pattern = gradfem_solvers::assembly::AssemblyPattern::new(
        other.n_unknowns(),
        &other.element_offsets(),
        &other.element_dofs(),
    );
    assert!(matches!(DeviceSystem::thermal(&model, &pattern), Err(GpuError::Input(_))));
}

#[test]
fn cuda_selection_without_the_feature_or_a_device_is_a_clear_error() {
    let m = mesh(2, CellType::Tet4);
    let model = ThermalModel::new(&m, &regions(ConductivityLaw::Constant), &bcs()).unwrap();
    let pattern = gradfem_solvers::assembly::AssemblyPattern::new(
        model.n_unknowns(),
        &model.element_offsets(),
        &model.element_dofs(),
    );
    let sys = DeviceSystem::thermal(&model, &pattern).unwrap();
    let k = vec![1.0; sys.n_elements()];
    let r = run_on(
        Device::Cuda,
        &sys,
        &k,
        &CgParams::default(),
        Preconditioner::Jacobi,
        host_objective(&model),
    );
    if gradfem_gpu::CUDA_BUILT {
        // with the feature: either a device ran it, or the error names what is missing
        if let Err(e) = r {
            assert!(
                matches!(e, GpuError::NoDriver | GpuError::NoDevice(_) | GpuError::NoNvrtc),
                "{e}"
            );
        }
    } else {
        let e = r.unwrap_err();
        assert_eq!(e, GpuError::NotBuilt);
        assert!(e.to_string().contains("`cuda` feature"));
        assert_eq!(gradfem_gpu::cuda_ready(), Err(GpuError::NotBuilt));
    }
    assert_eq!("cuda".parse::<Device>(), Ok(Device::Cuda));
    assert_eq!("cpu".parse::<Device>(), Ok(Device::Cpu));
    assert!("gpu".parse::<Device>().unwrap_err().to_string().contains("\"cuda\""));
}

/// Fixed temperatures with convection and an incoming heat flux on other faces.
fn bcs_with_flux() -> Vec<BcSpec> {
    let mut b = bcs();
    b.push(BcSpec { group: "zmax".into(), kind: BcKind::Convection { h: 12.0, t_inf: 290.0 } });
    b.push(BcSpec { group: "ymin".into(), kind: BcKind::HeatFlux { q_in: 35.0 } });
    b
}

#[rstest]
#[case::tet4(CellType::Tet4, 4)]
#[case::hex8(CellType::Hex8, 3)]
#[case::hex20(CellType::Hex20, 2)]
fn convection_and_heat_flux_run_on_the_device_path(#[case] cell: CellType, #[case] n: usize) {
    let m = mesh(n, cell);
    let k = conductivities(m.cells_of_dim(3).count());
    let (mut p, id) = cpu_problem_with(&m, &k, &bcs_with_flux());
    let (j_cpu, grad, _) = p.gradient().unwrap();
    let f = field(&p);
    let t_cpu = f.temperature().unwrap().to_vec();
    let sys = DeviceSystem::thermal(&f.model, &f.pattern).unwrap();
    assert!(sys.base_values.is_some(), "convection gives a k-free matrix part");

    // the assembled matrix and right-hand side against the CPU assembly
    let (mat, b_cpu) = cpu_assembly(f);
    let mut pipe = Pipeline::new(CpuTwin::new(&sys)).unwrap();
    pipe.assemble(&k).unwrap();
    let dk = rel_diff(&pipe.matrix_values().unwrap(), &mat.values);
    let db = rel_diff(&pipe.load().unwrap(), &b_cpu);
    assert!(dk <= 1e-13 && db <= 1e-12, "{cell:?}: K {dk:e}, b {db:e}");

    // the forward solve and the gradient
    let params = CgParams { rel_tol: 1e-13, max_iterations: 20_000 };
    for pre in [Preconditioner::Jacobi, Preconditioner::Amg] {
        let run = run_on(Device::Cpu, &sys, &k, &params, pre, host_objective(&f.model)).unwrap();
        let mut g_ref = vec![0.0; k.len()];
        for (i, e) in f.model.regions[0].elements.clone().enumerate() {
            g_ref[e] = grad.get(id)[i];
        }
        let dt = rel_diff(&run.solution, &t_cpu);
        let dj = (run.objective - j_cpu).abs() / j_cpu.abs();
        let dg = rel_diff(&run.gradient, &g_ref);
        assert!(dt <= 1e-10 && dj <= 1e-10 && dg <= 1e-8, "{cell:?} {pre:?}: {dt:e} {dj:e} {dg:e}");
    }
}
