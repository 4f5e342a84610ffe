//! PostgreSQL `numeric` from Arrow decimals, integers and floats, within `numeric(p, s)`.

use super::*;

// ---------------------------------------------------------------------------------------------
// numeric

/// `numeric(p, s)` limits checked per value: at most `p - s` digits before the point (Postgres
/// rounds extra fraction digits itself).
fn check_numeric_fits(
    typmod: Option<(i32, i32)>,
    digit_count: usize,
    scale: i32,
    text: impl FnOnce() -> String,
) -> Result<(), String> {
    if let Some((precision, target_scale)) = typmod {
        let int_digits = if digit_count == 0 {
            0
        } else {
            digit_count as i64 - i64::from(scale)
        };
        if int_digits > i64::from(precision - target_scale) {
            return Err(format!(
                "value {} does not fit PostgreSQL numeric({precision},{target_scale})",
                text()
            ));
        }
    }
    Ok(())
}

/// Number of significant digits of an ASCII digit string (0 for zero).
fn significant(digits: &[u8]) -> usize {
    digits.len() - digits.iter().take_while(|&&d| d == b'0').count()
}

/// [`write_numeric`] for magnitudes below 10^16 and scales ≥ 0, with integer arithmetic only.
#[inline]
fn write_numeric_u64(out: &mut Vec<u8>, negative: bool, magnitude: u64, scale: u32) {
    if magnitude == 0 {
        put(out, numeric_header(0, 0, false, scale as usize));
        return;
    }
    // Align the decimal point on a base-10000 group boundary.
    let pad = (4 - scale % 4) % 4;
    let mut m = magnitude * 10u64.pow(pad);
    let frac_groups = ((scale + pad) / 4) as i32;
    // Groups from the least significant; at most 5 for m < 10^19.
    let mut groups = [0i16; 5];
    let mut n = 0;
    while m > 0 && n < groups.len() {
        groups[n] = (m % 10_000) as i16;
        m /= 10_000;
        n += 1;
    }
    let lowest = groups[..n].iter().take_while(|&&g| g == 0).count();
    let ndigits = n - lowest;
    let weight = (n as i32 - 1) - frac_groups;
    out.extend_from_slice(&((8 + 2 * ndigits) as i32).to_be_bytes());
    out.extend_from_slice(&numeric_header(
        ndigits as i16,
        weight as i16,
        negative,
        scale as usize,
    ));
    for g in groups[lowest..n].iter().rev() {
        out.extend_from_slice(&g.to_be_bytes());
    }
}

/// Writes a `numeric` field for `±digits × 10^-scale` (`digits` ASCII, no leading zeros unless "0").
fn write_numeric(out: &mut Vec<u8>, negative: bool, digits: &[u8], scale: i32) {
    let (scale, trailing_zeros) = if scale < 0 {
        (0usize, scale.unsigned_abs() as usize)
    } else {
        (scale as usize, 0)
    };
    let zero = digits.iter().all(|&d| d == b'0');
    if zero {
        put(out, numeric_header(0, 0, false, scale));
        return;
    }
    let len = digits.len() + trailing_zeros;
    let int_len = len as i64 - scale as i64;
    let pad_left = (4 - int_len.rem_euclid(4)) as usize % 4;
    let pad_right = (4 - scale % 4) % 4;
    let total = pad_left + len + pad_right;
    let groups = total / 4;
    let frac_groups = (scale + pad_right) / 4;
    let digit_at = |p: usize| -> i16 {
        if p < pad_left || p >= pad_left + len {
            0
        } else {
            let i = p - pad_left;
            if i < digits.len() {
                i16::from(digits[i] - b'0')
            } else {
                0
            }
        }
    };
    let group = |g: usize| -> i16 {
        let p = g * 4;
        digit_at(p) * 1000 + digit_at(p + 1) * 100 + digit_at(p + 2) * 10 + digit_at(p + 3)
    };
    let mut first = 0;
    while first < groups && group(first) == 0 {
        first += 1;
    }
    let mut last = groups;
    while last > first && group(last - 1) == 0 {
        last -= 1;
    }
    let weight = groups as i64 - frac_groups as i64 - 1 - first as i64;
    let ndigits = last - first;
    let field_len = 8 + 2 * ndigits;
    out.extend_from_slice(&(field_len as i32).to_be_bytes());
    out.extend_from_slice(&(ndigits as i16).to_be_bytes());
    out.extend_from_slice(&(weight as i16).to_be_bytes());
    out.extend_from_slice(&(if negative { 0x4000u16 } else { 0 }).to_be_bytes());
    out.extend_from_slice(&(scale as u16).to_be_bytes());
    for g in first..last {
        out.extend_from_slice(&group(g).to_be_bytes());
    }
}

fn numeric_header(ndigits: i16, weight: i16, negative: bool, dscale: usize) -> [u8; 8] {
    let mut h = [0u8; 8];
    h[0..2].copy_from_slice(&ndigits.to_be_bytes());
    h[2..4].copy_from_slice(&weight.to_be_bytes());
    h[4..6].copy_from_slice(&(if negative { 0x4000u16 } else { 0 }).to_be_bytes());
    h[6..8].copy_from_slice(&(dscale as u16).to_be_bytes());
    h
}

/// `numeric` special values: NaN, +Infinity, -Infinity (Postgres 14+).
#[cold]
fn write_numeric_non_finite(out: &mut Vec<u8>, v: f64) {
    let sign: u16 = if v.is_nan() {
        0xC000
    } else if v > 0.0 {
        0xD000
    } else {
        0xF000
    };
    let mut h = [0u8; 8];
    h[4..6].copy_from_slice(&sign.to_be_bytes());
    put(out, h);
}

struct NumericDecimal<N: ArrowNativeType> {
    values: ScalarBuffer<N>,
    scale: i8,
    typmod: Option<(i32, i32)>,
}
impl<N: ArrowNativeType + Into<i128>> PgValue for NumericDecimal<N> {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let v: i128 = self.values[idx].into();
        let scale = i32::from(self.scale);
        if let Ok(magnitude) = u64::try_from(v.unsigned_abs()) {
            if magnitude < 10u64.pow(16) && scale >= 0 {
                if let Some(typmod) = self.typmod {
                    let digit_count = magnitude.checked_ilog10().map_or(0, |d| d as usize + 1);
                    check_numeric_fits(Some(typmod), digit_count, scale, || {
                        let mut t = Vec::new();
                        crate::serialize::text::write_decimal_i128(&mut t, v, self.scale);
                        String::from_utf8_lossy(&t).into_owned()
                    })?;
                }
                write_numeric_u64(out, v < 0, magnitude, scale as u32);
                return Ok(());
            }
        }
        let mut buf = itoa::Buffer::new();
        let digits = buf.format(v.unsigned_abs()).as_bytes();
        check_numeric_fits(self.typmod, significant(digits), scale, || {
            let mut t = Vec::new();
            crate::serialize::text::write_decimal_i128(&mut t, v, self.scale);
            String::from_utf8_lossy(&t).into_owned()
        })?;
        write_numeric(out, v < 0, digits, scale);
        Ok(())
    }
}

struct NumericDecimal256 {
    values: ScalarBuffer<arrow_buffer::i256>,
    scale: i8,
    typmod: Option<(i32, i32)>,
}
impl PgValue for NumericDecimal256 {
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let text = self.values[idx].to_string();
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.as_str()),
        };
        let scale = i32::from(self.scale);
        check_numeric_fits(self.typmod, significant(digits.as_bytes()), scale, || {
            let mut t = Vec::new();
            crate::serialize::text::write_decimal_i256(&mut t, self.values[idx], self.scale);
            String::from_utf8_lossy(&t).into_owned()
        })?;
        write_numeric(out, negative, digits.as_bytes(), scale);
        Ok(())
    }
}

struct NumericInt<N: ArrowNativeType> {
    values: ScalarBuffer<N>,
    typmod: Option<(i32, i32)>,
}
impl<N: ArrowNativeType + itoa::Integer + Into<i128>> PgValue for NumericInt<N> {
    #[inline]
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let v: i128 = self.values[idx].into();
        let mut buf = itoa::Buffer::new();
        let digits = buf.format(v.unsigned_abs()).as_bytes();
        check_numeric_fits(self.typmod, significant(digits), 0, || v.to_string())?;
        write_numeric(out, v < 0, digits, 0);
        Ok(())
    }
}

/// Floats become the exact decimal of their shortest round-trip text (0.1 → 0.1, not
/// 0.1000000000000000055…); NaN and ±Infinity become numeric's NaN and ±Infinity.
struct NumericFloat {
    values: ScalarBuffer<f64>,
    typmod: Option<(i32, i32)>,
}
impl PgValue for NumericFloat {
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let v = self.values[idx];
        if !v.is_finite() {
            write_numeric_non_finite(out, v);
            return Ok(());
        }
        let mut buf = zmij::Buffer::new();
        let text = buf.format_finite(v);
        let (digits, scale) = float_digits(text);
        check_numeric_fits(self.typmod, significant(&digits), scale, || {
            text.to_string()
        })?;
        write_numeric(out, v.is_sign_negative() && v != 0.0, &digits, scale);
        Ok(())
    }
}

/// Splits zmij's text (`-1.25e-7`, `123.0`, `1e+21`) into significant digits and a decimal scale.
fn float_digits(text: &str) -> (Vec<u8>, i32) {
    let text = text.trim_start_matches('-');
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (text, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: Vec<u8> = int_part.bytes().chain(frac_part.bytes()).collect();
    let mut scale = frac_part.len() as i32 - exponent;
    while digits.len() > 1 && digits.last() == Some(&b'0') && scale > 0 {
        digits.pop();
        scale -= 1;
    }
    let lead = digits.iter().take_while(|&&d| d == b'0').count();
    digits.drain(..lead.min(digits.len().saturating_sub(1)));
    (digits, scale)
}

pub(super) fn build_numeric(
    column: &str,
    array: &ArrayRef,
    typmod: Option<(i32, i32)>,
) -> CoreResult<Box<dyn PgValue>> {
    use DataType as D;
    let bad = || malformed(column, array.as_ref());
    macro_rules! prim {
        ($t:ty) => {
            array
                .as_primitive_opt::<$t>()
                .ok_or_else(bad)?
                .values()
                .clone()
        };
    }
    Ok(match array.data_type() {
        D::Decimal32(_, s) => Box::new(NumericDecimal {
            values: prim!(Decimal32Type),
            scale: *s,
            typmod,
        }),
        D::Decimal64(_, s) => Box::new(NumericDecimal {
            values: prim!(Decimal64Type),
            scale: *s,
            typmod,
        }),
        D::Decimal128(_, s) => Box::new(NumericDecimal {
            values: prim!(Decimal128Type),
            scale: *s,
            typmod,
        }),
        D::Decimal256(_, s) => Box::new(NumericDecimal256 {
            values: prim!(Decimal256Type),
            scale: *s,
            typmod,
        }),
        D::Int8 => Box::new(NumericInt {
            values: prim!(Int8Type),
            typmod,
        }),
        D::Int16 => Box::new(NumericInt {
            values: prim!(Int16Type),
            typmod,
        }),
        D::Int32 => Box::new(NumericInt {
            values: prim!(Int32Type),
            typmod,
        }),
        D::Int64 => Box::new(NumericInt {
            values: prim!(Int64Type),
            typmod,
        }),
        D::UInt8 => Box::new(NumericInt {
            values: prim!(UInt8Type),
            typmod,
        }),
        D::UInt16 => Box::new(NumericInt {
            values: prim!(UInt16Type),
            typmod,
        }),
        D::UInt32 => Box::new(NumericInt {
            values: prim!(UInt32Type),
            typmod,
        }),
        D::UInt64 => Box::new(NumericInt {
            values: prim!(UInt64Type),
            typmod,
        }),
        D::Float16 => Box::new(NumericFloat {
            values: prim!(Float16Type)
                .iter()
                .map(|v| f64::from(v.to_f32()))
                .collect::<Vec<f64>>()
                .into(),
            typmod,
        }),
        D::Float32 => Box::new(NumericFloat32 {
            values: prim!(Float32Type),
            typmod,
        }),
        D::Float64 => Box::new(NumericFloat {
            values: prim!(Float64Type),
            typmod,
        }),
        _ => return Err(bad()),
    })
}

/// `f32` → numeric through the `f32`'s own shortest text (0.1f32 → 0.1).
struct NumericFloat32 {
    values: ScalarBuffer<f32>,
    typmod: Option<(i32, i32)>,
}
impl PgValue for NumericFloat32 {
    fn write(&self, idx: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let v = self.values[idx];
        if !v.is_finite() {
            write_numeric_non_finite(out, f64::from(v));
            return Ok(());
        }
        let mut buf = zmij::Buffer::new();
        let text = buf.format_finite(v);
        let (digits, scale) = float_digits(text);
        check_numeric_fits(self.typmod, significant(&digits), scale, || {
            text.to_string()
        })?;
        write_numeric(out, v.is_sign_negative() && v != 0.0, &digits, scale);
        Ok(())
    }
}
