//! Helpers shared by the gmsh tests: data paths, a hand-built msh 2.2 writer (ASCII and binary,
//! either endianness) and a mesh comparison with a coordinate tolerance.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;

use gradfem_mesh::{CellId, Mesh};

/// The repository's copy of the gmsh test data.
pub fn data_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/gmsh"))
}

pub fn data_file(name: &str) -> PathBuf {
    data_dir().join(name)
}

/// msh 2.2 bytes of `mesh`, written by hand (the library only writes 4.1). Each cell gets the
/// tag of the first group that holds it as its physical tag (0 if none) and entity tag 1.
pub fn msh22_bytes(mesh: &Mesh, binary: bool, big_endian: bool) -> Vec<u8> {
    let mut phys: HashMap<CellId, i32> = HashMap::new();
    for g in &mesh.groups {
        for &c in &g.cells {
            phys.entry(c).or_insert(g.tag);
        }
    }
    let int = |out: &mut Vec<u8>, v: i32| {
        out.extend_from_slice(&if big_endian { v.to_be_bytes() } else { v.to_le_bytes() })
    };
    let dbl = |out: &mut Vec<u8>, v: f64| {
        out.extend_from_slice(&if big_endian { v.to_be_bytes() } else { v.to_le_bytes() })
    };
    let mut out = Vec::new();
    out.extend_from_slice(format!("$MeshFormat\n2.2 {} 8\n", u8::from(binary)).as_bytes());
    if binary {
        int(&mut out, 1);
        out.push(b'\n');
    }
    out.extend_from_slice(b"$EndMeshFormat\n$PhysicalNames\n");
    out.extend_from_slice(format!("{}\n", mesh.groups.len()).as_bytes());
    for g in &mesh.groups {
        out.extend_from_slice(format!("{} {} \"{}\"\n", g.dim, g.tag, g.name).as_bytes());
    }
    out.extend_from_slice(b"$EndPhysicalNames\n$Comments\nskipped\n$EndComments\n$Nodes\n");
    out.extend_from_slice(format!("{}\n", mesh.n_nodes()).as_bytes());
    for (p, &t) in mesh.coords.iter().zip(&mesh.node_tags) {
        if binary {
            int(&mut out, t as i32);
            p.iter().for_each(|&x| dbl(&mut out, x));
        } else {
            out.extend_from_slice(format!("{t} {} {} {}\n", p[0], p[1], p[2]).as_bytes());
        }
    }
    if binary {
        out.push(b'\n');
    }
    let n_cells: usize = mesh.blocks.iter().map(|b| b.len()).sum();
    out.extend_from_slice(format!("$EndNodes\n$Elements\n{n_cells}\n").as_bytes());
    for (b, blk) in mesh.blocks.iter().enumerate() {
        for i in 0..blk.len() {
            let p = phys.get(&CellId { block: b, index: i }).copied().unwrap_or(0);
            let nodes: Vec<u64> = blk.cell(i).iter().map(|&n| mesh.node_tags[n]).collect();
            if binary {
                for v in [blk.cell_type.gmsh_type(), 1, 2, blk.tags[i] as i32, p, 1] {
                    int(&mut out, v);
                }
                nodes.iter().for_each(|&n| int(&mut out, n as i32));
            } else {
                let ns: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
                let line = format!(
                    "{} {} 2 {p} 1 {}\n",
                    blk.tags[i],
                    blk.cell_type.gmsh_type(),
                    ns.join(" ")
                );
                out.extend_from_slice(line.as_bytes());
            }
        }
    }
    if binary {
        out.push(b'\n');
    }
    out.extend_from_slice(b"$EndElements\n");
    out
}

/// Assert two meshes are equal, coordinates within `tol` (absolute, relative to the size of
/// the bounding box), everything else exactly.
pub fn assert_same_mesh(a: &Mesh, b: &Mesh, tol: f64) {
    assert_eq!(a.node_tags, b.node_tags, "node tags");
    let [lo, hi] = a.bounding_box();
    let size = (0..3).map(|k| hi[k] - lo[k]).fold(0.0, f64::max);
    for (i, (p, q)) in a.coords.iter().zip(&b.coords).enumerate() {
        for k in 0..3 {
            assert!((p[k] - q[k]).abs() <= tol * size, "node {i}: {p:?} vs {q:?}");
        }
    }
    assert_eq!(a.blocks.len(), b.blocks.len(), "number of blocks");
    for (x, y) in a.blocks.iter().zip(&b.blocks) {
        assert_eq!(x.cell_type, y.cell_type);
        assert_eq!(x.tags, y.tags, "{} tags", x.cell_type);
        assert!(x.connectivity == y.connectivity, "{} connectivity differs", x.cell_type);
    }
    assert_eq!(a.groups, b.groups, "groups");
}
