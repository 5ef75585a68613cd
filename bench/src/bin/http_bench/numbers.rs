//! How figures are written in tables: thousands separators, ratios, latencies.

/// `12,345` (rounded to a whole number).
pub fn whole(value: f64) -> String {
    if !value.is_finite() {
        return "–".to_owned();
    }
    let digits = format!("{:.0}", value.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if value < -0.5 {
        out.insert(0, '-');
    }
    out
}

/// `×0.83`.
pub fn ratio(value: f64) -> String {
    if value.is_finite() {
        format!("×{value:.2}")
    } else {
        "–".to_owned()
    }
}

/// A latency given in microseconds: `87 µs`, `1.42 ms`.
pub fn latency(micros: f64) -> String {
    if !micros.is_finite() {
        "–".to_owned()
    } else if micros.abs() < 1000.0 {
        format!("{micros:.0} µs")
    } else {
        format!("{:.2} ms", micros / 1000.0)
    }
}

/// A per-request count with enough decimals to tell 1.000 from 1.004.
pub fn per_request(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.3}")
    } else {
        "–".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_like_a_table() {
        assert_eq!(whole(1_234_567.4), "1,234,567");
        assert_eq!(whole(999.0), "999");
        assert_eq!(whole(-1500.0), "-1,500");
        assert_eq!(ratio(0.834), "×0.83");
        assert_eq!(latency(87.2), "87 µs");
        assert_eq!(latency(1420.0), "1.42 ms");
        assert_eq!(per_request(1.0041), "1.004");
        assert_eq!(whole(f64::NAN), "–");
    }
}
