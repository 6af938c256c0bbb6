//! `memprof attach PID`.

pub(crate) mod builtin;
