//! Mesh quality checks: inverted, degenerate and badly shaped cells, reported with the cell's
//! id, original tag and centroid so that the user can find them in their pre-processor.
//!
//! # What is measured (top-dimensional cells only)
//!
//! - **det J** (signed) at the points of the cell's default quadrature rule
//!   ([`crate::quadrature::default_degree`]) and at its nodes ([`signed_jacobians`]). For 3D
//!   cells this is det of the 3×3 Jacobian; for 2D cells in the z = 0 plane (2D meshes) the
//!   x-y block; for 1D cells on the x axis dx/dξ. Cells of a surface or curve mesh embedded in
//!   3D (any node off that plane / axis) have no orientation to check: their unsigned measure
//!   density |∂x/∂ξ × ∂x/∂η| or |∂x/∂ξ| is used, so they can be degenerate but never inverted.
//! - **volume** (area, length) V = Σ_q w_q det J(ξ_q), signed.
//! - **typical volume** V̄ = mean |V| over the checked cells; typical det = V̄ / reference
//!   measure.
//! - **inverted**: min det J < -10⁻¹² × typical det (value: min det J);
//! - **degenerate** (not inverted): |V| ≤ 10⁻¹² V̄ (value: V); degenerate and inverted cells are
//!   not checked further;
//! - **aspect ratio** = longest / shortest edge between vertices (the edges of
//!   [`CellType::edges`] of the linear cell); 1 for an equilateral tet or a cube, ≥ 1 always.
//!   A cheap, scale-free measure that flags needles and slivers-by-edges (it does not flag a
//!   flat "sliver" tet with equal edges; the Jacobian ratio and the degenerate test do);
//! - **Jacobian ratio** = min det J / max |det J| over the sampled points (1 for affine cells,
//!   small for strongly distorted higher-order or hexahedral cells, 0 if all det J vanish).
//!
//! Cells are processed in parallel (rayon); issues come out in `(block, index)` order whatever
//! the thread count.

use std::sync::OnceLock;

use rayon::prelude::*;

use crate::cell::CellType;
use crate::geometry::{det3, jacobian, measure_density};
use crate::mesh::{CellId, Mesh};
use crate::quadrature::{ElementTable, default_degree};
use crate::reference::{reference_measure, reference_nodes};

/// Limits beyond which a cell is reported.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QualityThresholds {
    /// Cells whose longest/shortest edge ratio exceeds this are reported (default 20).
    pub max_aspect_ratio: f64,
    /// Cells whose min det J / max |det J| falls below this are reported (default 0.1).
    pub min_jacobian_ratio: f64,
}

impl Default for QualityThresholds {
    /// 20 for the aspect ratio (well-graded production meshes stay below 10; 20 leaves room for
    /// boundary layers), 0.1 for the Jacobian ratio (a common pre-processor limit).
    fn default() -> Self {
        QualityThresholds { max_aspect_ratio: 20.0, min_jacobian_ratio: 0.1 }
    }
}

/// Kind of a quality issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IssueKind {
    /// Some det J < 0: the cell is turned inside out (nodes in the wrong order or folded).
    Inverted,
    /// The cell has (numerically) no volume.
    Degenerate,
    /// Longest/shortest edge above the threshold.
    BadAspectRatio,
    /// min det J / max |det J| below the threshold.
    BadJacobianRatio,
}

/// One bad cell.
#[derive(Clone, Debug, PartialEq)]
pub struct CellIssue {
    /// The cell's id in the mesh.
    pub cell: CellId,
    /// The cell's original tag (element number in the source file).
    pub tag: u64,
    /// The cell's type.
    pub cell_type: CellType,
    /// Centroid of the cell's vertices.
    pub centroid: [f64; 3],
    /// What is wrong.
    pub kind: IssueKind,
    /// The offending value: min det J, volume, aspect ratio or Jacobian ratio.
    pub value: f64,
}

/// Result of [`Mesh::check`].
#[derive(Clone, Debug, PartialEq)]
pub struct QualityReport {
    /// Number of cells checked (those of dimension `mesh.dim()`).
    pub n_cells: usize,
    /// Issues in `(block, index)` order; a cell may have both an aspect-ratio and a
    /// Jacobian-ratio issue.
    pub issues: Vec<CellIssue>,
    /// Smallest det J over all checked cells and points (`+inf` with no cells).
    pub min_det_j: f64,
    /// Largest aspect ratio over all checked cells (0 with no cells).
    pub max_aspect_ratio: f64,
    /// Smallest Jacobian ratio over all checked cells (`+inf` with no cells).
    pub min_jacobian_ratio: f64,
}

impl QualityReport {
    fn of_kind(&self, kind: IssueKind) -> impl Iterator<Item = &CellIssue> {
        self.issues.iter().filter(move |i| i.kind == kind)
    }

    /// The inverted cells.
    pub fn inverted(&self) -> impl Iterator<Item = &CellIssue> {
        self.of_kind(IssueKind::Inverted)
    }

    /// The degenerate cells.
    pub fn degenerate(&self) -> impl Iterator<Item = &CellIssue> {
        self.of_kind(IssueKind::Degenerate)
    }

    /// The cells with a bad aspect ratio.
    pub fn bad_aspect_ratio(&self) -> impl Iterator<Item = &CellIssue> {
        self.of_kind(IssueKind::BadAspectRatio)
    }

    /// The cells with a bad Jacobian ratio.
    pub fn bad_jacobian_ratio(&self) -> impl Iterator<Item = &CellIssue> {
        self.of_kind(IssueKind::BadJacobianRatio)
    }

    /// No inverted or degenerate cell: the mesh can be used for a solve (shape warnings
    /// allowed).
    pub fn is_usable(&self) -> bool {
        !self.issues.iter().any(|i| matches!(i.kind, IssueKind::Inverted | IssueKind::Degenerate))
    }

    /// No issue at all.
    pub fn is_ok(&self) -> bool {
        self.issues.is_empty()
    }
}

impl std::fmt::Display for QualityReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} cells: {} inverted, {} degenerate, {} bad aspect ratio, {} bad Jacobian ratio; \
             min det J {:.3e}, max aspect ratio {:.3}, min Jacobian ratio {:.3}",
            self.n_cells,
            self.inverted().count(),
            self.degenerate().count(),
            self.bad_aspect_ratio().count(),
            self.bad_jacobian_ratio().count(),
            self.min_det_j,
            self.max_aspect_ratio,
            self.min_jacobian_ratio
        )
    }
}

fn type_index(ct: CellType) -> usize {
    CellType::ALL.iter().position(|&c| c == ct).expect("every cell type is in ALL")
}

/// Reference gradients at the default quadrature points followed by the nodes, with the
/// quadrature weights (0 at the nodes), built once per cell type.
fn sample_table(ct: CellType) -> &'static ElementTable {
    static TABLES: [OnceLock<ElementTable>; 14] = [const { OnceLock::new() }; 14];
    TABLES[type_index(ct)].get_or_init(|| {
        let q = ElementTable::new(ct, default_degree(ct));
        let mut points = q.points;
        let mut weights = q.weights;
        points.extend_from_slice(reference_nodes(ct));
        weights.resize(points.len(), 0.0);
        ElementTable::from_points(ct, default_degree(ct), points, weights)
    })
}

#[inline]
fn signed_det(dim: usize, dn: &[[f64; 3]], coords: &[[f64; 3]]) -> f64 {
    match dim {
        3 => det3(&jacobian(dn, coords)),
        2 if coords.iter().all(|p| p[2] == 0.0) => {
            let j = jacobian(dn, coords);
            j[0][0] * j[1][1] - j[0][1] * j[1][0]
        }
        1 if coords.iter().all(|p| p[1] == 0.0 && p[2] == 0.0) => jacobian(dn, coords)[0][0],
        // Surfaces and curves embedded in 3D have no orientation to check.
        _ => measure_density(dim, dn, coords),
    }
}

/// det J of a cell at the points of its default quadrature rule, then at its nodes (vertices
/// first, in local order). Signed for cells whose dimension is the mesh's embedding (see the
/// module docs).
pub fn signed_jacobians(mesh: &Mesh, id: CellId) -> Vec<f64> {
    let ct = mesh.cell_type(id);
    let coords: Vec<[f64; 3]> = mesh.cell_nodes(id).iter().map(|&n| mesh.coords[n]).collect();
    let t = sample_table(ct);
    (0..t.n_points()).map(|q| signed_det(ct.dim(), t.grad(q), &coords)).collect()
}

#[derive(Clone, Copy, Debug)]
struct Metrics {
    volume: f64,
    min_det: f64,
    jacobian_ratio: f64,
    aspect_ratio: f64,
}

/// The points [`Mesh::check`] samples: [`sample_table`], or the single centroid point for
/// affine cells (`Tet4`, `Tri3`, `Line2`), whose det J is constant.
fn check_table(ct: CellType) -> &'static ElementTable {
    static TABLES: [OnceLock<ElementTable>; 14] = [const { OnceLock::new() }; 14];
    match ct {
        CellType::Tet4 | CellType::Tri3 | CellType::Line2 => {
            TABLES[type_index(ct)].get_or_init(|| ElementTable::new(ct, 1))
        }
        _ => sample_table(ct),
    }
}

fn metrics(mesh: &Mesh, ct: CellType, nodes: &[usize]) -> Metrics {
    let mut buf = [[0.0; 3]; 27];
    for (b, &n) in buf.iter_mut().zip(nodes) {
        *b = mesh.coords[n];
    }
    let coords = &buf[..nodes.len()];
    let t = check_table(ct);
    let (mut volume, mut min_det, mut max_abs) = (0.0, f64::INFINITY, 0.0f64);
    for q in 0..t.n_points() {
        let d = signed_det(ct.dim(), t.grad(q), coords);
        volume += t.weights[q] * d;
        min_det = min_det.min(d);
        max_abs = max_abs.max(d.abs());
    }
    let jacobian_ratio = if max_abs > 0.0 { min_det / max_abs } else { 0.0 };
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for [a, b] in ct.edges() {
        let (p, q) = (coords[*a], coords[*b]);
        let l = ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2)).sqrt();
        lo = lo.min(l);
        hi = hi.max(l);
    }
    let aspect_ratio = if ct.edges().is_empty() {
        1.0
    } else if lo > 0.0 {
        hi / lo
    } else {
        f64::INFINITY
    };
    Metrics { volume, min_det, jacobian_ratio, aspect_ratio }
}

impl Mesh {
    /// Quality check of the top-dimensional cells with [`QualityThresholds::default`]; see
    /// [`crate::quality`].
    pub fn check(&self) -> QualityReport {
        self.check_with(&QualityThresholds::default())
    }

    /// Quality check of the top-dimensional cells with the given thresholds; see
    /// [`crate::quality`] for the definitions.
    pub fn check_with(&self, t: &QualityThresholds) -> QualityReport {
        let dim = self.dim();
        let blocks: Vec<(usize, CellType)> =
            self.blocks_of_dim(dim).map(|(b, blk)| (b, blk.cell_type)).collect();
        let n_cells = self.n_cells_of_dim(dim);
        let empty = QualityReport {
            n_cells,
            issues: Vec::new(),
            min_det_j: f64::INFINITY,
            max_aspect_ratio: 0.0,
            min_jacobian_ratio: f64::INFINITY,
        };
        if n_cells == 0 {
            return empty;
        }
        // Pass 1: statistics and the typical volume.
        let (sum_abs, min_det, max_ar, min_jr) = blocks
            .iter()
            .map(|&(b, ct)| {
                let blk = &self.blocks[b];
                (0..blk.len())
                    .into_par_iter()
                    .map(|i| {
                        let m = metrics(self, ct, blk.cell(i));
                        (m.volume.abs(), m.min_det, m.aspect_ratio, m.jacobian_ratio)
                    })
                    .reduce(
                        || (0.0, f64::INFINITY, 0.0, f64::INFINITY),
                        |a, b| (a.0 + b.0, a.1.min(b.1), a.2.max(b.2), a.3.min(b.3)),
                    )
            })
            .fold((0.0, f64::INFINITY, 0.0f64, f64::INFINITY), |a, b| {
                (a.0 + b.0, a.1.min(b.1), a.2.max(b.2), a.3.min(b.3))
            });
        let typical_volume = sum_abs / n_cells as f64;
        // Pass 2: classify.
        let mut issues = Vec::new();
        for &(b, ct) in &blocks {
            let blk = &self.blocks[b];
            let typical_det = typical_volume / reference_measure(ct);
            let found: Vec<Vec<CellIssue>> = (0..blk.len())
                .into_par_iter()
                .filter_map(|i| {
                    let m = metrics(self, ct, blk.cell(i));
                    let id = CellId { block: b, index: i };
                    let issue = |kind, value| CellIssue {
                        cell: id,
                        tag: blk.tags[i],
                        cell_type: ct,
                        centroid: self.cell_centroid(id),
                        kind,
                        value,
                    };
                    if m.min_det < -1e-12 * typical_det {
                        return Some(vec![issue(IssueKind::Inverted, m.min_det)]);
                    }
                    if m.volume.abs() <= 1e-12 * typical_volume {
                        return Some(vec![issue(IssueKind::Degenerate, m.volume)]);
                    }
                    let mut v = Vec::new();
                    if m.aspect_ratio > t.max_aspect_ratio {
                        v.push(issue(IssueKind::BadAspectRatio, m.aspect_ratio));
                    }
                    if m.jacobian_ratio < t.min_jacobian_ratio {
                        v.push(issue(IssueKind::BadJacobianRatio, m.jacobian_ratio));
                    }
                    (!v.is_empty()).then_some(v)
                })
                .collect();
            issues.extend(found.into_iter().flatten());
        }
        QualityReport {
            n_cells,
            issues,
            min_det_j: min_det,
            max_aspect_ratio: max_ar,
            min_jacobian_ratio: min_jr,
        }
    }
}

/// Straighten the second-order cells of the top dimension whose Jacobian determinant is not
/// positive somewhere (at the points [`signed_jacobians`] samples): their mid-edge nodes move
/// to the midpoints of their edges, and for `Hex27` the face and body centres to the means of
/// their corners, which makes the cell its affine or trilinear self (valid whenever its corners
/// are). Mesh generators sometimes curve a quadratic cell along a curved boundary until it
/// folds; straightening is the usual repair. Nodes shared with neighbours and facets move with
/// them, so the mesh stays conforming (the neighbours' edges become straight too).
///
/// Returns the cells that were straightened, with their tags; cells still invalid afterwards
/// are left for [`Mesh::check`] to report.
pub fn straighten_inverted(mesh: &mut Mesh) -> Vec<(CellId, u64)> {
    let dim = mesh.dim();
    let bad: Vec<CellId> = mesh
        .cells_of_dim(dim)
        .filter(|&id| mesh.cell_type(id).order() == 2)
        .filter(|&id| {
            signed_jacobians(mesh, id)
                .iter()
                .any(|&d| d.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater))
        })
        .collect();
    for &id in &bad {
        let ct = mesh.cell_type(id);
        let nodes = mesh.cell_nodes(id).to_vec();
        let nv = ct.n_vertices();
        let mean = |ids: &[usize]| -> [f64; 3] {
            let mut c = [0.0; 3];
            for &n in ids {
                for k in 0..3 {
                    c[k] += mesh.coords[n][k] / ids.len() as f64;
                }
            }
            c
        };
        let mut moves: Vec<(usize, [f64; 3])> = Vec::new();
        for (k, [a, b]) in ct.edges().iter().enumerate() {
            if nv + k < nodes.len() {
                moves.push((nodes[nv + k], mean(&[nodes[*a], nodes[*b]])));
            }
        }
        if ct == CellType::Hex27 {
            for (f, facet) in ct.facets().iter().enumerate() {
                let corners: Vec<usize> = facet.nodes[..4].iter().map(|&l| nodes[l]).collect();
                moves.push((nodes[20 + f], mean(&corners)));
            }
            moves.push((nodes[26], mean(&nodes[..8])));
        }
        for (n, p) in moves {
            mesh.coords[n] = p;
        }
    }
    bad.into_iter().map(|id| (id, mesh.cell_tag(id))).collect()
}

#[cfg(test)]
mod straighten_tests {
    use super::*;
    use crate::generate::{BoxSpec, box_mesh};

    #[test]
    fn a_folded_tet10_is_straightened_and_others_stay() {
        for ct in [CellType::Tet10, CellType::Hex20, CellType::Hex27] {
            let mut mesh = box_mesh(&BoxSpec {
                origin: [0.0; 3],
                lengths: [1.0; 3],
                divisions: [2, 2, 2],
                cell_type: ct,
            });
            let before = mesh.coords.clone();
            // Push one mid-edge node of the first cell far across the cell: it folds.
            let id = mesh.cells_of_dim(3).next().unwrap();
            let nv = ct.n_vertices();
            let mid = mesh.cell_nodes(id)[nv];
            mesh.coords[mid][2] += 0.9;
            assert!(!mesh.check().is_ok(), "{ct}: the folded cell is reported");
            let fixed = straighten_inverted(&mut mesh);
            // The cells around the moved node fold (one or several of them).
            assert!(!fixed.is_empty(), "{ct}");
            assert!(
                fixed.iter().all(|(c, _)| mesh.cell_nodes(*c).contains(&mid)),
                "{ct}: {fixed:?}"
            );
            assert!(mesh.check().is_ok(), "{ct}: valid after straightening");
            // A straight box is its own straightened form: every node is back.
            for (a, b) in mesh.coords.iter().zip(&before) {
                assert!((0..3).all(|k| (a[k] - b[k]).abs() < 1e-12), "{ct}");
            }
            assert!(straighten_inverted(&mut mesh).is_empty());
        }
    }
}
