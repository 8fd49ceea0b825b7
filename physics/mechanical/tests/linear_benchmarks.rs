//! Linear thermo-elasticity against closed-form solutions: patch tests (uniaxial stress with a
//! uniform thermal strain, reproduced exactly on distorted cells), the thermal expansion of a
//! free and of an axially fixed bar (data/benchmarks/README.md §7) and the Lamé thick-walled
//! cylinder under internal pressure (§5), solved with the solvers crate.

use gradfem_mechanical::linear::objective::{ObjectiveKind, ObjectiveTerm, evaluate};
use gradfem_mechanical::linear::{BcKind, BcSpec, LinearElasticModel, RegionSpec};
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_mesh::{CellBlock, CellId, CellType, Mesh};
use gradfem_solvers::assembly::AssemblyPattern;
use gradfem_solvers::linear::{CholeskySolver, LinearSolver};
use rstest::rstest;

/// Solve the linear problem: K Δu = −R(u₀) with u₀ the prescribed values; returns the full u.
fn solve(m: &LinearElasticModel) -> Vec<f64> {
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

/// A box mesh of `ct` (Prism6: hexes split in two) with interior nodes moved, boundary planes
/// kept flat.
fn box_with_moved_interior(ct: CellType, lengths: [f64; 3], divisions: [usize; 3]) -> Mesh {
    let base = if ct == CellType::Prism6 { CellType::Hex8 } else { ct };
    let mut mesh = box_mesh(&BoxSpec { origin: [0.0; 3], lengths, divisions, cell_type: base });
    if ct == CellType::Prism6 {
        let hexes = mesh.blocks[0].clone();
        let mut prisms = CellBlock::new(CellType::Prism6);
        for (i, h) in hexes.cells().enumerate() {
            let t = 1_000_000 + 2 * i as u64;
            prisms.push(&[h[0], h[1], h[2], h[4], h[5], h[6]], t);
            prisms.push(&[h[0], h[2], h[3], h[4], h[6], h[7]], t + 1);
        }
        let n = prisms.len();
        mesh.blocks[0] = prisms;
        let domain = mesh.groups.iter_mut().find(|g| g.name == "domain").unwrap();
        domain.cells = (0..n).map(|index| CellId { block: 0, index }).collect();
    }
    let h = (0..3).map(|d| lengths[d] / divisions[d] as f64).fold(f64::INFINITY, f64::min);
    for p in &mut mesh.coords {
        let inside = (0..3).all(|d| p[d] > 1e-12 && p[d] < lengths[d] - 1e-12);
        if inside {
            let (x, y, z) = (p[0], p[1], p[2]);
            p[0] += 0.15 * h * (7.0 * y + 3.0 * z).sin();
            p[1] += 0.12 * h * (5.0 * x - 2.0 * z).cos();
            p[2] += 0.1 * h * (4.0 * x + 6.0 * y).sin();
        }
    }
    mesh
}

const E: f64 = 160e9;
const NU: f64 = 0.22;
const ALPHA: f64 = 2.6e-6;
const DT: f64 = 100.0;

fn bar(ct: CellType, bcs: &[BcSpec], t: f64) -> LinearElasticModel {
    let mesh = box_with_moved_interior(ct, [1.0, 0.3, 0.2], [4, 2, 2]);
    let mut m = LinearElasticModel::new(
        &mesh,
        &[RegionSpec {
            group: "domain".into(),
            young: E,
            poisson: NU,
            alpha: ALPHA,
            t_ref: 300.0,
            body_force: [0.0; 3],
        }],
        bcs,
    )
    .unwrap();
    m.set_temperature(Some(vec![t; m.n_nodes()])).unwrap();
    m
}

fn roller(group: &str, c: usize) -> BcSpec {
    BcSpec { group: group.into(), kind: BcKind::Roller { components: vec![c] } }
}

#[rstest]
fn uniaxial_stress_with_thermal_strain_is_reproduced_exactly(
    #[values(
        CellType::Tet4,
        CellType::Tet10,
        CellType::Hex8,
        CellType::Hex20,
        CellType::Hex27,
        CellType::Prism6
    )]
    ct: CellType,
) {
    // σ_xx = s on xmax, symmetry rollers: u = (s/E x, −ν s/E y, −ν s/E z) + αΔT x, exactly in
    // the span of every element, so the discrete solution is exact on distorted interiors.
    let s = 3.0e7;
    let m = bar(
        ct,
        &[
            roller("xmin", 0),
            roller("ymin", 1),
            roller("zmin", 2),
            BcSpec { group: "xmax".into(), kind: BcKind::Traction { traction: [s, 0.0, 0.0] } },
        ],
        300.0 + DT,
    );
    let u = solve(&m);
    let th = ALPHA * DT;
    for (n, p) in m.coords.iter().enumerate() {
        let exact = [(s / E + th) * p[0], (-NU * s / E + th) * p[1], (-NU * s / E + th) * p[2]];
        for i in 0..3 {
            assert!(
                (u[3 * n + i] - exact[i]).abs() < 1e-9 * 3e-4,
                "{ct} node {n} u{i}: {} vs {}",
                u[3 * n + i],
                exact[i]
            );
        }
    }
    let st = m.stress(&u);
    for q in st.qp.iter().chain(&st.nodal) {
        let expect = [s, 0.0, 0.0, 0.0, 0.0, 0.0];
        for k in 0..6 {
            assert!((q[k] - expect[k]).abs() < 1e-6 * s, "{ct}: stress {q:?}");
        }
    }
    assert!(st.qp_von_mises.iter().all(|v| (v - s).abs() < 1e-6 * s));
    // The support on xmin carries the load: reaction = −s · area.
    let reac = m.reactions(&u);
    assert!((reac[0][0] + s * 0.3 * 0.2).abs() < 1e-8 * s * 0.06, "{ct}: {:?}", reac[0]);
}

#[rstest]
fn free_bar_expands_without_stress(
    #[values(CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Prism6)]
    ct: CellType,
) {
    let m = bar(ct, &[roller("xmin", 0), roller("ymin", 1), roller("zmin", 2)], 300.0 + DT);
    let u = solve(&m);
    let st = m.stress(&u);
    let max = st.qp.iter().flat_map(|s| s.iter()).map(|v| v.abs()).fold(0.0, f64::max);
    // Stress-free to solver precision (the scale is E α ΔT = 41.6 MPa).
    assert!(max < 1e-6 * E * ALPHA * DT, "{ct}: max |σ| = {max}");
    // Elongation δ = α ΔT L = 2.6e-4 m for L = 1.
    let end = m.coords.iter().position(|p| (p[0] - 1.0).abs() < 1e-12).unwrap();
    assert!((u[3 * end] - 2.6e-4).abs() < 1e-12, "{ct}: {}", u[3 * end]);
}

#[rstest]
fn axially_fixed_bar_carries_minus_e_alpha_delta_t(
    #[values(CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Prism6)]
    ct: CellType,
) {
    let m = bar(
        ct,
        &[roller("xmin", 0), roller("xmax", 0), roller("ymin", 1), roller("zmin", 2)],
        300.0 + DT,
    );
    let u = solve(&m);
    let st = m.stress(&u);
    // data/benchmarks/README.md §7: σ_xx = −E α ΔT = −41.6 MPa, σ_yy = σ_zz = 0,
    // lateral strain (1 + ν) α ΔT = 3.172e-4.
    for s in &st.qp {
        assert!((s[0] + 41.6e6).abs() < 1e-6 * 41.6e6, "{ct}: σ_xx = {}", s[0]);
        for k in 1..6 {
            assert!(s[k].abs() < 1e-6 * 41.6e6, "{ct}: {s:?}");
        }
    }
    let corner = m
        .coords
        .iter()
        .position(|p| (p[1] - 0.3).abs() < 1e-12 && (p[2] - 0.2).abs() < 1e-12)
        .unwrap();
    assert!((u[3 * corner + 1] / 0.3 - 3.172e-4).abs() < 1e-12, "{}", u[3 * corner + 1] / 0.3);
    // End reactions F = E α ΔT A, compressive: the supports push the bar inwards.
    let reac = m.reactions(&u);
    let f = E * ALPHA * DT * 0.3 * 0.2;
    assert!((reac[0][0] - f).abs() < 1e-8 * f, "{ct}: xmin {:?}", reac[0]);
    assert!((reac[1][0] + f).abs() < 1e-8 * f, "{ct}: xmax {:?}", reac[1]);
}

/// A quarter of the cylinder a ≤ r ≤ b, 0 ≤ θ ≤ π/2, 0 ≤ z ≤ h, mapped from a box in
/// (r, θ, z): xmin = inner surface, xmax = outer, ymin = the y = 0 plane, ymax = the x = 0 plane.
fn quarter_cylinder(ct: CellType, a: f64, b: f64, h: f64, divisions: [usize; 3]) -> Mesh {
    let mut mesh = box_mesh(&BoxSpec {
        origin: [a, 0.0, 0.0],
        lengths: [b - a, std::f64::consts::FRAC_PI_2, h],
        divisions,
        cell_type: ct,
    });
    for p in &mut mesh.coords {
        let (r, t) = (p[0], p[1]);
        *p = [r * t.cos(), r * t.sin(), p[2]];
    }
    mesh
}

#[rstest]
#[case(CellType::Hex20, [6, 8, 1], 1e-4, 2e-2, 1.5e-2)]
#[case(CellType::Hex20, [12, 8, 1], 2e-5, 2e-2, 5e-3)]
#[case(CellType::Hex27, [6, 8, 1], 1e-4, 2e-2, 1.5e-2)]
#[case(CellType::Tet10, [6, 8, 1], 3e-3, 8e-2, 5e-2)]
fn lame_cylinder_under_internal_pressure(
    #[case] ct: CellType,
    #[case] divisions: [usize; 3],
    #[case] tol_u: f64,
    #[case] tol_s: f64,
    #[case] tol_qp: f64,
) {
    // data/benchmarks/README.md §5, plane strain: a = 0.1, b = 0.2, p = 100 MPa,
    // E = 210 GPa, ν = 0.3.
    let (a, b, p) = (0.1, 0.2, 100e6);
    let mesh = quarter_cylinder(ct, a, b, 0.02, divisions);
    let m = LinearElasticModel::new(
        &mesh,
        &[RegionSpec {
            group: "domain".into(),
            young: 210e9,
            poisson: 0.3,
            alpha: 0.0,
            t_ref: 0.0,
            body_force: [0.0; 3],
        }],
        &[
            BcSpec { group: "xmin".into(), kind: BcKind::Pressure { pressure: p } },
            roller("ymin", 1),
            roller("ymax", 0),
            roller("zmin", 2),
            roller("zmax", 2),
        ],
    )
    .unwrap();
    let u = solve(&m);
    let st = m.stress(&u);
    let ur_exact = |r: f64| {
        let (ca, cb) = (p * a * a / (b * b - a * a), p * a * a * b * b / (b * b - a * a));
        (1.3 / 210e9) * ((1.0 - 0.6) * ca * r + cb / r)
    };
    let mut worst_u = 0.0f64;
    let mut worst_s = 0.0f64;
    for (n, x) in m.coords.iter().enumerate() {
        let r = (x[0] * x[0] + x[1] * x[1]).sqrt();
        let (c, s) = (x[0] / r, x[1] / r);
        let ur = c * u[3 * n] + s * u[3 * n + 1];
        worst_u = worst_u.max((ur - ur_exact(r)).abs() / ur_exact(b));
        // Nodal stresses at r = 0.15 (interior): σ_r = −25.926 MPa, σ_θ = 92.593 MPa,
        // σ_z = 2νA = 20 MPa.
        if (r - 0.15).abs() < 1e-9 {
            let q = st.nodal[n];
            let sr = q[0] * c * c + 2.0 * q[5] * s * c + q[1] * s * s;
            let sth = q[0] * s * s - 2.0 * q[5] * s * c + q[1] * c * c;
            for (got, want) in [(sr, -25.926e6), (sth, 92.593e6), (q[2], 20.0e6)] {
                worst_s = worst_s.max((got - want).abs() / 92.593e6);
            }
        }
    }
    // Quadrature-point stresses against σ_r = A − B/r², σ_θ = A + B/r², σ_z = 2νA.
    let (ca, cb) = (p * a * a / (b * b - a * a), p * a * a * b * b / (b * b - a * a));
    let mut worst_qp = 0.0f64;
    for (x, q) in m.qp_coordinates().iter().zip(&st.qp) {
        let r = (x[0] * x[0] + x[1] * x[1]).sqrt();
        let (c, s) = (x[0] / r, x[1] / r);
        let sr = q[0] * c * c + 2.0 * q[5] * s * c + q[1] * s * s;
        let sth = q[0] * s * s - 2.0 * q[5] * s * c + q[1] * c * c;
        for (got, want) in [(sr, ca - cb / (r * r)), (sth, ca + cb / (r * r)), (q[2], 0.6 * ca)] {
            worst_qp = worst_qp.max((got - want).abs() / p);
        }
    }
    eprintln!(
        "{ct} {divisions:?}: worst u_r error {worst_u:.3e}, nodal stress error at r = 0.15 \
         {worst_s:.3e}, quadrature-point stress error {worst_qp:.3e} (relative to p)"
    );
    assert!(worst_qp < tol_qp, "{ct}: worst quadrature-point stress error {worst_qp:.3e}");
    assert!(worst_u < tol_u, "{ct}: worst relative u_r error {worst_u:.3e}");
    assert!(worst_s > 0.0 && worst_s < tol_s, "{ct}: worst relative stress error {worst_s:.3e}");
    // The inner radial displacement through the surface-average objective: 9.0794e-5 m at a
    // (the average of u·e_x over the inner surface is u_r(a) ∫cos θ dθ / (π/2) = u_r(a)·2/π).
    let terms = [ObjectiveTerm {
        weight: 1.0,
        kind: ObjectiveKind::AverageDisplacement {
            group: "xmin".into(),
            direction: [1.0, 0.0, 0.0],
        },
    }];
    let avg = evaluate(&m, &terms, &u, false).unwrap().value;
    eprintln!("{ct}: inner-surface average u_x {avg:.6e}");
    let want = 9.0794e-5 * 2.0 / std::f64::consts::PI;
    assert!((avg - want).abs() < tol_u * want * 3.0, "{ct}: {avg} vs {want}");
}
