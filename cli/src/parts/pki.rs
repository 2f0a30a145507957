//! `sluice pki`: a control plane's credentials (CA, ServiceAccount signing key, admin
//! token) made in a directory.

use std::path::PathBuf;

/// The arguments of `sluice pki`.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    pub out: PathBuf,
}

/// Make the credentials and print their paths.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let Args { out } = args;
    sluice_control::pki::Pki::create_credentials(&out)?;
    for f in sluice_control::pki::CREDENTIAL_FILES {
        println!("{}", out.join(f).display());
    }
    Ok(())
}
