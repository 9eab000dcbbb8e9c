//! A signal to stop (SIGINT from Ctrl-C, SIGTERM from `kill`, `timeout` or a service manager,
//! SIGHUP from a closed terminal) while connected to nodes: every connection this command opened
//! is closed, telling its node, so that the node frees the leases it held for it at once rather
//! than at its idle timeout; then the command exits 128 + the signal's number, as a shell reports
//! a command the signal ended.
//!
//! The command's own thread, whose call the close ends, says so itself (`interrupted`, as JSON
//! too under `--json`) and exits; the watcher exits only if it does not within a second, and
//! never in the middle of what it prints (see [`finishing`]).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, Once, PoisonError};
use std::time::Duration;

use tasklet_remote::{Closer, NodeClient};

/// A signal that stopped the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Interrupt,
    Terminate,
    Hangup,
}

impl Stop {
    fn number(self) -> u8 {
        match self {
            Stop::Interrupt => 2,
            Stop::Terminate => 15,
            Stop::Hangup => 1,
        }
    }

    fn from_number(n: u8) -> Option<Stop> {
        [Stop::Interrupt, Stop::Terminate, Stop::Hangup]
            .into_iter()
            .find(|s| s.number() == n)
    }

    /// The exit status a shell shows for a command this signal ended.
    pub fn exit_status(self) -> u8 {
        128 + self.number()
    }

    /// How the signal is named to the user.
    pub fn name(self) -> &'static str {
        match self {
            Stop::Interrupt => "interrupted (Ctrl-C)",
            Stop::Terminate => "terminated (SIGTERM)",
            Stop::Hangup => "hung up (SIGHUP)",
        }
    }
}

/// The most one close waits for its packet to leave.
const CLOSE_WAIT: Duration = Duration::from_millis(200);

static OPEN: Mutex<Vec<Closer>> = Mutex::new(Vec::new());
static WATCH: Once = Once::new();

/// The number of the signal that came ([`Stop::number`]); 0 before one did.
static STOPPED_BY: AtomicU8 = AtomicU8::new(0);

/// Held by whoever ends the process: the command's thread while it prints its last words, the
/// watcher when it exits.
static ENDING: Mutex<()> = Mutex::new(());

/// How long the watcher leaves the command's thread to end by itself after the close.
const OWN_END: Duration = Duration::from_secs(1);

/// The signal that stopped the command, if one did.
pub fn stopped_by() -> Option<Stop> {
    Stop::from_number(STOPPED_BY.load(Ordering::Acquire))
}

/// Whether a signal stopped the command.
pub fn interrupted() -> bool {
    stopped_by().is_some()
}

/// The first of SIGINT, SIGTERM and SIGHUP to come, of those this process does not ignore
/// (`nohup` ignores SIGHUP, a script's background job SIGINT: they stay ignored).
async fn stop_signal() -> Option<Stop> {
    use tokio::signal::unix::{signal, Signal, SignalKind};
    let watch = |kind: SignalKind| match ignored(kind.as_raw_value()) {
        true => None,
        false => signal(kind).ok(),
    };
    async fn next(signal: &mut Option<Signal>) {
        match signal {
            Some(signal) => {
                signal.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    let mut interrupt = watch(SignalKind::interrupt());
    let mut terminate = watch(SignalKind::terminate());
    let mut hangup = watch(SignalKind::hangup());
    if interrupt.is_none() && terminate.is_none() && hangup.is_none() {
        return None;
    }
    tokio::select! {
        () = next(&mut interrupt) => Some(Stop::Interrupt),
        () = next(&mut terminate) => Some(Stop::Terminate),
        () = next(&mut hangup) => Some(Stop::Hangup),
    }
}

/// Whether `signal` is ignored in this process (inherited SIG_IGN).
fn ignored(signal: libc::c_int) -> bool {
    // SAFETY: with a null new action, sigaction(2) only writes the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Taken by the command's thread before it prints its result or error and returns: the watcher
/// cannot end the process halfway through those lines.
pub fn finishing() -> MutexGuard<'static, ()> {
    ENDING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Closes `client`'s connection if a signal stops the command (at once if one already did:
/// nothing is asked of a node after the stop).
pub fn close_on_interrupt(client: &NodeClient) {
    {
        let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        // Read under the lock the watcher empties the list under: a client registered after
        // the watcher took the list sees the signal here.
        if interrupted() {
            client
                .closer()
                .close("the client was interrupted", CLOSE_WAIT);
            return;
        }
        open.push(client.closer());
    }
    WATCH.call_once(|| {
        let watcher = std::thread::Builder::new()
            .name("tasklet-interrupt".into())
            .spawn(|| {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                let Some(stop) = runtime.block_on(stop_signal()) else {
                    return;
                };
                let open = {
                    let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
                    STOPPED_BY.store(stop.number(), Ordering::Release);
                    std::mem::take(&mut *open)
                };
                for closer in open {
                    closer.close("the client was interrupted", CLOSE_WAIT);
                }
                // The command's thread, its call ended by the close, normally exits first.
                std::thread::sleep(OWN_END);
                let _ending = finishing();
                std::process::exit(i32::from(stop.exit_status()));
            });
        // Without the watcher the signals keep their defaults (the process ends at once),
        // which is only less tidy.
        drop(watcher);
    });
}
