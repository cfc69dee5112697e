//! Deterministic synthetic images for vision models: a smooth gradient under
//! seeded 16-pixel tiles, so that encoders compress them about as well as
//! photographs (neither a flat colour nor pure noise), encoded as PNG or JPEG.
//! The bytes depend on the seed and the size alone.

use base64::Engine as _;
use batchbench_contract::conversation::Image;
use batchbench_contract::rng::Stream;
use batchbench_contract::spec::{ImageFormat, ImageSpec};

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

/// The PNG of an image whose rows all come from the run's seed but the last,
/// which comes from the image's own: everything up to the last row is
/// compressed once (a deflate stream ended by a sync flush, byte-aligned) and
/// shared, and each image appends its last row as a final stored block, with
/// the Adler-32 and CRC-32 continued from the shared part's. Every image's
/// pixels differ (a server hashing them caches none), for microseconds each.
#[derive(Clone)]
struct PngBase {
    width: u32,
    /// The shared bytes, up to a multiple of 3 (so their base64 joins).
    b64: String,
    /// The shared bytes after that multiple of 3.
    tail: Vec<u8>,
    /// Adler-32 state `(a, b)` after the shared raw rows.
    adler: (u32, u32),
    /// CRC-32 of the IDAT chunk's type and shared data.
    crc: crc32fast::Hasher,
}

fn adler_update((mut a, mut b): (u32, u32), data: &[u8]) -> (u32, u32) {
    const MOD: u32 = 65_521;
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += u32::from(x);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (a, b)
}

/// Filter byte 0, then RGB, row by row.
fn raw_rows(width: u32, pixels: &[u8]) -> Vec<u8> {
    let row = width as usize * 3;
    let mut raw = Vec::with_capacity(pixels.len() + pixels.len() / row.max(1));
    for r in pixels.chunks_exact(row) {
        raw.push(0);
        raw.extend_from_slice(r);
    }
    raw
}

/// Appends a PNG chunk: length, type, data, CRC of type and data.
fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

impl PngBase {
    fn new(seed: u64, width: u32, height: u32) -> Self {
        use miniz_oxide::deflate::core::{
            CompressorOxide, TDEFLFlush, compress_to_output, create_comp_flags_from_zip_params,
        };
        let px = pixels(seed, width, height - 1);
        let raw = raw_rows(width, &px);
        // A raw deflate stream (the zlib header is written below), level 6.
        let mut d = CompressorOxide::new(create_comp_flags_from_zip_params(6, -15, 0));
        let mut deflated = Vec::with_capacity(raw.len() / 2);
        compress_to_output(&mut d, &raw, TDEFLFlush::Sync, |b| {
            deflated.extend_from_slice(b);
            true
        });
        let row = 1 + width as usize * 3;
        // The zlib header and the shared stream; then, per image, a 5-byte
        // stored block header, the row, and the Adler-32.
        let idat_len = 2 + deflated.len() + 5 + row + 4;
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut ihdr = Vec::with_capacity(13);
        ihdr.extend_from_slice(&width.to_be_bytes());
        ihdr.extend_from_slice(&height.to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB, deflate, no filter, no interlace
        chunk(&mut out, b"IHDR", &ihdr);
        out.extend_from_slice(&(idat_len as u32).to_be_bytes());
        let idat_start = out.len();
        out.extend_from_slice(b"IDAT");
        out.extend_from_slice(&[0x78, 0x9C]);
        out.extend_from_slice(&deflated);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&out[idat_start..]);
        let cut = out.len() - out.len() % 3;
        Self {
            width,
            b64: base64::engine::general_purpose::STANDARD.encode(&out[..cut]),
            tail: out[cut..].to_vec(),
            adler: adler_update((1, 0), &raw),
            crc,
        }
    }

    /// The image of `seed` in base64, and its size: the shared rows, and its
    /// own last row.
    fn make(&self, seed: u64) -> (String, usize) {
        let last = pixels(seed, self.width, 1);
        let mut row = Vec::with_capacity(last.len() + 1);
        row.push(0);
        row.extend_from_slice(&last);
        // A final stored block: BFINAL=1, BTYPE=00, then LEN and NLEN.
        let len = row.len() as u16;
        let mut own = self.tail.clone();
        let idat_own = own.len();
        own.push(0x01);
        own.extend_from_slice(&len.to_le_bytes());
        own.extend_from_slice(&(!len).to_le_bytes());
        own.extend_from_slice(&row);
        let (a, b) = adler_update(self.adler, &row);
        own.extend_from_slice(&((b << 16) | a).to_be_bytes());
        let mut crc = self.crc.clone();
        crc.update(&own[idat_own..]);
        own.extend_from_slice(&crc.finalize().to_be_bytes());
        chunk(&mut own, b"IEND", &[]);
        let mut b64 = String::with_capacity(self.b64.len() + own.len() * 4 / 3 + 4);
        b64.push_str(&self.b64);
        base64::engine::general_purpose::STANDARD.encode_string(&own, &mut b64);
        (b64, self.b64.len() / 4 * 3 + own.len())
    }
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

/// Makes the images of a run: PNGs share their compressed body (see
/// `PngBase`); each JPEG is encoded whole.
#[derive(Clone)]
pub struct ImageMaker {
    spec: ImageSpec,
    png: Option<std::sync::Arc<PngBase>>,
}

impl std::fmt::Debug for ImageMaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageMaker")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl ImageMaker {
    /// The images of `spec` for the run of `seed` (a PNG's shared body is
    /// compressed here, once).
    pub fn new(seed: u64, spec: ImageSpec) -> Self {
        let png = (spec.format == ImageFormat::Png)
            .then(|| std::sync::Arc::new(PngBase::new(seed, spec.width, spec.height)));
        Self { spec, png }
    }

    /// The image of `seed`.
    pub fn make(&self, seed: u64) -> Result<Image, String> {
        let spec = &self.spec;
        let (base64, bytes) = match &self.png {
            Some(base) => base.make(seed),
            None => {
                let bytes = jpeg(
                    spec.width,
                    spec.height,
                    &pixels(seed, spec.width, spec.height),
                )?;
                let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
                (b64, bytes.len())
            }
        };
        Ok(Image {
            media_type: spec.format.media_type(),
            base64: base64.into(),
            bytes,
            width: spec.width,
            height: spec.height,
        })
    }
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
            let maker = ImageMaker::new(1, spec);
            let a = maker.make(7).unwrap_or_else(|e| panic!("{e}"));
            let again = ImageMaker::new(1, spec).make(7);
            assert_eq!(Ok(&a), again.as_ref());
            let other = maker.make(8).unwrap_or_else(|e| panic!("{e}"));
            assert_ne!(a.base64, other.base64);
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
    fn the_png_is_well_formed_and_its_pixels_are_the_images_own() {
        for (w, h) in [(3, 2), (1, 1), (97, 31)] {
            let maker = ImageMaker::new(
                5,
                ImageSpec {
                    per_request: 1,
                    width: w,
                    height: h,
                    format: ImageFormat::Png,
                },
            );
            let decode = |img: &Image| {
                base64::engine::general_purpose::STANDARD
                    .decode(img.base64.as_bytes())
                    .unwrap_or_default()
            };
            let img = maker.make(9).unwrap_or_else(|e| panic!("{e}"));
            let p = decode(&img);
            assert_eq!(p.len(), img.bytes);
            // Every chunk's CRC covers its type and data.
            let mut i = 8;
            let mut kinds = Vec::new();
            let mut idat = Vec::new();
            while i < p.len() {
                let len = u32::from_be_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]) as usize;
                let body = &p[i + 4..i + 8 + len];
                let at = i + 8 + len;
                let crc = u32::from_be_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]]);
                assert_eq!(crc32fast::hash(body), crc, "{w}x{h}");
                kinds.push(String::from_utf8_lossy(&body[..4]).into_owned());
                if &body[..4] == b"IDAT" {
                    idat = body[4..].to_vec();
                }
                i += 12 + len;
            }
            assert_eq!(kinds, ["IHDR", "IDAT", "IEND"]);
            // The zlib stream inflates (its Adler-32 checked) to every row:
            // the shared rows, then the image's own.
            let raw = miniz_oxide::inflate::decompress_to_vec_zlib(&idat)
                .unwrap_or_else(|e| panic!("{w}x{h}: {e:?}"));
            let mut expected = raw_rows(w, &pixels(5, w, h - 1));
            expected.extend(raw_rows(w, &pixels(9, w, 1)));
            assert_eq!(raw, expected, "{w}x{h}");
            let other = decode(&maker.make(10).unwrap_or_else(|e| panic!("{e}")));
            assert_eq!(p.len(), other.len());
            assert_ne!(p, other);
        }
    }
}
