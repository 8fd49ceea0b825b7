//! Lagrange reference elements: reference node coordinates, shape functions and their
//! gradients for every [`CellType`].
//!
//! # Reference cells and node orders (our order = gmsh order)
//!
//! | cell | reference domain | nodes |
//! |------|------------------|-------|
//! | `Point1` | the point 0 | 0 |
//! | `Line2`, `Line3` | ξ ∈ [-1, 1] | 0 (-1), 1 (+1), `Line3`: 2 (0) |
//! | `Tri3`, `Tri6` | ξ, η ≥ 0, ξ + η ≤ 1 | 0 (0,0), 1 (1,0), 2 (0,1); mid-edges 0-1, 1-2, 2-0 |
//! | `Quad4`, `Quad8`, `Quad9` | [-1, 1]² | 0 (-1,-1), 1 (1,-1), 2 (1,1), 3 (-1,1); mid-edges 0-1, 1-2, 2-3, 3-0; centre |
//! | `Tet4`, `Tet10` | ξ, η, ζ ≥ 0, ξ + η + ζ ≤ 1 | 0 (0,0,0), 1 (1,0,0), 2 (0,1,0), 3 (0,0,1); mid-edges 0-1, 1-2, 2-0, 3-0, 3-2, 3-1 |
//! | `Hex8`, `Hex20`, `Hex27` | [-1, 1]³ | vertices as `Quad4` at ζ = -1 then at ζ = +1; mid-edges 0-1, 0-3, 0-4, 1-2, 1-5, 2-3, 2-6, 3-7, 4-5, 4-7, 5-6, 6-7; face centres ζ-, η-, ξ-, ξ+, η+, ζ+; centre |
//! | `Prism6` | triangle × [-1, 1] | 0 (0,0,-1), 1 (1,0,-1), 2 (0,1,-1), 3 (0,0,1), 4 (1,0,1), 5 (0,1,1) |
//!
//! The isoparametric map is x(ξ) = Σ_a N_a(ξ) x_a with the nodes x_a of the cell in this order.
//! The mid-edge node lists come from [`CellType::edges`], the face centres of `Hex27` from
//! [`CellType::facets`], so the tables here and in [`crate::cell`] cannot drift apart.
//!
//! # Shape functions
//!
//! - tensor-product Lagrange cells (`Line2/3`, `Quad4/9`, `Hex8/27`):
//!   N_a(ξ) = Π_k ℓ_{r_ak}(ξ_k) with r_a the reference node and the 1D Lagrange polynomials
//!   ℓ_{±1}(t) = (1 ± t)/2 (linear) or ℓ_{-1}(t) = t(t-1)/2, ℓ_0(t) = 1 - t², ℓ_{+1}(t) = t(t+1)/2
//!   (quadratic);
//! - simplices in barycentric coordinates L_i: N_i = L_i (linear), N_i = L_i(2L_i - 1) at
//!   vertices and N = 4 L_i L_j at the mid-edge node of edge i-j (quadratic);
//! - serendipity `Quad8`: corners ¼(1+ξξ_a)(1+ηη_a)(ξξ_a+ηη_a-1), mid-edges ½(1-ξ²)(1+ηη_a)
//!   or ½(1+ξξ_a)(1-η²); `Hex20`: corners ⅛(1+ξξ_a)(1+ηη_a)(1+ζζ_a)(ξξ_a+ηη_a+ζζ_a-2),
//!   mid-edges ¼(1-ξ²)(1+ηη_a)(1+ζζ_a) and permutations;
//! - `Prism6`: N = L_i(ξ, η) · (1 ± ζ)/2.
//!
//! Each formula is written once, generic over a small scalar trait; the gradients come from
//! evaluating the same formula on a forward-mode dual number with three derivative components
//! (hand-rolled here because it is 40 lines and keeps the crate free of an AD dependency), so
//! values and gradients can never disagree. Hot loops should use
//! [`crate::quadrature::ElementTable`], which tabulates both once per rule.

use std::ops::{Add, Mul, Sub};
use std::sync::OnceLock;

use crate::cell::CellType;

/// The scalar the shape-function formulas are written over.
trait Scalar: Copy + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> {
    fn c(v: f64) -> Self;
}

impl Scalar for f64 {
    #[inline]
    fn c(v: f64) -> Self {
        v
    }
}

/// Forward-mode dual number with 3 derivative components.
#[derive(Clone, Copy, Debug)]
struct D3 {
    v: f64,
    d: [f64; 3],
}

impl Add for D3 {
    type Output = D3;
    #[inline]
    fn add(self, o: D3) -> D3 {
        D3 { v: self.v + o.v, d: [self.d[0] + o.d[0], self.d[1] + o.d[1], self.d[2] + o.d[2]] }
    }
}

impl Sub for D3 {
    type Output = D3;
    #[inline]
    fn sub(self, o: D3) -> D3 {
        D3 { v: self.v - o.v, d: [self.d[0] - o.d[0], self.d[1] - o.d[1], self.d[2] - o.d[2]] }
    }
}

impl Mul for D3 {
    type Output = D3;
    #[inline]
    fn mul(self, o: D3) -> D3 {
        D3 {
            v: self.v * o.v,
            d: [
                self.d[0] * o.v + self.v * o.d[0],
                self.d[1] * o.v + self.v * o.d[1],
                self.d[2] * o.v + self.v * o.d[2],
            ],
        }
    }
}

impl Scalar for D3 {
    #[inline]
    fn c(v: f64) -> Self {
        D3 { v, d: [0.0; 3] }
    }
}

/// Second-order forward-mode jet in 3 variables: value, gradient and (symmetric) Hessian.
#[derive(Clone, Copy, Debug)]
struct J2 {
    v: f64,
    d: [f64; 3],
    h: [[f64; 3]; 3],
}

impl Add for J2 {
    type Output = J2;
    #[inline]
    fn add(self, o: J2) -> J2 {
        J2 {
            v: self.v + o.v,
            d: std::array::from_fn(|k| self.d[k] + o.d[k]),
            h: std::array::from_fn(|k| std::array::from_fn(|l| self.h[k][l] + o.h[k][l])),
        }
    }
}

impl Sub for J2 {
    type Output = J2;
    #[inline]
    fn sub(self, o: J2) -> J2 {
        J2 {
            v: self.v - o.v,
            d: std::array::from_fn(|k| self.d[k] - o.d[k]),
            h: std::array::from_fn(|k| std::array::from_fn(|l| self.h[k][l] - o.h[k][l])),
        }
    }
}

impl Mul for J2 {
    type Output = J2;
    /// (fg)'' = f''g + f'g'ᵀ + g'f'ᵀ + fg''.
    #[inline]
    #[allow(clippy::suspicious_arithmetic_impl)] // the product rule adds
    fn mul(self, o: J2) -> J2 {
        J2 {
            v: self.v * o.v,
            d: std::array::from_fn(|k| self.d[k] * o.v + self.v * o.d[k]),
            h: std::array::from_fn(|k| {
                std::array::from_fn(|l| {
                    // The cross terms summed first: the result is exactly symmetric.
                    self.h[k][l] * o.v
                        + (self.d[k] * o.d[l] + o.d[k] * self.d[l])
                        + self.v * o.h[k][l]
                })
            }),
        }
    }
}

impl Scalar for J2 {
    #[inline]
    fn c(v: f64) -> Self {
        J2 { v, d: [0.0; 3], h: [[0.0; 3]; 3] }
    }
}

/// A forward-mode jet that can stand for the reference coordinate ξ_k itself.
trait Variable: Scalar {
    /// ξ_k = `v` with its unit first derivative along k.
    fn variable(v: f64, k: usize) -> Self;
}

impl Variable for D3 {
    fn variable(v: f64, k: usize) -> Self {
        let mut x = D3::c(v);
        x.d[k] = 1.0;
        x
    }
}

impl Variable for J2 {
    fn variable(v: f64, k: usize) -> Self {
        let mut x = J2::c(v);
        x.d[k] = 1.0;
        x
    }
}

/// The shape functions of `ct` at `xi` on jets whose variables are ξ's components within the
/// cell's dimension (the others are constants): their derivatives in ξ ride along. The first
/// `ct.n_nodes()` entries are the cell's (a stack buffer: no allocation per call).
fn eval_on_variables<T: Variable>(ct: CellType, xi: [f64; 3]) -> [T; 27] {
    let x: [T; 3] =
        std::array::from_fn(|k| if k < ct.dim() { T::variable(xi[k], k) } else { T::c(xi[k]) });
    let mut buf = [T::c(0.0); 27];
    eval(ct, x, &mut buf[..ct.n_nodes()]);
    buf
}

/// Linear 1D Lagrange polynomial of the node at r = ±1.
#[inline]
fn l1<T: Scalar>(r: f64, t: T) -> T {
    T::c(0.5) + T::c(0.5 * r) * t
}

/// Quadratic 1D Lagrange polynomial of the node at r ∈ {-1, 0, 1}.
#[inline]
fn l2<T: Scalar>(r: f64, t: T) -> T {
    if r == 0.0 { T::c(1.0) - t * t } else { T::c(0.5) * t * (t + T::c(r)) }
}

/// Evaluate the shape functions of `ct` at `x` (written once for f64 and for dual numbers).
fn eval<T: Scalar>(ct: CellType, x: [T; 3], out: &mut [T]) {
    use CellType::*;
    assert_eq!(
        out.len(),
        ct.n_nodes(),
        "shape function buffer for a {ct} must have {} entries, got {}",
        ct.n_nodes(),
        out.len()
    );
    let nodes = reference_nodes(ct);
    let one = T::c(1.0);
    match ct {
        Point1 => out[0] = one,
        Line2 | Quad4 | Hex8 => {
            let d = ct.dim();
            for (a, r) in nodes.iter().enumerate() {
                let mut v = one;
                for k in 0..d {
                    v = v * l1(r[k], x[k]);
                }
                out[a] = v;
            }
        }
        Line3 | Quad9 | Hex27 => {
            let d = ct.dim();
            for (a, r) in nodes.iter().enumerate() {
                let mut v = one;
                for k in 0..d {
                    v = v * l2(r[k], x[k]);
                }
                out[a] = v;
            }
        }
        Tri3 | Tri6 | Tet4 | Tet10 => {
            let d = ct.dim();
            let mut l = [one; 4];
            let mut l0 = one;
            for k in 0..d {
                l0 = l0 - x[k];
                l[k + 1] = x[k];
            }
            l[0] = l0;
            if ct.order() == 1 {
                out[..=d].copy_from_slice(&l[..=d]);
            } else {
                for i in 0..=d {
                    out[i] = l[i] * (T::c(2.0) * l[i] - one);
                }
                for (e, [i, j]) in ct.edges().iter().enumerate() {
                    out[d + 1 + e] = T::c(4.0) * l[*i] * l[*j];
                }
            }
        }
        Quad8 => {
            for (a, r) in nodes.iter().enumerate() {
                let (xr, yr) = (T::c(r[0]) * x[0], T::c(r[1]) * x[1]);
                out[a] = if a < 4 {
                    T::c(0.25) * (one + xr) * (one + yr) * (xr + yr - one)
                } else if r[0] == 0.0 {
                    T::c(0.5) * (one - x[0] * x[0]) * (one + yr)
                } else {
                    T::c(0.5) * (one + xr) * (one - x[1] * x[1])
                };
            }
        }
        Hex20 => {
            for (a, r) in nodes.iter().enumerate() {
                let p = [T::c(r[0]) * x[0], T::c(r[1]) * x[1], T::c(r[2]) * x[2]];
                out[a] = if a < 8 {
                    T::c(0.125)
                        * (one + p[0])
                        * (one + p[1])
                        * (one + p[2])
                        * (p[0] + p[1] + p[2] - T::c(2.0))
                } else {
                    // The one direction with r = 0 carries (1 - t²), the others (1 + t r).
                    let mut v = T::c(0.25);
                    for k in 0..3 {
                        v = v * if r[k] == 0.0 { one - x[k] * x[k] } else { one + p[k] };
                    }
                    v
                };
            }
        }
        Prism6 => {
            let l = [one - x[0] - x[1], x[0], x[1]];
            for a in 0..6 {
                out[a] = l[a % 3] * l1(if a < 3 { -1.0 } else { 1.0 }, x[2]);
            }
        }
    }
}

/// The reference coordinates of the nodes of `ct`, in gradfem's (= gmsh's) local order; unused
/// components are 0. See the module docs for the reference domains.
pub fn reference_nodes(ct: CellType) -> &'static [[f64; 3]] {
    static TABLES: [OnceLock<Vec<[f64; 3]>>; 14] = [const { OnceLock::new() }; 14];
    let i = CellType::ALL.iter().position(|&c| c == ct).expect("every cell type is in ALL");
    TABLES[i].get_or_init(|| build_reference_nodes(ct))
}

fn build_reference_nodes(ct: CellType) -> Vec<[f64; 3]> {
    use CellType::*;
    let vertices: Vec<[f64; 3]> = match ct.linear() {
        Point1 => vec![[0.0; 3]],
        Line2 => vec![[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]],
        Tri3 => vec![[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],
        Quad4 => vec![[-1.0, -1.0, 0.0], [1.0, -1.0, 0.0], [1.0, 1.0, 0.0], [-1.0, 1.0, 0.0]],
        Tet4 => vec![[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
        Hex8 => vec![
            [-1.0, -1.0, -1.0],
            [1.0, -1.0, -1.0],
            [1.0, 1.0, -1.0],
            [-1.0, 1.0, -1.0],
            [-1.0, -1.0, 1.0],
            [1.0, -1.0, 1.0],
            [1.0, 1.0, 1.0],
            [-1.0, 1.0, 1.0],
        ],
        Prism6 => vec![
            [0.0, 0.0, -1.0],
            [1.0, 0.0, -1.0],
            [0.0, 1.0, -1.0],
            [0.0, 0.0, 1.0],
            [1.0, 0.0, 1.0],
            [0.0, 1.0, 1.0],
        ],
        other => unreachable!("{other} is not a linear cell type"),
    };
    let mut nodes = vertices.clone();
    let mean = |ids: &[usize]| -> [f64; 3] {
        let mut c = [0.0; 3];
        for &i in ids {
            for k in 0..3 {
                c[k] += vertices[i][k];
            }
        }
        c.map(|v| v / ids.len() as f64)
    };
    if ct.order() == 2 {
        for e in ct.edges() {
            nodes.push(mean(e));
        }
    }
    match ct {
        Quad9 => nodes.push(mean(&[0, 1, 2, 3])),
        Hex27 => {
            for f in ct.facets() {
                nodes.push(mean(&f.nodes[..4]));
            }
            nodes.push([0.0; 3]);
        }
        _ => {}
    }
    assert_eq!(nodes.len(), ct.n_nodes(), "{ct}");
    nodes
}

/// Measure of the reference cell: 1 (point), 2 (line [-1,1]), 1/2 (triangle), 4 (square
/// [-1,1]²), 1/6 (tetrahedron), 8 (cube [-1,1]³), 1 (prism = triangle × [-1,1]).
pub fn reference_measure(ct: CellType) -> f64 {
    use CellType::*;
    match ct.linear() {
        Point1 => 1.0,
        Line2 => 2.0,
        Tri3 => 0.5,
        Quad4 => 4.0,
        Tet4 => 1.0 / 6.0,
        Hex8 => 8.0,
        Prism6 => 1.0,
        other => unreachable!("{other} is not a linear cell type"),
    }
}

/// The shape functions N_a(ξ) of `ct` at the reference point `xi`, written into `n`
/// (length `ct.n_nodes()`). Components of `xi` beyond `ct.dim()` are ignored.
pub fn shape_functions_into(ct: CellType, xi: [f64; 3], n: &mut [f64]) {
    eval(ct, xi, n);
}

/// The reference gradients ∂N_a/∂ξ_k of the shape functions of `ct` at `xi`, written into `dn`
/// (`dn[a][k]`, length `ct.n_nodes()`); components `k >= ct.dim()` are 0.
pub fn shape_gradients_into(ct: CellType, xi: [f64; 3], dn: &mut [[f64; 3]]) {
    assert_eq!(
        dn.len(),
        ct.n_nodes(),
        "shape gradient buffer for a {ct} must have {} entries, got {}",
        ct.n_nodes(),
        dn.len()
    );
    let buf = eval_on_variables::<D3>(ct, xi);
    for (out, v) in dn.iter_mut().zip(buf.iter()) {
        *out = v.d;
    }
}

/// The reference Hessians ∂²N_a/∂ξ_k∂ξ_l of the shape functions of `ct` at `xi`, written into
/// `ddn` (`ddn[a][k][l]`, length `ct.n_nodes()`); entries with `k` or `l >= ct.dim()` are 0.
/// Zero for the affine cells (`Tri3`, `Tet4`); constant for the quadratic simplices. The same
/// formulas as [`shape_functions_into`], on a second-order jet.
pub fn shape_hessians_into(ct: CellType, xi: [f64; 3], ddn: &mut [[[f64; 3]; 3]]) {
    assert_eq!(
        ddn.len(),
        ct.n_nodes(),
        "shape Hessian buffer for a {ct} must have {} entries, got {}",
        ct.n_nodes(),
        ddn.len()
    );
    let buf = eval_on_variables::<J2>(ct, xi);
    for (out, v) in ddn.iter_mut().zip(buf.iter()) {
        *out = v.h;
    }
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)] // index loops mirror the formulas
mod tests {
    use super::*;
    use rstest::rstest;

    /// A deterministic pseudo-random point inside the reference cell.
    pub(crate) fn inside_points(ct: CellType, n: usize) -> Vec<[f64; 3]> {
        let mut s: u64 = 0x9e37_79b9_7f4a_7c15 ^ (ct.n_nodes() as u64);
        let mut rnd = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64) / ((1u64 << 53) as f64)
        };
        (0..n)
            .map(|_| {
                let mut p = [rnd(), rnd(), rnd()];
                use CellType::*;
                match ct.linear() {
                    Tri3 | Tet4 | Prism6 => {
                        let m = if ct.linear() == Tet4 { 3 } else { 2 };
                        let sum: f64 = p[..m].iter().sum();
                        if sum > 1.0 {
                            for v in &mut p[..m] {
                                *v /= sum * 1.1;
                            }
                        }
                        if ct == Prism6 {
                            p[2] = 2.0 * p[2] - 1.0;
                        }
                    }
                    _ => p = p.map(|v| 2.0 * v - 1.0),
                }
                for v in &mut p[ct.dim()..] {
                    *v = 0.0;
                }
                p
            })
            .collect()
    }

    #[rstest]
    fn partition_of_unity_and_zero_gradient_sum(
        #[values(
            CellType::Point1,
            CellType::Line2,
            CellType::Line3,
            CellType::Tri3,
            CellType::Tri6,
            CellType::Quad4,
            CellType::Quad8,
            CellType::Quad9,
            CellType::Tet4,
            CellType::Tet10,
            CellType::Hex8,
            CellType::Hex20,
            CellType::Hex27,
            CellType::Prism6
        )]
        ct: CellType,
    ) {
        let nn = ct.n_nodes();
        let mut n = vec![0.0; nn];
        let mut dn = vec![[0.0; 3]; nn];
        for p in inside_points(ct, 20) {
            shape_functions_into(ct, p, &mut n);
            shape_gradients_into(ct, p, &mut dn);
            let s: f64 = n.iter().sum();
            assert!((s - 1.0).abs() < 1e-13, "{ct} at {p:?}: ΣN = {s}");
            for k in 0..3 {
                let g: f64 = dn.iter().map(|d| d[k]).sum();
                assert!(g.abs() < 1e-12, "{ct} at {p:?}: Σ∂N/∂ξ{k} = {g}");
            }
            for d in &dn {
                for v in &d[ct.dim()..] {
                    assert_eq!(*v, 0.0, "{ct}: gradient beyond dim");
                }
            }
        }
    }

    #[rstest]
    fn kronecker_delta_at_nodes(
        #[values(
            CellType::Point1,
            CellType::Line2,
            CellType::Line3,
            CellType::Tri3,
            CellType::Tri6,
            CellType::Quad4,
            CellType::Quad8,
            CellType::Quad9,
            CellType::Tet4,
            CellType::Tet10,
            CellType::Hex8,
            CellType::Hex20,
            CellType::Hex27,
            CellType::Prism6
        )]
        ct: CellType,
    ) {
        let nn = ct.n_nodes();
        let mut n = vec![0.0; nn];
        for (b, x) in reference_nodes(ct).iter().enumerate() {
            shape_functions_into(ct, *x, &mut n);
            for (a, v) in n.iter().enumerate() {
                let want = if a == b { 1.0 } else { 0.0 };
                assert!((v - want).abs() < 1e-14, "{ct}: N_{a}(node {b}) = {v}");
            }
        }
    }

    #[rstest]
    fn gradients_match_central_differences(
        #[values(
            CellType::Line2,
            CellType::Line3,
            CellType::Tri3,
            CellType::Tri6,
            CellType::Quad4,
            CellType::Quad8,
            CellType::Quad9,
            CellType::Tet4,
            CellType::Tet10,
            CellType::Hex8,
            CellType::Hex20,
            CellType::Hex27,
            CellType::Prism6
        )]
        ct: CellType,
    ) {
        let nn = ct.n_nodes();
        let (mut np, mut nm) = (vec![0.0; nn], vec![0.0; nn]);
        let mut dn = vec![[0.0; 3]; nn];
        let h = 1e-6;
        for p in inside_points(ct, 10) {
            shape_gradients_into(ct, p, &mut dn);
            for k in 0..ct.dim() {
                let (mut xp, mut xm) = (p, p);
                xp[k] += h;
                xm[k] -= h;
                shape_functions_into(ct, xp, &mut np);
                shape_functions_into(ct, xm, &mut nm);
                for a in 0..nn {
                    let fd = (np[a] - nm[a]) / (2.0 * h);
                    assert!(
                        (fd - dn[a][k]).abs() < 1e-8,
                        "{ct} node {a} dir {k} at {p:?}: fd {fd} vs {}",
                        dn[a][k]
                    );
                }
            }
        }
    }

    #[rstest]
    fn hessians_match_central_differences_of_the_gradients(
        #[values(
            CellType::Line3,
            CellType::Tri3,
            CellType::Tri6,
            CellType::Quad4,
            CellType::Quad8,
            CellType::Tet4,
            CellType::Tet10,
            CellType::Hex8,
            CellType::Hex20,
            CellType::Hex27,
            CellType::Prism6
        )]
        ct: CellType,
    ) {
        let nn = ct.n_nodes();
        let (mut gp, mut gm) = (vec![[0.0; 3]; nn], vec![[0.0; 3]; nn]);
        let mut ddn = vec![[[0.0; 3]; 3]; nn];
        let h = 1e-6;
        for p in inside_points(ct, 10) {
            shape_hessians_into(ct, p, &mut ddn);
            for l in 0..3 {
                let (mut xp, mut xm) = (p, p);
                if l < ct.dim() {
                    xp[l] += h;
                    xm[l] -= h;
                }
                shape_gradients_into(ct, xp, &mut gp);
                shape_gradients_into(ct, xm, &mut gm);
                for a in 0..nn {
                    for k in 0..3 {
                        let fd = if l < ct.dim() { (gp[a][k] - gm[a][k]) / (2.0 * h) } else { 0.0 };
                        assert!(
                            (fd - ddn[a][k][l]).abs() < 1e-7,
                            "{ct} node {a} ({k}, {l}) at {p:?}: fd {fd} vs {}",
                            ddn[a][k][l]
                        );
                        assert_eq!(ddn[a][k][l], ddn[a][l][k], "{ct}: symmetric");
                    }
                }
            }
            if ct.order() == 1 && matches!(ct, CellType::Tri3 | CellType::Tet4) {
                assert!(ddn.iter().flatten().flatten().all(|v| *v == 0.0), "{ct} is affine");
            }
        }
    }

    #[rstest]
    fn quadratic_elements_reproduce_quadratics(
        #[values(CellType::Tri6, CellType::Quad9, CellType::Tet10, CellType::Hex27)] ct: CellType,
    ) {
        let f = |x: [f64; 3]| 1.0 + x[0] - 2.0 * x[1] + x[0] * x[1] + 3.0 * x[1] * x[1];
        let g = |x: [f64; 3]| [1.0 + x[1], -2.0 + x[0] + 6.0 * x[1], 0.0];
        let nodes = reference_nodes(ct);
        let nn = ct.n_nodes();
        let (mut n, mut dn) = (vec![0.0; nn], vec![[0.0; 3]; nn]);
        for p in inside_points(ct, 10) {
            shape_functions_into(ct, p, &mut n);
            shape_gradients_into(ct, p, &mut dn);
            let v: f64 = (0..nn).map(|a| n[a] * f(nodes[a])).sum();
            assert!((v - f(p)).abs() < 1e-12, "{ct}");
            for k in 0..2 {
                let d: f64 = (0..nn).map(|a| dn[a][k] * f(nodes[a])).sum();
                assert!((d - g(p)[k]).abs() < 1e-11, "{ct} d{k}");
            }
        }
    }

    /// The facet tables of [`crate::cell`] agree with the reference nodes: every facet node
    /// sits where the facet's own (linear) map of its vertices puts it, and the right-hand
    /// normal points out of the cell.
    #[rstest]
    fn facet_tables_are_consistent_and_outward(
        #[values(
            CellType::Tri3,
            CellType::Tri6,
            CellType::Quad4,
            CellType::Quad8,
            CellType::Quad9,
            CellType::Tet4,
            CellType::Tet10,
            CellType::Hex8,
            CellType::Hex20,
            CellType::Hex27,
            CellType::Prism6
        )]
        ct: CellType,
    ) {
        let nodes = reference_nodes(ct);
        let nv = ct.n_vertices();
        let mut cc = [0.0; 3];
        for x in &nodes[..nv] {
            for k in 0..3 {
                cc[k] += x[k] / nv as f64;
            }
        }
        for (fi, f) in ct.facets().iter().enumerate() {
            let ft = f.cell_type;
            let lin = ft.linear();
            let fv = ft.n_vertices();
            let mut n = vec![0.0; fv];
            for (i, &local) in f.nodes.iter().enumerate() {
                shape_functions_into(lin, reference_nodes(ft)[i], &mut n);
                let mut x = [0.0; 3];
                for v in 0..fv {
                    for k in 0..3 {
                        x[k] += n[v] * nodes[f.nodes[v]][k];
                    }
                }
                for k in 0..3 {
                    assert!(
                        (x[k] - nodes[local][k]).abs() < 1e-14,
                        "{ct} facet {fi}: node {i} (local {local}) at {:?}, expected {x:?}",
                        nodes[local]
                    );
                }
            }
            let p: Vec<[f64; 3]> = f.nodes[..fv].iter().map(|&l| nodes[l]).collect();
            let mut fc = [0.0; 3];
            for x in &p {
                for k in 0..3 {
                    fc[k] += x[k] / fv as f64;
                }
            }
            let d = [fc[0] - cc[0], fc[1] - cc[1], fc[2] - cc[2]];
            let out = if ct.dim() == 3 {
                let (a, b) = (
                    [p[1][0] - p[0][0], p[1][1] - p[0][1], p[1][2] - p[0][2]],
                    [p[fv - 1][0] - p[0][0], p[fv - 1][1] - p[0][1], p[fv - 1][2] - p[0][2]],
                );
                // Right-hand normal of the corner loop p0 → p1 → ... : (p1 - p0) × (p_last - p0).
                let nrm = [
                    a[1] * b[2] - a[2] * b[1],
                    a[2] * b[0] - a[0] * b[2],
                    a[0] * b[1] - a[1] * b[0],
                ];
                nrm[0] * d[0] + nrm[1] * d[1] + nrm[2] * d[2]
            } else {
                let t = [p[1][0] - p[0][0], p[1][1] - p[0][1]];
                t[1] * d[0] - t[0] * d[1]
            };
            assert!(out > 0.0, "{ct} facet {fi} is not outward");
        }
    }
}
