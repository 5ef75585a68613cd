//! A TCP proxy in front of a Redis server that can black-hole the connections it carries.

use std::sync::{
    atomic::{AtomicBool, AtomicU16, Ordering},
    Arc,
};

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{mpsc, watch},
    time::Instant,
};

/// Forwards every connection to `127.0.0.1:<upstream>`. [`Proxy::freeze`] makes every connection
/// open at that moment go silent: bytes are neither forwarded nor answered and the sockets stay
/// open, which is what a client sees when the path to Redis drops packets without a reset (a
/// failover moved the address, a NAT entry was dropped, a proxy hung). Connections made later are
/// forwarded, unless the path is [`Proxy::silence`]d: then they are accepted and never answered,
/// until [`Proxy::restore`]. [`Proxy::switch_to`] sends connections made later to another server,
/// as a failover proxy or a DNS name does, while those open stay where they are. Runs on the
/// calling Tokio runtime.
pub struct Proxy {
    port: u16,
    generation: watch::Sender<u64>,
    upstream: Arc<AtomicU16>,
    silent: Arc<AtomicBool>,
}

impl Proxy {
    pub async fn start(upstream: u16) -> Proxy {
        Proxy::start_late(upstream, Duration::ZERO).await
    }

    /// As [`Proxy::start`], with every reply forwarded `delay` after it arrived: a Redis a
    /// slow network away. Replies keep their order, and each is late by `delay` alone (not
    /// by the delays of those before it).
    pub async fn start_late(upstream: u16, delay: Duration) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy port");
        let port = listener.local_addr().expect("proxy address").port();
        let (generation, _) = watch::channel(0u64);
        let frozen = generation.clone();
        let upstream = Arc::new(AtomicU16::new(upstream));
        let target = Arc::clone(&upstream);
        let silent = Arc::new(AtomicBool::new(false));
        let unanswered = Arc::clone(&silent);
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if unanswered.load(Ordering::SeqCst) {
                    // Open, and never read or answered.
                    tokio::spawn(async move {
                        let _client = client;
                        std::future::pending::<()>().await;
                    });
                    continue;
                }
                let upstream = target.load(Ordering::SeqCst);
                let mut frozen = frozen.subscribe();
                let born = *frozen.borrow();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    let watched = frozen.clone();
                    let live = move || *watched.borrow() == born;
                    tokio::select! {
                        _ = forward(&mut client, &mut server, delay, &live) => {}
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
            silent,
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

    /// The path goes silent: every connection open now, and every one made until
    /// [`Proxy::restore`], is never answered.
    pub fn silence(&self) {
        self.silent.store(true, Ordering::SeqCst);
        self.freeze();
    }

    /// Connections made from now on are forwarded again (those made silent stay silent).
    pub fn restore(&self) {
        self.silent.store(false, Ordering::SeqCst);
    }
}

/// Carries bytes both ways until either side closes, replies `delay` late, while `live`
/// holds: bytes read once it no longer does are never written (so a freeze takes effect for
/// everything sent after it, whenever the forwarding task learns of it).
async fn forward(
    client: &mut TcpStream,
    server: &mut TcpStream,
    delay: Duration,
    live: &(dyn Fn() -> bool + Sync),
) {
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    let (late, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let requests = async {
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = client_read.read(&mut buffer).await {
            if !live() {
                std::future::pending::<()>().await;
            }
            if server_write.write_all(&buffer[..n]).await.is_err() {
                break;
            }
        }
    };
    let replies_read = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = server_read.read(&mut buffer).await {
            if late
                .send((Instant::now() + delay, buffer[..n].to_vec()))
                .is_err()
            {
                break;
            }
        }
    };
    let replies_written = async move {
        while let Some((at, bytes)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if !live() {
                std::future::pending::<()>().await;
            }
            if client_write.write_all(&bytes).await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        _ = requests => {}
        _ = async { tokio::join!(replies_read, replies_written) } => {}
    }
}
