//! Import circles: the strongly connected components of a crate's import graph (Tarjan's algorithm), each with the
//! arrows inside it. Two files that import each other are allowed (a type and its tests' helper, a pair that
//! splits one job); a circle of more files is a knot no one can read from the bottom up.

use crate::imports::Arrow;
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
    let mut next = vec![Vec::new(); names.len()];
    for arrow in arrows {
        next[index[arrow.from.as_str()]].push(index[arrow.to.as_str()]);
    }
    let mut found: Vec<Circle> = Tarjan::run(&next)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            let mut files: Vec<String> = component.iter().map(|i| names[*i].to_owned()).collect();
            files.sort();
            let inside = |a: &&Arrow| files.binary_search(&a.from).is_ok() && files.binary_search(&a.to).is_ok();
            let arrows = arrows.iter().filter(inside).cloned().collect();
            Circle { files, arrows }
        })
        .collect();
    found.sort_by(|a, b| a.files.cmp(&b.files));
    found
}

/// Tarjan's strongly connected components over a graph given as adjacency lists.
struct Tarjan<'g> {
    next: &'g [Vec<usize>],
    order: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    counter: usize,
    components: Vec<Vec<usize>>,
}

impl<'g> Tarjan<'g> {
    fn run(next: &'g [Vec<usize>]) -> Vec<Vec<usize>> {
        let n = next.len();
        let mut t = Tarjan {
            next,
            order: vec![None; n],
            low: vec![0; n],
            on_stack: vec![false; n],
            stack: Vec::new(),
            counter: 0,
            components: Vec::new(),
        };
        for v in 0..n {
            if t.order[v].is_none() {
                t.visit(v);
            }
        }
        t.components
    }

    fn visit(&mut self, v: usize) {
        self.order[v] = Some(self.counter);
        self.low[v] = self.counter;
        self.counter += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for &w in &self.next[v] {
            match self.order[w] {
                None => {
                    self.visit(w);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(order) if self.on_stack[w] => self.low[v] = self.low[v].min(order),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.order[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            self.components.push(component);
        }
    }
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
