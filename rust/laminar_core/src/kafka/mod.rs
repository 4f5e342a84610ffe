//! The Kafka wire protocol, sans-io (docs/protocol.md §1 and §8).
//!
//! Python opens the sockets (plaintext, TLS, SASL) and moves length-prefixed frames; this module
//! encodes every request and decodes every response with the `kafka-protocol` crate (generated
//! from Kafka's own message specs), decodes fetched record batches (message format v2, every
//! codec: none, gzip, snappy, lz4, zstd), replays the control batches to keep only committed
//! records, and answers the sink's witness question (the highest epoch among its committed
//! records). Nothing here touches a socket, a clock or Python.
//!
//! - [`batch`]: record batches → [`batch::Batch`] (framing, CRC, codecs, control records)
//! - [`codec`]: the decompressors, pure Rust
//! - [`replay`]: commit/abort markers replayed per partition → committed / aborted / open
//! - [`sasl`]: the OAUTHBEARER initial response, the broker's answer to it, when a token is
//!   refreshed and a session re-authenticated (KIP-368)
//! - [`scan`]: one partition read fetch by fetch (what to fetch next, what to keep)
//! - [`witness`]: the highest `laminar.epoch` among a sink's committed records
//! - [`wire`]: request frames and response decoding (Metadata, ListOffsets, Fetch, FindCoordinator,
//!   EndTxn, OffsetFetch, OffsetCommit, ApiVersions, SASL)

pub mod batch;
pub mod codec;
pub mod replay;
pub mod sasl;
pub mod scan;
pub mod wire;
pub mod witness;

use thiserror::Error;

/// Why Kafka data did not decode, or a broker answered with an error.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct KafkaError(pub String);

impl KafkaError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// Results of this module.
pub type KafkaResult<T> = Result<T, KafkaError>;
