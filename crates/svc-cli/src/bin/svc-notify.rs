//! `svc-notify`: emit one fleet event from a script or a hook (spec 6.3). Everything is in
//! `svc_cli::notify`; this file only hands over the exit code.

fn main() -> std::process::ExitCode {
    svc_cli::notify::main()
}
