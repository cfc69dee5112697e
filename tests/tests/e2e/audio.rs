//! Audio in: synthetic clips that decode to their planned duration with an
//! independent reader (Python's `wave`), chat's `input_audio` parts counted
//! by the simulator, transcriptions and translations uploaded as forms with
//! the real-time factor the simulator's latency model implies, real files,
//! and bad input refused before anything is sent.

use base64::Engine as _;
use batchbench_simulator::SimConfig;
use batchbench_simulator::apis::Api;
use batchbench_tests::{SimServer, cmd, read_jsonl, run_batchbench};
use std::sync::{Arc, Mutex, PoisonError};

/// `(frames, rate, channels, sample width)` of each WAV file, read by
/// Python's standard `wave` module.
fn python_wave(paths: &[std::path::PathBuf]) -> Vec<(u64, u64, u64, u64)> {
    let script = "import sys, wave\nfor p in sys.argv[1:]:\n    w = wave.open(p, 'rb')\n    print(w.getnframes(), w.getframerate(), w.getnchannels(), w.getsampwidth())\n";
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(paths)
        .output()
        .unwrap_or_else(|e| panic!("python3: {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: Vec<u64> = l.split(' ').filter_map(|x| x.parse().ok()).collect();
            (v[0], v[1], v[2], v[3])
        })
        .collect()
}

/// A server that keeps every request body and answers a chat completion.
fn capturing() -> (String, Arc<Mutex<Vec<serde_json::Value>>>) {
    let bodies: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let kept = bodies.clone();
    let addr = batchbench_tests::http::serve(move |req| {
        let v: serde_json::Value = serde_json::from_slice(&req.body).unwrap_or_default();
        kept.lock().unwrap_or_else(PoisonError::into_inner).push(v);
        let body = serde_json::json!({"id": "c", "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1}});
        ("200 OK", "application/json", body.to_string().into_bytes())
    });
    (format!("http://{addr}"), bodies)
}

/// The clips of the captured chat bodies, written out as files.
fn clips(bodies: &[serde_json::Value], dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut paths = Vec::new();
    for b in bodies {
        for part in b["messages"][0]["content"].as_array().into_iter().flatten() {
            if part["type"] == "input_audio" {
                assert_eq!(part["input_audio"]["format"], "wav");
                let data = base64::engine::general_purpose::STANDARD
                    .decode(part["input_audio"]["data"].as_str().unwrap_or_default())
                    .unwrap_or_else(|e| panic!("{e}"));
                let p = dir.join(format!("{}.wav", paths.len()));
                std::fs::write(&p, data).unwrap_or_else(|e| panic!("{e}"));
                paths.push(p);
            }
        }
    }
    paths
}

#[test]
fn synthetic_clips_decode_with_pythons_wave_to_their_planned_duration() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let tok = batchbench_tests::qwen();
    // Fixed: 1,234 ms at 44.1 kHz, stereo, two clips a request.
    let (url, bodies) = capturing();
    let r = run_batchbench(&cmd(
        "--host {} --tokenizer-model {} --audio-ms 1234 --audio-sample-rate 44100 --audio-channels 2 --audio-per-request 2 --users 2 --requests-per-user 3 --input-tokens 8 --output-tokens 1 --seed 5",
        &[&url, &tok],
    ));
    assert_eq!(r.code, 0);
    let paths = clips(
        &bodies.lock().unwrap_or_else(PoisonError::into_inner),
        dir.path(),
    );
    assert_eq!(paths.len(), 12);
    for (frames, rate, channels, width) in python_wave(&paths) {
        assert_eq!((rate, channels, width), (44_100, 2, 2));
        let seconds = frames as f64 / rate as f64;
        assert!(
            (seconds - 1.234).abs() <= 1.0 / 44_100.0,
            "{frames} frames: {seconds} s"
        );
    }
    let audio = r.summary("audio");
    assert!(
        (audio["seconds"].as_f64().unwrap_or(0.0) - 12.0 * 1.234).abs() < 1e-3,
        "{audio}"
    );
    assert_eq!(audio["requests"], 6);
    // Drawn: 1,000 to 2,000 ms at 22,050 Hz, each a whole millisecond
    // within one sample period, and not all the same.
    let (url, bodies) = capturing();
    let lines = dir.path().join("requests.jsonl");
    let r = run_batchbench(&cmd(
        "--host {} --tokenizer-model {} --audio-ms 1500 --audio-vary 500 --audio-sample-rate 22050 --users 2 --requests-per-user 5 --input-tokens 8 --output-tokens 1 --seed 6 --requests-jsonl {}",
        &[&url, &tok, &lines.display().to_string()],
    ));
    assert_eq!(r.code, 0);
    let sub = dir.path().join("drawn");
    std::fs::create_dir_all(&sub).unwrap_or_else(|e| panic!("{e}"));
    let paths = clips(&bodies.lock().unwrap_or_else(PoisonError::into_inner), &sub);
    let mut seen = Vec::new();
    for (frames, rate, channels, _) in python_wave(&paths) {
        assert_eq!((rate, channels), (22_050, 1));
        let ms = frames as f64 * 1000.0 / rate as f64;
        assert!((1000.0..=2000.0).contains(&ms.round()), "{ms} ms");
        assert!((ms - ms.round()).abs() <= 1000.0 / 22_050.0, "{ms} ms");
        seen.push(frames);
    }
    seen.sort_unstable();
    seen.dedup();
    assert!(seen.len() > 3, "durations drawn: {seen:?}");
    // Each request's record says the seconds it carried.
    let recorded: f64 = read_jsonl(&lines)
        .iter()
        .filter_map(|l| l["audio_seconds"].as_f64())
        .sum();
    let decoded: f64 = python_wave(&paths)
        .iter()
        .map(|(f, rate, _, _)| *f as f64 / *rate as f64)
        .sum();
    assert!((recorded - decoded).abs() < 1e-9, "{recorded} {decoded}");
}

#[test]
fn chat_audio_parts_count_in_the_prompt_at_the_servers_rate() {
    let sim = SimServer::recording("qwen");
    let cfg = SimConfig::default();
    let template = u64::from(cfg.template_overhead_tokens + cfg.message_overhead_tokens);
    let r = sim.batchbench(
        "--audio-ms 2000 --users 2 --requests-per-user 2 --input-tokens 32 --output-tokens 4 --seed 2",
        &[],
    );
    assert_eq!(r.code, 0);
    let log = sim.requests();
    assert_eq!(log.len(), 4);
    for e in &log {
        // Two seconds at 25 tokens a second.
        assert_eq!(e.prompt_tokens, 32 + template + 50, "{e:?}");
    }
}

#[test]
fn a_transcription_reports_the_real_time_factor_its_latency_model_implies() {
    // The encoder takes a second per audio second: a 1 s clip's reply
    // comes after 1 s, a real-time factor of 1 (long beside the client's
    // own milliseconds, so that they move the factor by well under 2%).
    let sim = SimServer::start(
        SimConfig {
            audio_ms_per_second: 1000.0,
            record_requests: true,
            ..SimConfig::default()
        },
        "qwen",
    );
    let cfg = SimConfig::default();
    let template = u64::from(cfg.template_overhead_tokens + cfg.message_overhead_tokens);
    for (stream, task, endpoint) in [
        ("", "transcription", "/v1/audio/transcriptions"),
        ("--stream", "translation", "/v1/audio/translations"),
    ] {
        let before = sim.requests().len();
        let r = sim.batchbench(
            &format!("--codec openai_transcriptions --codec-config {{}} --audio-ms 1000 --users 2 --requests-per-user 3 --input-tokens 16 --seed 3 {stream}"),
            &[&format!(r#"{{"task": "{task}"}}"#)],
        );
        assert_eq!(r.code, 0, "{task}");
        let url = r
            .json
            .as_ref()
            .map(|j| j["run"]["url"].to_string())
            .unwrap_or_default();
        assert!(url.contains(endpoint), "{url}");
        let log = sim.requests();
        assert_eq!(log.len() - before, 6);
        for e in &log[before..] {
            // The prompt text, the clip's 25 tokens, and a transcript of
            // three tokens a second.
            assert_eq!(
                (e.api, e.prompt_tokens, e.completion_tokens, e.stream),
                (
                    Api::Transcription,
                    16 + 25 + template,
                    3,
                    !stream.is_empty()
                ),
                "{e:?}"
            );
        }
        let a = r.summary("audio");
        assert_eq!(a["requests"], 6, "{a}");
        assert!(
            (a["seconds"].as_f64().unwrap_or(0.0) - 6.0).abs() < 1e-9,
            "{a}"
        );
        for k in ["rtf_p50", "rtf_mean"] {
            let rtf = a[k].as_f64().unwrap_or(0.0);
            assert!((rtf - 1.0).abs() < 0.02, "{task} {k}: {rtf}");
        }
        if stream.is_empty() {
            // vLLM's reply counts the audio's duration, no tokens.
            assert_eq!(r.count("total_completion_tokens"), 0);
        } else {
            assert_eq!(r.count("total_completion_tokens"), 6 * 3);
            let ttft = r.summary("ttft")["p50_ms"].as_f64().unwrap_or(0.0);
            assert!((ttft / 1000.0 - 1.0).abs() < 0.02, "TTFT {ttft} ms");
        }
    }
}

#[test]
fn real_clips_are_read_and_bad_audio_is_refused_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // Two clips written by Python's wave module: 0.5 s and 1.25 s.
    let script = "import sys, wave\nfor name, n in (('a.wav', 4000), ('b.wav', 10000)):\n    w = wave.open(sys.argv[1] + '/' + name, 'wb')\n    w.setnchannels(1); w.setsampwidth(2); w.setframerate(8000)\n    w.writeframes(bytes(2 * n))\n    w.close()\n";
    let ok = std::process::Command::new("python3")
        .args(["-c", script, &dir.path().display().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok);
    let sim = SimServer::recording("qwen");
    let lines = dir.path().join("requests.jsonl");
    let r = sim.batchbench(
        "--codec openai_transcriptions --audio-files {} --users 2 --requests-per-user 4 --input-tokens 4 --seed 8 --requests-jsonl {}",
        &[&dir.path().display().to_string(), &lines.display().to_string()],
    );
    assert_eq!(r.code, 0);
    let secs: Vec<f64> = read_jsonl(&lines)
        .iter()
        .filter_map(|l| l["audio_seconds"].as_f64())
        .collect();
    assert_eq!(secs.len(), 8);
    assert!(secs.iter().all(|s| *s == 0.5 || *s == 1.25), "{secs:?}");
    // A file that does not decode, a missing path, a codec without audio,
    // audio for a codec that cannot carry it, a shape without clips: exit 2.
    std::fs::write(dir.path().join("c.wav"), b"ID3\x04 not a wave file")
        .unwrap_or_else(|e| panic!("{e}"));
    let quiet = SimServer::recording("qwen");
    for line in [
        format!(
            "--codec openai_transcriptions --audio-files {}",
            dir.path().display()
        ),
        "--audio-files /nonexistent/clips".to_owned(),
        "--codec openai_transcriptions".to_owned(),
        "--codec openai_completions --audio-ms 1000".to_owned(),
        "--audio-channels 2".to_owned(),
        "--audio-ms 0".to_owned(),
    ] {
        let r = quiet.batchbench(
            &format!("{line} --input-tokens 4 --requests-per-user 1"),
            &[],
        );
        assert_eq!(r.code, 2, "{line}");
    }
    assert!(quiet.requests().is_empty(), "nothing sent");
}
