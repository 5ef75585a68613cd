//! Reads actix-web's route attribute (`#[get("/p")]`, `#[route("/p", method = "GET")]`, ...)
//! below `#[rate_limit]`, and re-emits it with the guard and middleware the limiter needs.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{punctuated::Punctuated, Attribute, Expr, ExprLit, Lit, Token};

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
    ("query", "QUERY"),
];

/// What [`find`] found below `#[rate_limit]`.
pub(crate) enum Found {
    Route(RouteAttr),
    /// No route attribute we can read; the error is reported.
    Missing,
    /// A route attribute actix-web cannot read either: its own error says what is wrong, and
    /// one of ours on top would only repeat it.
    Broken,
}

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
pub(crate) fn find(attrs: &[Attribute], cx: &mut Ctxt) -> Found {
    if let Some(attr) = attrs.iter().find(|a| {
        a.path()
            .segments
            .last()
            .is_some_and(|s| s.ident == "routes")
    }) {
        cx.error_spanned(
            attr,
            "`#[rate_limit]` cannot read `#[routes]`; write one handler per route attribute (`#[get]`, `#[post]`, ...) or use `#[route(\"/path\", method = \"GET\", method = \"POST\")]`",
        );
        return Found::Missing;
    }
    let Some((index, attr, kind)) = attrs
        .iter()
        .enumerate()
        .find_map(|(i, a)| route_kind(a).map(|k| (i, a, k)))
    else {
        // Also what the user sees with `#[rate_limit]` below the route attribute: actix-web
        // moves the handler, our attribute still on it, into its generated `register`.
        cx.error(
            Span::call_site(),
            "`#[rate_limit]` needs the handler's route attribute directly below it (`#[get]`, `#[post]`, `#[put]`, `#[delete]`, `#[patch]`, `#[head]` or `#[route]`), and there is none; if the route attribute is above `#[rate_limit]`, swap the two",
        );
        return Found::Missing;
    };
    let Ok(args) = attr.parse_args_with(Punctuated::<Expr, Token![,]>::parse_terminated) else {
        return Found::Broken;
    };
    let path = match args.first() {
        Some(Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        })) => lit.value(),
        _ => return Found::Broken,
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
    if methods.is_empty() {
        // `#[route("/p")]` without a `method`, which actix-web rejects.
        return Found::Broken;
    }
    Found::Route(RouteAttr {
        index,
        methods,
        path,
        args,
    })
}

impl RouteAttr {
    /// Whether the route attribute wraps the route in middleware of its own (`wrap = ...`).
    pub(crate) fn has_own_middleware(&self) -> bool {
        self.args.iter().skip(1).any(|arg| {
            matches!(arg, Expr::Assign(assign)
                if matches!(&*assign.left, Expr::Path(p) if p.path.is_ident("wrap")))
        })
    }

    /// The route attribute with `guard = marker` and `wrap = guard` inserted right after
    /// the path, so that the limiter's guard is the innermost middleware: it runs after the
    /// resource's own middleware (an auth layer that sets the user id, say) and right
    /// before the handler. With `entry`, that is added last, as the outermost middleware: it
    /// counts what the route's own middleware refuses before the guard sees it.
    pub(crate) fn rewrite(
        &self,
        attr: &Attribute,
        marker: &str,
        guard: &str,
        entry: Option<&str>,
    ) -> Attribute {
        let mut args = self.args.iter();
        let path = args.next();
        let rest: Vec<&Expr> = args.collect();
        let attr_path = attr.path();
        let entry = entry.map(|entry| quote!(, wrap = #entry));
        let tokens: TokenStream = quote! {
            #path, guard = #marker, wrap = #guard #(, #rest)* #entry
        };
        let mut rewritten = attr.clone();
        rewritten.meta = syn::parse_quote!(#attr_path(#tokens));
        rewritten
    }
}
