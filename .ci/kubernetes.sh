#!/usr/bin/env bash
# The Kubernetes example, checked without a cluster:
#   1. renders examples/kubernetes/base and every overlay with `kubectl
#      kustomize` (offline; a client dry run would need an API server);
#   2. validates every rendered resource against the Kubernetes API schemas,
#      offline, with the kubernetes-validate package from PyPI (--strict:
#      an unknown field fails too);
#   3. runs the base's shard Job as its pods would: the container's exact
#      command and arguments, once per index with JOB_COMPLETION_INDEX set, as
#      concurrent local processes against the built-in simulator (volume and
#      image paths mapped to local directories, START_AT a few seconds ahead);
#   4. runs the merge Job's exact script the same way, and checks the merged
#      directory holds every shard and every request.
#
#   bash .ci/kubernetes.sh BIN_DIR    # BIN_DIR holds batchbench, batchbench-agent
set -euo pipefail
cd "$(dirname "$0")/.."
bin_dir="$(cd "${1:?usage: bash .ci/kubernetes.sh BIN_DIR}" && pwd)"
cache="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}/kubernetes"
version="1.37.0"
py="$cache/venv/bin/python"

if ! command -v kubectl >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq kubernetes-client) >/dev/null
  fi
fi
command -v kubectl >/dev/null || { echo "kubectl is missing (apt-get install kubernetes-client)" >&2; exit 1; }
if ! "$py" -c "import importlib.metadata as m, sys; sys.exit(m.version('kubernetes-validate') != '$version')" 2>/dev/null; then
  echo "installing kubernetes-validate $version into $cache/venv" >&2
  python3 -m venv "$cache/venv"
  "$cache/venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$version"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for k in examples/kubernetes/base examples/kubernetes/overlays/*; do
  name="$(basename "$k")"
  if ! kubectl kustomize "$k" >"$work/$name.yaml"; then
    echo "kubectl kustomize $k failed: the example needs kustomize v5 (kubectl 1.27 or newer; $(kubectl version --client 2>/dev/null | head -1))" >&2
    exit 1
  fi
  "$cache/venv/bin/kubernetes-validate" --strict --quiet "$work/$name.yaml"
  echo "$k: rendered $(grep -c '^kind:' "$work/$name.yaml") resources, all valid"
done

tokenizers="${BATCHBENCH_TOKENIZERS:-$(examples/fetch-tokenizers.sh)}"
"$py" - "$work/base.yaml" "$work/run" "$bin_dir" "$tokenizers" <<'PY'
import datetime, os, re, subprocess, sys, json
import yaml

rendered, root, bin_dir, tokenizers = sys.argv[1:]
docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
by_kind = {}
for d in docs:
    by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
configmap = next(iter(by_kind["ConfigMap"].values()))
data = dict(configmap["data"])
jobs = by_kind["Job"]
shards_job, merge_job = jobs["batchbench-shards"], jobs["batchbench-merge"]

# The mounts and the image's paths, as local directories.
spec_dir = os.path.join(root, "spec")
os.makedirs(spec_dir)
for key, value in data.items():
    if "." in key:  # a file of the ConfigMap volume
        open(os.path.join(spec_dir, key), "w").write(value)
paths = {"/spec": spec_dir, "/results": os.path.join(root, "results"),
         "/usr/share/batchbench/tokenizers": tokenizers}
def local(text):  # a mount path where a path starts, not inside a longer name
    for k, v in sorted(paths.items(), key=lambda kv: -len(kv[0])):
        text = re.sub(r"(?<![\w$/.-])" + re.escape(k) + r"(?=[/\"'\s]|$)", lambda _: v, text)
    return text
for name in os.listdir(spec_dir):
    p = os.path.join(spec_dir, name)
    text = open(p).read()
    open(p, "w").write(local(text))

# Every shard starts its clock at the same moment, a few seconds from now.
start = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=4))
data["START_AT"] = start.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

def environment(container, index=None):
    env = {"PATH": bin_dir + os.pathsep + os.environ["PATH"]}
    for e in container.get("env", []):
        ref = e.get("valueFrom", {})
        if "configMapKeyRef" in ref:
            env[e["name"]] = data[ref["configMapKeyRef"]["key"]]
        elif "secretKeyRef" in ref:
            assert ref["secretKeyRef"].get("optional"), e
        else:
            env[e["name"]] = e["value"]
    if index is not None:
        env["JOB_COMPLETION_INDEX"] = str(index)
    return env

def expand(arg, env):  # Kubernetes' $(VAR) expansion of command and args
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)

spec = shards_job["spec"]
n = int(data["SHARDS"])
assert spec["completionMode"] == "Indexed" and spec["completions"] == n == spec["parallelism"], spec
container = spec["template"]["spec"]["containers"][0]
procs = []
for i in range(n):
    env = environment(container, i)
    argv = [local(expand(a, env)) for a in container["command"] + container.get("args", [])]
    log = open(os.path.join(root, f"shard-{i}.log"), "w+")
    procs.append((subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT), log))
codes = [p.wait() for p, _ in procs]
if codes != [0] * n:
    for i, (_, log) in enumerate(procs):
        log.seek(0)
        print(f"--- shard {i}:\n{log.read()}", file=sys.stderr)
    sys.exit(f"shard exit codes {codes}")

container = merge_job["spec"]["template"]["spec"]["containers"][0]
env = environment(container)
argv = [local(expand(a, env)) for a in container["command"] + container.get("args", [])]
merged = subprocess.run(argv, env=env, timeout=600, capture_output=True, text=True)
if merged.returncode != 0:
    sys.exit(f"the merge Job failed ({merged.returncode}):\n{merged.stdout}{merged.stderr}")

out = os.path.join(paths["/results"], data["RUN_ID"])
doc = json.load(open(os.path.join(out, "merged", "run.json")))
shards = [s["index"] for s in doc["run"]["merged_shards"]]
skews = [s.get("start_skew_ms") for s in doc["run"]["merged_shards"]]
total = doc["summary"]["total_requests"]
lines = sum(1 for _ in open(os.path.join(out, "merged", "requests.jsonl")))
assert shards == list(range(n)), shards
sent = sum(json.load(open(os.path.join(out, f"shard-{i}", "run.json")))["summary"]["total_requests"]
           for i in range(n))
# 64 agents of 4 requests each, every one in the merge.
assert total == lines == sent == 64 * 4 and doc["summary"]["failed_requests"] == 0, (total, lines, sent)
assert all(s is not None and abs(s) < 1000 for s in skews), skews
print(f"shard Job: {n} local pods ran shard 0-{n - 1}; start skews "
      + ", ".join(f"{s:.2f}" for s in skews) + " ms")
print(f"merge Job: {total} requests of {n} shards merged into {out}/merged")
PY
