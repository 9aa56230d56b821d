//! Which file of a crate imports which: the arrows of its import graph, each with the first line that draws it.
//!
//! 1. Every module's `use` items are read into a scope: a name → the absolute path it stands for (`None` when it
//!    comes from another crate), and the modules it glob-imports.
//! 2. Every path the product code writes is collected: `use` items (in functions too), paths in types, expressions
//!    and patterns, and `a::b` token runs inside macro calls, whose tokens syn does not parse.
//! 3. A path is made absolute (`crate::`, `self::`, `super::`, a sub-module's name, a name a `use` brought in), and
//!    resolved to the file that defines its item: the longest prefix that is a module, then through that module's
//!    re-exports (`pub use`, a glob) to where the name is defined. `crate::Config` re-exported by `lib.rs` from
//!    `types.rs` is an arrow to `types.rs`, not to `lib.rs`.
//!
//! A `mod` declaration is not an import, and neither is a module's use of its own sub-modules: `lib.rs` or a
//! `mod.rs` is the face of the parts it declares (it hands their names on and dispatches to them), so an arrow
//! runs only from a part up to its parent's shared items, or between modules that are not nested. Code under
//! `#[cfg(test)]` is not read.

use crate::tree::{is_test_only, item_attrs, unraw, ModPath, Tree};
use proc_macro2::{Spacing, TokenStream, TokenTree};
use std::collections::BTreeMap;
use syn::visit::Visit;

/// `from` imports `to` (files relative to the workspace root); `line` of `from` is the first that does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrow {
    pub from: String,
    pub to: String,
    pub line: usize,
    /// That line, trimmed.
    pub text: String,
}

/// The import arrows between the files of `tree`, one per pair of files, sorted; none from a module to its own
/// sub-modules.
pub fn arrows(tree: &Tree) -> Vec<Arrow> {
    let resolver = Resolver::new(tree);
    let mut first: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (index, file) in tree.files.iter().enumerate() {
        let mut refs = Refs { module: file.module.clone(), found: Vec::new() };
        refs.visit_file(&file.ast);
        for found in refs.found {
            let target = resolver.absolute(&found.module, &found.segs, 0).and_then(|abs| resolver.resolve(&abs, 0));
            if let Some(to) = target.filter(|to| *to != index && !is_part_of(&tree.files[*to].module, &file.module)) {
                let line = first.entry((index, to)).or_insert(found.line);
                *line = (*line).min(found.line);
            }
        }
    }
    let mut found: Vec<Arrow> = first
        .into_iter()
        .map(|((from, to), line)| {
            let file = &tree.files[from];
            let text = file.lines.get(line.saturating_sub(1)).map_or("", |l| l.trim()).to_owned();
            Arrow { from: file.path.clone(), to: tree.files[to].path.clone(), line, text }
        })
        .collect();
    found.sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
    found
}

/// Whether `module` is a sub-module of `owner` (at any depth).
fn is_part_of(module: &[String], owner: &[String]) -> bool {
    module.len() > owner.len() && module.starts_with(owner)
}

/// One name a `use` brings in (`alias: None` for a glob) and the path it stands for, as written.
struct Import {
    alias: Option<String>,
    segs: Vec<String>,
    line: usize,
}

/// What a module's `use` items bring in, made absolute.
#[derive(Default)]
struct Scope {
    /// Name → its absolute path in this crate, or `None` for another crate's item.
    names: BTreeMap<String, Option<ModPath>>,
    globs: Vec<ModPath>,
}

struct Resolver<'t> {
    tree: &'t Tree,
    /// Each module's imports as written, to read a path that starts with an imported name.
    written: BTreeMap<ModPath, Vec<Import>>,
    scopes: BTreeMap<ModPath, Scope>,
}

/// How many re-exports or aliases one path may be followed through (a `use` of itself ends there).
const MAX_HOPS: usize = 8;

impl<'t> Resolver<'t> {
    fn new(tree: &'t Tree) -> Resolver<'t> {
        let mut written: BTreeMap<ModPath, Vec<Import>> = BTreeMap::new();
        for file in &tree.files {
            collect_imports(&file.module, &file.ast.items, &mut written);
        }
        let mut resolver = Resolver { tree, written, scopes: BTreeMap::new() };
        let mut scopes = BTreeMap::new();
        for (module, imports) in &resolver.written {
            let mut scope = Scope::default();
            for import in imports {
                let abs = resolver.absolute(module, &import.segs, 0);
                match &import.alias {
                    Some(alias) => {
                        scope.names.insert(alias.clone(), abs);
                    }
                    None => scope.globs.extend(abs),
                }
            }
            scopes.insert(module.clone(), scope);
        }
        resolver.scopes = scopes;
        resolver
    }

    /// The absolute module path of `segs` written in `module`, or `None` when it leads out of the crate.
    fn absolute(&self, module: &ModPath, segs: &[String], hops: usize) -> Option<ModPath> {
        let (first, rest) = segs.split_first()?;
        match first.as_str() {
            "crate" | "$crate" => Some(rest.to_vec()),
            "self" => Some([module.as_slice(), rest].concat()),
            "super" => {
                let ups = segs.iter().take_while(|s| *s == "super").count();
                let kept = module.len().checked_sub(ups)?;
                Some([&module[..kept], &segs[ups..]].concat())
            }
            _ => {
                let mut child = module.clone();
                child.push(first.clone());
                if self.tree.modules.contains_key(&child) {
                    return Some([module.as_slice(), segs].concat());
                }
                if hops >= MAX_HOPS {
                    return None;
                }
                let import = self.written.get(module)?.iter().find(|i| i.alias.as_deref() == Some(first))?;
                let base = self.absolute(module, &import.segs, hops + 1)?;
                Some([base.as_slice(), rest].concat())
            }
        }
    }

    /// The file that defines the item at absolute path `path`; `None` when a re-export leads out of the crate.
    fn resolve(&self, path: &[String], hops: usize) -> Option<usize> {
        let known = (0..=path.len()).rev().find(|k| self.tree.modules.contains_key(&path[..*k]))?;
        let (module, rest) = path.split_at(known);
        let file = self.tree.file_of(module)?;
        let Some(name) = rest.first() else { return Some(file) };
        if hops >= MAX_HOPS {
            return Some(file);
        }
        let Some(scope) = self.scopes.get(module) else { return Some(file) };
        if let Some(target) = scope.names.get(name) {
            let target = target.as_ref()?;
            return self.resolve(&[target.as_slice(), &rest[1..]].concat(), hops + 1);
        }
        let defined_here = self.tree.modules.get(module).is_some_and(|m| m.defs.contains(name));
        if !defined_here {
            for glob in &scope.globs {
                let has = self.tree.modules.get(glob).is_some_and(|m| m.defs.contains(name))
                    || self.scopes.get(glob).is_some_and(|s| s.names.contains_key(name));
                if has {
                    return self.resolve(&[glob.as_slice(), rest].concat(), hops + 1);
                }
            }
        }
        Some(file)
    }
}

/// Reads the `use` items of `module` (whose items are `items`) and of its inline modules into `out`.
fn collect_imports(module: &ModPath, items: &[syn::Item], out: &mut BTreeMap<ModPath, Vec<Import>>) {
    let imports = out.entry(module.clone()).or_default();
    for item in items.iter().filter(|item| !is_test_only(item_attrs(item))) {
        if let syn::Item::Use(u) = item {
            expand(&u.tree, &mut Vec::new(), imports);
        }
    }
    for item in items.iter().filter(|item| !is_test_only(item_attrs(item))) {
        if let syn::Item::Mod(syn::ItemMod { ident, content: Some((_, inner)), .. }) = item {
            let mut inner_module = module.clone();
            inner_module.push(unraw(ident));
            collect_imports(&inner_module, inner, out);
        }
    }
}

/// Flattens a use tree into one [`Import`] per name it brings in.
fn expand(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Import>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(unraw(&p.ident));
            expand(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => out.push(named(prefix, &n.ident, None)),
        syn::UseTree::Rename(r) => out.push(named(prefix, &r.ident, Some(unraw(&r.rename)))),
        syn::UseTree::Glob(g) => {
            out.push(Import { alias: None, segs: prefix.clone(), line: g.star_token.spans[0].start().line })
        }
        syn::UseTree::Group(g) => g.items.iter().for_each(|item| expand(item, prefix, out)),
    }
}

/// The import of `prefix::ident` (`prefix::{self}` is `prefix` itself), named `rename` or by its last segment.
fn named(prefix: &[String], ident: &syn::Ident, rename: Option<String>) -> Import {
    let name = unraw(ident);
    let segs = if name == "self" { prefix.to_vec() } else { [prefix, &[name]].concat() };
    let alias = rename.or_else(|| segs.last().cloned());
    Import { alias, segs, line: ident.span().start().line }
}

/// A path written in module `module`, as written.
struct Ref {
    module: ModPath,
    segs: Vec<String>,
    line: usize,
}

/// Collects every path of one file's product code, with the module it is written in.
struct Refs {
    module: ModPath,
    found: Vec<Ref>,
}

impl Refs {
    fn push(&mut self, segs: Vec<String>, line: usize) {
        self.found.push(Ref { module: self.module.clone(), segs, line });
    }

    /// Finds `a::b::c` runs in a macro call's tokens (not after a leading `::`, which names another crate).
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(group) => self.scan_tokens(group.stream()),
                TokenTree::Ident(ident) if !(i >= 2 && is_path_sep(&trees[i - 2..i])) => {
                    let mut segs = vec![unraw(ident)];
                    let mut line = ident.span().start().line;
                    while let (Some(sep), Some(TokenTree::Ident(next))) = (trees.get(i + 1..i + 3), trees.get(i + 3)) {
                        if !is_path_sep(sep) {
                            break;
                        }
                        segs.push(unraw(next));
                        line = next.span().start().line;
                        i += 3;
                    }
                    if segs.len() > 1 {
                        self.push(segs, line);
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
}

/// Whether two tokens are `::`.
fn is_path_sep(tokens: &[TokenTree]) -> bool {
    matches!(tokens, [TokenTree::Punct(a), TokenTree::Punct(b)]
        if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':')
}

impl<'ast> Visit<'ast> for Refs {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if is_test_only(item_attrs(item)) {
            return;
        }
        match item {
            syn::Item::Use(u) => {
                let mut imports = Vec::new();
                expand(&u.tree, &mut Vec::new(), &mut imports);
                imports.into_iter().for_each(|import| self.push(import.segs, import.line));
            }
            syn::Item::Mod(syn::ItemMod { ident, content: Some((_, inner)), .. }) => {
                self.module.push(unraw(ident));
                inner.iter().for_each(|item| self.visit_item(item));
                self.module.pop();
            }
            _ => syn::visit::visit_item(self, item),
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs: &[syn::Attribute] = match item {
            syn::ImplItem::Fn(f) => &f.attrs,
            syn::ImplItem::Const(c) => &c.attrs,
            syn::ImplItem::Type(t) => &t.attrs,
            _ => &[],
        };
        if !is_test_only(attrs) {
            syn::visit::visit_impl_item(self, item);
        }
    }

    /// `pub(crate)`, `pub(super)`, `pub(in a::b)` say who may see an item, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segs: Vec<String> = path.segments.iter().map(|s| unraw(&s.ident)).collect();
            if let Some(last) = path.segments.last() {
                self.push(segs, last.ident.span().start().line);
            }
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.scan_tokens(mac.tokens.clone());
    }
}

#[cfg(test)]
#[path = "imports_tests.rs"]
mod tests;
