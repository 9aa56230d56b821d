//! Unit tests of the module tree over fabricated files.

#![allow(clippy::unwrap_used)]

use super::*;

fn modules(tree: &Tree) -> Vec<(String, String)> {
    tree.modules.iter().map(|(module, m)| (module.join("::"), tree.files[m.file].path.clone())).collect()
}

#[test]
fn files_are_found_as_name_rs_name_mod_rs_inline_and_by_path_attribute() {
    let files: &[(&str, &str)] = &[
        ("src/lib.rs", "mod a; mod b; mod c { mod d; } #[path = \"other/e_file.rs\"] mod e;"),
        ("src/a.rs", "mod inner;"),
        ("src/a/inner.rs", "pub fn f() {}"),
        ("src/b/mod.rs", "pub(crate) mod leaf;"),
        ("src/b/leaf.rs", "pub struct Leaf;"),
        ("src/c/d.rs", ""),
        ("src/other/e_file.rs", "mod beside;"),
        ("src/other/beside.rs", ""),
    ];
    let tree = Tree::load(files, "src/lib.rs").unwrap();
    let expected = [
        ("", "src/lib.rs"),
        ("a", "src/a.rs"),
        ("a::inner", "src/a/inner.rs"),
        ("b", "src/b/mod.rs"),
        ("b::leaf", "src/b/leaf.rs"),
        ("c", "src/lib.rs"),
        ("c::d", "src/c/d.rs"),
        ("e", "src/other/e_file.rs"),
        ("e::beside", "src/other/beside.rs"),
    ];
    let expected: Vec<(String, String)> = expected.iter().map(|(m, f)| ((*m).into(), (*f).into())).collect();
    assert_eq!(modules(&tree), expected);
    assert!(tree.modules[&vec!["a".to_owned(), "inner".to_owned()]].defs.contains("f"));
}

#[test]
fn a_module_under_cfg_test_is_not_read_even_when_its_file_is_missing() {
    let files: &[(&str, &str)] = &[(
        "src/lib.rs",
        "pub fn f() {}\n#[cfg(test)]\nmod tests;\n#[cfg(all(test, unix))]\nmod unix_tests { fn g() {} }\n",
    )];
    let tree = Tree::load(files, "src/lib.rs").unwrap();
    assert_eq!(tree.files.len(), 1);
    assert_eq!(tree.modules.len(), 1, "the inline test module is no module of the product");
    assert!(!tree.modules[&Vec::new()].defs.contains("tests"));
}

#[test]
fn cfg_test_is_told_apart_from_cfg_not_test_and_cfg_any() {
    let only = |src: &str| {
        let item: syn::ItemFn = syn::parse_str(src).unwrap();
        is_test_only(&item.attrs)
    };
    assert!(only("#[cfg(test)] fn f() {}"));
    assert!(only("#[test] fn f() {}"));
    assert!(only("#[cfg(all(unix, test))] fn f() {}"));
    assert!(!only("#[cfg(not(test))] fn f() {}"));
    assert!(!only("#[cfg(any(test, feature = \"fuzzing\"))] fn f() {}"));
    assert!(!only("#[inline] fn f() {}"));
}

#[test]
fn a_declared_module_without_a_file_is_an_error_naming_both_places() {
    let files: &[(&str, &str)] = &[("src/lib.rs", "mod gone;")];
    let error = Tree::load(files, "src/lib.rs").err().unwrap().to_string();
    assert_eq!(error, "src/lib.rs: `mod gone;` has no file (looked for src/gone.rs, src/gone/mod.rs)");
}

#[test]
fn a_binary_root_holds_its_modules_beside_it() {
    let files: &[(&str, &str)] = &[("src/bin/tool.rs", "mod part;"), ("src/bin/part.rs", "")];
    let tree = Tree::load(files, "src/bin/tool.rs").unwrap();
    assert_eq!(tree.files[1].path, "src/bin/part.rs");
}
