//! Groups selected by geometry: exterior facets on a plane.
//!
//! [`add_plane_group`] turns "the faces on x = L" into a named boundary group, for meshes
//! whose files do not carry that group (a tip to load or to observe, a symmetry plane).

use std::collections::HashMap;

use crate::boundary::{FacetIndex, facet_nodes};
use crate::cell::CellType;
use crate::error::MeshError;
use crate::mesh::{CellId, Mesh, PhysicalGroup};

/// Add the boundary group `name` (dimension `mesh.dim() − 1`, i.e. a surface group of a volume
/// mesh) made of the exterior facets of the top-dimensional cells whose nodes **all** lie on
/// the plane `x[axis] = value`, within `rel_tol` × the diagonal of the mesh's bounding box
/// (mid-edge and mid-face nodes included, so a curved facet that leaves the plane is not
/// selected). Returns the number of facets in the group.
///
/// Each facet becomes a cell of the group: an existing boundary cell with the same type and
/// the same vertices is reused (its node order is kept as it is); otherwise a new cell is
/// appended to the block of the facet's type (created if needed), with nodes in the outward
/// order of [`facet_nodes`] and a tag one above the largest cell tag of the mesh. The group's
/// tag is one above the largest tag of the groups of its dimension. Existing cell ids stay
/// valid.
///
/// # Errors
/// [`MeshError::Inconsistent`] if `axis` is not 0, 1 or 2, `value` is not finite or `rel_tol`
/// is negative or not finite, the mesh has no cells of dimension ≥ 1, a group called `name`
/// already exists, or no exterior facet lies on the plane (the message gives the plane and
/// the bounding box). The mesh is left unchanged on error.
pub fn add_plane_group(
    mesh: &mut Mesh,
    name: &str,
    axis: usize,
    value: f64,
    rel_tol: f64,
) -> Result<usize, MeshError> {
    let fail = |msg: String| Err(MeshError::Inconsistent(format!("plane group '{name}': {msg}")));
    if axis > 2 {
        return fail(format!("axis {axis} is not 0 (x), 1 (y) or 2 (z)"));
    }
    if !value.is_finite() || !rel_tol.is_finite() || rel_tol < 0.0 {
        return fail(format!(
            "the plane x[{axis}] = {value:e} and the tolerance {rel_tol:e} must be finite, the \
             tolerance non-negative"
        ));
    }
    if mesh.groups.iter().any(|g| g.name == name) {
        return fail("a group of that name exists already".into());
    }
    let dim = mesh.dim();
    if dim == 0 {
        return fail("the mesh has no cells with facets".into());
    }
    let [lo, hi] = mesh.bounding_box();
    let diagonal = (0..3).map(|k| (hi[k] - lo[k]).powi(2)).sum::<f64>().sqrt();
    let tol = rel_tol * diagonal;
    let on_plane: Vec<(CellType, Vec<usize>)> = FacetIndex::new(mesh)
        .exterior(mesh)
        .into_iter()
        .map(|f| facet_nodes(mesh, f))
        .filter(|(_, nodes)| nodes.iter().all(|&n| (mesh.coords[n][axis] - value).abs() <= tol))
        .collect();
    if on_plane.is_empty() {
        let axis_name = ["x", "y", "z"][axis];
        return fail(format!(
            "no exterior facet lies on the plane {axis_name} = {value:e} (within {tol:e}); the \
             mesh spans {axis_name} ∈ [{:e}, {:e}]",
            lo[axis], hi[axis]
        ));
    }

    // Existing boundary cells by (type, sorted vertices).
    let key = |ct: CellType, nodes: &[usize]| {
        let mut v = [usize::MAX; 4];
        for (slot, &n) in v.iter_mut().zip(&nodes[..ct.n_vertices()]) {
            *slot = n;
        }
        v.sort_unstable();
        (ct, v)
    };
    let mut existing: HashMap<(CellType, [usize; 4]), CellId> = HashMap::new();
    for id in mesh.cells_of_dim(dim - 1) {
        let ct = mesh.cell_type(id);
        if ct.n_vertices() <= 4 {
            existing.entry(key(ct, mesh.cell_nodes(id))).or_insert(id);
        }
    }
    let mut next_tag =
        mesh.blocks.iter().flat_map(|b| b.tags.iter().copied()).max().unwrap_or(0) + 1;
    let mut cells = Vec::with_capacity(on_plane.len());
    for (ct, nodes) in on_plane {
        let id = match existing.get(&key(ct, &nodes)) {
            Some(&id) => id,
            None => {
                let (block, blk) = mesh.block_mut(ct);
                blk.push(&nodes, next_tag);
                next_tag += 1;
                CellId { block, index: blk.len() - 1 }
            }
        };
        cells.push(id);
    }
    cells.sort_unstable();
    cells.dedup();
    let tag = mesh.groups.iter().filter(|g| g.dim == dim - 1).map(|g| g.tag).max().unwrap_or(0) + 1;
    let count = cells.len();
    mesh.groups.push(PhysicalGroup { name: name.to_string(), tag, dim: dim - 1, cells });
    Ok(count)
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::boundary::group_facets;
    use crate::generate::{BoxSpec, box_mesh, to_second_order};
    use crate::geometry::{group_measure, surface_normal};

    fn vertex_sets(mesh: &Mesh, group: &PhysicalGroup) -> Vec<Vec<usize>> {
        let mut sets: Vec<Vec<usize>> = group
            .cells
            .iter()
            .map(|&c| {
                let ct = mesh.cell_type(c);
                let mut v = mesh.cell_nodes(c)[..ct.n_vertices()].to_vec();
                v.sort_unstable();
                v
            })
            .collect();
        sets.sort();
        sets
    }

    /// A box mesh without its boundary facets, so that every facet must be created.
    fn volume_only(mut mesh: Mesh) -> Mesh {
        mesh.blocks.truncate(1);
        mesh.groups.truncate(1);
        mesh
    }

    #[rstest]
    fn plane_group_matches_the_generated_side(
        #[values(
            CellType::Tet4,
            CellType::Tet10,
            CellType::Hex8,
            CellType::Hex20,
            CellType::Hex27
        )]
        ct: CellType,
        #[values(false, true)] strip_facets: bool,
    ) {
        let generated = box_mesh(&BoxSpec::unit_cube(3, ct));
        let mut mesh =
            if strip_facets { volume_only(generated.clone()) } else { generated.clone() };
        let n_blocks = mesh.blocks.len();
        let n = add_plane_group(&mut mesh, "tip", 0, 1.0, 1e-9).unwrap();
        mesh.validate().unwrap();
        let xmax = generated.group("xmax").unwrap();
        let tip = mesh.group("tip").unwrap().clone();
        assert_eq!(n, xmax.cells.len());
        assert_eq!(tip.dim, 2);
        assert_eq!(vertex_sets(&mesh, &tip), vertex_sets(&generated, xmax));
        let area = group_measure(&mesh, &tip);
        assert!((area - 1.0).abs() < 1e-13, "{ct}: area {area}");
        if strip_facets {
            // New cells in a new block, second order where the volume is, facing outwards.
            assert_eq!(mesh.blocks.len(), n_blocks + 1);
            let facet_type = ct.facets()[0].cell_type;
            assert!(tip.cells.iter().all(|&c| mesh.cell_type(c) == facet_type));
            let first_tag = mesh.blocks[0].tags.iter().max().unwrap() + 1;
            assert_eq!(mesh.blocks[1].tags[0], first_tag);
            let xi = if facet_type.linear() == CellType::Tri3 { [1.0 / 3.0; 3] } else { [0.0; 3] };
            for &c in &tip.cells {
                let mut coords = Vec::new();
                mesh.cell_coords_into(c, &mut coords);
                let normal = surface_normal(&coords, facet_type, xi);
                assert!((normal[0] - 1.0).abs() < 1e-12, "{ct}: normal {normal:?}");
            }
        } else {
            // The generated facets are reused: no new cell.
            assert_eq!(mesh.blocks, generated.blocks);
            assert_eq!(tip.cells, xmax.cells);
            assert_eq!(tip.tag, 7);
        }
        // The group is usable as a boundary group.
        assert_eq!(group_facets(&mesh, &tip).unwrap().len(), n);
    }

    #[test]
    fn second_order_facets_are_reused_after_promotion() {
        let linear = volume_only(box_mesh(&BoxSpec::unit_cube(2, CellType::Hex8)));
        let mut mesh = linear.clone();
        add_plane_group(&mut mesh, "bottom", 2, 0.0, 1e-9).unwrap();
        let mut quadratic = to_second_order(&mesh, false);
        let before = quadratic.blocks.clone();
        let n = add_plane_group(&mut quadratic, "bottom again", 2, 0.0, 1e-9).unwrap();
        assert_eq!(n, 4);
        assert_eq!(quadratic.blocks, before);
        assert_eq!(
            quadratic.group("bottom again").unwrap().cells,
            quadratic.group("bottom").unwrap().cells
        );
    }

    #[rstest]
    #[case::interior_plane(0, 0.5)]
    #[case::outside(1, 2.0)]
    fn a_plane_without_exterior_facets_is_an_error(#[case] axis: usize, #[case] value: f64) {
        let mut mesh = box_mesh(&BoxSpec::unit_cube(2, CellType::Hex8));
        let before = mesh.clone();
        let err = add_plane_group(&mut mesh, "mid", axis, value, 1e-9).unwrap_err().to_string();
        assert!(err.contains("no exterior facet") && err.contains("'mid'"), "{err}");
        assert_eq!(mesh, before);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let mut mesh = box_mesh(&BoxSpec::unit_cube(1, CellType::Tet4));
        let err = add_plane_group(&mut mesh, "xmax", 0, 1.0, 1e-9).unwrap_err().to_string();
        assert!(err.contains("exists already"), "{err}");
        assert!(add_plane_group(&mut mesh, "a", 3, 1.0, 1e-9).is_err());
        assert!(add_plane_group(&mut mesh, "a", 0, f64::NAN, 1e-9).is_err());
        assert!(add_plane_group(&mut mesh, "a", 0, 1.0, -1.0).is_err());
        assert!(add_plane_group(&mut Mesh::default(), "a", 0, 1.0, 1e-9).is_err());
    }

    #[test]
    fn tolerance_is_relative_to_the_bounding_box() {
        let mut mesh = volume_only(box_mesh(&BoxSpec {
            origin: [0.0; 3],
            lengths: [1e-4, 1e-5, 1e-5],
            divisions: [4, 1, 1],
            cell_type: CellType::Hex8,
        }));
        // 1e-9 m off the plane is within 1e-4 × diagonal, not within 1e-9 × diagonal.
        assert_eq!(add_plane_group(&mut mesh, "near", 0, 1e-4 + 1e-9, 1e-4).unwrap(), 1);
        assert!(add_plane_group(&mut mesh, "strict", 0, 1e-4 + 1e-9, 1e-9).is_err());
    }
}
