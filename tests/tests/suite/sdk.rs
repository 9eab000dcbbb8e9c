//! The guest SDK as a tasklet author uses it, through the `sdk-check` tasklet (which depends on
//! the SDK alone): its default lease is granted under the default policy, a `#[derive(Pod)]`
//! struct and a `CStruct` reach a kernel by value laid out as C lays them out, offsets are in
//! elements; and no error quotes more than a bounded part of a huge name or token the tasklet
//! sent.

use tasklet_tests::{assert_baseline, assert_gpu_error, load, manifest, probe_lines, run_ok};
use tasklet_tests::{test_host, ProbeLine};

/// Runs `sdk-check` with `command` on a host of the default policy (the suite's small pool).
fn sdk_check(command: &str) -> Vec<ProbeLine> {
    let host = test_host!();
    let tasklet = load(&host, manifest("testing/sdk-check"));
    let lines = probe_lines(&run_ok(&host, &tasklet, command));
    assert_baseline(&host);
    lines
}

#[track_caller]
fn assert_ok(lines: &[ProbeLine], index: usize, what: &str) -> String {
    match lines.get(index) {
        Some((status, got, detail)) if status == "ok" && got == what => detail.clone(),
        _ => panic!("line {index} is not `ok {what} …`: {lines:?}"),
    }
}

#[test]
fn the_default_lease_is_granted_and_shared_by_the_one_shot_call() {
    let lines = sdk_check("defaults");
    let lease = assert_ok(&lines, 0, "lease");
    let (granted, remaining) = lease
        .strip_prefix("granted=")
        .and_then(|l| l.split_once(" remaining_ms="))
        .unwrap_or_else(|| panic!("{lease}"));
    assert_eq!(granted, (1u64 << 20).to_string(), "{lease}");
    let remaining: u64 = remaining.parse().expect("milliseconds");
    assert!((25_000..=30_000).contains(&remaining), "{lease}");
    assert_eq!(assert_ok(&lines, 1, "gpucall"), "2 4 6");
}

#[test]
fn a_struct_derived_with_the_sdk_alone_is_passed_by_value() {
    // (1, 0, 0) × (0, 0, 1) and (0, 1, 0) × (0, 0, 1).
    let lines = sdk_check("derive");
    assert_eq!(assert_ok(&lines, 0, "derive"), "0 -1 0 1 0 0");
}

#[test]
fn a_c_struct_with_padding_is_laid_out_as_c_does() {
    let n = 40u32;
    let lines = sdk_check(&format!("cstruct {n}"));
    // digits_kernel: the sum of the squares of the digits of i * offset, plus
    // (unsigned)(scale * 2) + bias + tag, with { scale 2.5, offset 7, bias 100, tag 3 }.
    let expected: Vec<String> = (0..n)
        .map(|i| {
            let mut x = i * 7;
            let mut squares = 0;
            loop {
                squares += (x % 10) * (x % 10);
                x /= 10;
                if x == 0 {
                    break;
                }
            }
            (squares + 5 + 100 + 3).to_string()
        })
        .collect();
    assert_eq!(
        assert_ok(&lines, 0, "cstruct"),
        format!("size=24 {}", expected.join(" "))
    );
}

#[test]
fn offsets_are_in_elements() {
    let lines = sdk_check("offsets");
    assert_eq!(assert_ok(&lines, 0, "offsets"), "0 0 0 1 2 3 4 0");
    assert_gpu_error(
        &lines,
        1,
        "out-of-bounds",
        "points at element 9 of a buffer of 8 elements",
    );
}

/// Most bytes of a tasklet's input an error may echo, with room for the words around it.
const ECHO_MAX: usize = 200;

#[track_caller]
fn assert_bounded_echo(message: &str, run_of: char) {
    let echoed = message
        .split(|c| c != run_of)
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(
        echoed <= ECHO_MAX,
        "the message echoes {echoed} bytes of the tasklet's input: {}…",
        &message[..message.len().min(300)]
    );
    assert!(message.len() <= 1024, "{} bytes", message.len());
}

#[test]
fn a_huge_kernel_name_is_quoted_in_part() {
    // As long as a name may be (docs/operating.md: a token of a module is at most 16 KiB).
    let bytes = 16 * 1024;
    let lines = sdk_check(&format!("long-name {bytes}"));
    assert_eq!(assert_ok(&lines, 0, "load"), bytes.to_string());
    // The trap surfaces at the launch or at the sync; either way its message names the kernel
    // in part, with the name's length.
    let error = lines
        .iter()
        .find(|l| l.0 == "error")
        .unwrap_or_else(|| panic!("no error: {lines:?}"));
    assert_eq!(error.1, "kernel-fault", "{error:?}");
    assert_bounded_echo(&error.2, 'x');
    assert!(error.2.contains(&format!("({bytes} bytes)")), "{}", error.2);
}

#[test]
fn a_huge_token_in_a_module_is_quoted_in_part() {
    let bytes = 100_000;
    let lines = sdk_check(&format!("long-token {bytes}"));
    // Refused before the loader sees it (the CUDA driver's aborts on it), alike on every backend.
    assert_gpu_error(
        &lines,
        0,
        "load-failed",
        "PTX line 4: a token is longer than the 16384-byte limit",
    );
    assert_bounded_echo(&lines[0].2, 'y');
    assert!(lines[0].2.contains("(100000 bytes)"), "{}", lines[0].2);
}

#[test]
fn a_kernel_name_past_the_token_limit_is_refused_at_load() {
    let lines = sdk_check("long-name 100000");
    assert_gpu_error(
        &lines,
        0,
        "load-failed",
        "a token is longer than the 16384-byte limit",
    );
    assert_bounded_echo(&lines[0].2, 'x');
}

#[test]
fn a_module_past_the_8_mib_request_limit_is_refused_naming_it() {
    // docs/operating.md, "Limits of one tasklet": a module's text must fit the 8 MiB region a
    // worker shares with the host; just under it loads.
    let lines = sdk_check("big-module 8300000");
    assert_eq!(assert_ok(&lines, 0, "load"), "8300000");
    let lines = sdk_check("big-module 9000000");
    assert_gpu_error(
        &lines,
        0,
        "invalid-argument",
        "does not fit the 8388608-byte region",
    );
}
