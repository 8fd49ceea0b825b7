//! Counter-based random numbers: the uniforms of sample i depend on (seed, i, dimension)
//! only, so any subset of samples, on any rank or shard and in any order, draws exactly
//! the numbers one run over all samples draws.

/// SplitMix64's finalizer: a bijective 64-bit mix with full avalanche.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A 64-bit hash of (seed, stream, index, dimension).
pub fn hash4(seed: u64, stream: u64, index: u64, dim: u64) -> u64 {
    mix64(mix64(mix64(mix64(seed) ^ stream) ^ index) ^ dim)
}

/// A uniform number strictly inside (0, 1) from 64 random bits (52 of them used, so
/// that the half-step offset keeps both ends representable).
pub fn unit_open(bits: u64) -> f64 {
    ((bits >> 12) as f64 + 0.5) * (1.0 / (1u64 << 52) as f64)
}

/// A small sequential generator (SplitMix64) for permutations and shifts.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state.wrapping_sub(0x9e37_79b9_7f4a_7c15))
    }

    /// A uniform integer in 0..n (n > 0), without modulo bias (Lemire's rejection).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            let low = m as u64;
            if low >= n.wrapping_neg() % n {
                return (m >> 64) as u64;
            }
        }
    }

    /// A uniformly random permutation of 0..n (Fisher–Yates).
    pub fn permutation(&mut self, n: usize) -> Vec<u32> {
        let mut p: Vec<u32> = (0..n as u32).collect();
        for i in (1..n).rev() {
            let j = self.below(i as u64 + 1) as usize;
            p.swap(i, j);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_open_stays_inside_the_interval() {
        assert!(unit_open(0) > 0.0);
        assert!(unit_open(u64::MAX) < 1.0);
    }

    #[test]
    fn hashed_uniforms_have_the_moments_of_a_uniform() {
        let n = 200_000;
        let (mut s1, mut s2) = (0.0, 0.0);
        for i in 0..n {
            let u = unit_open(hash4(7, 0, i, 3));
            s1 += u;
            s2 += u * u;
        }
        let m = s1 / n as f64;
        let v = s2 / n as f64 - m * m;
        // SE of the mean: √(1/12 / n) ≈ 6.5e-4.
        assert!((m - 0.5).abs() < 4.0 * (1.0 / 12.0 / n as f64).sqrt(), "{m}");
        assert!((v - 1.0 / 12.0).abs() < 2e-3, "{v}");
    }

    #[test]
    fn permutations_are_permutations() {
        let mut r = SplitMix64::new(3);
        let mut p = r.permutation(1000);
        p.sort_unstable();
        assert!(p.iter().enumerate().all(|(i, &v)| v == i as u32));
    }
}
