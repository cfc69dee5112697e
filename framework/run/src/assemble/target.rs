//! The target of a run, resolved once from its spec: the in-process
//! simulator with its configuration, or the servers' URLs, every one checked
//! before anything is sent. What reads the target afterwards (the routing
//! policy's endpoint count, the transports, the simulators started) reads
//! this value, never the spec's host strings again.

use crate::exit::Failure;
use batchbench_contract::spec::TargetSpec;
use batchbench_simulator::SimConfig;

/// Where a run's requests go.
#[derive(Debug, Clone)]
pub enum Target {
    /// `sim://?k=v`: simulated replicas started in process, one endpoint each.
    Sim(Box<SimConfig>),
    /// One server or a fleet, by base URL; one server whose `--endpoint` is a
    /// full URL has an empty base (the endpoint is the whole URL).
    Servers(Vec<String>),
}

impl Target {
    /// The target of `t`: one server, a fleet of URLs, or the simulator (a
    /// fleet with `replicas`); every URL checked. Bad input names the flag.
    pub fn resolve(t: &TargetSpec) -> Result<Self, Failure> {
        let hosts = t.host.all();
        let full_url = t.endpoint.starts_with("http://") || t.endpoint.starts_with("https://");
        if full_url && t.host.is_fleet() {
            return Err(Failure::bad(
                "--endpoint: a full URL sends every request to one server; with several --host, give the request path",
            ));
        }
        let name = |i: usize| {
            if t.host.is_fleet() {
                format!("--host {} (target.host[{i}])", hosts[i])
            } else {
                "--host".to_owned()
            }
        };
        if let Some(sim) = hosts.iter().position(|h| h.starts_with("sim:")) {
            if t.host.is_fleet() {
                return Err(Failure::bad(format!(
                    "{}: the simulator cannot be one host of several; a simulated fleet is one host, sim://?replicas=N",
                    name(sim)
                )));
            }
            let cfg = sim_config(&hosts[sim]).map_err(|e| Failure::bad(format!("--host: {e}")))?;
            return Ok(Self::Sim(Box::new(cfg)));
        }
        if full_url {
            // The endpoint is the whole URL (the host is not used).
            return Ok(Self::Servers(hosts.to_vec()));
        }
        for (i, h) in hosts.iter().enumerate() {
            batchbench_engine::transport::check_url(h)
                .map_err(|e| Failure::bad(format!("{}: {e}", name(i))))?;
        }
        if let Some(dup) = hosts
            .iter()
            .enumerate()
            .find(|(i, h)| hosts[..*i].contains(h))
        {
            return Err(Failure::bad(format!(
                "{}: given twice; each endpoint of a fleet is its own server",
                name(dup.0)
            )));
        }
        Ok(Self::Servers(hosts.to_vec()))
    }

    /// How many endpoints the target makes (a simulator's replicas count).
    pub fn endpoints(&self) -> u32 {
        match self {
            Self::Sim(cfg) => cfg.replicas,
            Self::Servers(urls) => u32::try_from(urls.len()).unwrap_or(u32::MAX),
        }
    }
}

/// The simulator config of a `sim://?k=v` host.
fn sim_config(host: &str) -> Result<SimConfig, String> {
    let rest = host.trim_start_matches("sim:").trim_start_matches("//");
    let query = rest.split_once('?').map_or("", |(_, q)| q);
    let cfg = SimConfig::from_query(query)?;
    cfg.validate().map_err(|e| format!("sim:// option: {e}"))?;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::spec::Hosts;

    fn target(hosts: &[&str], endpoint: &str) -> Result<Target, String> {
        let t = TargetSpec {
            host: Hosts::new(hosts.iter().map(|h| (*h).to_owned()).collect())
                .unwrap_or_else(|| panic!("no host")),
            endpoint: endpoint.to_owned(),
            ..TargetSpec::default()
        };
        Target::resolve(&t).map_err(|f| format!("{:#}", f.error))
    }

    #[test]
    fn a_target_is_resolved_once_into_the_simulator_or_the_servers() {
        match target(&["sim://?replicas=3&ttft-base-ms=5"], "") {
            Ok(Target::Sim(cfg)) => {
                assert_eq!(cfg.replicas, 3);
                assert_eq!(Target::Sim(cfg).endpoints(), 3);
            }
            other => panic!("{other:?}"),
        }
        let fleet = target(&["http://127.0.0.1:8001", "http://127.0.0.1:8002"], "/v1/x");
        assert_eq!(fleet.map(|t| t.endpoints()), Ok(2));
        let one = target(&[""], "http://127.0.0.1:8001/v1/chat/completions");
        assert_eq!(one.map(|t| t.endpoints()), Ok(1));
    }

    #[test]
    fn a_bad_target_names_its_flag() {
        for (hosts, endpoint, words) in [
            (&["sim://?replicas=0"][..], "", "--host: sim:// option"),
            (
                &["sim://", "http://127.0.0.1:1"][..],
                "",
                "cannot be one host of several",
            ),
            (
                &["http://127.0.0.1:1", "http://127.0.0.1:1"][..],
                "/v1",
                "given twice",
            ),
            (
                &["http://a:1", "http://b:1"][..],
                "http://c:1/v1",
                "--endpoint: a full URL",
            ),
            (&["nope"][..], "/v1", "--host"),
        ] {
            let e = target(hosts, endpoint).err().unwrap_or_default();
            assert!(e.contains(words), "{hosts:?} {endpoint}: {e}");
        }
    }
}
