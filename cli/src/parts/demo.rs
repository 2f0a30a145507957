//! `sluice demo`: the whole promise in one run — a local clusterset, an app moved by one
//! label and a cluster drained under load — with a report and a plot.

use std::path::PathBuf;

/// The arguments of `sluice demo`.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = ".sluice/demo")]
    pub state: PathBuf,
    /// Leave the clusterset running after the report, for kubectl, until Ctrl-C.
    #[arg(long)]
    pub keep: bool,
    /// Requests per second of each consumer.
    #[arg(long, default_value_t = 100)]
    pub rate: u32,
    /// Seconds of each steady phase.
    #[arg(long, default_value_t = 6)]
    pub steady: u64,
}

/// Run the scenario; exit 1 if any request failed.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        state,
        keep,
        rate,
        steady,
    } = args;
    let ok = sluice::demo::run(sluice::demo::DemoConfig {
        state,
        keep,
        rate,
        steady: std::time::Duration::from_secs(steady),
    })
    .await?;
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
