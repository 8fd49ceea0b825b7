//! gradfem against ANSYS MAPDL on the same mesh: the steady thermal result `data/ansys/file.rth`
//! (MAPDL 20.2, 450 SOLID90 20-node bricks, KXX = 45, fixed temperatures 5 and 100 on 114
//! nodes, everything else insulated; data/ansys/README.md) solved again by gradfem on the
//! mesh read from the file (SOLID90 → Hex20 in gmsh order), and compared node by node with the
//! nodal solution MAPDL wrote.
//!
//! The imposed temperatures are given per node (summary.json `imposed_dof_values_set1`). They
//! are *not* whole faces: on each end face of the plate MAPDL fixed the face's nodes except
//! those on its edges, so no exterior facet (Quad8) has all eight nodes imposed. Fixed-
//! temperature groups of facets would therefore fix other nodes; instead each value becomes a
//! group of `Point1` cells at exactly the imposed nodes. Then both codes solve the same
//! discrete problem (same mesh, Hex20 shape functions, constraints) and the solutions agree to
//! the round-off of the linear solve.
//!
//! The same file also checks `[initial_state]`: its TEMP field, mapped onto the file's own mesh
//! by node number and onto a different (Tet10 box) mesh by interpolation.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use gradfem::ansys_import::{MappingKind, TemperatureUnit, initial_temperature};
use gradfem::run::LinearChoice;
use gradfem::thermal::ThermalProblem;
use gradfem_io::ansys::read_rst;
use gradfem_mesh::boundary::{exterior_facets, facet_nodes};
use gradfem_mesh::{CellId, CellType, Mesh, PhysicalGroup};
use gradfem_thermal::{BcKind, BcSpec, ConductivityLaw, RegionSpec};
use serde_json::Value;

fn data(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/ansys")).join(name)
}

/// The imposed TEMP values of set 1 by ANSYS node number (DOF label 20 = TEMP).
fn imposed_temperatures() -> HashMap<u64, f64> {
    let text = std::fs::read_to_string(data("file.rth.summary.json")).unwrap();
    let j: Value = serde_json::from_str(&text).unwrap();
    j["imposed_dof_values_set1"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["dof_ref"].as_u64() == Some(20))
        .map(|e| (e["node"].as_u64().unwrap(), e["value"].as_f64().unwrap()))
        .collect()
}

/// Imposed nodes that lie on no exterior facet whose nodes all carry the same imposed value.
fn nodes_off_imposed_facets(mesh: &Mesh, imposed: &HashMap<u64, f64>) -> usize {
    let value_of: Vec<Option<f64>> =
        mesh.node_tags.iter().map(|t| imposed.get(t).copied()).collect();
    let mut covered = vec![false; mesh.n_nodes()];
    for f in exterior_facets(mesh) {
        let (_, nodes) = facet_nodes(mesh, f);
        let Some(v) = value_of[nodes[0]] else { continue };
        if nodes.iter().all(|&n| value_of[n] == Some(v)) {
            for &n in &nodes {
                covered[n] = true;
            }
        }
    }
    value_of.iter().zip(&covered).filter(|(v, c)| v.is_some() && !**c).count()
}

/// Add one group `fixed_<value>` per imposed value, made of new `Point1` cells (dim 0) at the
/// imposed nodes: a fixed-temperature condition takes the nodes of its group, so this imposes
/// exactly MAPDL's nodal constraints. Returns the groups' names and values.
fn add_fixed_node_groups(mesh: &mut Mesh, imposed: &HashMap<u64, f64>) -> Vec<(String, f64)> {
    let mut by_value: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (n, t) in mesh.node_tags.iter().enumerate() {
        if let Some(v) = imposed.get(t) {
            by_value.entry(v.to_bits()).or_default().push(n);
        }
    }
    let mut groups = Vec::new();
    for (tag, (bits, nodes)) in by_value.into_iter().enumerate() {
        let value = f64::from_bits(bits);
        let mut cells = Vec::new();
        for n in nodes {
            let (block, b) = mesh.block_mut(CellType::Point1);
            b.push(&[n], mesh_tag(n));
            cells.push(CellId { block, index: b.len() - 1 });
        }
        let name = format!("fixed_{value}");
        mesh.groups.push(PhysicalGroup {
            name: name.clone(),
            tag: 100 + tag as i32,
            dim: 0,
            cells,
        });
        groups.push((name, value));
    }
    groups
}

fn mesh_tag(n: usize) -> u64 {
    1_000_000 + n as u64
}

#[test]
fn steady_conduction_matches_mapdl_node_by_node() {
    let rth = read_rst(&data("file.rth")).unwrap();
    let reference = rth.nodal_temperature(1).unwrap();
    let imposed = imposed_temperatures();
    assert_eq!(imposed.len(), 114, "data/ansys/README.md: 114 nodes with imposed TEMP");
    let mut mesh = rth.mesh.clone();
    assert!(mesh.blocks.iter().all(|b| b.cell_type == CellType::Hex20));
    // The imposed nodes are the nodes of the faces y = -0.46 (5 K) and y = 1.34 (100 K)
    // without the nodes on those faces' edges: no exterior facet has all its nodes imposed, so
    // surface groups of facets would fix 62 extra edge nodes and solve another problem.
    assert_eq!(nodes_off_imposed_facets(&mesh, &imposed), imposed.len());
    let groups = add_fixed_node_groups(&mut mesh, &imposed);
    assert_eq!(groups.len(), 2, "{groups:?}");

    let region = RegionSpec {
        group: "material_1".into(),
        k0: 45.0,
        law: ConductivityLaw::Constant,
        source: 0.0,
    };
    let bcs: Vec<BcSpec> = groups
        .iter()
        .map(|(g, v)| BcSpec { group: g.clone(), kind: BcKind::Temperature { value: *v } })
        .collect();
    let mut p =
        ThermalProblem::new(mesh, &[region], &bcs, vec![], LinearChoice::Cholesky).expect("set-up");
    let t = p.solve().expect("solve").to_vec();

    let range = 95.0;
    let mut max_abs = 0.0f64;
    let mut worst = 0;
    for (n, (&a, &b)) in t.iter().zip(&reference).enumerate() {
        assert!(b.is_finite(), "node {} has no MAPDL temperature", p.mesh().node_tags[n]);
        if (a - b).abs() > max_abs {
            max_abs = (a - b).abs();
            worst = n;
        }
    }
    eprintln!(
        "file.rth: {} nodes, max |T_gradfem − T_MAPDL| = {max_abs:.3e} K at node {} \
         ({:.3e} of the {range} K range); T in [{:.6}, {:.6}]",
        t.len(),
        p.mesh().node_tags[worst],
        max_abs / range,
        t.iter().copied().fold(f64::INFINITY, f64::min),
        t.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    );
    // Measured: 4.35e-3 K (4.6e-5 of the range) at node 1705. gradfem integrates Hex20 with
    // 3×3×3 Gauss points; SOLID90 bricks use MAPDL's 14-point rule (Theory Reference,
    // integration point locations: 6 face points at ±0.795822426, 8 corner points at
    // ±0.758786911). `fourteen_point_rule_explains_the_difference` shows that this is all of it.
    assert!(max_abs / range < 1e-4, "max difference {max_abs:e} K");
}

/// Reference gradients, weights: the 3×3×3 Gauss rule, or Irons' 14-point rule (degree 5:
/// weights 320/361 at (±√(19/30), 0, 0) and permutations, 121/361 at (±√(19/33))³).
fn brick_rule(fourteen: bool) -> Vec<([f64; 3], f64)> {
    if fourteen {
        let a = (19.0f64 / 30.0).sqrt();
        let c = (19.0f64 / 33.0).sqrt();
        let mut r = Vec::new();
        for k in 0..3 {
            for s in [-1.0, 1.0] {
                let mut x = [0.0; 3];
                x[k] = s * a;
                r.push((x, 320.0 / 361.0));
            }
        }
        for i in 0..8 {
            let sg = |b: usize| if i >> b & 1 == 1 { c } else { -c };
            r.push(([sg(0), sg(1), sg(2)], 121.0 / 361.0));
        }
        r
    } else {
        let g = [-(0.6f64).sqrt(), 0.0, (0.6f64).sqrt()];
        let w = [5.0 / 9.0, 8.0 / 9.0, 5.0 / 9.0];
        let mut r = Vec::new();
        for i in 0..3 {
            for j in 0..3 {
                for k in 0..3 {
                    r.push(([g[i], g[j], g[k]], w[i] * w[j] * w[k]));
                }
            }
        }
        r
    }
}

/// Steady conduction −∇·(k∇T) = 0 on the Hex20 mesh with the nodal constraints `fixed`,
/// assembled here with the given brick rule and solved by Jacobi-preconditioned CG to a
/// relative residual of 1e-14 (an independent path: no gradfem assembly or solver).
fn solve_with_rule(mesh: &Mesh, k: f64, fixed: &[Option<f64>], fourteen: bool) -> Vec<f64> {
    use gradfem_mesh::geometry::{inverse3, jacobian};
    use gradfem_mesh::reference::shape_gradients_into;
    let n = mesh.n_nodes();
    let mut rows: Vec<HashMap<usize, f64>> = vec![HashMap::new(); n];
    let rule = brick_rule(fourteen);
    let mut x = Vec::new();
    let mut dn = vec![[0.0; 3]; 20];
    for c in mesh.cells_of_dim(3) {
        assert_eq!(mesh.cell_type(c), CellType::Hex20);
        mesh.cell_coords_into(c, &mut x);
        let nodes = mesh.cell_nodes(c);
        for (xi, w) in &rule {
            shape_gradients_into(CellType::Hex20, *xi, &mut dn);
            let (inv, det) = inverse3(&jacobian(&dn, &x)).expect("regular cell");
            let g: Vec<[f64; 3]> = dn
                .iter()
                .map(|d| {
                    let mut gi = [0.0; 3];
                    for i in 0..3 {
                        gi[i] = (0..3).map(|m| d[m] * inv[m][i]).sum();
                    }
                    gi
                })
                .collect();
            for a in 0..20 {
                for b in 0..20 {
                    let v = k * w * det * (0..3).map(|i| g[a][i] * g[b][i]).sum::<f64>();
                    *rows[nodes[a]].entry(nodes[b]).or_insert(0.0) += v;
                }
            }
        }
    }
    let mut t: Vec<f64> = fixed.iter().map(|f| f.unwrap_or(0.0)).collect();
    let free: Vec<usize> = (0..n).filter(|&i| fixed[i].is_none()).collect();
    let mut pos = vec![usize::MAX; n];
    for (p, &i) in free.iter().enumerate() {
        pos[i] = p;
    }
    let mut b = vec![0.0; free.len()];
    let mut a: Vec<Vec<(usize, f64)>> = Vec::with_capacity(free.len());
    for (p, &i) in free.iter().enumerate() {
        let mut row = Vec::new();
        for (&j, &v) in &rows[i] {
            match fixed[j] {
                Some(tj) => b[p] -= v * tj,
                None => row.push((pos[j], v)),
            }
        }
        a.push(row);
    }
    let mul = |v: &[f64]| -> Vec<f64> {
        a.iter().map(|row| row.iter().map(|&(j, x)| x * v[j]).sum()).collect()
    };
    let diag: Vec<f64> =
        a.iter().enumerate().map(|(p, r)| r.iter().find(|e| e.0 == p).unwrap().1).collect();
    let dot = |u: &[f64], v: &[f64]| u.iter().zip(v).map(|(x, y)| x * y).sum::<f64>();
    let mut u = vec![0.0; free.len()];
    let mut r = b.clone();
    let mut z: Vec<f64> = r.iter().zip(&diag).map(|(r, d)| r / d).collect();
    let mut p = z.clone();
    let mut rz = dot(&r, &z);
    let b_norm = dot(&b, &b).sqrt();
    for _ in 0..20_000 {
        let ap = mul(&p);
        let alpha = rz / dot(&p, &ap);
        for i in 0..u.len() {
            u[i] += alpha * p[i];
            r[i] -= alpha * ap[i];
        }
        if dot(&r, &r).sqrt() <= 1e-14 * b_norm {
            break;
        }
        z = r.iter().zip(&diag).map(|(r, d)| r / d).collect();
        let rz_new = dot(&r, &z);
        for i in 0..p.len() {
            p[i] = z[i] + rz_new / rz * p[i];
        }
        rz = rz_new;
    }
    for (p, &i) in free.iter().enumerate() {
        t[i] = u[p];
    }
    t
}

/// With 3×3×3 points the independent assembly reproduces gradfem's solution; with MAPDL's
/// 14-point rule it reproduces MAPDL's nodal temperatures to round-off of the CG solve: the
/// difference of the first test is the quadrature rule and nothing else (mesh, node order,
/// constraints and conductivity all agree).
#[test]
fn fourteen_point_rule_explains_the_difference() {
    let rth = read_rst(&data("file.rth")).unwrap();
    let reference = rth.nodal_temperature(1).unwrap();
    let imposed = imposed_temperatures();
    let fixed: Vec<Option<f64>> =
        rth.mesh.node_tags.iter().map(|t| imposed.get(t).copied()).collect();
    let max_diff =
        |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f64, f64::max);

    let mut mesh = rth.mesh.clone();
    let groups = add_fixed_node_groups(&mut mesh, &imposed);
    let region = RegionSpec {
        group: "material_1".into(),
        k0: 45.0,
        law: ConductivityLaw::Constant,
        source: 0.0,
    };
    let bcs: Vec<BcSpec> = groups
        .iter()
        .map(|(g, v)| BcSpec { group: g.clone(), kind: BcKind::Temperature { value: *v } })
        .collect();
    let mut p =
        ThermalProblem::new(mesh, &[region], &bcs, vec![], LinearChoice::Cholesky).expect("set-up");
    let t_gradfem = p.solve().expect("solve").to_vec();

    let t27 = solve_with_rule(&rth.mesh, 45.0, &fixed, false);
    let t14 = solve_with_rule(&rth.mesh, 45.0, &fixed, true);
    let d27 = max_diff(&t27, &t_gradfem);
    let d14 = max_diff(&t14, &reference);
    eprintln!(
        "27-point vs gradfem: {d27:.3e} K; 14-point vs MAPDL: {d14:.3e} K; 27-point vs MAPDL: {:.3e} K",
        max_diff(&t27, &reference)
    );
    assert!(d27 < 1e-8 * 95.0, "{d27:e}");
    assert!(d14 < 1e-9 * 95.0, "{d14:e}");
}

#[test]
fn initial_state_maps_by_node_number_on_the_same_mesh() {
    let rth = read_rst(&data("file.rth")).unwrap();
    let (unit, given) = file_unit(&rth);
    let (t, info) =
        initial_temperature(&data("file.rth"), 1, &rth.mesh, given, "test", true).unwrap();
    assert_eq!(info.mapping, MappingKind::ByNodeNumber);
    assert_eq!(info.temperature_unit, Some(unit));
    let expected: Vec<f64> =
        rth.nodal_temperature(1).unwrap().iter().map(|&v| unit.to_kelvin(v)).collect();
    assert_eq!(t, expected);
}

/// The temperature unit of `rth` (from its `/UNITS`, kelvin where it names none) and the unit
/// a problem file must then give (`None` where the file says).
fn file_unit(rth: &gradfem_io::ansys::RstFile) -> (TemperatureUnit, Option<TemperatureUnit>) {
    match TemperatureUnit::of_mapdl_units(rth.header.units) {
        Some(u) => (u, None),
        None => (TemperatureUnit::Kelvin, Some(TemperatureUnit::Kelvin)),
    }
}

/// The plate of file.rth is the box [-0.3, 0.3] × [-0.46, 1.34] × [-0.2, -0.18]; a Tet10 box
/// mesh of it has other node numbers, so the field is interpolated, and at the box's nodes
/// that coincide with ANSYS nodes (same position) it must give ANSYS's value.
#[test]
fn initial_state_interpolates_onto_another_mesh() {
    let rth = read_rst(&data("file.rth")).unwrap();
    let (unit, given) = file_unit(&rth);
    let t_ref: Vec<f64> =
        rth.nodal_temperature(1).unwrap().iter().map(|&v| unit.to_kelvin(v)).collect();
    let mut target = gradfem_mesh::generate::box_mesh(&gradfem_mesh::generate::BoxSpec {
        origin: [-0.3, -0.46, -0.2],
        lengths: [0.6, 1.8, 0.02],
        divisions: [3, 9, 1],
        cell_type: CellType::Tet10,
    });
    for tag in &mut target.node_tags {
        *tag += 1_000_000;
    }
    let (t, info) =
        initial_temperature(&data("file.rth"), 1, &target, given, "test", true).unwrap();
    assert_eq!(info.mapping, MappingKind::Interpolated);
    let lo = t_ref.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = t_ref.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    assert!(t.iter().all(|&v| v >= lo - 1e-9 && v <= hi + 1e-9));
    let mut matched = 0;
    for (x, &v) in target.coords.iter().zip(&t) {
        for (y, &w) in rth.mesh.coords.iter().zip(&t_ref) {
            if (0..3).all(|k| (x[k] - y[k]).abs() < 1e-12) {
                assert!((v - w).abs() < 1e-9 * 100.0, "at {x:?}: {v} vs {w}");
                matched += 1;
            }
        }
    }
    assert!(matched > 20, "only {matched} coincident nodes");
}
