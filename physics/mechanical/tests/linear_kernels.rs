//! Linear thermo-elastic kernels against their generic (dual-number) form, and every
//! vector-Jacobian product and objective derivative against finite differences.

use gradfem_mechanical::linear::objective::{ObjectiveKind, ObjectiveTerm, evaluate};
use gradfem_mechanical::linear::{
    BcKind, BcSpec, LinearElasticModel, RegionSpec, VjpRequest, lame,
};
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_mesh::{CellBlock, CellId, CellType, Mesh};
use num_dual::Dual64;
use rstest::rstest;

/// A 2×2×2 box of `ct` cells (Prism6: each hex split in two prisms), smoothly distorted.
fn distorted_box(ct: CellType) -> Mesh {
    let base = if ct == CellType::Prism6 { CellType::Hex8 } else { ct };
    let mut mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [1.0, 0.7, 0.5],
        divisions: [2, 2, 2],
        cell_type: base,
    });
    if ct == CellType::Prism6 {
        let hexes = mesh.blocks[0].clone();
        let mut prisms = CellBlock::new(CellType::Prism6);
        for (i, h) in hexes.cells().enumerate() {
            let t = 1_000_000 + 2 * i as u64;
            prisms.push(&[h[0], h[1], h[2], h[4], h[5], h[6]], t);
            prisms.push(&[h[0], h[2], h[3], h[4], h[6], h[7]], t + 1);
        }
        let n = prisms.len();
        mesh.blocks[0] = prisms;
        let domain = mesh.groups.iter_mut().find(|g| g.name == "domain").unwrap();
        domain.cells = (0..n).map(|index| CellId { block: 0, index }).collect();
    }
    for p in &mut mesh.coords {
        let (x, y, z) = (p[0], p[1], p[2]);
        p[0] = x + 0.05 * (y * z).sin();
        p[1] = y + 0.04 * (x * 2.0).sin() * z;
        p[2] = z + 0.03 * x * y;
    }
    mesh
}

fn model(ct: CellType) -> LinearElasticModel {
    let mesh = distorted_box(ct);
    let mut m = LinearElasticModel::new(
        &mesh,
        &[RegionSpec {
            group: "domain".into(),
            young: 2.0e3,
            poisson: 0.27,
            alpha: 1.3e-3,
            t_ref: 290.0,
            body_force: [1.5, -2.0, 0.7],
        }],
        &[
            BcSpec { group: "xmin".into(), kind: BcKind::Roller { components: vec![0] } },
            BcSpec { group: "xmax".into(), kind: BcKind::Traction { traction: [3.0, -1.0, 2.0] } },
            BcSpec { group: "ymax".into(), kind: BcKind::Pressure { pressure: 5.0 } },
            BcSpec { group: "zmin".into(), kind: BcKind::Roller { components: vec![2] } },
            BcSpec {
                group: "ymin".into(),
                kind: BcKind::Displacement { value: [None, Some(0.01), None] },
            },
        ],
    )
    .unwrap();
    // Vary E and ν per element so the per-element VJPs are not all alike.
    for e in 0..m.n_volume_elements() {
        m.young_elem[e] *= 1.0 + 0.1 * (e % 3) as f64;
        m.poisson_elem[e] -= 0.02 * (e % 2) as f64;
    }
    let t: Vec<f64> =
        m.coords.iter().map(|p| 300.0 + 10.0 * p[0] - 4.0 * p[1] * p[1] + 3.0 * p[2]).collect();
    m.set_temperature(Some(t)).unwrap();
    m
}

fn displacement(m: &LinearElasticModel) -> Vec<f64> {
    let unknowns: Vec<f64> =
        (0..m.n_unknowns()).map(|i| 0.01 * ((i as f64) * 0.37).sin()).collect();
    m.nodal_displacement(&unknowns)
}

fn adjoint(m: &LinearElasticModel) -> Vec<f64> {
    (0..3 * m.n_nodes())
        .map(|d| {
            let p = m.coords[d / 3];
            (p[0] + 2.0 * p[1] - p[2] + d as f64 * 0.1).sin()
        })
        .collect()
}

/// λ · R(u) over every dof.
fn phi(m: &LinearElasticModel, u: &[f64], lambda: &[f64]) -> f64 {
    m.full_residual(u).iter().zip(lambda).map(|(a, b)| a * b).sum()
}

const ALL_TYPES: [CellType; 6] = [
    CellType::Tet4,
    CellType::Tet10,
    CellType::Hex8,
    CellType::Hex20,
    CellType::Hex27,
    CellType::Prism6,
];

#[rstest]
fn residual_and_tangents_match_the_generic_form(
    #[values(
        CellType::Tet4,
        CellType::Tet10,
        CellType::Hex8,
        CellType::Hex20,
        CellType::Hex27,
        CellType::Prism6
    )]
    ct: CellType,
) {
    let m = model(ct);
    let u = displacement(&m);
    let temp = m.temperature().unwrap().to_vec();
    for e in 0..m.n_elements() {
        let nodes = m.element_nodes(e).to_vec();
        let nn = nodes.len();
        let nd = 3 * nn;
        let mut ke = vec![0.0; nd * nd];
        let mut fe = vec![0.0; nd];
        m.element_residual_tangent(e, &u, Some(&mut ke), &mut fe);
        let mut kt = vec![0.0; nd * nn];
        m.element_temperature_tangent(e, &mut kt);
        let x: Vec<[Dual64; 3]> = nodes.iter().map(|&n| m.coords[n].map(Dual64::from)).collect();
        let p = m.element_params(e).lift::<Dual64>();
        let te0: Vec<Dual64> = nodes.iter().map(|&n| Dual64::from(temp[n])).collect();
        let ue0: Vec<Dual64> =
            nodes.iter().flat_map(|&n| [0, 1, 2].map(|i| Dual64::from(u[3 * n + i]))).collect();
        let scale = fe.iter().chain(&ke).map(|v| v.abs()).fold(0.0, f64::max);
        let tol = 1e-12 * (1.0 + scale);
        let mut r = vec![Dual64::from(0.0); nd];
        for b in 0..nd {
            let mut ue = ue0.clone();
            ue[b].eps = 1.0;
            m.element_residual_generic(e, &x, &ue, &te0, &p, &mut r);
            for a in 0..nd {
                assert!(
                    (r[a].re - fe[a]).abs() < tol,
                    "{ct} e{e} r[{a}]: {} vs {}",
                    r[a].re,
                    fe[a]
                );
                assert!(
                    (r[a].eps - ke[a * nd + b]).abs() < tol,
                    "{ct} e{e} K[{a},{b}]: {} vs {}",
                    r[a].eps,
                    ke[a * nd + b]
                );
            }
        }
        for b in 0..nn {
            let mut te = te0.clone();
            te[b].eps = 1.0;
            m.element_residual_generic(e, &x, &ue0, &te, &p, &mut r);
            for a in 0..nd {
                assert!(
                    (r[a].eps - kt[a * nn + b]).abs() < tol,
                    "{ct} e{e} dR/dT[{a},{b}]: {} vs {}",
                    r[a].eps,
                    kt[a * nn + b]
                );
            }
        }
    }
}

/// (∂R/∂u)ᵀλ matrix-free (each element's residual at u = λ without loads) equals the
/// contraction of the element stiffness matrices.
#[rstest]
fn tangent_transpose_product_is_the_contraction_of_the_stiffness(
    #[values(CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Prism6)]
    ct: CellType,
) {
    let m = model(ct);
    let (u, lambda) = (displacement(&m), adjoint(&m));
    let got = m.tangent_transpose_product(&lambda);
    let mut want = vec![0.0; 3 * m.n_nodes()];
    for e in 0..m.n_volume_elements() {
        let nodes = m.element_nodes(e).to_vec();
        let nd = 3 * nodes.len();
        let (mut ke, mut fe) = (vec![0.0; nd * nd], vec![0.0; nd]);
        m.element_residual_tangent(e, &u, Some(&mut ke), &mut fe);
        for b in 0..nd {
            want[3 * nodes[b / 3] + b % 3] +=
                (0..nd).map(|a| ke[a * nd + b] * lambda[3 * nodes[a / 3] + a % 3]).sum::<f64>();
        }
    }
    assert_matches_reference(&got, &want, &format!("{ct} dof"));
}

/// λᵀ ∂R/∂T in closed form (the divergence of λ per point) equals the contraction of the
/// element temperature tangents.
#[rstest]
fn temperature_vjp_is_the_contraction_of_the_temperature_tangent(
    #[values(CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Prism6)]
    ct: CellType,
) {
    let m = model(ct);
    let lambda = adjoint(&m);
    let got = m.temperature_vjp(&lambda);
    let mut want = vec![0.0; m.n_nodes()];
    for e in 0..m.n_volume_elements() {
        let nodes = m.element_nodes(e).to_vec();
        let nn = nodes.len();
        let mut kt = vec![0.0; 3 * nn * nn];
        m.element_temperature_tangent(e, &mut kt);
        for b in 0..nn {
            want[nodes[b]] +=
                (0..3 * nn).map(|r| kt[r * nn + b] * lambda[3 * nodes[r / 3] + r % 3]).sum::<f64>();
        }
    }
    assert_matches_reference(&got, &want, &format!("{ct} node"));
}

/// `got` equals the non-vanishing reference `want` entry by entry to 1e-12 of its largest.
fn assert_matches_reference(got: &[f64], want: &[f64], what: &str) {
    let scale = want.iter().map(|v| v.abs()).fold(0.0, f64::max);
    assert!(scale > 0.0, "{what}: a vanishing reference proves nothing");
    for (i, (x, y)) in got.iter().zip(want).enumerate() {
        assert!((x - y).abs() <= 1e-12 * scale, "{what} {i}: {x} vs {y}");
    }
}

#[rstest]
fn closed_form_shape_derivative_matches_dual_numbers(
    #[values(
        CellType::Tet4,
        CellType::Tet10,
        CellType::Hex8,
        CellType::Hex20,
        CellType::Hex27,
        CellType::Prism6
    )]
    ct: CellType,
) {
    let m = model(ct);
    let u = displacement(&m);
    let lambda = adjoint(&m);
    for e in 0..m.n_volume_elements() {
        let nd = 3 * m.element_nodes(e).len();
        let (mut a, mut b) = (vec![0.0; nd], vec![0.0; nd]);
        m.coordinate_vjp_element(e, &u, &lambda, &mut a);
        m.coordinate_vjp_dual(e, &u, &lambda, &mut b);
        let scale = b.iter().map(|v| v.abs()).fold(0.0, f64::max);
        assert!(scale > 1e-3, "{ct}: a vanishing reference proves nothing");
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-11 * (1.0 + scale), "{ct} element {e}: {x} vs {y}");
        }
    }
}

/// Central difference of `f` around a parameter set by `set`.
fn fd(
    m: &mut LinearElasticModel,
    x0: f64,
    h: f64,
    set: impl Fn(&mut LinearElasticModel, f64),
    f: impl Fn(&LinearElasticModel) -> f64,
) -> f64 {
    set(m, x0 + h);
    let fp = f(m);
    set(m, x0 - h);
    let fm = f(m);
    set(m, x0);
    (fp - fm) / (2.0 * h)
}

fn close(what: &str, fd: f64, vjp: f64, rel: f64) {
    assert!(
        (fd - vjp).abs() <= rel * (1e-8 + fd.abs().max(vjp.abs())),
        "{what}: finite difference {fd} vs {vjp}"
    );
}

#[rstest]
fn parameter_vjps_match_finite_differences(
    #[values(CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Prism6)] ct: CellType,
) {
    let mut m = model(ct);
    let unknowns: Vec<f64> =
        (0..m.n_unknowns()).map(|i| 0.01 * ((i as f64) * 0.37).sin()).collect();
    let lambda = adjoint(&m);
    let u0 = m.nodal_displacement(&unknowns);
    let vjp = m.parameter_vjp(&u0, &lambda, VjpRequest::ALL);
    let f = |m: &LinearElasticModel| phi(m, &m.nodal_displacement(&unknowns), &lambda);
    for e in [0, m.n_volume_elements() / 2, m.n_volume_elements() - 1] {
        let x0 = m.young_elem[e];
        let d = fd(&mut m, x0, 1e-3 * x0, |m, v| m.young_elem[e] = v, f);
        close(&format!("{ct} E[{e}]"), d, vjp.young_elem[e], 1e-7);
        let x0 = m.poisson_elem[e];
        let d = fd(&mut m, x0, 1e-5, |m, v| m.poisson_elem[e] = v, f);
        close(&format!("{ct} nu[{e}]"), d, vjp.poisson_elem[e], 1e-6);
    }
    let x0 = m.regions[0].alpha;
    let d = fd(&mut m, x0, 1e-6, |m, v| m.regions[0].alpha = v, f);
    close(&format!("{ct} alpha"), d, vjp.alpha[0], 1e-7);
    let x0 = m.regions[0].t_ref;
    let d = fd(&mut m, x0, 1e-2, |m, v| m.regions[0].t_ref = v, f);
    close(&format!("{ct} t_ref"), d, vjp.t_ref[0], 1e-7);
    for k in 0..3 {
        let x0 = m.regions[0].body_force[k];
        let d = fd(&mut m, x0, 1e-2, |m, v| m.regions[0].body_force[k] = v, f);
        close(&format!("{ct} body[{k}]"), d, vjp.body_force[0][k], 1e-7);
        let tr = [3.0, -1.0, 2.0];
        let d = fd(
            &mut m,
            tr[k],
            1e-2,
            |m, v| {
                let mut t = tr;
                t[k] = v;
                m.set_boundary_kind(1, BcKind::Traction { traction: t })
            },
            f,
        );
        close(&format!("{ct} traction[{k}]"), d, vjp.traction[1][k], 1e-7);
    }
    let d =
        fd(&mut m, 5.0, 1e-2, |m, v| m.set_boundary_kind(2, BcKind::Pressure { pressure: v }), f);
    close(&format!("{ct} pressure"), d, vjp.pressure[2], 1e-7);
    assert!(vjp.pressure[2].abs() > 1e-6);
    let d = fd(
        &mut m,
        0.01,
        1e-4,
        |m, v| m.set_boundary_kind(4, BcKind::Displacement { value: [None, Some(v), None] }),
        f,
    );
    close(&format!("{ct} prescribed u_y"), d, vjp.displacement[4][1], 1e-6);
    assert!(vjp.displacement[4][1].abs() > 1e-6);
    assert_eq!(vjp.displacement[4][0], 0.0);
    let temp = vjp.temperature.as_ref().unwrap();
    let t0 = m.temperature().unwrap().to_vec();
    for n in [0, 7, m.n_nodes() - 1] {
        let d = fd(
            &mut m,
            t0[n],
            1e-2,
            |m, v| {
                let mut t = t0.clone();
                t[n] = v;
                m.set_temperature(Some(t)).unwrap();
            },
            f,
        );
        close(&format!("{ct} T[{n}]"), d, temp[n], 1e-7);
    }
    let dx = vjp.coords.as_ref().unwrap();
    for (n, k) in [(0usize, 0usize), (5, 1), (13, 2), (m.n_nodes() - 1, 0), (m.n_nodes() / 2, 2)] {
        let x0 = m.coords[n][k];
        let d = fd(&mut m, x0, 1e-6, |m, v| m.coords[n][k] = v, f);
        close(&format!("{ct} X[{n}][{k}]"), d, dx[n][k], 1e-6);
    }
}

#[rstest]
fn objective_derivatives_match_finite_differences(
    #[values(CellType::Tet10, CellType::Hex8, CellType::Prism6)] ct: CellType,
    #[values(0, 1, 2, 3, 4)] which: usize,
) {
    let mut m = model(ct);
    let u = displacement(&m);
    let kind = match which {
        0 => ObjectiveKind::PointDisplacement {
            point: [0.61, 0.33, 0.27],
            direction: [0.3, -1.0, 0.5],
        },
        1 => ObjectiveKind::AverageDisplacement {
            group: "domain".into(),
            direction: [1.0, 0.2, -0.4],
        },
        2 => {
            ObjectiveKind::AverageDisplacement { group: "xmax".into(), direction: [0.5, 1.0, 0.1] }
        }
        3 => ObjectiveKind::Compliance,
        _ => ObjectiveKind::VonMisesPNorm { group: "domain".into(), p: 6.0 },
    };
    let terms = [ObjectiveTerm { weight: 1.7, kind }];
    let ev = evaluate(&m, &terms, &u, true).unwrap();
    let j = |m: &LinearElasticModel, u: &[f64]| evaluate(m, &terms, u, false).unwrap().value;
    let mut any = 0.0f64;
    for d in [0, 17, 3 * m.n_nodes() / 2 + 1, 3 * m.n_nodes() - 2] {
        let h = 1e-6;
        let mut up = u.clone();
        up[d] += h;
        let mut um = u.clone();
        um[d] -= h;
        let fdv = (j(&m, &up) - j(&m, &um)) / (2.0 * h);
        close(&format!("{ct} {which} du[{d}]"), fdv, ev.d_displacement[d], 1e-6);
        any = any.max(fdv.abs());
    }
    let dx = ev.d_coords.clone().unwrap();
    // The point objective only sees the nodes of one element: use those.
    let nodes: Vec<usize> = match which {
        0 => {
            let loc =
                gradfem_mechanical::linear::objective::locate(&m, [0.61, 0.33, 0.27]).unwrap();
            m.element_nodes(loc.element).iter().copied().take(3).collect()
        }
        _ => vec![4, m.n_nodes() / 2, m.n_nodes() - 3],
    };
    for &n in &nodes {
        for k in 0..3 {
            let x0 = m.coords[n][k];
            let d = fd(&mut m, x0, 1e-6, |m, v| m.coords[n][k] = v, |m| j(m, &u));
            close(&format!("{ct} {which} X[{n}][{k}]"), d, dx[n][k], 1e-5);
            any = any.max(d.abs());
        }
    }
    for e in [0, m.n_volume_elements() - 1] {
        let x0 = m.young_elem[e];
        let d = fd(&mut m, x0, 1e-5 * x0, |m, v| m.young_elem[e] = v, |m| j(m, &u));
        close(&format!("{ct} {which} E[{e}]"), d, ev.d_young_elem[e], 1e-6);
        let x0 = m.poisson_elem[e];
        let d = fd(&mut m, x0, 1e-5, |m, v| m.poisson_elem[e] = v, |m| j(m, &u));
        close(&format!("{ct} {which} nu[{e}]"), d, ev.d_poisson_elem[e], 1e-6);
    }
    assert!(any > 1e-8, "{ct} {which}: every derivative checked vanishes");
}

#[test]
fn reactions_balance_the_loads() {
    // Σ over every dof of R = −(loads) + Σ reactions; at any u, the sum of all residual entries
    // equals Σ reactions + Σ residual at free dofs, and the volume part sums to −∫b.
    let m = model(CellType::Hex20);
    let u = displacement(&m);
    let r = m.full_residual(&u);
    let f = m.load_vector();
    // Internal forces are self-equilibrated: Σ_a r_ai + Σ_a f_ai = 0 per component.
    for i in 0..3 {
        let s: f64 = (0..m.n_nodes()).map(|n| r[3 * n + i] + f[3 * n + i]).sum();
        let scale: f64 = (0..m.n_nodes()).map(|n| f[3 * n + i].abs()).sum();
        assert!(s.abs() < 1e-9 * scale, "component {i}: {s}");
    }
    let reac = m.reactions(&u);
    let owner = m.constraint_owner();
    let expect: f64 =
        (0..3 * m.n_nodes()).filter(|&d| owner[d] == Some(0) && d % 3 == 0).map(|d| r[d]).sum();
    assert!((reac[0][0] - expect).abs() < 1e-12 && expect.abs() > 0.0);
    assert_eq!(reac[0][1], 0.0);
    assert_eq!(reac[1], [0.0; 3]);
}

#[test]
fn bad_input_is_reported() {
    let mesh = distorted_box(CellType::Tet4);
    let region = |g: &str, nu: f64| RegionSpec {
        group: g.into(),
        young: 1.0,
        poisson: nu,
        alpha: 0.0,
        t_ref: 0.0,
        body_force: [0.0; 3],
    };
    let err = LinearElasticModel::new(&mesh, &[region("steel", 0.3)], &[]).unwrap_err();
    assert!(err.to_string().contains("unknown group 'steel'"), "{err}");
    let err = LinearElasticModel::new(&mesh, &[region("domain", 0.5)], &[]).unwrap_err();
    assert!(err.to_string().contains("poisson"), "{err}");
    let err = LinearElasticModel::new(&mesh, &[region("domain", 0.3)], &[]).unwrap_err();
    assert!(err.to_string().contains("rigid-body motions are free"), "{err}");
    let err = LinearElasticModel::new(
        &mesh,
        &[region("domain", 0.3)],
        &[
            BcSpec { group: "xmin".into(), kind: BcKind::Fixed },
            BcSpec {
                group: "ymin".into(),
                kind: BcKind::Displacement { value: [Some(1.0), None, None] },
            },
        ],
    )
    .unwrap_err();
    assert!(err.to_string().contains("prescribed by both 'xmin'"), "{err}");
    let err = LinearElasticModel::new(
        &mesh,
        &[region("domain", 0.3)],
        &[BcSpec { group: "domain".into(), kind: BcKind::Pressure { pressure: 1.0 } }],
    )
    .unwrap_err();
    assert!(err.to_string().contains("dimension 3"), "{err}");
    let _ = ALL_TYPES;
    let (l, mu) = lame(210e9_f64, 0.3);
    assert!((l - 121.153846e9).abs() < 1e4 && (mu - 80.769231e9).abs() < 1e4);
}
