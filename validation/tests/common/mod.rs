//! Helpers shared by the thermal verification and validation tests: meshes, manufactured-
//! solution solves, error norms, log-log slope fits and a deterministic pseudo-random source.
//!
//! Each integration test file compiles this module on its own and uses a part of it, hence the
//! `dead_code` allowance.
#![allow(dead_code)]

use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_mesh::quadrature::ElementTable;
use gradfem_mesh::{CellId, CellType, Mesh, PhysicalGroup, geometry};
use gradfem_solvers::assembly::AssemblyPattern;
use gradfem_solvers::linear::{CholeskySolver, LinearSolver};
use gradfem_thermal::{BcKind, BcSpec, ConductivityLaw, RegionSpec, ThermalModel};

/// The six side groups of a [`box_mesh`].
pub const SIDES: [&str; 6] = ["xmin", "xmax", "ymin", "ymax", "zmin", "zmax"];

/// The unit cube `[0,1]³` with `n` divisions per side.
pub fn unit_cube(n: usize, ct: CellType) -> Mesh {
    box_mesh(&BoxSpec::unit_cube(n, ct))
}

/// A box mesh `[origin, origin + lengths]`.
pub fn box_of(origin: [f64; 3], lengths: [f64; 3], divisions: [usize; 3], ct: CellType) -> Mesh {
    box_mesh(&BoxSpec { origin, lengths, divisions, cell_type: ct })
}

/// A region with a constant conductivity.
pub fn region(group: &str, k0: f64, source: f64) -> RegionSpec {
    RegionSpec { group: group.into(), k0, law: ConductivityLaw::Constant, source }
}

/// A boundary condition on a group.
pub fn bc(group: &str, kind: BcKind) -> BcSpec {
    BcSpec { group: group.into(), kind }
}

/// Add a volume (dim 3) group made of the dim-3 cells whose vertex centroid satisfies `pick`.
pub fn add_volume_group(mesh: &mut Mesh, name: &str, tag: i32, pick: impl Fn([f64; 3]) -> bool) {
    let cells: Vec<CellId> =
        mesh.cells_of_dim(3).filter(|&c| pick(mesh.cell_centroid(c))).collect();
    assert!(!cells.is_empty(), "group '{name}' would be empty");
    mesh.groups.push(PhysicalGroup { name: name.into(), tag, dim: 3, cells });
}

/// Least-squares slope of log(e) against log(h): the observed convergence rate.
pub fn loglog_slope(h: &[f64], e: &[f64]) -> f64 {
    assert_eq!(h.len(), e.len(), "one error per mesh size");
    assert!(h.len() >= 2, "a slope needs two points");
    let x: Vec<f64> = h.iter().map(|v| v.ln()).collect();
    let y: Vec<f64> = e.iter().map(|v| v.ln()).collect();
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let sxy: f64 = x.iter().zip(&y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let sxx: f64 = x.iter().map(|a| (a - mx) * (a - mx)).sum();
    sxy / sxx
}

/// A deterministic pseudo-random generator (SplitMix64): reproducible test data without the
/// `rand` crate.
pub struct SplitMix(pub u64);

impl SplitMix {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// Errors of a discrete field against an exact one.
#[derive(Clone, Copy, Debug)]
pub struct FieldErrors {
    /// ‖T_h − T‖_L2.
    pub l2: f64,
    /// |T_h − T|_H1 = ‖∇T_h − ∇T‖_L2.
    pub h1: f64,
    /// max over nodes |T_h − T|.
    pub max_nodal: f64,
}

/// L2 and H1-seminorm errors of nodal temperatures `t` against `exact` (value, gradient) over
/// the volume elements of `model`, with a quadrature rule of `degree` (per direction for hexes),
/// well above the degree of the discrete field so the quadrature error is negligible.
pub fn field_errors(
    model: &ThermalModel,
    t: &[f64],
    exact: &impl Fn([f64; 3]) -> (f64, [f64; 3]),
    degree: usize,
) -> FieldErrors {
    let ct = model.element_cell_type(0);
    let tab = ElementTable::new(ct, degree);
    let nn = ct.n_nodes();
    let mut g = vec![[0.0; 3]; nn];
    let (mut l2, mut h1) = (0.0, 0.0);
    for e in 0..model.n_volume_elements() {
        assert_eq!(model.element_cell_type(e), ct, "one cell type per mesh");
        let x = model.element_coordinates(e);
        let nodes = model.element_nodes(e);
        for q in 0..tab.n_points() {
            let det = geometry::physical_gradients_into(3, tab.grad(q), &x, &mut g);
            let w = tab.weights[q] * det;
            let n = tab.shape(q);
            let mut xq = [0.0; 3];
            let mut th = 0.0;
            let mut gh = [0.0; 3];
            for a in 0..nn {
                th += n[a] * t[nodes[a]];
                for k in 0..3 {
                    xq[k] += n[a] * x[a][k];
                    gh[k] += g[a][k] * t[nodes[a]];
                }
            }
            let (te, ge) = exact(xq);
            l2 += w * (th - te).powi(2);
            h1 += w * (0..3).map(|k| (gh[k] - ge[k]).powi(2)).sum::<f64>();
        }
    }
    let max_nodal = (0..model.n_nodes())
        .filter(|&n| t[n].is_finite())
        .map(|n| (t[n] - exact(model.coords[n]).0).abs())
        .fold(0.0, f64::max);
    FieldErrors { l2: l2.sqrt(), h1: h1.sqrt(), max_nodal }
}

/// Solve −k ΔT = Q(x) with T = g(x) on every node of the groups fixed in `model` (each fixed
/// group set up with value 0; the values here replace them), for a model whose regions have
/// constant conductivity and zero source.
///
/// Why by hand: `ThermalModel` fixes one constant temperature per group, and a manufactured
/// solution needs a boundary value and a source that vary in space. The model's own element
/// kernel gives K and the conduction residual; the load ∫ Q(x) N_a dΩ is integrated here with a
/// rule of `load_degree`. With the lifting t₀ (g on fixed nodes, 0 elsewhere), one linear solve
/// K_ff δ = −R(t₀) gives T = t₀ + δ (the problem is linear, so this is exact).
pub fn solve_with_nodal_dirichlet(
    model: &ThermalModel,
    g: &impl Fn([f64; 3]) -> f64,
    source: &(impl Fn([f64; 3]) -> f64 + Sync),
    load_degree: usize,
) -> Vec<f64> {
    assert!(model.is_linear(), "the nodal-Dirichlet helper is for linear models");
    let mut t0: Vec<f64> = model.nodal_temperature(&vec![0.0; model.n_unknowns()]);
    for (n, v) in t0.iter_mut().enumerate() {
        if model.dofs.unknown_of_node[n].is_none() && v.is_finite() {
            *v = g(model.coords[n]);
        }
    }
    let pattern =
        AssemblyPattern::new(model.n_unknowns(), &model.element_offsets(), &model.element_dofs());
    let mut k = pattern.new_matrix();
    let mut r = vec![0.0; model.n_unknowns()];
    let ct = model.element_cell_type(0);
    let load_tab = ElementTable::new(ct, load_degree);
    pattern.assemble_into(&mut k, &mut r, |e, ke, fe| {
        model.element_residual_tangent(e, &t0, Some(ke), fe);
        if e >= model.n_volume_elements() {
            return;
        }
        let x = model.element_coordinates(e);
        let nn = x.len();
        let mut gr = vec![[0.0; 3]; nn];
        for q in 0..load_tab.n_points() {
            let det = geometry::physical_gradients_into(3, load_tab.grad(q), &x, &mut gr);
            let n = load_tab.shape(q);
            let mut xq = [0.0; 3];
            for a in 0..nn {
                for i in 0..3 {
                    xq[i] += n[a] * x[a][i];
                }
            }
            let w = load_tab.weights[q] * det * source(xq);
            for a in 0..nn {
                fe[a] -= w * n[a];
            }
        }
    });
    let mut solver = CholeskySolver::new("mms");
    solver.factor(&k).expect("SPD system");
    let mut du: Vec<f64> = r.iter().map(|v| -v).collect();
    solver.solve_in_place(&mut du).expect("solve");
    let mut t = t0;
    for (u, &n) in du.iter().zip(&model.dofs.node_of_unknown) {
        t[n] += u;
    }
    t
}

/// A thermal model on `mesh` (group "domain", conductivity `k`, no source) with all six sides
/// fixed (value 0 here; [`solve_with_nodal_dirichlet`] sets the nodal values).
pub fn all_sides_fixed_model(mesh: &Mesh, k: f64) -> ThermalModel {
    let bcs: Vec<BcSpec> =
        SIDES.iter().map(|s| bc(s, BcKind::Temperature { value: 0.0 })).collect();
    ThermalModel::new(mesh, &[region("domain", k, 0.0)], &bcs).expect("valid model")
}
