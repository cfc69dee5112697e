//! TLS as a user meets it: a server with a certificate from a private CA is
//! refused by default (certificates are verified), accepted with `--ca-cert`
//! naming the CA, and accepted with `--insecure`, which the summary says. The
//! CA and the server's certificate are made by `openssl` for the test; the
//! server is a few lines of Python (`ssl` and `http.server`) on loopback.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

fn openssl(dir: &Path, args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("openssl: {e}"));
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A CA, and a certificate for 127.0.0.1 that it signed.
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=batchbench test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n")
        .unwrap_or_else(|e| panic!("{e}"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.pem",
        ],
    );
    (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    )
}

const SERVER: &str = r#"
import http.server, json, ssl, sys
cert, key = sys.argv[1], sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    disable_nagle_algorithm = True  # TCP_NODELAY, as real servers set it
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = json.dumps({"id": "x", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi there"}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
s.socket = ctx.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

struct Server {
    child: Child,
    port: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(cert: &Path, key: &Path) -> Server {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(SERVER)
        .arg(cert)
        .arg(key)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("python3: {e}"));
    let mut line = String::new();
    let out = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    BufReader::new(out)
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("{e}"));
    Server {
        child,
        port: line.trim().to_owned(),
    }
}

fn run<S: AsRef<str>>(args: &[S]) -> Output {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let args = args.as_slice();
    Command::new(env!("CARGO_BIN_EXE_batchbench"))
        .args(args)
        .args(["--output-tokens", "2", "--max-retries", "0", "--users", "2"])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn certificates_are_verified_unless_a_ca_is_given_or_insecure_is_explicit() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (ca, cert, key) = certificates(dir.path());
    let server = serve(&cert, &key);
    let host = format!("https://127.0.0.1:{}", server.port);
    let ca = ca.display().to_string();

    // Verified by default: the private CA is unknown, every request fails.
    let o = run(&["--host", &host]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let all = text(&o);
    assert!(all.contains("connect"), "{all}");
    assert!(all.to_lowercase().contains("certificate"), "{all}");

    // The CA named: verified, and accepted.
    let o = run(&["--host", &host, "--ca-cert", &ca]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!text(&o).contains("insecure"), "{}", text(&o));

    // --insecure: accepted unverified, and the summary says so.
    let o = run(&["--host", &host, "--insecure"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("TLS certificates NOT verified (--insecure)"),
        "{out}"
    );

    // A CA file that is missing, or holds no certificate: bad input, exit 2.
    let missing = dir.path().join("nope.pem").display().to_string();
    let o = run(&["--host", &host, "--ca-cert", &missing]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--ca-cert"), "{}", text(&o));
    let not_pem = dir.path().join("san.ext").display().to_string();
    let o = run(&["--host", &host, "--ca-cert", &not_pem]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no certificate"), "{}", text(&o));
}
