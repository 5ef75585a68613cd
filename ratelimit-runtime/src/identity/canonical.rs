//! Canonical usernames: one budget per name as people read it, not per code-point
//! sequence.

use icu_casemap::CaseMapper;
use icu_normalizer::ComposingNormalizer;
use icu_properties::{props::DefaultIgnorableCodePoint, CodePointSetData};

/// How a submitted username becomes the name its budget is kept under. The default is
/// [`canonical_username`]; an app whose account store compares names by other rules gives
/// the limiter its own function (`RateLimiter::canonical_username`), the same one the account
/// lookup uses, so that every spelling the store takes for one account shares one budget.
pub type Canonicalizer = fn(&str) -> String;

/// The default canonical form of a username: control characters (`\0`, `\x7f`, C1
/// controls, tabs and line breaks) and default ignorable code points (zero-width characters,
/// bidi controls, variation selectors, soft hyphens) removed, Unicode NFKC
/// (`ｒｅｐｒｏ` → `repro`, `K` (Kelvin) → `K`, composed and decomposed accents alike), full
/// case folding (`ß` → `ss`, `Σ`/`ς` → `σ`), NFKC again (folding can leave a string
/// unnormalised), and white space trimmed at both ends.
///
/// Look-alikes from different scripts (Cyrillic `а` for Latin `a`) stay apart: they are
/// different names to every account store that does not map confusables itself. An app
/// whose store does can pass its own [`Canonicalizer`].
///
/// ```
/// use ratelimit_runtime::identity::canonical_username;
///
/// for spelling in [
///     "Repro", " repro ", "ＲＥＰＲＯ", "re\u{200b}pro", "\u{202e}repro",
/// ] {
///     assert_eq!(canonical_username(spelling), "repro");
/// }
/// assert_eq!(canonical_username("Straße"), canonical_username("STRASSE"));
/// assert_eq!(canonical_username("\u{212a}elvin"), "kelvin");
/// assert_eq!(canonical_username("e\u{301}"), canonical_username("\u{e9}"));
/// assert_eq!(canonical_username("repro\0"), "repro");
/// ```
pub fn canonical_username(raw: &str) -> String {
    let ignorable = CodePointSetData::new::<DefaultIgnorableCodePoint>();
    // Invisible in a name as people read it, and dropped or cut at by some account stores
    // (a C string ends at `\0`), so they must not make a name new to the limiter.
    let unseen = |c: char| c.is_control() || ignorable.contains(c);
    let visible: String = raw.chars().filter(|&c| !unseen(c)).collect();
    let nfkc = ComposingNormalizer::new_nfkc();
    let folded = CaseMapper::new()
        .fold_string(&nfkc.normalize(&visible))
        .into_owned();
    // Folding and normalising can bring ignorables back only through compatibility forms
    // that decompose to them; filter once more so the result is stable under this function.
    let normal: String = nfkc
        .normalize(&folded)
        .chars()
        .filter(|&c| !unseen(c))
        .collect();
    normal.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn look_alike_spellings_share_one_name() {
        let spellings = [
            "victim",
            "Victim",
            "VICTIM",
            " victim\t",
            "victim\u{a0}",
            "ｖｉｃｔｉｍ",
            "vic\u{200b}tim",
            "\u{feff}victim",
            "vic\u{200d}\u{200c}tim\u{2060}",
            "victim\u{180e}",
            "\u{202a}victim\u{202c}",
            "vic\u{ad}tim",
            "victim\u{0}",
            "\u{7}victim",
            "vic\u{1}tim\u{7f}",
            "victim\u{9f}",
            "vic\ttim\r\n",
        ];
        for spelling in spellings {
            assert_eq!(canonical_username(spelling), "victim", "{spelling:?}");
        }
        assert_eq!(canonical_username("\u{212a}"), "k");
        assert_eq!(canonical_username("straße"), "strasse");
        assert_eq!(canonical_username("ΣΑΣ"), canonical_username("σας"));
        assert_eq!(
            canonical_username("Ame\u{301}lie"),
            canonical_username("Am\u{e9}lie")
        );
        // Different names stay different.
        assert_ne!(canonical_username("victim"), canonical_username("victims"));
        assert_ne!(canonical_username("victim"), canonical_username("vіctim"));
    }

    #[test]
    fn the_canonical_form_is_a_fixed_point() {
        for raw in ["ǅemal", "ﬁnn", "Ⅻ", "ﾊﾟ", "İstanbul", "x\u{345}", "  ", ""] {
            let once = canonical_username(raw);
            assert_eq!(canonical_username(&once), once, "{raw:?}");
        }
    }
}
