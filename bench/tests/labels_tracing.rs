//! Labels from `tracing` spans, without code changes beyond one layer (`LabelsLayer`): a
//! program whose handlers are instrumented gets what each span allocates attributed to the
//! span's name and the field listed (`tenant`), an inner span overriding the name and keeping
//! the outer span's tenant, on two threads at once.
//!
//! Each thread first runs a request of its own tenant (`warmup`): the subscriber's registry
//! makes its per-thread room for spans then, so the measured requests allocate only their own
//! blocks.

#![cfg(feature = "tracing")]

use tracing_subscriber::layer::SubscriberExt;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Requests per tenant.
const REQUESTS: usize = 50;

#[inline(never)]
fn block(size: usize) -> Vec<u8> {
    let block = Vec::with_capacity(size);
    std::hint::black_box(&block);
    block
}

#[tracing::instrument(skip_all, fields(tenant = tenant))]
fn handle(tenant: &str, kept: &mut Vec<Vec<u8>>) {
    kept.push(block(1000));
    drop(block(5000));
    parse(kept);
}

#[tracing::instrument(skip_all)]
fn parse(kept: &mut Vec<Vec<u8>>) {
    kept.push(block(2000));
}

/// A thread's requests for `tenant`, after one warm-up request; what they keep.
fn serve(tenant: &'static str) -> Vec<Vec<u8>> {
    let mut kept = Vec::with_capacity(2 * REQUESTS + 2);
    handle("warmup", &mut kept);
    for _ in 0..REQUESTS {
        handle(tenant, &mut kept);
    }
    kept
}

/// `(live blocks, live bytes, allocated blocks, allocated bytes)` of the label set written
/// `labels` in `log_labels`.
fn logged(log: &str, labels: &str) -> [u64; 4] {
    let line = log
        .lines()
        .find(|l| l.ends_with(&format!("\t{labels}")))
        .unwrap_or_else(|| panic!("no {labels} in\n{log}"));
    let n: Vec<u64> = line
        .split('\t')
        .take(4)
        .map(|f| f.parse().unwrap())
        .collect();
    [n[0], n[1], n[2], n[3]]
}

#[test]
fn spans_label_what_they_allocate() {
    let subscriber =
        tracing_subscriber::registry().with(memprof::LabelsLayer::new().with_fields(&["tenant"]));
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let other = std::thread::spawn(|| serve("zeta"));
    let acme = serve("acme");
    let zeta = other.join().unwrap();
    assert_eq!(memprof::Labels::current(), memprof::Labels::NONE);

    let mut out = Vec::new();
    memprof::log_labels(&mut out).unwrap();
    let log = String::from_utf8(out).unwrap();
    let n = REQUESTS as u64;
    for tenant in ["acme", "zeta"] {
        assert_eq!(
            logged(&log, &format!("span=handle,tenant={tenant}")),
            [n, 1000 * n, 2 * n, 6000 * n],
            "{log}"
        );
        // The inner span has no tenant of its own: it keeps the outer one's.
        assert_eq!(
            logged(&log, &format!("span=parse,tenant={tenant}")),
            [n, 2000 * n, n, 2000 * n],
            "{log}"
        );
    }
    drop((acme, zeta));
}
