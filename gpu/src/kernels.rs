//! The CUDA C sources of the device kernels, compiled at run time by NVRTC.
//!
//! Every kernel has a CPU twin in [`crate::twin`] doing the same arithmetic in the same order.
//! The sources are compiled with `--fmad=false`, so no multiply–add is contracted into a fused
//! one and each operation rounds as the twin's Rust (which never contracts) does.

/// Threads per block of every launch; the block reductions of [`VECTOR`] assume it.
pub const BLOCK: u32 = 256;

/// Entries each thread of a dot-product block sums before the block's tree reduction: a block
/// covers `BLOCK · DOT_CHUNK` consecutive entries.
pub const DOT_CHUNK: u32 = 8;

/// One NVRTC program: its name, CUDA C source and the kernels it defines.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    /// Program name (also the name NVRTC reports in its log).
    pub name: &'static str,
    /// CUDA C source.
    pub source: &'static str,
    /// The `extern "C"` kernels it defines.
    pub functions: &'static [&'static str],
}

/// NVRTC options of every program: no fused multiply–add contraction (the twins' rounding).
pub const NVRTC_OPTIONS: &[&str] = &["--fmad=false"];

/// Thermal Tet4 element kernels: element conductivity matrices with the element residual at
/// zero free temperatures, and the per-element conductivity gradient.
pub const TET4_THERMAL: KernelSource = KernelSource {
    name: "tet4_thermal.cu",
    source: r#"
// Barycentric gradients g[a] (constant on the cell) and volume of an affine tetrahedron.
__device__ static double tet4_gradients(const double* __restrict__ coords,
                                        const unsigned int* __restrict__ nodes, unsigned int e,
                                        double g[4][3]) {
    double x[4][3];
    for (int a = 0; a < 4; ++a) {
        unsigned int n = nodes[4u * e + a];
        for (int c = 0; c < 3; ++c) x[a][c] = coords[3u * n + c];
    }
    double e1[3], e2[3], e3[3];
    for (int c = 0; c < 3; ++c) {
        e1[c] = x[1][c] - x[0][c];
        e2[c] = x[2][c] - x[0][c];
        e3[c] = x[3][c] - x[0][c];
    }
    double c23[3] = {e2[1] * e3[2] - e2[2] * e3[1], e2[2] * e3[0] - e2[0] * e3[2],
                     e2[0] * e3[1] - e2[1] * e3[0]};
    double c31[3] = {e3[1] * e1[2] - e3[2] * e1[1], e3[2] * e1[0] - e3[0] * e1[2],
                     e3[0] * e1[1] - e3[1] * e1[0]};
    double c12[3] = {e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2],
                     e1[0] * e2[1] - e1[1] * e2[0]};
    double det = e1[0] * c23[0] + e1[1] * c23[1] + e1[2] * c23[2];
    double inv = 1.0 / det;
    for (int c = 0; c < 3; ++c) {
        g[1][c] = c23[c] * inv;
        g[2][c] = c31[c] * inv;
        g[3][c] = c12[c] * inv;
    }
    for (int c = 0; c < 3; ++c) g[0][c] = -(g[1][c] + g[2][c] + g[3][c]);
    return det / 6.0;
}

// K_e = k_e V g_a.g_b (row-major, 16 per element) and the element residual at the fixed
// temperatures with every free temperature zero: r_e[a] = sum_b K_e[a][b] T_fix[b] - Q V / 4.
extern "C" __global__ void tet4_element_matrices(
    unsigned int n_el, const double* __restrict__ coords, const unsigned int* __restrict__ nodes,
    const double* __restrict__ k, const double* __restrict__ source,
    const double* __restrict__ fixed, double* __restrict__ ke, double* __restrict__ re) {
    unsigned int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n_el) return;
    double g[4][3];
    double vol = tet4_gradients(coords, nodes, e, g);
    double kv = k[e] * vol;
    double kk[4][4];
    for (int a = 0; a < 4; ++a) {
        for (int b = a; b < 4; ++b) {
            double v = kv * (g[a][0] * g[b][0] + g[a][1] * g[b][1] + g[a][2] * g[b][2]);
            kk[a][b] = v;
            kk[b][a] = v;
        }
    }
    double te[4];
    for (int a = 0; a < 4; ++a) te[a] = fixed[nodes[4u * e + a]];
    double sq = source[e] * vol * 0.25;
    for (int a = 0; a < 4; ++a) {
        re[4u * e + a] = kk[a][0] * te[0] + kk[a][1] * te[1] + kk[a][2] * te[2] +
                         kk[a][3] * te[3] - sq;
        for (int b = 0; b < 4; ++b) ke[16u * e + 4u * a + b] = kk[a][b];
    }
}

// dJ/dk_e = -lambda_e^T K_e^0 T_e = -V (grad lambda . grad T) on each element.
extern "C" __global__ void tet4_conductivity_gradient(
    unsigned int n_el, const double* __restrict__ coords, const unsigned int* __restrict__ nodes,
    const double* __restrict__ t, const double* __restrict__ lambda, double* __restrict__ out) {
    unsigned int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n_el) return;
    double g[4][3];
    double vol = tet4_gradients(coords, nodes, e, g);
    double gl[3] = {0.0, 0.0, 0.0};
    double gt[3] = {0.0, 0.0, 0.0};
    for (int a = 0; a < 4; ++a) {
        unsigned int n = nodes[4u * e + a];
        double la = lambda[n];
        double ta = t[n];
        for (int c = 0; c < 3; ++c) {
            gl[c] += la * g[a][c];
            gt[c] += ta * g[a][c];
        }
    }
    out[e] = -(vol * (gl[0] * gt[0] + gl[1] * gt[1] + gl[2] * gt[2]));
}
"#,
    functions: &["tet4_element_matrices", "tet4_conductivity_gradient"],
};

/// Largest number of nodes of a cell the quadrature kernels take (Hex27).
pub const MAX_CELL_NODES: usize = 27;

/// The CUDA C both quadrature programs start with: `MAX_NN` and `physical_gradients`, the
/// Jacobian, its determinant and inverse per quadrature point in the order of the CPU's
/// `geometry::physical_gradients_into`.
macro_rules! quadrature_geometry_cu {
    () => {
        r#"
#define MAX_NN 27

// Physical gradients g[a] of the nn shape functions at quadrature point q of element e, and
// det J: J_ik = sum_a x_a[i] dN_a/dxi_k, g_a[i] = sum_k dN_a[k] (J^-1)[k][i].
__device__ static double physical_gradients(const double* __restrict__ coords,
                                            const unsigned int* __restrict__ nodes,
                                            unsigned int e, unsigned int nn, unsigned int q,
                                            const double* __restrict__ ref_grad,
                                            double g[MAX_NN][3]) {
    const double* dn = ref_grad + 3u * nn * q;
    double j[3][3] = {{0.0, 0.0, 0.0}, {0.0, 0.0, 0.0}, {0.0, 0.0, 0.0}};
    for (unsigned int a = 0; a < nn; ++a) {
        unsigned int n = nodes[nn * e + a];
        for (int i = 0; i < 3; ++i) {
            double xi = coords[3u * n + i];
            for (int k = 0; k < 3; ++k) j[i][k] = j[i][k] + xi * dn[3u * a + k];
        }
    }
    double det = j[0][0] * (j[1][1] * j[2][2] - j[1][2] * j[2][1]) -
                 j[0][1] * (j[1][0] * j[2][2] - j[1][2] * j[2][0]) +
                 j[0][2] * (j[1][0] * j[2][1] - j[1][1] * j[2][0]);
    double r = 1.0 / det;
    double inv[3][3] = {
        {(j[1][1] * j[2][2] - j[1][2] * j[2][1]) * r, (j[0][2] * j[2][1] - j[0][1] * j[2][2]) * r,
         (j[0][1] * j[1][2] - j[0][2] * j[1][1]) * r},
        {(j[1][2] * j[2][0] - j[1][0] * j[2][2]) * r, (j[0][0] * j[2][2] - j[0][2] * j[2][0]) * r,
         (j[0][2] * j[1][0] - j[0][0] * j[1][2]) * r},
        {(j[1][0] * j[2][1] - j[1][1] * j[2][0]) * r, (j[0][1] * j[2][0] - j[0][0] * j[2][1]) * r,
         (j[0][0] * j[1][1] - j[0][1] * j[1][0]) * r}};
    for (unsigned int a = 0; a < nn; ++a) {
        const double* d = dn + 3u * a;
        for (int i = 0; i < 3; ++i)
            g[a][i] = d[0] * inv[0][i] + d[1] * inv[1][i] + d[2] * inv[2][i];
    }
    return det;
}

"#
    };
}

/// Thermal element kernels of isoparametric cells by quadrature (Tet10, Hex8, Hex20, Hex27):
/// the reference shape values and gradients at the quadrature points come in as tables, the
/// Jacobian, its determinant and inverse are formed per point in the order of the CPU's
/// `geometry::physical_gradients_into`.
pub const QUADRATURE_THERMAL: KernelSource = KernelSource {
    name: "quadrature_thermal.cu",
    source: concat!(
        quadrature_geometry_cu!(),
        r#"
// K_e = k_e sum_q w_q det J_q g_a.g_b (row-major, nn * nn per element, the points in order)
// and r_e[a] = sum_b K_e[a][b] T_fix[b] - Q_e sum_q w_q det J_q N_a(q).
extern "C" __global__ void quad_element_matrices(
    unsigned int n_el, unsigned int nn, unsigned int nq, const double* __restrict__ coords,
    const unsigned int* __restrict__ nodes, const double* __restrict__ weights,
    const double* __restrict__ ref_shape, const double* __restrict__ ref_grad,
    const double* __restrict__ k, const double* __restrict__ source,
    const double* __restrict__ fixed, double* __restrict__ ke, double* __restrict__ re) {
    unsigned int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n_el) return;
    double g[MAX_NN][3];
    double* kk = ke + nn * nn * e;
    double* rr = re + nn * e;
    for (unsigned int c = 0; c < nn * nn; ++c) kk[c] = 0.0;
    for (unsigned int a = 0; a < nn; ++a) rr[a] = 0.0;
    for (unsigned int q = 0; q < nq; ++q) {
        double det = physical_gradients(coords, nodes, e, nn, q, ref_grad, g);
        double w = weights[q] * det;
        double kw = k[e] * w;
        double sw = source[e] * w;
        for (unsigned int a = 0; a < nn; ++a) {
            for (unsigned int b = 0; b < nn; ++b) {
                kk[nn * a + b] = kk[nn * a + b] +
                                 kw * (g[a][0] * g[b][0] + g[a][1] * g[b][1] + g[a][2] * g[b][2]);
            }
            rr[a] = rr[a] - sw * ref_shape[nn * q + a];
        }
    }
    for (unsigned int a = 0; a < nn; ++a) {
        double s = 0.0;
        for (unsigned int b = 0; b < nn; ++b) s = s + kk[nn * a + b] * fixed[nodes[nn * e + b]];
        rr[a] = s + rr[a];
    }
}

// dJ/dk_e = -lambda_e^T K_e^0 T_e = -sum_q w_q det J_q (grad lambda . grad T).
extern "C" __global__ void quad_conductivity_gradient(
    unsigned int n_el, unsigned int nn, unsigned int nq, const double* __restrict__ coords,
    const unsigned int* __restrict__ nodes, const double* __restrict__ weights,
    const double* __restrict__ ref_grad, const double* __restrict__ t,
    const double* __restrict__ lambda, double* __restrict__ out) {
    unsigned int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n_el) return;
    double g[MAX_NN][3];
    double s = 0.0;
    for (unsigned int q = 0; q < nq; ++q) {
        double det = physical_gradients(coords, nodes, e, nn, q, ref_grad, g);
        double gl[3] = {0.0, 0.0, 0.0};
        double gt[3] = {0.0, 0.0, 0.0};
        for (unsigned int a = 0; a < nn; ++a) {
            unsigned int n = nodes[nn * e + a];
            double la = lambda[n];
            double ta = t[n];
            for (int c = 0; c < 3; ++c) {
                gl[c] = gl[c] + la * g[a][c];
                gt[c] = gt[c] + ta * g[a][c];
            }
        }
        s = s + weights[q] * det * (gl[0] * gt[0] + gl[1] * gt[1] + gl[2] * gt[2]);
    }
    out[e] = -s;
}
"#
    ),
    functions: &["quad_element_matrices", "quad_conductivity_gradient"],
};

/// Small-strain elastic element kernels by quadrature (Tet4, Tet10, Hex8, Hex20, Hex27):
/// element stiffness matrices at E_e with the element residual at the prescribed
/// displacements, and the per-element Young's-modulus gradient. The Jacobian and physical
/// gradients are the thermal quadrature kernels' `physical_gradients`.
pub const QUADRATURE_ELASTIC: KernelSource = KernelSource {
    name: "quadrature_elastic.cu",
    source: concat!(
        quadrature_geometry_cu!(),
        r#"
// Lame constants per unit Young's modulus: lambda0 = nu / ((1 + nu)(1 - 2 nu)),
// mu0 = 1 / (2 (1 + nu)).
__device__ static void unit_lame(double nu, double* lambda0, double* mu0) {
    *lambda0 = nu / ((1.0 + nu) * (1.0 - nu * 2.0));
    *mu0 = 1.0 / ((1.0 + nu) * 2.0);
}

// Thermal strain at quadrature point q of element e: alpha_e (T_q - T_ref,e), T_q the
// interpolated nodal temperature.
__device__ static double thermal_strain(unsigned int e, unsigned int nn, unsigned int q,
                                        const unsigned int* __restrict__ nodes,
                                        const double* __restrict__ ref_shape,
                                        const double* __restrict__ alpha,
                                        const double* __restrict__ t_ref,
                                        const double* __restrict__ temperature) {
    double tq = 0.0;
    for (unsigned int a = 0; a < nn; ++a)
        tq = tq + ref_shape[nn * q + a] * temperature[nodes[nn * e + a]];
    return alpha[e] * (tq - t_ref[e]);
}

// K_e = sum_q w_q det J_q [lambda g_a[i] g_b[k] + mu g_a[k] g_b[i] + mu delta_ik g_a.g_b]
// (row-major, m = 3 nn local unknowns 3a + i, m * m per element) with lambda = E_e lambda0,
// mu = E_e mu0, and the element residual at the prescribed displacements (every free one
// zero) r_e = K_e u_fix,e - f_th,e, with the thermal load
// f_th,e[3a + i] = E_e sum_q w_q det J_q (3 lambda0 + 2 mu0) theta_q g_a[i] when has_thermal
// (the external loads are in the system's load vector).
extern "C" __global__ void elastic_element_matrices(
    unsigned int n_el, unsigned int nn, unsigned int nq, const double* __restrict__ coords,
    const unsigned int* __restrict__ nodes, const double* __restrict__ weights,
    const double* __restrict__ ref_shape, const double* __restrict__ ref_grad,
    const double* __restrict__ young, const double* __restrict__ poisson,
    const double* __restrict__ fixed, int has_thermal, const double* __restrict__ alpha,
    const double* __restrict__ t_ref, const double* __restrict__ temperature,
    double* __restrict__ ke, double* __restrict__ re) {
    unsigned int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n_el) return;
    double g[MAX_NN][3];
    double th[3 * MAX_NN];
    unsigned int m = 3u * nn;
    double* kk = ke + (size_t)m * m * e;
    double* rr = re + m * e;
    double lambda0, mu0;
    unit_lame(poisson[e], &lambda0, &mu0);
    double lam = young[e] * lambda0;
    double mu = young[e] * mu0;
    double bulk0 = 3.0 * lambda0 + 2.0 * mu0;
    for (unsigned int c = 0; c < m * m; ++c) kk[c] = 0.0;
    for (unsigned int r = 0; r < m; ++r) th[r] = 0.0;
    for (unsigned int q = 0; q < nq; ++q) {
        double w = weights[q] * physical_gradients(coords, nodes, e, nn, q, ref_grad, g);
        for (unsigned int a = 0; a < nn; ++a) {
            for (unsigned int b = 0; b < nn; ++b) {
                double gab = w * mu * (g[a][0] * g[b][0] + g[a][1] * g[b][1] + g[a][2] * g[b][2]);
                for (unsigned int i = 0; i < 3; ++i) {
                    double* row = kk + (3u * a + i) * m + 3u * b;
                    for (unsigned int k = 0; k < 3; ++k)
                        row[k] = row[k] + w * (lam * g[a][i] * g[b][k] + mu * g[a][k] * g[b][i]);
                    row[i] = row[i] + gab;
                }
            }
        }
        if (has_thermal) {
            double wt = w * bulk0 *
                        thermal_strain(e, nn, q, nodes, ref_shape, alpha, t_ref, temperature);
            for (unsigned int a = 0; a < nn; ++a)
                for (unsigned int i = 0; i < 3; ++i) th[3u * a + i] = th[3u * a + i] + wt * g[a][i];
        }
    }
    for (unsigned int r = 0; r < m; ++r) {
        double s = 0.0;
        for (unsigned int b = 0; b < nn; ++b) {
            unsigned int n = nodes[nn * e + b];
            for (unsigned int k = 0; k < 3; ++k) s = s + kk[r * m + 3u * b + k] * fixed[3u * n + k];
        }
        rr[r] = s - young[e] * th[r];
    }
}

// dJ/dE_e = -lambda_e^T dR_e/dE_e = -sum_q w_q det J_q [lambda0 div(lambda) div(u)
//           + mu0 grad(lambda) : (grad(u) + grad(u)^T) - (3 lambda0 + 2 mu0) theta_q div(lambda)]
// (the last term with has_thermal: R_e = E_e (K_e^0 u_e - f_th,e^0) - f_ext).
extern "C" __global__ void elastic_young_gradient(
    unsigned int n_el, unsigned int nn, unsigned int nq, const double* __restrict__ coords,
    const unsigned int* __restrict__ nodes, const double* __restrict__ weights,
    const double* __restrict__ ref_shape, const double* __restrict__ ref_grad,
    const double* __restrict__ poisson, int has_thermal, const double* __restrict__ alpha,
    const double* __restrict__ t_ref, const double* __restrict__ temperature,
    const double* __restrict__ u, const double* __restrict__ lambda, double* __restrict__ out) {
    unsigned int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n_el) return;
    double g[MAX_NN][3];
    double lambda0, mu0;
    unit_lame(poisson[e], &lambda0, &mu0);
    double bulk0 = 3.0 * lambda0 + 2.0 * mu0;
    double s = 0.0;
    for (unsigned int q = 0; q < nq; ++q) {
        double det = physical_gradients(coords, nodes, e, nn, q, ref_grad, g);
        double gu[3][3] = {{0.0, 0.0, 0.0}, {0.0, 0.0, 0.0}, {0.0, 0.0, 0.0}};
        double gl[3][3] = {{0.0, 0.0, 0.0}, {0.0, 0.0, 0.0}, {0.0, 0.0, 0.0}};
        for (unsigned int a = 0; a < nn; ++a) {
            unsigned int n = nodes[nn * e + a];
            for (int i = 0; i < 3; ++i) {
                double ua = u[3u * n + i];
                double la = lambda[3u * n + i];
                for (int j = 0; j < 3; ++j) {
                    gu[i][j] = gu[i][j] + ua * g[a][j];
                    gl[i][j] = gl[i][j] + la * g[a][j];
                }
            }
        }
        double div_u = gu[0][0] + gu[1][1] + gu[2][2];
        double div_l = gl[0][0] + gl[1][1] + gl[2][2];
        double shear = 0.0;
        for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j) shear = shear + gl[i][j] * (gu[i][j] + gu[j][i]);
        double v = lambda0 * div_l * div_u + mu0 * shear;
        if (has_thermal)
            v = v - bulk0 *
                        thermal_strain(e, nn, q, nodes, ref_shape, alpha, t_ref, temperature) *
                        div_l;
        s = s + weights[q] * det * v;
    }
    out[e] = -s;
}
"#
    ),
    functions: &["elastic_element_matrices", "elastic_young_gradient"],
};

/// Deterministic assembly by gathering: one thread per CSR entry (or per unknown) sums its
/// element contributions in the fixed order of the gather table.
pub const ASSEMBLY: KernelSource = KernelSource {
    name: "assembly.cu",
    source: r#"
// values[i] = base[i] (0 without a base) + the sum over c in ptr[i]..ptr[i+1] of ke[idx[c]],
// in that order.
extern "C" __global__ void csr_gather(unsigned int nnz, const unsigned int* __restrict__ ptr,
                                      const unsigned int* __restrict__ idx,
                                      const double* __restrict__ ke,
                                      const double* __restrict__ base, int has_base,
                                      double* __restrict__ values) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nnz) return;
    double s = has_base ? base[i] : 0.0;
    for (unsigned int c = ptr[i]; c < ptr[i + 1]; ++c) s += ke[idx[c]];
    values[i] = s;
}

// b[i] = load[i] - (sum over c in ptr[i]..ptr[i+1] of re[idx[c]]): the right-hand side
// -R(u_free = 0), the coefficient-free load plus the gathered element residuals.
extern "C" __global__ void rhs_gather(unsigned int n, const unsigned int* __restrict__ ptr,
                                      const unsigned int* __restrict__ idx,
                                      const double* __restrict__ re,
                                      const double* __restrict__ load, double* __restrict__ b) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double s = 0.0;
    for (unsigned int c = ptr[i]; c < ptr[i + 1]; ++c) s += re[idx[c]];
    b[i] = load[i] - s;
}

// inv[i] = 1 / A[i][i] (the pattern stores every diagonal entry).
extern "C" __global__ void csr_inverse_diagonal(unsigned int n,
                                                const unsigned int* __restrict__ row_ptr,
                                                const unsigned int* __restrict__ col_idx,
                                                const double* __restrict__ values,
                                                double* __restrict__ inv) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double d = 0.0;
    for (unsigned int c = row_ptr[i]; c < row_ptr[i + 1]; ++c) {
        if (col_idx[c] == i) d = values[c];
    }
    inv[i] = 1.0 / d;
}
"#,
    functions: &["csr_gather", "rhs_gather", "csr_inverse_diagonal"],
};

/// Vector kernels of the preconditioned CG: SpMV, the two-pass deterministic dot product,
/// axpy-type updates, the Jacobi preconditioner and the unknowns → nodes scatter.
pub const VECTOR: KernelSource = KernelSource {
    name: "vector.cu",
    source: r#"
#define BLOCK 256
#define DOT_CHUNK 8

// y = A x, one thread per row, the row's entries in column order.
extern "C" __global__ void csr_spmv(unsigned int n, const unsigned int* __restrict__ row_ptr,
                                    const unsigned int* __restrict__ col_idx,
                                    const double* __restrict__ values,
                                    const double* __restrict__ x, double* __restrict__ y) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double s = 0.0;
    for (unsigned int c = row_ptr[i]; c < row_ptr[i + 1]; ++c) s += values[c] * x[col_idx[c]];
    y[i] = s;
}

// Tree reduction of sh[0..BLOCK) into sh[0], halving the stride.
__device__ static void block_tree_sum(double* sh) {
    for (unsigned int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        __syncthreads();
        if (threadIdx.x < stride) sh[threadIdx.x] = sh[threadIdx.x] + sh[threadIdx.x + stride];
    }
    __syncthreads();
}

// partial[b] = the dot of block b's BLOCK * DOT_CHUNK entries: thread t sums entries
// base + j * BLOCK + t for j = 0..DOT_CHUNK, then a tree over the threads.
extern "C" __global__ void dot_partial(unsigned int n, const double* __restrict__ x,
                                       const double* __restrict__ y,
                                       double* __restrict__ partial) {
    __shared__ double sh[BLOCK];
    unsigned int base = blockIdx.x * (BLOCK * DOT_CHUNK);
    double s = 0.0;
    for (unsigned int j = 0; j < DOT_CHUNK; ++j) {
        unsigned int i = base + j * BLOCK + threadIdx.x;
        if (i < n) s += x[i] * y[i];
    }
    sh[threadIdx.x] = s;
    block_tree_sum(sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

// out[0] = sum of partial[0..m): one block, thread t sums t, t + BLOCK, ..., then a tree.
extern "C" __global__ void dot_finish(unsigned int m, const double* __restrict__ partial,
                                      double* __restrict__ out) {
    __shared__ double sh[BLOCK];
    double s = 0.0;
    for (unsigned int i = threadIdx.x; i < m; i += BLOCK) s += partial[i];
    sh[threadIdx.x] = s;
    block_tree_sum(sh);
    if (threadIdx.x == 0) out[0] = sh[0];
}

// y = y + a x
extern "C" __global__ void axpy(unsigned int n, double a, const double* __restrict__ x,
                                double* __restrict__ y) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] + a * x[i];
}

// y = x + a y
extern "C" __global__ void xpay(unsigned int n, const double* __restrict__ x, double a,
                                double* __restrict__ y) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + a * y[i];
}

// z = inv_diag * r (Jacobi preconditioner)
extern "C" __global__ void jacobi(unsigned int n, const double* __restrict__ inv,
                                  const double* __restrict__ r, double* __restrict__ z) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = inv[i] * r[i];
}

// out[node] = u[dof[node]] for a free node, fixed[node] for a constrained one (dof < 0).
extern "C" __global__ void to_nodal(unsigned int n_nodes, const int* __restrict__ dof,
                                    const double* __restrict__ u,
                                    const double* __restrict__ fixed, double* __restrict__ out) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_nodes) return;
    int d = dof[i];
    out[i] = d >= 0 ? u[d] : fixed[i];
}
"#,
    functions: &["csr_spmv", "dot_partial", "dot_finish", "axpy", "xpay", "jacobi", "to_nodal"],
};

/// Kernels of the device AMG V-cycle on any CSR matrix (the hierarchy's operators and
/// transfers): SpMV with accumulation, and the fused Chebyshev–Jacobi smoother passes of the
/// CPU hierarchy (`gradfem_solvers::amg`). One thread per row, each row's entries in column
/// order.
pub const AMG: KernelSource = KernelSource {
    name: "amg.cu",
    source: r#"
__device__ static double row_dot(const unsigned int* __restrict__ row_ptr,
                                 const unsigned int* __restrict__ col_idx,
                                 const double* __restrict__ values, unsigned int i,
                                 const double* __restrict__ x) {
    double s = 0.0;
    for (unsigned int c = row_ptr[i]; c < row_ptr[i + 1]; ++c) s += values[c] * x[col_idx[c]];
    return s;
}

// y = A x (accumulate = 0) or y = y + A x (accumulate = 1).
extern "C" __global__ void matrix_spmv(unsigned int n, const unsigned int* __restrict__ row_ptr,
                                       const unsigned int* __restrict__ col_idx,
                                       const double* __restrict__ values,
                                       const double* __restrict__ x, double* __restrict__ y,
                                       int accumulate) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double s = row_dot(row_ptr, col_idx, values, i, x);
    y[i] = accumulate ? y[i] + s : s;
}

// d = c inv r
extern "C" __global__ void scale_diag(unsigned int n, double c, const double* __restrict__ inv,
                                      const double* __restrict__ r, double* __restrict__ d) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] = c * inv[i] * r[i];
}

// r = b - A x; d = c inv r
extern "C" __global__ void residual_and_scale(
    unsigned int n, const unsigned int* __restrict__ row_ptr,
    const unsigned int* __restrict__ col_idx, const double* __restrict__ values,
    const double* __restrict__ b, const double* __restrict__ x, double* __restrict__ r,
    double* __restrict__ d, const double* __restrict__ inv, double c) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double ri = b[i] - row_dot(row_ptr, col_idx, values, i, x);
    r[i] = ri;
    d[i] = c * inv[i] * ri;
}

// One Chebyshev step: r = r - A d; x = x + d; d_new = alpha d + gamma inv r.
extern "C" __global__ void cheb_step(
    unsigned int n, const unsigned int* __restrict__ row_ptr,
    const unsigned int* __restrict__ col_idx, const double* __restrict__ values,
    const double* __restrict__ inv, const double* __restrict__ d, double* __restrict__ d_new,
    double* __restrict__ r, double* __restrict__ x, double alpha, double gamma) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double ri = r[i] - row_dot(row_ptr, col_idx, values, i, d);
    r[i] = ri;
    x[i] = x[i] + d[i];
    d_new[i] = alpha * d[i] + gamma * inv[i] * ri;
}

// r = r - A d; x = x + d.
extern "C" __global__ void residual_update(
    unsigned int n, const unsigned int* __restrict__ row_ptr,
    const unsigned int* __restrict__ col_idx, const double* __restrict__ values,
    const double* __restrict__ d, double* __restrict__ r, double* __restrict__ x) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    r[i] = r[i] - row_dot(row_ptr, col_idx, values, i, d);
    x[i] = x[i] + d[i];
}

// x = 0
extern "C" __global__ void fill_zero(unsigned int n, double* __restrict__ x) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 0.0;
}
"#,
    functions: &[
        "matrix_spmv",
        "scale_diag",
        "residual_and_scale",
        "cheb_step",
        "residual_update",
        "fill_zero",
    ],
};

/// Every NVRTC program of the backend.
pub const ALL: &[KernelSource] =
    &[TET4_THERMAL, ASSEMBLY, VECTOR, QUADRATURE_THERMAL, QUADRATURE_ELASTIC, AMG];

/// Number of dot-product blocks (partial sums) for vectors of `n` entries.
pub fn dot_blocks(n: usize) -> usize {
    n.div_ceil((BLOCK * DOT_CHUNK) as usize)
}
