//! The submitted username, read from a JSON or form body with a bounded buffer and put back
//! so the handler receives the body byte for byte.

use std::borrow::Cow;

use actix_web::{
    dev::{Payload, ServiceRequest},
    error::PayloadError,
    http::{
        header::{CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING, UPGRADE},
        Method, Version,
    },
    web::{Bytes, BytesMut},
    HttpMessage as _,
};
use encoding_rs::{Encoding, UTF_8};
use futures_util::{stream, StreamExt as _};

/// The default body buffer: 64 KiB.
pub const DEFAULT_BODY_LIMIT: usize = 64 * 1024;

/// Which body field holds the username, and how much body may be buffered to find it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsernameField {
    field: String,
    limit: usize,
}

impl Default for UsernameField {
    fn default() -> Self {
        UsernameField {
            field: "username".to_owned(),
            limit: DEFAULT_BODY_LIMIT,
        }
    }
}

impl UsernameField {
    /// Reads the username from `field`, buffering at most `limit` bytes of body.
    pub fn new(field: &str, limit: usize) -> Self {
        UsernameField {
            field: field.to_owned(),
            limit,
        }
    }

    /// The username in the body, if any. The body is always put back.
    pub(crate) async fn read(&self, req: &mut ServiceRequest) -> Submitted {
        if !declares_body(req) {
            // Nothing to read, and nothing to wait for: the payload of an upgrade (a
            // WebSocket handshake) is the connection itself.
            return Submitted::Missing;
        }
        if !req.headers().contains_key(CONTENT_TYPE) {
            // No declared format, but a handler reading raw bytes may still find a username
            // in a body.
            return match buffer_and_restore(req, self.limit).await {
                Some(body) if body.is_empty() => Submitted::Missing,
                _ => Submitted::Unreadable,
            };
        }
        // actix-web's extractors decompress a body before the handler sees it; this reader
        // does not, so such a body is not read here (found by review: a gzip form parsed as
        // raw bytes had no username, and its requests counted per address).
        if is_compressed(req) {
            return Submitted::Unreadable;
        }
        let Some(kind) = BodyKind::of(req) else {
            return Submitted::Unreadable;
        };
        // A form is decoded in the charset its content type names, found as `web::Form`
        // finds it (the content type parsed as a MIME type: found by review, a decoy
        // `charset=utf-8` inside a quoted parameter made a UTF-16 form read as UTF-8 here,
        // with a username of the client's choosing, while the handler read another). None
        // when actix cannot parse the content type or does not know the charset: then
        // `web::Form` refuses the body. (`web::Json` reads raw bytes whatever the charset.)
        let charset = req.encoding().ok();
        let declared_len = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared_len.is_some_and(|len| len > self.limit as u64) {
            return Submitted::Unreadable;
        }
        let Some(body) = buffer_and_restore(req, self.limit).await else {
            return Submitted::Unreadable;
        };
        let name = match kind {
            BodyKind::Json => match json_field(&body, &self.field) {
                Ok(name) => name,
                Err(_) => return Submitted::Unreadable,
            },
            BodyKind::Form => {
                // Read as `web::Form` reads it (none if it cannot), and as JSON: a JSON body
                // labelled as a form is read by a `web::Json` handler that does not insist on
                // the content type (found by review: counted per address).
                let as_form = charset
                    .and_then(|charset| decoded(charset, &body))
                    .map(|text| form_field(&text, &self.field));
                match (as_form, json_field(&body, &self.field)) {
                    (Some(Err(Repeated)), _) => return Submitted::Unreadable,
                    // Read one way by a form handler and another by a lenient JSON one (a
                    // JSON string holding `&username=decoy&`, found by review): counting
                    // either would let the other be guessed on a budget of its own.
                    (Some(Ok(Some(form))), Ok(Some(json))) if form != json => {
                        return Submitted::Unreadable
                    }
                    (Some(Ok(Some(name))), _) | (_, Ok(Some(name))) => Some(name),
                    (Some(Ok(None)), _) | (None, Ok(None)) => None,
                    (None, Err(_)) => return Submitted::Unreadable,
                }
            }
        };
        match name.filter(|name| !name.trim().is_empty()) {
            Some(name) => Submitted::Username(name),
            None => Submitted::Missing,
        }
    }
}

/// The string `field` of a JSON body, if it has one; an error when the body is not JSON.
fn json_field(body: &[u8], field: &str) -> Result<Option<String>, serde_json::Error> {
    let value = serde_json::from_slice::<serde_json::Value>(body)?;
    Ok(value
        .get(field)
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned))
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

/// Whether the body is compressed: a `Content-Encoding` other than `identity`.
fn is_compressed(req: &ServiceRequest) -> bool {
    req.headers().get_all(CONTENT_ENCODING).any(|v| {
        v.to_str().map_or(true, |v| {
            v.split(',')
                .map(str::trim)
                .any(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("identity"))
        })
    })
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
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    async fn read(content_type: &str, body: &'static [u8]) -> Submitted {
        let mut req = TestRequest::post()
            .insert_header((CONTENT_TYPE, content_type))
            .insert_header((CONTENT_LENGTH, body.len().to_string()))
            .set_payload(Bytes::from_static(body))
            .to_srv_request();
        UsernameField::default().read(&mut req).await
    }

    /// The charset matters to `web::Form` only (found by review: a JSON body naming a
    /// charset encoding_rs does not know, and a JSON object labelled as a UTF-16 form of odd
    /// length, both read as alice by `web::Json`, counted as unreadable).
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
            Submitted::Unreadable
        );
        // A form in a charset actix does not know, but JSON: `web::Json` reads it.
        let unknown = "application/x-www-form-urlencoded; charset=utf-32";
        assert_eq!(read(unknown, json).await, alice());
        assert_eq!(
            read(unknown, b"username=alice").await,
            Submitted::Unreadable
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
    /// The username field's text.
    Username(String),
    /// No body, or a readable one without the field: the identity falls back to the IP.
    Missing,
    /// A body the limiter cannot read (larger than the buffer, compressed, a form in a charset
    /// other than UTF-8, not JSON or a form, of no declared type, not parseable, a form with
    /// the field twice) although the handler may well read a username from it. Such requests
    /// share one budget per route ([`UNREADABLE_USERNAME`]), so that padding or encoding a
    /// body cannot trade the username's budget for one per IP address.
    Unreadable,
}

/// The username every request with an unreadable body counts as. No JSON or form field
/// normalises to it by accident (it starts with a NUL).
pub(crate) const UNREADABLE_USERNAME: &str = "\0unreadable body";

#[derive(Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    Json,
    Form,
}

impl BodyKind {
    fn of(req: &ServiceRequest) -> Option<BodyKind> {
        let content_type = req.headers().get(CONTENT_TYPE)?.to_str().ok()?;
        let essence = content_type.split(';').next()?.trim().to_ascii_lowercase();
        if essence == "application/json" || essence.ends_with("+json") {
            Some(BodyKind::Json)
        } else if essence == "application/x-www-form-urlencoded" {
            Some(BodyKind::Form)
        } else {
            None
        }
    }
}

/// Reads up to `limit` bytes of the body and puts everything back: the buffered bytes
/// followed by whatever the stream still holds (including an error it produced).
/// Returns the whole body when it fits in `limit`.
async fn buffer_and_restore(req: &mut ServiceRequest, limit: usize) -> Option<Bytes> {
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
        return Some(buffered);
    }
    let head = stream::iter([Ok(buffered)]);
    let restored: actix_http::BoxedPayloadStream = match failure {
        Some(error) => Box::pin(head.chain(stream::iter([Err(error)]))),
        None => Box::pin(head.chain(payload)),
    };
    req.set_payload(Payload::from(restored));
    None
}

fn bytes_payload(bytes: Bytes) -> Payload {
    let (_, mut payload) = actix_http::h1::Payload::create(true);
    payload.unread_data(bytes);
    Payload::from(payload)
}
