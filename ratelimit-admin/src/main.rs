//! `ratelimit-admin`: what the people on call change while an App runs, in the Redis its
//! instances share: overrides by route and tier, allow and deny entries, a client's budget.
//! Every value is checked with the attribute's grammar before anything is written.
//!
//! ```text
//! ratelimit-admin routes
//! ratelimit-admin override set "POST /login" 'limit = 5, window = "5m"'
//! ratelimit-admin override set "GET /api/search" 'limit = 200, window = "1s"' --tier pro
//! ratelimit-admin override clear "POST /login"
//! ratelimit-admin override set "budget API" 'limit = 20000, window = "1d"'
//! ratelimit-admin state "budget API" --api-key -
//! ratelimit-admin deny add ip 203.0.113.0/24 --note "incident 42"
//! ratelimit-admin allow add ip 198.51.100.7 --routes "POST /login" --note "pen test"
//! ratelimit-admin allow add api_key - --note monitoring     # the key from stdin
//! ratelimit-admin reset "POST /login" --ip 203.0.113.7 --username alice
//! ratelimit-admin bans list
//! ratelimit-admin bans lift fp:3f1c0d9e8a7b6c5d
//! ```

mod bans;
mod budgets;
mod client;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    process::ExitCode,
};

use clap::{
    parser::ValueSource, ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand,
};
use ratelimit_runtime::{
    key::KeySecret,
    overrides::{
        api_key_fingerprint, is_fingerprint, list_field, policy_with_budgets, redacted_field,
        ListEntry, ListKind, RouteSelector, RuleSet, WidestRanges,
    },
    Policy,
};

use client::{Admin, ListBounds, Target};

/// Overrides, allow and deny lists, and client budgets of ratelimit-runtime services, in the
/// Redis they share.
#[derive(Parser)]
#[command(name = "ratelimit-admin", version, propagate_version = true)]
struct Cli {
    /// The Redis the services read overrides from (`redis://` or `rediss://`). One of
    /// `--redis`, `--cluster` and `--sentinel` names the deployment; given on the command
    /// line it wins over the environment; two on the command line, or two in the
    /// environment, are refused.
    #[arg(
        long,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379",
        global = true
    )]
    redis: String,
    /// A Redis Cluster instead: its nodes, comma-separated.
    #[arg(
        long,
        env = "REDIS_CLUSTER_NODES",
        hide_env_values = true,
        global = true,
        value_delimiter = ','
    )]
    cluster: Option<Vec<String>>,
    /// Redis Sentinel instead: the sentinels' URLs, comma-separated, with
    /// `--sentinel-master`; the primary they name is used, with TLS when they are
    /// `rediss://`.
    #[arg(
        long,
        env = "REDIS_SENTINEL_NODES",
        hide_env_values = true,
        global = true,
        value_delimiter = ','
    )]
    sentinel: Option<Vec<String>>,
    /// The name the sentinels know the primary by.
    #[arg(long, env = "REDIS_SENTINEL_MASTER", global = true)]
    sentinel_master: Option<String>,
    /// The primary's password, when it wants one (better from the environment: a
    /// command line is visible to every user of the machine).
    #[arg(
        long,
        env = "REDIS_SENTINEL_MASTER_PASSWORD",
        hide_env_values = true,
        global = true
    )]
    sentinel_master_password: Option<String>,
    /// The hash the services read overrides from (`Overrides::redis_key`).
    #[arg(
        long,
        env = "RATELIMIT_OVERRIDES_KEY",
        default_value = "rl:overrides",
        global = true
    )]
    key: String,
    /// The overrides file the services read (`Overrides::file`), for `routes`, `state` and
    /// `reset` to apply its route overrides under the hash's, as the services do. A
    /// missing file holds none; one the services would refuse is an error.
    #[arg(long, env = "RATELIMIT_OVERRIDES_FILE", global = true)]
    overrides_file: Option<PathBuf>,
    /// The widest IPv4 range the lists may name, as the services take it
    /// (`Overrides::widest_ranges`; 0 takes any).
    #[arg(long, env = "RATELIMIT_WIDEST_IPV4", default_value_t = 8, global = true, value_parser = clap::value_parser!(u8).range(0..=32))]
    widest_ipv4: u8,
    /// The widest IPv6 range the lists may name, as the services take it.
    #[arg(long, env = "RATELIMIT_WIDEST_IPV6", default_value_t = 32, global = true, value_parser = clap::value_parser!(u8).range(0..=128))]
    widest_ipv6: u8,
    /// The services take API keys written in plain text in the lists
    /// (`Overrides::plain_api_keys`): entries already so written are then not refused. New
    /// entries are written as fingerprints all the same.
    #[arg(long, env = "RATELIMIT_PLAIN_API_KEYS", global = true)]
    plain_api_keys: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Lists the routes the services declare (as they publish them), with the limits each
    /// declares for tiers, their shared budgets and the routes naming each, and the
    /// overrides in the hash.
    Routes,
    /// Lists, sets or clears a route's override.
    #[command(subcommand)]
    Override(OverrideCommand),
    /// Lists, adds or removes clients that are never limited (no store call).
    #[command(subcommand)]
    Allow(ListCommand),
    /// Lists, adds or removes clients answered 403 (no store call).
    #[command(subcommand)]
    Deny(ListCommand),
    /// Checks declarations with the attribute's grammar, writing nothing.
    Check {
        /// The route, as the route table names it: `"POST /login"`.
        route: String,
        /// Declarations in the attribute's syntax: `'limit = 5, window = "5m"'`.
        declarations: String,
    },
    /// Shows one client's budget on a route under the policy in force: per limit, its count,
    /// what is left, when it is whole again, and any lockout. Counts nothing.
    State(ClientArgs),
    /// Clears one client's budget on a route (counts and lockouts), under the policy in
    /// force.
    Reset(ClientArgs),
    /// Lists the bans in force, or lifts a client's.
    #[command(subcommand)]
    Bans(BanCommand),
    /// Prints an API key's fingerprint (`fp:…`), as the lists name keys, for an overrides
    /// file: the key is read from standard input and hashed as the services hash it (under
    /// RATELIMIT_KEY_SECRET).
    Fingerprint,
}

#[derive(Subcommand)]
enum BanCommand {
    /// Lists every ban in force: the client's fingerprint (as the services log it, under
    /// RATELIMIT_KEY_SECRET), the route it covers (or every route, for the limiter's ban),
    /// and how long it still holds.
    List {
        /// The services' key prefix (`Keys::prefix`).
        #[arg(long, env = "RATELIMIT_KEY_PREFIX", default_value = "rl")]
        prefix: String,
    },
    /// Lifts a client's bans (every route's and the limiter's), by the fingerprint `bans
    /// list` or the services' log shows: its refusals count afresh.
    Lift {
        /// The client's fingerprint: `fp:` and 16 hex digits.
        fingerprint: String,
        /// Only its ban on this route, as `bans list` shows it (`"POST /login"`; a pattern's
        /// parameters as `:id`), or `every` for the limiter's.
        #[arg(long)]
        route: Option<String>,
        /// The services' key prefix (`Keys::prefix`).
        #[arg(long, env = "RATELIMIT_KEY_PREFIX", default_value = "rl")]
        prefix: String,
    },
}

#[derive(Subcommand)]
enum OverrideCommand {
    /// Lists the overrides in the hash.
    List,
    /// Sets a route's override, or a shared budget's (in force on every instance within
    /// about a second).
    Set {
        /// The route, as the route table names it: `"POST /login"`; or a shared budget,
        /// `"budget API"` (every route naming it counts under the override, at its cost).
        route: String,
        /// Declarations in the attribute's syntax: `'limit = 5, window = "5m"'`; stacked
        /// ones separated by `;`.
        declarations: String,
        /// For requests of this tier only (the `Tier` the auth layer puts in the request).
        #[arg(long)]
        tier: Option<String>,
        /// Replaces the declared stack even where the override drops one of its limits, its
        /// `count = "failures"` or its `block` (without it, such an override is refused,
        /// naming what it drops).
        #[arg(long)]
        replace_stack: bool,
    },
    /// Clears a route's or a shared budget's override: its declared policy is in force again
    /// (once the hash is one the services take).
    Clear {
        /// The route, as the route table names it: `"POST /login"`; or `"budget API"`.
        route: String,
        /// The tier's override rather than the route's.
        #[arg(long)]
        tier: Option<String>,
    },
}

#[derive(Subcommand)]
enum ListCommand {
    /// Lists the entries.
    List,
    /// Adds an entry (replacing the same entry written with other routes).
    Add {
        #[command(flatten)]
        entry: EntryArgs,
        /// Why (shown by `list`).
        #[arg(long, default_value = "")]
        note: String,
        /// Allow entries only: the routes the entry opens, as the route table names them
        /// (`--routes "POST /login"`, repeated for more). Without it an allow entry opens
        /// every route that counts no username; sign-in routes stay limited.
        #[arg(long = "routes", value_name = "ROUTE")]
        routes: Vec<String>,
    },
    /// Removes an entry.
    Remove {
        #[command(flatten)]
        entry: EntryArgs,
    },
}

#[derive(Args)]
struct EntryArgs {
    /// `ip` (an address or a CIDR range, IPv4 or IPv6), `api_key` or `user_id`.
    kind: String,
    /// The address or range, key or id. An API key is written as its fingerprint; leave it
    /// out, or give `-`, to read it from standard input (a command line is visible to every
    /// user of the machine).
    value: Option<String>,
}

/// A client on a route, by the plain values of the parts the route counts.
#[derive(Args)]
struct ClientArgs {
    /// The route, as the route table names it: `"POST /login"`; or a shared budget,
    /// `"budget API"` (every route's budget: `reset` on a route leaves it alone).
    route: String,
    /// The client's address.
    #[arg(long, value_parser = an_address)]
    ip: Option<String>,
    /// The username it submits (put in canonical form as the services do by default).
    #[arg(long)]
    username: Option<String>,
    /// Its user id.
    #[arg(long)]
    user_id: Option<String>,
    /// Its API key.
    #[arg(long)]
    api_key: Option<String>,
    /// A header the route counts by: `name=value`.
    #[arg(long)]
    header: Vec<String>,
    /// The client's tier, when it has limits of its own on the route (declared, or an
    /// override's): its budget counts in the tier's keys.
    #[arg(long)]
    tier: Option<String>,
    /// The services' key prefix (`Keys::prefix`).
    #[arg(long, env = "RATELIMIT_KEY_PREFIX", default_value = "rl")]
    prefix: String,
}

fn selector(route: &str, tier: Option<&str>) -> Result<RouteSelector, String> {
    let written = match tier {
        Some(tier) => format!("{route} tier \"{tier}\""),
        None => route.to_owned(),
    };
    RouteSelector::parse(&written)
}

/// The services' key secret, from RATELIMIT_KEY_SECRET (never an argument).
fn key_secret() -> Result<Option<KeySecret>, String> {
    match std::env::var("RATELIMIT_KEY_SECRET") {
        Ok(secret) => KeySecret::new(secret.trim())
            .map(Some)
            .map_err(|e| format!("RATELIMIT_KEY_SECRET: {e}")),
        Err(_) => Ok(None),
    }
}

/// One line of standard input, without its line break.
fn read_stdin(what: &str) -> Result<String, String> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| format!("reading {what} from standard input: {e}"))?;
    let line = line.trim_end_matches(['\r', '\n']).to_owned();
    if line.trim().is_empty() {
        return Err(format!("no {what} on standard input"));
    }
    Ok(line)
}

/// An API key's fingerprint under the services' secret, saying on stderr when there is
/// none (the fingerprints then match services without one only).
fn fingerprint(key: &str) -> Result<String, String> {
    let secret = key_secret()?;
    if secret.is_none() {
        eprintln!("note: RATELIMIT_KEY_SECRET is not set: the fingerprint is unkeyed, and matches only services without a key secret");
    }
    Ok(api_key_fingerprint(key, secret.as_ref()))
}

/// The entry `args` names (an API key as its fingerprint, read from stdin when not given),
/// and the same key as an entry written in plain text before fingerprints (which `add`
/// replaces and `remove` removes too).
fn entry(args: &EntryArgs) -> Result<(ListEntry, Option<ListEntry>), String> {
    let key = match (args.kind.as_str(), args.value.as_deref()) {
        ("api_key", None | Some("-")) => Some(read_stdin("the API key")?),
        ("api_key", Some(value)) if is_fingerprint(value) => None,
        ("api_key", Some(value)) => {
            eprintln!("note: an API key on the command line is visible to the machine's other users and kept in shell history; give `-` to read it from standard input");
            Some(value.to_owned())
        }
        (_, Some(_)) => None,
        (kind, None) => return Err(format!("give the {kind} to list")),
    };
    let value = match &key {
        Some(key) => fingerprint(key)?,
        None => args.value.clone().unwrap_or_default(),
    };
    let entry = ListEntry::parse(&format!("{} {value}", args.kind))?;
    Ok((entry, key.map(ListEntry::ApiKey)))
}

/// The fields of the hash naming `entry` on `kind`'s list, or its plain-text form.
async fn fields_naming(
    admin: &Admin,
    kind: ListKind,
    entry: &ListEntry,
    plain: Option<&ListEntry>,
) -> Result<Vec<String>, String> {
    let mut fields = admin.entry_fields(kind, entry).await?;
    if let Some(plain) = plain {
        fields.extend(admin.entry_fields(kind, plain).await?);
    }
    Ok(fields)
}

/// The deployment options, by argument id and as the command line and the environment call
/// them.
const DEPLOYMENTS: [(&str, &str, &str); 3] = [
    ("redis", "--redis", "REDIS_URL"),
    ("cluster", "--cluster", "REDIS_CLUSTER_NODES"),
    ("sentinel", "--sentinel", "REDIS_SENTINEL_NODES"),
];

/// The id of the deployment option in force: the one given on the command line, else the
/// one the environment gives, else `redis` (its default).
fn deployment(matches: &ArgMatches) -> Result<&'static str, String> {
    for source in [ValueSource::CommandLine, ValueSource::EnvVariable] {
        let given: Vec<_> = DEPLOYMENTS
            .iter()
            .filter(|(id, _, _)| matches.value_source(id) == Some(source))
            .collect();
        match given.as_slice() {
            [] => continue,
            [(id, _, _)] => return Ok(id),
            more => {
                let names: Vec<&str> = more
                    .iter()
                    .map(|(_, flag, env)| {
                        if source == ValueSource::CommandLine {
                            *flag
                        } else {
                            *env
                        }
                    })
                    .collect();
                return Err(format!(
                    "{} name two Redis deployments: give one",
                    names.join(" and ")
                ));
            }
        }
    }
    Ok("redis")
}

async fn run(cli: Cli, deployment: &str) -> Result<(), String> {
    let target = match (deployment, cli.cluster, cli.sentinel) {
        ("cluster", Some(nodes), _) => Target::Cluster(nodes),
        ("sentinel", _, Some(sentinels)) => Target::Sentinel {
            sentinels,
            master: cli.sentinel_master.ok_or(
                "--sentinel (REDIS_SENTINEL_NODES) needs --sentinel-master (REDIS_SENTINEL_MASTER), the name the sentinels know the primary by",
            )?,
            password: cli.sentinel_master_password,
        },
        _ => Target::Url(cli.redis),
    };
    let bounds = ListBounds {
        widest: WidestRanges {
            ipv4: cli.widest_ipv4,
            ipv6: cli.widest_ipv6,
        },
        plain_api_keys: cli.plain_api_keys,
    };
    if let Command::Fingerprint = cli.command {
        println!("{}", fingerprint(&read_stdin("the API key")?)?);
        return Ok(());
    }
    let admin = Admin::connect(target, &cli.key, bounds).await?;
    let file = cli.overrides_file;
    match cli.command {
        Command::Routes => {
            let published = admin.published().await?;
            let (routes, gone) = (&published.routes, &published.gone);
            let overrides = admin.fields().await?;
            let file = admin.overrides_file(file.as_deref()).await?;
            if routes.is_empty() {
                println!(
                    "no service has published its routes to `{}` yet",
                    admin.routes_key()
                );
            }
            for (route, declared) in routes {
                println!("{route}\n  declared: {declared}");
                for (field, value) in &published.tiers {
                    if let Ok(RouteSelector {
                        route: of,
                        tier: Some(tier),
                    }) = RouteSelector::parse(field)
                    {
                        if &of == route {
                            println!("  tier {tier} (declared): {value}");
                        }
                    }
                }
                for (field, value) in &overrides {
                    if let Ok(s) = RouteSelector::parse(field) {
                        if &s.route == route {
                            match &s.tier {
                                Some(tier) => println!("  tier {tier}: {value}"),
                                None => println!("  override: {value}"),
                            }
                        }
                    }
                }
                for (s, (text, _)) in &file.routes {
                    if &s.route == route && !overrides.contains_key(&s.to_string()) {
                        match &s.tier {
                            Some(tier) => println!("  tier {tier} (file): {text}"),
                            None => println!("  override (file): {text}"),
                        }
                    }
                }
            }
            budgets::print(&published, &overrides, &file);
            for (route, ago) in gone {
                println!(
                    "{route}\n  gone: last published {} minutes ago, by services no longer running",
                    ago / 60
                );
            }
            warn_if_refused(&admin).await
        }
        Command::Override(OverrideCommand::List) => {
            for (field, value) in admin.fields().await? {
                if RouteSelector::parse(&field).is_ok() || budgets::named(&field).is_some() {
                    println!("{field} = '{value}'");
                }
            }
            warn_if_refused(&admin).await
        }
        Command::Override(OverrideCommand::Set {
            route,
            declarations,
            tier,
            replace_stack,
        }) => {
            if let Some(name) = budgets::named(&route) {
                if tier.is_some() {
                    return Err("a shared budget is every tier's: give no --tier".to_owned());
                }
                return budgets::set(&admin, name, &declarations).await;
            }
            let selector = selector(&route, tier.as_deref())?;
            admin.check(&selector, &declarations).await?;
            let published = admin.published().await?;
            // A tier's override replaces the tier's declared limits when it has some, else
            // the route's.
            let declared = published
                .tiers
                .get(&selector.to_string())
                .or_else(|| published.routes.get(&selector.route));
            if let Some(declared) = declared {
                let fields = admin.fields().await?;
                let budgets = Admin::budgets_in_force(&published, &fields, &RuleSet::default())?;
                let (dropped, stops_counting_names) =
                    stack_change(&selector.route, declared, &declarations, &budgets)?;
                if !dropped.is_empty() {
                    let what = dropped.join("; ");
                    if !replace_stack {
                        return Err(format!(
                            "not written: an override replaces the whole declared stack (`{declared}`), and this one drops {what}; write the whole stack you want, or give --replace-stack to drop them"
                        ));
                    }
                    eprintln!("note: the override replaces the declared stack and drops {what}");
                }
                if stops_counting_names {
                    eprintln!("note: the declared route counts a username and the override does not: allow entries without `routes` open it while the override holds");
                }
            }
            match admin.set(&selector.to_string(), &declarations).await? {
                Some(before) if before != declarations => {
                    println!("set `{selector}` = '{declarations}' (it was '{before}')");
                }
                _ => println!("set `{selector}` = '{declarations}'"),
            }
            Ok(())
        }
        Command::Override(OverrideCommand::Clear { route, tier }) => {
            let selector = match budgets::named(&route) {
                Some(name) if tier.is_none() => format!("budget {name}"),
                Some(_) => return Err("a shared budget is every tier's: give no --tier".to_owned()),
                None => selector(&route, tier.as_deref())?.to_string(),
            };
            if admin.remove(&selector).await? {
                // While the services refuse the hash, they keep what they last took, this
                // override included.
                let problems = admin.hash_problems().await?;
                if problems.is_empty() && budgets::named(&selector).is_some() {
                    println!("cleared `{selector}`: its declaration is in force again, or the services' overrides file's override of it");
                } else if problems.is_empty() {
                    println!("cleared `{selector}`: its declared policy is in force again");
                } else {
                    println!("cleared `{selector}` from the hash");
                }
                warn_refused(&problems);
                Ok(())
            } else {
                Err(format!("`{selector}` has no override in `{}`", cli.key))
            }
        }
        Command::Allow(command) => list(&admin, ListKind::Allow, command, bounds).await,
        Command::Deny(command) => list(&admin, ListKind::Deny, command, bounds).await,
        Command::Fingerprint => Ok(()),
        Command::Check {
            route,
            declarations,
        } => {
            if let Some(name) = budgets::named(&route) {
                budgets::check(&admin, name, &declarations).await?;
                println!("`budget {name}` = '{declarations}': valid");
                return Ok(());
            }
            let selector = selector(&route, None)?;
            admin.check(&selector, &declarations).await?;
            println!("`{selector}` = '{declarations}': valid");
            Ok(())
        }
        Command::Bans(BanCommand::List { prefix }) => {
            let bans = bans::in_force(&admin, &prefix, key_secret()?.as_ref()).await?;
            if bans.is_empty() {
                println!("no ban in force (key prefix `{prefix}`)");
            }
            for ban in bans {
                println!("{}", ban.line());
            }
            Ok(())
        }
        Command::Bans(BanCommand::Lift {
            fingerprint,
            route,
            prefix,
        }) => {
            if !is_fingerprint(&fingerprint) {
                return Err(format!(
                    "`{fingerprint}` is no fingerprint: give one as `bans list` shows it (`fp:` and 16 hex digits)"
                ));
            }
            let bans: Vec<bans::Ban> = bans::in_force(&admin, &prefix, key_secret()?.as_ref())
                .await?
                .into_iter()
                .filter(|ban| ban.fingerprint == fingerprint)
                .filter(|ban| match route.as_deref() {
                    None => true,
                    Some("every") => ban.covers.starts_with("every route"),
                    Some(route) => ban.covers == route,
                })
                .collect();
            let lifted = bans::lift(&admin, &bans).await?;
            if lifted == 0 {
                println!("no ban of {fingerprint} in force");
            } else {
                println!("lifted {lifted} ban(s) of {fingerprint}");
            }
            Ok(())
        }
        Command::Reset(args) => {
            let file = admin.overrides_file(file.as_deref()).await?;
            if let Some(name) = budgets::named(&args.route) {
                let held = !budgets::budget(&admin, name, &args, &file, false)
                    .await?
                    .iter()
                    .all(|(limit, state)| whole(limit, state));
                budgets::budget(&admin, name, &args, &file, true).await?;
                if held {
                    println!(
                        "reset `budget {name}` for the client given, on every route naming it"
                    );
                } else {
                    println!(
                        "nothing to reset: `budget {name}` held no count for the client given"
                    );
                    warn_keys_unseen(&args);
                }
                return Ok(());
            }
            let selector = selector(&args.route, args.tier.as_deref())?;
            let held = !admin
                .budget(&selector, &args, &file, false)
                .await?
                .iter()
                .all(|(limit, state)| whole(limit, state));
            admin.budget(&selector, &args, &file, true).await?;
            if held {
                println!("reset `{selector}` for the client given");
            } else {
                println!("nothing to reset: `{selector}` held no count for the client given");
                warn_keys_unseen(&args);
            }
            Ok(())
        }
        Command::State(args) => {
            let file = admin.overrides_file(file.as_deref()).await?;
            let states = match budgets::named(&args.route) {
                Some(name) => budgets::budget(&admin, name, &args, &file, false).await?,
                None => {
                    let selector = selector(&args.route, args.tier.as_deref())?;
                    admin.budget(&selector, &args, &file, false).await?
                }
            };
            if states.iter().all(|(limit, state)| whole(limit, state)) {
                warn_keys_unseen(&args);
            }
            for (limit, state) in states {
                let left = left_now(&limit, &state);
                let count = limit.max().saturating_sub(left);
                let mut line = if count == 0 {
                    format!("{limit}: count 0, remaining {left}, whole")
                } else {
                    format!(
                        "{limit}: count {count}, remaining {left}, whole again in {}s",
                        state.reset_after.as_secs_f64().ceil()
                    )
                };
                if !state.allowed {
                    line.push_str(&format!(
                        ", refused for {}s",
                        state.retry_after.as_secs_f64().ceil()
                    ));
                }
                println!("{line}");
            }
            Ok(())
        }
    }
}

/// `--ip`'s value, when it is an IPv4 or IPv6 address.
fn an_address(text: &str) -> Result<String, String> {
    text.trim()
        .parse::<std::net::IpAddr>()
        .map(|_| text.trim().to_owned())
        .map_err(|_| format!("`{text}` is no IPv4 or IPv6 address"))
}

/// What is left of a limit's budget now, in units. The peek answers as the next request
/// would find it: that request's cost more than what would be left after it, or nothing
/// when it would be refused.
fn left_now(limit: &ratelimit_runtime::Limit, state: &ratelimit_runtime::store::LimitState) -> u32 {
    if state.allowed {
        state
            .remaining
            .saturating_add(limit.cost())
            .min(limit.max())
    } else {
        0
    }
}

/// Whether a limit's budget is whole: nothing counted, nothing refused.
fn whole(limit: &ratelimit_runtime::Limit, state: &ratelimit_runtime::store::LimitState) -> bool {
    left_now(limit, state) >= limit.max()
}

/// Says on stderr, when the client's every budget is whole, what would make the command
/// read keys the services do not count in: a client that is refused all the same is keyed
/// differently here.
fn warn_keys_unseen(args: &ClientArgs) {
    let secret = if std::env::var_os("RATELIMIT_KEY_SECRET").is_some() {
        "set"
    } else {
        "not set"
    };
    eprintln!(
        "note: every budget of this client is whole here (key prefix `{}`, RATELIMIT_KEY_SECRET {secret}); if the services refuse it all the same, give the command their key prefix (RATELIMIT_KEY_PREFIX, their `Keys::prefix`) and key secret (RATELIMIT_KEY_SECRET), the address or name as they count it, the client's tier (`--tier`) when it has limits of its own on the route, and their overrides file (`--overrides-file`, RATELIMIT_OVERRIDES_FILE) when it overrides the route",
        args.prefix
    );
}

/// Says on stderr when the services refuse the hash as a whole as it stands: they keep the
/// rules they last took from it until it is fixed, whatever a listing or a removal shows.
async fn warn_if_refused(admin: &Admin) -> Result<(), String> {
    warn_refused(&admin.hash_problems().await?);
    Ok(())
}

/// The warning of [`warn_if_refused`], for `problems` read already.
fn warn_refused(problems: &[String]) {
    if !problems.is_empty() {
        eprintln!(
            "warning: the services refuse the overrides hash as it stands, as a whole: they keep the rules they last took from it (which may differ from what it holds now, an override cleared since included) until these fields are fixed or cleared:\n  {}",
            problems.join("\n  ")
        );
    }
}

/// What the override `text` of `route` drops from the route's `declared` stack (limits, a
/// `count = "failures"`, a `block`: an override replaces the whole stack, so writing only the
/// limit to change would quietly lift the others, a sign-in route's lockout say), and
/// whether it stops counting a username the declared policy counts (allow entries that name
/// no route then open the route).
fn stack_change(
    route: &str,
    declared: &str,
    text: &str,
    budgets: &BTreeMap<&'static str, ratelimit_runtime::Limit>,
) -> Result<(Vec<String>, bool), String> {
    let read = |text: &str, declared: Option<&Policy>| {
        policy_with_budgets(route, text, declared, budgets).map_err(|e| e.join("\n"))
    };
    let declared = read(declared, None)?;
    let written = read(text, Some(&declared))?;
    let counts = |policy: &Policy| policy.limited().is_some_and(|p| p.reads_username());
    let stops_counting_names = counts(&declared) && !counts(&written);
    let (Policy::Limited(declared), Policy::Limited(written)) = (declared, written) else {
        return Ok((Vec::new(), stops_counting_names));
    };
    let mut dropped = Vec::new();
    let (before, after) = (declared.limits(), written.limits());
    if after.len() < before.len() {
        dropped.push(format!(
            "{} of its {} limits",
            before.len() - after.len(),
            before.len()
        ));
    }
    let counts_failures = |limits: &[ratelimit_runtime::Limit]| {
        limits
            .iter()
            .any(|l| l.count() != ratelimit_runtime::Count::Requests)
    };
    if counts_failures(before) && !counts_failures(after) {
        dropped.push("`count = \"failures\"`".to_owned());
    }
    let blocks = |limits: &[ratelimit_runtime::Limit]| limits.iter().any(|l| l.block().is_some());
    if blocks(before) && !blocks(after) {
        dropped.push("its `block` (the lockout)".to_owned());
    }
    Ok((dropped, stops_counting_names))
}

async fn list(
    admin: &Admin,
    kind: ListKind,
    command: ListCommand,
    bounds: ListBounds,
) -> Result<(), String> {
    match command {
        ListCommand::List => {
            let prefix = format!("{} ", kind.as_str());
            for (field, note) in admin.fields().await? {
                if field.strip_prefix(&prefix).is_none() {
                    continue;
                }
                // An API key written in plain text (before fingerprints) is shown by its
                // fingerprint, never as written.
                let shown = match RuleSet::from_fields([(field.as_str(), "")]) {
                    Ok(set) => match set.lists.keys().next() {
                        Some((_, entry)) if entry.is_plain_api_key() => entry.redacted(),
                        _ => field[prefix.len()..].to_owned(),
                    },
                    Err(_) => redacted_field(&field[prefix.len()..], &field),
                };
                if note.is_empty() {
                    println!("{shown}");
                } else {
                    println!("{shown}  # {note}");
                }
            }
            warn_if_refused(admin).await
        }
        ListCommand::Add {
            entry: args,
            note,
            routes,
        } => {
            if note.contains(char::is_control) {
                return Err(
                    "a note is one line of text: no line breaks or other control characters"
                        .to_owned(),
                );
            }
            if kind == ListKind::Deny && !routes.is_empty() {
                return Err(
                    "--routes scopes allow entries; a deny entry applies on every route".to_owned(),
                );
            }
            let (entry, plain) = entry(&args)?;
            if let ListEntry::Ip(net) = &entry {
                // `10.1.2.3/8` is read as `10.0.0.0/8`, and `127.0.0.1/0` as every address:
                // a range is written as its first address, so such a slip is caught here.
                let value = args.value.as_deref().unwrap_or_default();
                let written = value
                    .trim()
                    .split('/')
                    .next()
                    .and_then(|address| address.parse::<std::net::IpAddr>().ok())
                    .map(|address| match address {
                        std::net::IpAddr::V6(v6) => {
                            v6.to_ipv4_mapped().map_or(address, std::net::IpAddr::V4)
                        }
                        v4 => v4,
                    });
                if value.contains('/') && written.is_some_and(|address| address != net.addr()) {
                    return Err(format!(
                        "`{value}` has bits set past its prefix: it means the range `{net}`; write that if you mean it"
                    ));
                }
            }
            let declared = admin.routes().await?;
            let mut opened = BTreeSet::new();
            for route in &routes {
                let selector = RouteSelector::parse(route)?;
                if !declared.contains_key(&selector.route) {
                    let known: Vec<&str> = declared.keys().map(String::as_str).collect();
                    return Err(format!(
                        "`{}` names no route the services declare{}",
                        selector.route,
                        ratelimit_grammar::suggest::did_you_mean_any_case(&selector.route, &known)
                    ));
                }
                opened.insert(selector.route);
            }
            let field = list_field(kind, &entry, Some(&opened));
            // Checked as the services read it, so nothing a service would refuse is written.
            let set = RuleSet::from_fields([(field.as_str(), note.as_str())])
                .map_err(|e| e.join("\n"))?;
            let problems = set.list_problems(bounds.widest, bounds.plain_api_keys);
            if !problems.is_empty() {
                return Err(problems.join("\n"));
            }
            let others = fields_naming(admin, kind, &entry, plain.as_ref()).await?;
            match admin.replace(&field, &note, &others).await? {
                None if others.iter().any(|other| *other != field) => println!(
                    "{} (replacing {})",
                    field,
                    others
                        .iter()
                        .map(|o| format!("`{o}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => println!("{field}"),
                Some(before) if before == note => {
                    println!("{field} (already listed)");
                }
                Some(before) => println!(
                    "{field} (already listed; its note was {})",
                    if before.is_empty() {
                        "empty".to_owned()
                    } else {
                        format!("`{before}`")
                    }
                ),
            }
            let mut sign_in = Vec::new();
            if kind == ListKind::Allow && opened.is_empty() {
                // By the policy in force: an override may count a username or stop counting one.
                let fields = admin.fields().await?;
                for route in declared.keys() {
                    let selector = RouteSelector {
                        route: route.clone(),
                        tier: None,
                    };
                    let (policy, _) = admin
                        .policy(&selector, &fields, &RuleSet::default())
                        .await?;
                    if policy.limited().is_some_and(|p| p.reads_username()) {
                        sign_in.push(route.as_str());
                    }
                }
            }
            say_what_it_covers(kind, &entry, &opened, &sign_in);
            Ok(())
        }
        ListCommand::Remove { entry: args } => {
            let (entry, plain) = entry(&args)?;
            let fields = fields_naming(admin, kind, &entry, plain.as_ref()).await?;
            if admin.remove_all(&fields).await? > 0 {
                println!("removed {} {entry}", kind.as_str());
                warn_if_refused(admin).await
            } else {
                Err(format!("no entry `{} {entry}`", kind.as_str()))
            }
        }
    }
}

/// Says which routes an entry opens (an allow entry), or which clients it covers (an IPv6
/// deny entry narrower than the group the services count by).
fn say_what_it_covers(
    kind: ListKind,
    entry: &ListEntry,
    opened: &BTreeSet<String>,
    sign_in: &[&str],
) {
    match kind {
        ListKind::Allow if !opened.is_empty() => {
            let routes: Vec<&str> = opened.iter().map(String::as_str).collect();
            println!("opens: {}", routes.join(", "));
        }
        ListKind::Allow => {
            if sign_in.is_empty() {
                println!("opens: every limited route");
            } else {
                println!(
                    "opens: every limited route but {}, which count a username (give --routes to open them)",
                    sign_in.join(", ")
                );
            }
        }
        ListKind::Deny => {
            if let ListEntry::Ip(ipnet::IpNet::V6(net)) = entry {
                if net.prefix_len() > 64 {
                    let group = ipnet::Ipv6Net::new(net.addr(), 64).map(|g| g.trunc());
                    if let Ok(group) = group {
                        println!("covers: every client of {group}, as the services count IPv6 clients by /64 (or by their `TrustedProxies::ipv6_prefix`)");
                    }
                }
            }
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let chosen = deployment(&matches);
    if chosen == Ok("redis") && matches.value_source("redis") == Some(ValueSource::DefaultValue) {
        // The services may read another Redis: say which one this command writes to.
        eprintln!(
            "note: no --redis, REDIS_URL, cluster or sentinel given: using redis://127.0.0.1:6379"
        );
    }
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    let done = match chosen {
        Ok(chosen) => run(cli, chosen).await,
        Err(error) => Err(error),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
