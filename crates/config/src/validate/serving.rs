//! The checks of what a task needs to serve (issue 47): ports, health checks,
//! volumes and mount points, paths and labels. The schema checks each value's
//! type and range; these check how the values go together.

use super::Validator;
use gpushare_core::model::{
    parse_port_range, AutoScaling, CapacityProvider, Container, NetworkMode, Protocol, Service,
    TaskDefinition,
};
use std::collections::{BTreeMap, BTreeSet};

fn absolute(p: &str) -> bool {
    p.starts_with('/') && !p.split('/').any(|part| part == "..")
}

impl Validator<'_> {
    /// A pool's `host_port_range`.
    pub(super) fn port_range(&mut self, addr: &str, cp: &CapacityProvider) {
        if let Some(r) = &cp.host_port_range {
            if let Err(why) = parse_port_range(r) {
                self.error(
                    &format!("{addr}.host_port_range"),
                    format!("the host_port_range of {addr} is not a port range"),
                    Some(why),
                    Some("write it as \"49153-65535\"".into()),
                );
            }
        }
    }

    /// An `auto_scaling` target on a Prometheus metric: its `port` names a TCP port
    /// mapping of the service's task definition (serving's named ports).
    pub(super) fn scaling_port(&mut self, name: &str, svc: &Service, a: &AutoScaling) {
        let Some(port) = &a.target.port else { return };
        let Some(td) = self.d.task_definitions.get(&svc.task_definition) else {
            return;
        };
        let mappings = td.containers.iter().flat_map(|c| &c.port_mappings);
        let tcp: Vec<_> = mappings.filter(|p| p.protocol == Protocol::Tcp).collect();
        if tcp.iter().any(|p| p.label() == *port) {
            return;
        }
        let names: Vec<String> = tcp.iter().map(|p| p.label()).collect();
        let hint = if names.is_empty() {
            "give the container a port_mapping with a name, and name it here".to_string()
        } else {
            format!("name one of its TCP port mappings: {}", names.join(", "))
        };
        self.error(
            &format!("service.{name}.auto_scaling.target.port"),
            format!(
                "service.{name}: auto_scaling.target.port: task_definition.{} has no TCP port mapping named {port:?}",
                svc.task_definition
            ),
            Some(format!(
                "the agent scrapes {} from that port's host port",
                a.target.metric
            )),
            Some(hint),
        );
    }

    /// A service's `load_balancer`s: each names a container of its task definition
    /// and one of that container's TCP port mappings, and each target group serves
    /// one service (`groups`: ARN -> the service that names it).
    pub(super) fn load_balancers<'s>(
        &mut self,
        name: &'s str,
        svc: &'s Service,
        groups: &mut BTreeMap<&'s str, &'s str>,
    ) {
        let td = self.d.task_definitions.get(&svc.task_definition);
        for (i, lb) in svc.load_balancers.iter().enumerate() {
            let path = format!("service.{name}.load_balancer.{i}");
            let arn = lb.target_group_arn.as_str();
            match groups.insert(arn, name) {
                Some(other) if other == name => self.error(
                    &format!("{path}.target_group_arn"),
                    format!("service.{name} names target group {} twice", lb.group_name()),
                    None,
                    Some("one load_balancer block per target group (ECS allows one too)".into()),
                ),
                Some(other) => self.error(
                    &format!("{path}.target_group_arn"),
                    format!("target group {} is named by service.{other} and service.{name}", lb.group_name()),
                    Some("gpushare deregisters the targets of a service's group that none of its tasks stands for".into()),
                    Some("give each service a target group of its own".into()),
                ),
                None => {}
            }
            let Some(td) = td else { continue };
            let Some(c) = td.containers.iter().find(|c| c.name == lb.container_name) else {
                let names: Vec<&str> = td.containers.iter().map(|c| c.name.as_str()).collect();
                self.error(
                    &format!("{path}.container_name"),
                    format!(
                        "service.{name}: task_definition.{} has no container {:?}",
                        svc.task_definition, lb.container_name
                    ),
                    None,
                    Some(format!("name one of its containers: {}", names.join(", "))),
                );
                continue;
            };
            let mapped = c
                .port_mappings
                .iter()
                .any(|p| p.container_port == lb.container_port && p.protocol == Protocol::Tcp);
            if !mapped {
                self.error(
                    &format!("{path}.container_port"),
                    format!("service.{name}: container {:?} has no TCP port_mapping for container_port {}", c.name, lb.container_port),
                    Some("the load balancer sends traffic to the host port a port_mapping publishes".into()),
                    Some(format!("add port_mapping {{ container_port = {} }} to the container", lb.container_port)),
                );
            }
        }
    }

    /// Ports, volumes and the containers' serving settings of one task definition.
    pub(super) fn serving(&mut self, addr: &str, td: &TaskDefinition) {
        self.volumes(addr, td);
        // (protocol, host port) -> the container that holds it, across the task.
        let mut host_ports: BTreeMap<(Protocol, u16), String> = BTreeMap::new();
        let mut port_names: BTreeSet<String> = BTreeSet::new();
        for c in &td.containers {
            let cpath = format!("{addr}.container.{}", c.name);
            self.ports(
                addr,
                &cpath,
                td.network_mode,
                c,
                &mut host_ports,
                &mut port_names,
            );
            self.container_settings(addr, &cpath, td, c);
        }
    }

    fn volumes(&mut self, addr: &str, td: &TaskDefinition) {
        let mut seen = BTreeSet::new();
        for v in &td.volumes {
            let vpath = format!("{addr}.volume.{}", v.name);
            if !seen.insert(v.name.as_str()) {
                self.error(
                    &vpath,
                    format!("duplicate volume \"{}\" in {addr}", v.name),
                    None,
                    Some("every volume needs a distinct name".into()),
                );
            }
            if v.host_path.is_some() && v.docker_volume.is_some() {
                self.error(
                    &vpath,
                    format!(
                        "volume {} of {addr} sets both host_path and docker_volume",
                        v.name
                    ),
                    Some("a volume is a host directory or a Docker volume, not both".into()),
                    None,
                );
            }
            if let Some(p) = v.host_path.as_deref().filter(|p| !absolute(p)) {
                self.error(
                    &format!("{vpath}.host_path"),
                    format!(
                        "the host_path {p:?} of volume {} in {addr} is not an absolute path",
                        v.name
                    ),
                    Some("a host path must start with / and hold no `..`".into()),
                    Some("write the full path, e.g. /opt/models".into()),
                );
            }
        }
    }

    fn ports(
        &mut self,
        addr: &str,
        cpath: &str,
        mode: NetworkMode,
        c: &Container,
        host_ports: &mut BTreeMap<(Protocol, u16), String>,
        port_names: &mut BTreeSet<String>,
    ) {
        let mut own: BTreeSet<(Protocol, u16)> = BTreeSet::new();
        for (i, p) in c.port_mappings.iter().enumerate() {
            let ppath = format!("{cpath}.port_mapping.{i}");
            let port = format!("{}/{}", p.container_port, p.protocol);
            if mode == NetworkMode::None {
                self.error(
                    &ppath,
                    format!("container {} of {addr} maps port {port}, but the task's network_mode is none", c.name),
                    Some("a task without a network has no ports".into()),
                    Some("remove the port_mapping, or use network_mode = \"bridge\"".into()),
                );
                continue;
            }
            if !own.insert((p.protocol, p.container_port)) {
                self.error(
                    &ppath,
                    format!(
                        "container {} of {addr} maps container port {port} twice",
                        c.name
                    ),
                    None,
                    Some("map each container port once".into()),
                );
                continue;
            }
            if mode == NetworkMode::Host && p.host_port != 0 && p.host_port != p.container_port {
                self.error(
                    &format!("{ppath}.host_port"),
                    format!("container {} of {addr} maps container port {port} to host port {} in host mode", c.name, p.host_port),
                    Some("with network_mode = \"host\" the container listens on the host's own ports: the host port is the container port".into()),
                    Some("leave host_port out, or use network_mode = \"bridge\"".into()),
                );
            }
            let host_port = match mode {
                NetworkMode::Host => p.container_port,
                _ => p.host_port,
            };
            if host_port != 0 {
                if let Some(other) = host_ports.insert((p.protocol, host_port), c.name.clone()) {
                    self.error(
                        &ppath,
                        format!("host port {host_port}/{} is taken twice in {addr} (containers {other} and {})", p.protocol, c.name),
                        Some("one host port can be published by one container of a task".into()),
                        Some("give one of them another host_port, or 0 for a dynamic one".into()),
                    );
                }
            }
            if !port_names.insert(p.label()) {
                self.error(
                    &format!("{ppath}.name"),
                    format!("the port name {:?} is used twice in {addr}", p.label()),
                    Some("endpoints list a task's ports by name".into()),
                    Some("give every port_mapping of the task a distinct name".into()),
                );
            }
        }
    }

    fn container_settings(&mut self, addr: &str, cpath: &str, td: &TaskDefinition, c: &Container) {
        if let Some(hc) = &c.health_check {
            if hc.parsed().is_none() {
                self.error(
                    &format!("{cpath}.health_check.command"),
                    format!("the health check of container {} in {addr} is neither [\"CMD\", ...] nor [\"CMD-SHELL\", \"...\"]", c.name),
                    Some(format!("it is {:?}", hc.command)),
                    Some("write command = [\"CMD\", \"/bin/check\", \"arg\"] or [\"CMD-SHELL\", \"curl -f http://localhost:8080/health\"]".into()),
                );
            }
        }
        let declared: BTreeSet<&str> = td.volumes.iter().map(|v| v.name.as_str()).collect();
        let mut paths = BTreeSet::new();
        for (i, m) in c.mount_points.iter().enumerate() {
            let mpath = format!("{cpath}.mount_point.{i}");
            if !declared.contains(m.source_volume.as_str()) {
                let known: Vec<&str> = declared.iter().copied().collect();
                self.error(
                    &format!("{mpath}.source_volume"),
                    format!(
                        "container {} of {addr} mounts volume {:?}, which {addr} does not declare",
                        c.name, m.source_volume
                    ),
                    Some(if known.is_empty() {
                        "the task definition declares no volume".to_string()
                    } else {
                        format!("its volumes: {}", known.join(", "))
                    }),
                    Some(format!(
                        "declare volume \"{}\" {{ host_path = \"/...\" }} in {addr}",
                        m.source_volume
                    )),
                );
            }
            if !absolute(&m.container_path) {
                self.error(
                    &format!("{mpath}.container_path"),
                    format!(
                        "the container_path {:?} of container {} in {addr} is not an absolute path",
                        m.container_path, c.name
                    ),
                    None,
                    Some("write the full path in the container, e.g. /models".into()),
                );
            } else if !paths.insert(m.container_path.as_str()) {
                self.error(
                    &mpath,
                    format!(
                        "container {} of {addr} mounts two volumes at {}",
                        c.name, m.container_path
                    ),
                    None,
                    None,
                );
            }
        }
        if let Some(w) = c.working_directory.as_deref().filter(|w| !absolute(w)) {
            self.error(
                &format!("{cpath}.working_directory"),
                format!(
                    "the working_directory {w:?} of container {} in {addr} is not an absolute path",
                    c.name
                ),
                None,
                None,
            );
        }
        for (i, u) in c.ulimits.iter().enumerate() {
            if u.hard != -1 && (u.soft == -1 || u.soft > u.hard) {
                self.error(
                    &format!("{cpath}.ulimit.{i}"),
                    format!("the {} ulimit of container {} in {addr} has a soft limit above its hard one", u.name, c.name),
                    Some(format!("soft {}, hard {}", u.soft, u.hard)),
                    Some("the soft limit is at most the hard one (-1: unlimited)".into()),
                );
            }
        }
        for k in c
            .docker_labels
            .keys()
            .filter(|k| k.starts_with("gpushare."))
        {
            self.error(
                &format!("{cpath}.docker_labels"),
                format!(
                    "the docker label {k:?} of container {} in {addr} uses the agent's prefix",
                    c.name
                ),
                Some("the agent finds its containers by its `gpushare.` labels".into()),
                Some("use another prefix".into()),
            );
        }
    }
}
