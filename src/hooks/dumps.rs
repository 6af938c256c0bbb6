//! The dumps and who writes them: the turn at writing the `MEMPROF_OUTPUT` files ([`Turn`]),
//! which the dump thread and the at-exit writer take (`triggers`), the dump itself ([`dump`]),
//! and its numbering.
//!
//! Numbered dumps: each time memprof writes the `MEMPROF_OUTPUT` files on its own (on growth,
//! near the memory limit, on the dump signal, at exit), `%n` in their names is the dump's number,
//! from 1; with `MEMPROF_DUMP_KEEP`, the files of the oldest numbered dumps are removed, so that
//! that many stay. Only a dump whose files were all written counts: one that failed, even in part
//! (a full disk, a file that cannot be created), removes no earlier dump and is never counted as
//! kept (what it did write stays, named in the messages). The caller of [`write`] holds the turn,
//! so dumps never interleave.
//!
//! Below both of the modules that decide on a dump, the signal and exit triggers (`triggers`) and
//! the dumps on growth and near the limit (`watch`): it calls neither.

use crate::config::warn;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Whether the dump thread or the at-exit writer is writing. Not a `Mutex`: a forked child must be
/// able to reset it, since the thread that held it in the parent does not exist in the child.
static WRITING: AtomicBool = AtomicBool::new(false);

/// A turn at writing the dump or exit files, given back when dropped.
pub(super) struct Turn;

impl Turn {
    /// Waits for the turn; `None` when `deadline` passes first.
    pub(super) fn take(deadline: Option<Instant>) -> Option<Turn> {
        while WRITING
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            if deadline.is_some_and(|d| Instant::now() > d) {
                return None;
            }
            // Dumps are rare and slow: polling costs nothing that matters and, unlike a
            // condition variable, leaves no state that a forked child inherits half-held.
            std::thread::sleep(Duration::from_millis(2));
        }
        Some(Turn)
    }

    /// In a forked child: nobody holds the turn, whichever thread of the parent held it.
    pub(super) fn reset_in_child() {
        WRITING.store(false, Ordering::Release);
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        WRITING.store(false, Ordering::Release);
    }
}

/// Writes the dump: the `MEMPROF_OUTPUT` files, or the Markdown report on stderr. On the dump
/// thread, once it has the turn.
pub(super) fn dump() {
    let _ = std::panic::catch_unwind(|| {
        let Some(_turn) = Turn::take(None) else {
            return;
        };
        let config = crate::config::get();
        match &config.output {
            Some(spec) => {
                write(spec, config.dump_keep);
            }
            None => {
                if let Err(error) = crate::native::without_sigpipe(|| {
                    crate::report::pretty_log_allocations(&mut std::io::stderr().lock())
                }) {
                    warn(format_args!("writing the dump failed: {error}"));
                }
            }
        }
    });
}

/// The number of the last dump written; 0 before the first.
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// The files of a numbered dump, to remove when it is one too many.
struct Written {
    /// The process that wrote them: a forked child never removes its parent's.
    pid: u32,
    paths: Vec<PathBuf>,
}

/// The numbered dumps on disk, oldest first.
static KEPT: Mutex<VecDeque<Written>> = Mutex::new(VecDeque::new());

/// Replaces `%n` in `spec` by `number`, leaving `%%` (and the other placeholders) for
/// [`crate::export::expand_path`]; `None` when `spec` has no `%n`.
fn number_spec(spec: &str, number: u64) -> Option<String> {
    let mut out = String::with_capacity(spec.len() + 8);
    let mut numbered = false;
    let mut chars = spec.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => {
                numbered = true;
                out.push_str(&number.to_string());
            }
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    numbered.then_some(out)
}

/// Writes the files of `spec` (the value of `MEMPROF_OUTPUT`) as the next dump, then, when every
/// file was written, removes the oldest numbered dumps beyond `keep` (0: none removed). Returns
/// the dump's number.
pub(super) fn write(spec: &str, keep: u64) -> u64 {
    let number = SEQUENCE.fetch_add(1, Relaxed) + 1;
    let Some(numbered) = number_spec(spec, number) else {
        crate::export::write_outputs(spec);
        return number;
    };
    let (paths, whole) = crate::export::write_listed(&numbered);
    if !whole {
        warn(format_args!(
            "dump {number} was not written whole; no earlier dump removed (MEMPROF_DUMP_KEEP)"
        ));
        return number;
    }
    // Never waits: a forked child may have inherited it held by a thread it does not have; then
    // it removes nothing this time.
    let Ok(mut kept) = KEPT.try_lock() else {
        return number;
    };
    let pid = std::process::id();
    kept.retain(|w| w.pid == pid);
    kept.push_back(Written {
        pid,
        paths: paths.clone(),
    });
    while keep > 0 && kept.len() as u64 > keep {
        let Some(old) = kept.pop_front() else { break };
        for path in old.paths {
            // A name without `%n` (another file of the list) is the newest dump's too.
            if paths.contains(&path) {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => warn(format_args!(
                    "removed {} (MEMPROF_DUMP_KEEP={keep})",
                    path.display()
                )),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => warn(format_args!("cannot remove {}: {e}", path.display())),
            }
        }
    }
    number
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholder_n_is_the_number() {
        assert_eq!(
            number_spec("/d/heap-%n.pb.gz,/d/h-%p-%n.md", 7).as_deref(),
            Some("/d/heap-7.pb.gz,/d/h-%p-7.md")
        );
        assert_eq!(number_spec("/d/100%%n-%e.folded", 3), None);
        assert_eq!(number_spec("/d/heap.pb.gz%", 3), None);
        assert_eq!(number_spec("/d/%%%n", 12).as_deref(), Some("/d/%%12"));
    }
}
