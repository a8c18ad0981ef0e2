//! Every relative link in the README, `docs/`, `examples/README.md`,
//! `softverbs/README.md` and `capi/README.md` points to a file that exists and, when it names a heading
//! (`file.md#anchor`), to a heading or `<a id>` of that file, by GitHub's anchor rules:
//! the heading's text in lower case, punctuation dropped, spaces turned into `-`, and
//! `-1`, `-2`, … appended to repeats.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The markdown files whose links are checked, relative to the repository root.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![
        root.join("README.md"),
        root.join("examples/README.md"),
        root.join("softverbs/README.md"),
        root.join("capi/README.md"),
    ];
    let mut more: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("the docs/ folder")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    more.sort();
    docs.extend(more);
    docs
}

/// The lines of `text` outside fenced code blocks, with inline code spans blanked.
fn prose_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Blank what lies between backticks: a link written as code is no link.
        let mut kept = String::with_capacity(line.len());
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                kept.push(c);
            }
        }
        out.push(kept);
    }
    out
}

/// The targets of the inline links `[text](target)` and reference definitions
/// `[label]: target` in `text`.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose_lines(text) {
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("");
            targets.push(target.to_string());
            rest = &after[end..];
        }
        let t = line.trim_start();
        if t.starts_with('[') {
            if let Some(i) = t.find("]: ") {
                targets.push(t[i + 3..].trim().to_string());
            }
        }
    }
    targets
}

/// GitHub's anchor for a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors `text` defines: one per heading (repeats numbered) and each
/// `<a id="…">` or `<a name="…">`.
fn anchors(text: &str) -> HashSet<String> {
    let mut set = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(line[hashes..].trim().trim_end_matches('#'));
            let mut name = base.clone();
            let mut n = 0;
            while set.contains(&name) {
                n += 1;
                name = format!("{base}-{n}");
            }
            set.insert(name);
        }
        for key in ["<a id=\"", "<a name=\""] {
            let mut rest = line;
            while let Some(i) = rest.find(key) {
                let after = &rest[i + key.len()..];
                let end = after.find('"').unwrap_or(after.len());
                set.insert(after[..end].to_string());
                rest = &after[end..];
            }
        }
    }
    set
}

/// What is wrong with each relative link of the document at `path` whose text is
/// `text`: one line per broken link.
fn broken_links(path: &Path, text: &str) -> Vec<String> {
    let dir = path.parent().expect("a document's folder");
    let mut broken = Vec::new();
    for target in link_targets(text) {
        if target.is_empty() {
            broken.push(format!("{}: an empty link target", path.display()));
            continue;
        }
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (file, anchor) = match target.split_once('#') {
            Some((f, a)) => (f, Some(a)),
            None => (target.as_str(), None),
        };
        if file.is_empty() {
            // An anchor of this very document.
            if let Some(anchor) = anchor {
                if !anchors(text).contains(anchor) {
                    broken.push(format!(
                        "{}: {target}: no heading here has the anchor #{anchor}",
                        path.display()
                    ));
                }
            }
            continue;
        }
        let resolved = dir.join(file);
        if !resolved.exists() {
            broken.push(format!(
                "{}: {target}: {} does not exist",
                path.display(),
                resolved.display()
            ));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        let Ok(linked) = std::fs::read_to_string(&resolved) else {
            broken.push(format!(
                "{}: {target}: #{anchor} names a heading of a file that is not text",
                path.display()
            ));
            continue;
        };
        if !anchors(&linked).contains(anchor) {
            broken.push(format!(
                "{}: {target}: {} has no heading with the anchor #{anchor}",
                path.display(),
                resolved.display()
            ));
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents(root) {
        let text =
            std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        checked += link_targets(&text).len();
        broken.extend(broken_links(&doc, &text));
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(
        checked > 50,
        "only {checked} links found: is the parser still finding them?"
    );
}

#[test]
fn anchors_follow_github_rules() {
    let text = "# vqp\n## What `.ci/run` adds\n## Striping policies' cost\n## Usage\n## Usage\n\
                ```sh\n# not a heading\n```\n<a id=\"striping\"></a>";
    let set = anchors(text);
    for want in [
        "vqp",
        "what-cirun-adds",
        "striping-policies-cost",
        "usage",
        "usage-1",
        "striping",
    ] {
        assert!(set.contains(want), "{want} missing from {set:?}");
    }
    assert!(!set.contains("not-a-heading"));
    assert_eq!(
        slug("What `cargo test --workspace` runs"),
        "what-cargo-test---workspace-runs"
    );
}

#[test]
fn a_broken_link_is_reported() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = root.join("docs/example.md");
    let text = "# Title\n\
                [fine](../README.md#quick-start) [self](#title) [web](https://example.com)\n\
                [no file](missing.md) [no heading](../README.md#no-such-heading)\n\
                `[code](not-a-link.md)`\n\
                ```text\n[fenced](also-not-a-link.md)\n```\n";
    let broken = broken_links(&doc, text);
    assert_eq!(broken.len(), 2, "{broken:#?}");
    assert!(broken[0].contains("missing.md"), "{broken:#?}");
    assert!(broken[1].contains("#no-such-heading"), "{broken:#?}");
}
