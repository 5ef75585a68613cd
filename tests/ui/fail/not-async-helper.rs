// `#[rate_limit]` on a plain helper function by mistake: the errors are ours, and the helper
// keeps its signature, so its callers do not add a type error (made `async`, its
// `let n: u32 = helper()` would become E0308).
use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 10, window = "5m")]
fn helper() -> u32 {
    1
}

fn main() {
    let n: u32 = helper();
    let _ = n;
}
