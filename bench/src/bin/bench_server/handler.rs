//! The one trivial handler every variant serves.

/// `200 OK`, body `ok`.
pub async fn ok() -> &'static str {
    "ok"
}
