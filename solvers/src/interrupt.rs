//! A request to stop the running computation (Ctrl-C from Python or a caller's own signal
//! handler), checked at safe points: every Newton iteration, every step of a checkpointed
//! sweep, every step in time and every load increment. A computation that sees the request
//! returns [`SolverError::Interrupted`] naming where it stopped; the state it leaves is that of
//! its last completed step, and the caller decides what to keep.
//!
//! The request is process-wide (one flag): it stops whatever runs, in any thread, until it is
//! [`clear`]ed.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::SolverError;

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Ask the running computations to stop at their next safe point.
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Withdraw the request (before the next computation).
pub fn clear() {
    REQUESTED.store(false, Ordering::SeqCst);
}

/// True when a stop was requested.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}

/// `Err(SolverError::Interrupted)` naming `field` and `at` (e.g. "Newton iteration 3") when a
/// stop was requested.
pub fn check(field: &str, at: impl FnOnce() -> String) -> Result<(), SolverError> {
    check_flag(&REQUESTED, field, at)
}

fn check_flag(
    flag: &AtomicBool,
    field: &str,
    at: impl FnOnce() -> String,
) -> Result<(), SolverError> {
    if flag.load(Ordering::Relaxed) {
        return Err(SolverError::Interrupted { field: field.to_string(), at: at() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raised_flag_names_the_field_and_the_point() {
        // A flag of its own: the process-wide one would stop the tests running beside it.
        let flag = AtomicBool::new(false);
        assert!(check_flag(&flag, "thermal", || "x".into()).is_ok());
        flag.store(true, Ordering::SeqCst);
        let e = check_flag(&flag, "thermal", || "Newton iteration 2".into()).unwrap_err();
        assert_eq!(e.to_string(), "thermal: interrupted at Newton iteration 2");
        assert!(!requested(), "the process-wide flag is untouched");
    }
}
