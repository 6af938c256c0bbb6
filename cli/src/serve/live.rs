//! The index of a trace being received (`--listen-trace`), kept up to date as it arrives: the
//! trace's chunk index, the replay's merge and live heap, and the index's pass persist from one
//! update to the next ([`memprof_trace::Follow`]), so an update reads, decodes and counts what
//! arrived since the last one, and a program traced for hours stays live with the index's bounded
//! memory.

use super::cache;
use super::index::IndexBuilder;
use super::state::{LiveFigures, Shared, State};
use memprof_trace::{Follow, Followed, Trace};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the trace is looked at.
const PERIOD: Duration = Duration::from_secs(1);
/// A trace that has not grown for this long has every event its program made so far: its
/// writer sends each thread's partly filled buffer about once a second.
const QUIET: Duration = Duration::from_secs(2);

/// Follows the trace written to `path` until `done` is set and the last of it is indexed,
/// publishing the index in `shared` after each update.
pub fn follow(path: &Path, shared: &Shared, done: &AtomicBool) {
    // The header may not have arrived yet.
    let trace = loop {
        let finished = done.load(Ordering::SeqCst);
        match Trace::open(path) {
            Ok(trace) => break trace,
            Err(e) if finished => {
                say!("memprof: the trace received: {e}");
                return;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let mut follow = Follow::new(&trace);
    let mut builder = IndexBuilder::new(trace.header().sample_interval);
    let mut state = State::new(trace, builder.snapshot(), builder.classes().clone());
    state.live = Some(LiveFigures::default());
    if let Ok(mut current) = shared.write() {
        *current = Some(Arc::new(state));
    }
    let timed = std::env::var_os("MEMPROF_SERVE_LIVE_TIMES").is_some();
    let mut seen_len = 0;
    let mut grew_at = Instant::now();
    let mut caught_up = false;
    loop {
        let finished = done.load(Ordering::SeqCst);
        let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        if len != seen_len {
            seen_len = len;
            grew_at = Instant::now();
            caught_up = false;
        }
        let quiet = grew_at.elapsed() >= QUIET;
        if !caught_up || finished {
            let everything = finished || quiet;
            let result = update(
                shared,
                &mut follow,
                &mut builder,
                everything,
                finished,
                timed,
            );
            match result {
                Ok(followed) => {
                    caught_up = everything && followed.pending == 0;
                    if finished && followed.out_of_order > 0 {
                        rebuild(path, shared, followed.out_of_order);
                    }
                }
                Err(e) => {
                    say!("memprof: the trace received: {e}; its index stops here");
                    return;
                }
            }
        }
        if finished {
            say!("memprof: the trace is complete: {len} bytes");
            keep(path, shared);
            return;
        }
        std::thread::sleep(PERIOD);
    }
}

/// Indexes the complete trace again from its start, when events of it were counted out of
/// order: its figures after the run are exactly those of the trace opened afresh.
fn rebuild(path: &Path, shared: &Shared, out_of_order: u64) {
    say!(
        "memprof: {out_of_order} events of the trace arrived after later ones: indexing it again \
         from its start, for exact figures"
    );
    match Trace::open(path)
        .map_err(crate::Failure::from)
        .and_then(|t| State::build(t, true))
    {
        Ok(state) => {
            if let Ok(mut current) = shared.write() {
                *current = Some(Arc::new(state));
            }
        }
        Err(e) => say!("memprof: {}: {}", path.display(), e.0),
    }
}

/// Keeps the complete trace's index beside it, for the next time it is opened.
fn keep(path: &Path, shared: &Shared) {
    let Ok(key) = cache::key(path) else { return };
    let cache_path = cache::path_of(path);
    with_state(shared, |state| {
        if let Err(e) = cache::store(&cache_path, key, state) {
            say!(
                "memprof: {}: the index is not kept ({e}); the next open indexes the trace again",
                cache_path.display()
            );
        }
    });
}

/// One update: what arrived applied to the index, published in the state served.
fn update(
    shared: &Shared,
    follow: &mut Follow,
    builder: &mut IndexBuilder,
    everything: bool,
    finished: bool,
    timed: bool,
) -> Result<Followed, memprof_trace::TraceError> {
    with_state(shared, |state| {
        let started = Instant::now();
        let followed = follow.update(&mut state.trace, builder, everything)?;
        state.index = builder.snapshot();
        // An event counted out of order leaves the latest time where it was.
        state.index.totals.last_time = follow.accumulated().time;
        state.classes.sync_from(builder.classes());
        if finished && state.trace.has_symbols() {
            // The symbols come last: every stack is resolved again with them.
            state.resolve_all_stacks();
        } else {
            state.resolve_new_stacks();
        }
        // A complete trace whose events came out of order is indexed again from its start next
        // (`rebuild`): until then its figures are not final, and it stays live, those events
        // pending.
        state.live = (!finished || followed.out_of_order > 0).then_some(LiveFigures {
            pending: match finished {
                true => followed.pending.max(followed.out_of_order),
                false => followed.pending,
            },
            out_of_order: followed.out_of_order,
            through: followed.watermark,
        });
        // Answers kept for queries were of the trace as it was.
        state.replays.forget();
        if timed {
            say!(
                "memprof: live update: {} events applied ({} in all, {} pending) from {} chunks \
                 in {:.1} ms",
                followed.applied_now,
                followed.applied,
                followed.pending,
                followed.chunks_now,
                started.elapsed().as_secs_f64() * 1e3
            );
        }
        Ok(followed)
    })
}

/// Runs `f` on the state served, alone: once no request holds it. Requests under way finish
/// with the state as it was; for a second, new ones are answered meanwhile, then they wait for
/// the update.
fn with_state<T>(shared: &Shared, f: impl FnOnce(&mut State) -> T) -> T {
    let started = Instant::now();
    loop {
        let mut current = shared.write().unwrap_or_else(|e| e.into_inner());
        let state = current.as_mut().expect("published before it is updated");
        if let Some(state) = Arc::get_mut(state) {
            return f(state);
        }
        if started.elapsed() >= Duration::from_secs(1) {
            // Hold the lock: no new request takes the state, and those under way end.
            loop {
                std::thread::sleep(Duration::from_millis(5));
                if let Some(state) = Arc::get_mut(current.as_mut().expect("published")) {
                    return f(state);
                }
            }
        }
        drop(current);
        std::thread::sleep(Duration::from_millis(10));
    }
}
