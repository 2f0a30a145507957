//! `sluice`: one binary, a subcommand per part. This file parses the arguments, sets up
//! the process once (parent watch, rustls' provider, the runtime) and calls the part;
//! each part's wiring is in `parts/`, its work in its own crate.

mod drain;
mod parent;
mod parts;
mod process;

use clap::{Parser, Subcommand};

/// mimalloc rather than glibc's malloc: the tunnels keep many 64 KiB buffers in flight,
/// and glibc gave their memory back to the kernel and faulted it in again on every round
/// (8% of a tunnel pair's CPU in page faults). Built without transparent huge pages, which
/// would add ~5 MiB to every process's idle RSS (docs/benchmarks.md, issue 42).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Transparent multi-cluster networking for Kubernetes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The whole promise in one run: a local clusterset, a sample app in logical cluster
    /// `root:shop` on `east`, consumers in `west` (HTTP/1.1, HTTP/2, gRPC, TCP streams), a
    /// move to `west` by one label, a drain of `east`; live progress, a report and a plot
    /// (`<state>/demo.svg`, `.png`, `demo.json`). Exit status 0 only if no request failed.
    Demo(parts::demo::Args),
    /// Run the logical-cluster API server.
    Control(parts::control::Args),
    /// The live console: a local web page following clusters, namespaces, moves, drains
    /// and traffic share; moves, cordons and drains with the kubeconfig's identity. Prints
    /// its URL (with its access token) on a line `console: URL`.
    Console(parts::console::Args),
    /// Make a control plane's credentials (CA, ServiceAccount signing key, admin token)
    /// in a directory, for `sluice control --pki-dir` and
    /// `sluice kubeconfig`. What is there already is kept.
    Pki(parts::pki::Args),
    /// Run a local clusterset.
    Dev(parts::dev::Args),
    /// The node agent and controllers of a local cluster.
    Node(parts::node::Args),
    /// The `sluice/echo` test image: HTTP/1.1, h2c and gRPC echo on $ECHO_HTTP_PORT (8080),
    /// TCP echo on $ECHO_TCP_PORT (9000), bound to $POD_IP.
    Echo,
    /// The `sluice/loadgen` test image: constant-rate load; every failure counted with its
    /// reason; a line per second on stderr; a JSON report on stdout (also when SIGINT or
    /// SIGTERM ends it early); exit 1 if any failed.
    Loadgen(parts::loadgen::Args),
    /// The `sluice/mover` image: serve a claim's files with their checksums, or pull them
    /// into another claim (how a claim's data follows a move).
    Mover(parts::mover::Args),
    /// The clusterset DNS server: `clusterset.local` (MCS DNS specification 1.0.0) from
    /// ServiceImports and MCS EndpointSlices, `cluster.local` for local clusters, everything
    /// else forwarded.
    Dns(parts::dns::Args),
    /// The L4/L7 proxy. Either a configuration file (YAML; reloaded on change and on
    /// SIGHUP without dropping a connection) or the quick mode for one service.
    Proxy(parts::proxy::Args),
    /// East-west tunnels between clusters' proxies and gateways.
    Tunnel(parts::tunnel::Args),
    /// Multi-Cluster Services.
    /// The Multi-Cluster Services controller (`sluice mcs --control KUBECONFIG`), or
    /// `sluice mcs crds`.
    #[command(args_conflicts_with_subcommands = true)]
    Mcs(parts::mcs::Args),
    /// The syncer of one physical cluster: copies what is placed on it (label
    /// `state.sluice.dev/<cluster>`) from every logical cluster of the control plane down
    /// to the cluster, and reverts drift.
    Syncer(parts::syncer::Args),
    /// Cordon a physical cluster and move every namespace off it (make-before-break, a
    /// few at a time); `--wait` follows it until nothing runs there.
    Drain(parts::drain::Args),
    /// Undo `sluice drain` (or a cordon): the cluster takes new placements again.
    Uncordon(parts::uncordon::Args),
    /// Ask the API server who this process is (SelfSubjectReview), as `kubectl auth
    /// whoami` does: through the in-cluster configuration (a Pod's ServiceAccount token)
    /// with `--in-cluster`, else a kubeconfig (`$KUBECONFIG`, `~/.kube/config`) or the
    /// in-cluster configuration, whichever is there. Prints the user and its groups.
    Whoami(parts::whoami::Args),
    /// Print a kubeconfig for a logical cluster of a control plane.
    Kubeconfig(parts::kubeconfig::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    parent::watch();
    // One TLS provider for every part: the API server, clients, tunnels.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let threads = match &cli.command {
        Command::Dns(args) => args.threads,
        Command::Proxy(args) => args.workers,
        _ => None,
    };
    let runtime = match threads {
        Some(1) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
        Some(n) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n.max(1))
            .enable_all()
            .build()?,
        None => tokio::runtime::Runtime::new()?,
    };
    runtime.block_on(run(cli.command))
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Demo(args) => parts::demo::run(args).await,
        Command::Control(args) => parts::control::run(args).await,
        Command::Console(args) => parts::console::run(args).await,
        Command::Pki(args) => parts::pki::run(args).await,
        Command::Dev(args) => parts::dev::run(args).await,
        Command::Node(args) => parts::node::run(args).await,
        Command::Echo => parts::echo::run().await,
        Command::Loadgen(args) => parts::loadgen::run(args).await,
        Command::Mover(args) => parts::mover::run(args).await,
        Command::Dns(args) => parts::dns::run(args).await,
        Command::Proxy(args) => parts::proxy::run(args).await,
        Command::Tunnel(args) => parts::tunnel::run(args).await,
        Command::Mcs(args) => parts::mcs::run(args).await,
        Command::Syncer(args) => parts::syncer::run(args).await,
        Command::Drain(args) => parts::drain::run(args).await,
        Command::Uncordon(args) => parts::uncordon::run(args).await,
        Command::Whoami(args) => parts::whoami::run(args).await,
        Command::Kubeconfig(args) => parts::kubeconfig::run(args).await,
    }
}
