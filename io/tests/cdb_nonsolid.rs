//! Archives with both `EBLOCK` layouts (`SOLID` and the compact one Mechanical writes for
//! surface elements): solid, shell and beam elements become the right cells in gmsh node order,
//! with their numbers as tags, material/type groups and components; broken records give errors
//! that name the file and the line.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gradfem_io::ansys::{AnsysError, CdbArchive, HEX20_FROM_ANSYS, read_cdb, read_cdb_bytes};
use gradfem_mesh::{CellType, Mesh};
use proptest::prelude::*;
use rstest::rstest;

/// One element of the test deck.
#[derive(Clone, Debug)]
struct Elem {
    number: i64,
    /// `ET` reference number.
    etype: i64,
    material: i64,
    real: i64,
    section: i64,
    esys: i64,
    /// Node numbers in ANSYS order.
    nodes: Vec<i64>,
    /// Written in the `SOLID` layout (otherwise in the compact one).
    solid: bool,
}

#[allow(clippy::too_many_arguments)]
fn elem(
    number: i64,
    etype: i64,
    material: i64,
    real: i64,
    section: i64,
    esys: i64,
    nodes: &[i64],
    solid: bool,
) -> Elem {
    Elem { number, etype, material, real, section, esys, nodes: nodes.to_vec(), solid }
}

/// ANSYS corners of the 20-node brick (element 10), then its mid-side nodes 21..=32.
const BRICK: [i64; 8] = [2, 9, 10, 3, 6, 11, 12, 7];
/// ANSYS mid-side nodes Q R S T U V W X Y Z A B of a 20-node brick, as pairs of its corners.
const BRICK_EDGES: [[usize; 2]; 12] = [
    [0, 1],
    [1, 2],
    [2, 3],
    [3, 0],
    [4, 5],
    [5, 6],
    [6, 7],
    [7, 4],
    [0, 4],
    [1, 5],
    [2, 6],
    [3, 7],
];

/// Element types of the deck: (reference, ANSYS routine).
const TYPES: [(i64, u32); 8] =
    [(1, 185), (2, 181), (3, 188), (4, 281), (5, 189), (6, 186), (7, 154), (8, 180)];

fn elements() -> Vec<Elem> {
    let mut brick: Vec<i64> = BRICK.to_vec();
    brick.extend(21..=32);
    vec![
        // SOLID layout: a SOLID185 brick, a SHELL181 quadrilateral, a BEAM188 with orientation K
        elem(1, 1, 1, 1, 0, 0, &[1, 2, 3, 4, 5, 6, 7, 8], true),
        elem(2, 2, 2, 5, 7, 0, &[5, 6, 7, 8], true),
        elem(3, 3, 3, 1, 9, 0, &[1, 2, 4], true),
        // compact layout
        elem(10, 6, 1, 1, 0, 0, &brick, false),
        elem(11, 2, 2, 5, 0, 0, &[5, 6, 7, 7], false),
        elem(12, 4, 2, 6, 0, 0, &[101, 102, 103, 104, 105, 106, 107, 108], false),
        elem(13, 4, 2, 6, 0, 0, &[101, 102, 103, 103, 105, 106, 103, 109], false),
        elem(14, 5, 3, 2, 0, 0, &[201, 202, 203, 4], false),
        elem(15, 8, 3, 3, 0, 0, &[1, 5], false),
        elem(16, 7, 4, 4, 0, 12, &[1, 2, 3, 4], false),
        elem(17, 3, 3, 1, 0, 12, &[5, 6, 8], false),
    ]
}

/// Node numbers and coordinates of the deck.
fn nodes() -> Vec<(i64, [f64; 3])> {
    let mut v: Vec<(i64, [f64; 3])> = vec![
        (1, [0.0, 0.0, 0.0]),
        (2, [1.0, 0.0, 0.0]),
        (3, [1.0, 1.0, 0.0]),
        (4, [0.0, 1.0, 0.0]),
        (5, [0.0, 0.0, 1.0]),
        (6, [1.0, 0.0, 1.0]),
        (7, [1.0, 1.0, 1.0]),
        (8, [0.0, 1.0, 1.0]),
        (9, [2.0, 0.0, 0.0]),
        (10, [2.0, 1.0, 0.0]),
        (11, [2.0, 0.0, 1.0]),
        (12, [2.0, 1.0, 1.0]),
    ];
    let at = |n: i64, v: &[(i64, [f64; 3])]| v.iter().find(|p| p.0 == n).unwrap().1;
    for (k, [a, b]) in BRICK_EDGES.iter().enumerate() {
        let (pa, pb) = (at(BRICK[*a], &v), at(BRICK[*b], &v));
        v.push((21 + k as i64, std::array::from_fn(|d| 0.5 * (pa[d] + pb[d]))));
    }
    let z = 2.0;
    v.extend([
        (101, [0.0, 0.0, z]),
        (102, [1.0, 0.0, z]),
        (103, [1.0, 1.0, z]),
        (104, [0.0, 1.0, z]),
        (105, [0.5, 0.0, z]),
        (106, [1.0, 0.5, z]),
        (107, [0.5, 1.0, z]),
        (108, [0.0, 0.5, z]),
        (109, [0.5, 0.5, z]),
        (201, [0.0, 0.0, 3.0]),
        (202, [1.0, 0.0, 3.0]),
        (203, [0.5, 0.0, 3.0]),
    ]);
    v
}

fn fixed(width: usize, values: &[i64]) -> String {
    values.iter().map(|x| format!("{x:>width$}")).collect()
}

/// A deck as lines, with the 0-based line of each element's first record line and the ranges
/// of record lines of the two `EBLOCK`s.
struct Deck {
    lines: Vec<String>,
    record_line: Vec<(i64, usize)>,
    eblock_lines: Vec<usize>,
}

impl Deck {
    fn text(&self) -> String {
        let mut s = self.lines.join("\n");
        s.push('\n');
        s
    }

    fn line_of(&self, element: i64) -> usize {
        self.record_line.iter().find(|r| r.0 == element).unwrap().1
    }
}

/// Write the deck with integer fields of `w` characters (`(19iw)` and `(15iw)`).
fn deck(w: usize, elems: &[Elem], lowercase: bool) -> Deck {
    let kw = |s: &str| if lowercase { s.to_ascii_lowercase() } else { s.to_string() };
    let mut lines: Vec<String> = vec!["/PREP7".into()];
    for (r, t) in TYPES {
        lines.push(format!("{},{r:>9},{t}", kw("ET")));
    }
    let ns = nodes();
    lines.push(format!("{},6,{},{:>10},{:>10}", kw("NBLOCK"), kw("SOLID"), 209, ns.len()));
    lines.push(format!("(3i{w},6e21.13e3)"));
    for (n, p) in &ns {
        let c: String = p.iter().map(|x| format!("{x:21.13E}")).collect();
        lines.push(format!("{}{c}", fixed(w, &[*n, 0, 0])));
    }
    lines.push("N,R5.3,LOC,       -1,".into());
    let mut record_line = Vec::new();
    let mut eblock_lines = Vec::new();
    for solid in [true, false] {
        let block: Vec<&Elem> = elems.iter().filter(|e| e.solid == solid).collect();
        let (cmd, per_line) = if solid {
            (format!("{},19,{},{:>10},{:>10}", kw("EBLOCK"), kw("SOLID"), 17, block.len()), 19)
        } else {
            (format!("{},10,,,{}", kw("EBLOCK"), block.len()), 15)
        };
        lines.push(cmd);
        lines.push(format!("({per_line}i{w})"));
        for e in block {
            record_line.push((e.number, lines.len()));
            let (mut first, on_first) = if solid {
                let n = e.nodes.len() as i64;
                (vec![e.material, e.etype, e.real, e.section, e.esys, 0, 0, 0, n, 0, e.number], 8)
            } else {
                (vec![e.number, e.etype, e.real, e.material, e.esys], 10)
            };
            let k = e.nodes.len().min(on_first);
            first.extend(&e.nodes[..k]);
            eblock_lines.push(lines.len());
            lines.push(fixed(w, &first));
            for chunk in e.nodes[k..].chunks(per_line) {
                eblock_lines.push(lines.len());
                lines.push(fixed(w, chunk));
            }
        }
        lines.push(format!("{:>w$}", -1));
    }
    lines.push(format!(
        "{},SHELLS  ,ELEM,       3  ! users element component definition",
        kw("CMBLOCK")
    ));
    lines.push("(8i10)".into());
    lines.push(fixed(10, &[2, 11, -13]));
    lines.push(format!("{},MIXED,ELEM,       3", kw("CMBLOCK")));
    lines.push("(8i10)".into());
    lines.push(fixed(10, &[10, 1, 2]));
    lines.push(format!("{},TOP,NODE,       2", kw("CMBLOCK")));
    lines.push("(8i10)".into());
    lines.push(fixed(10, &[5, -8]));
    lines.push("FINISH".into());
    Deck { lines, record_line, eblock_lines }
}

/// The cell of element `number`: its type and its nodes as ANSYS node numbers.
fn cell_of(a: &CdbArchive, number: u64) -> (CellType, Vec<u64>) {
    let rec = a.elements.iter().find(|e| e.number == number).unwrap();
    let c = rec.cell.unwrap_or_else(|| panic!("element {number} is not a cell"));
    assert_eq!(a.mesh.cell_tag(c), number);
    let nodes = a.mesh.cell_nodes(c).iter().map(|&i| a.mesh.node_tags[i]).collect();
    (a.mesh.cell_type(c), nodes)
}

fn group_tags(mesh: &Mesh, name: &str) -> (usize, BTreeSet<u64>) {
    let g = mesh.group(name).unwrap_or_else(|_| panic!("no group {name}"));
    (g.dim, g.cells.iter().map(|&c| mesh.cell_tag(c)).collect())
}

fn set(v: &[u64]) -> BTreeSet<u64> {
    v.iter().copied().collect()
}

#[rstest]
#[case(9, false)]
#[case(10, false)]
#[case(9, true)]
fn both_layouts_give_the_cells(#[case] width: usize, #[case] lowercase: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.cdb");
    std::fs::write(&path, deck(width, &elements(), lowercase).text()).unwrap();
    let a = read_cdb(&path).unwrap();
    a.mesh.validate().unwrap();
    assert_eq!(a.mesh.n_nodes(), nodes().len());
    assert_eq!(a.elements.len(), elements().len());

    // cells and connectivity in gmsh order
    let brick: Vec<u64> = BRICK.iter().map(|&n| n as u64).chain(21..=32).collect();
    let hex20: Vec<u64> = HEX20_FROM_ANSYS.iter().map(|&k| brick[k]).collect();
    let expect: Vec<(u64, CellType, Vec<u64>)> = vec![
        (1, CellType::Hex8, (1..=8).collect()),
        (2, CellType::Quad4, vec![5, 6, 7, 8]),
        (3, CellType::Line2, vec![1, 2]),
        (10, CellType::Hex20, hex20),
        (11, CellType::Tri3, vec![5, 6, 7]),
        (12, CellType::Quad8, (101..=108).collect()),
        (13, CellType::Tri6, vec![101, 102, 103, 105, 106, 109]),
        (14, CellType::Line3, vec![201, 202, 203]),
        (15, CellType::Line2, vec![1, 5]),
        (17, CellType::Line2, vec![5, 6]),
    ];
    for (number, ct, nodes) in &expect {
        assert_eq!(cell_of(&a, *number), (*ct, nodes.clone()), "element {number}");
    }
    let n_cells: usize = a.mesh.blocks.iter().map(|b| b.len()).sum();
    assert_eq!(n_cells, expect.len());

    // the unsupported surface element is skipped and listed, never a cell
    assert_eq!(a.skipped.len(), 1);
    assert_eq!((a.skipped[0].element, a.skipped[0].ansys_type), (16, 154));
    assert!(a.elements.iter().find(|e| e.number == 16).unwrap().cell.is_none());

    // the 20-node brick's mid-side nodes sit at the middle of gmsh's edges
    let (_, c) = cell_of(&a, 10);
    let xyz = |n: u64| a.mesh.coords[a.mesh.node_tags.iter().position(|&t| t == n).unwrap()];
    for (e, [p, q]) in CellType::Hex20.edges().iter().enumerate() {
        let (m, x, y) = (xyz(c[8 + e]), xyz(c[*p]), xyz(c[*q]));
        for d in 0..3 {
            assert_eq!(m[d], 0.5 * (x[d] + y[d]), "edge {e}");
        }
    }

    // attributes: SOLID layout keeps the section, the compact layout has none
    let rec = |n: u64| a.elements.iter().find(|e| e.number == n).unwrap();
    let attrs = |n: u64| {
        let r = rec(n);
        (r.type_ref, r.ansys_type, r.material, r.real, r.section)
    };
    assert_eq!(attrs(2), (2, 181, 2, 5, 7));
    assert_eq!(attrs(3), (3, 188, 3, 1, 9));
    assert_eq!(attrs(10), (6, 186, 1, 1, 0));
    assert_eq!(attrs(12), (4, 281, 2, 6, 0));
    assert_eq!(attrs(14), (5, 189, 3, 2, 0));
    assert_eq!(attrs(17), (3, 188, 3, 1, 0));
    assert_eq!(rec(14).nodes, vec![201, 202, 203, 4]);
    assert_eq!(rec(10).nodes.len(), 20);

    // groups keep the cells of their largest dimension
    let m = &a.mesh;
    assert_eq!(group_tags(m, "material_1"), (3, set(&[1, 10])));
    assert_eq!(group_tags(m, "material_2"), (2, set(&[2, 11, 12, 13])));
    assert_eq!(group_tags(m, "material_3"), (1, set(&[3, 14, 15, 17])));
    assert!(m.group("material_4").is_err());
    assert_eq!(group_tags(m, "etype_2"), (2, set(&[2, 11])));
    assert_eq!(group_tags(m, "etype_3"), (1, set(&[3, 17])));
    assert_eq!(group_tags(m, "etype_4"), (2, set(&[12, 13])));
    assert_eq!(group_tags(m, "etype_6"), (3, set(&[10])));
    // components
    assert_eq!(group_tags(m, "SHELLS"), (2, set(&[2, 11, 12, 13])));
    assert_eq!(group_tags(m, "MIXED"), (3, set(&[1, 10])));
    let (name, top) = &a.node_components[0];
    assert_eq!(name, "TOP");
    let top: Vec<u64> = top.iter().map(|&i| m.node_tags[i]).collect();
    assert_eq!(top, vec![5, 6, 7, 8]);
}

/// The error's line (1-based) and message; panics unless it is a syntax error naming `file`.
fn syntax_error(file: &str, r: Result<CdbArchive, AnsysError>) -> (usize, String) {
    match r {
        Err(e @ AnsysError::Syntax { .. }) => {
            let shown = e.to_string();
            let AnsysError::Syntax { file: f, line, message } = e else { unreachable!() };
            assert_eq!(f, PathBuf::from(file));
            assert!(shown.starts_with(&format!("{file}:{line}:1: ")), "{shown}");
            (line, message)
        }
        other => panic!("expected a syntax error, got {other:?}"),
    }
}

fn read_lines(lines: &[String]) -> Result<CdbArchive, AnsysError> {
    read_cdb_bytes(Path::new("m.cdb"), (lines.join("\n") + "\n").as_bytes())
}

/// What to do to the deck, and the 0-based line the error must name.
#[derive(Clone, Copy, Debug)]
enum Damage {
    /// The LINK180 record (element 15) cut after its fourth field.
    ShortRecord,
    /// A letter in a node field of the SHELL281 (element 12).
    NotAnInteger,
    /// The file ends after the first line of the 20-node brick (element 10).
    FileEndsInRecord,
    /// The compact block ends (`-1`) after the first line of the 20-node brick.
    BlockEndsInRecord,
    /// The last record line of the compact block is the last line of the file.
    NoTerminator,
    /// The SHELL281 uses node 999, which NBLOCK does not define.
    UndefinedNode,
    /// A BEAM188 in the SOLID layout uses node 999.
    UndefinedNodeSolid,
    /// The compact block's format line has no room for nodes.
    NarrowFormat,
    /// A SOLID-layout record whose node count says 8 but holds 4 nodes.
    SolidCountTooLarge,
}

#[rstest]
#[case(Damage::ShortRecord, "4 fields")]
#[case(Damage::NotAnInteger, "not an integer")]
#[case(Damage::FileEndsInRecord, "the file ends after 10 of its 20 nodes")]
#[case(Damage::BlockEndsInRecord, "the block ends after 10 of its 20 nodes")]
#[case(Damage::NoTerminator, "not closed by -1")]
#[case(Damage::UndefinedNode, "node 999")]
#[case(Damage::UndefinedNodeSolid, "node 999")]
#[case(Damage::NarrowFormat, "5 fields per line")]
#[case(Damage::SolidCountTooLarge, "record ends after 4 of its 8 nodes")]
fn broken_records_name_their_line(#[case] damage: Damage, #[case] says: &str) {
    let w = 9;
    let mut elems = elements();
    let d = deck(w, &elems, false);
    let mut lines = d.lines.clone();
    let compact_cmd = d.line_of(10) - 2;
    let at = match damage {
        Damage::ShortRecord => {
            let l = d.line_of(15);
            lines[l].truncate(4 * w);
            l
        }
        Damage::NotAnInteger => {
            let l = d.line_of(12);
            lines[l].replace_range(7 * w - 3..7 * w, "1x3");
            l
        }
        Damage::FileEndsInRecord => {
            let l = d.line_of(10);
            lines.truncate(l + 1);
            l
        }
        Damage::BlockEndsInRecord => {
            let l = d.line_of(10);
            lines.truncate(l + 1);
            lines.push(format!("{:>w$}", -1));
            l
        }
        Damage::NoTerminator => {
            let l = d.line_of(17);
            lines.truncate(l + 1);
            compact_cmd
        }
        Damage::UndefinedNode => {
            elems.iter_mut().find(|e| e.number == 12).unwrap().nodes[1] = 999;
            lines = deck(w, &elems, false).lines;
            d.line_of(12)
        }
        Damage::UndefinedNodeSolid => {
            elems.iter_mut().find(|e| e.number == 3).unwrap().nodes[0] = 999;
            lines = deck(w, &elems, false).lines;
            d.line_of(3)
        }
        Damage::NarrowFormat => {
            lines[compact_cmd + 1] = format!("(5i{w})");
            compact_cmd + 1
        }
        Damage::SolidCountTooLarge => {
            let l = d.line_of(2);
            lines[l].replace_range(8 * w..9 * w, &format!("{:>w$}", 8));
            l
        }
    };
    let (line, message) = syntax_error("m.cdb", read_lines(&lines));
    assert_eq!(line, at + 1, "{message}");
    assert!(message.contains(says), "{message}");
}

/// A continuation line is read only for types whose records are longer than one line: a
/// 10-node tetrahedron fills the first compact line exactly and the next line is a new record.
#[test]
fn full_first_line_of_a_ten_node_tetrahedron_is_the_whole_record() {
    let mut elems = elements();
    elems.push(elem(18, 9, 1, 1, 0, 0, &[1, 2, 4, 5, 21, 24, 25, 29, 30, 32], false));
    elems.push(elem(19, 2, 2, 5, 0, 0, &[1, 2, 3, 4], false));
    let mut d = deck(9, &elems, false);
    d.lines.insert(1, "ET,        9,187".into());
    let a = read_lines(&d.lines).unwrap();
    let tet = a.elements.iter().find(|e| e.number == 18).unwrap();
    assert_eq!(a.mesh.cell_type(tet.cell.unwrap()), CellType::Tet10);
    assert_eq!(cell_of(&a, 19), (CellType::Quad4, vec![1, 2, 3, 4]));
}

/// A full first line of a type gradfem does not know continues on lines too short to be records.
#[test]
fn unknown_long_types_take_short_continuation_lines() {
    let mut elems = elements();
    elems.push(elem(18, 9, 5, 1, 0, 0, &(1..=12).collect::<Vec<_>>(), false));
    elems.push(elem(19, 2, 2, 5, 0, 0, &[1, 2, 3, 4], false));
    let mut d = deck(9, &elems, false);
    d.lines.insert(1, "ET,        9,999".into());
    let a = read_lines(&d.lines).unwrap();
    let rec = a.elements.iter().find(|e| e.number == 18).unwrap();
    assert_eq!(rec.nodes, (1..=12).collect::<Vec<u64>>());
    assert!(a.skipped.iter().any(|s| s.element == 18));
    assert_eq!(cell_of(&a, 19), (CellType::Quad4, vec![1, 2, 3, 4]));
}

/// Elements whose first two nodes are kept by every cell mapping (ends, corners).
const CELL_ELEMENTS: [i64; 10] = [1, 2, 3, 10, 11, 12, 13, 14, 15, 17];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A kept node that NBLOCK does not define is an error at the element's first line.
    #[test]
    fn undefined_nodes_are_located(
        which in 0..CELL_ELEMENTS.len(),
        pos in 0usize..2,
        node in 1000i64..100_000_000,
        wide in any::<bool>(),
    ) {
        let w = if wide { 10 } else { 9 };
        let number = CELL_ELEMENTS[which];
        let mut elems = elements();
        elems.iter_mut().find(|e| e.number == number).unwrap().nodes[pos] = node;
        let d = deck(w, &elems, false);
        let (line, message) = syntax_error("m.cdb", read_lines(&d.lines));
        prop_assert_eq!(line, d.line_of(number) + 1);
        prop_assert!(message.contains(&format!("node {node}")), "{}", message);
    }

    /// A field that is not an integer, anywhere in an element record, is an error at its line.
    #[test]
    fn garbage_fields_are_located(
        which in any::<prop::sample::Index>(),
        field in 0usize..19,
        junk in prop_oneof![Just("x"), Just("1.5"), Just("1e3"), Just("--2"), Just("+-")],
        wide in any::<bool>(),
    ) {
        let w = if wide { 10 } else { 9 };
        let d = deck(w, &elements(), false);
        let l = d.eblock_lines[which.index(d.eblock_lines.len())];
        let mut lines = d.lines.clone();
        let n = lines[l].len() / w;
        let f = field % n;
        lines[l].replace_range(f * w..(f + 1) * w, &format!("{junk:>w$}"));
        let (line, message) = syntax_error("m.cdb", read_lines(&lines));
        prop_assert_eq!(line, l + 1, "{}", message);
    }

    /// A deck cut anywhere inside an element block is an error, never a panic or a mesh.
    #[test]
    fn decks_cut_inside_a_block_fail(which in any::<prop::sample::Index>(), byte in 0usize..200) {
        let d = deck(9, &elements(), false);
        let l = d.eblock_lines[which.index(d.eblock_lines.len())];
        let mut text = d.lines[..l].join("\n");
        text.push('\n');
        text.push_str(&d.lines[l][..byte.min(d.lines[l].len())]);
        let r = read_cdb_bytes(Path::new("m.cdb"), text.as_bytes());
        prop_assert!(matches!(r, Err(AnsysError::Syntax { .. })), "{:?}", r.map(|a| a.elements.len()));
    }

    /// Damaged decks (bytes flipped, cut anywhere) give a mesh or a typed error, never a panic.
    #[test]
    fn damaged_decks_do_not_panic(
        cut in 0.0f64..=1.0,
        flips in prop::collection::vec((0.0f64..1.0, any::<u8>()), 0..8),
    ) {
        let mut bytes = deck(9, &elements(), false).text().into_bytes();
        let n = bytes.len();
        for (pos, v) in flips {
            bytes[((pos * n as f64) as usize).min(n - 1)] ^= v | 1;
        }
        bytes.truncate((cut * n as f64) as usize);
        if let Ok(a) = read_cdb_bytes(Path::new("m.cdb"), &bytes) {
            prop_assert!(a.mesh.validate().is_ok());
        }
    }
}
