//! The App-level service [`RateLimiter`] wraps an App's routing in: it predicts each
//! request's route from its path (as the router will match it), hands the declared ones to
//! their guards, counts after the fact what those guards never saw, and applies the default
//! policy to every other request.

use std::{
    cell::RefCell,
    collections::HashMap,
    future::Future,
    net::IpAddr,
    pin::Pin,
    rc::Rc,
    task::{Context, Poll},
};

use actix_web::{
    body::{EitherBody, MessageBody},
    dev::{Service, ServiceRequest, ServiceResponse, Transform},
    http::Method,
    introspection::IntrospectionTree,
    web, Error, HttpMessage,
};
use futures_util::future::{ready, LocalBoxFuture, Ready};
use pin_project_lite::pin_project;

use super::{
    attempt::Unlimited,
    declared_routes::DeclaredRoutes,
    enforce::is_refusal,
    limiter::{Granted, Limiter, LimiterHandle},
    rate_limiter::RateLimiter,
    route_info::{method_label, register_series, RouteInfo},
};
use crate::{
    identity::IdentitySources,
    policy::{Policy, RoutePolicy},
    registry::RouteDeclaration,
};

impl<S, B> Transform<S, ServiceRequest> for RateLimiter
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Transform = RateLimiterService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    /// Fails, so that the App does not start, when a setting was refused
    /// ([`RateLimiter::check_settings`]): the error is logged first, as actix-server logs
    /// only that a service could not start.
    fn new_transform(&self, service: S) -> Self::Future {
        // Inside the coverage check, which reports a limiter's refused settings with the
        // uncovered routes, it is built; else a refused setting refuses the App's start.
        if let Err(error) = self.check_settings() {
            self.rollout.found(error.problems());
        }
        let checking = super::declared_routes::limiter_built(&self.checked, &self.rollout);
        // The App's routes are known when the coverage check read them (at startup): their
        // series exist before the worker serves; else from its first request.
        if let Some(declared) = self.checked.get() {
            register_series(declared);
        }
        if !checking {
            if let Err(error) = self.check_settings() {
                tracing::error!(
                    target: "ratelimit",
                    problems = error.problems().len(),
                    "rate limiter settings refused, the App does not start:\n{error}"
                );
                return ready(Err(()));
            }
        }
        ready(Ok(RateLimiterService {
            service: Rc::new(service),
            limiter: self.worker_limiter(),
            config: self.clone(),
            defaults: RefCell::default(),
            patterns: RefCell::default(),
            unguarded: Rc::default(),
            counted_routes: Rc::default(),
        }))
    }
}

/// The service [`RateLimiter`] wraps an App's routing in.
pub struct RateLimiterService<S> {
    service: Rc<S>,
    limiter: Rc<Limiter>,
    config: RateLimiter,
    /// Undeclared routes seen so far, by method label and pattern (bounded: patterns come
    /// from the App, methods are folded by `method_label`).
    defaults: RefCell<DefaultRoutes>,
    /// The route pattern of each path seen lately (bounded), as the App's resource map
    /// matches it: the map does not change while the App serves, and matching it again
    /// for every request costs more than one lookup.
    patterns: RefCell<Patterns>,
    /// Declared-looking routes that a request reached without passing their guard: another
    /// resource on the same path served it. They get the default policy from then on.
    unguarded: Rc<RefCell<HashMap<String, Vec<Method>>>>,
    /// Declared routes as this middleware counts requests their guard never saw.
    counted_routes: Rc<CountedRoutes>,
}

/// Logs an error for every route a username reader was given for
/// ([`Identities::route_username`](crate::settings::Identities::route_username)) that is not a declared route of this App whose
/// identity counts usernames: its requests would be read by the limiter's default reader.
fn unmatched_username_readers(sources: &IdentitySources, declared: &DeclaredRoutes) {
    for route in sources.route_usernames.keys() {
        let found = route.split_once(' ').and_then(|(method, pattern)| {
            let method = Method::from_bytes(method.as_bytes()).ok()?;
            declared.declaration(&method, pattern)
        });
        let counts_usernames =
            matches!(found.map(|d| d.policy), Some(Policy::Limited(p)) if p.any_reads_username());
        if !counts_usernames {
            tracing::error!(
                target: "ratelimit",
                route = %route,
                "`Identities::route_username` names no declared route of this App that counts usernames: name it as `METHOD /full/pattern`, with its scope's prefix (`POST /api/login`); its requests are read by the default username reader meanwhile"
            );
        }
    }
}

/// Declared routes by full pattern and method (bounded: only patterns with a declaration).
type CountedRoutes = RefCell<HashMap<(String, Method), Rc<RouteInfo>>>;

/// The declared route a request to `pattern` with `method` counts in: the same key as its
/// guard's.
fn counted_route(
    routes: &CountedRoutes,
    declaration: &'static RouteDeclaration,
    pattern: String,
    method: Method,
    policy: RoutePolicy,
    declared: Option<&DeclaredRoutes>,
) -> Rc<RouteInfo> {
    let mut routes = routes.borrow_mut();
    let route = routes
        .entry((pattern, method))
        .or_insert_with_key(|(pattern, method)| {
            Rc::new(RouteInfo::declared(
                declaration,
                method,
                Some(pattern.clone()),
                policy,
                declared,
            ))
        });
    Rc::clone(route)
}

/// Where a request a declared route's guard never saw counts.
enum Counts {
    /// Against the declared limit.
    Declared(RoutePolicy),
    /// Under the default policy (the declaration is an exemption).
    Default(Rc<RouteInfo>),
}

/// Undeclared routes by method label and pattern.
type DefaultRoutes = HashMap<(&'static str, String), Rc<RouteInfo>>;

/// The most undeclared (method, pattern) pairs remembered per worker.
const MAX_REMEMBERED_DEFAULTS: usize = 1024;

/// Route patterns by path (`None`: no resource matches it).
type Patterns = HashMap<Box<str>, Option<Rc<str>>, foldhash::fast::RandomState>;

/// The most paths whose pattern is remembered per worker (full, it starts over, so that it
/// holds the paths requested lately), and the longest remembered: longer paths are matched
/// every time.
const MAX_REMEMBERED_PATHS: usize = 1024;
const MAX_REMEMBERED_PATH_LEN: usize = 256;

impl<S> RateLimiterService<S> {
    /// The route pattern `path` matches in the App's resource map, if any.
    fn pattern(&self, req: &ServiceRequest, path: &str) -> Option<Rc<str>> {
        if let Some(pattern) = self.patterns.borrow().get(path) {
            return pattern.clone();
        }
        let pattern: Option<Rc<str>> = req
            .request()
            .resource_map()
            .match_pattern(path)
            .map(Rc::from);
        if path.len() <= MAX_REMEMBERED_PATH_LEN {
            let mut patterns = self.patterns.borrow_mut();
            // A client walking many paths costs the others one match per path each time it
            // fills the memo, not one per request for good.
            if patterns.len() >= MAX_REMEMBERED_PATHS {
                patterns.clear();
            }
            patterns.insert(Box::from(path), pattern.clone());
        }
        pattern
    }

    fn default_route(&self, method: &Method, pattern: String) -> Rc<RouteInfo> {
        let mut defaults = self.defaults.borrow_mut();
        let method = method_label(method);
        let key = (method, pattern);
        if let Some(route) = defaults.get(&key) {
            return Rc::clone(route);
        }
        let policy = self.config.default_policy(method);
        let route = Rc::new(RouteInfo::default_policy(method, key.1.clone(), policy));
        if defaults.len() < MAX_REMEMBERED_DEFAULTS {
            defaults.insert(key, Rc::clone(&route));
        }
        route
    }
}

impl<S, B> Service<ServiceRequest> for RateLimiterService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Future = LimiterFuture<S::Future, B>;

    actix_web::dev::forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        self.config.rollout.warn_forwarded(
            &req,
            self.limiter.sources.trusted_proxies.trusted_hops(),
            || self.limiter.local_now(),
        );
        let outer = req.extensions().get::<LimiterHandle>().cloned();
        let handle = LimiterHandle::new(&self.limiter, outer);
        req.extensions_mut().insert(handle.clone());
        // Read before anything else: the route guards under this limiter name their keys
        // by it, whether or not this limiter counts the request.
        let declared = self.limiter.declared.get_or_init(|| {
            // Without the introspection tree no route counts as declared: every request
            // then also gets the default policy (fail safe, never unlimited).
            let declared = req
                .app_data::<web::Data<IntrospectionTree>>()
                .map(|tree| {
                    let (declared, problems) =
                        DeclaredRoutes::from_tree_with(tree, &self.config.rollout.declared);
                    for problem in &problems {
                        tracing::error!(
                            target: "ratelimit",
                            "{problem}; the route gets the default policy meanwhile (run `coverage::require_coverage` with the limiter inside the App to refuse to start instead)"
                        );
                    }
                    let costs = &self.config.rollout.costs;
                    for problem in super::declared_routes::unknown_cost_routes(&declared, costs) {
                        tracing::error!(
                            target: "ratelimit",
                            "{problem} (run `coverage::require_coverage` with the limiter inside the App to refuse to start instead)"
                        );
                    }
                    declared
                })
                .unwrap_or_default();
            unmatched_username_readers(&self.limiter.sources, &declared);
            register_series(&declared);
            if let Some(overrides) = &self.config.overrides {
                overrides.set_routes(declared.catalog());
            }
            // For `RateLimiter::reset` and `give_back`, which name routes as this App does.
            self.config
                .declared
                .get_or_init(|| std::sync::Arc::new(declared.clone()));
            declared
        });
        if handle.counted() {
            // A limiter further out has counted the request (its default policy): once is
            // enough.
            return LimiterFuture::passing(self.service.call(req), None);
        }
        let guarded = |pattern: &str| {
            !self
                .unguarded
                .borrow()
                .get(pattern)
                .is_some_and(|methods| methods.contains(req.method()))
        };
        // The path as the router matches it: decoded (`/admin/p%61nel` is `/admin/panel`),
        // not as the client wrote it.
        let path = req.match_info().as_str();
        let mut pattern = self.pattern(&req, path);
        let mut declaration = pattern
            .as_deref()
            .and_then(|p| declared.declaration(req.method(), p).filter(|_| guarded(p)));
        if let (None, Some(first)) = (declaration, pattern.as_deref()) {
            // The first resource on the path may not take this method (`GET /items/new`
            // before `POST /items/{id}`): then the router goes on to the next.
            if let Some((past, found)) = declared.past(req.method(), first, path) {
                if guarded(past) {
                    declaration = Some(found);
                    pattern = Some(Rc::from(past));
                }
            }
        }
        if let Some(declaration) = declaration.filter(|d| d.declared_in_code()) {
            // No guard is there to count it: this middleware enforces it, as a guard would.
            handle.mark_counted();
            let policy = match declaration.policy {
                Policy::Limited(policy) => policy,
                Policy::Exempt { .. } => {
                    handle.set_budget(Granted::Unlimited(Unlimited::Exempt));
                    return LimiterFuture::passing(self.service.call(req), None);
                }
            };
            let route = counted_route(
                &self.counted_routes,
                declaration,
                pattern.map_or_else(|| declaration.path.to_owned(), |p| p.to_string()),
                req.method().clone(),
                policy,
                Some(declared),
            );
            let service = Rc::clone(&self.service);
            let limiter = Rc::clone(&self.limiter);
            return LimiterFuture::boxed(async move {
                limiter.enforce(req, &route, &*service, &handle).await
            });
        }
        if let Some(declaration) = declaration {
            // Found by its pattern, so there is one.
            let pattern = pattern.unwrap_or_else(|| Rc::from(""));
            // Resolved now: a request that middleware on the way refuses with an error is
            // gone when the error comes back, and must still count. So is the username,
            // which must count the same whether or not the route's guard sees the request.
            let client = handle.resolve_client(&req);
            let reads_username_policy = match declaration.policy {
                Policy::Limited(p) if p.any_reads_username() => Some(p),
                _ => None,
            };
            // A request the declared route's guard never saw counts after the fact: against
            // the declaration, or under the default policy when the declaration is an
            // exemption (the request did not reach the exempt route either).
            let counts = match declaration.policy {
                Policy::Limited(policy) => Counts::Declared(policy),
                Policy::Exempt { .. } => {
                    Counts::Default(self.default_route(req.method(), pattern.to_string()))
                }
            };
            let unseen = Unseen {
                declaration,
                method: req.method().clone(),
                pattern,
                client,
                counts,
                handle,
                limiter: Rc::clone(&self.limiter),
                unguarded: Rc::clone(&self.unguarded),
                counted_routes: Rc::clone(&self.counted_routes),
            };
            let Some(policy) = reads_username_policy else {
                return LimiterFuture::passing(self.service.call(req), Some(unseen));
            };
            let service = Rc::clone(&self.service);
            let route_label = format!("{} {}", unseen.method, unseen.pattern);
            let mut req = req;
            // Boxed, as is the count after the fact: paths few requests take keep every
            // request's future small.
            return LimiterFuture::boxed(async move {
                // A client a limit counting no username already refuses (the flood shield
                // remembers it) is answered by the route's guard without its body being
                // read: reading, decompressing and canonicalizing it would cost a flood its
                // size.
                let method = unseen.method.as_str();
                let refused = Box::pin(unseen.limiter.refused_before_reading(
                    &mut req,
                    policy,
                    method,
                    &unseen.pattern,
                    &unseen.handle,
                ))
                .await;
                if !refused {
                    Box::pin(unseen.handle.read_username(&mut req, &route_label)).await;
                }
                let answer = service.call(req).await;
                unseen.answered(answer).await
            });
        }
        let service = Rc::clone(&self.service);
        let limiter = Rc::clone(&self.limiter);
        let pattern = pattern.map_or_else(|| "<unmatched>".to_owned(), |p| p.to_string());
        let route = self.default_route(req.method(), pattern);
        handle.mark_counted();
        LimiterFuture::boxed(async move { limiter.enforce(req, &route, &*service, &handle).await })
    }
}

/// A request to a declared route, as this middleware passes it on: what counts it after
/// the fact if the route's guard never sees it.
struct Unseen {
    declaration: &'static RouteDeclaration,
    method: Method,
    pattern: Rc<str>,
    /// The client, resolved before the request was passed on.
    client: Option<IpAddr>,
    counts: Counts,
    handle: LimiterHandle,
    limiter: Rc<Limiter>,
    unguarded: Rc<RefCell<HashMap<String, Vec<Method>>>>,
    counted_routes: Rc<CountedRoutes>,
}

impl Unseen {
    /// Whether the answer has been counted (by the route's guard, or a limiter further in).
    fn counted(&self) -> bool {
        self.handle.counted()
    }

    /// Counts `answer`, which the route's guard never saw, and answers with it (or with the
    /// route's 429).
    async fn answered<B: MessageBody + 'static>(
        self,
        answer: Result<ServiceResponse<B>, Error>,
    ) -> Result<ServiceResponse<EitherBody<B>>, Error> {
        if self.counted() {
            return answer.map(ServiceResponse::map_into_left_body);
        }
        let Unseen {
            declaration,
            method,
            pattern,
            client,
            counts,
            handle,
            limiter,
            unguarded,
            counted_routes,
        } = self;
        handle.mark_counted();
        // A success the declared guard never saw was served by another resource on the
        // same path (one registered earlier, or one without the declared route's custom
        // guard): from now on this worker applies the default policy to it. A refusal (an
        // error, or a redirect to a login page) does not mark the path: a scope's
        // middleware (auth, say) may have refused the request before it reached the
        // declared route.
        if answer
            .as_ref()
            .is_ok_and(|response| !is_refusal(response.status()))
        {
            tracing::error!(
                target: "ratelimit",
                route = %format!("{method} {pattern}"),
                "a request to a declared route was served by another resource on the same path, without its limit; applying the default policy to this route from now on"
            );
            unguarded
                .borrow_mut()
                .entry(pattern.to_string())
                .or_default()
                .push(method.clone());
        }
        // Either way the request counts, after the fact.
        let route = match &counts {
            Counts::Declared(policy) => counted_route(
                &counted_routes,
                declaration,
                pattern.to_string(),
                method,
                *policy,
                limiter.declared.get(),
            ),
            Counts::Default(route) => Rc::clone(route),
        };
        Box::pin(limiter.count_answered(answer, &route, client, &handle)).await
    }
}

pin_project! {
    /// The future of [`RateLimiterService`]: on the path most requests to declared routes
    /// take, the inner service's own future, unboxed (actix-web holds it in place); a boxed
    /// one on the others.
    pub struct LimiterFuture<F, B> {
        #[pin]
        state: State<F, B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B> {
        /// The inner service's answer, then the count after the fact when the request's
        /// guard never saw it (`unseen`; none when a limiter further out counted it).
        Passing {
            #[pin]
            answer: F,
            unseen: Option<Unseen>,
        },
        Boxed {
            future: LocalBoxFuture<'static, Result<ServiceResponse<EitherBody<B>>, Error>>,
        },
    }
}

impl<F, B> LimiterFuture<F, B> {
    fn passing(answer: F, unseen: Option<Unseen>) -> Self {
        LimiterFuture {
            state: State::Passing { answer, unseen },
        }
    }

    fn boxed(
        future: impl Future<Output = Result<ServiceResponse<EitherBody<B>>, Error>> + 'static,
    ) -> Self {
        LimiterFuture {
            state: State::Boxed {
                future: Box::pin(future),
            },
        }
    }
}

impl<F, B> Future for LimiterFuture<F, B>
where
    F: Future<Output = Result<ServiceResponse<B>, Error>>,
    B: MessageBody + 'static,
{
    type Output = Result<ServiceResponse<EitherBody<B>>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Boxed { future } => return future.as_mut().poll(cx),
                StateProj::Passing { answer, unseen } => {
                    let answer = std::task::ready!(answer.poll(cx));
                    match unseen.take() {
                        Some(unseen) if !unseen.counted() => {
                            let future = Box::pin(unseen.answered(answer));
                            this.state.set(State::Boxed { future });
                        }
                        _ => return Poll::Ready(answer.map(ServiceResponse::map_into_left_body)),
                    }
                }
            }
        }
    }
}
