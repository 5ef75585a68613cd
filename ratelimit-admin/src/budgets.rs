//! Shared budgets (`budget!` in the services' code), named `budget NAME` where the command
//! takes a route: their overrides, and one client's state and reset under them.

use std::collections::BTreeMap;

use ratelimit_runtime::{
    overrides::{RuleSet, BUDGET_WORD},
    Identity, Limit, SharedBudget,
};

use crate::{
    client::{header_args, identity_values, Admin, Published},
    ClientArgs,
};

/// The shared budget a route argument names (`budget API`), if it names one.
pub(crate) fn named(route: &str) -> Option<&str> {
    route.trim().strip_prefix(BUDGET_WORD).map(str::trim)
}

/// The problem with `name`, when the services publish no budget of that name.
fn unknown(published: &Published, name: &str) -> Option<String> {
    if published.budgets.contains_key(name) {
        return None;
    }
    let known: Vec<&str> = published.budgets.keys().map(String::as_str).collect();
    if known.is_empty() {
        return Some(format!(
            "the services publish no shared budget (`budget!` in their code), so `budget {name}` names none; a service of a version that publishes none, or none started yet, reads no budget override"
        ));
    }
    Some(format!(
        "`budget {name}` names no shared budget the services declare{}; they declare {}",
        ratelimit_grammar::suggest::did_you_mean_any_case(name, &known),
        ratelimit_grammar::suggest::list(&known)
    ))
}

/// Checks `declarations` as the override of shared budget `name`, as the services will: the
/// keys `budget!` takes, and a budget they declare.
pub(crate) async fn check(admin: &Admin, name: &str, declarations: &str) -> Result<(), String> {
    let field = format!("{BUDGET_WORD}{name}");
    RuleSet::from_fields([(field.as_str(), declarations)]).map_err(|e| e.join("\n"))?;
    match unknown(&admin.published().await?, name) {
        Some(problem) => Err(format!(
            "{problem} (the services would refuse the whole hash)"
        )),
        None => Ok(()),
    }
}

/// `override set "budget NAME" '…'`: every route naming the budget counts under it.
pub(crate) async fn set(admin: &Admin, name: &str, declarations: &str) -> Result<(), String> {
    check(admin, name, declarations).await?;
    let field = format!("{BUDGET_WORD}{name}");
    match admin.set(&field, declarations).await? {
        Some(before) if before != declarations => {
            println!("set `{field}` = '{declarations}' (it was '{before}')");
        }
        _ => println!("set `{field}` = '{declarations}'"),
    }
    let published = admin.published().await?;
    let routes = sharing(&published, name);
    if !routes.is_empty() {
        println!("shared by: {}", routes.join(", "));
    }
    Ok(())
}

/// The routes whose declared policy (or a tier's) names shared budget `name`.
pub(crate) fn sharing<'a>(published: &'a Published, name: &str) -> Vec<&'a str> {
    let names = |text: &str| {
        ratelimit_grammar::parse_stack(text)
            .is_ok_and(|stack| stack.iter().any(|d| d.budget.as_deref() == Some(name)))
    };
    let mut routes: Vec<&str> = published
        .routes
        .iter()
        .chain(&published.tiers)
        .filter(|(_, text)| names(text))
        .map(|(route, _)| route.as_str())
        .collect();
    routes.dedup();
    routes
}

/// The lines `routes` prints for each shared budget: its declaration, its override (the
/// hash's, else the file's) and the routes that name it.
pub(crate) fn print(published: &Published, fields: &BTreeMap<String, String>, file: &RuleSet) {
    for (name, declared) in &published.budgets {
        println!("budget {name}\n  declared: {declared}");
        if let Some(text) = fields.get(&format!("{BUDGET_WORD}{name}")) {
            println!("  override: {text}");
        } else if let Some((text, _)) = file.budgets.get(name) {
            println!("  override (file): {text}");
        }
        let routes = sharing(published, name);
        if !routes.is_empty() {
            println!("  shared by: {}", routes.join(", "));
        }
    }
}

/// The state (or, with `reset`, the reset) of the client `args` names under shared budget
/// `name`, under its limit in force.
pub(crate) async fn budget(
    admin: &Admin,
    name: &str,
    args: &ClientArgs,
    file: &RuleSet,
    reset: bool,
) -> Result<Vec<(Limit, ratelimit_runtime::store::LimitState)>, String> {
    let published = admin.published().await?;
    if let Some(problem) = unknown(&published, name) {
        return Err(problem);
    }
    let fields = admin.fields().await?;
    let budgets = Admin::budgets_in_force(&published, &fields, file)?;
    let limit = *budgets
        .values()
        .find(|l| l.budget() == Some(name))
        .ok_or_else(|| format!("`budget {name}` has no limit"))?;
    let identity = limit.identity().unwrap_or(Identity::UserIdElseIp);
    let budget = SharedBudget::__declare(
        limit.budget().unwrap_or_default(),
        module_path!(),
        "",
        limit,
        identity,
    );
    let headers = header_args(args)?;
    let given = identity_values(identity, args, &headers).ok_or_else(|| {
        format!(
            "`budget {name}` counts clients by `{identity}`: give those parts (`--ip`, `--username`, `--user-id`, `--api-key`, `--header name=value`)"
        )
    })?;
    let limiter = admin.limiter(&args.prefix).await?;
    if reset {
        limiter
            .reset_budget(&budget, &given)
            .await
            .map_err(|e| e.to_string())?;
        return Ok(Vec::new());
    }
    let states = limiter
        .budget_state(&budget, &given)
        .await
        .map_err(|e| e.to_string())?;
    Ok(states.into_iter().map(|s| (s.limit, s)).collect())
}
