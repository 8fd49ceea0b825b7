//! The full adjoint gradient of a solved linear thermo-elastic problem against finite
//! differences of re-solved problems: the recipe the facade follows.
//!
//! With K the tangent on the unknowns, solve K λ_free = ∂J/∂u_free (K is symmetric), put λ = 0
//! at constrained dofs, then for every parameter p: dJ/dp = ∂J/∂p|explicit − λᵀ ∂R/∂p; for a
//! prescribed displacement value the explicit part is Σ ∂J/∂u over the dofs it prescribes.

use gradfem_mechanical::linear::objective::{ObjectiveKind, ObjectiveTerm, evaluate};
use gradfem_mechanical::linear::{BcKind, BcSpec, LinearElasticModel, RegionSpec, VjpRequest};
use gradfem_mesh::CellType;
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_solvers::assembly::AssemblyPattern;
use gradfem_solvers::linear::{CholeskySolver, LinearSolver};

struct Solved {
    u: Vec<f64>,
    solver: CholeskySolver,
}

fn solve(m: &LinearElasticModel) -> Solved {
    let pattern = AssemblyPattern::new(m.n_unknowns(), m.element_offsets(), m.element_dofs());
    let mut k = pattern.new_matrix();
    let mut r = vec![0.0; m.n_unknowns()];
    let u0 = m.nodal_displacement(&vec![0.0; m.n_unknowns()]);
    pattern.assemble_into(&mut k, &mut r, |e, ke, fe| {
        m.element_residual_tangent(e, &u0, Some(ke), fe)
    });
    let mut solver = CholeskySolver::new("mechanical");
    solver.factor(&k).unwrap();
    r.iter_mut().for_each(|v| *v = -*v);
    solver.solve_in_place(&mut r).unwrap();
    Solved { u: m.nodal_displacement(&r), solver }
}

fn terms() -> Vec<ObjectiveTerm> {
    vec![
        ObjectiveTerm {
            weight: 1e4,
            kind: ObjectiveKind::PointDisplacement {
                point: [0.9, 0.2, 0.3],
                direction: [0.0, 1.0, 1.0],
            },
        },
        ObjectiveTerm {
            weight: 1e-7,
            kind: ObjectiveKind::VonMisesPNorm { group: "domain".into(), p: 4.0 },
        },
        ObjectiveTerm { weight: 1.0, kind: ObjectiveKind::Compliance },
        ObjectiveTerm {
            weight: 1e3,
            kind: ObjectiveKind::AverageDisplacement {
                group: "xmax".into(),
                direction: [1.0, 0.0, 0.0],
            },
        },
    ]
}

fn model() -> LinearElasticModel {
    let mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [1.0, 0.4, 0.5],
        divisions: [4, 2, 2],
        cell_type: CellType::Tet10,
    });
    let mut m = LinearElasticModel::new(
        &mesh,
        &[RegionSpec {
            group: "domain".into(),
            young: 1e6,
            poisson: 0.3,
            alpha: 1e-4,
            t_ref: 300.0,
            body_force: [0.0, 0.0, -50.0],
        }],
        &[
            BcSpec {
                group: "xmin".into(),
                kind: BcKind::Displacement { value: [Some(1e-4), Some(0.0), Some(0.0)] },
            },
            BcSpec {
                group: "xmax".into(),
                kind: BcKind::Traction { traction: [0.0, 20.0, -30.0] },
            },
            BcSpec { group: "zmax".into(), kind: BcKind::Pressure { pressure: 40.0 } },
        ],
    )
    .unwrap();
    let t = m.coords.iter().map(|p| 300.0 + 20.0 * p[0] * p[0] + 5.0 * p[1]).collect();
    m.set_temperature(Some(t)).unwrap();
    m
}

fn objective(m: &LinearElasticModel) -> f64 {
    evaluate(m, &terms(), &solve(m).u, false).unwrap().value
}

#[test]
fn adjoint_gradient_matches_finite_differences_of_solves() {
    let mut m = model();
    let Solved { u, mut solver } = solve(&m);
    let ev = evaluate(&m, &terms(), &u, true).unwrap();
    let mut rhs = m.dofs.gather(&ev.d_displacement);
    solver.solve_transpose_in_place(&mut rhs).unwrap();
    let mut lambda = vec![0.0; 3 * m.n_nodes()];
    m.dofs.scatter(&rhs, &mut lambda);
    let vjp = m.parameter_vjp(&u, &lambda, VjpRequest::ALL);

    let check = |what: &str, fd: f64, adj: f64| {
        assert!(
            (fd - adj).abs() <= 1e-5 * fd.abs().max(adj.abs()) && adj.abs() > 0.0,
            "{what}: finite difference {fd} vs adjoint {adj}"
        );
    };
    let fd = |m: &mut LinearElasticModel,
              x0: f64,
              h: f64,
              set: &dyn Fn(&mut LinearElasticModel, f64)| {
        set(m, x0 + h);
        let p = objective(m);
        set(m, x0 - h);
        let q = objective(m);
        set(m, x0);
        (p - q) / (2.0 * h)
    };
    for e in [0, 7, m.n_volume_elements() - 1] {
        let g = ev.d_young_elem[e] - vjp.young_elem[e];
        check(&format!("E[{e}]"), fd(&mut m, 1e6, 1e3, &|m, v| m.young_elem[e] = v), g);
        let g = ev.d_poisson_elem[e] - vjp.poisson_elem[e];
        check(&format!("nu[{e}]"), fd(&mut m, 0.3, 1e-4, &|m, v| m.poisson_elem[e] = v), g);
    }
    check("alpha", fd(&mut m, 1e-4, 1e-7, &|m, v| m.regions[0].alpha = v), -vjp.alpha[0]);
    check("t_ref", fd(&mut m, 300.0, 1e-2, &|m, v| m.regions[0].t_ref = v), -vjp.t_ref[0]);
    // Compliance depends explicitly on the loads: + uᵀ ∂f/∂p = −(λ = u)ᵀ ∂R/∂p.
    let explicit = m.parameter_vjp(
        &u,
        &u,
        VjpRequest {
            material: false,
            thermal: false,
            loads: true,
            displacement: false,
            temperature: false,
            coords: false,
        },
    );
    check(
        "body z",
        fd(&mut m, -50.0, 1e-2, &|m, v| m.regions[0].body_force[2] = v),
        -explicit.body_force[0][2] - vjp.body_force[0][2],
    );
    let g = -explicit.pressure[2] - vjp.pressure[2];
    check(
        "pressure",
        fd(&mut m, 40.0, 1e-2, &|m, v| m.set_boundary_kind(2, BcKind::Pressure { pressure: v })),
        g,
    );
    let g = -explicit.traction[1][1] - vjp.traction[1][1];
    check(
        "traction y",
        fd(&mut m, 20.0, 1e-2, &|m, v| {
            m.set_boundary_kind(1, BcKind::Traction { traction: [0.0, v, -30.0] })
        }),
        g,
    );
    // Prescribed u_x on xmin: explicit ∂J/∂u at its dofs, minus λᵀ ∂R/∂u_presc.
    let owner = m.constraint_owner();
    let explicit_u: f64 = (0..3 * m.n_nodes())
        .filter(|&d| owner[d] == Some(0) && d % 3 == 0)
        .map(|d| ev.d_displacement[d])
        .sum();
    check(
        "prescribed u_x",
        fd(&mut m, 1e-4, 1e-6, &|m, v| {
            m.set_boundary_kind(0, BcKind::Displacement { value: [Some(v), Some(0.0), Some(0.0)] })
        }),
        explicit_u - vjp.displacement[0][0],
    );
    let t0 = m.temperature().unwrap().to_vec();
    let dt = vjp.temperature.as_ref().unwrap();
    for n in [m.n_nodes() / 3, m.n_nodes() - 1] {
        let set = |m: &mut LinearElasticModel, v: f64| {
            let mut t = t0.clone();
            t[n] = v;
            m.set_temperature(Some(t)).unwrap();
        };
        check(&format!("T[{n}]"), fd(&mut m, t0[n], 1e-2, &set), -dt[n]);
    }
    let dx = vjp.coords.as_ref().unwrap();
    let ex = ev.d_coords.as_ref().unwrap();
    for (n, k) in [(m.n_nodes() / 2, 0usize), (m.n_nodes() / 2 + 3, 2), (m.n_nodes() - 2, 1)] {
        let x0 = m.coords[n][k];
        let d = fd(&mut m, x0, 1e-5, &|m, v| m.coords[n][k] = v);
        check(&format!("X[{n}][{k}]"), d, ex[n][k] - dx[n][k]);
    }
}
