//! Which modules of a crate use which, read from its source with `syn`, and the import circles
//! among them.
//!
//! An edge A → B means code in module A names an item that module B defines (through a `use`, or
//! a path such as `crate::b::Thing` in an expression or a type). Paths through a re-export are
//! followed to the module that defines the item, so a child that imports `crate::store::Store`,
//! which `store/mod.rs` re-exports from `store::writer`, depends on `store::writer`, not on
//! `store`. Declaring a child (`mod b;`) is no edge, and neither is a parent re-exporting one of
//! its descendants (`pub use self::b::Thing`): that is the parent's table of contents.
//!
//! Why not cargo-modules: it analyses through rust-analyzer, which runs every build script of
//! the dependency graph first (RocksDB's C++ again, in the check profile) and is itself a
//! rust-analyzer-sized build; this reads only the crate's own files. What it cannot see: paths
//! inside macro invocations (their tokens are not parsed) and glob imports (`use x::*`, resolved
//! to the module `x` itself).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use petgraph::graph::DiGraph;
use syn::visit::Visit;

/// A module's path inside its crate: `[]` is the crate root, `["store", "writer"]` is
/// `crate::store::writer`.
pub type ModPath = Vec<String>;

/// The first segment of a path that leads out of the crate (or to a local name).
const EXTERN: &str = "<extern>";

/// Errors while reading a crate's modules.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// A file could not be read.
    #[error("{0}: {1}")]
    Read(PathBuf, #[source] std::io::Error),
    /// A file is not valid Rust.
    #[error("{0}: {1}")]
    Parse(PathBuf, #[source] syn::Error),
    /// `mod x;` names no file.
    #[error("{0}: no file for `mod {1};`")]
    MissingModule(PathBuf, String),
}

/// One module's declarations, as far as resolving paths needs them.
#[derive(Default)]
struct Module {
    children: BTreeSet<String>,
    /// Names this module imports, with the absolute path each stands for: `use a::b as c`
    /// maps `c` to `a::b`. Following them resolves re-exports.
    imports: BTreeMap<String, ModPath>,
    /// Absolute paths this module's code names (not yet resolved to modules), and whether the
    /// path came from a `pub use` (a re-export, which does not count toward descendants).
    named: Vec<(ModPath, bool)>,
}

/// The module graph of one crate.
pub struct ModuleGraph {
    modules: BTreeMap<ModPath, Module>,
}

impl ModuleGraph {
    /// Reads the crate whose root file is `root` (its lib.rs or main.rs), following `mod`
    /// declarations (and `#[path]` attributes) into their files.
    pub fn load(root: &Path) -> Result<Self, GraphError> {
        let mut graph = ModuleGraph { modules: BTreeMap::new() };
        let dir = root.parent().unwrap_or(Path::new(".")).to_path_buf();
        graph.load_file(root, Vec::new(), dir)?;
        Ok(graph)
    }

    /// `children_dir` is where `mod x;` inside this file looks for x.rs or x/mod.rs.
    fn load_file(&mut self, path: &Path, module: ModPath, children_dir: PathBuf) -> Result<(), GraphError> {
        let text = std::fs::read_to_string(path).map_err(|e| GraphError::Read(path.into(), e))?;
        let file = syn::parse_file(&text).map_err(|e| GraphError::Parse(path.into(), e))?;
        self.load_items(path, &file.items, module, &children_dir)
    }

    fn load_items(
        &mut self,
        path: &Path,
        items: &[syn::Item],
        module: ModPath,
        children_dir: &Path,
    ) -> Result<(), GraphError> {
        // Children first: a path may name a child declared further down.
        let children = items.iter().filter_map(|i| match i {
            syn::Item::Mod(m) => Some(m.ident.to_string()),
            _ => None,
        });
        self.modules.entry(module.clone()).or_default().children.extend(children);
        let mut files = Vec::new();
        for item in items {
            match item {
                syn::Item::Mod(m) => {
                    let name = m.ident.to_string();
                    let mut child = module.clone();
                    child.push(name.clone());
                    match &m.content {
                        // An inline module (`mod tests { .. }`) is a module of its own whose
                        // children would live in `children_dir/name/`.
                        Some((_, inner)) => {
                            files.push((None, inner.as_slice(), child, children_dir.join(&name)))
                        }
                        None => {
                            let file = module_file(path, m, children_dir, &name)?;
                            let dir = if file.file_name().is_some_and(|f| f == "mod.rs")
                                || path_attr(m).is_some()
                            {
                                file.parent().unwrap_or(Path::new(".")).to_path_buf()
                            } else {
                                children_dir.join(&name)
                            };
                            files.push((Some(file), &[][..], child, dir));
                        }
                    }
                }
                syn::Item::Use(u) => {
                    let public = matches!(u.vis, syn::Visibility::Public(_));
                    let mut uses = Vec::new();
                    flatten_use(&u.tree, Vec::new(), &mut uses);
                    let entry = self.modules.entry(module.clone()).or_default();
                    for (alias, target) in uses {
                        let absolute = absolute(&module, &target, &entry.children);
                        if let Some(alias) = alias {
                            entry.imports.insert(alias, absolute.clone());
                        }
                        entry.named.push((absolute, public));
                    }
                }
                other => {
                    let mut paths = PathCollector::default();
                    paths.visit_item(other);
                    let entry = self.modules.entry(module.clone()).or_default();
                    for p in paths.paths {
                        let absolute = match entry.imports.get(&p[0]) {
                            Some(imported) => imported.iter().chain(&p[1..]).cloned().collect(),
                            None => absolute(&module, &p, &entry.children),
                        };
                        entry.named.push((absolute, false));
                    }
                }
            }
        }
        for (file, inner, child, dir) in files {
            match file {
                Some(file) => self.load_file(&file, child, dir)?,
                None => self.load_items(path, inner, child, &dir)?,
            }
        }
        Ok(())
    }

    /// The module that defines what `path` names: its longest module prefix, then through that
    /// module's imports (re-exports), up to a few hops.
    fn resolve(&self, path: &[String]) -> Option<ModPath> {
        if path.first().is_some_and(|s| s == EXTERN) {
            return None;
        }
        let mut path: ModPath = path.to_vec();
        for _ in 0..8 {
            let mut module = Vec::new();
            let mut rest = path.as_slice();
            while let Some((first, tail)) = rest.split_first() {
                let mut next = module.clone();
                next.push(first.clone());
                if !self.modules.contains_key(&next) {
                    break;
                }
                module = next;
                rest = tail;
            }
            let Some(first) = rest.first() else { return Some(module) };
            match self.modules.get(&module).and_then(|m| m.imports.get(first)) {
                Some(target) => {
                    let followed: ModPath = target.iter().chain(&rest[1..]).cloned().collect();
                    if followed == path {
                        return Some(module);
                    }
                    path = followed;
                }
                None => return Some(module),
            }
        }
        None
    }

    /// Every edge A → B (A's code names an item B defines), with one path that shows it.
    pub fn edges(&self) -> BTreeMap<(ModPath, ModPath), String> {
        let mut edges = BTreeMap::new();
        for (from, module) in &self.modules {
            for (named, reexport) in &module.named {
                // Paths into other crates resolve to nothing.
                let Some(to) = self.resolve(named) else { continue };
                if &to == from {
                    continue;
                }
                if *reexport && to.starts_with(from) {
                    continue;
                }
                edges.entry((from.clone(), to)).or_insert_with(|| named.join("::"));
            }
        }
        edges
    }

    /// The import circles: each a list of modules that reach one another, with the edges
    /// between them (`a -> b via crate::b::Thing`). Empty when the graph is acyclic.
    pub fn cycles(&self) -> Vec<Vec<String>> {
        let edges = self.edges();
        let mut graph = DiGraph::<ModPath, ()>::new();
        let nodes: BTreeMap<&ModPath, _> =
            self.modules.keys().map(|m| (m, graph.add_node(m.clone()))).collect();
        for (from, to) in edges.keys() {
            if let (Some(&a), Some(&b)) = (nodes.get(from), nodes.get(to)) {
                graph.add_edge(a, b, ());
            }
        }
        petgraph::algo::tarjan_scc(&graph)
            .into_iter()
            .filter(|scc| scc.len() > 1)
            .map(|scc| {
                let members: BTreeSet<&ModPath> = scc.iter().map(|&n| &graph[n]).collect();
                edges
                    .iter()
                    .filter(|((a, b), _)| members.contains(a) && members.contains(b))
                    .map(|((a, b), via)| format!("{} -> {} via {via}", display(a), display(b)))
                    .collect()
            })
            .collect()
    }
}

fn display(module: &[String]) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

fn path_attr(m: &syn::ItemMod) -> Option<String> {
    m.attrs.iter().find(|a| a.path().is_ident("path")).and_then(|a| match &a.meta {
        syn::Meta::NameValue(nv) => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// The file of `mod name;` declared in `path`: its `#[path]` (relative to the declaring file's
/// folder), else `children_dir/name.rs` or `children_dir/name/mod.rs`.
fn module_file(
    path: &Path,
    m: &syn::ItemMod,
    children_dir: &Path,
    name: &str,
) -> Result<PathBuf, GraphError> {
    if let Some(p) = path_attr(m) {
        return Ok(path.parent().unwrap_or(Path::new(".")).join(p));
    }
    [children_dir.join(format!("{name}.rs")), children_dir.join(name).join("mod.rs")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| GraphError::MissingModule(path.into(), name.into()))
}

/// A `use` tree as (alias, path) pairs: `use a::{b, c as d, e::*}` gives (b, a::b), (d, a::c)
/// and (None, a::e).
fn flatten_use(tree: &syn::UseTree, prefix: ModPath, out: &mut Vec<(Option<String>, ModPath)>) {
    let with = |name: &syn::Ident| {
        let mut p = prefix.clone();
        p.push(name.to_string());
        p
    };
    match tree {
        syn::UseTree::Path(p) => flatten_use(&p.tree, with(&p.ident), out),
        syn::UseTree::Name(n) if n.ident == "self" => out.push((prefix.last().cloned(), prefix.clone())),
        syn::UseTree::Name(n) => out.push((Some(n.ident.to_string()), with(&n.ident))),
        syn::UseTree::Rename(r) => out.push((Some(r.rename.to_string()), with(&r.ident))),
        syn::UseTree::Glob(_) => out.push((None, prefix)),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| flatten_use(t, prefix.clone(), out)),
    }
}

/// `path` as written in `module` made absolute: `crate::`, `super::` and `self::` resolved,
/// and a first segment naming a child module taken as relative to `module`. Anything else (a
/// path into another crate, a local name) stays as written and resolves to no module of ours.
fn absolute(module: &[String], path: &[String], children: &BTreeSet<String>) -> ModPath {
    let mut base: ModPath = module.to_vec();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &path[1..];
        }
        Some("self") => rest = &path[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        Some(first) if children.contains(first) => {}
        _ => return std::iter::once(EXTERN.to_string()).chain(path.iter().cloned()).collect(),
    }
    base.extend(rest.iter().cloned());
    base
}

/// Every multi-segment path in an item (types, expressions, patterns, trait bounds).
#[derive(Default)]
struct PathCollector {
    paths: Vec<ModPath>,
}

impl<'ast> Visit<'ast> for PathCollector {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.segments.len() > 1 && path.leading_colon.is_none() {
            self.paths.push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, path);
    }

    /// A `use` inside a function body.
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let mut uses = Vec::new();
        flatten_use(&item.tree, Vec::new(), &mut uses);
        self.paths.extend(uses.into_iter().map(|(_, path)| path).filter(|p| !p.is_empty()));
    }
}
