//! `memprof`: reads a trace written by `MEMPROF_TRACE` and reports on any moment of the run: the
//! live heap's report, a summary of the whole run, every export the crate writes, and what
//! changed between two moments. The reading is `memprof::trace::replay`; this binary is its
//! command line.

#![forbid(unsafe_code)]

mod alys;
mod serve;
mod summary;
mod symbolize;
mod timeline;

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use memprof::trace::replay::{Heap, Moment, Position, Trace, TraceError};
use memprof::{DiffReport, Report, ReportOptions, Snapshot};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

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
    },
    /// Writes the heap at a moment in the format the output's name asks for.
    Convert {
        /// The trace file.
        trace: PathBuf,
        /// The output: `.pb.gz`, `.folded`, `.svg`, `.dhat.json`, `.heaptrack.gz`, `.md`, `.tsv`,
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
    /// Runs a program that uses memprof with a trace, then prints the trace's summary.
    Run {
        /// The trace to write (`%p`: the program's pid; `%e`: its name).
        #[arg(long, default_value = "memprof-%e-%p.mptrace")]
        trace: String,
        /// `MEMPROF_OUTPUT` for the program: exports written at its exit.
        #[arg(long)]
        output: Option<String>,
        /// The program and its arguments.
        #[arg(required = true, last = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// The viewer: a web page and a REST API over a trace (docs/viewer-api.md).
    Serve {
        /// The trace file (with --listen-trace: where the received trace is written).
        trace: Option<PathBuf>,
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
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(message, status)) => {
            eprintln!("memprof: {message}");
            ExitCode::from(status)
        }
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let written = |r: io::Result<()>| r.map_err(|e| Failure(format!("cannot write: {e}"), 1));
    match cli.command {
        Command::Report { trace, at, report } => {
            let trace = open(&trace)?;
            let options = report_options(&trace, &report);
            let (snapshot, _) = snapshot_at(&trace, &at)?;
            let report_of = Report::live(&snapshot, &mut trace.resolver(), &options);
            written(match report.format {
                Style::Md => report_of.write_markdown(&mut out),
                Style::Tsv => report_of.write_tsv(&mut out),
            })?;
        }
        Command::Summary { trace, depth, top } => {
            let trace = open(&trace)?;
            let mut options = report_options(&trace, &ReportArgs::default());
            if let Some(depth) = depth {
                options = options.depth(depth);
            }
            let summary = summary::Summary::of(&trace, &options, top, &bar)?;
            written(summary.write(&mut out))?;
        }
        Command::Convert {
            trace,
            output,
            at,
            report,
        } => {
            let trace = open(&trace)?;
            let options = report_options(&trace, &report);
            convert(&trace, &output, &at, &options)?;
        }
        Command::Diff {
            trace,
            from,
            to,
            report,
        } => {
            let trace = open(&trace)?;
            let options = report_options(&trace, &report);
            let (earlier, _) = snapshot_at(&trace, &from)?;
            let (later, _) = snapshot_at(&trace, &to)?;
            let diff = later.diff(&earlier);
            let report_of = DiffReport::new(&diff, &mut trace.resolver(), &options);
            written(match report.format {
                Style::Md => report_of.write_markdown(&mut out),
                Style::Tsv => report_of.write_tsv(&mut out),
            })?;
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
            return receive(&listen, &output);
        }
        Command::Run {
            trace,
            output,
            command,
        } => {
            drop(out);
            return run_program(&trace, output.as_deref(), &command);
        }
    }
    written(out.flush())
}

/// `memprof run`: the program with `MEMPROF_TRACE` (and `MEMPROF_OUTPUT`) set, then the summary
/// of its trace. Fails with the program's status when it failed, after the summary.
fn run_program(
    trace: &str,
    output: Option<&str>,
    command: &[std::ffi::OsString],
) -> Result<(), Failure> {
    if trace.contains("%t") {
        return Err(Failure(
            "--trace: %t cannot be found again after the run; use %p or a plain path".into(),
            2,
        ));
    }
    let program = Path::new(&command[0]);
    let mut child = std::process::Command::new(program);
    child.args(&command[1..]).env("MEMPROF_TRACE", trace);
    if let Some(output) = output {
        child.env("MEMPROF_OUTPUT", output);
    }
    let mut child = child
        .spawn()
        .map_err(|e| Failure(format!("{}: cannot run: {e}", program.display()), 1))?;
    let pid = child.id();
    let status = child
        .wait()
        .map_err(|e| Failure(format!("{}: {e}", program.display()), 1))?;
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let path = PathBuf::from(memprof::export::expand_path(
        trace,
        pid,
        Duration::ZERO,
        &name,
    ));
    if !path.exists() {
        return Err(Failure(
            format!(
                "{}: no trace written by {} ({status}); is it built with memprof's `trace` \
                 feature, and memprof its global allocator?",
                path.display(),
                program.display()
            ),
            1,
        ));
    }
    let trace = open(&path)?;
    let options = report_options(&trace, &ReportArgs::default());
    let summary = summary::Summary::of(&trace, &options, 10, &bar)?;
    let mut out = io::stdout().lock();
    summary
        .write(&mut out)
        .map_err(|e| Failure(format!("cannot write: {e}"), 1))?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure(
            format!("{} failed: {status}", program.display()),
            1,
        ))
    }
}

impl Default for ReportArgs {
    fn default() -> ReportArgs {
        ReportArgs {
            format: Style::Md,
            min_bytes: None,
            depth: None,
        }
    }
}

/// The report options: the recording's depth and skip, the environment's minimum, then the
/// command line's.
fn report_options(trace: &Trace, args: &ReportArgs) -> ReportOptions {
    let header = trace.header();
    let mut options = ReportOptions::from_env();
    if header.stack_depth > 0 {
        options = options.depth(header.stack_depth as usize);
    }
    options.skip = header.stack_skip as usize;
    if let Some(depth) = args.depth {
        options = options.depth(depth);
    }
    if let Some(min_bytes) = args.min_bytes {
        options = options.min_bytes(min_bytes);
    }
    options
}

/// A progress bar on stderr (drawn only when stderr is a terminal).
fn bar(length: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(length);
    if let Ok(style) = ProgressStyle::with_template(
        "{msg:>10} [{bar:40}] {percent:>3}% {human_pos}/{human_len} {elapsed}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    bar
}

/// Opens a trace with a progress bar over its bytes; warns when it was cut short.
fn open(path: &Path) -> Result<Trace, Failure> {
    let progress = bar(0, "indexing");
    let trace = Trace::open_with_progress(path, &mut |done, total| {
        progress.set_length(total);
        progress.set_position(done);
    })?;
    progress.finish_and_clear();
    if let Some(cut) = trace.cut() {
        eprintln!(
            "memprof: warning: {}: {cut}; read up to there",
            path.display()
        );
    }
    Ok(trace)
}

/// Replays `trace` to `moment` with a progress bar.
fn replay(trace: &Trace, moment: &Moment) -> Result<(Heap, Position), Failure> {
    let passes = if *moment == Moment::Peak { 2 } else { 1 };
    let progress = bar(trace.events() * passes, "replaying");
    let mut base = 0;
    let mut last = 0;
    let result = trace.replay(moment, &mut |done| {
        if done < last {
            base += last;
        }
        last = done;
        progress.set_position(base + done);
    });
    progress.finish_and_clear();
    let (heap, position) = result?;
    if !position.found {
        return Err(Failure(
            match moment {
                Moment::Marker(label) => format!(
                    "{}: no marker labelled {label:?} (markers: {})",
                    trace.path().display(),
                    marker_list(trace)
                ),
                _ => format!("{}: {moment:?} not found", trace.path().display()),
            },
            1,
        ));
    }
    Ok((heap, position))
}

fn marker_list(trace: &Trace) -> String {
    let mut labels: Vec<&str> = trace.labels().values().map(String::as_str).collect();
    labels.sort_unstable();
    if labels.is_empty() {
        "none".into()
    } else {
        labels.join(", ")
    }
}

/// The snapshot at `moment`, with the trace's peak when the moment is the peak.
fn snapshot_at(trace: &Trace, moment: &Moment) -> Result<(Snapshot, Position), Failure> {
    let (heap, position) = replay(trace, moment)?;
    let snapshot = trace.snapshot(&heap, heap.live_bytes);
    Ok((snapshot, position))
}

/// `memprof convert`: the format by the output's name.
fn convert(
    trace: &Trace,
    output: &Path,
    moment: &Moment,
    options: &ReportOptions,
) -> Result<(), Failure> {
    let name = output.to_string_lossy();
    if name.ends_with(".json") && !name.ends_with(".dhat.json") {
        let until = match moment {
            Moment::End => None,
            _ => Some(replay(trace, moment)?.1.events),
        };
        let file = std::fs::File::create(output)
            .map_err(|e| Failure(format!("{}: cannot create: {e}", output.display()), 1))?;
        let mut out = io::BufWriter::new(file);
        alys::write(trace, until, &mut out)
            .map_err(|Failure(m, s)| Failure(format!("{}: {m}", output.display()), s))?;
        return out
            .flush()
            .map_err(|e| Failure(format!("{}: cannot write: {e}", output.display()), 1));
    }
    let format = memprof::export::Format::from_path(&name).ok_or_else(|| {
        let endings: Vec<&str> = memprof::export::Format::EXTENSIONS
            .iter()
            .map(|(e, _)| *e)
            .collect();
        Failure(
            format!(
                "{}: unknown output format (the name ends in one of {}, .json)",
                output.display(),
                endings.join(", ")
            ),
            2,
        )
    })?;
    let (heap, position) = replay(trace, moment)?;
    let snapshot = match format {
        memprof::export::Format::Markdown | memprof::export::Format::Tsv => {
            trace.snapshot(&heap, heap.live_bytes)
        }
        _ => {
            // The peak up to the moment, for the exports' per-site peak figures.
            let progress = bar(trace.events() * 2, "peak");
            let peak =
                trace.find_peak_within(position.events, &mut |done| progress.set_position(done))?;
            let (at_peak, _) = trace.replay(&Moment::Events(peak.events), &mut |done| {
                progress.set_position(trace.events() + done)
            })?;
            progress.finish_and_clear();
            trace.snapshot_with_peak(&heap, &at_peak)
        }
    };
    let mut resolver = trace.resolver();
    let header = trace.header();
    let file = std::fs::File::create(output)
        .map_err(|e| Failure(format!("{}: cannot create: {e}", output.display()), 1))?;
    let mut out = io::BufWriter::new(file);
    let result = match format {
        memprof::export::Format::Markdown => {
            Report::live(&snapshot, &mut resolver, options).write_markdown(&mut out)
        }
        memprof::export::Format::Tsv => {
            Report::live(&snapshot, &mut resolver, options).write_tsv(&mut out)
        }
        _ => {
            let export = memprof::ExportOptions::default()
                .pid(header.pid)
                .command(header.executable.clone())
                .elapsed(Duration::from_nanos(position.time))
                .time(Duration::from_nanos(
                    header.start_unix_ns.saturating_add(position.time),
                ));
            // The events up to the moment (a sampled trace's are not the program's: its
            // exports keep the snapshot's estimates).
            let mut events = timeline::TraceEvents {
                trace,
                events: position.events,
            };
            let events = (header.sample_interval == 0)
                .then_some(&mut events as &mut dyn memprof::export::Events);
            memprof::export::write_with_events(
                format,
                &snapshot,
                &mut resolver,
                &export,
                events,
                &mut out,
            )
        }
    };
    result
        .and_then(|()| out.flush())
        .map_err(|e| Failure(format!("{}: cannot write: {e}", output.display()), 1))
}

/// `memprof receive`: accepts one connection and writes what it sends to `output` (under a
/// temporary name, renamed when the sender closes, so a reader never sees part of a trace);
/// then says how much arrived and whether it is a whole trace.
fn receive(listen: &str, output: &Path) -> Result<(), Failure> {
    let listener = std::net::TcpListener::bind(listen)
        .map_err(|e| Failure(format!("--listen {listen}: {e}"), 1))?;
    if let Ok(address) = listener.local_addr() {
        eprintln!("memprof: listening on {address}");
    }
    let (mut stream, peer) = listener
        .accept()
        .map_err(|e| Failure(format!("--listen {listen}: {e}"), 1))?;
    let mut partial = output.as_os_str().to_owned();
    partial.push(".part");
    let partial = PathBuf::from(partial);
    let fail = |e: io::Error| Failure(format!("{}: {e}", output.display()), 1);
    let file = std::fs::File::create(&partial).map_err(fail)?;
    let mut file = io::BufWriter::new(file);
    let progress = bar(0, "receiving");
    let bytes = io::copy(&mut progress.wrap_read(&mut stream), &mut file).map_err(fail)?;
    progress.finish_and_clear();
    file.flush().map_err(fail)?;
    drop(file);
    std::fs::rename(&partial, output).map_err(fail)?;
    let trace = open(output)?;
    eprintln!(
        "memprof: {}: {bytes} bytes from {peer}, {} events, {}",
        output.display(),
        trace.events(),
        if trace.end_record().is_some() {
            "closed normally"
        } else {
            "cut short"
        }
    );
    Ok(())
}
