//! The electrical field: steady current conduction R_φ(φ; T, p) = 0 with its Joule heat
//! Q = σ(T)|∇φ|² as a derived output, as one [`Field`] of a coupled problem.
//!
//! Conductors by σ₀ or ρ₀ with ρ(T) = ρ₀ (1 + α_R (T − T₀)) or a table; voltage, ground and
//! current terminals (a current terminal's surface is one unknown voltage, its row the
//! terminal's current balance). The state is the nodal potential; the input `temperature` (per
//! node) is read when a resistivity depends on T (the `thermal -> electrical` transfer; without
//! it each conductor sits at its reference temperature); the output `joule_heat` lives at the
//! quadrature points of the conductors' cells. The field is linear in φ: one factorization per
//! solve (Cholesky), reused by the adjoint.
//!
//! Objective terms are terminal functionals (current, voltage, resistance) with their
//! derivatives on the unknowns (a current terminal's voltage is one).

use std::any::Any;
use std::borrow::Cow;
use std::time::Instant;

use gradfem_electrical::{
    ConductorSpec, ElectricalDirection, ElectricalModel, TerminalFunctional, TerminalKind,
    TerminalSpec, VjpRequest as ElVjpRequest,
};
use gradfem_mesh::{CellId, Mesh};
use gradfem_solvers::assembly::AssemblyPattern;
use gradfem_solvers::linear::{CholeskySolver, LinearSolver};
use gradfem_solvers::params::{Gradient, ParamId, ParamKind, ParamRegistry, ParamSpec};
use gradfem_solvers::sparse::CsrMatrix;
use serde::Serialize;

use crate::cell::CellKernels;
use crate::error::{LinearChoice, RunError};
use crate::field::{
    Direction, Field, Layout, OutputVjp, Port, Reverse, SecondOrder, Seed, SolveMode,
};

/// One weighted terminal objective term.
#[derive(Clone, Debug, PartialEq)]
pub struct TerminalTerm {
    pub weight: f64,
    pub functional: TerminalFunctional,
}

/// How one registered electrical parameter maps onto the model.
#[derive(Clone, Debug, PartialEq)]
enum EBinding {
    Sigma(usize),
    SigmaElem(usize),
    AlphaR(usize),
    Current(usize),
    Voltage(usize),
}

/// Terminal quantities of a solved problem.
#[derive(Clone, Debug, Serialize)]
pub struct TerminalReport {
    pub name: String,
    #[serde(rename = "current_A")]
    pub current_a: f64,
    #[serde(rename = "voltage_V")]
    pub voltage_v: f64,
}

/// The electrical field, ready to solve and differentiate.
pub struct ElectricalField {
    pub model: ElectricalModel,
    pattern: AssemblyPattern,
    matrix: CsrMatrix,
    solver: Box<dyn LinearSolver>,
    /// Terminal objective terms.
    pub objective: Vec<TerminalTerm>,
    bindings: Vec<(ParamId, EBinding)>,
    /// Nodal temperature from the thermal field (`None`: reference temperatures).
    temperature: Option<Vec<f64>>,
    /// Nodal potential: of the last solve, or placed by a monolithic cycle.
    phi: Option<Vec<f64>>,
    solved: bool,
    /// Seconds of the last solve (assembly, factorization, solve).
    pub last_solve_s: f64,
}

fn setup(msg: impl Into<String>) -> RunError {
    RunError::Setup(msg.into())
}

impl ElectricalField {
    /// Set up the field on `mesh`.
    pub fn new(
        mesh: &Mesh,
        conductors: &[ConductorSpec],
        terminals: &[TerminalSpec],
        objective: Vec<TerminalTerm>,
    ) -> Result<Self, RunError> {
        let model = ElectricalModel::new(mesh, conductors, terminals)?;
        let pattern =
            AssemblyPattern::new(model.n_unknowns(), model.element_offsets(), model.element_dofs());
        let matrix = pattern.new_matrix();
        Ok(ElectricalField {
            model,
            pattern,
            matrix,
            solver: Box::new(CholeskySolver::new("electrical")),
            objective,
            bindings: Vec::new(),
            temperature: None,
            phi: None,
            solved: false,
            last_solve_s: 0.0,
        })
    }

    /// Choose the linear solver: `Auto` routes by predicted cost between sparse Cholesky and
    /// AMG-preconditioned CG ([`crate::error::spd_solver`]), unless a current terminal is
    /// present (its voltage unknown couples every node of the terminal surface: a dense row
    /// that aggregation handles poorly), when Cholesky stays. A monolithic cycle uses LU on the
    /// whole system; the staggered scheme uses this solver.
    pub fn set_linear(&mut self, choice: LinearChoice, cg_rel_tol: f64) {
        let current =
            self.model.terminals.iter().any(|t| matches!(t.kind, TerminalKind::Current { .. }));
        let choice = match choice {
            LinearChoice::Auto if current => LinearChoice::Cholesky,
            other => other,
        };
        self.solver = crate::error::spd_solver("electrical", choice, cg_rel_tol, None, None);
    }

    /// Solve the field's linear systems with `solver` (a device solver, or any other) until the
    /// next choice of the linear solver. The adjoint uses its transposed solve.
    pub fn set_solver(&mut self, solver: Box<dyn LinearSolver>) {
        self.solver = solver;
    }

    /// The linear solver's name.
    pub fn linear_solver(&self) -> &'static str {
        self.solver.name()
    }

    /// True when some conductor's resistivity depends on temperature, or may do so: a
    /// registered α_R is a parameter of the T-dependence even at α_R = 0, so its derivative
    /// needs the temperature (the `thermal -> electrical` transfer).
    pub fn needs_temperature(&self) -> bool {
        self.model.depends_on_temperature()
            || self.bindings.iter().any(|(_, b)| matches!(b, EBinding::AlphaR(_)))
    }

    fn binding_for(&self, name: &str) -> Result<(EBinding, ParamSpec), RunError> {
        let m = &self.model;
        let conductor = |g: &str| m.conductors.iter().position(|c| c.name == g);
        if let Some(g) = name.strip_prefix("electrical.sigma_elem.") {
            let c = conductor(g).ok_or_else(|| RunError::UnknownParameter(name.to_string()))?;
            let values = m.conductors[c].elements.iter().map(|&e| m.sigma_elem[e]).collect();
            return Ok((
                EBinding::SigmaElem(c),
                ParamSpec::vector(name, ParamKind::PerElement { group: g.to_string() }, values)
                    .with_bounds(Some(0.0), None)
                    .with_doc("electrical conductivity σ₀ of each cell of the conductor", "S/m"),
            ));
        }
        if let Some(g) = name.strip_prefix("electrical.sigma.") {
            let c = conductor(g).ok_or_else(|| RunError::UnknownParameter(name.to_string()))?;
            let e0 = m.conductors[c].elements[0];
            return Ok((
                EBinding::Sigma(c),
                ParamSpec::scalar(name, m.sigma_elem[e0])
                    .with_bounds(Some(0.0), None)
                    .with_doc("electrical conductivity σ₀ of the conductor", "S/m"),
            ));
        }
        if let Some(g) = name.strip_prefix("electrical.alpha_r.") {
            let c = conductor(g).ok_or_else(|| RunError::UnknownParameter(name.to_string()))?;
            let a = m.conductors[c].law.alpha_r().ok_or_else(|| {
                setup(format!(
                    "cannot register '{name}': conductor '{g}' has no linear resistivity law (give alpha_r)"
                ))
            })?;
            return Ok((
                EBinding::AlphaR(c),
                ParamSpec::scalar(name, a)
                    .with_doc("temperature coefficient of resistance α_R", "1/K"),
            ));
        }
        if let Some(rest) = name.strip_prefix("load.") {
            let (g, field) = rest
                .rsplit_once('.')
                .ok_or_else(|| RunError::UnknownParameter(name.to_string()))?;
            let k = m
                .terminals
                .iter()
                .position(|t| t.name == g)
                .ok_or_else(|| RunError::UnknownParameter(name.to_string()))?;
            return match (field, &m.terminals[k].kind) {
                ("current", TerminalKind::Current { current }) => Ok((
                    EBinding::Current(k),
                    ParamSpec::scalar(name, *current)
                        .with_doc("current into the device through the terminal", "A"),
                )),
                ("voltage", TerminalKind::Voltage { value }) => Ok((
                    EBinding::Voltage(k),
                    ParamSpec::scalar(name, *value).with_doc("terminal voltage", "V"),
                )),
                _ => Err(RunError::UnknownParameter(name.to_string())),
            };
        }
        Err(RunError::UnknownParameter(name.to_string()))
    }

    /// Add per-element σ₀ and per-conductor α_R partials (times `scale`) to the gradient.
    fn add_material(&self, grad: &mut Gradient, d_sigma: &[f64], d_alpha: &[f64], scale: f64) {
        for (id, b) in &self.bindings {
            let g = grad.get_mut(*id);
            match *b {
                EBinding::Sigma(c) => {
                    g[0] += scale
                        * self.model.conductors[c]
                            .elements
                            .iter()
                            .map(|&e| d_sigma[e])
                            .sum::<f64>();
                }
                EBinding::SigmaElem(c) => {
                    for (gi, &e) in g.iter_mut().zip(&self.model.conductors[c].elements) {
                        *gi += scale * d_sigma[e];
                    }
                }
                EBinding::AlphaR(c) => g[0] += scale * d_alpha[c],
                _ => {}
            }
        }
    }

    /// Add per-terminal current and voltage partials (times `scale`) to the gradient.
    fn add_terminals(&self, grad: &mut Gradient, d_current: &[f64], d_voltage: &[f64], scale: f64) {
        for (id, b) in &self.bindings {
            match *b {
                EBinding::Current(k) => grad.get_mut(*id)[0] += scale * d_current[k],
                EBinding::Voltage(k) => grad.get_mut(*id)[0] += scale * d_voltage[k],
                _ => {}
            }
        }
    }

    fn electrical_want(&self, coords: bool) -> ElVjpRequest {
        let has = |f: fn(&EBinding) -> bool| self.bindings.iter().any(|(_, b)| f(b));
        ElVjpRequest {
            conductivity: has(|b| {
                matches!(b, EBinding::Sigma(_) | EBinding::SigmaElem(_) | EBinding::AlphaR(_))
            }),
            terminals: has(|b| matches!(b, EBinding::Current(_) | EBinding::Voltage(_))),
            temperature: self.temperature.is_some(),
            coords,
        }
    }

    /// Nodal potential of the last solve.
    pub fn potential(&self) -> Option<&[f64]> {
        self.phi.as_deref()
    }

    /// The temperature the field sees (`None`: each conductor at its reference).
    pub fn temperature(&self) -> Option<&[f64]> {
        self.temperature.as_deref()
    }

    fn phi(&self) -> Result<&[f64], RunError> {
        self.phi.as_deref().ok_or_else(|| setup("electrical: solve first"))
    }

    /// Terminal currents and voltages of the last solve.
    pub fn terminal_report(&self) -> Result<Vec<TerminalReport>, RunError> {
        let phi = self.phi()?;
        let t = self.temperature();
        let i = self.model.terminal_currents(phi, t);
        let v = self.model.terminal_voltages(phi);
        Ok(self
            .model
            .terminals
            .iter()
            .enumerate()
            .map(|(k, term)| TerminalReport {
                name: term.name.clone(),
                current_a: i[k],
                voltage_v: v[k],
            })
            .collect())
    }

    /// The drive terminal (the first current terminal, else the first voltage terminal) and
    /// the reference (the first ground, else the first other voltage terminal): (drive,
    /// reference).
    pub fn default_terminals(&self) -> Option<(usize, usize)> {
        let ts = &self.model.terminals;
        let drive = ts
            .iter()
            .position(|t| matches!(t.kind, TerminalKind::Current { .. }))
            .or_else(|| ts.iter().position(|t| matches!(t.kind, TerminalKind::Voltage { .. })))?;
        let reference = ts
            .iter()
            .position(|t| matches!(t.kind, TerminalKind::Ground))
            .or_else(|| (0..ts.len()).find(|&k| k != drive && ts[k].is_voltage()))?;
        Some((drive, reference))
    }

    /// The volume element of each mesh cell the field covers.
    pub fn element_of_cell(&self) -> std::collections::HashMap<CellId, usize> {
        (0..self.model.n_volume_elements()).map(|e| (self.model.element_cell(e), e)).collect()
    }

    /// The mesh's element tags of the entries of each per-element parameter, in the
    /// parameter's order (for `gradients.json`).
    pub fn element_parameter_tags(&self) -> Vec<(ParamId, Vec<u64>)> {
        let mut out = Vec::new();
        for (id, b) in &self.bindings {
            if let EBinding::SigmaElem(c) = *b {
                let tags = self.model.conductors[c]
                    .elements
                    .iter()
                    .map(|&e| self.model.element_cell_tag(e))
                    .collect();
                out.push((*id, tags));
            }
        }
        out
    }

    /// Per-element σ₀ gradients per volume element of the field: (registry id, conductor
    /// elements, their gradients).
    pub fn element_gradients(&self, grad: &Gradient) -> Vec<(ParamId, Vec<usize>, Vec<f64>)> {
        let mut out = Vec::new();
        for (id, b) in &self.bindings {
            if let EBinding::SigmaElem(c) = *b {
                let elements = self.model.conductors[c].elements.clone();
                out.push((*id, elements, grad.get(*id).to_vec()));
            }
        }
        out
    }

    /// Total Joule power ∫ Q dΩ \[W\].
    pub fn joule_power(&self) -> Result<f64, RunError> {
        Ok(self.model.joule_power_elements(self.phi()?, self.temperature()).iter().sum())
    }

    fn joule_layout(&self) -> Layout {
        Layout::Points {
            offsets: self.model.qp_offsets().to_vec(),
            cells: (0..self.model.n_volume_elements())
                .map(|e| self.model.element_cell(e))
                .collect(),
        }
    }
}

// ----- second order ----------------------------------------------------------------------

impl ElectricalField {
    /// The model direction of `dir`: σ₀ and α_R from the parameters, δφ from the state tangent
    /// (empty: the prescribed part), δT from the temperature input's tangent.
    fn electrical_direction(&self, dir: &Direction) -> ElectricalDirection {
        let mut d = ElectricalDirection::zeros(&self.model);
        for (id, b) in &self.bindings {
            let v = dir.params.get(*id);
            match *b {
                EBinding::Sigma(c) => {
                    for &e in &self.model.conductors[c].elements {
                        d.sigma_elem[e] += v[0];
                    }
                }
                EBinding::SigmaElem(c) => {
                    for (&e, vi) in self.model.conductors[c].elements.iter().zip(v) {
                        d.sigma_elem[e] += vi;
                    }
                }
                EBinding::AlphaR(c) => d.alpha_r[c] += v[0],
                EBinding::Current(_) | EBinding::Voltage(_) => {}
            }
        }
        d.phi = if dir.state.is_empty() {
            self.prescribed_tangent(dir.params)
        } else {
            dir.state.to_vec()
        };
        if let Some(dt) = dir.inputs.first().filter(|v| !v.is_empty()) {
            d.temperature.copy_from_slice(dt);
        }
        d.coords = dir.coordinates.to_vec();
        d
    }

    /// δI of each current terminal along the parameters (zero where its current is not
    /// registered).
    fn current_direction(&self, params: &Gradient) -> Vec<f64> {
        let mut di = vec![0.0; self.model.terminals.len()];
        for (id, b) in &self.bindings {
            if let EBinding::Current(k) = *b {
                di[k] += params.get(*id)[0];
            }
        }
        di
    }

    /// Add `coef` times a functional's partials (`ev`) to the unknowns' and temperature seeds
    /// and to the gradient (the coordinates' partials when it has them).
    fn add_partials(
        &self,
        ev: &gradfem_electrical::TerminalFunctionalEval,
        coef: f64,
        u_bar: &mut [f64],
        t_bar: &mut [f64],
        rev: &mut Reverse,
    ) {
        u_bar.iter_mut().zip(&ev.d_unknowns).for_each(|(u, d)| *u += coef * d);
        t_bar.iter_mut().zip(&ev.d_temperature).for_each(|(t, d)| *t += coef * d);
        self.add_material(rev.grad, &ev.d_sigma_elem, &ev.d_alpha_r, coef);
        self.add_terminals(rev.grad, &ev.d_current, &ev.d_voltage, coef);
        if let Some(dx) = &ev.d_coords {
            rev.add_coordinates(dx, coef);
        }
    }

    /// Add `coef` times the Hessian of terminal `k`'s reaction current applied to `d` (a
    /// voltage terminal's I = Σ over its nodes of the interior residual) to the seeds and the
    /// gradient.
    fn add_current_hessian(
        &self,
        k: usize,
        coef: f64,
        d: &ElectricalDirection,
        u_bar: &mut [f64],
        t_bar: &mut [f64],
        rev: &mut Reverse,
    ) -> Result<(), RunError> {
        let term = &self.model.terminals[k];
        if !term.is_voltage() {
            return Ok(()); // a given current: a parameter, linear
        }
        let mut w = vec![0.0; self.model.n_nodes()];
        for &n in &term.owned_nodes {
            w[n] = 1.0;
        }
        let coords = rev.coordinate_request();
        let so = self.model.second_order_vjp(self.phi()?, self.temperature(), &w, d, coords);
        let scaled: Vec<f64> = so.phi.iter().map(|v| coef * v).collect();
        u_bar.iter_mut().zip(self.model.unknowns_adjoint(&scaled)).for_each(|(u, v)| *u += v);
        let dv = self.model.voltage_adjoint(&scaled);
        self.add_terminals(rev.grad, &vec![0.0; dv.len()], &dv, 1.0);
        t_bar.iter_mut().zip(&so.temperature).for_each(|(t, v)| *t += coef * v);
        self.add_material(rev.grad, &so.sigma_elem, &so.alpha_r, coef);
        rev.add_coordinate_part(&so.coords, coef);
        Ok(())
    }

    /// δI of terminal `k` along `d` (and the current parameters' `di`).
    fn current_tangent(
        &self,
        k: usize,
        d: &ElectricalDirection,
        di: &[f64],
    ) -> Result<f64, RunError> {
        let term = &self.model.terminals[k];
        if !term.is_voltage() {
            return Ok(di[k]);
        }
        let r = self.model.residual_jvp(self.phi()?, self.temperature(), d);
        Ok(term.owned_nodes.iter().map(|&n| r[n]).sum())
    }

    /// δV of terminal `k` along the state tangent.
    fn voltage_tangent(&self, k: usize, d: &ElectricalDirection) -> f64 {
        let term = &self.model.terminals[k];
        match term.kind {
            TerminalKind::Ground => 0.0,
            _ => term.owned_nodes.first().or(term.nodes.first()).map_or(0.0, |&n| d.phi[n]),
        }
    }
}

impl SecondOrder for ElectricalField {
    fn prescribed_tangent(&self, params: &Gradient) -> Vec<f64> {
        let mut dphi = vec![0.0; self.model.n_nodes()];
        for (id, b) in &self.bindings {
            if let EBinding::Voltage(k) = *b {
                let v = params.get(*id)[0];
                for &n in &self.model.terminals[k].owned_nodes {
                    dphi[n] += v;
                }
            }
        }
        dphi
    }

    fn residual_jvp(&self, dir: &Direction) -> Result<Vec<f64>, RunError> {
        let d = self.electrical_direction(dir);
        let nodal = self.model.residual_jvp(self.phi()?, self.temperature(), &d);
        let mut r = self.model.unknowns_adjoint(&nodal);
        // A current terminal's row carries −I.
        for (k, di) in self.current_direction(dir.params).into_iter().enumerate() {
            if let Some(u) = self.model.terminals[k].unknown {
                r[u] -= di;
            }
        }
        Ok(r)
    }

    fn tangent(
        &mut self,
        params: &Gradient,
        coordinates: &[[f64; 3]],
        inputs: &[Vec<f64>],
    ) -> Result<Vec<f64>, RunError> {
        let prescribed = self.prescribed_tangent(params);
        let dir = Direction { params, state: &prescribed, inputs, coordinates };
        let mut rhs = self.residual_jvp(&dir)?;
        rhs.iter_mut().for_each(|v| *v = -*v);
        if !rhs.is_empty() {
            self.solver.solve_in_place(&mut rhs)?;
        }
        let mut dphi = self.model.nodal_from_unknowns(&rhs);
        dphi.iter_mut().zip(&prescribed).for_each(|(a, b)| *a += b);
        Ok(dphi)
    }

    fn output_jvp(&self, port: usize, dir: &Direction) -> Result<Vec<f64>, RunError> {
        debug_assert_eq!(port, 1, "the electrical field's derived output is the Joule heat");
        let d = self.electrical_direction(dir);
        Ok(self.model.joule_jvp(self.phi()?, self.temperature(), &d))
    }

    fn second_order_vjp(
        &self,
        lambda: &[f64],
        dir: &Direction,
        rev: &mut Reverse,
    ) -> Result<OutputVjp, RunError> {
        let d = self.electrical_direction(dir);
        let coords = rev.coordinate_request();
        let so = self.model.second_order_vjp(self.phi()?, self.temperature(), lambda, &d, coords);
        // −(∂R/∂I) = 1 is constant: a current parameter has no second-order term.
        self.add_material(rev.grad, &so.sigma_elem, &so.alpha_r, -1.0);
        rev.add_coordinate_part(&so.coords, -1.0);
        let inputs = if self.temperature.is_some() {
            vec![(0, so.temperature.into_iter().map(|v| -v).collect())]
        } else {
            Vec::new()
        };
        Ok(OutputVjp { state: so.phi.into_iter().map(|v| -v).collect(), inputs })
    }

    fn output_second_order_vjp(
        &self,
        port: usize,
        y_bar: &[f64],
        dir: &Direction,
        rev: &mut Reverse,
    ) -> Result<OutputVjp, RunError> {
        debug_assert_eq!(port, 1, "the electrical field's derived output is the Joule heat");
        let d = self.electrical_direction(dir);
        let coords = rev.coordinate_request();
        let js =
            self.model.joule_second_order_vjp(self.phi()?, self.temperature(), y_bar, &d, coords);
        self.add_material(rev.grad, &js.sigma_elem, &js.alpha_r, 1.0);
        rev.add_coordinate_part(&js.coords, 1.0);
        let inputs =
            if self.temperature.is_some() { vec![(0, js.temperature)] } else { Vec::new() };
        Ok(OutputVjp { state: js.phi, inputs })
    }

    fn objective_hessian(&self, dir: &Direction, rev: &mut Reverse) -> Result<Seed, RunError> {
        if self.objective.is_empty() {
            return Ok(Seed::default());
        }
        let phi = self.phi()?;
        let t = self.temperature();
        let d = self.electrical_direction(dir);
        let di = self.current_direction(dir.params);
        let mut u_bar = vec![0.0; self.model.n_unknowns()];
        let mut t_bar = vec![0.0; self.model.n_nodes()];
        let m = &self.model;
        for term in &self.objective {
            let w = term.weight;
            match &term.functional {
                // Linear in the potential and the parameters.
                TerminalFunctional::Voltage { .. } => {}
                TerminalFunctional::Current { terminal } => {
                    let k = m.terminal_index(terminal)?;
                    self.add_current_hessian(k, w, &d, &mut u_bar, &mut t_bar, rev)?;
                }
                TerminalFunctional::Resistance { drive, reference } => {
                    // f = ΔV/I: d/dε ∇f = (−δI/I²)∇ΔV + (−δΔV/I² + 2ΔV δI/I³)∇I − (ΔV/I²)H_I δ.
                    let (kd, kr) = (m.terminal_index(drive)?, m.terminal_index(reference)?);
                    let current =
                        |name: &str| TerminalFunctional::Current { terminal: name.into() };
                    let voltage =
                        |name: &str| TerminalFunctional::Voltage { terminal: name.into() };
                    let coords = rev.coordinate_request();
                    let eval = |f: &TerminalFunctional| {
                        gradfem_electrical::functional::evaluate(m, f, phi, t, !coords.is_none())
                    };
                    let ei = eval(&current(drive))?;
                    let (evd, evr) = (eval(&voltage(drive))?, eval(&voltage(reference))?);
                    let i = ei.value;
                    let dv = evd.value - evr.value;
                    let di_k = self.current_tangent(kd, &d, &di)?;
                    let ddv = self.voltage_tangent(kd, &d) - self.voltage_tangent(kr, &d);
                    let c_v = -w * di_k / (i * i);
                    let c_i = w * (-ddv / (i * i) + 2.0 * dv * di_k / (i * i * i));
                    self.add_partials(&evd, c_v, &mut u_bar, &mut t_bar, rev);
                    self.add_partials(&evr, -c_v, &mut u_bar, &mut t_bar, rev);
                    self.add_partials(&ei, c_i, &mut u_bar, &mut t_bar, rev);
                    let c_h = -w * dv / (i * i);
                    self.add_current_hessian(kd, c_h, &d, &mut u_bar, &mut t_bar, rev)?;
                }
            }
        }
        let inputs = if t.is_some() { vec![(0, t_bar)] } else { Vec::new() };
        Ok(Seed { state: Vec::new(), unknowns: u_bar, inputs })
    }

    fn covers_shape(&self) -> bool {
        true
    }
}

impl Field for ElectricalField {
    fn name(&self) -> &str {
        "electrical"
    }

    fn expect_solves(&mut self, per_factorization: usize) {
        self.solver.expect_solves(per_factorization);
    }

    fn outputs(&self) -> Vec<Port> {
        vec![
            Port::nodal("potential", 1),
            Port { name: "joule_heat".into(), layout: self.joule_layout() },
        ]
    }

    fn inputs(&self) -> Vec<Port> {
        vec![Port::nodal("temperature", 1)]
    }

    fn available_parameters(&self) -> Vec<String> {
        let mut names = Vec::new();
        for c in &self.model.conductors {
            names.push(format!("electrical.sigma.{}", c.name));
            names.push(format!("electrical.sigma_elem.{}", c.name));
            if c.law.alpha_r().is_some() {
                names.push(format!("electrical.alpha_r.{}", c.name));
            }
        }
        for t in &self.model.terminals {
            match t.kind {
                TerminalKind::Voltage { .. } => names.push(format!("load.{}.voltage", t.name)),
                TerminalKind::Current { .. } => names.push(format!("load.{}.current", t.name)),
                TerminalKind::Ground => {}
            }
        }
        names
    }

    fn owns(&self, name: &str) -> bool {
        name.starts_with("electrical.") || name.starts_with("load.")
    }

    fn register(
        &mut self,
        registry: &mut ParamRegistry,
        name: &str,
        bounds: Option<[f64; 2]>,
    ) -> Result<ParamId, RunError> {
        let (binding, spec) = self.binding_for(name)?;
        let conflict = self.bindings.iter().any(|(_, b)| match (b, &binding) {
            (EBinding::Sigma(a), EBinding::SigmaElem(c))
            | (EBinding::SigmaElem(a), EBinding::Sigma(c)) => a == c,
            _ => false,
        });
        if conflict {
            return Err(setup(format!(
                "'{name}': a conductor's σ₀ is either one scalar (electrical.sigma.<group>) or a per-element field (electrical.sigma_elem.<group>), not both"
            )));
        }
        let spec = match bounds {
            Some([lo, hi]) => spec.with_bounds(Some(lo), Some(hi)),
            None => spec,
        };
        let id = registry.register(spec)?;
        self.bindings.push((id, binding));
        Ok(id)
    }

    fn apply_parameters(
        &mut self,
        registry: &ParamRegistry,
        coordinates: Option<&[[f64; 3]]>,
    ) -> Result<(), RunError> {
        for (id, binding) in self.bindings.clone() {
            let v = registry.values(id).to_vec();
            let m = &mut self.model;
            match binding {
                EBinding::Sigma(c) => {
                    for e in m.conductors[c].elements.clone() {
                        m.sigma_elem[e] = v[0];
                    }
                }
                EBinding::SigmaElem(c) => {
                    for (i, e) in m.conductors[c].elements.clone().into_iter().enumerate() {
                        m.sigma_elem[e] = v[i];
                    }
                }
                EBinding::AlphaR(c) => m.set_alpha_r(c, v[0]),
                EBinding::Current(k) | EBinding::Voltage(k) => m.set_terminal_value(k, v[0]),
            }
        }
        if let Some(x) = coordinates {
            self.model.coords = x.to_vec();
            self.model.check_coordinates()?;
        }
        self.phi = None;
        self.solved = false;
        Ok(())
    }

    fn set_input(&mut self, port: usize, values: &[f64]) -> Result<(), RunError> {
        debug_assert_eq!(port, 0, "the electrical field has one input");
        self.temperature = Some(values.to_vec());
        self.solved = false;
        Ok(())
    }

    fn solve(&mut self, _mode: SolveMode) -> Result<(), RunError> {
        // Linear in φ: assemble at φ = 0 (prescribed values in the residual), factor, solve.
        let t0 = Instant::now();
        let m = &self.model;
        let n = m.n_unknowns();
        let zero = m.nodal_potential(&vec![0.0; n]);
        let t = self.temperature.as_deref();
        let mut r = vec![0.0; n];
        self.pattern.assemble_into(&mut self.matrix, &mut r, |e, ke, fe| {
            m.element_residual_tangent(e, &zero, t, Some(ke), fe)
        });
        self.solver.factor(&self.matrix)?;
        for v in r.iter_mut() {
            *v = -*v;
        }
        self.solver.solve_in_place(&mut r)?;
        self.phi = Some(self.model.nodal_potential(&r));
        self.solved = true;
        self.last_solve_s = t0.elapsed().as_secs_f64();
        Ok(())
    }

    fn is_solved(&self) -> bool {
        self.solved && self.phi.is_some()
    }

    fn state(&self) -> Option<&[f64]> {
        self.phi.as_deref()
    }

    fn start_state(&self) -> Vec<f64> {
        self.model.nodal_potential(&vec![0.0; self.model.n_unknowns()])
    }

    fn output(&self, port: usize) -> Result<Vec<f64>, RunError> {
        debug_assert_eq!(port, 1, "the electrical field's derived output is the Joule heat");
        Ok(self.model.joule_heat_qp(self.phi()?, self.temperature()))
    }

    fn objective(&self) -> Result<(f64, Vec<f64>), RunError> {
        let phi = self.phi()?;
        let t = self.temperature();
        let mut value = 0.0;
        let mut terms = Vec::with_capacity(self.objective.len());
        for term in &self.objective {
            let v = gradfem_electrical::functional::evaluate(
                &self.model,
                &term.functional,
                phi,
                t,
                false,
            )?
            .value;
            terms.push(term.weight * v);
            value += term.weight * v;
        }
        Ok((value, terms))
    }

    fn objective_seed(&self, rev: &mut Reverse) -> Result<Seed, RunError> {
        if self.objective.is_empty() {
            return Ok(Seed::default());
        }
        let phi = self.phi()?;
        let t = self.temperature();
        let with_coords = rev.wants_coordinates();
        let mut u_bar = vec![0.0; self.model.n_unknowns()];
        let mut t_bar = vec![0.0; self.model.n_nodes()];
        for term in &self.objective {
            let w = term.weight;
            let ev = gradfem_electrical::functional::evaluate(
                &self.model,
                &term.functional,
                phi,
                t,
                with_coords,
            )?;
            for (u, d) in u_bar.iter_mut().zip(&ev.d_unknowns) {
                *u += w * d;
            }
            self.add_material(rev.grad, &ev.d_sigma_elem, &ev.d_alpha_r, w);
            self.add_terminals(rev.grad, &ev.d_current, &ev.d_voltage, w);
            if let Some(dx) = &ev.d_coords {
                rev.add_coordinates(dx, w);
            }
            if t.is_some() {
                for (tb, d) in t_bar.iter_mut().zip(&ev.d_temperature) {
                    *tb += w * d;
                }
            }
        }
        let inputs = if t.is_some() { vec![(0, t_bar)] } else { Vec::new() };
        Ok(Seed { state: Vec::new(), unknowns: u_bar, inputs })
    }

    fn adjoint_solve(
        &mut self,
        state_bar: &[f64],
        unknowns_bar: &[f64],
    ) -> Result<Vec<f64>, RunError> {
        let mut rhs = self.model.unknowns_adjoint(state_bar);
        if !unknowns_bar.is_empty() {
            for (r, u) in rhs.iter_mut().zip(unknowns_bar) {
                *r += u;
            }
        }
        if !rhs.is_empty() {
            self.solver.solve_transpose_in_place(&mut rhs)?;
        }
        Ok(self.model.nodal_from_unknowns(&rhs))
    }

    fn input_vjp(&self, port: usize, lambda: &[f64]) -> Result<Vec<f64>, RunError> {
        debug_assert_eq!(port, 0, "the electrical field has one input");
        let want = ElVjpRequest {
            conductivity: false,
            terminals: false,
            temperature: true,
            coords: false,
        };
        let pv = self.model.parameter_vjp(self.phi()?, self.temperature(), lambda, want);
        Ok(pv.temperature.into_iter().map(|v| -v).collect())
    }

    fn accumulate(
        &self,
        lambda: &[f64],
        state_bar: &[f64],
        rev: &mut Reverse,
        inputs: &[usize],
    ) -> Result<Vec<(usize, Vec<f64>)>, RunError> {
        let phi = self.phi()?;
        let mut want = self.electrical_want(rev.wants_coordinates());
        want.temperature = want.temperature && inputs.contains(&0);
        let vjp = self.model.parameter_vjp(phi, self.temperature(), lambda, want);
        self.add_material(rev.grad, &vjp.sigma_elem, &vjp.alpha_r, -1.0);
        self.add_terminals(rev.grad, &vjp.current, &vjp.voltage, -1.0);
        if let Some(dx) = &vjp.coords {
            rev.add_coordinates(dx, -1.0);
        }
        // The voltages' direct share: φ̄ at the nodes they hold.
        let v_bar = self.model.voltage_adjoint(state_bar);
        let zero = vec![0.0; v_bar.len()];
        self.add_terminals(rev.grad, &zero, &v_bar, 1.0);
        Ok(if want.temperature {
            vec![(0, vjp.temperature.into_iter().map(|v| -v).collect())]
        } else {
            Vec::new()
        })
    }

    fn output_vjp(
        &self,
        port: usize,
        y_bar: &[f64],
        rev: Option<&mut Reverse>,
    ) -> Result<OutputVjp, RunError> {
        debug_assert_eq!(port, 1, "the electrical field's derived output is the Joule heat");
        let phi = self.phi()?;
        let t = self.temperature();
        let coords = rev.as_ref().is_some_and(|r| r.wants_coordinates());
        let jv = self.model.joule_vjp(phi, t, y_bar, coords);
        if let Some(rev) = rev {
            self.add_material(rev.grad, &jv.sigma_elem, &jv.alpha_r, 1.0);
            if let Some(dx) = &jv.coords {
                rev.add_coordinates(dx, 1.0);
            }
        }
        let inputs = if t.is_some() { vec![(0, jv.temperature)] } else { Vec::new() };
        Ok(OutputVjp { state: jv.phi, inputs })
    }

    fn second_order(&mut self) -> Option<&mut dyn SecondOrder> {
        Some(self)
    }

    fn second_order_ref(&self) -> Option<&dyn SecondOrder> {
        Some(self)
    }

    fn cell_kernels(&self) -> Option<Box<dyn CellKernels + '_>> {
        let phi = match &self.phi {
            Some(phi) => Cow::Borrowed(phi.as_slice()),
            None => Cow::Owned(self.start_state()),
        };
        Some(Box::new(ElectricalCells { model: &self.model, phi, t: self.temperature.as_deref() }))
    }

    fn unknowns_tangent(&self, state: &[f64]) -> Option<Vec<f64>> {
        // Each unknown is the potential of its node (a current terminal's of one of its
        // nodes, all equal): linear in the nodal potential.
        Some(self.model.unknowns_from_nodal(state))
    }

    fn cell_unknowns(&self) -> Vec<f64> {
        match &self.phi {
            Some(phi) => self.model.unknowns_from_nodal(phi),
            None => vec![0.0; self.model.n_unknowns()],
        }
    }

    fn place_unknowns(&mut self, unknowns: &[f64]) {
        self.phi = Some(self.model.nodal_potential(unknowns));
        self.solved = false;
    }

    fn finish_cycle_solve(
        &mut self,
        _info: &gradfem_solvers::newton::NewtonInfo,
    ) -> Result<(), RunError> {
        if self.phi.is_none() {
            return Err(setup("electrical: no placed state"));
        }
        self.solved = true;
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// The electrical field's element kernels at a placed potential and temperature.
struct ElectricalCells<'a> {
    model: &'a ElectricalModel,
    phi: Cow<'a, [f64]>,
    t: Option<&'a [f64]>,
}

impl CellKernels for ElectricalCells<'_> {
    fn n_unknowns(&self) -> usize {
        self.model.n_unknowns()
    }
    fn n_elements(&self) -> usize {
        self.model.n_elements()
    }
    fn components(&self) -> usize {
        1
    }
    fn element_dofs(&self, e: usize) -> &[usize] {
        let o = self.model.element_offsets();
        &self.model.element_dofs()[o[e]..o[e + 1]]
    }
    fn element_nodes(&self, e: usize) -> &[usize] {
        self.model.element_nodes(e)
    }
    fn element_cell(&self, e: usize) -> Option<CellId> {
        (e < self.model.n_volume_elements()).then(|| self.model.element_cell(e))
    }
    fn unknowns_adjoint(&self, state_bar: &[f64]) -> Vec<f64> {
        self.model.unknowns_adjoint(state_bar)
    }
    fn lambda_from_unknowns(&self, lambda: &[f64]) -> Vec<f64> {
        self.model.nodal_from_unknowns(lambda)
    }
    fn element_residual_tangent(&self, e: usize, ke: Option<&mut [f64]>, fe: &mut [f64]) {
        self.model.element_residual_tangent(e, &self.phi, self.t, ke, fe);
    }
    fn element_input_tangent(&self, e: usize, port: usize, out: &mut [f64]) -> bool {
        debug_assert_eq!(port, 0, "the electrical field has one input");
        let Some(t) = self.t else { return false };
        if e >= self.model.n_volume_elements() {
            return false;
        }
        self.model.temperature_tangent_element(e, &self.phi, t, out);
        true
    }
    fn element_output_jacobian(
        &self,
        e: usize,
        port: usize,
    ) -> Option<(usize, Vec<f64>, Vec<(usize, Vec<f64>)>)> {
        debug_assert_eq!(port, 1, "the electrical field's derived output is the Joule heat");
        if e >= self.model.n_volume_elements() {
            return None;
        }
        let nn = self.model.element_nodes(e).len();
        let nq = self.model.qp_offsets()[e + 1] - self.model.qp_offsets()[e];
        let mut d_phi = vec![0.0; nq * nn];
        let mut d_t = vec![0.0; nq * nn];
        self.model.joule_qp_jacobian_element(e, &self.phi, self.t, &mut d_phi, &mut d_t);
        let inputs = if self.t.is_some() { vec![(0, d_t)] } else { Vec::new() };
        Some((nq, d_phi, inputs))
    }
    fn describe_dof(&self, dof: usize) -> String {
        self.model.describe_dof(dof)
    }
    fn state(&self) -> &[f64] {
        &self.phi
    }
}
