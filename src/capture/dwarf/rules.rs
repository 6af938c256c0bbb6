//! The per-thread rule cache of the DWARF walk, and gimli's reading of the rules it holds.
//!
//! A rule is the row of call-frame information that covers one address, boiled down to what
//! compiled code nearly always says on x86-64: the canonical frame address (CFA, the caller's stack
//! pointer) is `rsp` or `rbp` plus an offset, the return address is at CFA − 8, and the caller's
//! `rbp` is the frame's own or saved at CFA plus an offset. Anything else becomes
//! [`Step::Framehop`]: framehop unwinds that frame.

#![forbid(unsafe_code)]

use addr2line::gimli::{
    self, BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, ParsedEhFrameHdr,
    RegisterRule, UnwindContext, UnwindSection, X86_64,
};

/// Sets of the cache; a power of two.
const SETS: usize = 512;
/// Entries per set: an address may sit in any of them, so a few hot addresses that hash alike do
/// not evict one another on every walk.
const WAYS: usize = 4;

/// What a [`Rule`] says to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// The CFA is `rsp + cfa_offset`.
    FromSp,
    /// The CFA is `rbp + cfa_offset`.
    FromBp,
    /// The call-frame information says something a rule cannot hold (an expression, another
    /// register, no entry at all): framehop unwinds this frame.
    Framehop,
    /// The return address is undefined: the outermost frame of the thread.
    End,
}

/// How to go from a frame to its caller's, for one address. The return address is at CFA − 8; the
/// caller's `rbp` is the frame's own (`bp_offset == 0`) or saved at CFA + `bp_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Rule {
    pub(super) step: Step,
    pub(super) cfa_offset: i32,
    pub(super) bp_offset: i16,
    /// In a module loaded before the first walk: trusted without asking the loader.
    pub(super) permanent: bool,
}

impl Rule {
    /// framehop unwinds the frame.
    pub(super) const FRAMEHOP: Rule = Rule {
        step: Step::Framehop,
        cfa_offset: 0,
        bp_offset: 0,
        permanent: false,
    };
}

/// One remembered rule; `address == 0` is an empty entry (no code lives at address 0).
#[derive(Clone, Copy, Debug)]
struct Entry {
    address: usize,
    rule: Rule,
}

const _: () = assert!(size_of::<Entry>() == 16, "four entries to a cache line");

const EMPTY: Entry = Entry {
    address: 0,
    rule: Rule::FRAMEHOP,
};

/// The rules of the addresses a thread's walks met, set-associative by address hash: 32 KiB.
pub(super) struct Rules {
    sets: Box<[[Entry; WAYS]]>,
    /// The registry the rules were read from (its address) and its count of modules marked gone;
    /// the rules are all forgotten when either changes.
    registry: (usize, u32),
}

impl Rules {
    /// An empty cache. Allocates.
    pub(super) fn new() -> Rules {
        Rules {
            sets: vec![[EMPTY; WAYS]; SETS].into_boxed_slice(),
            registry: (0, 0),
        }
    }

    #[inline(always)]
    fn set_of(address: usize) -> usize {
        ((address as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SETS.ilog2())) as usize
    }

    /// The rule remembered for `address`.
    #[inline(always)]
    pub(super) fn find(&self, address: usize) -> Option<Rule> {
        let set = self.sets.get(Self::set_of(address))?;
        set.iter().find(|e| e.address == address).map(|e| e.rule)
    }

    /// Remembers a rule, evicting the set's oldest.
    pub(super) fn insert(&mut self, address: usize, rule: Rule) {
        if let Some(set) = self.sets.get_mut(Self::set_of(address)) {
            set.rotate_right(1);
            set[0] = Entry { address, rule };
        }
    }

    /// Starts over if the rules were read from another registry than `registry`, or before it
    /// marked another module gone (`epoch` is its count of modules marked gone): a rule of code
    /// that was unloaded must not be used for what is loaded there next.
    #[inline]
    pub(super) fn use_registry<T>(&mut self, registry: &T, epoch: u32) {
        let registry = (registry as *const T as usize, epoch);
        if self.registry != registry {
            self.sets.fill([EMPTY; WAYS]);
            self.registry = registry;
        }
    }
}

/// Section data in gimli's terms.
type Slice = gimli::EndianSlice<'static, LittleEndian>;

/// A module's call-frame information as gimli reads it, at the addresses it is loaded at.
pub(super) struct Cfi {
    /// `.eh_frame_hdr`: the sorted index of the functions' entries.
    index: ParsedEhFrameHdr<Slice>,
    /// `.eh_frame`: the entries.
    frames: EhFrame<Slice>,
    /// Where both sections are loaded, for the pointers relative to them.
    bases: BaseAddresses,
}

impl Cfi {
    /// The tables `hdr` (`.eh_frame_hdr`, loaded at `hdr_address`) and `frames` (`.eh_frame`, at
    /// `frames_address`); `None` if the index cannot be parsed.
    pub(super) fn new(
        hdr: &'static [u8],
        hdr_address: u64,
        frames: &'static [u8],
        frames_address: u64,
    ) -> Option<Cfi> {
        let bases = BaseAddresses::default()
            .set_eh_frame_hdr(hdr_address)
            .set_eh_frame(frames_address);
        let index = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).ok()?;
        Some(Cfi {
            index,
            frames: EhFrame::new(frames, LittleEndian),
            bases,
        })
    }

    /// The rule of the code at `address`, read with gimli's scratch space `context`; not yet
    /// marked permanent.
    pub(super) fn rule(&self, address: usize, context: &mut UnwindContext<usize>) -> Rule {
        let Some(table) = self.index.table() else {
            return Rule::FRAMEHOP;
        };
        let Ok(row) = table.unwind_info_for_address(
            &self.frames,
            &self.bases,
            context,
            address as u64,
            EhFrame::cie_from_offset,
        ) else {
            return Rule::FRAMEHOP;
        };
        rule_of_row(
            row.cfa(),
            row.register(X86_64::RBP),
            row.register(X86_64::RA),
        )
        .unwrap_or(Rule::FRAMEHOP)
    }
}

/// What a row of call-frame information says about the CFA, `rbp` and the return address, as a
/// rule; `None` for anything a rule cannot hold.
fn rule_of_row(
    cfa: &CfaRule<usize>,
    bp: Option<RegisterRule<usize>>,
    ra: Option<RegisterRule<usize>>,
) -> Option<Rule> {
    let rule = |step, cfa_offset, bp_offset| Rule {
        step,
        cfa_offset,
        bp_offset,
        permanent: false,
    };
    match ra {
        None | Some(RegisterRule::Undefined) => return Some(rule(Step::End, 0, 0)),
        Some(RegisterRule::Offset(-8)) => {}
        Some(_) => return None,
    }
    let CfaRule::RegisterAndOffset { register, offset } = *cfa else {
        return None;
    };
    let step = match register {
        X86_64::RSP => Step::FromSp,
        X86_64::RBP => Step::FromBp,
        _ => return None,
    };
    let bp_offset = match bp {
        None | Some(RegisterRule::SameValue | RegisterRule::Undefined) => 0,
        Some(RegisterRule::Offset(offset)) if offset != 0 => i16::try_from(offset).ok()?,
        Some(_) => return None,
    };
    Some(rule(step, i32::try_from(offset).ok()?, bp_offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(register: gimli::Register, offset: i64) -> CfaRule<usize> {
        CfaRule::RegisterAndOffset { register, offset }
    }

    #[test]
    fn rows_of_compiled_code_become_rules() {
        let ra = Some(RegisterRule::Offset(-8));
        // Entry of a function: CFA = rsp + 8, rbp untouched.
        let entry = rule_of_row(&at(X86_64::RSP, 8), None, ra.clone()).unwrap();
        assert_eq!(
            (entry.step, entry.cfa_offset, entry.bp_offset),
            (Step::FromSp, 8, 0)
        );
        // After `push rbp; mov rbp, rsp`: CFA = rbp + 16, rbp saved at CFA − 16.
        let framed = rule_of_row(
            &at(X86_64::RBP, 16),
            Some(RegisterRule::Offset(-16)),
            ra.clone(),
        );
        let framed = framed.unwrap();
        assert_eq!(
            (framed.step, framed.cfa_offset, framed.bp_offset),
            (Step::FromBp, 16, -16)
        );
        // The outermost frame has no return address.
        let end = rule_of_row(&at(X86_64::RSP, 8), None, Some(RegisterRule::Undefined));
        assert_eq!(end.unwrap().step, Step::End);
        assert_eq!(
            rule_of_row(&at(X86_64::RSP, 8), None, None).unwrap().step,
            Step::End
        );
    }

    #[test]
    fn other_rows_go_to_framehop() {
        let ra = Some(RegisterRule::Offset(-8));
        let expression = CfaRule::Expression(gimli::UnwindExpression {
            offset: 0,
            length: 0,
        });
        assert_eq!(rule_of_row(&expression, None, ra.clone()), None);
        assert_eq!(rule_of_row(&at(X86_64::RAX, 8), None, ra.clone()), None);
        assert_eq!(
            rule_of_row(&at(X86_64::RSP, 8), None, Some(RegisterRule::Offset(-16))),
            None
        );
        let in_register = Some(RegisterRule::Register(X86_64::RAX));
        assert_eq!(
            rule_of_row(&at(X86_64::RSP, 8), in_register, ra.clone()),
            None
        );
        assert_eq!(rule_of_row(&at(X86_64::RSP, 1 << 40), None, ra), None);
    }

    #[test]
    fn the_cache_keeps_four_alike_and_forgets_on_a_new_registry_or_epoch() {
        let mut rules = Rules::new();
        let (first, second) = (0u8, 0u8);
        rules.use_registry(&first, 0);
        // Five addresses of one set: the oldest goes.
        let alike: Vec<usize> = (1..)
            .filter(|a| Rules::set_of(*a) == Rules::set_of(1))
            .take(WAYS + 1)
            .collect();
        let rule = |offset| Rule {
            cfa_offset: offset,
            step: Step::FromSp,
            ..Rule::FRAMEHOP
        };
        for (i, address) in alike.iter().enumerate() {
            rules.insert(*address, rule(i as i32));
        }
        assert_eq!(rules.find(alike[0]), None);
        for (i, address) in alike.iter().enumerate().skip(1) {
            assert_eq!(rules.find(*address), Some(rule(i as i32)));
        }
        rules.use_registry(&first, 0);
        assert!(rules.find(alike[1]).is_some());
        rules.use_registry(&first, 1);
        assert_eq!(rules.find(alike[1]), None);
        rules.insert(alike[1], rule(1));
        rules.use_registry(&second, 1);
        assert_eq!(rules.find(alike[1]), None);
    }
}
