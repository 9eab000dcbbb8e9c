//! `tasklet run`'s compiled-component cache (`--compile-cache`), and tasklet folders holding a
//! prebuilt component: what `--stats` says about each start, and what is left in the cache.

use crate::support::{repo, tasklet, text};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A fresh folder for one test, removed when dropped.
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("tasklet-cli-cache-{name}-"))
        .tempdir()
        .unwrap()
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
    let cache = cache.path();
    let (out, how) = run_cached("tasklets/iota", "3", cache, &[]);
    assert_eq!((out.as_str(), how.as_str()), ("1\n2\n3\n", "miss"));
    assert_eq!(entries(cache).len(), 1);
    let (out, how) = run_cached("tasklets/iota", "3", cache, &[]);
    assert_eq!((out.as_str(), how.as_str()), ("1\n2\n3\n", "hit"));
    // Off: compiled on every start.
    let (out, how) = run_cached("tasklets/iota", "2", Path::new("off"), &[]);
    assert_eq!((out.as_str(), how.as_str()), ("1\n2\n", "off"));
}

#[test]
fn a_damaged_entry_is_discarded_and_the_component_compiled_again() {
    let cache = temp_dir("damaged");
    let cache = cache.path();
    let (_, how) = run_cached("tasklets/iota", "2", cache, &[]);
    assert_eq!(how, "miss");
    let found = entries(cache);
    let [(entry, len)] = &found[..] else {
        panic!("one entry expected: {found:?}");
    };
    let len = *len;
    let mut bytes = std::fs::read(entry).unwrap();
    let at = bytes.len() - (len as usize) / 3;
    bytes[at] ^= 0x40;
    std::fs::write(entry, &bytes).unwrap();
    let (out, how) = run_cached("tasklets/iota", "2", cache, &[]);
    assert_eq!((out.as_str(), how.as_str()), ("1\n2\n", "discarded"));
    // Replaced by a good one.
    let (out, how) = run_cached("tasklets/iota", "2", cache, &[]);
    assert_eq!((out.as_str(), how.as_str()), ("1\n2\n", "hit"));
}

#[test]
fn the_cache_evicts_the_entry_used_longest_ago_past_its_size() {
    // The two entries' sizes, from an unbounded cache.
    let sizes = temp_dir("sizes");
    let sizes = sizes.path();
    run_cached("tasklets/iota", "2", sizes, &[]);
    run_cached("tasklets/vector-add", "2", sizes, &[]);
    let both = entries(sizes);
    assert_eq!(both.len(), 2, "{both:?}");
    // Room for either, not for both.
    let bound = both.iter().map(|e| e.1).max().unwrap().to_string();
    let cache = temp_dir("bounded");
    let cache = cache.path();
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
        let (out, how) = run_cached(target, input, cache, &bounded);
        assert_eq!((out.as_str(), how.as_str()), (output, cached), "{target}");
        assert_eq!(entries(cache).len(), 1, "{target}");
    }
}

#[test]
fn a_folder_with_a_prebuilt_component_and_no_cargo_project_runs_it_as_is() {
    // The iota component, built if need be.
    let out = tasklet(&["run", "tasklets/iota", "--backend", "emu"], b"1");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dir = temp_dir("prebuilt");
    let dir = dir.path();
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

/// A tasklet crate named by a relative path is built where its manifest says its component
/// lies (relative to the folder `tasklet` runs in), not relative to the crate's own folder,
/// where cargo runs: the README's first command names `tasklets/iota` so on a fresh checkout.
#[test]
fn a_crate_named_by_a_relative_path_is_built_where_its_manifest_says() {
    if !can_build() {
        return;
    }
    let dir = temp_dir("relative");
    let crate_dir = tiny_crate(dir.path());
    let stderr = run_tiny(dir.path());
    assert!(
        crate_dir
            .join("target/wasm32-wasip2/release/tiny.wasm")
            .is_file(),
        "not built where its manifest says: {stderr}"
    );
    assert!(
        !crate_dir.join("tiny").exists(),
        "built a folder too deep: {stderr}"
    );
    // It exports no tasklet, which the run then says; what it does not say is that the
    // component it just built is missing.
    assert!(!stderr.contains("cannot read component"), "{stderr}");
}

/// A file of a tasklet crate's folder that its build does not read (here its manifest, edited)
/// makes the next run build it, once: cargo leaves the component as it was, and the run after
/// does not build again.
#[test]
fn a_file_the_build_does_not_read_makes_one_build_not_one_each_run() {
    if !can_build() {
        return;
    }
    let dir = temp_dir("untouched");
    let crate_dir = tiny_crate(dir.path());
    let run = || run_tiny(dir.path());
    let first = run();
    assert!(first.contains("building tiny"), "{first}");
    // The manifest edited after the build (a second later: file times may be that coarse).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let manifest = crate_dir.join("tasklet.toml");
    let text_then = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text_then + "# edited\n").unwrap();
    let second = run();
    assert!(second.contains("building tiny"), "{second}");
    let third = run();
    assert!(!third.contains("building"), "built again: {third}");

    // A manifest naming a component cargo does not make: every run says it builds (and then
    // that the component is missing), never silenced by a build that made something else.
    std::fs::write(
        &manifest,
        "name = \"tiny\"\ncomponent = \"target/wasm32-wasip2/release/other.wasm\"\n",
    )
    .unwrap();
    std::fs::write(
        crate_dir.join("target/wasm32-wasip2/release/other.wasm"),
        b"\0asm",
    )
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(crate_dir.join("README"), "newer than other.wasm").unwrap();
    for _ in 0..2 {
        let again = run();
        assert!(again.contains("building tiny"), "{again}");
    }
}

/// Whether a Rust toolchain is here to build a tasklet with; says `skipped: …` when not (the
/// packaged GPU suite runs where there is none).
fn can_build() -> bool {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let found = std::process::Command::new(&rustc)
        .arg("--version")
        .output()
        .is_ok();
    if !found {
        crate::support::say_skipped(&format!(
            "no Rust toolchain ({rustc} not found): building a tasklet needs one"
        ));
    }
    found
}

/// `tasklet run tiny` in `parent` (the folder `tiny_crate` made it in), on the emulator, no
/// input: what it said on stderr.
fn run_tiny(parent: &Path) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tasklet"))
        .args(["run", "--backend", "emu", "tiny"])
        .current_dir(parent)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    text(&out.stderr)
}

/// A tasklet crate `tiny` in `parent` (no dependencies: it builds in a second), its component
/// not built yet; its folder.
fn tiny_crate(parent: &Path) -> PathBuf {
    let crate_dir = parent.join("tiny");
    std::fs::create_dir_all(crate_dir.join("src")).unwrap();
    std::fs::write(
        crate_dir.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [lib]\ncrate-type = [\"cdylib\"]\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(crate_dir.join("src/lib.rs"), "").unwrap();
    std::fs::write(
        crate_dir.join("tasklet.toml"),
        "name = \"tiny\"\ncomponent = \"target/wasm32-wasip2/release/tiny.wasm\"\n",
    )
    .unwrap();
    crate_dir
}

/// `deploy push` and `deploy run` without where to (or with both places) say so before they
/// build the tasklet: no minute of compiling for a one-line usage error.
#[test]
fn deploy_commands_check_where_to_before_building() {
    let dir = temp_dir("where");
    let crate_dir = tiny_crate(dir.path());
    let path = crate_dir.to_str().unwrap();
    for args in [
        &["deploy", "push", path][..],
        &["deploy", "run", path, "--json"][..],
        &[
            "deploy",
            "run",
            path,
            "--node",
            "127.0.0.1:1",
            "--nats",
            "nats://127.0.0.1:1",
        ][..],
    ] {
        let out = tasklet(args, b"");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("--node"), "{args:?}: {stderr}");
        assert!(!stderr.contains("building"), "{args:?}: {stderr}");
        assert!(
            !crate_dir.join("target").exists(),
            "{args:?} built the tasklet first: {stderr}"
        );
    }
}

/// `wasm` with a custom section appended that makes it `len` bytes long: the same component,
/// another digest. A component may carry custom sections at its top level.
fn padded(wasm: &[u8], len: usize) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    // id 0, the section's size (5-byte LEB: a fixed width, so the padding is exact), a
    // one-byte name, then zeros.
    let fixed = 1 + 5 + 2;
    let pad = len - wasm.len() - fixed;
    let mut out = wasm.to_vec();
    out.push(0);
    let size = 2 + pad;
    for i in 0..5 {
        let byte = ((size >> (7 * i)) & 0x7f) as u8;
        out.push(if i < 4 { byte | 0x80 } else { byte });
    }
    leb(1, &mut out);
    out.push(b'p');
    out.resize(len, 0);
    out
}

#[test]
fn a_component_rewritten_in_place_is_never_served_its_old_compiled_form() {
    // A warm start takes the component's digest from a record of its file (device, inode, size,
    // times) without reading it. Rewrite the file in place with another component of the same
    // size and put its modification time back: only its change time tells, and must.
    let out = tasklet(&["run", "tasklets/iota", "--backend", "emu"], b"1");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = tasklet(&["run", "tasklets/vector-add", "--backend", "emu"], b"1");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let release = repo().join("tasklets/target/wasm32-wasip2/release");
    let iota = std::fs::read(release.join("iota.wasm")).unwrap();
    let vector_add = std::fs::read(release.join("vector_add.wasm")).unwrap();
    let len = iota.len().max(vector_add.len()) + 64;
    let (iota, vector_add) = (padded(&iota, len), padded(&vector_add, len));

    let dir = temp_dir("rewritten");
    let dir = dir.path();
    let cache = dir.join("cache");
    let component = dir.join("c.wasm");
    std::fs::write(&component, &iota).unwrap();
    std::fs::write(
        dir.join("tasklet.toml"),
        "name = \"rewritten\"\ncomponent = \"c.wasm\"\n[gpu]\nmax-vram = \"16MiB\"\nmax-leases = 1\nmax-lease-secs = \"60s\"\n\
         rights = [\"alloc\", \"read\", \"write\", \"load\", \"launch\"]\n",
    )
    .unwrap();
    let target = dir.to_str().unwrap();
    // Only a file unchanged for a while gets a record (see source_digest.rs).
    std::thread::sleep(Duration::from_millis(2_200));
    let (out, how) = run_cached(target, "2", &cache, &[]);
    assert_eq!((out.as_str(), how.as_str()), ("1\n2\n", "miss"));
    let records = std::fs::read_dir(cache.join("sources")).unwrap().count();
    assert_eq!(records, 1, "the settled component's digest is recorded");
    let (out, how) = run_cached(target, "2", &cache, &[]);
    assert_eq!((out.as_str(), how.as_str()), ("1\n2\n", "hit"));

    let modified = std::fs::metadata(&component).unwrap().modified().unwrap();
    std::fs::write(&component, &vector_add).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&component)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    assert_eq!(std::fs::metadata(&component).unwrap().len(), len as u64);
    let expected = run_cached("tasklets/vector-add", "3", &cache, &[]).0;
    let (out, how) = run_cached(target, "3", &cache, &[]);
    assert_eq!(out, expected, "the new component ran");
    assert_eq!(how, "miss");
    // And the first one again, replaced whole this time (another inode): its entry is still
    // there under its own digest.
    std::fs::write(dir.join("next.wasm"), &iota).unwrap();
    std::fs::rename(dir.join("next.wasm"), &component).unwrap();
    let (out, how) = run_cached(target, "2", &cache, &[]);
    assert_eq!((out.as_str(), how.as_str()), ("1\n2\n", "hit"));
}

/// A component larger than a push carries is refused before it is read (a sparse file here),
/// naming both bounds; nothing connects.
#[test]
fn a_component_too_large_to_push_is_refused_before_it_is_read() {
    let dir = temp_dir("too-large");
    let dir = dir.path();
    let big = std::fs::File::create(dir.join("big.wasm")).unwrap();
    big.set_len(tasklet_wire::limits::DEFAULT_MAX_STREAM_BYTES + 1)
        .unwrap();
    std::fs::write(
        dir.join("tasklet.toml"),
        "name = \"big\"\ncomponent = \"big.wasm\"\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = tasklet(
        &[
            "deploy",
            "push",
            dir.to_str().unwrap(),
            "--node",
            "127.0.0.1:9",
        ],
        b"",
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("more than a push carries") && stderr.contains("max-component-size"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}
