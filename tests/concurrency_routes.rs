//! `#[rate_limit(concurrency = N)]` over HTTP, on a running server (four workers), on a
//! harness-started Redis and on the memory store: at most N handlers of one client run at
//! once; the others get a 429 with `Retry-After: 1` and `qu="concurrent-requests"` in
//! `RateLimit-Policy`; a place is held until the response body has been sent (or dropped,
//! its client gone), renewed while its request runs past the lease, and given back by a
//! request counted after the fact. The stores' own behaviour is tests/concurrency.rs's.

mod support;

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use actix_web::{
    get, middleware::from_fn, web, web::Bytes, App, HttpResponse, HttpServer, Responder,
};
use futures_util::StreamExt;
use ratelimit_runtime::{
    coverage, rate_limit,
    store::{MemoryStore, RedisStore, Store},
    Budget, RateLimiter,
};
use support::{auth::answers_401, RedisServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

static RUNNING: AtomicUsize = AtomicUsize::new(0);
static MOST: AtomicUsize = AtomicUsize::new(0);

/// Three at once per address; the handler counts how many of its calls run together.
#[rate_limit(concurrency = 3, identity = "ip", fail = "closed")]
#[get("/slow")]
async fn slow() -> impl Responder {
    let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
    MOST.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(150)).await;
    RUNNING.fetch_sub(1, Ordering::SeqCst);
    "done"
}

/// One at a time, its body sent in 40 chunks 50 ms apart.
#[rate_limit(concurrency = 1, identity = "ip", fail = "closed")]
#[get("/stream")]
async fn stream() -> HttpResponse {
    let chunks = futures_util::stream::iter(0..40).then(|i| async move {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok::<_, std::io::Error>(Bytes::from_static(b"chunk\n"))
    });
    HttpResponse::Ok().streaming(chunks)
}

/// One at a time with a lease of one second, the handler running 1.6 s: past its lease,
/// held by its renewals.
#[rate_limit(concurrency = 1, lease = "1s", identity = "ip", fail = "closed")]
#[get("/long")]
async fn long() -> impl Responder {
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    "done"
}

/// One at a time, behind an auth layer that refuses without `Authorization: Basic right`.
#[rate_limit(concurrency = 1, identity = "ip", fail = "closed")]
#[get("/held")]
async fn held() -> impl Responder {
    tokio::time::sleep(Duration::from_millis(800)).await;
    "done"
}

/// Two at once beside 100 a minute.
#[rate_limit(concurrency = 2, identity = "ip")]
#[rate_limit(limit = 100, window = "1m", identity = "ip")]
#[get("/both")]
async fn both() -> impl Responder {
    "done"
}

/// A server of four workers on `store`, on a free port: its port and handle.
async fn serve(store: impl Store) -> (u16, actix_web::dev::ServerHandle) {
    let limiter = RateLimiter::new(store);
    let app = || {
        App::new()
            .service(web::scope("/api").service(held).wrap(from_fn(answers_401)))
            .service(slow)
            .service(stream)
            .service(long)
            .service(both)
    };
    coverage::require_coverage(app().wrap(limiter.clone()))
        .await
        .expect("every route declared");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let http = HttpServer::new(move || app().wrap(limiter.clone()))
        .workers(4)
        .listen(listener)
        .unwrap()
        .run();
    let handle = http.handle();
    actix_web::rt::spawn(http);
    (port, handle)
}

fn client() -> awc::Client {
    awc::Client::builder()
        .timeout(Duration::from_secs(10))
        .finish()
}

/// `GET path`: status, `Retry-After` and `RateLimit-Policy`.
async fn get(port: u16, path: &str) -> (u16, Option<String>, Option<String>) {
    let mut response = client()
        .get(format!("http://127.0.0.1:{port}{path}"))
        .insert_header(("connection", "close"))
        .send()
        .await
        .expect("the server answers");
    let _ = response.body().await;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    (
        response.status().as_u16(),
        header("retry-after"),
        header("ratelimit-policy"),
    )
}

/// `GET path` until it answers 200 (its body left unread), for at most `within`: how long
/// it took.
async fn until_served(port: u16, path: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let response = client()
            .get(format!("http://127.0.0.1:{port}{path}"))
            .insert_header(("connection", "close"))
            .send()
            .await
            .expect("the server answers");
        if response.status().as_u16() == 200 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{path} still refused after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// 40 requests at once, three places: never more than three handlers run, at least three
/// are served, the others are refused with the concurrency limit's headers; once all have
/// answered, every place is back.
async fn at_most_n_handlers_run_at_once(store: impl Store) {
    let (port, handle) = serve(store).await;
    MOST.store(0, Ordering::SeqCst);
    let answers = futures_util::future::join_all((0..40).map(|_| get(port, "/slow"))).await;
    let served = answers.iter().filter(|a| a.0 == 200).count();
    let refused: Vec<_> = answers.iter().filter(|a| a.0 == 429).collect();
    assert_eq!(served + refused.len(), 40, "{answers:?}");
    assert!(served >= 3, "{answers:?}");
    assert!(!refused.is_empty(), "{answers:?}");
    assert!(
        MOST.load(Ordering::SeqCst) <= 3,
        "{} ran at once",
        MOST.load(Ordering::SeqCst)
    );
    for (_, retry, policy) in refused {
        assert_eq!(retry.as_deref(), Some("1"));
        let policy = policy.as_deref().unwrap_or_default();
        assert!(
            policy.ends_with(";q=3;qu=\"concurrent-requests\""),
            "{policy}"
        );
    }
    // Given back as each answered: three at once pass again.
    let again = futures_util::future::join_all((0..3).map(|_| get(port, "/slow"))).await;
    assert!(again.iter().all(|a| a.0 == 200), "{again:?}");
    // The headers tell what is left once the answer ends, its own place back: all three.
    let mut alone = client()
        .get(format!("http://127.0.0.1:{port}/slow"))
        .send()
        .await
        .expect("served");
    let _ = alone.body().await;
    let header = |name: &str| alone.headers().get(name).and_then(|v| v.to_str().ok());
    assert_eq!(header("ratelimit"), Some("\"slow\";r=3;t=1"));
    assert_eq!(
        (header("x-ratelimit-remaining"), header("x-ratelimit-reset")),
        (Some("3"), Some("0"))
    );
    // A client that sends its next request once it has the answer is never refused by the
    // places: each goes back before its answer ends. Both limits are in the policy.
    for _ in 0..10 {
        let (status, _, policy) = get(port, "/both").await;
        assert_eq!(status, 200);
        assert_eq!(
            policy.as_deref(),
            Some("\"both.0\";q=2;qu=\"concurrent-requests\", \"both.1\";q=100;w=60")
        );
    }
    handle.stop(true).await;
}

/// One after the other: the handler's counters are the process's.
#[actix_web::test]
async fn at_most_n_handlers_run_at_once_on_redis_and_in_memory() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url()).build().await.unwrap();
    at_most_n_handlers_run_at_once(store).await;
    at_most_n_handlers_run_at_once(MemoryStore::new()).await;
}

/// A place is the body's until it has been sent: a second request is refused while the
/// first one's body streams, served once it is done; a client that reads one chunk and goes
/// away gives its place back when the server finds it gone.
#[actix_web::test]
async fn a_place_is_held_until_the_body_is_sent_or_its_client_is_gone() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url()).build().await.unwrap();
    let (port, handle) = serve(store).await;
    let url = format!("http://127.0.0.1:{port}/stream");
    let client = client();
    let mut first = client.get(&url).send().await.expect("served");
    assert_eq!(first.status().as_u16(), 200);
    assert!(first.next().await.is_some(), "a first chunk");
    assert_eq!(
        get(port, "/stream").await.0,
        429,
        "the body is still being sent"
    );
    let mut sent = 0;
    while let Some(chunk) = first.next().await {
        sent += chunk.expect("a chunk").len();
    }
    assert_eq!(sent, 39 * 6);

    // The place went back before the end of the body reached the client. Gone after the
    // first chunk: the server's next writes fail, the body is dropped.
    let mut gone = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    gone.write_all(b"GET /stream HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 256];
    let read = gone.read(&mut head).await.unwrap();
    assert!(
        head[..read].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&head[..read])
    );
    drop(gone);
    let took = until_served(port, "/stream", Duration::from_secs(1)).await;
    assert!(
        took < Duration::from_secs(1),
        "given back {took:?} after the client left"
    );
    handle.stop(true).await;
}

/// A request running past its lease keeps its place (renewed every third of the lease):
/// refused while it runs, served after.
#[actix_web::test]
async fn a_place_is_renewed_while_its_request_runs_past_the_lease() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url()).build().await.unwrap();
    let (port, handle) = serve(store).await;
    let first = actix_web::rt::spawn(async move { get(port, "/long").await.0 });
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let (status, retry, _) = get(port, "/long").await;
    assert_eq!(
        (status, retry.as_deref()),
        (429, Some("1")),
        "past the lease, still held"
    );
    assert_eq!(first.await.unwrap(), 200);
    until_served(port, "/long", Duration::from_secs(2)).await;
    handle.stop(true).await;
}

/// A request the auth layer in front refuses is counted after the fact by the route's rate
/// limits, and takes no place: with every place held, it still gets the auth layer's 401,
/// not a 429.
#[actix_web::test]
async fn a_request_refused_in_front_keeps_its_refusal_when_every_place_is_held() {
    let (port, handle) = serve(MemoryStore::new()).await;
    let url = format!("http://127.0.0.1:{port}/api/held");
    let holder = actix_web::rt::spawn({
        let url = url.clone();
        async move {
            let response = client()
                .get(url)
                .insert_header(("authorization", "Basic right"))
                .send()
                .await;
            response.map(|r| r.status().as_u16()).ok()
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let right = client()
        .get(&url)
        .insert_header(("authorization", "Basic right"))
        .send()
        .await
        .expect("answered");
    assert_eq!(right.status().as_u16(), 429, "the place is held");
    let refused = client().get(&url).send().await.expect("answered");
    assert_eq!(
        refused.status().as_u16(),
        401,
        "the auth layer's refusal stands"
    );
    assert_eq!(holder.await.unwrap(), Some(200));
    handle.stop(true).await;
}

/// One at a time; with `x-hold`, the handler hands its `Budget` to a task and runs long.
#[rate_limit(concurrency = 1, identity = "ip", fail = "closed")]
#[get("/kept")]
async fn kept(req: actix_web::HttpRequest, budget: Budget) -> impl Responder {
    if req.headers().contains_key("x-hold") {
        actix_web::rt::spawn(async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(budget);
        });
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    "done"
}

/// A request cancelled while its handler runs (an outer timeout drops it) gives its place
/// back, though its handler handed the request's `Budget` to a task that outlives it.
#[actix_web::test]
async fn a_cancelled_request_gives_its_place_back_whoever_keeps_its_budget() {
    use actix_web::{dev::Service, test};
    let app = test::init_service(
        App::new()
            .service(kept)
            .wrap(RateLimiter::new(MemoryStore::new())),
    )
    .await;
    let request = || {
        test::TestRequest::get()
            .uri("/kept")
            .peer_addr("203.0.113.9:4000".parse().unwrap())
    };
    let running = app.call(request().insert_header(("x-hold", "1")).to_request());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), running)
            .await
            .is_err(),
        "still running when cancelled"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let next = app.call(request().to_request()).await.unwrap();
    assert_eq!(
        next.status().as_u16(),
        200,
        "the cancelled request's place is back"
    );
}

/// One at a time beside 100 a minute, limited in each process while the store is down,
/// behind the auth layer.
#[rate_limit(concurrency = 1, identity = "ip", fail = "local")]
#[rate_limit(limit = 100, window = "1m", identity = "ip")]
#[get("/local")]
async fn local() -> impl Responder {
    "done"
}

/// While the store is down, requests the auth layer in front refuses take no local place
/// either: the next authorised request is served.
#[actix_web::test]
async fn requests_refused_in_front_take_no_local_place_while_the_store_is_down() {
    use actix_web::test;
    let app = test::init_service(
        App::new()
            .service(web::scope("/api").service(local).wrap(from_fn(answers_401)))
            .wrap(RateLimiter::new(support::Down::default())),
    )
    .await;
    let request = || {
        test::TestRequest::get()
            .uri("/api/local")
            .peer_addr("203.0.113.10:4000".parse().unwrap())
    };
    for _ in 0..3 {
        let refused = test::call_service(&app, request().to_request()).await;
        assert_eq!(refused.status().as_u16(), 401);
    }
    for _ in 0..3 {
        let right = request().insert_header(("authorization", "Basic right"));
        let served = test::call_service(&app, right.to_request()).await;
        assert_eq!(
            served.status().as_u16(),
            200,
            "its place was free, and given back"
        );
        // Read to its end, as a server sends it: the place goes back before the end.
        assert_eq!(test::read_body(served).await, "done");
    }
}
