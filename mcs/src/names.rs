//! Kubernetes' bounds on what the controller writes: the name rules it respects when it
//! makes up names, and messages and values cut to a length on a character boundary.

/// The longest object name Kubernetes accepts (a DNS-1123 subdomain).
pub(crate) const MAX_SUBDOMAIN_LEN: usize = 253;

/// Whether `s` is a DNS-1123 subdomain: dot-separated labels, at most 253 characters.
pub(crate) fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= MAX_SUBDOMAIN_LEN && s.split('.').all(is_dns1123_label_unbounded)
}

/// A label without the 63-character bound: Kubernetes checks subdomains against the
/// regular expression and the total length only.
fn is_dns1123_label_unbounded(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && b.iter().all(|c| alnum(c) || *c == b'-')
        }
        _ => false,
    }
}

/// FNV-1a (64 bit) over `parts`, each followed by a NUL so that `("ab","c")` and
/// `("a","bc")` differ. Chosen over `DefaultHasher` because names derived from it must
/// stay the same across Rust releases and controller restarts.
pub(crate) fn stable_hash(parts: &[&str]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
    }
    h
}

/// `text` reduced to `[a-z0-9-]`, without leading or trailing dashes, at most `max`
/// characters: a readable prefix for a generated name.
pub(crate) fn sanitize_prefix(text: &str, max: usize) -> String {
    let mapped: String = text
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = mapped.trim_start_matches('-');
    // Only ASCII remains, so byte and character positions agree.
    let cut = &trimmed[..trimmed.len().min(max)];
    cut.trim_end_matches('-').to_string()
}

/// `s` cut to at most `max` bytes on a character boundary, marked with an ellipsis.
pub(crate) fn truncate(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut cut = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s.push('…');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains() {
        assert!(is_dns1123_subdomain("east"));
        assert!(is_dns1123_subdomain("a-1"));
        assert!(!is_dns1123_subdomain("-a"));
        assert!(!is_dns1123_subdomain("a-"));
        assert!(!is_dns1123_subdomain("East"));
        assert!(!is_dns1123_subdomain(""));
        assert!(!is_dns1123_subdomain("a_b"));
        assert!(is_dns1123_subdomain("east.eu"));
        assert!(!is_dns1123_subdomain("east..eu"));
        assert!(is_dns1123_subdomain(&"a".repeat(253)));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
    }

    #[test]
    fn hash_separates_parts_and_is_stable() {
        assert_ne!(stable_hash(&["ab", "c"]), stable_hash(&["a", "bc"]));
        // Pinned: a change here renames every MCS EndpointSlice in every cluster.
        assert_eq!(format!("{:016x}", stable_hash(&[])), "cbf29ce484222325");
        assert_eq!(format!("{:016x}", stable_hash(&["a"])), "089be207b544f1e4");
    }

    #[test]
    fn prefixes_are_clean() {
        assert_eq!(sanitize_prefix("-Echo.v2_x-", 63), "echo-v2-x");
        assert_eq!(sanitize_prefix("abc-def", 4), "abc");
        assert_eq!(sanitize_prefix("é", 10), "");
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        let s = "ü".repeat(10);
        let t = truncate(s, 6);
        assert!(t.len() <= 6);
        assert!(t.ends_with('…'));
        assert_eq!(truncate("short".into(), 10), "short");
    }
}
