//! Expand stage: the handler with its route attribute re-emitted, a marker guard, and one
//! `inventory` registration. The handler's own tokens are left untouched.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::{spanned::Spanned, Item, ItemFn, Token};

use crate::{
    args::{Args, Count, IdentityPart, RouteHeaders, Site},
    ctxt::Ctxt,
    route::{self, Found},
    valid::{self, LimitModel, PolicyModel},
};

pub(crate) fn rate_limit(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut function: ItemFn = match syn::parse2(item.clone()) {
        Ok(function) => function,
        Err(_) => {
            let error = syn::Error::new(
                Span::call_site(),
                format!(
                    "`#[rate_limit]` goes on an `async fn` route handler, not on {}; write it directly above the handler's route attribute (`#[get]`, `#[post]`, ...)",
                    describe(item.clone())
                ),
            );
            return with_error(item, error);
        }
    };
    let fingerprint = fingerprint(&args, &item);
    match expand(args, &mut function, fingerprint) {
        Ok(tokens) => tokens,
        Err(error) => {
            // Emit the handler without our attributes, so one typo does not become ten
            // errors; the route attribute stays, so the handler still exists for the rest of
            // the code. A missing `async` is already reported: the handler is emitted as the
            // `async fn` it has to be, or actix-web's `.to(handler)` adds a trait error.
            function.attrs.retain(|a| !route::is_rate_limit(a));
            // Only a handler with a route attribute: a plain helper marked by mistake keeps
            // its signature, or each of its callers adds a type error.
            if function.sig.asyncness.is_none() && route::has_route_attribute(&function.attrs) {
                function.sig.asyncness = Some(Token![async](function.sig.fn_token.span));
            }
            with_error(quote!(#function), error)
        }
    }
}

/// A hash of the attribute's arguments and the item, stable for a given compiler: two
/// declarations share it only when they are the same text, and then the same declaration.
fn fingerprint(args: &TokenStream, item: &TokenStream) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut hasher = DefaultHasher::new();
    args.to_string().hash(&mut hasher);
    item.to_string().hash(&mut hasher);
    hasher.finish()
}

/// "a struct", "an impl block", ...: what `#[rate_limit]` was put on instead of a function.
fn describe(item: TokenStream) -> &'static str {
    match syn::parse2::<Item>(item) {
        Ok(Item::Struct(_)) => "a struct",
        Ok(Item::Enum(_)) => "an enum",
        Ok(Item::Union(_)) => "a union",
        Ok(Item::Impl(_)) => "an impl block",
        Ok(Item::Trait(_)) => "a trait",
        Ok(Item::Mod(_)) => "a module",
        Ok(Item::Const(_)) => "a const",
        Ok(Item::Static(_)) => "a static",
        Ok(Item::Type(_)) => "a type alias",
        Ok(Item::Use(_)) => "a `use`",
        Ok(Item::Macro(_)) => "a macro invocation",
        _ => "this item",
    }
}

fn with_error(item: TokenStream, error: syn::Error) -> TokenStream {
    let error = error.to_compile_error();
    quote! {
        #error
        #item
    }
}

fn expand(args: TokenStream, function: &mut ItemFn, fingerprint: u64) -> syn::Result<TokenStream> {
    let mut cx = Ctxt::default();
    let mut stack = vec![Args::parse(args, Site::CallSite, &mut cx)];
    // Stacked declarations below this one are ours to read: take them off the item.
    let mut kept = Vec::new();
    for attr in std::mem::take(&mut function.attrs) {
        if route::is_rate_limit(&attr) {
            let tokens = match &attr.meta {
                syn::Meta::List(list) => list.tokens.clone(),
                _ => TokenStream::new(),
            };
            stack.push(Args::parse(tokens, Site::Stacked(quote!(#attr)), &mut cx));
        } else {
            kept.push(attr);
        }
    }
    function.attrs = kept;

    if function.sig.asyncness.is_none() {
        cx.error(
            function.sig.fn_token.span(),
            "`#[rate_limit]` needs an `async fn` handler; add `async`",
        );
    }
    // A method (`&self`) is in an impl block or a trait, where neither actix-web's route
    // attributes nor our registration can go: say so, rather than ask for a route attribute.
    let found = if let Some(receiver) = function.sig.receiver() {
        cx.error_spanned(
            receiver,
            "`#[rate_limit]` goes on a free `async fn` route handler, not on a method: actix-web's route attributes do not work inside an `impl` block or a trait; move the handler to module level",
        );
        Found::Missing
    } else {
        route::find(&function.attrs, &mut cx)
    };
    let methods = match &found {
        Found::Route(route) => route.methods.clone(),
        _ => Vec::new(),
    };
    let policy = valid::validate(&stack, &methods, &mut cx);
    let rt = runtime_path(&stack, &mut cx);
    let cost_from = cost_from_path(&stack, &rt, &mut cx);
    cx.check()?;
    let (route, policy) = match (found, policy) {
        (Found::Route(route), Some(policy)) => (route, policy),
        _ => unreachable!("every failure path reports an error"),
    };

    let name = &function.sig.ident;
    let name_text = name.to_string();
    // The marker is found by name in actix's route introspection, where a handler defined
    // inside a function body has a path `module_path!()` does not show: the name alone must
    // identify the declaration, so it carries a fingerprint of the attribute and the item.
    // Lower case (and unraw), so that the marker is snake case whatever the handler's name
    // and needs no `#[allow(non_snake_case)]`, which a crate that forbids the lint refuses.
    let marker_fn = format_ident!(
        "__ratelimit_marker_{}_{:016x}",
        syn::ext::IdentExt::unraw(name).to_string().to_lowercase(),
        fingerprint,
        span = name.span()
    );
    let declaration = format_ident!("__RATELIMIT_DECLARATION_{}", name);
    let marker_fn_text = marker_fn.to_string();
    let guard = format!("{rt}::__private::RouteGuard::new(&{declaration})");
    let entry = route
        .has_own_middleware()
        .then(|| format!("{rt}::__private::RouteEntry::new(&{declaration})"));
    let rewritten = route.rewrite(
        &function.attrs[route.index],
        &marker_fn_text,
        &guard,
        entry.as_deref(),
    );
    function.attrs[route.index] = rewritten;

    let path = &route.path;
    let methods = &route.methods;
    let policy = policy_tokens(&policy, &rt);
    Ok(quote! {
        #function

        #[doc(hidden)]
        fn #marker_fn(_: &#rt::__private::actix_web::guard::GuardContext<'_>) -> ::core::primitive::bool {
            true
        }

        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        const #declaration: #rt::__private::RouteDeclaration =
            #rt::__private::RouteDeclaration::__new(
                ::core::module_path!(),
                #name_text,
                &[#(#methods),*],
                #path,
                #policy,
                ::core::concat!(::core::module_path!(), "::", #marker_fn_text),
                ::core::concat!(::core::file!(), ":", ::core::line!()),
            )#cost_from;

        #rt::__private::inventory::submit! { #declaration }
    })
}

/// `.__cost_from(path, "path")` when the stack names a function that weighs each request
/// (`cost_from`, written once, or alike on several), else nothing. The function is first a
/// constant of type `fn(&ServiceRequest) -> u32`, spanned at the string: the compiler checks
/// its path and signature there, naming the type it expects and no hidden method.
fn cost_from_path(stack: &[Args], rt: &TokenStream, cx: &mut Ctxt) -> TokenStream {
    let why = ": one function weighs the route's requests; write it once";
    match one_path(stack, |a| &a.cost_from, "cost_from", why, cx) {
        Some(path) => {
            let text = quote!(#path).to_string().replace(' ', "");
            let span = syn::spanned::Spanned::span(path);
            let weigh = quote::quote_spanned!(span=> {
                const WEIGH: #rt::__private::CostFrom = #path;
                WEIGH
            });
            quote!(.__cost_from(#weigh, #text))
        }
        None => TokenStream::new(),
    }
}

/// The path the stacked `#[rate_limit]`s write for `key` (in `slot`), once or alike on
/// several; an error at each that differs from the first (`why` closes the message).
fn one_path<'a>(
    stack: &'a [Args],
    slot: impl Fn(&'a Args) -> &'a crate::args::Slot<syn::Path>,
    key: &str,
    why: &str,
    cx: &mut Ctxt,
) -> Option<&'a syn::Path> {
    let mut said: Option<&syn::Path> = None;
    for args in stack {
        let Some((path, span)) = slot(args).valid() else {
            continue;
        };
        match said {
            None => said = Some(path),
            Some(first) if quote!(#first).to_string() != quote!(#path).to_string() => cx.error(
                span,
                format!(
                    "`{key}` differs between the stacked `#[rate_limit]`s (`{}` and `{}`){why}",
                    quote!(#first).to_string().replace(' ', ""),
                    quote!(#path).to_string().replace(' ', "")
                ),
            ),
            Some(_) => {}
        }
    }
    said
}

/// The path the expansion names the runtime by: `crate = ".."` where the stack says it, else
/// the name the compiled crate's `Cargo.toml` gives the `ratelimit-runtime` dependency (a
/// renamed one too), else `::ratelimit_runtime`. A crate that reaches the runtime only
/// through another crate's re-export has no such dependency: it says `crate = ".."`.
pub(crate) fn runtime_path(stack: &[Args], cx: &mut Ctxt) -> TokenStream {
    let said = one_path(stack, |a| &a.runtime, "crate", "; write it once", cx);
    if let Some(path) = said {
        return quote!(#path);
    }
    match proc_macro_crate::crate_name("ratelimit-runtime") {
        Ok(proc_macro_crate::FoundCrate::Name(name)) if name != "ratelimit_runtime" => {
            let name = format_ident!("{}", name);
            quote!(::#name)
        }
        _ => quote!(::ratelimit_runtime),
    }
}

fn policy_tokens(policy: &PolicyModel, rt: &TokenStream) -> TokenStream {
    let p = quote!(#rt::__private);
    match policy {
        PolicyModel::Exempt(reason) => quote!(#p::Policy::exempt(#reason)),
        PolicyModel::Limited {
            default,
            tiers,
            fail,
            shadow,
            headers,
            enforce,
            wait,
            ban,
            sync,
        } => {
            let limits = limits_tokens(&default.limits, &p);
            let identity = identity_tokens(default.identity.as_ref(), &p);
            let fail = variant(fail.as_str());
            let fail = quote!(#p::FailMode::#fail);
            let mut policy =
                quote!(#p::RoutePolicy::new(&[#(#limits),*], #identity, #fail, #shadow));
            if *headers == RouteHeaders::Hidden {
                policy = quote!(#policy.with_headers(#p::RouteHeaders::Hidden));
            }
            if let Some(enforce) = enforce {
                policy = quote!(#policy.enforcing(#enforce));
            }
            if let Some(wait) = wait {
                policy = quote!(#policy.waiting(#p::Window::from_millis(#wait)));
            }
            if let Some(ban) = ban {
                let (times, within, lasting) = (ban.times, ban.within_millis, ban.for_millis);
                policy = quote!(#policy.banning(#p::Ban::new(
                    #times,
                    #p::Window::from_millis(#within),
                    #p::Window::from_millis(#lasting)
                )));
            }
            if !tiers.is_empty() {
                let tiers = tiers.iter().map(|(name, tier)| {
                    let limits = limits_tokens(&tier.limits, &p);
                    let identity = identity_tokens(tier.identity.as_ref(), &p);
                    quote!(#p::TierPolicy::new(#name, &[#(#limits),*], #identity))
                });
                policy = quote!(#policy.with_tiers(&[#(#tiers),*]));
            }
            // After the tiers: the policy checks that each of its stacks suits a share.
            if let Some(sync) = sync {
                policy = quote!(#policy.syncing(#p::Window::from_millis(#sync)));
            }
            quote!(#p::Policy::Limited(#policy))
        }
    }
}

/// The runtime's identity for `identity` (`None`: user id, else ip).
pub(crate) fn identity_tokens(
    identity: Option<&Vec<IdentityPart>>,
    p: &TokenStream,
) -> TokenStream {
    match identity {
        None => quote!(#p::Identity::UserIdElseIp),
        Some(parts) => {
            let parts = parts.iter().map(|part| match part {
                IdentityPart::Ip => quote!(#p::IdentityPart::Ip),
                IdentityPart::Username => quote!(#p::IdentityPart::Username),
                IdentityPart::UserId => quote!(#p::IdentityPart::UserId),
                IdentityPart::ApiKey => quote!(#p::IdentityPart::ApiKey),
                IdentityPart::Header(name) => quote!(#p::IdentityPart::Header(#name)),
            });
            quote!(#p::Identity::Parts(&[#(#parts),*]))
        }
    }
}

/// The runtime's limits of one stack.
fn limits_tokens(limits: &[LimitModel], p: &TokenStream) -> Vec<TokenStream> {
    limits
        .iter()
        .map(|l| {
            if let Some(budget) = &l.budget {
                // The budget's limit, weighed by this route's cost: a const expression, so a
                // name that is no `budget!` constant, or a cost over the budget's limit, fails
                // to compile.
                let mut limit = quote!(#p::SharedBudget::limit(&#budget));
                if l.cost != 1 {
                    let cost = l.cost;
                    limit = quote!(#limit.costing(#cost));
                }
                return limit;
            }
            let max = l.max;
            let window = l.window_millis;
            if l.concurrency {
                let mut limit = quote!(#p::Limit::concurrent(#max, #p::Window::from_millis(#window)));
                if let Some(own) = &l.identity {
                    let own = identity_tokens(Some(own), p);
                    limit = quote!(#limit.identified_by(#own));
                }
                return limit;
            }
            let algorithm = variant(l.algorithm.as_str());
            let mut limit = quote!(#p::Limit::new(#max, #p::Window::from_millis(#window), #p::Algorithm::#algorithm));
            if l.count != Count::Requests {
                let count = variant(l.count.as_str());
                limit = quote!(#limit.counting(#p::Count::#count));
            }
            if let Some(block) = l.block_millis {
                limit = quote!(#limit.blocking(#p::Window::from_millis(#block)));
            }
            if l.cost != 1 {
                let cost = l.cost;
                limit = quote!(#limit.costing(#cost));
            }
            if let Some(own) = &l.identity {
                let own = identity_tokens(Some(own), p);
                limit = quote!(#limit.identified_by(#own));
            }
            limit
        })
        .collect()
}

/// The runtime's variant for a grammar name: `sliding_window` → `SlidingWindow` (the runtime
/// re-exports the grammar's enums, whose variants are the names in camel case).
pub(crate) fn variant(name: &str) -> syn::Ident {
    let camel: String = name
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect();
    format_ident!("{camel}")
}
