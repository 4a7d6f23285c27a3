//! Generates the etcd v3 gRPC client from `proto/` (gpushare's own description of the
//! part of etcd's API it calls) with the vendored protoc: building needs no protoc
//! installed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // Build scripts are single-threaded; tonic-prost-build reads PROTOC.
    std::env::set_var("PROTOC", protoc);
    let files = ["proto/rpc.proto", "proto/kv.proto", "proto/auth.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .build_transport(false)
        .compile_protos(&files, &["proto"])?;
    Ok(())
}
