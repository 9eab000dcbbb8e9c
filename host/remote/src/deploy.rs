//! Deployed tasklets on a node: [`NodeClient::deploy_push`], [`NodeClient::deploy_has`] and
//! [`NodeClient::deploy_run`], and [`deployment_digest`], which names a deployment before it is
//! pushed.
//!
//! Each push and each run goes on a stream of its own, as docs/wire.md recommends, so that a
//! large component or input never holds up the connection's other requests.

use crate::channel::Channel;
use crate::client::{unexpected, NodeClient};
use crate::error::ClientError;
use sha2::{Digest as _, Sha256};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tasklet_wire::{Digest, Reply, Request};

/// What a push did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeployPushed {
    /// The deployment's digest, as the node computed it: what a run names.
    pub digest: Digest,
    /// This tenant had pushed it before; the node stored nothing new.
    pub already_present: bool,
}

/// How a deployed tasklet's run ended: DEPLOY_RUN's `exit_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeployExit {
    /// The tasklet returned its output.
    Ok,
    /// Its `run` returned an error.
    Failed,
    /// It trapped.
    Trapped,
    /// It ran past its wall-time limit.
    WallTime,
    /// It could not be instantiated.
    Instantiate,
    /// A status this client does not know (a newer node).
    Other(i32),
}

impl DeployExit {
    pub fn from_code(code: i32) -> DeployExit {
        match code {
            0 => DeployExit::Ok,
            1 => DeployExit::Failed,
            2 => DeployExit::Trapped,
            3 => DeployExit::WallTime,
            4 => DeployExit::Instantiate,
            other => DeployExit::Other(other),
        }
    }

    /// The status as the wire carries it.
    pub fn code(self) -> i32 {
        match self {
            DeployExit::Ok => 0,
            DeployExit::Failed => 1,
            DeployExit::Trapped => 2,
            DeployExit::WallTime => 3,
            DeployExit::Instantiate => 4,
            DeployExit::Other(code) => code,
        }
    }

    /// `ok`, `failed`, `trapped`, `wall-time`, `instantiate`, or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeployExit::Ok => "ok",
            DeployExit::Failed => "failed",
            DeployExit::Trapped => "trapped",
            DeployExit::WallTime => "wall-time",
            DeployExit::Instantiate => "instantiate",
            DeployExit::Other(_) => "unknown",
        }
    }
}

impl fmt::Display for DeployExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeployExit::Other(code) => write!(f, "unknown ({code})"),
            known => f.write_str(known.as_str()),
        }
    }
}

/// What one run of a deployed tasklet did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployRun {
    /// The node's id for the run, 128 random bits: its logs name the run by it (32 hex digits,
    /// `{:032x}`).
    pub run_id: u128,
    pub exit: DeployExit,
    /// The run's wall time on the node.
    pub elapsed: Duration,
    /// The tasklet's output when it succeeded; otherwise the error line a local run prints.
    pub output: Vec<u8>,
}

impl DeployRun {
    /// The error line of a run that did not succeed.
    pub fn message(&self) -> Option<String> {
        match self.exit {
            DeployExit::Ok => None,
            _ => Some(String::from_utf8_lossy(&self.output).into_owned()),
        }
    }
}

/// The digest a node gives a deployment of `manifest` (the `tasklet.toml` text, as pushed) and
/// `component`: the SHA-256 of the deployment record naming both (see DEPLOY_PUSH in
/// docs/wire.md). A client computes it to ask DEPLOY_HAS before it uploads anything.
pub fn deployment_digest(manifest: &[u8], component: &[u8]) -> Digest {
    let hex = |bytes: &[u8]| Digest(Sha256::digest(bytes).into()).to_hex();
    let record = format!(
        "tasklet-deployment 1\ncomponent {} {}\nmanifest {} {}\n",
        hex(component),
        component.len(),
        hex(manifest),
        manifest.len()
    );
    Digest(Sha256::digest(record.as_bytes()).into())
}

impl NodeClient {
    /// Pushes a deployment: `manifest` (the `tasklet.toml` text) and `component` (the
    /// WebAssembly component). The node checks and compiles it before storing it.
    pub fn deploy_push(
        &mut self,
        manifest: &[u8],
        component: &[u8],
    ) -> Result<DeployPushed, ClientError> {
        let request = Request::DeployPush {
            manifest: manifest.to_vec(),
            component_len: self.streamable(
                component.len(),
                "the component",
                "; a node takes at most its policy's [deploy] max-component-size besides, 64 MiB unless set",
            )?,
        };
        match self.transfer_call(&request, component)?.0 {
            Reply::DeployPush {
                digest,
                already_present,
            } => Ok(DeployPushed {
                digest,
                already_present,
            }),
            other => Err(unexpected(other)),
        }
    }

    /// Whether this tenant has deployment `digest` on the node (it pushed it).
    pub fn deploy_has(&mut self, digest: &Digest) -> Result<bool, ClientError> {
        match self.request(&Request::DeployHas { digest: *digest })?.0 {
            Reply::DeployHas { present } => Ok(present),
            other => Err(unexpected(other)),
        }
    }

    /// Runs deployment `digest` on the node with `input`. A run that started is `Ok` however
    /// it ended ([`DeployRun::exit`]); `Err` is a run the node refused (no such deployment for
    /// this tenant, no `deploy` right, draining) or a lost connection.
    pub fn deploy_run(&mut self, digest: &Digest, input: &[u8]) -> Result<DeployRun, ClientError> {
        let request = Request::DeployRun {
            digest: *digest,
            input_len: self.streamable(
                input.len(),
                "the input",
                "; a node takes at most 64 MiB of input for a run besides",
            )?,
        };
        let (reply, output) = self.transfer_call(&request, input)?;
        match reply {
            Reply::DeployRun {
                run_id,
                exit_status,
                elapsed_us,
                ..
            } => Ok(DeployRun {
                run_id,
                exit: DeployExit::from_code(exit_status),
                elapsed: Duration::from_micros(elapsed_us),
                output,
            }),
            other => Err(unexpected(other)),
        }
    }

    /// Sends `request` with `data` on a stream of its own and waits for its reply. The stream
    /// is kept until the next transfer or the client's close (see [`NodeClient::keep_transfer`]).
    fn transfer_call(
        &mut self,
        request: &Request,
        data: &[u8],
    ) -> Result<(Reply, Vec<u8>), ClientError> {
        // The last transfer's stream goes now, not when this one is kept: its last frames
        // then leave with this request, long before any close.
        self.keep_transfer(None);
        let connection = self.connection().clone();
        let opened = self.runtime().block_on(connection.open_bi());
        let (send, recv) = opened.map_err(|err| crate::connect::refusal_or_loss(&err))?;
        let mut channel = Channel::new(Arc::clone(self.runtime()), connection, send, recv);
        let replied = channel.call_with(request, data);
        self.keep_transfer(Some(channel));
        replied
    }

    /// `len` as a streamed total, if the node takes that many bytes in one message.
    fn streamable(
        &self,
        len: usize,
        what: &'static str,
        also: &'static str,
    ) -> Result<u64, ClientError> {
        let len = len as u64;
        let limit = self.max_stream_bytes();
        if len > limit {
            return Err(ClientError::TooLarge {
                what,
                len,
                limit,
                also,
            });
        }
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_names_the_manifest_and_the_component_together() {
        let a = deployment_digest(b"name = \"a\"\n", b"\0asm");
        assert_eq!(a, deployment_digest(b"name = \"a\"\n", b"\0asm"));
        assert_ne!(a, deployment_digest(b"name = \"b\"\n", b"\0asm"));
        assert_ne!(a, deployment_digest(b"name = \"a\"\n", b"\0asm\x01"));
        // The record's own digest, not either blob's.
        assert_ne!(a, Digest(Sha256::digest(b"\0asm").into()));
    }

    #[test]
    fn exit_codes_round_trip() {
        for code in -1..6 {
            assert_eq!(DeployExit::from_code(code).code(), code);
        }
        assert_eq!(DeployExit::from_code(3).as_str(), "wall-time");
    }
}
