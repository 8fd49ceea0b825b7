//! The host-side description of a steady, linear field system (thermal or elastic), in the flat 32-bit arrays the kernels
//! read: node coordinates, element nodes, the reference quadrature of isoparametric cells, the
//! CSR pattern of the CPU assembly and the gather tables that turn element matrices into CSR
//! values without atomics.

use gradfem_mechanical::LinearElasticModel;
use gradfem_mesh::CellType;
use gradfem_mesh::quadrature::ElementTable;
use gradfem_solvers::amg::{CoarseSpace, NearNullspace};
use gradfem_solvers::assembly::AssemblyPattern;
use gradfem_solvers::sparse::CsrMatrix;
use gradfem_thermal::ThermalModel;

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

/// Which field's element kernels a system runs, with the data only that field has. The
/// per-element coefficient that goes into each solve is the conductivity k_e (thermal) or
/// Young's modulus E_e (elastic); the element matrix is linear in it.
#[derive(Clone, Debug, PartialEq)]
pub enum Physics {
    /// Steady heat conduction, one unknown per node.
    Thermal {
        /// Heat source Q of each element [W/m³].
        source: Vec<f64>,
    },
    /// Small-strain isotropic linear elasticity, three unknowns per node (`3·node + i`).
    Elastic {
        /// Poisson's ratio ν of each element.
        poisson: Vec<f64>,
        /// The thermal strain under a temperature field, when there is one.
        thermal: Option<ThermalStrain>,
    },
    /// A matrix assembled elsewhere (on the CPU) and handed over by its values: the device
    /// solves with it, no element kernel runs ([`DeviceSystem::matrix`]).
    Matrix,
}

/// The thermal strain θ = α (T − T_ref) of an elastic system: its load
/// E_e ∫ (3λ⁰ + 2μ⁰) θ ∇N_a scales with Young's modulus, so it is formed on the device.
#[derive(Clone, Debug, PartialEq)]
pub struct ThermalStrain {
    /// Expansion coefficient α of each element [1/K].
    pub alpha: Vec<f64>,
    /// Stress-free temperature of each element \[K\].
    pub t_ref: Vec<f64>,
    /// Nodal temperature \[K\], interpolated to the quadrature points.
    pub temperature: Vec<f64>,
}

/// A steady, linear field problem on one kind of volume cell ready for the device: everything
/// the kernels read except the per-element coefficient, which is the input of each solve.
/// Thermal Tet4 cells use the closed-form kernels (constant gradients); every other case the
/// quadrature kernels with the CPU model's quadrature.
///
/// Nodal vectors hold `components` values per node (`components · node + i`).
#[derive(Clone, Debug)]
pub struct DeviceSystem {
    /// The field and its own data.
    pub physics: Physics,
    /// Unknowns per node: 1 (thermal) or 3 (elastic).
    pub components: usize,
    /// The cell type of every element.
    pub cell_type: CellType,
    /// Nodes per element.
    pub nodes_per_element: usize,
    /// The reference quadrature of the quadrature kernels (`None`: thermal Tet4, closed form).
    pub quadrature: Option<ReferenceQuadrature>,
    /// Number of mesh nodes.
    pub n_nodes: usize,
    /// Number of unknowns (free nodal values).
    pub n_unknowns: usize,
    /// Node coordinates, 3 per node.
    pub coords: Vec<f64>,
    /// The nodes of each element, `nodes_per_element` each.
    pub nodes: Vec<u32>,
    /// The load of each unknown that does not depend on the coefficients (the elastic field's
    /// body forces, tractions and pressures; the thermal field's heat flux, convection to T∞
    /// and convection at the fixed temperatures; its volume source is in the element
    /// residual).
    pub load: Vec<f64>,
    /// The CSR values of the matrix part that does not depend on the coefficients (the thermal
    /// field's convection), added to the gathered element matrices; `None`: no such part.
    pub base_values: Option<Vec<f64>>,
    /// Fixed value of each constrained nodal value, 0 at free ones.
    pub fixed: Vec<f64>,
    /// Unknown of each nodal value, −1 where it is constrained.
    pub dof_of_value: Vec<i32>,
    /// CSR row pointers of the CPU assembly's pattern.
    pub row_ptr: Vec<u32>,
    /// CSR column indices of the CPU assembly's pattern.
    pub col_idx: Vec<u32>,
    /// For CSR entry i, its contributions are `matrix_gather_idx[ptr[i]..ptr[i+1]]`, each
    /// `m² e + m a + b` (local pair (a, b) of element e, m = components · nodes per element
    /// local unknowns), in increasing order.
    pub matrix_gather_ptr: Vec<u32>,
    /// See [`matrix_gather_ptr`](Self::matrix_gather_ptr).
    pub matrix_gather_idx: Vec<u32>,
    /// For unknown i, its contributions are `rhs_gather_idx[ptr[i]..ptr[i+1]]`, each `m e + a`,
    /// in increasing order.
    pub rhs_gather_ptr: Vec<u32>,
    /// See [`rhs_gather_ptr`](Self::rhs_gather_ptr).
    pub rhs_gather_idx: Vec<u32>,
    /// The AMG's first coarse level for quadratic elastic cells (the displacement on the
    /// vertices, p-multigrid; [`with_coarse_space`](Self::with_coarse_space)); `None`:
    /// aggregation from the finest level.
    pub coarse_space: Option<std::sync::Arc<CoarseSpace>>,
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

/// The cell types the device kernels cover.
const COVERED: [CellType; 5] =
    [CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Hex27];

/// Check that the `n_el` volume elements share one covered cell type and one quadrature
/// table; returns the cell type and element 0's table.
fn one_cell_kind<'t>(
    n_el: usize,
    cell_of: impl Fn(usize) -> CellType,
    table_of: impl Fn(usize) -> &'t ElementTable,
) -> Result<(CellType, &'t ElementTable), GpuError> {
    if n_el == 0 {
        return Err(GpuError::Input("the model has no volume element".into()));
    }
    let cell_type = cell_of(0);
    if !COVERED.contains(&cell_type) {
        return Err(GpuError::Unsupported(format!(
            "the device kernels cover Tet4, Tet10, Hex8, Hex20 and Hex27 cells; element 0 is \
             {cell_type:?}"
        )));
    }
    if let Some(e) = (0..n_el).find(|&e| cell_of(e) != cell_type) {
        return Err(GpuError::Unsupported(format!(
            "the device kernels take one cell type per problem; element 0 is {cell_type:?}, \
             element {e} is {:?}",
            cell_of(e)
        )));
    }
    let table = table_of(0);
    if let Some(e) = (0..n_el).find(|&e| !std::ptr::eq(table_of(e), table)) {
        return Err(GpuError::Unsupported(format!(
            "the device kernels take one quadrature per problem; element {e} uses another than \
             element 0 (a curved Tet10 integrated at a higher degree)"
        )));
    }
    debug_assert!(cell_type.n_nodes() <= MAX_CELL_NODES);
    Ok((cell_type, table))
}

/// The flat reference quadrature of `table`.
fn reference_quadrature(table: &ElementTable) -> ReferenceQuadrature {
    let nq = table.n_points();
    ReferenceQuadrature {
        n_points: nq,
        weights: table.weights.clone(),
        shape: (0..nq).flat_map(|q| table.shape(q).to_vec()).collect(),
        grad: (0..nq).flat_map(|q| table.grad(q).to_vec()).collect(),
    }
}

/// What the constructors of [`DeviceSystem`] share once the field's own data are known.
struct Common<'a> {
    pattern: &'a AssemblyPattern,
    n_model_elements: usize,
    n_el: usize,
    components: usize,
    cell_type: CellType,
    quadrature: Option<ReferenceQuadrature>,
    coords: &'a [[f64; 3]],
    element_nodes: &'a dyn Fn(usize) -> &'a [usize],
    unknown_of_value: &'a [Option<usize>],
}

impl DeviceSystem {
    /// The device description of a steady thermal `model`, whose matrix has the CPU
    /// assembly's `pattern`.
    ///
    /// Errors with [`GpuError::Unsupported`] naming the reason when the model has something
    /// without a device kernel: a cell other than Tet4, Tet10, Hex8, Hex20 and Hex27, more than
    /// one cell type or quadrature, a temperature-dependent conductivity, an external (Joule)
    /// heat source, or a size beyond 32-bit indices; with [`GpuError::Input`] when `pattern` is
    /// not the model's. Convection and heat-flux boundaries do not depend on k: their matrix
    /// ([`base_values`](Self::base_values)) and load are assembled once on the CPU.
    pub fn thermal(model: &ThermalModel, pattern: &AssemblyPattern) -> Result<Self, GpuError> {
        let n_el = model.n_volume_elements();
        let (cell_type, table) =
            one_cell_kind(n_el, |e| model.element_cell_type(e), |e| model.element_table(e))?;
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
        let source =
            (0..n_el).map(|e| model.regions[model.element_region(e)].source).collect::<Vec<_>>();
        let fixed = model.nodal_temperature(&vec![0.0; n_unknowns]);
        let element_nodes = |e: usize| model.element_nodes(e);
        let mut system = Self::build(
            Physics::Thermal { source },
            Common {
                pattern,
                n_model_elements: model.n_elements(),
                n_el,
                components: 1,
                cell_type,
                quadrature: (cell_type != CellType::Tet4).then(|| reference_quadrature(table)),
                coords: &model.coords,
                element_nodes: &element_nodes,
                unknown_of_value: &model.dofs.unknown_of_node,
            },
            vec![0.0; n_unknowns],
            fixed,
        )?;
        // Convection and heat-flux facets do not depend on k: their matrix and their residual
        // at the fixed temperatures are assembled here once, on the CPU, facet by facet (the
        // pattern is the model's: `build` checked it).
        if model.n_elements() > n_el {
            let mut base = vec![0.0; pattern.nnz()];
            let (mut ke, mut fe) = (Vec::new(), Vec::new());
            for e in n_el..model.n_elements() {
                let nn = model.element_nodes(e).len();
                ke.clear();
                ke.resize(nn * nn, 0.0);
                fe.clear();
                fe.resize(nn, 0.0);
                model.element_residual_tangent(e, &system.fixed, Some(&mut ke), &mut fe);
                for a in 0..nn {
                    let d = pattern.element_dof(e, a);
                    if d == gradfem_solvers::assembly::CONSTRAINED {
                        continue;
                    }
                    system.load[d] -= fe[a];
                    for b in 0..nn {
                        if let Some(slot) = pattern.slot(e, a, b) {
                            base[slot] += ke[nn * a + b];
                        }
                    }
                }
            }
            system.base_values = Some(base);
        }
        Ok(system)
    }

    /// The device description of a small-strain elastic `model`, whose matrix has the CPU
    /// assembly's `pattern`. Body forces, tractions and pressures become the coefficient-free
    /// [`load`](Self::load); prescribed displacements enter through the element residuals.
    ///
    /// A temperature field with a nonzero α gives the [`ThermalStrain`], whose load the device
    /// forms with E.
    ///
    /// Errors with [`GpuError::Unsupported`] for a cell other than Tet4, Tet10, Hex8, Hex20 and
    /// Hex27, more than one cell type or quadrature, or a size beyond 32-bit indices; with
    /// [`GpuError::Input`] when `pattern` is not the model's.
    pub fn elastic(
        model: &LinearElasticModel,
        pattern: &AssemblyPattern,
    ) -> Result<Self, GpuError> {
        let n_el = model.n_volume_elements();
        let (cell_type, table) =
            one_cell_kind(n_el, |e| model.element_cell_type(e), |e| model.element_table(e))?;
        let thermal = match model.temperature() {
            Some(t) if model.regions.iter().any(|r| r.alpha != 0.0) => {
                let region = |e: usize| &model.regions[model.element_region(e)];
                Some(ThermalStrain {
                    alpha: (0..n_el).map(|e| region(e).alpha).collect(),
                    t_ref: (0..n_el).map(|e| region(e).t_ref).collect(),
                    temperature: t.to_vec(),
                })
            }
            _ => None,
        };
        let n_unknowns = model.n_unknowns();
        let full_load = model.load_vector();
        let mut load = vec![0.0; n_unknowns];
        for (d, u) in model.dofs.unknown_of_node.iter().enumerate() {
            if let Some(u) = *u {
                load[u] = full_load[d];
            }
        }
        let fixed = model.nodal_displacement(&vec![0.0; n_unknowns]);
        let poisson = model.poisson_elem[..n_el].to_vec();
        let element_nodes = |e: usize| model.element_nodes(e);
        Self::build(
            Physics::Elastic { poisson, thermal },
            Common {
                pattern,
                n_model_elements: model.n_elements(),
                n_el,
                components: 3,
                cell_type,
                quadrature: Some(reference_quadrature(table)),
                coords: &model.coords,
                element_nodes: &element_nodes,
                unknown_of_value: &model.dofs.unknown_of_node,
            },
            load,
            fixed,
        )
    }

    /// Checks sizes and builds the flat arrays and gather tables of the `c.n_el` volume
    /// elements (the model's first elements; facet elements, if any, follow them and carry
    /// no matrix).
    fn build(
        physics: Physics,
        c: Common<'_>,
        load: Vec<f64>,
        fixed: Vec<f64>,
    ) -> Result<Self, GpuError> {
        let n_unknowns = load.len();
        let pattern = c.pattern;
        if pattern.n_unknowns() != n_unknowns || pattern.n_elements() != c.n_model_elements {
            return Err(GpuError::Input(format!(
                "the assembly pattern ({} unknowns, {} elements) is not the model's ({} unknowns, \
                 {} elements)",
                pattern.n_unknowns(),
                pattern.n_elements(),
                n_unknowns,
                c.n_model_elements
            )));
        }
        let n_nodes = c.coords.len();
        let (nn, n_el, comp) = (c.cell_type.n_nodes(), c.n_el, c.components);
        let m = nn * comp;
        if i32::try_from(comp * n_nodes).is_err() {
            return Err(too_large("nodal values", comp * n_nodes));
        }
        to_u32("element matrix entries", m * m * n_el)?;
        to_u32("matrix entries", pattern.nnz())?;

        let coords = c.coords.iter().flatten().copied().collect();
        let mut nodes = Vec::with_capacity(nn * n_el);
        for e in 0..n_el {
            nodes.extend((c.element_nodes)(e).iter().map(|&n| n as u32));
        }
        let dof_of_value = c.unknown_of_value.iter().map(|d| d.map_or(-1, |d| d as i32)).collect();
        let row_ptr = pattern.row_ptr().iter().map(|&v| v as u32).collect();
        let col_idx = pattern.col_idx().to_vec();
        let (matrix_gather_ptr, matrix_gather_idx) = invert(pattern.nnz(), m * m * n_el, |s| {
            let (e, a, b) = (s / (m * m), (s % (m * m)) / m, s % m);
            pattern.slot(e, a, b)
        });
        let (rhs_gather_ptr, rhs_gather_idx) = invert(n_unknowns, m * n_el, |s| {
            let d = pattern.element_dof(s / m, s % m);
            (d != gradfem_solvers::assembly::CONSTRAINED).then_some(d)
        });
        Ok(DeviceSystem {
            physics,
            components: comp,
            cell_type: c.cell_type,
            nodes_per_element: nn,
            quadrature: c.quadrature,
            n_nodes,
            n_unknowns,
            coords,
            nodes,
            load,
            base_values: None,
            fixed,
            dof_of_value,
            row_ptr,
            col_idx,
            matrix_gather_ptr,
            matrix_gather_idx,
            rhs_gather_ptr,
            rhs_gather_idx,
            coarse_space: None,
        })
    }

    /// The description of a square matrix's pattern for solving on the device with values
    /// assembled elsewhere ([`Pipeline::set_matrix`](crate::Pipeline::set_matrix)): one
    /// unknown per "node", no elements, no constraint.
    pub fn matrix(a: &CsrMatrix) -> Result<Self, GpuError> {
        if a.n_rows != a.n_cols {
            return Err(GpuError::Input(format!(
                "the device solves square systems; this matrix is {}×{}",
                a.n_rows, a.n_cols
            )));
        }
        let n = a.n_rows;
        if i32::try_from(n).is_err() {
            return Err(too_large("unknowns", n));
        }
        to_u32("matrix entries", a.nnz())?;
        if let Some(i) =
            (0..n).find(|&i| !a.col_idx[a.row_ptr[i]..a.row_ptr[i + 1]].contains(&(i as u32)))
        {
            return Err(GpuError::Input(format!(
                "row {i} stores no diagonal entry; the Jacobi preconditioner needs every one"
            )));
        }
        Ok(DeviceSystem {
            physics: Physics::Matrix,
            components: 1,
            cell_type: CellType::Point1,
            nodes_per_element: 1,
            quadrature: None,
            n_nodes: n,
            n_unknowns: n,
            coords: Vec::new(),
            nodes: Vec::new(),
            load: vec![0.0; n],
            base_values: None,
            fixed: vec![0.0; n],
            dof_of_value: (0..n as i32).collect(),
            row_ptr: a.row_ptr.iter().map(|&v| v as u32).collect(),
            col_idx: a.col_idx.clone(),
            matrix_gather_ptr: Vec::new(),
            matrix_gather_idx: Vec::new(),
            rhs_gather_ptr: Vec::new(),
            rhs_gather_idx: Vec::new(),
            coarse_space: None,
        })
    }

    /// Number of elements.
    pub fn n_elements(&self) -> usize {
        self.nodes.len() / self.nodes_per_element
    }

    /// Local unknowns per element: components × nodes per element.
    pub fn element_size(&self) -> usize {
        self.components * self.nodes_per_element
    }

    /// Number of nodal values: components × nodes.
    pub fn n_values(&self) -> usize {
        self.components * self.n_nodes
    }

    /// Number of stored matrix entries.
    pub fn nnz(&self) -> usize {
        self.col_idx.len()
    }

    /// Start the AMG's hierarchy from `coarse` (p-multigrid for quadratic cells: the
    /// interpolation of the vertex displacement, `MechanicalField::amg_spaces` in the coupling
    /// crate); `None` changes nothing.
    pub fn with_coarse_space(mut self, coarse: Option<CoarseSpace>) -> Self {
        if let Some(c) = coarse {
            self.coarse_space = Some(std::sync::Arc::new(c));
        }
        self
    }

    /// The near-nullspace of the AMG: the rigid-body modes of an elastic system's free
    /// displacement components; `None` for scalar fields (the constant is AMG's default).
    pub fn near_nullspace(&self) -> Option<NearNullspace> {
        if !matches!(self.physics, Physics::Elastic { .. }) {
            return None;
        }
        let mut unknowns = vec![(0, 0); self.n_unknowns];
        for (v, &d) in self.dof_of_value.iter().enumerate() {
            if d >= 0 {
                unknowns[d as usize] = (v / 3, v % 3);
            }
        }
        let coords: Vec<[f64; 3]> =
            self.coords.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect();
        NearNullspace::rigid_body_modes(&coords, &unknowns).ok()
    }

    /// Whether the adjoint of the compliance is the forward solution: no nonzero prescribed
    /// value and no thermal strain (`Err` names which).
    pub fn compliance_is_self_adjoint(&self) -> Result<(), String> {
        if let Some(v) = self.fixed.iter().position(|&f| f != 0.0) {
            return Err(format!(
                "nodal value {v} is held at {} (a nonzero prescribed value)",
                self.fixed[v]
            ));
        }
        if matches!(self.physics, Physics::Elastic { thermal: Some(_), .. }) {
            return Err("the thermal strain loads the body besides the external load".into());
        }
        Ok(())
    }

    /// The name of the per-element coefficient: `conductivity` or `Young's modulus`.
    pub fn coefficient_name(&self) -> &'static str {
        match self.physics {
            Physics::Thermal { .. } => "conductivity",
            Physics::Elastic { .. } => "Young's modulus",
            Physics::Matrix => "coefficient",
        }
    }
}
