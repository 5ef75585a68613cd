//! Collects every error of one expansion, so a user with three typos sees three errors in
//! one compile (the approach of serde_derive's `internals/ctxt.rs`).

use std::fmt::Display;

use proc_macro2::Span;
use quote::ToTokens;

#[derive(Default)]
pub(crate) struct Ctxt {
    errors: Vec<syn::Error>,
}

impl Ctxt {
    pub(crate) fn error(&mut self, span: Span, message: impl Display) {
        self.errors.push(syn::Error::new(span, message));
    }

    /// An error over everything `tokens` covers, from its first token to its last (a plain
    /// `Span` of several tokens is only their first one on stable Rust).
    pub(crate) fn error_spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.errors.push(syn::Error::new_spanned(tokens, message));
    }

    pub(crate) fn push(&mut self, error: syn::Error) {
        self.errors.push(error);
    }

    /// All errors combined into one, or `Ok` when there were none.
    pub(crate) fn check(self) -> syn::Result<()> {
        let mut errors = self.errors.into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for error in errors {
            combined.combine(error);
        }
        Err(combined)
    }
}
