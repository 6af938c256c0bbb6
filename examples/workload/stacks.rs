//! 100 allocating functions and 100 callers, written out one by one so that each has its own name
//! and its own source lines: every (caller, leaf) pair is a distinct context in a report, as the
//! call sites of a large program are. The work after each caller's call keeps it from being a
//! tail call, so the caller's frame stays on the stack.

use std::hint::black_box;

/// What every leaf allocates: 16 bytes.
pub type Block = Box<[u64; 2]>;
/// A function that allocates one block.
pub type LeafFn = fn() -> Block;
/// A function that calls a leaf and returns its block.
pub type MidFn = fn(LeafFn) -> Block;

#[inline(never)]
fn leaf_00() -> Block {
    Box::new([black_box(0), 1])
}

#[inline(never)]
fn leaf_01() -> Block {
    Box::new([black_box(1), 8])
}

#[inline(never)]
fn leaf_02() -> Block {
    Box::new([black_box(2), 15])
}

#[inline(never)]
fn leaf_03() -> Block {
    Box::new([black_box(3), 22])
}

#[inline(never)]
fn leaf_04() -> Block {
    Box::new([black_box(4), 29])
}

#[inline(never)]
fn leaf_05() -> Block {
    Box::new([black_box(5), 36])
}

#[inline(never)]
fn leaf_06() -> Block {
    Box::new([black_box(6), 43])
}

#[inline(never)]
fn leaf_07() -> Block {
    Box::new([black_box(7), 50])
}

#[inline(never)]
fn leaf_08() -> Block {
    Box::new([black_box(8), 57])
}

#[inline(never)]
fn leaf_09() -> Block {
    Box::new([black_box(9), 64])
}

#[inline(never)]
fn leaf_10() -> Block {
    Box::new([black_box(10), 71])
}

#[inline(never)]
fn leaf_11() -> Block {
    Box::new([black_box(11), 78])
}

#[inline(never)]
fn leaf_12() -> Block {
    Box::new([black_box(12), 85])
}

#[inline(never)]
fn leaf_13() -> Block {
    Box::new([black_box(13), 92])
}

#[inline(never)]
fn leaf_14() -> Block {
    Box::new([black_box(14), 99])
}

#[inline(never)]
fn leaf_15() -> Block {
    Box::new([black_box(15), 106])
}

#[inline(never)]
fn leaf_16() -> Block {
    Box::new([black_box(16), 113])
}

#[inline(never)]
fn leaf_17() -> Block {
    Box::new([black_box(17), 120])
}

#[inline(never)]
fn leaf_18() -> Block {
    Box::new([black_box(18), 127])
}

#[inline(never)]
fn leaf_19() -> Block {
    Box::new([black_box(19), 134])
}

#[inline(never)]
fn leaf_20() -> Block {
    Box::new([black_box(20), 141])
}

#[inline(never)]
fn leaf_21() -> Block {
    Box::new([black_box(21), 148])
}

#[inline(never)]
fn leaf_22() -> Block {
    Box::new([black_box(22), 155])
}

#[inline(never)]
fn leaf_23() -> Block {
    Box::new([black_box(23), 162])
}

#[inline(never)]
fn leaf_24() -> Block {
    Box::new([black_box(24), 169])
}

#[inline(never)]
fn leaf_25() -> Block {
    Box::new([black_box(25), 176])
}

#[inline(never)]
fn leaf_26() -> Block {
    Box::new([black_box(26), 183])
}

#[inline(never)]
fn leaf_27() -> Block {
    Box::new([black_box(27), 190])
}

#[inline(never)]
fn leaf_28() -> Block {
    Box::new([black_box(28), 197])
}

#[inline(never)]
fn leaf_29() -> Block {
    Box::new([black_box(29), 204])
}

#[inline(never)]
fn leaf_30() -> Block {
    Box::new([black_box(30), 211])
}

#[inline(never)]
fn leaf_31() -> Block {
    Box::new([black_box(31), 218])
}

#[inline(never)]
fn leaf_32() -> Block {
    Box::new([black_box(32), 225])
}

#[inline(never)]
fn leaf_33() -> Block {
    Box::new([black_box(33), 232])
}

#[inline(never)]
fn leaf_34() -> Block {
    Box::new([black_box(34), 239])
}

#[inline(never)]
fn leaf_35() -> Block {
    Box::new([black_box(35), 246])
}

#[inline(never)]
fn leaf_36() -> Block {
    Box::new([black_box(36), 253])
}

#[inline(never)]
fn leaf_37() -> Block {
    Box::new([black_box(37), 260])
}

#[inline(never)]
fn leaf_38() -> Block {
    Box::new([black_box(38), 267])
}

#[inline(never)]
fn leaf_39() -> Block {
    Box::new([black_box(39), 274])
}

#[inline(never)]
fn leaf_40() -> Block {
    Box::new([black_box(40), 281])
}

#[inline(never)]
fn leaf_41() -> Block {
    Box::new([black_box(41), 288])
}

#[inline(never)]
fn leaf_42() -> Block {
    Box::new([black_box(42), 295])
}

#[inline(never)]
fn leaf_43() -> Block {
    Box::new([black_box(43), 302])
}

#[inline(never)]
fn leaf_44() -> Block {
    Box::new([black_box(44), 309])
}

#[inline(never)]
fn leaf_45() -> Block {
    Box::new([black_box(45), 316])
}

#[inline(never)]
fn leaf_46() -> Block {
    Box::new([black_box(46), 323])
}

#[inline(never)]
fn leaf_47() -> Block {
    Box::new([black_box(47), 330])
}

#[inline(never)]
fn leaf_48() -> Block {
    Box::new([black_box(48), 337])
}

#[inline(never)]
fn leaf_49() -> Block {
    Box::new([black_box(49), 344])
}

#[inline(never)]
fn leaf_50() -> Block {
    Box::new([black_box(50), 351])
}

#[inline(never)]
fn leaf_51() -> Block {
    Box::new([black_box(51), 358])
}

#[inline(never)]
fn leaf_52() -> Block {
    Box::new([black_box(52), 365])
}

#[inline(never)]
fn leaf_53() -> Block {
    Box::new([black_box(53), 372])
}

#[inline(never)]
fn leaf_54() -> Block {
    Box::new([black_box(54), 379])
}

#[inline(never)]
fn leaf_55() -> Block {
    Box::new([black_box(55), 386])
}

#[inline(never)]
fn leaf_56() -> Block {
    Box::new([black_box(56), 393])
}

#[inline(never)]
fn leaf_57() -> Block {
    Box::new([black_box(57), 400])
}

#[inline(never)]
fn leaf_58() -> Block {
    Box::new([black_box(58), 407])
}

#[inline(never)]
fn leaf_59() -> Block {
    Box::new([black_box(59), 414])
}

#[inline(never)]
fn leaf_60() -> Block {
    Box::new([black_box(60), 421])
}

#[inline(never)]
fn leaf_61() -> Block {
    Box::new([black_box(61), 428])
}

#[inline(never)]
fn leaf_62() -> Block {
    Box::new([black_box(62), 435])
}

#[inline(never)]
fn leaf_63() -> Block {
    Box::new([black_box(63), 442])
}

#[inline(never)]
fn leaf_64() -> Block {
    Box::new([black_box(64), 449])
}

#[inline(never)]
fn leaf_65() -> Block {
    Box::new([black_box(65), 456])
}

#[inline(never)]
fn leaf_66() -> Block {
    Box::new([black_box(66), 463])
}

#[inline(never)]
fn leaf_67() -> Block {
    Box::new([black_box(67), 470])
}

#[inline(never)]
fn leaf_68() -> Block {
    Box::new([black_box(68), 477])
}

#[inline(never)]
fn leaf_69() -> Block {
    Box::new([black_box(69), 484])
}

#[inline(never)]
fn leaf_70() -> Block {
    Box::new([black_box(70), 491])
}

#[inline(never)]
fn leaf_71() -> Block {
    Box::new([black_box(71), 498])
}

#[inline(never)]
fn leaf_72() -> Block {
    Box::new([black_box(72), 505])
}

#[inline(never)]
fn leaf_73() -> Block {
    Box::new([black_box(73), 512])
}

#[inline(never)]
fn leaf_74() -> Block {
    Box::new([black_box(74), 519])
}

#[inline(never)]
fn leaf_75() -> Block {
    Box::new([black_box(75), 526])
}

#[inline(never)]
fn leaf_76() -> Block {
    Box::new([black_box(76), 533])
}

#[inline(never)]
fn leaf_77() -> Block {
    Box::new([black_box(77), 540])
}

#[inline(never)]
fn leaf_78() -> Block {
    Box::new([black_box(78), 547])
}

#[inline(never)]
fn leaf_79() -> Block {
    Box::new([black_box(79), 554])
}

#[inline(never)]
fn leaf_80() -> Block {
    Box::new([black_box(80), 561])
}

#[inline(never)]
fn leaf_81() -> Block {
    Box::new([black_box(81), 568])
}

#[inline(never)]
fn leaf_82() -> Block {
    Box::new([black_box(82), 575])
}

#[inline(never)]
fn leaf_83() -> Block {
    Box::new([black_box(83), 582])
}

#[inline(never)]
fn leaf_84() -> Block {
    Box::new([black_box(84), 589])
}

#[inline(never)]
fn leaf_85() -> Block {
    Box::new([black_box(85), 596])
}

#[inline(never)]
fn leaf_86() -> Block {
    Box::new([black_box(86), 603])
}

#[inline(never)]
fn leaf_87() -> Block {
    Box::new([black_box(87), 610])
}

#[inline(never)]
fn leaf_88() -> Block {
    Box::new([black_box(88), 617])
}

#[inline(never)]
fn leaf_89() -> Block {
    Box::new([black_box(89), 624])
}

#[inline(never)]
fn leaf_90() -> Block {
    Box::new([black_box(90), 631])
}

#[inline(never)]
fn leaf_91() -> Block {
    Box::new([black_box(91), 638])
}

#[inline(never)]
fn leaf_92() -> Block {
    Box::new([black_box(92), 645])
}

#[inline(never)]
fn leaf_93() -> Block {
    Box::new([black_box(93), 652])
}

#[inline(never)]
fn leaf_94() -> Block {
    Box::new([black_box(94), 659])
}

#[inline(never)]
fn leaf_95() -> Block {
    Box::new([black_box(95), 666])
}

#[inline(never)]
fn leaf_96() -> Block {
    Box::new([black_box(96), 673])
}

#[inline(never)]
fn leaf_97() -> Block {
    Box::new([black_box(97), 680])
}

#[inline(never)]
fn leaf_98() -> Block {
    Box::new([black_box(98), 687])
}

#[inline(never)]
fn leaf_99() -> Block {
    Box::new([black_box(99), 694])
}

#[inline(never)]
fn mid_00(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(0);
    block
}

#[inline(never)]
fn mid_01(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(1);
    block
}

#[inline(never)]
fn mid_02(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(2);
    block
}

#[inline(never)]
fn mid_03(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(3);
    block
}

#[inline(never)]
fn mid_04(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(4);
    block
}

#[inline(never)]
fn mid_05(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(5);
    block
}

#[inline(never)]
fn mid_06(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(6);
    block
}

#[inline(never)]
fn mid_07(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(7);
    block
}

#[inline(never)]
fn mid_08(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(8);
    block
}

#[inline(never)]
fn mid_09(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(9);
    block
}

#[inline(never)]
fn mid_10(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(10);
    block
}

#[inline(never)]
fn mid_11(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(11);
    block
}

#[inline(never)]
fn mid_12(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(12);
    block
}

#[inline(never)]
fn mid_13(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(13);
    block
}

#[inline(never)]
fn mid_14(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(14);
    block
}

#[inline(never)]
fn mid_15(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(15);
    block
}

#[inline(never)]
fn mid_16(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(16);
    block
}

#[inline(never)]
fn mid_17(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(17);
    block
}

#[inline(never)]
fn mid_18(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(18);
    block
}

#[inline(never)]
fn mid_19(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(19);
    block
}

#[inline(never)]
fn mid_20(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(20);
    block
}

#[inline(never)]
fn mid_21(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(21);
    block
}

#[inline(never)]
fn mid_22(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(22);
    block
}

#[inline(never)]
fn mid_23(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(23);
    block
}

#[inline(never)]
fn mid_24(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(24);
    block
}

#[inline(never)]
fn mid_25(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(25);
    block
}

#[inline(never)]
fn mid_26(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(26);
    block
}

#[inline(never)]
fn mid_27(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(27);
    block
}

#[inline(never)]
fn mid_28(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(28);
    block
}

#[inline(never)]
fn mid_29(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(29);
    block
}

#[inline(never)]
fn mid_30(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(30);
    block
}

#[inline(never)]
fn mid_31(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(31);
    block
}

#[inline(never)]
fn mid_32(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(32);
    block
}

#[inline(never)]
fn mid_33(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(33);
    block
}

#[inline(never)]
fn mid_34(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(34);
    block
}

#[inline(never)]
fn mid_35(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(35);
    block
}

#[inline(never)]
fn mid_36(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(36);
    block
}

#[inline(never)]
fn mid_37(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(37);
    block
}

#[inline(never)]
fn mid_38(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(38);
    block
}

#[inline(never)]
fn mid_39(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(39);
    block
}

#[inline(never)]
fn mid_40(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(40);
    block
}

#[inline(never)]
fn mid_41(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(41);
    block
}

#[inline(never)]
fn mid_42(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(42);
    block
}

#[inline(never)]
fn mid_43(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(43);
    block
}

#[inline(never)]
fn mid_44(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(44);
    block
}

#[inline(never)]
fn mid_45(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(45);
    block
}

#[inline(never)]
fn mid_46(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(46);
    block
}

#[inline(never)]
fn mid_47(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(47);
    block
}

#[inline(never)]
fn mid_48(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(48);
    block
}

#[inline(never)]
fn mid_49(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(49);
    block
}

#[inline(never)]
fn mid_50(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(50);
    block
}

#[inline(never)]
fn mid_51(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(51);
    block
}

#[inline(never)]
fn mid_52(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(52);
    block
}

#[inline(never)]
fn mid_53(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(53);
    block
}

#[inline(never)]
fn mid_54(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(54);
    block
}

#[inline(never)]
fn mid_55(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(55);
    block
}

#[inline(never)]
fn mid_56(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(56);
    block
}

#[inline(never)]
fn mid_57(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(57);
    block
}

#[inline(never)]
fn mid_58(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(58);
    block
}

#[inline(never)]
fn mid_59(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(59);
    block
}

#[inline(never)]
fn mid_60(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(60);
    block
}

#[inline(never)]
fn mid_61(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(61);
    block
}

#[inline(never)]
fn mid_62(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(62);
    block
}

#[inline(never)]
fn mid_63(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(63);
    block
}

#[inline(never)]
fn mid_64(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(64);
    block
}

#[inline(never)]
fn mid_65(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(65);
    block
}

#[inline(never)]
fn mid_66(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(66);
    block
}

#[inline(never)]
fn mid_67(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(67);
    block
}

#[inline(never)]
fn mid_68(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(68);
    block
}

#[inline(never)]
fn mid_69(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(69);
    block
}

#[inline(never)]
fn mid_70(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(70);
    block
}

#[inline(never)]
fn mid_71(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(71);
    block
}

#[inline(never)]
fn mid_72(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(72);
    block
}

#[inline(never)]
fn mid_73(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(73);
    block
}

#[inline(never)]
fn mid_74(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(74);
    block
}

#[inline(never)]
fn mid_75(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(75);
    block
}

#[inline(never)]
fn mid_76(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(76);
    block
}

#[inline(never)]
fn mid_77(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(77);
    block
}

#[inline(never)]
fn mid_78(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(78);
    block
}

#[inline(never)]
fn mid_79(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(79);
    block
}

#[inline(never)]
fn mid_80(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(80);
    block
}

#[inline(never)]
fn mid_81(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(81);
    block
}

#[inline(never)]
fn mid_82(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(82);
    block
}

#[inline(never)]
fn mid_83(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(83);
    block
}

#[inline(never)]
fn mid_84(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(84);
    block
}

#[inline(never)]
fn mid_85(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(85);
    block
}

#[inline(never)]
fn mid_86(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(86);
    block
}

#[inline(never)]
fn mid_87(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(87);
    block
}

#[inline(never)]
fn mid_88(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(88);
    block
}

#[inline(never)]
fn mid_89(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(89);
    block
}

#[inline(never)]
fn mid_90(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(90);
    block
}

#[inline(never)]
fn mid_91(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(91);
    block
}

#[inline(never)]
fn mid_92(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(92);
    block
}

#[inline(never)]
fn mid_93(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(93);
    block
}

#[inline(never)]
fn mid_94(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(94);
    block
}

#[inline(never)]
fn mid_95(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(95);
    block
}

#[inline(never)]
fn mid_96(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(96);
    block
}

#[inline(never)]
fn mid_97(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(97);
    block
}

#[inline(never)]
fn mid_98(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(98);
    block
}

#[inline(never)]
fn mid_99(leaf: LeafFn) -> Block {
    let block = leaf();
    black_box(99);
    block
}

/// The leaves, in order.
pub static LEAVES: [LeafFn; 100] = [
    leaf_00, leaf_01, leaf_02, leaf_03, leaf_04, leaf_05, leaf_06, leaf_07, leaf_08, leaf_09,
    leaf_10, leaf_11, leaf_12, leaf_13, leaf_14, leaf_15, leaf_16, leaf_17, leaf_18, leaf_19,
    leaf_20, leaf_21, leaf_22, leaf_23, leaf_24, leaf_25, leaf_26, leaf_27, leaf_28, leaf_29,
    leaf_30, leaf_31, leaf_32, leaf_33, leaf_34, leaf_35, leaf_36, leaf_37, leaf_38, leaf_39,
    leaf_40, leaf_41, leaf_42, leaf_43, leaf_44, leaf_45, leaf_46, leaf_47, leaf_48, leaf_49,
    leaf_50, leaf_51, leaf_52, leaf_53, leaf_54, leaf_55, leaf_56, leaf_57, leaf_58, leaf_59,
    leaf_60, leaf_61, leaf_62, leaf_63, leaf_64, leaf_65, leaf_66, leaf_67, leaf_68, leaf_69,
    leaf_70, leaf_71, leaf_72, leaf_73, leaf_74, leaf_75, leaf_76, leaf_77, leaf_78, leaf_79,
    leaf_80, leaf_81, leaf_82, leaf_83, leaf_84, leaf_85, leaf_86, leaf_87, leaf_88, leaf_89,
    leaf_90, leaf_91, leaf_92, leaf_93, leaf_94, leaf_95, leaf_96, leaf_97, leaf_98, leaf_99,
];

/// The callers, in order.
pub static MIDS: [MidFn; 100] = [
    mid_00, mid_01, mid_02, mid_03, mid_04, mid_05, mid_06, mid_07, mid_08, mid_09, mid_10, mid_11,
    mid_12, mid_13, mid_14, mid_15, mid_16, mid_17, mid_18, mid_19, mid_20, mid_21, mid_22, mid_23,
    mid_24, mid_25, mid_26, mid_27, mid_28, mid_29, mid_30, mid_31, mid_32, mid_33, mid_34, mid_35,
    mid_36, mid_37, mid_38, mid_39, mid_40, mid_41, mid_42, mid_43, mid_44, mid_45, mid_46, mid_47,
    mid_48, mid_49, mid_50, mid_51, mid_52, mid_53, mid_54, mid_55, mid_56, mid_57, mid_58, mid_59,
    mid_60, mid_61, mid_62, mid_63, mid_64, mid_65, mid_66, mid_67, mid_68, mid_69, mid_70, mid_71,
    mid_72, mid_73, mid_74, mid_75, mid_76, mid_77, mid_78, mid_79, mid_80, mid_81, mid_82, mid_83,
    mid_84, mid_85, mid_86, mid_87, mid_88, mid_89, mid_90, mid_91, mid_92, mid_93, mid_94, mid_95,
    mid_96, mid_97, mid_98, mid_99,
];
