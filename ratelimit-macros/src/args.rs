//! Parse stage: one `#[rate_limit(...)]` into spanned values, one setter per key.
//!
//! Every problem with a single value is reported here, on the smallest token that shows
//! it; problems between keys (missing, mixed with `exempt`, ...) belong to `valid`.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::{parse::Parser, punctuated::Punctuated, Expr, ExprLit, Lit, LitStr, Meta, Token, UnOp};

use crate::{ctxt::Ctxt, suggest};

pub(crate) const KEYS: &[&str] = &[
    "limit",
    "window",
    "identity",
    "algorithm",
    "fail",
    "shadow",
    "exempt",
    "crate",
];
pub(crate) const IDENTITY_PARTS: &[&str] =
    &["ip", "username", "user_id", "api_key", "header:<name>"];
const IDENTITY_NAMES: &[&str] = &["ip", "username", "user_id", "api_key", "header"];
pub(crate) const ALGORITHMS: &[&str] = &["fixed_window", "sliding_window", "sliding_log", "gcra"];
const FAIL_MODES: &[&str] = &["open", "closed"];
const WINDOW_EXAMPLES: &str = "`500ms`, `30s`, `5m`, `1h`, `1d`, `1h30m`";
/// Spelled-out units humantime accepts, for "did you mean" on a misspelled unit; the
/// one-letter units are too close to everything to suggest.
const WINDOW_UNIT_WORDS: &[&str] = &[
    "millis", "msec", "sec", "secs", "second", "seconds", "min", "mins", "minute", "minutes",
    "hour", "hours", "day", "days", "week", "weeks",
];
/// 31 days, as `ratelimit_runtime::policy::MAX_WINDOW_MILLIS`.
pub(crate) const MAX_WINDOW_MILLIS: u128 = 31 * 24 * 60 * 60 * 1000;

/// A value as the user wrote it: absent, present but invalid (already reported), or valid.
pub(crate) enum Slot<T> {
    Absent,
    Invalid,
    Valid(T, Span),
}

impl<T> Slot<T> {
    pub(crate) fn is_absent(&self) -> bool {
        matches!(self, Slot::Absent)
    }

    pub(crate) fn valid(&self) -> Option<(&T, Span)> {
        match self {
            Slot::Valid(value, span) => Some((value, *span)),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IdentityPart {
    Ip,
    Username,
    UserId,
    ApiKey,
    Header(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algorithm {
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    Gcra,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailMode {
    Open,
    Closed,
}

/// Where to report a problem with a whole `#[rate_limit]`, such as a missing key.
pub(crate) enum Site {
    /// The attribute being expanded: the macro's call site.
    CallSite,
    /// A stacked `#[rate_limit]` below it, as written.
    Stacked(TokenStream),
}

/// A key as written: its name, the span of the name, and its value's tokens as text.
pub(crate) struct Key {
    pub(crate) name: &'static str,
    pub(crate) span: Span,
    /// `"ip+username"`, `10`, `true`: for messages that quote the user.
    pub(crate) value: String,
}

/// A valid window: its length and how the user wrote it.
pub(crate) struct Window {
    pub(crate) millis: u64,
    pub(crate) text: String,
}

/// One `#[rate_limit(...)]`.
pub(crate) struct Args {
    /// Where to report a problem with the attribute as a whole.
    pub(crate) site: Site,
    /// Every key written, in order.
    pub(crate) keys: Vec<Key>,
    pub(crate) limit: Slot<u32>,
    pub(crate) window: Slot<Window>,
    pub(crate) identity: Slot<Vec<IdentityPart>>,
    pub(crate) algorithm: Slot<Algorithm>,
    pub(crate) fail: Slot<FailMode>,
    pub(crate) shadow: Slot<bool>,
    pub(crate) exempt: Slot<String>,
    /// The path the expansion reaches the runtime by (`crate = "my_facade::ratelimit"`), for
    /// a crate that renames the dependency or reaches it through another crate.
    pub(crate) runtime: Slot<syn::Path>,
}

impl Args {
    /// Parses the tokens inside `#[rate_limit(...)]`; `site` stands for the attribute.
    pub(crate) fn parse(tokens: TokenStream, site: Site, cx: &mut Ctxt) -> Args {
        let mut args = Args {
            site,
            keys: Vec::new(),
            limit: Slot::Absent,
            window: Slot::Absent,
            identity: Slot::Absent,
            algorithm: Slot::Absent,
            fail: Slot::Absent,
            shadow: Slot::Absent,
            exempt: Slot::Absent,
            runtime: Slot::Absent,
        };
        let metas = match Punctuated::<Meta, Token![,]>::parse_terminated.parse2(tokens.clone()) {
            Ok(metas) => metas,
            Err(error) => {
                cx.push(syntax_hint(&tokens).unwrap_or(error));
                // Keep going as if every key were present, so no "missing key" follows.
                args.limit = Slot::Invalid;
                args.window = Slot::Invalid;
                return args;
            }
        };
        for meta in metas {
            args.set(meta, cx);
        }
        args
    }

    /// Reports a problem with the attribute as a whole.
    pub(crate) fn error(&self, cx: &mut Ctxt, message: impl std::fmt::Display) {
        match &self.site {
            Site::CallSite => cx.error(Span::call_site(), message),
            Site::Stacked(tokens) => cx.error_spanned(tokens, message),
        }
    }

    /// The key `name` as written, if it was.
    pub(crate) fn key(&self, name: &str) -> Option<&Key> {
        self.keys.iter().find(|k| k.name == name)
    }

    fn set(&mut self, meta: Meta, cx: &mut Ctxt) {
        let path = meta.path();
        let Some(ident) = path.get_ident().cloned() else {
            cx.error_spanned(
                path,
                format!(
                    "unknown key `{}`; expected one of {}",
                    quote::quote!(#path).to_string().replace(' ', ""),
                    suggest::list(KEYS)
                ),
            );
            return;
        };
        let name = ident.to_string();
        let Some(key) = KEYS.iter().copied().find(|k| *k == name) else {
            cx.error(
                ident.span(),
                format!(
                    "unknown key `{name}`; expected one of {}{}",
                    suggest::list(KEYS),
                    suggest::did_you_mean(&name, KEYS)
                ),
            );
            // A near miss stands for the key it misspells: no "missing `limit`" after `limt`.
            if let Some(meant) = suggest::closest(&name, KEYS) {
                if self.key(meant).is_none() {
                    self.mark_invalid(meant);
                }
            }
            return;
        };
        if self.key(key).is_some() {
            cx.error(
                ident.span(),
                format!("`{key}` set more than once; each key may appear once per `#[rate_limit]`"),
            );
            return;
        }
        let value = match meta {
            Meta::NameValue(nv) => nv.value,
            other => {
                cx.error_spanned(
                    &other,
                    format!("`{key}` needs a value, e.g. {}", example(key)),
                );
                self.keys.push(Key {
                    name: key,
                    span: ident.span(),
                    value: String::new(),
                });
                self.mark_invalid(key);
                return;
            }
        };
        // A value passed through `macro_rules!` (`limit = $limit`) arrives in an invisible
        // group around the literal.
        let value = crate::route::ungrouped(&value).clone();
        self.keys.push(Key {
            name: key,
            span: ident.span(),
            value: value.to_token_stream().to_string(),
        });
        match key {
            "limit" => self.limit = parse_limit(&value, cx),
            "window" => self.window = parse_window(&value, cx),
            "identity" => self.identity = parse_identity(&value, cx),
            "algorithm" => {
                self.algorithm = parse_choice(&value, key, ALGORITHMS, cx).map(|i| {
                    [
                        Algorithm::FixedWindow,
                        Algorithm::SlidingWindow,
                        Algorithm::SlidingLog,
                        Algorithm::Gcra,
                    ][i]
                })
            }
            "fail" => {
                self.fail = parse_choice(&value, key, FAIL_MODES, cx)
                    .map(|i| [FailMode::Open, FailMode::Closed][i])
            }
            "shadow" => self.shadow = parse_shadow(&value, cx),
            "exempt" => self.exempt = parse_exempt(&value, cx),
            "crate" => self.runtime = parse_crate(&value, cx),
            _ => unreachable!("every key in KEYS has a setter"),
        }
    }

    fn mark_invalid(&mut self, key: &str) {
        match key {
            "limit" => self.limit = Slot::Invalid,
            "window" => self.window = Slot::Invalid,
            "identity" => self.identity = Slot::Invalid,
            "algorithm" => self.algorithm = Slot::Invalid,
            "fail" => self.fail = Slot::Invalid,
            "shadow" => self.shadow = Slot::Invalid,
            "crate" => self.runtime = Slot::Invalid,
            _ => self.exempt = Slot::Invalid,
        }
    }
}

/// A clearer error than syn's for the two usual slips in the attribute's syntax: `limit: 10`
/// (a colon for `=`) and `#[rate_limit(10, "1m")]` (values without keys).
fn syntax_hint(tokens: &TokenStream) -> Option<syn::Error> {
    use proc_macro2::{Spacing, TokenTree};
    let trees: Vec<TokenTree> = tokens.clone().into_iter().collect();
    let mut key_expected = true;
    // Whether the token before this one stood where a key goes (first, or after a comma):
    // a colon inside a value (`identity = header:x`) is not a key's.
    let mut after_key = false;
    for (i, tree) in trees.iter().enumerate() {
        let at_key = key_expected;
        match tree {
            TokenTree::Punct(p) if p.as_char() == ',' => key_expected = true,
            TokenTree::Literal(literal) if key_expected => {
                return Some(syn::Error::new(
                    literal.span(),
                    format!(
                        "`#[rate_limit]` takes `key = value` pairs, not a bare `{literal}`; e.g. `#[rate_limit(limit = 10, window = \"1m\")]`"
                    ),
                ));
            }
            TokenTree::Punct(p)
                if p.as_char() == ':' && p.spacing() == Spacing::Alone && after_key =>
            {
                if let Some(TokenTree::Ident(key)) = i.checked_sub(1).map(|j| &trees[j]) {
                    let key = key.to_string();
                    let example = if KEYS.contains(&key.as_str()) {
                        example(&key)
                    } else {
                        "`limit = 10`"
                    };
                    return Some(syn::Error::new(
                        p.span(),
                        format!("write `{key} = ..` with `=`, not `:`; e.g. {example}"),
                    ));
                }
            }
            _ => key_expected = false,
        }
        after_key = at_key && matches!(tree, TokenTree::Ident(_));
    }
    None
}

fn example(key: &str) -> &'static str {
    match key {
        "limit" => "`limit = 10`",
        "window" => "`window = \"5m\"`",
        "identity" => "`identity = \"ip+username\"`",
        "algorithm" => "`algorithm = \"sliding_window\"`",
        "fail" => "`fail = \"closed\"`",
        "shadow" => "`shadow = true`",
        "crate" => "`crate = \"my_facade::ratelimit\"`",
        _ => "`exempt = \"load balancer health check\"`",
    }
}

impl<T> Slot<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Slot<U> {
        match self {
            Slot::Absent => Slot::Absent,
            Slot::Invalid => Slot::Invalid,
            Slot::Valid(value, span) => Slot::Valid(f(value), span),
        }
    }
}

fn lit_str<'a>(value: &'a Expr, key: &str, cx: &mut Ctxt) -> Option<&'a LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Some(lit),
        other => {
            cx.error_spanned(
                other,
                format!("`{key}` takes a string, e.g. {}", example(key)),
            );
            None
        }
    }
}

fn parse_limit(value: &Expr, cx: &mut Ctxt) -> Slot<u32> {
    let positive = "`limit` must be a positive whole number of requests";
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => {
            if !int.suffix().is_empty() {
                cx.error(
                    int.span(),
                    format!(
                        "`limit` takes a plain integer, without the `{}` suffix",
                        int.suffix()
                    ),
                );
                return Slot::Invalid;
            }
            match int.base10_parse::<u64>() {
                Ok(0) => {
                    cx.error(
                        int.span(),
                        "`limit = 0` allows no request at all; a limit must be at least 1 (for a route that needs no limit, write `exempt = \"<reason>\"`)",
                    );
                    Slot::Invalid
                }
                Ok(n) if n <= u64::from(u32::MAX) => Slot::Valid(n as u32, int.span()),
                _ => {
                    cx.error(
                        int.span(),
                        format!(
                            "`limit = {int}` is too large; the largest limit is {}",
                            u32::MAX
                        ),
                    );
                    Slot::Invalid
                }
            }
        }
        Expr::Unary(unary) if matches!(unary.op, UnOp::Neg(_)) => {
            cx.error_spanned(
                unary,
                format!(
                    "{positive}, found `{}`",
                    unary.to_token_stream().to_string().replace(' ', "")
                ),
            );
            Slot::Invalid
        }
        Expr::Lit(ExprLit {
            lit: Lit::Float(float),
            ..
        }) => {
            cx.error(
                float.span(),
                format!("{positive}, found `{}`", float.base10_digits()),
            );
            Slot::Invalid
        }
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => {
            let text = lit.value();
            let text = text.trim();
            let hint = if text.parse::<u64>().is_ok() {
                format!("write `limit = {text}`")
            } else {
                "e.g. `limit = 10`".to_owned()
            };
            cx.error(
                lit.span(),
                format!("`limit` takes an integer, not a string; {hint}"),
            );
            Slot::Invalid
        }
        other => {
            cx.error_spanned(
                other,
                format!("{positive} written as an integer literal, e.g. `limit = 10`"),
            );
            Slot::Invalid
        }
    }
}

fn parse_window(value: &Expr, cx: &mut Ctxt) -> Slot<Window> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Int(int), ..
    }) = value
    {
        // `window = 300` has no unit; `window = 5m` lexes as the integer `5` with suffix `m`.
        let message = if int.suffix().is_empty() {
            format!(
                "`window` takes a duration string with a unit, e.g. `window = \"{}s\"`",
                int.base10_digits()
            )
        } else {
            format!("`window` takes a string; write `window = \"{int}\"`")
        };
        cx.error(int.span(), message);
        return Slot::Invalid;
    }
    let Some(lit) = lit_str(value, "window", cx) else {
        return Slot::Invalid;
    };
    let text = lit.value();
    if let Some(unit) = calendar_unit(&text) {
        cx.error(
            lit.span(),
            format!("window `{text}` counts in `{unit}`, which the parser takes as months or years of 30.44 or 365.25 days; `m` is minutes: write e.g. `5m`, `1h` or `30d`"),
        );
        return Slot::Invalid;
    }
    let duration: Duration = match humantime::parse_duration(text.trim()) {
        Ok(duration) => duration,
        Err(error) => {
            cx.error(lit.span(), window_parse_error(&text, error));
            return Slot::Invalid;
        }
    };
    if duration.is_zero() {
        cx.error(
            lit.span(),
            format!("window `{text}` is zero; a window must be at least `1ms`"),
        );
        return Slot::Invalid;
    }
    if !duration.subsec_nanos().is_multiple_of(1_000_000) {
        cx.error(
            lit.span(),
            format!("window `{text}` is not a whole number of milliseconds; windows are counted in milliseconds, e.g. {WINDOW_EXAMPLES}"),
        );
        return Slot::Invalid;
    }
    let millis = duration.as_millis();
    if millis > MAX_WINDOW_MILLIS {
        cx.error(
            lit.span(),
            format!("window `{text}` is longer than the maximum of 31 days; budgets that long are quotas, which belong in a billing or quota system"),
        );
        return Slot::Invalid;
    }
    Slot::Valid(
        Window {
            millis: millis as u64,
            text,
        },
        lit.span(),
    )
}

/// A month or year unit in a duration string (`1M`, `2 months`, `1y`): humantime takes `M`
/// for months, so a capitalised minute would silently become a month.
fn calendar_unit(text: &str) -> Option<&str> {
    text.split(|c: char| !c.is_ascii_alphabetic())
        .find(|unit| matches!(*unit, "M" | "month" | "months" | "y" | "year" | "years"))
}

/// "did you mean" for a unit: its lower case where that is a unit (`H` → `h`; units are case
/// sensitive), else a spelled-out unit close to a spelled-out misspelling. A unit of one or
/// two letters is close to too many to guess from (`e` of `1e3ms` is no `sec`).
fn unit_suggestion(unit: &str) -> String {
    const SHORT_UNITS: &[&str] = &["ns", "us", "ms", "s", "m", "h", "hr", "d", "w"];
    let lower = unit.to_ascii_lowercase();
    if lower != unit && SHORT_UNITS.contains(&lower.as_str()) {
        return format!("; did you mean `{lower}`? (units are lower case)");
    }
    if unit.chars().count() < 3 {
        return String::new();
    }
    suggest::did_you_mean(unit, WINDOW_UNIT_WORDS)
}

fn window_parse_error(text: &str, error: humantime::DurationError) -> String {
    use humantime::DurationError;
    match error {
        DurationError::UnknownUnit { unit, value, .. } if unit.is_empty() => format!(
            "window `{text}` has no unit; write e.g. `{value}s`, `{value}m` or `{value}h`"
        ),
        DurationError::UnknownUnit { unit, .. } if unit.starts_with("mo") => format!(
            "window `{text}` counts in months, which are not a window unit (the longest window is 31 days); write e.g. `30d`, or `5m` for minutes"
        ),
        DurationError::UnknownUnit { unit, .. } => format!(
            "unknown unit `{unit}` in window `{text}`; expected `ms`, `s`, `m`, `h` or `d`, as in {WINDOW_EXAMPLES}{}",
            unit_suggestion(&unit)
        ),
        DurationError::NumberOverflow => format!(
            "window `{text}` is longer than the maximum of 31 days"
        ),
        _ => format!(
            "cannot read window `{text}` as a duration; expected a number and a unit, as in {WINDOW_EXAMPLES}"
        ),
    }
}

fn parse_identity(value: &Expr, cx: &mut Ctxt) -> Slot<Vec<IdentityPart>> {
    let Some(lit) = lit_str(value, "identity", cx) else {
        return Slot::Invalid;
    };
    let text = lit.value();
    let span = lit.span();
    let mut parts = Vec::new();
    let mut ok = true;
    for raw in text.split('+') {
        let part = raw.trim();
        if part.is_empty() {
            cx.error(
                span,
                format!(
                    "empty identity part in `identity = \"{text}\"`; expected parts joined by `+` from {}",
                    suggest::list(IDENTITY_PARTS)
                ),
            );
            ok = false;
            continue;
        }
        let parsed = match part {
            "ip" => Some(IdentityPart::Ip),
            "username" => Some(IdentityPart::Username),
            "user_id" => Some(IdentityPart::UserId),
            "api_key" => Some(IdentityPart::ApiKey),
            "header" => parse_header_name("", &text, span, cx).map(IdentityPart::Header),
            _ => match part.split_once(':') {
                Some((prefix, name)) if prefix.trim() == "header" => {
                    parse_header_name(name.trim(), &text, span, cx).map(IdentityPart::Header)
                }
                _ => {
                    let head = part.split(':').next().unwrap_or(part);
                    cx.error(
                        span,
                        format!(
                            "unknown identity `{part}` in `identity = \"{text}\"`; expected {}{}",
                            suggest::list(IDENTITY_PARTS),
                            suggest::did_you_mean(head, IDENTITY_NAMES)
                                .replace("`header`", "`header:<name>`")
                        ),
                    );
                    None
                }
            },
        };
        match parsed {
            Some(part) if parts.contains(&part) => {
                cx.error(
                    span,
                    format!(
                        "identity part `{}` appears more than once in `identity = \"{text}\"`",
                        raw.trim()
                    ),
                );
                ok = false;
            }
            Some(part) => parts.push(part),
            None => ok = false,
        }
    }
    if ok {
        Slot::Valid(parts, span)
    } else {
        Slot::Invalid
    }
}

/// A header name is an RFC 9110 token; it is stored lower-case.
fn parse_header_name(name: &str, text: &str, span: Span, cx: &mut Ctxt) -> Option<String> {
    if name.is_empty() {
        cx.error(
            span,
            format!("`header` needs a header name in `identity = \"{text}\"`; write `header:<name>`, e.g. `header:X-Tenant-Id`"),
        );
        return None;
    }
    let is_tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if let Some(bad) = name.chars().find(|c| !is_tchar(*c)) {
        let bad = match bad {
            ' ' => "a space".to_owned(),
            '\t' => "a tab".to_owned(),
            other => format!("`{other}`"),
        };
        cx.error(
            span,
            format!(
                "invalid header name `{name}` in `identity = \"{text}\"`: a header name cannot contain {bad}; use letters, digits and `-`, e.g. `header:X-Tenant-Id`"
            ),
        );
        return None;
    }
    Some(name.to_ascii_lowercase())
}

fn parse_choice(value: &Expr, key: &str, choices: &[&str], cx: &mut Ctxt) -> Slot<usize> {
    let Some(lit) = lit_str(value, key, cx) else {
        return Slot::Invalid;
    };
    let text = lit.value();
    match choices.iter().position(|c| *c == text) {
        Some(index) => Slot::Valid(index, lit.span()),
        None => {
            let what = if key == "fail" { "fail mode" } else { key };
            cx.error(
                lit.span(),
                format!(
                    "unknown {what} `{text}`; expected one of {}{}",
                    suggest::list(choices),
                    suggest::did_you_mean(&text, choices)
                ),
            );
            Slot::Invalid
        }
    }
}

fn parse_shadow(value: &Expr, cx: &mut Ctxt) -> Slot<bool> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(b), ..
        }) => Slot::Valid(b.value, b.span()),
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) if matches!(lit.value().as_str(), "true" | "false") => {
            cx.error(
                lit.span(),
                format!(
                    "`shadow` takes a bool, not a string; write `shadow = {}`",
                    lit.value()
                ),
            );
            Slot::Invalid
        }
        other => {
            cx.error_spanned(
                other,
                format!(
                    "`shadow` takes `true` or `false`, found `{}`",
                    other.to_token_stream()
                ),
            );
            Slot::Invalid
        }
    }
}

fn parse_exempt(value: &Expr, cx: &mut Ctxt) -> Slot<String> {
    let Some(lit) = lit_str(value, "exempt", cx) else {
        return Slot::Invalid;
    };
    let reason = lit.value();
    if reason.trim().is_empty() {
        cx.error(
            lit.span(),
            "`exempt` needs a reason, e.g. `exempt = \"load balancer health check\"`; an unlimited route should say why",
        );
        return Slot::Invalid;
    }
    Slot::Valid(reason, lit.span())
}

fn parse_crate(value: &Expr, cx: &mut Ctxt) -> Slot<syn::Path> {
    let Some(lit) = lit_str(value, "crate", cx) else {
        return Slot::Invalid;
    };
    match lit.parse_with(syn::Path::parse_mod_style) {
        Ok(path) => Slot::Valid(path, lit.span()),
        Err(_) => {
            cx.error(
                lit.span(),
                format!(
                    "`crate = {}` is not a path; write the path this crate reaches `ratelimit_runtime` by, e.g. {}",
                    lit.to_token_stream(),
                    example("crate")
                ),
            );
            Slot::Invalid
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    #[test]
    fn the_colon_hint_is_for_a_key_only() {
        let hint = |tokens: TokenStream| syntax_hint(&tokens).map(|e| e.to_string());
        let colon = hint(quote!(limit: 10, window = "5m")).expect("a hint");
        assert!(colon.starts_with("write `limit = ..` with `=`"), "{colon}");
        let later = hint(quote!(limit = 10, window: "5m")).expect("a hint");
        assert!(later.starts_with("write `window = ..`"), "{later}");
        // Found by review: a colon inside an unquoted value was read as a key's.
        assert_eq!(hint(quote!(limit = 10, identity = header:x_api_key)), None);
        let bare = hint(quote!(10, "5m")).expect("a hint");
        assert!(bare.contains("not a bare `10`"), "{bare}");
    }
}
