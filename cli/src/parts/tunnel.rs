//! `sluice tunnel`: east-west tunnel certificates (`sluice tunnel certs`).

use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum TunnelCommand {
    /// Issue tunnel certificates: a clusterset CA (created in OUT unless present) and,
    /// per cluster, a certificate with `spiffe://<clusterset>/cluster/<name>/proxy`.
    Certs {
        #[arg(long, default_value = "sluice")]
        clusterset: String,
        #[arg(long, value_delimiter = ',', required = true)]
        clusters: Vec<String>,
        #[arg(long)]
        out: PathBuf,
        /// Validity of the cluster certificates.
        #[arg(long, default_value_t = 365)]
        days: i64,
    },
}

/// The arguments of `sluice tunnel`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: TunnelCommand,
}

/// Issue the certificates.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        command:
            TunnelCommand::Certs {
                clusterset,
                clusters,
                out,
                days,
            },
    } = args;
    for id in sluice_dataplane::tunnel::certs::issue(&out, &clusterset, &clusters, days)? {
        println!("{}: {id}", id.cluster());
    }
    Ok(())
}
