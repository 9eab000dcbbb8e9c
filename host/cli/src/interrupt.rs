//! Ctrl-C (SIGINT) while connected to nodes: every connection this command opened is closed,
//! telling its node, so that the node frees the leases it held for it at once rather than at its
//! idle timeout; then the command exits 130, as a shell reports a command ended by SIGINT.
//!
//! The command's own thread, whose call the close ends, says so itself (`interrupted`, as JSON
//! too under `--json`) and exits 130; the watcher exits only if it does not within a second,
//! and never in the middle of what it prints (see [`finishing`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, Once, PoisonError};
use std::time::Duration;

use tasklet_remote::{Closer, NodeClient};

/// The most one close waits for its packet to leave.
const CLOSE_WAIT: Duration = Duration::from_millis(200);

static OPEN: Mutex<Vec<Closer>> = Mutex::new(Vec::new());
static WATCH: Once = Once::new();

/// Set once SIGINT came.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Held by whoever ends the process: the command's thread while it prints its last words, the
/// watcher when it exits.
static ENDING: Mutex<()> = Mutex::new(());

/// How long the watcher leaves the command's thread to end by itself after the close.
const OWN_END: Duration = Duration::from_secs(1);

/// Whether the command was interrupted.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Acquire)
}

/// Taken by the command's thread before it prints its result or error and returns: the watcher
/// cannot end the process halfway through those lines.
pub fn finishing() -> MutexGuard<'static, ()> {
    ENDING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Closes `client`'s connection if the command is interrupted.
pub fn close_on_interrupt(client: &NodeClient) {
    OPEN.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(client.closer());
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
                if runtime.block_on(tokio::signal::ctrl_c()).is_err() {
                    return;
                }
                INTERRUPTED.store(true, Ordering::Release);
                let open =
                    std::mem::take(&mut *OPEN.lock().unwrap_or_else(PoisonError::into_inner));
                for closer in open {
                    closer.close("the client was interrupted", CLOSE_WAIT);
                }
                // The command's thread, its call ended by the close, normally exits first.
                std::thread::sleep(OWN_END);
                let _ending = finishing();
                std::process::exit(130);
            });
        // Without the watcher SIGINT keeps its default (the process ends at once), which is
        // only less tidy.
        drop(watcher);
    });
}
