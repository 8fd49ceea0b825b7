//! The parameter registry: every quantity that may receive a gradient, under a hierarchical
//! dotted name (`thermal.k.silicon`, `bc.anchor.h`, `load.terminal.current`, `ogden.mu1`,
//! `body.3.mass`).
//!
//! - [`ParamRegistry`] owns the values, bounds, units and descriptions, keeps registration order
//!   and answers names, ids and glob patterns (`thermal.*`).
//! - [`ParamVector`] flattens a selection of parameters into one vector `x` (for optimizers and
//!   Taylor tests): per-parameter offsets, per-entry bounds and names.
//! - [`Gradient`] holds dJ/dp for every registered parameter in the parameter's own shape.
//!
//! Only registered parameters receive gradients; asking for an unknown name is an error that
//! lists the known names and suggests the closest one (Levenshtein distance).
//!
//! ```
//! use gradfem_solvers::params::{ParamRegistry, ParamSpec, ParamVector};
//!
//! let mut reg = ParamRegistry::new();
//! reg.register(ParamSpec::scalar("thermal.k.silicon", 148.0).with_bounds(Some(0.0), None))?;
//! reg.register(ParamSpec::scalar("bc.anchor.h", 1e4).with_doc("film coefficient", "W/(m2 K)"))?;
//! let err = reg.id("thermal.k.silicn").unwrap_err();
//! assert!(err.to_string().contains("did you mean `thermal.k.silicon`"));
//! let pv = ParamVector::new(&reg, &reg.matching("thermal.*"));
//! assert_eq!(pv.gather(&reg), vec![148.0]);
//! pv.scatter(&mut reg, &[150.0])?;
//! assert!(pv.scatter(&mut reg, &[-1.0]).is_err()); // below the lower bound: nothing written
//! assert_eq!(reg.values(reg.id("thermal.k.silicon")?), &[150.0]);
//! # Ok::<(), gradfem_solvers::params::ParamError>(())
//! ```

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// What a parameter's values stand for; decides how many entries it has and how adjoints
/// scatter into it.
///
/// Serialized internally tagged in snake case: `{"type": "scalar"}`,
/// `{"type": "per_element", "group": "domain"}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ParamKind {
    /// One number (a conductivity, a film coefficient, a terminal current).
    Scalar,
    /// One value per element of the named physical group (e.g. a density field for topology
    /// optimization, or a conductivity per element).
    PerElement {
        /// Physical group whose elements the entries follow, in the group's cell order.
        group: String,
    },
    /// Node coordinates (shape parameters), `3 × n_nodes` entries, node-major (`x0 y0 z0 x1 …`).
    NodeCoordinates,
    /// Any other vector (an initial temperature field, nodal loads, …).
    Field,
}

impl fmt::Display for ParamKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamKind::Scalar => write!(f, "scalar"),
            ParamKind::PerElement { group } => write!(f, "per-element ({group})"),
            ParamKind::NodeCoordinates => write!(f, "node coordinates"),
            ParamKind::Field => write!(f, "field"),
        }
    }
}

/// Index of a parameter in its [`ParamRegistry`] (registration order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ParamId(pub usize);

/// Declaration of one parameter: name, kind, current values, optional bounds (applied to every
/// entry), description and units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamSpec {
    /// Hierarchical dotted name, e.g. `thermal.k.silicon`. Segments are non-empty and contain
    /// no whitespace, `*`, `[` or `]`.
    pub name: String,
    /// What the values stand for.
    pub kind: ParamKind,
    /// Current values (one for [`ParamKind::Scalar`]).
    pub values: Vec<f64>,
    /// Lower bound for every entry, if any.
    #[serde(default)]
    pub lower: Option<f64>,
    /// Upper bound for every entry, if any.
    #[serde(default)]
    pub upper: Option<f64>,
    /// Free text shown by the CLI.
    #[serde(default)]
    pub description: String,
    /// Units shown by the CLI (e.g. `W/(m K)`).
    #[serde(default)]
    pub units: String,
}

impl ParamSpec {
    /// A scalar parameter without bounds, description or units.
    pub fn scalar(name: impl Into<String>, value: f64) -> Self {
        Self {
            name: name.into(),
            kind: ParamKind::Scalar,
            values: vec![value],
            lower: None,
            upper: None,
            description: String::new(),
            units: String::new(),
        }
    }

    /// A vector parameter of the given kind without bounds, description or units.
    pub fn vector(name: impl Into<String>, kind: ParamKind, values: Vec<f64>) -> Self {
        Self {
            name: name.into(),
            kind,
            values,
            lower: None,
            upper: None,
            description: String::new(),
            units: String::new(),
        }
    }

    /// Sets the bounds (builder style).
    pub fn with_bounds(mut self, lower: Option<f64>, upper: Option<f64>) -> Self {
        self.lower = lower;
        self.upper = upper;
        self
    }

    /// Sets the description and units (builder style).
    pub fn with_doc(mut self, description: impl Into<String>, units: impl Into<String>) -> Self {
        self.description = description.into();
        self.units = units.into();
        self
    }
}

/// Errors of the parameter registry. Each names the parameter, and the entry where relevant.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ParamError {
    /// A parameter of this name is already registered.
    #[error("parameter `{name}` is already registered")]
    Duplicate {
        /// The name registered twice.
        name: String,
    },
    /// The name is not a valid dotted name.
    #[error("invalid parameter name `{name}`: {reason}")]
    InvalidName {
        /// The offending name.
        name: String,
        /// Why it is invalid.
        reason: String,
    },
    /// No parameter of this name; lists the known ones and the closest by edit distance.
    #[error("{}", unknown_message(.name, .known, .suggestion))]
    Unknown {
        /// The name asked for.
        name: String,
        /// All registered names, in registration order.
        known: Vec<String>,
        /// The closest known name by edit distance, if any is reasonably close.
        suggestion: Option<String>,
    },
    /// An entry is NaN or infinite.
    #[error("parameter `{name}`, entry {index}: value {value} is not finite")]
    NotFinite {
        /// Parameter name.
        name: String,
        /// Entry index within the parameter.
        index: usize,
        /// The value.
        value: f64,
    },
    /// An entry lies outside the parameter's bounds.
    #[error(
        "parameter `{name}`, entry {index}: value {value} outside bounds [{}, {}]",
        fmt_bound(*.lower, f64::NEG_INFINITY),
        fmt_bound(*.upper, f64::INFINITY)
    )]
    OutOfBounds {
        /// Parameter name.
        name: String,
        /// Entry index within the parameter.
        index: usize,
        /// The value.
        value: f64,
        /// Lower bound, if any.
        lower: Option<f64>,
        /// Upper bound, if any.
        upper: Option<f64>,
    },
    /// The bounds themselves are inconsistent (NaN, or lower > upper).
    #[error("parameter `{name}`: invalid bounds lower = {lower:?}, upper = {upper:?}")]
    InvalidBounds {
        /// Parameter name.
        name: String,
        /// Lower bound.
        lower: Option<f64>,
        /// Upper bound.
        upper: Option<f64>,
    },
    /// Wrong number of values.
    #[error("parameter `{name}` ({kind}): expected {expected} values, got {got}")]
    LengthMismatch {
        /// Parameter name.
        name: String,
        /// Parameter kind.
        kind: ParamKind,
        /// Expected number of values.
        expected: usize,
        /// Number given.
        got: usize,
    },
}

fn fmt_bound(b: Option<f64>, default: f64) -> String {
    format!("{}", b.unwrap_or(default))
}

/// At most this many known names are spelled out in an [`ParamError::Unknown`] message.
const MAX_LISTED_NAMES: usize = 50;

fn unknown_message(name: &str, known: &[String], suggestion: &Option<String>) -> String {
    let mut msg = format!("unknown parameter `{name}`");
    if let Some(s) = suggestion {
        msg.push_str(&format!(" (did you mean `{s}`?)"));
    }
    if known.is_empty() {
        msg.push_str("; no parameters are registered");
    } else {
        let listed: Vec<&str> = known.iter().take(MAX_LISTED_NAMES).map(String::as_str).collect();
        msg.push_str(&format!("; known parameters: {}", listed.join(", ")));
        if known.len() > MAX_LISTED_NAMES {
            msg.push_str(&format!(" … and {} more", known.len() - MAX_LISTED_NAMES));
        }
    }
    msg
}

/// Checks a dotted name: non-empty segments, no whitespace or control characters, none of
/// `*`, `[`, `]` (reserved for patterns and entry names).
pub fn validate_name(name: &str) -> Result<(), ParamError> {
    let invalid = |reason: String| ParamError::InvalidName { name: name.to_string(), reason };
    if name.is_empty() {
        return Err(invalid("empty name".into()));
    }
    for (k, seg) in name.split('.').enumerate() {
        if seg.is_empty() {
            return Err(invalid(format!("segment {k} is empty")));
        }
        if let Some(c) = seg
            .chars()
            .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '*' | '[' | ']'))
        {
            return Err(invalid(format!("segment {k} (`{seg}`) contains {c:?}")));
        }
    }
    Ok(())
}

/// Number of entries a parameter of this kind must have, where the kind fixes it.
fn fixed_len(kind: &ParamKind) -> Option<usize> {
    match kind {
        ParamKind::Scalar => Some(1),
        _ => None,
    }
}

fn check_values(
    name: &str,
    lower: Option<f64>,
    upper: Option<f64>,
    values: &[f64],
) -> Result<(), ParamError> {
    for (index, &value) in values.iter().enumerate() {
        if !value.is_finite() {
            return Err(ParamError::NotFinite { name: name.to_string(), index, value });
        }
        if lower.is_some_and(|l| value < l) || upper.is_some_and(|u| value > u) {
            return Err(ParamError::OutOfBounds {
                name: name.to_string(),
                index,
                value,
                lower,
                upper,
            });
        }
    }
    Ok(())
}

/// Levenshtein edit distance on characters (insertions, deletions, substitutions all cost 1).
/// Hand-written: a dozen lines, not worth a dependency.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// Glob match of one segment: `*` matches any run of characters (possibly empty).
fn segment_matches(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Classic greedy wildcard matching with backtracking to the last star.
    let (mut i, mut j) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while j < t.len() {
        if i < p.len() && p[i] != '*' && p[i] == t[j] {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// Glob match of a dotted name against a dotted pattern, segment by segment.
///
/// - a segment `*` matches exactly one segment, and within a segment `*` matches any characters
///   (`k_*` matches `k_si`);
/// - a final segment `*` matches one or more remaining segments (`thermal.*` matches
///   `thermal.k` and `thermal.k.silicon`); `**` as a segment matches zero or more segments;
/// - `*` alone matches every name.
pub fn name_matches(pattern: &str, name: &str) -> bool {
    let p: Vec<&str> = pattern.split('.').collect();
    let n: Vec<&str> = name.split('.').collect();
    fn rec(p: &[&str], n: &[&str]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some((&"**", rest)) => (0..=n.len()).any(|k| rec(rest, &n[k..])),
            Some((&"*", [])) => !n.is_empty(),
            Some((seg, rest)) => !n.is_empty() && segment_matches(seg, n[0]) && rec(rest, &n[1..]),
        }
    }
    rec(&p, &n)
}

/// The registry of parameters, in registration order.
#[derive(Debug, Clone, Default)]
pub struct ParamRegistry {
    specs: Vec<ParamSpec>,
    by_name: HashMap<String, usize>,
}

impl ParamRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a parameter. Errors: invalid name, duplicate name, wrong length for a scalar
    /// (1) or node coordinates (a multiple of 3), empty values, invalid bounds, NaN/infinite values, values outside the bounds.
    pub fn register(&mut self, spec: ParamSpec) -> Result<ParamId, ParamError> {
        validate_name(&spec.name)?;
        if self.by_name.contains_key(&spec.name) {
            return Err(ParamError::Duplicate { name: spec.name });
        }
        let expected = fixed_len(&spec.kind);
        let bad_coordinates =
            spec.kind == ParamKind::NodeCoordinates && !spec.values.len().is_multiple_of(3);
        if expected.is_some_and(|e| e != spec.values.len())
            || spec.values.is_empty()
            || bad_coordinates
        {
            return Err(ParamError::LengthMismatch {
                name: spec.name.clone(),
                kind: spec.kind.clone(),
                expected: expected.unwrap_or(if bad_coordinates {
                    3 * spec.values.len().div_ceil(3)
                } else {
                    1
                }),
                got: spec.values.len(),
            });
        }
        let bad_bound = spec.lower.is_some_and(f64::is_nan)
            || spec.upper.is_some_and(f64::is_nan)
            || matches!((spec.lower, spec.upper), (Some(l), Some(u)) if l > u);
        if bad_bound {
            return Err(ParamError::InvalidBounds {
                name: spec.name.clone(),
                lower: spec.lower,
                upper: spec.upper,
            });
        }
        check_values(&spec.name, spec.lower, spec.upper, &spec.values)?;
        let id = self.specs.len();
        tracing::debug!(name = %spec.name, kind = %spec.kind, len = spec.values.len(), "registered parameter");
        self.by_name.insert(spec.name.clone(), id);
        self.specs.push(spec);
        Ok(ParamId(id))
    }

    /// The id of a parameter, or [`ParamError::Unknown`] listing the known names and the
    /// closest one.
    pub fn id(&self, name: &str) -> Result<ParamId, ParamError> {
        match self.by_name.get(name) {
            Some(&i) => Ok(ParamId(i)),
            None => Err(self.unknown(name)),
        }
    }

    /// The [`ParamError::Unknown`] error for a name (or pattern) that matched nothing.
    fn unknown(&self, name: &str) -> ParamError {
        let suggestion = self
            .specs
            .iter()
            .map(|s| (edit_distance(name, &s.name), &s.name))
            .min_by_key(|(d, _)| *d)
            .filter(|(d, n)| *d <= (name.chars().count().max(n.chars().count()) / 2).max(2))
            .map(|(_, n)| n.clone());
        ParamError::Unknown {
            name: name.to_string(),
            known: self.specs.iter().map(|s| s.name.clone()).collect(),
            suggestion,
        }
    }

    /// Whether a parameter of this name is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// The declaration of a parameter. Panics on an id from another registry that is out of
    /// range (a programming mistake).
    pub fn get(&self, id: ParamId) -> &ParamSpec {
        assert!(
            id.0 < self.specs.len(),
            "ParamId({}) out of range ({} registered)",
            id.0,
            self.len()
        );
        &self.specs[id.0]
    }

    /// Current values of a parameter.
    pub fn values(&self, id: ParamId) -> &[f64] {
        &self.get(id).values
    }

    /// Replaces a parameter's values; length, finiteness and bounds are checked, and nothing is
    /// written on error.
    pub fn set_values(&mut self, id: ParamId, v: &[f64]) -> Result<(), ParamError> {
        self.check_candidate(id, v)?;
        self.specs[id.0].values.copy_from_slice(v);
        Ok(())
    }

    /// Checks what [`set_values`](Self::set_values) would check, without writing.
    pub fn check_candidate(&self, id: ParamId, v: &[f64]) -> Result<(), ParamError> {
        let spec = self.get(id);
        if v.len() != spec.values.len() {
            return Err(ParamError::LengthMismatch {
                name: spec.name.clone(),
                kind: spec.kind.clone(),
                expected: spec.values.len(),
                got: v.len(),
            });
        }
        check_values(&spec.name, spec.lower, spec.upper, v)
    }

    /// Names in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.specs.iter().map(|s| s.name.as_str())
    }

    /// Number of registered parameters.
    pub fn len(&self) -> usize {
        self.specs.len()
    }

    /// Whether nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// Total number of scalar entries over all parameters.
    pub fn total_entries(&self) -> usize {
        self.specs.iter().map(|s| s.values.len()).sum()
    }

    /// All declarations, in registration order (index = [`ParamId`]).
    pub fn specs(&self) -> &[ParamSpec] {
        &self.specs
    }

    /// `(id, spec)` pairs in registration order.
    pub fn iter(&self) -> impl Iterator<Item = (ParamId, &ParamSpec)> {
        self.specs.iter().enumerate().map(|(i, s)| (ParamId(i), s))
    }

    /// Ids of the parameters whose names match a glob pattern (see [`name_matches`]), in
    /// registration order.
    pub fn matching(&self, pattern: &str) -> Vec<ParamId> {
        self.iter().filter(|(_, s)| name_matches(pattern, &s.name)).map(|(id, _)| id).collect()
    }

    /// Like [`matching`](Self::matching), but a pattern that matches nothing is an
    /// [`ParamError::Unknown`] error (for CLI selections, where an empty match is a typo).
    pub fn try_matching(&self, pattern: &str) -> Result<Vec<ParamId>, ParamError> {
        let ids = self.matching(pattern);
        if ids.is_empty() {
            return Err(self.unknown(pattern));
        }
        Ok(ids)
    }
}

/// A selection of parameters flattened into one vector `x` (for optimizers and Taylor tests):
/// parameter `ids[k]` occupies `x[offsets[k]..offsets[k+1]]`.
///
/// The layout is fixed when the vector is made; the registry's parameter lengths must not
/// change afterwards (they cannot through [`ParamRegistry`]'s API).
#[derive(Debug, Clone, PartialEq)]
pub struct ParamVector {
    ids: Vec<ParamId>,
    offsets: Vec<usize>,
    names: Vec<String>,
    scalar: Vec<bool>,
    lower: Vec<f64>,
    upper: Vec<f64>,
}

impl ParamVector {
    /// Lays out the given parameters in the given order. Panics if an id is repeated or out of
    /// range (a programming mistake).
    pub fn new(reg: &ParamRegistry, ids: &[ParamId]) -> Self {
        let mut offsets = Vec::with_capacity(ids.len() + 1);
        offsets.push(0);
        let (mut lower, mut upper) = (Vec::new(), Vec::new());
        let mut names = Vec::with_capacity(ids.len());
        let mut scalar = Vec::with_capacity(ids.len());
        for (k, &id) in ids.iter().enumerate() {
            assert!(!ids[..k].contains(&id), "ParamVector::new: ParamId({}) given twice", id.0);
            let s = reg.get(id);
            let n = s.values.len();
            lower.extend(std::iter::repeat_n(s.lower.unwrap_or(f64::NEG_INFINITY), n));
            upper.extend(std::iter::repeat_n(s.upper.unwrap_or(f64::INFINITY), n));
            offsets.push(offsets[k] + n);
            names.push(s.name.clone());
            scalar.push(s.kind == ParamKind::Scalar);
        }
        Self { ids: ids.to_vec(), offsets, names, scalar, lower, upper }
    }

    /// All registered parameters, in registration order.
    pub fn all(reg: &ParamRegistry) -> Self {
        let ids: Vec<ParamId> = reg.iter().map(|(id, _)| id).collect();
        Self::new(reg, &ids)
    }

    /// Number of entries of the flattened vector.
    pub fn len(&self) -> usize {
        *self.offsets.last().unwrap_or(&0)
    }

    /// Whether the selection has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The selected ids, in layout order.
    pub fn ids(&self) -> &[ParamId] {
        &self.ids
    }

    /// Range of `x` occupied by a parameter, or `None` if it is not selected.
    pub fn range(&self, id: ParamId) -> Option<std::ops::Range<usize>> {
        let k = self.ids.iter().position(|&i| i == id)?;
        Some(self.offsets[k]..self.offsets[k + 1])
    }

    /// Current values of the selection, flattened.
    pub fn gather(&self, reg: &ParamRegistry) -> Vec<f64> {
        let mut x = Vec::with_capacity(self.len());
        for &id in &self.ids {
            x.extend_from_slice(reg.values(id));
        }
        assert_eq!(x.len(), self.len(), "ParamVector::gather: registry layout changed");
        x
    }

    /// Writes `x` back into the registry. Every parameter is checked first (finite, within
    /// bounds); on error nothing is written.
    pub fn scatter(&self, reg: &mut ParamRegistry, x: &[f64]) -> Result<(), ParamError> {
        assert_eq!(
            x.len(),
            self.len(),
            "ParamVector::scatter: x has {} entries, expected {}",
            x.len(),
            self.len()
        );
        for (k, &id) in self.ids.iter().enumerate() {
            reg.check_candidate(id, &x[self.offsets[k]..self.offsets[k + 1]])?;
        }
        for (k, &id) in self.ids.iter().enumerate() {
            reg.specs[id.0].values.copy_from_slice(&x[self.offsets[k]..self.offsets[k + 1]]);
        }
        Ok(())
    }

    /// Per-entry bounds `(lower, upper)`, ±∞ where unbounded.
    pub fn bounds(&self) -> (Vec<f64>, Vec<f64>) {
        (self.lower.clone(), self.upper.clone())
    }

    /// The part of `x` that belongs to a parameter. Panics if `id` is not selected or `x` has
    /// the wrong length.
    pub fn slice<'a>(&self, id: ParamId, x: &'a [f64]) -> &'a [f64] {
        assert_eq!(
            x.len(),
            self.len(),
            "ParamVector::slice: x has {} entries, expected {}",
            x.len(),
            self.len()
        );
        let r = self
            .range(id)
            .unwrap_or_else(|| panic!("ParamId({}) is not in this ParamVector", id.0));
        &x[r]
    }

    /// Name of entry `i` of the flattened vector: the parameter's name for a scalar,
    /// `name[j]` for entry `j` of a vector parameter (`thermal.kappa.domain[17]`).
    pub fn entry_name(&self, i: usize) -> String {
        assert!(i < self.len(), "entry {i} out of range ({} entries)", self.len());
        let k = self.offsets.partition_point(|&o| o <= i) - 1;
        if self.scalar[k] {
            self.names[k].clone()
        } else {
            format!("{}[{}]", self.names[k], i - self.offsets[k])
        }
    }
}

/// Gradient of one objective with respect to every registered parameter, each in its
/// parameter's shape (`get(id).len() == reg.values(id).len()`).
#[derive(Debug, Clone, PartialEq)]
pub struct Gradient {
    parts: Vec<Vec<f64>>,
}

/// One parameter's part of a [`Gradient`], for serialization (JSON output of the CLI).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GradientEntry {
    /// Parameter name.
    pub name: String,
    /// Parameter kind.
    pub kind: ParamKind,
    /// Units of the parameter (the gradient has units of J per these units).
    pub units: String,
    /// dJ/dp, one per parameter entry.
    pub values: Vec<f64>,
}

impl Gradient {
    /// A zero gradient shaped like the registry.
    pub fn zeros(reg: &ParamRegistry) -> Self {
        Self { parts: reg.specs.iter().map(|s| vec![0.0; s.values.len()]).collect() }
    }

    /// dJ/dp for one parameter.
    pub fn get(&self, id: ParamId) -> &[f64] {
        assert!(
            id.0 < self.parts.len(),
            "ParamId({}) out of range ({} parameters)",
            id.0,
            self.parts.len()
        );
        &self.parts[id.0]
    }

    /// Mutable dJ/dp for one parameter (adjoint blocks accumulate into it).
    pub fn get_mut(&mut self, id: ParamId) -> &mut [f64] {
        assert!(
            id.0 < self.parts.len(),
            "ParamId({}) out of range ({} parameters)",
            id.0,
            self.parts.len()
        );
        &mut self.parts[id.0]
    }

    /// dJ/dp for a parameter by name; unknown names give [`ParamError::Unknown`].
    pub fn by_name(&self, reg: &ParamRegistry, name: &str) -> Result<&[f64], ParamError> {
        Ok(self.get(reg.id(name)?))
    }

    /// The gradient restricted to a selection, in the selection's layout.
    pub fn flatten(&self, pv: &ParamVector) -> Vec<f64> {
        let mut g = Vec::with_capacity(pv.len());
        for &id in pv.ids() {
            g.extend_from_slice(self.get(id));
        }
        assert_eq!(g.len(), pv.len(), "Gradient::flatten: layout mismatch");
        g
    }

    /// Adds `a * other` (accumulating several objectives' gradients).
    pub fn add_scaled(&mut self, a: f64, other: &Gradient) {
        assert_eq!(self.parts.len(), other.parts.len(), "Gradient::add_scaled: shapes differ");
        for (p, q) in self.parts.iter_mut().zip(&other.parts) {
            assert_eq!(p.len(), q.len(), "Gradient::add_scaled: shapes differ");
            p.iter_mut().zip(q).for_each(|(x, y)| *x += a * y);
        }
    }

    /// Largest absolute entry over all parameters.
    pub fn norm_inf(&self) -> f64 {
        self.parts.iter().flatten().fold(0.0, |m, v| m.max(v.abs()))
    }

    /// Named entries in registration order, serializable (e.g. with serde_json).
    pub fn to_entries(&self, reg: &ParamRegistry) -> Vec<GradientEntry> {
        reg.iter()
            .map(|(id, s)| GradientEntry {
                name: s.name.clone(),
                kind: s.kind.clone(),
                units: s.units.clone(),
                values: self.get(id).to_vec(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("", "", 0)]
    #[case("abc", "abc", 0)]
    #[case("kitten", "sitting", 3)]
    #[case("thermal.k", "thermal.h", 1)]
    #[case("", "abc", 3)]
    fn levenshtein(#[case] a: &str, #[case] b: &str, #[case] d: usize) {
        assert_eq!(edit_distance(a, b), d);
        assert_eq!(edit_distance(b, a), d);
    }

    #[rstest]
    #[case("*", "a", true)]
    #[case("*", "a.b.c", true)]
    #[case("thermal.*", "thermal.k", true)]
    #[case("thermal.*", "thermal.k.silicon", true)]
    #[case("thermal.*", "thermal", false)]
    #[case("thermal.*", "thermalx.k", false)]
    #[case("thermal.k.*", "thermal.k.silicon", true)]
    #[case("thermal.k.*", "thermal.h.silicon", false)]
    #[case("*.k.*", "thermal.k.si", true)]
    #[case("*.mu1", "ogden.mu1", true)]
    #[case("*.mu1", "a.ogden.mu1", false)]
    #[case("**.mu1", "a.ogden.mu1", true)]
    #[case("ogden.mu*", "ogden.mu2", true)]
    #[case("ogden.mu*", "ogden.alpha1", false)]
    #[case("bc.anchor.h", "bc.anchor.h", true)]
    #[case("bc.anchor.h", "bc.anchor.h2", false)]
    fn glob(#[case] p: &str, #[case] n: &str, #[case] expected: bool) {
        assert_eq!(name_matches(p, n), expected, "pattern {p} name {n}");
    }

    #[rstest]
    #[case("a..b")]
    #[case(".a")]
    #[case("a.")]
    #[case("a b")]
    #[case("a.b\t")]
    #[case("a.*")]
    #[case("a[1]")]
    #[case("")]
    fn invalid_names(#[case] name: &str) {
        assert!(matches!(validate_name(name), Err(ParamError::InvalidName { .. })), "{name}");
    }

    #[test]
    fn entry_names() {
        let mut reg = ParamRegistry::new();
        let a = reg.register(ParamSpec::scalar("thermal.k.silicon", 150.0)).unwrap();
        let b = reg
            .register(ParamSpec::vector(
                "thermal.kappa.domain",
                ParamKind::PerElement { group: "domain".into() },
                vec![1.0; 20],
            ))
            .unwrap();
        let pv = ParamVector::new(&reg, &[a, b]);
        assert_eq!(pv.entry_name(0), "thermal.k.silicon");
        assert_eq!(pv.entry_name(18), "thermal.kappa.domain[17]");
        assert_eq!(pv.entry_name(20), "thermal.kappa.domain[19]");
    }
}
