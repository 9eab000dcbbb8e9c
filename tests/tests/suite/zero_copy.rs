//! Bulk transfers between the device and tasklet memory with no host staging: `mem-write` from a
//! guest `Vec` and `mem-read-into` a guest buffer, through the probe tasklet. The host counts the
//! bytes that went straight between a worker and linear memory (`direct_transfer_bytes`), which
//! shows which path a transfer took.

use tasklet_runtime::config::{Right, Rights};
use tasklet_runtime::gpu::DIRECT_MIN_BYTES;
use tasklet_tests::{
    assert_baseline, assert_gpu_error, load, manifest, probe_lines, run_ok, run_probe, test_host,
    ProbeLine,
};

const MIB: u64 = 1 << 20;

fn line(status: &str, kind: &str, rest: &str) -> ProbeLine {
    (status.into(), kind.into(), rest.into())
}

#[test]
fn a_megabyte_round_trip_through_read_into_goes_straight_to_and_from_guest_memory() {
    let host = test_host!();
    assert_eq!(host.leases().direct_transfer_bytes(), (0, 0));
    let lines = run_probe(&host, "read-into 1024");
    assert_eq!(lines, [line("ok", "read-into", "1048576")]);
    // The write and the read each moved the whole megabyte directly, nothing more.
    assert_eq!(host.leases().direct_transfer_bytes(), (MIB, MIB));
    assert_baseline(&host);
}

#[test]
fn transfers_below_the_threshold_go_through_the_message_area_and_still_round_trip() {
    let host = test_host!();
    let kib = DIRECT_MIN_BYTES / 1024 - 1;
    for size in [1, kib] {
        let lines = run_probe(&host, &format!("read-into {size}"));
        assert_eq!(lines, [line("ok", "read-into", &(size * 1024).to_string())]);
    }
    assert_eq!(
        host.leases().direct_transfer_bytes(),
        (0, 0),
        "small transfers are staged"
    );
    // At the threshold the direct path takes over.
    let kib = DIRECT_MIN_BYTES / 1024;
    assert_eq!(
        run_probe(&host, &format!("read-into {kib}")),
        [line("ok", "read-into", &DIRECT_MIN_BYTES.to_string())]
    );
    let n = DIRECT_MIN_BYTES as u64;
    assert_eq!(host.leases().direct_transfer_bytes(), (n, n));
    assert_baseline(&host);
}

#[test]
fn guest_memory_grown_after_the_first_transfer_is_reached_too() {
    let host = test_host!();
    let lines = run_probe(&host, "read-into-grown");
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], line("ok", "first", "1048576"));
    assert_eq!(
        (lines[1].0.as_str(), lines[1].1.as_str()),
        ("ok", "grown"),
        "{lines:?}"
    );
    let pages: Vec<u64> = lines[1].2.split(' ').map(|p| p.parse().unwrap()).collect();
    assert!(
        pages[1] > pages[0],
        "the memory grew after the first transfer: {lines:?}"
    );
    assert_eq!(lines[2], line("ok", "round-trip", "16777216"));
    assert_eq!(host.leases().direct_transfer_bytes(), (17 * MIB, 17 * MIB));
    assert_baseline(&host);
}

#[test]
fn read_into_without_the_read_right_is_unauthorized() {
    let host = test_host!();
    let mut m = manifest("testing/probe");
    m.gpu.rights = Rights::ALL.iter().filter(|r| *r != Right::Read).collect();
    let probe = load(&host, m);
    let lines = probe_lines(&run_ok(&host, &probe, "read-into 1024"));
    assert_gpu_error(&lines, 0, "unauthorized", "`read`");
    // The write went through (it has its right); nothing was read.
    assert_eq!(host.leases().direct_transfer_bytes(), (MIB, 0));
    assert_baseline(&host);
}

#[test]
fn read_into_out_of_bounds_or_from_a_foreign_buffer_is_refused_and_touches_nothing() {
    let host = test_host!();
    let lines = run_probe(&host, "read-into-misuse");
    let kinds: Vec<(&str, &str)> = lines.iter().map(|l| (l.0.as_str(), l.1.as_str())).collect();
    assert_eq!(
        kinds,
        [
            ("error", "out-of-bounds"),
            ("error", "out-of-bounds"),
            ("ok", "untouched"),
            ("error", "invalid-argument"),
            ("error", "invalid-argument"),
        ],
        "{lines:?}"
    );
    assert_gpu_error(&lines, 0, "out-of-bounds", "outside the buffer");
    assert_gpu_error(&lines, 3, "invalid-argument", "another session");
    assert_gpu_error(&lines, 4, "invalid-argument", "another session");
    assert_eq!(host.leases().direct_transfer_bytes(), (0, 0));
    assert_baseline(&host);
}
