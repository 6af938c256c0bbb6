//! Compiles the C workload that reports its blocks through `include/memprof.h`.

fn main() {
    println!("cargo::rerun-if-changed=c/workload.c");
    println!("cargo::rerun-if-changed=../include/memprof.h");
    cc::Build::new()
        .file("c/workload.c")
        .include("../include")
        .flag("-fno-omit-frame-pointer")
        .flag("-fno-inline")
        .debug(true)
        .opt_level(1)
        .warnings_into_errors(true)
        .compile("memprof_c_workload");
}
