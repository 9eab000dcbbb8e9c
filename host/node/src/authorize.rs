//! The hook through which a daemon embedding the node approves, narrows or refuses a tenant.
//!
//! The node's policy decides first (`[tasklets]` and `[tenants.NAME]`); an [`Authorizer`] then
//! sees the tenant and the grant the policy allows it, once per connection, and answers with the
//! grant to use or a refusal. It can only take away: the node intersects what it returns with
//! what the policy allows.

use std::future::Future;
use std::pin::Pin;
use tasklet_runtime::config::Grant;
use tasklet_tls::Tenant;

/// What [`Authorizer::authorize`] returns: a future, so that a daemon can ask something slow
/// (a registry, a database) without blocking the node's async runtime.
pub type Authorization<'a> = Pin<Box<dyn Future<Output = Result<Grant, Denied>> + Send + 'a>>;

/// Decides, per connection, whether a tenant the policy lets in may use this node, and with what
/// grant. `ceiling` is what the policy allows the tenant.
///
/// Any `Fn(&Tenant, Grant) -> Result<Grant, Denied>` is an authorizer that decides at once:
///
/// ```
/// use tasklet_node::{Authorizer, Denied};
/// use tasklet_runtime::config::Grant;
/// use tasklet_tls::Tenant;
///
/// // Tenant "guest" may lease at most 64 MiB; "banned" may not connect.
/// fn narrow(tenant: &Tenant, mut ceiling: Grant) -> Result<Grant, Denied> {
///     match tenant.as_str() {
///         "banned" => Err(Denied::new("this tenant's access was withdrawn")),
///         "guest" => {
///             ceiling.gpu.max_vram = ceiling.gpu.max_vram.min(64 << 20);
///             Ok(ceiling)
///         }
///         _ => Ok(ceiling),
///     }
/// }
/// fn takes(_: impl Authorizer) {}
/// takes(narrow);
/// ```
pub trait Authorizer: Send + Sync + 'static {
    fn authorize<'a>(&'a self, tenant: &'a Tenant, ceiling: Grant) -> Authorization<'a>;
}

impl<F> Authorizer for F
where
    F: Fn(&Tenant, Grant) -> Result<Grant, Denied> + Send + Sync + 'static,
{
    fn authorize<'a>(&'a self, tenant: &'a Tenant, ceiling: Grant) -> Authorization<'a> {
        Box::pin(std::future::ready(self(tenant, ceiling)))
    }
}

/// An authorizer's refusal; the client is told `reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Denied {
    pub reason: String,
}

impl Denied {
    pub fn new(reason: impl Into<String>) -> Denied {
        Denied {
            reason: reason.into(),
        }
    }
}
