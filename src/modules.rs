//! The code loaded in this process: executable and shared libraries, with where they sit in memory.
//!
//! Read with `dl_iterate_phdr`, off the allocation path: the DWARF unwinder reads it once when it
//! starts, the symbolizer when it renders a report.

use std::ops::Range;
use std::path::PathBuf;

/// One loaded ELF object.
#[derive(Clone, Debug)]
pub struct Module {
    /// Its file; the main executable is named by `/proc/self/exe`'s target.
    pub path: PathBuf,
    /// Load bias: actual virtual address minus the address the file states (0 for non-PIE).
    pub bias: usize,
    /// The executable `PT_LOAD` segments, as actual addresses.
    pub text: Vec<Range<usize>>,
    /// The `PT_GNU_EH_FRAME` segment (`.eh_frame_hdr`), as actual addresses, when present.
    pub eh_frame_hdr: Option<Range<usize>>,
    /// Every `PT_LOAD` segment, executable or not, as actual addresses (the DWARF unwinder bounds
    /// `.eh_frame` by the end of the segment holding it).
    pub segments: Vec<Range<usize>>,
}

impl Module {
    /// Whether `address` falls in one of this module's executable segments.
    pub fn contains(&self, address: usize) -> bool {
        self.text.iter().any(|r| r.contains(&address))
    }
}

/// Lists the modules loaded now. Allocates: call it outside the allocation path.
pub fn loaded() -> Vec<Module> {
    let mut modules: Vec<Module> = Vec::new();
    // SAFETY: the callback receives a `dl_phdr_info` that `dl_iterate_phdr` keeps valid for the
    // duration of the call, and `data` is the `&mut Vec<Module>` passed here, used only inside
    // this call on this thread.
    unsafe {
        libc::dl_iterate_phdr(Some(visit), (&mut modules as *mut Vec<Module>).cast());
    }
    modules
}

/// `dl_iterate_phdr` callback: appends one module to the vector behind `data`.
///
/// # Safety
///
/// `info` must point to a `dl_phdr_info` valid for the call, and `data` to a `Vec<Module>` that
/// nothing else uses during the call.
unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `dl_iterate_phdr` passes a valid `info` for this call and `data` is the vector given
    // by `loaded`, borrowed by nobody else meanwhile.
    let (info, modules) = unsafe { (&*info, &mut *data.cast::<Vec<Module>>()) };
    let bias = info.dlpi_addr as usize;
    let headers: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
        &[]
    } else {
        // SAFETY: the loader guarantees `dlpi_phnum` program headers at `dlpi_phdr`.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    let mut text = Vec::new();
    let mut eh_frame_hdr = None;
    let mut segments = Vec::new();
    for header in headers {
        let start = bias.wrapping_add(header.p_vaddr as usize);
        let range = start..start + header.p_memsz as usize;
        match header.p_type {
            libc::PT_LOAD => {
                if header.p_flags & libc::PF_X != 0 {
                    text.push(range.clone());
                }
                segments.push(range);
            }
            libc::PT_GNU_EH_FRAME => eh_frame_hdr = Some(range),
            _ => {}
        }
    }
    let name = if info.dlpi_name.is_null() {
        Default::default()
    } else {
        // SAFETY: a non-null `dlpi_name` is a NUL-terminated string owned by the loader.
        unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    let path = if name.is_empty() && modules.is_empty() {
        std::fs::read_link("/proc/self/exe").unwrap_or_default()
    } else {
        PathBuf::from(name)
    };
    if !text.is_empty() {
        modules.push(Module {
            path,
            bias,
            text,
            eh_frame_hdr,
            segments,
        });
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_executable_contains_this_function() {
        let here = the_executable_contains_this_function as *const () as usize;
        let modules = loaded();
        let module = modules
            .iter()
            .find(|m| m.contains(here))
            .expect("a module holds this code");
        assert_eq!(module.path, std::env::current_exe().unwrap());
        assert!(module.eh_frame_hdr.is_some());
    }
}
