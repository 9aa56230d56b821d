//! `svc`: the gateway and its administration commands.
//!
//! Exit codes: 0 success; 1 error (invalid configuration, store failure, refused operation); 2 command-line
//! usage error (clap's convention). A closed stdout (`svc spend | head`) ends a command quietly with 0.

use clap::Parser;
use std::process::ExitCode;
use svc_cli::cli::{Cli, Command, ConfigCommand, TeamsCommand};
use svc_cli::commands::{self, Exit};

// mimalloc: fewer and cheaper allocations on the request path than the system allocator, measured in
// BENCHMARKS.md.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `svc serve` starts logging once its config is read (`server.log_format`); other commands log as text.
    let _logging =
        (!matches!(cli.command, Command::Serve(_))).then(|| commands::init_logging(svc_config::LogFormat::Text));
    if let Command::Config(ConfigCommand::Check) = cli.command {
        return commands::config::check(cli.config.as_deref());
    }
    // One worker thread per core the process may use; `TOKIO_WORKER_THREADS` sets another number.
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("svc: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let config = cli.config.as_deref();
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => commands::serve::run(config, args).await,
            Command::Keys(args) => commands::keys::run(config, args.url.as_deref(), args.command).await,
            Command::Teams(args) => match args.command {
                TeamsCommand::List => commands::teams::run(config).await,
                TeamsCommand::Change(change) => commands::team_changes::run(config, args.url.as_deref(), change).await,
            },
            Command::Reload { url } => commands::reload::run(config, url.as_deref()).await,
            Command::Fleet(cmd) => commands::fleet::run(config, cmd).await,
            Command::Spend(args) => commands::spend::run(config, args).await,
            Command::Hooks(cmd) => {
                // Hooks work without any config file; a config only supplies the timeout and fleet names.
                let loaded = match svc_config::find_config(config) {
                    Some(_) => Some(commands::load_config(config)?),
                    None => None,
                };
                exit_code(svc_cli::notify::hooks_cmd::run(cmd, loaded.as_ref()).await)
            }
            Command::Events(cmd) => {
                // The push block alone: secrets other parts of the file name need not be set.
                let push = commands::load_push(config)?;
                svc_cli::notify::events_cmd::run(cmd, push.as_ref())
                    .await
                    .map_err(|e| Exit { code: e.exit_code(), message: e.to_string() }.into())
            }
            Command::Config(_) => Ok(()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of the output went away (`svc spend | head`): nothing is wrong, as for ripgrep.
        Err(e) if commands::is_stdout_closed(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let code = e.downcast_ref::<Exit>().map(|x| x.code).unwrap_or(1);
            let message = format!("{e:#}");
            if !message.is_empty() {
                eprintln!("svc: {message}");
            }
            ExitCode::from(code)
        }
    }
}

/// Carries a subcommand's own exit status through `main`.
fn exit_code(code: ExitCode) -> anyhow::Result<()> {
    if code == ExitCode::SUCCESS {
        Ok(())
    } else {
        Err(Exit { code: 1, message: String::new() }.into())
    }
}
