//! GGUF v3 writer: metadata in insertion order, tensor infos, then each tensor's data
//! padded to the alignment (`general.alignment` when set, else 32), as gguf-py writes it.
use super::value::{Value, ValueType};
use super::{
    ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_VERSION, MAX_ARRAY_DEPTH, MAX_DIMS,
};
use ishizuki_core::GgmlType;
use std::borrow::Cow;
use std::collections::HashSet;
use std::io::{BufWriter, Write};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum GgufWriteError {
    #[error("gguf write: io: {0}")]
    Io(#[from] std::io::Error),
    #[error("gguf write: duplicate metadata key {key:?}")]
    DuplicateKey { key: String },
    #[error("gguf write: general.alignment must be a non-zero power-of-two u32, got {value:?}")]
    BadAlignment { value: Value },
    #[error("gguf write: key {key:?}: array mixes {first} and {other} elements")]
    MixedArray {
        key: String,
        first: ValueType,
        other: ValueType,
    },
    #[error("gguf write: key {key:?}: arrays nested deeper than {max} levels")]
    NestingTooDeep { key: String, max: usize },
    #[error("gguf write: duplicate tensor name {name:?}")]
    DuplicateTensor { name: String },
    #[error("gguf write: tensor {name:?} has {n_dims} dims, must have 1..=4")]
    BadDimCount { name: String, n_dims: usize },
    #[error("gguf write: tensor {name:?} dim {axis} is 0")]
    ZeroDim { name: String, axis: usize },
    #[error(
        "gguf write: tensor {name:?} row of {row} is not a multiple of the {ty} block {block}"
    )]
    RowNotBlockMultiple {
        name: String,
        ty: GgmlType,
        row: u64,
        block: u64,
    },
    #[error("gguf write: tensor {name:?} size overflows")]
    SizeOverflow { name: String },
    #[error("gguf write: tensor {name:?} needs {expected} bytes of data, got {actual}")]
    DataSize {
        name: String,
        expected: u64,
        actual: u64,
    },
}

struct PendingTensor<'a> {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Cow<'a, [u8]>,
}

/// Builds a GGUF file. Tensor data may be borrowed (e.g. from a mapped source file).
#[derive(Default)]
pub struct GgufWriter<'a> {
    metadata: Vec<(String, Value)>,
    keys: HashSet<String>,
    tensors: Vec<PendingTensor<'a>>,
    names: HashSet<String>,
}

impl<'a> GgufWriter<'a> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Alignment of the data section and of every tensor's data.
    pub fn alignment(&self) -> u64 {
        self.metadata
            .iter()
            .find(|(k, _)| k == ALIGNMENT_KEY)
            .and_then(|(_, v)| v.as_u64())
            .unwrap_or(DEFAULT_ALIGNMENT)
    }

    pub fn add_metadata(
        &mut self,
        key: impl Into<String>,
        value: impl Into<Value>,
    ) -> Result<&mut Self, GgufWriteError> {
        let (key, value) = (key.into(), value.into());
        if self.keys.contains(&key) {
            return Err(GgufWriteError::DuplicateKey { key });
        }
        if key == ALIGNMENT_KEY && !matches!(value, Value::U32(a) if a.is_power_of_two()) {
            return Err(GgufWriteError::BadAlignment { value });
        }
        check_encodable(&key, &value)?;
        self.keys.insert(key.clone());
        self.metadata.push((key, value));
        Ok(self)
    }

    /// Adds a tensor; `dims` in ggml order (dims[0] contiguous), `data` exactly its bytes.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<&mut Self, GgufWriteError> {
        let (name, data) = (name.into(), data.into());
        if self.names.contains(&name) {
            return Err(GgufWriteError::DuplicateTensor { name });
        }
        let expected = expected_bytes(&name, dims, ty)?;
        if data.len() as u64 != expected {
            return Err(GgufWriteError::DataSize {
                name,
                expected,
                actual: data.len() as u64,
            });
        }
        self.names.insert(name.clone());
        self.tensors.push(PendingTensor {
            name,
            dims: dims.to_vec(),
            ty,
            data,
        });
        Ok(self)
    }

    /// Writes the file; returns the number of bytes written.
    pub fn write<W: Write>(&self, mut out: W) -> Result<u64, GgufWriteError> {
        let alignment = self.alignment();
        let mut head = self.header_and_metadata();
        let mut offset = 0u64;
        for t in &self.tensors {
            put_string(&mut head, &t.name);
            put_u32(&mut head, t.dims.len() as u32);
            t.dims.iter().for_each(|&d| put_u64(&mut head, d));
            put_u32(&mut head, t.ty.id());
            put_u64(&mut head, offset);
            offset += (t.data.len() as u64).next_multiple_of(alignment);
        }
        out.write_all(&head)?;
        let data_start = (head.len() as u64).next_multiple_of(alignment);
        write_zeros(&mut out, data_start - head.len() as u64)?;
        for t in &self.tensors {
            out.write_all(&t.data)?;
            let len = t.data.len() as u64;
            write_zeros(&mut out, len.next_multiple_of(alignment) - len)?;
        }
        out.flush()?;
        Ok(data_start + offset)
    }

    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<u64, GgufWriteError> {
        let file = std::fs::File::create(path)?;
        self.write(BufWriter::new(file))
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = self.write(&mut out);
        out
    }

    fn header_and_metadata(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(GGUF_MAGIC);
        put_u32(&mut b, GGUF_VERSION);
        put_u64(&mut b, self.tensors.len() as u64);
        put_u64(&mut b, self.metadata.len() as u64);
        for (key, value) in &self.metadata {
            put_string(&mut b, key);
            put_u32(&mut b, value.value_type().id());
            put_value(&mut b, value);
        }
        b
    }
}

/// Arrays must be homogeneous (the element type is written once) and not nested too deep.
fn check_encodable(key: &str, value: &Value) -> Result<(), GgufWriteError> {
    if value.nesting_depth() > MAX_ARRAY_DEPTH {
        return Err(GgufWriteError::NestingTooDeep {
            key: key.to_owned(),
            max: MAX_ARRAY_DEPTH,
        });
    }
    let Value::Array(items) = value else {
        return Ok(());
    };
    if let Some(first) = items.first() {
        let first = first.value_type();
        if let Some(other) = items.iter().map(Value::value_type).find(|&t| t != first) {
            return Err(GgufWriteError::MixedArray {
                key: key.to_owned(),
                first,
                other,
            });
        }
    }
    items.iter().try_for_each(|item| check_encodable(key, item))
}

fn expected_bytes(name: &str, dims: &[u64], ty: GgmlType) -> Result<u64, GgufWriteError> {
    if dims.is_empty() || dims.len() > MAX_DIMS {
        return Err(GgufWriteError::BadDimCount {
            name: name.to_owned(),
            n_dims: dims.len(),
        });
    }
    if let Some(axis) = dims.iter().position(|&d| d == 0) {
        let name = name.to_owned();
        return Err(GgufWriteError::ZeroDim { name, axis });
    }
    let block = ty.block_size() as u64;
    if !dims[0].is_multiple_of(block) {
        return Err(GgufWriteError::RowNotBlockMultiple {
            name: name.to_owned(),
            ty,
            row: dims[0],
            block,
        });
    }
    dims.iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .and_then(|n| ty.row_bytes(n))
        .ok_or_else(|| GgufWriteError::SizeOverflow {
            name: name.to_owned(),
        })
}

/// Padding, written in chunks: an alignment may be up to 2^31 bytes.
fn write_zeros(out: &mut impl Write, mut n: u64) -> std::io::Result<()> {
    const ZEROS: [u8; 4096] = [0; 4096];
    while n > 0 {
        let chunk = n.min(ZEROS.len() as u64);
        out.write_all(&ZEROS[..chunk as usize])?;
        n -= chunk;
    }
    Ok(())
}

fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}

fn put_string(b: &mut Vec<u8>, s: &str) {
    put_u64(b, s.len() as u64);
    b.extend_from_slice(s.as_bytes());
}

fn put_value(b: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => b.push(*v),
        Value::I8(v) => b.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => b.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => b.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => put_u32(b, *v),
        Value::I32(v) => b.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => b.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => b.push(*v as u8),
        Value::String(s) => put_string(b, s),
        Value::Array(items) => {
            // An empty array has no element to take a type from; any type reads back the same.
            let elem = items.first().map_or(ValueType::U8, Value::value_type);
            put_u32(b, elem.id());
            put_u64(b, items.len() as u64);
            items.iter().for_each(|item| put_value(b, item));
        }
        Value::U64(v) => put_u64(b, *v),
        Value::I64(v) => b.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => b.extend_from_slice(&v.to_le_bytes()),
    }
}
