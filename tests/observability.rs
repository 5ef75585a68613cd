//! The Grafana dashboard and the Prometheus alert rules in `observability/` against what the
//! demo's `/metrics` exposes: every metric they use is there, described (`# HELP`), and the
//! counters the alerts watch exist at zero from startup.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use support::DemoProcess;

const DASHBOARD: &str = include_str!("../observability/grafana-dashboard.json");
const RULES: &str = include_str!("../observability/prometheus-rules.yml");

/// Every metric the limiter records.
const FAMILIES: [&str; 8] = [
    "ratelimit_decisions_total",
    "ratelimit_in_flight",
    "ratelimit_store_errors_total",
    "ratelimit_store_duration_seconds",
    "ratelimit_fallback_switches_total",
    "ratelimit_listed_total",
    "ratelimit_overrides_applied_total",
    "ratelimit_overrides_refused_total",
];

/// One Prometheus text scrape: the described metric families and every sample.
struct Scrape {
    help: BTreeSet<String>,
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let mut help = BTreeSet::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, description) = rest.split_once(' ').unwrap_or((rest, ""));
                assert!(!description.trim().is_empty(), "empty HELP: {line}");
                help.insert(name.to_owned());
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("a sample line");
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (key, value) = pair.split_once("=\"").expect("a label");
                    (key.to_owned(), value.trim_end_matches('"').to_owned())
                })
                .collect();
            let value = value.parse().expect("a sample value");
            samples.push((name.to_owned(), labels, value));
        }
        Scrape { help, samples }
    }

    /// The value of the sample `name` carrying every label of `labels`, if there is one.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|(n, have, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| have.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, value)| *value)
    }

    /// Whether a sample of `name` is there (a histogram's name stands for its series).
    fn has(&self, name: &str) -> bool {
        self.samples
            .iter()
            .any(|(n, _, _)| n == name || family(n) == name)
    }
}

/// The family a sample name belongs to (a histogram's `_bucket`, `_sum` and `_count`).
fn family(name: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .filter(|base| FAMILIES.contains(base))
        .unwrap_or(name)
}

/// The metric names `text` uses: every `ratelimit_` token, comment lines left out.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let mut rest = line;
        while let Some(at) = rest.find("ratelimit_") {
            let token: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[at + token.len()..];
            names.insert(token);
        }
    }
    names
}

/// The overrides the demo reads: `GET /orders/{id}` fails `local` (so its fallback switches
/// exist), and a deny list (so a denied client is counted).
const OVERRIDES: &str = r#"
[routes]
"GET /orders/{id}" = 'limit = 120, window = "1m", fail = "local"'

[deny]
ips = ["192.0.2.0/24"]
"#;

#[actix_web::test]
async fn every_metric_the_dashboard_and_the_rules_use_is_exposed_and_described() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("overrides.toml");
    std::fs::write(&file, OVERRIDES).unwrap();
    let demo = DemoProcess::start(&[
        ("RATELIMIT_OVERRIDES_FILE", file.to_str().unwrap()),
        ("TRUSTED_PROXY_HOPS", "1"),
    ])
    .await;

    // Right after startup, before any limited request: the counters the alerts watch are
    // there, at zero, and described.
    let started = Scrape::parse(&demo.metrics().await);
    for (name, labels) in [
        (
            "ratelimit_decisions_total",
            &[("route", "POST /login"), ("decision", "rejected")][..],
        ),
        (
            "ratelimit_decisions_total",
            &[("route", "GET /api/search"), ("decision", "failed_open")],
        ),
        (
            "ratelimit_decisions_total",
            &[("route", "POST /orders"), ("decision", "failed_closed")],
        ),
        ("ratelimit_store_errors_total", &[("route", "POST /login")]),
        (
            "ratelimit_store_errors_total",
            &[("route", "GET /orders/{id}"), ("policy", "get_order")],
        ),
        ("ratelimit_overrides_refused_total", &[("source", "file")]),
    ] {
        assert_eq!(
            started.value(name, labels),
            Some(0.0),
            "{name} {labels:?} at zero at startup"
        );
        assert!(started.help.contains(name), "no HELP for {name}");
    }

    // A few requests: sign-ins (store latency), an order under the override that fails
    // `local`, a client on the deny list, an export (a concurrency place).
    for _ in 0..3 {
        let body = r#"{"username": "alice", "password": "wrong"}"#;
        assert_eq!(demo.send("POST", "/login", &[], Some(body)).await, 401);
    }
    let user = [("authorization", "Bearer u1")];
    assert_eq!(demo.send("GET", "/orders/7", &user, None).await, 200);
    let denied = [("x-forwarded-for", "192.0.2.5")];
    assert_eq!(demo.send("GET", "/orders/8", &denied, None).await, 403);
    let key = [("x-api-key", "key_abc")];
    assert_eq!(demo.send("POST", "/reports/export", &key, None).await, 202);

    let scrape = Scrape::parse(&demo.metrics().await);
    // Every metric the limiter records is described, and this run shows each.
    for family in FAMILIES {
        assert!(scrape.help.contains(family), "no HELP for {family}");
    }
    for (source, text) in [("dashboard", DASHBOARD), ("rules", RULES)] {
        let names = metric_names(text);
        assert!(
            names.len() >= 4,
            "the {source} uses too few metrics: {names:?}"
        );
        for name in &names {
            assert!(
                scrape.has(name),
                "the {source} uses `{name}`, which the demo's /metrics does not show"
            );
            assert!(
                scrape.help.contains(family(name)),
                "the {source} uses `{name}`, which has no HELP line"
            );
        }
    }
    // Between them they cover every metric.
    let used: BTreeSet<String> = metric_names(DASHBOARD)
        .iter()
        .chain(&metric_names(RULES))
        .map(|name| family(name).to_owned())
        .collect();
    for family in FAMILIES {
        assert!(used.contains(family), "no panel or rule uses {family}");
    }
    assert!(
        serde_json::from_str::<serde_json::Value>(DASHBOARD).is_ok(),
        "the dashboard is JSON"
    );
}
