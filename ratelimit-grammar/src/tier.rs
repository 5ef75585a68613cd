//! Tier names: `tier = "pro"` in the attribute, `tier "pro"` in an override's selector, and
//! the `Tier` an app's auth layer puts in a request. A tier is part of keys and metric
//! labels, so its name is short and plain.

/// The longest tier name: tiers are plan names (`pro`, `enterprise`), kept in keys.
pub const MAX_TIER_LEN: usize = 32;

/// Whether `name` can be a tier: 1 to [`MAX_TIER_LEN`] of lower-case letters, digits, `_` and
/// `-` (usable in `const` contexts, where the runtime checks a policy's tiers).
pub const fn is_tier_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_TIER_LEN {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !(b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-') {
            return false;
        }
        i += 1;
    }
    true
}

/// Whether `name` can be a tier: 1 to 32 of lower-case letters, digits, `_` and `-` (a tier
/// is part of keys and metric labels).
///
/// ```
/// use ratelimit_grammar::check_tier;
///
/// assert_eq!(check_tier("pro"), Ok(()));
/// assert!(check_tier("Pro").unwrap_err().contains("lower-case"));
/// ```
///
/// # Errors
///
/// What is wrong with it.
pub fn check_tier(name: &str) -> Result<(), String> {
    if is_tier_name(name) {
        Ok(())
    } else {
        Err(format!(
            "tier `{name}` must be 1 to {MAX_TIER_LEN} of lower-case letters, digits, `_` and `-`"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tier_names_are_short_and_plain() {
        for good in ["pro", "free_2", "team-eu", &"a".repeat(MAX_TIER_LEN)] {
            assert!(is_tier_name(good), "{good}");
        }
        for bad in [
            "",
            "Pro",
            "p r",
            "pro.eu",
            "pró",
            &"a".repeat(MAX_TIER_LEN + 1),
        ] {
            assert!(check_tier(bad).is_err(), "{bad}");
        }
    }
}
