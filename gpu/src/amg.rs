//! The smoothed-aggregation AMG V-cycle on a [`Backend`]: the hierarchy is built on the CPU by
//! `gradfem_solvers::amg` and copied once ([`DeviceAmg::new`]); its Chebyshev–Jacobi smoothing,
//! restrictions and prolongations run as device kernels, the coarsest level's dense Cholesky
//! solve on the host (a few hundred values each way per cycle). The cycle is the CPU
//! hierarchy's (`AmgHierarchy`'s `vcycle` and `smooth`), pass for pass.

use gradfem_solvers::amg::{ChebyshevInterval, HierarchyExport, Smoother};
use gradfem_solvers::dense::DenseCholesky;

use crate::backend::Backend;
use crate::error::GpuError;

/// One level on the backend with its work vectors.
struct Level<B: Backend> {
    a: B::Matrix,
    inv_diag: B::Vector,
    lambda_max: f64,
    /// Residual and the Chebyshev directions.
    r: B::Vector,
    d: B::Vector,
    d2: B::Vector,
    /// Right-hand side and solution of this level's cycle (unused on the finest, whose are the
    /// caller's).
    b: B::Vector,
    x: B::Vector,
}

/// An AMG hierarchy on a backend, applied as the preconditioner of device CG.
pub struct DeviceAmg<B: Backend> {
    levels: Vec<Level<B>>,
    /// (P_l, R_l) between level l and l + 1.
    transfers: Vec<(B::Matrix, B::Matrix)>,
    coarse: Option<DenseCholesky>,
    degree: usize,
    ratio: f64,
    pre_sweeps: usize,
    post_sweeps: usize,
    host: Vec<f64>,
}

/// Chebyshev sweeps on A x = b (the CPU hierarchy's `smooth`): `zero_guess` ignores x's content
/// and leaves b − A x in `r`.
#[allow(clippy::too_many_arguments)]
fn smooth<B: Backend>(
    be: &mut B,
    level: (&B::Matrix, &B::Vector, f64),
    (degree, ratio): (usize, f64),
    b: &B::Vector,
    x: &mut B::Vector,
    r: &mut B::Vector,
    d: &mut B::Vector,
    d2: &mut B::Vector,
    zero_guess: bool,
    sweeps: usize,
) -> Result<(), GpuError> {
    let (a, inv, lmax) = level;
    let ChebyshevInterval { theta, delta, sigma } = ChebyshevInterval::new(lmax, ratio);
    for sweep in 0..sweeps {
        if sweep == 0 && zero_guess {
            be.copy(b, r)?;
            be.fill_zero(x)?;
            be.scale_diag(1.0 / theta, inv, r, d)?;
        } else if sweep == 0 {
            be.residual_and_scale(a, b, x, r, d, inv, 1.0 / theta)?;
        } else {
            be.scale_diag(1.0 / theta, inv, r, d)?;
        }
        let mut rho_prev = 1.0 / sigma;
        for _ in 1..degree {
            let rho = 1.0 / (2.0 * sigma - rho_prev);
            be.cheb_step(a, inv, d, d2, r, x, rho * rho_prev, 2.0 * rho / delta)?;
            std::mem::swap(d, d2);
            rho_prev = rho;
        }
        if zero_guess || sweep + 1 < sweeps {
            be.residual_update(a, d, r, x)?;
        } else {
            be.axpy(1.0, d, x)?;
        }
    }
    Ok(())
}

impl<B: Backend> DeviceAmg<B> {
    /// Copy the hierarchy `h` to the backend. Errors with [`GpuError::Unsupported`] for a
    /// Gauss–Seidel smoother (sequential; the device takes Chebyshev).
    pub fn new(be: &mut B, h: &HierarchyExport) -> Result<Self, GpuError> {
        let Smoother::Chebyshev { degree, ratio } = h.smoother else {
            return Err(GpuError::Unsupported(
                "the device AMG smooths by Chebyshev–Jacobi; this hierarchy uses Gauss–Seidel"
                    .into(),
            ));
        };
        if h.levels.is_empty() || h.transfers.len() + 1 != h.levels.len() {
            return Err(GpuError::Input(format!(
                "a hierarchy of {} levels with {} transfers",
                h.levels.len(),
                h.transfers.len()
            )));
        }
        let mut levels = Vec::with_capacity(h.levels.len());
        for (l, lv) in h.levels.iter().enumerate() {
            let n = lv.a.n_rows;
            let own = if l == 0 { 0 } else { n };
            levels.push(Level {
                a: be.upload_matrix(&lv.a)?,
                inv_diag: be.upload(&lv.inv_diag)?,
                lambda_max: lv.lambda_max,
                r: be.zeros(n)?,
                d: be.zeros(n)?,
                d2: be.zeros(n)?,
                b: be.zeros(own)?,
                x: be.zeros(own)?,
            });
        }
        let mut transfers = Vec::with_capacity(h.transfers.len());
        for (p, r) in &h.transfers {
            transfers.push((be.upload_matrix(p)?, be.upload_matrix(r)?));
        }
        let coarse_n = h.levels.last().map_or(0, |l| l.a.n_rows);
        Ok(DeviceAmg {
            levels,
            transfers,
            coarse: h.coarse.clone(),
            degree,
            ratio,
            pre_sweeps: h.pre_sweeps,
            post_sweeps: h.post_sweeps,
            host: vec![0.0; coarse_n],
        })
    }

    /// Number of levels.
    pub fn n_levels(&self) -> usize {
        self.levels.len()
    }

    /// z = one V-cycle applied to r (zero initial guess).
    pub fn apply(&mut self, be: &mut B, r: &B::Vector, z: &mut B::Vector) -> Result<(), GpuError> {
        let n_levels = self.levels.len();
        let cheb = (self.degree, self.ratio);
        // down: pre-smooth from 0, restrict the residual
        for l in 0..n_levels - 1 {
            let (upper, lower) = self.levels.split_at_mut(l + 1);
            let lv = &mut upper[l];
            let (b, x): (&B::Vector, &mut B::Vector) =
                if l == 0 { (r, &mut *z) } else { (&lv.b, &mut lv.x) };
            let level = (&lv.a, &lv.inv_diag, lv.lambda_max);
            smooth(be, level, cheb, b, x, &mut lv.r, &mut lv.d, &mut lv.d2, true, self.pre_sweeps)?;
            be.matrix_spmv(&self.transfers[l].1, &lv.r, &mut lower[0].b, false)?;
        }
        // the coarsest level
        {
            let last = n_levels - 1;
            let lv = &mut self.levels[last];
            let (b, x): (&B::Vector, &mut B::Vector) =
                if last == 0 { (r, &mut *z) } else { (&lv.b, &mut lv.x) };
            match &self.coarse {
                Some(c) => {
                    self.host = be.download(b)?;
                    c.solve_in_place(&mut self.host);
                    be.write(&self.host, x)?;
                }
                None => {
                    let level = (&lv.a, &lv.inv_diag, lv.lambda_max);
                    let (rr, d, d2) = (&mut lv.r, &mut lv.d, &mut lv.d2);
                    smooth(be, level, cheb, b, x, rr, d, d2, true, self.pre_sweeps)?;
                    let level = (&lv.a, &lv.inv_diag, lv.lambda_max);
                    smooth(be, level, cheb, b, x, rr, d, d2, false, self.post_sweeps)?;
                }
            }
        }
        // up: prolongate and add, post-smooth
        for l in (0..n_levels - 1).rev() {
            let (upper, lower) = self.levels.split_at_mut(l + 1);
            let lv = &mut upper[l];
            let (b, x): (&B::Vector, &mut B::Vector) =
                if l == 0 { (r, &mut *z) } else { (&lv.b, &mut lv.x) };
            be.matrix_spmv(&self.transfers[l].0, &lower[0].x, x, true)?;
            let level = (&lv.a, &lv.inv_diag, lv.lambda_max);
            smooth(
                be,
                level,
                cheb,
                b,
                x,
                &mut lv.r,
                &mut lv.d,
                &mut lv.d2,
                false,
                self.post_sweeps,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::DeviceSystem;
    use crate::twin::CpuTwin;
    use gradfem_solvers::amg::{AmgHierarchy, AmgParams, NearNullspace};
    use gradfem_solvers::cg::Preconditioner;
    use gradfem_solvers::sparse::CsrMatrix;

    /// An elasticity-like SPD system: the 7-point Laplacian on an m³ grid (Dirichlet on one
    /// face) coupling three components per node through an SPD 3 × 3 block, plus its nodes.
    fn elastic_like(m: usize) -> (CsrMatrix, Vec<[f64; 3]>) {
        let block = [[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]];
        let n = m * m * m;
        let (mut row_ptr, mut col_idx, mut values) = (vec![0], Vec::new(), Vec::new());
        for p in 0..n {
            let (x, y, z) = (p % m, (p / m) % m, p / (m * m));
            let mut nb = vec![(p, 6.0)];
            for (c, step) in [(x, 1), (y, m), (z, m * m)] {
                if c > 0 {
                    nb.push((p - step, -1.0));
                }
                if c + 1 < m {
                    nb.push((p + step, -1.0));
                }
            }
            nb.sort_by_key(|&(q, _)| q);
            for i in 0..3 {
                for &(q, w) in &nb {
                    for (j, bij) in block[i].iter().enumerate() {
                        col_idx.push((3 * q + j) as u32);
                        values.push(w * bij + if q == p && i == j { 0.1 } else { 0.0 });
                    }
                }
                row_ptr.push(col_idx.len());
            }
        }
        let coords = (0..n).map(|p| [(p % m) as f64, ((p / m) % m) as f64, (p / (m * m)) as f64]);
        (CsrMatrix { n_rows: 3 * n, n_cols: 3 * n, row_ptr, col_idx, values }, coords.collect())
    }

    #[test]
    fn the_twin_v_cycle_is_the_cpu_hierarchys() {
        let (a, coords) = elastic_like(9);
        let unknowns: Vec<(usize, usize)> = (0..a.n_rows).map(|d| (d / 3, d % 3)).collect();
        let nns = NearNullspace::rigid_body_modes(&coords, &unknowns).unwrap();
        for h in [
            AmgHierarchy::new(&a, &AmgParams { block_size: 3, ..Default::default() }).unwrap(),
            AmgHierarchy::with_near_nullspace(&a, &AmgParams::default(), nns.into()).unwrap(),
        ] {
            assert!(h.levels() >= 2, "a real hierarchy: {:?}", h.level_sizes());
            let sys = DeviceSystem::matrix(&a).unwrap();
            let mut be = CpuTwin::new(&sys);
            let mut dev = DeviceAmg::new(&mut be, &h.export()).unwrap();
            assert_eq!(dev.n_levels(), h.levels());
            let r: Vec<f64> = (0..a.n_rows).map(|i| (0.37 * i as f64).sin()).collect();
            let mut z_cpu = vec![0.0; a.n_rows];
            h.apply(&r, &mut z_cpu);
            let rv = be.upload(&r).unwrap();
            let mut zv = be.zeros(a.n_rows).unwrap();
            dev.apply(&mut be, &rv, &mut zv).unwrap();
            let scale = z_cpu.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let d = zv.iter().zip(&z_cpu).fold(0.0f64, |m, (p, q)| m.max((p - q).abs()));
            assert!(scale > 0.0 && d <= 1e-12 * scale, "V-cycles differ by {d:e} of {scale:e}");
            // a second application gives the same bits (the work vectors start clean)
            let mut zv2 = be.zeros(a.n_rows).unwrap();
            dev.apply(&mut be, &rv, &mut zv2).unwrap();
            assert_eq!(zv, zv2);
        }
    }

    #[test]
    fn gauss_seidel_hierarchies_are_refused() {
        let (a, _) = elastic_like(4);
        let params = AmgParams {
            block_size: 3,
            smoother: Smoother::SymmetricGaussSeidel,
            ..Default::default()
        };
        let h = AmgHierarchy::new(&a, &params).unwrap();
        let sys = DeviceSystem::matrix(&a).unwrap();
        let mut be = CpuTwin::new(&sys);
        assert!(matches!(DeviceAmg::new(&mut be, &h.export()), Err(GpuError::Unsupported(_))));
    }
}
