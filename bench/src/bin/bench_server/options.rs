//! The command line of `bench_server`.

use ratelimit_bench::{ProjectRoute, Variant};

pub const USAGE: &str =
    "usage: bench_server --variant <none|limitation|governor|floor|floor-per-worker|answer-only|project> \
--port <port, 0 for any free one> [--redis <url>] [--workers <n>] \
[--route <fixed_window|sliding_window|sliding_log|gcra|stacked>] [--timeout-ms <n>] [--no-headers] \
[--deny-list <entries>] [--sync]";

/// What to serve, where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub variant: Variant,
    pub port: u16,
    /// Required by the variants that count in Redis.
    pub redis: Option<String>,
    pub workers: usize,
    /// This project only: serve just this route's handlers (default: all of them).
    pub route: Option<ProjectRoute>,
    /// This project only: the store's timeout in ms (default: the store's own, 50 ms).
    pub timeout_ms: Option<u64>,
    /// This project only: send no rate-limit headers (what the five headers cost).
    pub no_headers: bool,
    /// This project only: a deny list of this many single addresses, none the client's
    /// (what a list costs a request that is on none).
    pub deny_list: Option<u32>,
    /// This project's routes that sync (`/allow/sync`, `/hot/sync`) instead of the others.
    pub sync: bool,
}

impl Options {
    pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
        let mut variant = None;
        let mut port = None;
        let mut redis = None;
        let mut workers = 1;
        let mut route = None;
        let mut timeout_ms = None;
        let mut no_headers = false;
        let mut deny_list = None;
        let mut sync = false;
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("`{flag}` needs a value"));
            match flag.as_str() {
                "--variant" => {
                    let name = value()?;
                    variant = Some(Variant::from_flag(&name).ok_or_else(|| {
                        format!("unknown variant `{name}`; expected `none`, `limitation`, `governor`, `floor`, `floor-per-worker`, `answer-only`, `project`")
                    })?);
                }
                "--port" => {
                    let text = value()?;
                    port = Some(text.parse().map_err(|_| format!("invalid port `{text}`"))?);
                }
                "--redis" => redis = Some(value()?),
                "--workers" => {
                    let text = value()?;
                    workers = text
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| format!("invalid worker count `{text}`"))?;
                }
                "--route" => {
                    let name = value()?;
                    route = Some(ProjectRoute::from_name(&name).ok_or_else(|| {
                        format!("unknown route `{name}`; expected `fixed_window`, `sliding_window`, `sliding_log`, `gcra`, `stacked`")
                    })?);
                }
                "--timeout-ms" => {
                    let text = value()?;
                    timeout_ms = Some(
                        text.parse()
                            .ok()
                            .filter(|ms| *ms > 0)
                            .ok_or_else(|| format!("invalid timeout `{text}`"))?,
                    );
                }
                "--no-headers" => no_headers = true,
                "--sync" => sync = true,
                "--deny-list" => {
                    let text = value()?;
                    deny_list = Some(
                        text.parse()
                            .map_err(|_| format!("invalid entry count `{text}`"))?,
                    );
                }
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        let variant = variant.ok_or("`--variant` is required")?;
        let port = port.ok_or("`--port` is required")?;
        if route.is_some() && variant != Variant::Project {
            return Err(format!("`--route` is for `project`, not `{variant}`"));
        }
        if timeout_ms.is_some() && variant != Variant::Project {
            return Err(format!("`--timeout-ms` is for `project`, not `{variant}`"));
        }
        if no_headers && variant != Variant::Project {
            return Err(format!("`--no-headers` is for `project`, not `{variant}`"));
        }
        if sync && (variant != Variant::Project || route.is_some()) {
            return Err(format!(
                "`--sync` is for `project` without `--route`, not `{variant}`"
            ));
        }
        if deny_list.is_some() && variant != Variant::Project {
            return Err(format!("`--deny-list` is for `project`, not `{variant}`"));
        }
        if variant.uses_redis() && redis.is_none() {
            return Err(format!(
                "variant `{variant}` counts in Redis: `--redis <url>` is required"
            ));
        }
        Ok(Options {
            variant,
            port,
            redis,
            workers,
            route,
            timeout_ms,
            no_headers,
            deny_list,
            sync,
        })
    }

    /// The Redis URL of a Redis variant (checked by [`Options::parse`]).
    pub fn redis_url(&self) -> &str {
        self.redis.as_deref().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &str) -> Result<Options, String> {
        Options::parse(args.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn a_redis_variant_needs_a_url_and_others_do_not() {
        let err = parse("--variant floor --port 1").unwrap_err();
        assert!(err.contains("--redis"), "{err}");
        let options = parse("--variant none --port 8080 --workers 2").unwrap();
        assert_eq!(options.variant, Variant::NoLimiter);
        assert_eq!((options.port, options.workers), (8080, 2));
        assert!(parse("--variant nope --port 1")
            .unwrap_err()
            .contains("`nope`"));
        assert!(parse("--variant none --port 1 --workers 0").is_err());
    }

    #[test]
    fn a_route_is_named_by_its_algorithm_and_only_for_this_project() {
        let options = parse("--variant project --port 1 --redis redis://x --route gcra").unwrap();
        assert_eq!(options.route, Some(ProjectRoute::Gcra));
        assert_eq!(
            parse("--variant project --port 1 --redis redis://x")
                .unwrap()
                .route,
            None
        );
        assert!(
            parse("--variant project --port 1 --redis redis://x --route nope")
                .unwrap_err()
                .contains("`nope`")
        );
        assert!(parse("--variant none --port 1 --route gcra")
            .unwrap_err()
            .contains("`--route`"));
    }

    #[test]
    fn a_store_timeout_is_for_this_project_only() {
        let options =
            parse("--variant project --port 0 --redis redis://x --timeout-ms 1000").unwrap();
        assert_eq!((options.port, options.timeout_ms), (0, Some(1000)));
        assert!(parse("--variant project --port 0 --redis redis://x --timeout-ms 0").is_err());
        assert!(
            parse("--variant project --port 0 --redis redis://x --no-headers")
                .unwrap()
                .no_headers
        );
        assert!(parse("--variant none --port 0 --no-headers")
            .unwrap_err()
            .contains("`--no-headers`"));
        assert!(parse("--variant none --port 0 --timeout-ms 10")
            .unwrap_err()
            .contains("`--timeout-ms`"));
    }
}
