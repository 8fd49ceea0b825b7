//! Throughput of the ANSYS readers on the shared files (data/ansys).
//!
//! `cargo run --release -p gradfem-io --example bench_ansys_read [iterations]` reads every
//! shared result file `iterations` times (default 200) from disk with [`read_rst`] (header,
//! mesh, tables) and decodes every result set with `RstFile::nodal_solution`; then decodes
//! set 1 alone from the bytes in memory (counting the bytes of the solution record); then
//! parses the archive. It prints one JSON line per
//! measurement: `{"what", "bytes_read", "seconds", "mb_per_s"}` where `bytes_read` is the file
//! size times the number of reads and MB = 10⁶ bytes. The OS page cache holds the files after
//! the first read, so the figures measure decoding, not the disk.

use std::path::PathBuf;
use std::time::Instant;

use gradfem_io::ansys::{read_cdb, read_rst};

fn main() {
    let iters: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(200);
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/ansys"));
    let rst = ["beam_static_bc.rst", "file.rth", "temp_v13.rst", "vm1.rst"].map(|f| dir.join(f));
    let report = |what: &str, bytes: u64, secs: f64| {
        println!(
            "{{\"what\": \"{what}\", \"bytes_read\": {bytes}, \"seconds\": {secs:.6}, \"mb_per_s\": {:.1}}}",
            bytes as f64 / secs / 1e6
        );
    };

    // 1. whole files: read from disk, decode header + mesh + every nodal solution
    let mut bytes = 0u64;
    let mut check = 0.0f64;
    let t = Instant::now();
    for _ in 0..iters {
        for p in &rst {
            let r = read_rst(p).expect("shared file reads");
            for s in 1..=r.result_sets.len() {
                let sol = r.nodal_solution(s).expect("set decodes");
                check += sol.values.iter().filter(|v| v.is_finite()).sum::<f64>();
            }
            bytes += r.file_len() as u64;
        }
    }
    report("read_rst + all nodal solutions", bytes, t.elapsed().as_secs_f64());

    // 2. one result set decoded from memory (the file is already parsed); bytes = the size of
    //    the decoded nodal solution (8 bytes per value), not of the whole file
    let files: Vec<_> = rst.iter().map(|p| read_rst(p).expect("shared file reads")).collect();
    let mut bytes = 0u64;
    let t = Instant::now();
    for _ in 0..iters * 10 {
        for r in &files {
            let sol = r.nodal_solution(1).expect("set decodes");
            check += sol.values[0].abs().min(1.0);
            bytes += 8 * sol.values.len() as u64;
        }
    }
    report("nodal_solution(1), bytes of solution decoded", bytes, t.elapsed().as_secs_f64());

    // 3. the archive
    let cdb = dir.join("HexBeam.cdb");
    let len = std::fs::metadata(&cdb).expect("archive exists").len();
    let t = Instant::now();
    for _ in 0..iters {
        let a = read_cdb(&cdb).expect("archive reads");
        check += a.mesh.n_nodes() as f64;
    }
    report("read_cdb", len * iters as u64, t.elapsed().as_secs_f64());
    eprintln!("checksum {check}");
}
