//! The audio flags: clips on each conversation's first user message, made
//! (`--audio-ms`, `--audio-lognorm-*`) or read (`--audio-files`).

use super::{Given, finite, length_with};
use crate::exit::Failure;
use batchbench_contract::audio::AudioSpec;
use batchbench_contract::dist::LogNormalFlags;
use batchbench_contract::spec::RunSpec;
use std::path::PathBuf;

/// Audio in: chat's `input_audio` parts (openai_chat) or the file of a
/// transcription (openai_transcriptions).
#[derive(Debug, Clone, clap::Args)]
pub struct AudioArgs {
    /// Synthetic audio clips of this many milliseconds (16-bit PCM WAV,
    /// seeded) on each conversation's first user message.
    #[arg(long, value_name = "MS", help_heading = "Audio")]
    pub audio_ms: Option<u64>,
    /// Uniform variation of --audio-ms, plus or minus this many milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0, help_heading = "Audio")]
    pub audio_vary: u64,
    /// Log-normal clip durations: the median, in milliseconds.
    #[arg(long, value_name = "MS", value_parser = finite, help_heading = "Audio")]
    pub audio_lognorm_median_ms: Option<f64>,
    /// Log-normal clip durations: mu of the underlying normal (of milliseconds).
    #[arg(long, value_parser = finite, help_heading = "Audio")]
    pub audio_lognorm_mu: Option<f64>,
    /// Log-normal clip durations: sigma.
    #[arg(long, value_parser = finite, help_heading = "Audio")]
    pub audio_lognorm_sigma: Option<f64>,
    /// Log-normal clip durations: the longest, in milliseconds.
    #[arg(long, value_name = "MS", value_parser = finite, help_heading = "Audio")]
    pub audio_lognorm_max_ms: Option<f64>,
    /// Real clips instead: a directory of .wav files, or a JSONL file naming
    /// one per line ({"path": "a.wav"}, relative to it); picked per request,
    /// seeded. Every file is read and checked before anything is sent.
    #[arg(long, value_name = "PATH", help_heading = "Audio")]
    pub audio_files: Option<PathBuf>,
    /// Clips per request.
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = "Audio")]
    pub audio_per_request: u32,
    /// Sample rate of synthetic clips, in Hz.
    #[arg(long, value_name = "HZ", default_value_t = AudioSpec::DEFAULT_SAMPLE_RATE, help_heading = "Audio")]
    pub audio_sample_rate: u32,
    /// Channels of synthetic clips.
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = "Audio")]
    pub audio_channels: u16,
}

impl AudioArgs {
    /// Sets `spec.audio` from the flags given.
    pub fn apply(&self, spec: &mut RunSpec, g: &Given) -> Result<(), Failure> {
        let durations = length_with(
            "audio",
            "-ms",
            "median-ms",
            "max-ms",
            self.audio_ms,
            self.audio_vary,
            LogNormalFlags {
                mu: self.audio_lognorm_mu,
                median: self.audio_lognorm_median_ms,
                sigma: self.audio_lognorm_sigma,
                max: self.audio_lognorm_max_ms,
            },
        )?;
        if durations.is_none() && self.audio_files.is_none() {
            let shaping = ["audio_per_request", "audio_sample_rate", "audio_channels"];
            if let Some(f) = shaping.iter().find(|f| g.explicit(f)) {
                return Err(Failure::bad(format!(
                    "--{} shapes the clips of --audio-ms or --audio-files: give one of them too",
                    f.replace('_', "-")
                )));
            }
            return Ok(());
        }
        let audio = AudioSpec {
            per_request: self.audio_per_request,
            duration_ms: durations,
            sample_rate: self.audio_sample_rate,
            channels: self.audio_channels,
            files: self.audio_files.clone(),
        };
        audio.check().map_err(Failure::bad)?;
        spec.audio = Some(audio);
        Ok(())
    }
}
