//! ANSYS Verification Manual VM1, "Statically indeterminate reaction force analysis"
//! (Timoshenko, *Strength of Materials*, Part 1, 3rd ed., p. 26, problem 10): a bar of three
//! LINK180 elements along y (nodes at y = 0, 4, 7, 10), fixed at both ends, loaded by
//! F₂ = −500 and F₃ = −1000 (y) at the inner nodes; published reactions R₁ = 900 (at y = 10)
//! and R₂ = 600 (at y = 0).
//!
//! The displacements MAPDL wrote to `data/ansys/vm1.rst` give the reactions through the truss
//! stiffness assembled here from the input deck `vm1.dat` (E from `MP,EX`, A from `SECDATA`,
//! the geometry from `N`, the loads from `F`) on the mesh read from the result file:
//! element stiffness K_e = (EA/L) [e eᵀ, −e eᵀ; −e eᵀ, e eᵀ] with e the unit axis, and
//! R = K u − F at the supports. The free nodes must be in equilibrium (K u = F there).

use std::collections::HashMap;
use std::path::PathBuf;

use gradfem_io::ansys::read_rst;
use gradfem_mesh::CellType;
use serde_json::Value;

fn data(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/ansys")).join(name)
}

/// What the test needs from the APDL deck.
struct Deck {
    e: f64,
    area: f64,
    nodes: HashMap<u64, [f64; 3]>,
    /// (node, component 0..3, value)
    forces: Vec<(u64, usize, f64)>,
    /// Published target reactions (`*VFILL,VALUE(1,1),DATA,...`).
    targets: Vec<f64>,
}

/// Parse the commands of vm1.dat used here: `MP,EX,1,<E>`, `SECDATA,<A>`, `N,<n>,<x>,<y>,<z>`
/// (empty fields are 0), `F,<n>,F<X|Y|Z>,<value>`, `*VFILL,VALUE(1,1),DATA,<targets>`.
fn parse_deck(text: &str) -> Deck {
    let num = |s: &str| -> f64 {
        let s = s.trim();
        if s.is_empty() { 0.0 } else { s.parse().unwrap_or_else(|_| panic!("number '{s}'")) }
    };
    let mut deck =
        Deck { e: 0.0, area: 0.0, nodes: HashMap::new(), forces: Vec::new(), targets: vec![] };
    for line in text.lines() {
        let cmd = line.split('!').next().unwrap().trim();
        let f: Vec<&str> = cmd.split(',').collect();
        match f[0].trim().to_ascii_uppercase().as_str() {
            "MP" if f[1].trim().eq_ignore_ascii_case("EX") => deck.e = num(f[3]),
            "SECDATA" => deck.area = num(f[1]),
            "N" => {
                let g = |i: usize| f.get(i).map_or(0.0, |s| num(s));
                deck.nodes.insert(num(f[1]) as u64, [g(2), g(3), g(4)]);
            }
            "F" => {
                let k = match f[2].trim().to_ascii_uppercase().as_str() {
                    "FX" => 0,
                    "FY" => 1,
                    "FZ" => 2,
                    other => panic!("force label {other}"),
                };
                deck.forces.push((num(f[1]) as u64, k, num(f[3])));
            }
            "*VFILL" if cmd.to_ascii_uppercase().starts_with("*VFILL,VALUE(1,1),DATA,") => {
                // The array index holds a comma: skip `*VFILL`, `VALUE(1`, `1)`, `DATA`.
                deck.targets = f[4..].iter().map(|s| num(s)).collect();
            }
            _ => {}
        }
    }
    deck
}

#[test]
fn reactions_from_read_displacements_match_the_published_solution() {
    let deck = parse_deck(&std::fs::read_to_string(data("vm1.dat")).unwrap());
    assert_eq!(deck.e, 30e6);
    assert_eq!(deck.area, 1.0);
    assert_eq!(deck.targets, vec![900.0, 600.0]);

    let rst = read_rst(&data("vm1.rst")).unwrap();
    let mesh = &rst.mesh;
    let sol = rst.nodal_solution(1).unwrap();
    assert_eq!(sol.dof_names, ["UX", "UY", "UZ"]);
    // The geometry of the result file is the deck's.
    assert_eq!(mesh.n_nodes(), deck.nodes.len());
    for (i, t) in mesh.node_tags.iter().enumerate() {
        assert_eq!(mesh.coords[i], deck.nodes[t], "node {t}");
    }
    // Transverse DOFs of a truss line have no value (NaN): they carry no stiffness, so 0.
    let u: Vec<[f64; 3]> = (0..mesh.n_nodes())
        .map(|i| {
            let v = &sol.values[3 * i..3 * i + 3];
            [0, 1, 2].map(|k| if v[k].is_nan() { 0.0 } else { v[k] })
        })
        .collect();

    // Internal forces K u, element by element.
    let mut ku = vec![[0.0; 3]; mesh.n_nodes()];
    let mut n_links = 0;
    for c in mesh.cells_of_dim(1) {
        assert_eq!(mesh.cell_type(c), CellType::Line2);
        let [a, b] = [mesh.cell_nodes(c)[0], mesh.cell_nodes(c)[1]];
        let d: [f64; 3] = [0, 1, 2].map(|k| mesh.coords[b][k] - mesh.coords[a][k]);
        let l = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
        let e = d.map(|x| x / l);
        // Axial force N = EA/L e·(u_b − u_a); nodal forces −N e at a, +N e at b.
        let stretch: f64 = (0..3).map(|k| e[k] * (u[b][k] - u[a][k])).sum();
        let axial = deck.e * deck.area / l * stretch;
        for k in 0..3 {
            ku[a][k] -= axial * e[k];
            ku[b][k] += axial * e[k];
        }
        n_links += 1;
    }
    assert_eq!(n_links, 3);

    let index: HashMap<u64, usize> =
        mesh.node_tags.iter().enumerate().map(|(i, &t)| (t, i)).collect();
    let mut applied = vec![[0.0; 3]; mesh.n_nodes()];
    for &(n, k, v) in &deck.forces {
        applied[index[&n]][k] += v;
    }
    let reaction: Vec<[f64; 3]> =
        (0..mesh.n_nodes()).map(|i| [0, 1, 2].map(|k| ku[i][k] - applied[i][k])).collect();

    // Equilibrium of the loaded nodes 2 and 3.
    for n in [2u64, 3] {
        let r = reaction[index[&n]];
        assert!(r.iter().all(|v| v.abs() < 1e-6 * 1000.0), "node {n}: residual {r:?}");
    }
    // Supports: node 4 (y = 10) is R1, node 1 (y = 0) is R2, both acting in +y.
    let r1 = reaction[index[&4]][1];
    let r2 = reaction[index[&1]][1];
    eprintln!("VM1: R1 = {r1} (target 900), R2 = {r2} (target 600)");
    for (got, want) in [(r1, deck.targets[0]), (r2, deck.targets[1])] {
        assert!((got - want).abs() <= 1e-6 * want, "{got} vs {want}");
    }
    // And MAPDL's own reactions from the summary.
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(data("vm1.rst.summary.json")).unwrap())
            .unwrap();
    for e in summary["reaction_forces_set1"].as_array().unwrap() {
        let node = e["node"].as_u64().unwrap();
        let k = e["dof_ref"].as_u64().unwrap() as usize - 1;
        let want = e["value"].as_f64().unwrap();
        let got = reaction[index[&node]][k];
        assert!((got - want).abs() <= 1e-6 * 1000.0, "node {node} dof {k}: {got} vs {want}");
    }
}
