//! Labels: key-value pairs that say which request, task or tenant an allocation was made for.
//!
//! A thread has a current label set ([`CURRENT`], 0 for none), which the allocation path reads
//! once per recorded allocation and interns with the block's stack (`table::stacks`): a labelled
//! stack is the stack's frames and one more node below its innermost frame that names the set,
//! so a block carries its labels for its whole life at no cost in the table's slots, its free
//! credits them whichever thread frees it, and everything that groups by stack (reports,
//! exports, allocated counters) can group by labels too.
//!
//! The sets themselves are interned off the allocation path, inside the reentrancy guard, in a
//! bounded table ([`sets`]). Code sets the current labels with [`with_labels`], a guard
//! ([`Labels::enter`]) or a future wrapper ([`Labels::attach`]); with the cargo feature
//! `tracing`, a `tracing_subscriber` layer makes the entered span the current labels
//! ([`LabelsLayer`]).

#![forbid(unsafe_code)]

mod guards;
pub(crate) mod sets;
#[cfg(feature = "tracing")]
mod tracing_layer;

#[cfg(feature = "tracing")]
pub use tracing_layer::LabelsLayer;

use crate::calls::Calling;
use crate::guard::untracked;
use std::cell::Cell;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

thread_local! {
    /// The id of this thread's current label set; 0 for none. `const`-initialized and without a
    /// destructor: reading it on the allocation path never allocates, and still works while the
    /// thread's other locals are torn down.
    static CURRENT: Cell<u32> = const { Cell::new(0) };
}

/// The id of this thread's current label set (0 for none): one thread-local load, for the
/// allocation path.
#[inline(always)]
pub(crate) fn current() -> u32 {
    CURRENT.try_with(Cell::get).unwrap_or(0)
}

/// Sets this thread's current label set; returns the one before.
#[inline]
fn replace(id: u32) -> u32 {
    CURRENT.try_with(|c| c.replace(id)).unwrap_or(0)
}

/// An interned label set: key-value pairs that the blocks allocated while it is current carry
/// for their whole life. Cheap to copy; make it once where the same labels are set often.
///
/// Keys are unique in a set (the last of a key given twice wins); setting labels while others are
/// current merges them, the inner values overriding the outer ones for the same key. The table
/// of distinct sets is bounded (see `docs/labels.md`): past the bound, a new set is not
/// interned, [`Labels::new`] gives the empty set, and the count of dropped sets grows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Labels(u32);

impl Labels {
    /// The empty set: no labels.
    pub const NONE: Labels = Labels(0);

    /// Interns `pairs` (key, value) as a label set. A pair with an empty key or an empty value
    /// is left out (pprof, where labels are read, has no label with an empty value): a set of
    /// such pairs alone is [`Labels::NONE`], and such a pair does not clear an outer value of its
    /// key.
    pub fn new(pairs: &[(&str, &str)]) -> Labels {
        Labels(untracked(|| sets::SETS.intern(pairs)))
    }

    /// The labels current on this thread.
    pub fn current() -> Labels {
        Labels(current())
    }

    /// The set's pairs, sorted by key.
    pub fn pairs(self) -> Vec<(String, String)> {
        untracked(|| sets::SETS.pairs(self.0))
    }

    /// Makes these labels current on this thread, merged over those current now, until the
    /// guard is dropped, which restores the labels current before. The guard stays on its
    /// thread (it is not `Send`).
    ///
    /// **Not across an `.await`**, in any future: a guard cannot know when its future is polled
    /// again, so while the future waits, whatever else the thread runs (another future of the
    /// same `join!`, `select!`, `LocalSet` or current-thread runtime) allocates with these
    /// labels, and the future allocates with the others' when it resumes. For a future, use
    /// [`Labels::attach`], which sets the labels on every poll. Guards dropped out of order
    /// still restore exactly: once all are dropped, the labels current before the first are
    /// current again; a debug build says once, on stderr, that it happened.
    pub fn enter(self) -> LabelsGuard {
        let (number, previous) = guards::enter(self.0);
        LabelsGuard {
            number,
            previous,
            _not_send: PhantomData,
        }
    }

    /// Makes these labels, merged over the current ones, current; returns the set current
    /// before.
    #[cfg(feature = "tracing")]
    fn merge_into_current(self) -> u32 {
        let previous = current();
        replace(guards::merge(previous, self.0));
        previous
    }

    /// Wraps `future` so that these labels are current (merged over those of the polling
    /// thread) while it is polled, on whichever thread polls it: a task keeps its labels when
    /// it moves between an executor's worker threads.
    pub async fn attach<F: Future>(self, future: F) -> F::Output {
        Attached {
            labels: self,
            future: std::pin::pin!(future),
        }
        .await
    }
}

/// A future polled with its labels current ([`Labels::attach`]). Its `poll` is inlined into
/// `attach`'s body, and calls the future's own `poll` through a pointer the optimizer cannot
/// see through, so that none of the program's code is inlined into memprof's frames: the stack
/// walk leaves those out whole ([`crate::calls`]). The body is polled by the executor, often
/// through a pointer (a task's vtable), and so keeps a frame of its own.
struct Attached<'a, F> {
    labels: Labels,
    future: Pin<&'a mut F>,
}

impl<F: Future> Future for Attached<'_, F> {
    type Output = F::Output;

    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _labels = self.labels.enter();
        let _calling = Calling::enter();
        let poll: fn(Pin<&mut F>, &mut Context<'_>) -> Poll<F::Output> = F::poll;
        std::hint::black_box(poll)(self.future.as_mut(), cx)
    }
}

/// Keeps a label set current on its thread; dropping it restores the labels current before
/// ([`Labels::enter`]).
#[derive(Debug)]
#[must_use = "the labels are current only while the guard lives"]
pub struct LabelsGuard {
    /// Its number among the guards entered on its thread (0: not among them).
    number: u64,
    /// The set current before.
    previous: u32,
    /// The guard belongs to the thread that made it.
    _not_send: PhantomData<*const ()>,
}

impl Drop for LabelsGuard {
    fn drop(&mut self) {
        guards::exit(self.number, self.previous);
    }
}

/// Runs `f` with the labels `pairs` (key, value) current on this thread, merged over those
/// current now (inner keys override outer ones), and restores them when it returns: what `f`
/// allocates carries these labels for its whole life.
///
/// ```rust,standalone_crate
/// #[global_allocator]
/// static GLOBAL: memprof::MemProf = memprof::MemProf::new();
///
/// fn main() {
///     let cache: Vec<u8> = memprof::with_labels(&[("tenant", "acme")], || vec![0; 4096]);
///     memprof::log_labels(&mut std::io::stdout()).unwrap();
///     drop(cache);
/// }
/// ```
///
/// Inlined into its caller, so that no frame of memprof's stands between the caller's and
/// `f`'s in the stacks of what `f` allocates (the symbolizer leaves out the inlined frame that
/// names it: [`crate::calls`]).
#[inline(always)]
pub fn with_labels<R>(pairs: &[(&str, &str)], f: impl FnOnce() -> R) -> R {
    let _labels = Labels::new(pairs).enter();
    f()
}

/// How many times a new label set could not be interned because the table of sets was full
/// (the same set asked for again counts again).
pub fn dropped_label_sets() -> u64 {
    sets::SETS.dropped()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_merges_and_restores() {
        assert_eq!(current(), 0);
        with_labels(&[("tenant", "acme"), ("kind", "read")], || {
            let outer = Labels::current();
            assert_eq!(
                outer.pairs(),
                [
                    ("kind".into(), "read".into()),
                    ("tenant".into(), "acme".into())
                ]
            );
            with_labels(&[("kind", "write")], || {
                assert_eq!(
                    Labels::current().pairs(),
                    [
                        ("kind".to_owned(), "write".to_owned()),
                        ("tenant".to_owned(), "acme".to_owned())
                    ]
                );
            });
            assert_eq!(Labels::current(), outer);
        });
        assert_eq!(current(), 0);
    }

    #[test]
    fn the_same_pairs_are_the_same_set() {
        let a = Labels::new(&[("a", "1"), ("b", "2")]);
        let b = Labels::new(&[("b", "2"), ("a", "1")]);
        assert_eq!(a, b);
        assert_ne!(a, Labels::NONE);
        assert_eq!(Labels::new(&[]), Labels::NONE);
        // The last value of a key given twice wins.
        assert_eq!(Labels::new(&[("a", "0"), ("a", "1"), ("b", "2")]), a);
    }

    /// Every order of dropping the guards of `sets`, entered in order over `around`: the labels
    /// in between are those of the guards left, and after the last, `around`'s.
    fn drop_in_every_order(around: Labels, sets: &[Labels]) {
        let _around = around.enter();
        let mut orders: Vec<Vec<usize>> = vec![Vec::new()];
        for _ in 0..sets.len() {
            let mut longer = Vec::new();
            for order in &orders {
                for i in (0..sets.len()).filter(|i| !order.contains(i)) {
                    longer.push([&order[..], &[i]].concat());
                }
            }
            orders = longer;
        }
        assert_eq!(orders.len(), (1..=sets.len()).product::<usize>());
        let before = guards::misnested_count();
        for order in &orders {
            let mut held: Vec<Option<LabelsGuard>> = sets.iter().map(|s| Some(s.enter())).collect();
            for (n, &i) in order.iter().enumerate() {
                held[i] = None;
                // The labels of the guards left, entered in order over `around`.
                let expected = (0..sets.len())
                    .filter(|j| !order[..=n].contains(j))
                    .fold(around, |outer, j| Labels(guards::merge(outer.0, sets[j].0)));
                assert_eq!(Labels::current(), expected, "order {order:?}, after {n}");
            }
            assert_eq!(Labels::current(), around, "order {order:?}");
        }
        assert!(guards::misnested_count() > before);
    }

    #[test]
    fn guards_dropped_in_any_order_restore_the_labels_before_them() {
        let sets = [
            Labels::new(&[("tenant", "x")]),
            Labels::new(&[("kind", "y")]),
            Labels::new(&[("tenant", "z"), ("route", "r")]),
            Labels::new(&[("kind", "w")]),
        ];
        drop_in_every_order(Labels::NONE, &sets);
        drop_in_every_order(Labels::new(&[("service", "api")]), &sets);
        // The same set twice.
        drop_in_every_order(Labels::NONE, &[sets[0], sets[0], sets[1]]);
        assert_eq!(current(), 0);
    }

    #[test]
    fn an_attached_future_has_its_labels_on_every_poll() {
        use std::task::{Context, Poll, Waker};
        let labels = Labels::new(&[("task", "t1")]);
        let mut polls = 0;
        let seen = std::cell::RefCell::new(Vec::new());
        let future = labels.attach(std::future::poll_fn(|cx| {
            seen.borrow_mut().push(Labels::current());
            polls += 1;
            if polls < 3 {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        }));
        let mut future = std::pin::pin!(future);
        let mut cx = Context::from_waker(Waker::noop());
        while future.as_mut().poll(&mut cx).is_pending() {
            assert_eq!(Labels::current(), Labels::NONE);
        }
        assert_eq!(*seen.borrow(), [labels; 3]);
    }
}
