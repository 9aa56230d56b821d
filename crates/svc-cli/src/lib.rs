//! The `svc` and `svc-notify` command lines: argument parsing, exit codes and glue between the library
//! crates. No rule of the product lives here.

pub mod cli;
pub mod commands;
pub mod notify;
