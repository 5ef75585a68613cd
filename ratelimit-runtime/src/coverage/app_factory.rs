use actix_web::{
    body::MessageBody,
    dev::{ServiceFactory, ServiceRequest, ServiceResponse},
    Error,
};

/// The service factory inside an `App<T>`, as `App::new()` and its builder methods make it.
///
/// Lets a function that builds the App name its type briefly, so the same function serves
/// `HttpServer::new`, the coverage check and tests:
///
/// ```
/// use actix_web::App;
/// use ratelimit_runtime::coverage::AppFactory;
///
/// fn app() -> App<impl AppFactory> {
///     App::new()
/// }
/// ```
pub trait AppFactory:
    ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<Self::Body>,
        Error = Error,
        InitError = (),
    > + 'static
{
    /// The response body type of the App.
    type Body: MessageBody + 'static;
}

impl<T, B> AppFactory for T
where
    T: ServiceFactory<
            ServiceRequest,
            Config = (),
            Response = ServiceResponse<B>,
            Error = Error,
            InitError = (),
        > + 'static,
    B: MessageBody + 'static,
{
    type Body = B;
}
