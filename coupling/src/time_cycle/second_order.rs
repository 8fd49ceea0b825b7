//! Hessian-vector products through the steps of a field stepped on a cycle (forward over
//! reverse, as [`crate::second_order`] does for a steady graph).
//!
//! With the step residuals Gₙ of the parent module and L = J − Σₙ λₙᵀ Gₙ, a product along δp
//! takes three passes:
//!
//! 1. **Tangent-linear run**, n = 0 … N: δx⁰ from the initial state's tangent (the cycle's
//!    other fields by their tangent-linear solves at it, in order), then per step one solve
//!    with the step Jacobian Jₙ = ∂Gₙ/∂xⁿ (capacity included) refactored at xⁿ:
//!    Jₙ δUⁿ = −[∂R/∂ε at the prescribed tangents + Ṁ wₙ + M (a₀δuⁿ_D + a₁δuⁿ⁻¹ +
//!    a₂δuⁿ⁻²)/(θΔt) + (1 − θ)/θ dR_u/dε at xⁿ⁻¹], with Ṁ = (∂M/∂p) δp + (∂M/∂X) δX and
//!    wₙ = (a₀uⁿ + a₁uⁿ⁻¹ + a₂uⁿ⁻²)/(θΔt). The fields downstream are solved at every state for
//!    their tangents and, in the same visit, their first- and second-order adjoints; δjₙ gives
//!    the time rule's weight derivatives δwₙ.
//! 2. **Reverse sweep**, n = N … 0, the first-order adjoint λₙ (again, keeping what the second
//!    order reads) and the second-order adjoint λ̇ₙ with the same factorization:
//!    Jₙᵀ λ̇ₙ = δwₙ ∂jₙ/∂xⁿ + wₙ ∂²jₙ[δxⁿ, δp] + (the fields' second-order products at λₙ
//!    along (δxⁿ, δp)) − a₀/(θΔt) Ṁ μₙ + what later steps left; each step then leaves on the
//!    states it reads what the first-order sweep leaves, with λ̇ₙ, plus −a₁,₂/(θΔt) Ṁ μₙ on
//!    uⁿ⁻¹, uⁿ⁻² and, for θ < 1, the second-order products of R_u at xⁿ⁻¹ with
//!    νₙ = (1 − θ)/θ μₙ. H·δp gathers −λ̇ᵀ ∂G/∂p, the products' parameter parts and
//!    −μᵀ (∂M/∂p) δw − μᵀ δ(∂M/∂p) w, with δw the tangent of w.
//! 3. **The stages solved once** (upstream of the cycle): their first- and second-order
//!    adjoints once, seeded by what the sweeps handed them over all states.
//!
//! Both passes solve with the monolithic step Jacobian whatever the cycle's scheme: for a
//! staggered cycle this is the product of the converged steps (the staggered iteration's
//! fixed point, to the cycle's tolerance). A run kept by checkpoints is stepped again once,
//! its states kept for the duration of the product. The capacity's parameters (ρc) enter M
//! linearly; with shape parameters M moves with det J (its coordinate products from the
//! thermal steps' mass kernels, consistent mass only).

use std::collections::BTreeMap;

use gradfem_solvers::params::{Gradient, ParamVector};

use super::{CycleRun, CycleState, Sweep, step_rate, time_term};
use crate::error::RunError;
use crate::field::{CyclePlan, Direction, Reverse, SolveMode};
use crate::problem::{Bars, CoupledProblem, GradientTimings, ReverseRecord, add_into};
use crate::second_order::Tangents;
use crate::time::{
    StateAdjoints, StateFirstOrder, TimeLayout, TimeRule, add_scaled_into, merge_bars,
    merge_scaled_bars,
};

fn setup(msg: impl Into<String>) -> RunError {
    RunError::Setup(msg.into())
}

/// The time rule of a product and what it reads: the values jₙ, their weights wₙ and the
/// times of the states.
#[derive(Clone, Copy)]
struct Rule<'a> {
    rule: &'a TimeRule,
    j: &'a [f64],
    weights: &'a [f64],
    times: &'a [f64],
}

/// The tangent-linear run of a cycle in time along a direction.
struct CycleTangents {
    /// The tangents of the stages solved once.
    base: Tangents,
    /// The tangents at every state (the cycle's fields and those downstream).
    states: Vec<Tangents>,
    /// δjₙ of every objective term's value at every state.
    values: Vec<f64>,
    /// Per state, the downstream fields' adjoints when they were asked for.
    adjoints: Vec<Option<StateAdjoints>>,
}

impl CoupledProblem {
    /// Every state of the last run on the cycle: the kept ones, or the run stepped again from
    /// its initial state (a run kept by checkpoints).
    fn cycle_run_states(
        &mut self,
        run: &CycleRun,
        plan: &CyclePlan,
    ) -> Result<Vec<CycleState>, RunError> {
        let record = self.cycle_states.take().ok_or_else(|| setup("transient: solve first"))?;
        if let Some(all) = &record.all {
            let all = all.clone();
            self.cycle_states = Some(record);
            return Ok(all);
        }
        let mut all = vec![record.initial.clone()];
        let mut t = 0.0;
        let mut result = Ok(());
        for (k, &step) in plan.steps.iter().enumerate() {
            let before = k.checked_sub(1).map(|m| &all[m]);
            match self.cycle_step(run, step, &all[k], before, t) {
                Ok((next, _)) => all.push(next),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
            t += step.dt;
        }
        self.cycle_states = Some(record);
        result.map(|()| all)
    }

    /// The tangent-linear run along `dir` (module docs, pass 1) over the run's `states`; at the
    /// states `adjoint_at` marks, the downstream fields' first- and second-order adjoints
    /// too.
    #[allow(clippy::too_many_arguments)]
    fn cycle_tangent_run(
        &mut self,
        layout: &TimeLayout,
        run: &CycleRun,
        plan: &CyclePlan,
        states: &[CycleState],
        dir: &Gradient,
        adjoint_at: &[bool],
        timings: &mut GradientTimings,
    ) -> Result<CycleTangents, RunError> {
        let nf = self.fields().len();
        let (members, d) = (&run.members[..], run.stepped);
        let once: Vec<Vec<usize>> = layout.before.iter().chain(&layout.after).cloned().collect();
        let still: Vec<usize> = once.iter().flatten().copied().collect();
        let downstream: Vec<usize> = layout.downstream.iter().flatten().copied().collect();
        let mut base = self.new_tangents(dir);
        self.tangents_over(&once, &mut base, dir)?;
        let pv = ParamVector::all(self.registry());
        let dir_flat = dir.flatten(&pv);
        let mut d_still = 0.0;
        for &f in &still {
            d_still += self.objective_jvp(f, &base, &pv, &dir_flat)?;
        }
        let mut tans: Vec<Tangents> = Vec::with_capacity(states.len());
        let mut values = vec![0.0; states.len()];
        let mut adjoints = Vec::with_capacity(states.len());
        for n in 0..states.len() {
            gradfem_solvers::interrupt::check("tangent-linear run", || format!("state {n}"))?;
            let mut tan = base.clone();
            if n == 0 {
                self.place_cycle(members, &states[0])?;
                tan.state[d] = self.fields()[d].dynamic().expect("stepped").initial_tangent(dir)?;
                // The other fields of the cycle solved at the initial state, in order (their
                // factorizations then belong to it), each with its tangent-linear solve.
                for &i in members.iter().filter(|&&i| i != d) {
                    self.feed(i)?;
                    self.fields_mut()[i].solve(SolveMode::InCycle)?;
                    self.feed_tangents(&mut tan, i, true);
                    self.feed_tangents(&mut tan, i, false);
                    let inputs = tan.inputs[i].clone();
                    let so = self.fields_mut()[i].second_order().expect("checked");
                    tan.state[i] = so.tangent(dir, &tan.coordinates, &inputs)?;
                    self.output_tangents(&mut tan, i, dir)?;
                }
                self.feed_cycle_tangents(&mut tan, members, dir)?;
            } else {
                let step = plan.steps[n - 1];
                let prev = &tans[n - 1];
                // The explicit share's tangent at xⁿ⁻¹ (still placed from the last state).
                let explicit = if step.theta < 1.0 {
                    let c = (1.0 - step.theta) / step.theta;
                    let so = self.fields()[d].second_order_ref().expect("checked");
                    let jvp = so.residual_jvp(&Direction {
                        params: dir,
                        state: &prev.state[d],
                        inputs: &prev.inputs[d],
                        coordinates: &prev.coordinates,
                    })?;
                    Some(jvp.into_iter().map(|v| c * v).collect::<Vec<f64>>())
                } else {
                    None
                };
                self.place_cycle(members, &states[n])?;
                let older = n.checked_sub(2).map(|m| &states[m]);
                let term = time_term(step, run.member, &states[n - 1], older, None);
                self.monolithic_factor_placed(members, Some(&term))?;
                for &i in members {
                    tan.state[i] = self.fields()[i]
                        .second_order_ref()
                        .expect("checked")
                        .prescribed_tangent(dir);
                }
                self.feed_cycle_tangents(&mut tan, members, dir)?;
                let older_tan = n.checked_sub(2).map(|m| &tans[m].state[d][..]);
                let time_rows = self.step_time_tangent(
                    run,
                    step,
                    dir,
                    [&states[n][run.member].1, &states[n - 1][run.member].1],
                    older.map(|o| &o[run.member].1[..]),
                    [&tan.state[d], &prev.state[d]],
                    older_tan,
                    &tan.coordinates,
                )?;
                let mut rhs = Vec::new();
                for &i in members {
                    let so = self.fields()[i].second_order_ref().expect("checked");
                    let mut r = so.residual_jvp(&Direction {
                        params: dir,
                        state: &tan.state[i],
                        inputs: &tan.inputs[i],
                        coordinates: &tan.coordinates,
                    })?;
                    if i == d {
                        add_into(&mut r, &time_rows);
                        if let Some(e) = &explicit {
                            add_into(&mut r, e);
                        }
                    }
                    rhs.extend(r.into_iter().map(|v| -v));
                }
                let du = self.monolithic_tangent_solve(members, rhs)?;
                for (&i, du) in members.iter().zip(du) {
                    add_into(&mut tan.state[i], &du);
                }
                self.feed_cycle_tangents(&mut tan, members, dir)?;
            }
            for &i in members {
                values[n] += self.objective_jvp(i, &tan, &pv, &dir_flat)?;
            }
            let mut adjoint = None;
            if !downstream.is_empty() {
                self.solve_stages(&layout.downstream)?;
                self.tangents_over(&layout.downstream, &mut tan, dir)?;
                for &f in &downstream {
                    values[n] += self.objective_jvp(f, &tan, &pv, &dir_flat)?;
                }
                if adjoint_at.get(n).copied().unwrap_or(false) {
                    let StateFirstOrder { g1, first, record } =
                        self.state_first_order(&layout.downstream, &downstream, nf, timings)?;
                    let mut g2 = Gradient::zeros(self.registry());
                    let mut second =
                        self.second_order_seeds(&downstream, &record, &tan, dir, 1.0, &mut g2)?;
                    self.reverse_stage_list(&layout.downstream, &mut second, &mut g2, timings)?;
                    adjoint = Some(StateAdjoints { g1, first, g2, second });
                }
            }
            values[n] += d_still;
            adjoints.push(adjoint);
            tans.push(tan);
        }
        Ok(CycleTangents { base, states: tans, values, adjoints })
    }

    /// The tangent of a step's capacity term on the stepped field's unknowns:
    /// Ṁ wₙ + M (a₀δuⁿ + a₁δuⁿ⁻¹ + a₂δuⁿ⁻²)/(θΔt), from the states `u` = [uⁿ, uⁿ⁻¹] (and
    /// `u_older` = uⁿ⁻², BDF2) and their tangents `du` (δuⁿ: its prescribed entries alone,
    /// the free ones being the solve's).
    #[allow(clippy::too_many_arguments)]
    fn step_time_tangent(
        &self,
        run: &CycleRun,
        step: crate::field::CycleStep,
        dir: &Gradient,
        u: [&[f64]; 2],
        u_older: Option<&[f64]>,
        du: [&[f64]; 2],
        du_older: Option<&[f64]>,
        coordinates: &[[f64; 3]],
    ) -> Result<Vec<f64>, RunError> {
        let d = run.stepped;
        let dynamic = self.fields()[d].dynamic().expect("stepped");
        let mut nodal = dynamic.capacity_product(&step_rate(step, du[0], du[1], du_older, None));
        let w = step_rate(step, u[0], u[1], u_older, None);
        add_into(&mut nodal, &dynamic.capacity_tangent_product(dir, coordinates, &w)?);
        let kern = self.fields()[d].cell_kernels().expect("checked");
        Ok(kern.unknowns_adjoint(&nodal))
    }

    /// H·δp of a run in time whose stepped field lies on a cycle (module docs).
    pub(crate) fn hessian_vector_cycle_in_time(
        &mut self,
        layout: &TimeLayout,
        dir: &Gradient,
    ) -> Result<Gradient, RunError> {
        let rule = self.time.clone().ok_or_else(|| setup("not a time-dependent problem"))?;
        let run = self.cycle_run(layout);
        let plan = self.cycle_plan_of(&run)?;
        let j = self.state_values()?;
        let (times, infos) = {
            let dynamic = self.fields()[run.stepped].dynamic().expect("stepped");
            let (times, _) = dynamic.trajectory().ok_or_else(|| setup("transient: solve first"))?;
            let infos: Vec<_> = (0..times.len()).map(|n| dynamic.step_info(n)).collect();
            (times.to_vec(), infos)
        };
        let (_, weights) = rule.value_and_weights(&j, &times, |n| infos[n])?;
        let states = self.cycle_run_states(&run, &plan)?;
        let mut timings = GradientTimings::default();
        let result = self.cycle_products(
            layout,
            &run,
            &plan,
            &states,
            Rule { rule: &rule, j: &j, weights: &weights, times: &times },
            dir,
            &mut timings,
        );
        // Leave the last state placed, the downstream fields solved there.
        self.restore_last_cycle_state(&run, layout)?;
        result
    }

    /// The derivatives δjₙ of the objective terms' values at every state along `dir` (the
    /// tangent-linear run alone), for a run whose stepped field lies on a cycle.
    pub(crate) fn cycle_state_value_tangents(
        &mut self,
        layout: &TimeLayout,
        dir: &Gradient,
    ) -> Result<Vec<f64>, RunError> {
        let run = self.cycle_run(layout);
        let plan = self.cycle_plan_of(&run)?;
        let states = self.cycle_run_states(&run, &plan)?;
        let mut timings = GradientTimings::default();
        let result = self.cycle_tangent_run(layout, &run, &plan, &states, dir, &[], &mut timings);
        self.restore_last_cycle_state(&run, layout)?;
        Ok(result?.values)
    }

    /// Passes 1–3 of the module docs over the run's `states`.
    #[allow(clippy::too_many_arguments)]
    fn cycle_products(
        &mut self,
        layout: &TimeLayout,
        run: &CycleRun,
        plan: &CyclePlan,
        states: &[CycleState],
        rule: Rule,
        dir: &Gradient,
        timings: &mut GradientTimings,
    ) -> Result<Gradient, RunError> {
        let Rule { rule, j, weights, times } = rule;
        // The downstream fields' adjoints at every state whose weight can be nonzero, taken in
        // the same visit as their tangents.
        let nonlinear_rule = matches!(rule, TimeRule::Max { .. } | TimeRule::Misfit(_));
        let adjoint_at: Vec<bool> = weights.iter().map(|&w| w != 0.0 || nonlinear_rule).collect();
        let CycleTangents { base, states: tans, values, mut adjoints } =
            self.cycle_tangent_run(layout, run, plan, states, dir, &adjoint_at, timings)?;
        let d_weights = rule.weight_tangents(j, &values, times)?;
        let nf = self.fields().len();
        let nt = self.transfers().len();
        let (members, d, member) = (&run.members[..], run.stepped, run.member);
        let downstream: Vec<usize> = layout.downstream.iter().flatten().copied().collect();
        let sizes: Vec<usize> = states[0].iter().map(|(_, s)| s.len()).collect();
        let mut hv = Gradient::zeros(self.registry());
        // The first-order sweep's own gradient is not wanted: its parameter parts go here.
        let mut scratch = Gradient::zeros(self.registry());
        let mut scratch_timings = GradientTimings::default();
        // The seeds of derived outputs of fields outside the cycle that the first-order sweep
        // handed them (over all states), for their second-order products.
        let mut outside_y: Vec<Option<Vec<f64>>> = vec![None; nt];
        let mut first = Sweep {
            weights: weights.to_vec(),
            pending: BTreeMap::new(),
            outside: self.zero_bars(),
            grad: &mut scratch,
            timings: &mut scratch_timings,
        };
        let mut second = Sweep {
            weights: weights.to_vec(),
            pending: BTreeMap::new(),
            outside: self.zero_bars(),
            grad: &mut hv,
            timings: &mut *timings,
        };
        let free = self.stepped_free_entries(d);
        for n in (0..states.len()).rev() {
            gradfem_solvers::interrupt::check("second-order adjoint", || format!("state {n}"))?;
            let tan = &tans[n];
            let (w, dw) = (weights[n], d_weights[n]);
            self.place_cycle(members, &states[n])?;
            let mut local1 = self.zero_bars();
            local1.record = Some(ReverseRecord::new(nf, nt));
            let mut local2 = self.zero_bars();
            // The cycle's own terms at state n: wₙ and δwₙ times their seeds, wₙ times their
            // Hessian along the tangents.
            if w != 0.0 || dw != 0.0 {
                let mut own = self.zero_bars();
                let mut g_own = Gradient::zeros(self.registry());
                for &i in members {
                    self.seed_field(i, &mut own, &mut g_own)?;
                }
                merge_scaled_bars(&mut local1, &own, w);
                merge_scaled_bars(&mut local2, &own, dw);
                second.grad.add_scaled(dw, &g_own);
                if w != 0.0 {
                    let none = ReverseRecord::new(nf, nt);
                    let s = self.second_order_seeds(members, &none, tan, dir, w, second.grad)?;
                    merge_bars(&mut local2, &s);
                }
            }
            // The downstream fields' adjoints at state n.
            if let Some(StateAdjoints { g1, first: f1, g2, second: f2 }) = adjoints[n].take() {
                second.grad.add_scaled(dw, &g1);
                second.grad.add_scaled(w, &g2);
                merge_scaled_bars(&mut local1, &f1, w);
                merge_scaled_bars(&mut local2, &f1, dw);
                merge_scaled_bars(&mut local2, &f2, w);
            }
            if let Some(seeds) = first.pending.remove(&n) {
                for (k, &i) in members.iter().enumerate() {
                    add_into(&mut local1.state[i], &seeds[k]);
                }
            }
            if let Some(seeds) = second.pending.remove(&n) {
                for (k, &i) in members.iter().enumerate() {
                    add_into(&mut local2.state[i], &seeds[k]);
                }
            }
            if n >= 1 {
                let step = plan.steps[n - 1];
                let older = n.checked_sub(2).map(|m| &states[m]);
                let term = time_term(step, member, &states[n - 1], older, None);
                let [a0, a1, a2] = step.a;
                let scale = 1.0 / (step.theta * step.dt);
                // First order, keeping λₙ and the derived outputs' seeds.
                self.absorb_internal_inputs(members, &mut local1, first.grad)?;
                self.monolithic_factor_placed(members, Some(&term))?;
                let lambda = self.monolithic_transposed_solve(members, &local1)?;
                self.finish_cycle_adjoint(members, &lambda, &mut local1, first.grad)?;
                let record = local1.record.take().expect("kept");
                self.keep_outside_seeds(members, &record, &mut outside_y);
                let mu = lambda[d].clone().expect("the stepped field's adjoint");
                // Second order: the products at λₙ along (δxⁿ, δp), −a₀/(θΔt) Ṁ μₙ.
                let s = self.second_order_seeds(members, &record, tan, dir, 0.0, second.grad)?;
                merge_bars(&mut local2, &s);
                let dynamic = self.fields()[d].dynamic().expect("stepped");
                let m_dot_mu = dynamic.capacity_tangent_product(dir, &tan.coordinates, &mu)?;
                add_scaled_into(&mut local2.state[d], -a0 * scale, &m_dot_mu);
                self.absorb_internal_inputs(members, &mut local2, second.grad)?;
                let lambda2 = self.monolithic_transposed_solve(members, &local2)?;
                self.finish_cycle_adjoint(members, &lambda2, &mut local2, second.grad)?;
                let mu2 = lambda2[d].clone().expect("the stepped field's adjoint");
                // The capacity's parameters: −μ̇ᵀ(∂M/∂p)w − μᵀ(∂M/∂p)δw − μᵀ δ(∂M/∂p) w (the
                // last with moving nodes).
                let w_cap = step_rate(
                    step,
                    &states[n][member].1,
                    &states[n - 1][member].1,
                    older.map(|o| &o[member].1[..]),
                    Some(&free),
                );
                let dw_cap = step_rate(
                    step,
                    &tan.state[d],
                    &tans[n - 1].state[d],
                    n.checked_sub(2).map(|m| &tans[m].state[d][..]),
                    Some(&free),
                );
                let dynamic = self.fields()[d].dynamic().expect("stepped");
                {
                    let (registry, shape) = self.parts();
                    let mut rev = Reverse { registry, shape, grad: &mut *second.grad };
                    dynamic.capacity_vjp(&mu2, &w_cap, &mut rev)?;
                    dynamic.capacity_vjp(&mu, &dw_cap, &mut rev)?;
                    dynamic.capacity_second_order_vjp(
                        &mu,
                        &w_cap,
                        dir,
                        &tan.coordinates,
                        &mut rev,
                    )?;
                }
                // The history: ūⁿ⁻¹ −= a₁Mμ/(θΔt) (and δ of it: Mμ̇ + Ṁμ), uⁿ⁻² with a₂.
                let m_mu = dynamic.capacity_product(&mu);
                let mut m_mu2 = dynamic.capacity_product(&mu2);
                add_into(&mut m_mu2, &m_dot_mu);
                first.leave(n - 1, member, &sizes, &m_mu, -a1 * scale);
                second.leave(n - 1, member, &sizes, &m_mu2, -a1 * scale);
                if a2 != 0.0 && n >= 2 {
                    first.leave(n - 2, member, &sizes, &m_mu, -a2 * scale);
                    second.leave(n - 2, member, &sizes, &m_mu2, -a2 * scale);
                }
                if step.theta < 1.0 {
                    let c = (1.0 - step.theta) / step.theta;
                    let nu: Vec<f64> = mu.iter().map(|v| c * v).collect();
                    let nu2: Vec<f64> = mu2.iter().map(|v| c * v).collect();
                    let prev = &states[n - 1];
                    let nu_record = self.explicit_share_adjoint(
                        run,
                        prev,
                        n - 1,
                        &nu,
                        &sizes,
                        &mut local1,
                        &mut first,
                    )?;
                    self.explicit_share_adjoint(
                        run,
                        prev,
                        n - 1,
                        &nu2,
                        &sizes,
                        &mut local2,
                        &mut second,
                    )?;
                    self.explicit_share_second_order(
                        run,
                        &tans[n - 1],
                        n - 1,
                        &nu_record,
                        dir,
                        &sizes,
                        &mut local2,
                        &mut second,
                        &mut outside_y,
                    )?;
                }
            } else {
                // State 0: the other fields of the cycle, solved at the initial state in order;
                // their adjoints in reverse, first and second order.
                let others: Vec<usize> = members.iter().copied().filter(|&i| i != d).collect();
                self.absorb_internal_inputs(members, &mut local1, first.grad)?;
                for &i in &others {
                    self.feed(i)?;
                    self.fields_mut()[i].solve(SolveMode::InCycle)?;
                }
                let lambdas = self.initial_state_adjoints(&others, &mut local1, first.grad)?;
                let mut record = local1.record.take().expect("kept");
                record.lambda = lambdas;
                self.keep_outside_seeds(members, &record, &mut outside_y);
                let s = self.second_order_seeds(&others, &record, tan, dir, 0.0, second.grad)?;
                merge_bars(&mut local2, &s);
                self.absorb_internal_inputs(members, &mut local2, second.grad)?;
                self.initial_state_adjoints(&others, &mut local2, second.grad)?;
                let (registry, shape) = self.parts();
                let mut rev = Reverse { registry, shape, grad: &mut *second.grad };
                self.fields()[d]
                    .dynamic()
                    .expect("stepped")
                    .initial_vjp(&local2.state[d], &mut rev);
            }
            // Seeds on fields outside the cycle and the downstream stages go upstream.
            for f in 0..nf {
                if members.contains(&f) || downstream.contains(&f) {
                    continue;
                }
                for (local, sweep) in [(&local1, &mut first), (&local2, &mut second)] {
                    add_into(&mut sweep.outside.state[f], &local.state[f]);
                    for (p, x) in local.inputs[f].iter().enumerate() {
                        sweep.outside.add_input_seed(f, p, x);
                    }
                }
            }
        }
        let Sweep { outside: outside1, .. } = first;
        let Sweep { outside: outside2, .. } = second;
        // 3. The stages solved once: their own terms count at every state (weight Σₙ wₙ).
        let once: Vec<Vec<usize>> = layout.before.iter().chain(&layout.after).cloned().collect();
        let still: Vec<usize> = once.iter().flatten().copied().collect();
        if still.is_empty() {
            return Ok(hv);
        }
        let still_weight: f64 = weights.iter().sum();
        let d_still_weight: f64 = d_weights.iter().sum();
        let mut own = self.zero_bars();
        let mut g_own = Gradient::zeros(self.registry());
        for &f in &still {
            self.seed_field(f, &mut own, &mut g_own)?;
        }
        let mut record_bars = outside1;
        record_bars.record = Some(ReverseRecord::new(nf, nt));
        merge_scaled_bars(&mut record_bars, &own, still_weight);
        let mut outside2 = outside2;
        merge_scaled_bars(&mut outside2, &own, d_still_weight);
        hv.add_scaled(d_still_weight, &g_own);
        let mut g_first = Gradient::zeros(self.registry());
        self.reverse_stage_list(&once, &mut record_bars, &mut g_first, timings)?;
        let mut record = record_bars.record.take().expect("kept");
        for (acc, y) in record.y_bar.iter_mut().zip(outside_y) {
            if let Some(y) = y {
                match acc {
                    Some(a) => add_into(a, &y),
                    slot => *slot = Some(y),
                }
            }
        }
        let mut seeds2 =
            self.second_order_seeds(&still, &record, &base, dir, still_weight, &mut hv)?;
        merge_bars(&mut seeds2, &outside2);
        self.reverse_stage_list(&once, &mut seeds2, &mut hv, timings)?;
        Ok(hv)
    }

    /// The adjoints at the initial state of the cycle's fields other than the stepped one
    /// (`others`, solved there in order): in reverse order, each its transposed solve for its
    /// seeds in `bars` and its parameter products into `grad`, handing its inputs' seeds back.
    /// Returns the adjoints by field index.
    pub(super) fn initial_state_adjoints(
        &mut self,
        others: &[usize],
        bars: &mut Bars,
        grad: &mut Gradient,
    ) -> Result<Vec<Option<Vec<f64>>>, RunError> {
        let mut lambdas = vec![None; self.fields().len()];
        for &i in others.iter().rev() {
            let state_bar = std::mem::take(&mut bars.state[i]);
            let unknowns_bar = std::mem::take(&mut bars.unknowns[i]);
            let lambda = self.fields_mut()[i].adjoint_solve(&state_bar, &unknowns_bar)?;
            self.accumulate_and_hand_back(i, &lambda, &state_bar, bars, grad, &[])?;
            lambdas[i] = Some(lambda);
        }
        Ok(lambdas)
    }

    /// Add the seeds `record` holds for derived outputs of fields outside the cycle (handed
    /// to them by the cycle's adjoints) into `outside_y`, by transfer.
    fn keep_outside_seeds(
        &self,
        members: &[usize],
        record: &ReverseRecord,
        outside_y: &mut [Option<Vec<f64>>],
    ) {
        for (k, t) in self.transfers().iter().enumerate() {
            if members.contains(&t.from) {
                continue;
            }
            if let Some(y) = &record.y_bar[k] {
                match &mut outside_y[k] {
                    Some(a) => add_into(a, y),
                    slot => *slot = Some(y.clone()),
                }
            }
        }
    }

    /// The second-order products of a step's explicit share (1 − θ)/θ R_u(xᵐ) along the
    /// state's tangents `tan`, at the first-order ν = (1 − θ)/θ μ of the step after state m as
    /// `record` holds it (with the derived outputs' seeds ν made,
    /// [`explicit_share_adjoint`](Self::explicit_share_adjoint)): what they leave on state m,
    /// their parameter parts, and the seeds of inputs fed from outside the cycle (into
    /// `local`, on their way upstream).
    #[allow(clippy::too_many_arguments)]
    fn explicit_share_second_order(
        &self,
        run: &CycleRun,
        tan: &Tangents,
        m: usize,
        record: &ReverseRecord,
        dir: &Gradient,
        sizes: &[usize],
        local: &mut Bars,
        sweep: &mut Sweep,
        outside_y: &mut [Option<Vec<f64>>],
    ) -> Result<(), RunError> {
        // (The state m is placed: the first-order share placed it.)
        let members = &run.members[..];
        self.keep_outside_seeds(members, record, outside_y);
        let mut seeds = self.second_order_seeds(members, record, tan, dir, 0.0, sweep.grad)?;
        self.absorb_internal_inputs(members, &mut seeds, sweep.grad)?;
        for (k, &i) in members.iter().enumerate() {
            sweep.leave(m, k, sizes, &seeds.state[i], 1.0);
        }
        // Input seeds on ports fed from outside the cycle go to their sources.
        for t in self.transfers() {
            if !members.contains(&t.to) || members.contains(&t.from) {
                continue;
            }
            let x = &seeds.inputs[t.to][t.to_port];
            if x.iter().any(|v| *v != 0.0) {
                let (registry, shape) = self.parts();
                let mut rev = Reverse { registry, shape, grad: &mut *sweep.grad };
                self.to_source(t, x, local, Some(&mut rev))?;
            }
        }
        Ok(())
    }
}
