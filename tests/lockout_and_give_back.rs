//! Lockouts (`block`) and give-backs (`count = "failures"`, `Budget`, `RateLimiter::reset`)
//! in every store, for every algorithm and a stack: decided in the check's own call, exact
//! under concurrency, and touching no other client's keys.

mod support;

use std::sync::Arc;

use futures_util::future::join_all;
use ratelimit_runtime::{
    key::RouteKey,
    policy::{Algorithm, Count, Limit, Window},
    store::{AdjustRequest, Adjustment, Receipt, Store},
    IdentityPart,
};
use support::{Backend, T0, W};

const BLOCK: u64 = 900_000;

/// 3 per minute with `algorithm`, locking out for 15 minutes.
fn blocking(algorithm: Algorithm) -> Limit {
    Limit::new(3, Window::from_millis(W), algorithm)
        .counting(Count::Failures)
        .blocking(Window::from_millis(BLOCK))
}

/// Every single-algorithm limit, and a stack of two (GCRA per second, then `algorithm`).
fn shapes() -> Vec<Vec<Limit>> {
    let mut shapes: Vec<Vec<Limit>> = Algorithm::ALL.iter().map(|a| vec![blocking(*a)]).collect();
    shapes.push(vec![
        Limit::new(100, Window::from_secs(1), Algorithm::Gcra),
        blocking(Algorithm::SlidingWindow),
    ]);
    shapes
}

fn key(name: &str) -> RouteKey {
    RouteKey::new("rl", "POST", "/login", &[(IdentityPart::Username, name)])
}

async fn adjust(
    store: &dyn Store,
    key: &RouteKey,
    limits: &[Limit],
    now: u64,
    change: Adjustment<'_>,
) -> u64 {
    store
        .adjust(AdjustRequest::new(key, limits, Some(now), change))
        .await
        .unwrap_or_else(|e| panic!("{} store: {e}", store.kind()))
}

fn give_back(units: u32, receipt: Option<&Receipt>) -> Adjustment<'_> {
    Adjustment::GiveBack { units, receipt }
}

async fn backends() -> Vec<(&'static str, Backend)> {
    vec![
        ("redis", Backend::standalone().await),
        ("cluster", Backend::cluster().await),
        ("memory", Backend::memory()),
    ]
}

#[actix_web::test]
async fn a_refusal_locks_the_client_out_for_the_block_then_the_budget_is_whole() {
    for (name, backend) in backends().await {
        for limits in shapes() {
            let shape = format!("{name} {limits:?}");
            let alice = key(&format!(
                "alice{}",
                limits.len() * 10 + limits[0].algorithm().index()
            ));
            for _ in 0..3 {
                assert!(backend.check(&alice, &limits, T0).await.allowed, "{shape}");
            }
            let refused = backend.check(&alice, &limits, T0 + 1).await;
            assert!(!refused.allowed, "{shape}");
            assert_eq!(refused.retry_after().as_millis() as u64, BLOCK, "{shape}");
            // Locked out: refused whatever the limit's own count would say, the wait
            // counting down to the block's end.
            for at in [T0 + 2 * W, T0 + BLOCK] {
                let still = backend.check(&alice, &limits, at).await;
                assert!(!still.allowed, "{shape} at {at}");
                assert_eq!(
                    still.retry_after().as_millis() as u64,
                    T0 + 1 + BLOCK - at,
                    "{shape}"
                );
            }
            // The block over, the whole budget again.
            let after = T0 + 1 + BLOCK;
            for left in (0..3).rev() {
                let decision = backend.check(&alice, &limits, after).await;
                assert!(decision.allowed, "{shape}: {decision:?}");
                let state = decision.limits.last().unwrap();
                assert_eq!(state.remaining, left, "{shape}");
            }
            // Another client was never locked out.
            let bob = key(&format!(
                "bob{}",
                limits.len() * 10 + limits[0].algorithm().index()
            ));
            assert!(
                backend.check(&bob, &limits, T0 + 2).await.allowed,
                "{shape}"
            );
        }
        backend.finish().await;
    }
}

/// A block shorter than the time the refused budget needs to be whole again lasts that long
/// instead: a request every 100 ms for ten minutes under 3 per hour with a 1 s block passes
/// 3 (it passed one budget per second, 1,800, when the lockout ended at its block).
#[actix_web::test]
async fn a_block_shorter_than_the_window_never_weakens_the_limit() {
    const HOUR: u64 = 3_600_000;
    for (name, backend) in backends().await {
        let short = |algorithm| {
            Limit::new(3, Window::from_millis(HOUR), algorithm).blocking(Window::from_millis(1_000))
        };
        let mut shapes: Vec<Vec<Limit>> = Algorithm::ALL.iter().map(|a| vec![short(*a)]).collect();
        shapes.push(vec![
            Limit::new(100, Window::from_secs(1), Algorithm::Gcra),
            short(Algorithm::SlidingLog),
        ]);
        for (i, limits) in shapes.iter().enumerate() {
            let shape = format!("{name} {limits:?}");
            let dave = key(&format!("dave{i}"));
            let mut passed = 0;
            let mut first_refusal = None;
            for step in 0..6_000 {
                let decision = backend.check(&dave, limits, T0 + step * 100).await;
                if decision.allowed {
                    passed += 1;
                } else if first_refusal.is_none() {
                    first_refusal = Some(decision.retry_after().as_millis() as u64);
                }
            }
            assert_eq!(passed, 3, "{shape}");
            // The wait the first refusal tells is the lockout, as long as the budget needs
            // (a sliding window's counted requests weigh until the end of the next window).
            let wait = first_refusal.expect("refused");
            assert!(wait > 1_000 && wait <= 2 * HOUR, "{shape}: {wait}");
        }
        backend.finish().await;
    }
}

#[actix_web::test]
async fn a_unit_given_back_with_its_receipt_returns_to_where_it_was_counted() {
    for (name, backend) in backends().await {
        let store = backend.store();
        for limits in shapes() {
            let shape = format!("{name} {limits:?}");
            let carol = key(&format!(
                "carol{}",
                limits.len() * 10 + limits[0].algorithm().index()
            ));
            let mut receipts = Vec::new();
            for i in 0..3 {
                let decision = backend.check(&carol, &limits, T0 + i).await;
                assert!(decision.allowed, "{shape}");
                receipts.push(decision.receipt.expect("an allowed check has a receipt"));
            }
            // The second request succeeded: its unit goes back, once.
            let given = adjust(
                &*store,
                &carol,
                &limits,
                T0 + 5,
                give_back(1, Some(&receipts[1])),
            )
            .await;
            assert_eq!(given, limits.len() as u64, "{shape}");
            assert!(
                backend.check(&carol, &limits, T0 + 6).await.allowed,
                "{shape}"
            );
            let refused = backend.check(&carol, &limits, T0 + 7).await;
            assert!(!refused.allowed, "{shape}");
        }
        backend.finish().await;
    }
}

#[actix_web::test]
async fn concurrent_give_backs_never_pass_a_whole_budget_and_reset_touches_no_other_key() {
    for (name, backend) in backends().await {
        let store: Arc<dyn Store> = backend.store();
        for algorithm in Algorithm::ALL {
            let shape = format!("{name} {algorithm}");
            let limits = [Limit::new(10, Window::from_millis(W), algorithm)];
            let dave = key(&format!("dave-{algorithm}"));
            let erin = key(&format!("erin-{algorithm}"));
            for _ in 0..10 {
                assert!(backend.check(&dave, &limits, T0).await.allowed, "{shape}");
            }
            for _ in 0..4 {
                assert!(backend.check(&erin, &limits, T0).await.allowed, "{shape}");
            }
            // 25 concurrent give-backs of one unit: exactly the 10 spent come back.
            let given: u64 = join_all((0..25).map(|_| {
                let (store, dave) = (Arc::clone(&store), dave.clone());
                async move { adjust(&*store, &dave, &limits, T0 + 1, give_back(1, None)).await }
            }))
            .await
            .into_iter()
            .sum();
            assert_eq!(given, 10, "{shape}");
            let allowed = join_all((0..30).map(|_| backend.check(&dave, &limits, T0 + 2)))
                .await
                .iter()
                .filter(|d| d.allowed)
                .count();
            assert_eq!(allowed, 10, "{shape}: the budget is whole, not more");
            // A reset of Dave leaves Erin's count as it was.
            // (Counted as at T0, when Erin's requests were: GCRA's backlog is then whole
            // intervals.)
            let erin_before = backend.counted(&erin, &limits[0], T0).await;
            adjust(&*store, &dave, &limits, T0 + 3, Adjustment::Reset).await;
            assert_eq!(backend.counted(&dave, &limits[0], T0).await, 0, "{shape}");
            assert_eq!(
                backend.counted(&erin, &limits[0], T0).await,
                erin_before,
                "{shape}"
            );
            assert_eq!(erin_before, 4, "{shape}");
        }
        backend.finish().await;
    }
}

#[actix_web::test]
async fn a_reset_ends_a_lockout() {
    for (name, backend) in backends().await {
        let store = backend.store();
        let limits = [blocking(Algorithm::Gcra)];
        let frank = key("frank");
        for _ in 0..4 {
            backend.check(&frank, &limits, T0).await;
        }
        assert!(
            !backend.check(&frank, &limits, T0 + W).await.allowed,
            "{name}"
        );
        adjust(&*store, &frank, &limits, T0 + W, Adjustment::Reset).await;
        assert!(
            backend.check(&frank, &limits, T0 + W).await.allowed,
            "{name}"
        );
        backend.finish().await;
    }
}

/// On a sliding log a receipt gives back one request logged at its time, as a window's
/// counter would: its own member, or one of the same time when a give-back without a
/// receipt took that one; and nothing once the request left the window.
#[actix_web::test]
async fn a_sliding_log_receipt_gives_back_one_request_of_its_time_while_it_counts() {
    for (name, backend) in backends().await {
        let store = backend.store();
        let limits = [Limit::new(3, Window::from_millis(W), Algorithm::SlidingLog)];
        // Which member a give-back without a receipt takes is the store's choice (Redis: the
        // newest, the later receipt's as a rule): the later receipt goes back first.
        for client in 0..16 {
            let shape = format!("{name} client {client}");
            let grace = key(&format!("grace{client}"));
            let mut receipts = Vec::new();
            for _ in 0..2 {
                let decision = backend.check(&grace, &limits, T0).await;
                assert!(decision.allowed, "{shape}");
                receipts.push(decision.receipt.expect("an allowed check has a receipt"));
            }
            let given = [
                adjust(&*store, &grace, &limits, T0 + 1, give_back(1, None)).await,
                adjust(
                    &*store,
                    &grace,
                    &limits,
                    T0 + 2,
                    give_back(1, Some(&receipts[1])),
                )
                .await,
                adjust(
                    &*store,
                    &grace,
                    &limits,
                    T0 + 3,
                    give_back(1, Some(&receipts[0])),
                )
                .await,
            ];
            assert_eq!(
                given,
                [1, 1, 0],
                "{shape}: two requests counted, two given back"
            );
            assert_eq!(
                backend.counted(&grace, &limits[0], T0 + 4).await,
                0,
                "{shape}"
            );
        }
        let heidi = key("heidi");
        let decision = backend.check(&heidi, &limits, T0).await;
        let receipt = decision.receipt.expect("an allowed check has a receipt");
        // At T0 + W the request logged at T0 no longer counts: nothing to give back.
        let late = adjust(
            &*store,
            &heidi,
            &limits,
            T0 + W,
            give_back(1, Some(&receipt)),
        )
        .await;
        assert_eq!(late, 0, "{name}: the request left the window");
        backend.finish().await;
    }
}

/// A window's receipt gives back nothing once its window counts no more (a fixed window's
/// next window; a sliding window's window after next), though Redis keeps the field until
/// the key expires; while the previous window still weighs in a sliding window, its unit
/// goes back there. Every store answers alike.
#[actix_web::test]
async fn a_window_receipt_gives_back_nothing_once_its_window_counts_no_more() {
    // T0 is a whole number of windows (the harness's windows start there).
    assert_eq!(T0 % W, 0);
    for (name, backend) in backends().await {
        let store = backend.store();
        for (algorithm, still, gone) in [
            (Algorithm::FixedWindow, None, T0 + W),
            (Algorithm::SlidingWindow, Some(T0 + W), T0 + 2 * W),
        ] {
            let limits = [Limit::new(3, Window::from_millis(W), algorithm)];
            let shape = format!("{name} {algorithm:?}");
            let ivan = key(&format!("ivan-{}", algorithm.index()));
            let mut receipts = Vec::new();
            for _ in 0..2 {
                let decision = backend.check(&ivan, &limits, T0 + 1).await;
                assert!(decision.allowed, "{shape}");
                receipts.push(decision.receipt.expect("an allowed check has a receipt"));
            }
            if let Some(at) = still {
                let given = adjust(
                    &*store,
                    &ivan,
                    &limits,
                    at,
                    give_back(1, Some(&receipts[0])),
                )
                .await;
                assert_eq!(given, 1, "{shape}: the previous window still weighs in");
            }
            let given = adjust(
                &*store,
                &ivan,
                &limits,
                gone,
                give_back(1, Some(&receipts[1])),
            )
            .await;
            assert_eq!(given, 0, "{shape}: the receipt's window counts no more");
        }
        backend.finish().await;
    }
}
