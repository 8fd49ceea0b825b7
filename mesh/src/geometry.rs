//! The isoparametric map x(ξ) = Σ_a N_a(ξ) x_a: Jacobians, physical gradients, measure
//! densities, cell and group measures, surface normals.
//!
//! Conventions: `J[i][k]` = ∂x_i/∂ξ_k = Σ_a `x_a[i]` ∂N_a/∂ξ_k; physical gradients
//! ∇N_a = J⁻ᵀ ∇_ξ N_a, i.e. ∂N_a/∂x_i = Σ_k ∂N_a/∂ξ_k `(J⁻¹)[k][i]`. The helpers take the
//! reference gradients of one point (a row of [`crate::quadrature::ElementTable::grad`]) and the
//! cell's node coordinates, and allocate nothing.

use std::sync::OnceLock;

use crate::cell::CellType;
use crate::mesh::{CellId, Mesh, PhysicalGroup};
use crate::quadrature::ElementTable;
use crate::reference::shape_gradients_into;

/// `J[i][k]` = Σ_a `x_a[i]` ∂N_a/∂ξ_k (3×3; columns k ≥ cell dim are 0).
#[inline]
pub fn jacobian(dn_ref: &[[f64; 3]], coords: &[[f64; 3]]) -> [[f64; 3]; 3] {
    assert_eq!(
        dn_ref.len(),
        coords.len(),
        "jacobian: {} shape gradients for {} node coordinates",
        dn_ref.len(),
        coords.len()
    );
    let mut j = [[0.0; 3]; 3];
    for (d, x) in dn_ref.iter().zip(coords) {
        for i in 0..3 {
            for k in 0..3 {
                j[i][k] += x[i] * d[k];
            }
        }
    }
    j
}

/// Determinant of a 3×3 matrix (cofactor expansion along the first row).
#[inline]
pub fn det3(j: &[[f64; 3]; 3]) -> f64 {
    j[0][0] * (j[1][1] * j[2][2] - j[1][2] * j[2][1])
        - j[0][1] * (j[1][0] * j[2][2] - j[1][2] * j[2][0])
        + j[0][2] * (j[1][0] * j[2][1] - j[1][1] * j[2][0])
}

/// Inverse and determinant of a 3×3 matrix (adjugate / det); `None` if det is 0 or not
/// finite.
#[inline]
pub fn inverse3(j: &[[f64; 3]; 3]) -> Option<([[f64; 3]; 3], f64)> {
    let det = det3(j);
    if det == 0.0 || !det.is_finite() {
        return None;
    }
    let r = 1.0 / det;
    let inv = [
        [
            (j[1][1] * j[2][2] - j[1][2] * j[2][1]) * r,
            (j[0][2] * j[2][1] - j[0][1] * j[2][2]) * r,
            (j[0][1] * j[1][2] - j[0][2] * j[1][1]) * r,
        ],
        [
            (j[1][2] * j[2][0] - j[1][0] * j[2][2]) * r,
            (j[0][0] * j[2][2] - j[0][2] * j[2][0]) * r,
            (j[0][2] * j[1][0] - j[0][0] * j[1][2]) * r,
        ],
        [
            (j[1][0] * j[2][1] - j[1][1] * j[2][0]) * r,
            (j[0][1] * j[2][0] - j[0][0] * j[2][1]) * r,
            (j[0][0] * j[1][1] - j[0][1] * j[1][0]) * r,
        ],
    ];
    Some((inv, det))
}

/// Physical gradients ∇N_a = J⁻ᵀ ∇_ξ N_a of a cell whose dimension `dim` equals that of the
/// space it is mapped in (3D cells; 2D cells of a 2D mesh in the z = 0 plane, using the x-y
/// block of J; 1D cells on the x axis), written into `dn_phys` (components ≥ `dim` set to 0).
/// Returns the signed det J of that `dim × dim` block.
///
/// If det J is 0 or not finite the gradients are undefined: `dn_phys` is filled with NaN and
/// the determinant is returned, so the caller (which knows the cell id) can report it.
#[inline]
pub fn physical_gradients_into(
    dim: usize,
    dn_ref: &[[f64; 3]],
    coords: &[[f64; 3]],
    dn_phys: &mut [[f64; 3]],
) -> f64 {
    assert_eq!(
        dn_ref.len(),
        dn_phys.len(),
        "physical_gradients_into: {} reference gradients, {} outputs",
        dn_ref.len(),
        dn_phys.len()
    );
    let j = jacobian(dn_ref, coords);
    let nan = |dn_phys: &mut [[f64; 3]]| dn_phys.iter_mut().for_each(|g| *g = [f64::NAN; 3]);
    match dim {
        3 => {
            let Some((inv, det)) = inverse3(&j) else {
                nan(dn_phys);
                return det3(&j);
            };
            for (g, d) in dn_phys.iter_mut().zip(dn_ref) {
                for i in 0..3 {
                    g[i] = d[0] * inv[0][i] + d[1] * inv[1][i] + d[2] * inv[2][i];
                }
            }
            det
        }
        2 => {
            let det = j[0][0] * j[1][1] - j[0][1] * j[1][0];
            if det == 0.0 || !det.is_finite() {
                nan(dn_phys);
                return det;
            }
            let r = 1.0 / det;
            let inv = [[j[1][1] * r, -j[0][1] * r], [-j[1][0] * r, j[0][0] * r]];
            for (g, d) in dn_phys.iter_mut().zip(dn_ref) {
                g[0] = d[0] * inv[0][0] + d[1] * inv[1][0];
                g[1] = d[0] * inv[0][1] + d[1] * inv[1][1];
                g[2] = 0.0;
            }
            det
        }
        1 => {
            let det = j[0][0];
            if det == 0.0 || !det.is_finite() {
                nan(dn_phys);
                return det;
            }
            for (g, d) in dn_phys.iter_mut().zip(dn_ref) {
                *g = [d[0] / det, 0.0, 0.0];
            }
            det
        }
        0 => 1.0,
        _ => panic!("physical_gradients_into: dimension {dim} is not 0..=3"),
    }
}

#[inline]
fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
}

#[inline]
fn norm(a: [f64; 3]) -> f64 {
    (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]).sqrt()
}

#[inline]
fn column(j: &[[f64; 3]; 3], k: usize) -> [f64; 3] {
    [j[0][k], j[1][k], j[2][k]]
}

/// Measure density dμ/dξ of a cell of dimension `cell_dim` embedded in 3D:
/// |det J| (volume), |∂x/∂ξ × ∂x/∂η| (surface), |∂x/∂ξ| (line), 1 (point).
#[inline]
pub fn measure_density(cell_dim: usize, dn_ref: &[[f64; 3]], coords: &[[f64; 3]]) -> f64 {
    if cell_dim == 0 {
        return 1.0;
    }
    let j = jacobian(dn_ref, coords);
    match cell_dim {
        3 => det3(&j).abs(),
        2 => norm(cross(column(&j, 0), column(&j, 1))),
        1 => norm(column(&j, 0)),
        _ => panic!("measure_density: dimension {cell_dim} is not 0..=3"),
    }
}

/// The quadrature degree that integrates the measure density of `ct` exactly where it is a
/// polynomial: det J has total degree 0 (`Tri3`, `Tet4`), 3 (`Tet10`; `Prism6`: ≤ 2 in ζ and
/// ≤ 1 in (ξ, η)), per-direction degree 2 (`Hex8`) and ≤ 6 (`Hex20`, `Hex27`, each Jacobian
/// column being of per-direction degree ≤ 2). Surface and line densities are square roots and
/// are polynomial only for flat/straight cells; those of curved or warped cells (`Line3`,
/// `Tri6`, `Quad*`) get degree 8 (a 5-point Gauss rule per direction: relative error ~1e-9 for
/// a `Line3` bowed by 5 % of its length, ~1e-3 for a strongly curved one).
fn measure_degree(ct: CellType) -> usize {
    use CellType::*;
    match ct {
        Point1 => 0,
        Line2 | Tri3 | Tet4 => 1,
        Hex8 => 2,
        Tet10 | Prism6 => 3,
        Hex20 | Hex27 => 6,
        Line3 | Tri6 | Quad4 | Quad8 | Quad9 => 8,
    }
}

fn type_index(ct: CellType) -> usize {
    CellType::ALL.iter().position(|&c| c == ct).expect("every cell type is in ALL")
}

/// The table used for measures of `ct`, built once per process.
pub(crate) fn measure_table(ct: CellType) -> &'static ElementTable {
    static TABLES: [OnceLock<ElementTable>; 14] = [const { OnceLock::new() }; 14];
    TABLES[type_index(ct)].get_or_init(|| ElementTable::new(ct, measure_degree(ct)))
}

/// ∫ dμ over one cell from its node coordinates (`coords.len() == ct.n_nodes()`).
pub fn cell_measure_of(ct: CellType, coords: &[[f64; 3]]) -> f64 {
    let t = measure_table(ct);
    let d = ct.dim();
    (0..t.n_points()).map(|q| t.weights[q] * measure_density(d, t.grad(q), coords)).sum()
}

fn with_coords<R>(mesh: &Mesh, id: CellId, f: impl FnOnce(CellType, &[[f64; 3]]) -> R) -> R {
    let ct = mesh.cell_type(id);
    let mut buf = [[0.0; 3]; 27];
    let nodes = mesh.cell_nodes(id);
    for (b, &n) in buf.iter_mut().zip(nodes) {
        *b = mesh.coords[n];
    }
    f(ct, &buf[..nodes.len()])
}

/// Volume / area / length of one cell (unsigned), with a rule exact for the geometry order of
/// volume cells and flat/straight lower-dimensional cells (see the degree choice above).
pub fn cell_measure(mesh: &Mesh, id: CellId) -> f64 {
    with_coords(mesh, id, cell_measure_of)
}

/// Sum of [`cell_measure`] over the cells of `group`.
pub fn group_measure(mesh: &Mesh, group: &PhysicalGroup) -> f64 {
    group.cells.iter().map(|&c| cell_measure(mesh, c)).sum()
}

/// Unit right-hand normal at reference point `xi` of a surface cell (∂x/∂ξ × ∂x/∂η normalised),
/// or of a line cell in the z = 0 plane (the tangent ∂x/∂ξ turned clockwise: (t_y, -t_x, 0)
/// normalised, which is the outward normal of the boundary edges of a counter-clockwise 2D
/// cell). Returns NaN components for a degenerate cell.
pub fn surface_normal(coords: &[[f64; 3]], ct: CellType, xi: [f64; 3]) -> [f64; 3] {
    let mut dn = [[0.0; 3]; 27];
    let dn = &mut dn[..ct.n_nodes()];
    shape_gradients_into(ct, xi, dn);
    let j = jacobian(dn, coords);
    let n = match ct.dim() {
        2 => cross(column(&j, 0), column(&j, 1)),
        1 => [j[1][0], -j[0][0], 0.0],
        d => panic!("surface_normal: a {ct} has dimension {d}, expected 1 or 2"),
    };
    let l = norm(n);
    n.map(|v| v / l)
}

/// The reference coordinates ξ of physical point `p` in a volume cell of type `ct` with node
/// coordinates `coords` (inverse isoparametric map by Newton, started at the reference
/// centroid), or `None` when `p` lies outside the cell. Points within 1e-9 of the cell size
/// outside its bounding box, or within 1e-9 outside the reference cell, count as inside.
pub fn reference_coordinates(ct: CellType, coords: &[[f64; 3]], p: [f64; 3]) -> Option<[f64; 3]> {
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for xa in coords {
        for k in 0..3 {
            lo[k] = lo[k].min(xa[k]);
            hi[k] = hi[k].max(xa[k]);
        }
    }
    let tol = 1e-9 * (0..3).map(|k| hi[k] - lo[k]).fold(0.0, f64::max);
    if (0..3).any(|k| p[k] < lo[k] - tol || p[k] > hi[k] + tol) {
        return None;
    }
    let nn = ct.n_nodes();
    let lin = ct.linear();
    let mut xi: [f64; 3] = match lin {
        CellType::Tet4 => [0.25; 3],
        CellType::Prism6 => [1.0 / 3.0, 1.0 / 3.0, 0.0],
        _ => [0.0; 3],
    };
    let mut n = vec![0.0; nn];
    let mut dn = vec![[0.0; 3]; nn];
    for _ in 0..30 {
        crate::reference::shape_functions_into(ct, xi, &mut n);
        crate::reference::shape_gradients_into(ct, xi, &mut dn);
        let mut r = [0.0; 3];
        for a in 0..nn {
            for k in 0..3 {
                r[k] += n[a] * coords[a][k];
            }
        }
        for k in 0..3 {
            r[k] -= p[k];
        }
        let (inv, _) = inverse3(&jacobian(&dn, coords))?;
        let d = [0, 1, 2].map(|i| inv[i][0] * r[0] + inv[i][1] * r[1] + inv[i][2] * r[2]);
        for i in 0..3 {
            xi[i] -= d[i];
        }
        if d.iter().map(|v| v.abs()).fold(0.0, f64::max) < 1e-13 {
            break;
        }
    }
    let eps = 1e-9;
    let inside = match lin {
        CellType::Tet4 => xi.iter().all(|&v| v >= -eps) && xi[0] + xi[1] + xi[2] <= 1.0 + eps,
        CellType::Prism6 => {
            xi[0] >= -eps && xi[1] >= -eps && xi[0] + xi[1] <= 1.0 + eps && xi[2].abs() <= 1.0 + eps
        }
        _ => xi.iter().all(|v| v.abs() <= 1.0 + eps),
    };
    inside.then_some(xi)
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)] // index loops mirror the formulas
mod tests {
    use super::*;
    use crate::reference::reference_nodes;
    use rstest::rstest;

    fn affine(x: [f64; 3]) -> [f64; 3] {
        [
            0.3 + 1.2 * x[0] + 0.3 * x[1] - 0.2 * x[2],
            -1.0 + 0.1 * x[0] + 0.9 * x[1] + 0.25 * x[2],
            2.0 + 0.2 * x[0] - 0.1 * x[1] + 1.1 * x[2],
        ]
    }
    const A: [[f64; 3]; 3] = [[1.2, 0.3, -0.2], [0.1, 0.9, 0.25], [0.2, -0.1, 1.1]];

    #[rstest]
    fn affine_jacobian_inverse_and_gradients(
        #[values(
            CellType::Tet4,
            CellType::Tet10,
            CellType::Hex8,
            CellType::Hex27,
            CellType::Prism6
        )]
        ct: CellType,
    ) {
        let coords: Vec<[f64; 3]> = reference_nodes(ct).iter().map(|x| affine(*x)).collect();
        let nn = ct.n_nodes();
        let mut dn = vec![[0.0; 3]; nn];
        shape_gradients_into(ct, [0.1, 0.2, 0.3], &mut dn);
        let j = jacobian(&dn, &coords);
        for i in 0..3 {
            for k in 0..3 {
                assert!((j[i][k] - A[i][k]).abs() < 1e-13);
            }
        }
        let (inv, det) = inverse3(&j).unwrap();
        assert!((det - det3(&A)).abs() < 1e-13);
        for i in 0..3 {
            for k in 0..3 {
                let p: f64 = (0..3).map(|m| j[i][m] * inv[m][k]).sum();
                assert!((p - if i == k { 1.0 } else { 0.0 }).abs() < 1e-13);
            }
        }
        // The physical gradient of the field u(x) = g·x interpolated at the nodes is g.
        let g = [0.7, -1.3, 2.1];
        let mut dp = vec![[0.0; 3]; nn];
        let d = physical_gradients_into(3, &dn, &coords, &mut dp);
        assert!((d - det).abs() < 1e-14);
        for i in 0..3 {
            let s: f64 =
                (0..nn).map(|a| dp[a][i] * (0..3).map(|m| g[m] * coords[a][m]).sum::<f64>()).sum();
            assert!((s - g[i]).abs() < 1e-12, "{ct}: ∂u/∂x{i} = {s}");
        }
        let vol = cell_measure_of(ct, &coords);
        let want = crate::reference::reference_measure(ct) * det3(&A);
        assert!((vol - want).abs() < 1e-13, "{ct}: {vol} vs {want}");
    }

    #[test]
    fn singular_jacobian_gives_nan_gradients() {
        let coords = [[0.0; 3], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [3.0, 0.0, 0.0]];
        let mut dn = [[0.0; 3]; 4];
        shape_gradients_into(CellType::Tet4, [0.2; 3], &mut dn);
        let mut dp = [[0.0; 3]; 4];
        let det = physical_gradients_into(3, &dn, &coords, &mut dp);
        assert_eq!(det, 0.0);
        assert!(dp[0][0].is_nan());
        assert!(inverse3(&jacobian(&dn, &coords)).is_none());
    }

    #[test]
    fn two_d_gradients_and_normals() {
        // A parallelogram Quad4 in the z = 0 plane.
        let coords = [[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [3.0, 1.0, 0.0], [1.0, 1.0, 0.0]];
        let mut dn = [[0.0; 3]; 4];
        shape_gradients_into(CellType::Quad4, [0.3, -0.4, 0.0], &mut dn);
        let mut dp = [[0.0; 3]; 4];
        let det = physical_gradients_into(2, &dn, &coords, &mut dp);
        assert!((det - 0.5).abs() < 1e-14, "{det}"); // area 2 / reference area 4
        let sx: f64 = (0..4).map(|a| dp[a][0] * coords[a][0]).sum();
        let sy: f64 = (0..4).map(|a| dp[a][1] * coords[a][0]).sum();
        assert!((sx - 1.0).abs() < 1e-13 && sy.abs() < 1e-13);
        assert!((cell_measure_of(CellType::Quad4, &coords) - 2.0).abs() < 1e-13);
        let n = surface_normal(&coords, CellType::Quad4, [0.0; 3]);
        assert!((n[2] - 1.0).abs() < 1e-14);
        // Bottom edge traversed in +x: outward normal of the counter-clockwise cell is -y.
        let n = surface_normal(&coords[..2], CellType::Line2, [0.0; 3]);
        assert!((n[1] + 1.0).abs() < 1e-14 && n[0].abs() < 1e-14);
    }

    #[test]
    fn curved_line3_length() {
        // Mildly curved parabola y = a x² from -1 to 1 (exactly represented by a Line3);
        // length = √(1 + 4a²) + asinh(2a)/(2a).
        let a: f64 = 0.1;
        let coords = [[-1.0, a, 0.0], [1.0, a, 0.0], [0.0, 0.0, 0.0]];
        let exact = (1.0 + 4.0 * a * a).sqrt() + (2.0 * a).asinh() / (2.0 * a);
        let got = cell_measure_of(CellType::Line3, &coords);
        assert!((got - exact).abs() < 1e-9, "{got} vs {exact}");
    }
}
