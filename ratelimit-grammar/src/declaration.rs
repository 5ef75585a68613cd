//! A declaration written as text rather than in Rust: the inside of `#[rate_limit(...)]`
//! (`limit = 5, window = "5m", algorithm = "sliding_log"`), read at run time (overrides), with
//! the attribute's rules and messages. Stacked declarations are separated by `;`.
//!
//! ```
//! use ratelimit_grammar::{parse_stack, Algorithm};
//!
//! let stack = parse_stack(r#"limit = 5, window = "5m", algorithm = "sliding_log""#).unwrap();
//! assert_eq!(stack[0].limit, Some(5));
//! assert_eq!(stack[0].window, Some(300_000));
//! assert_eq!(stack[0].algorithm, Some(Algorithm::SlidingLog));
//!
//! let errors = parse_stack(r#"limt = 5, window = "5m""#).unwrap_err();
//! assert!(errors[0].contains("did you mean `limit`?"), "{errors:?}");
//! ```

use crate::{
    check_cost, check_limit, identity::parse_identity, key::Key, limit::MAX_STACKED, messages,
    parse_block, parse_window, Algorithm, Count, FailMode, LimitProblem, ParsedPart, RouteHeaders,
};

/// One declaration as written: each key's value, when it was written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Declaration {
    /// `limit`
    pub limit: Option<u32>,
    /// `window`, in milliseconds.
    pub window: Option<u64>,
    /// `window` as written (`"5m"`), for messages.
    pub window_text: Option<String>,
    /// `identity`
    pub identity: Option<Vec<ParsedPart>>,
    /// `algorithm`
    pub algorithm: Option<Algorithm>,
    /// `fail`
    pub fail: Option<FailMode>,
    /// `count`
    pub count: Option<Count>,
    /// `block`, in milliseconds.
    pub block: Option<u64>,
    /// `cost`: the units each request counts.
    pub cost: Option<u32>,
    /// `shadow`
    pub shadow: Option<bool>,
    /// `headers`
    pub headers: Option<RouteHeaders>,
    /// `enforce`
    pub enforce: Option<bool>,
    /// `tier`: the tier whose limits this declaration is (none: the route's default).
    pub tier: Option<String>,
    /// `exempt`: the reason.
    pub exempt: Option<String>,
    /// `budget`: the name of the shared budget this declaration stacks (`budget = API`),
    /// with `cost` the only other key it takes.
    pub budget: Option<String>,
    /// `concurrency`: at most this many requests of one identity in flight (a limit of its
    /// own: no `limit`, `window`, `algorithm`, `count`, `block`, `cost` or `budget` beside it).
    pub concurrency: Option<u32>,
    /// `lease`, in milliseconds (with `concurrency` only).
    pub lease: Option<u64>,
    /// `wait`, in milliseconds: how long a request over the route's rate limits waits for
    /// its turn (route-wide, as `fail`).
    pub wait: Option<u64>,
    /// `ban`: how many refusals within which window ban a client for how long (route-wide,
    /// as `fail`).
    pub ban: Option<crate::BanSpec>,
    /// `sync`, in milliseconds: how often an instance deciding from a local share of the
    /// budget reconciles it with the store (route-wide, as `fail`).
    pub sync: Option<u64>,
}

/// A value as the lexer reads it.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Str(String),
    /// Digits, with an optional leading `-` or a fraction: kept as written.
    Number(String),
    Word(String),
}

impl Value {
    fn written(&self) -> String {
        match self {
            Value::Str(text) => format!("{text:?}"),
            Value::Number(text) | Value::Word(text) => text.clone(),
        }
    }
}

/// Splits `text` into declarations at every `;` outside a string.
fn split_outside_strings(text: &str, separator: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut in_string, mut escaped) = (0, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            c if c == separator && !in_string => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// Reads one value: a string (with `\"` and `\\` escapes), a number or a word.
fn lex_value(text: &str) -> Result<Value, String> {
    let text = text.trim();
    if let Some(rest) = text.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(escaped @ ('"' | '\\')) => value.push(escaped),
                    other => {
                        return Err(format!(
                            "`\\{}` is no escape in a string here; write `\\\"` or `\\\\`",
                            other.map(String::from).unwrap_or_default()
                        ))
                    }
                },
                '"' => {
                    let after = chars.as_str().trim();
                    if !after.is_empty() {
                        return Err(format!(
                            "unexpected `{after}` after the string \"{value}\"; separate keys with `,`"
                        ));
                    }
                    return Ok(Value::Str(value));
                }
                c => value.push(c),
            }
        }
        return Err(format!("the string `\"{rest}` is not closed with `\"`"));
    }
    if text.is_empty() {
        return Err(String::new());
    }
    let number = text.strip_prefix('-').unwrap_or(text);
    if number.starts_with(|c: char| c.is_ascii_digit()) {
        return Ok(Value::Number(text.to_owned()));
    }
    Ok(Value::Word(text.to_owned()))
}

/// Parses one declaration: `key = value` pairs separated by `,`.
///
/// # Errors
///
/// Every problem found, each a message the attribute would give.
pub fn parse_declaration(text: &str) -> Result<Declaration, Vec<String>> {
    let mut declaration = Declaration::default();
    let mut errors = Vec::new();
    let mut written: Vec<Key> = Vec::new();
    let mut misspelled: Vec<Key> = Vec::new();
    for pair in split_outside_strings(text, ',') {
        let pair = pair.trim();
        if pair.is_empty() {
            continue;
        }
        let Some((name, value)) = pair.split_once('=') else {
            match pair.split_once(':') {
                Some((name, _)) if Key::from_name(name.trim()).is_some() => {
                    let key = Key::from_name(name.trim()).expect("checked");
                    errors.push(format!(
                        "write `{} = ..` with `=`, not `:`; e.g. {}",
                        key.name(),
                        key.example()
                    ));
                }
                _ => match Key::from_name(pair) {
                    Some(key) => errors.push(messages::needs_value(key)),
                    None if pair.starts_with(|c: char| c == '"' || c.is_ascii_digit()) => {
                        errors.push(format!("`#[rate_limit]` takes `key = value` pairs, not a bare `{pair}`; e.g. `#[rate_limit(limit = 10, window = \"1m\")]`"));
                    }
                    None => errors.push(Key::unknown_message(pair)),
                },
            }
            continue;
        };
        let name = name.trim();
        let Some(key) = Key::from_name(name) else {
            errors.push(Key::unknown_message(name));
            // A near miss stands for the key it misspells: no "missing `limit`" after `limt`.
            if let Some(meant) = Key::closest(name).filter(|k| !written.contains(k)) {
                misspelled.push(meant);
            }
            continue;
        };
        if written.contains(&key) {
            errors.push(messages::set_twice(key));
            continue;
        }
        written.push(key);
        let value = match lex_value(value) {
            Ok(value) => value,
            Err(message) if message.is_empty() => {
                errors.push(messages::needs_value(key));
                continue;
            }
            Err(message) => {
                errors.push(message);
                continue;
            }
        };
        if let Err(message) = set(&mut declaration, key, value) {
            errors.extend(message);
        }
    }
    errors.extend(check_one(&declaration, &written, &misspelled));
    if errors.is_empty() {
        Ok(declaration)
    } else {
        Err(errors)
    }
}

/// A string value, or the message for another.
fn string(key: Key, value: Value) -> Result<String, Vec<String>> {
    match value {
        Value::Str(text) => Ok(text),
        Value::Number(digits) if matches!(key, Key::Window | Key::Block | Key::Lease) => {
            if digits.ends_with(|c: char| c.is_ascii_digit()) {
                Err(vec![messages::duration_without_unit(key, &digits)])
            } else {
                let name = key.name();
                Err(vec![format!(
                    "`{name}` takes a string; write `{name} = \"{digits}\"`"
                )])
            }
        }
        _ => Err(vec![messages::takes_string(key)]),
    }
}

/// A bool value (`true`, `false`), or the message for another.
fn boolean(key: Key, value: Value) -> Result<bool, Vec<String>> {
    match value {
        Value::Word(word) if word == "true" || word == "false" => Ok(word == "true"),
        Value::Str(text) if text == "true" || text == "false" => {
            Err(vec![messages::bool_string(key, &text)])
        }
        other => Err(vec![messages::not_bool(key, &other.written())]),
    }
}

fn set(declaration: &mut Declaration, key: Key, value: Value) -> Result<(), Vec<String>> {
    let one = |message: String| vec![message];
    match key {
        Key::Limit => {
            declaration.limit = Some(match value {
                Value::Number(digits) => match digits.parse::<u64>() {
                    Ok(0) => return Err(one(messages::limit_zero().to_owned())),
                    Ok(n) => u32::try_from(n)
                        .map_err(|_| one(messages::limit_too_large(&digits)))?,
                    Err(_) if digits.chars().all(|c| c.is_ascii_digit()) => {
                        return Err(one(messages::limit_too_large(&digits)))
                    }
                    Err(_) => return Err(one(messages::limit_not_positive(&digits))),
                },
                Value::Str(text) => return Err(one(messages::limit_string(&text))),
                Value::Word(_) => return Err(one(messages::limit_not_literal().to_owned())),
            });
        }
        Key::Cost => {
            declaration.cost = Some(match value {
                Value::Number(digits) => match digits.parse::<u32>() {
                    Ok(0) => {
                        return Err(one(crate::CostProblem::Zero.message(0, 0)));
                    }
                    Ok(n) => n,
                    Err(_) => return Err(one(messages::cost_not_positive(&digits))),
                },
                other => return Err(one(messages::cost_not_positive(&other.written()))),
            });
        }
        Key::Window => {
            let text = string(key, value)?;
            declaration.window = Some(parse_window(&text).map_err(one)?);
            declaration.window_text = Some(text);
        }
        Key::Block => declaration.block = Some(parse_block(&string(key, value)?).map_err(one)?),
        Key::Identity => declaration.identity = Some(parse_identity(&string(key, value)?)?),
        Key::Algorithm => {
            declaration.algorithm = Some(Algorithm::parse(&string(key, value)?).map_err(one)?);
        }
        Key::Fail => declaration.fail = Some(FailMode::parse(&string(key, value)?).map_err(one)?),
        Key::Count => declaration.count = Some(Count::parse(&string(key, value)?).map_err(one)?),
        Key::Headers => {
            declaration.headers = Some(RouteHeaders::parse(&string(key, value)?).map_err(one)?);
        }
        Key::Shadow => declaration.shadow = Some(boolean(key, value)?),
        Key::Enforce => declaration.enforce = Some(boolean(key, value)?),
        Key::Tier => {
            let name = string(key, value)?;
            crate::check_tier(&name).map_err(one)?;
            declaration.tier = Some(name);
        }
        Key::Exempt => {
            let reason = string(key, value)?;
            if reason.trim().is_empty() {
                return Err(one(messages::exempt_without_reason().to_owned()));
            }
            declaration.exempt = Some(reason);
        }
        Key::Crate => {
            return Err(one(
                "`crate` says where the attribute's expansion finds the runtime; a declaration read at run time has no expansion, so leave it out".to_owned(),
            ))
        }
        Key::Budget => {
            let name = match value {
                Value::Word(name) | Value::Str(name) => name,
                Value::Number(_) => return Err(one(messages::budget_not_a_name(&value.written()))),
            };
            crate::check_budget_name(&name).map_err(one)?;
            declaration.budget = Some(name);
        }
        Key::Concurrency => {
            declaration.concurrency = Some(match value {
                Value::Number(digits) => match digits.parse::<u64>() {
                    Ok(n) => crate::check_concurrency(n).map_err(one)?,
                    Err(_) => {
                        return Err(one(format!(
                            "`concurrency` must be a positive whole number of requests, e.g. `concurrency = 5`; found `{digits}`"
                        )))
                    }
                },
                other => {
                    return Err(one(format!(
                        "`concurrency` takes an integer, e.g. `concurrency = 5`; found `{}`",
                        other.written()
                    )))
                }
            });
        }
        Key::Lease => declaration.lease = Some(crate::parse_lease(&string(key, value)?).map_err(one)?),
        Key::Wait => declaration.wait = Some(crate::parse_wait(&string(key, value)?).map_err(one)?),
        Key::Ban => declaration.ban = Some(crate::parse_ban(&string(key, value)?).map_err(one)?),
        Key::Sync => declaration.sync = Some(crate::parse_sync(&string(key, value)?).map_err(one)?),
        Key::CostFrom => {
            return Err(one(
                "`cost_from` names a function of the program, which a declaration read at run time cannot reach; write a `cost`, or weigh the route's requests with `RateLimiter::cost_of`".to_owned(),
            ))
        }
    }
    Ok(())
}

/// The rules between the keys of one declaration.
/// `misspelled`: keys a near miss stood for, which count as written for what is missing.
fn check_one(declaration: &Declaration, written: &[Key], misspelled: &[Key]) -> Vec<String> {
    let mut errors = Vec::new();
    if declaration.exempt.is_some() || written.contains(&Key::Exempt) {
        for key in written
            .iter()
            .filter(|k| !matches!(k, Key::Exempt | Key::Crate))
        {
            errors.push(messages::exempt_stands_alone(*key));
        }
        return errors;
    }
    let present = |key: Key| written.contains(&key) || misspelled.contains(&key);
    if written.contains(&Key::Lease) && !present(Key::Concurrency) {
        errors.push(crate::lease_without_concurrency().to_owned());
    }
    if present(Key::Concurrency) {
        // A limit of its own: the keys of a rate limit do not go beside it.
        for key in written
            .iter()
            .filter(|k| crate::NOT_WITH_CONCURRENCY.contains(k))
        {
            errors.push(crate::not_with_concurrency(*key));
        }
    } else if declaration.budget.is_some() {
        // The budget's limit is its declaration's; the route-wide keys (`fail`, `shadow`,
        // `headers`, `enforce`) may go beside it, as in the attribute.
        for key in written.iter().filter(|k| {
            matches!(
                k,
                Key::Limit | Key::Window | Key::Algorithm | Key::Identity | Key::Count | Key::Block
            )
        }) {
            errors.push(messages::budget_stands_alone(*key));
        }
    } else if let Some(message) = messages::missing_limit_or_window(
        present(Key::Limit),
        present(Key::Window),
        written.contains(&Key::Block),
    ) {
        errors.push(message);
    }
    let algorithm = declaration.algorithm.unwrap_or(Algorithm::SlidingWindow);
    if let Some(max) = declaration.limit {
        match (declaration.window, check_limit(max, 1, algorithm)) {
            (_, Err(problem @ LimitProblem::SlidingLogTooHigh)) => {
                errors.push(problem.message(max, 1, ""));
            }
            (Some(window), _) => {
                if let Err(problem) = check_limit(max, window, algorithm) {
                    let text = declaration.window_text.as_deref().unwrap_or_default();
                    errors.push(problem.message(max, window, text));
                }
            }
            (None, _) => {}
        }
    }
    if let (Some(cost), Some(max)) = (declaration.cost, declaration.limit) {
        if let Err(problem) = check_cost(cost, max) {
            errors.push(problem.message(cost, max));
        }
    }
    if present(Key::Wait) {
        for key in written.iter().filter(|k| crate::NOT_WITH_WAIT.contains(k)) {
            let counts_all = *key == Key::Count && declaration.count == Some(Count::Requests);
            let not_shadow = *key == Key::Shadow && declaration.shadow == Some(false);
            if !counts_all && !not_shadow {
                errors.push(crate::not_with_wait(*key));
            }
        }
    }
    if present(Key::Ban) {
        for key in written.iter().filter(|k| crate::NOT_WITH_BAN.contains(k)) {
            if !(*key == Key::Shadow && declaration.shadow == Some(false)) {
                errors.push(crate::not_with_ban(*key));
            }
        }
    }
    if present(Key::Sync) {
        for key in written.iter().filter(|k| crate::NOT_WITH_SYNC.contains(k)) {
            errors.push(crate::not_with_sync(*key));
        }
        if declaration.count == Some(Count::Failures) {
            errors.push(crate::not_with_sync(Key::Count));
        }
        if let (Some(sync), Some(max), Some(window)) =
            (declaration.sync, declaration.limit, declaration.window)
        {
            if let Err(message) = crate::check_sync(max, window, sync, algorithm) {
                errors.push(message);
            }
        }
    }
    if declaration.shadow == Some(true) {
        if declaration.block.is_some() {
            errors.push(messages::block_with_shadow().to_owned());
        }
        if let Some(fail @ (FailMode::Closed | FailMode::Local)) = declaration.fail {
            errors.push(messages::fail_with_shadow(fail));
        }
        if declaration.enforce.is_some() {
            errors.push(messages::enforce_with_shadow().to_owned());
        }
    }
    errors
}

/// Parses stacked declarations separated by `;` and checks them against each other as the
/// attribute checks a handler's stack: at most [`MAX_STACKED`], no two with one algorithm
/// and window, one `fail` and one `shadow`, and either one identity or one on each. The text
/// is one stack, for every request it applies to: `tier` is refused (an override names its
/// tier in its selector).
///
/// # Errors
///
/// Every problem found, each a message the attribute would give.
pub fn parse_stack(text: &str) -> Result<Vec<Declaration>, Vec<String>> {
    let mut stack = Vec::new();
    let mut errors = Vec::new();
    for part in split_outside_strings(text, ';') {
        if part.trim().is_empty() {
            continue;
        }
        match parse_declaration(part) {
            Ok(declaration) => stack.push(declaration),
            Err(mut problems) => errors.append(&mut problems),
        }
    }
    if stack.is_empty() && errors.is_empty() {
        errors.push(messages::missing_limit_or_window(false, false, false).unwrap_or_default());
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // One stack is read here: an override's tier is in its selector, and a route declared in
    // code has no tier stacks.
    if stack.iter().any(|d| d.tier.is_some()) {
        return Err(vec![messages::tier_in_text().to_owned()]);
    }
    errors.extend(check_stack(&stack));
    if errors.is_empty() {
        Ok(stack)
    } else {
        Err(errors)
    }
}

/// The rules between stacked declarations.
fn check_stack(stack: &[Declaration]) -> Vec<String> {
    let mut errors = Vec::new();
    if stack.len() > 1 && stack.iter().any(|d| d.exempt.is_some()) {
        errors.push(messages::exempt_stacked().to_owned());
        return errors;
    }
    if stack.len() > MAX_STACKED {
        errors.push(messages::too_many_stacked());
    }
    if stack.iter().filter(|d| d.concurrency.is_some()).count() > 1 {
        errors.push(crate::concurrency_twice().to_owned());
    }
    for (i, later) in stack.iter().enumerate() {
        if later.concurrency.is_some() {
            continue;
        }
        if let Some(name) = &later.budget {
            if stack[..i].iter().any(|d| d.budget.as_ref() == Some(name)) {
                errors.push(messages::budget_twice(name));
            }
            continue;
        }
        let algorithm = later.algorithm.unwrap_or(Algorithm::SlidingWindow);
        let earlier = stack[..i].iter().find(|d| {
            d.budget.is_none()
                && d.concurrency.is_none()
                && d.algorithm.unwrap_or(Algorithm::SlidingWindow) == algorithm
                && d.window == later.window
        });
        if let Some(earlier) = earlier {
            errors.push(messages::repeated_window(
                later.window_text.as_deref().unwrap_or_default(),
                earlier.limit.unwrap_or_default(),
                earlier.window_text.as_deref().unwrap_or_default(),
                algorithm,
                later.algorithm.is_some(),
            ));
        }
    }
    // `shadow` on one declaration and `fail` or `enforce` on another: the same rules as on
    // one (a declaration checks its own).
    for (i, shadowed) in stack.iter().enumerate() {
        if shadowed.shadow != Some(true) {
            continue;
        }
        for (_, other) in stack.iter().enumerate().filter(|(j, _)| *j != i) {
            if let Some(fail @ (FailMode::Closed | FailMode::Local)) = other.fail {
                errors.push(messages::fail_with_shadow(fail));
            }
            if other.enforce.is_some() {
                errors.push(messages::enforce_with_shadow().to_owned());
            }
        }
        break;
    }
    let written = |d: &Declaration| d.fail.map(|f| format!("\"{f}\""));
    differ(stack, Key::Fail, written, &mut errors);
    let written = |d: &Declaration| d.shadow.map(|s| s.to_string());
    differ(stack, Key::Shadow, written, &mut errors);
    let written = |d: &Declaration| d.headers.map(|h| format!("\"{h}\""));
    differ(stack, Key::Headers, written, &mut errors);
    let written = |d: &Declaration| d.enforce.map(|e| e.to_string());
    differ(stack, Key::Enforce, written, &mut errors);
    let written = |d: &Declaration| d.wait.map(|w| format!("\"{w}ms\""));
    differ(stack, Key::Wait, written, &mut errors);
    let written = |d: &Declaration| {
        d.ban.map(|b| {
            format!(
                "\"{} in {}ms for {}ms\"",
                b.times, b.within_millis, b.for_millis
            )
        })
    };
    differ(stack, Key::Ban, written, &mut errors);
    let written = |d: &Declaration| d.sync.map(|s| format!("\"{s}ms\""));
    differ(stack, Key::Sync, written, &mut errors);
    if stack.len() > 1 && stack.iter().any(|d| d.sync.is_some()) {
        errors.push(crate::sync_stacked().to_owned());
    }
    // A ban on one declaration goes against the `wait` or `shadow` of another, as on one.
    if stack.iter().any(|d| d.ban.is_some()) {
        for d in stack.iter().filter(|d| d.ban.is_none()) {
            if d.wait.is_some() {
                errors.push(crate::not_with_ban(Key::Wait));
            }
            if d.shadow == Some(true) {
                errors.push(crate::not_with_ban(Key::Shadow));
            }
        }
    }
    // A route that waits: what refuses or counts too late on one declaration goes against
    // the `wait` of another, as on one.
    if stack.iter().any(|d| d.wait.is_some()) {
        for d in stack.iter().filter(|d| d.wait.is_none()) {
            let found = [
                (Key::Block, d.block.is_some()),
                (Key::Count, d.count == Some(Count::Failures)),
                (Key::Concurrency, d.concurrency.is_some()),
                (Key::Shadow, d.shadow == Some(true)),
                (Key::Budget, d.budget.is_some()),
            ];
            for (key, _) in found.iter().filter(|(_, found)| *found) {
                errors.push(crate::not_with_wait(*key));
            }
        }
        // Identities as written: a declaration that names none counts by the stack's.
        let written: Vec<_> = stack.iter().filter_map(|d| d.identity.as_ref()).collect();
        if written.iter().any(|i| *i != written[0]) {
            errors.push(crate::not_with_wait(Key::Identity));
        }
    }
    let identities: Vec<&Vec<ParsedPart>> =
        stack.iter().filter_map(|d| d.identity.as_ref()).collect();
    // A shared budget counts by its own identity, declared with it.
    if identities.iter().any(|i| *i != identities[0])
        && stack
            .iter()
            .any(|d| d.identity.is_none() && d.budget.is_none())
    {
        errors.push(messages::missing_identity_in_mixed_stack().to_owned());
    }
    errors
}

/// A shared key written with two values.
fn differ(
    stack: &[Declaration],
    key: Key,
    written: impl Fn(&Declaration) -> Option<String>,
    errors: &mut Vec<String>,
) {
    let mut values = stack.iter().filter_map(written);
    if let Some(first) = values.next() {
        if let Some(other) = values.find(|v| *v != first) {
            errors.push(messages::shared_key_differs(key, &other, &first));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<String> {
        parse_stack(text).expect_err(text)
    }

    #[test]
    fn ban_is_route_wide_and_refuses_what_never_refuses() {
        let stack = parse_stack(
            r#"limit = 10, window = "1s", ban = "20 in 10m for 1h"; limit = 100, window = "1m""#,
        )
        .unwrap();
        assert_eq!(stack[0].ban.map(|b| b.times), Some(20));
        assert!(
            errors(r#"limit = 1, window = "1s", ban = "2 in 1m for 1h", wait = "1s""#)
                .iter()
                .any(|e| e.starts_with("`ban` does not go with `wait`"))
        );
        assert!(
            errors(r#"limit = 1, window = "1s", ban = "2 in 1m for 1h"; limit = 5, window = "1m", shadow = true"#)
                .iter()
                .any(|e| e.starts_with("`ban` does not go with `shadow`"))
        );
        assert!(errors(
            r#"limit = 1, window = "1s", ban = "2 in 1m for 1h"; limit = 5, window = "1m", ban = "3 in 1m for 1h""#
        )[0]
            .contains("stacked limits share one `ban`"));
        assert!(
            errors(r#"limit = 1, window = "1s", bna = "2 in 1m for 1h""#)[0]
                .contains("did you mean `ban`?")
        );
        parse_stack(r#"limit = 1, window = "1s", ban = "2 in 1m for 1h", count = "failures", shadow = false"#)
            .unwrap();
    }

    #[test]
    fn sync_takes_one_limit_large_enough_for_shares() {
        let stack = parse_stack(r#"limit = 100000, window = "1m", sync = "100ms""#).unwrap();
        assert_eq!(stack[0].sync, Some(100));
        assert!(errors(r#"limit = 1000, window = "1m", sync = "100ms""#)[0]
            .contains("a limit of at least 6000 per this window"));
        assert!(
            errors(r#"limit = 100000, window = "1m", sync = "100ms", block = "1m""#)[0]
                .starts_with("`sync` does not go with `block`")
        );
        assert!(
            errors(r#"limit = 100000, window = "1m", sync = "100ms", count = "failures""#)[0]
                .starts_with("`sync` does not go with `count`")
        );
        assert!(errors(
            r#"limit = 100000, window = "1m", sync = "100ms"; limit = 10, window = "1s""#
        )[0]
        .contains("has one limit"));
        assert!(
            errors(r#"limit = 100000, window = "1m", snyc = "100ms""#)[0]
                .contains("did you mean `sync`?")
        );
    }

    #[test]
    fn wait_is_route_wide_and_refuses_what_cannot_wait() {
        let stack =
            parse_stack(r#"limit = 10, window = "1s", wait = "2s"; limit = 100, window = "1m""#)
                .unwrap();
        assert_eq!(stack[0].wait, Some(2_000));
        assert!(
            errors(r#"limit = 1, window = "1s", wait = "2s", block = "1m""#)[0]
                .starts_with("`wait` does not go with `block`")
        );
        assert!(errors(
            r#"limit = 1, window = "1s", wait = "2s"; limit = 5, window = "1m", count = "failures""#
        )[0]
        .starts_with("`wait` does not go with `count`"));
        assert!(
            errors(r#"limit = 1, window = "1s", wait = "2s"; concurrency = 2"#)[0]
                .starts_with("`wait` does not go with `concurrency`")
        );
        assert!(errors(
            r#"limit = 1, window = "1s", wait = "1s"; limit = 5, window = "1m", wait = "2s""#
        )[0]
        .contains("`wait`"));
        assert!(errors(r#"limit = 1, window = "1s", wait = "90s""#)[0].contains("at most `1m`"));
        assert!(errors(r#"limit = 1, window = "1s", wait = "1s", identity = "ip"; limit = 5, window = "1m", identity = "api_key""#)[0]
            .starts_with("`wait` does not go with `identity`"));
        assert!(
            errors(r#"limit = 1, window = "1s", wait = "1s"; budget = API"#)[0]
                .starts_with("`wait` does not go with `budget`")
        );
        assert!(
            errors(r#"limit = 1, window = "1s", wiat = "1s""#)[0].contains("did you mean `wait`?")
        );
        parse_stack(r#"limit = 1, window = "1s", wait = "1s", count = "requests", shadow = false"#)
            .unwrap();
        // One identity written once counts for the whole stack.
        parse_stack(r#"limit = 1, window = "1s", identity = "api_key", wait = "1s"; limit = 5, window = "1m""#)
            .unwrap();
    }

    #[test]
    fn concurrency_is_a_limit_of_its_own() {
        let stack = parse_stack(
            r#"concurrency = 3, lease = "30s", identity = "api_key"; limit = 60, window = "1h""#,
        )
        .unwrap();
        assert_eq!(
            (stack[0].concurrency, stack[0].lease),
            (Some(3), Some(30_000))
        );
        assert_eq!(stack[1].limit, Some(60));
        let beside = errors(r#"concurrency = 3, limit = 10, window = "1m""#);
        assert_eq!(beside.len(), 2, "{beside:?}");
        assert!(beside[0].starts_with("`limit` does not go with `concurrency`"));
        assert!(errors(r#"lease = "5s", limit = 1, window = "1s""#)[0]
            .starts_with("`lease` is how long"));
        assert!(errors("concurrency = 0")[0].contains("at least 1"));
        assert!(errors("concurrency = 2; concurrency = 3")[0].contains("one `concurrency`"));
        assert!(errors("concurency = 2")[0].contains("did you mean `concurrency`?"));
        assert!(errors(r#"concurrency = 2, lease = "100ms""#)[0].contains("at least `1s`"));
    }

    #[test]
    fn every_key_reads_as_the_attribute_writes_it() {
        let stack = parse_stack(
            r#"limit = 10, window = "5m", identity = "ip+username", algorithm = "gcra", fail = "local", count = "failures", block = "15m""#,
        )
        .unwrap();
        let d = &stack[0];
        assert_eq!(d.limit, Some(10));
        assert_eq!(d.window, Some(300_000));
        assert_eq!(d.identity, Some(vec![ParsedPart::Ip, ParsedPart::Username]));
        assert_eq!(d.algorithm, Some(Algorithm::Gcra));
        assert_eq!(d.fail, Some(FailMode::Local));
        assert_eq!(d.count, Some(Count::Failures));
        assert_eq!(d.block, Some(900_000));
        let enforced = parse_stack(r#"limit = 1, window = "1m", enforce = false"#).unwrap();
        assert_eq!(enforced[0].enforce, Some(false));
        let exempt = parse_stack(r#"exempt = "incident 42; monitoring""#).unwrap();
        assert_eq!(exempt[0].exempt.as_deref(), Some("incident 42; monitoring"));
        let stacked =
            parse_stack(r#"limit = 5, window = "1s"; limit = 100, window = "1m""#).unwrap();
        assert_eq!(stacked.len(), 2);
        let hidden = parse_stack(r#"limit = 5, window = "5m", headers = "none""#).unwrap();
        assert_eq!(hidden[0].headers, Some(RouteHeaders::Hidden));
        assert_eq!(stack[0].headers, None);
        let weighed = parse_stack(r#"limit = 1000, window = "1h", cost = 10"#).unwrap();
        assert_eq!((weighed[0].cost, stack[0].cost), (Some(10), None));
        let tiered = parse_declaration(r#"tier = "pro", limit = 1000, window = "1m""#).unwrap();
        assert_eq!(
            (tiered.tier.as_deref(), stack[0].tier.as_deref()),
            (Some("pro"), None)
        );
    }

    #[test]
    fn a_tier_is_named_as_the_runtime_names_it_and_never_in_a_stack_read_at_run_time() {
        assert_eq!(
            parse_declaration(r#"tier = "Pro", limit = 1, window = "1m""#).unwrap_err(),
            [crate::check_tier("Pro").unwrap_err()]
        );
        assert_eq!(
            parse_declaration(r#"tier = pro, limit = 1, window = "1m""#).unwrap_err(),
            [messages::takes_string(Key::Tier)]
        );
        assert_eq!(
            errors(r#"tier = "pro", limit = 1, window = "1m""#),
            [messages::tier_in_text()]
        );
        assert_eq!(
            errors(r#"exempt = "x", tier = "pro""#),
            [messages::exempt_stands_alone(Key::Tier)]
        );
        assert!(errors(r#"limit = 1, window = "1m", teir = "pro""#)[0]
            .ends_with("did you mean `tier`?"));
    }

    #[test]
    fn mistakes_get_the_attributes_messages() {
        let misspelled = errors(r#"limt = 5, window = "5m""#);
        assert_eq!(
            misspelled.len(),
            1,
            "no `missing limit` after `limt`: {misspelled:?}"
        );
        assert!(misspelled[0].ends_with("did you mean `limit`?"));
        assert_eq!(
            errors(r#"limit = 0, window = "5m""#),
            [messages::limit_zero()]
        );
        assert_eq!(
            errors(r#"limit = "10", window = "5m""#),
            [messages::limit_string("10")]
        );
        assert_eq!(
            errors(r#"limit = 10, window = 300"#),
            [messages::duration_without_unit(Key::Window, "300")]
        );
        assert!(errors(r#"limit = 10, window = "40d""#)[0].contains("31 days"));
        let log = errors(r#"limit = 5000, window = "1m", algorithm = "sliding_log""#);
        assert_eq!(log, [LimitProblem::SlidingLogTooHigh.message(5000, 1, "")]);
        assert_eq!(
            errors(r#"limit = 10"#),
            [messages::missing_limit_or_window(true, false, false).unwrap()]
        );
        assert_eq!(
            errors(r#"limit = 1, window = "1m", shadow = true, block = "5m""#),
            [messages::block_with_shadow()]
        );
        assert_eq!(
            errors(r#"exempt = "x", limit = 3"#),
            [messages::exempt_stands_alone(Key::Limit)]
        );
        assert!(
            errors(r#"limit = 1, window = "1m"; limit = 2, window = "1m""#)[0]
                .contains("repeats the window")
        );
        assert!(errors(r#"limit: 1, window = "1m""#)[0].starts_with("write `limit = ..`"));
        assert!(errors(r#"limit = 1, window = "1m", headers = "nnone""#)[0]
            .ends_with("did you mean `none`?"));
        assert!(errors(r#"limit = 1, window = "1m", headrs = "none""#)[0]
            .ends_with("did you mean `headers`?"));
        assert!(errors(r#"limit = 1, window = "1m", headers = false"#)[0].contains("`headers`"));
        assert!(errors(
            r#"limit = 1, window = "1s", headers = "none"; limit = 9, window = "1m", headers = "all""#
        )[0]
        .contains("`headers`"));
        assert!(errors(r#"limit = 1, window = "1m", crate = "x""#)[0].contains("`crate`"));
        assert!(errors(r#"limit = 1, window = "1m"#)[0].contains("not closed"));
        assert_eq!(
            errors(r#"limit = 1, window = "1m", enforce = "true""#),
            [messages::bool_string(Key::Enforce, "true")]
        );
        assert_eq!(
            errors(r#"limit = 1, window = "1m", shadow = true, enforce = false"#),
            [messages::enforce_with_shadow()]
        );
        assert!(errors(
            r#"limit = 1, window = "1m", enforce = true; limit = 5, window = "1h", enforce = false"#
        )[0]
        .contains("differs from `enforce = true`"));
        assert!(errors(r#"limit = 1, window = "1m", enfroce = true"#)[0]
            .ends_with("did you mean `enforce`?"));
        assert_eq!(
            errors(r#"limit = 5, window = "1m", cost = 6"#),
            [crate::CostProblem::OverLimit.message(6, 5)]
        );
        assert!(errors(r#"limit = 5, window = "1m", cost = 0"#)[0].starts_with("`cost = 0`"));
        for bad in ["-1", "1.5", "\"2\"", "many"] {
            let text = format!(r#"limit = 5, window = "1m", cost = {bad}"#);
            assert!(
                errors(&text)[0].contains("`cost` must be a positive whole number"),
                "{bad}"
            );
        }
        assert!(!errors("").is_empty());
    }

    #[test]
    fn a_shared_budget_is_named_with_a_cost_at_most() {
        let stack =
            parse_stack(r#"limit = 10, window = "1s", identity = "ip"; budget = API, cost = 5"#)
                .unwrap();
        assert_eq!(stack[1].budget.as_deref(), Some("API"));
        assert_eq!(stack[1].cost, Some(5));
        assert_eq!(
            parse_stack(r#"budget = "API""#).unwrap()[0]
                .budget
                .as_deref(),
            Some("API")
        );
        // Two budgets have no window to collide on; one budget twice is refused.
        assert!(parse_stack("budget = API; budget = DAILY").is_ok());
        assert!(errors("budget = API; budget = API")[0].contains("twice"));
        assert!(errors(r#"budget = API, limit = 5"#)[0].contains("`limit` of a shared budget"));
        assert!(errors("budget = 5")[0].contains("e.g. `budget = API`"));
        assert!(errors(r#"budget = "A|B""#)[0].contains("cannot name a shared budget"));
        // The shadow rules hold beside a budget and across declarations.
        assert!(errors(r#"budget = API, shadow = true, fail = "closed""#)[0].contains("shadow"));
        assert!(!errors(r#"budget = API, shadow = true, enforce = true"#).is_empty());
        assert!(!errors(
            r#"limit = 5, window = "1m", shadow = true; limit = 6, window = "1h", fail = "closed""#
        )
        .is_empty());
        // A budget beside limits that count different identities needs none of its own.
        assert!(parse_stack(
            r#"limit = 5, window = "1m", identity = "ip"; limit = 3, window = "1h", identity = "username"; budget = API"#
        )
        .is_ok());
    }
}
