//! Generates the etcd v3 client code Sluice's etcd backend uses (the KV and Watch
//! services and their messages) from etcd's API protos, so that building Sluice needs no
//! `protoc`. Usage: `cargo run -- PROTO_ROOT OUT_DIR` (see README.md).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let (Some(root), Some(out)) = (args.next(), args.next()) else {
        return Err("usage: sluice-etcd-codegen PROTO_ROOT OUT_DIR".into());
    };
    let root = PathBuf::from(root);
    let files = [
        "etcd/api/authpb/auth.proto",
        "etcd/api/etcdserverpb/rpc.proto",
        "etcd/api/mvccpb/kv.proto",
    ]
    .map(|f| root.join(f));
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(true)
        .out_dir(out)
        .compile_protos(&files, &[root])?;
    Ok(())
}
