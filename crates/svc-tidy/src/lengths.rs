//! Lengths of product code: of a file, and of a function.
//!
//! - A file's length is its lines less those of its `#[cfg(test)]` items (a `mod tests { … }` at the bottom, with
//!   its attributes and doc comments); at most [`MAX_FILE_LINES`].
//! - A function's length is the lines from its signature's first token (`pub`, `async`, `fn` …) to its closing
//!   brace; doc comments and attributes above it do not count, the closures and nested items inside it do. Every
//!   function with a body counts: free functions, methods of an `impl`, a trait's default methods; at most
//!   [`MAX_FN_LINES`]. A function is named `file::Type::name` (`file::<Type as Trait>::name` in a trait impl,
//!   `file::outer::inner` for a function inside another, inline modules by their names).

use crate::tree::{is_test_only, item_attrs, unraw, SourceFile};
use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::visit::Visit;

/// The most lines a product file may have.
pub const MAX_FILE_LINES: usize = 600;
/// The most lines a product function may have.
pub const MAX_FN_LINES: usize = 80;

/// A file or function and its length in lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Length {
    pub name: String,
    pub lines: usize,
}

/// The lines of `file` that are product code: all of them less the `#[cfg(test)]` items'.
pub fn product_lines(file: &SourceFile) -> usize {
    file.lines.len().saturating_sub(test_lines(&file.ast.items))
}

fn test_lines(items: &[syn::Item]) -> usize {
    items
        .iter()
        .map(|item| {
            let attrs = item_attrs(item);
            if is_test_only(attrs) {
                let start = attrs.iter().map(|a| a.pound_token.span.start().line).min();
                let end = item.span().end().line;
                return end + 1 - start.unwrap_or(end).min(end);
            }
            match item {
                syn::Item::Mod(syn::ItemMod { content: Some((_, inner)), .. }) => test_lines(inner),
                _ => 0,
            }
        })
        .sum()
}

/// Every function with a body in `file`'s product code, with its length.
pub fn functions(file: &SourceFile) -> Vec<Length> {
    let mut fns = Fns { prefix: vec![file.path.clone()], found: Vec::new() };
    fns.visit_file(&file.ast);
    fns.found
}

struct Fns {
    /// The file, then the enclosing modules, types and functions.
    prefix: Vec<String>,
    found: Vec<Length>,
}

impl Fns {
    /// Records a function and visits its body under its name.
    fn record(&mut self, name: &syn::Ident, start: Span, sig: &syn::Signature, block: &syn::Block) {
        let start = [start, sig.fn_token.span].iter().map(|s| s.start().line).min().unwrap_or(0);
        let end = block.brace_token.span.close().end().line;
        self.prefix.push(unraw(name));
        self.found.push(Length { name: self.prefix.join("::"), lines: end + 1 - start.min(end) });
        self.visit_block(block);
        self.prefix.pop();
    }

    fn nested(&mut self, name: String, visit: impl FnOnce(&mut Self)) {
        self.prefix.push(name);
        visit(self);
        self.prefix.pop();
    }
}

/// Where a function's signature starts: its visibility, or failing that its first qualifier, or `fn`.
fn start_of(vis: Option<&syn::Visibility>, defaultness: Option<Span>, sig: &syn::Signature) -> Span {
    let vis = vis.and_then(|vis| match vis {
        syn::Visibility::Public(p) => Some(p.span),
        syn::Visibility::Restricted(r) => Some(r.pub_token.span),
        syn::Visibility::Inherited => None,
    });
    let qualifiers = [
        sig.constness.map(|t| t.span),
        sig.asyncness.map(|t| t.span),
        sig.unsafety.map(|t| t.span),
        sig.abi.as_ref().map(|abi| abi.extern_token.span),
    ];
    [vis, defaultness].into_iter().chain(qualifiers).flatten().next().unwrap_or(sig.fn_token.span)
}

/// How an `impl` block's functions are named: `Type`, or `<Type as Trait>`.
fn impl_name(item: &syn::ItemImpl) -> String {
    let ty = type_name(&item.self_ty);
    match &item.trait_ {
        Some((_, path, _)) => {
            let trait_name = path.segments.last().map_or_else(String::new, |s| unraw(&s.ident));
            format!("<{ty} as {trait_name}>")
        }
        None => ty,
    }
}

fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map_or_else(String::new, |s| unraw(&s.ident)),
        syn::Type::Reference(r) => type_name(&r.elem),
        _ => "_".to_owned(),
    }
}

impl<'ast> Visit<'ast> for Fns {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !is_test_only(item_attrs(item)) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        self.nested(unraw(&item.ident), |fns| syn::visit::visit_item_mod(fns, item));
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        self.nested(impl_name(item), |fns| syn::visit::visit_item_impl(fns, item));
    }

    fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
        self.nested(unraw(&item.ident), |fns| syn::visit::visit_item_trait(fns, item));
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        self.record(&item.sig.ident, start_of(Some(&item.vis), None, &item.sig), &item.sig, &item.block);
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test_only(&item.attrs) {
            let start = start_of(Some(&item.vis), item.defaultness.map(|d| d.span), &item.sig);
            self.record(&item.sig.ident, start, &item.sig, &item.block);
        }
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if let (Some(block), false) = (&item.default, is_test_only(&item.attrs)) {
            self.record(&item.sig.ident, start_of(None, None, &item.sig), &item.sig, block);
        }
    }
}

#[cfg(test)]
#[path = "lengths_tests.rs"]
mod tests;
