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
