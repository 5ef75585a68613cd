//! The field reader names the user `web::Json<T>` with a `username: String` field signs in,
//! on hostile JSON bodies: whatever serde accepts counts against the name serde reads, and
//! whatever serde refuses names no user.

use actix_web::{http::header::CONTENT_TYPE, test::TestRequest};
use proptest::{collection::vec, prelude::*};

use super::*;

/// What the handler deserializes (`web::Json<Login>` calls `serde_json::from_slice`);
/// unknown fields are skipped, as serde_derive skips them by default.
#[derive(serde::Deserialize)]
struct Login {
    username: String,
}

/// Every character as a `\u` escape (UTF-16 units, surrogate pairs beyond the BMP).
fn escaped(text: &str) -> String {
    use std::fmt::Write as _;

    let mut out = String::with_capacity(text.len() * 6 + 2);
    out.push('"');
    for unit in text.encode_utf16() {
        write!(out, "\\u{unit:04x}").unwrap();
    }
    out.push('"');
    out
}

/// `inner` nested `depth` deep in arrays, objects or both by turns.
fn nested(depth: usize, shape: u8, inner: &str) -> String {
    let (mut open, mut close) = (String::new(), String::new());
    for level in 0..depth {
        let array = match shape {
            0 => true,
            1 => false,
            _ => level % 2 == 0,
        };
        open.push_str(if array { "[" } else { r#"{"a":"# });
        close.insert(0, if array { ']' } else { '}' });
    }
    format!("{open}{inner}{close}")
}

/// The names a body may submit: short ones of any printable characters, and long ones.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "\\PC{1,12}",
        1 => (1usize..40_000).prop_map(|n| "h".repeat(n)),
    ]
}

/// A name written as JSON strings: plainly, and every character escaped.
#[derive(Clone)]
struct Spellings {
    plain: String,
    escaped: String,
}

impl Spellings {
    fn of(name: &str) -> Self {
        Spellings {
            plain: serde_json::to_string(name).unwrap(),
            escaped: escaped(name),
        }
    }
}

/// Keys that unescape to `username`.
fn field_key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just(r#""username""#.to_owned()),
        1 => Just(r#""user\u006eame""#.to_owned()),
        1 => Just(r#""user\u006Eame""#.to_owned()),
        1 => Just(escaped("username")),
    ]
}

/// Keys the handler skips, some of them looking like the field.
fn other_key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(r#""password""#),
        Just(r#""p""#),
        Just(r#""""#),
        Just(r#""Username""#),
        Just(r#""username ""#),
        Just(r#""user_name""#),
        Just(r#""username\u0000""#),
        Just(r#""usern\u00e1me""#),
    ]
    .prop_map(str::to_owned)
}

/// Values of fields the handler skips, which serde skips without reading them: numbers out
/// of any range, nesting up to 300 deep, huge strings, escapes, the field nested inside.
fn skipped(x: &Spellings) -> impl Strategy<Value = String> {
    let inner = prop_oneof![
        Just("1e400".to_owned()),
        Just("null".to_owned()),
        Just(format!(r#"{{"username":{}}}"#, x.plain)),
        Just(r#""\ud800""#.to_owned()),
    ];
    prop_oneof![
        Just("1e400".to_owned()),
        Just("-1e999".to_owned()),
        Just("1.5e-400".to_owned()),
        Just("123456789012345678901234567890e99999999999999999999".to_owned()),
        "-?[1-9][0-9]{20,400}",
        (1usize..=300, 0u8..3, inner)
            .prop_map(|(depth, shape, inner)| nested(depth, shape, &inner)),
        (1usize..200_000).prop_map(|n| format!("\"{}\"", "s".repeat(n))),
        "\"[^\"\\\\\\p{Cc}]{0,20}\"",
        Just(r#""\ud800\u0000\n\"\\""#.to_owned()),
        Just(serde_json::to_string(&format!(r#""username":{}"#, x.escaped)).unwrap()),
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("{}".to_owned()),
        Just("[]".to_owned()),
    ]
}

/// One way to make serde refuse the body, or none.
#[derive(Debug, Clone)]
enum Twist {
    None,
    /// A byte order mark first.
    Bom,
    /// Whitespace JSON does not allow between tokens.
    Space(&'static str),
    /// Characters after the object.
    Trailing(&'static str),
    /// A comma after the last entry.
    TrailingComma,
    /// The field a second time, at an index.
    Twice(String, String, prop::sample::Index),
    /// The field's value a type a `String` field refuses.
    NotAString(String),
    /// An entry whose key serde cannot read.
    BadKey(String),
    /// An entry whose value is not JSON.
    BadValue(String),
    /// No username field at all.
    Missing,
}

fn twist(x: &Spellings, decoy: &Spellings) -> impl Strategy<Value = Twist> {
    let twice_value = prop_oneof![
        Just(x.plain.clone()),
        Just(decoy.plain.clone()),
        Just(decoy.escaped.clone()),
        Just("null".to_owned()),
    ];
    let not_a_string = prop_oneof![
        Just("null".to_owned()),
        Just("7".to_owned()),
        Just("1e400".to_owned()),
        Just("true".to_owned()),
        Just(format!("[{}]", x.plain)),
        Just(format!(r#"{{"n":{}}}"#, x.plain)),
        // Not a valid string: a lone surrogate, a bare control character.
        Just(r#""\ud800""#.to_owned()),
        Just("\"a\u{1}\"".to_owned()),
    ];
    prop_oneof![
        12 => Just(Twist::None),
        1 => Just(Twist::Bom),
        1 => prop_oneof![Just("\u{c}"), Just("\u{a0}")].prop_map(Twist::Space),
        1 => prop_oneof![Just("x"), Just("}"), Just(","), Just("{}"), Just("\0")]
            .prop_map(Twist::Trailing),
        1 => Just(Twist::TrailingComma),
        3 => (field_key(), twice_value, any::<prop::sample::Index>())
            .prop_map(|(key, value, at)| Twist::Twice(key, value, at)),
        1 => not_a_string.prop_map(Twist::NotAString),
        1 => prop_oneof![
            Just(r#""user\ud800name""#),
            Just(r#""user\qname""#),
            Just("\"user\u{1}name\""),
        ]
        .prop_map(|key| Twist::BadKey(key.to_owned())),
        1 => prop_oneof![
            Just("01"),
            Just("1."),
            Just("+1"),
            Just("NaN"),
            Just("'x'"),
            Just("[1,]"),
            Just("[[[1]]"),
        ]
        .prop_map(|value| Twist::BadValue(value.to_owned())),
        1 => Just(Twist::Missing),
    ]
}

/// A JSON object body as a client may write it: the username (a name of any printable
/// characters or a long one, plain or escaped, under any key that unescapes to the field)
/// among up to four fields the handler skips, in any order, with whitespace around, and at
/// most one twist that makes serde refuse it.
fn body() -> impl Strategy<Value = Vec<u8>> {
    name()
        .prop_flat_map(|x| {
            let decoy = Spellings::of(&format!("{x}.decoy"));
            let x = Spellings::of(&x);
            let field = (
                field_key(),
                prop_oneof![Just(x.plain.clone()), Just(x.escaped.clone())],
            );
            let space = prop_oneof![8 => Just(""), 4 => Just(" "), 2 => Just("\n\t\r ")];
            (
                field,
                any::<prop::sample::Index>(),
                vec((other_key(), skipped(&x)), 0..5),
                space,
                prop_oneof![Just(""), Just(" \n")],
                prop_oneof![Just(""), Just(" \r\n")],
                twist(&x, &decoy),
            )
        })
        .prop_map(|(field, at, mut entries, space, start, end, twist)| {
            let (mut start, mut end, mut space) = (start.to_owned(), end.to_owned(), space);
            let mut comma = "";
            let field = match &twist {
                Twist::Missing => None,
                Twist::NotAString(value) => Some((field.0, value.clone())),
                _ => Some(field),
            };
            if let Some(field) = field {
                entries.insert(at.index(entries.len() + 1), field);
            }
            match twist {
                Twist::None | Twist::Missing | Twist::NotAString(_) => {}
                Twist::Bom => start.insert(0, '\u{feff}'),
                Twist::Space(bad) => space = bad,
                Twist::Trailing(text) => end.push_str(text),
                Twist::TrailingComma => comma = ",",
                Twist::Twice(key, value, at) => {
                    entries.insert(at.index(entries.len() + 1), (key, value));
                }
                Twist::BadKey(key) => entries.push((key, "1".to_owned())),
                Twist::BadValue(value) => entries.insert(0, (r#""p""#.to_owned(), value)),
            }
            let entries: Vec<String> = entries
                .iter()
                .map(|(key, value)| format!("{space}{key}{space}:{space}{value}{space}"))
                .collect();
            format!("{start}{{{}{comma}}}{end}", entries.join(",")).into_bytes()
        })
}

/// At most 80 characters of what a reading says, for the failure message.
fn short(submitted: &Submitted) -> String {
    match submitted {
        Submitted::Username(name) => format!("{:?}", name.chars().take(80).collect::<String>()),
        Submitted::Unreadable(why) => format!("{why:?}"),
    }
}

fn read(body: Vec<u8>) -> Submitted {
    actix_web::rt::System::new().block_on(async move {
        let mut req = TestRequest::post()
            .insert_header((CONTENT_TYPE, "application/json"))
            .insert_header((CONTENT_LENGTH, body.len().to_string()))
            .set_payload(body)
            .to_srv_request();
        UsernameReader::default().read(&mut req).await
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// What serde accepts counts against the name it reads (a blank name is unreadable, as
    /// it is to every reader); what it refuses names no user, and counts as valid JSON
    /// without the field or as malformed, as the body is.
    #[test]
    fn the_field_reader_names_the_user_serde_reads(body in body()) {
        // Within the buffer, so every body is read.
        prop_assert!(body.len() <= DEFAULT_BODY_LIMIT);
        let expected = match serde_json::from_slice::<Login>(&body) {
            Ok(login) if login.username.trim().is_empty() => {
                Submitted::Unreadable(Unreadable::Empty)
            }
            Ok(login) => Submitted::Username(login.username),
            Err(_) if serde_json::from_slice::<IgnoredAny>(&body).is_ok() => {
                Submitted::Unreadable(Unreadable::NoField)
            }
            Err(_) => Submitted::Unreadable(Unreadable::Malformed),
        };
        let got = read(body.clone());
        prop_assert!(
            got == expected,
            "read {}, serde {}: {}",
            short(&got),
            short(&expected),
            String::from_utf8_lossy(&body[..body.len().min(600)])
        );
    }
}
