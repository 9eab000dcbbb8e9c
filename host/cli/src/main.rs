//! `tasklet`: run, check and inspect GPU tasklets, here or on a node; serve a node.

/// `println!` to stdout, a failed write (a closed pipe, a full disk) returned as the command's
/// error rather than a panic.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*).map_err(crate::output_failed)?
    }};
}

/// `print!` to stdout, as [`outln!`].
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        write!(stdout, $($arg)*)
            .and_then(|()| stdout.flush())
            .map_err(crate::output_failed)?
    }};
}

/// `eprintln!` that never panics: a line for stderr that cannot be written (a terminal hung up,
/// a closed pipe) is dropped, so that the command still ends as it would have, with its status.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

mod backend;
mod build;
mod cluster;
mod cmd;
mod compile_cache;
mod interrupt;
mod json;
mod placement;
mod remote;
mod source;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "tasklet",
    version,
    about = "Run sandboxed WebAssembly tasklets on leased GPUs",
    long_about = "Run sandboxed WebAssembly tasklets on leased GPUs.\n\n\
        A tasklet is a wasm32-wasip2 component plus a tasklet.toml manifest naming the VRAM, time and \
        rights it needs. The host checks every GPU call against that grant and runs the GPU work in \
        supervised worker processes, on a CUDA device or, where there is none, on the built-in PTX emulator.\n\n\
        `tasklet node` serves a machine's GPUs to others over QUIC with mutual TLS; `tasklet run --node ADDR` \
        runs a tasklet here with its GPU work there, and `tasklet deploy run --node ADDR` runs it on the node.",
    after_help = "Examples:\n  tasklet run tasklets/iota <<< 10        build (if needed) and run the iota example\n  \
        tasklet run tasklets/scale <<< '2 1 2 3'  1 2 3 times 2, on the GPU\n  tasklet check tasklets/scale             validate its manifest and component, show the grant\n  \
        tasklet inventory --json\n\n\
        A node and a remote run:\n  tasklet certs init certs                 a CA, the node's certificate, tenant dev\n  \
        tasklet node --backend emu               serve (Ctrl-C drains and exits)\n  \
        tasklet run --node localhost tasklets/iota <<< 10\n  tasklet inventory --node localhost\n  \
        tasklet deploy run tasklets/iota --node localhost <<< 10   the tasklet runs on the node\n\n\
        A cluster (NATS with JetStream; the node's certificate names the address it advertises):\n  \
        tasklet certs node certs --name 10.0.0.5\n  tasklet node --nats nats://127.0.0.1:4222 --advertise 10.0.0.5:5701\n  \
        tasklet nodes --nats nats://127.0.0.1:4222\n  \
        tasklet deploy run tasklets/iota --nats nats://127.0.0.1:4222 --requires gpu:vram=1GiB <<< 10"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Run(cmd::run::RunArgs),
    Check(cmd::check::CheckArgs),
    Inventory(cmd::inventory::InventoryArgs),
    Ptx(cmd::ptx::PtxArgs),
    Node(cmd::node::NodeArgs),
    Nodes(cmd::nodes::NodesArgs),
    Deploy(cmd::deploy::DeployArgs),
    Certs(cmd::certs::CertsArgs),
    /// Serves as a GPU worker process (started by the host, not by hand).
    #[command(hide = true)]
    Worker {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return refused_arguments(err),
    };
    let json = cli.command.prints_json();
    let result = match cli.command {
        Command::Worker { args } => {
            return ExitCode::from(tasklet_worker::serve_main(args.into_iter()) as u8)
        }
        Command::Run(args) => cmd::run::run(args),
        Command::Check(args) => cmd::check::run(args),
        Command::Inventory(args) => cmd::inventory::run(args),
        Command::Ptx(args) => cmd::ptx::run(args),
        Command::Node(args) => cmd::node::run(args),
        Command::Nodes(args) => cmd::nodes::run(args),
        Command::Deploy(args) => cmd::deploy::run(args),
        Command::Certs(args) => cmd::certs::run(args),
    };
    // The watcher of stop signals waits for these last lines before it ends the process.
    let _ending = interrupt::finishing();
    if let Some(stop) = interrupt::stopped_by() {
        let why = anyhow::anyhow!(
            "{}: the connections to nodes were closed, which ends what they held there",
            stop.name()
        );
        // A command that returned a result printed what it owed already (`run` prints nothing
        // of a tasklet that ended after the signal); only a failure's JSON is still owed.
        report(&why, json && result.is_err());
        return ExitCode::from(stop.exit_status());
    }
    match result {
        Ok(code) => code,
        Err(e) if e.downcast_ref::<OutputClosed>().is_some() => {
            ExitCode::from(OUTPUT_CLOSED_STATUS)
        }
        Err(e) if e.downcast_ref::<ReportedInLog>().is_some() => ExitCode::from(2),
        Err(e) => {
            report(&e, json);
            ExitCode::from(2)
        }
    }
}

/// Arguments clap refused (or `--help`, `--version`): its message on stderr as clap prints it,
/// and where `--json` was asked for, the failure as JSON on stdout too: its first paragraph on
/// one line (`… were not provided: <TASKLET|DIGEST>`), without the usage that follows.
fn refused_arguments(err: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        err.exit();
    }
    let _ = err.print();
    if std::env::args().skip(1).any(|a| a == "--json") {
        let text = err.to_string();
        let paragraph: Vec<&str> = text
            .lines()
            .map(str::trim)
            .take_while(|line| !line.is_empty())
            .collect();
        let joined = paragraph.join(" ");
        report_json(joined.strip_prefix("error: ").unwrap_or(&joined));
    }
    ExitCode::from(2)
}

/// A command's error: one line on stderr, and under `--json` the same as JSON on stdout, so a
/// script reading the output sees the failure too.
fn report(e: &anyhow::Error, json: bool) {
    let line = one_line(e);
    errln!("error: {line}");
    if json {
        report_json(&line);
    }
}

/// `{"error": line}` on stdout; where stdout is what failed, there is nothing more to say on it.
fn report_json(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stdout().lock(),
        "{{\"error\":{}}}",
        json::json_str(line)
    );
}

impl Command {
    /// Whether the command was asked for `--json` output.
    fn prints_json(&self) -> bool {
        match self {
            Command::Inventory(args) => args.json,
            Command::Nodes(args) => args.json,
            Command::Deploy(args) => match &args.command {
                cmd::deploy::DeployCommand::Push(args) => args.json,
                cmd::deploy::DeployCommand::Run(args) => args.json,
            },
            _ => false,
        }
    }
}

/// Why output could not be written, as a command's error.
fn output_failed(err: std::io::Error) -> anyhow::Error {
    if err.kind() == std::io::ErrorKind::BrokenPipe {
        return anyhow::Error::new(OutputClosed);
    }
    anyhow::anyhow!("cannot write output: {err}")
}

/// Whoever read the output stopped reading (`| head -1`): nothing is wrong that a line on
/// stderr would help with, and the command ends as one killed by SIGPIPE does, with status 141.
#[derive(Debug)]
struct OutputClosed;

impl std::fmt::Display for OutputClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the output's reader went away")
    }
}

impl std::error::Error for OutputClosed {}

/// A failure the command wrote as a line of its structured log already (`tasklet node
/// --log-format json`), where a plain `error:` line would be the one line of stderr a reader of
/// the log cannot parse.
#[derive(Debug)]
struct ReportedInLog;

impl std::fmt::Display for ReportedInLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("reported in the log")
    }
}

impl std::error::Error for ReportedInLog {}

/// The status of a command whose output's reader went away: 128 + SIGPIPE.
const OUTPUT_CLOSED_STATUS: u8 = 141;

/// The error and its causes on one line, as `{:#}` prints them, leaving out a cause whose text
/// the line already holds: many errors name their cause in their own message too, which would
/// print it twice ("cannot listen on …: Address already in use: Address already in use").
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    let mut line = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !line.contains(&cause) {
            line.push_str(": ");
            line.push_str(&cause);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address already in use");
        /// Names its cause in its message and gives it as its source, as thiserror's
        /// `#[error("…: {source}")]` does.
        #[derive(Debug)]
        struct Listen {
            source: std::io::Error,
        }
        impl std::fmt::Display for Listen {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "cannot listen on 127.0.0.1:1: {}", self.source)
            }
        }
        impl std::error::Error for Listen {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.source)
            }
        }
        let e = anyhow::Error::new(Listen { source: io }).context("starting the node");
        assert_eq!(
            one_line(&e),
            "starting the node: cannot listen on 127.0.0.1:1: Address already in use"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(one_line(&plain), "outer: inner");
    }
}
