//! The ANSYS readers against reference dumps made by ANSYS's own Python reader
//! (data/ansys/README.md): nodes, elements in file order, nodal solution of set 1, header
//! fields and the result-set table; the archive against the result file of the same mesh.

use std::collections::HashMap;
use std::path::PathBuf;

use gradfem_io::ansys::{HEX20_FROM_ANSYS, RstFile, read_cdb, read_rst};
use gradfem_mesh::{CellId, CellType};
use rstest::rstest;
use serde_json::Value;

fn data(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/ansys")).join(name)
}

/// Rows of a CSV file with a header line, as f64.
fn csv(name: &str) -> Vec<Vec<f64>> {
    let text = std::fs::read_to_string(data(name)).unwrap();
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split(',').map(|x| x.trim().parse::<f64>().unwrap()).collect())
        .collect()
}

fn json(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(data(name)).unwrap()).unwrap()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * (1.0 + a.abs().max(b.abs()))
}

fn node_index(r: &RstFile) -> HashMap<u64, usize> {
    r.mesh.node_tags.iter().enumerate().map(|(i, &t)| (t, i)).collect()
}

#[rstest]
#[case("beam_static_bc.rst")]
#[case("file.rth")]
#[case("temp_v13.rst")]
#[case("vm1.rst")]
fn nodes_match_reference(#[case] name: &str) {
    let r = read_rst(&data(name)).unwrap();
    r.mesh.validate().unwrap();
    let rows = csv(&format!("{name}.nodes.csv"));
    assert_eq!(r.mesh.n_nodes(), rows.len());
    let idx = node_index(&r);
    for row in &rows {
        let i = idx[&(row[0] as u64)];
        for k in 0..3 {
            assert_eq!(r.mesh.coords[i][k], row[1 + k], "node {} coord {k}", row[0]);
        }
    }
}

#[rstest]
#[case("beam_static_bc.rst")]
#[case("file.rth")]
#[case("temp_v13.rst")]
#[case("vm1.rst")]
fn elements_match_reference_in_file_order(#[case] name: &str) {
    let r = read_rst(&data(name)).unwrap();
    let j = json(&format!("{name}.elements.json"));
    let refs = j["elements"].as_array().unwrap();
    assert_eq!(r.elements.len(), refs.len());
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
    for (e, x) in r.elements.iter().zip(refs) {
        assert_eq!(e.number, x["elem"].as_u64().unwrap());
        assert_eq!(e.ansys_type as u64, x["ansys_etype"].as_u64().unwrap());
        assert_eq!(e.type_ref as u64, x["type_ref"].as_u64().unwrap());
        assert_eq!(e.material as u64, x["mat"].as_u64().unwrap());
        assert_eq!(e.real as u64, x["real"].as_u64().unwrap());
        assert_eq!(e.section as u64, x["secnum"].as_u64().unwrap());
        let nodes: Vec<u64> =
            x["nodes"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(e.nodes, nodes, "element {}", e.number);
        // The cell holds the same nodes, in gmsh order: map back with the permutation.
        let cell = e.cell.expect("every element of these files is a cell");
        assert_eq!(r.mesh.cell_tag(cell), e.number);
        let tags: Vec<u64> = r.mesh.cell_nodes(cell).iter().map(|&i| r.mesh.node_tags[i]).collect();
        let back: Vec<u64> = match r.mesh.cell_type(cell) {
            CellType::Hex20 => {
                let mut b = vec![0; 20];
                for (g, &a) in HEX20_FROM_ANSYS.iter().enumerate() {
                    b[a] = tags[g];
                }
                b
            }
            _ => tags,
        };
        assert_eq!(back, nodes);
    }
    let expect_type = match name {
        "vm1.rst" => CellType::Line2,
        "temp_v13.rst" => CellType::Hex8,
        _ => CellType::Hex20,
    };
    assert_eq!(r.mesh.blocks.len(), 1);
    assert_eq!(r.mesh.blocks[0].cell_type, expect_type);
    let g = r.mesh.group("material_1").unwrap();
    assert_eq!((g.cells.len(), g.dim), (r.elements.len(), expect_type.dim()));
    assert_eq!(r.mesh.group("etype_1").unwrap().cells.len(), r.elements.len());
}

/// Each mid-edge node of a mapped cell lies at the midpoint of the two corners of its gmsh
/// edge (the meshes are straight-sided): checks the permutation geometrically.
#[rstest]
#[case("beam_static_bc.rst")]
#[case("file.rth")]
fn mid_edge_nodes_are_edge_midpoints(#[case] name: &str) {
    let r = read_rst(&data(name)).unwrap();
    let mut n = 0;
    for (b, blk) in r.mesh.blocks.iter().enumerate() {
        assert_eq!(blk.cell_type, CellType::Hex20);
        let edges = blk.cell_type.edges();
        for index in 0..blk.len() {
            let c = r.mesh.cell_nodes(CellId { block: b, index });
            for (e, [p, q]) in edges.iter().enumerate() {
                let (xp, xq, xm) =
                    (r.mesh.coords[c[*p]], r.mesh.coords[c[*q]], r.mesh.coords[c[8 + e]]);
                for k in 0..3 {
                    assert!((0.5 * (xp[k] + xq[k]) - xm[k]).abs() < 1e-9, "cell {index} edge {e}");
                }
                n += 1;
            }
        }
    }
    assert!(n > 100);
}

#[rstest]
#[case("beam_static_bc.rst", 3)]
#[case("file.rth", 1)]
#[case("temp_v13.rst", 3)]
#[case("vm1.rst", 3)]
fn nodal_solution_matches_reference(#[case] name: &str, #[case] ndof: usize) {
    let r = read_rst(&data(name)).unwrap();
    let sol = r.nodal_solution(1).unwrap();
    assert_eq!(sol.dof_names.len(), ndof);
    let text = std::fs::read_to_string(data(&format!("{name}.nodal_solution.csv"))).unwrap();
    let head: Vec<&str> = text.lines().next().unwrap().split(',').skip(1).collect();
    assert_eq!(sol.dof_names, head);
    let idx = node_index(&r);
    let rows = csv(&format!("{name}.nodal_solution.csv"));
    assert_eq!(rows.len(), r.mesh.n_nodes());
    let mut n_nan = 0;
    for row in &rows {
        let i = idx[&(row[0] as u64)];
        for d in 0..ndof {
            let v = sol.values[i * ndof + d];
            if v.is_nan() {
                // MAPDL's "no value"; the reference reader writes 0 there.
                assert_eq!(row[1 + d], 0.0);
                n_nan += 1;
            } else {
                assert!(
                    close(v, row[1 + d], 1e-15),
                    "node {} dof {d}: {v} vs {}",
                    row[0],
                    row[1 + d]
                );
            }
        }
    }
    assert_eq!(n_nan, if name == "vm1.rst" { 4 } else { 0 });
    assert!(matches!(
        r.nodal_solution(2),
        Err(gradfem_io::ansys::AnsysError::NoSuchSet { set: 2, available: 1, .. })
    ));
}

#[rstest]
#[case("beam_static_bc.rst")]
#[case("file.rth")]
#[case("temp_v13.rst")]
#[case("vm1.rst")]
fn header_and_set_table_match_summary(#[case] name: &str) {
    let r = read_rst(&data(name)).unwrap();
    let s = json(&format!("{name}.summary.json"));
    let h = &s["result_header"];
    let hh = &r.header;
    assert_eq!(hh.version, h["verstring"].as_str().unwrap());
    assert_eq!(hh.main_version as u64, h["mainver"].as_u64().unwrap());
    assert_eq!(hh.sub_version as u64, h["subver"].as_u64().unwrap());
    assert_eq!(hh.units_name, h["units"].as_str().unwrap());
    assert_eq!(hh.time, h["time"].as_str().unwrap());
    assert_eq!(hh.machine, h["machine"].as_str().unwrap());
    assert_eq!(hh.jobname, h["jobname"].as_str().unwrap());
    assert_eq!(hh.product, h["product"].as_str().unwrap());
    assert_eq!(hh.special, h["special"].as_str().unwrap());
    assert_eq!(hh.username, h["username"].as_str().unwrap());
    assert_eq!(hh.title, h["title"].as_str().unwrap());
    assert_eq!(hh.subtitle, h["subtitle"].as_str().unwrap());
    assert_eq!(hh.split_point as i64, h["split point"].as_i64().unwrap());
    let u = |k: &str| h[k].as_u64().unwrap();
    assert_eq!(hh.file_unit as u64, u("fun12"));
    assert_eq!(hh.max_node, u("maxn"));
    assert_eq!(hh.n_nodes as u64, u("nnod"));
    assert_eq!(hh.max_element, u("maxe"));
    assert_eq!(hh.n_elements as u64, u("nelm"));
    assert_eq!(hh.n_dofs as u64, u("numdof"));
    assert_eq!(hh.resmax as u64, u("resmax"));
    assert_eq!(hh.n_sets as u64, u("nsets"));
    assert_eq!(hh.ptr_end, u("ptrend"));
    assert_eq!(hh.ptr_dsi, u("ptrDSI"));
    assert_eq!(hh.ptr_tim, u("ptrTIM"));
    assert_eq!(hh.ptr_lsp, u("ptrLSP"));
    assert_eq!(hh.ptr_elm, u("ptrELM"));
    assert_eq!(hh.ptr_nod, u("ptrNOD"));
    assert_eq!(hh.ptr_geo, u("ptrGEO"));
    assert_eq!(hh.prec_key as i64, h["PrecKey"].as_i64().unwrap());
    assert_eq!(hh.extopt as i64, h["extopt"].as_i64().unwrap());
    assert_eq!(hh.avail_data as i64, h["AvailData"].as_i64().unwrap());
    assert_eq!(hh.rstsprs as i64, h["rstsprs"].as_i64().unwrap());
    assert_eq!(hh.analysis_type as i64, h["kan"].as_i64().unwrap());
    // counts, element types, DOFs
    assert_eq!(r.mesh.n_nodes() as u64, s["n_nodes"].as_u64().unwrap());
    assert_eq!(r.elements.len() as u64, s["n_elements"].as_u64().unwrap());
    let ekey = s["ekey"].as_object().unwrap();
    assert_eq!(r.element_types.len(), ekey.len());
    for et in &r.element_types {
        assert_eq!(et.ansys_type as u64, ekey[&et.number.to_string()].as_u64().unwrap());
        assert!(et.supported);
        assert!(et.name.ends_with(&et.ansys_type.to_string()));
    }
    let dofs: Vec<&str> =
        s["result_dof"][0].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(r.dof_names, dofs);
    // result-set table
    let times = h["time_values"].as_array().unwrap();
    let ls = h["ls_table"].as_array().unwrap();
    let rp = h["rpointers"].as_array().unwrap();
    assert_eq!(r.result_sets.len(), times.len());
    for (k, set) in r.result_sets.iter().enumerate() {
        assert_eq!(set.index, k + 1);
        assert_eq!(set.time_or_frequency, times[k].as_f64().unwrap());
        assert_eq!(set.pointer, rp[k].as_u64().unwrap());
        let l: Vec<i64> = ls[k].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        assert_eq!(
            vec![set.load_step as i64, set.substep as i64, set.cumulative_iteration as i64],
            l
        );
    }
    // bounding box
    let bb = r.mesh.bounding_box();
    for k in 0..3 {
        assert_eq!(bb[0][k], s["bbox_min"][k].as_f64().unwrap());
        assert_eq!(bb[1][k], s["bbox_max"][k].as_f64().unwrap());
    }
}

#[test]
fn hexbeam_cdb_is_the_mesh_of_beam_static_bc() {
    let a = read_cdb(&data("HexBeam.cdb")).unwrap();
    let r = read_rst(&data("beam_static_bc.rst")).unwrap();
    a.mesh.validate().unwrap();
    assert_eq!(a.mesh.n_nodes(), r.mesh.n_nodes());
    let ri = node_index(&r);
    for (i, t) in a.mesh.node_tags.iter().enumerate() {
        let j = ri[t];
        for k in 0..3 {
            assert!(close(a.mesh.coords[i][k], r.mesh.coords[j][k], 1e-12), "node {t}");
        }
    }
    assert_eq!(a.element_types.len(), 1);
    assert_eq!(a.element_types[0].ansys_type, 186);
    let by_num: HashMap<u64, &gradfem_io::ansys::ElementRecord> =
        r.elements.iter().map(|e| (e.number, e)).collect();
    assert_eq!(a.elements.len(), 40);
    for e in &a.elements {
        let re = by_num[&e.number];
        assert_eq!(e.nodes, re.nodes);
        assert_eq!((e.material, e.type_ref, e.ansys_type), (re.material, re.type_ref, 186));
        let tags = |m: &gradfem_mesh::Mesh, c| -> Vec<u64> {
            m.cell_nodes(c).iter().map(|&i| m.node_tags[i]).collect()
        };
        assert_eq!(tags(&a.mesh, e.cell.unwrap()), tags(&r.mesh, re.cell.unwrap()));
    }
    // element components: ECOMP1 = 17..18, 21..40; ECOMP2 = 1..20, 23..24
    for (name, expect) in [
        ("ECOMP1", (17..=18).chain(21..=40).collect::<Vec<u64>>()),
        ("ECOMP2", (1..=20).chain(23..=24).collect()),
    ] {
        let g = a.mesh.group(name).unwrap();
        assert_eq!(g.dim, 3);
        let mut got: Vec<u64> = g.cells.iter().map(|&c| a.mesh.cell_tag(c)).collect();
        got.sort_unstable();
        assert_eq!(got, expect, "{name}");
    }
    assert_eq!(a.mesh.group("material_1").unwrap().cells.len(), 40);
    // node components: NCOMP2 has 42 entries in the file (ranges included), starts 1..21
    let names: Vec<&str> = a.node_components.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"NCOMP2") && names.contains(&"NODE_SELECTION"), "{names:?}");
    let (_, nc) = a.node_components.iter().find(|(n, _)| n == "NCOMP2").unwrap();
    let mut nums: Vec<u64> = nc.iter().map(|&i| a.mesh.node_tags[i]).collect();
    nums.sort_unstable();
    assert_eq!(&nums[..21], &(1..=21).collect::<Vec<u64>>()[..]);
    assert!(nums.contains(&43) && nums.contains(&47) && !nums.contains(&42));
}

/// temp_v13.rst: a structural run with a nodal temperature load; the temperatures come from
/// the element results (EPT) and equal the upstream fixture.
#[test]
fn temp_v13_temperatures_match_upstream() {
    let r = read_rst(&data("temp_v13.rst")).unwrap();
    let t = r.nodal_temperature(1).unwrap();
    let rows = csv("temp_v13.known_temperature_from_upstream_npz.csv");
    assert_eq!(rows.len(), 216);
    let idx = node_index(&r);
    for row in &rows {
        assert_eq!(t[idx[&(row[0] as u64)]], row[1], "node {}", row[0]);
    }
    assert!(r.nodal_temperature(0).is_err());
}

/// file.rth: the temperatures of a thermal result are its TEMP solution (range as the summary);
/// beam_static_bc.rst has no thermal load (all 0, as the summary says).
#[test]
fn element_temperatures_agree_with_other_results() {
    let r = read_rst(&data("file.rth")).unwrap();
    let t = r.nodal_temperature(1).unwrap();
    let sol = r.nodal_solution(1).unwrap();
    let s = json("file.rth.summary.json");
    let ept = &s["solution"]["set1"]["EPT_nodal_temperature"];
    let (lo, hi) = t.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    assert!(
        close(lo, ept["min"].as_f64().unwrap(), 1e-12)
            && close(hi, ept["max"].as_f64().unwrap(), 1e-12)
    );
    for (a, b) in t.iter().zip(&sol.values) {
        assert_eq!(a, b);
    }
    let r = read_rst(&data("beam_static_bc.rst")).unwrap();
    assert!(r.nodal_temperature(1).unwrap().iter().all(|&x| x == 0.0));
}
