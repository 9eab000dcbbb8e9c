//! Connections and leases over time: clients that die or stall, leases that expire, nodes that
//! die or drain. Every wait is bounded.

use crate::support::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tasklet_remote::{ConnectOptions, NodeClient, RemoteGpu};
use tasklet_runtime::gpu::{GpuService, LeaseRequest};
use tasklet_runtime::GpuError;
use tasklet_wire::{ErrorCode, Opcode, Reply, Request};

/// Starts this binary in one of its helper roles; its first line of output.
pub fn helper(args: &[&str]) -> Result<(Child, String), String> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    // A helper that serves a node says its address once the node's first workers are up: on a
    // GPU under the load of other tests, that has taken longer than the waits of `WAIT`.
    match rx.recv_timeout(4 * WAIT) {
        Ok(line) if !line.is_empty() => Ok((child, line.trim().to_owned())),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("helper {args:?} said nothing"))
        }
    }
}

pub fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// `hold-lease ADDR CERTS`: connects as dev, holds a lease with memory in use, says `ready`,
/// and waits to be killed.
pub fn hold_lease(args: &[String]) -> ! {
    let mut options = ConnectOptions::new(args[0].clone(), &args[1], tenant("dev"));
    options.idle_timeout = Duration::from_secs(3);
    let mut client = NodeClient::connect_with(&options).expect("connects");
    let lease = client.lease_alloc(1 << 20, 60, None).expect("a lease");
    let session = match client
        .request(&Request::SessionOpen { lease: lease.lease })
        .expect("a session")
        .0
    {
        Reply::SessionOpen { session } => session,
        other => panic!("{other:?}"),
    };
    client
        .request(&Request::MemAlloc {
            session,
            bytes: 4096,
        })
        .expect("memory");
    println!("ready");
    std::thread::sleep(Duration::from_secs(120));
    std::process::exit(0);
}

/// `serve-node CERTS [NATS NAME]`: serves a node on 127.0.0.1 (a member of the cluster at NATS
/// when given), says `ADDR`, and serves until killed.
pub fn serve_node(args: &[String]) -> ! {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let node = tasklet_node::NodeBuilder::new()
            .listen("127.0.0.1:0".parse().unwrap())
            .certs(&args[0])
            .policy(policy())
            .backend(crate::support::backend_for(&policy()))
            .worker(worker())
            .idle_timeout(Duration::from_secs(3));
        let node = match (args.get(1), args.get(2)) {
            (Some(url), Some(name)) => node
                .nats(tasklet_node::NatsConfig::new(url.clone()))
                .name(name.clone()),
            _ => node,
        };
        let node = node.build().expect("the node starts");
        println!("{}", node.local_addr());
        let _ = node.serve().await;
    });
    std::process::exit(0);
}

pub fn a_killed_client_leaves_nothing_behind() -> TestResult {
    let node = TestNode::start();
    let certs = node.certs_path().to_str().unwrap().to_owned();
    let (mut child, line) = helper(&["hold-lease", &node.addr_text(), &certs])?;
    check(line == "ready", || format!("the helper said {line:?}"))?;
    let held = node.accounting();
    check(held.leases == 1 && held.used_bytes > 0, || {
        format!("{held:?}")
    })?;
    // SIGKILL: the client sends nothing more, not even a close.
    kill(&mut child);
    let took = node.wait_for_baseline(WAIT)?;
    // The node notices at its idle timeout (3 s) and frees at once.
    check(
        took < Duration::from_secs(3) + Duration::from_secs(4),
        || format!("freed after {took:?}"),
    )?;
    Ok(())
}

pub fn a_killed_node_is_reported_disconnected_and_leaves_no_worker() -> TestResult {
    let certs = certs();
    let (mut child, addr) = helper(&["serve-node", certs.path().to_str().unwrap()])?;
    let result = (|| -> TestResult {
        let mut options = ConnectOptions::new(addr.clone(), certs.path(), tenant("dev"));
        options.idle_timeout = Duration::from_secs(3);
        let mut gpu =
            RemoteGpu::new(NodeClient::connect_with(&options).map_err(|e| e.to_string())?);
        let lease = gpu.lease_acquire(LeaseRequest {
            min_vram: 1 << 20,
            secs: 60,
            device: None,
        })?;
        let session = gpu.session_open(lease)?;
        let workers = children_of(child.id());
        check(!workers.is_empty(), || {
            "the node has no worker process".into()
        })?;
        kill(&mut child);
        let start = Instant::now();
        match gpu.sync(session) {
            Err(GpuError::DeviceLost(message)) => {
                check(message.starts_with("disconnected: "), || message.clone())?
            }
            other => return Err(format!("expected device-lost, got {other:?}").into()),
        }
        let took = start.elapsed();
        check(
            took < Duration::from_secs(3) + Duration::from_secs(4),
            || format!("noticed after {took:?}"),
        )?;
        // Later calls fail at once, the same way.
        check(
            matches!(gpu.mem_alloc(session, 16), Err(GpuError::DeviceLost(_))),
            || "a later call".into(),
        )?;
        let deadline = Instant::now() + WAIT;
        while workers.iter().any(|&pid| running(pid)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let left: Vec<u32> = workers
            .iter()
            .copied()
            .filter(|&pid| running(pid))
            .collect();
        check(left.is_empty(), || {
            format!("workers left running: {left:?}")
        })
    })();
    kill(&mut child);
    result
}

pub fn a_lease_expires_during_a_remote_session() -> TestResult {
    let node = TestNode::start();
    let mut gpu = RemoteGpu::new(node.client("dev"));
    let lease = gpu.lease_acquire(LeaseRequest {
        min_vram: 1 << 20,
        secs: 1,
        device: None,
    })?;
    let session = gpu.session_open(lease)?;
    gpu.mem_alloc(session, 4096)?;
    // The reaper ends it at its time, whether or not the client does anything.
    node.wait_for_baseline(Duration::from_secs(1) + WAIT)?;
    match gpu.mem_alloc(session, 4096) {
        Err(GpuError::LeaseExpired(message)) => {
            check(message.contains("expired"), || message.clone())?
        }
        other => return Err(format!("expected lease-expired, got {other:?}").into()),
    }
    // The connection is fine: a new lease works.
    let again = gpu.lease_acquire(LeaseRequest {
        min_vram: 1 << 20,
        secs: 10,
        device: None,
    })?;
    gpu.lease_drop(again);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

pub fn a_stalled_client_holds_nothing_past_its_timeout() -> TestResult {
    let node = TestNode::start();
    let mut raw = RawClient::connect(&node, "dev");
    raw.request(1, &hello())?;
    let (reply, _) = raw.request(
        2,
        &Request::LeaseAlloc {
            min_bytes: 1 << 20,
            seconds: 60,
            device: None,
            requires: Default::default(),
        },
    )?;
    check(matches!(reply, Reply::LeaseAlloc { .. }), || {
        format!("{reply:?}")
    })?;
    check(node.accounting().leases == 1, || {
        format!("{:?}", node.accounting())
    })?;
    // Half a frame, then nothing (the connection itself stays alive: quinn keeps it open).
    let opcode = (Opcode::Sync as u16).to_be_bytes();
    raw.send_bytes(&[
        tasklet_wire::PROTOCOL_VERSION,
        0,
        opcode[0],
        opcode[1],
        0,
        0,
    ]);
    let start = Instant::now();
    let (code, reason) = raw.closed()?;
    check(code == ErrorCode::ProtocolError as u64, || {
        format!("{code}: {reason}")
    })?;
    check(reason.contains("middle of a frame"), || reason.clone())?;
    node.wait_for_baseline(WAIT)?;
    check(start.elapsed() < WAIT, || "took too long".into())?;

    // A client that completes the handshake and never says HELLO is closed too.
    let silent = RawClient::connect(&node, "dev");
    let (code, reason) = silent.closed()?;
    check(
        code == ErrorCode::ProtocolError as u64 && reason.contains("HELLO"),
        || format!("{code}: {reason}"),
    )?;
    Ok(())
}

pub fn a_drain_refuses_new_leases_while_a_session_finishes() -> TestResult {
    let node = TestNode::start();
    let mut busy = RemoteGpu::new(node.client("dev"));
    let lease = busy.lease_acquire(LeaseRequest {
        min_vram: 1 << 20,
        secs: 60,
        device: None,
    })?;
    let session = busy.session_open(lease)?;
    let buffer = busy.mem_alloc(session, 64)?;
    let mut late = node.client("team");
    let before = late.node_inventory().map_err(|e| e.to_string())?;
    check(!before.draining, || "draining before the drain".into())?;
    node.node().drain();

    let refused = late
        .lease_alloc(1 << 20, 10, None)
        .err()
        .ok_or("a lease while draining")?;
    check(refused.code() == Some(ErrorCode::Draining), || {
        refused.to_string()
    })?;
    // Inventory still answers, and says the node drains.
    let during = late.node_inventory().map_err(|e| e.to_string())?;
    check(during.draining && !during.devices.is_empty(), || {
        format!("{during:?}")
    })?;

    // The running session goes on to its end.
    busy.mem_write(session, buffer, 0, b"still here")?;
    let back = busy.mem_read(session, buffer, 0, 10)?;
    check(back == b"still here", || format!("{back:?}"))?;
    busy.lease_drop(lease);
    // With the last lease gone the node stops by itself.
    node.drain_and_wait(WAIT)?;
    match busy.lease_acquire(LeaseRequest {
        min_vram: 1 << 20,
        secs: 60,
        device: None,
    }) {
        Err(GpuError::DeviceLost(message)) => {
            check(message.contains("disconnected"), || message.clone())
        }
        other => Err(format!("expected disconnected after the node stopped, got {other:?}").into()),
    }
}
