use std::{fmt, sync::Arc};

use actix_web::{dev::ServiceRequest, http::header::AUTHORIZATION};

type ApiKeyFn = dyn Fn(&ServiceRequest) -> Option<String> + Send + Sync;

/// Where the API key comes from: a header (default `X-API-Key`) and, unless turned off,
/// `Authorization: Bearer <key>`; or a function.
///
/// A header is client input: a caller that sends a made-up key per request gets a fresh
/// budget per request. Where unauthenticated callers can reach the route, use
/// [`ApiKeySource::from_fn`] and return only keys your app has validated; a request whose
/// key it rejects (returns `None`) is counted by its IP instead.
#[derive(Clone)]
pub struct ApiKeySource {
    header: String,
    bearer: bool,
    function: Option<Arc<ApiKeyFn>>,
}

impl Default for ApiKeySource {
    fn default() -> Self {
        ApiKeySource {
            header: "x-api-key".to_owned(),
            bearer: true,
            function: None,
        }
    }
}

impl fmt::Debug for ApiKeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKeySource")
            .field("header", &self.header)
            .field("bearer", &self.bearer)
            .field("function", &self.function.is_some())
            .finish()
    }
}

impl ApiKeySource {
    /// Reads the key from `header` (and from `Authorization: Bearer` when `bearer`).
    ///
    /// # Panics
    ///
    /// When `header` cannot be a header's name (empty, or with a space): it would never be
    /// found, and every request would count by its IP.
    pub fn new(header: &str, bearer: bool) -> Self {
        assert!(
            crate::policy::is_header_name(header),
            "`ApiKeySource::new({header:?}, ..)`: not a header name (letters, digits and !#$%&'*+-.^_`|~; no space)"
        );
        ApiKeySource {
            header: header.to_ascii_lowercase(),
            bearer,
            function: None,
        }
    }

    /// Reads the key with `f`, typically the key your auth layer validated and put into
    /// the request's extensions; `None` counts the request by its IP.
    pub fn from_fn(f: impl Fn(&ServiceRequest) -> Option<String> + Send + Sync + 'static) -> Self {
        ApiKeySource {
            function: Some(Arc::new(f)),
            ..Self::default()
        }
    }

    /// Whether keys are taken from a header as the client sends it (no function validates
    /// them).
    pub(crate) fn is_raw(&self) -> bool {
        self.function.is_none()
    }

    pub(crate) fn read(&self, req: &ServiceRequest) -> Option<String> {
        if let Some(f) = &self.function {
            return f(req).filter(|key| !key.is_empty());
        }
        let from_header = req
            .headers()
            .get(self.header.as_str())
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty());
        if let Some(key) = from_header {
            return Some(key.to_owned());
        }
        if !self.bearer {
            return None;
        }
        let auth = req.headers().get(AUTHORIZATION)?.to_str().ok()?.trim();
        let (scheme, token) = auth.split_once(' ')?;
        let token = token.trim();
        (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
    }
}
