//! Decoding Kubernetes protobuf (`k8s\0` + `runtime.Unknown`) into the JSON form of the
//! object, driven by the field table derived from the Kubernetes protobuf definitions.
//! Every malformed input is an error, never a panic; nesting and sizes are bounded.

use std::collections::HashMap;
use std::sync::OnceLock;

use base64::Engine;
use serde_json::{Map, Value, json};

const MAGIC: &[u8] = b"k8s\x00";
const MAX_DEPTH: usize = 64;

/// Wire-level kind of a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Str,
    I32,
    I64,
    Bool,
    Bytes,
    F64,
    F32,
    Msg,
    MapStr,
    MapBytes,
    MapMsg,
}

/// One field of a message: tag, JSON name, kind, and the message type it holds.
#[derive(Debug)]
pub struct Field {
    pub tag: u32,
    pub json: &'static str,
    pub kind: Kind,
    pub repeated: bool,
    pub message: &'static str,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtoError {
    #[error("not a Kubernetes protobuf message (missing the k8s magic prefix)")]
    NoMagic,
    #[error("truncated protobuf message")]
    Truncated,
    #[error("invalid protobuf wire type {0}")]
    WireType(u8),
    #[error("protobuf message nested too deeply")]
    TooDeep,
    #[error("no protobuf definition for {0}")]
    UnknownType(String),
    #[error("invalid UTF-8 in a protobuf string field {0:?}")]
    Utf8(&'static str),
}

type Table = HashMap<&'static str, HashMap<u32, &'static Field>>;

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        super::proto_table::MESSAGES
            .iter()
            .map(|(name, fields)| (*name, fields.iter().map(|f| (f.tag, f)).collect()))
            .collect()
    })
}

struct Reader<'a> {
    buf: &'a [u8],
}

enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut out = 0u64;
        for i in 0..10 {
            let (&b, rest) = self.buf.split_first().ok_or(ProtoError::Truncated)?;
            self.buf = rest;
            out |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err(ProtoError::Truncated)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if self.buf.len() < n {
            return Err(ProtoError::Truncated);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn field(&mut self) -> Result<Option<(u32, Wire<'a>)>, ProtoError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let tag = u32::try_from(key >> 3).map_err(|_| ProtoError::Truncated)?;
        let wire = match (key & 7) as u8 {
            0 => Wire::Varint(self.varint()?),
            1 => Wire::Fixed64(u64::from_le_bytes(
                self.take(8)?
                    .try_into()
                    .map_err(|_| ProtoError::Truncated)?,
            )),
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| ProtoError::Truncated)?;
                Wire::Bytes(self.take(n)?)
            }
            5 => Wire::Fixed32(u32::from_le_bytes(
                self.take(4)?
                    .try_into()
                    .map_err(|_| ProtoError::Truncated)?,
            )),
            w => return Err(ProtoError::WireType(w)),
        };
        Ok(Some((tag, wire)))
    }
}

/// Decode an envelope; returns the object with `apiVersion` and `kind` from its type meta.
/// `definition` names the message type the endpoint expects.
pub fn decode(bytes: &[u8], definition: &str) -> Result<Value, ProtoError> {
    let body = bytes.strip_prefix(MAGIC).ok_or(ProtoError::NoMagic)?;
    let mut r = Reader { buf: body };
    let (mut api_version, mut kind, mut raw) = (None, None, &[][..]);
    while let Some((tag, wire)) = r.field()? {
        match (tag, wire) {
            (1, Wire::Bytes(type_meta)) => {
                let mut t = Reader { buf: type_meta };
                while let Some((tag, wire)) = t.field()? {
                    if let Wire::Bytes(b) = wire {
                        let s = std::str::from_utf8(b)
                            .map_err(|_| ProtoError::Utf8("typeMeta"))?
                            .to_string();
                        match tag {
                            1 => api_version = Some(s),
                            2 => kind = Some(s),
                            _ => {}
                        }
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let mut obj = message(raw, definition, 0)?;
    if let Value::Object(m) = &mut obj {
        if let Some(k) = kind {
            m.insert("kind".into(), json!(k));
        }
        if let Some(av) = api_version {
            m.insert("apiVersion".into(), json!(av));
        }
    }
    Ok(obj)
}

fn string(b: &[u8], field: &'static str) -> Result<String, ProtoError> {
    std::str::from_utf8(b)
        .map(str::to_string)
        .map_err(|_| ProtoError::Utf8(field))
}

fn rfc3339(seconds: i64, nanos: i64, micro: bool) -> Value {
    let t = time::OffsetDateTime::from_unix_timestamp(seconds)
        .ok()
        .and_then(|t| {
            t.replace_nanosecond(if micro {
                u32::try_from(nanos).unwrap_or(0) / 1000 * 1000
            } else {
                0
            })
            .ok()
        });
    match t.and_then(|t| {
        t.format(&time::format_description::well_known::Rfc3339)
            .ok()
    }) {
        Some(s) => json!(s),
        None => Value::Null,
    }
}

/// Go's `time.Duration` string form (`1h2m3.5s`), as metav1.Duration marshals.
fn go_duration(ns: i64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let sign = if ns < 0 { "-" } else { "" };
    let ns = ns.unsigned_abs();
    let (h, rem) = (ns / 3_600_000_000_000, ns % 3_600_000_000_000);
    let (m, rem) = (rem / 60_000_000_000, rem % 60_000_000_000);
    let secs = rem as f64 / 1e9;
    let mut out = sign.to_string();
    if h > 0 {
        out += &format!("{h}h");
    }
    if h > 0 || m > 0 {
        out += &format!("{m}m");
    }
    out += &format!("{secs}s");
    out
}

/// Messages whose JSON form is not an object of their fields.
fn special(definition: &str, b: &[u8], depth: usize) -> Result<Option<Value>, ProtoError> {
    let short = definition.rsplit('.').next().unwrap_or("");
    let apimachinery = definition.starts_with("io.k8s.apimachinery.");
    if !apimachinery {
        return Ok(None);
    }
    let _ = depth;
    let mut r = Reader { buf: b };
    let varints = |r: &mut Reader<'_>| -> Result<[i64; 4], ProtoError> {
        let mut ints = [0i64; 4];
        while let Some((tag, wire)) = r.field()? {
            if let (Wire::Varint(v), true) = (wire, (tag as usize) < 4) {
                ints[tag as usize] = v as i64;
            }
        }
        Ok(ints)
    };
    match short {
        "Time" | "MicroTime" => {
            let ints = varints(&mut r)?;
            if ints[1] == 0 && ints[2] == 0 {
                return Ok(Some(Value::Null));
            }
            Ok(Some(rfc3339(ints[1], ints[2], short == "MicroTime")))
        }
        "Duration" => {
            let ints = varints(&mut r)?;
            Ok(Some(json!(go_duration(ints[1]))))
        }
        "IntOrString" | "Quantity" | "RawExtension" | "FieldsV1" => {
            let (mut ty, mut int_val, mut text, mut raw) = (0u64, 0i64, None, None);
            while let Some((tag, wire)) = r.field()? {
                match (tag, wire) {
                    (1, Wire::Varint(v)) => ty = v,
                    (2, Wire::Varint(v)) => int_val = v as i32 as i64,
                    (1, Wire::Bytes(s)) => raw = Some(s),
                    (3, Wire::Bytes(s)) => text = Some(string(s, "strVal")?),
                    _ => {}
                }
            }
            Ok(Some(match short {
                "IntOrString" if ty == 1 => json!(text.unwrap_or_default()),
                "IntOrString" => json!(int_val),
                "Quantity" => json!(
                    raw.map(|s| string(s, "quantity"))
                        .transpose()?
                        .unwrap_or_default()
                ),
                _ => raw
                    .and_then(|s| serde_json::from_slice(s).ok())
                    .unwrap_or(Value::Null),
            }))
        }
        _ => Ok(None),
    }
}

fn scalar(f: &'static Field, wire: Wire<'_>) -> Result<Value, ProtoError> {
    Ok(match (f.kind, wire) {
        (Kind::Str, Wire::Bytes(b)) => json!(string(b, f.json)?),
        (Kind::Bytes | Kind::MapBytes, Wire::Bytes(b)) => {
            json!(base64::engine::general_purpose::STANDARD.encode(b))
        }
        (Kind::I32, Wire::Varint(v)) => json!(v as i32),
        (Kind::I64, Wire::Varint(v)) => json!(v as i64),
        (Kind::Bool, Wire::Varint(v)) => json!(v != 0),
        (Kind::F64, Wire::Fixed64(v)) => json!(f64::from_bits(v)),
        (Kind::F32, Wire::Fixed32(v)) => json!(f32::from_bits(v)),
        _ => Value::Null,
    })
}

fn message(b: &[u8], definition: &str, depth: usize) -> Result<Value, ProtoError> {
    if depth > MAX_DEPTH {
        return Err(ProtoError::TooDeep);
    }
    if let Some(v) = special(definition, b, depth)? {
        return Ok(v);
    }
    let fields = table()
        .get(definition)
        .ok_or_else(|| ProtoError::UnknownType(definition.to_string()))?;
    let mut out = Map::new();
    let mut r = Reader { buf: b };
    while let Some((tag, wire)) = r.field()? {
        let Some(f) = fields.get(&tag).copied() else {
            continue;
        };
        match f.kind {
            Kind::Msg => {
                let Wire::Bytes(inner) = wire else { continue };
                let v = message(inner, f.message, depth + 1)?;
                match v {
                    // Go's `json:",inline"`: the embedded message's fields are the outer
                    // object's own in JSON.
                    Value::Object(fields) if INLINE.contains(&(definition, f.json)) => {
                        out.extend(fields);
                    }
                    v => push(&mut out, f, v),
                }
            }
            Kind::MapStr | Kind::MapBytes | Kind::MapMsg => {
                let Wire::Bytes(entry) = wire else { continue };
                let mut e = Reader { buf: entry };
                let (mut key, mut value) = (String::new(), Value::Null);
                while let Some((etag, ewire)) = e.field()? {
                    match (etag, ewire) {
                        (1, Wire::Bytes(k)) => key = string(k, f.json)?,
                        (2, Wire::Bytes(v)) if f.kind == Kind::MapMsg => {
                            value = message(v, f.message, depth + 1)?
                        }
                        (2, Wire::Bytes(v)) if f.kind == Kind::MapStr => {
                            value = json!(string(v, f.json)?)
                        }
                        (2, Wire::Bytes(v)) => {
                            value = json!(base64::engine::general_purpose::STANDARD.encode(v))
                        }
                        _ => {}
                    }
                }
                if value.is_null() {
                    value = match f.kind {
                        Kind::MapMsg => Value::Null,
                        _ => json!(""),
                    };
                }
                let map = out.entry(f.json).or_insert_with(|| json!({}));
                map[key.as_str()] = value;
            }
            Kind::I32 | Kind::I64 | Kind::Bool | Kind::F64 | Kind::F32 if f.repeated => {
                if let Wire::Bytes(packed) = wire {
                    let mut p = Reader { buf: packed };
                    while !p.buf.is_empty() {
                        let w = match f.kind {
                            Kind::F64 => Wire::Fixed64(u64::from_le_bytes(
                                p.take(8)?.try_into().map_err(|_| ProtoError::Truncated)?,
                            )),
                            Kind::F32 => Wire::Fixed32(u32::from_le_bytes(
                                p.take(4)?.try_into().map_err(|_| ProtoError::Truncated)?,
                            )),
                            _ => Wire::Varint(p.varint()?),
                        };
                        let v = scalar(f, w)?;
                        push(&mut out, f, v);
                    }
                } else {
                    let v = scalar(f, wire)?;
                    push(&mut out, f, v);
                }
            }
            _ => {
                let v = scalar(f, wire)?;
                push(&mut out, f, v);
            }
        }
    }
    Ok(Value::Object(out))
}

/// Go pointer fields where an explicit zero means something (`replicas: 0`). Go's protobuf
/// encoder writes every non-pointer field, zero or not, while its JSON encoder omits them:
/// zero scalars are dropped unless named here.
const KEEP_ZERO: &[&str] = &[
    "replicas",
    "automountServiceAccountToken",
    "terminationGracePeriodSeconds",
    "enableServiceLinks",
    "allowPrivilegeEscalation",
    "runAsNonRoot",
    "runAsUser",
    "runAsGroup",
    "readOnlyRootFilesystem",
    "privileged",
    "ready",
    "serving",
    "terminating",
    "port",
    "optional",
];

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

/// Fields Go embeds with `json:",inline"`: a message of their own in protobuf, flattened
/// into the outer object in JSON (the OpenAPI document knows only the flattened form).
const INLINE: &[(&str, &str)] = &[
    ("io.k8s.api.networking.v1.IngressRule", "ingressRuleValue"),
    ("io.k8s.api.core.v1.Volume", "volumeSource"),
    ("io.k8s.api.core.v1.Probe", "handler"),
    (
        "io.k8s.api.core.v1.PersistentVolumeSpec",
        "persistentVolumeSource",
    ),
    (
        "io.k8s.api.core.v1.EphemeralContainer",
        "ephemeralContainerCommon",
    ),
    (
        "io.k8s.api.core.v1.ConfigMapEnvSource",
        "localObjectReference",
    ),
    (
        "io.k8s.api.core.v1.ConfigMapKeySelector",
        "localObjectReference",
    ),
    (
        "io.k8s.api.core.v1.ConfigMapProjection",
        "localObjectReference",
    ),
    (
        "io.k8s.api.core.v1.ConfigMapVolumeSource",
        "localObjectReference",
    ),
    ("io.k8s.api.core.v1.SecretEnvSource", "localObjectReference"),
    (
        "io.k8s.api.core.v1.SecretKeySelector",
        "localObjectReference",
    ),
    (
        "io.k8s.api.core.v1.SecretProjection",
        "localObjectReference",
    ),
];

fn push(out: &mut Map<String, Value>, f: &Field, v: Value) {
    if !f.repeated && (v.is_null() || (is_zero(&v) && !KEEP_ZERO.contains(&f.json))) {
        return;
    }
    if f.repeated {
        match out.entry(f.json).or_insert_with(|| json!([])) {
            Value::Array(a) => a.push(v),
            other => *other = json!([v]),
        }
    } else {
        out.insert(f.json.to_string(), v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes_field(tag: u32, b: &[u8], out: &mut Vec<u8>) {
        varint(u64::from(tag) << 3 | 2, out);
        varint(b.len() as u64, out);
        out.extend_from_slice(b);
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut tm = Vec::new();
        bytes_field(1, api_version.as_bytes(), &mut tm);
        bytes_field(2, kind.as_bytes(), &mut tm);
        let mut out = MAGIC.to_vec();
        bytes_field(1, &tm, &mut out);
        bytes_field(2, raw, &mut out);
        out
    }

    #[test]
    fn decodes_a_configmap() {
        let mut meta = Vec::new();
        bytes_field(1, b"settings", &mut meta);
        let mut label = Vec::new();
        bytes_field(1, b"app", &mut label);
        bytes_field(2, b"web", &mut label);
        bytes_field(11, &label, &mut meta);
        let mut ts = Vec::new();
        varint(8, &mut ts);
        varint(1_700_000_000, &mut ts);
        bytes_field(8, &ts, &mut meta);
        let mut cm = Vec::new();
        bytes_field(1, &meta, &mut cm);
        let mut entry = Vec::new();
        bytes_field(1, b"mode", &mut entry);
        bytes_field(2, b"fast", &mut entry);
        bytes_field(2, &entry, &mut cm);
        let v = decode(
            &envelope("v1", "ConfigMap", &cm),
            "io.k8s.api.core.v1.ConfigMap",
        )
        .unwrap();
        assert_eq!(v["kind"], "ConfigMap");
        assert_eq!(v["metadata"]["name"], "settings");
        assert_eq!(v["metadata"]["labels"]["app"], "web");
        assert_eq!(v["metadata"]["creationTimestamp"], "2023-11-14T22:13:20Z");
        assert_eq!(v["data"]["mode"], "fast");
    }

    #[test]
    fn inline_members_are_flattened_as_go_marshals_them() {
        // IngressRule{host: "a", ingressRuleValue: {http: {paths: [{path: "/"}]}}}
        let mut path = Vec::new();
        bytes_field(1, b"/", &mut path);
        let mut http = Vec::new();
        bytes_field(1, &path, &mut http);
        let mut value = Vec::new();
        bytes_field(1, &http, &mut value);
        let mut rule = Vec::new();
        bytes_field(1, b"a", &mut rule);
        bytes_field(2, &value, &mut rule);
        let v = message(&rule, "io.k8s.api.networking.v1.IngressRule", 0).unwrap();
        assert_eq!(v, json!({"host": "a", "http": {"paths": [{"path": "/"}]}}));
        // Volume{name: "data", volumeSource: {emptyDir: {}}}
        let mut source = Vec::new();
        bytes_field(2, b"", &mut source);
        let mut vol = Vec::new();
        bytes_field(1, b"data", &mut vol);
        bytes_field(2, &source, &mut vol);
        let v = message(&vol, "io.k8s.api.core.v1.Volume", 0).unwrap();
        assert_eq!(v["name"], "data");
        assert!(v.get("volumeSource").is_none(), "{v}");
    }

    #[test]
    fn int_or_string_and_errors() {
        let mut ios = Vec::new();
        varint(1 << 3, &mut ios);
        varint(1, &mut ios);
        bytes_field(3, b"25%", &mut ios);
        let mut ru = Vec::new();
        bytes_field(2, &ios, &mut ru);
        let v = message(&ru, "io.k8s.api.apps.v1.RollingUpdateDeployment", 0).unwrap();
        assert_eq!(v["maxSurge"], "25%");
        assert_eq!(
            decode(b"{}", "io.k8s.api.core.v1.ConfigMap"),
            Err(ProtoError::NoMagic)
        );
        assert_eq!(
            decode(b"k8s\x00\x0a\xff", "io.k8s.api.core.v1.ConfigMap"),
            Err(ProtoError::Truncated)
        );
        assert!(decode(b"k8s\x00\x0f", "io.k8s.api.core.v1.ConfigMap").is_err());
        assert_eq!(go_duration(3_723_500_000_000), "1h2m3.5s");
    }

    proptest::proptest! {
        #[test]
        fn never_panics(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let mut input = MAGIC.to_vec();
            input.extend_from_slice(&raw);
            let _ = decode(&input, "io.k8s.api.apps.v1.Deployment");
            let _ = message(&raw, "io.k8s.api.core.v1.Pod", 0);
        }
    }
}
