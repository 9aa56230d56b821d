//! Unit tests of the import arrows over fabricated crates: every way a file names another, and what is no arrow.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::circles::circles;

fn load(files: &[(&str, &str)]) -> Tree {
    Tree::load(files, "src/lib.rs").unwrap()
}

/// The arrows as `from -> to` without the `src/` and `.rs`.
fn drawn(files: &[(&str, &str)]) -> Vec<String> {
    let short = |path: &str| path.trim_start_matches("src/").trim_end_matches(".rs").to_owned();
    arrows(&load(files)).iter().map(|a| format!("{} -> {}", short(&a.from), short(&a.to))).collect()
}

#[test]
fn use_crate_super_and_sub_module_paths_are_arrows() {
    let files: &[(&str, &str)] = &[
        ("src/lib.rs", "mod a; mod b; mod c; mod d;"),
        ("src/a.rs", "use crate::b::B;"),
        ("src/b.rs", "pub struct B; use super::c::{self, C};"),
        ("src/c.rs", "pub struct C; mod inner;"),
        ("src/c/inner.rs", "pub struct I; use super::super::d::*;"),
        ("src/d.rs", "pub struct D;"),
    ];
    assert_eq!(drawn(files), ["a -> b", "b -> c", "c/inner -> d"]);
}

#[test]
fn a_module_using_its_own_sub_modules_is_no_arrow_the_other_way_is() {
    let files: &[(&str, &str)] = &[
        ("src/lib.rs", "mod front; pub use front::Api;"),
        ("src/front/mod.rs", "mod messages; use self::messages::to_chat; pub enum Api {} pub fn helper() {}"),
        ("src/front/messages.rs", "pub fn to_chat() { super::helper(); }"),
    ];
    assert_eq!(drawn(files), ["front/messages -> front/mod"]);
}

#[test]
fn paths_in_code_in_functions_and_in_macro_calls_are_arrows() {
    let files: &[(&str, &str)] = &[
        ("src/lib.rs", "mod a; mod b; mod c; mod d; mod e;"),
        ("src/a.rs", "fn f() -> crate::b::B { crate::b::B }"),
        ("src/b.rs", "pub struct B; fn g() { use crate::c::C; }"),
        ("src/c.rs", "pub struct C; fn h() { let _ = format!(\"{}\", crate::d::NAME); }"),
        ("src/d.rs", "pub const NAME: &str = \"\"; fn k() { tracing::info!(x = ?super::e::E); }"),
        ("src/e.rs", "pub struct E;"),
    ];
    assert_eq!(drawn(files), ["a -> b", "b -> c", "c -> d", "d -> e"]);
}

#[test]
fn a_re_export_leads_to_the_file_that_defines_the_item() {
    let files: &[(&str, &str)] = &[
        ("src/lib.rs", "mod types; mod user; mod facade; pub use types::Config;"),
        ("src/types.rs", "pub struct Config;"),
        ("src/facade/mod.rs", "mod deep; pub use deep::*;"),
        ("src/facade/deep.rs", "pub struct Deep;"),
        ("src/user.rs", "use crate::Config; use crate::facade::Deep;"),
    ];
    assert_eq!(
        drawn(files),
        ["user -> facade/deep", "user -> types"],
        "user.rs imports through lib.rs and facade/mod.rs, and depends on neither"
    );
}

#[test]
fn other_crates_a_name_defined_here_and_test_code_draw_no_arrow() {
    let files: &[(&str, &str)] = &[
        ("src/lib.rs", "mod a; mod b; pub use serde_json::Value;"),
        (
            "src/a.rs",
            "use std::fmt; use ::b::X; use crate::Value; enum Kind { One } fn f() { Kind::One; }\n\
             #[cfg(test)] mod tests { use crate::b::B; }\n#[cfg(test)] fn helper() { crate::b::B; }",
        ),
        ("src/b.rs", "pub struct B;"),
    ];
    assert!(drawn(files).is_empty(), "{:?}", drawn(files));
}

#[test]
fn an_arrow_keeps_its_first_line_and_quotes_it() {
    let files: &[(&str, &str)] = &[
        ("src/lib.rs", "mod a; mod b;"),
        ("src/a.rs", "//! A.\n\nuse crate::b::{\n    B,\n};\nuse crate::b::C;\n"),
        ("src/b.rs", "pub struct B; pub struct C;"),
    ];
    let found = arrows(&load(files));
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].line, found[0].text.as_str()), (4, "B,"));
}

#[test]
fn three_files_in_a_loop_are_a_circle_and_two_are_allowed() {
    let files: &[(&str, &str)] = &[
        ("src/lib.rs", "mod a; mod b; mod c; mod x; mod y;"),
        ("src/a.rs", "use crate::b::B; pub struct A;"),
        ("src/b.rs", "use crate::c::C; pub struct B;"),
        ("src/c.rs", "pub struct C; fn f() { crate::a::A; }"),
        ("src/x.rs", "use super::y::Y; pub struct X;"),
        ("src/y.rs", "use super::x::X; pub struct Y;\n#[cfg(test)]\nmod tests { use crate::a::A; }"),
    ];
    let found = circles(&arrows(&load(files)));
    let shapes: Vec<(usize, bool)> = found.iter().map(|c| (c.files.len(), c.allowed())).collect();
    assert_eq!(shapes, [(3, false), (2, true)]);
    let text = found[0].to_string();
    assert!(text.contains("src/c.rs:1 -> src/a.rs: pub struct C; fn f() { crate::a::A; }"), "{text}");
}
