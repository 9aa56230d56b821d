//! The tidy checks over the real workspace (what each checks: the crate's doc), with today's offenders in
//! allowlists that may only shrink: an entry that no longer matches what is found fails the test, so a mended
//! offender must leave its list, and nothing new may join one. Each test names every offender it finds, with the
//! lines that make it one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use svc_tidy::boundaries::{breaches, RULES};
use svc_tidy::known::{circle_problems, length_problems};
use svc_tidy::lengths::{MAX_FILE_LINES, MAX_FN_LINES};
use svc_tidy::{workspace_crates, Crate, Metadata};

/// Import circles of more than two files that exist today, each by its exact set of files.
const KNOWN_CIRCLES: &[&[&str]] = &[];

/// Product functions over 80 lines today, as `file::Type::name`, each with the length it may not exceed.
const KNOWN_LONG_FNS: &[(&str, usize)] = &[];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the workspace root")
}

fn crates() -> Vec<Crate> {
    let crates = workspace_crates(&root()).unwrap_or_else(|e| panic!("cannot read the workspace: {e}"));
    assert!(crates.iter().any(|c| c.name == "svc-gateway"), "the crates under crates/ were not found");
    crates
}

fn assert_none(problems: Vec<String>) {
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn no_import_circle_of_more_than_two_files() {
    let found: Vec<_> = crates().iter().flat_map(Crate::circles).collect();
    assert_none(circle_problems(&found, KNOWN_CIRCLES));
}

#[test]
fn no_product_file_over_600_lines() {
    let found: Vec<_> = crates().iter().flat_map(Crate::file_lengths).collect();
    assert_none(length_problems("file", &found, MAX_FILE_LINES, &[]));
}

#[test]
fn no_product_function_over_80_lines() {
    let found: Vec<_> = crates().iter().flat_map(Crate::function_lengths).collect();
    assert_none(length_problems("function", &found, MAX_FN_LINES, KNOWN_LONG_FNS));
}

/// The most lines of product code the HTTP edge may hold: the policy lives in svc-keys, svc-limits and svc-routing.
const MAX_GATEWAY_LINES: usize = 9_000;

#[test]
fn the_gateway_stays_an_edge() {
    let crates = crates();
    let gateway = crates.iter().find(|c| c.name == "svc-gateway").expect("svc-gateway is a workspace crate");
    let lines: usize = gateway.file_lengths().iter().map(|l| l.lines).sum();
    assert!(
        lines < MAX_GATEWAY_LINES,
        "svc-gateway holds {lines} lines of product code, the most is {MAX_GATEWAY_LINES}"
    );
}

#[test]
fn policy_crates_keep_their_boundaries() {
    let metadata = Metadata::read(&root(), true).unwrap_or_else(|e| panic!("{e}"));
    let found = breaches(&metadata, RULES).expect("cargo metadata without --no-deps has a resolved graph");
    assert_none(found.iter().map(ToString::to_string).collect());
}
