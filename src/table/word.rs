//! How a block is packed into one word: the size and the stack id side by side, with two escapes
//! to maps beside the blocks ([`super::side`]) for what does not fit.
//!
//! One word per block keeps a block's entry in its side table at 16 bytes with its address, and
//! lets the allocation and free paths skip the maps beside it for all but the rare blocks that
//! need them.

use super::Block;
use crate::address::StackId;

/// How a block is stored: one word, in [`Side::blocks`]. The low half is the size
/// plus one (so a stored word is never 0), or [`LARGE`] when the size is kept in [`Side::large`];
/// the high half is the stack id, with [`TAGGED`] set when the block has a tag in [`Side::tags`].
///
/// [`Side::blocks`]: super::side::Side::blocks
/// [`Side::large`]: super::side::Side::large
/// [`Side::tags`]: super::side::Side::tags
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Word(pub(super) u64);

/// A size field that says the size is kept in [`Side::large`](super::side::Side::large).
pub(super) const LARGE: u32 = u32::MAX;
/// The bit of the stack field that says the block has a tag; stack ids stay below it.
const TAGGED: u32 = 1 << 31;

impl Word {
    #[inline]
    pub(super) fn new(block: &Block) -> Word {
        let size = block
            .size
            .checked_add(1)
            .and_then(|s| u32::try_from(s).ok())
            .filter(|&s| s != LARGE)
            .unwrap_or(LARGE);
        let tagged = if block.tag != 0 { TAGGED } else { 0 };
        let stack = block.stack.0 & !TAGGED | tagged;
        Word(u64::from(size) | u64::from(stack) << 32)
    }

    pub(super) fn is_large(self) -> bool {
        self.0 as u32 == LARGE
    }

    pub(super) fn is_tagged(self) -> bool {
        (self.0 >> 32) as u32 & TAGGED != 0
    }

    pub(super) fn stack(self) -> StackId {
        StackId((self.0 >> 32) as u32 & !TAGGED)
    }

    /// Whether part of the block is kept in the side tables.
    pub(super) fn has_side(self) -> bool {
        self.is_large() || self.is_tagged()
    }

    /// The size, when it is kept in the word.
    pub(super) fn small_size(self) -> u64 {
        u64::from(self.0 as u32 - 1)
    }

    /// The block, when nothing of it is kept in the side tables.
    pub(super) fn block(self) -> Block {
        Block {
            size: self.small_size(),
            stack: self.stack(),
            tag: 0,
        }
    }
}
