//! The workspace as `cargo metadata --format-version 1` describes it: the crates under `crates/`, their product
//! targets' root files, and (when asked for with dependencies) the resolved dependency graph.
//!
//! Read with serde_json into the few fields used here, rather than with the `cargo_metadata` crate: one
//! dependency less, and the format's version 1 is stable.

use serde::Deserialize;
use std::path::Path;
use std::process::Command;

/// Why `cargo metadata` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("cannot run `{cargo} metadata`: {source}")]
    Run { cargo: String, source: std::io::Error },
    #[error("`{cargo} metadata` failed: {stderr}")]
    Failed { cargo: String, stderr: String },
    #[error("`cargo metadata` wrote what is not its format 1: {0}")]
    Format(#[from] serde_json::Error),
}

/// What this crate reads of `cargo metadata`'s answer.
#[derive(Debug, Deserialize)]
pub struct Metadata {
    pub packages: Vec<Package>,
    pub workspace_members: Vec<String>,
    pub workspace_root: String,
    /// Present unless `--no-deps` was given.
    pub resolve: Option<Resolve>,
}

#[derive(Debug, Deserialize)]
pub struct Package {
    pub id: String,
    pub name: String,
    pub manifest_path: String,
    pub targets: Vec<Target>,
}

#[derive(Debug, Deserialize)]
pub struct Target {
    pub kind: Vec<String>,
    pub src_path: String,
}

#[derive(Debug, Deserialize)]
pub struct Resolve {
    pub nodes: Vec<Node>,
}

/// A package in the resolved graph and what it depends on.
#[derive(Debug, Deserialize)]
pub struct Node {
    pub id: String,
    pub deps: Vec<NodeDep>,
}

#[derive(Debug, Deserialize)]
pub struct NodeDep {
    pub pkg: String,
    pub dep_kinds: Vec<DepKind>,
}

/// `kind` is `null` for a normal dependency, else `"dev"` or `"build"`.
#[derive(Debug, Deserialize)]
pub struct DepKind {
    pub kind: Option<String>,
}

/// A crate under `crates/` and the root files of its product targets (library, binaries), relative to the
/// workspace root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductCrate {
    pub name: String,
    pub roots: Vec<String>,
}

/// Target kinds that are product code (not tests, benches, examples or build scripts).
const PRODUCT_KINDS: &[&str] = &["lib", "rlib", "dylib", "cdylib", "staticlib", "proc-macro", "bin"];

impl Metadata {
    /// Runs `cargo metadata` for the workspace at `root`: with the resolved dependencies, or `--no-deps`.
    /// Uses the `cargo` that runs the tests (`$CARGO`), else the one on the path.
    pub fn read(root: &Path, with_deps: bool) -> Result<Metadata, MetadataError> {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let mut command = Command::new(&cargo);
        command.args(["metadata", "--format-version", "1", "--locked"]).current_dir(root);
        if !with_deps {
            command.arg("--no-deps");
        }
        let output = command.output().map_err(|source| MetadataError::Run { cargo: cargo.clone(), source })?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
            return Err(MetadataError::Failed { cargo, stderr });
        }
        Ok(serde_json::from_slice(&output.stdout)?)
    }

    /// Reads `cargo metadata`'s JSON answer.
    pub fn parse(json: &str) -> Result<Metadata, MetadataError> {
        Ok(serde_json::from_str(json)?)
    }

    /// The workspace's crates under `crates/`, sorted by name, each with its product roots under its `src/`.
    pub fn product_crates(&self) -> Vec<ProductCrate> {
        let root = Path::new(&self.workspace_root);
        let mut crates: Vec<ProductCrate> = self
            .members()
            .filter_map(|package| {
                let dir = Path::new(&package.manifest_path).parent()?;
                let relative = dir.strip_prefix(root).ok()?;
                if !relative.starts_with("crates") {
                    return None;
                }
                let src = dir.join("src");
                let mut roots: Vec<String> = package
                    .targets
                    .iter()
                    .filter(|t| t.kind.iter().any(|k| PRODUCT_KINDS.contains(&k.as_str())))
                    .filter(|t| Path::new(&t.src_path).starts_with(&src))
                    .filter_map(|t| Path::new(&t.src_path).strip_prefix(root).ok())
                    .map(|p| p.to_string_lossy().replace('\\', "/"))
                    .collect();
                roots.sort();
                Some(ProductCrate { name: package.name.clone(), roots })
            })
            .collect();
        crates.sort_by(|a, b| a.name.cmp(&b.name));
        crates
    }

    /// The workspace's own packages.
    pub fn members(&self) -> impl Iterator<Item = &Package> {
        self.packages.iter().filter(|p| self.workspace_members.contains(&p.id))
    }
}
