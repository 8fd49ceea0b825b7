//! Second order: Hessian-vector products of the objective by the second-order adjoint
//! (forward over reverse: a tangent-linear solve along the direction, then the adjoint of the
//! linearized adjoint), the dense Hessian by repeated products, and the second-order Taylor
//! test that checks them.
//!
//! Covered so far: a problem of one steady field that has [`crate::field::SecondOrder`] (the
//! thermal field, with k(T), sources, fixed temperatures, convection and heat flux as
//! parameters, scalar or per element). Coupled graphs, time stepping and shape parameters are
//! refused with a message naming what is missing.

use gradfem_solvers::params::{Gradient, ParamRegistry, ParamVector};
use serde::Serialize;

use crate::error::RunError;
use crate::field::Reverse;
use crate::problem::CoupledProblem;

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
fn shaped(reg: &ParamRegistry, flat: &[f64]) -> Result<Gradient, RunError> {
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

impl CoupledProblem {
    /// Whether Hessian-vector products are available for this problem: `Ok` or the reason
    /// they are not (what is not covered yet), checked without solving.
    pub fn second_order_support(&self) -> Result<(), RunError> {
        let i = self.second_order_field()?;
        let name = self.field_names()[i].clone();
        if !self.fields()[i].has_second_order() {
            return Err(RunError::Setup(format!(
                "the {name} field has no second-order products yet"
            )));
        }
        if self.shape().is_active() {
            return Err(RunError::Setup(
                "Hessian-vector products with respect to node coordinates (shape parameters) \
                 are not available yet"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Refuse the problems second order does not cover yet; the index of the one field.
    fn second_order_field(&self) -> Result<usize, RunError> {
        if self.is_transient() {
            return Err(RunError::Setup(
                "Hessian-vector products of problems stepped in time are not available yet".into(),
            ));
        }
        if self.fields().len() != 1 || !self.transfers().is_empty() {
            return Err(RunError::Setup(format!(
                "Hessian-vector products are available for a problem of one field so far; \
                 this one couples {}",
                self.field_names().join(", ")
            )));
        }
        Ok(0)
    }

    /// H·δp: the Hessian of the objective applied to the parameter direction `dir` (shaped
    /// like the gradient), by one tangent-linear and one second-order adjoint solve on the
    /// factorization of the last solve (solved first when needed).
    pub fn hessian_vector(&mut self, dir: &Gradient) -> Result<Gradient, RunError> {
        let i = self.second_order_field()?;
        if !self.is_solved() {
            self.solve()?;
        }
        let mut hv = Gradient::zeros(self.registry());
        let name = self.field_names()[i].clone();
        let (registry, shape, fields) = self.parts_and_fields();
        let mut rev = Reverse { registry, shape, grad: &mut hv };
        let second = fields[i].second_order().ok_or_else(|| {
            RunError::Setup(format!("the {name} field has no second-order products yet"))
        })?;
        second.hessian_vector(dir, &mut rev)?;
        Ok(hv)
    }

    /// The directional derivative of the state (nodal) along a parameter direction `dir`
    /// (flat, the order of [`ParamVector::all`]): one tangent-linear solve on the
    /// factorization of the last solve.
    pub fn tangent_flat(&mut self, dir: &[f64]) -> Result<Vec<f64>, RunError> {
        let i = self.second_order_field()?;
        if !self.is_solved() {
            self.solve()?;
        }
        let d = shaped(self.registry(), dir)?;
        let name = self.field_names()[i].clone();
        let (registry, _, fields) = self.parts_and_fields();
        let second = fields[i].second_order().ok_or_else(|| {
            RunError::Setup(format!("the {name} field has no second-order products yet"))
        })?;
        second.tangent(&d, registry)
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
