//! The keys of `#[rate_limit(...)]`.

use crate::suggest;

/// One key of the attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// `limit = 10`: requests per window.
    Limit,
    /// `window = "5m"`: the duration the limit counts over.
    Window,
    /// `identity = "ip+username"`: who the limit counts.
    Identity,
    /// `algorithm = "sliding_log"`: how it counts.
    Algorithm,
    /// `fail = "closed"`: what the route does when the store cannot answer.
    Fail,
    /// `count = "failures"`: which requests use the budget.
    Count,
    /// `block = "15m"`: how long a client stays refused once the limit refuses it.
    Block,
    /// `cost = 10`: the units each request counts.
    Cost,
    /// `cost_from = "path::to::fn"`: a function that weighs each request of the route.
    CostFrom,
    /// `budget = API`: a budget shared by routes, declared with `budget!`.
    Budget,
    /// `concurrency = 5`: at most that many requests of one identity in flight.
    Concurrency,
    /// `lease = "10s"`: how long a concurrency limit's hold outlives an instance that died.
    Lease,
    /// `wait = "2s"`: how long a request over its rate limit waits for its turn.
    Wait,
    /// `ban = "20 in 10m for 1h"`: a client refused that often is refused for that long.
    Ban,
    /// `sync = "100ms"`: decide from a local share of the budget, reconciled that often.
    Sync,
    /// `shadow = true`: log and count, never refuse.
    Shadow,
    /// `headers = "none"`: whether responses tell clients the limits.
    Headers,
    /// `enforce = true`: refuse while the App is in shadow (`false`: only log while it
    /// enforces).
    Enforce,
    /// `tier = "pro"`: the limits of requests of that tier; attributes without it are the
    /// route's default.
    Tier,
    /// `exempt = "<reason>"`: no limit, and why.
    Exempt,
    /// `crate = "path"`: how the expansion reaches the runtime.
    Crate,
}

impl Key {
    /// Every key, in the order messages list them.
    pub const ALL: [Key; 21] = [
        Key::Limit,
        Key::Window,
        Key::Identity,
        Key::Algorithm,
        Key::Fail,
        Key::Count,
        Key::Block,
        Key::Cost,
        Key::CostFrom,
        Key::Budget,
        Key::Concurrency,
        Key::Lease,
        Key::Wait,
        Key::Ban,
        Key::Sync,
        Key::Shadow,
        Key::Headers,
        Key::Enforce,
        Key::Tier,
        Key::Exempt,
        Key::Crate,
    ];

    /// Every key's name, in the order messages list them.
    pub const NAMES: [&'static str; 21] = [
        "limit",
        "window",
        "identity",
        "algorithm",
        "fail",
        "count",
        "block",
        "cost",
        "cost_from",
        "budget",
        "concurrency",
        "lease",
        "wait",
        "ban",
        "sync",
        "shadow",
        "headers",
        "enforce",
        "tier",
        "exempt",
        "crate",
    ];

    /// The key as written.
    pub const fn name(self) -> &'static str {
        match self {
            Key::Limit => "limit",
            Key::Window => "window",
            Key::Identity => "identity",
            Key::Algorithm => "algorithm",
            Key::Fail => "fail",
            Key::Count => "count",
            Key::Block => "block",
            Key::Cost => "cost",
            Key::CostFrom => "cost_from",
            Key::Budget => "budget",
            Key::Concurrency => "concurrency",
            Key::Lease => "lease",
            Key::Wait => "wait",
            Key::Ban => "ban",
            Key::Sync => "sync",
            Key::Shadow => "shadow",
            Key::Headers => "headers",
            Key::Enforce => "enforce",
            Key::Tier => "tier",
            Key::Exempt => "exempt",
            Key::Crate => "crate",
        }
    }

    /// The key named `name`, exactly as written.
    pub fn from_name(name: &str) -> Option<Key> {
        Key::ALL.into_iter().find(|key| key.name() == name)
    }

    /// The key a near miss (`limt`) most likely stands for.
    pub fn closest(name: &str) -> Option<Key> {
        suggest::closest(name, &Key::NAMES).and_then(Key::from_name)
    }

    /// The message for a name that is no key: the keys, and the likely one.
    pub fn unknown_message(name: &str) -> String {
        Key::unknown_among(name, &Key::NAMES)
    }

    /// The message for an unknown key `name` where only the keys `names` go (`budget!`
    /// takes four of the attribute's).
    pub fn unknown_among(name: &str, names: &[&str]) -> String {
        format!(
            "unknown key `{name}`; expected one of {}{}",
            suggest::list(names),
            suggest::did_you_mean(name, names)
        )
    }

    /// An example of the key with a value, for messages: `` `limit = 10` ``.
    pub const fn example(self) -> &'static str {
        match self {
            Key::Limit => "`limit = 10`",
            Key::Window => "`window = \"5m\"`",
            Key::Identity => "`identity = \"ip+username\"`",
            Key::Algorithm => "`algorithm = \"sliding_window\"`",
            Key::Fail => "`fail = \"closed\"`",
            Key::Count => "`count = \"failures\"`",
            Key::Block => "`block = \"15m\"`",
            Key::Cost => "`cost = 10`",
            Key::CostFrom => "`cost_from = \"crate::reports::rows_asked\"`",
            Key::Budget => "`budget = API`",
            Key::Concurrency => "`concurrency = 5`",
            Key::Lease => "`lease = \"10s\"`",
            Key::Wait => "`wait = \"2s\"`",
            Key::Ban => "`ban = \"20 in 10m for 1h\"`",
            Key::Sync => "`sync = \"100ms\"`",
            Key::Shadow => "`shadow = true`",
            Key::Headers => "`headers = \"none\"`",
            Key::Enforce => "`enforce = true`",
            Key::Tier => "`tier = \"pro\"`",
            Key::Crate => "`crate = \"my_facade::ratelimit\"`",
            Key::Exempt => "`exempt = \"load balancer health check\"`",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_near_misses_find_their_key() {
        for key in Key::ALL {
            assert_eq!(Key::from_name(key.name()), Some(key));
        }
        assert_eq!(Key::NAMES.map(Key::from_name).map(Option::unwrap), Key::ALL);
        assert_eq!(Key::closest("limt"), Some(Key::Limit));
        assert_eq!(Key::closest("exemt"), Some(Key::Exempt));
        assert_eq!(Key::closest("header"), Some(Key::Headers));
        assert_eq!(Key::closest("enforced"), Some(Key::Enforce));
        assert_eq!(Key::closest("enfroce"), Some(Key::Enforce));
        assert_eq!(Key::closest("cots"), Some(Key::Cost));
        assert_eq!(Key::closest("teir"), Some(Key::Tier));
        assert_eq!(Key::closest("concurency"), Some(Key::Concurrency));
        assert_eq!(Key::closest("leese"), Some(Key::Lease));
        assert_eq!(Key::closest("wiat"), Some(Key::Wait));
        assert_eq!(Key::closest("bna"), Some(Key::Ban));
        assert_eq!(Key::closest("snyc"), Some(Key::Sync));
        assert_eq!(Key::closest("zzzzzz"), None);
        assert!(Key::unknown_message("limt").ends_with("did you mean `limit`?"));
    }
}
