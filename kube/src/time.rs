//! Timestamps as Kubernetes writes them: RFC 3339 in UTC, whole seconds (the precision
//! `metav1.Time` keeps on the wire, so a value read back compares equal).

/// The current time, e.g. `2026-11-24T02:40:00Z`.
pub fn now_rfc3339() -> String {
    let now = ::time::OffsetDateTime::now_utc();
    let now = now.replace_nanosecond(0).unwrap_or(now);
    now.format(&::time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// The current time as `metav1.MicroTime` writes it, e.g. `2026-11-24T02:40:00.123456Z`
/// (Lease renewals, Events' eventTime).
pub fn now_rfc3339_micro() -> String {
    let now = ::time::OffsetDateTime::now_utc();
    let micros = now.microsecond();
    let whole = now.replace_nanosecond(0).unwrap_or(now);
    let s = whole
        .format(&::time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    format!("{}.{micros:06}Z", s.trim_end_matches('Z'))
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

    #[test]
    fn micro_time_has_six_fraction_digits() {
        let t = super::now_rfc3339_micro();
        let frac = t.split_once('.').map(|(_, f)| f).unwrap_or_default();
        assert_eq!(frac.len(), 7, "{t}");
        assert!(frac.ends_with('Z'), "{t}");
    }
}
