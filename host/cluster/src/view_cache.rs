//! The registry's view kept on disk between the commands of one user, so that a command placing
//! work need not connect to NATS and list the registry each time it runs.
//!
//! # What it is, and what it is not
//!
//! A [`ViewCache`] is one file per NATS server and identity (the URL with its user and
//! password, the credentials file, the TLS files: the SHA-256 of them names the file, so
//! nothing secret is written) holding what placement reads of each live node: name, address,
//! certificate fingerprint, devices (backend, total and free VRAM, compute capability, leases),
//! load, draining, and the record's age when it was listed. It is read only while younger than
//! its maximum age (by default one heartbeat interval, 2 s), and each record's age goes on
//! growing while it sits there: a record older than `stale_after` is left out as a live
//! listing would.
//!
//! The view is a hint of where to connect, as the registry itself is: nothing in it authorizes
//! anything. A client connecting to a node from it still verifies the node's certificate
//! against the fabric CA and its fingerprint against the one listed, and the node still admits
//! or refuses. A stale entry costs a refused or unreachable candidate and a move to the next
//! one; the caller drops the file when that happens ([`ViewCache::invalidate`]) and reads the
//! registry when every candidate failed.
//!
//! The file is written owner-only (mode 0600, in a directory made 0700) and replaced whole
//! (written beside it, then renamed), so a reader sees a whole view or none. A file not owned by
//! this user, readable by others, malformed, or from the future (the clock went back) is a miss.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::config::NatsConfig;
use crate::heartbeat::Heartbeat;
use crate::record::{ComputeCapability, DeviceRecord, Load, NodeName, NodeRecord, RECORD_FORMAT};
use crate::registry::LiveNode;

/// The format of the file this module writes and reads; any other is a miss.
const CACHE_FORMAT: u32 = 1;

/// The largest file read: far above a view of 10,000 nodes of 8 GPUs each (about 4 MB), small
/// enough that a damaged file cannot make a command read without end.
const MAX_FILE_BYTES: u64 = 64 << 20;

/// How long a view is used after it was listed, by default: one heartbeat interval, the time
/// in which every node writes its record once more.
pub const DEFAULT_VIEW_MAX_AGE: Duration = Duration::from_secs(2);

/// A view of the registry kept in a file between commands (see the module's documentation).
#[derive(Debug, Clone)]
pub struct ViewCache {
    path: PathBuf,
    max_age: Duration,
    stale_after: Duration,
}

/// A view read back.
#[derive(Debug, Clone)]
pub struct CachedView {
    /// The nodes, their ages grown by the time since the listing. Their records carry what
    /// placement reads; device names and the node's version are empty.
    pub nodes: Vec<LiveNode>,
    /// Time since the view was listed.
    pub age: Duration,
}

impl ViewCache {
    /// The view of the registry on `config`'s NATS, as `config`'s identity sees it, kept in
    /// `dir` (a per-user cache directory, such as `~/.cache/tasklet-registry`).
    pub fn new(dir: &Path, config: &NatsConfig) -> ViewCache {
        ViewCache {
            path: dir.join(format!("{}.json", key(config))),
            max_age: DEFAULT_VIEW_MAX_AGE,
            stale_after: Heartbeat::default().stale_after,
        }
    }

    /// Uses a view for at most `max_age` after its listing.
    pub fn with_max_age(mut self, max_age: Duration) -> ViewCache {
        self.max_age = max_age;
        self
    }

    /// Leaves out records older than `stale_after` (use the registrars' `stale_after`).
    pub fn with_stale_after(mut self, stale_after: Duration) -> ViewCache {
        self.stale_after = stale_after;
        self
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The view, if the file holds one younger than the maximum age; `None` otherwise (no
    /// file, too old, not this user's or readable by others, malformed).
    pub fn load(&self) -> Option<CachedView> {
        let bytes = read_private(&self.path)?;
        let file: CacheFile = serde_json::from_slice(&bytes).ok()?;
        if file.format != CACHE_FORMAT {
            return None;
        }
        let now = unix_ms();
        // A view written "later than now" means the clock went back: its ages mean nothing.
        let age = Duration::from_millis(now.checked_sub(file.listed_unix_ms)?);
        if age > self.max_age {
            return None;
        }
        let nodes = file
            .nodes
            .into_iter()
            .filter_map(|node| node.live(age))
            .filter(|node| node.age <= self.stale_after)
            .collect();
        Some(CachedView { nodes, age })
    }

    /// Keeps `nodes`, listed just now, for the next commands. An error when the directory or
    /// the file cannot be written; the caller goes on without the cache.
    pub fn store(&self, nodes: &[LiveNode]) -> std::io::Result<()> {
        let file = CacheFile {
            format: CACHE_FORMAT,
            listed_unix_ms: unix_ms(),
            nodes: nodes.iter().map(CachedNode::from).collect(),
        };
        let json = serde_json::to_vec(&file).map_err(std::io::Error::other)?;
        let dir = self
            .path
            .parent()
            .ok_or_else(|| std::io::Error::other("the cache file has no directory"))?;
        make_private_dir(dir)?;
        let temp = dir.join(format!(
            ".{}.{}.tmp",
            self.path
                .file_name()
                .map_or("view".into(), |n| n.to_string_lossy()),
            std::process::id()
        ));
        let written = write_private(&temp, &json).and_then(|()| std::fs::rename(&temp, &self.path));
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        prune(dir, &self.path);
        written
    }

    /// Drops the view: the next command reads the registry.
    pub fn invalidate(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The file's name for `config`: the SHA-256 of everything that decides what the connection
/// sees (the server, the user, the credentials), so that another identity never reads this one's
/// view and the secrets themselves are never written.
fn key(config: &NatsConfig) -> String {
    let mut hash = Sha256::new();
    hash.update(b"tasklet registry view\0");
    hash.update(config.url.as_bytes());
    let path = |p: Option<&PathBuf>| {
        p.map_or_else(Vec::new, |p| p.as_os_str().as_encoded_bytes().to_vec())
    };
    for part in [
        path(config.credentials.as_ref()),
        path(config.ca.as_ref()),
        path(config.client_certificate.as_ref().map(|(cert, _)| cert)),
        path(config.client_certificate.as_ref().map(|(_, key)| key)),
    ] {
        hash.update(b"\0");
        hash.update(&part);
    }
    hash.update([u8::from(config.require_tls)]);
    let digest = hash.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Serialize, Deserialize)]
struct CacheFile {
    format: u32,
    /// When the view was listed (this machine's clock).
    listed_unix_ms: u64,
    nodes: Vec<CachedNode>,
}

/// What placement reads of a node, compactly: a view of 1,000 nodes is read in about a
/// millisecond.
#[derive(Serialize, Deserialize)]
struct CachedNode {
    name: NodeName,
    address: String,
    cert_sha256: String,
    /// The record's age when listed.
    age_ms: u64,
    revision: u64,
    draining: bool,
    /// Connections, sessions, runs.
    load: (u32, u32, u32),
    /// Index, backend, total VRAM, free VRAM, compute capability, leases.
    devices: Vec<(u32, String, u64, u64, ComputeCapability, u32)>,
}

impl From<&LiveNode> for CachedNode {
    fn from(node: &LiveNode) -> CachedNode {
        let r = &node.record;
        CachedNode {
            name: r.name.clone(),
            address: r.address.clone(),
            cert_sha256: r.cert_sha256.clone(),
            age_ms: u64::try_from(node.age.as_millis()).unwrap_or(u64::MAX),
            revision: node.revision,
            draining: r.draining,
            load: (r.load.connections, r.load.sessions, r.load.runs),
            devices: r
                .devices
                .iter()
                .map(|d| {
                    (
                        d.index,
                        d.backend.clone(),
                        d.total_vram,
                        d.free_vram,
                        d.compute_capability,
                        d.leases,
                    )
                })
                .collect(),
        }
    }
}

impl CachedNode {
    /// The node as a live one, `since` after its listing.
    fn live(self, since: Duration) -> Option<LiveNode> {
        if self.devices.len() > crate::record::MAX_DEVICES {
            return None;
        }
        Some(LiveNode {
            age: Duration::from_millis(self.age_ms).saturating_add(since),
            revision: self.revision,
            record: NodeRecord {
                format: RECORD_FORMAT,
                name: self.name,
                address: self.address,
                cert_sha256: self.cert_sha256,
                version: String::new(),
                devices: self
                    .devices
                    .into_iter()
                    .map(
                        |(index, backend, total_vram, free_vram, compute_capability, leases)| {
                            DeviceRecord {
                                index,
                                name: String::new(),
                                backend,
                                uuid: String::new(),
                                total_vram,
                                free_vram,
                                compute_capability,
                                leases,
                            }
                        },
                    )
                    .collect(),
                load: Load {
                    connections: self.load.0,
                    sessions: self.load.1,
                    runs: self.load.2,
                },
                draining: self.draining,
                heartbeat_unix_ms: 0,
            },
        })
    }
}

/// How long another view's file stays in the directory unused: the views of servers and
/// identities no longer used do not pile up.
const UNUSED_FILE_AGE: Duration = Duration::from_secs(3600);

/// Removes the views in `dir` (but `keep`) not written for [`UNUSED_FILE_AGE`]; bounded by the
/// directory's first 1,000 entries.
fn prune(dir: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten().take(1000) {
        let path = entry.path();
        let unused = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|modified| modified.elapsed().ok())
            .is_some_and(|age| age > UNUSED_FILE_AGE);
        if unused && path != keep && path.extension().is_some_and(|e| e == "json") {
            let _ = std::fs::remove_file(&path);
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The file's bytes, if it is a regular file of this user's that no one else may read or
/// write, within the size limit.
#[cfg(unix)]
fn read_private(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::MetadataExt as _;
    let file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    if !meta.is_file() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

#[cfg(not(unix))]
fn read_private(_path: &Path) -> Option<Vec<u8>> {
    // No owner-only file modes to check: no cache.
    None
}

#[cfg(unix)]
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn make_private_dir(_dir: &Path) -> std::io::Result<()> {
    Err(std::io::Error::other(
        "the registry view cache needs owner-only file modes",
    ))
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)
}

#[cfg(not(unix))]
fn write_private(_path: &Path, _bytes: &[u8]) -> std::io::Result<()> {
    Err(std::io::Error::other(
        "the registry view cache needs owner-only file modes",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::BACKEND_EMU;

    fn node(name: &str, age: Duration) -> LiveNode {
        LiveNode {
            record: NodeRecord {
                format: RECORD_FORMAT,
                name: NodeName::new(name).unwrap(),
                address: "127.0.0.1:5701".into(),
                cert_sha256: "ab".repeat(32),
                version: "0.1.0".into(),
                devices: vec![DeviceRecord {
                    index: 1,
                    name: "emulator".into(),
                    backend: BACKEND_EMU.into(),
                    uuid: String::new(),
                    total_vram: 1 << 30,
                    free_vram: 1 << 29,
                    compute_capability: ComputeCapability::new(9, 0),
                    leases: 2,
                }],
                load: Load {
                    connections: 3,
                    sessions: 1,
                    runs: 1,
                },
                draining: true,
                heartbeat_unix_ms: 1,
            },
            age,
            revision: 42,
        }
    }

    fn cache(dir: &Path) -> ViewCache {
        ViewCache::new(dir, &NatsConfig::new("nats://127.0.0.1:4222"))
    }

    #[test]
    fn a_stored_view_reads_back_with_what_placement_needs() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(&dir.path().join("registry"));
        assert!(cache.load().is_none(), "no file: a miss");
        let listed = node("a", Duration::from_millis(700));
        cache.store(std::slice::from_ref(&listed)).unwrap();
        let view = cache.load().expect("a fresh view");
        assert_eq!(view.nodes.len(), 1);
        let got = &view.nodes[0];
        assert!(got.age >= listed.age && got.age <= listed.age + Duration::from_secs(1));
        assert_eq!(got.revision, 42);
        let (r, l) = (&got.record, &listed.record);
        assert_eq!(
            (&r.name, &r.address, &r.cert_sha256, r.draining, r.load),
            (&l.name, &l.address, &l.cert_sha256, l.draining, l.load)
        );
        let (d, e) = (&r.devices[0], &l.devices[0]);
        assert_eq!(
            (
                d.index,
                &d.backend,
                d.total_vram,
                d.free_vram,
                d.compute_capability,
                d.leases
            ),
            (
                e.index,
                &e.backend,
                e.total_vram,
                e.free_vram,
                e.compute_capability,
                e.leases
            )
        );
    }

    #[cfg(unix)]
    #[test]
    fn the_file_is_owner_only_and_a_readable_one_is_a_miss() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(&dir.path().join("registry"));
        cache.store(&[node("a", Duration::ZERO)]).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(cache.path()), 0o600);
        assert_eq!(mode(cache.path().parent().unwrap()), 0o700);
        std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(cache.load().is_none(), "readable by others: not used");
    }

    #[test]
    fn too_old_views_and_stale_records_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path()).with_max_age(Duration::from_millis(300));
        cache
            .store(&[
                node("fresh", Duration::from_secs(1)),
                node("old", Duration::from_secs(11)),
            ])
            .unwrap();
        let view = cache.load().unwrap();
        let names: Vec<&str> = view.nodes.iter().map(|n| n.record.name.as_str()).collect();
        assert_eq!(names, ["fresh"], "a record past stale_after is not live");
        std::thread::sleep(Duration::from_millis(400));
        assert!(cache.load().is_none(), "past its max age: a miss");
        cache.store(&[node("fresh", Duration::ZERO)]).unwrap();
        assert!(cache.load().is_some());
        cache.invalidate();
        assert!(cache.load().is_none(), "invalidated");
    }

    #[test]
    fn damaged_files_are_misses() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path());
        cache.store(&[node("a", Duration::ZERO)]).unwrap();
        for damage in [
            &b"{not json"[..],
            br#"{"format":2,"listed_unix_ms":0,"nodes":[]}"#,
            br#"{"format":1,"listed_unix_ms":18446744073709551615,"nodes":[]}"#,
            br#"{"format":1,"listed_unix_ms":1,"nodes":[{"name":"../x"}]}"#,
        ] {
            let temp = dir.path().join("damaged");
            write_private(&temp, damage).unwrap();
            std::fs::rename(&temp, cache.path()).unwrap();
            assert!(
                cache.load().is_none(),
                "{}",
                String::from_utf8_lossy(damage)
            );
        }
    }

    #[test]
    fn each_server_and_identity_has_its_own_file_and_no_secret_is_in_its_name() {
        let dir = Path::new("/cache");
        let plain = ViewCache::new(dir, &NatsConfig::new("nats://h:4222"));
        let user = ViewCache::new(dir, &NatsConfig::new("nats://alice:s3cret@h:4222"));
        let other = ViewCache::new(dir, &NatsConfig::new("nats://bob:s3cret@h:4222"));
        let mut creds = NatsConfig::new("nats://h:4222");
        creds.credentials = Some("/keys/team.creds".into());
        let creds = ViewCache::new(dir, &creds);
        let mut named = NatsConfig::new("nats://h:4222");
        named.client_name = Some("tasklet deploy run".into());
        let named = ViewCache::new(dir, &named);
        let paths = [plain.path(), user.path(), other.path(), creds.path()];
        for (i, a) in paths.iter().enumerate() {
            for b in &paths[i + 1..] {
                assert_ne!(a, b);
            }
            assert!(!a.to_string_lossy().contains("s3cret"));
        }
        assert_eq!(
            plain.path(),
            named.path(),
            "the client's name is no identity"
        );
    }
}
