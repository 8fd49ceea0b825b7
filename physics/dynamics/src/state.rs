//! The named state of a system of `n` bodies and its flat layout.
//!
//! | block | shape | flat range |
//! |---|---|---|
//! | `position` r | n × 3 | `[0, 3n)` |
//! | `velocity` v | n × 3 | `[3n, 6n)` |
//! | `orientation` q (unit quaternion `w, x, y, z`) | n × 4 | `[6n, 10n)` |
//! | `angular_velocity` ω (world frame) | n × 3 | `[10n, 13n)` |
//!
//! Adjoints (gradients with respect to a state) use the same type and the same shapes.

use serde::{Deserialize, Serialize};

/// State of `n` bodies (or its adjoint: the gradient of an objective with respect to it, in the
/// same shapes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Centre-of-mass positions r_i.
    pub position: Vec<[f64; 3]>,
    /// Velocities v_i = ṙ_i.
    pub velocity: Vec<[f64; 3]>,
    /// Orientations q_i as unit quaternions `[w, x, y, z]`.
    pub orientation: Vec<[f64; 4]>,
    /// Angular velocities ω_i in the world frame.
    pub angular_velocity: Vec<[f64; 3]>,
}

impl State {
    /// `n` bodies at rest at the origin with identity orientation.
    pub fn at_rest(n: usize) -> Self {
        Self {
            position: vec![[0.0; 3]; n],
            velocity: vec![[0.0; 3]; n],
            orientation: vec![[1.0, 0.0, 0.0, 0.0]; n],
            angular_velocity: vec![[0.0; 3]; n],
        }
    }

    /// All-zero state (the shape of an adjoint).
    pub fn zeros(n: usize) -> Self {
        Self {
            position: vec![[0.0; 3]; n],
            velocity: vec![[0.0; 3]; n],
            orientation: vec![[0.0; 4]; n],
            angular_velocity: vec![[0.0; 3]; n],
        }
    }

    /// Number of bodies. Panics if the blocks disagree (a programming mistake).
    pub fn n_bodies(&self) -> usize {
        let n = self.position.len();
        assert!(
            self.velocity.len() == n
                && self.orientation.len() == n
                && self.angular_velocity.len() == n,
            "State: blocks disagree: position {}, velocity {}, orientation {}, angular_velocity {}",
            n,
            self.velocity.len(),
            self.orientation.len(),
            self.angular_velocity.len()
        );
        n
    }

    /// The flat vector (layout in the module docs).
    pub fn to_flat(&self) -> Vec<f64> {
        let n = self.n_bodies();
        let mut x = Vec::with_capacity(13 * n);
        x.extend(self.position.iter().flatten());
        x.extend(self.velocity.iter().flatten());
        x.extend(self.orientation.iter().flatten());
        x.extend(self.angular_velocity.iter().flatten());
        x
    }

    /// Inverse of [`State::to_flat`]. Panics unless `x.len()` is a multiple of 13.
    pub fn from_flat(x: &[f64]) -> Self {
        assert!(x.len().is_multiple_of(13), "State::from_flat: {} entries, not 13·n", x.len());
        let n = x.len() / 13;
        let l = Layout::new(n);
        Self {
            position: (0..n).map(|i| l.get3(x, l.r(i))).collect(),
            velocity: (0..n).map(|i| l.get3(x, l.v(i))).collect(),
            orientation: (0..n)
                .map(|i| [x[l.q(i)], x[l.q(i) + 1], x[l.q(i) + 2], x[l.q(i) + 3]])
                .collect(),
            angular_velocity: (0..n).map(|i| l.get3(x, l.w(i))).collect(),
        }
    }
}

/// Offsets of each body's blocks in the flat state vector of `n` bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Number of bodies.
    pub n: usize,
}

impl Layout {
    /// Layout of `n` bodies.
    pub fn new(n: usize) -> Self {
        Self { n }
    }
    /// Length of the flat vector, `13 n`.
    pub fn len(&self) -> usize {
        13 * self.n
    }
    /// Whether there are no bodies.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
    /// Offset of r_i.
    pub fn r(&self, i: usize) -> usize {
        3 * i
    }
    /// Offset of v_i.
    pub fn v(&self, i: usize) -> usize {
        3 * self.n + 3 * i
    }
    /// Offset of q_i.
    pub fn q(&self, i: usize) -> usize {
        6 * self.n + 4 * i
    }
    /// Offset of ω_i.
    pub fn w(&self, i: usize) -> usize {
        10 * self.n + 3 * i
    }
    /// Three entries starting at `o`.
    pub fn get3(&self, x: &[f64], o: usize) -> [f64; 3] {
        [x[o], x[o + 1], x[o + 2]]
    }
    /// Body index and field name (`position`, `velocity`, `orientation`,
    /// `angular_velocity`) of flat component `k`.
    pub fn body_field(&self, k: usize) -> (usize, &'static str) {
        let n = self.n;
        if k < 3 * n {
            (k / 3, "position")
        } else if k < 6 * n {
            ((k - 3 * n) / 3, "velocity")
        } else if k < 10 * n {
            ((k - 6 * n) / 4, "orientation")
        } else {
            ((k - 10 * n) / 3, "angular_velocity")
        }
    }

    /// Name of flat component `k`, e.g. `velocity[2].z`.
    pub fn component_name(&self, k: usize) -> String {
        let n = self.n;
        let (block, rel, width, axes): (&str, usize, usize, &[&str]) = if k < 3 * n {
            ("position", k, 3, &["x", "y", "z"])
        } else if k < 6 * n {
            ("velocity", k - 3 * n, 3, &["x", "y", "z"])
        } else if k < 10 * n {
            ("orientation", k - 6 * n, 4, &["w", "x", "y", "z"])
        } else {
            ("angular_velocity", k - 10 * n, 3, &["x", "y", "z"])
        };
        format!("{block}[{}].{}", rel / width, axes[rel % width])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_round_trip_and_names() {
        let mut s = State::at_rest(2);
        s.position[1] = [1.0, 2.0, 3.0];
        s.velocity[0] = [4.0, 5.0, 6.0];
        s.orientation[1] = [0.0, 1.0, 0.0, 0.0];
        s.angular_velocity[1] = [7.0, 8.0, 9.0];
        let x = s.to_flat();
        assert_eq!(x.len(), 26);
        assert_eq!(State::from_flat(&x), s);
        let l = Layout::new(2);
        assert_eq!(x[l.v(0) + 1], 5.0);
        assert_eq!(l.component_name(l.q(1) + 1), "orientation[1].x");
        assert_eq!(l.component_name(l.w(1) + 2), "angular_velocity[1].z");
        assert_eq!(l.body_field(l.q(1) + 3), (1, "orientation"));
        assert_eq!(l.body_field(l.v(1)), (1, "velocity"));
        assert_eq!(l.body_field(l.w(0) + 2), (0, "angular_velocity"));
    }
}
