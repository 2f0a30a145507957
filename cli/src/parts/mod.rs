//! One module per subcommand: its arguments and how it runs — build the part from its
//! configuration, serve until a stop signal, shut it down.

pub mod console;
pub mod control;
pub mod demo;
pub mod dev;
pub mod dns;
pub mod drain;
pub mod echo;
pub mod kubeconfig;
pub mod loadgen;
pub mod mcs;
pub mod mover;
pub mod node;
pub mod pki;
pub mod proxy;
pub mod syncer;
pub mod tunnel;
pub mod uncordon;
pub mod whoami;
