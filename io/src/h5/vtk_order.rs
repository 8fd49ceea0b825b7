//! Node orders of XDMF/VTK cells relative to gradfem's (= gmsh's) local order, and the XDMF
//! topology name of each cell type.
//!
//! ParaView's XDMF readers hand the connectivity to VTK unchanged, so XDMF's node order for each
//! topology is VTK's. For a cell type `c`, `vtk_node_order(c)[i]` is the gmsh-local index of the
//! node that VTK expects in position `i`: `vtk_cell[i] = gmsh_cell[order[i]]`.
//!
//! Where the orders differ (VTK definitions from `vtkQuadraticTetra`, `vtkQuadraticHexahedron`,
//! `vtkTriQuadraticHexahedron` and `vtkWedge`):
//!
//! - `Tet10`: VTK's mid-edge nodes are on edges 0-1, 1-2, 2-0, 0-3, 1-3, 2-3; gmsh's last two are
//!   3-2 and 3-1, so positions 8 and 9 swap.
//! - `Hex20`: VTK's mid-edge nodes run over the bottom ring 0-1, 1-2, 2-3, 3-0, the top ring
//!   4-5, 5-6, 6-7, 7-4, then the verticals 0-4, 1-5, 2-6, 3-7; gmsh sorts edges by their first
//!   vertex (0-1, 0-3, 0-4, 1-2, 1-5, 2-3, 2-6, 3-7, 4-5, 4-7, 5-6, 6-7).
//! - `Hex27`: the `Hex20` part as above, then VTK's face centres in the order x-, x+, y-, y+,
//!   z-, z+ (gmsh: z-, y-, x-, x+, y+, z+), then the centre.
//! - `Prism6`: VTK's wedge wants the right-hand normal of triangle (0,1,2) to point *away* from
//!   triangle (3,4,5); gmsh's points towards it, so 1↔2 and 4↔5 swap (otherwise ParaView reports
//!   negative volumes).
//! - All other types (`Point1`, `Line2`, `Line3`, `Tri3`, `Tri6`, `Quad4`, `Quad8`, `Quad9`,
//!   `Tet4`, `Hex8`) have the same order in both.

use gradfem_mesh::cell::CellType;

const ID: [usize; 27] = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
    26,
];
const TET10: [usize; 10] = [0, 1, 2, 3, 4, 5, 6, 7, 9, 8];
const HEX20: [usize; 20] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 13, 9, 16, 18, 19, 17, 10, 12, 14, 15];
const HEX27: [usize; 27] = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 13, 9, 16, 18, 19, 17, 10, 12, 14, 15, 22, 23, 21, 24, 20, 25,
    26,
];
const PRISM6: [usize; 6] = [0, 2, 1, 3, 5, 4];

/// For each position of a VTK/XDMF cell of type `cell_type`, the gradfem (gmsh) local node
/// that goes there: `vtk_cell[i] = gmsh_cell[vtk_node_order(cell_type)[i]]`. The slice has
/// `cell_type.n_nodes()` entries and is the identity for types whose orders agree.
pub fn vtk_node_order(cell_type: CellType) -> &'static [usize] {
    match cell_type {
        CellType::Tet10 => &TET10,
        CellType::Hex20 => &HEX20,
        CellType::Hex27 => &HEX27,
        CellType::Prism6 => &PRISM6,
        other => &ID[..other.n_nodes()],
    }
}

/// The XDMF 3 `TopologyType` of a cell type, and the `NodesPerElement` attribute it needs
/// (only the poly-types `Polyvertex` and `Polyline` need one).
pub fn xdmf_topology(cell_type: CellType) -> (&'static str, Option<usize>) {
    use CellType::*;
    match cell_type {
        Point1 => ("Polyvertex", Some(1)),
        Line2 => ("Polyline", Some(2)),
        Line3 => ("Edge_3", None),
        Tri3 => ("Triangle", None),
        Tri6 => ("Triangle_6", None),
        Quad4 => ("Quadrilateral", None),
        Quad8 => ("Quadrilateral_8", None),
        Quad9 => ("Quadrilateral_9", None),
        Tet4 => ("Tetrahedron", None),
        Tet10 => ("Tetrahedron_10", None),
        Hex8 => ("Hexahedron", None),
        Hex20 => ("Hexahedron_20", None),
        Hex27 => ("Hexahedron_27", None),
        Prism6 => ("Wedge", None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_order_is_a_permutation_of_the_right_length() {
        for c in CellType::ALL {
            let p = vtk_node_order(c);
            assert_eq!(p.len(), c.n_nodes(), "{c}");
            let mut seen = vec![false; p.len()];
            for &i in p {
                assert!(!seen[i], "{c}: {i} twice");
                seen[i] = true;
            }
            // Vertices (except the wedge's orientation swap) stay in place.
            if c != CellType::Prism6 {
                assert!(p[..c.n_vertices()].iter().enumerate().all(|(i, &j)| i == j), "{c}");
            }
        }
    }

    #[test]
    fn hex20_mid_edges_follow_vtk_edges() {
        // VTK's edge list for the quadratic hexahedron, written independently of the table.
        let vtk_edges = [
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
        let gmsh_edges = CellType::Hex20.edges();
        for (k, e) in vtk_edges.iter().enumerate() {
            let g = HEX20[8 + k] - 8;
            let ge = gmsh_edges[g];
            let same = (ge[0] == e[0] && ge[1] == e[1]) || (ge[0] == e[1] && ge[1] == e[0]);
            assert!(same, "vtk mid-edge {} on {e:?} maps to gmsh edge {ge:?}", 8 + k);
        }
    }
}
