//! The crate's layers, checked by reading its imports (the picture is in `src/lib.rs`,
//! "Layers"): every `crate::<module>` path in a module's code (comments left out)
//! names a module of its own layer or of one under it, the modules form no import
//! circle (a folder's files — a parent and its children — count as their top module),
//! and only the ABI layer looks the provider up (`provider::get`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The top-level modules of `src/`, by layer (1 on top). A path `crate::<name>` whose
/// name is none of them names an item of the crate root, which is the ABI layer.
const LAYERS: &[(u8, &[&str])] = &[
    (1, &["lib", "abi", "symbols", "launch", "bin"]),
    (2, &["provider"]),
    (3, &["qp"]),
    (4, &["engine"]),
    (5, &["cq", "srq", "xrc", "mem", "wqe"]),
    (6, &["transport", "shared", "device", "link", "ucx"]),
    (7, &["config", "os", "netdev", "locate", "region"]),
];

fn layer_of(module: &str) -> u8 {
    LAYERS
        .iter()
        .find(|(_, mods)| mods.contains(&module))
        .map_or(1, |(l, _)| *l)
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).expect("read src") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file belongs to (`engine/remote/mod.rs` → `engine`,
/// `lib.rs` → `lib`).
fn module_of(file: &Path) -> String {
    let rel = file.strip_prefix(src()).expect("under src");
    let first = rel.components().next().expect("a component");
    let name = first.as_os_str().to_string_lossy();
    name.trim_end_matches(".rs").to_string()
}

/// The code of a file without its comments and the contents of its string literals
/// (a plain lexer: line and block comments, strings with escapes, char literals).
fn code_of(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\') => {
                // A char literal ('x', '\n', '\''); a lifetime has no closing quote.
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

/// The top-level modules a file's code names through `crate::`, including those in a
/// `use crate::{a, b::c}` group.
fn imports(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().last();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue; // `$crate::` or a longer identifier
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c, d}`: the first name of each entry.
            let mut depth = 0;
            let mut start = true;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && (c.is_ascii_alphanumeric() || c == '_') => {
                        found.insert(ident(&group[k..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// Whether `code` calls a free function `get()` (not a method `.get()`, not its
/// definition `fn get()`).
fn calls_get(code: &str) -> bool {
    code.match_indices("get()").any(|(at, _)| {
        let before = code[..at].trim_end_matches(' ');
        let prev = before.chars().last();
        !prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == ':')
            && !before.ends_with("fn")
    })
}

struct Crate {
    /// Module → the modules it names, with a file that does.
    edges: BTreeMap<String, BTreeMap<String, PathBuf>>,
    /// Files that look the provider up.
    lookups: Vec<PathBuf>,
}

fn read_crate() -> Crate {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    files.sort();
    assert!(
        files.len() > 50,
        "found the sources ({} files)",
        files.len()
    );
    let mut c = Crate {
        edges: BTreeMap::new(),
        lookups: Vec::new(),
    };
    for f in files {
        let m = module_of(&f);
        let code = code_of(&fs::read_to_string(&f).expect("read a source"));
        let to = c.edges.entry(m.clone()).or_default();
        for name in imports(&code) {
            let target = if layer_of(&name) == 1 && !LAYERS[0].1.contains(&name.as_str()) {
                "lib".to_string() // an item of the crate root
            } else {
                name
            };
            if target != m {
                to.entry(target).or_insert_with(|| f.clone());
            }
        }
        // The lookup is `provider::get()` (or `get()` inside the provider, which
        // defines it and the static behind it).
        let lookup = code.contains("provider::get(") || (m == "provider" && calls_get(&code));
        if lookup && layer_of(&m) > 1 {
            c.lookups.push(f);
        }
    }
    c
}

#[test]
fn every_module_imports_only_its_layer_and_those_under_it() {
    let c = read_crate();
    let mut wrong = Vec::new();
    for (from, to) in &c.edges {
        for (target, file) in to {
            if layer_of(target) < layer_of(from) {
                wrong.push(format!(
                    "{} (layer {}) names crate::{target} (layer {})",
                    file.display(),
                    layer_of(from),
                    layer_of(target)
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "imports up:\n{}", wrong.join("\n"));
}

#[test]
fn every_module_has_a_layer() {
    let c = read_crate();
    let unplaced: Vec<&String> = c
        .edges
        .keys()
        .filter(|m| !LAYERS.iter().any(|(_, mods)| mods.contains(&m.as_str())))
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules with no layer in LAYERS (place them, and in the picture of src/lib.rs): {unplaced:?}"
    );
}

#[test]
fn no_module_is_in_an_import_circle() {
    let c = read_crate();
    // Depth-first search for a back edge.
    fn visit(
        m: &str,
        c: &Crate,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(m) {
            Some(1) => {
                let at = path.iter().position(|p| p == m).unwrap_or(0);
                let mut circle = path[at..].to_vec();
                circle.push(m.to_string());
                return Some(circle);
            }
            Some(_) => return None,
            None => {}
        }
        state.insert(m.to_string(), 1);
        path.push(m.to_string());
        for next in c.edges.get(m).into_iter().flat_map(|t| t.keys()) {
            if let Some(circle) = visit(next, c, state, path) {
                return Some(circle);
            }
        }
        path.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in c.edges.keys() {
        let circle = visit(m, &c, &mut state, &mut Vec::new());
        assert!(
            circle.is_none(),
            "import circle: {}",
            circle.unwrap().join(" → ")
        );
    }
}

#[test]
fn only_the_abi_layer_looks_the_provider_up() {
    let c = read_crate();
    assert!(
        c.lookups.is_empty(),
        "provider::get() under the ABI layer: {:?}",
        c.lookups
    );
}

#[test]
fn the_reader_sees_imports_and_not_comments_or_strings() {
    let code = code_of(
        "use crate::{engine::Tables, mem};\n// crate::abi\n/* crate::provider */\n\
         let s = \"crate::qp\"; let c = '\"'; fn f<'a>(x: &'a crate::wqe::SendWqe) {}\n\
         crate::shared::sys::x();",
    );
    let found: Vec<String> = imports(&code).into_iter().collect();
    assert_eq!(found, ["engine", "mem", "shared", "wqe"]);
    assert!(calls_get("let p = get();"));
    assert!(!calls_get("pub fn get() -> P { X.get().unwrap() }"));
}
