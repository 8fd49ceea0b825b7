//! The thermal point law: Fourier's law with a temperature-dependent conductivity,
//! written once, generic over the scalar, so dual numbers give its derivatives.

use num_dual::DualNum;
use serde::{Deserialize, Serialize};

/// How conductivity depends on temperature: k(T) = k₀ · f(T).
///
/// `k₀` is the registered parameter `thermal.k.<group>`; `f` is this law.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ConductivityLaw {
    /// f(T) = 1: the problem is linear.
    Constant,
    /// f(T) = 1 + Σᵢ cᵢ (T − T_ref)^i, i = 1, 2, …: `coefficients[0]` is c₁.
    Polynomial { t_ref: f64, coefficients: Vec<f64> },
    /// f(T) interpolated linearly in a table of (temperature, value) pairs, held constant
    /// beyond its ends; with a table, k₀ is a dimensionless scale (1 by default).
    Table { temperatures: Vec<f64>, values: Vec<f64> },
}

impl ConductivityLaw {
    /// True when f is constant, so the conduction problem is linear in T.
    pub fn is_constant(&self) -> bool {
        match self {
            ConductivityLaw::Constant => true,
            ConductivityLaw::Polynomial { coefficients, .. } => {
                coefficients.iter().all(|&c| c == 0.0)
            }
            ConductivityLaw::Table { values, .. } => values.windows(2).all(|w| w[0] == w[1]),
        }
    }

    /// Check the law's data: finite numbers, a table with increasing temperatures and at
    /// least one point.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            ConductivityLaw::Constant => Ok(()),
            ConductivityLaw::Polynomial { t_ref, coefficients } => {
                if !t_ref.is_finite() || coefficients.iter().any(|c| !c.is_finite()) {
                    return Err("polynomial conductivity has a non-finite coefficient".into());
                }
                Ok(())
            }
            ConductivityLaw::Table { temperatures, values } => {
                if temperatures.is_empty() || temperatures.len() != values.len() {
                    return Err(format!(
                        "conductivity table needs as many values as temperatures (≥ 1), got {} and {}",
                        temperatures.len(),
                        values.len()
                    ));
                }
                if temperatures.windows(2).any(|w| w[1] <= w[0]) {
                    return Err("conductivity table temperatures must increase strictly".into());
                }
                if values.iter().chain(temperatures).any(|v| !v.is_finite()) {
                    return Err("conductivity table has a non-finite entry".into());
                }
                Ok(())
            }
        }
    }

    /// f(T), generic over the scalar (f64 or a dual number).
    pub fn factor<D: DualNum<Primitive = f64> + Copy>(&self, t: D) -> D {
        match self {
            ConductivityLaw::Constant => D::from(1.0),
            ConductivityLaw::Polynomial { t_ref, coefficients } => {
                // Horner: 1 + dt (c1 + dt (c2 + ...))
                let dt = t - *t_ref;
                let mut acc = D::from(0.0);
                for &c in coefficients.iter().rev() {
                    acc = (acc + c) * dt;
                }
                acc + 1.0
            }
            ConductivityLaw::Table { temperatures, values } => {
                let tr = t.re();
                let n = temperatures.len();
                if n == 1 || tr <= temperatures[0] {
                    return D::from(values[0]);
                }
                if tr >= temperatures[n - 1] {
                    return D::from(values[n - 1]);
                }
                let i = temperatures.partition_point(|&x| x <= tr) - 1;
                let s = (values[i + 1] - values[i]) / (temperatures[i + 1] - temperatures[i]);
                (t - temperatures[i]) * s + values[i]
            }
        }
    }

    /// f(T) and f'(T) in plain floating point (the fast path of the assembly loop).
    #[inline]
    pub fn factor_and_slope(&self, t: f64) -> (f64, f64) {
        match self {
            ConductivityLaw::Constant => (1.0, 0.0),
            _ => {
                let d = self.factor(num_dual::Dual64::new(t, 1.0));
                (d.re, d.eps)
            }
        }
    }
}

/// Fourier's law: the heat flux q = −k₀ f(T) ∇T at one point, generic over the scalar.
pub fn heat_flux<D: DualNum<Primitive = f64> + Copy>(
    k0: D,
    law: &ConductivityLaw,
    t: D,
    grad_t: [D; 3],
) -> [D; 3] {
    let k = k0 * law.factor(t);
    grad_t.map(|g| -(k * g))
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_dual::Dual64;
    use rstest::rstest;

    fn laws() -> Vec<ConductivityLaw> {
        vec![
            ConductivityLaw::Constant,
            ConductivityLaw::Polynomial { t_ref: 300.0, coefficients: vec![-2e-3, 1e-6] },
            ConductivityLaw::Table {
                temperatures: vec![250.0, 300.0, 400.0],
                values: vec![1.2, 1.0, 0.7],
            },
        ]
    }

    #[rstest]
    #[case(260.0)]
    #[case(310.0)]
    #[case(350.0)]
    fn slope_matches_finite_differences(#[case] t: f64) {
        for law in laws() {
            let (f, df) = law.factor_and_slope(t);
            let h = 1e-5;
            let fd: f64 = (law.factor(t + h) - law.factor(t - h)) / (2.0 * h);
            assert!((df - fd).abs() <= 1e-7 * (1.0 + fd.abs()), "{law:?}: {df} vs {fd}");
            assert!((f - law.factor::<f64>(t)).abs() < 1e-15);
        }
    }

    #[test]
    fn polynomial_is_one_at_reference() {
        let law = ConductivityLaw::Polynomial { t_ref: 300.0, coefficients: vec![0.5, 0.25] };
        assert_eq!(law.factor(300.0_f64), 1.0);
        assert!((law.factor(302.0_f64) - (1.0 + 1.0 + 1.0)).abs() < 1e-14);
    }

    #[test]
    fn table_is_clamped_and_validated() {
        let law = &laws()[2];
        assert_eq!(law.factor(100.0_f64), 1.2);
        assert_eq!(law.factor(1000.0_f64), 0.7);
        assert!((law.factor(350.0_f64) - 0.85).abs() < 1e-14);
        let bad = ConductivityLaw::Table { temperatures: vec![1.0, 1.0], values: vec![1.0, 2.0] };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn flux_derivative_with_respect_to_k0() {
        let law = &laws()[1];
        let q = heat_flux(Dual64::new(2.0, 1.0), law, Dual64::from(320.0), [Dual64::from(1.0); 3]);
        // dq/dk0 = -f(T) ∇T
        assert!((q[0].eps + law.factor(320.0)).abs() < 1e-14);
    }
}
