//! What the subjects share: the `tasklet` binary run from the repository root, its output as
//! text, and loopback ports to hand it.

use std::io::Write;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The repository root, where `tasklets/` and `kernels/` are.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tasklet <args>` run from the repository root with `stdin` as its input, to its end.
///
/// Its compiled cache, unless `--compile-cache` says otherwise, is the tests' own under the
/// build's temp folder (target/tmp/), never the user's ~/.cache/tasklet.
pub fn tasklet(args: &[&str], stdin: &[u8]) -> Output {
    tasklet_started(args, stdin).wait_with_output().unwrap()
}

/// `tasklet` started with `args` and `stdin` (then closed), its output piped, not waited for.
pub fn tasklet_started(args: &[&str], stdin: &[u8]) -> std::process::Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tasklet"));
    // As a terminal starts it: with SIGINT not ignored. A non-interactive shell's background job
    // (how CI may run the tests) ignores it, and the client keeps a signal it was started
    // ignoring ignored, as `nohup` expects of SIGHUP.
    // SAFETY: signal(2) is async-signal-safe, as what runs between fork and exec must be.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = command
        .env(
            "TASKLET_COMPILE_CACHE",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("tasklet-cli-tests-compile-cache"),
        )
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tasklet starts");
    // A run that fails before it reads its input (a missing component) closes the pipe first:
    // the test then looks at how it ended, not at this write.
    match child.stdin.take().unwrap().write_all(stdin) {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {}
        written => written.unwrap(),
    }
    child
}

/// The backend the tests' nodes serve: `cuda` with `TASKLET_TEST_BACKEND=cuda` (the GPU suite),
/// else the emulator.
pub fn suite_backend() -> &'static str {
    match std::env::var("TASKLET_TEST_BACKEND").as_deref() {
        Ok("cuda") => "cuda",
        _ => "emu",
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A TCP port free a moment ago on 127.0.0.1, from below the kernel's ephemeral range (see
/// [`free_port`]).
pub fn free_tcp_port() -> u16 {
    free_port(|port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
}

/// A UDP port free a moment ago on 127.0.0.1, from below the kernel's ephemeral range (see
/// [`free_port`]).
pub fn free_udp_port() -> u16 {
    free_port(|port| std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok())
}

/// A port `bindable` says is free, picked below the kernel's ephemeral range: a port the kernel
/// handed out for `:0` could be handed out again, between the test choosing it and its node
/// binding it, to any socket another test opens (every client opens some), and the node would
/// not start. Below that range the kernel hands out nothing by itself; each port is offered once
/// per test process.
fn free_port(bindable: impl Fn(u16) -> bool) -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    let (low, span) = (ephemeral_low.saturating_sub(12_000).max(1024), 12_000u32);
    // Each test process starts at a place of its own (test binaries of one run follow each
    // other, and a node of the last may still hold its port).
    let start = std::process::id().wrapping_mul(2_654_435_761) % span;
    for _ in 0..span {
        let port = low + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if bindable(port) {
            return port;
        }
    }
    panic!("no free port in {low}..{}", low + span)
}

/// Says that a test did not run, and why, past the test harness's output capture (which hides
/// a passing test's `println!`), on a line of its own.
pub fn say_skipped(why: &str) {
    let _ = writeln!(std::io::stderr(), "\nskipped: {why}");
}
