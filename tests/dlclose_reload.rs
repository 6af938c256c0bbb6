//! A library is loaded, allocates, is reported on and unloaded; another library of the same size is
//! loaded at the same address and allocates in turn. The report must name the second library's
//! code, never the first one's: the symbolizer must not keep answers, loaders or module lists of
//! a module that is gone. A block still live from a library no longer loaded resolves to that
//! library's names, read again from its file, never to another module's names.

mod common;

use common::c_library;
use memprof::{Resolve, ReturnAddress};
use std::path::Path;

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// Two libraries of one layout: `plugin_run` calls `<x>_step`, which calls back into Rust, from
/// the same offsets in both; only the names of the files and of `<x>_step` differ.
const PLUGIN: &str = r#"
typedef void (*callback)(unsigned long);
int STEP_calls = 0;
void STEP_step(callback cb, unsigned long size) {
    cb(size);
    STEP_calls++;
}
void plugin_run(callback cb, unsigned long size) {
    STEP_step(cb, size);
    STEP_calls++;
}
"#;

type PluginRun = unsafe extern "C" fn(extern "C" fn(libc::c_ulong), libc::c_ulong);

/// Sizes of the blocks each library allocates, which no other allocation of the test has.
const SIZE_A: usize = 3001;
const SIZE_B: usize = 3002;

/// Blocks allocated from the libraries' callbacks.
static KEPT: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// Called back from a library: allocates a block of `size` bytes and keeps it.
#[inline(never)]
extern "C" fn allocate(size: libc::c_ulong) {
    let block = std::hint::black_box(vec![5u8; size as usize]);
    KEPT.lock().unwrap().push(block);
}

/// Opens the library at `path`, has it allocate 5 blocks of `size` bytes, and returns its handle
/// and the address it was loaded at.
#[inline(never)]
fn run_plugin(path: &Path, size: usize) -> (*mut libc::c_void, usize) {
    let handle = c_library::open(path);
    let run = c_library::symbol(handle, "plugin_run");
    // SAFETY: `plugin_run` has the type `PluginRun` (see `PLUGIN`).
    let run: PluginRun = unsafe { std::mem::transmute(run) };
    for _ in 0..5 {
        // SAFETY: the library stays open until the caller closes it.
        unsafe { run(allocate, size as libc::c_ulong) };
    }
    (handle, base_of(run as *const libc::c_void))
}

/// The address the library holding `code` was loaded at.
fn base_of(code: *const libc::c_void) -> usize {
    // SAFETY: `Dl_info` is plain data, filled by `dladdr`; `code` is an address, only looked up.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        assert_ne!(libc::dladdr(code, &mut info), 0);
        info.dli_fbase as usize
    }
}

/// The frames (as report strings) of each live block of `size` bytes, from the live table.
fn frames_of_blocks(size: usize) -> Vec<Vec<String>> {
    let snapshot = memprof::Snapshot::take();
    let stacks: Vec<Vec<ReturnAddress>> = snapshot
        .blocks
        .iter()
        .filter(|b| b.size == size as u64)
        .map(|b| snapshot.stack(b.stack).frames.clone())
        .collect();
    memprof::with_symbolizer(|symbolizer| {
        stacks
            .iter()
            .map(|frames| {
                frames
                    .iter()
                    .flat_map(|&a| symbolizer.resolve(a).to_vec())
                    .map(|f| f.to_string())
                    .collect()
            })
            .collect()
    })
}

#[test]
fn dlclose_reload() {
    let dir = c_library::scratch_dir("dlclose-reload");
    let liba = c_library::compile(&dir, "cb_a", &PLUGIN.replace("STEP", "a"));
    let libb = c_library::compile(&dir, "cb_b", &PLUGIN.replace("STEP", "b"));
    assert_eq!(
        std::fs::metadata(&liba).unwrap().len(),
        std::fs::metadata(&libb).unwrap().len(),
        "the two libraries must have one size, to be loaded at one address"
    );

    // A allocates and is reported on while loaded: its names, from its file.
    let (a, base_a) = run_plugin(&liba, SIZE_A);
    let stacks = frames_of_blocks(SIZE_A);
    assert_eq!(stacks.len(), 5);
    for frames in &stacks {
        assert!(
            frames
                .iter()
                .any(|f| f.contains("cb_a.c:") && f.ends_with(" in 'a_step'")),
            "{frames:#?}"
        );
    }
    // A frees its blocks and goes; B comes at the same address and allocates.
    KEPT.lock().unwrap().clear();
    c_library::close(a);
    let (b, base_b) = run_plugin(&libb, SIZE_B);
    eprintln!("cb_a loaded at {base_a:#x}, cb_b at {base_b:#x}");
    assert_eq!(base_a, base_b, "cb_b was not loaded where cb_a was");
    let stacks = frames_of_blocks(SIZE_B);
    assert_eq!(stacks.len(), 5);
    for frames in &stacks {
        assert!(
            frames
                .iter()
                .any(|f| f.contains("cb_b.c:") && f.ends_with(" in 'b_step'")),
            "B's blocks must name B's code: {frames:#?}"
        );
        assert!(
            !frames
                .iter()
                .any(|f| f.contains("cb_a") || f.contains("a_step")),
            "B's code named after A's: {frames:#?}"
        );
    }

    // B goes too, its blocks still live: B, the module seen latest at the address, is named
    // from its file, read again.
    c_library::close(b);
    let stacks = frames_of_blocks(SIZE_B);
    assert_eq!(stacks.len(), 5);
    for frames in &stacks {
        assert!(
            frames
                .iter()
                .any(|f| f.contains("cb_b.c:") && f.ends_with(" in 'b_step'")),
            "{frames:#?}"
        );
        assert!(
            !frames
                .iter()
                .any(|f| f.contains("cb_a") || f.contains("a_step")),
            "{frames:#?}"
        );
        assert!(
            frames
                .iter()
                .any(|f| f.ends_with("dlclose_reload::run_plugin'")),
            "the Rust frames still resolve: {frames:#?}"
        );
    }
    KEPT.lock().unwrap().clear();
    std::fs::remove_dir_all(&dir).ok();
}
