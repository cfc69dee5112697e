"""Writes a synthetic schema-version-2 replay manifest for benchmarks.

usage: gen_manifest.py OUT TRAJECTORIES REQUESTS_PER_TRAJECTORY [SPACING_MS]

Sessions share a tool-definition and a system block; each turn appends a live
assistant block, a tool call and a tool result; every fifth turn compacts (reset),
so a request carries 3 to 11 blocks. Offsets are SPACING_MS apart (default 10).
"""
import json
import sys

out, n, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spacing = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
with open(out, "w") as f:
    for t in range(n):
        head = [
            {"seed": "tools-%d" % (t % 7), "tokens": 300, "role": "tool_definition"},
            {"seed": "system-%d" % (t % 3), "tokens": 200, "role": "system"},
        ]
        reqs = []
        blocks = []
        for k in range(per):
            if k % 5 == 0:
                blocks = head + [{"seed": "u-%d-%d" % (t, k), "tokens": 100, "role": "user"}]
                reset = k > 0
            else:
                blocks = blocks + [
                    {"seed": "a-%d-%d" % (t, k), "tokens": 40, "role": "assistant", "live": True},
                    {"seed": "c-%d-%d" % (t, k), "tokens": 30, "role": "tool_call"},
                    {"seed": "r-%d-%d" % (t, k), "tokens": 60, "role": "tool"},
                ]
                reset = False
            total = sum(b["tokens"] for b in blocks)
            req = {"prompt_tokens": total + 20, "output_tokens": 40, "overhead_tokens": 20, "blocks": blocks}
            if reset:
                req["reset_before"] = True
            if k < per - 1:
                req["delay_after_ms"] = 500
            reqs.append(req)
        line = {"schema_version": 2, "trajectory_id": "s-%d" % t, "start_after_ms": round(t * spacing, 3), "requests": reqs}
        f.write(json.dumps(line, separators=(",", ":")) + "\n")
