//! "did you mean" suggestions for near-miss spellings.

/// The closest candidate to `input`, when it is close enough to be a likely typo.
pub fn closest<'a>(input: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let input = input.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (strsim::damerau_levenshtein(&input, c), *c))
        .filter(|(distance, c)| *distance <= 2.max(c.len() / 3))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, c)| c)
}

/// `; did you mean `x`?` or nothing.
pub fn did_you_mean(input: &str, candidates: &[&str]) -> String {
    match closest(input, candidates) {
        Some(candidate) => format!("; did you mean `{candidate}`?"),
        None => String::new(),
    }
}

/// `` `a`, `b`, `c` ``.
pub fn list(candidates: &[&str]) -> String {
    candidates
        .iter()
        .map(|c| format!("`{c}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// [`did_you_mean`] over candidates in any case (route names such as `GET /search`), compared
/// without case and shown as written.
pub fn did_you_mean_any_case(input: &str, candidates: &[&str]) -> String {
    let folded: Vec<String> = candidates.iter().map(|c| c.to_ascii_lowercase()).collect();
    let folded: Vec<&str> = folded.iter().map(String::as_str).collect();
    closest(input, &folded)
        .and_then(|near| candidates.iter().find(|c| c.eq_ignore_ascii_case(near)))
        .map(|near| format!("; did you mean `{near}`?"))
        .unwrap_or_default()
}
