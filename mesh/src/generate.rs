//! Structured mesh generators (boxes and rectangles) and the conversion of a linear mesh to
//! second order.
//!
//! # Numbering of [`box_mesh`]
//!
//! The vertex grid has `(nx+1)(ny+1)(nz+1)` nodes; the node at grid position (i, j, k) has index
//! `i + (nx+1)·(j + (ny+1)·k)` and coordinates `origin + (i·lx/nx, j·ly/ny, k·lz/nz)`. Cells are
//! numbered cube by cube with i fastest, then j, then k; a cube gives one hexahedron
//! (vertices in gmsh order) or six tetrahedra. The tetrahedra are the Kuhn (Freudenthal) split
//! along the cube's main diagonal from its (0,0,0) to its (1,1,1) corner: one tet per
//! permutation π of the axes, with vertices 0, e_π0, e_π0 + e_π1, (1,1,1), the last two swapped
//! for odd permutations so that every tet is positively oriented. Every cube uses the same
//! diagonal direction, so the split is conforming (each square face is cut along its diagonal
//! from its lowest to its highest corner).
//!
//! The generated mesh has block 0 = volume cells, block 1 = boundary facets (`Tri3` or `Quad4`,
//! node order giving the outward normal), the volume group `"domain"` (dim 3, tag 1) and the
//! surface groups `"xmin"`, `"xmax"`, `"ymin"`, `"ymax"`, `"zmin"`, `"zmax"` (dim 2, tags 1..=6).
//! Node tags are 1-based positions; cell tags are 1-based and unique over the mesh (volume cells
//! 1..=n, then the facets), so the volume cell with index i has tag i + 1.
//! Second-order box meshes are made by [`to_second_order`] from the linear one.

use std::collections::HashMap;

use rayon::prelude::*;

use crate::cell::CellType;
use crate::mesh::{CellBlock, CellId, Mesh, PhysicalGroup};

/// A box `[origin, origin + lengths]` cut into `divisions` cubes of `cell_type` cells.
#[derive(Clone, Debug, PartialEq)]
pub struct BoxSpec {
    /// The lowest corner.
    pub origin: [f64; 3],
    /// Side lengths (positive).
    pub lengths: [f64; 3],
    /// Number of cubes along x, y, z (positive).
    pub divisions: [usize; 3],
    /// One of `Tet4`, `Tet10`, `Hex8`, `Hex20`, `Hex27`.
    pub cell_type: CellType,
}

impl BoxSpec {
    /// The sizes of the mesh [`box_mesh`] makes, checked against overflow: `(nodes, cells)`,
    /// `None` when a count does not fit a `usize`. The cell count is exact, so is the node
    /// count of linear cells and Hex27; for Tet10 and Hex20 the node count is an upper bound
    /// (that of Hex27: every mid-edge, mid-face and centre node).
    pub fn size_bound(&self) -> Option<(usize, usize)> {
        use CellType::*;
        let [nx, ny, nz] = self.divisions;
        let cubes = nx.checked_mul(ny)?.checked_mul(nz)?;
        let (per_cube, order) = match self.cell_type {
            Tet4 => (6, 1),
            Tet10 => (6, 2),
            Hex8 => (1, 1),
            _ => (1, 2),
        };
        let points = |n: usize| n.checked_mul(order)?.checked_add(1);
        let nodes = points(nx)?.checked_mul(points(ny)?)?.checked_mul(points(nz)?)?;
        Some((nodes, cubes.checked_mul(per_cube)?))
    }

    /// The unit cube `[0,1]³` with `n` divisions per side.
    pub fn unit_cube(n: usize, cell_type: CellType) -> Self {
        BoxSpec { origin: [0.0; 3], lengths: [1.0; 3], divisions: [n; 3], cell_type }
    }
}

/// Corner of the unit cube as bits (bit d set = coordinate d is 1).
type Corner = usize;

/// The six Kuhn tets of a cube, as cube corners, positively oriented.
const KUHN_TETS: [[Corner; 4]; 6] = [
    [0b000, 0b001, 0b011, 0b111], // axes x, y, z (even)
    [0b000, 0b001, 0b111, 0b101], // x, z, y (odd: last two swapped)
    [0b000, 0b010, 0b111, 0b011], // y, x, z (odd)
    [0b000, 0b010, 0b110, 0b111], // y, z, x (even)
    [0b000, 0b100, 0b101, 0b111], // z, x, y (even)
    [0b000, 0b100, 0b111, 0b110], // z, y, x (odd)
];

/// The hexahedron of a cube, as cube corners, in gmsh order.
const HEX_CORNERS: [[Corner; 8]; 1] = [[0b000, 0b001, 0b011, 0b010, 0b100, 0b101, 0b111, 0b110]];

/// The side names of the box, in group-tag order.
pub const BOX_SIDES: [&str; 6] = ["xmin", "xmax", "ymin", "ymax", "zmin", "zmax"];

/// A structured box mesh; see the module docs for numbering, groups and tags.
///
/// # Panics
/// If `spec.cell_type` is not a tet or hex type, a division is 0, or the sizes overflow
/// ([`BoxSpec::size_bound`] is `None`): the caller's mistakes.
pub fn box_mesh(spec: &BoxSpec) -> Mesh {
    use CellType::*;
    let linear = match spec.cell_type {
        Tet4 | Tet10 => Tet4,
        Hex8 | Hex20 | Hex27 => Hex8,
        other => panic!("box_mesh makes tet or hex cells, not {other}"),
    };
    let [nx, ny, nz] = spec.divisions;
    assert!(
        nx > 0 && ny > 0 && nz > 0,
        "box_mesh: divisions must be positive, got {:?}",
        spec.divisions
    );
    assert!(
        spec.size_bound().is_some(),
        "box_mesh: divisions {:?} give more nodes or cells than a usize counts (check \
         BoxSpec::size_bound first)",
        spec.divisions
    );
    let (sx, sy) = (nx + 1, (nx + 1) * (ny + 1));
    let n_nodes = sy * (nz + 1);
    let mut coords = vec![[0.0; 3]; n_nodes];
    let step = [0, 1, 2].map(|d| spec.lengths[d] / spec.divisions[d] as f64);
    coords.par_chunks_mut(sy).enumerate().for_each(|(k, plane)| {
        for j in 0..=ny {
            for i in 0..=nx {
                plane[i + sx * j] = [
                    spec.origin[0] + i as f64 * step[0],
                    spec.origin[1] + j as f64 * step[1],
                    spec.origin[2] + k as f64 * step[2],
                ];
            }
        }
    });
    let corner = move |i: usize, j: usize, k: usize, c: Corner| {
        (i + (c & 1)) + sx * (j + ((c >> 1) & 1)) + sy * (k + ((c >> 2) & 1))
    };
    let cells: &[&[Corner]] = if linear == Tet4 {
        &[&KUHN_TETS[0], &KUHN_TETS[1], &KUHN_TETS[2], &KUHN_TETS[3], &KUHN_TETS[4], &KUHN_TETS[5]]
    } else {
        &[&HEX_CORNERS[0]]
    };
    let nv = linear.n_nodes();
    let per_cube = cells.len() * nv;
    let n_cubes = nx * ny * nz;
    let mut connectivity = vec![0usize; n_cubes * per_cube];
    connectivity.par_chunks_mut(per_cube).enumerate().for_each(|(c, out)| {
        let (i, j, k) = (c % nx, (c / nx) % ny, c / (nx * ny));
        for (t, cell) in cells.iter().enumerate() {
            for (a, &cr) in cell.iter().enumerate() {
                out[t * nv + a] = corner(i, j, k, cr);
            }
        }
    });
    let n_vol = n_cubes * cells.len();
    let volume = CellBlock { cell_type: linear, connectivity, tags: (1..=n_vol as u64).collect() };

    // Boundary facets: the faces of the cells of boundary cubes that lie on each side.
    let facet_type = linear.facets()[0].cell_type;
    let mut facets = CellBlock::new(facet_type);
    let mut groups = vec![PhysicalGroup {
        name: "domain".into(),
        tag: 1,
        dim: 3,
        cells: (0..n_vol).map(|index| CellId { block: 0, index }).collect(),
    }];
    let mut next_tag = n_vol as u64 + 1;
    for (s, name) in BOX_SIDES.iter().enumerate() {
        let (d, hi) = (s / 2, s % 2 == 1);
        let start = facets.len();
        let range = |axis: usize| {
            let n = spec.divisions[axis];
            if axis != d {
                0..n
            } else if hi {
                n - 1..n
            } else {
                0..1
            }
        };
        let mut buf = Vec::with_capacity(4);
        for k in range(2) {
            for j in range(1) {
                for i in range(0) {
                    for cell in cells {
                        for lf in linear.facets() {
                            let on_side = lf.nodes.iter().all(|&l| ((cell[l] >> d) & 1 == 1) == hi);
                            if on_side {
                                buf.clear();
                                buf.extend(lf.nodes.iter().map(|&l| corner(i, j, k, cell[l])));
                                facets.push(&buf, next_tag);
                                next_tag += 1;
                            }
                        }
                    }
                }
            }
        }
        groups.push(PhysicalGroup {
            name: (*name).into(),
            tag: s as i32 + 1,
            dim: 2,
            cells: (start..facets.len()).map(|index| CellId { block: 1, index }).collect(),
        });
    }
    let mesh = Mesh {
        coords,
        node_tags: (1..=n_nodes as u64).collect(),
        blocks: vec![volume, facets],
        groups,
    };
    match spec.cell_type {
        Tet10 | Hex20 => to_second_order(&mesh, false),
        Hex27 => to_second_order(&mesh, true),
        _ => mesh,
    }
}

/// A structured rectangle mesh in the z = 0 plane: `Quad4` cells, or `Tri3` cells (two per
/// square, cut along the diagonal from its lower-left to its upper-right corner, both
/// counter-clockwise). Node (i, j) has index `i + (nx+1)·j`. Block 0 = cells (tags 1..=n),
/// block 1 = `Line2` boundary edges oriented counter-clockwise around the rectangle (so the
/// edge direction turned clockwise is the outward normal), tags continuing after the cells.
/// Groups: `"domain"` (dim 2, tag 1), `"xmin"`, `"xmax"`, `"ymin"`, `"ymax"` (dim 1, tags 1..=4).
///
/// # Panics
/// If `cell_type` is not `Quad4` or `Tri3`, or a division is 0.
pub fn rectangle_mesh(
    origin: [f64; 2],
    lengths: [f64; 2],
    divisions: [usize; 2],
    cell_type: CellType,
) -> Mesh {
    assert!(
        matches!(cell_type, CellType::Quad4 | CellType::Tri3),
        "rectangle_mesh makes quad4 or tri3 cells, not {cell_type}"
    );
    let [nx, ny] = divisions;
    assert!(nx > 0 && ny > 0, "rectangle_mesh: divisions must be positive, got {divisions:?}");
    let v = |i: usize, j: usize| i + (nx + 1) * j;
    let mut coords = Vec::with_capacity((nx + 1) * (ny + 1));
    for j in 0..=ny {
        for i in 0..=nx {
            coords.push([
                origin[0] + lengths[0] * i as f64 / nx as f64,
                origin[1] + lengths[1] * j as f64 / ny as f64,
                0.0,
            ]);
        }
    }
    let mut cells = CellBlock::new(cell_type);
    let mut tag = 1;
    for j in 0..ny {
        for i in 0..nx {
            let (a, b, c, d) = (v(i, j), v(i + 1, j), v(i + 1, j + 1), v(i, j + 1));
            if cell_type == CellType::Quad4 {
                cells.push(&[a, b, c, d], tag);
                tag += 1;
            } else {
                cells.push(&[a, b, c], tag);
                cells.push(&[a, c, d], tag + 1);
                tag += 2;
            }
        }
    }
    let mut edges = CellBlock::new(CellType::Line2);
    let mut groups = vec![PhysicalGroup {
        name: "domain".into(),
        tag: 1,
        dim: 2,
        cells: (0..cells.len()).map(|index| CellId { block: 0, index }).collect(),
    }];
    let sides: [(&str, Vec<[usize; 2]>); 4] = [
        ("xmin", (0..ny).map(|j| [v(0, j + 1), v(0, j)]).collect()),
        ("xmax", (0..ny).map(|j| [v(nx, j), v(nx, j + 1)]).collect()),
        ("ymin", (0..nx).map(|i| [v(i, 0), v(i + 1, 0)]).collect()),
        ("ymax", (0..nx).map(|i| [v(i + 1, ny), v(i, ny)]).collect()),
    ];
    for (s, (name, list)) in sides.into_iter().enumerate() {
        let start = edges.len();
        for e in list {
            edges.push(&e, tag);
            tag += 1;
        }
        groups.push(PhysicalGroup {
            name: name.into(),
            tag: s as i32 + 1,
            dim: 1,
            cells: (start..edges.len()).map(|index| CellId { block: 1, index }).collect(),
        });
    }
    let n = coords.len();
    Mesh { coords, node_tags: (1..=n as u64).collect(), blocks: vec![cells, edges], groups }
}

/// Shared creation of mid-edge and mid-face nodes.
struct MidNodes<'a> {
    coords: &'a mut Vec<[f64; 3]>,
    node_tags: &'a mut Vec<u64>,
    next_tag: u64,
    edges: HashMap<[usize; 2], usize>,
    faces: HashMap<[usize; 4], usize>,
}

impl MidNodes<'_> {
    fn new_node(&mut self, vertices: &[usize]) -> usize {
        let mut c = [0.0; 3];
        for &v in vertices {
            for (ck, xk) in c.iter_mut().zip(self.coords[v]) {
                *ck += xk;
            }
        }
        self.coords.push(c.map(|x| x / vertices.len() as f64));
        self.node_tags.push(self.next_tag);
        self.next_tag += 1;
        self.coords.len() - 1
    }

    fn edge(&mut self, a: usize, b: usize) -> usize {
        let key = [a.min(b), a.max(b)];
        if let Some(&n) = self.edges.get(&key) {
            return n;
        }
        let n = self.new_node(&key);
        self.edges.insert(key, n);
        n
    }

    fn face(&mut self, vertices: [usize; 4]) -> usize {
        let mut key = vertices;
        key.sort_unstable();
        if let Some(&n) = self.faces.get(&key) {
            return n;
        }
        let n = self.new_node(&key);
        self.faces.insert(key, n);
        n
    }
}

/// Convert a linear mesh to second order: `Tet4 → Tet10`, `Hex8 → Hex20` (`complete = false`)
/// or `Hex27` (`true`), `Tri3 → Tri6`, `Quad4 → Quad8` or `Quad9`, `Line2 → Line3`.
///
/// Mid-edge nodes are shared by every cell (volume or facet) that has the edge, and mid-face
/// nodes (`Hex27`, `Quad9`) by every cell that has the quadrilateral face (same 4 vertices), so
/// boundary facets get the same mid nodes as the volume cells. New nodes are placed at the mean
/// of the edge's / face's / cell's vertices (straight edges, flat faces) and numbered after the
/// existing ones in the order they are first met (blocks in order, cells in order, then edges,
/// faces and centre in local order); their tags continue after the largest existing node tag.
/// Cell tags, block order and groups are kept (cell ids stay valid). Blocks of other types
/// (`Point1`, `Prism6` — gradfem has no second-order prism — and already quadratic blocks) are
/// copied unchanged.
pub fn to_second_order(mesh: &Mesh, complete: bool) -> Mesh {
    use CellType::*;
    let mut coords = mesh.coords.clone();
    let mut node_tags = mesh.node_tags.clone();
    let next_tag = mesh.node_tags.iter().copied().max().unwrap_or(0) + 1;
    let mut mid = MidNodes {
        coords: &mut coords,
        node_tags: &mut node_tags,
        next_tag,
        edges: HashMap::new(),
        faces: HashMap::new(),
    };
    let mut blocks = Vec::with_capacity(mesh.blocks.len());
    for blk in &mesh.blocks {
        let ct = blk.cell_type;
        let target = match ct {
            Tet4 => Tet10,
            Hex8 if complete => Hex27,
            Hex8 => Hex20,
            Tri3 => Tri6,
            Quad4 if complete => Quad9,
            Quad4 => Quad8,
            Line2 => Line3,
            _ => {
                blocks.push(blk.clone());
                continue;
            }
        };
        let mut out = CellBlock {
            cell_type: target,
            connectivity: Vec::with_capacity(blk.len() * target.n_nodes()),
            tags: blk.tags.clone(),
        };
        for nodes in blk.cells() {
            out.connectivity.extend_from_slice(nodes);
            for [a, b] in ct.edges() {
                let n = mid.edge(nodes[*a], nodes[*b]);
                out.connectivity.push(n);
            }
            match target {
                Quad9 => {
                    let n = mid.face([nodes[0], nodes[1], nodes[2], nodes[3]]);
                    out.connectivity.push(n);
                }
                Hex27 => {
                    for f in ct.facets() {
                        let v = f.nodes;
                        let n = mid.face([nodes[v[0]], nodes[v[1]], nodes[v[2]], nodes[v[3]]]);
                        out.connectivity.push(n);
                    }
                    let n = mid.new_node(nodes);
                    out.connectivity.push(n);
                }
                _ => {}
            }
        }
        debug_assert_eq!(out.connectivity.len(), out.len() * target.n_nodes());
        blocks.push(out);
    }
    Mesh { coords, node_tags, blocks, groups: mesh.groups.clone() }
}
