//! A scalar nodal field sampled at a fixed physical point inside a cell (a thermocouple's
//! temperature, a displacement component at a probe), and how the sample and its first
//! derivatives move along a direction of the nodal values and of the node coordinates: what
//! the second-order adjoint of a point objective needs with shape parameters.
//!
//! With s(x_p) = Σ_a N_a(ξ) s_a and the point held while the nodes move, x(ξ, X) = x_p fixes
//! the reference coordinates ξ(X): ∂s/∂s_a = N_a and ∂s/∂X_b = −N_b ∇s. Along (δs, δX), with
//! m = Σ_b N_b δX_b (the motion of the material point at ξ) and 𝐉 = Σ_b X_b ⊗ ∇_ξN_b,
//!
//! - δξ = −𝐉⁻¹ m, δN_a = ∇_ξN_a · δξ, δs = Σ_a N_a δs_a − m · ∇s;
//! - ∇s = 𝐉⁻ᵀ ∇_ξs, δ(∇_ξs) = Σ_a δs_a ∇_ξN_a + Σ_a s_a ∇²_ξN_a δξ,
//!   δ𝐉 = Σ_b δX_b ⊗ ∇_ξN_b + Σ_b X_b ⊗ ∇²_ξN_b δξ, δ(∇s) = 𝐉⁻ᵀ (δ(∇_ξs) − δ𝐉ᵀ ∇s).
//!
//! The reference Hessians ∇²_ξN vanish on affine cells and are constant on quadratic simplices.

/// A point sample of a scalar nodal field with its first derivatives' direction parts
/// ([`point_sample_along`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PointSample {
    /// s(x_p).
    pub value: f64,
    /// δs = Σ N_a δs_a − m · ∇s.
    pub d_value: f64,
    /// ∇s at the point (∂s/∂X_b = −N_b ∇s).
    pub grad: [f64; 3],
    /// δN_a = ∇_ξN_a · δξ, the direction part of ∂s/∂s_a, per node of the cell.
    pub d_shape: Vec<f64>,
    /// δ(∇s).
    pub d_grad: [f64; 3],
}

/// The sample of the nodal values `values` of a cell with node coordinates `coords` at the
/// reference point whose shape values are `shape`, reference gradients `dn` and reference
/// Hessians `hn`, moving along the nodal values' direction `d_values` and the nodes' motion
/// `d_coords` (module docs). `None` when the Jacobian at the point is singular.
pub fn point_sample_along(
    shape: &[f64],
    dn: &[[f64; 3]],
    hn: &[[[f64; 3]; 3]],
    coords: &[[f64; 3]],
    values: &[f64],
    d_values: &[f64],
    d_coords: &[[f64; 3]],
) -> Option<PointSample> {
    let nn = shape.len();
    let mut jac = [[0.0; 3]; 3];
    let mut grad_ref = [0.0; 3];
    let mut m = [0.0; 3];
    let (mut value, mut d_value) = (0.0, 0.0);
    for a in 0..nn {
        value += shape[a] * values[a];
        d_value += shape[a] * d_values[a];
        for i in 0..3 {
            m[i] += shape[a] * d_coords[a][i];
            grad_ref[i] += values[a] * dn[a][i];
            for k in 0..3 {
                jac[i][k] += coords[a][i] * dn[a][k];
            }
        }
    }
    let (inv, _) = crate::generic::inverse(&jac)?;
    // ∇s = 𝐉⁻ᵀ ∇_ξs, δξ = −𝐉⁻¹ m.
    let grad: [f64; 3] = std::array::from_fn(|i| (0..3).map(|k| inv[k][i] * grad_ref[k]).sum());
    let d_xi: [f64; 3] = std::array::from_fn(|k| -(0..3).map(|i| inv[k][i] * m[i]).sum::<f64>());
    d_value -= (0..3).map(|i| m[i] * grad[i]).sum::<f64>();
    let d_shape: Vec<f64> = dn.iter().map(|d| (0..3).map(|k| d[k] * d_xi[k]).sum()).collect();
    let mut d_grad_ref = [0.0; 3];
    let mut d_jac = [[0.0; 3]; 3];
    for a in 0..nn {
        let h_dxi: [f64; 3] = std::array::from_fn(|k| (0..3).map(|l| hn[a][k][l] * d_xi[l]).sum());
        for k in 0..3 {
            d_grad_ref[k] += d_values[a] * dn[a][k] + values[a] * h_dxi[k];
            for i in 0..3 {
                d_jac[i][k] += d_coords[a][i] * dn[a][k] + coords[a][i] * h_dxi[k];
            }
        }
    }
    let rhs: [f64; 3] =
        std::array::from_fn(|k| d_grad_ref[k] - (0..3).map(|i| d_jac[i][k] * grad[i]).sum::<f64>());
    let d_grad: [f64; 3] = std::array::from_fn(|i| (0..3).map(|k| inv[k][i] * rhs[k]).sum());
    Some(PointSample { value, d_value, grad, d_shape, d_grad })
}

impl PointSample {
    /// Per node of the cell: `factor` (∂s/∂s_a)' + `factor_value` ∂s/∂s_a
    /// = `factor` δN_a + `factor_value` N_a.
    pub fn value_part(&self, shape: &[f64], factor: f64, factor_value: f64) -> Vec<f64> {
        self.d_shape.iter().zip(shape).map(|(d, n)| factor * d + factor_value * n).collect()
    }

    /// Per node of the cell: `factor` (∂s/∂X_b)' + `factor_value` ∂s/∂X_b
    /// = −`factor` (δN_b ∇s + N_b δ(∇s)) − `factor_value` N_b ∇s.
    pub fn coordinate_part(&self, shape: &[f64], factor: f64, factor_value: f64) -> Vec<[f64; 3]> {
        self.d_shape
            .iter()
            .zip(shape)
            .map(|(d, n)| {
                std::array::from_fn(|i| {
                    -factor * (d * self.grad[i] + n * self.d_grad[i])
                        - factor_value * n * self.grad[i]
                })
            })
            .collect()
    }
}
