//! Cook's membrane in finite strain: a tapered, clamped panel bent by a shear load on its free
//! end, in plane strain, with a compressible Neo-Hookean law under a dead load large enough
//! that the free corner moves by about 18 mm, close to a third of the panel's 60 mm height.
//!
//! Geometry (mm): the trapezoid (0, 0), (48, 44), (48, 60), (0, 44), unit thickness, meshed by
//! mapping a structured Hex20 box [0, 48] × [0, 44] × [0, 1] with the bilinear map
//! X = x, Y = 44 η + ξ (44 − 28 η), ξ = x/48, η = y/44 (bilinear, so the straight box edges and
//! their mid-edge nodes map to straight edges and their midpoints; the Tet10 cross-check maps
//! the same box split into six tetrahedra per cube, whose diagonal edges become curved). One
//! cell through the thickness with rollers (u_z = 0) on both z faces: the Hex20 solution is
//! exactly z-independent, i.e. plane strain. Clamped on x = 0; on x = 48 a uniform dead
//! traction t = (0, F/16, 0) per unit reference area, total force F = 100 N (t = 6.25 MPa), as
//! in the linear benchmark.
//!
//! Material: E = 70 MPa, ν = 1/3, i.e. μ = E/(2(1+ν)) = 26.25 MPa and κ = E/(3(1−2ν)) = 70 MPa,
//! Neo-Hookean ψ = μ/2 (Ī₁ − 3) + κ/2 (J − 1)². The compressible setting is used on purpose: the
//! fully integrated, pure-displacement Hex20 and Tet10 are prone to volumetric locking in the
//! nearly incompressible variant of the benchmark (μ = 80.194, κ = 40 094.2, κ/μ = 500).
//!
//! Quantity: the vertical displacement of the top-right corner (48, 60).
//!
//! Checks:
//! - the small-strain model (16², 32², 64² cells) converges to the published linear value of
//!   the same setting (plane strain, E = 70, ν = 1/3, F = 100: very fine quadratic meshes give
//!   32.20–32.28 mm in Calculix, Code_Aster and Elmer, as collected by CoFEA and quoted in the
//!   solids4foam `cooksMembrane` tutorial);
//! - the finite-strain corner displacement converges under uniform refinement (4×4, 8×8,
//!   16×16 in-plane) with shrinking successive differences, and the finest mesh lies within
//!   0.5 % of the Richardson-extrapolated value;
//! - a Tet10 mesh of the same geometry (8×8×1 cubes, six tetrahedra each) lies within 1 % of
//!   the Hex20 extrapolation;
//! - at a small load (F = 0.01 N) the finite-strain answer equals the linear one to 2e-4
//!   relative, while at full load it differs from it by more than 5 % (it is about 56 % of it:
//!   the rotating panel stiffens), and the secant stiffness grows monotonically along the path.
//!
//! No published finite-strain value for this exact compressible dead-load setting was found, so
//! the large-load value is validated by self-convergence. Measured (Hex20): 17.659301,
//! 17.836732, 17.879456 mm on 4², 8², 16² (observed order 2.05, extrapolated 17.8930 mm);
//! small strain 31.263818, 31.849425, 32.101399 mm on the same meshes.

use gradfem::finite_strain::{FiniteStrainProblem, LoadStepParams};
use gradfem_mechanical::finite::{FiniteRegionSpec, FiniteStrainModel, HyperelasticLaw};
use gradfem_mechanical::hyperelastic::{NeoHookean, Volumetric};
use gradfem_mechanical::linear::{BcKind, BcSpec, LinearElasticModel, RegionSpec};
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_mesh::{CellType, Mesh};
use gradfem_solvers::assembly::AssemblyPattern;
use gradfem_solvers::linear::{CholeskySolver, LinearSolver};

const YOUNG: f64 = 70.0;
const POISSON: f64 = 1.0 / 3.0;
/// Total shear force on the free end (N per mm of thickness).
const FORCE: f64 = 100.0;
/// The corner whose vertical displacement is measured.
const CORNER: [f64; 3] = [48.0, 60.0, 0.0];
/// Load factors: a small one (F = 0.01 N), then ten equal steps up to F = 100 N.
const LOADS: [f64; 11] = [1e-4, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];

/// The Cook membrane as an `n × n × 1` Hex20 mesh (module docs for the map).
fn cook_mesh(n: usize) -> Mesh {
    cook_mesh_of(n, CellType::Hex20)
}

fn cook_mesh_of(n: usize, cell_type: CellType) -> Mesh {
    let mut mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [48.0, 44.0, 1.0],
        divisions: [n, n, 1],
        cell_type,
    });
    for p in &mut mesh.coords {
        let (xi, eta) = (p[0] / 48.0, p[1] / 44.0);
        p[1] = 44.0 * eta + xi * (44.0 - 28.0 * eta);
    }
    mesh
}

fn bcs() -> Vec<BcSpec> {
    vec![
        BcSpec { group: "xmin".into(), kind: BcKind::Fixed },
        BcSpec { group: "zmin".into(), kind: BcKind::Roller { components: vec![2] } },
        BcSpec { group: "zmax".into(), kind: BcKind::Roller { components: vec![2] } },
        // The free end is 16 mm high and 1 mm thick.
        BcSpec {
            group: "xmax".into(),
            kind: BcKind::Traction { traction: [0.0, FORCE / 16.0, 0.0] },
        },
    ]
}

/// Small-strain solution under the full load: K u = f, the full nodal displacement.
fn linear_displacement(mesh: &Mesh) -> Vec<f64> {
    let m = LinearElasticModel::new(
        mesh,
        &[RegionSpec {
            group: "domain".into(),
            young: YOUNG,
            poisson: POISSON,
            alpha: 0.0,
            t_ref: 0.0,
            body_force: [0.0; 3],
        }],
        &bcs(),
    )
    .unwrap();
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
    m.nodal_displacement(&r)
}

/// Corner displacements of one mesh level.
struct Level {
    n: usize,
    /// Finite strain, at every load factor of [`LOADS`].
    finite: Vec<f64>,
    /// Small strain at the full load (scale by the load factor for other loads).
    linear: f64,
}

fn solve_level(n: usize) -> Level {
    solve_level_of(n, CellType::Hex20)
}

fn solve_level_of(n: usize, ct: CellType) -> Level {
    let mesh = cook_mesh_of(n, ct);
    let law = HyperelasticLaw::NeoHookean(NeoHookean {
        mu: YOUNG / (2.0 * (1.0 + POISSON)),
        kappa: YOUNG / (3.0 * (1.0 - 2.0 * POISSON)),
        volumetric: Volumetric::Quadratic,
    });
    let region = FiniteRegionSpec {
        group: "domain".into(),
        law,
        alpha: 0.0,
        t_ref: 0.0,
        body_force: [0.0; 3],
    };
    let model = FiniteStrainModel::new(&mesh, &[region], &bcs()).unwrap();
    let corner = model.nearest_node(CORNER);
    let x = model.coords[corner];
    assert!((0..3).all(|i| (x[i] - CORNER[i]).abs() < 1e-9), "corner node at {x:?}");
    let problem = FiniteStrainProblem::new(model, LoadStepParams::default());
    let path = problem.solve(&LOADS).unwrap();
    let finite = path.states.iter().map(|s| s.u[3 * corner + 1]).collect();
    let linear = linear_displacement(&mesh)[3 * corner + 1];
    let increments: usize = path.steps.iter().map(|s| s.increments).sum();
    let newton: usize = path.steps.iter().map(|s| s.newton_iterations).sum();
    eprintln!(
        "Cook {n:>2}×{n:<2} {ct}: {} unknowns, {increments} increments, {newton} Newton \
         iterations; corner v: finite {:.6} mm, linear {:.6} mm",
        problem.model.n_unknowns(),
        path.states.last().unwrap().u[3 * corner + 1],
        linear
    );
    Level { n, finite, linear }
}

/// Richardson extrapolation from three levels with halved mesh size: the observed order and
/// the extrapolated value.
fn richardson(a: f64, b: f64, c: f64) -> (f64, f64) {
    let order = ((b - a) / (c - b)).log2();
    (order, c + (c - b) / (2f64.powf(order) - 1.0))
}

/// Checks that the finite-strain corner displacements at full load converge: successive
/// differences of one sign, each less than 0.6 of the previous one, an observed order above
/// 0.8 and the finest level within 0.5 % of the Richardson value of the last three. Returns
/// the extrapolated value.
fn check_convergence(levels: &[Level]) -> f64 {
    let fin: Vec<f64> = levels.iter().map(|l| *l.finite.last().unwrap()).collect();
    for l in levels {
        eprintln!(
            "n = {:>2}: finite {:.6}, linear {:.6}, finite/linear {:.4}",
            l.n,
            l.finite.last().unwrap(),
            l.linear,
            l.finite.last().unwrap() / l.linear
        );
    }
    let diffs: Vec<f64> = fin.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!("successive differences (finite strain): {diffs:?}");
    for w in diffs.windows(2) {
        assert!(w[0] * w[1] > 0.0 && w[1].abs() < 0.6 * w[0].abs(), "{diffs:?}");
    }
    let k = fin.len();
    let (order, extrapolated) = richardson(fin[k - 3], fin[k - 2], fin[k - 1]);
    let gap = (fin[k - 1] - extrapolated).abs() / extrapolated.abs();
    eprintln!(
        "finite strain: observed order {order:.3}, extrapolated {extrapolated:.6} mm, finest \
         off by {:.4} %",
        100.0 * gap
    );
    assert!(order > 0.8, "observed order {order}");
    assert!(gap < 5e-3, "finest {} vs extrapolated {extrapolated}", fin[k - 1]);
    extrapolated
}

#[test]
fn cook_membrane_converges_and_departs_from_small_strain() {
    let levels: Vec<Level> = [4, 8, 16].into_iter().map(solve_level).collect();
    let extrapolated = check_convergence(&levels);
    // An independent discretization (Tet10, six per cube, with curved mapped edges) agrees.
    let tet = *solve_level_of(8, CellType::Tet10).finite.last().unwrap();
    let gap = (tet - extrapolated).abs() / extrapolated;
    eprintln!("Tet10 8×8: {tet:.6} mm, {:.3} % from the Hex20 extrapolation", 100.0 * gap);
    assert!(gap < 1e-2, "Tet10 {tet} vs Hex20 extrapolated {extrapolated}");

    let finest = levels.last().unwrap();
    // Large deformation: the corner moves by close to a third of the panel's 60 mm height.
    let v = *finest.finite.last().unwrap();
    assert!(v > 15.0 && v < 45.0, "corner displacement {v}");
    for l in &levels {
        // Small load: the linear answer scaled by the load factor, up to terms of relative
        // size |u|/L ~ 1e-4 · 32 mm / 50 mm.
        let small = l.finite[0] / (LOADS[0] * l.linear);
        // Full load: far from it.
        let full = l.finite.last().unwrap() / l.linear;
        eprintln!(
            "n = {:>2}: finite/linear at F = {} N: {small:.7}, at F = {FORCE} N: {full:.4}",
            l.n,
            LOADS[0] * FORCE
        );
        assert!((small - 1.0).abs() < 2e-4, "small load ratio {small}");
        assert!((full - 1.0).abs() > 0.05, "full load ratio {full}");
    }
    // Along the path the corner moves up monotonically while the secant stiffness grows: the
    // ratio v(s) / (s v_lin) falls from 1 step by step.
    let path = &finest.finite;
    let secant: Vec<f64> = path.iter().zip(LOADS).map(|(v, s)| v / (s * finest.linear)).collect();
    eprintln!("finest mesh, v(s) / (s v_lin) along the path: {secant:?}");
    assert!(path.windows(2).all(|w| w[1] > w[0]), "{path:?}");
    assert!(secant.windows(2).all(|w| w[1] < w[0]), "{secant:?}");
}

/// The small-strain model against the published linear value of the same setting: very fine
/// quadratic meshes give 32.20–32.28 mm (module docs). The corner singularities at the clamped
/// edge slow the convergence (observed order about 1.1–1.2), so 64 × 64 cells are used.
#[test]
fn small_strain_cook_matches_the_published_value() {
    let v: Vec<f64> = [16, 32, 64]
        .into_iter()
        .map(|n| {
            let mesh = cook_mesh(n);
            let corner = mesh
                .coords
                .iter()
                .position(|x| (0..3).all(|i| (x[i] - CORNER[i]).abs() < 1e-9))
                .unwrap();
            linear_displacement(&mesh)[3 * corner + 1]
        })
        .collect();
    let (order, extrapolated) = richardson(v[0], v[1], v[2]);
    eprintln!(
        "small strain: corner v {v:?} mm (16², 32², 64²), observed order {order:.3}, \
         extrapolated {extrapolated:.4} mm; published 32.20–32.28 mm"
    );
    assert!(v.windows(2).all(|w| w[1] > w[0]), "{v:?}");
    assert!((v[2] - 32.24).abs() < 0.1, "64 × 64: {} mm", v[2]);
    assert!((extrapolated - 32.24).abs() < 0.1, "extrapolated: {extrapolated} mm");
}

/// The next refinements: Hex20 at 32 × 32 continues the sequence of the default test and lies
/// within 0.05 % of the value extrapolated from its three coarser meshes, and Tet10 at 16 × 16
/// lies within 0.3 % of it. About 30 s in release. Measured: Hex20 32 × 32 17.891706 mm
/// (extrapolated from 4–16: 17.893006 mm; from 8–32: 17.896631 mm, observed order 1.80);
/// Tet10 8 × 8 17.800683 mm, 16 × 16 17.871343 mm.
#[test]
#[ignore = "about 30 s in release; run with --ignored"]
fn cook_membrane_finest_level() {
    let levels: Vec<Level> = [4, 8, 16, 32].into_iter().map(solve_level).collect();
    let predicted = check_convergence(&levels[..3]);
    let extrapolated = check_convergence(&levels);
    let v = *levels[3].finite.last().unwrap();
    assert!((v - predicted).abs() < 5e-4 * predicted, "32 × 32: {v} vs predicted {predicted}");
    let tet = *solve_level_of(16, CellType::Tet10).finite.last().unwrap();
    let gap = (tet - extrapolated).abs() / extrapolated;
    eprintln!("Tet10 16×16: {tet:.6} mm, {:.3} % from the Hex20 extrapolation", 100.0 * gap);
    assert!(gap < 3e-3, "Tet10 {tet} vs Hex20 extrapolated {extrapolated}");
}
