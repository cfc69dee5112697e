//! Deterministic synthetic images for vision models: a smooth gradient under
//! seeded 16-pixel tiles, so that encoders compress them about as well as
//! photographs (neither a flat colour nor pure noise), encoded as PNG or JPEG.
//! The bytes depend on the seed and the size alone.

use crate::conversation::Image;
use crate::rng::Stream;
use crate::spec::{ImageFormat, ImageSpec};
use base64::Engine as _;

/// The pixels of the image of `seed`: RGB, row by row.
fn pixels(seed: u64, width: u32, height: u32) -> Vec<u8> {
    const TILE: u32 = 16;
    let mut rng = Stream::at(seed, &[0x494d_4147]); // "IMAG"
    let tiles_x = width.div_ceil(TILE) as usize;
    let tiles_y = height.div_ceil(TILE) as usize;
    let tiles: Vec<[u8; 3]> = (0..tiles_x * tiles_y)
        .map(|_| {
            let v = rng.next_u64();
            [v as u8, (v >> 8) as u8, (v >> 16) as u8]
        })
        .collect();
    let base = rng.next_u64();
    let mut out = Vec::with_capacity(width as usize * height as usize * 3);
    for y in 0..height {
        let gy = (y * 255 / height.max(1)) as u8;
        for x in 0..width {
            let gx = (x * 255 / width.max(1)) as u8;
            let t = tiles[(y / TILE) as usize * tiles_x + (x / TILE) as usize];
            out.push(gx.wrapping_add(base as u8) / 2 + t[0] / 2);
            out.push(gy.wrapping_add((base >> 8) as u8) / 2 + t[1] / 2);
            out.push(gx.wrapping_add(gy) / 2 + t[2] / 2);
        }
    }
    out
}

/// A PNG of RGB `pixels`: signature, IHDR, one zlib IDAT, IEND.
fn png(width: u32, height: u32, pixels: &[u8]) -> Vec<u8> {
    let row = width as usize * 3;
    let mut raw = Vec::with_capacity((row + 1) * height as usize);
    for r in pixels.chunks_exact(row) {
        raw.push(0); // filter: none
        raw.extend_from_slice(r);
    }
    let idat = miniz_oxide::deflate::compress_to_vec_zlib(&raw, 6);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut chunk = |kind: &[u8; 4], data: &[u8]| {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let crc = crc32fast::hash(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    };
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB, deflate, no filter, no interlace
    chunk(b"IHDR", &ihdr);
    chunk(b"IDAT", &idat);
    chunk(b"IEND", &[]);
    out
}

fn jpeg(width: u32, height: u32, pixels: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let (w, h) = (
        u16::try_from(width).map_err(|_| "image too wide for JPEG")?,
        u16::try_from(height).map_err(|_| "image too tall for JPEG")?,
    );
    jpeg_encoder::Encoder::new(&mut out, 85)
        .encode(pixels, w, h, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| format!("cannot encode the image: {e}"))?;
    Ok(out)
}

/// The image of `seed` as `spec` shapes it.
pub fn make(seed: u64, spec: &ImageSpec) -> Result<Image, String> {
    let px = pixels(seed, spec.width, spec.height);
    let bytes = match spec.format {
        ImageFormat::Png => png(spec.width, spec.height, &px),
        ImageFormat::Jpeg => jpeg(spec.width, spec.height, &px)?,
    };
    Ok(Image {
        media_type: spec.format.media_type(),
        base64: base64::engine::general_purpose::STANDARD
            .encode(&bytes)
            .into(),
        bytes: bytes.len(),
        width: spec.width,
        height: spec.height,
    })
}

/// Width and height read from a PNG's or a JPEG's header, if it is one.
pub fn dimensions(bytes: &[u8]) -> Option<(u32, u32)> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() >= 24 {
        let n = |i: usize| u32::from_be_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        return Some((n(16), n(20)));
    }
    if !bytes.starts_with(&[0xFF, 0xD8]) {
        return None;
    }
    // Walk the JPEG segments to a start-of-frame marker.
    let mut i = 2;
    while i + 9 < bytes.len() {
        if bytes[i] != 0xFF {
            return None;
        }
        let marker = bytes[i + 1];
        let len = usize::from(u16::from_be_bytes([bytes[i + 2], bytes[i + 3]]));
        if matches!(marker, 0xC0..=0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF) {
            let h = u16::from_be_bytes([bytes[i + 5], bytes[i + 6]]);
            let w = u16::from_be_bytes([bytes[i + 7], bytes[i + 8]]);
            return Some((u32::from(w), u32::from(h)));
        }
        i += 2 + len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_deterministic_decodable_and_sized_as_asked() {
        for format in [ImageFormat::Png, ImageFormat::Jpeg] {
            let spec = ImageSpec {
                per_request: 1,
                width: 96,
                height: 40,
                format,
            };
            let a = make(7, &spec).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(a, make(7, &spec).unwrap_or_else(|e| panic!("{e}")));
            assert_ne!(
                a.base64,
                make(8, &spec).unwrap_or_else(|e| panic!("{e}")).base64
            );
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(a.base64.as_bytes())
                .unwrap_or_default();
            assert_eq!(bytes.len(), a.bytes);
            assert_eq!(dimensions(&bytes), Some((96, 40)), "{format:?}");
            // Compressible, but not to nothing.
            assert!(
                a.bytes > 200 && a.bytes < 96 * 40 * 3,
                "{format:?}: {}",
                a.bytes
            );
            assert!(
                a.data_url()
                    .starts_with(&format!("data:{};base64,", a.media_type))
            );
        }
    }

    #[test]
    fn the_png_is_well_formed() {
        let px = pixels(1, 3, 2);
        let p = png(3, 2, &px);
        // Every chunk's CRC covers its type and data.
        let mut i = 8;
        let mut kinds = Vec::new();
        while i < p.len() {
            let len = u32::from_be_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]) as usize;
            let body = &p[i + 4..i + 8 + len];
            let crc = u32::from_be_bytes([
                p[i + 8 + len],
                p[i + 9 + len],
                p[i + 10 + len],
                p[i + 11 + len],
            ]);
            assert_eq!(crc32fast::hash(body), crc);
            kinds.push(String::from_utf8_lossy(&body[..4]).into_owned());
            i += 12 + len;
        }
        assert_eq!(kinds, ["IHDR", "IDAT", "IEND"]);
        let idat_start = 8 + 12 + 13 + 8;
        let idat_len = u32::from_be_bytes([p[33], p[34], p[35], p[36]]) as usize;
        let raw =
            miniz_oxide::inflate::decompress_to_vec_zlib(&p[idat_start..idat_start + idat_len])
                .unwrap_or_default();
        assert_eq!(raw.len(), 2 * (1 + 3 * 3));
    }
}
