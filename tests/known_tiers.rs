//! `RateLimiter::tiers`: the tiers the App's requests carry. A declaration naming another is
//! a refused setting with a suggestion (in its own binary: declarations are program-wide),
//! and the limiter's overrides take the listed tiers in their selectors.

use std::time::Duration;

use actix_web::{get, HttpResponse, Responder};
use ratelimit_runtime::{overrides::Overrides, rate_limit, store::MemoryStore, RateLimiter};

#[rate_limit(limit = 10, window = "1m")]
#[rate_limit(tier = "por", limit = 100, window = "1m")]
#[get("/reports")]
async fn reports() -> impl Responder {
    HttpResponse::Ok()
}

#[test]
fn a_declared_tier_the_app_does_not_list_is_refused_with_a_suggestion() {
    let _ = reports;
    let refused = RateLimiter::new(MemoryStore::new())
        .tiers(["free", "pro"])
        .check_settings()
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(
            "tier `por`, which `RateLimiter::tiers(..)` does not list; did you mean `pro`?"
        ),
        "{refused}"
    );
    assert!(refused.contains("`GET /reports`"), "{refused}");
    // Listed, it holds; not given at all, the coverage check only warns.
    assert!(RateLimiter::new(MemoryStore::new())
        .tiers(["free", "por"])
        .check_settings()
        .is_ok());
    assert!(RateLimiter::new(MemoryStore::new())
        .check_settings()
        .is_ok());
    let twice = RateLimiter::new(MemoryStore::new())
        .tiers(["por"])
        .tiers(["por"])
        .check_settings()
        .unwrap_err()
        .to_string();
    assert!(twice.contains("given twice"), "{twice}");
}

#[test]
fn the_limiters_tiers_are_tiers_its_overrides_take() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratelimit.toml");
    std::fs::write(
        &path,
        "[routes]\n'GET /reports tier \"team\"' = 'limit = 5, window = \"1m\"'\n",
    )
    .unwrap();
    let refused_without = |limiter: RateLimiter, overrides: &Overrides| {
        let table =
            actix_web::rt::System::new().block_on(ratelimit_runtime::coverage::route_table(
                actix_web::App::new().service(reports).wrap(limiter),
            ));
        let _ = table.with_overrides(overrides);
        overrides.wait_loaded(Duration::from_secs(2));
        overrides.refused()
    };
    // Without the tier listed anywhere, the override is refused naming it.
    let overrides = Overrides::new().file(&path);
    let limiter = RateLimiter::new(MemoryStore::new()).overrides(overrides.clone());
    let refused = refused_without(limiter, &overrides);
    assert!(format!("{refused:?}").contains("team"), "{refused:?}");
    // Listed on the limiter (before or after the overrides are given), it is taken.
    for tiers_first in [true, false] {
        let overrides = Overrides::new().file(&path);
        let limiter = RateLimiter::new(MemoryStore::new());
        let limiter = if tiers_first {
            limiter.tiers(["por", "team"]).overrides(overrides.clone())
        } else {
            limiter.overrides(overrides.clone()).tiers(["por", "team"])
        };
        let in_use = limiter.overrides_in_use().cloned().unwrap();
        let refused = refused_without(limiter, &in_use);
        assert!(refused.is_empty(), "{refused:?}");
        assert!(
            in_use
                .in_force()
                .iter()
                .any(|(s, _)| s.tier.as_deref() == Some("team")),
            "{:?}",
            in_use.in_force()
        );
    }
}
