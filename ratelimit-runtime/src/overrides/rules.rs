//! One source's overrides as written (a file, or the Redis hash): route selectors with
//! declarations in the attribute's syntax, and allow and deny entries, checked as a whole.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    net::IpAddr,
};

use actix_web::http::Method;
use ipnet::IpNet;
use ratelimit_grammar::{parse_stack, Declaration};

use crate::key::KeySecret;

pub use ratelimit_grammar::{check_tier, MAX_TIER_LEN};

/// What an override applies to: a route as the route table names it (`POST /login`),
/// optionally for one tier only (`GET /api/search tier "pro"`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteSelector {
    /// `METHOD /full/pattern`.
    pub route: String,
    /// The tier the override is for; `None` for every request without a tier override.
    pub tier: Option<String>,
}

impl RouteSelector {
    /// Parses `METHOD /pattern` or `METHOD /pattern tier "name"`.
    ///
    /// # Errors
    ///
    /// What is wrong with it, in one line.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (route, tier) = match text.split_once(" tier ") {
            Some((route, tier)) => (route.trim(), Some(tier.trim())),
            None => (text, None),
        };
        let shape = || {
            format!("`{text}` names no route: write `METHOD /full/pattern` as the route table shows it (`POST /login`), optionally followed by `tier \"<name>\"`")
        };
        let (method, pattern) = route.split_once(' ').ok_or_else(shape)?;
        let pattern = pattern.trim();
        if method.chars().any(|c| c.is_ascii_lowercase()) && pattern.starts_with('/') {
            return Err(format!(
                "{}; did you mean `{} {pattern}`? (methods are upper case)",
                shape(),
                method.to_ascii_uppercase()
            ));
        }
        if Method::from_bytes(method.as_bytes()).is_err()
            || method.chars().any(|c| c.is_ascii_lowercase())
            || !pattern.starts_with('/')
            || pattern.contains(char::is_whitespace)
        {
            return Err(shape());
        }
        let tier = match tier {
            None => None,
            Some(quoted) => {
                let name = quoted
                    .strip_prefix('"')
                    .and_then(|q| q.strip_suffix('"'))
                    .ok_or_else(|| format!("`{text}`: write the tier quoted, `tier \"pro\"`"))?;
                check_tier(name).map_err(|e| format!("`{text}`: {e}"))?;
                Some(name.to_owned())
            }
        };
        Ok(RouteSelector {
            route: format!("{method} {pattern}"),
            tier,
        })
    }
}

impl fmt::Display for RouteSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tier {
            Some(tier) => write!(f, "{} tier \"{tier}\"", self.route),
            None => f.write_str(&self.route),
        }
    }
}

/// Allowed (never limited) or denied (answered `403`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ListKind {
    /// Never limited, with no store call.
    Allow,
    /// Answered `403 Forbidden`, with no store call.
    Deny,
}

impl ListKind {
    /// `allow` or `deny`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ListKind::Allow => "allow",
            ListKind::Deny => "deny",
        }
    }
}

/// Who an allow or deny entry names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ListEntry {
    /// A client address range (`203.0.113.0/24`, `2001:db8::/32`; one address alone is a
    /// /32 or /128), matched against the address the limiter resolves (trusted proxies).
    Ip(IpNet),
    /// An API key, as the limiter's [`ApiKeySource`](crate::identity::ApiKeySource) reads it,
    /// written as its fingerprint (`fp:` and 16 hex digits, [`api_key_fingerprint`]); a key
    /// written in plain text is refused unless the services take plain keys
    /// ([`Overrides::plain_api_keys`](super::Overrides::plain_api_keys)).
    ApiKey(String),
    /// A user id, as the limiter's [`UserIdSource`](crate::identity::UserIdSource) reads it.
    UserId(String),
}

/// The prefix of an API key's fingerprint in allow and deny lists.
pub const FINGERPRINT_PREFIX: &str = "fp:";

/// How an API key is written in allow and deny lists: `fp:` and 16 hex digits (64 bits) of
/// HMAC-SHA256 under the services' [`KeySecret`] (plain SHA-256 without one), so that the
/// file, the Redis hash and the admin command's output never hold the key itself. The
/// services compare the fingerprint of the key each request sends; give the admin command
/// the services' secret (`RATELIMIT_KEY_SECRET`), or the fingerprints it writes match
/// nothing. Rotating the secret unlists every key.
///
/// ```
/// use ratelimit_runtime::{key::KeySecret, overrides::api_key_fingerprint};
///
/// let secret = KeySecret::new("0123456789abcdef0123").unwrap();
/// let print = api_key_fingerprint("monitoring-key", Some(&secret));
/// assert!(print.starts_with("fp:") && print.len() == 19);
/// assert_ne!(print, api_key_fingerprint("monitoring-key", None));
/// ```
pub fn api_key_fingerprint(key: &str, secret: Option<&KeySecret>) -> String {
    let digest = match secret {
        Some(secret) => secret.keyed_hash("list:api_key", key),
        None => crate::key::short_hash(&format!("list:api_key\0{key}")),
    };
    format!("{FINGERPRINT_PREFIX}{digest}")
}

/// The API key a field names in plain text, if any: what follows `api_key` (up to the routes
/// an allow entry opens), when it is not a fingerprint.
fn plain_key_in(field: &str) -> Option<&str> {
    let at = field.find("api_key")?;
    let rest = field[at + "api_key".len()..].trim_start();
    let key = rest.split(ROUTES_WORD).next().unwrap_or(rest).trim();
    (!key.is_empty() && !is_fingerprint(key)).then_some(key)
}

/// `text` (a field, or a message that shows one) as a log line or an error may show it: an
/// API key `field` names in plain text replaced by its unkeyed fingerprint.
///
/// ```
/// use ratelimit_runtime::overrides::redacted_field;
///
/// let shown = redacted_field("allow api_key sk_live_123", "allow api_key sk_live_123");
/// assert!(!shown.contains("sk_live_123") && shown.contains("fp:"));
/// assert_eq!(redacted_field("deny ip 10.0.0.0/8", "deny ip 10.0.0.0/8"), "deny ip 10.0.0.0/8");
/// ```
pub fn redacted_field(text: &str, field: &str) -> String {
    match plain_key_in(field) {
        Some(key) => text.replace(
            key,
            &format!("{} (written in plain text)", api_key_fingerprint(key, None)),
        ),
        None => text.to_owned(),
    }
}

/// Whether `text` is an API key's fingerprint as [`api_key_fingerprint`] writes it.
pub fn is_fingerprint(text: &str) -> bool {
    text.strip_prefix(FINGERPRINT_PREFIX).is_some_and(|hex| {
        hex.len() == 16
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

impl ListEntry {
    /// Parses `ip <cidr>`, `api_key <fingerprint>` or `user_id <id>`.
    ///
    /// # Errors
    ///
    /// What is wrong with it, in one line.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (kind, value) = text
            .split_once(' ')
            .map_or((text, ""), |(k, v)| (k, v.trim()));
        if value.is_empty() {
            return Err(format!(
                "`{text}`: write `ip <address or range>`, `api_key <key>` or `user_id <id>`"
            ));
        }
        match kind {
            "ip" => parse_range(value).map(ListEntry::Ip),
            "api_key" if value.starts_with(FINGERPRINT_PREFIX) && !is_fingerprint(value) => {
                Err(format!(
                    "`{text}`: a fingerprint is `{FINGERPRINT_PREFIX}` and 16 lower-case hex digits, as `ratelimit-admin fingerprint` prints it"
                ))
            }
            "api_key" => Ok(ListEntry::ApiKey(value.to_owned())),
            "user_id" => Ok(ListEntry::UserId(value.to_owned())),
            other => Err(format!(
                "`{other}` is no kind of list entry; expected `ip`, `api_key` or `user_id`{}",
                ratelimit_grammar::suggest::did_you_mean(other, &["ip", "api_key", "user_id"])
            )),
        }
    }

    /// The kind, as entries are written.
    pub const fn kind(&self) -> &'static str {
        match self {
            ListEntry::Ip(_) => "ip",
            ListEntry::ApiKey(_) => "api_key",
            ListEntry::UserId(_) => "user_id",
        }
    }

    /// Whether it is an API key written in plain text rather than as its fingerprint.
    pub fn is_plain_api_key(&self) -> bool {
        matches!(self, ListEntry::ApiKey(key) if !is_fingerprint(key))
    }

    /// The entry as a log line may show it: a plain API key by its fingerprint (unkeyed).
    pub fn redacted(&self) -> String {
        match self {
            ListEntry::ApiKey(key) if !is_fingerprint(key) => {
                format!(
                    "api_key {} (written in plain text)",
                    api_key_fingerprint(key, None)
                )
            }
            other => other.to_string(),
        }
    }
}

/// The bounds on the address ranges a list may name: a range wider than these (a shorter
/// prefix) is refused, so that one slip or one hostile write cannot deny or lift the limits
/// of a whole address family (`0.0.0.0/0`). The default refuses anything wider than an
/// IPv4 /8 or an IPv6 /32; [`Overrides::widest_ranges`](super::Overrides::widest_ranges)
/// changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WidestRanges {
    /// The shortest IPv4 prefix a list may name.
    pub ipv4: u8,
    /// The shortest IPv6 prefix a list may name.
    pub ipv6: u8,
}

impl Default for WidestRanges {
    fn default() -> Self {
        WidestRanges { ipv4: 8, ipv6: 32 }
    }
}

impl WidestRanges {
    /// The problem with `net`, when it is wider than these bounds.
    ///
    /// ```
    /// use ratelimit_runtime::overrides::WidestRanges;
    ///
    /// let bounds = WidestRanges::default();
    /// assert!(bounds.check(&"10.0.0.0/8".parse().unwrap()).is_ok());
    /// assert!(bounds.check(&"0.0.0.0/0".parse().unwrap()).is_err());
    /// assert!(bounds.check(&"2001:db8::/31".parse().unwrap()).is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// What is wrong, in one line.
    pub fn check(&self, net: &IpNet) -> Result<(), String> {
        let (widest, family) = match net {
            IpNet::V4(_) => (self.ipv4, "IPv4"),
            IpNet::V6(_) => (self.ipv6, "IPv6"),
        };
        if net.prefix_len() < widest {
            return Err(format!(
                "`{net}` is wider than the widest {family} range a list may name, /{widest} (`Overrides::widest_ranges`, the admin command's `--widest-ipv4` / `--widest-ipv6`)"
            ));
        }
        Ok(())
    }
}

impl fmt::Display for ListEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListEntry::Ip(net) => write!(f, "ip {net}"),
            ListEntry::ApiKey(key) => write!(f, "api_key {key}"),
            ListEntry::UserId(id) => write!(f, "user_id {id}"),
        }
    }
}

/// An address range, or one address.
fn parse_range(text: &str) -> Result<IpNet, String> {
    if let Ok(net) = text.parse::<IpNet>() {
        // `10.1.2.3/8` means the range it falls in.
        return Ok(unmapped(net.trunc()));
    }
    text.parse::<IpAddr>()
        .map(|address| unmapped(IpNet::from(address)))
        .map_err(|_| {
            format!("`{text}` is no address or range (CIDR): e.g. `203.0.113.0/24`, `2001:db8::/32`, `198.51.100.7`")
        })
}

/// An IPv4-mapped IPv6 range (`::ffff:192.0.2.0/120`) as the IPv4 range it maps: clients
/// are matched by the IPv4 address such a client connects from, so the mapped form would
/// match none.
fn unmapped(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net {
        if let (Some(v4), Some(prefix)) =
            (v6.addr().to_ipv4_mapped(), v6.prefix_len().checked_sub(96))
        {
            if let Ok(v4) = ipnet::Ipv4Net::new(v4, prefix) {
                return IpNet::V4(v4);
            }
        }
    }
    net
}

/// One source's overrides, checked: every route's declarations parsed, every entry read.
// Hidden from the docs: ratelimit-admin's plumbing (it reads and checks the hash with it),
// public so that the command can reach it. Users give sources to `Overrides` and read
// refusals from `Overrides::refused`; the command checks a file for them.
#[doc(hidden)]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSet {
    /// Declarations by route (and tier), with the text as written.
    pub routes: BTreeMap<RouteSelector, (String, Vec<Declaration>)>,
    /// Shared budgets' overrides by name (`budget API`), with the text as written.
    pub budgets: BTreeMap<String, (String, Declaration)>,
    /// Allow and deny entries, with the note written beside each.
    pub lists: BTreeMap<(ListKind, ListEntry), String>,
    /// The routes an allow entry written with `routes "…"` opens, by entry: such an entry
    /// opens those routes only (routes that count a username included); an allow entry
    /// without it opens every route that counts no username.
    pub allow_routes: BTreeMap<ListEntry, BTreeSet<String>>,
}

/// The longest field a source may hold (a route selector, or a list entry with the routes it
/// opens), in bytes.
pub const MAX_FIELD_LEN: usize = 4096;

/// The longest value a source may hold (declarations, or an entry's note), in bytes.
pub const MAX_VALUE_LEN: usize = 65_536;

/// The word a shared budget's override is written under: `budget API`.
pub const BUDGET_WORD: &str = "budget ";

/// The word that scopes an allow entry to routes: `allow ip 10.0.0.0/8 routes "POST /login"`.
const ROUTES_WORD: &str = " routes ";

/// The field an allow or deny entry is written under in the Redis hash: `allow <entry>`, and
/// for an allow entry scoped to routes, ` routes "<route>", "<route>"` after it.
///
/// ```
/// use ratelimit_runtime::overrides::{list_field, ListEntry, ListKind};
///
/// let entry = ListEntry::parse("ip 198.51.100.7").unwrap();
/// let routes = ["POST /login".to_owned()].into_iter().collect();
/// assert_eq!(
///     list_field(ListKind::Allow, &entry, Some(&routes)),
///     r#"allow ip 198.51.100.7/32 routes "POST /login""#
/// );
/// assert_eq!(list_field(ListKind::Deny, &entry, None), "deny ip 198.51.100.7/32");
/// ```
pub fn list_field(kind: ListKind, entry: &ListEntry, routes: Option<&BTreeSet<String>>) -> String {
    let mut field = format!("{} {entry}", kind.as_str());
    if let Some(routes) = routes.filter(|r| !r.is_empty()) {
        field.push_str(ROUTES_WORD);
        let quoted: Vec<String> = routes.iter().map(|r| format!("\"{r}\"")).collect();
        field.push_str(&quoted.join(", "));
    }
    field
}

/// One item of a file's list as the hash's field and value: a string (`"10.0.0.0/8"`), or a
/// table with the entry's `value` and, for an allow entry, the `routes` it opens and a
/// `note` (`{ value = "198.51.100.7", routes = ["POST /login"], note = "pen test" }`).
fn toml_entry(
    kind: &str,
    entry_kind: &str,
    item: &toml::Value,
) -> Result<(String, String), String> {
    let shape = "each entry is a string, or a table `{ value = \"…\", routes = [\"POST /login\"], note = \"…\" }`";
    if let Some(value) = item.as_str() {
        return Ok((format!("{kind} {entry_kind} {value}"), String::new()));
    }
    let table = item.as_table().ok_or(shape)?;
    let mut field = None;
    let mut routes = Vec::new();
    let mut note = String::new();
    for (key, item) in table {
        match key.as_str() {
            "value" => field = Some(item.as_str().ok_or(shape)?),
            "note" => item.as_str().ok_or(shape)?.clone_into(&mut note),
            "routes" => {
                let items = item.as_array().ok_or(shape)?;
                if items.is_empty() {
                    return Err("`routes = []` opens nothing: name the routes, or leave `routes` out to open every route that counts no username".to_owned());
                }
                for route in items {
                    routes.push(format!("\"{}\"", route.as_str().ok_or(shape)?));
                }
            }
            other => {
                return Err(format!(
                    "`{other}` is no key of an entry; expected `value`, `routes` or `note`{}",
                    ratelimit_grammar::suggest::did_you_mean(other, &["value", "routes", "note"])
                ))
            }
        }
    }
    let value = field.ok_or("an entry's table needs `value`")?;
    let mut field = format!("{kind} {entry_kind} {value}");
    if !routes.is_empty() {
        field.push_str(ROUTES_WORD);
        field.push_str(&routes.join(", "));
    }
    Ok((field, note))
}

/// `"POST /login", "GET /x"`: route labels, each as the route table names it.
fn parse_routes(text: &str) -> Result<BTreeSet<String>, String> {
    let mut routes = BTreeSet::new();
    for quoted in text.split(',') {
        let quoted = quoted.trim();
        let route = quoted
            .strip_prefix('"')
            .and_then(|q| q.strip_suffix('"'))
            .ok_or_else(|| {
                format!("`routes {text}`: write each route quoted, as the route table names it: `routes \"POST /login\", \"POST /password-reset\"`")
            })?;
        if route.contains(" tier ") {
            return Err(format!(
                "`routes {text}`: an entry opens routes, not tiers: name the route alone"
            ));
        }
        let selector = RouteSelector::parse(route)?;
        routes.insert(selector.route);
    }
    Ok(routes)
}

impl RuleSet {
    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty() && self.budgets.is_empty() && self.lists.is_empty()
    }

    /// How many fields it holds.
    pub fn len(&self) -> usize {
        self.routes.len() + self.budgets.len() + self.lists.len()
    }

    /// Every shared budget it names, with the field naming it: a budget's override
    /// (`budget API`), or a route's override naming one (`budget = API`).
    pub fn budgets_named(&self) -> impl Iterator<Item = (String, &str)> {
        let overridden = self
            .budgets
            .keys()
            .map(|name| (format!("{BUDGET_WORD}{name}"), name.as_str()));
        let stacked = self.routes.iter().flat_map(|(selector, (_, stack))| {
            stack
                .iter()
                .filter_map(|d| d.budget.as_deref())
                .map(move |name| (selector.to_string(), name))
        });
        overridden.chain(stacked)
    }

    /// Every route the allow entries scoped with `routes "…"` name.
    pub fn routes_opened(&self) -> impl Iterator<Item = &str> {
        self.allow_routes.values().flatten().map(String::as_str)
    }

    /// The problems of its allow and deny entries under the services' settings: an address
    /// range wider than `widest`, and an API key in plain text unless `plain_api_keys`.
    pub fn list_problems(&self, widest: WidestRanges, plain_api_keys: bool) -> Vec<String> {
        let mut problems = Vec::new();
        for (kind, entry) in self.lists.keys() {
            match entry {
                ListEntry::Ip(net) => {
                    if let Err(problem) = widest.check(net) {
                        problems.push(format!("`{} ip {net}`: {problem}", kind.as_str()));
                    }
                }
                ListEntry::ApiKey(_) if entry.is_plain_api_key() && !plain_api_keys => {
                    problems.push(format!(
                        "`{} {}`: API keys are listed by fingerprint, never in plain text (`ratelimit-admin {} add api_key` writes it; `ratelimit-admin fingerprint` prints it for a file), or turn `Overrides::plain_api_keys` on",
                        kind.as_str(),
                        entry.redacted(),
                        kind.as_str(),
                    ));
                }
                _ => {}
            }
        }
        problems
    }

    /// Reads fields as the Redis hash holds them: a route selector with its declarations, or
    /// `allow <entry>` / `deny <entry>` with a note.
    ///
    /// # Errors
    ///
    /// Every problem, each naming its field; nothing of a set with a problem is kept.
    pub fn from_fields<'a>(
        fields: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<RuleSet, Vec<String>> {
        let (set, errors) = RuleSet::read(fields);
        if errors.is_empty() {
            Ok(set)
        } else {
            Err(errors)
        }
    }

    /// Reads fields as [`from_fields`](RuleSet::from_fields) does, keeping the fields that
    /// read beside the problems of those that do not: a set with any problem is refused as
    /// a whole, and its refusal names every problem, the route checks of the fields that
    /// read (a route not declared, or declared exempt) included.
    ///
    /// ```
    /// use ratelimit_runtime::overrides::RuleSet;
    ///
    /// let (set, problems) = RuleSet::read([
    ///     ("GET /search", r#"limit = 5, window = "1m""#),
    ///     ("POST /login", "limt = 5"),
    /// ]);
    /// assert_eq!(set.routes.len(), 1);
    /// assert!(problems[0].contains("did you mean `limit`?"));
    /// ```
    pub fn read<'a>(
        fields: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> (RuleSet, Vec<String>) {
        let mut set = RuleSet::default();
        let mut errors = Vec::new();
        for (field, value) in fields {
            if let Err(problem) = set.add(field, value) {
                errors.extend(problem);
            }
        }
        (set, errors)
    }

    /// Reads an overrides file's text (TOML: `[routes]`, `[allow]`, `[deny]`, as
    /// [`Overrides::file`](super::Overrides::file) reads it) as the Redis hash's fields,
    /// keeping the rules that read beside every problem, as [`read`](RuleSet::read) does.
    ///
    /// ```
    /// use ratelimit_runtime::overrides::RuleSet;
    ///
    /// let (set, problems) = RuleSet::read_toml(
    ///     r#"
    ///     [routes]
    ///     "POST /login" = 'limit = 5, window = "5m"'
    ///     "GET /search" = ['limit = 20, window = "1s"', 'limit = 600, window = "1h"']
    ///     [deny]
    ///     ips = ["203.0.113.0/24"]
    ///     "#,
    /// );
    /// assert!(problems.is_empty(), "{problems:?}");
    /// assert_eq!(set.routes.len(), 2);
    /// assert_eq!(set.lists.len(), 1);
    ///
    /// let (_, problems) = RuleSet::read_toml("[route]\n");
    /// assert!(problems[0].contains("did you mean `routes`?"), "{problems:?}");
    /// ```
    pub fn read_toml(text: &str) -> (RuleSet, Vec<String>) {
        let document = match text.parse::<toml::Table>() {
            Ok(document) => document,
            Err(e) => {
                return (
                    RuleSet::default(),
                    vec![format!("not TOML: {}", e.message())],
                )
            }
        };
        let mut fields: Vec<(String, String)> = Vec::new();
        let mut errors = Vec::new();
        for (section, value) in &document {
            let Some(table) = value.as_table() else {
                errors.push(format!("`{section}` must be a table (`[{section}]`)"));
                continue;
            };
            match section.as_str() {
                "routes" => {
                    for (route, value) in table {
                        let text = match value {
                            toml::Value::String(text) => text.clone(),
                            toml::Value::Array(items) if items.iter().all(toml::Value::is_str) => items
                                .iter()
                                .filter_map(toml::Value::as_str)
                                .collect::<Vec<_>>()
                                .join("; "),
                            _ => {
                                errors.push(format!("`{route}` takes a string in the attribute's syntax, or an array of them"));
                                continue;
                            }
                        };
                        fields.push((route.clone(), text));
                    }
                }
                "budgets" => {
                    for (name, value) in table {
                        match value.as_str() {
                            Some(text) => fields.push((format!("{BUDGET_WORD}{name}"), text.to_owned())),
                            None => errors.push(format!("`[budgets] {name}` takes a string in the attribute's syntax: `'limit = 20000, window = \"1d\"'`")),
                        }
                    }
                }
                kind @ ("allow" | "deny") => {
                    for (list, values) in table {
                        let entry_kind = match list.as_str() {
                            "ips" => "ip",
                            "api_keys" => "api_key",
                            "user_ids" => "user_id",
                            other => {
                                errors.push(format!("`[{kind}] {other}`: expected `ips`, `api_keys` or `user_ids`{}", ratelimit_grammar::suggest::did_you_mean(other, &["ips", "api_keys", "user_ids"])));
                                continue;
                            }
                        };
                        let Some(values) = values.as_array() else {
                            errors.push(format!("`[{kind}] {list}` takes an array of entries"));
                            continue;
                        };
                        for value in values {
                            match toml_entry(kind, entry_kind, value) {
                                Ok(field) => fields.push(field),
                                Err(problem) => errors.push(format!("`[{kind}] {list}`: {problem}")),
                            }
                        }
                    }
                }
                other => errors.push(format!(
                    "`[{other}]` is no section of the overrides file; expected `[routes]`, `[budgets]`, `[allow]` or `[deny]`{}",
                    ratelimit_grammar::suggest::did_you_mean(other, &["routes", "budgets", "allow", "deny"])
                )),
            }
        }
        let (set, more) = RuleSet::read(fields.iter().map(|(f, v)| (f.as_str(), v.as_str())));
        errors.extend(more);
        (set, errors)
    }

    /// Adds one field.
    ///
    /// # Errors
    ///
    /// Every problem with it, each naming the field.
    pub fn add(&mut self, field: &str, value: &str) -> Result<(), Vec<String>> {
        // Every problem shows the field with an API key in plain text by its fingerprint.
        self.add_field(field, value).map_err(|problems| {
            problems
                .into_iter()
                .map(|problem| redacted_field(&problem, field))
                .collect()
        })
    }

    fn add_field(&mut self, field: &str, value: &str) -> Result<(), Vec<String>> {
        // Refused before any other reading: a megabyte of route name would otherwise be
        // compared with every declared route for a suggestion, under the refresh's lock.
        if field.len() > MAX_FIELD_LEN || value.len() > MAX_VALUE_LEN {
            let shown: String = match plain_key_in(field) {
                Some(_) => "… api_key …".to_owned(),
                None => field.chars().take(60).collect(),
            };
            return Err(vec![format!(
                "the field {shown:?}… is {} bytes with a value of {}: a field holds at most {MAX_FIELD_LEN} bytes and a value {MAX_VALUE_LEN}",
                field.len(),
                value.len()
            )]);
        }
        let raw = field;
        let field = field.trim();
        for kind in [ListKind::Allow, ListKind::Deny] {
            if let Some(entry) = field
                .strip_prefix(kind.as_str())
                .and_then(|e| e.strip_prefix(' '))
            {
                let (entry, routes) = match entry.split_once(ROUTES_WORD) {
                    Some((_, _)) if kind == ListKind::Deny => {
                        return Err(vec![format!(
                            "{raw:?}: `routes` scopes allow entries; a deny entry applies on every route"
                        )])
                    }
                    Some((entry, routes)) => (entry, Some(parse_routes(routes).map_err(|e| vec![format!("{raw:?}: {e}")])?)),
                    None => (entry, None),
                };
                let entry = ListEntry::parse(entry).map_err(|e| vec![e])?;
                let key = (kind, entry);
                if self.lists.contains_key(&key) {
                    return Err(vec![format!(
                        "the field {raw:?} names `{} {}`, which another field names too: keep one",
                        kind.as_str(),
                        key.1.redacted()
                    )]);
                }
                if let Some(routes) = routes {
                    self.allow_routes.insert(key.1.clone(), routes);
                }
                self.lists.insert(key, value.to_owned());
                return Ok(());
            }
        }
        if let Some(name) = field.strip_prefix(BUDGET_WORD) {
            return self.add_budget(raw, name.trim(), value);
        }
        let selector = RouteSelector::parse(field).map_err(|e| vec![e])?;
        if self.routes.contains_key(&selector) {
            // Two fields written differently (spaces, a hand-written hash) for one route:
            // which one applied would depend on their order.
            return Err(vec![format!(
                "the field {raw:?} names `{selector}`, which another field names too: keep one"
            )]);
        }
        let stack = parse_stack(value).map_err(|problems| {
            problems
                .into_iter()
                .map(|p| format!("`{selector}` = '{value}': {p}"))
                .collect::<Vec<_>>()
        })?;
        self.routes
            .insert(selector, (value.trim().to_owned(), stack));
        Ok(())
    }

    /// Adds the override of shared budget `name` (the field `raw`): one declaration of the
    /// keys `budget!` takes.
    fn add_budget(&mut self, raw: &str, name: &str, value: &str) -> Result<(), Vec<String>> {
        ratelimit_grammar::check_budget_name(name).map_err(|e| vec![format!("{raw:?}: {e}")])?;
        if self.budgets.contains_key(name) {
            return Err(vec![format!(
                "the field {raw:?} names `budget {name}`, which another field names too: keep one"
            )]);
        }
        let shown = |p: String| format!("`budget {name}` = '{value}': {p}");
        let stack = parse_stack(value).map_err(|e| e.into_iter().map(shown).collect::<Vec<_>>())?;
        let [declaration] = stack.as_slice() else {
            return Err(vec![shown(
                "a shared budget is one limit: write one declaration (no `;`)".to_owned(),
            )]);
        };
        let beside = [
            ("cost", declaration.cost.is_some()),
            ("count", declaration.count.is_some()),
            ("block", declaration.block.is_some()),
            ("fail", declaration.fail.is_some()),
            ("shadow", declaration.shadow.is_some()),
            ("headers", declaration.headers.is_some()),
            ("enforce", declaration.enforce.is_some()),
            ("budget", declaration.budget.is_some()),
            ("exempt", declaration.exempt.is_some()),
            ("concurrency", declaration.concurrency.is_some()),
            ("wait", declaration.wait.is_some()),
            ("ban", declaration.ban.is_some()),
        ];
        let problems: Vec<String> = beside
            .iter()
            .filter(|(_, written)| *written)
            .map(|(key, _)| {
                shown(format!(
                    "`{key}` is no key of a shared budget: it takes `limit`, `window`, `algorithm` and `identity`, as `budget!` does (a route's cost is the route's, in its attribute)"
                ))
            })
            .collect();
        if !problems.is_empty() {
            return Err(problems);
        }
        self.budgets.insert(
            name.to_owned(),
            (value.trim().to_owned(), declaration.clone()),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_fields_for_one_route_are_refused() {
        let (set, problems) = RuleSet::read([
            ("POST /orders", "limit = 50, window = \"1m\""),
            ("POST /orders ", "limit = 2, window = \"1m\""),
        ]);
        assert_eq!(set.routes.len(), 1);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("\"POST /orders \"") && problems[0].contains("keep one"),
            "{problems:?}"
        );
    }

    #[test]
    fn selectors_and_entries_read_as_written() {
        let plain = RouteSelector::parse("POST /login").unwrap();
        assert_eq!((plain.route.as_str(), plain.tier), ("POST /login", None));
        let tier = RouteSelector::parse(r#"GET /api/search tier "pro""#).unwrap();
        assert_eq!(tier.tier.as_deref(), Some("pro"));
        assert_eq!(tier.to_string(), r#"GET /api/search tier "pro""#);
        for bad in [
            "/login",
            "post /login",
            "Post /login",
            "POST login",
            r#"GET /x tier pro"#,
            r#"GET /x tier "P R""#,
        ] {
            assert!(RouteSelector::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            ListEntry::parse("ip 10.1.2.3/8").unwrap(),
            ListEntry::Ip("10.0.0.0/8".parse().unwrap())
        );
        assert_eq!(
            ListEntry::parse("ip 2001:db8::1").unwrap().to_string(),
            "ip 2001:db8::1/128"
        );
        assert!(RouteSelector::parse("post /login")
            .unwrap_err()
            .contains("did you mean `POST /login`?"));
        assert!(ListEntry::parse("ip 10.0.0.0/33").is_err());
        // IPv4-mapped IPv6, as the IPv4 clients it maps are matched.
        for (mapped, plain) in [
            ("ip ::ffff:127.0.0.1", "ip 127.0.0.1/32"),
            ("ip ::ffff:10.0.0.0/104", "ip 10.0.0.0/8"),
        ] {
            assert_eq!(ListEntry::parse(mapped).unwrap().to_string(), plain);
        }
        assert!(ListEntry::parse("apikey x")
            .unwrap_err()
            .contains("did you mean `api_key`"));
    }

    #[test]
    fn a_set_with_one_problem_is_refused_whole() {
        let ok = RuleSet::from_fields([
            ("POST /login", r#"limit = 5, window = "5m""#),
            ("deny ip 203.0.113.0/24", "incident 42"),
        ])
        .unwrap();
        assert_eq!((ok.routes.len(), ok.lists.len()), (1, 1));
        let errors = RuleSet::from_fields([
            ("POST /login", r#"limit = 5, window = "5m""#),
            ("GET /search", r#"limt = 5, window = "5m""#),
        ])
        .unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("`GET /search`"), "{errors:?}");
        assert!(errors[0].ends_with("did you mean `limit`?"), "{errors:?}");
    }

    #[test]
    fn allow_entries_name_the_routes_they_open_and_deny_entries_cannot() {
        let set = RuleSet::from_fields([
            (
                r#"allow ip 10.1.0.0/16 routes "POST /login", "POST /password-reset""#,
                "pen test",
            ),
            ("allow ip 10.0.0.0/8", ""),
        ])
        .unwrap();
        let scoped = ListEntry::parse("ip 10.1.0.0/16").unwrap();
        assert_eq!(
            set.allow_routes[&scoped].iter().collect::<Vec<_>>(),
            ["POST /login", "POST /password-reset"]
        );
        assert_eq!(
            set.allow_routes.len(),
            1,
            "the other opens every route without a name"
        );
        assert_eq!(
            list_field(ListKind::Allow, &scoped, set.allow_routes.get(&scoped)),
            r#"allow ip 10.1.0.0/16 routes "POST /login", "POST /password-reset""#
        );
        for (field, expected) in [
            (
                r#"deny ip 10.0.0.0/8 routes "POST /login""#,
                "a deny entry applies on every route",
            ),
            (
                r#"allow ip 10.0.0.0/8 routes POST /login"#,
                "write each route quoted",
            ),
            (
                r#"allow ip 10.0.0.0/8 routes "post /login""#,
                "did you mean `POST /login`?",
            ),
            (
                r#"allow ip 10.0.0.0/8 routes "GET /x tier pro""#,
                "not tiers",
            ),
        ] {
            let problems = RuleSet::from_fields([(field, "")]).unwrap_err();
            assert!(problems[0].contains(expected), "{field}: {problems:?}");
        }
        // One entry written twice (scoped and not): which one applied would depend on order.
        let problems = RuleSet::from_fields([
            (r#"allow user_id ops routes "POST /login""#, ""),
            ("allow user_id ops", ""),
        ])
        .unwrap_err();
        assert!(problems[0].contains("keep one"), "{problems:?}");
        // The file writes the same as a table.
        let (set, problems) = RuleSet::read_toml(
            r#"
            [allow]
            ips = ["10.0.0.0/8", { value = "198.51.100.7", routes = ["POST /login"], note = "pen test" }]
            "#,
        );
        assert!(problems.is_empty(), "{problems:?}");
        let entry = ListEntry::parse("ip 198.51.100.7").unwrap();
        assert!(set.allow_routes[&entry].contains("POST /login"));
        assert_eq!(set.lists[&(ListKind::Allow, entry)], "pen test");
        for bad in [
            "[allow]\nips = [{ value = \"10.0.0.1\", route = [\"POST /login\"] }]\n",
            "[allow]\nips = [{ value = \"10.0.0.1\", routes = [] }]\n",
            "[allow]\nips = [{ routes = [\"POST /login\"] }]\n",
        ] {
            let (_, problems) = RuleSet::read_toml(bad);
            assert_eq!(problems.len(), 1, "{bad}: {problems:?}");
        }
    }

    #[test]
    fn wide_ranges_and_plain_api_keys_are_refused_unless_allowed() {
        let set = RuleSet::from_fields([
            ("deny ip 0.0.0.0/0", ""),
            ("allow ip ::/0", ""),
            ("allow ip 10.0.0.0/7", ""),
            ("allow ip 10.0.0.0/8", ""),
            ("deny ip 2001:db8::/32", ""),
            ("allow api_key monitoring-key", ""),
            ("allow api_key fp:0123456789abcdef", ""),
        ])
        .unwrap();
        let problems = set.list_problems(WidestRanges::default(), false);
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("`deny ip 0.0.0.0/0`")));
        assert!(problems.iter().any(|p| p.contains("`allow ip ::/0`")));
        assert!(problems.iter().any(|p| p.contains("`allow ip 10.0.0.0/7`")));
        let plain = problems.iter().find(|p| p.contains("plain text")).unwrap();
        assert!(
            !plain.contains("monitoring-key"),
            "the key itself is never shown: {plain}"
        );
        let open = WidestRanges { ipv4: 0, ipv6: 0 };
        assert!(set.list_problems(open, true).is_empty());
        assert!(ListEntry::parse("api_key fp:0123")
            .unwrap_err()
            .contains("16 lower-case hex"));
    }

    #[test]
    fn a_field_or_value_past_its_bound_is_refused_before_it_is_read() {
        let long_route = format!("GET /{}", "a".repeat(1 << 20));
        let problems = RuleSet::from_fields([(long_route.as_str(), "limit = 5")]).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].contains("at most 4096 bytes"),
            "{}",
            &problems[0][..200]
        );
        assert!(problems[0].len() < 300, "the field is not echoed whole");
        let note = "x".repeat(MAX_VALUE_LEN + 1);
        assert!(RuleSet::from_fields([("deny user_id x", note.as_str())]).is_err());
        let note = "x".repeat(MAX_VALUE_LEN);
        assert!(RuleSet::from_fields([("deny user_id x", note.as_str())]).is_ok());
    }

    #[test]
    fn a_key_in_plain_text_never_shows_in_a_problem() {
        for field in [
            "allow api_key sk_live_123",
            "allow\tapi_key sk_live_123",
            "allow api_key sk_live_123 routes POST /login",
            "deny api_key sk_live_123 routes \"POST /login\"",
        ] {
            let problems = RuleSet::from_fields([(field, ""), (field, "")])
                .err()
                .unwrap_or_default();
            for problem in &problems {
                assert!(!problem.contains("sk_live_123"), "{field}: {problem}");
            }
        }
        let twice = RuleSet::from_fields([
            ("allow api_key sk_live_123", ""),
            ("allow  api_key sk_live_123", ""),
        ])
        .unwrap_err();
        assert!(twice[0].contains("keep one") && !twice[0].contains("sk_live_123"));
        let long = format!("allow api_key sk_live_123 {}", "x".repeat(MAX_FIELD_LEN));
        let problems = RuleSet::from_fields([(long.as_str(), "")]).unwrap_err();
        assert!(!problems[0].contains("sk_live"), "{}", problems[0]);
    }
}
