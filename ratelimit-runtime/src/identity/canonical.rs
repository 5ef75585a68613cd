//! Canonical usernames: one budget per name as people read it, not per code-point
//! sequence.

use icu_casemap::CaseMapper;
use icu_normalizer::ComposingNormalizer;
use icu_properties::{props::DefaultIgnorableCodePoint, CodePointSetData};

/// How a submitted username becomes the name its budget is kept under. The default is
/// [`canonical_username`]; an app whose account store compares names by other rules gives
/// the limiter its own function (`Identities::canonical_username`), the same one the account
/// lookup uses, so that every spelling the store takes for one account shares one budget.
/// It is given the whole submitted name (up to the body reader's limit, 2 MiB by default):
/// like the default, it should bound its work by what it reads of the name.
pub type Canonicalizer = fn(&str) -> String;

/// The default canonical form of a username: control characters (`\0`, `\x7f`, C1
/// controls, tabs and line breaks) and default ignorable code points (zero-width characters,
/// bidi controls, variation selectors, soft hyphens) removed, Unicode NFKC
/// (`ｒｅｐｒｏ` → `repro`, `K` (Kelvin) → `K`, composed and decomposed accents alike), full
/// case folding (`ß` → `ss`, `Σ`/`ς` → `σ`), NFKC again (folding can leave a string
/// unnormalised), and white space trimmed at both ends.
///
/// A name counts by the first [`MAX_USERNAME_CHARS`] characters of its canonical form, made
/// from at most four times that many visible characters (after leading white space): no
/// account store takes a longer name, and the work per request stays bounded whatever a
/// body submits (NFKC turns one character into up to 18). The cut comes after normalising,
/// so spellings of one name that differ in how they encode accents (composed or not) share
/// one budget up to the bound. Longer names that share those characters share one budget,
/// which errs on the strict side; an account store that looks names up through this same
/// function sees what the limiter counts.
///
/// Look-alikes from different scripts (Cyrillic `а` for Latin `a`) stay apart: they are
/// different names to every account store that does not map confusables itself. An app
/// whose store does can pass its own [`Canonicalizer`].
///
/// ```
/// use ratelimit_runtime::identity::{canonical_username, MAX_USERNAME_CHARS};
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
///
/// let long = "ﷺ".repeat(700_000);
/// assert_eq!(canonical_username(&long).chars().count(), MAX_USERNAME_CHARS);
/// assert_eq!(canonical_username(&long), canonical_username(&format!("{long}x")));
/// ```
pub fn canonical_username(raw: &str) -> String {
    let ignorable = CodePointSetData::new::<DefaultIgnorableCodePoint>();
    // Invisible in a name as people read it, and dropped or cut at by some account stores
    // (a C string ends at `\0`), so they must not make a name new to the limiter.
    // No ASCII character is a default ignorable code point.
    let unseen = |c: char| c.is_control() || (!c.is_ascii() && ignorable.contains(c));
    let visible: String = raw
        .chars()
        .filter(|&c| !unseen(c))
        .skip_while(|c| c.is_whitespace())
        .take(MAX_READ_CHARS)
        .collect();
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
        .take(MAX_USERNAME_CHARS)
        .collect();
    normal.trim().to_owned()
}

/// The most characters a username's canonical form ([`canonical_username`]) holds.
pub const MAX_USERNAME_CHARS: usize = 1024;

/// The most visible characters of a username [`canonical_username`] reads: room for every
/// character of a name at the bound to come with combining marks (a decomposed accent)
/// that normalising folds into it.
const MAX_READ_CHARS: usize = 4 * MAX_USERNAME_CHARS;

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
        // Spellings of one name at the bound, composed or not, are cut alike.
        let a = "a".repeat(MAX_USERNAME_CHARS - 1);
        assert_eq!(
            canonical_username(&format!("{a}e\u{301}")),
            canonical_username(&format!("{a}\u{e9}"))
        );
        let decomposed = "e\u{301}".repeat(600);
        assert_eq!(canonical_username(&decomposed), "\u{e9}".repeat(600));
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
        let long = "ǅ\u{fdfa}".repeat(2_000);
        let once = canonical_username(&long);
        assert_eq!(canonical_username(&once), once);
    }

    #[test]
    fn a_long_name_counts_by_its_first_visible_characters() {
        let padding = [" ", "\u{200b}", "\t", "\u{0}"].map(|p| p.repeat(50_000));
        for pad in &padding {
            assert_eq!(canonical_username(&format!("{pad}Victim")), "victim");
            assert_eq!(canonical_username(&format!("Victim{pad}")), "victim");
        }
        let at_most = "a".repeat(MAX_USERNAME_CHARS);
        assert_eq!(canonical_username(&at_most), at_most);
        assert_eq!(canonical_username(&format!("{at_most}b")), at_most);
        assert_ne!(
            canonical_username(&at_most[1..]),
            canonical_username(&format!("{}b", &at_most[1..]))
        );
        // One character NFKC makes 18 of still ends the form at the bound.
        let wide = canonical_username(&"\u{fdfa}".repeat(MAX_USERNAME_CHARS));
        assert_eq!(wide.chars().count(), MAX_USERNAME_CHARS);
    }
}
