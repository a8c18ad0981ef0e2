//! The README's quick start is quoted from `examples/quickstart.rs`, line for line apart
//! from the indentation; this keeps the quote from drifting away from the program that
//! CI runs.

#[test]
fn readme_quick_start_is_quoted_from_the_example() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let example =
        std::fs::read_to_string(format!("{root}/examples/quickstart.rs")).expect("quickstart.rs");
    let section = readme
        .split("## Quick start")
        .nth(1)
        .expect("the README has a Quick start section");
    let block = section
        .split("```rust")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the Quick start section holds a rust block");
    // Past the fence's info string (`,ignore`), each non-empty line of the quote must be a
    // line of the example, in the same order.
    let mut lines = example.lines().map(str::trim);
    let mut quoted = 0;
    for want in block
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        assert!(
            lines.any(|have| have == want),
            "README quick start line {want:?} is not in examples/quickstart.rs (in order)"
        );
        quoted += 1;
    }
    assert!(quoted > 30, "the quoted block shrank to {quoted} lines");
}
