//! Taylor tests of the thermal adjoint gradient for every parameter kind and objective kind.
//!
//! Source problem: the Taylor remainder test of pyadjoint (Farrell, Ham, Funke & Rognes,
//! "Automated derivation of the adjoint of high-level transient finite element programs",
//! SIAM J. Sci. Comput. 35 (2013), §5.1; `pyadjoint/verification.py`): for a correct gradient
//! |J(m + h dm) − J(m) − h ⟨∇J, dm⟩| = O(h²). The physical set-up is a unit cube with a heat
//! source, one fixed-temperature face, one convective face and one heated face (all three BC
//! kinds at once), on a linear tet mesh and a quadratic hex mesh, with a constant and with a
//! temperature-dependent (polynomial) conductivity.
//!
//! Every case registers ONE parameter, runs `ThermalProblem::taylor_test`, requires first-order
//! rates ≥ 1.9 (or remainders at round-off for functionals linear along the direction) and
//! checks that the problem is left as it was: registry values, model data and the objective
//! value bitwise equal before and after.

mod common;

use gradfem::run::LinearChoice;
use gradfem::thermal::ThermalProblem;
use gradfem_mesh::CellType;
use gradfem_solvers::params::ParamVector;
use gradfem_solvers::taylor::{TaylorParams, random_direction, taylor_test};
use gradfem_thermal::{BcKind, ConductivityLaw, ObjectiveKind, ObjectiveTerm, RegionSpec};
use rstest::rstest;

const PARAMS: [&str; 8] = [
    "thermal.k.domain",
    "thermal.k_elem.domain",
    "thermal.q.domain",
    "bc.xmin.temperature",
    "bc.xmax.h",
    "bc.xmax.t_inf",
    "bc.ymin.flux",
    "mesh.coordinates",
];

/// Sensors at generic interior points (on no element face of either mesh), with data offset
/// from the solution so the misfit has a non-zero gradient.
fn sensors() -> Vec<[f64; 4]> {
    vec![
        [0.21, 0.37, 0.44, 305.0],
        [0.63, 0.29, 0.71, 310.0],
        [0.47, 0.82, 0.13, 300.0],
        [0.88, 0.56, 0.39, 296.0],
    ]
}

fn objective(kind: &str) -> ObjectiveTerm {
    let kind = match kind {
        "point" => ObjectiveKind::Point { point: [0.41, 0.57, 0.62] },
        "average" => ObjectiveKind::Average { group: "domain".into() },
        "max" => ObjectiveKind::Max { group: "domain".into(), p: 8.0 },
        "integral_square" => ObjectiveKind::IntegralSquare { group: "domain".into() },
        "misfit" => ObjectiveKind::Misfit { sensors: sensors() },
        other => panic!("unknown objective kind {other}"),
    };
    ObjectiveTerm { weight: 1.0, kind }
}

fn problem(ct: CellType, nonlinear: bool, obj: &str) -> ThermalProblem {
    let n = if ct.order() == 1 { 3 } else { 2 };
    let mesh = common::unit_cube(n, ct);
    let law = if nonlinear {
        ConductivityLaw::Polynomial { t_ref: 300.0, coefficients: vec![-2e-3, 3e-5] }
    } else {
        ConductivityLaw::Constant
    };
    let regions = [RegionSpec { group: "domain".into(), k0: 2.0, law, source: 500.0 }];
    let bcs = [
        common::bc("xmin", BcKind::Temperature { value: 300.0 }),
        common::bc("xmax", BcKind::Convection { h: 10.0, t_inf: 290.0 }),
        common::bc("ymin", BcKind::HeatFlux { q_in: 200.0 }),
    ];
    let mut p = ThermalProblem::new(mesh, &regions, &bcs, vec![objective(obj)], LinearChoice::Auto)
        .expect("set-up");
    // Tight Newton tolerances: the Taylor remainders at the smallest step must sit above the
    // solver's noise for the nonlinear law.
    p.newton.rel_tol = 1e-14;
    p.newton.abs_tol = 1e-12;
    p
}

/// Everything a Taylor test might leave changed.
#[derive(Debug, PartialEq)]
struct Snapshot {
    values: Vec<Vec<f64>>,
    k_elem: Vec<f64>,
    coords: Vec<[f64; 3]>,
    sources: Vec<f64>,
    bcs: Vec<BcKind>,
}

fn snapshot(p: &ThermalProblem) -> Snapshot {
    Snapshot {
        values: p.registry().specs().iter().map(|s| s.values.clone()).collect(),
        k_elem: p.model.k_elem.clone(),
        coords: p.model.coords.clone(),
        sources: p.model.regions.iter().map(|r| r.source).collect(),
        bcs: p.model.boundaries.iter().map(|b| b.kind.clone()).collect(),
    }
}

#[rstest]
fn gradient_passes_taylor_test(
    #[values(CellType::Tet4, CellType::Hex20)] ct: CellType,
    #[values(false, true)] nonlinear: bool,
    #[values("point", "average", "max", "integral_square", "misfit")] obj: &str,
    #[values(0, 1, 2, 3, 4, 5, 6, 7)] which: usize,
) {
    let name = PARAMS[which];
    let mut p = problem(ct, nonlinear, obj);
    p.register(name, None).expect("register");
    let j_before = p.objective_value().expect("objective");
    let before = snapshot(&p);
    let r = p.taylor_test(&TaylorParams::default(), |_| {}).expect("taylor test");
    let after = snapshot(&p);
    let j_after = p.objective_value().expect("objective");
    let ctx = format!("{ct}, nonlinear {nonlinear}, objective {obj}, parameter {name}");
    assert!(r.passed, "{ctx}:\n{}", r.table());
    assert!(r.rates_used == 0 || r.min_rate() >= 1.9, "{ctx}:\n{}", r.table());
    // A functional linear along dm is allowed to sit at round-off, but the gradient must then
    // be non-trivial: the zeroth-order remainder must move.
    assert!(
        r.dj_dm != 0.0 && r.remainders_zeroth[0] > 0.0,
        "{ctx}: J does not move:\n{}",
        r.table()
    );
    assert_eq!(before, after, "{ctx}: the Taylor test changed the problem");
    // The objective after the test comes from a re-solve warm-started at the last perturbed
    // state, so it may differ from the cold-start value by round-off (see
    // `taylor_test_restores_objective_bitwise`).
    assert!(
        (j_after - j_before).abs() <= 1e-12 * j_before.abs(),
        "{ctx}: objective {j_before:e} before, {j_after:e} after"
    );
}

/// The problem after a Taylor test must give the objective bit for bit as before:
/// `ThermalProblem::taylor_test` restores the registry and the converged unknowns, so the final
/// solve starts converged (a warm start from the last perturbed state would differ by ulps).
#[test]
fn taylor_test_restores_objective_bitwise() {
    let mut p = problem(CellType::Tet4, false, "average");
    p.register("thermal.k.domain", None).expect("register");
    let j_before = p.objective_value().expect("objective");
    p.taylor_test(&TaylorParams::default(), |_| {}).expect("taylor test");
    let j_after = p.objective_value().expect("objective");
    assert_eq!(j_before.to_bits(), j_after.to_bits(), "{j_before:e} vs {j_after:e}");
}

/// All parameters at once, along an independent direction of our own (not the one
/// `ThermalProblem::taylor_test` builds), through `gradfem_solvers::taylor::taylor_test`, with
/// a two-term objective (weighted misfit + smooth maximum) and the nonlinear law.
#[rstest]
fn all_parameters_together_along_own_direction(
    #[values(CellType::Tet4, CellType::Hex20)] ct: CellType,
) {
    let mut p = problem(ct, true, "misfit");
    p.objective.push(ObjectiveTerm {
        weight: 0.5,
        kind: ObjectiveKind::Max { group: "domain".into(), p: 6.0 },
    });
    for name in PARAMS.iter().filter(|n| **n != "thermal.k.domain") {
        p.register(name, None).expect("register");
    }
    let pv = ParamVector::all(p.registry());
    let (_, grad, _) = p.gradient().expect("gradient");
    let g = grad.flatten(&pv);
    let m0 = pv.gather(p.registry());
    let coords = pv.range(p.registry().id("mesh.coordinates").unwrap()).unwrap();
    let dm: Vec<f64> = random_direction(m0.len(), 12345)
        .iter()
        .enumerate()
        .map(|(i, d)| if coords.contains(&i) { d * 1e-3 } else { d * m0[i].abs().max(1.0) })
        .collect();
    let mut reg = p.registry().clone();
    let r = taylor_test(
        |x: &[f64]| -> Result<f64, gradfem::run::RunError> {
            pv.scatter(&mut reg, x)?;
            *p.registry_mut() = reg.clone();
            p.apply_parameters()?;
            p.objective_value()
        },
        &m0,
        &g,
        &dm,
        &TaylorParams::default(),
    )
    .expect("taylor test");
    assert!(r.passed && r.min_rate() >= 1.9, "{ct}:\n{}", r.table());
}
