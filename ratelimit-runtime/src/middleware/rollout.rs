//! Rolling a limiter out route by route: limits declared in code for builder routes
//! ([`RateLimiter::declare`]) and the App's shadow switch ([`RateLimiter::shadow`]). What
//! they set is kept in `rollout_state.rs`.

use super::rate_limiter::RateLimiter;
use crate::registry::RouteDeclaration;

impl RateLimiter {
    /// Declares the limit of a route the attribute cannot reach (a builder route:
    /// `web::resource(..).route(..)`, `App::route`, `web::route()`), in the attribute's own
    /// words: `route` is `METHOD /full/pattern` as the App serves it, with any scope's
    /// prefix (`"GET /legacy/{id}"`), and `text` what goes inside `#[rate_limit(..)]`
    /// (stacked limits separated by `;`, or `exempt = "<reason>"`).
    ///
    /// ```
    /// use actix_web::{web, App, HttpResponse};
    /// use ratelimit_runtime::{store::MemoryStore, RateLimiter};
    ///
    /// let limiter = RateLimiter::new(MemoryStore::new())
    ///     .declare("GET /legacy/{id}", r#"limit = 10, window = "1m""#);
    /// let app = App::new().wrap(limiter).service(
    ///     web::resource("/legacy/{id}").route(web::get().to(|| async { HttpResponse::Ok() })),
    /// );
    /// # let _ = app;
    /// ```
    ///
    /// The limiter enforces such a limit itself, before the route's handler, with the
    /// attribute's behaviour (headers, 429, fail modes, overrides by the same name); the
    /// coverage check counts the route as declared, and the route table shows it with
    /// source `code`. A mistake refuses startup with the attribute's message: a text the
    /// attribute would not compile, a route named twice, one the App does not serve with
    /// that method, one an attribute already declares, or a pattern and method more than one
    /// resource serves or a custom guard (a host, a header) picks: a declaration in code
    /// names a pattern and a method only. Bad text is known at once; a
    /// route is checked against the App by the coverage check run with this limiter
    /// inside ([`coverage::require_coverage`](crate::coverage::require_coverage)`(app())`,
    /// `app()` wrapping it), after which the App's middleware refuses to start; without that
    /// check, on the first request, with an error line (the route then gets the default
    /// policy, as any undeclared route).
    pub fn declare(mut self, route: &str, text: &str) -> Self {
        let setting = format!("`RateLimiter::declare({route:?}, ..)`");
        let Some((method, pattern)) = split_route(route) else {
            self.rollout.problems.push(format!(
                "{setting}: name the route as `METHOD /full/pattern`, with its scope's prefix, e.g. `GET /legacy/{{id}}`"
            ));
            return self;
        };
        let label = format!("{method} {pattern}");
        if self
            .rollout
            .declared
            .iter()
            .any(|d| d.methods[0] == method && d.path == pattern)
        {
            self.rollout.problems.push(format!(
                "{setting}: `{label}` is declared twice; declare each route once"
            ));
            return self;
        }
        let policy = match crate::overrides::policy_from_text(&label, text, None) {
            Ok(policy) => policy,
            Err(errors) => {
                for error in errors {
                    self.rollout.problems.push(format!("{setting}: {error}"));
                }
                return self;
            }
        };
        let leak = |text: String| -> &'static str { Box::leak(text.into_boxed_str()) };
        let methods: &'static [&'static str] = Box::leak(Box::new([leak(method.to_owned())]));
        let declaration = RouteDeclaration::in_code(
            leak(code_name(method, pattern)),
            methods,
            leak(pattern.to_owned()),
            policy,
            leak(format!("RateLimiter::declare({label:?}, ..)")),
        );
        self.rollout.declared.push(Box::leak(Box::new(declaration)));
        self
    }

    /// The App's shadow switch. With `true`, every limit (declared, in code, and the
    /// default policy) counts, logs and exports its decisions but never refuses: a request
    /// over the limit is logged at `info` (`shadow limit exceeded`) and counted as
    /// `shadow_rejected` in `ratelimit_decisions_total`, then goes on without rate-limit
    /// headers; the store is still asked, so the figures are real. While the store fails, a
    /// shadowed route passes (whatever its `fail`): it never answers 503. A route declaring
    /// `enforce = true` refuses all the same, so a team turns limits on route by route, then
    /// turns the switch off; `enforce = false` keeps a route in shadow while the App enforces.
    /// An override can set `enforce` on a route too. The default is `false` (enforce).
    ///
    /// ```
    /// use ratelimit_runtime::{store::MemoryStore, RateLimiter};
    ///
    /// // Deploy in shadow, read `shadow_rejected`, then enforce.
    /// let limiter = RateLimiter::new(MemoryStore::new()).shadow(true);
    /// # let _ = limiter;
    /// ```
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.rollout.shadow = shadow;
        self
    }
}

/// `METHOD` and `/pattern` of a route named `METHOD /pattern`, when it is named so.
pub(crate) fn split_route(route: &str) -> Option<(&str, &str)> {
    let (method, pattern) = route.split_once(' ')?;
    let well_formed = !method.is_empty()
        && method.bytes().all(|b| b.is_ascii_uppercase())
        && pattern.starts_with('/')
        && !pattern.contains(char::is_whitespace);
    well_formed.then_some((method, pattern))
}

/// The name a declaration in code goes by in headers and metrics, as a handler's would:
/// `get_legacy_id` for `GET /legacy/{id}`.
fn code_name(method: &str, pattern: &str) -> String {
    let mut name = method.to_ascii_lowercase();
    for word in pattern.split(|c: char| !c.is_ascii_alphanumeric()) {
        if !word.is_empty() {
            name.push('_');
            name.push_str(word);
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[test]
    fn bad_declarations_are_problems_naming_the_setting() {
        let limiter = RateLimiter::new(MemoryStore::new())
            .declare("GET /a", r#"limt = 10, window = "1m""#)
            .declare("get /b", r#"limit = 10, window = "1m""#)
            .declare("GET /c", r#"limit = 10, window = "1m""#)
            .declare("GET /c", r#"limit = 5, window = "1m""#);
        let problems = limiter.rollout.problems();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems[0].starts_with("`RateLimiter::declare(\"GET /a\", ..)`: unknown key `limt`")
        );
        assert!(problems[0].ends_with("did you mean `limit`?"));
        assert!(problems[1].contains("`METHOD /full/pattern`"));
        assert!(problems[2].contains("declared twice"));
        assert_eq!(limiter.rollout.declared.len(), 1);
    }

    #[test]
    fn code_names_read_like_handler_names() {
        assert_eq!(code_name("GET", "/legacy/{id}"), "get_legacy_id");
        assert_eq!(code_name("POST", "/"), "post");
    }
}
