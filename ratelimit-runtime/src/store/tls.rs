//! TLS set-up shared by the Redis stores.

use redis::{
    Client, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, RedisError, RedisResult,
    TlsCertificates,
};

/// Trust `pem` (one CA) instead of the system store; no client certificate.
fn private_ca(pem: &[u8]) -> TlsCertificates {
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
        #[allow(
            deprecated,
            reason = "rustls 0.23.48 deprecates ring's provider for its lack of post-quantum key exchange; ring is the provider this crate builds, and an application that wants another installs it first"
        )]
        let provider = rustls::crypto::ring::default_provider();
        let _ = provider.install_default();
    }
}

/// A client for `info`, trusting `tls_root` (one CA, PEM) instead of the system store when
/// given. Refuses what would only fail once connecting, where every check would report a
/// timeout: a `tls_root` with no PEM certificate in it, and `#insecure` (no verification,
/// which this crate's TLS does not offer).
pub(crate) fn client(
    info: impl IntoConnectionInfo,
    tls_root: Option<&[u8]>,
) -> RedisResult<Client> {
    let client = match tls_root {
        None => Client::open(info)?,
        Some(pem) => {
            check_pem(pem)?;
            Client::build_with_tls(info, private_ca(pem))?
        }
    };
    if let ConnectionAddr::TcpTls { insecure: true, .. } = client.get_connection_info().addr() {
        return Err(RedisError::from((
            ErrorKind::InvalidClientConfig,
            "`#insecure` (TLS without verifying the server's certificate) is not supported: give the CA that signed it with `tls_root_certificate`",
        )));
    }
    Ok(client)
}

/// Whether `pem` holds at least one certificate, and nothing unreadable.
fn check_pem(pem: &[u8]) -> RedisResult<()> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut found = 0;
    for certificate in CertificateDer::pem_slice_iter(pem) {
        if let Err(error) = certificate {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "the CA given to `tls_root_certificate` is not readable PEM",
                error.to_string(),
            )));
        }
        found += 1;
    }
    if found == 0 {
        return Err(RedisError::from((
            ErrorKind::InvalidClientConfig,
            "the CA given to `tls_root_certificate` holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)",
        )));
    }
    Ok(())
}

/// A client for the server at `host:port` with `template`'s settings (credentials, database,
/// TLS): a node a Cluster names, the primary sentinels name.
pub(crate) fn client_at(
    template: &ConnectionInfo,
    host: &str,
    port: u16,
    tls_root: Option<&[u8]>,
) -> RedisResult<Client> {
    let mut addr = template.addr().clone();
    match &mut addr {
        ConnectionAddr::Tcp(at, at_port)
        | ConnectionAddr::TcpTls {
            host: at,
            port: at_port,
            ..
        } => {
            at.clear();
            at.push_str(host);
            *at_port = port;
        }
        _ => {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "a Redis node named by its address is reached over TCP",
            )))
        }
    }
    client(template.clone().set_addr(addr), tls_root)
}
