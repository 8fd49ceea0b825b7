//! NAFEMS LE11 (data/benchmarks/README.md §3): a solid of revolution (cylinder, taper and
//! sphere) under the prescribed temperature T = r + z, u_z = 0 on the bottom and top faces.
//! Target: σ_zz at point A (r = 1, z = 0) = −105 MPa.
//!
//! The mesh is a quarter of the solid, mapped from a box in (s, θ, τ): s runs from the inner
//! to the outer boundary, θ over [0, π/2] (symmetry rollers on the x = 0 and y = 0 planes),
//! τ ∈ [0, 4] along four segments whose ends are the key points
//! A–C–E–X–H (inner: sphere r = 1, then the cylinder r = 0.7071, X at z = 1.39) and
//! B–D–F–G–I (outer: sphere r = 1.4, the taper, the cylinder r = 1), blended linearly in s.
//! Second-order cells get their mid nodes mapped too, so the spheres are curved.

use gradfem_mechanical::linear::objective::point_stress;
use gradfem_mechanical::linear::{BcKind, BcSpec, LinearElasticModel, RegionSpec};
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_mesh::{CellType, Mesh};
use gradfem_solvers::assembly::AssemblyPattern;
use gradfem_solvers::linear::{CholeskySolver, LinearSolver};
use rstest::rstest;

/// (r, z) on the inner (`outer = false`) or outer boundary at τ ∈ [0, 4].
fn boundary(outer: bool, tau: f64) -> [f64; 2] {
    let k = (tau.floor() as usize).min(3);
    let t = tau - k as f64;
    let deg = std::f64::consts::PI / 180.0;
    let r_e = std::f64::consts::FRAC_1_SQRT_2;
    let lerp = |a: [f64; 2], b: [f64; 2]| [a[0] + t * (b[0] - a[0]), a[1] + t * (b[1] - a[1])];
    if !outer {
        match k {
            0 | 1 => {
                let phi = (k as f64 + t) * 22.5 * deg;
                [phi.cos(), phi.sin()]
            }
            // E lies on the sphere r = 1 at 45°: the cylinder has radius 1/√2 (0.7071).
            2 => lerp([r_e, r_e], [r_e, 1.39]),
            _ => lerp([r_e, 1.39], [r_e, 1.79]),
        }
    } else {
        match k {
            0 => {
                let phi = t * 30.0 * deg;
                [1.4 * phi.cos(), 1.4 * phi.sin()]
            }
            1 => lerp([1.2124, 0.7], [1.1062, 1.045]),
            2 => lerp([1.1062, 1.045], [1.0, 1.39]),
            _ => lerp([1.0, 1.39], [1.0, 1.79]),
        }
    }
}

fn le11_mesh(ct: CellType, n: [usize; 3]) -> Mesh {
    let mut mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [1.0, std::f64::consts::FRAC_PI_2, 4.0],
        divisions: [n[0], n[1], 4 * n[2]],
        cell_type: ct,
    });
    for p in &mut mesh.coords {
        let (s, th, tau) = (p[0], p[1], p[2]);
        let (a, b) = (boundary(false, tau), boundary(true, tau));
        let r = a[0] + s * (b[0] - a[0]);
        let z = a[1] + s * (b[1] - a[1]);
        *p = [r * th.cos(), r * th.sin(), z];
    }
    mesh
}

#[rstest]
#[case(CellType::Hex20, [4, 6, 3], 0.02)]
#[case(CellType::Hex27, [4, 6, 3], 0.01)]
#[case(CellType::Hex20, [8, 6, 6], 0.01)]
fn nafems_le11_axial_stress_at_a(#[case] ct: CellType, #[case] n: [usize; 3], #[case] tol: f64) {
    let mesh = le11_mesh(ct, n);
    // Box sides: xmin = inner, xmax = outer, ymin = the y = 0 plane, ymax = the x = 0 plane,
    // zmin = bottom (z = 0), zmax = top (z = 1.79).
    let roller = |g: &str, c: usize| BcSpec {
        group: g.into(),
        kind: BcKind::Roller { components: vec![c] },
    };
    let mut m = LinearElasticModel::new(
        &mesh,
        &[RegionSpec {
            group: "domain".into(),
            young: 210e9,
            poisson: 0.3,
            alpha: 2.3e-4,
            t_ref: 0.0,
            body_force: [0.0; 3],
        }],
        &[roller("zmin", 2), roller("zmax", 2), roller("ymin", 1), roller("ymax", 0)],
    )
    .unwrap();
    let t = m.coords.iter().map(|p| (p[0] * p[0] + p[1] * p[1]).sqrt() + p[2]).collect();
    m.set_temperature(Some(t)).unwrap();
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
    let u = m.nodal_displacement(&r);
    let s = point_stress(&m, &u, [1.0, 0.0, 0.0]).unwrap();
    eprintln!("LE11 {ct} {n:?}: {} unknowns, σ_zz(A) = {:.3} MPa", m.n_unknowns(), s[2] / 1e6);
    assert!((s[2] + 105e6).abs() < tol * 105e6, "{ct}: σ_zz(A) = {:.3} MPa", s[2] / 1e6);
}
