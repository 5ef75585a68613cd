//! The guide: how to put limits on an actix-web app and run them in production.
//!
//! Documentation only: the chapters below hold no code. The attribute's own reference (every
//! key, stacking, placement, compile errors) is on [`rate_limit`](crate::rate_limit).
//!
//! | chapter | what it covers |
//! |---|---|
//! | [`getting_started`] | a limited app in five minutes: declare, wrap, check coverage |
//! | [`algorithms`] | choosing between `fixed_window`, `sliding_window`, `sliding_log` and `gcra` |
//! | [`identity`] | who a limit counts: client address and trusted proxies, usernames, user ids, API keys, the key secret |
//! | [`middleware_order`] | where the limiter goes among auth, CORS, path normalisation and route middleware |
//! | [`sign_in`] | counting failures only, lockouts, clearing a budget from code |
//! | [`budgets`] | requests that weigh more than one unit: a fixed cost, a cost read off the request, a charge after the handler |
//! | [`shaping`] | how many requests of one client may run at once (`concurrency`) |
//! | [`overrides`] | changing limits while the App runs: overrides by route and tier, allow and deny lists, the `ratelimit-admin` command |
//! | [`failure_modes`] | timeouts, `fail = "open"` and `"closed"`, recovery, what a failure costs in counts |
//! | [`headers`] | the rate-limit headers, `Retry-After`, the 429, 403 and 503 bodies, your own rejection body, CORS |
//! | [`tls`] | TLS, passwords and the ACL a limiter's Redis user needs |
//! | [`deployments`] | Redis Cluster, the key layout, connections per worker, Redis versions |
//! | [`observability`] | log events and metrics |
//! | [`testing`] | testing your routes with the injected clock and the coverage check |
//! | [`limitations`] | what the limiter does not do, one rule per paragraph |

#[doc = include_str!("guide/getting_started.md")]
pub mod getting_started {}

#[doc = include_str!("guide/algorithms.md")]
pub mod algorithms {}

#[doc = include_str!("guide/identity.md")]
pub mod identity {}

#[doc = include_str!("guide/middleware_order.md")]
pub mod middleware_order {}

#[doc = include_str!("guide/sign_in.md")]
pub mod sign_in {}

#[doc = include_str!("guide/budgets.md")]
pub mod budgets {}

#[doc = include_str!("guide/shaping.md")]
pub mod shaping {}

#[doc = include_str!("guide/overrides.md")]
pub mod overrides {}

#[doc = include_str!("guide/failure_modes.md")]
pub mod failure_modes {}

#[doc = include_str!("guide/headers.md")]
pub mod headers {}

#[doc = include_str!("guide/tls.md")]
pub mod tls {}

#[doc = include_str!("guide/deployments.md")]
pub mod deployments {}

#[doc = include_str!("guide/observability.md")]
pub mod observability {}

#[doc = include_str!("guide/testing.md")]
pub mod testing {}

#[doc = include_str!("guide/limitations.md")]
pub mod limitations {}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeSet, fs, path::Path};

    /// Every command a script runs, lowercased: what `redis.call('…')` names in the scripts
    /// and their parts.
    fn script_commands() -> BTreeSet<String> {
        let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
        let mut commands = BTreeSet::new();
        for dir in [scripts.clone(), scripts.join("parts")] {
            for file in fs::read_dir(&dir).unwrap() {
                let path = file.unwrap().path();
                if path.extension().is_none_or(|e| e != "lua") {
                    continue;
                }
                let text = fs::read_to_string(&path).unwrap();
                for call in text.split("redis.call(").skip(1) {
                    let name: String = call
                        .trim_start_matches(['\'', '"'])
                        .chars()
                        .take_while(|c| c.is_ascii_alphabetic())
                        .collect();
                    assert!(
                        !name.is_empty(),
                        "{}: a call without a command name",
                        path.display()
                    );
                    commands.insert(name.to_ascii_lowercase());
                }
            }
        }
        commands
    }

    /// The guide's ACL users for the services may run every command the scripts run: Redis
    /// checks those inside a script too, and a missing one fails every call that needs it.
    #[test]
    fn the_guide_s_acl_users_may_run_every_command_of_the_scripts() {
        let commands = script_commands();
        assert!(
            commands.contains("hincrby") && commands.contains("zadd"),
            "{commands:?}"
        );
        let users: Vec<&str> = include_str!("guide/tls.md")
            .lines()
            .filter(|line| line.starts_with("ACL SETUSER ratelimit "))
            .collect();
        assert_eq!(
            users.len(),
            2,
            "the guide's two lines for the services' user"
        );
        for user in users {
            let granted: BTreeSet<&str> = user
                .split_whitespace()
                .filter_map(|rule| rule.strip_prefix('+'))
                .collect();
            let missing: Vec<&String> = commands
                .iter()
                .filter(|command| !granted.contains(command.as_str()))
                .collect();
            assert!(missing.is_empty(), "`{user}` lacks {missing:?}");
        }
    }
}
