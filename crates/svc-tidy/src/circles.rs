//! Import circles: the strongly connected components of a crate's import graph (petgraph's Tarjan), each with the
//! arrows inside it. Two files that import each other are allowed (a type and its tests' helper, a pair that
//! splits one job); a circle of more files is a knot no one can read from the bottom up.

use crate::imports::Arrow;
use petgraph::graph::DiGraph;
use std::collections::BTreeMap;
use std::fmt;

/// The most files a circle may have.
pub const MAX_CIRCLE_FILES: usize = 2;

/// Files that import each other in a loop, with one line per arrow between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Circle {
    /// Sorted.
    pub files: Vec<String>,
    pub arrows: Vec<Arrow>,
}

impl Circle {
    /// Whether the circle is small enough to be allowed.
    pub fn allowed(&self) -> bool {
        self.files.len() <= MAX_CIRCLE_FILES
    }
}

impl fmt::Display for Circle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "a circle of {} files: {}", self.files.len(), self.files.join(", "))?;
        for arrow in &self.arrows {
            writeln!(f, "  {}:{} -> {}: {}", arrow.from, arrow.line, arrow.to, arrow.text)?;
        }
        Ok(())
    }
}

/// Every circle (of two files or more) that `arrows` draw, sorted by their files.
pub fn circles(arrows: &[Arrow]) -> Vec<Circle> {
    let mut names: Vec<&str> = arrows.iter().flat_map(|a| [a.from.as_str(), a.to.as_str()]).collect();
    names.sort_unstable();
    names.dedup();
    let index: BTreeMap<&str, usize> = names.iter().enumerate().map(|(i, name)| (*name, i)).collect();
    let edges = arrows.iter().map(|a| (index[a.from.as_str()] as u32, index[a.to.as_str()] as u32));
    let graph: DiGraph<(), ()> = DiGraph::from_edges(edges);
    let mut found: Vec<Circle> = petgraph::algo::tarjan_scc(&graph)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            let mut files: Vec<String> = component.iter().map(|i| names[i.index()].to_owned()).collect();
            files.sort();
            let inside = |a: &&Arrow| files.binary_search(&a.from).is_ok() && files.binary_search(&a.to).is_ok();
            let arrows = arrows.iter().filter(inside).cloned().collect();
            Circle { files, arrows }
        })
        .collect();
    found.sort_by(|a, b| a.files.cmp(&b.files));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrow(from: &str, to: &str) -> Arrow {
        Arrow { from: from.into(), to: to.into(), line: 1, text: format!("use crate::{to};") }
    }

    #[test]
    fn a_loop_of_three_is_one_circle_with_its_arrows() {
        let arrows = [arrow("a.rs", "b.rs"), arrow("b.rs", "c.rs"), arrow("c.rs", "a.rs"), arrow("c.rs", "d.rs")];
        let found = circles(&arrows);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].files, ["a.rs", "b.rs", "c.rs"]);
        assert_eq!(found[0].arrows.len(), 3, "the arrow out to d.rs is not part of the circle");
        assert!(!found[0].allowed());
    }

    #[test]
    fn two_files_that_import_each_other_are_allowed_and_a_line_is_no_circle() {
        let found = circles(&[arrow("a.rs", "b.rs"), arrow("b.rs", "a.rs"), arrow("b.rs", "c.rs")]);
        assert_eq!(found.len(), 1);
        assert!(found[0].allowed());
        assert!(circles(&[arrow("a.rs", "b.rs"), arrow("b.rs", "c.rs")]).is_empty());
    }

    #[test]
    fn the_report_names_every_file_and_one_line_per_arrow() {
        let found = circles(&[arrow("a.rs", "b.rs"), arrow("b.rs", "c.rs"), arrow("c.rs", "a.rs")]);
        let text = found[0].to_string();
        assert!(text.starts_with("a circle of 3 files: a.rs, b.rs, c.rs\n"), "{text}");
        assert!(text.contains("  c.rs:1 -> a.rs: use crate::a.rs;\n"), "{text}");
    }
}
