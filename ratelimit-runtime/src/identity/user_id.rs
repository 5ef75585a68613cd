use std::{fmt, sync::Arc};

use actix_web::{dev::ServiceRequest, HttpMessage};

/// The authenticated user id. The app's own auth layer inserts it into the request's
/// extensions (`req.extensions_mut().insert(UserId("42".into()))`); the limiter never reads
/// it from a header a client could set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserId(pub String);

type UserIdFn = dyn Fn(&ServiceRequest) -> Option<String> + Send + Sync;

/// Where the user id comes from: the [`UserId`] extension (default) or a function.
#[derive(Clone, Default)]
pub struct UserIdSource {
    function: Option<Arc<UserIdFn>>,
}

impl UserIdSource {
    /// Reads the user id with `f` instead of the [`UserId`] extension.
    pub fn from_fn(f: impl Fn(&ServiceRequest) -> Option<String> + Send + Sync + 'static) -> Self {
        UserIdSource {
            function: Some(Arc::new(f)),
        }
    }

    pub(crate) fn read(&self, req: &ServiceRequest) -> Option<String> {
        let id = match &self.function {
            Some(f) => f(req),
            None => req.extensions().get::<UserId>().map(|u| u.0.clone()),
        };
        id.filter(|id| !id.is_empty())
    }
}

impl fmt::Debug for UserIdSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.function.is_some() {
            "UserIdSource::Fn"
        } else {
            "UserIdSource::Extension"
        })
    }
}
