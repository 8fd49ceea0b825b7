//! Cell types, their node counts, gmsh numbers and local topology (faces of volume cells,
//! edges of surface cells).
//!
//! # Node ordering
//!
//! gradfem's local node order **is gmsh's order** for every cell type, so a gmsh file maps to
//! our cells with the identity permutation. Other formats (VTK/XDMF, ANSYS) are converted to this
//! order where they are read or written (see `gradfem_io`). The orders are:
//!
//! - `Tet4`: vertices 0 (0,0,0), 1 (1,0,0), 2 (0,1,0), 3 (0,0,1) of the reference tetrahedron.
//! - `Tet10`: vertices, then mid-edge nodes on edges 0-1, 1-2, 2-0, 3-0, 3-2, 3-1 (gmsh).
//!   VTK's quadratic tet orders the last two the other way round (1-3 before 2-3).
//! - `Hex8`: vertices of [-1,1]³: 0 (-1,-1,-1), 1 (1,-1,-1), 2 (1,1,-1), 3 (-1,1,-1), then 4..7
//!   the same at ζ = +1.
//! - `Hex20`: vertices, then mid-edge nodes on edges 0-1, 0-3, 0-4, 1-2, 1-5, 2-3, 2-6, 3-7, 4-5,
//!   4-7, 5-6, 6-7 (gmsh serendipity order).
//! - `Hex27`: the 20 of `Hex20`, then face centres of faces ζ=-1, η=-1, ξ=-1, ξ=+1, η=+1, ζ=+1,
//!   then the cell centre.
//! - `Prism6`: 0 (0,0,-1), 1 (1,0,-1), 2 (0,1,-1), 3 (0,0,1), 4 (1,0,1), 5 (0,1,1).
//! - `Tri3`: 0 (0,0), 1 (1,0), 2 (0,1); `Tri6` adds mid-edges 0-1, 1-2, 2-0.
//! - `Quad4`: 0 (-1,-1), 1 (1,-1), 2 (1,1), 3 (-1,1); `Quad8` adds mid-edges 0-1, 1-2, 2-3, 3-0;
//!   `Quad9` adds the centre.
//! - `Line2`: 0 (-1), 1 (+1); `Line3` adds the midpoint.

use serde::{Deserialize, Serialize};

/// Every cell type gradfem knows, volume, surface, line and point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum CellType {
    /// 1-node point.
    Point1,
    /// 2-node line.
    Line2,
    /// 3-node quadratic line.
    Line3,
    /// 3-node triangle.
    Tri3,
    /// 6-node quadratic triangle.
    Tri6,
    /// 4-node quadrilateral.
    Quad4,
    /// 8-node serendipity quadrilateral.
    Quad8,
    /// 9-node Lagrange quadrilateral.
    Quad9,
    /// 4-node tetrahedron.
    Tet4,
    /// 10-node quadratic tetrahedron.
    Tet10,
    /// 8-node hexahedron.
    Hex8,
    /// 20-node serendipity hexahedron.
    Hex20,
    /// 27-node Lagrange hexahedron.
    Hex27,
    /// 6-node prism (wedge).
    Prism6,
}

/// One local face (of a volume cell) or edge (of a surface cell): its cell type and local nodes,
/// ordered so that the right-hand normal of the corner nodes points out of the cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalFacet {
    /// The facet's own cell type (`Tri6` for a face of a `Tet10`).
    pub cell_type: CellType,
    /// The cell's local node numbers of the facet's nodes, in the facet's local order.
    pub nodes: &'static [usize],
}

const fn f(cell_type: CellType, nodes: &'static [usize]) -> LocalFacet {
    LocalFacet { cell_type, nodes }
}

use CellType::*;

const TET4_FACES: [LocalFacet; 4] =
    [f(Tri3, &[0, 2, 1]), f(Tri3, &[0, 1, 3]), f(Tri3, &[0, 3, 2]), f(Tri3, &[1, 2, 3])];
const TET10_FACES: [LocalFacet; 4] = [
    f(Tri6, &[0, 2, 1, 6, 5, 4]),
    f(Tri6, &[0, 1, 3, 4, 9, 7]),
    f(Tri6, &[0, 3, 2, 7, 8, 6]),
    f(Tri6, &[1, 2, 3, 5, 8, 9]),
];
const HEX8_FACES: [LocalFacet; 6] = [
    f(Quad4, &[0, 3, 2, 1]),
    f(Quad4, &[0, 1, 5, 4]),
    f(Quad4, &[0, 4, 7, 3]),
    f(Quad4, &[1, 2, 6, 5]),
    f(Quad4, &[2, 3, 7, 6]),
    f(Quad4, &[4, 5, 6, 7]),
];
const HEX20_FACES: [LocalFacet; 6] = [
    f(Quad8, &[0, 3, 2, 1, 9, 13, 11, 8]),
    f(Quad8, &[0, 1, 5, 4, 8, 12, 16, 10]),
    f(Quad8, &[0, 4, 7, 3, 10, 17, 15, 9]),
    f(Quad8, &[1, 2, 6, 5, 11, 14, 18, 12]),
    f(Quad8, &[2, 3, 7, 6, 13, 15, 19, 14]),
    f(Quad8, &[4, 5, 6, 7, 16, 18, 19, 17]),
];
const HEX27_FACES: [LocalFacet; 6] = [
    f(Quad9, &[0, 3, 2, 1, 9, 13, 11, 8, 20]),
    f(Quad9, &[0, 1, 5, 4, 8, 12, 16, 10, 21]),
    f(Quad9, &[0, 4, 7, 3, 10, 17, 15, 9, 22]),
    f(Quad9, &[1, 2, 6, 5, 11, 14, 18, 12, 23]),
    f(Quad9, &[2, 3, 7, 6, 13, 15, 19, 14, 24]),
    f(Quad9, &[4, 5, 6, 7, 16, 18, 19, 17, 25]),
];
const PRISM6_FACES: [LocalFacet; 5] = [
    f(Tri3, &[0, 2, 1]),
    f(Tri3, &[3, 4, 5]),
    f(Quad4, &[0, 1, 4, 3]),
    f(Quad4, &[1, 2, 5, 4]),
    f(Quad4, &[0, 3, 5, 2]),
];
const TRI3_EDGES: [LocalFacet; 3] = [f(Line2, &[0, 1]), f(Line2, &[1, 2]), f(Line2, &[2, 0])];
const TRI6_EDGES: [LocalFacet; 3] =
    [f(Line3, &[0, 1, 3]), f(Line3, &[1, 2, 4]), f(Line3, &[2, 0, 5])];
const QUAD4_EDGES: [LocalFacet; 4] =
    [f(Line2, &[0, 1]), f(Line2, &[1, 2]), f(Line2, &[2, 3]), f(Line2, &[3, 0])];
const QUAD8_EDGES: [LocalFacet; 4] =
    [f(Line3, &[0, 1, 4]), f(Line3, &[1, 2, 5]), f(Line3, &[2, 3, 6]), f(Line3, &[3, 0, 7])];
const LINE2_ENDS: [LocalFacet; 2] = [f(Point1, &[0]), f(Point1, &[1])];

impl CellType {
    /// All cell types, in a fixed order.
    pub const ALL: [CellType; 14] = [
        Point1, Line2, Line3, Tri3, Tri6, Quad4, Quad8, Quad9, Tet4, Tet10, Hex8, Hex20, Hex27,
        Prism6,
    ];

    /// Number of nodes of one cell.
    pub const fn n_nodes(self) -> usize {
        match self {
            Point1 => 1,
            Line2 => 2,
            Line3 => 3,
            Tri3 => 3,
            Tri6 => 6,
            Quad4 => 4,
            Quad8 => 8,
            Quad9 => 9,
            Tet4 => 4,
            Tet10 => 10,
            Hex8 => 8,
            Hex20 => 20,
            Hex27 => 27,
            Prism6 => 6,
        }
    }

    /// Number of vertex (corner) nodes; they come first in the local order.
    pub const fn n_vertices(self) -> usize {
        match self {
            Point1 => 1,
            Line2 | Line3 => 2,
            Tri3 | Tri6 => 3,
            Quad4 | Quad8 | Quad9 => 4,
            Tet4 | Tet10 => 4,
            Hex8 | Hex20 | Hex27 => 8,
            Prism6 => 6,
        }
    }

    /// Topological dimension (0 point, 1 line, 2 surface, 3 volume).
    pub const fn dim(self) -> usize {
        match self {
            Point1 => 0,
            Line2 | Line3 => 1,
            Tri3 | Tri6 | Quad4 | Quad8 | Quad9 => 2,
            Tet4 | Tet10 | Hex8 | Hex20 | Hex27 | Prism6 => 3,
        }
    }

    /// Polynomial order of the geometric interpolation (1 linear, 2 quadratic).
    pub const fn order(self) -> usize {
        match self {
            Point1 | Line2 | Tri3 | Quad4 | Tet4 | Hex8 | Prism6 => 1,
            Line3 | Tri6 | Quad8 | Quad9 | Tet10 | Hex20 | Hex27 => 2,
        }
    }

    /// gmsh element type number.
    pub const fn gmsh_type(self) -> i32 {
        match self {
            Point1 => 15,
            Line2 => 1,
            Line3 => 8,
            Tri3 => 2,
            Tri6 => 9,
            Quad4 => 3,
            Quad8 => 16,
            Quad9 => 10,
            Tet4 => 4,
            Tet10 => 11,
            Hex8 => 5,
            Hex20 => 17,
            Hex27 => 12,
            Prism6 => 6,
        }
    }

    /// The cell type of a gmsh element type number, if gradfem supports it.
    pub fn from_gmsh(t: i32) -> Option<CellType> {
        CellType::ALL.into_iter().find(|c| c.gmsh_type() == t)
    }

    /// Short lower-case name (`"tet10"`), used in files, logs and the CLI.
    pub const fn name(self) -> &'static str {
        match self {
            Point1 => "point1",
            Line2 => "line2",
            Line3 => "line3",
            Tri3 => "tri3",
            Tri6 => "tri6",
            Quad4 => "quad4",
            Quad8 => "quad8",
            Quad9 => "quad9",
            Tet4 => "tet4",
            Tet10 => "tet10",
            Hex8 => "hex8",
            Hex20 => "hex20",
            Hex27 => "hex27",
            Prism6 => "prism6",
        }
    }

    /// Parse a name written by [`CellType::name`].
    pub fn from_name(s: &str) -> Option<CellType> {
        CellType::ALL.into_iter().find(|c| c.name() == s)
    }

    /// The facets of one cell: faces of a volume cell, edges of a surface cell, end points of a
    /// line, with outward orientation (right-hand normal of the corners points out of the cell
    /// for faces; for edges of a counter-clockwise 2D cell, the outward normal is the edge
    /// direction turned clockwise).
    pub fn facets(self) -> &'static [LocalFacet] {
        match self {
            Point1 => &[],
            Line2 | Line3 => &LINE2_ENDS,
            Tri3 => &TRI3_EDGES,
            Tri6 => &TRI6_EDGES,
            Quad4 => &QUAD4_EDGES,
            Quad8 | Quad9 => &QUAD8_EDGES,
            Tet4 => &TET4_FACES,
            Tet10 => &TET10_FACES,
            Hex8 => &HEX8_FACES,
            Hex20 => &HEX20_FACES,
            Hex27 => &HEX27_FACES,
            Prism6 => &PRISM6_FACES,
        }
    }

    /// The linear (vertex-only) cell of the same shape: `Tet10 → Tet4`, `Hex27 → Hex8`.
    pub const fn linear(self) -> CellType {
        match self {
            Line3 => Line2,
            Tri6 => Tri3,
            Quad8 | Quad9 => Quad4,
            Tet10 => Tet4,
            Hex20 | Hex27 => Hex8,
            other => other,
        }
    }

    /// The local node pairs of the edges that carry a mid-edge node in the second-order form
    /// of this cell, in the order of those mid-edge nodes (for `Tet4` this is the `Tet10`
    /// mid-edge order, for `Hex8` the `Hex20` order).
    pub fn edges(self) -> &'static [[usize; 2]] {
        match self.linear() {
            Line2 => &[[0, 1]],
            Tri3 => &[[0, 1], [1, 2], [2, 0]],
            Quad4 => &[[0, 1], [1, 2], [2, 3], [3, 0]],
            Tet4 => &[[0, 1], [1, 2], [2, 0], [3, 0], [3, 2], [3, 1]],
            Hex8 => &[
                [0, 1],
                [0, 3],
                [0, 4],
                [1, 2],
                [1, 5],
                [2, 3],
                [2, 6],
                [3, 7],
                [4, 5],
                [4, 7],
                [5, 6],
                [6, 7],
            ],
            Prism6 => &[[0, 1], [0, 2], [0, 3], [1, 2], [1, 4], [2, 5], [3, 4], [3, 5], [4, 5]],
            _ => &[],
        }
    }
}

impl std::fmt::Display for CellType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gmsh_numbers_round_trip() {
        for c in CellType::ALL {
            assert_eq!(CellType::from_gmsh(c.gmsh_type()), Some(c));
            assert_eq!(CellType::from_name(c.name()), Some(c));
        }
        assert_eq!(CellType::from_gmsh(7), None);
    }

    #[test]
    fn facets_have_the_right_node_counts() {
        for c in CellType::ALL {
            for facet in c.facets() {
                assert_eq!(facet.nodes.len(), facet.cell_type.n_nodes(), "{c}");
                assert_eq!(facet.cell_type.dim() + 1, c.dim(), "{c}");
                assert!(facet.nodes.iter().all(|&n| n < c.n_nodes()));
            }
        }
    }
}
