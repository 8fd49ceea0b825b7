//! Transient heat conduction: the cooling slab against its series solution, observed orders of
//! the time integrators, Taylor tests of the discrete adjoint for every parameter kind and
//! integrator, and binomial checkpointing against store-all.
//!
//! Source problem: the slab 0 < x < L, initially at T₀, faces held at T_s (Carslaw & Jaeger,
//! "Conduction of Heat in Solids", 2nd ed. (1959), §3.3, eq. (3.3.8)):
//! T(x, t) = T_s + (T₀ − T_s) Σ_{n odd} 4/(nπ) sin(nπx/L) exp(−α n²π² t/L²), α = k/(ρc).
//! The y and z faces are insulated (no condition), so the 3D P2 box solves the 1D problem.
//!
//! The Taylor protocol is pyadjoint's (Farrell et al., SIAM J. Sci. Comput. 35 (2013), §5.1):
//! |J(m + h dm) − J(m) − h ⟨∇J, dm⟩| = O(h²).

mod common;

use common::{SplitMix, bc, box_of, loglog_slope, region};
use gradfem::transient::{
    MassKind, SensorHistory, StepWeights, TimeScheme, TransientGradient, TransientProblem,
    TransientSpec, WeightedTerms,
};
use gradfem_mesh::CellType;
use gradfem_solvers::checkpoint::Checkpointing;
use gradfem_thermal::{
    BcKind, ConductivityLaw, ObjectiveKind, ObjectiveTerm, RegionSpec, ThermalModel, VjpRequest,
};
use rstest::rstest;

const PI: f64 = std::f64::consts::PI;

/// The slab [0, L] × [0, 0.1] × [0, 0.1], P2 tets, x faces fixed at `t_s`.
fn slab(nx: usize, length: f64, k: f64, t_s: f64) -> ThermalModel {
    let mesh = box_of([0.0; 3], [length, 0.1, 0.1], [nx, 1, 1], CellType::Tet10);
    ThermalModel::new(
        &mesh,
        &[region("domain", k, 0.0)],
        &[
            bc("xmin", BcKind::Temperature { value: t_s }),
            bc("xmax", BcKind::Temperature { value: t_s }),
        ],
    )
    .expect("slab model")
}

fn spec(rho_c: f64, dt: f64, n_steps: usize, scheme: TimeScheme) -> TransientSpec {
    TransientSpec { heat_capacity: vec![rho_c], dt, n_steps, scheme, mass: MassKind::Consistent }
}

/// The series solution of the cooling slab.
fn series(x: f64, t: f64, length: f64, alpha: f64, t0: f64, t_s: f64) -> f64 {
    let mut s = 0.0;
    for n in (1..400).step_by(2) {
        let nf = n as f64;
        s += 4.0 / (nf * PI)
            * (nf * PI * x / length).sin()
            * (-alpha * nf * nf * PI * PI * t / (length * length)).exp();
    }
    t_s + (t0 - t_s) * s
}

#[test]
fn cooling_slab_matches_series() {
    let (length, k, rho_c, t0, t_s) = (1.0, 2.0, 4.0, 350.0, 300.0);
    let alpha = k / rho_c;
    let model = slab(16, length, k, t_s);
    let initial = vec![t0; model.n_nodes()];
    let (dt, n) = (2e-3, 100);
    let p = TransientProblem::new(model, &spec(rho_c, dt, n, TimeScheme::Bdf2), initial).unwrap();
    let traj = p.simulate().unwrap();
    assert_eq!(traj.factorizations, 2, "BDF2 on a linear problem: start + main factorization");
    let t_end = dt * n as f64;
    let mut err: f64 = 0.0;
    for (node, x) in p.model.coords.iter().enumerate() {
        let exact = series(x[0], t_end, length, alpha, t0, t_s);
        err = err.max((traj.temperatures[n][node] - exact).abs());
    }
    let rel = err / (t0 - t_s);
    println!("cooling slab at t = {t_end}: max nodal error {err:.3e} (relative {rel:.3e})");
    assert!(rel < 3e-4, "max nodal error {err:.3e} (relative {rel:.3e})");
    // The centre has cooled (the answer is not the initial state).
    let centre = series(0.5, t_end, length, alpha, t0, t_s);
    assert!(centre < t0 - 0.1 * (t0 - t_s), "centre {centre}");
}

/// Observed order in Δt of each integrator: smooth data T⁰ = T_s + sin(πx/L) (one mode), error
/// at t = 0.1 against the same scheme with a 64 times smaller step on the same mesh (the
/// spatial error cancels), fitted over 3 step sizes.
#[rstest]
#[case::implicit_euler(TimeScheme::IMPLICIT_EULER, 1.0)]
#[case::crank_nicolson(TimeScheme::CRANK_NICOLSON, 2.0)]
#[case::bdf2(TimeScheme::Bdf2, 2.0)]
fn observed_order_in_time(#[case] scheme: TimeScheme, #[case] order: f64) {
    let (length, k, rho_c, t_s) = (1.0, 1.0, 1.0, 0.0);
    let model = slab(12, length, k, t_s);
    let initial: Vec<f64> = model.coords.iter().map(|x| t_s + (PI * x[0] / length).sin()).collect();
    let t_end = 0.1;
    let run = |n: usize| {
        let p = TransientProblem::new(
            model.clone(),
            &spec(rho_c, t_end / n as f64, n, scheme),
            initial.clone(),
        )
        .unwrap();
        p.simulate().unwrap().temperatures.pop().unwrap()
    };
    let steps = [10, 20, 40];
    let reference = run(64 * steps[2]);
    let mut dts = Vec::new();
    let mut errs = Vec::new();
    for n in steps {
        let t = run(n);
        let e = t.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        dts.push(t_end / n as f64);
        errs.push(e);
    }
    let rate = loglog_slope(&dts, &errs);
    println!("{scheme:?}: dt {dts:?} errors {errs:?} rate {rate:.3}");
    assert!((rate - order).abs() < 0.15, "{scheme:?}: observed order {rate:.3}, expected {order}");
}

/// A small model with every boundary kind: fixed T on xmin, convection on xmax, flux on ymin,
/// a source, P2 tets, with a constant or a temperature-dependent conductivity.
fn taylor_problem(scheme: TimeScheme, nonlinear: bool, mass: MassKind) -> TransientProblem {
    let mesh = box_of([0.0; 3], [1.0, 0.5, 0.5], [2, 1, 1], CellType::Tet10);
    let law = if nonlinear {
        ConductivityLaw::Polynomial { t_ref: 300.0, coefficients: vec![2e-3, 1e-5] }
    } else {
        ConductivityLaw::Constant
    };
    let model = ThermalModel::new(
        &mesh,
        &[RegionSpec { group: "domain".into(), k0: 3.0, law, source: 200.0 }],
        &[
            bc("xmin", BcKind::Temperature { value: 300.0 }),
            bc("xmax", BcKind::Convection { h: 15.0, t_inf: 290.0 }),
            bc("ymin", BcKind::HeatFlux { q_in: 80.0 }),
        ],
    )
    .unwrap();
    let mut rng = SplitMix(7);
    let initial: Vec<f64> =
        model.coords.iter().map(|x| 310.0 + 5.0 * x[0] + rng.normal()).collect();
    let spec = TransientSpec { heat_capacity: vec![40.0], dt: 0.5, n_steps: 9, scheme, mass };
    TransientProblem::new(model, &spec, initial).unwrap()
}

/// Sensor misfit at every second state plus the time integral of the mean temperature.
fn objectives() -> (SensorHistory, WeightedTerms) {
    let points = vec![[0.31, 0.17, 0.23], [0.77, 0.33, 0.12]];
    let data = (0..=9)
        .map(|n| (n % 2 == 0).then(|| vec![308.0 - 0.3 * n as f64, 303.0 + 0.2 * n as f64]))
        .collect();
    (
        SensorHistory { points, data, weight: 1.0 },
        WeightedTerms {
            terms: vec![ObjectiveTerm {
                weight: 0.01,
                kind: ObjectiveKind::IntegralSquare { group: "domain".into() },
            }],
            weights: StepWeights::Trapezoid,
        },
    )
}

fn value(p: &TransientProblem) -> f64 {
    let (a, b) = objectives();
    p.objective(&a).unwrap() + p.objective(&b).unwrap()
}

fn gradient(p: &TransientProblem, memory: Checkpointing, coords: bool) -> TransientGradient {
    let (a, b) = objectives();
    let want = VjpRequest { coords, ..VjpRequest::ALL };
    let mut g = p.gradient(&a, memory, want).unwrap();
    let g2 = p.gradient(&b, memory, want).unwrap();
    g.value += g2.value;
    for (x, y) in [
        (&mut g.k_region, &g2.k_region),
        (&mut g.source, &g2.source),
        (&mut g.h, &g2.h),
        (&mut g.t_inf, &g2.t_inf),
        (&mut g.q_in, &g2.q_in),
        (&mut g.temperature, &g2.temperature),
        (&mut g.heat_capacity, &g2.heat_capacity),
        (&mut g.initial, &g2.initial),
    ] {
        x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
    }
    if let (Some(c), Some(c2)) = (&mut g.coords, &g2.coords) {
        for (a, b) in c.iter_mut().zip(c2) {
            for i in 0..3 {
                a[i] += b[i];
            }
        }
    }
    g
}

#[derive(Clone, Copy, Debug)]
enum Param {
    K,
    Source,
    H,
    TInf,
    Flux,
    HeatCapacity,
    Initial,
    FixedTemperature,
    Coordinates,
}

/// Perturb `p` by `h · dm` along parameter `which`; return ⟨∇J, dm⟩ for the given gradient.
fn perturb(p: &mut TransientProblem, which: Param, h: f64, g: &TransientGradient) -> f64 {
    let mut rng = SplitMix(11);
    match which {
        Param::K => {
            p.model.k_elem.iter_mut().for_each(|k| *k += h * 0.5);
            0.5 * g.k_region[0]
        }
        Param::Source => {
            p.model.regions[0].source += h * 100.0;
            100.0 * g.source[0]
        }
        Param::H | Param::TInf => {
            let BcKind::Convection { h: hh, t_inf } = p.model.boundaries[1].kind else {
                unreachable!()
            };
            let (dh, dt) = if matches!(which, Param::H) { (5.0, 0.0) } else { (0.0, 5.0) };
            p.model
                .set_boundary_kind(1, BcKind::Convection { h: hh + h * dh, t_inf: t_inf + h * dt });
            dh * g.h[1] + dt * g.t_inf[1]
        }
        Param::Flux => {
            let BcKind::HeatFlux { q_in } = p.model.boundaries[2].kind else { unreachable!() };
            p.model.set_boundary_kind(2, BcKind::HeatFlux { q_in: q_in + h * 50.0 });
            50.0 * g.q_in[2]
        }
        Param::HeatCapacity => {
            p.set_heat_capacity(0, 40.0 + h * 10.0);
            10.0 * g.heat_capacity[0]
        }
        Param::Initial => {
            let mut s = 0.0;
            for (t, gi) in p.initial.iter_mut().zip(&g.initial) {
                let d = 5.0 * rng.normal();
                *t += h * d;
                s += d * gi;
            }
            s
        }
        Param::FixedTemperature => {
            p.model.set_fixed_temperature(0, 300.0 + h * 10.0);
            10.0 * g.temperature[0]
        }
        Param::Coordinates => {
            let gc = g.coords.as_ref().expect("coordinate gradient");
            let mut s = 0.0;
            for (x, gx) in p.model.coords.iter_mut().zip(gc) {
                for i in 0..3 {
                    let d = 0.02 * rng.normal();
                    x[i] += h * d;
                    s += d * gx[i];
                }
            }
            s
        }
    }
}

/// First-order Taylor remainders for h = 2^{-i}, i = 0..4; returns the smallest observed rate.
fn taylor(base: &TransientProblem, which: Param) -> f64 {
    let coords = matches!(which, Param::Coordinates);
    let g = gradient(base, Checkpointing::StoreAll, coords);
    let j0 = value(base);
    assert!((g.value - j0).abs() <= 1e-12 * j0.abs(), "adjoint J {} vs forward J {j0}", g.value);
    let mut rems = Vec::new();
    let mut dj = 0.0;
    for i in 0..4 {
        let h = 0.125 * 0.5f64.powi(i);
        let mut p = base.clone();
        dj = perturb(&mut p, which, h, &g);
        rems.push((value(&p) - j0 - h * dj).abs());
    }
    let rates: Vec<f64> = rems.windows(2).map(|w| (w[0] / w[1]).log2()).collect();
    println!("{which:?}: dJ·dm {dj:.6e}, remainders {rems:?}, rates {rates:.3?}");
    assert!(dj.abs() > 1e-8, "{which:?}: directional derivative {dj} is zero: a vacuous test");
    rates.into_iter().fold(f64::INFINITY, f64::min)
}

#[rstest]
fn taylor_every_parameter(
    #[values(TimeScheme::IMPLICIT_EULER, TimeScheme::CRANK_NICOLSON, TimeScheme::Bdf2)]
    scheme: TimeScheme,
    #[values(
        Param::K,
        Param::Source,
        Param::H,
        Param::TInf,
        Param::Flux,
        Param::HeatCapacity,
        Param::Initial,
        Param::FixedTemperature,
        Param::Coordinates
    )]
    which: Param,
) {
    let p = taylor_problem(scheme, false, MassKind::Consistent);
    let rate = taylor(&p, which);
    assert!(rate >= 1.9, "{scheme:?} {which:?}: Taylor rate {rate:.3}");
}

/// k(T): Newton in every step, LU, the tangent refactored in the reverse sweep.
#[rstest]
fn taylor_nonlinear_conductivity(
    #[values(TimeScheme::CRANK_NICOLSON, TimeScheme::Bdf2)] scheme: TimeScheme,
    #[values(Param::K, Param::HeatCapacity, Param::Initial, Param::FixedTemperature)] which: Param,
) {
    let p = taylor_problem(scheme, true, MassKind::Consistent);
    let rate = taylor(&p, which);
    assert!(rate >= 1.9, "{scheme:?} {which:?}: Taylor rate {rate:.3}");
}

#[rstest]
fn taylor_lumped_mass(#[values(Param::HeatCapacity, Param::Initial, Param::K)] which: Param) {
    let p = taylor_problem(TimeScheme::CRANK_NICOLSON, false, MassKind::Lumped);
    let rate = taylor(&p, which);
    assert!(rate >= 1.9, "lumped {which:?}: Taylor rate {rate:.3}");
}

/// Binomial checkpointing recomputes the same states, so the gradient is bitwise the store-all
/// one, with fewer states held.
#[rstest]
fn binomial_equals_store_all(
    #[values(TimeScheme::IMPLICIT_EULER, TimeScheme::CRANK_NICOLSON, TimeScheme::Bdf2)]
    scheme: TimeScheme,
    #[values(false, true)] nonlinear: bool,
) {
    let p = taylor_problem(scheme, nonlinear, MassKind::Consistent);
    let all = gradient(&p, Checkpointing::StoreAll, true);
    for snapshots in [1, 2, 3] {
        let bin = gradient(&p, Checkpointing::Binomial { snapshots }, true);
        assert!(bin.stats.max_stored_states <= snapshots, "{:?}", bin.stats);
        assert!(bin.stats.forward_steps > all.stats.forward_steps, "{:?}", bin.stats);
        let strip =
            |g: &TransientGradient| TransientGradient { stats: Default::default(), ..g.clone() };
        assert_eq!(strip(&bin), strip(&all), "{scheme:?}, {snapshots} snapshots");
    }
}

/// The lumped mass conserves ∫ρc and gives a solution close to the consistent one.
#[test]
fn lumped_mass_close_to_consistent() {
    let c = taylor_problem(TimeScheme::IMPLICIT_EULER, false, MassKind::Consistent);
    let mut l = c.clone();
    l.mass = MassKind::Lumped;
    let tc = c.simulate().unwrap().temperatures.pop().unwrap();
    let tl = l.simulate().unwrap().temperatures.pop().unwrap();
    let diff = tc.iter().zip(&tl).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(diff > 0.0 && diff < 2.0, "lumped vs consistent: {diff}");
    for e in 0..c.model.n_volume_elements() {
        let nn = c.model.element_nodes(e).len();
        let (mut mc, mut ml) = (vec![0.0; nn * nn], vec![0.0; nn * nn]);
        c.element_mass(e, 2.0, &mut mc);
        l.element_mass(e, 2.0, &mut ml);
        let (sc, sl): (f64, f64) = (mc.iter().sum(), ml.iter().sum());
        assert!((sc - sl).abs() < 1e-12 * sc, "element {e}: {sc} vs {sl}");
        assert!((0..nn).all(|a| ml[a * nn + a] > 0.0), "element {e}: lumped diagonal not positive");
    }
}

/// Adaptive steps (step doubling) on the smooth slab: the final time is hit, a tighter
/// tolerance takes more steps and gives a smaller error against the exact mode decay
/// T = T_s + exp(−απ²t/L²) sin(πx/L) (spatial error of the P2 mesh far below the tolerances).
#[rstest]
#[case::implicit_euler(TimeScheme::IMPLICIT_EULER)]
#[case::crank_nicolson(TimeScheme::CRANK_NICOLSON)]
fn adaptive_steps_follow_the_tolerance(#[case] scheme: TimeScheme) {
    use gradfem::transient::AdaptParams;
    let model = slab(12, 1.0, 1.0, 0.0);
    let initial: Vec<f64> = model.coords.iter().map(|x| (PI * x[0]).sin()).collect();
    let t_end = 0.2;
    let exact: Vec<f64> =
        model.coords.iter().map(|x| (-PI * PI * t_end).exp() * (PI * x[0]).sin()).collect();
    let mut results = Vec::new();
    for tolerance in [1e-3, 1e-4] {
        let mut p =
            TransientProblem::new(model.clone(), &spec(1.0, 0.01, 1, scheme), initial.clone())
                .unwrap();
        let params = AdaptParams { t_end, tolerance, dt_initial: 1e-3, dt_min: 1e-6, dt_max: 0.1 };
        let info = p.adapt_steps(&params).unwrap();
        assert!((p.time(p.n_steps) - t_end).abs() < 1e-12, "final time {}", p.time(p.n_steps));
        let steps = p.step_sizes.clone().unwrap();
        assert!(
            steps.iter().any(|&d| (d - steps[0]).abs() > 1e-3 * steps[0]),
            "step never changed"
        );
        let t = p.simulate().unwrap().temperatures.pop().unwrap();
        let err = t.iter().zip(&exact).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        println!("{scheme:?} tol {tolerance:e}: {} steps, {info:?}, error {err:.3e}", p.n_steps);
        results.push((p.n_steps, err));
    }
    assert!(results[1].0 > results[0].0, "{results:?}");
    assert!(results[1].1 < 0.5 * results[0].1, "{results:?}");
}

/// The gradient of an adapted run (step sizes frozen) passes the Taylor test, and binomial
/// checkpointing replays the variable steps exactly.
#[rstest]
fn adaptive_gradient(
    #[values(TimeScheme::IMPLICIT_EULER, TimeScheme::CRANK_NICOLSON)] scheme: TimeScheme,
    #[values(Param::K, Param::HeatCapacity, Param::Initial, Param::FixedTemperature)] which: Param,
) {
    use gradfem::transient::AdaptParams;
    let mut p = taylor_problem(scheme, false, MassKind::Consistent);
    let params =
        AdaptParams { t_end: 4.5, tolerance: 0.05, dt_initial: 0.05, dt_min: 1e-4, dt_max: 2.0 };
    p.adapt_steps(&params).unwrap();
    // The objectives' sensor data cover states 0..=9 only: keep 9 steps of the sequence.
    let steps: Vec<f64> = p.step_sizes.clone().unwrap().into_iter().take(9).collect();
    assert_eq!(steps.len(), 9, "adapted sequence shorter than 9 steps");
    p.n_steps = 9;
    p.step_sizes = Some(steps);
    let rate = taylor(&p, which);
    assert!(rate >= 1.9, "adaptive {scheme:?} {which:?}: Taylor rate {rate:.3}");
    let all = gradient(&p, Checkpointing::StoreAll, false);
    let bin = gradient(&p, Checkpointing::Binomial { snapshots: 2 }, false);
    let strip =
        |g: &TransientGradient| TransientGradient { stats: Default::default(), ..g.clone() };
    assert_eq!(strip(&bin), strip(&all));
}
