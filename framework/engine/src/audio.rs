//! Audio clips for requests: synthetic ones of an exact duration (16-bit PCM
//! WAV, a voiced sound of moving pitch and syllable-rate loudness under a
//! little noise, so that a server's decoder and feature extractor do their
//! usual work; the bytes depend on the seed and the duration alone), or real
//! files read once before the run.

#[cfg(feature = "audio")]
use base64::Engine as _;
use batchbench_contract::audio::{Audio, AudioSpec};
#[cfg(feature = "audio")]
use batchbench_contract::audio::{wav_header, wav_info};
use batchbench_contract::rng::Stream;
#[cfg(feature = "audio")]
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a run's clips come from.
#[derive(Debug, Clone)]
pub enum AudioSource {
    /// Made per request from the spec's durations, rate and channels.
    Synthetic(AudioSpec),
    /// Picked per request (seeded) from these files.
    Files(Arc<[Arc<Audio>]>),
}

/// The audio of a run: `per_request` clips on each conversation's first user
/// message.
#[derive(Debug, Clone)]
pub struct AudioPlan {
    /// Clips per request.
    pub per_request: u32,
    /// Where they come from.
    pub source: AudioSource,
}

impl AudioPlan {
    /// The plan of a spec: its files read and checked now (an error names the
    /// file, and the line of a JSONL list), or its synthetic clips.
    pub fn new(spec: &AudioSpec) -> Result<Self, String> {
        spec.check()?;
        #[cfg(feature = "audio")]
        {
            let source = match &spec.files {
                Some(path) => AudioSource::Files(load_files(path)?.into()),
                None => AudioSource::Synthetic(spec.clone()),
            };
            Ok(Self {
                per_request: spec.per_request,
                source,
            })
        }
        #[cfg(not(feature = "audio"))]
        Err(NEEDS_AUDIO.to_owned())
    }

    /// The clip of `key` (a seed derived from the run's, the trajectory's
    /// and the request's).
    pub fn make(&self, key: u64) -> Result<Audio, String> {
        match self.pick(key)? {
            Pick::File(clip) => Ok(Audio::clone(clip)),
            #[cfg(feature = "audio")]
            Pick::Frames(spec, frames) => synthetic(key, spec.sample_rate, spec.channels, frames),
            #[cfg(not(feature = "audio"))]
            Pick::Frames(..) => Err(NEEDS_AUDIO.to_owned()),
        }
    }

    /// The duration in seconds of the clip of `key`, as [`AudioPlan::make`]
    /// would make it, without making it (`analyze`).
    pub fn seconds(&self, key: u64) -> Result<f64, String> {
        Ok(match self.pick(key)? {
            Pick::File(clip) => clip.seconds,
            Pick::Frames(spec, frames) => frames as f64 / f64::from(spec.sample_rate),
        })
    }

    /// The file of `key`, or the sample frames of its synthetic clip.
    fn pick(&self, key: u64) -> Result<Pick<'_>, String> {
        match &self.source {
            AudioSource::Files(files) => {
                let i = Stream::at(key, &[0x4649_4c45]).below(files.len() as u64) as usize;
                Ok(Pick::File(&files[i]))
            }
            AudioSource::Synthetic(spec) => {
                let dist = spec
                    .duration_ms
                    .as_ref()
                    .ok_or("synthetic audio needs durations (--audio-ms)")?;
                let ms = dist.sample(&mut Stream::at(key, &[0x4455_5241]), 1); // "DURA"
                Ok(Pick::Frames(spec, spec.samples(ms)))
            }
        }
    }
}

/// The clip a key picks.
enum Pick<'a> {
    /// One of the files.
    File(&'a Arc<Audio>),
    /// A synthetic clip of so many sample frames.
    Frames(&'a AudioSpec, u64),
}

/// The key of clip `k` of request `index` of the agent `agent` (its
/// trajectory's place in admission order) in a run of `seed`: what a run
/// makes it from, and what `analyze` draws its duration from.
pub(crate) fn clip_key(seed: u64, agent: u64, index: u64, k: u64) -> u64 {
    batchbench_contract::rng::derive(seed, &[PURPOSE_AUDIO, agent, index, k])
}

/// The purpose of audio clips' keys among the synthesis's.
const PURPOSE_AUDIO: u64 = 4;

/// What a build without the `audio` feature says when a run asks for audio.
pub const NEEDS_AUDIO: &str = "audio (--audio-ms, --audio-files) needs the `audio` cargo feature, which this build of batchbench leaves out (it is on by default: cargo install --path bins/batchbench, or add --features audio)";

/// A WAV clip of exactly `frames` sample frames at `rate`, seeded by `key`.
#[cfg(feature = "audio")]
pub fn synthetic(key: u64, rate: u32, channels: u16, frames: u64) -> Result<Audio, String> {
    let header = wav_header(rate, channels, frames)?;
    let mut rng = Stream::at(key, &[0x4155_4449]); // "AUDI"
    let mut bytes = Vec::with_capacity(44 + frames as usize * usize::from(channels) * 2);
    bytes.extend_from_slice(&header);
    let rate_f = f64::from(rate);
    // A voice: a fundamental between 100 and 220 Hz that drifts, three
    // harmonics, loudness rising and falling at a syllable's rate (4 to 6
    // per second), and noise 30 dB down.
    let f0 = 100.0 + rng.next_f64() * 120.0;
    let syllable = 4.0 + rng.next_f64() * 2.0;
    let drift = 0.5 + rng.next_f64();
    let phase0 = rng.next_f64() * std::f64::consts::TAU;
    let mut phase = phase0;
    for n in 0..frames {
        let t = n as f64 / rate_f;
        let f = f0 * (1.0 + 0.15 * (std::f64::consts::TAU * drift * t).sin());
        phase += std::f64::consts::TAU * f / rate_f;
        let envelope = 0.5 - 0.5 * (std::f64::consts::TAU * syllable * t + phase0).cos();
        let voice = phase.sin() + 0.5 * (2.0 * phase).sin() + 0.25 * (3.0 * phase).sin();
        let noise = (rng.next_f64() - 0.5) * 0.06;
        let v = (0.35 * envelope * voice / 1.75 + noise).clamp(-1.0, 1.0);
        let s = ((v * f64::from(i16::MAX)).round() as i16).to_le_bytes();
        for _ in 0..channels {
            bytes.extend_from_slice(&s);
        }
    }
    Ok(clip(
        bytes,
        frames as f64 / rate_f,
        format!("clip-{key:016x}.wav"),
    ))
}

#[cfg(feature = "audio")]
fn clip(bytes: Vec<u8>, seconds: f64, name: String) -> Audio {
    Audio {
        format: "wav",
        base64: base64::engine::general_purpose::STANDARD
            .encode(&bytes)
            .into(),
        bytes: bytes.into(),
        seconds,
        name: name.into(),
    }
}

/// The clips of `path`: every `.wav` file of a directory (by name), or the
/// files a JSONL file names one per line (`{"path": "a.wav"}`, relative to
/// the JSONL file). Each must be a WAV file with samples; an error names the
/// file, and the line of the list.
#[cfg(feature = "audio")]
pub fn load_files(path: &Path) -> Result<Vec<Arc<Audio>>, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("--audio-files {}: {e}", path.display()))?;
    let files: Vec<(PathBuf, String)> = if meta.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| format!("--audio-files {}: {e}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x.eq_ignore_ascii_case("wav")))
            .collect();
        v.sort();
        v.into_iter()
            .map(|p| {
                let at = p.display().to_string();
                (p, at)
            })
            .collect()
    } else {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--audio-files {}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut v = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let at = format!("{}, line {}", path.display(), i + 1);
            let doc: serde_json::Value =
                serde_json::from_str(line).map_err(|e| format!("{at}: not JSON: {e}"))?;
            let p = doc
                .get("path")
                .and_then(|p| p.as_str())
                .ok_or_else(|| format!("{at}: field path (a string) is missing"))?;
            let p = base.join(p);
            let at = format!("{at}: {}", p.display());
            v.push((p, at));
        }
        v
    };
    if files.is_empty() {
        return Err(format!(
            "--audio-files {}: no .wav files there",
            path.display()
        ));
    }
    files
        .into_iter()
        .map(|(p, at)| {
            let bytes = std::fs::read(&p).map_err(|e| format!("{at}: {e}"))?;
            let info = wav_info(&bytes).map_err(|e| format!("{at}: {e}"))?;
            let name = p.file_name().map_or_else(
                || "audio.wav".to_owned(),
                |n| n.to_string_lossy().into_owned(),
            );
            Ok(Arc::new(clip(bytes, info.seconds(), name)))
        })
        .collect()
}

#[cfg(all(test, feature = "audio"))]
mod tests {
    use super::*;
    use batchbench_contract::dist::LengthDist;

    #[test]
    fn a_synthetic_clip_is_exact_and_seeded() {
        let spec = AudioSpec {
            per_request: 1,
            duration_ms: Some(LengthDist::Fixed {
                value: 1_500,
                vary: 500,
            }),
            sample_rate: 22_050,
            channels: 2,
            files: None,
        };
        let plan = AudioPlan::new(&spec).unwrap_or_else(|e| panic!("{e}"));
        for key in 0..20 {
            let a = plan.make(key).unwrap_or_else(|e| panic!("{e}"));
            let info = wav_info(&a.bytes).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!((info.sample_rate, info.channels), (22_050, 2));
            assert!((1.0..=2.0).contains(&a.seconds), "{}", a.seconds);
            assert!((info.seconds() - a.seconds).abs() < 1e-12);
            assert_eq!(a, plan.make(key).unwrap_or_else(|e| panic!("{e}")));
        }
        assert_ne!(plan.make(1).ok(), plan.make(2).ok());
    }

    #[test]
    fn files_that_do_not_decode_are_named() {
        let dir = std::env::temp_dir().join(format!("bb-audio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let good = synthetic(7, 8_000, 1, 4_000).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("a.wav"), &good.bytes).unwrap_or_else(|e| panic!("{e}"));
        let clips = load_files(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(clips.len(), 1);
        assert!((clips[0].seconds - 0.5).abs() < 1e-12);
        std::fs::write(dir.join("b.wav"), b"ID3 not a wav").unwrap_or_else(|e| panic!("{e}"));
        let e = load_files(&dir).unwrap_err();
        assert!(e.contains("b.wav") && e.contains("not a WAV"), "{e}");
        let list = dir.join("list.jsonl");
        std::fs::write(&list, "{\"path\": \"a.wav\"}\n{\"file\": 1}\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let e = load_files(&list).unwrap_err();
        assert!(
            e.contains("list.jsonl, line 2") && e.contains("path"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
