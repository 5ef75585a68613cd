//! Rewrites the generated section of BENCHMARKS.md, between two marker comments, and leaves
//! the hand-written text around it alone.

use std::path::Path;

pub const BEGIN: &str = "<!-- http_bench: generated section begins; do not edit by hand -->";
pub const END: &str = "<!-- http_bench: generated section ends -->";

pub fn write_section(path: &Path, section: &str) -> Result<(), String> {
    let current = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            format!("# Benchmarks\n\n{BEGIN}\n{END}\n")
        }
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let updated = replace_section(&current, section)
        .ok_or_else(|| format!("{} has no `{BEGIN}` … `{END}` markers", path.display()))?;
    std::fs::write(path, updated).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn replace_section(text: &str, section: &str) -> Option<String> {
    let start = text.find(BEGIN)? + BEGIN.len();
    let end = start + text[start..].find(END)?;
    Some(format!(
        "{}\n\n{}\n{}",
        &text[..start],
        section.trim_end(),
        &text[end..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_generated_section_changes() {
        let text = format!("# B\n\nprose\n\n{BEGIN}\nold\n{END}\n\nmore prose\n");
        let updated = replace_section(&text, "new table\n").unwrap();
        assert_eq!(
            updated,
            format!("# B\n\nprose\n\n{BEGIN}\n\nnew table\n{END}\n\nmore prose\n")
        );
        assert_eq!(replace_section(&updated, "new table").unwrap(), updated);
        assert_eq!(replace_section("no markers", "x"), None);
    }
}
