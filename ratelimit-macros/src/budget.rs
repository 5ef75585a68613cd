//! `budget!(pub API = limit = 10000, window = "1d", identity = "api_key")`: a budget shared by
//! routes, as a constant the attribute names (`#[rate_limit(budget = API)]`) and one
//! registration, so that the program can tell two budgets of one name apart at startup.

use proc_macro2::TokenStream;
use quote::quote;
use ratelimit_grammar::{check_limit, messages, Key};
use syn::{parse::Parser, Ident, Token, Visibility};

use crate::{
    args::{Algorithm, Args, Site, Slot},
    ctxt::Ctxt,
    expand::{identity_tokens, runtime_path, variant},
};

/// The keys a shared budget takes; the others belong to the routes that name it.
const KEYS: [Key; 5] = [
    Key::Limit,
    Key::Window,
    Key::Identity,
    Key::Algorithm,
    Key::Crate,
];

/// [`KEYS`] by name, as an unknown key is told of them.
const KEY_NAMES: [&str; 5] = ["limit", "window", "identity", "algorithm", "crate"];

pub(crate) fn budget(input: TokenStream) -> TokenStream {
    expand(input).unwrap_or_else(syn::Error::into_compile_error)
}

fn expand(input: TokenStream) -> syn::Result<TokenStream> {
    let header = |stream: syn::parse::ParseStream| {
        let vis: Visibility = stream.parse()?;
        let name: Ident = stream.parse()?;
        stream.parse::<Token![=]>().map_err(|e| {
            syn::Error::new(
                e.span(),
                "write `budget!(NAME = limit = .., window = ..)`: the budget's name, `=`, then its keys",
            )
        })?;
        let rest: TokenStream = stream.parse()?;
        Ok((vis, name, rest))
    };
    let (vis, name, rest) = header.parse2(input)?;
    let mut cx = Ctxt::default();
    // The name is part of the budget's keys and of overrides (`budget API`), which read
    // plain names only.
    if let Err(problem) = ratelimit_grammar::check_budget_name(&name.to_string()) {
        cx.error(name.span(), problem);
    }
    let args = Args::parse_among(rest, Site::CallSite, &KEY_NAMES, &mut cx);
    for key in args.keys.iter().filter(|k| !KEYS.contains(&k.name)) {
        cx.error(
            key.span,
            format!(
                "a shared budget takes `limit`, `window`, `identity` and `algorithm`; `{}` goes on the routes that name it (`#[rate_limit(budget = {name}, ..)]`)",
                key.name.name()
            ),
        );
    }
    if let Some(message) =
        messages::missing_limit_or_window(!args.limit.is_absent(), !args.window.is_absent(), false)
    {
        cx.error(name.span(), message);
    }
    let algorithm = match &args.algorithm {
        Slot::Valid(algorithm, _) => *algorithm,
        _ => Algorithm::SlidingWindow,
    };
    if let (Some((&max, span)), Some((window, _))) = (args.limit.valid(), args.window.valid()) {
        if let Err(problem) = check_limit(max, window.millis, algorithm) {
            cx.error(span, problem.message(max, window.millis, &window.text));
        }
    }
    let rt = runtime_path(std::slice::from_ref(&args), &mut cx);
    cx.check()?;
    let (Some((&max, _)), Some((window, _))) = (args.limit.valid(), args.window.valid()) else {
        unreachable!("a missing or invalid limit or window is reported");
    };
    let p = quote!(#rt::__private);
    let window = window.millis;
    let algorithm = variant(algorithm.as_str());
    let identity = identity_tokens(args.identity.valid().map(|(v, _)| v), &p);
    Ok(quote! {
        #vis const #name: #p::SharedBudget = #p::SharedBudget::__declare(
            ::core::stringify!(#name),
            ::core::module_path!(),
            ::core::concat!(::core::file!(), ":", ::core::line!()),
            #p::Limit::new(#max, #p::Window::from_millis(#window), #p::Algorithm::#algorithm),
            #identity,
        );

        #p::inventory::submit! { #name }
    })
}
