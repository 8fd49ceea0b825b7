//! `gradfem mesh-info` (gmsh `.msh`; ANSYS `.rst`, `.rth`, `.rmg`, `.cdb`) and
//! `gradfem mesh-convert`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::ansys_import::AnsysFile;
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
    /// What an ANSYS file adds (result sets, DOFs, element types); absent for gmsh files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ansys: Option<AnsysInfo>,
}

/// One result set of an ANSYS result file.
#[derive(Clone, Debug, Serialize)]
pub struct ResultSetInfo {
    /// 1-based set number (`--set`).
    pub index: usize,
    pub load_step: i32,
    pub substep: i32,
    /// Time (static, transient) or frequency (modal, harmonic).
    pub time_or_frequency: f64,
}

/// One entry of the ANSYS element type table.
#[derive(Clone, Debug, Serialize)]
pub struct ElementTypeReport {
    /// Reference number (`ET,<number>`).
    pub number: u32,
    /// ANSYS element routine number, e.g. 186.
    pub ansys_type: u32,
    /// e.g. `SOLID186`.
    pub name: String,
    /// Elements of this type in the file.
    pub count: usize,
    /// Whether gradfem turns its elements into cells.
    pub supported: bool,
}

/// The ANSYS part of `mesh-info`.
#[derive(Clone, Debug, Serialize)]
pub struct AnsysInfo {
    /// `result` (.rst, .rth, .rmg) or `archive` (.cdb).
    pub kind: String,
    pub result_sets: Vec<ResultSetInfo>,
    pub dof_names: Vec<String>,
    pub element_types: Vec<ElementTypeReport>,
    /// Skipped elements per ANSYS element routine number (`"154": 12`), with the first reason.
    pub skipped: BTreeMap<String, SkippedInfo>,
}

/// Elements of one ANSYS type that did not become cells.
#[derive(Clone, Debug, Serialize)]
pub struct SkippedInfo {
    pub count: usize,
    pub reason: String,
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
            ansys: None,
        }
    }

    /// The report of an ANSYS file: the mesh report plus result sets, DOFs and element types.
    pub fn for_ansys(file: &Path, ansys: &AnsysFile) -> Self {
        let mut report = MeshReport::new(file, ansys.mesh());
        let counts = ansys.element_counts();
        let mut skipped: BTreeMap<String, SkippedInfo> = BTreeMap::new();
        for s in ansys.skipped() {
            skipped
                .entry(s.ansys_type.to_string())
                .or_insert_with(|| SkippedInfo { count: 0, reason: s.reason.clone() })
                .count += 1;
        }
        report.ansys = Some(AnsysInfo {
            kind: match ansys {
                AnsysFile::Result(_) => "result".into(),
                AnsysFile::Archive(_) => "archive".into(),
            },
            result_sets: ansys
                .result_sets()
                .iter()
                .map(|r| ResultSetInfo {
                    index: r.index,
                    load_step: r.load_step,
                    substep: r.substep,
                    time_or_frequency: r.time_or_frequency,
                })
                .collect(),
            dof_names: ansys.dof_names().to_vec(),
            element_types: ansys
                .element_types()
                .iter()
                .map(|t| ElementTypeReport {
                    number: t.number,
                    ansys_type: t.ansys_type,
                    name: t.name.clone(),
                    count: counts.get(&t.number).copied().unwrap_or(0),
                    supported: t.supported,
                })
                .collect(),
            skipped,
        });
        report
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
        if let Some(a) = &self.ansys {
            let _ = writeln!(s, "ANSYS {}: DOFs {}", a.kind, a.dof_names.join(" "));
            let _ = writeln!(s, "element types:");
            for t in &a.element_types {
                let _ = writeln!(
                    s,
                    "  {:<4} {:<10} (type {:<4}) {:>8} elements{}",
                    t.number,
                    t.name,
                    t.ansys_type,
                    t.count,
                    if t.supported { "" } else { "  (skipped)" }
                );
            }
            for (t, k) in &a.skipped {
                let _ = writeln!(s, "  skipped: {} element(s) of type {t}: {}", k.count, k.reason);
            }
            let _ = writeln!(s, "result sets: {}", a.result_sets.len());
            for r in &a.result_sets {
                let _ = writeln!(
                    s,
                    "  set {:<4} load step {:<4} substep {:<4} time/frequency {}",
                    r.index, r.load_step, r.substep, r.time_or_frequency
                );
            }
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
