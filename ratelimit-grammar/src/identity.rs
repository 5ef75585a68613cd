//! Identity parts: who a limit counts, as `identity = "ip+username"` writes it.

use crate::suggest;

/// The parts, as messages list them.
pub const IDENTITY_PARTS: [&str; 5] = ["ip", "username", "user_id", "api_key", "header:<name>"];

/// The names a part may start with, for "did you mean".
const IDENTITY_NAMES: [&str; 5] = ["ip", "username", "user_id", "api_key", "header"];

/// One part of `identity = "..."` as parsed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ParsedPart {
    /// `ip`
    Ip,
    /// `username`
    Username,
    /// `user_id`
    UserId,
    /// `api_key`
    ApiKey,
    /// `header:<name>`, the name lower-cased.
    Header(String),
}

/// Whether `name` can be an HTTP header's name (RFC 9110 token characters, at least one):
/// a name with a space or nothing in it is never found, and every request would count by
/// its IP.
pub const fn is_header_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if !is_tchar(bytes[i]) {
            return false;
        }
        i += 1;
    }
    true
}

const fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

/// Parses `identity = "<text>"`: the parts, or every problem with them (an empty part, an
/// unknown one, a bad header name, a part named twice), each as a message.
///
/// # Errors
///
/// One message per problem, in the order of the parts.
pub fn parse_identity(text: &str) -> Result<Vec<ParsedPart>, Vec<String>> {
    let mut parts = Vec::new();
    let mut errors = Vec::new();
    for raw in text.split('+') {
        let part = raw.trim();
        if part.is_empty() {
            errors.push(format!(
                "empty identity part in `identity = \"{text}\"`; expected parts joined by `+` from {}",
                suggest::list(&IDENTITY_PARTS)
            ));
            continue;
        }
        let parsed = match part {
            "ip" => Ok(ParsedPart::Ip),
            "username" => Ok(ParsedPart::Username),
            "user_id" => Ok(ParsedPart::UserId),
            "api_key" => Ok(ParsedPart::ApiKey),
            "header" => header_name("", text).map(ParsedPart::Header),
            _ => match part.split_once(':') {
                Some((prefix, name)) if prefix.trim() == "header" => {
                    header_name(name.trim(), text).map(ParsedPart::Header)
                }
                _ => {
                    let head = part.split(':').next().unwrap_or(part);
                    Err(format!(
                        "unknown identity `{part}` in `identity = \"{text}\"`; expected {}{}",
                        suggest::list(&IDENTITY_PARTS),
                        suggest::did_you_mean(head, &IDENTITY_NAMES)
                            .replace("`header`", "`header:<name>`")
                    ))
                }
            },
        };
        match parsed {
            Ok(part) if parts.contains(&part) => errors.push(format!(
                "identity part `{}` appears more than once in `identity = \"{text}\"`",
                raw.trim()
            )),
            Ok(part) => parts.push(part),
            Err(message) => errors.push(message),
        }
    }
    if errors.is_empty() {
        Ok(parts)
    } else {
        Err(errors)
    }
}

/// A header name is an RFC 9110 token; it is kept lower-case.
fn header_name(name: &str, text: &str) -> Result<String, String> {
    if name.is_empty() {
        return Err(format!("`header` needs a header name in `identity = \"{text}\"`; write `header:<name>`, e.g. `header:X-Tenant-Id`"));
    }
    if let Some(bad) = name.chars().find(|c| !c.is_ascii() || !is_tchar(*c as u8)) {
        let bad = match bad {
            ' ' => "a space".to_owned(),
            '\t' => "a tab".to_owned(),
            other => format!("`{other}`"),
        };
        return Err(format!(
            "invalid header name `{name}` in `identity = \"{text}\"`: a header name cannot contain {bad}; use letters, digits and `-`, e.g. `header:X-Tenant-Id`"
        ));
    }
    Ok(name.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_parse_and_every_problem_is_reported() {
        assert_eq!(
            parse_identity("ip + username+header:X-Tenant"),
            Ok(vec![
                ParsedPart::Ip,
                ParsedPart::Username,
                ParsedPart::Header("x-tenant".to_owned())
            ])
        );
        let errors = parse_identity("usrname++ip+ip+header:x y").unwrap_err();
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(errors[0].contains("did you mean `username`?"), "{errors:?}");
        assert!(errors[1].starts_with("empty identity part"), "{errors:?}");
        assert!(errors[2].contains("more than once"), "{errors:?}");
        assert!(errors[3].contains("cannot contain a space"), "{errors:?}");
        assert!(is_header_name("X-Tenant-Id"));
        assert!(!is_header_name("") && !is_header_name("x y") && !is_header_name("é"));
    }
}
