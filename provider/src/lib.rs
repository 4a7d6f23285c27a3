//! terraform-provider-gpushare as a library (the binary is glue).
//!
//! Layers, after terraform-plugin-framework: [`grpc`] only decodes requests,
//! calls the protocol-free [`core`], and encodes responses; [`server`] is the
//! go-plugin side (handshake, AutoMTLS, health, controller).
pub mod checks;
pub mod core;
pub mod cty;
pub mod diag;
pub mod grpc;
pub mod logging;
pub mod msgpack;
mod plan_scope;
pub mod resource;
pub mod schema;
pub mod server;
pub mod tls;

pub mod proto {
    #![allow(clippy::all)]
    pub mod tfplugin6 {
        tonic::include_proto!("tfplugin6");
    }
    pub mod plugin {
        tonic::include_proto!("plugin");
    }
}
