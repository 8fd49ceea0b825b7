//! `mpirun -n R gradfem uq`: a 64-sample study gives byte-identical results on 1, 2 and 4 ranks,
//! and the same bytes as one process and as sharded runs reduced (a random-field study too, on
//! 1 and 2 ranks); `mpirun -n R gradfem
//! identify` fits the pad's two specimens to the same report on 1, 2 and 4 ranks. Needs the `mpi` feature
//! (`cargo test --release -p gradfem --features mpi --test uq_mpi`; scripts/test.sh runs it,
//! installing OpenMPI first where it is missing); without the feature the test says so and
//! passes.

#[cfg(feature = "mpi")]
use std::path::Path;
#[cfg(feature = "mpi")]
use std::process::Command;

#[cfg(feature = "mpi")]
#[path = "support/uq_slab.rs"]
mod uq_slab;

/// The slab study: 64 Sobol samples in chunks of 4, the seed's check.
#[cfg(feature = "mpi")]
const UQ_TABLE: &str = r#"[uq]
design = "sobol"
samples = 64
batch = 4
seed = 5

[[uq.input]]
parameter = "thermal.k.domain"
distribution = "normal"
cv = 0.1

[[uq.input]]
parameter = "thermal.q.domain"
distribution = "lognormal"
cv = 0.2

[[uq.output]]
quantity = "mean_temperature"
upper = 340.0

[[uq.output]]
quantity = "max_temperature"

[uq.stop]
rule = "seed_check"
output = "mean_temperature"
"#;

/// The slab with its study.
#[cfg(feature = "mpi")]
fn problem() -> String {
    uq_slab::slab(UQ_TABLE)
}

#[cfg(feature = "mpi")]
fn gradfem(args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_gradfem")).args(args).output().unwrap();
    assert!(o.status.success(), "gradfem {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

#[cfg(feature = "mpi")]
fn mpirun(ranks: usize, args: &[&str]) {
    let o = Command::new("mpirun")
        .args(["-n", &ranks.to_string(), "--oversubscribe", "--allow-run-as-root"])
        .arg(env!("CARGO_BIN_EXE_gradfem"))
        .args(args)
        .output()
        .expect("mpirun runs (scripts/install_mpi.sh installs OpenMPI)");
    assert!(
        o.status.success(),
        "mpirun -n {ranks} gradfem {args:?}: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
}

#[cfg(feature = "mpi")]
fn same(a: &Path, b: &Path) {
    for f in ["uq.json", "samples.json", "samples.csv", "convergence.png"] {
        let (x, y) = (std::fs::read(a.join(f)).unwrap(), std::fs::read(b.join(f)).unwrap());
        assert!(x == y, "{f}: {} and {} differ", a.display(), b.display());
    }
}

#[cfg(feature = "mpi")]
#[test]
fn one_two_and_four_ranks_give_the_bytes_of_one_process_and_of_shards() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("slab.toml");
    std::fs::write(&path, problem()).unwrap();
    let p = path.to_str().unwrap();
    let out = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    gradfem(&["--quiet", "uq", p, "-o", &out("plain")]);
    mpirun(1, &["--quiet", "uq", p, "-o", &out("rank1")]);
    mpirun(2, &["--quiet", "uq", p, "-o", &out("rank2")]);
    mpirun(4, &["--quiet", "uq", p, "-o", &out("rank4")]);
    for s in ["1/2", "0/2"] {
        gradfem(&["--quiet", "uq", p, "-o", &out("shards"), "--shard", s]);
    }
    gradfem(&["--quiet", "uq", "--reduce", &out("shards")]);
    let plain = dir.path().join("plain");
    for other in ["rank1", "rank2", "rank4", "shards"] {
        same(&plain, &dir.path().join(other));
    }
    // One log per rank, each with its own samples: rank 1 ran chunk 1 (samples 4..8).
    let log1 = std::fs::read_to_string(dir.path().join("rank2/logs/rank-1-of-2.log")).unwrap();
    assert!(log1.contains("sample 4: ok") && !log1.contains("sample 0: ok"), "{log1}");
    assert!(dir.path().join("rank2/logs/rank-0-of-2.log").is_file());
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(plain.join("uq.json")).unwrap()).unwrap();
    assert_eq!(r["samples"], 64);
    assert_eq!(r["acceptance"]["accepted"], true);

    // A rerun on 2 ranks resumes from the parts (nothing left to compute) and writes the same.
    std::fs::remove_file(dir.path().join("rank2/parts/chunk-000003.json")).unwrap();
    mpirun(2, &["--quiet", "uq", p, "-o", &out("rank2")]);
    same(&plain, &dir.path().join("rank2"));
}

/// A random-field study (the conductivity per cell, Karhunen–Loève modes): every rank expands
/// the field itself, and 1 and 2 ranks write the bytes of one process.
#[cfg(feature = "mpi")]
#[test]
fn a_random_field_study_is_the_same_on_one_and_two_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("field.toml");
    let text = problem().replace(
        "parameter = \"thermal.k.domain\"\ndistribution = \"normal\"\ncv = 0.1",
        "parameter = \"thermal.k_elem.domain\"\ndistribution = \"lognormal\"\ncv = 0.1\ncorrelation_length = 0.3\nmodes = 8",
    );
    assert!(text.contains("correlation_length"));
    std::fs::write(&path, text).unwrap();
    let p = path.to_str().unwrap();
    let out = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    gradfem(&["--quiet", "uq", p, "-o", &out("plain")]);
    mpirun(1, &["--quiet", "uq", p, "-o", &out("rank1")]);
    mpirun(2, &["--quiet", "uq", p, "-o", &out("rank2")]);
    let plain = dir.path().join("plain");
    for other in ["rank1", "rank2"] {
        same(&plain, &dir.path().join(other));
    }
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(plain.join("uq.json")).unwrap()).unwrap();
    assert_eq!(r["inputs"][0]["field"]["modes"], 8);
}

#[cfg(not(feature = "mpi"))]
#[test]
fn a_random_field_study_is_the_same_on_one_and_two_ranks() {
    eprintln!(
        "SKIPPED: gradfem was built without the `mpi` feature; the MPI test runs with \
         `cargo test --release -p gradfem --features mpi --test uq_mpi` (scripts/test.sh does)"
    );
}

/// `mpirun -n R gradfem identify` on the pad's two specimens (compression and shear, one per
/// rank on 2 ranks): identify.json holds the same bytes as one process's but for the wall
/// times (the fit's and the Laplace posterior's products'), and fit.png is the same.
#[cfg(feature = "mpi")]
#[test]
fn identification_of_the_pad_is_the_same_on_one_two_and_four_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/pad_identify.toml");
    let out = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    gradfem(&["--quiet", "identify", file, "-o", &out("plain")]);
    mpirun(1, &["--quiet", "identify", file, "-o", &out("rank1")]);
    mpirun(2, &["--quiet", "identify", file, "-o", &out("rank2")]);
    // More ranks than specimens: two ranks hold none and follow the same path.
    mpirun(4, &["--quiet", "identify", file, "-o", &out("rank4")]);
    let without_time = |d: &str| {
        let mut text = std::fs::read_to_string(dir.path().join(d).join("identify.json")).unwrap();
        for key in ["\"time_s\"", "\"seconds\""] {
            let at = text.find(key).unwrap_or_else(|| panic!("identify.json has {key}"));
            let end = at + text[at..].find([',', '\n', '}']).unwrap();
            text = format!("{}{}", &text[..at], &text[end..]);
        }
        text
    };
    let plain = without_time("plain");
    assert!(plain.contains("\"converged\": true"), "{plain}");
    // One log per rank: on 2 ranks rank 1 solved experiment 1 (shear) and never experiment 0.
    let log1 = std::fs::read_to_string(dir.path().join("rank2/logs/rank-1-of-2.log")).unwrap();
    assert!(log1.contains("experiment 1: ok") && !log1.contains("experiment 0:"), "{log1}");
    for other in ["rank1", "rank2", "rank4"] {
        assert_eq!(plain, without_time(other), "{other}");
        let png = |d: &str| std::fs::read(dir.path().join(d).join("fit.png")).unwrap();
        assert!(png("plain") == png(other), "{other}: fit.png differs");
    }
}

#[cfg(not(feature = "mpi"))]
#[test]
fn identification_of_the_pad_is_the_same_on_one_two_and_four_ranks() {
    eprintln!(
        "SKIPPED: gradfem was built without the `mpi` feature; the MPI test runs with \
         `cargo test --release -p gradfem --features mpi --test uq_mpi` (scripts/test.sh does)"
    );
}

#[cfg(not(feature = "mpi"))]
#[test]
fn one_two_and_four_ranks_give_the_bytes_of_one_process_and_of_shards() {
    eprintln!(
        "SKIPPED: gradfem was built without the `mpi` feature; the MPI test runs with \
         `cargo test --release -p gradfem --features mpi --test uq_mpi` (scripts/test.sh does)"
    );
}
