//! Tells the crate whether this build keeps frame pointers, so the allocation path can pick the fast
//! frame-pointer walk when every frame has one and the DWARF unwinder when some do not.

fn main() {
    println!("cargo::rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let args: Vec<&str> = flags.split('\x1f').collect();
    // `-Cforce-frame-pointers=yes`, `-C force-frame-pointers=yes` (two arguments), with `yes`, `on`,
    // `true`, `y` or no value at all; the last occurrence wins.
    let mut forced = false;
    for (i, arg) in args.iter().enumerate() {
        let option = match arg.strip_prefix("-C") {
            Some("") => args.get(i + 1).copied().unwrap_or(""),
            Some(rest) => rest,
            None => continue,
        };
        if let Some(value) = option.strip_prefix("force-frame-pointers") {
            forced = matches!(value, "" | "=yes" | "=on" | "=true" | "=y");
        }
    }
    if forced {
        println!("cargo::rustc-cfg=memprof_frame_pointers");
    }
}
