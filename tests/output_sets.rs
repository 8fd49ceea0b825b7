//! The outputs of one run are one set: `results.h5`, `results.xdmf` and `gradients.json` of a
//! run replace the previous run's as a whole (gradfem_io::output_set). A run killed while it
//! writes (SIGXFSZ, raised by the kernel when a file passes the `ulimit -f` size limit), or
//! whose write fails (the same limit with the signal ignored: the write returns EFBIG), leaves
//! the previous set whole and readable; the next run removes what the killed one left.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gradfem_io::h5::read_results;
use gradfem_io::output_set::Manifest;

/// A heated block meshed with `divisions` (so two runs differ in their mesh) and conductivity
/// `k`, with a registered parameter (so `gradient` writes per-parameter gradients).
fn problem(divisions: &str, k: f64) -> String {
    format!(
        r#"[mesh]
box = {{ lengths = [0.01, 0.01, 0.002], divisions = {divisions}, cell = "tet4" }}

[[thermal.material]]
group = "domain"
k = {k:?}
source = 1e6

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0

[[objective]]
kind = "average"
group = "domain"

[parameters]
register = ["thermal.k.domain"]
"#
    )
}

/// Run gradfem through `sh -c` with the shell prefix `prefix` (e.g. a `ulimit`).
fn gradfem_sh(dir: &Path, prefix: &str, args: &str) -> Output {
    let script = format!("{prefix} exec '{}' {args}", env!("CARGO_BIN_EXE_gradfem"));
    Command::new("sh").arg("-c").arg(script).current_dir(dir).env("NO_COLOR", "1").output().unwrap()
}

fn gradient(dir: &Path, file: &str) -> Output {
    let out = gradfem_sh(dir, "", &format!("--quiet gradient {file} -o out"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out
}

/// The set in `dir`: its manifest must match every file, and the XDMF's datasets must be those
/// of the HDF5 file beside it (read back whole). Returns the bytes of the three files.
fn whole_set(dir: &Path) -> Vec<Vec<u8>> {
    let m = Manifest::read(dir).expect("a manifest");
    assert!(
        m.mismatches(dir).is_empty(),
        "files differ from the manifest: {:?}",
        m.mismatches(dir)
    );
    let data = read_results(&dir.join("results.h5")).expect("results.h5 reads");
    let xdmf = std::fs::read_to_string(dir.join("results.xdmf")).unwrap();
    // The XDMF gives the node count of the mesh in the HDF5 file.
    let nodes = format!("{} 3", data.mesh.n_nodes());
    assert!(xdmf.contains(&nodes), "the XDMF does not describe the HDF5 mesh ({nodes})");
    ["results.h5", "results.xdmf", "gradients.json"]
        .iter()
        .map(|n| std::fs::read(dir.join(n)).unwrap())
        .collect()
}

/// Hidden leftovers of writers beside the output directory.
fn leftovers(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(".out."))
        .collect()
}

#[cfg(unix)]
#[test]
fn a_run_killed_or_failing_while_it_writes_leaves_the_previous_set_whole() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.toml"), problem("[2, 2, 1]", 150.0)).unwrap();
    std::fs::write(dir.path().join("b.toml"), problem("[6, 6, 2]", 300.0)).unwrap();
    gradient(dir.path(), "a.toml");
    let out = dir.path().join("out");
    let before = whole_set(&out);
    let size = before[0].len() as u64;
    // A limit of half the old results.h5 in 512-byte blocks: the new, larger file passes it.
    let blocks = size / 2 / 512;
    assert!(blocks >= 1, "results.h5 is too small for the test: {size} bytes");

    // Killed: SIGXFSZ's default action ends the process in the middle of writing the set.
    let killed = gradfem_sh(dir.path(), &format!("ulimit -f {blocks};"), "gradient b.toml -o out");
    assert_eq!(
        killed.status.signal(),
        Some(25),
        "expected SIGXFSZ; status {:?}, stderr {}",
        killed.status,
        String::from_utf8_lossy(&killed.stderr)
    );
    assert_eq!(whole_set(&out), before, "the killed run changed the previous set");
    assert_eq!(leftovers(dir.path()).len(), 1, "the killed run's staging directory is left");

    // Failing: with the signal ignored the write returns EFBIG; the run says so and exits 2.
    let failed = gradfem_sh(
        dir.path(),
        &format!("trap '' XFSZ; ulimit -f {blocks};"),
        "gradient b.toml -o out",
    );
    let err = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(2), "{err}");
    assert!(err.contains("results.h5"), "the error names the file: {err}");
    assert_eq!(whole_set(&out), before, "the failed run changed the previous set");
    assert!(
        leftovers(dir.path()).is_empty(),
        "the killed run's staging is removed: {:?}",
        leftovers(dir.path())
    );

    // The next run replaces the set whole.
    gradient(dir.path(), "b.toml");
    let after = whole_set(&out);
    assert_ne!(after[0], before[0]);
    assert!(leftovers(dir.path()).is_empty());
}

#[test]
fn a_run_after_a_gradient_leaves_no_gradients_of_the_earlier_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.toml"), problem("[2, 2, 1]", 150.0)).unwrap();
    gradient(dir.path(), "a.toml");
    // A file of the user's own in the output directory stays.
    std::fs::write(dir.path().join("out/notes.txt"), "mine").unwrap();
    assert!(dir.path().join("out/gradients.json").is_file());
    let run = gradfem_sh(dir.path(), "", "--quiet run a.toml -o out");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let out = dir.path().join("out");
    assert!(!out.join("gradients.json").exists(), "gradients.json of the gradient run is gone");
    assert_eq!(std::fs::read_to_string(out.join("notes.txt")).unwrap(), "mine");
    let m = Manifest::read(&out).unwrap();
    let names: Vec<&str> = m.files.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["results.h5", "results.xdmf"]);
    assert!(m.mismatches(&out).is_empty());
}

#[test]
fn the_current_directory_is_refused_as_an_output_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.toml"), problem("[2, 2, 1]", 150.0)).unwrap();
    let out = gradfem_sh(dir.path(), "", "--quiet run a.toml -o .");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("current directory"), "{err}");
    assert!(dir.path().join("a.toml").is_file());
}
