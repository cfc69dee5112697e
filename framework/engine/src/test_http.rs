//! The request side of the small HTTP/1.1 servers that unit tests stand up on
//! loopback: enough of the protocol to read a client's requests off a kept
//! connection (a head, then `content-length` bytes), nothing more.

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Reads the next request from `sock`. `buf` holds bytes read past the last
/// request and must be passed again for the next one. Returns the head,
/// lowercased, and the body; `None` when the connection ends or fails first.
pub(crate) async fn read_request(
    sock: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> Option<(String, Vec<u8>)> {
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().expect("a numeric content-length"));
    while buf.len() < end + len {
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = buf[end..end + len].to_vec();
    buf.drain(..end + len);
    Some((head, body))
}
