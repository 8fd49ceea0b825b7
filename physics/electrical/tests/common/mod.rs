//! Shared helpers of the integration tests: meshes, fields and a solve with gradfem-solvers.

#![allow(dead_code)]

use gradfem_electrical::ElectricalModel;
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_mesh::{CellBlock, CellId, CellType, Mesh};
use gradfem_solvers::assembly::AssemblyPattern;
use gradfem_solvers::linear::{CholeskySolver, LinearSolver};
use gradfem_solvers::newton::{NewtonParams, NonlinearProblem, newton};
use gradfem_solvers::sparse::CsrMatrix;

/// A box mesh of `ct` cells; Prism6 cells come from splitting each Hex8 along the diagonal
/// 0–2 of its bottom face (the facet groups stay valid: each x/y face is a whole prism quad).
pub fn box_of(ct: CellType, lengths: [f64; 3], divisions: [usize; 3]) -> Mesh {
    let base = if ct == CellType::Prism6 { CellType::Hex8 } else { ct };
    let mut mesh = box_mesh(&BoxSpec { origin: [0.0; 3], lengths, divisions, cell_type: base });
    if ct == CellType::Prism6 {
        let hexes = mesh.blocks[0].clone();
        let mut prisms = CellBlock::new(CellType::Prism6);
        for (i, h) in hexes.cells().enumerate() {
            prisms.push(&[h[0], h[1], h[2], h[4], h[5], h[6]], 1_000_000 + 2 * i as u64);
            prisms.push(&[h[0], h[2], h[3], h[4], h[6], h[7]], 1_000_001 + 2 * i as u64);
        }
        let n = prisms.len();
        mesh.blocks[0] = prisms;
        let domain = mesh.groups.iter_mut().find(|g| g.name == "domain").unwrap();
        domain.cells = (0..n).map(|index| CellId { block: 0, index }).collect();
    }
    mesh
}

/// A smoothly distorted box (non-affine cells) of `ct` cells.
pub fn distorted_box(ct: CellType) -> Mesh {
    let mut mesh = box_of(ct, [1.0, 0.7, 0.5], [2, 2, 2]);
    for p in &mut mesh.coords {
        let (x, y, z) = (p[0], p[1], p[2]);
        p[0] = x + 0.05 * (y * z).sin();
        p[1] = y + 0.04 * (x * 2.0).sin() * z;
        p[2] = z + 0.03 * x * y;
    }
    mesh
}

pub const ALL_CELLS: [CellType; 6] = [
    CellType::Tet4,
    CellType::Tet10,
    CellType::Hex8,
    CellType::Hex20,
    CellType::Hex27,
    CellType::Prism6,
];

/// A non-uniform temperature field.
pub fn temperature(m: &ElectricalModel) -> Vec<f64> {
    m.coords.iter().map(|p| 300.0 + 40.0 * p[0] - 15.0 * p[1] * p[1] + 20.0 * p[2]).collect()
}

/// A non-trivial potential (consistent with the terminals: fixed nodes take their values,
/// current terminals one value per terminal).
pub fn potential(m: &ElectricalModel) -> Vec<f64> {
    let index: Vec<f64> = (0..m.n_nodes()).map(|n| n as f64).collect();
    let reps = m.unknowns_from_nodal(&index);
    let u: Vec<f64> = reps
        .iter()
        .map(|&n| {
            let p = m.coords[n as usize];
            0.3 + 0.8 * p[0] - 0.5 * p[1] * p[2] + 0.2 * (3.0 * p[1]).sin()
        })
        .collect();
    m.nodal_potential(&u)
}

struct Problem<'a> {
    m: &'a ElectricalModel,
    pattern: &'a AssemblyPattern,
    t: Option<&'a [f64]>,
}

impl NonlinearProblem for Problem<'_> {
    fn field(&self) -> &str {
        "electrical"
    }
    fn n_unknowns(&self) -> usize {
        self.m.n_unknowns()
    }
    fn tangent_pattern(&self) -> CsrMatrix {
        self.pattern.new_matrix()
    }
    fn residual(&mut self, u: &[f64], r: &mut [f64]) {
        let phi = self.m.nodal_potential(u);
        self.pattern.assemble_vector_into(r, |e, fe| {
            self.m.element_residual_tangent(e, &phi, self.t, None, fe)
        });
    }
    fn residual_and_tangent(&mut self, u: &[f64], r: &mut [f64], k: &mut CsrMatrix) {
        let phi = self.m.nodal_potential(u);
        self.pattern.assemble_into(k, r, |e, ke, fe| {
            self.m.element_residual_tangent(e, &phi, self.t, Some(ke), fe)
        });
    }
    fn is_linear(&self) -> bool {
        true
    }
}

/// Solve R(φ) = 0 with Cholesky and Newton; returns the nodal potential and the solver
/// (holding the factorization, for adjoint solves).
pub fn solve(m: &ElectricalModel, t: Option<&[f64]>) -> (Vec<f64>, CholeskySolver) {
    let pattern = AssemblyPattern::new(m.n_unknowns(), m.element_offsets(), m.element_dofs());
    let mut solver = CholeskySolver::new("electrical");
    let mut u = vec![0.0; m.n_unknowns()];
    let params = NewtonParams { abs_tol: 1e-13, rel_tol: 1e-13, ..NewtonParams::default() };
    newton(&mut Problem { m, pattern: &pattern, t }, &mut u, &mut solver, &params).unwrap();
    (m.nodal_potential(&u), solver)
}

/// Adjoint solve (∂R/∂u)ᵀ λ = rhs, spread to the nodes.
pub fn adjoint(m: &ElectricalModel, solver: &mut CholeskySolver, rhs: &[f64]) -> Vec<f64> {
    let mut l = rhs.to_vec();
    solver.solve_transpose_in_place(&mut l).unwrap();
    m.nodal_from_unknowns(&l)
}

/// λᵀ R(φ) with R the full element residual (terminal elements included), λ nodal.
pub fn lambda_dot_residual(
    m: &ElectricalModel,
    phi: &[f64],
    t: Option<&[f64]>,
    lambda: &[f64],
) -> f64 {
    let mut s = 0.0;
    for e in 0..m.n_elements() {
        let nodes = m.element_nodes(e);
        let mut fe = vec![0.0; nodes.len()];
        m.element_residual_tangent(e, phi, t, None, &mut fe);
        s += nodes.iter().zip(&fe).map(|(&n, r)| lambda[n] * r).sum::<f64>();
    }
    s
}

pub fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * (1.0 + a.abs().max(b.abs()))
}
