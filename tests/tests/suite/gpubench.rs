//! The speed benchmark's tasklet (`tasklets/testing/gpubench`, driven by
//! benches/speed/gpu_speed.rs): every command runs with tiny counts and prints all its figures, so
//! that the benchmark cannot rot unnoticed between GPU runs.

use tasklet_tests::{assert_baseline, load, manifest, run_ok, test_host};

#[test]
fn every_gpubench_command_prints_its_figures() {
    let host = test_host!();
    let bench = load(&host, manifest("testing/gpubench"));
    let cases: [(&str, &[&str]); 7] = [
        (
            "launch-sync 3",
            &[
                "launch_sync_ns",
                "launch_sync_each_ns",
                "launch_sync_p99_ns",
            ],
        ),
        (
            "launch-async 3",
            &["launch_async_ns", "launch_async_posted_ns"],
        ),
        ("rw4k 3", &["rw4k_ns", "rw4k_p99_ns"]),
        (
            "bulk 65536 2",
            &[
                "bulk_bytes",
                "bulk_write_bps",
                "bulk_read_bps",
                "bulk_read_list_bps",
            ],
        ),
        (
            "lease 3",
            &[
                "lease_acquire_p50_ns",
                "lease_acquire_p99_ns",
                "lease_cycle_p50_ns",
                "lease_cycle_p99_ns",
            ],
        ),
        (
            "module-load 3 settle=1",
            &["module_load_ns", "module_load_p99_ns"],
        ),
        ("clock 3", &["clock_read_ns"]),
    ];
    for (command, names) in cases {
        let out = run_ok(&host, &bench, command);
        let figures: Vec<(&str, f64)> = out
            .lines()
            .map(|l| {
                let (name, value) = l
                    .split_once(' ')
                    .unwrap_or_else(|| panic!("`{command}`: bad line {l:?}"));
                (
                    name,
                    value
                        .parse()
                        .unwrap_or_else(|_| panic!("`{command}`: bad line {l:?}")),
                )
            })
            .collect();
        let got: Vec<&str> = figures.iter().map(|f| f.0).collect();
        assert_eq!(got, names, "`{command}` printed:\n{out}");
        assert!(
            figures.iter().all(|f| f.1 > 0.0),
            "`{command}` printed a zero:\n{out}"
        );
        assert_baseline(&host);
    }
    assert_eq!(
        run_ok(&host, &bench, "bulk 4096 1").lines().next(),
        Some("bulk_bytes 4096")
    );
    let err = host
        .run(&bench, b"warp-speed 3")
        .expect_err("an unknown command fails");
    assert!(err.to_string().contains("unknown command"), "{err}");
}

#[test]
fn the_benchmarks_full_size_bulk_fits_the_tasklet_and_one_call_carries_it() {
    // The GPU benchmark's 256 MiB × 5: the tasklet holds the data, the in-place read's buffer and
    // a returned list at once, which must fit its memory limit, every repetition (a figures Vec
    // growing at the fifth fragmented the heap, and the bench trapped on the GPU machine). And wasmtime caps what one guest→host call may carry at
    // 128 MiB unless the host raises it; the host raises it to the tasklet's memory limit, so a
    // 256 MiB mem-write reaches the device in one call.
    let mut policy = tasklet_tests::test_policy();
    policy.workers.emu_memory = 512 << 20;
    let host = test_host!(policy);
    let bench = load(&host, manifest("testing/gpubench"));
    let out = run_ok(&host, &bench, &format!("bulk {} 5 settle=1", 256u64 << 20));
    assert_eq!(
        out.lines().next(),
        Some(format!("bulk_bytes {}", 256u64 << 20).as_str()),
        "{out}"
    );
    assert_baseline(&host);
}

/// The actor benchmark's commands (benches/actors): a persistent kernel serving the guest's
/// rings while it runs, and its handler as a normal kernel, each printing every figure; a batch
/// larger than the rings is refused naming the limit.
#[test]
fn the_actor_commands_print_their_figures() {
    let host = test_host!();
    let bench = load(&host, manifest("testing/gpubench"));
    let cases: [(&str, &[&str]); 6] = [
        ("actor-rtt 2", &["actor_rtt_ns", "actor_rtt_p99_ns"]),
        ("ring-calls 20", &["ring_send_ns", "ring_recv_ns"]),
        (
            "actor-batch 8 2",
            &["actor_batch_ns", "actor_batch_p99_ns", "actor_msgs_per_s"],
        ),
        (
            "actor-rtt-seq 2",
            &["seq_actor_rtt_ns", "seq_actor_rtt_p99_ns"],
        ),
        (
            "actor-batch-seq 8 2",
            &[
                "seq_actor_batch_ns",
                "seq_actor_batch_p99_ns",
                "seq_actor_msgs_per_s",
            ],
        ),
        (
            "handler-launch 2",
            &[
                "handler_launch_sync_ns",
                "handler_launch_sync_p99_ns",
                "handler_rtt_ns",
            ],
        ),
    ];
    for (command, names) in cases {
        let out = run_ok(&host, &bench, command);
        let mut got = Vec::new();
        for l in out.lines() {
            let (name, value) = l
                .split_once(' ')
                .unwrap_or_else(|| panic!("`{command}`: bad line {l:?}"));
            let value: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("`{command}`: bad line {l:?}"));
            assert!(value > 0.0, "`{command}` printed a zero:\n{out}");
            got.push(name);
        }
        assert_eq!(got, names, "`{command}` printed:\n{out}");
        assert_baseline(&host);
    }
    let out = run_ok(&host, &bench, "actor-batch 257 1");
    assert!(
        out.starts_with("error invalid-argument") && out.contains("256 slots"),
        "{out}"
    );
    assert_baseline(&host);
}
