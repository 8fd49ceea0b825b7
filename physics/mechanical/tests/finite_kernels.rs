//! Finite-strain kernels: the tangent against finite differences of the residual, and every
//! vector-Jacobian product against finite differences, on distorted Tet10 and Hex8 boxes at a
//! random large-deformation state.

use gradfem_mechanical::finite::{
    FiniteRegionSpec, FiniteStrainError, FiniteStrainModel, FiniteVjpRequest, HyperelasticLaw,
};
use gradfem_mechanical::hyperelastic::{
    MooneyRivlin, NeoHookean, Ogden, SaintVenantKirchhoff, StrainEnergy, Volumetric,
};
use gradfem_mechanical::linear::{BcKind, BcSpec};
use gradfem_mesh::CellType;
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use rstest::rstest;

fn ogden() -> HyperelasticLaw {
    HyperelasticLaw::Ogden(Ogden::new(&[(0.6, 2.7), (0.05, -1.8)], 6.0))
}

fn model(ct: CellType, law: HyperelasticLaw) -> FiniteStrainModel {
    let mut mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [1.0, 0.7, 0.5],
        divisions: [2, 2, 1],
        cell_type: ct,
    });
    for p in &mut mesh.coords {
        let (x, y, z) = (p[0], p[1], p[2]);
        p[0] = x + 0.05 * (y * z).sin();
        p[1] = y + 0.04 * (x * 2.0).sin() * z;
        p[2] = z + 0.03 * x * y;
    }
    let mut m = FiniteStrainModel::new(
        &mesh,
        &[FiniteRegionSpec {
            group: "domain".into(),
            law,
            alpha: 2e-3,
            t_ref: 290.0,
            body_force: [0.3, -0.2, 0.1],
        }],
        &[
            BcSpec {
                group: "xmin".into(),
                kind: BcKind::Displacement { value: [Some(-0.1), Some(0.05), None] },
            },
            BcSpec { group: "xmax".into(), kind: BcKind::Traction { traction: [0.4, -0.1, 0.2] } },
            BcSpec { group: "ymax".into(), kind: BcKind::Pressure { pressure: 0.3 } },
            BcSpec { group: "zmin".into(), kind: BcKind::Roller { components: vec![2] } },
        ],
    )
    .unwrap();
    let t = m.coords.iter().map(|p| 290.0 + 30.0 * p[0] - 10.0 * p[1] * p[2]).collect();
    m.set_temperature(Some(t)).unwrap();
    for (e, s) in m.element_scale.iter_mut().enumerate() {
        *s = 1.0 + 0.1 * (e as f64).sin();
    }
    m
}

/// A pseudo-random smooth-ish displacement with strains of order 0.1.
fn state(m: &FiniteStrainModel, seed: u64) -> Vec<f64> {
    let mut x = seed;
    let mut rnd = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((x >> 11) as f64 / (1u64 << 53) as f64) - 0.5
    };
    let mut u = vec![0.0; 3 * m.n_nodes()];
    for (n, p) in m.coords.iter().enumerate() {
        u[3 * n] = 0.15 * p[0] + 0.02 * rnd();
        u[3 * n + 1] = -0.05 * p[1] + 0.1 * p[0] * p[2] + 0.02 * rnd();
        u[3 * n + 2] = 0.08 * p[0] * p[1] + 0.02 * rnd();
    }
    u
}

fn random_vector(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 11) as f64 / (1u64 << 53) as f64) - 0.5
        })
        .collect()
}

fn close(what: &str, a: f64, b: f64, tol: f64, scale: f64) {
    assert!((a - b).abs() <= tol * scale.max(a.abs()).max(b.abs()), "{what}: {a} vs {b}");
}

#[rstest]
#[case::tet10(CellType::Tet10, ogden())]
#[case::hex8(CellType::Hex8, ogden())]
#[case::tet4_neo_hookean(
    CellType::Tet4,
    HyperelasticLaw::NeoHookean(NeoHookean {
        mu: 1.0,
        kappa: 4.0,
        volumetric: Volumetric::LogSquared
    })
)]
#[case::hex20_mooney_rivlin(
    CellType::Hex20,
    HyperelasticLaw::MooneyRivlin(MooneyRivlin {
        c10: 0.4,
        c01: 0.1,
        kappa: 5.0,
        volumetric: Volumetric::SimoTaylor
    })
)]
#[case::tet10_svk(
    CellType::Tet10,
    HyperelasticLaw::SaintVenantKirchhoff(SaintVenantKirchhoff { young: 3.0, poisson: 0.3 })
)]
fn tangent_matches_finite_differences_of_the_residual(
    #[case] ct: CellType,
    #[case] law: HyperelasticLaw,
) {
    let m = model(ct, law);
    let u = state(&m, 7);
    let s = 0.8;
    for e in [0, m.n_volume_elements() - 1] {
        let nodes = m.element_nodes(e).to_vec();
        let nd = 3 * nodes.len();
        let mut ke = vec![0.0; nd * nd];
        let mut fe = vec![0.0; nd];
        m.element_residual_tangent(e, &u, s, Some(&mut ke), &mut fe).unwrap();
        let mut kmax = 0.0f64;
        ke.iter().for_each(|v| kmax = kmax.max(v.abs()));
        let h = 1e-6;
        for b in 0..nd {
            let d = 3 * nodes[b / 3] + b % 3;
            let (mut up, mut um) = (u.clone(), u.clone());
            up[d] += h;
            um[d] -= h;
            let (mut fp, mut fm) = (vec![0.0; nd], vec![0.0; nd]);
            m.element_residual_tangent(e, &up, s, None, &mut fp).unwrap();
            m.element_residual_tangent(e, &um, s, None, &mut fm).unwrap();
            for a in 0..nd {
                let fd = (fp[a] - fm[a]) / (2.0 * h);
                close(&format!("K[{a}][{b}] of element {e}"), ke[a * nd + b], fd, 1e-6, kmax);
            }
        }
        // Symmetric (dead loads, hyperelastic).
        for a in 0..nd {
            for b in 0..nd {
                close("symmetry", ke[a * nd + b], ke[b * nd + a], 1e-12, kmax);
            }
        }
    }
}

/// μᵀ R_full as a function of the model, for finite differences.
fn mu_dot_r(m: &FiniteStrainModel, u: &[f64], s: f64, mu: &[f64]) -> f64 {
    m.full_residual(u, s).unwrap().iter().zip(mu).map(|(a, b)| a * b).sum()
}

#[rstest]
#[case::tet10(CellType::Tet10)]
#[case::hex8(CellType::Hex8)]
fn parameter_products_match_finite_differences(#[case] ct: CellType) {
    let mut m = model(ct, ogden());
    let u = state(&m, 11);
    let s = 0.7;
    let mu = random_vector(3 * m.n_nodes(), 3);
    let vjp = m.parameter_vjp(&u, s, &mu, FiniteVjpRequest::ALL).unwrap();
    let fd = |m: &mut FiniteStrainModel, set: &dyn Fn(&mut FiniteStrainModel, f64), x0: f64| {
        let h = 1e-6 * x0.abs().max(1.0);
        set(m, x0 + h);
        let p = mu_dot_r(m, &u, s, &mu);
        set(m, x0 - h);
        let q = mu_dot_r(m, &u, s, &mu);
        set(m, x0);
        (p - q) / (2.0 * h)
    };
    let p0 = m.region_parameters(0);
    for k in 0..p0.len() {
        let set = move |m: &mut FiniteStrainModel, v: f64| {
            let mut p = m.region_parameters(0);
            p[k] = v;
            m.set_region_parameters(0, &p).unwrap();
        };
        close(&m.parameter_names(0)[k], vjp.material[0][k], fd(&mut m, &set, p0[k]), 1e-6, 1e-8);
    }
    for e in [0, 3] {
        let set = move |m: &mut FiniteStrainModel, v: f64| m.element_scale[e] = v;
        let x0 = m.element_scale[e];
        close(&format!("scale[{e}]"), vjp.element_scale[e], fd(&mut m, &set, x0), 1e-6, 1e-8);
    }
    for i in 0..3 {
        let set = move |m: &mut FiniteStrainModel, v: f64| m.regions[0].body_force[i] = v;
        let x0 = m.regions[0].body_force[i];
        close("body", vjp.body_force[0][i], fd(&mut m, &set, x0), 1e-6, 1e-8);
    }
    let set = |m: &mut FiniteStrainModel, v: f64| m.regions[0].alpha = v;
    close("alpha", vjp.alpha[0], fd(&mut m, &set, 2e-3), 1e-5, 1e-8);
    let set = |m: &mut FiniteStrainModel, v: f64| m.regions[0].t_ref = v;
    close("t_ref", vjp.t_ref[0], fd(&mut m, &set, 290.0), 1e-5, 1e-8);
    // Traction (condition 1) and pressure (condition 2).
    for i in 0..3 {
        let set = move |m: &mut FiniteStrainModel, v: f64| {
            let mut t = [0.4, -0.1, 0.2];
            t[i] = v;
            m.set_boundary_kind(1, BcKind::Traction { traction: t });
        };
        let x0 = [0.4, -0.1, 0.2][i];
        close("traction", vjp.traction[1][i], fd(&mut m, &set, x0), 1e-6, 1e-8);
    }
    let set = |m: &mut FiniteStrainModel, v: f64| {
        m.set_boundary_kind(2, BcKind::Pressure { pressure: v })
    };
    close("pressure", vjp.pressure[2], fd(&mut m, &set, 0.3), 1e-6, 1e-8);
    // Prescribed displacement values of condition 0: u_c = s ū_c, so ∂/∂ū_c = s ∂/∂u_c summed
    // over the dofs the condition owns in component c.
    for i in 0..2 {
        let h = 1e-6;
        let mut total = 0.0;
        for (d, o) in m.constraint_owner().iter().enumerate() {
            if *o == Some(0) && d % 3 == i {
                let (mut up, mut um) = (u.clone(), u.clone());
                up[d] += s * h;
                um[d] -= s * h;
                total += (mu_dot_r(&m, &up, s, &mu) - mu_dot_r(&m, &um, s, &mu)) / (2.0 * h);
            }
        }
        close("displacement", vjp.displacement[0][i], total, 1e-6, 1e-8);
    }
    // Nodal temperatures.
    let t0 = m.temperature().unwrap().to_vec();
    let tv = vjp.temperature.as_ref().unwrap();
    for n in [0, 5, m.n_nodes() - 1] {
        let set = |m: &mut FiniteStrainModel, v: f64| {
            let mut t = t0.clone();
            t[n] = v;
            m.set_temperature(Some(t)).unwrap();
        };
        close(&format!("T[{n}]"), tv[n], fd(&mut m, &set, t0[n]), 1e-5, 1e-8);
    }
    // Coordinates: global product against finite differences of μᵀ R_full.
    let cv = vjp.coords.as_ref().unwrap();
    let mut cmax = 0.0f64;
    cv.iter().flatten().for_each(|v| cmax = cmax.max(v.abs()));
    for n in [0, 4, 9, m.n_nodes() - 1] {
        for k in 0..3 {
            let x0 = m.coords[n][k];
            let set = move |m: &mut FiniteStrainModel, v: f64| m.coords[n][k] = v;
            close(&format!("X[{n}][{k}]"), cv[n][k], fd(&mut m, &set, x0), 1e-6, cmax);
        }
    }
}

#[rstest]
#[case::tet10(CellType::Tet10)]
#[case::hex8(CellType::Hex8)]
fn closed_form_coordinate_product_matches_finite_differences(#[case] ct: CellType) {
    let m = model(ct, ogden());
    let u = state(&m, 5);
    let mu = random_vector(3 * m.n_nodes(), 9);
    for e in 0..m.n_volume_elements() {
        let nd = 3 * m.element_nodes(e).len();
        let (mut a, mut b) = (vec![0.0; nd], vec![0.0; nd]);
        m.coordinate_vjp_element(e, &u, 0.9, &mu, &mut a).unwrap();
        m.coordinate_vjp_fd(e, &u, 0.9, &mu, 1e-6, &mut b).unwrap();
        let scale = a.iter().fold(0.0f64, |s, v| s.max(v.abs()));
        for r in 0..nd {
            close(&format!("element {e} local {r}"), a[r], b[r], 1e-6, scale);
        }
    }
}

#[test]
fn inverted_element_is_named() {
    let m = model(CellType::Hex8, ogden());
    let mut u = vec![0.0; 3 * m.n_nodes()];
    // Fold the x = 1 face back past x = 0.
    for (n, p) in m.coords.iter().enumerate() {
        u[3 * n] = -1.6 * p[0] * p[0];
    }
    let err = m.full_residual(&u, 1.0).unwrap_err();
    match &err {
        FiniteStrainError::InvertedElement { cell_tag, det_f, centroid, .. } => {
            assert!(*det_f <= 0.0 && *cell_tag >= 1 && centroid[0] > 0.0, "{err}");
        }
        other => panic!("expected an inverted element, got {other}"),
    }
    assert!(err.to_string().contains("inverted"), "{err}");
}

#[test]
fn undeformed_state_is_stress_free_with_all_laws() {
    for law in [
        ogden(),
        HyperelasticLaw::NeoHookean(NeoHookean {
            mu: 1.0,
            kappa: 3.0,
            volumetric: Volumetric::Quadratic,
        }),
        HyperelasticLaw::SaintVenantKirchhoff(SaintVenantKirchhoff { young: 1.0, poisson: 0.2 }),
    ] {
        let mut m = model(CellType::Tet10, law.clone());
        m.set_temperature(None).unwrap();
        m.regions[0].body_force = [0.0; 3];
        let r = m.full_residual(&vec![0.0; 3 * m.n_nodes()], 0.0).unwrap();
        assert!(r.iter().all(|v| v.abs() < 1e-13), "{}", law.name());
        assert_eq!(law.parameters().len(), law.parameter_names().len());
    }
}

#[rstest]
#[case::tet10(CellType::Tet10)]
#[case::hex8(CellType::Hex8)]
fn rigid_rotation_is_stress_free(#[case] ct: CellType) {
    let mut m = model(ct, ogden());
    m.set_temperature(None).unwrap();
    // Rotation by 60° about the axis (1, 2, 2)/3 (Rodrigues).
    let (k, t) = ([1.0 / 3.0, 2.0 / 3.0, 2.0 / 3.0], 60f64.to_radians());
    let kx = [[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]];
    let mut r = [[0.0; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            let k2: f64 = (0..3).map(|l| kx[i][l] * kx[l][j]).sum();
            r[i][j] = f64::from(u8::from(i == j)) + t.sin() * kx[i][j] + (1.0 - t.cos()) * k2;
        }
    }
    let mut u = vec![0.0; 3 * m.n_nodes()];
    for (n, x) in m.coords.iter().enumerate() {
        for i in 0..3 {
            u[3 * n + i] = (0..3).map(|j| r[i][j] * x[j]).sum::<f64>() - x[i];
        }
    }
    // Load factor 0: no loads, so the residual is the internal force alone.
    let res = m.full_residual(&u, 0.0).unwrap();
    assert!(
        res.iter().all(|v| v.abs() < 1e-12),
        "{:?}",
        res.iter().fold(0.0f64, |a, v| a.max(v.abs()))
    );
    for (_, p) in m.stresses(&u, 0.0).unwrap() {
        assert!(p.iter().flatten().all(|v| v.abs() < 1e-12), "{p:?}");
    }
}

#[test]
fn sparse_products_skip_only_untouched_elements() {
    let m = model(CellType::Tet10, ogden());
    let u = state(&m, 13);
    let s = 0.6;
    // Weights on the xmin nodes only (a reaction quantity).
    let mut c = vec![0.0; 3 * m.n_nodes()];
    for &n in m.group_nodes("xmin").unwrap() {
        c[3 * n] = 1.0;
        c[3 * n + 2] = -0.5;
    }
    let full: f64 = m.full_residual(&u, s).unwrap().iter().zip(&c).map(|(a, b)| a * b).sum();
    let sparse = m.residual_dot(&u, s, &c).unwrap();
    close("cᵀR", sparse, full, 1e-13, 1e-12);
    // The material product with c equals finite differences of cᵀR (elements away from xmin
    // are skipped).
    let vjp = m.parameter_vjp(&u, s, &c, FiniteVjpRequest::ALL).unwrap();
    let mut mm = m.clone();
    let p0 = m.region_parameters(0);
    let h = 1e-6;
    let mut pp = p0.clone();
    pp[0] += h;
    mm.set_region_parameters(0, &pp).unwrap();
    let a = mu_dot_r(&mm, &u, s, &c);
    pp[0] -= 2.0 * h;
    mm.set_region_parameters(0, &pp).unwrap();
    let b = mu_dot_r(&mm, &u, s, &c);
    close("mu1", vjp.material[0][0], (a - b) / (2.0 * h), 1e-6, 1e-8);
}
