//! `sluice kubeconfig`: a kubeconfig for a logical cluster, a syncer or a component.

use std::path::PathBuf;

use anyhow::Context;

/// The arguments of `sluice kubeconfig`.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = ".sluice/control")]
    pub data_dir: PathBuf,
    /// Logical cluster path, e.g. `root:shop`, or `*` for every logical cluster (admin).
    #[arg(long, default_value = "root")]
    pub workspace: String,
    /// Instead: the identity of the syncer of this physical cluster (a client
    /// certificate that reads only what is placed on it).
    #[arg(long, conflicts_with = "workspace")]
    pub syncer: Option<String>,
    /// Instead: the identity of a part of the clusterset, `dataplane`, `dns` or `mcs`
    /// (a client certificate that reads the registry of clusters, and Ingresses where
    /// that part serves them).
    #[arg(long, conflicts_with_all = ["workspace", "syncer"])]
    pub component: Option<sluice_control::rbac::clusterset::Component>,
    /// The server's URL (`https://host:port`), for a directory of `sluice pki`;
    /// by default the `server.url` the server wrote into --data-dir.
    #[arg(long)]
    pub server: Option<String>,
}

/// Print the kubeconfig.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        data_dir,
        workspace,
        syncer,
        component,
        server,
    } = args;
    let source = sluice_control::KubeconfigSource {
        dir: &data_dir,
        server: server.as_deref(),
    };
    match (syncer, component) {
        (Some(cluster), _) => {
            let cluster = sluice_api::ClusterName::new(cluster);
            print!("{}", sluice_control::syncer_kubeconfig(&source, &cluster)?);
        }
        (None, Some(part)) => {
            print!("{}", sluice_control::component_kubeconfig(&source, part)?);
        }
        (None, None) => {
            let path: sluice_control::KubeconfigScope = workspace.parse().context("--workspace")?;
            print!("{}", sluice_control::kubeconfig_for(&source, &path)?);
        }
    }
    Ok(())
}
