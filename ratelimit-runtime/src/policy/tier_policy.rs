//! The limits a route gives one tier of its requests: `#[rate_limit(tier = "pro", ..)]`.

use std::fmt;

use super::{route_policy::limits_problem, Identity, Limit};

/// The limits of one tier of a route's requests (`#[rate_limit(tier = "pro", ..)]`), for the
/// requests whose [`Tier`](crate::overrides::Tier) names it: stacked limits and who they
/// count. What the whole route shares (`fail`, `shadow`, `headers`, `enforce`) is the
/// route's ([`RoutePolicy::with_tiers`](super::RoutePolicy::with_tiers)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierPolicy {
    name: &'static str,
    limits: &'static [Limit],
    identity: Identity,
}

impl TierPolicy {
    /// Tier `name`'s stacked `limits` (at least one, at most 8), counting by `identity`
    /// (a limit may count by its own, [`Limit::identified_by`]).
    ///
    /// # Panics
    ///
    /// When `name` cannot be a tier (1 to 32 of lower-case letters, digits, `_` and `-`);
    /// when `limits` cannot be stacked or `identity` is invalid, as
    /// [`RoutePolicy::new`](super::RoutePolicy::new) says.
    pub const fn new(name: &'static str, limits: &'static [Limit], identity: Identity) -> Self {
        assert!(
            ratelimit_grammar::is_tier_name(name),
            "a tier is 1 to 32 of lower-case letters, digits, `_` and `-`"
        );
        if let Some(problem) = limits_problem(limits) {
            panic!("{}", problem);
        }
        identity.assert_valid();
        TierPolicy {
            name,
            limits,
            identity,
        }
    }

    /// The tier's name (`pro`).
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The tier's stacked limits, in declaration order.
    pub const fn limits(&self) -> &'static [Limit] {
        self.limits
    }

    /// Who the tier's limits count.
    pub const fn identity(&self) -> Identity {
        self.identity
    }
}

impl fmt::Display for TierPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tier {}: ", self.name)?;
        for (i, limit) in self.limits.iter().enumerate() {
            if i > 0 {
                f.write_str(" + ")?;
            }
            write!(f, "{limit}")?;
        }
        write!(f, " by {}", self.identity)
    }
}
