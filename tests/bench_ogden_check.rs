//! The case of `examples/bench_ogden.rs` on a small mesh: the adjoint gradient of
//! L = Σ_i u_i² at the last load step with respect to the Ogden μ, α and κ against central
//! finite differences, and the squared-displacement term's checks.

use gradfem::finite_strain::{
    FiniteLinearSolver, FiniteStrainProblem, FiniteStrainSolveError, LoadPathObjective,
    LoadStepParams, PathTerm,
};
use gradfem_mechanical::finite::{
    FiniteRegionSpec, FiniteStrainModel, FiniteVjpRequest, HyperelasticLaw,
};
use gradfem_mechanical::hyperelastic::{Ogden, StrainEnergy};
use gradfem_mechanical::linear::{BcKind, BcSpec};
use gradfem_mesh::CellType;
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_solvers::cg::CgParams;
use gradfem_solvers::checkpoint::Checkpointing;
use gradfem_solvers::newton::NewtonParams;

const LOADS: [f64; 3] = [1.0 / 3.0, 2.0 / 3.0, 1.0];

/// The unit cube of n³ Kuhn-split cubes, Ogden (μ, α) = (1, 3), κ = 10 with U = ½(J − 1)²,
/// clamped at x = 0, dead traction (0.5, 0, 0) on x = 1.
fn cube(n: usize) -> FiniteStrainProblem {
    cube_of(n, CellType::Tet4)
}

fn cube_of(n: usize, cell: CellType) -> FiniteStrainProblem {
    let mesh = box_mesh(&BoxSpec::unit_cube(n, cell));
    let region = FiniteRegionSpec {
        group: "domain".into(),
        law: HyperelasticLaw::Ogden(Ogden::new(&[(1.0, 3.0)], 10.0)),
        alpha: 0.0,
        t_ref: 0.0,
        body_force: [0.0; 3],
    };
    let bcs = [
        BcSpec { group: "xmin".into(), kind: BcKind::Fixed },
        BcSpec { group: "xmax".into(), kind: BcKind::Traction { traction: [0.5, 0.0, 0.0] } },
    ];
    let model = FiniteStrainModel::new(&mesh, &[region], &bcs).unwrap();
    let params = LoadStepParams {
        newton: NewtonParams { rel_tol: 1e-13, abs_tol: 1e-14, ..NewtonParams::default() },
        ..LoadStepParams::default()
    };
    FiniteStrainProblem::new(model, params)
}

fn last_step_norm() -> LoadPathObjective {
    LoadPathObjective {
        terms: vec![PathTerm::SquaredDisplacement { weights: vec![0.0, 0.0, 1.0] }],
    }
}

#[test]
fn ogden_cube_gradient_matches_central_differences() {
    let mut problem = cube(2);
    let objective = last_step_norm();
    let g = problem
        .gradient(&LOADS, &objective, Checkpointing::StoreAll, FiniteVjpRequest::MATERIAL)
        .unwrap();
    // L is the squared norm of the last state, and the same as the evaluated objective.
    let path = problem.solve(&LOADS).unwrap();
    let norm: f64 = path.states[2].u.iter().map(|x| x * x).sum();
    assert!((g.value - norm).abs() <= 1e-12 * norm, "{} vs {norm}", g.value);
    assert_eq!(g.quantities[0][2], norm);
    assert!(norm > 1e-2, "the traction deforms the cube: L = {norm}");

    let p0 = problem.model.region_parameters(0);
    assert_eq!(problem.model.parameter_names(0), ["mu1", "alpha1", "kappa"]);
    for k in 0..p0.len() {
        let h = 1e-5 * p0[k].abs();
        let mut at = |v: f64| {
            let mut p = p0.clone();
            p[k] = v;
            problem.model.set_region_parameters(0, &p).unwrap();
            problem.objective(&LOADS, &objective).unwrap()
        };
        let fd = (at(p0[k] + h) - at(p0[k] - h)) / (2.0 * h);
        problem.model.set_region_parameters(0, &p0).unwrap();
        let adjoint = g.material[0][k];
        assert!(
            (adjoint - fd).abs() <= 1e-6 * fd.abs().max(1e-3),
            "dL/d{}: adjoint {adjoint} vs central difference {fd}",
            problem.model.parameter_names(0)[k]
        );
    }
    // The law's parameters are untouched.
    let HyperelasticLaw::Ogden(o) = &problem.model.regions[0].law else { unreachable!() };
    assert_eq!(o.parameters(), p0);
}

#[test]
fn squared_displacement_weights_every_step_it_names() {
    let problem = cube(1);
    let path = problem.solve(&LOADS).unwrap();
    let norms: Vec<f64> = path.states.iter().map(|s| s.u.iter().map(|x| x * x).sum()).collect();
    let objective = LoadPathObjective {
        terms: vec![PathTerm::SquaredDisplacement { weights: vec![0.5, 0.0, 2.0] }],
    };
    let (value, quantities) = problem.evaluate(&path, &objective).unwrap();
    assert!((value - (0.5 * norms[0] + 2.0 * norms[2])).abs() <= 1e-14 * value);
    assert_eq!(quantities[0], norms);
    // The gradient of a weighted sum is the weighted sum of the per-step gradients.
    let single = |k: usize| {
        let mut weights = vec![0.0; 3];
        weights[k] = 1.0;
        let o = LoadPathObjective { terms: vec![PathTerm::SquaredDisplacement { weights }] };
        problem
            .gradient(&LOADS, &o, Checkpointing::StoreAll, FiniteVjpRequest::MATERIAL)
            .unwrap()
            .material[0]
            .clone()
    };
    let (g0, g2) = (single(0), single(2));
    let g = problem
        .gradient(&LOADS, &objective, Checkpointing::StoreAll, FiniteVjpRequest::MATERIAL)
        .unwrap();
    for k in 0..3 {
        let expected = 0.5 * g0[k] + 2.0 * g2[k];
        assert!((g.material[0][k] - expected).abs() <= 1e-10 * expected.abs(), "parameter {k}");
    }
    // One weight per step.
    let short =
        LoadPathObjective { terms: vec![PathTerm::SquaredDisplacement { weights: vec![1.0] }] };
    assert!(matches!(
        problem.gradient(&LOADS, &short, Checkpointing::StoreAll, FiniteVjpRequest::MATERIAL),
        Err(FiniteStrainSolveError::InvalidValue { .. })
    ));
}

/// n = 3 is solved on the coarsest level alone; n = 8 (1 944 unknowns) runs a multilevel
/// hierarchy with the rigid-body modes, whose later Newton tangents in an increment reuse the
/// hierarchy of the first (CG with a slightly stale V-cycle); Tet10 at n = 5 (3 630 unknowns)
/// starts from the vertices (p-multigrid), then aggregates.
#[rstest::rstest]
#[case::coarse_only(3, CellType::Tet4)]
#[case::multilevel(8, CellType::Tet4)]
#[case::quadratic(5, CellType::Tet10)]
fn amg_cg_gives_the_direct_solution_and_gradient(#[case] n: usize, #[case] cell: CellType) {
    let cube = |n| cube_of(n, cell);
    let objective = last_step_norm();
    let direct = {
        let mut p = cube(n);
        p.params.linear_solver = FiniteLinearSolver::Direct;
        p.gradient(&LOADS, &objective, Checkpointing::StoreAll, FiniteVjpRequest::MATERIAL).unwrap()
    };
    let mut p = cube(n);
    p.params.linear_solver =
        FiniteLinearSolver::AmgCg { cg: CgParams { rel_tol: 1e-13, ..CgParams::default() } };
    let amg = p
        .gradient(&LOADS, &objective, Checkpointing::StoreAll, FiniteVjpRequest::MATERIAL)
        .unwrap();
    assert!((amg.value - direct.value).abs() <= 1e-9 * direct.value);
    for (a, d) in amg.material[0].iter().zip(&direct.material[0]) {
        assert!((a - d).abs() <= 1e-7 * d.abs(), "AMG-CG {a} vs Cholesky {d}");
    }
}
