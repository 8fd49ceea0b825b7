//! Quadrature exactness on distorted physical elements: the rule of degree p must integrate
//! every monomial x^a y^b z^c of total degree ≤ p exactly over an affinely mapped simplex or
//! prism, and over a trilinearly / quadratically mapped cell once the degree is raised by the
//! polynomial degree the map adds. The reference value comes from a rule of much higher
//! degree, itself checked against closed forms in the unit tests.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas

use gradfem_mesh::{
    CellType, ElementTable, det3, jacobian, measure_density, quadrature, reference_measure,
    reference_nodes,
};
use rstest::rstest;

/// ∫_K f(x) dx over the cell with node coordinates `coords`, using the rule of `degree`.
fn integrate(ct: CellType, coords: &[[f64; 3]], degree: usize, f: &dyn Fn([f64; 3]) -> f64) -> f64 {
    let t = ElementTable::new(ct, degree);
    let mut s = 0.0;
    for q in 0..t.n_points() {
        let mut x = [0.0; 3];
        for (a, n) in t.shape(q).iter().enumerate() {
            for k in 0..3 {
                x[k] += n * coords[a][k];
            }
        }
        s += t.weights[q] * f(x) * measure_density(ct.dim(), t.grad(q), coords);
    }
    s
}

fn monomials(dim: usize, p: usize) -> Vec<[i32; 3]> {
    let mut v = Vec::new();
    for a in 0..=p as i32 {
        for b in 0..=p as i32 {
            for c in 0..=p as i32 {
                let ok = (a + b + c) as usize <= p && (dim > 1 || b == 0) && (dim > 2 || c == 0);
                if ok {
                    v.push([a, b, c]);
                }
            }
        }
    }
    v
}

fn affine(x: [f64; 3]) -> [f64; 3] {
    [
        0.4 + 1.3 * x[0] + 0.4 * x[1] - 0.3 * x[2],
        -0.2 + 0.2 * x[0] + 0.8 * x[1] + 0.35 * x[2],
        0.5 - 0.1 * x[0] + 0.3 * x[1] + 0.9 * x[2],
    ]
}

/// A smooth non-affine perturbation (applied at the nodes only, so the cell is mapped by its
/// own shape functions: trilinear for Hex8, quadratic for Tet10 ...).
fn warp(x: [f64; 3]) -> [f64; 3] {
    let y = affine(x);
    [
        y[0] + 0.08 * x[1] * x[2] - 0.05 * x[0] * x[0],
        y[1] + 0.06 * x[0] * x[2] + 0.04 * x[2] * x[2],
        y[2] - 0.07 * x[0] * x[1] + 0.03 * x[1] * x[1],
    ]
}

/// (cell, node map, how much the rule degree must grow for exactness).
#[rstest]
#[case::tet4_affine(CellType::Tet4, false, 0)]
#[case::tri3_affine(CellType::Tri3, false, 0)]
#[case::prism6_affine(CellType::Prism6, false, 0)]
#[case::line2_affine(CellType::Line2, false, 0)]
#[case::hex8_trilinear(CellType::Hex8, true, 2)] // det J: degree 2 per direction
#[case::quad4_bilinear(CellType::Quad4, true, 1)]
#[case::tet10_quadratic(CellType::Tet10, true, 0)] // degree of x^p grows to 2p; handled below
fn rule_of_degree_p_is_exact_on_distorted_cells(
    #[case] ct: CellType,
    #[case] warped: bool,
    #[case] extra: usize,
) {
    let map = |x: [f64; 3]| {
        let mut y = if warped { warp(x) } else { affine(x) };
        for v in &mut y[ct.dim()..] {
            *v = 0.0;
        }
        // 2D/1D cells stay in their plane/line so that det J is the measure density.
        y
    };
    let coords: Vec<[f64; 3]> = reference_nodes(ct).iter().map(|x| map(*x)).collect();
    for p in 0..=6 {
        let degree = if ct == CellType::Tet10 { 2 * p + 3 } else { p + extra };
        let reference_degree = if ct == CellType::Tet10 { 28 } else { 26 };
        for e in monomials(ct.dim(), p) {
            let f = |x: [f64; 3]| x[0].powi(e[0]) * x[1].powi(e[1]) * x[2].powi(e[2]);
            let got = integrate(ct, &coords, degree, &f);
            let want = integrate(ct, &coords, reference_degree, &f);
            assert!(
                (got - want).abs() <= 1e-12 * want.abs().max(1e-3),
                "{ct}: monomial {e:?} with degree {degree}: {got} vs {want}"
            );
        }
    }
}

/// A too-low degree is detectably wrong on the distorted hex (the test above can fail).
#[test]
fn too_low_degree_is_not_exact_on_trilinear_hex() {
    let ct = CellType::Hex8;
    let coords: Vec<[f64; 3]> = reference_nodes(ct).iter().map(|x| warp(*x)).collect();
    let f = |x: [f64; 3]| x[0].powi(3) * x[1];
    let got = integrate(ct, &coords, 1, &f);
    let want = integrate(ct, &coords, 26, &f);
    assert!((got - want).abs() > 1e-6, "{got} vs {want}");
}

/// Volume of an affinely mapped cell = reference measure × det A, for every volume type.
#[rstest]
fn affine_volume(
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
    let coords: Vec<[f64; 3]> = reference_nodes(ct).iter().map(|x| affine(*x)).collect();
    let a = [[1.3, 0.4, -0.3], [0.2, 0.8, 0.35], [-0.1, 0.3, 0.9]];
    let want = reference_measure(ct) * det3(&a);
    for degree in [1, 2, 5] {
        let got = integrate(ct, &coords, degree, &|_| 1.0);
        assert!((got - want).abs() < 1e-13, "{ct} degree {degree}: {got} vs {want}");
    }
    let t = quadrature(ct, 2);
    let mut dn = vec![[0.0; 3]; ct.n_nodes()];
    gradfem_mesh::shape_gradients_into(ct, t.points[0], &mut dn);
    assert!((det3(&jacobian(&dn, &coords)) - det3(&a)).abs() < 1e-13);
}
