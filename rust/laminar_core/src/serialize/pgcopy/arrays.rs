//! One-dimensional PostgreSQL arrays from Arrow lists (`List`, `LargeList`, `FixedSizeList`).

use super::*;

pub(super) fn build_array_value(
    column: &str,
    array: &ArrayRef,
    pg: PgType,
) -> CoreResult<Box<dyn PgValue>> {
    let bad = || malformed(column, array.as_ref());
    Ok(match array.data_type() {
        DataType::List(_) => {
            let list = array.as_list_opt::<i32>().ok_or_else(bad)?;
            Box::new(ArrayValue {
                bounds: ListBounds::Offsets32(list.offsets().clone()),
                elements: build_writer(column, list.values(), pg, false)?,
                element_nulls: list.values().nulls().cloned(),
                oid: pg.oid(),
            })
        }
        DataType::LargeList(_) => {
            let list = array.as_list_opt::<i64>().ok_or_else(bad)?;
            Box::new(ArrayValue {
                bounds: ListBounds::Offsets64(list.offsets().clone()),
                elements: build_writer(column, list.values(), pg, false)?,
                element_nulls: list.values().nulls().cloned(),
                oid: pg.oid(),
            })
        }
        DataType::FixedSizeList(_, size) => {
            let list = array.as_fixed_size_list_opt().ok_or_else(bad)?;
            Box::new(ArrayValue {
                bounds: ListBounds::Fixed(usize::try_from(*size).map_err(|_| bad())?),
                elements: build_writer(column, list.values(), pg, false)?,
                element_nulls: list.values().nulls().cloned(),
                oid: pg.oid(),
            })
        }
        _ => return Err(bad()),
    })
}

enum ListBounds {
    Offsets32(OffsetBuffer<i32>),
    Offsets64(OffsetBuffer<i64>),
    Fixed(usize),
}

impl ListBounds {
    #[inline]
    fn range(&self, idx: usize) -> (usize, usize) {
        fn r<O: OffsetSizeTrait>(o: &OffsetBuffer<O>, idx: usize) -> (usize, usize) {
            (o[idx].as_usize(), o[idx + 1].as_usize())
        }
        match self {
            Self::Offsets32(o) => r(o, idx),
            Self::Offsets64(o) => r(o, idx),
            Self::Fixed(size) => (idx * size, (idx + 1) * size),
        }
    }
}

/// A one-dimensional Postgres array (lower bound 1) from an Arrow list.
struct ArrayValue {
    bounds: ListBounds,
    elements: ColumnWriter,
    element_nulls: Option<NullBuffer>,
    oid: u32,
}
impl PgValue for ArrayValue {
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let (start, end) = self.bounds.range(idx);
        let count = end - start;
        let field = out.len();
        out.extend_from_slice(&[0, 0, 0, 0]);
        if count == 0 {
            out.extend_from_slice(&0i32.to_be_bytes());
            out.extend_from_slice(&0i32.to_be_bytes());
            out.extend_from_slice(&self.oid.to_be_bytes());
        } else {
            let has_null = self
                .element_nulls
                .as_ref()
                .is_some_and(|n| (start..end).any(|i| n.is_null(i)));
            let dim = i32::try_from(count).map_err(|_| "array too long".to_string())?;
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&i32::from(has_null).to_be_bytes());
            out.extend_from_slice(&self.oid.to_be_bytes());
            out.extend_from_slice(&dim.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            for i in start..end {
                if let Err(e) = self.elements.write(i, out) {
                    out.truncate(field);
                    return Err(format!("array element {}: {e}", i - start + 1));
                }
            }
        }
        let len = i32::try_from(out.len() - field - 4).map_err(|_| {
            out.truncate(field);
            "array value too large".to_string()
        })?;
        out[field..field + 4].copy_from_slice(&len.to_be_bytes());
        Ok(())
    }
}
