//! Parse stage: one `#[rate_limit(...)]` into spanned values, one setter per key.
//!
//! Every problem with a single value is reported here, on the smallest token that shows
//! it; problems between keys (missing, mixed with `exempt`, ...) belong to `valid`.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::{
    parse::Parser, punctuated::Punctuated, spanned::Spanned, Expr, ExprLit, Lit, LitStr, Meta,
    Token, UnOp,
};

use ratelimit_grammar::{messages, suggest, Key as KeyName};
pub(crate) use ratelimit_grammar::{
    Algorithm, Count, FailMode, ParsedPart as IdentityPart, RouteHeaders,
};

use crate::ctxt::Ctxt;

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

/// Where to report a problem with a whole `#[rate_limit]`, such as a missing key.
pub(crate) enum Site {
    /// The attribute being expanded: the macro's call site.
    CallSite,
    /// A stacked `#[rate_limit]` below it, as written.
    Stacked(TokenStream),
}

/// A key as written: its name, the span of the name, and its value's tokens as text.
pub(crate) struct Key {
    pub(crate) name: KeyName,
    pub(crate) span: Span,
    /// `"ip+username"`, `10`, `true`: for messages that quote the user.
    pub(crate) value: String,
}

/// A valid window: its length and how the user wrote it.
pub(crate) struct Window {
    pub(crate) millis: u64,
    pub(crate) text: String,
}

/// Two windows are the same length, however written (`"2s"`, `"2000ms"`).
impl PartialEq for Window {
    fn eq(&self, other: &Self) -> bool {
        self.millis == other.millis
    }
}

/// One `#[rate_limit(...)]`.
pub(crate) struct Args {
    /// Where to report a problem with the attribute as a whole.
    pub(crate) site: Site,
    /// The keys an unknown one is told of: the attribute's, or `budget!`'s.
    pub(crate) known: &'static [&'static str],
    /// Every key written, in order.
    pub(crate) keys: Vec<Key>,
    pub(crate) limit: Slot<u32>,
    pub(crate) window: Slot<Window>,
    pub(crate) identity: Slot<Vec<IdentityPart>>,
    pub(crate) algorithm: Slot<Algorithm>,
    pub(crate) fail: Slot<FailMode>,
    pub(crate) count: Slot<Count>,
    /// How long a client stays refused once this limit refuses it.
    pub(crate) block: Slot<Window>,
    /// The units each request counts.
    pub(crate) cost: Slot<u32>,
    /// The function that weighs each request of the route.
    pub(crate) cost_from: Slot<syn::Path>,
    /// The shared budget this attribute names (a `budget!` constant).
    pub(crate) budget: Slot<syn::Path>,
    /// How many requests of one identity may be in flight (a concurrency limit).
    pub(crate) concurrency: Slot<u32>,
    /// A concurrency limit's lease.
    pub(crate) lease: Slot<Window>,
    /// How long a request over the route's rate limits waits for its turn.
    pub(crate) wait: Slot<Window>,
    /// A ban after repeated refusals on the route.
    pub(crate) ban: Slot<ratelimit_grammar::BanSpec>,
    /// How often an instance deciding from a local share reconciles it with the store.
    pub(crate) sync: Slot<Window>,
    pub(crate) shadow: Slot<bool>,
    /// Whether the route's answers carry the rate-limit headers.
    pub(crate) headers: Slot<RouteHeaders>,
    /// Whether the route refuses whatever the App's shadow switch says (`true`), or only
    /// logs (`false`); absent, it follows the switch.
    pub(crate) enforce: Slot<bool>,
    /// The tier whose limits this attribute declares (absent: the route's default).
    pub(crate) tier: Slot<String>,
    pub(crate) exempt: Slot<String>,
    /// The path the expansion reaches the runtime by (`crate = "my_facade::ratelimit"`), for
    /// a crate that renames the dependency or reaches it through another crate.
    pub(crate) runtime: Slot<syn::Path>,
}

impl Args {
    /// Parses the tokens inside `#[rate_limit(...)]`; `site` stands for the attribute.
    pub(crate) fn parse(tokens: TokenStream, site: Site, cx: &mut Ctxt) -> Args {
        Args::parse_among(tokens, site, &KeyName::NAMES, cx)
    }

    /// [`parse`](Args::parse) where an unknown key is told of the keys `known` only.
    pub(crate) fn parse_among(
        tokens: TokenStream,
        site: Site,
        known: &'static [&'static str],
        cx: &mut Ctxt,
    ) -> Args {
        let mut args = Args {
            site,
            known,
            keys: Vec::new(),
            limit: Slot::Absent,
            window: Slot::Absent,
            identity: Slot::Absent,
            algorithm: Slot::Absent,
            fail: Slot::Absent,
            count: Slot::Absent,
            block: Slot::Absent,
            cost: Slot::Absent,
            cost_from: Slot::Absent,
            budget: Slot::Absent,
            concurrency: Slot::Absent,
            lease: Slot::Absent,
            wait: Slot::Absent,
            ban: Slot::Absent,
            sync: Slot::Absent,
            shadow: Slot::Absent,
            headers: Slot::Absent,
            enforce: Slot::Absent,
            tier: Slot::Absent,
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

    /// The key as written, if it was.
    pub(crate) fn key(&self, name: KeyName) -> Option<&Key> {
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
                    suggest::list(&KeyName::NAMES)
                ),
            );
            return;
        };
        let name = ident.to_string();
        let Some(key) = KeyName::from_name(&name) else {
            cx.error(ident.span(), KeyName::unknown_among(&name, self.known));
            // A near miss stands for the key it misspells: no "missing `limit`" after `limt`.
            if let Some(meant) = KeyName::closest(&name) {
                if self.key(meant).is_none() {
                    self.mark_invalid(meant);
                }
            }
            return;
        };
        if self.key(key).is_some() {
            cx.error(ident.span(), messages::set_twice(key));
            return;
        }
        let value = match meta {
            Meta::NameValue(nv) => nv.value,
            other => {
                cx.error_spanned(&other, messages::needs_value(key));
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
            KeyName::Limit => self.limit = parse_limit(&value, cx),
            KeyName::Window => {
                self.window = parse_duration(&value, key, ratelimit_grammar::parse_window, cx);
            }
            KeyName::Block => {
                self.block = parse_duration(&value, key, ratelimit_grammar::parse_block, cx);
            }
            KeyName::Cost => self.cost = parse_cost(&value, cx),
            KeyName::CostFrom => self.cost_from = parse_cost_from(&value, cx),
            KeyName::Budget => self.budget = parse_budget(&value, cx),
            KeyName::Concurrency => self.concurrency = parse_concurrency(&value, cx),
            KeyName::Lease => {
                self.lease = parse_duration(&value, key, ratelimit_grammar::parse_lease, cx);
            }
            KeyName::Wait => {
                self.wait = parse_duration(&value, key, ratelimit_grammar::parse_wait, cx);
            }
            KeyName::Ban => self.ban = parse_text(&value, key, ratelimit_grammar::parse_ban, cx),
            KeyName::Sync => {
                self.sync = parse_duration(&value, key, ratelimit_grammar::parse_sync, cx);
            }
            KeyName::Count => self.count = parse_text(&value, key, Count::parse, cx),
            KeyName::Identity => self.identity = parse_identity(&value, cx),
            KeyName::Algorithm => {
                self.algorithm = parse_text(&value, key, Algorithm::parse, cx);
            }
            KeyName::Fail => self.fail = parse_text(&value, key, FailMode::parse, cx),
            KeyName::Headers => self.headers = parse_text(&value, key, RouteHeaders::parse, cx),
            KeyName::Shadow => self.shadow = parse_bool(&value, key, cx),
            KeyName::Enforce => self.enforce = parse_bool(&value, key, cx),
            KeyName::Tier => self.tier = parse_text(&value, key, parse_tier, cx),
            KeyName::Exempt => self.exempt = parse_exempt(&value, cx),
            KeyName::Crate => self.runtime = parse_crate(&value, cx),
        }
    }

    fn mark_invalid(&mut self, key: KeyName) {
        match key {
            KeyName::Limit => self.limit = Slot::Invalid,
            KeyName::Window => self.window = Slot::Invalid,
            KeyName::Identity => self.identity = Slot::Invalid,
            KeyName::Algorithm => self.algorithm = Slot::Invalid,
            KeyName::Fail => self.fail = Slot::Invalid,
            KeyName::Count => self.count = Slot::Invalid,
            KeyName::Block => self.block = Slot::Invalid,
            KeyName::Cost => self.cost = Slot::Invalid,
            KeyName::CostFrom => self.cost_from = Slot::Invalid,
            KeyName::Budget => self.budget = Slot::Invalid,
            KeyName::Concurrency => self.concurrency = Slot::Invalid,
            KeyName::Lease => self.lease = Slot::Invalid,
            KeyName::Wait => self.wait = Slot::Invalid,
            KeyName::Ban => self.ban = Slot::Invalid,
            KeyName::Sync => self.sync = Slot::Invalid,
            KeyName::Shadow => self.shadow = Slot::Invalid,
            KeyName::Headers => self.headers = Slot::Invalid,
            KeyName::Enforce => self.enforce = Slot::Invalid,
            KeyName::Tier => self.tier = Slot::Invalid,
            KeyName::Crate => self.runtime = Slot::Invalid,
            KeyName::Exempt => self.exempt = Slot::Invalid,
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
                    let example = KeyName::from_name(&key).map_or("`limit = 10`", KeyName::example);
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

fn lit_str<'a>(value: &'a Expr, key: KeyName, cx: &mut Ctxt) -> Option<&'a LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Some(lit),
        other => {
            cx.error_spanned(other, messages::takes_string(key));
            None
        }
    }
}

/// `cost = 10`: a positive integer literal of units (its bound, the limit, is checked with
/// the limit).
fn parse_cost(value: &Expr, cx: &mut Ctxt) -> Slot<u32> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Int(int), ..
    }) = value
    {
        if int.suffix().is_empty() {
            match int.base10_parse::<u32>() {
                Ok(0) => cx.error(
                    int.span(),
                    ratelimit_grammar::CostProblem::Zero.message(0, 0),
                ),
                Ok(n) => return Slot::Valid(n, int.span()),
                Err(_) => cx.error(int.span(), messages::cost_not_positive(&int.to_string())),
            }
            return Slot::Invalid;
        }
    }
    let written = value.to_token_stream().to_string().replace(' ', "");
    cx.error_spanned(value, messages::cost_not_positive(&written));
    Slot::Invalid
}

/// `concurrency = 5`: a positive integer literal, at most
/// [`MAX_CONCURRENCY`](ratelimit_grammar::MAX_CONCURRENCY).
fn parse_concurrency(value: &Expr, cx: &mut Ctxt) -> Slot<u32> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Int(int), ..
    }) = value
    {
        if int.suffix().is_empty() {
            match int
                .base10_parse::<u64>()
                .map_err(|_| {
                    format!(
                        "`concurrency = {int}` is too high; the highest is {}",
                        ratelimit_grammar::MAX_CONCURRENCY
                    )
                })
                .and_then(ratelimit_grammar::check_concurrency)
            {
                Ok(n) => return Slot::Valid(n, int.span()),
                Err(message) => cx.error(int.span(), message),
            }
            return Slot::Invalid;
        }
    }
    let written = value.to_token_stream().to_string().replace(' ', "");
    cx.error_spanned(
        value,
        format!("`concurrency` must be a positive whole number of requests written as an integer literal, e.g. `concurrency = 5`; found `{written}`"),
    );
    Slot::Invalid
}

fn parse_limit(value: &Expr, cx: &mut Ctxt) -> Slot<u32> {
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
                    cx.error(int.span(), messages::limit_zero());
                    Slot::Invalid
                }
                Ok(n) if n <= u64::from(u32::MAX) => Slot::Valid(n as u32, int.span()),
                _ => {
                    cx.error(int.span(), messages::limit_too_large(&int.to_string()));
                    Slot::Invalid
                }
            }
        }
        Expr::Unary(unary) if matches!(unary.op, UnOp::Neg(_)) => {
            cx.error_spanned(
                unary,
                messages::limit_not_positive(&unary.to_token_stream().to_string().replace(' ', "")),
            );
            Slot::Invalid
        }
        Expr::Lit(ExprLit {
            lit: Lit::Float(float),
            ..
        }) => {
            cx.error(
                float.span(),
                messages::limit_not_positive(float.base10_digits()),
            );
            Slot::Invalid
        }
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => {
            cx.error(lit.span(), messages::limit_string(&lit.value()));
            Slot::Invalid
        }
        other => {
            cx.error_spanned(other, messages::limit_not_literal());
            Slot::Invalid
        }
    }
}

/// A duration string (`window`, `block`), read by the grammar's `parse`.
fn parse_duration(
    value: &Expr,
    key: KeyName,
    parse: fn(&str) -> Result<u64, String>,
    cx: &mut Ctxt,
) -> Slot<Window> {
    let name = key.name();
    if let Expr::Lit(ExprLit {
        lit: Lit::Int(int), ..
    }) = value
    {
        // `window = 300` has no unit; `window = 5m` lexes as the integer `5` with suffix `m`.
        let message = if int.suffix().is_empty() {
            messages::duration_without_unit(key, int.base10_digits())
        } else {
            format!("`{name}` takes a string; write `{name} = \"{int}\"`")
        };
        cx.error(int.span(), message);
        return Slot::Invalid;
    }
    let Some(lit) = lit_str(value, key, cx) else {
        return Slot::Invalid;
    };
    let text = lit.value();
    match parse(&text) {
        Ok(millis) => Slot::Valid(Window { millis, text }, lit.span()),
        Err(message) => {
            cx.error(lit.span(), message);
            Slot::Invalid
        }
    }
}

fn parse_identity(value: &Expr, cx: &mut Ctxt) -> Slot<Vec<IdentityPart>> {
    let Some(lit) = lit_str(value, KeyName::Identity, cx) else {
        return Slot::Invalid;
    };
    match ratelimit_grammar::parse_identity(&lit.value()) {
        Ok(parts) => Slot::Valid(parts, lit.span()),
        Err(messages) => {
            for message in messages {
                cx.error(lit.span(), message);
            }
            Slot::Invalid
        }
    }
}

/// A string value the grammar parses (`algorithm`, `fail`, `count`, `headers`, `tier`), its
/// message on the literal.
fn parse_text<T>(
    value: &Expr,
    key: KeyName,
    parse: fn(&str) -> Result<T, String>,
    cx: &mut Ctxt,
) -> Slot<T> {
    let Some(lit) = lit_str(value, key, cx) else {
        return Slot::Invalid;
    };
    match parse(&lit.value()) {
        Ok(parsed) => Slot::Valid(parsed, lit.span()),
        Err(message) => {
            cx.error(lit.span(), message);
            Slot::Invalid
        }
    }
}

/// `tier = "pro"`: a name the runtime's `Tier` takes, checked by the grammar.
fn parse_tier(name: &str) -> Result<String, String> {
    ratelimit_grammar::check_tier(name).map(|()| name.to_owned())
}

fn parse_bool(value: &Expr, key: KeyName, cx: &mut Ctxt) -> Slot<bool> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(b), ..
        }) => Slot::Valid(b.value, b.span()),
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) if matches!(lit.value().as_str(), "true" | "false") => {
            cx.error(lit.span(), messages::bool_string(key, &lit.value()));
            Slot::Invalid
        }
        other => {
            cx.error_spanned(
                other,
                messages::not_bool(key, &other.to_token_stream().to_string()),
            );
            Slot::Invalid
        }
    }
}

fn parse_exempt(value: &Expr, cx: &mut Ctxt) -> Slot<String> {
    let Some(lit) = lit_str(value, KeyName::Exempt, cx) else {
        return Slot::Invalid;
    };
    let reason = lit.value();
    if reason.trim().is_empty() {
        cx.error(lit.span(), messages::exempt_without_reason());
        return Slot::Invalid;
    }
    Slot::Valid(reason, lit.span())
}

/// `cost_from = "path::to::fn"`: the path of the function, with the string's span, so that
/// the compiler's errors (no such function, another signature) point at it.
fn parse_cost_from(value: &Expr, cx: &mut Ctxt) -> Slot<syn::Path> {
    let Some(lit) = lit_str(value, KeyName::CostFrom, cx) else {
        return Slot::Invalid;
    };
    match lit.parse::<syn::Path>() {
        Ok(path) => Slot::Valid(path, lit.span()),
        Err(_) => {
            cx.error(
                lit.span(),
                format!(
                    "`cost_from = {}` is not a path; name a function `fn(&ServiceRequest) -> u32`, e.g. {}",
                    lit.to_token_stream(),
                    KeyName::CostFrom.example()
                ),
            );
            Slot::Invalid
        }
    }
}

/// `budget = API`: the path of a `budget!` constant, unquoted, so that the compiler finds it
/// (and suggests the closest name when it does not).
fn parse_budget(value: &Expr, cx: &mut Ctxt) -> Slot<syn::Path> {
    match value {
        Expr::Path(path) if path.qself.is_none() => Slot::Valid(path.path.clone(), path.span()),
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => {
            cx.error(
                lit.span(),
                format!(
                    "`budget` takes the budget's constant, not a string: write `budget = {}`",
                    lit.value()
                ),
            );
            Slot::Invalid
        }
        other => {
            cx.error_spanned(
                other,
                format!(
                    "`budget` takes the name of a constant `budget!` declares, e.g. {}",
                    KeyName::Budget.example()
                ),
            );
            Slot::Invalid
        }
    }
}

fn parse_crate(value: &Expr, cx: &mut Ctxt) -> Slot<syn::Path> {
    let Some(lit) = lit_str(value, KeyName::Crate, cx) else {
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
                    KeyName::Crate.example()
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
        // A colon inside an unquoted value is not a key's.
        assert_eq!(hint(quote!(limit = 10, identity = header:x_api_key)), None);
        let bare = hint(quote!(10, "5m")).expect("a hint");
        assert!(bare.contains("not a bare `10`"), "{bare}");
    }
}
