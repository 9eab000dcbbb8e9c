//! Persistent kernels ("actors") and the rings they exchange messages through: a kernel that runs
//! as long as its lease, taking messages from a ring the tasklet fills and putting its answers on
//! a ring the tasklet empties, with no launch per message.
//!
//! A ring lives in memory the host and the device both see; [`Ring::send`] and [`Ring::recv`] are
//! loads and stores there, not requests to the device. The kernel reads the layout the WIT
//! documents (`ring`, `actor-arg.control`): head at byte 0, tail at 64, capacity at 128, message
//! size at 132, slots from 256; its control block's `should_terminate` at byte 4.
//!
//! Load every module the lease needs before its persistent kernel starts: while one runs, a
//! module load on the lease fails `load-failed` (a GPU's driver loads code only once every
//! running kernel has ended). Everything else goes on beside it.
//!
//! ```no_run
//! # let lease = tasklet_gpu::Lease::acquire(1 << 20, 10)?; let session = lease.session()?;
//! # let module = session.load_ptx("")?;
//! use std::time::Duration;
//! use tasklet_gpu::LaunchConfig;
//! let serve = module.kernel("actor_scale")?;
//! let inbox = session.ring_to_device::<[f32; 64]>(256)?;
//! let outbox = session.ring_from_device::<[f32; 64]>(256)?;
//! let actor = session
//!     .launch_persistent(&serve)
//!     .config(LaunchConfig::linear(1, 64))
//!     .ring(&inbox)
//!     .ring(&outbox)
//!     .control()
//!     .arg(2.0f32)
//!     .start()?;
//! inbox.send(&[[1.0; 64]; 8])?;
//! let answers = outbox.recv(8, Duration::from_millis(100))?;
//! let status = actor.stop(Duration::from_millis(500))?;
//! # Ok::<(), tasklet_gpu::Error>(())
//! ```

use core::marker::PhantomData;
use core::time::Duration;

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::launch::{KernelArg, LaunchConfig};
use crate::raw::sessions as raw;
use crate::session::{Kernel, Session};

/// A ring of messages of type `T`, from [`Session::ring_to_device`] or
/// [`Session::ring_from_device`]. Single producer, single consumer: one side sends, the other
/// receives.
#[derive(Debug)]
pub struct Ring<'s, T: Pod> {
    session: &'s Session<'s>,
    raw: raw::Ring,
    _message: PhantomData<T>,
}

/// A persistent kernel, from [`PersistentLaunch::start`]. Dropping it stops it (the host asks,
/// then waits half a second before ending its worker and lease).
#[derive(Debug)]
pub struct Actor<'s> {
    session: &'s Session<'s>,
    raw: raw::Actor,
}

/// An actor's control block as read now (see the WIT `actor-status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorStatus {
    /// The kernel runs.
    pub is_active: bool,
    /// It has been asked to return.
    pub should_terminate: bool,
    /// It has ended.
    pub has_terminated: bool,
    /// What the kernel counted as errors of its handler.
    pub errors_encountered: u32,
    /// What the kernel counted as messages handled.
    pub messages_processed: u64,
    /// Why it ended, when it failed.
    pub failure: Option<String>,
}

impl From<raw::ActorStatus> for ActorStatus {
    fn from(s: raw::ActorStatus) -> ActorStatus {
        ActorStatus {
            is_active: s.is_active,
            should_terminate: s.should_terminate,
            has_terminated: s.has_terminated,
            errors_encountered: s.errors_encountered,
            messages_processed: s.messages_processed,
            failure: s.failure,
        }
    }
}

/// Bytes of one message of type `T`, if a ring can carry it (a multiple of 4, above zero).
fn message_size<T: Pod>() -> Result<u32> {
    let size = core::mem::size_of::<T>();
    if size == 0 || !size.is_multiple_of(4) {
        return Err(Error::invalid_input(format!(
            "a ring's message is a whole number of 4-byte words; {} is {size} bytes",
            core::any::type_name::<T>()
        )));
    }
    u32::try_from(size).map_err(|_| Error::invalid_input("a message larger than 4 GiB"))
}

impl<'l> Session<'l> {
    /// A ring of `capacity` (a power of two) messages of type `T` that the tasklet sends and a
    /// kernel receives. Needs the `persistent` right.
    pub fn ring_to_device<T: Pod>(&self, capacity: u32) -> Result<Ring<'_, T>> {
        self.ring_in(raw::RingDirection::ToDevice, false, capacity)
    }

    /// A ring of `capacity` (a power of two) messages of type `T` that a kernel sends and the
    /// tasklet receives.
    pub fn ring_from_device<T: Pod>(&self, capacity: u32) -> Result<Ring<'_, T>> {
        self.ring_in(raw::RingDirection::FromDevice, false, capacity)
    }

    /// As [`ring_to_device`](Self::ring_to_device), with sequenced slots: each 4 bytes of a
    /// message travel beside the message's number, so a kernel that reads a word whole knows
    /// it has that word's bytes without reading the ring's head first: one bus round trip a
    /// message instead of two on a GPU. The kernel must read the layout (`kernels/actor.cu`'s
    /// `actor_scale_seq` does; the WIT's `new-sequenced-ring` has it byte by byte).
    pub fn ring_to_device_sequenced<T: Pod>(&self, capacity: u32) -> Result<Ring<'_, T>> {
        self.ring_in(raw::RingDirection::ToDevice, true, capacity)
    }

    /// As [`ring_from_device`](Self::ring_from_device), with sequenced slots (see
    /// [`ring_to_device_sequenced`](Self::ring_to_device_sequenced)): the kernel writes each
    /// word of an answer with the answer's number beside it, and stores no head.
    pub fn ring_from_device_sequenced<T: Pod>(&self, capacity: u32) -> Result<Ring<'_, T>> {
        self.ring_in(raw::RingDirection::FromDevice, true, capacity)
    }

    fn ring_in<T: Pod>(
        &self,
        direction: raw::RingDirection,
        sequenced: bool,
        capacity: u32,
    ) -> Result<Ring<'_, T>> {
        let size = message_size::<T>()?;
        let raw = match sequenced {
            false => self.raw().new_ring(direction, size, capacity)?,
            true => self.raw().new_sequenced_ring(direction, size, capacity)?,
        };
        Ok(Ring {
            session: self,
            raw,
            _message: PhantomData,
        })
    }

    /// Starts building a persistent launch of `kernel` (see [`PersistentLaunch`]).
    pub fn launch_persistent<'a>(&'a self, kernel: &'a Kernel<'_>) -> PersistentLaunch<'a> {
        let mut launch = PersistentLaunch {
            session: self,
            kernel,
            config: None,
            args: Vec::new(),
            error: None,
        };
        if !self.is(kernel.module().session()) {
            launch.fail("the kernel's module belongs to another session");
        }
        launch
    }
}

impl<'s, T: Pod> Ring<'s, T> {
    /// Slots: how many messages fit at once.
    pub fn capacity(&self) -> u32 {
        self.raw.capacity()
    }

    /// The underlying WIT handle.
    pub fn raw(&self) -> &raw::Ring {
        &self.raw
    }

    /// Puts as many of `messages` as there is room for, in order; how many went.
    pub fn send(&self, messages: &[T]) -> Result<usize> {
        if messages.is_empty() {
            return Ok(0);
        }
        Ok(self.raw.send(bytemuck::cast_slice(messages))? as usize)
    }

    /// Takes up to `max` waiting messages, waiting up to `timeout` (at most 10 s) for the first;
    /// none when it passes, or at once when no persistent kernel of the session runs.
    pub fn recv(&self, max: u32, timeout: Duration) -> Result<Vec<T>> {
        let micros = u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX);
        let bytes = self.raw.recv(max, micros)?;
        // The host hands back whole messages; a copy puts them at `T`'s alignment.
        let size = core::mem::size_of::<T>();
        let n = bytes.len() / size;
        let mut out = vec![T::zeroed(); n];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&bytes[..n * size]);
        Ok(out)
    }

    /// The messages waiting now, up to `max`, without waiting.
    pub fn try_recv(&self, max: u32) -> Result<Vec<T>> {
        self.recv(max, Duration::ZERO)
    }

    /// The session the ring belongs to.
    pub fn session(&self) -> &'s Session<'s> {
        self.session
    }
}

impl<'s> Actor<'s> {
    /// Its control block now.
    pub fn status(&self) -> Result<ActorStatus> {
        Ok(self.raw.status()?.into())
    }

    /// Asks it to return and waits up to `grace` (at most 10 s) for it; one that has not returned
    /// by then is ended with its worker, and the lease with it.
    pub fn stop(&self, grace: Duration) -> Result<ActorStatus> {
        let ms = u32::try_from(grace.as_millis()).unwrap_or(u32::MAX);
        Ok(self.raw.stop(ms)?.into())
    }

    /// The session the actor belongs to.
    pub fn session(&self) -> &'s Session<'s> {
        self.session
    }
}

/// A persistent launch being built, from [`Session::launch_persistent`]: arguments in the
/// kernel's parameter order, rings ([`PersistentLaunch::ring`]) and the control block
/// ([`PersistentLaunch::control`]) among them; nothing runs until [`PersistentLaunch::start`].
#[must_use = "a persistent launch does nothing until .start()"]
pub struct PersistentLaunch<'a> {
    session: &'a Session<'a>,
    kernel: &'a Kernel<'a>,
    config: Option<LaunchConfig>,
    args: Vec<raw::ActorArg<'a>>,
    error: Option<Error>,
}

impl<'a> PersistentLaunch<'a> {
    fn fail(&mut self, why: &str) {
        let name = self.kernel.name();
        self.error.get_or_insert(Error::InvalidArgument(format!(
            "persistent launch of `{name}`: {why}"
        )));
    }

    /// Sets the grid, block and shared memory (required). The whole grid runs at once.
    pub fn config(mut self, config: LaunchConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// Appends an argument as a launch takes it (see [`KernelArg`]).
    pub fn arg(mut self, arg: impl KernelArg<'a>) -> Self {
        let arg = arg.into_arg();
        if let Some(owner) = arg.owner {
            if !self.session.is(owner) {
                let i = self.args.len();
                self.fail(&format!("argument {i} is a buffer of another session"));
            }
        }
        self.args.push(raw::ActorArg::Arg(arg.raw));
        self
    }

    /// Appends a ring's device address.
    pub fn ring<T: Pod>(mut self, ring: &'a Ring<'_, T>) -> Self {
        if !self.session.is(ring.session) {
            let i = self.args.len();
            self.fail(&format!("argument {i} is a ring of another session"));
        }
        self.args.push(raw::ActorArg::Ring(&ring.raw));
        self
    }

    /// Appends the device address of the actor's control block.
    pub fn control(mut self) -> Self {
        self.args.push(raw::ActorArg::Control);
        self
    }

    /// Starts the kernel.
    pub fn start(self) -> Result<Actor<'a>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let config = self.config.ok_or_else(|| {
            Error::invalid_input(format!(
                "persistent launch of `{}` has no LaunchConfig; call .config(..)",
                self.kernel.name()
            ))
        })?;
        let raw =
            self.session
                .raw()
                .launch_persistent(self.kernel.raw(), config.to_raw(), &self.args)?;
        Ok(Actor {
            session: self.session,
            raw,
        })
    }
}
