//! The IETF rate-limit fields read as a client reads them: with a structured-field parser
//! (RFC 9651), never by matching their text.

use sfv::{BareItem, List, ListEntry, Parameters, Parser};

/// One item of a `RateLimit` field (draft-ietf-httpapi-ratelimit-headers-11, section 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceLimit {
    /// The policy's name, the item's string.
    pub policy: String,
    /// `r`: the quota available now.
    pub r: i64,
    /// `t`: the effective window in seconds.
    pub t: Option<i64>,
    /// `pk`: the partition key's bytes.
    pub pk: Option<Vec<u8>>,
}

/// One item of a `RateLimit-Policy` field (section 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaPolicy {
    /// The policy's name.
    pub policy: String,
    /// `q`: the quota.
    pub q: i64,
    /// `w`: the window in seconds.
    pub w: Option<i64>,
    /// `pk`: the partition key's bytes.
    pub pk: Option<Vec<u8>>,
}

fn items(field: &str, value: &str) -> Vec<(String, Parameters)> {
    let list: List = Parser::new(value)
        .parse()
        .unwrap_or_else(|e| panic!("`{field}: {value}` is no structured-field list: {e}"));
    assert!(!list.is_empty(), "`{field}` is empty");
    list.into_iter()
        .map(|entry| match entry {
            ListEntry::Item(item) => {
                let name = item
                    .bare_item
                    .as_string()
                    .unwrap_or_else(|| panic!("`{field}: {value}`: an item is no string"))
                    .as_str()
                    .to_owned();
                (name, item.params)
            }
            ListEntry::InnerList(_) => panic!("`{field}: {value}` holds an inner list"),
        })
        .collect()
}

fn param<'a>(params: &'a Parameters, name: &str) -> Option<&'a BareItem> {
    params
        .iter()
        .find(|(key, _)| key.as_str() == name)
        .map(|(_, value)| value)
}

fn integer(params: &Parameters, name: &str, field: &str) -> Option<i64> {
    param(params, name).map(|value| {
        let n = i64::from(
            value
                .as_integer()
                .unwrap_or_else(|| panic!("`{field}`: `{name}` is no integer: {value:?}")),
        );
        assert!(n >= 0, "`{field}`: `{name}` is negative: {n}");
        n
    })
}

fn bytes(params: &Parameters, field: &str) -> Option<Vec<u8>> {
    param(params, "pk").map(|value| {
        value
            .as_byte_sequence()
            .unwrap_or_else(|| panic!("`{field}`: `pk` is no byte sequence: {value:?}"))
            .to_vec()
    })
}

/// Every item of a `RateLimit` field's value; panics when it is malformed or misses `r`.
pub fn service_limits(value: &str) -> Vec<ServiceLimit> {
    items("RateLimit", value)
        .into_iter()
        .map(|(policy, params)| ServiceLimit {
            r: integer(&params, "r", "RateLimit").expect("`r` is required"),
            t: integer(&params, "t", "RateLimit"),
            pk: bytes(&params, "RateLimit"),
            policy,
        })
        .collect()
}

/// Every item of a `RateLimit-Policy` field's value; panics when it is malformed or misses
/// `q`, or has a zero `w`.
pub fn quota_policies(value: &str) -> Vec<QuotaPolicy> {
    items("RateLimit-Policy", value)
        .into_iter()
        .map(|(policy, params)| {
            let w = integer(&params, "w", "RateLimit-Policy");
            assert_ne!(w, Some(0), "`w` must not be zero");
            QuotaPolicy {
                q: integer(&params, "q", "RateLimit-Policy").expect("`q` is required"),
                w,
                pk: bytes(&params, "RateLimit-Policy"),
                policy,
            }
        })
        .collect()
}
