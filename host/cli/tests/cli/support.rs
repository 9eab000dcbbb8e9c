//! What the subjects share: the `tasklet` binary run from the repository root, its output as
//! text, and loopback ports to hand it.

use std::io::Write;
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_tasklet"))
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
    child.stdin.take().unwrap().write_all(stdin).unwrap();
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

/// A TCP port free a moment ago on 127.0.0.1.
pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A UDP port free a moment ago on 127.0.0.1.
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
