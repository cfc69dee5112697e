"""Writes a rows file (the `--dump-rows-jsonl` shape) of N rows: sessions of 8
requests whose chains grow by an assistant and a tool block per turn, spread over
one hour, with 64-hex-digit hashes as in production.

    python bench/gen_rows.py OUT N
"""

import hashlib
import json
import sys
import time


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    turns = 8
    sessions = max(1, n // turns)
    written = 0
    with open(out, "w") as f:
        for s in range(sessions):
            principal = f"{s % 5000:08x}-0000-4000-8000-000000000000"
            base_ms = 1788253200000 + (s * 3_600_000) // sessions  # 09:00 + spread
            h = hashlib.sha256(b"tools").hexdigest()
            chain, roles, tokens = [h], ["tool_definition"], [300]
            h = hashlib.sha256((h + f"sys{s % 50}").encode()).hexdigest()
            chain.append(h); roles.append("system"); tokens.append(200)
            h = hashlib.sha256((h + f"u{s}").encode()).hexdigest()
            chain.append(h); roles.append("user"); tokens.append(80)
            for t in range(turns):
                if written >= n:
                    break
                if t > 0:
                    for role, k in (("assistant", 40), ("tool", 60)):
                        h = hashlib.sha256((h + f"{role}{s}.{t}").encode()).hexdigest()
                        chain.append(h); roles.append(role); tokens.append(k)
                ms = base_ms + t * 20_000
                secs, milli = divmod(ms, 1000)
                row = {
                    "ts": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(secs)) + f".{milli:03d}",
                    "instance_id": "aaaaaaaa-0000-4000-8000-000000000001",
                    "correlation_id": written,
                    "principal_id": principal,
                    "model": "vendor/model-a",
                    "chain": chain, "block_roles": roles, "block_tokens": tokens,
                    "prompt_tokens": sum(tokens) + 12, "completion_tokens": 40,
                    "stream": True, "max_tokens": 512, "finish_reason": "stop",
                    "served_by": "backend-1", "request_origin": "api", "user_id": "u",
                    "api_key_id": "k", "duration_ms": 3000, "duration_to_first_byte_ms": 200,
                }
                f.write(json.dumps(row, separators=(",", ":")) + "\n")
                written += 1


if __name__ == "__main__":
    main()
