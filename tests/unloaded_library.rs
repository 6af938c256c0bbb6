//! A library is loaded, allocates (through a callback into Rust) and is unloaded before anything
//! is reported: no symbolizer ever saw it loaded. Its frames must still be named, function, file
//! and line, from its file read again: the DWARF unwinder noted the library when its walk met the
//! library's code. Once the file is replaced by another build, its frames are named by the path
//! alone, never by the new file's names.

mod common;

use common::c_library;
use memprof::{Resolve, ReturnAddress};

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

/// `plugin_step` calls back into Rust, which allocates; `plugin_run` calls it.
const PLUGIN: &str = r#"
typedef void (*callback)(unsigned long);
int calls = 0;
void plugin_step(callback cb, unsigned long size) {
    cb(size); /* STEP_LINE */
    calls++;
}
void plugin_run(callback cb, unsigned long size) {
    plugin_step(cb, size);
    calls++;
}
"#;

type PluginRun = unsafe extern "C" fn(extern "C" fn(libc::c_ulong), libc::c_ulong);

/// The size of the blocks the library allocates, which no other allocation of the test has.
const SIZE: usize = 3517;

/// Blocks allocated from the library's callbacks.
static KEPT: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// Called back from the library: allocates a block of `size` bytes and keeps it.
#[inline(never)]
extern "C" fn allocate(size: libc::c_ulong) {
    let block = std::hint::black_box(vec![5u8; size as usize]);
    KEPT.lock().unwrap().push(block);
}

/// The frames (as report strings) of each live block of `SIZE` bytes, resolved as a report does.
fn frames_of_blocks() -> Vec<Vec<String>> {
    let snapshot = memprof::Snapshot::take();
    let stacks: Vec<Vec<ReturnAddress>> = snapshot
        .blocks
        .iter()
        .filter(|b| b.size == SIZE as u64)
        .map(|b| snapshot.stack(b.stack).frames.clone())
        .collect();
    memprof::with_symbolizer(|symbolizer| {
        stacks
            .iter()
            .map(|frames| {
                symbolizer
                    .resolve_stack(frames)
                    .iter()
                    .flat_map(|frames| frames.iter().map(|f| f.to_string()))
                    .collect()
            })
            .collect()
    })
}

#[test]
fn unloaded_library() {
    let dir = c_library::scratch_dir("unloaded-library");
    let library = c_library::compile(&dir, "plugin", PLUGIN);
    let handle = c_library::open(&library);
    let run = c_library::symbol(handle, "plugin_run");
    // SAFETY: `plugin_run` has the type `PluginRun` (see `PLUGIN`).
    let run: PluginRun = unsafe { std::mem::transmute(run) };
    for _ in 0..4 {
        // SAFETY: the library stays open until it is closed below.
        unsafe { run(allocate, SIZE as libc::c_ulong) };
    }
    c_library::close(handle);

    let line = PLUGIN
        .lines()
        .position(|l| l.contains("STEP_LINE"))
        .unwrap()
        + 1;
    let stacks = frames_of_blocks();
    assert_eq!(stacks.len(), 4);
    for frames in &stacks {
        assert!(
            frames
                .iter()
                .any(|f| f.contains(&format!("plugin.c:{line}:"))
                    && f.ends_with(" in 'plugin_step'")),
            "the unloaded library's frame, with its file and line: {frames:#?}"
        );
        assert!(
            frames.iter().any(|f| f.ends_with(" in 'plugin_run'")),
            "{frames:#?}"
        );
        assert!(
            frames
                .iter()
                .any(|f| f.ends_with("unloaded_library::unloaded_library'")),
            "the Rust frames below: {frames:#?}"
        );
    }

    // The file is replaced by another build (another build id) at the same path; a library
    // loaded and unloaded meanwhile has the symbolizer ask again.
    let other = PLUGIN.replace("plugin_step", "other_step");
    let replacement = c_library::compile(&dir, "replacement", &other);
    std::fs::rename(&replacement, &library).unwrap();
    let unrelated = c_library::compile(&dir, "unrelated", "int unrelated(void) { return 1; }");
    c_library::close(c_library::open(&unrelated));
    let stacks = frames_of_blocks();
    assert_eq!(stacks.len(), 4);
    for frames in &stacks {
        assert!(
            !frames
                .iter()
                .any(|f| f.contains("other_step") || f.contains("plugin_step")),
            "a replaced file names nothing: {frames:#?}"
        );
        assert!(
            frames.iter().any(|f| f == library.to_str().unwrap()),
            "the path of the unloaded library: {frames:#?}"
        );
    }
    KEPT.lock().unwrap().clear();
    std::fs::remove_dir_all(&dir).ok();
}
