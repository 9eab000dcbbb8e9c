//! The cluster against a real nats-server: each test starts its own on a free loopback port
//! (JetStream on, store in a temp folder). Without one (scripts/install-nats.sh installs it) a
//! test prints `skipped: nats-server not found` and returns.

mod support;

mod blobs;
mod deployments;
mod errors;
mod reconnect;
mod registry;
mod tls;
