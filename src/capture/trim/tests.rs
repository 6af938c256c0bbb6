//! The symbol table's verdicts, the walk's budget, and the frames of memprof's that call the
//! program back left out.

use super::*;

/// Code at 0x1000..0x1100: an allocator shim, two std functions, two of the program's, one of
/// memprof's, and a gap no symbol covers.
fn sample() -> &'static Shown {
    let functions = [
        (0x1000..0x1010, "__rustc::__rust_alloc"),
        (
            0x1010..0x1030,
            "alloc::raw_vec::RawVecInner<A>::finish_grow",
        ),
        (0x1030..0x1040, "alloc::vec::Vec<T,A>::push"),
        (0x1040..0x1060, "app::build"),
        (0x1060..0x1080, "<app::Index as app::Load>::load"),
        (0x1080..0x1090, "memprof::types::tag"),
        // Shares a granule with `app::main` (0x10a0..0x10b0), which is then not shown.
        (0x10a0..0x10a8, "core::ptr::drop_in_place<app::Index>"),
        (0x10a8..0x10c0, "app::main"),
        (0x10f0..0x1200, "app::beyond_the_code"),
    ];
    Box::leak(Box::new(Shown::from_functions(
        0x1000..0x1100,
        functions.map(|(range, name)| (range, kind_of(name))),
    )))
}

/// What the symbol table tells of a function, by its demangled name.
fn kind_of(name: &str) -> Code {
    if frames::calls_program_by_name(name) {
        Code::CallsProgram
    } else if frames::is_shown_by_name(name) {
        Code::Shown
    } else {
        Code::Hidden
    }
}

/// Code at 0x1000..0x1200: the program's functions, and between them memprof's that call
/// them back: `with_labels` twice (two closures), a future wrapper's body and its `poll`,
/// one of them sharing its last granule with the program's.
fn with_calls() -> &'static Shown {
    let functions = [
        (0x1000..0x1010, "__rustc::__rust_alloc"),
        (0x1010..0x1030, "app::leaf"),
        (0x1030..0x1050, "memprof::labels::with_labels"),
        (0x1050..0x1070, "app::serve::{{closure}}"),
        (0x1070..0x1090, "app::serve"),
        (0x1090..0x10b0, "memprof::labels::with_labels"),
        (
            0x10b0..0x10c0,
            "memprof::labels::Labels::attach::{{closure}}",
        ),
        (
            0x10c0..0x10d8,
            "<memprof::labels::Attached<F> as core::future::future::Future>::poll",
        ),
        (0x10d8..0x10f0, "app::main"),
        (0x10f0..0x1100, "memprof::record::alloc"),
    ];
    Box::leak(Box::new(Shown::from_functions(
        0x1000..0x1200,
        functions.map(|(range, name)| (range, kind_of(name))),
    )))
}

#[test]
fn calls_of_the_program_are_known_by_granule() {
    let shown = with_calls();
    for address in [0x1030, 0x104f, 0x1090, 0x10b5, 0x10c5] {
        assert!(shown.calls_program(address), "{address:#x}");
    }
    // The program's code, memprof's other code, a granule shared with the program's, and
    // no code at all.
    for address in [
        0x1010,
        0x1055,
        0x10d0,
        0x10d8,
        0x10f5,
        0x1150,
        0xfff,
        0,
        usize::MAX,
    ] {
        assert!(!shown.calls_program(address), "{address:#x}");
    }
    assert!(!Shown::nothing().calls_program(0x1030));
}

/// The functions of the frames [`leave_out_calling`] keeps of `returns`, with `want`.
fn left(want: usize, returns: &[usize]) -> Vec<usize> {
    let mut frames: Vec<ReturnAddress> = returns.iter().map(|&r| ReturnAddress(r)).collect();
    let n = leave_out_calling(with_calls(), &mut frames, want);
    frames[..n].iter().map(|r| r.0).collect()
}

#[test]
fn calls_of_the_program_are_left_out_and_the_rest_cut_to_the_budget() {
    // Return addresses point one past the call.
    let shim = 0x1008;
    let leaf = 0x1020;
    let labels = 0x1040;
    let closure = 0x1060;
    let serve = 0x1080;
    let labels_2 = 0x10a0;
    let body = 0x10b8;
    let poll = 0x10c8;
    let main = 0x10e0;
    let own = 0x10f8;
    let stack = [
        own, shim, leaf, labels, closure, serve, labels_2, body, poll, main,
    ];
    assert_eq!(
        left(5, &stack),
        [own, shim, leaf, closure, serve, main],
        "the whole stack, shorter than the budget"
    );
    assert_eq!(left(2, &stack), [own, shim, leaf, closure]);
    assert_eq!(left(3, &stack), [own, shim, leaf, closure, serve]);
    // A return address at the start of a calling function follows a call at the end of the
    // program's function before it.
    assert_eq!(left(1, &[own, 0x1090, labels]), [own, 0x1090]);
    // Nothing to leave out.
    assert_eq!(
        left(2, &[shim, leaf, closure, serve]),
        [shim, leaf, closure]
    );
    assert_eq!(left(2, &[]), Vec::<usize>::new());
}

#[test]
fn shown_code_follows_the_report_names() {
    let shown = sample();
    let shown_at = [0x1040, 0x107f, 0x10b5, 0x10f5];
    let hidden_at = [
        0x1005,
        0x101f,
        0x1035,
        0x1088,
        0x1095,
        0x10a9,
        0x1100,
        0xfff,
        0,
        usize::MAX,
    ];
    for address in shown_at {
        assert!(shown.contains(address), "{address:#x}");
    }
    for address in hidden_at {
        assert!(!shown.contains(address), "{address:#x}");
    }
}

/// How many of `returns` a walk with a budget of `want` takes.
fn taken(want: usize, returns: &[usize]) -> usize {
    let mut budget = Budget {
        shown: sample(),
        want,
    };
    let mut limit = returns.len();
    for (n, &r) in returns.iter().enumerate() {
        if let Some(end) = budget.end_after(n + 1, r) {
            limit = limit.min(end);
        }
    }
    limit
}

#[test]
fn the_count_starts_at_the_first_shown_frame() {
    // Return addresses point one past the call: 0x1010 is a call at the end of the shim.
    let shim = 0x1010;
    let grow = 0x1020;
    let push = 0x1038;
    let build = 0x1050;
    let load = 0x1070;
    let own = 0x1088;
    let unknown = 0x1098;
    assert_eq!(taken(2, &[shim, grow, push, build, load, 0x10b0]), 5);
    assert_eq!(taken(1, &[shim, grow, push, build, load]), 4);
    // Before it, frames of memprof's and unknown ones do not count.
    assert_eq!(taken(1, &[own, unknown, shim, load, build]), 4);
    // After it, every frame counts, std, unknown and memprof's own too.
    assert_eq!(taken(3, &[shim, build, push, unknown, own, load]), 4);
    // A stack that ends first is taken whole.
    assert_eq!(taken(5, &[shim, grow, build]), 3);
    assert_eq!(taken(2, &[shim, grow]), 2);
}

#[test]
fn without_symbols_the_count_never_starts() {
    let mut budget = Budget::unlimited();
    assert!((1..1000).all(|r| budget.end_after(r, r * 8).is_none()));
    let mut budget = Budget {
        shown: &NONE,
        want: 1,
    };
    assert!((1..1000).all(|r| budget.end_after(r, r * 8).is_none()));
}

/// The names told without demangling are hidden when demangled too, on every function of
/// this test binary, and they are most of them.
#[test]
fn names_of_hidden_crates_agree_with_their_demangling() {
    let own = read as fn() -> Option<Shown> as usize;
    let module = modules::loaded()
        .into_iter()
        .find(|m| m.contains(own))
        .unwrap();
    let (mut told, mut all) = (0, 0);
    let mut demangled = Prefix::default();
    modules::for_each_function(&module.path, false, |_, _, name| {
        let Ok(name) = std::str::from_utf8(name) else {
            return;
        };
        all += 1;
        if in_hidden_crate(name) {
            told += 1;
            let shown = demangled.kind(name) == Code::Shown;
            assert!(!shown, "{name} is shown");
        }
    })
    .unwrap();
    assert!(told * 2 > all, "{told} of {all} told without demangling");
}

#[test]
fn mangled_calls_of_the_program() {
    let calling = [
        "_ZN7memprof6labels11with_labels17h0123456789abcdefE",
        "_ZN7memprof6labels6Labels6attach28_$u7b$$u7b$closure$u7d$$u7d$17hec0f0b61ec2f6a99E",
        "_ZN83_$LT$memprof..labels..Attached$LT$F$GT$$u20$as$u20$core..future..future..Future$GT$4poll17h0123456789abcdefE",
        "_RINvNtCs1234_7memprof6labels11with_labelsjNCNvCs5_3app4main0EB4_",
        "_RNvXs_NtCs1234_7memprof6labelsINtB4_8AttachedNtCs5_3app3FutENtNtNtCs6_4core6future6future6Future4poll",
    ];
    let demangled = |name: &str| format!("{:#}", rustc_demangle::demangle(name));
    for name in calling {
        assert!(may_call_program(name), "{name}");
        assert_eq!(
            Prefix::default().kind(name),
            Code::CallsProgram,
            "{}",
            demangled(name)
        );
    }
    let others = [
        "_ZN7memprof6record5alloc17h0123456789abcdefE",
        "_ZN3app11with_labels17h0123456789abcdefE",
        "_ZN4core3ptr226drop_in_place$LT$memprof..labels..Labels..attach$LT$F$GT$..$u7b$$u7b$closure$u7d$$u7d$$GT$17hfee0d030fbb54c8aE",
        "_RNvNtCs1234_7memprof6record5alloc",
        "main",
    ];
    for name in others {
        assert_ne!(
            Prefix::default().kind(name),
            Code::CallsProgram,
            "{}",
            demangled(name)
        );
    }
    assert!(!may_call_program("_ZN3app4main17h0123456789abcdefE"));
}

#[test]
fn mangled_crates() {
    let hidden = [
        "_ZN4core3fmt5write17h0123456789abcdefE",
        "_ZN4core3fmt5write17h0123456789abcdefE.llvm.1234",
        "_ZN3std2rt10lang_start17h0123456789abcdefE",
        "_ZN7memprof6record5alloc17h0123456789abcdefE",
        "_RNvNtCs1234_4core3fmt5write",
        "_RNvCsAbC_7memprof4main",
        "_RNvNtC5alloc3vec3new",
        "_RINvNtC4core3ptr13drop_in_placeNtC3app3FooEB4_",
        "_ZN47_$LT$app..Foo$u20$as$u20$core..fmt..Display$GT$3fmt17h0123456789abcdefE",
        "_ZN42_$LT$$RF$T$u20$as$u20$core..fmt..Debug$GT$3fmt17h0123456789abcdefE",
    ];
    let undecided = [
        "_ZN3app4main17h0123456789abcdefE",
        "_ZN4core17h0123456789abcdefE",
        "_ZN4core3fooEv",
        "_ZN41_$LT$app..Foo$u20$as$u20$app..Display$GT$3fmt17h0123456789abcdefE",
        "_ZN23_$LT$app..mycore..x$GT$3fmt17h0123456789abcdefE",
        "_RNvCs1234_3app4main",
        "_RINvMNtC4core3stre18trim_start_matchesReECs1_3app",
        "_RNvMNtC4core3fmtNtB2_9Formatter3pad",
        "main",
        "_ZN",
        "_R",
    ];
    for name in hidden {
        assert!(in_hidden_crate(name), "{name}");
    }
    for name in undecided {
        assert!(!in_hidden_crate(name), "{name}");
    }
}

#[test]
fn this_module_reads_its_own_symbols() {
    let shown = read().expect("the test binary has a symbol table");
    // memprof's own functions (the test's too: it lives in the crate under test) and std's
    // are not shown.
    let own = read as fn() -> Option<Shown> as usize;
    let test = this_module_reads_its_own_symbols as fn() as usize;
    let std_fn = std::thread::current as fn() -> std::thread::Thread as usize;
    for address in [own, test, std_fn] {
        assert!(!shown.contains(address), "{address:#x}");
    }
    assert!(shown.bits.iter().any(|word| *word != 0));
    // The body of the future `Labels::attach` returns, which the labels' tests poll.
    assert!(shown.calling.iter().any(|word| *word != 0));
}

#[test]
fn outside_code_takes_the_margin_unless_plain() {
    // Code outside the module counts as shown (the preloaded library); 0x5000..0x6000 is a
    // module of C alone.
    let shown: &'static Shown = Box::leak(Box::new(Shown {
        outside: true,
        plain: std::iter::once(0x5000..0x6000).collect(),
        ..Shown::from_functions(0x1000..0x1100, [])
    }));
    let walk = |returns: &[usize]| {
        let mut budget = Budget { shown, want: 2 };
        let mut limit = returns.len();
        for (n, &r) in returns.iter().enumerate() {
            if let Some(end) = budget.end_after(n + 1, r) {
                limit = limit.min(end);
            }
        }
        limit
    };
    let own = 0x1008;
    // The first frame outside in plain code: the depth alone.
    assert_eq!(
        walk(&[own, 0x5010, 0x5020, 0x5030, 0x5040, 0x5050, 0x5060]),
        3
    );
    // Elsewhere (C++, Rust, a module loaded since): the depth and the margin.
    assert_eq!(
        walk(&[own, 0x7010, 0x5020, 0x5030, 0x5040, 0x5050, 0x5060, 0x5070]),
        3 + OUTSIDE_MARGIN
    );
    // Past the plain code's end, and at its start.
    assert_eq!(shown.margin_after(0x6000), OUTSIDE_MARGIN);
    assert_eq!(shown.margin_after(0x5000), 0);
    assert_eq!(shown.margin_after(0x4fff), OUTSIDE_MARGIN);
    // The crate (nothing outside counts): never a margin.
    assert_eq!(sample().margin_after(0x5010), 0);
}

#[test]
fn the_c_library_is_plain_and_rust_code_is_not() {
    // This test binary is Rust: its code is never plain; the C library is.
    let plain = plain_code(0);
    let own = plain_code as fn(usize) -> Vec<Range<usize>> as usize;
    assert!(!plain.iter().any(|r| r.contains(&own)), "{plain:x?}");
    let libc = libc::malloc as unsafe extern "C" fn(usize) -> *mut libc::c_void as usize;
    assert!(plain.iter().any(|r| r.contains(&libc)), "{plain:x?}");
}
