//! The allocation path's half of trace mode: each thread appends its events, as raw words, to a
//! buffer of its own, and hands the buffer to the writer thread when it is full, when the thread
//! ends, and when the trace closes.
//!
//! Appending is a few plain stores into the thread's buffer and one store of its length: no lock,
//! no allocation, no system call. A buffer is handed over by a store of its state; the writer
//! finds full buffers by looking at every buffer's state ([`BUFFERS`], an append-only vector)
//! and gives them back emptied. A thread whose buffer is full takes an empty one, or makes a new
//! one inside the reentrancy guard when none is free: the writer is never waited for, since it
//! may itself wait for what the allocating thread holds (the loader's lock, in `dlopen`). Past
//! [`MAX_BUFFERS`] (the writer far behind a slow destination) events are dropped and counted; the
//! thread keeps its number, and its next buffer follows its last one in the writer's order.
//!
//! Events made after a thread's end-of-thread flush (destructors of other thread-locals that free
//! memory) go to one shared buffer, thread 0, behind a lock: rare, and the thread is ending.
//!
//! An event's words: `ticks << 3 | kind`, then by kind
//! - `ALLOC`: address, size, stack id;
//! - `FREE`: address;
//! - `REALLOC`: the new address, size, stack id, the old address, the ticks of the new block;
//! - `MARK`: the label's id;
//! - `MMAP`: address, length, stack id, `prot << 32 | flags` (the preloaded library's mappings);
//! - `MUNMAP`: address, length.

#![forbid(unsafe_code)]

use crate::guard::Guard;
use crate::native;
use std::cell::Cell;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

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

/// Nobody uses the buffer.
const EMPTY: u8 = 0;
/// A thread appends to it.
const OWNED: u8 = 1;
/// Handed to the writer.
const FULL: u8 = 2;

/// One buffer of events.
#[derive(Debug)]
pub(crate) struct Buffer {
    /// The events' words; only `..len` are meaningful.
    words: Box<[AtomicU64]>,
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
}

impl Buffer {
    fn new() -> Option<Buffer> {
        let words: Box<[AtomicU64]> = bytemuck::allocation::try_zeroed_slice_box(WORDS).ok()?;
        Some(Buffer {
            words,
            len: AtomicUsize::new(0),
            state: AtomicU8::new(OWNED),
            thread: AtomicU32::new(0),
            tid: AtomicU64::new(0),
            seq: AtomicU64::new(0),
        })
    }

    /// Appends `event` when it fits; returns whether it did. Only the owner calls it.
    #[inline(always)]
    fn push(&self, event: &[u64]) -> bool {
        let len = self.len.load(Ordering::Relaxed);
        let Some(slots) = self.words.get(len..len + event.len()) else {
            return false;
        };
        for (slot, &word) in slots.iter().zip(event) {
            slot.store(word, Ordering::Relaxed);
        }
        self.len.store(len + event.len(), Ordering::Release);
        true
    }

    /// The thread number, OS id and place of the buffer.
    pub(crate) fn owner(&self) -> (u32, u64, u64) {
        (
            self.thread.load(Ordering::Relaxed),
            self.tid.load(Ordering::Relaxed),
            self.seq.load(Ordering::Relaxed),
        )
    }

    /// Calls `f` with the words of the events written so far.
    pub(crate) fn read(&self, mut f: impl FnMut(&[u64])) {
        let len = self.len.load(Ordering::Acquire).min(WORDS);
        let mut words = self.words[..len].iter();
        let mut event = [0u64; 6];
        while let Some(first) = words.next() {
            let first = first.load(Ordering::Relaxed);
            let n = match first & 7 {
                ALLOC => 4,
                FREE | MARK => 2,
                REALLOC => 6,
                MMAP => 5,
                MUNMAP => 3,
                _ => return,
            };
            event[0] = first;
            for slot in &mut event[1..n] {
                match words.next() {
                    Some(word) => *slot = word.load(Ordering::Relaxed),
                    None => return,
                }
            }
            f(&event[..n]);
        }
    }

    /// Gives a buffer the writer wrote back for reuse.
    pub(crate) fn recycle(&self) {
        self.len.store(0, Ordering::Relaxed);
        self.state.store(EMPTY, Ordering::Release);
    }
}

/// Every buffer ever made; buffers are reused, never freed.
pub(crate) static BUFFERS: boxcar::Vec<Buffer> = boxcar::Vec::new();

/// Events that could not be recorded.
pub(crate) static LOST: AtomicU64 = AtomicU64::new(0);

/// Thread numbers handed out so far; 0 is the ended threads'.
static THREADS: AtomicU32 = AtomicU32::new(0);

/// The buffers handed to the writer and, when `closing`, those threads append to now: each with
/// whether it is full (the writer recycles those).
pub(crate) fn ready(closing: bool) -> Vec<(&'static Buffer, bool)> {
    let mut ready: Vec<(&'static Buffer, bool)> = BUFFERS
        .iter()
        .filter_map(|(_, b)| match b.state.load(Ordering::Acquire) {
            FULL => Some((b, true)),
            OWNED if closing => Some((b, false)),
            _ => None,
        })
        .collect();
    ready.sort_by_key(|(b, _)| {
        let (thread, _, seq) = b.owner();
        (thread, seq)
    });
    ready
}

/// Events in the buffers not written yet: handed to the writer, or being filled.
pub(crate) fn unwritten() -> u64 {
    BUFFERS
        .iter()
        .filter(|(_, b)| b.state.load(Ordering::Acquire) != EMPTY)
        .map(|(_, b)| {
            let mut events = 0;
            b.read(|_| events += 1);
            events
        })
        .sum()
}

/// This thread's part.
struct Local {
    /// The buffer it appends to.
    buffer: Cell<Option<&'static Buffer>>,
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
            busy: Cell::new(false),
            thread: Cell::new(0),
            tid: Cell::new(0),
            seq: Cell::new(0),
            ended: Cell::new(false),
            pending: Cell::new((0, 0)),
        }
    };
    /// Hands the thread's buffer over when it ends; touched once, at its first event, inside the
    /// reentrancy guard (registering the destructor may allocate).
    static FLUSH: FlushOnExit = const { FlushOnExit };
}

/// See [`FLUSH`].
struct FlushOnExit;

impl Drop for FlushOnExit {
    fn drop(&mut self) {
        let _ = LOCAL.try_with(|local| {
            local.ended.set(true);
            if let Some(buffer) = local.buffer.take() {
                buffer.state.store(FULL, Ordering::Release);
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

#[cold]
#[inline(never)]
fn append_slow(local: &Local, event: &[u64]) {
    if local.ended.get() {
        return append_shared(event);
    }
    // A new buffer, or this thread's first one, may allocate.
    let _guard = Guard::enter();
    if let Some(full) = local.buffer.take() {
        full.state.store(FULL, Ordering::Release);
    }
    // The thread's number is given at its first event, once: a thread left without a buffer
    // (none could be had, its event dropped) keeps its number, and its next buffer follows its
    // last one.
    if local.thread.get() == 0 {
        if FLUSH.try_with(|_| {}).is_err() {
            local.ended.set(true);
            return append_shared(event);
        }
        local.thread.set(next_thread());
        local.tid.set(native::thread_id());
    }
    let seq = local.seq.get();
    match take_buffer(local.thread.get(), local.tid.get(), seq) {
        Some(buffer) => {
            // Counted only once taken: the writer waits for each place in turn.
            local.seq.set(seq + 1);
            buffer.push(event);
            local.buffer.set(Some(buffer));
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

/// An empty buffer owned by thread `thread` (operating-system id `tid`) as its `seq`th, made when
/// none is free.
fn take_buffer(thread: u32, tid: u64, seq: u64) -> Option<&'static Buffer> {
    let free = BUFFERS.iter().map(|(_, b)| b).find(|b| {
        b.state.load(Ordering::Relaxed) == EMPTY
            && b.state
                .compare_exchange(EMPTY, OWNED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    });
    let buffer = match free {
        Some(buffer) => buffer,
        None if BUFFERS.count() < MAX_BUFFERS => &BUFFERS[BUFFERS.push(Buffer::new()?)],
        None => return None,
    };
    buffer.len.store(0, Ordering::Relaxed);
    buffer.thread.store(thread, Ordering::Relaxed);
    buffer.tid.store(tid, Ordering::Relaxed);
    buffer.seq.store(seq, Ordering::Relaxed);
    Some(buffer)
}

/// The shared buffer of ended threads, and how many it has had.
static SHARED: Mutex<(Option<&'static Buffer>, u64)> = Mutex::new((None, 0));

/// Appends to the shared buffer of ended threads.
#[cold]
fn append_shared(event: &[u64]) {
    let _guard = Guard::enter();
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if shared.0.is_some_and(|b| b.push(event)) {
        return;
    }
    if let Some(full) = shared.0.take() {
        full.state.store(FULL, Ordering::Release);
    }
    let seq = shared.1;
    match take_buffer(0, 0, seq) {
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
