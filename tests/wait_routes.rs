//! `#[rate_limit(.., wait = "..")]` over HTTP, on a running server, on a harness-started
//! Redis and on the memory store: a request over its limit sleeps until its turn and runs
//! then, never earlier; a request whose turn is past its wait is refused at once and counts
//! nothing; a client that resets its connection while it waits gives its turn back; a worker
//! whose places for waiting requests are taken decides at once. The stores' reservations
//! themselves are tests/wait.rs's.

mod support;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use actix_web::{get, App, HttpServer, Responder};
use ratelimit_runtime::{
    coverage,
    key::RouteKey,
    rate_limit,
    settings::Failure,
    store::{CheckFuture, CheckRequest, MemoryStore, RedisStore, Store},
    Algorithm, IdentityPart, Limit, RateLimiter, Window,
};
use support::{Down, RedisServer};
use tokio::io::AsyncWriteExt;

/// When each call of `/batch` started.
static STARTS: Mutex<Vec<Instant>> = Mutex::new(Vec::new());

/// Ten a second (GCRA: a burst of ten, then one per 100 ms); a request waits up to 10 s.
#[rate_limit(
    limit = 10,
    window = "1s",
    algorithm = "gcra",
    identity = "ip",
    wait = "10s"
)]
#[get("/batch")]
async fn batch() -> impl Responder {
    STARTS.lock().unwrap().push(Instant::now());
    "done"
}

/// Two per two seconds (one per second after the burst); a request waits up to 500 ms.
#[rate_limit(
    limit = 2,
    window = "2s",
    algorithm = "gcra",
    identity = "ip",
    wait = "500ms"
)]
#[get("/brief")]
async fn brief() -> impl Responder {
    "done"
}

/// One per two seconds; a request waits up to 3 s.
#[rate_limit(
    limit = 1,
    window = "2s",
    algorithm = "gcra",
    identity = "ip",
    wait = "3s"
)]
#[get("/single")]
async fn single() -> impl Responder {
    "done"
}

/// One a second; a request waits up to 10 s.
#[rate_limit(
    limit = 1,
    window = "1s",
    algorithm = "gcra",
    identity = "ip",
    wait = "10s"
)]
#[get("/queue")]
async fn queue() -> impl Responder {
    "done"
}

/// One per ten seconds, waiting up to ten, limited in process while the store fails.
#[rate_limit(
    limit = 1,
    window = "10s",
    algorithm = "gcra",
    identity = "ip",
    wait = "10s",
    fail = "local"
)]
#[get("/local")]
async fn local() -> impl Responder {
    "done"
}

/// A server of `workers` on `store`, at most `max_waiting` requests waiting per worker: its
/// port and handle.
async fn serve(
    store: impl Store,
    workers: usize,
    max_waiting: usize,
) -> (u16, actix_web::dev::ServerHandle) {
    serve_shared(Arc::new(store), workers, max_waiting).await
}

/// [`serve`] on a store the test keeps a hold of.
async fn serve_shared(
    store: Arc<dyn Store>,
    workers: usize,
    max_waiting: usize,
) -> (u16, actix_web::dev::ServerHandle) {
    let limiter = RateLimiter::from_arc(store).failure(Failure::new().max_waiting(max_waiting));
    serve_limiter(limiter, workers).await
}

/// [`serve`] with `limiter`.
async fn serve_limiter(
    limiter: RateLimiter,
    workers: usize,
) -> (u16, actix_web::dev::ServerHandle) {
    let app = || {
        App::new()
            .service(batch)
            .service(brief)
            .service(single)
            .service(queue)
            .service(local)
    };
    let table = coverage::require_coverage(app().wrap(limiter.clone()))
        .await
        .expect("every route declared");
    // The route table shows each route's wait.
    assert!(table.to_string().contains("10/1s gcra wait 10s"), "{table}");
    assert!(
        table.to_json().contains("\"wait_ms\": 500"),
        "{}",
        table.to_json()
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let http = HttpServer::new(move || app().wrap(limiter.clone()))
        .workers(workers)
        .listen(listener)
        .unwrap()
        .run();
    let handle = http.handle();
    actix_web::rt::spawn(http);
    (port, handle)
}

/// `GET path`: its status and how long the answer took.
async fn get(port: u16, path: &str) -> (u16, Duration) {
    let started = Instant::now();
    let mut response = awc::Client::builder()
        .timeout(Duration::from_secs(20))
        .finish()
        .get(format!("http://127.0.0.1:{port}{path}"))
        .insert_header(("connection", "close"))
        .send()
        .await
        .expect("the server answers");
    let _ = response.body().await;
    (response.status().as_u16(), started.elapsed())
}

/// A hundred requests at once at ten per second, each willing to wait ten seconds: all are
/// served; the k-th handler to start starts no earlier than its turn, `(k − 9) × 100 ms`
/// after the first (a timer wakes late, never early; 5 ms for clocks read a moment apart),
/// and not much later.
async fn a_hundred_requests_are_served_at_their_turns(store: impl Store) {
    let (port, handle) = serve(store, 4, 1024).await;
    STARTS.lock().unwrap().clear();
    // Before the first check: no turn is counted from earlier than this.
    let sent = Instant::now();
    let answers = futures_util::future::join_all((0..100).map(|_| get(port, "/batch"))).await;
    assert!(
        answers.iter().all(|(status, _)| *status == 200),
        "{answers:?}"
    );
    let mut starts = STARTS.lock().unwrap().clone();
    starts.sort_unstable();
    assert_eq!(starts.len(), 100);
    for (k, start) in starts.iter().enumerate() {
        let turn = Duration::from_millis(k.saturating_sub(9) as u64 * 100);
        let at = start.duration_since(sent);
        // 2 ms for the store's clock and this one read a moment apart, in whole ms.
        assert!(
            at + Duration::from_millis(2) >= turn,
            "handler {k} started {at:?} after the requests were sent, before its turn {turn:?}"
        );
        assert!(
            at <= turn + Duration::from_millis(1_500),
            "handler {k} started {at:?} after the requests were sent, long after its turn {turn:?}"
        );
    }
    handle.stop(true).await;
}

#[actix_web::test]
async fn a_hundred_requests_at_ten_a_second_are_served_at_their_turns() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url()).build().await.unwrap();
    a_hundred_requests_are_served_at_their_turns(store).await;
    a_hundred_requests_are_served_at_their_turns(MemoryStore::new()).await;
}

/// Two pass at once; the third's turn is a second away, past its 500 ms wait: refused at
/// once, counting nothing (the store's next turn is still a second away, not two), so that
/// a request sent once that turn is within the wait waits for it and is served.
#[actix_web::test]
async fn past_its_wait_a_request_is_refused_at_once_and_counts_nothing() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url()).build().await.unwrap();
    let store: Arc<dyn Store> = Arc::new(store);
    let (port, handle) = serve_shared(Arc::clone(&store), 1, 1024).await;
    for _ in 0..2 {
        assert_eq!(get(port, "/brief").await.0, 200);
    }
    let (status, took) = get(port, "/brief").await;
    assert_eq!(status, 429);
    assert!(took < Duration::from_millis(400), "refused after {took:?}");
    // Nothing counted: the next turn is at most a second away (two, had the refusal counted).
    let next = next_turn(&store, "/brief", 2).await;
    assert!(
        next <= Duration::from_secs(1),
        "the next turn is {next:?} away"
    );
    // Once it is within the wait, a request waits for it and is served, not before.
    let mut next = next;
    while next > Duration::from_millis(400) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        next = next_turn(&store, "/brief", 2).await;
    }
    let (status, took) = get(port, "/brief").await;
    assert_eq!(status, 200);
    assert!(
        took + Duration::from_millis(50) >= next,
        "served after {took:?}, its turn {next:?} away"
    );
    handle.stop(true).await;
}

/// One per two seconds: the second request's turn is two seconds away (the store shows it
/// counted); its client resets the connection while it waits, which gives the turn back
/// (the store shows it free): the third request waits for that turn (its wait is 3 s)
/// instead of being refused (the turn after, four seconds away).
#[actix_web::test]
async fn a_client_that_leaves_while_it_waits_gives_its_turn_back() {
    let server = RedisServer::start();
    let redis = RedisStore::builder(server.url()).build().await.unwrap();
    leaving_gives_the_turn_back(redis).await;
    leaving_gives_the_turn_back(MemoryStore::new()).await;
}

/// How long until the next request of this host to `path` (GCRA, `max` per two seconds)
/// could run, as its store tells.
async fn next_turn(store: &Arc<dyn Store>, path: &str, max: u32) -> Duration {
    let key = RouteKey::new("rl", "GET", path, &[(IdentityPart::Ip, "127.0.0.1")]);
    let limits = [Limit::new(max, Window::from_secs(2), Algorithm::Gcra)];
    let request = CheckRequest {
        key: &key,
        limits: &limits,
        now_millis: None,
    };
    store
        .peek(request)
        .await
        .expect("the store answers")
        .retry_after()
}

/// Waits until `/single`'s next turn is more (`above`) or no more than `bound` away.
async fn until_next_turn(store: &Arc<dyn Store>, above: bool, bound: Duration) {
    let started = Instant::now();
    while (next_turn(store, "/single", 1).await > bound) != above {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the turn never moved"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn leaving_gives_the_turn_back(store: impl Store) {
    let store: Arc<dyn Store> = Arc::new(store);
    let (port, handle) = serve_shared(Arc::clone(&store), 1, 1024).await;
    let started = Instant::now();
    assert_eq!(get(port, "/single").await.0, 200);
    let mut waiting = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    waiting
        .write_all(b"GET /single HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    // Its turn is counted (the next one is four seconds after the first) ...
    until_next_turn(&store, true, Duration::from_millis(2_500)).await;
    // A reset, not a close: the server reads an error and drops the request. (A linger of
    // zero never blocks the thread; `set_zero_linger` is newer than the tokio this allows.)
    #[allow(deprecated)]
    waiting.set_linger(Some(Duration::ZERO)).unwrap();
    drop(waiting);
    // ... and given back (the next one is two seconds after the first again).
    until_next_turn(&store, false, Duration::from_millis(2_000)).await;
    let (status, took) = get(port, "/single").await;
    assert_eq!(status, 200, "the turn was not given back");
    let served_at = started.elapsed();
    assert!(
        served_at >= Duration::from_millis(1_950) && took < Duration::from_millis(2_500),
        "served {served_at:?} after the first, having waited {took:?}"
    );
    handle.stop(true).await;
}

/// One worker with two places for waiting requests, one request a second (a wait of ten):
/// of four at once,
/// one runs at once, two wait for their turns, and the fourth, finding no place, is
/// decided at once: refused, as on a route without `wait`.
#[actix_web::test]
async fn a_worker_whose_waiting_places_are_taken_decides_at_once() {
    let (port, handle) = serve(MemoryStore::new(), 1, 2).await;
    let answers = futures_util::future::join_all((0..4).map(|_| get(port, "/queue"))).await;
    let mut served: Vec<Duration> = answers
        .iter()
        .filter(|(status, _)| *status == 200)
        .map(|(_, took)| *took)
        .collect();
    served.sort_unstable();
    let refused: Vec<_> = answers
        .iter()
        .filter(|(status, _)| *status == 429)
        .collect();
    assert_eq!((served.len(), refused.len()), (3, 1), "{answers:?}");
    assert!(refused[0].1 < Duration::from_millis(500), "{answers:?}");
    assert!(served[0] < Duration::from_millis(500), "{answers:?}");
    assert!(served[1] >= Duration::from_millis(950), "{answers:?}");
    assert!(served[2] >= Duration::from_millis(1_950), "{answers:?}");
    // The places came back: two more at once both wait for their turns (a worker whose
    // places were still taken would decide both at once, and refuse them).
    let again = futures_util::future::join_all((0..2).map(|_| get(port, "/queue"))).await;
    assert!(again.iter().all(|(status, _)| *status == 200), "{again:?}");
    handle.stop(true).await;
}

/// A request that waited is told what is left at its turn, not at its arrival: one a
/// second (GCRA), the second request's turn a second on, after which the budget is whole a
/// second later (a second more than it would say counted at its arrival).
#[actix_web::test]
async fn a_request_that_waited_is_told_what_is_left_at_its_turn() {
    let (port, handle) = serve(MemoryStore::new(), 1, 1024).await;
    assert_eq!(get(port, "/queue").await.0, 200);
    let started = Instant::now();
    let mut response = awc::Client::builder()
        .timeout(Duration::from_secs(20))
        .finish()
        .get(format!("http://127.0.0.1:{port}/queue"))
        .send()
        .await
        .expect("the server answers");
    let _ = response.body().await;
    assert_eq!(response.status().as_u16(), 200);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok());
    assert_eq!(
        (header("x-ratelimit-remaining"), header("x-ratelimit-reset")),
        (Some("0"), Some("1"))
    );
    handle.stop(true).await;
}

/// A store of the app's own that checks and does not reserve.
struct OnlyChecks(MemoryStore);

impl Store for OnlyChecks {
    fn check<'a>(&'a self, request: CheckRequest<'a>) -> CheckFuture<'a> {
        self.0.check(request)
    }

    fn kind(&self) -> &'static str {
        "only-checks"
    }
}

/// The second of two requests at once on `path` (one per second or slower, a long wait):
/// its status and how long it took.
async fn second(port: u16, path: &str) -> (u16, Duration) {
    assert_eq!(get(port, path).await.0, 200);
    get(port, path).await
}

/// Where the guide says a route that waits decides at once, it does: while the store fails
/// on a route that fails `local` (the process's own count decides), for requests weighed by
/// `RateLimiter::cost_of`, and on a store of the app's own without `Store::reserve`.
#[actix_web::test]
async fn what_cannot_wait_is_decided_at_once() {
    let at_once = |(status, took): (u16, Duration)| {
        assert_eq!(status, 429);
        assert!(took < Duration::from_millis(500), "refused after {took:?}");
    };
    let (port, handle) = serve(Down::default(), 1, 1024).await;
    at_once(second(port, "/local").await);
    handle.stop(true).await;

    let weighed = RateLimiter::new(MemoryStore::new()).cost_of("GET /queue", |_| 1);
    let (port, handle) = serve_limiter(weighed, 1).await;
    at_once(second(port, "/queue").await);
    handle.stop(true).await;

    let (port, handle) = serve(OnlyChecks(MemoryStore::new()), 1, 1024).await;
    at_once(second(port, "/queue").await);
    handle.stop(true).await;
}
