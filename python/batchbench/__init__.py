"""batchbench: benchmark LLM-serving systems under production-shaped load.

The engine is Rust (``batchbench._core``); this module validates what Python callers
pass, names any bad key in a ``ValueError``, releases the GIL while a run goes on,
and turns ``KeyboardInterrupt`` into a cancelled run with a partial report.

Entry points:

- :func:`run_benchmark` with :func:`finite_mode` / :func:`long_running_mode` and
  :func:`request_entry`: users sending request bodies you wrote.
- :func:`generate_requests`: request entries whose prompts are exactly N tokens.
- :func:`run_agent`: synthetic agent loops or trajectory replay, with the options
  of the ``batchbench-agent`` command line.
- :func:`sweep` and :func:`capacity`: a series of runs over one load dimension,
  and the highest load that meets an SLO.
- :func:`load_results` and :func:`report`: a results directory (``output_dir=``)
  read back as records, and the HTML report of one or more.
- :func:`merge`: the results directories of a run's shards (``shard="I/N"``)
  joined into the one run's, exactly.
- :class:`Simulator`: the built-in OpenAI-compatible simulator, for tests.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _core

__version__: str = _core.__version__

__all__ = [
    "BatchbenchError",
    "ConfigurationError",
    "TokenizerError",
    "PluginError",
    "RunError",
    "Simulator",
    "finite_mode",
    "long_running_mode",
    "request_entry",
    "run_benchmark",
    "generate_requests",
    "run_agent",
    "sweep",
    "capacity",
    "load_results",
    "report",
    "merge",
    "analyze",
    "plugins",
    "load_plugin",
    "count_tokens",
    "__version__",
]


class BatchbenchError(Exception):
    """Base of every error batchbench raises."""


class ConfigurationError(BatchbenchError, ValueError):
    """A configuration key is unknown, missing, of the wrong type or out of range."""


class TokenizerError(BatchbenchError):
    """A tokenizer could not be found, read or used."""


class PluginError(BatchbenchError):
    """A plugin failed to build or run."""


class RunError(BatchbenchError):
    """A run could not complete."""


_ERRORS = {
    "config": ConfigurationError,
    "tokenizer": TokenizerError,
    "plugin": PluginError,
    "run": RunError,
}


def _raise(kind: str, message: str) -> None:
    raise _ERRORS.get(kind, BatchbenchError)(message)


def _type_name(types: Tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types)


def _check_type(where: str, key: str, value: Any, types: Tuple[type, ...]) -> None:
    # bool is an int to Python, never to us.
    if isinstance(value, bool) and bool not in types:
        ok = False
    else:
        ok = isinstance(value, types)
    if not ok:
        raise ConfigurationError(
            f"{where} key {key!r} must be {_type_name(types)}, got {type(value).__name__}"
        )


def _check_keys(where: str, given: Mapping[str, Any], spec: Mapping[str, Tuple[type, ...]]) -> None:
    if not isinstance(given, Mapping):
        raise ConfigurationError(f"{where} must be a dict, got {type(given).__name__}")
    for key, value in given.items():
        if key not in spec:
            known = ", ".join(sorted(spec))
            raise ConfigurationError(f"unknown {where} key {key!r}; known keys: {known}")
        if value is not None:
            _check_type(where, key, value, spec[key])


def _positive_int(where: str, key: str, value: Any) -> int:
    _check_type(where, key, value, (int,))
    if value < 1:
        raise ConfigurationError(f"{where} key {key!r} must be >= 1, got {value}")
    return int(value)


def _non_negative_int(where: str, key: str, value: Any) -> int:
    _check_type(where, key, value, (int,))
    if value < 0:
        raise ConfigurationError(f"{where} key {key!r} must be >= 0, got {value}")
    return int(value)


def _positive_number(where: str, key: str, value: Any) -> float:
    _check_type(where, key, value, (int, float))
    if not (math.isfinite(value) and value > 0):
        raise ConfigurationError(f"{where} key {key!r} must be a positive number, got {value}")
    return float(value)


def finite_mode(requests_per_user: int) -> Dict[str, Any]:
    """Every user sends ``requests_per_user`` requests, one after another."""
    n = _positive_int("finite_mode", "requests_per_user", requests_per_user)
    return {"kind": "finite", "requests_per_user": n}


def long_running_mode(duration_secs: float) -> Dict[str, Any]:
    """Every user keeps sending, recycling its requests, for ``duration_secs``
    seconds; requests in flight at the end complete."""
    d = _positive_number("long_running_mode", "duration_secs", duration_secs)
    return {"kind": "long_running", "duration_secs": d}


def request_entry(body: Mapping[str, Any], line_idx: int = 0, input_tokens: int = 0) -> Dict[str, Any]:
    """One request: its JSON ``body`` (sent as given), its line in your dataset, and
    its prompt token count when known (reported beside the server's count)."""
    if not isinstance(body, Mapping):
        raise ConfigurationError(f"request_entry body must be a dict, got {type(body).__name__}")
    if "messages" not in body and "prompt" not in body:
        raise ConfigurationError("request_entry body needs 'messages' (or 'prompt')")
    try:
        json.dumps(body)
    except (TypeError, ValueError) as e:
        raise ConfigurationError(f"request_entry body is not JSON-serialisable: {e}") from None
    return {
        "body": dict(body),
        "line_idx": _non_negative_int("request_entry", "line_idx", line_idx),
        "input_tokens": _non_negative_int("request_entry", "input_tokens", input_tokens),
    }


_BENCHMARK_KEYS: Dict[str, Tuple[type, ...]] = {
    "endpoint": (str, list, tuple),
    "routing": (str,),
    "api_key": (str,),
    "user_count": (int,),
    "mode": (dict,),
    "request_body": (dict,),
    "requests": (list, tuple),
    "request_timeout_secs": (int, float),
    "max_retries": (int,),
    "retry_delay_ms": (int,),
    "headers": (dict,),
    "verbose": (bool,),
    "sglang": (bool,),
    "codec": (str,),
    "codec_config": (dict,),
    "seed": (int,),
    "dry_run": (bool,),
    "output_lognorm": (dict,),
    "load": (dict,),
    "slo": (str, list, tuple),
    "reasoning": (dict,),
    "response_format": (dict,),
    "model_mix": (dict,),
}


def _entry(where: str, value: Any) -> Dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where} must be a request_entry(...), got {type(value).__name__}")
    if set(value) - {"body", "line_idx", "input_tokens"} or "body" not in value:
        raise ConfigurationError(
            f"{where} must be a request_entry(...) (keys body, line_idx, input_tokens)"
        )
    return request_entry(value["body"], value.get("line_idx", 0), value.get("input_tokens", 0))


def _slo(where: str, value: Any) -> List[str]:
    """SLO bounds as a list of strings: a comma-separated string or a list."""
    items = value.split(",") if isinstance(value, str) else list(value)
    bounds = []
    for i, b in enumerate(items):
        if not isinstance(b, str):
            raise ConfigurationError(f"{where}[{i}] must be str, got {type(b).__name__}")
        if b.strip():
            bounds.append(b.strip())
    if not bounds:
        raise ConfigurationError(f"{where} holds no bound (for example 'ttft_p99<=500ms')")
    return bounds


def _validate_benchmark(config: Mapping[str, Any]) -> Dict[str, Any]:
    _check_keys("config", config, _BENCHMARK_KEYS)
    for key in ("endpoint", "user_count", "mode"):
        if config.get(key) is None:
            hint = {
                "mode": " (batchbench.finite_mode(...) or batchbench.long_running_mode(...))",
                "endpoint": " (the full URL, for example http://localhost:8000/v1/chat/completions)",
                "user_count": "",
            }[key]
            raise ConfigurationError(f"config key {key!r} is required{hint}")
    out = {k: v for k, v in config.items() if v is not None}
    if isinstance(config["endpoint"], (list, tuple)):
        urls = list(config["endpoint"])
        if not urls:
            raise ConfigurationError("config key 'endpoint' is an empty list")
        for i, u in enumerate(urls):
            if not isinstance(u, str):
                raise ConfigurationError(f"endpoint[{i}] must be str, got {type(u).__name__}")
        out["endpoint"] = urls
    out["user_count"] = _positive_int("config", "user_count", config["user_count"])
    mode = config["mode"]
    if mode.get("kind") == "finite":
        out["mode"] = finite_mode(mode.get("requests_per_user"))
    elif mode.get("kind") == "long_running":
        out["mode"] = long_running_mode(mode.get("duration_secs"))
    else:
        raise ConfigurationError(
            "config key 'mode' must come from batchbench.finite_mode(...) or batchbench.long_running_mode(...)"
        )
    if "request_body" in out:
        out["request_body"] = _entry("config key 'request_body'", out["request_body"])
    if "requests" in out:
        out["requests"] = [_entry(f"config key 'requests'[{i}]", e) for i, e in enumerate(out["requests"])]
    if not out.get("requests") and "request_body" not in out:
        raise ConfigurationError("config needs 'requests' (a list of request_entry) or 'request_body'")
    if "request_timeout_secs" in out:
        out["request_timeout_secs"] = _positive_number("config", "request_timeout_secs", out["request_timeout_secs"])
    for key in ("max_retries", "retry_delay_ms", "seed"):
        if key in out:
            out[key] = _non_negative_int("config", key, out[key])
    if "headers" in out:
        for k, v in out["headers"].items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise ConfigurationError("config key 'headers' must map str to str")
    if "slo" in out:
        out["slo"] = _slo("config key 'slo'", out["slo"])
    if "output_lognorm" in out:
        _check_keys(
            "output_lognorm",
            out["output_lognorm"],
            {"mu": (int, float), "median": (int, float), "sigma": (int, float), "max": (int, float)},
        )
        if "sigma" not in out["output_lognorm"]:
            raise ConfigurationError("output_lognorm key 'sigma' is required")
    if "reasoning" in out:
        knobs = out["reasoning"]
        _check_keys(
            "reasoning",
            knobs,
            {"effort": (str,), "budget_tokens": (int,), "off": (bool,), "history": (str,)},
        )
        for key, choices in (("effort", ("none", "minimal", "low", "medium", "high")), ("history", ("keep", "drop"))):
            if knobs.get(key) is not None and knobs[key] not in choices:
                raise ConfigurationError(
                    f"config key 'reasoning': {key} {knobs[key]!r} is not one of {', '.join(choices)}"
                )
    if "response_format" in out:
        fmt = out["response_format"]
        _check_keys("response_format", fmt, {"type": (str,), "schemas": (list, tuple)})
        if fmt.get("type") not in ("json_object", "json_schema"):
            raise ConfigurationError(
                f"config key 'response_format': type {fmt.get('type')!r} is not one of json_object, json_schema"
            )
        if fmt["type"] == "json_schema" and not fmt.get("schemas"):
            raise ConfigurationError("config key 'response_format': json_schema needs 'schemas', a list of files")
        if "schemas" in fmt:
            out["response_format"] = {**fmt, "schemas": [str(p) for p in fmt["schemas"]]}
    if "model_mix" in out:
        mix = out["model_mix"]
        _check_keys(
            "model_mix",
            mix,
            {"models": (list, tuple), "selection": (str,), "adapter_field": (str,), "check_served": (bool,)},
        )
        if not mix.get("models"):
            raise ConfigurationError("config key 'model_mix': models needs at least one model")
        for i, m in enumerate(mix["models"]):
            _check_keys(
                f"model_mix.models[{i}]",
                m,
                {"name": (str,), "weight": (int, float), "base": (str,), "tokenizer": (str,)},
            )
            for key in ("name", "weight"):
                if key not in m:
                    raise ConfigurationError(f"config key 'model_mix': models[{i}] needs '{key}'")
        for key, choices in (
            ("selection", ("random", "round_robin", "session")),
            ("adapter_field", ("model", "lora_path", "lora_id")),
        ):
            if mix.get(key) is not None and mix[key] not in choices:
                raise ConfigurationError(
                    f"config key 'model_mix': {key} {mix[key]!r} is not one of {', '.join(choices)}"
                )
        out["model_mix"] = {**mix, "models": [dict(m) for m in mix["models"]]}
    return out


def _wait(run: Any, on_interrupt: Optional[str] = None) -> Any:
    """Waits for a run with the GIL released; the first Ctrl+C cancels it and waits
    for the partial result, a second one stops waiting."""
    interrupted = False
    while True:
        try:
            out = run.wait(0.1)
        except KeyboardInterrupt:
            if interrupted:
                raise
            interrupted = True
            if on_interrupt:
                print(on_interrupt, file=sys.stderr, flush=True)
            run.cancel()
            continue
        if out is not None:
            return out


def _result(out: Any) -> Any:
    if isinstance(out, tuple) and out and out[0] == "error":
        _raise(out[1], out[2])
    if isinstance(out, tuple) and out and out[0] == "report":
        return json.loads(out[1])
    return out


def run_benchmark(config: Mapping[str, Any]) -> Dict[str, Any]:
    """Runs ``user_count`` concurrent users against ``endpoint`` and returns the
    report: totals, throughputs, latency percentiles (``latency_p50_ms`` ...), the
    ``failures`` list and per-request ``records`` (a list of dicts, ready for
    ``pandas.DataFrame``). Request ``m`` of user ``n`` uses
    ``requests[m * user_count + n]`` (recycled when the list is shorter).

    ``load`` releases requests at a rate instead of each user's next request after
    its reply, with the keys of a run spec's ``[load]`` table: ``{"rate": 50,
    "arrival": "poisson", "max_concurrency": 16, "warmup_requests": 100}``
    (``arrival`` is ``constant``, ``poisson`` or ``gamma`` with ``burstiness``;
    ``stages`` is a list of ``{"secs", "rate"}``; ``ramp_up_secs``,
    ``warmup_secs``, ``at_deadline``; ``"warmup": "auto"`` finds where the
    run's transient ends and leaves the requests due before it out, the
    report's ``load["steady"]`` giving the steady window; ``target_ci`` stops the run once every
    figure it is judged by has a 95% interval within that many percent of it,
    the long-running mode's duration being the cap). The report's ``load`` then
    holds the achieved rate, latency from the intended send time, the client
    queue wait and the send lag, and with ``target_ci`` its ``convergence``.

    ``endpoint`` may be a list of full URLs with one path: a fleet, each request
    sent to the endpoint that ``routing`` (``round_robin``, the default,
    ``random``, ``least_outstanding``, ``session_affinity``,
    ``prefix_affinity``) picks; the report's ``endpoints`` then holds each
    endpoint's share (requests, latency, cached tokens), ``routing`` the
    policy, and each record its ``endpoint`` index.

    ``reasoning`` asks a reasoning model for an effort, a thinking budget or
    no thinking, and says what goes back of earlier reasoning, with the keys of
    a run spec's ``[target.reasoning]`` table: ``{"effort": "low"}``,
    ``{"budget_tokens": 2048}`` (Anthropic's messages), ``{"off": True}``,
    ``{"history": "drop"}``. A knob the codec's API cannot carry raises
    ``ConfigurationError`` before anything is sent.

    ``response_format`` asks for structured outputs, with the keys of a run
    spec's ``[target.response_format]`` table: ``{"type": "json_object"}``, or
    ``{"type": "json_schema", "schemas": ["pet.json"]}`` (several rotate over
    the requests). Every answer is validated: the report's ``structured``
    holds the valid share, its interval and the invalid answers by reason.

    ``model_mix`` sends several models (base models and LoRA adapters), with
    the keys of a run spec's ``[target.mix]`` table: ``{"models": [{"name":
    "base", "weight": 0.5}, {"name": "sql-lora", "base": "base", "weight":
    0.5}], "selection": "round_robin"}`` (``random``, the default,
    ``round_robin`` or ``session``; ``adapter_field`` ``model``, ``lora_path``
    or ``lora_id``). Each body's ``model`` is the one picked; the report's
    ``models`` holds each model's share and each record its ``model``.

    ``slo`` judges the run against latency bounds, as ``--slo`` does: a string
    ``"ttft_p99<=500ms,e2e<=20s"`` or a list of bounds. The report's ``slo`` then
    holds a verdict per bound (``bounds``), ``passed``, ``good_requests`` and
    ``goodput`` (requests per second that met every per-request bound).

    With ``dry_run`` nothing is sent and ``report["run"]["plan"]`` lists the plan.
    Ctrl+C (``KeyboardInterrupt``) cancels the run and returns the partial report,
    with ``report["interrupted"]`` set.
    """
    cfg = _validate_benchmark(config)
    run = _core.start_benchmark(json.dumps(cfg))
    return _result(_wait(run))


_GENERATE_KEYS: Dict[str, Tuple[type, ...]] = {
    "count": (int,),
    "prefix_overlap": (int, float),
    "target_tokens": (int,),
    "tokenizer_model": (str,),
    "dist_mode": (str,),
    "dist_mu": (int, float),
    "dist_median": (int, float),
    "dist_sigma": (int, float),
    "dist_max": (int, float),
    "seed": (int,),
}


def generate_requests(options: Mapping[str, Any], model: Optional[str] = None) -> List[Dict[str, Any]]:
    """Request entries (for ``run_benchmark``'s ``requests``) whose prompts re-encode
    to exactly their token targets with ``tokenizer_model``: ``count`` prompts of
    ``target_tokens`` (``dist_mode="fixed"``) or log-normal lengths
    (``dist_mode="log_normal"`` with ``dist_median`` or ``dist_mu``, ``dist_sigma``,
    optional ``dist_max``); the first ``prefix_overlap`` of the target is shared by
    every prompt. ``model`` fills each body's model (default: the tokenizer)."""
    _check_keys("options", options, _GENERATE_KEYS)
    for key in ("count", "target_tokens", "tokenizer_model"):
        if options.get(key) is None:
            raise ConfigurationError(f"options key {key!r} is required")
    opts = {k: v for k, v in options.items() if v is not None}
    _positive_int("options", "count", opts["count"])
    _positive_int("options", "target_tokens", opts["target_tokens"])
    if model is not None and not isinstance(model, str):
        raise ConfigurationError(f"model must be str, got {type(model).__name__}")
    out = _core.generate_requests(json.dumps(opts), model if model is not None else opts["tokenizer_model"])
    return _result(out)


def count_tokens(tokenizer_model: str, text: Union[str, Sequence[str]]) -> Any:
    """Token ids of ``text`` under ``tokenizer_model`` (no special tokens added); for
    a list of texts, a list of id lists (the tokenizer is loaded once)."""
    if isinstance(text, str):
        return _result(_core.count_tokens(tokenizer_model, [text]))[0]
    return _result(_core.count_tokens(tokenizer_model, list(text)))


def plugins() -> List[Dict[str, Any]]:
    """Every registered plugin: kind, name, description, example config, and origin
    (``"built-in"`` or the file a loaded plugin came from)."""
    return json.loads(_core.plugins())


def load_plugin(path: Union[str, "os.PathLike[str]"]) -> List[Dict[str, str]]:
    """Loads an external plugin into this process: a WebAssembly component
    (``.wasm``, sandboxed) or a native library (trusted code only). Its plugins are
    then selected by name like the built-ins (``run_agent(workload=..., router=[...],
    reporter=[...])``) and listed by :func:`plugins`. Returns ``[{"kind", "name"}]``.
    Raises :class:`ConfigurationError` for a missing file and :class:`PluginError`
    for one that does not load. Loading the same file again is a no-op."""
    out = _result(_core.load_plugin(os.fspath(path)))
    return [{"kind": kind, "name": name} for kind, name in out]


def _merge(
    where: str, config: Union[Mapping[str, Any], str, "os.PathLike[str]", None], options: Mapping[str, Any]
) -> Dict[str, Any]:
    """A command line's options: a run-spec file (``--config``) or a dict,
    then the keyword options over it."""
    merged: Dict[str, Any] = {}
    if isinstance(config, (str, os.PathLike)):
        merged["config"] = os.fspath(config)
    elif config is not None:
        if not isinstance(config, Mapping):
            raise ConfigurationError(f"{where} config must be a dict or a run-spec file, got {type(config).__name__}")
        merged.update(config)
    merged.update(options)
    return merged


_MANAGED = {"summary_json", "requests_jsonl", "help", "version"}


def _argv(program: str, options: Mapping[str, Any], series: Optional[str] = None) -> List[str]:
    flags = dict(_core.cli_flags(program, series))
    argv = [program] + ([series] if series else [])
    for key, value in options.items():
        flag = key.replace("_", "-")
        if flag not in flags or key in ("help", "version"):
            where = f"{program} {series}" if series else program
            raise ConfigurationError(f"unknown {where} option {key!r}")
        if value is None:
            continue
        if not flags[flag]:
            if not isinstance(value, bool):
                raise ConfigurationError(
                    f"{program} option {key!r} is a switch: pass True or False, got {type(value).__name__}"
                )
            if value:
                argv.append(f"--{flag}")
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (str, int, float, os.PathLike)):
                raise ConfigurationError(
                    f"{program} option {key!r} takes a value (str, int or float), got {type(v).__name__}"
                )
            argv += [f"--{flag}", os.fspath(v) if isinstance(v, os.PathLike) else str(v)]
    return argv


def run_agent(
    config: Union[Mapping[str, Any], str, "os.PathLike[str]", None] = None, **options: Any
) -> Dict[str, Any]:
    """Runs ``batchbench-agent`` in process: synthetic agent loops, or trajectory
    replay with ``agent_plans_jsonl``. Options are the command line's flags with
    underscores (``max_active_agents=8``, ``ignore_eos=True``), as a dict, keyword
    arguments, or both. ``config`` may also be a run-spec file (TOML, or a recorded
    summary JSON), as ``--config`` on the command line: the options then override
    it. Returns ``{"exit_code", "summary", "run", "records"}``; ``records`` holds
    one dict per request. Ctrl+C cancels the run and returns the partial result
    (exit code 130)."""
    merged = _merge("run_agent", config, options)
    for key in ("summary_json", "requests_jsonl"):
        if key in merged:
            raise ConfigurationError(f"run_agent returns the {key.replace('_json', '')} itself: drop {key!r}")
    argv = _argv("batchbench-agent", merged)
    with tempfile.TemporaryDirectory(prefix="batchbench-") as tmp:
        summary_path = os.path.join(tmp, "summary.json")
        records_path = os.path.join(tmp, "requests.jsonl")
        argv += ["--summary-json", summary_path, "--requests-jsonl", records_path]
        if "dry_run" not in merged and "quiet" not in merged:
            argv.append("--quiet")
        sys.stdout.flush()
        code = _result(_wait(_core.start_cli("batchbench-agent", argv)))
        if code == 2:
            raise ConfigurationError("batchbench-agent rejected the options (exit code 2): see the message above")
        summary: Dict[str, Any] = {}
        if os.path.exists(summary_path):
            with open(summary_path, encoding="utf-8") as f:
                summary = json.load(f)
        records: List[Dict[str, Any]] = []
        if os.path.exists(records_path):
            with open(records_path, encoding="utf-8") as f:
                records = [json.loads(line) for line in f if line.strip()]
    if code not in (0, 130) and not summary:
        raise RunError(f"batchbench-agent failed (exit code {code}): see the message above")
    return {
        "exit_code": code,
        "summary": summary.get("summary", {}),
        "run": summary.get("run", {}),
        "records": records,
    }


def _read_lines(path: str) -> List[Dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _load_run(path: str) -> Dict[str, Any]:
    doc = _read_json(os.path.join(path, "run.json"))
    return {
        "kind": "run",
        "path": path,
        "format_version": doc["version"],
        "run": doc["run"],
        "summary": doc["summary"],
        "requests": _read_lines(os.path.join(path, "requests.jsonl")),
        "trajectories": _read_lines(os.path.join(path, "trajectories.jsonl")),
        "histograms": _read_json(os.path.join(path, "histograms.json")),
        "timeseries": _read_json(os.path.join(path, "timeseries.json")),
    }


def load_results(path: Union[str, "os.PathLike[str]"]) -> Dict[str, Any]:
    """Reads a results directory: a run's (``output_dir=`` / ``--output-dir``) or a
    series' (``sweep``, ``capacity``). The directory is checked first as
    ``batchbench report`` checks it: a missing, incomplete (no ``run.json``),
    newer-format or truncated one raises :class:`ConfigurationError` naming the
    file. A run gives ``{"kind": "run", "path", "format_version", "run",
    "summary", "requests", "trajectories", "histograms", "timeseries"}``;
    ``requests`` and ``trajectories`` are lists of dicts and ``timeseries`` a
    dict of equal-length columns, each ready for ``pandas.DataFrame``. A series
    gives ``{"kind": "sweep" or "capacity", "path", "index", "runs"}``, with
    ``runs`` mapping each run's directory name to its run dict."""
    p = os.fspath(path)
    checked = _result(_core.check_results(p))
    if checked["kind"] == "run":
        return _load_run(p)
    return {
        "kind": checked["kind"],
        "path": p,
        "index": _read_json(os.path.join(p, "index.json")),
        "runs": {name: _load_run(os.path.join(p, name)) for name in checked.get("runs", [])},
    }


def report(
    paths: Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]],
    output: Union[str, "os.PathLike[str]"] = "report.html",
) -> str:
    """Writes one self-contained HTML report of results directories (runs, sweeps or
    capacity searches; several overlay), as ``batchbench report``, and returns the
    path written. A directory that cannot be read raises
    :class:`ConfigurationError` naming the file; nothing is written then."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    dirs = [os.fspath(p) for p in paths]
    if not dirs:
        raise ConfigurationError("report needs one results directory at least")
    out = os.fspath(output)
    _result(_core.write_report(dirs, out))
    return out


_PROGRAMS = ("batchbench", "batchbench-agent")


def merge(
    paths: Sequence[Union[str, "os.PathLike[str]"]],
    output: Union[str, "os.PathLike[str]"],
    *,
    command: str = "batchbench",
    summary_json: Union[str, "os.PathLike[str]", None] = None,
    results_csv: Union[str, "os.PathLike[str]", None] = None,
) -> Dict[str, Any]:
    """Joins the results directories of a run's shards (each run with
    ``shard="I/N"`` and ``output_dir=``) into the one run's results directory
    ``output``, as ``command merge``: counts and histograms add, time series
    align on wall-clock time, per-request records concatenate. ``command`` is
    the one that ran the shards (its CSV columns). Returns the merged
    ``{"path", "run", "summary"}``. A shard that is missing, given twice, of
    another run, or a directory that cannot be read raises
    :class:`ConfigurationError`; nothing is written then."""
    if command not in _PROGRAMS:
        raise ConfigurationError(f"command must be one of {', '.join(_PROGRAMS)}, got {command!r}")
    if isinstance(paths, (str, os.PathLike)):
        raise ConfigurationError("merge takes a list of shard directories, not one path")
    dirs = [os.fspath(p) for p in paths]
    if not dirs:
        raise ConfigurationError("merge needs the shards' results directories")
    out = os.fspath(output)
    argv = [command, "merge", *dirs, "--output-dir", out]
    for flag, value in (("--summary-json", summary_json), ("--results-csv", results_csv)):
        if value is not None:
            argv += [flag, os.fspath(value)]
    sys.stdout.flush()
    code = _result(_wait(_core.start_cli(command, argv)))
    if code == 2:
        raise ConfigurationError(f"{command} merge rejected the input (exit code 2): see the message above")
    if code not in (0, 1) or not os.path.exists(os.path.join(out, "run.json")):
        raise RunError(f"{command} merge failed (exit code {code}): see the message above")
    doc = _read_json(os.path.join(out, "run.json"))
    return {"path": out, "run": doc["run"], "summary": doc["summary"]}


def analyze(
    source: Union[str, "os.PathLike[str]", None] = None,
    config: Union[Mapping[str, Any], str, "os.PathLike[str]", None] = None,
    *,
    command: str = "batchbench-agent",
    **options: Any,
) -> Dict[str, Any]:
    """Describes a workload without sending anything, as ``command analyze``:
    ``source`` is a replay manifest (absent: the workload the options select,
    such as ``workload``/``workload_config`` or the synthetic flags). Options
    are the command's flags with underscores, its run flags and
    ``cache_tokens`` (``"1M,4M"`` or a list of token counts), ``ranks``,
    ``routing`` (``"round-robin"``, ``"affinity"``, ``"run"``),
    ``assume_latency_ms`` and ``top``. Returns the analysis as a dict: requests,
    sessions, token and think-time distributions, arrivals, prefix sharing, the
    global ideal cache and per-rank caches. Bad input raises
    :class:`ConfigurationError`."""
    if command not in _PROGRAMS:
        raise ConfigurationError(f"command must be one of {', '.join(_PROGRAMS)}, got {command!r}")
    merged = _merge("analyze", config, options)
    if "json" in merged:
        raise ConfigurationError("analyze returns the analysis itself: drop 'json'")
    caps = merged.get("cache_tokens")
    if caps is not None and not isinstance(caps, str):
        try:
            merged["cache_tokens"] = ",".join(str(c) for c in caps)
        except TypeError:
            raise ConfigurationError(
                f"cache_tokens must be a string ('1M,4M') or a list of token counts, got {type(caps).__name__}"
            ) from None
    argv = _argv(command, merged, "analyze")
    if source is not None:
        argv.append(os.fspath(source))
    with tempfile.TemporaryDirectory(prefix="batchbench-") as tmp:
        out = os.path.join(tmp, "analysis.json")
        argv += ["--json", out]
        if "quiet" not in merged:
            argv.append("--quiet")
        sys.stdout.flush()
        code = _result(_wait(_core.start_cli(command, argv)))
        if code == 2:
            raise ConfigurationError(f"{command} analyze rejected the input (exit code 2): see the message above")
        if code != 0 or not os.path.exists(out):
            raise RunError(f"{command} analyze failed (exit code {code}): see the message above")
        with open(out, encoding="utf-8") as f:
            result: Dict[str, Any] = json.load(f)
    return result


def _series(
    kind: str,
    program: str,
    config: Union[Mapping[str, Any], str, "os.PathLike[str]", None],
    options: Dict[str, Any],
) -> List[Dict[str, Any]]:
    if program not in _PROGRAMS:
        raise ConfigurationError(f"command must be one of {', '.join(_PROGRAMS)}, got {program!r}")
    merged = _merge(kind, config, options)
    if "requests_jsonl" in merged:
        raise ConfigurationError(
            f"{kind} writes each run's requests into its output_dir: drop 'requests_jsonl'"
        )
    if "slo" in merged and not isinstance(merged["slo"], str):
        merged["slo"] = ",".join(_slo("option 'slo'", merged["slo"]))
    values = merged.get("values")
    if values is not None and not isinstance(values, str):
        try:
            merged["values"] = ",".join(str(v) for v in values)
        except TypeError:
            raise ConfigurationError(
                f"values must be a range string ('1..64') or a list of loads, got {type(values).__name__}"
            ) from None
    with tempfile.TemporaryDirectory(prefix="batchbench-") as tmp:
        out = merged.pop("output_dir", None)
        out = os.fspath(out) if out is not None else os.path.join(tmp, kind)
        argv = _argv(program, merged, kind) + ["--output-dir", out]
        if "quiet" not in merged:
            argv.append("--quiet")
        sys.stdout.flush()
        code = _result(_wait(_core.start_cli(program, argv)))
        if code == 2:
            raise ConfigurationError(f"{program} {kind} rejected the options (exit code 2): see the message above")
        index_path = os.path.join(out, "index.json")
        index: Dict[str, Any] = {}
        if os.path.exists(index_path):
            with open(index_path, encoding="utf-8") as f:
                index = json.load(f)
    if code not in (0, 130):
        why = index.get("error") or "see the message above"
        raise RunError(f"{program} {kind} failed (exit code {code}): {why}")
    points = list(index.get("points", []))
    verdict = (index.get("capacity") or {}).get("verdict")
    for p in points:
        if p.get("capacity"):
            p["capacity_verdict"] = verdict
    return points


def sweep(
    over: str,
    values: Union[str, Sequence[float]],
    config: Union[Mapping[str, Any], str, "os.PathLike[str]", None] = None,
    *,
    command: str = "batchbench",
    **options: Any,
) -> List[Dict[str, Any]]:
    """Runs ``command sweep``: the run the options describe (the command line's
    flags with underscores, as for :func:`run_agent`) once per load of ``over``
    (``"request-rate"``, ``"users"``, ``"max-concurrency"``; for
    ``command="batchbench-agent"``, ``"session-rate"``, ``"agents"``,
    ``"max-active-agents"``, ``"max-concurrency"``). ``values`` is a rising list
    (``[1, 2, 4]``) or a range string (``"1..64"``, doubling; ``points=5`` spaces
    five). The sweep stops early at saturation unless ``no_early_stop=True``.

    Returns one dict per point measured: ``value``, ``requests_per_second``,
    ``goodput``, ``e2e_p50_ms`` ... (each ``{"mean", "ci95", "values"}``, and
    ``interval``: the 95% interval, a run's own or over ``trials`` runs),
    ``bounds``, ``passed`` and ``undecided`` with an ``slo`` (a percentile too
    near its bound, or with too few requests, is undecided and never passed;
    ``min_requests`` and ``point_max_secs`` run each point until decided),
    ``saturated``, ``runs``. Pass
    ``output_dir`` to keep each run's ``summary.json`` and ``requests.jsonl``
    (by default they go to a temporary directory)."""
    if not isinstance(over, str):
        raise ConfigurationError(f"over must be str, got {type(over).__name__}")
    return _series("sweep", command, config, {**options, "over": over, "values": values})


def capacity(
    over: str,
    slo: Union[str, Sequence[str]],
    config: Union[Mapping[str, Any], str, "os.PathLike[str]", None] = None,
    *,
    command: str = "batchbench",
    **options: Any,
) -> List[Dict[str, Any]]:
    """Runs ``command capacity``: the highest load of ``over`` (see :func:`sweep`)
    at which the run the options describe meets ``slo`` (``"ttft_p99<=500ms"``
    or a list of bounds). Options include ``start``, ``max_load``,
    ``tolerance``, ``trials``, ``near``, and ``min_requests`` with
    ``point_max_secs``: each point runs until every percentile bound is
    decided (its 95% interval wholly on one side of the bound), at least
    ``min_requests`` requests and at most ``point_max_secs`` seconds.

    Returns one dict per point measured, in order. A point whose percentile
    could not be decided (too few requests for its interval, or a percentile
    too near its bound) has ``undecided: True`` and ``passed: False``: it is
    never counted as met. The highest load that met the SLO has ``capacity:
    True`` and ``capacity_verdict``: ``"found"`` when a higher load missed it
    within ``tolerance``, otherwise a lower bound (``"at_max_load"``,
    ``"out_of_points"``, ``"at_limit"``, ``"too_short"``: a point had too few
    requests to decide). No point has it when no load met the SLO. A run that
    cannot complete raises :class:`RunError`; Ctrl+C returns the points
    measured."""
    if not isinstance(over, str):
        raise ConfigurationError(f"over must be str, got {type(over).__name__}")
    return _series("capacity", command, config, {**options, "over": over, "slo": slo})


class Simulator:
    """The built-in OpenAI-compatible simulator on loopback, for tests and demos::

        with batchbench.Simulator("path/to/tokenizer.json", fault_rate=0.1) as sim:
            batchbench.run_benchmark({"endpoint": sim.endpoint, ...})

    Options are the simulator's (``decode_ms_per_token``, ``fault_rate``,
    ``record_requests``, ...), as for ``--host sim://?...``.
    """

    def __init__(self, tokenizer_model: str, **options: Any) -> None:
        parts = []
        for key, value in options.items():
            if isinstance(value, bool):
                if value:
                    parts.append(key)
                continue
            values = value if isinstance(value, (list, tuple)) else [value]
            parts.append(f"{key}={','.join(str(v) for v in values)}")
        try:
            self._sim = _core.Simulator(tokenizer_model, "&".join(parts))
        except ValueError as e:
            kind, message = e.args if len(e.args) == 2 else ("config", str(e))
            _raise(kind, message)

    @property
    def url(self) -> str:
        """Base URL, ``http://127.0.0.1:PORT``."""
        return self._sim.url

    @property
    def endpoint(self) -> str:
        """The chat completions URL."""
        return self._sim.url + "/v1/chat/completions"

    def stats(self) -> Dict[str, Any]:
        """The simulator's counters (``requests``, tokens, cached tokens, faults)."""
        return json.loads(self._sim.stats())

    def requests(self) -> List[Dict[str, Any]]:
        """The request log (start with ``record_requests=True``)."""
        return json.loads(self._sim.requests())

    def stop(self) -> None:
        """Stops serving."""
        self._sim.stop()

    def __enter__(self) -> "Simulator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
