//! Two shared budgets of one name in one program would count in one key: every limiter of
//! the program refuses to start, naming both. (A binary of its own: the refusal is the
//! program's, so it would stop every App of another test file.)

use ratelimit_runtime::{budget, store::MemoryStore, RateLimiter};

budget!(API = limit = 5, window = "1m", identity = "api_key");

mod elsewhere {
    ratelimit_runtime::budget!(pub API = limit = 100, window = "1h");
}

#[test]
fn two_budgets_of_one_name_refuse_to_start() {
    assert_eq!(elsewhere::API.name(), API.name());
    let error = RateLimiter::new(MemoryStore::new())
        .check_settings()
        .expect_err("two budgets named API");
    let text = error.to_string();
    assert!(
        text.contains("two shared budgets are named `API`"),
        "{text}"
    );
    assert!(
        text.contains("shared_budget_names::elsewhere::API"),
        "{text}"
    );
    assert!(text.contains("shared_budget_names::API"), "{text}");
}
