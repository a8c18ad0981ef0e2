//! Whole numbers and byte counts on the command line, shared by `write_bw` and `lat`
//! (which includes this file with `#[path]`), so that both take `4096`, `64K`, `1M`
//! and `1G` alike.

/// A whole number, for `flag`.
pub fn number(flag: &str, v: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .map_err(|_| format!("{flag}: '{v}' is not a whole number"))
}

/// A byte count with an optional binary suffix (`K`, `M`, `G`, either case):
/// `4096`, `64K`, `1M`, `1G`.
pub fn bytes(flag: &str, v: &str) -> Result<u64, String> {
    let (digits, shift) = match v.char_indices().last() {
        Some((i, 'k' | 'K')) => (&v[..i], 10),
        Some((i, 'm' | 'M')) => (&v[..i], 20),
        Some((i, 'g' | 'G')) => (&v[..i], 30),
        _ => (v, 0),
    };
    let n = number(flag, digits).map_err(|_| format!("{flag}: '{v}' is not a byte count"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{flag}: '{v}' is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_are_binary() {
        for (v, n) in [
            ("4096", 4096),
            ("4K", 4096),
            ("4k", 4096),
            ("64K", 65536),
            ("1M", 1 << 20),
            ("1G", 1 << 30),
            ("0", 0),
        ] {
            assert_eq!(bytes("--size", v), Ok(n), "{v}");
        }
    }

    #[test]
    fn junk_and_overflow_are_refused() {
        for v in ["", "K", "4KB", "-1", "1.5M", "4T", "18446744073709551615K"] {
            assert!(bytes("--size", v).is_err(), "{v} was accepted");
        }
        assert_eq!(
            bytes("--size", "4X"),
            Err("--size: '4X' is not a byte count".into())
        );
    }
}
