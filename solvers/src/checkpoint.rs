//! Checkpointing for the reverse sweep of a time-stepping adjoint: store all states, or keep a
//! bounded number of them with the binomial (Revolve) schedule and recompute the rest.
//!
//! The forward map is x_{k+1} = step(k, x_k) for k = 0 … n − 1. A discrete adjoint visits the
//! steps backwards and needs, at step k, the states x_k and x_{k+1}. [`reverse_sweep`] runs the
//! forward pass itself and then calls `adjoint(k, x_k, x_{k+1})` for k = n − 1 down to 0:
//!
//! - [`Checkpointing::StoreAll`]: the forward pass keeps x_0 … x_n (n + 1 states, n steps);
//! - [`Checkpointing::Binomial`]: at most `snapshots` states are held at a time (plus the two
//!   states handed to `adjoint`). The schedule is Griewank's binomial recursion: with s slots
//!   and r recomputations per step, β(s, r) = C(s + r, s) steps can be reversed, and
//!   β(s, r) = β(s − 1, r) + β(s, r − 1) splits a range into a right part (reversed first,
//!   with a new checkpoint at its start and s − 1 slots) and a left part (s slots, one
//!   recomputation less). The recomputed states are those of the first pass bit for bit as
//!   long as `step` is deterministic, so the gradient equals the store-all one exactly.
//!
//! Written here rather than taken from a crate: no maintained Rust crate offers Revolve, and the
//! recursion is thirty lines (the same schedule as `gradfem-dynamics`' adjoint, made generic
//! over the state and the error).

/// How the reverse sweep gets the states it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checkpointing {
    /// Keep every state (memory n + 1 states, n forward steps).
    StoreAll,
    /// Keep at most `snapshots` ≥ 1 states (x_0 included) and recompute the others.
    Binomial {
        /// Largest number of stored checkpoints.
        snapshots: usize,
    },
}

/// Work and memory of one reverse sweep.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepStats {
    /// Number of `step` calls (the first pass included).
    pub forward_steps: usize,
    /// Number of `adjoint` calls (always n).
    pub adjoint_steps: usize,
    /// Largest number of checkpoints held at once (x_0 included, the states handed to
    /// `adjoint` not).
    pub max_stored_states: usize,
}

/// β(s, r) = C(s + r, s), the number of steps s slots reverse with r recomputations,
/// saturating at `usize::MAX`.
pub fn binomial_capacity(s: usize, r: usize) -> usize {
    let mut b: u128 = 1;
    for i in 1..=s.min(r) as u128 {
        b = b * (s.max(r) as u128 + i) / i;
        if b > usize::MAX as u128 {
            return usize::MAX;
        }
    }
    b as usize
}

/// Run `n_steps` forward steps from `x0` and then the reverse sweep: `adjoint(k, x_k, x_{k+1})`
/// for k = n − 1 down to 0, with the states produced by `step` (module docs). Errors of either
/// closure stop the sweep and are returned as they are.
///
/// The first n calls of `step` are k = 0, 1, …, n − 1 in order (the first pass); later calls
/// recompute states already seen.
///
/// # Panics
/// If `Checkpointing::Binomial { snapshots: 0 }` (a caller's mistake).
pub fn reverse_sweep<S: Clone, E>(
    n_steps: usize,
    x0: &S,
    memory: Checkpointing,
    mut step: impl FnMut(usize, &S) -> Result<S, E>,
    mut adjoint: impl FnMut(usize, &S, &S) -> Result<(), E>,
) -> Result<SweepStats, E> {
    let mut stats = SweepStats::default();
    match memory {
        Checkpointing::StoreAll => {
            let mut states = Vec::with_capacity(n_steps + 1);
            states.push(x0.clone());
            for k in 0..n_steps {
                let next = step(k, &states[k])?;
                states.push(next);
            }
            stats.forward_steps = n_steps;
            stats.max_stored_states = states.len();
            for k in (0..n_steps).rev() {
                adjoint(k, &states[k], &states[k + 1])?;
                stats.adjoint_steps += 1;
                states.pop();
            }
        }
        Checkpointing::Binomial { snapshots } => {
            assert!(snapshots >= 1, "Checkpointing::Binomial: snapshots must be ≥ 1");
            stats.max_stored_states = 1;
            if n_steps == 0 {
                return Ok(stats);
            }
            let mut x = x0.clone();
            for k in 0..n_steps {
                x = step(k, &x)?;
            }
            stats.forward_steps = n_steps;
            let mut rev = Reverser { step: &mut step, adjoint: &mut adjoint, stored: 1, stats };
            rev.treeverse(0, n_steps, x0, &x, snapshots)?;
            stats = rev.stats;
        }
    }
    Ok(stats)
}

/// The closures and counters of a binomial reverse sweep.
struct Reverser<'c, F, A> {
    step: &'c mut F,
    adjoint: &'c mut A,
    stored: usize,
    stats: SweepStats,
}

impl<F, A> Reverser<'_, F, A> {
    fn advance<S: Clone, E>(&mut self, from: usize, to: usize, xa: &S) -> Result<S, E>
    where
        F: FnMut(usize, &S) -> Result<S, E>,
    {
        let mut x = xa.clone();
        for k in from..to {
            x = (self.step)(k, &x)?;
            self.stats.forward_steps += 1;
        }
        Ok(x)
    }

    /// Reverses steps a..b given x_a (a checkpoint) and x_b, with `slots` checkpoints
    /// available for the range (x_a's included).
    fn treeverse<S: Clone, E>(
        &mut self,
        a: usize,
        b: usize,
        xa: &S,
        xb: &S,
        slots: usize,
    ) -> Result<(), E>
    where
        F: FnMut(usize, &S) -> Result<S, E>,
        A: FnMut(usize, &S, &S) -> Result<(), E>,
    {
        let n = b - a;
        if n == 1 {
            (self.adjoint)(a, xa, xb)?;
            self.stats.adjoint_steps += 1;
            return Ok(());
        }
        if slots <= 1 {
            let mut next = xb.clone();
            for k in (a..b).rev() {
                let xk = self.advance(a, k, xa)?;
                (self.adjoint)(k, &xk, &next)?;
                self.stats.adjoint_steps += 1;
                next = xk;
            }
            return Ok(());
        }
        let mut r = 1;
        while binomial_capacity(slots, r) < n {
            r += 1;
        }
        let n_left = n.saturating_sub(binomial_capacity(slots - 1, r)).clamp(1, n - 1);
        let xm = self.advance(a, a + n_left, xa)?;
        self.stored += 1;
        self.stats.max_stored_states = self.stats.max_stored_states.max(self.stored);
        self.treeverse(a + n_left, b, &xm, xb, slots - 1)?;
        self.stored -= 1;
        self.treeverse(a, a + n_left, xa, &xm, slots)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[test]
    fn binomial_counts() {
        assert_eq!(binomial_capacity(1, 3), 4);
        assert_eq!(binomial_capacity(2, 2), 6);
        assert_eq!(binomial_capacity(3, 0), 1);
        assert_eq!(binomial_capacity(3, 3), 20);
    }

    /// A scalar recurrence x_{k+1} = x_k (1 + 0.1 sin k) + k: the reverse sweep must see every
    /// pair (x_k, x_{k+1}) once, in decreasing k, with the values of the first pass.
    #[rstest]
    #[case(Checkpointing::StoreAll, 1)]
    #[case(Checkpointing::Binomial { snapshots: 1 }, 1)]
    #[case(Checkpointing::Binomial { snapshots: 2 }, 1)]
    #[case(Checkpointing::Binomial { snapshots: 3 }, 17)]
    #[case(Checkpointing::Binomial { snapshots: 4 }, 0)]
    #[case(Checkpointing::Binomial { snapshots: 50 }, 17)]
    fn reverse_sweep_visits_every_pair(#[case] memory: Checkpointing, #[case] extra: usize) {
        let n = 23 + extra;
        let f = |k: usize, x: &f64| -> Result<f64, ()> {
            Ok(x * (1.0 + 0.1 * (k as f64).sin()) + k as f64)
        };
        let mut reference = vec![0.5];
        for k in 0..n {
            let next = f(k, &reference[k]).unwrap();
            reference.push(next);
        }
        let mut seen = Vec::new();
        let stats = reverse_sweep(n, &0.5, memory, f, |k, a: &f64, b: &f64| {
            seen.push((k, *a, *b));
            Ok(())
        })
        .unwrap();
        let expected: Vec<(usize, f64, f64)> =
            (0..n).rev().map(|k| (k, reference[k], reference[k + 1])).collect();
        assert_eq!(seen, expected);
        assert_eq!(stats.adjoint_steps, n);
        match memory {
            Checkpointing::StoreAll => {
                assert_eq!(stats.forward_steps, n);
                assert_eq!(stats.max_stored_states, n + 1);
            }
            Checkpointing::Binomial { snapshots } => {
                assert!(stats.max_stored_states <= snapshots, "{stats:?}");
                assert!(stats.forward_steps >= n, "{stats:?}");
                if snapshots == 1 {
                    // Every state recomputed from x_0: n + Σ_k k steps.
                    assert_eq!(stats.forward_steps, n + n * (n - 1) / 2);
                }
            }
        }
    }

    #[test]
    fn errors_stop_the_sweep() {
        let r = reverse_sweep(
            5,
            &0.0,
            Checkpointing::Binomial { snapshots: 2 },
            |k, x: &f64| Ok(x + k as f64),
            |k, _, _| if k == 2 { Err(k) } else { Ok(()) },
        );
        assert_eq!(r, Err(2));
    }
}
