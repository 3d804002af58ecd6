//! The binary wire form of an answer that carries an observation: the answer's JSON with
//! its screenshot taken out, and the screenshot's bytes after it, so no image travels as
//! base64. REST sends it for `Accept: application/octet-stream`; the WebSocket for
//! `"binary": true`. Layout (version 1, docs/serve.md "Binary frames"):
//!
//! ```text
//! offset  size  field
//! 0       4     magic "GRLF"
//! 4       1     version (1)
//! 5       3     reserved, zero
//! 8       4     n: length of the JSON in bytes, unsigned little-endian
//! 12      n     the answer's JSON (UTF-8); its observation has "screenshot": null
//! 12+n    rest  the screenshot in observation.screenshot_format (empty for "none")
//! ```

use axum::http::{header, HeaderMap};
use serde_json::Value;

/// The first four bytes of every frame.
pub const MAGIC: &[u8; 4] = b"GRLF";
/// The layout version this server writes.
pub const VERSION: u8 = 1;
/// Bytes before the JSON.
pub const HEADER_LEN: usize = 12;
/// The media type a REST client asks for, and the binary answer's `Content-Type`.
pub const MEDIA_TYPE: &str = "application/octet-stream";

/// One frame: `json` (serialized here) followed by `image`.
pub fn encode(json: &Value, image: &[u8]) -> Vec<u8> {
    let text = serde_json::to_vec(json).expect("a JSON value serializes");
    let mut out = Vec::with_capacity(HEADER_LEN + text.len() + image.len());
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(&text);
    out.extend_from_slice(image);
    out
}

/// Why bytes are not a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a guirl binary frame: {0}")]
pub struct FrameError(pub String);

/// A frame's JSON and image bytes (what a Rust client reads; the server only writes).
pub fn decode(bytes: &[u8]) -> Result<(Value, &[u8]), FrameError> {
    if bytes.len() < HEADER_LEN || &bytes[..4] != MAGIC {
        return Err(FrameError(format!("{} bytes without the magic \"GRLF\" header", bytes.len())));
    }
    if bytes[4] != VERSION {
        return Err(FrameError(format!("version {}, this reader knows {VERSION}", bytes[4])));
    }
    let n = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
    let end = HEADER_LEN.checked_add(n).filter(|e| *e <= bytes.len()).ok_or_else(|| {
        FrameError(format!("the JSON is said to be {n} bytes but {} follow", bytes.len() - HEADER_LEN))
    })?;
    let json = serde_json::from_slice(&bytes[HEADER_LEN..end])
        .map_err(|e| FrameError(format!("its JSON does not parse: {e}")))?;
    Ok((json, &bytes[end..]))
}

/// Whether a REST request's `Accept` header asks for the binary form: it names
/// `application/octet-stream` (with a q above 0) and ranks it above `application/json`.
/// No header, `*/*` or JSON first keeps the JSON answer.
pub fn wants_binary(headers: &HeaderMap) -> bool {
    let mut best = (0.0f32, 0.0f32); // (octet-stream's q, json's q)
    for v in headers.get_all(header::ACCEPT) {
        let Ok(v) = v.to_str() else { continue };
        for range in v.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q=").and_then(|q| q.trim().parse::<f32>().ok()))
                .next()
                .unwrap_or(1.0);
            match media.as_str() {
                MEDIA_TYPE => best.0 = best.0.max(q),
                "application/json" => best.1 = best.1.max(q),
                _ => {}
            }
        }
    }
    best.0 > 0.0 && best.0 > best.1
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_frame_reads_back_as_its_json_and_image() {
        let j = json!({"observation": {"screenshot": null, "width": 2}, "reward": 1.0});
        let img = [1u8, 2, 3, 4, 5, 6];
        let f = encode(&j, &img);
        assert_eq!(&f[..8], b"GRLF\x01\0\0\0");
        let n = j.to_string().len() as u32;
        assert_eq!(f[8..12], n.to_le_bytes(), "little-endian JSON length");
        let (back, rest) = decode(&f).unwrap();
        assert_eq!((back, rest), (j, &img[..]));
        let bare = encode(&json!({}), &[]);
        assert!(decode(&bare).unwrap().1.is_empty());
    }

    #[test]
    fn broken_frames_are_refused_with_the_reason() {
        let f = encode(&json!({"a": 1}), b"xyz");
        assert!(decode(b"{\"a\":1}").unwrap_err().0.contains("magic"));
        let mut v2 = f.clone();
        v2[4] = 2;
        assert!(decode(&v2).unwrap_err().0.contains("version 2"));
        let mut long = f.clone();
        long[8..12].copy_from_slice(&1000u32.to_le_bytes());
        assert!(decode(&long).unwrap_err().0.contains("1000 bytes"));
    }

    #[test]
    fn accept_picks_binary_only_when_it_outranks_json() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::ACCEPT, v.parse().unwrap());
            wants_binary(&m)
        };
        assert!(!wants_binary(&HeaderMap::new()));
        assert!(h("application/octet-stream"));
        assert!(h("Application/Octet-Stream; q=0.9, application/json; q=0.5"));
        assert!(!h("*/*"));
        assert!(!h("application/json"));
        assert!(!h("application/json, application/octet-stream; q=0.5"));
        assert!(!h("application/octet-stream; q=0"));
    }
}
