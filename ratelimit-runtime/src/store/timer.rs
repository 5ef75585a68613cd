//! Timeouts of store calls that do not wake the runtime's driver, and that never give up a
//! call whose answer came in time ([`within`]).
//!
//! Every store call is bounded by a Tokio timer. Registering a timer due earlier than any
//! the driver knows of makes Tokio wake its driver (an `eventfd` write, then one more return
//! from `epoll_wait`), and on a worker with no other timer pending, as between the requests
//! of one connection, that is every call: two system calls per request that do nothing.
//!
//! So a current-thread runtime (each actix-web worker runs one) that makes store calls keeps
//! a timer keeper: one task holding two timers of its own, half a [`PERIOD`] apart, each
//! set a period on when it fires. One of them is always due within half a period, so a
//! call's timer due later than that (the default timeout is 50 ms) is never the earliest,
//! and is registered without waking anything. The keeper costs one task wake-up per half
//! period and stops when two in a row fire with no call made. It changes no timer's deadline:
//! a call times out when it did without it.

use std::{
    cell::Cell,
    future::{poll_fn, Future},
    pin::{pin, Pin},
    task::Poll,
    time::Duration,
};

use tokio::{
    runtime::{Handle, RuntimeFlavor},
    time::{error::Elapsed, Instant, Sleep},
};

/// How long each of the keeper's two timers runs: a call's timer due later than half of it
/// registers without a wake-up.
pub(crate) const PERIOD: Duration = Duration::from_millis(20);

thread_local! {
    /// This thread's keeper: whether it runs, and whether a call was made since one of its
    /// timers last fired.
    static KEEPER: Cell<Keeper> = const { Cell::new(Keeper::STOPPED) };
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Keeper {
    running: bool,
    used: bool,
}

impl Keeper {
    const STOPPED: Keeper = Keeper {
        running: false,
        used: false,
    };
    const USED: Keeper = Keeper {
        running: true,
        used: true,
    };
}

/// `future` bounded by `timeout`, as [`tokio::time::timeout`], with this thread's keeper
/// running, and one rule more: an answer that came in time is never a timeout.
///
/// A worker busy past a call's deadline (a handler computing on its thread, the process
/// descheduled) wakes with the call's timer fired and its answer waiting in the socket,
/// unread: the connection's own task reads it, and may run after the caller. So at the
/// deadline the caller lets the tasks already woken run once (a yield, microseconds) and
/// looks at its call again before giving it up; a call still unanswered then fails as at the
/// deadline.
pub(crate) fn within<F: Future>(
    timeout: Duration,
    future: F,
) -> impl Future<Output = Result<F::Output, Elapsed>> {
    keep_ahead();
    // From now, as `tokio::time::timeout` counts; a deadline past the clock's end is none.
    let deadline = Instant::now().checked_add(timeout);
    async move {
        match deadline {
            Some(deadline) => until(deadline, future).await,
            None => Ok(future.await),
        }
    }
}

/// `future` bounded by `deadline`, as [`tokio::time::timeout_at`], where an answer that came
/// in time is never a timeout (see [`within`]), and without the keeper: for calls bounded
/// by a deadline of their own (a Cluster's or a Sentinel's command, each try within the
/// call's time).
pub(crate) async fn until<F: Future>(deadline: Instant, future: F) -> Result<F::Output, Elapsed> {
    let mut future = pin!(future);
    let elapsed = match tokio::time::timeout_at(deadline, future.as_mut()).await {
        Ok(output) => return Ok(output),
        Err(elapsed) => elapsed,
    };
    tokio::task::yield_now().await;
    match poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await {
        Poll::Ready(output) => Ok(output),
        Poll::Pending => Err(elapsed),
    }
}

/// Marks a call made, and starts the keeper on a current-thread runtime where none runs. A
/// multi-thread runtime's driver may be parked on another thread, where only a wake-up tells
/// it of an earlier timer: there the timer is registered as it is.
fn keep_ahead() {
    let keeper = KEEPER.get();
    if keeper == Keeper::USED {
        return;
    }
    if keeper.running {
        KEEPER.set(Keeper::USED);
        return;
    }
    let Ok(runtime) = Handle::try_current() else {
        return;
    };
    if runtime.runtime_flavor() != RuntimeFlavor::CurrentThread {
        return;
    }
    KEEPER.set(Keeper::USED);
    runtime.spawn(keep());
}

/// The keeper: until two of its timers in a row fire with no call made meanwhile.
fn keep() -> impl Future<Output = ()> + Send {
    // The keeper stops when its task ends or is dropped with its runtime, polled or not.
    struct Stopped;
    impl Drop for Stopped {
        fn drop(&mut self) {
            KEEPER.set(Keeper::STOPPED);
        }
    }
    let stopped = Stopped;
    async move {
        let _stopped = stopped;
        run().await;
    }
}

async fn run() {
    let start = Instant::now();
    let mut timers: [Pin<Box<Sleep>>; 2] = [
        Box::pin(tokio::time::sleep_until(start + PERIOD / 2)),
        Box::pin(tokio::time::sleep_until(start + PERIOD)),
    ];
    let mut idle = 0;
    loop {
        let fired = poll_fn(|cx| {
            match timers
                .iter_mut()
                .position(|timer| timer.as_mut().poll(cx).is_ready())
            {
                Some(fired) => Poll::Ready(fired),
                None => Poll::Pending,
            }
        })
        .await;
        if KEEPER
            .replace(Keeper {
                running: true,
                used: false,
            })
            .used
        {
            idle = 0;
        } else {
            idle += 1;
            if idle == 2 {
                return;
            }
        }
        // A period after it was due, which keeps the two half a period apart; from now at
        // the earliest, after a worker was busy longer than that.
        let timer = &mut timers[fired];
        let next = (timer.deadline() + PERIOD).max(Instant::now());
        timer.as_mut().reset(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keeper() -> Keeper {
        KEEPER.get()
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_call_starts_the_keeper_and_a_whole_period_without_one_stops_it() {
        assert_eq!(keeper(), Keeper::STOPPED);
        assert_eq!(within(Duration::from_millis(50), async { 7 }).await, Ok(7));
        assert_eq!(keeper(), Keeper::USED);
        // Calls every few ms keep it running.
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(3)).await;
            within(Duration::from_millis(50), async {}).await.unwrap();
            assert!(keeper().running);
        }
        tokio::time::sleep(PERIOD / 2 + Duration::from_millis(1)).await;
        assert!(keeper().running, "one idle timer does not stop it");
        tokio::time::sleep(PERIOD * 2).await;
        assert_eq!(keeper(), Keeper::STOPPED);
        // The next call starts it again.
        within(Duration::from_millis(50), async {}).await.unwrap();
        assert_eq!(keeper(), Keeper::USED);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_call_times_out_at_its_deadline_while_the_keeper_runs() {
        for timeout in [1, 9, 10, 11, 37, 50, 1000] {
            let timeout = Duration::from_millis(timeout);
            let started = Instant::now();
            let call = within(timeout, std::future::pending::<()>());
            assert_eq!(keeper(), Keeper::USED);
            assert!(call.await.is_err());
            assert_eq!(started.elapsed(), timeout);
        }
    }

    #[test]
    fn no_keeper_outside_a_runtime_or_on_a_multi_thread_one() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            within(Duration::from_millis(50), async {}).await.unwrap();
        });
        assert_eq!(keeper(), Keeper::STOPPED);
        drop(runtime);
        keep_ahead();
        assert_eq!(keeper(), Keeper::STOPPED);
    }

    #[test]
    fn a_keeper_dropped_with_its_runtime_lets_the_next_runtime_start_one() {
        for _ in 0..2 {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                within(Duration::from_millis(50), async {}).await.unwrap();
                assert_eq!(keeper(), Keeper::USED);
            });
            drop(runtime);
            assert_eq!(keeper(), Keeper::STOPPED);
        }
    }
}
