//! Taylor tests: the verification that a gradient is the derivative of its functional
//! (after pyadjoint's `verification.py`).
//!
//! For a direction `dm` and steps `h_i = h0 / 2^i` (i = 0..steps), with `J0 = J(m)` and
//! `dJ = ⟨∇J(m), dm⟩`:
//!
//! - zeroth-order remainder `r0_i = |J(m + h_i dm) − J0|`, which shrinks like `h` (rate 1);
//! - first-order remainder `r_i = |J(m + h_i dm) − J0 − h_i dJ|`, which shrinks like `h²`
//!   (rate 2) if and only if the gradient is right along `dm`;
//! - observed rates `log2(r_i / r_{i+1})`.
//!
//! Round-off: once `r_i` falls to the level at which `J` itself is computed
//! (`ROUNDOFF_RELATIVE · max(|J0|, |J_i|, |h_i dJ|)`), its rate is noise. The pass/fail decision
//! uses only the rates measured before that floor is reached, and says so in the note. When every
//! remainder is at the floor (a functional linear along `dm` with an exact gradient), the test
//! passes with a note. Objectives computed by iterative solvers carry their solver tolerance as
//! noise: choose `h0` so that `h0² |d²J|` stays well above it.
//!
//! ```
//! use gradfem_solvers::taylor::{TaylorParams, random_direction_scaled, taylor_test};
//!
//! // J(m) = m0³ + sin(m1) and its gradient.
//! let j = |x: &[f64]| Ok::<f64, std::convert::Infallible>(x[0].powi(3) + x[1].sin());
//! let m = [1.0, 0.5];
//! let grad = [3.0, 0.5f64.cos()];
//! let dm = random_direction_scaled(&m, 1);
//! let r = taylor_test(j, &m, &grad, &dm, &TaylorParams::default())?;
//! assert!(r.passed && (r.min_rate() - 2.0).abs() < 0.1, "{}", r.table());
//! // A gradient 1 % off: the remainder shrinks like h only.
//! let r = taylor_test(j, &m, &[3.03, 0.5f64.cos()], &dm, &TaylorParams { h0: 1e-3, ..Default::default() })?;
//! assert!(!r.passed);
//! # Ok::<(), std::convert::Infallible>(())
//! ```

use std::fmt::Write as _;

use crate::params::{ParamError, ParamRegistry, ParamVector};

/// Relative level below which a remainder is treated as round-off: `r_i ≤ ROUNDOFF_RELATIVE ·
/// max(|J0|, |J(m + h_i dm)|, |h_i dJ|)`. Four orders above double-precision round-off, so that a
/// functional computed with a few hundred operations still counts as exact.
pub const ROUNDOFF_RELATIVE: f64 = 1e-12;

/// Settings of a Taylor test.
#[derive(Debug, Clone, PartialEq)]
pub struct TaylorParams {
    /// First step; the perturbation is `h0 · dm` (scale `dm` to the parameter's magnitude).
    pub h0: f64,
    /// Number of steps (evaluations besides `J(m)`); at least 2. Default 5.
    pub steps: usize,
    /// Smallest first-order rate that passes. Default 1.9.
    pub min_rate: f64,
}

impl Default for TaylorParams {
    fn default() -> Self {
        Self { h0: 1e-2, steps: 5, min_rate: 1.9 }
    }
}

/// Outcome of a Taylor test, with everything needed to print its table.
#[derive(Debug, Clone, PartialEq)]
pub struct TaylorResult {
    /// Steps `h_i = h0 / 2^i`.
    pub h: Vec<f64>,
    /// `J(m)`.
    pub j0: f64,
    /// Directional derivative `⟨∇J, dm⟩` from the gradient under test.
    pub dj_dm: f64,
    /// First-order remainders `|J(m + h_i dm) − J0 − h_i dJ|`.
    pub remainders: Vec<f64>,
    /// Zeroth-order remainders `|J(m + h_i dm) − J0|`.
    pub remainders_zeroth: Vec<f64>,
    /// `log2(r_i / r_{i+1})` of the first-order remainders (should approach 2).
    pub rates: Vec<f64>,
    /// `log2(r0_i / r0_{i+1})` of the zeroth-order remainders (should approach 1).
    pub rates_zeroth: Vec<f64>,
    /// Round-off level of each remainder (see [`ROUNDOFF_RELATIVE`]).
    pub floor: Vec<f64>,
    /// How many leading entries of `rates` entered the decision (those before round-off).
    pub rates_used: usize,
    /// Whether the gradient passed.
    pub passed: bool,
    /// Why the decision was not a plain "all rates ≥ min_rate", if so.
    pub note: Option<String>,
}

impl TaylorResult {
    /// Smallest first-order rate among those used for the decision; `+∞` when no rate could be
    /// measured because all remainders were at round-off, `NaN` when none could be measured
    /// otherwise.
    pub fn min_rate(&self) -> f64 {
        if self.rates_used == 0 {
            return if self.passed { f64::INFINITY } else { f64::NAN };
        }
        self.rates[..self.rates_used].iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// A human-readable table for the CLI: one row per step; a `~` marks remainders at
    /// round-off, whose rates were ignored.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "J(m) = {:.10e}    dJ/dm . dm = {:.10e}", self.j0, self.dj_dm);
        let _ = writeln!(
            s,
            "{:>11}  {:>16}  {:>6}  {:>22}  {:>6}",
            "h", "|J(m+h dm)-J(m)|", "rate", "|J(m+h dm)-J(m)-h dJ|", "rate"
        );
        for i in 0..self.h.len() {
            let (r0, r1) = if i == 0 {
                ("-".to_string(), "-".to_string())
            } else {
                (format!("{:.3}", self.rates_zeroth[i - 1]), format!("{:.3}", self.rates[i - 1]))
            };
            let mark = if self.remainders[i] <= self.floor[i] { "~" } else { " " };
            let _ = writeln!(
                s,
                "{:>11.4e}  {:>16.6e}  {:>6}  {:>21.6e}{}  {:>6}",
                self.h[i], self.remainders_zeroth[i], r0, self.remainders[i], mark, r1
            );
        }
        let verdict = if self.passed { "PASSED" } else { "FAILED" };
        let _ = writeln!(s, "{verdict}: minimum first-order rate {:.3}", self.min_rate());
        if let Some(note) = &self.note {
            let _ = writeln!(s, "note: {note}");
        }
        s
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn rate(a: f64, b: f64) -> f64 {
    (a / b).log2()
}

/// Taylor test of `grad` at `m` along `dm`: evaluates `J(m)` then `J(m + h_i dm)` for each step
/// and nothing else. `m` is only read; the closure must set the problem's parameters from its
/// argument on every call (see [`taylor_test_registry`] for a version that restores a registry).
///
/// Panics if the lengths differ, `h0` is not positive or `steps < 2` (programming mistakes).
/// An error from `j` is returned as is.
pub fn taylor_test<E>(
    mut j: impl FnMut(&[f64]) -> Result<f64, E>,
    m: &[f64],
    grad: &[f64],
    dm: &[f64],
    params: &TaylorParams,
) -> Result<TaylorResult, E> {
    assert!(
        m.len() == grad.len() && m.len() == dm.len(),
        "taylor_test: lengths differ: m {}, grad {}, dm {}",
        m.len(),
        grad.len(),
        dm.len()
    );
    assert!(
        params.h0 > 0.0 && params.h0.is_finite(),
        "taylor_test: h0 = {} must be > 0",
        params.h0
    );
    assert!(params.steps >= 2, "taylor_test: steps = {} must be at least 2", params.steps);

    let j0 = j(m)?;
    let dj_dm = dot(grad, dm);
    let n = params.steps;
    let h: Vec<f64> = (0..n).map(|i| params.h0 / f64::powi(2.0, i as i32)).collect();
    let mut x = vec![0.0; m.len()];
    let mut values = Vec::with_capacity(n);
    for &hi in &h {
        for ((xi, mi), di) in x.iter_mut().zip(m).zip(dm) {
            *xi = mi + hi * di;
        }
        let ji = j(&x)?;
        tracing::debug!(h = hi, j = ji, "taylor test evaluation");
        values.push(ji);
    }
    Ok(evaluate(h, j0, dj_dm, &values, dm, params))
}

/// Computes remainders, rates and the verdict from the evaluations.
fn evaluate(
    h: Vec<f64>,
    j0: f64,
    dj_dm: f64,
    values: &[f64],
    dm: &[f64],
    params: &TaylorParams,
) -> TaylorResult {
    let n = h.len();
    let remainders_zeroth: Vec<f64> = values.iter().map(|v| (v - j0).abs()).collect();
    let remainders: Vec<f64> =
        values.iter().zip(&h).map(|(v, hi)| (v - j0 - hi * dj_dm).abs()).collect();
    let floor: Vec<f64> = values
        .iter()
        .zip(&h)
        .map(|(v, hi)| {
            ROUNDOFF_RELATIVE * j0.abs().max(v.abs()).max((hi * dj_dm).abs()) + f64::MIN_POSITIVE
        })
        .collect();
    let rates: Vec<f64> = (0..n - 1).map(|i| rate(remainders[i], remainders[i + 1])).collect();
    let rates_zeroth: Vec<f64> =
        (0..n - 1).map(|i| rate(remainders_zeroth[i], remainders_zeroth[i + 1])).collect();
    // Leading remainders above round-off.
    let above = remainders.iter().zip(&floor).take_while(|(r, f)| r > f).count();

    let (passed, rates_used, note) = if !j0.is_finite() || values.iter().any(|v| !v.is_finite()) {
        (false, 0, Some("J is not finite at some evaluation point".to_string()))
    } else if dm.iter().all(|&d| d == 0.0) {
        (false, 0, Some("the direction dm is zero: nothing was tested".to_string()))
    } else if above == 0 {
        (
            true,
            0,
            Some(format!(
                "all remainders are at round-off level (≤ {:.1e}·|J|): J is linear along dm and \
                 the gradient matches it to round-off",
                ROUNDOFF_RELATIVE
            )),
        )
    } else if above == 1 {
        // One measurable remainder, then round-off: no rate can be measured.
        let tiny = remainders[0] <= 16.0 * floor[0];
        let note = if tiny {
            "only the first remainder is above round-off, and barely: the gradient matches J to \
             round-off"
                .to_string()
        } else {
            format!(
                "the remainder drops from {:.3e} to round-off after one step: no rate can be \
                 measured (J noisy or discontinuous?); try a smaller h0",
                remainders[0]
            )
        };
        (tiny, 0, Some(note))
    } else {
        let used = above - 1;
        let min = rates[..used].iter().copied().fold(f64::INFINITY, f64::min);
        let passed = min >= params.min_rate;
        let note = (above < n).then(|| {
            format!(
                "remainders reach round-off from h = {:.3e} on; the decision uses the first {} \
                 rate(s) only",
                h[above], used
            )
        });
        (passed, used, note)
    };
    if !passed {
        tracing::warn!(dj_dm, ?rates, note = note.as_deref().unwrap_or(""), "Taylor test failed");
    }
    TaylorResult {
        h,
        j0,
        dj_dm,
        remainders,
        remainders_zeroth,
        rates,
        rates_zeroth,
        floor,
        rates_used,
        passed,
        note,
    }
}

/// Restores a registry selection on drop, including when the objective panics.
struct Restore<'a> {
    reg: &'a mut ParamRegistry,
    pv: &'a ParamVector,
    original: Vec<f64>,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        // The original values came out of the registry, so they are valid: this cannot fail.
        if let Err(e) = self.pv.scatter(self.reg, &self.original) {
            tracing::error!(%e, "could not restore parameters after a Taylor test");
        }
    }
}

/// Taylor test over a registry selection: gathers `m` from the registry, evaluates
/// `j(reg)` after scattering each `m + h_i dm` into it, and **always** restores the original
/// values afterwards — on success, on an error from `j` or from the scatter (a perturbed value
/// outside the bounds; see [`direction_within_bounds`]), and on a panic — so the problem is left
/// exactly as it was.
pub fn taylor_test_registry<E: From<ParamError>>(
    reg: &mut ParamRegistry,
    pv: &ParamVector,
    grad: &[f64],
    dm: &[f64],
    params: &TaylorParams,
    mut j: impl FnMut(&ParamRegistry) -> Result<f64, E>,
) -> Result<TaylorResult, E> {
    let original = pv.gather(reg);
    let m = original.clone();
    let guard = Restore { reg, pv, original };
    taylor_test(
        |x| {
            guard.pv.scatter(&mut *guard.reg, x)?;
            j(&*guard.reg)
        },
        &m,
        grad,
        dm,
        params,
    )
}

/// SplitMix64 step (Steele, Lea, Flood 2014): a tiny, well-mixed 64-bit generator. Hand-written
/// to keep `rand` out of the dependencies; only used for test directions.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A deterministic pseudo-random direction with entries uniform in `[-1, 1)` (SplitMix64, the
/// same `seed` gives the same direction on every platform).
pub fn random_direction(n: usize, seed: u64) -> Vec<f64> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            // 53 random bits → [0, 1) → [-1, 1)
            let u = (splitmix64(&mut state) >> 11) as f64 / (1u64 << 53) as f64;
            2.0 * u - 1.0
        })
        .collect()
}

/// [`random_direction`] scaled entry by entry by the parameter's magnitude: `dm_i = u_i·s_i`
/// with `s_i = |m_i|`, or the root mean square of `m` where `m_i = 0`, or 1 if `m` is all zero.
/// With `h0 = 1e-2` this perturbs each entry by up to 1 %.
pub fn random_direction_scaled(m: &[f64], seed: u64) -> Vec<f64> {
    let rms = (m.iter().map(|v| v * v).sum::<f64>() / m.len().max(1) as f64).sqrt();
    let fallback = if rms > 0.0 { rms } else { 1.0 };
    random_direction(m.len(), seed)
        .into_iter()
        .zip(m)
        .map(|(u, &mi)| u * if mi != 0.0 { mi.abs() } else { fallback })
        .collect()
}

/// Adjusts a direction so that `m + h dm` stays within `[lower, upper]` for all `0 ≤ h ≤ h0`:
/// an entry that would leave the box is reversed if the reversed step fits, else shortened to
/// the room left on its roomier side (zero for an entry pinned between equal bounds).
pub fn direction_within_bounds(
    m: &[f64],
    dm: &[f64],
    lower: &[f64],
    upper: &[f64],
    h0: f64,
) -> Vec<f64> {
    assert!(
        m.len() == dm.len() && m.len() == lower.len() && m.len() == upper.len(),
        "direction_within_bounds: lengths differ"
    );
    (0..m.len())
        .map(|i| {
            let fits = |d: f64| {
                let t = m[i] + h0 * d;
                t >= lower[i] && t <= upper[i]
            };
            let d = dm[i];
            if fits(d) {
                d
            } else if fits(-d) {
                -d
            } else {
                let up = (upper[i] - m[i]).max(0.0);
                let down = (m[i] - lower[i]).max(0.0);
                let mag = d.abs().min(up.max(down) / h0);
                if up >= down { mag } else { -mag }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_direction_is_deterministic_and_spread() {
        let a = random_direction(1000, 7);
        assert_eq!(a, random_direction(1000, 7));
        assert_ne!(a, random_direction(1000, 8));
        assert!(a.iter().all(|v| (-1.0..1.0).contains(v)));
        let mean = a.iter().sum::<f64>() / 1000.0;
        assert!(mean.abs() < 0.1, "mean {mean}");
        assert!(a.iter().any(|&v| v > 0.9) && a.iter().any(|&v| v < -0.9));
    }

    #[test]
    fn scaled_direction_follows_magnitudes() {
        let m = [1e6, 0.0, -1e-3];
        let d = random_direction_scaled(&m, 3);
        assert!(d[0].abs() <= 1e6 && d[0].abs() > 1.0);
        assert!(d[2].abs() <= 1e-3);
        assert!(d[1] != 0.0);
    }

    #[test]
    fn direction_fits_bounds() {
        let m = [0.0, 1.0, 0.5, 2.0];
        let dm = [-1.0, 1.0, 100.0, 1.0];
        let (lo, hi) = ([0.0, 0.0, 0.0, 2.0], [1.0, 1.0, 1.0, 2.0]);
        let d = direction_within_bounds(&m, &dm, &lo, &hi, 0.1);
        assert_eq!(d, vec![1.0, -1.0, 5.0, 0.0]);
    }
}
