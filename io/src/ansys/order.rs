//! ANSYS element types → gradfem cells: kinds, node-order permutations (documented in the
//! module doc of [`crate::ansys`]) and the mesh builder shared by the result and archive
//! readers.

use std::collections::{BTreeMap, HashMap};

use gradfem_mesh::{CellId, CellType, Mesh, PhysicalGroup};

use super::SkippedElement;

/// gmsh/gradfem `Hex20` node `i` is ANSYS 20-node brick node `HEX20_FROM_ANSYS[i]`.
pub const HEX20_FROM_ANSYS: [usize; 20] =
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 16, 9, 17, 10, 18, 19, 12, 15, 13, 14];
/// gmsh/gradfem `Tet10` node `i` is ANSYS 10-node tetrahedron node `TET10_FROM_ANSYS[i]`.
pub const TET10_FROM_ANSYS: [usize; 10] = [0, 1, 2, 3, 4, 5, 6, 7, 9, 8];
/// gmsh/gradfem `Tet10` node `i` is node `TET10_FROM_ANSYS_HEX20[i]` of a 20-node brick in its
/// degenerate tetrahedral form (`K = L`, `M = N = O = P`).
pub const TET10_FROM_ANSYS_HEX20: [usize; 10] = [0, 1, 2, 4, 8, 9, 11, 16, 18, 17];

/// The cell family of an ANSYS element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElementKind {
    /// 20-node brick (degenerate tetrahedron supported).
    Solid20,
    /// 10-node tetrahedron.
    Solid10,
    /// 8-node brick (degenerate tetrahedron and prism supported).
    Solid8,
    /// 4-node tetrahedron.
    Solid4,
    /// 8-node quadrilateral (degenerate 6-node triangle supported).
    Quad8,
    /// 4-node quadrilateral (degenerate triangle supported).
    Quad4,
    /// 6-node triangle.
    Tri6,
    /// 2-node line (extra orientation nodes dropped).
    Line2,
    /// 3-node line `I, J, K(mid)`.
    Line3,
    /// 1-node point element.
    Point,
    /// Not mapped to cells (surface effect, contact, target, MPC, unknown...).
    Unsupported,
}

/// The cell family and name of an ANSYS element routine number (186 → `Solid20`,
/// `"SOLID186"`). Unknown numbers give `(Unsupported, "TYPE<n>")`.
pub fn element_kind(ansys_type: u32) -> (ElementKind, String) {
    use ElementKind::*;
    let (kind, prefix) = match ansys_type {
        186 | 90 | 226 | 95 | 231 | 279 | 191 | 122 | 236 => (Solid20, "SOLID"),
        187 | 87 | 227 | 92 | 98 | 123 | 232 | 237 => (Solid10, "SOLID"),
        185 | 70 | 45 | 5 | 69 | 96 | 97 | 278 | 225 => (Solid8, "SOLID"),
        285 => (Solid4, "SOLID"),
        183 | 77 | 82 | 223 | 230 | 121 | 53 => (Quad8, "PLANE"),
        281 => (Quad8, "SHELL"),
        182 | 55 | 42 | 13 | 67 => (Quad4, "PLANE"),
        181 | 131 | 63 | 57 => (Quad4, "SHELL"),
        35 => (Tri6, "PLANE"),
        180 | 1 | 8 | 10 | 11 | 31 | 33 | 34 | 68 => (Line2, "LINK"),
        188 | 3 | 4 => (Line2, "BEAM"),
        14 | 39 | 40 => (Line2, "COMBIN"),
        189 => (Line3, "BEAM"),
        21 | 71 => (Point, "MASS"),
        151..=156 => (Unsupported, "SURF"),
        171..=178 => (Unsupported, "CONTA"),
        169 | 170 => (Unsupported, "TARGE"),
        184 => (Unsupported, "MPC"),
        200 => (Unsupported, "MESH"),
        _ => (Unsupported, "TYPE"),
    };
    (kind, format!("{prefix}{ansys_type}"))
}

/// Turn one ANSYS element (nodes in ANSYS order, 0 = absent) into a gradfem cell: the cell
/// type and the ANSYS node numbers in gradfem order; `Err(reason)` if it cannot be one.
pub(crate) fn to_cell(kind: ElementKind, n: &[u64]) -> Result<(CellType, Vec<u64>), String> {
    use ElementKind::*;
    let need = |k: usize| -> Result<(), String> {
        if n.len() < k || n[..k].contains(&0) {
            Err(format!("needs {k} corner nodes, has {:?}", n))
        } else {
            Ok(())
        }
    };
    let pick = |idx: &[usize]| idx.iter().map(|&i| n[i]).collect::<Vec<u64>>();
    let has_mid = |from: usize, to: usize| n.len() >= to && !n[from..to].contains(&0);
    match kind {
        Solid20 | Solid8 => {
            need(8)?;
            let tet = n[2] == n[3] && n[4] == n[5] && n[5] == n[6] && n[6] == n[7];
            let pyr = !tet && n[4] == n[5] && n[5] == n[6] && n[6] == n[7];
            let prism = !tet && n[2] == n[3] && n[6] == n[7];
            let quad = kind == Solid20 && has_mid(8, 20);
            if pyr {
                Err("pyramid form (gradfem has no pyramid cell)".into())
            } else if tet {
                if quad {
                    Ok((CellType::Tet10, pick(&TET10_FROM_ANSYS_HEX20)))
                } else {
                    Ok((CellType::Tet4, pick(&[0, 1, 2, 4])))
                }
            } else if prism {
                if quad {
                    Err("prism form of a 20-node brick (gradfem has no 15-node prism)".into())
                } else {
                    Ok((CellType::Prism6, pick(&[0, 1, 2, 4, 5, 6])))
                }
            } else if quad {
                Ok((CellType::Hex20, pick(&HEX20_FROM_ANSYS)))
            } else {
                if kind == Solid20 {
                    tracing::warn!("20-node brick without its mid-side nodes: read as Hex8");
                }
                Ok((CellType::Hex8, pick(&[0, 1, 2, 3, 4, 5, 6, 7])))
            }
        }
        Solid10 => {
            need(4)?;
            if has_mid(4, 10) {
                Ok((CellType::Tet10, pick(&TET10_FROM_ANSYS)))
            } else {
                Ok((CellType::Tet4, pick(&[0, 1, 2, 3])))
            }
        }
        Solid4 => {
            need(4)?;
            Ok((CellType::Tet4, pick(&[0, 1, 2, 3])))
        }
        Quad8 | Quad4 => {
            need(4)?;
            let tri = n[2] == n[3];
            let quad = kind == Quad8 && has_mid(4, 8);
            match (tri, quad) {
                (true, true) => Ok((CellType::Tri6, pick(&[0, 1, 2, 4, 5, 7]))),
                (true, false) => Ok((CellType::Tri3, pick(&[0, 1, 2]))),
                (false, true) => Ok((CellType::Quad8, pick(&[0, 1, 2, 3, 4, 5, 6, 7]))),
                (false, false) => Ok((CellType::Quad4, pick(&[0, 1, 2, 3]))),
            }
        }
        Tri6 => {
            need(3)?;
            if has_mid(3, 6) {
                Ok((CellType::Tri6, pick(&[0, 1, 2, 3, 4, 5])))
            } else {
                Ok((CellType::Tri3, pick(&[0, 1, 2])))
            }
        }
        Line2 => {
            need(2)?;
            Ok((CellType::Line2, pick(&[0, 1])))
        }
        Line3 => {
            need(2)?;
            if has_mid(2, 3) {
                Ok((CellType::Line3, pick(&[0, 1, 2])))
            } else {
                Ok((CellType::Line2, pick(&[0, 1])))
            }
        }
        Point => {
            need(1)?;
            Ok((CellType::Point1, pick(&[0])))
        }
        Unsupported => Err("element type not supported by gradfem".into()),
    }
}

/// One element as stored in the file (file order), with the cell it became.
#[derive(Clone, Debug, PartialEq)]
pub struct ElementRecord {
    /// ANSYS element number.
    pub number: u64,
    /// Element type reference number.
    pub type_ref: u32,
    /// ANSYS element routine number (186, ...); 0 if the type reference is not in the table.
    pub ansys_type: u32,
    /// Material number.
    pub material: u32,
    /// Real constant set number.
    pub real: u32,
    /// Section number.
    pub section: u32,
    /// Node numbers in ANSYS element order (0 = absent mid-side node).
    pub nodes: Vec<u64>,
    /// The cell this element became, if any.
    pub cell: Option<CellId>,
}

/// Builds a [`Mesh`] from nodes and ANSYS elements.
pub(crate) struct MeshBuilder {
    pub mesh: Mesh,
    pub index: HashMap<u64, usize>,
    mat_cells: BTreeMap<u32, Vec<CellId>>,
    et_cells: BTreeMap<u32, Vec<CellId>>,
    pub skipped: Vec<SkippedElement>,
    warned_types: Vec<u32>,
}

impl MeshBuilder {
    pub fn new() -> Self {
        MeshBuilder {
            mesh: Mesh::default(),
            index: HashMap::new(),
            mat_cells: BTreeMap::new(),
            et_cells: BTreeMap::new(),
            skipped: Vec::new(),
            warned_types: Vec::new(),
        }
    }

    /// Add a node; `false` if its number is already there (the first one is kept).
    pub fn add_node(&mut self, number: u64, xyz: [f64; 3]) -> bool {
        if self.index.contains_key(&number) {
            return false;
        }
        self.index.insert(number, self.mesh.coords.len());
        self.mesh.coords.push(xyz);
        self.mesh.node_tags.push(number);
        true
    }

    /// Add an element; `Err(node)` if it names a node that does not exist. Elements that
    /// cannot be cells are recorded in `skipped` (with one warning per type).
    pub fn add_element(&mut self, rec: &mut ElementRecord) -> Result<(), u64> {
        let (kind, name) = element_kind(rec.ansys_type);
        let (ct, nodes) = match to_cell(kind, &rec.nodes) {
            Ok(c) => c,
            Err(reason) => {
                if !self.warned_types.contains(&rec.ansys_type) || kind != ElementKind::Unsupported
                {
                    tracing::warn!("ANSYS element {} ({name}) skipped: {reason}", rec.number);
                    self.warned_types.push(rec.ansys_type);
                }
                self.skipped.push(SkippedElement {
                    element: rec.number,
                    ansys_type: rec.ansys_type,
                    reason: format!("{name}: {reason}"),
                });
                return Ok(());
            }
        };
        let mut idx = [0usize; 27];
        for (k, nn) in nodes.iter().enumerate() {
            idx[k] = *self.index.get(nn).ok_or(*nn)?;
        }
        let (b, blk) = self.mesh.block_mut(ct);
        let id = CellId { block: b, index: blk.len() };
        blk.push(&idx[..nodes.len()], rec.number);
        rec.cell = Some(id);
        self.mat_cells.entry(rec.material).or_default().push(id);
        self.et_cells.entry(rec.type_ref).or_default().push(id);
        Ok(())
    }

    /// Finish: material and element-type groups (see the module doc).
    pub fn finish(mut self) -> (Mesh, Vec<SkippedElement>) {
        let mut groups = Vec::new();
        for (prefix, map) in [("material", &self.mat_cells), ("etype", &self.et_cells)] {
            for (n, cells) in map {
                groups.push(make_group(&self.mesh, format!("{prefix}_{n}"), *n as i32, cells));
            }
        }
        self.mesh.groups.extend(groups);
        (self.mesh, self.skipped)
    }
}

/// A group of the cells of the largest dimension among `cells`.
pub(crate) fn make_group(mesh: &Mesh, name: String, tag: i32, cells: &[CellId]) -> PhysicalGroup {
    let dim = cells.iter().map(|&c| mesh.cell_type(c).dim()).max().unwrap_or(0);
    let mut cells: Vec<CellId> =
        cells.iter().copied().filter(|&c| mesh.cell_type(c).dim() == dim).collect();
    cells.sort_unstable();
    cells.dedup();
    PhysicalGroup { name, tag, dim, cells }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex20_permutation_is_a_permutation_and_matches_gmsh_edges() {
        let mut seen = HEX20_FROM_ANSYS;
        seen.sort_unstable();
        assert_eq!(seen, core::array::from_fn(|i| i));
        // ANSYS mid-side k (8..20) lies between these ANSYS corners.
        let ansys_mid = [
            [0, 1],
            [1, 2],
            [2, 3],
            [3, 0],
            [4, 5],
            [5, 6],
            [6, 7],
            [7, 4],
            [0, 4],
            [1, 5],
            [2, 6],
            [3, 7],
        ];
        let edges = CellType::Hex20.edges();
        for (e, [a, b]) in edges.iter().enumerate() {
            let m = HEX20_FROM_ANSYS[8 + e];
            let mut x = ansys_mid[m - 8];
            x.sort_unstable();
            let mut y = [*a, *b];
            y.sort_unstable();
            assert_eq!(x, y, "gmsh mid-edge {e}");
        }
    }

    #[rstest::rstest]
    #[case(ElementKind::Solid8, vec![1, 2, 3, 3, 4, 4, 4, 4], CellType::Tet4, vec![1, 2, 3, 4])]
    #[case(ElementKind::Solid8, vec![1, 2, 3, 3, 4, 5, 6, 6], CellType::Prism6, vec![1, 2, 3, 4, 5, 6])]
    #[case(ElementKind::Quad4, vec![1, 2, 3, 3], CellType::Tri3, vec![1, 2, 3])]
    #[case(ElementKind::Quad8, vec![1, 2, 3, 3, 5, 6, 3, 8], CellType::Tri6, vec![1, 2, 3, 5, 6, 8])]
    #[case(ElementKind::Solid10, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10], CellType::Tet10, vec![1, 2, 3, 4, 5, 6, 7, 8, 10, 9])]
    fn degenerate_forms(
        #[case] kind: ElementKind,
        #[case] nodes: Vec<u64>,
        #[case] ct: CellType,
        #[case] expect: Vec<u64>,
    ) {
        assert_eq!(to_cell(kind, &nodes).unwrap(), (ct, expect));
    }

    #[test]
    fn solid186_tet_form() {
        // I J K K  M M M M  Q R K T  M M M M  Y Z A A
        let n = [1, 2, 3, 3, 4, 4, 4, 4, 5, 6, 3, 7, 4, 4, 4, 4, 8, 9, 10, 10];
        let (ct, c) = to_cell(ElementKind::Solid20, &n).unwrap();
        assert_eq!(ct, CellType::Tet10);
        // gmsh: 0-1 (Q=5), 1-2 (R=6), 2-0 (T=7), 3-0 (Y=8), 3-2 (A=10), 3-1 (Z=9)
        assert_eq!(c, vec![1, 2, 3, 4, 5, 6, 7, 8, 10, 9]);
        let pyr = [1, 2, 3, 4, 5, 5, 5, 5, 6, 7, 8, 9, 5, 5, 5, 5, 10, 11, 12, 13];
        assert!(to_cell(ElementKind::Solid20, &pyr).is_err());
        assert!(to_cell(ElementKind::Unsupported, &[1, 2]).is_err());
    }
}
