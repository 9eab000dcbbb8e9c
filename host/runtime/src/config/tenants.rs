//! `[tenants.NAME]`: what one tenant of a node may do, as caps narrowing `[tasklets]`.
//!
//! A node serves tenants, each named by its client certificate. The policy's `[tasklets]` caps
//! every grant; a `[tenants.NAME]` section, with the same keys, narrows them for tenant `NAME`
//! (a key it leaves out keeps `[tasklets]`'s value). Which tenants get in at all follows from
//! whether the policy lists any (see [`Policy::tenant_ceiling`]): a policy with no `[tenants.*]`
//! section lets in every tenant the node's CA certified; one that lists tenants lets in those
//! only, so that adding the first section never widens what anyone gets.
//!
//! `gpu-seconds`, in either section, caps the device time one tasklet's kernels may take (a
//! tenant's section can only lower it).
//!
//! `tenant-max-leases`, `tenant-max-vram`, `tenant-max-runs` and `tenant-max-deployments`, in
//! either section, cap what a tenant holds at once *all together*: every lease of all its
//! connections and deployed runs, its deployed runs under way, and the deployments it pushed to
//! the node's store ([`TenantTotals`]). The other caps bound each tasklet (each
//! connection, each run) alone, so without these a tenant's many connections add up; the node
//! also caps each tenant's connections. In `[tasklets]` they apply to each tenant; a tenant's
//! section can only lower them.
//!
//! `deploy = true|false`, in either section, says whether tenants may push and run deployed
//! tasklets on the node ([`Policy::tenant_may_deploy`]); like the caps, a tenant's section can
//! only take the right away.

use super::manifest::{GpuRequest, Limits};
use super::policy::{Grant, Policy};
use super::rights::Rights;
use std::time::Duration;

/// Caps for one tenant. Each is a ceiling under the `[tasklets]` one; `None` keeps that one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantCaps {
    pub max_memory: Option<u64>,
    pub max_wall_time: Option<Duration>,
    pub max_vram: Option<u64>,
    pub max_leases: Option<u32>,
    pub max_lease_time: Option<Duration>,
    /// `max-persistent`: the most persistent kernels one of the tenant's tasklets may run at once.
    pub max_persistent: Option<u32>,
    pub rights: Option<Rights>,
    /// `deploy = true|false`: whether the tenant may push and run deployed tasklets; `None`
    /// keeps `[tasklets]`'s `deploy`. `true` cannot give back what `[tasklets]` took away.
    pub deploy: Option<bool>,
    /// `gpu-seconds`: the most device time one of the tenant's tasklets may take.
    pub gpu_time: Option<Duration>,
    /// `tenant-max-*`: the tenant's totals, under `[tasklets]`'s.
    pub totals: TenantTotals,
}

/// What one tenant may hold at once on a node, all its holders together (its connections and
/// its deployed runs); `None`: no cap beyond what each holder is granted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantTotals {
    /// `tenant-max-leases`: leases held at once.
    pub leases: Option<u32>,
    /// `tenant-max-vram`: device memory granted to its leases at once, in bytes.
    pub vram: Option<u64>,
    /// `tenant-max-runs`: deployed runs under way at once.
    pub runs: Option<u32>,
    /// `tenant-max-deployments`: deployments it has pushed to the node's store.
    pub deployments: Option<u32>,
}

impl TenantTotals {
    /// Each total the smaller of the two (`None` in one keeps the other's).
    pub fn narrowed(self, other: TenantTotals) -> TenantTotals {
        TenantTotals {
            leases: at_most(self.leases, other.leases),
            vram: at_most(self.vram, other.vram),
            runs: at_most(self.runs, other.runs),
            deployments: at_most(self.deployments, other.deployments),
        }
    }
}

/// A tenant the policy does not let in: it lists tenants, and not this one. The message, which
/// the refused client reads, names no other tenant; `listed` is for the node's own log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tenant `{tenant}` is not allowed on this node: its policy lists tenants and has no [tenants.{tenant}] section; \
     the node's operator adds one to let it in"
)]
pub struct UnlistedTenant {
    pub tenant: String,
    /// The tenants the policy lists, in name order.
    pub listed: Vec<String>,
}

/// A tenant the policy does not let push or run deployed tasklets; the message names the key
/// that says so.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tenant `{tenant}` may not deploy on this node: its policy sets `deploy = false` in {section}"
)]
pub struct DeployRefused {
    pub tenant: String,
    /// `[tasklets]` or `[tenants.NAME]`: the section whose `deploy = false` refuses it.
    pub section: String,
}

impl Policy {
    /// The most any tasklet gets on this node, as a grant: the `[tasklets]` caps themselves.
    pub fn ceiling(&self) -> Grant {
        Grant {
            limits: self.limits,
            gpu: self.gpu,
            kernel_deadline: self.workers.kernel_deadline,
            gpu_time: self.gpu_time,
        }
    }

    /// The most `tenant` gets: [`Policy::ceiling`] narrowed by its `[tenants.NAME]` section.
    ///
    /// With no `[tenants.*]` section at all, every tenant gets the ceiling. Once the policy lists
    /// a tenant, a tenant it does not list is refused: the secure default, so that a certificate
    /// issued for someone the operator forgot is not a way in.
    pub fn tenant_ceiling(&self, tenant: &str) -> Result<Grant, UnlistedTenant> {
        let ceiling = self.ceiling();
        if self.tenants.is_empty() {
            return Ok(ceiling);
        }
        let Some(caps) = self.tenants.get(tenant) else {
            return Err(UnlistedTenant {
                tenant: tenant.to_owned(),
                listed: self.tenants.keys().cloned().collect(),
            });
        };
        Ok(Grant {
            limits: Limits {
                memory: capped(ceiling.limits.memory, caps.max_memory),
                wall_time: capped(ceiling.limits.wall_time, caps.max_wall_time),
            },
            gpu: GpuRequest {
                max_vram: capped(ceiling.gpu.max_vram, caps.max_vram),
                max_leases: capped(ceiling.gpu.max_leases, caps.max_leases),
                max_lease_time: capped(ceiling.gpu.max_lease_time, caps.max_lease_time),
                max_persistent: capped(ceiling.gpu.max_persistent, caps.max_persistent),
                rights: caps
                    .rights
                    .map_or(ceiling.gpu.rights, |r| r.intersect(ceiling.gpu.rights)),
            },
            kernel_deadline: ceiling.kernel_deadline,
            gpu_time: at_most(ceiling.gpu_time, caps.gpu_time),
        })
    }
}

impl Policy {
    /// The caps of `[tenants.*]` sections set above `[tasklets]`'s, one line each: a tenant's
    /// section can only narrow, so each is cut to `[tasklets]`'s value, and a node says so at
    /// start (a typo in a policy should not go unseen).
    pub fn tenant_caps_above_the_ceiling(&self) -> Vec<String> {
        // Each cap: the tenant's value where it is above the ceiling's, and the ceiling's.
        let number = |set: Option<u64>, cap: u64| {
            (
                set.filter(|&v| v > cap).map(|v| v.to_string()),
                cap.to_string(),
            )
        };
        let time = |set: Option<Duration>, cap: Duration| {
            (
                set.filter(|&v| v > cap).map(|v| format!("{v:?}")),
                format!("{cap:?}"),
            )
        };
        let ceiling = self.ceiling();
        let mut lines = Vec::new();
        for (tenant, caps) in &self.tenants {
            let mut checked = vec![
                ("max-memory", number(caps.max_memory, ceiling.limits.memory)),
                (
                    "max-wall-time",
                    time(caps.max_wall_time, ceiling.limits.wall_time),
                ),
                ("max-vram", number(caps.max_vram, ceiling.gpu.max_vram)),
                (
                    "max-leases",
                    number(
                        caps.max_leases.map(u64::from),
                        ceiling.gpu.max_leases.into(),
                    ),
                ),
                (
                    "max-lease-secs",
                    time(caps.max_lease_time, ceiling.gpu.max_lease_time),
                ),
                (
                    "max-persistent",
                    number(
                        caps.max_persistent.map(u64::from),
                        ceiling.gpu.max_persistent.into(),
                    ),
                ),
            ];
            if let Some(cap) = ceiling.gpu_time {
                checked.push(("gpu-seconds", time(caps.gpu_time, cap)));
            }
            let totals = [
                (
                    "tenant-max-leases",
                    caps.totals.leases.map(u64::from),
                    self.totals.leases.map(u64::from),
                ),
                ("tenant-max-vram", caps.totals.vram, self.totals.vram),
                (
                    "tenant-max-runs",
                    caps.totals.runs.map(u64::from),
                    self.totals.runs.map(u64::from),
                ),
                (
                    "tenant-max-deployments",
                    caps.totals.deployments.map(u64::from),
                    self.totals.deployments.map(u64::from),
                ),
            ];
            for (key, set, cap) in totals {
                if let Some(cap) = cap {
                    checked.push((key, number(set, cap)));
                }
            }
            for (key, (set, cap)) in checked {
                if let Some(set) = set {
                    lines.push(format!(
                        "[tenants.{tenant}] {key} = {set} is above [tasklets]'s {cap}: the tenant gets {cap}"
                    ));
                }
            }
            if caps.deploy == Some(true) && !self.deploy {
                lines.push(format!(
                    "[tenants.{tenant}] deploy = true cannot give back what [tasklets] deploy = false takes: the tenant may not deploy"
                ));
            }
            if let Some(rights) = caps.rights {
                if rights.intersect(ceiling.gpu.rights) != rights {
                    lines.push(format!(
                        "[tenants.{tenant}] rights name some that [tasklets] does not grant: the tenant gets only those both grant"
                    ));
                }
            }
        }
        lines
    }

    /// What `tenant` may hold at once, all its connections and runs together: `[tasklets]`'s
    /// `tenant-max-*`, lowered by its own section's. Whether the tenant gets in at all is
    /// [`Policy::tenant_ceiling`]'s to say.
    pub fn tenant_totals(&self, tenant: &str) -> TenantTotals {
        match self.tenants.get(tenant) {
            Some(caps) => self.totals.narrowed(caps.totals),
            None => self.totals,
        }
    }

    /// Whether `tenant` may push and run deployed tasklets: `[tasklets] deploy` and then its
    /// `[tenants.NAME] deploy`, both `true` unless set otherwise. Whether the tenant gets in at
    /// all is [`Policy::tenant_ceiling`]'s to say.
    pub fn tenant_may_deploy(&self, tenant: &str) -> Result<(), DeployRefused> {
        let refused = |section: String| DeployRefused {
            tenant: tenant.to_owned(),
            section,
        };
        if !self.deploy {
            return Err(refused("[tasklets]".into()));
        }
        match self.tenants.get(tenant).and_then(|caps| caps.deploy) {
            Some(false) => Err(refused(format!("[tenants.{tenant}]"))),
            _ => Ok(()),
        }
    }
}

/// The smaller of two optional caps (`None`: no cap).
fn at_most<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `value`, no larger than `cap` when there is one.
fn capped<T: Ord>(value: T, cap: Option<T>) -> T {
    match cap {
        Some(cap) => value.min(cap),
        None => value,
    }
}

impl Grant {
    /// This grant cut down to what a request asks for (a tasklet's manifest): each value the
    /// smaller of the two, the rights those in both.
    pub fn narrowed(&self, limits: &Limits, gpu: &GpuRequest) -> Grant {
        Grant {
            limits: Limits {
                memory: limits.memory.min(self.limits.memory),
                wall_time: limits.wall_time.min(self.limits.wall_time),
            },
            gpu: GpuRequest {
                max_vram: gpu.max_vram.min(self.gpu.max_vram),
                max_leases: gpu.max_leases.min(self.gpu.max_leases),
                max_lease_time: gpu.max_lease_time.min(self.gpu.max_lease_time),
                max_persistent: gpu.max_persistent.min(self.gpu.max_persistent),
                rights: gpu.rights.intersect(self.gpu.rights),
            },
            kernel_deadline: self.kernel_deadline,
            gpu_time: self.gpu_time,
        }
    }

    /// What both grants allow (the shorter kernel deadline and GPU time too).
    pub fn intersect(&self, other: &Grant) -> Grant {
        Grant {
            kernel_deadline: self.kernel_deadline.min(other.kernel_deadline),
            gpu_time: at_most(self.gpu_time, other.gpu_time),
            ..self.narrowed(&other.limits, &other.gpu)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::rights::Right;
    use super::*;

    const TWO_TENANTS: &str = r#"
[tasklets]
max-vram = "1GiB"
max-leases = 4
rights = ["alloc", "write", "read", "load", "launch"]

[tenants.dev]

[tenants.team-7]
max-vram = "64MiB"
max-leases = 8
max-persistent = 2
rights = ["alloc", "read", "launch", "load", "persistent"]
"#;

    #[test]
    fn a_tenant_section_narrows_tasklets_and_never_widens_it() {
        let p = Policy::parse(TWO_TENANTS).unwrap();
        let dev = p.tenant_ceiling("dev").unwrap();
        assert_eq!(dev, p.ceiling());
        let team = p.tenant_ceiling("team-7").unwrap();
        assert_eq!(team.gpu.max_vram, 64 << 20);
        // 8 asked, [tasklets] allows 4.
        assert_eq!(team.gpu.max_leases, 4);
        assert!(!team.gpu.rights.contains(Right::Write));
        assert!(team.gpu.rights.contains(Right::Launch));
        // [tasklets] lists the usual five: a tenant's section cannot add `persistent`.
        assert!(!team.gpu.rights.contains(Right::Persistent));
        assert_eq!(team.limits, p.limits);
    }

    #[test]
    fn a_tenants_max_persistent_is_the_smaller_of_its_own_and_tasklets() {
        let p = Policy::parse(
            "[tasklets]\nmax-persistent = 3\n[tenants.dev]\n[tenants.one]\nmax-persistent = 1\n[tenants.many]\nmax-persistent = 10\n[tenants.none]\nmax-persistent = 0\n",
        )
        .unwrap();
        let of = |t: &str| p.tenant_ceiling(t).unwrap().gpu.max_persistent;
        assert_eq!(of("dev"), 3, "left out: [tasklets]'s");
        assert_eq!(of("one"), 1);
        assert_eq!(of("many"), 3, "never widened");
        assert_eq!(of("none"), 0);
        // Unset everywhere: the default ceiling.
        let p = Policy::parse("[tenants.dev]\nmax-leases = 1\n").unwrap();
        assert_eq!(
            p.tenant_ceiling("dev").unwrap().gpu.max_persistent,
            super::super::policy::DEFAULT_MAX_PERSISTENT
        );
        // A tenant's ceiling intersected with a grant keeps the smaller count.
        let dev = p.tenant_ceiling("dev").unwrap();
        let asked = GpuRequest {
            max_persistent: 1,
            ..dev.gpu
        };
        let g = dev.narrowed(&dev.limits, &asked);
        assert_eq!(g.gpu.max_persistent, 1);
        assert_eq!(dev.intersect(&g).gpu.max_persistent, 1);
        assert_eq!(g.intersect(&dev).gpu.max_persistent, 1);
    }

    #[test]
    fn caps_above_the_ceiling_are_named() {
        let p = Policy::parse(
            "[tasklets]\nmax-vram = \"4MiB\"\nmax-leases = 2\ntenant-max-runs = 2\ndeploy = false\n\
             [tenants.bob]\nmax-vram = \"8GiB\"\nmax-leases = 1\n\
             [tenants.dev]\ntenant-max-runs = 3\ndeploy = true\n",
        )
        .unwrap();
        let lines = p.tenant_caps_above_the_ceiling();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[1].starts_with("[tenants.dev] tenant-max-runs = 3 is above [tasklets]'s 2")
                && lines[2].starts_with("[tenants.dev] deploy = true cannot give back"),
            "{lines:?}"
        );
        assert!(
            lines[0]
                .starts_with("[tenants.bob] max-vram = 8589934592 is above [tasklets]'s 4194304"),
            "{lines:?}"
        );
        let lines = Policy::parse(TWO_TENANTS)
            .unwrap()
            .tenant_caps_above_the_ceiling();
        assert!(
            lines.iter().all(|l| l.starts_with("[tenants.team-7]"))
                && lines
                    .iter()
                    .any(|l| l.contains("max-leases = 8 is above [tasklets]'s 4"))
                && lines.iter().any(|l| l.contains("rights name some")),
            "{lines:?}"
        );
    }

    #[test]
    fn once_tenants_are_listed_the_others_are_refused() {
        let p = Policy::parse(TWO_TENANTS).unwrap();
        let err = p.tenant_ceiling("mallory").unwrap_err();
        assert_eq!(err.listed, ["dev", "team-7"]);
        // The refused client is told what is missing, not who else the node serves.
        let text = err.to_string();
        assert!(
            text.contains("[tenants.mallory]") && !text.contains("dev") && !text.contains("team-7"),
            "{text}"
        );
    }

    #[test]
    fn with_no_tenant_sections_every_tenant_gets_the_ceiling() {
        let p = Policy::parse("[tasklets]\nmax-leases = 2\n").unwrap();
        assert_eq!(p.tenant_ceiling("anyone").unwrap(), p.ceiling());
    }

    #[test]
    fn tenant_sections_take_the_tasklets_keys_only() {
        let (line, msg) =
            Policy::parse("[tenants.dev]\nmax-vram = \"1GiB\"\nmax-gpus = 2\n").unwrap_err();
        assert_eq!(line, Some(3), "{msg}");
        assert!(msg.contains("max-gpus"), "{msg}");
    }

    #[test]
    fn tenant_totals_come_from_tasklets_and_a_tenants_section_only_lowers_them() {
        let p = Policy::parse(
            "[tasklets]\ntenant-max-leases = 4\ntenant-max-vram = \"2GiB\"\n\
             [tenants.dev]\n\
             [tenants.small]\ntenant-max-leases = 1\ntenant-max-runs = 2\ntenant-max-deployments = 9\n\
             [tenants.big]\ntenant-max-leases = 40\ntenant-max-vram = \"8GiB\"\n",
        )
        .unwrap();
        let all = |leases, vram, runs| TenantTotals {
            leases,
            vram,
            runs,
            deployments: None,
        };
        assert_eq!(p.tenant_totals("dev"), all(Some(4), Some(2 << 30), None));
        assert_eq!(
            p.tenant_totals("small"),
            TenantTotals {
                deployments: Some(9),
                ..all(Some(1), Some(2 << 30), Some(2))
            }
        );
        assert_eq!(
            p.tenant_totals("big"),
            all(Some(4), Some(2 << 30), None),
            "never widened"
        );
        // Unset everywhere: no totals.
        let p = Policy::parse("[tenants.dev]\nmax-leases = 1\n").unwrap();
        assert_eq!(p.tenant_totals("dev"), TenantTotals::default());
        // A bad value names its key and line.
        let (line, msg) =
            Policy::parse("[tenants.dev]\nmax-leases = 1\ntenant-max-vram = \"lots\"\n")
                .unwrap_err();
        assert_eq!(line, Some(3), "{msg}");
        assert!(msg.contains("tenant-max-vram"), "{msg}");
    }

    #[test]
    fn deploy_is_allowed_unless_a_section_takes_it_away() {
        let p = Policy::parse(TWO_TENANTS).unwrap();
        assert!(p.tenant_may_deploy("dev").is_ok());
        let p = Policy::parse("[tenants.dev]\n[tenants.guest]\ndeploy = false\n").unwrap();
        assert!(p.tenant_may_deploy("dev").is_ok());
        let err = p.tenant_may_deploy("guest").unwrap_err().to_string();
        assert!(err.contains("`deploy = false` in [tenants.guest]"), "{err}");
        // A tenant section cannot give back what [tasklets] took away.
        let p =
            Policy::parse("[tasklets]\ndeploy = false\n[tenants.dev]\ndeploy = true\n").unwrap();
        let err = p.tenant_may_deploy("dev").unwrap_err().to_string();
        assert!(err.contains("in [tasklets]"), "{err}");
    }

    #[test]
    fn narrowing_takes_the_smaller_of_each() {
        let p = Policy::parse(TWO_TENANTS).unwrap();
        let ceiling = p.tenant_ceiling("team-7").unwrap();
        let asked = GpuRequest {
            max_vram: 1 << 40,
            max_leases: 1,
            max_lease_time: Duration::from_secs(5),
            max_persistent: 3,
            rights: Rights::ALL,
        };
        let g = ceiling.narrowed(&Limits::default(), &asked);
        assert_eq!(g.gpu.max_vram, 64 << 20);
        assert_eq!(g.gpu.max_leases, 1);
        assert_eq!(g.gpu.max_lease_time, Duration::from_secs(5));
        // 3 asked, team-7 allows 2.
        assert_eq!(g.gpu.max_persistent, 2);
        assert_eq!(g.gpu.rights, ceiling.gpu.rights);
        assert_eq!(g.limits, Limits::default());
        assert_eq!(g.intersect(&ceiling), g);
    }
}
