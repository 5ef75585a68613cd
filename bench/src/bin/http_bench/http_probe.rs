//! A minimal sequential HTTP/1.1 client over one keep-alive connection, for the exact
//! per-request checks and the memory fill: each call returns only after the server has
//! answered, so Redis counters read afterwards include everything the request did.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    time::Duration,
};

pub struct HttpProbe {
    reader: BufReader<TcpStream>,
    port: u16,
}

impl HttpProbe {
    pub fn connect(port: u16) -> Result<HttpProbe, String> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .map_err(|e| format!("cannot connect to 127.0.0.1:{port}: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .and_then(|()| stream.set_nodelay(true))
            .map_err(|e| format!("cannot configure the probe connection: {e}"))?;
        Ok(HttpProbe {
            reader: BufReader::new(stream),
            port,
        })
    }

    /// `GET path` as a client behind one trusted proxy at `forwarded_for`; the status code.
    pub fn get(&mut self, path: &str, forwarded_for: &str) -> Result<u16, String> {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nX-Forwarded-For: {forwarded_for}\r\n\r\n",
            self.port
        );
        self.reader
            .get_mut()
            .write_all(request.as_bytes())
            .map_err(|e| format!("GET {path}: {e}"))?;
        self.read_response().map_err(|e| format!("GET {path}: {e}"))
    }

    fn read_response(&mut self) -> Result<u16, String> {
        let mut line = String::new();
        self.reader
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse::<u16>().ok())
            .ok_or_else(|| format!("not an HTTP status line: `{}`", line.trim_end()))?;
        let mut length = 0usize;
        loop {
            line.clear();
            self.reader
                .read_line(&mut line)
                .map_err(|e| e.to_string())?;
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value
                        .trim()
                        .parse()
                        .map_err(|_| format!("bad `{header}`"))?;
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    return Err(format!("unsupported `{header}`"));
                }
            }
        }
        let mut body = vec![0; length];
        self.reader
            .read_exact(&mut body)
            .map_err(|e| e.to_string())?;
        Ok(status)
    }
}

/// The `X-Forwarded-For` address of identity `index` (RFC 2544 benchmarking range), the
/// same numbering as `scripts/wrk/identities.lua`.
pub fn identity_address(index: u32) -> String {
    format!("198.18.{}.{}", index / 256, index % 256)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_count_through_the_benchmarking_range() {
        assert_eq!(identity_address(0), "198.18.0.0");
        assert_eq!(identity_address(9_999), "198.18.39.15");
    }
}
