//! Generates the gRPC server code for Terraform's plugin protocol and go-plugin's
//! controller from `proto/`, with the vendored protoc (none needs to be installed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // Build scripts are single-threaded; tonic-prost-build reads PROTOC.
    std::env::set_var("PROTOC", protoc);
    println!("cargo:rerun-if-changed=proto/tfplugin6.proto");
    println!("cargo:rerun-if-changed=proto/go_plugin.proto");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(
            &["proto/tfplugin6.proto", "proto/go_plugin.proto"],
            &["proto"],
        )?;
    Ok(())
}
