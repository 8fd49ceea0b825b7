//! The electro-thermal problem: current conduction φ, its Joule heat Q = σ(T)|∇φ|², and the
//! temperature T it drives, with the adjoint gradient of any weighted sum of thermal and
//! terminal objectives.
//!
//! # Coupling graph
//!
//! φ → Q → T, and T → φ when some conductor's resistivity depends on temperature.
//!
//! - **One-way** (every ρ constant): the fields are solved in topological order, φ (linear,
//!   Cholesky) at the conductors' reference temperatures, Q = joule_heat_qp(φ), then T (Newton,
//!   as [`ThermalProblem`]) with Q as external source. The tape has three blocks, reversed:
//!   the thermal solve (λ_T = K_Tᵀ⁻¹ T̄, thermal parameters −λ_Tᵀ∂R_T/∂p, and
//!   Q̄ = −λ_Tᵀ ∂R_T/∂Q), the Joule transfer (φ̄ += Q̄ ∂Q/∂φ and its σ₀, α_R, X partials), the
//!   electrical solve (K_φᵀ λ_φ = φ̄ on the unknowns plus the terminal objectives' ∂J/∂u,
//!   electrical parameters −λ_φᵀ ∂R_φ/∂p, and voltages V̄ from φ̄ at the terminal nodes).
//! - **Two-way** (some ρ(T)): the cycle φ ⇄ T is one strongly coupled group with the residual
//!   [R_φ(φ, T); R_T(T, Q(φ, T))] = 0. Its adjoint at the converged state is
//!
//!   ⎡K_φᵀ       (∂R_T/∂φ)ᵀ⎤ ⎡λ_φ⎤   ⎡∂J/∂φ⎤
//!   ⎣(∂R_φ/∂T)ᵀ (∂R_T/∂T)ᵀ⎦ ⎣λ_T⎦ = ⎣∂J/∂T⎦,
//!
//!   followed by the parameter products of both fields and of the Joule term (one tape block).
//!   - `scheme = "monolithic"` (default): Newton on [φ_u; T_u] with one assembly pattern over
//!     combined elements (a conductor cell carries its electrical dofs then its thermal dofs;
//!     thermal facets and cells outside conductors only thermal dofs; current-terminal
//!     elements only their electrical dof), blocks K_φφ, K_φT = ∂R_φ/∂T, K_Tφ = −∂s/∂φ,
//!     K_TT = K_T − ∂s/∂T with s_a = ∫ Q N_a dΩ, LU. The adjoint is ONE transposed solve with
//!     the LU factors of the converged Jacobian.
//!   - `scheme = "staggered"`: block Gauss–Seidel (φ at fixed T, then T at fixed Q) until the
//!     relative change of φ and T is below the coupling tolerance. Its adjoint solves the same
//!     transposed system as above by the transposed block Gauss–Seidel iteration with the two
//!     fields' factorizations (K_T at fixed Q, K_φ at fixed T; off-diagonal and ∂Q/∂T products
//!     are vector-Jacobian products), so both schemes give the same gradient to the solver
//!     tolerance; the staggered adjoint converges exactly when the forward iteration does
//!     (same iteration matrix, transposed).
//!
//! The electrical model is evaluated without a temperature field (`t = None`, each conductor
//! at its reference temperature) in the one-way case, with the thermal field's nodal T in the
//! two-way case.

use std::time::Instant;

use gradfem_electrical::{
    ConductorSpec, ElectricalModel, TerminalFunctional, TerminalKind, TerminalSpec,
    VjpRequest as ElVjpRequest,
};
use gradfem_solvers::assembly::AssemblyPattern;
use gradfem_solvers::assembly::CONSTRAINED;
use gradfem_solvers::error::SolverError;
use gradfem_solvers::linear::{CholeskySolver, LinearSolver, LuSolver};
use gradfem_solvers::newton::{NonlinearProblem, newton};
use gradfem_solvers::params::{Gradient, ParamId, ParamKind, ParamRegistry, ParamSpec};
use gradfem_solvers::sparse::CsrMatrix;
use gradfem_solvers::tape::{Adjoints, Block, BlockTiming, Tape};
use serde::Serialize;

use crate::run::RunError;
use crate::thermal::{GradientTimings, SolveTimings, ThermalProblem};

/// How a strongly coupled φ ⇄ T group is solved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CouplingScheme {
    /// One Newton on [φ; T] with the full coupled Jacobian (LU).
    Monolithic,
    /// Block Gauss–Seidel between the two fields until the change is below the tolerance.
    Staggered,
}

impl CouplingScheme {
    /// Parse `monolithic` or `staggered`.
    pub fn parse(s: &str) -> Result<Self, RunError> {
        match s {
            "monolithic" => Ok(CouplingScheme::Monolithic),
            "staggered" => Ok(CouplingScheme::Staggered),
            other => Err(RunError::Setup(format!(
                "unknown coupling scheme '{other}'; expected monolithic or staggered"
            ))),
        }
    }
}

/// Settings of the coupled solve.
#[derive(Clone, Debug, Serialize)]
pub struct CouplingParams {
    pub scheme: CouplingScheme,
    /// Relative change of T and φ (max norm) below which the staggered iteration stops; also
    /// the tolerance of the staggered adjoint.
    pub tol: f64,
    pub max_iterations: usize,
}

impl Default for CouplingParams {
    fn default() -> Self {
        CouplingParams { scheme: CouplingScheme::Monolithic, tol: 1e-11, max_iterations: 100 }
    }
}

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

/// Timings of one forward electro-thermal solve.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CoupledSolveTimings {
    /// Electrical assembly + factorization + solve, summed over the coupling iterations.
    pub electrical_s: f64,
    /// Joule heat at the quadrature points, summed.
    pub joule_s: f64,
    /// Thermal solves, summed.
    pub thermal_s: f64,
    /// Coupling iterations (1 for one-way).
    pub coupling_iterations: usize,
    /// Relative change per coupling iteration.
    pub coupling_history: Vec<f64>,
    /// The last thermal solve.
    pub thermal: SolveTimings,
}

/// Timings of one electro-thermal gradient: per tape block, and the total.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CoupledGradientTimings {
    pub gradient_s: f64,
    pub blocks: Vec<BlockTiming>,
    /// Block Gauss–Seidel iterations of the coupled adjoint (0 for one-way).
    pub adjoint_iterations: usize,
}

impl CoupledGradientTimings {
    /// The thermal report's format: totals of solve and accumulation.
    pub fn totals(&self) -> GradientTimings {
        GradientTimings {
            gradient_s: self.gradient_s,
            adjoint_solve_s: self.blocks.iter().map(|b| b.solve_s).sum(),
            accumulate_s: self.blocks.iter().map(|b| b.accumulate_s).sum(),
        }
    }
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

/// The electro-thermal problem: an electrical model and a thermal problem on the same mesh.
pub struct ElectroThermalProblem {
    /// The thermal field; its registry is the problem's one registry.
    pub thermal: ThermalProblem,
    pub electrical: ElectricalModel,
    pattern: AssemblyPattern,
    matrix: CsrMatrix,
    solver: Box<dyn LinearSolver>,
    /// Terminal objective terms, added to the thermal objective terms.
    pub electrical_objective: Vec<TerminalTerm>,
    bindings: Vec<(ParamId, EBinding)>,
    /// The thermal volume element of each electrical volume element.
    thermal_element: Vec<usize>,
    pub coupling: CouplingParams,
    phi: Option<Vec<f64>>,
    pub last_solve: CoupledSolveTimings,
    last_adjoint_iterations: usize,
    /// The monolithic system (two-way problems with `scheme = monolithic`).
    mono: Option<Monolithic>,
}

/// The monolithic [φ; T] system: one assembly pattern over combined elements and an LU solver
/// that keeps the factorization of the converged Jacobian for the adjoint.
struct Monolithic {
    pattern: AssemblyPattern,
    solver: Box<dyn LinearSolver>,
    /// Combined element k: (thermal element or NONE, electrical element or NONE).
    elements: Vec<(usize, usize)>,
    n_phi: usize,
    /// Newton iterations of the last solve.
    iterations: usize,
}

const NONE: usize = usize::MAX;

fn setup(msg: impl Into<String>) -> RunError {
    RunError::Setup(msg.into())
}

impl ElectroThermalProblem {
    /// Couple an electrical model (conductors, terminals) to `thermal` on the same mesh. Every
    /// conductor cell must be a cell of the thermal model, with the same quadrature points.
    pub fn new(
        thermal: ThermalProblem,
        conductors: &[ConductorSpec],
        terminals: &[TerminalSpec],
        electrical_objective: Vec<TerminalTerm>,
        coupling: CouplingParams,
    ) -> Result<Self, RunError> {
        let electrical = ElectricalModel::new(&thermal.mesh, conductors, terminals)?;
        let mut thermal_of_cell = std::collections::HashMap::new();
        for e in 0..thermal.model.n_volume_elements() {
            thermal_of_cell.insert(thermal.model.element_cell(e), e);
        }
        let mut thermal_element = Vec::with_capacity(electrical.n_volume_elements());
        let (eo, to) = (electrical.qp_offsets(), thermal.model.qp_offsets());
        for e in 0..electrical.n_volume_elements() {
            let cell = electrical.element_cell(e);
            let Some(&te) = thermal_of_cell.get(&cell) else {
                return Err(setup(format!(
                    "electrical: cell {} of conductor '{}' is in no thermal material; every conductor needs a thermal material",
                    electrical.element_cell_tag(e),
                    electrical.conductors[electrical.element_conductor(e)].name
                )));
            };
            assert_eq!(
                eo[e + 1] - eo[e],
                to[te + 1] - to[te],
                "electrical and thermal quadrature differ on cell {}",
                electrical.element_cell_tag(e)
            );
            thermal_element.push(te);
        }
        let pattern = AssemblyPattern::new(
            electrical.n_unknowns(),
            electrical.element_offsets(),
            electrical.element_dofs(),
        );
        let matrix = pattern.new_matrix();
        Ok(ElectroThermalProblem {
            thermal,
            electrical,
            pattern,
            matrix,
            solver: Box::new(CholeskySolver::new("electrical")),
            electrical_objective,
            bindings: Vec::new(),
            thermal_element,
            coupling,
            phi: None,
            last_solve: CoupledSolveTimings::default(),
            last_adjoint_iterations: 0,
            mono: None,
        })
    }

    /// Choose the electrical field's linear solver: `Auto` routes by predicted cost between
    /// sparse Cholesky and AMG-preconditioned CG ([`crate::run::spd_solver`]), unless a current
    /// terminal is present (its voltage unknown couples every node of the terminal surface: a
    /// dense row that aggregation handles poorly), when Cholesky stays.
    /// The monolithic two-way Newton always uses LU; the staggered scheme uses this solver.
    pub fn set_linear(&mut self, choice: crate::run::LinearChoice, cg_rel_tol: f64) {
        use crate::run::LinearChoice;
        let current = self
            .electrical
            .terminals
            .iter()
            .any(|t| matches!(t.kind, TerminalKind::Current { .. }));
        let choice = match choice {
            LinearChoice::Auto if current => LinearChoice::Cholesky,
            other => other,
        };
        self.solver = crate::run::spd_solver("electrical", choice, cg_rel_tol, None);
    }

    /// The electrical field's linear solver.
    pub fn linear_solver(&self) -> &'static str {
        self.solver.name()
    }

    /// True when some conductor's resistivity depends on temperature (the φ ⇄ T cycle), or
    /// may do so: a registered α_R is a parameter of the T-dependence even at α_R = 0, so its
    /// derivative needs the coupled form.
    pub fn is_two_way(&self) -> bool {
        self.electrical.depends_on_temperature()
            || self.bindings.iter().any(|(_, b)| matches!(b, EBinding::AlphaR(_)))
    }

    /// The problem's one parameter registry.
    pub fn registry(&self) -> &ParamRegistry {
        &self.thermal.registry
    }

    /// Every parameter name this problem can register.
    pub fn available_parameters(&self) -> Vec<String> {
        let mut names = self.thermal.available_parameters();
        for c in &self.electrical.conductors {
            names.push(format!("electrical.sigma.{}", c.name));
            names.push(format!("electrical.sigma_elem.{}", c.name));
            if c.law.alpha_r().is_some() {
                names.push(format!("electrical.alpha_r.{}", c.name));
            }
        }
        for t in &self.electrical.terminals {
            match t.kind {
                TerminalKind::Voltage { .. } => names.push(format!("load.{}.voltage", t.name)),
                TerminalKind::Current { .. } => names.push(format!("load.{}.current", t.name)),
                TerminalKind::Ground => {}
            }
        }
        names
    }

    /// Register a parameter by name: the thermal ones (see [`ThermalProblem::register`]),
    /// `electrical.sigma.<group>` (σ₀ of a conductor, S/m), `electrical.sigma_elem.<group>`
    /// (σ₀ per element), `electrical.alpha_r.<group>` (linear law), `load.<terminal>.current`,
    /// `load.<terminal>.voltage`; `mesh.coordinates` moves both fields' nodes.
    pub fn register(&mut self, name: &str, bounds: Option<[f64; 2]>) -> Result<ParamId, RunError> {
        let electrical = name.starts_with("electrical.") || name.starts_with("load.");
        if !electrical {
            let id = self.thermal.register(name, bounds).map_err(|e| match e {
                RunError::Setup(_) => self.unknown(name),
                other => other,
            })?;
            return Ok(id);
        }
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
        let id = self.thermal.registry.register(spec)?;
        self.bindings.push((id, binding));
        Ok(id)
    }

    fn unknown(&self, name: &str) -> RunError {
        setup(format!(
            "cannot register '{name}': this problem offers {}",
            self.available_parameters().join(", ")
        ))
    }

    fn binding_for(&self, name: &str) -> Result<(EBinding, ParamSpec), RunError> {
        let m = &self.electrical;
        let conductor = |g: &str| m.conductors.iter().position(|c| c.name == g);
        if let Some(g) = name.strip_prefix("electrical.sigma_elem.") {
            let c = conductor(g).ok_or_else(|| self.unknown(name))?;
            let values = m.conductors[c].elements.iter().map(|&e| m.sigma_elem[e]).collect();
            return Ok((
                EBinding::SigmaElem(c),
                ParamSpec::vector(name, ParamKind::PerElement { group: g.to_string() }, values)
                    .with_bounds(Some(0.0), None)
                    .with_doc("electrical conductivity σ₀ of each cell of the conductor", "S/m"),
            ));
        }
        if let Some(g) = name.strip_prefix("electrical.sigma.") {
            let c = conductor(g).ok_or_else(|| self.unknown(name))?;
            let e0 = m.conductors[c].elements[0];
            return Ok((
                EBinding::Sigma(c),
                ParamSpec::scalar(name, m.sigma_elem[e0])
                    .with_bounds(Some(0.0), None)
                    .with_doc("electrical conductivity σ₀ of the conductor", "S/m"),
            ));
        }
        if let Some(g) = name.strip_prefix("electrical.alpha_r.") {
            let c = conductor(g).ok_or_else(|| self.unknown(name))?;
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
            let (g, field) = rest.rsplit_once('.').ok_or_else(|| self.unknown(name))?;
            let k =
                m.terminals.iter().position(|t| t.name == g).ok_or_else(|| self.unknown(name))?;
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
                _ => Err(self.unknown(name)),
            };
        }
        Err(self.unknown(name))
    }

    /// Copy the registry's values into both models. Invalidates the last solution.
    pub fn apply_parameters(&mut self) -> Result<(), RunError> {
        self.thermal.apply_parameters()?;
        for (id, binding) in self.bindings.clone() {
            let v = self.thermal.registry.values(id).to_vec();
            let m = &mut self.electrical;
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
        if self.thermal.shape.is_active() {
            self.electrical.coords = self.thermal.model.coords.clone();
            self.electrical.check_coordinates()?;
        }
        self.phi = None;
        Ok(())
    }

    /// Nodal temperatures the electrical model sees: `None` (reference temperatures) for a
    /// one-way problem.
    fn electrical_temperature(&self) -> Option<&[f64]> {
        if self.is_two_way() { self.thermal.temperature() } else { None }
    }

    /// Solve the (linear) electrical field at temperature `t`; keeps the factorization.
    fn solve_electrical(&mut self, t: Option<&[f64]>) -> Result<Vec<f64>, RunError> {
        let m = &self.electrical;
        let n = m.n_unknowns();
        let zero = m.nodal_potential(&vec![0.0; n]);
        let mut r = vec![0.0; n];
        self.pattern.assemble_into(&mut self.matrix, &mut r, |e, ke, fe| {
            m.element_residual_tangent(e, &zero, t, Some(ke), fe)
        });
        self.solver.factor(&self.matrix)?;
        for v in r.iter_mut() {
            *v = -*v;
        }
        self.solver.solve_in_place(&mut r)?;
        Ok(m.nodal_potential(&r))
    }

    /// Joule heat per thermal quadrature point from the electrical one (0 outside conductors).
    fn joule_to_thermal(&self, q_el: &[f64]) -> Vec<f64> {
        let to = self.thermal.model.qp_offsets();
        let eo = self.electrical.qp_offsets();
        let mut q = vec![0.0; *to.last().expect("offsets")];
        for (e, &te) in self.thermal_element.iter().enumerate() {
            q[to[te]..to[te + 1]].copy_from_slice(&q_el[eo[e]..eo[e + 1]]);
        }
        q
    }

    /// The reverse of [`joule_to_thermal`](Self::joule_to_thermal).
    fn thermal_to_joule(&self, s_th: &[f64]) -> Vec<f64> {
        let to = self.thermal.model.qp_offsets();
        let eo = self.electrical.qp_offsets();
        let mut s = vec![0.0; *eo.last().expect("offsets")];
        for (e, &te) in self.thermal_element.iter().enumerate() {
            s[eo[e]..eo[e + 1]].copy_from_slice(&s_th[to[te]..to[te + 1]]);
        }
        s
    }

    /// The electrical field alone and its Joule heat as the thermal model's source, for a
    /// thermal field that is then solved some other way (stepped in time). Only for a one-way
    /// coupling: with a resistivity that depends on T, φ and T are solved together.
    pub fn solve_source(&mut self) -> Result<(), RunError> {
        if self.is_two_way() {
            return Err(setup(
                "a transient electro-thermal problem needs a resistivity independent of T (no `alpha_r` or resistivity `law`, no registered α_R): the two-way coupling is not stepped in time yet",
            ));
        }
        let phi = self.solve_electrical(None)?;
        let q = self.electrical.joule_heat_qp(&phi, None);
        let q = self.joule_to_thermal(&q);
        self.thermal.model.set_external_source(Some(q));
        self.phi = Some(phi);
        Ok(())
    }

    /// The reverse of [`solve_source`](Self::solve_source): with dJ/dQ per thermal quadrature
    /// point (`q_bar`, from the thermal field's adjoint), adds the electrical parameters'
    /// gradient (σ₀, terminal voltages and currents, coordinates) into `grad`, through the
    /// Joule transfer and one transposed electrical solve.
    pub fn source_adjoint(&mut self, q_bar: &[f64], grad: &mut Gradient) -> Result<(), RunError> {
        let mut tape: Tape<ElectroThermalProblem> = Tape::new();
        let n_nodes = self.electrical.n_nodes();
        let n_qp = *self.electrical.qp_offsets().last().expect("offsets");
        let phi_var = tape.add_variable("potential", n_nodes);
        let q_var = tape.add_variable("joule heat", n_qp);
        let u_bar = vec![0.0; self.electrical.n_unknowns()];
        tape.push(Box::new(ElectricalSolveBlock { phi: phi_var, u_bar }));
        tape.push(Box::new(JouleBlock { phi: phi_var, q: q_var }));
        let mut adj = Adjoints::new(&self.thermal.registry, tape.variable_lens());
        adj.vars[q_var] = self.thermal_to_joule(q_bar);
        tape.reverse(self, &mut adj)?;
        grad.add_scaled(1.0, &adj.grad);
        Ok(())
    }

    /// Solve φ, Q and T: in topological order (one-way) or staggered (two-way).
    pub fn solve(&mut self) -> Result<(), RunError> {
        let mut timings = CoupledSolveTimings::default();
        let two_way = self.is_two_way();
        if two_way && self.coupling.scheme == CouplingScheme::Monolithic && self.mono.is_none() {
            self.mono = Some(self.build_monolithic());
        }
        if two_way && self.mono.is_some() {
            self.phi = None;
            self.solve_monolithic(&mut timings)?;
            timings.thermal = self.thermal.last_solve.clone();
            self.last_solve = timings;
            return Ok(());
        }
        let max_it = if two_way { self.coupling.max_iterations } else { 1 };
        let mut prev: Option<(Vec<f64>, Vec<f64>)> = None;
        let mut converged = !two_way;
        for it in 0..max_it {
            let t_start = if two_way {
                Some(self.thermal.model.nodal_temperature(self.thermal.unknowns()))
            } else {
                None
            };
            let t0 = Instant::now();
            let phi = self.solve_electrical(t_start.as_deref())?;
            timings.electrical_s += t0.elapsed().as_secs_f64();
            let t1 = Instant::now();
            let q = self.electrical.joule_heat_qp(&phi, t_start.as_deref());
            let q = self.joule_to_thermal(&q);
            timings.joule_s += t1.elapsed().as_secs_f64();
            self.thermal.model.set_external_source(Some(q));
            let t2 = Instant::now();
            let t = self.solve_thermal_step(two_way)?;
            timings.thermal_s += t2.elapsed().as_secs_f64();
            timings.coupling_iterations = it + 1;
            self.phi = Some(phi.clone());
            if two_way {
                let change = match &prev {
                    Some((p0, t0)) => rel_change(&phi, p0).max(rel_change(&t, t0)),
                    None => f64::INFINITY,
                };
                timings.coupling_history.push(change);
                tracing::debug!(iteration = it + 1, change, "electro-thermal staggered step");
                if change <= self.coupling.tol {
                    converged = true;
                    break;
                }
                prev = Some((phi, t));
            }
        }
        if !converged {
            self.phi = None;
            return Err(setup(format!(
                "electro-thermal staggered iteration did not converge in {} iterations (last relative change {:.3e}, tolerance {:.1e}); the coupling may be too strong for a fixed-point iteration",
                max_it,
                timings.coupling_history.last().copied().unwrap_or(f64::NAN),
                self.coupling.tol
            )));
        }
        // After the last thermal solve the electrical factorization is at the T it used; for the
        // adjoint it must be at the converged T: refactor there (two-way only).
        if two_way {
            let t = self.thermal.temperature().map(|t| t.to_vec());
            let t0 = Instant::now();
            let phi = self.solve_electrical(t.as_deref())?;
            timings.electrical_s += t0.elapsed().as_secs_f64();
            self.phi = Some(phi);
        }
        timings.thermal = self.thermal.last_solve.clone();
        self.last_solve = timings;
        Ok(())
    }

    /// One thermal solve at the current external source. Inside the staggered iteration a warm
    /// start within the Newton tolerance would be accepted without a step, freezing T while Q
    /// still changes (the iteration would then stop on a zero change): a linear thermal field
    /// is solved from zero (one exact step), a nonlinear one with its relative tolerance
    /// tightened to 1e-13.
    fn solve_thermal_step(&mut self, two_way: bool) -> Result<Vec<f64>, RunError> {
        if !two_way {
            return Ok(self.thermal.solve()?.to_vec());
        }
        if self.thermal.model.is_linear() {
            self.thermal.set_unknowns(vec![0.0; self.thermal.model.n_unknowns()]);
            return Ok(self.thermal.solve()?.to_vec());
        }
        let saved = self.thermal.newton.clone();
        self.thermal.newton.rel_tol = saved.rel_tol.min(1e-13);
        let r = self.thermal.solve().map(|t| t.to_vec());
        self.thermal.newton = saved;
        r
    }

    /// The combined elements and pattern of the monolithic [φ; T] system.
    fn build_monolithic(&self) -> Monolithic {
        let el = &self.electrical;
        let th = &self.thermal.model;
        let n_phi = el.n_unknowns();
        let mut el_of_th = vec![NONE; th.n_elements()];
        for (e, &te) in self.thermal_element.iter().enumerate() {
            assert_eq!(
                el.element_nodes(e),
                th.element_nodes(te),
                "electrical and thermal elements of cell {} have different nodes",
                el.element_cell_tag(e)
            );
            el_of_th[te] = e;
        }
        let mut elements = Vec::new();
        let mut offsets = vec![0];
        let mut dofs = Vec::new();
        let shift = |d: usize| if d == CONSTRAINED { d } else { d + n_phi };
        let el_dofs =
            |e: usize| &el.element_dofs()[el.element_offsets()[e]..el.element_offsets()[e + 1]];
        let th_dofs =
            |e: usize| &th.element_dofs()[th.element_offsets()[e]..th.element_offsets()[e + 1]];
        for te in 0..th.n_elements() {
            let ee = el_of_th[te];
            if ee != NONE {
                dofs.extend_from_slice(el_dofs(ee));
            }
            dofs.extend(th_dofs(te).iter().map(|&d| shift(d)));
            offsets.push(dofs.len());
            elements.push((te, ee));
        }
        for ee in el.n_volume_elements()..el.n_elements() {
            dofs.extend_from_slice(el_dofs(ee));
            offsets.push(dofs.len());
            elements.push((NONE, ee));
        }
        let pattern = AssemblyPattern::new(n_phi + th.n_unknowns(), &offsets, &dofs);
        Monolithic {
            pattern,
            solver: Box::new(LuSolver::new("electro-thermal")),
            elements,
            n_phi,
            iterations: 0,
        }
    }

    /// Newton on the monolithic [φ; T] system from the current state (φ solved at the current
    /// T as a start). Leaves the LU factorization of the converged Jacobian in the solver and
    /// the thermal field at the converged T with Q(φ, T) as its source.
    fn solve_monolithic(&mut self, timings: &mut CoupledSolveTimings) -> Result<(), RunError> {
        let t_start = self.thermal.model.nodal_temperature(self.thermal.unknowns());
        let t0 = Instant::now();
        let phi0 = self.solve_electrical(Some(&t_start))?;
        timings.electrical_s += t0.elapsed().as_secs_f64();
        let mut mono = self.mono.take().expect("monolithic system built");
        self.thermal.model.set_external_source(None);
        let n_phi = mono.n_phi;
        let mut u = self.electrical.unknowns_from_nodal(&phi0);
        u.extend_from_slice(self.thermal.unknowns());
        let mut params = self.thermal.newton.clone();
        params.rel_tol = params.rel_tol.min(1e-12);
        let t1 = Instant::now();
        let result = {
            let mut sys = MonoResidual {
                el: &self.electrical,
                th: &self.thermal.model,
                pattern: &mono.pattern,
                elements: &mono.elements,
                n_phi,
            };
            // Tolerance relative to the load ‖R(0)‖, as the thermal field does.
            let mut r0 = vec![0.0; u.len()];
            sys.residual(&vec![0.0; u.len()], &mut r0);
            let load = r0.iter().map(|v| v * v).sum::<f64>().sqrt();
            params.abs_tol = params.abs_tol.max(params.rel_tol * load);
            newton(&mut sys, &mut u, mono.solver.as_mut(), &params)
        };
        timings.thermal_s += t1.elapsed().as_secs_f64();
        let info = match result {
            Ok(info) => info,
            Err(e) => {
                self.mono = Some(mono);
                return Err(e.into());
            }
        };
        mono.iterations = info.iterations;
        timings.coupling_iterations = info.iterations;
        timings.coupling_history = info.residual_history.clone();
        self.mono = Some(mono);
        let phi = self.electrical.nodal_potential(&u[..n_phi]);
        let t = self.thermal.model.nodal_temperature(&u[n_phi..]);
        let t2 = Instant::now();
        let q = self.electrical.joule_heat_qp(&phi, Some(&t));
        let q = self.joule_to_thermal(&q);
        timings.joule_s += t2.elapsed().as_secs_f64();
        self.thermal.model.set_external_source(Some(q));
        self.thermal.set_unknowns(u[n_phi..].to_vec());
        // At the converged state: no Newton step, only the thermal field's bookkeeping.
        self.thermal.solve()?;
        self.thermal.last_solve = SolveTimings {
            assembly_s: info.time_residual_s,
            factor_s: info.time_factor_s,
            solve_s: info.time_solve_s,
            newton_iterations: info.iterations,
            residual_history: info.residual_history,
            linear_solver: "lu (monolithic φ-T)".into(),
        };
        self.phi = Some(phi);
        Ok(())
    }

    /// The coupled adjoint (λ_φ, λ_T) per node: one transposed solve with the monolithic
    /// Jacobian at the converged state.
    fn monolithic_adjoint(
        &mut self,
        u_bar: &[f64],
        t_bar: &[f64],
    ) -> Result<(Vec<f64>, Vec<f64>), RunError> {
        let mono = self.mono.as_mut().ok_or_else(|| setup("monolithic system not built"))?;
        let mut rhs = u_bar.to_vec();
        rhs.extend(self.thermal.model.dofs.gather(t_bar));
        if !rhs.is_empty() {
            mono.solver.solve_transpose_in_place(&mut rhs)?;
        }
        let n_phi = mono.n_phi;
        let lambda_phi = self.electrical.nodal_from_unknowns(&rhs[..n_phi]);
        let mut lambda_t = vec![0.0; self.thermal.model.n_nodes()];
        self.thermal.model.dofs.scatter(&rhs[n_phi..], &mut lambda_t);
        Ok((lambda_phi, lambda_t))
    }

    /// Nodal potential of the last solve.
    pub fn potential(&self) -> Option<&[f64]> {
        self.phi.as_deref()
    }

    /// Nodal temperature of the last solve.
    pub fn temperature(&self) -> Option<&[f64]> {
        self.thermal.temperature()
    }

    fn state(&self) -> Result<(Vec<f64>, Vec<f64>), RunError> {
        let phi = self.phi.clone().ok_or_else(|| setup("solve first"))?;
        let t = self.thermal.temperature().ok_or_else(|| setup("solve first"))?.to_vec();
        Ok((phi, t))
    }

    /// The objective J = Σ thermal terms + Σ wᵢ · terminal functionalᵢ at the last solution,
    /// with its term values.
    pub fn objective_terms(&self) -> Result<(f64, Vec<f64>), RunError> {
        let (phi, _) = self.state()?;
        let eval = self.thermal.evaluate_objective(false)?;
        let mut terms = eval.terms.clone();
        let mut value = if self.thermal.objective.is_empty() { 0.0 } else { eval.value };
        let t = self.electrical_temperature();
        for term in &self.electrical_objective {
            let v = gradfem_electrical::functional::evaluate(
                &self.electrical,
                &term.functional,
                &phi,
                t,
                false,
            )?
            .value;
            terms.push(term.weight * v);
            value += term.weight * v;
        }
        Ok((value, terms))
    }

    /// Solve (if needed) and return J.
    pub fn objective_value(&mut self) -> Result<f64, RunError> {
        if self.phi.is_none() || self.thermal.temperature().is_none() {
            self.solve()?;
        }
        Ok(self.objective_terms()?.0)
    }

    fn has_coordinates(&self) -> bool {
        self.thermal.shape.is_active()
    }

    /// Add per-node coordinate partials `dx` (times `scale`) to the shape parameters' gradient.
    fn add_coords(&self, grad: &mut Gradient, dx: &[[f64; 3]], scale: f64) {
        self.thermal.shape.add_partials(grad, dx, scale);
    }

    /// Add per-element σ₀ and per-conductor α_R partials (times `scale`) to the gradient.
    fn add_material(&self, grad: &mut Gradient, d_sigma: &[f64], d_alpha: &[f64], scale: f64) {
        for (id, b) in &self.bindings {
            let g = grad.get_mut(*id);
            match *b {
                EBinding::Sigma(c) => {
                    g[0] += scale
                        * self.electrical.conductors[c]
                            .elements
                            .iter()
                            .map(|&e| d_sigma[e])
                            .sum::<f64>();
                }
                EBinding::SigmaElem(c) => {
                    for (gi, &e) in g.iter_mut().zip(&self.electrical.conductors[c].elements) {
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

    /// A fixed temperature's share of a nodal T̄ that the thermal field does not see (the
    /// coupling terms at fixed nodes): Σ over the condition's nodes.
    fn add_fixed_temperature(&self, grad: &mut Gradient, t_bar: &[f64]) {
        let owner = self.thermal.model.fixed_owner();
        for (id, spec) in self.thermal.registry.iter() {
            let Some(rest) = spec.name.strip_prefix("bc.") else { continue };
            let Some(g) = rest.strip_suffix(".temperature") else { continue };
            let Some(b) = self.thermal.model.boundaries.iter().position(|bc| bc.name == g) else {
                continue;
            };
            let s: f64 = (0..owner.len()).filter(|&n| owner[n] == Some(b)).map(|n| t_bar[n]).sum();
            grad.get_mut(id)[0] += s;
        }
    }

    fn electrical_want(&self) -> ElVjpRequest {
        let has = |f: fn(&EBinding) -> bool| self.bindings.iter().any(|(_, b)| f(b));
        ElVjpRequest {
            conductivity: has(|b| {
                matches!(b, EBinding::Sigma(_) | EBinding::SigmaElem(_) | EBinding::AlphaR(_))
            }),
            terminals: has(|b| matches!(b, EBinding::Current(_) | EBinding::Voltage(_))),
            temperature: self.is_two_way(),
            coords: self.has_coordinates(),
        }
    }

    /// −λ_φᵀ ∂R_φ/∂p into the gradient; returns λ_φᵀ ∂R_φ/∂T per node.
    fn electrical_accumulate(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        lambda: &[f64],
        grad: &mut Gradient,
    ) -> Vec<f64> {
        let vjp = self.electrical.parameter_vjp(phi, t, lambda, self.electrical_want());
        self.add_material(grad, &vjp.sigma_elem, &vjp.alpha_r, -1.0);
        self.add_terminals(grad, &vjp.current, &vjp.voltage, -1.0);
        if let Some(dx) = &vjp.coords {
            self.add_coords(grad, dx, -1.0);
        }
        vjp.temperature
    }

    /// Q̄ ∂Q/∂p into the gradient (σ₀, α_R, X); returns (φ̄, T̄) per node.
    fn joule_accumulate(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        q_bar: &[f64],
        grad: &mut Gradient,
    ) -> (Vec<f64>, Vec<f64>) {
        let jv = self.electrical.joule_vjp(phi, t, q_bar, self.has_coordinates());
        self.add_material(grad, &jv.sigma_elem, &jv.alpha_r, 1.0);
        if let Some(dx) = &jv.coords {
            self.add_coords(grad, dx, 1.0);
        }
        (jv.phi, jv.temperature)
    }

    /// Seeds of the adjoint: ∂J/∂T per node, the terminal functionals' ∂J/∂u_φ, and the
    /// explicit partials added to `grad`. Returns (J, T̄, ū_φ).
    fn seeds(&self, grad: &mut Gradient) -> Result<(f64, Vec<f64>, Vec<f64>), RunError> {
        let (phi, _) = self.state()?;
        let with_coords = self.has_coordinates();
        let eval = self.thermal.evaluate_objective(with_coords)?;
        let mut value = if self.thermal.objective.is_empty() { 0.0 } else { eval.value };
        let mut t_bar = if self.thermal.objective.is_empty() {
            vec![0.0; self.thermal.model.n_nodes()]
        } else {
            eval.d_temperature.clone()
        };
        if !self.thermal.objective.is_empty()
            && let Some(dx) = &eval.d_coords
        {
            self.add_coords(grad, dx, 1.0);
        }
        let mut u_bar = vec![0.0; self.electrical.n_unknowns()];
        let t = self.electrical_temperature();
        for term in &self.electrical_objective {
            let w = term.weight;
            let ev = gradfem_electrical::functional::evaluate(
                &self.electrical,
                &term.functional,
                &phi,
                t,
                with_coords,
            )?;
            value += w * ev.value;
            for (u, d) in u_bar.iter_mut().zip(&ev.d_unknowns) {
                *u += w * d;
            }
            self.add_material(grad, &ev.d_sigma_elem, &ev.d_alpha_r, w);
            self.add_terminals(grad, &ev.d_current, &ev.d_voltage, w);
            if let Some(dx) = &ev.d_coords {
                self.add_coords(grad, dx, w);
            }
            if t.is_some() {
                for (tb, d) in t_bar.iter_mut().zip(&ev.d_temperature) {
                    *tb += w * d;
                }
            }
        }
        Ok((value, t_bar, u_bar))
    }

    /// The gradient of J with respect to every registered parameter (adjoint; see the module
    /// doc), with per-block timings.
    pub fn gradient(&mut self) -> Result<(f64, Gradient, CoupledGradientTimings), RunError> {
        self.gradient_seeded(None)
    }

    /// As [`gradient`](Self::gradient), with `extra_t` (per node) added to the temperature
    /// seed ∂J/∂T (the adjoint of the mechanical field downstream of T).
    pub fn gradient_seeded(
        &mut self,
        extra_t: Option<&[f64]>,
    ) -> Result<(f64, Gradient, CoupledGradientTimings), RunError> {
        if self.phi.is_none() || self.thermal.temperature().is_none() {
            self.solve()?;
        }
        let t0 = Instant::now();
        let mut tape: Tape<ElectroThermalProblem> = Tape::new();
        let n_nodes = self.electrical.n_nodes();
        let n_qp = *self.electrical.qp_offsets().last().expect("offsets");
        let phi_var = tape.add_variable("potential", n_nodes);
        let q_var = tape.add_variable("joule heat", n_qp);
        let t_var = tape.add_variable("temperature", n_nodes);
        let mut adj_grad = Gradient::zeros(&self.thermal.registry);
        let (value, t_bar, u_bar) = self.seeds(&mut adj_grad)?;
        let two_way = self.is_two_way();
        if two_way {
            tape.push(Box::new(CoupledBlock { t_var, u_bar, iterations: 0 }));
        } else {
            tape.push(Box::new(ElectricalSolveBlock { phi: phi_var, u_bar }));
            tape.push(Box::new(JouleBlock { phi: phi_var, q: q_var }));
            tape.push(Box::new(ThermalSolveBlock { q: q_var, t: t_var }));
        }
        let mut adj = Adjoints::new(&self.thermal.registry, tape.variable_lens());
        adj.grad = adj_grad;
        adj.vars[t_var].copy_from_slice(&t_bar);
        if let Some(extra) = extra_t {
            for (v, e) in adj.vars[t_var].iter_mut().zip(extra) {
                *v += e;
            }
        }
        let blocks = tape.reverse(self, &mut adj)?;
        let adjoint_iterations = if two_way { self.last_adjoint_iterations } else { 0 };
        Ok((
            value,
            adj.grad,
            CoupledGradientTimings {
                gradient_s: t0.elapsed().as_secs_f64(),
                blocks,
                adjoint_iterations,
            },
        ))
    }

    /// Taylor test of the gradient over every registered parameter (deterministic direction
    /// scaled by each entry's magnitude; the mesh size for coordinates). Leaves the problem as
    /// it was.
    pub fn taylor_test(
        &mut self,
        params: &gradfem_solvers::taylor::TaylorParams,
        mut progress: impl FnMut(usize),
    ) -> Result<gradfem_solvers::taylor::TaylorResult, RunError> {
        let pv = gradfem_solvers::params::ParamVector::all(&self.thermal.registry);
        let (_, grad, _) = self.gradient()?;
        let converged = self.thermal.unknowns().to_vec();
        let g = grad.flatten(&pv);
        let m0 = pv.gather(&self.thermal.registry);
        let dm = crate::thermal::direction(&m0, &pv, &self.thermal.registry, &self.thermal.shape);
        let mut reg = std::mem::take(&mut self.thermal.registry);
        let mut count = 0;
        let result = gradfem_solvers::taylor::taylor_test_registry(
            &mut reg,
            &pv,
            &g,
            &dm,
            params,
            |r: &ParamRegistry| -> Result<f64, RunError> {
                self.thermal.registry = r.clone();
                self.apply_parameters()?;
                count += 1;
                progress(count);
                self.objective_value()
            },
        );
        self.thermal.registry = reg;
        self.apply_parameters()?;
        self.thermal.set_unknowns(converged);
        self.solve()?;
        result
    }

    /// Terminal currents and voltages of the last solve.
    pub fn terminal_report(&self) -> Result<Vec<TerminalReport>, RunError> {
        let (phi, _) = self.state()?;
        let t = self.electrical_temperature();
        let i = self.electrical.terminal_currents(&phi, t);
        let v = self.electrical.terminal_voltages(&phi);
        Ok(self
            .electrical
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
        let ts = &self.electrical.terminals;
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

    /// Per-element σ₀ gradients as cell fields over the thermal field's output cells (name,
    /// values; NaN outside the conductor).
    pub fn element_gradient_fields(&self, grad: &Gradient) -> Vec<(String, Vec<f64>)> {
        let index = self.thermal.element_output_index();
        let mut out = Vec::new();
        for (id, b) in &self.bindings {
            if let EBinding::SigmaElem(c) = *b {
                let mut v = vec![f64::NAN; self.thermal.n_output_cells()];
                for (gi, &e) in grad.get(*id).iter().zip(&self.electrical.conductors[c].elements) {
                    v[index[self.thermal_element[e]]] = *gi;
                }
                out.push((format!("dJ/d{}", self.thermal.registry.get(*id).name), v));
            }
        }
        out
    }

    /// The mesh's element tags of the entries of each per-element parameter of the electrical
    /// field, in the parameter's order (for `gradients.json`).
    pub fn element_parameter_tags(&self) -> Vec<(ParamId, Vec<u64>)> {
        let mut out = Vec::new();
        for (id, b) in &self.bindings {
            if let EBinding::SigmaElem(c) = *b {
                let tags = self.electrical.conductors[c]
                    .elements
                    .iter()
                    .map(|&e| {
                        let cell = self.thermal.model.element_cell(self.thermal_element[e]);
                        self.thermal.mesh.blocks[cell.block].tags[cell.index]
                    })
                    .collect();
                out.push((*id, tags));
            }
        }
        out
    }

    /// Total Joule power ∫ Q dΩ [W].
    pub fn joule_power(&self) -> Result<f64, RunError> {
        let (phi, _) = self.state()?;
        Ok(self.electrical.joule_power_elements(&phi, self.electrical_temperature()).iter().sum())
    }
}

/// max |a − b| / max(max |a|, tiny), over finite entries.
fn rel_change(a: &[f64], b: &[f64]) -> f64 {
    let mut d: f64 = 0.0;
    let mut s: f64 = 0.0;
    for (x, y) in a.iter().zip(b) {
        if x.is_finite() && y.is_finite() {
            d = d.max((x - y).abs());
            s = s.max(x.abs());
        }
    }
    d / s.max(f64::MIN_POSITIVE)
}

fn wrap(field: &str, e: RunError) -> SolverError {
    SolverError::Other { field: field.into(), message: e.to_string() }
}

/// Thermal solve R_T(T; Q, p) = 0: λ_T = K_Tᵀ⁻¹ T̄, −λ_Tᵀ ∂R_T/∂p, Q̄ = −λ_Tᵀ ∂R_T/∂Q.
struct ThermalSolveBlock {
    q: usize,
    t: usize,
}

impl Block<ElectroThermalProblem> for ThermalSolveBlock {
    fn name(&self) -> &str {
        "thermal solve"
    }
    fn adjoint(
        &mut self,
        p: &mut ElectroThermalProblem,
        adj: &mut Adjoints,
    ) -> Result<BlockTiming, SolverError> {
        let t_bar = std::mem::take(&mut adj.vars[self.t]);
        let ts = Instant::now();
        let lambda = p.thermal.adjoint_solve(&t_bar).map_err(|e| wrap("thermal", e))?;
        let solve_s = ts.elapsed().as_secs_f64();
        let ta = Instant::now();
        p.thermal
            .accumulate_adjoint(&lambda, &t_bar, &mut adj.grad)
            .map_err(|e| wrap("thermal", e))?;
        let s = p.thermal_to_joule(&p.thermal.model.external_source_vjp(&lambda));
        for (qb, si) in adj.vars[self.q].iter_mut().zip(&s) {
            *qb -= si;
        }
        Ok(BlockTiming {
            block: self.name().into(),
            solve_s,
            accumulate_s: ta.elapsed().as_secs_f64(),
        })
    }
}

/// Joule transfer Q = σ(T)|∇φ|² at the quadrature points: φ̄ += Q̄ ∂Q/∂φ, p̄ += Q̄ ∂Q/∂p.
struct JouleBlock {
    phi: usize,
    q: usize,
}

impl Block<ElectroThermalProblem> for JouleBlock {
    fn name(&self) -> &str {
        "joule transfer"
    }
    fn adjoint(
        &mut self,
        p: &mut ElectroThermalProblem,
        adj: &mut Adjoints,
    ) -> Result<BlockTiming, SolverError> {
        let ta = Instant::now();
        let q_bar = std::mem::take(&mut adj.vars[self.q]);
        let (phi, _) = p.state().map_err(|e| wrap("electrical", e))?;
        let (phi_bar, _) = p.joule_accumulate(&phi, None, &q_bar, &mut adj.grad);
        for (a, b) in adj.vars[self.phi].iter_mut().zip(&phi_bar) {
            *a += b;
        }
        Ok(BlockTiming {
            block: self.name().into(),
            solve_s: 0.0,
            accumulate_s: ta.elapsed().as_secs_f64(),
        })
    }
}

/// Electrical solve R_φ(φ; p) = 0: K_φᵀ λ_φ = ū + (φ̄ on the unknowns), −λ_φᵀ ∂R_φ/∂p, and the
/// voltages' share of φ̄ at the terminal nodes.
struct ElectricalSolveBlock {
    phi: usize,
    u_bar: Vec<f64>,
}

impl Block<ElectroThermalProblem> for ElectricalSolveBlock {
    fn name(&self) -> &str {
        "electrical solve"
    }
    fn adjoint(
        &mut self,
        p: &mut ElectroThermalProblem,
        adj: &mut Adjoints,
    ) -> Result<BlockTiming, SolverError> {
        let phi_bar = std::mem::take(&mut adj.vars[self.phi]);
        let (phi, _) = p.state().map_err(|e| wrap("electrical", e))?;
        let ts = Instant::now();
        let mut rhs = p.electrical.unknowns_adjoint(&phi_bar);
        for (r, u) in rhs.iter_mut().zip(&self.u_bar) {
            *r += u;
        }
        if !rhs.is_empty() {
            p.solver.solve_transpose_in_place(&mut rhs)?;
        }
        let solve_s = ts.elapsed().as_secs_f64();
        let ta = Instant::now();
        let lambda = p.electrical.nodal_from_unknowns(&rhs);
        p.electrical_accumulate(&phi, None, &lambda, &mut adj.grad);
        let v_bar = p.electrical.voltage_adjoint(&phi_bar);
        let zero = vec![0.0; v_bar.len()];
        p.add_terminals(&mut adj.grad, &zero, &v_bar, 1.0);
        Ok(BlockTiming {
            block: self.name().into(),
            solve_s,
            accumulate_s: ta.elapsed().as_secs_f64(),
        })
    }
}

/// The strongly coupled φ ⇄ T group: the transposed coupled system solved by block
/// Gauss–Seidel with both fields' factorizations (see the module doc), then every parameter
/// product at the converged adjoints.
struct CoupledBlock {
    t_var: usize,
    u_bar: Vec<f64>,
    iterations: usize,
}

impl Block<ElectroThermalProblem> for CoupledBlock {
    fn name(&self) -> &str {
        "coupled electro-thermal solve"
    }
    fn adjoint(
        &mut self,
        p: &mut ElectroThermalProblem,
        adj: &mut Adjoints,
    ) -> Result<BlockTiming, SolverError> {
        let t_bar = std::mem::take(&mut adj.vars[self.t_var]);
        let (phi, t) = p.state().map_err(|e| wrap("electro-thermal", e))?;
        let ts = Instant::now();
        let n_nodes = t.len();
        let mut lambda_phi = vec![0.0; n_nodes];
        let mut lambda_t = vec![0.0; n_nodes];
        let want_t = ElVjpRequest {
            conductivity: false,
            terminals: false,
            temperature: true,
            coords: false,
        };
        if p.mono.is_some() {
            let (lp, lt) = p
                .monolithic_adjoint(&self.u_bar, &t_bar)
                .map_err(|e| wrap("electro-thermal", e))?;
            lambda_phi = lp;
            lambda_t = lt;
            self.iterations = 1;
            p.last_adjoint_iterations = 1;
        } else {
            let mut converged = false;
            let mut last = f64::NAN;
            for it in 0..p.coupling.max_iterations {
                // T-row: K_Tᵀ λ_T = T̄ − (∂Q/∂T)ᵀ s − (∂R_φ/∂T)ᵀ λ_φ, s = λ_Tᵀ ∂R_T/∂Q (previous λ_T).
                let s = p.thermal_to_joule(&p.thermal.model.external_source_vjp(&lambda_t));
                let jv = p.electrical.joule_vjp(&phi, Some(&t), &s, false);
                let pv = p.electrical.parameter_vjp(&phi, Some(&t), &lambda_phi, want_t);
                let rhs_t: Vec<f64> = (0..n_nodes)
                    .map(|n| t_bar[n] - jv.temperature[n] - pv.temperature[n])
                    .collect();
                let new_t = p.thermal.adjoint_solve(&rhs_t).map_err(|e| wrap("thermal", e))?;
                // φ-row: K_φᵀ λ_φ = ū − (∂Q/∂φ)ᵀ s(λ_T).
                let s = p.thermal_to_joule(&p.thermal.model.external_source_vjp(&new_t));
                let jv = p.electrical.joule_vjp(&phi, Some(&t), &s, false);
                let mut rhs = p.electrical.unknowns_adjoint(&jv.phi);
                for (r, u) in rhs.iter_mut().zip(&self.u_bar) {
                    *r = u - *r;
                }
                if !rhs.is_empty() {
                    p.solver.solve_transpose_in_place(&mut rhs)?;
                }
                let new_phi = p.electrical.nodal_from_unknowns(&rhs);
                let change = rel_change(&new_t, &lambda_t).max(rel_change(&new_phi, &lambda_phi));
                lambda_t = new_t;
                lambda_phi = new_phi;
                self.iterations = it + 1;
                last = change;
                if change <= p.coupling.tol {
                    converged = true;
                    break;
                }
            }
            if !converged {
                return Err(SolverError::Other {
                    field: "electro-thermal".into(),
                    message: format!(
                        "coupled adjoint did not converge in {} block Gauss-Seidel iterations (last relative change {last:.3e})",
                        self.iterations
                    ),
                });
            }
            p.last_adjoint_iterations = self.iterations;
        }
        let solve_s = ts.elapsed().as_secs_f64();
        let ta = Instant::now();
        // Parameter products at the converged adjoints.
        let grad = &mut adj.grad;
        p.thermal.accumulate_adjoint(&lambda_t, &t_bar, grad).map_err(|e| wrap("thermal", e))?;
        let s = p.thermal_to_joule(&p.thermal.model.external_source_vjp(&lambda_t));
        let neg_s: Vec<f64> = s.iter().map(|v| -v).collect();
        let (phi_bar, t_bar_joule) = p.joule_accumulate(&phi, Some(&t), &neg_s, grad);
        let t_bar_el = p.electrical_accumulate(&phi, Some(&t), &lambda_phi, grad);
        let v_bar = p.electrical.voltage_adjoint(&phi_bar);
        let zero = vec![0.0; v_bar.len()];
        p.add_terminals(grad, &zero, &v_bar, 1.0);
        // Fixed temperatures: their coupling terms (T̄ of the Joule heat and of R_φ at the fixed
        // nodes; the thermal field counted its own).
        let coupled: Vec<f64> = (0..n_nodes).map(|n| t_bar_joule[n] - t_bar_el[n]).collect();
        p.add_fixed_temperature(grad, &coupled);
        Ok(BlockTiming {
            block: self.name().into(),
            solve_s,
            accumulate_s: ta.elapsed().as_secs_f64(),
        })
    }
}

/// The monolithic residual [R_φ(φ, T); R_T(T) − ∫ Q(φ, T) N dΩ] and its Jacobian
/// ⎡K_φφ  ∂R_φ/∂T⎤
/// ⎣−∂s/∂φ  K_T − ∂s/∂T⎦ with s_a = ∫ Q N_a dΩ, element by element.
struct MonoResidual<'a> {
    el: &'a ElectricalModel,
    th: &'a gradfem_thermal::ThermalModel,
    pattern: &'a AssemblyPattern,
    elements: &'a [(usize, usize)],
    n_phi: usize,
}

/// Largest number of nodes of a supported cell (Hex27).
const MAX_NODES: usize = 27;

impl MonoResidual<'_> {
    fn kernel(&self, phi: &[f64], t: &[f64], e: usize, ke: Option<&mut [f64]>, fe: &mut [f64]) {
        let (te, ee) = self.elements[e];
        if te == NONE {
            self.el.element_residual_tangent(ee, phi, Some(t), ke, fe);
            return;
        }
        if ee == NONE {
            self.th.element_residual_tangent(te, t, ke, fe);
            return;
        }
        let nn = self.th.element_nodes(te).len();
        let m = 2 * nn;
        let mut a_buf = [0.0; MAX_NODES * MAX_NODES];
        let mut b_buf = [0.0; MAX_NODES * MAX_NODES];
        let (fe_phi, fe_t) = fe.split_at_mut(nn);
        let mut load = [0.0; MAX_NODES];
        self.el.joule_load_element(ee, phi, Some(t), &mut load[..nn]);
        match ke {
            None => {
                self.el.element_residual_tangent(ee, phi, Some(t), None, fe_phi);
                self.th.element_residual_tangent(te, t, None, fe_t);
            }
            Some(ke) => {
                let a = &mut a_buf[..nn * nn];
                self.el.element_residual_tangent(ee, phi, Some(t), Some(&mut *a), fe_phi);
                for i in 0..nn {
                    for j in 0..nn {
                        ke[i * m + j] += a[i * nn + j];
                    }
                }
                a.fill(0.0);
                self.el.temperature_tangent_element(ee, phi, t, a);
                for i in 0..nn {
                    for j in 0..nn {
                        ke[i * m + nn + j] += a[i * nn + j];
                    }
                }
                a.fill(0.0);
                self.th.element_residual_tangent(te, t, Some(&mut *a), fe_t);
                for i in 0..nn {
                    for j in 0..nn {
                        ke[(nn + i) * m + nn + j] += a[i * nn + j];
                    }
                }
                a.fill(0.0);
                let b = &mut b_buf[..nn * nn];
                self.el.joule_tangent_element(ee, phi, Some(t), a, b);
                for i in 0..nn {
                    for j in 0..nn {
                        ke[(nn + i) * m + j] -= a[i * nn + j];
                        ke[(nn + i) * m + nn + j] -= b[i * nn + j];
                    }
                }
            }
        }
        for i in 0..nn {
            fe_t[i] -= load[i];
        }
    }

    fn fields(&self, u: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let n = self.n_phi;
        (self.el.nodal_potential(&u[..n]), self.th.nodal_temperature(&u[n..]))
    }
}

impl NonlinearProblem for MonoResidual<'_> {
    fn field(&self) -> &str {
        "electro-thermal"
    }
    fn n_unknowns(&self) -> usize {
        self.pattern.n_unknowns()
    }
    fn tangent_pattern(&self) -> CsrMatrix {
        self.pattern.new_matrix()
    }
    fn residual(&mut self, u: &[f64], r: &mut [f64]) {
        let (phi, t) = self.fields(u);
        self.pattern.assemble_vector_into(r, |e, fe| self.kernel(&phi, &t, e, None, fe));
    }
    fn residual_and_tangent(&mut self, u: &[f64], r: &mut [f64], k: &mut CsrMatrix) {
        let (phi, t) = self.fields(u);
        self.pattern.assemble_into(k, r, |e, ke, fe| self.kernel(&phi, &t, e, Some(ke), fe));
    }
    fn describe_dof(&self, dof: usize) -> String {
        let n = self.n_phi;
        if dof < n {
            format!("potential: {}", self.el.describe_dof(dof))
        } else {
            format!("temperature: {}", self.th.describe_dof(dof - n))
        }
    }
}
