//! `/metrics` scraped over real TCP: the counters move as the ops say, and whatever else is sent
//! to the port gets a 4xx while the node serves on.

use crate::support::*;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use tasklet_remote::deployment_digest;
use tasklet_remote::RemoteGpu;
use tasklet_runtime::gpu::{GpuService, LeaseRequest};
use tasklet_runtime::DeviceRequirement;
use tasklet_wire::{GpuSubmit, LeaseId, LeaseRequirements};

const IOTA_PTX: &str = include_str!("../../../../kernels/iota.ptx");

/// Sends `request` to the metrics port and reads the answer to its end (bounded in time).
fn exchange(addr: SocketAddr, request: &[u8]) -> Result<Vec<u8>, String> {
    let mut stream =
        TcpStream::connect_timeout(&addr, WAIT).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(WAIT))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(request)
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    Ok(answer)
}

/// An answer's status code and body.
fn status_and_body(answer: &[u8]) -> Result<(u16, String), String> {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no head in {text:?}"))?;
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status line in {head:?}"))?;
    Ok((status, body.to_owned()))
}

/// The samples of a scrape, by series (`name{labels}`), and the whole text.
pub fn scrape(node: &TestNode) -> Result<(HashMap<String, f64>, String), String> {
    let addr = node.metrics_addr.ok_or("the node serves no metrics")?;
    let answer = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")?;
    let (status, body) = status_and_body(&answer)?;
    if status != 200 {
        return Err(format!("{status}: {body}"));
    }
    let mut samples = HashMap::new();
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| format!("a sample line without a value: {line:?}"))?;
        let value = value
            .parse()
            .map_err(|_| format!("a sample that is not a number: {line:?}"))?;
        samples.insert(series.to_owned(), value);
    }
    Ok((samples, body))
}

/// Asserts that each series has its value (a missing series counts as 0).
fn expect(samples: &HashMap<String, f64>, text: &str, wanted: &[(&str, f64)]) -> TestResult {
    for (series, value) in wanted {
        let got = samples.get(*series).copied().unwrap_or(0.0);
        check(got == *value, || {
            format!("{series} is {got}, not {value}; the scrape:\n{text}")
        })?;
    }
    Ok(())
}

fn iota(lease: LeaseId, n: u32, kernel: &str) -> GpuSubmit {
    GpuSubmit {
        lease,
        ptx: IOTA_PTX.as_bytes().to_vec(),
        kernel: kernel.into(),
        grid: [n.div_ceil(64), 1, 1],
        block: [64, 1, 1],
        args: n.to_le_bytes().to_vec(),
        output_size: 4 * u64::from(n),
        output_offset: 0,
        input: Vec::new(),
    }
}

/// Each tenant the policy names has its tenant-labelled counters at 0 from the first scrape,
/// before it ever connects; a tenant the policy does not name has none until its first event.
pub fn the_policys_tenants_are_counted_from_zero() -> TestResult {
    let mut policy = policy();
    policy.tenants = tasklet_runtime::Policy::parse("[tenants.dev]\n[tenants.team]\n")
        .map_err(|(_, e)| e)?
        .tenants;
    let node = TestNode::with(Setup {
        policy,
        metrics: true,
        ..Setup::default()
    });
    let (samples, text) = scrape(&node)?;
    for family in [
        "tasklet_connections_total",
        "tasklet_tenants_refused_total",
        "tasklet_protocol_errors_total",
        "gpu_submit_total",
        "gpu_submit_errors",
        "gpu_submit_output_bytes",
        "gpu_lease_acquired",
        "gpu_lease_dropped",
        "gpu_time_seconds_total",
    ] {
        check(text.contains(&format!("# TYPE {family} counter")), || {
            format!("no TYPE line for {family}:\n{text}")
        })?;
        for tenant in ["dev", "team"] {
            let series = format!("{family}{{tenant=\"{tenant}\"}}");
            check(samples.get(&series) == Some(&0.0), || {
                format!("{series} is {:?}, not 0:\n{text}", samples.get(&series))
            })?;
        }
        check(!text.contains("tenant=\"ops\""), || text.clone())?;
    }
    Ok(())
}

/// Pushes of one deployment by one tenant made at once: one stored it, the others found it
/// present; none is counted as putting back what the store had lost (`restored`).
pub fn pushes_made_at_once_are_one_stored_and_the_rest_present() -> TestResult {
    const PUSHES: usize = 6;
    let node = TestNode::with(Setup {
        store: true,
        metrics: true,
        ..Setup::default()
    });
    let (manifest, component) = pushable("iota");
    let mut clients: Vec<_> = (0..PUSHES).map(|_| node.client("dev")).collect();
    let start = std::sync::Barrier::new(PUSHES);
    let answers: Vec<Result<bool, String>> = std::thread::scope(|scope| {
        let pushes: Vec<_> = clients
            .iter_mut()
            .map(|client| {
                let (manifest, component, start) = (&manifest, &component, &start);
                scope.spawn(move || {
                    start.wait();
                    client
                        .deploy_push(manifest, component)
                        .map(|pushed| pushed.already_present)
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        pushes
            .into_iter()
            .map(|push| {
                push.join()
                    .unwrap_or_else(|_| Err("a push panicked".into()))
            })
            .collect()
    });
    let present = answers
        .into_iter()
        .collect::<Result<Vec<bool>, String>>()?
        .into_iter()
        .filter(|&present| present)
        .count();
    check(present == PUSHES - 1, || {
        format!("{present} of {PUSHES} pushes were told the node had it")
    })?;
    let (samples, text) = scrape(&node)?;
    let pushes =
        |result: &str| format!("tasklet_deploy_pushes_total{{result=\"{result}\",tenant=\"dev\"}}");
    expect(
        &samples,
        &text,
        &[
            (&pushes("stored"), 1.0),
            (&pushes("present"), (PUSHES - 1) as f64),
            (&pushes("restored"), 0.0),
        ],
    )
}

/// Leases, submissions, pushes, runs, connections and requests, each counted for its tenant;
/// leases held and VRAM allocated while they are; everything back to zero after.
pub fn counters_move_as_the_ops_say() -> TestResult {
    let node = TestNode::with(Setup {
        store: true,
        metrics: true,
        ..Setup::default()
    });
    let (samples, text) = scrape(&node)?;
    check(text.contains("# TYPE gpu_leases_active gauge"), || {
        text.clone()
    })?;
    expect(
        &samples,
        &text,
        &[
            ("tasklet_connections_open", 0.0),
            ("gpu_leases_active", 0.0),
        ],
    )?;

    let mut dev = node.client("dev");
    let lease = dev
        .lease_alloc(1 << 20, 60, None)
        .map_err(|e| e.to_string())?;
    let out = dev
        .gpu_submit(&iota(lease.lease, 10, "iota"))
        .map_err(|e| e.to_string())?;
    check(out.len() == 40, || format!("{} bytes", out.len()))?;
    dev.gpu_submit(&iota(lease.lease, 10, "no_such_kernel"))
        .expect_err("a kernel the module lacks");
    // The lease is held, and GPU_SUBMIT allocated all of it.
    let (samples, text) = scrape(&node)?;
    expect(
        &samples,
        &text,
        &[
            ("gpu_leases_active", 1.0),
            ("gpu_vram_leased_bytes", lease.granted_bytes as f64),
            ("gpu_vram_allocated_bytes", lease.granted_bytes as f64),
            ("tasklet_connections_open", 1.0),
        ],
    )?;
    dev.mem_free(lease.lease).map_err(|e| e.to_string())?;

    let (manifest, component) = pushable("iota");
    let digest = dev
        .deploy_push(&manifest, &component)
        .map_err(|e| e.to_string())?
        .digest;
    check(digest == deployment_digest(&manifest, &component), || {
        "digest".into()
    })?;
    let run = dev.deploy_run(&digest, b"3").map_err(|e| e.to_string())?;
    check(run.output == b"1\n2\n3\n", || format!("{run:?}"))?;
    dev.deploy_run(&digest, b"twelve")
        .map_err(|e| e.to_string())?;
    let mut team = node.client("team");
    team.inventory().map_err(|e| e.to_string())?;
    drop(team);
    drop(dev);
    node.wait_for_baseline(WAIT)?;

    let (samples, text) = scrape(&node)?;
    expect(
        &samples,
        &text,
        &[
            ("gpu_submit_total{tenant=\"dev\"}", 2.0),
            ("gpu_submit_errors{tenant=\"dev\"}", 1.0),
            ("gpu_submit_output_bytes{tenant=\"dev\"}", 40.0),
            ("gpu_submit_total{tenant=\"team\"}", 0.0),
            ("tasklet_connections_total{tenant=\"dev\"}", 1.0),
            ("tasklet_connections_total{tenant=\"team\"}", 1.0),
            (
                "tasklet_deploy_pushes_total{result=\"stored\",tenant=\"dev\"}",
                1.0,
            ),
            (
                "tasklet_deploy_runs_total{status=\"ok\",tenant=\"dev\"}",
                1.0,
            ),
            (
                "tasklet_deploy_runs_total{status=\"failed\",tenant=\"dev\"}",
                1.0,
            ),
            ("tasklet_deploy_runs_active", 0.0),
            (
                "tasklet_requests_total{op=\"GPU_SUBMIT\",tenant=\"dev\"}",
                2.0,
            ),
            (
                "tasklet_requests_total{op=\"GET_INVENTORY\",tenant=\"team\"}",
                1.0,
            ),
            ("gpu_op_seconds_count{op=\"GPU_SUBMIT\"}", 2.0),
            ("gpu_op_seconds_count{op=\"LEASE_ALLOC\"}", 1.0),
            ("gpu_leases_active", 0.0),
            ("gpu_vram_allocated_bytes", 0.0),
        ],
    )?;
    check(
        text.contains("# TYPE gpu_submit_total counter")
            && text.contains("# TYPE gpu_op_seconds histogram"),
        || text.clone(),
    )?;
    // Every lease acquired, the client's and the deployed runs', was dropped once.
    let acquired = samples
        .get("gpu_lease_acquired{tenant=\"dev\"}")
        .copied()
        .unwrap_or(0.0);
    let dropped = samples
        .get("gpu_lease_dropped{tenant=\"dev\"}")
        .copied()
        .unwrap_or(0.0);
    check(acquired >= 2.0 && acquired == dropped, || {
        format!("acquired {acquired}, dropped {dropped}:\n{text}")
    })?;
    // The connections close a moment after their clients go.
    let start = Instant::now();
    loop {
        let (samples, text) = scrape(&node)?;
        if samples.get("tasklet_connections_open") == Some(&0.0) {
            break;
        }
        check(start.elapsed() < WAIT, || text)?;
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The kernels of a tenant's leases move its `gpu_time_seconds_total`, and no one else's: the
/// device time its workers measured, counted as the leases ran and as they ended.
pub fn gpu_time_is_counted_for_the_tenant_whose_kernels_ran() -> TestResult {
    let node = TestNode::with(Setup {
        metrics: true,
        ..Setup::default()
    });
    let (samples, text) = scrape(&node)?;
    let dev_series = "gpu_time_seconds_total{tenant=\"dev\"}";
    check(!samples.contains_key(dev_series), || text.clone())?;
    let mut dev = node.client("dev");
    let lease = dev
        .lease_alloc(1 << 20, 60, None)
        .map_err(|e| e.to_string())?;
    for _ in 0..3 {
        let out = dev
            .gpu_submit(&iota(lease.lease, 16 << 10, "iota"))
            .map_err(|e| e.to_string())?;
        check(out.len() == 64 << 10, || format!("{} bytes", out.len()))?;
    }
    let (samples, text) = scrape(&node)?;
    let during = samples.get(dev_series).copied().unwrap_or(0.0);
    check(during > 0.0, || {
        format!("{dev_series} is {during}:\n{text}")
    })?;
    dev.mem_free(lease.lease).map_err(|e| e.to_string())?;
    let mut team = node.client("team");
    team.inventory().map_err(|e| e.to_string())?;
    drop(team);
    drop(dev);
    node.wait_for_baseline(WAIT)?;
    let (samples, text) = scrape(&node)?;
    let after = samples.get(dev_series).copied().unwrap_or(0.0);
    check(after >= during, || {
        format!("{after} after {during}:\n{text}")
    })?;
    let team_time = samples
        .get("gpu_time_seconds_total{tenant=\"team\"}")
        .copied()
        .unwrap_or(0.0);
    check(team_time == 0.0, || text.clone())?;
    check(
        text.contains("# TYPE gpu_time_seconds_total counter"),
        || text.clone(),
    )
}

/// Garbage, wrong paths and methods, oversized and silent requests: each gets its 4xx (or, past
/// the connections answered at once, a close), and the node goes on serving scrapes and clients.
pub fn garbage_to_the_metrics_port_gets_4xx_and_the_node_serves_on() -> TestResult {
    let node = TestNode::with(Setup {
        metrics: true,
        ..Setup::default()
    });
    let addr = node.metrics_addr.ok_or("no metrics address")?;
    let mut random = vec![0u8; 4000];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for byte in random.iter_mut() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        *byte = seed as u8;
    }
    random.extend_from_slice(b"\r\n\r\n");
    // A request head of exactly the 8 KiB limit (its closing blank line included), and one
    // byte over.
    let head_of = |len: usize| {
        let start = b"GET /metrics HTTP/1.1\r\nX-Pad: ";
        let mut head = start.to_vec();
        head.resize(len - 4, b'a');
        head.extend_from_slice(b"\r\n\r\n");
        head
    };
    let cases: [(&str, Vec<u8>, u16); 10] = [
        ("a head of 8 KiB", head_of(8 << 10), 200),
        (
            "lines ending in a bare LF",
            b"GET /metrics HTTP/1.1\nHost: x\n\n".to_vec(),
            200,
        ),
        ("a head one byte over 8 KiB", head_of((8 << 10) + 1), 431),
        ("garbage", b"garbage\r\n\r\n".to_vec(), 400),
        ("random bytes", random, 400),
        (
            "HTTP/2 preface",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
            400,
        ),
        ("another path", b"GET / HTTP/1.1\r\n\r\n".to_vec(), 404),
        (
            "another method",
            b"POST /metrics HTTP/1.1\r\n\r\n".to_vec(),
            405,
        ),
        ("an oversized head", vec![b'A'; 9000], 431),
        ("half a request, then the end", b"GET /metr".to_vec(), 400),
    ];
    for (what, request, expected) in cases {
        let mut stream =
            TcpStream::connect_timeout(&addr, WAIT).map_err(|e| format!("{what}: {e}"))?;
        stream
            .set_read_timeout(Some(WAIT))
            .map_err(|e| e.to_string())?;
        stream
            .write_all(&request)
            .map_err(|e| format!("{what}: {e}"))?;
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .map_err(|e| format!("{what}: {e}"))?;
        let (status, body) = status_and_body(&answer).map_err(|e| format!("{what}: {e}"))?;
        check(status == expected, || {
            format!("{what}: {status} {body}, not {expected}")
        })?;
    }

    // A TLS client hello (what `curl https://…` sends), and garbage that starts as a method
    // would, the connection kept open: refused at once, not after the head's time is up.
    let hello: &[u8] = &[
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    for (what, bytes) in [
        ("a TLS hello", hello),
        ("a capital, then binary", b"O\x01\xfe\x00garbage"),
        ("a request line of garbage", b"GET \xff\xfe\n"),
        ("a request line that is not one", b"GET /metrics\r\n"),
    ] {
        let mut stream = TcpStream::connect_timeout(&addr, WAIT).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(WAIT))
            .map_err(|e| e.to_string())?;
        let start = Instant::now();
        stream.write_all(bytes).map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .map_err(|e| format!("{what}: {e}"))?;
        let (status, _) = status_and_body(&answer)?;
        check(
            status == 400 && start.elapsed() < Duration::from_secs(2),
            || format!("{what}: {status} after {:?}", start.elapsed()),
        )?;
    }

    // Silent clients: those past the number answered at once are closed at once; the others
    // are told 408 when their time is up.
    let silent: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect_timeout(&addr, WAIT).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let start = Instant::now();
    let (mut closed, mut timed_out) = (0, 0);
    for mut stream in silent {
        stream
            .set_read_timeout(Some(WAIT))
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        // A connection closed unanswered may read as a reset.
        let _ = stream.read_to_end(&mut answer);
        match status_and_body(&answer) {
            Ok((408, _)) => timed_out += 1,
            Ok((status, body)) => return Err(format!("a silent client got {status} {body}").into()),
            Err(_) => closed += 1,
        }
    }
    check(closed >= 4 && timed_out >= 1, || {
        format!("{closed} closed, {timed_out} timed out")
    })?;
    check(start.elapsed() < WAIT, || {
        format!("silent clients held on for {:?}", start.elapsed())
    })?;

    // The node serves on: a scrape, and a client.
    let (samples, text) = scrape(&node)?;
    check(samples.contains_key("tasklet_connections_open"), || text)?;
    let inventory = node.client("dev").inventory().map_err(|e| e.to_string())?;
    check(inventory.len() == node.devices(), || {
        format!("{inventory:?}")
    })?;
    Ok(())
}

/// A tasklet's one-shot call (`GpuCall`, contract 0.2's `submit`) run with its GPU on the node is
/// one GPU_SUBMIT there, between its lease's LEASE_ALLOC and MEM_FREE: `gpu_submit_total` moves,
/// no session op is asked for, and the output is the local run's.
pub fn a_tasklet_one_shot_is_one_gpu_submit() -> TestResult {
    let node = TestNode::with(Setup {
        metrics: true,
        ..Setup::default()
    });
    let local = local_host();
    let manifest = tasklet_runtime::Manifest::load(&tasklet("scale")).expect("manifest");
    let compiled = local.load(manifest.clone()).expect("component loads");
    let input = b"0.5 1 2 3 -7.25 1e30";
    let here = local.run(&compiled, input).map_err(|e| e.to_string())?;
    let gpu = tasklet_remote::RemoteGpu::for_manifest(node.client("dev"), &manifest)
        .map_err(|e| e.to_string())?;
    let there = local
        .runner()
        .run(&compiled, input, Box::new(gpu))
        .map_err(|e| e.to_string())?;
    check(here == there, || {
        format!(
            "local {:?}, remote {:?}",
            String::from_utf8_lossy(&here),
            String::from_utf8_lossy(&there)
        )
    })?;
    let (samples, text) = scrape(&node)?;
    let op = |name: &str| format!("tasklet_requests_total{{op=\"{name}\",tenant=\"dev\"}}");
    let mut wanted = vec![
        ("gpu_submit_total{tenant=\"dev\"}".to_owned(), 1.0),
        ("gpu_submit_errors{tenant=\"dev\"}".to_owned(), 0.0),
        (op("GPU_SUBMIT"), 1.0),
        (op("LEASE_ALLOC"), 1.0),
        (op("MEM_FREE"), 1.0),
    ];
    for session_op in [
        "SESSION_OPEN",
        "MEM_ALLOC",
        "MEM_WRITE",
        "MODULE_LOAD",
        "LAUNCH",
        "SYNC",
        "MEM_READ",
    ] {
        wanted.push((op(session_op), 0.0));
    }
    let wanted: Vec<(&str, f64)> = wanted.iter().map(|(s, v)| (s.as_str(), *v)).collect();
    expect(&samples, &text, &wanted)?;
    node.wait_for_baseline(WAIT)?;
    tasklet_tests::assert_baseline(&local);
    Ok(())
}

/// A node whose policy lists two emulated devices lends both: GET_INVENTORY lists each with its
/// UUID and size, LEASE_ALLOC places a lease on the device it names, each device has its own
/// `gpu_device_*` series, and the registry record lists both.
pub fn each_device_is_lent_and_has_its_own_series() -> TestResult {
    const MIB: u64 = 1 << 20;
    let mut policy = policy();
    policy.devices.emu = Some(vec![64 * MIB, 32 * MIB]);
    let node = TestNode::with(Setup {
        policy,
        metrics: true,
        ..Setup::default()
    });
    let mut dev = node.client("dev");
    let devices = dev.inventory().map_err(|e| e.to_string())?;
    let listed: Vec<(u32, &str, u64)> = devices
        .iter()
        .map(|d| (d.index, d.uuid.as_str(), d.total_memory))
        .collect();
    check(
        listed == [(0, "emu-0", 64 * MIB), (1, "emu-1", 32 * MIB)],
        || format!("{devices:?}"),
    )?;
    let on_1 = dev
        .lease_alloc(2 * MIB, 60, Some(1))
        .map_err(|e| e.to_string())?;
    check(on_1.device == 1, || format!("{on_1:?}"))?;
    let any = dev.lease_alloc(MIB, 60, None).map_err(|e| e.to_string())?;
    check(any.device == 0, || {
        format!("most free is device 0: {any:?}")
    })?;
    let refused = dev.lease_alloc(MIB, 60, Some(2));
    check(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("no device 2")),
        || format!("{refused:?}"),
    )?;
    // Requirements cross the wire: a UUID places, a model no device has is refused naming it.
    let by_uuid = LeaseRequirements {
        uuid: Some("emu-1".into()),
        ..LeaseRequirements::default()
    };
    let on_uuid = dev
        .lease_alloc_with(MIB, 60, None, by_uuid)
        .map_err(|e| e.to_string())?;
    check(on_uuid.device == 1, || format!("{on_uuid:?}"))?;
    dev.mem_free(on_uuid.lease).map_err(|e| e.to_string())?;
    let no_model = LeaseRequirements {
        model: Some("no-such-gpu".into()),
        ..LeaseRequirements::default()
    };
    let refused = dev.lease_alloc_with(MIB, 60, None, no_model);
    check(
        refused.as_ref().is_err_and(|e| {
            let e = e.to_string();
            e.contains("CAPACITY_EXCEEDED") && e.contains("does not contain \"no-such-gpu\"")
        }),
        || format!("{refused:?}"),
    )?;
    // And through the remote GPU service a `tasklet run --node` uses.
    let mut gpu = RemoteGpu::new(node.client("team"));
    let cc = DeviceRequirement {
        min_compute_capability: Some((99, 0)),
        ..DeviceRequirement::default()
    };
    let refused = gpu.lease_acquire_with(
        LeaseRequest {
            min_vram: MIB,
            secs: 30,
            device: None,
        },
        &cc,
    );
    check(
        refused.as_ref().is_err_and(|e| {
            e.name() == "capacity-exceeded" && e.message().contains("99.0 required")
        }),
        || format!("{refused:?}"),
    )?;
    drop(gpu);
    // A service whose every lease requires a UUID (as `run --nats --requires` does a compute
    // capability): a plain lease goes to that device.
    let mut gpu = RemoteGpu::new(node.client("team")).with_requirements(LeaseRequirements {
        uuid: Some("emu-1".into()),
        ..LeaseRequirements::default()
    });
    let lease = gpu.lease_acquire(LeaseRequest {
        min_vram: MIB,
        secs: 30,
        device: None,
    })?;
    let info = gpu.lease_info(lease)?;
    check(info.device == 1, || format!("{info:?}"))?;
    gpu.lease_drop(lease);
    drop(gpu);
    let (samples, text) = scrape(&node)?;
    expect(
        &samples,
        &text,
        &[
            ("gpu_device_leases{device=\"0\",uuid=\"emu-0\"}", 1.0),
            ("gpu_device_leases{device=\"1\",uuid=\"emu-1\"}", 1.0),
            (
                "gpu_device_vram_leased_bytes{device=\"1\",uuid=\"emu-1\"}",
                on_1.granted_bytes as f64,
            ),
            (
                "gpu_device_vram_leased_bytes{device=\"0\",uuid=\"emu-0\"}",
                any.granted_bytes as f64,
            ),
            (
                "gpu_device_vram_total_bytes{device=\"1\",uuid=\"emu-1\"}",
                (32 * MIB) as f64,
            ),
            ("gpu_leases_active", 2.0),
        ],
    )?;
    check(
        text.contains("# TYPE gpu_device_time_seconds_total counter"),
        || text.clone(),
    )?;
    let record = node.node().control().status().devices;
    check(record.len() == 2, || format!("{record:?}"))?;
    drop(dev);
    node.wait_for_baseline(WAIT)?;
    let (samples, text) = scrape(&node)?;
    expect(
        &samples,
        &text,
        &[
            ("gpu_device_leases{device=\"1\",uuid=\"emu-1\"}", 0.0),
            (
                "gpu_device_vram_leased_bytes{device=\"1\",uuid=\"emu-1\"}",
                0.0,
            ),
        ],
    )?;
    Ok(())
}

/// A deployed tasklet's group of leases (`lease.acquire-group`, through the run's metered
/// service) lands on the node's two devices and is counted lease by lease: each acquired once,
/// each dropped once.
pub fn a_deployed_group_is_counted_lease_by_lease() -> TestResult {
    const MIB: u64 = 1 << 20;
    let mut policy = policy();
    policy.devices.emu = Some(vec![64 * MIB, 32 * MIB]);
    let node = TestNode::with(Setup {
        policy,
        store: true,
        metrics: true,
        ..Setup::default()
    });
    let mut dev = node.client("dev");
    let (manifest, component) = pushable("testing/sdk-check");
    let digest = dev
        .deploy_push(&manifest, &component)
        .map_err(|e| e.to_string())?
        .digest;
    let run = dev
        .deploy_run(&digest, b"group")
        .map_err(|e| e.to_string())?;
    let output = String::from_utf8_lossy(&run.output).into_owned();
    check(
        output.starts_with("ok group 0 1\nok group-copy 5 6 7 8\n"),
        || format!("{run:?}: {output}"),
    )?;
    drop(dev);
    node.wait_for_baseline(WAIT)?;
    let (samples, text) = scrape(&node)?;
    expect(
        &samples,
        &text,
        &[
            ("gpu_lease_acquired{tenant=\"dev\"}", 2.0),
            ("gpu_lease_dropped{tenant=\"dev\"}", 2.0),
        ],
    )?;
    Ok(())
}

/// A remote client's group of leases (LEASE_ALLOC_GROUP) is counted as a deployed tasklet's is:
/// each lease acquired once, and dropped once whether MEM_FREE releases it or the connection's
/// end does; a refused group counts nothing.
pub fn a_remote_group_is_counted_lease_by_lease() -> TestResult {
    const MIB: u64 = 1 << 20;
    let mut policy = policy();
    policy.devices.emu = Some(vec![64 * MIB, 32 * MIB]);
    let node = TestNode::with(Setup {
        policy,
        metrics: true,
        ..Setup::default()
    });
    let any = DeviceRequirement::default();
    let request = LeaseRequest {
        min_vram: MIB,
        secs: 30,
        device: None,
    };
    let mut gpu = RemoteGpu::new(node.client("dev"));
    let refused = gpu.lease_acquire_group(request, &any, 3);
    check(refused.is_err(), || format!("{refused:?}"))?;
    let group = gpu.lease_acquire_group(request, &any, 2)?;
    let (samples, text) = scrape(&node)?;
    expect(
        &samples,
        &text,
        &[
            ("gpu_lease_acquired{tenant=\"dev\"}", 2.0),
            ("gpu_lease_dropped{tenant=\"dev\"}", 0.0),
            ("gpu_device_leases{device=\"0\",uuid=\"emu-0\"}", 1.0),
            ("gpu_device_leases{device=\"1\",uuid=\"emu-1\"}", 1.0),
            ("gpu_leases_active", 2.0),
        ],
    )?;
    // One released, the other ended with its connection.
    gpu.lease_drop(group[0]);
    drop(gpu);
    node.wait_for_baseline(WAIT)?;
    let (samples, text) = scrape(&node)?;
    expect(
        &samples,
        &text,
        &[
            ("gpu_lease_acquired{tenant=\"dev\"}", 2.0),
            ("gpu_lease_dropped{tenant=\"dev\"}", 2.0),
            ("gpu_leases_active", 0.0),
        ],
    )?;
    Ok(())
}

/// The node's module cache is shared by its connections and counted: the same CUDA C loaded by
/// two tenants' connections at once (two leases, two workers) is compiled by NVRTC for the first
/// and a hit for the second, and a scrape says so.
pub fn the_module_cache_is_shared_by_connections_and_counted() -> TestResult {
    const IOTA_CU: &str = include_str!("../../../../kernels/iota.cu");
    if let Err(e) = tasklet_worker::nvrtc::library() {
        eprintln!("skipped: NVRTC not found ({e})");
        return Ok(());
    }
    let node = TestNode::with(Setup {
        metrics: true,
        ..Setup::default()
    });
    let mut held = Vec::new();
    for tenant in ["dev", "team"] {
        let mut gpu = RemoteGpu::new(node.client(tenant));
        let lease = gpu.lease_acquire(LeaseRequest {
            min_vram: 1 << 20,
            secs: 60,
            device: None,
        })?;
        let session = gpu.session_open(lease)?;
        gpu.module_load_source(session, IOTA_CU, &[])?;
        held.push(gpu);
    }
    let (samples, text) = scrape(&node)?;
    expect(
        &samples,
        &text,
        &[
            ("tasklet_module_cache_misses_total", 1.0),
            ("tasklet_module_cache_hits_total", 1.0),
            ("tasklet_module_cache_evictions_total", 0.0),
            ("tasklet_module_cache_entries", 1.0),
        ],
    )?;
    let bytes = samples
        .get("tasklet_module_cache_bytes")
        .copied()
        .unwrap_or(0.0);
    check(bytes > 0.0, || text.clone())?;
    drop(held);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// Runaway kernels through the node are charged their deadline once each: two clients, each
/// with a kernel that spins until the node's kernel deadline (2 s) stops it, one waiting in
/// SYNC, the other asking only well after, put 2 × 2 s on their tenant's GPU time.
pub fn runaways_through_the_node_are_charged_their_deadline_once() -> TestResult {
    use crate::oneshot::{launch_spin_forever, FAULTS_PTX, LEASE};
    use tasklet_runtime::gpu::GpuService;
    use tasklet_runtime::GpuError;
    const DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);
    let mut policy = policy();
    policy.workers.kernel_deadline = DEADLINE;
    let node = TestNode::with(Setup {
        policy,
        metrics: true,
        ..Setup::default()
    });
    let runaway = |client: tasklet_remote::NodeClient, wait: u64| {
        std::thread::spawn(move || -> Result<(), String> {
            let mut gpu = tasklet_remote::RemoteGpu::new(client);
            let mut run = || -> Result<Result<(), GpuError>, GpuError> {
                let lease = gpu.lease_acquire(LEASE)?;
                let session = gpu.session_open(lease)?;
                let module = gpu.module_load(session, FAULTS_PTX)?;
                let flag = gpu.mem_alloc(session, 4)?;
                launch_spin_forever(&mut gpu, session, module, flag)?;
                std::thread::sleep(std::time::Duration::from_millis(wait));
                Ok(gpu.sync(session))
            };
            match run() {
                Ok(Err(GpuError::DeadlineExceeded(_))) => Ok(()),
                other => Err(format!("expected deadline-exceeded, got {other:?}")),
            }
        })
    };
    let runs = [
        runaway(node.client("dev"), 0),
        // This one asks only well after the deadline stopped its kernel.
        runaway(node.client("dev"), 3500),
    ];
    for run in runs {
        run.join().map_err(|_| "a client panicked")??;
    }
    node.wait_for_baseline(WAIT)?;
    let (samples, text) = scrape(&node)?;
    let charged = samples
        .get("gpu_time_seconds_total{tenant=\"dev\"}")
        .copied()
        .unwrap_or(0.0);
    let expected = 2.0 * DEADLINE.as_secs_f64();
    println!("two runaways stopped at a {DEADLINE:?} deadline were charged {charged:.3} s");
    check(
        charged >= expected * 0.95 && charged <= expected * 1.2,
        || format!("charged {charged} s, expected about {expected} s:\n{text}"),
    )
}
