//! The public surface of `ratelimit-runtime`, item by item, against the committed listing
//! `tests/public_surface.txt`: a change to a public item (added, removed, a signature, a
//! deprecation) fails this test until the listing is blessed with it, so that every change
//! to the surface is deliberate and shows in review as a diff of that file.
//!
//! The listing is read from rustdoc's JSON (hidden items included, marked, as the
//! deprecated setters are hidden), made on the stable toolchain with `RUSTC_BOOTSTRAP=1`
//! in a target directory of its own (`target/public-surface`), so that it never forces a
//! rebuild of the normal one. It is walked generically (`serde_json`), so a new rustdoc
//! format version changes nothing here unless the shapes read below change.
//!
//! Bless a deliberate change with:
//!
//! ```text
//! RATELIMIT_BLESS=1 cargo test --test public_surface
//! ```

use std::{
    collections::{BTreeSet, HashSet},
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

const BLESS: &str = "RATELIMIT_BLESS=1 cargo test --test public_surface";

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs rustdoc's JSON output on `ratelimit-runtime` and reads it.
fn rustdoc_json() -> Value {
    let root = workspace();
    let target = root.join("target").join("public-surface");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .current_dir(&root)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("RUSTDOCFLAGS")
        .args(["rustdoc", "-q", "-p", "ratelimit-runtime", "--lib", "--"])
        .args(["-Z", "unstable-options", "--output-format", "json"])
        .arg("--document-hidden-items")
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo rustdoc failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let path = target.join("doc").join("ratelimit_runtime.json");
    let text = std::fs::read_to_string(&path).expect("rustdoc's JSON");
    serde_json::from_str(&text).expect("JSON")
}

struct Surface<'a> {
    index: &'a serde_json::Map<String, Value>,
    lines: BTreeSet<String>,
    /// Items that sit directly in a public module: a re-export of one is listed as a `use`.
    placed: HashSet<String>,
}

fn id(value: &Value) -> String {
    value.to_string()
}

impl<'a> Surface<'a> {
    fn item(&self, id: &str) -> Option<&'a Value> {
        self.index.get(id)
    }

    /// Finds every item placed directly in a public module, from `module`.
    fn place(&mut self, module: &Value) {
        for child in module["inner"]["module"]["items"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let Some(item) = self.item(&id(child)) else {
                continue;
            };
            if item["inner"].get("use").is_some() {
                continue;
            }
            if self.placed.insert(id(child)) && item["inner"].get("module").is_some() {
                self.place(item);
            }
        }
    }

    /// Lists `module` (named `path`) and everything public under it.
    fn module(&mut self, path: &str, module: &Value) {
        for child in module["inner"]["module"]["items"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let Some(item) = self.item(&id(child)) else {
                continue;
            };
            if let Some(using) = item["inner"].get("use") {
                let name = using["name"].as_str().unwrap_or("*");
                let target = using["id"].as_u64().map(|i| i.to_string());
                let local = target.as_deref().and_then(|t| self.item(t).map(|i| (t, i)));
                match local {
                    Some((target, inner)) if !self.placed.contains(target) => {
                        self.entry(&format!("{path}::{name}"), inner);
                    }
                    _ => {
                        let source = using["source"].as_str().unwrap_or("?");
                        self.line(item, format!("use {path}::{name} = {source}"));
                    }
                }
            } else {
                let name = item["name"].as_str().unwrap_or("?");
                self.entry(&format!("{path}::{name}"), item);
            }
        }
    }

    fn line(&mut self, item: &Value, text: String) {
        let mut marks = String::new();
        if !item["deprecation"].is_null() {
            marks.push_str("#[deprecated] ");
        }
        let hidden = item["attrs"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|attr| attr.to_string().contains("doc(hidden)"));
        if hidden {
            marks.push_str("#[doc(hidden)] ");
        }
        self.lines.insert(format!("{marks}{text}"));
    }

    /// One item at `path` with what hangs off it (fields, variants, methods, impls).
    fn entry(&mut self, path: &str, item: &Value) {
        let inner = &item["inner"];
        let (kind, body) = inner
            .as_object()
            .and_then(|o| o.iter().next())
            .map(|(k, v)| (k.as_str(), v))
            .unwrap_or(("?", &Value::Null));
        match kind {
            "module" => {
                self.line(item, format!("mod {path}"));
                self.module(path, item);
            }
            "function" => {
                let text = function(path, body);
                self.line(item, text);
            }
            "struct" | "enum" | "union" | "trait" => {
                let generics = generics(&body["generics"]);
                self.line(item, format!("{kind} {path}{generics}"));
                for field in body["kind"]["plain"]["fields"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    if let Some(field) = self.item(&id(field)) {
                        let name = field["name"].as_str().unwrap_or("?");
                        let ty = ty(&field["inner"]["struct_field"]);
                        self.line(field, format!("field {path}::{name}: {ty}"));
                    }
                }
                for variant in body["variants"].as_array().into_iter().flatten() {
                    if let Some(variant) = self.item(&id(variant)) {
                        let name = variant["name"].as_str().unwrap_or("?");
                        let shape = variant_shape(self, &variant["inner"]["variant"]["kind"]);
                        self.line(variant, format!("variant {path}::{name}{shape}"));
                    }
                }
                for member in body["items"].as_array().into_iter().flatten() {
                    if let Some(member) = self.item(&id(member)) {
                        self.member(path, member);
                    }
                }
                for imp in body["impls"].as_array().into_iter().flatten() {
                    if let Some(imp) = self.item(&id(imp)) {
                        self.implementation(path, imp);
                    }
                }
            }
            "use" => {}
            _ => {
                let detail = match kind {
                    "constant" => format!(": {}", ty(&body["type"])),
                    "static" => format!(": {}", ty(&body["type"])),
                    "type_alias" => format!(" = {}", ty(&body["type"])),
                    _ => String::new(),
                };
                let kind = kind.replace('_', " ");
                self.line(item, format!("{kind} {path}{detail}"));
            }
        }
    }

    /// A method, associated constant or type of `owner`.
    fn member(&mut self, owner: &str, member: &Value) {
        let name = member["name"].as_str().unwrap_or("?");
        let path = format!("{owner}::{name}");
        let inner = &member["inner"];
        if let Some(function) = inner.get("function") {
            let text = function_text(&path, function);
            self.line(member, text);
        } else if let Some(constant) = inner.get("assoc_const") {
            let text = format!("const {path}: {}", ty(&constant["type"]));
            self.line(member, text);
        } else if inner.get("assoc_type").is_some() {
            self.line(member, format!("type {path}"));
        }
    }

    fn implementation(&mut self, owner: &str, imp: &Value) {
        let body = &imp["inner"]["impl"];
        if !body["blanket_impl"].is_null() {
            return;
        }
        // Auto traits no user names (`Freeze`, `UnsafeUnpin`) come and go with the compiler.
        let auto = body["trait"]["path"].as_str().unwrap_or("");
        if body["is_synthetic"] == true && matches!(auto, "Freeze" | "UnsafeUnpin") {
            return;
        }
        match body["trait"].as_object() {
            None => {
                // Inherent: public items only (an inherent impl lists private ones too).
                for member in body["items"].as_array().into_iter().flatten() {
                    if let Some(member) = self.item(&id(member)) {
                        if member["visibility"] == "public" {
                            self.member(owner, member);
                        }
                    }
                }
            }
            Some(_) => {
                let negative = if body["is_negative"] == true { "!" } else { "" };
                let text = format!(
                    "impl{} {negative}{} for {owner}",
                    generics(&body["generics"]),
                    path_text(&body["trait"])
                );
                self.line(imp, text);
            }
        }
    }
}

fn variant_shape(surface: &Surface<'_>, kind: &Value) -> String {
    if let Some(fields) = kind.get("tuple") {
        let types: Vec<String> = fields
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                surface
                    .item(&id(f))
                    .map_or("_".to_owned(), |f| ty(&f["inner"]["struct_field"]))
            })
            .collect();
        format!("({})", types.join(", "))
    } else if let Some(plain) = kind.get("struct") {
        let fields: Vec<String> = plain["fields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| surface.item(&id(f)))
            .map(|f| {
                let name = f["name"].as_str().unwrap_or("?");
                format!("{name}: {}", ty(&f["inner"]["struct_field"]))
            })
            .collect();
        format!(" {{ {} }}", fields.join(", "))
    } else {
        String::new()
    }
}

fn function(path: &str, body: &Value) -> String {
    function_text(path, body)
}

fn function_text(path: &str, body: &Value) -> String {
    let header = &body["header"];
    let mut prefix = String::new();
    if header["is_const"] == true {
        prefix.push_str("const ");
    }
    if header["is_async"] == true {
        prefix.push_str("async ");
    }
    if header["is_unsafe"] == true {
        prefix.push_str("unsafe ");
    }
    let inputs: Vec<String> = body["sig"]["inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|pair| {
            let name = pair[0].as_str().unwrap_or("_");
            format!("{name}: {}", ty(&pair[1]))
        })
        .collect();
    let output = match &body["sig"]["output"] {
        Value::Null => String::new(),
        out => format!(" -> {}", ty(out)),
    };
    format!(
        "{prefix}fn {path}{}({}){output}{}",
        generics(&body["generics"]),
        inputs.join(", "),
        where_clause(&body["generics"])
    )
}

fn generics(generics: &Value) -> String {
    let params: Vec<String> = generics["params"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["kind"]["type"]["is_synthetic"] != true)
        .map(|p| {
            let name = p["name"].as_str().unwrap_or("?");
            let kind = &p["kind"];
            if let Some(bounds) = kind["type"]["bounds"].as_array().filter(|b| !b.is_empty()) {
                format!("{name}: {}", bounds_text(bounds))
            } else if let Some(constant) = kind.get("const") {
                format!("const {name}: {}", ty(&constant["type"]))
            } else {
                name.to_owned()
            }
        })
        .collect();
    if params.is_empty() {
        String::new()
    } else {
        format!("<{}>", params.join(", "))
    }
}

fn where_clause(generics: &Value) -> String {
    let predicates: Vec<String> = generics["where_predicates"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| match p.get("bound_predicate") {
            Some(bound) => format!(
                "{}: {}",
                ty(&bound["type"]),
                bounds_text(bound["bounds"].as_array().map_or(&[][..], Vec::as_slice))
            ),
            None => p.to_string(),
        })
        .collect();
    if predicates.is_empty() {
        String::new()
    } else {
        format!(" where {}", predicates.join(", "))
    }
}

fn bounds_text(bounds: &[Value]) -> String {
    bounds
        .iter()
        .map(|b| {
            if let Some(bound) = b.get("trait_bound") {
                let modifier = if bound["modifier"] == "maybe" {
                    "?"
                } else {
                    ""
                };
                format!("{modifier}{}", path_text(&bound["trait"]))
            } else if let Some(lifetime) = b.get("outlives") {
                lifetime.as_str().unwrap_or("'_").to_owned()
            } else {
                b.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

/// A path by its last segment (the way the source spells it is no part of the surface),
/// with its generic arguments.
fn path_text(path: &Value) -> String {
    let full = path["path"].as_str().unwrap_or("?");
    let name = full.rsplit("::").next().unwrap_or(full);
    format!("{name}{}", args_text(&path["args"]))
}

fn args_text(args: &Value) -> String {
    if let Some(angle) = args.get("angle_bracketed") {
        let mut parts: Vec<String> = angle["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                if let Some(t) = a.get("type") {
                    ty(t)
                } else if let Some(l) = a.get("lifetime") {
                    l.as_str().unwrap_or("'_").to_owned()
                } else {
                    a.to_string()
                }
            })
            .collect();
        for constraint in angle["constraints"].as_array().into_iter().flatten() {
            let name = constraint["name"].as_str().unwrap_or("?");
            let binding = &constraint["binding"];
            let value = match binding.get("equality") {
                Some(eq) => format!(" = {}", ty(eq.get("type").unwrap_or(eq))),
                None => format!(": {binding}"),
            };
            parts.push(format!("{name}{value}"));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("<{}>", parts.join(", "))
        }
    } else if let Some(paren) = args.get("parenthesized") {
        let inputs: Vec<String> = paren["inputs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(ty)
            .collect();
        let output = match &paren["output"] {
            Value::Null => String::new(),
            out => format!(" -> {}", ty(out)),
        };
        format!("({}){output}", inputs.join(", "))
    } else {
        String::new()
    }
}

fn ty(ty_value: &Value) -> String {
    let Some((kind, v)) = ty_value.as_object().and_then(|o| o.iter().next()) else {
        return ty_value
            .as_str()
            .map_or_else(|| ty_value.to_string(), str::to_owned);
    };
    match kind.as_str() {
        "resolved_path" => path_text(v),
        "generic" | "primitive" => v.as_str().unwrap_or("?").to_owned(),
        "borrowed_ref" => {
            let lifetime = v["lifetime"]
                .as_str()
                .map_or(String::new(), |l| format!("{l} "));
            let mutable = if v["is_mutable"] == true { "mut " } else { "" };
            format!("&{lifetime}{mutable}{}", ty(&v["type"]))
        }
        "raw_pointer" => {
            let mutable = if v["is_mutable"] == true {
                "mut"
            } else {
                "const"
            };
            format!("*{mutable} {}", ty(&v["type"]))
        }
        "tuple" => {
            let parts: Vec<String> = v.as_array().into_iter().flatten().map(ty).collect();
            format!("({})", parts.join(", "))
        }
        "slice" => format!("[{}]", ty(v)),
        "array" => format!("[{}; {}]", ty(&v["type"]), v["len"].as_str().unwrap_or("_")),
        "impl_trait" => format!(
            "impl {}",
            bounds_text(v.as_array().map_or(&[][..], Vec::as_slice))
        ),
        "dyn_trait" => {
            let mut traits: Vec<String> = v["traits"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| path_text(&t["trait"]))
                .collect();
            if let Some(lifetime) = v["lifetime"].as_str() {
                traits.push(lifetime.to_owned());
            }
            format!("dyn {}", traits.join(" + "))
        }
        "function_pointer" => {
            let inputs: Vec<String> = v["sig"]["inputs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|pair| ty(&pair[1]))
                .collect();
            let output = match &v["sig"]["output"] {
                Value::Null => String::new(),
                out => format!(" -> {}", ty(out)),
            };
            format!("fn({}){output}", inputs.join(", "))
        }
        "qualified_path" => format!(
            "<{} as {}>::{}",
            ty(&v["self_type"]),
            path_text(&v["trait"]),
            v["name"].as_str().unwrap_or("?")
        ),
        _ => ty_value.to_string(),
    }
}

fn listing(json: &Value) -> String {
    let index = json["index"].as_object().expect("an index");
    let root_id = id(&json["root"]);
    let root = &index[&root_id];
    let mut surface = Surface {
        index,
        lines: BTreeSet::new(),
        placed: HashSet::new(),
    };
    surface.place(root);
    surface.module("ratelimit_runtime", root);
    let mut text = String::new();
    for line in &surface.lines {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// The lines only in `expected` (`-`) and only in `actual` (`+`): both are sorted sets.
fn diff(expected: &str, actual: &str) -> String {
    let old: BTreeSet<&str> = expected.lines().collect();
    let new: BTreeSet<&str> = actual.lines().collect();
    let mut out = String::new();
    for line in old.difference(&new) {
        out.push_str(&format!("- {line}\n"));
    }
    for line in new.difference(&old) {
        out.push_str(&format!("+ {line}\n"));
    }
    out
}

#[test]
fn the_public_surface_is_the_committed_one() {
    let snapshot: &Path = &workspace().join("tests").join("public_surface.txt");
    let actual = listing(&rustdoc_json());
    // The walk found the crate: its entry points are in it, and the deprecated setters are
    // listed as such.
    for expected in [
        "struct ratelimit_runtime::RateLimiter",
        "fn ratelimit_runtime::RateLimiter::check_settings(self: &Self) -> Result<(), ConfigError>",
        "#[deprecated] fn ratelimit_runtime::RateLimiter::key_prefix(self: Self, prefix: &str) -> Self",
    ] {
        assert!(
            actual.lines().any(|line| line == expected),
            "`{expected}` is not in the listing:\n{actual}"
        );
    }
    if std::env::var_os("RATELIMIT_BLESS").is_some() {
        std::fs::write(snapshot, &actual).expect("the snapshot written");
        return;
    }
    let expected = std::fs::read_to_string(snapshot).unwrap_or_default();
    assert!(
        expected == actual,
        "the public surface of ratelimit-runtime changed (- committed, + now):\n{}\nIf the change is deliberate, record it in CHANGELOG.md and bless it:\n    {BLESS}",
        diff(&expected, &actual)
    );
}
