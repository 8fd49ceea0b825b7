//! A field stepped in time on a cycle: the temperature of a φ ⇄ T cycle (a resistivity that
//! depends on T), where every step is one coupled Newton on all the cycle's unknowns
//! (monolithic) or block Gauss–Seidel over the cycle's fields, the stepped one solving its rows
//! of Gₖ by Newton on its own unknowns (staggered; its reverse is the transposed iteration per
//! step).
//!
//! Step k (xᵏ = the cycle's states, u the stepped field's, θ ∈ [½, 1], BDF2 with θ = 1):
//!
//! Gₖ = M (a₀uᵏ⁺¹ + a₁uᵏ + a₂uᵏ⁻¹)/(θΔt) + R(xᵏ⁺¹) + (1 − θ)/θ R_u(xᵏ) = 0,
//!
//! the other fields' residuals at xᵏ⁺¹ alone (they hold at every state, the initial one
//! included: state 0 solves them at the initial temperature). The explicit share R_u(xᵏ) is
//! the stepped field's rows of the cycle's residual at the previous state, with the inputs the
//! cycle feeds it there (the Joule heat of φᵏ).
//!
//! Reverse sweep, state n from the last to the first (x̄ⁿ the seeds on state n: the objective's
//! weight there, the downstream fields' adjoints at that state, and what later steps left):
//!
//! - (∂Gₙ/∂xⁿ)ᵀ λ = x̄ⁿ, one transposed solve with the cycle's Jacobian refactored at xⁿ;
//! - p̄ −= λᵀ ∂R/∂p at xⁿ (the cycle's products) and μᵀ (∂M/∂p) w, w = (a₀uⁿ + a₁uⁿ⁻¹ +
//!   a₂uⁿ⁻²)/(θΔt), μ the stepped field's part of λ;
//! - ūⁿ⁻¹ −= a₁ Mμ/(θΔt), ūⁿ⁻² −= a₂ Mμ/(θΔt);
//! - θ < 1: with ν = (1 − θ)/θ μ, x̄ⁿ⁻¹ −= (∂R_u/∂xⁿ⁻¹)ᵀ ν (the field's own tangent and, through
//!   the transfers, the other states it reads) and p̄ −= νᵀ ∂R_u/∂p at xⁿ⁻¹.
//!
//! At state 0 the other fields' adjoints run in reverse order and the initial state's seed
//! goes to the parameters it is made of.
//!
//! Steps are fixed, or chosen once by step doubling (θ-schemes): a step of Δt against two of
//! Δt/2 from the same state; later runs keep them, so the gradient is that of the run with the
//! step sizes held fixed. States are kept all, or recomputed from binomial checkpoints
//! ([`gradfem_solvers::checkpoint`]); a recomputed step starts from the same placed state as
//! the first pass and gives the same bits.

use std::cell::RefCell;
use std::collections::BTreeMap;

use gradfem_solvers::checkpoint::{Checkpointing, reverse_sweep};
use gradfem_solvers::params::Gradient;

use crate::CycleScheme;
use crate::cycle::TimeTerm;
use crate::error::RunError;
use crate::field::{CycleAdapt, CyclePlan, CycleStep, Reverse, SolveMode, StepChoice};
use crate::problem::{Bars, CoupledProblem, GradientTimings, ReverseRecord, add_into};
use crate::time::{TimeHistory, TimeLayout, merge_bars, scale_bars};

mod second_order;

fn setup(msg: impl Into<String>) -> RunError {
    RunError::Setup(msg.into())
}

/// The cycle's fields at one state of the run: (unknowns, state) per field, in the cycle's
/// order.
pub(crate) type CycleState = Vec<(Vec<f64>, Vec<f64>)>;

/// What a forward run on a cycle leaves for its reverse sweep: the first and last states, and
/// every state when the plan keeps them all.
pub(crate) struct CycleRecord {
    initial: CycleState,
    last: CycleState,
    all: Option<Vec<CycleState>>,
}

/// A state of the run and the one before it (BDF2 reads both), as checkpoints hold them.
#[derive(Clone)]
struct Snapshot {
    now: CycleState,
    before: Option<CycleState>,
}

/// The cycle and its stepped field.
struct CycleRun {
    /// The cycle's fields, in stage order.
    members: Vec<usize>,
    /// The stepped field (field index).
    stepped: usize,
    /// Its position among `members`.
    member: usize,
}

/// The reverse sweep's running sums.
struct Sweep<'a> {
    /// dJ/djₙ.
    weights: Vec<f64>,
    /// Seeds later steps left on earlier states: state n → per member (state layout).
    pending: BTreeMap<usize, Vec<Vec<f64>>>,
    /// Seeds on the fields outside the cycle and the downstream stages (upstream ones).
    outside: Bars,
    grad: &'a mut Gradient,
    timings: &'a mut GradientTimings,
}

impl Sweep<'_> {
    /// Add `seed` (state layout) to member `k`'s pending seed on state `n`.
    fn leave(&mut self, n: usize, k: usize, sizes: &[usize], seed: &[f64], scale: f64) {
        let slot = self
            .pending
            .entry(n)
            .or_insert_with(|| sizes.iter().map(|&len| vec![0.0; len]).collect());
        for (p, s) in slot[k].iter_mut().zip(seed) {
            *p += scale * s;
        }
    }
}

/// The time terms of `step` from the state `now` (and `before`, BDF2), with the explicit
/// share `explicit` (θ < 1).
fn time_term(
    step: CycleStep,
    member: usize,
    now: &CycleState,
    before: Option<&CycleState>,
    explicit: Option<Vec<f64>>,
) -> TimeTerm {
    let scale = 1.0 / (step.theta * step.dt);
    let [a0, a1, a2] = step.a;
    let uk = &now[member].1;
    let history = match before {
        Some(b) if a2 != 0.0 => {
            uk.iter().zip(&b[member].1).map(|(x, y)| (a1 * x + a2 * y) * scale).collect()
        }
        _ => uk.iter().map(|x| a1 * x * scale).collect(),
    };
    TimeTerm { member, c0: a0 * scale, history, explicit }
}

/// (a₀xⁿ + a₁xⁿ⁻¹ + a₂xⁿ⁻²)/(θΔt) of `step` over a state (`now`, `prev`, and `older` for
/// BDF2), zero where `free` (when given) is zero: the prescribed entries, where the couplings
/// cancel (a₀ + a₁ + a₂ = 0).
fn step_rate(
    step: CycleStep,
    now: &[f64],
    prev: &[f64],
    older: Option<&[f64]>,
    free: Option<&[f64]>,
) -> Vec<f64> {
    let [a0, a1, a2] = step.a;
    let scale = 1.0 / (step.theta * step.dt);
    (0..now.len())
        .map(|i| {
            if free.is_some_and(|f| f[i] == 0.0) {
                return 0.0;
            }
            let o = match older {
                Some(o) if a2 != 0.0 => a2 * o[i],
                _ => 0.0,
            };
            (a0 * now[i] + a1 * prev[i] + o) * scale
        })
        .collect()
}

impl CoupledProblem {
    /// 1 at the stepped field `d`'s free state entries, 0 at its prescribed ones.
    fn stepped_free_entries(&self, d: usize) -> Vec<f64> {
        let f = &self.fields()[d];
        let kern = f.cell_kernels().expect("a field stepped on a cycle has its element form");
        kern.lambda_from_unknowns(&vec![1.0; f.cell_unknowns().len()])
    }

    fn cycle_run(&self, layout: &TimeLayout) -> CycleRun {
        let members = layout.stage.clone();
        let member = members.iter().position(|&i| i == layout.dynamic).expect("on its cycle");
        CycleRun { members, stepped: layout.dynamic, member }
    }

    fn cycle_plan_of(&self, run: &CycleRun) -> Result<CyclePlan, RunError> {
        self.fields()[run.stepped].dynamic().expect("stepped").cycle_plan()
    }

    /// The cycle's fields as they are placed now.
    fn cycle_state(&self, members: &[usize]) -> CycleState {
        members
            .iter()
            .map(|&i| {
                let f = &self.fields()[i];
                (f.cell_unknowns(), f.state().map(<[f64]>::to_vec).unwrap_or_default())
            })
            .collect()
    }

    /// Place a stored state of the cycle's fields and refresh the inputs they feed each other.
    fn place_cycle(&mut self, members: &[usize], states: &CycleState) -> Result<(), RunError> {
        for (&i, (u, _)) in members.iter().zip(states) {
            self.fields_mut()[i].place_unknowns(u);
        }
        for pass_states in [true, false] {
            for k in 0..self.transfers().len() {
                let t = &self.transfers()[k];
                if members.contains(&t.from)
                    && members.contains(&t.to)
                    && (t.from_port == 0) == pass_states
                {
                    self.feed_transfer(k)?;
                }
            }
        }
        Ok(())
    }

    /// State 0: the stepped field at `initial`, the cycle's other fields solved at it.
    fn cycle_initial_state(
        &mut self,
        run: &CycleRun,
        initial: &[f64],
    ) -> Result<CycleState, RunError> {
        self.fields_mut()[run.stepped].dynamic_mut().expect("stepped").set_cycle_trajectory(
            vec![0.0],
            vec![initial.to_vec()],
            0,
        )?;
        for &i in run.members.iter().filter(|&&i| i != run.stepped) {
            self.feed(i)?;
            self.fields_mut()[i].solve(SolveMode::InCycle)?;
        }
        Ok(self.cycle_state(&run.members))
    }

    /// One step from `now` (and `before`, BDF2) at time `t`, monolithic or staggered as the
    /// cycle is solved; returns the new state and the Newton iterations.
    fn cycle_step(
        &mut self,
        run: &CycleRun,
        step: CycleStep,
        now: &CycleState,
        before: Option<&CycleState>,
        t: f64,
    ) -> Result<(CycleState, usize), RunError> {
        match self.cycle.scheme {
            CycleScheme::Monolithic => self.cycle_step_monolithic(run, step, now, before, t),
            CycleScheme::Staggered => self.cycle_step_staggered(run, step, now, before, t),
        }
    }

    /// The time terms of `step` from the placed state `now` (and `before`, BDF2) for the
    /// system of `members` (the whole cycle, or the stepped field alone), the stepped field
    /// being its member `member`; the explicit share (θ < 1) from those rows at `now`.
    fn step_time_term(
        &mut self,
        members: &[usize],
        member: usize,
        run: &CycleRun,
        step: CycleStep,
        now: &CycleState,
        before: Option<&CycleState>,
    ) -> Result<TimeTerm, RunError> {
        let explicit = if step.theta < 1.0 {
            let c = (1.0 - step.theta) / step.theta;
            let r = self.monolithic_residual_rows(members, member)?;
            Some(r.into_iter().map(|v| c * v).collect())
        } else {
            None
        };
        let mut term = time_term(step, run.member, now, before, explicit);
        term.member = member;
        Ok(term)
    }

    /// A step solved staggered: block Gauss–Seidel over the cycle's fields in stage order, the
    /// stepped field solving its rows of Gₖ (time terms included, the other fields' outputs
    /// held) by Newton on its own unknowns, the others their steady residuals, until the
    /// relative change of every state is below the cycle's tolerance; then the fields before
    /// the last once more at the converged inputs, so the state is the last sweep's.
    fn cycle_step_staggered(
        &mut self,
        run: &CycleRun,
        step: CycleStep,
        now: &CycleState,
        before: Option<&CycleState>,
        t: f64,
    ) -> Result<(CycleState, usize), RunError> {
        self.place_cycle(&run.members, now)?;
        let term = self.step_time_term(&[run.stepped], 0, run, step, now, before)?;
        let at = |e: RunError| {
            setup(format!("time step to t = {:.6e} s (Δt = {:.3e} s): {e}", t + step.dt, step.dt))
        };
        let mut newton_iterations = 0;
        let mut solve_member = |p: &mut Self, i: usize| -> Result<(), RunError> {
            p.feed(i)?;
            if i == run.stepped {
                newton_iterations += p.monolithic_newton(&[i], Some(&term))?.iterations;
                Ok(())
            } else {
                p.fields_mut()[i].solve(SolveMode::InCycle)
            }
        };
        let sweeps = self.gauss_seidel_sweeps(
            &run.members,
            |sweep| {
                (
                    "time stepping".into(),
                    format!("step to t = {:.6e} s, sweep {sweep}", t + step.dt),
                )
            },
            |p, _, i| {
                solve_member(p, i).map_err(at)?;
                Ok(p.fields()[i].state().map(<[f64]>::to_vec).unwrap_or_default())
            },
        )?;
        if sweeps.converged {
            // The fields before the last once more at the converged inputs.
            let (_, head) = run.members.split_last().expect("a cycle has fields");
            for &i in head {
                solve_member(self, i).map_err(at)?;
            }
            return Ok((self.cycle_state(&run.members), newton_iterations));
        }
        let last_change = sweeps.history.last().copied().unwrap_or(f64::NAN);
        let names: Vec<&str> = run.members.iter().map(|&i| self.fields()[i].name()).collect();
        Err(setup(format!(
            "time step to t = {:.6e} s (Δt = {:.3e} s): the {} staggered iteration did not converge in {} sweeps (last relative change {last_change:.3e}, tolerance {:.1e}); a smaller step or [coupling] scheme = \"monolithic\" may help",
            t + step.dt,
            step.dt,
            names.join("-"),
            self.cycle.max_iterations,
            self.cycle.tol
        )))
    }

    /// The adjoint of a step solved staggered at the placed state (module docs): the other
    /// fields solved again there (their factorizations then belong to it), the stepped
    /// field's step Jacobian factored there, and the transposed block Gauss–Seidel iteration
    /// for the seeds in `bars`; by field index.
    fn staggered_step_adjoint(
        &mut self,
        run: &CycleRun,
        term: &TimeTerm,
        bars: &Bars,
    ) -> Result<Vec<Option<Vec<f64>>>, RunError> {
        let (members, d) = (&run.members[..], run.stepped);
        for &i in members.iter().filter(|&&i| i != d) {
            self.feed(i)?;
            self.fields_mut()[i].solve(SolveMode::InCycle)?;
        }
        self.feed(d)?;
        self.monolithic_factor_placed(&[d], Some(term))?;
        Ok(self.transposed_gauss_seidel(members, bars, Some(d))?.0)
    }

    /// A step solved monolithically: the coupled Newton with the step's time terms.
    fn cycle_step_monolithic(
        &mut self,
        run: &CycleRun,
        step: CycleStep,
        now: &CycleState,
        before: Option<&CycleState>,
        t: f64,
    ) -> Result<(CycleState, usize), RunError> {
        self.place_cycle(&run.members, now)?;
        let term = self.step_time_term(&run.members, run.member, run, step, now, before)?;
        let info = self.monolithic_newton(&run.members, Some(&term)).map_err(|e| {
            setup(format!("time step to t = {:.6e} s (Δt = {:.3e} s): {e}", t + step.dt, step.dt))
        })?;
        Ok((self.cycle_state(&run.members), info.iterations))
    }

    /// Choose the steps of an adaptive plan by step doubling from `x0` and keep them in the
    /// stepped field.
    fn choose_cycle_steps(
        &mut self,
        run: &CycleRun,
        rule: &CycleAdapt,
        x0: &CycleState,
    ) -> Result<(), RunError> {
        for (what, v) in [
            ("end_time", rule.end_time),
            ("tolerance", rule.tolerance),
            ("dt_initial", rule.dt_initial),
            ("dt_min", rule.dt_min),
            ("dt_max", rule.dt_max),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(setup(format!(
                    "[transient.adaptive] {what} must be finite and > 0, not {v}"
                )));
            }
        }
        let order = if rule.theta == 0.5 { 2 } else { 1 };
        let denom = f64::from((1u32 << order) - 1);
        let mut choice = StepChoice::default();
        let mut x = x0.clone();
        let mut t = 0.0;
        let mut dt = rule.dt_initial.clamp(rule.dt_min, rule.dt_max);
        let mut steps = Vec::new();
        while t < rule.end_time * (1.0 - 1e-12) {
            gradfem_solvers::interrupt::check("time stepping", || format!("t = {t:.6e} s"))?;
            let h = dt.min(rule.end_time - t);
            let full = CycleStep { dt: h, a: [1.0, -1.0, 0.0], theta: rule.theta };
            let half = CycleStep { dt: 0.5 * h, ..full };
            let (big, _) = self.cycle_step(run, full, &x, None, t)?;
            let (mid, _) = self.cycle_step(run, half, &x, None, t)?;
            let (two, _) = self.cycle_step(run, half, &mid, None, t + 0.5 * h)?;
            let err = two[run.member]
                .1
                .iter()
                .zip(&big[run.member].1)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max)
                / denom;
            let accept = err <= rule.tolerance || 0.5 * h <= rule.dt_min;
            if accept {
                x = two;
                t += h;
                steps.extend([0.5 * h, 0.5 * h]);
                choice.accepted += 1;
                choice.max_error = choice.max_error.max(err);
            } else {
                choice.rejected += 1;
            }
            let factor = if err == 0.0 {
                2.0
            } else {
                (0.9 * (rule.tolerance / err).powf(1.0 / f64::from(order + 1))).clamp(0.2, 2.0)
            };
            dt = (h * factor).clamp(rule.dt_min, rule.dt_max);
            tracing::trace!(t, h, err, accept, "adaptive step on a cycle");
        }
        tracing::debug!(?choice, steps = steps.len(), "adaptive steps chosen on a cycle");
        self.fields_mut()[run.stepped]
            .dynamic_mut()
            .expect("stepped")
            .set_cycle_steps(steps, choice)
    }

    /// The forward run in time of a stepped field on a cycle (module docs).
    pub(crate) fn solve_cycle_in_time(&mut self, layout: &TimeLayout) -> Result<(), RunError> {
        let run = self.cycle_run(layout);
        let mut plan = self.cycle_plan_of(&run)?;
        let x0 = self.cycle_initial_state(&run, &plan.initial)?;
        if let Some(rule) = plan.adaptive {
            self.choose_cycle_steps(&run, &rule, &x0)?;
            plan = self.cycle_plan_of(&run)?;
        }
        let keep_all = matches!(plan.memory, Checkpointing::StoreAll);
        let mut all: Vec<CycleState> = Vec::new();
        let mut history = TimeHistory {
            fields: layout.downstream.iter().flatten().copied().collect(),
            ..Default::default()
        };
        let mut newton_iterations = 0;
        let mut times = vec![0.0];
        let mut temperatures = Vec::with_capacity(plan.steps.len() + 1);
        let mut now = x0.clone();
        let mut before: Option<CycleState> = None;
        for k in 0..=plan.steps.len() {
            gradfem_solvers::interrupt::check("time stepping", || format!("step {k}"))?;
            if k == 0 {
                self.place_cycle(&run.members, &now)?;
            } else {
                let step = plan.steps[k - 1];
                let (next, iterations) =
                    self.cycle_step(&run, step, &now, before.as_ref(), times[k - 1])?;
                newton_iterations += iterations;
                times.push(times[k - 1] + step.dt);
                before = Some(std::mem::replace(&mut now, next));
            }
            temperatures.push(now[run.member].1.clone());
            if keep_all {
                all.push(now.clone());
            }
            // The other fields of the cycle and the downstream fields at this state.
            let mut value = 0.0;
            for &i in run.members.iter().filter(|&&i| i != run.stepped) {
                value += self.fields()[i].objective()?.0;
            }
            self.solve_stages(&layout.downstream)?;
            let mut down = Vec::new();
            for &f in &history.fields {
                value += self.fields()[f].objective()?.0;
                down.push(self.fields()[f].state().map(<[f64]>::to_vec).unwrap_or_default());
            }
            history.objective.push(value);
            history.states.push(down);
        }
        // The last state stays placed, the cycle's fields solved there and the stepped one
        // holding the run.
        self.place_cycle(&run.members, &now)?;
        for &i in run.members.iter().filter(|&&i| i != run.stepped) {
            self.fields_mut()[i].finish_cycle_solve(&Default::default())?;
        }
        self.fields_mut()[run.stepped].dynamic_mut().expect("stepped").set_cycle_trajectory(
            times,
            temperatures,
            newton_iterations,
        )?;
        self.history = Some(history);
        self.cycle_states =
            Some(CycleRecord { initial: x0, last: now, all: keep_all.then_some(all) });
        Ok(())
    }

    /// J and dJ/dp of a run in time whose stepped field lies on a cycle: the reverse sweep
    /// over the steps (module docs), from the stored states or recomputed from checkpoints.
    pub(crate) fn gradient_cycle_in_time(
        &mut self,
        layout: &TimeLayout,
        grad: &mut Gradient,
        timings: &mut GradientTimings,
    ) -> Result<f64, RunError> {
        let (j, weights) = self.time_objective()?;
        let run = self.cycle_run(layout);
        let plan = self.cycle_plan_of(&run)?;
        let record = self.cycle_states.take().ok_or_else(|| setup("transient: solve first"))?;
        let outside = self.zero_bars();
        let mut sweep = Sweep { weights, pending: BTreeMap::new(), outside, grad, timings };
        let n_steps = plan.steps.len();
        let result = match (&record.all, plan.memory) {
            (Some(all), _) => {
                let mut r = Ok(());
                for n in (0..=n_steps).rev() {
                    let prev = n.checked_sub(1).map(|m| &all[m]);
                    let older = n.checked_sub(2).map(|m| &all[m]);
                    r = self.reverse_cycle_state(
                        &run, layout, &plan, n, &all[n], prev, older, &mut sweep,
                    );
                    if r.is_err() {
                        break;
                    }
                }
                r.map(|()| (0, all.len()))
            }
            (None, memory) => {
                self.checkpointed_cycle_sweep(&run, layout, &plan, memory, &record, &mut sweep)
            }
        };
        self.cycle_states = Some(record);
        let (recomputed, peak) = result?;
        self.fields_mut()[run.stepped]
            .dynamic_mut()
            .expect("stepped")
            .set_cycle_sweep_stats(recomputed, peak);
        let Sweep { weights, mut outside, grad, timings, .. } = sweep;
        // Leave the last state placed, the downstream fields solved there.
        self.restore_last_cycle_state(&run, layout)?;
        // The time-independent fields: their own terms weigh Σₙ wₙ; their adjoint runs once.
        let still_weight: f64 = weights.iter().sum();
        let mut g_still = Gradient::zeros(self.registry());
        let mut still = self.zero_bars();
        for &i in layout.before.iter().chain(&layout.after).flatten() {
            self.seed_field(i, &mut still, &mut g_still)?;
        }
        scale_bars(&mut still, still_weight);
        merge_bars(&mut outside, &still);
        grad.add_scaled(still_weight, &g_still);
        let once: Vec<Vec<usize>> = layout.before.iter().chain(&layout.after).cloned().collect();
        self.reverse_stage_list(&once, &mut outside, grad, timings)?;
        Ok(j)
    }

    /// The reverse sweep from binomial checkpoints: the steps recomputed as the sweep needs
    /// them. Returns (recomputed steps, most states held).
    fn checkpointed_cycle_sweep(
        &mut self,
        run: &CycleRun,
        layout: &TimeLayout,
        plan: &CyclePlan,
        memory: Checkpointing,
        record: &CycleRecord,
        sweep: &mut Sweep,
    ) -> Result<(usize, usize), RunError> {
        let n_steps = plan.steps.len();
        let bdf = plan.steps.iter().any(|s| s.a[2] != 0.0);
        let start = Snapshot { now: record.initial.clone(), before: None };
        let times: Vec<f64> = std::iter::once(0.0)
            .chain(plan.steps.iter().scan(0.0, |t, s| {
                *t += s.dt;
                Some(*t)
            }))
            .collect();
        let shared = RefCell::new((&mut *self, &mut *sweep));
        let stats = reverse_sweep(
            n_steps,
            &start,
            memory,
            |k, s: &Snapshot| {
                let mut guard = shared.borrow_mut();
                let (problem, _) = &mut *guard;
                gradfem_solvers::interrupt::check("time stepping", || format!("step {k}"))?;
                let (next, _) =
                    problem.cycle_step(run, plan.steps[k], &s.now, s.before.as_ref(), times[k])?;
                Ok(Snapshot { before: bdf.then(|| s.now.clone()), now: next })
            },
            |k, sk: &Snapshot, sk1: &Snapshot| {
                let mut guard = shared.borrow_mut();
                let (problem, sweep) = &mut *guard;
                problem.reverse_cycle_state(
                    run,
                    layout,
                    plan,
                    k + 1,
                    &sk1.now,
                    Some(&sk.now),
                    sk.before.as_ref(),
                    sweep,
                )
            },
        )?;
        let (problem, sweep) = shared.into_inner();
        problem.reverse_cycle_state(run, layout, plan, 0, &record.initial, None, None, sweep)?;
        Ok((stats.forward_steps.saturating_sub(n_steps), stats.max_stored_states))
    }

    /// Place the run's last state again (the cycle's fields solved there, the stepped field
    /// showing it, the downstream fields solved at it).
    fn restore_last_cycle_state(
        &mut self,
        run: &CycleRun,
        layout: &TimeLayout,
    ) -> Result<(), RunError> {
        let d = run.stepped;
        let last = self.cycle_states.as_ref().map(|r| r.last.clone());
        let Some(last) = last else { return Ok(()) };
        self.place_cycle(&run.members, &last)?;
        for &i in run.members.iter().filter(|&&i| i != d) {
            self.fields_mut()[i].finish_cycle_solve(&Default::default())?;
        }
        let n = self.fields()[d].dynamic().expect("stepped").trajectory().map_or(0, |t| t.1.len());
        if let Some(n) = n.checked_sub(1) {
            self.fields_mut()[d].dynamic_mut().expect("stepped").show_state(n)?;
        }
        self.solve_stages(&layout.downstream)
    }

    /// The reverse sweep's work at state n (module docs): its seeds, and for n ≥ 1 the adjoint
    /// of the step that made it; for n = 0 the other fields' adjoints at the initial state.
    #[allow(clippy::too_many_arguments)]
    fn reverse_cycle_state(
        &mut self,
        run: &CycleRun,
        layout: &TimeLayout,
        plan: &CyclePlan,
        n: usize,
        now: &CycleState,
        prev: Option<&CycleState>,
        older: Option<&CycleState>,
        sweep: &mut Sweep,
    ) -> Result<(), RunError> {
        gradfem_solvers::interrupt::check("time stepping adjoint", || format!("state {n}"))?;
        let (members, d, member) = (&run.members[..], run.stepped, run.member);
        let sizes: Vec<usize> = now.iter().map(|(_, s)| s.len()).collect();
        let downstream: Vec<usize> = layout.downstream.iter().flatten().copied().collect();
        self.place_cycle(members, now)?;
        let mut local = self.zero_bars();
        let w = sweep.weights[n];
        if w != 0.0 {
            // The cycle's own terms at state n (the stepped field's among them) and the
            // downstream fields' adjoints at that state.
            let mut g = Gradient::zeros(self.registry());
            for &i in members {
                self.seed_field(i, &mut local, &mut g)?;
            }
            if !downstream.is_empty() {
                self.solve_stages(&layout.downstream)?;
                for &f in &downstream {
                    self.seed_field(f, &mut local, &mut g)?;
                }
                self.reverse_stage_list(&layout.downstream, &mut local, &mut g, sweep.timings)?;
            }
            scale_bars(&mut local, w);
            sweep.grad.add_scaled(w, &g);
        }
        if let Some(seeds) = sweep.pending.remove(&n) {
            for (k, &i) in members.iter().enumerate() {
                add_into(&mut local.state[i], &seeds[k]);
            }
        }
        let grad = &mut *sweep.grad;
        let ts = std::time::Instant::now();
        if let Some(prev) = prev {
            let step = plan.steps[n - 1];
            let mut term = time_term(step, member, prev, older, None);
            self.absorb_internal_inputs(members, &mut local, grad)?;
            let lambda = match self.cycle.scheme {
                CycleScheme::Monolithic => {
                    self.monolithic_factor_placed(members, Some(&term))?;
                    self.monolithic_transposed_solve(members, &local)?
                }
                CycleScheme::Staggered => {
                    term.member = 0;
                    self.staggered_step_adjoint(run, &term, &local)?
                }
            };
            sweep.timings.adjoint_solve_s += ts.elapsed().as_secs_f64();
            let ta = std::time::Instant::now();
            self.finish_cycle_adjoint(members, &lambda, &mut local, grad)?;
            let mu = lambda[d].as_ref().expect("the stepped field's adjoint");
            // The capacity: −μᵀ(∂M/∂p)w, w = (a₀uⁿ + a₁uⁿ⁻¹ + a₂uⁿ⁻²)/(θΔt) (zero at prescribed
            // entries, where the couplings cancel: a₀ + a₁ + a₂ = 0).
            let [_, a1, a2] = step.a;
            let scale = 1.0 / (step.theta * step.dt);
            let free = self.stepped_free_entries(d);
            let w_cap = step_rate(
                step,
                &now[member].1,
                &prev[member].1,
                older.map(|o| &o[member].1[..]),
                Some(&free),
            );
            let dynamic = self.fields()[d].dynamic().expect("stepped");
            {
                let (registry, shape) = self.parts();
                let mut rev = Reverse { registry, shape, grad: &mut *grad };
                dynamic.capacity_vjp(mu, &w_cap, &mut rev)?;
            }
            // The history: ūⁿ⁻¹ −= a₁Mμ/(θΔt), ūⁿ⁻² −= a₂Mμ/(θΔt).
            let m_mu = dynamic.capacity_product(mu);
            sweep.leave(n - 1, member, &sizes, &m_mu, -a1 * scale);
            if a2 != 0.0 && n >= 2 {
                sweep.leave(n - 2, member, &sizes, &m_mu, -a2 * scale);
            }
            if step.theta < 1.0 {
                let nu: Vec<f64> = mu.iter().map(|v| (1.0 - step.theta) / step.theta * v).collect();
                self.explicit_share_adjoint(run, prev, n - 1, &nu, &sizes, &mut local, sweep)?;
            }
            sweep.timings.accumulate_s += ta.elapsed().as_secs_f64();
        } else {
            // State 0: the other fields of the cycle were solved at the initial state, in
            // order; their adjoints run in reverse, each handing its inputs' seeds back.
            self.absorb_internal_inputs(members, &mut local, grad)?;
            for &i in members.iter().filter(|&&i| i != d) {
                self.feed(i)?;
                self.fields_mut()[i].solve(SolveMode::InCycle)?;
            }
            let others: Vec<usize> = members.iter().copied().filter(|&i| i != d).collect();
            self.initial_state_adjoints(&others, &mut local, grad)?;
            let (registry, shape) = self.parts();
            let mut rev = Reverse { registry, shape, grad: &mut *grad };
            self.fields()[d].dynamic().expect("stepped").initial_vjp(&local.state[d], &mut rev);
            sweep.timings.adjoint_solve_s += ts.elapsed().as_secs_f64();
        }
        // Seeds on fields outside the cycle and the downstream stages go upstream.
        for f in 0..self.fields().len() {
            if members.contains(&f) || downstream.contains(&f) {
                continue;
            }
            add_into(&mut sweep.outside.state[f], &local.state[f]);
            for (p, x) in local.inputs[f].iter().enumerate() {
                sweep.outside.add_input_seed(f, p, x);
            }
        }
        Ok(())
    }

    /// The adjoint of a step's explicit share (1 − θ)/θ R_u(xᵐ) at state m = n − 1 for
    /// ν = (1 − θ)/θ μ: the seeds it leaves on state m (the field's own tangent, and through
    /// the transfers the states it reads), its parameter products, and the seeds of inputs fed
    /// from outside the cycle (into `local`, on their way upstream). Returns what a second-order
    /// pass reads of it: ν and the seeds it put on derived outputs.
    #[allow(clippy::too_many_arguments)]
    fn explicit_share_adjoint(
        &mut self,
        run: &CycleRun,
        state: &CycleState,
        m: usize,
        nu: &[f64],
        sizes: &[usize],
        local: &mut Bars,
        sweep: &mut Sweep,
    ) -> Result<ReverseRecord, RunError> {
        let (members, d) = (&run.members[..], run.stepped);
        self.place_cycle(members, state)?;
        let own = self.own_tangent_transpose(d, nu)?;
        sweep.leave(m, run.member, sizes, &own, -1.0);
        let mut lambda: Vec<Option<Vec<f64>>> = vec![None; self.fields().len()];
        lambda[d] = Some(nu.to_vec());
        let through = {
            let (registry, shape) = self.parts();
            let mut rev = Reverse { registry, shape, grad: &mut *sweep.grad };
            self.cycle_contributions(members, &lambda, Some(&mut rev), None)?
        };
        for (k, &i) in members.iter().enumerate() {
            sweep.leave(m, k, sizes, &through.state[i], 1.0);
        }
        let mut handed = self.zero_bars();
        handed.record = Some(ReverseRecord::new(self.fields().len(), self.transfers().len()));
        let zeros = vec![0.0; nu.len()];
        self.accumulate_and_hand_back(d, nu, &zeros, &mut handed, sweep.grad, members)?;
        // What the second order reads: ν and the derived outputs' seeds it made, inside the
        // cycle and handed out of it (different transfers).
        let mut record = through.record.expect("kept with a parameter pass");
        record.lambda[d] = Some(nu.to_vec());
        let outside = handed.record.take().expect("kept");
        for (slot, y) in record.y_bar.iter_mut().zip(outside.y_bar) {
            if y.is_some() {
                *slot = y;
            }
        }
        // Only fields upstream receive anything (inputs fed from outside the cycle).
        let merge = |into: &mut Vec<f64>, from: &[f64]| {
            if from.iter().any(|v| *v != 0.0) {
                if into.is_empty() {
                    *into = vec![0.0; from.len()];
                }
                add_into(into, from);
            }
        };
        for f in (0..self.fields().len()).filter(|f| !members.contains(f)) {
            merge(&mut local.state[f], &handed.state[f]);
            for (p, x) in handed.inputs[f].iter().enumerate() {
                merge(&mut local.inputs[f][p], x);
            }
        }
        Ok(record)
    }
}
