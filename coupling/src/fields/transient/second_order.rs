//! Second order through the time steps: the tangent-linear model of a transient run and the
//! Hessian-vector products of a time objective by the second-order adjoint of its steps.
//!
//! Along a parameter direction δp (k₀, Q, boundary values, fixed temperatures, ρc, the initial
//! temperature, a constant external source), differentiating step k's equations F_k = 0
//! (module docs of [`crate::fields::transient`]) gives the tangent step
//!
//! A_k δU^{k+1} = −[M (a₁δU^k + a₂δU^{k−1})/Δt + δM wᵏ + θ ∂R/∂p|_{k+1} δp
//!                 + (1 − θ) (K(U^k) δU^k + ∂R/∂p|_k δp)],
//!
//! wᵏ = (a₀U^{k+1} + a₁U^k + a₂U^{k−1})/Δt, δM the mass at δρc; one solve with the step's
//! matrix A_k = a₀M/Δt + θK(U^{k+1}) (the fixed temperatures' δT enter through ∂R/∂p).
//!
//! The objective J = F(j₀ … j_N) has the weights wₙ = ∂F/∂jₙ of the first-order adjoint and
//! their derivatives δwₙ = Σₘ ∂²F/∂jₙ∂jₘ δjₘ. Differentiating the first-order reverse step
//! (Aᵀμ = Ū^{k+1}, Ū^k = … − a₁Mμ/Δt − (1 − θ)K(U^k)ᵀμ, p̄ −= …) along the direction gives the
//! second-order adjoint step on the same factorization:
//!
//! Aᵀ δμ = δŪ^{k+1} − θ d/dε[(∂R/∂U)ᵀμ]|_{k+1} − a₀ δM μ/Δt,
//! δŪ^k = δŪ^k_pending − a₁(M δμ + δM μ)/Δt − (1 − θ)(K(U^k)ᵀ δμ + d/dε[(∂R/∂U)ᵀμ]|_k),
//! (Hδp) −= θ[(∂R/∂p)ᵀ δμ + d/dε((∂R/∂p)ᵀμ)]|_{k+1} + (1 − θ)[…]|_k
//!          + δμᵀ(∂M/∂ρc)wᵏ + μᵀ(∂M/∂ρc)δwᵏ,
//!
//! with the objective's seeds δŪⁿ += δwₙ ∂jₙ/∂U + wₙ (∂²jₙ/∂U²) δUⁿ. The derivatives along
//! the direction of the vector-Jacobian products are the steady model's
//! ([`ThermalModel::second_order_vjp`]), at the states and tangents of the two ends of each
//! step. The states are the run's stored trajectory; the tangents are kept for the reverse
//! pass (as many vectors as the trajectory).
//!
//! Node coordinates (shape parameters) are one more direction δX: the steady products take it
//! (`steady.coords`), the mass moves with det J (δM_X v = Σ_q w_q det J tr ∇δX ρc N v(x_q),
//! [`mass_coordinate_jvp`]) and so does its coordinate product
//! ([`mass_coordinate_second_order`]); the objective terms' coordinate parts come from
//! [`hessian_product_with_coords`], the external source's from
//! [`ThermalModel::external_source_second_order`]. The consistent mass only (a lumped mass
//! has no coordinate products).

use gradfem_kernel::{CoordinatePart, CoordinateRequest};
use gradfem_solvers::sparse::CsrMatrix;
use rayon::prelude::*;

use crate::field::TimeTangents;
use gradfem_thermal::objective::{
    ObjectiveEval, evaluate, hessian_product, hessian_product_with_coords,
};
use gradfem_thermal::{ObjectiveTerm, ThermalDirection, ThermalModel, VjpRequest};

use super::{
    MassKind, Stepper, Trajectory, TransientError, TransientGradient, TransientProblem,
    mass_coordinate_jvp, mass_coordinate_second_order, sub_into, unit_mass_forms,
};

/// A parameter direction of a transient run.
#[derive(Clone, Debug, PartialEq)]
pub struct TransientDirection {
    /// The steady model's part: δk₀ per element, δQ, the boundary values and the fixed
    /// temperatures (`steady.temperature` holds δT at the fixed nodes, zero elsewhere), and
    /// the nodes' motion δX (`steady.coords`; empty: they hold still).
    pub steady: ThermalDirection,
    /// δρc per volume element.
    pub heat_capacity_elem: Vec<f64>,
    /// δT⁰ per node (the free nodes' entries count).
    pub initial: Vec<f64>,
    /// δQ of the external source per quadrature point (empty: zero), constant in time.
    pub external_source: Vec<f64>,
}

impl TransientDirection {
    /// The zero direction of `model`.
    pub fn zeros(model: &ThermalModel) -> Self {
        TransientDirection {
            steady: ThermalDirection::zeros(model),
            heat_capacity_elem: vec![0.0; model.n_volume_elements()],
            initial: vec![0.0; model.n_nodes()],
            external_source: Vec::new(),
        }
    }
}

/// The seeds fields downstream put on the states of a run (per node; `None` or a missing
/// entry: none): the first-order ones, weighted, and their derivatives along the direction.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StateSeeds<'a> {
    /// sₙ per state.
    pub first: &'a [Option<Vec<f64>>],
    /// δsₙ per state.
    pub second: &'a [Option<Vec<f64>>],
}

impl TransientProblem {
    fn check_second_order(
        &self,
        traj: &Trajectory,
        dir: &TransientDirection,
    ) -> Result<(), TransientError> {
        self.check_steps()?;
        if !dir.steady.coords.is_empty() && self.mass == MassKind::Lumped {
            return Err(TransientError::Unsupported(
                "second-order products in time along directions that move the nodes with a \
                 lumped mass matrix (use the consistent mass)",
            ));
        }
        assert_eq!(traj.temperatures.len(), self.n_steps + 1, "a trajectory of this problem");
        Ok(())
    }

    /// `d` (a copy of the direction's steady part) with δT = `dt` (nodal): the parameter
    /// vectors are copied once per run, the temperatures at every use.
    fn with_temperature<'d>(d: &'d mut ThermalDirection, dt: &[f64]) -> &'d ThermalDirection {
        d.temperature.copy_from_slice(dt);
        d
    }

    /// δM v on the free nodes (unknown layout) for a nodal `v` that is zero at the fixed
    /// nodes, with δM = M(δρc) assembled once per pass (`None`: the direction leaves ρc).
    fn capacity_times(&self, dm: Option<&CsrMatrix>, v: &[f64]) -> Vec<f64> {
        let model = &self.model;
        let mut out = vec![0.0; model.n_unknowns()];
        if let Some(dm) = dm {
            dm.mul_vec_into(&model.dofs.gather(v), &mut out);
        }
        out
    }

    /// (∂M/∂X δX) v at every node (zero at fixed nodes; every entry zero when the nodes hold
    /// still).
    fn mass_coordinate_times(&self, dx: &[[f64; 3]], v: &[f64]) -> Vec<f64> {
        let model = &self.model;
        let mut out = vec![0.0; model.n_nodes()];
        if dx.is_empty() {
            return out;
        }
        let n_vol = self.rho_c.len();
        model.scatter_chunked(&mut out, 1, |e, local| {
            if e < n_vol && self.rho_c[e] != 0.0 {
                mass_coordinate_jvp(model, e, self.rho_c[e], dx, v, local);
            }
        });
        for (n, o) in out.iter_mut().enumerate() {
            if model.dofs.unknown_of_node[n].is_none() {
                *o = 0.0;
            }
        }
        out
    }

    /// (a₀x^{k+1} + a₁x^k + a₂x^{k−1})/Δt at every node (zero at fixed nodes) of a sequence
    /// of nodal vectors `x` (states or their tangents).
    fn rate(&self, k: usize, x: &[Vec<f64>]) -> Vec<f64> {
        let [a0, a1, a2, _] = self.scheme.coefficients(k);
        let dt = self.step_size(k);
        let model = &self.model;
        (0..model.n_nodes())
            .map(|n| {
                if model.dofs.unknown_of_node[n].is_none() {
                    return 0.0;
                }
                let older = if a2 != 0.0 { a2 * x[k - 1][n] } else { 0.0 };
                (a0 * x[k + 1][n] + a1 * x[k][n] + older) / dt
            })
            .collect()
    }

    /// The tangent-linear model of the run `traj` along `dir` (module docs): δTⁿ at every
    /// state, one solve per step with the step's matrix (factored once per step kind when the
    /// conductivity is constant, at every step with k(T)), and the derivative δjₙ of the
    /// objective `terms` (which depend on the temperature alone). `known`: the terms already
    /// evaluated at every state of `traj` (node coordinates held), used where the direction
    /// does not move the nodes.
    pub fn tangent_states(
        &self,
        traj: &Trajectory,
        dir: &TransientDirection,
        terms: &[ObjectiveTerm],
        known: Option<&[ObjectiveEval]>,
    ) -> Result<TimeTangents, TransientError> {
        self.check_second_order(traj, dir)?;
        let model = &self.model;
        let mut stepper = Stepper::new(self)?;
        let mut d = dir.steady.clone();
        let fixed = &dir.steady.temperature;
        let mut first = dir.initial.clone();
        for (n, v) in first.iter_mut().enumerate() {
            if model.dofs.unknown_of_node[n].is_none() {
                *v = fixed[n];
            }
        }
        let mut states = vec![first];
        let capacity = dir.heat_capacity_elem.iter().any(|&v| v != 0.0);
        let d_mass = capacity.then(|| stepper.parts.mass_at(self, &dir.heat_capacity_elem));
        let moving = !dir.steady.coords.is_empty();
        let source = if moving && model.external_source().is_some() {
            Some(model.external_source_jvp_moving(&dir.external_source, &dir.steady.coords))
        } else {
            (!dir.external_source.is_empty() && model.external_source().is_some())
                .then(|| model.external_source_jvp(&dir.external_source))
        };
        for k in 0..self.n_steps {
            let [_, a1, a2, theta] = self.scheme.coefficients(k);
            let dt = self.step_size(k);
            let time = self.time(k + 1);
            gradfem_solvers::interrupt::check("transient thermal tangent", || format!("step {k}"))
                .map_err(|source| TransientError::Solver { step: k, time, source })?;
            let (t1, t0) = (&traj.temperatures[k + 1], &traj.temperatures[k]);
            // θ ∂R/∂p|_{k+1} δp (the fixed temperatures' δT included) + (1 − θ) dR|_k.
            let mut f: Vec<f64> = model
                .residual_jvp(t1, Self::with_temperature(&mut d, fixed))
                .into_iter()
                .map(|v| theta * v)
                .collect();
            if theta < 1.0 {
                let r0 = model.residual_jvp(t0, Self::with_temperature(&mut d, &states[k]));
                f.iter_mut().zip(&r0).for_each(|(a, b)| *a += (1.0 - theta) * b);
            }
            if let Some(s) = &source {
                f.iter_mut().zip(s).for_each(|(a, b)| *a += b);
            }
            let mut dm_w = None;
            if capacity || moving {
                let w = self.rate(k, &traj.temperatures);
                dm_w = capacity.then(|| self.capacity_times(d_mass.as_ref(), &w));
                let dx_w = self.mass_coordinate_times(&dir.steady.coords, &w);
                f.iter_mut().zip(&dx_w).for_each(|(a, b)| *a += b);
            }
            let mut rhs = model.dofs.gather(&f);
            if let Some(dm_w) = &dm_w {
                rhs.iter_mut().zip(dm_w).for_each(|(a, b)| *a += b);
            }
            // M (a₁δU^k + a₂δU^{k−1})/Δt.
            let known: Vec<f64> = model
                .dofs
                .node_of_unknown
                .iter()
                .map(|&n| {
                    let older = if a2 != 0.0 { a2 * states[k - 1][n] } else { 0.0 };
                    (a1 * states[k][n] + older) / dt
                })
                .collect();
            let mut m_known = vec![0.0; known.len()];
            stepper.parts.mass.mul_vec_into(&known, &mut m_known);
            rhs.iter_mut().zip(&m_known).for_each(|(a, b)| *a = -(*a + b));
            stepper
                .factor(k, dt, t1)?
                .solve_in_place(&mut rhs)
                .map_err(|source| TransientError::Solver { step: k, time, source })?;
            let mut next = fixed.clone();
            model.dofs.scatter(&rhs, &mut next);
            states.push(next);
        }
        // (The engine's tangents of a run: states in the thermal field's nodal layout.)
        let mut out = TimeTangents {
            objective: vec![0.0; states.len()],
            states,
            objective_gradients: Vec::new(),
            inputs: Vec::new(),
        };
        if !terms.is_empty() {
            for (n, t) in traj.temperatures.iter().enumerate() {
                let e = match known {
                    Some(known) if !moving => known[n].clone(),
                    _ => evaluate(model, terms, t, moving)?,
                };
                let g = e.d_temperature;
                out.objective[n] = g.iter().zip(&out.states[n]).map(|(a, b)| a * b).sum();
                // The terms' own motion with the nodes (integrals over groups, point values).
                if let Some(dj_dx) = &e.d_coords {
                    out.objective[n] += dj_dx
                        .iter()
                        .zip(&dir.steady.coords)
                        .map(|(a, b)| (0..3).map(|i| a[i] * b[i]).sum::<f64>())
                        .sum::<f64>();
                }
                out.objective_gradients.push(g);
            }
        }
        stepper.finish();
        Ok(out)
    }

    /// H·δp of J = F(j₀ … j_N) + (what fields downstream make of the states), jₙ the `terms`
    /// at state n, by the second-order adjoint of the steps (module docs): `weights` are
    /// wₙ = ∂F/∂jₙ, `d_weights` their derivatives δwₙ along the direction, `other` the seeds
    /// the fields downstream put on each state and their derivatives, `tangents` the run's
    /// [`tangent_states`](Self::tangent_states) along `dir`. Returns the product in the layout
    /// of [`TransientGradient`] (its `value` zero; `external_source` the second-order seed of
    /// the external source; its `coords` the node coordinates' share formed per node), the
    /// first-order seed of the external source (per point; empty without one) and the node
    /// coordinates' share formed for `coords` (the steady products', the objective terms' and
    /// the source's: along the registered morphs alone when only they are parameters); `want`
    /// selects the steady parameter kinds as for the gradient (`want.coords`: both coordinate
    /// shares). `first_adjoints`: the first-order adjoint of every step for these weights and
    /// seeds, as [`gradient_of_run_with_adjoints`] returns them (solved for here without).
    ///
    /// [`gradient_of_run_with_adjoints`]: Self::gradient_of_run_with_adjoints
    #[allow(clippy::too_many_arguments)]
    pub fn hessian_vector(
        &self,
        traj: &Trajectory,
        terms: &[ObjectiveTerm],
        weights: &[f64],
        d_weights: &[f64],
        other: StateSeeds,
        dir: &TransientDirection,
        tangents: &TimeTangents,
        want: VjpRequest,
        coords: CoordinateRequest,
        first_adjoints: Option<&[Vec<f64>]>,
    ) -> Result<(TransientGradient, Vec<f64>, CoordinatePart), TransientError> {
        self.check_second_order(traj, dir)?;
        let model = &self.model;
        let n_states = self.n_steps + 1;
        assert_eq!(weights.len(), n_states, "one weight per state");
        assert_eq!(d_weights.len(), n_states, "one weight derivative per state");
        let mut stepper = Stepper::new(self)?;
        let mut d = dir.steady.clone();
        if want.coords && self.mass == MassKind::Lumped {
            return Err(TransientError::Unsupported(
                "coordinate products in time with a lumped mass matrix (use the consistent mass)",
            ));
        }
        let mut hv = TransientGradient::zeros(model, want.coords);
        let owner = model.fixed_owner();
        let n_u = model.n_unknowns();
        let first_adjoints =
            first_adjoints.filter(|a| a.len() == self.n_steps && a.iter().all(|m| m.len() == n_u));
        let capacity = dir.heat_capacity_elem.iter().any(|&v| v != 0.0);
        let d_mass = capacity.then(|| stepper.parts.mass_at(self, &dir.heat_capacity_elem));
        let steady = want.conductivity || want.source || want.boundary || want.temperature;
        let moving = !dir.steady.coords.is_empty();
        let request = if want.coords { coords } else { CoordinateRequest::None };
        let mut part_acc = CoordinatePart::zeros(request, model.n_nodes());
        // The objective's first- and second-order seeds at state n into Ū and δŪ (the fixed
        // nodes' second-order seeds go to the fixed temperatures directly).
        let seed = |n: usize,
                    bar: &mut [f64],
                    d_bar: &mut [f64],
                    hv: &mut TransientGradient,
                    part_acc: &mut CoordinatePart|
         -> Result<(), TransientError> {
            let (w, dw) = (weights[n], d_weights[n]);
            let (outer, d_outer) = (
                other.first.get(n).and_then(Option::as_ref),
                other.second.get(n).and_then(Option::as_ref),
            );
            let own = !terms.is_empty() && (w != 0.0 || dw != 0.0);
            if !own && outer.is_none() && d_outer.is_none() {
                return Ok(());
            }
            let mut first = vec![0.0; model.n_nodes()];
            let mut second = vec![0.0; model.n_nodes()];
            if own {
                let t = &traj.temperatures[n];
                let dj = &tangents.objective_gradients[n];
                for ((f, s), g) in first.iter_mut().zip(&mut second).zip(dj) {
                    *f = w * g;
                    *s = dw * g;
                }
                if want.coords {
                    // d/dε(wₙ ∂jₙ/∂X) = δwₙ ∂jₙ/∂X + wₙ (∂jₙ/∂X)′.
                    let dx = &dir.steady.coords;
                    let (h, part) = hessian_product_with_coords(
                        model,
                        terms,
                        t,
                        &tangents.states[n],
                        dx,
                        request,
                    )?;
                    second.iter_mut().zip(&h).for_each(|(a, b)| *a += w * b);
                    part_acc.add_scaled(&part, w);
                    if dw != 0.0 {
                        let e = evaluate(model, terms, t, true)?;
                        let dj_dx = e.d_coords.expect("requested");
                        add_nodal(hv, &dj_dx, dw);
                    }
                } else if w != 0.0 {
                    let h = hessian_product(model, terms, t, &tangents.states[n])?;
                    second.iter_mut().zip(&h).for_each(|(a, b)| *a += w * b);
                }
            }
            if let Some(o) = outer {
                first.iter_mut().zip(o).for_each(|(a, b)| *a += b);
            }
            if let Some(o) = d_outer {
                second.iter_mut().zip(o).for_each(|(a, b)| *a += b);
            }
            for (i, &node) in model.dofs.node_of_unknown.iter().enumerate() {
                bar[i] += first[node];
                d_bar[i] += second[node];
            }
            for (node, o) in owner.iter().enumerate() {
                if let Some(b) = o {
                    hv.temperature[*b] += second[node];
                }
            }
            Ok(())
        };
        // −(∂R/∂p)ᵀλ (first order at δμ) and the derivative of −(∂R/∂p)ᵀλ along the
        // direction, with the fixed nodes' share of the latter (`s_t`) on their temperatures.
        let subtract = |hv: &mut TransientGradient,
                        t: &[f64],
                        d_lambda: &[f64],
                        s_t: &[f64],
                        s_p: &gradfem_thermal::ParameterVjp| {
            if steady || want.coords {
                let v = model.parameter_vjp(t, d_lambda, want);
                hv.subtract_parameter_vjp(&v);
            }
            hv.subtract_parameter_vjp(s_p);
            for (node, o) in owner.iter().enumerate() {
                if let Some(b) = o {
                    hv.temperature[*b] -= s_t[node];
                }
            }
        };
        let mut bar = vec![0.0; n_u];
        let mut d_bar = vec![0.0; n_u];
        let mut source_bar = vec![0.0; hv.external_source.len()];
        let mut pending = vec![0.0; n_u];
        let mut d_pending = vec![0.0; n_u];
        let scatter = |v: &[f64]| {
            let mut out = vec![0.0; model.n_nodes()];
            model.dofs.scatter(v, &mut out);
            out
        };
        for k in (0..self.n_steps).rev() {
            let [a0, a1, a2, theta] = self.scheme.coefficients(k);
            let dt = self.step_size(k);
            let time = self.time(k + 1);
            gradfem_solvers::interrupt::check("transient thermal second-order adjoint", || {
                format!("step {k}")
            })
            .map_err(|source| TransientError::Solver { step: k, time, source })?;
            seed(k + 1, &mut bar, &mut d_bar, &mut hv, &mut part_acc)?;
            let (t1, t0) = (&traj.temperatures[k + 1], &traj.temperatures[k]);
            let mu = match first_adjoints {
                Some(kept) => kept[k].clone(),
                None => {
                    let mut mu = bar.clone();
                    stepper
                        .factor(k, dt, t1)?
                        .solve_transpose_in_place(&mut mu)
                        .map_err(|source| TransientError::Solver { step: k, time, source })?;
                    mu
                }
            };
            let mu_nodal = scatter(&mu);
            let lambda1: Vec<f64> = mu_nodal.iter().map(|m| theta * m).collect();
            let dir1 = Self::with_temperature(&mut d, &tangents.states[k + 1]);
            let (s1_t, s1_p, part1) = model.second_order_vjp(t1, &lambda1, dir1, request);
            part_acc.add_scaled(&part1, -1.0);
            // δM μ: the heat capacities' and the nodes' motion.
            let mut dm_mu = self.capacity_times(d_mass.as_ref(), &mu_nodal);
            if moving {
                let dx_mu =
                    model.dofs.gather(&self.mass_coordinate_times(&dir.steady.coords, &mu_nodal));
                dm_mu.iter_mut().zip(&dx_mu).for_each(|(a, b)| *a += b);
            }
            let s1 = model.dofs.gather(&s1_t);
            let mut d_mu: Vec<f64> =
                (0..n_u).map(|i| d_bar[i] - s1[i] - a0 * dm_mu[i] / dt).collect();
            let solver = stepper.factor(k, dt, t1)?;
            solver
                .solve_transpose_in_place(&mut d_mu)
                .map_err(|source| TransientError::Solver { step: k, time, source })?;
            let d_mu_nodal = scatter(&d_mu);
            // The parameters: both ends of the step.
            let d_lambda1: Vec<f64> = d_mu_nodal.iter().map(|m| theta * m).collect();
            subtract(&mut hv, t1, &d_lambda1, &s1_t, &s1_p);
            let mut s0 = vec![0.0; n_u];
            let mut kt_d_mu = vec![0.0; n_u];
            let mut kt_mu = vec![0.0; n_u];
            if theta < 1.0 {
                let c = 1.0 - theta;
                let lambda0: Vec<f64> = mu_nodal.iter().map(|m| c * m).collect();
                let dir0 = Self::with_temperature(&mut d, &tangents.states[k]);
                let (s0_t, s0_p, part0) = model.second_order_vjp(t0, &lambda0, dir0, request);
                part_acc.add_scaled(&part0, -1.0);
                let d_lambda0: Vec<f64> = d_mu_nodal.iter().map(|m| c * m).collect();
                subtract(&mut hv, t0, &d_lambda0, &s0_t, &s0_p);
                s0 = model.dofs.gather(&s0_t);
                kt_d_mu = model.dofs.gather(&model.tangent_transpose_product(t0, &d_lambda0));
                if first_adjoints.is_none() {
                    kt_mu = model.dofs.gather(&model.tangent_transpose_product(t0, &lambda0));
                }
            }
            // The heat capacities: δμᵀ(∂M/∂ρc)w + μᵀ(∂M/∂ρc)δw per element.
            let w = self.rate(k, &traj.temperatures);
            let dw = self.rate(k, &tangents.states);
            let masses = stepper.parts.masses.as_ref();
            let pairs: [(&[f64], &[f64]); 2] = [(&d_mu_nodal, &w), (&mu_nodal, &dw)];
            hv.heat_capacity_elem.par_iter_mut().enumerate().for_each(|(e, hv_e)| {
                *hv_e -= unit_mass_forms(self, masses, e, &pairs);
            });
            if moving || want.coords {
                // The mass's coordinate products, and its heat capacities' share with moving
                // nodes.
                let zero = vec![[0.0; 3]; model.n_nodes()];
                let dx = if moving { dir.steady.coords.as_slice() } else { zero.as_slice() };
                let n_vol = model.n_volume_elements();
                let mut nodal = vec![0.0; 3 * model.n_nodes()];
                let mut units = vec![0.0; model.n_elements()];
                model.scatter_chunked_with_values(&mut nodal, 3, &mut units, |e, local| {
                    if e >= n_vol {
                        return 0.0;
                    }
                    mass_coordinate_second_order(
                        model,
                        e,
                        self.rho_c[e],
                        dir.heat_capacity_elem[e],
                        &mu_nodal,
                        &d_mu_nodal,
                        &w,
                        &dw,
                        dx,
                        local,
                    )
                });
                sub_into(&mut hv.heat_capacity_elem, &units[..n_vol]);
                if let Some(c) = &mut hv.coords {
                    for (cn, l) in c.iter_mut().zip(nodal.chunks_exact(3)) {
                        for i in 0..3 {
                            cn[i] -= l[i];
                        }
                    }
                }
            }
            if !hv.external_source.is_empty() {
                sub_into(&mut hv.external_source, &model.external_source_vjp(&d_mu_nodal));
                sub_into(&mut source_bar, &model.external_source_vjp(&mu_nodal));
                if moving || want.coords {
                    // The source's residual moves with det J (once per step: θ + (1 − θ)).
                    let (per_point, part) = model.external_source_second_order(
                        &mu_nodal,
                        &dir.external_source,
                        &dir.steady.coords,
                        request,
                    );
                    sub_into(&mut hv.external_source, &per_point);
                    part_acc.add_scaled(&part, -1.0);
                }
            }
            // Ū^k and δŪ^k, and the pending seeds of state k − 1 (BDF2); Ū only serves μ,
            // and kept adjoints need none.
            if first_adjoints.is_none() {
                let mut m_mu = vec![0.0; n_u];
                stepper.parts.mass.mul_vec_into(&mu, &mut m_mu);
                bar = (0..n_u).map(|i| pending[i] - a1 * m_mu[i] / dt - kt_mu[i]).collect();
                pending = m_mu.iter().map(|m| -a2 * m / dt).collect();
            }
            let mut m_d_mu = vec![0.0; n_u];
            stepper.parts.mass.mul_vec_into(&d_mu, &mut m_d_mu);
            d_bar = (0..n_u)
                .map(|i| d_pending[i] - a1 * (m_d_mu[i] + dm_mu[i]) / dt - kt_d_mu[i] - s0[i])
                .collect();
            d_pending = (0..n_u).map(|i| -a2 * (m_d_mu[i] + dm_mu[i]) / dt).collect();
        }
        seed(0, &mut bar, &mut d_bar, &mut hv, &mut part_acc)?;
        model.dofs.scatter(&d_bar, &mut hv.initial);
        hv.sum_regions(model);
        stepper.finish();
        Ok((hv, source_bar, part_acc))
    }
}

/// Add `scale` times per-node coordinate derivatives to the product's node coordinates.
fn add_nodal(hv: &mut TransientGradient, v: &[[f64; 3]], scale: f64) {
    if let Some(c) = &mut hv.coords {
        for (a, b) in c.iter_mut().zip(v) {
            for i in 0..3 {
                a[i] += scale * b[i];
            }
        }
    }
}
