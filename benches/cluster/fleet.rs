//! Simulated nodes: realistic records kept in the registry by the registry's own
//! [`Registrar`], one per node, heartbeating every 2 s over a few shared NATS connections,
//! exactly as a `tasklet node --nats` does (the same record type, bucket code and timings).
//!
//! Every simulated device is `cuda`, so a requirement naming `backend=emu` matches only a
//! real node on the emulator, while placement still reads and weighs every simulated record.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tasklet_cluster::{
    Cluster, ComputeCapability, DeviceRecord, Heartbeat, Load, NatsConfig, NodeName, NodeRecord,
    Registrar, BACKEND_CUDA, RECORD_FORMAT,
};
use tokio::runtime::Runtime;

const GIB: u64 = 1 << 30;

/// The GPUs simulated nodes carry: name, VRAM, compute capability.
const GPUS: [(&str, u64, (u32, u32)); 4] = [
    ("NVIDIA H100 80GB HBM3", 80 * GIB, (9, 0)),
    ("NVIDIA A100-SXM4-40GB", 40 * GIB, (8, 0)),
    ("NVIDIA L4", 22 * GIB, (8, 9)),
    ("NVIDIA H200", 141 * GIB, (9, 0)),
];

/// GPUs per node, picked by the node's number: mostly 8-GPU servers, some smaller.
const GPU_COUNTS: [usize; 8] = [8, 8, 4, 8, 2, 8, 1, 4];

/// A small deterministic mix of `i` and `salt` (splitmix64's finalizer), so that records vary
/// without a random number generator.
fn mix(i: u64, salt: u64) -> u64 {
    let mut z = i
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(salt.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Simulated node `i`'s record at its `beat`-th heartbeat: a host name such as a site would
/// use, an address in a private network, a certificate fingerprint, 1 to 8 GPUs of one kind
/// whose free VRAM and leases drift from beat to beat, and some load.
pub fn record(i: usize, beat: u32) -> NodeRecord {
    let n = i as u64;
    let (gpu, total, (major, minor)) = GPUS[(mix(n, 1) % GPUS.len() as u64) as usize];
    let count = GPU_COUNTS[(mix(n, 2) % GPU_COUNTS.len() as u64) as usize];
    let devices = (0..count)
        .map(|d| {
            let state = mix(n * 16 + d as u64, u64::from(beat) / 5 + 3);
            // Free VRAM in whole GiB, from none to all of it.
            let free_gib = state % (total / GIB + 1);
            DeviceRecord {
                index: d as u32,
                name: gpu.to_owned(),
                backend: BACKEND_CUDA.to_owned(),
                uuid: String::new(),
                total_vram: total,
                free_vram: free_gib * GIB,
                compute_capability: ComputeCapability::new(major, minor),
                leases: ((state >> 20) % 6) as u32,
            }
        })
        .collect();
    let cert: String = (0..4).map(|k| format!("{:016x}", mix(n, 10 + k))).collect();
    NodeRecord {
        format: RECORD_FORMAT,
        name: name(i),
        address: format!(
            "10.{}.{}.{}:5701",
            (i >> 16) & 0xff,
            (i >> 8) & 0xff,
            i & 0xff
        ),
        cert_sha256: cert,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        devices,
        load: Load {
            connections: (mix(n, u64::from(beat) + 100) % 24) as u32,
            sessions: (mix(n, u64::from(beat) + 200) % 8) as u32,
            runs: (mix(n, u64::from(beat) + 300) % 4) as u32,
        },
        draining: false,
        heartbeat_unix_ms: 0,
    }
}

/// Simulated node `i`'s name: a host name with its rack and site, as operators name machines.
pub fn name(i: usize) -> NodeName {
    let text = format!(
        "gpu-{i:05}.rack-{:03}.site-{}",
        i / 32,
        (b'a' + (i % 4) as u8) as char
    );
    NodeName::new(text).expect("the simulated names follow the key rules")
}

/// The simulated nodes, registered and heartbeating on their own runtime.
pub struct Fleet {
    registrars: Vec<Registrar>,
    /// Bytes of one record of each node, as first written (the JSON the registry stores).
    pub record_bytes: Vec<usize>,
}

impl Fleet {
    /// Registers `nodes` nodes over `connections` NATS connections, their first writes spread
    /// evenly over one heartbeat interval so that the heartbeats that follow are spread too (as
    /// nodes started at different times are).
    pub fn start(
        runtime: &Runtime,
        url: &str,
        nodes: usize,
        connections: usize,
    ) -> Result<Fleet, String> {
        let heartbeat = Heartbeat::default();
        let record_bytes = (0..nodes)
            .map(|i| record(i, 0).to_json().map(|json| json.len()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("a simulated record: {e}"))?;
        let registrars = runtime.block_on(async {
            let mut clusters = Vec::with_capacity(connections);
            for c in 0..connections.max(1) {
                let mut config = NatsConfig::new(url);
                config.client_name = Some(format!("cluster bench fleet {c}"));
                clusters.push(
                    Cluster::connect(&config)
                        .await
                        .map_err(|e| format!("the fleet's connection {c}: {e}"))?,
                );
            }
            // The bucket first, by one registrar, so that the others do not race to create it.
            let starts = (0..nodes).map(|i| {
                let cluster = clusters[i % clusters.len()].clone();
                let delay = heartbeat.interval.mul_f64(i as f64 / nodes as f64);
                async move {
                    tokio::time::sleep(delay).await;
                    let beats = Arc::new(AtomicU32::new(0));
                    let source = move || record(i, beats.fetch_add(1, Ordering::Relaxed));
                    Registrar::start(&cluster, heartbeat, source)
                        .await
                        .map_err(|e| format!("registering simulated node {i}: {e}"))
                }
            });
            let mut registrars = Vec::with_capacity(nodes);
            let mut pending = starts.collect::<Vec<_>>().into_iter();
            if let Some(first) = pending.next() {
                registrars.push(first.await?);
            }
            let rest = join_spawned(pending.map(|f| tokio::spawn(f))).await;
            for started in rest {
                registrars.push(started.map_err(|e| format!("a registration task: {e}"))??);
            }
            Ok::<_, String>(registrars)
        })?;
        Ok(Fleet {
            registrars,
            record_bytes,
        })
    }

    pub fn len(&self) -> usize {
        self.registrars.len()
    }

    /// Registrars whose last write failed now.
    pub fn unregistered(&self) -> usize {
        self.registrars
            .iter()
            .filter(|r| !r.status().registered)
            .count()
    }

    /// Heartbeat writes that reached the server so far, over all nodes.
    pub fn writes(&self) -> u64 {
        self.registrars.iter().map(|r| r.status().writes).sum()
    }

    /// Removes every record (bounded: a stop waits at most a few seconds per node in the
    /// worst case, and these run concurrently).
    pub fn stop(self, runtime: &Runtime) {
        runtime.block_on(async {
            let stops = self
                .registrars
                .into_iter()
                .map(|r| tokio::spawn(tokio::time::timeout(Duration::from_secs(15), r.stop())));
            let _ = join_spawned(stops).await;
        });
    }
}

/// Awaits every handle in order (they run concurrently: each is a spawned task).
async fn join_spawned<T>(
    handles: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<Result<T, tokio::task::JoinError>> {
    let handles: Vec<_> = handles.collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await);
    }
    out
}
