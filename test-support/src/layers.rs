//! The module import graph of a crate, read from its sources: which module names which.
//! Layering tests assert on it (no circles; a layer never imports the one above), so
//! that a layering holds after the change that made it.
//!
//! A module imports another when its code (comments and `#[cfg(test)] mod tests` aside)
//! names a path into it: `crate::a::b`, `super::b`, `self::c`, a group `use crate::{a,
//! b::c}`, or a bare path to one of its own children (`c::f`). A child that reaches up
//! to its parent counts too, so a parent and a child cannot lean on each other either.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Modules by `::`-joined path (the crate root is `""`), each with the modules it imports.
#[derive(Debug, Default)]
pub struct ModuleGraph {
    edges: BTreeMap<String, BTreeSet<String>>,
    /// Each module's code (comments and unit tests dropped), whitespace removed.
    code: BTreeMap<String, String>,
}

impl ModuleGraph {
    /// The graph of the crate whose `src/` directory is `src`.
    pub fn of_crate(src: &Path) -> Self {
        let mut files = Vec::new();
        collect(src, src, &mut files);
        let modules: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
        let mut edges = BTreeMap::new();
        let mut compact = BTreeMap::new();
        for (module, text) in &files {
            let code = code_of(text);
            compact.insert(
                module.clone(),
                code.chars().filter(|c| !c.is_whitespace()).collect(),
            );
            let mut to = BTreeSet::new();
            for path in paths(&code) {
                if let Some(target) = resolve(&path, module, &modules)
                    && target != *module
                {
                    to.insert(target);
                }
            }
            for child in children(module, &modules) {
                let name = child.rsplit("::").next().unwrap_or(child);
                if names_bare(&code, name) {
                    to.insert(child.clone());
                }
            }
            edges.insert(module.clone(), to);
        }
        Self {
            edges,
            code: compact,
        }
    }

    /// The modules whose code names `needle` (compared with whitespace removed from
    /// both, so a call split over lines is found too): for rules such as "only one
    /// module writes storage".
    pub fn modules_naming(&self, needle: &str) -> Vec<String> {
        let needle: String = needle.chars().filter(|c| !c.is_whitespace()).collect();
        self.code
            .iter()
            .filter(|(_, code)| code.contains(&needle))
            .map(|(m, _)| m.clone())
            .collect()
    }

    /// Every module.
    pub fn modules(&self) -> impl Iterator<Item = &str> {
        self.edges.keys().map(String::as_str)
    }

    /// What `module` imports.
    pub fn imports(&self, module: &str) -> BTreeSet<String> {
        self.edges.get(module).cloned().unwrap_or_default()
    }

    /// Edges from a module under `from` to a module under `to` (a prefix: `handlers`
    /// means `handlers` and everything below it).
    pub fn edges_between(&self, from: &str, to: &str) -> Vec<(String, String)> {
        let under = |m: &str, p: &str| m == p || m.starts_with(&format!("{p}::"));
        self.edges
            .iter()
            .filter(|(m, _)| under(m, from))
            .flat_map(|(m, ts)| {
                ts.iter()
                    .filter(|t| under(t, to))
                    .map(move |t| (m.clone(), t.clone()))
            })
            .collect()
    }

    /// The circles: groups of two or more modules that reach each other.
    pub fn cycles(&self) -> Vec<Vec<String>> {
        Tarjan::new(&self.edges).run()
    }
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(root, &path, out);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let Ok(rel) = path.strip_prefix(root) else {
            continue;
        };
        let mut parts: Vec<String> = rel
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        if parts == ["lib"] || parts == ["main"] {
            parts.clear();
        }
        // `tests.rs` beside a module holds that module's unit tests, not code.
        if parts.last().is_some_and(|p| p == "tests") {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(&path) {
            out.push((parts.join("::"), text));
        }
    }
}

/// The code: line comments dropped, and everything from the unit-test module on.
fn code_of(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path that starts at `crate`, `super` or `self`, as its segments; a group
/// (`crate::{a, b::c}`) yields one path per item.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !(is_ident(bytes[i - 1]) || bytes[i - 1] == ':');
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        let root = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|r| rest.starts_with(r));
        match root {
            Some(r) if starts_word => {
                let (segments, next) = path_at(&bytes, i);
                let mut segments = segments;
                if bytes.get(next) == Some(&'{') {
                    let close = matching(&bytes, next);
                    let inner: String = bytes[next + 1..close].iter().collect();
                    for item in split_top(&inner) {
                        let item: Vec<char> = item.trim().chars().collect();
                        let (more, _) = path_at(&item, 0);
                        let mut p = segments.clone();
                        p.extend(more);
                        out.push(p);
                    }
                    i = close + 1;
                } else {
                    if segments.is_empty() {
                        segments.push(r.trim_end_matches("::").to_string());
                    }
                    out.push(segments);
                    i = next.max(i + 1);
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// The `::`-separated identifiers from `start`, and where they stopped (at a `{` when a
/// group follows).
fn path_at(chars: &[char], start: usize) -> (Vec<String>, usize) {
    let mut segments = Vec::new();
    let mut i = start;
    loop {
        let from = i;
        while i < chars.len() && is_ident(chars[i]) {
            i += 1;
        }
        if i == from {
            return (segments, i);
        }
        segments.push(chars[from..i].iter().collect());
        if chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':') {
            i += 2;
        } else {
            return (segments, i);
        }
    }
}

fn matching(chars: &[char], open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in chars.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    chars.len()
}

fn split_top(s: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut depth = 0;
    for c in s.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(String::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = out.last_mut() {
            last.push(c);
        }
    }
    out
}

/// The module a path lands in: the longest prefix of it that is a module.
fn resolve(path: &[String], module: &str, modules: &BTreeSet<String>) -> Option<String> {
    let mut base: Vec<&str> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").collect()
    };
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    let mut full: Vec<&str> = base;
    full.extend(rest.iter().map(String::as_str));
    (0..=full.len())
        .rev()
        .map(|n| full[..n].join("::"))
        .find(|m| modules.contains(m))
}

fn children<'a>(module: &str, modules: &'a BTreeSet<String>) -> Vec<&'a String> {
    let prefix = if module.is_empty() {
        String::new()
    } else {
        format!("{module}::")
    };
    modules
        .iter()
        .filter(|m| {
            m.len() > prefix.len() && m.starts_with(&prefix) && !m[prefix.len()..].contains("::")
        })
        .collect()
}

/// Whether `code` names `name::` as a path of its own (not `x::name::`), or re-exports
/// it (`pub use name;`).
fn names_bare(code: &str, name: &str) -> bool {
    let needle = format!("{name}::");
    code.match_indices(&needle).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        !before.is_some_and(|c| is_ident(c) || c == ':')
    })
}

struct Tarjan<'a> {
    edges: &'a BTreeMap<String, BTreeSet<String>>,
    index: BTreeMap<&'a str, usize>,
    low: BTreeMap<&'a str, usize>,
    stack: Vec<&'a str>,
    on_stack: BTreeSet<&'a str>,
    next: usize,
    out: Vec<Vec<String>>,
}

impl<'a> Tarjan<'a> {
    fn new(edges: &'a BTreeMap<String, BTreeSet<String>>) -> Self {
        Self {
            edges,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            next: 0,
            out: Vec::new(),
        }
    }

    fn run(mut self) -> Vec<Vec<String>> {
        for v in self.edges.keys() {
            if !self.index.contains_key(v.as_str()) {
                self.visit(v);
            }
        }
        self.out
    }

    fn visit(&mut self, v: &'a str) {
        self.index.insert(v, self.next);
        self.low.insert(v, self.next);
        self.next += 1;
        self.stack.push(v);
        self.on_stack.insert(v);
        let edges = self.edges;
        for w in edges.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !self.index.contains_key(w) {
                self.visit(w);
                let lw = self.low[w];
                let lv = self.low[v];
                self.low.insert(v, lv.min(lw));
            } else if self.on_stack.contains(w) {
                let iw = self.index[w];
                let lv = self.low[v];
                self.low.insert(v, lv.min(iw));
            }
        }
        if self.low[v] == self.index[v] {
            let mut group = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack.remove(w);
                group.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                self.out.push(group);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ModuleGraph;

    fn write(dir: &std::path::Path, file: &str, text: &str) {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        std::fs::write(path, text).expect("write");
    }

    #[test]
    fn circles_through_paths_groups_and_children_are_found() {
        let dir = std::env::temp_dir().join(format!("layers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write(
            &dir,
            "lib.rs",
            "pub mod a;\npub mod b;\npub mod c;\npub mod d;\n",
        );
        write(
            &dir,
            "a.rs",
            "use crate::{b::X, c};\n// crate::d is only a comment\n",
        );
        write(&dir, "b.rs", "pub struct X;\nfn f() { super::a::g() }\n");
        write(&dir, "c.rs", "");
        write(&dir, "d/mod.rs", "mod e;\npub use e::Y;\n");
        write(&dir, "d/e.rs", "use super::Z;\n");
        let g = ModuleGraph::of_crate(&dir);
        assert_eq!(
            g.imports("a").into_iter().collect::<Vec<_>>(),
            ["b", "c"],
            "a comment is not an import"
        );
        assert_eq!(
            g.cycles(),
            vec![
                vec!["a".to_string(), "b".to_string()],
                vec!["d".into(), "d::e".into()]
            ]
        );
        assert_eq!(
            g.edges_between("d::e", "d"),
            vec![("d::e".into(), "d".into())]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
