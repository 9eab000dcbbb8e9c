//! The example tasklets through the real path (component → host → worker process → backend),
//! checked against CPU references.

use tasklet_tests::{assert_baseline, load, manifest, run_ok, test_host};

#[test]
fn iota_prints_one_to_n() {
    let host = test_host!();
    let iota = load(&host, manifest("iota"));
    for n in [1u32, 37, 1000] {
        let out = run_ok(&host, &iota, &n.to_string());
        let expected: String = (1..=n).map(|i| format!("{i}\n")).collect();
        assert_eq!(out, expected, "n = {n}");
    }
    let default = run_ok(&host, &iota, "");
    assert_eq!(default.lines().count(), 256);
    assert_eq!(default.lines().last(), Some("256"));
    assert_baseline(&host);
}

#[test]
fn iota_rejects_bad_input() {
    let host = test_host!();
    let iota = load(&host, manifest("iota"));
    let err = host.run(&iota, b"twelve").unwrap_err();
    assert!(matches!(err, tasklet_runtime::RunError::Failed(_)), "{err}");
    assert_baseline(&host);
}

#[test]
fn vector_add_sums_on_the_device() {
    let host = test_host!();
    let va = load(&host, manifest("vector-add"));
    for n in [1u64, 1000, 100_000] {
        let out = run_ok(&host, &va, &n.to_string());
        // a[i] = i, b[i] = 2i, c = a + b: the sum of c is 3 * n(n-1)/2.
        let expected: u64 = (0..n).map(|i| 3 * i).sum();
        assert_eq!(out, format!("{expected}\n"), "n = {n}");
    }
    assert_baseline(&host);
}

#[test]
fn scale_multiplies_like_f32() {
    let host = test_host!();
    let scale = load(&host, manifest("scale"));
    let input = "1.5 1 2.25 -3 0.1 1e30 16777217";
    let out = run_ok(&host, &scale, input);
    let mut nums = input.split_whitespace().map(|t| t.parse::<f32>().unwrap());
    let factor = nums.next().unwrap();
    let expected: String = nums.map(|x| format!("{}\n", x * factor)).collect();
    assert_eq!(out, expected);
    assert_baseline(&host);
}

/// The Jacobi sweeps of `jacobi` on the CPU, in the kernel's f32 arithmetic: the midpoint after
/// each sweep and the final field, formatted as the tasklet prints them.
fn jacobi_on_the_cpu(n: usize, steps: usize) -> String {
    let mut a = vec![0.0f32; n];
    a[0] = 1.0;
    let mut b = a.clone();
    let mut history = Vec::new();
    for _ in 0..steps {
        for i in 1..n - 1 {
            b[i] = (a[i - 1] + a[i + 1]) * 0.5;
        }
        history.push(b[n / 2]);
        std::mem::swap(&mut a, &mut b);
    }
    let join = |v: &[f32]| {
        v.iter()
            .map(|x| format!("{x:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!("history {}\nfield {}\n", join(&history), join(&a))
}

#[test]
fn jacobi_replays_a_graph_with_a_device_scalar_for_the_step() {
    let host = test_host!();
    let jacobi = load(&host, manifest("jacobi"));
    for (n, steps) in [(3usize, 2usize), (64, 100), (1000, 400)] {
        let out = run_ok(&host, &jacobi, &format!("{n} {steps}"));
        assert_eq!(out, jacobi_on_the_cpu(n, steps), "n = {n}, steps = {steps}");
    }
    // Not vacuous: heat reached the midpoint within the sweeps.
    let reference = jacobi_on_the_cpu(64, 100);
    let last: f32 = reference
        .lines()
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(last > 0.0, "{reference}");
    let err = host.run(&jacobi, b"64 3").unwrap_err();
    assert!(matches!(err, tasklet_runtime::RunError::Failed(_)), "{err}");
    assert_baseline(&host);
}

#[test]
fn stream_pipeline_scales_every_chunk_over_two_streams() {
    let host = test_host!();
    let pipeline = load(&host, manifest("stream-pipeline"));
    for (chunks, len) in [(1usize, 1usize), (8, 4096), (5, 1000)] {
        let out = run_ok(&host, &pipeline, &format!("{chunks} {len}"));
        let total = chunks * len;
        let sum: u64 = (0..total as u64).map(|i| 3 * (i % 1000)).sum();
        let mut lines = out.lines();
        assert_eq!(
            lines.next(),
            Some(format!("chunks {chunks} elements {total} sum {sum}").as_str()),
            "{out}"
        );
        let elapsed: u64 = lines
            .next()
            .and_then(|l| l.strip_prefix("elapsed-ns "))
            .and_then(|ns| ns.parse().ok())
            .unwrap_or_else(|| panic!("no elapsed-ns line in {out:?}"));
        assert!(elapsed > 0, "{chunks} launches took no device time");
    }
    assert_baseline(&host);
}

#[test]
fn actor_serves_messages_through_a_persistent_kernel() {
    let host = test_host!();
    let actor = load(&host, manifest("actor"));
    for n in [1u32, 300] {
        let out = run_ok(&host, &actor, &n.to_string());
        assert_eq!(
            out,
            format!(
                "served {n} messages\nthe kernel counted {n} messages, 0 errors\nthe kernel returned when asked\n"
            ),
            "n = {n}"
        );
    }
    let err = host.run(&actor, b"many").unwrap_err();
    assert!(matches!(err, tasklet_runtime::RunError::Failed(_)), "{err}");
    assert_baseline(&host);
}
