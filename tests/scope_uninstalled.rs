//! Without memprof as the global allocator nothing is recorded: a heap assertion must fail and say
//! so, never pass over a leak.

#[inline(never)]
fn leak() {
    std::mem::forget(std::hint::black_box(vec![0u8; 800_000]));
}

#[test]
fn scope_uninstalled() {
    let scope = memprof::Scope::start();
    leak();
    let failure =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scope.assert_no_leaks()))
            .expect_err("an assertion over nothing recorded must fail");
    let message = failure.downcast_ref::<String>().expect("a message");
    assert!(
        message.contains("nothing was recorded") && message.contains("global allocator"),
        "{message}"
    );
}
