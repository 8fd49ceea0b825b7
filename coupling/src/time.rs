//! Time-dependent problems: the coupling graph in time, and objectives on the history.
//!
//! One field of the graph is stepped in time ([`Dynamic`](crate::field::Dynamic): implicit
//! Euler, Crank–Nicolson or BDF2, fixed or adaptive steps, with its discrete adjoint and
//! checkpointing). The stages
//! before it that it does not feed are solved once (their inputs do not change in time: an
//! electrical field driven by a voltage step at t = 0); the fields it feeds, directly or not,
//! follow quasi-statically at every state (the mechanical field's displacement at each
//! temperature). When the stepped field lies on a cycle, the engine takes its steps as coupled
//! solves (`time_cycle.rs`).
//!
//! The objective is a function of the history, J = F(j₀ … j_N), of the values jₙ of every
//! field's objective terms at state n ([`TimeRule`]: the final state, a sum, the time integral,
//! the value at a time, a smooth maximum, or a misfit to a measured series); dF/djₙ weighs
//! each state. The reverse pass runs the downstream fields' adjoints at every weighted state,
//! hands their seeds on the stepped field's states to its time adjoint, and sends what that
//! gives its inputs (dJ/dQ of the Joule heat, summed over the steps) to the fields upstream,
//! whose adjoint then runs once.

use gradfem_solvers::params::Gradient;

use crate::error::RunError;
use crate::field::{Reverse, SolveMode, StepInfo};
use crate::problem::{Bars, CoupledProblem, GradientTimings, add_into};

fn setup(msg: impl Into<String>) -> RunError {
    RunError::Setup(msg.into())
}

/// Weights wₙ of a time sum Σₙ wₙ jₙ.
#[derive(Clone, Debug, PartialEq)]
pub enum StepWeights {
    /// Only the final state: w_N = 1.
    Final,
    /// Every state: wₙ = 1.
    EveryStep,
    /// Trapezoidal rule for ∫₀^{t_N} j dt: wₙ = (Δtₙ₋₁ + Δtₙ)/2 (Δt/2 at both ends).
    Trapezoid,
}

impl StepWeights {
    /// wₙ.
    pub fn weight(&self, at: StepInfo) -> f64 {
        match self {
            StepWeights::Final => f64::from(u8::from(at.step == at.n_steps)),
            StepWeights::EveryStep => 1.0,
            StepWeights::Trapezoid => 0.5 * (at.dt_before + at.dt_after),
        }
    }
}

/// How J is made of the objective terms' values jₙ at the states.
#[derive(Clone, Debug, PartialEq)]
pub enum TimeRule {
    /// Σₙ wₙ jₙ with fixed weights: the final state, every state, the trapezoidal integral.
    Weighted(StepWeights),
    /// j(t) at a time t, linear between the states around it.
    At(f64),
    /// The Kreisselmeier–Steinhauser maximum over the states with sharpness ρ:
    /// max ≤ J ≤ max + ln(N + 1)/ρ.
    Max {
        /// Sharpness ρ (1/the terms' unit).
        rho: f64,
    },
    /// ½ Σₖ (j(tₖ) − dₖ)² over measured (tₖ, dₖ), j linear between the states.
    Misfit(Vec<[f64; 2]>),
}

/// The weights (wₙ, wₙ₊₁) that interpolate linearly at `t` between the states at `times`, with
/// the index n; an error outside [t₀, t_N].
fn interpolation(times: &[f64], t: f64, what: &str) -> Result<(usize, f64, f64), RunError> {
    let last = *times.last().expect("the initial state at least");
    let tol = 1e-12 * last.abs().max(f64::MIN_POSITIVE);
    if !(t >= times[0] - tol && t <= last + tol) {
        return Err(setup(format!(
            "[transient] {what}: t = {t} s lies outside the run, 0 … {last} s"
        )));
    }
    if times.len() == 1 {
        return Ok((0, 1.0, 0.0));
    }
    // The step [tₙ, tₙ₊₁] that holds t (the last one for t = t_N).
    let n = times.partition_point(|&x| x <= t).saturating_sub(1).min(times.len() - 2);
    let (a, b) = (times[n], times[n + 1]);
    let s = ((t - a) / (b - a)).clamp(0.0, 1.0);
    Ok((n, 1.0 - s, s))
}

impl TimeRule {
    /// J from the values jₙ at the states at `times`, and dJ/djₙ.
    pub fn value_and_weights(
        &self,
        j: &[f64],
        times: &[f64],
        info: impl Fn(usize) -> StepInfo,
    ) -> Result<(f64, Vec<f64>), RunError> {
        let mut w = vec![0.0; j.len()];
        let value = match self {
            TimeRule::Weighted(sw) => {
                for (n, wn) in w.iter_mut().enumerate() {
                    *wn = sw.weight(info(n));
                }
                j.iter().zip(&w).map(|(a, b)| a * b).sum()
            }
            TimeRule::At(t) => {
                let (n, a, b) = interpolation(times, *t, "objective = \"at\"")?;
                w[n] += a;
                if b != 0.0 {
                    w[n + 1] += b;
                }
                a * j[n] + if b != 0.0 { b * j[n + 1] } else { 0.0 }
            }
            TimeRule::Max { rho } => {
                let m = j.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = j.iter().map(|v| (rho * (v - m)).exp()).collect();
                let sum: f64 = e.iter().sum();
                for (wn, en) in w.iter_mut().zip(&e) {
                    *wn = en / sum;
                }
                m + sum.ln() / rho
            }
            TimeRule::Misfit(data) => {
                let mut total = 0.0;
                for (k, [t, d]) in data.iter().enumerate() {
                    let (n, a, b) =
                        interpolation(times, *t, &format!("measured row {} (time {t} s)", k + 1))?;
                    let jt = a * j[n] + if b != 0.0 { b * j[n + 1] } else { 0.0 };
                    let r = jt - d;
                    total += 0.5 * r * r;
                    w[n] += r * a;
                    if b != 0.0 {
                        w[n + 1] += r * b;
                    }
                }
                total
            }
        };
        Ok((value, w))
    }
}

impl TimeRule {
    /// δwₙ = Σₘ ∂²F/∂jₙ∂jₘ δjₘ: the derivative of the weights of
    /// [`value_and_weights`](Self::value_and_weights) along δj (`dj`), for Hessian-vector
    /// products. Fixed weights and interpolation are linear in j (δw = 0); the smooth maximum
    /// has ∂²F/∂j² = ρ(diag w − w wᵀ); a misfit Σₖ cₖcₖᵀ with cₖ its interpolation weights.
    pub fn weight_tangents(
        &self,
        j: &[f64],
        dj: &[f64],
        times: &[f64],
    ) -> Result<Vec<f64>, RunError> {
        let mut dw = vec![0.0; j.len()];
        match self {
            TimeRule::Weighted(_) | TimeRule::At(_) => {}
            TimeRule::Max { rho } => {
                let m = j.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = j.iter().map(|v| (rho * (v - m)).exp()).collect();
                let sum: f64 = e.iter().sum();
                let w: Vec<f64> = e.iter().map(|v| v / sum).collect();
                let mean: f64 = w.iter().zip(dj).map(|(a, b)| a * b).sum();
                for ((d, wn), djn) in dw.iter_mut().zip(&w).zip(dj) {
                    *d = rho * wn * (djn - mean);
                }
            }
            TimeRule::Misfit(data) => {
                for (k, [t, _]) in data.iter().enumerate() {
                    let (n, a, b) =
                        interpolation(times, *t, &format!("measured row {} (time {t} s)", k + 1))?;
                    let dr = a * dj[n] + if b != 0.0 { b * dj[n + 1] } else { 0.0 };
                    dw[n] += dr * a;
                    if b != 0.0 {
                        dw[n + 1] += dr * b;
                    }
                }
            }
        }
        Ok(dw)
    }
}

impl TimeRule {
    /// For a misfit, the residuals' derivatives δrₖ = aₖ δjₙ + bₖ δjₙ₊₁ along δj (`dj`),
    /// one per measured row (rₖ = j(tₖ) − dₖ, j interpolated between the states at `times`);
    /// `None` for the other rules.
    pub fn misfit_tangents(&self, dj: &[f64], times: &[f64]) -> Result<Option<Vec<f64>>, RunError> {
        let TimeRule::Misfit(data) = self else { return Ok(None) };
        data.iter()
            .enumerate()
            .map(|(k, [t, _])| {
                let (n, a, b) =
                    interpolation(times, *t, &format!("measured row {} (time {t} s)", k + 1))?;
                Ok(a * dj[n] + if b != 0.0 { b * dj[n + 1] } else { 0.0 })
            })
            .collect::<Result<Vec<f64>, RunError>>()
            .map(Some)
    }
}

/// The quasi-static fields downstream of the stepped one at every state of the last run.
#[derive(Clone, Debug, Default)]
pub struct TimeHistory {
    /// The downstream fields (indices), in stage order.
    pub fields: Vec<usize>,
    /// Their objective terms' value at each state.
    pub objective: Vec<f64>,
    /// Their states at each state of the run: `states[n][k]` is field `fields[k]`'s.
    pub states: Vec<Vec<Vec<f64>>>,
}

/// Where the stages lie relative to the stepped field.
pub(crate) struct TimeLayout {
    /// The stepped field.
    pub(crate) dynamic: usize,
    /// The stage the stepped field lies in: itself, or the cycle that holds it.
    pub(crate) stage: Vec<usize>,
    /// Stages solved once, before it.
    pub(crate) before: Vec<Vec<usize>>,
    /// Stages after it that it feeds (solved at every state), in order.
    pub(crate) downstream: Vec<Vec<usize>>,
    /// Stages after it that it does not feed (solved once).
    pub(crate) after: Vec<Vec<usize>>,
}

/// The tangent-linear run of a problem in time along a direction.
struct RunTangents {
    /// The tangents of the stages solved once (and the last state's downstream ones).
    tan: crate::second_order::Tangents,
    /// The stepped field's.
    steps: crate::field::TimeTangents,
    /// δjₙ per state (all terms, or the stepped field's own; see `run_tangents`).
    values: Vec<f64>,
    /// Per state, the downstream fields' adjoints there when they were asked for.
    adjoints: Vec<Option<StateAdjoints>>,
}

/// The downstream fields' first-order adjoints at one state of a run, unweighted: its
/// gradient, what it hands the stepped field and the stages solved once, and the adjoints
/// the second-order pass reuses.
pub(crate) struct StateFirstOrder {
    pub(crate) g1: Gradient,
    pub(crate) first: crate::problem::Bars,
    pub(crate) record: crate::problem::ReverseRecord,
}

/// The downstream fields' adjoints at one state of a run, unweighted: the first-order pass
/// (its gradient and what it hands the stepped field and the stages solved once) and the
/// second-order pass along the direction.
pub(crate) struct StateAdjoints {
    pub(crate) g1: Gradient,
    pub(crate) first: crate::problem::Bars,
    pub(crate) g2: Gradient,
    pub(crate) second: crate::problem::Bars,
}

impl CoupledProblem {
    /// The stepped field and the stages around it.
    pub(crate) fn time_layout(&self) -> Result<TimeLayout, RunError> {
        let dynamic: Vec<usize> =
            (0..self.fields().len()).filter(|&i| self.fields()[i].dynamic().is_some()).collect();
        let [d] = dynamic[..] else {
            return Err(setup(format!(
                "a time-dependent problem needs exactly one field stepped in time; this one has {}",
                dynamic.len()
            )));
        };
        let schedule = self.schedule();
        let pos = schedule.iter().position(|s| s.fields.contains(&d)).expect("scheduled");
        // Fields the stepped one feeds, directly or not.
        let mut fed = vec![false; self.fields().len()];
        for &f in &schedule[pos].fields {
            fed[f] = true;
        }
        for stage in &schedule[pos + 1..] {
            let reached =
                self.transfers().iter().any(|t| fed[t.from] && stage.fields.contains(&t.to));
            if reached {
                for &f in &stage.fields {
                    fed[f] = true;
                }
            }
        }
        let mut layout = TimeLayout {
            dynamic: d,
            stage: schedule[pos].fields.clone(),
            before: schedule[..pos].iter().map(|s| s.fields.clone()).collect(),
            downstream: Vec::new(),
            after: Vec::new(),
        };
        for stage in &schedule[pos + 1..] {
            if fed[stage.fields[0]] {
                layout.downstream.push(stage.fields.clone());
            } else {
                layout.after.push(stage.fields.clone());
            }
        }
        Ok(layout)
    }

    /// Solve the stages `stages` in order (each a field or a cycle).
    pub(crate) fn solve_stages(&mut self, stages: &[Vec<usize>]) -> Result<(), RunError> {
        for stage in stages {
            if stage.len() > 1 {
                let report = match self.cycle.scheme {
                    crate::CycleScheme::Monolithic => self.solve_monolithic(stage)?,
                    crate::CycleScheme::Staggered => self.solve_staggered(stage)?,
                };
                self.cycle_reports.push(report);
            } else {
                self.feed(stage[0])?;
                self.fields_mut()[stage[0]].solve(SolveMode::Alone)?;
            }
        }
        Ok(())
    }

    /// The forward run in time (module docs).
    pub(crate) fn solve_in_time(&mut self) -> Result<(), RunError> {
        self.history = None;
        self.cycle_states = None;
        self.cycle_reports.clear();
        let layout = self.time_layout()?;
        self.solve_stages(&layout.before)?;
        self.solve_stages(&layout.after)?;
        if layout.stage.len() > 1 {
            return self.solve_cycle_in_time(&layout);
        }
        let d = layout.dynamic;
        self.feed(d)?;
        self.fields_mut()[d].dynamic_mut().expect("stepped").simulate()?;
        let n_states =
            self.fields()[d].dynamic().expect("stepped").trajectory().map_or(0, |t| t.1.len());
        let fields: Vec<usize> = layout.downstream.iter().flatten().copied().collect();
        let mut history = TimeHistory { fields: fields.clone(), ..Default::default() };
        // Their matrices stay while the states change their loads: a solve per state forward
        // and an adjoint per state backward on one factorization.
        for &f in &fields {
            self.fields_mut()[f].expect_solves(2 * n_states);
        }
        if !fields.is_empty() {
            for n in 0..n_states {
                gradfem_solvers::interrupt::check("time stepping", || format!("state {n}"))?;
                self.fields_mut()[d].dynamic_mut().expect("stepped").show_state(n)?;
                self.solve_stages(&layout.downstream)?;
                let mut value = 0.0;
                let mut states = Vec::with_capacity(fields.len());
                for &f in &fields {
                    value += self.fields()[f].objective()?.0;
                    states.push(self.fields()[f].state().map(<[f64]>::to_vec).unwrap_or_default());
                }
                history.objective.push(value);
                history.states.push(states);
            }
        }
        // The last state stays shown (and the downstream fields solved there).
        self.history = Some(history);
        Ok(())
    }

    /// Check a time-dependent problem's set-up before anything is solved: one field stepped
    /// in time and, when it lies on a cycle, time settings the engine can step there.
    pub fn check_time_setup(&self) -> Result<(), RunError> {
        let layout = self.time_layout()?;
        if layout.stage.len() > 1 {
            self.fields()[layout.dynamic].dynamic().expect("stepped").cycle_plan()?;
        }
        Ok(())
    }

    /// The history of the downstream fields of the last run in time.
    pub fn time_history(&self) -> Option<&TimeHistory> {
        self.history.as_ref()
    }

    /// The values jₙ of every field's objective terms at every state of the last run in time:
    /// the stepped field's own, the downstream fields' at that state, and the time-independent
    /// fields' (the same at every state).
    pub fn state_values(&self) -> Result<Vec<f64>, RunError> {
        let layout = self.time_layout()?;
        let dynamic = self.fields()[layout.dynamic].dynamic().expect("stepped");
        let mut j = dynamic.state_objective()?;
        let history = self.history.as_ref().ok_or_else(|| setup("transient: solve first"))?;
        for (a, b) in j.iter_mut().zip(&history.objective) {
            *a += b;
        }
        let mut still = 0.0;
        for &i in layout.before.iter().chain(&layout.after).flatten() {
            still += self.fields()[i].objective()?.0;
        }
        if still != 0.0 {
            j.iter_mut().for_each(|v| *v += still);
        }
        Ok(j)
    }

    /// J = F(j₀ … j_N) of the time rule, and dJ/djₙ.
    pub fn time_objective(&self) -> Result<(f64, Vec<f64>), RunError> {
        let rule = self.time.as_ref().ok_or_else(|| setup("not a time-dependent problem"))?;
        let layout = self.time_layout()?;
        let dynamic = self.fields()[layout.dynamic].dynamic().expect("stepped");
        let (times, _) = dynamic.trajectory().ok_or_else(|| setup("transient: solve first"))?;
        rule.value_and_weights(&self.state_values()?, times, |n| dynamic.step_info(n))
    }

    /// J and dJ/dp of a problem in time (module docs).
    pub(crate) fn gradient_in_time(
        &mut self,
        grad: &mut Gradient,
        timings: &mut GradientTimings,
    ) -> Result<f64, RunError> {
        let layout = self.time_layout()?;
        if layout.stage.len() > 1 {
            return self.gradient_cycle_in_time(&layout, grad, timings);
        }
        let (j, weights) = self.time_objective()?;
        let d = layout.dynamic;
        let n_states = weights.len();
        let downstream: Vec<usize> = layout.downstream.iter().flatten().copied().collect();
        // The downstream fields' adjoints at every weighted state, each a seed on that state;
        // seeds they put on time-independent fields upstream gather in `bars`.
        let mut bars = self.zero_bars();
        let mut seeds: Vec<Option<Vec<f64>>> = vec![None; n_states];
        // The per-state adjoints a Hessian-vector product at this solution reuses.
        let keep = self.second_order_support().is_ok();
        let mut kept: Vec<Option<StateFirstOrder>> = Vec::new();
        let nf = self.fields().len();
        if !downstream.is_empty() {
            for (n, &w) in weights.iter().enumerate() {
                kept.push(None);
                if w == 0.0 {
                    continue;
                }
                self.fields_mut()[d].dynamic_mut().expect("stepped").show_state(n)?;
                self.solve_stages(&layout.downstream)?;
                let state = self.state_first_order(&layout.downstream, &downstream, nf, timings)?;
                let (g, local) = (&state.g1, &state.first);
                grad.add_scaled(w, g);
                seeds[n] = Some(local.state[d].iter().map(|v| w * v).collect());
                for (f, s) in local.state.iter().enumerate() {
                    if f != d && !downstream.contains(&f) && !s.is_empty() {
                        let scaled: Vec<f64> = s.iter().map(|v| w * v).collect();
                        add_into(&mut bars.state[f], &scaled);
                    }
                }
                if keep {
                    kept[n] = Some(state);
                }
            }
            // Leave the last state shown, the downstream fields solved there.
            self.fields_mut()[d].dynamic_mut().expect("stepped").show_state(n_states - 1)?;
            self.solve_stages(&layout.downstream)?;
        }
        // The stepped field's time adjoint; its inputs' seeds go upstream.
        let incoming = self.incoming(d);
        let ports: Vec<usize> = incoming.iter().map(|&(_, p)| p).collect();
        let x_bars = {
            let (registry, shape) = self.parts();
            let registry = registry.clone();
            let shape = shape.clone();
            let mut rev = Reverse { registry: &registry, shape: &shape, grad: &mut *grad };
            let ts = std::time::Instant::now();
            let r = self.fields_mut()[d]
                .dynamic_mut()
                .expect("stepped")
                .time_gradient(&weights, &seeds, &mut rev, &ports)?;
            timings.adjoint_solve_s += ts.elapsed().as_secs_f64();
            r
        };
        // The time-independent fields' own terms count at every state: their weight is Σₙ wₙ.
        let still_weight: f64 = weights.iter().sum();
        let mut g_still = Gradient::zeros(self.registry());
        let mut still = self.zero_bars();
        for &i in layout.before.iter().chain(&layout.after).flatten() {
            self.seed_field(i, &mut still, &mut g_still)?;
        }
        for f in 0..self.fields().len() {
            let scale = |v: &[f64]| v.iter().map(|x| still_weight * x).collect::<Vec<f64>>();
            add_into(&mut bars.state[f], &scale(&still.state[f]));
            if !still.unknowns[f].is_empty() {
                bars.unknowns[f] = scale(&still.unknowns[f]);
            }
            for (p, x) in still.inputs[f].iter().enumerate() {
                bars.add_input_seed(f, p, &scale(x));
            }
        }
        grad.add_scaled(still_weight, &g_still);
        for (k, port) in incoming {
            let x = x_bars.iter().find(|(p, _)| *p == port).map(|(_, x)| x.clone());
            let Some(x) = x else { continue };
            let t = self.transfers()[k].clone();
            let (registry, shape) = self.parts();
            let mut rev = Reverse { registry, shape, grad: &mut *grad };
            self.to_source(&t, &x, &mut bars, Some(&mut rev))?;
        }
        // Upstream (and independent) stages once, in reverse.
        let once: Vec<Vec<usize>> = layout.before.iter().chain(&layout.after).cloned().collect();
        self.reverse_stage_list(&once, &mut bars, grad, timings)?;
        // (After every mutable access of this pass.)
        if keep {
            self.time_adjoints = Some(kept);
        }
        Ok(j)
    }

    /// Whether Hessian-vector products cover this problem in time: a field with second-order
    /// products through its steps feeding the fields downstream by its state, or a field
    /// stepped on a cycle as [`second_order_on_cycle_support`](Self::second_order_on_cycle_support)
    /// says; every other field with steady second-order products (covering node coordinates
    /// when shape parameters are registered).
    /// `Ok` or what is missing.
    pub(crate) fn second_order_in_time_support(&self) -> Result<(), RunError> {
        let layout = self.time_layout()?;
        let field = &self.fields()[layout.dynamic];
        let d = layout.dynamic;
        if layout.stage.len() > 1 {
            self.second_order_on_cycle_support(&layout)?;
        } else {
            if !field.dynamic().is_some_and(|d| d.covers_second_order()) {
                return Err(setup(format!(
                    "the {} field has no second-order products through its time steps yet",
                    field.name()
                )));
            }
            if self.transfers().iter().any(|t| t.from == d && t.from_port != 0) {
                return Err(setup(format!(
                    "Hessian-vector products in time: the {} field feeds a derived output of \
                     its states to another field, which they do not cover yet",
                    field.name()
                )));
            }
        }
        for (i, f) in self.fields().iter().enumerate() {
            if i == d {
                continue;
            }
            let Some(so) = f.second_order_ref() else {
                return Err(setup(format!(
                    "the {} field has no second-order products yet",
                    f.name()
                )));
            };
            if self.shape().is_active() && !so.covers_shape() {
                return Err(setup(format!(
                    "{}: Hessian-vector products with respect to node coordinates (shape \
                     parameters) are not available yet",
                    f.name()
                )));
            }
        }
        Ok(())
    }

    /// What products through the steps of a cycle need (`crate::time_cycle`): the stepped
    /// field's capacity tangent, every cycle field's element-level form (the step Jacobian is
    /// the monolithic one) and no derived output handed out of the cycle.
    fn second_order_on_cycle_support(&self, layout: &TimeLayout) -> Result<(), RunError> {
        let field = &self.fields()[layout.dynamic];
        if !field.dynamic().is_some_and(|d| d.covers_cycle_second_order()) {
            return Err(setup(format!(
                "the {} field has no second-order products through the steps of a cycle",
                field.name()
            )));
        }
        let names: Vec<&str> = layout.stage.iter().map(|&i| self.fields()[i].name()).collect();
        for &i in &layout.stage {
            let f = &self.fields()[i];
            if f.second_order_ref().is_none() {
                return Err(setup(format!(
                    "the {} field has no second-order products yet",
                    f.name()
                )));
            }
            if f.cell_kernels().is_none() {
                return Err(setup(format!(
                    "Hessian-vector products in time on the {} cycle: the {} field has no \
                     element-level form, which the step Jacobian needs",
                    names.join("-"),
                    f.name()
                )));
            }
        }
        let inside = |f: usize| layout.stage.contains(&f);
        if let Some(t) =
            self.transfers().iter().find(|t| inside(t.from) && !inside(t.to) && t.from_port != 0)
        {
            return Err(setup(format!(
                "Hessian-vector products in time: the {} field on the {} cycle feeds a derived \
                 output to the {} field outside it, which they do not cover yet",
                self.fields()[t.from].name(),
                names.join("-"),
                self.fields()[t.to].name()
            )));
        }
        Ok(())
    }

    /// δj of field `f`'s objective terms along the tangents `tan` and the parameter direction
    /// (`dir_flat`, the order of `ParamVector::all`, `pv`): its seeds on its state and inputs
    /// dotted with their tangents, plus its direct partials dotted with the direction.
    pub(crate) fn objective_jvp(
        &self,
        f: usize,
        tan: &crate::second_order::Tangents,
        pv: &gradfem_solvers::params::ParamVector,
        dir_flat: &[f64],
    ) -> Result<f64, RunError> {
        let mut bars = self.zero_bars();
        let mut g = Gradient::zeros(self.registry());
        self.seed_field(f, &mut bars, &mut g)?;
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let mut v = dot(&bars.state[f], &tan.state[f]);
        if !bars.unknowns[f].is_empty() {
            // Terms on the unknowns (terminal currents): their tangent from the state's.
            let du = self.fields()[f].unknowns_tangent(&tan.state[f]).ok_or_else(|| {
                setup(format!(
                    "Hessian-vector products in time: a smooth maximum or a misfit over time \
                     needs the derivative of every objective term's value, and the {} field's \
                     terms on its unknowns do not give it",
                    self.fields()[f].name()
                ))
            })?;
            v += dot(&bars.unknowns[f], &du);
        }
        for (p, x) in bars.inputs[f].iter().enumerate() {
            if let Some(dx) = tan.inputs[f].get(p) {
                v += dot(x, dx);
            }
        }
        v += dot(&g.flatten(pv), dir_flat);
        Ok(v)
    }

    /// The downstream fields' first-order adjoints at the state they are solved at
    /// (unweighted), keeping what the second-order pass reuses.
    pub(crate) fn state_first_order(
        &mut self,
        stages: &[Vec<usize>],
        downstream: &[usize],
        nf: usize,
        timings: &mut GradientTimings,
    ) -> Result<StateFirstOrder, RunError> {
        let mut g1 = Gradient::zeros(self.registry());
        let mut first = self.zero_bars();
        first.record = Some(crate::problem::ReverseRecord::new(nf, self.transfers().len()));
        for &f in downstream {
            self.seed_field(f, &mut first, &mut g1)?;
        }
        self.reverse_stage_list(stages, &mut first, &mut g1, timings)?;
        let record = first.record.take().expect("kept");
        Ok(StateFirstOrder { g1, first, record })
    }

    /// The tangent-linear run along `dir` (module docs of [`crate::second_order`]): the
    /// stages solved once, the stepped field's steps with their input tangents, and the
    /// fields downstream at every state (solved there); with `values`, the derivative δjₙ of
    /// every objective term's value at every state (else the stepped field's own only); at the
    /// states `adjoint_at` marks, the downstream fields' first- and second-order adjoints too
    /// (while they are solved there for their tangents). The downstream fields are left solved
    /// at the state visited last.
    fn run_tangents(
        &mut self,
        layout: &TimeLayout,
        dir: &Gradient,
        values: bool,
        adjoint_at: &[bool],
        mut kept: Vec<Option<StateFirstOrder>>,
        timings: &mut GradientTimings,
    ) -> Result<RunTangents, RunError> {
        let nf = self.fields().len();
        let d = layout.dynamic;
        let once: Vec<Vec<usize>> = layout.before.iter().chain(&layout.after).cloned().collect();
        let still: Vec<usize> = once.iter().flatten().copied().collect();
        let downstream: Vec<usize> = layout.downstream.iter().flatten().copied().collect();
        let mut tan = self.new_tangents(dir);
        self.tangents_over(&once, &mut tan, dir)?;
        self.feed_tangents(&mut tan, d, true);
        self.feed_tangents(&mut tan, d, false);
        let inputs = tan.inputs[d].clone();
        let steps = self.fields_mut()[d].dynamic_mut().expect("stepped").time_tangents(
            dir,
            &tan.coordinates,
            &inputs,
        )?;
        let mut dj = steps.objective.clone();
        let mut d_still = 0.0;
        let pv = gradfem_solvers::params::ParamVector::all(self.registry());
        let dir_flat = if values { dir.flatten(&pv) } else { Vec::new() };
        if values {
            for &f in &still {
                d_still += self.objective_jvp(f, &tan, &pv, &dir_flat)?;
            }
        }
        let mut adjoints: Vec<Option<StateAdjoints>> = Vec::new();
        if !downstream.is_empty() {
            for (n, djn) in dj.iter_mut().enumerate() {
                gradfem_solvers::interrupt::check("tangent-linear run", || format!("state {n}"))?;
                self.fields_mut()[d].dynamic_mut().expect("stepped").show_state(n)?;
                self.solve_stages(&layout.downstream)?;
                tan.state[d] = steps.states[n].clone();
                self.tangents_over(&layout.downstream, &mut tan, dir)?;
                if values {
                    for &f in &downstream {
                        *djn += self.objective_jvp(f, &tan, &pv, &dir_flat)?;
                    }
                }
                if !adjoint_at.get(n).copied().unwrap_or(false) {
                    adjoints.push(None);
                    continue;
                }
                // First order at state n (unweighted; the last gradient's when it kept it),
                // keeping the adjoints; then second order.
                let StateFirstOrder { g1, first, record } = match kept
                    .get_mut(n)
                    .and_then(Option::take)
                {
                    Some(k) => k,
                    None => self.state_first_order(&layout.downstream, &downstream, nf, timings)?,
                };
                let mut g2 = Gradient::zeros(self.registry());
                let mut second =
                    self.second_order_seeds(&downstream, &record, &tan, dir, 1.0, &mut g2)?;
                self.reverse_stage_list(&layout.downstream, &mut second, &mut g2, timings)?;
                adjoints.push(Some(StateAdjoints { g1, first, g2, second }));
            }
        }
        dj.iter_mut().for_each(|v| *v += d_still);
        Ok(RunTangents { tan, steps, values: dj, adjoints })
    }

    /// H·δp of a problem in time (covered as [`second_order_in_time_support`] says): the
    /// tangents of the stages solved once, the stepped field's tangent-linear run, the
    /// tangents of the fields downstream at every state with, in the same visit (they are
    /// solved there once), their first- and second-order adjoints, unweighted; the time rule's
    /// weight derivatives δwₙ; then the downstream products weighted by wₙ and δwₙ (their seeds
    /// on the stepped field's states too), the second-order adjoint of the steps, and that of
    /// the stages solved once, seeded by what the steps hand their inputs.
    ///
    /// [`second_order_in_time_support`]: Self::second_order_in_time_support
    pub(crate) fn hessian_vector_in_time(&mut self, dir: &Gradient) -> Result<Gradient, RunError> {
        let layout = self.time_layout()?;
        if layout.stage.len() > 1 {
            return self.hessian_vector_cycle_in_time(&layout, dir);
        }
        // (Taken before any mutable access forgets them.)
        let kept = self.time_adjoints.take().unwrap_or_default();
        let rule = self.time.clone().ok_or_else(|| setup("not a time-dependent problem"))?;
        let d = layout.dynamic;
        let nf = self.fields().len();
        let mut timings = GradientTimings::default();
        let j = self.state_values()?;
        let (times, infos) = {
            let dynamic = self.fields()[d].dynamic().expect("stepped");
            let (times, _) = dynamic.trajectory().ok_or_else(|| setup("transient: solve first"))?;
            let infos: Vec<StepInfo> = (0..times.len()).map(|n| dynamic.step_info(n)).collect();
            (times.to_vec(), infos)
        };
        let n_states = times.len();
        let (_, weights) = rule.value_and_weights(&j, &times, |n| infos[n])?;
        let once: Vec<Vec<usize>> = layout.before.iter().chain(&layout.after).cloned().collect();
        let still: Vec<usize> = once.iter().flatten().copied().collect();
        // 1. Tangents: the stages solved once, the steps, the downstream fields at every state.
        // δjₙ only matters where the weights depend on j (a smooth maximum, a misfit).
        let nonlinear_rule = matches!(rule, TimeRule::Max { .. } | TimeRule::Misfit(_));
        // The downstream fields' adjoints at every state whose weight can be nonzero, taken in
        // the same visit as their tangents (combined with wₙ and δwₙ once these are known).
        let adjoint_at: Vec<bool> = weights.iter().map(|&w| w != 0.0 || nonlinear_rule).collect();
        let RunTangents { tan, steps, values: dj, adjoints } =
            self.run_tangents(&layout, dir, nonlinear_rule, &adjoint_at, kept, &mut timings)?;
        let d_weights = rule.weight_tangents(&j, &dj, &times)?;
        // 2. The downstream fields' products at every weighted state.
        let mut hv = Gradient::zeros(self.registry());
        let mut first = self.zero_bars();
        let mut second = self.zero_bars();
        let mut seeds: Vec<Option<Vec<f64>>> = vec![None; n_states];
        let mut d_seeds: Vec<Option<Vec<f64>>> = vec![None; n_states];
        for (n, adjoint) in adjoints.into_iter().enumerate() {
            let (w, dw) = (weights[n], d_weights[n]);
            let Some(StateAdjoints { g1, first: mut local, g2, second: mut local2 }) = adjoint
            else {
                continue;
            };
            if w == 0.0 && dw == 0.0 {
                continue;
            }
            hv.add_scaled(dw, &g1);
            hv.add_scaled(w, &g2);
            let s1 = std::mem::take(&mut local.state[d]);
            let s2 = std::mem::take(&mut local2.state[d]);
            seeds[n] = Some(s1.iter().map(|v| w * v).collect());
            d_seeds[n] = Some(s1.iter().zip(&s2).map(|(a, b)| dw * a + w * b).collect());
            // What reaches the stages solved once.
            for &f in &still {
                add_scaled_into(&mut first.state[f], w, &local.state[f]);
                add_scaled_into(&mut second.state[f], dw, &local.state[f]);
                add_scaled_into(&mut second.state[f], w, &local2.state[f]);
                for p in 0..first.inputs[f].len() {
                    add_scaled_into(&mut first.inputs[f][p], w, &local.inputs[f][p]);
                    add_scaled_into(&mut second.inputs[f][p], dw, &local.inputs[f][p]);
                    add_scaled_into(&mut second.inputs[f][p], w, &local2.inputs[f][p]);
                }
            }
        }
        // 3. The steps' second-order adjoint; their inputs' seeds go upstream.
        let incoming = self.incoming(d);
        let ports: Vec<usize> = incoming.iter().map(|&(_, p)| p).collect();
        let x_seeds = {
            let (registry, shape) = self.parts();
            let registry = registry.clone();
            let shape = shape.clone();
            let mut rev = Reverse { registry: &registry, shape: &shape, grad: &mut hv };
            self.fields_mut()[d].dynamic_mut().expect("stepped").time_hessian_vector(
                &weights,
                &d_weights,
                &seeds,
                &d_seeds,
                dir,
                &tan.coordinates,
                &steps,
                &mut rev,
                &ports,
            )?
        };
        if still.is_empty() {
            return Ok(hv);
        }
        // 4. The stages solved once: their own terms count at every state (weight Σₙ wₙ).
        let still_weight: f64 = weights.iter().sum();
        let d_still_weight: f64 = d_weights.iter().sum();
        let mut record_bars = first;
        record_bars.record = Some(crate::problem::ReverseRecord::new(nf, self.transfers().len()));
        let mut g_first = Gradient::zeros(self.registry());
        let mut own = self.zero_bars();
        let mut g_own = Gradient::zeros(self.registry());
        for &f in &still {
            self.seed_field(f, &mut own, &mut g_own)?;
        }
        crate::time::merge_scaled_bars(&mut record_bars, &own, still_weight);
        crate::time::merge_scaled_bars(&mut second, &own, d_still_weight);
        hv.add_scaled(d_still_weight, &g_own);
        for (k, port) in incoming {
            // (By reference: the record finds a transfer's seed slot by its address.)
            let t = &self.transfers()[k];
            let (registry, shape) = self.parts();
            if let Some((_, x)) = x_seeds.first.iter().find(|(p, _)| *p == port) {
                let mut rev = Reverse { registry, shape, grad: &mut g_first };
                self.to_source(t, x, &mut record_bars, Some(&mut rev))?;
            }
            if let Some((_, x)) = x_seeds.second.iter().find(|(p, _)| *p == port) {
                let mut rev = Reverse { registry, shape, grad: &mut hv };
                self.to_source(t, x, &mut second, Some(&mut rev))?;
            }
        }
        // First order (for the adjoints), then second order.
        self.reverse_stage_list(&once, &mut record_bars, &mut g_first, &mut timings)?;
        let record = record_bars.record.take().expect("kept");
        let mut seeds2 =
            self.second_order_seeds(&still, &record, &tan, dir, still_weight, &mut hv)?;
        merge_bars(&mut seeds2, &second);
        self.reverse_stage_list(&once, &mut seeds2, &mut hv, &mut timings)?;
        Ok(hv)
    }

    /// The derivatives δjₙ of the objective terms' values at every state along `dir` (flat,
    /// the order of [`ParamVector::all`](gradfem_solvers::params::ParamVector::all)): the
    /// stepped field's tangent-linear run, for the problems Hessian-vector products cover in
    /// time; with the times of the states.
    pub fn state_value_tangents(&mut self, dir: &[f64]) -> Result<(Vec<f64>, Vec<f64>), RunError> {
        self.second_order_support()?;
        if !self.is_solved() {
            self.solve()?;
        }
        let d = crate::second_order::shaped(self.registry(), dir)?;
        let layout = self.time_layout()?;
        if layout.stage.len() > 1 {
            let values = self.cycle_state_value_tangents(&layout, &d)?;
            let field = self.fields()[layout.dynamic].dynamic().expect("stepped");
            let times = field.trajectory().map(|(t, _)| t.to_vec()).unwrap_or_default();
            return Ok((values, times));
        }
        let run =
            self.run_tangents(&layout, &d, true, &[], Vec::new(), &mut GradientTimings::default())?;
        let field = self.fields_mut()[layout.dynamic].dynamic_mut().expect("stepped");
        let times = field.trajectory().map(|(t, _)| t.to_vec()).unwrap_or_default();
        if !layout.downstream.is_empty() {
            // Leave the last state shown, the downstream fields solved there.
            field.show_state(times.len() - 1)?;
            self.solve_stages(&layout.downstream)?;
        }
        Ok((run.values, times))
    }

    /// The transfers into field `d`: (transfer index, the port it feeds).
    fn incoming(&self, d: usize) -> Vec<(usize, usize)> {
        self.transfers()
            .iter()
            .enumerate()
            .filter(|(_, t)| t.to == d)
            .map(|(k, t)| (k, t.to_port))
            .collect()
    }

    /// Add field `f`'s objective seeds into `bars` (its direct partials into `grad`).
    pub(crate) fn seed_field(
        &self,
        f: usize,
        bars: &mut Bars,
        grad: &mut Gradient,
    ) -> Result<(), RunError> {
        let (registry, shape) = self.parts();
        let mut rev = Reverse { registry, shape, grad };
        let seed = self.fields()[f].objective_seed(&mut rev)?;
        add_into(&mut bars.state[f], &seed.state);
        if !seed.unknowns.is_empty() {
            bars.unknowns[f] = seed.unknowns;
        }
        for (p, x) in seed.inputs {
            bars.add_input_seed(f, p, &x);
        }
        Ok(())
    }
}

/// Multiply every seed of `bars` by `w`.
pub(crate) fn scale_bars(bars: &mut Bars, w: f64) {
    for v in bars
        .state
        .iter_mut()
        .chain(bars.unknowns.iter_mut())
        .chain(bars.inputs.iter_mut().flatten())
    {
        v.iter_mut().for_each(|x| *x *= w);
    }
}

/// a += s·b, entry by entry (b empty: nothing).
pub(crate) fn add_scaled_into(a: &mut [f64], s: f64, b: &[f64]) {
    if s != 0.0 {
        a.iter_mut().zip(b).for_each(|(x, y)| *x += s * y);
    }
}

/// a += s·b, seed by seed.
pub(crate) fn merge_scaled_bars(a: &mut Bars, b: &Bars, s: f64) {
    for f in 0..a.state.len() {
        add_scaled_into(&mut a.state[f], s, &b.state[f]);
        if !b.unknowns[f].is_empty() {
            if a.unknowns[f].is_empty() {
                a.unknowns[f] = vec![0.0; b.unknowns[f].len()];
            }
            add_scaled_into(&mut a.unknowns[f], s, &b.unknowns[f]);
        }
        for (x, y) in a.inputs[f].iter_mut().zip(&b.inputs[f]) {
            add_scaled_into(x, s, y);
        }
    }
}

/// a += b, seed by seed.
pub(crate) fn merge_bars(a: &mut Bars, b: &Bars) {
    for f in 0..a.state.len() {
        add_into(&mut a.state[f], &b.state[f]);
        if !b.unknowns[f].is_empty() {
            if a.unknowns[f].is_empty() {
                a.unknowns[f] = b.unknowns[f].clone();
            } else {
                add_into(&mut a.unknowns[f], &b.unknowns[f]);
            }
        }
        for (x, y) in a.inputs[f].iter_mut().zip(&b.inputs[f]) {
            add_into(x, y);
        }
    }
}
