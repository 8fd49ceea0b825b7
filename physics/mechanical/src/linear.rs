//! Small-strain linear thermo-elasticity: regions, boundary conditions, element kernels and
//! their vector-Jacobian products.
//!
//! The unknown is the displacement u (three components per node; in the full numbering the
//! dof of component i of node n is `3·n + i`). The point law is
//!
//! σ = C : (ε(u) − α (T − T_ref) I) = λ tr(ε_m) I + 2μ ε_m,  ε_m = ε(u) − α (T − T_ref) I,
//!
//! with the Lamé constants λ = Eν / ((1 + ν)(1 − 2ν)), μ = E / (2 (1 + ν)) of each element
//! (E and ν are stored per volume element; a region's scalar E or ν is the sum of its
//! elements' derivatives). The residual, for local node a and component i, is
//!
//! R_ai = Σ_cells ∫ ((∇N_a)_j σ_ij − N_a b_i) dΩ − Σ_traction facets ∫ N_a t_i dΓ
//!      + Σ_pressure facets ∫ p N_a n_i dΓ,
//!
//! where b is the body force per volume, t a traction vector and p a pressure that is positive
//! INTO the body (it acts along −n, n the facet's outward unit normal). The normal follows the
//! facet cell's node order as given (right-hand rule, ∂x/∂ξ × ∂x/∂η): generated box meshes
//! and gmsh boundary facets of a consistently oriented volume are outward. Pressure is a
//! dead load in the small-strain sense: it follows the undeformed geometry, not u.
//!
//! Constrained components (fixed, roller, prescribed displacement) are not unknowns: their
//! values enter R through the element residuals, so the tangent restricted to the unknowns is
//! the symmetric positive (semi-)definite stiffness matrix.
//!
//! Temperature enters as a nodal field T (None: T = T_ref everywhere, no thermal strain),
//! interpolated with the element's shape functions. ∂R/∂T (the T → u transfer) is
//! ∂R_ai/∂T_b = −∫ (3λ + 2μ) α (∇N_a)_i N_b dΩ ([`LinearElasticModel::element_temperature_tangent`],
//! [`LinearElasticModel::temperature_vjp`]).
//!
//! Every parameter derivative is a vector-Jacobian product computed element by element
//! ([`LinearElasticModel::parameter_vjp`]): those of a volume element's E, ν, α, T_ref and body
//! force in one pass over its points from the strains of u and λ (held to its residual kernel
//! at unit parameters in the tests); the coordinate derivative of volume elements is in
//! closed form and tested against dual numbers ([`LinearElasticModel::coordinate_vjp_dual`]).
//!
//! Stresses are reported in Voigt order `[xx, yy, zz, yz, xz, xy]`.

pub mod objective;
pub mod second_order;

use std::collections::HashMap;

use gradfem_kernel::{NodalDofMap, generic};
use gradfem_mesh::quadrature::ElementTable;
use gradfem_mesh::{CellType, Mesh, geometry};
use num_dual::{Dual64, DualNum};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Marks a local element dof that is not an unknown (a constrained component).
/// Equal to `gradfem_solvers::assembly::CONSTRAINED`.
pub const CONSTRAINED: usize = usize::MAX;

/// Largest number of nodes of a supported cell (Hex27).
pub(crate) const MAX_NODES: usize = 27;
/// Largest number of local dofs (Hex27 × 3).
const MAX_DOFS: usize = 3 * MAX_NODES;

/// The Lamé constants (λ, μ) of Young's modulus `e` and Poisson's ratio `nu`:
/// λ = Eν / ((1 + ν)(1 − 2ν)), μ = E / (2 (1 + ν)).
pub fn lame<D: DualNum<Primitive = f64> + Copy>(e: D, nu: D) -> (D, D) {
    let one = D::from(1.0);
    let lambda = e * nu / ((one + nu) * (one - nu * 2.0));
    let mu = e / ((one + nu) * 2.0);
    (lambda, mu)
}

/// (∂λ/∂E, ∂λ/∂ν, ∂μ/∂E, ∂μ/∂ν) at (E, ν), by differentiating [`lame`] with dual numbers.
pub fn lame_derivatives(e: f64, nu: f64) -> [f64; 4] {
    let (le, me) = lame(Dual64::new(e, 1.0), Dual64::from(nu));
    let (ln, mn) = lame(Dual64::from(e), Dual64::new(nu, 1.0));
    [le.eps, ln.eps, me.eps, mn.eps]
}

/// Von Mises stress of a Voigt stress `[xx, yy, zz, yz, xz, xy]`:
/// σ_vm = sqrt(½[(σxx−σyy)² + (σyy−σzz)² + (σzz−σxx)²] + 3(σyz² + σxz² + σxy²)).
pub fn von_mises(s: &[f64; 6]) -> f64 {
    let d = (s[0] - s[1]).powi(2) + (s[1] - s[2]).powi(2) + (s[2] - s[0]).powi(2);
    (0.5 * d + 3.0 * (s[3] * s[3] + s[4] * s[4] + s[5] * s[5])).sqrt()
}

/// A volume group with its material.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegionSpec {
    /// Name of a volume (dim 3) group of the mesh.
    pub group: String,
    /// Young's modulus E (Pa).
    pub young: f64,
    /// Poisson's ratio ν (−1 < ν < 0.5).
    pub poisson: f64,
    /// Linear thermal expansion coefficient α (1/K).
    #[serde(default)]
    pub alpha: f64,
    /// Stress-free reference temperature T_ref (K).
    #[serde(default)]
    pub t_ref: f64,
    /// Body force per unit volume b (N/m³).
    #[serde(default)]
    pub body_force: [f64; 3],
}

/// A boundary condition on a group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BcKind {
    /// u = 0 on every node of the group (any dimension).
    Fixed,
    /// u_c = 0 for the listed components c ∈ {0, 1, 2} (a roller / symmetry condition in the
    /// coordinate directions).
    Roller { components: Vec<usize> },
    /// u_c = value_c for the components given (None: that component is free) (m).
    Displacement { value: [Option<f64>; 3] },
    /// A traction vector t (Pa) on a surface group: R_ai −= ∫ N_a t_i dΓ.
    Traction { traction: [f64; 3] },
    /// A pressure p (Pa) on a surface group, positive INTO the body (acting along −n, n the
    /// outward normal given by the facet's node order).
    Pressure { pressure: f64 },
}

impl BcKind {
    /// The prescribed value of each component (None: not constrained by this condition).
    pub fn constrained_values(&self) -> [Option<f64>; 3] {
        match self {
            BcKind::Fixed => [Some(0.0); 3],
            BcKind::Roller { components } => {
                let mut v = [None; 3];
                for &c in components {
                    if c < 3 {
                        v[c] = Some(0.0);
                    }
                }
                v
            }
            BcKind::Displacement { value } => *value,
            BcKind::Traction { .. } | BcKind::Pressure { .. } => [None; 3],
        }
    }

    fn is_load(&self) -> bool {
        matches!(self, BcKind::Traction { .. } | BcKind::Pressure { .. })
    }
}

/// A boundary condition applied to a named group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BcSpec {
    pub group: String,
    #[serde(flatten)]
    pub kind: BcKind,
}

/// Errors in setting up or evaluating the mechanical model.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum MechanicalError {
    #[error("mechanical: unknown group '{name}'; the model has: {}", known.join(", "))]
    UnknownGroup { name: String, known: Vec<String> },
    #[error(
        "mechanical: group '{group}' has dimension {dim}, but {what} needs dimension {expected}"
    )]
    WrongDimension { group: String, dim: usize, expected: usize, what: &'static str },
    #[error(
        "mechanical: cell {cell_tag} belongs to both regions '{first}' and '{second}'; a cell may have one material"
    )]
    OverlappingRegions { first: String, second: String, cell_tag: u64 },
    #[error("mechanical: {what} must be {requirement}, got {value}")]
    InvalidValue { what: String, requirement: &'static str, value: f64 },
    /// A derivative this version does not compute, named.
    #[error("mechanical: {0} are not available yet")]
    NotAvailable(String),
    #[error("mechanical: no volume cells: the regions' groups hold no 3D cells")]
    NoVolumeCells,
    #[error("mechanical: cell type {cell_type} is not supported as a {role}")]
    UnsupportedCell { cell_type: CellType, role: &'static str },
    #[error(
        "mechanical: cell {cell_tag} ({cell_type}) is inverted or degenerate (det J = {det_j:.3e}) near ({:.6e}, {:.6e}, {:.6e})",
        centroid[0], centroid[1], centroid[2]
    )]
    InvertedCell { cell_tag: u64, cell_type: CellType, det_j: f64, centroid: [f64; 3] },
    #[error(
        "mechanical: component {component} of node {node_tag} at ({:.6e}, {:.6e}, {:.6e}) is prescribed by both '{first}' ({first_value}) and '{second}' ({second_value})",
        position[0], position[1], position[2]
    )]
    ConflictingDisplacements {
        node_tag: u64,
        component: usize,
        position: [f64; 3],
        first: String,
        first_value: f64,
        second: String,
        second_value: f64,
    },
    #[error("mechanical: point ({:.6e}, {:.6e}, {:.6e}) lies in no cell of the model", point[0], point[1], point[2])]
    PointOutside { point: [f64; 3] },
    #[error(
        "mechanical: no displacement component is constrained anywhere, so rigid-body motions are free; add 'fixed', 'roller' or 'displacement' conditions (at least 6 independent components)"
    )]
    NoSupport,
    #[error("mechanical: temperature field has {got} values for {expected} nodes")]
    TemperatureSize { got: usize, expected: usize },
}

/// One region of the model, after set-up.
#[derive(Clone, Debug)]
pub struct Region {
    pub name: String,
    /// Thermal expansion coefficient α (1/K).
    pub alpha: f64,
    /// Stress-free temperature (K).
    pub t_ref: f64,
    /// Body force per volume (N/m³).
    pub body_force: [f64; 3],
    /// The model's volume elements of this region.
    pub elements: Vec<usize>,
}

/// One boundary condition of the model, after set-up.
#[derive(Clone, Debug)]
pub struct Boundary {
    pub name: String,
    pub kind: BcKind,
    /// Nodes of the group that carry the field.
    pub nodes: Vec<usize>,
    /// The model's facet elements of this condition (traction and pressure).
    pub elements: Vec<usize>,
}

/// The parameters of one element's residual, generic over the scalar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ElementParams<D> {
    /// Lamé λ (volume elements).
    pub lambda: D,
    /// Lamé μ (volume elements).
    pub mu: D,
    /// Thermal expansion α (volume elements).
    pub alpha: D,
    /// Stress-free temperature (volume elements).
    pub t_ref: D,
    /// Body force per volume (volume elements).
    pub body: [D; 3],
    /// Traction vector (facet elements).
    pub traction: [D; 3],
    /// Pressure, positive into the body (facet elements).
    pub pressure: D,
}

impl ElementParams<f64> {
    const ZERO: ElementParams<f64> = ElementParams {
        lambda: 0.0,
        mu: 0.0,
        alpha: 0.0,
        t_ref: 0.0,
        body: [0.0; 3],
        traction: [0.0; 3],
        pressure: 0.0,
    };

    /// The same parameters as constant dual numbers (or any scalar).
    pub fn lift<D: DualNum<Primitive = f64> + Copy>(&self) -> ElementParams<D> {
        let c = D::from;
        ElementParams {
            lambda: c(self.lambda),
            mu: c(self.mu),
            alpha: c(self.alpha),
            t_ref: c(self.t_ref),
            body: self.body.map(c),
            traction: self.traction.map(c),
            pressure: c(self.pressure),
        }
    }
}

/// How the thermal strain of a kernel evaluation is formed.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ThermalLoad {
    /// ΔT = T − T_ref from the model's temperature field (0 when there is none).
    Field,
    /// A uniform ΔT (used for ∂/∂T_ref: ΔT = −1).
    Uniform(f64),
}

/// Which vector-Jacobian products [`LinearElasticModel::parameter_vjp`] computes (the others
/// are left empty or zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VjpRequest {
    /// Per-element E and ν.
    pub material: bool,
    /// Per-region α and T_ref.
    pub thermal: bool,
    /// Body forces, tractions and pressures.
    pub loads: bool,
    /// Prescribed displacement values (one tangent-transpose product).
    pub displacement: bool,
    /// Nodal temperatures (the T → u transfer).
    pub temperature: bool,
    /// Node coordinates.
    pub coords: bool,
}

impl VjpRequest {
    /// Everything.
    pub const ALL: VjpRequest = VjpRequest {
        material: true,
        thermal: true,
        loads: true,
        displacement: true,
        temperature: true,
        coords: true,
    };
}

/// λᵀ ∂R/∂p for every parameter of the model (the adjoint engine subtracts these).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParameterVjp {
    /// Per volume element: λᵀ ∂R/∂Eₑ.
    pub young_elem: Vec<f64>,
    /// Per volume element: λᵀ ∂R/∂νₑ.
    pub poisson_elem: Vec<f64>,
    /// Per region: λᵀ ∂R/∂α.
    pub alpha: Vec<f64>,
    /// Per region: λᵀ ∂R/∂T_ref.
    pub t_ref: Vec<f64>,
    /// Per region: λᵀ ∂R/∂b (three components).
    pub body_force: Vec<[f64; 3]>,
    /// Per boundary condition: λᵀ ∂R/∂t (traction conditions, else 0).
    pub traction: Vec<[f64; 3]>,
    /// Per boundary condition: λᵀ ∂R/∂p (pressure conditions, else 0).
    pub pressure: Vec<f64>,
    /// Per boundary condition: λᵀ ∂R/∂u_prescribed per component (displacement conditions,
    /// components it owns; else 0).
    pub displacement: Vec<[f64; 3]>,
    /// Per node: λᵀ ∂R/∂T_node (when requested).
    pub temperature: Option<Vec<f64>>,
    /// Per node: λᵀ ∂R/∂X (when requested).
    pub coords: Option<Vec<[f64; 3]>>,
}

/// Stresses at quadrature points and recovered to nodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StressField {
    /// Voigt stress `[xx, yy, zz, yz, xz, xy]` (Pa) at every quadrature point of the volume
    /// elements (element e's points at `qp_offsets()[e]..qp_offsets()[e+1]`).
    pub qp: Vec<[f64; 6]>,
    /// Von Mises stress at the quadrature points (Pa).
    pub qp_von_mises: Vec<f64>,
    /// Nodal stress: at each node, Σₑ ∫ₑ σ dΩ / Σₑ |e| over the volume elements around it
    /// (volume-weighted average of the element means; zero at nodes of no element).
    pub nodal: Vec<[f64; 6]>,
    /// Von Mises of the nodal stress.
    pub nodal_von_mises: Vec<f64>,
}

#[derive(Clone, Debug)]
struct ElemBlock {
    cell_type: CellType,
    table: ElementTable,
    volume: bool,
}

/// The peers' elastic3d statement (`../shared/peers`, the benchmark `bench_elastic` and the
/// GPU tests share): on a box mesh's groups, E = 1 (scaled per element by a registered
/// field), ν = 0.3, no thermal strain or body force, clamped on `xmin`, the traction
/// (0, 0, −1) on `xmax`.
pub fn elastic3d_specs() -> (RegionSpec, [BcSpec; 2]) {
    let region = RegionSpec {
        group: "domain".into(),
        young: 1.0,
        poisson: 0.3,
        alpha: 0.0,
        t_ref: 0.0,
        body_force: [0.0; 3],
    };
    let bcs = [
        BcSpec { group: "xmin".into(), kind: BcKind::Fixed },
        BcSpec { group: "xmax".into(), kind: BcKind::Traction { traction: [0.0, 0.0, -1.0] } },
    ];
    (region, bcs)
}

/// A facet of a surface group, for objectives.
#[derive(Clone, Debug)]
pub(crate) struct SurfaceCell {
    pub(crate) block: usize,
    pub(crate) nodes: Vec<usize>,
}

/// The discrete small-strain thermo-elastic problem on one mesh.
#[derive(Clone, Debug)]
pub struct LinearElasticModel {
    /// Node coordinates (the shape parameter; same numbering as the mesh).
    pub coords: Vec<[f64; 3]>,
    node_tags: Vec<u64>,
    blocks: Vec<ElemBlock>,
    elem_block: Vec<u8>,
    /// Region (volume) or boundary condition (facet) index of each element.
    elem_tag: Vec<u32>,
    node_offsets: Vec<usize>,
    elem_nodes: Vec<usize>,
    dof_offsets: Vec<usize>,
    elem_dofs: Vec<usize>,
    elem_cell_tags: Vec<u64>,
    n_volume: usize,
    /// Regions, in the order given.
    pub regions: Vec<Region>,
    /// Young's modulus of each volume element (Pa).
    pub young_elem: Vec<f64>,
    /// Poisson's ratio of each volume element.
    pub poisson_elem: Vec<f64>,
    /// Boundary conditions, in the order given.
    pub boundaries: Vec<Boundary>,
    /// Prescribed value of each full dof (NaN where free).
    prescribed: Vec<f64>,
    /// For each full dof, the condition that owns its constraint (u32::MAX: none).
    constrained_by: Vec<u32>,
    /// Numbering of the unknowns over the full dofs `3·node + component`.
    pub dofs: NodalDofMap,
    group_elements: HashMap<String, Vec<usize>>,
    pub(crate) surface_groups: HashMap<String, Vec<SurfaceCell>>,
    qp_offsets: Vec<usize>,
    temperature: Option<Vec<f64>>,
}

fn resolve<'m>(
    mesh: &'m Mesh,
    name: &str,
) -> Result<&'m gradfem_mesh::PhysicalGroup, MechanicalError> {
    mesh.group(name).map_err(|_| MechanicalError::UnknownGroup {
        name: name.to_string(),
        known: mesh.group_names(),
    })
}

fn check_finite(what: String, value: f64) -> Result<(), MechanicalError> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(MechanicalError::InvalidValue { what, requirement: "finite", value })
    }
}

fn is_volume_type(ct: CellType) -> bool {
    matches!(
        ct,
        CellType::Tet4
            | CellType::Tet10
            | CellType::Hex8
            | CellType::Hex20
            | CellType::Hex27
            | CellType::Prism6
    )
}

fn is_facet_type(ct: CellType) -> bool {
    matches!(
        ct,
        CellType::Tri3 | CellType::Tri6 | CellType::Quad4 | CellType::Quad8 | CellType::Quad9
    )
}

#[inline]
fn dot3(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// P₀ of [`LinearElasticModel::vertex_interpolation`] in CSR arrays: a row per unknown, a
/// column per free component of a vertex node.
#[derive(Clone, Debug, PartialEq)]
pub struct VertexInterpolation {
    /// `row_ptr[u]..row_ptr[u + 1]` are the entries of unknown u's row.
    pub row_ptr: Vec<usize>,
    /// The vertex unknowns (columns) of each entry, sorted within a row.
    pub col_idx: Vec<u32>,
    /// The weights.
    pub values: Vec<f64>,
    /// (node, component) of each column, ordered by node, then component.
    pub vertex_unknowns: Vec<(usize, usize)>,
}

/// σ = λ tr(ε_m) I + 2μ ε_m with ε_m = sym(∇u) − θ I (θ = α ΔT), as a full 3×3 matrix.
#[inline]
fn stress_of(grad_u: &[[f64; 3]; 3], theta: f64, lambda: f64, mu: f64) -> [[f64; 3]; 3] {
    let tr = grad_u[0][0] + grad_u[1][1] + grad_u[2][2] - 3.0 * theta;
    let mut s = [[0.0; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            s[i][j] = mu * (grad_u[i][j] + grad_u[j][i]);
        }
        s[i][i] += lambda * tr - 2.0 * mu * theta;
    }
    s
}

fn to_voigt(s: &[[f64; 3]; 3]) -> [f64; 6] {
    [s[0][0], s[1][1], s[2][2], s[1][2], s[0][2], s[0][1]]
}

impl LinearElasticModel {
    /// Set up the model on `mesh` with materials per volume group and boundary conditions per
    /// group. Volume cells outside every region are not part of the model; a constraint on a
    /// node of no volume element is ignored.
    pub fn new(
        mesh: &Mesh,
        regions: &[RegionSpec],
        bcs: &[BcSpec],
    ) -> Result<Self, MechanicalError> {
        let mut blocks: Vec<ElemBlock> = Vec::new();
        let mut block_of_type: HashMap<(CellType, bool), u8> = HashMap::new();
        let mut block_index = |ct: CellType, volume: bool, blocks: &mut Vec<ElemBlock>| -> u8 {
            *block_of_type.entry((ct, volume)).or_insert_with(|| {
                blocks.push(ElemBlock {
                    cell_type: ct,
                    table: ElementTable::new(ct, 2 * ct.order()),
                    volume,
                });
                (blocks.len() - 1) as u8
            })
        };
        let mut elem_block = Vec::new();
        let mut elem_tag = Vec::new();
        let mut node_offsets = vec![0];
        let mut elem_nodes = Vec::new();
        let mut elem_cell_tags = Vec::new();
        let mut elem_cells = Vec::new();
        let mut owner: Vec<Vec<u32>> = mesh
            .blocks
            .iter()
            .map(|b| vec![u32::MAX; if b.cell_type.dim() == 3 { b.len() } else { 0 }])
            .collect();
        let mut out_regions = Vec::with_capacity(regions.len());
        let mut young_elem = Vec::new();
        let mut poisson_elem = Vec::new();
        for (r, spec) in regions.iter().enumerate() {
            let group = resolve(mesh, &spec.group)?;
            if group.dim != 3 {
                return Err(MechanicalError::WrongDimension {
                    group: spec.group.clone(),
                    dim: group.dim,
                    expected: 3,
                    what: "a material region",
                });
            }
            let g = &spec.group;
            check_finite(format!("mechanical.young.{g}"), spec.young)?;
            check_finite(format!("mechanical.poisson.{g}"), spec.poisson)?;
            check_finite(format!("mechanical.alpha.{g}"), spec.alpha)?;
            check_finite(format!("mechanical.t_ref.{g}"), spec.t_ref)?;
            for (k, b) in spec.body_force.iter().enumerate() {
                check_finite(format!("mechanical.body_force.{g}[{k}]"), *b)?;
            }
            if spec.young <= 0.0 {
                return Err(MechanicalError::InvalidValue {
                    what: format!("mechanical.young.{g}"),
                    requirement: "positive",
                    value: spec.young,
                });
            }
            if spec.poisson <= -1.0 || spec.poisson >= 0.5 {
                return Err(MechanicalError::InvalidValue {
                    what: format!("mechanical.poisson.{g}"),
                    requirement: "in (−1, 0.5)",
                    value: spec.poisson,
                });
            }
            let mut elements = Vec::with_capacity(group.cells.len());
            for &cell in &group.cells {
                let prev = owner[cell.block][cell.index];
                if prev != u32::MAX {
                    return Err(MechanicalError::OverlappingRegions {
                        first: regions[prev as usize].group.clone(),
                        second: spec.group.clone(),
                        cell_tag: mesh.cell_tag(cell),
                    });
                }
                owner[cell.block][cell.index] = r as u32;
                let ct = mesh.cell_type(cell);
                if !is_volume_type(ct) {
                    return Err(MechanicalError::UnsupportedCell {
                        cell_type: ct,
                        role: "volume cell",
                    });
                }
                elements.push(elem_block.len());
                elem_block.push(block_index(ct, true, &mut blocks));
                elem_tag.push(r as u32);
                elem_nodes.extend_from_slice(mesh.cell_nodes(cell));
                node_offsets.push(elem_nodes.len());
                elem_cell_tags.push(mesh.cell_tag(cell));
                elem_cells.push(cell);
                young_elem.push(spec.young);
                poisson_elem.push(spec.poisson);
            }
            out_regions.push(Region {
                name: spec.group.clone(),
                alpha: spec.alpha,
                t_ref: spec.t_ref,
                body_force: spec.body_force,
                elements,
            });
        }
        let n_volume = elem_block.len();
        if n_volume == 0 {
            return Err(MechanicalError::NoVolumeCells);
        }
        let n_nodes = mesh.n_nodes();
        let mut active = vec![false; n_nodes];
        for &n in &elem_nodes {
            active[n] = true;
        }

        let mut prescribed = vec![f64::NAN; 3 * n_nodes];
        let mut constrained_by = vec![u32::MAX; 3 * n_nodes];
        let mut boundaries = Vec::with_capacity(bcs.len());
        for (bi, spec) in bcs.iter().enumerate() {
            let group = resolve(mesh, &spec.group)?;
            let mut nodes = mesh.group_nodes(group);
            nodes.retain(|&n| active[n]);
            let mut elements = Vec::new();
            match &spec.kind {
                BcKind::Roller { components } => {
                    if let Some(&c) = components.iter().find(|&&c| c > 2) {
                        return Err(MechanicalError::InvalidValue {
                            what: format!("bc.{}.components", spec.group),
                            requirement: "0, 1 or 2",
                            value: c as f64,
                        });
                    }
                }
                BcKind::Displacement { value } => {
                    for (k, v) in value.iter().enumerate() {
                        if let Some(v) = v {
                            check_finite(format!("bc.{}.displacement[{k}]", spec.group), *v)?;
                        }
                    }
                }
                BcKind::Traction { traction } => {
                    for (k, v) in traction.iter().enumerate() {
                        check_finite(format!("bc.{}.traction[{k}]", spec.group), *v)?;
                    }
                }
                BcKind::Pressure { pressure } => {
                    check_finite(format!("bc.{}.pressure", spec.group), *pressure)?;
                }
                BcKind::Fixed => {}
            }
            let values = spec.kind.constrained_values();
            for &n in &nodes {
                for (c, v) in values.iter().enumerate() {
                    let Some(v) = *v else { continue };
                    let d = 3 * n + c;
                    if constrained_by[d] == u32::MAX {
                        constrained_by[d] = bi as u32;
                        prescribed[d] = v;
                    } else if prescribed[d] != v {
                        return Err(MechanicalError::ConflictingDisplacements {
                            node_tag: mesh.node_tags[n],
                            component: c,
                            position: mesh.coords[n],
                            first: bcs[constrained_by[d] as usize].group.clone(),
                            first_value: prescribed[d],
                            second: spec.group.clone(),
                            second_value: v,
                        });
                    }
                }
            }
            if spec.kind.is_load() {
                if group.dim != 2 {
                    return Err(MechanicalError::WrongDimension {
                        group: spec.group.clone(),
                        dim: group.dim,
                        expected: 2,
                        what: "a traction or pressure condition",
                    });
                }
                for &cell in &group.cells {
                    let ct = mesh.cell_type(cell);
                    if !is_facet_type(ct) {
                        return Err(MechanicalError::UnsupportedCell {
                            cell_type: ct,
                            role: "boundary facet",
                        });
                    }
                    elements.push(elem_block.len());
                    elem_block.push(block_index(ct, false, &mut blocks));
                    elem_tag.push(bi as u32);
                    elem_nodes.extend_from_slice(mesh.cell_nodes(cell));
                    node_offsets.push(elem_nodes.len());
                    elem_cell_tags.push(mesh.cell_tag(cell));
                    elem_cells.push(cell);
                }
            }
            boundaries.push(Boundary {
                name: spec.group.clone(),
                kind: spec.kind.clone(),
                nodes,
                elements,
            });
        }
        if constrained_by.iter().all(|&b| b == u32::MAX) {
            return Err(MechanicalError::NoSupport);
        }
        let dofs =
            NodalDofMap::new(3 * n_nodes, |d| active[d / 3] && constrained_by[d] == u32::MAX);
        let mut dof_offsets = Vec::with_capacity(node_offsets.len());
        let mut elem_dofs = Vec::with_capacity(3 * elem_nodes.len());
        dof_offsets.push(0);
        for e in 0..elem_block.len() {
            for &n in &elem_nodes[node_offsets[e]..node_offsets[e + 1]] {
                for c in 0..3 {
                    elem_dofs.push(dofs.unknown_of_node[3 * n + c].unwrap_or(CONSTRAINED));
                }
            }
            dof_offsets.push(elem_dofs.len());
        }

        let mut index: Vec<Vec<u32>> = owner.iter().map(|o| vec![u32::MAX; o.len()]).collect();
        for (e, c) in elem_cells.iter().enumerate().take(n_volume) {
            index[c.block][c.index] = e as u32;
        }
        let mut group_elements = HashMap::new();
        let mut surface_groups = HashMap::new();
        for g in &mesh.groups {
            if g.dim == 3 {
                let mut els: Vec<usize> = g
                    .cells
                    .iter()
                    .map(|c| index[c.block][c.index])
                    .filter(|&e| e != u32::MAX)
                    .map(|e| e as usize)
                    .collect();
                els.sort_unstable();
                if !els.is_empty() {
                    group_elements.insert(g.name.clone(), els);
                }
            } else if g.dim == 2 {
                let mut cells = Vec::new();
                for &cell in &g.cells {
                    let ct = mesh.cell_type(cell);
                    let nodes = mesh.cell_nodes(cell);
                    if is_facet_type(ct) && nodes.iter().all(|&n| active[n]) {
                        cells.push(SurfaceCell {
                            block: block_index(ct, false, &mut blocks) as usize,
                            nodes: nodes.to_vec(),
                        });
                    }
                }
                if !cells.is_empty() {
                    surface_groups.insert(g.name.clone(), cells);
                }
            }
        }
        group_elements.insert("*".to_string(), (0..n_volume).collect());

        let mut model = LinearElasticModel {
            coords: mesh.coords.clone(),
            node_tags: mesh.node_tags.clone(),
            blocks,
            elem_block,
            elem_tag,
            node_offsets,
            elem_nodes,
            dof_offsets,
            elem_dofs,
            elem_cell_tags,
            n_volume,
            regions: out_regions,
            young_elem,
            poisson_elem,
            boundaries,
            prescribed,
            constrained_by,
            dofs,
            group_elements,
            surface_groups,
            qp_offsets: vec![0],
            temperature: None,
        };
        let mut acc = 0;
        for e in 0..n_volume {
            acc += model.blocks[model.elem_block[e] as usize].table.n_points();
            model.qp_offsets.push(acc);
        }
        model.check_coordinates()?;
        tracing::debug!(
            elements = model.n_elements(),
            unknowns = model.n_unknowns(),
            "linear elastic model set up"
        );
        Ok(model)
    }

    /// Check that every volume element has a positive det J at its quadrature points (after
    /// set-up and after the coordinates changed).
    pub fn check_coordinates(&self) -> Result<(), MechanicalError> {
        let bad = (0..self.n_volume).into_par_iter().find_map_first(|e| {
            let blk = &self.blocks[self.elem_block[e] as usize];
            let nn = blk.cell_type.n_nodes();
            let x = self.element_coords(e);
            let mut g = [[0.0; 3]; MAX_NODES];
            (0..blk.table.n_points())
                .map(|q| {
                    geometry::physical_gradients_into(3, blk.table.grad(q), &x[..nn], &mut g[..nn])
                })
                .find(|d| d.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater))
                .map(|d| (e, d))
        });
        if let Some((e, det_j)) = bad {
            let ct = self.element_cell_type(e);
            let x = self.element_coords(e);
            let nv = ct.n_vertices();
            let mut c = [0.0; 3];
            for p in &x[..nv] {
                for k in 0..3 {
                    c[k] += p[k] / nv as f64;
                }
            }
            return Err(MechanicalError::InvertedCell {
                cell_tag: self.elem_cell_tags[e],
                cell_type: ct,
                det_j,
                centroid: c,
            });
        }
        Ok(())
    }

    /// Number of unknowns (free displacement components).
    pub fn n_unknowns(&self) -> usize {
        self.dofs.n_unknowns()
    }

    /// Number of mesh nodes (full vectors have `3 · n_nodes()` entries).
    pub fn n_nodes(&self) -> usize {
        self.coords.len()
    }

    /// Number of elements the assembly loops over (volume cells, then traction/pressure facets).
    pub fn n_elements(&self) -> usize {
        self.elem_block.len()
    }

    /// Number of volume elements (the first `n_volume_elements()` elements).
    pub fn n_volume_elements(&self) -> usize {
        self.n_volume
    }

    /// Offsets of each element's local dofs in [`LinearElasticModel::element_dofs`] (3 per
    /// node; length `n_elements() + 1`): the input of `AssemblyPattern::new`.
    pub fn element_offsets(&self) -> &[usize] {
        &self.dof_offsets
    }

    /// Local dofs of all elements (node-major, `3·a + i`): unknown indices or [`CONSTRAINED`].
    pub fn element_dofs(&self) -> &[usize] {
        &self.elem_dofs
    }

    /// The mesh nodes of element `e`.
    pub fn element_nodes(&self, e: usize) -> &[usize] {
        &self.elem_nodes[self.node_offsets[e]..self.node_offsets[e + 1]]
    }

    /// The cell type of element `e`.
    pub fn element_cell_type(&self, e: usize) -> CellType {
        self.blocks[self.elem_block[e] as usize].cell_type
    }

    /// The original tag of the mesh cell behind element `e`.
    pub fn element_cell_tag(&self, e: usize) -> u64 {
        self.elem_cell_tags[e]
    }

    /// The region of volume element `e`.
    pub fn element_region(&self, e: usize) -> usize {
        assert!(e < self.n_volume, "element {e} is not a volume element");
        self.elem_tag[e] as usize
    }

    /// The element table (quadrature, shape functions) of element `e`.
    pub fn element_table(&self, e: usize) -> &ElementTable {
        &self.blocks[self.elem_block[e] as usize].table
    }

    pub(crate) fn block_table(&self, block: usize) -> &ElementTable {
        &self.blocks[block].table
    }

    /// Offsets of each volume element's quadrature points in per-point arrays (length
    /// `n_volume_elements() + 1`; the points of `ElementTable::new(ct, 2·order)`).
    pub fn qp_offsets(&self) -> &[usize] {
        &self.qp_offsets
    }

    /// The volume elements of a 3D group (`"*"` for all of them).
    pub fn group_elements(&self, group: &str) -> Result<&[usize], MechanicalError> {
        self.group_elements.get(group).map(|v| v.as_slice()).ok_or_else(|| {
            let mut known: Vec<String> = self.group_elements.keys().cloned().collect();
            known.sort();
            MechanicalError::UnknownGroup { name: group.to_string(), known }
        })
    }

    /// Coordinates of the nodes of element `e`.
    pub fn element_coordinates(&self, e: usize) -> Vec<[f64; 3]> {
        self.element_nodes(e).iter().map(|&n| self.coords[n]).collect()
    }

    fn element_coords(&self, e: usize) -> [[f64; 3]; MAX_NODES] {
        let mut x = [[0.0; 3]; MAX_NODES];
        for (xa, &n) in x.iter_mut().zip(self.element_nodes(e)) {
            *xa = self.coords[n];
        }
        x
    }

    /// For each full dof `3·n + c`, the condition whose constraint it obeys (the first that
    /// names it), if any.
    pub fn constraint_owner(&self) -> Vec<Option<usize>> {
        self.constrained_by.iter().map(|&b| (b != u32::MAX).then_some(b as usize)).collect()
    }

    /// The (node, component) of each unknown, in the unknowns' order (nodes increasing, the
    /// components of a node consecutive): what a near-nullspace of rigid-body modes needs.
    pub fn unknown_components(&self) -> Vec<(usize, usize)> {
        self.dofs.node_of_unknown.iter().map(|&d| (d / 3, d % 3)).collect()
    }

    /// The displacement on the vertices of quadratic cells, interpolated to their other
    /// nodes: the first coarse level of a p-multigrid ([`VertexInterpolation`]), or `None` when the mesh has no quadratic volume cell or a node is a vertex of
    /// one cell and a mid-edge (face, centre) node of another. A non-vertex node takes the
    /// vertex cell's shape functions at its reference point as weights (½ and ½ at a mid-edge,
    /// ¼ at a face centre, ⅛ at a hexahedron's centre); constrained vertex components have no
    /// column, so the rows of nodes next to them interpolate the zero they are held at.
    pub fn vertex_interpolation(&self) -> Option<VertexInterpolation> {
        const UNSEEN: u8 = 0;
        const VERTEX: u8 = 1;
        const INTERIOR: u8 = 2;
        let n_nodes = self.n_nodes();
        let mut kind = vec![UNSEEN; n_nodes];
        let mut parents: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n_nodes];
        let mut quadratic = false;
        for e in 0..self.n_volume {
            let ct = self.element_cell_type(e);
            let lin = ct.linear();
            let nv = lin.n_nodes();
            let nodes = self.element_nodes(e);
            quadratic |= nodes.len() > nv;
            let reference = gradfem_mesh::reference::reference_nodes(ct);
            let mut weights = vec![0.0; nv];
            for (a, &n) in nodes.iter().enumerate() {
                let want = if a < nv { VERTEX } else { INTERIOR };
                if kind[n] != UNSEEN && kind[n] != want {
                    return None;
                }
                if kind[n] == UNSEEN && want == INTERIOR {
                    gradfem_mesh::reference::shape_functions_into(lin, reference[a], &mut weights);
                    parents[n] = weights
                        .iter()
                        .zip(nodes)
                        .filter(|(w, _)| w.abs() > 1e-12)
                        .map(|(&w, &v)| (v, w))
                        .collect();
                }
                kind[n] = want;
            }
        }
        if !quadratic {
            return None;
        }
        let mut coarse_of = vec![u32::MAX; 3 * n_nodes];
        let mut unknowns = Vec::new();
        for n in (0..n_nodes).filter(|&n| kind[n] == VERTEX) {
            for c in 0..3 {
                if self.dofs.unknown_of_node[3 * n + c].is_some() {
                    coarse_of[3 * n + c] = unknowns.len() as u32;
                    unknowns.push((n, c));
                }
            }
        }
        let mut row_ptr = Vec::with_capacity(self.dofs.node_of_unknown.len() + 1);
        row_ptr.push(0);
        let (mut col_idx, mut values) = (Vec::new(), Vec::new());
        let mut row: Vec<(u32, f64)> = Vec::new();
        for &d in &self.dofs.node_of_unknown {
            let (n, c) = (d / 3, d % 3);
            row.clear();
            if kind[n] == VERTEX {
                row.push((coarse_of[d], 1.0));
            } else {
                for &(v, w) in &parents[n] {
                    let col = coarse_of[3 * v + c];
                    if col != u32::MAX {
                        row.push((col, w));
                    }
                }
                row.sort_unstable_by_key(|e| e.0);
            }
            for &(col, w) in &row {
                col_idx.push(col);
                values.push(w);
            }
            row_ptr.push(col_idx.len());
        }
        Some(VertexInterpolation { row_ptr, col_idx, values, vertex_unknowns: unknowns })
    }

    /// Full displacement vector (`3·n_nodes`) from the unknowns and the prescribed values
    /// (0 at nodes of no element).
    pub fn nodal_displacement(&self, unknowns: &[f64]) -> Vec<f64> {
        let mut u: Vec<f64> =
            self.prescribed.iter().map(|&v| if v.is_nan() { 0.0 } else { v }).collect();
        self.dofs.scatter(unknowns, &mut u);
        u
    }

    /// Set (or clear) the nodal temperature field (K) (one value per mesh node).
    pub fn set_temperature(&mut self, t: Option<Vec<f64>>) -> Result<(), MechanicalError> {
        if let Some(t) = &t
            && t.len() != self.n_nodes()
        {
            return Err(MechanicalError::TemperatureSize {
                got: t.len(),
                expected: self.n_nodes(),
            });
        }
        self.temperature = t;
        Ok(())
    }

    /// The nodal temperature field, if one is set.
    pub fn temperature(&self) -> Option<&[f64]> {
        self.temperature.as_deref()
    }

    /// Replace the kind (values) of condition `bc`; the kind itself (fixed, roller, ...) and,
    /// for constraints, the components must stay the same.
    pub fn set_boundary_kind(&mut self, bc: usize, kind: BcKind) {
        let b = &mut self.boundaries[bc];
        assert_eq!(
            std::mem::discriminant(&b.kind),
            std::mem::discriminant(&kind),
            "condition '{}' cannot change its kind",
            b.name
        );
        let old = b.kind.constrained_values().map(|v| v.is_some());
        let new = kind.constrained_values().map(|v| v.is_some());
        assert_eq!(old, new, "condition '{}' cannot change its constrained components", b.name);
        b.kind = kind;
        let values = b.kind.constrained_values();
        for &n in &b.nodes {
            for (c, v) in values.iter().enumerate() {
                if let Some(v) = v
                    && self.constrained_by[3 * n + c] == bc as u32
                {
                    self.prescribed[3 * n + c] = *v;
                }
            }
        }
    }

    /// The parameters of element `e`'s residual.
    pub fn element_params(&self, e: usize) -> ElementParams<f64> {
        let mut p = ElementParams::ZERO;
        if e < self.n_volume {
            let (l, m) = lame(self.young_elem[e], self.poisson_elem[e]);
            let r = &self.regions[self.elem_tag[e] as usize];
            p.lambda = l;
            p.mu = m;
            p.alpha = r.alpha;
            p.t_ref = r.t_ref;
            p.body = r.body_force;
        } else {
            match self.boundaries[self.elem_tag[e] as usize].kind {
                BcKind::Traction { traction } => p.traction = traction,
                BcKind::Pressure { pressure } => p.pressure = pressure,
                _ => {}
            }
        }
        p
    }

    /// Element residual `fe` (3·nn, node-major) and tangent `ke` (row-major 3nn × 3nn, when
    /// given) of element `e` at the full displacement `u`. Both buffers must be zeroed.
    pub fn element_residual_tangent(
        &self,
        e: usize,
        u: &[f64],
        ke: Option<&mut [f64]>,
        fe: &mut [f64],
    ) {
        self.kernel(e, Some(u), &self.element_params(e), ThermalLoad::Field, ke, fe);
    }

    /// Temperature at the quadrature points of a volume element, minus T_ref, times α:
    /// the thermal strain θ_q = α (T_q − T_ref).
    fn theta(&self, e: usize, q: usize, p: &ElementParams<f64>, load: ThermalLoad) -> f64 {
        match load {
            ThermalLoad::Uniform(dt) => p.alpha * dt,
            ThermalLoad::Field => match &self.temperature {
                None => 0.0,
                Some(t) => {
                    let n = self.element_table(e).shape(q);
                    let tq: f64 = self.element_nodes(e).iter().zip(n).map(|(&a, s)| s * t[a]).sum();
                    p.alpha * (tq - p.t_ref)
                }
            },
        }
    }

    fn kernel(
        &self,
        e: usize,
        u: Option<&[f64]>,
        p: &ElementParams<f64>,
        load: ThermalLoad,
        ke: Option<&mut [f64]>,
        fe: &mut [f64],
    ) {
        let blk = &self.blocks[self.elem_block[e] as usize];
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let x = self.element_coords(e);
        if !blk.volume {
            for q in 0..blk.table.n_points() {
                let j = geometry::jacobian(blk.table.grad(q), &x[..nn]);
                let a = [j[0][0], j[1][0], j[2][0]];
                let b = [j[0][1], j[1][1], j[2][1]];
                let nv = [
                    a[1] * b[2] - a[2] * b[1],
                    a[2] * b[0] - a[0] * b[2],
                    a[0] * b[1] - a[1] * b[0],
                ];
                let da = dot3(nv, nv).sqrt();
                let w = blk.table.weights[q];
                let load = [0, 1, 2].map(|i| w * (p.pressure * nv[i] - p.traction[i] * da));
                for (a, &s) in blk.table.shape(q).iter().enumerate() {
                    for i in 0..3 {
                        fe[3 * a + i] += s * load[i];
                    }
                }
            }
            return;
        }
        let mut g = [[0.0; 3]; MAX_NODES];
        let mut ke = ke;
        let mut ue = [0.0; MAX_DOFS];
        if let Some(u) = u {
            for (a, &n) in nodes.iter().enumerate() {
                ue[3 * a..3 * a + 3].copy_from_slice(&u[3 * n..3 * n + 3]);
            }
        }
        if blk.cell_type == CellType::Tet4 {
            let theta: [f64; 4] = match (load, &self.temperature) {
                (ThermalLoad::Uniform(dt), _) => [p.alpha * dt; 4],
                (ThermalLoad::Field, None) => [0.0; 4],
                (ThermalLoad::Field, Some(t)) => {
                    [0, 1, 2, 3].map(|a| p.alpha * (t[nodes[a]] - p.t_ref))
                }
            };
            tet4_kernel(&x, &ue, theta, p, ke, fe);
            return;
        }
        for q in 0..blk.table.n_points() {
            let det =
                geometry::physical_gradients_into(3, blk.table.grad(q), &x[..nn], &mut g[..nn]);
            let w = blk.table.weights[q] * det;
            let shape = blk.table.shape(q);
            let mut gu = [[0.0; 3]; 3];
            if u.is_some() {
                for a in 0..nn {
                    for i in 0..3 {
                        for j in 0..3 {
                            gu[i][j] += ue[3 * a + i] * g[a][j];
                        }
                    }
                }
            }
            let theta = self.theta(e, q, p, load);
            let s = stress_of(&gu, theta, p.lambda, p.mu);
            for a in 0..nn {
                for i in 0..3 {
                    fe[3 * a + i] += w * (dot3(s[i], g[a]) - shape[a] * p.body[i]);
                }
            }
            if let Some(ke) = ke.as_deref_mut() {
                let nd = 3 * nn;
                for a in 0..nn {
                    for b in 0..nn {
                        let gab = w * p.mu * dot3(g[a], g[b]);
                        for i in 0..3 {
                            let row =
                                &mut ke[(3 * a + i) * nd + 3 * b..(3 * a + i) * nd + 3 * b + 3];
                            for k in 0..3 {
                                row[k] +=
                                    w * (p.lambda * g[a][i] * g[b][k] + p.mu * g[a][k] * g[b][i]);
                            }
                            row[i] += gab;
                        }
                    }
                }
            }
        }
    }

    /// λₑᵀ ∂rₑ/∂T of volume element `e` per local node, written into `out` (zeroed by the
    /// caller; facet elements leave it): −∫ (3λ + 2μ) α (∇·λ) N_b dΩ with ∇·λ = Σ_a ∇N_a · λ_a,
    /// the contraction of [`Self::element_temperature_tangent`] without forming it.
    fn element_temperature_vjp(&self, e: usize, lambda: &[f64], out: &mut [f64]) {
        if e >= self.n_volume {
            return;
        }
        let blk = &self.blocks[self.elem_block[e] as usize];
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let p = self.element_params(e);
        let x = self.element_coords(e);
        let c = -(3.0 * p.lambda + 2.0 * p.mu) * p.alpha;
        let mut g = [[0.0; 3]; MAX_NODES];
        for q in 0..blk.table.n_points() {
            let det =
                geometry::physical_gradients_into(3, blk.table.grad(q), &x[..nn], &mut g[..nn]);
            let div: f64 =
                (0..nn).map(|a| dot3(g[a], [0, 1, 2].map(|i| lambda[3 * nodes[a] + i]))).sum();
            let w = blk.table.weights[q] * det * c * div;
            for (o, s) in out.iter_mut().zip(blk.table.shape(q)) {
                *o += w * s;
            }
        }
    }

    /// ∂rₑ/∂T of volume element `e` (row-major 3nn × nn, zeroed by the caller):
    /// ∂r_ai/∂T_b = −∫ (3λ + 2μ) α (∇N_a)_i N_b dΩ. Facet elements have none (left zero).
    pub fn element_temperature_tangent(&self, e: usize, out: &mut [f64]) {
        if e >= self.n_volume {
            return;
        }
        let blk = &self.blocks[self.elem_block[e] as usize];
        let nn = blk.cell_type.n_nodes();
        let p = self.element_params(e);
        let x = self.element_coords(e);
        let c = -(3.0 * p.lambda + 2.0 * p.mu) * p.alpha;
        let mut g = [[0.0; 3]; MAX_NODES];
        for q in 0..blk.table.n_points() {
            let det =
                geometry::physical_gradients_into(3, blk.table.grad(q), &x[..nn], &mut g[..nn]);
            let w = blk.table.weights[q] * det * c;
            let shape = blk.table.shape(q);
            for a in 0..nn {
                for i in 0..3 {
                    for b in 0..nn {
                        out[(3 * a + i) * nn + b] += w * g[a][i] * shape[b];
                    }
                }
            }
        }
    }

    /// The element residual generic over the scalar (the reference for the hand-written kernels
    /// and for dual-number derivatives): coordinates `x`, displacement `u` (3·nn), nodal
    /// temperatures `t` (nn, absolute; pass T_ref for no thermal strain) and parameters `p`.
    pub fn element_residual_generic<D: DualNum<Primitive = f64> + Copy>(
        &self,
        e: usize,
        x: &[[D; 3]],
        u: &[D],
        t: &[D],
        p: &ElementParams<D>,
        out: &mut [D],
    ) {
        let blk = &self.blocks[self.elem_block[e] as usize];
        let nn = blk.cell_type.n_nodes();
        let zero = D::from(0.0);
        out[..3 * nn].iter_mut().for_each(|o| *o = zero);
        if blk.volume {
            let mut g = [[zero; 3]; MAX_NODES];
            for q in 0..blk.table.n_points() {
                let det = generic::physical_gradients(blk.table.grad(q), &x[..nn], &mut g[..nn]);
                let w = det * blk.table.weights[q];
                let shape = blk.table.shape(q);
                let mut gu = [[zero; 3]; 3];
                let mut tq = zero;
                for a in 0..nn {
                    tq += t[a] * shape[a];
                    for i in 0..3 {
                        for j in 0..3 {
                            gu[i][j] += u[3 * a + i] * g[a][j];
                        }
                    }
                }
                let theta = p.alpha * (tq - p.t_ref);
                let tr = gu[0][0] + gu[1][1] + gu[2][2] - theta * 3.0;
                let mut s = [[zero; 3]; 3];
                for i in 0..3 {
                    for j in 0..3 {
                        let eps = (gu[i][j] + gu[j][i]) * 0.5 - if i == j { theta } else { zero };
                        s[i][j] = p.mu * eps * 2.0 + if i == j { p.lambda * tr } else { zero };
                    }
                }
                for a in 0..nn {
                    for i in 0..3 {
                        let sg = s[i][0] * g[a][0] + s[i][1] * g[a][1] + s[i][2] * g[a][2];
                        out[3 * a + i] += w * (sg - p.body[i] * shape[a]);
                    }
                }
            }
        } else {
            for q in 0..blk.table.n_points() {
                let j = generic::jacobian(blk.table.grad(q), &x[..nn]);
                let a = [j[0][0], j[1][0], j[2][0]];
                let b = [j[0][1], j[1][1], j[2][1]];
                let nv = [
                    a[1] * b[2] - a[2] * b[1],
                    a[2] * b[0] - a[0] * b[2],
                    a[0] * b[1] - a[1] * b[0],
                ];
                let da = (nv[0] * nv[0] + nv[1] * nv[1] + nv[2] * nv[2]).sqrt();
                let w = blk.table.weights[q];
                for (a, &s) in blk.table.shape(q).iter().enumerate() {
                    for i in 0..3 {
                        out[3 * a + i] += (p.pressure * nv[i] - p.traction[i] * da) * (w * s);
                    }
                }
            }
        }
    }

    /// Nodal temperatures of element `e` for the generic residual (T_ref where no field).
    fn element_temperatures(&self, e: usize, t_ref: f64) -> Vec<f64> {
        match &self.temperature {
            Some(t) => self.element_nodes(e).iter().map(|&n| t[n]).collect(),
            None => vec![t_ref; self.element_nodes(e).len()],
        }
    }

    /// Deterministic per-node accumulation of per-element values ([`gradfem_kernel::scatter_chunked`]).
    fn scatter(&self, out: &mut [f64], width: usize, compute: impl Fn(usize, &mut [f64]) + Sync) {
        gradfem_kernel::scatter_chunked(
            self.n_elements(),
            &self.node_offsets,
            &self.elem_nodes,
            out,
            width,
            compute,
        );
    }

    /// The full residual R(u) at every dof (`3·n_nodes`), constrained dofs included.
    pub fn full_residual(&self, u: &[f64]) -> Vec<f64> {
        let mut r = vec![0.0; 3 * self.n_nodes()];
        self.scatter(&mut r, 3, |e, local| self.element_residual_tangent(e, u, None, local));
        r
    }

    /// Reaction forces (N) per boundary condition: Σ of the full residual over the dofs the
    /// condition constrains (and owns), per component; zero for loads and for components the
    /// condition leaves free. The reaction is the force the support exerts on the body
    /// (R_int − f_ext at a constrained dof).
    pub fn reactions(&self, u: &[f64]) -> Vec<[f64; 3]> {
        let r = self.full_residual(u);
        let mut out = vec![[0.0; 3]; self.boundaries.len()];
        for (d, &b) in self.constrained_by.iter().enumerate() {
            if b != u32::MAX {
                out[b as usize][d % 3] += r[d];
            }
        }
        out
    }

    /// The consistent external load vector f (`3·n_nodes`) of body forces, tractions and
    /// pressures (no thermal or prescribed-displacement part): f = −R(u = 0, λ = μ = 0).
    pub fn load_vector(&self) -> Vec<f64> {
        let mut f = vec![0.0; 3 * self.n_nodes()];
        self.scatter(&mut f, 3, |e, local| {
            let p = ElementParams { lambda: 0.0, mu: 0.0, ..self.element_params(e) };
            self.kernel(e, None, &p, ThermalLoad::Uniform(0.0), None, local);
            local.iter_mut().for_each(|v| *v = -*v);
        });
        f
    }

    /// (∂R/∂u)ᵀ λ over every dof (constrained columns included). The element stiffness is
    /// symmetric and the residual affine in u, so each element's part is its residual at
    /// u = λ without thermal strain or loads (`Kₑλₑ`, matrix-free): it does not depend on u.
    pub fn tangent_transpose_product(&self, lambda: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; 3 * self.n_nodes()];
        self.scatter(&mut out, 3, |e, local| {
            if e >= self.n_volume {
                return;
            }
            let mut p = self.element_params(e);
            (p.alpha, p.body) = (0.0, [0.0; 3]);
            self.kernel(e, Some(lambda), &p, ThermalLoad::Uniform(0.0), None, local);
        });
        out
    }

    /// λᵀ ∂R/∂T per node (the reverse of the T → u transfer), with λ at every dof (zero at
    /// constrained dofs).
    pub fn temperature_vjp(&self, lambda: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; self.n_nodes()];
        self.scatter(&mut out, 1, |e, local| self.element_temperature_vjp(e, lambda, local));
        out
    }

    /// Volume element `e`'s part of [`Self::parameter_vjp`], `[dE, dν, dα, dT_ref, db₀, db₁,
    /// db₂]`, in one pass over its points: with L = ∇λ, H = ∇u and θ = α(T − T_ref),
    /// λᵀrₑ = Σ_q w [μ L:(H + Hᵀ) + tr L (λ(tr H − 3θ) − 2μθ) − (Nλ)·b], so
    /// ∂/∂λ = Σ w tr L (tr H − 3θ), ∂/∂μ = Σ w (L:(H + Hᵀ) − 2θ tr L),
    /// ∂/∂α = −(3λ + 2μ) Σ w tr L (T − T_ref), ∂/∂T_ref = (3λ + 2μ) α Σ w tr L and
    /// ∂/∂b = −Σ w Nλ; E and ν through λ(E, ν), μ(E, ν). On a Tet4 the integrands are linear
    /// and the table integrates them as the kernel's one point (mean nodal θ, N = ¼) does.
    fn volume_parameter_vjp(
        &self,
        e: usize,
        u: &[f64],
        lambda: &[f64],
        want: VjpRequest,
    ) -> [f64; 7] {
        let mut out = [0.0; 7];
        if !(want.material || want.thermal || want.loads) {
            return out;
        }
        let blk = &self.blocks[self.elem_block[e] as usize];
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let p = self.element_params(e);
        let x = self.element_coords(e);
        let temperature = self.temperature.as_deref();
        let mut g = [[0.0; 3]; MAX_NODES];
        // Σ w tr L (tr H − 3θ), Σ w (L:(H + Hᵀ) − 2θ tr L), Σ w tr L ΔT, Σ w tr L, Σ w Nλ.
        let (mut a_lambda, mut a_mu, mut tr_dt, mut tr_sum) = (0.0, 0.0, 0.0, 0.0);
        let mut n_lambda = [0.0; 3];
        for q in 0..blk.table.n_points() {
            let det =
                geometry::physical_gradients_into(3, blk.table.grad(q), &x[..nn], &mut g[..nn]);
            let (w, shape) = (blk.table.weights[q] * det, blk.table.shape(q));
            let (mut l, mut h) = ([[0.0; 3]; 3], [[0.0; 3]; 3]);
            let mut tq = 0.0;
            for a in 0..nn {
                let n = nodes[a];
                for i in 0..3 {
                    let (la, ua) = (lambda[3 * n + i], u[3 * n + i]);
                    n_lambda[i] += w * shape[a] * la;
                    for j in 0..3 {
                        l[i][j] += la * g[a][j];
                        h[i][j] += ua * g[a][j];
                    }
                }
                if let Some(t) = temperature {
                    tq += shape[a] * t[n];
                }
            }
            let dt = if temperature.is_some() { tq - p.t_ref } else { 0.0 };
            let theta = p.alpha * dt;
            let tr_l = l[0][0] + l[1][1] + l[2][2];
            let tr_h = h[0][0] + h[1][1] + h[2][2];
            let mut lh = 0.0;
            for i in 0..3 {
                for j in 0..3 {
                    lh += l[i][j] * (h[i][j] + h[j][i]);
                }
            }
            a_lambda += w * tr_l * (tr_h - 3.0 * theta);
            a_mu += w * (lh - 2.0 * theta * tr_l);
            tr_dt += w * tr_l * dt;
            tr_sum += w * tr_l;
        }
        if want.material {
            let [le, ln, me, mn] = lame_derivatives(self.young_elem[e], self.poisson_elem[e]);
            out[0] = a_lambda * le + a_mu * me;
            out[1] = a_lambda * ln + a_mu * mn;
        }
        if want.thermal {
            let bulk = 3.0 * p.lambda + 2.0 * p.mu;
            out[2] = -bulk * tr_dt;
            out[3] = bulk * p.alpha * tr_sum;
        }
        if want.loads {
            for k in 0..3 {
                out[4 + k] = -n_lambda[k];
            }
        }
        out
    }

    /// λᵀ ∂R/∂p for every parameter, at the full displacement `u`, for the adjoint `lambda`
    /// given at every dof (zero at constrained dofs). Each residual is linear in the loads,
    /// α, and (through λ, μ) in E; ν enters through λ(E, ν) and μ(E, ν).
    pub fn parameter_vjp(&self, u: &[f64], lambda: &[f64], want: VjpRequest) -> ParameterVjp {
        let n_el = self.n_elements();
        let dot_local = |e: usize, fe: &[f64]| -> f64 {
            let nodes = self.element_nodes(e);
            (0..3 * nodes.len()).map(|r| fe[r] * lambda[3 * nodes[r / 3] + r % 3]).sum()
        };
        let z = ElementParams::ZERO;
        // Per element: [dE, dν, dα, dT_ref, db0, db1, db2] (volume) or
        // [dt0, dt1, dt2, dp] (facets).
        let per_elem: Vec<[f64; 7]> = (0..n_el)
            .into_par_iter()
            .map(|e| {
                if e < self.n_volume {
                    return self.volume_parameter_vjp(e, u, lambda, want);
                }
                let nd = 3 * self.element_nodes(e).len();
                let mut out = [0.0; 7];
                let mut fe = [0.0; MAX_DOFS];
                let mut eval = |p: &ElementParams<f64>| {
                    fe[..nd].fill(0.0);
                    self.kernel(e, None, p, ThermalLoad::Uniform(0.0), None, &mut fe[..nd]);
                    dot_local(e, &fe[..nd])
                };
                if want.loads {
                    for k in 0..3 {
                        let mut traction = [0.0; 3];
                        traction[k] = 1.0;
                        out[k] = eval(&ElementParams { traction, ..z });
                    }
                    out[3] = eval(&ElementParams { pressure: 1.0, ..z });
                }
                out
            })
            .collect();

        let nb = self.boundaries.len();
        let mut vjp = ParameterVjp {
            young_elem: per_elem[..self.n_volume].iter().map(|v| v[0]).collect(),
            poisson_elem: per_elem[..self.n_volume].iter().map(|v| v[1]).collect(),
            alpha: vec![0.0; self.regions.len()],
            t_ref: vec![0.0; self.regions.len()],
            body_force: vec![[0.0; 3]; self.regions.len()],
            traction: vec![[0.0; 3]; nb],
            pressure: vec![0.0; nb],
            displacement: vec![[0.0; 3]; nb],
            temperature: None,
            coords: None,
        };
        for (r, region) in self.regions.iter().enumerate() {
            for &e in &region.elements {
                vjp.alpha[r] += per_elem[e][2];
                vjp.t_ref[r] += per_elem[e][3];
                for k in 0..3 {
                    vjp.body_force[r][k] += per_elem[e][4 + k];
                }
            }
        }
        for (b, bc) in self.boundaries.iter().enumerate() {
            for &e in &bc.elements {
                match bc.kind {
                    BcKind::Traction { .. } => {
                        for k in 0..3 {
                            vjp.traction[b][k] += per_elem[e][k];
                        }
                    }
                    BcKind::Pressure { .. } => vjp.pressure[b] += per_elem[e][3],
                    _ => {}
                }
            }
        }
        if want.displacement {
            let full = self.tangent_transpose_product(lambda);
            for (d, &b) in self.constrained_by.iter().enumerate() {
                if b != u32::MAX
                    && matches!(self.boundaries[b as usize].kind, BcKind::Displacement { .. })
                {
                    vjp.displacement[b as usize][d % 3] += full[d];
                }
            }
        }
        if want.temperature {
            vjp.temperature = Some(self.temperature_vjp(lambda));
        }
        if want.coords {
            vjp.coords = Some(self.coordinate_vjp_with(u, lambda, None));
        }
        vjp
    }

    /// λᵀ ∂R/∂X per node, with the element parameters replaced by `params(e)` when given.
    pub(crate) fn coordinate_vjp_with(
        &self,
        u: &[f64],
        lambda: &[f64],
        params: Option<&(dyn Fn(usize) -> ElementParams<f64> + Sync)>,
    ) -> Vec<[f64; 3]> {
        let mut flat = vec![0.0; 3 * self.n_nodes()];
        self.scatter(&mut flat, 3, |e, local| {
            let p = params.map_or_else(|| self.element_params(e), |f| f(e));
            if e < self.n_volume {
                self.volume_coordinate_vjp(e, u, lambda, &p, local);
            } else {
                self.coordinate_vjp_dual_with(e, u, lambda, &p, local);
            }
        });
        flat.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect()
    }

    /// λᵀ ∂rₑ/∂X of a volume element in closed form. Moving node b along k changes det J by
    /// det J (∇N_b)_k and every gradient by ∂(∇N_a)_j/∂X_bk = −(∇N_b)_j (∇N_a)_k, so
    /// ∂(∇u)_ij = −(∇u)_ik (∇N_b)_j, while values at the quadrature points (T, N_a) stay put.
    /// With ∇λ = Σ λ_a ⊗ ∇N_a, λ_q = Σ N_a λ_a and σ_λ = C : ε(λ):
    ///
    /// λᵀ ∂r/∂X_bk = Σ_q w det J [ (∇N_b)_k (∇λ : σ − λ_q · b) − (∇λᵀ σ ∇N_b)_k − (∇uᵀ σ_λ ∇N_b)_k ].
    fn volume_coordinate_vjp(
        &self,
        e: usize,
        u: &[f64],
        lambda: &[f64],
        p: &ElementParams<f64>,
        local: &mut [f64],
    ) {
        let blk = &self.blocks[self.elem_block[e] as usize];
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let x = self.element_coords(e);
        let mut g = [[0.0; 3]; MAX_NODES];
        for q in 0..blk.table.n_points() {
            let det =
                geometry::physical_gradients_into(3, blk.table.grad(q), &x[..nn], &mut g[..nn]);
            let w = blk.table.weights[q] * det;
            let shape = blk.table.shape(q);
            let (mut gu, mut gl) = ([[0.0; 3]; 3], [[0.0; 3]; 3]);
            let mut lq = [0.0; 3];
            for a in 0..nn {
                let n = nodes[a];
                for i in 0..3 {
                    lq[i] += shape[a] * lambda[3 * n + i];
                    for j in 0..3 {
                        gu[i][j] += u[3 * n + i] * g[a][j];
                        gl[i][j] += lambda[3 * n + i] * g[a][j];
                    }
                }
            }
            let theta = self.theta(e, q, p, ThermalLoad::Field);
            let s = stress_of(&gu, theta, p.lambda, p.mu);
            let sl = stress_of(&gl, 0.0, p.lambda, p.mu);
            let mut base = -dot3(lq, p.body);
            for i in 0..3 {
                base += dot3(gl[i], s[i]);
            }
            for b in 0..nn {
                let sg = [dot3(s[0], g[b]), dot3(s[1], g[b]), dot3(s[2], g[b])];
                let slg = [dot3(sl[0], g[b]), dot3(sl[1], g[b]), dot3(sl[2], g[b])];
                for k in 0..3 {
                    let t1: f64 = (0..3).map(|i| gl[i][k] * sg[i]).sum();
                    let t2: f64 = (0..3).map(|i| gu[i][k] * slg[i]).sum();
                    local[3 * b + k] += w * (g[b][k] * base - t1 - t2);
                }
            }
        }
    }

    /// λᵀ ∂rₑ/∂X with dual numbers over the element's 3·n coordinates (facets, and the
    /// reference the closed form is tested against). `local` is overwritten.
    pub fn coordinate_vjp_dual(&self, e: usize, u: &[f64], lambda: &[f64], local: &mut [f64]) {
        self.coordinate_vjp_dual_with(e, u, lambda, &self.element_params(e), local);
    }

    fn coordinate_vjp_dual_with(
        &self,
        e: usize,
        u: &[f64],
        lambda: &[f64],
        p: &ElementParams<f64>,
        local: &mut [f64],
    ) {
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let c = Dual64::from;
        let ue: Vec<Dual64> =
            nodes.iter().flat_map(|&n| [0, 1, 2].map(|i| c(u[3 * n + i]))).collect();
        let te: Vec<Dual64> = self.element_temperatures(e, p.t_ref).into_iter().map(c).collect();
        let pd = p.lift::<Dual64>();
        let mut x: Vec<[Dual64; 3]> = nodes.iter().map(|&n| self.coords[n].map(c)).collect();
        let mut r = vec![c(0.0); 3 * nn];
        for a in 0..nn {
            for i in 0..3 {
                x[a][i].eps = 1.0;
                self.element_residual_generic(e, &x, &ue, &te, &pd, &mut r);
                x[a][i].eps = 0.0;
                local[3 * a + i] =
                    (0..3 * nn).map(|k| r[k].eps * lambda[3 * nodes[k / 3] + k % 3]).sum();
            }
        }
    }

    /// λᵀ ∂rₑ/∂X of element `e` as used by [`LinearElasticModel::parameter_vjp`] (closed form
    /// for volume elements), for tests against [`LinearElasticModel::coordinate_vjp_dual`].
    pub fn coordinate_vjp_element(&self, e: usize, u: &[f64], lambda: &[f64], local: &mut [f64]) {
        local.fill(0.0);
        let p = self.element_params(e);
        if e < self.n_volume {
            self.volume_coordinate_vjp(e, u, lambda, &p, local);
        } else {
            self.coordinate_vjp_dual_with(e, u, lambda, &p, local);
        }
    }

    /// Stress at every quadrature point (with von Mises), and recovered to the nodes by the
    /// volume-weighted average of the element means (see [`StressField::nodal`]).
    pub fn stress(&self, u: &[f64]) -> StressField {
        let per_elem: Vec<(Vec<[f64; 6]>, [f64; 6], f64)> = (0..self.n_volume)
            .into_par_iter()
            .map(|e| {
                let blk = &self.blocks[self.elem_block[e] as usize];
                let nodes = self.element_nodes(e);
                let nn = nodes.len();
                let x = self.element_coords(e);
                let p = self.element_params(e);
                let mut g = [[0.0; 3]; MAX_NODES];
                let mut qp = Vec::with_capacity(blk.table.n_points());
                let (mut acc, mut vol) = ([0.0; 6], 0.0);
                for q in 0..blk.table.n_points() {
                    let det = geometry::physical_gradients_into(
                        3,
                        blk.table.grad(q),
                        &x[..nn],
                        &mut g[..nn],
                    );
                    let w = blk.table.weights[q] * det;
                    let mut gu = [[0.0; 3]; 3];
                    for a in 0..nn {
                        for i in 0..3 {
                            for j in 0..3 {
                                gu[i][j] += u[3 * nodes[a] + i] * g[a][j];
                            }
                        }
                    }
                    let s = to_voigt(&stress_of(
                        &gu,
                        self.theta(e, q, &p, ThermalLoad::Field),
                        p.lambda,
                        p.mu,
                    ));
                    for k in 0..6 {
                        acc[k] += w * s[k];
                    }
                    vol += w;
                    qp.push(s);
                }
                (qp, acc, vol)
            })
            .collect();
        let n = self.n_nodes();
        let mut nodal = vec![[0.0; 6]; n];
        let mut weight = vec![0.0; n];
        for (e, (_, acc, vol)) in per_elem.iter().enumerate() {
            for &a in self.element_nodes(e) {
                for k in 0..6 {
                    nodal[a][k] += acc[k];
                }
                weight[a] += vol;
            }
        }
        for (s, w) in nodal.iter_mut().zip(&weight) {
            if *w > 0.0 {
                s.iter_mut().for_each(|v| *v /= w);
            }
        }
        let qp: Vec<[f64; 6]> = per_elem.into_iter().flat_map(|(q, _, _)| q).collect();
        StressField {
            qp_von_mises: qp.iter().map(von_mises).collect(),
            qp,
            nodal_von_mises: nodal.iter().map(von_mises).collect(),
            nodal,
        }
    }

    /// Physical coordinates of every quadrature point of the volume elements, in the order of
    /// [`StressField::qp`] (x_q = Σ N_a(ξ_q) x_a).
    pub fn qp_coordinates(&self) -> Vec<[f64; 3]> {
        (0..self.n_volume)
            .flat_map(|e| {
                let tab = self.element_table(e);
                let x = self.element_coordinates(e);
                (0..tab.n_points())
                    .map(|q| {
                        let mut p = [0.0; 3];
                        for (s, xa) in tab.shape(q).iter().zip(&x) {
                            for k in 0..3 {
                                p[k] += s * xa[k];
                            }
                        }
                        p
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// A description of mesh node `n` for messages: tag and position.
    pub fn describe_node(&self, n: usize) -> String {
        let p = self.coords[n];
        format!("node {} at ({:.6e}, {:.6e}, {:.6e})", self.node_tags[n], p[0], p[1], p[2])
    }

    /// A description of unknown `dof` for messages: component and node.
    pub fn describe_dof(&self, dof: usize) -> String {
        let full = self.dofs.node_of_unknown[dof];
        format!("u{} of {}", ["x", "y", "z"][full % 3], self.describe_node(full / 3))
    }
}

/// The Tet4 kernel written out: the gradients g_a are constant on the cell and V = det J / 6,
/// so with θ̄ the mean of the nodal thermal strains (θ is linear, its mean over the cell is the
/// mean of its vertex values) the residual is r_ai = V (σ(∇u, θ̄) g_a)_i − V b_i / 4 and the
/// tangent V [λ g_a,i g_b,k + μ (g_a·g_b δ_ik + g_a,k g_b,i)], both exact and equal to the
/// quadrature of the general path (tested against the generic form).
fn tet4_kernel(
    x: &[[f64; 3]; MAX_NODES],
    ue: &[f64; MAX_DOFS],
    theta: [f64; 4],
    p: &ElementParams<f64>,
    ke: Option<&mut [f64]>,
    fe: &mut [f64],
) {
    let sub = |a: [f64; 3], b: [f64; 3]| [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
    let cross = |a: [f64; 3], b: [f64; 3]| {
        [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    };
    let (e1, e2, e3) = (sub(x[1], x[0]), sub(x[2], x[0]), sub(x[3], x[0]));
    let c23 = cross(e2, e3);
    let det = dot3(e1, c23);
    let inv = 1.0 / det;
    let g1 = c23.map(|v| v * inv);
    let g2 = cross(e3, e1).map(|v| v * inv);
    let g3 = cross(e1, e2).map(|v| v * inv);
    let g0 = [0, 1, 2].map(|k| -(g1[k] + g2[k] + g3[k]));
    let g = [g0, g1, g2, g3];
    let vol = det / 6.0;
    let mut gu = [[0.0; 3]; 3];
    for a in 0..4 {
        for i in 0..3 {
            for j in 0..3 {
                gu[i][j] += ue[3 * a + i] * g[a][j];
            }
        }
    }
    let th = 0.25 * (theta[0] + theta[1] + theta[2] + theta[3]);
    let s = stress_of(&gu, th, p.lambda, p.mu);
    for a in 0..4 {
        for i in 0..3 {
            fe[3 * a + i] += vol * (dot3(s[i], g[a]) - 0.25 * p.body[i]);
        }
    }
    if let Some(ke) = ke {
        for a in 0..4 {
            for b in 0..4 {
                let gab = vol * p.mu * dot3(g[a], g[b]);
                for i in 0..3 {
                    let row = (3 * a + i) * 12 + 3 * b;
                    for k in 0..3 {
                        ke[row + k] +=
                            vol * (p.lambda * g[a][i] * g[b][k] + p.mu * g[a][k] * g[b][i]);
                    }
                    ke[row + i] += gab;
                }
            }
        }
    }
}

impl gradfem_kernel::DescribeDof for LinearElasticModel {
    fn describe_dof(&self, dof: usize) -> String {
        LinearElasticModel::describe_dof(self, dof)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lame_constants_and_their_derivatives() {
        // E = 210 GPa, ν = 0.3: λ = 121.154 GPa, μ = 80.769 GPa.
        let (l, m) = lame(210e9_f64, 0.3);
        assert!(
            (l / 1e9 - 121.153_846_153_8).abs() < 1e-9 && (m / 1e9 - 80.769_230_769_2).abs() < 1e-9
        );
        let d = lame_derivatives(210e9, 0.3);
        let h = 1e-6;
        let fd_nu = (lame(210e9, 0.3 + h).0 - lame(210e9, 0.3 - h).0) / (2.0 * h);
        assert!((d[1] - fd_nu).abs() < 1e-6 * fd_nu.abs(), "{} vs {fd_nu}", d[1]);
        assert!((d[2] - 1.0 / 2.6).abs() < 1e-15);
    }

    /// `[dE, dν, dα, dT_ref, db]` of volume element `e` by evaluating its residual kernel at
    /// unit parameters (the residual is linear in λ, μ, α, T_ref and b): the reference the
    /// one-pass closed form is held to.
    fn volume_parameter_vjp_by_kernels(
        m: &LinearElasticModel,
        e: usize,
        u: &[f64],
        lambda: &[f64],
    ) -> [f64; 7] {
        let nodes = m.element_nodes(e);
        let nd = 3 * nodes.len();
        let mut fe = vec![0.0; nd];
        let mut eval = |p: &ElementParams<f64>, uu: Option<&[f64]>, load: ThermalLoad| {
            fe.fill(0.0);
            m.kernel(e, uu, p, load, None, &mut fe);
            (0..nd).map(|r| fe[r] * lambda[3 * nodes[r / 3] + r % 3]).sum::<f64>()
        };
        let p = m.element_params(e);
        let z = ElementParams::ZERO;
        let mut out = [0.0; 7];
        let with_lambda =
            eval(&ElementParams { lambda: 1.0, mu: 0.0, ..p }, Some(u), ThermalLoad::Field);
        let with_mu =
            eval(&ElementParams { lambda: 0.0, mu: 1.0, ..p }, Some(u), ThermalLoad::Field);
        let body =
            eval(&ElementParams { lambda: 0.0, mu: 0.0, ..p }, None, ThermalLoad::Uniform(0.0));
        let (a, b) = (with_lambda - body, with_mu - body);
        let [le, ln, me, mn] = lame_derivatives(m.young_elem[e], m.poisson_elem[e]);
        out[0] = a * le + b * me;
        out[1] = a * ln + b * mn;
        let base = ElementParams { body: [0.0; 3], ..p };
        out[2] = eval(&ElementParams { alpha: 1.0, ..base }, None, ThermalLoad::Field);
        out[3] = eval(&base, None, ThermalLoad::Uniform(-1.0));
        for k in 0..3 {
            let mut body = [0.0; 3];
            body[k] = 1.0;
            out[4 + k] = eval(&ElementParams { body, ..z }, None, ThermalLoad::Uniform(0.0));
        }
        out
    }

    /// The one-pass parameter products of volume elements equal the contractions of their
    /// residual kernels at unit parameters, on distorted cells with a temperature field and a
    /// body force (and without a temperature field).
    #[rstest::rstest]
    fn volume_parameter_vjp_is_the_contraction_of_the_kernels(
        #[values(CellType::Tet4, CellType::Hex8, CellType::Tet10, CellType::Hex20)] ct: CellType,
        #[values(false, true)] with_t: bool,
    ) {
        use gradfem_mesh::generate::{BoxSpec, box_mesh};
        let mut mesh = box_mesh(&BoxSpec {
            origin: [0.0; 3],
            lengths: [1.0, 0.5, 0.25],
            divisions: [2, 2, 1],
            cell_type: ct,
        });
        for x in &mut mesh.coords {
            let y = x[1];
            x[0] += 0.05 * (3.0 * y).sin();
            x[2] += 0.03 * x[0] * y;
        }
        let region = RegionSpec {
            group: "domain".into(),
            young: 2.0e3,
            poisson: 0.28,
            alpha: 1.5e-3,
            t_ref: 290.0,
            body_force: [0.3, -1.0, 0.5],
        };
        let (_, bcs) = elastic3d_specs();
        let mut m = LinearElasticModel::new(&mesh, &[region], &bcs).unwrap();
        for (e, y) in m.young_elem.iter_mut().enumerate() {
            *y *= 1.0 + 0.1 * (e as f64).sin();
        }
        if with_t {
            let t = m.coords.iter().map(|p| 300.0 + 20.0 * p[0] - 7.0 * p[1] * p[2]).collect();
            m.set_temperature(Some(t)).unwrap();
        }
        let n = 3 * m.n_nodes();
        let u: Vec<f64> = (0..n).map(|i| 1e-2 * ((i as f64) * 0.37).sin()).collect();
        let lambda: Vec<f64> = (0..n).map(|i| ((i as f64) * 0.71).cos()).collect();
        for e in 0..m.n_volume {
            let fast = m.volume_parameter_vjp(e, &u, &lambda, VjpRequest::ALL);
            let kernels = volume_parameter_vjp_by_kernels(&m, e, &u, &lambda);
            for k in 0..7 {
                let scale = kernels[k].abs().max(1e-300);
                assert!(
                    (fast[k] - kernels[k]).abs() <= 1e-11 * scale.max(1e-9),
                    "element {e}, entry {k}: {} vs {}",
                    fast[k],
                    kernels[k]
                );
            }
        }
    }

    #[test]
    fn von_mises_of_simple_states() {
        assert!((von_mises(&[5.0, 0.0, 0.0, 0.0, 0.0, 0.0]) - 5.0).abs() < 1e-14);
        assert!(von_mises(&[-3.0, -3.0, -3.0, 0.0, 0.0, 0.0]).abs() < 1e-14);
        assert!((von_mises(&[0.0, 0.0, 0.0, 0.0, 0.0, 2.0]) - 2.0 * 3f64.sqrt()).abs() < 1e-14);
    }

    /// P₀ reproduces a displacement that is linear in x from its vertex values on quadratic
    /// cells (trilinear on hexahedra: the vertices' own space), keeps the vertices' values, and
    /// leaves linear cells without a coarse space.
    #[rstest::rstest]
    fn vertex_interpolation_reproduces_the_vertex_field(
        #[values(CellType::Tet10, CellType::Hex20, CellType::Hex27, CellType::Tet4)] ct: CellType,
    ) {
        use gradfem_mesh::generate::{BoxSpec, box_mesh};
        let mesh = box_mesh(&BoxSpec {
            origin: [0.0; 3],
            lengths: [1.0, 0.5, 0.25],
            divisions: [3, 2, 2],
            cell_type: ct,
        });
        let (region, bcs) = elastic3d_specs();
        let m = LinearElasticModel::new(&mesh, &[region], &bcs).unwrap();
        let Some(v) = m.vertex_interpolation() else {
            assert_eq!(ct, CellType::Tet4);
            return;
        };
        assert_ne!(ct, CellType::Tet4);
        // A field in the span of the vertex cells' shape functions, zero on the clamped face
        // x = 0: x·(1 + c)·(1 + y) on hexahedra (bilinear), x·(1 + c) on tetrahedra.
        let bilinear = ct != CellType::Tet10;
        let field = |n: usize, c: usize| {
            let [x, y, _] = m.coords[n];
            x * (1.0 + c as f64) * if bilinear { 1.0 + y } else { 1.0 }
        };
        let coarse: Vec<f64> = v.vertex_unknowns.iter().map(|&(n, c)| field(n, c)).collect();
        let n_fine = m.n_unknowns();
        assert_eq!(v.row_ptr.len(), n_fine + 1);
        assert!(v.vertex_unknowns.len() < n_fine / 2, "{} of {n_fine}", v.vertex_unknowns.len());
        for (u, &d) in m.dofs.node_of_unknown.iter().enumerate() {
            let (n, c) = (d / 3, d % 3);
            let value: f64 = (v.row_ptr[u]..v.row_ptr[u + 1])
                .map(|k| v.values[k] * coarse[v.col_idx[k] as usize])
                .sum();
            let expect = field(n, c);
            assert!((value - expect).abs() < 1e-12, "node {n}, component {c}: {value} vs {expect}");
        }
    }

    #[test]
    fn constrained_components_of_each_kind() {
        assert_eq!(BcKind::Fixed.constrained_values(), [Some(0.0); 3]);
        assert_eq!(
            BcKind::Roller { components: vec![2, 0] }.constrained_values(),
            [Some(0.0), None, Some(0.0)]
        );
        assert_eq!(BcKind::Pressure { pressure: 1.0 }.constrained_values(), [None; 3]);
        let spec: BcSpec =
            serde_json::from_str(r#"{"group": "top", "kind": "pressure", "pressure": 2.5}"#)
                .unwrap();
        assert_eq!(spec.kind, BcKind::Pressure { pressure: 2.5 });
    }
}
