//! The gRPC layer: decode the request, call [`Handler`], encode the answer. One
//! function per RPC; RPCs not declared in our proto answer UNIMPLEMENTED.

use crate::cty::{Type, Value};
use crate::diag::{Diag, PathStep, Severity};
use crate::handler::Handler;
use crate::proto::tfplugin6 as pb;
use crate::proto::tfplugin6::provider_server::Provider;
use crate::{msgpack, schema};
use std::sync::Arc;
use tonic::{Request, Response, Status};

#[derive(Clone)]
pub struct ProviderService {
    core: Arc<Handler>,
}

impl ProviderService {
    pub fn new(core: Arc<Handler>) -> Self {
        Self { core }
    }
}

fn path_proto(path: &[PathStep]) -> pb::AttributePath {
    use pb::attribute_path::step::Selector;
    pb::AttributePath {
        steps: path
            .iter()
            .map(|s| pb::attribute_path::Step {
                selector: Some(match s {
                    PathStep::Attr(a) => Selector::AttributeName(a.clone()),
                    PathStep::Index(i) => Selector::ElementKeyInt(*i),
                    PathStep::Key(k) => Selector::ElementKeyString(k.clone()),
                }),
            })
            .collect(),
    }
}

fn diags_proto(diags: Vec<Diag>) -> Vec<pb::Diagnostic> {
    diags
        .into_iter()
        .map(|d| pb::Diagnostic {
            severity: match d.severity {
                Severity::Error => pb::diagnostic::Severity::Error as i32,
                Severity::Warning => pb::diagnostic::Severity::Warning as i32,
            },
            summary: d.summary,
            detail: d.detail,
            attribute: d.path.as_deref().map(path_proto),
        })
        .collect()
}

/// Decodes a DynamicValue (msgpack preferred, JSON accepted); an absent one is null.
fn decode(v: Option<&pb::DynamicValue>, ty: &Type, what: &str) -> Result<Value, Diag> {
    let Some(v) = v else { return Ok(Value::Null) };
    if !v.msgpack.is_empty() {
        return msgpack::decode(&v.msgpack, ty)
            .map_err(|e| Diag::from_error(format!("Cannot decode the {what}"), &e));
    }
    if !v.json.is_empty() {
        let j: serde_json::Value = serde_json::from_slice(&v.json)
            .map_err(|e| Diag::error(format!("Cannot decode the {what}"), e.to_string()))?;
        return Value::from_json(&j, ty)
            .map_err(|e| Diag::from_error(format!("Cannot decode the {what}"), &e));
    }
    Ok(Value::Null)
}

fn encode(v: &Value, ty: &Type) -> Result<pb::DynamicValue, Diag> {
    msgpack::encode(v, ty)
        .map(|msgpack| pb::DynamicValue {
            msgpack,
            json: vec![],
        })
        .map_err(|e| Diag::from_error("Cannot encode a value", &e))
}

fn resource_type(type_name: &str) -> Result<&'static Type, Diag> {
    schema::managed_type(type_name).ok_or_else(|| {
        Diag::error(
            "Unknown resource type",
            format!("this provider has no resource type {type_name:?}"),
        )
    })
}

fn data_type(type_name: &str) -> Result<&'static Type, Diag> {
    schema::data_source_type(type_name).ok_or_else(|| {
        Diag::error(
            "Unknown data source",
            format!("this provider has no data source {type_name:?}"),
        )
    })
}

type Rpc<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl Provider for ProviderService {
    async fn get_metadata(
        &self,
        _r: Request<pb::get_metadata::Request>,
    ) -> Rpc<pb::get_metadata::Response> {
        Ok(Response::new(pb::get_metadata::Response {
            server_capabilities: Some(schema::server_capabilities()),
            diagnostics: vec![],
            data_sources: [schema::INSTANCE_TYPE_DATA, schema::PLACEMENTS_DATA]
                .iter()
                .map(|t| pb::get_metadata::DataSourceMetadata {
                    type_name: t.to_string(),
                })
                .collect(),
            resources: schema::managed_type_names()
                .into_iter()
                .map(|type_name| pb::get_metadata::ResourceMetadata { type_name })
                .collect(),
        }))
    }

    async fn get_provider_schema(
        &self,
        _r: Request<pb::get_provider_schema::Request>,
    ) -> Rpc<pb::get_provider_schema::Response> {
        Ok(Response::new(schema::provider_schema_response()))
    }

    async fn validate_provider_config(
        &self,
        r: Request<pb::validate_provider_config::Request>,
    ) -> Rpc<pb::validate_provider_config::Response> {
        let r = r.into_inner();
        let diags = match decode(
            r.config.as_ref(),
            schema::provider_type(),
            "provider configuration",
        ) {
            Ok(cfg) => self.core.validate_provider_config(&cfg),
            Err(d) => vec![d],
        };
        Ok(Response::new(pb::validate_provider_config::Response {
            diagnostics: diags_proto(diags),
        }))
    }

    async fn configure_provider(
        &self,
        r: Request<pb::configure_provider::Request>,
    ) -> Rpc<pb::configure_provider::Response> {
        let r = r.into_inner();
        let diags = match decode(
            r.config.as_ref(),
            schema::provider_type(),
            "provider configuration",
        ) {
            Ok(cfg) => self.core.configure(&cfg).await,
            Err(d) => vec![d],
        };
        Ok(Response::new(pb::configure_provider::Response {
            diagnostics: diags_proto(diags),
        }))
    }

    async fn validate_resource_config(
        &self,
        r: Request<pb::validate_resource_config::Request>,
    ) -> Rpc<pb::validate_resource_config::Response> {
        let r = r.into_inner();
        let diags = match resource_type(&r.type_name)
            .and_then(|t| decode(r.config.as_ref(), t, "configuration"))
        {
            Ok(cfg) => self.core.validate_resource(&r.type_name, &cfg),
            Err(d) => vec![d],
        };
        Ok(Response::new(pb::validate_resource_config::Response {
            diagnostics: diags_proto(diags),
        }))
    }

    async fn validate_data_resource_config(
        &self,
        r: Request<pb::validate_data_resource_config::Request>,
    ) -> Rpc<pb::validate_data_resource_config::Response> {
        let r = r.into_inner();
        let diags = match data_type(&r.type_name)
            .and_then(|t| decode(r.config.as_ref(), t, "configuration"))
        {
            Ok(cfg) => self.core.validate_data_source(&r.type_name, &cfg),
            Err(d) => vec![d],
        };
        Ok(Response::new(pb::validate_data_resource_config::Response {
            diagnostics: diags_proto(diags),
        }))
    }

    async fn upgrade_resource_state(
        &self,
        r: Request<pb::upgrade_resource_state::Request>,
    ) -> Rpc<pb::upgrade_resource_state::Response> {
        let r = r.into_inner();
        let json = r
            .raw_state
            .as_ref()
            .map(|s| s.json.clone())
            .unwrap_or_default();
        let result = resource_type(&r.type_name)
            .map_err(|d| vec![d])
            .and_then(|t| {
                self.core
                    .upgrade_state(&r.type_name, r.version, &json)
                    .and_then(|v| encode(&v, t).map_err(|d| vec![d]))
            });
        Ok(Response::new(match result {
            Ok(v) => pb::upgrade_resource_state::Response {
                upgraded_state: Some(v),
                diagnostics: vec![],
            },
            Err(d) => pb::upgrade_resource_state::Response {
                upgraded_state: None,
                diagnostics: diags_proto(d),
            },
        }))
    }

    async fn read_resource(
        &self,
        r: Request<pb::read_resource::Request>,
    ) -> Rpc<pb::read_resource::Response> {
        let r = r.into_inner();
        let ty = match resource_type(&r.type_name) {
            Ok(t) => t,
            Err(d) => {
                return Ok(Response::new(pb::read_resource::Response {
                    new_state: r.current_state,
                    diagnostics: diags_proto(vec![d]),
                    private: r.private,
                }))
            }
        };
        let (state, mut diags) = match decode(r.current_state.as_ref(), ty, "current state") {
            Ok(cur) => self.core.read_resource(&r.type_name, &cur).await,
            Err(d) => (Value::Null, vec![d]),
        };
        let new_state = match encode(&state, ty) {
            Ok(v) => Some(v),
            Err(d) => {
                diags.push(d);
                r.current_state
            }
        };
        Ok(Response::new(pb::read_resource::Response {
            new_state,
            diagnostics: diags_proto(diags),
            private: r.private,
        }))
    }

    async fn plan_resource_change(
        &self,
        r: Request<pb::plan_resource_change::Request>,
    ) -> Rpc<pb::plan_resource_change::Response> {
        let r = r.into_inner();
        let fail = |d: Diag| pb::plan_resource_change::Response {
            planned_state: None,
            requires_replace: vec![],
            planned_private: vec![],
            diagnostics: diags_proto(vec![d]),
        };
        let ty = match resource_type(&r.type_name) {
            Ok(t) => t,
            Err(d) => return Ok(Response::new(fail(d))),
        };
        let decoded = decode(r.prior_state.as_ref(), ty, "prior state").and_then(|prior| {
            let proposed = decode(r.proposed_new_state.as_ref(), ty, "proposed new state")?;
            let config = decode(r.config.as_ref(), ty, "configuration")?;
            Ok((prior, proposed, config))
        });
        let (prior, proposed, config) = match decoded {
            Ok(v) => v,
            Err(d) => return Ok(Response::new(fail(d))),
        };
        let planned = self
            .core
            .plan_resource_change(&r.type_name, &prior, &proposed, &config)
            .await;
        let planned_state = match encode(&planned.planned, ty) {
            Ok(v) => v,
            Err(d) => return Ok(Response::new(fail(d))),
        };
        Ok(Response::new(pb::plan_resource_change::Response {
            planned_state: Some(planned_state),
            requires_replace: planned
                .requires_replace
                .iter()
                .map(|p| path_proto(p))
                .collect(),
            planned_private: r.prior_private,
            diagnostics: diags_proto(planned.diags),
        }))
    }

    async fn apply_resource_change(
        &self,
        r: Request<pb::apply_resource_change::Request>,
    ) -> Rpc<pb::apply_resource_change::Response> {
        let r = r.into_inner();
        let fail = |d: Diag, state: Option<pb::DynamicValue>| pb::apply_resource_change::Response {
            new_state: state,
            private: vec![],
            diagnostics: diags_proto(vec![d]),
        };
        let ty = match resource_type(&r.type_name) {
            Ok(t) => t,
            Err(d) => return Ok(Response::new(fail(d, r.prior_state))),
        };
        let decoded = decode(r.prior_state.as_ref(), ty, "prior state").and_then(|prior| {
            Ok((
                prior,
                decode(r.planned_state.as_ref(), ty, "planned state")?,
            ))
        });
        let (prior, planned) = match decoded {
            Ok(v) => v,
            Err(d) => return Ok(Response::new(fail(d, r.prior_state))),
        };
        let (state, mut diags) = self
            .core
            .apply_resource_change(&r.type_name, &prior, &planned)
            .await;
        let new_state = match encode(&state, ty) {
            Ok(v) => Some(v),
            Err(d) => {
                diags.push(d);
                r.prior_state
            }
        };
        Ok(Response::new(pb::apply_resource_change::Response {
            new_state,
            private: r.planned_private,
            diagnostics: diags_proto(diags),
        }))
    }

    async fn import_resource_state(
        &self,
        r: Request<pb::import_resource_state::Request>,
    ) -> Rpc<pb::import_resource_state::Response> {
        let r = r.into_inner();
        let ty = match resource_type(&r.type_name) {
            Ok(t) => t,
            Err(d) => {
                return Ok(Response::new(pb::import_resource_state::Response {
                    imported_resources: vec![],
                    diagnostics: diags_proto(vec![d]),
                }))
            }
        };
        let (state, mut diags) = self.core.import(&r.type_name, &r.id).await;
        let mut imported = vec![];
        if !state.is_null() {
            match encode(&state, ty) {
                Ok(v) => imported.push(pb::import_resource_state::ImportedResource {
                    type_name: r.type_name.clone(),
                    state: Some(v),
                    private: vec![],
                }),
                Err(d) => diags.push(d),
            }
        }
        Ok(Response::new(pb::import_resource_state::Response {
            imported_resources: imported,
            diagnostics: diags_proto(diags),
        }))
    }

    async fn read_data_source(
        &self,
        r: Request<pb::read_data_source::Request>,
    ) -> Rpc<pb::read_data_source::Response> {
        let r = r.into_inner();
        let ty = match data_type(&r.type_name) {
            Ok(t) => t,
            Err(d) => {
                return Ok(Response::new(pb::read_data_source::Response {
                    state: None,
                    diagnostics: diags_proto(vec![d]),
                }))
            }
        };
        let (state, mut diags) = match decode(r.config.as_ref(), ty, "configuration") {
            Ok(cfg) => self.core.read_data_source(&r.type_name, &cfg).await,
            Err(d) => (Value::Null, vec![d]),
        };
        let state = if state.is_null() {
            None
        } else {
            match encode(&state, ty) {
                Ok(v) => Some(v),
                Err(d) => {
                    diags.push(d);
                    None
                }
            }
        };
        Ok(Response::new(pb::read_data_source::Response {
            state,
            diagnostics: diags_proto(diags),
        }))
    }

    async fn stop_provider(
        &self,
        _r: Request<pb::stop_provider::Request>,
    ) -> Rpc<pb::stop_provider::Response> {
        self.core.stop();
        Ok(Response::new(pb::stop_provider::Response {
            error: String::new(),
        }))
    }
}
