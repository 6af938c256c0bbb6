//! Label guards held across an `.await`, the misuse `docs/labels.md` warns against: two futures
//! polled on one thread (as `join!`, `select!`, a `LocalSet` or a current-thread runtime poll
//! them, here by hand with a no-op waker), each holding `Labels::enter`'s guard across an
//! `.await`, end in either order. Whatever order their guards drop in, the labels current before
//! the first `enter` are current after the last drop: a block allocated afterwards, outside any
//! task, carries no labels. Guards dropped out of order without futures restore the same way. A
//! debug build says once, on stderr, that a guard was dropped while other labels were current.
//!
//! The scenario runs in a child (this same binary), whose stderr the test reads.

mod common;

use memprof::{Labels, Snapshot};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Set in the child.
const CHILD: &str = "MEMPROF_TEST_LABELS_AWAIT";

#[inline(never)]
fn block(size: usize) -> Vec<u8> {
    let block = Vec::with_capacity(size);
    std::hint::black_box(&block);
    block
}

/// Pending once, then ready: an `.await` that gives the other future its turn.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// A request for `tenant`: its labels' guard held across `yields` awaits, then a block of
/// `size` bytes kept in `kept`.
async fn request(tenant: &str, yields: usize, size: usize, kept: &RefCell<Vec<Vec<u8>>>) {
    let _labels = Labels::new(&[("tenant", tenant)]).enter();
    for _ in 0..yields {
        YieldOnce(false).await;
    }
    kept.borrow_mut().push(block(size));
}

/// Polls `a` and `b` in turn on this thread until both are done, as `join!` does.
fn join(a: impl Future<Output = ()>, b: impl Future<Output = ()>) {
    let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
    let mut cx = Context::from_waker(Waker::noop());
    let (mut a_done, mut b_done) = (false, false);
    while !(a_done && b_done) {
        if !a_done {
            a_done = a.as_mut().poll(&mut cx).is_ready();
        }
        if !b_done {
            b_done = b.as_mut().poll(&mut cx).is_ready();
        }
    }
}

/// The labels of the one live block of `size` bytes.
fn labels_of_block(size: u64) -> Vec<(String, String)> {
    let snapshot = Snapshot::take();
    let blocks: Vec<_> = snapshot.blocks.iter().filter(|b| b.size == size).collect();
    assert_eq!(blocks.len(), 1, "one live block of {size} bytes");
    let stack = &snapshot.stacks[blocks[0].stack.0 as usize];
    snapshot.label_set(stack.labels).to_vec()
}

/// The two futures, both orders of ending, then guards dropped out of order by hand.
fn scenario() {
    let kept = RefCell::new(Vec::with_capacity(16));
    let mut later = Vec::with_capacity(16);
    let outer = Labels::new(&[("service", "api")]);
    // Each case: the request futures' awaits, and the labels current around them.
    let cases: [(usize, usize, Labels); 4] = [
        // `a` ends first while `b`'s guard is current: `a`'s guard drops out of order.
        (1, 2, Labels::NONE),
        // `b` ends first: its guard is the innermost one, and drops in order.
        (2, 1, Labels::NONE),
        (1, 1, Labels::NONE),
        (1, 2, outer),
    ];
    for (case, &(a_yields, b_yields, around)) in cases.iter().enumerate() {
        let _around = around.enter();
        join(
            request("a", a_yields, 100_000, &kept),
            request("b", b_yields, 100_000, &kept),
        );
        assert_eq!(Labels::current(), around, "case {case}: after both futures");
        drop(_around);
        assert_eq!(Labels::current(), Labels::NONE, "case {case}");
        // Made outside any task: no labels.
        let size = 300_000 + case;
        later.push(block(size));
        assert_eq!(labels_of_block(size as u64), [], "case {case}");
    }

    // Guards dropped out of order, without futures: every order of three.
    let sets = [
        Labels::new(&[("tenant", "x")]),
        Labels::new(&[("kind", "y")]),
        Labels::new(&[("tenant", "z"), ("route", "r")]),
    ];
    for order in [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ] {
        let mut guards: Vec<Option<_>> = sets.iter().map(|s| Some(s.enter())).collect();
        for i in order {
            guards[i] = None;
        }
        assert_eq!(Labels::current(), Labels::NONE, "drop order {order:?}");
    }
    let size = 400_000;
    later.push(block(size));
    assert_eq!(labels_of_block(size as u64), []);
    drop((kept, later));
    println!("scenario done");
}

#[test]
fn labels_await() {
    if std::env::var_os(CHILD).is_some() {
        scenario();
        return;
    }
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "labels_await", "--nocapture"])
        .env(CHILD, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_within(child, Duration::from_secs(120), "the child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("scenario done"),
        "{}\n{stdout}\n{stderr}",
        output.status
    );
    // A debug build says it once, however many guards dropped out of order.
    let warning = "memprof: a labels guard was dropped while other labels were current";
    let expected = usize::from(cfg!(debug_assertions));
    assert_eq!(stderr.matches(warning).count(), expected, "{stderr}");
    if expected == 1 {
        assert!(stderr.contains("Labels::attach"), "{stderr}");
    }
}
