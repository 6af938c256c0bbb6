//! Code addresses as the stack walk finds them.
//!
//! A shared building block: the walkers produce [`ReturnAddress`]es, the table interns them and
//! the symbolizer looks them up.

#![forbid(unsafe_code)]

/// The address a call returns to: the instruction *after* the call.
///
/// Symbolizing it as is names the line after the call (or the next function); look up
/// [`ReturnAddress::lookup_address`] instead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct ReturnAddress(pub usize);

/// A stack's index in the table's stack table: what the allocation path, the trace and every
/// reader pass around to name a stack, so it lives here, below all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StackId(pub u32);

impl ReturnAddress {
    /// An address inside the call instruction itself, the one to give to a symbolizer.
    #[inline]
    pub fn lookup_address(self) -> usize {
        self.0.saturating_sub(1)
    }
}
