//! Hessian-vector products of a load-path objective by the second-order adjoint.
//!
//! Each requested step k is an equilibrium R(u_k; s_k, p) = 0 of its own (dead loads, a
//! path-independent material), so the Hessian of J = Σ_k j_k is a sum over steps with no
//! coupling between them. With the Lagrangian of step k,
//! L_k = j_k(q_k) − λ_kᵀ R_free, q_k = aᵀu + cᵀR_full, and μ_k = j_k' c − λ_k as in the
//! first-order adjoint (module docs of the parent), the product along a direction δp (and a
//! temperature tangent δT) takes, per step:
//!
//! 1. the tangent δu_k: K δu_free = −dR_free/dε at the prescribed tangent δu_c = s_k δū
//!    (one solve with the factorization of K(u_k));
//! 2. the first-order adjoint λ_k (one transposed solve, as in the gradient);
//! 3. the derivative of the seed along the direction: with δq = aᵀδu + cᵀ dR_full and
//!    j'' = 2w for a misfit (0 for a plain sum), a₂ = Σ_t j''_t δq_t a_t (+ 2 w_k δu_k for a
//!    squared displacement), c₂ = Σ_t j''_t δq_t c_t, and the residual's second-order product
//!    g = d/dε ∇_{(u,q)}(μ_kᵀR_full) ([`FiniteStrainModel::second_order_vjp`]);
//! 4. the second-order adjoint ν: Kᵀν = (a₂ + g_u + K_fullᵀc₂)_free, one more solve;
//! 5. H δp += (c₂ − ν)ᵀ ∂R_full/∂q with the prescribed values' chain on a₂ + g_u (the
//!    first-order parameter products at the weight c₂ − ν), plus g_q.
//!
//! Three solves per step on one factorization.
//!
//! Node coordinates (shape parameters) are a direction like the others: the residual's
//! products take δX ([`FiniteDirection::coordinates`]), a reaction's δq = cᵀdR follows, and a
//! point displacement, whose reference point ξ(X) follows the nodes, takes its derivatives
//! along (δu, δX) from [`gradfem_kernel::point_sample_along`]: δq (with −m·∇q), the seed's
//! tangent j′ δN_b d and the coordinates' part j′ (∂q/∂X)′ + j″ δq ∂q/∂X.

use std::time::Instant;

use gradfem_kernel::{PointSample, point_sample_along};
use gradfem_mechanical::MechanicalError;
use gradfem_mechanical::finite::second_order::FiniteDirection;
use gradfem_mechanical::finite::{FiniteStrainModel, FiniteVjpRequest};
use gradfem_mechanical::linear::BcKind;
use gradfem_solvers::params::Gradient;

use super::{
    EquilibriumState, FiniteBinding, FiniteStrainGradient, FiniteStrainProblem,
    FiniteStrainSolveError, LoadPath, LoadPathObjective, PathTerm, PointProbe, Resolved,
    add_squared_displacement_seed, weighted_seeds,
};

impl PointProbe {
    /// The sample q = d·u(X_p) and its first derivatives' tangents along (δu, δX) (full dofs;
    /// `dx` per node, empty: the nodes hold still). Errors: a singular Jacobian at the point.
    fn sample_along(
        &self,
        model: &FiniteStrainModel,
        u: &[f64],
        du: &[f64],
        dx: &[[f64; 3]],
    ) -> Result<PointSample, FiniteStrainSolveError> {
        let d = self.direction;
        let along = |v: &[f64], n: usize| (0..3).map(|i| d[i] * v[3 * n + i]).sum::<f64>();
        let values: Vec<f64> = self.nodes.iter().map(|&n| along(u, n)).collect();
        let d_values: Vec<f64> = self.nodes.iter().map(|&n| along(du, n)).collect();
        let d_coords: Vec<[f64; 3]> =
            self.nodes.iter().map(|&n| dx.get(n).copied().unwrap_or([0.0; 3])).collect();
        point_sample_along(
            &self.shape,
            &self.reference_grads,
            &self.reference_hessians,
            &self.coords,
            &values,
            &d_values,
            &d_coords,
        )
        .ok_or_else(|| {
            let nn = self.coords.len() as f64;
            let e = self.element;
            FiniteStrainSolveError::Model(
                MechanicalError::InvertedCell {
                    cell_tag: model.element_cell_tag(e),
                    cell_type: model.element_cell_type(e),
                    det_j: 0.0,
                    centroid: std::array::from_fn(|i| {
                        self.coords.iter().map(|x| x[i]).sum::<f64>() / nn
                    }),
                }
                .into(),
            )
        })
    }
}

/// A direction of the finite-strain field's inputs: the model's variables and the prescribed
/// displacement values' tangents δū per boundary condition.
#[derive(Clone, Debug, PartialEq)]
pub struct PathDirection {
    /// Material, element field, thermal, load and temperature tangents (its displacement is
    /// ignored: each step's δu is solved for).
    pub model: FiniteDirection,
    /// δū per boundary condition and component (displacement conditions only).
    pub prescribed: Vec<[f64; 3]>,
}

impl FiniteStrainProblem {
    /// The direction of the model's variables that a registry direction `dir` (shaped like
    /// the registry's gradient) and a nodal temperature tangent `temperature` (when the model
    /// has a temperature field; `None` or empty: zero) stand for.
    pub fn path_direction(&self, dir: &Gradient, temperature: Option<&[f64]>) -> PathDirection {
        let m = &self.model;
        let mut d = FiniteDirection::zeros(m);
        let mut prescribed = vec![[0.0; 3]; m.boundaries().len()];
        if let Some(t) = temperature.filter(|t| !t.is_empty()) {
            d.temperature.copy_from_slice(t);
        }
        for (id, binding) in &self.bindings {
            let v = dir.get(*id);
            match binding {
                FiniteBinding::Material { region, index } => d.material[*region][*index] = v[0],
                FiniteBinding::ElementScale(r) => {
                    for (i, &e) in m.regions[*r].elements.iter().enumerate() {
                        d.element_scale[e] = v[i];
                    }
                }
                FiniteBinding::Alpha(r) => d.alpha[*r] = v[0],
                FiniteBinding::TRef(r) => d.t_ref[*r] = v[0],
                FiniteBinding::BodyForce(r) => d.body_force[*r] = [v[0], v[1], v[2]],
                FiniteBinding::Traction(b) => d.traction[*b] = [v[0], v[1], v[2]],
                FiniteBinding::Pressure(b) => d.pressure[*b] = v[0],
                FiniteBinding::Displacement(b, comps) => {
                    for (k, &c) in comps.iter().enumerate() {
                        prescribed[*b][c] = v[k];
                    }
                }
            }
        }
        PathDirection { model: d, prescribed }
    }

    /// δu_k, the tangent of the converged state `st` of step `k` along `dir` (full dofs):
    /// K(u_k) δu_free = −dR_free/dε at δu_c = s_k δū. Factors K(u_k) first.
    pub fn state_tangent(
        &self,
        k: usize,
        st: &EquilibriumState,
        dir: &PathDirection,
    ) -> Result<Vec<f64>, FiniteStrainSolveError> {
        self.factor_tangent_at(k, st, false)?;
        let mut d = dir.model.clone();
        self.solve_state_tangent(k, st, dir, &mut d)?;
        Ok(d.displacement)
    }

    /// δu at the constrained dofs at load factor `load`: s δū for a displacement condition's
    /// components, zero elsewhere (full dofs).
    pub fn prescribed_tangent(&self, load: f64, dir: &PathDirection) -> Vec<f64> {
        let m = &self.model;
        let mut du = vec![0.0; 3 * m.n_nodes()];
        for (dof, owner) in m.constraint_owner().iter().enumerate() {
            if let Some(b) = *owner
                && matches!(m.boundaries()[b].kind, BcKind::Displacement { .. })
            {
                du[dof] = load * dir.prescribed[b][dof % 3];
            }
        }
        du
    }

    /// Fill `d.displacement` with δu_k on the factorization of K(u_k) the workspace holds.
    fn solve_state_tangent(
        &self,
        k: usize,
        st: &EquilibriumState,
        dir: &PathDirection,
        d: &mut FiniteDirection,
    ) -> Result<(), FiniteStrainSolveError> {
        let m = &self.model;
        d.displacement = self.prescribed_tangent(st.load, dir);
        let r = m.residual_jvp(&st.u, st.load, d)?;
        let mut dv: Vec<f64> = m.dofs().gather(&r).into_iter().map(|v| -v).collect();
        self.workspace()
            .solve(&mut dv, false)
            .map_err(|source| FiniteStrainSolveError::Adjoint { step: k + 1, source })?;
        m.dofs().scatter(&dv, &mut d.displacement);
        Ok(())
    }

    /// H·δp of the load-path objective over a solved `path` along `dir` (module docs), in the
    /// layout of the gradient ([`FiniteStrainGradient`]: its `temperature` is the product's
    /// nodal temperature part, the seed of the upstream fields' second-order adjoint); `want`
    /// selects the parameter products as for the gradient (node coordinates included).
    pub fn hessian_vector_from_path(
        &self,
        path: &LoadPath,
        objective: &LoadPathObjective,
        dir: &PathDirection,
        want: FiniteVjpRequest,
    ) -> Result<FiniteStrainGradient, FiniteStrainSolveError> {
        let mut hv =
            self.hessian_vectors_from_path(path, objective, std::slice::from_ref(dir), want)?;
        Ok(hv.pop().expect("one product per direction"))
    }

    /// [`Self::hessian_vector_from_path`] along several directions at once: each step is
    /// factorized and its first-order adjoint solved once for all of them (a dense Hessian's
    /// columns, the Laplace posterior of an identification).
    pub fn hessian_vectors_from_path(
        &self,
        path: &LoadPath,
        objective: &LoadPathObjective,
        dirs: &[PathDirection],
        want: FiniteVjpRequest,
    ) -> Result<Vec<FiniteStrainGradient>, FiniteStrainSolveError> {
        let n = path.states.len();
        let resolved = self.resolve(objective, n)?;
        let mut hvs: Vec<FiniteStrainGradient> =
            dirs.iter().map(|_| FiniteStrainGradient::zeros(&self.model)).collect();
        let t = Instant::now();
        for k in (0..n).rev() {
            self.step_hessian_vectors(
                objective,
                &resolved,
                k,
                &path.states[k],
                dirs,
                want,
                &mut hvs,
            )?;
        }
        let seconds = t.elapsed().as_secs_f64();
        for hv in &mut hvs {
            hv.time_adjoint_s = seconds;
        }
        tracing::debug!(
            steps = n,
            directions = dirs.len(),
            seconds,
            "finite strain Hessian-vector products"
        );
        Ok(hvs)
    }

    /// Step k's part of H·δp for every direction, added into `hvs` (module docs: per direction
    /// two solves, after one factorization and one first-order adjoint for all).
    #[allow(clippy::too_many_arguments)]
    fn step_hessian_vectors(
        &self,
        objective: &LoadPathObjective,
        resolved: &[Resolved],
        k: usize,
        st: &EquilibriumState,
        dirs: &[PathDirection],
        want: FiniteVjpRequest,
        hvs: &mut [FiniteStrainGradient],
    ) -> Result<(), FiniteStrainSolveError> {
        let m = &self.model;
        let nf = 3 * m.n_nodes();
        let weighs_step = objective.terms.iter().any(|t| match t {
            PathTerm::Sum { weight, .. } | PathTerm::Misfit { weight, .. } => *weight != 0.0,
            PathTerm::SquaredDisplacement { weights } => weights[k] != 0.0,
        });
        if !weighs_step {
            return Ok(());
        }
        let (_, _, dq) = self.step_terms(objective, resolved, k, st)?;
        self.factor_tangent_at(k, st, false)?;
        // The first-order adjoint: μ = c − λ.
        let (mut a, c) = weighted_seeds(resolved, &dq, nf);
        add_squared_displacement_seed(objective, k, &st.u, &mut a);
        let mu = self.adjoint_weight(k, st, &a, &c)?;
        for (dir, hv) in dirs.iter().zip(hvs.iter_mut()) {
            self.step_direction(objective, resolved, k, st, &dq, &mu, dir, want, hv)?;
        }
        Ok(())
    }

    /// One direction's part of step k, on the factorization of K(u_k), the terms' first-order
    /// weights `dq` (j′) and the first-order weight `mu` (module docs, steps 1 and 3–5).
    #[allow(clippy::too_many_arguments)]
    fn step_direction(
        &self,
        objective: &LoadPathObjective,
        resolved: &[Resolved],
        k: usize,
        st: &EquilibriumState,
        dq: &[f64],
        mu: &[f64],
        dir: &PathDirection,
        want: FiniteVjpRequest,
        hv: &mut FiniteStrainGradient,
    ) -> Result<(), FiniteStrainSolveError> {
        let m = &self.model;
        let nf = 3 * m.n_nodes();
        // 1. The tangent δu_k.
        let mut d = dir.model.clone();
        self.solve_state_tangent(k, st, dir, &mut d)?;
        // 3. The seed's derivative along the direction.
        let j2: Vec<f64> = objective
            .terms
            .iter()
            .map(|t| match t {
                PathTerm::Misfit { weight, .. } => 2.0 * weight,
                _ => 0.0,
            })
            .collect();
        let residual_tangent =
            if resolved.iter().zip(&j2).any(|(r, w)| *w != 0.0 && !r.c.is_empty()) {
                Some(m.residual_jvp(&st.u, st.load, &d)?)
            } else {
                None
            };
        // Point displacements move with the nodes' motion through ξ(X).
        let samples = resolved
            .iter()
            .map(|res| {
                res.probe
                    .as_ref()
                    .map(|p| p.sample_along(m, &st.u, &d.displacement, &d.coordinates))
                    .transpose()
            })
            .collect::<Result<Vec<_>, _>>()?;
        // j″_t δq_t per term.
        let dq2: Vec<f64> = resolved
            .iter()
            .zip(&j2)
            .zip(&samples)
            .map(|((res, &w), sample)| {
                if w == 0.0 {
                    return 0.0;
                }
                let mut dq = match sample {
                    Some(s) => s.d_value,
                    None => res.a.iter().map(|&(i, v)| v * d.displacement[i]).sum::<f64>(),
                };
                if let Some(dr) = &residual_tangent {
                    dq += res.c.iter().map(|&(i, v)| v * dr[i]).sum::<f64>();
                }
                w * dq
            })
            .collect();
        let (mut a2, c2) = weighted_seeds(resolved, &dq2, nf);
        add_squared_displacement_seed(objective, k, &d.displacement, &mut a2);
        for (((res, sample), &j1), &j2dq) in resolved.iter().zip(&samples).zip(dq).zip(&dq2) {
            let (Some(p), Some(s)) = (&res.probe, sample) else { continue };
            // j′ δa (a_b = N_b d) and j′ (∂q/∂X)′ + j″δq ∂q/∂X.
            for (&n, v) in p.nodes.iter().zip(s.value_part(&p.shape, j1, 0.0)) {
                for i in 0..3 {
                    a2[3 * n + i] += v * p.direction[i];
                }
            }
            if want.coords {
                for (&n, v) in p.nodes.iter().zip(s.coordinate_part(&p.shape, j1, j2dq)) {
                    for i in 0..3 {
                        hv.coords[n][i] += v[i];
                    }
                }
            }
        }
        if mu.iter().any(|v| *v != 0.0) {
            let so = m.second_order_vjp(&st.u, st.load, mu, &d, want)?;
            a2.iter_mut().zip(&so.displacement).for_each(|(x, y)| *x += y);
            let p = &so.parameters;
            for (gr, vr) in hv.material.iter_mut().zip(&p.material) {
                gr.iter_mut().zip(vr).for_each(|(x, y)| *x += y);
            }
            hv.element_scale.iter_mut().zip(&p.element_scale).for_each(|(x, y)| *x += y);
            for r in 0..p.alpha.len() {
                hv.alpha[r] += p.alpha[r];
                hv.t_ref[r] += p.t_ref[r];
                for i in 0..3 {
                    hv.body_force[r][i] += p.body_force[r][i];
                }
            }
            for b in 0..p.pressure.len() {
                hv.pressure[b] += p.pressure[b];
                for i in 0..3 {
                    hv.traction[b][i] += p.traction[b][i];
                }
            }
            if let (Some(h), Some(t)) = (&mut hv.temperature, &p.temperature) {
                h.iter_mut().zip(t).for_each(|(x, y)| *x += y);
            }
            if let Some(c) = &p.coords {
                for (h, v) in hv.coords.iter_mut().zip(c) {
                    for i in 0..3 {
                        h[i] += v[i];
                    }
                }
            }
        }
        // 4.–5. The second-order adjoint and its parameter products.
        if a2.iter().chain(&c2).any(|v| *v != 0.0) {
            let mu2 = self.adjoint_weight(k, st, &a2, &c2)?;
            self.add_parameter_products(st, &a2, &mu2, want, hv)?;
        }
        Ok(())
    }

    /// c − λ (full dofs, λ zero at constrained dofs) for K(u_k)ᵀλ = (a + K_fullᵀc)_free, on the
    /// factorization the workspace holds.
    fn adjoint_weight(
        &self,
        k: usize,
        st: &EquilibriumState,
        a: &[f64],
        c: &[f64],
    ) -> Result<Vec<f64>, FiniteStrainSolveError> {
        let m = &self.model;
        let mut rhs_full = a.to_vec();
        if c.iter().any(|v| *v != 0.0) {
            let kc = m.tangent_transpose_product(&st.u, st.load, c)?;
            rhs_full.iter_mut().zip(&kc).for_each(|(r, v)| *r += v);
        }
        let mut lambda = m.dofs().gather(&rhs_full);
        self.workspace()
            .solve(&mut lambda, true)
            .map_err(|source| FiniteStrainSolveError::Adjoint { step: k + 1, source })?;
        let mut lam_full = vec![0.0; a.len()];
        m.dofs().scatter(&lambda, &mut lam_full);
        Ok(c.iter().zip(&lam_full).map(|(c, l)| c - l).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gradfem_mechanical::finite::HyperelasticLaw;
    use gradfem_mechanical::hyperelastic::Ogden;
    use gradfem_mesh::CellType;
    use gradfem_solvers::checkpoint::Checkpointing;

    use crate::fields::finite_strain::Quantity;
    use crate::fields::finite_strain::tests::pulled_block;

    /// An Ogden block pulled by a dead traction in two load steps, with the squared-norm
    /// objective of the peers' ogden3d benchmark (weights on both steps) and a misfit of the
    /// clamp's reaction.
    fn problem() -> (FiniteStrainProblem, Vec<f64>, LoadPathObjective) {
        let law = HyperelasticLaw::Ogden(Ogden::new(&[(1.0, 3.0)], 10.0));
        let problem = pulled_block(2, CellType::Tet4, law, [0.5, 0.1, 0.0]);
        let objective = LoadPathObjective {
            terms: vec![
                PathTerm::SquaredDisplacement { weights: vec![0.5, 1.0] },
                PathTerm::Misfit {
                    quantity: Quantity::Reaction {
                        group: "xmin".into(),
                        direction: [-1.0, 0.0, 0.0],
                    },
                    measured: vec![0.2, 0.45],
                    weight: 3.0,
                },
            ],
        };
        (problem, vec![0.5, 1.0], objective)
    }

    /// dJ/dp of the law parameters (μ₁, α₁, κ) at the model's current parameters.
    fn material_gradient(
        p: &FiniteStrainProblem,
        loads: &[f64],
        o: &LoadPathObjective,
    ) -> Vec<f64> {
        let want = FiniteVjpRequest::MATERIAL;
        p.gradient(loads, o, Checkpointing::StoreAll, want).unwrap().material[0].clone()
    }

    #[test]
    fn squared_norm_and_reaction_misfit_products_are_differences_of_gradients() {
        let (mut p, loads, objective) = problem();
        let p0 = p.model.region_parameters(0);
        let dp = [0.1, -0.2, 0.5];
        let mut dir = PathDirection {
            model: FiniteDirection::zeros(&p.model),
            prescribed: vec![[0.0; 3]; p.model.boundaries().len()],
        };
        dir.model.material[0].copy_from_slice(&dp);
        let path = p.solve_from(p.initial_state(&loads), &loads, true).unwrap();
        let want = FiniteVjpRequest::MATERIAL;
        let hv =
            p.hessian_vector_from_path(&path, &objective, &dir, want).unwrap().material[0].clone();
        let h = 1e-5;
        let mut at = |s: f64| {
            let q: Vec<f64> = p0.iter().zip(&dp).map(|(a, b)| a + s * b).collect();
            p.model.set_region_parameters(0, &q).unwrap();
            material_gradient(&p, &loads, &objective)
        };
        let (gp, gm) = (at(h), at(-h));
        let scale = hv.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(scale > 0.0);
        for k in 0..3 {
            let fd = (gp[k] - gm[k]) / (2.0 * h);
            assert!((hv[k] - fd).abs() <= 1e-6 * scale, "entry {k}: H·δp {} vs {fd}", hv[k]);
        }
    }
}
