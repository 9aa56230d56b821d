//! The allowlists of what a check finds today and tolerates until it is mended: they may only shrink.
//!
//! An entry that no longer matches what the check finds is itself a failure (the mend is to delete or lower it),
//! so a list never keeps room for a new offender; a finding not on its list fails as it would without one.

use crate::circles::Circle;
use crate::lengths::Length;

/// The problems of `found` circles against `known` ones (each given by its exact set of files): a circle over
/// the limit that is not known, and a known circle that is not found as exactly those files.
pub fn circle_problems(found: &[Circle], known: &[&[&str]]) -> Vec<String> {
    let same = |circle: &Circle, files: &[&str]| {
        let mut files: Vec<&str> = files.to_vec();
        files.sort_unstable();
        circle.files.iter().map(String::as_str).eq(files)
    };
    let mut problems: Vec<String> = found
        .iter()
        .filter(|circle| !circle.allowed() && !known.iter().any(|files| same(circle, files)))
        .map(|circle| format!("import circle: {circle}"))
        .collect();
    for files in known {
        if !found.iter().any(|circle| same(circle, files)) {
            problems.push(format!(
                "a known circle is gone or changed ({}): delete its entry, or replace it with what is found now",
                files.join(", ")
            ));
        }
    }
    problems
}

/// The problems of `found` lengths against `max` and the `known` ceilings: one over `max` that is not known or
/// longer than its ceiling, and a known one that is no longer over `max` (or no longer exists).
pub fn length_problems(what: &str, found: &[Length], max: usize, known: &[(&str, usize)]) -> Vec<String> {
    let mut problems = Vec::new();
    for length in found.iter().filter(|l| l.lines > max) {
        match known.iter().find(|(name, _)| *name == length.name) {
            None => problems.push(format!("{what} over {max} lines: {} ({} lines)", length.name, length.lines)),
            Some((_, ceiling)) if length.lines > *ceiling => problems.push(format!(
                "{what} grew past its known length: {} ({} lines, known at {ceiling})",
                length.name, length.lines
            )),
            Some(_) => {}
        }
    }
    for (name, _) in known {
        if !found.iter().any(|l| l.name == *name && l.lines > max) {
            problems.push(format!("{what} {name} is no longer over {max} lines (or is gone): delete its entry"));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::imports::Arrow;

    fn circle(files: &[&str]) -> Circle {
        let arrows = files
            .iter()
            .zip(files.iter().cycle().skip(1))
            .map(|(from, to)| Arrow { from: (*from).into(), to: (*to).into(), line: 1, text: String::new() })
            .collect();
        Circle { files: files.iter().map(|f| (*f).to_owned()).collect(), arrows }
    }

    fn length(name: &str, lines: usize) -> Length {
        Length { name: name.into(), lines }
    }

    #[test]
    fn a_known_circle_passes_by_its_exact_files_in_any_order() {
        let found = [circle(&["a.rs", "b.rs", "c.rs"]), circle(&["d.rs", "e.rs"])];
        assert!(circle_problems(&found, &[&["c.rs", "a.rs", "b.rs"]]).is_empty());
    }

    #[test]
    fn an_unknown_circle_fails_and_a_two_file_one_does_not() {
        let found = [circle(&["a.rs", "b.rs", "c.rs"]), circle(&["d.rs", "e.rs"])];
        let problems = circle_problems(&found, &[]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("import circle: a circle of 3 files: a.rs, b.rs, c.rs"), "{problems:?}");
    }

    #[test]
    fn a_known_circle_that_shrank_or_went_fails_so_the_list_only_shrinks() {
        let shrunk = circle_problems(&[circle(&["a.rs", "b.rs", "c.rs"])], &[&["a.rs", "b.rs", "c.rs", "d.rs"]]);
        assert_eq!(shrunk.len(), 2, "the smaller circle is unknown and the entry is stale: {shrunk:?}");
        let gone = circle_problems(&[], &[&["a.rs", "b.rs", "c.rs"]]);
        assert_eq!(gone.len(), 1);
        assert!(gone[0].contains("is gone or changed"), "{gone:?}");
    }

    #[test]
    fn lengths_pass_up_to_their_ceiling_and_fail_past_it_or_when_unknown() {
        let found = [length("a.rs::f", 90), length("a.rs::g", 120), length("a.rs::h", 85), length("a.rs::ok", 80)];
        let problems = length_problems("function", &found, 80, &[("a.rs::f", 95), ("a.rs::g", 100)]);
        assert_eq!(
            problems,
            [
                "function grew past its known length: a.rs::g (120 lines, known at 100)",
                "function over 80 lines: a.rs::h (85 lines)",
            ]
        );
    }

    #[test]
    fn a_known_length_that_is_mended_or_gone_fails_so_the_list_only_shrinks() {
        let found = [length("a.rs::f", 80)];
        let problems = length_problems("function", &found, 80, &[("a.rs::f", 95), ("a.rs::gone", 100)]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems.iter().all(|p| p.ends_with("delete its entry")), "{problems:?}");
    }
}
