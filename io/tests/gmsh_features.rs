//! Hand-written msh files: sparse and unordered tags, several node blocks, parametric nodes,
//! overlapping and unnamed groups, elements without physical tags, skipped sections, every
//! cell type; and errors that name the right line or byte offset.

mod gmsh_common;

use gmsh_common::msh22_bytes;
use gradfem_io::gmsh::{GmshError, Position, read_msh, read_msh_bytes, write_msh41};
use gradfem_mesh::{CellBlock, CellId, CellType, Mesh, PhysicalGroup};
use rstest::rstest;

const V41: &str = "$MeshFormat
4.1 0 8
$EndMeshFormat
$PhysicalNames
2
3 1 \"solid\"
2 5 \"face a\"
$EndPhysicalNames
$Entities
0 0 2 1
1 0 0 0 1 1 0 2 5 7 0
2 0 0 0 1 1 1 0 0
1 0 0 0 1 1 1 1 1 0
$EndEntities
$Nodes
2 5 3 1000000
3 1 0 4
100
7
55
3
0 0 0
1 0 0
0 1 0
0 0 1
2 1 1 1
1000000
1 1 0 0.5 0.5
$EndNodes
$Periodic
1
2 1 2
$EndPeriodic
$Elements
3 4 5 21
3 1 4 1
9 100 7 55 3
2 1 2 2
20 100 7 55
21 7 55 1000000
2 2 2 1
5 3 7 55
$EndElements
$NodeData
1
\"temperature\"
$EndNodeData
";

fn expected41() -> Mesh {
    let id = |block, index| CellId { block, index };
    Mesh {
        coords: vec![[0., 0., 0.], [1., 0., 0.], [0., 1., 0.], [0., 0., 1.], [1., 1., 0.]],
        node_tags: vec![100, 7, 55, 3, 1000000],
        blocks: vec![
            CellBlock { cell_type: CellType::Tet4, connectivity: vec![0, 1, 2, 3], tags: vec![9] },
            CellBlock {
                cell_type: CellType::Tri3,
                connectivity: vec![0, 1, 2, 1, 2, 4, 3, 1, 2],
                tags: vec![20, 21, 5],
            },
        ],
        groups: vec![
            PhysicalGroup {
                name: "face a".into(),
                tag: 5,
                dim: 2,
                cells: vec![id(1, 0), id(1, 1)],
            },
            PhysicalGroup { name: "2d_7".into(), tag: 7, dim: 2, cells: vec![id(1, 0), id(1, 1)] },
            PhysicalGroup { name: "solid".into(), tag: 1, dim: 3, cells: vec![id(0, 0)] },
        ],
    }
}

const V22: &str = "$MeshFormat
2.2 0 8
$EndMeshFormat
$Nodes
3
10 0 0 0
2 1 0 0
30 0 1 0
$EndNodes
$Elements
3
7 2 2 4 1 10 2 30
8 1 2 0 1 10 2
9 15 0 30
$EndElements
";

#[test]
fn msh41_features() {
    let mesh = read_msh_bytes("features.msh", V41.as_bytes()).unwrap();
    assert_eq!(mesh, expected41());
}

#[test]
fn msh22_features() {
    let mesh = read_msh_bytes("v22.msh", V22.as_bytes()).unwrap();
    assert_eq!(mesh.node_tags, vec![10, 2, 30]);
    let types: Vec<CellType> = mesh.blocks.iter().map(|b| b.cell_type).collect();
    assert_eq!(types, vec![CellType::Tri3, CellType::Line2, CellType::Point1]);
    assert_eq!(mesh.blocks[0].connectivity, vec![0, 1, 2]);
    assert_eq!(mesh.blocks[1].tags, vec![8]);
    assert_eq!(mesh.blocks[2].connectivity, vec![2]);
    assert_eq!(
        mesh.groups,
        vec![PhysicalGroup {
            name: "2d_4".into(),
            tag: 4,
            dim: 2,
            cells: vec![CellId { block: 0, index: 0 }]
        }]
    );
}

#[test]
fn msh22_repeated_element_joins_groups() {
    let text = V22.replace("3\n7 2 2 4", "4\n7 2 2 4 1 10 2 30\n7 2 2 6");
    let mesh = read_msh_bytes("rep.msh", text.as_bytes()).unwrap();
    assert_eq!(mesh.blocks[0].tags, vec![7]);
    let one = vec![CellId { block: 0, index: 0 }];
    assert_eq!(mesh.group("2d_4").unwrap().cells, one);
    assert_eq!(mesh.group("2d_6").unwrap().cells, one);
}

/// One element of every cell type, on nodes with sparse tags; written, read back.
#[test]
fn every_cell_type_round_trips() {
    let mut mesh = Mesh::default();
    for i in 0..27u64 {
        mesh.coords.push([i as f64 * 0.1, (i % 3) as f64, 1.0 / (i + 1) as f64]);
        mesh.node_tags.push(1000 - 7 * i);
    }
    let mut tag = 50;
    for ct in CellType::ALL {
        let (_, blk) = mesh.block_mut(ct);
        let nodes: Vec<usize> = (0..ct.n_nodes()).map(|k| (k * 5) % 27).collect();
        blk.push(&nodes, tag);
        tag += 3;
    }
    let all3: Vec<CellId> = mesh.cells_of_dim(3).collect();
    mesh.groups.push(PhysicalGroup { name: "vol".into(), tag: 2, dim: 3, cells: all3 });
    let dir = tempfile::tempdir().unwrap();
    for binary in [false, true] {
        let path = dir.path().join("all.msh");
        write_msh41(&path, &mesh, binary).unwrap();
        assert_eq!(read_msh(&path).unwrap(), mesh, "binary={binary}");
    }
    let back = read_msh_bytes("all22.msh", &msh22_bytes(&mesh, true, false)).unwrap();
    assert_eq!(back, mesh);
}

#[test]
fn writer_renumbers_duplicate_tags_and_keeps_overlaps() {
    let mut mesh = expected41();
    mesh.blocks[1].tags = vec![9, 9, 1]; // 9 is also the tet's tag
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dup.msh");
    write_msh41(&path, &mesh, false).unwrap();
    let back = read_msh(&path).unwrap();
    assert_eq!(back.blocks[0].tags, vec![1]);
    assert_eq!(back.blocks[1].tags, vec![2, 3, 4]);
    assert_eq!(back.groups, mesh.groups);
    assert_eq!(back.node_tags, mesh.node_tags);
}

fn replace_line(text: &str, line: usize, new: &str) -> String {
    let mut lines: Vec<&str> = text.lines().collect();
    lines[line - 1] = new;
    lines.join("\n") + "\n"
}

fn line_of(text: &str, content: &str) -> usize {
    text.lines().position(|l| l == content).unwrap() + 1
}

fn err(bytes: &[u8]) -> GmshError {
    match read_msh_bytes("bad.msh", bytes) {
        Ok(_) => panic!("a malformed file was accepted"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("bad.msh"), "{msg}");
            e
        }
    }
}

#[test]
fn unknown_element_type_names_type_and_line() {
    let e = err(replace_line(V22, 12, "7 7 2 4 1 10 2 30 2 10").as_bytes());
    assert!(
        matches!(
            e,
            GmshError::UnknownElementType { position: Position::Line(12), gmsh_type: 7, .. }
        ),
        "{e:?}"
    );
    let line = line_of(V41, "3 1 4 1");
    let e = err(replace_line(V41, line, "3 1 99 1").as_bytes());
    assert!(
        matches!(e, GmshError::UnknownElementType { position: Position::Line(l), gmsh_type: 99, .. } if l == line),
        "{e:?}"
    );
}

#[test]
fn undefined_node_names_element_node_and_line() {
    let e = err(replace_line(V22, 13, "8 1 2 0 1 10 99").as_bytes());
    assert!(
        matches!(
            e,
            GmshError::UndefinedNode {
                position: Position::Line(13),
                element_tag: 8,
                node_tag: 99,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("bad.msh:13:1: element 8 refers to node 99"), "{e}");
}

#[test]
fn truncated_and_garbage_ascii() {
    let cut = &V22[..V22.find("2 1 0").unwrap() + 5];
    let e = err(cut.as_bytes());
    assert!(
        matches!(&e, GmshError::Truncated { position: Position::Line(7), expected, .. } if expected == "a node coordinate"),
        "{e:?}"
    );
    let e = err(replace_line(V22, 6, "10 0 0x 0").as_bytes());
    assert!(
        matches!(&e, GmshError::Syntax { line: 6, message, .. } if message.contains("'0x'")),
        "{e:?}"
    );
    // one node fewer than announced: "$EndNodes" is read as a node tag
    let e = err(replace_line(V22, 5, "4").as_bytes());
    assert!(
        matches!(&e, GmshError::Syntax { line: 9, message, .. } if message.contains("$EndNodes")),
        "{e:?}"
    );
    let e = err(replace_line(V41, 16, "2 6 3 1000000").as_bytes());
    assert!(
        matches!(
            e,
            GmshError::CountMismatch { position: Position::Line(16), declared: 6, found: 5, .. }
        ),
        "{e:?}"
    );
    let e = err(replace_line(V22, 8, "10 0 1 0").as_bytes());
    assert!(matches!(e, GmshError::DuplicateNode { node_tag: 10, .. }), "{e:?}");
    // a huge count is an error, not an allocation
    let e = err(replace_line(V22, 5, "999999999999999999").as_bytes());
    assert!(matches!(e, GmshError::Syntax { .. }), "{e:?}");
    let e = err(replace_line(V22, 14, "9 15 0 30 garbage").as_bytes());
    assert!(
        matches!(&e, GmshError::Syntax { line: 14, message, .. } if message.contains("garbage")),
        "{e:?}"
    );
}

#[rstest]
#[case("$MeshFormat\n4.0 0 8\n$EndMeshFormat\n", "4.0")]
#[case("$MeshFormat\n3 0 8\n$EndMeshFormat\n", "3")]
#[case("$NOD\n1\n1 0 0 0\n$ENDNOD\n", "1.0")]
fn unsupported_versions(#[case] text: &str, #[case] version: &str) {
    let e = err(text.as_bytes());
    assert!(
        matches!(&e, GmshError::UnsupportedVersion { version: v, .. } if v == version),
        "{e:?}"
    );
}

#[rstest]
#[case("")]
#[case("$MeshFormat\n4.1 2 8\n$EndMeshFormat\n")]
#[case("$MeshFormat\n4.1 1 3\n\x01\x00\x00\x00\n$EndMeshFormat\n")]
#[case("$MeshFormat\n4.1 1 8\n\x02\x00\x00\x00\n$EndMeshFormat\n")]
#[case("$MeshFormat\n4.1 0 99999999999999999999999999\n$EndMeshFormat\n")]
#[case("$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Elements\n1\n1 15 0 1\n$EndElements\n")]
#[case("$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n1\n1 0 0 nan\n$EndNodes\n")]
#[case("$MeshFormat\n4.1 0 8\n$EndMeshFormat\nNodes\n")]
#[case("$MeshFormat\n4.1 0 8\n$EndMeshFormat\n$Foo\n1 2 3\n")]
fn bad_headers_are_errors(#[case] text: &str) {
    err(text.as_bytes());
}

fn small_binary41() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.msh");
    write_msh41(&path, &expected41(), true).unwrap();
    std::fs::read(path).unwrap()
}

#[test]
fn binary_errors_give_byte_offsets() {
    let bytes = small_binary41();
    assert_eq!(read_msh_bytes("b.msh", &bytes).unwrap(), expected41());
    // The type of the first element block: after "$Elements\n", 4 size_t and 2 ints.
    let at = bytes.windows(10).position(|w| w == b"$Elements\n").unwrap() + 10 + 32 + 8;
    let mut bad = bytes.clone();
    bad[at..at + 4].copy_from_slice(&99i32.to_le_bytes());
    let e = err(&bad);
    assert!(
        matches!(e, GmshError::UnknownElementType { position: Position::Offset(o), gmsh_type: 99, .. } if o == at),
        "{e:?}"
    );
    // The first node tag of the first element → 12345.
    let first_elem = at + 4 + 8 + 8;
    let mut bad = bytes.clone();
    bad[first_elem..first_elem + 8].copy_from_slice(&12345u64.to_le_bytes());
    let e = err(&bad);
    assert!(
        matches!(e, GmshError::UndefinedNode { position: Position::Offset(o), node_tag: 12345, .. } if o == first_elem - 8),
        "{e:?}"
    );
    let cut = &bytes[..first_elem + 3];
    let e = err(cut);
    assert!(
        matches!(e, GmshError::Truncated { position: Position::Offset(o), .. } if o == first_elem),
        "{e:?}"
    );
    // A huge node count with one block: an error after a bounded allocation.
    let nodes = bytes.windows(7).position(|w| w == b"$Nodes\n").unwrap() + 7;
    let mut bad = bytes.clone();
    bad[nodes + 8..nodes + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    bad[nodes + 32 + 12..nodes + 32 + 20].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    let e = err(&bad);
    assert!(matches!(e, GmshError::Truncated { .. } | GmshError::Binary { .. }), "{e:?}");
    assert!(e.to_string().contains("byte offset"), "{e}");
}
