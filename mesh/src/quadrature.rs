//! Quadrature rules on the reference cells and tabulated shape functions ([`ElementTable`]).
//!
//! # Rules
//!
//! - `Line*`, `Quad*`, `Hex*`: Gauss–Legendre tensor products with n = ⌈(p+1)/2⌉ points per
//!   direction, exact for polynomials of degree ≤ p in each direction separately.
//! - `Tri*`, `Tet*`: the classic symmetric rules for p ≤ 2 (centroid; 3-point rule at
//!   (1/6, 1/6) with weights 1/6; 4-point rule at barycentric (a, b, b, b) with
//!   a = (5 + 3√5)/20, b = (5 - √5)/20, weights 1/24), and for p ≥ 3 a collapsed (Duffy / Stroud
//!   conical) product of Gauss–Legendre rules: the square/cube (u, v, w) ∈ \[0, 1\]ᵈ is mapped to
//!   the simplex by ξ = u, η = v(1-u), ζ = w(1-u)(1-v) with Jacobian (1-u)^{d-1}(1-v)^{d-2};
//!   the Jacobian is integrated by the Gauss–Legendre points themselves (one or two extra points
//!   per collapsed direction) instead of Gauss–Jacobi weights, which keeps the code short and
//!   any degree available. All points lie strictly inside the simplex; weights are positive.
//!   Exact for total degree ≤ p.
//! - `Prism6`: triangle rule of degree p × Gauss–Legendre line rule of degree p, exact for
//!   polynomials of total degree ≤ p in (ξ, η) times degree ≤ p in ζ.
//! - `Point1`: one point with weight 1.
//!
//! Weights sum to [`reference_measure`]. Gauss–Legendre nodes are computed by Newton's method on
//! the three-term recurrence of the Legendre polynomials (accurate to a few ulps up to the
//! degrees allowed here).

use crate::cell::CellType;
use crate::reference::{reference_measure, shape_functions_into, shape_gradients_into};

/// Highest degree any rule here is built for (all cell types).
const MAX_DEGREE: usize = 30;

/// Quadrature points (reference coordinates; unused components 0) and weights.
#[derive(Clone, Debug, PartialEq)]
pub struct QuadratureRule {
    /// Reference coordinates of the points.
    pub points: Vec<[f64; 3]>,
    /// Weights, summing to the reference measure.
    pub weights: Vec<f64>,
}

impl QuadratureRule {
    /// Number of points.
    pub fn len(&self) -> usize {
        self.weights.len()
    }

    /// Whether the rule has no point.
    pub fn is_empty(&self) -> bool {
        self.weights.is_empty()
    }
}

/// The highest degree [`quadrature`] accepts for `ct` (30 for every cell type).
pub fn max_quadrature_degree(ct: CellType) -> usize {
    let _ = ct;
    MAX_DEGREE
}

/// Gauss–Legendre rule with `n` points on [-1, 1], exact for degree ≤ 2n - 1.
///
/// Newton iteration on P_n from the initial guess cos(π(i + 3/4)/(n + 1/2)); P_n and P_n' from
/// the recurrence (k+1)P_{k+1} = (2k+1)xP_k - kP_{k-1}; weights 2/((1-x²)P_n'(x)²).
pub fn gauss_legendre(n: usize) -> (Vec<f64>, Vec<f64>) {
    assert!(n >= 1, "a Gauss–Legendre rule needs at least one point");
    // (P_n(t), P_n'(t)) from the recurrence.
    let legendre = |t: f64| {
        let (mut p0, mut p1) = (1.0, t);
        for k in 1..n {
            let p2 = ((2 * k + 1) as f64 * t * p1 - k as f64 * p0) / (k + 1) as f64;
            p0 = p1;
            p1 = p2;
        }
        // n = 1: P_1 = t, P_0 = 1, P_1' = 1.
        let dp = if n == 1 { 1.0 } else { n as f64 * (t * p1 - p0) / (t * t - 1.0) };
        (p1, dp)
    };
    let mut x = vec![0.0; n];
    let mut w = vec![0.0; n];
    for i in 0..n.div_ceil(2) {
        let mut t = (std::f64::consts::PI * (i as f64 + 0.75) / (n as f64 + 0.5)).cos();
        for _ in 0..100 {
            let (p, dp) = legendre(t);
            let dt = p / dp;
            t -= dt;
            if dt.abs() < 1e-16 {
                break;
            }
        }
        let (_, dp) = legendre(t);
        let wi = 2.0 / ((1.0 - t * t) * dp * dp);
        x[i] = -t;
        x[n - 1 - i] = t;
        w[i] = wi;
        w[n - 1 - i] = wi;
    }
    if n % 2 == 1 {
        x[n / 2] = 0.0;
    }
    (x, w)
}

/// Gauss–Legendre rule on [0, 1] with `n` points.
fn gauss_legendre_01(n: usize) -> (Vec<f64>, Vec<f64>) {
    let (x, w) = gauss_legendre(n);
    (x.iter().map(|t| 0.5 * (t + 1.0)).collect(), w.iter().map(|v| 0.5 * v).collect())
}

fn line_rule(degree: usize) -> (Vec<f64>, Vec<f64>) {
    gauss_legendre((degree + 1).div_ceil(2).max(1))
}

fn tensor_rule(dim: usize, degree: usize) -> QuadratureRule {
    let (x, w) = line_rule(degree);
    let n = x.len();
    let mut points = Vec::new();
    let mut weights = Vec::new();
    let nk = |k: usize| if k < dim { n } else { 1 };
    for k in 0..nk(2) {
        for j in 0..nk(1) {
            for i in 0..nk(0) {
                let mut p = [0.0; 3];
                let mut wt = 1.0;
                for (d, idx) in [i, j, k].into_iter().enumerate().take(dim) {
                    p[d] = x[idx];
                    wt *= w[idx];
                }
                points.push(p);
                weights.push(wt);
            }
        }
    }
    QuadratureRule { points, weights }
}

fn triangle_rule(degree: usize) -> QuadratureRule {
    match degree {
        0 | 1 => QuadratureRule { points: vec![[1.0 / 3.0, 1.0 / 3.0, 0.0]], weights: vec![0.5] },
        2 => QuadratureRule {
            points: vec![
                [1.0 / 6.0, 1.0 / 6.0, 0.0],
                [2.0 / 3.0, 1.0 / 6.0, 0.0],
                [1.0 / 6.0, 2.0 / 3.0, 0.0],
            ],
            weights: vec![1.0 / 6.0; 3],
        },
        p => {
            // ∫ f dξdη = ∫₀¹∫₀¹ f(u, v(1-u)) (1-u) du dv: degree p+1 in u, p in v.
            let (xu, wu) = gauss_legendre_01((p + 2).div_ceil(2));
            let (xv, wv) = gauss_legendre_01((p + 1).div_ceil(2));
            let mut rule = QuadratureRule { points: Vec::new(), weights: Vec::new() };
            for (u, a) in xu.iter().zip(&wu) {
                for (v, b) in xv.iter().zip(&wv) {
                    rule.points.push([*u, v * (1.0 - u), 0.0]);
                    rule.weights.push(a * b * (1.0 - u));
                }
            }
            rule
        }
    }
}

fn tet_rule(degree: usize) -> QuadratureRule {
    match degree {
        0 | 1 => QuadratureRule { points: vec![[0.25; 3]], weights: vec![1.0 / 6.0] },
        2 => {
            let a = (5.0 + 3.0 * 5f64.sqrt()) / 20.0;
            let b = (5.0 - 5f64.sqrt()) / 20.0;
            QuadratureRule {
                points: vec![[b, b, b], [a, b, b], [b, a, b], [b, b, a]],
                weights: vec![1.0 / 24.0; 4],
            }
        }
        p => {
            // ξ = u, η = v(1-u), ζ = w(1-u)(1-v), Jacobian (1-u)²(1-v):
            // degree p+2 in u, p+1 in v, p in w.
            let (xu, wu) = gauss_legendre_01((p + 3).div_ceil(2));
            let (xv, wv) = gauss_legendre_01((p + 2).div_ceil(2));
            let (xw, ww) = gauss_legendre_01((p + 1).div_ceil(2));
            let mut rule = QuadratureRule { points: Vec::new(), weights: Vec::new() };
            for (u, a) in xu.iter().zip(&wu) {
                for (v, b) in xv.iter().zip(&wv) {
                    for (w, c) in xw.iter().zip(&ww) {
                        rule.points.push([*u, v * (1.0 - u), w * (1.0 - u) * (1.0 - v)]);
                        rule.weights.push(a * b * c * (1.0 - u) * (1.0 - u) * (1.0 - v));
                    }
                }
            }
            rule
        }
    }
}

/// A quadrature rule on the reference cell of `ct` exact for polynomials of total degree
/// ≤ `degree` (simplices), of degree ≤ `degree` in each direction (tensor cells), or of total
/// degree ≤ `degree` in (ξ, η) times degree ≤ `degree` in ζ (prism). See the module docs.
///
/// # Panics
/// If `degree > max_quadrature_degree(ct)` (a caller's mistake).
pub fn quadrature(ct: CellType, degree: usize) -> QuadratureRule {
    use CellType::*;
    assert!(
        degree <= max_quadrature_degree(ct),
        "quadrature degree {degree} requested for a {ct}; the highest available is {}",
        max_quadrature_degree(ct)
    );
    let rule = match ct.linear() {
        Point1 => QuadratureRule { points: vec![[0.0; 3]], weights: vec![1.0] },
        Line2 => tensor_rule(1, degree),
        Quad4 => tensor_rule(2, degree),
        Hex8 => tensor_rule(3, degree),
        Tri3 => triangle_rule(degree),
        Tet4 => tet_rule(degree),
        Prism6 => {
            let tri = triangle_rule(degree);
            let (x, w) = line_rule(degree);
            let mut rule = QuadratureRule { points: Vec::new(), weights: Vec::new() };
            for (z, wz) in x.iter().zip(&w) {
                for (p, wp) in tri.points.iter().zip(&tri.weights) {
                    rule.points.push([p[0], p[1], *z]);
                    rule.weights.push(wp * wz);
                }
            }
            rule
        }
        other => unreachable!("{other} is not a linear cell type"),
    };
    debug_assert!(
        (rule.weights.iter().sum::<f64>() - reference_measure(ct)).abs() < 1e-12,
        "weights of the {ct} rule must sum to the reference measure"
    );
    rule
}

/// The quadrature degree gradfem uses for `ct` unless told otherwise: 2 × the geometric order
/// (0 for points).
///
/// This integrates the mass matrix N_a N_b exactly on affine simplices (`Tet4`, `Tri3`: 2;
/// `Tet10`, `Tri6`: 4) and on parallelepipeds/parallelograms for tensor cells (per-direction
/// degree 2 for `Hex8`, 4 for `Hex20`/`Hex27`), and hence also the stiffness matrix
/// ∇N_a·∇N_b (degree 2·order − 2) on affine cells; on distorted hexes neither is a polynomial
/// and the rule is the usual "full integration" (2×2×2 for `Hex8`, 3×3×3 for `Hex20`/`Hex27`).
pub fn default_degree(ct: CellType) -> usize {
    if ct.dim() == 0 { 0 } else { 2 * ct.order() }
}

/// Shape functions and reference gradients tabulated at the points of a quadrature rule, for
/// element loops: `n[q * n_nodes + a]` = N_a(ξ_q), `dn[q * n_nodes + a][k]` = ∂N_a/∂ξ_k(ξ_q).
#[derive(Clone, Debug, PartialEq)]
pub struct ElementTable {
    /// The cell the shape functions belong to.
    pub cell_type: CellType,
    /// Degree of the quadrature rule.
    pub degree: usize,
    /// Reference coordinates of the points.
    pub points: Vec<[f64; 3]>,
    /// Quadrature weights.
    pub weights: Vec<f64>,
    /// `n_points × n_nodes`, row = point.
    pub n: Vec<f64>,
    /// `n_points × n_nodes`, row = point.
    pub dn: Vec<[f64; 3]>,
}

impl ElementTable {
    /// Tabulate the shape functions of `ct` at the points of `quadrature(ct, degree)`.
    pub fn new(ct: CellType, degree: usize) -> Self {
        let rule = quadrature(ct, degree);
        Self::from_points(ct, degree, rule.points, rule.weights)
    }

    /// Tabulate at given reference points (for example the nodes of a cell, with `weights`
    /// of your choice); `degree` is stored as given.
    pub fn from_points(
        ct: CellType,
        degree: usize,
        points: Vec<[f64; 3]>,
        weights: Vec<f64>,
    ) -> Self {
        assert_eq!(points.len(), weights.len(), "one weight per point");
        let nn = ct.n_nodes();
        let mut n = vec![0.0; points.len() * nn];
        let mut dn = vec![[0.0; 3]; points.len() * nn];
        for (q, p) in points.iter().enumerate() {
            shape_functions_into(ct, *p, &mut n[q * nn..(q + 1) * nn]);
            shape_gradients_into(ct, *p, &mut dn[q * nn..(q + 1) * nn]);
        }
        ElementTable { cell_type: ct, degree, points, weights, n, dn }
    }

    /// Number of quadrature points.
    #[inline]
    pub fn n_points(&self) -> usize {
        self.weights.len()
    }

    /// Number of nodes (shape functions) of the cell.
    #[inline]
    pub fn n_nodes(&self) -> usize {
        self.cell_type.n_nodes()
    }

    /// N_a(ξ_q) for every node a.
    #[inline]
    pub fn shape(&self, q: usize) -> &[f64] {
        let nn = self.n_nodes();
        &self.n[q * nn..(q + 1) * nn]
    }

    /// ∂N_a/∂ξ(ξ_q) for every node a.
    #[inline]
    pub fn grad(&self, q: usize) -> &[[f64; 3]] {
        let nn = self.n_nodes();
        &self.dn[q * nn..(q + 1) * nn]
    }
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)] // index loops mirror the formulas
mod tests {
    use super::*;
    use rstest::rstest;

    fn fact(n: usize) -> f64 {
        (1..=n).map(|v| v as f64).product()
    }

    /// ∫ over the reference cell of ξ^a η^b ζ^c, closed forms.
    fn exact_monomial(ct: CellType, e: [usize; 3]) -> f64 {
        let line = |a: usize| if a % 2 == 1 { 0.0 } else { 2.0 / (a as f64 + 1.0) };
        use CellType::*;
        match ct.linear() {
            Line2 => line(e[0]),
            Quad4 => line(e[0]) * line(e[1]),
            Hex8 => line(e[0]) * line(e[1]) * line(e[2]),
            Tri3 => fact(e[0]) * fact(e[1]) / fact(e[0] + e[1] + 2),
            Tet4 => fact(e[0]) * fact(e[1]) * fact(e[2]) / fact(e[0] + e[1] + e[2] + 3),
            Prism6 => fact(e[0]) * fact(e[1]) / fact(e[0] + e[1] + 2) * line(e[2]),
            _ => unreachable!(),
        }
    }

    /// Exponents the rule of degree p must integrate exactly.
    fn exponents(ct: CellType, p: usize) -> Vec<[usize; 3]> {
        let d = ct.dim();
        let mut out = Vec::new();
        for a in 0..=p {
            for b in 0..=if d > 1 { p } else { 0 } {
                for c in 0..=if d > 2 { p } else { 0 } {
                    let ok = match ct.linear() {
                        CellType::Tri3 | CellType::Tet4 => a + b + c <= p,
                        CellType::Prism6 => a + b <= p,
                        _ => true,
                    };
                    if ok {
                        out.push([a, b, c]);
                    }
                }
            }
        }
        out
    }

    fn integrate(rule: &QuadratureRule, f: impl Fn([f64; 3]) -> f64) -> f64 {
        rule.points.iter().zip(&rule.weights).map(|(p, w)| w * f(*p)).sum()
    }

    #[test]
    fn gauss_legendre_is_exact_to_degree_2n_minus_1() {
        for n in 1..=16 {
            let (x, w) = gauss_legendre(n);
            for a in 0..2 * n {
                let s: f64 = x.iter().zip(&w).map(|(x, w)| w * x.powi(a as i32)).sum();
                let exact = if a % 2 == 1 { 0.0 } else { 2.0 / (a as f64 + 1.0) };
                assert!((s - exact).abs() < 1e-14, "n {n} x^{a}: {s} vs {exact}");
            }
        }
    }

    #[rstest]
    fn rules_integrate_reference_monomials_exactly(
        #[values(
            CellType::Line2,
            CellType::Tri3,
            CellType::Quad4,
            CellType::Tet4,
            CellType::Hex8,
            CellType::Prism6
        )]
        ct: CellType,
        #[values(0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 13)] p: usize,
    ) {
        let rule = quadrature(ct, p);
        let wsum: f64 = rule.weights.iter().sum();
        assert!((wsum - reference_measure(ct)).abs() < 1e-13, "{ct} p {p}: Σw = {wsum}");
        assert!(rule.weights.iter().all(|&w| w > 0.0), "{ct} p {p}: non-positive weight");
        for e in exponents(ct, p) {
            let got = integrate(&rule, |x| {
                x[0].powi(e[0] as i32) * x[1].powi(e[1] as i32) * x[2].powi(e[2] as i32)
            });
            let want = exact_monomial(ct, e);
            assert!((got - want).abs() < 1e-13, "{ct} degree {p}, monomial {e:?}: {got} vs {want}");
        }
        // The collapsed simplex rules are not exact far above their degree (guards against a
        // check too weak to fail): some monomial of degree ≤ p + 2 must be integrated wrongly.
        if matches!(ct, CellType::Tri3 | CellType::Tet4) && p >= 3 {
            let q = p + 1;
            let bad = exponents(ct, q + 1).into_iter().any(|e| {
                let got = integrate(&rule, |x| {
                    x[0].powi(e[0] as i32) * x[1].powi(e[1] as i32) * x[2].powi(e[2] as i32)
                });
                (got - exact_monomial(ct, e)).abs() > 1e-12
            });
            assert!(bad, "{ct} rule of degree {p} is exact beyond degree {}", q + 1);
        }
    }

    #[rstest]
    #[should_panic(expected = "highest available")]
    fn too_high_degree_panics_with_message() {
        let _ = quadrature(CellType::Tet4, 31);
    }

    #[rstest]
    fn element_table_rows(
        #[values(CellType::Tet10, CellType::Hex20, CellType::Prism6, CellType::Quad9)] ct: CellType,
    ) {
        let t = ElementTable::new(ct, default_degree(ct));
        assert_eq!(t.n.len(), t.n_points() * t.n_nodes());
        for q in 0..t.n_points() {
            let s: f64 = t.shape(q).iter().sum();
            assert!((s - 1.0).abs() < 1e-13);
            let mut n = vec![0.0; ct.n_nodes()];
            shape_functions_into(ct, t.points[q], &mut n);
            assert_eq!(n.as_slice(), t.shape(q));
            assert_eq!(t.grad(q).len(), ct.n_nodes());
        }
    }
}
