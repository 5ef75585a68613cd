//! Parse stage: one `#[rate_limit(...)]` into spanned values, one setter per key.
//!
//! Every problem with a single value is reported here, on the smallest token that shows
//! it; problems between keys (missing, mixed with `exempt`, ...) belong to `valid`.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::{
    parse::Parser, punctuated::Punctuated, spanned::Spanned, Expr, ExprLit, Lit, LitStr, Meta,
    Token, UnOp,
};

use crate::{ctxt::Ctxt, suggest};

pub(crate) const KEYS: &[&str] = &[
    "limit",
    "window",
    "identity",
    "algorithm",
    "fail",
    "shadow",
    "exempt",
];
pub(crate) const IDENTITY_PARTS: &[&str] = &["ip", "username", "user_id", "api_key", "header:<name>"];
const IDENTITY_NAMES: &[&str] = &["ip", "username", "user_id", "api_key", "header"];
pub(crate) const ALGORITHMS: &[&str] = &["fixed_window", "sliding_window", "sliding_log", "gcra"];
const FAIL_MODES: &[&str] = &["open", "closed"];
const WINDOW_EXAMPLES: &str = "`500ms`, `30s`, `5m`, `1h`, `1d`, `1h30m`";
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

/// One `#[rate_limit(...)]`.
pub(crate) struct Args {
    /// Where to report a missing key: the attribute itself.
    pub(crate) span: Span,
    /// Every key written, in order, with its span.
    pub(crate) keys: Vec<(&'static str, Span)>,
    pub(crate) limit: Slot<u32>,
    pub(crate) window: Slot<u64>,
    pub(crate) identity: Slot<Vec<IdentityPart>>,
    pub(crate) algorithm: Slot<Algorithm>,
    pub(crate) fail: Slot<FailMode>,
    pub(crate) shadow: Slot<bool>,
    pub(crate) exempt: Slot<String>,
}

impl Args {
    /// Parses the tokens inside `#[rate_limit(...)]`; `span` stands for the attribute.
    pub(crate) fn parse(tokens: TokenStream, span: Span, cx: &mut Ctxt) -> Args {
        let mut args = Args {
            span,
            keys: Vec::new(),
            limit: Slot::Absent,
            window: Slot::Absent,
            identity: Slot::Absent,
            algorithm: Slot::Absent,
            fail: Slot::Absent,
            shadow: Slot::Absent,
            exempt: Slot::Absent,
        };
        let metas = match Punctuated::<Meta, Token![,]>::parse_terminated.parse2(tokens) {
            Ok(metas) => metas,
            Err(error) => {
                cx.push(error);
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

    fn set(&mut self, meta: Meta, cx: &mut Ctxt) {
        let path = meta.path();
        let Some(ident) = path.get_ident() else {
            cx.error(
                path.span(),
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
            return;
        };
        if self.keys.iter().any(|(k, _)| *k == key) {
            cx.error(
                ident.span(),
                format!("`{key}` set more than once; each key may appear once per `#[rate_limit]`"),
            );
            return;
        }
        self.keys.push((key, ident.span()));
        let value = match meta {
            Meta::NameValue(nv) => nv.value,
            other => {
                cx.error(
                    other.span(),
                    format!("`{key}` needs a value, e.g. {}", example(key)),
                );
                self.mark_invalid(key);
                return;
            }
        };
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
            _ => self.exempt = Slot::Invalid,
        }
    }
}

fn example(key: &str) -> &'static str {
    match key {
        "limit" => "`limit = 10`",
        "window" => "`window = \"5m\"`",
        "identity" => "`identity = \"ip+username\"`",
        "algorithm" => "`algorithm = \"sliding_window\"`",
        "fail" => "`fail = \"closed\"`",
        "shadow" => "`shadow = true`",
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
            cx.error(
                other.span(),
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
                    format!("`limit` takes a plain integer, without the `{}` suffix", int.suffix()),
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
                            "`limit = {}` is too large; the largest limit is {}",
                            int.base10_digits(),
                            u32::MAX
                        ),
                    );
                    Slot::Invalid
                }
            }
        }
        Expr::Unary(unary) if matches!(unary.op, UnOp::Neg(_)) => {
            cx.error(
                unary.span(),
                format!("{positive}, found `{}`", quote::quote!(#unary).to_string().replace(' ', "")),
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
            cx.error(
                lit.span(),
                format!(
                    "`limit` takes an integer, not a string: write `limit = {}`",
                    lit.value().trim()
                ),
            );
            Slot::Invalid
        }
        other => {
            cx.error(
                other.span(),
                format!("{positive} written as an integer literal, e.g. `limit = 10`"),
            );
            Slot::Invalid
        }
    }
}

fn parse_window(value: &Expr, cx: &mut Ctxt) -> Slot<u64> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Int(int), ..
    }) = value
    {
        cx.error(
            int.span(),
            format!(
                "`window` takes a duration string with a unit, e.g. `window = \"{}s\"`",
                int.base10_digits()
            ),
        );
        return Slot::Invalid;
    }
    let Some(lit) = lit_str(value, "window", cx) else {
        return Slot::Invalid;
    };
    let text = lit.value();
    let duration: Duration = match humantime::parse_duration(text.trim()) {
        Ok(duration) => duration,
        Err(error) => {
            cx.error(
                lit.span(),
                format!("cannot parse window `{text}` ({error}); expected a duration such as {WINDOW_EXAMPLES}"),
            );
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
    if duration.subsec_nanos() % 1_000_000 != 0 {
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
    Slot::Valid(millis as u64, lit.span())
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
            format!("`header:` needs a header name in `identity = \"{text}\"`, e.g. `header:X-Tenant-Id`"),
        );
        return None;
    }
    let is_tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if let Some(bad) = name.chars().find(|c| !is_tchar(*c)) {
        cx.error(
            span,
            format!(
                "invalid header name `{name}` in `identity = \"{text}\"`: {bad:?} is not allowed in a header name (letters, digits and `!#$%&'*+-.^_`|~` are)"
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
        other => {
            cx.error(other.span(), "`shadow` takes `true` or `false` (without quotes)");
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
