//! Small linear-algebra helpers generic over the scalar, used by the generic (dual-number)
//! element routines. The f64 hot paths use `gradfem_mesh::geometry` instead.
//!
//! (The thermal crate has the same helpers; they are kept per field crate so that field crates
//! do not depend on each other.)

use num_dual::DualNum;

/// Physical gradients ∇N_a = J⁻ᵀ ∂N_a/∂ξ of a volume cell, J[i][k] = Σ_a x_a[i] ∂N_a/∂ξ_k;
/// returns det J (0, with NaN gradients, when J is singular).
pub fn physical_gradients<D: DualNum<Primitive = f64> + Copy>(
    dn: &[[f64; 3]],
    x: &[[D; 3]],
    out: &mut [[D; 3]],
) -> D {
    let mut j = [[D::from(0.0); 3]; 3];
    for (g, xa) in dn.iter().zip(x) {
        for i in 0..3 {
            for k in 0..3 {
                j[i][k] += xa[i] * g[k];
            }
        }
    }
    // Cofactors: inv = adj(J) / det.
    let c00 = j[1][1] * j[2][2] - j[1][2] * j[2][1];
    let c01 = j[1][2] * j[2][0] - j[1][0] * j[2][2];
    let c02 = j[1][0] * j[2][1] - j[1][1] * j[2][0];
    let det = j[0][0] * c00 + j[0][1] * c01 + j[0][2] * c02;
    if det.re() == 0.0 || !det.re().is_finite() {
        out.iter_mut().for_each(|g| *g = [D::from(f64::NAN); 3]);
        return D::from(0.0);
    }
    let r = det.recip();
    let inv = [
        [
            c00 * r,
            (j[0][2] * j[2][1] - j[0][1] * j[2][2]) * r,
            (j[0][1] * j[1][2] - j[0][2] * j[1][1]) * r,
        ],
        [
            c01 * r,
            (j[0][0] * j[2][2] - j[0][2] * j[2][0]) * r,
            (j[0][2] * j[1][0] - j[0][0] * j[1][2]) * r,
        ],
        [
            c02 * r,
            (j[0][1] * j[2][0] - j[0][0] * j[2][1]) * r,
            (j[0][0] * j[1][1] - j[0][1] * j[1][0]) * r,
        ],
    ];
    for (o, g) in out.iter_mut().zip(dn) {
        // (J⁻ᵀ g)_i = Σ_k inv[k][i] g_k
        for i in 0..3 {
            o[i] = inv[0][i] * g[0] + inv[1][i] * g[1] + inv[2][i] * g[2];
        }
    }
    det
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradients_of_an_affine_map() {
        // x = 2ξ, y = 3η, z = ζ + ξ/2 on the unit tet.
        let dn = [[-1.0, -1.0, -1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        let x: [[f64; 3]; 4] = [[0.0, 0.0, 0.0], [2.0, 0.0, 0.5], [0.0, 3.0, 0.0], [0.0, 0.0, 1.0]];
        let mut g = [[0.0f64; 3]; 4];
        let det = physical_gradients(&dn, &x, &mut g);
        assert!((det - 6.0).abs() < 1e-14);
        // ξ = x/2, so ∇N₁ = ∇ξ = (1/2, 0, 0).
        assert!((g[1][0] - 0.5).abs() < 1e-14 && g[1][1].abs() < 1e-14 && g[1][2].abs() < 1e-14);
        // ζ = z − x/4 → ∇ζ = (−1/4, 0, 1).
        assert!((g[3][0] + 0.25).abs() < 1e-14 && (g[3][2] - 1.0).abs() < 1e-14);
    }
}
