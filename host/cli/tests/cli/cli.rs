//! The `tasklet` command as users run it.

use crate::support::{tasklet, text};

#[test]
fn run_prints_the_output_and_says_which_backend() {
    let out = tasklet(&["run", "tasklets/iota", "--backend", "auto"], b"5");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1\n2\n3\n4\n5\n");
    // auto: CUDA on a machine with a usable GPU, else the emulator, saying why.
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("backend emu") || stderr.contains("backend cuda"),
        "{stderr}"
    );
}

#[test]
fn run_reads_input_from_a_file() {
    let dir = std::env::temp_dir().join(format!("tasklet-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.txt");
    std::fs::write(&input, "2 1.5 -4").unwrap();
    let out = tasklet(
        &[
            "run",
            "tasklets/scale",
            "--backend",
            "emu",
            "--input",
            input.to_str().unwrap(),
        ],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "3\n-8\n");
}

#[test]
fn a_failing_tasklet_exits_non_zero_with_the_cause() {
    let out = tasklet(
        &["run", "tasklets/iota", "--backend", "emu"],
        b"not-a-number",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("error:"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn check_validates_and_shows_the_grant() {
    let out = tasklet(&["check", "tasklets/vector-add"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("manifest ok") && stdout.contains("launch"),
        "{stdout}"
    );
}

#[test]
fn check_names_the_bad_key_and_line() {
    let dir = std::env::temp_dir().join(format!("tasklet-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("tasklet.toml"),
        "name = \"x\"\ncomponent = \"x.wasm\"\n[gpu]\nmax-vram = \"1 lightyear\"\n",
    )
    .unwrap();
    let out = tasklet(&["check", dir.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("tasklet.toml:4") && stderr.contains("max-vram"),
        "{stderr}"
    );
}

#[test]
fn inventory_lists_the_emulated_device_as_json() {
    let out = tasklet(&["inventory", "--json", "--backend", "emu"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with('[') && stdout.contains("\"backend\":\"emu\""),
        "{stdout}"
    );
}

#[test]
fn cuda_backend_fails_clearly_when_unavailable() {
    let out = tasklet(&["inventory", "--backend", "cuda"], b"");
    if out.status.success() {
        eprintln!("a CUDA device is usable here; nothing to check");
        return;
    }
    assert!(
        text(&out.stderr).to_lowercase().contains("cuda"),
        "{}",
        text(&out.stderr)
    );
}
