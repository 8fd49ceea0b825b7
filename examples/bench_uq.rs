//! `gradfem uq` throughput: samples per second in one process, in two processes sharing the
//! chunks (`--shard 0/2` and `1/2` at once: the split two MPI ranks make), optionally under
//! `mpirun -n 1` and `-n 2` (`--mpi`: a gradfem built with the `mpi` feature), and the
//! overhead of the reduction. Prints one JSON object; every run's `uq.json` is checked to be
//! byte-identical to the first. BENCHMARKS.md has a row.
//!
//!   cargo build --release && cargo run --release --example bench_uq -- [--samples 64] [--mpi]
//!
//! The study is examples/microactuator_uq.toml with its sample count replaced.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use gradfem::problem::ProblemFile;
use gradfem::uq::{self, Log, Shard, Study};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// The gradfem binary beside this example's directory (target/release/gradfem).
fn gradfem_bin() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("gradfem"))
        .ok_or("no directory for the gradfem binary")?;
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!("{} is missing: cargo build --release first", bin.display()))
    }
}

fn check(status: std::io::Result<std::process::Output>, what: &str) -> Result<(), String> {
    let o = status.map_err(|e| format!("{what}: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("{what}: {}", String::from_utf8_lossy(&o.stderr)))
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut samples = 64usize;
    let mut mpi = false;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--samples" => {
                samples = args.get(i + 1).ok_or("--samples N")?.parse()?;
                i += 1;
            }
            "--mpi" => mpi = true,
            other => return Err(format!("unknown argument {other}").into()),
        }
        i += 1;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("examples/microactuator_uq.toml"))?
        .replace("samples = 24", &format!("samples = {samples}"));
    let dir = std::env::temp_dir().join(format!("gradfem_bench_uq_{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let problem = dir.join("microactuator_uq.toml");
    std::fs::write(&problem, &text)?;
    // The mesh path of the example is built in; relative paths resolve against `dir`.
    let pf = ProblemFile::read(&problem)?;

    // One process, through the library: samples, then the reduction alone.
    let one = dir.join("one");
    let mut study = Study::new(pf)?;
    let t = Instant::now();
    uq::run(&mut study, &one, Shard::ALL, &mut Log::open(&one, "run"), |_| {})?;
    let run_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    uq::reduce(&one)?;
    let reduce_s = t.elapsed().as_secs_f64();
    let reference = std::fs::read(one.join("uq.json"))?;

    // Two processes at once, one shard each, then the reduction.
    let bin = gradfem_bin()?;
    let two = dir.join("two");
    let t = Instant::now();
    let children: Vec<_> = (0..2)
        .map(|s| {
            Command::new(&bin)
                .args(["--quiet", "uq"])
                .arg(&problem)
                .arg("-o")
                .arg(&two)
                .args(["--shard", &format!("{s}/2")])
                .stderr(std::process::Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    for c in children {
        check(c.wait_with_output(), "gradfem uq --shard")?;
    }
    check(
        Command::new(&bin).args(["--quiet", "uq", "--reduce"]).arg(&two).output(),
        "gradfem uq --reduce",
    )?;
    let two_s = t.elapsed().as_secs_f64();
    if std::fs::read(two.join("uq.json"))? != reference {
        return Err("the sharded run's uq.json differs from one process's".into());
    }

    let mut out = serde_json::json!({
        "study": "examples/microactuator_uq.toml",
        "samples": samples,
        "one_process": {
            "seconds": run_s + reduce_s,
            "samples_per_s": samples as f64 / (run_s + reduce_s),
        },
        "two_shards": {
            "seconds": two_s,
            "samples_per_s": samples as f64 / two_s,
            "parallel_efficiency": (run_s + reduce_s) / (2.0 * two_s),
        },
        "reduce_s": reduce_s,
        "reduce_share": reduce_s / (run_s + reduce_s),
        "identical": true,
    });
    if mpi {
        let mut by_ranks = serde_json::Map::new();
        for ranks in [1, 2] {
            let d = dir.join(format!("mpi{ranks}"));
            let t = Instant::now();
            check(
                Command::new("mpirun")
                    .args(["-n", &ranks.to_string(), "--oversubscribe", "--allow-run-as-root"])
                    .arg(&bin)
                    .args(["--quiet", "uq"])
                    .arg(&problem)
                    .arg("-o")
                    .arg(&d)
                    .output(),
                "mpirun gradfem uq",
            )?;
            let s = t.elapsed().as_secs_f64();
            if std::fs::read(d.join("uq.json"))? != reference {
                return Err(format!("uq.json on {ranks} rank(s) differs from one process's").into());
            }
            by_ranks.insert(
                format!("ranks_{ranks}"),
                serde_json::json!({ "seconds": s, "samples_per_s": samples as f64 / s }),
            );
        }
        out["mpi"] = serde_json::Value::Object(by_ranks);
    }
    println!("{out}");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
