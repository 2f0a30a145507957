//! Timestamps as Kubernetes writes them: RFC 3339 in UTC, whole seconds (the precision
//! `metav1.Time` keeps on the wire, so a value read back compares equal).

/// The current time, e.g. `2026-11-24T02:40:00Z`.
pub fn now_rfc3339() -> String {
    let now = ::time::OffsetDateTime::now_utc();
    let now = now.replace_nanosecond(0).unwrap_or(now);
    now.format(&::time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn whole_seconds_in_utc() {
        let t = super::now_rfc3339();
        assert!(t.ends_with('Z') && !t.contains('.'), "{t}");
        assert!(
            ::time::OffsetDateTime::parse(&t, &::time::format_description::well_known::Rfc3339)
                .is_ok()
        );
    }
}
