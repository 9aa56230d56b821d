//! The test helpers as a user runs them: `--help` answers, a wrong argument is a usage error (no backtrace), and
//! `--port` is where they listen.
#![allow(clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HELPERS: [&str; 2] = [env!("CARGO_BIN_EXE_svc-fake-upstream"), env!("CARGO_BIN_EXE_svc-fake-anthropic")];

#[test]
fn help_answers_and_a_wrong_argument_is_a_usage_error() {
    for bin in HELPERS {
        let help = Command::new(bin).arg("--help").output().expect("runs");
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(help.status.success(), "{bin} --help: {help:?}");
        assert!(text.contains("--port"), "{bin} --help names --port: {text}");
        let wrong = Command::new(bin).arg("--nonsense").env("RUST_BACKTRACE", "1").output().expect("runs");
        let err = String::from_utf8_lossy(&wrong.stderr);
        assert_eq!(wrong.status.code(), Some(2), "{bin}: {err}");
        assert!(err.contains("--nonsense") && !err.contains("backtrace"), "{bin}: {err}");
    }
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

#[test]
fn each_helper_listens_on_the_port_it_is_given() {
    for (bin, flag) in [(HELPERS[0], "--port"), (HELPERS[1], "--port")] {
        let port = free_port();
        let mut child =
            Command::new(bin).args([flag, &port.to_string()]).stderr(Stdio::null()).spawn().expect("starts");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut up = false;
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                up = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(up, "{bin} listens on 127.0.0.1:{port}");
    }
}
