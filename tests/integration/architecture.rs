//! The crate's shape, as the contributing rules state it (docs/contributing/architecture.md):
//! no file imports a file that imports it back, directly or around a longer circle (the
//! files of one folder and the folder's root count too); the top-level modules import one
//! another without a circle either; no source file is over 600 lines; `#[path]` only on
//! test modules. Read from the sources with `syn`: every `use` and every path in the code
//! is resolved to the file that defines what it names, `pub use` re-exports followed to the
//! defining file (a re-export is a facade, not a use). Paths inside macro calls are not
//! seen. Test code (`#[cfg(test)]` items, `tests.rs` and `*_tests.rs`) is left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// A module, as the path of names from the crate root (`["env", "devtools"]`).
type Module = Vec<String>;

/// One source file: its module, text, and what it names.
struct File {
    path: PathBuf,
    lines: usize,
    /// Names this module re-exports (`pub use a::b as c;` → `c` → `a::b`, made absolute).
    reexports: BTreeMap<String, Vec<String>>,
    /// Every path the file names outside re-exports, made absolute where its head is
    /// `crate`, `super`, `self` or a child module; others (std, crates) are dropped.
    uses: Vec<Vec<String>>,
    /// `#[path]` attributes on items that are not test modules.
    stray_path_attrs: usize,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The library's source files by module (`main.rs`, the binary, is not the library's).
fn modules() -> BTreeMap<Module, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&src(), &mut files);
    let mut out = BTreeMap::new();
    for p in files {
        let rel = p.strip_prefix(src()).unwrap().with_extension("");
        let mut m: Module = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        let last = m.last().unwrap().clone();
        if last == "tests" || last.ends_with("_tests") || m == ["main"] {
            continue;
        }
        if last == "mod" || m == ["lib"] {
            m.pop();
        }
        out.insert(m, p);
    }
    out
}

fn is_test_cfg(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string() == "test")
    })
}

/// `use` trees written out: `a::{b, c::d as e}` → `([a, b], b)`, `([a, c, d], e)`.
fn flatten(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) if n.ident == "self" => {
            out.push((prefix.clone(), prefix.last().cloned().unwrap_or_default()))
        }
        syn::UseTree::Name(n) => {
            out.push(([prefix.as_slice(), &[n.ident.to_string()]].concat(), n.ident.to_string()))
        }
        syn::UseTree::Rename(r) => {
            let path = if r.ident == "self" {
                prefix.clone()
            } else {
                [prefix.as_slice(), &[r.ident.to_string()]].concat()
            };
            out.push((path, r.rename.to_string()));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), "*".into())),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| flatten(t, prefix, out)),
    }
}

/// Collects paths and `use` trees, skipping test items.
#[derive(Default)]
struct Names {
    paths: Vec<Vec<String>>,
    reexports: Vec<(Vec<String>, String)>,
    stray_path_attrs: usize,
}

impl<'a> Visit<'a> for Names {
    fn visit_item(&mut self, i: &'a syn::Item) {
        let attrs: &[syn::Attribute] = match i {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(x) => &x.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Const(c) => &c.attrs,
            _ => &[],
        };
        if is_test_cfg(attrs) {
            return;
        }
        if let syn::Item::Mod(m) = i {
            self.stray_path_attrs += m.attrs.iter().filter(|a| a.path().is_ident("path")).count();
        }
        if let syn::Item::Use(u) = i {
            let mut flat = Vec::new();
            flatten(&u.tree, &mut Vec::new(), &mut flat);
            if matches!(u.vis, syn::Visibility::Inherited) {
                self.paths.extend(flat.into_iter().map(|(p, _)| p));
            } else {
                self.reexports.extend(flat);
            }
            return;
        }
        syn::visit::visit_item(self, i);
    }

    fn visit_path(&mut self, p: &'a syn::Path) {
        if p.segments.len() > 1 {
            self.paths.push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, p);
    }
}

/// `path` as written in module `m` made absolute, or `None` for std and other crates.
fn absolute(m: &Module, path: &[String], children: &BTreeSet<String>) -> Option<Vec<String>> {
    let (head, tail) = path.split_first()?;
    match head.as_str() {
        "crate" => Some(tail.to_vec()),
        "self" => Some([m.as_slice(), tail].concat()),
        "super" => {
            let mut base = m[..m.len().checked_sub(1)?].to_vec();
            let mut rest = tail;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            Some([base.as_slice(), rest].concat())
        }
        h if children.contains(h) => Some([m.as_slice(), path].concat()),
        _ => None,
    }
}

fn read_files() -> BTreeMap<Module, File> {
    let mods = modules();
    let mut out = BTreeMap::new();
    for (m, path) in &mods {
        let text = std::fs::read_to_string(path).unwrap();
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut names = Names::default();
        names.visit_file(&ast);
        let children: BTreeSet<String> = mods
            .keys()
            .filter(|c| c.len() == m.len() + 1 && c.starts_with(m))
            .map(|c| c.last().unwrap().clone())
            .collect();
        let reexports = names
            .reexports
            .into_iter()
            .filter_map(|(p, alias)| Some((alias, absolute(m, &p, &children)?)))
            .collect();
        let uses = names.paths.iter().filter_map(|p| absolute(m, p, &children)).collect();
        out.insert(
            m.clone(),
            File {
                path: path.clone(),
                lines: text.lines().count(),
                reexports,
                uses,
                stray_path_attrs: names.stray_path_attrs,
            },
        );
    }
    out
}

/// The file that defines what `path` names: its longest module prefix (the crate root at
/// least), through re-exports.
fn resolve<'a>(files: &'a BTreeMap<Module, File>, path: &[String], depth: usize) -> Option<&'a Module> {
    for n in (0..=path.len()).rev() {
        if let Some((m, f)) = files.get_key_value(&path[..n]) {
            if let Some(target) = path.get(n).and_then(|name| f.reexports.get(name)).filter(|_| depth < 10) {
                let mut via = target.clone();
                via.extend_from_slice(&path[n + 1..]);
                if let Some(r) = resolve(files, &via, depth + 1) {
                    return Some(r);
                }
            }
            return Some(m);
        }
    }
    None
}

/// File → files it names, each with one path that shows the edge.
fn edges(files: &BTreeMap<Module, File>) -> BTreeMap<Module, BTreeMap<Module, String>> {
    let mut out: BTreeMap<Module, BTreeMap<Module, String>> = BTreeMap::new();
    for (m, f) in files {
        for p in &f.uses {
            if let Some(r) = resolve(files, p, 0).filter(|r| *r != m) {
                out.entry(m.clone()).or_default().entry(r.clone()).or_insert_with(|| p.join("::"));
            }
        }
    }
    out
}

/// The edges without the paths that show them.
fn targets(shown: &BTreeMap<Module, BTreeMap<Module, String>>) -> BTreeMap<Module, BTreeSet<Module>> {
    shown.iter().map(|(a, bs)| (a.clone(), bs.keys().cloned().collect())).collect()
}

/// Strongly connected components with more than one member (Tarjan).
fn circles(nodes: &[Module], edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct T<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<Module, usize>,
        low: BTreeMap<Module, usize>,
        stack: Vec<Module>,
        on: BTreeSet<Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit(t: &mut T, v: &Module) {
        let i = t.index.len();
        t.index.insert(v.clone(), i);
        t.low.insert(v.clone(), i);
        t.stack.push(v.clone());
        t.on.insert(v.clone());
        for w in t.edges.get(v).into_iter().flatten() {
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                t.low.entry(v.clone()).and_modify(|l| *l = (*l).min(lw));
            } else if t.on.contains(w) {
                let iw = t.index[w];
                t.low.entry(v.clone()).and_modify(|l| *l = (*l).min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(&w);
                let done = &w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        on: BTreeSet::new(),
        out: vec![],
    };
    for v in nodes {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "lib".into()
    } else {
        m.join("/")
    }
}

/// Each circle with the path that makes each of its edges.
fn describe(circles: &[Vec<Module>], shown: &BTreeMap<Module, BTreeMap<Module, String>>) -> String {
    let mut s = String::new();
    for c in circles {
        s += &format!("\n  circle: {}", c.iter().map(name).collect::<Vec<_>>().join(", "));
        for a in c {
            for (b, via) in shown.get(a).into_iter().flatten().filter(|(b, _)| c.contains(b)) {
                s += &format!("\n    {} names {} ({via})", name(a), name(b));
            }
        }
    }
    s
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let files = read_files();
    assert!(files.len() > 100, "read {} source files: is src/ where it was?", files.len());
    let shown = edges(&files);
    let graph = targets(&shown);
    let nodes: Vec<Module> = files.keys().cloned().collect();
    let found = circles(&nodes, &graph);
    assert!(
        found.is_empty(),
        "files that import each other (move what they share into a file of its own):{}",
        describe(&found, &shown)
    );
}

#[test]
fn the_top_level_modules_import_each_other_without_a_circle() {
    let files = read_files();
    let shown = edges(&files);
    let mut top: BTreeMap<Module, BTreeMap<Module, String>> = BTreeMap::new();
    for (a, bs) in &shown {
        for (b, via) in bs {
            if let (Some(x), Some(y)) = (a.first(), b.first()) {
                if x != y {
                    let from = format!("{} → {via}", name(a));
                    top.entry(vec![x.clone()]).or_default().entry(vec![y.clone()]).or_insert(from);
                }
            }
        }
    }
    let graph = targets(&top);
    let nodes: Vec<Module> = top.keys().cloned().collect();
    let found = circles(&nodes, &graph);
    assert!(found.is_empty(), "top-level modules in a circle:{}", describe(&found, &top));
}

#[test]
fn the_check_sees_a_circle_where_there_is_one() {
    // A circle written out as two modules of a made-up crate: the same reader and
    // resolver must report it, or the two tests above could pass on anything.
    let parse = |text: &str| {
        let mut n = Names::default();
        n.visit_file(&syn::parse_file(text).unwrap());
        n
    };
    let a =
        parse("use super::b::Thing; pub struct Other; #[cfg(test)] mod tests { use super::super::c::X; }");
    let b = parse("pub struct Thing(super::a::Other);");
    let c = parse("use crate::a::Other;");
    let no_children = BTreeSet::new();
    let mut files = BTreeMap::new();
    for (m, n) in [("a", a), ("b", b), ("c", c)] {
        let m = vec![m.to_string()];
        let uses = n.paths.iter().filter_map(|p| absolute(&m, p, &no_children)).collect();
        files.insert(
            m,
            File { path: PathBuf::new(), lines: 0, reexports: BTreeMap::new(), uses, stray_path_attrs: 0 },
        );
    }
    let shown = edges(&files);
    let graph = targets(&shown);
    let found = circles(&files.keys().cloned().collect::<Vec<_>>(), &graph);
    assert_eq!(
        found,
        vec![vec![vec!["a".to_string()], vec!["b".to_string()]]],
        "{}",
        describe(&found, &shown)
    );
}

#[test]
fn no_source_file_is_over_600_lines_and_path_attributes_are_for_tests() {
    let files = read_files();
    let long: Vec<String> = files
        .values()
        .filter(|f| f.lines > 600)
        .map(|f| format!("{} ({} lines)", f.path.display(), f.lines))
        .collect();
    assert!(long.is_empty(), "split these by concept (docs/contributing/architecture.md): {long:?}");
    let stray: Vec<String> =
        files.values().filter(|f| f.stray_path_attrs > 0).map(|f| f.path.display().to_string()).collect();
    assert!(stray.is_empty(), "#[path] outside a #[cfg(test)] module: {stray:?}");
}
