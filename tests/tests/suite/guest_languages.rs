//! Tasklets written in other languages than Rust: the Python examples (`tasklets/python-*`),
//! built with componentize-py over the Python SDK (`guest-sdk/python`), run through the same
//! host as the Rust examples, and their outputs and errors compared with the Rust examples' on
//! the same inputs.
//!
//! componentize-py comes from `scripts/install-componentize-py.sh` (under target/), or
//! `$TASKLET_COMPONENTIZE_PY`, or PATH; without it the tests print `skipped: componentize-py not
//! found` and return.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use tasklet_runtime::{Host, RunError, Tasklet};
use tasklet_tests::{assert_baseline, load, manifest, repo, run_ok, tasklet_dir, test_host};

/// The componentize-py to build with, if there is one.
fn componentize_py() -> Option<PathBuf> {
    if let Some(tool) = std::env::var_os("TASKLET_COMPONENTIZE_PY") {
        return Some(PathBuf::from(tool));
    }
    let installed = repo().join("target/componentize-py");
    let mut found: Vec<PathBuf> = std::fs::read_dir(installed)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("componentize-py"))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    if let Some(tool) = found.pop() {
        return Some(tool);
    }
    let on_path = Command::new("componentize-py").arg("--version").output();
    on_path
        .is_ok_and(|o| o.status.success())
        .then(|| PathBuf::from("componentize-py"))
}

/// Builds the Python tasklet `name` with its build.sh (nothing to do when it is up to date) and
/// loads it; `None` (having said why) when componentize-py is not found.
fn build_and_load(host: &Host, name: &str) -> Option<Tasklet> {
    let Some(tool) = componentize_py() else {
        // Past the harness's capture, on a line of its own (the harness has printed "test
        // name ... " without a newline).
        let _ = writeln!(
            std::io::stderr(),
            "\nskipped: componentize-py not found (scripts/install-componentize-py.sh installs it): {name}"
        );
        return None;
    };
    let started = Instant::now();
    let status = Command::new(tasklet_dir(name).join("build.sh"))
        .env("COMPONENTIZE_PY", &tool)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {name}/build.sh: {e}"));
    assert!(status.success(), "{name}/build.sh failed ({status})");
    let built = started.elapsed();
    let started = Instant::now();
    let tasklet = load(host, manifest(name));
    eprintln!(
        "[guest-languages] {name}: built in {built:?} (or up to date), compiled in {:?}",
        started.elapsed()
    );
    Some(tasklet)
}

/// The error a run ended with, which must be the tasklet's own (`RunError::Failed`).
fn failure(host: &Host, tasklet: &Tasklet, input: &str) -> String {
    match host.run(tasklet, input.as_bytes()) {
        Err(RunError::Failed(message)) => message,
        other => panic!("expected the tasklet to fail on {input:?}, got {other:?}"),
    }
}

#[test]
fn python_vector_add_matches_the_rust_example() {
    let host = test_host!();
    let Some(python) = build_and_load(&host, "python-vector-add") else {
        return;
    };
    let rust = load(&host, manifest("vector-add"));
    for input in ["", "0", "1", "1000", "100000"] {
        let expected = run_ok(&host, &rust, input);
        assert_eq!(run_ok(&host, &python, input), expected, "input {input:?}");
    }
    // Errors: the SDK's own (input that does not parse), and a gpu-error case raised as an
    // exception (a lease past the manifest's max-vram), worded as the Rust SDK words them.
    for input in ["twelve", "100000000"] {
        let expected = failure(&host, &rust, input);
        assert_eq!(failure(&host, &python, input), expected, "input {input:?}");
    }
    assert!(
        failure(&host, &python, "100000000").starts_with("quota-exceeded: "),
        "{}",
        failure(&host, &python, "100000000")
    );
    assert_baseline(&host);
}

#[test]
fn python_iota_as_one_gpu_call_matches_the_rust_example() {
    let host = test_host!();
    let Some(python) = build_and_load(&host, "python-iota") else {
        return;
    };
    let rust = load(&host, manifest("iota"));
    for input in ["", "0", "1", "37", "5000"] {
        let expected = run_ok(&host, &rust, input);
        assert_eq!(run_ok(&host, &python, input), expected, "input {input:?}");
    }
    let expected = failure(&host, &rust, "-3");
    assert_eq!(failure(&host, &python, "-3"), expected);
    assert_baseline(&host);
}
