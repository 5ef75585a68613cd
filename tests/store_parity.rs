//! The memory store decides as the Redis scripts do: random sequences of checks at injected
//! times (every algorithm, stacks of two, blocks shorter and longer than the window,
//! counting failures or requests), give-backs with the receipt of the check just made and
//! without one, compared figure by figure.

mod support;

use ratelimit_runtime::{
    key::RouteKey,
    policy::{Algorithm, Count, Limit, Window},
    store::{AdjustRequest, Adjustment, Receipt},
    IdentityPart,
};
use support::{limit_states, Backend, T0};

/// xorshift64: the same sequences on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

fn random_limit(rng: &mut Rng) -> Limit {
    let algorithm = rng.pick(&Algorithm::ALL);
    let max = 1 + rng.below(4) as u32;
    let mut limit = Limit::new(
        max,
        Window::from_millis(rng.pick(&[10, 100, 1000])),
        algorithm,
    );
    if rng.below(2) == 0 {
        limit = limit.blocking(Window::from_millis(rng.pick(&[5, 50, 500, 5000])));
    }
    if rng.below(3) == 0 {
        limit = limit.counting(Count::Failures);
    }
    limit
}

/// One limit, or two that differ in algorithm or window (as a route's stack must).
fn random_limits(rng: &mut Rng) -> Vec<Limit> {
    let mut limits = vec![random_limit(rng)];
    if rng.below(3) == 0 {
        let second = random_limit(rng);
        if (second.algorithm(), second.window()) != (limits[0].algorithm(), limits[0].window()) {
            limits.push(second);
        }
    }
    limits
}

async fn give_back(
    backend: &Backend,
    key: &RouteKey,
    limits: &[Limit],
    now: u64,
    units: u32,
    receipt: Option<&Receipt>,
) -> u64 {
    let change = Adjustment::GiveBack { units, receipt };
    backend
        .store()
        .adjust(AdjustRequest::new(key, limits, Some(now), change))
        .await
        .expect("a give-back")
}

#[actix_web::test]
async fn the_memory_store_decides_as_the_redis_scripts_do() {
    let redis = Backend::standalone().await;
    let memory = Backend::memory();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..800 {
        let limits = random_limits(&mut rng);
        let name = format!("client{case}");
        let key = RouteKey::new(
            "rl",
            "POST",
            "/x",
            &[(IdentityPart::Username, name.as_str())],
        );
        let mut now = T0;
        for step in 0..60 {
            now += rng.pick(&[0, 1, 3, 7, 50, 300]);
            let at = format!("case {case} step {step} at T0 + {} {limits:?}", now - T0);
            if rng.below(10) < 8 {
                let (a, b) = (
                    redis.check(&key, &limits, now).await,
                    memory.check(&key, &limits, now).await,
                );
                assert_eq!(
                    (a.allowed, limit_states(&a)),
                    (b.allowed, limit_states(&b)),
                    "{at}: check (Redis, memory)"
                );
                // A success on a route counting failures gives its unit back at once.
                if let (Some(ra), Some(rb), 0) = (&a.receipt, &b.receipt, rng.below(3)) {
                    assert_eq!(
                        give_back(&redis, &key, &limits, now, 1, Some(ra)).await,
                        give_back(&memory, &key, &limits, now, 1, Some(rb)).await,
                        "{at}: give-back with a receipt (Redis, memory)"
                    );
                }
            } else {
                let units = 1 + rng.below(2) as u32;
                assert_eq!(
                    give_back(&redis, &key, &limits, now, units, None).await,
                    give_back(&memory, &key, &limits, now, units, None).await,
                    "{at}: give-back of {units} (Redis, memory)"
                );
            }
        }
    }
    redis.finish().await;
}
