//! The binary (`recv`) form of each scalar PostgreSQL type, from the Arrow types it accepts.

use super::*;

/// A fixed-width value converted by `F` (which may refuse a value that does not fit).
struct FixedValue<T: ArrowPrimitiveType, const N: usize, F> {
    values: ScalarBuffer<T::Native>,
    convert: F,
}

impl<T, const N: usize, F> PgValue for FixedValue<T, N, F>
where
    T: ArrowPrimitiveType,
    F: Fn(T::Native) -> Result<[u8; N], String> + Send,
{
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        put(out, (self.convert)(self.values[idx])?);
        Ok(())
    }
}

fn fixed<T, const N: usize, F>(
    column: &str,
    array: &ArrayRef,
    convert: F,
) -> CoreResult<Box<dyn PgValue>>
where
    T: ArrowPrimitiveType,
    F: Fn(T::Native) -> Result<[u8; N], String> + Send + 'static,
{
    let values = array
        .as_primitive_opt::<T>()
        .ok_or_else(|| malformed(column, array.as_ref()))?
        .values()
        .clone();
    Ok(Box::new(FixedValue::<T, N, F> { values, convert }))
}

fn int_to<Out: TryFrom<i64>>(v: impl ArrowNativeType, name: &str) -> Result<Out, String> {
    v.to_i64()
        .and_then(|x| Out::try_from(x).ok())
        .ok_or_else(|| format!("value {v:?} does not fit PostgreSQL {name}"))
}

macro_rules! int_source {
    ($column:expr, $array:expr, $out:ty, $name:expr) => {{
        use DataType as D;
        match $array.data_type() {
            D::Int8 => fixed::<Int8Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            D::Int16 => fixed::<Int16Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            D::Int32 => fixed::<Int32Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            D::Int64 => fixed::<Int64Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            D::UInt8 => fixed::<UInt8Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            D::UInt16 => fixed::<UInt16Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            D::UInt32 => fixed::<UInt32Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            D::UInt64 => fixed::<UInt64Type, _, _>($column, $array, |v| {
                int_to::<$out>(v, $name).map(<$out>::to_be_bytes)
            }),
            _ => Err(malformed($column, $array.as_ref())),
        }
    }};
}

macro_rules! float_source {
    ($column:expr, $array:expr, $out:ty, $conv:expr) => {{
        use DataType as D;
        let conv = $conv;
        match $array.data_type() {
            D::Float16 => {
                fixed::<Float16Type, _, _>($column, $array, move |v| conv(f64::from(v.to_f32())))
            }
            D::Float32 => fixed::<Float32Type, _, _>($column, $array, move |v| conv(f64::from(v))),
            D::Float64 => fixed::<Float64Type, _, _>($column, $array, conv),
            D::Int8 => fixed::<Int8Type, _, _>($column, $array, move |v| conv(f64::from(v))),
            D::Int16 => fixed::<Int16Type, _, _>($column, $array, move |v| conv(f64::from(v))),
            D::Int32 => fixed::<Int32Type, _, _>($column, $array, move |v| conv(f64::from(v))),
            D::UInt8 => fixed::<UInt8Type, _, _>($column, $array, move |v| conv(f64::from(v))),
            D::UInt16 => fixed::<UInt16Type, _, _>($column, $array, move |v| conv(f64::from(v))),
            D::UInt32 => fixed::<UInt32Type, _, _>($column, $array, move |v| conv(f64::from(v))),
            _ => Err(malformed($column, $array.as_ref())),
        }
    }};
}

fn to_float4(v: f64) -> Result<[u8; 4], String> {
    let narrowed = v as f32;
    if v.is_finite() && !narrowed.is_finite() {
        return Err(format!("value {v:?} does not fit PostgreSQL float4"));
    }
    Ok(narrowed.to_be_bytes())
}

pub(super) fn build_scalar_value(
    column: &str,
    array: &ArrayRef,
    pg: PgType,
) -> CoreResult<Box<dyn PgValue>> {
    use DataType as D;
    let bad = || malformed(column, array.as_ref());
    match pg {
        PgType::Bool => {
            let values = array.as_boolean_opt().ok_or_else(bad)?.clone();
            Ok(Box::new(BoolValue(values)))
        }
        PgType::Int2 => int_source!(column, array, i16, "int2"),
        PgType::Int4 => int_source!(column, array, i32, "int4"),
        PgType::Int8 => int_source!(column, array, i64, "int8"),
        PgType::Float4 => {
            float_source!(column, array, f32, |v: f64| to_float4(v))
        }
        PgType::Float8 => {
            float_source!(column, array, f64, |v: f64| Ok::<_, String>(
                v.to_be_bytes()
            ))
        }
        PgType::Numeric(typmod) => build_numeric(column, array, typmod),
        PgType::Text | PgType::Varchar(_) | PgType::Bpchar(_) => {
            let max_chars = match pg {
                PgType::Varchar(n) | PgType::Bpchar(n) => n,
                _ => None,
            };
            Ok(Box::new(TextValue {
                values: StringSource::try_new(array).ok_or_else(bad)?,
                max_chars,
                type_name: match pg {
                    PgType::Varchar(_) => "varchar",
                    PgType::Bpchar(_) => "bpchar",
                    _ => "text",
                },
            }))
        }
        PgType::Bytea => Ok(Box::new(ByteaValue(
            StringSource::try_new(array).ok_or_else(bad)?,
        ))),
        PgType::Date => match array.data_type() {
            D::Date32 => fixed::<Date32Type, 4, _>(column, array, |d| {
                i32::try_from(i64::from(d) - PG_EPOCH_DAYS)
                    .map(i32::to_be_bytes)
                    .map_err(|_| format!("date {d} (days since 1970) is out of range"))
            }),
            D::Date64 => fixed::<Date64Type, 4, _>(column, array, |ms| {
                i32::try_from(ms.div_euclid(86_400_000) - PG_EPOCH_DAYS)
                    .map(i32::to_be_bytes)
                    .map_err(|_| format!("date64 {ms} is out of PostgreSQL's date range"))
            }),
            _ => Err(bad()),
        },
        // Times outside the day are refused as the JSON encoder refuses them (text.rs).
        PgType::Time => match array.data_type() {
            D::Time32(TimeUnit::Second) => fixed::<Time32SecondType, 8, _>(column, array, |s| {
                pg_time(i64::from(s), TimeUnit::Second)
            }),
            D::Time32(TimeUnit::Millisecond) => {
                fixed::<Time32MillisecondType, 8, _>(column, array, |ms| {
                    pg_time(i64::from(ms), TimeUnit::Millisecond)
                })
            }
            D::Time64(TimeUnit::Microsecond) => {
                fixed::<Time64MicrosecondType, 8, _>(column, array, |us| {
                    pg_time(us, TimeUnit::Microsecond)
                })
            }
            D::Time64(TimeUnit::Nanosecond) => {
                fixed::<Time64NanosecondType, 8, _>(column, array, |ns| {
                    pg_time(ns, TimeUnit::Nanosecond)
                })
            }
            _ => Err(bad()),
        },
        PgType::Timestamp | PgType::Timestamptz => match array.data_type() {
            D::Timestamp(TimeUnit::Second, _) => {
                fixed::<TimestampSecondType, 8, _>(column, array, |v| pg_timestamp(v, 1_000_000))
            }
            D::Timestamp(TimeUnit::Millisecond, _) => {
                fixed::<TimestampMillisecondType, 8, _>(column, array, |v| pg_timestamp(v, 1_000))
            }
            D::Timestamp(TimeUnit::Microsecond, _) => {
                fixed::<TimestampMicrosecondType, 8, _>(column, array, |v| pg_timestamp(v, 1))
            }
            D::Timestamp(TimeUnit::Nanosecond, _) => {
                fixed::<TimestampNanosecondType, 8, _>(column, array, |v| {
                    pg_timestamp(v.div_euclid(1_000), 1)
                })
            }
            _ => Err(bad()),
        },
        PgType::Json | PgType::Jsonb => {
            let jsonb = pg == PgType::Jsonb;
            if is_string(array.data_type()) {
                Ok(Box::new(JsonTextValue {
                    values: StringSource::try_new(array).ok_or_else(bad)?,
                    jsonb,
                }))
            } else {
                Ok(Box::new(JsonEncodedValue {
                    column: JsonColumn::try_new(column, array)?,
                    jsonb,
                }))
            }
        }
        PgType::Uuid => match array.data_type() {
            D::FixedSizeBinary(16) => Ok(Box::new(ByteaValue(
                StringSource::try_new(array).ok_or_else(bad)?,
            ))),
            _ => Ok(Box::new(UuidTextValue(
                StringSource::try_new(array).ok_or_else(bad)?,
            ))),
        },
    }
}

/// A time of day in `unit`s as PostgreSQL's `time` (microseconds; nanoseconds truncated), refused
/// outside `00:00:00 ..= 24:00:00`.
fn pg_time(value: i64, unit: TimeUnit) -> Result<[u8; 8], String> {
    let (per_second, _) = unit_scale(unit);
    if !time_of_day_in_range(value, per_second) {
        return Err(time_of_day_error(value, unit));
    }
    Ok((value.div_euclid(per_second) * 1_000_000
        + value.rem_euclid(per_second) * 1_000_000 / per_second)
        .to_be_bytes())
}

#[inline]
fn pg_timestamp(value: i64, us_per_unit: i64) -> Result<[u8; 8], String> {
    value
        .checked_mul(us_per_unit)
        .and_then(|us| us.checked_sub(PG_EPOCH_US))
        .filter(|us| (PG_TIMESTAMP_MIN..PG_TIMESTAMP_END).contains(us))
        .map(i64::to_be_bytes)
        .ok_or_else(|| format!("timestamp {value} is outside PostgreSQL's timestamp range"))
}

struct BoolValue(arrow_array::BooleanArray);
impl PgValue for BoolValue {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        put(out, [u8::from(self.0.value(idx))]);
        Ok(())
    }
}

/// Any string/binary-like column read as bytes (the COPY form has no dictionaries or views).
enum StringSource {
    Str(arrow_array::StringArray),
    LargeStr(arrow_array::LargeStringArray),
    StrView(arrow_array::StringViewArray),
    Bin(arrow_array::BinaryArray),
    LargeBin(arrow_array::LargeBinaryArray),
    BinView(arrow_array::BinaryViewArray),
    Fixed(arrow_array::FixedSizeBinaryArray),
}

impl StringSource {
    fn try_new(array: &ArrayRef) -> Option<Self> {
        Some(match array.data_type() {
            DataType::Utf8 => Self::Str(array.as_string_opt()?.clone()),
            DataType::LargeUtf8 => Self::LargeStr(array.as_string_opt()?.clone()),
            DataType::Utf8View => Self::StrView(array.as_string_view_opt()?.clone()),
            DataType::Binary => Self::Bin(array.as_binary_opt()?.clone()),
            DataType::LargeBinary => Self::LargeBin(array.as_binary_opt()?.clone()),
            DataType::BinaryView => Self::BinView(array.as_binary_view_opt()?.clone()),
            DataType::FixedSizeBinary(_) => Self::Fixed(array.as_fixed_size_binary_opt()?.clone()),
            _ => return None,
        })
    }

    #[inline]
    fn value(&self, i: usize) -> &[u8] {
        match self {
            Self::Str(a) => a.value(i).as_bytes(),
            Self::LargeStr(a) => a.value(i).as_bytes(),
            Self::StrView(a) => a.value(i).as_bytes(),
            Self::Bin(a) => a.value(i),
            Self::LargeBin(a) => a.value(i),
            Self::BinView(a) => a.value(i),
            Self::Fixed(a) => a.value(i),
        }
    }
}

struct TextValue {
    values: StringSource,
    max_chars: Option<usize>,
    type_name: &'static str,
}
impl PgValue for TextValue {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let bytes = self.values.value(idx);
        if let Some(max) = self.max_chars {
            // Byte length bounds the character count: count only when it could exceed.
            if bytes.len() > max {
                let chars = bytes.iter().filter(|&&b| (b & 0xc0) != 0x80).count();
                // varchar(n) and char(n) both accept a longer string whose excess characters are
                // all spaces: PostgreSQL truncates it to n (its varchar_input / bpchar_input,
                // which COPY BINARY runs with the column's typmod).
                let trimmed = chars - bytes.iter().rev().take_while(|&&b| b == b' ').count();
                if trimmed > max {
                    return Err(format!(
                        "a string of {chars} characters does not fit PostgreSQL {}({max})",
                        self.type_name
                    ));
                }
            }
        }
        if memchr::memchr(0, bytes).is_some() {
            return Err(
                "strings with a NUL character (U+0000) cannot be stored in PostgreSQL text"
                    .to_string(),
            );
        }
        put_var(out, bytes)
    }
}

struct ByteaValue(StringSource);
impl PgValue for ByteaValue {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        put_var(out, self.0.value(idx))
    }
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Parses `8-4-4-4-12` hex UUID text (or 32 hex digits) into 16 bytes.
fn parse_uuid(text: &[u8]) -> Option<[u8; 16]> {
    let mut nibbles = [0u8; 32];
    let mut n = 0;
    match text.len() {
        36 => {
            for (i, &b) in text.iter().enumerate() {
                if matches!(i, 8 | 13 | 18 | 23) {
                    if b != b'-' {
                        return None;
                    }
                    continue;
                }
                nibbles[n] = hex_val(b)?;
                n += 1;
            }
        }
        32 => {
            for (slot, &b) in nibbles.iter_mut().zip(text) {
                *slot = hex_val(b)?;
            }
        }
        _ => return None,
    }
    let mut bytes = [0u8; 16];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = (nibbles[2 * i] << 4) | nibbles[2 * i + 1];
    }
    Some(bytes)
}

struct UuidTextValue(StringSource);
impl PgValue for UuidTextValue {
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let text = self.0.value(idx);
        let bytes = parse_uuid(text).ok_or_else(|| {
            format!(
                "{:?} is not a UUID (expected 8-4-4-4-12 hex digits)",
                String::from_utf8_lossy(&text[..text.len().min(64)])
            )
        })?;
        put(out, bytes);
        Ok(())
    }
}

/// Whether JSON text contains the escape `\u0000`, which `jsonb` rejects.
fn has_nul_escape(json: &[u8]) -> bool {
    memchr::memmem::find_iter(json, b"\\u0000").any(|pos| {
        // The escape is real when preceded by an even number of backslashes.
        json[..pos]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count()
            % 2
            == 0
    })
}

struct JsonTextValue {
    values: StringSource,
    jsonb: bool,
}
impl PgValue for JsonTextValue {
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let text = self.values.value(idx);
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(text) {
            return Err(format!("the string is not valid JSON ({e})"));
        }
        write_json_field(out, text, self.jsonb)
    }
}

fn write_json_field(out: &mut Vec<u8>, json: &[u8], jsonb: bool) -> Result<(), String> {
    if jsonb {
        if has_nul_escape(json) {
            return Err("jsonb cannot store the character U+0000 (\\u0000)".to_string());
        }
        let len = i32::try_from(json.len() + 1).map_err(|_| "JSON value too large".to_string())?;
        out.extend_from_slice(&len.to_be_bytes());
        out.push(1); // jsonb binary format version
        out.extend_from_slice(json);
        Ok(())
    } else {
        put_var(out, json)
    }
}

struct JsonEncodedValue {
    column: JsonColumn,
    jsonb: bool,
}
impl PgValue for JsonEncodedValue {
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        // Reserve the length word and the version byte, encode in place, then patch the length.
        let start = out.len();
        out.extend_from_slice(&[0, 0, 0, 0]);
        if self.jsonb {
            out.push(1);
        }
        let body = out.len();
        self.column.write(idx, out);
        if self.jsonb && has_nul_escape(&out[body..]) {
            out.truncate(start);
            return Err("jsonb cannot store the character U+0000 (\\u0000)".to_string());
        }
        let len = i32::try_from(out.len() - start - 4).map_err(|_| {
            out.truncate(start);
            "JSON value too large".to_string()
        })?;
        out[start..start + 4].copy_from_slice(&len.to_be_bytes());
        Ok(())
    }
}
