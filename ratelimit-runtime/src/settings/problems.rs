//! The settings a group refused, kept until the startup check reports them.

use std::collections::BTreeMap;

/// Refused settings by the setting they name (with its route, for settings per route): a
/// later valid value of the same setting takes its problem back, as it replaces the value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Problems(BTreeMap<String, String>);

impl Problems {
    /// Records the outcome of giving `setting` (such as
    /// ``"`RateLimiter::keys(..).prefix(\"a b\")`"``, as a user writes it) a value: `Err`
    /// with why it was refused, `Ok` clears what an earlier value of `slot` left.
    pub(crate) fn record(&mut self, slot: impl Into<String>, outcome: Result<(), String>) {
        let slot = slot.into();
        match outcome {
            Ok(()) => {
                self.0.remove(&slot);
            }
            Err(line) => {
                self.0.insert(slot, line);
            }
        }
    }

    /// Every problem, one line each, in the order of their settings.
    pub(crate) fn lines(&self) -> impl Iterator<Item = &str> {
        self.0.values().map(String::as_str)
    }
}

/// A problem line: the setting as written, then why it was refused.
pub(crate) fn line(setting: impl std::fmt::Display, why: impl std::fmt::Display) -> String {
    format!("{setting}: {why}")
}
