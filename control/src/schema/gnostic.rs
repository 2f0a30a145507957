//! The Swagger 2.0 document in protobuf, as gnostic's `openapi.v2.Document`
//! (github.com/google/gnostic, OpenAPIv2.proto): what kubectl asks for at `/openapi/v2`
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`) when a kind has no
//! OpenAPI v3 entry — an unknown kind, or a `kind: List`. Field numbers follow that file;
//! values that are free-form JSON (defaults, enums, examples, vendor extensions) travel as
//! gnostic's `Any` with their YAML text (JSON is YAML).

use serde_json::Value;

use crate::codec::wire::Message;

/// The content type of the protobuf document, as kube-apiserver sends it (a valid MIME
/// type: clients parse it).
pub const CONTENT_TYPE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// What client-go's Accept header asks for (the older name; `@` is no MIME token).
pub const ACCEPT_LEGACY: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// Encode a Swagger 2.0 document (see [`super::swagger`]).
pub fn encode(doc: &Value) -> Vec<u8> {
    let mut m = Message::new();
    m.string(1, str_of(&doc["swagger"]));
    let mut info = Message::new();
    info.string(1, str_of(&doc["info"]["title"]))
        .string(2, str_of(&doc["info"]["version"]));
    m.message(2, info);
    let mut paths = Message::new();
    for (name, item) in entries(&doc["paths"]) {
        let mut named = Message::new();
        named.string(1, name).message(2, path_item(item));
        paths.message(2, named);
    }
    m.message(8, paths);
    let mut defs = Message::new();
    for (name, s) in entries(&doc["definitions"]) {
        defs.message(1, named_schema(name, s));
    }
    m.message(9, defs);
    m.into_bytes()
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn entries(v: &Value) -> impl Iterator<Item = (&String, &Value)> {
    v.as_object().into_iter().flatten()
}

fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

/// gnostic's `Any`: the value as YAML text.
fn any(v: &Value) -> Message {
    let mut m = Message::new();
    m.string(2, &v.to_string());
    m
}

/// `x-*` keys as repeated `NamedAny` in field `field`.
fn vendor_extensions(m: &mut Message, field: u32, o: &Value) {
    for (k, v) in entries(o).filter(|(k, _)| k.starts_with("x-")) {
        let mut named = Message::new();
        named.string(1, k).message(2, any(v));
        m.message(field, named);
    }
}

fn named_schema(name: &str, s: &Value) -> Message {
    let mut m = Message::new();
    m.string(1, name).message(2, schema(s));
    m
}

fn schema(s: &Value) -> Message {
    let mut m = Message::new();
    m.string(1, str_of(&s["$ref"]))
        .string(2, str_of(&s["format"]))
        .string(3, str_of(&s["title"]))
        .string(4, str_of(&s["description"]));
    if let Some(d) = s.get("default") {
        m.message(5, any(d));
    }
    for (field, key) in [(6, "multipleOf"), (7, "maximum"), (9, "minimum")] {
        m.double(field, s[key].as_f64().unwrap_or(0.0));
    }
    m.bool(8, s["exclusiveMaximum"].as_bool().unwrap_or(false))
        .bool(10, s["exclusiveMinimum"].as_bool().unwrap_or(false));
    for (field, key) in [
        (11, "maxLength"),
        (12, "minLength"),
        (14, "maxItems"),
        (15, "minItems"),
        (17, "maxProperties"),
        (18, "minProperties"),
    ] {
        m.int64(field, s[key].as_i64().unwrap_or(0));
    }
    m.string(13, str_of(&s["pattern"]))
        .bool(16, s["uniqueItems"].as_bool().unwrap_or(false));
    for r in strings(&s["required"]) {
        m.string(19, r);
    }
    for e in s["enum"].as_array().into_iter().flatten() {
        m.message(20, any(e));
    }
    match &s["additionalProperties"] {
        Value::Bool(b) => {
            let mut item = Message::new();
            item.oneof_bool(2, *b);
            m.message(21, item);
        }
        a @ Value::Object(_) => {
            let mut item = Message::new();
            item.message(1, schema(a));
            m.message(21, item);
        }
        _ => {}
    }
    let types: Vec<&str> = match &s["type"] {
        Value::String(t) => vec![t.as_str()],
        t => strings(t).collect(),
    };
    if !types.is_empty() {
        let mut t = Message::new();
        for ty in types {
            t.string(1, ty);
        }
        m.message(22, t);
    }
    match &s["items"] {
        i @ Value::Object(_) => {
            let mut items = Message::new();
            items.message(1, schema(i));
            m.message(23, items);
        }
        Value::Array(list) => {
            let mut items = Message::new();
            for i in list {
                items.message(1, schema(i));
            }
            m.message(23, items);
        }
        _ => {}
    }
    for a in s["allOf"].as_array().into_iter().flatten() {
        m.message(24, schema(a));
    }
    if let Some(props) = s["properties"].as_object() {
        let mut p = Message::new();
        for (name, ps) in props {
            p.message(1, named_schema(name, ps));
        }
        m.message(25, p);
    }
    m.string(26, str_of(&s["discriminator"]))
        .bool(27, s["readOnly"].as_bool().unwrap_or(false));
    if let Some(e) = s.get("example") {
        m.message(30, any(e));
    }
    vendor_extensions(&mut m, 31, s);
    m
}

fn path_item(item: &Value) -> Message {
    let mut m = Message::new();
    for (field, method) in [
        (2, "get"),
        (3, "put"),
        (4, "post"),
        (5, "delete"),
        (6, "options"),
        (7, "head"),
        (8, "patch"),
    ] {
        if let Some(op) = item.get(method) {
            m.message(field, operation(op));
        }
    }
    for p in item["parameters"].as_array().into_iter().flatten() {
        m.message(9, parameters_item(p));
    }
    vendor_extensions(&mut m, 10, item);
    m
}

fn operation(op: &Value) -> Message {
    let mut m = Message::new();
    for t in strings(&op["tags"]) {
        m.string(1, t);
    }
    m.string(2, str_of(&op["summary"]))
        .string(3, str_of(&op["description"]))
        .string(5, str_of(&op["operationId"]));
    for p in strings(&op["produces"]) {
        m.string(6, p);
    }
    for c in strings(&op["consumes"]) {
        m.string(7, c);
    }
    for p in op["parameters"].as_array().into_iter().flatten() {
        m.message(8, parameters_item(p));
    }
    let mut responses = Message::new();
    for (code, r) in entries(&op["responses"]) {
        let mut response = Message::new();
        response.string(1, str_of(&r["description"]));
        if let Some(s) = r.get("schema") {
            let mut item = Message::new();
            item.message(1, schema(s));
            response.message(2, item);
        }
        let mut value = Message::new();
        value.message(1, response);
        let mut named = Message::new();
        named.string(1, code).message(2, value);
        responses.message(1, named);
    }
    m.message(9, responses);
    m.bool(11, op["deprecated"].as_bool().unwrap_or(false));
    vendor_extensions(&mut m, 13, op);
    m
}

/// `ParametersItem { parameter: Parameter { body | non_body { header | query | path } } }`.
fn parameters_item(p: &Value) -> Message {
    let mut parameter = Message::new();
    let location = str_of(&p["in"]);
    if location == "body" {
        let mut body = Message::new();
        body.string(1, str_of(&p["description"]))
            .string(2, str_of(&p["name"]))
            .string(3, location)
            .bool(4, p["required"].as_bool().unwrap_or(false));
        if let Some(s) = p.get("schema") {
            body.message(5, schema(s));
        }
        vendor_extensions(&mut body, 6, p);
        parameter.message(1, body);
    } else {
        // Query parameters have `allowEmptyValue` at 5, so their later fields sit one
        // number higher than those of header and path parameters.
        let (which, shift) = match location {
            "query" => (3, 1),
            "header" => (1, 0),
            "formData" => (2, 1),
            _ => (4, 0),
        };
        let mut sub = Message::new();
        sub.bool(1, p["required"].as_bool().unwrap_or(false))
            .string(2, location)
            .string(3, str_of(&p["description"]))
            .string(4, str_of(&p["name"]))
            .string(5 + shift, str_of(&p["type"]))
            .string(6 + shift, str_of(&p["format"]))
            .bool(19 + shift, p["uniqueItems"].as_bool().unwrap_or(false));
        let mut non_body = Message::new();
        non_body.message(which, sub);
        parameter.message(2, non_body);
    }
    let mut item = Message::new();
    item.message(1, parameter);
    item
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::encode;

    /// Read `(field, bytes)` pairs of length-delimited fields (the only kind the test
    /// documents use besides varints, which it skips).
    fn fields(mut b: &[u8]) -> Vec<(u64, &[u8])> {
        let mut out = Vec::new();
        let varint = |b: &mut &[u8]| {
            let mut v = 0u64;
            for i in 0.. {
                let byte = b[0];
                *b = &b[1..];
                v |= u64::from(byte & 0x7f) << (7 * i);
                if byte & 0x80 == 0 {
                    break;
                }
            }
            v
        };
        while !b.is_empty() {
            let key = varint(&mut b);
            match key & 7 {
                0 => {
                    varint(&mut b);
                }
                2 => {
                    let n = varint(&mut b) as usize;
                    out.push((key >> 3, &b[..n]));
                    b = &b[n..];
                }
                w => panic!("wire type {w}"),
            }
        }
        out
    }

    #[test]
    fn a_definition_with_its_type_properties_and_gvk_is_where_gnostic_reads_it() {
        let doc = json!({
            "swagger": "2.0",
            "info": {"title": "t", "version": "1"},
            "paths": {},
            "definitions": {"io.k8s.api.core.v1.ConfigMap": {
                "type": "object",
                "properties": {"data": {"type": "object", "additionalProperties": {"type": "string"}}},
                "x-kubernetes-group-version-kind": [{"group": "", "kind": "ConfigMap", "version": "v1"}],
            }},
        });
        let bytes = encode(&doc);
        let top = fields(&bytes);
        assert_eq!(top[0], (1, &b"2.0"[..]));
        let defs = top.iter().find(|(f, _)| *f == 9).expect("definitions").1;
        let named = fields(fields(defs)[0].1);
        assert_eq!(named[0], (1, &b"io.k8s.api.core.v1.ConfigMap"[..]));
        let schema = fields(named[1].1);
        let ty = schema.iter().find(|(f, _)| *f == 22).expect("type").1;
        assert_eq!(fields(ty), [(1, &b"object"[..])]);
        let ext = fields(schema.iter().find(|(f, _)| *f == 31).expect("x-").1);
        assert_eq!(ext[0], (1, &b"x-kubernetes-group-version-kind"[..]));
        let yaml = fields(ext[1].1);
        assert_eq!(
            yaml,
            [(
                2,
                &br#"[{"group":"","kind":"ConfigMap","version":"v1"}]"#[..]
            )]
        );
        let props = fields(schema.iter().find(|(f, _)| *f == 25).expect("properties").1);
        let data = fields(fields(props[0].1)[1].1);
        let additional = fields(data.iter().find(|(f, _)| *f == 21).expect("additional").1);
        assert_eq!(additional[0].0, 1, "a schema, not a boolean");
    }
}
