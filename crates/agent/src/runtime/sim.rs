//! The simulated runtime of the local fleet: tasks "start" at once and nothing runs.
//! Faults are injected by marking a container exited.

use super::{ContainerState, LaunchSpec, ObservedContainer, ObservedTask, Runtime, RuntimeError};
use async_trait::async_trait;
use gpushare_core::util::lock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

#[derive(Debug, Default)]
pub struct SimRuntime {
    tasks: Mutex<BTreeMap<String, ObservedTask>>,
    starts: Mutex<u64>,
    /// Fault injection: the runtime does not answer (health and listing fail).
    down: AtomicBool,
}

impl SimRuntime {
    pub fn new() -> SimRuntime {
        SimRuntime::default()
    }

    /// A runtime already running `tasks` (task id -> its containers' names and whether
    /// each is essential): how the local fleet's agents find what an earlier round
    /// started, since nothing of a simulated host outlives one round but its report.
    pub fn running(tasks: impl IntoIterator<Item = (String, Vec<(String, bool)>)>) -> SimRuntime {
        let tasks = tasks
            .into_iter()
            .map(|(id, containers)| {
                let containers = containers
                    .into_iter()
                    .map(|(name, essential)| {
                        (
                            name,
                            ObservedContainer {
                                health: None,
                                essential,
                                state: ContainerState::Running,
                            },
                        )
                    })
                    .collect();
                (id, ObservedTask { containers })
            })
            .collect();
        SimRuntime {
            tasks: Mutex::new(tasks),
            starts: Mutex::new(0),
            down: AtomicBool::new(false),
        }
    }

    /// Fault injection: a container of a running task exits with `code`.
    pub fn exit(&self, task_id: &str, container: &str, code: i64) -> bool {
        let mut tasks = lock(&self.tasks);
        match tasks
            .get_mut(task_id)
            .and_then(|t| t.containers.get_mut(container))
        {
            Some(c) => {
                c.state = ContainerState::Exited { code: Some(code) };
                true
            }
            None => false,
        }
    }

    /// Fault injection: the runtime stops answering (or answers again).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn answer(&self) -> Result<(), RuntimeError> {
        if self.down.load(Ordering::SeqCst) {
            Err(RuntimeError::SimulatedDown)
        } else {
            Ok(())
        }
    }

    /// How many task starts this runtime has seen (for duplicate checks).
    pub fn starts(&self) -> u64 {
        *lock(&self.starts)
    }
}

#[async_trait]
impl Runtime for SimRuntime {
    fn name(&self) -> &'static str {
        "sim"
    }

    async fn health(&self) -> Result<(), RuntimeError> {
        self.answer()
    }

    async fn list(&self) -> Result<BTreeMap<String, ObservedTask>, RuntimeError> {
        self.answer()?;
        Ok(lock(&self.tasks).clone())
    }

    async fn start(&self, spec: &LaunchSpec) -> Result<(), RuntimeError> {
        let mut tasks = lock(&self.tasks);
        if tasks.contains_key(&spec.task_id) {
            return Err(RuntimeError::AlreadyRunning {
                task: spec.task_id.clone(),
            });
        }
        let containers = spec
            .containers
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    ObservedContainer {
                        health: None,
                        essential: c.essential,
                        state: ContainerState::Running,
                    },
                )
            })
            .collect();
        tasks.insert(spec.task_id.clone(), ObservedTask { containers });
        *lock(&self.starts) += 1;
        Ok(())
    }

    async fn stop(&self, task_id: &str, _grace: Duration) -> Result<(), RuntimeError> {
        lock(&self.tasks).remove(task_id);
        Ok(())
    }
}
