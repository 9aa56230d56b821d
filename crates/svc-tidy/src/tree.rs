//! A crate target's module tree as the compiler walks it: from the root file (`lib.rs`, `main.rs`, a `bin/` file)
//! through every `mod` declaration (`foo.rs` or `foo/mod.rs`, inline modules, `#[path]`), each file parsed once.
//!
//! Product code only: an item under `#[cfg(test)]` (a `mod tests`, a test helper) is not walked, so a file declared
//! only by a test module is never read. Does not expand macros, so a module a macro declares is not seen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's place in its crate: the names after `crate::` (empty for the root).
pub type ModPath = Vec<String>;

/// Where the text of a source file comes from: the disk, or a table of fabricated files in the unit tests.
pub trait Sources {
    /// The text of the file at `path` (relative to the workspace root, `/`-separated), if it exists.
    fn read(&self, path: &str) -> Option<String>;
}

/// The files of a directory on disk (the workspace root).
pub struct Disk(pub PathBuf);

impl Sources for Disk {
    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.0.join(path)).ok()
    }
}

impl Sources for [(&str, &str)] {
    fn read(&self, path: &str) -> Option<String> {
        self.iter().find(|(name, _)| *name == path).map(|(_, text)| (*text).to_owned())
    }
}

/// What stops a tree from being read.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("{declared_in}: `mod {name};` has no file (looked for {})", looked_for.join(", "))]
    MissingModule { declared_in: String, name: String, looked_for: Vec<String> },
    #[error("{path}: cannot be read")]
    Unreadable { path: String },
    #[error("{path}:{line}: not Rust that syn can parse: {message}")]
    Unparsable { path: String, line: usize, message: String },
}

/// One source file of the tree, parsed.
pub struct SourceFile {
    /// Relative to the workspace root, `/`-separated.
    pub path: String,
    /// The file's lines, to quote a finding's line.
    pub lines: Vec<String>,
    pub ast: syn::File,
    /// The module the file is (`crate::pipeline::routing` → `["pipeline", "routing"]`).
    pub module: ModPath,
}

/// A module, a file of its own or inline in one.
pub struct Module {
    /// Index into [`Tree::files`].
    pub file: usize,
    /// Names its product items define (types, functions, constants, macros, modules).
    pub defs: BTreeSet<String>,
}

/// The module tree of one crate target.
pub struct Tree {
    pub files: Vec<SourceFile>,
    pub modules: BTreeMap<ModPath, Module>,
}

/// A `mod name;` to read once its declaring file is in the tree.
struct Pending {
    declared_in: String,
    name: String,
    module: ModPath,
    candidates: Vec<String>,
    child_dir: String,
}

/// Where a file's items sit: its module, the folder of its sub-modules' files and its own folder (for `#[path]`).
struct Place<'a> {
    module: ModPath,
    child_dir: String,
    file_dir: &'a str,
    inline: bool,
}

impl Tree {
    /// Reads the tree whose root file is `root` (for example `crates/svc-config/src/lib.rs`).
    pub fn load(sources: &(impl Sources + ?Sized), root: &str) -> Result<Tree, TreeError> {
        let mut tree = Tree { files: Vec::new(), modules: BTreeMap::new() };
        let text = sources.read(root).ok_or_else(|| TreeError::Unreadable { path: root.to_owned() })?;
        let mut pending = tree.add_file(root, &text, Vec::new(), parent(root))?;
        while let Some(next) = pending.pop() {
            let found = next.candidates.iter().find_map(|path| sources.read(path).map(|text| (path, text)));
            let Some((path, text)) = found else {
                return Err(TreeError::MissingModule {
                    declared_in: next.declared_in,
                    name: next.name,
                    looked_for: next.candidates,
                });
            };
            pending.extend(tree.add_file(path, &text, next.module, next.child_dir)?);
        }
        Ok(tree)
    }

    /// The file that holds module `module`, if the tree has that module.
    pub fn file_of(&self, module: &[String]) -> Option<usize> {
        self.modules.get(module).map(|m| m.file)
    }

    fn add_file(
        &mut self,
        path: &str,
        text: &str,
        module: ModPath,
        child_dir: String,
    ) -> Result<Vec<Pending>, TreeError> {
        let ast = syn::parse_file(text).map_err(|e| TreeError::Unparsable {
            path: path.to_owned(),
            line: e.span().start().line,
            message: e.to_string(),
        })?;
        let file = self.files.len();
        let mut pending = Vec::new();
        let place = Place { module: module.clone(), child_dir, file_dir: &parent(path), inline: false };
        self.scan(file, path, &ast.items, &place, &mut pending);
        self.files.push(SourceFile {
            path: path.to_owned(),
            lines: text.lines().map(str::to_owned).collect(),
            ast,
            module,
        });
        Ok(pending)
    }

    /// Records the module whose items are `items` and its sub-modules: inline ones at once, files as [`Pending`].
    fn scan(&mut self, file: usize, path: &str, items: &[syn::Item], place: &Place<'_>, pending: &mut Vec<Pending>) {
        let defs = items.iter().filter(|item| !is_test_only(item_attrs(item))).filter_map(item_name).collect();
        self.modules.insert(place.module.clone(), Module { file, defs });
        for item in items {
            let syn::Item::Mod(m) = item else { continue };
            if is_test_only(&m.attrs) {
                continue;
            }
            let name = unraw(&m.ident);
            let mut module = place.module.clone();
            module.push(name.clone());
            let inner_dir = format!("{}/{name}", place.child_dir);
            if let Some((_, inner)) = &m.content {
                let inner_place = Place { module, child_dir: inner_dir, file_dir: place.file_dir, inline: true };
                self.scan(file, path, inner, &inner_place, pending);
                continue;
            }
            let (candidates, child_dir) = match path_attr(&m.attrs) {
                // The Reference, "The path attribute": relative to the declaring file's folder, or inside an inline
                // module to that module's folder; the file then holds its sub-modules beside it, like a mod.rs.
                Some(given) => {
                    let base = if place.inline { &place.child_dir } else { place.file_dir };
                    let file_path = normalize(&format!("{base}/{given}"));
                    let dir = parent(&file_path);
                    (vec![file_path], dir)
                }
                None => (vec![format!("{inner_dir}.rs"), format!("{inner_dir}/mod.rs")], inner_dir),
            };
            pending.push(Pending { declared_in: path.to_owned(), name, module, candidates, child_dir });
        }
    }
}

/// Whether attributes put an item under `#[cfg(test)]` (or `#[cfg(all(test, …))]`), or mark it `#[test]`.
pub fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        if attr.path().is_ident("test") {
            return true;
        }
        if !attr.path().is_ident("cfg") {
            return false;
        }
        attr.parse_args::<syn::Meta>().is_ok_and(|meta| requires_test(&meta))
    })
}

fn requires_test(meta: &syn::Meta) -> bool {
    match meta {
        syn::Meta::Path(path) => path.is_ident("test"),
        syn::Meta::List(list) if list.path.is_ident("all") => list
            .parse_args_with(syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated)
            .is_ok_and(|inner| inner.iter().any(requires_test)),
        _ => false,
    }
}

/// The attributes of any item.
pub fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The name an item defines in its module, if it defines one (a `use` is not a definition).
fn item_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::ExternCrate(i) => i.rename.as_ref().map_or(&i.ident, |(_, alias)| alias),
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Macro(i) => i.ident.as_ref()?,
        syn::Item::Mod(i) => &i.ident,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(unraw(ident))
}

/// An identifier as a name (`r#type` → `type`).
pub fn unraw(ident: &syn::Ident) -> String {
    let name = ident.to_string();
    name.strip_prefix("r#").map(str::to_owned).unwrap_or(name)
}

/// The value of a `#[path = "…"]` attribute.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| match &attr.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// The folder of a `/`-separated path (`"."` for a bare name).
fn parent(path: &str) -> String {
    Path::new(path).parent().map_or_else(|| ".".to_owned(), |p| p.to_string_lossy().into_owned())
}

/// Removes `.` and `name/..` steps from a `/`-separated path.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "." | "" => {}
            ".." if parts.last().is_some_and(|last| *last != "..") => {
                parts.pop();
            }
            _ => parts.push(part),
        }
    }
    parts.join("/")
}

#[cfg(test)]
#[path = "tree_tests.rs"]
mod tests;
