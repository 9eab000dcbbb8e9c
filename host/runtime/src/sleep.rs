//! A tasklet's sleeps end with its run. What `std::thread::sleep` (and any wait on a clock)
//! waits on is a subscription to `wasi:clocks/monotonic-clock`; a wait on it is a host call,
//! which epoch interruption cannot cut short, so a tasklet asleep would outlive its wall-time
//! limit, and a stop, by as long as it asked to sleep. Here every such subscription is ready by
//! the run's end at the latest, and at a stop: the tasklet wakes, and its next epoch check
//! traps it as it traps one that computes.
//!
//! The interface is linked again over wasmtime-wasi's own (see [`add_to_linker`]); reading the
//! clock is still wasmtime-wasi's.

use std::time::Duration;

use tokio::time::Instant;
use wasmtime::component::{HasData, Linker, Resource};
use wasmtime_wasi::clocks::WasiClocksCtxView;
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::{self, Host};
use wasmtime_wasi::p2::{subscribe, DynPollable, Pollable};

use crate::runner::RunStop;
use crate::state::TaskletState;

/// What bounds a run's sleeps: its end (none without a wall-time limit) and its stop.
pub(crate) struct RunBounds {
    pub ends: Option<std::time::Instant>,
    pub stop: RunStop,
}

/// Links `wasi:clocks/monotonic-clock` with bounded subscriptions over what
/// `wasmtime_wasi::p2::add_to_linker_sync` linked there.
pub(crate) fn add_to_linker(linker: &mut Linker<TaskletState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let linked = monotonic_clock::add_to_linker::<TaskletState, BoundedClocks>(linker, |state| {
        let (clocks, bounds) = state.bounded_clock();
        BoundedClock { clocks, bounds }
    });
    linker.allow_shadowing(false);
    linked
}

struct BoundedClocks;

impl HasData for BoundedClocks {
    type Data<'a> = BoundedClock<'a>;
}

/// The monotonic clock as a run sees it.
struct BoundedClock<'a> {
    clocks: WasiClocksCtxView<'a>,
    bounds: &'a RunBounds,
}

impl Host for BoundedClock<'_> {
    fn now(&mut self) -> wasmtime::Result<monotonic_clock::Instant> {
        Host::now(&mut self.clocks)
    }

    fn resolution(&mut self) -> wasmtime::Result<monotonic_clock::Duration> {
        Host::resolution(&mut self.clocks)
    }

    fn subscribe_instant(
        &mut self,
        when: monotonic_clock::Instant,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let now = Host::now(&mut self.clocks)?;
        self.subscribe_duration(when.saturating_sub(now))
    }

    fn subscribe_duration(
        &mut self,
        duration: monotonic_clock::Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let sleep = Sleep {
            // None: further than can be told, which only the run's end or stop ends.
            until: Instant::now().checked_add(Duration::from_nanos(duration)),
            ends: self.bounds.ends.map(Instant::from_std),
            stop: self.bounds.stop.clone(),
            yielded: duration != 0,
        };
        let sleep = self.clocks.table.push(sleep)?;
        subscribe(self.clocks.table, sleep)
    }
}

/// A subscription: ready at `until`, at the run's end, or once the run is stopped, whichever
/// comes first.
struct Sleep {
    until: Option<Instant>,
    ends: Option<Instant>,
    stop: RunStop,
    /// Whether a zero-length subscription has given the runtime a turn: once, as wasmtime-wasi's
    /// own does, so that a guest polling in a loop with a zero timeout starves nothing.
    yielded: bool,
}

#[wasmtime_wasi::async_trait]
impl Pollable for Sleep {
    async fn ready(&mut self) {
        if !self.yielded {
            self.yielded = true;
            tokio::task::yield_now().await;
            return;
        }
        let due = [self.until, self.ends].into_iter().flatten().min();
        let timer = async {
            match due {
                Some(due) => tokio::time::sleep_until(due).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = timer => {}
            () = self.stop.stopped() => {}
        }
    }
}
