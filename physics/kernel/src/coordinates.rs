//! Which derivatives with respect to the node coordinates X a second-order product forms, and
//! the part it returns.
//!
//! With `mesh.coordinates` registered a product needs ∂/∂X at every node (three numbers per
//! node, three hyper-dual passes per element node). With morphs alone, X = X₀ + Σₖ (sₖ − sₖ₀) Dₖ,
//! only the contractions Σₙ Dₖ(n)·∂/∂Xₙ are needed: one pass per morph along its field,
//! skipped on elements the morph does not move.

use num_dual::{Dual64, HyperDual64};

/// The coordinate derivatives a product forms.
#[derive(Clone, Copy, Debug, Default)]
pub enum CoordinateRequest<'a> {
    /// None: the nodes are not parameters.
    #[default]
    None,
    /// ∂/∂X at every node.
    Every,
    /// The directional derivatives along the given node fields (one value per field).
    Along(&'a [Vec<[f64; 3]>]),
}

impl CoordinateRequest<'_> {
    /// True for [`CoordinateRequest::None`].
    pub fn is_none(&self) -> bool {
        matches!(self, CoordinateRequest::None)
    }

    /// An element's per-node coordinate derivatives `local` (∂/∂X of its nodes, in their
    /// order) as the picks [`CoordinatePart::add_element`] takes.
    pub fn picks_of(&self, nodes: &[usize], local: &[[f64; 3]]) -> Vec<f64> {
        (0..self.n_picks(nodes))
            .map(|k| {
                local
                    .iter()
                    .enumerate()
                    .map(|(a, v)| (0..3).map(|i| self.seed(k, nodes, a, i) * v[i]).sum::<f64>())
                    .sum()
            })
            .collect()
    }

    /// How many hyper-dual passes (ε₂ picks) an element with these nodes takes.
    pub fn n_picks(&self, nodes: &[usize]) -> usize {
        match self {
            CoordinateRequest::None => 0,
            CoordinateRequest::Every => 3 * nodes.len(),
            CoordinateRequest::Along(fields) => fields.len(),
        }
    }

    /// The ε₂ seed of coordinate `i` of the element's node `a` (global node `nodes[a]`) in
    /// pick `k`.
    pub fn seed(&self, k: usize, nodes: &[usize], a: usize, i: usize) -> f64 {
        match self {
            CoordinateRequest::None => 0.0,
            CoordinateRequest::Every => {
                if k == 3 * a + i {
                    1.0
                } else {
                    0.0
                }
            }
            CoordinateRequest::Along(fields) => fields[k][nodes[a]][i],
        }
    }

    /// The picks that move one of `nodes`, each with its motion of those nodes (per node, in
    /// their order): what a closed form differentiates along, pick by pick.
    pub fn moving_picks(&self, nodes: &[usize]) -> Vec<(usize, Vec<[f64; 3]>)> {
        (0..self.n_picks(nodes))
            .filter(|&k| !self.is_still(k, nodes))
            .map(|k| {
                let mut d = vec![[0.0; 3]; nodes.len()];
                self.pick_motion_into(k, nodes, &mut d);
                (k, d)
            })
            .collect()
    }

    /// The motion of `nodes` (per node, in their order) in pick `k`, into
    /// `out[..nodes.len()]`: [`Self::moving_picks`]' entries without a heap allocation.
    pub fn pick_motion_into(&self, k: usize, nodes: &[usize], out: &mut [[f64; 3]]) {
        for (a, da) in out[..nodes.len()].iter_mut().enumerate() {
            *da = std::array::from_fn(|i| self.seed(k, nodes, a, i));
        }
    }

    /// True when pick `k` moves none of these nodes (its derivative is zero).
    pub fn is_still(&self, k: usize, nodes: &[usize]) -> bool {
        match self {
            CoordinateRequest::None => true,
            CoordinateRequest::Every => false,
            CoordinateRequest::Along(fields) => {
                nodes.iter().all(|&n| fields[k][n].iter().all(|&v| v == 0.0))
            }
        }
    }
}

/// The coordinate part of a product, as requested.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum CoordinatePart {
    /// Not requested.
    #[default]
    None,
    /// Per node.
    Every(Vec<[f64; 3]>),
    /// Per field of [`CoordinateRequest::Along`].
    Along(Vec<f64>),
}

impl CoordinatePart {
    /// The zero part for `request` on `n_nodes` nodes.
    pub fn zeros(request: CoordinateRequest, n_nodes: usize) -> Self {
        match request {
            CoordinateRequest::None => CoordinatePart::None,
            CoordinateRequest::Every => CoordinatePart::Every(vec![[0.0; 3]; n_nodes]),
            CoordinateRequest::Along(fields) => CoordinatePart::Along(vec![0.0; fields.len()]),
        }
    }

    /// Add an element's pick results (in the order of [`CoordinateRequest::seed`]'s picks).
    pub fn add_element(&mut self, nodes: &[usize], picks: &[f64]) {
        match self {
            CoordinatePart::None => {}
            CoordinatePart::Every(x) => {
                for (a, &n) in nodes.iter().enumerate() {
                    for i in 0..3 {
                        x[n][i] += picks[3 * a + i];
                    }
                }
            }
            CoordinatePart::Along(v) => v.iter_mut().zip(picks).for_each(|(s, p)| *s += p),
        }
    }

    /// Add `scale` times another part of the same request.
    pub fn add_scaled(&mut self, other: &CoordinatePart, scale: f64) {
        match (self, other) {
            (CoordinatePart::Every(a), CoordinatePart::Every(b)) => {
                for (x, y) in a.iter_mut().zip(b) {
                    for i in 0..3 {
                        x[i] += scale * y[i];
                    }
                }
            }
            (CoordinatePart::Along(a), CoordinatePart::Along(b)) => {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += scale * y)
            }
            (_, CoordinatePart::None) => {}
            (s, o) => panic!("coordinate parts of different requests: {s:?} and {o:?}"),
        }
    }

    /// The per-node values ([`CoordinatePart::Every`]), if that is what it holds.
    pub fn every(&self) -> Option<&[[f64; 3]]> {
        match self {
            CoordinatePart::Every(x) => Some(x),
            _ => None,
        }
    }
}

/// The gradient of the nodes' motion at a point, Gᵢⱼ = Σ_b δX_b,i ∂N_b/∂xⱼ, from the physical
/// shape-function gradients `g` and the element's nodal `dx`. Moving the nodes changes the
/// shape gradients by δ(∇N_a) = −Gᵀ∇N_a and the volume by δ(det J) = det J tr G: the closed
/// forms of the fields' products along directions that move the nodes are built from these.
pub fn motion_gradient(g: &[[f64; 3]], dx: &[[f64; 3]]) -> [[f64; 3]; 3] {
    let mut m = [[0.0; 3]; 3];
    for (gb, db) in g.iter().zip(dx) {
        for i in 0..3 {
            for j in 0..3 {
                m[i][j] += db[i] * gb[j];
            }
        }
    }
    m
}

/// The product A B of two 3×3 matrices (G_D G_δ: the change of one motion's gradient along
/// another is −G_D G_δ).
pub fn mat_mul(a: &[[f64; 3]; 3], b: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
    std::array::from_fn(|i| std::array::from_fn(|j| (0..3).map(|k| a[i][k] * b[k][j]).sum()))
}

/// The trace of a 3×3 matrix (tr G: the relative change of det J along a motion).
pub fn trace(a: &[[f64; 3]; 3]) -> f64 {
    a[0][0] + a[1][1] + a[2][2]
}

/// (G + Gᵀ) v: the change of a·b for gradients a, b is −aᵀ(G + Gᵀ)b.
pub fn symmetric_times(m: &[[f64; 3]; 3], v: &[f64; 3]) -> [f64; 3] {
    let mut out = [0.0; 3];
    for i in 0..3 {
        for j in 0..3 {
            out[i] += (m[i][j] + m[j][i]) * v[j];
        }
    }
    out
}

/// The motion δX of an element's `nodes` taken from a per-node `dx` (None when `dx` is empty
/// or moves none of them).
pub fn element_motion(nodes: &[usize], dx: &[[f64; 3]]) -> Option<Vec<[f64; 3]>> {
    if dx.is_empty() {
        return None;
    }
    let local: Vec<[f64; 3]> = nodes.iter().map(|&n| dx[n]).collect();
    local.iter().any(|d| d.iter().any(|v| *v != 0.0)).then_some(local)
}

/// An element's node coordinates as dual numbers: ε the motion `dx` of the nodes (per node;
/// empty: they hold still).
pub fn dual_coordinates(coords: &[[f64; 3]], nodes: &[usize], dx: &[[f64; 3]]) -> Vec<[Dual64; 3]> {
    nodes
        .iter()
        .map(|&n| {
            let (p, d) = (coords[n], dx.get(n).copied().unwrap_or([0.0; 3]));
            std::array::from_fn(|i| Dual64::new(p[i], d[i]))
        })
        .collect()
}

/// An element's node coordinates as hyper-dual numbers: ε₁ the motion `dx` (per node; empty:
/// none), ε₂ the coordinate pick `pick` of `request` (`None`: no coordinate is picked).
pub fn hyper_dual_coordinates(
    coords: &[[f64; 3]],
    nodes: &[usize],
    dx: &[[f64; 3]],
    request: CoordinateRequest,
    pick: Option<usize>,
) -> Vec<[HyperDual64; 3]> {
    nodes
        .iter()
        .enumerate()
        .map(|(a, &n)| {
            let (p, d) = (coords[n], dx.get(n).copied().unwrap_or([0.0; 3]));
            std::array::from_fn(|i| {
                let seed = pick.map_or(0.0, |k| request.seed(k, nodes, a, i));
                HyperDual64::new(p[i], d[i], seed, 0.0)
            })
        })
        .collect()
}

/// Seed ε₂ of an element's variables `v` for pick `i`: its other variables come first
/// (`n_other` of them, picked one at a time), then its 3·nn coordinates (picked together by
/// `request`'s pick `i − n_other`). Every ε₂ is cleared first. False when the pick moves none
/// of the element's nodes (its derivative is zero and need not be computed).
pub fn seed_pick(
    v: &mut [HyperDual64],
    i: usize,
    n_other: usize,
    request: CoordinateRequest,
    nodes: &[usize],
) -> bool {
    v.iter_mut().for_each(|x| x.eps2 = 0.0);
    if i < n_other {
        v[i].eps2 = 1.0;
        return true;
    }
    let k = i - n_other;
    if request.is_still(k, nodes) {
        return false;
    }
    for a in 0..nodes.len() {
        for c in 0..3 {
            v[n_other + 3 * a + c].eps2 = request.seed(k, nodes, a, c);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A part along fields is the per-node part contracted with them.
    #[test]
    fn along_is_every_contracted_with_the_fields() {
        let nodes = [2usize, 0];
        let picks_every = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut every = CoordinatePart::zeros(CoordinateRequest::Every, 3);
        every.add_element(&nodes, &picks_every);
        let fields = vec![vec![[1.0, 0.0, 0.0], [0.0; 3], [0.0, 2.0, 1.0]]];
        let req = CoordinateRequest::Along(&fields);
        // The pick along the field seeds x[a][i] = D(nodes[a])[i]: its derivative is the
        // contraction Σ ∂/∂x_ai · D.
        let contraction: f64 = (0..2)
            .flat_map(|a| (0..3).map(move |i| (a, i)))
            .map(|(a, i)| picks_every[3 * a + i] * req.seed(0, &nodes, a, i))
            .sum();
        assert_eq!(contraction, 2.0 * 2.0 + 3.0 * 1.0 + 4.0 * 1.0);
        let x = every.every().unwrap();
        let direct: f64 =
            (0..3).map(|n| (0..3).map(|i| x[n][i] * fields[0][n][i]).sum::<f64>()).sum();
        assert_eq!(direct, contraction);
        assert!(req.is_still(0, &[1]) && !req.is_still(0, &[0, 1]));
        assert_eq!(req.n_picks(&nodes), 1);
        assert_eq!(CoordinateRequest::Every.n_picks(&nodes), 6);
    }
}
