//! Validating GGUF parser over a byte slice. Layout: header (magic, u32 version,
//! u64 n_tensors, u64 n_kv), metadata KVs, tensor infos, padding to the alignment,
//! tensor data. Every count and length is checked against the bytes left before
//! anything is allocated from it.
use super::error::GgufError;
use super::value::{Value, ValueType};
use super::{TensorInfo, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS};
use ishizuki_core::GgmlType;
use std::collections::HashMap;

/// Fewest bytes of one KV: u64 key length, u32 value type, a 1-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Fewest bytes of one tensor info: u64 name length, u32 n_dims, one u64 dim, u32 type, u64 offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;
/// Vectors sized from file counts start at most this large and grow as entries are read.
const MAX_PREALLOC: usize = 1 << 16;

/// Everything the header, metadata and tensor infos declare, validated against the buffer.
pub(crate) struct Parsed {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    pub tensor_index: HashMap<String, usize>,
    pub alignment: u64,
    pub data_offset: u64,
}

pub(crate) fn parse(buf: &[u8]) -> Result<Parsed, GgufError> {
    let mut c = Cursor { buf, pos: 0 };
    let version = read_magic_and_version(&mut c)?;
    let n_tensors = c.count(MIN_TENSOR_INFO_BYTES, |offset, count, available| {
        GgufError::TooManyTensors {
            offset,
            count,
            available,
        }
    })?;
    let n_kv = c.count(MIN_KV_BYTES, |offset, count, available| {
        GgufError::TooManyKvs {
            offset,
            count,
            available,
        }
    })?;
    let metadata = read_metadata(&mut c, n_kv)?;
    let alignment = alignment(&metadata)?;
    let infos = read_tensor_infos(&mut c, n_tensors)?;
    let data_offset = c.pos.div_ceil(alignment) * alignment;
    check_layout(&infos, data_offset, alignment, c.len())?;
    let Metadata { entries, index, .. } = metadata;
    let tensor_index = infos.index;
    Ok(Parsed {
        version,
        metadata: entries,
        index,
        tensors: infos.infos.into_iter().map(|t| t.info).collect(),
        tensor_index,
        alignment,
        data_offset,
    })
}

fn read_magic_and_version(c: &mut Cursor) -> Result<u32, GgufError> {
    let magic = c.array::<4>()?;
    if &magic != GGUF_MAGIC {
        return Err(GgufError::BadMagic { found: magic });
    }
    let at = c.pos;
    let version = c.u32()?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::UnsupportedVersion {
            offset: at,
            version,
        });
    }
    Ok(version)
}

struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    /// File offset of each entry's value, for errors about it.
    value_offsets: Vec<u64>,
}

fn read_metadata(c: &mut Cursor, n_kv: u64) -> Result<Metadata, GgufError> {
    let cap = prealloc(n_kv);
    let mut m = Metadata {
        entries: Vec::with_capacity(cap),
        index: HashMap::with_capacity(cap),
        value_offsets: Vec::with_capacity(cap),
    };
    for _ in 0..n_kv {
        let at = c.pos;
        let key = c.string()?;
        if m.index.contains_key(&key) {
            return Err(GgufError::DuplicateKey { offset: at, key });
        }
        let ty = c.value_type()?;
        m.value_offsets.push(c.pos);
        let value = c.value(ty, 0)?;
        m.index.insert(key.clone(), m.entries.len());
        m.entries.push((key, value));
    }
    Ok(m)
}

fn alignment(m: &Metadata) -> Result<u64, GgufError> {
    let Some(&i) = m.index.get("general.alignment") else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let offset = m.value_offsets[i];
    match m.entries[i].1 {
        Value::U32(a) if a.is_power_of_two() => Ok(a as u64),
        Value::U32(value) => Err(GgufError::AlignmentNotPowerOfTwo { offset, value }),
        ref other => Err(GgufError::AlignmentType {
            offset,
            found: other.value_type(),
        }),
    }
}

/// A tensor info with the file offsets of its fields, for errors found later.
struct LocatedInfo {
    info: TensorInfo,
    offset_field_at: u64,
}

struct TensorInfos {
    infos: Vec<LocatedInfo>,
    index: HashMap<String, usize>,
}

fn read_tensor_infos(c: &mut Cursor, n_tensors: u64) -> Result<TensorInfos, GgufError> {
    let cap = prealloc(n_tensors);
    let mut t = TensorInfos {
        infos: Vec::with_capacity(cap),
        index: HashMap::with_capacity(cap),
    };
    for _ in 0..n_tensors {
        let at = c.pos;
        let located = read_tensor_info(c)?;
        let name = &located.info.name;
        if t.index.contains_key(name) {
            return Err(GgufError::DuplicateTensor {
                offset: at,
                name: name.clone(),
            });
        }
        t.index.insert(name.clone(), t.infos.len());
        t.infos.push(located);
    }
    Ok(t)
}

fn read_tensor_info(c: &mut Cursor) -> Result<LocatedInfo, GgufError> {
    let name = c.string()?;
    let n_dims_at = c.pos;
    let n_dims = c.u32()?;
    if n_dims == 0 || n_dims as usize > MAX_DIMS {
        return Err(GgufError::BadDimCount {
            offset: n_dims_at,
            name,
            n_dims,
        });
    }
    let dims_at = c.pos;
    let mut dims = Vec::with_capacity(n_dims as usize);
    for axis in 0..n_dims as usize {
        let dim_at = c.pos;
        let dim = c.u64()?;
        if dim == 0 {
            return Err(GgufError::ZeroDim {
                offset: dim_at,
                name,
                axis,
            });
        }
        dims.push(dim);
    }
    let type_at = c.pos;
    let type_id = c.u32()?;
    let offset_field_at = c.pos;
    let offset = c.u64()?;
    let Some(ty) = GgmlType::from_id(type_id) else {
        return Err(GgufError::UnknownTensorType {
            offset: type_at,
            name,
            type_id,
        });
    };
    let n_bytes = tensor_bytes(&name, &dims, ty, dims_at)?;
    let info = TensorInfo {
        name,
        dims,
        ty,
        offset,
        n_bytes,
    };
    Ok(LocatedInfo {
        info,
        offset_field_at,
    })
}

/// Byte size of a tensor: whole blocks of `ty`, each row a multiple of the block size.
fn tensor_bytes(name: &str, dims: &[u64], ty: GgmlType, dims_at: u64) -> Result<u64, GgufError> {
    let n_elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| GgufError::ElementCountOverflow {
            offset: dims_at,
            name: name.to_owned(),
        })?;
    let (block, block_bytes) = ty.block_layout();
    if !dims[0].is_multiple_of(block as u64) {
        return Err(GgufError::RowNotBlockMultiple {
            offset: dims_at,
            name: name.to_owned(),
            ty,
            row: dims[0],
            block: block as u64,
        });
    }
    (n_elements / block as u64)
        .checked_mul(block_bytes as u64)
        .ok_or_else(|| GgufError::ByteSizeOverflow {
            offset: dims_at,
            name: name.to_owned(),
        })
}

/// Data offsets aligned, every tensor inside the file, no two tensors overlapping.
fn check_layout(
    t: &TensorInfos,
    data_offset: u64,
    alignment: u64,
    file_len: u64,
) -> Result<(), GgufError> {
    for LocatedInfo {
        info,
        offset_field_at,
    } in &t.infos
    {
        if !info.offset.is_multiple_of(alignment) {
            return Err(GgufError::MisalignedTensor {
                offset: *offset_field_at,
                name: info.name.clone(),
                data_offset: info.offset,
                alignment,
            });
        }
        let start = data_offset.checked_add(info.offset);
        let end = start.and_then(|s| s.checked_add(info.n_bytes));
        if end.is_none_or(|e| e > file_len) {
            return Err(GgufError::TensorOutOfBounds {
                offset: *offset_field_at,
                name: info.name.clone(),
                start: start.unwrap_or(u64::MAX),
                end: end.unwrap_or(u64::MAX),
                file_len,
            });
        }
    }
    let mut by_offset: Vec<&LocatedInfo> = t.infos.iter().collect();
    by_offset.sort_by_key(|l| l.info.offset);
    for pair in by_offset.windows(2) {
        let (prev, next) = (&pair[0].info, pair[1]);
        // Both ends were checked against the file length above, so this cannot overflow.
        if next.info.offset < prev.offset + prev.n_bytes {
            return Err(GgufError::TensorOverlap {
                offset: next.offset_field_at,
                name: next.info.name.clone(),
                other: prev.name.clone(),
            });
        }
    }
    Ok(())
}

fn prealloc(count: u64) -> usize {
    usize::try_from(count)
        .unwrap_or(usize::MAX)
        .min(MAX_PREALLOC)
}

/// Reads little-endian fields; every read is bounds-checked and names its offset on failure.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: u64,
}

impl<'a> Cursor<'a> {
    fn len(&self) -> u64 {
        self.buf.len() as u64
    }

    fn remaining(&self) -> u64 {
        self.len() - self.pos
    }

    fn bytes(&mut self, n: u64) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                offset: self.pos,
                need: n,
                available: self.remaining(),
            });
        }
        // Both bounds are within the buffer, so they fit usize.
        let slice = &self.buf[self.pos as usize..(self.pos + n) as usize];
        self.pos += n;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N as u64)?);
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A u64 count of records of at least `min_each` bytes that must fit in the bytes left.
    fn count(
        &mut self,
        min_each: u64,
        too_many: impl FnOnce(u64, u64, u64) -> GgufError,
    ) -> Result<u64, GgufError> {
        let at = self.pos;
        let count = self.u64()?;
        // Remaining is measured after both header counts, which precede any record.
        let available = self.len().saturating_sub(super::HEADER_BYTES);
        if count > available / min_each {
            return Err(too_many(at, count, available));
        }
        Ok(count)
    }

    fn string(&mut self) -> Result<String, GgufError> {
        let at = self.pos;
        let len = self.u64()?;
        if len > self.remaining() {
            return Err(GgufError::StringOutOfBounds {
                offset: at,
                len,
                available: self.remaining(),
            });
        }
        let bytes = self.bytes(len)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::InvalidUtf8 { offset: at }),
        }
    }

    fn value_type(&mut self) -> Result<ValueType, GgufError> {
        let at = self.pos;
        let type_id = self.u32()?;
        ValueType::from_id(type_id).ok_or(GgufError::UnknownValueType {
            offset: at,
            type_id,
        })
    }

    fn value(&mut self, ty: ValueType, depth: usize) -> Result<Value, GgufError> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>()?[0]),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array()?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array()?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array()?)),
            ValueType::U32 => Value::U32(self.u32()?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array()?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array()?)),
            ValueType::Bool => Value::Bool(self.bool()?),
            ValueType::String => Value::String(self.string()?),
            ValueType::Array => Value::Array(self.array_value(depth + 1)?),
            ValueType::U64 => Value::U64(self.u64()?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array()?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array()?)),
        })
    }

    fn bool(&mut self) -> Result<bool, GgufError> {
        let at = self.pos;
        match self.array::<1>()?[0] {
            0 => Ok(false),
            1 => Ok(true),
            byte => Err(GgufError::InvalidBool { offset: at, byte }),
        }
    }

    /// An array at nesting level `depth` (1 for a top-level array): element type, u64 length, values.
    fn array_value(&mut self, depth: usize) -> Result<Vec<Value>, GgufError> {
        let at = self.pos;
        if depth > MAX_ARRAY_DEPTH {
            return Err(GgufError::NestingTooDeep {
                offset: at,
                max: MAX_ARRAY_DEPTH,
            });
        }
        let elem = self.value_type()?;
        let len_at = self.pos;
        let len = self.u64()?;
        if len > self.remaining() / elem.min_encoded_size() {
            return Err(GgufError::ArrayOutOfBounds {
                offset: len_at,
                len,
                elem,
                available: self.remaining(),
            });
        }
        let mut items = Vec::with_capacity(prealloc(len));
        for _ in 0..len {
            items.push(self.value(elem, depth)?);
        }
        Ok(items)
    }
}
