//! Allocation-free text writers shared by the encoders: JSON strings, numbers, dates and times.
//!
//! Everything appends to a caller-owned `Vec<u8>` so the per-value path never allocates once the
//! output buffer has grown to its working size.

use std::cell::Cell;
use std::io::Write as _;

/// How a byte is written inside a JSON string: 0 = as is, `b'u'` = `\u00XX`, other = `\` + byte.
static JSON_ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `s` as a JSON string literal (quotes included). Input must be valid UTF-8 (checked when
/// the batch is imported); non-ASCII characters are written as raw UTF-8, which JSON allows.
#[inline]
pub fn write_json_str(out: &mut Vec<u8>, s: &[u8]) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in s.iter().enumerate() {
        let escape = JSON_ESCAPE[b as usize];
        if escape == 0 {
            continue;
        }
        out.extend_from_slice(&s[start..i]);
        if escape == b'u' {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 0xf) as usize]);
        } else {
            out.push(b'\\');
            out.push(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&s[start..]);
    out.push(b'"');
}

/// Appends an integer in decimal.
#[inline]
pub fn write_int<I: itoa::Integer>(out: &mut Vec<u8>, v: I) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(v).as_bytes());
}

/// Appends a float as a JSON value: the shortest text that reads back to the same value (`0.1`,
/// `1e+300`), or the strings `"NaN"`, `"Infinity"`, `"-Infinity"` (what Spark's `to_json` writes).
#[inline]
pub fn write_json_f64(out: &mut Vec<u8>, v: f64) {
    if v.is_finite() {
        let mut buf = zmij::Buffer::new();
        out.extend_from_slice(buf.format_finite(v).as_bytes());
    } else {
        write_non_finite(out, v.is_nan(), v > 0.0);
    }
}

/// [`write_json_f64`] for `f32`: the shortest text of the `f32` value (0.1f32 → `0.1`).
#[inline]
pub fn write_json_f32(out: &mut Vec<u8>, v: f32) {
    if v.is_finite() {
        let mut buf = zmij::Buffer::new();
        out.extend_from_slice(buf.format_finite(v).as_bytes());
    } else {
        write_non_finite(out, v.is_nan(), v > 0.0);
    }
}

/// [`write_json_f64`] for `f16`: the shortest decimal that reads back to the same `f16` (0.1 → `0.1`,
/// not the `f32` text `0.099975586` of the same value). Shortest round-trip printers (zmij, ryu)
/// have no 16-bit mode, so the digits are searched: an `f16` needs at most 5 significant digits,
/// and a decimal of ≤ 5 digits reads back exactly through `f64`, so printing that `f64` with
/// [`write_json_f64`] gives those digits in the usual notation.
pub fn write_json_f16(out: &mut Vec<u8>, v: half::f16) {
    let wide = v.to_f64();
    if !v.is_finite() || wide == 0.0 {
        write_json_f64(out, wide);
        return;
    }
    for digits in 1..=5usize {
        // `-6.5504e4` at most: a stack buffer, no allocation.
        let mut buf = std::io::Cursor::new([0u8; 32]);
        if write!(buf, "{:.*e}", digits - 1, wide).is_err() {
            break;
        }
        let written = usize::try_from(buf.position()).unwrap_or(0);
        let candidate = std::str::from_utf8(&buf.get_ref()[..written])
            .ok()
            .and_then(|text| text.parse::<f64>().ok());
        if let Some(candidate) = candidate {
            if half::f16::from_f64(candidate).to_bits() == v.to_bits() {
                write_json_f64(out, candidate);
                return;
            }
        }
    }
    write_json_f64(out, wide);
}

#[cold]
fn write_non_finite(out: &mut Vec<u8>, nan: bool, positive: bool) {
    out.extend_from_slice(match (nan, positive) {
        (true, _) => b"\"NaN\"".as_slice(),
        (false, true) => b"\"Infinity\"",
        (false, false) => b"\"-Infinity\"",
    });
}

/// Appends the decimal `unscaled × 10^-scale` with exactly `scale` fraction digits (scale kept:
/// `1.50` stays `1.50`); a negative scale appends zeros (`12` with scale -2 is `1200`).
pub fn write_decimal_digits(out: &mut Vec<u8>, negative: bool, digits: &[u8], scale: i32) {
    if negative {
        out.push(b'-');
    }
    if scale <= 0 {
        out.extend_from_slice(digits);
        if digits != b"0" {
            out.extend(std::iter::repeat_n(b'0', scale.unsigned_abs() as usize));
        }
        return;
    }
    let scale = scale as usize;
    if digits.len() > scale {
        let (int_part, frac_part) = digits.split_at(digits.len() - scale);
        out.extend_from_slice(int_part);
        out.push(b'.');
        out.extend_from_slice(frac_part);
    } else {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', scale - digits.len()));
        out.extend_from_slice(digits);
    }
}

/// Appends an `i128` decimal (see [`write_decimal_digits`]).
#[inline]
pub fn write_decimal_i128(out: &mut Vec<u8>, v: i128, scale: i8) {
    let mut buf = itoa::Buffer::new();
    let abs = v.unsigned_abs();
    // 64-bit formatting is several times faster than 128-bit; most decimals fit.
    let digits = match u64::try_from(abs) {
        Ok(small) => buf.format(small).as_bytes(),
        Err(_) => buf.format(abs).as_bytes(),
    };
    write_decimal_digits(out, v < 0, digits, i32::from(scale));
}

/// Appends an `i256` decimal (see [`write_decimal_digits`]); values that fit `i128` take the fast path.
pub fn write_decimal_i256(out: &mut Vec<u8>, v: arrow_buffer::i256, scale: i8) {
    if let Some(small) = v.to_i128() {
        write_decimal_i128(out, small, scale);
        return;
    }
    let text = v.to_string();
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    write_decimal_digits(out, negative, digits.as_bytes(), i32::from(scale));
}

static TWO_DIGITS: [[u8; 2]; 100] = {
    let mut table = [[0u8; 2]; 100];
    let mut i = 0;
    while i < 100 {
        table[i] = [b'0' + (i / 10) as u8, b'0' + (i % 10) as u8];
        i += 1;
    }
    table
};

#[inline]
fn push2(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&TWO_DIGITS[(v % 100) as usize]);
}

/// Appends `frac` as exactly `digits` decimal digits (zero padded on the left).
#[inline]
fn push_fraction(out: &mut Vec<u8>, frac: u32, digits: u32) {
    match digits {
        0 => {}
        3 => {
            let f = frac % 1000;
            out.push(b'.');
            out.push(b'0' + (f / 100) as u8);
            push2(out, f % 100);
        }
        6 => {
            let f = frac % 1_000_000;
            out.push(b'.');
            push2(out, f / 10_000);
            push2(out, f / 100 % 100);
            push2(out, f % 100);
        }
        _ => {
            out.push(b'.');
            let mut buf = [b'0'; 9];
            let mut v = frac;
            for slot in buf[..digits.min(9) as usize].iter_mut().rev() {
                *slot = b'0' + (v % 10) as u8;
                v /= 10;
            }
            out.extend_from_slice(&buf[..digits.min(9) as usize]);
        }
    }
}

/// Civil date (proleptic Gregorian) of a day count since 1970-01-01 (H. Hinnant's algorithm).
#[inline]
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Appends `YYYY-MM-DD`. Years outside 0000–9999 use ISO 8601's expanded form (`-0044`, `+10000`).
#[inline]
pub fn write_date(out: &mut Vec<u8>, days: i64) {
    let (year, month, day) = civil_from_days(days);
    if (0..=9999).contains(&year) {
        let y = year as u32;
        push2(out, y / 100);
        push2(out, y % 100);
    } else {
        write_expanded_year(out, year);
    }
    out.push(b'-');
    push2(out, month);
    out.push(b'-');
    push2(out, day);
}

#[cold]
fn write_expanded_year(out: &mut Vec<u8>, year: i64) {
    out.push(if year < 0 { b'-' } else { b'+' });
    let abs = year.unsigned_abs();
    if abs < 1000 {
        out.extend(std::iter::repeat_n(
            b'0',
            4 - itoa::Buffer::new().format(abs).len(),
        ));
    }
    write_int(out, abs);
}

/// Appends `HH:MM:SS[.f…]` for a time of day given as seconds and a fraction of `frac_digits` digits.
#[inline]
pub fn write_time_of_day(out: &mut Vec<u8>, secs_of_day: u32, frac: u32, frac_digits: u32) {
    push2(out, secs_of_day / 3600);
    out.push(b':');
    push2(out, secs_of_day / 60 % 60);
    out.push(b':');
    push2(out, secs_of_day % 60);
    push_fraction(out, frac, frac_digits);
}

/// Whether `value` (in units of `1/per_second` s since midnight) is a time of day PostgreSQL's
/// `time` accepts: `00:00:00` to `24:00:00` inclusive. Arrow time32/time64 values outside that
/// range are malformed input; every encoder refuses them the same way (a `DataError`), so that
/// Kafka and PostgreSQL never disagree about a batch.
#[inline]
pub fn time_of_day_in_range(value: i64, per_second: i64) -> bool {
    (0..=86_400 * per_second).contains(&value)
}

/// The reason a time of day is refused (for [`time_of_day_in_range`] failures).
#[cold]
pub fn time_of_day_error(value: i64, unit: arrow_schema::TimeUnit) -> String {
    format!(
        "time {value} ({unit:?}s since midnight) is outside the day: a time of day is \
         00:00:00 to 24:00:00"
    )
}

/// Units per second and fraction digits of an Arrow time unit.
#[inline]
pub fn unit_scale(unit: arrow_schema::TimeUnit) -> (i64, u32) {
    use arrow_schema::TimeUnit;
    match unit {
        TimeUnit::Second => (1, 0),
        TimeUnit::Millisecond => (1_000, 3),
        TimeUnit::Microsecond => (1_000_000, 6),
        TimeUnit::Nanosecond => (1_000_000_000, 9),
    }
}

/// Remembers the text of recently written dates in a small direct-mapped table (64 days): rows of
/// a batch mostly fall within a few weeks, so the calendar arithmetic runs about once per day
/// instead of once per value.
#[derive(Debug)]
pub struct DateCache {
    slots: Box<[Cell<CachedDate>; 64]>,
}

#[derive(Debug, Clone, Copy)]
struct CachedDate {
    day: i64,
    len: u8,
    text: [u8; 23],
}

impl Default for DateCache {
    fn default() -> Self {
        let empty = CachedDate {
            day: i64::MIN,
            len: 0,
            text: [0; 23],
        };
        Self {
            slots: Box::new(std::array::from_fn(|_| Cell::new(empty))),
        }
    }
}

impl DateCache {
    /// Appends `YYYY-MM-DD` for `days` since 1970-01-01 (see [`write_date`]).
    #[inline]
    pub fn write(&self, out: &mut Vec<u8>, days: i64) {
        let slot = &self.slots[(days & 63) as usize];
        let cached = slot.get();
        if cached.day == days {
            out.extend_from_slice(&cached.text[..cached.len as usize]);
            return;
        }
        let start = out.len();
        write_date(out, days);
        let written = &out[start..];
        let mut text = [0u8; 23];
        if written.len() <= text.len() {
            text[..written.len()].copy_from_slice(written);
            slot.set(CachedDate {
                day: days,
                len: written.len() as u8,
                text,
            });
        }
    }
}

/// Appends `YYYY-MM-DDTHH:MM:SS[.f…]` (+ `Z` when `utc`) for `value` units since the Unix epoch;
/// the fraction has exactly the unit's digits (3 for ms, 6 for µs, 9 for ns, none for s).
#[inline]
pub fn write_timestamp(
    out: &mut Vec<u8>,
    value: i64,
    per_second: i64,
    frac_digits: u32,
    utc: bool,
) {
    write_timestamp_cached(
        out,
        value,
        per_second,
        frac_digits,
        utc,
        &DateCache::default(),
    );
}

/// [`write_timestamp`] with a per-column [`DateCache`].
#[inline]
pub fn write_timestamp_cached(
    out: &mut Vec<u8>,
    value: i64,
    per_second: i64,
    frac_digits: u32,
    utc: bool,
    cache: &DateCache,
) {
    let secs = value.div_euclid(per_second);
    let frac = value.rem_euclid(per_second) as u32;
    let days = secs.div_euclid(86_400);
    let secs_of_day = secs.rem_euclid(86_400) as u32;
    cache.write(out, days);
    out.push(b'T');
    write_time_of_day(out, secs_of_day, frac, frac_digits);
    if utc {
        out.push(b'Z');
    }
}

/// Appends an ISO 8601 duration in seconds, `PT<s>[.f…]S`, with a leading `-` when negative
/// (`-PT1.500000S`); the fraction has exactly the unit's digits.
pub fn write_duration(out: &mut Vec<u8>, value: i64, per_second: i64, frac_digits: u32) {
    if value < 0 {
        out.push(b'-');
    }
    let abs = value.unsigned_abs();
    let per_second = per_second as u64;
    out.extend_from_slice(b"PT");
    write_int(out, abs / per_second);
    push_fraction(out, (abs % per_second) as u32, frac_digits);
    out.push(b'S');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn json_strings_escape_controls_quotes_and_backslashes() {
        assert_eq!(
            s(|o| write_json_str(o, "a\"b\\c\n\t\u{1}\u{7f}é😀".as_bytes())),
            "\"a\\\"b\\\\c\\n\\t\\u0001\u{7f}é😀\""
        );
    }

    #[test]
    fn decimals_keep_their_scale() {
        assert_eq!(s(|o| write_decimal_i128(o, 150, 2)), "1.50");
        assert_eq!(s(|o| write_decimal_i128(o, -5, 3)), "-0.005");
        assert_eq!(s(|o| write_decimal_i128(o, 0, 2)), "0.00");
        assert_eq!(s(|o| write_decimal_i128(o, 12, -2)), "1200");
        assert_eq!(s(|o| write_decimal_i128(o, 0, -2)), "0");
        assert_eq!(
            s(|o| write_decimal_i128(o, i128::MIN, 0)),
            i128::MIN.to_string()
        );
    }

    #[test]
    fn timestamps_dates_and_durations() {
        assert_eq!(
            s(|o| write_timestamp(o, 1_704_164_645_123_456, 1_000_000, 6, true)),
            "2024-01-02T03:04:05.123456Z"
        );
        assert_eq!(
            s(|o| write_timestamp(o, -1, 1_000, 3, false)),
            "1969-12-31T23:59:59.999"
        );
        assert_eq!(s(|o| write_date(o, 0)), "1970-01-01");
        assert_eq!(s(|o| write_date(o, -719_529)), "-0001-12-31");
        assert_eq!(s(|o| write_date(o, 2_932_897)), "+10000-01-01");
        assert_eq!(s(|o| write_duration(o, -1_500, 1_000, 3)), "-PT1.500S");
        assert_eq!(s(|o| write_duration(o, 3_600, 1, 0)), "PT3600S");
    }

    #[test]
    fn floats_use_shortest_text_and_spark_non_finite_strings() {
        assert_eq!(s(|o| write_json_f64(o, 0.1)), "0.1");
        assert_eq!(s(|o| write_json_f32(o, 0.1)), "0.1");
        assert_eq!(s(|o| write_json_f64(o, f64::NAN)), "\"NaN\"");
        assert_eq!(s(|o| write_json_f64(o, f64::NEG_INFINITY)), "\"-Infinity\"");
    }
}
