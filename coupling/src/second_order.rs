//! Second order: Hessian-vector products of the objective by the second-order adjoint
//! (forward over reverse: a tangent-linear solve along the direction, then the adjoint of the
//! linearized adjoint), the dense Hessian by repeated products, and the second-order Taylor
//! test that checks them.
//!
//! Covered: steady coupling graphs whose fields all have [`crate::field::SecondOrder`] (the
//! thermal field with k(T), sources, fixed temperatures, convection and heat flux; the
//! electrical field with σ₀ per conductor or element, α_R, terminal voltages and currents and
//! the Joule heat it hands on; the linear mechanical field with E, ν, α, T_ref, loads and
//! prescribed displacements, downstream of the temperature or of an imported temperature
//! with its scale and offset; the finite-strain field through its load steps, with its law
//! parameters, the per-element factor, α, T_ref, loads, prescribed displacements and the
//! temperature it is driven by, its second-order adjoint running over the load path inside
//! its objective's Hessian), acyclic or with cycles
//! (electro-thermal with ρ(T)), monolithic (the tangent by one solve with the converged
//! Jacobian's solver) or staggered (the linearized block Gauss–Seidel iteration). Shape
//! parameters (node coordinates, morphs) move the nodes along δX = [`crate::shape::Shape::tangent`], for
//! problems whose fields all cover them ([`crate::field::SecondOrder::covers_shape`]: the
//! thermal, electrical and linear mechanical fields so far). In time (`crate::time`), the
//! stepped field has the tangent-linear model and second-order adjoint of its steps
//! ([`crate::field::Dynamic::time_tangents`]), the stages solved once and the fields
//! downstream of it (at every state) their steady products; a stepped field on a cycle has
//! the engine's products through the cycle's steps (`crate::time_cycle`). What is not
//! covered is refused with a message naming what is missing.

use gradfem_solvers::params::{Gradient, ParamRegistry, ParamVector};
use serde::Serialize;

use std::collections::HashMap;

use crate::error::RunError;
use crate::field::{Direction, Reverse, Seed};
use crate::problem::{
    Bars, CoupledProblem, CycleScheme, GradientTimings, ReverseRecord, Transfer, add_into,
};

/// The second-order Taylor test of a Hessian-vector product along a direction δp:
/// r(h) = |J(p + h δp) − J(p) − h ∇J·δp − ½ h² δpᵀHδp| falls as h³ when H·δp is exact (as h²
/// when it is wrong).
#[derive(Clone, Debug, Serialize)]
pub struct SecondOrderTaylor {
    /// Steps h₀/2ⁱ.
    pub h: Vec<f64>,
    /// J(p).
    pub j0: f64,
    /// ∇J·δp.
    pub first: f64,
    /// δpᵀHδp.
    pub second: f64,
    /// The second-order remainders r(h).
    pub remainders: Vec<f64>,
    /// The first-order remainders |J(p + h δp) − J(p) − h ∇J·δp| (rate 2), for comparison.
    pub remainders_first: Vec<f64>,
    /// log₂ r(hᵢ)/r(hᵢ₊₁) of the second-order remainders (≈ 3).
    pub rates: Vec<f64>,
}

impl SecondOrderTaylor {
    /// The smallest rate of the steps whose remainder is above round-off (a fraction `1e-13`
    /// of |J|); `None` when no step is.
    pub fn min_rate(&self) -> Option<f64> {
        let floor = 1e-13 * self.j0.abs().max(1e-300);
        self.rates
            .iter()
            .zip(self.remainders.windows(2))
            .filter(|(_, r)| r[1] > floor)
            .map(|(rate, _)| *rate)
            .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.min(r))))
    }
}

/// A flat vector (the order of [`ParamVector::all`]) as a gradient-shaped direction.
pub(crate) fn shaped(reg: &ParamRegistry, flat: &[f64]) -> Result<Gradient, RunError> {
    let pv = ParamVector::all(reg);
    if flat.len() != pv.len() {
        return Err(RunError::Setup(format!(
            "a direction of {} entries for {} registered parameter entries",
            flat.len(),
            pv.len()
        )));
    }
    let mut g = Gradient::zeros(reg);
    for &id in pv.ids() {
        let range = pv.range(id).expect("an id of the selection");
        g.get_mut(id).copy_from_slice(&flat[range]);
    }
    Ok(g)
}

/// The tangents of a parameter direction through the graph: every field's state, its inputs
/// and its derived outputs that feed a transfer.
#[derive(Clone)]
pub(crate) struct Tangents {
    /// δX per node (empty: the direction does not move the nodes).
    pub(crate) coordinates: Vec<[f64; 3]>,
    pub(crate) state: Vec<Vec<f64>>,
    pub(crate) inputs: Vec<Vec<Vec<f64>>>,
    /// By (field, output port).
    pub(crate) outputs: HashMap<(usize, usize), Vec<f64>>,
}

impl CoupledProblem {
    /// Whether Hessian-vector products are available for this problem: `Ok` or the reason
    /// they are not (what is not covered yet), checked without solving.
    pub fn second_order_support(&self) -> Result<(), RunError> {
        if self.is_transient() {
            return self.second_order_in_time_support();
        }
        for f in self.fields() {
            let Some(so) = f.second_order_ref() else {
                return Err(RunError::Setup(format!(
                    "the {} field has no second-order products yet",
                    f.name()
                )));
            };
            if self.shape().is_active() && !so.covers_shape() {
                return Err(RunError::Setup(format!(
                    "{}: Hessian-vector products with respect to node coordinates (shape \
                     parameters) are not available yet; register material, load and boundary \
                     parameters",
                    f.name()
                )));
            }
        }
        Ok(())
    }

    /// The tangent of the value of transfer `t`'s source port.
    fn source_tangent(&self, tan: &Tangents, t: &Transfer) -> Vec<f64> {
        if t.from_port == 0 {
            t.forward(&tan.state[t.from], t.target_len)
        } else {
            let y = tan.outputs.get(&(t.from, t.from_port)).expect("source tangent computed first");
            t.forward(y, t.target_len)
        }
    }

    /// Set the input tangents of field `i` from its transfers whose sources are done (by
    /// `from_state`: transfers from states, or from derived outputs).
    pub(crate) fn feed_tangents(&self, tan: &mut Tangents, i: usize, from_state: bool) {
        for t in self.transfers() {
            if t.to == i && (t.from_port == 0) == from_state {
                let x = self.source_tangent(tan, t);
                tan.inputs[i][t.to_port] = x;
            }
        }
    }

    /// The tangents of field `i`'s derived outputs that feed a transfer.
    pub(crate) fn output_tangents(
        &self,
        tan: &mut Tangents,
        i: usize,
        dir: &Gradient,
    ) -> Result<(), RunError> {
        let ports: Vec<usize> = self
            .transfers()
            .iter()
            .filter(|t| t.from == i && t.from_port != 0)
            .map(|t| t.from_port)
            .collect();
        for port in ports {
            let so = self.fields()[i].second_order_ref().expect("checked");
            let d = Direction {
                params: dir,
                state: &tan.state[i],
                inputs: &tan.inputs[i],
                coordinates: &tan.coordinates,
            };
            let y = so.output_jvp(port, &d)?;
            tan.outputs.insert((i, port), y);
        }
        Ok(())
    }

    /// Carry the direction `dir` forward through the stages: one tangent-linear solve per
    /// field, one coupled solve per monolithic cycle (with its converged Jacobian's solver),
    /// the linearized iteration per staggered one.
    fn tangents(&mut self, dir: &Gradient) -> Result<Tangents, RunError> {
        let mut tan = self.new_tangents(dir);
        let stages: Vec<Vec<usize>> = self.schedule().into_iter().map(|s| s.fields).collect();
        self.tangents_over(&stages, &mut tan, dir)?;
        Ok(tan)
    }

    /// Empty tangents (the nodes' δX of `dir` set).
    pub(crate) fn new_tangents(&self, dir: &Gradient) -> Tangents {
        let nf = self.fields().len();
        Tangents {
            coordinates: self.shape().tangent(dir),
            state: vec![Vec::new(); nf],
            inputs: self.fields().iter().map(|f| vec![Vec::new(); f.inputs().len()]).collect(),
            outputs: HashMap::new(),
        }
    }

    /// [`tangents`](Self::tangents) of the stages `stages` (in order), the tangents of the
    /// fields before them already in `tan`.
    pub(crate) fn tangents_over(
        &mut self,
        stages: &[Vec<usize>],
        tan: &mut Tangents,
        dir: &Gradient,
    ) -> Result<(), RunError> {
        for members in stages {
            let members = members.clone();
            if members.len() == 1 {
                let i = members[0];
                self.feed_tangents(tan, i, true);
                self.feed_tangents(tan, i, false);
                let inputs = tan.inputs[i].clone();
                let so = self.fields_mut()[i].second_order().expect("checked");
                tan.state[i] = so.tangent(dir, &tan.coordinates, &inputs)?;
                self.output_tangents(tan, i, dir)?;
                continue;
            }
            // A cycle: J δU = −dR/dε at the prescribed tangents, then δu = δu⁰ + P δU.
            for &i in &members {
                tan.state[i] =
                    self.fields()[i].second_order_ref().expect("checked").prescribed_tangent(dir);
            }
            self.feed_cycle_tangents(tan, &members, dir)?;
            if self.cycle.scheme == CycleScheme::Staggered {
                self.staggered_tangents(tan, &members, dir)?;
                continue;
            }
            let mut rhs = Vec::new();
            for &i in &members {
                let so = self.fields()[i].second_order_ref().expect("checked");
                let d = Direction {
                    params: dir,
                    state: &tan.state[i],
                    inputs: &tan.inputs[i],
                    coordinates: &tan.coordinates,
                };
                rhs.extend(so.residual_jvp(&d)?.into_iter().map(|v| -v));
            }
            let du = self.monolithic_tangent_solve(&members, rhs)?;
            for (&i, du) in members.iter().zip(du) {
                add_into(&mut tan.state[i], &du);
            }
            self.feed_cycle_tangents(tan, &members, dir)?;
        }
        Ok(())
    }

    /// The tangents of a cycle solved staggered: the block Gauss–Seidel iteration of the
    /// forward solve, linearized — each field's tangent-linear solve (on its factorization at
    /// the converged state) at the others' latest tangents, until the relative change of every
    /// tangent is below the cycle tolerance.
    fn staggered_tangents(
        &mut self,
        tan: &mut Tangents,
        members: &[usize],
        dir: &Gradient,
    ) -> Result<(), RunError> {
        let sweeps = self.gauss_seidel_sweeps(
            members,
            |sweep| ("tangent-linear iteration".into(), format!("sweep {sweep}")),
            |p, _, i| {
                p.feed_tangents(tan, i, true);
                p.feed_tangents(tan, i, false);
                let inputs = tan.inputs[i].clone();
                let so = p.fields_mut()[i].second_order().expect("checked");
                tan.state[i] = so.tangent(dir, &tan.coordinates, &inputs)?;
                p.output_tangents(tan, i, dir)?;
                Ok(tan.state[i].clone())
            },
        )?;
        if sweeps.converged {
            return self.feed_cycle_tangents(tan, members, dir);
        }
        let names: Vec<&str> = members.iter().map(|&i| self.fields()[i].name()).collect();
        Err(RunError::Setup(format!(
            "{}: the tangent-linear block Gauss-Seidel iteration did not converge in {} iterations (last relative change {:.3e})",
            names.join("-"),
            self.cycle.max_iterations,
            sweeps.history.last().copied().unwrap_or(f64::NAN)
        )))
    }

    /// The input and output tangents of a cycle's fields at their current state tangents.
    pub(crate) fn feed_cycle_tangents(
        &self,
        tan: &mut Tangents,
        members: &[usize],
        dir: &Gradient,
    ) -> Result<(), RunError> {
        for &i in members {
            self.feed_tangents(tan, i, true);
        }
        for &i in members {
            self.output_tangents(tan, i, dir)?;
        }
        for &i in members {
            self.feed_tangents(tan, i, false);
        }
        Ok(())
    }

    /// H·δp: the Hessian of the objective applied to the parameter direction `dir` (shaped
    /// like the gradient), by the second-order adjoint of the whole graph: the first-order
    /// reverse pass (keeping its adjoints), the tangents of the direction carried forward
    /// (one linearized solve per field or cycle), and the reverse pass once more with the
    /// derivatives of its seeds along the direction. Every solve reuses the factorization of
    /// the last solve (solved first when needed).
    pub fn hessian_vector(&mut self, dir: &Gradient) -> Result<Gradient, RunError> {
        self.second_order_support()?;
        if !self.is_solved() {
            self.solve()?;
        }
        if self.is_transient() {
            return self.hessian_vector_in_time(dir);
        }
        let nf = self.fields().len();
        let mut timings = GradientTimings::default();
        // 1. The first-order adjoints: those the last gradient kept at this solution, or a
        //    reverse pass now.
        let record = match self.reverse_record.take() {
            Some(r) => r,
            None => {
                let mut first = Gradient::zeros(self.registry());
                let mut bars = self.seeds(&mut first)?;
                bars.record = Some(ReverseRecord::new(nf, self.transfers().len()));
                self.reverse_stages(&mut bars, &mut first, &mut timings)?;
                bars.record.take().expect("kept")
            }
        };
        // 2. The tangents.
        let tan = self.tangents(dir)?;
        // 3. The seeds' derivatives along the direction.
        let mut hv = Gradient::zeros(self.registry());
        let all: Vec<usize> = (0..nf).collect();
        let mut seeds = self.second_order_seeds(&all, &record, &tan, dir, 1.0, &mut hv)?;
        // 4. The second-order adjoint: the same reverse pass on those seeds.
        self.reverse_stages(&mut seeds, &mut hv, &mut timings)?;
        self.reverse_record = Some(record);
        Ok(hv)
    }

    /// The seeds of the second-order adjoint from the fields `fields` along the direction
    /// `dir` (their tangents in `tan`), with the first-order adjoints of `record`: each
    /// field's objective Hessian (scaled by `objective_weight`) and the derivative of its
    /// residual's vector-Jacobian products at its λ, and the derivative of the output VJPs
    /// of the transfers from those fields at their recorded seeds ȳ; the parameter parts go
    /// into `hv`.
    pub(crate) fn second_order_seeds(
        &self,
        fields: &[usize],
        record: &ReverseRecord,
        tan: &Tangents,
        dir: &Gradient,
        objective_weight: f64,
        hv: &mut Gradient,
    ) -> Result<Bars, RunError> {
        let mut seeds = self.zero_bars();
        let (registry, shape) = self.parts();
        let direction = |i: usize| Direction {
            params: dir,
            state: &tan.state[i],
            inputs: &tan.inputs[i],
            coordinates: &tan.coordinates,
        };
        for &i in fields {
            let so = self.fields()[i].second_order_ref().expect("checked");
            let d = direction(i);
            if objective_weight != 0.0 {
                let mut own = Gradient::zeros(registry);
                let mut rev = Reverse { registry, shape, grad: &mut own };
                let Seed { state, unknowns, inputs } = so.objective_hessian(&d, &mut rev)?;
                hv.add_scaled(objective_weight, &own);
                let scaled = |v: Vec<f64>| -> Vec<f64> {
                    v.into_iter().map(|x| objective_weight * x).collect()
                };
                add_into(&mut seeds.state[i], &scaled(state));
                if !unknowns.is_empty() {
                    seeds.unknowns[i] = scaled(unknowns);
                }
                for (p, x) in inputs {
                    seeds.add_input_seed(i, p, &scaled(x));
                }
            }
            if let Some(lambda) = &record.lambda[i] {
                let mut rev = Reverse { registry, shape, grad: &mut *hv };
                let ov = so.second_order_vjp(lambda, &d, &mut rev)?;
                add_into(&mut seeds.state[i], &ov.state);
                for (p, x) in ov.inputs {
                    seeds.add_input_seed(i, p, &x);
                }
            }
        }
        for (k, t) in self.transfers().iter().enumerate() {
            let Some(y_bar) = &record.y_bar[k] else { continue };
            if !fields.contains(&t.from) {
                continue;
            }
            let i = t.from;
            let so = self.fields()[i].second_order_ref().expect("checked");
            let mut rev = Reverse { registry, shape, grad: &mut *hv };
            let ov = so.output_second_order_vjp(t.from_port, y_bar, &direction(i), &mut rev)?;
            add_into(&mut seeds.state[i], &ov.state);
            for (p, x) in ov.inputs {
                seeds.add_input_seed(i, p, &x);
            }
        }
        Ok(seeds)
    }

    /// The directional derivative of every field's state (nodal, by field in the order of
    /// [`fields`](Self::fields)) along a parameter direction `dir` (flat, the order of
    /// [`ParamVector::all`]): one tangent-linear solve per field or cycle, on the
    /// factorizations of the last solve.
    pub fn state_tangents(&mut self, dir: &[f64]) -> Result<Vec<Vec<f64>>, RunError> {
        self.second_order_support()?;
        if !self.is_solved() {
            self.solve()?;
        }
        let d = shaped(self.registry(), dir)?;
        Ok(self.tangents(&d)?.state)
    }

    /// The directional derivative of the state of field `name` along `dir` (flat, the order
    /// of [`ParamVector::all`]); see [`state_tangents`](Self::state_tangents).
    pub fn tangent_flat(&mut self, name: &str, dir: &[f64]) -> Result<Vec<f64>, RunError> {
        let i = self.field_names().iter().position(|n| n == name).ok_or_else(|| {
            RunError::Setup(format!(
                "no {name} field; the problem has {}",
                self.field_names().join(", ")
            ))
        })?;
        Ok(self.state_tangents(dir)?.swap_remove(i))
    }

    /// [`hessian_vector`](Self::hessian_vector) on flat vectors in the order of
    /// [`ParamVector::all`] (the layout of [`Gradient::flatten`]).
    pub fn hessian_vector_flat(&mut self, dir: &[f64]) -> Result<Vec<f64>, RunError> {
        let d = shaped(self.registry(), dir)?;
        let hv = self.hessian_vector(&d)?;
        Ok(hv.flatten(&ParamVector::all(self.registry())))
    }

    /// H·δp restricted to a selection of the registered parameters: `dir` and the result in
    /// the selection's layout (the other parameters held fixed).
    pub fn hessian_vector_selection(
        &mut self,
        selection: &ParamVector,
        dir: &[f64],
    ) -> Result<Vec<f64>, RunError> {
        if dir.len() != selection.len() {
            return Err(RunError::Setup(format!(
                "a direction of {} entries for a selection of {}",
                dir.len(),
                selection.len()
            )));
        }
        let mut d = Gradient::zeros(self.registry());
        for &id in selection.ids() {
            let range = selection.range(id).expect("an id of the selection");
            d.get_mut(id).copy_from_slice(&dir[range]);
        }
        Ok(self.hessian_vector(&d)?.flatten(selection))
    }

    /// The dense Hessian over every registered entry (row-major, n × n), one product per
    /// column: for up to a few hundred entries.
    pub fn dense_hessian(&mut self, mut progress: impl FnMut(usize)) -> Result<Vec<f64>, RunError> {
        let n = ParamVector::all(self.registry()).len();
        let mut h = vec![0.0; n * n];
        let mut e = vec![0.0; n];
        for j in 0..n {
            e[j] = 1.0;
            let col = self.hessian_vector_flat(&e)?;
            e[j] = 0.0;
            for (i, v) in col.iter().enumerate() {
                h[i * n + j] = *v;
            }
            progress(j + 1);
        }
        Ok(h)
    }

    /// The second-order Taylor test along `dir` (flat, [`ParamVector::all`] order) with steps
    /// h₀/2ⁱ, i < `steps`; leaves the problem as it was.
    pub fn taylor_test_second_order(
        &mut self,
        dir: &[f64],
        h0: f64,
        steps: usize,
    ) -> Result<SecondOrderTaylor, RunError> {
        let (j0, grad, _) = self.gradient()?;
        let pv = ParamVector::all(self.registry());
        let g = grad.flatten(&pv);
        let hv = self.hessian_vector_flat(dir)?;
        let first: f64 = g.iter().zip(dir).map(|(a, b)| a * b).sum();
        let second: f64 = hv.iter().zip(dir).map(|(a, b)| a * b).sum();
        let p0 = pv.gather(self.registry());
        let starts = self.warm_starts();
        let mut out = SecondOrderTaylor {
            h: Vec::new(),
            j0,
            first,
            second,
            remainders: Vec::new(),
            remainders_first: Vec::new(),
            rates: Vec::new(),
        };
        let mut run = |this: &mut Self| -> Result<(), RunError> {
            for i in 0..steps {
                let h = h0 / f64::powi(2.0, i as i32);
                let p: Vec<f64> = p0.iter().zip(dir).map(|(a, b)| a + h * b).collect();
                pv.scatter(this.registry_mut(), &p)
                    .map_err(|e| RunError::Setup(format!("second-order Taylor test: {e}")))?;
                this.apply_parameters()?;
                let j = this.objective_terms()?.0;
                out.h.push(h);
                out.remainders_first.push((j - j0 - h * first).abs());
                out.remainders.push((j - j0 - h * first - 0.5 * h * h * second).abs());
            }
            Ok(())
        };
        let result = run(self);
        pv.scatter(self.registry_mut(), &p0)
            .map_err(|e| RunError::Setup(format!("second-order Taylor test: {e}")))?;
        self.apply_parameters()?;
        self.set_warm_starts(starts);
        self.solve()?;
        result?;
        out.rates = out.remainders.windows(2).map(|r| (r[0] / r[1]).log2()).collect();
        Ok(out)
    }
}
