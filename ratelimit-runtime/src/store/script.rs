//! The Lua check scripts and their protocol: what goes into `KEYS` and `ARGV`, what comes
//! back.
//!
//! The scripts are written out at build time from `ratelimit-runtime/scripts/` (`build.rs`,
//! `scripts/README.md`): a limit checked alone runs its algorithm's own script
//! (`fixed_window.lua`, `sliding_window.lua`, `sliding_log.lua`, `gcra.lua`), a stack of
//! limits the general [`CHECK_SCRIPT`] (`check.lua`). Their shared steps (clock, argument
//! bounds, TTLs, each algorithm's peek and commit) are parts pasted in, not Lua functions:
//! Redis runs a script's whole chunk on every call, so a function would be made anew on
//! every call. Either way one check is one `EVALSHA`:
//!
//! - `KEYS[i]`: [`RouteKey::limit_key`](crate::key::RouteKey::limit_key) of limit `i`, the
//!   only keys a script touches: the window algorithms keep a hash there with one field per
//!   window start (derived inside the script from the server clock, so it cannot be part of
//!   a key the caller names, and Redis Cluster routes a script, during a slot migration too,
//!   by the keys it is given). Every key shares the route key's hash tag, so all of them
//!   live in one Redis Cluster slot.
//! - `ARGV[1]`: the injected time in milliseconds, or `""` for Redis `TIME`.
//! - A limit alone: `ARGV[2]`, `ARGV[3]`: its max and window in milliseconds; a sliding log
//!   also `ARGV[4]`, a member unique to this request (the sorted-set member).
//! - A stack: `ARGV[2]`: the member, or `""` when no limit is a sliding log;
//!   `ARGV[3i]`, `ARGV[3i+1]`, `ARGV[3i+2]`: limit `i`'s algorithm code (`fw`, `sw`, `sl`,
//!   `gc`), max and window in milliseconds. A ban ([`Limit::is_ban`]) comes first, coded
//!   `bn` (counting the check's refusal) or `br` (one refusal decided elsewhere: by
//!   another Cluster call, or a failure once its handler ran), its lockout key the ban: a
//!   ban that holds answers every limit refused for what is left of it, reading no limit.
//! - Reply: one string of integers separated by single spaces, four per limit: `allowed
//!   (0/1) remaining retry_after_ms reset_after_ms`. A string rather than an integer array:
//!   Redis builds either at the same cost, and redis-rs parses one string for about 4k
//!   fewer instructions than a four-element array (BENCHMARKS.md, "Where the time goes").
//!
//! - The batch script (`batch.lua`, concurrent checks of one key in one call, under one limit
//!   or a stack): `ARGV[2]`: how many checks wait, `ARGV[3]`: the member prefix (or `""`),
//!   then per limit its algorithm code, max and window in milliseconds; reply `passed`,
//!   then per limit `remaining reset_after_ms` (a passed check's) and `allowed remaining
//!   retry_after_ms reset_after_ms` (a refused one's), then `now_ms`.
//!
//! - The reservation script (`reserve.lua`, a request that may wait for its turn): the
//!   general script's keys and arguments (no lockout), then the wait in milliseconds; reply
//!   the general script's, then the time the request was counted at (its turn).
//!
//! The general script peeks every limit first and counts the request in all of them only
//! when all allow it. For a request rejected by another limit, an allowing limit reports the
//! state it would have had if the request had been counted.

use std::{
    collections::hash_map::RandomState,
    hash::BuildHasher,
    sync::{
        atomic::{AtomicU64, Ordering},
        LazyLock,
    },
    time::Duration,
};

use redis::Value;

use super::{CheckRequest, Decision, LimitState, Receipt, StoreError, StoreErrorKind};
use crate::{
    key::{algorithm_code, RouteKey},
    policy::{Algorithm, Limit},
};

/// A script as the build writes it out (`build.rs`: `scripts/<file>` with its parts pasted
/// in).
macro_rules! script {
    ($file:literal) => {
        include_str!(concat!(env!("OUT_DIR"), "/scripts/", $file))
    };
}

/// The general check script, for any stack of limits (`EVAL` sends it when Redis does not
/// know it yet): `scripts/check.lua`, every algorithm's peek and commit.
pub const CHECK_SCRIPT: &str = script!("check.lua");

/// Every script, in the order of [`script_index`]: each algorithm's own, then the general
/// one.
const SOURCES: [&str; Algorithm::ALL.len() + 1] = [
    script!("fixed_window.lua"),
    script!("sliding_window.lua"),
    script!("sliding_log.lua"),
    script!("gcra.lua"),
    CHECK_SCRIPT,
];

/// The position in [`SOURCES`] of the script that checks `limits`.
fn script_index(limits: &[Limit]) -> usize {
    match limits {
        // One script per algorithm, in the order of `Algorithm::ALL`, then the stack's.
        [limit] if !limit.is_ban() => limit.algorithm().index(),
        _ => Algorithm::ALL.len(),
    }
}

static SHA1S: LazyLock<[String; Algorithm::ALL.len() + 1]> =
    LazyLock::new(|| SOURCES.map(|source| sha1_smol::Sha1::from(source).digest().to_string()));

/// One check script: its source, sent with `EVAL`, and the SHA-1 digest Redis knows it by
/// (`EVALSHA`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckScript {
    source: &'static str,
    sha1: &'static str,
}

impl CheckScript {
    /// The Lua source.
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// The SHA-1 digest of the source in hex.
    pub fn sha1(&self) -> &'static str {
        self.sha1
    }
}

/// The script that checks `limits`: the algorithm's own script for one limit, the general
/// [`CHECK_SCRIPT`] for a stack.
pub fn check_script(limits: &[Limit]) -> CheckScript {
    let index = script_index(limits);
    CheckScript {
        source: SOURCES[index],
        sha1: &SHA1S[index],
    }
}

/// The give-back script (`scripts/give_back.lua`): units back, or a reset.
pub fn give_back_script() -> CheckScript {
    *GIVE_BACK
}

/// The SHA-1 digest of the general [`CHECK_SCRIPT`] in hex.
pub fn check_script_sha1() -> &'static str {
    &SHA1S[Algorithm::ALL.len()]
}

/// Random per process, so members from different instances never collide: 16 hex digits.
static MEMBER_PREFIX: LazyLock<String> =
    LazyLock::new(|| format!("{:016x}", RandomState::new().hash_one(std::process::id())));
static MEMBER_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A sliding-log member unique to one request: a random per-process prefix and a counter
/// in hex (written by hand: this runs on every sliding-log check).
fn unique_member() -> String {
    let n = MEMBER_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut member = String::with_capacity(MEMBER_PREFIX.len() + 16);
    member.push_str(&MEMBER_PREFIX);
    push_hex(&mut member, n);
    member
}

/// `n` in lowercase hex without leading zeros, as `{:x}` writes it.
fn push_hex(out: &mut String, n: u64) {
    let digits = (64 - n.leading_zeros()).max(1).div_ceil(4);
    for shift in (0..digits).rev() {
        let digit = (n >> (shift * 4)) & 0xf;
        out.push(char::from(b"0123456789abcdef"[digit as usize]));
    }
}

/// One encoded script call: the keys and arguments of `EVALSHA`/`EVAL`. Numbers go into the
/// command as integers, so encoding costs one string per key and one for the member.
#[derive(Debug, Clone)]
pub(crate) struct ScriptCall<'a> {
    keys: Vec<String>,
    now_millis: Option<u64>,
    member: String,
    limits: &'a [Limit],
    script: CheckScript,
    /// What the call does besides its limits: a check, or a give-back of units.
    action: Action<'a>,
}

/// What a [`ScriptCall`] asks.
#[derive(Debug, Clone, Copy)]
enum Action<'a> {
    Check,
    GiveBack {
        units: u32,
        receipt: Option<&'a Receipt>,
    },
    /// Delete every key given (the limits' keys and their lockout keys).
    Reset,
    /// Count `units` in every limit, never refused.
    Charge {
        units: u32,
    },
    /// What a check would answer, counting nothing.
    Peek,
    /// `units` concurrent checks of one client's limits (`scripts/batch.lua`).
    Batch {
        units: u32,
    },
    /// A concurrency limit's place given back (`release`) or held on (`renew`).
    Lease {
        renew: bool,
    },
    /// A check that may wait up to `wait_ms` for its turn (`scripts/reserve.lua`).
    Reserve {
        wait_ms: u64,
    },
}

/// The lockout key of a limit with a block: `<limit key>:block`, beside the limit's key
/// and in its Cluster slot.
pub(crate) fn block_key(key: &RouteKey, limit: &Limit) -> String {
    let mut block = key.limit_key(limit);
    block.push_str(":block");
    block
}

/// `source` with its digest.
fn script_of(source: &'static str) -> CheckScript {
    CheckScript {
        source,
        sha1: Box::leak(
            sha1_smol::Sha1::from(source)
                .digest()
                .to_string()
                .into_boxed_str(),
        ),
    }
}

/// The give-back script (`scripts/give_back.lua`).
static GIVE_BACK: LazyLock<CheckScript> = LazyLock::new(|| script_of(script!("give_back.lua")));

/// The peek script (`scripts/peek.lua`): a check's answer without counting.
static PEEK: LazyLock<CheckScript> = LazyLock::new(|| script_of(script!("peek.lua")));

/// The batch script (`scripts/batch.lua`): concurrent checks of one key in one call.
static BATCH: LazyLock<CheckScript> = LazyLock::new(|| script_of(script!("batch.lua")));

/// The reservation script (`scripts/reserve.lua`): a check that may wait for its turn.
static RESERVE: LazyLock<CheckScript> = LazyLock::new(|| script_of(script!("reserve.lua")));

impl<'a> ScriptCall<'a> {
    /// Encodes `request`. `request.limits` must not be empty.
    pub(crate) fn new(request: &CheckRequest<'a>) -> Self {
        let limits = request.limits;
        let mut keys: Vec<String> = limits
            .iter()
            .map(|limit| request.key.limit_key(limit))
            .collect();
        keys.extend(
            limits
                .iter()
                .filter(|limit| limit.block().is_some())
                .map(|limit| block_key(request.key, limit)),
        );
        ScriptCall {
            keys,
            now_millis: request.now_millis,
            member: if limits
                .iter()
                .any(|limit| limit.algorithm() == Algorithm::SlidingLog)
            {
                unique_member()
            } else {
                String::new()
            },
            limits,
            script: check_script(limits),
            action: Action::Check,
        }
    }

    /// Encodes a give-back of `units` for `limits` of `key`, where the check with `receipt`
    /// counted them, else from what counts now. `limits` must not be empty.
    pub(crate) fn give_back(
        key: &RouteKey,
        limits: &'a [Limit],
        now_millis: Option<u64>,
        units: u32,
        receipt: Option<&'a Receipt>,
    ) -> Self {
        ScriptCall {
            keys: limits.iter().map(|limit| key.limit_key(limit)).collect(),
            now_millis,
            member: receipt
                .and_then(Receipt::member)
                .unwrap_or_default()
                .to_owned(),
            limits,
            script: *GIVE_BACK,
            action: Action::GiveBack { units, receipt },
        }
    }

    /// Encodes a reset of `limits` of `key`: their keys and lockout keys deleted.
    /// `limits` must not be empty.
    pub(crate) fn reset(key: &RouteKey, limits: &'a [Limit], now_millis: Option<u64>) -> Self {
        let mut keys: Vec<String> = limits.iter().map(|limit| key.limit_key(limit)).collect();
        keys.extend(
            limits
                .iter()
                .filter(|limit| limit.block().is_some())
                .map(|limit| block_key(key, limit)),
        );
        ScriptCall {
            keys,
            now_millis,
            member: String::new(),
            limits,
            script: *GIVE_BACK,
            action: Action::Reset,
        }
    }

    /// Encodes a charge of `units` to `limits` of `key`, counted after the fact.
    /// `limits` must not be empty.
    pub(crate) fn charge(
        key: &RouteKey,
        limits: &'a [Limit],
        now_millis: Option<u64>,
        units: u32,
    ) -> Self {
        ScriptCall {
            keys: limits.iter().map(|limit| key.limit_key(limit)).collect(),
            now_millis,
            member: unique_member(),
            limits,
            script: *GIVE_BACK,
            action: Action::Charge { units },
        }
    }

    /// Encodes the release (or, with `renew`, the renewal) of the places the check with
    /// `receipt` took in the concurrency limits among `limits` of `key`. `limits` must not be
    /// empty.
    pub(crate) fn lease(
        key: &RouteKey,
        limits: &'a [Limit],
        now_millis: Option<u64>,
        receipt: &'a Receipt,
        renew: bool,
    ) -> Self {
        ScriptCall {
            keys: limits.iter().map(|limit| key.limit_key(limit)).collect(),
            now_millis,
            member: receipt.member().unwrap_or_default().to_owned(),
            limits,
            script: *GIVE_BACK,
            action: Action::Lease { renew },
        }
    }

    /// Encodes a peek at `request`: what its check would answer now, counting nothing.
    /// `request.limits` must not be empty.
    pub(crate) fn peek(request: &CheckRequest<'a>) -> Self {
        ScriptCall {
            script: *PEEK,
            action: Action::Peek,
            member: String::new(),
            ..ScriptCall::new(request)
        }
    }

    /// Encodes `units` concurrent checks of `request`, whose limits have no block and count
    /// every request.
    pub(crate) fn batch(request: &CheckRequest<'a>, units: u32) -> Self {
        ScriptCall {
            script: *BATCH,
            action: Action::Batch { units },
            ..ScriptCall::new(request)
        }
    }

    /// Encodes a check of `request` that may wait up to `wait` for its turn. `request.limits`
    /// must not be empty, and none may have a block or be a concurrency limit.
    pub(crate) fn reserve(request: &CheckRequest<'a>, wait: Duration) -> Self {
        ScriptCall {
            script: *RESERVE,
            action: Action::Reserve {
                wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            },
            ..ScriptCall::new(request)
        }
    }

    /// The sliding-log member this call logs, or `""`.
    pub(crate) fn member(&self) -> &str {
        &self.member
    }

    /// The first key: every key of one call shares its hash tag, so its Cluster slot.
    pub(crate) fn first_key(&self) -> &str {
        self.keys.first().map_or("", String::as_str)
    }

    /// `EVALSHA <sha> <n> KEYS.. ARGV..`.
    pub(crate) fn evalsha(&self) -> redis::Cmd {
        self.command("EVALSHA", self.script.sha1)
    }

    /// `EVAL <source> <n> KEYS.. ARGV..`.
    pub(crate) fn eval(&self) -> redis::Cmd {
        self.command("EVAL", self.script.source)
    }

    fn command(&self, name: &str, script: &str) -> redis::Cmd {
        // Sized up front: a check's command is built on every request, and growing its two
        // vectors argument by argument cost more allocations than the rest of the call.
        let args = 6 + self.keys.len() + 5 * self.limits.len();
        let mut code = String::new();
        let data = name.len()
            + script.len()
            + self.member.len()
            + self.keys.iter().map(String::len).sum::<usize>()
            + 24 * (1 + self.limits.len());
        let mut cmd = redis::Cmd::with_capacity(args, data);
        cmd.arg(name)
            .arg(script)
            .arg(self.keys.len())
            .arg(&self.keys);
        match self.now_millis {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        match (self.action, self.limits) {
            (Action::Batch { units }, limits) => {
                cmd.arg(units).arg(&self.member);
                for limit in limits {
                    cmd.arg(algorithm_code(limit.algorithm()))
                        .arg(limit.max())
                        .arg(limit.window().as_millis());
                }
            }
            (Action::Check, [limit]) if !limit.is_ban() => {
                cmd.arg(limit.max()).arg(limit.window().as_millis());
                if limit.algorithm() == Algorithm::SlidingLog {
                    cmd.arg(&self.member);
                }
                if let Some(block) = limit.block() {
                    cmd.arg(block.as_millis());
                }
                if limit.cost() != 1 {
                    cmd.arg(limit.cost());
                }
            }
            (Action::Check | Action::Peek | Action::Reserve { .. }, limits) => {
                cmd.arg(&self.member);
                for limit in limits {
                    // A cost other than 1 rides on the code (`fw:10`): a stack without one
                    // sends four arguments a limit.
                    if let Some(ban) = limit.ban_code() {
                        // A cost never rides on a ban.
                        cmd.arg(ban);
                    } else if limit.cost() == 1 {
                        cmd.arg(algorithm_code(limit.algorithm()));
                    } else {
                        code.clear();
                        code.push_str(algorithm_code(limit.algorithm()));
                        code.push(':');
                        code.push_str(itoa::Buffer::new().format(limit.cost()));
                        cmd.arg(code.as_str());
                    }
                    cmd.arg(limit.max())
                        .arg(limit.window().as_millis())
                        .arg(limit.block().map_or(0, |block| block.as_millis()));
                }
                if let Action::Reserve { wait_ms } = self.action {
                    cmd.arg(wait_ms);
                }
            }
            (Action::Reset, _) => {
                cmd.arg("reset");
            }
            (Action::Lease { renew }, limits) => {
                cmd.arg(if renew { "renew" } else { "release" });
                for limit in limits {
                    let code = if limit.is_concurrency() {
                        "cc"
                    } else {
                        algorithm_code(limit.algorithm())
                    };
                    cmd.arg(code)
                        .arg(limit.max())
                        .arg(limit.window().as_millis())
                        .arg(1)
                        .arg(&self.member);
                }
            }
            (Action::Charge { units }, limits) => {
                cmd.arg("charge");
                for limit in limits {
                    cmd.arg(algorithm_code(limit.algorithm()))
                        .arg(limit.max())
                        .arg(limit.window().as_millis())
                        .arg(units)
                        .arg(&self.member);
                }
            }
            (Action::GiveBack { units, receipt }, limits) => {
                match receipt {
                    Some(receipt) => cmd.arg(receipt.counted_at_millis()),
                    None => cmd.arg(""),
                };
                for limit in limits {
                    cmd.arg(algorithm_code(limit.algorithm()))
                        .arg(limit.max())
                        .arg(limit.window().as_millis())
                        .arg(give_back_units(units, receipt.is_some(), limit));
                    match receipt {
                        Some(_) if limit.algorithm() == Algorithm::SlidingLog => {
                            cmd.arg(&self.member)
                        }
                        _ => cmd.arg(""),
                    };
                }
            }
        }
        cmd
    }
}

/// The units a give-back of `units` returns to `limit`: with a receipt, `units` counts checks,
/// each of which counted the limit's cost; without one, units as given.
pub(crate) fn give_back_units(units: u32, with_receipt: bool, limit: &Limit) -> u64 {
    if with_receipt {
        // Never past what the scripts take (a give-back never exceeds a whole budget anyway).
        (u64::from(units) * u64::from(limit.cost())).min(u64::from(u32::MAX))
    } else {
        u64::from(units)
    }
}

/// Decodes the script's reply for `request`.
pub(crate) fn decode(
    request: &CheckRequest<'_>,
    member: &str,
    reply: Value,
) -> Result<Decision, StoreError> {
    let text = reply_text(&reply)?;
    let expected = 4 * request.limits.len() + 1;
    let mut numbers = text.split(|&byte| byte == b' ').map(|word| {
        parse_count(word).ok_or_else(|| {
            protocol(format!(
                "expected non-negative integers, got `{}`",
                String::from_utf8_lossy(text)
            ))
        })
    });
    let mut limits = Vec::with_capacity(request.limits.len());
    let mut next = || {
        numbers.next().unwrap_or_else(|| {
            Err(protocol(format!(
                "expected {expected} integers for {} limits, got `{}`",
                request.limits.len(),
                String::from_utf8_lossy(text)
            )))
        })
    };
    for limit in request.limits {
        let allowed = match next()? {
            0 => false,
            1 => true,
            other => {
                return Err(protocol(format!(
                    "expected 0 or 1 for allowed, got {other} in `{}`",
                    String::from_utf8_lossy(text)
                )))
            }
        };
        limits.push(LimitState {
            limit: *limit,
            allowed,
            remaining: u32::try_from(next()?).unwrap_or(u32::MAX),
            retry_after: Duration::from_millis(next()?),
            reset_after: Duration::from_millis(next()?),
        });
    }
    let counted_at = next()?;
    if numbers.next().is_some() {
        return Err(protocol(format!(
            "expected {expected} integers for {} limits, got `{}`",
            request.limits.len(),
            String::from_utf8_lossy(text)
        )));
    }
    let decision = Decision::new(limits);
    Ok(if decision.allowed {
        let member = (!member.is_empty()).then(|| member.to_owned());
        decision.with_receipt(Receipt::new(counted_at, member))
    } else {
        decision
    })
}

/// Decodes the reservation script's reply for `request`: a check's reply, then the time
/// the request was counted at (its turn), which its receipt names.
pub(crate) fn decode_reserved(
    request: &CheckRequest<'_>,
    member: &str,
    reply: Value,
) -> Result<Decision, StoreError> {
    let text = reply_text(&reply)?;
    let split = text.iter().rposition(|&byte| byte == b' ');
    let (check, turn) = match split {
        Some(at) => (&text[..at], parse_count(&text[at + 1..])),
        None => (text, None),
    };
    let Some(turn) = turn else {
        return Err(protocol(format!(
            "expected the time of the turn last, got `{}`",
            String::from_utf8_lossy(text)
        )));
    };
    let mut decision = decode(request, member, Value::BulkString(check.to_vec()))?;
    if let Some(receipt) = decision.receipt.take() {
        let now = receipt.counted_at_millis();
        let member = receipt.member().map(str::to_owned);
        decision = decision
            .with_receipt(Receipt::new(turn, member))
            .waiting(Duration::from_millis(turn.saturating_sub(now)));
    }
    Ok(decision)
}

/// What a batch of concurrent checks of one key came to: the first `passed` of them pass,
/// the others are refused; `limits` holds each limit's figures, in the request's order.
/// The passed ones were counted at `counted_at_millis` on the store's clock, the `j`-th
/// (from 1) logged as `<member>:<j>` in its sliding logs (`member` empty: no log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchOutcome {
    pub(crate) passed: u32,
    pub(crate) limits: Vec<BatchLimit>,
    pub(crate) counted_at_millis: u64,
    pub(crate) member: String,
}

impl BatchOutcome {
    /// Where the `index`-th (from 0) passed check was counted, for an exact give-back.
    pub(crate) fn receipt(&self, index: usize) -> Receipt {
        let member = (!self.member.is_empty()).then(|| {
            let mut numbers = itoa::Buffer::new();
            let index = numbers.format(index + 1);
            let mut member = String::with_capacity(self.member.len() + 1 + index.len());
            member.push_str(&self.member);
            member.push(':');
            member.push_str(index);
            member
        });
        Receipt::new(self.counted_at_millis, member)
    }
}

/// One limit's figures after a batch: what the last passed check is told (`remaining`,
/// `reset_after`), and what every refused one is (`then`: what a check arriving after the
/// passed ones is told by this limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchLimit {
    pub(crate) remaining: u32,
    pub(crate) reset_after: Duration,
    pub(crate) then: (bool, u32, Duration, Duration),
}

/// Decodes the batch script's reply for `limits`: `passed`, then per limit `remaining
/// reset_after allowed remaining retry_after_ms reset_after_ms` (the first reset in ms, for
/// GCRA in µs), then `now_ms`; `member` is the prefix the call logged under.
pub(crate) fn decode_batch(
    reply: Value,
    limits: &[Limit],
    member: &str,
) -> Result<BatchOutcome, StoreError> {
    let algorithms = limits;
    let limits = limits.len();
    let text = reply_text(&reply)?;
    let wrong = || {
        protocol(format!(
            "expected {} non-negative integers for {limits} limits, got `{}`",
            6 * limits + 2,
            String::from_utf8_lossy(text)
        ))
    };
    let numbers: Vec<u64> = text
        .split(|&byte| byte == b' ')
        .map(parse_count)
        .collect::<Option<_>>()
        .ok_or_else(wrong)?;
    if numbers.len() != 6 * limits + 2 {
        return Err(wrong());
    }
    let count = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    let limits = numbers[1..numbers.len() - 1]
        .chunks_exact(6)
        .zip(algorithms)
        .map(|(figures, limit)| match figures {
            &[remaining, reset, allowed @ (0 | 1), then_remaining, retry, then_reset] => {
                Ok(BatchLimit {
                    remaining: count(remaining),
                    reset_after: if limit.algorithm() == Algorithm::Gcra {
                        Duration::from_micros(reset)
                    } else {
                        Duration::from_millis(reset)
                    },
                    then: (
                        allowed == 1,
                        count(then_remaining),
                        Duration::from_millis(retry),
                        Duration::from_millis(then_reset),
                    ),
                })
            }
            _ => Err(wrong()),
        })
        .collect::<Result<_, _>>()?;
    Ok(BatchOutcome {
        passed: count(numbers[0]),
        limits,
        counted_at_millis: numbers[numbers.len() - 1],
        member: member.to_owned(),
    })
}

/// A check script's reply: one string of integers.
fn reply_text(reply: &Value) -> Result<&[u8], StoreError> {
    match reply {
        Value::BulkString(bytes) => Ok(bytes.as_slice()),
        Value::SimpleString(text) => Ok(text.as_bytes()),
        other => Err(protocol(format!(
            "expected a string of integers, got {other:?}"
        ))),
    }
}

/// Decodes the give-back script's reply: the units it gave back (the keys it deleted, for
/// a reset).
pub(crate) fn decode_given(reply: Value) -> Result<u64, StoreError> {
    match reply {
        Value::Int(given) => u64::try_from(given)
            .map_err(|_| protocol(format!("expected the units given back, got {given}"))),
        other => Err(protocol(format!(
            "expected the units given back, got {other:?}"
        ))),
    }
}

/// A decimal count: one or more ASCII digits that fit a `u64`.
fn parse_count(word: &[u8]) -> Option<u64> {
    if word.is_empty() {
        return None;
    }
    word.iter().try_fold(0u64, |n, &byte| {
        let digit = byte.checked_sub(b'0').filter(|d| *d <= 9)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

fn protocol(message: String) -> StoreError {
    StoreError::new(
        StoreErrorKind::Protocol,
        format!("check script reply: {message}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        key::RouteKey,
        policy::{Algorithm, IdentityPart, Limit, Window},
    };

    #[test]
    fn members_are_the_prefix_and_the_counter_in_hex_as_format_writes_them() {
        let mut n = 1u64;
        for value in [0, 1, 9, 10, 15, 16, 255, 256, 4095, u64::MAX - 1, u64::MAX]
            .into_iter()
            .chain(std::iter::from_fn(|| {
                n = n
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                Some(n >> (n % 64))
            }))
            .take(1_000)
        {
            let mut hex = String::new();
            push_hex(&mut hex, value);
            assert_eq!(hex, format!("{value:x}"));
        }
        let (first, second) = (unique_member(), unique_member());
        assert_ne!(first, second);
        for member in [first, second] {
            assert!(member.starts_with(MEMBER_PREFIX.as_str()), "{member}");
            assert_eq!(MEMBER_PREFIX.len(), 16);
            assert!(member.bytes().all(|b| b.is_ascii_hexdigit()), "{member}");
        }
    }

    #[test]
    fn a_batch_receipt_names_the_member_of_each_passed_check() {
        let outcome = BatchOutcome {
            passed: 3,
            limits: Vec::new(),
            counted_at_millis: 7,
            member: "abc".to_owned(),
        };
        assert_eq!(outcome.receipt(0).member(), Some("abc:1"));
        assert_eq!(outcome.receipt(11).member(), Some("abc:12"));
        assert_eq!(outcome.receipt(0).counted_at_millis(), 7);
        let unlogged = BatchOutcome {
            member: String::new(),
            ..outcome
        };
        assert_eq!(unlogged.receipt(0).member(), None);
    }

    fn request<'a>(key: &'a RouteKey, limits: &'a [Limit]) -> CheckRequest<'a> {
        CheckRequest {
            key,
            limits,
            now_millis: Some(1_700_000_040_000),
        }
    }

    #[test]
    fn the_general_script_holds_every_algorithms_peek_and_commit_and_defines_no_function() {
        let order = [
            "-- clock.lua",
            "-- bounds.lua",
            "-- fixed_window_peek.lua",
            "-- sliding_window_peek.lua",
            "-- sliding_log_peek.lua",
            "-- gcra_peek.lua",
            "-- fixed_window_commit.lua",
            "-- sliding_window_commit.lua",
            "-- sliding_log_commit.lua",
            "-- gcra_commit.lua",
        ];
        let positions: Vec<usize> = order
            .iter()
            .map(|s| CHECK_SCRIPT.find(s).expect(s))
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
        assert!(!CHECK_SCRIPT.contains("replicate_commands("));
        assert_eq!(check_script_sha1().len(), 40);
        for source in SOURCES {
            assert!(!source.contains("--@include"), "every include is expanded");
            assert!(
                !source.contains("function"),
                "no script makes a function on every call"
            );
        }
    }

    #[test]
    fn a_limit_alone_runs_its_own_algorithms_script_and_a_stack_the_general_one() {
        let stack = [
            Limit::new(5, Window::from_secs(1), Algorithm::Gcra),
            Limit::new(100, Window::from_secs(60), Algorithm::SlidingWindow),
        ];
        let general = check_script(&stack);
        assert_eq!(general.source(), CHECK_SCRIPT);
        assert_eq!(general.sha1(), check_script_sha1());
        let mut digests = vec![general.sha1()];
        for algorithm in Algorithm::ALL {
            let script = check_script(&[Limit::new(5, Window::from_secs(1), algorithm)]);
            let name = algorithm.as_str();
            assert!(
                script.source().starts_with(&format!("-- {name}.lua: ")),
                "{algorithm}"
            );
            let own = if algorithm == Algorithm::FixedWindow {
                "-- fixed_window_decide.lua".to_owned()
            } else {
                format!("-- {name}_peek.lua")
            };
            assert!(script.source().contains(&own), "{algorithm}");
            for other in Algorithm::ALL.iter().filter(|a| **a != algorithm) {
                let theirs = format!("-- {}_", other.as_str());
                assert!(!script.source().contains(&theirs), "{algorithm}: {other}");
            }
            assert_eq!(script.sha1().len(), 40);
            digests.push(script.sha1());
        }
        digests.sort_unstable();
        digests.dedup();
        assert_eq!(digests.len(), 5, "five distinct scripts");
    }

    #[test]
    fn keys_and_arguments_follow_the_protocol() {
        let key = RouteKey::new("rl", "POST", "/login", &[(IdentityPart::Ip, "1.2.3.4")]);
        let limits = [
            Limit::new(5, Window::from_secs(60), Algorithm::SlidingLog),
            Limit::new(100, Window::from_secs(3600), Algorithm::FixedWindow),
        ];
        let call = ScriptCall::new(&request(&key, &limits));
        assert_eq!(
            call.keys,
            [
                "rl:{POST:/login|ip:1.2.3.4}:sl60000",
                "rl:{POST:/login|ip:1.2.3.4}:fw3600000"
            ]
        );
        let args = words(&call.evalsha());
        assert_eq!(args[0], "EVALSHA");
        assert_eq!(args[1], check_script_sha1());
        assert_eq!(args[2], "2", "two keys");
        assert_eq!(args[5], "1700000040000");
        assert_eq!(
            &args[7..],
            ["sl", "5", "60000", "0", "fw", "100", "3600000", "0"]
        );
        // A cost other than 1 rides on its limit's code.
        let weighed = [limits[0], limits[1].costing(7)];
        let weighed_args = words(&ScriptCall::new(&request(&key, &weighed)).evalsha());
        assert_eq!(
            &weighed_args[7..],
            ["sl", "5", "60000", "0", "fw:7", "100", "3600000", "0"]
        );
        let other = ScriptCall::new(&CheckRequest {
            now_millis: None,
            ..request(&key, &limits)
        });
        let other_args = words(&other.eval());
        assert_eq!(other_args[0], "EVAL");
        assert_eq!(other_args[1], CHECK_SCRIPT);
        assert_eq!(other_args[5], "");
        assert_ne!(args[6], other_args[6], "members are unique per request");

        // A limit alone: the time, its max and window, and the member for a sliding log only.
        for (limit, member) in [(limits[1], false), (limits[0], true)] {
            let alone = [limit];
            let args = words(&ScriptCall::new(&request(&key, &alone)).evalsha());
            assert_eq!(args[1], check_script(&alone).sha1());
            assert_eq!(args[2], "1", "one key");
            assert_eq!(args[3], key.limit_key(&limit));
            let bounds = [
                limit.max().to_string(),
                limit.window().as_millis().to_string(),
            ];
            assert_eq!(args[4..7], ["1700000040000", &bounds[0], &bounds[1]]);
            assert_eq!(args.len(), if member { 8 } else { 7 }, "{args:?}");
            // A cost other than 1 goes after the others.
            let weighed = [limit.costing(3)];
            let args = words(&ScriptCall::new(&request(&key, &weighed)).evalsha());
            assert_eq!(args.len(), if member { 9 } else { 8 }, "{args:?}");
            assert_eq!(args.last().map(String::as_str), Some("3"));
        }
    }

    /// Every argument of a command, as text.
    fn words(cmd: &redis::Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8(bytes.to_vec()).unwrap(),
                _ => "<not a simple argument>".to_owned(),
            })
            .collect()
    }

    #[test]
    fn replies_decode_into_one_state_per_limit() {
        let key = RouteKey::new("rl", "GET", "/x", &[]);
        let limits = [
            Limit::new(5, Window::from_secs(60), Algorithm::Gcra),
            Limit::new(9, Window::from_secs(60), Algorithm::FixedWindow),
        ];
        let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let decision = decode(
            &request(&key, &limits),
            "",
            text("1 4 0 12000 0 0 7000 7000 5"),
        )
        .unwrap();
        assert!(!decision.allowed);
        assert!(decision.limits[0].allowed);
        assert_eq!(decision.limits[0].remaining, 4);
        assert_eq!(
            decision.limits[0].reset_after,
            Duration::from_millis(12_000)
        );
        assert!(!decision.limits[1].allowed);
        assert_eq!(decision.limits[1].retry_after, Duration::from_millis(7_000));
        assert_eq!(decision.limits[1].limit, limits[1]);
        // A remaining count past u32 is capped, not wrapped.
        let alone = &limits[..1];
        let decision = decode(
            &request(&key, alone),
            "m1",
            text("1 18446744073709551615 0 1 77"),
        )
        .unwrap();
        assert_eq!(decision.limits[0].remaining, u32::MAX);
        // An allowed check's receipt: the time the script counted it at, and its member.
        assert_eq!(
            decision.receipt,
            Some(Receipt::new(77, Some("m1".to_owned())))
        );

        for bad in [
            text("1 4 0"),
            text("1 4 0 12000 0 0 7000 7000"),
            text("1 4 0 12000 0 0 7000 7000 1 1"),
            text("1 4 -1 12000 0 0 7000 7000 5"),
            text("2 4 0 12000 0 0 7000 7000 5"),
            text("1 4 0 12000  0 7000 7000 5"),
            text("1 4 0 1.5 0 0 7000 7000 5"),
            text("1 4 0 12000 0 0 7000 18446744073709551616 5"),
            text(""),
            Value::Array(
                [1, 4, 0, 12_000, 0, 0, 7_000, 7_000]
                    .map(Value::Int)
                    .to_vec(),
            ),
            Value::Okay,
        ] {
            let err = decode(&request(&key, &limits), "", bad.clone()).unwrap_err();
            assert_eq!(err.kind(), StoreErrorKind::Protocol, "{bad:?}");
        }
    }

    #[test]
    fn a_batch_reply_gives_the_passed_count_and_each_limits_two_views() {
        let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let limits = [
            Limit::new(10, Window::from_secs(60), Algorithm::FixedWindow),
            Limit::new(5, Window::from_secs(3), Algorithm::Gcra),
        ];
        let outcome = decode_batch(
            text("3 7 60000 0 0 60000 60000 2 3000000 1 1 0 3000 5"),
            &limits,
            "m7",
        )
        .unwrap();
        assert_eq!(outcome.passed, 3);
        assert_eq!(outcome.receipt(1), Receipt::new(5, Some("m7:2".to_owned())));
        assert_eq!(
            outcome.limits,
            vec![
                BatchLimit {
                    remaining: 7,
                    reset_after: Duration::from_secs(60),
                    then: (false, 0, Duration::from_secs(60), Duration::from_secs(60)),
                },
                BatchLimit {
                    remaining: 2,
                    reset_after: Duration::from_secs(3),
                    then: (true, 1, Duration::ZERO, Duration::from_secs(3)),
                },
            ]
        );
        for (bad, limits_given) in [
            ("3 7 60000 0 0 60000 60000 5", 2),
            ("3 7 60000 2 0 60000 60000 5", 1),
            ("3 7 60000 0 0 60000 60000 2 3000 1 1 0 3000", 2),
            ("3 -7 60000 0 0 60000 60000 5", 1),
            ("", 1),
        ] {
            let err = decode_batch(text(bad), &limits[..limits_given], "").unwrap_err();
            assert_eq!(err.kind(), StoreErrorKind::Protocol, "{bad:?}");
        }
    }
}
