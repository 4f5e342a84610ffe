//! Planning a COPY: the target table's types and the Arrow columns each accepts, checked before
//! any byte is encoded.

use super::*;

/// Scalar Postgres types the encoder writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PgType {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    /// `numeric(precision, scale)` when the typmod gives them.
    Numeric(Option<(i32, i32)>),
    Text,
    /// `varchar(n)` / `bpchar(n)`: the maximum length in characters.
    Varchar(Option<usize>),
    Bpchar(Option<usize>),
    Bytea,
    Date,
    Time,
    Timestamp,
    Timestamptz,
    Json,
    Jsonb,
    Uuid,
}

impl PgType {
    fn parse(type_name: &str, typmod: i32) -> Option<Self> {
        let char_len = (typmod >= 4).then(|| (typmod - 4) as usize);
        Some(match type_name {
            "bool" => Self::Bool,
            "int2" => Self::Int2,
            "int4" => Self::Int4,
            "int8" => Self::Int8,
            "float4" => Self::Float4,
            "float8" => Self::Float8,
            "numeric" => Self::Numeric((typmod >= 4).then(|| {
                let t = typmod - 4;
                // Postgres 15 packs an 11-bit signed scale below the precision.
                ((t >> 16) & 0xffff, ((t & 0x7ff) ^ 1024) - 1024)
            })),
            "text" => Self::Text,
            "varchar" => Self::Varchar(char_len),
            "bpchar" => Self::Bpchar(char_len),
            "bytea" => Self::Bytea,
            "date" => Self::Date,
            "time" => Self::Time,
            "timestamp" => Self::Timestamp,
            "timestamptz" => Self::Timestamptz,
            "json" => Self::Json,
            "jsonb" => Self::Jsonb,
            "uuid" => Self::Uuid,
            _ => return None,
        })
    }

    pub(super) fn oid(self) -> u32 {
        match self {
            Self::Bool => 16,
            Self::Bytea => 17,
            Self::Int8 => 20,
            Self::Int2 => 21,
            Self::Int4 => 23,
            Self::Text => 25,
            Self::Json => 114,
            Self::Float4 => 700,
            Self::Float8 => 701,
            Self::Bpchar(_) => 1042,
            Self::Varchar(_) => 1043,
            Self::Date => 1082,
            Self::Time => 1083,
            Self::Timestamp => 1114,
            Self::Timestamptz => 1184,
            Self::Numeric(_) => 1700,
            Self::Uuid => 2950,
            Self::Jsonb => 3802,
        }
    }

    /// Which Arrow types can feed this Postgres type (for error messages).
    fn sources(self) -> &'static str {
        match self {
            Self::Bool => "bool",
            Self::Int2 | Self::Int4 | Self::Int8 => "integers (range checked per value)",
            Self::Float4 | Self::Float8 => "float16/32/64 and integers that convert exactly",
            Self::Numeric(_) => "decimal32/64/128/256, integers, floats",
            Self::Text | Self::Varchar(_) | Self::Bpchar(_) => "string, large_string, string_view",
            Self::Bytea => "binary, large_binary, binary_view, fixed_size_binary, strings",
            Self::Date => "date32, date64",
            Self::Time => "time32, time64",
            Self::Timestamp | Self::Timestamptz => "timestamp (any unit, with or without zone)",
            Self::Json | Self::Jsonb => {
                "JSON text in a string column, or any JSON-encodable type but binary (cast bytes \
                 holding JSON text to string)"
            }
            Self::Uuid => "fixed_size_binary(16), strings in UUID text form",
        }
    }
}

/// A target column resolved against the Arrow schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PlannedColumn {
    pub(super) target: String,
    pub(super) source: usize,
    pub(super) pg: PgType,
    pub(super) array: bool,
}

/// The validated mapping from Arrow columns to the target columns; encode with [`encode_pg_copy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyPlan {
    pub(super) columns: Vec<PlannedColumn>,
}

impl CopyPlan {
    /// The target column names in COPY order (for the `COPY t (…)` column list).
    pub fn target_columns(&self) -> Vec<&str> {
        self.columns.iter().map(|c| c.target.as_str()).collect()
    }
}

fn decoded(dt: &DataType) -> &DataType {
    match dt {
        DataType::Dictionary(_, v) => decoded(v),
        other => other,
    }
}

fn is_int(dt: &DataType) -> bool {
    dt.is_integer()
}

pub(super) fn is_string(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

/// Whether an Arrow scalar type can feed a Postgres scalar type.
fn scalar_compatible(column: &str, source: &DataType, pg: PgType) -> bool {
    use DataType as D;
    let source = decoded(source);
    match pg {
        PgType::Bool => matches!(source, D::Boolean),
        PgType::Int2 | PgType::Int4 | PgType::Int8 => is_int(source),
        PgType::Float4 => matches!(
            source,
            D::Float16 | D::Float32 | D::Float64 | D::Int8 | D::Int16 | D::UInt8 | D::UInt16
        ),
        PgType::Float8 => matches!(
            source,
            D::Float16
                | D::Float32
                | D::Float64
                | D::Int8
                | D::Int16
                | D::Int32
                | D::UInt8
                | D::UInt16
                | D::UInt32
        ),
        PgType::Numeric(_) => {
            matches!(
                source,
                D::Decimal32(..) | D::Decimal64(..) | D::Decimal128(..) | D::Decimal256(..)
            ) || is_int(source)
                || matches!(source, D::Float16 | D::Float32 | D::Float64)
        }
        PgType::Text | PgType::Varchar(_) | PgType::Bpchar(_) => is_string(source),
        PgType::Bytea => {
            is_string(source)
                || matches!(
                    source,
                    D::Binary | D::LargeBinary | D::BinaryView | D::FixedSizeBinary(_)
                )
        }
        PgType::Date => matches!(source, D::Date32 | D::Date64),
        PgType::Time => matches!(
            source,
            D::Time32(TimeUnit::Second | TimeUnit::Millisecond)
                | D::Time64(TimeUnit::Microsecond | TimeUnit::Nanosecond)
        ),
        PgType::Timestamp | PgType::Timestamptz => matches!(source, D::Timestamp(..)),
        // a binary column is refused, not written as a base64 JSON string: bytes that hold
        // JSON text (Spark's Kafka `value`) would be stored as "eyJ…" (docs/postgres.md)
        PgType::Json | PgType::Jsonb => {
            is_string(source)
                || (!matches!(
                    source,
                    D::Binary | D::LargeBinary | D::BinaryView | D::FixedSizeBinary(_)
                ) && check_json_type(column, source).is_ok())
        }
        PgType::Uuid => is_string(source) || matches!(source, D::FixedSizeBinary(16)),
    }
}

fn list_element(dt: &DataType) -> Option<&DataType> {
    match decoded(dt) {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            Some(f.data_type())
        }
        _ => None,
    }
}

/// Validates the mapping of Arrow columns onto the target columns without encoding anything.
/// `sources[i]` names the Arrow column that feeds `targets[i]` (default: the same name).
/// Errors are `CoreError::Config` naming the column and both types.
pub fn plan_pg_copy(
    schema: &Schema,
    targets: &[PgColumn],
    sources: Option<&[String]>,
) -> CoreResult<CopyPlan> {
    if let Some(sources) = sources {
        if sources.len() != targets.len() {
            return Err(CoreError::Config(format!(
                "{} source columns given for {} target columns; give one Arrow column per \
                 target column",
                sources.len(),
                targets.len()
            )));
        }
    }
    if targets.is_empty() || targets.len() > 1664 {
        return Err(CoreError::Config(format!(
            "COPY needs between 1 and 1664 target columns, got {}",
            targets.len()
        )));
    }
    let mut columns = Vec::with_capacity(targets.len());
    for (i, target) in targets.iter().enumerate() {
        let source_name = sources.map_or(target.name.as_str(), |s| s[i].as_str());
        let source = schema.index_of(source_name).map_err(|_| {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            CoreError::Config(format!(
                "column '{}': the Arrow column '{source_name}' that should feed it is not in the \
                 batch (columns: {names:?})",
                target.name
            ))
        })?;
        let (type_name, array) = match target.type_name.strip_prefix('_') {
            Some(element) => (element, true),
            None => (target.type_name.as_str(), false),
        };
        let pg = PgType::parse(type_name, target.typmod).ok_or_else(|| {
            CoreError::Config(format!(
                "column '{}': PostgreSQL type {} is not supported by the COPY encoder \
                 (supported: bool, int2, int4, int8, float4, float8, numeric, text, varchar, \
                 bpchar, bytea, date, time, timestamp, timestamptz, json, jsonb, uuid and 1-D \
                 arrays of them)",
                target.name, target.type_name
            ))
        })?;
        let source_type = schema.field(source).data_type();
        let compatible = if array {
            list_element(source_type).is_some_and(|element| {
                list_element(element).is_none() && scalar_compatible(&target.name, element, pg)
            })
        } else {
            scalar_compatible(&target.name, source_type, pg)
        };
        if !compatible {
            let wanted = if array {
                format!("a list of {}", pg.sources())
            } else {
                pg.sources().to_string()
            };
            return Err(CoreError::Config(format!(
                "column '{}': Arrow column '{source_name}' of type {source_type} cannot be \
                 written to PostgreSQL type {} (it accepts {wanted}); cast the column first",
                target.name, target.type_name
            )));
        }
        columns.push(PlannedColumn {
            target: target.name.clone(),
            source,
            pg,
            array,
        });
    }
    Ok(CopyPlan { columns })
}
