//! `PreparedTxnState`: the persisted description of a prepared transaction, and its codec.
//!
//! The format follows Kafka-protocol conventions (KIP-482 tagged fields, KIP-915 "ignore what you
//! do not know") so that older and newer laminar versions read each other's states:
//!
//! ```text
//! binary = "LM" | version u8 (= 1) | fields | tagged_fields | crc32c (u32 big-endian, over all previous bytes)
//! fields (v1, in order):
//!   transactional_id  compact nullable string: uvarint(len + 1) then UTF-8 (0 = null)
//!   epoch             zigzag varlong
//!   attempt           uvarint
//!   producer_id       zigzag varlong  (-1 = unknown)
//!   producer_epoch    zigzag varint   (-1 = unknown)
//!   record_count      uvarint
//!   created_at_ms     zigzag varlong
//! tagged_fields = uvarint(count) then, in strictly ascending tag order: uvarint(tag) uvarint(size) bytes
//! text   = "lm1." + base64url(binary) without padding
//! ```
//!
//! Varints are unsigned LEB128 (7 bits a byte, least significant group first). The compact-string
//! length, the tagged-field count, tags and sizes are 32-bit (Kafka's `UNSIGNED_VARINT`);
//! `attempt` and `record_count` are 64-bit; `varint` is a zigzag-encoded i32 and `varlong` a
//! zigzag-encoded i64.
//!
//! Decoding is strict so that decode → encode is the identity on everything accepted (the
//! encoding is canonical): varints must be minimal (no redundant trailing `0x00` groups) and fit
//! their width, tags must be strictly ascending, base64 must be unpadded with zero trailing bits,
//! and nothing may follow the checksum. Unknown tagged fields are kept verbatim and written back.
//! Every malformed input is a [`DecodeError`] (→ [`CoreError::InvalidStateEncoding`]), never a
//! panic.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::CoreError;

/// The first two bytes of every binary encoding.
pub const MAGIC: [u8; 2] = *b"LM";
/// The format version this laminar writes and the highest it reads.
pub const FORMAT_VERSION: u8 = 1;
/// The prefix of the text form.
pub const TEXT_PREFIX: &str = "lm1.";
/// `producer_id` / `producer_epoch` value meaning "not known".
pub const UNKNOWN: i64 = -1;

/// Bytes of the header (magic + version).
const HEADER_LEN: usize = 3;
/// Bytes of the trailing checksum.
const CRC_LEN: usize = 4;

/// The persisted state of one prepared transaction (see the module docs for the format).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PreparedTxnState {
    /// The Kafka `transactional.id` (or the sink's participant id); `None` when there is none.
    pub transactional_id: Option<String>,
    /// The epoch (Spark batch id) the transaction belongs to.
    pub epoch: i64,
    /// How many times this epoch was attempted before (0 for the first attempt).
    pub attempt: u64,
    /// The producer id reported by the client, or -1 if unknown.
    pub producer_id: i64,
    /// The producer epoch reported by the client, or -1 if unknown.
    pub producer_epoch: i32,
    /// Records written in the transaction.
    pub record_count: u64,
    /// When the state was built, in milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Optional fields by tag, including tags this version does not know (kept verbatim).
    pub tagged_fields: TaggedFields,
}

impl PreparedTxnState {
    /// A state with the given transactional id and epoch and every other field at its default
    /// (attempt 0, unknown producer id/epoch, no records, created at 0, no tagged fields).
    pub fn new(transactional_id: Option<String>, epoch: i64) -> Self {
        Self {
            transactional_id,
            epoch,
            attempt: 0,
            producer_id: UNKNOWN,
            producer_epoch: UNKNOWN as i32,
            record_count: 0,
            created_at_ms: 0,
            tagged_fields: TaggedFields::new(),
        }
    }

    /// Checks the limits of the format (lengths that fit the 32-bit length prefixes), so that
    /// whatever passes encodes into something the decoder accepts.
    pub fn validate(&self) -> Result<(), CoreError> {
        if let Some(id) = &self.transactional_id {
            if id.len() >= u32::MAX as usize {
                return Err(CoreError::InvalidStateEncoding(format!(
                    "transactional_id is {} bytes long; the format allows at most {}",
                    id.len(),
                    u32::MAX - 1
                )));
            }
        }
        for (tag, value) in self.tagged_fields.iter() {
            if value.len() > u32::MAX as usize {
                return Err(CoreError::InvalidStateEncoding(format!(
                    "tagged field {tag} is {} bytes long; the format allows at most {}",
                    value.len(),
                    u32::MAX
                )));
            }
        }
        Ok(())
    }

    /// The canonical binary encoding.
    pub fn to_bytes(&self) -> Vec<u8> {
        let id_len = self.transactional_id.as_ref().map_or(0, String::len);
        let tags_len: usize = self.tagged_fields.iter().map(|(_, v)| v.len() + 10).sum();
        let mut w = Writer::with_capacity(HEADER_LEN + id_len + tags_len + 64);
        w.bytes(&MAGIC);
        w.u8(FORMAT_VERSION);
        w.compact_nullable_string(self.transactional_id.as_deref());
        w.varlong(self.epoch);
        w.uvarint(self.attempt);
        w.varlong(self.producer_id);
        w.varint(self.producer_epoch);
        w.uvarint(self.record_count);
        w.varlong(self.created_at_ms);
        self.tagged_fields.encode(&mut w);
        let crc = crc32c::crc32c(&w.buf);
        w.bytes(&crc.to_be_bytes());
        w.buf
    }

    /// The canonical text form: `"lm1."` + unpadded base64url of [`PreparedTxnState::to_bytes`].
    pub fn to_text(&self) -> String {
        let bytes = self.to_bytes();
        let mut text = String::with_capacity(TEXT_PREFIX.len() + bytes.len().div_ceil(3) * 4);
        text.push_str(TEXT_PREFIX);
        URL_SAFE_NO_PAD.encode_string(&bytes, &mut text);
        text
    }

    /// Decodes the binary form; see [`PreparedTxnState::decode`] for the error detail.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, CoreError> {
        Self::decode(bytes).map_err(CoreError::from)
    }

    /// Decodes the text form; see [`PreparedTxnState::decode_text`] for the error detail.
    pub fn parse(text: &str) -> Result<Self, CoreError> {
        Self::decode_text(text).map_err(CoreError::from)
    }

    /// Decodes the binary form, saying exactly what is wrong with a malformed input.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.is_empty() {
            return Err(DecodeError::new(
                DecodeErrorKind::Empty,
                "the input is empty",
            ));
        }
        match bytes.get(..MAGIC.len()) {
            Some(m) if m == MAGIC => {}
            Some(m) => {
                return Err(DecodeError::new(
                    DecodeErrorKind::BadMagic,
                    format!(
                        "it does not start with the magic bytes \"LM\" (found 0x{})",
                        hex(m)
                    ),
                ));
            }
            None if MAGIC.starts_with(bytes) => {
                return Err(truncated_at(bytes.len(), "the magic bytes"));
            }
            None => {
                return Err(DecodeError::new(
                    DecodeErrorKind::BadMagic,
                    format!(
                        "it does not start with the magic bytes \"LM\" (found 0x{})",
                        hex(bytes)
                    ),
                ));
            }
        }
        let Some(&version) = bytes.get(MAGIC.len()) else {
            return Err(truncated_at(bytes.len(), "the format version"));
        };
        if version > FORMAT_VERSION {
            return Err(DecodeError::new(
                DecodeErrorKind::NewerVersion,
                format!(
                    "it was written by a newer laminar (format version {version}); this laminar \
                     reads format version {FORMAT_VERSION}: upgrade laminar"
                ),
            ));
        }
        if version == 0 {
            return Err(DecodeError::new(
                DecodeErrorKind::UnknownVersion,
                "format version 0 does not exist (the first format version is 1)",
            ));
        }
        if bytes.len() < HEADER_LEN + CRC_LEN {
            return Err(truncated_at(bytes.len(), "the checksum"));
        }
        let Some((covered, stored)) = bytes
            .len()
            .checked_sub(CRC_LEN)
            .and_then(|at| bytes.split_at_checked(at))
        else {
            return Err(truncated_at(bytes.len(), "the checksum"));
        };
        let Ok(stored) = <[u8; CRC_LEN]>::try_from(stored) else {
            return Err(truncated_at(bytes.len(), "the checksum"));
        };
        let stored = u32::from_be_bytes(stored);
        let computed = crc32c::crc32c(covered);
        if stored != computed {
            return Err(DecodeError::new(
                DecodeErrorKind::BadCrc,
                format!(
                    "checksum mismatch (stored 0x{stored:08x}, computed 0x{computed:08x}): the \
                     state is corrupt or truncated"
                ),
            ));
        }
        let mut r = Reader::at(covered, HEADER_LEN);
        let state = Self {
            transactional_id: r.compact_nullable_string("transactional_id")?,
            epoch: r.varlong("epoch")?,
            attempt: r.uvarint64("attempt")?,
            producer_id: r.varlong("producer_id")?,
            producer_epoch: r.varint("producer_epoch")?,
            record_count: r.uvarint64("record_count")?,
            created_at_ms: r.varlong("created_at_ms")?,
            tagged_fields: TaggedFields::decode(&mut r)?,
        };
        r.finish("the tagged fields")?;
        Ok(state)
    }

    /// Decodes the text form, saying exactly what is wrong with a malformed input.
    pub fn decode_text(text: &str) -> Result<Self, DecodeError> {
        if text.is_empty() {
            return Err(DecodeError::new(
                DecodeErrorKind::Empty,
                "the text is empty",
            ));
        }
        let Some(payload) = text.strip_prefix(TEXT_PREFIX) else {
            return Err(bad_prefix(text));
        };
        let bytes = URL_SAFE_NO_PAD.decode(payload).map_err(|e| {
            DecodeError::new(
                DecodeErrorKind::BadBase64,
                format!(
                    "the text after \"{TEXT_PREFIX}\" is not unpadded base64url: {}",
                    describe_base64_error(&e, TEXT_PREFIX.len())
                ),
            )
        })?;
        Self::decode(&bytes)
    }
}

impl fmt::Display for PreparedTxnState {
    /// The text form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

/// Optional fields by tag (KIP-482), kept in ascending tag order.
///
/// Fields this version knows are read and written through [`TaggedField`] types
/// ([`TaggedFields::get`], [`TaggedFields::set`]); all others are kept as raw bytes so that
/// re-encoding preserves them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TaggedFields(BTreeMap<u32, Vec<u8>>);

/// A typed tagged field: a tag number and a codec for its value.
///
/// Adding a field to the format means adding one type that implements this trait, with the next
/// free tag; the outer codec does not change, and older readers keep the bytes without reading
/// them.
pub trait TaggedField: Sized {
    /// The field's tag (assigned once, never reused).
    const TAG: u32;
    /// The field's name, for error messages.
    const NAME: &'static str;
    /// Writes the value (without tag or size).
    fn encode_value(&self, w: &mut Writer);
    /// Reads the value from exactly the bytes of the field.
    fn decode_value(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
}

impl TaggedFields {
    /// No tagged fields.
    pub fn new() -> Self {
        Self(BTreeMap::new())
    }

    /// The number of tagged fields.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The raw bytes of a tag.
    pub fn get_raw(&self, tag: u32) -> Option<&[u8]> {
        self.0.get(&tag).map(Vec::as_slice)
    }

    /// Sets the raw bytes of a tag, returning the previous ones.
    pub fn insert_raw(&mut self, tag: u32, value: Vec<u8>) -> Option<Vec<u8>> {
        self.0.insert(tag, value)
    }

    /// Removes a tag, returning its raw bytes.
    pub fn remove(&mut self, tag: u32) -> Option<Vec<u8>> {
        self.0.remove(&tag)
    }

    /// (tag, raw bytes) in ascending tag order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (u32, &[u8])> {
        self.0.iter().map(|(t, v)| (*t, v.as_slice()))
    }

    /// Reads a typed field; `Ok(None)` when absent.
    pub fn get<F: TaggedField>(&self) -> Result<Option<F>, DecodeError> {
        let Some(raw) = self.get_raw(F::TAG) else {
            return Ok(None);
        };
        let mut r = Reader::new(raw);
        let value = F::decode_value(&mut r).map_err(|e| e.in_field(F::NAME, F::TAG))?;
        r.finish(F::NAME).map_err(|e| e.in_field(F::NAME, F::TAG))?;
        Ok(Some(value))
    }

    /// Writes a typed field (replacing any previous value of its tag).
    pub fn set<F: TaggedField>(&mut self, value: &F) {
        let mut w = Writer::with_capacity(16);
        value.encode_value(&mut w);
        self.0.insert(F::TAG, w.buf);
    }

    /// Writes the tagged-field section (count, then tag/size/bytes in ascending tag order).
    pub(crate) fn encode_to(&self, w: &mut Writer) {
        self.encode(w);
    }

    /// Reads a tagged-field section (strictly ascending tags), keeping every field's bytes.
    pub(crate) fn decode_from(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Self::decode(r)
    }

    fn encode(&self, w: &mut Writer) {
        w.uvarint(self.0.len() as u64);
        for (tag, value) in &self.0 {
            w.uvarint(u64::from(*tag));
            w.uvarint(value.len() as u64);
            w.bytes(value);
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let count = r.uvarint32("the tagged field count")?;
        let mut fields = BTreeMap::new();
        let mut previous: Option<u32> = None;
        // No allocation is sized by `count`: each field consumes at least two bytes, so a huge
        // count in a short input ends in a truncation error after a few iterations.
        for _ in 0..count {
            let tag_offset = r.pos;
            let tag = r.uvarint32("a tagged field's tag")?;
            if let Some(p) = previous {
                if tag <= p {
                    return Err(DecodeError::new(
                        DecodeErrorKind::TagsNotAscending,
                        format!(
                            "tagged field {tag} at byte offset {tag_offset} follows tag {p}: tags \
                             must be strictly ascending"
                        ),
                    ));
                }
            }
            previous = Some(tag);
            let size = r.uvarint32("a tagged field's size")?;
            let value = r.take(size as usize, "a tagged field's value")?;
            fields.insert(tag, value.to_vec());
        }
        Ok(Self(fields))
    }
}

impl FromIterator<(u32, Vec<u8>)> for TaggedFields {
    fn from_iter<I: IntoIterator<Item = (u32, Vec<u8>)>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

/// What kind of malformation a decode found (stable names for tests and tooling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecodeErrorKind {
    /// Nothing to decode.
    Empty,
    /// The text does not start with `lm1.`.
    BadPrefix,
    /// The text prefix names a newer text format (`lm2.` …).
    NewerTextVersion,
    /// The text payload is not canonical unpadded base64url.
    BadBase64,
    /// The binary form does not start with `LM`.
    BadMagic,
    /// The version byte is higher than this laminar reads.
    NewerVersion,
    /// The version byte is 0.
    UnknownVersion,
    /// The checksum does not match.
    BadCrc,
    /// The input ends in the middle of something.
    Truncated,
    /// A varint has redundant trailing zero groups.
    OverlongVarint,
    /// A varint does not fit its width.
    VarintOverflow,
    /// The transactional id is not UTF-8.
    InvalidUtf8,
    /// Tagged fields are not in strictly ascending tag order.
    TagsNotAscending,
    /// Bytes follow the last field.
    TrailingBytes,
}

impl DecodeErrorKind {
    /// The snake_case name used in the golden vectors.
    pub fn name(self) -> &'static str {
        match self {
            DecodeErrorKind::Empty => "empty",
            DecodeErrorKind::BadPrefix => "bad_prefix",
            DecodeErrorKind::NewerTextVersion => "newer_text_version",
            DecodeErrorKind::BadBase64 => "bad_base64",
            DecodeErrorKind::BadMagic => "bad_magic",
            DecodeErrorKind::NewerVersion => "newer_version",
            DecodeErrorKind::UnknownVersion => "unknown_version",
            DecodeErrorKind::BadCrc => "bad_crc",
            DecodeErrorKind::Truncated => "truncated",
            DecodeErrorKind::OverlongVarint => "overlong_varint",
            DecodeErrorKind::VarintOverflow => "varint_overflow",
            DecodeErrorKind::InvalidUtf8 => "invalid_utf8",
            DecodeErrorKind::TagsNotAscending => "tags_not_ascending",
            DecodeErrorKind::TrailingBytes => "trailing_bytes",
        }
    }
}

/// A malformed encoding: its kind and a message that says what is wrong and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// What kind of malformation.
    pub kind: DecodeErrorKind,
    /// What is wrong, where (byte offsets) and, when there is one, what to do.
    pub message: String,
}

impl DecodeError {
    /// A new error.
    pub fn new(kind: DecodeErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    fn in_field(self, name: &str, tag: u32) -> Self {
        Self {
            kind: self.kind,
            message: format!("tagged field {name} (tag {tag}): {}", self.message),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid prepared transaction state ({}): {}",
            self.kind.name(),
            self.message
        )
    }
}

impl std::error::Error for DecodeError {}

impl From<DecodeError> for CoreError {
    fn from(e: DecodeError) -> Self {
        CoreError::InvalidStateEncoding(e.to_string())
    }
}

/// Canonical writer of the format's primitives (also for [`TaggedField`] values).
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            buf: Vec::with_capacity(capacity),
        }
    }

    /// The bytes written so far.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// One raw byte.
    pub fn u8(&mut self, b: u8) {
        self.buf.push(b);
    }

    /// Raw bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// Minimal unsigned LEB128.
    pub fn uvarint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    /// Zigzag i32 (`varint`).
    pub fn varint(&mut self, v: i32) {
        self.uvarint(u64::from(((v << 1) ^ (v >> 31)) as u32));
    }

    /// Zigzag i64 (`varlong`).
    pub fn varlong(&mut self, v: i64) {
        self.uvarint(((v << 1) ^ (v >> 63)) as u64);
    }

    /// Compact nullable string: uvarint(len + 1) then UTF-8; 0 for null.
    pub fn compact_nullable_string(&mut self, s: Option<&str>) {
        match s {
            None => self.uvarint(0),
            Some(s) => {
                self.uvarint(s.len() as u64 + 1);
                self.bytes(s.as_bytes());
            }
        }
    }
}

/// Strict reader of the format's primitives (also for [`TaggedField`] values). Every read is
/// bounds-checked and names what it was reading when it fails.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn at(buf: &'a [u8], pos: usize) -> Self {
        Self { buf, pos }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Fails unless every byte was read.
    pub fn finish(&self, after: &str) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(DecodeError::new(
                DecodeErrorKind::TrailingBytes,
                format!(
                    "{n} unexpected byte(s) after {after}, at byte offset {}",
                    self.pos
                ),
            )),
        }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).filter(|end| *end <= self.buf.len());
        match end.and_then(|end| self.buf.get(self.pos..end).map(|s| (s, end))) {
            Some((s, end)) => {
                self.pos = end;
                Ok(s)
            }
            None => Err(DecodeError::new(
                DecodeErrorKind::Truncated,
                format!(
                    "truncated: {what} at byte offset {} needs {n} byte(s), {} left",
                    self.pos,
                    self.remaining()
                ),
            )),
        }
    }

    /// A minimal unsigned LEB128 of at most `bits` bits.
    fn uvarint_bits(&mut self, bits: u32, what: &str) -> Result<u64, DecodeError> {
        let start = self.pos;
        let max_len = bits.div_ceil(7);
        let mut value: u64 = 0;
        for i in 0..max_len {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(DecodeError::new(
                    DecodeErrorKind::Truncated,
                    format!(
                        "truncated: the input ends inside {what} (varint at byte offset {start})"
                    ),
                ));
            };
            self.pos += 1;
            let payload = u64::from(b & 0x7f);
            let shift = 7 * i;
            if i == max_len - 1 && (b & 0x80 != 0 || payload >> (bits - shift) != 0) {
                self.pos = start;
                return Err(DecodeError::new(
                    DecodeErrorKind::VarintOverflow,
                    format!("{what} (varint at byte offset {start}) does not fit in {bits} bits"),
                ));
            }
            value |= payload << shift;
            if b & 0x80 == 0 {
                if b == 0 && i > 0 {
                    self.pos = start;
                    return Err(DecodeError::new(
                        DecodeErrorKind::OverlongVarint,
                        format!(
                            "{what} (varint at byte offset {start}) is not minimally encoded \
                             (redundant trailing zero group)"
                        ),
                    ));
                }
                return Ok(value);
            }
        }
        // Unreachable: the last iteration either returns or fails the overflow check.
        Err(DecodeError::new(
            DecodeErrorKind::VarintOverflow,
            format!("{what} (varint at byte offset {start}) does not fit in {bits} bits"),
        ))
    }

    /// A 32-bit unsigned varint.
    pub fn uvarint32(&mut self, what: &str) -> Result<u32, DecodeError> {
        // At most 32 bits by construction.
        self.uvarint_bits(32, what).map(|v| v as u32)
    }

    /// A 64-bit unsigned varint.
    pub fn uvarint64(&mut self, what: &str) -> Result<u64, DecodeError> {
        self.uvarint_bits(64, what)
    }

    /// A zigzag i32 (`varint`).
    pub fn varint(&mut self, what: &str) -> Result<i32, DecodeError> {
        let u = self.uvarint32(what)?;
        Ok(((u >> 1) as i32) ^ -((u & 1) as i32))
    }

    /// A zigzag i64 (`varlong`).
    pub fn varlong(&mut self, what: &str) -> Result<i64, DecodeError> {
        let u = self.uvarint64(what)?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    /// A compact nullable string (uvarint(len + 1) then UTF-8; 0 = null).
    pub fn compact_nullable_string(&mut self, what: &str) -> Result<Option<String>, DecodeError> {
        let n = self.uvarint32(what)?;
        let Some(len) = n.checked_sub(1) else {
            return Ok(None);
        };
        let start = self.pos;
        let bytes = self.take(len as usize, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(Some(s.to_owned())),
            Err(e) => Err(DecodeError::new(
                DecodeErrorKind::InvalidUtf8,
                format!(
                    "{what} is not valid UTF-8 (invalid byte at offset {})",
                    start + e.valid_up_to()
                ),
            )),
        }
    }
}

fn truncated_at(len: usize, what: &str) -> DecodeError {
    DecodeError::new(
        DecodeErrorKind::Truncated,
        format!("truncated: the input is {len} byte(s) long and ends before {what}"),
    )
}

fn bad_prefix(text: &str) -> DecodeError {
    // "lmN." with N > 1: a newer text format, say so rather than "garbage".
    if let Some(rest) = text.strip_prefix("lm") {
        let digits: &str = rest
            .split('.')
            .next()
            .filter(|d| !d.is_empty() && d.len() <= 9 && d.bytes().all(|b| b.is_ascii_digit()))
            .unwrap_or("");
        if let Ok(n) = digits.parse::<u32>() {
            if n > u32::from(FORMAT_VERSION) && rest.len() > digits.len() {
                return DecodeError::new(
                    DecodeErrorKind::NewerTextVersion,
                    format!(
                        "it was written by a newer laminar (text format \"lm{n}.\"); this laminar \
                         reads \"{TEXT_PREFIX}\": upgrade laminar"
                    ),
                );
            }
        }
    }
    let shown: String = text.chars().take(12).collect();
    let ellipsis = if text.chars().count() > 12 { "…" } else { "" };
    DecodeError::new(
        DecodeErrorKind::BadPrefix,
        format!("the text must start with \"{TEXT_PREFIX}\" (found {shown:?}{ellipsis})"),
    )
}

fn describe_base64_error(e: &base64::DecodeError, offset: usize) -> String {
    match e {
        base64::DecodeError::InvalidByte(at, byte) => {
            format!(
                "character {:?} at offset {} is not allowed",
                char::from(*byte),
                at + offset
            )
        }
        base64::DecodeError::InvalidLength(len) => {
            format!("{len} base64 characters cannot encode whole bytes (truncated?)")
        }
        base64::DecodeError::InvalidLastSymbol {
            offset: at, symbol, ..
        } => format!(
            "the last character {:?} at offset {} has non-zero trailing bits (not canonical)",
            char::from(*symbol),
            at + offset
        ),
        base64::DecodeError::InvalidPadding => "padding ('=') is not allowed".to_owned(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
