//! The electrical point law: Ohm's law with a temperature-dependent resistivity, written once,
//! generic over the scalar, so dual numbers give its derivatives.
//!
//! ρ(T) = ρ₀ m(T) and σ(T) = 1/ρ(T) = σ₀ / m(T), σ₀ = 1/ρ₀, where the multiplier m is this law
//! and T₀ the conductor's reference temperature.

use num_dual::DualNum;
use serde::{Deserialize, Serialize};

/// How resistivity depends on temperature: ρ(T) = ρ₀ · m(T).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ResistivityLaw {
    /// m(T) = 1.
    Constant,
    /// m(T) = 1 + α_R (T − T₀), α_R [1/K] (the usual linear temperature coefficient of
    /// resistance, e.g. 3.9·10⁻³ /K for copper).
    Linear { alpha_r: f64 },
    /// m(T) interpolated linearly in a table of (temperature, multiplier) pairs, held constant
    /// beyond its ends.
    Table { temperatures: Vec<f64>, multipliers: Vec<f64> },
}

impl ResistivityLaw {
    /// True when m does not depend on T.
    pub fn is_constant(&self) -> bool {
        match self {
            ResistivityLaw::Constant => true,
            ResistivityLaw::Linear { alpha_r } => *alpha_r == 0.0,
            ResistivityLaw::Table { multipliers, .. } => {
                multipliers.windows(2).all(|w| w[0] == w[1])
            }
        }
    }

    /// α_R of a linear law, `None` for the other kinds.
    pub fn alpha_r(&self) -> Option<f64> {
        match self {
            ResistivityLaw::Linear { alpha_r } => Some(*alpha_r),
            _ => None,
        }
    }

    /// Check the law's data: finite numbers; a table with as many multipliers as temperatures
    /// (≥ 1), strictly increasing temperatures and positive multipliers.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            ResistivityLaw::Constant => Ok(()),
            ResistivityLaw::Linear { alpha_r } => {
                if alpha_r.is_finite() {
                    Ok(())
                } else {
                    Err(format!("alpha_r must be finite, got {alpha_r}"))
                }
            }
            ResistivityLaw::Table { temperatures, multipliers } => {
                if temperatures.is_empty() || temperatures.len() != multipliers.len() {
                    return Err(format!(
                        "resistivity table needs as many multipliers as temperatures (≥ 1), got {} and {}",
                        temperatures.len(),
                        multipliers.len()
                    ));
                }
                if temperatures.windows(2).any(|w| w[1] <= w[0]) {
                    return Err("resistivity table temperatures must increase strictly".into());
                }
                if multipliers.iter().chain(temperatures).any(|v| !v.is_finite()) {
                    return Err("resistivity table has a non-finite entry".into());
                }
                if multipliers.iter().any(|&m| m <= 0.0) {
                    return Err("resistivity table multipliers must be positive".into());
                }
                Ok(())
            }
        }
    }

    /// m(T) with α_R taken from `alpha_r` (a scalar of type D, so that dual numbers give
    /// ∂m/∂α_R) for the linear law; the other kinds ignore it.
    pub fn multiplier_with<D: DualNum<Primitive = f64> + Copy>(
        &self,
        t0: f64,
        alpha_r: D,
        t: D,
    ) -> D {
        match self {
            ResistivityLaw::Constant => D::from(1.0),
            ResistivityLaw::Linear { .. } => alpha_r * (t - t0) + 1.0,
            ResistivityLaw::Table { temperatures, multipliers } => {
                let tr = t.re();
                let n = temperatures.len();
                if n == 1 || tr <= temperatures[0] {
                    return D::from(multipliers[0]);
                }
                if tr >= temperatures[n - 1] {
                    return D::from(multipliers[n - 1]);
                }
                let i = temperatures.partition_point(|&x| x <= tr) - 1;
                let s =
                    (multipliers[i + 1] - multipliers[i]) / (temperatures[i + 1] - temperatures[i]);
                (t - temperatures[i]) * s + multipliers[i]
            }
        }
    }

    /// m(T), generic over the scalar.
    pub fn multiplier<D: DualNum<Primitive = f64> + Copy>(&self, t0: f64, t: D) -> D {
        self.multiplier_with(t0, D::from(self.alpha_r().unwrap_or(0.0)), t)
    }

    /// m(T) with its first and second derivatives in (T, α_R), in plain floating point (the
    /// second-order products): [m, m_T, m_α, m_TT, m_Tα, m_αα]. Every law is affine in T
    /// (piecewise for a table: m_TT = 0 between its points) and the linear law is bilinear in
    /// (α_R, T − T₀).
    #[inline]
    pub fn multiplier_second_derivatives(&self, t0: f64, t: f64) -> [f64; 6] {
        let (m, m_t, m_a) = self.multiplier_and_slopes(t0, t);
        let m_ta = if matches!(self, ResistivityLaw::Linear { .. }) { 1.0 } else { 0.0 };
        [m, m_t, m_a, 0.0, m_ta, 0.0]
    }

    /// m(T), ∂m/∂T and ∂m/∂α_R in plain floating point (the fast path of element loops).
    #[inline]
    pub fn multiplier_and_slopes(&self, t0: f64, t: f64) -> (f64, f64, f64) {
        match self {
            ResistivityLaw::Constant => (1.0, 0.0, 0.0),
            ResistivityLaw::Linear { alpha_r } => (1.0 + alpha_r * (t - t0), *alpha_r, t - t0),
            ResistivityLaw::Table { .. } => {
                let d = self.multiplier(t0, num_dual::Dual64::new(t, 1.0));
                (d.re, d.eps, 0.0)
            }
        }
    }
}

/// σ(T) = σ₀ / m(T), generic over the scalar.
pub fn conductivity<D: DualNum<Primitive = f64> + Copy>(
    sigma0: D,
    law: &ResistivityLaw,
    t0: f64,
    alpha_r: D,
    t: D,
) -> D {
    sigma0 / law.multiplier_with(t0, alpha_r, t)
}

/// Ohm's law: the current density J = −σ ∇φ [A/m²].
pub fn current_density<D: DualNum<Primitive = f64> + Copy>(sigma: D, grad_phi: [D; 3]) -> [D; 3] {
    grad_phi.map(|g| -(sigma * g))
}

/// Joule heat per unit volume Q = J·E = σ |∇φ|² [W/m³].
pub fn joule_heat<D: DualNum<Primitive = f64> + Copy>(sigma: D, grad_phi: [D; 3]) -> D {
    sigma * (grad_phi[0] * grad_phi[0] + grad_phi[1] * grad_phi[1] + grad_phi[2] * grad_phi[2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_dual::{Dual64, HyperDual64};
    use rstest::rstest;

    /// The second derivatives against hyper-dual numbers over the generic multiplier, inside
    /// a table's intervals.
    #[test]
    fn second_derivatives_match_hyper_dual_numbers() {
        for law in laws() {
            let alpha = law.alpha_r().unwrap_or(0.0);
            for t in [270.0, 320.0, 350.0] {
                let got = law.multiplier_second_derivatives(300.0, t);
                let at = |dt: [f64; 2], da: [f64; 2]| {
                    law.multiplier_with(
                        300.0,
                        HyperDual64::new(alpha, da[0], da[1], 0.0),
                        HyperDual64::new(t, dt[0], dt[1], 0.0),
                    )
                };
                let tt = at([1.0, 1.0], [0.0, 0.0]);
                let ta = at([1.0, 0.0], [0.0, 1.0]);
                let aa = at([0.0, 0.0], [1.0, 1.0]);
                let want = [tt.re, tt.eps1, aa.eps1, tt.eps1eps2, ta.eps1eps2, aa.eps1eps2];
                for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                        "{law:?} T={t} [{k}]: {g} vs {w}"
                    );
                }
            }
        }
    }

    fn laws() -> Vec<ResistivityLaw> {
        vec![
            ResistivityLaw::Constant,
            ResistivityLaw::Linear { alpha_r: 3.9e-3 },
            ResistivityLaw::Table {
                temperatures: vec![250.0, 300.0, 400.0],
                multipliers: vec![0.8, 1.0, 1.5],
            },
        ]
    }

    #[rstest]
    #[case(260.0)]
    #[case(310.0)]
    #[case(350.0)]
    fn slopes_match_finite_differences(#[case] t: f64) {
        let t0 = 293.15;
        for law in laws() {
            let (m, dm, dma) = law.multiplier_and_slopes(t0, t);
            let h = 1e-5;
            let fd = (law.multiplier(t0, t + h) - law.multiplier(t0, t - h)) / (2.0 * h);
            assert!((dm - fd).abs() <= 1e-7 * (1.0 + fd.abs()), "{law:?}: {dm} vs {fd}");
            assert!((m - law.multiplier(t0, t)).abs() < 1e-15);
            let a = law.alpha_r().unwrap_or(0.0);
            let da = law.multiplier_with(t0, Dual64::new(a, 1.0), Dual64::from(t)).eps;
            assert!((da - dma).abs() < 1e-12, "{law:?}: {da} vs {dma}");
        }
    }

    #[test]
    fn linear_law_is_one_at_reference_and_conductivity_inverts_it() {
        let law = ResistivityLaw::Linear { alpha_r: 4e-3 };
        assert_eq!(law.multiplier(300.0, 300.0_f64), 1.0);
        let s: f64 = conductivity(5.0e7, &law, 300.0, 4e-3, 350.0);
        assert!((s - 5.0e7 / 1.2).abs() < 1e-6, "{s}");
        let j = current_density(2.0_f64, [1.0, -2.0, 0.5]);
        assert_eq!(j, [-2.0, 4.0, -1.0]);
        assert!((joule_heat(2.0_f64, [1.0, -2.0, 0.5]) - 10.5).abs() < 1e-14);
    }

    #[test]
    fn table_is_clamped_and_validated() {
        let law = &laws()[2];
        assert_eq!(law.multiplier(0.0, 100.0_f64), 0.8);
        assert_eq!(law.multiplier(0.0, 1000.0_f64), 1.5);
        assert!((law.multiplier(0.0, 350.0_f64) - 1.25).abs() < 1e-14);
        let bad =
            ResistivityLaw::Table { temperatures: vec![1.0, 2.0], multipliers: vec![1.0, 0.0] };
        assert!(bad.validate().is_err());
        let bad =
            ResistivityLaw::Table { temperatures: vec![1.0, 1.0], multipliers: vec![1.0, 2.0] };
        assert!(bad.validate().is_err());
        assert!(ResistivityLaw::Linear { alpha_r: f64::NAN }.validate().is_err());
    }
}
