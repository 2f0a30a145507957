//! `sluice mover`: the `sluice/mover` image that carries a claim's data on a move — `serve`
//! on the source cluster, `pull` on the target (the syncers start both; see
//! `sluice_mover`).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use sluice_mover::Pass;

use crate::process::shutdown_signal;

/// The arguments of `sluice mover`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Mode,
}

#[derive(clap::Subcommand)]
pub enum Mode {
    /// Serve the volume at --dir read-only: its manifest and its files.
    Serve {
        #[arg(long)]
        dir: PathBuf,
        /// Where to listen (default: $POD_IP, else every address, port 8080).
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// Make the volume at --dir hold what the source at --from holds; prints a JSON
    /// report; exit status 1 if it does not (run it again: it resumes).
    Pull {
        #[arg(long)]
        dir: PathBuf,
        /// The source's `host:port`.
        #[arg(long)]
        from: String,
        /// bulk (while the source's app runs) or final (after it stopped; checked whole).
        #[arg(long, default_value = "final")]
        pass: Pass,
    },
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Mode::Serve { dir, listen } => {
            let listen = listen.unwrap_or_else(|| {
                let ip = std::env::var("POD_IP")
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into());
                SocketAddr::new(ip, 8080)
            });
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("binding {listen}"))?;
            eprintln!("mover: serving {} on {listen}", dir.display());
            let (tx, rx) = tokio::sync::watch::channel(false);
            let served = tokio::spawn(sluice_mover::serve(dir, listener, rx));
            shutdown_signal().await?;
            let _ = tx.send(true);
            served.await??;
            Ok(())
        }
        Mode::Pull { dir, from, pass } => {
            eprintln!(
                "mover: pulling {from} into {} ({pass:?} pass)",
                dir.display()
            );
            let pulled = sluice_mover::pull(&from, &dir, pass).await?;
            println!("{}", serde_json::to_string(&pulled)?);
            Ok(())
        }
    }
}
