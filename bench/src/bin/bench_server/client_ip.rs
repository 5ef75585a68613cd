//! The client identity of variants (b) to (d), the same rule this project applies with
//! `TrustedProxies::hops(1)`: the rightmost `X-Forwarded-For` entry (one trusted proxy
//! appended it), else the peer address.

use actix_web::dev::ServiceRequest;

pub fn client_ip(req: &ServiceRequest) -> String {
    let forwarded = req
        .headers()
        .get("x-forwarded-for")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.rsplit(',').next())
        .map(str::trim)
        .filter(|entry| !entry.is_empty());
    match forwarded {
        Some(entry) => entry.to_owned(),
        None => req
            .peer_addr()
            .map_or_else(|| "unknown".to_owned(), |addr| addr.ip().to_string()),
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    #[test]
    fn the_rightmost_forwarded_entry_wins_else_the_peer() {
        let req = TestRequest::default()
            .insert_header(("x-forwarded-for", "6.6.6.6, 198.18.0.7"))
            .to_srv_request();
        assert_eq!(client_ip(&req), "198.18.0.7");
        let req = TestRequest::default()
            .peer_addr("127.0.0.1:9".parse().unwrap())
            .to_srv_request();
        assert_eq!(client_ip(&req), "127.0.0.1");
    }
}
