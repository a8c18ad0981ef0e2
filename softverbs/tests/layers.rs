//! The crate's layers, checked by reading its imports (the picture is in `src/lib.rs`,
//! "Layers"): every `crate::<module>` path in a module's code (comments left out)
//! names a module of its own layer or of one under it, the modules form no import
//! circle (a folder's files — a parent and its children — count as their top module),
//! and only the ABI layer looks the provider up (`provider::get`). Inside each folder
//! the files form no import circle either (paths through `crate::`, `super::` and
//! `self::` resolved to files; a parent and its own children may import each other),
//! here and in core's `vqp/`. The engine reaches its routes (`engine/route/`: in
//! process, the shared namespace, and the ones to come) only through the route
//! interface, `engine/route/mod.rs`: nothing else names a route, and no route another.

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

/// The top-level module a file belongs to (`engine/route/mod.rs` → `engine`,
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
    let circle = first_circle(&c.edges);
    assert!(
        circle.is_none(),
        "import circle: {}",
        circle.unwrap().join(" → ")
    );
}

/// The first circle of arrows in `edges` (node → the nodes it points at, each with a
/// value), found by a depth-first search for a back edge from each node in turn: its
/// nodes in order, the first repeated at the end.
fn first_circle<V>(edges: &BTreeMap<String, BTreeMap<String, V>>) -> Option<Vec<String>> {
    fn visit<V>(
        m: &str,
        edges: &BTreeMap<String, BTreeMap<String, V>>,
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
        for next in edges.get(m).into_iter().flat_map(|t| t.keys()) {
            if let Some(circle) = visit(next, edges, state, path) {
                return Some(circle);
            }
        }
        path.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    edges
        .keys()
        .find_map(|m| visit(m, edges, &mut state, &mut Vec::new()))
}

#[test]
fn the_circle_search_finds_a_circle_and_passes_a_tree() {
    let graph = |arrows: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeMap<String, ()>> = BTreeMap::new();
        for (a, b) in arrows {
            g.entry(a.to_string())
                .or_default()
                .insert(b.to_string(), ());
        }
        g
    };
    let tree = graph(&[("a", "b"), ("a", "c"), ("b", "c"), ("c", "d")]);
    assert_eq!(first_circle(&tree), None);
    let circle = graph(&[("a", "b"), ("b", "c"), ("c", "d"), ("d", "b")]);
    assert_eq!(
        first_circle(&circle),
        Some(vec!["b".into(), "c".into(), "d".into(), "b".into()])
    );
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

/// A path tree after `crate::`, `super::` or `self::` (the keyword included): every
/// full path it names, `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn path_trees(s: &str) -> Vec<Vec<String>> {
    fn tree(s: &str, at: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let b = s.as_bytes();
        let skip_ws = |at: &mut usize| {
            while *at < b.len() && (b[*at] as char).is_ascii_whitespace() {
                *at += 1;
            }
        };
        let mut path = prefix.to_vec();
        loop {
            skip_ws(at);
            if b.get(*at) == Some(&b'{') {
                *at += 1;
                loop {
                    skip_ws(at);
                    match b.get(*at) {
                        Some(b'}') => {
                            *at += 1;
                            return;
                        }
                        Some(b',') => *at += 1,
                        None => return,
                        _ => {
                            let before = *at;
                            tree(s, at, &path, out);
                            if *at == before {
                                *at += 1; // `*` or `self` alone: nothing more to name
                            }
                        }
                    }
                }
            }
            let start = *at;
            while *at < b.len() && (b[*at].is_ascii_alphanumeric() || b[*at] == b'_') {
                *at += 1;
            }
            if *at == start {
                break;
            }
            path.push(s[start..*at].to_string());
            skip_ws(at);
            if s[*at..].starts_with("::") {
                *at += 2;
            } else {
                break;
            }
        }
        if path.len() > prefix.len() {
            out.push(path);
        }
    }
    let mut out = Vec::new();
    tree(s, &mut 0, &[], &mut out);
    out
}

/// The module path of a file (`abi/cq.rs` → `abi::cq`, `abi/mod.rs` → `abi`, `lib.rs`
/// → the root), relative to the crate's `src`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && !(parts.is_empty() && (stem == "lib" || stem == "main")) {
        parts.push(stem.to_string());
    }
    parts
}

/// Every module path a file's code names (`crate::`, `super::`, `self::`, groups
/// included), resolved against the file's module and the inline `mod x { … }` blocks
/// around each path.
fn resolved_imports(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let b = code.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let prev = if i == 0 { b' ' } else { b[i - 1] };
        let fresh = !is_ident(prev) && prev != b':' && prev != b'$';
        match b[i] {
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                while inline.last().is_some_and(|(_, d)| *d > depth) {
                    inline.pop();
                }
            }
            _ if fresh && code[i..].starts_with("mod ") => {
                let rest = &code[i + 4..];
                let name: String = rest.chars().take_while(|c| is_ident(*c as u8)).collect();
                if rest[name.len()..].trim_start().starts_with('{') {
                    inline.push((name, depth + 1));
                }
            }
            _ if fresh
                && ["crate::", "super::", "self::"]
                    .iter()
                    .any(|k| code[i..].starts_with(k)) =>
            {
                let mut here: Vec<String> = module.to_vec();
                here.extend(inline.iter().map(|(n, _)| n.clone()));
                for path in path_trees(&code[i..]) {
                    let mut at = match path[0].as_str() {
                        "crate" => Vec::new(),
                        _ => here.clone(),
                    };
                    let mut segs = path.iter().peekable();
                    if path[0] != "crate" {
                        // `self` stays, each `super` climbs one.
                        while let Some(s) = segs.peek() {
                            match s.as_str() {
                                "self" => {}
                                "super" => {
                                    at.pop();
                                }
                                _ => break,
                            }
                            segs.next();
                        }
                    } else {
                        segs.next();
                    }
                    at.extend(segs.cloned());
                    out.push(at);
                }
                // Skip the keyword so that its `::` tail is not read again.
                i += 5;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The import circles between sibling files inside each folder of `src`: for a folder
/// `p/` the child modules are its files and subfolders; an import from inside child `a`
/// of a path inside child `b` is an arrow `a → b`. The parent (`p/mod.rs` or `p.rs`)
/// and its own children may import each other: only arrows between children count.
/// Each circle found is given with one file per arrow. `skip` names top-level files or
/// folders of `src` that are not modules of the crate (a `bin/` folder).
fn folder_circles(src: &Path, skip: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files.retain(|f| {
        let first = f.strip_prefix(src).unwrap().components().next().unwrap();
        !skip.contains(&first.as_os_str().to_string_lossy().as_ref())
    });
    files.sort();
    // Folder module path → child → child → a file that imports.
    type Arrows = BTreeMap<Vec<String>, BTreeMap<String, BTreeMap<String, PathBuf>>>;
    let mut arrows: Arrows = BTreeMap::new();
    for f in &files {
        let m = module_path(src, f);
        let code = code_of(&fs::read_to_string(f).expect("read a source"));
        for target in resolved_imports(&code, &m) {
            // The deepest folder holding both, where they are different children.
            let common = m.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common < m.len() && common < target.len() {
                let folder = m[..common].to_vec();
                let (from, to) = (m[common].clone(), target[common].clone());
                let dir = src.join(folder.join("/"));
                let child = |n: &str| dir.join(format!("{n}.rs")).is_file() || dir.join(n).is_dir();
                if child(&from) && child(&to) {
                    arrows
                        .entry(folder)
                        .or_default()
                        .entry(from)
                        .or_default()
                        .entry(to)
                        .or_insert_with(|| f.clone());
                }
            }
        }
    }
    let mut circles = Vec::new();
    for (folder, edges) in &arrows {
        // One circle per folder is enough to say.
        if let Some(circle) = first_circle(edges) {
            let arrows: Vec<String> = circle
                .windows(2)
                .map(|w| format!("  {} → {} ({})", w[0], w[1], edges[&w[0]][&w[1]].display()))
                .collect();
            circles.push(format!(
                "in {}/: {}\n{}",
                folder.join("/"),
                circle.join(" → "),
                arrows.join("\n")
            ));
        }
    }
    circles
}

#[test]
fn no_import_circle_between_the_files_of_a_folder() {
    let circles = folder_circles(&src(), &["bin"]);
    assert!(
        circles.is_empty(),
        "import circles between sibling modules:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_folder_reader_resolves_paths_to_modules() {
    let m = |s: &str| -> Vec<String> {
        if s.is_empty() {
            Vec::new()
        } else {
            s.split("::").map(String::from).collect()
        }
    };
    let code = code_of(
        "use super::{cq::Cq, object::{self, Handle}};\nuse crate::engine::Tables;\n\
         fn f() { self::x::y(); super::super::z(); }\n\
         mod tests { use super::w; }",
    );
    let found = resolved_imports(&code, &m("abi::qp"));
    assert_eq!(
        found,
        [
            m("abi::cq::Cq"),
            m("abi::object::self"),
            m("abi::object::Handle"),
            m("engine::Tables"),
            m("abi::qp::x::y"),
            m("z"),
            m("abi::qp::w"),
        ]
    );
    let src = Path::new("/s");
    assert_eq!(module_path(src, Path::new("/s/abi/mod.rs")), m("abi"));
    assert_eq!(module_path(src, Path::new("/s/abi/cq.rs")), m("abi::cq"));
    assert_eq!(module_path(src, Path::new("/s/lib.rs")), m(""));
}

/// Core's `vqp/` (issue 26 asks the same of it): `VirtualQp`'s parts import the struct
/// from `vqp/mod.rs`, their parent, and no part imports a sibling that imports it back.
/// Read here because this reader lives here; core itself is `no_std` and has no
/// file-reading tests.
#[test]
fn no_import_circle_between_the_files_of_cores_vqp_folder() {
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/src");
    assert!(
        core.join("vqp/mod.rs").is_file(),
        "core's sources at {}",
        core.display()
    );
    let circles: Vec<String> = folder_circles(&core, &[])
        .into_iter()
        .filter(|c| c.starts_with("in vqp/"))
        .collect();
    assert!(
        circles.is_empty(),
        "import circles between sibling modules of core's vqp/:\n{}",
        circles.join("\n")
    );
}

/// The route implementations of `src/engine/route/` (its files and folders other than
/// `mod.rs`): `process`, `namespace`, and the ones to come.
fn routes(src: &Path) -> BTreeSet<String> {
    let dir = src.join("engine/route");
    fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the route interface's folder {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|x| x == "rs"))
        .map(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .filter(|n| n != "mod")
        .collect()
}

/// The paths of `code` (a file of module `module`) that break the route rule: from
/// outside `engine::route`, a path into one of its `routes`; from inside route `r`, a
/// path into another route. The interface (`engine::route` itself) names them all.
fn route_breaches(code: &str, module: &[String], routes: &BTreeSet<String>) -> Vec<String> {
    if module == ["engine", "route"] {
        return Vec::new();
    }
    let inside = module.len() >= 3 && module[..2] == ["engine", "route"];
    resolved_imports(code, module)
        .into_iter()
        .filter(|t| t.len() >= 3 && t[..2] == ["engine", "route"] && routes.contains(&t[2]))
        .filter(|t| !inside || t[2] != module[2])
        .map(|t| t.join("::"))
        .collect()
}

/// The engine hands every WQE that leaves its requester to the route interface
/// (`engine/route/mod.rs`, its contract in `transport.rs`): nothing outside
/// `engine::route` names a route itself, and no route names another, so a route (UCX's,
/// next) is added beside the others and reached through the interface alone.
#[test]
fn the_routes_are_reached_only_through_the_route_interface() {
    let src = src();
    assert!(
        src.join("engine/route/mod.rs").is_file(),
        "the route interface, src/engine/route/mod.rs"
    );
    let routes = routes(&src);
    assert!(
        routes.contains("process") && routes.contains("namespace"),
        "the in-process and namespace routes under src/engine/route: {routes:?}"
    );
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut wrong = Vec::new();
    for f in files.iter().filter(|f| module_of(f) != "bin") {
        let code = code_of(&fs::read_to_string(f).expect("read a source"));
        for path in route_breaches(&code, &module_path(&src, f), &routes) {
            wrong.push(format!("{} names {path}", f.display()));
        }
    }
    assert!(
        wrong.is_empty(),
        "a route named past the route interface:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_route_rule_reader_finds_a_route_named_past_the_interface() {
    let m = |s: &str| -> Vec<String> { s.split("::").map(String::from).collect() };
    let routes: BTreeSet<String> = ["process", "namespace"].map(String::from).into();
    let code = code_of(
        "use super::route::{send, namespace::send as ns};\nuse crate::engine::route::Route;\n\
         fn f() { super::route::process::deliver(); }",
    );
    assert_eq!(
        route_breaches(&code, &m("engine::execute"), &routes),
        [
            "engine::route::namespace::send",
            "engine::route::process::deliver"
        ]
    );
    let code =
        code_of("use super::process::LocalMover;\nuse super::Route;\nuse self::requester::x;");
    assert_eq!(
        route_breaches(&code, &m("engine::route::namespace"), &routes),
        ["engine::route::process::LocalMover"]
    );
    let code = code_of("use super::super::route::namespace::x;\nuse super::send;");
    assert!(route_breaches(&code, &m("engine::route::namespace::requester"), &routes).is_empty());
    // The interface itself names its routes.
    let code = code_of("mod process;\nfn f() { process::deliver(); self::namespace::send(); }");
    assert!(route_breaches(&code, &m("engine::route"), &routes).is_empty());
}
