//! TLS set-up shared by the Redis stores.

use redis::TlsCertificates;

/// Trust `pem` (one CA) instead of the system store; no client certificate.
pub(super) fn private_ca(pem: &[u8]) -> TlsCertificates {
    TlsCertificates {
        client_tls: None,
        root_cert: Some(pem.to_vec()),
    }
}

/// Installs rustls's ring crypto provider as the process default unless the application
/// already installed one. redis-rs leaves the choice to the application, and rustls panics
/// on the first TLS handshake when no provider was chosen and several are compiled in.
pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may win the race; either way a provider is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
