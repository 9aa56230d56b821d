//! svc-tidy: checks of the workspace's shape that neither the compiler nor clippy makes, run over the real
//! workspace by `tests/tidy.rs` (so `cargo nextest run --workspace`, and CI, run them):
//!
//! 1. no import circle of more than two files inside a crate ([`circles`], from [`imports`]),
//! 2. no product file over 600 lines and no product function over 80 ([`lengths`]),
//! 3. the policy crates' boundaries: no axum in svc-keys, svc-limits, svc-routing, no HTTP client in svc-keys
//!    ([`boundaries`], over the resolved graph of `cargo metadata`).
//!
//! Product code is each crate's `src/`, walked from its library and binary roots through its `mod` declarations,
//! without what is under `#[cfg(test)]`; tests, benches and examples are not read. Today's offenders are listed in
//! `tests/tidy.rs` in allowlists that may only shrink ([`known`]). Nothing here changes a file or runs project code.

pub mod boundaries;
pub mod circles;
pub mod imports;
pub mod known;
pub mod lengths;
pub mod metadata;
pub mod tree;

use std::collections::BTreeMap;
use std::path::Path;

pub use circles::Circle;
pub use lengths::Length;
pub use metadata::{Metadata, MetadataError, ProductCrate};
pub use tree::{Disk, Sources, Tree, TreeError};

/// The product code of one crate: a module tree per product target (its library, each binary).
pub struct Crate {
    pub name: String,
    pub trees: Vec<Tree>,
}

impl Crate {
    /// Reads the trees of `krate`'s roots from `sources`.
    pub fn load(sources: &(impl Sources + ?Sized), krate: &ProductCrate) -> Result<Crate, TreeError> {
        let trees = krate.roots.iter().map(|root| Tree::load(sources, root)).collect::<Result<_, _>>()?;
        Ok(Crate { name: krate.name.clone(), trees })
    }

    /// The crate's import circles (of two files or more), its targets' arrows taken together.
    pub fn circles(&self) -> Vec<Circle> {
        let arrows: Vec<_> = self.trees.iter().flat_map(imports::arrows).collect();
        circles::circles(&arrows)
    }

    /// Every product file once (a file two targets share is read twice), by path.
    pub fn files(&self) -> impl Iterator<Item = &tree::SourceFile> {
        let unique: BTreeMap<&str, &tree::SourceFile> =
            self.trees.iter().flat_map(|t| &t.files).map(|f| (f.path.as_str(), f)).collect();
        unique.into_values()
    }

    /// Each product file's length in product lines.
    pub fn file_lengths(&self) -> Vec<Length> {
        self.files().map(|f| Length { name: f.path.clone(), lines: lengths::product_lines(f) }).collect()
    }

    /// Each product function's length.
    pub fn function_lengths(&self) -> Vec<Length> {
        self.files().flat_map(lengths::functions).collect()
    }
}

/// Every crate under `crates/` of the workspace at `root`, read from disk.
pub fn workspace_crates(root: &Path) -> Result<Vec<Crate>, Box<dyn std::error::Error>> {
    let metadata = Metadata::read(root, false)?;
    let disk = Disk(root.to_path_buf());
    let mut crates = Vec::new();
    for krate in metadata.product_crates() {
        crates.push(Crate::load(&disk, &krate)?);
    }
    Ok(crates)
}
