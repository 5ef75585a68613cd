//! Validate stage: checks one handler's stack of `#[rate_limit]` attributes against each
//! other and against its route, and builds the declaration to expand.

use ratelimit_grammar::{check_cost, check_limit, messages, Key, LimitProblem, MAX_STACKED};

use crate::{
    args::{Algorithm, Args, Count, FailMode, IdentityPart, RouteHeaders, Slot},
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
    /// The units each request counts.
    pub(crate) cost: u32,
    /// The shared budget this limit is (its constant's path): its limit, window, algorithm
    /// and identity are the budget's.
    pub(crate) budget: Option<syn::Path>,
    /// A concurrency limit: `max` requests in flight, each a lease of `window_millis`.
    pub(crate) concurrency: bool,
}

/// One stack of limits: the route's default, or one tier's.
pub(crate) struct StackModel {
    pub(crate) limits: Vec<LimitModel>,
    /// `None`: the default identity (user id, else ip).
    pub(crate) identity: Option<Vec<IdentityPart>>,
}

pub(crate) enum PolicyModel {
    Exempt(String),
    Limited {
        /// The limits of requests of no tier, or of a tier without limits of its own.
        default: StackModel,
        /// Each tier's limits, in the order the tiers are first written.
        tiers: Vec<(String, StackModel)>,
        fail: FailMode,
        shadow: bool,
        /// Whether the route's answers carry the rate-limit headers.
        headers: RouteHeaders,
        /// `None`: the route follows the App's shadow switch.
        enforce: Option<bool>,
        /// `wait`, in milliseconds: how long a request over the route's rate limits waits
        /// for its turn.
        wait: Option<u64>,
        /// `ban`: how many refusals within which window ban a client for how long.
        ban: Option<ratelimit_grammar::BanSpec>,
        /// `sync`, in milliseconds: how often an instance deciding from a local share
        /// reconciles it with the store.
        sync: Option<u64>,
    },
}

/// The keys the whole route shares: written once, on its default stack.
const ROUTE_WIDE: [Key; 7] = [
    Key::Fail,
    Key::Shadow,
    Key::Headers,
    Key::Enforce,
    Key::Wait,
    Key::Ban,
    Key::Sync,
];

/// Checks the stack; errors go to `cx`. Returns `None` when anything was wrong.
pub(crate) fn validate(stack: &[Args], methods: &[String], cx: &mut Ctxt) -> Option<PolicyModel> {
    let mut ok = true;
    // `exempt` written, even if misspelled (`exemt`) or invalid: the route meant to be exempt.
    if let Some(exempt) = stack.iter().find(|a| !a.exempt.is_absent()) {
        // `crate` says where the runtime is, not what the route's limit is.
        let policy_keys = || exempt.keys.iter().filter(|k| k.name != Key::Crate);
        for key in policy_keys().filter(|k| k.name != Key::Exempt) {
            cx.error(key.span, messages::exempt_stands_alone(key.name));
        }
        if stack.len() > 1 {
            let message = messages::exempt_stacked();
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

    // Attributes without `tier` are the route's default stack; those naming one tier are
    // that tier's. A `tier` written wrong (misspelled, or an invalid name) still meant one:
    // such an attribute is checked alone, and counts in no stack.
    let mut default: Vec<&Args> = Vec::new();
    let mut tiers: Vec<(String, Vec<&Args>)> = Vec::new();
    let mut unnamed: Vec<&Args> = Vec::new();
    for args in stack {
        match &args.tier {
            Slot::Absent => default.push(args),
            Slot::Invalid => unnamed.push(args),
            Slot::Valid(name, _) => match tiers.iter_mut().find(|(n, _)| n == name) {
                Some((_, stacked)) => stacked.push(args),
                None => tiers.push((name.clone(), vec![args])),
            },
        }
    }
    let tiered = || stack.iter().filter(|a| !a.tier.is_absent());
    // Reported on `tier` as written: a misspelled `tier` is reported as such, and no more.
    if default.is_empty() {
        if let Some(key) = stack.iter().find_map(|a| a.key(Key::Tier)) {
            cx.error(key.span, messages::tier_without_default());
        }
        ok = false;
    }
    for args in tiered() {
        let tier = match &args.tier {
            Slot::Valid(name, _) => name.clone(),
            _ => args
                .key(Key::Tier)
                .map_or_else(String::new, |k| k.value.trim_matches('"').to_owned()),
        };
        for key in ROUTE_WIDE.iter().filter_map(|name| args.key(*name)) {
            cx.error(key.span, messages::route_wide_on_tier(key.name, &tier));
            ok = false;
        }
    }
    if !unnamed.is_empty() {
        ok = false;
        for args in unnamed {
            let _ = validate_stack(&[args], cx, &mut ok);
        }
    }

    let default_stack = validate_stack(&default, cx, &mut ok);
    let tier_stacks: Vec<(String, StackModel)> = tiers
        .iter()
        .map(|(name, stacked)| (name.clone(), validate_stack(stacked, cx, &mut ok)))
        .collect();
    let fail = shared(&default, |a| &a.fail, Key::Fail, cx, &mut ok).copied();
    let shadow = shared(&default, |a| &a.shadow, Key::Shadow, cx, &mut ok).copied();
    let headers = shared(&default, |a| &a.headers, Key::Headers, cx, &mut ok)
        .copied()
        .unwrap_or_default();
    let enforce = shared(&default, |a| &a.enforce, Key::Enforce, cx, &mut ok).copied();

    let wait = shared(&default, |a| &a.wait, Key::Wait, cx, &mut ok).map(|w| w.millis);
    if wait.is_some() {
        ok &= refuse_beside_wait(stack, cx);
        // One identity in all the limits of each stack (a tier's may be its own).
        let mixed = std::iter::once(&default_stack)
            .chain(tier_stacks.iter().map(|(_, tier)| tier))
            .any(|stack| stack.limits.iter().any(|limit| limit.identity.is_some()));
        if mixed {
            if let Some(key) = default.iter().find_map(|a| a.key(Key::Wait)) {
                cx.error(key.span, ratelimit_grammar::not_with_wait(Key::Identity));
            }
            ok = false;
        }
    }

    let ban = shared(&default, |a| &a.ban, Key::Ban, cx, &mut ok).copied();
    if ban.is_some() {
        // What never refuses has nothing to count toward a ban, on any attribute of the
        // stack.
        for args in stack {
            let found = [
                (Key::Wait, !args.wait.is_absent()),
                (Key::Shadow, matches!(args.shadow, Slot::Valid(true, _))),
            ];
            for (name, _) in found.iter().filter(|(_, found)| *found) {
                if let Some(key) = args.key(*name) {
                    cx.error(key.span, ratelimit_grammar::not_with_ban(*name));
                    ok = false;
                }
            }
        }
    }

    let sync = shared(&default, |a| &a.sync, Key::Sync, cx, &mut ok).map(|s| s.millis);
    if let Some(sync_millis) = sync {
        let stacks = std::iter::once(&default_stack).chain(tier_stacks.iter().map(|(_, t)| t));
        ok &= refuse_beside_sync(stack, &default, stacks, sync_millis, cx);
    }

    let shadow = shadow.unwrap_or(false);
    if shadow {
        // Every tier's limits are in shadow with the route: none locks a client out.
        for (_, span) in stack.iter().filter_map(|a| a.block.valid()) {
            cx.error(span, messages::block_with_shadow());
            ok = false;
        }
    }
    if shadow {
        for (_, span) in default.iter().filter_map(|a| a.enforce.valid()) {
            cx.error(span, messages::enforce_with_shadow());
            ok = false;
        }
    }
    if let (true, Some(fail @ (FailMode::Closed | FailMode::Local))) = (shadow, fail) {
        if let Some((_, span)) = default.iter().find_map(|a| a.fail.valid()) {
            cx.error(span, messages::fail_with_shadow(fail));
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
    // A tier that names no identity counts whom the route's default counts.
    let tiers = tier_stacks
        .into_iter()
        .map(|(name, mut tier)| {
            if tier.identity.is_none() {
                tier.identity.clone_from(&default_stack.identity);
            }
            (name, tier)
        })
        .collect();
    Some(PolicyModel::Limited {
        default: default_stack,
        tiers,
        fail,
        shadow,
        headers,
        enforce,
        wait,
        ban,
        sync,
    })
}

/// On a route that syncs, what a share cannot decide, on any attribute of the stack (tiers
/// too): reported on each key; and every stack one limit a share of `sync_millis` suits,
/// reported on `sync`. Answers whether all was well.
fn refuse_beside_sync<'a>(
    stack: &[Args],
    default: &[&Args],
    stacks: impl Iterator<Item = &'a StackModel>,
    sync_millis: u64,
    cx: &mut Ctxt,
) -> bool {
    let mut ok = true;
    for args in stack {
        let failures = matches!(args.count, Slot::Valid(Count::Failures, _));
        let found = ratelimit_grammar::NOT_WITH_SYNC
            .iter()
            .copied()
            .chain(failures.then_some(Key::Count));
        for name in found {
            if let Some(key) = args.key(name) {
                cx.error(key.span, ratelimit_grammar::not_with_sync(name));
                ok = false;
            }
        }
    }
    let Some(key) = default.iter().find_map(|a| a.key(Key::Sync)) else {
        return ok;
    };
    for model in stacks {
        match model.limits.as_slice() {
            [limit] => {
                let checked = ratelimit_grammar::check_sync(
                    limit.max,
                    limit.window_millis,
                    sync_millis,
                    limit.algorithm,
                );
                if let Err(message) = checked {
                    cx.error(key.span, message);
                    ok = false;
                }
            }
            _ => {
                cx.error(key.span, ratelimit_grammar::sync_stacked());
                ok = false;
            }
        }
    }
    ok
}

/// On a route that waits, what cannot wait, on any attribute of the stack (tiers too):
/// reported on each key. Answers whether there was none.
fn refuse_beside_wait(stack: &[Args], cx: &mut Ctxt) -> bool {
    let mut ok = true;
    for args in stack {
        let found = [
            (Key::Block, !args.block.is_absent()),
            (
                Key::Count,
                matches!(args.count, Slot::Valid(Count::Failures, _)),
            ),
            (Key::Concurrency, !args.concurrency.is_absent()),
            (Key::Shadow, matches!(args.shadow, Slot::Valid(true, _))),
            (Key::Budget, !args.budget.is_absent()),
            (Key::CostFrom, !args.cost_from.is_absent()),
        ];
        for (name, _) in found.iter().filter(|(_, found)| *found) {
            if let Some(key) = args.key(*name) {
                cx.error(key.span, ratelimit_grammar::not_with_wait(*name));
                ok = false;
            }
        }
    }
    ok
}

/// Checks one stack (the route's default, or one tier's) as a handler's stack: each limit,
/// at most [`MAX_STACKED`], no two with one algorithm and window, and either one identity or
/// one on each. Sets `ok` to `false` on any problem.
fn validate_stack(stack: &[&Args], cx: &mut Ctxt, ok: &mut bool) -> StackModel {
    if stack.len() > MAX_STACKED {
        stack[MAX_STACKED].error(cx, messages::too_many_stacked());
        *ok = false;
    }

    let mut limits: Vec<(LimitModel, &Args)> = Vec::new();
    for &args in stack {
        // `concurrency` written, even if misspelled (`concurency`) or invalid.
        let concurrency = !args.concurrency.is_absent();
        if let Some(key) = args.key(Key::Lease).filter(|_| !concurrency) {
            cx.error(key.span, ratelimit_grammar::lease_without_concurrency());
            *ok = false;
        }
        if concurrency {
            *ok &= concurrency_limit(args, &mut limits, cx);
            continue;
        }
        if !args.budget.is_absent() {
            *ok &= budget_limit(args, &mut limits, cx);
            continue;
        }
        if let Some(message) = messages::missing_limit_or_window(
            !args.limit.is_absent(),
            !args.window.is_absent(),
            !args.block.is_absent(),
        ) {
            args.error(cx, message);
        }
        let algorithm = match &args.algorithm {
            Slot::Valid(algorithm, _) => *algorithm,
            Slot::Invalid => {
                *ok = false;
                Algorithm::SlidingWindow
            }
            Slot::Absent => Algorithm::SlidingWindow,
        };
        if let (Algorithm::SlidingLog, Some((&max, span))) = (algorithm, args.limit.valid()) {
            if let Err(problem @ LimitProblem::SlidingLogTooHigh) =
                check_limit(max, 1, Algorithm::SlidingLog)
            {
                cx.error(span, problem.message(max, 1, ""));
                *ok = false;
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
                    *ok = false;
                }
            }
            if let Some((earlier, earlier_args)) = limits.iter().find(|(l, _)| {
                !l.concurrency && l.algorithm == algorithm && l.window_millis == window_millis
            }) {
                let earlier_window = earlier_args
                    .window
                    .valid()
                    .map_or_else(String::new, |(w, _)| w.text.clone());
                cx.error(
                    window_span,
                    messages::repeated_window(
                        &window.text,
                        earlier.max,
                        &earlier_window,
                        algorithm,
                        matches!(args.algorithm, Slot::Valid(..)),
                    ),
                );
                *ok = false;
            }
            let count = match &args.count {
                Slot::Valid(count, _) => *count,
                Slot::Invalid => {
                    *ok = false;
                    Count::Requests
                }
                Slot::Absent => Count::Requests,
            };
            let block_millis = match &args.block {
                Slot::Valid(block, _) => Some(block.millis),
                Slot::Invalid => {
                    *ok = false;
                    None
                }
                Slot::Absent => None,
            };
            let cost = match &args.cost {
                Slot::Valid(cost, span) => {
                    if let Err(problem) = check_cost(*cost, max) {
                        cx.error(*span, problem.message(*cost, max));
                        *ok = false;
                    }
                    *cost
                }
                Slot::Invalid => {
                    *ok = false;
                    1
                }
                Slot::Absent => 1,
            };
            limits.push((
                LimitModel {
                    max,
                    window_millis,
                    algorithm,
                    count,
                    block_millis,
                    identity: None,
                    cost,
                    budget: None,
                    concurrency: false,
                },
                args,
            ));
        } else {
            *ok = false;
        }
    }

    // One identity written (on any of the stacked limits) is the stack's; different ones make
    // each limit count its own, and then every limit names its own. A shared budget counts by
    // its own, declared with it.
    let own: Vec<&Args> = stack
        .iter()
        .copied()
        .filter(|a| a.budget.is_absent())
        .collect();
    let written: Vec<&Vec<IdentityPart>> = own
        .iter()
        .filter_map(|a| a.identity.valid().map(|(v, _)| v))
        .collect();
    let differ = written.iter().any(|w| *w != written[0]);
    if stack.iter().any(|a| matches!(a.identity, Slot::Invalid)) {
        *ok = false;
    }
    let identity = if differ {
        for args in own.iter().filter(|a| a.identity.is_absent()) {
            args.error(cx, messages::missing_identity_in_mixed_stack());
            *ok = false;
        }
        // The first limit's is the stack's; the others that differ carry their own.
        let first = own
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
    StackModel {
        limits: limits.into_iter().map(|(l, _)| l).collect(),
        identity,
    }
}

/// The limit of an attribute that names a shared budget (`budget = API`, and `cost` if a
/// request weighs more): the budget's, so no key of a limit may go beside it. Whether it
/// was right.
fn budget_limit<'a>(
    args: &'a Args,
    limits: &mut Vec<(LimitModel, &'a Args)>,
    cx: &mut Ctxt,
) -> bool {
    let mut ok = true;
    for key in args.keys.iter().filter(|k| {
        matches!(
            k.name,
            Key::Limit | Key::Window | Key::Algorithm | Key::Identity | Key::Count | Key::Block
        )
    }) {
        cx.error(key.span, messages::budget_stands_alone(key.name));
        ok = false;
    }
    let Slot::Valid(path, span) = &args.budget else {
        return false;
    };
    let written = quote::quote!(#path).to_string().replace(' ', "");
    if limits.iter().any(|(l, _)| {
        l.budget
            .as_ref()
            .is_some_and(|p| quote::quote!(#p).to_string().replace(' ', "") == written)
    }) {
        cx.error(*span, messages::budget_twice(&written));
        ok = false;
    }
    let cost = match &args.cost {
        Slot::Valid(cost, _) => *cost,
        Slot::Invalid => {
            ok = false;
            1
        }
        Slot::Absent => 1,
    };
    limits.push((
        LimitModel {
            max: 0,
            window_millis: 0,
            algorithm: Algorithm::SlidingWindow,
            count: Count::Requests,
            block_millis: None,
            identity: None,
            cost,
            budget: Some(path.clone()),
            concurrency: false,
        },
        args,
    ));
    ok
}

/// The limit of an attribute with `concurrency = N` (and `lease`): a limit of its own, so
/// no key of a rate limit may go beside it, and one per stack. Whether it was right.
fn concurrency_limit<'a>(
    args: &'a Args,
    limits: &mut Vec<(LimitModel, &'a Args)>,
    cx: &mut Ctxt,
) -> bool {
    let mut ok = true;
    for key in args
        .keys
        .iter()
        .filter(|k| ratelimit_grammar::NOT_WITH_CONCURRENCY.contains(&k.name))
    {
        cx.error(key.span, ratelimit_grammar::not_with_concurrency(key.name));
        ok = false;
    }
    let Slot::Valid(max, span) = &args.concurrency else {
        return false;
    };
    if limits.iter().any(|(l, _)| l.concurrency) {
        cx.error(*span, ratelimit_grammar::concurrency_twice());
        ok = false;
    }
    let window_millis = match &args.lease {
        Slot::Valid(lease, _) => lease.millis,
        Slot::Invalid => return false,
        Slot::Absent => ratelimit_grammar::DEFAULT_LEASE_MILLIS,
    };
    limits.push((
        LimitModel {
            max: *max,
            window_millis,
            algorithm: Algorithm::SlidingLog,
            count: Count::Requests,
            block_millis: None,
            identity: None,
            cost: 1,
            budget: None,
            concurrency: true,
        },
        args,
    ));
    ok
}

/// A key every stacked limit shares: it may be written on any of them, and where it is
/// written more than once, the values must agree.
fn shared<'a, T: PartialEq + 'a>(
    stack: &[&'a Args],
    slot: impl Fn(&'a Args) -> &'a Slot<T>,
    key: Key,
    cx: &mut Ctxt,
    ok: &mut bool,
) -> Option<&'a T> {
    let mut first: Option<(&'a T, &'a Args)> = None;
    for &args in stack {
        match slot(args) {
            Slot::Valid(value, span) => match first {
                Some((existing, earlier)) if existing != value => {
                    let written =
                        |args: &Args| args.key(key).map_or_else(String::new, |k| k.value.clone());
                    cx.error(
                        *span,
                        messages::shared_key_differs(key, &written(args), &written(earlier)),
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
