//! The `#[rate_limit]` attribute. Use it through `ratelimit_runtime::rate_limit`.
//!
//! The crate is split by stage, like thiserror and actix-web-codegen:
//! [`args`] parses each `#[rate_limit(...)]` into spanned values, [`route`] reads the actix
//! route attribute below it, [`valid`] checks the whole stack and builds the declaration,
//! and [`expand`] emits the handler, its route attribute and one registration.

mod args;
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
