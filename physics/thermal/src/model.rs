//! The discrete steady heat-conduction model: regions, boundary conditions, element kernels and
//! their vector-Jacobian products.
//!
//! Weak form, residual R(T) = 0 with, for each node a,
//!
//! R_a = Σ_cells ∫ (k₀ f(T) ∇N_a · ∇T − Q N_a) dΩ
//!     + Σ_convection facets ∫ h (T − T∞) N_a dΓ − Σ_flux facets ∫ q_in N_a dΓ,
//!
//! where `q_in` is the heat flux entering the body. Fixed temperatures are not unknowns: their
//! nodes are constrained and their values enter R through the element residuals, so the tangent
//! ∂R/∂T restricted to the unknowns stays symmetric positive definite for a constant
//! conductivity (it is not symmetric when k depends on T).
//!
//! Every derivative the adjoint engine needs is a vector-Jacobian product computed element by
//! element: λᵀ ∂R/∂k₀ₑ, λᵀ ∂R/∂Q, λᵀ ∂R/∂h, λᵀ ∂R/∂T∞, λᵀ ∂R/∂q_in (the residual is linear in
//! each of them, so these are kernel evaluations with the parameter set to one), λᵀ ∂R/∂T_fixed
//! (the tangent transposed), and λᵀ ∂R/∂X for node coordinates (dual numbers over the 3·n
//! coordinates of each element).

use std::collections::HashMap;
use std::sync::Arc;

use gradfem_kernel::{NodalDofMap, Offsets};
use gradfem_mesh::quadrature::ElementTable;
use gradfem_mesh::{CellId, CellRuns, CellType, Mesh, geometry};
use num_dual::{Dual64, DualNum};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::law::ConductivityLaw;
use gradfem_kernel::generic;

/// Marks a local element dof that is not an unknown (its node has a fixed temperature).
/// Equal to `gradfem_solvers::assembly::CONSTRAINED`.
pub const CONSTRAINED: usize = usize::MAX;

/// Largest number of nodes of a supported cell (Hex27).
/// The most nodes of a supported cell (Hex27): the size of the fixed per-element buffers.
pub const MAX_NODES: usize = 27;

/// A volume group with its material.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegionSpec {
    /// Name of a volume (dim 3) group of the mesh.
    pub group: String,
    /// Conductivity scale k₀ [W/(m·K)]: k(T) = k₀ f(T).
    pub k0: f64,
    /// The temperature dependence f(T).
    pub law: ConductivityLaw,
    /// Volumetric heat source Q [W/m³].
    pub source: f64,
}

/// A boundary condition on a surface group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BcKind {
    /// Fixed temperature T = value \[K\] on every node of the group.
    Temperature { value: f64 },
    /// Heat flux entering the body, q_in [W/m²].
    HeatFlux { q_in: f64 },
    /// Convection: outgoing flux h (T − T∞), h [W/(m²·K)], T∞ \[K\].
    Convection { h: f64, t_inf: f64 },
}

/// A boundary condition applied to a named group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BcSpec {
    pub group: String,
    #[serde(flatten)]
    pub kind: BcKind,
}

/// Errors in setting up or evaluating the thermal model.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ThermalError {
    #[error("thermal: unknown group '{name}'; the mesh has: {}", known.join(", "))]
    UnknownGroup { name: String, known: Vec<String> },
    #[error("thermal: group '{group}' has dimension {dim}, but {what} needs dimension {expected}")]
    WrongDimension { group: String, dim: usize, expected: usize, what: &'static str },
    #[error(
        "thermal: cell {cell_tag} belongs to both regions '{first}' and '{second}'; a cell may have one material"
    )]
    OverlappingRegions { first: String, second: String, cell_tag: u64 },
    #[error("thermal: {what} must be {requirement}, got {value}")]
    InvalidValue { what: String, requirement: &'static str, value: f64 },
    #[error("thermal: no volume cells: the regions' groups hold no 3D cells")]
    NoVolumeCells,
    /// A derivative this version does not compute, named.
    #[error("thermal: {0} are not available yet")]
    NotAvailable(String),
    #[error(
        "thermal: the temperature is determined only up to a constant: no temperature is fixed anywhere and no convection (h > 0) ties it to an ambient value; add a 'temperature' or 'convection' boundary condition"
    )]
    NoTemperatureReference,
    #[error("thermal: cell type {cell_type} is not supported as a {role}")]
    UnsupportedCell { cell_type: CellType, role: &'static str },
    #[error(
        "thermal: cell {cell_tag} ({cell_type}) is inverted or degenerate (det J = {det_j:.3e}) near ({:.6e}, {:.6e}, {:.6e})",
        centroid[0], centroid[1], centroid[2]
    )]
    InvertedCell { cell_tag: u64, cell_type: CellType, det_j: f64, centroid: [f64; 3] },
    #[error(
        "thermal: node {node_tag} at ({:.6e}, {:.6e}, {:.6e}) is fixed by both '{first}' ({first_value}) and '{second}' ({second_value})",
        position[0], position[1], position[2]
    )]
    ConflictingTemperatures {
        node_tag: u64,
        position: [f64; 3],
        first: String,
        first_value: f64,
        second: String,
        second_value: f64,
    },
    #[error(
        "thermal: conductivity k(T) = {k:.4e} ≤ 0 at T = {temperature:.6e} in cell {cell_tag} near ({:.6e}, {:.6e}, {:.6e}) of region '{region}': the temperature left the range where the law is physical",
        centroid[0], centroid[1], centroid[2]
    )]
    NonPositiveConductivity {
        cell_tag: u64,
        region: String,
        temperature: f64,
        k: f64,
        centroid: [f64; 3],
    },
    #[error("thermal: point ({:.6e}, {:.6e}, {:.6e}) lies in no cell of the model{}", point[0], point[1], point[2], context)]
    PointOutside { point: [f64; 3], context: String },
}

/// One region of the model, after set-up.
#[derive(Clone, Debug)]
pub struct Region {
    pub name: String,
    pub law: ConductivityLaw,
    pub source: f64,
    /// The model's volume elements that belong to this region: the model numbers its volume
    /// elements region by region, so they are a range.
    pub elements: std::ops::Range<usize>,
}

/// One boundary condition of the model, after set-up.
#[derive(Clone, Debug)]
pub struct Boundary {
    pub name: String,
    pub kind: BcKind,
    /// Nodes of the group (for fixed temperatures: the nodes it fixes).
    pub nodes: Vec<usize>,
    /// The model's facet elements of this condition (flux and convection).
    pub elements: Vec<usize>,
}

#[derive(Clone, Debug)]
struct ElemBlock {
    cell_type: CellType,
    table: ElementTable,
    volume: bool,
}

/// The parameters a kernel evaluation uses.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KernelParams {
    pub(crate) k0: f64,
    pub(crate) source: f64,
    pub(crate) h: f64,
    pub(crate) t_inf: f64,
    pub(crate) q_in: f64,
    /// Include the external per-point source (Joule heat), if one is set.
    external: bool,
}

/// Which vector-Jacobian products [`ThermalModel::parameter_vjp`] computes (the others are left
/// empty or zero): each costs about one residual assembly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VjpRequest {
    /// Per-element k₀ (also needed for a region's scalar k₀).
    pub conductivity: bool,
    /// Region sources.
    pub source: bool,
    /// Convection and flux parameters.
    pub boundary: bool,
    /// Fixed temperatures (one tangent-transpose product).
    pub temperature: bool,
    /// Node coordinates (dual numbers over 3·n coordinates per element: the dearest).
    pub coords: bool,
}

impl VjpRequest {
    /// Everything.
    pub const ALL: VjpRequest = VjpRequest {
        conductivity: true,
        source: true,
        boundary: true,
        temperature: true,
        coords: true,
    };
}

/// λᵀ ∂R/∂p for every parameter of the thermal model (the adjoint engine subtracts these).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParameterVjp {
    /// Per volume element: λᵀ ∂R/∂k₀ₑ.
    pub k_elem: Vec<f64>,
    /// Per region: λᵀ ∂R/∂Q.
    pub source: Vec<f64>,
    /// Per boundary condition: λᵀ ∂R/∂h (convection only, else 0).
    pub h: Vec<f64>,
    /// Per boundary condition: λᵀ ∂R/∂T∞ (convection only, else 0).
    pub t_inf: Vec<f64>,
    /// Per boundary condition: λᵀ ∂R/∂q_in (heat flux only, else 0).
    pub q_in: Vec<f64>,
    /// Per boundary condition: λᵀ ∂R/∂T_fixed (fixed temperature only, else 0).
    pub temperature: Vec<f64>,
    /// Per node: λᵀ ∂R/∂X (when requested).
    pub coords: Option<Vec<[f64; 3]>>,
}

/// Where the heat goes, in watts, at a temperature field: the balance
/// generated + flux_in = convection_out + fixed_out + stored holds to solver tolerance at a
/// solution (`stored` is zero in a steady state).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HeatBalance {
    /// ∫ Q dΩ over the volume elements (region sources and any external source) \[W\].
    #[serde(rename = "generated_W")]
    pub generated_w: f64,
    /// Heat entering through heat-flux conditions, Σ ∫ q_in dΓ \[W\].
    #[serde(rename = "flux_in_W")]
    pub flux_in_w: f64,
    /// Heat leaving by convection, Σ ∫ h (T − T∞) dΓ \[W\].
    #[serde(rename = "convection_out_W")]
    pub convection_out_w: f64,
    /// Heat leaving through the fixed temperatures: the reaction −Σ_fixed nodes R_a \[W\].
    #[serde(rename = "fixed_out_W")]
    pub fixed_out_w: f64,
    /// Transient runs: the rate at which the body stores heat, ∫ ρc ∂T/∂t dΩ with the time
    /// scheme's own difference quotient (zero in a steady state) \[W\].
    #[serde(rename = "stored_W")]
    pub stored_w: f64,
    /// Per boundary condition (in the order given): heat leaving through it \[W\] (negative for
    /// heat entering).
    #[serde(rename = "per_boundary_W")]
    pub per_boundary_w: Vec<(String, f64)>,
}

impl HeatBalance {
    /// (in − out − stored) relative to the largest of the inflow, the outflow and the single
    /// terms (a cooling body has no inflow, and its outflow and stored heat cancel): zero at a
    /// converged solution.
    pub fn relative_imbalance(&self) -> f64 {
        let inflow = self.generated_w + self.flux_in_w;
        let outflow = self.convection_out_w + self.fixed_out_w + self.stored_w;
        let scale = [
            inflow,
            outflow,
            self.generated_w,
            self.flux_in_w,
            self.convection_out_w,
            self.fixed_out_w,
            self.stored_w,
        ]
        .iter()
        .fold(f64::MIN_POSITIVE, |m, v| m.max(v.abs()));
        (inflow - outflow) / scale
    }
}

/// The discrete steady heat-conduction problem on one mesh.
#[derive(Clone, Debug)]
pub struct ThermalModel {
    /// Node coordinates (the shape parameter; same numbering as the mesh).
    pub coords: Vec<[f64; 3]>,
    node_tags: Vec<u64>,
    blocks: Vec<ElemBlock>,
    elem_block: Vec<u8>,
    pub(crate) elem_tag: Vec<u32>,
    /// Where each element's nodes start in `elem_nodes` (a stride for one cell type).
    elem_offsets: Offsets,
    elem_nodes: Vec<usize>,
    /// The mesh cell and file tag behind each element.
    elem_cells: CellRuns,
    pub(crate) n_volume: usize,
    /// Regions, in the order given.
    pub regions: Vec<Region>,
    /// Conductivity scale k₀ of each volume element.
    pub k_elem: Vec<f64>,
    /// Boundary conditions, in the order given.
    pub boundaries: Vec<Boundary>,
    /// Prescribed nodal temperatures (NaN where the node is not fixed).
    fixed: Vec<f64>,
    /// Numbering of the unknowns.
    pub dofs: NodalDofMap,
    /// Volume elements of every 3D group of the mesh that the model covers, by group name.
    /// (A group that covers every volume element shares the list of `"*"`.)
    group_elements: HashMap<String, Arc<[usize]>>,
    /// Offsets of each volume element's quadrature points in per-point arrays.
    qp_offsets: Offsets,
    /// An external source per quadrature point of the volume elements [W/m³] (Joule heat
    /// handed over by the electrical field), added to the regions' sources.
    external_source: Option<Vec<f64>>,
}

fn resolve<'m>(
    mesh: &'m Mesh,
    name: &str,
) -> Result<&'m gradfem_mesh::PhysicalGroup, ThermalError> {
    mesh.group(name).map_err(|_| ThermalError::UnknownGroup {
        name: name.to_string(),
        known: mesh.group_names(),
    })
}

fn check_finite(what: String, value: f64) -> Result<(), ThermalError> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(ThermalError::InvalidValue { what, requirement: "finite", value })
    }
}

impl ThermalModel {
    /// Set up the model on `mesh` with materials per volume group and boundary conditions per
    /// group. Volume cells outside every region are not part of the model.
    pub fn new(mesh: &Mesh, regions: &[RegionSpec], bcs: &[BcSpec]) -> Result<Self, ThermalError> {
        let started = std::time::Instant::now();
        let mut blocks: Vec<ElemBlock> = Vec::new();
        let mut block_of_type: HashMap<(CellType, bool), u8> = HashMap::new();
        let mut block_index = |ct: CellType, volume: bool, blocks: &mut Vec<ElemBlock>| -> u8 {
            *block_of_type.entry((ct, volume)).or_insert_with(|| {
                let degree = 2 * ct.order();
                blocks.push(ElemBlock {
                    cell_type: ct,
                    table: ElementTable::new(ct, degree),
                    volume,
                });
                (blocks.len() - 1) as u8
            })
        };

        // Exact capacities: at 10⁷ unknowns a doubling growth would leave gigabytes unused.
        let mut n_elements = 0;
        let mut n_entries = 0;
        let mut count = |name: &str| {
            if let Ok(g) = resolve(mesh, name) {
                n_elements += g.cells.len();
                n_entries += g.cells.iter().map(|&c| mesh.cell_type(c).n_nodes()).sum::<usize>();
            }
        };
        regions.iter().for_each(|r| count(&r.group));
        bcs.iter()
            .filter(|b| !matches!(b.kind, BcKind::Temperature { .. }))
            .for_each(|b| count(&b.group));
        let mut elem_block = Vec::with_capacity(n_elements);
        let mut elem_tag = Vec::with_capacity(n_elements);
        let mut elem_offsets = Offsets::default();
        let mut elem_nodes = Vec::with_capacity(n_entries);
        let mut elem_cells = CellRuns::new();
        // Region of each mesh cell (per block, u32::MAX = none): flat arrays, not hash maps, so
        // set-up stays fast on meshes of millions of cells.
        let mut owner: Vec<Vec<u32>> = mesh
            .blocks
            .iter()
            .map(|b| vec![u32::MAX; if b.cell_type.dim() == 3 { b.len() } else { 0 }])
            .collect();
        let mut out_regions = Vec::with_capacity(regions.len());

        for (r, spec) in regions.iter().enumerate() {
            let group = resolve(mesh, &spec.group)?;
            if group.dim != 3 {
                return Err(ThermalError::WrongDimension {
                    group: spec.group.clone(),
                    dim: group.dim,
                    expected: 3,
                    what: "a material region",
                });
            }
            check_finite(format!("thermal.k.{}", spec.group), spec.k0)?;
            check_finite(format!("thermal.q.{}", spec.group), spec.source)?;
            if spec.k0 <= 0.0 {
                return Err(ThermalError::InvalidValue {
                    what: format!("thermal.k.{}", spec.group),
                    requirement: "positive",
                    value: spec.k0,
                });
            }
            spec.law.validate().map_err(|_| ThermalError::InvalidValue {
                what: format!("conductivity law of '{}'", spec.group),
                requirement: "valid (finite, increasing table temperatures)",
                value: f64::NAN,
            })?;
            let first = elem_block.len();
            let mut last_block: Option<(CellType, u8)> = None;
            for &cell in &group.cells {
                let prev = owner[cell.block][cell.index];
                if prev != u32::MAX {
                    return Err(ThermalError::OverlappingRegions {
                        first: regions[prev as usize].group.clone(),
                        second: spec.group.clone(),
                        cell_tag: mesh.cell_tag(cell),
                    });
                }
                owner[cell.block][cell.index] = r as u32;
                let ct = mesh.cell_type(cell);
                if !matches!(
                    ct,
                    CellType::Tet4
                        | CellType::Tet10
                        | CellType::Hex8
                        | CellType::Hex20
                        | CellType::Hex27
                        | CellType::Prism6
                ) {
                    return Err(ThermalError::UnsupportedCell {
                        cell_type: ct,
                        role: "volume cell",
                    });
                }
                let b = match last_block {
                    Some((c, b)) if c == ct => b,
                    _ => {
                        let b = block_index(ct, true, &mut blocks);
                        last_block = Some((ct, b));
                        b
                    }
                };
                elem_block.push(b);
                elem_tag.push(r as u32);
                elem_nodes.extend_from_slice(mesh.cell_nodes(cell));
                elem_offsets.push(ct.n_nodes());
                elem_cells.push(cell, mesh.cell_tag(cell));
            }
            out_regions.push(Region {
                name: spec.group.clone(),
                law: spec.law.clone(),
                source: spec.source,
                elements: first..elem_block.len(),
            });
        }
        let n_volume = elem_block.len();
        if n_volume == 0 {
            return Err(ThermalError::NoVolumeCells);
        }
        let mut k_elem = vec![0.0; n_volume];
        for (spec, region) in regions.iter().zip(&out_regions) {
            for e in region.elements.clone() {
                k_elem[e] = spec.k0;
            }
        }

        // Nodes that carry the field: those of the volume elements.
        let mut active = vec![false; mesh.n_nodes()];
        for &n in &elem_nodes {
            active[n] = true;
        }

        let mut fixed = vec![f64::NAN; mesh.n_nodes()];
        let mut fixed_by: Vec<u32> = vec![u32::MAX; mesh.n_nodes()];
        let mut boundaries = Vec::with_capacity(bcs.len());
        for (bi, spec) in bcs.iter().enumerate() {
            let group = resolve(mesh, &spec.group)?;
            let mut nodes = mesh.group_nodes(group);
            nodes.retain(|&n| active[n]);
            let mut elements = Vec::new();
            match spec.kind {
                BcKind::Temperature { value } => {
                    check_finite(format!("bc.{}.temperature", spec.group), value)?;
                    for &n in &nodes {
                        if fixed_by[n] != u32::MAX && fixed[n] != value {
                            let prev = fixed_by[n] as usize;
                            return Err(ThermalError::ConflictingTemperatures {
                                node_tag: mesh.node_tags[n],
                                position: mesh.coords[n],
                                first: bcs[prev].group.clone(),
                                first_value: fixed[n],
                                second: spec.group.clone(),
                                second_value: value,
                            });
                        }
                        if fixed_by[n] == u32::MAX {
                            fixed[n] = value;
                            fixed_by[n] = bi as u32;
                        }
                    }
                }
                BcKind::HeatFlux { q_in } => {
                    check_finite(format!("bc.{}.flux", spec.group), q_in)?;
                }
                BcKind::Convection { h, t_inf } => {
                    check_finite(format!("bc.{}.h", spec.group), h)?;
                    check_finite(format!("bc.{}.t_inf", spec.group), t_inf)?;
                    if h < 0.0 {
                        return Err(ThermalError::InvalidValue {
                            what: format!("bc.{}.h", spec.group),
                            requirement: "non-negative",
                            value: h,
                        });
                    }
                }
            }
            if !matches!(spec.kind, BcKind::Temperature { .. }) {
                if group.dim != 2 {
                    return Err(ThermalError::WrongDimension {
                        group: spec.group.clone(),
                        dim: group.dim,
                        expected: 2,
                        what: "a flux or convection condition",
                    });
                }
                for &cell in &group.cells {
                    let ct = mesh.cell_type(cell);
                    if !matches!(
                        ct,
                        CellType::Tri3
                            | CellType::Tri6
                            | CellType::Quad4
                            | CellType::Quad8
                            | CellType::Quad9
                    ) {
                        return Err(ThermalError::UnsupportedCell {
                            cell_type: ct,
                            role: "boundary facet",
                        });
                    }
                    let b = block_index(ct, false, &mut blocks);
                    elements.push(elem_block.len());
                    elem_block.push(b);
                    elem_tag.push(bi as u32);
                    elem_nodes.extend_from_slice(mesh.cell_nodes(cell));
                    elem_offsets.push(ct.n_nodes());
                    elem_cells.push(cell, mesh.cell_tag(cell));
                }
            }
            boundaries.push(Boundary {
                name: spec.group.clone(),
                kind: spec.kind.clone(),
                nodes,
                elements,
            });
        }

        let has_reference = fixed_by.iter().any(|&b| b != u32::MAX)
            || boundaries.iter().any(|b: &Boundary| {
                matches!(b.kind, BcKind::Convection { h, .. } if h > 0.0) && !b.elements.is_empty()
            });
        if !has_reference {
            return Err(ThermalError::NoTemperatureReference);
        }
        let dofs = NodalDofMap::new(mesh.n_nodes(), |n| active[n] && fixed_by[n] == u32::MAX);

        // Model element of each covered cell (volume elements follow the regions' cell order).
        let mut index: Vec<Vec<u32>> = owner.iter().map(|o| vec![u32::MAX; o.len()]).collect();
        for (e, c) in elem_cells.cells().enumerate().take(n_volume) {
            index[c.block][c.index] = e as u32;
        }
        let all: Arc<[usize]> = (0..n_volume).collect();
        let mut group_elements = HashMap::new();
        for g in mesh.groups.iter().filter(|g| g.dim == 3) {
            let mut els = Vec::with_capacity(g.cells.len());
            els.extend(
                g.cells
                    .iter()
                    .map(|c| index[c.block][c.index])
                    .filter(|&e| e != u32::MAX)
                    .map(|e| e as usize),
            );
            els.sort_unstable();
            els.dedup();
            let els: Arc<[usize]> = if els.len() == n_volume { all.clone() } else { els.into() };
            if !els.is_empty() {
                group_elements.insert(g.name.clone(), els);
            }
        }
        group_elements.insert("*".to_string(), all);

        let model = ThermalModel {
            coords: mesh.coords.clone(),
            node_tags: mesh.node_tags.clone(),
            blocks,
            elem_block,
            elem_tag,
            elem_offsets,
            elem_nodes,
            elem_cells,
            n_volume,
            regions: out_regions,
            k_elem,
            boundaries,
            fixed,
            dofs,
            group_elements,
            qp_offsets: Offsets::default(),
            external_source: None,
        };
        let mut model = model;
        model.qp_offsets = Offsets::from_lengths(
            (0..n_volume).map(|e| model.blocks[model.elem_block[e] as usize].table.n_points()),
        );
        let built = started.elapsed().as_secs_f64();
        model.check_orientation()?;
        tracing::debug!(
            elements = model.n_elements(),
            build_s = built,
            orientation_check_s = started.elapsed().as_secs_f64() - built,
            "thermal model set up"
        );
        Ok(model)
    }

    /// Every volume element must have a positive Jacobian determinant at its quadrature points.
    fn check_orientation(&self) -> Result<(), ThermalError> {
        let bad = (0..self.n_volume).into_par_iter().find_first(|&e| {
            let blk = &self.blocks[self.elem_block[e] as usize];
            let x = self.element_coords(e);
            if blk.cell_type == CellType::Tet4 {
                // Affine: one determinant decides.
                return tet4_det(&x).partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater);
            }
            let mut g = [[0.0; 3]; MAX_NODES];
            (0..blk.table.n_points()).any(|q| {
                let det = geometry::physical_gradients_into(
                    3,
                    blk.table.grad(q),
                    &x[..blk.cell_type.n_nodes()],
                    &mut g[..blk.cell_type.n_nodes()],
                );
                det.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
            })
        });
        if let Some(e) = bad {
            let blk = &self.blocks[self.elem_block[e] as usize];
            let x = self.element_coords(e);
            let n = blk.cell_type.n_vertices();
            let mut c = [0.0; 3];
            for p in &x[..n] {
                for k in 0..3 {
                    c[k] += p[k] / n as f64;
                }
            }
            let mut g = [[0.0; 3]; MAX_NODES];
            let det = (0..blk.table.n_points())
                .map(|q| {
                    geometry::physical_gradients_into(
                        3,
                        blk.table.grad(q),
                        &x[..blk.cell_type.n_nodes()],
                        &mut g[..blk.cell_type.n_nodes()],
                    )
                })
                .fold(f64::INFINITY, f64::min);
            return Err(ThermalError::InvertedCell {
                cell_tag: self.elem_cells.tag(e),
                cell_type: blk.cell_type,
                det_j: det,
                centroid: c,
            });
        }
        Ok(())
    }

    /// Re-check element orientation after the coordinates changed (shape perturbation).
    pub fn check_coordinates(&self) -> Result<(), ThermalError> {
        self.check_orientation()
    }

    /// Number of unknowns (free nodal temperatures).
    pub fn n_unknowns(&self) -> usize {
        self.dofs.n_unknowns()
    }

    /// Number of nodes of the mesh.
    pub fn n_nodes(&self) -> usize {
        self.coords.len()
    }

    /// Number of elements the assembly loops over (volume cells, then boundary facets).
    pub fn n_elements(&self) -> usize {
        self.elem_block.len()
    }

    /// Number of volume elements (the first `n_volume_elements()` elements).
    pub fn n_volume_elements(&self) -> usize {
        self.n_volume
    }

    /// Element offsets into [`ThermalModel::element_dofs`] (length `n_elements() + 1`), formed
    /// on each call (the model keeps a stride where every element has the same node count).
    pub fn element_offsets(&self) -> Vec<usize> {
        self.elem_offsets.to_vec()
    }

    /// Where element `e`'s entries sit in [`element_dofs`](Self::element_dofs) (and its nodes
    /// in the flat node list).
    pub fn element_entries(&self, e: usize) -> std::ops::Range<usize> {
        self.elem_offsets.range(e)
    }

    /// Local dofs of all elements: unknown indices or [`CONSTRAINED`], in the layout of
    /// [`element_nodes`](Self::element_nodes). Formed on each call from the nodes (the model
    /// keeps no copy: the assembly pattern, the one reader, keeps its own compact one).
    pub fn element_dofs(&self) -> Vec<usize> {
        self.elem_nodes
            .par_iter()
            .map(|&n| self.dofs.unknown_of_node[n].unwrap_or(CONSTRAINED))
            .collect()
    }

    /// The mesh nodes of element `e`.
    pub fn element_nodes(&self, e: usize) -> &[usize] {
        &self.elem_nodes[self.elem_offsets.range(e)]
    }

    /// The original tag of the mesh cell behind element `e`.
    pub fn element_cell_tag(&self, e: usize) -> u64 {
        self.elem_cells.tag(e)
    }

    /// The mesh cell behind element `e`.
    pub fn element_cell(&self, e: usize) -> CellId {
        self.elem_cells.cell(e)
    }

    /// For each node, the fixed-temperature condition that sets its value (the first one that
    /// names it), if any.
    pub fn fixed_owner(&self) -> Vec<Option<usize>> {
        let mut owner = vec![None; self.coords.len()];
        for (b, bc) in self.boundaries.iter().enumerate() {
            if let BcKind::Temperature { .. } = bc.kind {
                for &n in &bc.nodes {
                    if owner[n].is_none() {
                        owner[n] = Some(b);
                    }
                }
            }
        }
        owner
    }

    /// The cell type of element `e`.
    pub fn element_cell_type(&self, e: usize) -> CellType {
        self.blocks[self.elem_block[e] as usize].cell_type
    }

    /// The region index of volume element `e`.
    pub fn element_region(&self, e: usize) -> usize {
        assert!(e < self.n_volume, "element {e} is not a volume element");
        self.elem_tag[e] as usize
    }

    /// True when the problem is linear in T (every region has a constant conductivity).
    pub fn is_linear(&self) -> bool {
        self.regions.iter().all(|r| r.law.is_constant())
    }

    /// True when the tangent is symmetric (constant conductivity everywhere).
    pub fn is_symmetric(&self) -> bool {
        self.is_linear()
    }

    /// Nodal temperatures from the unknowns and the fixed values (NaN at inactive nodes).
    pub fn nodal_temperature(&self, unknowns: &[f64]) -> Vec<f64> {
        let mut t = self.fixed.clone();
        self.dofs.scatter(unknowns, &mut t);
        t
    }

    /// The heat balance at nodal temperatures `t` (a converged solution): sources, fluxes,
    /// convection and the reactions at fixed temperatures. The reactions are the consistent
    /// nodal heat flows −R_a (R assembled from every element, volume and facet).
    pub fn heat_balance(&self, t: &[f64]) -> HeatBalance {
        let zero =
            KernelParams { k0: 0.0, source: 0.0, h: 0.0, t_inf: 0.0, q_in: 0.0, external: false };
        // ∫ Q dΩ: the volume kernel with k₀ = 0 gives −∫ Q N_a, and Σ_a N_a = 1.
        let generated: f64 = (0..self.n_volume)
            .into_par_iter()
            .map(|e| {
                let nn = self.element_nodes(e).len();
                let mut fe = [0.0; MAX_NODES];
                let p = KernelParams { source: self.params_of(e).source, external: true, ..zero };
                self.kernel(e, t, p, None, &mut fe[..nn]);
                -fe[..nn].iter().sum::<f64>()
            })
            .sum();
        let mut balance = HeatBalance { generated_w: generated, ..Default::default() };
        let mut residual = vec![0.0; self.n_nodes()];
        self.scatter_chunked(&mut residual, 1, |e, local| {
            self.kernel(e, t, self.params_of(e), None, local);
        });
        let owner = self.fixed_owner();
        for (b, bc) in self.boundaries.iter().enumerate() {
            let out = match bc.kind {
                BcKind::Temperature { .. } => {
                    let r: f64 = (0..owner.len())
                        .filter(|&n| owner[n] == Some(b))
                        .map(|n| residual[n])
                        .sum();
                    balance.fixed_out_w -= r;
                    -r
                }
                BcKind::Convection { .. } | BcKind::HeatFlux { .. } => {
                    let total: f64 = bc
                        .elements
                        .iter()
                        .map(|&e| {
                            let nn = self.element_nodes(e).len();
                            let mut fe = [0.0; MAX_NODES];
                            self.kernel(e, t, self.params_of(e), None, &mut fe[..nn]);
                            fe[..nn].iter().sum::<f64>()
                        })
                        .sum();
                    if matches!(bc.kind, BcKind::Convection { .. }) {
                        balance.convection_out_w += total;
                    } else {
                        balance.flux_in_w -= total;
                    }
                    total
                }
            };
            balance.per_boundary_w.push((bc.name.clone(), out));
        }
        balance
    }

    /// The heat balance of one time step of a θ-weighted scheme: the rates of
    /// [`ThermalModel::heat_balance`] weighted θ at `t_new` and 1 − θ at `t_old` (the steady
    /// residual the step balanced), and the stored heat `M ṫ` of the step's rate `rate`
    /// (nodal, the scheme's difference quotient; the mass matrix of heat capacities `rho_c`
    /// per volume element, lumped or consistent). The heat that the mass rows of fixed nodes
    /// store is part of what those nodes supply, so it is taken off their reaction; then
    /// generated + flux_in = convection_out + fixed_out + stored holds as exactly as the step
    /// was solved.
    pub fn transient_heat_balance(
        &self,
        t_new: &[f64],
        t_old: &[f64],
        theta: f64,
        rate: &[f64],
        rho_c: &[f64],
        lumped: bool,
    ) -> HeatBalance {
        let mut balance = self.heat_balance(t_new);
        if theta < 1.0 {
            let old = self.heat_balance(t_old);
            let mix = |a: f64, b: f64| theta * a + (1.0 - theta) * b;
            balance.generated_w = mix(balance.generated_w, old.generated_w);
            balance.flux_in_w = mix(balance.flux_in_w, old.flux_in_w);
            balance.convection_out_w = mix(balance.convection_out_w, old.convection_out_w);
            balance.fixed_out_w = mix(balance.fixed_out_w, old.fixed_out_w);
            for (b, (_, w)) in balance.per_boundary_w.iter_mut().enumerate() {
                *w = mix(*w, old.per_boundary_w[b].1);
            }
        }
        let owner = self.fixed_owner();
        // Fixed temperatures do not change in time: their rate is zero, not rounding.
        let rate: Vec<f64> =
            rate.iter().zip(&owner).map(|(&r, o)| if o.is_some() { 0.0 } else { r }).collect();
        let mut stored = vec![0.0; self.n_nodes()];
        self.scatter_chunked(&mut stored, 1, |e, local| {
            if e >= self.n_volume {
                return;
            }
            let nodes = self.element_nodes(e);
            let nn = nodes.len();
            let mut me = [0.0; MAX_NODES * MAX_NODES];
            self.element_mass_into(e, rho_c[e], lumped, &mut me[..nn * nn]);
            for a in 0..nn {
                local[a] = (0..nn).map(|b| me[a * nn + b] * rate[nodes[b]]).sum();
            }
        });
        balance.stored_w = stored.iter().sum();
        for (b, bc) in self.boundaries.iter().enumerate() {
            if let BcKind::Temperature { .. } = bc.kind {
                let held: f64 =
                    (0..owner.len()).filter(|&n| owner[n] == Some(b)).map(|n| stored[n]).sum();
                balance.fixed_out_w -= held;
                balance.per_boundary_w[b].1 -= held;
            }
        }
        balance
    }

    /// A starting temperature for Newton: the mean of the fixed temperatures and ambient
    /// temperatures of the boundary conditions (a temperature-dependent law may be unphysical
    /// far from them, e.g. at 0 K).
    pub fn reference_temperature(&self) -> f64 {
        let vals: Vec<f64> = self
            .boundaries
            .iter()
            .filter_map(|b| match b.kind {
                BcKind::Temperature { value } => Some(value),
                BcKind::Convection { t_inf, .. } => Some(t_inf),
                BcKind::HeatFlux { .. } => None,
            })
            .collect();
        if vals.is_empty() { 0.0 } else { vals.iter().sum::<f64>() / vals.len() as f64 }
    }

    /// Check that k(T) > 0 at every quadrature point of every volume element (only laws that
    /// depend on T can fail); the error names the first offending cell.
    pub fn check_conductivity(&self, t: &[f64]) -> Result<(), ThermalError> {
        if self.is_linear() {
            return Ok(());
        }
        let bad = (0..self.n_volume).into_par_iter().find_map_first(|e| {
            let blk = &self.blocks[self.elem_block[e] as usize];
            let region = &self.regions[self.elem_tag[e] as usize];
            let nodes = self.element_nodes(e);
            (0..blk.table.n_points()).find_map(|q| {
                let tq: f64 = blk.table.shape(q).iter().zip(nodes).map(|(n, &a)| n * t[a]).sum();
                let k = self.k_elem[e] * region.law.factor(tq);
                (k.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)).then_some((e, tq, k))
            })
        });
        if let Some((e, tq, k)) = bad {
            let x = self.element_coords(e);
            let nv = self.element_cell_type(e).n_vertices();
            let mut c = [0.0; 3];
            for p in &x[..nv] {
                for i in 0..3 {
                    c[i] += p[i] / nv as f64;
                }
            }
            return Err(ThermalError::NonPositiveConductivity {
                cell_tag: self.elem_cells.tag(e),
                region: self.regions[self.elem_tag[e] as usize].name.clone(),
                temperature: tq,
                k,
                centroid: c,
            });
        }
        Ok(())
    }

    /// The element heat-capacity (mass) matrix M_ab = ∫ ρc N_a N_b dΩ of element `e`
    /// (row-major nn×nn, zero for facets), added into `me`. With `lumped`, the HRZ rule: the
    /// diagonal scaled to the element's total ∫ ρc dΩ, which stays positive on P2 cells where
    /// row sums do not.
    pub fn element_mass_into(&self, e: usize, rho_c: f64, lumped: bool, me: &mut [f64]) {
        if e >= self.n_volume {
            return;
        }
        let blk = &self.blocks[self.elem_block[e] as usize];
        let nn = blk.cell_type.n_nodes();
        let x = self.element_coords(e);
        let mut local = [0.0; MAX_NODES * MAX_NODES];
        let mut g = [[0.0; 3]; MAX_NODES];
        for q in 0..blk.table.n_points() {
            let det =
                geometry::physical_gradients_into(3, blk.table.grad(q), &x[..nn], &mut g[..nn]);
            let w = blk.table.weights[q] * det * rho_c;
            let n = blk.table.shape(q);
            for a in 0..nn {
                for b in 0..nn {
                    local[a * nn + b] += w * n[a] * n[b];
                }
            }
        }
        if lumped {
            let total: f64 = local[..nn * nn].iter().sum();
            let diag: f64 = (0..nn).map(|a| local[a * nn + a]).sum();
            for a in 0..nn {
                for b in 0..nn {
                    local[a * nn + b] = if a == b { local[a * nn + a] * total / diag } else { 0.0 };
                }
            }
        }
        me.iter_mut().zip(&local[..nn * nn]).for_each(|(m, l)| *m += l);
    }

    /// Offsets of each volume element's quadrature points in per-point arrays (length
    /// `n_volume_elements() + 1`). The points are those of `ElementTable::new(ct, 2·order)`, in
    /// table order.
    pub fn qp_offsets(&self) -> &Offsets {
        &self.qp_offsets
    }

    /// The external source per quadrature point, if one is set.
    pub fn external_source(&self) -> Option<&[f64]> {
        self.external_source.as_deref()
    }

    /// Set (or clear) an external source per quadrature point of the volume elements [W/m³],
    /// added to the regions' sources: the Joule heat of the electrical field.
    pub fn set_external_source(&mut self, source: Option<Vec<f64>>) {
        if let Some(s) = &source {
            assert_eq!(
                s.len(),
                self.qp_offsets.total(),
                "external source has {} values for {} quadrature points",
                s.len(),
                self.qp_offsets.total()
            );
        }
        self.external_source = source;
    }

    /// (∂R/∂Q) δQ at every node for a change `dq` of the external source (one value per
    /// quadrature point): −Σ_q w_q det J N_a(x_q) δQ_q, the forward of
    /// [`external_source_vjp`](Self::external_source_vjp).
    pub fn external_source_jvp(&self, dq: &[f64]) -> Vec<f64> {
        let locals: Vec<[f64; MAX_NODES]> = (0..self.n_volume)
            .into_par_iter()
            .map(|e| {
                let blk = &self.blocks[self.elem_block[e] as usize];
                let nn = self.element_nodes(e).len();
                let x = self.element_coords(e);
                let mut g = [[0.0; 3]; MAX_NODES];
                let mut out = [0.0; MAX_NODES];
                let o = self.qp_offsets.start(e);
                for q in 0..blk.table.n_points() {
                    let det = geometry::physical_gradients_into(
                        3,
                        blk.table.grad(q),
                        &x[..nn],
                        &mut g[..nn],
                    );
                    let c = blk.table.weights[q] * det * dq[o + q];
                    for (oa, na) in out.iter_mut().zip(blk.table.shape(q)) {
                        *oa -= c * na;
                    }
                }
                out
            })
            .collect();
        let mut total = vec![0.0; self.n_nodes()];
        for (e, l) in locals.iter().enumerate() {
            for (a, &n) in self.element_nodes(e).iter().enumerate() {
                total[n] += l[a];
            }
        }
        total
    }

    /// λᵀ ∂R/∂Q_q for every quadrature point q of the volume elements: −w_q det J λ(x_q), the
    /// reverse of handing a per-point source to this field.
    pub fn external_source_vjp(&self, lambda: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; self.qp_offsets.total()];
        let runs = (0..self.n_volume).map(|e| self.qp_offsets.range(e).len());
        let chunks = gradfem_kernel::split_runs(&mut out, runs);
        chunks.into_par_iter().enumerate().for_each(|(e, o)| {
            let blk = &self.blocks[self.elem_block[e] as usize];
            let nodes = self.element_nodes(e);
            let nn = nodes.len();
            let x = self.element_coords(e);
            let mut g = [[0.0; 3]; MAX_NODES];
            for (q, oq) in o.iter_mut().enumerate() {
                let det =
                    geometry::physical_gradients_into(3, blk.table.grad(q), &x[..nn], &mut g[..nn]);
                let lq: f64 =
                    blk.table.shape(q).iter().zip(nodes).map(|(n, &a)| n * lambda[a]).sum();
                *oq = -blk.table.weights[q] * det * lq;
            }
        });
        out
    }

    /// ∂R_a/∂Q_q of volume element `e` for the external source at its quadrature points:
    /// −w_q det J N_a(x_q), added row-major into `out` (element nodes × the element's points).
    /// False for facets, which take no source.
    pub fn element_source_tangent(&self, e: usize, out: &mut [f64]) -> bool {
        if e >= self.n_volume {
            return false;
        }
        let blk = &self.blocks[self.elem_block[e] as usize];
        let nn = self.element_nodes(e).len();
        let nq = blk.table.n_points();
        assert_eq!(out.len(), nn * nq, "element_source_tangent: buffer of nodes × points");
        let x = self.element_coords(e);
        let mut g = [[0.0; 3]; MAX_NODES];
        for q in 0..nq {
            let det =
                geometry::physical_gradients_into(3, blk.table.grad(q), &x[..nn], &mut g[..nn]);
            let w = blk.table.weights[q] * det;
            for (a, na) in blk.table.shape(q).iter().enumerate() {
                out[a * nq + q] -= w * na;
            }
        }
        true
    }

    /// Set the value of fixed-temperature condition `bc`. A node fixed by several conditions
    /// takes the value of the first (the set-up rejects conflicting values).
    pub fn set_fixed_temperature(&mut self, bc: usize, value: f64) {
        let b = &mut self.boundaries[bc];
        let BcKind::Temperature { value: v } = &mut b.kind else {
            panic!("boundary condition {bc} ('{}') is not a fixed temperature", b.name);
        };
        *v = value;
        let mut done = vec![false; self.coords.len()];
        for b in &self.boundaries {
            if let BcKind::Temperature { value } = b.kind {
                for &n in &b.nodes {
                    if !done[n] {
                        done[n] = true;
                        self.fixed[n] = value;
                    }
                }
            }
        }
    }

    /// Set a flux or convection parameter of condition `bc`.
    pub fn set_boundary_kind(&mut self, bc: usize, kind: BcKind) {
        let b = &mut self.boundaries[bc];
        assert_eq!(
            std::mem::discriminant(&b.kind),
            std::mem::discriminant(&kind),
            "condition '{}' cannot change its kind",
            b.name
        );
        if let BcKind::Temperature { value } = kind {
            self.set_fixed_temperature(bc, value);
        } else {
            b.kind = kind;
        }
    }

    /// A description of mesh node `n` for messages: tag and position.
    pub fn describe_node(&self, n: usize) -> String {
        let p = self.coords[n];
        format!("node {} at ({:.6e}, {:.6e}, {:.6e})", self.node_tags[n], p[0], p[1], p[2])
    }

    /// A description of unknown `dof` for messages.
    pub fn describe_dof(&self, dof: usize) -> String {
        self.describe_node(self.dofs.node_of_unknown[dof])
    }

    /// The node coordinates of element `e` in a fixed-size buffer (its first
    /// `element_nodes(e).len()` rows; no allocation).
    pub fn element_coords(&self, e: usize) -> [[f64; 3]; MAX_NODES] {
        let mut x = [[0.0; 3]; MAX_NODES];
        for (xa, &n) in x.iter_mut().zip(self.element_nodes(e)) {
            *xa = self.coords[n];
        }
        x
    }

    pub(crate) fn params_of(&self, e: usize) -> KernelParams {
        let mut p =
            KernelParams { k0: 0.0, source: 0.0, h: 0.0, t_inf: 0.0, q_in: 0.0, external: true };
        if e < self.n_volume {
            p.k0 = self.k_elem[e];
            p.source = self.regions[self.elem_tag[e] as usize].source;
        } else {
            match self.boundaries[self.elem_tag[e] as usize].kind {
                BcKind::Convection { h, t_inf } => {
                    p.h = h;
                    p.t_inf = t_inf;
                }
                BcKind::HeatFlux { q_in } => p.q_in = q_in,
                BcKind::Temperature { .. } => {}
            }
        }
        p
    }

    /// Element residual `fe` (and tangent `ke`, row-major nn×nn, when given) of element `e` at
    /// nodal temperatures `t` (all nodes). Both buffers must be zeroed by the caller.
    pub fn element_residual_tangent(
        &self,
        e: usize,
        t: &[f64],
        ke: Option<&mut [f64]>,
        fe: &mut [f64],
    ) {
        self.kernel(e, t, self.params_of(e), ke, fe);
    }

    fn kernel(&self, e: usize, t: &[f64], p: KernelParams, ke: Option<&mut [f64]>, fe: &mut [f64]) {
        let blk = &self.blocks[self.elem_block[e] as usize];
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let x = self.element_coords(e);
        let mut te = [0.0; MAX_NODES];
        for (ta, &n) in te.iter_mut().zip(nodes) {
            *ta = t[n];
        }
        if blk.volume {
            let law = &self.regions[self.elem_tag[e] as usize].law;
            let ext = if p.external { self.external_source.as_deref() } else { None }
                .map(|q| &q[self.qp_offsets.range(e)]);
            if blk.cell_type == CellType::Tet4 && law.is_constant() && ext.is_none() {
                tet4_linear_kernel(&x, &te, p.k0, p.source, ke, fe);
                return;
            }
            let mut g = [[0.0; 3]; MAX_NODES];
            let mut ke = ke;
            for q in 0..blk.table.n_points() {
                let det =
                    geometry::physical_gradients_into(3, blk.table.grad(q), &x[..nn], &mut g[..nn]);
                let w = blk.table.weights[q] * det;
                let n = blk.table.shape(q);
                let mut tq = 0.0;
                let mut gt = [0.0; 3];
                for a in 0..nn {
                    tq += n[a] * te[a];
                    for k in 0..3 {
                        gt[k] += g[a][k] * te[a];
                    }
                }
                let (f, df) = law.factor_and_slope(tq);
                let k = p.k0 * f;
                let dk = p.k0 * df;
                let source = p.source + ext.map_or(0.0, |x| x[q]);
                for a in 0..nn {
                    let ga_gt = g[a][0] * gt[0] + g[a][1] * gt[1] + g[a][2] * gt[2];
                    fe[a] += w * (k * ga_gt - source * n[a]);
                    if let Some(ke) = ke.as_deref_mut() {
                        let row = &mut ke[a * nn..(a + 1) * nn];
                        for b in 0..nn {
                            let gab = g[a][0] * g[b][0] + g[a][1] * g[b][1] + g[a][2] * g[b][2];
                            row[b] += w * (k * gab + dk * n[b] * ga_gt);
                        }
                    }
                }
            }
        } else {
            let mut ke = ke;
            for q in 0..blk.table.n_points() {
                let da = geometry::measure_density(2, blk.table.grad(q), &x[..nn]);
                let w = blk.table.weights[q] * da;
                let n = blk.table.shape(q);
                let tq: f64 = (0..nn).map(|a| n[a] * te[a]).sum();
                let flux_out = p.h * (tq - p.t_inf) - p.q_in;
                for a in 0..nn {
                    fe[a] += w * flux_out * n[a];
                    if let Some(ke) = ke.as_deref_mut() {
                        for b in 0..nn {
                            ke[a * nn + b] += w * p.h * n[a] * n[b];
                        }
                    }
                }
            }
        }
    }

    /// The element residual generic over the scalar (for dual-number derivatives and tests):
    /// coordinates `x`, nodal temperatures `te` and parameters as scalars of type D.
    #[allow(clippy::too_many_arguments)]
    pub fn element_residual_generic<D: DualNum<Primitive = f64> + Copy>(
        &self,
        e: usize,
        x: &[[D; 3]],
        te: &[D],
        k0: D,
        source: D,
        h: D,
        t_inf: D,
        q_in: D,
        out: &mut [D],
    ) {
        let blk = &self.blocks[self.elem_block[e] as usize];
        let nn = blk.cell_type.n_nodes();
        out[..nn].iter_mut().for_each(|o| *o = D::from(0.0));
        if blk.volume {
            let law = &self.regions[self.elem_tag[e] as usize].law;
            let mut g = [[D::from(0.0); 3]; MAX_NODES];
            for q in 0..blk.table.n_points() {
                let det = generic::physical_gradients(blk.table.grad(q), &x[..nn], &mut g[..nn]);
                let w = det * blk.table.weights[q];
                let n = blk.table.shape(q);
                let mut tq = D::from(0.0);
                let mut gt = [D::from(0.0); 3];
                for a in 0..nn {
                    tq += te[a] * n[a];
                    for k in 0..3 {
                        gt[k] += g[a][k] * te[a];
                    }
                }
                let flux = crate::law::heat_flux(k0, law, tq, gt);
                for a in 0..nn {
                    let ga_q = g[a][0] * flux[0] + g[a][1] * flux[1] + g[a][2] * flux[2];
                    out[a] += w * (-ga_q - source * n[a]);
                }
            }
        } else {
            for q in 0..blk.table.n_points() {
                let da = generic::area_density(blk.table.grad(q), &x[..nn]);
                let w = da * blk.table.weights[q];
                let n = blk.table.shape(q);
                let mut tq = D::from(0.0);
                for a in 0..nn {
                    tq += te[a] * n[a];
                }
                let flux_out = h * (tq - t_inf) - q_in;
                for a in 0..nn {
                    out[a] += w * flux_out * n[a];
                }
            }
        }
    }

    /// λᵀ ∂R/∂p for every parameter, at nodal temperatures `t`, for the adjoint `lambda` given
    /// at every node (zero at fixed nodes). With `with_coords`, also λᵀ ∂R/∂X per node.
    pub fn parameter_vjp(&self, t: &[f64], lambda: &[f64], want: VjpRequest) -> ParameterVjp {
        let n_el = self.n_elements();
        let dot_local = |e: usize, fe: &[f64]| -> f64 {
            self.element_nodes(e).iter().zip(fe).map(|(&n, &r)| lambda[n] * r).sum()
        };
        let zero =
            KernelParams { k0: 0.0, source: 0.0, h: 0.0, t_inf: 0.0, q_in: 0.0, external: false };
        // Per-element derivative of λ·r with respect to the element's parameters: the residual is
        // linear in each, so ∂(λ·r)/∂p = λ·r(p = 1, others = 0) (minus the p-free part, which is
        // zero for every parameter here except T∞, handled through h).
        // Volume elements write λ·∂r/∂k₀ and λ·∂r/∂Q straight into per-element vectors (no
        // intermediate per-element records: on 10⁶-element meshes the allocation and the
        // extra pass cost as much as the arithmetic).
        let n_vol = self.n_volume;
        let mut k_elem = vec![0.0; n_vol];
        let mut q_elem = vec![0.0; if want.source { n_vol } else { 0 }];
        let volume = |e: usize, k_out: &mut f64, q_out: Option<&mut f64>| {
            let mut fe = [0.0; MAX_NODES];
            let nn = self.element_nodes(e).len();
            if self.element_cell_type(e) == CellType::Tet4
                && self.regions[self.elem_tag[e] as usize].law.is_constant()
            {
                // Affine Tet4, constant law: λ·∂r/∂k₀ = V ∇λ·∇T and λ·∂r/∂Q = −V/4 Σ λ_a,
                // written out (the hot path of per-element gradients on large meshes).
                let nodes = self.element_nodes(e);
                // only the four vertices (not the MAX_NODES-wide buffer of element_coords)
                let x = [0, 1, 2, 3].map(|a| self.coords[nodes[a]]);
                let (g, vol) = tet4_gradients(&x);
                let (mut gl, mut gt) = ([0.0; 3], [0.0; 3]);
                let mut lsum = 0.0;
                for a in 0..4 {
                    let (la, ta) = (lambda[nodes[a]], t[nodes[a]]);
                    lsum += la;
                    for k in 0..3 {
                        gl[k] += la * g[a][k];
                        gt[k] += ta * g[a][k];
                    }
                }
                if want.conductivity {
                    *k_out = vol * (gl[0] * gt[0] + gl[1] * gt[1] + gl[2] * gt[2]);
                }
                if let Some(q) = q_out {
                    *q = -0.25 * vol * lsum;
                }
            } else {
                if want.conductivity {
                    self.kernel(e, t, KernelParams { k0: 1.0, ..zero }, None, &mut fe[..nn]);
                    *k_out = dot_local(e, &fe[..nn]);
                }
                if let Some(q) = q_out {
                    fe[..nn].fill(0.0);
                    self.kernel(e, t, KernelParams { source: 1.0, ..zero }, None, &mut fe[..nn]);
                    *q = dot_local(e, &fe[..nn]);
                }
            }
        };
        if want.source {
            k_elem
                .par_iter_mut()
                .zip(q_elem.par_iter_mut())
                .enumerate()
                .with_min_len(1024)
                .for_each(|(e, (k, q))| volume(e, k, Some(q)));
        } else if want.conductivity {
            k_elem
                .par_iter_mut()
                .enumerate()
                .with_min_len(1024)
                .for_each(|(e, k)| volume(e, k, None));
        }
        // Boundary elements: λ·∂r/∂h, λ·∂r/∂T∞, λ·∂r/∂q_in.
        let boundary: Vec<[f64; 3]> = if want.boundary {
            (n_vol..n_el)
                .into_par_iter()
                .map(|e| {
                    let mut fe = [0.0; MAX_NODES];
                    let nn = self.element_nodes(e).len();
                    let p = self.params_of(e);
                    // ∂/∂h: (T − T∞) N
                    self.kernel(
                        e,
                        t,
                        KernelParams { h: 1.0, t_inf: p.t_inf, ..zero },
                        None,
                        &mut fe[..nn],
                    );
                    let dh = dot_local(e, &fe[..nn]);
                    // ∂/∂T∞: −h N; ∂/∂q_in: −N
                    let mut tmp = [0.0; MAX_NODES];
                    self.facet_shape_integral(e, &mut tmp[..nn]);
                    let n_lambda = dot_local(e, &tmp[..nn]);
                    [dh, -p.h * n_lambda, -n_lambda]
                })
                .collect()
        } else {
            Vec::new()
        };

        let mut vjp = ParameterVjp {
            k_elem,
            source: vec![0.0; self.regions.len()],
            h: vec![0.0; self.boundaries.len()],
            t_inf: vec![0.0; self.boundaries.len()],
            q_in: vec![0.0; self.boundaries.len()],
            temperature: vec![0.0; self.boundaries.len()],
            coords: None,
        };
        if want.source {
            for (r, region) in self.regions.iter().enumerate() {
                vjp.source[r] = region.elements.clone().map(|e| q_elem[e]).sum();
            }
        }
        let bnd = |e: usize| &boundary[e - n_vol];
        for (b, bc) in self.boundaries.iter().enumerate().filter(|_| want.boundary) {
            match bc.kind {
                BcKind::Convection { .. } => {
                    vjp.h[b] = bc.elements.iter().map(|&e| bnd(e)[0]).sum();
                    vjp.t_inf[b] = bc.elements.iter().map(|&e| bnd(e)[1]).sum();
                }
                BcKind::HeatFlux { .. } => {
                    vjp.q_in[b] = bc.elements.iter().map(|&e| bnd(e)[2]).sum();
                }
                BcKind::Temperature { .. } => {}
            }
        }
        // Fixed temperatures: (∂R/∂T_fixed)ᵀ λ, summed over the nodes each condition owns.
        let full = if want.temperature {
            self.tangent_transpose_product(t, lambda)
        } else {
            vec![0.0; self.n_nodes()]
        };
        let mut owner_done = vec![false; self.n_nodes()];
        for (b, bc) in self.boundaries.iter().enumerate() {
            if let BcKind::Temperature { .. } = bc.kind {
                let mut s = 0.0;
                for &n in &bc.nodes {
                    if !owner_done[n] {
                        owner_done[n] = true;
                        s += full[n];
                    }
                }
                vjp.temperature[b] = s;
            }
        }
        if want.coords {
            vjp.coords = Some(self.coordinate_vjp(t, lambda));
        }
        vjp
    }

    /// ∫ N_a dΓ of a facet element.
    fn facet_shape_integral(&self, e: usize, out: &mut [f64]) {
        let blk = &self.blocks[self.elem_block[e] as usize];
        let nn = out.len();
        let x = self.element_coords(e);
        for q in 0..blk.table.n_points() {
            let w =
                blk.table.weights[q] * geometry::measure_density(2, blk.table.grad(q), &x[..nn]);
            for (o, &n) in out.iter_mut().zip(blk.table.shape(q)) {
                *o += w * n;
            }
        }
    }

    /// (∂R/∂T)ᵀ λ over every node (fixed nodes included), from the element tangents.
    pub fn tangent_transpose_product(&self, t: &[f64], lambda: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; self.n_nodes()];
        self.scatter_chunked(&mut out, 1, |e, local| {
            let nn = self.element_nodes(e).len();
            let mut ke = [0.0; MAX_NODES * MAX_NODES];
            let mut fe = [0.0; MAX_NODES];
            self.kernel(e, t, self.params_of(e), Some(&mut ke[..nn * nn]), &mut fe[..nn]);
            let nodes = self.element_nodes(e);
            for b in 0..nn {
                local[b] = (0..nn).map(|a| ke[a * nn + b] * lambda[nodes[a]]).sum();
            }
        });
        out
    }

    /// λᵀ ∂R/∂X per node, with dual numbers over each element's 3·n coordinates.
    fn coordinate_vjp(&self, t: &[f64], lambda: &[f64]) -> Vec<[f64; 3]> {
        let mut flat = vec![0.0; 3 * self.n_nodes()];
        self.scatter_chunked(&mut flat, 3, |e, local| {
            if e < self.n_volume {
                self.volume_coordinate_vjp(e, t, lambda, local);
            } else {
                self.coordinate_vjp_dual(e, t, lambda, local);
            }
        });
        flat.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect()
    }

    /// λᵀ ∂rₑ/∂X of a volume element, in closed form. Moving node b in direction i changes
    /// det J by det J (∇N_b)ᵢ and every physical gradient by ∂(∇N_a)/∂X_bi = −∇N_b (∇N_a)ᵢ, while
    /// the values at the quadrature points stay put, so with ∇λ = Σ λ_a ∇N_a and λ_q = Σ λ_a N_a:
    ///
    /// λᵀ ∂r/∂X_bi = Σ_q w det J [ (∇N_b)ᵢ (k ∇λ·∇T − Q λ_q) − k (∇N_b·∇T)(∇λ)ᵢ − k (∇N_b·∇λ)(∇T)ᵢ ].
    ///
    /// Checked against the dual-number form in the tests.
    fn volume_coordinate_vjp(&self, e: usize, t: &[f64], lambda: &[f64], local: &mut [f64]) {
        let blk = &self.blocks[self.elem_block[e] as usize];
        let law = &self.regions[self.elem_tag[e] as usize].law;
        let p = self.params_of(e);
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let x = self.element_coords(e);
        let mut g = [[0.0; 3]; MAX_NODES];
        for q in 0..blk.table.n_points() {
            let det =
                geometry::physical_gradients_into(3, blk.table.grad(q), &x[..nn], &mut g[..nn]);
            let w = blk.table.weights[q] * det;
            let n = blk.table.shape(q);
            let (mut tq, mut lq) = (0.0, 0.0);
            let (mut gt, mut gl) = ([0.0; 3], [0.0; 3]);
            for a in 0..nn {
                let (ta, la) = (t[nodes[a]], lambda[nodes[a]]);
                tq += n[a] * ta;
                lq += n[a] * la;
                for k in 0..3 {
                    gt[k] += g[a][k] * ta;
                    gl[k] += g[a][k] * la;
                }
            }
            let k = p.k0 * law.factor(tq);
            let source = p.source
                + self.external_source.as_ref().map_or(0.0, |x| x[self.qp_offsets.start(e) + q]);
            let base = k * (gl[0] * gt[0] + gl[1] * gt[1] + gl[2] * gt[2]) - source * lq;
            for b in 0..nn {
                let gb = g[b];
                let gb_gt = gb[0] * gt[0] + gb[1] * gt[1] + gb[2] * gt[2];
                let gb_gl = gb[0] * gl[0] + gb[1] * gl[1] + gb[2] * gl[2];
                for i in 0..3 {
                    local[3 * b + i] += w * (gb[i] * base - k * gb_gt * gl[i] - k * gb_gl * gt[i]);
                }
            }
        }
    }

    /// λᵀ ∂rₑ/∂X with dual numbers over the element's 3·n coordinates (facets, and the
    /// reference the closed forms are tested against).
    pub fn coordinate_vjp_dual(&self, e: usize, t: &[f64], lambda: &[f64], local: &mut [f64]) {
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let p = self.params_of(e);
        let c = |v: f64| Dual64::from(v);
        let te: Vec<Dual64> = nodes.iter().map(|&n| c(t[n])).collect();
        let mut x: Vec<[Dual64; 3]> = nodes.iter().map(|&n| self.coords[n].map(c)).collect();
        let mut r = vec![Dual64::from(0.0); nn];
        for a in 0..nn {
            for i in 0..3 {
                x[a][i].eps = 1.0;
                self.element_residual_generic(
                    e,
                    &x,
                    &te,
                    c(p.k0),
                    c(p.source),
                    c(p.h),
                    c(p.t_inf),
                    c(p.q_in),
                    &mut r,
                );
                x[a][i].eps = 0.0;
                local[3 * a + i] = (0..nn).map(|b| r[b].eps * lambda[nodes[b]]).sum();
            }
        }
    }

    /// λᵀ ∂rₑ/∂X of element `e` in the closed form used by the adjoint (volume elements) — for
    /// tests against [`ThermalModel::coordinate_vjp_dual`].
    pub fn coordinate_vjp_element(&self, e: usize, t: &[f64], lambda: &[f64], local: &mut [f64]) {
        local.fill(0.0);
        if e < self.n_volume {
            self.volume_coordinate_vjp(e, t, lambda, local);
        } else {
            self.coordinate_vjp_dual(e, t, lambda, local);
        }
    }

    /// Per-node accumulation of per-element values over every element, deterministic and
    /// bounded in memory ([`gradfem_kernel::scatter_chunked`]): `compute(e, local)` fills
    /// `width` values per local node of element `e`, added into `out` (`width` per node).
    pub fn scatter_chunked(
        &self,
        out: &mut [f64],
        width: usize,
        compute: impl Fn(usize, &mut [f64]) + Sync,
    ) {
        gradfem_kernel::scatter_chunked(
            self.n_elements(),
            &self.elem_offsets,
            &self.elem_nodes,
            out,
            width,
            compute,
        );
    }

    /// [`scatter_chunked`](Self::scatter_chunked) where `compute` also returns a value per
    /// element, stored in `values[e]` (`values` has [`n_elements`](Self::n_elements) entries).
    pub fn scatter_chunked_with_values(
        &self,
        out: &mut [f64],
        width: usize,
        values: &mut [f64],
        compute: impl Fn(usize, &mut [f64]) -> f64 + Sync,
    ) {
        gradfem_kernel::scatter_chunked_with_values(
            self.n_elements(),
            &self.elem_offsets,
            &self.elem_nodes,
            out,
            width,
            Some(values),
            compute,
        );
    }

    /// The volume elements of a 3D group (`"*"` for all of them).
    pub fn group_elements(&self, group: &str) -> Result<&[usize], ThermalError> {
        self.group_elements.get(group).map(|v| &v[..]).ok_or_else(|| {
            let mut known: Vec<String> = self.group_elements.keys().cloned().collect();
            known.sort();
            ThermalError::UnknownGroup { name: group.to_string(), known }
        })
    }

    /// The element table (quadrature and shape functions) of element `e`.
    pub fn element_table(&self, e: usize) -> &ElementTable {
        &self.blocks[self.elem_block[e] as usize].table
    }

    /// Coordinates of the nodes of element `e`.
    pub fn element_coordinates(&self, e: usize) -> Vec<[f64; 3]> {
        self.element_nodes(e).iter().map(|&n| self.coords[n]).collect()
    }

    /// The heat flux q = −k ∇T at the quadrature points of each volume element, averaged per
    /// element (a cell field for output).
    pub fn cell_heat_flux(&self, t: &[f64]) -> Vec<[f64; 3]> {
        (0..self.n_volume)
            .into_par_iter()
            .map(|e| {
                let blk = &self.blocks[self.elem_block[e] as usize];
                let law = &self.regions[self.elem_tag[e] as usize].law;
                let nodes = self.element_nodes(e);
                let nn = nodes.len();
                let x = self.element_coords(e);
                let mut g = [[0.0; 3]; MAX_NODES];
                let mut acc = [0.0; 3];
                let mut vol = 0.0;
                for q in 0..blk.table.n_points() {
                    let det = geometry::physical_gradients_into(
                        3,
                        blk.table.grad(q),
                        &x[..nn],
                        &mut g[..nn],
                    );
                    let w = blk.table.weights[q] * det;
                    let n = blk.table.shape(q);
                    let tq: f64 = (0..nn).map(|a| n[a] * t[nodes[a]]).sum();
                    let mut gt = [0.0; 3];
                    for a in 0..nn {
                        for k in 0..3 {
                            gt[k] += g[a][k] * t[nodes[a]];
                        }
                    }
                    let qf = crate::law::heat_flux(self.k_elem[e], law, tq, gt);
                    for k in 0..3 {
                        acc[k] += w * qf[k];
                    }
                    vol += w;
                }
                acc.map(|v| v / vol)
            })
            .collect()
    }
}

/// det J = (x₁ − x₀) · ((x₂ − x₀) × (x₃ − x₀)) of an affine tetrahedron (six times its signed volume).
#[inline]
fn tet4_det(x: &[[f64; 3]; MAX_NODES]) -> f64 {
    let e1 = [x[1][0] - x[0][0], x[1][1] - x[0][1], x[1][2] - x[0][2]];
    let e2 = [x[2][0] - x[0][0], x[2][1] - x[0][1], x[2][2] - x[0][2]];
    let e3 = [x[3][0] - x[0][0], x[3][1] - x[0][1], x[3][2] - x[0][2]];
    e1[0] * (e2[1] * e3[2] - e2[2] * e3[1])
        + e1[1] * (e2[2] * e3[0] - e2[0] * e3[2])
        + e1[2] * (e2[0] * e3[1] - e2[1] * e3[0])
}

/// Barycentric gradients g_a (constant on the cell) and the volume of an affine tetrahedron.
#[inline]
pub(crate) fn tet4_gradients(x: &[[f64; 3]]) -> ([[f64; 3]; 4], f64) {
    let sub = |a: [f64; 3], b: [f64; 3]| [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
    let cross = |a: [f64; 3], b: [f64; 3]| {
        [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    };
    let e1 = sub(x[1], x[0]);
    let e2 = sub(x[2], x[0]);
    let e3 = sub(x[3], x[0]);
    let c23 = cross(e2, e3);
    let det = e1[0] * c23[0] + e1[1] * c23[1] + e1[2] * c23[2];
    let inv = 1.0 / det;
    let g1 = c23.map(|v| v * inv);
    let g2 = cross(e3, e1).map(|v| v * inv);
    let g3 = cross(e1, e2).map(|v| v * inv);
    let g0 = [-(g1[0] + g2[0] + g3[0]), -(g1[1] + g2[1] + g3[1]), -(g1[2] + g2[2] + g3[2])];
    ([g0, g1, g2, g3], det / 6.0)
}

/// Linear Tet4 kernel with a constant conductivity, written out: with the barycentric gradients
/// g_a (constant on the cell) and volume V, K_ab = k V g_a·g_b and ∫ Q N_a = Q V / 4.
#[inline]
fn tet4_linear_kernel(
    x: &[[f64; 3]; MAX_NODES],
    te: &[f64; MAX_NODES],
    k: f64,
    source: f64,
    ke: Option<&mut [f64]>,
    fe: &mut [f64],
) {
    let (g, vol) = tet4_gradients(x);
    let kv = k * vol;
    let mut kk = [[0.0; 4]; 4];
    for a in 0..4 {
        for b in a..4 {
            let v = kv * (g[a][0] * g[b][0] + g[a][1] * g[b][1] + g[a][2] * g[b][2]);
            kk[a][b] = v;
            kk[b][a] = v;
        }
    }
    let sq = source * vol * 0.25;
    for a in 0..4 {
        fe[a] += kk[a][0] * te[0] + kk[a][1] * te[1] + kk[a][2] * te[2] + kk[a][3] * te[3] - sq;
    }
    if let Some(ke) = ke {
        for a in 0..4 {
            for b in 0..4 {
                ke[a * 4 + b] += kk[a][b];
            }
        }
    }
}
