//! The `#[rate_limit]` attribute. Use it through
//! [`ratelimit_runtime::rate_limit`](https://docs.rs/ratelimit-runtime/latest/ratelimit_runtime/attr.rate_limit.html),
//! its reference: the expansion names `ratelimit-runtime`, so a crate using the attribute
//! depends on that crate, not on this one.

// The crate is split by stage, like thiserror and actix-web-codegen: `args` parses each
// `#[rate_limit(...)]` into spanned values, `route` reads the actix route attribute below it,
// `valid` checks the whole stack and builds the declaration, and `expand` emits the handler,
// its route attribute and one registration.

mod args;
mod budget;
mod ctxt;
mod expand;
mod route;
mod valid;

use proc_macro::TokenStream;

/// Declares a handler's rate limit; see the `ratelimit_runtime` crate documentation.
#[proc_macro_attribute]
pub fn rate_limit(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::rate_limit(args.into(), item.into()).into()
}

/// Declares a budget shared by routes; see the `ratelimit_runtime` crate documentation.
#[proc_macro]
pub fn budget(input: TokenStream) -> TokenStream {
    budget::budget(input.into()).into()
}
