//! The discrete steady current-conduction model: conductors, terminals, element kernels, Joule
//! heat and their vector-Jacobian products.
//!
//! # Weak form
//!
//! With σ(T) = σ₀ₑ / m(T) on volume element e (see [`crate::law`]), the nodal residual is
//!
//! R_a = Σ_cells ∫ σ(T) ∇N_a · ∇φ dΩ  (the *interior* part R_a^int)
//!
//! and every surface without a terminal is insulated (J·n = 0, the natural condition).
//!
//! # Terminals and the numbering of unknowns
//!
//! - A **voltage** terminal (and **ground**, V = 0) fixes φ = V on every node of its group: those
//!   nodes are not unknowns; their value enters R through the element residuals.
//! - A **current** terminal is an equipotential surface whose voltage is ONE extra unknown,
//!   driven by the total current I flowing INTO the device through it. Every node of the group
//!   maps to that unknown, so the assembled row of the unknown is Σ_{a∈terminal} R_a^int, and a
//!   one-dof *terminal element* (after the volume elements) adds −I to it. Since
//!   Σ_{a∈t} R_a^int = ∫ σ ∇φ·∇(Σ_{a∈t} N_a) dΩ = ∫_t σ ∂φ/∂n dΓ = −∫_t J·n dΓ is the current
//!   entering through t, the equation reads "current in = I".
//!
//! Unknowns are numbered: free nodes in node order, then one unknown per current terminal in
//! terminal order. An element whose local nodes lie on a current terminal repeats that
//! unknown in its local dofs; `gradfem_solvers::assembly::AssemblyPattern` sums repeated local
//! dofs correctly (checked by a test of this crate).
//!
//! At least one voltage or ground terminal is required: otherwise φ is determined only up to a
//! constant.
//!
//! # Terminal outputs
//!
//! The current into the device through terminal t is I_t = Σ_{a∈t} R_a^int (for a voltage
//! terminal: its reaction; a node shared by two voltage terminals counts for the first one
//! given; for a current terminal it equals the given I at convergence). The device resistance
//! between a driven terminal d and a reference terminal r is R = (V_d − V_r) / I_d.
//!
//! # Parameters
//!
//! The primary conductivity parameter is σ₀ per volume element (`sigma_elem`); a resistivity
//! ρ₀ = 1/σ₀ has dJ/dρ₀ = −σ₀² dJ/dσ₀. Further parameters: α_R per conductor (linear law),
//! V per voltage terminal, I per current terminal, node coordinates and the nodal temperature
//! (the coupling to the thermal field).
//!
//! # Adjoint vectors
//!
//! Every vector-Jacobian product takes λ *per mesh node*: at a free node its unknown's value,
//! at every node of a current terminal the value of the terminal's unknown, 0 at the nodes of
//! voltage terminals for an adjoint (other weights there are allowed: they give derivatives of
//! reaction currents). [`ElectricalModel::nodal_from_unknowns`] builds it from an unknown
//! vector.

use std::collections::HashMap;

use gradfem_mesh::quadrature::ElementTable;
use gradfem_mesh::{CellId, CellType, Mesh, geometry};
use num_dual::DualNum;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::law::ResistivityLaw;
use gradfem_kernel::generic;

/// Marks a local element dof that is not an unknown (its node has a fixed voltage).
/// Equal to `gradfem_solvers::assembly::CONSTRAINED`.
pub const CONSTRAINED: usize = usize::MAX;

/// Largest number of nodes of a supported cell (Hex27).
pub(crate) const MAX_NODES: usize = 27;

fn default_law() -> ResistivityLaw {
    ResistivityLaw::Constant
}

fn default_t_ref() -> f64 {
    293.15
}

/// A volume group with its conductor material. Give exactly one of `sigma` and `resistivity`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConductorSpec {
    /// Name of a volume (dim 3) group of the mesh.
    pub group: String,
    /// Conductivity σ₀ [S/m] at the reference temperature.
    #[serde(default)]
    pub sigma: Option<f64>,
    /// Resistivity ρ₀ [Ω·m] at the reference temperature (σ₀ = 1/ρ₀).
    #[serde(default)]
    pub resistivity: Option<f64>,
    /// The temperature dependence ρ(T) = ρ₀ m(T).
    #[serde(default = "default_law")]
    pub law: ResistivityLaw,
    /// Reference temperature T₀ \[K\] of the linear law, and the temperature used when the model
    /// is evaluated without a temperature field (default 293.15 K).
    #[serde(default = "default_t_ref")]
    pub t_ref: f64,
}

impl ConductorSpec {
    /// A conductor of conductivity σ₀ [S/m] with a constant resistivity law.
    pub fn with_sigma(group: &str, sigma: f64) -> Self {
        ConductorSpec {
            group: group.to_string(),
            sigma: Some(sigma),
            resistivity: None,
            law: ResistivityLaw::Constant,
            t_ref: default_t_ref(),
        }
    }

    /// A conductor of resistivity ρ₀ [Ω·m] with law `law` around `t_ref`.
    pub fn with_resistivity(group: &str, rho0: f64, law: ResistivityLaw, t_ref: f64) -> Self {
        ConductorSpec { group: group.to_string(), sigma: None, resistivity: Some(rho0), law, t_ref }
    }
}

/// What a terminal imposes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TerminalKind {
    /// φ = value \[V\] on every node of the group.
    Voltage { value: f64 },
    /// φ = 0 on every node of the group.
    Ground,
    /// An equipotential surface (one unknown voltage) through which the total current `current`
    /// \[A\] flows INTO the device.
    Current { current: f64 },
}

/// A terminal on a named group (usually a surface).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TerminalSpec {
    /// Name of a mesh group (usually a surface) whose nodes form the terminal.
    pub group: String,
    /// What the terminal imposes.
    #[serde(flatten)]
    pub kind: TerminalKind,
}

/// Errors in setting up or evaluating the electrical model.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ElectricalError {
    #[error("electrical: unknown group '{name}'; the mesh has: {}", known.join(", "))]
    UnknownGroup { name: String, known: Vec<String> },
    #[error(
        "electrical: group '{group}' has dimension {dim}, but {what} needs dimension {expected}"
    )]
    WrongDimension { group: String, dim: usize, expected: usize, what: &'static str },
    #[error(
        "electrical: cell {cell_tag} belongs to both conductors '{first}' and '{second}'; a cell may have one material"
    )]
    OverlappingConductors { first: String, second: String, cell_tag: u64 },
    #[error("electrical: {what} must be {requirement}, got {value}")]
    InvalidValue { what: String, requirement: &'static str, value: f64 },
    #[error("electrical: conductor '{group}': {message}")]
    InvalidConductor { group: String, message: String },
    #[error("electrical: no volume cells: the conductors' groups hold no 3D cells")]
    NoVolumeCells,
    #[error(
        "electrical: the potential is determined only up to a constant: no terminal fixes a voltage; add a 'ground' or 'voltage' terminal"
    )]
    NoPotentialReference,
    #[error("electrical: terminal '{terminal}' touches no node of any conductor")]
    EmptyTerminal { terminal: String },
    #[error("electrical: cell type {cell_type} is not supported as a {role}")]
    UnsupportedCell { cell_type: CellType, role: &'static str },
    #[error(
        "electrical: cell {cell_tag} ({cell_type}) is inverted or degenerate (det J = {det_j:.3e}) near ({:.6e}, {:.6e}, {:.6e})",
        centroid[0], centroid[1], centroid[2]
    )]
    InvertedCell { cell_tag: u64, cell_type: CellType, det_j: f64, centroid: [f64; 3] },
    #[error(
        "electrical: node {node_tag} at ({:.6e}, {:.6e}, {:.6e}) belongs to terminals '{first}' and '{second}', which cannot share nodes ({reason})",
        position[0], position[1], position[2]
    )]
    ConflictingTerminals {
        node_tag: u64,
        position: [f64; 3],
        first: String,
        second: String,
        reason: &'static str,
    },
    #[error("electrical: unknown terminal '{name}'; the terminals are: {}", known.join(", "))]
    UnknownTerminal { name: String, known: Vec<String> },
    #[error("electrical: {what}: {reason}")]
    Undefined { what: String, reason: String },
}

/// One conductor of the model, after set-up.
#[derive(Clone, Debug)]
pub struct Conductor {
    /// The volume group's name.
    pub name: String,
    /// The temperature dependence ρ(T) = ρ₀ m(T).
    pub law: ResistivityLaw,
    /// Reference temperature T₀ \[K\].
    pub t_ref: f64,
    /// The model's volume elements of this conductor (consecutive, in the group's cell order).
    pub elements: Vec<usize>,
}

/// One terminal of the model, after set-up.
#[derive(Clone, Debug)]
pub struct Terminal {
    /// The group's name.
    pub name: String,
    /// What the terminal imposes (its current value).
    pub kind: TerminalKind,
    /// Nodes of the group that carry the field.
    pub nodes: Vec<usize>,
    /// The nodes whose interior residual makes this terminal's current (all its nodes, except
    /// for voltage terminals the nodes already claimed by an earlier voltage terminal).
    pub owned_nodes: Vec<usize>,
    /// For a current terminal: its unknown.
    pub unknown: Option<usize>,
    /// For a current terminal: its one-dof terminal element (carrying −I).
    pub element: Option<usize>,
}

impl Terminal {
    /// True for a voltage or ground terminal.
    pub fn is_voltage(&self) -> bool {
        !matches!(self.kind, TerminalKind::Current { .. })
    }
}

#[derive(Clone, Debug)]
struct ElemBlock {
    cell_type: CellType,
    table: ElementTable,
}

/// Which vector-Jacobian products [`ElectricalModel::parameter_vjp`] computes (the others are
/// left zero or `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VjpRequest {
    /// Per-element σ₀ and per-conductor α_R.
    pub conductivity: bool,
    /// Terminal voltages and currents (one tangent-transpose product).
    pub terminals: bool,
    /// Nodal temperature (the coupling to the thermal field).
    pub temperature: bool,
    /// Node coordinates (closed-form element products; about as dear as the residual).
    pub coords: bool,
}

impl VjpRequest {
    /// Everything.
    pub const ALL: VjpRequest =
        VjpRequest { conductivity: true, terminals: true, temperature: true, coords: true };
}

/// λᵀ ∂R/∂p for every parameter of the electrical model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ElectricalVjp {
    /// Per volume element: λᵀ ∂R/∂σ₀ₑ (for a resistivity parameter: −σ₀ₑ² times this).
    pub sigma_elem: Vec<f64>,
    /// Per conductor: λᵀ ∂R/∂α_R (0 unless its law is linear).
    pub alpha_r: Vec<f64>,
    /// Per terminal: λᵀ ∂R/∂I (current terminals: −λ at the terminal; else 0).
    pub current: Vec<f64>,
    /// Per terminal: λᵀ ∂R/∂V (voltage and ground terminals: Σ over its owned nodes of
    /// (∂R/∂φ)ᵀλ; else 0).
    pub voltage: Vec<f64>,
    /// Per node: λᵀ ∂R/∂X (when requested).
    pub coords: Option<Vec<[f64; 3]>>,
    /// Per node: λᵀ ∂R/∂T (zero without a temperature field).
    pub temperature: Vec<f64>,
}

/// The reverse of the Joule heat Q_q = σ(T_q) |∇φ_q|² at every quadrature point: for a seed
/// q̄ (one value per point), Σ_q q̄_q ∂Q_q/∂p.
///
/// Q is a point value: its coordinate dependence is only through ∇φ = J⁻ᵀ ∇_ξφ (the thermal
/// side integrates it with its own det J, whose coordinate derivative is the thermal model's).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JouleVjp {
    /// Per node: Σ_q q̄_q ∂Q_q/∂φ_n (constrained nodes included).
    pub phi: Vec<f64>,
    /// Per node: Σ_q q̄_q ∂Q_q/∂T_n (zero without a temperature field).
    pub temperature: Vec<f64>,
    /// Per volume element: Σ_q q̄_q ∂Q_q/∂σ₀ₑ.
    pub sigma_elem: Vec<f64>,
    /// Per conductor: Σ_q q̄_q ∂Q_q/∂α_R.
    pub alpha_r: Vec<f64>,
    /// Per node: Σ_q q̄_q ∂Q_q/∂X_n (when requested).
    pub coords: Option<Vec<[f64; 3]>>,
}

/// The discrete steady current-conduction problem on one mesh.
#[derive(Clone, Debug)]
pub struct ElectricalModel {
    /// Node coordinates (the shape parameter; same numbering as the mesh).
    pub coords: Vec<[f64; 3]>,
    node_tags: Vec<u64>,
    blocks: Vec<ElemBlock>,
    elem_block: Vec<u8>,
    elem_conductor: Vec<u32>,
    elem_offsets: Vec<usize>,
    elem_nodes: Vec<usize>,
    elem_dofs: Vec<usize>,
    elem_cell_tags: Vec<u64>,
    elem_cells: Vec<CellId>,
    n_volume: usize,
    qp_offsets: Vec<usize>,
    /// Conductors, in the order given.
    pub conductors: Vec<Conductor>,
    /// Conductivity σ₀ of each volume element [S/m].
    pub sigma_elem: Vec<f64>,
    /// Terminals, in the order given.
    pub terminals: Vec<Terminal>,
    /// Prescribed nodal voltages (NaN where the node is not fixed).
    fixed: Vec<f64>,
    /// For each node: its unknown (free node or current terminal), or `None` when fixed or
    /// inactive.
    unknown_of_node: Vec<Option<usize>>,
    /// For each unknown: a node that carries it (the first node of a current terminal).
    node_of_unknown: Vec<usize>,
    /// For each unknown ≥ the free nodes: its terminal.
    terminal_of_unknown: Vec<usize>,
    n_free_nodes: usize,
    group_elements: HashMap<String, Vec<usize>>,
    /// Volume element of each mesh cell (per mesh block; `u32::MAX` = none).
    element_of_cell: Vec<Vec<u32>>,
}

fn resolve<'m>(
    mesh: &'m Mesh,
    name: &str,
) -> Result<&'m gradfem_mesh::PhysicalGroup, ElectricalError> {
    mesh.group(name).map_err(|_| ElectricalError::UnknownGroup {
        name: name.to_string(),
        known: mesh.group_names(),
    })
}

fn check_finite(what: String, value: f64) -> Result<(), ElectricalError> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(ElectricalError::InvalidValue { what, requirement: "finite", value })
    }
}

/// Which products of λ with the residual's derivatives
/// [`ElectricalModel::residual_products_element`] computes.
#[derive(Clone, Copy, Debug)]
struct ResidualProducts {
    /// λᵀ ∂R/∂σ₀ₑ and λᵀ ∂R/∂α_R per element.
    conductivity: bool,
    /// (∂R/∂φ)ᵀ λ.
    tangent: bool,
    /// (∂R/∂T)ᵀ λ.
    temperature: bool,
    /// λᵀ ∂R/∂X.
    coords: bool,
}

impl ResidualProducts {
    const NONE: ResidualProducts =
        ResidualProducts { conductivity: false, tangent: false, temperature: false, coords: false };
}

/// Values per node and per element of the packed vector-Jacobian products
/// ([`ElectricalModel::residual_products_element`], [`ElectricalModel::joule_products_element`]).
const PRODUCTS_WIDTH: usize = 5;

/// Per-point quantities of a volume element at a quadrature point.
pub(crate) struct PointState {
    /// det J · weight.
    pub(crate) w: f64,
    /// σ, ∂σ/∂T, ∂σ/∂α_R, σ/σ₀ (= 1/m).
    pub(crate) sigma: f64,
    pub(crate) dsigma_dt: f64,
    pub(crate) dsigma_da: f64,
    pub(crate) inv_m: f64,
    pub(crate) grad_phi: [f64; 3],
}

impl ElectricalModel {
    /// Set up the model on `mesh` with conductors per volume group and terminals per group.
    /// Volume cells outside every conductor are not part of the model (insulators).
    pub fn new(
        mesh: &Mesh,
        conductors: &[ConductorSpec],
        terminals: &[TerminalSpec],
    ) -> Result<Self, ElectricalError> {
        let mut blocks: Vec<ElemBlock> = Vec::new();
        let mut block_of_type: HashMap<CellType, u8> = HashMap::new();
        let mut elem_block = Vec::new();
        let mut elem_conductor = Vec::new();
        let mut elem_offsets = vec![0];
        let mut elem_nodes = Vec::new();
        let mut elem_cell_tags = Vec::new();
        let mut elem_cells = Vec::new();
        let mut sigma_elem = Vec::new();
        let mut owner: Vec<Vec<u32>> = mesh
            .blocks
            .iter()
            .map(|b| vec![u32::MAX; if b.cell_type.dim() == 3 { b.len() } else { 0 }])
            .collect();
        let mut out_conductors = Vec::with_capacity(conductors.len());
        for (c, spec) in conductors.iter().enumerate() {
            let group = resolve(mesh, &spec.group)?;
            if group.dim != 3 {
                return Err(ElectricalError::WrongDimension {
                    group: spec.group.clone(),
                    dim: group.dim,
                    expected: 3,
                    what: "a conductor",
                });
            }
            let sigma0 = match (spec.sigma, spec.resistivity) {
                (Some(s), None) => {
                    check_finite(format!("electrical.sigma.{}", spec.group), s)?;
                    s
                }
                (None, Some(r)) => {
                    check_finite(format!("electrical.resistivity.{}", spec.group), r)?;
                    if r <= 0.0 {
                        return Err(ElectricalError::InvalidValue {
                            what: format!("electrical.resistivity.{}", spec.group),
                            requirement: "positive",
                            value: r,
                        });
                    }
                    1.0 / r
                }
                _ => {
                    return Err(ElectricalError::InvalidConductor {
                        group: spec.group.clone(),
                        message: "give exactly one of 'sigma' (S/m) and 'resistivity' (Ω·m)".into(),
                    });
                }
            };
            if sigma0 <= 0.0 {
                return Err(ElectricalError::InvalidValue {
                    what: format!("electrical.sigma.{}", spec.group),
                    requirement: "positive",
                    value: sigma0,
                });
            }
            check_finite(format!("electrical.t_ref.{}", spec.group), spec.t_ref)?;
            spec.law.validate().map_err(|message| ElectricalError::InvalidConductor {
                group: spec.group.clone(),
                message,
            })?;
            let mut elements = Vec::with_capacity(group.cells.len());
            for &cell in &group.cells {
                let prev = owner[cell.block][cell.index];
                if prev != u32::MAX {
                    return Err(ElectricalError::OverlappingConductors {
                        first: conductors[prev as usize].group.clone(),
                        second: spec.group.clone(),
                        cell_tag: mesh.cell_tag(cell),
                    });
                }
                owner[cell.block][cell.index] = c as u32;
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
                    return Err(ElectricalError::UnsupportedCell {
                        cell_type: ct,
                        role: "volume cell",
                    });
                }
                let b = *block_of_type.entry(ct).or_insert_with(|| {
                    blocks.push(ElemBlock {
                        cell_type: ct,
                        table: ElementTable::new(ct, 2 * ct.order()),
                    });
                    (blocks.len() - 1) as u8
                });
                elements.push(elem_block.len());
                elem_block.push(b);
                elem_conductor.push(c as u32);
                elem_nodes.extend_from_slice(mesh.cell_nodes(cell));
                elem_offsets.push(elem_nodes.len());
                elem_cell_tags.push(mesh.cell_tag(cell));
                elem_cells.push(cell);
                sigma_elem.push(sigma0);
            }
            out_conductors.push(Conductor {
                name: spec.group.clone(),
                law: spec.law.clone(),
                t_ref: spec.t_ref,
                elements,
            });
        }
        let n_volume = elem_block.len();
        if n_volume == 0 {
            return Err(ElectricalError::NoVolumeCells);
        }
        let mut qp_offsets = Vec::with_capacity(n_volume + 1);
        qp_offsets.push(0);
        for &b in &elem_block {
            qp_offsets.push(qp_offsets.last().unwrap() + blocks[b as usize].table.n_points());
        }

        let n_nodes = mesh.n_nodes();
        let mut active = vec![false; n_nodes];
        for &n in &elem_nodes {
            active[n] = true;
        }

        // Terminals: fixed voltages (first owner wins; conflicting values are an error) and
        // current terminals (exclusive node sets).
        let mut fixed = vec![f64::NAN; n_nodes];
        let mut node_terminal: Vec<u32> = vec![u32::MAX; n_nodes];
        let mut out_terminals: Vec<Terminal> = Vec::with_capacity(terminals.len());
        for (ti, spec) in terminals.iter().enumerate() {
            let group = resolve(mesh, &spec.group)?;
            let mut nodes = mesh.group_nodes(group);
            nodes.retain(|&n| active[n]);
            if nodes.is_empty() {
                return Err(ElectricalError::EmptyTerminal { terminal: spec.group.clone() });
            }
            let voltage = match spec.kind {
                TerminalKind::Voltage { value } => {
                    check_finite(format!("terminal.{}.voltage", spec.group), value)?;
                    Some(value)
                }
                TerminalKind::Ground => Some(0.0),
                TerminalKind::Current { current } => {
                    check_finite(format!("terminal.{}.current", spec.group), current)?;
                    None
                }
            };
            let mut owned = Vec::with_capacity(nodes.len());
            for &n in &nodes {
                let prev = node_terminal[n];
                if prev != u32::MAX {
                    let p = &out_terminals[prev as usize];
                    let reason = match (p.is_voltage(), voltage) {
                        (true, Some(v)) if fixed[n] != v => "different fixed voltages",
                        (true, Some(_)) => continue,
                        _ => "a current terminal is an equipotential of its own",
                    };
                    return Err(ElectricalError::ConflictingTerminals {
                        node_tag: mesh.node_tags[n],
                        position: mesh.coords[n],
                        first: terminals[prev as usize].group.clone(),
                        second: spec.group.clone(),
                        reason,
                    });
                }
                node_terminal[n] = ti as u32;
                if let Some(v) = voltage {
                    fixed[n] = v;
                }
                owned.push(n);
            }
            out_terminals.push(Terminal {
                name: spec.group.clone(),
                kind: spec.kind.clone(),
                nodes,
                owned_nodes: owned,
                unknown: None,
                element: None,
            });
        }
        if !out_terminals.iter().any(|t| t.is_voltage()) {
            return Err(ElectricalError::NoPotentialReference);
        }

        // Numbering: free nodes in node order, then the current terminals.
        let mut unknown_of_node = vec![None; n_nodes];
        let mut node_of_unknown = Vec::new();
        for n in 0..n_nodes {
            if active[n] && node_terminal[n] == u32::MAX {
                unknown_of_node[n] = Some(node_of_unknown.len());
                node_of_unknown.push(n);
            }
        }
        let n_free_nodes = node_of_unknown.len();
        let mut terminal_of_unknown = Vec::new();
        for (ti, t) in out_terminals.iter_mut().enumerate() {
            if t.is_voltage() {
                continue;
            }
            let u = node_of_unknown.len();
            for &n in &t.nodes {
                unknown_of_node[n] = Some(u);
            }
            node_of_unknown.push(t.nodes[0]);
            terminal_of_unknown.push(ti);
            t.unknown = Some(u);
            // The terminal element: one local dof, the terminal unknown, carrying −I.
            t.element = Some(elem_offsets.len() - 1);
            elem_nodes.push(t.nodes[0]);
            elem_offsets.push(elem_nodes.len());
        }
        let elem_dofs =
            elem_nodes.iter().map(|&n| unknown_of_node[n].unwrap_or(CONSTRAINED)).collect();

        let mut index: Vec<Vec<u32>> = owner.iter().map(|o| vec![u32::MAX; o.len()]).collect();
        for (e, c) in elem_cells.iter().enumerate() {
            index[c.block][c.index] = e as u32;
        }
        let mut group_elements = HashMap::new();
        for g in mesh.groups.iter().filter(|g| g.dim == 3) {
            let mut els: Vec<usize> = g
                .cells
                .iter()
                .filter(|c| c.block < index.len() && c.index < index[c.block].len())
                .map(|c| index[c.block][c.index])
                .filter(|&e| e != u32::MAX)
                .map(|e| e as usize)
                .collect();
            els.sort_unstable();
            if !els.is_empty() {
                group_elements.insert(g.name.clone(), els);
            }
        }
        group_elements.insert("*".to_string(), (0..n_volume).collect());

        let model = ElectricalModel {
            coords: mesh.coords.clone(),
            node_tags: mesh.node_tags.clone(),
            blocks,
            elem_block,
            elem_conductor,
            elem_offsets,
            elem_nodes,
            elem_dofs,
            elem_cell_tags,
            elem_cells,
            n_volume,
            qp_offsets,
            conductors: out_conductors,
            sigma_elem,
            terminals: out_terminals,
            fixed,
            unknown_of_node,
            node_of_unknown,
            terminal_of_unknown,
            n_free_nodes,
            group_elements,
            element_of_cell: index,
        };
        model.check_orientation()?;
        tracing::debug!(
            elements = model.n_elements(),
            unknowns = model.n_unknowns(),
            "electrical model set up"
        );
        Ok(model)
    }

    /// Every volume element must have a positive Jacobian determinant at its quadrature points.
    fn check_orientation(&self) -> Result<(), ElectricalError> {
        let min_det = |e: usize| -> f64 {
            let blk = self.block(e);
            let x = self.element_coords(e);
            let nn = blk.cell_type.n_nodes();
            let mut g = [[0.0; 3]; MAX_NODES];
            (0..blk.table.n_points())
                .map(|q| {
                    geometry::physical_gradients_into(3, blk.table.grad(q), &x[..nn], &mut g[..nn])
                })
                .fold(
                    f64::INFINITY,
                    |a, d| if d.is_nan() || a.is_nan() { f64::NAN } else { a.min(d) },
                )
        };
        let bad = (0..self.n_volume)
            .into_par_iter()
            .find_first(|&e| min_det(e).partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater));
        if let Some(e) = bad {
            let blk = self.block(e);
            let x = self.element_coords(e);
            let n = blk.cell_type.n_vertices();
            let mut c = [0.0; 3];
            for p in &x[..n] {
                for k in 0..3 {
                    c[k] += p[k] / n as f64;
                }
            }
            return Err(ElectricalError::InvertedCell {
                cell_tag: self.elem_cell_tags[e],
                cell_type: blk.cell_type,
                det_j: min_det(e),
                centroid: c,
            });
        }
        Ok(())
    }

    /// Re-check element orientation after the coordinates changed (shape perturbation).
    pub fn check_coordinates(&self) -> Result<(), ElectricalError> {
        self.check_orientation()
    }

    // ----- sizes and numbering -------------------------------------------------------------

    /// Number of unknowns: free nodes, then one per current terminal.
    pub fn n_unknowns(&self) -> usize {
        self.node_of_unknown.len()
    }

    /// Number of free-node unknowns (the first ones; current terminals follow).
    pub fn n_free_nodes(&self) -> usize {
        self.n_free_nodes
    }

    /// Number of nodes of the mesh.
    pub fn n_nodes(&self) -> usize {
        self.coords.len()
    }

    /// Number of elements the assembly loops over: volume cells, then one terminal element per
    /// current terminal.
    pub fn n_elements(&self) -> usize {
        self.elem_offsets.len() - 1
    }

    /// Number of volume elements (the first `n_volume_elements()` elements).
    pub fn n_volume_elements(&self) -> usize {
        self.n_volume
    }

    /// Element offsets into [`ElectricalModel::element_dofs`] (length `n_elements() + 1`).
    pub fn element_offsets(&self) -> &[usize] {
        &self.elem_offsets
    }

    /// Local dofs of all elements: unknown indices (repeated where several local nodes lie on
    /// one current terminal) or [`CONSTRAINED`].
    pub fn element_dofs(&self) -> &[usize] {
        &self.elem_dofs
    }

    /// The mesh nodes of element `e` (for a terminal element: the terminal's first node).
    pub fn element_nodes(&self, e: usize) -> &[usize] {
        &self.elem_nodes[self.elem_offsets[e]..self.elem_offsets[e + 1]]
    }

    /// The mesh cell behind volume element `e`.
    pub fn element_cell(&self, e: usize) -> CellId {
        self.elem_cells[e]
    }

    /// The original tag of the mesh cell behind volume element `e`.
    pub fn element_cell_tag(&self, e: usize) -> u64 {
        self.elem_cell_tags[e]
    }

    /// The cell type of volume element `e`.
    pub fn element_cell_type(&self, e: usize) -> CellType {
        self.block(e).cell_type
    }

    /// The element table (quadrature `2·order` and shape functions) of volume element `e`:
    /// the same as the thermal model's for the same cell.
    pub fn element_table(&self, e: usize) -> &ElementTable {
        &self.block(e).table
    }

    /// The volume element of mesh cell `cell`, if the cell belongs to a conductor (to map
    /// per-element data onto another field's elements of the same cells).
    pub fn volume_element_of_cell(&self, cell: CellId) -> Option<usize> {
        self.element_of_cell
            .get(cell.block)
            .and_then(|b| b.get(cell.index))
            .filter(|&&e| e != u32::MAX)
            .map(|&e| e as usize)
    }

    /// The conductor of volume element `e`.
    pub fn element_conductor(&self, e: usize) -> usize {
        assert!(e < self.n_volume, "element {e} is not a volume element");
        self.elem_conductor[e] as usize
    }

    /// Offsets of each volume element's quadrature points in the flat per-point arrays
    /// (length `n_volume_elements() + 1`).
    pub fn qp_offsets(&self) -> &[usize] {
        &self.qp_offsets
    }

    /// For each node: its unknown (a free node's, or its current terminal's), `None` when the
    /// node has a fixed voltage or carries no field.
    pub fn unknown_of_node(&self) -> &[Option<usize>] {
        &self.unknown_of_node
    }

    /// The volume elements of a 3D group (`"*"` for all of them).
    pub fn group_elements(&self, group: &str) -> Result<&[usize], ElectricalError> {
        self.group_elements.get(group).map(|v| v.as_slice()).ok_or_else(|| {
            let mut known: Vec<String> = self.group_elements.keys().cloned().collect();
            known.sort();
            ElectricalError::UnknownGroup { name: group.to_string(), known }
        })
    }

    /// The index of the terminal on group `name`.
    pub fn terminal_index(&self, name: &str) -> Result<usize, ElectricalError> {
        self.terminals.iter().position(|t| t.name == name).ok_or_else(|| {
            ElectricalError::UnknownTerminal {
                name: name.to_string(),
                known: self.terminals.iter().map(|t| t.name.clone()).collect(),
            }
        })
    }

    /// True: for a given temperature field the problem is linear in φ, and its tangent is
    /// symmetric positive definite (with at least one voltage terminal).
    pub fn is_linear(&self) -> bool {
        true
    }

    /// True when some conductor's resistivity depends on temperature.
    pub fn depends_on_temperature(&self) -> bool {
        self.conductors.iter().any(|c| !c.law.is_constant())
    }

    /// Nodal potentials from the unknowns and the fixed voltages (NaN at inactive nodes).
    pub fn nodal_potential(&self, unknowns: &[f64]) -> Vec<f64> {
        assert_eq!(unknowns.len(), self.n_unknowns(), "unknown vector has the wrong length");
        let mut phi = self.fixed.clone();
        for (p, u) in phi.iter_mut().zip(&self.unknown_of_node) {
            if let Some(u) = u {
                *p = unknowns[*u];
            }
        }
        phi
    }

    /// A nodal vector from a vector over the unknowns, 0 at fixed and inactive nodes (the
    /// nodal form of an adjoint λ expected by the vector-Jacobian products).
    pub fn nodal_from_unknowns(&self, unknowns: &[f64]) -> Vec<f64> {
        assert_eq!(unknowns.len(), self.n_unknowns(), "unknown vector has the wrong length");
        self.unknown_of_node.iter().map(|u| u.map_or(0.0, |u| unknowns[u])).collect()
    }

    /// The unknowns of a nodal potential (a current terminal takes its first node's value).
    pub fn unknowns_from_nodal(&self, phi: &[f64]) -> Vec<f64> {
        self.node_of_unknown.iter().map(|&n| phi[n]).collect()
    }

    /// The transpose of [`nodal_potential`](Self::nodal_potential)'s dependence on the unknowns:
    /// ∂J/∂u_i = Σ_{n → i} ∂J/∂φ_n (a current terminal's unknown sums its nodes). The right-hand
    /// side of the adjoint solve from a nodal ∂J/∂φ.
    pub fn unknowns_adjoint(&self, d_phi: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; self.n_unknowns()];
        for (d, u) in d_phi.iter().zip(&self.unknown_of_node) {
            if let Some(u) = u {
                out[*u] += d;
            }
        }
        out
    }

    /// Per voltage terminal: Σ over its owned nodes of a nodal vector (∂J/∂V from a nodal
    /// ∂J/∂φ); 0 for current terminals.
    pub fn voltage_adjoint(&self, d_phi: &[f64]) -> Vec<f64> {
        self.terminals
            .iter()
            .map(
                |t| {
                    if t.is_voltage() { t.owned_nodes.iter().map(|&n| d_phi[n]).sum() } else { 0.0 }
                },
            )
            .collect()
    }

    /// Set the value of terminal `k`: V for a voltage terminal, I for a current terminal.
    ///
    /// # Panics
    /// For a ground terminal.
    pub fn set_terminal_value(&mut self, k: usize, value: f64) {
        match &mut self.terminals[k].kind {
            TerminalKind::Voltage { value: v } => *v = value,
            TerminalKind::Current { current } => *current = value,
            TerminalKind::Ground => panic!("terminal '{}' is a ground", self.terminals[k].name),
        }
        let mut done = vec![false; self.coords.len()];
        for t in &self.terminals {
            let v = match t.kind {
                TerminalKind::Voltage { value } => value,
                TerminalKind::Ground => 0.0,
                TerminalKind::Current { .. } => continue,
            };
            for &n in &t.nodes {
                if !done[n] {
                    done[n] = true;
                    self.fixed[n] = v;
                }
            }
        }
    }

    /// Set α_R of conductor `c` (whose law must be linear).
    pub fn set_alpha_r(&mut self, c: usize, alpha_r: f64) {
        let cond = &mut self.conductors[c];
        let ResistivityLaw::Linear { alpha_r: a } = &mut cond.law else {
            panic!("conductor '{}' does not have a linear resistivity law", cond.name);
        };
        *a = alpha_r;
    }

    /// A description of mesh node `n` for messages: tag and position.
    pub fn describe_node(&self, n: usize) -> String {
        let p = self.coords[n];
        format!("node {} at ({:.6e}, {:.6e}, {:.6e})", self.node_tags[n], p[0], p[1], p[2])
    }

    /// A description of unknown `dof` for messages.
    pub fn describe_dof(&self, dof: usize) -> String {
        if dof >= self.n_free_nodes {
            let t = &self.terminals[self.terminal_of_unknown[dof - self.n_free_nodes]];
            format!("voltage of current terminal '{}' ({} nodes)", t.name, t.nodes.len())
        } else {
            self.describe_node(self.node_of_unknown[dof])
        }
    }

    // ----- element kernels -----------------------------------------------------------------

    fn block(&self, e: usize) -> &ElemBlock {
        assert!(e < self.n_volume, "element {e} is not a volume element");
        &self.blocks[self.elem_block[e] as usize]
    }

    fn element_coords(&self, e: usize) -> [[f64; 3]; MAX_NODES] {
        let mut x = [[0.0; 3]; MAX_NODES];
        for (xa, &n) in x.iter_mut().zip(self.element_nodes(e)) {
            *xa = self.coords[n];
        }
        x
    }

    /// The values of a nodal vector at the nodes of element `e` (zero past its node count).
    fn element_values(&self, e: usize, nodal: &[f64]) -> [f64; MAX_NODES] {
        let mut v = [0.0; MAX_NODES];
        for (va, &n) in v.iter_mut().zip(self.element_nodes(e)) {
            *va = nodal[n];
        }
        v
    }

    /// Loop over the quadrature points of volume element `e`: `f(q, shape, grads, state)`.
    pub(crate) fn for_points(
        &self,
        e: usize,
        phi: &[f64],
        t: Option<&[f64]>,
        mut f: impl FnMut(usize, &[f64], &[[f64; 3]], &PointState),
    ) {
        let blk = self.block(e);
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let x = self.element_coords(e);
        let cond = &self.conductors[self.elem_conductor[e] as usize];
        let sigma0 = self.sigma_elem[e];
        let mut g = [[0.0; 3]; MAX_NODES];
        for q in 0..blk.table.n_points() {
            let det =
                geometry::physical_gradients_into(3, blk.table.grad(q), &x[..nn], &mut g[..nn]);
            let n = blk.table.shape(q);
            let tq = match t {
                Some(t) => (0..nn).map(|a| n[a] * t[nodes[a]]).sum(),
                None => cond.t_ref,
            };
            let (m, dm_dt, dm_da) = cond.law.multiplier_and_slopes(cond.t_ref, tq);
            let inv_m = 1.0 / m;
            let sigma = sigma0 * inv_m;
            let mut gp = [0.0; 3];
            for a in 0..nn {
                for k in 0..3 {
                    gp[k] += g[a][k] * phi[nodes[a]];
                }
            }
            let state = PointState {
                w: det * blk.table.weights[q],
                sigma,
                dsigma_dt: if t.is_some() { -sigma * inv_m * dm_dt } else { 0.0 },
                dsigma_da: -sigma * inv_m * dm_da,
                inv_m,
                grad_phi: gp,
            };
            f(q, n, &g[..nn], &state);
        }
    }

    /// Element residual `fe` (and tangent `ke` = ∂fe/∂φ_e, row-major nn×nn, when given) of
    /// element `e` at nodal potentials `phi` (all nodes) and nodal temperatures `t` (`None`:
    /// every conductor at its reference temperature). Both buffers must be zeroed by the caller.
    ///
    /// Volume element: fe_a = ∫ σ(T) ∇N_a·∇φ dΩ, ke_ab = ∫ σ(T) ∇N_a·∇N_b dΩ.
    /// Terminal element of a current terminal: `fe = [−I]`, `ke = [0]`.
    pub fn element_residual_tangent(
        &self,
        e: usize,
        phi: &[f64],
        t: Option<&[f64]>,
        ke: Option<&mut [f64]>,
        fe: &mut [f64],
    ) {
        if e >= self.n_volume {
            let term = &self.terminals[self.terminal_of_unknown[e - self.n_volume]];
            if let TerminalKind::Current { current } = term.kind {
                fe[0] -= current;
            }
            return;
        }
        let nn = self.element_nodes(e).len();
        let mut ke = ke;
        self.for_points(e, phi, t, |_, _, g, s| {
            let c = s.w * s.sigma;
            for a in 0..nn {
                let ga = g[a];
                fe[a] +=
                    c * (ga[0] * s.grad_phi[0] + ga[1] * s.grad_phi[1] + ga[2] * s.grad_phi[2]);
                if let Some(ke) = ke.as_deref_mut() {
                    for b in a..nn {
                        let v = c * (ga[0] * g[b][0] + ga[1] * g[b][1] + ga[2] * g[b][2]);
                        ke[a * nn + b] += v;
                        if b != a {
                            ke[b * nn + a] += v;
                        }
                    }
                }
            }
        });
    }

    /// ∂r_e/∂T_e of volume element `e` (row-major nn×nn, added to `out`):
    /// ∫ ∂σ/∂T N_b ∇N_a·∇φ dΩ. The off-diagonal block of a monolithic electro-thermal tangent.
    pub fn temperature_tangent_element(&self, e: usize, phi: &[f64], t: &[f64], out: &mut [f64]) {
        let nn = self.element_nodes(e).len();
        assert_eq!(out.len(), nn * nn, "temperature tangent buffer has the wrong size");
        self.for_points(e, phi, Some(t), |_, n, g, s| {
            let c = s.w * s.dsigma_dt;
            if c == 0.0 {
                return;
            }
            for a in 0..nn {
                let ga_gp =
                    g[a][0] * s.grad_phi[0] + g[a][1] * s.grad_phi[1] + g[a][2] * s.grad_phi[2];
                for b in 0..nn {
                    out[a * nn + b] += c * ga_gp * n[b];
                }
            }
        });
    }

    /// The element residual generic over the scalar (for dual-number derivatives and tests):
    /// coordinates `x`, nodal potentials `phi_e`, nodal temperatures `t_e` (`None`: the
    /// reference temperature), σ₀ and α_R as scalars of type D. Volume elements only.
    pub fn element_residual_generic<D: DualNum<Primitive = f64> + Copy>(
        &self,
        e: usize,
        x: &[[D; 3]],
        phi_e: &[D],
        t_e: Option<&[D]>,
        sigma0: D,
        alpha_r: D,
        out: &mut [D],
    ) {
        let blk = self.block(e);
        let nn = blk.cell_type.n_nodes();
        let cond = &self.conductors[self.elem_conductor[e] as usize];
        out[..nn].iter_mut().for_each(|o| *o = D::from(0.0));
        let mut g = [[D::from(0.0); 3]; MAX_NODES];
        for q in 0..blk.table.n_points() {
            let det = generic::physical_gradients(blk.table.grad(q), &x[..nn], &mut g[..nn]);
            let w = det * blk.table.weights[q];
            let n = blk.table.shape(q);
            let tq = match t_e {
                Some(te) => (0..nn).fold(D::from(0.0), |acc, a| acc + te[a] * n[a]),
                None => D::from(cond.t_ref),
            };
            let sigma = crate::law::conductivity(sigma0, &cond.law, cond.t_ref, alpha_r, tq);
            let mut gp = [D::from(0.0); 3];
            for a in 0..nn {
                for k in 0..3 {
                    gp[k] += g[a][k] * phi_e[a];
                }
            }
            let j = crate::law::current_density(sigma, gp);
            for a in 0..nn {
                out[a] -= w * (g[a][0] * j[0] + g[a][1] * j[1] + g[a][2] * j[2]);
            }
        }
    }

    /// Joule heat Q_q = σ(T_q) |∇φ_q|² at the given points of the element, generic over the
    /// scalar (coordinates may be dual numbers).
    fn joule_generic<D: DualNum<Primitive = f64> + Copy>(
        &self,
        e: usize,
        x: &[[D; 3]],
        phi_e: &[D],
        t_e: Option<&[D]>,
        sigma0: D,
        alpha_r: D,
        out: &mut [D],
    ) {
        let blk = self.block(e);
        let nn = blk.cell_type.n_nodes();
        let cond = &self.conductors[self.elem_conductor[e] as usize];
        let mut g = [[D::from(0.0); 3]; MAX_NODES];
        for q in 0..blk.table.n_points() {
            generic::physical_gradients(blk.table.grad(q), &x[..nn], &mut g[..nn]);
            let n = blk.table.shape(q);
            let tq = match t_e {
                Some(te) => (0..nn).fold(D::from(0.0), |acc, a| acc + te[a] * n[a]),
                None => D::from(cond.t_ref),
            };
            let sigma = crate::law::conductivity(sigma0, &cond.law, cond.t_ref, alpha_r, tq);
            let mut gp = [D::from(0.0); 3];
            for a in 0..nn {
                for k in 0..3 {
                    gp[k] += g[a][k] * phi_e[a];
                }
            }
            out[q] = crate::law::joule_heat(sigma, gp);
        }
    }

    /// The Joule heat of volume element `e` at its quadrature points, generic over the scalar
    /// (for tests and dual-number derivatives); `out` has one entry per point.
    pub fn joule_heat_generic<D: DualNum<Primitive = f64> + Copy>(
        &self,
        e: usize,
        x: &[[D; 3]],
        phi_e: &[D],
        t_e: Option<&[D]>,
        sigma0: D,
        alpha_r: D,
        out: &mut [D],
    ) {
        self.joule_generic(e, x, phi_e, t_e, sigma0, alpha_r, out)
    }

    /// ∫ Q N_a dΩ of volume element `e` (added to `out`): the Joule load of the thermal
    /// residual R_T,a = … − ∫ Q N_a dΩ.
    pub fn joule_load_element(&self, e: usize, phi: &[f64], t: Option<&[f64]>, out: &mut [f64]) {
        self.for_points(e, phi, t, |_, n, _, s| {
            let q = s.sigma * dot(s.grad_phi, s.grad_phi);
            for (o, na) in out.iter_mut().zip(n) {
                *o += s.w * q * na;
            }
        });
    }

    /// Derivatives of the element Joule load s_a = ∫ Q N_a dΩ of volume element `e` (added to
    /// the row-major nn×nn buffers): `dq_dphi[a][b]` = ∂s_a/∂φ_b = ∫ 2σ ∇φ·∇N_b N_a dΩ and
    /// `dq_dt[a][b]` = ∂s_a/∂T_b = ∫ ∂σ/∂T |∇φ|² N_b N_a dΩ. The thermal residual's off-diagonal
    /// blocks are their negatives.
    pub fn joule_tangent_element(
        &self,
        e: usize,
        phi: &[f64],
        t: Option<&[f64]>,
        dq_dphi: &mut [f64],
        dq_dt: &mut [f64],
    ) {
        let nn = self.element_nodes(e).len();
        assert!(dq_dphi.len() == nn * nn && dq_dt.len() == nn * nn, "buffers must be nn×nn");
        self.for_points(e, phi, t, |_, n, g, s| {
            let gp2 = dot(s.grad_phi, s.grad_phi);
            for b in 0..nn {
                let dphi = 2.0 * s.sigma * dot(s.grad_phi, g[b]) * s.w;
                let dt = s.dsigma_dt * gp2 * n[b] * s.w;
                for a in 0..nn {
                    dq_dphi[a * nn + b] += dphi * n[a];
                    dq_dt[a * nn + b] += dt * n[a];
                }
            }
        });
    }

    /// The Joule heat's Jacobian at the points of volume element `e`, added row-major into the
    /// (points × nodes) buffers: ∂Q_q/∂φ_b = 2σ ∇φ·∇N_b and ∂Q_q/∂T_b = ∂σ/∂T |∇φ|² N_b (zero
    /// without a temperature field). Composed with the receiving residual's ∂R/∂Q it gives the
    /// monolithic Jacobian's Joule blocks.
    pub fn joule_qp_jacobian_element(
        &self,
        e: usize,
        phi: &[f64],
        t: Option<&[f64]>,
        dq_dphi: &mut [f64],
        dq_dt: &mut [f64],
    ) {
        let nn = self.element_nodes(e).len();
        let nq = self.qp_offsets[e + 1] - self.qp_offsets[e];
        assert!(
            dq_dphi.len() == nq * nn && dq_dt.len() == nq * nn,
            "buffers must be points × nodes"
        );
        self.for_points(e, phi, t, |q, n, g, s| {
            let gp2 = dot(s.grad_phi, s.grad_phi);
            for b in 0..nn {
                dq_dphi[q * nn + b] += 2.0 * s.sigma * dot(s.grad_phi, g[b]);
                dq_dt[q * nn + b] += s.dsigma_dt * gp2 * n[b];
            }
        });
    }

    // ----- outputs -------------------------------------------------------------------------

    /// Joule heat Q = σ(T) |∇φ|² [W/m³] at the quadrature points of every volume element
    /// (the thermal model's points: `ElementTable::new(ct, 2·order)`, in table order), flat,
    /// element by element in conductor order; element e's points are
    /// `qp_offsets()[e]..qp_offsets()[e + 1]`.
    pub fn joule_heat_qp(&self, phi: &[f64], t: Option<&[f64]>) -> Vec<f64> {
        let mut out = vec![0.0; *self.qp_offsets.last().unwrap()];
        let runs = self.qp_offsets[..=self.n_volume].windows(2).map(|w| w[1] - w[0]);
        let slices = gradfem_kernel::split_runs(&mut out, runs);
        slices.into_par_iter().enumerate().for_each(|(e, s)| {
            self.for_points(e, phi, t, |q, _, _, st| {
                s[q] = st.sigma * dot(st.grad_phi, st.grad_phi)
            });
        });
        out
    }

    /// Joule power ∫_e Q dΩ \[W\] of every volume element.
    pub fn joule_power_elements(&self, phi: &[f64], t: Option<&[f64]>) -> Vec<f64> {
        (0..self.n_volume)
            .into_par_iter()
            .map(|e| {
                let mut p = 0.0;
                self.for_points(e, phi, t, |_, _, _, s| {
                    p += s.w * s.sigma * dot(s.grad_phi, s.grad_phi)
                });
                p
            })
            .collect()
    }

    /// Current density J = −σ ∇φ [A/m²] averaged over each volume element (a cell field).
    pub fn cell_current_density(&self, phi: &[f64], t: Option<&[f64]>) -> Vec<[f64; 3]> {
        (0..self.n_volume)
            .into_par_iter()
            .map(|e| {
                let mut acc = [0.0; 3];
                let mut vol = 0.0;
                self.for_points(e, phi, t, |_, _, _, s| {
                    let j = crate::law::current_density(s.sigma, s.grad_phi);
                    for k in 0..3 {
                        acc[k] += s.w * j[k];
                    }
                    vol += s.w;
                });
                acc.map(|v| v / vol)
            })
            .collect()
    }

    /// The interior residual R^int at every node (volume elements only, fixed nodes included).
    pub fn interior_residual(&self, phi: &[f64], t: Option<&[f64]>) -> Vec<f64> {
        let mut out = vec![0.0; self.n_nodes()];
        self.scatter_chunked(&mut out, 1, |e, local| {
            self.element_residual_tangent(e, phi, t, None, local)
        });
        out
    }

    /// The current INTO the device through each terminal \[A\]: I_t = Σ_{a ∈ owned nodes} R_a^int
    /// (for a voltage terminal its reaction; for a current terminal the given I at
    /// convergence).
    pub fn terminal_currents(&self, phi: &[f64], t: Option<&[f64]>) -> Vec<f64> {
        let r = self.interior_residual(phi, t);
        self.terminals.iter().map(|term| term.owned_nodes.iter().map(|&n| r[n]).sum()).collect()
    }

    /// The voltage of each terminal \[V\]: given for voltage terminals, solved for current ones.
    pub fn terminal_voltages(&self, phi: &[f64]) -> Vec<f64> {
        self.terminals
            .iter()
            .map(|term| match term.kind {
                TerminalKind::Voltage { value } => value,
                TerminalKind::Ground => 0.0,
                TerminalKind::Current { .. } => phi[term.nodes[0]],
            })
            .collect()
    }

    /// The given current of terminal `k` (`None` for voltage terminals).
    pub fn terminal_current_parameter(&self, k: usize) -> Option<f64> {
        match self.terminals[k].kind {
            TerminalKind::Current { current } => Some(current),
            _ => None,
        }
    }

    /// The device resistance R = (V_d − V_r) / I_d \[Ω\] between a driven terminal `drive` and a
    /// reference terminal `reference`, with I_d the current into the device through `drive`
    /// (see [`terminal_currents`](Self::terminal_currents)).
    pub fn resistance(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        drive: usize,
        reference: usize,
    ) -> f64 {
        let v = self.terminal_voltages(phi);
        let i = match self.terminal_current_parameter(drive) {
            Some(i) => i,
            None => self.terminal_currents(phi, t)[drive],
        };
        (v[drive] - v[reference]) / i
    }

    // ----- vector-Jacobian products ---------------------------------------------------------

    /// (∂R/∂φ)ᵀ λ over every node (fixed nodes included), from the volume elements without
    /// forming their tangents: the element tangent ∫ σ ∇N_a·∇N_b dΩ is symmetric, so
    /// ((∂r/∂φ)ᵀ λ)_b = ∫ σ ∇N_b·∇λ dΩ with ∇λ = Σ_a λ_a ∇N_a.
    pub fn tangent_transpose_product(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        lambda: &[f64],
    ) -> Vec<f64> {
        let which = ResidualProducts { tangent: true, ..ResidualProducts::NONE };
        let (nodal, _) = self.residual_products(phi, t, lambda, which);
        nodal.chunks_exact(PRODUCTS_WIDTH).map(|c| c[0]).collect()
    }

    /// λᵀ ∂R/∂p for every parameter at nodal potentials `phi` and temperatures `t`, for `lambda`
    /// given at every node (see the module doc). Everything requested is computed in one pass
    /// over the volume elements.
    pub fn parameter_vjp(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        lambda: &[f64],
        want: VjpRequest,
    ) -> ElectricalVjp {
        let n_nodes = self.n_nodes();
        assert!(phi.len() == n_nodes && lambda.len() == n_nodes, "phi and lambda are nodal");
        let mut vjp = ElectricalVjp {
            sigma_elem: vec![0.0; self.n_volume],
            alpha_r: vec![0.0; self.conductors.len()],
            current: vec![0.0; self.terminals.len()],
            voltage: vec![0.0; self.terminals.len()],
            coords: None,
            temperature: vec![0.0; n_nodes],
        };
        let which = ResidualProducts {
            conductivity: want.conductivity,
            tangent: want.terminals,
            temperature: want.temperature && t.is_some(),
            coords: want.coords,
        };
        if which.conductivity || which.tangent || which.temperature || which.coords {
            let (nodal, per_element) = self.residual_products(phi, t, lambda, which);
            self.unpack_products(&nodal, &per_element, which, &mut vjp);
        }
        if want.terminals {
            for (k, term) in self.terminals.iter().enumerate() {
                if !term.is_voltage() {
                    vjp.current[k] = -lambda[term.nodes[0]];
                }
            }
        }
        vjp
    }

    /// Spread the packed products of [`residual_products`](Self::residual_products) into `vjp`.
    fn unpack_products(
        &self,
        nodal: &[f64],
        per_element: &[f64],
        which: ResidualProducts,
        vjp: &mut ElectricalVjp,
    ) {
        if which.conductivity {
            for (e, p) in per_element.chunks_exact(PRODUCTS_WIDTH).enumerate() {
                vjp.sigma_elem[e] = p[0];
                vjp.alpha_r[self.elem_conductor[e] as usize] += p[1];
            }
        }
        let per_node = nodal.chunks_exact(PRODUCTS_WIDTH);
        if which.tangent {
            for (k, term) in self.terminals.iter().enumerate() {
                if term.is_voltage() {
                    vjp.voltage[k] =
                        term.owned_nodes.iter().map(|&n| nodal[PRODUCTS_WIDTH * n]).sum();
                }
            }
        }
        if which.temperature {
            vjp.temperature = per_node.clone().map(|c| c[1]).collect();
        }
        if which.coords {
            vjp.coords = Some(per_node.map(|c| [c[2], c[3], c[4]]).collect());
        }
    }

    /// The products of λ with the residual's derivatives selected by `which`, in one pass over
    /// the volume elements: [`PRODUCTS_WIDTH`] values per node and per volume element, laid out
    /// as in [`residual_products_element`](Self::residual_products_element).
    fn residual_products(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        lambda: &[f64],
        which: ResidualProducts,
    ) -> (Vec<f64>, Vec<f64>) {
        self.scatter_with_element_slot(|e, local| {
            self.residual_products_element(e, phi, t, lambda, which, local)
        })
    }

    /// The products of λ with the derivatives of the residual of volume element `e`, added to
    /// `local`: [`PRODUCTS_WIDTH`] values per local node, node-major — (∂r/∂φ)ᵀλ, (∂r/∂T)ᵀλ,
    /// then λᵀ ∂r/∂X in x, y, z — followed by the element's λᵀ ∂r/∂σ₀ and λᵀ ∂r/∂α_R (and
    /// three unused zeros). The parts `which` leaves out stay untouched. With
    /// ∇λ = Σ_a λ_a ∇N_a and the weights w_q det J of the points:
    ///
    /// - (∂r/∂φ)ᵀλ_b = Σ_q w_q det J σ ∇N_b·∇λ (the element tangent is symmetric);
    /// - (∂r/∂T)ᵀλ_b = Σ_q w_q det J ∂σ/∂T (∇λ·∇φ) N_b;
    /// - λᵀ ∂r/∂X_bi = Σ_q w_q det J σ [ (∇N_b)ᵢ ∇λ·∇φ − (∇N_b·∇φ)(∇λ)ᵢ − (∇N_b·∇λ)(∇φ)ᵢ ]:
    ///   moving node b in direction i changes det J by det J (∇N_b)ᵢ and every physical
    ///   gradient by ∂(∇N_a)/∂X_bi = −∇N_b (∇N_a)ᵢ, while the values at the points (T_q, hence
    ///   σ) stay put;
    /// - λᵀ ∂r/∂σ₀ = Σ_q w_q det J (∇λ·∇φ) / m and λᵀ ∂r/∂α_R = Σ_q w_q det J ∂σ/∂α_R (∇λ·∇φ).
    ///
    /// The tests hold the nodal products to the element tangents and the coordinate product to
    /// the dual-number derivative of [`element_residual_generic`](Self::element_residual_generic).
    fn residual_products_element(
        &self,
        e: usize,
        phi: &[f64],
        t: Option<&[f64]>,
        lambda: &[f64],
        which: ResidualProducts,
        local: &mut [f64],
    ) {
        let la = self.element_values(e, lambda);
        let (nodal, slot) = local.split_at_mut(local.len() - PRODUCTS_WIDTH);
        self.for_points(e, phi, t, |_, n, g, s| {
            let gl = gradient(g, &la);
            let gp = s.grad_phi;
            let gl_gp = dot(gl, gp);
            if which.conductivity {
                slot[0] += s.w * gl_gp * s.inv_m;
                slot[1] += s.w * gl_gp * s.dsigma_da;
            }
            if !(which.tangent || which.temperature || which.coords) {
                return;
            }
            let c = s.w * s.sigma;
            let c_t = s.w * s.dsigma_dt * gl_gp;
            for ((o, gb), nb) in nodal.chunks_exact_mut(PRODUCTS_WIDTH).zip(g).zip(n) {
                let gb_gl = dot(*gb, gl);
                if which.tangent {
                    o[0] += c * gb_gl;
                }
                if which.temperature {
                    o[1] += c_t * nb;
                }
                if which.coords {
                    let gb_gp = dot(*gb, gp);
                    for i in 0..3 {
                        o[2 + i] += c * (gb[i] * gl_gp - gb_gp * gl[i] - gb_gl * gp[i]);
                    }
                }
            }
        });
    }

    /// The reverse of the Joule heat at the quadrature points (see [`JouleVjp`]); `q_bar` has
    /// one value per point (layout of [`joule_heat_qp`](Self::joule_heat_qp)). One pass over
    /// the volume elements.
    pub fn joule_vjp(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        q_bar: &[f64],
        with_coords: bool,
    ) -> JouleVjp {
        assert_eq!(q_bar.len(), *self.qp_offsets.last().unwrap(), "q_bar has one value per point");
        let (nodal, per_element) = self.scatter_with_element_slot(|e, local| {
            let qb = &q_bar[self.qp_offsets[e]..self.qp_offsets[e + 1]];
            self.joule_products_element(e, phi, t, qb, with_coords, local)
        });
        let mut alpha_r = vec![0.0; self.conductors.len()];
        let mut sigma_elem = Vec::with_capacity(self.n_volume);
        for (e, p) in per_element.chunks_exact(PRODUCTS_WIDTH).enumerate() {
            sigma_elem.push(p[0]);
            alpha_r[self.elem_conductor[e] as usize] += p[1];
        }
        let per_node = nodal.chunks_exact(PRODUCTS_WIDTH);
        JouleVjp {
            phi: per_node.clone().map(|c| c[0]).collect(),
            temperature: per_node.clone().map(|c| c[1]).collect(),
            sigma_elem,
            alpha_r,
            coords: with_coords.then(|| per_node.map(|c| [c[2], c[3], c[4]]).collect()),
        }
    }

    /// Σ_q q̄_q ∂Q_q/∂p of volume element `e` for the Joule heat Q_q = σ(T_q) |∇φ_q|², `q_bar`
    /// holding the element's points only, added to `local` in the layout of
    /// [`residual_products_element`](Self::residual_products_element): per local node ∂/∂φ_b,
    /// ∂/∂T_b and (when `with_coords`) ∂/∂X_b, then ∂/∂σ₀ and ∂/∂α_R of the element:
    ///
    /// - Σ_q q̄_q ∂Q_q/∂φ_b = Σ_q 2 q̄_q σ ∇φ·∇N_b, Σ_q q̄_q ∂Q_q/∂T_b = Σ_q q̄_q ∂σ/∂T |∇φ|² N_b;
    /// - Σ_q q̄_q ∂Q_q/∂X_bi = −Σ_q 2 q̄_q σ (∇N_b·∇φ)(∇φ)ᵢ: Q_q moves with X only through
    ///   ∇φ, and ∂(∇φ)/∂X_bi = −∇N_b (∇φ)ᵢ;
    /// - Σ_q q̄_q ∂Q_q/∂σ₀ = Σ_q q̄_q |∇φ|² / m, Σ_q q̄_q ∂Q_q/∂α_R = Σ_q q̄_q ∂σ/∂α_R |∇φ|².
    ///
    /// The tests hold the coordinate product to the dual-number derivative of
    /// [`joule_heat_generic`](Self::joule_heat_generic).
    fn joule_products_element(
        &self,
        e: usize,
        phi: &[f64],
        t: Option<&[f64]>,
        q_bar: &[f64],
        with_coords: bool,
        local: &mut [f64],
    ) {
        let (nodal, slot) = local.split_at_mut(local.len() - PRODUCTS_WIDTH);
        self.for_points(e, phi, t, |q, n, g, s| {
            let qb = q_bar[q];
            if qb == 0.0 {
                return;
            }
            let gp = s.grad_phi;
            let gp2 = dot(gp, gp);
            slot[0] += qb * s.inv_m * gp2;
            slot[1] += qb * s.dsigma_da * gp2;
            let c = 2.0 * qb * s.sigma;
            let c_t = qb * s.dsigma_dt * gp2;
            for ((o, gb), nb) in nodal.chunks_exact_mut(PRODUCTS_WIDTH).zip(g).zip(n) {
                let f = c * dot(*gb, gp);
                o[0] += f;
                o[1] += c_t * nb;
                if with_coords {
                    for i in 0..3 {
                        o[2 + i] -= f * gp[i];
                    }
                }
            }
        });
    }

    /// Accumulate [`PRODUCTS_WIDTH`] values per local node and per element over the volume
    /// elements, deterministically and bounded in memory ([`gradfem_kernel::scatter_chunked`]):
    /// element e is seen as its nodes followed by one slot of its own, so `compute(e, local)`
    /// writes into the zeroed `local` of (n_e + 1)·[`PRODUCTS_WIDTH`] values. Returns the nodal
    /// sums and the per-element values.
    fn scatter_with_element_slot(
        &self,
        compute: impl Fn(usize, &mut [f64]) + Sync,
    ) -> (Vec<f64>, Vec<f64>) {
        let n_nodes = self.n_nodes();
        let mut offsets = Vec::with_capacity(self.n_volume + 1);
        let mut nodes = Vec::with_capacity(self.elem_offsets[self.n_volume] + self.n_volume);
        offsets.push(0);
        for e in 0..self.n_volume {
            nodes.extend_from_slice(self.element_nodes(e));
            nodes.push(n_nodes + e);
            offsets.push(nodes.len());
        }
        let mut out = vec![0.0; PRODUCTS_WIDTH * (n_nodes + self.n_volume)];
        gradfem_kernel::scatter_chunked(
            self.n_volume,
            &offsets,
            &nodes,
            &mut out,
            PRODUCTS_WIDTH,
            compute,
        );
        let per_element = out.split_off(PRODUCTS_WIDTH * n_nodes);
        (out, per_element)
    }

    /// Per-node accumulation of per-element values over the volume elements (terminal
    /// elements carry no interior residual), deterministic and bounded in memory
    /// ([`gradfem_kernel::scatter_chunked`]).
    fn scatter_chunked(
        &self,
        out: &mut [f64],
        width: usize,
        compute: impl Fn(usize, &mut [f64]) + Sync,
    ) {
        gradfem_kernel::scatter_chunked(
            self.n_volume,
            &self.elem_offsets,
            &self.elem_nodes,
            out,
            width,
            compute,
        );
    }
}

#[inline]
fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// Σ_a v_a ∇N_a over the element's physical gradients `g` (`v` may be longer).
#[inline]
fn gradient(g: &[[f64; 3]], v: &[f64]) -> [f64; 3] {
    let mut out = [0.0; 3];
    for (ga, &va) in g.iter().zip(v) {
        for k in 0..3 {
            out[k] += ga[k] * va;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gradfem_mesh::generate::{BoxSpec, box_mesh};
    use num_dual::Dual64;
    use rstest::rstest;

    fn model() -> ElectricalModel {
        let mesh = box_mesh(&BoxSpec {
            origin: [0.0; 3],
            lengths: [1.0; 3],
            divisions: [2, 2, 2],
            cell_type: CellType::Hex8,
        });
        ElectricalModel::new(
            &mesh,
            &[ConductorSpec::with_sigma("domain", 1.0)],
            &[
                TerminalSpec { group: "xmin".into(), kind: TerminalKind::Ground },
                TerminalSpec { group: "xmax".into(), kind: TerminalKind::Current { current: 1.0 } },
            ],
        )
        .unwrap()
    }

    #[test]
    fn numbering_puts_terminals_last_and_its_adjoint_is_the_transpose() {
        let m = model();
        // 27 nodes: 9 grounded, 9 on the current terminal (one unknown), 9 free.
        assert_eq!((m.n_free_nodes(), m.n_unknowns()), (9, 10));
        assert_eq!(m.n_elements(), m.n_volume_elements() + 1);
        let u: Vec<f64> = (0..m.n_unknowns()).map(|i| 1.0 + i as f64).collect();
        let d: Vec<f64> = (0..m.n_nodes()).map(|n| (n as f64).sin()).collect();
        let lhs: f64 = m.nodal_from_unknowns(&u).iter().zip(&d).map(|(a, b)| a * b).sum();
        let rhs: f64 = m.unknowns_adjoint(&d).iter().zip(&u).map(|(a, b)| a * b).sum();
        assert!((lhs - rhs).abs() < 1e-12);
        let phi = m.nodal_potential(&u);
        assert_eq!(m.unknowns_from_nodal(&phi), u);
        assert!(m.terminals[0].nodes.iter().all(|&n| phi[n] == 0.0));
        assert!(m.terminals[1].nodes.iter().all(|&n| phi[n] == 10.0));
    }

    #[test]
    fn specs_read_from_configuration_text() {
        let c: ConductorSpec = serde_json::from_str(
            r#"{"group": "cu", "resistivity": 1.7e-8, "law": {"kind": "linear", "alpha_r": 0.0039}}"#,
        )
        .unwrap();
        assert_eq!(c.resistivity, Some(1.7e-8));
        assert_eq!(c.law, ResistivityLaw::Linear { alpha_r: 0.0039 });
        assert_eq!(c.t_ref, 293.15);
        let t: TerminalSpec =
            serde_json::from_str(r#"{"group": "pad", "kind": "current", "current": 0.02}"#)
                .unwrap();
        assert_eq!(t.kind, TerminalKind::Current { current: 0.02 });
        let g: TerminalSpec =
            serde_json::from_str(r#"{"group": "gnd", "kind": "ground"}"#).unwrap();
        assert_eq!(g.kind, TerminalKind::Ground);
    }

    /// A deterministic pseudo-random sequence in [−1, 1) (SplitMix64).
    struct Random(u64);

    impl Random {
        fn next(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            2.0 * (z >> 11) as f64 / (1u64 << 53) as f64 - 1.0
        }
    }

    /// A box of `ct` cells with every node moved at random (non-affine cells), one conductor of
    /// law `law`, a voltage and a current terminal.
    fn random_model(ct: CellType, law: ResistivityLaw, rng: &mut Random) -> ElectricalModel {
        let mesh = box_mesh(&BoxSpec {
            origin: [0.0; 3],
            lengths: [1.0, 0.7, 0.5],
            divisions: [2, 2, 2],
            cell_type: ct,
        });
        let mut m = ElectricalModel::new(
            &mesh,
            &[ConductorSpec::with_resistivity("domain", 0.4, law, 300.0)],
            &[
                TerminalSpec { group: "xmin".into(), kind: TerminalKind::Voltage { value: 1.5 } },
                TerminalSpec { group: "xmax".into(), kind: TerminalKind::Current { current: 0.7 } },
            ],
        )
        .unwrap();
        for p in &mut m.coords {
            for v in p.iter_mut() {
                *v += 0.02 * rng.next();
            }
        }
        m.check_coordinates().unwrap();
        m
    }

    /// Which input of an element carries the dual part.
    #[derive(Clone, Copy)]
    enum Seed {
        Coord(usize, usize),
        Phi(usize),
        Temperature(usize),
        Sigma0,
        AlphaR,
    }

    /// The element residual and Joule heat of volume element `e` by the generic kernels, with
    /// the dual part on `seed`: the reference of the closed forms, one pass per input.
    fn dual_element(
        m: &ElectricalModel,
        e: usize,
        phi: &[f64],
        t: Option<&[f64]>,
        seed: Seed,
    ) -> (Vec<Dual64>, Vec<Dual64>) {
        let nodes = m.element_nodes(e);
        let c = Dual64::from;
        let mut x: Vec<[Dual64; 3]> = nodes.iter().map(|&n| m.coords[n].map(c)).collect();
        let mut pe: Vec<Dual64> = nodes.iter().map(|&n| c(phi[n])).collect();
        let mut te: Option<Vec<Dual64>> = t.map(|t| nodes.iter().map(|&n| c(t[n])).collect());
        let mut s0 = c(m.sigma_elem[e]);
        let mut al = c(m.conductors[m.element_conductor(e)].law.alpha_r().unwrap_or(0.0));
        match seed {
            Seed::Coord(a, i) => x[a][i].eps = 1.0,
            Seed::Phi(a) => pe[a].eps = 1.0,
            Seed::Temperature(a) => te.as_mut().expect("a temperature field")[a].eps = 1.0,
            Seed::Sigma0 => s0.eps = 1.0,
            Seed::AlphaR => al.eps = 1.0,
        }
        let mut r = vec![c(0.0); nodes.len()];
        m.element_residual_generic(e, &x, &pe, te.as_deref(), s0, al, &mut r);
        let mut q = vec![c(0.0); m.element_table(e).n_points()];
        m.joule_heat_generic(e, &x, &pe, te.as_deref(), s0, al, &mut q);
        (r, q)
    }

    /// Σ_k w_k (dual part of v_k).
    fn weighted_eps(v: &[Dual64], w: &[f64]) -> f64 {
        v.iter().zip(w).map(|(v, w)| v.eps * w).sum()
    }

    fn assert_close(what: &str, mine: &[f64], reference: &[f64]) {
        assert_eq!(mine.len(), reference.len(), "{what}: lengths differ");
        let scale = reference.iter().fold(0.0_f64, |a, v| a.max(v.abs()));
        for (k, (a, b)) in mine.iter().zip(reference).enumerate() {
            assert!(
                (a - b).abs() <= 1e-10 * scale,
                "{what}, entry {k}: closed form {a:e} vs dual numbers {b:e} (scale {scale:e})"
            );
        }
    }

    /// The closed-form products of the residual and of the Joule heat with respect to the node
    /// coordinates, potentials, temperatures, σ₀ and α_R equal the dual-number derivatives of
    /// the generic kernels, element by element and assembled by `parameter_vjp` and
    /// `joule_vjp`, at random coordinates, potentials, temperatures and seeds.
    #[rstest]
    fn vjps_match_dual_numbers(
        #[values(
            CellType::Tet4,
            CellType::Tet10,
            CellType::Hex8,
            CellType::Hex20,
            CellType::Hex27
        )]
        ct: CellType,
        #[values(
            ResistivityLaw::Constant,
            ResistivityLaw::Linear { alpha_r: 3.9e-3 },
            ResistivityLaw::Table {
                temperatures: vec![280.0, 310.0, 330.0, 400.0],
                multipliers: vec![0.9, 1.0, 1.3, 1.6],
            }
        )]
        law: ResistivityLaw,
        #[values(false, true)] with_t: bool,
    ) {
        let mut rng = Random(ct.n_nodes() as u64 * 7919 + with_t as u64);
        let m = random_model(ct, law, &mut rng);
        let nn = m.n_nodes();
        let phi: Vec<f64> = (0..nn).map(|_| rng.next()).collect();
        let t: Vec<f64> = (0..nn).map(|_| 340.0 + 60.0 * rng.next()).collect();
        let t = with_t.then_some(t.as_slice());
        let lambda: Vec<f64> = (0..nn).map(|_| rng.next()).collect();
        let q_bar: Vec<f64> = (0..*m.qp_offsets().last().unwrap()).map(|_| rng.next()).collect();
        let mut r_nodal = vec![[0.0; PRODUCTS_WIDTH]; nn];
        let mut j_nodal = vec![[0.0; PRODUCTS_WIDTH]; nn];
        let mut r_elem = Vec::new();
        let mut j_elem = Vec::new();
        let all =
            ResidualProducts { conductivity: true, tangent: true, temperature: true, coords: true };
        for e in 0..m.n_volume_elements() {
            let nodes = m.element_nodes(e);
            let w: Vec<f64> = nodes.iter().map(|&n| lambda[n]).collect();
            let qb = &q_bar[m.qp_offsets()[e]..m.qp_offsets()[e + 1]];
            // Reference, packed like the closed forms: per node (φ, T, X), then (σ₀, α_R).
            let mut r_ref = vec![0.0; PRODUCTS_WIDTH * (nodes.len() + 1)];
            let mut j_ref = r_ref.clone();
            let mut put = |k: usize, seed: Seed| {
                let (r, q) = dual_element(&m, e, &phi, t, seed);
                r_ref[k] = weighted_eps(&r, &w);
                j_ref[k] = weighted_eps(&q, qb);
            };
            for a in 0..nodes.len() {
                put(PRODUCTS_WIDTH * a, Seed::Phi(a));
                if t.is_some() {
                    put(PRODUCTS_WIDTH * a + 1, Seed::Temperature(a));
                }
                for i in 0..3 {
                    put(PRODUCTS_WIDTH * a + 2 + i, Seed::Coord(a, i));
                }
            }
            put(PRODUCTS_WIDTH * nodes.len(), Seed::Sigma0);
            put(PRODUCTS_WIDTH * nodes.len() + 1, Seed::AlphaR);
            let mut r = vec![0.0; r_ref.len()];
            m.residual_products_element(e, &phi, t, &lambda, all, &mut r);
            assert_close(&format!("{ct} element {e} residual"), &r, &r_ref);
            let mut j = vec![0.0; j_ref.len()];
            m.joule_products_element(e, &phi, t, qb, true, &mut j);
            assert_close(&format!("{ct} element {e} Joule heat"), &j, &j_ref);
            for (a, &n) in nodes.iter().enumerate() {
                for k in 0..PRODUCTS_WIDTH {
                    r_nodal[n][k] += r_ref[PRODUCTS_WIDTH * a + k];
                    j_nodal[n][k] += j_ref[PRODUCTS_WIDTH * a + k];
                }
            }
            r_elem.push([
                r_ref[PRODUCTS_WIDTH * nodes.len()],
                r_ref[PRODUCTS_WIDTH * nodes.len() + 1],
            ]);
            j_elem.push([
                j_ref[PRODUCTS_WIDTH * nodes.len()],
                j_ref[PRODUCTS_WIDTH * nodes.len() + 1],
            ]);
        }
        let lane =
            |v: &[[f64; PRODUCTS_WIDTH]], k: usize| v.iter().map(|c| c[k]).collect::<Vec<_>>();
        let coords = |v: &[[f64; PRODUCTS_WIDTH]]| {
            v.iter().flat_map(|c| [c[2], c[3], c[4]]).collect::<Vec<_>>()
        };
        let flat = |v: &[[f64; 3]]| v.iter().flatten().copied().collect::<Vec<_>>();
        let alpha = |v: &[[f64; 2]]| vec![v.iter().map(|p| p[1]).sum::<f64>()];
        let sigma = |v: &[[f64; 2]]| v.iter().map(|p| p[0]).collect::<Vec<_>>();
        let vjp = m.parameter_vjp(&phi, t, &lambda, VjpRequest::ALL);
        assert_close("parameter_vjp σ₀", &vjp.sigma_elem, &sigma(&r_elem));
        assert_close("parameter_vjp α_R", &vjp.alpha_r, &alpha(&r_elem));
        assert_close("parameter_vjp T", &vjp.temperature, &lane(&r_nodal, 1));
        assert_close("parameter_vjp X", &flat(&vjp.coords.unwrap()), &coords(&r_nodal));
        assert_close(
            "(∂R/∂φ)ᵀλ",
            &m.tangent_transpose_product(&phi, t, &lambda),
            &lane(&r_nodal, 0),
        );
        let joule = m.joule_vjp(&phi, t, &q_bar, true);
        assert_close("joule_vjp σ₀", &joule.sigma_elem, &sigma(&j_elem));
        assert_close("joule_vjp α_R", &joule.alpha_r, &alpha(&j_elem));
        assert_close("joule_vjp φ", &joule.phi, &lane(&j_nodal, 0));
        assert_close("joule_vjp T", &joule.temperature, &lane(&j_nodal, 1));
        assert_close("joule_vjp X", &flat(&joule.coords.unwrap()), &coords(&j_nodal));
        let without = m.joule_vjp(&phi, t, &q_bar, false);
        assert!(without.coords.is_none());
        assert_eq!((without.phi, without.temperature), (joule.phi, joule.temperature));
    }

    /// The element-matrix-free products (∂R/∂φ)ᵀλ and (∂R/∂T)ᵀλ equal the transposed element
    /// tangents applied to λ, at random coordinates, potentials and temperatures.
    #[rstest]
    fn transpose_products_match_the_element_tangents(
        #[values(CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20)] ct: CellType,
        #[values(
            ResistivityLaw::Constant,
            ResistivityLaw::Linear { alpha_r: 3.9e-3 },
            ResistivityLaw::Table {
                temperatures: vec![280.0, 310.0, 330.0, 400.0],
                multipliers: vec![0.9, 1.0, 1.3, 1.6],
            }
        )]
        law: ResistivityLaw,
    ) {
        let mut rng = Random(ct.n_nodes() as u64 * 104_729);
        let temperature_dependent = !law.is_constant();
        let m = random_model(ct, law, &mut rng);
        let nn = m.n_nodes();
        let phi: Vec<f64> = (0..nn).map(|_| rng.next()).collect();
        let t: Vec<f64> = (0..nn).map(|_| 340.0 + 60.0 * rng.next()).collect();
        let lambda: Vec<f64> = (0..nn).map(|_| rng.next()).collect();
        let mut kt_lambda = vec![0.0; nn];
        let mut tt_lambda = vec![0.0; nn];
        for e in 0..m.n_volume_elements() {
            let nodes = m.element_nodes(e);
            let ne = nodes.len();
            let mut ke = vec![0.0; ne * ne];
            let mut fe = vec![0.0; ne];
            m.element_residual_tangent(e, &phi, Some(&t), Some(&mut ke), &mut fe);
            let mut kt = vec![0.0; ne * ne];
            m.temperature_tangent_element(e, &phi, &t, &mut kt);
            for (b, &nb) in nodes.iter().enumerate() {
                for (a, &na) in nodes.iter().enumerate() {
                    kt_lambda[nb] += ke[a * ne + b] * lambda[na];
                    tt_lambda[nb] += kt[a * ne + b] * lambda[na];
                }
            }
        }
        let want =
            VjpRequest { conductivity: false, terminals: false, temperature: true, coords: false };
        let vjp = m.parameter_vjp(&phi, Some(&t), &lambda, want);
        assert_close(
            "(∂R/∂φ)ᵀλ",
            &m.tangent_transpose_product(&phi, Some(&t), &lambda),
            &kt_lambda,
        );
        if temperature_dependent {
            assert_close("(∂R/∂T)ᵀλ", &vjp.temperature, &tt_lambda);
        } else {
            assert!(vjp.temperature.iter().chain(&tt_lambda).all(|&v| v == 0.0));
        }
    }
}
