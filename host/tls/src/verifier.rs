//! The node's check of client certificates: signed by the CA, and naming a tenant.
//!
//! Checking the tenant inside the handshake, rather than after it, means a node never holds a
//! connection it cannot attribute, and the client learns why at once, from a TLS alert
//! (`access_denied`), like every other refusal.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

use crate::tenant_of;

/// Wraps the standard verifier (chain up to the CA, validity dates, client-authentication
/// purpose), then requires a tenant.
#[derive(Debug)]
pub(crate) struct TenantVerifier {
    chain: Arc<dyn ClientCertVerifier>,
}

impl TenantVerifier {
    pub(crate) fn new(chain: Arc<dyn ClientCertVerifier>) -> Self {
        Self { chain }
    }
}

impl ClientCertVerifier for TenantVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.chain.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .chain
            .verify_client_cert(end_entity, intermediates, now)?;
        match tenant_of(std::slice::from_ref(end_entity)) {
            Ok(_) => Ok(verified),
            Err(_) => Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}
