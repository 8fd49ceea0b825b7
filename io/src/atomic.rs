//! Atomic file writes: a reader sees either the old file or the complete new one, never a
//! half-written file, and a failed write leaves the old file untouched.
//!
//! The content goes to a temporary file in the target's own directory (same file system, so the
//! final `rename` is atomic on POSIX and a replace on Windows), named
//! `.<target name>.tmp-<pid>-<counter>` so concurrent writers in one or several processes never
//! share a temporary. The temporary is flushed and `fsync`ed before it is renamed over the
//! target, then the directory is `fsync`ed (best effort) so the rename itself is durable.
//!
//! Written by hand rather than with `tempfile::NamedTempFile::persist` because the crate is only
//! a dev-dependency here and the whole job is twenty lines; the guard below also removes the
//! temporary when the writer panics.
//!
//! The new file gets the default permissions of a newly created file (the process umask); the
//! permissions of a replaced target are not carried over. A temporary left by a killed writer
//! (its process no longer runs) is removed by the next write of the same target.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Counter that makes temporary names unique within one process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Removes the temporary file on drop unless disarmed (covers errors and panics alike).
struct TempGuard {
    path: Option<PathBuf>,
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = fs::remove_file(p);
        }
    }
}

/// The temporary file's path for `target`: `.<name>.tmp-<pid>-<n>` in the same directory.
fn temp_path(target: &Path) -> io::Result<PathBuf> {
    let name = target.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cannot write {}: the path does not name a file", target.display()),
        )
    })?;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp-{}-{n}", std::process::id()));
    Ok(target.with_file_name(tmp_name))
}

/// Write a file atomically: `write` fills a temporary file in the same directory (named
/// `.<name>.tmp-<pid>-<n>`), which is flushed, `fsync`ed and renamed over `path`.
///
/// On any error (from `write`, from the file system) or a panic inside `write`, the temporary
/// is removed and an existing file at `path` is left untouched. The writer handed to `write` is
/// buffered.
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let tmp = temp_path(path)?;
    remove_stale_temporaries(path);
    let file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    let mut guard = TempGuard { path: Some(tmp.clone()) };
    let mut out = BufWriter::with_capacity(1 << 20, file);
    write(&mut out)?;
    out.flush()?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)?;
    guard.path = None;
    sync_parent_dir(path);
    Ok(())
}

/// Remove the temporaries of `target` that a killed writer left behind: files
/// `.<name>.tmp-<pid>-<n>` beside it whose process no longer runs (known where `/proc` lists
/// the processes; elsewhere nothing is removed). Best effort: errors are ignored.
fn remove_stale_temporaries(target: &Path) {
    let (Some(name), Some(dir)) = (target.file_name(), target.parent()) else { return };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let proc_root = Path::new("/proc/self");
    if !proc_root.exists() {
        return;
    }
    let prefix = format!(".{}.tmp-", name.to_string_lossy());
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(rest) = file_name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let alive = Path::new("/proc").join(pid.to_string()).exists();
        if !alive {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Write `bytes` to `path` atomically (see [`write_atomic`]).
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic(path, |w| w.write_all(bytes))
}

/// `fsync` the directory holding `path` so the rename survives a power loss. Best effort: some
/// platforms (Windows) and file systems cannot open or sync a directory, and the data itself
/// is already on disk.
fn sync_parent_dir(path: &Path) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_writers_temporary_is_removed_by_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("results.h5");
        // A pid beyond the kernel's maximum is never alive; ours is.
        let stale = dir.path().join(".results.h5.tmp-4294967295-0");
        let live = dir.path().join(format!(".results.h5.tmp-{}-999", std::process::id()));
        let other = dir.path().join(".other.h5.tmp-4294967295-0");
        for p in [&stale, &live, &other] {
            fs::write(p, b"partial").unwrap();
        }
        write_bytes_atomic(&target, b"new").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"new");
        if Path::new("/proc/self").exists() {
            assert!(!stale.exists(), "the dead writer's temporary is gone");
        }
        assert!(live.exists(), "a running writer's temporary is kept");
        assert!(other.exists(), "another target's temporary is kept");
    }

    #[test]
    fn temp_name_is_hidden_and_in_the_same_directory() {
        let t = temp_path(Path::new("/a/b/out.h5")).unwrap();
        assert_eq!(t.parent(), Some(Path::new("/a/b")));
        let name = t.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with(".out.h5.tmp-"), "{name}");
        let t2 = temp_path(Path::new("/a/b/out.h5")).unwrap();
        assert_ne!(t, t2);
        assert!(temp_path(Path::new("/")).is_err());
    }
}
