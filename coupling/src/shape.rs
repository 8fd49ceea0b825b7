//! Shape parameters: node coordinates and morphs.
//!
//! Every field of a problem lives on the same nodes, so the shape is one object shared by all
//! fields. Its parameters are
//!
//! - `mesh.coordinates`: every node coordinate (x, y, z per node) is a parameter;
//! - `morph.<name>`: a scalar design parameter s with a user-given displacement field D of the
//!   nodes (a morph, e.g. one that widens an arm): X = X_base + (s − s₀) D, with s₀ the value
//!   the mesh was made for. Its gradient is the node-coordinate gradient contracted with D:
//!   dJ/ds = Σₙ ∂J/∂Xₙ · Dₙ.
//!
//! With both, X = X_reg + Σₖ (sₖ − sₖ₀) Dₖ, X_reg the registered coordinates. A morph field is
//! given as a piecewise-linear function of one coordinate along a direction (see
//! [`MorphSpec`]) or per node from a CSV file.

use std::path::Path;

use gradfem_kernel::{CoordinatePart, CoordinateRequest};
use gradfem_solvers::params::{Gradient, ParamId, ParamRegistry};
use serde::{Deserialize, Serialize};

/// A morph of the problem file (`[[morph]]`).
///
/// ```toml
/// [[morph]]
/// name = "hot_arm_width"          # registered as morph.hot_arm_width
/// value = 3e-6                    # s₀: the value the mesh was made for
/// axis = "y"                      # D(X) = direction · f(X_axis),
/// knots = [[18e-6, 0.0], [21e-6, 1.0], [24e-6, 1.0], [27e-6, 2.0]]   # f piecewise linear,
/// direction = [0.0, 1.0, 0.0]     # constant beyond the first and last knot
/// # or: file = "morph.csv"        # node tag, dx, dy, dz per line (nodes not listed: 0)
/// ```
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MorphSpec {
    pub name: String,
    /// s₀, the parameter's value for the mesh as given (default 0).
    #[serde(default)]
    pub value: f64,
    /// x, y or z: the coordinate the displacement depends on.
    pub axis: Option<String>,
    /// (coordinate, factor) pairs, coordinates increasing.
    pub knots: Option<Vec<[f64; 2]>>,
    /// The direction of the displacement (not normalised).
    pub direction: Option<[f64; 3]>,
    /// A CSV file of node tag, dx, dy, dz (relative to the problem file).
    pub file: Option<String>,
    /// Optional bounds of s.
    pub bounds: Option<[f64; 2]>,
}

/// A morph ready to use: name, s₀ and the displacement per node.
#[derive(Clone, Debug, PartialEq)]
pub struct Morph {
    pub name: String,
    pub reference: f64,
    pub field: Vec<[f64; 3]>,
    pub bounds: Option<[f64; 2]>,
}

/// Errors in defining a morph.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MorphError {
    #[error("morph '{name}': {message}")]
    Invalid { name: String, message: String },
    /// A morph file's error at a row (`line` ≥ 1), or about the whole file (`line` 0).
    #[error("{file}{}: {message}", if *line > 0 { format!(":{line}:1") } else { String::new() })]
    File { file: String, line: usize, message: String },
}

impl MorphSpec {
    /// The morph's displacement field at the given nodes (`node_tags` name them for a CSV
    /// file; `base` is the directory that relative file names are resolved against).
    pub fn build(
        &self,
        coords: &[[f64; 3]],
        node_tags: &[u64],
        base: &Path,
    ) -> Result<Morph, MorphError> {
        let bad = |m: &str| MorphError::Invalid { name: self.name.clone(), message: m.into() };
        gradfem_solvers::params::validate_name(&format!("morph.{}", self.name))
            .map_err(|e| bad(&e.to_string()))?;
        let field = match (&self.file, &self.axis, &self.knots, &self.direction) {
            (Some(file), None, None, None) => read_morph_csv(&base.join(file), node_tags)?,
            (None, Some(axis), Some(knots), Some(direction)) => {
                let a = match axis.as_str() {
                    "x" => 0,
                    "y" => 1,
                    "z" => 2,
                    other => return Err(bad(&format!("axis '{other}': expected x, y or z"))),
                };
                if knots.is_empty() {
                    return Err(bad("`knots` is empty"));
                }
                if knots.windows(2).any(|w| w[1][0] <= w[0][0]) {
                    return Err(bad("knot coordinates must increase strictly"));
                }
                if knots.iter().flatten().chain(direction).any(|v| !v.is_finite()) {
                    return Err(bad("knots and direction must be finite"));
                }
                coords
                    .iter()
                    .map(|p| {
                        let f = piecewise_linear(knots, p[a]);
                        direction.map(|d| d * f)
                    })
                    .collect()
            }
            _ => {
                return Err(bad(
                    "give either `file` or all of `axis`, `knots` and `direction` (not both)",
                ));
            }
        };
        if let Some([lo, hi]) = self.bounds
            && !(lo <= self.value && self.value <= hi)
        {
            return Err(bad(&format!("value {} lies outside bounds [{lo}, {hi}]", self.value)));
        }
        Ok(Morph { name: self.name.clone(), reference: self.value, field, bounds: self.bounds })
    }
}

/// f(x) for knots (xᵢ, fᵢ): linear between knots, constant beyond the ends.
pub fn piecewise_linear(knots: &[[f64; 2]], x: f64) -> f64 {
    let first = knots[0];
    let last = knots[knots.len() - 1];
    if x <= first[0] {
        return first[1];
    }
    if x >= last[0] {
        return last[1];
    }
    let i = knots.partition_point(|k| k[0] <= x);
    let (a, b) = (knots[i - 1], knots[i]);
    a[1] + (b[1] - a[1]) * (x - a[0]) / (b[0] - a[0])
}

/// Read a morph CSV: `node_tag, dx, dy, dz` rows (a header line and `#` comments skipped) into a
/// displacement per node of `node_tags`; errors name the file and line.
pub fn read_morph_csv(path: &Path, node_tags: &[u64]) -> Result<Vec<[f64; 3]>, MorphError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| MorphError::File {
        file: file.clone(),
        line: 0,
        message: e.to_string(),
    })?;
    let index: std::collections::HashMap<u64, usize> =
        node_tags.iter().enumerate().map(|(i, &t)| (t, i)).collect();
    let mut field = vec![[0.0; 3]; node_tags.len()];
    let mut seen_data = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |message: String| MorphError::File { file: file.clone(), line: i + 1, message };
        let cols: Vec<&str> = line.split(',').map(str::trim).collect();
        let first = !seen_data;
        seen_data = true;
        let parsed = (cols.len() == 4)
            .then(|| {
                let tag = cols[0].parse::<u64>().ok()?;
                let d: Option<Vec<f64>> = cols[1..].iter().map(|c| c.parse().ok()).collect();
                Some((tag, d?))
            })
            .flatten();
        let Some((tag, d)) = parsed else {
            if first {
                continue; // a header line
            }
            return Err(err(format!("expected node tag, dx, dy, dz; got '{line}'")));
        };
        if d.iter().any(|v| !v.is_finite()) {
            return Err(err("displacements must be finite".into()));
        }
        let n = *index.get(&tag).ok_or_else(|| err(format!("no node with tag {tag}")))?;
        field[n] = [d[0], d[1], d[2]];
    }
    Ok(field)
}

/// The shape of a problem: the base coordinates and the registered shape parameters.
#[derive(Clone, Debug, Default)]
pub struct Shape {
    base: Vec<[f64; 3]>,
    coordinates: Option<ParamId>,
    morphs: Vec<Morph>,
    registered: Vec<(ParamId, usize)>,
    /// The fields of the registered morphs, in registration order.
    registered_fields: Vec<Vec<[f64; 3]>>,
}

impl Shape {
    /// The shape of nodes at `base` with no parameters.
    pub fn new(base: Vec<[f64; 3]>) -> Self {
        Shape { base, ..Default::default() }
    }

    /// Make a morph available for registration as `morph.<name>`.
    pub fn define_morph(&mut self, morph: Morph) -> Result<(), MorphError> {
        if morph.field.len() != self.base.len() {
            return Err(MorphError::Invalid {
                name: morph.name,
                message: format!(
                    "field has {} nodes, the mesh {}",
                    morph.field.len(),
                    self.base.len()
                ),
            });
        }
        if self.morphs.iter().any(|m| m.name == morph.name) {
            return Err(MorphError::Invalid { name: morph.name, message: "defined twice".into() });
        }
        self.morphs.push(morph);
        Ok(())
    }

    /// The defined morphs.
    pub fn morphs(&self) -> &[Morph] {
        &self.morphs
    }

    /// The morph named `name` (without the `morph.` prefix).
    pub fn morph_index(&self, name: &str) -> Option<usize> {
        self.morphs.iter().position(|m| m.name == name)
    }

    /// A parameter change that moves the nodes of morph `name` by at most a thousandth of
    /// the bounding-box diagonal (None: unknown morph or a zero field).
    pub fn morph_scale(&self, name: &str) -> Option<f64> {
        let m = &self.morphs[self.morph_index(name)?];
        let largest = m.field.iter().map(|d| (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt());
        let largest = largest.fold(0.0, f64::max);
        let (mut lo, mut hi) = ([f64::INFINITY; 3], [f64::NEG_INFINITY; 3]);
        for p in &self.base {
            for k in 0..3 {
                lo[k] = lo[k].min(p[k]);
                hi[k] = hi[k].max(p[k]);
            }
        }
        let diag = (0..3).map(|k| (hi[k] - lo[k]).powi(2)).sum::<f64>().sqrt();
        (largest > 0.0 && diag.is_finite()).then(|| 1e-3 * diag / largest)
    }

    /// Record that `mesh.coordinates` is registered as `id`.
    pub fn set_coordinates(&mut self, id: ParamId) {
        self.coordinates = Some(id);
    }

    /// Record that morph `k` is registered as `id`.
    pub fn register_morph(&mut self, id: ParamId, k: usize) {
        self.registered.push((id, k));
        self.registered_fields.push(self.morphs[k].field.clone());
    }

    /// The coordinate derivatives second-order products need: every node's when the
    /// coordinates are registered, else the directional ones along the registered morphs'
    /// fields (one pass per morph instead of three per node), else none.
    pub fn coordinate_request(&self) -> CoordinateRequest<'_> {
        if self.coordinates.is_some() {
            CoordinateRequest::Every
        } else if !self.registered.is_empty() {
            CoordinateRequest::Along(&self.registered_fields)
        } else {
            CoordinateRequest::None
        }
    }

    /// Add `scale` times a coordinate part formed for [`coordinate_request`](Self::coordinate_request)
    /// to the shape parameters' gradient.
    pub fn add_part(&self, grad: &mut Gradient, part: &CoordinatePart, scale: f64) {
        match part {
            CoordinatePart::None => {}
            CoordinatePart::Every(dx) => self.add_partials(grad, dx, scale),
            CoordinatePart::Along(values) => {
                for (&(id, _), v) in self.registered.iter().zip(values) {
                    grad.get_mut(id)[0] += scale * v;
                }
            }
        }
    }

    /// True when some shape parameter is registered (coordinate derivatives are needed).
    pub fn is_active(&self) -> bool {
        self.coordinates.is_some() || !self.registered.is_empty()
    }

    /// The node coordinates for the registry's values.
    pub fn coordinates(&self, reg: &ParamRegistry) -> Vec<[f64; 3]> {
        let mut x = match self.coordinates {
            Some(id) => reg.values(id).chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect(),
            None => self.base.clone(),
        };
        for &(id, k) in &self.registered {
            let m = &self.morphs[k];
            let ds = reg.values(id)[0] - m.reference;
            if ds != 0.0 {
                for (p, d) in x.iter_mut().zip(&m.field) {
                    for i in 0..3 {
                        p[i] += ds * d[i];
                    }
                }
            }
        }
        x
    }

    /// δX per node along a parameter direction shaped like the gradient: the registered
    /// coordinates' part plus Σₖ δsₖ Dₖ over the registered morphs (X is affine in the shape
    /// parameters, so this is exact and X has no second derivative). Empty when no shape
    /// parameter is registered.
    pub fn tangent(&self, dir: &Gradient) -> Vec<[f64; 3]> {
        if !self.is_active() {
            return Vec::new();
        }
        let mut dx = match self.coordinates {
            Some(id) => dir.get(id).chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect(),
            None => vec![[0.0; 3]; self.base.len()],
        };
        for &(id, k) in &self.registered {
            let ds = dir.get(id)[0];
            if ds != 0.0 {
                for (p, d) in dx.iter_mut().zip(&self.morphs[k].field) {
                    for i in 0..3 {
                        p[i] += ds * d[i];
                    }
                }
            }
        }
        dx
    }

    /// Add `scale · ∂J/∂X` (per node) to the gradients of the shape parameters.
    pub fn add_partials(&self, grad: &mut Gradient, dx: &[[f64; 3]], scale: f64) {
        if let Some(id) = self.coordinates {
            for (g, d) in grad.get_mut(id).chunks_exact_mut(3).zip(dx) {
                for k in 0..3 {
                    g[k] += scale * d[k];
                }
            }
        }
        for &(id, k) in &self.registered {
            let s: f64 = self.morphs[k]
                .field
                .iter()
                .zip(dx)
                .map(|(f, d)| f[0] * d[0] + f[1] * d[1] + f[2] * d[2])
                .sum();
            grad.get_mut(id)[0] += scale * s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gradfem_solvers::params::ParamSpec;

    #[test]
    fn piecewise_linear_is_constant_beyond_the_ends() {
        let k = [[1.0, 0.0], [2.0, 1.0], [4.0, 3.0]];
        assert_eq!(piecewise_linear(&k, 0.0), 0.0);
        assert_eq!(piecewise_linear(&k, 1.5), 0.5);
        assert_eq!(piecewise_linear(&k, 2.0), 1.0);
        assert_eq!(piecewise_linear(&k, 3.0), 2.0);
        assert_eq!(piecewise_linear(&k, 9.0), 3.0);
    }

    fn spec() -> MorphSpec {
        MorphSpec {
            name: "w".into(),
            value: 2.0,
            axis: Some("x".into()),
            knots: Some(vec![[0.0, 0.0], [1.0, 1.0]]),
            direction: Some([1.0, 0.0, 0.0]),
            file: None,
            bounds: None,
        }
    }

    #[test]
    fn morph_moves_nodes_by_the_parameter_change_and_contracts_the_gradient() {
        let base = vec![[0.0, 0.0, 0.0], [0.5, 1.0, 0.0], [1.0, 0.0, 2.0]];
        let morph = spec().build(&base, &[1, 2, 3], Path::new(".")).unwrap();
        assert_eq!(morph.field, vec![[0.0; 3], [0.5, 0.0, 0.0], [1.0, 0.0, 0.0]]);
        let mut shape = Shape::new(base.clone());
        shape.define_morph(morph).unwrap();
        let mut reg = ParamRegistry::new();
        let id = reg.register(ParamSpec::scalar("morph.w", 2.0)).unwrap();
        shape.register_morph(id, 0);
        assert_eq!(shape.coordinates(&reg), base);
        reg.set_values(id, &[2.5]).unwrap();
        assert_eq!(shape.coordinates(&reg)[2], [1.5, 0.0, 2.0]);
        let mut g = Gradient::zeros(&reg);
        shape.add_partials(&mut g, &[[1.0, 5.0, 5.0], [2.0, 5.0, 5.0], [3.0, 5.0, 5.0]], 2.0);
        assert_eq!(g.get(id), &[2.0 * (0.5 * 2.0 + 1.0 * 3.0)]);
        // The tangent of a direction is the morph's field scaled by δs, plus the coordinates'.
        let mut dir = Gradient::zeros(&reg);
        dir.get_mut(id)[0] = 0.5;
        assert_eq!(shape.tangent(&dir)[2], [0.5, 0.0, 0.0]);
        let xid = reg
            .register(ParamSpec::vector(
                "mesh.coordinates",
                gradfem_solvers::params::ParamKind::NodeCoordinates,
                vec![0.0; 9],
            ))
            .unwrap();
        shape.set_coordinates(xid);
        let mut dir = Gradient::zeros(&reg);
        dir.get_mut(id)[0] = 0.5;
        dir.get_mut(xid).copy_from_slice(&[1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
        assert_eq!(shape.tangent(&dir), vec![[1.0, 2.0, 3.0], [0.25, 0.0, 0.0], [0.5, 0.0, 1.0]]);
        assert!(Shape::new(base).tangent(&dir).is_empty());
    }

    #[test]
    fn bad_morphs_are_named_errors() {
        let base = vec![[0.0; 3]];
        let mut s = spec();
        s.axis = Some("w".into());
        assert!(s.build(&base, &[1], Path::new(".")).unwrap_err().to_string().contains("axis"));
        let mut s = spec();
        s.knots = Some(vec![[1.0, 0.0], [1.0, 1.0]]);
        assert!(s.build(&base, &[1], Path::new(".")).is_err());
        let mut s = spec();
        s.file = Some("m.csv".into());
        assert!(s.build(&base, &[1], Path::new(".")).unwrap_err().to_string().contains("either"));
    }

    #[test]
    fn csv_morph_reads_node_tags_and_names_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.csv");
        std::fs::write(&p, "node,dx,dy,dz\n7,1,2,3\n").unwrap();
        let s = MorphSpec {
            name: "c".into(),
            value: 0.0,
            axis: None,
            knots: None,
            direction: None,
            file: Some("m.csv".into()),
            bounds: None,
        };
        let m = s.build(&[[0.0; 3]; 2], &[5, 7], dir.path()).unwrap();
        assert_eq!(m.field, vec![[0.0; 3], [1.0, 2.0, 3.0]]);
        std::fs::write(&p, "node,dx,dy,dz\n7,1,2,3\n9,1,1,1\n").unwrap();
        let e = s.build(&[[0.0; 3]; 2], &[5, 7], dir.path()).unwrap_err().to_string();
        assert!(e.contains(":3:") && e.contains("tag 9"), "{e}");
    }
}
