//! The solver of a symmetric positive definite field system, chosen by predicted cost: sparse
//! Cholesky or AMG-preconditioned CG ([`SpdSolver`]), and the adjoint of a self-adjoint solve
//! without a second solve.
//!
//! # Routing by cost
//!
//! At the first factorization of a pattern [`SpdSolver`] under [`Route::Auto`] compares the
//! predicted seconds of the two routes for one factorization, one forward solve and one adjoint
//! solve ([`CostModel`]):
//!
//! ```text
//! Cholesky:  t_analysis + F / r_factor + 2 · 2 nnz(L) / r_solve   (F multiply-adds, nnz(L))
//! AMG-CG:    nnz(A) · (s_setup + i · s_iteration)                 (i predicted iterations)
//! ```
//!
//! F and nnz(L) are the symbolic factorization's own counts (the analysis the factorization
//! would use, kept when Cholesky is chosen), and the rates and per-entry costs are measured on
//! this machine (`examples/route_calibration.rs`, see the constants); the Cholesky route also
//! pays its analyses (AMD, and nested dissection's where it is tried), predicted per matrix
//! entry. An analysis costs about as much per matrix entry as a few CG iterations (and the
//! memory of L), so it is skipped when a cheap prediction already rules Cholesky out: a
//! breadth-first level structure from a pseudo-peripheral unknown gives a separator (the
//! smallest level among those that leave at least a quarter of the unknowns on either side,
//! George and Liu's level-structure separator); an elimination order whose last s unknowns are
//! that separator pays at least s³/3 multiply-adds for its dense final block, and the measured
//! factorizations paid 0.7–1.3 s³. Cholesky is ruled out when the AMD analysis and
//! [`SEPARATOR_FLOPS`] · s³ multiply-adds already take longer than the AMG route. Nested
//! dissection is analysed too where AMD's factorization loses and nested dissection's could
//! still win.
//!
//! The decision depends on the pattern and the fixed constants only, never on timings taken at
//! run time or the thread count, so a run routes the same way every time.
//!
//! # Self-adjoint solves
//!
//! For a symmetric A, Aᵀλ = c b is solved by λ = c x when A x = b was the last forward solve:
//! the adjoint of the compliance fᵀu is the displacement, and any objective whose adjoint
//! right-hand side is a multiple of the load likewise. [`SpdSolver`] keeps the last forward
//! right-hand side and solution until the next factorization, and a transposed solve whose
//! right-hand side equals c times that right-hand side to rounding (componentwise within
//! [`SELF_ADJOINT_TOL`]) returns c x without solving.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::amg::{AmgCgSolver, AmgParams, CoarseSpace, NearNullspace};
use crate::cg::CgParams;
use crate::error::SolverError;
use crate::linear::{CholeskyOrdering, CholeskySolver, LinearSolver};
use crate::ordering::AUTO_MIN_FLOPS;
use crate::sparse::CsrMatrix;

/// Which solver an [`SpdSolver`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The cheaper of the two by [`CostModel`], decided at the first factorization of a
    /// pattern.
    Auto,
    /// Sparse Cholesky (faer).
    Cholesky,
    /// AMG-preconditioned CG.
    AmgCg,
}

/// Measured costs of the two routes on the project machine (2 cores, 24 GiB): the rates and
/// per-entry costs of `cargo run --release -p gradfem-solvers --example route_calibration`
/// (heat3d N = 10–32, elastic3d N = 10–26, re-run on a quiet machine on 2026-12-07; see
/// BENCHMARKS.md), rounded. "Vector" means nodes of several unknowns with a near-nullspace
/// (elasticity), "scalar" one unknown per node.
#[derive(Clone, Debug, PartialEq)]
pub struct CostModel {
    /// Multiply-adds per second of the sequential numeric Cholesky factorization (measured
    /// 2.1–3.4·10¹⁰ from 10⁸ multiply-adds on; smaller factorizations run slower, which the
    /// model ignores: there the analysis and the solves decide).
    pub factor_rate: f64,
    /// Multiply-adds per second of a pair of triangular solves (2 nnz(L) per solve; measured
    /// 2.1–2.2·10⁹ past the caches, up to 6.5·10⁹ inside them).
    pub solve_rate: f64,
    /// AMD analysis seconds per entry of A (scalar: 5.7–8.4·10⁻⁸).
    pub amd_scalar: f64,
    /// AMD analysis seconds per entry of A, nodes of several unknowns (2.7–5.5·10⁻⁸).
    pub amd_vector: f64,
    /// Nested-dissection analysis (METIS on the node graph, then faer's symbolic factorization)
    /// seconds per entry of A, scalar (2.9–4.8·10⁻⁷).
    pub nd_scalar: f64,
    /// The same, nodes of three unknowns (3.6–7.4·10⁻⁸).
    pub nd_vector: f64,
    /// AMG set-up seconds per entry of A, scalar (3.9–7.7·10⁻⁸).
    pub amg_setup_scalar: f64,
    /// AMG set-up seconds per entry of A, aggregation of nodes with a near-nullspace
    /// (7.8–9.9·10⁻⁸).
    pub amg_setup_vector: f64,
    /// Seconds of one CG iteration (V-cycle included) per entry of A, scalar (2.6–5.5·10⁻⁹).
    pub amg_iteration_scalar: f64,
    /// Seconds of one CG iteration per entry of A with a near-nullspace (1.9–2.5·10⁻⁹).
    pub amg_iteration_vector: f64,
    /// AMG set-up seconds per entry of A when the hierarchy starts from a given coarse space
    /// (p-multigrid of quadratic elasticity: the aggregation runs on the vertices' operator,
    /// which has a tenth of A's entries). Measured 2.0–2.5·10⁻⁸ on Tet10 cubes of 1.4–7·10⁴
    /// unknowns (2026-12-07, the same quiet machine).
    pub amg_setup_coarse_space: f64,
    /// Seconds of one CG iteration per entry of A with a given coarse space (measured
    /// 1.2–2.0·10⁻⁹).
    pub amg_iteration_coarse_space: f64,
    /// Predicted CG iterations of a forward solve to 1e-10 and an adjoint to 1e-7, scalar
    /// (3D P1 Poisson: 11–12 + 7–8).
    pub iterations_scalar: f64,
    /// The same with the rigid-body modes (3D P1 elasticity: 18–26 + 13–19).
    pub iterations_vector: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            factor_rate: 2.8e10,
            solve_rate: 2.2e9,
            amd_scalar: 7.0e-8,
            amd_vector: 4.5e-8,
            nd_scalar: 4.0e-7,
            nd_vector: 6.0e-8,
            amg_setup_scalar: 5.5e-8,
            amg_setup_vector: 9.0e-8,
            amg_iteration_scalar: 4.0e-9,
            amg_iteration_vector: 2.3e-9,
            amg_setup_coarse_space: 2.3e-8,
            amg_iteration_coarse_space: 1.6e-9,
            iterations_scalar: 20.0,
            iterations_vector: 40.0,
        }
    }
}

impl CostModel {
    /// Predicted seconds of an analysis of a matrix of `nnz` entries (`nested`: nested
    /// dissection, else AMD; `vector`: nodes of several unknowns).
    pub fn analysis_seconds(&self, nnz: usize, nested: bool, vector: bool) -> f64 {
        let per = match (nested, vector) {
            (false, false) => self.amd_scalar,
            (false, true) => self.amd_vector,
            (true, false) => self.nd_scalar,
            (true, true) => self.nd_vector,
        };
        per * nnz as f64
    }

    /// Predicted seconds of a numeric factorization of `flops` multiply-adds and `solves`
    /// solves with a factor of `nnz_l` entries (the analysis apart).
    pub fn cholesky_seconds(&self, flops: f64, nnz_l: usize, solves: f64) -> f64 {
        flops / self.factor_rate + solves * 2.0 * nnz_l as f64 / self.solve_rate
    }

    /// Predicted seconds of `iterations` CG iterations on a matrix of `nnz` entries.
    pub fn cg_seconds(&self, nnz: usize, iterations: f64, start: AmgStart) -> f64 {
        let per = match start {
            AmgStart::Scalar => self.amg_iteration_scalar,
            AmgStart::NearNullspace => self.amg_iteration_vector,
            AmgStart::CoarseSpace => self.amg_iteration_coarse_space,
        };
        nnz as f64 * iterations * per
    }

    /// Predicted seconds of the AMG-CG route for a matrix of `nnz` entries: set-up and
    /// `solves` CG solves, half of them forward (to 1e-10) and half adjoint (to 1e-7, from
    /// recycled directions): the calibrated iterations are those of one pair.
    pub fn amg_seconds(&self, nnz: usize, start: AmgStart, solves: f64) -> f64 {
        let (setup, iterations) = match start {
            AmgStart::Scalar => (self.amg_setup_scalar, self.iterations_scalar),
            AmgStart::NearNullspace => (self.amg_setup_vector, self.iterations_vector),
            AmgStart::CoarseSpace => (self.amg_setup_coarse_space, self.iterations_vector),
        };
        nnz as f64 * setup + self.cg_seconds(nnz, iterations * solves / 2.0, start)
    }
}

/// What the AMG route's hierarchy starts from, for its predicted cost ([`CostModel`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmgStart {
    /// Scalar aggregation (the constant per component).
    Scalar,
    /// Aggregation of nodes with a near-nullspace (elasticity's rigid-body modes).
    NearNullspace,
    /// A given first coarse level, then aggregation with its near-nullspace (p-multigrid).
    CoarseSpace,
}

/// The Cholesky route is ruled out without an analysis when `SEPARATOR_FLOPS` · s³
/// multiply-adds (s the level separator, in unknowns) and the AMD analysis already take longer
/// than the AMG route. The factorizations of the calibration systems (10⁴–10⁵ unknowns) took
/// 0.7–1.3 s³ multiply-adds in their cheaper ordering (s³/3 is a strict lower bound for an
/// ordering that eliminates the separator last), so 0.6 s³ stays below the work of either.
pub const SEPARATOR_FLOPS: f64 = 0.6;

/// A transposed solve's right-hand side b is taken as c times the last forward right-hand side
/// b_f when |b_i − c b_f,i| ≤ `SELF_ADJOINT_TOL` · max|b| for every i.
pub const SELF_ADJOINT_TOL: f64 = 1e-13;

/// Why an [`SpdSolver`] took its route, with the predictions it compared.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteDecision {
    /// The route taken.
    pub route: Route,
    /// Predicted seconds of the AMG-CG route (`None` when the route was forced).
    pub amg_seconds: Option<f64>,
    /// The separator of the level structure (unknowns), when it was computed.
    pub separator: Option<usize>,
    /// The predicted least cost of the Cholesky route from that separator: the AMD analysis
    /// and [`SEPARATOR_FLOPS`] · s³ multiply-adds.
    pub cholesky_lower_bound_seconds: Option<f64>,
    /// Predicted seconds of the Cholesky route with the analysis it ran (analysis included),
    /// `None` when no analysis was run.
    pub cholesky_seconds: Option<f64>,
    /// The ordering of that analysis.
    pub ordering: Option<CholeskyOrdering>,
    /// Multiply-adds of its numeric factorization.
    pub factor_flops: Option<f64>,
    /// Entries of its factor.
    pub factor_nnz: Option<usize>,
    /// The route was switched from AMG-CG to Cholesky after this many solves on one
    /// factorization (their CG cost passed the predicted cost of a factorization).
    pub switched_after_solves: Option<usize>,
}

enum Inner {
    Undecided,
    Cholesky(Box<CholeskySolver>),
    Amg(Box<AmgCgSolver>),
}

/// A symmetric positive definite system's solver: Cholesky or AMG-CG by [`Route`] (module docs),
/// with the self-adjoint shortcut for transposed solves.
///
/// Under [`Route::Auto`] an AMG-CG route also watches the CG iterations spent on one
/// factorization (a field solved for many loads with one matrix, such as the mechanical field
/// at every state of a transient run): once their predicted seconds pass those of an analysis
/// and a factorization, the solver factors the matrix by Cholesky and keeps that route for the
/// pattern (the ski-rental rule: never more than twice the cost of the better choice in
/// hindsight). Predicted, not timed: the switch comes after the same solve on every run.
pub struct SpdSolver {
    field: String,
    route: Route,
    amg: AmgParams,
    cg: CgParams,
    near_nullspace: Option<Arc<NearNullspace>>,
    coarse_space: Option<Arc<CoarseSpace>>,
    model: CostModel,
    inner: Inner,
    decision: Option<RouteDecision>,
    /// The pattern the decision was made for (rows, nnz, hash).
    decided_for: Option<(usize, usize, u64)>,
    /// Predicted seconds of an analysis and a factorization (the switch's price).
    factor_price: f64,
    /// Predicted seconds of the CG iterations since the last factorization, and the solves.
    cg_spent: f64,
    solves: usize,
    nnz: usize,
    self_adjoint: bool,
    /// Solves expected per factorization (a forward and an adjoint: 2), what the route's
    /// costs are predicted for ([`LinearSolver::expect_solves`]).
    expected_solves: usize,
    /// The last forward right-hand side and its solution, since the last factorization.
    forward: Option<(Vec<f64>, Vec<f64>)>,
    /// Transposed solves answered from the forward solution.
    shortcuts: usize,
}

impl SpdSolver {
    /// A solver for the SPD system of `field` taking `route`, with the AMG and CG settings of
    /// the AMG-CG route.
    pub fn new(field: &str, route: Route, amg: AmgParams, cg: CgParams) -> Self {
        SpdSolver {
            field: field.to_string(),
            route,
            amg,
            cg,
            near_nullspace: None,
            coarse_space: None,
            model: CostModel::default(),
            inner: Inner::Undecided,
            decision: None,
            decided_for: None,
            factor_price: f64::INFINITY,
            cg_spent: 0.0,
            solves: 0,
            nnz: 0,
            self_adjoint: true,
            expected_solves: 2,
            forward: None,
            shortcuts: 0,
        }
    }

    /// The near-nullspace of the AMG route (the rigid-body modes of elasticity); the cost model
    /// then takes the "vector" constants.
    pub fn with_near_nullspace(mut self, nns: impl Into<Arc<NearNullspace>>) -> Self {
        self.near_nullspace = Some(nns.into());
        self
    }

    /// The first coarse level of the AMG route's hierarchies (p-multigrid for quadratic
    /// cells, [`crate::amg::AmgHierarchy::with_coarse_space`]).
    pub fn with_coarse_space(mut self, coarse: impl Into<Arc<CoarseSpace>>) -> Self {
        self.coarse_space = Some(coarse.into());
        self
    }

    /// Replace the cost model (tests, other machines).
    pub fn with_cost_model(mut self, model: CostModel) -> Self {
        self.model = model;
        self
    }

    /// Whether transposed solves may be answered from the last forward solve (default true;
    /// false solves every time: the general path).
    pub fn with_self_adjoint(mut self, enabled: bool) -> Self {
        self.self_adjoint = enabled;
        self
    }

    /// Why the current route was taken (`None` before the first factorization).
    pub fn decision(&self) -> Option<&RouteDecision> {
        self.decision.as_ref()
    }

    /// The AMG-CG solver, when that route is taken.
    pub fn amg(&self) -> Option<&AmgCgSolver> {
        match &self.inner {
            Inner::Amg(s) => Some(s),
            _ => None,
        }
    }

    fn pattern_key(a: &CsrMatrix) -> (usize, usize, u64) {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for v in a.row_ptr.iter().map(|&p| p as u64).chain(a.col_idx.iter().map(|&j| j as u64)) {
            h = (h ^ v).wrapping_mul(0x0000_0100_0000_01b3);
        }
        (a.n_rows, a.nnz(), h)
    }

    /// What the AMG route's hierarchies start from.
    fn amg_start(&self) -> AmgStart {
        match (&self.coarse_space, &self.near_nullspace) {
            (Some(_), _) => AmgStart::CoarseSpace,
            (None, Some(_)) => AmgStart::NearNullspace,
            (None, None) => AmgStart::Scalar,
        }
    }

    fn new_amg(&self) -> AmgCgSolver {
        let mut s = AmgCgSolver::new(&self.field, self.amg.clone(), self.cg.clone());
        if let Some(nns) = &self.near_nullspace {
            s = s.with_near_nullspace(nns.clone());
        }
        if let Some(c) = &self.coarse_space {
            s = s.with_coarse_space(c.clone());
        }
        s
    }

    /// Decide the route for `a` (module docs); a Cholesky route keeps its analysis.
    fn decide(&mut self, a: &CsrMatrix) -> Result<(), SolverError> {
        let vector = self.near_nullspace.is_some();
        let m = &self.model;
        let nnz = a.nnz();
        let mut d = RouteDecision {
            route: self.route,
            amg_seconds: None,
            separator: None,
            cholesky_lower_bound_seconds: None,
            cholesky_seconds: None,
            ordering: None,
            factor_flops: None,
            factor_nnz: None,
            switched_after_solves: None,
        };
        self.factor_price = f64::INFINITY;
        match self.route {
            Route::Cholesky => {
                self.inner = Inner::Cholesky(Box::new(CholeskySolver::new(&self.field)))
            }
            Route::AmgCg => self.inner = Inner::Amg(Box::new(self.new_amg())),
            Route::Auto => {
                let solves = self.expected_solves as f64;
                let amg = m.amg_seconds(nnz, self.amg_start(), solves);
                let s = level_separator(a) as f64;
                let dense = SEPARATOR_FLOPS * s * s * s / m.factor_rate;
                let amd = m.analysis_seconds(nnz, false, vector);
                let nd = m.analysis_seconds(nnz, true, vector);
                let lower = amd + dense;
                d.amg_seconds = Some(amg);
                d.separator = Some(s as usize);
                d.cholesky_lower_bound_seconds = Some(lower);
                // the price of switching later: an analysis and a factorization of about
                // s³ multiply-adds (the measured 0.7–1.3 s³)
                self.factor_price = amd + dense / SEPARATOR_FLOPS;
                let mut chol = None;
                if lower < amg {
                    let mut c = CholeskySolver::new(&self.field);
                    let (flops, nnz_l) = c.analyse(a, CholeskyOrdering::Amd)?;
                    let mut best = (
                        amd + m.cholesky_seconds(flops, nnz_l, solves),
                        flops,
                        nnz_l,
                        CholeskyOrdering::Amd,
                    );
                    // nested dissection may halve the work: try it where that could win
                    if best.0 > amg && flops >= AUTO_MIN_FLOPS && amd + nd + dense < amg {
                        let mut n = CholeskySolver::new(&self.field)
                            .with_ordering(CholeskyOrdering::NestedDissection);
                        match n.analyse(a, CholeskyOrdering::NestedDissection) {
                            Ok((f, l)) => {
                                let t = amd + nd + m.cholesky_seconds(f, l, solves);
                                if t < best.0 {
                                    best = (t, f, l, CholeskyOrdering::NestedDissection);
                                    c = n;
                                }
                            }
                            Err(e) => {
                                tracing::warn!(field = %self.field, error = %e, "nested dissection failed; AMD kept")
                            }
                        }
                    }
                    d.cholesky_seconds = Some(best.0);
                    d.factor_flops = Some(best.1);
                    d.factor_nnz = Some(best.2);
                    d.ordering = Some(best.3);
                    if best.0 <= amg {
                        chol = Some(c);
                    }
                }
                match chol {
                    Some(c) => {
                        d.route = Route::Cholesky;
                        self.inner = Inner::Cholesky(Box::new(c));
                    }
                    None => {
                        d.route = Route::AmgCg;
                        self.inner = Inner::Amg(Box::new(self.new_amg()));
                    }
                }
                tracing::debug!(field = %self.field, decision = ?d, "linear solver route");
            }
        }
        self.decision = Some(d);
        self.decided_for = Some(Self::pattern_key(a));
        self.nnz = nnz;
        Ok(())
    }

    fn solver(&mut self) -> &mut dyn LinearSolver {
        match &mut self.inner {
            Inner::Cholesky(s) => s.as_mut(),
            Inner::Amg(s) => s.as_mut(),
            Inner::Undecided => panic!("{}: solve called before a successful factor", self.field),
        }
    }

    /// After a CG solve under `Auto`: count its predicted cost and switch to Cholesky once
    /// the solves on this factorization cost more than a factorization would.
    fn account(&mut self) -> Result<(), SolverError> {
        let Inner::Amg(amg) = &self.inner else { return Ok(()) };
        let iterations = amg.last_iterations().unwrap_or(0) as f64;
        self.solves += 1;
        self.cg_spent += self.model.cg_seconds(self.nnz, iterations, self.amg_start());
        if self.route != Route::Auto || self.cg_spent <= self.factor_price {
            return Ok(());
        }
        let Some(a) = amg.matrix() else { return Ok(()) };
        let mut chol = CholeskySolver::new(&self.field);
        chol.factor(&a)?;
        tracing::debug!(field = %self.field, solves = self.solves, "many solves per factorization: Cholesky from now on");
        self.inner = Inner::Cholesky(Box::new(chol));
        if let Some(d) = &mut self.decision {
            d.route = Route::Cholesky;
            d.switched_after_solves = Some(self.solves);
        }
        Ok(())
    }
}

/// George and Liu's level-structure separator of the matrix graph, in unknowns: breadth-first
/// levels from a pseudo-peripheral unknown (two sweeps), and the smallest level among those
/// with at least a quarter of the unknowns before and after it. The whole graph when it has no
/// such level (it is small or not connected enough to split).
pub fn level_separator(a: &CsrMatrix) -> usize {
    let n = a.n_rows;
    if n < 8 {
        return n;
    }
    let mut level = vec![u32::MAX; n];
    let sweep = |start: usize, level: &mut [u32]| -> (Vec<usize>, usize) {
        level.fill(u32::MAX);
        let mut sizes = vec![0usize];
        let mut queue = VecDeque::from([start]);
        level[start] = 0;
        let mut last = start;
        let mut reached = 0;
        while let Some(i) = queue.pop_front() {
            reached += 1;
            last = i;
            let l = level[i];
            sizes[l as usize] += 1;
            for &j in &a.col_idx[a.row_ptr[i]..a.row_ptr[i + 1]] {
                let j = j as usize;
                if level[j] == u32::MAX {
                    level[j] = l + 1;
                    if sizes.len() <= l as usize + 1 {
                        sizes.push(0);
                    }
                    queue.push_back(j);
                }
            }
        }
        // unknowns of other components count as one more level each side cannot use
        if reached < n {
            sizes.push(0);
        }
        (sizes, last)
    };
    let (_, far) = sweep(0, &mut level);
    let (sizes, _) = sweep(far, &mut level);
    let total: usize = sizes.iter().sum();
    let mut before = 0;
    let mut best = total;
    for &s in &sizes {
        let after = total - before - s;
        if 4 * before >= total && 4 * after >= total {
            best = best.min(s);
        }
        before += s;
    }
    best
}

impl SpdSolver {
    /// What `factor` does before the chosen solver factors `a`: forget the last forward
    /// solve and the solves' cost, and decide the route again for a new pattern.
    fn before_factor(&mut self, a: &CsrMatrix) -> Result<(), SolverError> {
        self.forward = None;
        self.cg_spent = 0.0;
        self.solves = 0;
        if self.decided_for != Some(Self::pattern_key(a)) {
            self.inner = Inner::Undecided;
            self.decided_for = None;
            self.decide(a)?;
        }
        Ok(())
    }
}

impl LinearSolver for SpdSolver {
    fn factor(&mut self, a: &CsrMatrix) -> Result<(), SolverError> {
        self.before_factor(a)?;
        self.solver().factor(a)
    }

    fn factor_owned(&mut self, a: CsrMatrix) -> Result<(), SolverError> {
        self.before_factor(&a)?;
        self.solver().factor_owned(a)
    }

    fn solve_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError> {
        let rhs = self.self_adjoint.then(|| b.to_vec());
        self.forward = None;
        self.solver().solve_in_place(b)?;
        if let Some(rhs) = rhs {
            self.forward = Some((rhs, b.to_vec()));
        }
        self.account()
    }

    fn solve_transpose_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError> {
        if let Some((rhs, x)) = &self.forward
            && let Some(c) = proportional(b, rhs)
        {
            for (bi, xi) in b.iter_mut().zip(x) {
                *bi = c * xi;
            }
            self.shortcuts += 1;
            tracing::debug!(field = %self.field, scale = c, "self-adjoint: the adjoint from the forward solution");
            return Ok(());
        }
        self.solver().solve_transpose_in_place(b)?;
        self.account()
    }

    fn name(&self) -> &'static str {
        match &self.inner {
            Inner::Cholesky(s) => s.name(),
            Inner::Amg(s) => s.name(),
            Inner::Undecided => "auto",
        }
    }

    fn last_iterations(&self) -> Option<usize> {
        match &self.inner {
            Inner::Amg(s) => s.last_iterations(),
            _ => None,
        }
    }

    fn self_adjoint_solves(&self) -> usize {
        self.shortcuts
    }

    fn expect_solves(&mut self, per_factorization: usize) {
        let n = per_factorization.max(1);
        if n != self.expected_solves {
            self.expected_solves = n;
            if self.route == Route::Auto {
                // Decide again at the next factorization, for the new count.
                self.decided_for = None;
            }
        }
    }
}

/// c with b = c·f to rounding ([`SELF_ADJOINT_TOL`]), if there is one (b = 0 gives c = 0).
fn proportional(b: &[f64], f: &[f64]) -> Option<f64> {
    if b.len() != f.len() {
        return None;
    }
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let ff: f64 = f.iter().map(|v| v * v).sum();
    if ff == 0.0 || !scale.is_finite() {
        return None;
    }
    let c = b.iter().zip(f).map(|(x, y)| x * y).sum::<f64>() / ff;
    let tol = SELF_ADJOINT_TOL * scale;
    b.iter().zip(f).all(|(x, y)| (x - c * y).abs() <= tol).then_some(c)
}
