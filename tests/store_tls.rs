//! `rediss://` with a password, against a real redis-server speaking TLS with a certificate
//! from a private CA: trusted through `tls_root_certificate`, refused without it.

mod support;

use std::{
    fs,
    net::{TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use ratelimit_runtime::{
    key::RouteKey,
    store::{
        CheckRequest, RedisClusterStore, RedisSentinelStore, RedisStore, Store, StoreErrorKind,
    },
    Algorithm, IdentityPart, Limit, Window,
};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

/// A TLS-only redis-server (no plain port) with `requirepass`, killed on drop.
struct TlsRedis {
    child: Child,
    port: u16,
    ca_pem: String,
    _dir: tempfile::TempDir,
}

impl TlsRedis {
    fn start() -> TlsRedis {
        // Named like the harness's servers, so `tests/run` stops it if this process aborts.
        let dir = tempfile::Builder::new()
            .prefix(&support::dir_prefix())
            .tempdir()
            .expect("temp dir");
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let server_key = KeyPair::generate().unwrap();
        let server_params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        let server_cert = server_params.signed_by(&server_key, &ca).unwrap();
        let cert = dir.path().join("server.crt");
        let key = dir.path().join("server.key");
        let ca_file = dir.path().join("ca.crt");
        fs::write(&cert, server_cert.pem()).unwrap();
        fs::write(&key, server_key.serialize_pem()).unwrap();
        fs::write(&ca_file, ca.pem()).unwrap();

        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--requirepass",
                "s3cret",
            ])
            .args(["--tls-auth-clients", "no"])
            .arg("--tls-cert-file")
            .arg(&cert)
            .arg("--tls-key-file")
            .arg(&key)
            .arg("--tls-ca-cert-file")
            .arg(&ca_file)
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "redis-server not found on PATH; install it with `apt-get install redis-server`",
            );
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server (TLS) did not start"
            );
            thread::sleep(Duration::from_millis(20));
        }
        TlsRedis {
            child,
            port,
            ca_pem: ca.pem(),
            _dir: dir,
        }
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn check(store: &RedisStore) -> Result<bool, ratelimit_runtime::store::StoreError> {
    let key = RouteKey::new("rl", "GET", "/tls", &[(IdentityPart::Ip, "203.0.113.7")]);
    let limits = [Limit::new(
        1,
        Window::from_secs(60),
        Algorithm::SlidingWindow,
    )];
    let request = CheckRequest {
        key: &key,
        limits: &limits,
        now_millis: None,
    };
    store.check(request).await.map(|d| d.allowed)
}

#[tokio::test]
async fn rediss_with_a_password_and_a_private_ca() {
    let server = TlsRedis::start();
    let url = format!("rediss://:s3cret@localhost:{}", server.port);
    let store = RedisStore::builder(url.clone())
        .timeout(Duration::from_secs(2))
        .tls_root_certificate(server.ca_pem.clone())
        .build()
        .await
        .expect("store");
    // The connection is made in the background: the first answer may take a moment.
    let mut answers = Vec::new();
    for _ in 0..50 {
        match check(&store).await {
            Ok(allowed) => {
                answers.push(allowed);
                if answers.len() == 2 {
                    break;
                }
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    assert_eq!(answers, [true, false], "decisions over TLS");

    // Without the CA the server's certificate is not trusted: an error, never a decision.
    let untrusting = RedisStore::builder(url)
        .timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("store");
    let error = check(&untrusting).await.expect_err("untrusted certificate");
    assert!(
        matches!(
            error.kind(),
            StoreErrorKind::Connection | StoreErrorKind::Timeout
        ),
        "{error}"
    );
}

/// What would fail only once connecting, where every check would report a timeout, is
/// refused when the store is built: a CA that is no PEM certificate, and `#insecure` (no
/// certificate verification), for every Redis store.
#[tokio::test]
async fn a_ca_that_is_no_certificate_and_insecure_tls_are_refused_at_build() {
    let not_pem = RedisStore::builder("rediss://:s3cret@localhost:6380")
        .tls_root_certificate(b"ca.pem".to_vec())
        .build()
        .await
        .expect_err("a CA without a certificate in it");
    assert!(
        not_pem.to_string().contains("holds no PEM certificate"),
        "{not_pem}"
    );
    assert!(!not_pem.to_string().contains("s3cret"), "{not_pem}");
    let cut_short = "-----BEGIN CERTIFICATE-----\nMIIB\n";
    let unreadable = RedisStore::builder("rediss://localhost:6380")
        .tls_root_certificate(cut_short)
        .build()
        .await
        .expect_err("a CA cut short");
    assert!(
        unreadable.to_string().contains("not readable PEM"),
        "{unreadable}"
    );
    let insecure = RedisStore::builder("rediss://localhost:6380/#insecure")
        .build()
        .await
        .expect_err("#insecure");
    assert!(insecure.to_string().contains("`#insecure`"), "{insecure}");
    let cluster = RedisClusterStore::builder(["rediss://localhost:7000/#insecure"])
        .build()
        .await
        .expect_err("#insecure on a cluster seed");
    assert!(cluster.to_string().contains("`#insecure`"), "{cluster}");
    let sentinel = RedisSentinelStore::builder(["redis://localhost:26379"], "mymaster")
        .tls_root_certificate(b"ca.pem".to_vec())
        .build()
        .await
        .expect_err("a sentinel store's CA without a certificate");
    assert!(
        sentinel.to_string().contains("holds no PEM certificate"),
        "{sentinel}"
    );
}
