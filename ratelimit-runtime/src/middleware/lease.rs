//! The places a request holds in its route's concurrency limits
//! ([`Limit::concurrent`](crate::policy::Limit::concurrent)): taken by the request's check,
//! renewed while it runs, given back when its response body has been sent or its client went
//! away.

use std::{
    cell::RefCell,
    pin::Pin,
    rc::Rc,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use actix_web::{
    body::{BodySize, MessageBody},
    web::Bytes,
};
use pin_project_lite::pin_project;

use super::{local_fallback::LocalFallback, telemetry::RouteMetrics};
use crate::{
    clock::Clock,
    key::RouteKey,
    policy::Limit,
    store::{adjust_within, AdjustRequest, Adjustment, Receipt, Store},
};

/// The longest `Retry-After` a concurrency limit's refusal gives: places come back as
/// requests end, not at a window's edge, so the lease (when the oldest place would expire
/// were its instance dead) would tell a client to wait far longer than it likely has to.
pub(crate) const CONCURRENCY_RETRY: Duration = Duration::from_secs(1);

/// Where a request's places are, and how it reaches them: the limiter's store, or this
/// process's while the store failed (`fail = "local"`).
pub(crate) struct Places {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) fallback: Arc<LocalFallback>,
    pub(crate) clock: Clock,
    /// The limiter's timeout, when set (else the store's own).
    pub(crate) timeout: Option<Duration>,
}

/// What a lease needs after its request's check: shared by the request and its renewal
/// timer.
struct Held {
    places: Places,
    key: RouteKey,
    /// The route's concurrency limits (one per stack).
    limits: Vec<Limit>,
    /// Where the check took the places; for the memory store, with the time of the last
    /// renewal (the time a place counts from is how that store finds it).
    receipt: RefCell<Receipt>,
    /// Taken in this process while the store failed (`fail = "local"`): given back there.
    local: bool,
    /// `ratelimit_in_flight{route, policy}`.
    gauge: metrics::Gauge,
    route: String,
}

impl Held {
    fn store(&self) -> &dyn Store {
        if self.local {
            self.places.fallback.store()
        } else {
            &*self.places.store
        }
    }

    async fn change(&self, renew: bool) -> Result<u64, crate::store::StoreError> {
        let receipt = self.receipt.borrow().clone();
        let change = if renew {
            Adjustment::Renew { receipt: &receipt }
        } else {
            Adjustment::Release { receipt: &receipt }
        };
        let now = self.places.clock.now_millis();
        let request = AdjustRequest::new(&self.key, &self.limits, now, change);
        adjust_within(self.store(), self.places.timeout, request).await
    }

    /// Renews the places every third of the shortest lease until the request ends (the task
    /// is aborted then) or a place is found gone.
    async fn keep(self: Rc<Self>) {
        let lease = self
            .limits
            .iter()
            .map(|limit| limit.window().as_duration())
            .min()
            .unwrap_or(Duration::from_secs(1));
        loop {
            tokio::time::sleep(lease / 3).await;
            match self.change(true).await {
                Ok(0) => {
                    tracing::warn!(
                        target: "ratelimit",
                        route = %self.route,
                        "a request's concurrency place expired while it ran (its instance stalled longer than the lease, or the client's budget was reset); it runs on without one"
                    );
                    return;
                }
                Ok(ends) => {
                    // The memory store finds a place by the time it counts from.
                    let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
                    let mut receipt = self.receipt.borrow_mut();
                    *receipt = Receipt::new(
                        ends.saturating_sub(lease_ms),
                        receipt.member().map(str::to_owned),
                    );
                }
                Err(error) => {
                    // The next renewal tries again; the place lasts the lease meanwhile.
                    tracing::warn!(
                        target: "ratelimit",
                        route = %self.route,
                        %error,
                        "a concurrency place could not be renewed"
                    );
                }
            }
        }
    }
}

/// A request's places in its route's concurrency limits: given back before the end of its
/// response reaches the client ([`release`](Lease::release)), or when dropped (the client
/// went away, the handler failed or panicked).
pub(crate) struct Lease {
    held: Rc<Held>,
    renewal: Option<tokio::task::JoinHandle<()>>,
    /// Given back already (by [`release`](Lease::release)).
    released: bool,
}

impl Lease {
    /// The places the check with `receipt` took at `key` in `limits`' concurrency limits,
    /// when it took any; renewed from now on.
    pub(crate) fn taken(
        places: impl FnOnce() -> Places,
        key: &RouteKey,
        limits: &[Limit],
        receipt: Option<&Receipt>,
        local: bool,
        metrics: &RouteMetrics,
        route: &str,
    ) -> Option<Lease> {
        let limits: Vec<Limit> = limits
            .iter()
            .filter(|limit| limit.is_concurrency())
            .copied()
            .collect();
        if limits.is_empty() {
            return None;
        }
        let Some(receipt) = receipt else {
            // A store of the app's own that gives no receipt: its places expire with their
            // lease instead.
            tracing::warn!(
                target: "ratelimit",
                route,
                "the store gave no receipt for a concurrency place; it is held until its lease expires"
            );
            return None;
        };
        let gauge = metrics.in_flight();
        gauge.increment(1.0);
        let held = Rc::new(Held {
            places: places(),
            key: key.clone(),
            limits,
            receipt: RefCell::new(receipt.clone()),
            local,
            gauge,
            route: route.to_owned(),
        });
        let renewal = spawn(Rc::clone(&held).keep());
        Some(Lease {
            held,
            renewal,
            released: false,
        })
    }

    /// Gives the places back: one store call, bounded by the store's timeout. The request
    /// waits for it before the end of its response is sent, so that a client that sends its
    /// next request once it has the answer finds its place free. The call runs on its own:
    /// a request dropped while it waits (its client gone) still gives the places back.
    pub(crate) fn release(mut self) -> impl std::future::Future<Output = ()> + 'static {
        let task = self.give_back();
        async move {
            if let Some(task) = task {
                let _ = task.await;
            }
        }
    }

    /// Stops the renewals and gives the places back on a task of their own: its handle, or
    /// `None` (logged) outside the server's runtime, where the places expire with their lease.
    fn give_back(&mut self) -> Option<tokio::task::JoinHandle<()>> {
        self.released = true;
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
        }
        self.held.gauge.decrement(1.0);
        let task = spawn(release(Rc::clone(&self.held)));
        if task.is_none() {
            tracing::warn!(
                target: "ratelimit",
                route = %self.held.route,
                "a concurrency place was given back outside the server's runtime; it is free again when its lease expires"
            );
        }
        task
    }
}

async fn release(held: Rc<Held>) {
    if let Err(error) = held.change(false).await {
        tracing::warn!(
            target: "ratelimit",
            route = %held.route,
            %error,
            "a concurrency place could not be given back; it is free again when its lease expires"
        );
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.released {
            let _ = self.give_back();
        }
    }
}

/// `future` on this thread's runtime (an actix worker's), or `None` outside one (a lease
/// dropped while its runtime shuts down).
pub(crate) fn spawn(
    future: impl std::future::Future<Output = ()> + 'static,
) -> Option<tokio::task::JoinHandle<()>> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tokio::task::spawn_local(future)
    }))
    .ok()
}

pin_project! {
    /// A response body that holds its request's [`Lease`] until the body has been produced:
    /// the end of the response (its last chunk when its size is known, its end otherwise)
    /// waits for the places to be given back. Dropped before (its client gone), the places
    /// are given back then.
    pub(crate) struct LeaseBody<B> {
        #[pin]
        body: B,
        lease: Option<Lease>,
        // The bytes produced so far, against a known size.
        produced: u64,
        // The release under way, and the last chunk held until it is done.
        releasing: Option<Pin<Box<dyn std::future::Future<Output = ()>>>>,
        last: Option<Bytes>,
    }
}

impl<B> LeaseBody<B> {
    pub(crate) fn new(body: B, lease: Lease) -> Self {
        LeaseBody {
            body,
            lease: Some(lease),
            produced: 0,
            releasing: None,
            last: None,
        }
    }
}

impl<B: MessageBody> MessageBody for LeaseBody<B> {
    type Error = B::Error;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        let mut this = self.project();
        loop {
            if let Some(releasing) = this.releasing.as_mut() {
                std::task::ready!(releasing.as_mut().poll(cx));
                *this.releasing = None;
                // The last chunk, or the end.
                return Poll::Ready(this.last.take().map(Ok));
            }
            let size = this.body.size();
            let next = std::task::ready!(this.body.as_mut().poll_next(cx));
            let Some(lease) = this.lease.take() else {
                return Poll::Ready(next);
            };
            match next {
                Some(Ok(bytes)) => {
                    *this.produced += bytes.len() as u64;
                    match size {
                        BodySize::Sized(total) if *this.produced >= total => {
                            *this.last = Some(bytes);
                            *this.releasing = Some(Box::pin(lease.release()));
                        }
                        _ => {
                            *this.lease = Some(lease);
                            return Poll::Ready(Some(Ok(bytes)));
                        }
                    }
                }
                None => *this.releasing = Some(Box::pin(lease.release())),
                // Failed: the place goes back as the body is dropped.
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
            }
        }
    }
}
