//! String and binary Arrow columns read as bytes (`ByteColumn`): a Kafka key or value column
//! given as is, and the Spark Kafka-sink shape's columns (`kafka_shape`).

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, BinaryArray, BinaryViewArray, FixedSizeBinaryArray, LargeBinaryArray,
    LargeStringArray, StringArray, StringViewArray,
};
use arrow_schema::DataType;

use crate::error::{CoreError, CoreResult};

/// Whether a column of this type is read as bytes (strings as UTF-8, binary as is, dictionaries of
/// them decoded).
pub(crate) fn is_byte_type(dt: &DataType) -> bool {
    match dt {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => true,
        DataType::Dictionary(k, v) => k.is_dictionary_key_type() && is_byte_type(v),
        _ => false,
    }
}

/// A string/binary column read as bytes.
pub(crate) enum ByteColumn {
    Str(StringArray),
    LargeStr(LargeStringArray),
    StrView(StringViewArray),
    Bin(BinaryArray),
    LargeBin(LargeBinaryArray),
    BinView(BinaryViewArray),
    Fixed(FixedSizeBinaryArray),
}

impl ByteColumn {
    pub(crate) fn try_new(column: &str, array: &ArrayRef) -> CoreResult<Self> {
        let malformed = || {
            CoreError::Config(format!(
                "column '{column}': Arrow type {} does not match its data",
                array.data_type()
            ))
        };
        Ok(match array.data_type() {
            DataType::Utf8 => Self::Str(array.as_string_opt().ok_or_else(malformed)?.clone()),
            DataType::LargeUtf8 => {
                Self::LargeStr(array.as_string_opt().ok_or_else(malformed)?.clone())
            }
            DataType::Utf8View => {
                Self::StrView(array.as_string_view_opt().ok_or_else(malformed)?.clone())
            }
            DataType::Binary => Self::Bin(array.as_binary_opt().ok_or_else(malformed)?.clone()),
            DataType::LargeBinary => {
                Self::LargeBin(array.as_binary_opt().ok_or_else(malformed)?.clone())
            }
            DataType::BinaryView => {
                Self::BinView(array.as_binary_view_opt().ok_or_else(malformed)?.clone())
            }
            DataType::FixedSizeBinary(_) => Self::Fixed(
                array
                    .as_fixed_size_binary_opt()
                    .ok_or_else(malformed)?
                    .clone(),
            ),
            DataType::Dictionary(_, value) => {
                let decoded = arrow_cast::cast(array, value)
                    .map_err(|e| CoreError::Config(format!("column '{column}': {e}")))?;
                return Self::try_new(column, &decoded);
            }
            other => {
                return Err(CoreError::Config(format!(
                    "column '{column}' has Arrow type {other}, not a string or binary type"
                )));
            }
        })
    }

    #[inline]
    pub(crate) fn value(&self, i: usize) -> &[u8] {
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

    /// Whether row `i` is null (string and binary arrays: their validity bitmap).
    #[inline]
    pub(crate) fn is_null(&self, i: usize) -> bool {
        self.array().is_null(i)
    }

    fn array(&self) -> &dyn Array {
        match self {
            Self::Str(a) => a,
            Self::LargeStr(a) => a,
            Self::StrView(a) => a,
            Self::Bin(a) => a,
            Self::LargeBin(a) => a,
            Self::BinView(a) => a,
            Self::Fixed(a) => a,
        }
    }
}
