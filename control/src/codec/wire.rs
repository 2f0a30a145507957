//! Writing protobuf's wire format by hand: varints, length-delimited fields, fixed 64-bit
//! doubles. Enough to encode documents whose messages Sluice knows by field number.

/// A message being written; nested messages are written into their own and embedded.
#[derive(Default, Debug)]
pub struct Message(Vec<u8>);

const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;

impl Message {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    fn varint(&mut self, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(b);
                return;
            }
            self.0.push(b | 0x80);
        }
    }

    fn key(&mut self, field: u32, wire: u64) {
        self.varint(u64::from(field) << 3 | wire);
    }

    /// Bytes (or a string, or an embedded message) as field `field`, even when empty.
    pub fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Self {
        self.key(field, LEN);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }

    /// A string field; proto3 leaves out the empty string.
    pub fn string(&mut self, field: u32, s: &str) -> &mut Self {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
        self
    }

    /// An embedded message, written even when empty (its presence can mean something).
    pub fn message(&mut self, field: u32, m: Message) -> &mut Self {
        self.bytes(field, &m.0)
    }

    /// A bool field; proto3 leaves out `false`.
    pub fn bool(&mut self, field: u32, b: bool) -> &mut Self {
        if b {
            self.key(field, VARINT);
            self.varint(1);
        }
        self
    }

    /// A bool member of a oneof: written even when `false`, its presence is the answer.
    pub fn oneof_bool(&mut self, field: u32, b: bool) -> &mut Self {
        self.key(field, VARINT);
        self.varint(u64::from(b));
        self
    }

    /// An int64 field; proto3 leaves out 0.
    pub fn int64(&mut self, field: u32, v: i64) -> &mut Self {
        if v != 0 {
            self.key(field, VARINT);
            self.varint(v as u64);
        }
        self
    }

    /// A double field; proto3 leaves out 0.
    pub fn double(&mut self, field: u32, v: f64) -> &mut Self {
        if v != 0.0 {
            self.key(field, FIXED64);
            self.0.extend_from_slice(&v.to_le_bytes());
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::Message;

    #[test]
    fn fields_encode_as_protobuf_does() {
        let mut inner = Message::new();
        inner.string(1, "a");
        let mut m = Message::new();
        m.int64(2, 300)
            .bool(3, true)
            .bool(4, false)
            .string(5, "")
            .message(6, inner)
            .double(7, 1.5);
        assert_eq!(
            m.into_bytes(),
            [
                0x10, 0xac, 0x02, // 2: varint 300
                0x18, 0x01, // 3: true
                0x32, 0x03, 0x0a, 0x01, b'a', // 6: { 1: "a" }
                0x39, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, // 7: 1.5
            ]
        );
    }
}
