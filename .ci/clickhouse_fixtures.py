"""Writes the SQL that creates the production warehouse schema and fills it with
fixture sessions for the export tests (no binary blobs in the repository).

    python clickhouse_fixtures.py > fixtures.sql

The window the tests export is 2026-09-01T09:00:00Z .. 10:00:00Z. Sessions, by
principal (each a fixed UUID below), and what the export must make of them:

  P1 continuation     4 requests growing system, user, (assistant, tool)*: 1 trajectory,
                      live assistant blocks, think-time gaps
  P1 branch           root, child, then a second child of the root: 1 trajectory of 3,
                      the third with reset_before (a branch)
  P1 compaction       root [sys,u], then [sys,u,a,t], then [sys,u,summary]: 1 trajectory
                      of 3, the third with reset_before (a compaction)
  P2 pre-window       root at 07:30, child at 09:10: 1 trajectory of 1 request that
                      begins with reset_before (pre-window session)
  P3 identical        two requests with identical chains: 2 trajectories, -0 and -1
  P4 near miss        extends P1's continuation chain, but another principal: its own
                      trajectory (nothing links across principals)
  P5 no analytics     a chain row without an analytics row: dropped (no completion)
  P5 no block counts  block_tokens empty: one user block of prompt_tokens
  P6 duplicate        one request inserted twice into the base table: the view (and
                      FINAL) keep one; the base table without FINAL sees both
  P7 other model      model "vendor/model-b": only with --model vendor/model-b
  P7 other backend    served_by "backend-2": left out by --served-by backend-1
  P1 late             a request after the window: never written

With the defaults the export holds 11 trajectories and 18 requests, drops 1 row
(no_completion_tokens) and counts 1 pre-window session.
"""

import hashlib

P = {
    "P1": "11111111-1111-4111-8111-111111111111",
    "P2": "22222222-2222-4222-8222-222222222222",
    "P3": "33333333-3333-4333-8333-333333333333",
    "P4": "44444444-4444-4444-8444-444444444444",
    "P5": "55555555-5555-4555-8555-555555555555",
    "P6": "66666666-6666-4666-8666-666666666666",
    "P7": "77777777-7777-4777-8777-777777777777",
}
INSTANCE = "aaaaaaaa-0000-4000-8000-000000000001"
SCHEMA = """
CREATE DATABASE IF NOT EXISTS clay;
CREATE TABLE clay.prompt_chains (
    ts DateTime64(3, 'UTC'),
    instance_id UUID,
    correlation_id Int64,
    principal_id UUID,
    model String,
    chain Array(FixedString(32)),
    block_roles Array(String),
    block_tokens Array(UInt32)
) ENGINE = ReplacingMergeTree ORDER BY (instance_id, correlation_id);
CREATE VIEW clay.prompt_chains_current AS SELECT * FROM clay.prompt_chains FINAL;
CREATE TABLE clay.http_analytics (
    timestamp DateTime64(3, 'UTC'),
    instance_id UUID,
    correlation_id Int64,
    prompt_tokens Nullable(UInt32),
    completion_tokens Nullable(UInt32),
    stream Bool,
    max_tokens Nullable(UInt32),
    finish_reason String,
    served_by String,
    request_origin String,
    user_id String,
    api_key_id String,
    duration_ms UInt32,
    duration_to_first_byte_ms UInt32
) ENGINE = MergeTree ORDER BY (instance_id, correlation_id);
"""


def chain_of(blocks):
    """Cumulative hashes: each covers every block up to and including its own."""
    out, h = [], ""
    for role, key, _ in blocks:
        h = hashlib.sha256(f"{h}|{role}|{key}".encode()).hexdigest()
        out.append(h)
    return out


class Fixtures:
    def __init__(self):
        # A duplicate goes into a second INSERT: within one insert block a
        # ReplacingMergeTree already keeps one row.
        self.chains, self.duplicates, self.analytics = [], [], []
        self.corr = 0

    def request(self, principal, ts, blocks, *, completion=24, prompt_extra=9, model="vendor/model-a",
                served_by="backend-1", analytics=True, block_counts=True, stream=True,
                max_tokens=256, duration_ms=1500, copies=1):
        self.corr += 1
        chain = chain_of(blocks)
        hashes = ", ".join(f"unhex('{h}')" for h in chain)
        roles = ", ".join(f"'{r}'" for r, _, _ in blocks)
        tokens = ", ".join(str(t) for _, _, t in blocks) if block_counts else ""
        row = f"('{ts}', '{INSTANCE}', {self.corr}, '{P[principal]}', '{model}', [{hashes}], [{roles}], [{tokens}])"
        self.chains.append(row)
        self.duplicates.extend([row] * (copies - 1))
        if analytics:
            prompt = sum(t for _, _, t in blocks) + prompt_extra
            self.analytics.append(
                f"('{ts}', '{INSTANCE}', {self.corr}, {prompt}, {completion}, {str(stream).lower()}, "
                f"{max_tokens}, 'stop', '{served_by}', 'api', 'user-{principal}', 'key-{principal}', "
                f"{duration_ms}, 300)"
            )
        return chain

    def sql(self):
        out = [SCHEMA.strip()]
        out.append("INSERT INTO clay.prompt_chains VALUES\n" + ",\n".join(self.chains) + ";")
        if self.duplicates:
            out.append("INSERT INTO clay.prompt_chains VALUES\n" + ",\n".join(self.duplicates) + ";")
        out.append("INSERT INTO clay.http_analytics VALUES\n" + ",\n".join(self.analytics) + ";")
        return "\n".join(out) + "\n"


def main():
    f = Fixtures()
    sys_ = ("system", "sys-main", 120)
    tools = ("tool_definition", "tools-main", 200)

    # P1 continuation: 4 requests.
    conv = [tools, sys_, ("user", "c-u0", 40)]
    f.request("P1", "2026-09-01 09:01:00.000", conv)
    for i in range(1, 4):
        conv = conv + [("assistant", f"c-a{i}", 24), ("tool", f"c-t{i}", 60)]
        f.request("P1", f"2026-09-01 09:0{1 + i}:00.000", conv)

    # P1 branch: root, child, second child of the root.
    root = [sys_, ("user", "b-u0", 30)]
    f.request("P1", "2026-09-01 09:10:00.000", root)
    f.request("P1", "2026-09-01 09:11:00.000", root + [("assistant", "b-a1", 24), ("user", "b-u1", 10)])
    f.request("P1", "2026-09-01 09:12:00.000", root + [("assistant", "b-a1x", 24), ("user", "b-u1x", 12)])

    # P1 compaction: the third keeps the opening and summarises the rest.
    root = [sys_, ("user", "k-u0", 50)]
    f.request("P1", "2026-09-01 09:20:00.000", root)
    f.request("P1", "2026-09-01 09:21:00.000", root + [("assistant", "k-a1", 24), ("tool", "k-t1", 80)])
    f.request("P1", "2026-09-01 09:22:00.000", root + [("user", "k-summary", 40)])

    # P2 pre-window session.
    root = [sys_, ("user", "p-u0", 30)]
    f.request("P2", "2026-09-01 07:30:00.000", root)
    f.request("P2", "2026-09-01 09:10:00.000", root + [("assistant", "p-a1", 24), ("tool", "p-t1", 40)])

    # P3 identical chains.
    same = [sys_, ("user", "same-u0", 20)]
    f.request("P3", "2026-09-01 09:30:00.000", same)
    f.request("P3", "2026-09-01 09:31:00.000", same)

    # P4 near miss: P1's continuation opening plus more, but another principal.
    f.request("P4", "2026-09-01 09:05:30.000",
              [tools, sys_, ("user", "c-u0", 40), ("assistant", "c-a1", 24), ("tool", "x-t1", 10)])

    # P5: no analytics row (dropped), and no block counts.
    f.request("P5", "2026-09-01 09:40:00.000", [sys_, ("user", "n-u0", 10)], analytics=False)
    f.request("P5", "2026-09-01 09:41:00.000", [sys_, ("user", "n-u1", 10)], block_counts=False)

    # P6 duplicate only the view removes.
    f.request("P6", "2026-09-01 09:45:00.000", [sys_, ("user", "d-u0", 10)], copies=2)

    # P7 another model, another backend.
    f.request("P7", "2026-09-01 09:50:00.000", [sys_, ("user", "m-u0", 10)], model="vendor/model-b")
    f.request("P7", "2026-09-01 09:51:00.000", [sys_, ("user", "s-u0", 10)], served_by="backend-2")

    # After the window.
    f.request("P1", "2026-09-01 10:30:00.000", [sys_, ("user", "late-u0", 10)])

    print(f.sql(), end="")


if __name__ == "__main__":
    main()
