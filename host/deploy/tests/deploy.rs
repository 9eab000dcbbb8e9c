//! The deployer end to end: real tasklet components pushed into a real store and run through a
//! real host on the suite's backend (the emulator unless `TASKLET_TEST_BACKEND=cuda`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tasklet_deploy::{DeployConfig, Deployer, Error, ExitStatus, LoadKind, RunOutcome};
use tasklet_runtime::config::Grant;
use tasklet_runtime::gpu::LocalGpu;
use tasklet_runtime::{Host, RunStop};
use tasklet_store::{Digest, Store, StoreConfig};
use tasklet_tests::{assert_baseline, host_with, probe_lines, tasklet_dir, test_policy};
use tempfile::TempDir;

fn host() -> Host {
    host_with(
        test_policy(),
        env!("CARGO_BIN_EXE_tasklet-deploy-test-worker"),
    )
}

/// A tasklet as `tasklet deploy push` sends it: its manifest's text and its component's bytes.
struct Tasklet {
    manifest: Vec<u8>,
    component: Vec<u8>,
}

fn tasklet(name: &str) -> Tasklet {
    let dir = tasklet_dir(name);
    let manifest = tasklet_runtime::Manifest::load(&dir).expect("manifest loads");
    Tasklet {
        manifest: std::fs::read(dir.join("tasklet.toml")).expect("manifest reads"),
        component: std::fs::read(&manifest.component).expect("component was built"),
    }
}

fn iota() -> Tasklet {
    tasklet("iota")
}

fn probe() -> Tasklet {
    tasklet("testing/probe")
}

fn open_store(dir: &Path) -> Store {
    Store::open(dir, StoreConfig::default()).expect("store opens")
}

fn deployer_with(dir: &Path, config: DeployConfig) -> Deployer {
    Deployer::new(open_store(dir), config).expect("deployer starts")
}

fn deployer(dir: &Path) -> Deployer {
    deployer_with(dir, DeployConfig::default())
}

fn push(deployer: &Deployer, tasklet: &Tasklet) -> Digest {
    deployer
        .push(&tasklet.manifest, tasklet.component.as_slice())
        .unwrap_or_else(|e| panic!("push: {e}"))
        .digest
}

/// Runs `digest` granted what the host's policy grants it.
fn run(deployer: &Deployer, host: &Host, digest: &Digest, input: &str) -> RunOutcome {
    run_granted(deployer, host, digest, input, |grant| grant)
}

/// Runs `digest` granted what the host's policy grants it, changed by `adjust`.
fn run_granted(
    deployer: &Deployer,
    host: &Host,
    digest: &Digest,
    input: &str,
    adjust: impl FnOnce(Grant) -> Grant,
) -> RunOutcome {
    let leases = Arc::clone(host.leases());
    deployer
        .run(
            digest,
            input.as_bytes(),
            |manifest| adjust(host.policy().grant(manifest)),
            |grant| Box::new(LocalGpu::new(grant, leases)),
        )
        .unwrap_or_else(|e| panic!("run: {e}"))
}

#[track_caller]
fn assert_output(outcome: &RunOutcome, expected: &str) {
    assert_eq!(outcome.status, ExitStatus::Ok, "{}", outcome.status);
    assert_eq!(String::from_utf8_lossy(&outcome.output), expected);
}

/// Every file under the store's folder, relative to it (the store's layout is four folders
/// deep at most).
fn store_files(root: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        assert!(depth < 8, "the store is deeper than its layout");
        for entry in std::fs::read_dir(dir).expect("store folder lists") {
            let path = entry.expect("store entry").path();
            if path.is_dir() {
                walk(root, &path, depth + 1, out);
            } else {
                out.push(path.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, 0, &mut out);
    out.sort();
    out
}

/// The files of the store's compiled cache.
fn compiled_entries(root: &Path) -> Vec<PathBuf> {
    store_files(root)
        .into_iter()
        .filter(|p| p.starts_with("compiled"))
        .map(|p| root.join(p))
        .collect()
}

#[test]
fn the_deployer_is_shared_across_threads() {
    fn shared<T: Send + Sync + Clone>() {}
    shared::<Deployer>();
}

#[test]
fn push_then_run_round_trip() {
    let host = host();
    let dir = TempDir::new().unwrap();
    let deployer = deployer(dir.path());

    let pushed = deployer
        .push(&iota().manifest, iota().component.as_slice())
        .expect("push");
    assert!(!pushed.already_present);
    assert!(pushed.compiled_in.is_some(), "the first push compiles");
    assert_eq!(pushed.component, Digest::of(&iota().component));
    assert_eq!(compiled_entries(dir.path()).len(), 1, "compiled at push");

    // Read from the store: nothing is warm yet.
    assert_eq!(deployer.warm_tasklets(), 0);
    let stored = deployer.manifest(&pushed.digest).expect("manifest");
    let first = run(&deployer, &host, &pushed.digest, "4");
    assert_output(&first, "1\n2\n3\n4\n");
    assert_eq!(first.digest, pushed.digest);
    assert_eq!(
        first.load,
        LoadKind::Cached,
        "the first run loads what push compiled"
    );
    let second = run(&deployer, &host, &pushed.digest, "3");
    assert_output(&second, "1\n2\n3\n");
    assert_eq!(second.load, LoadKind::Warm);
    assert!(second.elapsed > Duration::ZERO);
    assert_eq!(deployer.warm_tasklets(), 1);

    // Taken from the warm tasklet: the same as the store's.
    let manifest = deployer.manifest(&pushed.digest).expect("manifest");
    assert_eq!(manifest, stored);
    assert_eq!(manifest.name, "iota");
    assert_eq!(
        manifest.component,
        Path::new(&format!("sha256:{}", pushed.component))
    );
    assert_baseline(&host);
}

#[test]
fn push_is_idempotent_and_compiles_a_component_once() {
    let dir = TempDir::new().unwrap();
    let deployer = deployer(dir.path());
    let iota = iota();
    let first = deployer
        .push(&iota.manifest, iota.component.as_slice())
        .unwrap();
    let files = store_files(dir.path());

    let again = deployer
        .push(&iota.manifest, iota.component.as_slice())
        .unwrap();
    assert_eq!(again.digest, first.digest);
    assert!(again.already_present);
    assert_eq!(
        again.compiled_in, None,
        "the compiled cache already held it"
    );
    assert_eq!(store_files(dir.path()), files, "nothing changed");

    // The same component under another manifest is another deployment, compiled already.
    let other_manifest = String::from_utf8(iota.manifest.clone())
        .unwrap()
        .replace("wall-time = \"30s\"", "wall-time = \"20s\"");
    let other = deployer
        .push(other_manifest.as_bytes(), iota.component.as_slice())
        .unwrap();
    assert_ne!(other.digest, first.digest);
    assert_eq!(other.component, first.component);
    assert!(!other.already_present);
    assert_eq!(other.compiled_in, None);
    assert_eq!(compiled_entries(dir.path()).len(), 1);
    assert_eq!(deployer.store().deployments().unwrap().deployments.len(), 2);
}

#[test]
fn a_component_pushed_in_chunks_is_the_same_deployment() {
    let dir = TempDir::new().unwrap();
    let deployer = deployer(dir.path());
    let iota = iota();
    let mut push = deployer.start_push(&iota.manifest).unwrap();
    assert!(push.is_empty());
    for chunk in iota.component.chunks(1000) {
        push.write_chunk(chunk).unwrap();
    }
    assert_eq!(push.len(), iota.component.len() as u64);
    let chunked = push.finish().unwrap();
    let whole = deployer
        .push(&iota.manifest, iota.component.as_slice())
        .unwrap();
    assert_eq!(chunked.digest, whole.digest);
    assert!(whole.already_present);
}

#[test]
fn a_bad_manifest_is_refused_and_nothing_is_stored() {
    let dir = TempDir::new().unwrap();
    let deployer = deployer(dir.path());
    let component = iota().component;
    let cases: [(&[u8], &str); 5] = [
        (b"name = \"x\"\n", "component"),
        (
            b"name = \"x\"\ncomponent = \"x.wasm\"\nmax-gpus = 3\n",
            "max-gpus",
        ),
        (
            b"name = \"x\"\ncomponent = \"x.wasm\"\n[limits]\nmemory = \"12 parsecs\"\n",
            "line 4",
        ),
        (b"name = \"x\xff\"\ncomponent = \"x.wasm\"\n", "UTF-8"),
        (b"\0asm", ""),
    ];
    for (manifest, needle) in cases {
        let err = deployer
            .push(manifest, component.as_slice())
            .expect_err("refused");
        assert!(matches!(err, Error::InvalidManifest { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains(needle), "{message}");
        assert!(!message.contains('\n'), "one line: {message:?}");
        assert!(
            deployer.start_push(manifest).is_err(),
            "refused before any component"
        );
    }
    let huge = vec![b'#'; tasklet_deploy::MAX_MANIFEST_BYTES + 1];
    let err = deployer.push(&huge, component.as_slice()).unwrap_err();
    assert!(matches!(err, Error::ManifestTooLarge { .. }), "{err:?}");
    assert_eq!(store_files(dir.path()), Vec::<PathBuf>::new());
}

#[test]
fn a_bad_component_is_refused_and_nothing_is_stored() {
    let dir = TempDir::new().unwrap();
    let deployer = deployer(dir.path());
    let manifest = iota().manifest;
    // Random bytes (a fixed xorshift sequence), a core module, an empty file.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let random: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let core_module = b"\0asm\x01\0\0\0".to_vec();
    let cases = [
        (random, "not WebAssembly"),
        (core_module, "build the tasklet for wasm32-wasip2"),
        (Vec::new(), "shorter than a WebAssembly preamble"),
    ];
    for (component, says) in cases {
        let err = deployer
            .push(&manifest, component.as_slice())
            .expect_err("refused");
        assert!(matches!(err, Error::InvalidComponent { .. }), "{err:?}");
        let message = err.to_string();
        assert!(!message.contains('\n'), "one line: {message:?}");
        assert!(message.contains(says), "{says:?} not in {message:?}");
    }
    assert_eq!(store_files(dir.path()), Vec::<PathBuf>::new());
}

#[test]
fn a_component_that_is_not_a_tasklet_is_refused() {
    // A valid component, but it exports no `run`: compiling succeeds, linking does not.
    let dir = TempDir::new().unwrap();
    let deployer = deployer(dir.path());
    let empty_component = b"\0asm\x0d\0\x01\0".to_vec();
    let err = deployer
        .push(&iota().manifest, empty_component.as_slice())
        .expect_err("refused");
    assert!(matches!(err, Error::InvalidComponent { .. }), "{err:?}");
    assert_eq!(store_files(dir.path()), Vec::<PathBuf>::new());
}

#[test]
fn a_component_past_the_limit_is_refused_as_it_arrives() {
    let dir = TempDir::new().unwrap();
    let limit = 1000;
    let deployer = deployer_with(
        dir.path(),
        DeployConfig {
            max_component_bytes: limit,
            ..DeployConfig::default()
        },
    );
    let iota = iota();
    let err = deployer
        .push(&iota.manifest, iota.component.as_slice())
        .unwrap_err();
    assert!(
        matches!(err, Error::ComponentTooLarge { limit: 1000, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains(tasklet_deploy::MAX_COMPONENT_SETTING),
        "{err}"
    );

    let mut push = deployer.start_push(&iota.manifest).unwrap();
    push.write_chunk(&iota.component[..600]).unwrap();
    let err = push.write_chunk(&iota.component[600..1200]).unwrap_err();
    assert!(matches!(err, Error::ComponentTooLarge { .. }), "{err:?}");
    let err = push.write_chunk(b"more").unwrap_err();
    assert!(matches!(err, Error::PushClosed), "{err:?}");
    assert!(matches!(push.finish().unwrap_err(), Error::PushClosed));

    // Exactly at the limit is allowed (and then refused for what it is).
    let err = deployer
        .push(&iota.manifest, &iota.component[..limit as usize])
        .unwrap_err();
    assert!(matches!(err, Error::InvalidComponent { .. }), "{err:?}");
    assert_eq!(store_files(dir.path()), Vec::<PathBuf>::new());
}

#[test]
fn an_unknown_digest_is_not_found() {
    let host = host();
    let dir = TempDir::new().unwrap();
    let deployer = deployer(dir.path());
    let unknown = Digest::of(b"never pushed");
    let leases = Arc::clone(host.leases());
    let err = deployer
        .run(
            &unknown,
            b"",
            |manifest| host.policy().grant(manifest),
            |grant| Box::new(LocalGpu::new(grant, leases)),
        )
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert!(err.to_string().contains(&unknown.to_string()), "{err}");
    assert!(deployer.manifest(&unknown).unwrap_err().is_not_found());
    assert!(deployer.delete(&unknown).unwrap_err().is_not_found());
}

#[test]
fn load_kinds_follow_memory_then_cache_then_compiling() {
    let host = host();
    let dir = TempDir::new().unwrap();
    let digest = push(&deployer(dir.path()), &iota());
    let component = Digest::of(&iota().component);

    let deployer = deployer(dir.path());
    let kinds = |deployer: &Deployer, n: usize| -> Vec<LoadKind> {
        (0..n)
            .map(|_| {
                let outcome = run(deployer, &host, &digest, "2");
                assert_output(&outcome, "1\n2\n");
                outcome.load
            })
            .collect()
    };
    assert_eq!(
        kinds(&deployer, 3),
        [LoadKind::Cached, LoadKind::Warm, LoadKind::Warm]
    );

    // A restarted deployer (same store) has nothing in memory.
    let deployer = self::deployer(dir.path());
    assert_eq!(kinds(&deployer, 2), [LoadKind::Cached, LoadKind::Warm]);

    // Without the compiled entry, the next cold run compiles, and caches again.
    let removed = deployer
        .store()
        .compiled()
        .remove_component(&component)
        .unwrap();
    assert_eq!(removed, 1);
    let deployer = self::deployer(dir.path());
    let outcome = run(&deployer, &host, &digest, "1");
    assert_eq!(outcome.load, LoadKind::Compiled);
    assert!(outcome.load_time > Duration::ZERO);
    assert_eq!(compiled_entries(dir.path()).len(), 1);
    let deployer = self::deployer(dir.path());
    assert_eq!(kinds(&deployer, 2), [LoadKind::Cached, LoadKind::Warm]);
    assert_baseline(&host);
}

#[test]
fn a_damaged_compiled_entry_is_compiled_anew() {
    let host = host();
    let dir = TempDir::new().unwrap();
    let digest = push(&deployer(dir.path()), &iota());
    let entries = compiled_entries(dir.path());
    assert_eq!(entries.len(), 1);
    let mut bytes = std::fs::read(&entries[0]).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&entries[0], &bytes).unwrap();

    let outcome = run(&deployer(dir.path()), &host, &digest, "3");
    assert_eq!(outcome.load, LoadKind::Compiled);
    assert_output(&outcome, "1\n2\n3\n");
    let outcome = run(&deployer(dir.path()), &host, &digest, "3");
    assert_eq!(outcome.load, LoadKind::Cached, "the entry was replaced");
    assert_output(&outcome, "1\n2\n3\n");
    assert_baseline(&host);
}

/// A compiled cache that cannot be read (here a folder where its entry should be) costs a push or
/// a run a compile, not the push or the run; so does one that cannot be written.
#[test]
fn a_compiled_entry_that_cannot_be_read_costs_a_compile_not_the_run() {
    let host = host();
    let dir = TempDir::new().unwrap();
    let digest = push(&deployer(dir.path()), &iota());
    let entries = compiled_entries(dir.path());
    assert_eq!(entries.len(), 1);
    std::fs::remove_file(&entries[0]).unwrap();
    std::fs::create_dir(&entries[0]).unwrap();
    // Nor the push of it again.
    assert_eq!(push(&deployer(dir.path()), &iota()), digest);
    for _ in 0..2 {
        let outcome = run(&deployer(dir.path()), &host, &digest, "3");
        assert_eq!(outcome.load, LoadKind::Compiled);
        assert_output(&outcome, "1\n2\n3\n");
    }
    assert_baseline(&host);
}

#[test]
fn run_ids_are_unique_and_unguessable_in_form() {
    let host = host();
    let dir = TempDir::new().unwrap();
    let deployer = deployer(dir.path());
    let digest = push(&deployer, &iota());
    let mut ids = std::collections::HashSet::new();
    for _ in 0..50 {
        let outcome = run(&deployer, &host, &digest, "0");
        assert_output(&outcome, "");
        let text = outcome.run_id.to_string();
        assert_eq!(text.len(), 32, "{text}");
        assert!(text.bytes().all(|b| b.is_ascii_hexdigit()), "{text}");
        assert!(ids.insert(outcome.run_id), "{text} repeated");
    }
}

#[test]
fn each_way_a_run_ends_is_its_status() {
    let host = host();
    let dir = TempDir::new().unwrap();
    let deployer = deployer(dir.path());
    let probe = push(&deployer, &probe());
    let iota = push(&deployer, &iota());

    let outcome = run(&deployer, &host, &probe, "no-such-command");
    assert!(
        matches!(outcome.status, ExitStatus::Failed(_)),
        "{:?}",
        outcome.status
    );
    assert_eq!(outcome.status.as_str(), "failed");
    assert!(outcome.output.is_empty());

    // The probe panics; its message goes to stderr, the trap names the instruction.
    let outcome = run(&deployer, &host, &probe, "trap");
    assert!(
        matches!(&outcome.status, ExitStatus::Trapped(m) if m.contains("unreachable")),
        "{:?}",
        outcome.status
    );
    assert_eq!(outcome.status.as_str(), "trapped");

    let wall = Duration::from_millis(300);
    let outcome = run_granted(&deployer, &host, &probe, "hold 10", |mut grant| {
        grant.limits.wall_time = wall;
        grant
    });
    assert_eq!(outcome.status, ExitStatus::WallTime(wall));
    assert!(
        outcome.elapsed < Duration::from_secs(5),
        "{:?}",
        outcome.elapsed
    );

    // Less memory than the component's initial memory: it cannot even be instantiated.
    let outcome = run_granted(&deployer, &host, &iota, "1", |mut grant| {
        grant.limits.memory = 64 << 10;
        grant
    });
    assert!(
        matches!(outcome.status, ExitStatus::Instantiate(_)),
        "{:?}",
        outcome.status
    );

    // Each failure gave its tasklet back: the next runs are warm and fine.
    let outcome = run(&deployer, &host, &iota, "2");
    assert_eq!(outcome.load, LoadKind::Warm);
    assert_output(&outcome, "1\n2\n");
    let outcome = run(&deployer, &host, &probe, "lease 1");
    assert_eq!(outcome.load, LoadKind::Warm);
    assert_eq!(
        probe_lines(&String::from_utf8_lossy(&outcome.output))[0].0,
        "ok"
    );
    assert_baseline(&host);
}

/// What a run prints is kept in its outcome, never written to the host's streams, as far as
/// the deployer's bound; the rest is counted. Each run starts with nothing printed.
#[test]
fn what_a_run_prints_is_captured_within_its_bound() {
    let host = host();
    let dir = TempDir::new().unwrap();
    let deployer = deployer(dir.path());
    let digest = push(&deployer, &probe());
    let outcome = run(&deployer, &host, &digest, "trap");
    let printed = String::from_utf8_lossy(&outcome.printed.bytes);
    assert!(printed.contains("probe trap"), "{printed:?}");
    assert_eq!(outcome.printed.dropped, 0);
    let outcome = run(&deployer, &host, &digest, "lease 1");
    assert_eq!(outcome.load, LoadKind::Warm);
    assert!(outcome.printed.bytes.is_empty(), "{:?}", outcome.printed);

    let dir = TempDir::new().unwrap();
    let deployer = deployer_with(
        dir.path(),
        DeployConfig {
            printed_bytes: 16,
            ..DeployConfig::default()
        },
    );
    let digest = push(&deployer, &probe());
    let whole = printed.len() as u64;
    let outcome = run(&deployer, &host, &digest, "trap");
    assert_eq!(outcome.printed.bytes.len(), 16);
    assert_eq!(outcome.printed.bytes[..], printed.as_bytes()[..16]);
    assert_eq!(outcome.printed.dropped, whole - 16);
    assert_eq!(outcome.status.as_str(), "trapped");
    assert_baseline(&host);
}

/// A run stopped from another thread (a node's, when its client goes away) ends within a few
/// epoch ticks as `stopped`, not at its 30 s wall time, and its lease goes with it; a stop
/// given before the run starts stops it at once. Either way the tasklet goes back warm.
#[test]
fn a_stopped_run_ends_at_once_and_frees_its_lease() {
    let host = host();
    let dir = TempDir::new().unwrap();
    let deployer = deployer(dir.path());
    let probe = push(&deployer, &probe());
    let stop = RunStop::new();
    let stopper = {
        let (stop, leases) = (stop.clone(), Arc::clone(host.leases()));
        std::thread::spawn(move || {
            // Once the run holds its lease: it is well under way.
            let start = Instant::now();
            while leases.accounting().leases == 0 && start.elapsed() < Duration::from_secs(15) {
                std::thread::sleep(Duration::from_millis(5));
            }
            stop.stop();
            Instant::now()
        })
    };
    let leases = Arc::clone(host.leases());
    let outcome = deployer
        .run_until(
            &probe,
            b"hold 25",
            |manifest| host.policy().grant(manifest),
            |grant| Box::new(LocalGpu::new(grant, leases)),
            &stop,
        )
        .unwrap_or_else(|e| panic!("run: {e}"));
    let ended = Instant::now();
    let stopped_at = stopper.join().unwrap();
    assert_eq!(outcome.status, ExitStatus::Stopped, "{}", outcome.status);
    assert_eq!(outcome.status.as_str(), "stopped");
    assert!(outcome.output.is_empty());
    let late = ended.saturating_duration_since(stopped_at);
    assert!(
        late < Duration::from_millis(500),
        "ended {late:?} after the stop"
    );
    assert_baseline(&host);

    // Already stopped: it does not start.
    let outcome = deployer
        .run_until(
            &probe,
            b"hold 25",
            |manifest| host.policy().grant(manifest),
            |grant| Box::new(LocalGpu::new(grant, Arc::clone(host.leases()))),
            &stop,
        )
        .unwrap_or_else(|e| panic!("run: {e}"));
    assert_eq!(outcome.status, ExitStatus::Stopped);
    assert!(
        outcome.elapsed < Duration::from_millis(100),
        "{:?}",
        outcome.elapsed
    );
    let outcome = run(&deployer, &host, &probe, "lease 1");
    assert_eq!(outcome.load, LoadKind::Warm);
    assert_baseline(&host);
}

/// A run's leases are back, and its device memory free, before the run's instance is torn
/// down: however the run ended (returned holding its lease with a kernel still running,
/// trapped, returned holding several), what it held is free while its teardown is still
/// the caller's to do (a node answers in between).
#[test]
fn a_runs_leases_are_given_back_before_its_teardown() {
    let host = host();
    let dir = TempDir::new().unwrap();
    let deployer = deployer(dir.path());
    let probe = push(&deployer, &probe());
    for input in ["spin-then return", "trap", "leases 3", "lease 1"] {
        let leases = Arc::clone(host.leases());
        let (outcome, teardown) = deployer
            .run_leaving_teardown(
                &probe,
                input.as_bytes(),
                |manifest| host.policy().grant(manifest),
                |grant| Box::new(LocalGpu::new(grant, leases)),
                &RunStop::new(),
            )
            .unwrap_or_else(|e| panic!("run: {e}"));
        assert_ne!(outcome.status.as_str(), "instantiate", "{input}");
        assert_baseline(&host);
        drop(teardown);
    }
}

#[test]
fn every_run_has_the_grant_its_caller_gives_warm_or_not() {
    let host = host();
    let dir = TempDir::new().unwrap();
    let deployer = deployer(dir.path());
    let probe = push(&deployer, &probe());
    let no_leases = |mut grant: Grant| {
        grant.gpu.max_leases = 0;
        grant
    };

    let outcome = run_granted(&deployer, &host, &probe, "lease 1", no_leases);
    assert_eq!(outcome.load, LoadKind::Cached);
    let lines = probe_lines(&String::from_utf8_lossy(&outcome.output));
    assert_eq!(
        (lines[0].0.as_str(), lines[0].1.as_str()),
        ("error", "unauthorized"),
        "{lines:?}"
    );

    let outcome = run(&deployer, &host, &probe, "lease 1");
    assert_eq!(outcome.load, LoadKind::Warm);
    let lines = probe_lines(&String::from_utf8_lossy(&outcome.output));
    assert_eq!(lines[0].0, "ok", "{lines:?}");

    let outcome = run_granted(&deployer, &host, &probe, "lease 1", no_leases);
    assert_eq!(outcome.load, LoadKind::Warm);
    let lines = probe_lines(&String::from_utf8_lossy(&outcome.output));
    assert_eq!(lines[0].1, "unauthorized", "{lines:?}");
    assert_baseline(&host);
}

#[test]
fn the_warm_set_keeps_the_most_recently_used_within_its_bound() {
    let host = host();
    let dir = TempDir::new().unwrap();
    let deployer = deployer_with(
        dir.path(),
        DeployConfig {
            warm_tasklets: 1,
            ..DeployConfig::default()
        },
    );
    let iota = push(&deployer, &iota());
    let probe = push(&deployer, &probe());
    let load = |digest: &Digest, input: &str| run(&deployer, &host, digest, input).load;

    assert_eq!(load(&iota, "1"), LoadKind::Cached);
    assert_eq!(load(&iota, "1"), LoadKind::Warm);
    assert_eq!(load(&probe, "lease 1"), LoadKind::Cached);
    assert_eq!(deployer.warm_tasklets(), 1);
    assert_eq!(load(&iota, "1"), LoadKind::Cached, "evicted by probe");
    assert_eq!(load(&iota, "1"), LoadKind::Warm);

    // A byte bound below one tasklet's compiled size keeps nothing warm.
    let cold = deployer_with(
        dir.path(),
        DeployConfig {
            warm_bytes: 1,
            ..DeployConfig::default()
        },
    );
    for _ in 0..2 {
        assert_eq!(run(&cold, &host, &iota, "1").load, LoadKind::Cached);
    }
    assert_eq!(cold.warm_tasklets(), 0);
    assert_baseline(&host);
}

#[test]
fn concurrent_runs_of_one_deployment_each_get_a_tasklet() {
    let host = Arc::new(host());
    let dir = TempDir::new().unwrap();
    let deployer = deployer(dir.path());
    let digest = push(&deployer, &iota());
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let (host, deployer) = (Arc::clone(&host), deployer.clone());
            std::thread::spawn(move || {
                let n = i + 2;
                let outcome = run(&deployer, &host, &digest, &n.to_string());
                let expected: String = (1..=n).map(|v| format!("{v}\n")).collect();
                assert_output(&outcome, &expected);
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("run thread");
    }
    let warm = deployer.warm_tasklets();
    assert!((1..=3).contains(&warm), "{warm} warm");
    assert_baseline(&host);
}

#[test]
fn a_deleted_deployment_no_longer_runs() {
    let host = host();
    let dir = TempDir::new().unwrap();
    let deployer = deployer(dir.path());
    let digest = push(&deployer, &iota());
    run(&deployer, &host, &digest, "1");
    assert_eq!(deployer.warm_tasklets(), 1);
    let deleted = deployer.delete(&digest).unwrap();
    assert_eq!(deleted.removed_compiled, 1);
    assert_eq!(deployer.warm_tasklets(), 0);
    // No warm tasklet answers for it either.
    let err = deployer.manifest(&digest).unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    let leases = Arc::clone(host.leases());
    let err = deployer
        .run(
            &digest,
            b"1",
            |manifest| host.policy().grant(manifest),
            |grant| Box::new(LocalGpu::new(grant, leases)),
        )
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
}
