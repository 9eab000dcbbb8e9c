//! The node's metrics: one Prometheus registry, the single source of every figure the node
//! reports, whether scraped from `/metrics` ([`http`]) or read by an embedding program
//! ([`NodeMetrics::snapshot`]).
//!
//! The names the fabric's operators know are kept as they are (`gpu_submit_total`,
//! `gpu_submit_errors`, `gpu_submit_output_bytes`, `gpu_lease_acquired`, `gpu_lease_dropped`,
//! `gpu_vram_allocated_bytes`); the node's own carry a `tasklet_` prefix. Counters a tenant's
//! work moves carry a `tenant` label; tenants are named by certificates the node's CA issued, so
//! their number is the operator's to bound. Histograms are labelled by kind (op, load) only.
//!
//! Each device the node lends has its own series (`gpu_device_*`, labelled `device` by index and
//! `uuid`): leases, memory granted and allocated, memory lent in all, and device time.
//!
//! The host's node-wide module cache is counted too (`tasklet_module_cache_*`): loads that found
//! their compiled code there (hits), loads that compiled (misses), entries evicted, and what it
//! holds now.
//!
//! Updating a counter is an atomic add: each connection resolves its tenant's series once
//! ([`TenantMetrics`]), and its per-op series on first use, so the hot paths never hash labels.

pub(crate) mod http;

use prometheus::core::Collector;
use prometheus::{
    exponential_buckets, CounterVec, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter,
    IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::time::Duration;
use tasklet_runtime::module_cache::ModuleCacheStats;
use tasklet_runtime::{Accounting, Host};
use tasklet_wire::Opcode;

/// Latency buckets, in seconds: 10 µs to about 10 s, each four times the last.
fn latency_buckets() -> Vec<f64> {
    // Valid arguments (a positive start, a factor above 1, a count above 0) never fail.
    exponential_buckets(10e-6, 4.0, 11).unwrap_or_default()
}

/// Why the registry could not be set up: a name or label the registry refuses, which is a bug in
/// this file rather than anything an operator did.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the node's metrics: {0}")]
pub struct MetricsError(#[from] prometheus::Error);

/// The node's registry and every metric in it.
pub struct NodeMetrics {
    registry: Registry,
    connections_open: IntGauge,
    connections: IntCounterVec,
    handshakes_refused: IntCounter,
    tenants_refused: IntCounterVec,
    protocol_errors: IntCounterVec,
    requests: IntCounterVec,
    op_seconds: HistogramVec,
    gpu_submit_total: IntCounterVec,
    gpu_submit_errors: IntCounterVec,
    gpu_submit_output_bytes: IntCounterVec,
    gpu_lease_acquired: IntCounterVec,
    gpu_lease_dropped: IntCounterVec,
    gpu_leases_active: IntGauge,
    gpu_vram_allocated_bytes: IntGauge,
    gpu_vram_leased_bytes: IntGauge,
    gpu_time_seconds: CounterVec,
    device_leases: IntGaugeVec,
    device_vram_leased_bytes: IntGaugeVec,
    device_vram_allocated_bytes: IntGaugeVec,
    device_vram_total_bytes: IntGaugeVec,
    device_time_seconds: CounterVec,
    deploy_pushes: IntCounterVec,
    deploy_runs: IntCounterVec,
    deploy_runs_active: IntGauge,
    deploy_run_seconds: HistogramVec,
    deploy_load_seconds: HistogramVec,
    module_cache_hits: IntCounter,
    module_cache_misses: IntCounter,
    module_cache_evictions: IntCounter,
    module_cache_entries: IntGauge,
    module_cache_bytes: IntGauge,
    request_bytes_held: IntGauge,
    reply_bytes_queued: IntGauge,
}

/// The counters at one moment, each summed over its labels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Connections whose handshake succeeded and whose tenant the node let in.
    pub connections_accepted: u64,
    /// Connections being served now.
    pub connections_open: u64,
    /// Handshakes the TLS layer refused (no, foreign or expired certificate, wrong protocol).
    pub handshakes_refused: u64,
    /// Connections of tenants the policy or the authorizer refused.
    pub tenants_refused: u64,
    /// Connections closed because the client broke the protocol.
    pub protocol_errors: u64,
    /// Requests decoded, every kind.
    pub requests: u64,
    /// Leases granted, to clients and to deployed tasklets' runs.
    pub leases_acquired: u64,
    /// Leases released, or that ended with their connection or run.
    pub leases_dropped: u64,
    pub gpu_submit_total: u64,
    pub gpu_submit_errors: u64,
    pub gpu_submit_output_bytes: u64,
    /// Pushes answered, whatever the answer.
    pub deploy_pushes: u64,
    /// Runs of deployed tasklets that started, however they ended.
    pub deploy_runs: u64,
    /// Runs of deployed tasklets under way now.
    pub deploy_runs_active: u64,
}

/// Registers `metric` and hands it back.
fn registered<M: Collector + Clone + 'static>(
    registry: &Registry,
    metric: M,
) -> Result<M, MetricsError> {
    registry.register(Box::new(metric.clone()))?;
    Ok(metric)
}

impl NodeMetrics {
    pub(crate) fn new() -> Result<NodeMetrics, MetricsError> {
        let r = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            registered(&r, IntCounterVec::new(Opts::new(name, help), labels)?)
        };
        let gauge = |name: &str, help: &str| registered(&r, IntGauge::new(name, help)?);
        let histogram = |name: &str, help: &str, labels: &[&str]| {
            let opts = HistogramOpts::new(name, help).buckets(latency_buckets());
            registered(&r, HistogramVec::new(opts, labels)?)
        };
        let tenant = &["tenant"];
        let device = &["device", "uuid"];
        let device_gauge = |name: &str, help: &str| {
            registered(&r, IntGaugeVec::new(Opts::new(name, help), device)?)
        };
        Ok(NodeMetrics {
            connections_open: gauge("tasklet_connections_open", "Connections being served now.")?,
            connections: counter(
                "tasklet_connections_total",
                "Connections accepted: handshake done and tenant let in.",
                tenant,
            )?,
            handshakes_refused: registered(
                &r,
                IntCounter::new(
                    "tasklet_handshakes_refused_total",
                    "Handshakes refused: no, foreign or expired client certificate, or another protocol.",
                )?,
            )?,
            tenants_refused: counter(
                "tasklet_tenants_refused_total",
                "Connections of certified tenants that the policy or the authorizer refused.",
                tenant,
            )?,
            protocol_errors: counter(
                "tasklet_protocol_errors_total",
                "Connections closed because the client broke the protocol.",
                tenant,
            )?,
            requests: counter(
                "tasklet_requests_total",
                "Requests decoded, by opcode.",
                &["tenant", "op"],
            )?,
            op_seconds: histogram(
                "gpu_op_seconds",
                "Time a connection's GPU thread spent on each request, by opcode (pipelined ops included).",
                &["op"],
            )?,
            gpu_submit_total: counter("gpu_submit_total", "GPU_SUBMIT requests served.", tenant)?,
            gpu_submit_errors: counter(
                "gpu_submit_errors",
                "GPU_SUBMIT requests answered with a failure.",
                tenant,
            )?,
            gpu_submit_output_bytes: counter(
                "gpu_submit_output_bytes",
                "Bytes GPU_SUBMIT read back to clients.",
                tenant,
            )?,
            gpu_lease_acquired: counter(
                "gpu_lease_acquired",
                "Leases granted, to clients and to deployed tasklets' runs.",
                tenant,
            )?,
            gpu_lease_dropped: counter(
                "gpu_lease_dropped",
                "Leases released, or ended with their connection or run; each acquired lease is dropped once.",
                tenant,
            )?,
            gpu_leases_active: gauge("gpu_leases_active", "Leases held now, node-wide.")?,
            gpu_vram_allocated_bytes: gauge(
                "gpu_vram_allocated_bytes",
                "Device memory allocated under leases now, node-wide.",
            )?,
            gpu_vram_leased_bytes: gauge(
                "gpu_vram_leased_bytes",
                "Device memory granted to leases now, node-wide (allocated or not).",
            )?,
            gpu_time_seconds: registered(
                &r,
                CounterVec::new(
                    Opts::new(
                        "gpu_time_seconds_total",
                        "Device time taken by the kernels of each tenant's leases, as their workers measured it.",
                    ),
                    tenant,
                )?,
            )?,
            device_leases: device_gauge("gpu_device_leases", "Leases held now on each device.")?,
            device_vram_leased_bytes: device_gauge(
                "gpu_device_vram_leased_bytes",
                "Device memory granted to leases now, on each device (allocated or not).",
            )?,
            device_vram_allocated_bytes: device_gauge(
                "gpu_device_vram_allocated_bytes",
                "Device memory allocated under leases now, on each device.",
            )?,
            device_vram_total_bytes: device_gauge(
                "gpu_device_vram_total_bytes",
                "Device memory each device lends in all (its memory less the workers' context reserve, capped by the policy).",
            )?,
            device_time_seconds: registered(
                &r,
                CounterVec::new(
                    Opts::new(
                        "gpu_device_time_seconds_total",
                        "Device time taken by the kernels of leases on each device, as their workers measured it.",
                    ),
                    device,
                )?,
            )?,
            deploy_pushes: counter(
                "tasklet_deploy_pushes_total",
                "DEPLOY_PUSH answers, by result: stored, present (the tenant had it) or refused.",
                &["tenant", "result"],
            )?,
            deploy_runs: counter(
                "tasklet_deploy_runs_total",
                "Runs of deployed tasklets, by exit status (ok, failed, trapped, wall-time, instantiate, stopped: its client went away) or refused.",
                &["tenant", "status"],
            )?,
            deploy_runs_active: gauge(
                "tasklet_deploy_runs_active",
                "Runs of deployed tasklets under way now.",
            )?,
            deploy_run_seconds: histogram(
                "tasklet_deploy_run_seconds",
                "Time a deployed tasklet's run took (instantiate, call, tear down), by how it was loaded.",
                &["load"],
            )?,
            deploy_load_seconds: histogram(
                "tasklet_deploy_load_seconds",
                "Time getting a deployed tasklet ready took, by how: warm, cached or compiled.",
                &["load"],
            )?,
            module_cache_hits: registered(
                &r,
                IntCounter::new(
                    "tasklet_module_cache_hits_total",
                    "Module loads whose compiled code the node's module cache held (no JIT, no NVRTC).",
                )?,
            )?,
            module_cache_misses: registered(
                &r,
                IntCounter::new(
                    "tasklet_module_cache_misses_total",
                    "Module loads the node's module cache held nothing for (the worker compiled).",
                )?,
            )?,
            module_cache_evictions: registered(
                &r,
                IntCounter::new(
                    "tasklet_module_cache_evictions_total",
                    "Entries the node's module cache dropped to stay within its bounds.",
                )?,
            )?,
            module_cache_entries: gauge(
                "tasklet_module_cache_entries",
                "Modules the node's module cache holds now.",
            )?,
            module_cache_bytes: gauge(
                "tasklet_module_cache_bytes",
                "Bytes of compiled code (PTX and images) the node's module cache holds now.",
            )?,
            request_bytes_held: gauge(
                "tasklet_request_bytes_held",
                "Bytes of client requests the node holds now, received whole or in part and not yet served (at most 64 MiB a connection).",
            )?,
            reply_bytes_queued: gauge(
                "tasklet_reply_bytes_queued",
                "Bytes of replies queued now for clients to take (at most 16 MiB a connection, besides QUIC's send window).",
            )?,
            registry: r,
        })
    }

    /// Starts the tenant-labelled counters of each tenant the policy names at 0, so that a
    /// scrape shows them (and rates over them start) before the tenant's first event: a
    /// labelled series does not exist until a label value is used. Tenants an authorizer lets
    /// in that the policy does not name appear with their first event.
    pub(crate) fn known_tenants<'a>(&self, tenants: impl IntoIterator<Item = &'a String>) {
        for tenant in tenants {
            let label = [tenant.as_str()];
            for family in [
                &self.connections,
                &self.tenants_refused,
                &self.protocol_errors,
                &self.gpu_submit_total,
                &self.gpu_submit_errors,
                &self.gpu_submit_output_bytes,
                &self.gpu_lease_acquired,
                &self.gpu_lease_dropped,
            ] {
                family.with_label_values(&label);
            }
            self.gpu_time_seconds.with_label_values(&label);
        }
    }

    /// The series of one tenant, resolved once for its connection.
    pub(crate) fn tenant(&self, tenant: &str) -> TenantMetrics {
        let of = |family: &IntCounterVec| family.with_label_values(&[tenant]);
        TenantMetrics {
            protocol_errors: of(&self.protocol_errors),
            gpu_submit_total: of(&self.gpu_submit_total),
            gpu_submit_errors: of(&self.gpu_submit_errors),
            gpu_submit_output_bytes: of(&self.gpu_submit_output_bytes),
            lease_acquired: of(&self.gpu_lease_acquired),
            lease_dropped: of(&self.gpu_lease_dropped),
        }
    }

    pub(crate) fn connection_opened(&self, tenant: &str) {
        self.connections.with_label_values(&[tenant]).inc();
        self.connections_open.inc();
    }

    pub(crate) fn connection_closed(&self) {
        self.connections_open.dec();
    }

    pub(crate) fn handshake_refused(&self) {
        self.handshakes_refused.inc();
    }

    pub(crate) fn tenant_refused(&self, tenant: &str) {
        self.tenants_refused.with_label_values(&[tenant]).inc();
    }

    /// Connections open now, read without gathering the registry.
    pub(crate) fn connections_open(&self) -> u64 {
        u64::try_from(self.connections_open.get()).unwrap_or(0)
    }

    /// Runs of deployed tasklets under way now.
    pub(crate) fn deploy_runs_active(&self) -> u64 {
        u64::try_from(self.deploy_runs_active.get()).unwrap_or(0)
    }

    /// Counts a run as under way until the guard is dropped.
    pub(crate) fn deploy_run_started(&self) -> ActiveRun {
        self.deploy_runs_active.inc();
        ActiveRun(self.deploy_runs_active.clone())
    }

    pub(crate) fn deploy_pushed(&self, tenant: &str, result: &str) {
        self.deploy_pushes
            .with_label_values(&[tenant, result])
            .inc();
    }

    /// A run's end: its status (or `refused`), and, for a run that started, how it was loaded
    /// and how long each part took.
    pub(crate) fn deploy_ran(
        &self,
        tenant: &str,
        status: &str,
        timing: Option<(&str, Duration, Duration)>,
    ) {
        self.deploy_runs.with_label_values(&[tenant, status]).inc();
        if let Some((load, load_time, elapsed)) = timing {
            self.deploy_load_seconds
                .with_label_values(&[load])
                .observe(load_time.as_secs_f64());
            self.deploy_run_seconds
                .with_label_values(&[load])
                .observe(elapsed.as_secs_f64());
        }
    }

    /// The latency series of `op`.
    pub(crate) fn op_seconds(&self, op: Opcode) -> Histogram {
        self.op_seconds.with_label_values(&[op.name()])
    }

    /// The request counter of `tenant` for `op`.
    pub(crate) fn requests(&self, tenant: &str, op: Opcode) -> IntCounter {
        self.requests.with_label_values(&[tenant, op.name()])
    }

    /// Sets the node-wide gauges read from the host's lease books, just before a scrape.
    pub(crate) fn observe_host(&self, accounting: &Accounting) {
        let gauge = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        self.gpu_leases_active.set(gauge(accounting.leases as u64));
        self.gpu_vram_allocated_bytes
            .set(gauge(accounting.used_bytes));
        self.gpu_vram_leased_bytes
            .set(gauge(accounting.granted_bytes));
    }

    /// Sets each device's series from the host's books, just before a scrape (its GPU time
    /// counter brought up to the host's, which only grows).
    pub(crate) fn observe_devices(&self, host: &Host) {
        let gauge = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        let devices = host.devices();
        for u in host.device_usage() {
            let Some(d) = devices.get(u.index as usize) else {
                continue;
            };
            let index = u.index.to_string();
            let labels = [index.as_str(), d.uuid.as_str()];
            self.device_leases
                .with_label_values(&labels)
                .set(gauge(u.leases as u64));
            self.device_vram_leased_bytes
                .with_label_values(&labels)
                .set(gauge(u.granted_bytes));
            self.device_vram_allocated_bytes
                .with_label_values(&labels)
                .set(gauge(u.used_bytes));
            self.device_vram_total_bytes
                .with_label_values(&labels)
                .set(gauge(d.total_memory));
            let counter = self.device_time_seconds.with_label_values(&labels);
            let behind = u.gpu_time.as_secs_f64() - counter.get();
            if behind > 0.0 {
                counter.inc_by(behind);
            }
        }
    }

    /// Brings the module cache's counters up to the host's (which only grow) and sets its
    /// gauges, just before a scrape.
    pub(crate) fn observe_module_cache(&self, stats: &ModuleCacheStats) {
        for (counter, now) in [
            (&self.module_cache_hits, stats.hits),
            (&self.module_cache_misses, stats.misses),
            (&self.module_cache_evictions, stats.evictions),
        ] {
            counter.inc_by(now.saturating_sub(counter.get()));
        }
        let gauge = |value: usize| i64::try_from(value).unwrap_or(i64::MAX);
        self.module_cache_entries.set(gauge(stats.entries));
        self.module_cache_bytes.set(gauge(stats.bytes));
    }

    /// Sets the gauges of client request bytes held and reply bytes queued, just before a
    /// scrape.
    pub(crate) fn observe_client_bytes(&self, requests: u64, replies: u64) {
        let gauge = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        self.request_bytes_held.set(gauge(requests));
        self.reply_bytes_queued.set(gauge(replies));
    }

    /// Brings `gpu_time_seconds_total` up to the host's per-tenant GPU time (which only grows),
    /// just before a scrape.
    pub(crate) fn observe_gpu_time(&self, by_tenant: &[(String, Duration)]) {
        for (tenant, total) in by_tenant {
            let counter = self.gpu_time_seconds.with_label_values(&[tenant.as_str()]);
            let behind = total.as_secs_f64() - counter.get();
            if behind > 0.0 {
                counter.inc_by(behind);
            }
        }
    }

    /// Every metric in Prometheus's text format (version 0.0.4).
    pub(crate) fn encode(&self) -> Result<Vec<u8>, MetricsError> {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
        Ok(out)
    }

    /// The counters now, each summed over its labels.
    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            connections_accepted: total(&self.connections),
            connections_open: self.connections_open(),
            handshakes_refused: self.handshakes_refused.get(),
            tenants_refused: total(&self.tenants_refused),
            protocol_errors: total(&self.protocol_errors),
            requests: total(&self.requests),
            leases_acquired: total(&self.gpu_lease_acquired),
            leases_dropped: total(&self.gpu_lease_dropped),
            gpu_submit_total: total(&self.gpu_submit_total),
            gpu_submit_errors: total(&self.gpu_submit_errors),
            gpu_submit_output_bytes: total(&self.gpu_submit_output_bytes),
            deploy_pushes: total(&self.deploy_pushes),
            deploy_runs: total(&self.deploy_runs),
            deploy_runs_active: self.deploy_runs_active(),
        }
    }
}

/// A counter family's value summed over every label set.
fn total(family: &IntCounterVec) -> u64 {
    family
        .collect()
        .iter()
        .flat_map(|f| f.get_metric())
        .map(|m| m.get_counter().get_value() as u64)
        .sum()
}

/// A run under way, counted in `tasklet_deploy_runs_active` until dropped.
pub(crate) struct ActiveRun(IntGauge);

impl Drop for ActiveRun {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One tenant's series, resolved once per connection (each is a shared atomic).
#[derive(Clone)]
pub(crate) struct TenantMetrics {
    pub protocol_errors: IntCounter,
    pub gpu_submit_total: IntCounter,
    pub gpu_submit_errors: IntCounter,
    pub gpu_submit_output_bytes: IntCounter,
    pub lease_acquired: IntCounter,
    pub lease_dropped: IntCounter,
}

impl TenantMetrics {
    pub fn gpu_submit(&self, ok: bool, output_bytes: u64) {
        self.gpu_submit_total.inc();
        if ok {
            self.gpu_submit_output_bytes.inc_by(output_bytes);
        } else {
            self.gpu_submit_errors.inc();
        }
    }
}

/// Series looked up per opcode once, then kept: a connection's request counters or its GPU
/// thread's latency histograms.
pub(crate) struct PerOp<M> {
    slots: [Option<M>; Opcode::ALL.len()],
}

impl<M: Clone> PerOp<M> {
    pub fn new() -> PerOp<M> {
        PerOp {
            slots: std::array::from_fn(|_| None),
        }
    }

    /// The series of `op`, made by `make` the first time.
    pub fn get(&mut self, op: Opcode, make: impl FnOnce() -> M) -> &M {
        // Every opcode is in ALL; were one not, slot 0 would be shared, not out of bounds.
        let index = Opcode::ALL.iter().position(|o| *o == op).unwrap_or(0);
        self.slots[index].get_or_insert_with(make)
    }
}
