//! Sampling designs: where in the unit cube (0, 1)^d each sample lies.
//!
//! Every design gives sample i's point from (seed, i) alone — plain Monte Carlo by hashing,
//! a Latin hypercube from per-dimension permutations drawn once from the seed, Sobol from
//! the index's bits, Owen-scrambled — so the samples can be computed in any order, on any rank
//! or shard.
//!
//! The scramble is Owen's nested uniform scramble in its hash-based form (Burley, "Practical
//! Hash-based Owen Scrambling", JCGT 2020): with the bits reversed, a Laine–Karras permutation
//! (each output bit depends only on the input bits below it, plus a seed) flips every digit
//! depending on the digits above it, which is what keeps every elementary interval of the net
//! holding its one point while randomizing the points within it.

use crate::rng::{SplitMix64, hash4, unit_open};

/// Joe and Kuo's direction-number table (new-joe-kuo-6.21201, its rows for dimensions 2 to
/// 1000; `uq/data/joe-kuo/` holds it with its licence): per line d, the degree s, the
/// coefficients a and the initial m_1..m_s. Dimension 1 is van der Corput's sequence.
const JOE_KUO_TABLE: &str = include_str!("../data/joe-kuo/new-joe-kuo-6.1000");

/// The table's rows (s, a, m_1..m_s) for dimensions 2, 3, …, parsed once.
fn joe_kuo() -> &'static [(u32, u32, Vec<u32>)] {
    static ROWS: std::sync::OnceLock<Vec<(u32, u32, Vec<u32>)>> = std::sync::OnceLock::new();
    ROWS.get_or_init(|| {
        JOE_KUO_TABLE
            .lines()
            .skip(1)
            .enumerate()
            .map(|(k, line)| {
                let v: Vec<u32> = line
                    .split_whitespace()
                    .map(|x| x.parse().expect("the built-in Joe–Kuo table holds integers"))
                    .collect();
                assert_eq!(v[0] as usize, k + 2, "the built-in Joe–Kuo table is in order");
                (v[1], v[2], v[3..].to_vec())
            })
            .collect()
    })
}

/// The most dimensions the built-in Sobol direction numbers cover.
pub const SOBOL_MAX_DIM: usize = 1000;

/// Bits of each Sobol coordinate (and the most points: 2³²).
const BITS: usize = 32;

/// The 32 direction numbers V_k = m_k 2^{32−k} of each dimension.
fn direction_numbers(dim: usize) -> Vec<[u32; BITS]> {
    let mut out = Vec::with_capacity(dim);
    for d in 0..dim {
        let mut m = [0u64; BITS];
        if d == 0 {
            m = [1; BITS];
        } else {
            let (s, a, init) = &joe_kuo()[d - 1];
            let (s, a) = (*s, *a);
            let s = s as usize;
            m[..s].copy_from_slice(&init.iter().map(|&x| x as u64).collect::<Vec<_>>());
            for k in s..BITS {
                // m_k = 2 a_1 m_{k−1} ⊕ 2² a_2 m_{k−2} ⊕ … ⊕ 2^{s−1} a_{s−1} m_{k−s+1}
                //       ⊕ 2^s m_{k−s} ⊕ m_{k−s}
                let mut v = m[k - s] ^ (m[k - s] << s);
                for j in 1..s {
                    let bit = (a >> (s - 1 - j)) & 1;
                    if bit == 1 {
                        v ^= m[k - j] << j;
                    }
                }
                m[k] = v;
            }
        }
        let mut v = [0u32; BITS];
        for k in 0..BITS {
            v[k] = (m[k] << (BITS - 1 - k)) as u32;
        }
        out.push(v);
    }
    out
}

/// A Laine–Karras permutation of a 32-bit integer: output bit k depends only on input bits
/// 0..=k and the seed (additions, multiplications by odd numbers and x ⊕ x·even carry
/// upwards only). Burley's improved form: the seed enters both as an addend and, through its
/// high half, as an odd multiplier, so the leading scrambled digits depend on many seed bits
/// (with the seed as an addend only, they depend on its lowest bits alone, and two
/// replicates whose seeds share their low byte share their first eight digits).
fn laine_karras(mut x: u32, seed: u32) -> u32 {
    x ^= x.wrapping_mul(0x3d20_adea);
    x = x.wrapping_add(seed);
    x = x.wrapping_mul((seed >> 16) | 1);
    x ^= x.wrapping_mul(0x0552_6c56);
    x ^= x.wrapping_mul(0x53a2_2864);
    x
}

/// Owen's nested uniform scramble of a coordinate's 32 bits (most significant first): each
/// digit flipped by a hash of the digits before it and the seed.
fn owen_scramble(x: u32, seed: u32) -> u32 {
    laine_karras(x.reverse_bits(), seed).reverse_bits()
}

/// The unscrambled Sobol point of index i in Gray-code order, as 32-bit integers.
fn sobol_bits(v: &[[u32; BITS]], i: u64) -> Vec<u32> {
    let g = i ^ (i >> 1);
    v.iter()
        .map(|dir| {
            let mut x = 0u32;
            let mut b = g;
            let mut k = 0;
            while b != 0 {
                if b & 1 == 1 {
                    x ^= dir[k];
                }
                b >>= 1;
                k += 1;
            }
            x
        })
        .collect()
}

/// Which design.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DesignKind {
    /// Independent uniforms, hashed from (seed, sample, dimension).
    MonteCarlo,
    /// A Latin hypercube of a fixed size: each dimension's N strata hold one point each.
    LatinHypercube,
    /// Sobol's sequence (Joe–Kuo directions), Owen-scrambled independently per replicate
    /// (hash-based nested uniform scramble, module docs): sample i belongs to replicate
    /// i mod R and is point ⌊i/R⌋ of that replicate's scrambled sequence, so the replicate
    /// means give an honest standard error.
    Sobol,
}

impl DesignKind {
    /// The name used in problem files and reports.
    pub fn name(self) -> &'static str {
        match self {
            DesignKind::MonteCarlo => "monte_carlo",
            DesignKind::LatinHypercube => "latin_hypercube",
            DesignKind::Sobol => "sobol",
        }
    }

    /// The design of a name (`monte_carlo`, `latin_hypercube`, `sobol`).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "monte_carlo" => DesignKind::MonteCarlo,
            "latin_hypercube" => DesignKind::LatinHypercube,
            "sobol" => DesignKind::Sobol,
            _ => return None,
        })
    }
}

/// A design refused at construction.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct DesignError(pub String);

/// A sampling design over (0, 1)^dim.
#[derive(Clone, Debug)]
pub struct Design {
    kind: DesignKind,
    dim: usize,
    seed: u64,
    size: usize,
    replicates: usize,
    permutations: Vec<Vec<u32>>,
    directions: Vec<[u32; BITS]>,
    /// Per replicate and dimension, the seed of its Owen scramble.
    scrambles: Vec<Vec<u32>>,
}

impl Design {
    /// A design of `dim` dimensions for at most `size` samples (a Latin hypercube has
    /// exactly `size` strata), drawn from `seed`; `replicates` independent scrambles for
    /// Sobol (1 for the other designs).
    pub fn new(
        kind: DesignKind,
        dim: usize,
        size: usize,
        seed: u64,
        replicates: usize,
    ) -> Result<Self, DesignError> {
        if dim == 0 {
            return Err(DesignError("a design needs at least one dimension".into()));
        }
        if size == 0 {
            return Err(DesignError("a design needs at least one sample".into()));
        }
        let replicates = if kind == DesignKind::Sobol { replicates.max(1) } else { 1 };
        let mut permutations = Vec::new();
        let mut directions = Vec::new();
        let mut scrambles = Vec::new();
        match kind {
            DesignKind::MonteCarlo => {}
            DesignKind::LatinHypercube => {
                if size > u32::MAX as usize {
                    return Err(DesignError(format!(
                        "a Latin hypercube of {size} points is too large"
                    )));
                }
                let mut rng = SplitMix64::new(seed ^ 0x4c48_5300);
                permutations = (0..dim).map(|_| rng.permutation(size)).collect();
            }
            DesignKind::Sobol => {
                if dim > SOBOL_MAX_DIM {
                    return Err(DesignError(format!(
                        "Sobol points are available for up to {SOBOL_MAX_DIM} inputs, not {dim} (use monte_carlo or latin_hypercube)"
                    )));
                }
                if size.div_ceil(replicates) as u64 > 1u64 << 32 {
                    return Err(DesignError(format!("{size} Sobol points are too many")));
                }
                directions = direction_numbers(dim);
                let mut rng = SplitMix64::new(seed ^ 0x5ab0_1000);
                scrambles = (0..replicates)
                    .map(|_| (0..dim).map(|_| (rng.next_u64() >> 32) as u32).collect())
                    .collect();
            }
        }
        Ok(Design { kind, dim, seed, size, replicates, permutations, directions, scrambles })
    }

    /// The design's kind.
    pub fn kind(&self) -> DesignKind {
        self.kind
    }

    /// Replicates (independent randomizations) the samples cycle through.
    pub fn replicates(&self) -> usize {
        self.replicates
    }

    /// The replicate sample i belongs to.
    pub fn replicate_of(&self, i: usize) -> usize {
        i % self.replicates
    }

    /// The point of sample i (i < size), every coordinate strictly inside (0, 1).
    pub fn point(&self, i: usize) -> Vec<f64> {
        assert!(i < self.size, "sample {i} of a design of {} samples", self.size);
        match self.kind {
            DesignKind::MonteCarlo => {
                (0..self.dim).map(|d| unit_open(hash4(self.seed, 1, i as u64, d as u64))).collect()
            }
            DesignKind::LatinHypercube => (0..self.dim)
                .map(|d| {
                    let jitter = unit_open(hash4(self.seed, 2, i as u64, d as u64));
                    (self.permutations[d][i] as f64 + jitter) / self.size as f64
                })
                .collect(),
            DesignKind::Sobol => {
                let r = i % self.replicates;
                let k = (i / self.replicates) as u64;
                sobol_bits(&self.directions, k)
                    .iter()
                    .zip(&self.scrambles[r])
                    .map(|(&x, &s)| (owen_scramble(x, s) as f64 + 0.5) / 4_294_967_296.0)
                    .collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[test]
    fn first_sobol_points_are_the_published_ones() {
        let v = direction_numbers(2);
        let pts: Vec<Vec<f64>> = (1..8)
            .map(|i| sobol_bits(&v, i).iter().map(|&x| x as f64 / 4_294_967_296.0).collect())
            .collect();
        let d1: Vec<f64> = pts.iter().map(|p| p[0]).collect();
        let d2: Vec<f64> = pts.iter().map(|p| p[1]).collect();
        assert_eq!(d1, [0.5, 0.75, 0.25, 0.375, 0.875, 0.625, 0.125]);
        assert_eq!(d2, [0.5, 0.25, 0.75, 0.375, 0.875, 0.125, 0.625]);
    }

    /// Unscrambled points far along the sequence in high dimensions against SciPy's
    /// `qmc.Sobol(d=1000, scramble=False, bits=32)` (the same Joe–Kuo table, Gray-code order),
    /// as integers: x · 2³².
    #[test]
    fn high_dimensions_match_an_independent_implementation() {
        let v = direction_numbers(SOBOL_MAX_DIM);
        let reference: [(usize, [(usize, u32); 5]); 2] = [
            (
                1000,
                [
                    (20, 2243952640),
                    (21, 2361393152),
                    (99, 801112064),
                    (500, 3116367872),
                    (999, 859832320),
                ],
            ),
            (
                12345,
                [
                    (20, 855900160),
                    (21, 348913664),
                    (99, 2314469376),
                    (500, 1299447808),
                    (999, 562823168),
                ],
            ),
        ];
        for (i, dims) in reference {
            let x = sobol_bits(&v, i as u64);
            for (d, want) in dims {
                assert_eq!(x[d], want, "point {i}, dimension {d}");
            }
        }
    }

    #[test]
    fn direction_numbers_are_odd_and_below_their_power_of_two() {
        assert_eq!(joe_kuo().len() + 1, SOBOL_MAX_DIM);
        for (s, _, m) in joe_kuo() {
            assert_eq!(m.len(), *s as usize);
            for (k, &mk) in m.iter().enumerate() {
                assert!(mk % 2 == 1 && mk < 1 << (k + 1), "m = {m:?}");
            }
        }
    }

    /// Every 1-D projection of the first 2^m points of each dimension, scrambled, puts one
    /// point in each interval [j/2^m, (j+1)/2^m).
    #[test]
    fn sobol_projections_are_stratified() {
        let m = 10;
        let d = Design::new(DesignKind::Sobol, SOBOL_MAX_DIM, 1 << m, 9, 1).unwrap();
        let points: Vec<Vec<f64>> = (0..1 << m).map(|i| d.point(i)).collect();
        for dim in 0..SOBOL_MAX_DIM {
            let mut seen = vec![false; 1 << m];
            for p in &points {
                let j = (p[dim] * (1 << m) as f64) as usize;
                assert!(!seen[j], "dimension {dim}: two points in stratum {j}");
                seen[j] = true;
            }
        }
    }

    /// The first two dimensions form a (0, m, 2)-net: every dyadic box of area 2^-m holds
    /// exactly one of the first 2^m points, also after the Owen scramble.
    #[test]
    fn first_two_sobol_dimensions_form_a_zero_net() {
        let m = 8;
        let d = Design::new(DesignKind::Sobol, 2, 1 << m, 4, 1).unwrap();
        let pts: Vec<Vec<f64>> = (0..1 << m).map(|i| d.point(i)).collect();
        for kx in 0..=m {
            let ky = m - kx;
            let mut count = vec![0; 1 << m];
            for p in &pts {
                let bx = (p[0] * (1u64 << kx) as f64) as usize;
                let by = (p[1] * (1u64 << ky) as f64) as usize;
                count[bx * (1 << ky) + by] += 1;
            }
            assert!(count.iter().all(|&c| c == 1), "boxes 2^-{kx} × 2^-{ky}");
        }
    }

    /// Low discrepancy where it matters: ∫ Π (1 + (u_k − ½)) du = 1 in 8 dimensions, by 1024
    /// points; Monte Carlo's error is ≈ 0.95/√1024 ≈ 0.03, the scrambled Sobol points' a few 1e-3.
    #[test]
    fn sobol_integrates_a_smooth_product_far_better_than_monte_carlo() {
        let f = |u: &[f64]| u.iter().map(|x| 1.0 + (x - 0.5)).product::<f64>();
        let n = 1024;
        let err = |kind| {
            let mut worst: f64 = 0.0;
            for seed in 0..8 {
                let d = Design::new(kind, 8, n, seed, 1).unwrap();
                let s: f64 = (0..n).map(|i| f(&d.point(i))).sum::<f64>() / n as f64;
                worst = worst.max((s - 1.0).abs());
            }
            worst
        };
        let (sobol, mc) = (err(DesignKind::Sobol), err(DesignKind::MonteCarlo));
        assert!(sobol < 4e-3, "Sobol error {sobol}");
        assert!(sobol < 0.2 * mc, "Sobol {sobol} vs Monte Carlo {mc}");
    }

    #[rstest]
    #[case(10)]
    #[case(37)]
    #[case(256)]
    fn latin_hypercube_puts_one_point_in_each_stratum(#[case] n: usize) {
        let d = Design::new(DesignKind::LatinHypercube, 4, n, 11, 1).unwrap();
        for dim in 0..4 {
            let mut seen = vec![false; n];
            for i in 0..n {
                let u = d.point(i)[dim];
                assert!(u > 0.0 && u < 1.0);
                let j = (u * n as f64) as usize;
                assert!(!seen[j], "dimension {dim}, stratum {j}");
                seen[j] = true;
            }
        }
    }

    #[test]
    fn points_depend_on_the_seed_and_not_on_the_order_of_evaluation() {
        for kind in [DesignKind::MonteCarlo, DesignKind::LatinHypercube, DesignKind::Sobol] {
            let a = Design::new(kind, 3, 64, 1, 4).unwrap();
            let b = Design::new(kind, 3, 64, 1, 4).unwrap();
            let c = Design::new(kind, 3, 64, 2, 4).unwrap();
            let forward: Vec<Vec<f64>> = (0..64).map(|i| a.point(i)).collect();
            let backward: Vec<Vec<f64>> = (0..64).rev().map(|i| b.point(i)).collect();
            assert!(forward.iter().eq(backward.iter().rev()), "{kind:?}");
            assert_ne!(forward[5], c.point(5), "{kind:?}");
        }
    }

    #[test]
    fn too_many_sobol_dimensions_are_refused() {
        assert!(Design::new(DesignKind::Sobol, SOBOL_MAX_DIM + 1, 8, 0, 1).is_err());
    }

    /// The scramble permutes each elementary interval's points among its sub-intervals: on
    /// the first k bits it is a bijection of {0..2^k} for every seed, and different seeds give
    /// different permutations.
    /// Seeds that share their low byte (the case where the additive form gave two replicates
    /// the same first eight digits) give unrelated leading digits, and the leading byte of a
    /// scrambled point is uniform over seeds.
    #[test]
    fn seeds_sharing_low_bits_scramble_apart() {
        let (a, b) = (0xbf03_17cb_u32, 0x7ec4_19cb_u32);
        let same = (0..64u32)
            .filter(|&k| owen_scramble(k << 26, a) >> 24 == owen_scramble(k << 26, b) >> 24)
            .count();
        assert!(same <= 2, "{same} of 64 points share their leading byte");
        let mut counts = [0usize; 16];
        let mut rng = SplitMix64::new(3);
        for _ in 0..16 * 256 {
            let seed = (rng.next_u64() >> 32) as u32;
            counts[(owen_scramble(0x8000_0000, seed) >> 28) as usize] += 1;
        }
        // 256 expected per bin; 5 standard deviations (√240 ≈ 15.5) either way.
        assert!(counts.iter().all(|&c| (178..=334).contains(&c)), "{counts:?}");
    }

    #[test]
    fn owen_scramble_permutes_every_leading_bit_block() {
        for seed in [0u32, 1, 0xdead_beef] {
            for k in [1u32, 4, 8] {
                let mut seen = vec![false; 1 << k];
                for v in 0..1u32 << k {
                    let x = v << (32 - k);
                    let y = owen_scramble(x, seed) >> (32 - k);
                    assert!(!seen[y as usize], "seed {seed}, {k} bits: {v} collides");
                    seen[y as usize] = true;
                }
            }
        }
        let a: Vec<u32> = (0..16u32).map(|v| owen_scramble(v << 28, 1) >> 28).collect();
        let b: Vec<u32> = (0..16u32).map(|v| owen_scramble(v << 28, 2) >> 28).collect();
        assert_ne!(a, b);
    }
}
