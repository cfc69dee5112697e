//! Audio in: the seconds of audio a run's requests carried and the real-time
//! factor of their replies (audio seconds over latency), exactly as recorded.

use batchbench_contract::plugin::RequestRecord;
use batchbench_contract::record::AudioSummary;
use hdrhistogram::Histogram;

/// The audio figures of a run, tallied request by request.
#[derive(Debug, Clone)]
pub struct AudioTally {
    requests: u64,
    seconds: f64,
    /// Seconds of the successful requests.
    answered: f64,
    /// Real-time factors in thousandths (up to a billion times real time).
    rtf: Histogram<u64>,
    rtf_sum: f64,
    rtf_min: f64,
}

impl Default for AudioTally {
    fn default() -> Self {
        Self {
            requests: 0,
            seconds: 0.0,
            answered: 0.0,
            rtf: Histogram::new_with_bounds(1, 1_000_000_000_000, 3)
                .expect("constant histogram bounds are valid"),
            rtf_sum: 0.0,
            rtf_min: f64::INFINITY,
        }
    }
}

impl AudioTally {
    /// Counts one request (those without audio are not counted).
    pub fn record(&mut self, rec: &RequestRecord<'_>) {
        if rec.audio_seconds <= 0.0 {
            return;
        }
        self.requests += 1;
        self.seconds += rec.audio_seconds;
        let latency = rec.latency.as_secs_f64();
        if rec.failure.is_some() || latency <= 0.0 {
            return;
        }
        self.answered += rec.audio_seconds;
        let rtf = rec.audio_seconds / latency;
        self.rtf
            .saturating_record((rtf * 1000.0).round().max(1.0) as u64);
        self.rtf_sum += rtf;
        self.rtf_min = self.rtf_min.min(rtf);
    }

    /// The summary's audio block over a run of `elapsed` seconds; `None`
    /// when no request carried audio.
    pub fn summary(&self, elapsed: f64) -> Option<AudioSummary> {
        if self.requests == 0 {
            return None;
        }
        let n = self.rtf.len();
        let q = |p: f64| self.rtf.value_at_quantile(p) as f64 / 1000.0;
        Some(AudioSummary {
            requests: self.requests,
            seconds: self.seconds,
            seconds_per_request: self.seconds / self.requests as f64,
            seconds_per_second: if elapsed > 0.0 {
                self.answered / elapsed
            } else {
                0.0
            },
            rtf_mean: if n > 0 { self.rtf_sum / n as f64 } else { 0.0 },
            rtf_p50: if n > 0 { q(0.5) } else { 0.0 },
            rtf_p10: if n > 0 { q(0.1) } else { 0.0 },
            rtf_min: if n > 0 { self.rtf_min } else { 0.0 },
            rtf_samples: n,
        })
    }
}
