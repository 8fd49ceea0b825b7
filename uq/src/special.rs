//! The standard normal distribution: density, CDF (through erfc) and its inverse.
//!
//! `erfc` uses the positive-term series of erf below 2.5 (no cancellation) and the continued
//! fraction of erfc above, both to about 1e-13 relative; the inverse CDF starts from
//! Acklam's rational approximation (relative error ≈ 1e-9) and takes two Halley steps on
//! the CDF, evaluated in the tail where the answer lies so that small tail probabilities keep
//! their digits.

use std::f64::consts::{PI, SQRT_2};

/// erfc(x) = 1 − erf(x), accurate in both tails.
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    if x < 2.5 {
        // erf(x) = 2/√π e^{−x²} Σ 2ⁿ x^{2n+1} / (1·3·…·(2n+1)): positive terms.
        let x2 = x * x;
        let mut term = x;
        let mut sum = x;
        let mut n = 0.0;
        while term > 1e-17 * sum {
            n += 1.0;
            term *= 2.0 * x2 / (2.0 * n + 1.0);
            sum += term;
        }
        1.0 - 2.0 / PI.sqrt() * (-x2).exp() * sum
    } else if x > 27.3 {
        0.0
    } else {
        // erfc(x) = e^{−x²}/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + …)))), from the bottom.
        let mut t = x;
        for k in (1..=60).rev() {
            t = x + (k as f64 / 2.0) / t;
        }
        (-x * x).exp() / (PI.sqrt() * t)
    }
}

/// The standard normal density φ(x).
pub fn normal_pdf(x: f64) -> f64 {
    (-0.5 * x * x).exp() / (2.0 * PI).sqrt()
}

/// The standard normal CDF Φ(x).
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / SQRT_2)
}

/// The upper tail 1 − Φ(x), without cancellation for large x.
pub fn normal_sf(x: f64) -> f64 {
    0.5 * erfc(x / SQRT_2)
}

/// Acklam's rational approximation of Φ⁻¹(p) for 0 < p ≤ 0.5.
fn acklam_lower(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e+01,
        2.209460984245205e+02,
        -2.759285104469687e+02,
        1.38357751867269e+02,
        -3.066479806614716e+01,
        2.506628277459239e+00,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e+01,
        1.615858368580409e+02,
        -1.556989798598866e+02,
        6.680131188771972e+01,
        -1.328068155288572e+01,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e+00,
        -2.549732539343734e+00,
        4.374664141464968e+00,
        2.938163982698783e+00,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-03,
        3.224671290700398e-01,
        2.445134137142996e+00,
        3.754408661907416e+00,
    ];
    if p < 0.02425 {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Φ⁻¹(p) for 0 < p < 1 (−∞ at 0, +∞ at 1, NaN outside [0, 1]).
pub fn normal_quantile(p: f64) -> f64 {
    if !(0.0..=1.0).contains(&p) || p.is_nan() {
        return f64::NAN;
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    // Work in the lower half: Φ⁻¹(p) = −Φ⁻¹(1 − p) keeps the tail's digits.
    let (tail, sign) = if p <= 0.5 { (p, 1.0) } else { (1.0 - p, -1.0) };
    let mut x = acklam_lower(tail);
    for _ in 0..2 {
        let e = normal_cdf(x) - tail;
        let u = e * (2.0 * PI).sqrt() * (0.5 * x * x).exp();
        x -= u / (1.0 + 0.5 * x * u);
    }
    sign * x
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(0.0, 1.0)]
    #[case(0.5, 0.4795001221869535)]
    #[case(1.0, 0.15729920705028513)]
    #[case(2.0, 0.004677734981047266)]
    #[case(3.0, 2.209049699858544e-05)]
    #[case(5.0, 1.537459794428035e-12)]
    #[case(-1.0, 1.8427007929497148)]
    fn erfc_matches_reference_values(#[case] x: f64, #[case] want: f64) {
        let got = erfc(x);
        assert!((got - want).abs() <= 1e-13 * want.abs(), "{x}: {got} vs {want}");
    }

    #[rstest]
    #[case(0.975, 1.959963984540054)]
    #[case(0.5, 0.0)]
    #[case(0.841344746068543, 1.0)]
    #[case(1e-10, -6.361340902404056)]
    #[case(0.05, -1.6448536269514722)]
    fn quantile_matches_reference_values(#[case] p: f64, #[case] want: f64) {
        let got = normal_quantile(p);
        assert!((got - want).abs() < 1e-12 * want.abs().max(1.0), "{p}: {got} vs {want}");
    }

    #[test]
    fn quantile_inverts_the_cdf_across_the_range() {
        for k in 1..2000 {
            let p = k as f64 / 2000.0;
            let x = normal_quantile(p);
            assert!((normal_cdf(x) - p).abs() < 1e-14, "{p}");
        }
        for e in 2..300 {
            let p = 10f64.powi(-e);
            if p < f64::MIN_POSITIVE {
                break;
            }
            let x = normal_quantile(p);
            assert!(((normal_cdf(x) - p) / p).abs() < 1e-11, "{p}: {x}");
        }
    }
}
