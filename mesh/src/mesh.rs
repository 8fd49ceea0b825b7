//! The [`Mesh`]: node coordinates, cell blocks by type, physical groups, and the original tags
//! of the file so results map back.

use crate::cell::CellType;
use crate::error::MeshError;

/// Cells of one type, stored as a flat connectivity array (`cell_type.n_nodes()` node indices
/// per cell, in gradfem's local order, see [`crate::cell`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CellBlock {
    /// The type of every cell of the block.
    pub cell_type: CellType,
    /// Node indices (0-based, into [`Mesh::coords`]), `n_nodes` per cell.
    pub connectivity: Vec<usize>,
    /// The element tag of each cell in the source file (gmsh element tag, ANSYS element number),
    /// or its 1-based position for generated meshes.
    pub tags: Vec<u64>,
}

impl CellBlock {
    /// An empty block.
    pub fn new(cell_type: CellType) -> Self {
        CellBlock { cell_type, connectivity: Vec::new(), tags: Vec::new() }
    }

    /// Number of cells in the block.
    pub fn len(&self) -> usize {
        self.tags.len()
    }

    /// Whether the block has no cell.
    pub fn is_empty(&self) -> bool {
        self.tags.is_empty()
    }

    /// The nodes of cell `i` of this block.
    #[inline]
    pub fn cell(&self, i: usize) -> &[usize] {
        let n = self.cell_type.n_nodes();
        &self.connectivity[i * n..(i + 1) * n]
    }

    /// Iterator over the node lists of all cells.
    pub fn cells(&self) -> std::slice::ChunksExact<'_, usize> {
        self.connectivity.chunks_exact(self.cell_type.n_nodes())
    }

    /// Append one cell.
    pub fn push(&mut self, nodes: &[usize], tag: u64) {
        assert_eq!(
            nodes.len(),
            self.cell_type.n_nodes(),
            "a {} has {} nodes, got {}",
            self.cell_type,
            self.cell_type.n_nodes(),
            nodes.len()
        );
        self.connectivity.extend_from_slice(nodes);
        self.tags.push(tag);
    }
}

/// A cell of the mesh, addressed by its block and its index inside the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CellId {
    /// Index into [`Mesh::blocks`].
    pub block: usize,
    /// Index of the cell inside its block.
    pub index: usize,
}

/// A named physical group (gmsh physical group, ANSYS component): a set of cells of one
/// dimension. Groups may overlap.
#[derive(Clone, Debug, PartialEq)]
pub struct PhysicalGroup {
    /// The group's name.
    pub name: String,
    /// The group's number in the source file (gmsh physical tag); generated groups number
    /// themselves from 1.
    pub tag: i32,
    /// Dimension of the group's cells (3 volume, 2 surface, 1 line, 0 point).
    pub dim: usize,
    /// The group's cells, sorted.
    pub cells: Vec<CellId>,
}

/// An unstructured mesh of mixed cell types in 3D space (2D meshes have z = 0).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mesh {
    /// Node coordinates.
    pub coords: Vec<[f64; 3]>,
    /// The node tag of each node in the source file (gmsh node tag, ANSYS node number), or its
    /// 1-based position for generated meshes.
    pub node_tags: Vec<u64>,
    /// Cell blocks; volume cells and boundary facets of a file live side by side.
    pub blocks: Vec<CellBlock>,
    /// Physical groups.
    pub groups: Vec<PhysicalGroup>,
}

impl Mesh {
    /// Number of nodes.
    pub fn n_nodes(&self) -> usize {
        self.coords.len()
    }

    /// Dimension of the mesh: the highest dimension of its cells (0 for an empty mesh).
    pub fn dim(&self) -> usize {
        self.blocks.iter().filter(|b| !b.is_empty()).map(|b| b.cell_type.dim()).max().unwrap_or(0)
    }

    /// Number of cells of dimension `dim`, over all blocks.
    pub fn n_cells_of_dim(&self, dim: usize) -> usize {
        self.blocks.iter().filter(|b| b.cell_type.dim() == dim).map(|b| b.len()).sum()
    }

    /// The blocks (with their indices) whose cells have dimension `dim`.
    pub fn blocks_of_dim(&self, dim: usize) -> impl Iterator<Item = (usize, &CellBlock)> {
        self.blocks.iter().enumerate().filter(move |(_, b)| b.cell_type.dim() == dim)
    }

    /// The nodes of one cell.
    #[inline]
    pub fn cell_nodes(&self, id: CellId) -> &[usize] {
        self.blocks[id.block].cell(id.index)
    }

    /// The type of one cell.
    #[inline]
    pub fn cell_type(&self, id: CellId) -> CellType {
        self.blocks[id.block].cell_type
    }

    /// The original tag of one cell.
    pub fn cell_tag(&self, id: CellId) -> u64 {
        self.blocks[id.block].tags[id.index]
    }

    /// The coordinates of the nodes of one cell, written into `out` (cleared first).
    pub fn cell_coords_into(&self, id: CellId, out: &mut Vec<[f64; 3]>) {
        out.clear();
        out.extend(self.cell_nodes(id).iter().map(|&n| self.coords[n]));
    }

    /// The centroid of the vertices of one cell.
    pub fn cell_centroid(&self, id: CellId) -> [f64; 3] {
        let ct = self.cell_type(id);
        let nodes = &self.cell_nodes(id)[..ct.n_vertices()];
        let mut c = [0.0; 3];
        for &n in nodes {
            for (ck, xk) in c.iter_mut().zip(self.coords[n]) {
                *ck += xk;
            }
        }
        c.map(|v| v / nodes.len() as f64)
    }

    /// Iterator over every cell id of dimension `dim`.
    pub fn cells_of_dim(&self, dim: usize) -> impl Iterator<Item = CellId> + '_ {
        self.blocks_of_dim(dim)
            .flat_map(|(b, blk)| (0..blk.len()).map(move |i| CellId { block: b, index: i }))
    }

    /// The block of cells of type `cell_type`, created (empty) if there is none yet.
    pub fn block_mut(&mut self, cell_type: CellType) -> (usize, &mut CellBlock) {
        let i = match self.blocks.iter().position(|b| b.cell_type == cell_type) {
            Some(i) => i,
            None => {
                self.blocks.push(CellBlock::new(cell_type));
                self.blocks.len() - 1
            }
        };
        (i, &mut self.blocks[i])
    }

    /// A group by name.
    pub fn group(&self, name: &str) -> Result<&PhysicalGroup, MeshError> {
        self.groups.iter().find(|g| g.name == name).ok_or_else(|| MeshError::UnknownGroup {
            name: name.to_string(),
            known: self.group_names(),
        })
    }

    /// The names of all groups, in order.
    pub fn group_names(&self) -> Vec<String> {
        self.groups.iter().map(|g| g.name.clone()).collect()
    }

    /// The nodes touched by the cells of a group, sorted and unique.
    pub fn group_nodes(&self, group: &PhysicalGroup) -> Vec<usize> {
        let mut nodes: Vec<usize> =
            group.cells.iter().flat_map(|&c| self.cell_nodes(c).iter().copied()).collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// Axis-aligned bounding box `[min, max]` of the nodes (zeros for an empty mesh).
    pub fn bounding_box(&self) -> [[f64; 3]; 2] {
        if self.coords.is_empty() {
            return [[0.0; 3]; 2];
        }
        let mut lo = [f64::INFINITY; 3];
        let mut hi = [f64::NEG_INFINITY; 3];
        for p in &self.coords {
            for k in 0..3 {
                lo[k] = lo[k].min(p[k]);
                hi[k] = hi[k].max(p[k]);
            }
        }
        [lo, hi]
    }

    /// Check the mesh's internal consistency: connectivity within range, tags of the right
    /// length, group cells that exist and have the group's dimension.
    pub fn validate(&self) -> Result<(), MeshError> {
        if self.node_tags.len() != self.coords.len() {
            return Err(MeshError::Inconsistent(format!(
                "{} node tags for {} nodes",
                self.node_tags.len(),
                self.coords.len()
            )));
        }
        for (b, blk) in self.blocks.iter().enumerate() {
            if blk.connectivity.len() != blk.tags.len() * blk.cell_type.n_nodes() {
                return Err(MeshError::Inconsistent(format!(
                    "block {b} ({}): {} connectivity entries for {} cells",
                    blk.cell_type,
                    blk.connectivity.len(),
                    blk.tags.len()
                )));
            }
            if let Some(pos) = blk.connectivity.iter().position(|&n| n >= self.coords.len()) {
                let cell = pos / blk.cell_type.n_nodes();
                return Err(MeshError::Inconsistent(format!(
                    "cell {} (tag {}) of block {b} ({}) refers to node index {} but the mesh has {} nodes",
                    cell,
                    blk.tags[cell],
                    blk.cell_type,
                    blk.connectivity[pos],
                    self.coords.len()
                )));
            }
        }
        for g in &self.groups {
            for c in &g.cells {
                let Some(blk) = self.blocks.get(c.block) else {
                    return Err(MeshError::Inconsistent(format!(
                        "group '{}' refers to block {} of {}",
                        g.name,
                        c.block,
                        self.blocks.len()
                    )));
                };
                if c.index >= blk.len() || blk.cell_type.dim() != g.dim {
                    return Err(MeshError::Inconsistent(format!(
                        "group '{}' (dim {}) refers to cell {:?} ({} of {} cells of type {})",
                        g.name,
                        g.dim,
                        c,
                        c.index,
                        blk.len(),
                        blk.cell_type
                    )));
                }
            }
        }
        Ok(())
    }
}
