//! Solved problems: a bar driven by a voltage or a current terminal against its closed-form
//! resistance and power, the energy balance ∫Q = Σ V I with a temperature-dependent resistivity,
//! the assembly of repeated terminal dofs, and adjoint gradients of the terminal functionals
//! against finite differences of re-solves.

mod common;

use common::*;
use gradfem_electrical::functional::evaluate;
use gradfem_electrical::{
    ConductorSpec, ElectricalModel, ResistivityLaw, TerminalFunctional, TerminalKind, TerminalSpec,
    VjpRequest,
};
use gradfem_mesh::CellType;
use gradfem_solvers::assembly::AssemblyPattern;
use rstest::rstest;

const SIGMA: f64 = 2.5;
const LENGTH: f64 = 1.0;
const AREA: f64 = 0.1 * 0.1;

fn bar(ct: CellType, terminals: &[TerminalSpec]) -> ElectricalModel {
    let mesh = box_of(ct, [LENGTH, 0.1, 0.1], [8, 2, 2]);
    ElectricalModel::new(&mesh, &[ConductorSpec::with_sigma("domain", SIGMA)], terminals).unwrap()
}

fn spec(group: &str, kind: TerminalKind) -> TerminalSpec {
    TerminalSpec { group: group.into(), kind }
}

#[rstest]
fn voltage_driven_bar_has_the_closed_form_resistance(
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
    let v = 1.0;
    let m = bar(
        ct,
        &[spec("xmin", TerminalKind::Voltage { value: v }), spec("xmax", TerminalKind::Ground)],
    );
    let (phi, _) = solve(&m, None);
    let r_exact = LENGTH / (SIGMA * AREA);
    let r = m.resistance(&phi, None, 0, 1);
    assert!((r - r_exact).abs() < 1e-10 * r_exact, "{ct}: R = {r}, expected {r_exact}");
    let i = m.terminal_currents(&phi, None);
    // Current enters at xmin and leaves at xmax.
    assert!((i[0] - v / r_exact).abs() < 1e-10 * (v / r_exact), "{ct}: I = {:?}", i);
    assert!((i[0] + i[1]).abs() < 1e-10 * i[0].abs(), "{ct}: currents {:?} do not balance", i);
    let p: f64 = m.joule_power_elements(&phi, None).iter().sum();
    let p_exact = v * v / r_exact;
    assert!((p - p_exact).abs() < 1e-10 * p_exact, "{ct}: P = {p}, expected {p_exact}");
    // Uniform current density −σ ∇φ = σ V / L along x.
    for j in m.cell_current_density(&phi, None) {
        assert!((j[0] - SIGMA * v / LENGTH).abs() < 1e-9 && j[1].abs() < 1e-9 && j[2].abs() < 1e-9);
    }
}

#[rstest]
fn current_driven_bar_is_an_equipotential_at_the_terminal(
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
    let current = 2.0;
    let m = bar(
        ct,
        &[spec("xmin", TerminalKind::Ground), spec("xmax", TerminalKind::Current { current })],
    );
    // One unknown for the whole terminal.
    let term = &m.terminals[1];
    let u = term.unknown.unwrap();
    assert_eq!(u, m.n_unknowns() - 1);
    assert!(term.nodes.iter().all(|&n| m.unknown_of_node()[n] == Some(u)));
    assert!(m.describe_dof(u).contains("current terminal 'xmax'"));
    let (phi, _) = solve(&m, None);
    let r_exact = LENGTH / (SIGMA * AREA);
    let v = m.terminal_voltages(&phi)[1];
    assert!((v - current * r_exact).abs() < 1e-10 * current * r_exact, "{ct}: V = {v}");
    assert!(term.nodes.iter().all(|&n| phi[n] == v));
    let i = m.terminal_currents(&phi, None);
    assert!((i[1] - current).abs() < 1e-10 * current, "{ct}: terminal currents {i:?}");
    assert!((i[0] + current).abs() < 1e-10 * current, "{ct}: terminal currents {i:?}");
    let r = m.resistance(&phi, None, 1, 0);
    assert!((r - r_exact).abs() < 1e-10 * r_exact);
    // Energy: ∫ Q dΩ = V I.
    let p: f64 = m.joule_power_elements(&phi, None).iter().sum();
    assert!((p - v * current).abs() < 1e-10 * p, "{ct}: P = {p}, VI = {}", v * current);
}

/// A distorted block with ρ(T) linear or tabulated, a non-uniform temperature, a voltage
/// terminal, a ground and a current terminal.
fn heated_block(ct: CellType, law: ResistivityLaw) -> ElectricalModel {
    let mesh = distorted_box(ct);
    ElectricalModel::new(
        &mesh,
        &[ConductorSpec::with_resistivity("domain", 0.25, law, 300.0)],
        &[
            spec("xmin", TerminalKind::Voltage { value: 0.8 }),
            spec("xmax", TerminalKind::Current { current: -1.3 }),
        ],
    )
    .unwrap()
}

#[rstest]
fn energy_balance_with_temperature_dependent_resistivity(
    #[values(CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Prism6)] ct: CellType,
    #[values(0, 1)] law: usize,
) {
    let law = [
        ResistivityLaw::Linear { alpha_r: 4e-3 },
        ResistivityLaw::Table {
            temperatures: vec![290.0, 330.0, 360.0],
            multipliers: vec![0.9, 1.2, 1.7],
        },
    ][law]
        .clone();
    let m = heated_block(ct, law);
    let t = temperature(&m);
    let (phi, _) = solve(&m, Some(&t));
    let i = m.terminal_currents(&phi, Some(&t));
    let v = m.terminal_voltages(&phi);
    let p: f64 = m.joule_power_elements(&phi, Some(&t)).iter().sum();
    let vi: f64 = i.iter().zip(&v).map(|(a, b)| a * b).sum();
    assert!((p - vi).abs() < 1e-10 * p, "{ct}: ∫Q = {p}, Σ V I = {vi}");
    assert!((i[1] + 1.3).abs() < 1e-10 && (i[0] - 1.3).abs() < 1e-10, "{ct}: {i:?}");
    // The temperature matters: the uniform-T₀ solution dissipates differently.
    let (phi0, _) = solve(&m, None);
    let p0: f64 = m.joule_power_elements(&phi0, None).iter().sum();
    assert!((p - p0).abs() > 1e-3 * p, "{ct}: {p} vs {p0}");
}

#[test]
fn assembly_pattern_sums_repeated_terminal_dofs() {
    // Elements with several local nodes on the current terminal repeat its unknown; the
    // assembled system must equal Pᵀ K P (dense, by hand) with P the node → unknown map.
    let m = heated_block(CellType::Hex20, ResistivityLaw::Linear { alpha_r: 4e-3 });
    let t = temperature(&m);
    let phi = potential(&m);
    let dofs = m.element_dofs();
    let offs = m.element_offsets();
    assert!(
        (0..m.n_volume_elements()).any(|e| {
            let d = &dofs[offs[e]..offs[e + 1]];
            d.iter().filter(|&&x| x == m.n_unknowns() - 1).count() > 1
        }),
        "no element repeats the terminal unknown"
    );
    let pattern = AssemblyPattern::with_block_size(m.n_unknowns(), offs, dofs, 3);
    let mut k = pattern.new_matrix();
    let mut r = vec![0.0; m.n_unknowns()];
    pattern.assemble_into(&mut k, &mut r, |e, ke, fe| {
        m.element_residual_tangent(e, &phi, Some(&t), Some(ke), fe)
    });
    let n = m.n_unknowns();
    let mut kd = vec![0.0; n * n];
    let mut rd = vec![0.0; n];
    for e in 0..m.n_elements() {
        let d = &dofs[offs[e]..offs[e + 1]];
        let nd = d.len();
        let mut ke = vec![0.0; nd * nd];
        let mut fe = vec![0.0; nd];
        m.element_residual_tangent(e, &phi, Some(&t), Some(&mut ke), &mut fe);
        for a in 0..nd {
            if d[a] == usize::MAX {
                continue;
            }
            rd[d[a]] += fe[a];
            for b in 0..nd {
                if d[b] != usize::MAX {
                    kd[d[a] * n + d[b]] += ke[a * nd + b];
                }
            }
        }
    }
    for i in 0..n {
        assert!((r[i] - rd[i]).abs() < 1e-12 * (1.0 + rd[i].abs()), "row {i}");
        for j in 0..n {
            let v = k.find(i, j).map_or(0.0, |s| k.values[s]);
            assert!((v - kd[i * n + j]).abs() < 1e-12 * (1.0 + kd[i * n + j].abs()), "({i}, {j})");
        }
    }
    // The terminal row is the sum of its nodes' rows, minus I.
    let rint = m.interior_residual(&phi, Some(&t));
    let term = &m.terminals[1];
    let sum: f64 = term.nodes.iter().map(|&n| rint[n]).sum();
    assert!((r[n - 1] - (sum + 1.3)).abs() < 1e-12 * (1.0 + sum.abs()));
}

/// Total derivatives of a terminal functional by the adjoint method against central finite
/// differences of full re-solves.
#[rstest]
#[case::resistance_voltage_driven(TerminalFunctional::Resistance { drive: "xmin".into(), reference: "xmax".into() })]
#[case::resistance_current_driven(TerminalFunctional::Resistance { drive: "xmax".into(), reference: "xmin".into() })]
#[case::reaction_current(TerminalFunctional::Current { terminal: "xmin".into() })]
#[case::terminal_voltage(TerminalFunctional::Voltage { terminal: "xmax".into() })]
fn functional_gradients_match_finite_differences(#[case] f: TerminalFunctional) {
    let mut m = heated_block(CellType::Hex8, ResistivityLaw::Linear { alpha_r: 4e-3 });
    let mut t = temperature(&m);
    let value = |m: &ElectricalModel, t: &[f64]| -> f64 {
        let (phi, _) = solve(m, Some(t));
        evaluate(m, &f, &phi, Some(t), false).unwrap().value
    };
    let (phi, mut solver) = solve(&m, Some(&t));
    let ev = evaluate(&m, &f, &phi, Some(&t), true).unwrap();
    let lambda = adjoint(&m, &mut solver, &ev.d_unknowns);
    let p = m.parameter_vjp(&phi, Some(&t), &lambda, VjpRequest::ALL);
    let total = |explicit: f64, adj: f64| explicit - adj;
    let check = |what: &str, fd: f64, mine: f64| {
        assert!(
            (fd - mine).abs() < 1e-6 * (1e-3 + fd.abs().max(mine.abs())) * 10.0,
            "{f:?} {what}: finite difference {fd} vs adjoint {mine}"
        );
    };
    // σ₀ of one element.
    let e = 3;
    let s = m.sigma_elem[e];
    let h = 1e-5 * s;
    m.sigma_elem[e] = s + h;
    let fp = value(&m, &t);
    m.sigma_elem[e] = s - h;
    let fm = value(&m, &t);
    m.sigma_elem[e] = s;
    check("sigma", (fp - fm) / (2.0 * h), total(ev.d_sigma_elem[e], p.sigma_elem[e]));
    // α_R.
    let h = 1e-6;
    m.set_alpha_r(0, 4e-3 + h);
    let fp = value(&m, &t);
    m.set_alpha_r(0, 4e-3 - h);
    let fm = value(&m, &t);
    m.set_alpha_r(0, 4e-3);
    check("alpha_r", (fp - fm) / (2.0 * h), total(ev.d_alpha_r[0], p.alpha_r[0]));
    // Terminal values.
    let h = 1e-5;
    m.set_terminal_value(0, 0.8 + h);
    let fp = value(&m, &t);
    m.set_terminal_value(0, 0.8 - h);
    let fm = value(&m, &t);
    m.set_terminal_value(0, 0.8);
    check("voltage", (fp - fm) / (2.0 * h), total(ev.d_voltage[0], p.voltage[0]));
    m.set_terminal_value(1, -1.3 + h);
    let fp = value(&m, &t);
    m.set_terminal_value(1, -1.3 - h);
    let fm = value(&m, &t);
    m.set_terminal_value(1, -1.3);
    check("current", (fp - fm) / (2.0 * h), total(ev.d_current[1], p.current[1]));
    // Temperature and coordinates at an interior-ish node and a terminal node.
    let dx = ev.d_coords.as_ref().unwrap();
    let px = p.coords.as_ref().unwrap();
    for n in [13, m.terminals[1].nodes[2], m.terminals[0].nodes[1]] {
        let h = 1e-3;
        let t0 = t[n];
        t[n] = t0 + h;
        let fp = value(&m, &t);
        t[n] = t0 - h;
        let fm = value(&m, &t);
        t[n] = t0;
        check("temperature", (fp - fm) / (2.0 * h), total(ev.d_temperature[n], p.temperature[n]));
        for k in 0..3 {
            let h = 1e-6;
            let x0 = m.coords[n][k];
            m.coords[n][k] = x0 + h;
            let fp = value(&m, &t);
            m.coords[n][k] = x0 - h;
            let fm = value(&m, &t);
            m.coords[n][k] = x0;
            check("coords", (fp - fm) / (2.0 * h), total(dx[n][k], px[n][k]));
        }
    }
}
