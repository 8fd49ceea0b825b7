//! Element kernels against their generic (dual-number) form, and vector-Jacobian products
//! against finite differences, on distorted boxes of every cell type.

mod common;

use common::*;
use gradfem_electrical::{
    ConductorSpec, ElectricalModel, ResistivityLaw, TerminalKind, TerminalSpec, VjpRequest,
};
use gradfem_mesh::CellType;
use num_dual::Dual64;
use rstest::rstest;

fn laws() -> [ResistivityLaw; 3] {
    [
        ResistivityLaw::Constant,
        ResistivityLaw::Linear { alpha_r: 3.9e-3 },
        ResistivityLaw::Table {
            temperatures: vec![280.0, 310.0, 330.0, 400.0],
            multipliers: vec![0.9, 1.0, 1.3, 1.6],
        },
    ]
}

/// Voltage 1.5 V at xmin, a current terminal of 0.7 A at xmax.
fn model(ct: CellType, law: ResistivityLaw) -> ElectricalModel {
    let mesh = distorted_box(ct);
    ElectricalModel::new(
        &mesh,
        &[ConductorSpec::with_resistivity("domain", 0.4, law, 300.0)],
        &[
            TerminalSpec { group: "xmin".into(), kind: TerminalKind::Voltage { value: 1.5 } },
            TerminalSpec { group: "xmax".into(), kind: TerminalKind::Current { current: 0.7 } },
        ],
    )
    .unwrap()
}

fn dual_nodes(m: &ElectricalModel, e: usize) -> Vec<[Dual64; 3]> {
    m.element_nodes(e).iter().map(|&n| m.coords[n].map(Dual64::from)).collect()
}

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
    #[values(0, 1, 2)] law: usize,
    #[values(false, true)] with_t: bool,
) {
    let m = model(ct, laws()[law].clone());
    let t = temperature(&m);
    let t = with_t.then_some(t.as_slice());
    let phi = potential(&m);
    let c = Dual64::from;
    for e in 0..m.n_volume_elements() {
        let nodes = m.element_nodes(e).to_vec();
        let nn = nodes.len();
        let mut ke = vec![0.0; nn * nn];
        let mut fe = vec![0.0; nn];
        m.element_residual_tangent(e, &phi, t, Some(&mut ke), &mut fe);
        let mut kt = vec![0.0; nn * nn];
        if let Some(t) = t {
            m.temperature_tangent_element(e, &phi, t, &mut kt);
        }
        let x = dual_nodes(&m, e);
        let s0 = c(m.sigma_elem[e]);
        let al = c(laws()[law].alpha_r().unwrap_or(0.0));
        for b in 0..nn {
            let seed = |v: &[f64], on: bool| -> Vec<Dual64> {
                nodes
                    .iter()
                    .enumerate()
                    .map(|(a, &n)| Dual64::new(v[n], if a == b && on { 1.0 } else { 0.0 }))
                    .collect()
            };
            // ∂/∂φ_b
            let pe = seed(&phi, true);
            let te = t.map(|t| seed(t, false));
            let mut r = vec![c(0.0); nn];
            m.element_residual_generic(e, &x, &pe, te.as_deref(), s0, al, &mut r);
            for a in 0..nn {
                let scale = 1e-11 * (1.0 + fe[a].abs() + ke[a * nn + b].abs());
                assert!((r[a].re - fe[a]).abs() < scale, "{ct} e{e} residual {a}");
                assert!((r[a].eps - ke[a * nn + b]).abs() < scale, "{ct} e{e} K ({a},{b})");
            }
            // ∂/∂T_b
            if let Some(t) = t {
                let pe = seed(&phi, false);
                let te = seed(t, true);
                m.element_residual_generic(e, &x, &pe, Some(&te), s0, al, &mut r);
                for a in 0..nn {
                    let scale = 1e-11 * (1.0 + kt[a * nn + b].abs() + fe[a].abs());
                    assert!(
                        (r[a].eps - kt[a * nn + b]).abs() < scale,
                        "{ct} e{e} dR/dT ({a},{b}): {} vs {}",
                        r[a].eps,
                        kt[a * nn + b]
                    );
                }
            } else {
                assert!(kt.iter().all(|&v| v == 0.0));
            }
        }
    }
}

#[rstest]
fn joule_heat_load_and_tangents_match_the_generic_form(
    #[values(
        CellType::Tet4,
        CellType::Tet10,
        CellType::Hex8,
        CellType::Hex20,
        CellType::Hex27,
        CellType::Prism6
    )]
    ct: CellType,
    #[values(1, 2)] law: usize,
) {
    let m = model(ct, laws()[law].clone());
    let t = temperature(&m);
    let phi = potential(&m);
    let q = m.joule_heat_qp(&phi, Some(&t));
    let power = m.joule_power_elements(&phi, Some(&t));
    let c = Dual64::from;
    for e in 0..m.n_volume_elements() {
        let nodes = m.element_nodes(e).to_vec();
        let nn = nodes.len();
        let tab = m.element_table(e);
        assert_eq!(tab.degree, 2 * ct.order());
        let nq = tab.n_points();
        let off = m.qp_offsets()[e];
        assert_eq!(m.qp_offsets()[e + 1] - off, nq);
        // Weights det J · w_q in f64, as the thermal side integrates.
        let x: Vec<[f64; 3]> = nodes.iter().map(|&n| m.coords[n]).collect();
        let mut g = vec![[0.0; 3]; nn];
        let w: Vec<f64> = (0..nq)
            .map(|k| {
                tab.weights[k]
                    * gradfem_mesh::geometry::physical_gradients_into(3, tab.grad(k), &x, &mut g)
            })
            .collect();
        let mut load = vec![0.0; nn];
        m.joule_load_element(e, &phi, Some(&t), &mut load);
        let mut dqp = vec![0.0; nn * nn];
        let mut dqt = vec![0.0; nn * nn];
        m.joule_tangent_element(e, &phi, Some(&t), &mut dqp, &mut dqt);
        let p: f64 = (0..nq).map(|k| w[k] * q[off + k]).sum();
        assert!(close(p, power[e], 1e-12), "{ct} e{e} power {p} vs {}", power[e]);
        let xd = dual_nodes(&m, e);
        let s0 = c(m.sigma_elem[e]);
        let al = c(laws()[law].alpha_r().unwrap_or(0.0));
        for b in 0..nn {
            for wrt_t in [false, true] {
                let pe: Vec<Dual64> = nodes
                    .iter()
                    .enumerate()
                    .map(|(a, &n)| Dual64::new(phi[n], if a == b && !wrt_t { 1.0 } else { 0.0 }))
                    .collect();
                let te: Vec<Dual64> = nodes
                    .iter()
                    .enumerate()
                    .map(|(a, &n)| Dual64::new(t[n], if a == b && wrt_t { 1.0 } else { 0.0 }))
                    .collect();
                let mut qd = vec![c(0.0); nq];
                m.joule_heat_generic(e, &xd, &pe, Some(&te), s0, al, &mut qd);
                for k in 0..nq {
                    assert!(close(qd[k].re, q[off + k], 1e-12), "{ct} e{e} Q at point {k}");
                }
                for a in 0..nn {
                    let n = |k: usize| tab.shape(k);
                    let s: f64 = (0..nq).map(|k| w[k] * qd[k].re * n(k)[a]).sum();
                    let ds: f64 = (0..nq).map(|k| w[k] * qd[k].eps * n(k)[a]).sum();
                    assert!(close(s, load[a], 1e-12), "{ct} e{e} load {a}");
                    let mine = if wrt_t { dqt[a * nn + b] } else { dqp[a * nn + b] };
                    assert!(
                        (ds - mine).abs() < 1e-11 * (1.0 + ds.abs() + load[a].abs()),
                        "{ct} e{e} d(load {a})/d{}{b}: {ds} vs {mine}",
                        if wrt_t { "T" } else { "phi" }
                    );
                }
            }
        }
    }
}

/// λᵀR and Σ q̄ Q for finite differences of every parameter kind.
#[rstest]
fn parameter_and_joule_vjps_match_finite_differences(
    #[values(CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Prism6)]
    ct: CellType,
) {
    let mut m = model(ct, laws()[1].clone());
    let t = temperature(&m);
    let phi = potential(&m);
    let u = m.unknowns_from_nodal(&phi);
    // An adjoint-like λ: a smooth function of the unknowns' positions, 0 at fixed nodes.
    let lu: Vec<f64> = (0..m.n_unknowns()).map(|i| (0.37 * i as f64).sin()).collect();
    let lambda = m.nodal_from_unknowns(&lu);
    let vjp = m.parameter_vjp(&phi, Some(&t), &lambda, VjpRequest::ALL);
    let qbar: Vec<f64> =
        (0..*m.qp_offsets().last().unwrap()).map(|k| (0.11 * k as f64).cos()).collect();
    let jv = m.joule_vjp(&phi, Some(&t), &qbar, true);
    let lr =
        |m: &ElectricalModel, phi: &[f64], t: &[f64]| lambda_dot_residual(m, phi, Some(t), &lambda);
    let qq = |m: &ElectricalModel, phi: &[f64], t: &[f64]| -> f64 {
        m.joule_heat_qp(phi, Some(t)).iter().zip(&qbar).map(|(a, b)| a * b).sum()
    };
    let check = |what: &str, fd: f64, mine: f64| {
        assert!(
            (fd - mine).abs() < 1e-6 * (1.0 + fd.abs()),
            "{ct} {what}: finite difference {fd} vs vjp {mine}"
        );
    };
    // σ₀ of two elements (λᵀR and Q are linear in σ₀: exact differences).
    for e in [0, m.n_volume_elements() - 1] {
        let s = m.sigma_elem[e];
        let h = 1e-4 * s;
        m.sigma_elem[e] = s + h;
        let (fp, gp) = (lr(&m, &phi, &t), qq(&m, &phi, &t));
        m.sigma_elem[e] = s - h;
        let (fm, gm) = (lr(&m, &phi, &t), qq(&m, &phi, &t));
        m.sigma_elem[e] = s;
        check("sigma_elem", (fp - fm) / (2.0 * h), vjp.sigma_elem[e]);
        check("joule sigma_elem", (gp - gm) / (2.0 * h), jv.sigma_elem[e]);
    }
    // α_R.
    let h = 1e-6;
    m.set_alpha_r(0, 3.9e-3 + h);
    let (fp, gp) = (lr(&m, &phi, &t), qq(&m, &phi, &t));
    m.set_alpha_r(0, 3.9e-3 - h);
    let (fm, gm) = (lr(&m, &phi, &t), qq(&m, &phi, &t));
    m.set_alpha_r(0, 3.9e-3);
    check("alpha_r", (fp - fm) / (2.0 * h), vjp.alpha_r[0]);
    check("joule alpha_r", (gp - gm) / (2.0 * h), jv.alpha_r[0]);
    // Terminal voltage (through the fixed nodes) and current.
    let h = 1e-5;
    m.set_terminal_value(0, 1.5 + h);
    let fp = lr(&m, &m.nodal_potential(&u), &t);
    m.set_terminal_value(0, 1.5 - h);
    let fm = lr(&m, &m.nodal_potential(&u), &t);
    m.set_terminal_value(0, 1.5);
    check("voltage", (fp - fm) / (2.0 * h), vjp.voltage[0]);
    m.set_terminal_value(1, 0.7 + h);
    let fp = lr(&m, &phi, &t);
    m.set_terminal_value(1, 0.7 - h);
    let fm = lr(&m, &phi, &t);
    m.set_terminal_value(1, 0.7);
    check("current", (fp - fm) / (2.0 * h), vjp.current[1]);
    assert!(vjp.current[1] != 0.0);
    assert_eq!((vjp.current[0], vjp.voltage[1]), (0.0, 0.0));
    // Temperature, potential (Joule) and coordinates at a few nodes.
    let dx = vjp.coords.as_ref().unwrap();
    let jdx = jv.coords.as_ref().unwrap();
    for &n in &[0usize, 7, 13, m.n_nodes() - 1] {
        let h = 1e-3;
        let mut tp = t.clone();
        tp[n] += h;
        let mut tm = t.clone();
        tm[n] -= h;
        check(
            "temperature",
            (lr(&m, &phi, &tp) - lr(&m, &phi, &tm)) / (2.0 * h),
            vjp.temperature[n],
        );
        check(
            "joule temperature",
            (qq(&m, &phi, &tp) - qq(&m, &phi, &tm)) / (2.0 * h),
            jv.temperature[n],
        );
        let h = 1e-5;
        let mut pp = phi.clone();
        pp[n] += h;
        let mut pm = phi.clone();
        pm[n] -= h;
        check("joule phi", (qq(&m, &pp, &t) - qq(&m, &pm, &t)) / (2.0 * h), jv.phi[n]);
        for k in 0..3 {
            let h = 1e-6;
            let x0 = m.coords[n][k];
            m.coords[n][k] = x0 + h;
            let (fp, gp) = (lr(&m, &phi, &t), qq(&m, &phi, &t));
            m.coords[n][k] = x0 - h;
            let (fm, gm) = (lr(&m, &phi, &t), qq(&m, &phi, &t));
            m.coords[n][k] = x0;
            check("coords", (fp - fm) / (2.0 * h), dx[n][k]);
            check("joule coords", (gp - gm) / (2.0 * h), jdx[n][k]);
        }
    }
}

#[test]
fn linear_potential_is_an_exact_solution() {
    // Patch test: φ = a + b·x solves ∇·(σ∇φ) = 0 for constant σ; the interior residual of the
    // exact nodal values vanishes at every node off the boundary, for every cell type.
    for ct in ALL_CELLS {
        let mesh = distorted_box(ct);
        let m = ElectricalModel::new(
            &mesh,
            &[ConductorSpec::with_sigma("domain", 3.0)],
            &[TerminalSpec { group: "xmin".into(), kind: TerminalKind::Ground }],
        )
        .unwrap();
        let phi: Vec<f64> =
            m.coords.iter().map(|p| 1.0 + 2.0 * p[0] - 3.0 * p[1] + 0.5 * p[2]).collect();
        let r = m.interior_residual(&phi, None);
        for n in 0..m.n_nodes() {
            let on_boundary =
                mesh.groups.iter().filter(|g| g.dim == 2).any(|g| mesh.group_nodes(g).contains(&n));
            if !on_boundary {
                assert!(r[n].abs() < 1e-10, "{ct}: residual {} at interior node {n}", r[n]);
            }
        }
    }
}

#[test]
fn set_up_errors_are_reported() {
    let mesh = distorted_box(CellType::Tet4);
    let cond = [ConductorSpec::with_sigma("domain", 1.0)];
    let err = ElectricalModel::new(
        &mesh,
        &cond,
        &[TerminalSpec { group: "xmin".into(), kind: TerminalKind::Current { current: 1.0 } }],
    )
    .unwrap_err();
    assert!(err.to_string().contains("no terminal fixes a voltage"), "{err}");
    let err = ElectricalModel::new(
        &mesh,
        &cond,
        &[
            TerminalSpec { group: "xmin".into(), kind: TerminalKind::Ground },
            TerminalSpec { group: "ymin".into(), kind: TerminalKind::Current { current: 1.0 } },
        ],
    )
    .unwrap_err();
    assert!(err.to_string().contains("belongs to terminals 'xmin' and 'ymin'"), "{err}");
    let err = ElectricalModel::new(
        &mesh,
        &cond,
        &[
            TerminalSpec { group: "xmin".into(), kind: TerminalKind::Ground },
            TerminalSpec { group: "ymin".into(), kind: TerminalKind::Voltage { value: 2.0 } },
        ],
    )
    .unwrap_err();
    assert!(err.to_string().contains("different fixed voltages"), "{err}");
    // Two grounds may share an edge.
    ElectricalModel::new(
        &mesh,
        &cond,
        &[
            TerminalSpec { group: "xmin".into(), kind: TerminalKind::Ground },
            TerminalSpec { group: "ymin".into(), kind: TerminalKind::Ground },
        ],
    )
    .unwrap();
    let mut both = ConductorSpec::with_sigma("domain", 1.0);
    both.resistivity = Some(2.0);
    let err = ElectricalModel::new(
        &mesh,
        &[both],
        &[TerminalSpec { group: "xmin".into(), kind: TerminalKind::Ground }],
    )
    .unwrap_err();
    assert!(err.to_string().contains("exactly one of 'sigma'"), "{err}");
    let err = ElectricalModel::new(
        &mesh,
        &[ConductorSpec::with_sigma("copper", 1.0)],
        &[TerminalSpec { group: "xmin".into(), kind: TerminalKind::Ground }],
    )
    .unwrap_err();
    assert!(err.to_string().contains("unknown group 'copper'"), "{err}");
}
