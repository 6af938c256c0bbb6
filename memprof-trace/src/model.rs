//! What the encoder and the decoder of a chunk both keep of its events so far (the format's
//! references to recent addresses, stacks and sizes), and the integer mappings both sides use.

/// Recent addresses a chunk's events refer to by position (see `docs/trace-format.md`).
pub(crate) const ADDRESSES: usize = 32;

/// Recent stack ids likewise.
pub(crate) const STACKS: usize = 8;

/// Slots of the last size allocated, by stack id modulo this.
pub(crate) const SIZES: usize = 256;

/// The columns of an `EVENTS` record.
pub(crate) const HEADS: usize = 0;
pub(crate) const ADDRESS: usize = 1;
pub(crate) const STACK: usize = 2;
pub(crate) const SIZE: usize = 3;

/// Zigzag: small magnitudes of either sign to small unsigned numbers.
#[inline]
pub(crate) fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

#[inline]
pub(crate) fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

/// What the encoder and the decoder of a chunk both remember of its events so far, to store an
/// event's address, stack and size by reference to them: the last [`ADDRESSES`] distinct
/// addresses and [`STACKS`] stack ids, most recent first, and the last size allocated from each
/// slot of stack ids. Allocators hand out the blocks just freed, and programs free the blocks just
/// allocated, so most addresses are among the recent ones.
#[derive(Clone, Debug)]
pub(crate) struct Model {
    pub(crate) addresses: [u64; ADDRESSES],
    pub(crate) stacks: [u32; STACKS],
    pub(crate) sizes: Box<[u64; SIZES]>,
}

impl Model {
    pub(crate) fn new() -> Model {
        Model {
            addresses: [0; ADDRESSES],
            stacks: [0; STACKS],
            sizes: Box::new([0; SIZES]),
        }
    }

    pub(crate) fn reset(&mut self) {
        self.addresses = [0; ADDRESSES];
        self.stacks = [0; STACKS];
        self.sizes.fill(0);
    }

    /// Moves `value`, at `from` (the last place when it was not there), to the front.
    #[inline]
    pub(crate) fn front<T: Copy>(list: &mut [T], from: usize, value: T) {
        // A plain loop: the lists are short, and most moves are of a few places, for which a
        // call to `memmove` costs more than the move.
        if from == 0 {
            list[0] = value;
            return;
        }
        for i in (1..=from.min(list.len() - 1)).rev() {
            list[i] = list[i - 1];
        }
        list[0] = value;
    }

    /// The size slot of `stack`.
    #[inline]
    pub(crate) fn size_slot(stack: u32) -> usize {
        stack as usize % SIZES
    }
}
