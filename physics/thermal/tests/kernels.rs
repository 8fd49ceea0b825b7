//! Element kernels against their generic (dual-number) form, and vector-Jacobian products
//! against finite differences.

use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_mesh::{CellType, Mesh};
use gradfem_thermal::{BcKind, BcSpec, ConductivityLaw, RegionSpec, ThermalModel};
use num_dual::Dual64;
use rstest::rstest;

fn distorted_box(ct: CellType) -> Mesh {
    let mut mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [1.0, 0.7, 0.5],
        divisions: [2, 2, 2],
        cell_type: ct,
    });
    // A smooth distortion keeps cells valid and makes them non-affine.
    for p in &mut mesh.coords {
        let (x, y, z) = (p[0], p[1], p[2]);
        p[0] = x + 0.05 * (y * z).sin();
        p[1] = y + 0.04 * (x * 2.0).sin() * z;
        p[2] = z + 0.03 * x * y;
    }
    mesh
}

fn model(ct: CellType, law: ConductivityLaw) -> ThermalModel {
    let mesh = distorted_box(ct);
    ThermalModel::new(
        &mesh,
        &[RegionSpec { group: "domain".into(), k0: 2.5, law, source: 3.0 }],
        &[
            BcSpec { group: "xmin".into(), kind: BcKind::Temperature { value: 300.0 } },
            BcSpec { group: "xmax".into(), kind: BcKind::Convection { h: 7.0, t_inf: 290.0 } },
            BcSpec { group: "ymax".into(), kind: BcKind::HeatFlux { q_in: 11.0 } },
        ],
    )
    .unwrap()
}

fn laws() -> [ConductivityLaw; 2] {
    [
        ConductivityLaw::Constant,
        ConductivityLaw::Polynomial { t_ref: 300.0, coefficients: vec![-3e-3, 2e-5] },
    ]
}

fn temperature(m: &ThermalModel) -> Vec<f64> {
    m.coords.iter().map(|p| 300.0 + 10.0 * p[0] - 4.0 * p[1] * p[1] + 3.0 * p[2]).collect()
}

#[rstest]
fn residual_and_tangent_match_the_generic_form(
    #[values(CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Hex27)] ct: CellType,
    #[values(0, 1)] law: usize,
) {
    let m = model(ct, laws()[law].clone());
    let t = temperature(&m);
    for e in 0..m.n_elements() {
        let nodes = m.element_nodes(e).to_vec();
        let nn = nodes.len();
        let mut ke = vec![0.0; nn * nn];
        let mut fe = vec![0.0; nn];
        m.element_residual_tangent(e, &t, Some(&mut ke), &mut fe);
        let x: Vec<[Dual64; 3]> = nodes.iter().map(|&n| m.coords[n].map(Dual64::from)).collect();
        let (k0, src, h, tinf, qin) = if e < m.n_volume_elements() {
            (m.k_elem[e], 3.0, 0.0, 0.0, 0.0)
        } else {
            match m.boundaries[if m.boundaries[1].elements.contains(&e) { 1 } else { 2 }].kind {
                BcKind::Convection { h, t_inf } => (0.0, 0.0, h, t_inf, 0.0),
                BcKind::HeatFlux { q_in } => (0.0, 0.0, 0.0, 0.0, q_in),
                _ => unreachable!(),
            }
        };
        let c = Dual64::from;
        for b in 0..nn {
            let te: Vec<Dual64> = nodes
                .iter()
                .enumerate()
                .map(|(a, &n)| Dual64::new(t[n], if a == b { 1.0 } else { 0.0 }))
                .collect();
            let mut r = vec![Dual64::from(0.0); nn];
            m.element_residual_generic(e, &x, &te, c(k0), c(src), c(h), c(tinf), c(qin), &mut r);
            for a in 0..nn {
                let scale = 1e-12 * (1.0 + fe[a].abs() + ke[a * nn + b].abs());
                assert!(
                    (r[a].re - fe[a]).abs() < 1e3 * scale,
                    "{ct} e{e} residual {a}: {} vs {}",
                    r[a].re,
                    fe[a]
                );
                assert!(
                    (r[a].eps - ke[a * nn + b]).abs() < 1e3 * scale,
                    "{ct} e{e} tangent ({a},{b}): {} vs {}",
                    r[a].eps,
                    ke[a * nn + b]
                );
            }
        }
    }
}

#[rstest]
fn coordinate_vjp_matches_finite_differences(
    #[values(CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20)] ct: CellType,
) {
    let mut m = model(ct, laws()[1].clone());
    let t = temperature(&m);
    // A smooth adjoint at every node.
    let lambda: Vec<f64> = m.coords.iter().map(|p| (p[0] + 2.0 * p[1] - p[2]).sin()).collect();
    let vjp = m.parameter_vjp(&t, &lambda, gradfem_thermal::VjpRequest::ALL);
    let dx = vjp.coords.unwrap();
    let phi = |m: &ThermalModel| -> f64 {
        let mut s = 0.0;
        for e in 0..m.n_elements() {
            let nn = m.element_nodes(e).len();
            let mut fe = vec![0.0; nn];
            m.element_residual_tangent(e, &t, None, &mut fe);
            s += m.element_nodes(e).iter().zip(&fe).map(|(&n, r)| lambda[n] * r).sum::<f64>();
        }
        s
    };
    let h = 1e-6;
    for &(n, k) in &[(0usize, 0usize), (5, 1), (13, 2), (m.n_nodes() - 1, 0)] {
        let x0 = m.coords[n][k];
        m.coords[n][k] = x0 + h;
        let fp = phi(&m);
        m.coords[n][k] = x0 - h;
        let fm = phi(&m);
        m.coords[n][k] = x0;
        let fd = (fp - fm) / (2.0 * h);
        assert!(
            (fd - dx[n][k]).abs() < 1e-6 * (1.0 + fd.abs()),
            "{ct} node {n} comp {k}: fd {fd} vjp {}",
            dx[n][k]
        );
    }
}

#[test]
fn linear_temperature_is_an_exact_solution_without_sources() {
    // Patch test: T = a + b·x solves −Δ T = 0; with T fixed on every face, the residual of the
    // exact nodal values vanishes at the free nodes for every cell type.
    for ct in [CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Hex27] {
        let mesh = distorted_box(ct);
        let m = ThermalModel::new(
            &mesh,
            &[RegionSpec {
                group: "domain".into(),
                k0: 1.7,
                law: ConductivityLaw::Constant,
                source: 0.0,
            }],
            &[BcSpec { group: "xmin".into(), kind: BcKind::Temperature { value: 0.0 } }],
        )
        .unwrap();
        let t: Vec<f64> =
            m.coords.iter().map(|p| 1.0 + 2.0 * p[0] - 3.0 * p[1] + 0.5 * p[2]).collect();
        let mut r = vec![0.0; m.n_nodes()];
        for e in 0..m.n_elements() {
            let nn = m.element_nodes(e).len();
            let mut fe = vec![0.0; nn];
            m.element_residual_tangent(e, &t, None, &mut fe);
            for (a, &n) in m.element_nodes(e).iter().enumerate() {
                r[n] += fe[a];
            }
        }
        // Interior nodes: all residual entries of nodes not on the boundary vanish.
        let [lo, hi] = mesh.bounding_box();
        for (n, p) in mesh.coords.iter().enumerate() {
            let _ = (lo, hi, p);
            let on_boundary =
                mesh.groups.iter().filter(|g| g.dim == 2).any(|g| mesh.group_nodes(g).contains(&n));
            if !on_boundary {
                assert!(r[n].abs() < 1e-10, "{ct}: residual {} at interior node {n}", r[n]);
            }
        }
    }
}

#[test]
fn a_problem_without_temperature_reference_is_rejected() {
    let mesh = distorted_box(CellType::Tet4);
    let err = ThermalModel::new(
        &mesh,
        &[RegionSpec {
            group: "domain".into(),
            k0: 1.0,
            law: ConductivityLaw::Constant,
            source: 1.0,
        }],
        &[BcSpec { group: "xmax".into(), kind: BcKind::HeatFlux { q_in: 1.0 } }],
    )
    .unwrap_err();
    assert!(err.to_string().contains("no temperature is fixed anywhere"), "{err}");
}

#[test]
fn unknown_groups_and_inverted_cells_are_reported() {
    let mut mesh = distorted_box(CellType::Tet4);
    let err = ThermalModel::new(
        &mesh,
        &[RegionSpec {
            group: "steel".into(),
            k0: 1.0,
            law: ConductivityLaw::Constant,
            source: 0.0,
        }],
        &[],
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("unknown group 'steel'") && err.to_string().contains("domain"),
        "{err}"
    );
    // Swap two nodes of the first tet: it is inverted, and the error names its tag.
    let blk = mesh.blocks.iter_mut().find(|b| b.cell_type == CellType::Tet4).unwrap();
    blk.connectivity.swap(0, 1);
    let tag = blk.tags[0];
    let err = ThermalModel::new(
        &mesh,
        &[RegionSpec {
            group: "domain".into(),
            k0: 1.0,
            law: ConductivityLaw::Constant,
            source: 0.0,
        }],
        &[BcSpec { group: "xmin".into(), kind: BcKind::Temperature { value: 0.0 } }],
    )
    .unwrap_err();
    assert!(err.to_string().contains(&format!("cell {tag} (tet4) is inverted")), "{err}");
}

#[rstest]
fn closed_form_shape_derivative_matches_dual_numbers(
    #[values(CellType::Tet4, CellType::Tet10, CellType::Hex8, CellType::Hex20, CellType::Hex27)] ct: CellType,
) {
    let m = model(ct, laws()[1].clone());
    let t = temperature(&m);
    let lambda: Vec<f64> = m.coords.iter().map(|p| (p[0] - p[1] + 2.0 * p[2]).cos()).collect();
    for e in 0..m.n_elements() {
        let nn = m.element_nodes(e).len();
        let mut a = vec![0.0; 3 * nn];
        let mut b = vec![0.0; 3 * nn];
        m.coordinate_vjp_element(e, &t, &lambda, &mut a);
        m.coordinate_vjp_dual(e, &t, &lambda, &mut b);
        let scale = b.iter().map(|v| v.abs()).fold(0.0, f64::max);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-11 * (1.0 + scale), "{ct} element {e}: {x} vs {y}");
        }
    }
}

#[test]
fn external_source_enters_the_residual_and_its_vjp_matches() {
    let mut m = model(CellType::Tet10, ConductivityLaw::Constant);
    let t = temperature(&m);
    let nq = m.qp_offsets().total();
    let q: Vec<f64> = (0..nq).map(|i| 1.0 + (i % 7) as f64).collect();
    let lambda: Vec<f64> = m.coords.iter().map(|p| 1.0 + p[0] * p[1] - p[2]).collect();
    let phi = |m: &ThermalModel| -> f64 {
        (0..m.n_elements())
            .map(|e| {
                let nn = m.element_nodes(e).len();
                let mut fe = vec![0.0; nn];
                m.element_residual_tangent(e, &t, None, &mut fe);
                m.element_nodes(e).iter().zip(&fe).map(|(&n, r)| lambda[n] * r).sum::<f64>()
            })
            .sum()
    };
    let base = phi(&m);
    m.set_external_source(Some(q.clone()));
    let with = phi(&m);
    // λ·R is affine in the source: the difference equals the VJP contracted with q.
    let vjp = m.external_source_vjp(&lambda);
    let pred: f64 = vjp.iter().zip(&q).map(|(a, b)| a * b).sum();
    assert!((with - base - pred).abs() < 1e-10 * (1.0 + pred.abs()), "{} vs {pred}", with - base);
    assert!(pred.abs() > 1e-3);
}

#[test]
fn heat_balance_of_any_field_is_the_sum_of_residuals() {
    // Σ_a R_a over every node = −∫Q − ∫q_in + ∫h(T − T∞) (conduction sums to zero since
    // Σ N_a = 1), so with the reactions taken at every node (no free node), the balance closes
    // for ANY temperature field, not only a solution.
    let m = model(CellType::Hex20, laws()[1].clone());
    let t = temperature(&m);
    let hb = m.heat_balance(&t);
    let total: f64 = (0..m.n_elements())
        .map(|e| {
            let nn = m.element_nodes(e).len();
            let mut fe = vec![0.0; nn];
            m.element_residual_tangent(e, &t, None, &mut fe);
            fe.iter().sum::<f64>()
        })
        .sum();
    // Q = 3 on the 1 × 0.7 × 0.5 box (distorted, volume preserved to first order only).
    assert!(hb.generated_w > 0.9 && hb.generated_w < 1.2, "{hb:?}");
    assert!(hb.flux_in_w > 0.0 && hb.convection_out_w != 0.0);
    assert!(
        (total - (-hb.generated_w - hb.flux_in_w + hb.convection_out_w)).abs() < 1e-10,
        "{total} {hb:?}"
    );
}

/// The model keeps per-element bookkeeping compact (cells as runs, offsets as a stride where
/// the cell type is one, regions as ranges), and every element still maps back to its own cell,
/// tag, nodes and quadrature points: on a box split into two interleaved regions (every other
/// cell: one run per cell) with facet conditions after them.
#[test]
fn element_bookkeeping_maps_back_to_the_mesh() {
    use gradfem_kernel::Offsets;
    use gradfem_mesh::PhysicalGroup;
    let mut mesh = distorted_box(CellType::Tet4);
    let domain = mesh.group("domain").unwrap().cells.clone();
    for (name, parity) in [("even", 0), ("odd", 1)] {
        mesh.groups.push(PhysicalGroup {
            name: name.into(),
            tag: 10 + parity as i32,
            dim: 3,
            cells: domain.iter().copied().filter(|c| c.index % 2 == parity).collect(),
        });
    }
    let m = ThermalModel::new(
        &mesh,
        &[
            RegionSpec {
                group: "odd".into(),
                k0: 1.0,
                law: ConductivityLaw::Constant,
                source: 0.0,
            },
            RegionSpec {
                group: "even".into(),
                k0: 2.0,
                law: ConductivityLaw::Constant,
                source: 0.0,
            },
        ],
        &[
            BcSpec { group: "xmin".into(), kind: BcKind::Temperature { value: 300.0 } },
            BcSpec { group: "xmax".into(), kind: BcKind::Convection { h: 7.0, t_inf: 290.0 } },
        ],
    )
    .unwrap();
    let odd = &mesh.group("odd").unwrap().cells;
    let even = &mesh.group("even").unwrap().cells;
    let xmax = &mesh.group("xmax").unwrap().cells;
    assert_eq!(m.regions[0].elements, 0..odd.len());
    assert_eq!(m.regions[1].elements, odd.len()..domain.len());
    assert_eq!(m.n_volume_elements(), domain.len());
    let cells: Vec<_> = odd.iter().chain(even).chain(xmax).copied().collect();
    assert_eq!(m.n_elements(), cells.len());
    let offsets = m.element_offsets();
    for (e, &c) in cells.iter().enumerate() {
        assert_eq!(m.element_cell(e), c, "element {e}");
        assert_eq!(m.element_cell_tag(e), mesh.cell_tag(c), "element {e}");
        assert_eq!(m.element_nodes(e), mesh.cell_nodes(c), "element {e}");
        assert_eq!(offsets[e]..offsets[e + 1], m.element_entries(e));
    }
    // Tets then triangles: the node offsets vary, the volume's quadrature points do not.
    assert_eq!(offsets.len(), cells.len() + 1);
    assert_eq!(*offsets.last().unwrap(), 4 * domain.len() + 3 * xmax.len());
    let per_tet = m.element_table(0).n_points();
    assert_eq!(*m.qp_offsets(), Offsets::Uniform { len: per_tet, count: domain.len() });
    let all: Vec<usize> = (0..domain.len()).collect();
    assert_eq!(m.group_elements("*").unwrap(), &all[..]);
    assert_eq!(m.group_elements("domain").unwrap(), &all[..]);
    let odd_elements: Vec<usize> = (0..odd.len()).collect();
    assert_eq!(m.group_elements("odd").unwrap(), &odd_elements[..]);
    // The dofs follow the nodes: constrained exactly where the node is fixed.
    let dofs = m.element_dofs();
    for e in 0..m.n_elements() {
        for (&n, &d) in m.element_nodes(e).iter().zip(&dofs[m.element_entries(e)]) {
            assert_eq!(d, m.dofs.unknown_of_node[n].unwrap_or(gradfem_thermal::model::CONSTRAINED));
        }
    }
}
