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
//! passes with a note; when, besides, the gradient is exactly zero along `dm` (a parameter that
//! J does not depend on), the verdict says "gradient zero, residual at round-off" instead of a
//! rate. Objectives computed by iterative solvers carry their solver tolerance as noise: choose
//! `h0` so that `h0² |d²J|` stays well above it.
//!
//! One test in one combined direction can hide a wrong derivative of a parameter whose share
//! of `⟨∇J, dm⟩` is small. [`taylor_test_parts`] tests parts of the vector one at a time (one
//! registered parameter each, say), each in its own direction, sharing the evaluation of `J(m)`.
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
    /// The smallest rate that passes ([`TaylorParams::min_rate`]).
    pub threshold: f64,
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

    /// True when the gradient is exactly zero along `dm` and every remainder is at round-off:
    /// J does not change along `dm` and the gradient agrees (a pass without a rate).
    pub fn gradient_zero_at_roundoff(&self) -> bool {
        self.passed && self.rates_used == 0 && self.dj_dm == 0.0
    }

    /// A short verdict: `passed`, `passed (remainders at round-off)`, `gradient zero, residual
    /// at round-off` or `FAILED`.
    pub fn verdict(&self) -> &'static str {
        if !self.passed {
            "FAILED"
        } else if self.gradient_zero_at_roundoff() {
            "gradient zero, residual at round-off"
        } else if self.rates_used == 0 {
            "passed (remainders at round-off)"
        } else {
            "passed"
        }
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
        if self.gradient_zero_at_roundoff() {
            let _ = writeln!(s, "{verdict}: gradient zero, residual at round-off");
        } else {
            let _ = writeln!(
                s,
                "{verdict}: minimum first-order rate {:.3} (threshold {})",
                self.min_rate(),
                self.threshold
            );
        }
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
    check_arguments("taylor_test", m, grad, dm, params);
    let j0 = j(m)?;
    along(&mut j, j0, m, grad, dm, params)
}

/// One part of a parameter vector tested on its own by [`taylor_test_parts`]: a name for the
/// report and a direction over the whole vector, zero outside the part (see [`restrict`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TaylorPart {
    /// What the part is (a registered parameter's name, say).
    pub name: String,
    /// The direction, of the length of the whole vector.
    pub dm: Vec<f64>,
}

/// `dm` with every entry outside `range` set to zero.
pub fn restrict(dm: &[f64], range: std::ops::Range<usize>) -> Vec<f64> {
    dm.iter().enumerate().map(|(i, &d)| if range.contains(&i) { d } else { 0.0 }).collect()
}

/// Taylor tests of `grad` at `m`, one per part, each along the part's own direction: `J(m)` is
/// evaluated once, then `steps` points per part. The results come in the order of `parts`.
/// A wrong derivative of one part fails that part's test, however small its share of the
/// combined directional derivative.
///
/// Panics on lengths that differ, `h0 ≤ 0` or `steps < 2`, like [`taylor_test`]; an error from
/// `j` is returned as is.
pub fn taylor_test_parts<E>(
    mut j: impl FnMut(&[f64]) -> Result<f64, E>,
    m: &[f64],
    grad: &[f64],
    parts: &[TaylorPart],
    params: &TaylorParams,
) -> Result<Vec<TaylorResult>, E> {
    for p in parts {
        check_arguments("taylor_test_parts", m, grad, &p.dm, params);
    }
    if parts.is_empty() {
        return Ok(Vec::new());
    }
    let j0 = j(m)?;
    parts.iter().map(|p| along(&mut j, j0, m, grad, &p.dm, params)).collect()
}

/// The programming mistakes [`taylor_test`] and [`taylor_test_parts`] panic on.
fn check_arguments(what: &str, m: &[f64], grad: &[f64], dm: &[f64], params: &TaylorParams) {
    assert!(
        m.len() == grad.len() && m.len() == dm.len(),
        "{what}: lengths differ: m {}, grad {}, dm {}",
        m.len(),
        grad.len(),
        dm.len()
    );
    assert!(params.h0 > 0.0 && params.h0.is_finite(), "{what}: h0 = {} must be > 0", params.h0);
    assert!(params.steps >= 2, "{what}: steps = {} must be at least 2", params.steps);
}

/// The evaluations `J(m + h_i dm)` and their verdict, given `J(m) = j0`.
fn along<E>(
    j: &mut impl FnMut(&[f64]) -> Result<f64, E>,
    j0: f64,
    m: &[f64],
    grad: &[f64],
    dm: &[f64],
    params: &TaylorParams,
) -> Result<TaylorResult, E> {
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
    } else if above == 0 && dj_dm == 0.0 {
        (
            true,
            0,
            Some(format!(
                "gradient zero, residual at round-off: J changes by no more than round-off \
                 (≤ {:.1e}·|J|) along dm and the gradient along dm is exactly zero",
                ROUNDOFF_RELATIVE
            )),
        )
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
        let mut note = (above < n).then(|| {
            format!(
                "remainders reach round-off from h = {:.3e} on; the decision uses the first {} \
                 rate(s) only",
                h[above], used
            )
        });
        if !passed && dj_dm == 0.0 {
            let zero = "the gradient along dm is exactly zero, but J changes along dm".to_string();
            note = Some(match note {
                Some(n) => format!("{zero}; {n}"),
                None => zero,
            });
        }
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
        threshold: params.min_rate,
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

/// [`taylor_test_parts`] over a registry selection, restoring the original values afterwards
/// in every case, like [`taylor_test_registry`].
pub fn taylor_test_parts_registry<E: From<ParamError>>(
    reg: &mut ParamRegistry,
    pv: &ParamVector,
    grad: &[f64],
    parts: &[TaylorPart],
    params: &TaylorParams,
    mut j: impl FnMut(&ParamRegistry) -> Result<f64, E>,
) -> Result<Vec<TaylorResult>, E> {
    let original = pv.gather(reg);
    let m = original.clone();
    let guard = Restore { reg, pv, original };
    taylor_test_parts(
        |x| {
            guard.pv.scatter(&mut *guard.reg, x)?;
            j(&*guard.reg)
        },
        &m,
        grad,
        parts,
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

    /// J(m) = m0³ + sin(m1) + 0·m2 (m2 does not enter) + Σ_k m_{3+k}² (a block), and its
    /// exact gradient.
    fn parted(x: &[f64]) -> f64 {
        x[0].powi(3) + x[1].sin() + x[3..].iter().map(|v| v * v).sum::<f64>()
    }

    fn parted_gradient(x: &[f64]) -> Vec<f64> {
        let mut g = vec![3.0 * x[0] * x[0], x[1].cos(), 0.0];
        g.extend(x[3..].iter().map(|v| 2.0 * v));
        g
    }

    fn parts_of(m: &[f64]) -> Vec<TaylorPart> {
        let d = random_direction_scaled(m, 7);
        [("a", 0..1), ("b", 1..2), ("unused", 2..3), ("block", 3..m.len())]
            .into_iter()
            .map(|(n, r)| TaylorPart { name: n.into(), dm: restrict(&d, r) })
            .collect()
    }

    #[test]
    fn per_part_tests_pass_on_an_exact_gradient() {
        let m = [1.0, 0.5, 2.0, 0.3, -0.7, 1.1];
        let g = parted_gradient(&m);
        let mut calls = 0;
        let parts = parts_of(&m);
        let r = taylor_test_parts(
            |x| {
                calls += 1;
                Ok::<_, std::convert::Infallible>(parted(x))
            },
            &m,
            &g,
            &parts,
            &TaylorParams::default(),
        )
        .unwrap();
        // J(m) once, then 5 steps per part.
        assert_eq!(calls, 1 + 4 * 5);
        assert_eq!(r.len(), 4);
        for (p, t) in parts.iter().zip(&r) {
            assert!(t.passed, "{}:\n{}", p.name, t.table());
            assert_eq!(t.threshold, 1.9);
        }
        assert!((r[0].min_rate() - 2.0).abs() < 0.1, "{}", r[0].table());
        assert_eq!(r[0].verdict(), "passed");
        // The parameter J does not depend on: zero gradient, zero residuals.
        assert!(r[2].gradient_zero_at_roundoff(), "{}", r[2].table());
        assert_eq!(r[2].verdict(), "gradient zero, residual at round-off");
        assert!(r[2].table().contains("gradient zero, residual at round-off"), "{}", r[2].table());
        assert!(!r[0].gradient_zero_at_roundoff());
    }

    #[test]
    fn a_wrong_derivative_fails_its_part_only() {
        let m = [1.0, 0.5, 2.0, 0.3, -0.7, 1.1];
        let mut g = parted_gradient(&m);
        // 2 % off on the sine term, whose share of a combined direction is small next to m0³.
        g[1] *= 1.02;
        let parts = parts_of(&m);
        let params = TaylorParams { h0: 1e-3, ..Default::default() };
        let r = taylor_test_parts(
            |x| Ok::<_, std::convert::Infallible>(parted(x)),
            &m,
            &g,
            &parts,
            &params,
        )
        .unwrap();
        let verdicts: Vec<bool> = r.iter().map(|t| t.passed).collect();
        assert_eq!(verdicts, [true, false, true, true], "{}", r[1].table());
        assert!(r[1].min_rate() < 1.5, "{}", r[1].table());
        assert_eq!(r[1].verdict(), "FAILED");
        // A zero gradient where J does change is wrong, and says so.
        let mut g = parted_gradient(&m);
        g[0] = 0.0;
        let r = taylor_test_parts(
            |x| Ok::<_, std::convert::Infallible>(parted(x)),
            &m,
            &g,
            &parts[..1],
            &params,
        )
        .unwrap();
        assert!(!r[0].passed && !r[0].gradient_zero_at_roundoff(), "{}", r[0].table());
        assert!(r[0].note.as_deref().unwrap_or("").contains("exactly zero"), "{}", r[0].table());
    }

    #[test]
    fn no_parts_evaluate_nothing() {
        let r = taylor_test_parts(
            |_| -> Result<f64, ()> { panic!("not evaluated") },
            &[1.0],
            &[1.0],
            &[],
            &TaylorParams::default(),
        )
        .unwrap();
        assert!(r.is_empty());
    }

    #[test]
    fn restrict_zeroes_the_rest() {
        assert_eq!(restrict(&[1.0, 2.0, 3.0, 4.0], 1..3), vec![0.0, 2.0, 3.0, 0.0]);
    }

    #[test]
    fn parts_over_a_registry_restore_it() {
        let mut reg = ParamRegistry::new();
        let a = reg.register(crate::params::ParamSpec::scalar("a", 1.5)).unwrap();
        let b = reg
            .register(crate::params::ParamSpec::vector(
                "b",
                crate::params::ParamKind::Field,
                vec![0.2, -0.4],
            ))
            .unwrap();
        let pv = ParamVector::all(&reg);
        let j = |r: &ParamRegistry| -> Result<f64, ParamError> {
            Ok(r.values(a)[0].powi(3) + r.values(b).iter().map(|v| v.powi(4)).sum::<f64>())
        };
        let grad = [3.0 * 1.5f64.powi(2), 4.0 * 0.2f64.powi(3), 4.0 * (-0.4f64).powi(3)];
        let d = random_direction_scaled(&pv.gather(&reg), 7);
        let parts = vec![
            TaylorPart { name: "a".into(), dm: restrict(&d, pv.range(a).unwrap()) },
            TaylorPart { name: "b".into(), dm: restrict(&d, pv.range(b).unwrap()) },
        ];
        let r =
            taylor_test_parts_registry(&mut reg, &pv, &grad, &parts, &TaylorParams::default(), j)
                .unwrap();
        assert!(r.iter().all(|t| t.passed), "{}\n{}", r[0].table(), r[1].table());
        assert_eq!(reg.values(a), &[1.5]);
        assert_eq!(reg.values(b), &[0.2, -0.4]);
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
