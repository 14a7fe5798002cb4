//! rtmgr: the command line — flags and glue.
//!
//! **What it is.** One module per subcommand under `cmd/`: each parses its
//! flags into a library config type, calls the library (rtmgr-linux's
//! partition, balancer and daemon, rtmgr-lab's engines and reports,
//! rtmgr-sim), prints a human table and writes the versioned JSON report where `--out`/`--json` say.
//!
//! **Key decision.** Safe code only, and no engine, no cgroup layout, no journal
//! record lives here, so everything the CLI does is also a library call.
//! Exit codes: 0 success, 1 failure at run time, 2 bad input (nothing
//! changed), 130 interrupted with a partial report.

mod cmd;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "rtmgr",
    version,
    about = "A real-time resource manager for stock Linux"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Is this machine fit for real time? Each item with a verdict.
    Status(cmd::status::StatusArgs),
    /// The machine live: RT CPU latency, steal, IRQs, reservations (feature `top`; `--once --json` always).
    Top(cmd::top::TopArgs),
    /// Split the CPUs into RT and NRT sets, or undo that exactly.
    #[command(subcommand)]
    Partition(cmd::partition::PartitionCmd),
    /// Run a program (or reclassify a running one) in an ARTiS class.
    Run(cmd::run::RunArgs),
    /// Measure latency, execution-time variation, periodicity, budgets, the cost of real time, resource settings.
    #[command(subcommand)]
    Measure(cmd::measure::MeasureCmd),
    /// The main job: stock vs shield vs idle-guests vs balanced latency under load, in one interleaved run.
    Evaluate(cmd::evaluate::EvaluateArgs),
    /// lbµ: run a load-balancing scenario (ARTiS Fig. 4) under one or more balancers, simulated or live.
    Lb(cmd::lb::LbArgs),
    /// Live asymmetric balancer: lend RT CPUs to ordinary tasks under a latency guard.
    Balance(cmd::balance::BalanceArgs),
    /// (internal) A built-in load process, started by rtmgr itself.
    #[command(name = rtmgr_lab::measure::builtin::WORKER_COMMAND, hide = true)]
    LoadWorker(cmd::load_worker::LoadWorkerArgs),
    /// (internal) One piece of `rtmgr measure cost`'s work, started by rtmgr itself.
    #[command(name = rtmgr_lab::cost::micro::WORKER_COMMAND, hide = true)]
    CostWorker(cmd::measure::cost::CostWorkerArgs),
    /// The resource manager: own the RT CPUs, admit and grant reservations on request.
    Serve(cmd::serve::ServeArgs),
    /// Ask the daemon for W every P, then run CMD under it: `reserve --period 4ms --budget 1ms -- CMD`; or put a running process under it: `--pid PID`.
    Reserve(cmd::reserve::ReserveArgs),
    /// List the daemon's reservations (root: all; others: their own).
    Reservations(cmd::reserve::ListArgs),
    /// Give a reservation back.
    Release(cmd::reserve::ReleaseArgs),
    /// Check a task set (rtmgr TOML or rt-app JSON) against the RT CPUs, granting nothing.
    Admit(cmd::admit::AdmitArgs),
    /// Real time or real fast? McKenney's decision flow, answered from this machine's facts.
    Advise(cmd::advise::AdviseArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::manuals::CompletionsArgs),
    /// (internal) Write the man pages into a directory, for packaging.
    #[command(name = cmd::manuals::GEN_MAN_COMMAND, hide = true)]
    GenMan(cmd::manuals::GenManArgs),
}

fn main() -> ExitCode {
    rtmgr_linux::launch::default_sigpipe();
    cmd::init_logging();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Status(a) => cmd::status::run(a),
        Command::Top(a) => cmd::top::run(a),
        Command::Partition(c) => cmd::partition::run(c),
        Command::Run(a) => cmd::run::run(a),
        Command::Measure(c) => cmd::measure::run(c),
        Command::Evaluate(a) => cmd::evaluate::run(a),
        Command::Lb(a) => cmd::lb::run(a),
        Command::Balance(a) => cmd::balance::run(a),
        Command::LoadWorker(a) => cmd::load_worker::run(a),
        Command::CostWorker(a) => cmd::measure::cost::worker(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Reserve(a) => cmd::reserve::reserve(a),
        Command::Reservations(a) => cmd::reserve::list(a),
        Command::Release(a) => cmd::reserve::release(a),
        Command::Admit(a) => cmd::admit::run(a),
        Command::Advise(a) => cmd::advise::run(a),
        Command::Completions(a) => cmd::manuals::completions(a, Cli::command()),
        Command::GenMan(a) => cmd::manuals::gen_man(a, Cli::command()),
    };
    cmd::finish(result)
}
