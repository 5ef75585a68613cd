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

/// Whether any of `attrs` is named like a route attribute (`#[get]`, `#[route]`, ...).
pub(crate) fn has_route_attribute(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| route_kind(a).is_some())
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
    let candidates: Vec<_> = attrs
        .iter()
        .enumerate()
        .filter_map(|(i, a)| route_kind(a).map(|k| (i, a, k)))
        .collect();
    let Some(&(_, first, _)) = candidates.first() else {
        // Also what the user sees with `#[rate_limit]` below the route attribute: actix-web
        // moves the handler, our attribute still on it, into its generated `register`.
        cx.error(
            Span::call_site(),
            "`#[rate_limit]` needs the handler's route attribute directly below it (`#[get]`, `#[post]`, `#[put]`, `#[delete]`, `#[patch]`, `#[head]`, `#[options]`, `#[query]`, ... or `#[route]`), and there is none; if the route attribute is above `#[rate_limit]`, swap the two",
        );
        return Found::Missing;
    };
    // The first that reads as a route: an attribute of another crate may share a method's
    // name (`#[fastrace::trace]`) and sit between ours and actix-web's.
    if let Some(route) = candidates
        .iter()
        .find_map(|&(index, attr, kind)| read(index, attr, kind))
    {
        return Found::Route(route);
    }
    // Never left to actix-web alone: some route attributes it accepts are unreadable here,
    // and the handler must not compile without its declared limit.
    cx.error_spanned(
        first,
        "`#[rate_limit]` cannot read this route attribute: it needs the path as a string literal first and, for `#[route]`, at least one `method = \"...\"` (e.g. `#[get(\"/orders/{id}\")]`, `#[route(\"/p\", method = \"GET\")]`)",
    );
    Found::Missing
}

/// The route of one route attribute, or `None` when it is not one we can read.
fn read(index: usize, attr: &Attribute, kind: &'static str) -> Option<RouteAttr> {
    let args = attr
        .parse_args_with(Punctuated::<Expr, Token![,]>::parse_terminated)
        .ok()?;
    let path = match args.first().map(ungrouped) {
        Some(Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        })) => lit.value(),
        _ => return None,
    };
    let mut methods = Vec::new();
    if kind == "route" {
        for arg in args.iter().skip(1) {
            if let Expr::Assign(assign) = ungrouped(arg) {
                let is_method = matches!(&*assign.left, Expr::Path(p) if p.path.is_ident("method"));
                if let (
                    true,
                    Expr::Lit(ExprLit {
                        lit: Lit::Str(lit), ..
                    }),
                ) = (is_method, ungrouped(&assign.right))
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
        return None;
    }
    Some(RouteAttr {
        index,
        methods,
        path,
        args,
    })
}

/// The expression inside any invisible groups (`macro_rules!` fragments) around it.
pub(crate) fn ungrouped(expr: &Expr) -> &Expr {
    match expr {
        Expr::Group(group) => ungrouped(&group.expr),
        other => other,
    }
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

#[cfg(test)]
mod tests {
    use syn::parse_quote;

    use super::*;

    fn route_of(attrs: &[Attribute]) -> Option<(usize, Vec<String>, String)> {
        let mut cx = Ctxt::default();
        let found = find(attrs, &mut cx);
        let errors = cx.check();
        match found {
            Found::Route(route) => {
                assert!(errors.is_ok(), "no error beside a route");
                Some((route.index, route.methods, route.path))
            }
            Found::Missing => {
                assert!(errors.is_err(), "an error whenever no route is read");
                None
            }
        }
    }

    /// Another crate's attribute named like a method (`#[fastrace::trace]`) between ours and
    /// actix-web's is not the route: taking it for one would drop the declaration without an
    /// error.
    #[test]
    fn the_route_is_the_first_attribute_that_reads_as_one() {
        let attrs: Vec<Attribute> = vec![
            parse_quote!(#[fastrace::trace]),
            parse_quote!(#[trace(name = "x")]),
            parse_quote!(#[get("/traced")]),
        ];
        assert_eq!(
            route_of(&attrs),
            Some((2, vec!["GET".to_owned()], "/traced".to_owned()))
        );
    }

    #[test]
    fn an_unreadable_route_attribute_is_an_error_of_ours() {
        for attrs in [
            vec![parse_quote!(#[get])],
            vec![parse_quote!(#[fastrace::trace])],
            vec![parse_quote!(#[get(PATH)])],
            vec![parse_quote!(#[route("/p")])],
        ] {
            assert_eq!(route_of(&attrs), None);
        }
    }
}
