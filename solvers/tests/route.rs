//! The cost-based route between sparse Cholesky and AMG-CG (`route::SpdSolver`): the choices
//! on the Kuhn-cube Poisson and elasticity systems, forced routes, the switch to Cholesky when
//! one matrix is solved many times, and the self-adjoint shortcut of transposed solves.

#[path = "amg_kuhn.rs"]
mod kuhn;

use gradfem_solvers::amg::{AmgParams, NearNullspace};
use gradfem_solvers::cg::CgParams;
use gradfem_solvers::linear::{LinearSolver, residual_norm};
use gradfem_solvers::route::{CostModel, Route, SpdSolver, level_separator};
use gradfem_solvers::sparse::CsrMatrix;
use kuhn::{KuhnElasticity, KuhnPoisson};
use rstest::rstest;

fn heat(n: usize) -> (CsrMatrix, Vec<f64>, Option<NearNullspace>) {
    let p = KuhnPoisson::new(n);
    (p.a, p.b, None)
}

fn elastic(n: usize) -> (CsrMatrix, Vec<f64>, Option<NearNullspace>) {
    let p = KuhnElasticity::new([n; 3], [1.0; 3]);
    let m = NearNullspace::rigid_body_modes(&p.coords, &p.unknowns).unwrap();
    (p.a, p.b, Some(m))
}

fn solver(route: Route, modes: Option<NearNullspace>) -> SpdSolver {
    let s = SpdSolver::new("test", route, AmgParams::default(), CgParams::default());
    match modes {
        Some(m) => s.with_near_nullspace(m),
        None => s,
    }
}

fn relative_residual(a: &CsrMatrix, x: &[f64], b: &[f64]) -> f64 {
    residual_norm(a, x, b) / b.iter().map(|v| v * v).sum::<f64>().sqrt()
}

/// The default cost model's choices, which follow the measured crossovers (BENCHMARKS.md, the
/// quiet re-calibration): heat3d between N = 12 (Cholesky 3.1 ms, AMG-CG 3.3 ms) and N = 20
/// (26 ms, 15 ms), elastic3d between N = 14 (55 ms, 77 ms) and N = 18–20 (0.20 s, 0.16 s;
/// 0.32 s, 0.21 s). Large systems are routed without a symbolic analysis: their separator
/// alone rules Cholesky out.
#[rstest]
#[case::heat_6(false, 6, Route::Cholesky, true)]
#[case::heat_10(false, 10, Route::Cholesky, true)]
#[case::heat_20(false, 20, Route::AmgCg, true)]
#[case::heat_40(false, 40, Route::AmgCg, false)]
#[case::elastic_6(true, 6, Route::Cholesky, true)]
#[case::elastic_14(true, 14, Route::Cholesky, true)]
#[case::elastic_20(true, 20, Route::AmgCg, true)]
#[case::elastic_32(true, 32, Route::AmgCg, false)]
fn auto_routes_by_predicted_cost(
    #[case] vector: bool,
    #[case] n: usize,
    #[case] expected: Route,
    #[case] analysed: bool,
) {
    let (a, b, modes) = if vector { elastic(n) } else { heat(n) };
    let mut s = solver(Route::Auto, modes);
    s.factor(&a).unwrap();
    let d = s.decision().unwrap().clone();
    assert_eq!(d.route, expected, "{d:?}");
    assert_eq!(d.cholesky_seconds.is_some(), analysed, "{d:?}");
    let amg = d.amg_seconds.unwrap();
    match (d.route, d.cholesky_seconds) {
        (Route::Cholesky, Some(c)) => assert!(c <= amg, "{d:?}"),
        (Route::AmgCg, Some(c)) => assert!(c > amg, "{d:?}"),
        (Route::AmgCg, None) => assert!(d.cholesky_lower_bound_seconds.unwrap() >= amg),
        _ => panic!("{d:?}"),
    }
    assert_eq!(s.name(), if expected == Route::Cholesky { "cholesky" } else { "amg-cg" });
    let mut x = b.clone();
    s.solve_in_place(&mut x).unwrap();
    assert!(relative_residual(&a, &x, &b) <= 1e-10);
}

#[rstest]
#[case::cholesky(Route::Cholesky, "cholesky")]
#[case::amg(Route::AmgCg, "amg-cg")]
fn forced_routes_are_kept(#[case] route: Route, #[case] name: &str) {
    for (a, b, modes) in [heat(40), elastic(6)] {
        let mut s = solver(route, modes);
        s.factor(&a).unwrap();
        assert_eq!(s.name(), name);
        assert_eq!(s.decision().unwrap().route, route);
        let mut x = b.clone();
        s.solve_in_place(&mut x).unwrap();
        assert!(relative_residual(&a, &x, &b) <= 1e-10);
    }
}

/// A caller that will solve many times per factorization (a field downstream of a time run)
/// says so, and the route is decided again for that count at the next factorization: one
/// matrix solved 20 times factors once (Cholesky) where a forward and an adjoint take AMG-CG.
#[test]
fn many_expected_solves_per_factorization_take_cholesky() {
    let (a, b, modes) = elastic(18);
    let mut s = solver(Route::Auto, modes);
    s.factor(&a).unwrap();
    assert_eq!(s.decision().unwrap().route, Route::AmgCg, "{:?}", s.decision());
    s.expect_solves(20);
    // The current factorization keeps serving until the next one.
    assert_eq!(s.name(), "amg-cg");
    s.factor(&a).unwrap();
    let d = s.decision().unwrap().clone();
    assert_eq!(d.route, Route::Cholesky, "{d:?}");
    assert!(d.cholesky_seconds.unwrap() < d.amg_seconds.unwrap(), "{d:?}");
    let mut x = b.clone();
    s.solve_in_place(&mut x).unwrap();
    assert!(relative_residual(&a, &x, &b) <= 1e-10);
}

#[test]
fn a_cost_model_with_a_fast_factorization_takes_cholesky() {
    let (a, _, _) = heat(20);
    let fast =
        CostModel { factor_rate: 1e14, solve_rate: 1e13, amd_scalar: 0.0, ..Default::default() };
    let mut s = solver(Route::Auto, None).with_cost_model(fast);
    s.factor(&a).unwrap();
    assert_eq!(s.decision().unwrap().route, Route::Cholesky);
}

#[test]
fn many_solves_with_one_matrix_switch_to_cholesky() {
    // heat N = 20 is routed to AMG-CG; a matrix solved for many right-hand sides (a mechanical
    // field at every state of a transient run) pays a factorization once its CG costs more
    let (a, b, _) = heat(20);
    let mut s = solver(Route::Auto, None);
    s.factor(&a).unwrap();
    assert_eq!(s.name(), "amg-cg");
    let mut switched = None;
    for k in 0..40 {
        let rhs: Vec<f64> =
            b.iter().enumerate().map(|(i, v)| v * (1.0 + (i * k % 7) as f64)).collect();
        let mut x = rhs.clone();
        s.solve_in_place(&mut x).unwrap();
        assert!(relative_residual(&a, &x, &rhs) <= 1e-10, "solve {k}");
        if switched.is_none() && s.name() == "cholesky" {
            switched = Some(k + 1);
        }
    }
    let d = s.decision().unwrap();
    assert_eq!(d.route, Route::Cholesky);
    assert_eq!(d.switched_after_solves, switched);
    let after = switched.expect("switched");
    assert!((3..30).contains(&after), "switched after {after} solves");
    // the same pattern refactored keeps Cholesky
    s.factor(&a).unwrap();
    assert_eq!(s.name(), "cholesky");
}

#[rstest]
#[case::cholesky_heat(Route::Cholesky, false)]
#[case::amg_heat(Route::AmgCg, false)]
#[case::cholesky_elastic(Route::Cholesky, true)]
#[case::amg_elastic(Route::AmgCg, true)]
fn a_self_adjoint_transposed_solve_reuses_the_forward_solution(
    #[case] route: Route,
    #[case] vector: bool,
) {
    let (a, b, modes) = if vector { elastic(10) } else { heat(14) };
    let mut s = solver(route, modes.clone());
    let mut general = solver(Route::Cholesky, modes).with_self_adjoint(false);
    s.factor(&a).unwrap();
    general.factor(&a).unwrap();
    let mut x = b.clone();
    s.solve_in_place(&mut x).unwrap();
    // the adjoint of the compliance bᵀx (weight −2.5): right-hand side −2.5 b
    let mut lambda: Vec<f64> = b.iter().map(|v| -2.5 * v).collect();
    s.solve_transpose_in_place(&mut lambda).unwrap();
    assert_eq!(s.self_adjoint_solves(), 1);
    let mut reference: Vec<f64> = b.iter().map(|v| -2.5 * v).collect();
    general.solve_transpose_in_place(&mut reference).unwrap();
    assert_eq!(general.self_adjoint_solves(), 0);
    let d: f64 = lambda.iter().zip(&reference).map(|(p, q)| (p - q) * (p - q)).sum::<f64>().sqrt();
    let r: f64 = reference.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!(d <= 1e-9 * r, "relative difference {:e}", d / r);
    // another right-hand side is solved
    let mut other: Vec<f64> = b.iter().enumerate().map(|(i, v)| v + (i % 3) as f64).collect();
    let rhs = other.clone();
    s.solve_transpose_in_place(&mut other).unwrap();
    assert_eq!(s.self_adjoint_solves(), 1);
    assert!(relative_residual(&a, &other, &rhs) <= 1e-6);
    // a new factorization forgets the forward solution
    s.factor(&a).unwrap();
    let mut again: Vec<f64> = b.clone();
    s.solve_transpose_in_place(&mut again).unwrap();
    assert_eq!(s.self_adjoint_solves(), 1);
}

#[test]
fn the_level_separator_of_a_grid_is_a_plane() {
    // the Kuhn cube's level structure from a corner: diagonal slices, whose smallest in the
    // middle half lies between a face (n² nodes) and twice that
    let n = 16;
    let p = KuhnPoisson::new(n);
    let s = level_separator(&p.a);
    assert!(s >= n * n / 2 && s <= 3 * (n + 1) * (n + 1), "{s}");
    let e = KuhnElasticity::new([8; 3], [1.0; 3]);
    assert_eq!(level_separator(&e.a) % 3, 0);
}

#[test]
fn an_empty_system_is_routed_and_solved() {
    let empty =
        CsrMatrix { n_rows: 0, n_cols: 0, row_ptr: vec![0], col_idx: vec![], values: vec![] };
    let mut s = solver(Route::Auto, None);
    s.factor(&empty).unwrap();
    s.solve_in_place(&mut []).unwrap();
    s.solve_transpose_in_place(&mut []).unwrap();
}

#[test]
fn a_non_finite_matrix_is_a_typed_error_on_either_route() {
    for route in [Route::Auto, Route::Cholesky, Route::AmgCg] {
        let (mut a, _, _) = heat(8);
        a.values[5] = f64::NAN;
        let mut s = solver(route, None);
        assert!(
            matches!(s.factor(&a), Err(gradfem_solvers::error::SolverError::NonFinite { .. })),
            "{route:?}"
        );
    }
}
