//! Handshake refusals, explained: from a quinn or rustls error to one line of cause and fix.
//!
//! When one side refuses the other's certificate, TLS tells the peer why with an alert, and QUIC
//! carries the alert in its close frame as the error code `0x100 + alert`. So the side that
//! refused sees its own verifier's error (quinn: `ConnectionError::TransportError`), the other
//! sees the alert (quinn: `ConnectionError::ConnectionClosed`), and from the side that saw it
//! and whether it came from the peer follows whose certificate was refused, and the alert says
//! why.

use std::error::Error as StdError;
use std::fmt;

use quinn::{ConnectionError, Side};
use rustls::AlertDescription;

/// QUIC's error codes for TLS alerts: `CRYPTO_ERROR_BASE + alert` (RFC 9001, 4.8).
const CRYPTO_ERROR_BASE: u64 = 0x100;

/// How far [`Refusal::find`] follows an error's sources before it gives up.
const MAX_SOURCE_DEPTH: usize = 32;

/// Why a handshake was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cause {
    /// The node requires a client certificate and the client presented none.
    ClientCertMissing,
    /// The client's certificate is not signed by the node's CA.
    ClientCertUnknownCa,
    /// The client's certificate has expired (or is not valid yet).
    ClientCertExpired,
    /// The client's certificate is signed by the CA but names no tenant, several, or one by a
    /// name no tenant may have (the node's alert does not tell these apart).
    ClientCertNoTenant,
    /// The client presented a certificate that is not for client authentication (a node's).
    ClientCertWrongPurpose,
    /// The node refused the client's certificate for another reason, given by the alert.
    ClientCertRejected(AlertDescription),
    /// The node's certificate is not signed by the CA the client trusts.
    NodeCertUnknownCa,
    /// The node's certificate is not valid for the name the client connected to.
    NodeCertNameMismatch,
    /// The node's certificate has expired (or is not valid yet).
    NodeCertExpired,
    /// The node presented a certificate that is not for server authentication (a tenant's).
    NodeCertWrongPurpose,
    /// The client refused the node's certificate for another reason, given by the alert.
    NodeCertRejected(AlertDescription),
    /// The two sides have no application protocol version in common (ALPN).
    NoCommonProtocol,
}

/// A refused handshake as one side saw it. Its `Display` is one line: what was refused, why,
/// and in parentheses how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Why.
    pub cause: Cause,
    /// The side that saw the error: `Side::Server` is the node.
    pub seen_by: Side,
    /// The refusing side's TLS library's own words, where the error carried them (QUIC carries
    /// them to the peer too).
    pub detail: Option<String>,
}

impl Refusal {
    /// The refusal a quinn connection error reports, if it reports one. `seen_by` is the side
    /// the error comes from.
    pub fn from_connection_error(err: &ConnectionError, seen_by: Side) -> Option<Self> {
        let (code, refused_here, detail) = match err {
            ConnectionError::TransportError(err) => {
                (u64::from(err.code), true, Some(err.reason.clone()))
            }
            ConnectionError::ConnectionClosed(close) => {
                let reason = String::from_utf8_lossy(&close.reason).into_owned();
                (u64::from(close.error_code), false, Some(reason))
            }
            _ => return None,
        };
        let alert = u8::try_from(code.checked_sub(CRYPTO_ERROR_BASE)?).ok()?;
        let refuser = if refused_here { seen_by } else { !seen_by };
        Some(Self {
            cause: Cause::of(AlertDescription::from(alert), refuser)?,
            seen_by,
            detail: detail.filter(|detail| !detail.is_empty()),
        })
    }

    /// The refusal a rustls error reports, if it reports one (for TLS over a stream rather than
    /// QUIC).
    pub fn from_tls_error(err: &rustls::Error, seen_by: Side) -> Option<Self> {
        let (alert, refuser) = match err {
            rustls::Error::AlertReceived(alert) => (*alert, !seen_by),
            rustls::Error::InvalidCertificate(err) => {
                (AlertDescription::from(err.clone()), seen_by)
            }
            rustls::Error::NoCertificatesPresented => {
                (AlertDescription::CertificateRequired, seen_by)
            }
            rustls::Error::NoApplicationProtocol => {
                (AlertDescription::NoApplicationProtocol, seen_by)
            }
            _ => return None,
        };
        Some(Self {
            cause: Cause::of(alert, refuser)?,
            seen_by,
            detail: Some(err.to_string()),
        })
    }

    /// The refusal anywhere in an error's chain of sources (an `io::Error` from a stream, a
    /// `quinn::ReadError`, an `anyhow::Error`'s chain, …), if there is one.
    pub fn find(err: &(dyn StdError + 'static), seen_by: Side) -> Option<Self> {
        let mut current = Some(err);
        for _ in 0..MAX_SOURCE_DEPTH {
            let err = current?;
            if let Some(err) = err.downcast_ref::<ConnectionError>() {
                return Self::from_connection_error(err, seen_by);
            }
            if let Some(err) = err.downcast_ref::<rustls::Error>() {
                return Self::from_tls_error(err, seen_by);
            }
            current = err.source();
        }
        None
    }

    /// Whose certificate was refused: the client's (`Side::Client`) or the node's.
    pub fn refused_certificate_of(&self) -> Option<Side> {
        match self.cause {
            Cause::ClientCertMissing
            | Cause::ClientCertUnknownCa
            | Cause::ClientCertExpired
            | Cause::ClientCertNoTenant
            | Cause::ClientCertWrongPurpose
            | Cause::ClientCertRejected(_) => Some(Side::Client),
            Cause::NodeCertUnknownCa
            | Cause::NodeCertNameMismatch
            | Cause::NodeCertExpired
            | Cause::NodeCertWrongPurpose
            | Cause::NodeCertRejected(_) => Some(Side::Server),
            Cause::NoCommonProtocol => None,
        }
    }
}

/// One line for any error seen on side `seen_by`: the [`Refusal`] it reports, or else the
/// error's own message.
pub fn explain(err: &(dyn StdError + 'static), seen_by: Side) -> String {
    match Refusal::find(err, seen_by) {
        Some(refusal) => refusal.to_string(),
        None => err.to_string(),
    }
}

impl Cause {
    /// The cause an alert gives, when `refuser` sent it.
    fn of(alert: AlertDescription, refuser: Side) -> Option<Self> {
        use AlertDescription as A;
        Some(match (refuser, alert) {
            (_, A::NoApplicationProtocol) => Self::NoCommonProtocol,
            (Side::Server, A::CertificateRequired) => Self::ClientCertMissing,
            // A signature that does not verify: signed by another key than the CA's.
            (Side::Server, A::UnknownCA | A::DecryptError) => Self::ClientCertUnknownCa,
            (Side::Server, A::CertificateExpired) => Self::ClientCertExpired,
            (Side::Server, A::AccessDenied) => Self::ClientCertNoTenant,
            (Side::Server, A::UnsupportedCertificate) => Self::ClientCertWrongPurpose,
            (Side::Server, A::BadCertificate | A::CertificateUnknown | A::CertificateRevoked) => {
                Self::ClientCertRejected(alert)
            }
            (Side::Client, A::UnknownCA | A::DecryptError) => Self::NodeCertUnknownCa,
            // What a client's verifier reports as a bad certificate is, for certificates this
            // crate issued, a name the certificate does not list.
            (Side::Client, A::BadCertificate) => Self::NodeCertNameMismatch,
            (Side::Client, A::CertificateExpired) => Self::NodeCertExpired,
            (Side::Client, A::UnsupportedCertificate) => Self::NodeCertWrongPurpose,
            (Side::Client, A::CertificateUnknown | A::CertificateRevoked) => {
                Self::NodeCertRejected(alert)
            }
            _ => return None,
        })
    }

    fn reason(self) -> String {
        match self {
            Self::ClientCertMissing => {
                "it presented no certificate, and the node requires one".into()
            }
            Self::ClientCertUnknownCa => "it is not signed by the node's CA".into(),
            Self::NodeCertUnknownCa => "it is not signed by the CA the client trusts".into(),
            Self::ClientCertExpired | Self::NodeCertExpired => {
                "it has expired or is not valid yet".into()
            }
            Self::ClientCertNoTenant => {
                "it names no tenant, or several, or one by a name no tenant may have".into()
            }
            Self::ClientCertWrongPurpose => "it is not a client certificate".into(),
            Self::NodeCertWrongPurpose => "it is not a node certificate".into(),
            Self::NodeCertNameMismatch => {
                "it is not valid for the name the client connected to".into()
            }
            Self::ClientCertRejected(alert) | Self::NodeCertRejected(alert) => {
                format!("TLS alert {alert:?}")
            }
            Self::NoCommonProtocol => format!(
                "the client and the node have no protocol version in common; this build speaks {} \
                 (the other side offered another version of it, or another protocol altogether)",
                String::from_utf8_lossy(crate::ALPN)
            ),
        }
    }

    fn fix(self) -> &'static str {
        match self {
            Self::ClientCertMissing => "run the client with `--certs DIR` holding ca.pem and a tenant's certificate",
            Self::ClientCertUnknownCa => "issue one with `tasklet certs issue DIR --tenant NAME` from the node's certificate folder",
            Self::ClientCertExpired => "issue a new one with `tasklet certs issue DIR --tenant NAME` after removing the old tenants/NAME files, and check both machines' clocks",
            Self::ClientCertNoTenant => "use a certificate made by `tasklet certs issue`, which names its tenant",
            Self::ClientCertWrongPurpose => "present a tenant's certificate from tenants/, not a node's",
            Self::ClientCertRejected(_) | Self::NodeCertRejected(_) => "issue certificates with `tasklet certs` from one folder",
            Self::NodeCertUnknownCa => "connect to the right node, or give the client the ca.pem of the node's certificate folder",
            Self::NodeCertNameMismatch => "connect by a name or address the node's certificate lists, or reissue it with that name (`tasklet certs node DIR --name NAME`)",
            Self::NodeCertExpired => "renew the node's certificate from its CA, and check both machines' clocks",
            Self::NodeCertWrongPurpose => "the node must present its node.pem",
            Self::NoCommonProtocol => "if both are tasklet, run the same version of it on the client and the node",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match (self.seen_by, self.refused_certificate_of()) {
            (Side::Client, Some(Side::Client)) if self.cause == Cause::ClientCertMissing => {
                "the node refused this client"
            }
            (Side::Server, Some(Side::Client)) if self.cause == Cause::ClientCertMissing => {
                "this node refused a client"
            }
            (Side::Client, Some(Side::Client)) => "the node refused this client's certificate",
            (Side::Server, Some(Side::Client)) => "this node refused a client's certificate",
            (Side::Client, Some(Side::Server)) => "this client refused the node's certificate",
            (Side::Server, Some(Side::Server)) => "a client refused this node's certificate",
            (_, None) => "the handshake failed",
        };
        write!(f, "{what}: {} ({})", self.cause.reason(), self.cause.fix())
    }
}
