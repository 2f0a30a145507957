//! kube's CEL libraries the `cel` crate does not have: `quantity` (resource quantities, exact
//! to the nano, compared and added as kube's `resource.Quantity`), `ip`/`cidr` (addresses
//! and prefixes, as kube's `net/netip` based library) and `url` (an absolute URI or an
//! absolute path, taken apart as kube's). Each value is an opaque CEL type with kube's
//! member functions.

use std::any::Any;
use std::net::IpAddr;

use cel::common::types::{CelBool, CelDouble, CelInt, CelMap, CelString, Kind, Type};
use cel::common::value::{StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

static QUANTITY: Type = Type::simple_type(Kind::Opaque, "kubernetes.Quantity");
static IP: Type = Type::simple_type(Kind::Opaque, "net.IP");
static CIDR: Type = Type::simple_type(Kind::Opaque, "net.CIDR");
static URL: Type = Type::simple_type(Kind::Opaque, "kubernetes.URL");

const NANO: i128 = 1_000_000_000;

/// A resource quantity, in nano units (kube's precision).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity(i128);

impl Val for Quantity {
    fn get_type(&self) -> &Type {
        &QUANTITY
    }
    fn cel_type() -> &'static Type {
        &QUANTITY
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Quantity>().is_some_and(|o| o == self)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
impl StaticVal for Quantity {}

/// `s` as a quantity in nano units, as kube parses one: a signed decimal number, then a
/// binary suffix (`Ki` … `Ei`), a decimal one (`n`, `u`, `m`, `k`, `M` … `E`) or an exponent
/// (`e3`, `E-2`); finer than a nano rounds up, as kube rounds.
pub fn parse_quantity(s: &str) -> Option<i128> {
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return None;
    }
    let digits = format!("{whole}{fraction}");
    if digits.len() > 30 {
        return None;
    }
    let mantissa: i128 = digits.parse().ok()?;
    let mut ten: i32 = -(fraction.len() as i32);
    let mut binary = 0u32;
    match suffix {
        "" => {}
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            binary = 1 + "KMGTPE".find(&suffix[..1])? as u32;
        }
        "n" => ten -= 9,
        "u" => ten -= 6,
        "m" => ten -= 3,
        "k" => ten += 3,
        "M" => ten += 6,
        "G" => ten += 9,
        "T" => ten += 12,
        "P" => ten += 15,
        "E" => ten += 18,
        e if e.starts_with(['e', 'E']) => {
            ten += e[1..].parse::<i32>().ok().filter(|x| x.abs() <= 40)?
        }
        _ => return None,
    }
    let mut value = mantissa.checked_mul(1024i128.checked_pow(binary)?)?;
    let scale = ten + 9;
    if scale >= 0 {
        value = value.checked_mul(10i128.checked_pow(scale.unsigned_abs())?)?;
    } else {
        let divisor = 10i128.checked_pow(scale.unsigned_abs())?;
        value = (value + divisor - 1) / divisor;
    }
    Some(if negative { -value } else { value })
}

fn quantity(s: &CelString<'_>) -> Result<Quantity, ExecutionError> {
    parse_quantity(s.inner()).map(Quantity).ok_or_else(|| {
        ExecutionError::function_error(
            "quantity",
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        )
    })
}

fn is_quantity(s: &CelString<'_>) -> CelBool {
    parse_quantity(s.inner()).is_some().into()
}

fn is_integer(q: &Quantity) -> CelBool {
    (q.0 % NANO == 0 && i64::try_from(q.0 / NANO).is_ok()).into()
}

fn as_integer(q: &Quantity) -> Result<CelInt, ExecutionError> {
    if q.0 % NANO != 0 {
        return Err(ExecutionError::function_error(
            "asInteger",
            "cannot convert value to integer",
        ));
    }
    i64::try_from(q.0 / NANO)
        .map(CelInt::from)
        .map_err(|_| ExecutionError::function_error("asInteger", "int64 overflow"))
}

fn as_approximate_float(q: &Quantity) -> CelDouble {
    (q.0 as f64 / NANO as f64).into()
}

fn sign(q: &Quantity) -> CelInt {
    (q.0.signum() as i64).into()
}

fn compare_to(a: &Quantity, b: &Quantity) -> CelInt {
    (a.cmp(b) as i64).into()
}

fn is_greater_than(a: &Quantity, b: &Quantity) -> CelBool {
    (a > b).into()
}

fn is_less_than(a: &Quantity, b: &Quantity) -> CelBool {
    (a < b).into()
}

fn overflow(function: &str) -> ExecutionError {
    ExecutionError::function_error(function, "quantity overflow")
}

fn add(a: &Quantity, b: &Quantity) -> Result<Quantity, ExecutionError> {
    a.0.checked_add(b.0)
        .map(Quantity)
        .ok_or_else(|| overflow("add"))
}

fn add_int(a: &Quantity, b: &CelInt) -> Result<Quantity, ExecutionError> {
    i128::from(*b.inner())
        .checked_mul(NANO)
        .and_then(|b| a.0.checked_add(b))
        .map(Quantity)
        .ok_or_else(|| overflow("add"))
}

fn sub(a: &Quantity, b: &Quantity) -> Result<Quantity, ExecutionError> {
    a.0.checked_sub(b.0)
        .map(Quantity)
        .ok_or_else(|| overflow("sub"))
}

fn sub_int(a: &Quantity, b: &CelInt) -> Result<Quantity, ExecutionError> {
    i128::from(*b.inner())
        .checked_mul(NANO)
        .and_then(|b| a.0.checked_sub(b))
        .map(Quantity)
        .ok_or_else(|| overflow("sub"))
}

/// An IP address (no zone, no IPv4-mapped IPv6, as kube's `ip()` accepts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ip(IpAddr);

impl Val for Ip {
    fn get_type(&self) -> &Type {
        &IP
    }
    fn cel_type() -> &'static Type {
        &IP
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Ip>().is_some_and(|o| o == self)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
impl StaticVal for Ip {}

/// A prefix: an address and a length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr(IpAddr, u8);

impl Val for Cidr {
    fn get_type(&self) -> &Type {
        &CIDR
    }
    fn cel_type() -> &'static Type {
        &CIDR
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Cidr>().is_some_and(|o| o == self)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
impl StaticVal for Cidr {}

fn parse_ip(s: &str) -> Option<IpAddr> {
    let ip: IpAddr = s.parse().ok()?;
    match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => None,
        ip => Some(ip),
    }
}

fn parse_cidr(s: &str) -> Option<Cidr> {
    let (addr, len) = s.split_once('/')?;
    let ip = parse_ip(addr)?;
    if len.starts_with('+') {
        return None;
    }
    let len: u8 = len.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some(Cidr(ip, len))
}

fn ip(s: &CelString<'_>) -> Result<Ip, ExecutionError> {
    parse_ip(s.inner()).map(Ip).ok_or_else(|| {
        ExecutionError::function_error(
            "ip",
            format!(
                "IP Address {:?} parse error during conversion from string",
                s.inner()
            ),
        )
    })
}

fn is_ip(s: &CelString<'_>) -> CelBool {
    parse_ip(s.inner()).is_some().into()
}

fn cidr(s: &CelString<'_>) -> Result<Cidr, ExecutionError> {
    parse_cidr(s.inner()).ok_or_else(|| {
        ExecutionError::function_error(
            "cidr",
            format!(
                "network address {:?} parse error during conversion from string",
                s.inner()
            ),
        )
    })
}

fn is_cidr(s: &CelString<'_>) -> CelBool {
    parse_cidr(s.inner()).is_some().into()
}

fn family(ip: &Ip) -> CelInt {
    (if ip.0.is_ipv4() { 4 } else { 6 }).into()
}

fn is_unspecified(ip: &Ip) -> CelBool {
    ip.0.is_unspecified().into()
}

fn is_loopback(ip: &Ip) -> CelBool {
    ip.0.is_loopback().into()
}

fn is_link_local_multicast(ip: &Ip) -> CelBool {
    match ip.0 {
        IpAddr::V4(v4) => v4.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v6) => v6.segments()[0] & 0xff0f == 0xff02,
    }
    .into()
}

fn is_link_local_unicast(ip: &Ip) -> CelBool {
    match ip.0 {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
    .into()
}

fn is_global_unicast(ip: &Ip) -> CelBool {
    let ip = ip.0;
    let special = ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || *is_link_local_unicast(&Ip(ip)).inner()
        || matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    (!special).into()
}

fn ip_string(ip: &Ip) -> CelString<'static> {
    ip.0.to_string().into()
}

/// The bits of `ip` as one number, and its width.
fn bits(ip: IpAddr) -> (u128, u8) {
    match ip {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
        IpAddr::V6(v6) => (u128::from(v6), 128),
    }
}

fn masked_bits(ip: IpAddr, len: u8) -> u128 {
    let (b, width) = bits(ip);
    if len == 0 {
        return 0;
    }
    let keep = u128::MAX << (128 - u32::from(len));
    (b << (128 - u32::from(width))) & keep
}

fn contains(c: &Cidr, ip: IpAddr) -> bool {
    c.0.is_ipv4() == ip.is_ipv4() && masked_bits(ip, c.1) == masked_bits(c.0, c.1)
}

fn contains_ip(c: &Cidr, ip: &Ip) -> CelBool {
    contains(c, ip.0).into()
}

fn contains_ip_string(c: &Cidr, s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    Ok(contains(c, self::ip(s)?.0).into())
}

fn contains_cidr(c: &Cidr, other: &Cidr) -> CelBool {
    (other.1 >= c.1 && contains(c, other.0)).into()
}

fn contains_cidr_string(c: &Cidr, s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    Ok(contains_cidr(c, &cidr(s)?))
}

fn cidr_ip(c: &Cidr) -> Ip {
    Ip(c.0)
}

fn prefix_length(c: &Cidr) -> CelInt {
    i64::from(c.1).into()
}

fn masked(c: &Cidr) -> Cidr {
    let (_, width) = bits(c.0);
    let m = masked_bits(c.0, c.1) >> (128 - u32::from(width));
    let ip = match c.0 {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::from(m as u32)),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::from(m)),
    };
    Cidr(ip, c.1)
}

fn cidr_string(c: &Cidr) -> CelString<'static> {
    format!("{}/{}", c.0, c.1).into()
}

/// A URL: an absolute URI, or an absolute path (kube's `url()` accepts both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    scheme: String,
    /// `host[:port]`, an IPv6 host in brackets.
    host: String,
    hostname: String,
    port: String,
    escaped_path: String,
    query: Vec<(String, String)>,
}

impl Val for Url {
    fn get_type(&self) -> &Type {
        &URL
    }
    fn cel_type() -> &'static Type {
        &URL
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Url>().is_some_and(|o| o == self)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
impl StaticVal for Url {}

fn parse_url(s: &str) -> Option<Url> {
    let query_of = |u: &url::Url| {
        u.query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    };
    if s.starts_with('/') && !s.starts_with("//") {
        // An absolute path: no scheme, no host.
        let base = url::Url::parse("http://base.invalid").ok()?;
        let u = base.join(s).ok()?;
        return Some(Url {
            scheme: String::new(),
            host: String::new(),
            hostname: String::new(),
            port: String::new(),
            escaped_path: u.path().to_string(),
            query: query_of(&u),
        });
    }
    let u = url::Url::parse(s).ok()?;
    let hostname = match u.host()? {
        url::Host::Ipv6(a) => a.to_string(),
        h => h.to_string(),
    };
    let port = u.port().map(|p| p.to_string()).unwrap_or_default();
    let bracketed = match u.host()? {
        url::Host::Ipv6(a) => format!("[{a}]"),
        h => h.to_string(),
    };
    let host = if port.is_empty() {
        bracketed
    } else {
        format!("{bracketed}:{port}")
    };
    Some(Url {
        scheme: u.scheme().to_string(),
        host,
        hostname,
        port,
        escaped_path: u.path().to_string(),
        query: query_of(&u),
    })
}

fn url_of(s: &CelString<'_>) -> Result<Url, ExecutionError> {
    parse_url(s.inner()).ok_or_else(|| {
        ExecutionError::function_error(
            "url",
            format!(
                "URL {:?} must be an absolute URI or an absolute path",
                s.inner()
            ),
        )
    })
}

fn is_url(s: &CelString<'_>) -> CelBool {
    parse_url(s.inner()).is_some().into()
}

fn get_scheme(u: &Url) -> CelString<'static> {
    u.scheme.clone().into()
}

fn get_host(u: &Url) -> CelString<'static> {
    u.host.clone().into()
}

fn get_hostname(u: &Url) -> CelString<'static> {
    u.hostname.clone().into()
}

fn get_port(u: &Url) -> CelString<'static> {
    u.port.clone().into()
}

fn get_escaped_path(u: &Url) -> CelString<'static> {
    u.escaped_path.clone().into()
}

fn get_query(u: &Url) -> cel::common::types::CelMap<'static> {
    use cel::common::types::CelList;
    use cel::common::types::CelMapKey as Key;
    let mut by_key: std::collections::BTreeMap<&str, Vec<Box<dyn Val>>> = Default::default();
    for (k, v) in &u.query {
        by_key
            .entry(k)
            .or_default()
            .push(Box::new(CelString::from(v.clone())));
    }
    let map: std::collections::HashMap<Key<'static>, Box<dyn Val>> = by_key
        .into_iter()
        .map(|(k, vs)| {
            (
                Key::from(k.to_string()),
                Box::new(CelList::from(vs)) as Box<dyn Val>,
            )
        })
        .collect();
    map.into()
}

/// Register the libraries on `env`.
pub fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_type(QUANTITY.to_owned())?;
    env.add_type(IP.to_owned())?;
    env.add_type(CIDR.to_owned())?;
    env.add_type(URL.to_owned())?;
    cel::add_overload!(env, fn quantity: (CelString) -> Result<Quantity>)?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool)?;
    cel::add_member_overload!(env, fn is_integer: (Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn as_integer: (Quantity) -> Result<CelInt>)?;
    cel::add_member_overload!(env, fn as_approximate_float: (Quantity) -> CelDouble)?;
    cel::add_member_overload!(env, fn sign: (Quantity) -> CelInt)?;
    cel::add_member_overload!(env, fn compare_to: (Quantity, Quantity) -> CelInt)?;
    cel::add_member_overload!(env, fn is_greater_than: (Quantity, Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn is_less_than: (Quantity, Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn add: (Quantity, Quantity) -> Result<Quantity>)?;
    cel::add_member_overload!(env, fn add_int: (Quantity, CelInt) -> Result<Quantity>, name = "add")?;
    cel::add_member_overload!(env, fn sub: (Quantity, Quantity) -> Result<Quantity>)?;
    cel::add_member_overload!(env, fn sub_int: (Quantity, CelInt) -> Result<Quantity>, name = "sub")?;
    cel::add_overload!(env, fn ip: (CelString) -> Result<Ip>)?;
    cel::add_overload!(env, fn is_ip: (CelString) -> CelBool, name = "isIP")?;
    cel::add_overload!(env, fn cidr: (CelString) -> Result<Cidr>)?;
    cel::add_overload!(env, fn is_cidr: (CelString) -> CelBool, name = "isCIDR")?;
    cel::add_overload!(env, fn ip_string: (Ip) -> CelString, name = "string")?;
    cel::add_overload!(env, fn cidr_string: (Cidr) -> CelString, name = "string")?;
    cel::add_member_overload!(env, fn family: (Ip) -> CelInt)?;
    cel::add_member_overload!(env, fn is_unspecified: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_loopback: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_link_local_multicast: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_link_local_unicast: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_global_unicast: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn contains_ip: (Cidr, Ip) -> CelBool, name = "containsIP")?;
    cel::add_member_overload!(env, fn contains_ip_string: (Cidr, CelString) -> Result<CelBool>, name = "containsIP")?;
    cel::add_member_overload!(env, fn contains_cidr: (Cidr, Cidr) -> CelBool, name = "containsCIDR")?;
    cel::add_member_overload!(env, fn contains_cidr_string: (Cidr, CelString) -> Result<CelBool>, name = "containsCIDR")?;
    cel::add_member_overload!(env, fn cidr_ip: (Cidr) -> Ip, name = "ip")?;
    cel::add_member_overload!(env, fn prefix_length: (Cidr) -> CelInt)?;
    cel::add_member_overload!(env, fn masked: (Cidr) -> Cidr)?;
    cel::add_overload!(env, fn url_of: (CelString) -> Result<Url>, name = "url")?;
    cel::add_overload!(env, fn is_url: (CelString) -> CelBool, name = "isURL")?;
    cel::add_member_overload!(env, fn get_scheme: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_host: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_hostname: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_port: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_escaped_path: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_query: (Url) -> CelMap)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_to_the_nano_as_kube_parses_them() {
        assert_eq!(parse_quantity("1Gi"), Some(1024 * 1024 * 1024 * NANO));
        assert_eq!(parse_quantity("500m"), Some(NANO / 2));
        assert_eq!(parse_quantity("1.5"), Some(3 * NANO / 2));
        assert_eq!(parse_quantity("2e3"), Some(2000 * NANO));
        assert_eq!(parse_quantity("-1k"), Some(-1000 * NANO));
        assert_eq!(parse_quantity("1n"), Some(1));
        assert_eq!(parse_quantity("0.1n"), Some(1), "rounded up");
        for bad in ["", "Gi", "1.2.3", "1Xi", "1 Gi", "--1", "1e99999"] {
            assert_eq!(parse_quantity(bad), None, "{bad}");
        }
    }

    fn eval(source: &str) -> cel::Value {
        let program = crate::cel::compile(source, &[]).unwrap();
        program
            .execute(&cel::Context::with_env(crate::cel::env()))
            .unwrap_or_else(|e| panic!("{source}: {e}"))
    }

    #[test]
    fn the_libraries_answer_as_kubes() {
        for (source, want) in [
            ("quantity('1Gi').isGreaterThan(quantity('1000Mi'))", true),
            ("quantity('500m').isLessThan(quantity('1'))", true),
            ("quantity('1') == quantity('1000m')", true),
            ("quantity('1.5').isInteger()", false),
            ("quantity('2k').asInteger() == 2000", true),
            (
                "quantity('1').add(quantity('500m')).compareTo(quantity('1500m')) == 0",
                true,
            ),
            ("quantity('1').sub(2).sign() == -1", true),
            ("isQuantity('1Gi') && !isQuantity('one')", true),
            (
                "ip('10.0.0.1').family() == 4 && ip('::1').isLoopback()",
                true,
            ),
            ("cidr('10.0.0.0/8').containsIP('10.1.2.3')", true),
            ("cidr('10.0.0.0/8').containsIP(ip('11.0.0.1'))", false),
            ("cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16')", true),
            ("string(cidr('10.1.2.3/8').masked()) == '10.0.0.0/8'", true),
            ("cidr('fd00::/64').prefixLength() == 64", true),
            ("isIP('::ffff:1.2.3.4') || isCIDR('10.0.0.0/33')", false),
            (
                "ip('169.254.1.1').isLinkLocalUnicast() && !ip('8.8.8.8').isLinkLocalUnicast()",
                true,
            ),
            (
                "ip('8.8.8.8').isGlobalUnicast() && !ip('127.0.0.1').isGlobalUnicast()",
                true,
            ),
        ] {
            assert_eq!(eval(source), cel::Value::Bool(want), "{source}");
        }
    }
}
