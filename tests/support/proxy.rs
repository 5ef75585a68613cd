//! A TCP proxy in front of a Redis server that can black-hole the connections it carries.

use std::sync::{
    atomic::{AtomicU16, Ordering},
    Arc,
};

use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
};

/// Forwards every connection to `127.0.0.1:<upstream>`. [`Proxy::freeze`] makes every
/// connection open at that moment go silent: bytes are neither forwarded nor answered and
/// the sockets stay open, which is what a client sees when the path to Redis drops packets
/// without a reset (a failover moved the address, a NAT entry was dropped, a proxy hung).
/// Connections made later are forwarded. [`Proxy::switch_to`] sends connections made later
/// to another server, as a failover proxy or a DNS name does, while those open stay where
/// they are. Runs on the calling Tokio runtime.
pub struct Proxy {
    port: u16,
    generation: watch::Sender<u64>,
    upstream: Arc<AtomicU16>,
}

impl Proxy {
    pub async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy port");
        let port = listener.local_addr().expect("proxy address").port();
        let (generation, _) = watch::channel(0u64);
        let frozen = generation.clone();
        let upstream = Arc::new(AtomicU16::new(upstream));
        let target = Arc::clone(&upstream);
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = target.load(Ordering::SeqCst);
                let mut frozen = frozen.subscribe();
                let born = *frozen.borrow();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = async {
                            frozen.wait_for(|generation| *generation > born).await.map(|_| ())
                        } => {
                            // Keep both sockets open, and never touch them again.
                            std::future::pending::<()>().await;
                        }
                    }
                });
            }
        });
        Proxy {
            port,
            generation,
            upstream,
        }
    }

    /// Connections made from now on go to `127.0.0.1:<port>`.
    pub fn switch_to(&self, port: u16) {
        self.upstream.store(port, Ordering::SeqCst);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Black-holes every connection open now.
    pub fn freeze(&self) {
        self.generation.send_modify(|generation| *generation += 1);
    }
}
