//! The allocation path's half of trace mode: each thread appends its events, as raw words, to a
//! buffer of its own, and hands the buffer to the writer thread when it is full, when the thread
//! ends, and when the trace closes.
//!
//! Appending is a few plain stores into the thread's buffer and one store of its length: no lock,
//! no allocation, no system call. A buffer is handed over by a store of its state; the writer
//! finds full buffers by looking at every buffer's state ([`BUFFERS`], a fixed array of
//! [`MAX_BUFFERS`] slots) and gives them back emptied. A thread whose buffer is full takes an
//! empty one: the writer is never waited for, since it may itself wait for what the allocating
//! thread holds (the loader's lock, in `dlopen`). Buffers never come from an allocator: a slot's
//! words are mapped (`mmap`, a system call without a lock) the first time a thread claims it, and
//! kept for reuse. Past [`MAX_BUFFERS`] (the writer far behind a slow destination) events are
//! dropped and counted; the thread keeps its number, and its next buffer follows its last one in
//! the writer's order.
//!
//! A buffer a thread still fills is also written in part, now and then (the writer's timer): the
//! events up to its length so far, read as the close reads it; the writer notes how far it wrote
//! (`sent`, which only it touches) and writes the rest when the buffer is handed over. So the
//! events of a program gone idle reach the destination within about a second.
//!
//! A thread's end-of-thread flush is a thread-local destructor, whose registration allocates
//! (glibc's `__cxa_thread_atexit_impl` calls `calloc`). It is registered at the thread's first
//! event that is not a free: an allocation, a reallocation or a marker, made inside the allocator
//! anyway. Never at a free: a free may be made by a signal handler on a thread of C code that only
//! uses the C library's allocator, interrupted inside `malloc` with its arena's lock held, where
//! any allocation would wait for that lock forever. Until it registers, a thread appends through
//! the slow path into a buffer marked as having no flush; the writer hands such a buffer over
//! itself once the thread has ended (a signal 0 to its id finds no thread), as the flush would
//! have, so that a thread that only ever frees has its events written while the program runs.
//!
//! Events made after a thread's end-of-thread flush (destructors of other thread-locals that free
//! memory) go to one shared buffer, thread 0, behind a lock: rare, and the thread is ending.
//!
//! An event's words: `ticks << 3 | kind`, then by kind
//! - `ALLOC`: address, size, stack id (with the block's chunk flags from bit
//!   [`CHUNK_FLAGS_SHIFT`] on: 0 unknown, else 1 | glibc's `IS_MMAPPED` 2 | `NON_MAIN_ARENA` 4);
//! - `FREE`: address;
//! - `REALLOC`: the new address, size, stack id (with flags, as `ALLOC`'s), the old address, the
//!   ticks of the new block;
//! - `MARK`: the label's id;
//! - `MMAP`: address, length, stack id, `prot << 32 | flags` (the preloaded library's mappings);
//! - `MUNMAP`: address, length.

#![forbid(unsafe_code)]

use crate::guard::Guard;
use crate::native;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

/// Words per buffer (512 KiB): a buffer becomes one chunk, and larger chunks compress better;
/// every thread that traces holds one.
pub(crate) const WORDS: usize = 1 << 16;

/// Most buffers in existence: 512 MiB of events waiting for the writer, or that many threads.
const MAX_BUFFERS: usize = 1024;

/// Event kinds, in the low 3 bits of an event's first word.
pub(crate) const ALLOC: u64 = 1;
/// See [`ALLOC`].
pub(crate) const FREE: u64 = 2;
/// See [`ALLOC`].
pub(crate) const REALLOC: u64 = 3;
/// See [`ALLOC`].
pub(crate) const MARK: u64 = 4;
/// See [`ALLOC`].
pub(crate) const MMAP: u64 = 5;
/// See [`ALLOC`].
pub(crate) const MUNMAP: u64 = 6;

/// Where an allocation's chunk flags start in its stack word (a stack id is 32 bits).
pub(crate) const CHUNK_FLAGS_SHIFT: u32 = 32;

/// Nobody uses the buffer (also a slot whose words are not mapped yet).
const EMPTY: u8 = 0;
/// A thread appends to it.
const OWNED: u8 = 1;
/// Handed to the writer.
const FULL: u8 = 2;

/// One buffer of events: a slot of [`BUFFERS`].
#[derive(Debug)]
pub(crate) struct Buffer {
    /// The events' words, mapped by the first thread that claims the slot; only `..len` are
    /// meaningful.
    words: OnceLock<&'static [AtomicU64]>,
    /// Words written: stored (release) after each event, so a reader that loads it (acquire)
    /// reads whole events.
    len: AtomicUsize,
    /// [`EMPTY`], [`OWNED`] or [`FULL`].
    state: AtomicU8,
    /// The trace's number of the thread whose events it holds (0: ended threads).
    thread: AtomicU32,
    /// The thread's operating-system id.
    tid: AtomicU64,
    /// The buffer's place among the thread's buffers: the writer writes them in this order.
    seq: AtomicU64,
    /// Its owner has no end-of-thread flush: the writer hands it over once the owner has ended.
    /// Stored (release) by the owner after the fields above, cleared by the owner when it
    /// registers its flush and by [`Buffer::recycle`].
    unflushed: AtomicBool,
    /// Words the writer wrote already, of a buffer written in part while its owner filled it:
    /// only the writer touches it.
    sent: AtomicUsize,
}

impl Buffer {
    const fn new() -> Buffer {
        Buffer {
            words: OnceLock::new(),
            len: AtomicUsize::new(0),
            state: AtomicU8::new(EMPTY),
            thread: AtomicU32::new(0),
            tid: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            unflushed: AtomicBool::new(false),
            sent: AtomicUsize::new(0),
        }
    }

    /// The thread number, OS id and place of the buffer.
    pub(crate) fn owner(&self) -> (u32, u64, u64) {
        (
            self.thread.load(Ordering::Relaxed),
            self.tid.load(Ordering::Relaxed),
            self.seq.load(Ordering::Relaxed),
        )
    }

    /// Calls `f` with the words of each event written so far and not written out yet (past
    /// [`Buffer::sent`]); returns where they end.
    pub(crate) fn read(&self, mut f: impl FnMut(&[u64])) -> usize {
        let Some(words) = self.words.get() else {
            return 0;
        };
        let len = self.len.load(Ordering::Acquire).min(words.len());
        let sent = self.sent.load(Ordering::Relaxed).min(len);
        let mut words = words[sent..len].iter();
        let mut event = [0u64; 6];
        while let Some(first) = words.next() {
            let first = first.load(Ordering::Relaxed);
            let n = match first & 7 {
                ALLOC => 4,
                FREE | MARK => 2,
                REALLOC => 6,
                MMAP => 5,
                MUNMAP => 3,
                _ => return len,
            };
            event[0] = first;
            for slot in &mut event[1..n] {
                match words.next() {
                    Some(word) => *slot = word.load(Ordering::Relaxed),
                    None => return len,
                }
            }
            f(&event[..n]);
        }
        len
    }

    /// Notes that the writer wrote the buffer's words up to `end` (what [`Buffer::read`]
    /// returned): a buffer still filled is read on from there.
    pub(crate) fn sent(&self, end: usize) {
        self.sent.store(end, Ordering::Relaxed);
    }

    /// Whether the owner wrote events the writer has not written out yet. Loads the length
    /// (acquire): the owner's fields stored before those events are then seen.
    fn has_unsent(&self) -> bool {
        self.len.load(Ordering::Acquire) > self.sent.load(Ordering::Relaxed)
    }

    /// Gives a buffer the writer wrote back for reuse.
    pub(crate) fn recycle(&self) {
        self.len.store(0, Ordering::Relaxed);
        self.sent.store(0, Ordering::Relaxed);
        self.unflushed.store(false, Ordering::Relaxed);
        self.state.store(EMPTY, Ordering::Release);
    }
}

/// A buffer a thread owns, with its words at hand: what the thread appends through.
#[derive(Clone, Copy, Debug)]
struct Held {
    buffer: &'static Buffer,
    words: &'static [AtomicU64],
}

impl Held {
    /// Appends `event` when it fits; returns whether it did. Only the owner calls it.
    #[inline(always)]
    fn push(self, event: &[u64]) -> bool {
        let len = self.buffer.len.load(Ordering::Relaxed);
        let Some(slots) = self.words.get(len..len + event.len()) else {
            return false;
        };
        for (slot, &word) in slots.iter().zip(event) {
            slot.store(word, Ordering::Relaxed);
        }
        self.buffer.len.store(len + event.len(), Ordering::Release);
        true
    }

    /// Hands the buffer to the writer.
    fn hand_over(self) {
        self.buffer.state.store(FULL, Ordering::Release);
    }
}

/// Every buffer: slots claimed in order, their words mapped at first use, reused, never freed.
/// Const-initialized, so it takes no memory but the program's zeroed data until used.
static BUFFERS: [Buffer; MAX_BUFFERS] = [const { Buffer::new() }; MAX_BUFFERS];

/// One past the highest slot ever claimed: the writer looks no further.
static IN_USE: AtomicUsize = AtomicUsize::new(0);

/// The slots claimed at least once.
fn in_use() -> &'static [Buffer] {
    &BUFFERS[..IN_USE.load(Ordering::Acquire).min(MAX_BUFFERS)]
}

/// Events that could not be recorded.
pub(crate) static LOST: AtomicU64 = AtomicU64::new(0);

/// Thread numbers handed out so far; 0 is the ended threads'.
static THREADS: AtomicU32 = AtomicU32::new(0);

/// The buffers handed to the writer and, when `closing`, those threads append to now: each with
/// whether it is full (the writer recycles those). With `ended_threads`, the buffers of threads
/// without an end-of-thread flush that have ended are handed over first, as their flush would
/// have (one system call per such buffer: the writer asks for it now and then, not every round).
/// With `partly`, the buffers threads append to now that hold events not written out yet, to be
/// written in part (the writer's timer).
pub(crate) fn ready(
    closing: bool,
    ended_threads: bool,
    partly: bool,
) -> Vec<(&'static Buffer, bool)> {
    let mut ready: Vec<(&'static Buffer, bool)> = in_use()
        .iter()
        .filter_map(|b| match b.state.load(Ordering::Acquire) {
            FULL => Some((b, true)),
            OWNED if ended_threads && owner_ended(b) => Some((b, true)),
            OWNED if closing || (partly && b.has_unsent()) => Some((b, false)),
            _ => None,
        })
        .collect();
    ready.sort_by_key(|(b, _)| {
        let (thread, _, seq) = b.owner();
        (thread, seq)
    });
    ready
}

/// Whether `buffer`, owned, belongs to a thread without an end-of-thread flush that has ended;
/// then it is handed over (full) here.
fn owner_ended(buffer: &Buffer) -> bool {
    // `unflushed` set means the fields before it are the present owner's.
    buffer.unflushed.load(Ordering::Acquire)
        && native::thread_ended(buffer.tid.load(Ordering::Relaxed))
        && buffer
            .state
            .compare_exchange(OWNED, FULL, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
}

/// The clock reading (ticks) of the oldest event not written yet, of every buffer handed to the
/// writer or being filled; `None` when every event stored is written.
pub(crate) fn oldest_unsent() -> Option<u64> {
    in_use()
        .iter()
        .filter(|b| b.state.load(Ordering::Acquire) != EMPTY && b.has_unsent())
        .filter_map(|b| {
            let words = b.words.get()?;
            let first = words
                .get(b.sent.load(Ordering::Relaxed))?
                .load(Ordering::Relaxed);
            Some(first >> 3)
        })
        .min()
}

/// Events in the buffers not written yet: handed to the writer, or being filled.
pub(crate) fn unwritten() -> u64 {
    in_use()
        .iter()
        .filter(|b| b.state.load(Ordering::Acquire) != EMPTY)
        .map(|b| {
            let mut events = 0;
            let _ = b.read(|_| events += 1);
            events
        })
        .sum()
}

/// This thread's part.
struct Local {
    /// The buffer it appends to on the fast path, once its end-of-thread flush is registered.
    buffer: Cell<Option<Held>>,
    /// The buffer it appends to, through the slow path, before then (only frees so far).
    unflushed: Cell<Option<Held>>,
    /// Its end-of-thread flush is registered.
    registered: Cell<bool>,
    /// Set while it appends: an event from a signal handler that interrupted it is dropped.
    busy: Cell<bool>,
    /// Its number in the trace; 0 before its first event.
    thread: Cell<u32>,
    /// Its operating-system id, read at its first event.
    tid: Cell<u64>,
    /// Buffers it took so far.
    seq: Cell<u64>,
    /// Its end-of-thread flush ran: further events go to the shared buffer.
    ended: Cell<bool>,
    /// A reallocation under way: the old block's address and the ticks of its free (0, 0: none).
    pending: Cell<(u64, u64)>,
}

thread_local! {
    /// Without a destructor, so reading it never allocates and works while the thread ends.
    static LOCAL: Local = const {
        Local {
            buffer: Cell::new(None),
            unflushed: Cell::new(None),
            registered: Cell::new(false),
            busy: Cell::new(false),
            thread: Cell::new(0),
            tid: Cell::new(0),
            seq: Cell::new(0),
            ended: Cell::new(false),
            pending: Cell::new((0, 0)),
        }
    };
    /// Hands the thread's buffer over when it ends; touched once, at its first event that is not
    /// a free, inside the reentrancy guard (registering the destructor allocates).
    static FLUSH: FlushOnExit = const { FlushOnExit };
}

/// See [`FLUSH`].
struct FlushOnExit;

impl Drop for FlushOnExit {
    fn drop(&mut self) {
        let _ = LOCAL.try_with(|local| {
            local.ended.set(true);
            if let Some(buffer) = local.buffer.take() {
                buffer.hand_over();
            }
            if let Some(buffer) = local.unflushed.take() {
                buffer.hand_over();
            }
        });
    }
}

/// Appends one event to this thread's buffer.
#[inline(always)]
pub(crate) fn append(event: &[u64]) {
    let _ = LOCAL.try_with(|local| {
        if local.busy.replace(true) {
            LOST.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let done = local.buffer.get().is_some_and(|b| b.push(event));
        if !done {
            append_slow(local, event);
        }
        local.busy.set(false);
    });
}

/// Notes the free half of a reallocation, to be joined with its allocation half
/// ([`take_pending`]).
#[inline]
pub(crate) fn set_pending(address: u64, ticks: u64) {
    let _ = LOCAL.try_with(|local| local.pending.set((address, ticks)));
}

/// Takes the free half of a reallocation under way, if any.
#[inline(always)]
pub(crate) fn take_pending() -> Option<(u64, u64)> {
    LOCAL
        .try_with(|local| {
            let pending = local.pending.get();
            (pending.0 != 0).then(|| {
                local.pending.set((0, 0));
                pending
            })
        })
        .ok()
        .flatten()
}

/// The thread's buffer is full, or it has none, or it has not registered its end-of-thread flush
/// yet. Nothing here allocates but that registration, made only at an event that is not a free.
#[cold]
#[inline(never)]
fn append_slow(local: &Local, event: &[u64]) {
    if local.ended.get() {
        return append_shared(event);
    }
    let _guard = Guard::enter();
    if !local.registered.get() && event[0] & 7 != FREE {
        // Registering the flush allocates: never at a free ([module docs](self)).
        if FLUSH.try_with(|_| {}).is_err() {
            local.ended.set(true);
            if let Some(buffer) = local.unflushed.take() {
                buffer.hand_over();
            }
            return append_shared(event);
        }
        local.registered.set(true);
        if let Some(buffer) = local.unflushed.take() {
            buffer.buffer.unflushed.store(false, Ordering::Relaxed);
            local.buffer.set(Some(buffer));
        }
    }
    let registered = local.registered.get();
    let cell = if registered {
        &local.buffer
    } else {
        &local.unflushed
    };
    if let Some(buffer) = cell.get()
        && buffer.push(event)
    {
        return;
    }
    if let Some(full) = cell.take() {
        full.hand_over();
    }
    // The thread's number is given at its first event, once: a thread left without a buffer
    // (none could be had, its event dropped) keeps its number, and its next buffer follows its
    // last one.
    if local.thread.get() == 0 {
        local.thread.set(next_thread());
        local.tid.set(native::thread_id());
    }
    let seq = local.seq.get();
    match take_buffer(local.thread.get(), local.tid.get(), seq, !registered) {
        Some(buffer) => {
            // Counted only once taken: the writer waits for each place in turn.
            local.seq.set(seq + 1);
            buffer.push(event);
            cell.set(Some(buffer));
        }
        None => {
            LOST.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A new thread number: never 0 (the ended threads'), even past `u32::MAX` threads, when the
/// numbers go round.
fn next_thread() -> u32 {
    loop {
        let number = THREADS.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        if number != 0 {
            return number;
        }
    }
}

/// An empty buffer owned by thread `thread` (operating-system id `tid`) as its `seq`th, marked
/// `unflushed` when the thread has no end-of-thread flush. Allocates nothing: a slot never used
/// before has its words mapped.
fn take_buffer(thread: u32, tid: u64, seq: u64, unflushed: bool) -> Option<Held> {
    let (index, buffer) = BUFFERS.iter().enumerate().find(|(_, b)| {
        b.state.load(Ordering::Relaxed) == EMPTY
            && b.state
                .compare_exchange(EMPTY, OWNED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    })?;
    IN_USE.fetch_max(index + 1, Ordering::Release);
    // Only the slot's owner sets its words: the lock is never waited for.
    let words = match buffer.words.get() {
        Some(words) => *words,
        None => match native::map_words(WORDS) {
            Some(words) => *buffer.words.get_or_init(|| words),
            None => {
                buffer.state.store(EMPTY, Ordering::Release);
                return None;
            }
        },
    };
    buffer.len.store(0, Ordering::Relaxed);
    buffer.thread.store(thread, Ordering::Relaxed);
    buffer.tid.store(tid, Ordering::Relaxed);
    buffer.seq.store(seq, Ordering::Relaxed);
    buffer.unflushed.store(unflushed, Ordering::Release);
    Some(Held { buffer, words })
}

/// The shared buffer of ended threads, and how many it has had.
static SHARED: Mutex<(Option<Held>, u64)> = Mutex::new((None, 0));

/// Appends to the shared buffer of ended threads.
#[cold]
fn append_shared(event: &[u64]) {
    let _guard = Guard::enter();
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if shared.0.is_some_and(|b| b.push(event)) {
        return;
    }
    if let Some(full) = shared.0.take() {
        full.hand_over();
    }
    let seq = shared.1;
    match take_buffer(0, 0, seq, false) {
        Some(buffer) => {
            shared.1 += 1;
            buffer.push(event);
            shared.0 = Some(buffer);
        }
        None => {
            LOST.fetch_add(1, Ordering::Relaxed);
        }
    }
}
