use actix_web::{dev::ServiceRequest, http::header::AUTHORIZATION};

/// Where the API key comes from: a header (default `X-API-Key`) and, unless turned off,
/// `Authorization: Bearer <key>`.
#[derive(Clone, Debug)]
pub struct ApiKeySource {
    header: String,
    bearer: bool,
}

impl Default for ApiKeySource {
    fn default() -> Self {
        ApiKeySource {
            header: "x-api-key".to_owned(),
            bearer: true,
        }
    }
}

impl ApiKeySource {
    /// Reads the key from `header` (and from `Authorization: Bearer` when `bearer`).
    pub fn new(header: &str, bearer: bool) -> Self {
        ApiKeySource {
            header: header.to_ascii_lowercase(),
            bearer,
        }
    }

    pub(crate) fn read(&self, req: &ServiceRequest) -> Option<String> {
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
