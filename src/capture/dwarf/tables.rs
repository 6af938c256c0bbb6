//! Where a loaded module's unwind tables are: `.eh_frame_hdr` (the sorted index of functions),
//! found by the module's program headers, and `.eh_frame` (the rules), found from the pointer in
//! the index's header; both as slices of the mapped image, in framehop's and gimli's terms.
//!
//! The slices are `'static` in type only: a module the program started with stays loaded, and one
//! loaded later is read only while the registry knows it to be loaded, holding the loader's lock
//! (see [`Registry::locked`](super::registry::Registry::locked)).

use super::rules::Cfi;
use crate::modules::Module;
use framehop::ExplicitModuleSectionInfo;
use std::ops::Range;

/// Section data: a slice of a loaded module's mapped image.
pub(super) type Section = &'static [u8];

/// gimli's view of the tables given to framehop, for a module loaded `bias` bytes away from
/// its stated addresses. Parses the header of `.eh_frame_hdr`: call it where the tables were
/// found, while the loader lists the module.
pub(super) fn cfi_of(tables: &ExplicitModuleSectionInfo<Section>, bias: usize) -> Option<Cfi> {
    let loaded =
        |stated: &Option<Range<u64>>| stated.as_ref().map(|r| r.start.wrapping_add(bias as u64));
    Cfi::new(
        tables.eh_frame_hdr?,
        loaded(&tables.eh_frame_hdr_svma)?,
        tables.eh_frame?,
        loaded(&tables.eh_frame_svma)?,
    )
}

/// `.eh_frame_hdr` and `.eh_frame` of a loaded module, as framehop wants them; `None` if the
/// module has no `.eh_frame_hdr` or it cannot be made sense of. Reads the header of
/// `.eh_frame_hdr`.
///
/// # Safety
///
/// `module` must be mapped as listed during the call (the loader is listing it: the call is made
/// inside [`modules::with_loaded`](crate::modules::with_loaded)'s callback for it). The slices
/// returned may be read later only while the module is known to be still loaded.
pub(super) unsafe fn unwind_tables(module: &Module) -> Option<ExplicitModuleSectionInfo<Section>> {
    let hdr = module.eh_frame_hdr.clone()?;
    if !module
        .segments
        .iter()
        .any(|s| s.start <= hdr.start && hdr.end <= s.end)
    {
        return None;
    }
    // SAFETY: `hdr` lies inside a `PT_LOAD` segment of the module (checked above), which the
    // loader mapped readable (it holds `.eh_frame_hdr`) and which stays mapped during this call
    // (guaranteed by the caller), when its header is read; later reads are the caller's to make
    // safe.
    let hdr_bytes = unsafe { mapped(hdr.start, hdr.end - hdr.start) };
    let frame_start = eh_frame_address(hdr_bytes, hdr.start, module.bias)?;
    // `.eh_frame` has no length of its own here: it runs at most to the end of its segment
    // (gimli reads only the entries the index points to, each of which has its length).
    let frame_segment = module.segments.iter().find(|s| s.contains(&frame_start))?;
    let frame = frame_start..frame_segment.end;
    // SAFETY: as for `hdr_bytes`: `frame` lies inside a `PT_LOAD` segment of the module.
    let frame_bytes = unsafe { mapped(frame.start, frame.end - frame.start) };
    let stated = |r: &Range<usize>| {
        r.start.wrapping_sub(module.bias) as u64..r.end.wrapping_sub(module.bias) as u64
    };
    Some(ExplicitModuleSectionInfo {
        base_svma: 0,
        eh_frame_hdr_svma: Some(stated(&hdr)),
        eh_frame_hdr: Some(hdr_bytes),
        eh_frame_svma: Some(stated(&frame)),
        eh_frame: Some(frame_bytes),
        ..Default::default()
    })
}

/// A slice of mapped module memory.
///
/// # Safety
///
/// `[start, start + len)` must lie in a segment of a loaded module, readable, and be read only
/// while the module stays mapped (for modules that may be unloaded, under the loader's lock with
/// the registry known to be valid).
unsafe fn mapped(start: usize, len: usize) -> &'static [u8] {
    // SAFETY: the caller guarantees that the range is mapped and readable; it is never
    // written (loaded segments holding unwind tables are read-only).
    unsafe { std::slice::from_raw_parts(start as *const u8, len) }
}

/// The address of `.eh_frame`, from the header of `.eh_frame_hdr` (`hdr`, loaded at
/// `hdr_address`): version 1, then the encoding of the `eh_frame_ptr` field, two more encoding
/// bytes, and the field itself.
fn eh_frame_address(hdr: &[u8], hdr_address: usize, bias: usize) -> Option<usize> {
    const PCREL: u8 = 0x10;
    const DATAREL: u8 = 0x30;
    let [1, encoding, _, _, field @ ..] = hdr else {
        return None;
    };
    let value = read_encoded(field, encoding & 0x0f)?;
    let base = match encoding & 0x70 {
        // A stated address: where the file says, moved by the load bias.
        0 => bias,
        PCREL => hdr_address.wrapping_add(4),
        DATAREL => hdr_address,
        _ => return None,
    };
    // Indirect (0x80) and omitted (0xff) pointers are not used for this field in practice.
    if encoding & 0x80 != 0 {
        return None;
    }
    Some(base.wrapping_add(value as usize))
}

/// Reads a fixed-size DWARF EH pointer of format `format` (low nibble of its encoding byte),
/// sign-extending the signed ones.
fn read_encoded(bytes: &[u8], format: u8) -> Option<u64> {
    fn take<const N: usize>(bytes: &[u8]) -> Option<[u8; N]> {
        bytes.get(..N)?.try_into().ok()
    }
    Some(match format {
        0x00 | 0x04 => u64::from_le_bytes(take(bytes)?),
        0x0c => i64::from_le_bytes(take(bytes)?) as u64,
        0x02 => u64::from(u16::from_le_bytes(take(bytes)?)),
        0x0a => i16::from_le_bytes(take(bytes)?) as u64,
        0x03 => u64::from(u32::from_le_bytes(take(bytes)?)),
        0x0b => i32::from_le_bytes(take(bytes)?) as u64,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eh_frame_pointer_encodings() {
        let hdr = |enc: u8, field: &[u8]| [&[1, enc, 0x03, 0x3b][..], field].concat();
        // pcrel | sdata4: relative to the field, 4 bytes into the header.
        let h = hdr(0x1b, &(-0x40i32).to_le_bytes());
        assert_eq!(eh_frame_address(&h, 0x1000, 0), Some(0x1004 - 0x40));
        // datarel | udata4: relative to the header.
        let h = hdr(0x33, &0x80u32.to_le_bytes());
        assert_eq!(eh_frame_address(&h, 0x1000, 0), Some(0x1080));
        // absptr: a stated address, moved by the bias.
        let h = hdr(0x00, &0x2000u64.to_le_bytes());
        assert_eq!(eh_frame_address(&h, 0x1000, 0x5000), Some(0x7000));
        // Unsupported: omitted, indirect, uleb128, wrong version, truncated.
        assert_eq!(eh_frame_address(&hdr(0xff, &[0; 8]), 0, 0), None);
        assert_eq!(eh_frame_address(&hdr(0x9b, &[0; 8]), 0, 0), None);
        assert_eq!(eh_frame_address(&hdr(0x01, &[0; 8]), 0, 0), None);
        assert_eq!(
            eh_frame_address(&[2, 0x1b, 3, 0x3b, 0, 0, 0, 0], 0, 0),
            None
        );
        assert_eq!(eh_frame_address(&hdr(0x1b, &[0; 2]), 0, 0), None);
    }
}
