//! `sluice whoami`: who the API server says this process is (SelfSubjectReview).

use anyhow::Context;

/// The arguments of `sluice whoami`.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    pub in_cluster: bool,
}

/// Print the user and groups the API server sees.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let Args { in_cluster } = args;
    let config = if in_cluster {
        kube::Config::incluster().context("in-cluster configuration")?
    } else {
        kube::Config::infer()
            .await
            .context("client configuration")?
    };
    let client = kube::Client::try_from(config)?;
    let review: k8s_openapi::api::authentication::v1::SelfSubjectReview = client
        .request(
            http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
                .header("content-type", "application/json")
                .body(
                    br#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#
                        .to_vec(),
                )?,
        )
        .await
        .context("SelfSubjectReview")?;
    let info = review.status.and_then(|s| s.user_info).unwrap_or_default();
    println!(
        "{} {}",
        info.username.unwrap_or_default(),
        info.groups.unwrap_or_default().join(",")
    );
    Ok(())
}
