//! Leases (grants of device memory for a time) and the device inventory.

use core::time::Duration;

use crate::error::Result;
use crate::raw::{inventory as raw_inventory, leases as raw};
use crate::session::Session;

/// A device this tasklet may lease, from [`inventory`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Index to pass to [`LeaseBuilder::device`].
    pub index: u32,
    /// The device's name.
    pub name: String,
    /// `"cuda"` or `"emu"`.
    pub backend: String,
    /// Bytes of device memory in all.
    pub total_memory: u64,
    /// Bytes not yet granted to leases.
    pub free_memory: u64,
    /// Compute capability as (major, minor); the emulator reports the PTX target it emulates.
    pub compute_capability: (u32, u32),
    /// The GPU's or MIG instance's UUID (`GPU-…`, `MIG-…`), or `emu-N` for an emulated device:
    /// what [`LeaseBuilder::uuid`] takes. Slots of one GPU share its UUID.
    pub uuid: String,
    /// Leases on the device now.
    pub leases: u32,
}

/// The devices this tasklet may lease.
///
/// ```no_run
/// for d in tasklet_gpu::inventory() {
///     println!("{}: {} ({}), {} of {} bytes free", d.index, d.name, d.backend, d.free_memory, d.total_memory);
/// }
/// ```
pub fn inventory() -> Vec<DeviceInfo> {
    raw_inventory::devices()
        .into_iter()
        .map(|d| DeviceInfo {
            index: d.index,
            name: d.name,
            backend: d.backend,
            total_memory: d.total_memory,
            free_memory: d.free_memory,
            compute_capability: d.compute_capability,
            uuid: d.uuid,
            leases: d.leases,
        })
        .collect()
}

/// The state of a lease, from [`Lease::info`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The device index the lease is on.
    pub device: u32,
    /// Bytes granted: the most the sessions under this lease may hold at once.
    pub granted_bytes: u64,
    /// Bytes held now by buffers under this lease.
    pub used_bytes: u64,
    /// Milliseconds until the lease expires.
    pub remaining_ms: u64,
}

impl LeaseInfo {
    /// Time until the lease expires.
    pub fn remaining(&self) -> Duration {
        Duration::from_millis(self.remaining_ms)
    }

    /// Bytes still free under the lease.
    pub fn free_bytes(&self) -> u64 {
        self.granted_bytes.saturating_sub(self.used_bytes)
    }
}

/// A grant of at least some bytes of device memory, for a time.
///
/// Acquired with [`Lease::builder`]. Dropping the lease releases it and everything under it; the
/// borrow checker makes sure its sessions (and their buffers and modules) are dropped first. When
/// the lease expires instead, every operation under it fails with
/// [`Error::LeaseExpired`](crate::Error::LeaseExpired).
///
/// ```no_run
/// use tasklet_gpu::Lease;
///
/// let lease = Lease::builder().min_vram(64 << 20).secs(30).acquire()?;
/// let info = lease.info()?;
/// assert!(info.granted_bytes >= 64 << 20);
/// lease.renew(60)?; // 60 s from now
/// # Ok::<(), tasklet_gpu::Error>(())
/// ```
#[derive(Debug)]
pub struct Lease {
    raw: raw::Lease,
}

impl Lease {
    /// Starts a lease request with the SDK's defaults: [`LeaseBuilder::DEFAULT_MIN_VRAM`] bytes
    /// (1 MiB) for [`LeaseBuilder::DEFAULT_SECS`] seconds (30), on any device. A tasklet whose
    /// manifest grants at least that much (`max-vram` of 1 MiB or more, `max-lease-secs` of 30 s
    /// or more) acquires it under the default node policy:
    ///
    /// ```no_run
    /// let lease = tasklet_gpu::Lease::builder().acquire()?;
    /// assert!(lease.info()?.granted_bytes >= 1 << 20);
    /// # Ok::<(), tasklet_gpu::Error>(())
    /// ```
    pub fn builder() -> LeaseBuilder {
        LeaseBuilder::default()
    }

    /// Acquires a lease of at least `min_vram` bytes for `secs` seconds on any device; short for
    /// `Lease::builder().min_vram(min_vram).secs(secs).acquire()`.
    pub fn acquire(min_vram: u64, secs: u32) -> Result<Lease> {
        Lease::builder().min_vram(min_vram).secs(secs).acquire()
    }

    /// Extends the lease to `secs` seconds from now, within the tasklet's ceiling.
    pub fn renew(&self, secs: u32) -> Result<()> {
        Ok(self.raw.renew(secs)?)
    }

    /// The lease's device, grant, usage and remaining time.
    pub fn info(&self) -> Result<LeaseInfo> {
        let i = self.raw.info()?;
        Ok(LeaseInfo {
            device: i.device,
            granted_bytes: i.granted_bytes,
            used_bytes: i.used_bytes,
            remaining_ms: i.remaining_ms,
        })
    }

    /// The device time this lease's kernels have used so far, every kernel finished by now
    /// included: read it before a launch and after its [`Session::sync`] for that launch's GPU
    /// time. What the tasklet's `gpu-seconds` quota counts. Fails with
    /// [`Unsupported`](crate::Error::Unsupported) where the host cannot tell.
    ///
    /// ```no_run
    /// let lease = tasklet_gpu::Lease::builder().acquire()?;
    /// let before = lease.gpu_time()?;
    /// // ... launch on a session of `lease`, then sync ...
    /// let launch_time = lease.gpu_time()? - before;
    /// # Ok::<(), tasklet_gpu::Error>(())
    /// ```
    pub fn gpu_time(&self) -> Result<Duration> {
        Ok(Duration::from_nanos(self.raw.gpu_time()?))
    }

    /// Opens a session on this lease; the same as [`Session::open`].
    pub fn session(&self) -> Result<Session<'_>> {
        Session::open(self)
    }

    /// The underlying WIT handle.
    pub fn raw(&self) -> &raw::Lease {
        &self.raw
    }

    /// Wraps a WIT handle.
    pub fn from_raw(raw: raw::Lease) -> Lease {
        Lease { raw }
    }

    /// Unwraps the WIT handle.
    pub fn into_raw(self) -> raw::Lease {
        self.raw
    }
}

/// A lease request, from [`Lease::builder`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a lease builder does nothing until .acquire()"]
pub struct LeaseBuilder {
    min_vram: u64,
    secs: u32,
    device: Option<u32>,
    requires: Requirements,
}

/// What a lease requires of its device besides its index (WIT `device-requirements`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Requirements {
    uuid: Option<String>,
    model: Option<String>,
    min_compute_capability: Option<(u32, u32)>,
    min_total_memory: Option<u64>,
}

impl Default for LeaseBuilder {
    /// The same as [`Lease::builder`].
    fn default() -> Self {
        LeaseBuilder {
            min_vram: Self::DEFAULT_MIN_VRAM,
            secs: Self::DEFAULT_SECS,
            device: None,
            requires: Requirements::default(),
        }
    }
}

// The SDK's one set of lease defaults: `Lease::builder()` and `GpuCall` (which starts from it)
// both take them from here.
impl LeaseBuilder {
    /// The device memory asked for when neither [`LeaseBuilder::min_vram`] nor
    /// [`LeaseBuilder::min_vram_for`] is called: one [`LeaseBuilder::VRAM_GRANULE`] (1 MiB). The
    /// host refuses a lease of 0 bytes, and 1 MiB is within any manifest's `max-vram` that lends
    /// a GPU at all for real work.
    pub const DEFAULT_MIN_VRAM: u64 = Self::VRAM_GRANULE;
    /// The lease time when [`LeaseBuilder::secs`] is not called: 30 s, the default `wall-time`
    /// of a tasklet (`[limits]` in its manifest). A lease ends with the run that acquired it at
    /// the latest, so a longer default would only be refused by manifests with a shorter
    /// `max-lease-secs`; renew ([`Lease::renew`]) or ask for more where a run is longer.
    pub const DEFAULT_SECS: u32 = 30;
    /// The granularity of [`LeaseBuilder::min_vram_for`].
    pub const VRAM_GRANULE: u64 = 1 << 20;

    /// At least this many bytes of device memory.
    pub fn min_vram(mut self, bytes: u64) -> Self {
        self.min_vram = bytes;
        self
    }

    /// At least enough device memory for `count` elements of `T`, rounded up to whole
    /// [`LeaseBuilder::VRAM_GRANULE`]s (1 MiB; at least one) to leave room for the host's
    /// allocation granularity. A size past `u64::MAX` saturates (and the host refuses it).
    ///
    /// ```
    /// use tasklet_gpu::Lease;
    /// assert_eq!(Lease::builder().min_vram_for::<u32>(3 * 1024).request().min_vram, 1 << 20);
    /// assert_eq!(Lease::builder().min_vram_for::<f64>(1 << 20).request().min_vram, 8 << 20);
    /// ```
    pub fn min_vram_for<T>(self, count: usize) -> Self {
        self.min_vram(vram_for::<T>(count))
    }

    /// For this many seconds from now.
    pub fn secs(mut self, secs: u32) -> Self {
        self.secs = secs;
        self
    }

    /// On this device (an index from [`inventory`]); any device when not called.
    pub fn device(mut self, index: u32) -> Self {
        self.device = Some(index);
        self
    }

    /// On the device with this UUID ([`DeviceInfo::uuid`]: `GPU-…`, `MIG-…` or `emu-N`).
    pub fn uuid(mut self, uuid: impl Into<String>) -> Self {
        self.requires.uuid = Some(uuid.into());
        self
    }

    /// On a device whose name contains `model`, case aside (e.g. `"H100"`).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.requires.model = Some(model.into());
        self
    }

    /// On a device of at least this compute capability (e.g. `(9, 0)` for Hopper).
    pub fn min_compute_capability(mut self, major: u32, minor: u32) -> Self {
        self.requires.min_compute_capability = Some((major, minor));
        self
    }

    /// On a device that lends at least `bytes` in all ([`DeviceInfo::total_memory`]).
    pub fn min_total_memory(mut self, bytes: u64) -> Self {
        self.requires.min_total_memory = Some(bytes);
        self
    }

    /// The WIT request this builder describes.
    pub fn request(&self) -> raw::LeaseRequest {
        raw::LeaseRequest {
            min_vram: self.min_vram,
            secs: self.secs,
            device: self.device,
        }
    }

    /// The device requirements this builder describes, if it has any besides the device index
    /// (then [`LeaseBuilder::acquire`] asks with `acquire-with`).
    pub fn requirements(&self) -> Option<raw::DeviceRequirements> {
        if self.requires == Requirements::default() {
            return None;
        }
        let r = self.requires.clone();
        Some(raw::DeviceRequirements {
            uuid: r.uuid,
            model: r.model,
            min_compute_capability: r.min_compute_capability,
            min_total_memory: r.min_total_memory,
        })
    }

    /// Asks the host for the lease. Fails with
    /// [`CapacityExceeded`](crate::Error::CapacityExceeded) when the node cannot serve it (no
    /// device meets the requirements with room for it: the message names what each device
    /// lacked) and [`QuotaExceeded`](crate::Error::QuotaExceeded) when the tasklet's grant does
    /// not allow it.
    ///
    /// ```no_run
    /// let lease = tasklet_gpu::Lease::builder()
    ///     .min_vram(1 << 30)
    ///     .min_compute_capability(9, 0)
    ///     .model("H100")
    ///     .acquire()?;
    /// # Ok::<(), tasklet_gpu::Error>(())
    /// ```
    pub fn acquire(self) -> Result<Lease> {
        let raw = match self.requirements() {
            None => raw::Lease::acquire(self.request())?,
            Some(requires) => raw::Lease::acquire_with(self.request(), &requires)?,
        };
        Ok(Lease { raw })
    }

    /// Asks the host for `count` leases of this request, one on each of `count` distinct
    /// devices that meet the requirements (WIT `lease.acquire-group`): all granted, or none. The
    /// leases come in the order the host ranks their devices (the most memory free first, then
    /// the fewest leases, then the lowest index). Open a [`Session`] on each, one per device,
    /// and move data between them with [`Session::copy_from`] (GPU to GPU where the GPUs allow,
    /// else staged through the host's memory). A group cannot name a [`device`](LeaseBuilder::device): more than one
    /// lease with one set is [`InvalidArgument`](crate::Error::InvalidArgument), as is `count`
    /// 0. Fails with [`CapacityExceeded`](crate::Error::CapacityExceeded) when fewer devices
    /// than `count` meet the requirements with room for a lease (the message says how many
    /// the node lends and how many would do) and
    /// [`QuotaExceeded`](crate::Error::QuotaExceeded) when the tasklet may not hold `count` more
    /// leases (`max-leases`) or that much memory (`max-vram`).
    ///
    /// ```no_run
    /// use tasklet_gpu::Lease;
    /// let leases = Lease::builder().min_vram(64 << 20).acquire_group(2)?;
    /// let (s0, s1) = (leases[0].session()?, leases[1].session()?);
    /// let on_0 = s0.alloc_from(&[1u32, 2, 3])?;
    /// let on_1 = s1.alloc::<u32>(3)?;
    /// s1.copy_from(&on_1, 0, &on_0, ..)?;
    /// # Ok::<(), tasklet_gpu::Error>(())
    /// ```
    pub fn acquire_group(self, count: u32) -> Result<Vec<Lease>> {
        let requires = self.requirements().unwrap_or(raw::DeviceRequirements {
            uuid: None,
            model: None,
            min_compute_capability: None,
            min_total_memory: None,
        });
        let raw = raw::Lease::acquire_group(self.request(), &requires, count)?;
        Ok(raw.into_iter().map(|raw| Lease { raw }).collect())
    }
}

/// Device memory for `count` elements of `T`, as [`LeaseBuilder::min_vram_for`] asks for it.
pub(crate) fn vram_for<T>(count: usize) -> u64 {
    round_vram((count as u64).saturating_mul(core::mem::size_of::<T>() as u64))
}

/// `bytes` rounded up to whole [`LeaseBuilder::VRAM_GRANULE`]s, at least one (saturating).
pub(crate) fn round_vram(bytes: u64) -> u64 {
    let g = LeaseBuilder::VRAM_GRANULE;
    bytes.div_ceil(g).max(1).saturating_mul(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vram_rounds_up_to_whole_mib() {
        assert_eq!(round_vram(0), 1 << 20);
        assert_eq!(round_vram(1), 1 << 20);
        assert_eq!(round_vram(1 << 20), 1 << 20);
        assert_eq!(round_vram((1 << 20) + 1), 2 << 20);
        assert_eq!(round_vram(u64::MAX), u64::MAX);
        assert_eq!(
            Lease::builder()
                .min_vram_for::<u64>(usize::MAX)
                .request()
                .min_vram,
            u64::MAX
        );
    }

    #[test]
    fn builder_fills_the_request() {
        let r = Lease::builder()
            .min_vram(1 << 20)
            .secs(5)
            .device(2)
            .request();
        assert_eq!((r.min_vram, r.secs, r.device), (1 << 20, 5, Some(2)));
    }

    #[test]
    fn requirements_are_asked_for_only_when_set() {
        assert!(Lease::builder().device(1).requirements().is_none());
        let b = Lease::builder()
            .uuid("GPU-1234")
            .model("H100")
            .min_compute_capability(9, 0)
            .min_total_memory(40 << 30);
        let r = b.requirements().expect("requirements");
        assert_eq!(r.uuid.as_deref(), Some("GPU-1234"));
        assert_eq!(r.model.as_deref(), Some("H100"));
        assert_eq!(r.min_compute_capability, Some((9, 0)));
        assert_eq!(r.min_total_memory, Some(40 << 30));
        // The request itself is unchanged by them.
        assert_eq!(b.request().device, None);
    }

    #[test]
    fn the_defaults_ask_for_what_the_host_grants() {
        // The host refuses min-vram 0 and secs 0; the defaults are neither.
        let d = Lease::builder().request();
        assert_eq!((d.min_vram, d.secs, d.device), (1 << 20, 30, None));
        assert_eq!(LeaseBuilder::default(), Lease::builder());
        // `min_vram_for` of nothing still asks for one granule, as the default does.
        assert_eq!(
            Lease::builder().min_vram_for::<u32>(0).request().min_vram,
            LeaseBuilder::DEFAULT_MIN_VRAM
        );
    }

    #[test]
    fn info_helpers() {
        let i = LeaseInfo {
            device: 0,
            granted_bytes: 100,
            used_bytes: 30,
            remaining_ms: 1500,
        };
        assert_eq!(i.free_bytes(), 70);
        assert_eq!(i.remaining(), Duration::from_millis(1500));
    }
}
