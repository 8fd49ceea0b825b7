//! The host-side description of a steady thermal system, in the flat 32-bit arrays the kernels
//! read: node coordinates, element nodes, the reference quadrature of isoparametric cells, the
//! CSR pattern of the CPU assembly and the gather tables that turn element matrices into CSR
//! values without atomics.

use gradfem_mesh::CellType;
use gradfem_solvers::assembly::AssemblyPattern;
use gradfem_thermal::{BcKind, ThermalModel};

use crate::error::GpuError;
use crate::kernels::MAX_CELL_NODES;

/// The reference quadrature of the cells of a system: the CPU model's element table, flat.
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceQuadrature {
    /// Number of quadrature points.
    pub n_points: usize,
    /// Weights, one per point.
    pub weights: Vec<f64>,
    /// N_a(ξ_q), `n_nodes` per point.
    pub shape: Vec<f64>,
    /// ∂N_a/∂ξ(ξ_q), `n_nodes` per point.
    pub grad: Vec<[f64; 3]>,
}

/// A steady, linear thermal problem on one kind of volume cell ready for the device:
/// everything the kernels read except the per-element conductivity, which is the input of
/// each solve. Tet4 cells use the closed-form kernels (constant gradients); Tet10, Hex8, Hex20
/// and Hex27 the quadrature kernels with the CPU model's quadrature.
#[derive(Clone, Debug)]
pub struct ThermalSystem {
    /// The cell type of every element.
    pub cell_type: CellType,
    /// Nodes per element.
    pub nodes_per_element: usize,
    /// The reference quadrature of the quadrature kernels (`None`: Tet4, closed form).
    pub quadrature: Option<ReferenceQuadrature>,
    /// Number of mesh nodes.
    pub n_nodes: usize,
    /// Number of unknowns (free nodes).
    pub n_unknowns: usize,
    /// Node coordinates, 3 per node.
    pub coords: Vec<f64>,
    /// The nodes of each element, `nodes_per_element` each.
    pub nodes: Vec<u32>,
    /// Heat source Q of each element [W/m³].
    pub source: Vec<f64>,
    /// Fixed temperature of each constrained node, 0 at free nodes.
    pub fixed: Vec<f64>,
    /// Unknown of each node, −1 where the node is constrained.
    pub dof_of_node: Vec<i32>,
    /// CSR row pointers of the CPU assembly's pattern.
    pub row_ptr: Vec<u32>,
    /// CSR column indices of the CPU assembly's pattern.
    pub col_idx: Vec<u32>,
    /// For CSR entry i, its contributions are `matrix_gather_idx[ptr[i]..ptr[i+1]]`, each
    /// `nn² e + nn a + b` (local pair (a, b) of element e, nn nodes per element), in
    /// increasing order.
    pub matrix_gather_ptr: Vec<u32>,
    /// See [`matrix_gather_ptr`](Self::matrix_gather_ptr).
    pub matrix_gather_idx: Vec<u32>,
    /// For unknown i, its contributions are `rhs_gather_idx[ptr[i]..ptr[i+1]]`, each `nn e + a`,
    /// in increasing order.
    pub rhs_gather_ptr: Vec<u32>,
    /// See [`rhs_gather_ptr`](Self::rhs_gather_ptr).
    pub rhs_gather_idx: Vec<u32>,
}

fn too_large(what: &str, n: usize) -> GpuError {
    GpuError::Unsupported(format!(
        "{what} ({n}) does not fit the device kernels' 32-bit indices; split the problem"
    ))
}

fn to_u32(what: &str, n: usize) -> Result<u32, GpuError> {
    u32::try_from(n).ok().filter(|&v| v != u32::MAX).ok_or_else(|| too_large(what, n))
}

/// Counting-sort inverse of an element → slot map: for each of `n_slots` targets, the sources
/// `s` with `target(s) == Some(slot)`, in increasing `s`.
fn invert(
    n_slots: usize,
    n_sources: usize,
    target: impl Fn(usize) -> Option<usize>,
) -> (Vec<u32>, Vec<u32>) {
    let mut ptr = vec![0u32; n_slots + 1];
    for s in 0..n_sources {
        if let Some(t) = target(s) {
            ptr[t + 1] += 1;
        }
    }
    for i in 0..n_slots {
        ptr[i + 1] += ptr[i];
    }
    let mut next: Vec<u32> = ptr[..n_slots].to_vec();
    let mut idx = vec![0u32; ptr[n_slots] as usize];
    for s in 0..n_sources {
        if let Some(t) = target(s) {
            idx[next[t] as usize] = s as u32;
            next[t] += 1;
        }
    }
    (ptr, idx)
}

impl ThermalSystem {
    /// The device description of `model`, whose matrix has the CPU assembly's `pattern`.
    ///
    /// Errors with [`GpuError::Unsupported`] naming the reason when the model has something
    /// without a device kernel: a cell other than Tet4, Tet10, Hex8, Hex20 and Hex27, more than
    /// one cell type or quadrature, a temperature-dependent conductivity, an external (Joule)
    /// heat source, a convection or heat-flux boundary, or a size beyond 32-bit indices; with
    /// [`GpuError::Input`] when `pattern` is not the model's.
    pub fn new(model: &ThermalModel, pattern: &AssemblyPattern) -> Result<Self, GpuError> {
        let n_el = model.n_volume_elements();
        if model.n_elements() != n_el {
            let kinds: Vec<String> = model
                .boundaries
                .iter()
                .filter(|b| !matches!(b.kind, BcKind::Temperature { .. }))
                .map(|b| {
                    let kind = match b.kind {
                        BcKind::Convection { .. } => "convection",
                        BcKind::HeatFlux { .. } => "heat flux",
                        BcKind::Temperature { .. } => "temperature",
                    };
                    format!("{kind} on '{}'", b.name)
                })
                .collect();
            return Err(GpuError::Unsupported(format!(
                "boundary conditions other than fixed temperatures have no device kernel yet ({})",
                kinds.join(", ")
            )));
        }
        if n_el == 0 {
            return Err(GpuError::Input("the model has no volume element".into()));
        }
        let cell_type = model.element_cell_type(0);
        let covered =
            [CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Hex27];
        if !covered.contains(&cell_type) {
            return Err(GpuError::Unsupported(format!(
                "the device kernels cover Tet4, Tet10, Hex8, Hex20 and Hex27 cells; element 0 \
                 is {cell_type:?}"
            )));
        }
        if let Some(e) = (0..n_el).find(|&e| model.element_cell_type(e) != cell_type) {
            return Err(GpuError::Unsupported(format!(
                "the device kernels take one cell type per problem; element 0 is {cell_type:?}, \
                 element {e} is {:?}",
                model.element_cell_type(e)
            )));
        }
        let table = model.element_table(0);
        if let Some(e) = (0..n_el).find(|&e| !std::ptr::eq(model.element_table(e), table)) {
            return Err(GpuError::Unsupported(format!(
                "the device kernels take one quadrature per problem; element {e} uses another \
                 than element 0 (a curved Tet10 integrated at a higher degree)"
            )));
        }
        let nn = cell_type.n_nodes();
        debug_assert!(nn <= MAX_CELL_NODES);
        let quadrature = (cell_type != CellType::Tet4).then(|| {
            let nq = table.n_points();
            ReferenceQuadrature {
                n_points: nq,
                weights: table.weights.clone(),
                shape: (0..nq).flat_map(|q| table.shape(q).to_vec()).collect(),
                grad: (0..nq).flat_map(|q| table.grad(q).to_vec()).collect(),
            }
        });
        if let Some(r) = model.regions.iter().find(|r| !r.law.is_constant()) {
            return Err(GpuError::Unsupported(format!(
                "region '{}' has a temperature-dependent conductivity; the device path solves \
                 linear problems only",
                r.name
            )));
        }
        if model.external_source().is_some() {
            return Err(GpuError::Unsupported(
                "an external (Joule) heat source per quadrature point has no device kernel yet"
                    .into(),
            ));
        }
        let n_unknowns = model.n_unknowns();
        if pattern.n_unknowns() != n_unknowns || pattern.n_elements() != model.n_elements() {
            return Err(GpuError::Input(format!(
                "the assembly pattern ({} unknowns, {} elements) is not the model's ({} unknowns, \
                 {} elements)",
                pattern.n_unknowns(),
                pattern.n_elements(),
                n_unknowns,
                model.n_elements()
            )));
        }
        let n_nodes = model.n_nodes();
        if i32::try_from(n_nodes).is_err() {
            return Err(too_large("nodes", n_nodes));
        }
        to_u32("element matrix entries", nn * nn * n_el)?;
        to_u32("matrix entries", pattern.nnz())?;

        let coords = model.coords.iter().flatten().copied().collect();
        let mut nodes = Vec::with_capacity(nn * n_el);
        for e in 0..n_el {
            nodes.extend(model.element_nodes(e).iter().map(|&n| n as u32));
        }
        let source =
            (0..n_el).map(|e| model.regions[model.element_region(e)].source).collect::<Vec<_>>();
        let fixed = model.nodal_temperature(&vec![0.0; n_unknowns]);
        let dof_of_node =
            model.dofs.unknown_of_node.iter().map(|d| d.map_or(-1, |d| d as i32)).collect();
        let row_ptr = pattern.row_ptr().iter().map(|&v| v as u32).collect();
        let col_idx = pattern.col_idx().to_vec();
        let (matrix_gather_ptr, matrix_gather_idx) = invert(pattern.nnz(), nn * nn * n_el, |s| {
            let (e, a, b) = (s / (nn * nn), (s % (nn * nn)) / nn, s % nn);
            pattern.slot(e, a, b)
        });
        let (rhs_gather_ptr, rhs_gather_idx) = invert(n_unknowns, nn * n_el, |s| {
            let d = pattern.element_dof(s / nn, s % nn);
            (d != gradfem_solvers::assembly::CONSTRAINED).then_some(d)
        });
        Ok(ThermalSystem {
            cell_type,
            nodes_per_element: nn,
            quadrature,
            n_nodes,
            n_unknowns,
            coords,
            nodes,
            source,
            fixed,
            dof_of_node,
            row_ptr,
            col_idx,
            matrix_gather_ptr,
            matrix_gather_idx,
            rhs_gather_ptr,
            rhs_gather_idx,
        })
    }

    /// Number of elements.
    pub fn n_elements(&self) -> usize {
        self.nodes.len() / self.nodes_per_element
    }

    /// Number of stored matrix entries.
    pub fn nnz(&self) -> usize {
        self.col_idx.len()
    }
}
