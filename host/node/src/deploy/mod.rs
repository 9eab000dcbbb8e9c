//! Deployed tasklets on a node: tenants push them into the node's store and run them by digest,
//! each run's GPU work on this node's leases under the tenant's grant.
//!
//! # Whose deployment
//!
//! The store is content-addressed: the same manifest and component are one deployment with one
//! digest, whoever pushed them, stored once and compiled once. **Using** a deployment is per
//! tenant: a tenant may see (DEPLOY_HAS) and run (DEPLOY_RUN) the deployments it pushed itself
//! and no others, and for any other digest it is told exactly what it would be told for a digest
//! nobody pushed (`NOT_FOUND`, or `present: false`). Knowing a digest is not enough: a digest is
//! a hash of content, which anyone holding the same tasklet can compute. A tenant that holds the
//! tasklet pushes it too; the node then stores nothing new, compiles nothing, and records the
//! tenant (see [`owners`]).
//!
//! # Grants
//!
//! A run is granted its manifest's request intersected with the caller's ceiling (the node's
//! `[tasklets]`, the tenant's `[tenants.NAME]` section and the authorizer's answer), and its GPU
//! work goes to a `LocalGpu` under that grant, as a remote session's would. Pushing and running
//! both need the tenant's `deploy` right (`Policy::tenant_may_deploy`).
//!
//! Everything here blocks (compiling, running a tasklet, the store's files): it is called from
//! blocking threads, never from the node's async tasks.

mod metered;
pub(crate) mod owners;
mod recording;
mod store_lock;

use crate::caller::Caller;
use crate::reply::Failure;
use crate::tenant_slots::{TenantSlot, TenantSlots};
use metered::MeteredGpu;
use owners::Owners;
use recording::Recording;
use std::path::Path;
use std::sync::Arc;
use store_lock::StoreLock;
pub use store_lock::StoreLockError;
use tasklet_deploy::{DeployConfig, Deployer, ExitStatus, Push, RunOutcome};
use tasklet_runtime::config::units::sizes_told_apart;
use tasklet_runtime::config::{Grant, Manifest};
use tasklet_runtime::gpu::LocalGpu;
use tasklet_runtime::{Host, RunError, RunStop, Teardown};
use tasklet_store::{DeploymentSource, Digest, SourceError, Store, StoreConfig};
use tasklet_tls::Tenant;
use tasklet_wire::ErrorCode;

/// Why a node's deployments could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DeployOpenError {
    #[error(transparent)]
    Store(#[from] tasklet_store::Error),
    #[error(transparent)]
    Deployer(#[from] tasklet_deploy::Error),
    #[error(transparent)]
    Locked(#[from] StoreLockError),
    #[error("cannot open the deployments' owner records in {path}: {source}")]
    Owners {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// Something at one of the store's own names that is not what the store keeps there: a
    /// link (the store never follows one out of its folder), or a file where a folder goes.
    #[error(
        "{} is {found}, where the store keeps a {kept} of its own: {fix}, or give the node another store folder",
        path.display()
    )]
    NotItsOwn {
        path: std::path::PathBuf,
        found: &'static str,
        kept: &'static str,
        fix: &'static str,
    },
}

/// Whether the store folder at `root` (made if missing) is free for this node to take; let go
/// again at once.
pub(crate) fn check_unlocked(root: &Path) -> Result<(), DeployOpenError> {
    take_folder(root).map(drop)
}

/// The store folder at `root`, made if missing, held by this node. Taken before the store is
/// opened: opening tidies it (removes temporary files an hour untouched), which a node refused
/// the folder must not do to the node holding it.
fn take_folder(root: &Path) -> Result<StoreLock, DeployOpenError> {
    Store::make_folder(root)?;
    check_layout(root)?;
    Ok(StoreLock::take(root)?)
}

/// Refuses a store folder whose own names hold something else: a link (to a file elsewhere,
/// which the lock or a record would then be written through) or a file where a folder goes.
/// What is missing is made later.
fn check_layout(root: &Path) -> Result<(), DeployOpenError> {
    let folders = tasklet_store::TOP_FOLDERS
        .into_iter()
        .chain([owners::OWNERS]);
    let names = folders
        .map(|name| (name, "folder"))
        .chain([(store_lock::LOCK_FILE, "file")]);
    for (name, kept) in names {
        let path = root.join(name);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        use std::os::unix::fs::MetadataExt;
        let (found, fix) = if meta.file_type().is_symlink() {
            (
                "a symbolic link",
                "put what it points to in its place (moved, not linked), or remove it if that is nothing the store needs",
            )
        } else if kept == "folder" && !meta.is_dir() {
            ("not a folder", "remove it (the node makes the folder)")
        } else if kept == "file" && !meta.is_file() {
            ("not a file", "remove it (the node makes the file)")
        } else if kept == "file" && meta.nlink() > 1 {
            // Its holder truncates it and writes its pid: a hard link would carry that to the
            // other name's file.
            (
                "a file with other names (hard links)",
                "remove it (the node makes the file)",
            )
        } else {
            continue;
        };
        return Err(DeployOpenError::NotItsOwn {
            path,
            found,
            kept,
            fix,
        });
    }
    Ok(())
}

pub(crate) struct Deployments {
    deployer: Deployer,
    owners: Owners,
    /// Pushes under way, by tenant: counted with the deployments a tenant has against its
    /// `tenant-max-deployments`, under this lock, so that pushes made at once cannot all pass
    /// the check.
    pushing: TenantSlots,
    /// Where a deployment this node lacks is fetched from (the cluster), if anywhere.
    source: Option<Arc<dyn DeploymentSource>>,
    /// Held, for one deployment, while a push or a fetch stores it and records its tenant.
    recording: Recording,
    /// This node's hold on the store's folder, for as long as it runs.
    _lock: StoreLock,
}

/// A push under way: its data goes to `push`; it counts as one of its tenant's deployments
/// until it ends.
pub(crate) struct StartedPush {
    pub push: Push,
    _counted: Option<TenantSlot>,
}

/// What a push did, as its tenant sees it.
pub(crate) struct Pushed {
    pub digest: Digest,
    /// The tenant had pushed this deployment before and the node held it whole: the push
    /// changed nothing.
    pub already_present: bool,
    /// The tenant had pushed it before, but the store had lost a blob of it (removed as damaged,
    /// or deleted) and this push put it back.
    pub restored: bool,
    /// The node compiled the component for this push (no tenant had pushed it before).
    pub compiled: bool,
}

impl Deployments {
    /// The store in `root` (created if need be), its owner records, and a deployer over it.
    pub fn open(
        root: &Path,
        store: StoreConfig,
        config: DeployConfig,
    ) -> Result<Deployments, DeployOpenError> {
        let lock = take_folder(root)?;
        let store = Store::open(root, store)?;
        let owners = Owners::open(root).map_err(|source| DeployOpenError::Owners {
            path: root.join(owners::OWNERS),
            source,
        })?;
        Ok(Deployments {
            deployer: Deployer::new(store, config)?,
            owners,
            pushing: TenantSlots::default(),
            source: None,
            recording: Recording::default(),
            _lock: lock,
        })
    }

    /// Fetches a deployment a tenant asks to run and this node lacks from `source`, when the
    /// tenant pushed it there (see `crate::cluster`).
    pub fn with_source(mut self, source: Arc<dyn DeploymentSource>) -> Deployments {
        self.source = Some(source);
        self
    }

    pub fn root(&self) -> &Path {
        self.deployer.store().root()
    }

    /// Starts a push of `manifest` by `caller`: refused at once if it is not a tasklet
    /// manifest, or if the tenant's deployments and pushes under way are as many as its
    /// `tenant-max-deployments` allows (before any of the push is stored: a push of one it
    /// holds already is refused too, and DEPLOY_HAS tells a client it need not push).
    pub fn start_push(&self, caller: &Caller, manifest: &[u8]) -> Result<StartedPush, Failure> {
        let counted = match caller.totals.deployments {
            Some(max) => Some(self.count_push(caller, max)?),
            None => None,
        };
        let push = self.deployer.start_push(manifest).map_err(failure)?;
        Ok(StartedPush {
            push,
            _counted: counted,
        })
    }

    /// Counts a push of `caller`'s under way if its deployments and pushes under way are fewer
    /// than `max`. The count of its deployments is read under the same lock: a push that ends
    /// records its deployment before it stops counting as under way.
    fn count_push(&self, caller: &Caller, max: u32) -> Result<TenantSlot, Failure> {
        let tenant = caller.tenant.as_str();
        self.pushing.take_checked(tenant, |under_way| {
            let stored = self
                .owners
                .count(&caller.tenant)
                .map_err(|err| self.owners_failure(err))?;
            if stored as u64 + under_way >= u64::from(max) {
                return Err(Failure::new(
                    ErrorCode::QuotaExceeded,
                    format!(
                        "tenant `{tenant}` has {stored} deployment(s) on this node and {under_way} push(es) under way, the \
                         most its policy allows (tenant-max-deployments = {max}); run one it has, or ask the operator to \
                         raise the limit"
                    ),
                ));
            }
            Ok(())
        })
    }

    /// Completes a push (compiling the component unless the node has it) and records `tenant`
    /// as one that pushed it.
    pub fn finish_push(&self, tenant: &Tenant, started: StartedPush) -> Result<Pushed, Failure> {
        // `started` counts as under way until the deployment is recorded, and is dropped after.
        let compiled = started.push.compile().map_err(failure)?;
        let (pushed, new) = {
            let _held = self.recording.hold(compiled.deployment_digest());
            let pushed = compiled.store().map_err(failure)?;
            let new = self
                .owners
                .add(tenant, &pushed.digest)
                .map_err(|err| self.owners_failure(err))?;
            (pushed, new)
        };
        Ok(Pushed {
            digest: pushed.digest,
            already_present: !new && pushed.already_present,
            restored: !new && !pushed.already_present,
            compiled: pushed.compiled_in.is_some(),
        })
    }

    /// Whether `tenant` has deployment `digest` here: it pushed it, and the store still holds it.
    pub fn has(&self, tenant: &Tenant, digest: &Digest) -> Result<bool, Failure> {
        if !self.owned(tenant, digest)? {
            return Ok(false);
        }
        self.deployer
            .store()
            .has_deployment(digest)
            .map_err(|err| failure(err.into()))
    }

    /// Runs deployment `digest` for `caller` on `input`, its GPU work on `host`'s leases;
    /// stopped early once `stop` is (its client went away). Its leases are given back by the
    /// time this returns; its instance is the caller's to tear down, once it has answered.
    pub fn run(
        &self,
        host: &Host,
        caller: &Caller,
        digest: &Digest,
        input: &[u8],
        stop: &RunStop,
    ) -> Result<(RunOutcome, Teardown), Failure> {
        let ceiling = caller.ceiling;
        if self.owned(&caller.tenant, digest)? {
            let manifest = self.deployer.manifest(digest).map_err(failure)?;
            admit(host, &ceiling, &manifest)?;
        } else if !self.fetch(host, &ceiling, &caller.tenant, digest)? {
            return Err(self.not_found(digest));
        }
        let leases = Arc::clone(host.leases());
        let metrics = caller.metrics.clone();
        let (tenant, totals) = (caller.tenant.clone(), caller.totals);
        self.deployer
            .run_leaving_teardown(
                digest,
                input,
                |manifest| ceiling.narrowed(&manifest.limits, &manifest.gpu),
                |grant| {
                    let gpu = LocalGpu::new(grant, leases)
                        .with_tenant(tenant.as_str())
                        .with_tenant_totals(totals);
                    Box::new(MeteredGpu::new(gpu, metrics))
                },
                stop,
            )
            .map_err(failure)
    }

    /// Fetches deployment `digest` from the source for `tenant`; when the run would be
    /// admitted (see [`admit`], checked on the fetched manifest *before* anything is compiled
    /// or stored), stores it (compiling its component) and records the tenant, as a push by
    /// that tenant would. Whether it did; `false` when the source does not have it for
    /// `tenant`.
    ///
    /// A source that cannot be reached now is `CAPACITY_EXCEEDED`: this node cannot run it
    /// now and nothing ran, so a client placing work across the cluster tries the next node
    /// (another may reach NATS, or hold the deployment already). A deployment the source holds
    /// damaged is `INTERNAL`, the same on every node.
    fn fetch(
        &self,
        host: &Host,
        ceiling: &Grant,
        tenant: &Tenant,
        digest: &Digest,
    ) -> Result<bool, Failure> {
        let Some(source) = &self.source else {
            return Ok(false);
        };
        let fetched = source
            .fetch(tenant.as_str(), digest)
            .map_err(|err| match err {
                SourceError::Unavailable(why) => Failure::new(
                    ErrorCode::CapacityExceeded,
                    format!("{why}; this node cannot run it now: try another node or later"),
                ),
                SourceError::Failed(why) => Failure::new(ErrorCode::Internal, why),
            })?;
        let Some(fetched) = fetched else {
            return Ok(false);
        };
        // A manifest that does not parse is refused by the push below, with the line at fault.
        if let Some(manifest) = pushed_manifest(&fetched.manifest) {
            admit(host, ceiling, &manifest)?;
        }
        // Stored and recorded as a push is (see `finish_push`).
        let mut push = self
            .deployer
            .start_push(&fetched.manifest)
            .map_err(failure)?;
        push.write_chunk(&fetched.component).map_err(failure)?;
        let compiled = push.compile().map_err(failure)?;
        let _held = self.recording.hold(compiled.deployment_digest());
        let pushed = compiled.store().map_err(failure)?;
        if pushed.digest != *digest {
            return Err(Failure::new(
                ErrorCode::Internal,
                format!(
                    "deployment {digest} fetched from the cluster was stored as {}",
                    pushed.digest
                ),
            ));
        }
        self.owners
            .add(tenant, digest)
            .map_err(|err| self.owners_failure(err))?;
        tracing::info!(tenant = tenant.as_str(), %digest, "deployment fetched from the cluster");
        Ok(true)
    }

    /// Deployment `digest` is neither here for the tenant nor, for a node in a cluster, in the
    /// cluster's store: where to push it so that this node finds it.
    fn not_found(&self, digest: &Digest) -> Failure {
        match self.source {
            None => failure(tasklet_deploy::Error::NotFound { digest: *digest }),
            Some(_) => Failure::new(
                ErrorCode::NotFound,
                format!(
                    "no deployment {digest} of this tenant on this node nor in its cluster: push it with \
                     `tasklet deploy push TASKLET --nats URL` (or `--node ADDR`), and use the digest that prints"
                ),
            ),
        }
    }

    fn owned(&self, tenant: &Tenant, digest: &Digest) -> Result<bool, Failure> {
        self.owners
            .has(tenant, digest)
            .map_err(|err| self.owners_failure(err))
    }

    /// The tenant is told the node's trouble, naming none of its files; the node's log says
    /// which, and why, at WARN.
    fn owners_failure(&self, err: std::io::Error) -> Failure {
        tracing::warn!(
            "the deployments' owner records in {} failed: {err}",
            self.owners.root().display()
        );
        Failure::new(
            ErrorCode::Internal,
            "the node cannot read or write its deployments' owner records (the node's log says why)",
        )
    }
}

/// A run is admitted only while the node could grant its whole VRAM request (its manifest's
/// `max-vram` within the tenant's ceiling) now: a node that could not is refused
/// `CAPACITY_EXCEEDED` before anything runs (or is fetched into its store), so that a client
/// placing work across a cluster tries another node rather than starting a run bound to fail.
fn admit(host: &Host, ceiling: &Grant, manifest: &Manifest) -> Result<(), Failure> {
    let grant = ceiling.narrowed(&manifest.limits, &manifest.gpu);
    let (wanted, free) = (grant.gpu.max_vram, host.free_memory());
    if grant.gpu.max_leases > 0 && wanted > free {
        let (free, wanted) = sizes_told_apart(free, wanted);
        return Err(Failure::new(
            ErrorCode::CapacityExceeded,
            format!(
                "this node has {free} of device memory free and the tasklet may ask for \
                 {wanted} (its manifest's max-vram, within the tenant's policy): try another node \
                 or later"
            ),
        ));
    }
    Ok(())
}

/// A deployment's manifest as pushed (`tasklet.toml` text), if it parses: admission reads its
/// limits and GPU request.
fn pushed_manifest(bytes: &[u8]) -> Option<Manifest> {
    let text = std::str::from_utf8(bytes).ok()?;
    Manifest::parse(text, Path::new("")).ok()
}

/// DEPLOY_RUN's `exit_status`: 0 when the tasklet returned its output, and for each way it can
/// fail a number of its own (docs/wire.md lists them).
pub(crate) fn exit_code(status: &ExitStatus) -> i32 {
    match status {
        ExitStatus::Ok => 0,
        ExitStatus::Failed(_) => 1,
        ExitStatus::Trapped(_) => 2,
        ExitStatus::WallTime(_) => 3,
        ExitStatus::Instantiate(_) => 4,
        ExitStatus::Stopped => 5,
    }
}

/// What a failed run's output holds: the line a local run of the tasklet prints for the same
/// failure (`tasklet run`'s error), so that a client can print it as it is.
pub(crate) fn exit_message(status: &ExitStatus) -> String {
    let error = match status {
        ExitStatus::Ok => return String::new(),
        ExitStatus::Failed(message) => RunError::Failed(message.clone()),
        ExitStatus::Trapped(message) => RunError::Trapped(message.clone()),
        ExitStatus::WallTime(limit) => RunError::WallTime(*limit),
        ExitStatus::Instantiate(message) => RunError::Instantiate(message.clone()),
        ExitStatus::Stopped => RunError::Stopped,
    };
    error.to_string()
}

/// A deployer's error as the client is told it. A store that failed (a file damaged,
/// unreadable or not what the store wrote) is the node's trouble, not the tenant's: the node's
/// log gets the whole error, at WARN, naming the file, and the client a line that names none of
/// the node's paths.
pub(crate) fn failure(err: tasklet_deploy::Error) -> Failure {
    use tasklet_deploy::Error;
    match &err {
        // What was pushed, not the store, is at fault: said as it is (no path in either).
        Error::Store(store @ tasklet_store::Error::TooLarge { .. }) => {
            return Failure::new(ErrorCode::QuotaExceeded, store.to_string())
        }
        Error::Store(store @ tasklet_store::Error::DigestMismatch { .. }) => {
            return Failure::new(ErrorCode::InvalidArgument, store.to_string())
        }
        Error::Store(store) => {
            tracing::warn!("the deployment store failed: {store}");
            return Failure::new(ErrorCode::Internal, store_failure(store));
        }
        _ => {}
    }
    let code = match &err {
        Error::ManifestTooLarge { .. }
        | Error::InvalidManifest { .. }
        | Error::InvalidComponent { .. }
        | Error::ComponentRead(_)
        | Error::PushClosed => ErrorCode::InvalidArgument,
        Error::ComponentTooLarge { .. } => ErrorCode::QuotaExceeded,
        Error::NotFound { .. } => ErrorCode::NotFound,
        Error::Unloadable { .. } => ErrorCode::LoadFailed,
        _ => ErrorCode::Internal,
    };
    Failure::new(code, err.to_string())
}

/// What a client is told of a store's failure.
fn store_failure(err: &tasklet_store::Error) -> String {
    match err {
        tasklet_store::Error::Corrupt { removed: true, .. } => {
            "the node's stored copy of this deployment was damaged on disk and has been removed: push it again"
                .to_owned()
        }
        tasklet_store::Error::Corrupt { removed: false, .. } => {
            "the node's stored copy of this deployment is damaged on disk and the node could not remove it: \
             its operator must (the node's log names the file)"
                .to_owned()
        }
        // The deployment's record is there, a file it names is not (removed from the disk).
        tasklet_store::Error::NotFound { what, .. } => format!(
            "the node's stored copy of this deployment is missing its {what} (gone from the node's disk): push it again"
        ),
        _ => "the node's store cannot read or write this deployment (the node's log says why): \
              ask the node's operator, or try another node"
            .to_owned(),
    }
}

/// The store's digest of a digest from the wire (both are the 32 bytes of a SHA-256).
pub(crate) fn from_wire(digest: &tasklet_wire::Digest) -> Digest {
    Digest::from_bytes(digest.0)
}

pub(crate) fn to_wire(digest: &Digest) -> tasklet_wire::Digest {
    tasklet_wire::Digest(*digest.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Links at the store's own names (where the lock or a record would be written through to
    /// a file elsewhere) and files where its folders go are refused before anything is
    /// written; what is missing is fine.
    #[test]
    fn a_store_whose_own_names_hold_links_or_files_is_refused() {
        let dir = tempfile::TempDir::new().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("victim"), "victim").unwrap();
        let root = dir.path().join("store");
        std::fs::create_dir(&root).unwrap();
        check_layout(&root).expect("an empty store folder is fine");
        for (name, plant) in [
            ("owners", "link"),
            ("blobs", "link"),
            ("node.lock", "link"),
            ("tmp", "file"),
            ("node.lock", "folder"),
            ("node.lock", "hard link"),
        ] {
            let at = root.join(name);
            match plant {
                "link" => std::os::unix::fs::symlink(elsewhere.join("victim"), &at).unwrap(),
                "hard link" => std::fs::hard_link(elsewhere.join("victim"), &at).unwrap(),
                "file" => std::fs::write(&at, "").unwrap(),
                _ => std::fs::create_dir(&at).unwrap(),
            }
            let err = check_layout(&root).expect_err(name).to_string();
            assert!(
                err.contains(&at.display().to_string()) && err.contains("remove it"),
                "{name} ({plant}): {err}"
            );
            assert!(take_folder(&root).is_err(), "{name} ({plant}) taken");
            match plant {
                "folder" => std::fs::remove_dir(&at).unwrap(),
                _ => std::fs::remove_file(&at).unwrap(),
            }
        }
        assert_eq!(
            std::fs::read_to_string(elsewhere.join("victim")).unwrap(),
            "victim"
        );
        take_folder(&root).expect("the store, mended, is taken");
    }

    /// A store's failure reaches the client as the node's trouble, naming none of its files.
    #[test]
    fn a_store_failure_names_no_path_of_the_node() {
        let path = PathBuf::from("/srv/tasklet/store/blobs/sha256/ab");
        let digest = tasklet_store::Digest::of(b"x");
        for (err, says) in [
            (
                tasklet_store::Error::Corrupt {
                    path: path.clone(),
                    actual: digest,
                    removed: true,
                },
                "has been removed: push it again",
            ),
            (
                tasklet_store::Error::NotAFile { path: path.clone() },
                "the node's log says why",
            ),
            (
                tasklet_store::Error::Io {
                    op: "open",
                    path: path.clone(),
                    source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
                },
                "the node's log says why",
            ),
        ] {
            let failure = failure(tasklet_deploy::Error::Store(err));
            let text = format!("{failure:?}");
            assert!(text.contains("Internal") && text.contains(says), "{text}");
            assert!(!text.contains("/srv/tasklet"), "{text}");
        }
        // A blob past the store's limit is the push's: QUOTA_EXCEEDED naming the key.
        let failure = failure(tasklet_deploy::Error::Store(
            tasklet_store::Error::TooLarge {
                limit: 10,
                setting: "max-blob-size",
            },
        ));
        let text = format!("{failure:?}");
        assert!(
            text.contains("QuotaExceeded") && text.contains("max-blob-size"),
            "{text}"
        );
    }
}
