//! Arrow → JSON text, one object per row (the Kafka `value_format="json"` payload and the source of
//! `json`/`jsonb` columns in COPY).
//!
//! Hand-written rather than `arrow_json::writer` because arrow-json 59 differs from the format
//! rules users see in three places: non-finite floats (it writes `null`; we write Spark's
//! `"NaN"`/`"Infinity"` strings), binary (hex; we write base64, as Spark does) and timestamps (it
//! formats through arrow-cast's display, not as the UTC instant with `Z` and the unit's fraction
//! digits). Overriding those through `EncoderFactory` would leave little of arrow-json in use, and
//! a per-column writer tree built once per batch lets the per-value path be one indirect call that
//! appends to one reused buffer, with no allocation (itoa, zmij, table-driven escaping, a date
//! cache).
//!
//! Format rules (also in `docs/serialization.md`): field order = column order; nulls are written
//! (`"a":null`); decimals are JSON numbers with exactly the column's scale; tz-aware timestamps are
//! UTC `…Z`, naive ones have no offset; dates `YYYY-MM-DD`; times `HH:MM:SS[.f]`; durations
//! `PT<seconds>[.f]S`; binary is standard padded base64; maps with string keys are objects, other
//! keys become the key's JSON text (strings unquoted first) as the member name.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowDictionaryKeyType, ArrowPrimitiveType, Date32Type, Date64Type, Decimal32Type,
    Decimal64Type, Decimal128Type, Decimal256Type, DurationMicrosecondType,
    DurationMillisecondType, DurationNanosecondType, DurationSecondType, Float16Type, Float32Type,
    Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, IntervalYearMonthType,
    Time32MillisecondType, Time32SecondType, Time64MicrosecondType, Time64NanosecondType,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, ArrayRef, BinaryViewArray, BooleanArray, FixedSizeBinaryArray, GenericBinaryArray,
    GenericStringArray, OffsetSizeTrait, RecordBatch, StringViewArray,
};
use arrow_buffer::{ArrowNativeType, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, IntervalUnit, Schema, TimeUnit};
use base64::Engine as _;

use super::text::{
    DateCache, unit_scale, write_date, write_decimal_i128, write_decimal_i256, write_duration,
    write_int, write_json_f16, write_json_f32, write_json_f64, write_json_str, write_time_of_day,
    write_timestamp_cached,
};
use crate::error::{CoreError, CoreResult};

/// Checks that every column of `schema` can be written as JSON, naming the first column (and
/// nested field) that cannot. Call it before producing anything.
pub fn check_json_schema(schema: &Schema) -> CoreResult<()> {
    for field in schema.fields() {
        check_json_type(field.name(), field.data_type())?;
    }
    Ok(())
}

/// Checks one column's type; `column` names it in the error.
pub fn check_json_type(column: &str, data_type: &DataType) -> CoreResult<()> {
    match unsupported_json_part(data_type) {
        None => Ok(()),
        Some(part) => Err(CoreError::Config(format!(
            "column '{column}' has Arrow type {data_type} which cannot be written as JSON \
             ({part} is not supported); cast the column (e.g. to string) before writing"
        ))),
    }
}

/// The first (possibly nested) type of `dt` that the JSON encoder does not support.
fn unsupported_json_part(dt: &DataType) -> Option<String> {
    use DataType as D;
    match dt {
        D::Null
        | D::Boolean
        | D::Int8
        | D::Int16
        | D::Int32
        | D::Int64
        | D::UInt8
        | D::UInt16
        | D::UInt32
        | D::UInt64
        | D::Float16
        | D::Float32
        | D::Float64
        | D::Decimal32(..)
        | D::Decimal64(..)
        | D::Decimal128(..)
        | D::Decimal256(..)
        | D::Timestamp(..)
        | D::Date32
        | D::Date64
        | D::Time32(TimeUnit::Second | TimeUnit::Millisecond)
        | D::Time64(TimeUnit::Microsecond | TimeUnit::Nanosecond)
        | D::Duration(_)
        | D::Interval(IntervalUnit::YearMonth)
        | D::Utf8
        | D::LargeUtf8
        | D::Utf8View
        | D::Binary
        | D::LargeBinary
        | D::BinaryView
        | D::FixedSizeBinary(_) => None,
        D::List(f) | D::LargeList(f) | D::FixedSizeList(f, _) => {
            unsupported_json_part(f.data_type())
        }
        D::Struct(fields) => fields
            .iter()
            .find_map(|f| unsupported_json_part(f.data_type())),
        D::Map(entries, _) => unsupported_json_part(entries.data_type()),
        D::Dictionary(key, value) if key.is_dictionary_key_type() => unsupported_json_part(value),
        other => Some(other.to_string()),
    }
}

/// Writes one non-null value of a column as JSON.
trait JsonValue: Send {
    fn write(&self, idx: usize, out: &mut Vec<u8>);
}

/// One column (or nested child) ready to write: its validity plus a typed value writer.
pub struct JsonColumn {
    nulls: Option<NullBuffer>,
    value: Box<dyn JsonValue>,
}

impl JsonColumn {
    /// Builds the writer for `array`; `column` names it in errors.
    pub fn try_new(column: &str, array: &ArrayRef) -> CoreResult<Self> {
        check_json_type(column, array.data_type())?;
        build(array).ok_or_else(|| {
            CoreError::Config(format!(
                "column '{column}': Arrow type {} does not match its data (malformed array)",
                array.data_type()
            ))
        })
    }

    /// Whether the value at `idx` is null.
    #[inline]
    pub fn is_null(&self, idx: usize) -> bool {
        self.nulls.as_ref().is_some_and(|n| n.is_null(idx))
    }

    /// Appends the JSON text of the value at `idx` (`null` for nulls).
    #[inline]
    pub fn write(&self, idx: usize, out: &mut Vec<u8>) {
        if self.is_null(idx) {
            out.extend_from_slice(b"null");
        } else {
            self.value.write(idx, out);
        }
    }
}

/// Writes whole rows as JSON objects: `{"col":value,...}` in column order.
pub struct JsonRowEncoder {
    /// `{"name":` for the first column, `,"name":` after; the value follows.
    columns: Vec<(Vec<u8>, JsonColumn)>,
}

impl JsonRowEncoder {
    /// Prepares the per-column writers of `batch` (validates the types first).
    pub fn try_new(batch: &RecordBatch) -> CoreResult<Self> {
        let schema = batch.schema();
        check_json_schema(&schema)?;
        let mut columns = Vec::with_capacity(batch.num_columns());
        for (i, (field, array)) in schema.fields().iter().zip(batch.columns()).enumerate() {
            let mut prefix = Vec::with_capacity(field.name().len() + 4);
            prefix.push(if i == 0 { b'{' } else { b',' });
            write_json_str(&mut prefix, field.name().as_bytes());
            prefix.push(b':');
            columns.push((prefix, JsonColumn::try_new(field.name(), array)?));
        }
        Ok(Self { columns })
    }

    /// Appends row `idx` as one JSON object.
    #[inline]
    pub fn write_row(&self, idx: usize, out: &mut Vec<u8>) {
        if self.columns.is_empty() {
            out.extend_from_slice(b"{}");
            return;
        }
        for (prefix, column) in &self.columns {
            out.extend_from_slice(prefix);
            column.write(idx, out);
        }
        out.push(b'}');
    }
}

fn column(array: &dyn Array, value: Box<dyn JsonValue>) -> JsonColumn {
    JsonColumn {
        // Logical nulls: a null-typed array (Spark's `lit(None)`) has no validity bitmap yet
        // every value is null, and a dictionary's nulls may sit in its values. `is_null` must
        // say so, or a null key would be written as the text `null` instead of no key.
        nulls: array.logical_nulls(),
        value,
    }
}

fn prim<T: ArrowPrimitiveType>(array: &dyn Array) -> Option<ScalarBuffer<T::Native>> {
    array.as_primitive_opt::<T>().map(|a| a.values().clone())
}

/// Builds the writer tree; `None` only when the array's data does not match its declared type.
fn build(array: &ArrayRef) -> Option<JsonColumn> {
    build_dyn(array.as_ref())
}

fn build_dyn(array: &dyn Array) -> Option<JsonColumn> {
    use DataType as D;
    let value: Box<dyn JsonValue> = match array.data_type() {
        D::Null => Box::new(NullValue),
        D::Boolean => Box::new(BoolValue(array.as_boolean_opt()?.clone())),
        D::Int8 => Box::new(IntValue(prim::<Int8Type>(array)?)),
        D::Int16 => Box::new(IntValue(prim::<Int16Type>(array)?)),
        D::Int32 => Box::new(IntValue(prim::<Int32Type>(array)?)),
        D::Int64 => Box::new(IntValue(prim::<Int64Type>(array)?)),
        D::UInt8 => Box::new(IntValue(prim::<UInt8Type>(array)?)),
        D::UInt16 => Box::new(IntValue(prim::<UInt16Type>(array)?)),
        D::UInt32 => Box::new(IntValue(prim::<UInt32Type>(array)?)),
        D::UInt64 => Box::new(IntValue(prim::<UInt64Type>(array)?)),
        D::Float16 => Box::new(F16Value(prim::<Float16Type>(array)?)),
        D::Float32 => Box::new(F32Value(prim::<Float32Type>(array)?)),
        D::Float64 => Box::new(F64Value(prim::<Float64Type>(array)?)),
        D::Decimal32(_, s) => Box::new(DecimalValue(prim::<Decimal32Type>(array)?, *s)),
        D::Decimal64(_, s) => Box::new(DecimalValue(prim::<Decimal64Type>(array)?, *s)),
        D::Decimal128(_, s) => Box::new(DecimalValue(prim::<Decimal128Type>(array)?, *s)),
        D::Decimal256(_, s) => Box::new(Decimal256Value(prim::<Decimal256Type>(array)?, *s)),
        D::Timestamp(unit, tz) => {
            let utc = tz.is_some();
            match unit {
                TimeUnit::Second => timestamp::<1, 0>(prim::<TimestampSecondType>(array)?, utc),
                TimeUnit::Millisecond => {
                    timestamp::<1_000, 3>(prim::<TimestampMillisecondType>(array)?, utc)
                }
                TimeUnit::Microsecond => {
                    timestamp::<1_000_000, 6>(prim::<TimestampMicrosecondType>(array)?, utc)
                }
                TimeUnit::Nanosecond => {
                    timestamp::<1_000_000_000, 9>(prim::<TimestampNanosecondType>(array)?, utc)
                }
            }
        }
        D::Date32 => Box::new(Date32Value(prim::<Date32Type>(array)?)),
        D::Date64 => Box::new(Date64Value(prim::<Date64Type>(array)?)),
        D::Time32(unit) => {
            let values: ScalarBuffer<i32> = match unit {
                TimeUnit::Second => prim::<Time32SecondType>(array)?,
                TimeUnit::Millisecond => prim::<Time32MillisecondType>(array)?,
                _ => return None,
            };
            let (per_second, digits) = unit_scale(*unit);
            Box::new(TimeValue {
                values,
                per_second,
                digits,
            })
        }
        D::Time64(unit) => {
            let values: ScalarBuffer<i64> = match unit {
                TimeUnit::Microsecond => prim::<Time64MicrosecondType>(array)?,
                TimeUnit::Nanosecond => prim::<Time64NanosecondType>(array)?,
                _ => return None,
            };
            let (per_second, digits) = unit_scale(*unit);
            Box::new(TimeValue {
                values,
                per_second,
                digits,
            })
        }
        D::Duration(unit) => {
            let values = match unit {
                TimeUnit::Second => prim::<DurationSecondType>(array)?,
                TimeUnit::Millisecond => prim::<DurationMillisecondType>(array)?,
                TimeUnit::Microsecond => prim::<DurationMicrosecondType>(array)?,
                TimeUnit::Nanosecond => prim::<DurationNanosecondType>(array)?,
            };
            let (per_second, digits) = unit_scale(*unit);
            Box::new(DurationValue {
                values,
                per_second,
                digits,
            })
        }
        D::Interval(IntervalUnit::YearMonth) => {
            Box::new(YearMonthValue(prim::<IntervalYearMonthType>(array)?))
        }
        D::Utf8 => Box::new(StrValue(array.as_string_opt::<i32>()?.clone())),
        D::LargeUtf8 => Box::new(StrValue(array.as_string_opt::<i64>()?.clone())),
        D::Utf8View => Box::new(StrViewValue(array.as_string_view_opt()?.clone())),
        D::Binary => Box::new(BinValue(array.as_binary_opt::<i32>()?.clone())),
        D::LargeBinary => Box::new(BinValue(array.as_binary_opt::<i64>()?.clone())),
        D::BinaryView => Box::new(BinViewValue(array.as_binary_view_opt()?.clone())),
        D::FixedSizeBinary(_) => Box::new(FixedBinValue(array.as_fixed_size_binary_opt()?.clone())),
        D::List(_) => {
            let list = array.as_list_opt::<i32>()?;
            Box::new(ListValue {
                offsets: list.offsets().clone(),
                values: build(list.values())?,
            })
        }
        D::LargeList(_) => {
            let list = array.as_list_opt::<i64>()?;
            Box::new(ListValue {
                offsets: list.offsets().clone(),
                values: build(list.values())?,
            })
        }
        D::FixedSizeList(_, size) => {
            let list = array.as_fixed_size_list_opt()?;
            Box::new(FixedListValue {
                size: usize::try_from(*size).ok()?,
                values: build(list.values())?,
            })
        }
        D::Struct(fields) => {
            let s = array.as_struct_opt()?;
            let mut children = Vec::with_capacity(fields.len());
            for (i, (field, child)) in fields.iter().zip(s.columns()).enumerate() {
                let mut name = Vec::with_capacity(field.name().len() + 3);
                if i > 0 {
                    name.push(b',');
                }
                write_json_str(&mut name, field.name().as_bytes());
                name.push(b':');
                children.push((name, build(child)?));
            }
            Box::new(StructValue(children))
        }
        D::Map(_, _) => {
            let map = array.as_map_opt()?;
            let key_is_string = matches!(map.key_type(), D::Utf8 | D::LargeUtf8 | D::Utf8View);
            Box::new(MapValue {
                offsets: map.offsets().clone(),
                keys: build(map.keys())?,
                key_is_string,
                values: build(map.values())?,
            })
        }
        D::Dictionary(key, _) => match key.as_ref() {
            D::Int8 => dict::<Int8Type>(array)?,
            D::Int16 => dict::<Int16Type>(array)?,
            D::Int32 => dict::<Int32Type>(array)?,
            D::Int64 => dict::<Int64Type>(array)?,
            D::UInt8 => dict::<UInt8Type>(array)?,
            D::UInt16 => dict::<UInt16Type>(array)?,
            D::UInt32 => dict::<UInt32Type>(array)?,
            D::UInt64 => dict::<UInt64Type>(array)?,
            _ => return None,
        },
        _ => return None,
    };
    Some(column(array, value))
}

fn dict<K: ArrowDictionaryKeyType>(array: &dyn Array) -> Option<Box<dyn JsonValue>> {
    let d = array.as_dictionary_opt::<K>()?;
    Some(Box::new(DictValue::<K> {
        keys: d.keys().values().clone(),
        len: d.values().len(),
        values: build(d.values())?,
    }))
}

struct NullValue;
impl JsonValue for NullValue {
    fn write(&self, _: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(b"null");
    }
}

struct BoolValue(BooleanArray);
impl JsonValue for BoolValue {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(if self.0.value(idx) { b"true" } else { b"false" });
    }
}

struct IntValue<N: ArrowNativeType>(ScalarBuffer<N>);
impl<N: ArrowNativeType + itoa::Integer> JsonValue for IntValue<N> {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        write_int(out, self.0[idx]);
    }
}

struct F16Value(ScalarBuffer<half::f16>);
impl JsonValue for F16Value {
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        write_json_f16(out, self.0[idx]);
    }
}

struct F32Value(ScalarBuffer<f32>);
impl JsonValue for F32Value {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        write_json_f32(out, self.0[idx]);
    }
}

struct F64Value(ScalarBuffer<f64>);
impl JsonValue for F64Value {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        write_json_f64(out, self.0[idx]);
    }
}

struct DecimalValue<N: ArrowNativeType>(ScalarBuffer<N>, i8);
impl<N: ArrowNativeType + Into<i128>> JsonValue for DecimalValue<N> {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        write_decimal_i128(out, self.0[idx].into(), self.1);
    }
}

struct Decimal256Value(ScalarBuffer<arrow_buffer::i256>, i8);
impl JsonValue for Decimal256Value {
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        write_decimal_i256(out, self.0[idx], self.1);
    }
}

/// Timestamps, specialised per unit so that the divisions are by constants.
struct TimestampValue<const PER_SECOND: i64, const DIGITS: u32, const UTC: bool> {
    values: ScalarBuffer<i64>,
    days: DateCache,
}
impl<const PER_SECOND: i64, const DIGITS: u32, const UTC: bool> JsonValue
    for TimestampValue<PER_SECOND, DIGITS, UTC>
{
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        out.push(b'"');
        write_timestamp_cached(out, self.values[idx], PER_SECOND, DIGITS, UTC, &self.days);
        out.push(b'"');
    }
}

fn timestamp<const PER_SECOND: i64, const DIGITS: u32>(
    values: ScalarBuffer<i64>,
    utc: bool,
) -> Box<dyn JsonValue> {
    let days = DateCache::default();
    if utc {
        Box::new(TimestampValue::<PER_SECOND, DIGITS, true> { values, days })
    } else {
        Box::new(TimestampValue::<PER_SECOND, DIGITS, false> { values, days })
    }
}

struct Date32Value(ScalarBuffer<i32>);
impl JsonValue for Date32Value {
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        out.push(b'"');
        write_date(out, i64::from(self.0[idx]));
        out.push(b'"');
    }
}

struct Date64Value(ScalarBuffer<i64>);
impl JsonValue for Date64Value {
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        out.push(b'"');
        write_date(out, self.0[idx].div_euclid(86_400_000));
        out.push(b'"');
    }
}

struct TimeValue<N: ArrowNativeType> {
    values: ScalarBuffer<N>,
    per_second: i64,
    digits: u32,
}
impl<N: ArrowNativeType + Into<i64>> JsonValue for TimeValue<N> {
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        let v: i64 = self.values[idx].into();
        let secs = v.div_euclid(self.per_second);
        // Out-of-range times (malformed input) are clamped into the text, never a panic.
        let secs = u32::try_from(secs).unwrap_or(u32::MAX);
        out.push(b'"');
        write_time_of_day(out, secs, v.rem_euclid(self.per_second) as u32, self.digits);
        out.push(b'"');
    }
}

struct DurationValue {
    values: ScalarBuffer<i64>,
    per_second: i64,
    digits: u32,
}
impl JsonValue for DurationValue {
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        out.push(b'"');
        write_duration(out, self.values[idx], self.per_second, self.digits);
        out.push(b'"');
    }
}

struct YearMonthValue(ScalarBuffer<i32>);
impl JsonValue for YearMonthValue {
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        let months = self.0[idx];
        out.push(b'"');
        if months < 0 {
            out.push(b'-');
        }
        let abs = months.unsigned_abs();
        out.push(b'P');
        write_int(out, abs / 12);
        out.push(b'Y');
        write_int(out, abs % 12);
        out.extend_from_slice(b"M\"");
    }
}

struct StrValue<O: OffsetSizeTrait>(GenericStringArray<O>);
impl<O: OffsetSizeTrait> JsonValue for StrValue<O> {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        write_json_str(out, self.0.value(idx).as_bytes());
    }
}

struct StrViewValue(StringViewArray);
impl JsonValue for StrViewValue {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        write_json_str(out, self.0.value(idx).as_bytes());
    }
}

#[inline]
fn write_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    let start = out.len();
    let len = base64::encoded_len(bytes.len(), true).unwrap_or(0);
    out.resize(start + len, 0);
    let written = base64::engine::general_purpose::STANDARD
        .encode_slice(bytes, &mut out[start..])
        .unwrap_or(0);
    out.truncate(start + written);
    out.push(b'"');
}

struct BinValue<O: OffsetSizeTrait>(GenericBinaryArray<O>);
impl<O: OffsetSizeTrait> JsonValue for BinValue<O> {
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        write_base64(out, self.0.value(idx));
    }
}

struct BinViewValue(BinaryViewArray);
impl JsonValue for BinViewValue {
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        write_base64(out, self.0.value(idx));
    }
}

struct FixedBinValue(FixedSizeBinaryArray);
impl JsonValue for FixedBinValue {
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        write_base64(out, self.0.value(idx));
    }
}

struct ListValue<O: OffsetSizeTrait> {
    offsets: OffsetBuffer<O>,
    values: JsonColumn,
}
impl<O: OffsetSizeTrait> JsonValue for ListValue<O> {
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        let start = self.offsets[idx].as_usize();
        let end = self.offsets[idx + 1].as_usize();
        out.push(b'[');
        for (n, j) in (start..end).enumerate() {
            if n > 0 {
                out.push(b',');
            }
            self.values.write(j, out);
        }
        out.push(b']');
    }
}

struct FixedListValue {
    size: usize,
    values: JsonColumn,
}
impl JsonValue for FixedListValue {
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        out.push(b'[');
        let start = idx * self.size;
        for j in start..start + self.size {
            if j > start {
                out.push(b',');
            }
            self.values.write(j, out);
        }
        out.push(b']');
    }
}

struct StructValue(Vec<(Vec<u8>, JsonColumn)>);
impl JsonValue for StructValue {
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        out.push(b'{');
        for (name, child) in &self.0 {
            out.extend_from_slice(name);
            child.write(idx, out);
        }
        out.push(b'}');
    }
}

struct MapValue {
    offsets: OffsetBuffer<i32>,
    keys: JsonColumn,
    key_is_string: bool,
    values: JsonColumn,
}
impl JsonValue for MapValue {
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        let start = self.offsets[idx].as_usize();
        let end = self.offsets[idx + 1].as_usize();
        out.push(b'{');
        let mut key_text = Vec::new();
        for j in start..end {
            if j > start {
                out.push(b',');
            }
            if self.key_is_string && !self.keys.is_null(j) {
                self.keys.write(j, out);
            } else {
                // Non-string keys: the member name is the key's JSON text (a JSON string is used
                // as is), the way Spark's to_json names map members.
                key_text.clear();
                self.keys.write(j, &mut key_text);
                if key_text.first() == Some(&b'"') {
                    out.extend_from_slice(&key_text);
                } else {
                    write_json_str(out, &key_text);
                }
            }
            out.push(b':');
            self.values.write(j, out);
        }
        out.push(b'}');
    }
}

struct DictValue<K: ArrowDictionaryKeyType> {
    keys: ScalarBuffer<K::Native>,
    len: usize,
    values: JsonColumn,
}
impl<K: ArrowDictionaryKeyType> JsonValue for DictValue<K> {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) {
        match self.keys[idx].to_usize() {
            Some(k) if k < self.len => self.values.write(k, out),
            // A key outside the dictionary is malformed input: written as null, never a panic.
            _ => out.extend_from_slice(b"null"),
        }
    }
}

/// Encodes every row of `batch` as one JSON document each (used by `jsonb` COPY and tests).
pub fn encode_rows(batch: &RecordBatch) -> CoreResult<Vec<Vec<u8>>> {
    let encoder = JsonRowEncoder::try_new(batch)?;
    Ok((0..batch.num_rows())
        .map(|i| {
            let mut row = Vec::new();
            encoder.write_row(i, &mut row);
            row
        })
        .collect())
}

/// Convenience for one array: the JSON text of each value.
pub fn encode_values(column_name: &str, array: &ArrayRef) -> CoreResult<Vec<Vec<u8>>> {
    let col = JsonColumn::try_new(column_name, array)?;
    Ok((0..array.len())
        .map(|i| {
            let mut v = Vec::new();
            col.write(i, &mut v);
            v
        })
        .collect())
}
