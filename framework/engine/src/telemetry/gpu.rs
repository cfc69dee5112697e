//! The GPUs of the machine the client runs on (`--gpu-telemetry nvml`), read
//! through NVIDIA's management library, which `nvml-wrapper` loads at run time:
//! a machine without it runs as before, and a run that asks for it there is
//! refused before anything is sent. Each sample is named as NVIDIA's DCGM
//! exporter names it, so that one mapping ([`crate::telemetry::server_metrics`]) turns
//! both into the common names, per GPU and in total.

use crate::telemetry::server_metrics::Sample;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};

/// The library, loaded and initialised.
pub struct Nvml(nvml_wrapper::Nvml);

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nvml")
    }
}

impl Nvml {
    /// Loads and initialises the library; the reason it cannot, in one line.
    pub fn load() -> Result<Self, String> {
        let nvml = nvml_wrapper::Nvml::init()
            .map_err(|e| format!("cannot use NVIDIA's management library (libnvidia-ml): {e}"))?;
        match nvml.device_count() {
            Ok(0) => Err("NVIDIA's management library sees no GPU on this machine".into()),
            Ok(_) => Ok(Self(nvml)),
            Err(e) => Err(format!(
                "NVIDIA's management library cannot count the GPUs: {e}"
            )),
        }
    }

    /// One reading of every GPU, under DCGM's metric names and units, each
    /// labelled with its `gpu` index; a figure a GPU cannot report is left out.
    pub fn samples(&self) -> Vec<Sample> {
        let mut out = Vec::new();
        for i in 0..self.0.device_count().unwrap_or(0) {
            let Ok(d) = self.0.device_by_index(i) else {
                continue;
            };
            let label = vec![("gpu".to_owned(), i.to_string())];
            for (name, v) in [
                (
                    "DCGM_FI_DEV_POWER_USAGE",
                    d.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
                ),
                (
                    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                    d.total_energy_consumption().ok().map(|mj| mj as f64),
                ),
                (
                    "DCGM_FI_DEV_GPU_UTIL",
                    d.utilization_rates().ok().map(|u| f64::from(u.gpu)),
                ),
                (
                    "DCGM_FI_DEV_FB_USED",
                    d.memory_info().ok().map(|m| m.used as f64 / 1_048_576.0),
                ),
                (
                    "DCGM_FI_DEV_SM_CLOCK",
                    d.clock_info(Clock::SM).ok().map(f64::from),
                ),
                (
                    "DCGM_FI_DEV_GPU_TEMP",
                    d.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
                ),
            ] {
                if let Some(v) = v {
                    out.push((name.to_owned(), label.clone(), v));
                }
            }
        }
        out
    }
}
