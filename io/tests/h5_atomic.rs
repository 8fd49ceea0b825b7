//! Atomic writes: success replaces the target, failure (error or panic) leaves it untouched and
//! leaves no temporary behind.

use std::io;
use std::path::Path;

use gradfem_io::atomic::{write_atomic, write_bytes_atomic};

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn success_creates_and_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("out.txt");
    write_bytes_atomic(&target, b"first").unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"first");
    write_atomic(&target, |w| {
        w.write_all(b"second, ")?;
        w.write_all(b"longer")
    })
    .unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"second, longer");
    assert_eq!(entries(dir.path()), ["out.txt"]);
}

#[test]
fn failing_writer_leaves_target_untouched_and_no_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("out.txt");
    write_bytes_atomic(&target, b"precious").unwrap();
    let err = write_atomic(&target, |w| {
        w.write_all(&vec![b'x'; 3 << 20])?; // past the buffer, so bytes reached the temporary
        Err(io::Error::other("simulated failure"))
    })
    .unwrap_err();
    assert_eq!(err.to_string(), "simulated failure");
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert_eq!(entries(dir.path()), ["out.txt"]);
}

#[test]
fn panicking_writer_leaves_no_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("out.txt");
    write_bytes_atomic(&target, b"precious").unwrap();
    let r = std::panic::catch_unwind(|| {
        let _ = write_atomic(&target, |w| {
            w.write_all(b"partial")?;
            panic!("writer panicked");
        });
    });
    assert!(r.is_err());
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert_eq!(entries(dir.path()), ["out.txt"]);
}

#[test]
fn missing_directory_is_an_error_without_side_effects() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("no/such/dir/out.txt");
    let err = write_bytes_atomic(&target, b"x").unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
    assert!(entries(dir.path()).is_empty());
}

#[test]
fn failed_results_write_keeps_the_old_pair() {
    use gradfem_io::h5::{CellSelection, Results, read_results};
    use gradfem_mesh::cell::CellType;
    use gradfem_mesh::mesh::{CellBlock, Mesh};

    let dir = tempfile::tempdir().unwrap();
    let mut blk = CellBlock::new(CellType::Tri3);
    blk.push(&[0, 1, 2], 1);
    let mesh = Mesh {
        coords: vec![[0., 0., 0.], [1., 0., 0.], [0., 1., 0.]],
        node_tags: vec![1, 2, 3],
        blocks: vec![blk],
        groups: vec![],
    };
    let path = dir.path().join("r.h5");
    Results::new(&mesh, CellSelection::All).write(&path).unwrap();
    let before = std::fs::read(&path).unwrap();
    // Make the .xdmf target a directory: the .h5 is replaced, the .xdmf rename fails, and
    // no temporary stays behind.
    std::fs::remove_file(dir.path().join("r.xdmf")).unwrap();
    std::fs::create_dir(dir.path().join("r.xdmf")).unwrap();
    std::fs::write(dir.path().join("r.xdmf/keep"), b"").unwrap();
    let err = Results::new(&mesh, CellSelection::All).write(&path).unwrap_err();
    assert!(err.to_string().contains("r.xdmf"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "deterministic bytes");
    assert!(read_results(&path).is_ok());
    assert_eq!(entries(dir.path()), ["r.h5", "r.xdmf"]);
}
