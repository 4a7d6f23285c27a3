//! terraform-provider-gpushare as a library (the binary is glue).
//!
//! Layers, after terraform-plugin-framework: [`grpc`] only decodes requests,
//! calls the protocol-free [`handler`] (one method per RPC), and encodes responses;
//! the handler reaches the engine through `bridge` (backends, one engine pass, the
//! desired set as the store holds it) and reads data sources through
//! `data_sources`; [`server`] is the go-plugin side (handshake, AutoMTLS, health,
//! controller).
mod bridge;
pub mod cty;
mod data_sources;
pub mod diag;
mod group_commit;
pub mod grpc;
pub mod handler;
pub mod logging;
pub mod msgpack;
mod plan_scope;
pub mod resource;
pub mod schema;
pub mod server;
pub mod tls;

pub mod proto {
    #![allow(clippy::all, clippy::pedantic)]
    pub mod tfplugin6 {
        tonic::include_proto!("tfplugin6");
    }
    pub mod plugin {
        tonic::include_proto!("plugin");
    }
}
