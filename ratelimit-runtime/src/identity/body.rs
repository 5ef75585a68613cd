//! The submitted username, read from a JSON or form body with a bounded buffer and put back
//! so the handler receives the body byte for byte.

use std::{
    borrow::Cow,
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use actix_web::{
    dev::{Payload, ServiceRequest},
    error::PayloadError,
    http::{
        header::{ContentEncoding, CONTENT_ENCODING, CONTENT_LENGTH, TRANSFER_ENCODING, UPGRADE},
        Method, Version,
    },
    web::{Bytes, BytesMut},
    HttpMessage as _,
};
use encoding_rs::{Encoding, UTF_8};
use futures_util::{stream, StreamExt as _};
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor,
};

/// The default body buffer: 2 MiB, the limit `web::Json` applies by default (`JsonConfig`),
/// so every body such a handler accepts is read. Raise it with
/// [`UsernameReader::body_limit`] when the handler's limit is higher.
pub const DEFAULT_BODY_LIMIT: usize = 2 * 1024 * 1024;

/// How the limiter reads the username a request body submits, for routes whose identity
/// has `username`. The body is always put back, byte for byte, for the handler.
///
/// - [`UsernameReader::json_or_form`] (what [`Identities::username`] takes for the handler's type) reads the
///   body into the handler's own type, as `web::Json<T>` and `web::Form<T>` do: JSON
///   whatever the content type (a handler whose `JsonConfig` does not insist on one reads
///   it too), a form only under `application/x-www-form-urlencoded`, decoded in the charset
///   it names. Every shape the handler accepts (an object, an array in field order, extra
///   fields) yields the username the handler will see; a body that reads as a form naming
///   one user and as JSON naming another is not counted under either.
/// - [`UsernameReader::field`] (the default, field `username`) finds a string field in a
///   JSON object or a form without knowing the handler's type. It reads a JSON object as
///   `web::Json<T>` reads a struct with that field as a `String`: the other fields are
///   skipped unread, whatever numbers or nesting they hold, and an object the handler
///   refuses (the field twice or not a string, characters after it) names no user. A JSON
///   array body, which a handler's `web::Json<T>` reads in field order, is unreadable to it:
///   it logs a warning naming the route (at most once a minute per route) that says to give
///   the type.
///
/// A request whose username cannot be read (no body, a body that is neither JSON nor a form
/// sent with the form content type, one that does not parse or lacks the field, one over the
/// buffer, a `br` or `zstd` one; `gzip` and `deflate` are decompressed first, as actix-web
/// does) counts in **one**
/// budget per route and client address, whatever its shape: the policy's identity with the
/// username replaced by one marker shared by all of them. [`refuse_unreadable`] answers such
/// requests `400` with a `problem+json` body instead.
///
/// [`Identities::username`]: crate::settings::Identities::username
/// [`refuse_unreadable`]: UsernameReader::refuse_unreadable
///
/// ```
/// use ratelimit_runtime::identity::UsernameReader;
///
/// #[derive(serde::Deserialize)]
/// struct Login {
///     username: String,
///     password: String,
/// }
///
/// let reader = UsernameReader::json_or_form::<Login>(|login| &login.username)
///     .refuse_unreadable();
/// # let _ = reader;
/// ```
#[derive(Clone)]
pub struct UsernameReader {
    source: Source,
    limit: usize,
    refuse: bool,
    /// When the field reader last warned of a JSON array body on each route, shared by its
    /// clones: at most one line a minute per route.
    array_warned: Arc<Mutex<HashMap<String, Instant>>>,
}

/// The least time between two warnings of a JSON array body on one route.
const ARRAY_WARNING_EVERY: Duration = Duration::from_secs(60);

/// Parses a whole body into the route's type and returns its username.
type Parse = Arc<dyn Fn(&[u8]) -> Option<String> + Send + Sync>;

#[derive(Clone)]
enum Source {
    Field(String),
    Typed {
        type_name: &'static str,
        json: Option<Parse>,
        form: Option<Parse>,
    },
}

impl fmt::Debug for UsernameReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("UsernameReader");
        match &self.source {
            Source::Field(field) => out.field("field", field),
            Source::Typed {
                type_name,
                json,
                form,
            } => out
                .field("type", type_name)
                .field("json", &json.is_some())
                .field("form", &form.is_some()),
        };
        out.field("limit", &self.limit)
            .field("refuse_unreadable", &self.refuse)
            .finish()
    }
}

impl Default for UsernameReader {
    fn default() -> Self {
        UsernameReader::field("username")
    }
}

impl UsernameReader {
    /// Reads the string field `field` of a JSON object or a form, buffering at most
    /// [`DEFAULT_BODY_LIMIT`] bytes.
    pub fn field(field: &str) -> Self {
        UsernameReader {
            source: Source::Field(field.to_owned()),
            limit: DEFAULT_BODY_LIMIT,
            refuse: false,
            array_warned: Arc::default(),
        }
    }

    /// Reads JSON bodies as `web::Json<T>` does, and takes the username `get` returns.
    pub fn json<T: DeserializeOwned + 'static>(get: fn(&T) -> &str) -> Self {
        Self::typed::<T>(Some(json_parser(get)), None)
    }

    /// Reads form bodies as `web::Form<T>` does, and takes the username `get` returns.
    pub fn form<T: DeserializeOwned + 'static>(get: fn(&T) -> &str) -> Self {
        Self::typed::<T>(None, Some(form_parser(get)))
    }

    /// Reads JSON bodies (under any content type) as `web::Json<T>` does and form bodies
    /// (under the form content type) as `web::Form<T>` does, and takes the username `get`
    /// returns.
    pub fn json_or_form<T: DeserializeOwned + 'static>(get: fn(&T) -> &str) -> Self {
        Self::typed::<T>(Some(json_parser(get)), Some(form_parser(get)))
    }

    fn typed<T>(json: Option<Parse>, form: Option<Parse>) -> Self {
        UsernameReader {
            source: Source::Typed {
                type_name: std::any::type_name::<T>(),
                json,
                form,
            },
            limit: DEFAULT_BODY_LIMIT,
            refuse: false,
            array_warned: Arc::default(),
        }
    }

    /// Buffers at most `bytes` of body to find the username; a larger body is unreadable.
    /// Keep it at least the handler's own limit (`JsonConfig::limit`, `FormConfig::limit`),
    /// or a body the handler accepts counts as unreadable.
    ///
    /// # Panics
    ///
    /// When `bytes` is 0.
    #[must_use]
    pub fn body_limit(mut self, bytes: usize) -> Self {
        assert!(
            bytes > 0,
            "`UsernameReader::body_limit(0)`: no body would ever be read"
        );
        self.limit = bytes;
        self
    }

    /// Answers a request whose username cannot be read `400 Bad Request` with a
    /// `problem+json` body saying why, instead of passing it to the handler (`413 Payload
    /// Too Large` for a body over the buffer, as `web::Json` answers one over its limit,
    /// whether its length is declared or only found by reading). It is still
    /// counted, in the route's one budget for unreadable bodies (per client address) and
    /// in the route's limits that count no username: once those are spent it gets `429`
    /// rather than `400`, and while the store fails on a route with `fail = "closed"`,
    /// `503`, as every request there does.
    #[must_use]
    pub fn refuse_unreadable(mut self) -> Self {
        self.refuse = true;
        self
    }

    /// Whether unreadable requests are refused rather than counted.
    pub(crate) fn refuses_unreadable(&self) -> bool {
        self.refuse
    }

    /// Logs, at most once a minute per route, that the field reader met a JSON array body
    /// on `route`: `web::Json<T>` reads a struct from an array in field order, so such a
    /// body names a user the handler signs in while it is counted per address, and guesses
    /// at one account sent as arrays from many addresses never spend that account's budget.
    /// The cure is telling the limiter the handler's type.
    pub(crate) fn met_array(&self, route: &str) {
        let now = Instant::now();
        {
            let mut warned = self.array_warned.lock().unwrap_or_else(|e| e.into_inner());
            match warned.get_mut(route) {
                Some(last) if now.saturating_duration_since(*last) < ARRAY_WARNING_EVERY => return,
                Some(last) => *last = now,
                None => {
                    warned.insert(route.to_owned(), now);
                }
            }
        }
        tracing::warn!(
            target: "ratelimit",
            route,
            "a JSON array body was counted per client address, not per username: the field \
             reader cannot tell which element a handler's `web::Json<T>` takes as the \
             username; give the limiter the handler's type (`Identities::username(UsernameReader::json_or_form::<T>(..))` \
             or `UsernameReader::json_or_form::<T>`) so that such bodies count against the \
             account they name (at most one such line a minute per route)"
        );
    }

    /// The username in the body, or why there is none. The body is always put back.
    pub(crate) async fn read(&self, req: &mut ServiceRequest) -> Submitted {
        match self.read_body(req).await {
            Ok(name) if name.trim().is_empty() => Submitted::Unreadable(Unreadable::Empty),
            Ok(name) => Submitted::Username(name),
            Err(why) => Submitted::Unreadable(why),
        }
    }

    async fn read_body(&self, req: &mut ServiceRequest) -> Result<String, Unreadable> {
        if !declares_body(req) {
            // Nothing to read, and nothing to wait for: the payload of an upgrade (a
            // WebSocket handshake) is the connection itself.
            return Err(Unreadable::NoBody);
        }
        // actix-web's extractors decompress a body before the handler sees it (with its
        // `compress-*` features): gzip and deflate are decompressed here too, with the very
        // decoders actix uses, and read; br and zstd are not read.
        let coding = content_coding(req);
        if coding.is_some_and(|coding| {
            !matches!(coding, ContentEncoding::Gzip | ContentEncoding::Deflate)
        }) {
            return Err(Unreadable::Compressed);
        }
        let json = is_json(req);
        let form = req.content_type().eq_ignore_ascii_case(FORM);
        let declared_len = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared_len.is_some_and(|len| len > self.limit as u64) {
            return Err(Unreadable::TooLarge);
        }
        // A form is decoded in the charset its content type names, found as `web::Form`
        // finds it (the content type parsed as a MIME type, so a decoy `charset=` inside a
        // quoted parameter is not taken). None when actix cannot parse the content type or
        // does not know the charset: then `web::Form` refuses the body. (`web::Json` reads
        // raw bytes whatever the charset.)
        let charset = req.encoding().ok();
        let body = buffer_and_restore(req, self.limit).await?;
        let body = match coding {
            Some(coding) => Bytes::from(decompressed(coding, &body, self.limit)?),
            None => body,
        };
        // The body as a form (only with the form content type, as `web::Form` insists) and
        // as JSON (whatever its label: a handler whose `JsonConfig` does not insist on the
        // content type, or one that parses raw bytes, reads JSON from any body). `None`: that
        // reading has no username.
        let as_form = || -> Result<Option<String>, Unreadable> {
            if !form {
                return Ok(None);
            }
            let text = charset.and_then(|charset| decoded(charset, &body));
            match (&self.source, text) {
                (_, None) => Ok(None),
                (
                    Source::Typed {
                        form: Some(parse), ..
                    },
                    Some(text),
                ) => Ok(parse(&text)),
                (Source::Typed { form: None, .. }, Some(_)) => Ok(None),
                (Source::Field(field), Some(text)) => match form_field(&text, field) {
                    Ok(name) => Ok(name),
                    Err(Repeated) => Err(Unreadable::FieldTwice),
                },
            }
        };
        let as_json = || match &self.source {
            Source::Typed {
                json: Some(parse), ..
            } => parse(&body),
            Source::Typed { json: None, .. } => None,
            Source::Field(field) => json_field(&body, field).ok().flatten(),
        };
        match (as_form()?, as_json()) {
            // Read one way by a form handler and another by a lenient JSON one (a JSON
            // string holding `&username=decoy&`): counting either would let the other be
            // guessed on a budget of its own.
            (Some(form), Some(json)) if form != json => Err(Unreadable::Ambiguous),
            (Some(name), _) | (None, Some(name)) => Ok(name),
            (None, None) if !(json || form) => Err(Unreadable::ContentType),
            (None, None) => match &self.source {
                Source::Field(_) if json && serde_json::from_slice::<IgnoredAny>(&body).is_ok() => {
                    // An array names a user to a handler reading a struct in field order.
                    if body.trim_ascii_start().starts_with(b"[") {
                        Err(Unreadable::Array)
                    } else {
                        Err(Unreadable::NoField)
                    }
                }
                _ => Err(Unreadable::Malformed),
            },
        }
    }
}

const FORM: &str = "application/x-www-form-urlencoded";

/// Whether `web::Json` (default configuration) reads the body: a content type that parses
/// as a MIME type with the subtype `json` or the suffix `+json`.
fn is_json(req: &ServiceRequest) -> bool {
    matches!(req.mime_type(), Ok(Some(mime))
        if mime.subtype().as_str().eq_ignore_ascii_case("json")
            || mime.suffix().is_some_and(|s| s.as_str().eq_ignore_ascii_case("json")))
}

fn json_parser<T: DeserializeOwned + 'static>(get: fn(&T) -> &str) -> Parse {
    Arc::new(move |body: &[u8]| {
        serde_json::from_slice::<T>(body)
            .ok()
            .map(|value| get(&value).to_owned())
    })
}

fn form_parser<T: DeserializeOwned + 'static>(get: fn(&T) -> &str) -> Parse {
    Arc::new(move |body: &[u8]| {
        serde_urlencoded::from_bytes::<T>(body)
            .ok()
            .map(|value| get(&value).to_owned())
    })
}

/// The string `field` of a JSON object body, read as `web::Json<T>` reads it into a struct
/// whose one field is `field: String` (`serde_json::from_slice`, through the visitor
/// serde_derive writes): the same deserializer walks the object with its keys unescaped,
/// reads `field` as a `String`, skips every other value with [`IgnoredAny`] (which checks
/// neither a number's range nor the nesting depth, so every body that handler signs in
/// names its user here), refuses the field twice, and refuses trailing characters.
/// `None`: an object without the field. An error: every other body that handler refuses,
/// and every body that is not an object (the caller tells arrays and other JSON apart).
fn json_field(body: &[u8], field: &str) -> Result<Option<String>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let name = FieldOf(field).deserialize(&mut de)?;
    de.end()?;
    Ok(name)
}

/// The string field it names in a map, visited as serde_derive visits a struct's fields.
struct FieldOf<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for FieldOf<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FieldOf<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an object with the string field `{}`", self.0)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut name = None;
        while let Some(is_field) = map.next_key_seed(IsField(self.0))? {
            if !is_field {
                map.next_value::<IgnoredAny>()?;
            } else if name.is_some() {
                // serde_derive's `duplicate_field`: the handler refuses the body.
                return Err(de::Error::custom(format_args!(
                    "duplicate field `{}`",
                    self.0
                )));
            } else {
                name = Some(map.next_value::<String>()?);
            }
        }
        Ok(name)
    }
}

/// Whether a map key, unescaped, is the field it names: a struct field's identifier, as
/// serde_derive reads it.
struct IsField<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for IsField<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<bool, D::Error> {
        de.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for IsField<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }

    fn visit_bytes<E: de::Error>(self, key: &[u8]) -> Result<bool, E> {
        Ok(key == self.0.as_bytes())
    }
}

/// A form that names a field more than once: handlers differ on which one they read (a map
/// keeps the last, a struct refuses the form), so counting either would let the other be
/// guessed on a budget of its own.
struct Repeated;

/// The value of `field` in a form, if it has one.
fn form_field(form: &[u8], field: &str) -> Result<Option<String>, Repeated> {
    let mut values = form_urlencoded::parse(form)
        .filter(|(name, _)| *name == field)
        .map(|(_, value)| value.into_owned());
    let first = values.next();
    match values.next() {
        Some(_) => Err(Repeated),
        None => Ok(first),
    }
}

/// A form's bytes in UTF-8, decoded as `web::Form` decodes them: no BOM handling, and none
/// for a malformed body rather than one patched with replacement characters.
fn decoded<'a>(charset: &'static Encoding, body: &'a [u8]) -> Option<Cow<'a, [u8]>> {
    if charset == UTF_8 {
        return Some(Cow::Borrowed(body));
    }
    let text = charset.decode_without_bom_handling_and_without_replacement(body)?;
    Some(Cow::Owned(text.into_owned().into_bytes()))
}

/// The coding actix-web decompresses the body from before a handler reads it, if any: the
/// first `Content-Encoding` header, when it names a coding actix knows other than
/// `identity` (it reads that header only, and passes a body with any other value on as it
/// came).
fn content_coding(req: &ServiceRequest) -> Option<ContentEncoding> {
    req.headers()
        .get(CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<ContentEncoding>().ok())
        .filter(|coding| *coding != ContentEncoding::Identity)
}

/// A gzip or deflate (zlib) body decompressed as actix-http does (flate2's write decoders,
/// fed the whole body with `write_all`, then finished), at most `limit` bytes of it: a body
/// actix would fail to decode is malformed here too, one that decodes past the buffer is too
/// large.
fn decompressed(coding: ContentEncoding, body: &[u8], limit: usize) -> Result<Vec<u8>, Unreadable> {
    use std::io::Write as _;

    let mut out = Capped {
        bytes: Vec::new(),
        limit,
        over: false,
    };
    let decoded = match coding {
        ContentEncoding::Gzip => {
            let mut decoder = flate2::write::GzDecoder::new(&mut out);
            decoder.write_all(body).and_then(|()| decoder.try_finish())
        }
        ContentEncoding::Deflate => {
            let mut decoder = flate2::write::ZlibDecoder::new(&mut out);
            decoder.write_all(body).and_then(|()| decoder.try_finish())
        }
        _ => return Err(Unreadable::Compressed),
    };
    match decoded {
        Ok(()) => Ok(out.bytes),
        Err(_) if out.over => Err(Unreadable::TooLarge),
        Err(_) => Err(Unreadable::Malformed),
    }
}

/// A buffer that refuses to grow past `limit`.
struct Capped {
    bytes: Vec<u8>,
    limit: usize,
    over: bool,
}

impl std::io::Write for Capped {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + data.len() > self.limit {
            self.over = true;
            return Err(std::io::Error::other(
                "the decompressed body is over the buffer",
            ));
        }
        self.bytes.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether the request carries a body, as actix's HTTP/1 decoder frames one: chunked, else
/// none for a WebSocket handshake (its payload is the upgraded connection itself), else as
/// long as `Content-Length` says. HTTP/2 and 3 frame a body without either header, and
/// their payload ends with the stream, so reading an empty one does not wait.
fn declares_body(req: &ServiceRequest) -> bool {
    let headers = req.headers();
    if headers.contains_key(TRANSFER_ENCODING) {
        return true;
    }
    let websocket = headers.get_all(UPGRADE).any(|v| {
        v.to_str()
            .is_ok_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
    });
    if websocket {
        return false;
    }
    let length = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match length {
        Some(length) => length > 0,
        None => req.version() >= Version::HTTP_2 && req.method() != Method::CONNECT,
    }
}

#[cfg(test)]
mod username_reading;

#[cfg(test)]
mod tests {
    use actix_web::{http::header::CONTENT_TYPE, test::TestRequest};

    use super::*;

    async fn read(content_type: &str, body: &'static [u8]) -> Submitted {
        read_bytes(content_type, Bytes::from_static(body)).await
    }

    async fn read_bytes(content_type: &str, body: Bytes) -> Submitted {
        let mut req = TestRequest::post()
            .insert_header((CONTENT_TYPE, content_type))
            .insert_header((CONTENT_LENGTH, body.len().to_string()))
            .set_payload(body)
            .to_srv_request();
        UsernameReader::default().read(&mut req).await
    }

    /// A body whose stream fails before its end (cut short, a broken chunked encoding) is
    /// malformed, not too large: the handler's extractor answers it `400`. The bytes read
    /// and the error are put back for the handler.
    #[actix_web::test]
    async fn a_body_cut_short_is_malformed_and_put_back() {
        let parts: Vec<Result<Bytes, PayloadError>> = vec![
            Ok(Bytes::from_static(br#"{"username":"tr"#)),
            Err(PayloadError::Incomplete(None)),
        ];
        let stream: actix_http::BoxedPayloadStream = Box::pin(stream::iter(parts));
        let (req, _) = TestRequest::post()
            .insert_header((CONTENT_TYPE, "application/json"))
            .insert_header((CONTENT_LENGTH, "100"))
            .to_http_parts();
        let mut req = ServiceRequest::from_parts(req, Payload::from(stream));
        assert_eq!(
            UsernameReader::default().read(&mut req).await,
            Submitted::Unreadable(Unreadable::Malformed)
        );
        let mut payload = req.take_payload();
        let first = payload.next().await.unwrap().unwrap();
        assert_eq!(&first[..], br#"{"username":"tr"#);
        assert!(matches!(
            payload.next().await,
            Some(Err(PayloadError::Incomplete(None)))
        ));
    }

    /// `web::Json<T>` skips a field its type does not name without checking a number's
    /// range or a value's depth, and refuses the named field twice: the field reader reads
    /// such bodies as it does.
    #[actix_web::test]
    async fn the_field_reader_skips_other_fields_as_web_json_does() {
        let alice = || Submitted::Username("alice".to_owned());
        let arrays = |depth| format!("{}1e400{}", "[".repeat(depth), "]".repeat(depth));
        let objects = |depth| format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
        for body in [
            r#"{"username":"alice","password":"x","p":1e400}"#.to_owned(),
            r#"{"p":-1e999,"username":"alice"}"#.to_owned(),
            format!(r#"{{"n":{},"username":"alice"}}"#, "9".repeat(400)),
            format!(r#"{{"username":"alice","p":{}}}"#, arrays(200)),
            format!(r#"{{"p":{},"username":"alice"}}"#, objects(300)),
            format!(r#"{{"user\u006eame":"alice","p":{}}}"#, arrays(300)),
        ] {
            // Bodies a `serde_json::Value` cannot hold.
            assert!(serde_json::from_slice::<serde_json::Value>(body.as_bytes()).is_err());
            assert_eq!(
                read_bytes("application/json", Bytes::from(body.clone())).await,
                alice(),
                "{body:.60}"
            );
        }
        // The field nested in another is not the field.
        let nested = br#"{"p":[{"username":"bob"}],"username":"alice"}"#;
        assert_eq!(read("application/json", nested).await, alice());
        // What `web::Json` refuses: the field twice, whatever its spelling; the field
        // holding a number out of range; characters after the object.
        for (body, why) in [
            (
                &br#"{"username":"bob","username":"alice"}"#[..],
                Unreadable::NoField,
            ),
            (
                br#"{"user\u006eame":"bob","username":"alice"}"#,
                Unreadable::NoField,
            ),
            (br#"{"username":1e400}"#, Unreadable::NoField),
            (br#"{"username":"alice"} x"#, Unreadable::Malformed),
        ] {
            assert_eq!(
                read("application/json", body).await,
                Submitted::Unreadable(why),
                "{body:?}"
            );
        }
    }

    /// The charset matters to `web::Form` only: a JSON body naming a charset encoding_rs
    /// does not know, and a JSON object labelled as a UTF-16 form of odd length, both read
    /// as alice by `web::Json`, count as alice, not as unreadable.
    #[actix_web::test]
    async fn json_is_read_as_web_json_reads_it_whatever_the_charset() {
        let alice = || Submitted::Username("alice".to_owned());
        let json = br#"{"username":"alice"}"#;
        assert_eq!(
            read("application/json; charset=utf-32", json).await,
            alice()
        );
        let utf16_form = "application/x-www-form-urlencoded; charset=utf-16le";
        assert_eq!(read(utf16_form, json).await, alice(), "even length");
        assert_eq!(
            read(utf16_form, br#"{"username":"alice"} "#).await,
            alice(),
            "odd length"
        );
        // Neither a form `web::Form` can decode nor JSON: the shared budget.
        assert_eq!(
            read(utf16_form, b"username=alice ").await,
            Submitted::Unreadable(Unreadable::Malformed)
        );
        // `text/json` is JSON to `web::Json`, and so to the limiter.
        assert_eq!(read("text/json", json).await, alice());
        assert_eq!(read("application/problem+json", json).await, alice());
        // Shapes without the field share the one budget, whatever the shape.
        assert_eq!(
            read("application/json", b" \n[\"alice\",\"x\"]").await,
            Submitted::Unreadable(Unreadable::Array)
        );
        for body in [&br#""alice""#[..], b"null", b"7", br#"{"user":"alice"}"#] {
            assert_eq!(
                read("application/json", body).await,
                Submitted::Unreadable(Unreadable::NoField),
                "{body:?}"
            );
        }
        // JSON under any label is read, as a handler that does not insist on the content
        // type reads it; anything else under another label is not.
        assert_eq!(read("text/plain", json).await, alice());
        assert_eq!(
            read("text/plain", b"username=alice").await,
            Submitted::Unreadable(Unreadable::ContentType)
        );
        // A form in a charset actix does not know, but JSON: `web::Json` reads it.
        let unknown = "application/x-www-form-urlencoded; charset=utf-32";
        assert_eq!(read(unknown, json).await, alice());
        assert_eq!(
            read(unknown, b"username=alice").await,
            Submitted::Unreadable(Unreadable::Malformed)
        );
    }

    #[derive(serde::Deserialize)]
    struct Login {
        username: String,
        #[allow(dead_code)]
        password: String,
    }

    async fn read_typed(content_type: &str, body: &'static [u8]) -> Submitted {
        let mut req = TestRequest::post()
            .insert_header((CONTENT_TYPE, content_type))
            .insert_header((CONTENT_LENGTH, body.len().to_string()))
            .set_payload(Bytes::from_static(body))
            .to_srv_request();
        UsernameReader::json_or_form::<Login>(|l| &l.username)
            .read(&mut req)
            .await
    }

    #[actix_web::test]
    async fn a_typed_reader_reads_every_shape_serde_accepts() {
        let alice = || Submitted::Username("alice".to_owned());
        for body in [
            &br#"{"username":"alice","password":"x"}"#[..],
            br#"{"password":"x","extra":[1],"username":"alice"}"#,
            br#"["alice","x"]"#,
            br#"{"username":"\u0061lice","password":"x"}"#,
        ] {
            assert_eq!(
                read_typed("application/json", body).await,
                alice(),
                "{body:?}"
            );
        }
        assert_eq!(read_typed("text/json", br#"["alice","x"]"#).await, alice());
        assert_eq!(
            read_typed(FORM, b"password=x&username=alice&more=1").await,
            alice()
        );
        // What `web::Json<Login>` refuses, the reader cannot read either.
        for body in [&br#"{"username":"alice"}"#[..], br#"["alice"]"#, b"null"] {
            assert_eq!(
                read_typed("application/json", body).await,
                Submitted::Unreadable(Unreadable::Malformed),
                "{body:?}"
            );
        }
        assert_eq!(read_typed("text/plain", br#"["alice","x"]"#).await, alice());
        assert_eq!(
            read_typed("text/plain", b"username=alice&password=x").await,
            Submitted::Unreadable(Unreadable::ContentType)
        );
        // A form whose bytes are also JSON naming someone else: a lenient JSON handler
        // reads one name, a form handler another; neither is counted.
        assert_eq!(
            read_typed(
                FORM,
                br#"{"username":"victim","password":"x","z":"&username=decoy&password=x&"}"#
            )
            .await,
            Submitted::Unreadable(Unreadable::Ambiguous)
        );
    }

    #[actix_web::test]
    async fn gzip_and_deflate_bodies_are_read_as_actix_decodes_them() {
        use std::io::Write as _;

        let gzip = |body: &[u8]| {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(body).unwrap();
            encoder.finish().unwrap()
        };
        let zlib = |body: &[u8]| {
            let mut encoder =
                flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(body).unwrap();
            encoder.finish().unwrap()
        };
        let read = |coding: &'static str, content_type: &'static str, body: Vec<u8>, limit| async move {
            let mut req = TestRequest::post()
                .insert_header((CONTENT_TYPE, content_type))
                .insert_header((CONTENT_ENCODING, coding))
                .insert_header((CONTENT_LENGTH, body.len().to_string()))
                .set_payload(body)
                .to_srv_request();
            UsernameReader::default()
                .body_limit(limit)
                .read(&mut req)
                .await
        };
        let alice = || Submitted::Username("alice".to_owned());
        let json = br#"{"username":"alice"}"#;
        assert_eq!(
            read("gzip", "application/json", gzip(json), 1024).await,
            alice()
        );
        assert_eq!(
            read("deflate", FORM, zlib(b"username=alice"), 1024).await,
            alice()
        );
        // Cut short: actix fails to decode it, and so does the reader.
        let mut cut = gzip(json);
        cut.truncate(cut.len() - 4);
        assert_eq!(
            read("gzip", "application/json", cut, 1024).await,
            Submitted::Unreadable(Unreadable::Malformed)
        );
        // Small compressed, over the buffer decompressed.
        let padded = format!(r#"{{"username":"alice"{}}}"#, " ".repeat(10_000));
        assert_eq!(
            read("gzip", "application/json", gzip(padded.as_bytes()), 1024).await,
            Submitted::Unreadable(Unreadable::TooLarge)
        );
        // Codings the reader does not decompress.
        assert_eq!(
            read("br", "application/json", json.to_vec(), 1024).await,
            Submitted::Unreadable(Unreadable::Compressed)
        );
    }

    #[test]
    fn only_a_request_that_declares_a_body_is_read() {
        let declares = |req: TestRequest| declares_body(&req.to_srv_request());
        assert!(!declares(TestRequest::post()));
        assert!(!declares(
            TestRequest::post().insert_header((CONTENT_LENGTH, "0"))
        ));
        assert!(declares(
            TestRequest::post().insert_header((CONTENT_LENGTH, "5"))
        ));
        assert!(declares(
            TestRequest::post().insert_header((TRANSFER_ENCODING, "chunked"))
        ));
        assert!(declares(TestRequest::post().version(Version::HTTP_2)));
        // A WebSocket handshake's payload is the connection: never waited for.
        assert!(!declares(
            TestRequest::get().insert_header((UPGRADE, " WebSocket "))
        ));
        // Any other `Upgrade` leaves the body to actix's usual framing, and the handler
        // reads it: so does the limiter.
        let h2c = TestRequest::post()
            .insert_header((UPGRADE, "h2c"))
            .insert_header((CONTENT_LENGTH, "5"));
        assert!(declares(h2c));
        // actix takes any `Upgrade: websocket` line for a handshake.
        let second_line = TestRequest::get()
            .append_header((UPGRADE, "h2c"))
            .append_header((UPGRADE, "websocket"))
            .insert_header((CONTENT_LENGTH, "5"));
        assert!(!declares(second_line));
        let chunked = TestRequest::get()
            .insert_header((UPGRADE, "websocket"))
            .insert_header((TRANSFER_ENCODING, "chunked"));
        assert!(declares(chunked));
    }
}

/// What a body says about the username.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Submitted {
    /// The username as the body gives it (not yet canonical).
    Username(String),
    /// No username could be read: such requests share one budget per route and address
    /// ([`UNREADABLE_USERNAME`]), whatever their shape, so that reshaping a body never opens
    /// a budget of its own.
    Unreadable(Unreadable),
}

/// Why no username could be read from a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unreadable {
    NoBody,
    Compressed,
    ContentType,
    TooLarge,
    Malformed,
    NoField,
    /// A JSON array, which the field reader cannot read and a typed one can.
    Array,
    FieldTwice,
    Ambiguous,
    Empty,
}

impl Unreadable {
    /// The reason, for the `400` of a route that refuses unreadable bodies.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Unreadable::NoBody => "the request has no body",
            Unreadable::Compressed => "the body is compressed",
            Unreadable::ContentType => "the body's content type is not one this route reads",
            Unreadable::TooLarge => "the body is larger than this route reads",
            Unreadable::Malformed => "the body does not parse as this route's input",
            Unreadable::NoField => "the body has no username",
            Unreadable::Array => {
                "the body is a JSON array, whose username only the handler's type can find"
            }
            Unreadable::FieldTwice => "the body names the username more than once",
            Unreadable::Ambiguous => "the body names one username as a form and another as JSON",
            Unreadable::Empty => "the username is empty",
        }
    }
}

/// The username every request without a readable one counts as. It starts with a NUL, so no
/// ordinary name equals it; a client that submits it on purpose counts in that same budget,
/// which gains it nothing.
pub(crate) const UNREADABLE_USERNAME: &str = "\0unreadable body";

/// Reads up to `limit` bytes of the body and puts everything back: the buffered bytes
/// followed by whatever the stream still holds (including an error it produced).
/// Returns the whole body when it fits in `limit`; else [`Unreadable::TooLarge`] when it is
/// over `limit`, and [`Unreadable::Malformed`] when the stream failed first (a body cut
/// short, a broken chunked encoding), which the handler's extractor refuses with a `400`.
async fn buffer_and_restore(req: &mut ServiceRequest, limit: usize) -> Result<Bytes, Unreadable> {
    let mut payload = req.take_payload();
    let mut buffered = BytesMut::new();
    let mut failure: Option<PayloadError> = None;
    let mut complete = true;
    while let Some(chunk) = payload.next().await {
        match chunk {
            Ok(chunk) => {
                buffered.extend_from_slice(&chunk);
                if buffered.len() > limit {
                    complete = false;
                    break;
                }
            }
            Err(error) => {
                failure = Some(error);
                complete = false;
                break;
            }
        }
    }
    let buffered = buffered.freeze();
    if complete {
        req.set_payload(bytes_payload(buffered.clone()));
        return Ok(buffered);
    }
    let head = stream::iter([Ok(buffered)]);
    let (restored, why): (actix_http::BoxedPayloadStream, _) = match failure {
        Some(error) => (
            Box::pin(head.chain(stream::iter([Err(error)]))),
            Unreadable::Malformed,
        ),
        None => (Box::pin(head.chain(payload)), Unreadable::TooLarge),
    };
    req.set_payload(Payload::from(restored));
    Err(why)
}

fn bytes_payload(bytes: Bytes) -> Payload {
    let (_, mut payload) = actix_http::h1::Payload::create(true);
    payload.unread_data(bytes);
    Payload::from(payload)
}
