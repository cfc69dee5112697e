//! Audio in requests: what a run asks for ([`AudioSpec`]), a clip ready to
//! send ([`Audio`]), and the WAV container both ends read ([`wav_info`],
//! [`wav_header`]).
//!
//! A clip is attached to a conversation's first user message, as images are:
//! chat completions send it as an `input_audio` part, the transcription and
//! translation APIs upload it as the request's file. Its duration is what the
//! figures are per (audio seconds, real-time factor).

use crate::dist::LengthDist;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// An audio clip attached to a message, encoded and ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Audio {
    /// The container, as APIs name it (`wav`).
    pub format: &'static str,
    /// The encoded file.
    pub bytes: bytes::Bytes,
    /// The same bytes in base64 (chat's `input_audio.data`).
    pub base64: Arc<str>,
    /// Its duration in seconds.
    pub seconds: f64,
    /// The file name it is uploaded under (`clip-….wav`, or a real file's).
    pub name: Arc<str>,
}

/// The audio of a run (`--audio-ms`, `--audio-files`): `per_request` clips on
/// each conversation's first user message, synthetic (seeded, of durations
/// drawn from `duration_ms`) or picked from real files (seeded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AudioSpec {
    /// Clips per request.
    #[serde(default = "one")]
    pub per_request: u32,
    /// Durations of synthetic clips, in milliseconds (fixed with a uniform
    /// variation, or log-normal). Absent with `files`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<LengthDist>,
    /// Samples per second of synthetic clips.
    #[serde(default = "default_rate")]
    pub sample_rate: u32,
    /// Channels of synthetic clips.
    #[serde(default = "one_u16")]
    pub channels: u16,
    /// Real clips instead: a directory of `.wav` files, or a JSONL file whose
    /// lines name one each (`{"path": "a.wav"}`, relative to the JSONL file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<PathBuf>,
}

fn one() -> u32 {
    1
}

fn one_u16() -> u16 {
    1
}

fn default_rate() -> u32 {
    AudioSpec::DEFAULT_SAMPLE_RATE
}

impl AudioSpec {
    /// 16 kHz: what speech models (Whisper and the audio LLMs) take.
    pub const DEFAULT_SAMPLE_RATE: u32 = 16_000;
    /// The longest synthetic clip: an hour.
    pub const MAX_MS: u64 = 3_600_000;

    /// Checks the figures; an error names the field and its flag.
    pub fn check(&self) -> Result<(), String> {
        if self.per_request == 0 || self.per_request > 16 {
            return Err(format!(
                "audio.per_request (--audio-per-request) must be 1 to 16, got {}",
                self.per_request
            ));
        }
        if !(1_000..=384_000).contains(&self.sample_rate) {
            return Err(format!(
                "audio.sample_rate (--audio-sample-rate) must be 1000 to 384000, got {}",
                self.sample_rate
            ));
        }
        if !(1..=8).contains(&self.channels) {
            return Err(format!(
                "audio.channels (--audio-channels) must be 1 to 8, got {}",
                self.channels
            ));
        }
        match (&self.duration_ms, &self.files) {
            (Some(_), Some(_)) => Err(
                "audio: give durations (--audio-ms, --audio-lognorm-*) or files (--audio-files), not both"
                    .into(),
            ),
            (None, None) => {
                Err("audio: give durations (--audio-ms, --audio-lognorm-*) or files (--audio-files)".into())
            }
            (Some(d), None) => {
                if let LengthDist::Fixed { value: 0, vary: 0 } = d {
                    return Err("--audio-ms must be at least 1".into());
                }
                match d.beyond(
                    Self::MAX_MS,
                    "--audio-ms",
                    "--audio-lognorm-max-ms",
                ) {
                    Some(m) => Err(m),
                    None => Ok(()),
                }
            }
            (None, Some(_)) => Ok(()),
        }
    }

    /// The samples of a clip of `ms` milliseconds at this rate: the nearest
    /// whole number, at least one.
    pub fn samples(&self, ms: u64) -> u64 {
        ((ms as f64 * f64::from(self.sample_rate) / 1000.0).round() as u64).max(1)
    }
}

/// What a WAV file holds, read from its header.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WavInfo {
    /// Samples per second.
    pub sample_rate: u32,
    /// Channels.
    pub channels: u16,
    /// Bits per sample.
    pub bits: u16,
    /// Sample frames (one sample of every channel).
    pub frames: u64,
}

impl WavInfo {
    /// The duration in seconds.
    pub fn seconds(&self) -> f64 {
        self.frames as f64 / f64::from(self.sample_rate)
    }
}

/// The header of a 16-bit PCM WAV file of `frames` sample frames: RIFF,
/// `fmt ` and the `data` chunk's header, 44 bytes, followed by the samples.
pub fn wav_header(sample_rate: u32, channels: u16, frames: u64) -> Result<[u8; 44], String> {
    let block = u32::from(channels) * 2;
    let data = frames
        .checked_mul(u64::from(block))
        .and_then(|d| u32::try_from(d).ok())
        .filter(|d| *d <= u32::MAX - 36)
        .ok_or_else(|| format!("a WAV file of {frames} frames is over 4 GiB"))?;
    let mut h = [0u8; 44];
    h[0..4].copy_from_slice(b"RIFF");
    h[4..8].copy_from_slice(&(36 + data).to_le_bytes());
    h[8..12].copy_from_slice(b"WAVE");
    h[12..16].copy_from_slice(b"fmt ");
    h[16..20].copy_from_slice(&16u32.to_le_bytes());
    h[20..22].copy_from_slice(&1u16.to_le_bytes()); // PCM
    h[22..24].copy_from_slice(&channels.to_le_bytes());
    h[24..28].copy_from_slice(&sample_rate.to_le_bytes());
    h[28..32].copy_from_slice(&(sample_rate * block).to_le_bytes());
    h[32..34].copy_from_slice(&(block as u16).to_le_bytes());
    h[34..36].copy_from_slice(&16u16.to_le_bytes());
    h[36..40].copy_from_slice(b"data");
    h[40..44].copy_from_slice(&data.to_le_bytes());
    Ok(h)
}

/// Reads a WAV file's format and length: a RIFF/WAVE file with a `fmt `
/// chunk of PCM (format 1, or the extensible format 0xFFFE) or IEEE float
/// (3) samples, and a `data` chunk. Why not, in a sentence.
pub fn wav_info(bytes: &[u8]) -> Result<WavInfo, String> {
    if bytes.len() < 12 || &bytes[0..4] != b"RIFF" || &bytes[8..12] != b"WAVE" {
        return Err("not a WAV file (no RIFF/WAVE header)".into());
    }
    let u16_at = |b: &[u8], i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    let u32_at = |b: &[u8], i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let mut at = 12;
    let mut fmt: Option<(u16, u32, u16, u16)> = None;
    while at + 8 <= bytes.len() {
        let id = &bytes[at..at + 4];
        let len = u32_at(bytes, at + 4) as usize;
        let body = at + 8;
        if id == b"fmt " {
            if len < 16 || body + 16 > bytes.len() {
                return Err("its fmt chunk is cut short".into());
            }
            let format = u16_at(bytes, body);
            if !matches!(format, 1 | 3 | 0xFFFE) {
                return Err(format!(
                    "its samples are of format {format}, not PCM or float (compressed WAV is not read)"
                ));
            }
            fmt = Some((
                u16_at(bytes, body + 2),
                u32_at(bytes, body + 4),
                u16_at(bytes, body + 14),
                u16_at(bytes, body + 12),
            ));
        } else if id == b"data" {
            let (channels, sample_rate, bits, block) =
                fmt.ok_or("its data chunk comes before any fmt chunk")?;
            if channels == 0 || sample_rate == 0 || bits == 0 || block == 0 {
                return Err(format!(
                    "its fmt chunk says {channels} channels at {sample_rate} Hz of {bits} bits"
                ));
            }
            // A stream's writer may leave the length at its maximum: the
            // samples are then the rest of the file.
            let len = if len as u64 == u64::from(u32::MAX) {
                bytes.len() - body
            } else {
                len
            };
            if body + len > bytes.len() {
                return Err(format!(
                    "its data chunk says {len} bytes, the file holds {}",
                    bytes.len() - body
                ));
            }
            if len == 0 {
                return Err("it holds no samples".into());
            }
            return Ok(WavInfo {
                sample_rate,
                channels,
                bits,
                frames: (len / usize::from(block)) as u64,
            });
        }
        at = body + len + (len & 1);
    }
    Err("it has no data chunk".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_written_reads_back() {
        let mut f = wav_header(16_000, 2, 8_000)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_vec();
        f.extend(std::iter::repeat_n(0u8, 8_000 * 4));
        let i = wav_info(&f).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (i.sample_rate, i.channels, i.bits, i.frames),
            (16_000, 2, 16, 8_000)
        );
        assert!((i.seconds() - 0.5).abs() < 1e-12);
        // Cut short, not WAV, no samples.
        assert!(wav_info(&f[..100]).unwrap_err().contains("data chunk says"));
        assert!(
            wav_info(b"ID3\x04 an mp3")
                .unwrap_err()
                .contains("not a WAV")
        );
        let empty = wav_header(8_000, 1, 0).unwrap_or_else(|e| panic!("{e}"));
        assert!(wav_info(&empty).unwrap_err().contains("no samples"));
    }

    #[test]
    fn a_spec_names_the_flag_it_is_wrong_in() {
        let spec = AudioSpec {
            per_request: 1,
            duration_ms: Some(LengthDist::fixed(5_000)),
            sample_rate: 16_000,
            channels: 1,
            files: None,
        };
        assert!(spec.check().is_ok());
        assert_eq!(spec.samples(5_000), 80_000);
        assert_eq!(spec.samples(0), 1);
        let bad = |f: fn(&mut AudioSpec)| {
            let mut s = spec.clone();
            f(&mut s);
            s.check().unwrap_err()
        };
        assert!(bad(|s| s.per_request = 0).contains("--audio-per-request"));
        assert!(bad(|s| s.sample_rate = 10).contains("--audio-sample-rate"));
        assert!(bad(|s| s.channels = 0).contains("--audio-channels"));
        assert!(bad(|s| s.duration_ms = Some(LengthDist::fixed(0))).contains("--audio-ms"));
        assert!(bad(|s| s.duration_ms = None).contains("--audio-files"));
        assert!(bad(|s| s.files = Some("a".into())).contains("not both"));
    }
}
