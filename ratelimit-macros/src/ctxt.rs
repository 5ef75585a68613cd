//! Collects every error of one expansion, so a user with three typos sees three errors in
//! one compile (the approach of serde_derive's `internals/ctxt.rs`).

use std::fmt::Display;

use proc_macro2::Span;

#[derive(Default)]
pub(crate) struct Ctxt {
    errors: Vec<syn::Error>,
}

impl Ctxt {
    pub(crate) fn error(&mut self, span: Span, message: impl Display) {
        self.errors.push(syn::Error::new(span, message));
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
