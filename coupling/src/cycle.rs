//! Strongly coupled groups: a cycle of the coupling graph solved staggered or monolithically,
//! and its adjoint.
//!
//! - **Staggered**: block Gauss–Seidel over the cycle's fields in stage order, each solved at
//!   the others' latest outputs, until the relative change of every state is below the
//!   tolerance; then every field but the last is solved once more at the converged inputs, so
//!   that each field's factorization belongs to the converged state. The adjoint solves the
//!   transposed coupled system by the transposed iteration: the fields in reverse order, each
//!   with its own transposed solve and the others' latest adjoints on the right-hand side.
//! - **Monolithic**: Newton on all the cycle's unknowns with the coupled Jacobian assembled
//!   element by element from the fields' kernels ([`crate::cell`]), solved by GMRES
//!   preconditioned with Cholesky factors of the fields' diagonal blocks (block Gauss–Seidel;
//!   [`BlockGmresSolver`]), or by LU on request; its adjoint is one transposed solve with the
//!   same preconditioner (or factors) of the converged Jacobian.
//!
//! Either way the parameter products run once, at the converged adjoints.

use std::time::Instant;

use gradfem_mesh::CellId;
use gradfem_solvers::assembly::{AssemblyPattern, CONSTRAINED};
use gradfem_solvers::gmres::BlockGmresSolver;
use gradfem_solvers::linear::{LinearSolver, LuSolver};
use gradfem_solvers::newton::{NonlinearProblem, newton};
use gradfem_solvers::params::Gradient;
use gradfem_solvers::sparse::CsrMatrix;

use crate::cell::CellKernels;
use crate::error::RunError;
use crate::field::{Reverse, SolveMode};
use crate::problem::{Bars, CoupledProblem, CycleReport, GradientTimings, add_into, rel_change};

fn setup(msg: impl Into<String>) -> RunError {
    RunError::Setup(msg.into())
}

/// Adjoints by field index (`None` for fields outside the cycle).
pub(crate) type Adjoints = Vec<Option<Vec<f64>>>;

/// One part of a combined element: (member k of the cycle, its element e, offset of its dofs
/// in the combined element).
#[derive(Clone, Copy, Debug)]
struct Part {
    member: usize,
    element: usize,
    offset: usize,
}

/// A cross block of a combined element: rows of part `row`, through the input port `port` of
/// its field, fed by transfer `transfer`.
#[derive(Clone, Copy, Debug)]
struct Coupling {
    row: usize,
    transfer: usize,
    /// The part whose state (transfer of a state) or derived output feeds the port.
    source: usize,
}

/// A combined element: its parts and the couplings between them.
#[derive(Clone, Debug)]
struct Combined {
    parts: Vec<Part>,
    couplings: Vec<Coupling>,
    n_dofs: usize,
}

/// The monolithic system of a cycle: its layout and a solver that keeps the preconditioner (or
/// factorization) of the converged Jacobian for the adjoint.
pub(crate) struct Monolithic {
    layout: Layout,
    solver: Box<dyn LinearSolver>,
}

/// One assembly pattern over the combined elements of a cycle.
struct Layout {
    pattern: AssemblyPattern,
    elements: Vec<Combined>,
    /// Offset of each member's unknowns.
    offsets: Vec<usize>,
    n_unknowns: Vec<usize>,
}

impl Monolithic {
    /// The combined elements and pattern of the cycle `members` (field indices, stage order).
    pub(crate) fn build(p: &CoupledProblem, members: &[usize]) -> Result<Self, RunError> {
        let names: Vec<&str> = members.iter().map(|&i| p.fields()[i].name()).collect();
        let mut kernels = Vec::new();
        for &i in members {
            kernels.push(p.fields()[i].cell_kernels().ok_or_else(|| {
                setup(format!(
                    "the cycle {} is solved monolithically, but the {} field has no element-level form; solve it staggered ([coupling] scheme = \"staggered\")",
                    names.join(" ⇄ "),
                    p.fields()[i].name()
                ))
            })?);
        }
        let mut offsets = Vec::new();
        let mut n_unknowns = Vec::new();
        let mut total = 0;
        for k in &kernels {
            offsets.push(total);
            n_unknowns.push(k.n_unknowns());
            total += k.n_unknowns();
        }
        // Volume elements by cell, per member.
        let mut by_cell: std::collections::HashMap<CellId, Vec<(usize, usize)>> =
            std::collections::HashMap::new();
        for (k, kern) in kernels.iter().enumerate() {
            for e in 0..kern.n_elements() {
                if let Some(c) = kern.element_cell(e) {
                    by_cell.entry(c).or_default().push((k, e));
                }
            }
        }
        let mut elements = Vec::new();
        let mut done: std::collections::HashSet<CellId> = std::collections::HashSet::new();
        for (k, kern) in kernels.iter().enumerate() {
            for e in 0..kern.n_elements() {
                let parts_of: Vec<(usize, usize)> = match kern.element_cell(e) {
                    Some(c) => {
                        if !done.insert(c) {
                            continue;
                        }
                        by_cell[&c].clone()
                    }
                    None => vec![(k, e)],
                };
                let mut parts = Vec::new();
                let mut n = 0;
                for &(m, el) in &parts_of {
                    parts.push(Part { member: m, element: el, offset: n });
                    n += kernels[m].element_dofs(el).len();
                }
                if let [first, rest @ ..] = parts.as_slice() {
                    let nodes = kernels[first.member].element_nodes(first.element);
                    for q in rest {
                        if kernels[q.member].element_nodes(q.element) != nodes {
                            return Err(setup(format!(
                                "the cycle {}: the {} and {} fields number the nodes of a cell differently",
                                names.join(" ⇄ "),
                                names[first.member],
                                names[q.member]
                            )));
                        }
                    }
                }
                let couplings = couplings_of(p, members, &parts, &names)?;
                elements.push(Combined { parts, couplings, n_dofs: n });
            }
        }
        let mut elem_offsets = vec![0];
        let mut dofs = Vec::new();
        for c in &elements {
            for part in &c.parts {
                let shift = offsets[part.member];
                dofs.extend(
                    kernels[part.member]
                        .element_dofs(part.element)
                        .iter()
                        .map(|&d| if d == CONSTRAINED { d } else { d + shift }),
                );
            }
            elem_offsets.push(dofs.len());
        }
        let pattern = AssemblyPattern::new(total, &elem_offsets, &dofs);
        let label = names.join("-");
        let solver: Box<dyn LinearSolver> = if p.cycle.lu {
            Box::new(LuSolver::new(&label))
        } else {
            Box::new(BlockGmresSolver::new(&label, offsets[1..].to_vec()))
        };
        Ok(Monolithic { layout: Layout { pattern, elements, offsets, n_unknowns }, solver })
    }
}

/// The cross blocks of a combined element: for every part whose field reads a port fed from
/// another cycle field present on the same cell.
fn couplings_of(
    p: &CoupledProblem,
    members: &[usize],
    parts: &[Part],
    names: &[&str],
) -> Result<Vec<Coupling>, RunError> {
    let mut out = Vec::new();
    if parts.len() < 2 {
        return Ok(out);
    }
    for (row, part) in parts.iter().enumerate() {
        let field = members[part.member];
        for (ti, t) in p.transfers().iter().enumerate() {
            if t.to != field {
                continue;
            }
            let Some(src_member) = members.iter().position(|&m| m == t.from) else { continue };
            match parts.iter().position(|q| q.member == src_member) {
                Some(source) => out.push(Coupling { row, transfer: ti, source }),
                // A state read on a cell where its field has no element: not representable.
                None if t.from_port == 0 => {
                    return Err(setup(format!(
                        "the cycle {}: the {} field reads the {} field's state on a cell where that field has no element",
                        names.join(" ⇄ "),
                        names[part.member],
                        names[src_member]
                    )));
                }
                // A derived output without values on this cell feeds zeros: no coupling.
                None => {}
            }
        }
    }
    Ok(out)
}

/// Largest local matrix a combined element needs (27-node cells, three fields of three
/// components) — buffers above this size are allocated.
const STACK: usize = 4096;

/// The time terms of a field stepped in time inside a cycle, for one step:
/// M (c₀ uᵏ⁺¹ + h) + e on its rows, with c₀ = a₀/(θΔt), the history h = (a₁uᵏ + a₂uᵏ⁻¹)/(θΔt)
/// (per state entry) and e = (1 − θ)/θ R(uᵏ; xᵏ) (per unknown), the explicit share of a
/// θ < 1 scheme.
pub(crate) struct TimeTerm {
    /// The stepped field's position among the cycle's members.
    pub member: usize,
    /// a₀/(θΔt).
    pub c0: f64,
    /// (a₁uᵏ + a₂uᵏ⁻¹)/(θΔt) over the state.
    pub history: Vec<f64>,
    /// (1 − θ)/θ R(uᵏ; xᵏ) over the field's unknowns (θ < 1 only).
    pub explicit: Option<Vec<f64>>,
}

/// The monolithic residual of a cycle over the combined elements.
struct System<'a> {
    problem: &'a mut CoupledProblem,
    members: &'a [usize],
    mono: &'a Layout,
    label: String,
    assembly_s: f64,
    time: Option<&'a TimeTerm>,
}

impl System<'_> {
    /// Place the unknowns in the cycle's fields and refresh the inputs they feed each other.
    fn place(&mut self, u: &[f64]) -> Result<(), RunError> {
        for (k, &i) in self.members.iter().enumerate() {
            let o = self.mono.offsets[k];
            self.problem.fields_mut()[i].place_unknowns(&u[o..o + self.mono.n_unknowns[k]]);
        }
        feed_internal(self.problem, self.members)
    }

    fn assemble(&mut self, u: &[f64], r: &mut [f64], k: Option<&mut CsrMatrix>) {
        let t0 = Instant::now();
        if let Err(e) = self.place(u) {
            // A failure to refresh the transfers (not expected once set up) poisons the
            // residual, which Newton reports with the cycle's name.
            tracing::error!("{}: {e}", self.label);
            r.fill(f64::NAN);
            return;
        }
        let kernels: Vec<Box<dyn CellKernels + '_>> = self
            .members
            .iter()
            .map(|&i| self.problem.fields()[i].cell_kernels().expect("checked when built"))
            .collect();
        let transfers = self.problem.transfers();
        let time = self.time;
        let kern = |e: usize, ke: Option<&mut [f64]>, fe: &mut [f64]| {
            combined_kernel(transfers, self.members, &kernels, &self.mono.elements[e], time, ke, fe)
        };
        match k {
            Some(k) => self.mono.pattern.assemble_into(k, r, |e, ke, fe| kern(e, Some(ke), fe)),
            None => self.mono.pattern.assemble_vector_into(r, |e, fe| kern(e, None, fe)),
        }
        if let Some(tt) = time
            && let Some(explicit) = &tt.explicit
        {
            let o = self.mono.offsets[tt.member];
            for (ri, e) in r[o..o + explicit.len()].iter_mut().zip(explicit) {
                *ri += e;
            }
        }
        self.assembly_s += t0.elapsed().as_secs_f64();
    }
}

impl NonlinearProblem for System<'_> {
    fn field(&self) -> &str {
        &self.label
    }
    fn n_unknowns(&self) -> usize {
        self.mono.pattern.n_unknowns()
    }
    fn tangent_pattern(&self) -> CsrMatrix {
        self.mono.pattern.new_matrix()
    }
    fn residual(&mut self, u: &[f64], r: &mut [f64]) {
        self.assemble(u, r, None);
    }
    fn residual_and_tangent(&mut self, u: &[f64], r: &mut [f64], k: &mut CsrMatrix) {
        self.assemble(u, r, Some(k));
    }
    fn describe_dof(&self, dof: usize) -> String {
        let k = self.mono.offsets.iter().rposition(|&o| o <= dof).unwrap_or(0);
        let i = self.members[k];
        let f = &self.problem.fields()[i];
        let local = dof - self.mono.offsets[k];
        let what =
            f.cell_kernels().map_or_else(|| format!("unknown {local}"), |c| c.describe_dof(local));
        format!("{}: {what}", f.name())
    }
}

/// Set the inputs the cycle's fields feed each other from their current states: transfers of
/// a state first, then derived outputs (which may read those inputs).
fn feed_internal(p: &mut CoupledProblem, members: &[usize]) -> Result<(), RunError> {
    for pass_states in [true, false] {
        for k in 0..p.transfers().len() {
            let t = &p.transfers()[k];
            if !(members.contains(&t.from) && members.contains(&t.to)) {
                continue;
            }
            if (t.from_port == 0) != pass_states {
                continue;
            }
            p.feed_transfer(k)?;
        }
    }
    Ok(())
}

/// Residual and tangent of one combined element.
fn combined_kernel(
    transfers: &[crate::problem::Transfer],
    members: &[usize],
    kernels: &[Box<dyn CellKernels + '_>],
    c: &Combined,
    time: Option<&TimeTerm>,
    mut ke: Option<&mut [f64]>,
    fe: &mut [f64],
) {
    let m = c.n_dofs;
    let mut own_buf = [0.0; STACK];
    for part in &c.parts {
        let kern = &kernels[part.member];
        let n = kern.element_dofs(part.element).len();
        // The capacity of a field stepped in time: M (c₀ u + h) on its rows, c₀ M in its block.
        if let Some(tt) = time.filter(|tt| tt.member == part.member) {
            let mut me = vec![0.0; n * n];
            if kern.element_capacity(part.element, &mut me) {
                let nodes = kern.element_nodes(part.element);
                let comps = kern.components();
                let u = kern.state();
                let at = |a: usize| nodes[a / comps] * comps + a % comps;
                for a in 0..n {
                    let mut s = 0.0;
                    for b in 0..n {
                        s += me[a * n + b] * (tt.c0 * u[at(b)] + tt.history[at(b)]);
                    }
                    fe[part.offset + a] += s;
                }
                if let Some(ke) = ke.as_deref_mut() {
                    for a in 0..n {
                        for b in 0..n {
                            ke[(part.offset + a) * m + part.offset + b] += tt.c0 * me[a * n + b];
                        }
                    }
                }
            }
        }
        let fe_part = &mut fe[part.offset..part.offset + n];
        match ke.as_deref_mut() {
            None => kern.element_residual_tangent(part.element, None, fe_part),
            Some(ke) => {
                let mut heap;
                let own: &mut [f64] = if n * n <= STACK {
                    own_buf[..n * n].fill(0.0);
                    &mut own_buf[..n * n]
                } else {
                    heap = vec![0.0; n * n];
                    &mut heap
                };
                kern.element_residual_tangent(part.element, Some(&mut *own), fe_part);
                for a in 0..n {
                    for b in 0..n {
                        ke[(part.offset + a) * m + part.offset + b] += own[a * n + b];
                    }
                }
            }
        }
    }
    let Some(ke) = ke else { return };
    for cp in &c.couplings {
        let row = c.parts[cp.row];
        let src = c.parts[cp.source];
        let t = &transfers[cp.transfer];
        let rk = &kernels[row.member];
        let nr = rk.element_dofs(row.element).len();
        let sk = &kernels[src.member];
        let ns = sk.element_dofs(src.element).len();
        if t.from_port == 0 {
            // ∂fe/∂x against the source's state entries of the same nodes = its element dofs.
            let mut d = vec![0.0; nr * ns];
            if rk.element_input_tangent(row.element, t.to_port, &mut d) {
                for a in 0..nr {
                    for b in 0..ns {
                        ke[(row.offset + a) * m + src.offset + b] += d[a * ns + b];
                    }
                }
            }
            continue;
        }
        // A derived output at points: (∂fe/∂x)(∂y/∂u) and (∂fe/∂x)(∂y/∂x') for the inputs
        // x' of the source fed by a cycle field present on this cell.
        let Some((np, dy_du, dy_dx)) = sk.element_output_jacobian(src.element, t.from_port) else {
            continue;
        };
        let mut d = vec![0.0; nr * np];
        if !rk.element_input_tangent(row.element, t.to_port, &mut d) {
            continue;
        }
        for a in 0..nr {
            for b in 0..ns {
                let mut s = 0.0;
                for q in 0..np {
                    s += d[a * np + q] * dy_du[q * ns + b];
                }
                ke[(row.offset + a) * m + src.offset + b] += s;
            }
        }
        for (port, j) in &dy_dx {
            // Which cycle field feeds the source's input `port`, and its part on this cell.
            let Some(u) = transfers
                .iter()
                .find(|u| u.to == members[src.member] && u.to_port == *port && u.from_port == 0)
            else {
                continue;
            };
            let Some(feeder) = members.iter().position(|&f| f == u.from) else { continue };
            let Some(fp) = c.parts.iter().find(|q| q.member == feeder) else { continue };
            let nf = kernels[fp.member].element_dofs(fp.element).len();
            for a in 0..nr {
                for b in 0..nf {
                    let mut s = 0.0;
                    for q in 0..np {
                        s += d[a * np + q] * j[q * nf + b];
                    }
                    ke[(row.offset + a) * m + fp.offset + b] += s;
                }
            }
        }
    }
}

impl CoupledProblem {
    /// Set the input transfer `k` feeds from its source's current output.
    pub(crate) fn feed_transfer(&mut self, k: usize) -> Result<(), RunError> {
        let t = &self.transfers()[k];
        let (to, to_port) = (t.to, t.to_port);
        let y = self.output_of(t.from, t.from_port)?;
        let x = self.transfers()[k].forward(&y, self.transfers()[k].target_len);
        self.fields_mut()[to].set_input(to_port, &x)
    }

    /// Block Gauss–Seidel over the cycle `members`, shared by the staggered solve, the
    /// staggered time step and the linearized (tangent) iteration: each sweep calls
    /// `update(self, k, members[k])` for every member in order, which solves it at the others'
    /// latest iterates and returns its new iterate, until the largest relative change of an
    /// iterate from one sweep to the next is at most the cycle tolerance, or
    /// `max_iterations` sweeps. `sweep_label(n)` names sweep n (1-based) for the interrupt
    /// check. A failed `update` ends the sweeps with its error.
    pub(crate) fn gauss_seidel_sweeps(
        &mut self,
        members: &[usize],
        sweep_label: impl Fn(usize) -> (String, String),
        mut update: impl FnMut(&mut Self, usize, usize) -> Result<Vec<f64>, RunError>,
    ) -> Result<Sweeps, RunError> {
        let mut out = Sweeps { iterations: 0, history: Vec::new(), converged: false };
        let mut prev: Option<Vec<Vec<f64>>> = None;
        for sweep in 0..self.cycle.max_iterations {
            let (what, at) = sweep_label(sweep + 1);
            gradfem_solvers::interrupt::check(&what, || at)?;
            let mut iterates = Vec::with_capacity(members.len());
            for (k, &i) in members.iter().enumerate() {
                iterates.push(update(self, k, i)?);
            }
            out.iterations = sweep + 1;
            let change = match &prev {
                Some(p) => {
                    iterates.iter().zip(p).map(|(a, b)| rel_change(a, b)).fold(0.0, f64::max)
                }
                None => f64::INFINITY,
            };
            out.history.push(change);
            tracing::debug!(sweep = sweep + 1, change, "block Gauss-Seidel sweep");
            if change <= self.cycle.tol {
                out.converged = true;
                break;
            }
            prev = Some(iterates);
        }
        Ok(out)
    }

    /// The staggered solve of the cycle `members` (module docs).
    pub(crate) fn solve_staggered(&mut self, members: &[usize]) -> Result<CycleReport, RunError> {
        let names: Vec<String> =
            members.iter().map(|&i| self.fields()[i].name().to_string()).collect();
        let mut report = CycleReport {
            fields: names.clone(),
            scheme: "staggered".into(),
            field_s: vec![0.0; members.len()],
            ..Default::default()
        };
        let label = names.join("-");
        let sweeps = self.gauss_seidel_sweeps(
            members,
            |sweep| (label.clone(), format!("sweep {sweep}")),
            |p, k, i| {
                let t0 = Instant::now();
                p.feed(i)?;
                let tf = Instant::now();
                report.transfer_s += tf.duration_since(t0).as_secs_f64();
                p.fields_mut()[i].solve(SolveMode::InCycle)?;
                report.field_s[k] += tf.elapsed().as_secs_f64();
                Ok(p.fields()[i].state().expect("solved").to_vec())
            },
        )?;
        report.iterations = sweeps.iterations;
        report.history = sweeps.history;
        if !sweeps.converged {
            return Err(setup(format!(
                "{} staggered iteration did not converge in {} iterations (last relative change {:.3e}, tolerance {:.1e}); the coupling may be too strong for a fixed-point iteration",
                names.join("-"),
                self.cycle.max_iterations,
                report.history.last().copied().unwrap_or(f64::NAN),
                self.cycle.tol
            )));
        }
        // The fields before the last were solved at inputs of the previous sweep: once more at
        // the converged ones, so that their factorizations belong to the converged state.
        for (k, &i) in members[..members.len() - 1].iter().enumerate() {
            let t0 = Instant::now();
            self.feed(i)?;
            self.fields_mut()[i].solve(SolveMode::InCycle)?;
            report.field_s[k] += t0.elapsed().as_secs_f64();
        }
        Ok(report)
    }

    /// The monolithic solve of the cycle `members` (module docs). Newton starts from the
    /// fields' current states, the fields before the last first solved once at them.
    pub(crate) fn solve_monolithic(&mut self, members: &[usize]) -> Result<CycleReport, RunError> {
        let names: Vec<String> =
            members.iter().map(|&i| self.fields()[i].name().to_string()).collect();
        let mut report = CycleReport {
            fields: names,
            scheme: "monolithic".into(),
            field_s: vec![0.0; members.len()],
            ..Default::default()
        };
        for (k, &i) in members[..members.len() - 1].iter().enumerate() {
            let t0 = Instant::now();
            self.feed(i)?;
            self.fields_mut()[i].solve(SolveMode::InCycle)?;
            report.field_s[k] += t0.elapsed().as_secs_f64();
        }
        let info = self.monolithic_newton(members, None)?;
        *report.field_s.last_mut().expect("a cycle has fields") +=
            info.time_residual_s + info.time_factor_s + info.time_solve_s;
        report.iterations = info.iterations;
        report.history = info.residual_history.clone();
        Ok(report)
    }

    /// Newton on the cycle's unknowns from the fields' current states, with the capacity term
    /// `time` of a step in time (module docs); leaves the converged state, with the inputs it
    /// makes, in every field and — unless it is a step in time, whose reverse sweep refactors
    /// at the stored state — the LU factors of the converged Jacobian for the adjoint.
    pub(crate) fn monolithic_newton(
        &mut self,
        members: &[usize],
        time: Option<&TimeTerm>,
    ) -> Result<gradfem_solvers::newton::NewtonInfo, RunError> {
        let names: Vec<String> =
            members.iter().map(|&i| self.fields()[i].name().to_string()).collect();
        let mut mono = self.take_monolithic(members)?;
        let mut u = Vec::with_capacity(mono.layout.pattern.n_unknowns());
        for &i in members {
            u.extend(self.fields()[i].cell_unknowns());
        }
        let mut params = self.cycle.newton.clone();
        params.rel_tol = params.rel_tol.min(1e-12);
        params.factor_at_solution = time.is_none();
        let label = names.join("-");
        let result = {
            let Monolithic { layout, solver } = &mut mono;
            let mut sys = System {
                problem: self,
                members,
                mono: layout,
                label: label.clone(),
                assembly_s: 0.0,
                time,
            };
            // Tolerance relative to the load ‖R(0)‖, as a single field's.
            let mut r0 = vec![0.0; u.len()];
            sys.residual(&vec![0.0; u.len()], &mut r0);
            let load = r0.iter().map(|v| v * v).sum::<f64>().sqrt();
            params.abs_tol = params.abs_tol.max(params.rel_tol * load);
            newton(&mut sys, &mut u, solver.as_mut(), &params)
        };
        let info = match result {
            Ok(info) => info,
            Err(e) => {
                self.put_monolithic(members, mono);
                return Err(e.into());
            }
        };
        // The converged state in every field, with the inputs it makes.
        {
            let mut sys =
                System { problem: self, members, mono: &mono.layout, label, assembly_s: 0.0, time };
            sys.place(&u)?;
        }
        for &i in members {
            self.fields_mut()[i].finish_cycle_solve(&info)?;
        }
        self.put_monolithic(members, mono);
        Ok(info)
    }

    /// Factor the cycle's Jacobian (with the capacity term `time`) at the states placed in its
    /// fields, for a transposed solve at a state of the past (the reverse sweep in time).
    pub(crate) fn monolithic_factor_placed(
        &mut self,
        members: &[usize],
        time: Option<&TimeTerm>,
    ) -> Result<(), RunError> {
        let names: Vec<String> =
            members.iter().map(|&i| self.fields()[i].name().to_string()).collect();
        let mut mono = self.take_monolithic(members)?;
        let mut u = Vec::with_capacity(mono.layout.pattern.n_unknowns());
        for &i in members {
            u.extend(self.fields()[i].cell_unknowns());
        }
        let result = {
            let Monolithic { layout, solver } = &mut mono;
            let mut sys = System {
                problem: self,
                members,
                mono: layout,
                label: names.join("-"),
                assembly_s: 0.0,
                time,
            };
            let mut k = sys.tangent_pattern();
            let mut r = vec![0.0; u.len()];
            sys.residual_and_tangent(&u, &mut r, &mut k);
            solver.factor(&k)
        };
        self.put_monolithic(members, mono);
        result.map_err(RunError::from)
    }

    /// Seeds objective terms put on inputs that cycle fields feed each other: carried to the
    /// states (and, through derived outputs, with their parameter partials) before the cycle's
    /// adjoint, since they belong on its right-hand side.
    pub(crate) fn absorb_internal_inputs(
        &self,
        members: &[usize],
        bars: &mut Bars,
        grad: &mut Gradient,
    ) -> Result<(), RunError> {
        for t in self.transfers() {
            if !(members.contains(&t.from) && members.contains(&t.to)) {
                continue;
            }
            let x = std::mem::take(&mut bars.inputs[t.to][t.to_port]);
            let len = x.len();
            if x.iter().any(|v| *v != 0.0) {
                let (registry, shape) = self.parts();
                let mut rev = Reverse { registry, shape, grad };
                self.to_source(t, &x, bars, Some(&mut rev))?;
            }
            bars.inputs[t.to][t.to_port] = vec![0.0; len];
        }
        Ok(())
    }

    /// The parameter products of a cycle at its converged adjoints `lambda`: the transfers'
    /// partials, each field's accumulation with its whole seed, and the seeds of inputs fed
    /// from outside the cycle handed upstream.
    pub(crate) fn finish_cycle_adjoint(
        &self,
        members: &[usize],
        lambda: &[Option<Vec<f64>>],
        bars: &mut Bars,
        grad: &mut Gradient,
    ) -> Result<(), RunError> {
        let contributions = {
            let (registry, shape) = self.parts();
            let mut rev = Reverse { registry, shape, grad: &mut *grad };
            self.cycle_contributions(members, lambda, Some(&mut rev), None)?
        };
        for &i in members {
            add_into(&mut bars.state[i], &contributions.state[i]);
        }
        if let (Some(r), Some(c)) = (&mut bars.record, &contributions.record) {
            for &i in members {
                r.lambda[i] = lambda[i].clone();
            }
            for (acc, y) in r.y_bar.iter_mut().zip(&c.y_bar) {
                if let Some(y) = y {
                    match acc {
                        Some(a) => add_into(a, y),
                        slot => *slot = Some(y.clone()),
                    }
                }
            }
        }
        for &i in members {
            let l = lambda[i].as_ref().expect("every member has its adjoint");
            let state_bar = std::mem::take(&mut bars.state[i]);
            self.accumulate_and_hand_back(i, l, &state_bar, bars, grad, members)?;
        }
        Ok(())
    }

    /// The adjoint of a staggered cycle: the transposed block Gauss–Seidel iteration; returns
    /// its iterations.
    pub(crate) fn adjoint_staggered(
        &mut self,
        members: &[usize],
        bars: &mut Bars,
        grad: &mut Gradient,
        timings: &mut GradientTimings,
    ) -> Result<usize, RunError> {
        self.absorb_internal_inputs(members, bars, grad)?;
        let ts = Instant::now();
        let (lambda, iterations) = self.transposed_gauss_seidel(members, bars, None)?;
        timings.adjoint_solve_s += ts.elapsed().as_secs_f64();
        let ta = Instant::now();
        self.finish_cycle_adjoint(members, &lambda, bars, grad)?;
        timings.accumulate_s += ta.elapsed().as_secs_f64();
        Ok(iterations)
    }

    /// The transposed block Gauss–Seidel iteration of a cycle for the seeds in `bars`: the
    /// fields in reverse order, each with its own transposed solve and the others' latest
    /// adjoints on the right-hand side, until the relative change is below the cycle
    /// tolerance. `stepped` names a field whose own system ([`Self::own_transposed_solve`],
    /// a step's Jacobian in time) solves instead of its field solver. Returns the adjoints by
    /// field index and the iterations.
    pub(crate) fn transposed_gauss_seidel(
        &mut self,
        members: &[usize],
        bars: &Bars,
        stepped: Option<usize>,
    ) -> Result<(Adjoints, usize), RunError> {
        let mut lambda: Adjoints = vec![None; self.fields().len()];
        for &i in members {
            lambda[i] = Some(vec![0.0; bars.state[i].len()]);
        }
        let mut last = f64::NAN;
        for it in 0..self.cycle.max_iterations {
            let mut change: f64 = 0.0;
            for &i in members.iter().rev() {
                let c = self.cycle_contributions(members, &lambda, None, Some(i))?;
                let mut rhs = bars.state[i].clone();
                add_into(&mut rhs, &c.state[i]);
                let new = if stepped == Some(i) {
                    self.own_transposed_solve(i, &rhs, &bars.unknowns[i])?
                } else {
                    let unknowns_bar = bars.unknowns[i].clone();
                    self.fields_mut()[i].adjoint_solve(&rhs, &unknowns_bar)?
                };
                change = change.max(rel_change(&new, lambda[i].as_ref().expect("member")));
                lambda[i] = Some(new);
            }
            last = change;
            if change <= self.cycle.tol {
                return Ok((lambda, it + 1));
            }
        }
        let names: Vec<&str> = members.iter().map(|&i| self.fields()[i].name()).collect();
        Err(setup(format!(
            "{}: the coupled adjoint did not converge in {} block Gauss-Seidel iterations (last relative change {last:.3e})",
            names.join("-"),
            self.cycle.max_iterations
        )))
    }

    /// The adjoint of a monolithic cycle: one transposed solve with the LU factors of the
    /// converged Jacobian.
    pub(crate) fn adjoint_monolithic(
        &mut self,
        members: &[usize],
        bars: &mut Bars,
        grad: &mut Gradient,
        timings: &mut GradientTimings,
    ) -> Result<usize, RunError> {
        self.absorb_internal_inputs(members, bars, grad)?;
        let ts = Instant::now();
        let lambda = self.monolithic_transposed_solve(members, bars)?;
        timings.adjoint_solve_s += ts.elapsed().as_secs_f64();
        let ta = Instant::now();
        self.finish_cycle_adjoint(members, &lambda, bars, grad)?;
        timings.accumulate_s += ta.elapsed().as_secs_f64();
        Ok(1)
    }

    /// The rows of member `member` of the cycle's residual (no time terms) at the states placed
    /// in its fields: R(u; x) of that field with the inputs the cycle feeds it.
    pub(crate) fn monolithic_residual_rows(
        &mut self,
        members: &[usize],
        member: usize,
    ) -> Result<Vec<f64>, RunError> {
        let names: Vec<String> =
            members.iter().map(|&i| self.fields()[i].name().to_string()).collect();
        let mono = self.take_monolithic(members)?;
        let mut u = Vec::with_capacity(mono.layout.pattern.n_unknowns());
        for &i in members {
            u.extend(self.fields()[i].cell_unknowns());
        }
        let mut r = vec![0.0; u.len()];
        {
            let mut sys = System {
                problem: self,
                members,
                mono: &mono.layout,
                label: names.join("-"),
                assembly_s: 0.0,
                time: None,
            };
            sys.residual(&u, &mut r);
        }
        let (o, n) = (mono.layout.offsets[member], mono.layout.n_unknowns[member]);
        self.put_monolithic(members, mono);
        Ok(r[o..o + n].to_vec())
    }

    /// (∂R/∂u)ᵀ μ of field `field`'s own residual against its own free state entries, at the
    /// placed state and inputs (the inputs held), for μ over the state (zero where
    /// prescribed); over the state, zero at prescribed entries.
    pub(crate) fn own_tangent_transpose(
        &self,
        field: usize,
        mu: &[f64],
    ) -> Result<Vec<f64>, RunError> {
        let f = &self.fields()[field];
        let kern = f
            .cell_kernels()
            .ok_or_else(|| setup(format!("the {} field has no element-level form", f.name())))?;
        let comps = kern.components();
        let (mut ke, mut fe) = (Vec::new(), Vec::new());
        let mut out = vec![0.0; mu.len()];
        for e in 0..kern.n_elements() {
            let dofs = kern.element_dofs(e);
            let nodes = kern.element_nodes(e);
            let n = dofs.len();
            ke.clear();
            ke.resize(n * n, 0.0);
            fe.clear();
            fe.resize(n, 0.0);
            kern.element_residual_tangent(e, Some(&mut ke), &mut fe);
            let at = |a: usize| nodes[a / comps] * comps + a % comps;
            for a in 0..n {
                if dofs[a] == CONSTRAINED {
                    continue;
                }
                let m = mu[at(a)];
                if m == 0.0 {
                    continue;
                }
                for b in 0..n {
                    if dofs[b] != CONSTRAINED {
                        out[at(b)] += ke[a * n + b] * m;
                    }
                }
            }
        }
        Ok(out)
    }

    /// The cycle's tangent from `rhs` = −dR/dε over its members' unknowns (stage order) by one
    /// solve with the LU factors of the converged Jacobian; per member, over its state (zero
    /// at prescribed entries).
    pub(crate) fn monolithic_tangent_solve(
        &mut self,
        members: &[usize],
        mut rhs: Vec<f64>,
    ) -> Result<Vec<Vec<f64>>, RunError> {
        let mono = self
            .monolithic_mut(members)
            .ok_or_else(|| setup("the monolithic system is not built: solve first"))?;
        if !rhs.is_empty() {
            mono.solver.solve_in_place(&mut rhs)?;
        }
        let (offsets, sizes) = (mono.layout.offsets.clone(), mono.layout.n_unknowns.clone());
        let mut out = Vec::with_capacity(members.len());
        for (k, &i) in members.iter().enumerate() {
            let kern = self.fields()[i].cell_kernels().expect("a monolithic cycle's field");
            out.push(kern.lambda_from_unknowns(&rhs[offsets[k]..offsets[k] + sizes[k]]));
        }
        Ok(out)
    }

    /// The adjoint of one field's system built alone ([`Self::monolithic_factor_placed`] with
    /// `members = [field]`, a step's Jacobian of the stepped field in a staggered cycle): one
    /// transposed solve for the seeds over its state and unknowns; over its state.
    pub(crate) fn own_transposed_solve(
        &mut self,
        field: usize,
        state_bar: &[f64],
        unknowns_bar: &[f64],
    ) -> Result<Vec<f64>, RunError> {
        let mut rhs = {
            let kern = self.fields()[field].cell_kernels().expect("a field with its own system");
            kern.unknowns_adjoint(state_bar)
        };
        add_into(&mut rhs, unknowns_bar);
        let mono = self
            .monolithic_mut(&[field])
            .ok_or_else(|| setup("the field's own system is not built: solve first"))?;
        if !rhs.is_empty() {
            mono.solver.solve_transpose_in_place(&mut rhs)?;
        }
        let kern = self.fields()[field].cell_kernels().expect("a field with its own system");
        Ok(kern.lambda_from_unknowns(&rhs))
    }

    /// The cycle's adjoints from the seeds in `bars` by one transposed solve with the LU factors
    /// the monolithic system holds; by field index (`None` outside the cycle).
    pub(crate) fn monolithic_transposed_solve(
        &mut self,
        members: &[usize],
        bars: &Bars,
    ) -> Result<Vec<Option<Vec<f64>>>, RunError> {
        let mut rhs = Vec::new();
        for &i in members {
            let kern = self.fields()[i].cell_kernels().expect("a monolithic cycle's field");
            let mut r = kern.unknowns_adjoint(&bars.state[i]);
            add_into(&mut r, &bars.unknowns[i]);
            rhs.extend(r);
        }
        let mono = self
            .monolithic_mut(members)
            .ok_or_else(|| setup("the monolithic system is not built: solve first"))?;
        if !rhs.is_empty() {
            mono.solver.solve_transpose_in_place(&mut rhs)?;
        }
        let (offsets, sizes) = (mono.layout.offsets.clone(), mono.layout.n_unknowns.clone());
        let mut lambda: Vec<Option<Vec<f64>>> = vec![None; self.fields().len()];
        for (k, &i) in members.iter().enumerate() {
            let kern = self.fields()[i].cell_kernels().expect("a monolithic cycle's field");
            lambda[i] = Some(kern.lambda_from_unknowns(&rhs[offsets[k]..offsets[k] + sizes[k]]));
        }
        Ok(lambda)
    }
}

/// What [`CoupledProblem::gauss_seidel_sweeps`] did: the sweeps run, the relative change of
/// the iterates per sweep (∞ for the first), and whether the last one met the tolerance.
pub(crate) struct Sweeps {
    pub iterations: usize,
    pub history: Vec<f64>,
    pub converged: bool,
}
