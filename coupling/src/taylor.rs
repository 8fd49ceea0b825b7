//! Taylor tests of the whole problem's gradient: over every registered parameter at once,
//! and per parameter, in seeded directions scaled by each entry's magnitude. Each leaves the
//! problem as it found it (parameters, and the converged states as Newton's start).

use gradfem_solvers::params::{ParamKind, ParamRegistry, ParamVector};
use serde::Serialize;

use crate::error::RunError;
use crate::problem::CoupledProblem;
use crate::shape::Shape;

impl CoupledProblem {
    /// Newton's start of every field (see [`crate::Field::warm_start`]).
    pub fn warm_starts(&self) -> Vec<Vec<f64>> {
        self.fields().iter().map(|f| f.warm_start()).collect()
    }

    /// Restore the starts taken by [`warm_starts`](Self::warm_starts).
    pub fn set_warm_starts(&mut self, starts: Vec<Vec<f64>>) {
        for (f, s) in self.fields_mut().iter_mut().zip(starts) {
            if !s.is_empty() {
                f.set_warm_start(s);
            }
        }
    }

    /// Taylor test over every registered parameter; leaves the problem as it was.
    pub fn taylor_test(
        &mut self,
        params: &gradfem_solvers::taylor::TaylorParams,
        mut progress: impl FnMut(usize),
    ) -> Result<gradfem_solvers::taylor::TaylorResult, RunError> {
        let pv = ParamVector::all(self.registry());
        let (_, grad, _) = self.gradient()?;
        let g = grad.flatten(&pv);
        let m0 = pv.gather(self.registry());
        let dm = direction(&m0, &pv, self.registry(), self.shape());
        let starts = self.warm_starts();
        let mut reg = std::mem::take(self.registry_mut());
        let mut count = 0;
        let result = gradfem_solvers::taylor::taylor_test_registry(
            &mut reg,
            &pv,
            &g,
            &dm,
            params,
            |r: &ParamRegistry| -> Result<f64, RunError> {
                *self.registry_mut() = r.clone();
                self.apply_parameters()?;
                count += 1;
                progress(count);
                Ok(self.objective_terms()?.0)
            },
        );
        // Restore the problem exactly: parameters, and the converged states as Newton's start,
        // so the final solve takes no step and only refactors at the solution.
        *self.registry_mut() = reg;
        self.apply_parameters()?;
        self.set_warm_starts(starts);
        self.solve()?;
        result
    }

    /// The direction of the combined Taylor test of [`taylor_test`](Self::taylor_test), over
    /// every registered entry in registration order (see [`TAYLOR_DIRECTION_SEED`]).
    pub fn taylor_direction(&self) -> Vec<f64> {
        let pv = ParamVector::all(self.registry());
        let m0 = pv.gather(self.registry());
        direction(&m0, &pv, self.registry(), self.shape())
    }

    /// How the combined Taylor test's direction was drawn: seed, scaling, its 2-norm, `h0`.
    pub fn taylor_direction_report(
        &self,
        params: &gradfem_solvers::taylor::TaylorParams,
    ) -> TaylorDirection {
        let d = self.taylor_direction();
        TaylorDirection {
            seed: Some(TAYLOR_DIRECTION_SEED),
            scaling: COMBINED_SCALING.to_string(),
            norm: norm2(&d),
            h0: params.h0,
            step: None,
        }
    }

    /// Taylor tests of every registered parameter on its own (`gradfem check-gradient
    /// --per-parameter`): the adjoint gradient, then one test per parameter along the combined
    /// direction restricted to it — for a scalar the full step ±h0·s (s its magnitude, as in
    /// the combined direction), for a vector parameter (node coordinates, a per-element field)
    /// the seeded random entries of its block. Leaves the problem as it was.
    pub fn taylor_test_per_parameter(
        &mut self,
        params: &gradfem_solvers::taylor::TaylorParams,
        progress: impl FnMut(usize),
    ) -> Result<Vec<ParameterTaylor>, RunError> {
        let (_, grad, _) = self.gradient()?;
        let pv = ParamVector::all(self.registry());
        let g = grad.flatten(&pv);
        self.taylor_test_gradient_per_parameter(&g, params, progress)
    }

    /// [`taylor_test_per_parameter`](Self::taylor_test_per_parameter) of a given gradient
    /// `grad`, flat in the order of `ParamVector::all` ([`gradfem_solvers::params::Gradient::flatten`]) — to check a
    /// gradient computed elsewhere. An error when its length is not the registry's. Each test
    /// evaluates `h0`'s `steps` points; `progress` sees the count of forward evaluations
    /// (1 + parameters × steps in all).
    pub fn taylor_test_gradient_per_parameter(
        &mut self,
        grad: &[f64],
        params: &gradfem_solvers::taylor::TaylorParams,
        mut progress: impl FnMut(usize),
    ) -> Result<Vec<ParameterTaylor>, RunError> {
        use gradfem_solvers::taylor::{
            TaylorPart, direction_within_bounds, random_direction, restrict,
            taylor_test_parts_registry,
        };
        if !(params.h0 > 0.0 && params.h0.is_finite()) || params.steps < 2 {
            return Err(RunError::Setup(format!(
                "Taylor test: h0 = {} must be a positive number and steps = {} at least 2",
                params.h0, params.steps
            )));
        }
        let pv = ParamVector::all(self.registry());
        if grad.len() != pv.len() {
            return Err(RunError::Setup(format!(
                "Taylor test: the gradient has {} entries, the registered parameters {}",
                grad.len(),
                pv.len()
            )));
        }
        if !self.is_solved() {
            self.solve()?;
        }
        let m0 = pv.gather(self.registry());
        let d = self.taylor_direction();
        let u = random_direction(m0.len(), TAYLOR_DIRECTION_SEED);
        let (lo, hi) = pv.bounds();
        let mut parts = Vec::new();
        let mut described = Vec::new();
        for &id in pv.ids() {
            let spec = self.registry().get(id);
            let range = pv.range(id).expect("in the vector");
            let mut dm = restrict(&d, range.clone());
            let scalar = matches!(spec.kind, ParamKind::Scalar) && range.len() == 1;
            if scalar {
                // The whole scale s of the entry, with the random entry's sign: d = u s.
                let i = range.start;
                dm[i] = if u[i] != 0.0 {
                    d[i] / u[i].abs()
                } else if m0[i] != 0.0 {
                    m0[i].abs()
                } else {
                    1e-3
                };
            }
            let dm = direction_within_bounds(&m0, &dm, &lo, &hi, params.h0);
            let direction = if scalar {
                TaylorDirection {
                    seed: None,
                    scaling: SCALAR_SCALING.to_string(),
                    norm: norm2(&dm),
                    h0: params.h0,
                    step: Some(params.h0 * dm[range.start]),
                }
            } else {
                TaylorDirection {
                    seed: Some(TAYLOR_DIRECTION_SEED),
                    scaling: if matches!(spec.kind, ParamKind::NodeCoordinates) {
                        COORDINATE_SCALING.to_string()
                    } else {
                        BLOCK_SCALING.to_string()
                    },
                    norm: norm2(&dm),
                    h0: params.h0,
                    step: None,
                }
            };
            described.push((spec.name.clone(), spec.kind.to_string(), range.len(), direction));
            parts.push(TaylorPart { name: spec.name.clone(), dm });
        }
        // Newton starts from the converged state at every evaluation (and at the final solve),
        // so the evaluations differ by the parameters only.
        let converged = self.warm_starts();
        let mut reg = std::mem::take(self.registry_mut());
        let mut count = 0;
        let results = taylor_test_parts_registry(
            &mut reg,
            &pv,
            grad,
            &parts,
            params,
            |r: &ParamRegistry| -> Result<f64, RunError> {
                *self.registry_mut() = r.clone();
                self.set_warm_starts(converged.clone());
                self.apply_parameters()?;
                count += 1;
                progress(count);
                Ok(self.objective_terms()?.0)
            },
        );
        *self.registry_mut() = reg;
        self.apply_parameters()?;
        self.set_warm_starts(converged);
        self.solve()?;
        Ok(described
            .into_iter()
            .zip(results?)
            .map(|((name, kind, entries, direction), result)| ParameterTaylor {
                name,
                kind,
                entries,
                direction,
                dj_dm: result.dj_dm,
                remainders: result.remainders.clone(),
                rates: result.rates.clone(),
                rates_zeroth: result.rates_zeroth.clone(),
                rates_used: result.rates_used,
                observed_min_rate: result.min_rate(),
                min_rate: result.threshold,
                passed: result.passed,
                verdict: result.verdict().to_string(),
                note: result.note.clone(),
                result,
            })
            .collect())
    }
}

/// The seed of the Taylor directions of `gradfem check-gradient`: the combined direction
/// ([`direction`]) draws its entries u_i ∈ [−1, 1) from SplitMix64 with it
/// ([`gradfem_solvers::taylor::random_direction`]), and the per-parameter directions are its
/// restrictions.
pub const TAYLOR_DIRECTION_SEED: u64 = 7;

/// How the combined direction is scaled (see [`direction`]).
const COMBINED_SCALING: &str = "dm_i = u_i s_i: s_i = |m_i|, 1e-3 where m_i = 0 (a morph at 0: \
     its move of a thousandth of the mesh size), node coordinates: 1e-3 of their range";
/// How a scalar's direction is scaled.
const SCALAR_SCALING: &str =
    "dm = ±s: s = |m|, 1e-3 where m = 0 (a morph at 0: its move of a thousandth of the mesh size)";
/// How the block of a vector parameter is scaled.
const BLOCK_SCALING: &str =
    "dm_i = u_i s_i on the block, 0 elsewhere: s_i = |m_i|, 1e-3 where m_i = 0";
/// How the block of the node coordinates is scaled.
const COORDINATE_SCALING: &str =
    "dm_i = u_i s on the block, 0 elsewhere: s = 1e-3 of the coordinates' range";

fn norm2(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// How the direction `dm` of a Taylor test was drawn (`gradfem check-gradient` reports it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaylorDirection {
    /// Seed of the pseudo-random entries u_i ∈ [−1, 1) ([`TAYLOR_DIRECTION_SEED`]); `None` for
    /// a scalar, stepped by its whole scale.
    pub seed: Option<u64>,
    /// How the entries are scaled.
    pub scaling: String,
    /// ‖dm‖₂.
    pub norm: f64,
    /// The first step: the points are m + h_i dm with h_i = h0 / 2^i.
    pub h0: f64,
    /// For a scalar: the first perturbation h0·dm of its value (in its unit); `None` for the
    /// others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<f64>,
}

/// The Taylor test of one registered parameter in a direction of its own
/// ([`CoupledProblem::taylor_test_per_parameter`]); serialized for `check-gradient --json`.
#[derive(Clone, Debug, Serialize)]
pub struct ParameterTaylor {
    /// Registry name.
    pub name: String,
    /// Its kind (`scalar`, `node coordinates`, `per-element (group)`, `field`).
    pub kind: String,
    /// Number of entries.
    pub entries: usize,
    /// The direction it was tested in.
    pub direction: TaylorDirection,
    /// ⟨∇J, dm⟩ from the gradient under test.
    pub dj_dm: f64,
    /// First-order remainders |J(m + h_i dm) − J(m) − h_i dJ|, one per step h_i = h0 / 2^i.
    pub remainders: Vec<f64>,
    /// Observed rates of the first-order remainder (2 for a right gradient).
    pub rates: Vec<f64>,
    /// Observed rates of the zeroth-order remainder (1).
    pub rates_zeroth: Vec<f64>,
    /// How many leading rates entered the decision (those before round-off).
    pub rates_used: usize,
    /// The smallest rate among those used (`null` in JSON when none could be measured).
    pub observed_min_rate: f64,
    /// The threshold: the smallest rate that passes (`[taylor] min_rate`).
    pub min_rate: f64,
    /// Whether the parameter's derivative passed.
    pub passed: bool,
    /// `passed`, `passed (remainders at round-off)`, `gradient zero, residual at round-off`
    /// or `FAILED`.
    pub verdict: String,
    /// Why the decision was not a plain comparison of rates, if so.
    pub note: Option<String>,
    /// The whole test, for its table.
    #[serde(skip)]
    pub result: gradfem_solvers::taylor::TaylorResult,
}

/// A deterministic Taylor direction: pseudo-random entries in [−1, 1] scaled by each entry's
/// magnitude (10⁻³ for a zero entry; for coordinates: a thousandth of the mesh size, so the
/// mesh is not inverted; for a morph at value 0: a move of the nodes by a thousandth of the
/// mesh size).
pub fn direction(
    m0: &[f64],
    pv: &gradfem_solvers::params::ParamVector,
    reg: &ParamRegistry,
    shape: &Shape,
) -> Vec<f64> {
    let mut d = gradfem_solvers::taylor::random_direction(m0.len(), 7);
    for id in pv.ids() {
        let range = pv.range(*id).expect("in vector");
        let spec = reg.get(*id);
        let scale = if matches!(spec.kind, ParamKind::NodeCoordinates) {
            // A fraction of the bounding-box size.
            let (lo, hi) = spec
                .values
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
            (hi - lo) * 1e-3
        } else {
            0.0
        };
        let morph = spec.name.strip_prefix("morph.").and_then(|m| shape.morph_scale(m));
        for i in range {
            let s = if scale > 0.0 {
                scale
            } else if m0[i] != 0.0 {
                m0[i].abs()
            } else {
                morph.unwrap_or(1e-3)
            };
            d[i] *= s;
        }
    }
    d
}
