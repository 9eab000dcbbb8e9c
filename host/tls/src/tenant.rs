//! Tenant names, and how a client certificate carries one.

use std::fmt;
use std::str::FromStr;

/// Scheme and path before the tenant's name in its certificate's URI.
pub(crate) const URI_PREFIX: &str = "tasklet://tenant/";

/// Longest tenant name: one DNS label, so a name fits anywhere a label does.
const MAX_LEN: usize = 63;

/// A validated tenant name: 1 to 63 characters, `[a-z0-9][a-z0-9._-]*`.
///
/// The name is used as a file name (`tenants/<name>.pem`) and inside a URI, so the alphabet is
/// kept to characters that need no escaping in either, and a leading `.` or `-` (hidden files,
/// command-line flags) is ruled out.
///
/// A tenant is named in its client certificate by one subject alternative name of type URI,
/// `tasklet://tenant/<name>`. The subject alternative names are where X.509 puts identities that
/// are checked (RFC 5280, 4.2.1.6; verifiers ignore the subject's common name), and a URI in a
/// scheme of our own cannot be mistaken for anything else: node certificates carry DNS names and
/// IP addresses only, so a node certificate never names a tenant, and a tenant certificate is
/// never valid for a host name. The subject's common name holds the tenant's name too, for people
/// reading a certificate with other tools, but it is never consulted.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tenant(String);

/// A tenant name that [`Tenant::new`] refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid tenant name {name:?}: {reason} (expected 1 to 63 characters from a-z, 0-9, '-', '_' and '.', starting with a letter or digit)")]
pub struct InvalidTenant {
    /// The name as given.
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl Tenant {
    /// Checks `name` and makes it a tenant name.
    pub fn new(name: &str) -> Result<Self, InvalidTenant> {
        let invalid = |reason| InvalidTenant {
            name: name.to_owned(),
            reason,
        };
        if name.chars().any(|c| c.is_ascii_uppercase()) {
            return Err(invalid(
                "it has an uppercase letter: a tenant's name is lowercase a-z, 0-9, '-', '_', '.'",
            ));
        }
        let mut chars = name.chars();
        match chars.next() {
            None => return Err(invalid("it is empty")),
            Some(c) if !(c.is_ascii_lowercase() || c.is_ascii_digit()) => {
                return Err(invalid("it must start with a lowercase letter or a digit"))
            }
            Some(_) => {}
        }
        if name.len() > MAX_LEN {
            return Err(invalid("it is longer than 63 characters"));
        }
        let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c);
        if !chars.all(allowed) {
            return Err(invalid(
                "it contains a character outside a-z, 0-9, '-', '_', '.'",
            ));
        }
        Ok(Self(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The URI that names this tenant in its client certificate.
    pub fn uri(&self) -> String {
        format!("{URI_PREFIX}{}", self.0)
    }

    /// The tenant a certificate URI names; `None` for a URI that is not a tenant URI at all,
    /// `Some(Err(_))` for a tenant URI with an invalid name.
    pub(crate) fn from_uri(uri: &str) -> Option<Result<Self, InvalidTenant>> {
        uri.strip_prefix(URI_PREFIX).map(Self::new)
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Tenant {
    type Err = InvalidTenant;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::new(name)
    }
}

impl AsRef<str> for Tenant {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_names_in_the_alphabet() {
        for name in ["dev", "a", "0", "team-7.gpu_jobs", &"x".repeat(63)] {
            assert_eq!(Tenant::new(name).unwrap().as_str(), name);
        }
    }

    #[test]
    fn refuses_names_outside_it() {
        for name in [
            "",
            "-dev",
            ".dev",
            "_dev",
            "Dev",
            "dev/../x",
            "dev x",
            "dév",
            &"x".repeat(64),
        ] {
            let err = Tenant::new(name).unwrap_err();
            assert_eq!(err.name, name);
        }
    }

    #[test]
    fn an_uppercase_letter_anywhere_is_named_as_the_reason() {
        for name in ["Team7", "team7X", "tEam"] {
            let err = Tenant::new(name).unwrap_err().to_string();
            assert!(err.contains("uppercase"), "{name}: {err}");
        }
    }

    #[test]
    fn uri_round_trips() {
        let tenant = Tenant::new("dev").unwrap();
        assert_eq!(tenant.uri(), "tasklet://tenant/dev");
        assert_eq!(Tenant::from_uri(&tenant.uri()), Some(Ok(tenant)));
        assert_eq!(Tenant::from_uri("https://example.com/"), None);
        assert!(matches!(
            Tenant::from_uri("tasklet://tenant/Bad"),
            Some(Err(_))
        ));
    }
}
