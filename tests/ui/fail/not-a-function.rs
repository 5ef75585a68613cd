use ratelimit_runtime::rate_limit;

#[rate_limit(limit = 10, window = "5m")]
struct Login;

fn main() {
    let _ = Login;
}
