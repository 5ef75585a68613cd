//! Validate stage: checks one handler's stack of `#[rate_limit]` attributes against each
//! other and against its route, and builds the declaration to expand.

use ratelimit_grammar::{check_limit, Key, LimitProblem, MAX_STACKED};

use crate::{
    args::{Algorithm, Args, Count, FailMode, IdentityPart, Slot},
    ctxt::Ctxt,
};

pub(crate) struct LimitModel {
    pub(crate) max: u32,
    pub(crate) window_millis: u64,
    pub(crate) algorithm: Algorithm,
    pub(crate) count: Count,
    /// `block`: how long a client stays refused once this limit refuses it.
    pub(crate) block_millis: Option<u64>,
    /// The limit's own identity, when it is not the route's.
    pub(crate) identity: Option<Vec<IdentityPart>>,
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
    // `exempt` written, even if misspelled (`exemt`) or invalid: the route meant to be exempt.
    if let Some(exempt) = stack.iter().find(|a| !a.exempt.is_absent()) {
        // `crate` says where the runtime is, not what the route's limit is.
        let policy_keys = || exempt.keys.iter().filter(|k| k.name != Key::Crate);
        for key in policy_keys().filter(|k| k.name != Key::Exempt) {
            let name = key.name.name();
            let why = match key.name {
                Key::Block => " (`block` locks a client out once a limit refuses it, and an exempt route has no limit)",
                Key::Count => " (`count` says which requests use a limit's budget, and an exempt route has no limit)",
                _ => "",
            };
            cx.error(
                key.span,
                format!("`exempt` stands alone: an exempt route has no `{name}`{why}; remove `{name}` or remove `exempt`"),
            );
        }
        if stack.len() > 1 {
            let message = "an exempt route cannot also stack `#[rate_limit]` declarations; keep either the exemption or the limits";
            match exempt.key(Key::Exempt) {
                Some(key) => cx.error(key.span, message),
                None => exempt.error(cx, message),
            }
        }
        return match &exempt.exempt {
            Slot::Valid(reason, _) if policy_keys().count() == 1 && stack.len() == 1 => {
                Some(PolicyModel::Exempt(reason.clone()))
            }
            _ => None,
        };
    }

    if stack.len() > MAX_STACKED {
        stack[MAX_STACKED].error(
            cx,
            format!("a route may stack at most {MAX_STACKED} `#[rate_limit]` declarations"),
        );
        ok = false;
    }

    let mut limits: Vec<(LimitModel, &Args)> = Vec::new();
    for args in stack {
        let lockout = [
            "",
            " (`block` locks a client out once this limit refuses it, so it needs the limit)",
        ];
        let lockout = lockout[usize::from(!args.block.is_absent())];
        match (args.limit.is_absent(), args.window.is_absent()) {
            (true, true) => args.error(
                cx,
                format!("missing `limit` and `window`{lockout}: how many requests are allowed over what duration, e.g. `#[rate_limit(limit = 10, window = \"5m\")]` (or `#[rate_limit(exempt = \"<reason>\")]` for a route that needs no limit)"),
            ),
            (true, false) => args.error(
                cx,
                format!("missing `limit`{lockout}: how many requests the window allows, e.g. `limit = 10` (or `exempt = \"<reason>\"` for a route that needs no limit)"),
            ),
            (false, true) => args.error(
                cx,
                format!("missing `window`{lockout}: the duration the limit counts over, e.g. `window = \"5m\"`"),
            ),
            (false, false) => {}
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
            if let Err(problem @ LimitProblem::SlidingLogTooHigh) =
                check_limit(max, 1, Algorithm::SlidingLog)
            {
                cx.error(span, problem.message(max, 1, ""));
                ok = false;
            }
        }
        if let (Some((&max, limit_span)), Some((window, window_span))) =
            (args.limit.valid(), args.window.valid())
        {
            let window_millis = window.millis;
            match check_limit(max, window_millis, algorithm) {
                // Reported above, with or without a window.
                Ok(()) | Err(LimitProblem::SlidingLogTooHigh) => {}
                Err(problem) => {
                    cx.error(
                        limit_span,
                        problem.message(max, window_millis, &window.text),
                    );
                    ok = false;
                }
            }
            if let Some((earlier, earlier_args)) = limits
                .iter()
                .find(|(l, _)| l.algorithm == algorithm && l.window_millis == window_millis)
            {
                let earlier_window = earlier_args
                    .window
                    .valid()
                    .map_or_else(String::new, |(w, _)| w.text.clone());
                let algorithm = match args.algorithm {
                    Slot::Valid(..) => format!("`{}`", algorithm.as_str()),
                    _ => format!("the default `{}`", algorithm.as_str()),
                };
                cx.error(
                    window_span,
                    format!(
                        "`window = \"{}\"` repeats the window of an earlier `#[rate_limit]` (`limit = {}, window = \"{earlier_window}\"`) with the same algorithm, {algorithm}; two limits with the same algorithm and window would count in one Redis key, so keep the stricter one or change the window or the algorithm",
                        window.text,
                        earlier.max,
                    ),
                );
                ok = false;
            }
            let count = match &args.count {
                Slot::Valid(count, _) => *count,
                Slot::Invalid => {
                    ok = false;
                    Count::Requests
                }
                Slot::Absent => Count::Requests,
            };
            let block_millis = match &args.block {
                Slot::Valid(block, _) => Some(block.millis),
                Slot::Invalid => {
                    ok = false;
                    None
                }
                Slot::Absent => None,
            };
            limits.push((
                LimitModel {
                    max,
                    window_millis,
                    algorithm,
                    count,
                    block_millis,
                    identity: None,
                },
                args,
            ));
        } else {
            ok = false;
        }
    }

    // One identity written (on any of the stacked limits) is the route's; different ones make
    // each limit count its own, and then every limit names its own.
    let written: Vec<&Vec<IdentityPart>> = stack
        .iter()
        .filter_map(|a| a.identity.valid().map(|(v, _)| v))
        .collect();
    let differ = written.iter().any(|w| *w != written[0]);
    if stack.iter().any(|a| matches!(a.identity, Slot::Invalid)) {
        ok = false;
    }
    let identity = if differ {
        for args in stack.iter().filter(|a| a.identity.is_absent()) {
            args.error(
                cx,
                "missing `identity`: the limits stacked here count different identities, so each names its own (`identity = \"ip\"` on one, `identity = \"username\"` on another)",
            );
            ok = false;
        }
        // The first limit's is the route's; the others that differ carry their own.
        let first = stack
            .first()
            .and_then(|a| a.identity.valid())
            .map(|(v, _)| v.clone());
        for (limit, args) in &mut limits {
            if let Some((own, _)) = args.identity.valid() {
                if Some(own) != first.as_ref() {
                    limit.identity = Some(own.clone());
                }
            }
        }
        first
    } else {
        written.first().map(|w| (*w).clone())
    };
    let fail = shared(
        stack,
        |a| &a.fail,
        Key::Fail,
        "a route either admits or refuses requests while Redis is unreachable",
        cx,
        &mut ok,
    )
    .copied();
    let shadow = shared(
        stack,
        |a| &a.shadow,
        Key::Shadow,
        "a route's limits are enforced or only logged together",
        cx,
        &mut ok,
    )
    .copied();

    let shadow = shadow.unwrap_or(false);
    if shadow {
        for (_, span) in stack.iter().filter_map(|a| a.block.valid()) {
            cx.error(
                span,
                "`block` cannot go with `shadow = true`: a shadow limit never refuses, so it never locks a client out; remove one of them",
            );
            ok = false;
        }
    }
    if let (true, Some(fail @ (FailMode::Closed | FailMode::Local))) = (shadow, fail) {
        if let Some((_, span)) = stack.iter().find_map(|a| a.fail.valid()) {
            cx.error(
                span,
                format!("`fail = \"{fail}\"` cannot go with `shadow = true`: a shadow limit never rejects, so it passes requests during a Redis outage too; remove one of them"),
            );
        }
        ok = false;
    }
    if !ok {
        return None;
    }
    // A shadow limit never rejects, so it fails open whatever the methods.
    let fail = match (fail, shadow) {
        (Some(fail), _) => fail,
        (None, true) => FailMode::Open,
        (None, false) => FailMode::default_for_methods(methods.iter().map(String::as_str)),
    };
    Some(PolicyModel::Limited {
        limits: limits.into_iter().map(|(l, _)| l).collect(),
        identity,
        fail,
        shadow,
    })
}

/// A key every stacked limit shares: it may be written on any of them, and where it is
/// written more than once, the values must agree. `why` says why they are shared.
fn shared<'a, T: PartialEq + 'a>(
    stack: &'a [Args],
    slot: impl Fn(&'a Args) -> &'a Slot<T>,
    key: Key,
    why: &str,
    cx: &mut Ctxt,
    ok: &mut bool,
) -> Option<&'a T> {
    let name = key.name();
    let mut first: Option<(&'a T, &'a Args)> = None;
    for args in stack {
        match slot(args) {
            Slot::Valid(value, span) => match first {
                Some((existing, earlier)) if existing != value => {
                    let written =
                        |args: &Args| args.key(key).map_or_else(String::new, |k| k.value.clone());
                    cx.error(
                        *span,
                        format!(
                            "`{name} = {}` differs from `{name} = {}` on an earlier `#[rate_limit]`; stacked limits share one `{name}` ({why}), so write `{name}` once",
                            written(args),
                            written(earlier),
                        ),
                    );
                    *ok = false;
                }
                Some(_) => {}
                None => first = Some((value, args)),
            },
            Slot::Invalid => *ok = false,
            Slot::Absent => {}
        }
    }
    first.map(|(value, _)| value)
}
