//! Reading what `nvidia-smi` prints on today's machines: the compute processes
//! (`--query-compute-apps=... --format=csv`), the GPUs (`--query-gpu=... --format=csv`)
//! and the per-process SM use over time (`nvidia-smi pmon`). Each file is recognised
//! by its header, so the files of a machine may be named as the user likes.

use super::EvalError;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where a row came from: `file:line` (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loc {
    pub file: String,
    pub line: usize,
}

impl std::fmt::Display for Loc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// One GPU of `--query-gpu=index,uuid,name,memory.total`.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuRow {
    pub index: Option<u32>,
    pub uuid: Option<String>,
    pub name: String,
    pub at: Loc,
}

/// One row of `--query-compute-apps`: a process on a GPU at one sample.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcRow {
    /// The sample it belongs to (one `nvidia-smi` run, or one timestamp), per machine.
    pub sample: usize,
    pub gpu_uuid: Option<String>,
    pub gpu_name: Option<String>,
    pub pid: u32,
    pub process_name: String,
    /// MiB; `None` where nvidia-smi printed `[N/A]` or `[Not Supported]`.
    pub used_mib: Option<u64>,
    pub at: Loc,
}

/// One row of `nvidia-smi pmon`: a process's SM use over one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct PmonRow {
    pub pid: u32,
    /// `None` where pmon printed `-` (no sample in the interval).
    pub sm: Option<u32>,
}

/// What one machine's files hold.
#[derive(Debug, Default)]
pub struct Machine {
    pub name: String,
    pub gpus: Vec<GpuRow>,
    pub procs: Vec<ProcRow>,
    pub pmon: Vec<PmonRow>,
    /// How many compute-apps samples (nvidia-smi runs or timestamps) were read.
    pub samples: usize,
}

/// The machines under `paths`: a directory holding sample files is one machine (named
/// after it); a directory holding directories is one machine per directory.
pub fn read_machines(paths: &[PathBuf]) -> Result<Vec<Machine>, EvalError> {
    let mut machines = vec![];
    for p in paths {
        let (files, dirs) = list(p)?;
        if !files.is_empty() {
            machines.push(read_machine(p, &files)?);
        }
        for d in dirs {
            let (files, _) = list(&d)?;
            if !files.is_empty() {
                machines.push(read_machine(&d, &files)?);
            }
        }
    }
    if machines.is_empty() {
        return Err(EvalError::NoSamples(
            paths.iter().map(|p| p.display().to_string()).collect(),
        ));
    }
    machines.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = machines.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(EvalError::SameMachine(w[0].name.clone()));
    }
    Ok(machines)
}

/// The plain files (not hidden) and the directories of `dir`, sorted.
fn list(dir: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>), EvalError> {
    let read_err = |source| EvalError::Read {
        file: dir.display().to_string(),
        source,
    };
    let mut files = vec![];
    let mut dirs = vec![];
    for entry in std::fs::read_dir(dir).map_err(read_err)? {
        let path = entry.map_err(read_err)?.path();
        let hidden = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            dirs.push(path);
        } else if path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    dirs.sort();
    Ok((files, dirs))
}

fn read_machine(dir: &Path, files: &[PathBuf]) -> Result<Machine, EvalError> {
    let name = dir
        .canonicalize()
        .ok()
        .as_deref()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string());
    let mut m = Machine {
        name,
        ..Machine::default()
    };
    for f in files {
        let file = f.display().to_string();
        let text = std::fs::read_to_string(f).map_err(|source| EvalError::Read {
            file: file.clone(),
            source,
        })?;
        read_file(&mut m, &file, &text)?;
    }
    Ok(m)
}

/// Read one file of machine `m`, of the kind its first line says.
pub fn read_file(m: &mut Machine, file: &str, text: &str) -> Result<(), EvalError> {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let fields: Vec<String> = first.split(',').map(header_name).collect();
    let has = |n: &str| fields.iter().any(|f| f == n);
    if first.trim_start().starts_with('#') && first.contains("pid") {
        parse_pmon(m, file, text)
    } else if has("pid") && has("process_name") {
        parse_compute_apps(m, file, text)
    } else if has("name") && (has("uuid") || has("index")) {
        parse_gpus(m, file, text)
    } else {
        Err(EvalError::Parse {
            at: Loc { file: file.to_string(), line: 1 },
            message: "not nvidia-smi output evaluate reads: expected the CSV of --query-compute-apps (pid, process_name, used_memory), the CSV of --query-gpu (index, uuid, name) or `nvidia-smi pmon` output".to_string(),
        })
    }
}

/// A CSV header field without its unit: `used_gpu_memory [MiB]` -> `used_gpu_memory`.
fn header_name(field: &str) -> String {
    let f = field.trim();
    let f = f.split_once('[').map_or(f, |(n, _)| n).trim();
    f.to_ascii_lowercase()
}

/// A CSV table: its header's column names and each data row's fields and line. A
/// header repeated inside (nvidia-smi run again into the same file) starts a new
/// sample; rows with more fields than the header keep the extra commas in the column
/// named `wide` (a process name may hold one).
struct Table {
    columns: Vec<String>,
    /// How many nvidia-smi runs the file holds (headers).
    runs: usize,
    /// (line, sample within the file, fields)
    rows: Vec<(usize, usize, Vec<String>)>,
}

fn table(file: &str, text: &str, wide: &str) -> Result<Table, EvalError> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, head)) = lines.next() else {
        return Ok(Table {
            columns: vec![],
            runs: 0,
            rows: vec![],
        });
    };
    let columns: Vec<String> = head.split(',').map(header_name).collect();
    let wide_at = columns.iter().position(|c| c == wide);
    let mut rows = vec![];
    let mut sample = 0;
    for (i, line) in lines {
        if line.trim() == head.trim() {
            sample += 1;
            continue;
        }
        let mut fields: Vec<String> = line.split(',').map(|f| f.trim().to_string()).collect();
        if fields.len() > columns.len() {
            if let Some(w) = wide_at {
                let extra = fields.len() - columns.len();
                let joined = fields[w..=w + extra].join(",");
                fields.splice(w..=w + extra, [joined]);
            }
        }
        if fields.len() != columns.len() {
            return Err(EvalError::Parse {
                at: Loc {
                    file: file.to_string(),
                    line: i + 1,
                },
                message: format!(
                    "{} fields, the header has {} ({})",
                    fields.len(),
                    columns.len(),
                    columns.join(", ")
                ),
            });
        }
        rows.push((i + 1, sample, fields));
    }
    Ok(Table {
        columns,
        runs: sample + 1,
        rows,
    })
}

impl Table {
    fn col(&self, names: &[&str]) -> Option<usize> {
        self.columns
            .iter()
            .position(|c| names.contains(&c.as_str()))
    }
}

/// A number of `nvidia-smi` CSV: `4200`, `4200 MiB`; `None` for `[N/A]` and the like.
fn mib(field: &str) -> Result<Option<u64>, String> {
    let f = field.trim();
    if f.starts_with('[') || f.eq_ignore_ascii_case("n/a") {
        return Ok(None);
    }
    let n = f.strip_suffix("MiB").unwrap_or(f).trim();
    n.parse::<u64>()
        .map(Some)
        .map_err(|_| format!("{f:?} is not a number of MiB"))
}

fn parse_compute_apps(m: &mut Machine, file: &str, text: &str) -> Result<(), EvalError> {
    let t = table(file, text, "process_name")?;
    let (Some(pid), Some(name), Some(mem)) = (
        t.col(&["pid"]),
        t.col(&["process_name", "name"]),
        t.col(&["used_gpu_memory", "used_memory"]),
    ) else {
        return Err(EvalError::Parse {
            at: Loc {
                file: file.to_string(),
                line: 1,
            },
            message: "the header lacks pid, process_name or used_memory: collect with --query-compute-apps=pid,process_name,used_memory".to_string(),
        });
    };
    let stamp = t.col(&["timestamp"]);
    let uuid = t.col(&["gpu_uuid"]);
    let gpu_name = t.col(&["gpu_name"]);
    // One sample per nvidia-smi run (a repeated header) or per timestamp (to the second).
    let mut samples: BTreeMap<(usize, String), usize> = BTreeMap::new();
    let base = m.samples;
    for (line, run, f) in &t.rows {
        let at = Loc {
            file: file.to_string(),
            line: *line,
        };
        let bad = |message: String| EvalError::Parse {
            at: at.clone(),
            message,
        };
        let key = stamp.map_or(String::new(), |c| {
            f[c].split('.').next().unwrap_or("").to_string()
        });
        let next = base + samples.len();
        let sample = *samples.entry((*run, key)).or_insert(next);
        let pid_v = f[pid]
            .parse::<u32>()
            .map_err(|_| bad(format!("pid {:?} is not a number", f[pid])))?;
        let used = mib(&f[mem]).map_err(bad)?;
        if f[name].is_empty() {
            return Err(bad("an empty process_name".to_string()));
        }
        m.procs.push(ProcRow {
            sample,
            gpu_uuid: uuid.map(|c| f[c].clone()).filter(|s| !s.is_empty()),
            gpu_name: gpu_name.map(|c| f[c].clone()).filter(|s| !s.is_empty()),
            pid: pid_v,
            process_name: f[name].clone(),
            used_mib: used,
            at,
        });
    }
    // A run that found no process is a sample too.
    let runs_with_rows: BTreeSet<usize> = samples.keys().map(|(run, _)| *run).collect();
    m.samples = base + samples.len() + (t.runs - runs_with_rows.len());
    Ok(())
}

fn parse_gpus(m: &mut Machine, file: &str, text: &str) -> Result<(), EvalError> {
    let t = table(file, text, "name")?;
    let (index, uuid) = (t.col(&["index"]), t.col(&["uuid"]));
    let Some(name) = t.col(&["name"]) else {
        return Ok(());
    };
    for (line, _, f) in &t.rows {
        let at = Loc {
            file: file.to_string(),
            line: *line,
        };
        let index = match index {
            Some(c) => Some(f[c].parse::<u32>().map_err(|_| EvalError::Parse {
                at: at.clone(),
                message: format!("GPU index {:?} is not a number", f[c]),
            })?),
            None => None,
        };
        m.gpus.push(GpuRow {
            index,
            uuid: uuid.map(|c| f[c].clone()),
            name: f[name].clone(),
            at,
        });
    }
    Ok(())
}

/// `nvidia-smi pmon` (`-c N`, `-o DT`, `-s um` all read): its `#` header names the
/// columns; a `-` is an interval without a sample.
fn parse_pmon(m: &mut Machine, file: &str, text: &str) -> Result<(), EvalError> {
    let mut columns: Vec<String> = vec![];
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() {
            continue;
        }
        if let Some(head) = l.strip_prefix('#') {
            let names: Vec<String> = head
                .split_whitespace()
                .map(str::to_ascii_lowercase)
                .collect();
            if names.iter().any(|n| n == "pid") {
                columns = names;
            }
            continue;
        }
        let at = Loc {
            file: file.to_string(),
            line: i + 1,
        };
        let (Some(pid_c), Some(sm_c)) = (
            columns.iter().position(|c| c == "pid"),
            columns.iter().position(|c| c == "sm"),
        ) else {
            return Err(EvalError::Parse {
                at,
                message: "a pmon row before a `# gpu pid type sm ...` header".to_string(),
            });
        };
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < columns.len().min(sm_c + 1).max(pid_c + 1) {
            return Err(EvalError::Parse {
                at,
                message: format!("{} fields, pmon's header has {}", f.len(), columns.len()),
            });
        }
        if f[pid_c] == "-" {
            continue; // a GPU without processes in the interval
        }
        let bad = |what: &str, v: &str| EvalError::Parse {
            at: at.clone(),
            message: format!("{what} {v:?} is not a number"),
        };
        let pid = f[pid_c].parse::<u32>().map_err(|_| bad("pid", f[pid_c]))?;
        let sm = match f[sm_c] {
            "-" => None,
            v => Some(v.parse::<u32>().map_err(|_| bad("sm %", v))?.min(100)),
        };
        m.pmon.push(PmonRow { pid, sm });
    }
    Ok(())
}
