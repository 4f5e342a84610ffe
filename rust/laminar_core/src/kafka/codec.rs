//! Decompression of record batch bodies: every codec Kafka defines, each from a pure-Rust crate
//! (gzip and snappy through `kafka-protocol`'s own decompressors, which also handle the Xerial
//! snappy framing Java producers write; LZ4 frames with `lz4_flex`; zstd frames with `ruzstd`).

use std::io::Read;

use bytes::Bytes;
use kafka_protocol::compression::{Decompressor, Gzip, Snappy};
use kafka_protocol::records::Compression;

/// The codec's name as Kafka's `compression.type` spells it.
pub fn name(compression: Compression) -> &'static str {
    match compression {
        Compression::None => "none",
        Compression::Gzip => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
    }
}

/// The codec with Kafka's numeric id (record batch attributes, bits 0-2).
pub fn from_id(id: i16) -> Option<Compression> {
    Some(match id {
        0 => Compression::None,
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        4 => Compression::Zstd,
        _ => return None,
    })
}

/// Decompresses one batch body (the bytes after the batch header).
pub fn decompress(body: &mut Bytes, compression: Compression) -> anyhow::Result<Bytes> {
    match compression {
        Compression::None => Ok(std::mem::take(body)),
        Compression::Gzip => Gzip::decompress(body, |out| Ok(std::mem::take(out))),
        Compression::Snappy => Snappy::decompress(body, |out| Ok(std::mem::take(out))),
        Compression::Lz4 => {
            let mut out = Vec::with_capacity(body.len() * 4);
            lz4_flex::frame::FrameDecoder::new(&body[..]).read_to_end(&mut out)?;
            Ok(Bytes::from(out))
        }
        Compression::Zstd => {
            // Producers write one frame per batch; more than one is decoded in order all the same.
            let mut out = Vec::with_capacity(body.len() * 4);
            let mut input: &[u8] = &body[..];
            while !input.is_empty() {
                let mut decoder = ruzstd::decoding::StreamingDecoder::new(&mut input)
                    .map_err(|e| anyhow::anyhow!("zstd frame header: {e}"))?;
                decoder.read_to_end(&mut out)?;
            }
            Ok(Bytes::from(out))
        }
    }
}
