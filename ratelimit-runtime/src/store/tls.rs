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
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A client for `info`, trusting `tls_root` (one CA, PEM) instead of the system store when
/// given.
pub(crate) fn client(
    info: impl IntoConnectionInfo,
    tls_root: Option<&[u8]>,
) -> RedisResult<Client> {
    match tls_root {
        None => Client::open(info),
        Some(pem) => Client::build_with_tls(info, private_ca(pem)),
    }
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
