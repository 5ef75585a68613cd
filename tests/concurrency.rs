//! Concurrency limits (`Limit::concurrent`, `#[rate_limit(concurrency = N)]`) in the store, on
//! every store: `RedisStore` on a harness-started server and on Valkey, `RedisClusterStore` on
//! a harness-started 3-master cluster, and `MemoryStore`. A check takes a place while fewer
//! than N are held; a release gives it back; a renewal holds it for another lease; a place
//! not renewed is free once its lease has passed. Time is injected.

mod support;

use ratelimit_runtime::{
    key::RouteKey,
    store::{AdjustRequest, Adjustment, Decision, Receipt},
    Algorithm, Identity, IdentityPart, Limit, Window,
};
use support::{limit_states, Backend, T0, W};

on_every_store!(
    places_are_taken_given_back_renewed_and_expire_with_their_lease,
    a_stack_with_a_rate_limit_is_all_or_nothing_and_a_release_leaves_the_rate_alone,
    five_hundred_concurrent_checks_take_exactly_n_places,
    a_place_counted_by_another_identity_than_the_rate_goes_back_by_its_receipt,
);

const LEASE: u64 = 2_000;

fn client(ip: &str) -> RouteKey {
    RouteKey::new("rl", "POST", "/export", &[(IdentityPart::Ip, ip)])
}

fn places(n: u32) -> Limit {
    Limit::concurrent(n, Window::from_millis(LEASE))
}

fn receipt(decision: &Decision) -> Receipt {
    decision
        .receipt
        .clone()
        .expect("an allowed check gives a receipt")
}

/// A release (`renew: false`) or renewal of the place `receipt` took, at `now`.
async fn lease(
    backend: &Backend,
    key: &RouteKey,
    limits: &[Limit],
    receipt: &Receipt,
    now: u64,
    renew: bool,
) -> u64 {
    let change = if renew {
        Adjustment::Renew { receipt }
    } else {
        Adjustment::Release { receipt }
    };
    backend
        .store()
        .adjust(AdjustRequest::new(key, limits, Some(now), change))
        .await
        .expect("the store answers")
}

/// Three places: three checks take them, a fourth is refused (the store's wait is the
/// oldest place's lease; the middleware tells clients a second at most). A release frees one
/// at once, once only; a renewal holds a place past its first lease; a place not renewed is
/// free when its lease has passed, and renewing it then answers 0.
async fn places_are_taken_given_back_renewed_and_expire_with_their_lease(backend: &Backend) {
    let key = client("203.0.113.1");
    let limits = [places(3)];
    let mut taken = Vec::new();
    for left in [2, 1, 0] {
        let decision = backend.check(&key, &limits, T0).await;
        assert_eq!(limit_states(&decision)[0], (true, left, 0, LEASE));
        taken.push(receipt(&decision));
    }
    let refused = backend.check(&key, &limits, T0 + 10).await;
    assert_eq!(
        limit_states(&refused)[0],
        (false, 0, LEASE - 10, LEASE - 10)
    );

    assert_eq!(
        lease(backend, &key, &limits, &taken[0], T0 + 20, false).await,
        1
    );
    if backend.is_redis() {
        // By its member. The memory store finds a place by its time, and places of one time
        // are alike: a receipt is given back once (`Adjustment::Release`).
        assert_eq!(
            lease(backend, &key, &limits, &taken[0], T0 + 20, false).await,
            0,
            "a place is given back once"
        );
    }
    let again = backend.check(&key, &limits, T0 + 30).await;
    assert!(limit_states(&again)[0].0, "the freed place is taken");
    let late = receipt(&again);

    // The second place is renewed 1.5 s in: it now ends a lease later.
    let ends = lease(backend, &key, &limits, &taken[1], T0 + 1_500, true).await;
    assert_eq!(ends, T0 + 1_500 + LEASE);
    let renewed = Receipt::new(ends - LEASE, taken[1].member().map(str::to_owned));
    // At T0 + lease the third place (taken at T0, never renewed) is free, the renewed one
    // and the one taken at T0 + 30 are not: one place left.
    let after = backend.check(&key, &limits, T0 + LEASE).await;
    assert!(limit_states(&after)[0].0);
    assert_eq!(limit_states(&after)[0].1, 0, "two held, this one the third");
    assert_eq!(
        lease(backend, &key, &limits, &taken[2], T0 + LEASE + 1, true).await,
        0,
        "an expired place is not taken again by a renewal"
    );
    assert_eq!(
        lease(backend, &key, &limits, &late, T0 + LEASE + 1, false).await,
        1
    );
    // Past the renewed lease every place is free, and a renewal finds nothing.
    let end = T0 + 1_500 + 2 * LEASE;
    assert_eq!(lease(backend, &key, &limits, &renewed, end, true).await, 0);
    for left in [2, 1] {
        let decision = backend.check(&key, &limits, end).await;
        assert_eq!(limit_states(&decision)[0].1, left);
    }
}

/// Two places beside 3 per minute: a request refused by either counts in neither. A
/// release gives back the place only: the rate limit keeps its count.
async fn a_stack_with_a_rate_limit_is_all_or_nothing_and_a_release_leaves_the_rate_alone(
    backend: &Backend,
) {
    let key = client("203.0.113.2");
    let rate = Limit::new(3, Window::from_millis(W), Algorithm::FixedWindow);
    let limits = [places(2), rate];
    let now = T0 + 100;
    let first = backend.check(&key, &limits, now).await;
    let second = backend.check(&key, &limits, now).await;
    assert!(first.allowed && second.allowed);
    let full = backend.check(&key, &limits, now).await;
    assert_eq!(
        limit_states(&full).iter().map(|s| s.0).collect::<Vec<_>>(),
        [false, true],
        "refused by the places, the rate allowing"
    );
    assert_eq!(backend.counted(&key, &rate, now).await, 2, "nor counted");

    assert_eq!(
        lease(backend, &key, &limits, &receipt(&first), now, false).await,
        1
    );
    let third = backend.check(&key, &limits, now).await;
    assert!(third.allowed);
    assert_eq!(
        backend.counted(&key, &rate, now).await,
        3,
        "a release gives no rate back"
    );
    assert_eq!(
        lease(backend, &key, &limits, &receipt(&second), now, false).await,
        1
    );
    let over = backend.check(&key, &limits, now).await;
    assert_eq!(
        limit_states(&over).iter().map(|s| s.0).collect::<Vec<_>>(),
        [true, false],
        "refused by the rate, a place free"
    );
    if backend.is_redis() {
        assert_eq!(
            backend.counted(&key, &limits[0], now).await,
            1,
            "the refused request holds no place"
        );
    }
}

/// 500 checks at once on five places: exactly five pass; given back at once, every place is
/// free again.
async fn five_hundred_concurrent_checks_take_exactly_n_places(backend: &Backend) {
    let key = client("203.0.113.3");
    let limits = [places(5)];
    let now = T0 + 200;
    let store = backend.store();
    let checks = (0..500).map(|_| {
        let (store, key) = (store.clone(), key.clone());
        tokio::spawn(async move {
            let request = ratelimit_runtime::store::CheckRequest {
                key: &key,
                limits: &limits,
                now_millis: Some(now),
            };
            store.check(request).await.expect("the store answers")
        })
    });
    let decisions: Vec<Decision> = futures_util::future::join_all(checks)
        .await
        .into_iter()
        .map(|joined| joined.expect("the check ran"))
        .collect();
    let passed: Vec<&Decision> = decisions.iter().filter(|d| d.allowed).collect();
    assert_eq!(passed.len(), 5);
    for decision in passed {
        assert_eq!(
            lease(backend, &key, &limits, &receipt(decision), now, false).await,
            1
        );
    }
    let whole = backend.check(&key, &limits, now).await;
    assert_eq!(limit_states(&whole)[0], (true, 4, 0, LEASE));
}

/// Places per API key beside a rate per address: on a Cluster their keys are in two slots
/// and the check is split. The decision's receipt still gives the place back (and only the
/// place: a give-back of units with it takes from what counts, as without one).
async fn a_place_counted_by_another_identity_than_the_rate_goes_back_by_its_receipt(
    backend: &Backend,
) {
    const BY_KEY: Identity = Identity::Parts(&[IdentityPart::ApiKey]);
    let by_ip = client("203.0.113.4");
    let by_key = RouteKey::new("rl", "POST", "/export", &[(IdentityPart::ApiKey, "k-4")]);
    let key = by_ip.with_identity(BY_KEY, by_key);
    let rate = Limit::new(10, Window::from_millis(W), Algorithm::FixedWindow);
    let limits = [places(1).identified_by(BY_KEY), rate];
    let now = T0 + 300;
    let first = backend.check(&key, &limits, now).await;
    assert!(first.allowed);
    let full = backend.check(&key, &limits, now).await;
    assert_eq!(
        limit_states(&full).iter().map(|s| s.0).collect::<Vec<_>>(),
        [false, true]
    );
    let places_only = [limits[0]];
    assert_eq!(
        lease(backend, &key, &places_only, &receipt(&first), now, false).await,
        1
    );
    let again = backend.check(&key, &limits, now).await;
    assert!(again.allowed, "the place is back");
    assert_eq!(backend.counted(&key, &rate, now).await, 2);
}
