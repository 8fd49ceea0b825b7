//! The catalogue of bad problem files, `tests/bad_inputs/NN_name.toml`: one mistake each
//! (said in the file's first comment line), run by the CLI from that directory. Every file
//! must be refused with exit code 2 — no panic, no abort, no hang — and the exact message on
//! standard error is a snapshot (`tests/bad_inputs/snapshots/`, checked with `insta`).
//!
//! A second comment line `# command: gradient` runs another command than `run`. CSV and mesh
//! files the cases read lie in `tests/bad_inputs/data/`.
//!
//! After changing a message on purpose, review the new snapshots with
//! `INSTA_UPDATE=always cargo test --release --test bad_input_catalogue` and `git diff`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn catalogue() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/bad_inputs")
}

/// The case files, in order.
fn cases() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(catalogue())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

/// The command a case runs: `# command: X` on its second line, else `run`.
fn command_of(text: &str) -> String {
    text.lines()
        .take(3)
        .find_map(|l| l.strip_prefix("# command:"))
        .map_or_else(|| "run".to_string(), |c| c.trim().to_string())
}

/// Longer than any case needs by far (each is a small problem refused early or a solve of a
/// few cells); a case still running then counts as a hang.
const HANG: Duration = Duration::from_secs(120);

/// Run one case; returns the exit code and standard error.
fn run_case(file: &Path, out: &Path) -> (Option<i32>, String) {
    let text = std::fs::read_to_string(file).unwrap();
    let command = command_of(&text);
    let name = file.file_name().unwrap().to_str().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gradfem"));
    cmd.current_dir(catalogue())
        .args(["--quiet", &command, name])
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if matches!(command.as_str(), "run" | "gradient" | "optimize") {
        cmd.arg("-o").arg(out);
    }
    let mut child = cmd.spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > HANG {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name}: still running after {HANG:?}: a hang");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), reader.join().unwrap())
}

/// The message with the memory this machine has available (in the refusal of a box too
/// large) replaced by `<available>`.
fn machine_independent(text: &str) -> String {
    const BEFORE: &str = "more than the ";
    const AFTER: &str = " GB this machine has available";
    match (text.find(BEFORE), text.find(AFTER)) {
        (Some(a), Some(b)) if a + BEFORE.len() <= b => {
            format!("{}<available>{}", &text[..a + BEFORE.len()], &text[b..])
        }
        _ => text.to_string(),
    }
}

#[test]
fn every_bad_problem_file_is_refused_with_its_message() {
    let files = cases();
    assert!(files.len() >= 60, "the catalogue has {} cases", files.len());
    let out = tempfile::tempdir().unwrap();
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(catalogue().join("snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    let _guard = settings.bind_to_scope();
    for file in &files {
        let name = file.file_stem().unwrap().to_str().unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        assert!(text.starts_with("# "), "{name}: the first line says what is wrong");
        let (code, stderr) = run_case(file, &out.path().join(name));
        assert_eq!(code, Some(2), "{name}: exit code {code:?}, stderr:\n{stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("memory allocation"),
            "{name}: {stderr}"
        );
        let file_name = format!("{name}.toml");
        assert!(stderr.contains(&file_name), "{name}: the file is not named:\n{stderr}");
        let shown = machine_independent(&stderr.replace(out.path().to_str().unwrap(), "<out>"));
        insta::assert_snapshot!(name, shown);
    }
}
