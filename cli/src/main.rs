//! `memprof`: reads a trace written by `MEMPROF_TRACE` and reports on any moment of the run: the
//! live heap's report, a summary of the whole run, every export the crate writes, and what
//! changed between two moments. The reading is the `memprof-trace` crate's (its decoder and its one
//! replay, which the summary, the viewer's index and the exports visit); `moment` turns a replay
//! into the library's snapshot; this binary is its command line.

// `unsafe` only in `attach`, which signals a process and asks a socket who holds it.
#![deny(unsafe_code)]

/// `eprintln!` that never panics: a line for a stderr that is closed (`memprof run ... 2>&1 |
/// head` once `head` has its lines) or broken is lost, where `eprintln!` would end the command
/// with a panic.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod alys;
mod attach;
mod common;
mod convert;
mod crates;
mod diff;
mod labels;
mod moment;
mod receive;
mod report;
mod run;
mod serve;
mod shortlived;
mod summary;
mod symbolize;
mod timeline;

use clap::{Parser, Subcommand, ValueEnum};
// Also the commands' helpers, reached as `crate::…`.
use common::{bar, open, report_options, written};
use memprof_trace::{Moment, TraceError};
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "memprof",
    version,
    about = "Reports on a memprof trace (MEMPROF_TRACE) at any moment of the run"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The live heap at a moment, as the in-process Markdown or TSV report.
    Report {
        /// The trace file.
        trace: PathBuf,
        /// SECONDS since the trace started, `peak`, `end` or `marker:LABEL`.
        #[arg(long, default_value = "end")]
        at: Moment,
        /// What the groups count and their order: `bytes` (the live blocks, most bytes first)
        /// or `short-lived` (the allocations made and freed within --short-lived of each other
        /// up to the moment, most first).
        #[arg(long, value_enum, default_value_t = Sort::Bytes)]
        sort: Sort,
        /// With `--sort short-lived`: the longest lifetime of a short-lived allocation, with its
        /// unit (`ns`, `us` or `µs`, `ms`, `s`).
        #[arg(long, default_value = "1ms", value_parser = shortlived::parse)]
        short_lived: u64,
        /// What a row is: `site` (a call site's context), `crate` (the crate that holds the
        /// memory: its innermost frame outside std and memprof) or `caller-crate` (that crate
        /// and the program's own crate that called it, `my_cache ← serde_json`).
        #[arg(long, value_enum, default_value_t = By::Site)]
        by: By,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// Totals, the peak, leaks, the busiest and most temporary call sites, lifetimes.
    Summary {
        /// The trace file.
        trace: PathBuf,
        /// Frames shown per call site (default: the recording's `MEMPROF_STACK_DEPTH`).
        #[arg(long)]
        depth: Option<usize>,
        /// Call sites listed per table.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// The longest lifetime of a short-lived allocation, with its unit (`ns`, `us` or `µs`,
        /// `ms`, `s`).
        #[arg(long, default_value = "1ms", value_parser = shortlived::parse)]
        short_lived: u64,
    },
    /// Writes the heap at a moment in the format the output's name asks for.
    Convert {
        /// The trace file.
        trace: PathBuf,
        /// The output: `.pb.gz`, `.folded`, `.svg`, `.dhat.json`, `.heaptrack.gz`, `.md`, `.tsv`, `.html`,
        /// or `.json` (Alys's JSON event list, up to the moment).
        #[arg(short, long)]
        output: PathBuf,
        /// SECONDS since the trace started, `peak`, `end` or `marker:LABEL`.
        #[arg(long, default_value = "end")]
        at: Moment,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// What grew and shrank between two moments, in the in-process diff format.
    Diff {
        /// The trace file.
        trace: PathBuf,
        /// The earlier moment.
        #[arg(long)]
        from: Moment,
        /// The later moment.
        #[arg(long, default_value = "end")]
        to: Moment,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// Adds or replaces the trace's symbols, read from the binaries its module records name.
    Symbolize {
        /// The trace file.
        trace: PathBuf,
        /// A directory of separate debug files (`.build-id/xx/rest.debug`, or by file name).
        #[arg(long)]
        debug_dir: Vec<PathBuf>,
        /// The symbolized trace to write (default: the trace itself, replaced).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Runs any program with a trace, then prints the trace's summary: through the preloaded
    /// library (libmemprof_preload.so) unless the program has memprof built in.
    Run {
        #[command(flatten)]
        options: run::RunOptions,
        /// The program and its arguments.
        #[arg(required = true, last = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Profiles a running, dynamically linked process from now on, without a restart: loads the
    /// preloaded library into it (through gdb), then detaches at Ctrl-C, after --duration, or at
    /// its exit, and prints the trace's summary (docs/preload.md).
    Attach {
        #[command(flatten)]
        options: attach::AttachOptions,
    },
    /// The viewer: a web page and a REST API over a trace (docs/viewer-api.md).
    Serve {
        /// The trace files, each served under its id (`/api/traces`), the first also without
        /// (with --listen-trace: one file, where the received trace is written).
        trace: Vec<PathBuf>,
        /// The address to serve on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// Receives a trace sent to `MEMPROF_TRACE=tcp://HOST:PORT` and serves it as it arrives.
        #[arg(long)]
        listen_trace: Option<String>,
    },
    /// Receives one trace sent to `MEMPROF_TRACE=tcp://HOST:PORT` and saves it.
    Receive {
        /// The address to listen on (`0.0.0.0:7878`; port 0 picks one, printed on stderr).
        #[arg(long)]
        listen: String,
        /// The file to write.
        #[arg(short, long)]
        output: PathBuf,
    },
}

/// How reports group and filter.
#[derive(clap::Args, Debug)]
struct ReportArgs {
    /// `md` (Markdown) or `tsv`.
    #[arg(long, value_enum, default_value_t = Style::Md)]
    format: Style,
    /// Leave out groups below this many bytes (default `MEMPROF_MIN_BYTES`, else 1024).
    #[arg(long)]
    min_bytes: Option<u64>,
    /// Frames per context (default: the recording's `MEMPROF_STACK_DEPTH`).
    #[arg(long)]
    depth: Option<usize>,
    /// Only the blocks allocated with this label, `KEY=VALUE` (`memprof::with_labels`; default
    /// `MEMPROF_LABEL`, else every block).
    #[arg(long, value_parser = parse_label)]
    label: Option<(String, String)>,
}

/// A `--label` value: `KEY=VALUE`, neither empty (no label has an empty key or value:
/// `memprof::Labels::new` refuses them).
fn parse_label(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('=') {
        Some((key, value)) if !key.is_empty() && !value.is_empty() => {
            Ok((key.to_owned(), value.to_owned()))
        }
        _ => Err(format!(
            "{raw:?} is not KEY=VALUE with a key and a value (no label has an empty one)"
        )),
    }
}

impl Default for ReportArgs {
    fn default() -> ReportArgs {
        ReportArgs {
            format: Style::Md,
            min_bytes: None,
            depth: None,
            label: None,
        }
    }
}

/// `memprof report --by`.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum By {
    Site,
    Crate,
    CallerCrate,
}

/// `memprof report --sort`.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Sort {
    Bytes,
    ShortLived,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Style {
    Md,
    Tsv,
}

/// A failure: the message printed, and the exit status.
struct Failure(String, u8);

impl From<TraceError> for Failure {
    fn from(error: TraceError) -> Failure {
        Failure(error.to_string(), 1)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(message, status)) => {
            // An empty message: the status alone (`memprof run` passing on its program's).
            if !message.is_empty() {
                say!("memprof: {message}");
            }
            ExitCode::from(status)
        }
    }
}

/// Runs the command.
fn dispatch(cli: Cli) -> Result<(), Failure> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    match cli.command {
        Command::Report {
            trace,
            at,
            sort,
            short_lived,
            by,
            report,
        } => {
            let path = trace;
            let trace = open(&path)?;
            let options = report_options(&trace, &report);
            if by != By::Site {
                if sort != Sort::Bytes {
                    return Err(Failure(
                        "--by crate and --by caller-crate count the live heap and what was \
                         allocated; --sort short-lived is for call sites"
                            .to_owned(),
                        2,
                    ));
                }
                crates::report(
                    &trace,
                    &at,
                    by == By::CallerCrate,
                    options.label.as_ref(),
                    report.format,
                    &mut out,
                )?;
                common::hint_symbolize(&trace, &path);
                return written(out.flush());
            }
            report::report(
                &trace,
                &at,
                (sort, short_lived),
                report.format,
                &options,
                &mut out,
            )?;
            common::hint_symbolize(&trace, &path);
        }
        Command::Summary {
            trace,
            depth,
            top,
            short_lived,
        } => {
            let path = trace;
            let trace = open(&path)?;
            let mut options = report_options(&trace, &ReportArgs::default());
            if let Some(depth) = depth {
                options = options.depth(depth);
            }
            let summary = summary::Summary::of(&trace, &options, top, short_lived, &bar)?;
            written(summary.write(&mut out))?;
            crates::write_section(&trace, top, &mut out)?;
            labels::write_label_sets(&trace, &mut out)?;
            common::hint_symbolize(&trace, &path);
        }
        Command::Convert {
            trace,
            output,
            at,
            report,
        } => {
            let trace = open(&trace)?;
            let options = report_options(&trace, &report);
            convert::convert(&trace, &output, &at, &options)?;
        }
        Command::Diff {
            trace,
            from,
            to,
            report,
        } => {
            let trace = open(&trace)?;
            let options = report_options(&trace, &report);
            diff::diff(&trace, &from, &to, report.format, &options, &mut out)?;
        }
        Command::Symbolize {
            trace,
            debug_dir,
            output,
        } => symbolize::run(&open(&trace)?, debug_dir, output.as_deref())?,
        Command::Serve {
            trace,
            listen,
            listen_trace,
        } => {
            drop(out);
            return serve::serve(trace, &listen, listen_trace.as_deref());
        }
        Command::Receive { listen, output } => {
            drop(out);
            return receive::receive(&listen, &output);
        }
        Command::Run { options, command } => {
            drop(out);
            return run::run_program(&options, &command);
        }
        Command::Attach { options } => {
            drop(out);
            return attach::attach(&options);
        }
    }
    written(out.flush())
}
