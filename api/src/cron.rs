//! CronJob schedules as Kubernetes reads them (the standard five-field cron syntax plus
//! the `@hourly`-style descriptors and `@every <duration>`), so the API server can refuse
//! a schedule kube-apiserver would refuse and the local clusters' CronJob controller can
//! compute when a Job is due — both from one parser.

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, ToSpan};

/// Why a schedule or time zone cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error("expected exactly 5 fields, found {0}: {1:?}")]
    FieldCount(usize, String),
    #[error("unrecognized descriptor: {0}")]
    Descriptor(String),
    #[error("failed to parse int from {0}")]
    Number(String),
    #[error("{what} ({value}) {bound} ({limit})")]
    Bounds {
        what: &'static str,
        value: u32,
        bound: &'static str,
        limit: u32,
    },
    #[error("beginning of range ({0}) beyond end of range ({1}): {2}")]
    Range(u32, u32, String),
    #[error("step of range should be a positive number: {0}")]
    Step(String),
    #[error("failed to parse duration {0:?}")]
    Duration(String),
    #[error("unknown time zone {0}")]
    TimeZone(String),
}

/// The inclusive bounds and names of one field.
struct Field {
    what: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Field = Field {
    what: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    what: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Field = Field {
    what: "day of month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Field = Field {
    what: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Field = Field {
    what: "day of week",
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CronSchedule {
    /// Five fields, each a set of allowed values (bit `n` = value `n`).
    Fields {
        minutes: u64,
        hours: u64,
        days_of_month: u64,
        months: u64,
        days_of_week: u64,
        /// `*` (or `?`) in day of month or day of week: then both must match; otherwise
        /// either may (cron's rule).
        any_day: bool,
    },
    /// `@every <duration>`: at fixed intervals after the previous run.
    Every(SignedDuration),
}

impl CronSchedule {
    /// Parse a schedule the way kube-apiserver does (robfig/cron's standard parser).
    pub fn parse(spec: &str) -> Result<Self, CronError> {
        let spec = spec.trim();
        if let Some(d) = spec.strip_prefix('@') {
            return Self::descriptor(d);
        }
        let fields: Vec<&str> = spec.split_whitespace().collect();
        let [minute, hour, dom, month, dow] = fields[..] else {
            return Err(CronError::FieldCount(fields.len(), spec.to_string()));
        };
        let star = |f: &str| f.starts_with('*') || f.starts_with('?');
        Ok(Self::Fields {
            minutes: field(minute, &MINUTE)?,
            hours: field(hour, &HOUR)?,
            days_of_month: field(dom, &DOM)?,
            months: field(month, &MONTH)?,
            days_of_week: field(dow, &DOW)?,
            any_day: star(dom) || star(dow),
        })
    }

    fn descriptor(d: &str) -> Result<Self, CronError> {
        let fixed = |m: u64, h: u64, dom: u64, mon: u64, dow: u64| Self::Fields {
            minutes: m,
            hours: h,
            days_of_month: dom,
            months: mon,
            days_of_week: dow,
            any_day: true,
        };
        let all = |f: &Field| bits(f.min, f.max, 1);
        Ok(match d {
            "yearly" | "annually" => fixed(1, 1, 1 << 1, 1 << 1, all(&DOW)),
            "monthly" => fixed(1, 1, 1 << 1, all(&MONTH), all(&DOW)),
            "weekly" => fixed(1, 1, all(&DOM), all(&MONTH), 1),
            "daily" | "midnight" => fixed(1, 1, all(&DOM), all(&MONTH), all(&DOW)),
            "hourly" => fixed(1, all(&HOUR), all(&DOM), all(&MONTH), all(&DOW)),
            other => match other.strip_prefix("every ") {
                Some(d) => Self::Every(duration(d.trim())?),
                None => return Err(CronError::Descriptor(format!("@{other}"))),
            },
        })
    }

    /// The first time strictly after `after` (to the whole minute, in `tz`) the schedule
    /// fires; `None` when it never does within five years (e.g. the 30th of February).
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let (minutes, hours, doms, months, dows, any_day) = match *self {
            Self::Every(d) => {
                // At least a second apart, so a zero duration cannot spin.
                let step = d.max(SignedDuration::from_secs(1));
                return after.checked_add(step).ok();
            }
            Self::Fields {
                minutes,
                hours,
                days_of_month,
                months,
                days_of_week,
                any_day,
            } => (minutes, hours, days_of_month, months, days_of_week, any_day),
        };
        let has = |set: u64, v: i8| v >= 0 && set & (1u64 << v as u32) != 0;
        let start = after.to_zoned(tz.clone()).datetime();
        let start = start.with().second(0).subsec_nanosecond(0).build().ok()?;
        let start = start.checked_add(1.minute()).ok()?;
        let mut day: Date = start.date();
        for _ in 0..(366 * 5) {
            let dom_ok = has(doms, day.day());
            let dow_ok = has(dows, day.weekday().to_sunday_zero_offset());
            let day_ok = if any_day {
                dom_ok && dow_ok
            } else {
                dom_ok || dow_ok
            };
            if has(months, day.month()) && day_ok {
                let from = if day == start.date() {
                    start.time()
                } else {
                    Time::midnight()
                };
                for h in from.hour()..24 {
                    if !has(hours, h) {
                        continue;
                    }
                    let first_minute = if h == from.hour() { from.minute() } else { 0 };
                    if let Some(m) = (first_minute..60).find(|m| has(minutes, *m)) {
                        let at = DateTime::from_parts(day, Time::new(h, m, 0, 0).ok()?);
                        let ts = tz.to_ambiguous_timestamp(at).compatible().ok()?;
                        if ts > after {
                            return Some(ts);
                        }
                    }
                }
            }
            day = day.tomorrow().ok()?;
        }
        None
    }
}

/// A time zone by its IANA name, as `CronJob.spec.timeZone` names it.
pub fn time_zone(name: &str) -> Result<TimeZone, CronError> {
    // Names only: a POSIX TZ string or a path is not a zone name.
    if name.is_empty() || name.starts_with('/') || name.contains("..") || name.contains(',') {
        return Err(CronError::TimeZone(name.to_string()));
    }
    TimeZone::get(name).map_err(|_| CronError::TimeZone(name.to_string()))
}

fn bits(min: u32, max: u32, step: u32) -> u64 {
    (min..=max)
        .step_by(step as usize)
        .fold(0, |b, v| b | 1 << v)
}

/// One field: comma-separated ranges, each `*`, `?`, `n`, `a-b`, optionally `/step`.
fn field(text: &str, f: &Field) -> Result<u64, CronError> {
    text.split(',')
        .try_fold(0u64, |acc, r| Ok(acc | range(r, f)?))
}

fn range(text: &str, f: &Field) -> Result<u64, CronError> {
    let (span, step) = match text.split_once('/') {
        Some((span, step)) => {
            let n = number(step, &[])?;
            if n == 0 {
                return Err(CronError::Step(text.to_string()));
            }
            (span, Some(n))
        }
        None => (text, None),
    };
    let (lo, hi) = if span == "*" || span == "?" {
        (f.min, f.max)
    } else {
        match span.split_once('-') {
            Some((a, b)) => (number(a, f.names)?, number(b, f.names)?),
            // `n/step` runs from n to the field's end.
            None => {
                let n = number(span, f.names)?;
                (n, if step.is_some() { f.max } else { n })
            }
        }
    };
    if lo < f.min {
        return Err(CronError::Bounds {
            what: f.what,
            value: lo,
            bound: "below minimum",
            limit: f.min,
        });
    }
    if hi > f.max {
        return Err(CronError::Bounds {
            what: f.what,
            value: hi,
            bound: "above maximum",
            limit: f.max,
        });
    }
    if lo > hi {
        return Err(CronError::Range(lo, hi, text.to_string()));
    }
    Ok(bits(lo, hi, step.unwrap_or(1)))
}

fn number(text: &str, names: &[&str]) -> Result<u32, CronError> {
    let lower = text.to_ascii_lowercase();
    // Month names count from 1, weekday names from 0.
    let base = if names.len() == 12 { 1 } else { 0 };
    if let Some(i) = names.iter().position(|n| *n == lower) {
        return Ok(i as u32 + base);
    }
    text.parse()
        .map_err(|_| CronError::Number(text.to_string()))
}

/// A Go duration (`90s`, `1h30m`, `2.5h`), as `@every` takes it.
fn duration(text: &str) -> Result<SignedDuration, CronError> {
    let bad = || CronError::Duration(text.to_string());
    let mut total = 0f64;
    let mut rest = text;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let value: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    if !total.is_finite() || total > 1e12 {
        return Err(bad());
    }
    Ok(SignedDuration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(spec: &str, after: &str) -> String {
        CronSchedule::parse(spec)
            .unwrap()
            .next_after(at(after), &TimeZone::UTC)
            .map(|t| t.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn fields_steps_ranges_and_names() {
        assert_eq!(
            next("*/5 * * * *", "2026-11-24T10:02:30Z"),
            "2026-11-24T10:05:00Z"
        );
        assert_eq!(
            next("* * * * *", "2026-11-24T10:02:00Z"),
            "2026-11-24T10:03:00Z"
        );
        assert_eq!(
            next("0 9-17/4 * * *", "2026-11-24T13:00:00Z"),
            "2026-11-24T17:00:00Z"
        );
        assert_eq!(
            next("30 2 1 jan *", "2026-11-24T00:00:00Z"),
            "2027-01-01T02:30:00Z"
        );
        assert_eq!(
            next("0 0 * * SUN", "2026-11-24T00:00:00Z"),
            "2026-11-29T00:00:00Z"
        );
        assert_eq!(
            next("0 0 29 2 ?", "2026-03-01T00:00:00Z"),
            "2028-02-29T00:00:00Z"
        );
        assert_eq!(
            next("@hourly", "2026-11-24T10:02:00Z"),
            "2026-11-24T11:00:00Z"
        );
        assert_eq!(
            next("@every 90s", "2026-11-24T10:02:00Z"),
            "2026-11-24T10:03:30Z"
        );
        // Both days restricted: either matches (the 1st, or any Monday).
        assert_eq!(
            next("0 0 1 * mon", "2026-11-24T00:00:00Z"),
            "2026-11-30T00:00:00Z"
        );
        assert_eq!(next("0 0 30 2 *", "2026-01-01T00:00:00Z"), "");
    }

    #[test]
    fn time_zones_shift_the_wall_clock() {
        let tz = time_zone("Europe/Berlin").unwrap();
        let t = CronSchedule::parse("0 9 * * *")
            .unwrap()
            .next_after(at("2026-11-24T00:00:00Z"), &tz)
            .unwrap();
        assert_eq!(t.to_string(), "2026-11-24T08:00:00Z");
        assert!(time_zone("Mars/Olympus").is_err());
        assert!(time_zone("../etc/passwd").is_err());
    }

    #[test]
    fn what_kube_refuses_is_refused() {
        for bad in [
            "",
            "* * * *",
            "* * * * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "* * * * 7",
            "5-1 * * * *",
            "*/0 * * * *",
            "x * * * *",
            "@fortnightly",
            "@every",
            "@every 5parsecs",
            "ü * * * *",
        ] {
            assert!(CronSchedule::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
