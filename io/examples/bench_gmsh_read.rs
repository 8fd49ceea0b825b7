//! Benchmark of the gmsh reader on a ~1-million-tet mesh.
//!
//! Builds a structured box of `n³` cubes split into 6 tetrahedra each (default n = 55:
//! 998 250 tets, 175 616 nodes), writes it as msh 4.1 binary and ASCII into a temporary
//! directory with `write_msh41`, then times `read_msh` on each file (best of 3) and measures the
//! peak resident memory of one read in a child process (`VmHWM` of `/proc/self/status`).
//!
//! Run: `cargo run --release -p gradfem-io --example bench_gmsh_read [-- N [KEEP_DIR]]`
//!
//! Prints one JSON line:
//! `{"tets":..,"nodes":..,"binary_bytes":..,"binary_read_s":..,"binary_peak_rss_mb":..,
//!   "ascii_bytes":..,"ascii_read_s":..,"ascii_peak_rss_mb":..}`.
//! Targets: binary ≤ 1.5 s, peak memory ≤ 3× the file size, ASCII ≤ 4× the binary time.

use std::error::Error;
use std::path::Path;
use std::time::Instant;

use gradfem_io::gmsh::{read_msh, write_msh41};
use gradfem_mesh::{CellBlock, CellId, CellType, Mesh, PhysicalGroup};

/// `n³` unit cubes on [0,1]³, each split into 6 tets along its main diagonal (Kuhn
/// subdivision), all positively oriented; one physical group "box" holds every tet.
fn box_mesh(n: usize) -> Mesh {
    let m = n + 1;
    let h = 1.0 / n as f64;
    let node = |i: usize, j: usize, k: usize| i + m * (j + m * k);
    let mut coords = Vec::with_capacity(m * m * m);
    for k in 0..m {
        for j in 0..m {
            for i in 0..m {
                coords.push([i as f64 * h, j as f64 * h, k as f64 * h]);
            }
        }
    }
    // The 6 axis orders; odd permutations swap two nodes to keep a positive volume.
    const PERMS: [([usize; 3], bool); 6] = [
        ([0, 1, 2], true),
        ([1, 2, 0], true),
        ([2, 0, 1], true),
        ([0, 2, 1], false),
        ([2, 1, 0], false),
        ([1, 0, 2], false),
    ];
    let mut blk = CellBlock::new(CellType::Tet4);
    blk.connectivity.reserve(24 * n * n * n);
    blk.tags.reserve(6 * n * n * n);
    for k in 0..n {
        for j in 0..n {
            for i in 0..n {
                for (perm, even) in PERMS {
                    let mut p = [i, j, k];
                    let mut tet = [node(i, j, k), 0, 0, 0];
                    for (s, &axis) in perm.iter().enumerate() {
                        p[axis] += 1;
                        tet[s + 1] = node(p[0], p[1], p[2]);
                    }
                    if !even {
                        tet.swap(1, 2);
                    }
                    let tag = blk.tags.len() as u64 + 1;
                    blk.push(&tet, tag);
                }
            }
        }
    }
    let cells = (0..blk.len()).map(|index| CellId { block: 0, index }).collect();
    Mesh {
        node_tags: (1..=coords.len() as u64).collect(),
        coords,
        blocks: vec![blk],
        groups: vec![PhysicalGroup { name: "box".into(), tag: 1, dim: 3, cells }],
    }
}

fn vm_hwm_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Best of 3 wall times of `read_msh`.
fn best_read(path: &Path, expected_tets: usize) -> Result<f64, Box<dyn Error>> {
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        let mesh = read_msh(path)?;
        best = best.min(t.elapsed().as_secs_f64());
        if mesh.blocks[0].len() != expected_tets {
            return Err("wrong tet count".into());
        }
    }
    Ok(best)
}

/// Peak RSS in MB of a child process that reads `path` once.
fn child_peak_rss_mb(path: &Path) -> Result<f64, Box<dyn Error>> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .arg("--read-once")
        .arg(path)
        .output()?;
    if !out.status.success() {
        return Err(format!("child failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let kb: f64 = String::from_utf8_lossy(&out.stdout).trim().parse()?;
    Ok(kb / 1024.0)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--read-once") {
        let mesh = read_msh(Path::new(&args[2]))?;
        std::hint::black_box(&mesh);
        println!("{}", vm_hwm_kb());
        return Ok(());
    }
    let n: usize = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(55);
    let mesh = box_mesh(n);
    let tets = mesh.blocks[0].len();
    // Optional second argument: a directory that keeps the files (default: a temporary one).
    let tmp = tempfile::tempdir()?;
    let dir = args.get(2).map_or(tmp.path(), |d| Path::new(d));
    let bin = dir.join("box_binary.msh");
    let asc = dir.join("box_ascii.msh");
    let t = Instant::now();
    write_msh41(&bin, &mesh, true)?;
    let write_binary_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    write_msh41(&asc, &mesh, false)?;
    let write_ascii_s = t.elapsed().as_secs_f64();
    drop(mesh);
    let binary_bytes = std::fs::metadata(&bin)?.len();
    let ascii_bytes = std::fs::metadata(&asc)?.len();
    let binary_read_s = best_read(&bin, tets)?;
    let ascii_read_s = best_read(&asc, tets)?;
    let binary_peak_rss_mb = child_peak_rss_mb(&bin)?;
    let ascii_peak_rss_mb = child_peak_rss_mb(&asc)?;
    println!(
        "{{\"tets\":{tets},\"nodes\":{},\"binary_bytes\":{binary_bytes},\
         \"binary_read_s\":{binary_read_s:.4},\"binary_peak_rss_mb\":{binary_peak_rss_mb:.1},\
         \"ascii_bytes\":{ascii_bytes},\"ascii_read_s\":{ascii_read_s:.4},\
         \"ascii_peak_rss_mb\":{ascii_peak_rss_mb:.1},\"write_binary_s\":{write_binary_s:.3},\
         \"write_ascii_s\":{write_ascii_s:.3}}}",
        (n + 1).pow(3)
    );
    Ok(())
}
