//! Boundary facets: the exterior facets of a mesh and the matching of boundary groups (gmsh
//! surface groups) to faces of the volume cells.
//!
//! A facet is identified by its **sorted vertex set** (corner nodes only), so a `Tri6` boundary
//! cell matches the `Tet10` face with the same three corners whatever the node order. Facets
//! are bucketed by their smallest vertex ([`FacetIndex`]), which is linear in time, small in
//! memory and deterministic: within a bucket, equal keys are adjacent and ordered by
//! `(block, index, local_facet)`.

use rayon::prelude::*;

use crate::cell::CellType;
use crate::error::MeshError;
use crate::mesh::{CellId, Mesh, PhysicalGroup};

/// One local facet of one cell: the face `local_facet` (index into `CellType::facets()`) of
/// `cell`. Its nodes, in outward order, are given by [`facet_nodes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BoundaryFacet {
    /// The (top-dimensional) cell the facet belongs to.
    pub cell: CellId,
    /// Index into `cell_type.facets()`.
    pub local_facet: usize,
}

/// The cell type and global nodes of a facet, in the outward order of the cell's facet table.
pub fn facet_nodes(mesh: &Mesh, f: BoundaryFacet) -> (CellType, Vec<usize>) {
    let ct = mesh.cell_type(f.cell);
    let lf = ct.facets()[f.local_facet];
    let nodes = mesh.cell_nodes(f.cell);
    (lf.cell_type, lf.nodes.iter().map(|&l| nodes[l]).collect())
}

/// Sorted vertex key of a facet (up to 4 corners, padded with `usize::MAX`).
type Key = [usize; 4];

fn key_of(vertices: impl Iterator<Item = usize>) -> Key {
    let mut k = [usize::MAX; 4];
    for (slot, v) in k.iter_mut().zip(vertices) {
        *slot = v;
    }
    k.sort_unstable();
    k
}

/// All local facets of the top-dimensional cells of a mesh, bucketed by their smallest vertex,
/// for repeated lookups (build once, match many groups) and for exterior-facet extraction.
///
/// Facets are numbered globally (`g = block offset + cell × n_facets + local facet`) and
/// counting-sorted by smallest vertex (linear time); each bucket (a few dozen facets at most
/// in a real mesh) is then sorted by (sorted vertex key, g). This needs 8 bytes per facet plus
/// 8 per node, which matters for millions of cells (a list of `(key, facet)` pairs sorted
/// globally took 7× longer and 7× the memory), and is deterministic.
#[derive(Clone, Debug)]
pub struct FacetIndex {
    /// `(first global facet number, block, facets per cell)` of each top-dimensional block.
    blocks: Vec<(usize, usize, usize)>,
    /// `offsets[v]..offsets[v + 1]`: the bucket of facets whose smallest vertex is `v`.
    offsets: Vec<usize>,
    /// Global facet numbers, grouped by bucket, sorted by (key, g) inside each bucket.
    entries: Vec<usize>,
}

impl FacetIndex {
    /// Index every local facet of every cell of dimension `mesh.dim()`.
    ///
    /// # Panics
    /// If a cell refers to a node index out of range: call [`Mesh::validate`] first on meshes
    /// that come from files (readers do).
    pub fn new(mesh: &Mesh) -> Self {
        let dim = mesh.dim();
        let mut blocks = Vec::new();
        let mut total = 0;
        for (b, blk) in mesh.blocks_of_dim(dim) {
            let nf = blk.cell_type.facets().len();
            blocks.push((total, b, nf));
            total += blk.len() * nf;
        }
        let n_nodes = mesh.n_nodes();
        let mut offsets = vec![0usize; n_nodes + 1];
        let min_vertex = |blk: &crate::mesh::CellBlock, i: usize, lf: usize| -> usize {
            let f = blk.cell_type.facets()[lf];
            let nodes = blk.cell(i);
            f.nodes[..f.cell_type.n_vertices()].iter().map(|&l| nodes[l]).min().unwrap_or(0)
        };
        for &(_, b, nf) in &blocks {
            let blk = &mesh.blocks[b];
            for i in 0..blk.len() {
                for lf in 0..nf {
                    offsets[min_vertex(blk, i, lf) + 1] += 1;
                }
            }
        }
        for v in 0..n_nodes {
            offsets[v + 1] += offsets[v];
        }
        let mut entries = vec![0usize; total];
        let mut fill = offsets.clone();
        for &(start, b, nf) in &blocks {
            let blk = &mesh.blocks[b];
            for i in 0..blk.len() {
                for lf in 0..nf {
                    let v = min_vertex(blk, i, lf);
                    entries[fill[v]] = start + i * nf + lf;
                    fill[v] += 1;
                }
            }
        }
        let mut index = FacetIndex { blocks, offsets, entries };
        // Sort each bucket by (key, g), in parallel over ranges of buckets.
        let mut entries = std::mem::take(&mut index.entries);
        let chunk = n_nodes.div_ceil(256).max(1);
        let mut slices = Vec::new();
        let mut rest: &mut [usize] = &mut entries;
        let mut v0 = 0;
        while v0 < n_nodes {
            let v1 = (v0 + chunk).min(n_nodes);
            let (head, tail) = rest.split_at_mut(index.offsets[v1] - index.offsets[v0]);
            slices.push((v0, v1, head));
            rest = tail;
            v0 = v1;
        }
        slices.into_par_iter().for_each(|(v0, v1, slice)| {
            let base = index.offsets[v0];
            let mut buf: Vec<(Key, usize)> = Vec::new();
            for v in v0..v1 {
                let bucket = &mut slice[index.offsets[v] - base..index.offsets[v + 1] - base];
                if bucket.len() < 2 {
                    continue;
                }
                buf.clear();
                buf.extend(bucket.iter().map(|&g| (index.key(mesh, g), g)));
                buf.sort_unstable();
                for (slot, (_, g)) in bucket.iter_mut().zip(&buf) {
                    *slot = *g;
                }
            }
        });
        index.entries = entries;
        index
    }

    /// The facet with global number `g`.
    fn facet(&self, g: usize) -> BoundaryFacet {
        let k = self.blocks.partition_point(|b| b.0 <= g) - 1;
        let (start, block, nf) = self.blocks[k];
        BoundaryFacet {
            cell: CellId { block, index: (g - start) / nf },
            local_facet: (g - start) % nf,
        }
    }

    /// The sorted vertex key of facet `g`.
    fn key(&self, mesh: &Mesh, g: usize) -> Key {
        let f = self.facet(g);
        let lf = mesh.cell_type(f.cell).facets()[f.local_facet];
        let nodes = mesh.cell_nodes(f.cell);
        key_of(lf.nodes[..lf.cell_type.n_vertices()].iter().map(|&l| nodes[l]))
    }

    /// The facets whose vertex set is `vertices` (any order), in `(block, index, facet)` order:
    /// one for a boundary facet, two for an interior facet, none if no cell has that face.
    pub fn find(&self, mesh: &Mesh, vertices: &[usize]) -> Vec<BoundaryFacet> {
        let key = key_of(vertices.iter().copied());
        let Some(&v) = vertices.iter().min() else { return Vec::new() };
        if v + 1 >= self.offsets.len() {
            return Vec::new();
        }
        self.entries[self.offsets[v]..self.offsets[v + 1]]
            .iter()
            .filter(|&&g| self.key(mesh, g) == key)
            .map(|&g| self.facet(g))
            .collect()
    }

    /// The facets that belong to exactly one cell, sorted by `(block, index, local_facet)`.
    pub fn exterior(&self, mesh: &Mesh) -> Vec<BoundaryFacet> {
        let n_nodes = self.offsets.len() - 1;
        let mut out: Vec<usize> = (0..n_nodes)
            .into_par_iter()
            .with_min_len(1024)
            .flat_map_iter(|v| {
                let bucket = &self.entries[self.offsets[v]..self.offsets[v + 1]];
                let keys: Vec<Key> = bucket.iter().map(|&g| self.key(mesh, g)).collect();
                (0..bucket.len())
                    .filter(move |&i| {
                        (i == 0 || keys[i - 1] != keys[i])
                            && (i + 1 == keys.len() || keys[i + 1] != keys[i])
                    })
                    .map(move |i| bucket[i])
            })
            .collect();
        // Global facet numbers follow (block, index, local facet) order.
        out.par_sort_unstable();
        out.into_iter().map(|g| self.facet(g)).collect()
    }

    /// Match every cell of a boundary group to the face of a top-dimensional cell with the same
    /// vertices; see [`group_facets`].
    pub fn group_facets(
        &self,
        mesh: &Mesh,
        group: &PhysicalGroup,
    ) -> Result<Vec<BoundaryFacet>, MeshError> {
        let dim = mesh.dim();
        if group.dim + 1 != dim {
            return Err(MeshError::GroupDimension {
                group: group.name.clone(),
                dim: group.dim,
                expected: dim.saturating_sub(1),
            });
        }
        group
            .cells
            .iter()
            .map(|&c| {
                let ct = mesh.cell_type(c);
                let vertices = &mesh.cell_nodes(c)[..ct.n_vertices()];
                match self.find(mesh, vertices).first() {
                    Some(f) => Ok(*f),
                    None => Err(MeshError::UnmatchedFacet {
                        group: group.name.clone(),
                        facet_tag: mesh.cell_tag(c),
                        centroid: mesh.cell_centroid(c),
                    }),
                }
            })
            .collect()
    }
}

/// The exterior facets of the mesh: local facets of the top-dimensional cells that belong to
/// exactly one cell, in `(block, index, local_facet)` order. Their nodes from [`facet_nodes`]
/// are ordered so that the right-hand normal points out of the mesh.
pub fn exterior_facets(mesh: &Mesh) -> Vec<BoundaryFacet> {
    FacetIndex::new(mesh).exterior(mesh)
}

/// The cell faces a boundary group lies on: each cell of `group` (dimension `mesh.dim() - 1`)
/// is matched by its vertex set to the local facet of a top-dimensional cell, in the group's
/// cell order. A facet shared by two cells (an internal interface) is assigned to the first
/// cell in `(block, index)` order; callers that need the other side can use
/// [`FacetIndex::find`].
///
/// # Errors
/// [`MeshError::GroupDimension`] if the group's dimension is not `mesh.dim() - 1`;
/// [`MeshError::UnmatchedFacet`] (with the facet's tag and centroid) if no cell has that face.
pub fn group_facets(mesh: &Mesh, group: &PhysicalGroup) -> Result<Vec<BoundaryFacet>, MeshError> {
    FacetIndex::new(mesh).group_facets(mesh, group)
}
