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
//! permissions of a replaced target are not carried over.

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
