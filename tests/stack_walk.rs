//! The stack walk shows the program's own functions, in order, in the build at hand: with frame
//! pointers (`RUSTFLAGS="-C force-frame-pointers=yes"`, walked as a chain) and without (a default
//! build, unwound with DWARF call-frame information).

mod common;

use memprof::Unwinder;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

#[inline(never)]
fn outer() -> Vec<Vec<u8>> {
    let v = middle();
    std::hint::black_box(v)
}

#[inline(never)]
fn middle() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for _ in 0..7 {
        v.push(inner());
    }
    std::hint::black_box(v)
}

#[inline(never)]
fn inner() -> Vec<u8> {
    std::hint::black_box(Vec::with_capacity(77_777))
}

#[test]
fn own_functions_in_order() {
    let expected = if option_env!("MEMPROF_EXPECT_FP").is_some() {
        Unwinder::FramePointer
    } else {
        Unwinder::Dwarf
    };
    let kept = outer();
    assert_eq!(memprof::Config::current().unwinder, expected);
    let groups = common::groups_mentioning("stack_walk::inner", 8);
    assert_eq!(groups.len(), 1, "{groups:#?}");
    let group = &groups[0];
    assert_eq!((group.blocks, group.bytes), (7, 7 * 77_777), "{group:#?}");
    let position = |name: &str| {
        group
            .context
            .iter()
            .position(|f| f.ends_with(&format!("in 'stack_walk::{name}'")))
            .unwrap_or_else(|| panic!("{name} missing from {:#?}", group.context))
    };
    assert!(position("inner") < position("middle"));
    assert!(position("middle") < position("outer"));
    assert!(group.context[position("inner")].starts_with("tests/stack_walk.rs:"));
    drop(kept);
}
