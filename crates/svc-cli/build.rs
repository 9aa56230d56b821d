//! Release builds of `svc` on x86-64 Linux place the functions `svc serve` runs together (`hot-symbols.txt`,
//! made by `bench/hot-symbols.sh`), by lld's `--symbol-ordering-file` (lld is Rust's linker there): the kernel
//! maps code in 64 KiB windows around each page that runs, so code that runs scattered through the binary keeps
//! nearly all of it resident, and placed together only what runs is (BENCHMARKS.md, peak RSS). The order changes
//! where code lies, never what it does; a listed name the binary lacks is skipped. The names are the release
//! profile's (fat LTO, whose names do not move with the code; ThinLTO's `.llvm.<hash>` names did, and a list went
//! stale at the next change): remake the list when the functions that run change much. Applied only when the
//! toolchain carries its own lld (`rust-lld`, the linker Rust uses on x86-64 Linux since 1.90);
//! `SVC_NO_SYMBOL_ORDER=1` turns it off (a build that links with another linker; set `SVC_NO_PACKED_RELOCS=1`
//! too if that linker does not know `-z pack-relative-relocs`).
//!
//! The same builds pack their relative relocations (`-z pack-relative-relocs`, DT_RELR) when the C library they
//! are built against reads them (glibc 2.36 and later; an older one would refuse to start the binary): the
//! 22,000 relocations of a position-independent `svc` take a few KiB instead of 530 KiB, which the loader reads
//! at start and which then stayed resident. Such a binary needs glibc 2.36 or later where it runs too:
//! `SVC_NO_PACKED_RELOCS=1` builds one for older machines.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether the toolchain has its own lld (`<sysroot>/lib/rustlib/<target>/bin/gcc-ld/ld.lld`).
fn has_rust_lld(target: &str) -> bool {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(out) = Command::new(rustc).args(["--print", "sysroot"]).output() else { return false };
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    sysroot.join("lib/rustlib").join(target).join("bin/gcc-ld/ld.lld").is_file()
}

fn main() {
    println!("cargo:rerun-if-changed=hot-symbols.txt");
    println!("cargo:rerun-if-env-changed=SVC_NO_SYMBOL_ORDER");
    println!("cargo:rerun-if-env-changed=SVC_NO_PACKED_RELOCS");
    let target = |key: &str| env::var(key).unwrap_or_default();
    let release_linux_lld = target("PROFILE") == "release"
        && target("CARGO_CFG_TARGET_OS") == "linux"
        && target("CARGO_CFG_TARGET_ARCH") == "x86_64"
        && target("CARGO_CFG_TARGET_ENV") == "gnu"
        && has_rust_lld(&target("TARGET"));
    if !release_linux_lld {
        return;
    }
    let list = Path::new(&target("CARGO_MANIFEST_DIR")).join("hot-symbols.txt");
    if !turned_off("SVC_NO_SYMBOL_ORDER") && list.is_file() {
        println!("cargo:rustc-link-arg-bin=svc=-Wl,--symbol-ordering-file={}", list.display());
        println!("cargo:rustc-link-arg-bin=svc=-Wl,--no-warn-symbol-ordering");
    }
    if !turned_off("SVC_NO_PACKED_RELOCS") && target("HOST") == target("TARGET") && glibc_reads_relr() {
        println!("cargo:rustc-link-arg-bin=svc=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether the environment variable `name` is set to something other than empty or `0`.
fn turned_off(name: &str) -> bool {
    env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Whether this machine's glibc reads packed relative relocations (2.36 and later): `getconf GNU_LIBC_VERSION`
/// prints `glibc 2.36`.
fn glibc_reads_relr() -> bool {
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else { return false };
    relr_version(&String::from_utf8_lossy(&out.stdout))
}

/// Whether `glibc X.Y` names 2.36 or later.
fn relr_version(text: &str) -> bool {
    let Some(version) = text.trim().strip_prefix("glibc ") else { return false };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (2, 36),
        _ => false,
    }
}
