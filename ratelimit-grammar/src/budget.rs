//! Shared budget names: the constant `budget!` declares (`API`), named by `budget = API` in
//! the attribute and in a declaration read at run time (an override), and part of the
//! budget's keys (`rl:{budget:API|…}`).

/// The longest name of a shared budget.
pub const MAX_BUDGET_NAME_LEN: usize = 64;

/// Whether `name` can name a shared budget: a Rust identifier of ASCII letters, digits and
/// `_`, not starting with a digit, at most [`MAX_BUDGET_NAME_LEN`] long.
///
/// ```
/// use ratelimit_grammar::check_budget_name;
///
/// assert_eq!(check_budget_name("API"), Ok(()));
/// assert_eq!(check_budget_name("_daily_2"), Ok(()));
/// assert!(check_budget_name("2API").is_err());
/// assert!(check_budget_name("API|x").is_err());
/// ```
///
/// # Errors
///
/// What is wrong with it.
pub fn check_budget_name(name: &str) -> Result<(), String> {
    let plain = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.bytes().next().is_some_and(|b| !b.is_ascii_digit())
        && name.len() <= MAX_BUDGET_NAME_LEN;
    if plain {
        Ok(())
    } else {
        Err(format!(
            "`{name}` cannot name a shared budget: a budget is the constant `budget!` declares, named by its identifier (ASCII letters, digits and `_`, at most {MAX_BUDGET_NAME_LEN}), e.g. `budget = API`"
        ))
    }
}
