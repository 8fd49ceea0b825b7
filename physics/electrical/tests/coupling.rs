//! The Joule heat hands over to the thermal field point by point: same quadrature points, same
//! element order for the same groups, and the thermal residual's Joule part is −∫ Q N_a dΩ.

mod common;

use common::*;
use gradfem_electrical::{
    ConductorSpec, ElectricalModel, ResistivityLaw, TerminalKind, TerminalSpec,
};
use gradfem_mesh::CellType;
use gradfem_thermal::{BcKind, BcSpec, ConductivityLaw, RegionSpec, ThermalModel};

#[test]
fn joule_heat_matches_the_thermal_quadrature_points() {
    for ct in ALL_CELLS {
        let mesh = distorted_box(ct);
        let el = ElectricalModel::new(
            &mesh,
            &[ConductorSpec::with_resistivity(
                "domain",
                0.5,
                ResistivityLaw::Linear { alpha_r: 4e-3 },
                300.0,
            )],
            &[
                TerminalSpec { group: "xmin".into(), kind: TerminalKind::Voltage { value: 2.0 } },
                TerminalSpec { group: "xmax".into(), kind: TerminalKind::Ground },
            ],
        )
        .unwrap();
        let mut th = ThermalModel::new(
            &mesh,
            &[RegionSpec {
                group: "domain".into(),
                k0: 1.0,
                law: ConductivityLaw::Constant,
                source: 0.0,
            }],
            &[BcSpec { group: "xmin".into(), kind: BcKind::Temperature { value: 300.0 } }],
        )
        .unwrap();
        assert_eq!(el.qp_offsets(), th.qp_offsets().to_vec(), "{ct}");
        for e in 0..el.n_volume_elements() {
            assert_eq!(el.element_cell(e), th.element_cell(e));
            assert_eq!(el.volume_element_of_cell(el.element_cell(e)), Some(e));
        }
        let t = temperature(&el);
        let (phi, _) = solve(&el, Some(&t));
        let q = el.joule_heat_qp(&phi, Some(&t));
        let mut without = Vec::new();
        for e in 0..th.n_volume_elements() {
            let nn = th.element_nodes(e).len();
            let mut fe = vec![0.0; nn];
            th.element_residual_tangent(e, &t, None, &mut fe);
            without.push(fe);
        }
        th.set_external_source(Some(q));
        for (e, base) in without.iter().enumerate() {
            let nn = base.len();
            let mut fe = vec![0.0; nn];
            th.element_residual_tangent(e, &t, None, &mut fe);
            let mut load = vec![0.0; nn];
            el.joule_load_element(e, &phi, Some(&t), &mut load);
            for a in 0..nn {
                let d = fe[a] - base[a];
                assert!((d + load[a]).abs() < 1e-12 * (1.0 + load[a].abs()), "{ct} e{e} node {a}");
            }
        }
    }
}

#[test]
fn cells_outside_the_conductors_map_to_no_element() {
    let mesh = distorted_box(CellType::Hex8);
    let el = ElectricalModel::new(
        &mesh,
        &[ConductorSpec::with_sigma("domain", 1.0)],
        &[TerminalSpec { group: "xmin".into(), kind: TerminalKind::Ground }],
    )
    .unwrap();
    let facet = mesh.groups.iter().find(|g| g.name == "xmax").unwrap().cells[0];
    assert_eq!(el.volume_element_of_cell(facet), None);
}
