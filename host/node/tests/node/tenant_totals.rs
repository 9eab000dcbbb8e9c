//! A tenant's totals (`tenant-max-leases`, `tenant-max-vram`, `tenant-max-runs`) hold across
//! all its connections and deployed runs together, while other tenants get theirs.

use crate::support::*;
use std::time::{Duration, Instant};
use tasklet_remote::{ClientError, NodeClient};
use tasklet_runtime::Policy;
use tasklet_wire::ErrorCode;

fn node_with(tenants: &str, store: bool) -> Result<TestNode, String> {
    let mut policy = policy();
    policy.tenants = Policy::parse(tenants).map_err(|(_, e)| e)?.tenants;
    Ok(TestNode::with(Setup {
        policy,
        store,
        ..Setup::default()
    }))
}

/// `result` failed QUOTA_EXCEEDED naming `key`.
fn refused_naming<T: std::fmt::Debug>(result: Result<T, ClientError>, key: &str) -> TestResult {
    let err = match result {
        Ok(got) => return Err(format!("not refused ({key}): {got:?}").into()),
        Err(err) => err,
    };
    check(
        err.code() == Some(ErrorCode::QuotaExceeded) && err.to_string().contains(key),
        || err.to_string(),
    )
}

/// Retries `lease` on fresh attempts until it is granted (the node frees a closed connection's
/// leases once it notices), for at most `WAIT`.
fn lease_eventually(client: &mut NodeClient, bytes: u64) -> TestResult {
    let start = Instant::now();
    loop {
        match client.lease_alloc(bytes, 60, None) {
            Ok(_) => return Ok(()),
            Err(e) if start.elapsed() >= WAIT => {
                return Err(format!("never granted again: {e}").into())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Two connections of a tenant allowed two leases in all hold one each; a third connection's
/// lease is refused, another tenant's is not, and a closed connection gives its lease back to
/// the tenant's total. VRAM adds up across connections the same way. (Leases of 60 s: one that
/// expired on a slow machine would free room and the refusals would not be seen.)
pub fn a_tenants_connections_together_hold_at_most_its_totals() -> TestResult {
    let node = node_with(
        "[tenants.dev]\ntenant-max-leases = 2\n\
         [tenants.team]\ntenant-max-vram = \"3MiB\"\n",
        false,
    )?;
    // A group past the total is refused whole, before any of it is taken, saying so.
    {
        use tasklet_runtime::gpu::{GpuService, LeaseRequest};
        let mut gpu = tasklet_remote::RemoteGpu::new(node.client("dev"));
        let group = gpu.lease_acquire_group(
            LeaseRequest {
                min_vram: 1 << 20,
                secs: 60,
                device: None,
            },
            &Default::default(),
            3,
        );
        match group {
            Err(tasklet_runtime::GpuError::QuotaExceeded(why)) => check(
                why.contains("holds 0 lease(s)")
                    && why.contains("3 more")
                    && why.contains("tenant-max-leases"),
                || why.clone(),
            )?,
            other => return Err(format!("a group of 3 past a total of 2: {other:?}").into()),
        }
    }
    let mut first = node.client("dev");
    let mut second = node.client("dev");
    let mut third = node.client("dev");
    first
        .lease_alloc(1 << 20, 60, None)
        .map_err(|e| e.to_string())?;
    second
        .lease_alloc(1 << 20, 60, None)
        .map_err(|e| e.to_string())?;
    refused_naming(third.lease_alloc(1 << 20, 60, None), "tenant-max-leases")?;
    let mut team = node.client("team");
    team.lease_alloc(1 << 20, 60, None)
        .map_err(|e| format!("another tenant: {e}"))?;
    drop(first);
    lease_eventually(&mut third, 1 << 20)?;
    // The test node has 4 workers: make room for team's two more.
    drop(second);

    // team holds 1 MiB of its 3 MiB in all.
    let mut a = node.client("team");
    let mut b = node.client("team");
    a.lease_alloc(1 << 20, 60, None)
        .map_err(|e| e.to_string())?;
    refused_naming(b.lease_alloc(2 << 20, 60, None), "tenant-max-vram")?;
    // Within the total (once dev's closed connection has given its worker back).
    lease_eventually(&mut b, 1 << 20)?;
    drop((third, team, a, b));
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A tenant's deployed runs count in its totals with its connections: while its one run allowed
/// (`tenant-max-runs = 1`) holds a lease, its next run is refused and so is a lease past its
/// `tenant-max-leases = 1`; another tenant runs meanwhile; once the run ends the tenant runs again.
pub fn a_tenants_deployed_runs_count_in_its_totals() -> TestResult {
    let node = node_with(
        "[tenants.dev]\ntenant-max-runs = 1\ntenant-max-leases = 1\n[tenants.team]\n",
        true,
    )?;
    let (manifest, component) = pushable("testing/probe");
    let mut client = node.client("dev");
    let probe = client
        .deploy_push(&manifest, &component)
        .map_err(|e| e.to_string())?
        .digest;
    let mut runner = node.client("dev");
    let running = std::thread::spawn(move || runner.deploy_run(&probe, b"hold 2"));
    let control = node.node().control();
    let start = Instant::now();
    while control.status().leases == 0 {
        check(start.elapsed() < WAIT, || {
            "the run never took its lease".into()
        })?;
        std::thread::sleep(Duration::from_millis(10));
    }
    refused_naming(client.deploy_run(&probe, b"lease 1"), "tenant-max-runs")?;
    refused_naming(client.lease_alloc(1 << 20, 60, None), "tenant-max-leases")?;
    let mut team = node.client("team");
    team.deploy_push(&manifest, &component)
        .map_err(|e| e.to_string())?;
    let other = team
        .deploy_run(&probe, b"lease 1")
        .map_err(|e| e.to_string())?;
    check(
        String::from_utf8_lossy(&other.output).starts_with("ok"),
        || format!("another tenant's run: {other:?}"),
    )?;
    let held = running
        .join()
        .map_err(|_| "the running client panicked")?
        .map_err(|e| e.to_string())?;
    check(
        String::from_utf8_lossy(&held.output).contains("ok held"),
        || format!("{held:?}"),
    )?;
    let again = client
        .deploy_run(&probe, b"lease 1")
        .map_err(|e| format!("after the run ended: {e}"))?;
    check(
        String::from_utf8_lossy(&again.output).starts_with("ok"),
        || format!("{again:?}"),
    )?;
    drop((client, team));
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A tenant holds at most `tenant-max-deployments` deployments in the node's store: its next
/// push is refused before anything of it is stored, what it has still runs, another tenant
/// still pushes, and pushes made at once cannot pass the limit together.
pub fn a_tenants_deployments_are_capped() -> TestResult {
    let node = node_with(
        "[tenants.dev]\ntenant-max-deployments = 2\n[tenants.team]\ntenant-max-deployments = 3\n",
        true,
    )?;
    let mut client = node.client("dev");
    let mut digests = Vec::new();
    for name in ["iota", "scale"] {
        let (manifest, component) = pushable(name);
        let pushed = client
            .deploy_push(&manifest, &component)
            .map_err(|e| format!("push {name}: {e}"))?;
        digests.push(pushed.digest);
    }
    let blobs = || {
        std::fs::read_dir(node.store_path().join("blobs/sha256"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let stored = blobs();
    check(stored >= 4, || {
        format!("{stored} blobs for two deployments")
    })?;
    let (manifest, component) = pushable("testing/probe");
    refused_naming(
        client.deploy_push(&manifest, &component),
        "tenant-max-deployments",
    )?;
    check(blobs() == stored, || {
        format!(
            "a refused push stored something: {stored} blobs before, {} after",
            blobs()
        )
    })?;
    let run = client
        .deploy_run(&digests[0], b"4")
        .map_err(|e| format!("a deployment it has: {e}"))?;
    check(run.exit == tasklet_remote::DeployExit::Ok, || {
        format!("{run:?}")
    })?;
    let mut team = node.client("team");
    team.deploy_push(&manifest, &component)
        .map_err(|e| format!("another tenant: {e}"))?;

    // Pushes made at once count each other: of 8 distinct deployments pushed together by a
    // tenant allowed 3 (it has 1), 2 are stored.
    let (manifest, component) = pushable("iota");
    let text = String::from_utf8(manifest).map_err(|e| e.to_string())?;
    let pushes: Vec<_> = (0..8)
        .map(|i| {
            let manifest = text
                .replacen("name = \"iota\"", &format!("name = \"iota{i}\""), 1)
                .into_bytes();
            let (component, mut client) = (component.clone(), node.client("team"));
            std::thread::spawn(move || client.deploy_push(&manifest, &component))
        })
        .collect();
    let mut stored = 0;
    for push in pushes {
        match push.join().map_err(|_| "a push panicked")? {
            Ok(_) => stored += 1,
            refused => refused_naming(refused, "tenant-max-deployments")?,
        }
    }
    check(stored == 2, || {
        format!("{stored} of 8 pushes made at once were stored; 2 fit")
    })?;
    Ok(())
}

/// A total of zero refuses every lease, saying the policy allows none (not "drop one first",
/// which nothing could satisfy).
pub fn a_total_of_zero_says_the_policy_allows_none() -> TestResult {
    let node = node_with(
        "[tenants.dev]\ntenant-max-leases = 0\n[tenants.team]\ntenant-max-vram = \"0\"\n",
        false,
    )?;
    for (tenant, says) in [
        (
            "dev",
            "may hold no leases on this node: its policy sets tenant-max-leases = 0",
        ),
        (
            "team",
            "may hold no VRAM on this node: its policy sets tenant-max-vram = 0",
        ),
    ] {
        let err = node
            .client(tenant)
            .lease_alloc(1 << 20, 60, None)
            .err()
            .ok_or_else(|| format!("{tenant} got a lease past a total of 0"))?;
        check(
            err.code() == Some(ErrorCode::QuotaExceeded)
                && err.to_string().contains(says)
                && !err.to_string().contains("first"),
            || err.to_string(),
        )?;
    }
    Ok(())
}
