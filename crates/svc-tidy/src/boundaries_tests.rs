//! Unit tests of the crate boundaries over a fabricated `cargo metadata` answer.

#![allow(clippy::unwrap_used)]

use super::*;

/// A workspace at /w: svc-keys → svc-store (fine) and → web-kit → axum → hyper; svc-limits has axum only as a
/// dev-dependency; svc-routing does not exist; svc-tests-only is a test helper outside `crates/`.
const METADATA: &str = r#"{
  "workspace_root": "/w",
  "workspace_members": ["keys", "limits", "store", "helper"],
  "packages": [
    {"id": "keys", "name": "svc-keys", "manifest_path": "/w/crates/svc-keys/Cargo.toml", "targets": [
      {"kind": ["lib"], "src_path": "/w/crates/svc-keys/src/lib.rs"},
      {"kind": ["bin"], "src_path": "/w/crates/svc-keys/src/bin/keys.rs"},
      {"kind": ["test"], "src_path": "/w/crates/svc-keys/tests/it.rs"},
      {"kind": ["custom-build"], "src_path": "/w/crates/svc-keys/build.rs"}]},
    {"id": "limits", "name": "svc-limits", "manifest_path": "/w/crates/svc-limits/Cargo.toml", "targets": [
      {"kind": ["lib"], "src_path": "/w/crates/svc-limits/src/lib.rs"}]},
    {"id": "store", "name": "svc-store", "manifest_path": "/w/crates/svc-store/Cargo.toml", "targets": [
      {"kind": ["lib"], "src_path": "/w/crates/svc-store/src/lib.rs"}]},
    {"id": "helper", "name": "svc-tests-only", "manifest_path": "/w/tests/helper/Cargo.toml", "targets": [
      {"kind": ["lib"], "src_path": "/w/tests/helper/src/lib.rs"}]},
    {"id": "webkit", "name": "web-kit", "manifest_path": "/r/web-kit/Cargo.toml", "targets": []},
    {"id": "axum", "name": "axum", "manifest_path": "/r/axum/Cargo.toml", "targets": []},
    {"id": "hyper", "name": "hyper", "manifest_path": "/r/hyper/Cargo.toml", "targets": []}
  ],
  "resolve": {"nodes": [
    {"id": "keys", "deps": [
      {"pkg": "store", "dep_kinds": [{"kind": null}]},
      {"pkg": "webkit", "dep_kinds": [{"kind": null}]}]},
    {"id": "limits", "deps": [
      {"pkg": "store", "dep_kinds": [{"kind": null}]},
      {"pkg": "axum", "dep_kinds": [{"kind": "dev"}]}]},
    {"id": "store", "deps": []},
    {"id": "helper", "deps": []},
    {"id": "webkit", "deps": [{"pkg": "axum", "dep_kinds": [{"kind": null}]}]},
    {"id": "axum", "deps": [{"pkg": "hyper", "dep_kinds": [{"kind": null}]}]},
    {"id": "hyper", "deps": []}
  ]}
}"#;

#[test]
fn a_forbidden_package_reached_through_another_is_a_breach_with_its_chain() {
    let metadata = Metadata::parse(METADATA).unwrap();
    let found: Vec<String> = breaches(&metadata, RULES).unwrap().iter().map(|b| b.chain.join(" -> ")).collect();
    assert_eq!(found, ["svc-keys -> web-kit -> axum", "svc-keys -> web-kit -> axum -> hyper"]);
    let first = &breaches(&metadata, RULES).unwrap()[0];
    assert!(first.to_string().starts_with("svc-keys depends on axum (svc-keys -> web-kit -> axum); "), "{first}");
}

#[test]
fn a_dev_dependency_and_an_absent_crate_are_no_breach() {
    let metadata = Metadata::parse(METADATA).unwrap();
    let limits_and_routing: Vec<Rule> = RULES.iter().filter(|r| r.krate != "svc-keys").copied().collect();
    assert_eq!(breaches(&metadata, &limits_and_routing), Some(Vec::new()));
}

#[test]
fn without_a_resolved_graph_there_is_no_answer_rather_than_a_pass() {
    let mut metadata = Metadata::parse(METADATA).unwrap();
    metadata.resolve = None;
    assert!(breaches(&metadata, RULES).is_none());
}

#[test]
fn product_crates_are_those_under_crates_with_their_roots_under_src() {
    let metadata = Metadata::parse(METADATA).unwrap();
    let crates = metadata.product_crates();
    let names: Vec<&str> = crates.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["svc-keys", "svc-limits", "svc-store"]);
    assert_eq!(crates[0].roots, ["crates/svc-keys/src/bin/keys.rs", "crates/svc-keys/src/lib.rs"]);
}
