//! Generates the agent API's gRPC code from `proto/agent.proto` with the vendored
//! protoc (none needs to be installed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // Build scripts are single-threaded; tonic-prost-build reads PROTOC.
    std::env::set_var("PROTOC", protoc);
    println!("cargo:rerun-if-changed=proto/agent.proto");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&["proto/agent.proto"], &["proto"])?;
    Ok(())
}
