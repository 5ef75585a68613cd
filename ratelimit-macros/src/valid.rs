//! Validate stage: checks one handler's stack of `#[rate_limit]` attributes against each
//! other and against its route, and builds the declaration to expand.

use proc_macro2::Span;

use crate::{
    args::{Algorithm, Args, FailMode, IdentityPart},
    ctxt::Ctxt,
};

/// The most stacked limits on one route (the runtime's `RoutePolicy` allows as many).
const MAX_STACKED: usize = 8;
/// The most requests a sliding log may hold (the runtime's `MAX_SLIDING_LOG_LIMIT`).
const MAX_SLIDING_LOG_LIMIT: u32 = 1000;

pub(crate) struct LimitModel {
    pub(crate) max: u32,
    pub(crate) window_millis: u64,
    pub(crate) algorithm: Algorithm,
}

pub(crate) enum PolicyModel {
    Exempt(String),
    Limited {
        limits: Vec<LimitModel>,
        /// `None`: the default identity (user id, else ip).
        identity: Option<Vec<IdentityPart>>,
        fail: FailMode,
        shadow: bool,
    },
}

/// Checks the stack; errors go to `cx`. Returns `None` when anything was wrong.
pub(crate) fn validate(stack: &[Args], methods: &[String], cx: &mut Ctxt) -> Option<PolicyModel> {
    let mut ok = true;
    let is_exempt = |args: &Args| args.keys.iter().any(|(k, _)| *k == "exempt");
    if let Some(exempt) = stack.iter().find(|a| is_exempt(a)) {
        for (key, span) in &exempt.keys {
            if *key != "exempt" {
                cx.error(
                    *span,
                    format!("`exempt` stands alone: an exempt route has no `{key}`; remove `{key}` or remove `exempt`"),
                );
            }
        }
        if stack.len() > 1 {
            let span = exempt
                .keys
                .iter()
                .find(|(k, _)| *k == "exempt")
                .map_or(exempt.span, |(_, span)| *span);
            cx.error(
                span,
                "an exempt route cannot also stack `#[rate_limit]` declarations; keep either the exemption or the limits",
            );
        }
        return match &exempt.exempt {
            Slot::Valid(reason, _) if exempt.keys.len() == 1 && stack.len() == 1 => {
                Some(PolicyModel::Exempt(reason.clone()))
            }
            _ => None,
        };
    }

    if stack.len() > MAX_STACKED {
        cx.error(
            stack[MAX_STACKED].span,
            format!("a route may stack at most {MAX_STACKED} `#[rate_limit]` declarations"),
        );
        ok = false;
    }

    let mut limits: Vec<(LimitModel, Span)> = Vec::new();
    for args in stack {
        if args.limit.is_absent() {
            cx.error(
                args.span,
                "missing `limit`: how many requests the window allows, e.g. `limit = 10` (or `exempt = \"<reason>\"` for a route that needs no limit)",
            );
            ok = false;
        }
        if args.window.is_absent() {
            cx.error(
                args.span,
                "missing `window`: the duration the limit counts over, e.g. `window = \"5m\"`",
            );
            ok = false;
        }
        let algorithm = match &args.algorithm {
            Slot::Valid(algorithm, _) => *algorithm,
            Slot::Invalid => {
                ok = false;
                Algorithm::SlidingWindow
            }
            Slot::Absent => Algorithm::SlidingWindow,
        };
        if let (Algorithm::SlidingLog, Some((&max, span))) = (algorithm, args.limit.valid()) {
            if max > MAX_SLIDING_LOG_LIMIT {
                cx.error(
                    span,
                    format!("`limit = {max}` is too high for `sliding_log`, which keeps one Redis sorted-set entry per request in the window, so its memory and Redis work grow with the limit (at most {MAX_SLIDING_LOG_LIMIT}); use `algorithm = \"sliding_window\"` or `algorithm = \"gcra\"` for high limits"),
                );
                ok = false;
            }
        }
        if let (Some((&max, span)), Some((&window_millis, _))) =
            (args.limit.valid(), args.window.valid())
        {
            if let Some((_, _)) = limits
                .iter()
                .find(|(l, _)| l.algorithm == algorithm && l.window_millis == window_millis)
            {
                cx.error(
                    span,
                    "two stacked limits use the same algorithm and window, so they would count in one Redis key; keep the stricter one",
                );
                ok = false;
            }
            limits.push((
                LimitModel {
                    max,
                    window_millis,
                    algorithm,
                },
                span,
            ));
        } else {
            ok = false;
        }
    }

    let identity = shared(stack, |a| &a.identity, "identity", cx, &mut ok).cloned();
    let fail = shared(stack, |a| &a.fail, "fail", cx, &mut ok).copied();
    let shadow = shared(stack, |a| &a.shadow, "shadow", cx, &mut ok).copied();

    if !ok {
        return None;
    }
    let fail = fail.unwrap_or_else(|| default_fail(methods));
    Some(PolicyModel::Limited {
        limits: limits.into_iter().map(|(l, _)| l).collect(),
        identity,
        fail,
        shadow: shadow.unwrap_or(false),
    })
}

use crate::args::Slot;

/// A key every stacked limit shares: it may be written on any of them, and where it is
/// written more than once, the values must agree.
fn shared<'a, T: PartialEq + 'a>(
    stack: &'a [Args],
    slot: impl Fn(&'a Args) -> &'a Slot<T>,
    key: &str,
    cx: &mut Ctxt,
    ok: &mut bool,
) -> Option<&'a T> {
    let mut first: Option<&'a T> = None;
    for args in stack {
        match slot(args) {
            Slot::Valid(value, span) => match first {
                Some(existing) if existing != value => {
                    cx.error(
                        *span,
                        format!("stacked limits share one `{key}`, and this one differs from an earlier `#[rate_limit]`; every limit of a route counts the same client in one Redis Cluster slot, so write `{key}` once"),
                    );
                    *ok = false;
                }
                Some(_) => {}
                None => first = Some(value),
            },
            Slot::Invalid => *ok = false,
            Slot::Absent => {}
        }
    }
    first
}

/// `open` when every method is safe (`GET`, `HEAD`, `OPTIONS`), `closed` otherwise.
fn default_fail(methods: &[String]) -> FailMode {
    if !methods.is_empty()
        && methods
            .iter()
            .all(|m| matches!(m.as_str(), "GET" | "HEAD" | "OPTIONS"))
    {
        FailMode::Open
    } else {
        FailMode::Closed
    }
}
