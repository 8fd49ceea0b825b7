//! `gradfem mesh-info` and `gradfem mesh-convert`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use gradfem_io::h5::{CellSelection, Results, mesh_group_fields};
use gradfem_mesh::Mesh;
use gradfem_mesh::geometry::group_measure;
use serde::Serialize;

/// One group in the report.
#[derive(Clone, Debug, Serialize)]
pub struct GroupInfo {
    pub name: String,
    pub tag: i32,
    pub dim: usize,
    pub cells: usize,
    /// Volume, area or length.
    pub measure: f64,
}

/// Quality summary of the top-dimension cells.
#[derive(Clone, Debug, Serialize)]
pub struct QualityInfo {
    pub cells_checked: usize,
    pub inverted: usize,
    pub degenerate: usize,
    pub badly_shaped: usize,
    pub min_det_j: f64,
    pub max_aspect_ratio: f64,
    pub min_jacobian_ratio: f64,
    /// The first few issues, as text (cell id, tag, centroid).
    pub first_issues: Vec<String>,
}

/// What `mesh-info` prints.
#[derive(Clone, Debug, Serialize)]
pub struct MeshReport {
    pub file: String,
    pub nodes: usize,
    pub dim: usize,
    pub cells_by_type: BTreeMap<String, usize>,
    pub groups: Vec<GroupInfo>,
    pub bounding_box: [[f64; 3]; 2],
    pub quality: QualityInfo,
}

impl MeshReport {
    /// Gather the report of a mesh.
    pub fn new(file: &Path, mesh: &Mesh) -> Self {
        let mut cells_by_type = BTreeMap::new();
        for b in &mesh.blocks {
            *cells_by_type.entry(b.cell_type.name().to_string()).or_insert(0) += b.len();
        }
        let groups = mesh
            .groups
            .iter()
            .map(|g| GroupInfo {
                name: g.name.clone(),
                tag: g.tag,
                dim: g.dim,
                cells: g.cells.len(),
                measure: group_measure(mesh, g),
            })
            .collect();
        let q = mesh.check();
        use gradfem_mesh::quality::IssueKind;
        let count = |k: fn(&IssueKind) -> bool| q.issues.iter().filter(|i| k(&i.kind)).count();
        let quality = QualityInfo {
            cells_checked: q.n_cells,
            inverted: count(|k| matches!(k, IssueKind::Inverted)),
            degenerate: count(|k| matches!(k, IssueKind::Degenerate)),
            badly_shaped: count(|k| {
                matches!(k, IssueKind::BadAspectRatio | IssueKind::BadJacobianRatio)
            }),
            min_det_j: q.min_det_j,
            max_aspect_ratio: q.max_aspect_ratio,
            min_jacobian_ratio: q.min_jacobian_ratio,
            first_issues: q
                .issues
                .iter()
                .take(10)
                .map(|i| {
                    format!(
                        "{:?} {} cell {} (block {}, index {}) at ({:.6e}, {:.6e}, {:.6e}): {:.4e}",
                        i.kind,
                        i.cell_type,
                        i.tag,
                        i.cell.block,
                        i.cell.index,
                        i.centroid[0],
                        i.centroid[1],
                        i.centroid[2],
                        i.value
                    )
                })
                .collect(),
        };
        MeshReport {
            file: file.display().to_string(),
            nodes: mesh.n_nodes(),
            dim: mesh.dim(),
            cells_by_type,
            groups,
            bounding_box: mesh.bounding_box(),
            quality,
        }
    }

    /// The human-readable form.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{}: {}D mesh, {} nodes", self.file, self.dim, self.nodes);
        let _ = writeln!(s, "cells:");
        for (t, n) in &self.cells_by_type {
            let _ = writeln!(s, "  {t:<8} {n}");
        }
        let _ = writeln!(s, "groups:");
        for g in &self.groups {
            let what = match g.dim {
                3 => "volume",
                2 => "area",
                1 => "length",
                _ => "count",
            };
            let _ = writeln!(
                s,
                "  {:<28} dim {} tag {:<4} {:>8} cells  {what} {:.6e}",
                g.name, g.dim, g.tag, g.cells, g.measure
            );
        }
        let [lo, hi] = self.bounding_box;
        let _ = writeln!(
            s,
            "bounding box: [{:.6e}, {:.6e}] x [{:.6e}, {:.6e}] x [{:.6e}, {:.6e}]",
            lo[0], hi[0], lo[1], hi[1], lo[2], hi[2]
        );
        let q = &self.quality;
        let _ = writeln!(
            s,
            "quality: {} cells, {} inverted, {} degenerate, {} badly shaped; min det J {:.3e}, max aspect ratio {:.3}, min Jacobian ratio {:.3}",
            q.cells_checked,
            q.inverted,
            q.degenerate,
            q.badly_shaped,
            q.min_det_j,
            q.max_aspect_ratio,
            q.min_jacobian_ratio
        );
        for i in &q.first_issues {
            let _ = writeln!(s, "  {i}");
        }
        s
    }
}

/// Write a mesh as HDF5 + XDMF with its group ids as cell data.
pub fn convert(mesh: &Mesh, output: &Path) -> Result<(), gradfem_io::h5::H5Error> {
    let mut results = Results::new(mesh, CellSelection::All);
    for f in mesh_group_fields(mesh, CellSelection::All) {
        results.add_static_cell_field(f);
    }
    results.write(output)
}
