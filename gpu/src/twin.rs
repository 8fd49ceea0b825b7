//! CPU twins of the device kernels: each function does the arithmetic of the kernel of the
//! same name in [`crate::kernels`] in the same order (one loop iteration per CUDA thread), so a
//! device run can be checked against them and they against the CPU assembly and solvers.
//!
//! [`CpuTwin`] is the [`Backend`] made of them: the device pipeline
//! run on the CPU, one thread.

use crate::backend::Backend;
use crate::error::GpuError;
use crate::kernels::{BLOCK, DOT_CHUNK, MAX_CELL_NODES, dot_blocks};
use crate::system::{DeviceSystem, Physics, ReferenceQuadrature, ThermalStrain};
use gradfem_mesh::geometry;
use gradfem_solvers::sparse::CsrMatrix;

/// Barycentric gradients and volume of the Tet4 element `e` (the kernels' `tet4_gradients`).
fn tet4_gradients(coords: &[f64], nodes: &[u32], e: usize) -> ([[f64; 3]; 4], f64) {
    let mut x = [[0.0; 3]; 4];
    for a in 0..4 {
        let n = nodes[4 * e + a] as usize;
        for c in 0..3 {
            x[a][c] = coords[3 * n + c];
        }
    }
    let (mut e1, mut e2, mut e3) = ([0.0; 3], [0.0; 3], [0.0; 3]);
    for c in 0..3 {
        e1[c] = x[1][c] - x[0][c];
        e2[c] = x[2][c] - x[0][c];
        e3[c] = x[3][c] - x[0][c];
    }
    let c23 = [
        e2[1] * e3[2] - e2[2] * e3[1],
        e2[2] * e3[0] - e2[0] * e3[2],
        e2[0] * e3[1] - e2[1] * e3[0],
    ];
    let c31 = [
        e3[1] * e1[2] - e3[2] * e1[1],
        e3[2] * e1[0] - e3[0] * e1[2],
        e3[0] * e1[1] - e3[1] * e1[0],
    ];
    let c12 = [
        e1[1] * e2[2] - e1[2] * e2[1],
        e1[2] * e2[0] - e1[0] * e2[2],
        e1[0] * e2[1] - e1[1] * e2[0],
    ];
    let det = e1[0] * c23[0] + e1[1] * c23[1] + e1[2] * c23[2];
    let inv = 1.0 / det;
    let mut g = [[0.0; 3]; 4];
    for c in 0..3 {
        g[1][c] = c23[c] * inv;
        g[2][c] = c31[c] * inv;
        g[3][c] = c12[c] * inv;
    }
    for c in 0..3 {
        g[0][c] = -(g[1][c] + g[2][c] + g[3][c]);
    }
    (g, det / 6.0)
}

/// Twin of `tet4_element_matrices`: `ke[16e..16e+16]` = k_e V g_a·g_b (row-major) and
/// `re[4e..4e+4]` = Σ_b K_e\[a\]\[b\] T_fix\[b\] − Q_e V / 4.
pub fn tet4_element_matrices(
    coords: &[f64],
    nodes: &[u32],
    k: &[f64],
    source: &[f64],
    fixed: &[f64],
    ke: &mut [f64],
    re: &mut [f64],
) {
    for e in 0..k.len() {
        let (g, vol) = tet4_gradients(coords, nodes, e);
        let kv = k[e] * vol;
        let mut kk = [[0.0; 4]; 4];
        for a in 0..4 {
            for b in a..4 {
                let v = kv * (g[a][0] * g[b][0] + g[a][1] * g[b][1] + g[a][2] * g[b][2]);
                kk[a][b] = v;
                kk[b][a] = v;
            }
        }
        let te: [f64; 4] = std::array::from_fn(|a| fixed[nodes[4 * e + a] as usize]);
        let sq = source[e] * vol * 0.25;
        for a in 0..4 {
            re[4 * e + a] =
                kk[a][0] * te[0] + kk[a][1] * te[1] + kk[a][2] * te[2] + kk[a][3] * te[3] - sq;
            for b in 0..4 {
                ke[16 * e + 4 * a + b] = kk[a][b];
            }
        }
    }
}

/// Twin of `tet4_conductivity_gradient`: `out[e]` = −V_e ∇λ·∇T = −λ_eᵀ K_e⁰ T_e.
pub fn tet4_conductivity_gradient(
    coords: &[f64],
    nodes: &[u32],
    t: &[f64],
    lambda: &[f64],
    out: &mut [f64],
) {
    for (e, o) in out.iter_mut().enumerate() {
        let (g, vol) = tet4_gradients(coords, nodes, e);
        let (mut gl, mut gt) = ([0.0; 3], [0.0; 3]);
        for a in 0..4 {
            let n = nodes[4 * e + a] as usize;
            let (la, ta) = (lambda[n], t[n]);
            for c in 0..3 {
                gl[c] += la * g[a][c];
                gt[c] += ta * g[a][c];
            }
        }
        *o = -(vol * (gl[0] * gt[0] + gl[1] * gt[1] + gl[2] * gt[2]));
    }
}

/// The quadrature kernels' `physical_gradients`: ∇N_a at point `q` of element `e` (into `g`)
/// and det J. The kernel forms the Jacobian, its determinant and inverse in the order of the
/// CPU's [`geometry::physical_gradients_into`], which is therefore its twin.
fn physical_gradients(
    coords: &[f64],
    nodes: &[u32],
    e: usize,
    nn: usize,
    q: usize,
    ref_grad: &[[f64; 3]],
    g: &mut [[f64; 3]],
) -> f64 {
    let mut x = [[0.0; 3]; MAX_CELL_NODES];
    for (a, xa) in x[..nn].iter_mut().enumerate() {
        let n = nodes[nn * e + a] as usize;
        xa.copy_from_slice(&coords[3 * n..3 * n + 3]);
    }
    geometry::physical_gradients_into(3, &ref_grad[nn * q..nn * (q + 1)], &x[..nn], &mut g[..nn])
}

/// Twin of `quad_element_matrices`: `ke[nn² e..]` = k_e Σ_q w_q det J_q g_a·g_b (row-major)
/// and `re[nn e..]` = Σ_b K_e\[a\]\[b\] T_fix\[b\] − Q_e Σ_q w_q det J_q N_a(q).
#[allow(clippy::too_many_arguments)]
pub fn quad_element_matrices(
    nn: usize,
    quadrature: &ReferenceQuadrature,
    coords: &[f64],
    nodes: &[u32],
    k: &[f64],
    source: &[f64],
    fixed: &[f64],
    ke: &mut [f64],
    re: &mut [f64],
) {
    let mut g = [[0.0; 3]; MAX_CELL_NODES];
    for e in 0..k.len() {
        let kk = &mut ke[nn * nn * e..nn * nn * (e + 1)];
        let rr = &mut re[nn * e..nn * (e + 1)];
        kk.fill(0.0);
        rr.fill(0.0);
        for q in 0..quadrature.n_points {
            let det = physical_gradients(coords, nodes, e, nn, q, &quadrature.grad, &mut g);
            let w = quadrature.weights[q] * det;
            let (kw, sw) = (k[e] * w, source[e] * w);
            for a in 0..nn {
                for b in 0..nn {
                    kk[nn * a + b] +=
                        kw * (g[a][0] * g[b][0] + g[a][1] * g[b][1] + g[a][2] * g[b][2]);
                }
                rr[a] -= sw * quadrature.shape[nn * q + a];
            }
        }
        for a in 0..nn {
            let mut s = 0.0;
            for b in 0..nn {
                s += kk[nn * a + b] * fixed[nodes[nn * e + b] as usize];
            }
            rr[a] += s;
        }
    }
}

/// Twin of `quad_conductivity_gradient`: `out[e]` = −Σ_q w_q det J_q ∇λ·∇T = −λ_eᵀ K_e⁰ T_e.
pub fn quad_conductivity_gradient(
    nn: usize,
    quadrature: &ReferenceQuadrature,
    coords: &[f64],
    nodes: &[u32],
    t: &[f64],
    lambda: &[f64],
    out: &mut [f64],
) {
    let mut g = [[0.0; 3]; MAX_CELL_NODES];
    for (e, o) in out.iter_mut().enumerate() {
        let mut s = 0.0;
        for q in 0..quadrature.n_points {
            let det = physical_gradients(coords, nodes, e, nn, q, &quadrature.grad, &mut g);
            let (mut gl, mut gt) = ([0.0; 3], [0.0; 3]);
            for a in 0..nn {
                let n = nodes[nn * e + a] as usize;
                let (la, ta) = (lambda[n], t[n]);
                for c in 0..3 {
                    gl[c] += la * g[a][c];
                    gt[c] += ta * g[a][c];
                }
            }
            s += quadrature.weights[q] * det * (gl[0] * gt[0] + gl[1] * gt[1] + gl[2] * gt[2]);
        }
        *o = -s;
    }
}

/// The kernels' `unit_lame`: (λ⁰, μ⁰), the Lamé constants per unit Young's modulus.
fn unit_lame(nu: f64) -> (f64, f64) {
    (nu / ((1.0 + nu) * (1.0 - nu * 2.0)), 1.0 / ((1.0 + nu) * 2.0))
}

/// The kernels' `thermal_strain`: θ_q = α_e (Σ_a N_a(q) T_a − T_ref,e).
fn thermal_strain(
    e: usize,
    nn: usize,
    q: usize,
    nodes: &[u32],
    shape: &[f64],
    th: &ThermalStrain,
) -> f64 {
    let mut tq = 0.0;
    for a in 0..nn {
        tq += shape[nn * q + a] * th.temperature[nodes[nn * e + a] as usize];
    }
    th.alpha[e] * (tq - th.t_ref[e])
}

/// Twin of `elastic_element_matrices`: `ke[m² e..]` (m = 3 nn, local unknown 3a + i) =
/// Σ_q w_q det J_q [λ g_a,i g_b,k + μ g_a,k g_b,i + μ δ_ik g_a·g_b] with λ = E_e λ⁰(ν_e),
/// μ = E_e μ⁰(ν_e), and `re[m e..]` = K_e u_fix,e − f_th,e (the thermal load
/// E_e Σ_q w_q det J_q (3λ⁰ + 2μ⁰) θ_q g_a,i when `thermal` is given).
#[allow(clippy::too_many_arguments)]
pub fn elastic_element_matrices(
    nn: usize,
    quadrature: &ReferenceQuadrature,
    coords: &[f64],
    nodes: &[u32],
    young: &[f64],
    poisson: &[f64],
    fixed: &[f64],
    thermal: Option<&ThermalStrain>,
    ke: &mut [f64],
    re: &mut [f64],
) {
    let m = 3 * nn;
    let mut g = [[0.0; 3]; MAX_CELL_NODES];
    let mut th = [0.0; 3 * MAX_CELL_NODES];
    for e in 0..young.len() {
        let kk = &mut ke[m * m * e..m * m * (e + 1)];
        let rr = &mut re[m * e..m * (e + 1)];
        let (lambda0, mu0) = unit_lame(poisson[e]);
        let (lam, mu) = (young[e] * lambda0, young[e] * mu0);
        let bulk0 = 3.0 * lambda0 + 2.0 * mu0;
        kk.fill(0.0);
        th[..m].fill(0.0);
        for q in 0..quadrature.n_points {
            let w = quadrature.weights[q]
                * physical_gradients(coords, nodes, e, nn, q, &quadrature.grad, &mut g);
            for a in 0..nn {
                for b in 0..nn {
                    let gab = w * mu * (g[a][0] * g[b][0] + g[a][1] * g[b][1] + g[a][2] * g[b][2]);
                    for i in 0..3 {
                        let row = &mut kk[(3 * a + i) * m + 3 * b..(3 * a + i) * m + 3 * b + 3];
                        for k in 0..3 {
                            row[k] += w * (lam * g[a][i] * g[b][k] + mu * g[a][k] * g[b][i]);
                        }
                        row[i] += gab;
                    }
                }
            }
            if let Some(t) = thermal {
                let wt = w * bulk0 * thermal_strain(e, nn, q, nodes, &quadrature.shape, t);
                for a in 0..nn {
                    for i in 0..3 {
                        th[3 * a + i] += wt * g[a][i];
                    }
                }
            }
        }
        for (r, rv) in rr.iter_mut().enumerate() {
            let mut s = 0.0;
            for b in 0..nn {
                let n = nodes[nn * e + b] as usize;
                for k in 0..3 {
                    s += kk[r * m + 3 * b + k] * fixed[3 * n + k];
                }
            }
            *rv = s - young[e] * th[r];
        }
    }
}

/// Twin of `elastic_young_gradient`: `out[e]` = −λ_eᵀ ∂R_e/∂E_e = −Σ_q w_q det J_q
/// [λ⁰ div λ div u + μ⁰ ∇λ : (∇u + ∇uᵀ) − (3λ⁰ + 2μ⁰) θ_q div λ], the θ term when `thermal`
/// is given.
#[allow(clippy::too_many_arguments)]
pub fn elastic_young_gradient(
    nn: usize,
    quadrature: &ReferenceQuadrature,
    coords: &[f64],
    nodes: &[u32],
    poisson: &[f64],
    thermal: Option<&ThermalStrain>,
    u: &[f64],
    lambda: &[f64],
    out: &mut [f64],
) {
    let mut g = [[0.0; 3]; MAX_CELL_NODES];
    for (e, o) in out.iter_mut().enumerate() {
        let (lambda0, mu0) = unit_lame(poisson[e]);
        let bulk0 = 3.0 * lambda0 + 2.0 * mu0;
        let mut s = 0.0;
        for q in 0..quadrature.n_points {
            let det = physical_gradients(coords, nodes, e, nn, q, &quadrature.grad, &mut g);
            let (mut gu, mut gl) = ([[0.0; 3]; 3], [[0.0; 3]; 3]);
            for a in 0..nn {
                let n = nodes[nn * e + a] as usize;
                for i in 0..3 {
                    let (ua, la) = (u[3 * n + i], lambda[3 * n + i]);
                    for j in 0..3 {
                        gu[i][j] += ua * g[a][j];
                        gl[i][j] += la * g[a][j];
                    }
                }
            }
            let div_u = gu[0][0] + gu[1][1] + gu[2][2];
            let div_l = gl[0][0] + gl[1][1] + gl[2][2];
            let mut shear = 0.0;
            for i in 0..3 {
                for j in 0..3 {
                    shear += gl[i][j] * (gu[i][j] + gu[j][i]);
                }
            }
            let mut v = lambda0 * div_l * div_u + mu0 * shear;
            if let Some(t) = thermal {
                v -= bulk0 * thermal_strain(e, nn, q, nodes, &quadrature.shape, t) * div_l;
            }
            s += quadrature.weights[q] * det * v;
        }
        *o = -s;
    }
}

/// Twin of `csr_gather`: `values[i]` = `base[i]` (0 without a base) + Σ_{c ∈ `ptr[i]..ptr[i+1]`}
/// `ke[idx[c]]`, in that order.
pub fn csr_gather(ptr: &[u32], idx: &[u32], ke: &[f64], base: Option<&[f64]>, values: &mut [f64]) {
    for (i, v) in values.iter_mut().enumerate() {
        let mut s = base.map_or(0.0, |b| b[i]);
        for c in ptr[i]..ptr[i + 1] {
            s += ke[idx[c as usize] as usize];
        }
        *v = s;
    }
}

/// Twin of `rhs_gather`: `b[i]` = `load[i]` − Σ_{c ∈ `ptr[i]..ptr[i+1]`} `re[idx[c]]`.
pub fn rhs_gather(ptr: &[u32], idx: &[u32], re: &[f64], load: &[f64], b: &mut [f64]) {
    for (i, bi) in b.iter_mut().enumerate() {
        let mut s = 0.0;
        for c in ptr[i]..ptr[i + 1] {
            s += re[idx[c as usize] as usize];
        }
        *bi = load[i] - s;
    }
}

/// Twin of `csr_inverse_diagonal`: `inv[i]` = 1 / A_ii.
pub fn csr_inverse_diagonal(row_ptr: &[u32], col_idx: &[u32], values: &[f64], inv: &mut [f64]) {
    for (i, o) in inv.iter_mut().enumerate() {
        let mut d = 0.0;
        for c in row_ptr[i] as usize..row_ptr[i + 1] as usize {
            if col_idx[c] as usize == i {
                d = values[c];
            }
        }
        *o = 1.0 / d;
    }
}

/// Twin of `csr_spmv`: y = A x, each row's entries in column order.
pub fn csr_spmv(row_ptr: &[u32], col_idx: &[u32], values: &[f64], x: &[f64], y: &mut [f64]) {
    for (i, yi) in y.iter_mut().enumerate() {
        let mut s = 0.0;
        for c in row_ptr[i] as usize..row_ptr[i + 1] as usize {
            s += values[c] * x[col_idx[c] as usize];
        }
        *yi = s;
    }
}

/// The kernels' `block_tree_sum`: sh[0] after halving strides 128, 64, …, 1.
fn block_tree_sum(sh: &mut [f64; BLOCK as usize]) -> f64 {
    let mut stride = BLOCK as usize / 2;
    while stride > 0 {
        for t in 0..stride {
            sh[t] += sh[t + stride];
        }
        stride /= 2;
    }
    sh[0]
}

/// Twin of `dot_partial`: the partial dot of each block of `BLOCK · DOT_CHUNK` entries.
pub fn dot_partial(x: &[f64], y: &[f64], partial: &mut [f64]) {
    let n = x.len();
    let (block, chunk) = (BLOCK as usize, DOT_CHUNK as usize);
    for (b, p) in partial.iter_mut().enumerate() {
        let base = b * block * chunk;
        let mut sh = [0.0; BLOCK as usize];
        for (t, s) in sh.iter_mut().enumerate() {
            let mut acc = 0.0;
            for j in 0..chunk {
                let i = base + j * block + t;
                if i < n {
                    acc += x[i] * y[i];
                }
            }
            *s = acc;
        }
        *p = block_tree_sum(&mut sh);
    }
}

/// Twin of `dot_finish`: the sum of the partials, thread t summing t, t + BLOCK, …, then the
/// tree.
pub fn dot_finish(partial: &[f64]) -> f64 {
    let mut sh = [0.0; BLOCK as usize];
    for (t, s) in sh.iter_mut().enumerate() {
        let mut acc = 0.0;
        let mut i = t;
        while i < partial.len() {
            acc += partial[i];
            i += BLOCK as usize;
        }
        *s = acc;
    }
    block_tree_sum(&mut sh)
}

/// The deterministic dot product of the device: [`dot_partial`] then [`dot_finish`].
pub fn dot(x: &[f64], y: &[f64]) -> f64 {
    assert_eq!(x.len(), y.len(), "dot of vectors of {} and {} entries", x.len(), y.len());
    let mut partial = vec![0.0; dot_blocks(x.len())];
    dot_partial(x, y, &mut partial);
    dot_finish(&partial)
}

/// Twin of `axpy`: y = y + a x.
pub fn axpy(a: f64, x: &[f64], y: &mut [f64]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// Twin of `xpay`: y = x + a y.
pub fn xpay(x: &[f64], a: f64, y: &mut [f64]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = xi + a * *yi;
    }
}

/// Twin of `jacobi`: z = inv ∘ r.
pub fn jacobi(inv: &[f64], r: &[f64], z: &mut [f64]) {
    for ((zi, &di), &ri) in z.iter_mut().zip(inv).zip(r) {
        *zi = di * ri;
    }
}

/// Twin of `to_nodal`: `out[v]` = `u[dof[v]]`, or `fixed[v]` where `dof[v] < 0` (v a nodal
/// value).
pub fn to_nodal(dof: &[i32], u: &[f64], fixed: &[f64], out: &mut [f64]) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = if dof[i] >= 0 { u[dof[i] as usize] } else { fixed[i] };
    }
}

/// The AMG kernels' `row_dot`: Σ_c A_ic x_c in column order.
fn row_dot(a: &CsrMatrix, i: usize, x: &[f64]) -> f64 {
    let mut s = 0.0;
    for c in a.row_ptr[i]..a.row_ptr[i + 1] {
        s += a.values[c] * x[a.col_idx[c] as usize];
    }
    s
}

/// Twin of `matrix_spmv`: y = A x, or y = y + A x when `accumulate`.
pub fn matrix_spmv(a: &CsrMatrix, x: &[f64], y: &mut [f64], accumulate: bool) {
    for (i, yi) in y.iter_mut().enumerate() {
        let s = row_dot(a, i, x);
        *yi = if accumulate { *yi + s } else { s };
    }
}

/// Twin of `scale_diag`: d = c · inv ∘ r.
pub fn scale_diag(c: f64, inv: &[f64], r: &[f64], d: &mut [f64]) {
    for ((di, &gi), &ri) in d.iter_mut().zip(inv).zip(r) {
        *di = c * gi * ri;
    }
}

/// Twin of `residual_and_scale`: r = b − A x; d = c · inv ∘ r.
#[allow(clippy::too_many_arguments)]
pub fn residual_and_scale(
    a: &CsrMatrix,
    b: &[f64],
    x: &[f64],
    r: &mut [f64],
    d: &mut [f64],
    inv: &[f64],
    c: f64,
) {
    for i in 0..r.len() {
        let ri = b[i] - row_dot(a, i, x);
        r[i] = ri;
        d[i] = c * inv[i] * ri;
    }
}

/// Twin of `cheb_step`: r = r − A d; x = x + d; d_new = α d + γ · inv ∘ r.
#[allow(clippy::too_many_arguments)]
pub fn cheb_step(
    a: &CsrMatrix,
    inv: &[f64],
    d: &[f64],
    d_new: &mut [f64],
    r: &mut [f64],
    x: &mut [f64],
    alpha: f64,
    gamma: f64,
) {
    for i in 0..r.len() {
        let ri = r[i] - row_dot(a, i, d);
        r[i] = ri;
        x[i] += d[i];
        d_new[i] = alpha * d[i] + gamma * inv[i] * ri;
    }
}

/// Twin of `residual_update`: r = r − A d; x = x + d.
pub fn residual_update(a: &CsrMatrix, d: &[f64], r: &mut [f64], x: &mut [f64]) {
    for i in 0..r.len() {
        r[i] -= row_dot(a, i, d);
        x[i] += d[i];
    }
}

/// The device pipeline run on the CPU with the twins (one thread): the reference a device
/// run is compared with, and a path that runs everywhere.
pub struct CpuTwin {
    sys: DeviceSystem,
}

impl CpuTwin {
    /// The twin backend of `system`.
    pub fn new(system: &DeviceSystem) -> Self {
        CpuTwin { sys: system.clone() }
    }
}

impl Backend for CpuTwin {
    type Vector = Vec<f64>;
    type Matrix = CsrMatrix;

    fn upload_matrix(&mut self, a: &CsrMatrix) -> Result<CsrMatrix, GpuError> {
        Ok(a.clone())
    }
    fn write(&mut self, host: &[f64], v: &mut Vec<f64>) -> Result<(), GpuError> {
        v.copy_from_slice(host);
        Ok(())
    }
    fn fill_zero(&mut self, x: &mut Vec<f64>) -> Result<(), GpuError> {
        x.fill(0.0);
        Ok(())
    }
    fn matrix_spmv(
        &mut self,
        a: &CsrMatrix,
        x: &Vec<f64>,
        y: &mut Vec<f64>,
        accumulate: bool,
    ) -> Result<(), GpuError> {
        matrix_spmv(a, x, y, accumulate);
        Ok(())
    }
    fn scale_diag(
        &mut self,
        c: f64,
        inv: &Vec<f64>,
        r: &Vec<f64>,
        d: &mut Vec<f64>,
    ) -> Result<(), GpuError> {
        scale_diag(c, inv, r, d);
        Ok(())
    }
    fn residual_and_scale(
        &mut self,
        a: &CsrMatrix,
        b: &Vec<f64>,
        x: &Vec<f64>,
        r: &mut Vec<f64>,
        d: &mut Vec<f64>,
        inv: &Vec<f64>,
        c: f64,
    ) -> Result<(), GpuError> {
        residual_and_scale(a, b, x, r, d, inv, c);
        Ok(())
    }
    fn cheb_step(
        &mut self,
        a: &CsrMatrix,
        inv: &Vec<f64>,
        d: &Vec<f64>,
        d_new: &mut Vec<f64>,
        r: &mut Vec<f64>,
        x: &mut Vec<f64>,
        alpha: f64,
        gamma: f64,
    ) -> Result<(), GpuError> {
        cheb_step(a, inv, d, d_new, r, x, alpha, gamma);
        Ok(())
    }
    fn residual_update(
        &mut self,
        a: &CsrMatrix,
        d: &Vec<f64>,
        r: &mut Vec<f64>,
        x: &mut Vec<f64>,
    ) -> Result<(), GpuError> {
        residual_update(a, d, r, x);
        Ok(())
    }

    fn name(&self) -> String {
        "cpu-twin".into()
    }
    fn system(&self) -> &DeviceSystem {
        &self.sys
    }
    fn zeros(&mut self, n: usize) -> Result<Vec<f64>, GpuError> {
        Ok(vec![0.0; n])
    }
    fn upload(&mut self, host: &[f64]) -> Result<Vec<f64>, GpuError> {
        Ok(host.to_vec())
    }
    fn download(&mut self, v: &Vec<f64>) -> Result<Vec<f64>, GpuError> {
        Ok(v.clone())
    }
    fn copy(&mut self, src: &Vec<f64>, dst: &mut Vec<f64>) -> Result<(), GpuError> {
        dst.copy_from_slice(src);
        Ok(())
    }
    fn element_matrices(
        &mut self,
        coefficient: &Vec<f64>,
        ke: &mut Vec<f64>,
        re: &mut Vec<f64>,
    ) -> Result<(), GpuError> {
        let s = &self.sys;
        let nn = s.nodes_per_element;
        match (&s.physics, &s.quadrature) {
            (Physics::Thermal { source }, None) => {
                tet4_element_matrices(&s.coords, &s.nodes, coefficient, source, &s.fixed, ke, re)
            }
            (Physics::Thermal { source }, Some(quad)) => quad_element_matrices(
                nn,
                quad,
                &s.coords,
                &s.nodes,
                coefficient,
                source,
                &s.fixed,
                ke,
                re,
            ),
            (Physics::Elastic { poisson, thermal }, quad) => elastic_element_matrices(
                nn,
                quad.as_ref().ok_or_else(no_quadrature)?,
                &s.coords,
                &s.nodes,
                coefficient,
                poisson,
                &s.fixed,
                thermal.as_ref(),
                ke,
                re,
            ),
            (Physics::Matrix, _) => return Err(no_element_kernels()),
        }
        Ok(())
    }
    fn assemble_matrix(&mut self, ke: &Vec<f64>, values: &mut Vec<f64>) -> Result<(), GpuError> {
        let s = &self.sys;
        let base = s.base_values.as_deref();
        csr_gather(&s.matrix_gather_ptr, &s.matrix_gather_idx, ke, base, values);
        Ok(())
    }
    fn assemble_rhs(&mut self, re: &Vec<f64>, b: &mut Vec<f64>) -> Result<(), GpuError> {
        let s = &self.sys;
        rhs_gather(&s.rhs_gather_ptr, &s.rhs_gather_idx, re, &s.load, b);
        Ok(())
    }
    fn inverse_diagonal(&mut self, values: &Vec<f64>, inv: &mut Vec<f64>) -> Result<(), GpuError> {
        csr_inverse_diagonal(&self.sys.row_ptr, &self.sys.col_idx, values, inv);
        Ok(())
    }
    fn spmv(&mut self, values: &Vec<f64>, x: &Vec<f64>, y: &mut Vec<f64>) -> Result<(), GpuError> {
        csr_spmv(&self.sys.row_ptr, &self.sys.col_idx, values, x, y);
        Ok(())
    }
    fn dot(&mut self, x: &Vec<f64>, y: &Vec<f64>) -> Result<f64, GpuError> {
        Ok(dot(x, y))
    }
    fn axpy(&mut self, a: f64, x: &Vec<f64>, y: &mut Vec<f64>) -> Result<(), GpuError> {
        axpy(a, x, y);
        Ok(())
    }
    fn xpay(&mut self, x: &Vec<f64>, a: f64, y: &mut Vec<f64>) -> Result<(), GpuError> {
        xpay(x, a, y);
        Ok(())
    }
    fn jacobi(&mut self, inv: &Vec<f64>, r: &Vec<f64>, z: &mut Vec<f64>) -> Result<(), GpuError> {
        jacobi(inv, r, z);
        Ok(())
    }
    fn to_nodal(
        &mut self,
        u: &Vec<f64>,
        fixed: &Vec<f64>,
        out: &mut Vec<f64>,
    ) -> Result<(), GpuError> {
        to_nodal(&self.sys.dof_of_value, u, fixed, out);
        Ok(())
    }
    fn coefficient_gradient(
        &mut self,
        solution: &Vec<f64>,
        lambda: &Vec<f64>,
        out: &mut Vec<f64>,
    ) -> Result<(), GpuError> {
        let s = &self.sys;
        let nn = s.nodes_per_element;
        match (&s.physics, &s.quadrature) {
            (Physics::Thermal { .. }, None) => {
                tet4_conductivity_gradient(&s.coords, &s.nodes, solution, lambda, out)
            }
            (Physics::Thermal { .. }, Some(quad)) => {
                quad_conductivity_gradient(nn, quad, &s.coords, &s.nodes, solution, lambda, out)
            }
            (Physics::Elastic { poisson, thermal }, quad) => elastic_young_gradient(
                nn,
                quad.as_ref().ok_or_else(no_quadrature)?,
                &s.coords,
                &s.nodes,
                poisson,
                thermal.as_ref(),
                solution,
                lambda,
                out,
            ),
            (Physics::Matrix, _) => return Err(no_element_kernels()),
        }
        Ok(())
    }
}

/// The error of element kernels asked of a matrix-only system ([`DeviceSystem::matrix`]).
pub(crate) fn no_element_kernels() -> GpuError {
    GpuError::Input("a system given by its assembled matrix has no element kernels".into())
}

/// The error of an elastic system built without its quadrature (never by
/// [`DeviceSystem::elastic`]).
pub(crate) fn no_quadrature() -> GpuError {
    GpuError::Input("an elastic system needs its reference quadrature".into())
}
