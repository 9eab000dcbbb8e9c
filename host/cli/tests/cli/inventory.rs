//! `tasklet inventory` with a policy's devices: every lent device is listed, each with its own
//! index, UUID, size and free memory; a malformed device list is refused naming its line and fix.

use crate::support::{tasklet, text};
use serde_json::Value;

/// A policy file in a temp folder (kept alive by the returned guard).
fn policy(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.toml");
    std::fs::write(&path, text).expect("policy written");
    let path = path.to_string_lossy().into_owned();
    (dir, path)
}

#[test]
fn the_emulated_devices_a_policy_lists_are_each_shown() {
    let (_dir, path) = policy("[emu]\ndevices = [\"16GiB\", \"16GiB\", \"8GiB\"]\n");
    let out = tasklet(
        &["inventory", "--backend", "emu", "--policy", &path, "--json"],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let devices: Vec<Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    let lent: Vec<&Value> = devices.iter().filter(|d| d["lent"] == true).collect();
    assert_eq!(lent.len(), 3, "{devices:?}");
    let gib = 1u64 << 30;
    for (i, (d, size)) in lent.iter().zip([16 * gib, 16 * gib, 8 * gib]).enumerate() {
        assert_eq!(d["index"], i as u64, "{d}");
        assert_eq!(d["backend"], "emu", "{d}");
        assert_eq!(d["uuid"], format!("emu-{i}"), "{d}");
        assert_eq!(d["total_memory"], size, "{d}");
        assert_eq!(d["free_memory"], size, "{d}");
        assert_eq!(d["compute_capability"], serde_json::json!([8, 0]), "{d}");
    }
    // The table says the same, one row per device.
    let out = tasklet(&["inventory", "--backend", "emu", "--policy", &path], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    for row in ["emu-0", "emu-1", "emu-2"] {
        assert!(table.contains(row), "{table}");
    }
}

#[test]
fn a_malformed_device_list_is_refused_with_its_line_and_fix() {
    for (policy_text, says) in [
        (
            "[emu]\ndevices = [\"16GiB\", \"16Gb\"]\n",
            "use B, KiB, MiB, GiB or TiB",
        ),
        ("[emu]\ndevices = []\n", "list at least one"),
        ("[cuda]\ndevices = [\"first\"]\n", "nvidia-smi -L"),
    ] {
        let (_dir, path) = policy(policy_text);
        let out = tasklet(&["inventory", "--backend", "emu", "--policy", &path], b"");
        assert!(!out.status.success(), "{policy_text}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains("policy.toml"), "{stderr}");
        assert!(stderr.contains(says), "{policy_text}: {stderr}");
        assert_eq!(
            stderr
                .trim()
                .lines()
                .filter(|l| l.starts_with("error"))
                .count(),
            1,
            "one line: {stderr}"
        );
    }
}
