//! The messages of declarations' mistakes, stated once: the attribute reports them at the
//! token that shows them; a policy read at run time (an override) reports the same words.

use crate::{key::Key, limit::MAX_STACKED, Algorithm, FailMode};

/// `limit = -3`, `limit = 2.5`: found `found`.
pub fn limit_not_positive(found: &str) -> String {
    format!("`limit` must be a positive whole number of requests, found `{found}`")
}

/// `limit = x` where no integer is written.
pub fn limit_not_literal() -> &'static str {
    "`limit` must be a positive whole number of requests written as an integer literal, e.g. `limit = 10`"
}

/// `cost = x` where no positive integer is written.
pub fn cost_not_positive(found: &str) -> String {
    format!("`cost` must be a positive whole number of units, written as an integer literal (e.g. `cost = 10`), found `{found}`")
}

/// A key a route naming a shared budget cannot write beside `budget`.
pub fn budget_stands_alone(key: crate::Key) -> String {
    format!(
        "`{}` of a shared budget is in its `budget!` declaration; a route names the budget with `budget = NAME` alone (with `cost` if a request weighs more), and writes its own limits in `#[rate_limit]`s of their own",
        key.name()
    )
}

/// `budget = 5`: a number where a budget's name goes.
pub fn budget_not_a_name(found: &str) -> String {
    format!("`budget` names a shared budget by the constant `budget!` declares, e.g. `budget = API`; found `{found}`")
}

/// A stack that names one shared budget twice.
pub fn budget_twice(name: &str) -> String {
    format!("the route names the shared budget `{name}` twice; name it once")
}

/// `limit = 0`.
pub fn limit_zero() -> &'static str {
    "`limit = 0` allows no request at all; a limit must be at least 1 (for a route that needs no limit, write `exempt = \"<reason>\"`)"
}

/// `limit = 99999999999`.
pub fn limit_too_large(written: &str) -> String {
    format!(
        "`limit = {written}` is too large; the largest limit is {}",
        u32::MAX
    )
}

/// `limit = "10"`: the string's content was `text`.
pub fn limit_string(text: &str) -> String {
    let text = text.trim();
    let hint = if text.parse::<u64>().is_ok() {
        format!("write `limit = {text}`")
    } else {
        "e.g. `limit = 10`".to_owned()
    };
    format!("`limit` takes an integer, not a string; {hint}")
}

/// A key that takes a string given something else.
pub fn takes_string(key: Key) -> String {
    format!("`{}` takes a string, e.g. {}", key.name(), key.example())
}

/// A key written without `= value`.
pub fn needs_value(key: Key) -> String {
    format!("`{}` needs a value, e.g. {}", key.name(), key.example())
}

/// A key written twice in one declaration.
pub fn set_twice(key: Key) -> String {
    format!(
        "`{}` set more than once; each key may appear once per `#[rate_limit]`",
        key.name()
    )
}

/// `window = 300` (no unit): `digits` as written.
pub fn duration_without_unit(key: Key, digits: &str) -> String {
    let name = key.name();
    format!("`{name}` takes a duration string with a unit, e.g. `{name} = \"{digits}s\"`")
}

/// `shadow = "true"`.
pub fn shadow_string(text: &str) -> String {
    bool_string(Key::Shadow, text)
}

/// `shadow = 1`.
pub fn shadow_not_bool(found: &str) -> String {
    not_bool(Key::Shadow, found)
}

/// A bool key (`shadow`, `enforce`) written as a string: `enforce = "true"`.
pub fn bool_string(key: Key, text: &str) -> String {
    let name = key.name();
    format!("`{name}` takes a bool, not a string; write `{name} = {text}`")
}

/// A bool key (`shadow`, `enforce`) written with another value: `enforce = 1`.
pub fn not_bool(key: Key, found: &str) -> String {
    let name = key.name();
    format!("`{name}` takes `true` or `false`, found `{found}`")
}

/// `enforce` with `shadow = true`.
pub fn enforce_with_shadow() -> &'static str {
    "`enforce` cannot go with `shadow = true`: a shadow limit never refuses whatever the App's shadow switch says, and `enforce` says whether the route follows that switch; keep `shadow = true` for a limit that only ever logs, or `enforce = ..` for one that follows or overrides the switch"
}

/// `exempt = ""`.
pub fn exempt_without_reason() -> &'static str {
    "`exempt` needs a reason, e.g. `exempt = \"load balancer health check\"`; an unlimited route should say why"
}

/// A key next to `exempt`.
pub fn exempt_stands_alone(key: Key) -> String {
    let name = key.name();
    let why = match key {
        Key::Block => " (`block` locks a client out once a limit refuses it, and an exempt route has no limit)",
        Key::Count => " (`count` says which requests use a limit's budget, and an exempt route has no limit)",
        Key::Tier => " (`tier` gives a tier limits of its own, and an exempt route has no limit for any request)",
        _ => "",
    };
    format!("`exempt` stands alone: an exempt route has no `{name}`{why}; remove `{name}` or remove `exempt`")
}

/// `exempt` among stacked declarations.
pub fn exempt_stacked() -> &'static str {
    "an exempt route cannot also stack `#[rate_limit]` declarations; keep either the exemption or the limits"
}

/// More than [`MAX_STACKED`] declarations.
pub fn too_many_stacked() -> String {
    format!("a route may stack at most {MAX_STACKED} `#[rate_limit]` declarations")
}

/// A declaration without `limit`, `window` or both; `block` written on it.
pub fn missing_limit_or_window(limit: bool, window: bool, block: bool) -> Option<String> {
    let lockout = if block {
        " (`block` locks a client out once this limit refuses it, so it needs the limit)"
    } else {
        ""
    };
    match (limit, window) {
        (false, false) => Some(format!("missing `limit` and `window`{lockout}: how many requests are allowed over what duration, e.g. `#[rate_limit(limit = 10, window = \"5m\")]` (or `#[rate_limit(exempt = \"<reason>\")]` for a route that needs no limit)")),
        (false, true) => Some(format!("missing `limit`{lockout}: how many requests the window allows, e.g. `limit = 10` (or `exempt = \"<reason>\"` for a route that needs no limit)")),
        (true, false) => Some(format!("missing `window`{lockout}: the duration the limit counts over, e.g. `window = \"5m\"`")),
        (true, true) => None,
    }
}

/// Two stacked limits with one algorithm and window. `algorithm_written`: whether the
/// later one wrote its algorithm.
pub fn repeated_window(
    window: &str,
    earlier_max: u32,
    earlier_window: &str,
    algorithm: Algorithm,
    algorithm_written: bool,
) -> String {
    let algorithm = if algorithm_written {
        format!("`{}`", algorithm.as_str())
    } else {
        format!("the default `{}`", algorithm.as_str())
    };
    format!(
        "`window = \"{window}\"` repeats the window of an earlier `#[rate_limit]` (`limit = {earlier_max}, window = \"{earlier_window}\"`) with the same algorithm, {algorithm}; two limits with the same algorithm and window would count in one Redis key, so keep the stricter one or change the window or the algorithm"
    )
}

/// Stacked limits with different identities, one of which names none.
pub fn missing_identity_in_mixed_stack() -> &'static str {
    "missing `identity`: the limits stacked here count different identities, so each names its own (`identity = \"ip\"` on one, `identity = \"username\"` on another)"
}

/// Why stacked limits (and a route's tiers) share one value of `key` (`fail`, `shadow`,
/// `headers`, `enforce`).
fn shared_because(key: Key) -> &'static str {
    match key {
        Key::Fail => "a route either admits or refuses requests while Redis is unreachable",
        Key::Headers => "a route's answers either tell its limits or hide them all",
        Key::Wait => "a request waits for the one turn every limit of the route gives it",
        Key::Ban => "a route's refusals count toward one ban, whichever limit refused",
        Key::Sync => "an instance reconciles a route's shares on one interval",
        _ => "a route's limits are enforced or only logged together",
    }
}

/// A key stacked limits share, written with two values (`written`, then `earlier`).
pub fn shared_key_differs(key: Key, written: &str, earlier: &str) -> String {
    let name = key.name();
    let why = shared_because(key);
    format!("`{name} = {written}` differs from `{name} = {earlier}` on an earlier `#[rate_limit]`; stacked limits share one `{name}` ({why}), so write `{name}` once")
}

/// A key the whole route shares (`fail`, `shadow`, `headers`, `enforce`) written on the
/// `#[rate_limit]` of tier `tier`.
pub fn route_wide_on_tier(key: Key, tier: &str) -> String {
    let name = key.name();
    let why = shared_because(key);
    format!("`{name}` is the route's, not tier `{tier}`'s: write it on the route's default `#[rate_limit]` (the one without `tier`), and every tier's limits follow it ({why})")
}

/// `tier = ".."` on a route with no `#[rate_limit]` without `tier`.
pub fn tier_without_default() -> &'static str {
    "a route with `tier` limits needs its default limits too: a `#[rate_limit]` without `tier` counts the requests of no tier and of every tier the route gives no limits of its own, e.g. `#[rate_limit(limit = 100, window = \"1m\")]` beside `#[rate_limit(tier = \"pro\", limit = 1000, window = \"1m\")]`"
}

/// `tier` inside declarations read at run time (an override, `RateLimiter::declare`).
pub fn tier_in_text() -> &'static str {
    "`tier` is not written inside declarations read at run time: an override names its tier in its selector (`'GET /api/search tier \"pro\"' = 'limit = 200, window = \"1s\"'`, `--tier pro`), and a route declared in code has one stack for every request; a route's own tier limits are declared with `#[rate_limit(tier = \"pro\", ..)]`"
}

/// `block` with `shadow = true`.
pub fn block_with_shadow() -> &'static str {
    "`block` cannot go with `shadow = true`: a shadow limit never refuses, so it never locks a client out; remove one of them"
}

/// `fail = "closed"` or `"local"` with `shadow = true`.
pub fn fail_with_shadow(fail: FailMode) -> String {
    format!("`fail = \"{fail}\"` cannot go with `shadow = true`: a shadow limit never rejects, so it passes requests during a Redis outage too; remove one of them")
}
