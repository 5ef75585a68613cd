//! A Redis Cluster's slot map as `CLUSTER SLOTS` tells it, and the slot of a key.

use std::fmt;

use ::redis::Value;

/// Slots in a Redis Cluster.
pub(super) const SLOTS: u16 = 16_384;

/// The slot of `key`, as Redis computes it: CRC16 (XMODEM) of its hash tag (what lies
/// between the first `{` and the next `}`, when that is not empty), or of the whole key,
/// modulo 16384.
pub(super) fn key_slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .map(|close| &rest[..close])
        })
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tag) % SLOTS
}

/// A node's address as the cluster names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Address {
    pub(super) host: String,
    pub(super) port: u16,
}

impl Address {
    /// `host:port` as a `MOVED` or `ASK` reply names it, `host` being `fallback` when the
    /// reply names none (`:6381`: the node does not know its own address).
    pub(super) fn parse_or_host(text: &str, fallback: &str) -> Option<Address> {
        match text.strip_prefix(':') {
            Some(port) => Some(Address {
                host: fallback.to_owned(),
                port: port.parse().ok()?,
            }),
            None => Address::parse(text),
        }
    }

    /// `host:port` as a `MOVED` or `ASK` reply names it (an IPv6 host unbracketed).
    pub(super) fn parse(text: &str) -> Option<Address> {
        let (host, port) = text.rsplit_once(':')?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = port.parse().ok()?;
        (!host.is_empty()).then(|| Address {
            host: host.to_owned(),
            port,
        })
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The slot ranges of a `CLUSTER SLOTS` reply with their masters' addresses, sorted by first
/// slot; `None` when the reply is unreadable or assigns no slot. A master named without a
/// host (`""` or `"?"`: the node does not know its own address) is `asked`'s host.
pub(super) fn ranges(reply: &Value, asked: &Address) -> Option<Vec<(u16, u16, Address)>> {
    let Value::Array(entries) = reply else {
        return None;
    };
    let mut ranges = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(fields) = entry else {
            return None;
        };
        let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return None;
        };
        let host = match master.first()? {
            Value::BulkString(host) => String::from_utf8(host.clone()).ok()?,
            Value::SimpleString(host) => host.clone(),
            Value::Nil => String::new(),
            _ => return None,
        };
        let host = if host.is_empty() || host == "?" {
            asked.host.clone()
        } else {
            host
        };
        let Some(Value::Int(port)) = master.get(1) else {
            return None;
        };
        let (first, last) = (u16::try_from(*first).ok()?, u16::try_from(*last).ok()?);
        if first > last || last >= SLOTS {
            return None;
        }
        let port = u16::try_from(*port).ok()?;
        ranges.push((first, last, Address { host, port }));
    }
    ranges.sort_by_key(|range| range.0);
    (!ranges.is_empty()).then_some(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_slot_is_its_hash_tags() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(key_slot(b"123456789"), 0x31C3 % SLOTS);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    }

    #[test]
    fn addresses_read_as_redirects_name_them() {
        let v4 = Address::parse("10.0.0.1:7000").unwrap();
        assert_eq!((v4.host.as_str(), v4.port), ("10.0.0.1", 7000));
        let v6 = Address::parse("::1:7001").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 7001));
        assert_eq!(v6.to_string(), "[::1]:7001");
        assert_eq!(Address::parse("nohost"), None);
        assert_eq!(Address::parse(":7000"), None);
        let unnamed = Address::parse_or_host(":7000", "10.0.0.2").unwrap();
        assert_eq!(unnamed.to_string(), "10.0.0.2:7000");
    }

    #[test]
    fn slot_ranges_are_read_sorted_with_unknown_hosts_as_the_asked_nodes() {
        let node = |host: &str, port| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
            ])
        };
        let range =
            |first, last, master| Value::Array(vec![Value::Int(first), Value::Int(last), master]);
        let asked = Address::parse("10.0.0.9:7000").unwrap();
        let reply = Value::Array(vec![
            range(8192, 16383, node("", 7001)),
            range(0, 8191, node("10.0.0.1", 7000)),
        ]);
        let read = ranges(&reply, &asked).unwrap();
        assert_eq!(read[0].0, 0);
        assert_eq!(read[0].2.to_string(), "10.0.0.1:7000");
        assert_eq!(read[1].2.to_string(), "10.0.0.9:7001");
        assert_eq!(ranges(&Value::Array(vec![]), &asked), None);
        let out_of_range = Value::Array(vec![range(0, 16384, node("a", 1))]);
        assert_eq!(ranges(&out_of_range, &asked), None);
    }
}
