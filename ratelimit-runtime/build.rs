//! Writes the scripts out whole (`scripts/README.md`): each line
//! `--@include <path>` of a script is replaced by that file (a path relative to `scripts/`),
//! at the line's indentation, includes nested. `store/script.rs` includes the results.

use std::{env, fs, path::Path};

/// The scripts Redis runs (five check scripts, the batch, the give-back, the peek and the reservation), in
/// `scripts/`;
/// the rest of that directory is their parts.
const SCRIPTS: [&str; 9] = [
    "fixed_window.lua",
    "sliding_window.lua",
    "sliding_log.lua",
    "gcra.lua",
    "check.lua",
    "give_back.lua",
    "peek.lua",
    "batch.lua",
    "reserve.lua",
];

fn main() {
    let dir = Path::new(&env::var("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("scripts");
    let out = Path::new(&env::var("OUT_DIR").expect("cargo sets it")).join("scripts");
    println!("cargo::rerun-if-changed=scripts");
    fs::create_dir_all(&out).expect("create OUT_DIR/scripts");
    for script in SCRIPTS {
        let mut text = String::new();
        expand(&dir, script, "", &mut Vec::new(), &mut text);
        fs::write(out.join(script), text).expect("write an expanded script");
    }
}

/// Appends `file` to `text`, every line after `indent`, with its includes expanded.
/// `within` is the chain of files being expanded, to refuse a cycle.
fn expand(dir: &Path, file: &str, indent: &str, within: &mut Vec<String>, text: &mut String) {
    assert!(
        !within.iter().any(|f| f == file),
        "scripts: {file} includes itself through {within:?}"
    );
    let source = fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("scripts: cannot read {file} (included from {within:?}): {e}"));
    within.push(file.to_owned());
    for line in source.lines() {
        let body = line.trim_start();
        match body.strip_prefix("--@include ") {
            Some(part) => {
                let inner = format!("{indent}{}", &line[..line.len() - body.len()]);
                expand(dir, part.trim(), &inner, within, text);
            }
            None if line.is_empty() => text.push('\n'),
            None => {
                text.push_str(indent);
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    within.pop();
}
