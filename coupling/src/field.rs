//! What every field of a coupled problem offers the engine: its ports, its parameters, its
//! solve at given inputs, its objective terms and the vector-Jacobian products of all of these.
//!
//! A field f has a state u_f (its solution, handed out as a nodal vector) that solves its
//! residual R_f(u_f; x_f, p) = 0 at given inputs x_f (other fields' outputs, brought by the
//! transfers of the coupling graph) and parameters p. Its outputs y = g(u_f, x_f, p) are the
//! state itself (port 0) and derived quantities (the Joule heat of the electrical field). The
//! engine ([`crate::CoupledProblem`]) wires outputs to inputs, solves the graph's stages in
//! order and runs the adjoint in reverse; a field never knows which fields surround it.
//!
//! Reverse mode, for the seed ū (∂J/∂u over the state, with everything downstream added):
//!
//! 1. [`Field::adjoint_solve`]: (∂R/∂u)ᵀ λ = ū on the unknowns, with the factorization the
//!    forward solve left (a transposed solve, never a new factorization for a linear field);
//! 2. [`Field::input_vjp`]: x̄ = −(∂R/∂x)ᵀ λ for each input port, handed upstream;
//! 3. [`Field::accumulate`]: p̄ −= λᵀ ∂R/∂p for the field's registered parameters and the
//!    node coordinates, and the direct share of prescribed values (a fixed temperature
//!    receives ū at its nodes), with step 2 in the same pass where that is cheaper;
//! 4. [`Field::output_vjp`] for derived outputs: ū += ȳ ∂g/∂u, x̄ += ȳ ∂g/∂x, p̄ += ȳ ∂g/∂p.
//!
//! Steps 1, 2 and 4 without parameters are what a staggered cycle's adjoint iterates; step 3
//! runs once at the converged adjoints.

use std::any::Any;

use gradfem_kernel::{CoordinatePart, CoordinateRequest};
use gradfem_mesh::CellId;
use gradfem_solvers::params::{Gradient, ParamId, ParamRegistry};

use crate::error::RunError;
use crate::shape::Shape;

/// How the values of a port are laid out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One value per mesh node and component, the components of a node together:
    /// `components · n_nodes` values.
    Nodal {
        /// Values per node (1 for a scalar field, 3 for a displacement).
        components: usize,
    },
    /// Values at the quadrature points of the field's volume elements, element by element:
    /// element e's points are `offsets[e]..offsets[e + 1]` and it lies on mesh cell `cells[e]`.
    /// A transfer between two such ports matches the elements by their cells.
    Points {
        /// Offsets of each element's points (length: elements + 1).
        offsets: Vec<usize>,
        /// The mesh cell of each element.
        cells: Vec<CellId>,
    },
}

impl Layout {
    /// Number of values of a port with this layout on a mesh of `n_nodes` nodes.
    pub fn len(&self, n_nodes: usize) -> usize {
        match self {
            Layout::Nodal { components } => components * n_nodes,
            Layout::Points { offsets, .. } => offsets.last().copied().unwrap_or(0),
        }
    }
}

/// A named input or output of a field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    /// What flows through it (`temperature`, `potential`, `joule_heat`, `heat_source`, …).
    pub name: String,
    /// Where its values live.
    pub layout: Layout,
}

impl Port {
    /// A nodal port with `components` values per node.
    pub fn nodal(name: &str, components: usize) -> Self {
        Port { name: name.into(), layout: Layout::Nodal { components } }
    }
}

/// How the engine asks a field to solve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SolveMode {
    /// On its own (its inputs are final): the field's own tolerances, warm started.
    Alone,
    /// One sweep of a staggered cycle: the inputs change between sweeps, so a warm start
    /// within the tolerance must not be accepted without a step (a linear field solves from
    /// zero, a nonlinear one with a tighter tolerance).
    InCycle,
}

/// The seeds of the objective terms a field owns: ∂J/∂u over its state (nodal), ∂J/∂u over
/// unknowns that are not nodal values (e.g. a current terminal's voltage is, but a functional
/// may be given on the unknowns directly) and ∂J/∂x per input port.
#[derive(Clone, Debug, Default)]
pub struct Seed {
    /// ∂J/∂u per state entry (the layout of output port 0).
    pub state: Vec<f64>,
    /// ∂J/∂u on the field's unknowns, added to the adjoint's right-hand side (empty: none).
    pub unknowns: Vec<f64>,
    /// (input port, ∂J/∂x) for objective terms that read an input directly.
    pub inputs: Vec<(usize, Vec<f64>)>,
}

/// The reverse of a derived output: ū (over the state) and x̄ per input port.
#[derive(Clone, Debug, Default)]
pub struct OutputVjp {
    /// ȳ ∂g/∂u over the state (empty: zero).
    pub state: Vec<f64>,
    /// (input port, ȳ ∂g/∂x).
    pub inputs: Vec<(usize, Vec<f64>)>,
}

/// What a field's reverse-mode parameter products write into: the gradient and the shape (node
/// coordinate and morph parameters, to which coordinate partials are handed).
pub struct Reverse<'a> {
    /// The registry the gradient is shaped by.
    pub registry: &'a ParamRegistry,
    /// The shape parameters.
    pub shape: &'a Shape,
    /// dJ/dp, accumulated.
    pub grad: &'a mut Gradient,
}

impl<'a> Reverse<'a> {
    /// True when coordinate derivatives are wanted (a shape parameter is registered).
    pub fn wants_coordinates(&self) -> bool {
        self.shape.is_active()
    }

    /// Add `scale · ∂/∂X` (per node) to the shape parameters' gradient.
    pub fn add_coordinates(&mut self, dx: &[[f64; 3]], scale: f64) {
        self.shape.add_partials(self.grad, dx, scale);
    }

    /// The coordinate derivatives the shape parameters need from a second-order product
    /// ([`Shape::coordinate_request`]).
    pub fn coordinate_request(&self) -> CoordinateRequest<'a> {
        self.shape.coordinate_request()
    }

    /// Add `scale` times a coordinate part formed for [`coordinate_request`](Self::coordinate_request).
    pub fn add_coordinate_part(&mut self, part: &CoordinatePart, scale: f64) {
        self.shape.add_part(self.grad, part, scale);
    }
}

/// One field of a coupled problem (see the module docs). Implementations live with the
/// physics they wire (`crate::fields`); the engine knows them only through this trait.
pub trait Field: Any + Send {
    /// Its name in the coupling graph (`thermal`, `electrical`, `mechanical`, `hyperelastic`).
    fn name(&self) -> &str;

    /// Its outputs; port 0 is the state.
    fn outputs(&self) -> Vec<Port>;

    /// Its inputs (ports other fields' outputs feed).
    fn inputs(&self) -> Vec<Port> {
        Vec::new()
    }

    // ----- parameters ------------------------------------------------------------------

    /// The parameter names the field offers (without the shape's `mesh.coordinates` and
    /// `morph.*`, which the engine holds).
    fn available_parameters(&self) -> Vec<String>;

    /// True when `name` is in this field's name space (whether or not it exists), so that
    /// registering it is this field's business.
    fn owns(&self, name: &str) -> bool;

    /// Register `name` into `registry`; returns its id. An unknown name is
    /// `RunError::Setup` (the engine then lists the whole problem's names).
    fn register(
        &mut self,
        registry: &mut ParamRegistry,
        name: &str,
        bounds: Option<[f64; 2]>,
    ) -> Result<ParamId, RunError>;

    /// Copy the registry's values into the model, with the node coordinates when a shape
    /// parameter is registered. Invalidates the solution.
    fn apply_parameters(
        &mut self,
        registry: &ParamRegistry,
        coordinates: Option<&[[f64; 3]]>,
    ) -> Result<(), RunError>;

    // ----- forward ---------------------------------------------------------------------

    /// Take the values of input port `port` (the layout of [`inputs`](Self::inputs)).
    /// Invalidates the solution.
    fn set_input(&mut self, port: usize, values: &[f64]) -> Result<(), RunError>;

    /// Solve R(u; x, p) = 0 at the inputs set, keeping what the adjoint needs (the
    /// factorization at the converged state).
    fn solve(&mut self, mode: SolveMode) -> Result<(), RunError>;

    /// True when the state is solved for the current inputs and parameters.
    fn is_solved(&self) -> bool;

    /// The solved state (output port 0), `None` before a solve.
    fn state(&self) -> Option<&[f64]>;

    /// The value of derived output `port` ≥ 1 at the solved state.
    fn output(&self, port: usize) -> Result<Vec<f64>, RunError> {
        Err(RunError::Setup(format!("{}: no output port {port}", self.name())))
    }

    // ----- objective -------------------------------------------------------------------

    /// The value of the field's objective terms at the solved state (their weighted sum; J is
    /// the sum over the fields) and each term as the field reports it.
    fn objective(&self) -> Result<(f64, Vec<f64>), RunError>;

    /// The seeds of the field's objective terms; their direct parameter and coordinate
    /// partials go into `rev`.
    fn objective_seed(&self, rev: &mut Reverse) -> Result<Seed, RunError>;

    // ----- reverse ---------------------------------------------------------------------

    /// Solve (∂R/∂u)ᵀ λ = ū (+ `unknowns_bar` on the unknowns) with the factorization of the
    /// last solve; λ per state entry (zero where the state is prescribed).
    fn adjoint_solve(
        &mut self,
        state_bar: &[f64],
        unknowns_bar: &[f64],
    ) -> Result<Vec<f64>, RunError>;

    /// x̄ = −(∂R/∂x)ᵀ λ for input port `port`.
    fn input_vjp(&self, port: usize, lambda: &[f64]) -> Result<Vec<f64>, RunError>;

    /// p̄ −= λᵀ ∂R/∂p for the field's registered parameters and the coordinates, and the
    /// direct share of prescribed state values (their entries of `state_bar`); returns
    /// x̄ = −(∂R/∂x)ᵀ λ for each input port in `inputs` (computed in the same pass where the
    /// field can).
    fn accumulate(
        &self,
        lambda: &[f64],
        state_bar: &[f64],
        rev: &mut Reverse,
        inputs: &[usize],
    ) -> Result<Vec<(usize, Vec<f64>)>, RunError>;

    /// The reverse of derived output `port` ≥ 1 for the seed `y_bar`; with `rev`, also its
    /// parameter and coordinate partials.
    fn output_vjp(
        &self,
        port: usize,
        y_bar: &[f64],
        rev: Option<&mut Reverse>,
    ) -> Result<OutputVjp, RunError> {
        let _ = (y_bar, rev);
        Err(RunError::Setup(format!("{}: no output port {port}", self.name())))
    }

    // ----- capabilities ------------------------------------------------------------------

    /// The state Newton or a staggered sweep starts from before the first solve (the state
    /// itself once solved).
    fn start_state(&self) -> Vec<f64>;

    /// The element-level view a monolithic cycle assembles, at the placed state and inputs;
    /// `None` when the field offers none (its cycles are then solved staggered).
    fn cell_kernels(&self) -> Option<Box<dyn crate::cell::CellKernels + '_>> {
        None
    }

    /// The tangent of the field's unknowns along a tangent `state` of its state, what a seed
    /// on the unknowns ([`Seed::unknowns`]) is dotted with for the derivative of an objective
    /// term's value; `None` when the field gives none (its terms seed its state only).
    fn unknowns_tangent(&self, state: &[f64]) -> Option<Vec<f64>> {
        let _ = state;
        None
    }

    /// The unknowns of the current state or start (a monolithic cycle's Newton starts there).
    fn cell_unknowns(&self) -> Vec<f64> {
        Vec::new()
    }

    /// Place the state of `unknowns` in the field without solving (its element kernels and
    /// outputs then read it; the field is not solved).
    fn place_unknowns(&mut self, unknowns: &[f64]) {
        let _ = unknowns;
    }

    /// Take the placed state as the solution after a monolithic cycle's Newton converged with
    /// `info` (residual history, timings).
    fn finish_cycle_solve(
        &mut self,
        info: &gradfem_solvers::newton::NewtonInfo,
    ) -> Result<(), RunError> {
        let _ = info;
        Err(RunError::Setup(format!("{}: no element-level view", self.name())))
    }

    /// Newton's start as the field keeps it (Taylor tests restore it before every evaluation,
    /// so that the evaluations differ by the parameters only); empty when the field keeps
    /// none.
    fn warm_start(&self) -> Vec<f64> {
        Vec::new()
    }

    /// Restore a start taken by [`warm_start`](Self::warm_start) (forgets the solution).
    fn set_warm_start(&mut self, start: Vec<f64>) {
        let _ = start;
    }

    /// The engine will solve this field about `per_factorization` times with each of its
    /// system matrices (a quasi-static field downstream of a stepped one: once per state, then
    /// its adjoint once per state): a solver that picks its method by predicted cost predicts
    /// for that count ([`gradfem_solvers::linear::LinearSolver::expect_solves`]). Default:
    /// nothing to tell.
    fn expect_solves(&mut self, per_factorization: usize) {
        let _ = per_factorization;
    }

    /// The field's time stepping, when it has a capacity term and is stepped in time.
    fn dynamic(&self) -> Option<&dyn Dynamic> {
        None
    }

    /// The field's time stepping, mutably.
    fn dynamic_mut(&mut self) -> Option<&mut dyn Dynamic> {
        None
    }

    /// The field's second-order products (tangent-linear solves, second-order adjoint terms),
    /// when it has them; `None` by default.
    fn second_order(&mut self) -> Option<&mut dyn SecondOrder> {
        None
    }

    /// [`second_order`](Self::second_order) for the products that need no solve.
    fn second_order_ref(&self) -> Option<&dyn SecondOrder> {
        None
    }

    /// The field as `Any`, for callers that know its type (reports, outputs).
    fn as_any(&self) -> &dyn Any;

    /// The field as mutable `Any`.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// Where a state of a time-stepped run lies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepInfo {
    /// State index n (0 = the initial state).
    pub step: usize,
    /// Number of steps N.
    pub n_steps: usize,
    /// Time t_n.
    pub time: f64,
    /// The step that ends at state n (0 for n = 0).
    pub dt_before: f64,
    /// The step that starts at state n (0 for n = N).
    pub dt_after: f64,
}

/// A field stepped in time: M du/dt + R(u; x, p) = 0 from an initial state, its inputs held
/// constant in time (they come from fields upstream that do not depend on it), with the
/// discrete adjoint of its steps. The engine solves the fields downstream at every state and
/// hands their adjoints back as per-state seeds.
pub trait Dynamic {
    /// Run the time stepping at the current inputs and parameters, keeping the trajectory;
    /// the field then shows its last state.
    fn simulate(&mut self) -> Result<(), RunError>;

    /// Times and states (output port 0's layout) of the last run.
    fn trajectory(&self) -> Option<(&[f64], &[Vec<f64>])>;

    /// Where state n lies.
    fn step_info(&self, n: usize) -> StepInfo;

    /// Show state n as the field's state (fields downstream read it).
    fn show_state(&mut self, n: usize) -> Result<(), RunError>;

    /// The value of the field's own objective terms at every state of the last run.
    fn state_objective(&self) -> Result<Vec<f64>, RunError>;

    /// The adjoint of Σₙ wₙ jₙ(uⁿ) + Σₙ ⟨sₙ, uⁿ⟩ (j the field's own terms, sₙ = `seeds[n]`
    /// the seeds downstream fields put on state n, `None` for none) through the whole run:
    /// dJ/dp into `rev`, and the seeds of the input ports in `inputs`, accumulated over the
    /// steps.
    fn time_gradient(
        &mut self,
        weights: &[f64],
        seeds: &[Option<Vec<f64>>],
        rev: &mut Reverse,
        inputs: &[usize],
    ) -> Result<Vec<(usize, Vec<f64>)>, RunError>;

    // ----- second order through the steps ---------------------------------------------------

    /// Whether the field has the tangent-linear model and second-order adjoint of its steps
    /// ([`time_tangents`](Self::time_tangents), [`time_hessian_vector`](Self::time_hessian_vector)).
    fn covers_second_order(&self) -> bool {
        false
    }

    /// The tangent-linear model of the last run along the parameter direction `params` with
    /// the node coordinates' tangent `coordinates` (empty: the nodes hold still) and the input
    /// tangents `inputs` (per port, held in time; an empty vector: zero): the state tangent
    /// δuⁿ at every state (output port 0's layout) and the derivative δjₙ of the field's own
    /// objective terms there.
    fn time_tangents(
        &mut self,
        params: &Gradient,
        coordinates: &[[f64; 3]],
        inputs: &[Vec<f64>],
    ) -> Result<TimeTangents, RunError> {
        let _ = (params, coordinates, inputs);
        Err(RunError::Setup("this field has no second-order products in time".into()))
    }

    /// H·δp of J = F(j₀ … j_N) + Σₙ ⟨sₙ, uⁿ⟩ through the last run, added into `rev`:
    /// `weights` are wₙ = ∂F/∂jₙ, `d_weights` their derivatives along `params`, `seeds` the
    /// weighted seeds sₙ fields downstream put on state n and `d_seeds` their derivatives,
    /// `tangents` the run's [`time_tangents`](Self::time_tangents) along the same direction
    /// (`params` and the node coordinates' tangent `coordinates`; the coordinates' part of the
    /// product goes to `rev` when it wants them). Returns the first-order seeds of the input
    /// ports in `inputs` and their derivatives.
    #[allow(clippy::too_many_arguments)]
    fn time_hessian_vector(
        &mut self,
        weights: &[f64],
        d_weights: &[f64],
        seeds: &[Option<Vec<f64>>],
        d_seeds: &[Option<Vec<f64>>],
        params: &Gradient,
        coordinates: &[[f64; 3]],
        tangents: &TimeTangents,
        rev: &mut Reverse,
        inputs: &[usize],
    ) -> Result<TimeInputSeeds, RunError> {
        let _ = (weights, d_weights, seeds, d_seeds, params, coordinates, tangents, rev, inputs);
        Err(RunError::Setup("this field has no second-order products in time".into()))
    }

    // ----- stepping under the engine, for a field on a cycle ------------------------------
    //
    // A field stepped in time inside a strongly coupled group (the temperature of a φ ⇄ T
    // cycle) cannot step on its own: every step is one coupled solve. The engine then drives
    // the steps,
    //   M (a₀uᵏ⁺¹ + a₁uᵏ + a₂uᵏ⁻¹)/(θΔt) + R(uᵏ⁺¹; xᵏ⁺¹) + (1 − θ)/θ R(uᵏ; xᵏ) = 0,
    // with the capacity from the field's element kernels, and asks the field for the rest.
    // The field's unknowns are entries of its state (a nodal temperature).

    /// The steps the engine takes for the field (sizes, coefficients, θ, or the rule that
    /// chooses them), the initial state and how the reverse sweep keeps states; an error when
    /// the field's time settings cannot be stepped on a cycle.
    fn cycle_plan(&self) -> Result<CyclePlan, RunError> {
        Err(RunError::Setup("this field cannot be stepped in time on a cycle".into()))
    }

    /// Keep the step sizes the engine chose for an adaptive plan (later plans use them).
    fn set_cycle_steps(&mut self, steps: Vec<f64>, choice: StepChoice) -> Result<(), RunError> {
        let _ = (steps, choice);
        Err(RunError::Setup("this field cannot be stepped in time on a cycle".into()))
    }

    /// Take the run the engine made (times and states) as the field's trajectory.
    fn set_cycle_trajectory(
        &mut self,
        times: Vec<f64>,
        states: Vec<Vec<f64>>,
        newton_iterations: usize,
    ) -> Result<(), RunError> {
        let _ = (times, states, newton_iterations);
        Err(RunError::Setup("this field cannot be stepped in time on a cycle".into()))
    }

    /// What the engine's reverse sweep over the cycle's steps cost: steps recomputed from
    /// checkpoints and the most states held at once.
    fn set_cycle_sweep_stats(&mut self, recomputed_steps: usize, peak_stored_states: usize) {
        let _ = (recomputed_steps, peak_stored_states);
    }

    /// M v over the state entries (zero where the state is prescribed).
    fn capacity_product(&self, v: &[f64]) -> Vec<f64> {
        vec![0.0; v.len()]
    }

    /// −μᵀ (∂M/∂p) w into `rev` for the capacity's parameters and the coordinates.
    fn capacity_vjp(&self, mu: &[f64], w: &[f64], rev: &mut Reverse) -> Result<(), RunError> {
        let _ = (mu, w, rev);
        Ok(())
    }

    /// The seed `state_bar` on the initial state into the parameters it is made of (the
    /// initial value of the free entries; prescribed entries' values).
    fn initial_vjp(&self, state_bar: &[f64], rev: &mut Reverse) {
        let _ = (state_bar, rev);
    }

    // ----- second order on a cycle ----------------------------------------------------------

    /// Whether the field has [`capacity_tangent_product`](Self::capacity_tangent_product),
    /// [`capacity_second_order_vjp`](Self::capacity_second_order_vjp) and
    /// [`initial_tangent`](Self::initial_tangent), which the engine's Hessian-vector products
    /// through the steps of a cycle need.
    fn covers_cycle_second_order(&self) -> bool {
        false
    }

    /// Ṁ v over the state entries (zero where the state is prescribed): the capacity's
    /// derivative along the parameter direction `params` and the node coordinates' tangent
    /// `coordinates` (empty: the nodes hold still), applied to `v`.
    fn capacity_tangent_product(
        &self,
        params: &Gradient,
        coordinates: &[[f64; 3]],
        v: &[f64],
    ) -> Result<Vec<f64>, RunError> {
        let _ = (params, coordinates, v);
        Err(RunError::Setup("this field has no second-order products in time on a cycle".into()))
    }

    /// With μ and w held: −d/dε[μᵀ (∂M/∂p) w] along `params` and the node coordinates' tangent
    /// `coordinates` into `rev` (the derivative of [`capacity_vjp`](Self::capacity_vjp)'s
    /// product; the capacity is linear in its own parameters, so only its node-coordinate
    /// parts move).
    fn capacity_second_order_vjp(
        &self,
        mu: &[f64],
        w: &[f64],
        params: &Gradient,
        coordinates: &[[f64; 3]],
        rev: &mut Reverse,
    ) -> Result<(), RunError> {
        let _ = (mu, w, params, coordinates, rev);
        Err(RunError::Setup("this field has no second-order products in time on a cycle".into()))
    }

    /// δu⁰, the initial state's tangent along `params` (prescribed entries included).
    fn initial_tangent(&self, params: &Gradient) -> Result<Vec<f64>, RunError> {
        let _ = params;
        Err(RunError::Setup("this field has no second-order products in time on a cycle".into()))
    }
}

/// The seeds a run's second-order adjoint hands its input ports: the first-order x̄ and its
/// derivative δx̄ along the direction, by port.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimeInputSeeds {
    /// x̄ per port.
    pub first: Vec<(usize, Vec<f64>)>,
    /// δx̄ per port.
    pub second: Vec<(usize, Vec<f64>)>,
}

/// The tangent-linear model of a run along a parameter direction.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimeTangents {
    /// δuⁿ at every state n = 0 … N (output port 0's layout).
    pub states: Vec<Vec<f64>>,
    /// δjₙ of the field's own objective terms at every state.
    pub objective: Vec<f64>,
    /// ∂jₙ/∂uⁿ of the field's own objective terms at every state (empty without terms), for
    /// the second-order adjoint that follows.
    pub objective_gradients: Vec<Vec<f64>>,
    /// The input tangents the run was taken along (per port; an empty vector: zero), for the
    /// second-order adjoint that follows.
    pub inputs: Vec<Vec<f64>>,
}

/// How the engine steps a field that lies on a cycle: the initial state, the steps (or the
/// rule that chooses them) and how the reverse sweep keeps states.
#[derive(Clone, Debug, PartialEq)]
pub struct CyclePlan {
    /// The initial state (output port 0's layout).
    pub initial: Vec<f64>,
    /// Every step; empty when `adaptive` is still to choose them.
    pub steps: Vec<CycleStep>,
    /// Step doubling on a θ-scheme, when the steps are not chosen yet.
    pub adaptive: Option<CycleAdapt>,
    /// How the reverse sweep keeps the cycle's states (all, or binomial checkpoints).
    pub memory: gradfem_solvers::checkpoint::Checkpointing,
}

/// One step of a [`CyclePlan`]: M (a₀uᵏ⁺¹ + a₁uᵏ + a₂uᵏ⁻¹)/(θΔt) + R(uᵏ⁺¹) + (1 − θ)/θ R(uᵏ).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CycleStep {
    /// Δt.
    pub dt: f64,
    /// (a₀, a₁, a₂).
    pub a: [f64; 3],
    /// θ ∈ [½, 1] (1 for implicit Euler and BDF2).
    pub theta: f64,
}

/// Step doubling for a field on a cycle: a step of Δt against two of Δt/2 from the same state,
/// the difference over 2^order − 1 (max norm over the state) as the local error estimate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CycleAdapt {
    /// The end time.
    pub end_time: f64,
    /// The largest accepted error estimate.
    pub tolerance: f64,
    /// The first step tried.
    pub dt_initial: f64,
    /// The smallest step (accepted whatever its error).
    pub dt_min: f64,
    /// The largest step.
    pub dt_max: f64,
    /// θ of the scheme.
    pub theta: f64,
}

/// What choosing adaptive steps did: accepted step pairs, rejected attempts and the largest
/// accepted error estimate.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepChoice {
    /// Accepted step pairs (each two steps of the run).
    pub accepted: usize,
    /// Rejected attempts.
    pub rejected: usize,
    /// Largest error estimate of an accepted pair.
    pub max_error: f64,
}

/// A direction of the second-order products: δp, with the tangents it gives the field's state
/// and inputs.
#[derive(Clone, Copy)]
pub struct Direction<'a> {
    /// δp, shaped like the registry's gradient.
    pub params: &'a Gradient,
    /// δu over the state (output port 0's layout), prescribed entries included.
    pub state: &'a [f64],
    /// δx per input port (an empty vector: zero, or the port is not fed).
    pub inputs: &'a [Vec<f64>],
    /// δX per node, the node coordinates' tangent of the shape parameters (empty: the nodes
    /// hold still).
    pub coordinates: &'a [[f64; 3]],
}

/// Second-order derivatives of a field, for exact Hessian-vector products of a coupled problem
/// by the tangent-linear model and the second-order adjoint (forward over reverse).
///
/// With the Lagrangian L = J − Σ_f λ_fᵀ R_f, the engine carries the tangents (δu, δx, δy) of a
/// parameter direction δp forward through the graph ([`tangent`](Self::tangent),
/// [`residual_jvp`](Self::residual_jvp), [`output_jvp`](Self::output_jvp)), then runs the
/// first-order reverse pass once more with the derivatives of its seeds along the direction:
/// each field's [`objective_hessian`](Self::objective_hessian), its
/// [`second_order_vjp`](Self::second_order_vjp) at the first-order λ, and the
/// [`output_second_order_vjp`](Self::output_second_order_vjp) of its derived outputs at their
/// first-order seeds ȳ. Every product here holds λ and ȳ fixed and differentiates along (δu,
/// δx, δp); the solves reuse the factorizations of the last solve.
pub trait SecondOrder {
    /// δu on the state entries the parameters prescribe (fixed temperatures, terminal
    /// voltages) along `params`; zero elsewhere.
    fn prescribed_tangent(&self, params: &Gradient) -> Vec<f64>;

    /// dR/dε along `dir` on the rows of the field's unknowns (the rows and sign of the system a
    /// monolithic cycle assembles from the field's element kernels).
    fn residual_jvp(&self, dir: &Direction) -> Result<Vec<f64>, RunError>;

    /// The tangent of the state along `params`, with the node coordinates' tangent
    /// `coordinates` (empty: zero) and the input tangents `inputs`: K δu = −dR/dε on the
    /// unknowns, the prescribed entries from the parameters; one solve with the factorization
    /// of the last solve.
    fn tangent(
        &mut self,
        params: &Gradient,
        coordinates: &[[f64; 3]],
        inputs: &[Vec<f64>],
    ) -> Result<Vec<f64>, RunError>;

    /// Whether the products cover directions that move the nodes and the node coordinates'
    /// part of H·δp (shape parameters). Fields that do not are refused before any solve.
    fn covers_shape(&self) -> bool {
        false
    }

    /// The tangent δy of derived output `port` ≥ 1 along `dir`.
    fn output_jvp(&self, port: usize, dir: &Direction) -> Result<Vec<f64>, RunError> {
        let _ = dir;
        Err(RunError::Setup(format!("no second-order products of output port {port}")))
    }

    /// With λ held: −d/dε[(∂R/∂u)ᵀλ] over the state (prescribed entries included) and
    /// −d/dε[(∂R/∂x)ᵀλ] per input port, returned; −d/dε[(∂R/∂p)ᵀλ] added to `rev`.
    fn second_order_vjp(
        &self,
        lambda: &[f64],
        dir: &Direction,
        rev: &mut Reverse,
    ) -> Result<OutputVjp, RunError>;

    /// With ȳ held: d/dε of [`Field::output_vjp`] of derived output `port` (state and input
    /// parts returned, parameter part added to `rev`).
    fn output_second_order_vjp(
        &self,
        port: usize,
        y_bar: &[f64],
        dir: &Direction,
        rev: &mut Reverse,
    ) -> Result<OutputVjp, RunError> {
        let _ = (y_bar, dir, rev);
        Err(RunError::Setup(format!("no second-order products of output port {port}")))
    }

    /// d/dε of [`Field::objective_seed`] along `dir`: the objective terms' Hessian applied to
    /// the direction (the parameter part added to `rev`).
    fn objective_hessian(&self, dir: &Direction, rev: &mut Reverse) -> Result<Seed, RunError>;
}
