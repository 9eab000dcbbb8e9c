//! Deployed tasklets over QUIC: pushed into the node's store, run there by digest, each tenant
//! with its own deployments and rights.

use crate::support::*;
use std::time::{Duration, Instant};
use tasklet_remote::{deployment_digest, ClientError, DeployExit, Digest, NodeClient};
use tasklet_runtime::{Manifest, Policy};
use tasklet_wire::{encode_request, ErrorCode, Request};

fn node_with_store() -> TestNode {
    TestNode::with(Setup {
        store: true,
        ..Setup::default()
    })
}

fn push(client: &mut NodeClient, name: &str) -> Result<Digest, String> {
    let (manifest, component) = pushable(name);
    let pushed = client
        .deploy_push(&manifest, &component)
        .map_err(|e| format!("push {name}: {e}"))?;
    if pushed.digest != deployment_digest(&manifest, &component) {
        return Err(format!(
            "{name}: the node's digest {} is not the client's",
            pushed.digest
        ));
    }
    Ok(pushed.digest)
}

fn code(result: Result<impl Sized, ClientError>) -> Option<ErrorCode> {
    result.err().and_then(|e| e.code())
}

/// The example tasklets pushed, then run on the node: the same output as run here.
pub fn a_pushed_tasklet_runs_as_it_does_locally() -> TestResult {
    let node = node_with_store();
    let local = local_host();
    let mut client = node.client("dev");
    let cases: [(&str, &[&str]); 4] = [
        ("iota", &["1", "37", "1000", ""]),
        ("vector-add", &["1", "1000"]),
        ("scale", &["1.5 1 2.25 -3 0.1 1e30 16777217", "2"]),
        // A persistent kernel served through rings in the node's mapped memory.
        ("actor", &["1", "300"]),
    ];
    for (name, inputs) in cases {
        let digest = push(&mut client, name)?;
        let compiled = local
            .load(Manifest::load(&tasklet(name)).expect("manifest"))
            .expect("component loads");
        for input in inputs {
            let here = local
                .run(&compiled, input.as_bytes())
                .map_err(|e| format!("{name} local: {e}"))?;
            let run = client
                .deploy_run(&digest, input.as_bytes())
                .map_err(|e| format!("{name} deployed: {e}"))?;
            check(run.exit == DeployExit::Ok && run.output == here, || {
                format!(
                    "{name} on {input:?}: local {:?}, deployed {} {:?}",
                    String::from_utf8_lossy(&here),
                    run.exit,
                    String::from_utf8_lossy(&run.output)
                )
            })?;
        }
    }
    // A run that fails says what a local run says.
    let digest = push(&mut client, "iota")?;
    let compiled = local
        .load(Manifest::load(&tasklet("iota")).expect("manifest"))
        .expect("component loads");
    let here = local
        .run(&compiled, b"twelve")
        .expect_err("iota refuses twelve");
    let run = client
        .deploy_run(&digest, b"twelve")
        .map_err(|e| e.to_string())?;
    check(
        run.exit == DeployExit::Failed && run.message() == Some(here.to_string()),
        || format!("{} {:?}, local {here}", run.exit, run.message()),
    )?;
    drop(client);
    // Every run's leases ended with the run.
    node.wait_for_baseline(WAIT)?;
    let metrics = node.node().control().metrics();
    check(
        metrics.leases_acquired == metrics.leases_dropped && metrics.leases_acquired > 0,
        || format!("{metrics:?}"),
    )?;
    Ok(())
}

/// Pushing what is there changes nothing; DEPLOY_HAS sees it; an unknown digest is not found.
pub fn a_push_is_idempotent_and_an_unknown_digest_is_not_found() -> TestResult {
    let node = node_with_store();
    let mut client = node.client("dev");
    let (manifest, component) = pushable("iota");
    let digest = deployment_digest(&manifest, &component);
    check(
        !client.deploy_has(&digest).map_err(|e| e.to_string())?,
        || "present before its push".into(),
    )?;
    let first = client
        .deploy_push(&manifest, &component)
        .map_err(|e| e.to_string())?;
    let second = client
        .deploy_push(&manifest, &component)
        .map_err(|e| e.to_string())?;
    check(first.digest == digest && second.digest == digest, || {
        format!("{} {} {digest}", first.digest, second.digest)
    })?;
    check(!first.already_present && second.already_present, || {
        format!("{first:?} {second:?}")
    })?;
    check(
        client.deploy_has(&digest).map_err(|e| e.to_string())?,
        || "absent after its push".into(),
    )?;
    // A push that puts back a blob the store lost changed something: not "already present".
    let blobs = node.store_path().join("blobs/sha256");
    for blob in std::fs::read_dir(&blobs).map_err(|e| e.to_string())? {
        std::fs::remove_file(blob.map_err(|e| e.to_string())?.path()).map_err(|e| e.to_string())?;
    }
    check(
        !client.deploy_has(&digest).map_err(|e| e.to_string())?,
        || "present without its blobs".into(),
    )?;
    let restored = client
        .deploy_push(&manifest, &component)
        .map_err(|e| e.to_string())?;
    check(!restored.already_present, || format!("{restored:?}"))?;
    let ran = client
        .deploy_run(&digest, b"3")
        .map_err(|e| e.to_string())?;
    check(ran.exit == DeployExit::Ok, || format!("{ran:?}"))?;

    let unknown = Digest([7; 32]);
    check(
        !client.deploy_has(&unknown).map_err(|e| e.to_string())?,
        || "an unknown digest is present".into(),
    )?;
    let err = client
        .deploy_run(&unknown, b"1")
        .expect_err("an unknown digest runs");
    check(err.code() == Some(ErrorCode::NotFound), || err.to_string())?;
    check(err.to_string().contains("tasklet deploy push"), || {
        err.to_string()
    })?;
    // The connection serves on.
    let run = client
        .deploy_run(&digest, b"2")
        .map_err(|e| e.to_string())?;
    check(run.output == b"1\n2\n", || format!("{run:?}"))?;
    Ok(())
}

/// A tenant whose policy says `deploy = false` may neither push nor run, and is told which key
/// says so; its GPU sessions are not affected.
pub fn a_tenant_without_the_deploy_right_is_unauthorized() -> TestResult {
    let mut policy = policy();
    let parsed =
        Policy::parse("[tenants.dev]\n[tenants.team]\ndeploy = false\n").map_err(|(_, e)| e)?;
    policy.tenants = parsed.tenants;
    let node = TestNode::with(Setup {
        policy,
        store: true,
        ..Setup::default()
    });
    let digest = push(&mut node.client("dev"), "iota")?;
    let mut team = node.client("team");
    let (manifest, component) = pushable("iota");
    let err = team
        .deploy_push(&manifest, &component)
        .expect_err("team pushes");
    check(
        err.code() == Some(ErrorCode::Unauthorized)
            && err
                .to_string()
                .contains("`deploy = false` in [tenants.team]"),
        || err.to_string(),
    )?;
    let err = team.deploy_run(&digest, b"1").expect_err("team runs");
    check(err.code() == Some(ErrorCode::Unauthorized), || {
        err.to_string()
    })?;
    // The same connection still leases.
    let lease = team
        .lease_alloc(1 << 20, 10, None)
        .map_err(|e| e.to_string())?;
    team.mem_free(lease.lease).map_err(|e| e.to_string())?;
    Ok(())
}

/// Deployments are per tenant: another tenant that knows the digest is told it does not exist,
/// exactly as for a digest nobody pushed, until it pushes the tasklet itself.
pub fn another_tenant_cannot_run_your_deployment() -> TestResult {
    let node = node_with_store();
    let mut dev = node.client("dev");
    let digest = push(&mut dev, "iota")?;
    let mut team = node.client("team");
    check(
        !team.deploy_has(&digest).map_err(|e| e.to_string())?,
        || "team sees dev's deployment".into(),
    )?;
    let theirs = team.deploy_run(&digest, b"3").expect_err("team runs dev's");
    let nobodys = team
        .deploy_run(&Digest([9; 32]), b"3")
        .expect_err("team runs an unknown digest");
    check(theirs.code() == Some(ErrorCode::NotFound), || {
        theirs.to_string()
    })?;
    check(
        theirs.to_string().replace(&digest.to_hex(), "D")
            == nobodys.to_string().replace(&Digest([9; 32]).to_hex(), "D"),
        || format!("{theirs} / {nobodys}"),
    )?;
    // Pushing it makes it team's too: the same digest, new to team, stored once.
    let (manifest, component) = pushable("iota");
    let pushed = team
        .deploy_push(&manifest, &component)
        .map_err(|e| e.to_string())?;
    check(pushed.digest == digest && !pushed.already_present, || {
        format!("{pushed:?}")
    })?;
    let run = team.deploy_run(&digest, b"3").map_err(|e| e.to_string())?;
    check(run.output == b"1\n2\n3\n", || format!("{run:?}"))?;
    // dev's still runs.
    let run = dev.deploy_run(&digest, b"1").map_err(|e| e.to_string())?;
    check(run.output == b"1\n", || format!("{run:?}"))?;
    Ok(())
}

/// The first run loads what the push compiled; the next is warm: nothing loaded, faster.
pub fn a_second_run_is_warm() -> TestResult {
    let node = node_with_store();
    let mut client = node.client("dev");
    let digest = push(&mut client, "iota")?;
    for input in ["4", "5"] {
        client
            .deploy_run(&digest, input.as_bytes())
            .map_err(|e| e.to_string())?;
    }
    let text = node.node().control().metrics_text();
    let value = |series: &str| -> Result<f64, String> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .ok_or_else(|| format!("no {series} in:\n{text}"))
    };
    let cached = value("tasklet_deploy_load_seconds_sum{load=\"cached\"}")?;
    let warm = value("tasklet_deploy_load_seconds_sum{load=\"warm\"}")?;
    check(
        value("tasklet_deploy_load_seconds_count{load=\"cached\"}")? == 1.0
            && value("tasklet_deploy_load_seconds_count{load=\"warm\"}")? == 1.0,
        || text.clone(),
    )?;
    check(warm < cached, || {
        format!("warm load {warm}s, first load {cached}s")
    })?;
    Ok(())
}

/// Pushes the node refuses leave the connection serving: a manifest that is not one, a
/// component that is not a tasklet, one past the node's size limit.
pub fn refused_pushes_say_why_and_the_connection_serves_on() -> TestResult {
    let node = TestNode::with(Setup {
        policy: {
            // `[deploy] max-component-size = "64KiB"`, as a node's policy file says it.
            let mut policy = policy();
            policy.deploy_limits = Policy::parse("[deploy]\nmax-component-size = \"64KiB\"\n")
                .map_err(|(_, e)| e)?
                .deploy_limits;
            policy
        },
        store: true,
        ..Setup::default()
    });
    let mut client = node.client("dev");
    let (manifest, component) = pushable("iota");
    check(
        code(client.deploy_push(b"name = ", &component)) == Some(ErrorCode::InvalidArgument),
        || "a broken manifest".into(),
    )?;
    check(
        code(client.deploy_push(&manifest, b"\0asm not a component"))
            == Some(ErrorCode::InvalidArgument),
        || "a broken component".into(),
    )?;
    let err = client
        .deploy_push(&manifest, &vec![0u8; 100 << 10])
        .expect_err("an oversized component");
    check(
        err.code() == Some(ErrorCode::QuotaExceeded)
            && err
                .to_string()
                .contains("`max-component-size` under `[deploy]`"),
        || err.to_string(),
    )?;
    let inventory = client.inventory().map_err(|e| e.to_string())?;
    check(inventory.len() == node.devices(), || {
        format!("{inventory:?}")
    })?;
    Ok(())
}

/// A deploy request before HELLO's reply breaks the protocol, as any other request does.
pub fn a_deploy_request_before_hello_closes_the_connection() -> TestResult {
    let node = node_with_store();
    let mut raw = RawClient::connect(&node, "dev");
    let mut frame = Vec::new();
    encode_request(
        1,
        &Request::DeployHas {
            digest: Digest([1; 32]),
        },
        &mut frame,
    )
    .map_err(|e| e.to_string())?;
    raw.send_bytes(&frame);
    let answer = raw.next_reply();
    check(
        matches!(&answer, Err(why) if why.contains("PROTOCOL_ERROR")),
        || format!("{answer:?}"),
    )?;
    // Others are served.
    let mut client = node.client("dev");
    check(
        !client
            .deploy_has(&Digest([1; 32]))
            .map_err(|e| e.to_string())?,
        || "present".into(),
    )?;
    Ok(())
}

/// A drain refuses new pushes and runs, lets the running one finish, then stops the node.
pub fn a_drain_lets_a_running_deployment_finish() -> TestResult {
    let node = node_with_store();
    let mut client = node.client("dev");
    let iota = push(&mut client, "iota")?;
    let probe = push(&mut client, "testing/probe")?;
    let mut runner = node.client("dev");
    let running = std::thread::spawn(move || runner.deploy_run(&probe, b"hold 2"));
    let start = std::time::Instant::now();
    while node.node().control().metrics().deploy_runs_active == 0 {
        check(start.elapsed() < WAIT, || "the run never started".into())?;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    node.node().drain();
    let refused = client
        .deploy_run(&iota, b"1")
        .expect_err("a run while draining");
    check(refused.code() == Some(ErrorCode::Draining), || {
        refused.to_string()
    })?;
    let (manifest, component) = pushable("scale");
    let refused = client
        .deploy_push(&manifest, &component)
        .expect_err("a push while draining");
    check(refused.code() == Some(ErrorCode::Draining), || {
        refused.to_string()
    })?;
    let run = running
        .join()
        .map_err(|_| "the running client panicked")?
        .map_err(|e| e.to_string())?;
    check(
        run.exit == DeployExit::Ok && String::from_utf8_lossy(&run.output).contains("ok held"),
        || format!("{run:?}"),
    )?;
    drop(client);
    node.drain_and_wait(WAIT)?;
    Ok(())
}

/// The reply to the run that ends a drain reaches its client whole, however long it takes to
/// send: iota's output of a million lines (6.9 MB) is still being written when the run has ended,
/// and the node closes its connections only once the client has it all.
pub fn a_drain_delivers_the_last_runs_whole_output() -> TestResult {
    const N: u32 = 1_000_000;
    let node = node_with_store();
    let mut client = node.client("dev");
    let iota = push(&mut client, "iota")?;
    drop(client);
    let mut runner = node.client("dev");
    let running = std::thread::spawn(move || runner.deploy_run(&iota, N.to_string().as_bytes()));
    let start = std::time::Instant::now();
    while node.node().control().metrics().deploy_runs_active == 0 {
        check(start.elapsed() < WAIT, || "the run never started".into())?;
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    node.node().drain();
    let run = running
        .join()
        .map_err(|_| "the running client panicked")?
        .map_err(|e| format!("the last run of a drain: {e}"))?;
    let output = String::from_utf8_lossy(&run.output);
    check(
        run.exit == DeployExit::Ok
            && output.lines().count() == N as usize
            && output.ends_with(&format!("\n{N}\n")),
        || format!("{:?}, {} bytes of output", run.exit, run.output.len()),
    )?;
    node.drain_and_wait(WAIT)?;
    Ok(())
}

/// A run is granted its manifest cut down by the tenant's ceiling: probe asks for 64 MiB, and
/// a tenant capped at 1 MiB gets a lease of 2 MiB refused where another gets it.
pub fn a_run_gets_its_manifest_within_the_tenants_ceiling() -> TestResult {
    let mut policy = policy();
    policy.tenants = Policy::parse("[tenants.dev]\n[tenants.team]\nmax-vram = \"1MiB\"\n")
        .map_err(|(_, e)| e)?
        .tenants;
    let node = TestNode::with(Setup {
        policy,
        store: true,
        ..Setup::default()
    });
    let mut results = Vec::new();
    for tenant in ["dev", "team"] {
        let mut client = node.client(tenant);
        let probe = push(&mut client, "testing/probe")?;
        let run = client
            .deploy_run(&probe, b"lease 2")
            .map_err(|e| e.to_string())?;
        results.push(String::from_utf8_lossy(&run.output).into_owned());
    }
    check(
        results[0].starts_with("ok lease") && results[1].starts_with("error quota-exceeded"),
        || format!("{results:?}"),
    )?;
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// `deploy-hold ADDR CERTS DIGEST`: connects as dev, says `ready`, then runs deployment DIGEST
/// (the probe) on `hold 25`: a run of 25 s, holding a lease, that it is killed in the middle of.
pub fn deploy_hold(args: &[String]) -> ! {
    let mut options = tasklet_remote::ConnectOptions::new(args[0].clone(), &args[1], tenant("dev"));
    options.idle_timeout = std::time::Duration::from_secs(3);
    let digest = Digest::from_hex(args[2].as_bytes()).expect("a digest");
    let mut client = NodeClient::connect_with(&options).expect("connects");
    println!("ready");
    let run = client.deploy_run(&digest, b"hold 25");
    println!("{run:?}");
    std::process::exit(0);
}

/// A client killed while its run holds a lease: the node stops the run as soon as it notices
/// the connection is gone (its idle timeout, 3 s here), not at the end of the tasklet's 25 s,
/// and the run's lease goes with it.
pub fn a_killed_clients_run_is_stopped() -> TestResult {
    let node = node_with_store();
    let mut client = node.client("dev");
    let probe = push(&mut client, "testing/probe")?;
    drop(client);
    let certs = node.certs_path().to_str().unwrap().to_owned();
    let (mut child, line) =
        crate::lifecycle::helper(&["deploy-hold", &node.addr_text(), &certs, &probe.to_hex()])?;
    check(line == "ready", || format!("the helper said {line:?}"))?;
    let control = node.node().control();
    let start = std::time::Instant::now();
    while control.status().runs == 0 || control.status().leases == 0 {
        check(start.elapsed() < WAIT, || {
            format!("the run never took its lease: {:?}", control.status())
        })?;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SIGKILL: the client sends nothing more, not even a close.
    crate::lifecycle::kill(&mut child);
    let killed = std::time::Instant::now();
    loop {
        let status = control.status();
        if status.runs == 0 && status.leases == 0 && node.accounting().leases == 0 {
            break;
        }
        check(killed.elapsed() < WAIT, || {
            format!("the run went on after its client died: {status:?}")
        })?;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let took = killed.elapsed();
    // The node notices at its idle timeout (3 s); the run then stops within a tick.
    check(took < std::time::Duration::from_secs(3 + 3), || {
        format!("the run and its lease ended {took:?} after the client was killed")
    })?;
    let metrics = control.metrics_text();
    check(
        metrics.lines().any(|l| {
            l.starts_with("tasklet_deploy_runs_total") && l.contains("status=\"stopped\"")
        }),
        || format!("no stopped run counted:\n{metrics}"),
    )?;
    Ok(())
}

/// The store check a daemon makes before it starts its host (`check_store`) refuses a folder a
/// running node holds, naming that node's process, in the node's own words, as building a
/// second node on it does — which leaves the running node's files alone, even a temporary file
/// old enough for a store being opened to remove; a free folder passes, is created, and is let
/// go again so that the node built next can take it.
pub fn check_store_refuses_a_store_a_running_node_holds() -> TestResult {
    let node = node_with_store();
    let stale = node
        .store_path()
        .join("tmp")
        .join("push-of-the-running-node");
    let file = std::fs::File::create(&stale).map_err(|e| e.to_string())?;
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 3600);
    file.set_modified(two_hours_ago)
        .map_err(|e| e.to_string())?;
    drop(file);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let second = runtime.block_on(async {
        tasklet_node::NodeBuilder::new()
            .listen("127.0.0.1:0".parse().unwrap())
            .certs(node.certs_path())
            .policy(policy())
            .backend(backend_for(&policy()))
            .worker(worker())
            .store(node.store_path())
            .build()
            .map(|node| node.start())
    });
    let built = second
        .err()
        .ok_or("a second node was built on the store a running node holds")?
        .to_string();
    check(stale.exists(), || {
        format!("the second node removed the running node's temporary file ({built})")
    })?;
    let err = tasklet_node::check_store(node.store_path())
        .err()
        .ok_or("check_store passed the store a running node holds")?;
    let text = err.to_string();
    let holder = format!(
        "in use by another running node (process {})",
        std::process::id()
    );
    check(
        !text.contains('\n') && text.contains(&holder) && text.contains("--store DIR"),
        || text.clone(),
    )?;
    check(built == text, || format!("built: {built}\nchecked: {text}"))?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = dir.path().join("new-store");
    tasklet_node::check_store(&store).map_err(|e| format!("a free folder: {e}"))?;
    check(store.is_dir(), || {
        "check_store did not create the folder".into()
    })?;
    tasklet_node::check_store(&store).map_err(|e| format!("checked twice: {e}"))?;
    Ok(())
}

/// Deploy requests being served are bounded by tenant and over the node (each holds a blocking
/// thread until answered): past either bound the next is answered CAPACITY_EXCEEDED at once,
/// saying which, while those under way go on; once they end, requests are served again.
pub fn deploy_requests_being_served_are_bounded_by_tenant_and_node() -> TestResult {
    let node = TestNode::with(Setup {
        store: true,
        authorizer: Some(Box::new(|builder: tasklet_node::NodeBuilder| {
            builder.max_tenant_deploy_jobs(2).max_deploy_jobs(3)
        })),
        ..Setup::default()
    });
    let probe = push(&mut node.client("dev"), "testing/probe")?;
    push(&mut node.client("team"), "testing/probe")?;
    let control = node.node().control();
    // Runs asleep for a while, each on a connection of its own: they hold their places.
    let sleeper = |tenant: &str| {
        let mut client = node.client(tenant);
        std::thread::spawn(move || client.deploy_run(&probe, b"sleep 5"))
    };
    let until_running = |runs: u64| -> TestResult {
        let start = Instant::now();
        while control.status().runs < runs {
            check(start.elapsed() < WAIT, || {
                format!("{runs} runs never ran at once")
            })?;
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    };
    // All three at once, so that they are surely all asleep together however slowly they
    // start: two of dev's (its cap) and one of team's (the node's cap of three).
    let asleep = vec![sleeper("dev"), sleeper("dev"), sleeper("team")];
    until_running(3)?;
    let refused = |tenant: &str, said: &str| -> TestResult {
        let err = node
            .client(tenant)
            .deploy_run(&probe, b"lease 1")
            .err()
            .ok_or_else(|| format!("{tenant}'s run was served past the bound ({said})"))?;
        check(
            err.code() == Some(ErrorCode::CapacityExceeded) && err.to_string().contains(said),
            || format!("{tenant}: {err}"),
        )
    };
    refused("dev", "tenant `dev` has 2 deploy requests")?;
    refused("team", "this node serves 3 deploy requests at once")?;
    for run in asleep {
        let ran = run
            .join()
            .map_err(|_| "a sleeper panicked")?
            .map_err(|e| e.to_string())?;
        check(
            String::from_utf8_lossy(&ran.output).starts_with("ok slept"),
            || format!("{ran:?}"),
        )?;
    }
    let again = node
        .client("team")
        .deploy_run(&probe, b"lease 1")
        .map_err(|e| format!("once the others ended: {e}"))?;
    check(
        String::from_utf8_lossy(&again.output).starts_with("ok"),
        || format!("{again:?}"),
    )?;
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A tenant's owner records that cannot be written (here a file planted where its folder goes,
/// after the node started) refuse its push `INTERNAL`, naming none of the node's files; another
/// tenant's push goes on.
pub fn owner_records_that_fail_name_no_file_of_the_node() -> TestResult {
    let node = node_with_store();
    std::fs::create_dir_all(node.store_path().join("owners")).map_err(|e| e.to_string())?;
    std::fs::write(node.store_path().join("owners/dev"), "planted").map_err(|e| e.to_string())?;
    let (manifest, component) = pushable("iota");
    let err = node
        .client("dev")
        .deploy_push(&manifest, &component)
        .err()
        .ok_or("the push was recorded through a file")?;
    let said = err.to_string();
    let store = node.store_path().display().to_string();
    check(
        err.code() == Some(ErrorCode::Internal)
            && said.contains("owner records (the node's log says why)")
            && !said.contains(&store)
            && !said.contains("os error"),
        || said.clone(),
    )?;
    push(&mut node.client("team"), "iota")?;
    Ok(())
}
