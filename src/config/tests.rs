//! The configuration read from variables: values taken, values refused with a warning.
use super::*;

#[test]
fn unknown_names_warn_once() {
    let names = [
        "MEMPROF_DEPTH",
        "PATH",
        "MEMPROF_SAMPLE",
        "MEMPROF_TRACE",
        "MEMPROF_TEST_X",
    ];
    assert_eq!(
        unknown_names_warning(names.iter().map(|n| n.to_string())).as_deref(),
        Some(
            "MEMPROF_DEPTH, MEMPROF_SAMPLE are not one of memprof's variables \
             (docs/configuration.md lists them); ignored"
        )
    );
    let known = [
        "MEMPROF_BLESS",
        "MEMPROF_REQUIRE_TOOLS",
        "MEMPROF_EXPECT_FP",
        "MEMPROF_RUN_PID",
    ];
    assert_eq!(
        unknown_names_warning(known.iter().map(|n| n.to_string())),
        None
    );
}

#[test]
fn empty_values_warn() {
    let mut warnings = Vec::new();
    let config = Config::from_lookup(
        |name| {
            ["MEMPROF_OUTPUT", "MEMPROF_TRACE_TARGET", "MEMPROF_UNWINDER"]
                .contains(&name)
                .then(String::new)
        },
        |w| warnings.push(w),
    );
    assert_eq!(config.output, None);
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(
        warnings.iter().all(|w| w.contains("=\"\" is empty")),
        "{warnings:?}"
    );
}

#[test]
fn records_every_block_decides_as_the_configuration() {
    assert!(records_every_block(None, None, 0));
    assert!(!records_every_block(None, None, 4096));
    assert!(!records_every_block(Some("bytes:524288"), None, 0));
    assert!(records_every_block(Some(" off "), None, 4096));
    assert!(records_every_block(Some("0"), Some("1"), 4096));
    // A bad value leaves the allocator's own choice, as the configuration does.
    assert!(records_every_block(Some("512k"), None, 0));
    assert!(!records_every_block(None, Some("0"), 0));
}

fn parse(vars: &[(&str, &str)]) -> (Config, Vec<String>) {
    let mut warnings = Vec::new();
    let config = Config::from_lookup(
        |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        },
        |w| warnings.push(w),
    );
    (config, warnings)
}

#[test]
fn a_label_filter_needs_a_key_and_a_value() {
    let (config, warnings) = parse(&[("MEMPROF_LABEL", " tenant = a=b ")]);
    assert_eq!(config.label, Some(("tenant".into(), "a=b".into())));
    assert!(warnings.is_empty(), "{warnings:?}");
    for raw in ["tenant=", "tenant= ", "=acme", "tenant"] {
        let (config, warnings) = parse(&[("MEMPROF_LABEL", raw)]);
        assert_eq!(config.label, None, "{raw}");
        assert_eq!(warnings.len(), 1, "{raw}: {warnings:?}");
        assert!(warnings[0].contains("MEMPROF_LABEL"), "{warnings:?}");
    }
}

#[test]
fn defaults_without_variables() {
    let (config, warnings) = parse(&[]);
    assert_eq!(config, Config::default());
    assert!(warnings.is_empty());
}

#[test]
fn good_values_are_taken() {
    let (config, warnings) = parse(&[
        ("MEMPROF_STACK_DEPTH", "16"),
        ("MEMPROF_STACK_SKIP", "2"),
        ("MEMPROF_MIN_BYTES", "0"),
        ("MEMPROF_PRINT_AT_EXIT", "1"),
        ("MEMPROF_ENABLED", "0"),
        ("MEMPROF_UNWINDER", "dwarf"),
    ]);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(config.stack_depth, 16);
    assert_eq!(config.stack_skip, 2);
    assert_eq!(config.min_bytes, 0);
    assert!(config.print_at_exit);
    assert!(!config.enabled);
    assert_eq!(config.unwinder, Unwinder::Dwarf);
    assert_eq!(config.capture_depth(), 16 + 2 + TRIMMED_FRAMES);
}

#[test]
fn bad_values_warn_with_name_and_default() {
    let (config, warnings) = parse(&[
        ("MEMPROF_STACK_DEPTH", "deep"),
        ("MEMPROF_MIN_BYTES", "-5"),
        ("MEMPROF_PRINT_AT_EXIT", "yes"),
        ("MEMPROF_UNWINDER", "libgcc"),
    ]);
    assert_eq!(config.stack_depth, 5);
    assert_eq!(config.min_bytes, 1024);
    assert!(!config.print_at_exit);
    assert_eq!(warnings.len(), 4, "{warnings:?}");
    assert!(warnings[0].contains("MEMPROF_STACK_DEPTH") && warnings[0].contains("default 5"));
    assert!(warnings[1].contains("MEMPROF_MIN_BYTES") && warnings[1].contains("default 1024"));
    assert!(warnings[2].contains("MEMPROF_PRINT_AT_EXIT") && warnings[2].contains("default 0"));
    assert!(warnings[3].contains("MEMPROF_UNWINDER") && warnings[3].contains("auto"));
}

#[test]
fn object_graph_and_trace_variables() {
    let (config, warnings) = parse(&[
        ("MEMPROF_REF_LIMIT", "0"),
        ("MEMPROF_REF_LEVEL", "2"),
        ("MEMPROF_TRACE_TARGET", " app::Foo "),
        ("MEMPROF_TRACE_MIN_COUNT", "3"),
    ]);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(config.ref_limit, 0);
    assert_eq!(config.ref_level, 2);
    assert_eq!(config.trace_target.as_deref(), Some("app::Foo"));
    assert_eq!(config.trace_min_count, 3);
    let (config, warnings) = parse(&[
        ("MEMPROF_REF_LIMIT", "ten"),
        ("MEMPROF_REF_LEVEL", "-1"),
        ("MEMPROF_TRACE_TARGET", ""),
    ]);
    assert_eq!(config.ref_limit, 10);
    assert_eq!(config.ref_level, 5);
    assert_eq!(config.trace_target, None);
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(warnings[0].contains("MEMPROF_REF_LIMIT") && warnings[0].contains("default 10"));
    assert!(warnings[1].contains("MEMPROF_REF_LEVEL") && warnings[1].contains("default 5"));
    assert!(warnings[2].starts_with("MEMPROF_TRACE_TARGET=\"\" is empty"));
}

#[test]
fn sampling_and_toggle_signal() {
    let (config, warnings) = parse(&[
        ("MEMPROF_SAMPLE_INTERVAL", "bytes:524288"),
        ("MEMPROF_TOGGLE_SIGNAL", "SIGUSR2"),
    ]);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(config.sample_interval, Some(524_288));
    assert_eq!(config.toggle_signal, Some(libc::SIGUSR2));
    let (config, _) = parse(&[
        ("MEMPROF_SAMPLE_INTERVAL", "off"),
        ("MEMPROF_TOGGLE_SIGNAL", "10"),
    ]);
    assert_eq!(config.sample_interval, Some(0));
    assert_eq!(config.toggle_signal, Some(10));
    let (config, warnings) = parse(&[
        ("MEMPROF_SAMPLE_INTERVAL", "512k"),
        ("MEMPROF_TOGGLE_SIGNAL", "KILL"),
    ]);
    assert_eq!((config.sample_interval, config.toggle_signal), (None, None));
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains("MEMPROF_SAMPLE_INTERVAL") && warnings[0].contains("every allocation")
    );
    assert!(warnings[1].contains("MEMPROF_TOGGLE_SIGNAL") && warnings[1].contains("none"));
}

#[test]
fn empty_or_unknown_flags_warn_and_keep_the_default() {
    let (config, warnings) = parse(&[("MEMPROF_ENABLED", "")]);
    assert!(config.enabled);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("MEMPROF_ENABLED=\"\"")
            && warnings[0].contains("using the default 1 (on)"),
        "{warnings:?}"
    );
    let (config, warnings) = parse(&[("MEMPROF_ENABLED", "off"), ("MEMPROF_PEAK", "")]);
    assert!(config.enabled);
    assert_eq!(config.peak, None);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[1].starts_with("MEMPROF_PEAK=\"\""), "{warnings:?}");
    let (config, warnings) = parse(&[("MEMPROF_PEAK", "0")]);
    assert_eq!((config.peak, warnings.len()), (Some(false), 0));
}

#[test]
fn depth_zero_is_out_of_range() {
    let (config, warnings) = parse(&[("MEMPROF_STACK_DEPTH", "0")]);
    assert_eq!(config.stack_depth, 5);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("from 1 to 64") && warnings[0].contains("default 5"),
        "{warnings:?}"
    );
    let (config, warnings) = parse(&[("MEMPROF_STACK_DEPTH", "1")]);
    assert_eq!((config.stack_depth, warnings.len()), (1, 0));
    let (config, warnings) = parse(&[("MEMPROF_STACK_SKIP", "0")]);
    assert_eq!((config.stack_skip, warnings.len()), (0, 0));
}

#[test]
fn one_signal_for_dump_and_toggle_warns_and_dumps() {
    let (config, warnings) = parse(&[
        ("MEMPROF_DUMP_SIGNAL", "USR1"),
        ("MEMPROF_TOGGLE_SIGNAL", "SIGUSR1"),
    ]);
    assert_eq!(config.dump_signal, Some(libc::SIGUSR1));
    assert_eq!(config.toggle_signal, None);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("MEMPROF_TOGGLE_SIGNAL")
            && warnings[0].contains("MEMPROF_DUMP_SIGNAL")
            && warnings[0].contains("writes dumps"),
        "{warnings:?}"
    );
}

#[test]
fn frame_pointers_only_where_the_build_keeps_them() {
    let (config, warnings) = parse(&[("MEMPROF_UNWINDER", "fp")]);
    if cfg!(memprof_frame_pointers) {
        assert_eq!(config.unwinder, Unwinder::FramePointer);
        assert!(warnings.is_empty(), "{warnings:?}");
    } else {
        assert_eq!(config.unwinder, Unwinder::Dwarf);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("MEMPROF_UNWINDER") && warnings[0].contains("using dwarf"),
            "{warnings:?}"
        );
    }
}

#[test]
fn http_addresses() {
    let (config, warnings) = parse(&[("MEMPROF_HTTP", " 127.0.0.1:6060 ")]);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(config.http, Some("127.0.0.1:6060".parse().unwrap()));
    let (config, _) = parse(&[("MEMPROF_HTTP", "[::1]:0")]);
    assert_eq!(config.http, Some("[::1]:0".parse().unwrap()));
    let (config, _) = parse(&[("MEMPROF_HTTP", "localhost:6060")]);
    assert_eq!(config.http, Some("127.0.0.1:6060".parse().unwrap()));
    for bad in ["6060", ":6060", "example.com:80", "127.0.0.1", ""] {
        let (config, warnings) = parse(&[("MEMPROF_HTTP", bad)]);
        assert_eq!(config.http, None, "{bad}");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("MEMPROF_HTTP=") && warnings[0].contains("no endpoint"),
            "{warnings:?}"
        );
    }
}

#[test]
fn dump_variables() {
    let (config, warnings) = parse(&[
        ("MEMPROF_OUTPUT", "/tmp/heap-%n.pb.gz"),
        ("MEMPROF_DUMP_ON_GROWTH", "256MiB"),
        ("MEMPROF_DUMP_KEEP", "3"),
        ("MEMPROF_DUMP_NEAR_LIMIT", "90%"),
    ]);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(config.dump_on_growth, Some(256 << 20));
    assert_eq!(config.dump_keep, 3);
    assert_eq!(config.dump_near_limit, Some(NearLimit::Share(90)));
    let (config, warnings) = parse(&[
        ("MEMPROF_OUTPUT", "/tmp/heap-%n.pb.gz"),
        ("MEMPROF_DUMP_ON_GROWTH", "off"),
        ("MEMPROF_DUMP_NEAR_LIMIT", "1536 MiB"),
    ]);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(config.dump_on_growth, Some(0));
    assert_eq!(config.dump_near_limit, Some(NearLimit::Bytes(1536 << 20)));
    for (bad_growth, bad_limit) in [("256MB", "0%"), ("1.5GiB", "101%"), ("-1", "0")] {
        let (config, warnings) = parse(&[
            ("MEMPROF_OUTPUT", "/tmp/heap.pb.gz"),
            ("MEMPROF_DUMP_ON_GROWTH", bad_growth),
            ("MEMPROF_DUMP_NEAR_LIMIT", bad_limit),
        ]);
        assert_eq!(
            (config.dump_on_growth, config.dump_near_limit),
            (None, None)
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with("MEMPROF_DUMP_ON_GROWTH="),
            "{warnings:?}"
        );
        assert!(
            warnings[1].starts_with("MEMPROF_DUMP_NEAR_LIMIT="),
            "{warnings:?}"
        );
    }
    let (_, warnings) = parse(&[("MEMPROF_DUMP_ON_GROWTH", "1GiB")]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("MEMPROF_OUTPUT is not set"),
        "{warnings:?}"
    );
    assert_eq!(parse_size("4096"), Some(4096));
    assert_eq!(parse_size("2 KiB"), Some(2048));
    assert_eq!(parse_size("3GiB"), Some(3 << 30));
    assert_eq!(parse_size("20000000000GiB"), None);
    assert_eq!(parse_size("MiB"), None);
}

#[test]
fn depth_above_the_limit_warns() {
    let (config, warnings) = parse(&[("MEMPROF_STACK_DEPTH", "1000")]);
    assert_eq!(config.stack_depth, 5);
    assert_eq!(warnings.len(), 1);
}

#[test]
fn bless_is_one_or_zero() {
    let read = |value: &str| {
        let mut warnings = Vec::new();
        let config = Config::from_lookup(
            |name| (name == "MEMPROF_BLESS").then(|| value.to_owned()),
            |w| warnings.push(w),
        );
        (config.bless, warnings.len())
    };
    assert_eq!(read("1"), (true, 0));
    assert_eq!(read(" 0 "), (false, 0));
    assert_eq!(read("yes"), (false, 1));
    assert!(!Config::from_lookup(|_| None, |_| {}).bless);
}

#[test]
fn given_pairs_are_read_in_place_of_the_environment() {
    // The test process's environment may hold MEMPROF_* variables: none counts here.
    let pairs = vec![
        ("MEMPROF_STACK_DEPTH".to_owned(), "9".to_owned()),
        (
            "MEMPROF_TRACE".to_owned(),
            "/tmp/given-%p.mptrace".to_owned(),
        ),
        ("MEMPROF_STACK_DEPTH".to_owned(), "7".to_owned()),
    ];
    let config = Config::from_pairs(&pairs);
    // The last pair of a name wins, as a variable set twice.
    assert_eq!(config.stack_depth, 7);
    assert_eq!(config.trace.as_deref(), Some("/tmp/given-%p.mptrace"));
    assert_eq!(config.output, None);
    assert!(
        Config::from_pairs(&[])
            == Config {
                working_dir: config.working_dir.clone(),
                ..Config::default()
            }
    );
}

#[test]
fn the_control_signal() {
    let (config, warnings) = parse(&[]);
    assert_eq!((config.control_signal, warnings.len()), (Some(59), 0));
    for off in ["off", "0", " off "] {
        let (config, warnings) = parse(&[("MEMPROF_CONTROL_SIGNAL", off)]);
        assert_eq!((config.control_signal, warnings.len()), (None, 0), "{off}");
    }
    let (config, _) = parse(&[("MEMPROF_CONTROL_SIGNAL", "USR2")]);
    assert_eq!(config.control_signal, Some(libc::SIGUSR2));
    let (config, _) = parse(&[("MEMPROF_CONTROL_SIGNAL", "40")]);
    assert_eq!(config.control_signal, Some(40));
    let (config, warnings) = parse(&[("MEMPROF_CONTROL_SIGNAL", "KILL")]);
    assert_eq!(config.control_signal, Some(59));
    assert!(
        warnings[0].contains("MEMPROF_CONTROL_SIGNAL=\"KILL\""),
        "{warnings:?}"
    );
    // Another signal's job is kept, and the channel closed.
    let (config, warnings) = parse(&[
        ("MEMPROF_CONTROL_SIGNAL", "USR1"),
        ("MEMPROF_DUMP_SIGNAL", "USR1"),
    ]);
    assert_eq!(
        (config.control_signal, config.dump_signal),
        (None, Some(libc::SIGUSR1))
    );
    assert!(warnings[0].contains("MEMPROF_DUMP_SIGNAL"), "{warnings:?}");
}
