//! Unit tests of file and function lengths over fabricated source.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::known::length_problems;
use crate::tree::Tree;

fn file(text: &str) -> SourceFile {
    let files: &[(&str, &str)] = &[("src/lib.rs", text)];
    Tree::load(files, "src/lib.rs").unwrap().files.remove(0)
}

/// A function of `lines` lines in all (signature and closing brace included).
fn function(name: &str, lines: usize) -> String {
    let body: String = (0..lines.saturating_sub(2)).map(|i| format!("    let _x{i} = {i};\n")).collect();
    format!("pub fn {name}() {{\n{body}}}\n")
}

#[test]
fn a_file_counts_its_lines_without_its_test_items() {
    let text =
        format!("//! A.\n{}\n/// Tests.\n#[cfg(test)]\nmod tests {{\n{}}}\n", function("f", 10), function("t", 5));
    let source = file(&text);
    assert_eq!(source.lines.len(), 21);
    assert_eq!(product_lines(&source), 12, "the doc comment, attribute and module of the tests do not count");
}

#[test]
fn a_function_counts_from_its_signature_to_its_brace_without_docs_and_attributes() {
    let text = format!("/// Doc.\n/// More doc.\n#[inline]\n{}", function("f", 81));
    assert_eq!(functions(&file(&text)), [Length { name: "src/lib.rs::f".into(), lines: 81 }]);
}

#[test]
fn an_81_line_function_fires_and_an_80_line_one_does_not() {
    let long = functions(&file(&function("long", 81)));
    assert_eq!(
        length_problems("function", &long, MAX_FN_LINES, &[]),
        ["function over 80 lines: src/lib.rs::long (81 lines)"]
    );
    let fits = functions(&file(&function("fits", 80)));
    assert!(length_problems("function", &fits, MAX_FN_LINES, &[]).is_empty());
}

#[test]
fn methods_trait_defaults_and_nested_functions_are_named_by_where_they_are() {
    let text = "struct S;\n\
        impl S {\n    pub(crate) async fn new() {}\n}\n\
        impl std::fmt::Display for S {\n    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {\n        Ok(())\n    }\n}\n\
        trait T {\n    fn required(&self);\n    fn provided(&self) {\n        fn helper() {}\n    }\n}\n\
        mod inner {\n    fn deep() {}\n}\n";
    let names: Vec<(String, usize)> = functions(&file(text)).into_iter().map(|l| (l.name, l.lines)).collect();
    let expected = [
        ("src/lib.rs::S::new", 1),
        ("src/lib.rs::<S as Display>::fmt", 3),
        ("src/lib.rs::T::provided", 3),
        ("src/lib.rs::T::provided::helper", 1),
        ("src/lib.rs::inner::deep", 1),
    ];
    let expected: Vec<(String, usize)> = expected.iter().map(|(n, l)| ((*n).to_owned(), *l)).collect();
    assert_eq!(names, expected);
}

#[test]
fn closures_count_with_their_function_and_test_functions_not_at_all() {
    let text = "fn outer() {\n    let f = || {\n        1\n    };\n    f();\n}\n\
        #[cfg(test)]\nmod tests {\n    #[test]\n    fn long_test() {}\n}\n\
        struct S;\nimpl S {\n    #[cfg(test)]\n    fn for_tests() {}\n}\n";
    let found = functions(&file(text));
    assert_eq!(found, [Length { name: "src/lib.rs::outer".into(), lines: 6 }]);
}

#[test]
fn a_file_of_601_product_lines_fires_and_one_of_600_with_its_tests_below_does_not() {
    let lines = |n: usize| -> String { (0..n).map(|i| format!("const C{i}: u8 = 0;\n")).collect() };
    let over = file(&lines(601));
    let found = [Length { name: over.path.clone(), lines: product_lines(&over) }];
    assert_eq!(length_problems("file", &found, MAX_FILE_LINES, &[]), ["file over 600 lines: src/lib.rs (601 lines)"]);
    let fits = file(&format!("{}#[cfg(test)]\nmod tests {{\n{}}}\n", lines(600), lines(50)));
    let found = [Length { name: fits.path.clone(), lines: product_lines(&fits) }];
    assert!(length_problems("file", &found, MAX_FILE_LINES, &[]).is_empty(), "{found:?}");
}
