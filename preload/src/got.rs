//! The global offset tables of the loaded modules: where a module's calls to another module's
//! functions find their address. A library loaded into a running process (`memprof attach`) comes
//! after the modules that call `malloc`, which the dynamic loader bound to the C library long
//! ago: it redirects them by rewriting those entries (the `R_X86_64_JUMP_SLOT` and
//! `R_X86_64_GLOB_DAT` relocations of each module, found by symbol name from its `PT_DYNAMIC`),
//! and keeps each entry's old value so that [`restore`] puts every one back.
//!
//! Entries inside a module's `PT_GNU_RELRO` range (every one with `-z now`) are read-only once the
//! loader relocated them: the pages are made writable for the change and read-only again.

use std::ffi::{CStr, c_int, c_void};
use std::sync::{Mutex, PoisonError};

/// The ELF relocation types rewritten: a PLT slot and a data slot holding a function's address.
const R_X86_64_GLOB_DAT: u32 = 6;
const R_X86_64_JUMP_SLOT: u32 = 7;

// The dynamic section's tags read here.
const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_STRSZ: i64 = 10;
const DT_JMPREL: i64 = 23;

/// `PT_GNU_RELRO`: the range the loader makes read-only after relocating.
const PT_GNU_RELRO: u32 = 0x6474_e552;

/// One rewritten entry: where, what it held, and the module it belongs to (its load address and
/// name), so that an entry of a module unloaded since is never written.
struct Patch {
    slot: usize,
    old: usize,
    new: usize,
    module: Module,
}

/// A loaded module as the loader lists it.
#[derive(Clone, PartialEq, Eq)]
struct Module {
    base: usize,
    name: Vec<u8>,
    dynamic: usize,
    relro: Option<(usize, usize)>,
}

/// What was changed, in order; taken at attach, at a `dlopen` while attached, and at detach, never
/// on the allocation path.
static PATCHES: Mutex<Vec<Patch>> = Mutex::new(Vec::new());

/// The modules loaded now, but `own` (this library's load address) and the kernel's vDSO.
fn modules(own: usize) -> Vec<Module> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader gives a valid `dl_phdr_info` for the call, and `data` is the vector
        // passed below.
        let (info, found) = unsafe { (&*info, &mut *(data as *mut Vec<Module>)) };
        let name = if info.dlpi_name.is_null() {
            Vec::new()
        } else {
            // SAFETY: a NUL-terminated name the loader keeps while the module is loaded.
            unsafe { CStr::from_ptr(info.dlpi_name) }
                .to_bytes()
                .to_vec()
        };
        let base = info.dlpi_addr as usize;
        let mut dynamic = 0;
        let mut relro = None;
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: `dlpi_phdr` holds `dlpi_phnum` program headers.
            let header = unsafe { &*info.dlpi_phdr.add(i) };
            match header.p_type {
                libc::PT_DYNAMIC => dynamic = base + header.p_vaddr as usize,
                PT_GNU_RELRO => {
                    relro = Some((base + header.p_vaddr as usize, header.p_memsz as usize))
                }
                _ => {}
            }
        }
        if dynamic != 0 && !name.starts_with(b"linux-vdso") && !name.starts_with(b"linux-gate") {
            found.push(Module {
                base,
                name,
                dynamic,
                relro,
            });
        }
        0
    }
    let mut found: Vec<Module> = Vec::new();
    // SAFETY: `each` reads only what the loader passes and pushes to `found`, which outlives the
    // call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut found).cast()) };
    found.retain(|m| m.base != own);
    found
}

/// An address of the dynamic section: the loader has already added the load address to most of
/// them on this target; one below the load address has not.
fn at(base: usize, value: u64) -> usize {
    let value = value as usize;
    if value < base { base + value } else { value }
}

/// The entries of `module` for the functions of `table` (name, new address): `(slot, new)`.
///
/// # Safety
/// `module` is loaded, its dynamic section and tables mapped as the loader left them.
unsafe fn slots(module: &Module, table: &[(&CStr, usize)]) -> Vec<(usize, usize)> {
    let (mut jmprel, mut pltrelsz, mut rela, mut relasz) = (0, 0, 0, 0);
    let (mut symtab, mut strtab, mut strsz) = (0, 0, 0);
    let mut entry = module.dynamic as *const [i64; 2];
    loop {
        // SAFETY: the dynamic section is an array of (tag, value) pairs ended by `DT_NULL`.
        let [tag, value] = unsafe { entry.read() };
        match tag {
            DT_NULL => break,
            DT_JMPREL => jmprel = at(module.base, value as u64),
            DT_PLTRELSZ => pltrelsz = value as usize,
            DT_RELA => rela = at(module.base, value as u64),
            DT_RELASZ => relasz = value as usize,
            DT_SYMTAB => symtab = at(module.base, value as u64),
            DT_STRTAB => strtab = at(module.base, value as u64),
            DT_STRSZ => strsz = value as usize,
            _ => {}
        }
        // SAFETY: within the section, which goes on to its `DT_NULL`.
        entry = unsafe { entry.add(1) };
    }
    let mut found = Vec::new();
    if symtab == 0 || strtab == 0 {
        return found;
    }
    for (start, bytes) in [(jmprel, pltrelsz), (rela, relasz)] {
        if start == 0 {
            continue;
        }
        for i in 0..bytes / 24 {
            // SAFETY: `Elf64_Rela` entries (offset, info, addend) of the module's tables.
            let [offset, info, _] = unsafe { (start as *const [u64; 3]).add(i).read() };
            let kind = info as u32;
            if kind != R_X86_64_JUMP_SLOT && kind != R_X86_64_GLOB_DAT {
                continue;
            }
            let symbol = (info >> 32) as usize;
            // SAFETY: an `Elf64_Sym` of the module's symbol table; its first 4 bytes are the
            // name's offset in the string table.
            let name_at = unsafe { ((symtab + symbol * 24) as *const u32).read() } as usize;
            if strsz != 0 && name_at >= strsz {
                continue;
            }
            // SAFETY: a NUL-terminated name in the module's string table.
            let name = unsafe { CStr::from_ptr((strtab + name_at) as *const libc::c_char) };
            if let Some(&(_, new)) = table.iter().find(|(n, _)| *n == name) {
                found.push((module.base + offset as usize, new));
            }
        }
    }
    found
}

/// The page size.
fn page() -> usize {
    // SAFETY: `sysconf` reads the auxiliary vector.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}

/// Runs `write` with the read-only pages of `module`'s RELRO range writable, then read-only again.
/// The loader protects whole pages from the range's start to its end rounded down (the last page
/// is shared with writable data), and so does this.
fn with_writable(module: &Module, write: impl FnOnce()) {
    let Some((start, length)) = module.relro else {
        return write();
    };
    let page = page();
    let first = start & !(page - 1);
    let end = (start + length) & !(page - 1);
    if end <= first {
        return write();
    }
    let protect = |prot| {
        // SAFETY: the module's own RELRO pages, mapped while it is loaded; only their protection
        // changes.
        unsafe { libc::mprotect(first as *mut c_void, end - first, prot) == 0 }
    };
    let opened = protect(libc::PROT_READ | libc::PROT_WRITE);
    write();
    if opened {
        protect(libc::PROT_READ);
    }
}

/// Rewrites, in every loaded module but the one at `own`, the entries of the functions of `table`
/// (name, new address) to the new addresses; entries changed before are left as they are.
/// Returns how many it changed, and how many of them are `table[0]`'s function.
pub(crate) fn patch(own: usize, table: &[(&CStr, usize)]) -> (usize, usize) {
    let mut patches = PATCHES.lock().unwrap_or_else(PoisonError::into_inner);
    let (mut changed, mut first) = (0, 0);
    for module in modules(own) {
        // SAFETY: a module the loader lists now; nothing unloads it meanwhile but a `dlclose` of
        // another thread, which the loader's lists, read just now, did not show.
        let found = unsafe { slots(&module, table) };
        let found: Vec<_> = found
            .into_iter()
            // SAFETY: each slot is a pointer-sized, aligned entry of the module's table.
            .filter(|&(slot, new)| unsafe { (slot as *const usize).read_volatile() } != new)
            .collect();
        if found.is_empty() {
            continue;
        }
        with_writable(&module, || {
            for &(slot, new) in &found {
                // SAFETY: as above; the page is writable now. An aligned pointer is written
                // whole: a thread calling through it meanwhile finds the old or the new one.
                let old = unsafe { (slot as *const usize).read_volatile() };
                // SAFETY: as above.
                unsafe { (slot as *mut usize).write_volatile(new) };
                patches.push(Patch {
                    slot,
                    old,
                    new,
                    module: module.clone(),
                });
                changed += 1;
                if new == table[0].1 {
                    first += 1;
                }
            }
        });
    }
    (changed, first)
}

/// Whether any entry of a module but the one at `own` for the functions of `table` holds a
/// function of another module named `libmemprof_preload`: another copy of this library attached
/// and not detached.
pub(crate) fn taken_by_another(own: usize, table: &[(&CStr, usize)]) -> bool {
    modules(own).iter().any(|module| {
        // SAFETY: as in `patch`.
        unsafe { slots(module, table) }
            .into_iter()
            .any(|(slot, _)| {
                // SAFETY: a pointer-sized, aligned entry of the module's table.
                let current = unsafe { (slot as *const usize).read_volatile() };
                module_name(current).is_some_and(|name| {
                    name.windows(18).any(|w| w == b"libmemprof_preload") && base_of(current) != own
                })
            })
    })
}

/// The file name of the module holding `address`.
fn module_name(address: usize) -> Option<Vec<u8>> {
    // SAFETY: written by `dladdr` before it is read.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `dladdr` only reads the loader's tables.
    if unsafe { libc::dladdr(address as *const c_void, &mut info) } == 0 || info.dli_fname.is_null()
    {
        return None;
    }
    // SAFETY: a NUL-terminated name that lives as long as the module.
    Some(
        unsafe { CStr::from_ptr(info.dli_fname) }
            .to_bytes()
            .to_vec(),
    )
}

/// The load address of the module holding `address`; 0 when none does.
pub(crate) fn base_of(address: usize) -> usize {
    // SAFETY: written by `dladdr` before it is read.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `dladdr` only reads the loader's tables.
    if unsafe { libc::dladdr(address as *const c_void, &mut info) } == 0 {
        return 0;
    }
    info.dli_fbase as usize
}

/// Puts back every entry [`patch`] changed, newest first, in the modules still loaded where they
/// were; an entry that no longer holds what was written there (changed by someone else since) is
/// left alone. Returns how many were put back.
pub(crate) fn restore(own: usize) -> usize {
    let mut patches = PATCHES.lock().unwrap_or_else(PoisonError::into_inner);
    let loaded = modules(own);
    let mut restored = 0;
    for patch in patches.drain(..).rev() {
        if !loaded.contains(&patch.module) {
            continue;
        }
        // SAFETY: an entry of a module still loaded at the same address.
        if unsafe { (patch.slot as *const usize).read_volatile() } != patch.new {
            continue;
        }
        with_writable(&patch.module, || {
            // SAFETY: as above; the page is writable now.
            unsafe { (patch.slot as *mut usize).write_volatile(patch.old) };
        });
        restored += 1;
    }
    restored
}
