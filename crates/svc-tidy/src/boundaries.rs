//! Crate boundaries: the policy crates hold no HTTP server (issue 29), so none of them depends on axum, and
//! svc-keys holds no HTTP client either. Read from the resolved dependency graph of `cargo metadata`, so a
//! dependency through another crate counts as much as a direct one; dev-dependencies do not count (tests may
//! drive a crate over HTTP).
//!
//! A rule whose crate does not exist yet is kept and checked as soon as that crate joins the workspace.

use crate::metadata::{Metadata, Node};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;

/// A crate and the packages it must not depend on.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub krate: &'static str,
    pub forbidden: &'static [&'static str],
    /// Why, for the report.
    pub why: &'static str,
}

/// The workspace's boundaries.
pub const RULES: &[Rule] = &[
    Rule {
        krate: "svc-keys",
        forbidden: &["axum", "reqwest", "hyper"],
        why: "virtual keys and their admin rules are used by the CLI without the HTTP edge: no server, no client",
    },
    Rule { krate: "svc-limits", forbidden: &["axum"], why: "a refusal is a `Refused`, never an HTTP answer" },
    Rule { krate: "svc-routing", forbidden: &["axum"], why: "routing picks deployments; the HTTP edge is svc-gateway" },
    Rule {
        krate: "svc-front",
        forbidden: &["axum"],
        why: "front ends translate client APIs; statuses and error answers are svc-gateway's `error.rs`",
    },
];

/// A crate that depends on a package its rule forbids, and the shortest chain of packages that leads there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breach {
    pub krate: String,
    pub forbidden: String,
    pub why: String,
    /// From the crate to the forbidden package, both included.
    pub chain: Vec<String>,
}

impl fmt::Display for Breach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} depends on {} ({}); {}", self.krate, self.forbidden, self.chain.join(" -> "), self.why)
    }
}

/// Every breach of `rules` in the resolved graph of `metadata`; `None` when it was read without one (`--no-deps`).
pub fn breaches(metadata: &Metadata, rules: &[Rule]) -> Option<Vec<Breach>> {
    let resolve = metadata.resolve.as_ref()?;
    let nodes: BTreeMap<&str, &Node> = resolve.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    let names: BTreeMap<&str, &str> = metadata.packages.iter().map(|p| (p.id.as_str(), p.name.as_str())).collect();
    let mut found = Vec::new();
    for rule in rules {
        for member in metadata.members().filter(|p| p.name == rule.krate) {
            let parents = reachable(&nodes, &member.id);
            for forbidden in rule.forbidden {
                let hit = parents.keys().find(|id| names.get(**id) == Some(forbidden));
                if let Some(id) = hit {
                    let chain =
                        chain_to(&parents, id).iter().map(|id| names.get(id).unwrap_or(id).to_string()).collect();
                    found.push(Breach {
                        krate: rule.krate.to_owned(),
                        forbidden: (*forbidden).to_owned(),
                        why: rule.why.to_owned(),
                        chain,
                    });
                }
            }
        }
    }
    Some(found)
}

/// Every package `start` depends on (normal and build dependencies, at any depth), each with the package that
/// first led to it (breadth first, so the chains are shortest); `start` maps to itself.
fn reachable<'m>(nodes: &BTreeMap<&'m str, &'m Node>, start: &'m str) -> BTreeMap<&'m str, &'m str> {
    let mut parents = BTreeMap::from([(start, start)]);
    let mut queue = VecDeque::from([start]);
    while let Some(id) = queue.pop_front() {
        let Some(node) = nodes.get(id) else { continue };
        for dep in &node.deps {
            let counts = dep.dep_kinds.iter().any(|k| k.kind.as_deref() != Some("dev"));
            if counts && !parents.contains_key(dep.pkg.as_str()) {
                parents.insert(dep.pkg.as_str(), id);
                queue.push_back(dep.pkg.as_str());
            }
        }
    }
    parents
}

/// The chain from the start of `parents` to `end`.
fn chain_to<'m>(parents: &BTreeMap<&'m str, &'m str>, end: &'m str) -> Vec<&'m str> {
    let mut chain = vec![end];
    let mut at = end;
    while let Some(parent) = parents.get(at).filter(|p| **p != at) {
        chain.push(parent);
        at = parent;
    }
    chain.reverse();
    chain
}

#[cfg(test)]
#[path = "boundaries_tests.rs"]
mod tests;
