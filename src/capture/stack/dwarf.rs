//! The DWARF unwinder (placeholder until the framehop-based walker lands): walks frame pointers.

use super::ReturnAddress;

/// Captures return addresses, innermost first.
pub fn walk(out: &mut [ReturnAddress]) -> usize {
    super::fp::walk(out)
}
