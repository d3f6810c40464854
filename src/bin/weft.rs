//! `weft`, the operator CLI for a weft node.

use std::process::ExitCode;

use clap::Parser;
use weft_bin::cli::{self, Cli, Command, Outcome};
use weft_bin::logging;

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(false, "warn");
    if let Command::Completions { shell } = cli.command {
        cli::completions(shell);
        return ExitCode::SUCCESS;
    }
    let json_out = cli.json;
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weft: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::run(cli)) {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::Absent) => ExitCode::from(1),
        Err(e) => {
            if json_out {
                eprintln!("{}", e.to_json());
            } else {
                eprintln!("weft: {e}");
            }
            ExitCode::from(1)
        }
    }
}
