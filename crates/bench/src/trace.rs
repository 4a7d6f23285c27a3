//! The openb trace files (Alibaba cluster-trace-gpu-v2023) and their mapping
//! onto the engine's own types: a node becomes a [`HostLoad`], a pod a [`Request`].

use gpushare_core::model::{GpuMode, PlacementStrategy, TaskGpu, TaskShape};
use gpushare_core::placement::{GpuLoad, HostLoad, Request};
use std::path::{Path, PathBuf};

/// GPU memory given to every trace GPU: a pod's `gpu_milli` share becomes that
/// many MiB of GPU memory, so a GPU holds exactly 1000 thousandths.
pub const GPU_UNITS: u64 = 1000;
/// The single pool every trace node belongs to.
pub const POOL: &str = "openb";

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:1: missing column {column:?} in the header")]
    MissingColumn { path: PathBuf, column: &'static str },
    #[error("{path}:{line}: column {column:?}: {value:?} is not a non-negative integer")]
    BadNumber {
        path: PathBuf,
        line: usize,
        column: &'static str,
        value: String,
    },
    #[error("{path}:{line}: expected at least {expected} fields, found {found}")]
    ShortRow {
        path: PathBuf,
        line: usize,
        expected: usize,
        found: usize,
    },
    #[error("{path}: no rows")]
    Empty { path: PathBuf },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub cpu_milli: u32,
    pub memory_mib: u64,
    pub gpus: u32,
    pub model: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Pod {
    pub name: String,
    pub cpu_milli: u32,
    pub memory_mib: u64,
    pub num_gpu: u32,
    /// Per GPU, 0-1000.
    pub gpu_milli: u32,
    /// Allowed GPU models (empty = any).
    pub gpu_spec: Vec<String>,
}

impl Node {
    /// The node as an empty host of the `openb` pool (CPU units = CPU milli).
    pub fn host(&self) -> HostLoad {
        HostLoad {
            host_ports: Vec::new(),
            id: self.name.clone(),
            pool: POOL.to_string(),
            instance_type: format!("{}x{}", self.model, self.gpus),
            zone: None,
            gpus: (0..self.gpus)
                .map(|i| GpuLoad {
                    clients: 1,
                    max_clients: 48,
                    index: i,
                    model: self.model.clone(),
                    memory_mib: GPU_UNITS,
                    used_memory_mib: 0,
                    used_compute_percent: 0,
                    mode: GpuMode::Idle,
                    tasks: 0,
                })
                .collect(),
            cpu_units: self.cpu_milli,
            used_cpu_units: 0,
            memory_mib: self.memory_mib,
            used_memory_mib: 0,
            accepting: true,
            mps_ok: true,
            services: Vec::new(),
        }
    }
}

impl Pod {
    /// GPU request in thousandths of a GPU.
    pub fn gpu_request(&self) -> u64 {
        u64::from(self.num_gpu) * u64::from(self.gpu_milli)
    }

    /// The pod as a task: `num_gpu = 1, gpu_milli < 1000` is an MPS task holding
    /// `gpu_milli` of the GPU's memory and `gpu_milli / 10` percent of its compute
    /// (rounded down, so compute never binds before memory); a full share is
    /// `num_gpu` whole GPUs; no GPU is a CPU-only task.
    pub fn request(&self, key: String) -> Request {
        let gpu = if self.num_gpu == 0 || self.gpu_milli == 0 {
            TaskGpu::None
        } else if self.num_gpu == 1 && u64::from(self.gpu_milli) < GPU_UNITS {
            TaskGpu::Mps {
                clients: 1,
                memory_mib: u64::from(self.gpu_milli),
                compute_percent: (self.gpu_milli / 10) as u8,
                capped: true,
            }
        } else {
            TaskGpu::Whole {
                count: self.num_gpu,
            }
        };
        Request {
            host_ports: Vec::new(),
            key,
            service: "openb".to_string(),
            pool: POOL.to_string(),
            shape: TaskShape {
                cpu_units: self.cpu_milli,
                memory_mib: self.memory_mib,
                gpu,
            },
            strategy: PlacementStrategy::Binpack,
            distinct_host: false,
            instance_types: Vec::new(),
            gpu_models: self.gpu_spec.clone(),
            // The trace's `gpu_milli` is a share of the GPU, as in the FGD paper:
            // reserved. The compute share is rounded down from the memory share,
            // so it never binds before memory and the figures are the same either way.
            reserve_compute: true,
        }
    }
}

struct Table<'a> {
    path: &'a Path,
    header: Vec<&'a str>,
    rows: Vec<(usize, Vec<&'a str>)>,
}

impl<'a> Table<'a> {
    fn parse(path: &'a Path, text: &'a str) -> Result<Table<'a>, TraceError> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let Some((_, head)) = lines.next() else {
            return Err(TraceError::Empty {
                path: path.to_path_buf(),
            });
        };
        let header = head.trim().split(',').collect();
        let rows = lines
            .map(|(i, l)| (i + 1, l.trim_end_matches('\r').split(',').collect()))
            .collect();
        Ok(Table { path, header, rows })
    }
    fn col(&self, name: &'static str) -> Result<usize, TraceError> {
        self.header
            .iter()
            .position(|h| *h == name)
            .ok_or(TraceError::MissingColumn {
                path: self.path.to_path_buf(),
                column: name,
            })
    }
    fn field(&self, line: usize, row: &[&'a str], at: usize) -> Result<&'a str, TraceError> {
        row.get(at).copied().ok_or(TraceError::ShortRow {
            path: self.path.to_path_buf(),
            line,
            expected: at + 1,
            found: row.len(),
        })
    }
    fn num<T: std::str::FromStr>(
        &self,
        line: usize,
        row: &[&'a str],
        at: usize,
        column: &'static str,
    ) -> Result<T, TraceError> {
        let v = self.field(line, row, at)?;
        v.trim().parse().map_err(|_| TraceError::BadNumber {
            path: self.path.to_path_buf(),
            line,
            column,
            value: v.to_string(),
        })
    }
}

pub fn parse_nodes(path: &Path, text: &str) -> Result<Vec<Node>, TraceError> {
    let t = Table::parse(path, text)?;
    let (sn, cpu, mem, gpu, model) = (
        t.col("sn")?,
        t.col("cpu_milli")?,
        t.col("memory_mib")?,
        t.col("gpu")?,
        t.col("model")?,
    );
    let mut out = Vec::with_capacity(t.rows.len());
    for (line, row) in &t.rows {
        out.push(Node {
            name: t.field(*line, row, sn)?.to_string(),
            cpu_milli: t.num(*line, row, cpu, "cpu_milli")?,
            memory_mib: t.num(*line, row, mem, "memory_mib")?,
            gpus: t.num(*line, row, gpu, "gpu")?,
            model: t.field(*line, row, model)?.trim().to_string(),
        });
    }
    if out.is_empty() {
        return Err(TraceError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(out)
}

pub fn parse_pods(path: &Path, text: &str) -> Result<Vec<Pod>, TraceError> {
    let t = Table::parse(path, text)?;
    let (name, cpu, mem, ngpu, milli) = (
        t.col("name")?,
        t.col("cpu_milli")?,
        t.col("memory_mib")?,
        t.col("num_gpu")?,
        t.col("gpu_milli")?,
    );
    let spec = t.col("gpu_spec").ok();
    let mut out = Vec::with_capacity(t.rows.len());
    for (line, row) in &t.rows {
        let gpu_spec = match spec {
            Some(c) => row
                .get(c)
                .map(|s| {
                    s.split('|')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
            None => Vec::new(),
        };
        out.push(Pod {
            name: t.field(*line, row, name)?.to_string(),
            cpu_milli: t.num(*line, row, cpu, "cpu_milli")?,
            memory_mib: t.num(*line, row, mem, "memory_mib")?,
            num_gpu: t.num(*line, row, ngpu, "num_gpu")?,
            gpu_milli: t.num(*line, row, milli, "gpu_milli")?,
            gpu_spec,
        });
    }
    if out.is_empty() {
        return Err(TraceError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(out)
}

pub fn load_nodes(path: &Path) -> Result<Vec<Node>, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_nodes(path, &text)
}

pub fn load_pods(path: &Path) -> Result<Vec<Pod>, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_pods(path, &text)
}

/// The trace variant's name from its file name (`openb_pod_list_default.csv` -> `default`).
pub fn variant_name(path: &Path) -> String {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("trace");
    stem.strip_prefix("openb_pod_list_")
        .unwrap_or(stem)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_map_onto_engine_tasks() {
        let pods = parse_pods(
            Path::new("p.csv"),
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\na,4000,8192,1,460,\nb,12000,16384,2,1000,V100M16|V100M32\nc,1000,512,0,0,\n",
        )
        .unwrap();
        let r: Vec<Request> = pods.iter().map(|p| p.request(p.name.clone())).collect();
        assert_eq!(
            r[0].shape.gpu,
            TaskGpu::Mps {
                clients: 1,
                memory_mib: 460,
                compute_percent: 46,
                capped: true
            }
        );
        assert_eq!(r[1].shape.gpu, TaskGpu::Whole { count: 2 });
        assert_eq!(
            r[1].gpu_models,
            vec!["V100M16".to_string(), "V100M32".to_string()]
        );
        assert_eq!(r[2].shape.gpu, TaskGpu::None);
        assert_eq!(
            (
                pods[0].gpu_request(),
                pods[1].gpu_request(),
                pods[2].gpu_request()
            ),
            (460, 2000, 0)
        );
    }

    #[test]
    fn bad_rows_name_file_line_and_column() {
        let e = parse_pods(
            Path::new("p.csv"),
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,2,1,500\nb,x,2,1,500\n",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.csv:3: column \"cpu_milli\": \"x\" is not a non-negative integer"
        );
        let e =
            parse_nodes(Path::new("n.csv"), "sn,cpu_milli,memory_mib,gpu\nn,1,2,3\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "n.csv:1: missing column \"model\" in the header"
        );
        let e = parse_pods(
            Path::new("p.csv"),
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,2\n",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.csv:2: expected at least 4 fields, found 3"
        );
    }

    #[test]
    fn variant_names() {
        assert_eq!(
            variant_name(Path::new("/x/openb_pod_list_gpuspec20.csv")),
            "gpuspec20"
        );
    }
}
