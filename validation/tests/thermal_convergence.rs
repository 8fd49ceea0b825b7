//! Convergence rates of the thermal field by the method of manufactured solutions (MMS).
//!
//! Source problem: Roache, *Code Verification by the Method of Manufactured Solutions* (2002),
//! and Salari & Knupp, SAND2000-1444: choose T(x) = sin(πx) cos(πy/2) eᶻ + x y z on [0,1]³,
//! set Q = −k ΔT = k (5π²/4 − 1) sin(πx) cos(πy/2) eᶻ (the x y z term is harmonic) and impose T
//! on the whole boundary. The a-priori estimates for P_p Lagrange elements (Ciarlet, *The Finite
//! Element Method for Elliptic Problems*, Thm 3.2.2 and the Aubin–Nitsche argument) give
//! ‖T − T_h‖_L2 = O(h^{p+1}) and |T − T_h|_H1 = O(h^p).
//!
//! Route: `ThermalModel` fixes one constant temperature per group, so the six sides are fixed
//! groups with value 0 and the nodal values T(x_n) are put in by
//! `common::solve_with_nodal_dirichlet`, which assembles K from the model's own element kernel
//! and adds the spatially varying load ∫ Q(x) N_a dΩ itself. The conduction kernel under test is
//! therefore the production one; only the load and the lifting are test code. Errors use a
//! quadrature of degree 2p + 6 (per direction on hexes), far above the field's degree.
//! Rates are least-squares slopes in log-log over four meshes, on the
//! structured cube and on a smoothly distorted (curved, for P2) version of it.

mod common;

use std::f64::consts::PI;

use gradfem_mesh::CellType;
use rstest::rstest;

const K: f64 = 3.0;

fn exact(x: [f64; 3]) -> (f64, [f64; 3]) {
    let (s, c, ez) = ((PI * x[0]).sin(), (PI * x[1] / 2.0).cos(), x[2].exp());
    let v = s * c * ez + x[0] * x[1] * x[2];
    let g = [
        PI * (PI * x[0]).cos() * c * ez + x[1] * x[2],
        -PI / 2.0 * s * (PI * x[1] / 2.0).sin() * ez + x[0] * x[2],
        s * c * ez + x[0] * x[1],
    ];
    (v, g)
}

fn source(x: [f64; 3]) -> f64 {
    K * (5.0 * PI * PI / 4.0 - 1.0) * (PI * x[0]).sin() * (PI * x[1] / 2.0).cos() * x[2].exp()
}

/// Errors (L2, H1) on the unit cube with `n` divisions; `distorted` moves every node (mid-edge
/// and mid-face nodes included, so P2 cells become curved) by the smooth interior map
/// x ↦ x + 0.04 sin(πx) sin(πy) sin(πz) (1, −1, 1) · (cos 2πy, cos 2πz, cos 2πx), which keeps
/// the cube's faces in place.
fn mms_errors(ct: CellType, n: usize, distorted: bool) -> common::FieldErrors {
    let mut mesh = common::unit_cube(n, ct);
    if distorted {
        for p in &mut mesh.coords {
            let b = 0.04 * (PI * p[0]).sin() * (PI * p[1]).sin() * (PI * p[2]).sin();
            let d = [
                b * (2.0 * PI * p[1]).cos(),
                -b * (2.0 * PI * p[2]).cos(),
                b * (2.0 * PI * p[0]).cos(),
            ];
            for k in 0..3 {
                p[k] += d[k];
            }
        }
    }
    let model = common::all_sides_fixed_model(&mesh, K);
    let p = ct.order();
    let t = common::solve_with_nodal_dirichlet(&model, &|x| exact(x).0, &source, 2 * p + 4);
    common::field_errors(&model, &t, &exact, 2 * p + 6)
}

#[rstest]
#[case::tet4(CellType::Tet4, [4, 8, 16, 24], 1.85, 0.9)]
#[case::hex8(CellType::Hex8, [4, 8, 16, 24], 1.85, 0.9)]
#[case::tet10(CellType::Tet10, [2, 4, 8, 12], 2.8, 1.85)]
#[case::hex20(CellType::Hex20, [2, 4, 8, 12], 2.8, 1.85)]
#[case::hex27(CellType::Hex27, [2, 4, 8, 12], 2.8, 1.85)]
fn manufactured_solution_converges_at_optimal_rates(
    #[case] ct: CellType,
    #[case] levels: [usize; 4],
    #[case] min_l2_rate: f64,
    #[case] min_h1_rate: f64,
    #[values(false, true)] distorted: bool,
) {
    let h: Vec<f64> = levels.iter().map(|&n| 1.0 / n as f64).collect();
    let errs: Vec<common::FieldErrors> =
        levels.iter().map(|&n| mms_errors(ct, n, distorted)).collect();
    let l2: Vec<f64> = errs.iter().map(|e| e.l2).collect();
    let h1: Vec<f64> = errs.iter().map(|e| e.h1).collect();
    let (rl2, rh1) = (common::loglog_slope(&h, &l2), common::loglog_slope(&h, &h1));
    eprintln!(
        "{ct} distorted={distorted}: h {h:?}\n  L2 {l2:?} rate {rl2:.3}\n  H1 {h1:?} rate {rh1:.3}"
    );
    let p = ct.order() as f64;
    assert!(rl2 >= min_l2_rate, "{ct}: L2 rate {rl2:.3} < {min_l2_rate} (errors {l2:?})");
    assert!(rh1 >= min_h1_rate, "{ct}: H1 rate {rh1:.3} < {min_h1_rate} (errors {h1:?})");
    // Rates above optimal would point at a broken error measurement, not at a better method.
    assert!(rl2 <= p + 1.0 + 0.35, "{ct}: L2 rate {rl2:.3} suspiciously high");
    assert!(rh1 <= p + 0.35, "{ct}: H1 rate {rh1:.3} suspiciously high");
    // The errors must actually fall at every refinement.
    assert!(l2.windows(2).all(|w| w[1] < w[0]) && h1.windows(2).all(|w| w[1] < w[0]));
}

/// A field in the discrete space is reproduced to round-off (patch test): T = 1 + 2x − y + 3z
/// for P1, plus x² − y z for P2 (with Q = −k ΔT = −2k). Source: the patch test of Irons &
/// Razzaque (1972) as stated by Zienkiewicz & Taylor, *The Finite Element Method*, vol. 1, §9.
#[rstest]
#[case::tet4(CellType::Tet4)]
#[case::hex8(CellType::Hex8)]
#[case::tet10(CellType::Tet10)]
#[case::hex20(CellType::Hex20)]
#[case::hex27(CellType::Hex27)]
fn polynomial_patch_is_exact(#[case] ct: CellType) {
    let quad = ct.order() == 2;
    let exact = move |x: [f64; 3]| {
        let mut v = 1.0 + 2.0 * x[0] - x[1] + 3.0 * x[2];
        let mut g = [2.0, -1.0, 3.0];
        if quad {
            v += x[0] * x[0] - x[1] * x[2];
            g = [2.0 + 2.0 * x[0], -1.0 - x[2], 3.0 - x[1]];
        }
        (v, g)
    };
    let q = if quad { -2.0 * K } else { 0.0 };
    let mesh = common::box_of([0.1, -0.2, 0.3], [1.3, 0.7, 0.9], [3, 2, 2], ct);
    let model = common::all_sides_fixed_model(&mesh, K);
    let t = common::solve_with_nodal_dirichlet(&model, &|x| exact(x).0, &|_| q, 6);
    let e = common::field_errors(&model, &t, &exact, 6);
    assert!(e.max_nodal < 1e-11 && e.l2 < 1e-11 && e.h1 < 1e-10, "{ct}: {e:?}");
}
