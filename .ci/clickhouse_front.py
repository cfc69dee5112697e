"""A loopback HTTP front over chdb (the ClickHouse engine in-process) that speaks
the parts of ClickHouse's HTTP interface the Rust `clickhouse` crate uses:

- the query in the body, in the `query` URL parameter, or both (concatenated), or a
  multipart/form-data body with `query` and `param_*` parts (server-side parameters);
- `param_*` values, `database`, `default_format` (RowBinaryWithNamesAndTypes, ...);
- the user and password as X-ClickHouse-User / X-ClickHouse-Key, HTTP basic auth,
  or `user` / `password` URL parameters;
- errors as HTTP 500 (403 for authentication) with the exception text.

Responses are never compressed (no Content-Encoding), which the crate accepts.

    python clickhouse_front.py DATA_DIR PORT USER PASSWORD [FIXTURES.sql]
"""

import base64
import re
import sys
import threading
import urllib.parse
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from chdb import session


def statements(sql):
    return [s.strip() for s in re.split(r";\s*\n", sql) if s.strip()]


class Front:
    def __init__(self, data_dir, user, password):
        self.db = session.Session(data_dir)
        self.lock = threading.Lock()
        self.user, self.password = user, password

    def run(self, sql, fmt, params):
        with self.lock:
            res = self.db.query(sql, fmt, params=params or None)
        return res.bytes() if hasattr(res, "bytes") else bytes(res)


def multipart(content_type, body):
    msg = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
    )
    parts = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        parts[name] = part.get_payload(decode=True).decode()
    return parts


def make_handler(front):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # TCP_NODELAY, as ClickHouse itself sets it: a kept connection's
        # replies leave when written, not after the client's delayed ACK.
        disable_nagle_algorithm = True

        def log_message(self, *args):  # quiet
            pass

        def reply(self, status, body, content_type="text/plain; charset=UTF-8"):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-ClickHouse-Server-Display-Name", "chdb-front")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            if url.path in ("/", "/ping"):
                return self.reply(200, b"Ok.\n")
            self.handle_query(b"")

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            self.handle_query(self.rfile.read(n) if n else b"")

        def handle_query(self, body):
            url = urllib.parse.urlsplit(self.path)
            q = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
            user = self.headers.get("X-ClickHouse-User") or q.get("user") or "default"
            password = self.headers.get("X-ClickHouse-Key") or q.get("password") or ""
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Basic "):
                user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            if (user, password) != (front.user, front.password):
                msg = (f"Code: 516. DB::Exception: {user}: Authentication failed: password is "
                       "incorrect, or there is no user with such name. (AUTHENTICATION_FAILED)\n")
                return self.reply(403, msg.encode())
            params = {k[6:]: v for k, v in q.items() if k.startswith("param_")}
            sql = q.get("query", "")
            ctype = self.headers.get("Content-Type", "")
            if ctype.startswith("multipart/form-data"):
                parts = multipart(ctype, body)
                sql = (sql + " " + parts.pop("query", "")).strip()
                params.update({k[6:]: v for k, v in parts.items() if k.startswith("param_")})
            else:
                sql = (sql + " " + body.decode()).strip()
            fmt = q.get("default_format") or "TabSeparated"
            try:
                if q.get("database"):
                    front.run(f"USE {q['database']}", "TabSeparated", None)
                out = front.run(sql, fmt, params)
            except Exception as e:  # the engine's exception text, as ClickHouse sends it
                return self.reply(500, (str(e).strip() + "\n").encode())
            self.reply(200, out, "application/octet-stream")

    return Handler


def main():
    data_dir, port, user, password = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    front = Front(data_dir, user, password)
    if len(sys.argv) > 5:
        with open(sys.argv[5], encoding="utf-8") as f:
            for stmt in statements(f.read()):
                front.run(stmt, "TabSeparated", None)
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(front))
    print(f"clickhouse front on http://127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
