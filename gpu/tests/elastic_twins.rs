//! The CPU twins of the elastic device kernels against gradfem's CPU path: the linear elastic
//! model's assembly (its element kernels through `AssemblyPattern`), its direct solve and its
//! adjoint gradient with respect to a per-element Young's modulus. Runs everywhere.

use gradfem_coupling::fields::mechanical::{ImportedTemperature, MechanicalField};
use gradfem_coupling::{CoupledProblem, LinearChoice};
use gradfem_gpu::twin::CpuTwin;
use gradfem_gpu::{
    CgParams, Device, DeviceSystem, GpuError, Pipeline, Preconditioner, Seed, run_on,
};
use gradfem_mechanical::{
    BcKind, BcSpec, LinearElasticModel, ObjectiveKind, ObjectiveTerm, RegionSpec,
};
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_mesh::{CellType, Mesh};
use gradfem_solvers::assembly::AssemblyPattern;
use rstest::rstest;

/// A distorted box (interior nodes moved by up to 15 % of a cell, 5 % for quadratic cells).
fn mesh(n: usize, cell: CellType) -> Mesh {
    let mut m = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [1.0, 0.5, 0.4],
        divisions: [n + 1, n, n.max(2) - 1],
        cell_type: cell,
    });
    let quadratic = !matches!(cell, CellType::Tet4 | CellType::Hex8);
    let h = 0.4 / (n.max(2) - 1) as f64 * if quadratic { 1.0 / 3.0 } else { 1.0 };
    for (i, x) in m.coords.iter_mut().enumerate() {
        let inside = (0..3).all(|c| x[c] > 1e-9 && x[c] < [1.0, 0.5, 0.4][c] - 1e-9);
        if inside {
            let s = i as f64;
            x[0] += 0.15 * h * (1.3 * s).sin();
            x[1] += 0.15 * h * (2.1 * s).cos();
            x[2] += 0.15 * h * (0.7 * s).sin();
        }
    }
    m
}

fn regions() -> Vec<RegionSpec> {
    vec![RegionSpec {
        group: "domain".into(),
        young: 2.0e3,
        poisson: 0.3,
        alpha: 0.0,
        t_ref: 0.0,
        body_force: [0.0, -3.0, 1.0],
    }]
}

/// Clamped on x = 0; a traction and a pressure; with `prescribed`, a nonzero displacement of
/// x = 1 along x (then the adjoint is not the forward solution).
fn bcs(prescribed: bool) -> Vec<BcSpec> {
    let mut b = vec![
        BcSpec { group: "xmin".into(), kind: BcKind::Fixed },
        BcSpec { group: "ymax".into(), kind: BcKind::Traction { traction: [0.5, 0.0, -2.0] } },
        BcSpec { group: "zmax".into(), kind: BcKind::Pressure { pressure: 1.5 } },
    ];
    if prescribed {
        b.push(BcSpec {
            group: "xmax".into(),
            kind: BcKind::Displacement { value: [Some(1e-3), None, None] },
        });
    }
    b
}

/// A per-element E varying by a factor of ~3 and ν between 0.2 and 0.4.
fn materials(model: &mut LinearElasticModel) -> Vec<f64> {
    let n = model.n_volume_elements();
    for e in 0..n {
        model.young_elem[e] = 2.0e3 * (1.0 + 0.5 * (0.37 * e as f64).sin());
        model.poisson_elem[e] = 0.3 + 0.1 * (0.91 * e as f64).cos();
    }
    model.young_elem[..n].to_vec()
}

fn max_abs(v: &[f64]) -> f64 {
    v.iter().fold(0.0, |m, x| m.max(x.abs()))
}

/// max |a − b| / max |b|.
fn rel_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / max_abs(b)
}

#[rstest]
#[case::tet4(CellType::Tet4, 4)]
#[case::tet10(CellType::Tet10, 2)]
#[case::hex8(CellType::Hex8, 3)]
#[case::hex20(CellType::Hex20, 2)]
#[case::hex27(CellType::Hex27, 2)]
fn gathered_elastic_assembly_equals_the_cpu_assembly(#[case] cell: CellType, #[case] n: usize) {
    let m = mesh(n, cell);
    let mut model = LinearElasticModel::new(&m, &regions(), &bcs(true)).unwrap();
    let young = materials(&mut model);
    let pattern =
        AssemblyPattern::new(model.n_unknowns(), model.element_offsets(), model.element_dofs());
    let sys = DeviceSystem::elastic(&model, &pattern).unwrap();
    assert_eq!((sys.components, sys.element_size()), (3, 3 * cell.n_nodes()));
    assert!(model.n_elements() > sys.n_elements(), "the loads' facet elements are in the model");

    // the CPU path: K and R(u_free = 0) through the colour-parallel scatter
    let mut mat = pattern.new_matrix();
    let mut r0 = vec![0.0; model.n_unknowns()];
    let u0 = model.nodal_displacement(&vec![0.0; model.n_unknowns()]);
    pattern.assemble_into(&mut mat, &mut r0, |e, ke, fe| {
        model.element_residual_tangent(e, &u0, Some(ke), fe)
    });
    let b_cpu: Vec<f64> = r0.iter().map(|v| -v).collect();

    let mut pipe = Pipeline::new(CpuTwin::new(&sys)).unwrap();
    pipe.assemble(&young).unwrap();
    let values = pipe.matrix_values().unwrap();
    let b = pipe.load().unwrap();
    let dk = rel_diff(&values, &mat.values);
    let db = rel_diff(&b, &b_cpu);
    assert!(dk <= 1e-13, "{cell:?}: CSR values differ by {dk:e} (relative to max |K|)");
    assert!(db <= 1e-12, "{cell:?}: right-hand sides differ by {db:e}");
    assert!(max_abs(&b) > 0.0 && max_abs(&values) > 0.0);
}

/// The CPU reference: the mechanical field with a direct solver, E_e registered.
fn cpu_problem(
    m: &Mesh,
    prescribed: bool,
    objective: Vec<ObjectiveTerm>,
) -> (CoupledProblem, gradfem_solvers::params::ParamId, Vec<f64>) {
    cpu_problem_with(m, prescribed, false, objective)
}

/// [`cpu_problem`], with `heated` an imported temperature field varying across the body and
/// α = 2·10⁻⁵ (a thermal strain).
fn cpu_problem_with(
    m: &Mesh,
    prescribed: bool,
    heated: bool,
    objective: Vec<ObjectiveTerm>,
) -> (CoupledProblem, gradfem_solvers::params::ParamId, Vec<f64>) {
    let mut r = regions();
    if heated {
        r[0].alpha = 2e-5;
        r[0].t_ref = 293.0;
    }
    let mut field = MechanicalField::new(m, &r, &bcs(prescribed), objective).unwrap();
    if heated {
        let t = m.coords.iter().map(|x| 293.0 + 40.0 * x[0] + 25.0 * x[1] * x[2]).collect();
        field.set_imported_temperature(ImportedTemperature::new(t, 1.0, 0.0, "test".into()));
    }
    field.set_linear(LinearChoice::Cholesky, 1e-12);
    let young = materials(&mut field.model);
    let poisson = field.model.poisson_elem.clone();
    let mut p = CoupledProblem::new(m.clone());
    p.add_field(Box::new(field)).unwrap();
    let id = p.register("mechanical.young_elem.domain", None).unwrap();
    p.registry_mut().set_values(id, &young).unwrap();
    p.apply_parameters().unwrap();
    p.find_mut::<MechanicalField>().unwrap().model.poisson_elem = poisson;
    (p, id, young)
}

fn compliance() -> Vec<ObjectiveTerm> {
    vec![ObjectiveTerm { weight: 2.0, kind: ObjectiveKind::Compliance }]
}

fn tip_objective() -> Vec<ObjectiveTerm> {
    vec![
        ObjectiveTerm { weight: 1.0, kind: ObjectiveKind::Compliance },
        ObjectiveTerm {
            weight: 1e3,
            kind: ObjectiveKind::AverageDisplacement {
                group: "ymax".into(),
                direction: [0.0, 0.3, -1.0],
            },
        },
    ]
}

#[rstest]
#[case::tet4_compliance(CellType::Tet4, 4, false, false, Preconditioner::Jacobi)]
#[case::tet4_prescribed(CellType::Tet4, 4, true, false, Preconditioner::Jacobi)]
#[case::tet4_amg(CellType::Tet4, 6, true, false, Preconditioner::Amg)]
#[case::tet4_heated(CellType::Tet4, 4, false, true, Preconditioner::Jacobi)]
#[case::tet10(CellType::Tet10, 2, true, false, Preconditioner::Jacobi)]
#[case::hex8(CellType::Hex8, 3, false, false, Preconditioner::Jacobi)]
#[case::hex8_amg(CellType::Hex8, 6, false, false, Preconditioner::Amg)]
#[case::hex8_heated(CellType::Hex8, 3, true, true, Preconditioner::Amg)]
#[case::hex20(CellType::Hex20, 2, true, false, Preconditioner::Amg)]
#[case::hex20_heated(CellType::Hex20, 2, false, true, Preconditioner::Jacobi)]
fn elastic_pipeline_equals_the_cpu_solve_and_adjoint(
    #[case] cell: CellType,
    #[case] n: usize,
    #[case] prescribed: bool,
    #[case] heated: bool,
    #[case] pre: Preconditioner,
) {
    let m = mesh(n, cell);
    // the compliance's adjoint is its forward solution only without prescribed values and
    // thermal strain
    let self_adjoint = !prescribed && !heated;
    let terms = if self_adjoint { compliance() } else { tip_objective() };
    let (mut p, id, young) = cpu_problem_with(&m, prescribed, heated, terms.clone());
    let (j_cpu, grad, _) = p.gradient().unwrap();
    let f = p.find::<MechanicalField>().unwrap();
    let u_cpu = f.displacement().unwrap().to_vec();
    let model = &f.model;
    let sys = DeviceSystem::elastic(model, f.pattern()).unwrap();
    let params = CgParams { rel_tol: 1e-13, max_iterations: 50_000 };
    let objective = |u: &[f64]| {
        let e = gradfem_mechanical::linear::objective::evaluate(model, &terms, u, false)
            .map_err(|e| GpuError::Input(e.to_string()))?;
        let seed = if self_adjoint {
            Seed::Forward { scale: 2.0 }
        } else {
            Seed::Vector(e.d_displacement)
        };
        Ok((e.value, seed))
    };
    let run = run_on(Device::Cpu, &sys, &young, &params, pre, objective).unwrap();
    assert_eq!(run.backend, "cpu-twin");
    assert_eq!(run.adjoint_cg.iterations == 0, self_adjoint, "an adjoint solve iff not compliance");
    assert_eq!(
        matches!(sys.physics, gradfem_gpu::Physics::Elastic { thermal: Some(_), .. }),
        heated
    );
    let du = rel_diff(&run.solution, &u_cpu);
    let dj = (run.objective - j_cpu).abs() / j_cpu.abs();
    let dg = rel_diff(&run.gradient, grad.get(id));
    assert!(du <= 1e-9, "{cell:?}: displacement differs by {du:e}");
    assert!(dj <= 1e-9, "{cell:?}: J differs by {dj:e}");
    assert!(dg <= 1e-8, "{cell:?}: dJ/dE_e differs by {dg:e}");
    if self_adjoint {
        // the compliance is homogeneous of degree −1 in E: Σ E_e dC/dE_e = −C
        let s: f64 = run.gradient.iter().zip(&young).map(|(g, e)| g * e).sum();
        assert!((s + run.objective).abs() <= 1e-9 * run.objective, "{s} vs {}", run.objective);
    }
}

#[test]
fn a_self_adjoint_seed_under_a_prescribed_displacement_is_refused() {
    let m = mesh(3, CellType::Hex8);
    let (p, _, young) = cpu_problem(&m, true, compliance());
    let f = p.find::<MechanicalField>().unwrap();
    let sys = DeviceSystem::elastic(&f.model, f.pattern()).unwrap();
    let r = run_on(Device::Cpu, &sys, &young, &CgParams::default(), Preconditioner::Jacobi, |_| {
        Ok((0.0, Seed::Forward { scale: 1.0 }))
    });
    match r {
        Err(GpuError::Input(why)) => assert!(why.contains("nonzero prescribed"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn bad_moduli_and_a_heated_compliance_shortcut_are_refused_with_the_reason() {
    let m = mesh(2, CellType::Hex8);
    let model = LinearElasticModel::new(&m, &regions(), &bcs(false)).unwrap();
    let pattern =
        AssemblyPattern::new(model.n_unknowns(), model.element_offsets(), model.element_dofs());
    let sys = DeviceSystem::elastic(&model, &pattern).unwrap();
    let mut young = vec![1.0; sys.n_elements()];
    young[3] = -2.0;
    let mut pipe = Pipeline::new(CpuTwin::new(&sys)).unwrap();
    match pipe.forward(&young, &CgParams::default()) {
        Err(GpuError::Input(why)) => {
            assert!(why.contains("Young's modulus of element 3 is -2"), "{why}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // under a thermal strain the compliance's adjoint is not the forward solution
    let (mut p, _, young) = cpu_problem_with(&m, false, true, compliance());
    p.solve().unwrap();
    let f = p.find::<MechanicalField>().unwrap();
    let sys = DeviceSystem::elastic(&f.model, f.pattern()).unwrap();
    let params = CgParams::default();
    let pre = Preconditioner::Jacobi;
    match gradfem_gpu::run_compliance_on(Device::Cpu, &sys, &young, &params, pre, 1.0) {
        Err(GpuError::Input(why)) => assert!(why.contains("thermal strain"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn amg_bounds_the_cg_iterations_as_the_mesh_is_refined() {
    // Jacobi-PCG's iterations grow like the mesh size's inverse; the AMG V-cycle (rigid-body
    // modes as near-nullspace) keeps them nearly flat.
    let mut counts = Vec::new();
    for n in [6, 9, 12] {
        let m = mesh(n, CellType::Hex8);
        let (p, _, young) = cpu_problem(&m, false, compliance());
        let f = p.find::<MechanicalField>().unwrap();
        let sys = DeviceSystem::elastic(&f.model, f.pattern()).unwrap();
        let params = CgParams { rel_tol: 1e-10, max_iterations: 20_000 };
        let mut it = [0; 2];
        for (k, pre) in [Preconditioner::Jacobi, Preconditioner::Amg].into_iter().enumerate() {
            let mut pipe = Pipeline::new(CpuTwin::new(&sys)).unwrap();
            pipe.set_preconditioner(pre);
            it[k] = pipe.forward(&young, &params).unwrap().1.iterations;
            if pre == Preconditioner::Amg {
                assert!(pipe.amg_levels() >= 2, "n = {n}: {} levels", pipe.amg_levels());
            }
        }
        counts.push((sys.n_unknowns, it));
    }
    let (first, last) = (counts[0].1, counts[2].1);
    assert!(last[1] <= first[1] + 5 && last[1] <= 40, "AMG iterations grow: {counts:?}");
    assert!(last[0] > 2 * last[1], "AMG does not beat Jacobi: {counts:?}");
}

#[test]
fn quadratic_cells_start_the_device_amg_from_the_vertices() {
    // p-multigrid in the device pipeline: the Tet10 system's hierarchy starts from the vertex
    // displacement (the mechanical field's coarse space), converges to the CPU's solution in
    // fewer iterations than aggregation from every node, and nearly keeps the count as the
    // mesh is refined (measured on these distorted meshes with a varying E, n = 4, 6, 8:
    // 30, 35, 38 against 48, 52, 56).
    let mut counts = Vec::new();
    for n in [4, 6, 8] {
        let m = mesh(n, CellType::Tet10);
        let (p, _, young) = cpu_problem(&m, false, compliance());
        let f = p.find::<MechanicalField>().unwrap();
        let coarse = f.vertex_coarse_space();
        assert!(coarse.is_some(), "Tet10 has a vertex level");
        let params = CgParams { rel_tol: 1e-10, max_iterations: 20_000 };
        let mut it = [0; 2];
        let mut solutions = Vec::new();
        for (k, start) in [None, coarse].into_iter().enumerate() {
            let sys =
                DeviceSystem::elastic(&f.model, f.pattern()).unwrap().with_coarse_space(start);
            let mut pipe = Pipeline::new(CpuTwin::new(&sys)).unwrap();
            pipe.set_preconditioner(Preconditioner::Amg);
            let (u, info) = pipe.forward(&young, &params).unwrap();
            it[k] = info.iterations;
            solutions.push(u);
        }
        let du = rel_diff(&solutions[1], &solutions[0]);
        assert!(du <= 1e-8, "n = {n}: the two hierarchies' solutions differ by {du:e}");
        counts.push(it);
    }
    for it in &counts {
        assert!(4 * it[1] <= 3 * it[0], "from the vertices vs every node: {counts:?}");
    }
    assert!(counts[2][1] <= counts[0][1] + 10, "iterations grow under refinement: {counts:?}");
}

#[test]
fn the_compliance_runs_wholly_on_the_device() {
    let m = mesh(4, CellType::Hex8);
    let (mut p, id, young) = cpu_problem(&m, false, compliance());
    let (j_cpu, grad, _) = p.gradient().unwrap();
    let f = p.find::<MechanicalField>().unwrap();
    let sys = DeviceSystem::elastic(&f.model, f.pattern()).unwrap();
    let params = CgParams { rel_tol: 1e-13, max_iterations: 50_000 };
    for pre in [Preconditioner::Jacobi, Preconditioner::Amg] {
        let run =
            gradfem_gpu::run_compliance_on(Device::Cpu, &sys, &young, &params, pre, 2.0).unwrap();
        assert!(run.solution.is_empty(), "the solution stays on the device");
        assert!((run.objective - j_cpu).abs() <= 1e-10 * j_cpu, "{} vs {j_cpu}", run.objective);
        let dg = rel_diff(&run.gradient, grad.get(id));
        assert!(dg <= 1e-8, "{pre:?}: dC/dE_e differs by {dg:e}");
        assert_eq!(run.adjoint_cg.iterations, 0);
    }
    let (p, _, young) = cpu_problem(&m, true, compliance());
    let f = p.find::<MechanicalField>().unwrap();
    let sys = DeviceSystem::elastic(&f.model, f.pattern()).unwrap();
    let r = gradfem_gpu::run_compliance_on(
        Device::Cpu,
        &sys,
        &young,
        &params,
        Preconditioner::Jacobi,
        1.0,
    );
    match r {
        Err(GpuError::Input(why)) => assert!(why.contains("nonzero prescribed"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
