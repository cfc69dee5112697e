//! Run-spec files: `--config FILE` reads one (TOML, or the JSON that every run
//! records as `run.spec` in its `--summary-json`), `--print-config` writes one.

use crate::exit::Failure;
use batchbench_contract::spec::RunSpec;
use std::path::Path;

/// Reads a run spec. A `.json` file, or one whose first character is `{`, is
/// JSON: a bare spec, or a `--summary-json` document whose `run.spec` is taken;
/// anything else is TOML. Errors name the file, the line and the field.
pub fn load(path: &Path) -> Result<RunSpec, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::bad(format!("--config {}: {e}", path.display())))?;
    let is_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        || text.trim_start().starts_with('{');
    if is_json {
        let mut doc: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Failure::bad(format!("--config {}: {e}", path.display())))?;
        if let Some(spec) = doc.get_mut("run").and_then(|r| r.get_mut("spec")) {
            doc = spec.take();
        }
        serde_json::from_value(doc)
            .map_err(|e| Failure::bad(format!("--config {}: not a run spec: {e}", path.display())))
    } else {
        toml::from_str(&text).map_err(|e| {
            let at = e
                .span()
                .map(|s| {
                    format!(
                        " (line {})",
                        text[..s.start.min(text.len())].matches('\n').count() + 1
                    )
                })
                .unwrap_or_default();
            Failure::bad(format!("--config {}{at}: {}", path.display(), e.message()))
        })
    }
}

/// Drops `null` members (TOML has no null; an absent optional field reads back
/// as absent).
fn strip_nulls(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// The spec as a TOML document (what `--print-config` prints).
pub fn to_toml(spec: &RunSpec) -> Result<String, Failure> {
    let mut v = serde_json::to_value(spec).map_err(Failure::failed)?;
    strip_nulls(&mut v);
    toml::to_string(&v)
        .map_err(|e| Failure::failed_msg(format!("cannot write the spec as TOML: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::spec::PluginSpec;

    #[test]
    fn a_spec_round_trips_through_toml_and_json() {
        let mut spec = RunSpec::new(PluginSpec::new(
            "finite_batch",
            serde_json::json!({"users": 4, "requests_per_user": 2,
                "input": {"kind": "fixed", "value": 64, "vary": 0}, "prefix_overlap": 0.5}),
        ));
        spec.seed = Some(7);
        spec.target.stream = true;
        spec.routers.push(PluginSpec::new(
            "user_tag",
            serde_json::json!({"prefix": null}),
        ));
        let dir = tempfile::tempdir().unwrap();
        let toml_path = dir.path().join("run.toml");
        std::fs::write(&toml_path, to_toml(&spec).unwrap()).unwrap();
        let back = load(&toml_path).unwrap();
        // `prefix: null` reads back as an absent prefix: the same config.
        let mut want = spec.clone();
        want.routers[0].config = serde_json::json!({});
        assert_eq!(back, want);

        let json_path = dir.path().join("summary.json");
        let doc = serde_json::json!({"run": {"spec": spec}, "summary": {}});
        std::fs::write(&json_path, doc.to_string()).unwrap();
        assert_eq!(load(&json_path).unwrap(), spec);
    }

    #[test]
    fn errors_name_the_file_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.toml");
        std::fs::write(
            &p,
            "seed = 1\n[workload]\nname = \"finite_batch\"\n[target]\nhots = \"x\"\n",
        )
        .unwrap();
        let e = format!("{:#}", load(&p).unwrap_err().error);
        assert!(
            e.contains("bad.toml") && e.contains("line 5") && e.contains("hots"),
            "{e}"
        );
        let missing = dir.path().join("none.toml");
        assert!(load(&missing).unwrap_err().is_bad_input());
    }
}
