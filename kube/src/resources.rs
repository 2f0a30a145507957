//! Resource quantities (`500m`, `2`, `128Mi`, `1G`) and what a pod requests: what the
//! scheduler of a local cluster and the placement of namespaces onto clusters count.

use std::ops::{Add, Mul, Sub};

use serde_json::Value;

/// A quantity in base units (cores, bytes); `None` if it is not a Kubernetes quantity.
pub fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let n: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse().ok()?),
        _ => return None,
    };
    let v = n * factor;
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// Pods, CPU (cores) and memory (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Resources {
    pub pods: f64,
    pub cpu: f64,
    pub memory: f64,
}

impl Add for Resources {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self {
            pods: self.pods + o.pods,
            cpu: self.cpu + o.cpu,
            memory: self.memory + o.memory,
        }
    }
}

impl Sub for Resources {
    type Output = Self;
    fn sub(self, o: Self) -> Self {
        Self {
            pods: self.pods - o.pods,
            cpu: self.cpu - o.cpu,
            memory: self.memory - o.memory,
        }
    }
}

impl Mul<f64> for Resources {
    type Output = Self;
    fn mul(self, k: f64) -> Self {
        Self {
            pods: self.pods * k,
            cpu: self.cpu * k,
            memory: self.memory * k,
        }
    }
}

/// Bounds on pods, CPU and memory; an unset one is unbounded.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limits {
    pub pods: Option<f64>,
    pub cpu: Option<f64>,
    pub memory: Option<f64>,
}

impl Limits {
    /// Read `{pods, cpu, memory}` (numbers or quantity strings).
    pub fn from_json(v: &Value) -> Self {
        let q = |f: &str| match &v[f] {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => parse_quantity(s),
            _ => None,
        };
        Self {
            pods: q("pods"),
            cpu: q("cpu"),
            memory: q("memory"),
        }
    }

    pub fn is_unbounded(&self) -> bool {
        self.pods.is_none() && self.cpu.is_none() && self.memory.is_none()
    }

    /// Whether `used` is within every bound (with a little slack for float sums).
    pub fn admits(&self, used: &Resources) -> bool {
        let within = |b: Option<f64>, u: f64| b.is_none_or(|b| u <= b + 1e-9);
        within(self.pods, used.pods)
            && within(self.cpu, used.cpu)
            && within(self.memory, used.memory)
    }

    /// The first resource `used` exceeds, for messages (`Insufficient cpu`).
    pub fn exceeded(&self, used: &Resources) -> Option<&'static str> {
        let over = |b: Option<f64>, u: f64| b.is_some_and(|b| u > b + 1e-9);
        if over(self.pods, used.pods) {
            Some("pods")
        } else if over(self.cpu, used.cpu) {
            Some("cpu")
        } else if over(self.memory, used.memory) {
            Some("memory")
        } else {
            None
        }
    }

    /// How many more copies of `each` fit beside `used` (`None`: unbounded).
    pub fn room_for(&self, used: &Resources, each: &Resources) -> Option<i64> {
        let fit = |b: Option<f64>, u: f64, e: f64| match b {
            None => None,
            Some(_) if e <= 0.0 => None,
            Some(b) => Some((((b - u) / e) + 1e-9).floor().max(0.0) as i64),
        };
        [
            fit(self.pods, used.pods, each.pods),
            fit(self.cpu, used.cpu, each.cpu),
            fit(self.memory, used.memory, each.memory),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// What one pod of `spec` (a PodSpec) requests: one pod, and its containers' requests
/// (limits where a request is missing, as Kubernetes defaults them), init containers
/// counted as their largest.
pub fn pod_requests(spec: &Value) -> Resources {
    let of = |c: &Value, f: &str| {
        let r = &c["resources"];
        r["requests"][f]
            .as_str()
            .or_else(|| r["limits"][f].as_str())
            .and_then(parse_quantity)
            .unwrap_or(0.0)
    };
    let sum = |list: &Value, f: &str| -> f64 {
        list.as_array()
            .into_iter()
            .flatten()
            .map(|c| of(c, f))
            .sum()
    };
    let max = |list: &Value, f: &str| -> f64 {
        list.as_array()
            .into_iter()
            .flatten()
            .map(|c| of(c, f))
            .fold(0.0, f64::max)
    };
    Resources {
        pods: 1.0,
        cpu: sum(&spec["containers"], "cpu").max(max(&spec["initContainers"], "cpu")),
        memory: sum(&spec["containers"], "memory").max(max(&spec["initContainers"], "memory")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn quantities_parse_as_kubernetes_writes_them() {
        assert_eq!(parse_quantity("500m"), Some(0.5));
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("128Mi"), Some(128.0 * 1024.0 * 1024.0));
        assert_eq!(parse_quantity("1G"), Some(1e9));
        assert_eq!(parse_quantity("1e3"), Some(1000.0));
        assert_eq!(parse_quantity("1.5Gi"), Some(1.5 * 1024f64.powi(3)));
        assert_eq!(parse_quantity("lots"), None);
        assert_eq!(parse_quantity("1Qi"), None);
        assert_eq!(parse_quantity("-1"), None);
    }

    #[test]
    fn pods_request_their_containers_and_fit_by_every_bound() {
        let spec = json!({"containers": [
            {"resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
            {"resources": {"limits": {"cpu": "250m"}}},
        ]});
        let r = pod_requests(&spec);
        assert_eq!((r.pods, r.cpu), (1.0, 0.5));
        let limits = Limits::from_json(&json!({"pods": 10, "cpu": "1"}));
        assert_eq!(limits.room_for(&Resources::default(), &r), Some(2));
        assert!(limits.admits(&(r * 2.0)));
        assert_eq!(limits.exceeded(&(r * 3.0)), Some("cpu"));
        assert_eq!(Limits::default().room_for(&Resources::default(), &r), None);
    }
}
