use super::{problems::line, Problems};

/// How the limiter holds up while the store fails or a flood arrives: the fleet's size, by
/// which a route that fails `local` shares its limit, and the flood shield. Given to
/// [`RateLimiter::failure`](crate::RateLimiter::failure). How long a request waits for the
/// store is the store's timeout, set on its builder.
///
/// ```
/// use ratelimit_runtime::{settings::Failure, store::MemoryStore, RateLimiter};
///
/// let limiter = RateLimiter::new(MemoryStore::new())
///     .failure(Failure::new().instances(4).flood_shield_capacity(50_000));
/// assert!(limiter.check_settings().is_ok());
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Failure {
    pub(crate) instances: u32,
    /// Whether [`instances`](Self::instances) was given.
    pub(crate) instances_set: bool,
    pub(crate) shield_capacity: usize,
    /// How many requests may wait for their turn at once per worker.
    pub(crate) max_waiting: usize,
    problems: Problems,
}

/// How many requests of routes with `wait` may wait for their turn at once in one worker,
/// unless [`Failure::max_waiting`] says otherwise.
pub const DEFAULT_MAX_WAITING: usize = 1024;

impl Default for Failure {
    fn default() -> Self {
        Failure {
            instances: 1,
            instances_set: false,
            shield_capacity: 10_000,
            max_waiting: DEFAULT_MAX_WAITING,
            problems: Problems::default(),
        }
    }
}

impl Failure {
    /// The defaults: one instance (and a warning at startup when a route fails `local`), a
    /// shield of 10,000 keys, at most [`DEFAULT_MAX_WAITING`] requests waiting per worker.
    pub fn new() -> Self {
        Failure::default()
    }

    /// How many instances of the app share the store (default 1). While the store fails, a
    /// route that fails `local` is limited in each process at `ceil(limit / instances)`, so
    /// a fleet of this many instances lets through at most `instances × ceil(limit /
    /// instances)` (the declared limit when `instances` divides it). The workers of one
    /// process share that share when they share this limiter, cloned into each worker's App
    /// as the examples do; a limiter built inside the server's closure is one per worker.
    /// 0 is refused ([`check_settings`](crate::RateLimiter::check_settings)).
    pub fn instances(mut self, instances: u32) -> Self {
        let setting = "`RateLimiter::failure(..).instances(..)`";
        if instances == 0 {
            let line = line(
                "`RateLimiter::failure(..).instances(0)`",
                "a fleet has at least one instance",
            );
            self.problems.record(setting, Err(line));
        } else {
            self.instances = instances;
            self.instances_set = true;
            self.problems.record(setting, Ok(()));
        }
        self
    }

    /// How many rejected keys the flood shield remembers per process (default 10,000;
    /// 0 turns it off).
    pub fn flood_shield_capacity(mut self, capacity: usize) -> Self {
        self.shield_capacity = capacity;
        self
    }

    /// How many requests of routes with `wait` may wait for their turn at once in one
    /// worker (default [`DEFAULT_MAX_WAITING`]), counted from the store call that finds the
    /// turn until the request runs: each holds its connection and its request meanwhile. A
    /// request that arrives when that many wait is decided at once, as on a route without
    /// `wait` (allowed if the budget has room now, else refused); 0 turns waiting off.
    pub fn max_waiting(mut self, requests: usize) -> Self {
        self.max_waiting = requests;
        self
    }

    pub(crate) fn problems(&self) -> impl Iterator<Item = &str> {
        self.problems.lines()
    }
}
