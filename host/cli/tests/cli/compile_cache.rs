//! `tasklet run`'s compiled-component cache (`--compile-cache`), and tasklet folders holding a
//! prebuilt component: what `--stats` says about each start, and what is left in the cache.

use crate::support::{repo, tasklet, text};
use std::path::{Path, PathBuf};

/// A fresh folder for one test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tasklet-cli-cache-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `tasklet run --stats` of `target` on `input` with the compiled cache in `cache` (and `extra`
/// options): its stdout, and its `compiled-cache=` value.
fn run_cached(target: &str, input: &str, cache: &Path, extra: &[&str]) -> (String, String) {
    let mut args = vec![
        "run",
        "--stats",
        "--backend",
        "emu",
        "--compile-cache",
        cache.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    args.push(target);
    let out = tasklet(&args, input.as_bytes());
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("stats: "))
        .unwrap_or_else(|| panic!("no stats line in {stderr}"));
    let how = line
        .split(' ')
        .find_map(|kv| kv.strip_prefix("compiled-cache="))
        .unwrap_or_else(|| panic!("no compiled-cache= in {line}"));
    (text(&out.stdout), how.to_owned())
}

/// The compiled cache's entries in `cache`: (path, length).
fn entries(cache: &Path) -> Vec<(PathBuf, u64)> {
    let mut found: Vec<_> = std::fs::read_dir(cache.join("compiled"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.path(), e.metadata().unwrap().len())
        })
        .collect();
    found.sort();
    found
}

#[test]
fn a_second_start_loads_the_compiled_component_from_the_cache() {
    let cache = temp_dir("hit");
    let (out, how) = run_cached("tasklets/iota", "3", &cache, &[]);
    assert_eq!((out.as_str(), how.as_str()), ("1\n2\n3\n", "miss"));
    assert_eq!(entries(&cache).len(), 1);
    let (out, how) = run_cached("tasklets/iota", "3", &cache, &[]);
    assert_eq!((out.as_str(), how.as_str()), ("1\n2\n3\n", "hit"));
    // Off: compiled on every start.
    let (out, how) = run_cached("tasklets/iota", "2", Path::new("off"), &[]);
    assert_eq!((out.as_str(), how.as_str()), ("1\n2\n", "off"));
}

#[test]
fn a_damaged_entry_is_discarded_and_the_component_compiled_again() {
    let cache = temp_dir("damaged");
    let (_, how) = run_cached("tasklets/iota", "2", &cache, &[]);
    assert_eq!(how, "miss");
    let found = entries(&cache);
    let [(entry, len)] = &found[..] else {
        panic!("one entry expected: {found:?}");
    };
    let len = *len;
    let mut bytes = std::fs::read(entry).unwrap();
    let at = bytes.len() - (len as usize) / 3;
    bytes[at] ^= 0x40;
    std::fs::write(entry, &bytes).unwrap();
    let (out, how) = run_cached("tasklets/iota", "2", &cache, &[]);
    assert_eq!((out.as_str(), how.as_str()), ("1\n2\n", "discarded"));
    // Replaced by a good one.
    let (out, how) = run_cached("tasklets/iota", "2", &cache, &[]);
    assert_eq!((out.as_str(), how.as_str()), ("1\n2\n", "hit"));
}

#[test]
fn the_cache_evicts_the_entry_used_longest_ago_past_its_size() {
    // The two entries' sizes, from an unbounded cache.
    let sizes = temp_dir("sizes");
    run_cached("tasklets/iota", "2", &sizes, &[]);
    run_cached("tasklets/vector-add", "2", &sizes, &[]);
    let both = entries(&sizes);
    assert_eq!(both.len(), 2, "{both:?}");
    // Room for either, not for both.
    let bound = both.iter().map(|e| e.1).max().unwrap().to_string();
    let cache = temp_dir("bounded");
    let bounded = ["--compile-cache-size", bound.as_str()];
    let expect = [
        ("tasklets/iota", "1\n2\n", "miss"),
        ("tasklets/iota", "1\n2\n", "hit"),
        ("tasklets/vector-add", "9\n", "miss"),
        ("tasklets/iota", "1\n2\n", "miss"),
        ("tasklets/vector-add", "9\n", "miss"),
    ];
    for (target, output, cached) in expect {
        let input = if target.ends_with("iota") { "2" } else { "3" };
        let (out, how) = run_cached(target, input, &cache, &bounded);
        assert_eq!((out.as_str(), how.as_str()), (output, cached), "{target}");
        assert_eq!(entries(&cache).len(), 1, "{target}");
    }
}

#[test]
fn a_folder_with_a_prebuilt_component_and_no_cargo_project_runs_it_as_is() {
    // The iota component, built if need be.
    let out = tasklet(&["run", "tasklets/iota", "--backend", "emu"], b"1");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dir = temp_dir("prebuilt");
    std::fs::copy(
        repo().join("tasklets/target/wasm32-wasip2/release/iota.wasm"),
        dir.join("iota.wasm"),
    )
    .unwrap();
    std::fs::write(
        dir.join("tasklet.toml"),
        "name = \"prebuilt\"\ncomponent = \"iota.wasm\"\n[gpu]\nmax-vram = \"16MiB\"\nmax-leases = 1\nmax-lease-secs = \"60s\"\n\
         rights = [\"alloc\", \"read\", \"write\", \"load\", \"launch\"]\n",
    )
    .unwrap();
    let target = dir.to_str().unwrap();
    let out = tasklet(&["run", "--backend", "emu", target], b"3");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(text(&out.stdout), "1\n2\n3\n");
    assert!(!stderr.contains("cargo"), "{stderr}");

    // Without its component: one line saying what is missing and how to build it.
    std::fs::remove_file(dir.join("iota.wasm")).unwrap();
    std::fs::write(dir.join("build.sh"), "#!/bin/sh\n").unwrap();
    let out = tasklet(&["run", "--backend", "emu", target], b"3");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("iota.wasm") && stderr.contains("is missing"),
        "{stderr}"
    );
    assert!(stderr.contains("build.sh"), "{stderr}");
}
