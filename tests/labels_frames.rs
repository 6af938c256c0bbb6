//! memprof's own frames stay out of the program's stacks, wherever they stand: code run inside
//! `with_labels` (nested twice), inside futures wrapped with `Labels::attach` (nested twice, the
//! outer one polled through a `dyn Future`, the inner one by the async body around it), inside a
//! `tracing` span entered with `LabelsLayer` (feature `tracing`) and inside a test `Scope`
//! allocates five functions of the program deep, and every view shows those five functions,
//! and nothing of memprof's, within the default depth: the TSV log (`log_allocations`), a pprof
//! export read by Go's pprof, and the trace (feature `trace`) read back with `memprof-trace`.
//! Before, `with_labels` (and the future wrapper's frames: its async body, std's `PollFn` and
//! its closure) stood between the program's frames and used up the depth.
//!
//! The program runs in a child process, so that the trace is on from its first allocation.

mod common;

use std::alloc::Layout;
use std::future::Future;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Blocks allocated by each scenario: a size of its own, so that each view finds them.
const BLOCKS: usize = 3;

/// The scenarios: the name their functions start with, and the size of their blocks.
const SCENARIOS: [(&str, usize); 4] = [
    ("labels", 11_111),
    ("attach", 22_222),
    ("span", 33_333),
    ("scope", 44_444),
];

/// The depth the reports show: the default.
const DEPTH: usize = 5;

/// A block allocated straight from the global allocator, so that the program's own function is
/// the first frame a report shows (no collection operation of std's above it).
struct Block {
    ptr: *mut u8,
    layout: Layout,
}

/// Allocates the blocks of scenario `n` into `kept`, in the function that calls it (no frame of
/// its own).
macro_rules! allocate {
    ($kept:expr, $n:expr) => {
        for _ in 0..BLOCKS {
            let layout = Layout::from_size_align(black_box(SCENARIOS[$n].1), 8).unwrap();
            // SAFETY: the layout's size is not zero.
            let ptr = unsafe { std::alloc::alloc(layout) };
            assert!(!ptr.is_null());
            $kept.push(Block { ptr, layout });
        }
    };
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout by `allocate!`, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

type Kept = Vec<Block>;

// `with_labels`, nested twice: labels_1 → labels_2 → with_labels → labels_3 → with_labels →
// labels_4 → labels_5, which allocates.

#[inline(never)]
fn labels_5(kept: &mut Kept) {
    allocate!(kept, 0);
    black_box(());
}

#[inline(never)]
fn labels_4(kept: &mut Kept) {
    labels_5(black_box(kept));
    black_box(());
}

#[inline(never)]
fn labels_3(kept: &mut Kept) {
    memprof::with_labels(&[("kind", "inner")], || labels_4(black_box(kept)));
    black_box(());
}

#[inline(never)]
fn labels_2(kept: &mut Kept) {
    memprof::with_labels(&[("tenant", "acme")], || labels_3(black_box(kept)));
    black_box(());
}

#[inline(never)]
fn labels_1(kept: &mut Kept) {
    labels_2(black_box(kept));
    black_box(());
}

// `Labels::attach`, nested twice: attach_1 polls attach_2's future, attached, through a
// `dyn Future` (the wrapper's `poll` is then a frame of its own); attach_2 awaits attach_3's,
// attached (its `poll` inlined into attach_2's body); attach_3 calls attach_4, which calls
// attach_5, which allocates.

#[inline(never)]
fn attach_5(kept: &mut Kept) {
    allocate!(kept, 1);
    black_box(());
}

#[inline(never)]
fn attach_4(kept: &mut Kept) {
    attach_5(black_box(kept));
    black_box(());
}

async fn attach_3(kept: &mut Kept) {
    attach_4(black_box(kept));
    Yield(false).await;
    black_box(());
}

async fn attach_2(kept: &mut Kept) {
    memprof::Labels::new(&[("kind", "inner")])
        .attach(attach_3(kept))
        .await;
    black_box(());
}

/// Polls attach_2's future, attached, through a `dyn Future` until it is ready: a small
/// executor.
#[inline(never)]
fn attach_1(kept: &mut Kept) {
    let labels = memprof::Labels::new(&[("tenant", "acme")]);
    let mut future: Pin<Box<dyn Future<Output = ()> + '_>> =
        Box::pin(labels.attach(attach_2(kept)));
    let mut cx = Context::from_waker(Waker::noop());
    while future.as_mut().poll(&mut cx).is_pending() {}
    black_box(());
}

/// Pending once, then ready: the attached futures are polled twice.
struct Yield(bool);

impl Future for Yield {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

// A `tracing` span: span_1 → span_2, which enters a span (feature `tracing`) around span_3 →
// span_4 → span_5, which allocates.

#[inline(never)]
fn span_5(kept: &mut Kept) {
    allocate!(kept, 2);
    black_box(());
}

#[inline(never)]
fn span_4(kept: &mut Kept) {
    span_5(black_box(kept));
    black_box(());
}

#[inline(never)]
fn span_3(kept: &mut Kept) {
    span_4(black_box(kept));
    black_box(());
}

#[inline(never)]
fn span_2(kept: &mut Kept) {
    let span = spans::enter();
    span_3(black_box(kept));
    drop(span);
    black_box(());
}

#[inline(never)]
fn span_1(kept: &mut Kept) {
    span_2(black_box(kept));
    black_box(());
}

#[cfg(feature = "tracing")]
mod spans {
    //! A span made with `tracing-core` alone, entered with the global dispatcher.

    use tracing_core::field::{Field, FieldSet, Value};
    use tracing_core::metadata::Kind;
    use tracing_core::span::Attributes;
    use tracing_core::{Callsite, Interest, Level, Metadata, callsite, identify_callsite};
    use tracing_subscriber::layer::SubscriberExt;

    struct Site;
    static SITE: Site = Site;
    static META: Metadata<'static> = Metadata::new(
        "request",
        "labels_frames",
        Level::INFO,
        None,
        None,
        None,
        FieldSet::new(&[], identify_callsite!(&SITE)),
        Kind::SPAN,
    );

    impl Callsite for Site {
        fn set_interest(&self, _: Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            &META
        }
    }

    /// Installs `LabelsLayer` as the global subscriber.
    pub fn install() {
        let subscriber = tracing_subscriber::registry().with(memprof::LabelsLayer::new());
        tracing_core::dispatcher::set_global_default(tracing_core::Dispatch::new(subscriber))
            .unwrap();
        callsite::register(&SITE);
    }

    /// A new span named `request`, entered until the guard is dropped.
    pub struct Entered(tracing_core::Dispatch, tracing_core::span::Id);

    pub fn enter() -> Entered {
        let dispatch = tracing_core::dispatcher::get_default(|dispatch| dispatch.clone());
        let values: [(&Field, Option<&dyn Value>); 0] = [];
        let values = META.fields().value_set(&values);
        let id = dispatch.new_span(&Attributes::new(&META, &values));
        dispatch.enter(&id);
        assert_ne!(memprof::Labels::current(), memprof::Labels::NONE);
        Entered(dispatch, id)
    }

    impl Drop for Entered {
        fn drop(&mut self) {
            self.0.exit(&self.1);
            self.0.try_close(self.1.clone());
        }
    }
}

#[cfg(not(feature = "tracing"))]
mod spans {
    pub fn install() {}

    /// Without the feature, no span.
    pub struct NoSpan;

    /// Without the feature, no span.
    pub fn enter() -> NoSpan {
        NoSpan
    }
}

// A test scope: scope_1 → scope_2, which opens a scope around scope_3 → scope_4 → scope_5,
// which allocates.

#[inline(never)]
fn scope_5(kept: &mut Kept) {
    allocate!(kept, 3);
    black_box(());
}

#[inline(never)]
fn scope_4(kept: &mut Kept) {
    scope_5(black_box(kept));
    black_box(());
}

#[inline(never)]
fn scope_3(kept: &mut Kept) {
    scope_4(black_box(kept));
    black_box(());
}

#[inline(never)]
fn scope_2(kept: &mut Kept) {
    let scope = memprof::Scope::start();
    scope_3(black_box(kept));
    let expected = (BLOCKS * SCENARIOS[3].1) as u64;
    assert_eq!(scope.stats().allocated_bytes, expected);
    // The scope's own report shows the program's frames too.
    let sites = scope.allocated_sites();
    let site = sites
        .groups
        .iter()
        .find(|g| g.bytes == expected)
        .unwrap_or_else(|| panic!("{sites:#?}"));
    check("the scope's report", "scope", &names_of(&site.context));
    black_box(());
}

#[inline(never)]
fn scope_1(kept: &mut Kept) {
    scope_2(black_box(kept));
    black_box(());
}

/// The function of each frame as a report prints it (`file:line:col in 'function'`).
fn names_of(context: &[String]) -> Vec<String> {
    context
        .iter()
        .map(|f| match f.split_once(" in '") {
            Some((_, function)) => function.trim_end_matches('\'').to_owned(),
            None => f.clone(),
        })
        .collect()
}

/// Checks the functions of a stack `view` shows for scenario `scenario`: the full depth, all of
/// them the program's own, the five functions of the scenario from the innermost, with the
/// closures and async bodies they run in between.
fn check(view: &str, scenario: &str, functions: &[String]) {
    assert!(
        functions.iter().all(|f| !f.contains("memprof::")),
        "{view}: a frame of memprof's in {functions:#?}"
    );
    assert_eq!(
        functions.len(),
        DEPTH,
        "{view}: not the full depth: {functions:#?}"
    );
    let own = format!("labels_frames::{scenario}_");
    for f in functions {
        assert!(
            f.starts_with(&own) || f.starts_with(&format!("<{own}")),
            "{view}: {f} is not the program's, in {functions:#?}"
        );
    }
    // The scenario's functions, innermost first, each once: a closure, or an async function's
    // body, stands for its function. The depth counts them too, so the outer functions may fall
    // beyond it.
    let mut named: Vec<&str> = Vec::new();
    for f in functions {
        let function = match f.find("::{") {
            Some(at) => &f[..at],
            None => f.as_str(),
        };
        if named.last() != Some(&function) {
            named.push(function);
        }
    }
    let expected: Vec<String> = (1..=5).rev().map(|n| format!("{own}{n}")).collect();
    assert!(named.len() >= 3, "{view}: {functions:#?}");
    assert_eq!(
        named,
        expected[..named.len()],
        "{view}: the program's functions out of order in {functions:#?}"
    );
}

/// The child: runs the scenarios, checks the live views, writes a pprof profile to `pprof`.
fn child(pprof: &Path) {
    spans::install();
    // Room for every block: the scenarios allocate theirs alone.
    let mut kept = Vec::with_capacity(SCENARIOS.len() * BLOCKS);
    labels_1(&mut kept);
    attach_1(&mut kept);
    span_1(&mut kept);
    scope_1(&mut kept);
    assert_eq!(memprof::Labels::current(), memprof::Labels::NONE);
    assert_eq!(memprof::Config::current().stack_depth, DEPTH);

    // The TSV log: `count \t bytes \t frame ...` per group.
    let mut out = Vec::new();
    memprof::log_allocations(&mut out).unwrap();
    let log = String::from_utf8(out).unwrap();
    for (scenario, size) in SCENARIOS {
        let bytes = (BLOCKS * size).to_string();
        let rows: Vec<Vec<&str>> = log
            .lines()
            .map(|l| l.split('\t').collect::<Vec<_>>())
            .filter(|fields| fields.len() > 2 && fields[1] == bytes)
            .collect();
        let [row] = rows.as_slice() else {
            panic!("one row of {bytes} bytes expected:\n{log}");
        };
        let context: Vec<String> = row[2..].iter().map(|f| f.to_string()).collect();
        check("log_allocations", scenario, &names_of(&context));
    }

    let snapshot = memprof::Snapshot::take();
    let mut out = std::fs::File::create(pprof).unwrap();
    memprof::with_symbolizer(|s| {
        memprof::export::pprof::write(
            &snapshot,
            s,
            &memprof::export::ExportOptions::default(),
            &mut out,
        )
    })
    .unwrap();
    drop(out);

    #[cfg(feature = "trace")]
    memprof::close_trace().unwrap().expect("a trace was open");
    drop(kept);
}

/// The stacks of a profile as Go's pprof lists them (`-traces`): per sample, its live bytes
/// and its functions, innermost first; `None` without Go (which fails the test when the tools
/// are required).
fn pprof_traces(file: &Path) -> Option<Vec<(String, Vec<String>)>> {
    let pprof = common::pprof_binary()?;
    let text = common::run(
        Command::new(pprof)
            .args(["-traces", "-sample_index=inuse_space"])
            .arg(file),
    );
    let mut samples = Vec::new();
    // After the header, a block per sample: its labels (`key:  value`), then its value beside
    // its innermost function, then the other functions, one a line.
    for block in text
        .split("-----------+-------------------------------------------------------")
        .skip(1)
    {
        let mut value = None;
        let mut functions = Vec::new();
        for line in block.lines().map(str::trim).filter(|l| !l.is_empty()) {
            match value {
                None => {
                    let (first, rest) = line.split_once(' ').unwrap_or((line, ""));
                    if first.ends_with(':') && !first.ends_with("::") {
                        continue;
                    }
                    value = Some(first.to_owned());
                    functions.push(rest.trim().to_owned());
                }
                Some(_) => functions.push(line.to_owned()),
            }
        }
        if let Some(value) = value {
            samples.push((value, functions));
        }
    }
    Some(samples)
}

#[test]
fn memprof_frames_stay_out_of_the_programs_stacks() {
    if let Some(pprof) = std::env::var_os("MEMPROF_TEST_FRAMES_CHILD") {
        child(Path::new(&pprof));
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("labels_frames-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pprof = dir.join("heap.pb.gz");
    let trace = dir.join("run.mptrace");
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "memprof_frames_stay_out_of_the_programs_stacks"])
        .args(["--nocapture"])
        .env("MEMPROF_TEST_FRAMES_CHILD", &pprof)
        .env_remove("MEMPROF_STACK_DEPTH")
        .env_remove("MEMPROF_STACK_SKIP")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if cfg!(feature = "trace") {
        command.env("MEMPROF_TRACE", &trace);
    }
    let output = common::wait_within(
        command.spawn().unwrap(),
        Duration::from_secs(300),
        "the child",
    );
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    // The pprof profile, as Go's pprof reads it: a sample per stack, the scenario's live bytes.
    if let Some(samples) = pprof_traces(&pprof) {
        for (scenario, size) in SCENARIOS {
            let innermost = format!("labels_frames::{scenario}_5");
            let found: Vec<&Vec<String>> = samples
                .iter()
                .filter(|(value, functions)| {
                    value != "0" && functions.first().is_some_and(|f| f.starts_with(&innermost))
                })
                .map(|(_, functions)| functions)
                .collect();
            // One sample per call site: an optimized build may unroll the loop that allocates.
            assert!(
                (1..=BLOCKS).contains(&found.len()),
                "the samples of {scenario} ({size} bytes): {samples:#?}"
            );
            // An export has every frame walked: at least the depth, more where the program's
            // calls were inlined (a walk counts the frames on the stack).
            for functions in found {
                let functions: Vec<String> = functions
                    .iter()
                    .map(|f| f.trim_end_matches(" (inline)").to_owned())
                    .collect();
                assert!(
                    functions.iter().all(|f| !f.contains("memprof::")),
                    "pprof -traces: a frame of memprof's in {functions:#?}"
                );
                assert!(functions.len() >= DEPTH, "pprof -traces: {functions:#?}");
                check("pprof -traces", scenario, &functions[..DEPTH]);
            }
        }
    }

    #[cfg(feature = "trace")]
    check_trace(&trace);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The trace, read back with `memprof-trace`: each scenario's blocks, their stack's frames
/// (with the functions tail calls left off, as the command recovers them), trimmed as a report
/// trims them.
#[cfg(feature = "trace")]
fn check_trace(path: &Path) {
    use memprof_trace::{Reader, Record, Trace};
    let bytes = std::fs::read(path).unwrap();
    let mut reader = Reader::new(&bytes[..]).unwrap();
    let mut stacks = std::collections::HashMap::new();
    let mut by_size: std::collections::HashMap<u64, Vec<u32>> = std::collections::HashMap::new();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for record in chunk.records() {
            match record.unwrap() {
                Record::Stack { id, frames } => {
                    stacks.insert(id, frames);
                }
                Record::Alloc { size, stack, .. } => by_size.entry(size).or_default().push(stack),
                _ => {}
            }
        }
    }
    let trace = Trace::open(path).unwrap();
    let options = memprof::ReportOptions::default().depth(DEPTH);
    for (scenario, size) in SCENARIOS {
        let ids = &by_size[&(size as u64)];
        assert_eq!(ids.len(), BLOCKS, "{scenario}");
        for id in ids {
            let addresses = &stacks[id];
            let mut frames = Vec::new();
            for (index, &address) in addresses.iter().enumerate() {
                let younger = index.checked_sub(1).map(|i| addresses[i]);
                let callee = trace.recovered_callee(address, younger);
                let symbols = trace.symbols().get(&address).into_iter().flatten();
                for frame in callee.into_iter().chain(symbols) {
                    frames.push(memprof::Frame {
                        function: frame.function.clone(),
                        file: frame.file.clone(),
                        line: frame.line,
                        column: frame.column,
                    });
                }
            }
            let all: Vec<&memprof::Frame> = frames.iter().collect();
            let range = memprof::context_range(&all, &options);
            let functions: Vec<String> = all[range]
                .iter()
                .map(|f| f.function.clone().unwrap_or_default())
                .collect();
            check("the trace", scenario, &functions);
        }
    }
}
