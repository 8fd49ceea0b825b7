//! Small linear-algebra helpers generic over the scalar, used by the generic (dual-number)
//! element routines of every field. The f64 hot paths use `gradfem_mesh::geometry` instead.

use num_dual::DualNum;

/// J\[i\]\[k\] = Σ_a x_a\[i\] ∂N_a/∂ξ_k.
pub fn jacobian<D: DualNum<Primitive = f64> + Copy>(dn: &[[f64; 3]], x: &[[D; 3]]) -> [[D; 3]; 3] {
    let mut j = [[D::from(0.0); 3]; 3];
    for (g, xa) in dn.iter().zip(x) {
        for i in 0..3 {
            for k in 0..3 {
                j[i][k] += xa[i] * g[k];
            }
        }
    }
    j
}

/// Determinant and inverse of a 3×3 matrix; `None` when singular.
pub fn inverse<D: DualNum<Primitive = f64> + Copy>(j: &[[D; 3]; 3]) -> Option<([[D; 3]; 3], D)> {
    let c00 = j[1][1] * j[2][2] - j[1][2] * j[2][1];
    let c01 = j[1][2] * j[2][0] - j[1][0] * j[2][2];
    let c02 = j[1][0] * j[2][1] - j[1][1] * j[2][0];
    let det = j[0][0] * c00 + j[0][1] * c01 + j[0][2] * c02;
    if det.re() == 0.0 || !det.re().is_finite() {
        return None;
    }
    let inv_det = det.recip();
    let inv = [
        [
            c00 * inv_det,
            (j[0][2] * j[2][1] - j[0][1] * j[2][2]) * inv_det,
            (j[0][1] * j[1][2] - j[0][2] * j[1][1]) * inv_det,
        ],
        [
            c01 * inv_det,
            (j[0][0] * j[2][2] - j[0][2] * j[2][0]) * inv_det,
            (j[0][2] * j[1][0] - j[0][0] * j[1][2]) * inv_det,
        ],
        [
            c02 * inv_det,
            (j[0][1] * j[2][0] - j[0][0] * j[2][1]) * inv_det,
            (j[0][0] * j[1][1] - j[0][1] * j[1][0]) * inv_det,
        ],
    ];
    Some((inv, det))
}

/// Physical gradients ∇N_a = J⁻ᵀ ∂N_a/∂ξ of a volume cell; returns det J.
pub fn physical_gradients<D: DualNum<Primitive = f64> + Copy>(
    dn: &[[f64; 3]],
    x: &[[D; 3]],
    out: &mut [[D; 3]],
) -> D {
    let j = jacobian(dn, x);
    let Some((inv, det)) = inverse(&j) else {
        out.iter_mut().for_each(|g| *g = [D::from(f64::NAN); 3]);
        return D::from(0.0);
    };
    for (o, g) in out.iter_mut().zip(dn) {
        // (J⁻ᵀ g)_i = Σ_k inv[k][i] g_k
        for i in 0..3 {
            o[i] = inv[0][i] * g[0] + inv[1][i] * g[1] + inv[2][i] * g[2];
        }
    }
    det
}

/// Area density |∂x/∂ξ × ∂x/∂η| of a surface cell.
pub fn area_density<D: DualNum<Primitive = f64> + Copy>(dn: &[[f64; 3]], x: &[[D; 3]]) -> D {
    let j = jacobian(dn, x);
    let a = [j[0][0], j[1][0], j[2][0]];
    let b = [j[0][1], j[1][1], j[2][1]];
    let c = [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
    (c[0] * c[0] + c[1] * c[1] + c[2] * c[2]).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_of_a_general_matrix() {
        let j = [[2.0, 1.0, 0.5], [0.1, 3.0, 0.2], [0.3, 0.4, 4.0]];
        let (inv, det) = inverse(&j).unwrap();
        for i in 0..3 {
            for k in 0..3 {
                let p: f64 = (0..3).map(|m| j[i][m] * inv[m][k]).sum();
                assert!((p - if i == k { 1.0 } else { 0.0 }).abs() < 1e-14);
            }
        }
        assert!((det - 23.07).abs() < 1e-12, "{det}");
        assert!(inverse(&[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 0.0, 1.0]]).is_none());
    }
}
