//! Statistics of a sample of outputs, each with its standard error, all summed in sample
//! order so that the same samples give the same bits however they were computed.

use serde::{Deserialize, Serialize};

/// A quantile estimate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Quantile {
    /// The probability p.
    pub p: f64,
    /// The sample quantile (linear interpolation between order statistics, R's type 7).
    pub value: f64,
    /// Its standard error, distribution-free: the half-width of the order-statistic 95 %
    /// interval (binomial ranks n p ± 1.96 √(n p (1 − p))) divided by 1.96. Where that
    /// interval runs off the sample (a tail quantile of few samples) its ranks are clamped to
    /// the sample's ends, and the value is only a rough, usually low, guide.
    pub se: f64,
}

/// Mean, standard deviation and quantiles of one output.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Samples used.
    pub n: usize,
    /// The sample mean.
    pub mean: f64,
    /// Its standard error: s/√n for independent samples, or the spread of the replicate
    /// means (randomized quasi-Monte Carlo).
    pub se_mean: f64,
    /// The sample standard deviation s (n − 1 in the denominator).
    pub std: f64,
    /// Its standard error, √((m₄ − s⁴)/n) / (2 s) from the sample's fourth central moment.
    pub se_std: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// The requested quantiles.
    pub quantiles: Vec<Quantile>,
}

/// Σ x in order, then / n.
pub fn mean(x: &[f64]) -> f64 {
    let mut s = 0.0;
    for v in x {
        s += v;
    }
    s / x.len() as f64
}

/// The sample variance (n − 1 in the denominator; 0 for fewer than two values).
pub fn variance(x: &[f64]) -> f64 {
    if x.len() < 2 {
        return 0.0;
    }
    let m = mean(x);
    let mut s = 0.0;
    for v in x {
        s += (v - m) * (v - m);
    }
    s / (x.len() - 1) as f64
}

/// The sample quantile of sorted values, linear between order statistics (type 7).
pub fn quantile_sorted(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    let h = (n - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// The distribution-free standard error of the p-quantile of sorted values.
pub fn quantile_se(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len() as f64;
    let half = 1.959963984540054 * (n * p * (1.0 - p)).sqrt();
    if sorted.len() < 2 {
        return f64::NAN;
    }
    let lo = (n * p - half).floor().max(0.0);
    let hi = (n * p + half).ceil().min(n - 1.0);
    (sorted[hi as usize] - sorted[lo as usize]) / (2.0 * 1.959963984540054)
}

/// The summary of `values` (in sample order) with the quantiles `probs`; `replicate` gives
/// each value's replicate when the samples are randomized QMC replicates (None: independent).
pub fn summarize(values: &[f64], probs: &[f64], replicate: Option<(&[usize], usize)>) -> Summary {
    let n = values.len();
    let m = mean(values);
    let var = variance(values);
    let s = var.sqrt();
    let se_mean = match replicate {
        Some((of, r)) if r >= 2 => replicate_se(values, of, r),
        _ => (var / n as f64).sqrt(),
    };
    let mut m4 = 0.0;
    for v in values {
        m4 += (v - m).powi(4);
    }
    m4 /= n as f64;
    let se_std = if n >= 2 && s > 0.0 {
        ((m4 - var * var).max(0.0) / n as f64).sqrt() / (2.0 * s)
    } else {
        0.0
    };
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let quantiles = probs
        .iter()
        .map(|&p| Quantile { p, value: quantile_sorted(&sorted, p), se: quantile_se(&sorted, p) })
        .collect();
    Summary {
        n,
        mean: m,
        se_mean,
        std: s,
        se_std,
        min: sorted.first().copied().unwrap_or(f64::NAN),
        max: sorted.last().copied().unwrap_or(f64::NAN),
        quantiles,
    }
}

/// The standard error of the mean from the means of `r` replicates: s_R / √R.
fn replicate_se(values: &[f64], of: &[usize], r: usize) -> f64 {
    let mut sums = vec![0.0; r];
    let mut counts = vec![0usize; r];
    for (v, &k) in values.iter().zip(of) {
        sums[k] += v;
        counts[k] += 1;
    }
    let means: Vec<f64> =
        sums.iter().zip(&counts).filter(|(_, c)| **c > 0).map(|(s, &c)| s / c as f64).collect();
    if means.len() < 2 {
        return f64::NAN;
    }
    (variance(&means) / means.len() as f64).sqrt()
}

/// The probability that an output passes a limit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Exceedance {
    /// The limit.
    pub limit: f64,
    /// `above` (value > limit) or `below` (value < limit).
    pub side: &'static str,
    /// Samples past the limit.
    pub count: usize,
    /// count / n.
    pub probability: f64,
    /// √(p (1 − p) / n); with no sample past the limit, the 95 % upper bound 3/n ("rule of
    /// three") is reported in `upper_95` instead.
    pub se: f64,
    /// A 95 % upper confidence bound: p + 1.96 se, or 3/n when no sample is past the limit.
    pub upper_95: f64,
}

/// P(value > limit) when `above`, else P(value < limit), in sample order.
pub fn exceedance(values: &[f64], limit: f64, above: bool) -> Exceedance {
    let n = values.len() as f64;
    let count = values.iter().filter(|&&v| if above { v > limit } else { v < limit }).count();
    let p = count as f64 / n;
    let se = (p * (1.0 - p) / n).sqrt();
    let upper_95 =
        if count == 0 { (3.0 / n).min(1.0) } else { (p + 1.959963984540054 * se).min(1.0) };
    Exceedance {
        limit,
        side: if above { "above" } else { "below" },
        count,
        probability: p,
        se,
        upper_95,
    }
}

/// When to stop sampling.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum StopRule {
    /// A fixed number of samples.
    Count {
        /// The samples.
        samples: usize,
    },
    /// Stop at the first batch boundary where se(mean)/|mean| ≤ target for the output,
    /// after at least `min_samples` and at most `max_samples`.
    RelativeSe {
        /// The output followed.
        output: String,
        /// The target relative standard error.
        target: f64,
        /// Samples before the test is first made.
        min_samples: usize,
        /// The most samples.
        max_samples: usize,
    },
}

impl StopRule {
    /// The most samples the rule may take.
    pub fn max_samples(&self) -> usize {
        match self {
            StopRule::Count { samples } => *samples,
            StopRule::RelativeSe { max_samples, .. } => *max_samples,
        }
    }

    /// Whether the rule is met by the summary of its output after `n` samples.
    pub fn met(&self, n: usize, followed: Option<&Summary>) -> bool {
        match self {
            StopRule::Count { samples } => n >= *samples,
            StopRule::RelativeSe { target, min_samples, max_samples, .. } => {
                if n >= *max_samples {
                    return true;
                }
                if n < *min_samples {
                    return false;
                }
                followed.is_some_and(|s| {
                    s.mean != 0.0 && s.se_mean.is_finite() && s.se_mean / s.mean.abs() <= *target
                })
            }
        }
    }
}

/// The acceptance rule std(output) < fraction · mean(output) (the seed's rule with 0.05).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Acceptance {
    /// The rule, in words.
    pub rule: String,
    /// The output judged.
    pub output: String,
    /// The fraction (0.05 for the seed's rule).
    pub fraction: f64,
    /// std(output).
    pub std: f64,
    /// mean(output).
    pub mean: f64,
    /// std / |mean|.
    pub ratio: f64,
    /// Whether std < fraction · |mean|.
    pub accepted: bool,
}

/// Apply the acceptance rule to a summary.
pub fn acceptance(output: &str, fraction: f64, s: &Summary) -> Acceptance {
    Acceptance {
        rule: format!("std({output}) < {fraction} · mean({output})"),
        output: output.to_string(),
        fraction,
        std: s.std,
        mean: s.mean,
        ratio: s.std / s.mean.abs(),
        accepted: s.std < fraction * s.mean.abs(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::design::{Design, DesignKind};
    use crate::special::{normal_pdf, normal_quantile};
    use rstest::rstest;

    fn normals(n: usize, seed: u64) -> Vec<f64> {
        let d = Design::new(DesignKind::MonteCarlo, 1, n, seed, 1).unwrap();
        (0..n).map(|i| normal_quantile(d.point(i)[0])).collect()
    }

    #[test]
    fn summary_of_a_small_sample_by_hand() {
        let s = summarize(&[1.0, 2.0, 3.0, 4.0], &[0.5], None);
        assert_eq!(s.mean, 2.5);
        assert!((s.std - (5.0f64 / 3.0).sqrt()).abs() < 1e-15);
        assert_eq!(s.quantiles[0].value, 2.5);
        assert_eq!((s.min, s.max), (1.0, 4.0));
    }

    /// The quantile SE agrees with the asymptotic σ √(p(1−p)) / (φ(z_p) √n) of a normal
    /// sample, and the mean's SE with σ/√n.
    #[rstest]
    #[case(0.5)]
    #[case(0.1)]
    #[case(0.95)]
    fn quantile_se_matches_the_asymptotic_formula(#[case] p: f64) {
        let n = 20_000;
        let x = normals(n, 3);
        let s = summarize(&x, &[p], None);
        let zp = normal_quantile(p);
        let want = (p * (1.0 - p)).sqrt() / (normal_pdf(zp) * (n as f64).sqrt());
        let got = s.quantiles[0].se;
        assert!((got / want - 1.0).abs() < 0.15, "p = {p}: {got} vs {want}");
        assert!((s.quantiles[0].value - zp).abs() < 4.0 * want);
        assert!((s.se_mean * (n as f64).sqrt() - 1.0).abs() < 0.03);
        // se(s) of a normal sample: σ/√(2n).
        assert!((s.se_std / (1.0 / (2.0 * n as f64).sqrt()) - 1.0).abs() < 0.1, "{}", s.se_std);
    }

    /// Over many repetitions the reported quantile SE covers the true quantile as stated:
    /// |q̂ − q| ≤ 1.96 se in about 95 % of 400 samples of 200.
    #[test]
    fn quantile_se_gives_the_stated_coverage() {
        let p = 0.9;
        let q = normal_quantile(p);
        let covered = (0..400)
            .filter(|&rep| {
                let s = summarize(&normals(200, 100 + rep), &[p], None);
                (s.quantiles[0].value - q).abs() <= 1.96 * s.quantiles[0].se
            })
            .count();
        assert!((360..=396).contains(&covered), "{covered} of 400");
    }

    #[test]
    fn exceedance_counts_and_bounds() {
        let e = exceedance(&[1.0, 5.0, 7.0, 2.0], 4.0, true);
        assert_eq!((e.count, e.probability), (2, 0.5));
        assert!((e.se - 0.25).abs() < 1e-15);
        let none = exceedance(&[1.0; 30], 4.0, true);
        assert_eq!(none.probability, 0.0);
        assert!((none.upper_95 - 0.1).abs() < 1e-15);
        assert_eq!(exceedance(&[1.0, 5.0], 4.0, false).count, 1);
    }

    #[test]
    fn replicate_standard_error_uses_replicate_means() {
        // Two replicates with means 1 and 3: s_R = √2, se = 1.
        let v = [0.0, 4.0, 2.0, 2.0];
        let of = [0, 1, 0, 1];
        let s = summarize(&v, &[], Some((&of, 2)));
        assert!((s.se_mean - 1.0).abs() < 1e-15, "{}", s.se_mean);
    }

    #[test]
    fn relative_se_rule_waits_for_its_minimum_and_stops_at_its_maximum() {
        let rule = StopRule::RelativeSe {
            output: "q".into(),
            target: 0.01,
            min_samples: 16,
            max_samples: 64,
        };
        let tight = summarize(&[100.0, 100.1, 99.9, 100.0], &[], None);
        let loose = summarize(&[1.0, 3.0, 0.0, 9.0], &[], None);
        assert!(!rule.met(8, Some(&tight)));
        assert!(rule.met(16, Some(&tight)));
        assert!(!rule.met(16, Some(&loose)));
        assert!(rule.met(64, Some(&loose)));
        assert!(StopRule::Count { samples: 32 }.met(32, None));
    }

    #[rstest]
    #[case(&[100.0, 101.0, 99.0, 100.0], true)]
    #[case(&[100.0, 130.0, 70.0, 100.0], false)]
    fn seed_acceptance_rule(#[case] x: &[f64], #[case] accepted: bool) {
        let a = acceptance("loss", 0.05, &summarize(x, &[], None));
        assert_eq!(a.accepted, accepted, "{a:?}");
    }
}
