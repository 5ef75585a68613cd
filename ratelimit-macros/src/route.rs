//! Reads actix-web's route attribute (`#[get("/p")]`, `#[route("/p", method = "GET")]`, ...)
//! below `#[rate_limit]`, and re-emits it with the guard and middleware the limiter needs.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{
    punctuated::Punctuated, spanned::Spanned, Attribute, Expr, ExprLit, Lit,
    Token,
};

use crate::ctxt::Ctxt;

/// The single-method route attributes and their methods.
const METHOD_ATTRIBUTES: &[(&str, &str)] = &[
    ("get", "GET"),
    ("post", "POST"),
    ("put", "PUT"),
    ("delete", "DELETE"),
    ("patch", "PATCH"),
    ("head", "HEAD"),
    ("options", "OPTIONS"),
    ("trace", "TRACE"),
    ("connect", "CONNECT"),
];

/// The route attribute found on the handler.
pub(crate) struct RouteAttr {
    /// Its position in the function's attributes.
    pub(crate) index: usize,
    /// Upper-case methods, in the order written.
    pub(crate) methods: Vec<String>,
    /// The path as written.
    pub(crate) path: String,
    /// The attribute's arguments, split at top-level commas.
    args: Punctuated<Expr, Token![,]>,
}

/// What kind of attribute this is, by the last segment of its path.
fn route_kind(attr: &Attribute) -> Option<&'static str> {
    let last = attr.path().segments.last()?.ident.to_string();
    if last == "route" {
        return Some("route");
    }
    METHOD_ATTRIBUTES
        .iter()
        .find(|(name, _)| *name == last)
        .map(|(name, _)| *name)
}

pub(crate) fn is_rate_limit(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "rate_limit")
}

/// Finds the route attribute; reports a clear error when there is none.
pub(crate) fn find(attrs: &[Attribute], fn_span: Span, cx: &mut Ctxt) -> Option<RouteAttr> {
    if let Some(attr) = attrs
        .iter()
        .find(|a| a.path().segments.last().is_some_and(|s| s.ident == "routes"))
    {
        cx.error(
            attr.span(),
            "`#[rate_limit]` cannot read `#[routes]`; write one handler per route attribute (`#[get]`, `#[post]`, ...) or use `#[route(\"/path\", method = \"GET\", method = \"POST\")]`",
        );
        return None;
    }
    let Some((index, attr, kind)) = attrs
        .iter()
        .enumerate()
        .find_map(|(i, a)| route_kind(a).map(|k| (i, a, k)))
    else {
        cx.error(
            fn_span,
            "`#[rate_limit]` must be written directly above the handler's route attribute (`#[get]`, `#[post]`, `#[put]`, `#[delete]`, `#[patch]`, `#[head]` or `#[route]`), and none is below it; if the route attribute is above `#[rate_limit]`, swap them",
        );
        return None;
    };
    let args = match attr.parse_args_with(Punctuated::<Expr, Token![,]>::parse_terminated) {
        Ok(args) => args,
        // actix-web reports its own argument errors; a broken route attribute is its job.
        Err(_) => Punctuated::new(),
    };
    let path = match args.first() {
        Some(Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        })) => lit.value(),
        _ => {
            cx.error(
                attr.span(),
                "the route attribute below `#[rate_limit]` needs a path string first, e.g. `#[get(\"/login\")]`",
            );
            return None;
        }
    };
    let mut methods = Vec::new();
    if kind == "route" {
        for arg in args.iter().skip(1) {
            if let Expr::Assign(assign) = arg {
                let is_method = matches!(&*assign.left, Expr::Path(p) if p.path.is_ident("method"));
                if let (
                    true,
                    Expr::Lit(ExprLit {
                        lit: Lit::Str(lit), ..
                    }),
                ) = (is_method, &*assign.right)
                {
                    let method = lit.value().to_ascii_uppercase();
                    if !methods.contains(&method) {
                        methods.push(method);
                    }
                }
            }
        }
    } else {
        let method = METHOD_ATTRIBUTES
            .iter()
            .find(|(name, _)| *name == kind)
            .map(|(_, method)| (*method).to_owned())
            .expect("kind comes from METHOD_ATTRIBUTES");
        methods.push(method);
    }
    Some(RouteAttr {
        index,
        methods,
        path,
        args,
    })
}

impl RouteAttr {
    /// The route attribute with `guard = marker` and `wrap = middleware` inserted right after
    /// the path, so that the limiter's middleware is the innermost: it runs after the
    /// resource's own middleware (an auth layer that sets the user id, say) and right
    /// before the handler.
    pub(crate) fn rewrite(&self, attr: &Attribute, marker: &str, wrap: &str) -> Attribute {
        let mut args = self.args.iter();
        let path = args.next();
        let rest: Vec<&Expr> = args.collect();
        let attr_path = attr.path();
        let tokens: TokenStream = quote! {
            #path, guard = #marker, wrap = #wrap #(, #rest)*
        };
        let mut rewritten = attr.clone();
        rewritten.meta = syn::parse_quote!(#attr_path(#tokens));
        rewritten
    }
}
