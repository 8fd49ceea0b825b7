//! The self-adjoint compliance: C = fᵀu has the adjoint λ = u when the forward right-hand side is
//! the load itself, so the mechanical field's SPD solver answers its adjoint from the forward
//! solution without a solve. Checked against the general path (an LU solver, which has no
//! such shortcut and solves the transposed system) to 1e-10, on the peers' elastic3d problem
//! with per-element E, the traction and ν registered; where thermal strain or a prescribed
//! displacement also loads the body the right-hand sides differ and the adjoint is solved.

use gradfem::mechanical::{ImportedTemperature, MechanicalField};
use gradfem::run::LinearChoice;
use gradfem_coupling::CoupledProblem;
use gradfem_mechanical::linear::objective::{ObjectiveKind, ObjectiveTerm};
use gradfem_mechanical::{BcKind, BcSpec, RegionSpec};
use gradfem_mesh::CellType;
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use rstest::rstest;

/// (J, the gradient flattened, adjoint solves answered from the forward solution).
fn compliance_gradient(
    n: usize,
    choice: LinearChoice,
    alpha: f64,
    displacement: Option<f64>,
) -> (f64, Vec<f64>, usize) {
    let mesh = box_mesh(&BoxSpec::unit_cube(n, CellType::Tet4));
    let region = RegionSpec {
        group: "domain".into(),
        young: 1.0,
        poisson: 0.3,
        alpha,
        t_ref: 0.0,
        body_force: [0.0, 0.1, 0.0],
    };
    let mut bcs = vec![
        BcSpec { group: "xmin".into(), kind: BcKind::Fixed },
        BcSpec { group: "xmax".into(), kind: BcKind::Traction { traction: [0.0, 0.0, -1.0] } },
    ];
    if let Some(d) = displacement {
        bcs.push(BcSpec {
            group: "xmax".into(),
            kind: BcKind::Displacement { value: [Some(d), None, None] },
        });
    }
    let objective = vec![ObjectiveTerm { weight: 0.7, kind: ObjectiveKind::Compliance }];
    let mut field = MechanicalField::new(&mesh, &[region], &bcs, objective).unwrap();
    field.set_linear(choice, 1e-12);
    if alpha != 0.0 {
        let uniform = vec![1.0; mesh.n_nodes()];
        field.set_imported_temperature(ImportedTemperature::new(uniform, 1.0, 0.0, "1 K".into()));
    }
    let mut problem = CoupledProblem::new(mesh);
    problem.add_field(Box::new(field)).unwrap();
    let names = ["mechanical.young_elem.domain", "mechanical.poisson.domain", "bc.xmax.traction"];
    let ids: Vec<_> = names.iter().map(|name| problem.register(name, None).unwrap()).collect();
    let (j, grad, _) = problem.gradient().unwrap();
    let flat = ids.iter().flat_map(|&id| grad.get(id).to_vec()).collect();
    let field = problem.find::<MechanicalField>().unwrap();
    (j, flat, field.self_adjoint_solves())
}

fn relative_difference(x: &[f64], y: &[f64]) -> f64 {
    let d: f64 = x.iter().zip(y).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt();
    d / y.iter().map(|v| v * v).sum::<f64>().sqrt()
}

#[rstest]
#[case::auto(LinearChoice::Auto)]
#[case::cholesky(LinearChoice::Cholesky)]
fn the_compliance_adjoint_is_the_forward_solution(#[case] choice: LinearChoice) {
    let (j, g, shortcuts) = compliance_gradient(6, choice, 0.0, None);
    let (j_lu, g_lu, shortcuts_lu) = compliance_gradient(6, LinearChoice::Lu, 0.0, None);
    assert_eq!((shortcuts, shortcuts_lu), (1, 0));
    assert!((j - j_lu).abs() <= 1e-12 * j_lu.abs(), "{j} vs {j_lu}");
    let d = relative_difference(&g, &g_lu);
    assert!(d <= 1e-10, "gradients differ by {d:e}");
    // Σ E_e dC/dE_e = −C for a load that does not depend on E
    let n_elem = g.len() - 4;
    let sum: f64 = g[..n_elem].iter().sum();
    assert!((sum + j).abs() <= 1e-10 * j, "{sum} vs −{j}");
}

#[test]
fn amg_cg_takes_the_shortcut_too() {
    let (_, g, shortcuts) = compliance_gradient(8, LinearChoice::AmgCg, 0.0, None);
    let (_, g_lu, _) = compliance_gradient(8, LinearChoice::Lu, 0.0, None);
    assert_eq!(shortcuts, 1);
    // the forward CG stops at a relative residual of 1e-12
    let d = relative_difference(&g, &g_lu);
    assert!(d <= 1e-9, "gradients differ by {d:e}");
}

#[rstest]
#[case::thermal_strain(1e-3, None)]
#[case::prescribed_displacement(0.0, Some(0.01))]
fn other_loads_make_the_adjoint_a_solve(#[case] alpha: f64, #[case] displacement: Option<f64>) {
    let (j, g, shortcuts) = compliance_gradient(6, LinearChoice::Cholesky, alpha, displacement);
    let (j_lu, g_lu, _) = compliance_gradient(6, LinearChoice::Lu, alpha, displacement);
    assert_eq!(shortcuts, 0);
    assert!((j - j_lu).abs() <= 1e-12 * j_lu.abs(), "{j} vs {j_lu}");
    let d = relative_difference(&g, &g_lu);
    assert!(d <= 1e-10, "gradients differ by {d:e}");
}
