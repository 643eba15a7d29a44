//! GGUF v2/v3 reader. Layout: header, metadata KVs, tensor infos, padding to
//! `general.alignment`, tensor data.
use ishizuki_core::GgmlType;
use memmap2::Mmap;
use std::{collections::HashMap, fs::File, path::Path};

pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("gguf: at offset {offset}: {rule}")]
    Invalid { offset: u64, rule: String },
}

fn invalid<T>(offset: u64, rule: impl Into<String>) -> Result<T, GgufError> {
    Err(GgufError::Invalid {
        offset,
        rule: rule.into(),
    })
}

impl From<GgufError> for ishizuki_core::Error {
    fn from(e: GgufError) -> Self {
        ishizuki_core::Error::Format(e.to_string())
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    /// Any integer type that fits u64.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: dims[0] is the contiguous (row) dimension.
    pub dims: Vec<u64>,
    /// `None` for a type id this build does not know.
    pub ty: GgmlType,
    /// Offset relative to the start of the data section.
    pub offset: u64,
    pub n_bytes: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

pub struct GgufFile {
    mmap: Mmap,
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    pub alignment: u64,
    pub data_offset: u64,
}

impl GgufFile {
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let file = File::open(path)?;
        // SAFETY: the file is mapped read-only; model files are not modified while loaded.
        let mmap = unsafe { Mmap::map(&file)? };
        Self::from_mmap(mmap)
    }

    fn from_mmap(mmap: Mmap) -> Result<GgufFile, GgufError> {
        let mut r = Reader { buf: &mmap, pos: 0 };
        let magic = r.bytes(4)?;
        if magic != GGUF_MAGIC {
            return invalid(0, "magic is not GGUF");
        }
        let version = r.u32()?;
        if !(2..=3).contains(&version) {
            return invalid(4, format!("unsupported version {version}"));
        }
        let n_tensors = r.u64()?;
        let n_kv = r.u64()?;
        let mut metadata = Vec::new();
        let mut index = HashMap::new();
        for _ in 0..n_kv {
            let at = r.pos;
            let key = r.string()?;
            let vt = r.u32()?;
            let value = r.value(vt, 0)?;
            if index.insert(key.clone(), metadata.len()).is_some() {
                return invalid(at as u64, format!("duplicate key {key}"));
            }
            metadata.push((key, value));
        }
        let alignment = match index.get("general.alignment").map(|&i| &metadata[i].1) {
            Some(Value::U32(a)) if *a > 0 && a.is_power_of_two() => *a as u64,
            Some(_) => return invalid(0, "general.alignment must be a power-of-two u32"),
            None => DEFAULT_ALIGNMENT,
        };
        let mut tensors = Vec::new();
        let mut tensor_index = HashMap::new();
        for _ in 0..n_tensors {
            let at = r.pos as u64;
            let name = r.string()?;
            let n_dims = r.u32()?;
            let mut dims = Vec::new();
            for _ in 0..n_dims {
                dims.push(r.u64()?);
            }
            let type_id = r.u32()?;
            let offset = r.u64()?;
            let ty = GgmlType::from_id(type_id).ok_or_else(|| GgufError::Invalid {
                offset: at,
                rule: format!("unknown tensor type {type_id}"),
            })?;
            let n: u64 = dims.iter().product();
            let n_bytes = ty.row_bytes(n).unwrap_or(0);
            if tensor_index.insert(name.clone(), tensors.len()).is_some() {
                return invalid(at, format!("duplicate tensor {name}"));
            }
            tensors.push(TensorInfo {
                name,
                dims,
                ty,
                offset,
                n_bytes,
            });
        }
        let data_offset = (r.pos as u64).div_ceil(alignment) * alignment;
        Ok(GgufFile {
            mmap,
            version,
            metadata,
            index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
        })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor's data.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let start = (self.data_offset + t.offset) as usize;
        &self.mmap[start..start + t.n_bytes as usize]
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], GgufError> {
        match self.pos.checked_add(n) {
            Some(end) if end <= self.buf.len() => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            _ => invalid(self.pos as u64, format!("truncated: {n} bytes needed")),
        }
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        Ok(self.bytes(N)?.try_into().expect("length checked"))
    }
    fn u32(&mut self) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn string(&mut self) -> Result<String, GgufError> {
        let at = self.pos as u64;
        let len = self.u64()?;
        let len = usize::try_from(len).or_else(|_| invalid(at, "string length overflows"))?;
        let b = self.bytes(len)?;
        String::from_utf8(b.to_vec()).or_else(|_| invalid(at, "string is not UTF-8"))
    }
    fn value(&mut self, vt: u32, depth: u32) -> Result<Value, GgufError> {
        let at = self.pos as u64;
        Ok(match vt {
            0 => Value::U8(self.array::<1>()?[0]),
            1 => Value::I8(self.array::<1>()?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.array()?)),
            3 => Value::I16(i16::from_le_bytes(self.array()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(i32::from_le_bytes(self.array()?)),
            6 => Value::F32(f32::from_le_bytes(self.array()?)),
            7 => Value::Bool(self.array::<1>()?[0] != 0),
            8 => Value::String(self.string()?),
            9 => {
                if depth > 8 {
                    return invalid(at, "arrays nested too deep");
                }
                let et = self.u32()?;
                let n = self.u64()?;
                let mut v = Vec::new();
                for _ in 0..n {
                    v.push(self.value(et, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(i64::from_le_bytes(self.array()?)),
            12 => Value::F64(f64::from_le_bytes(self.array()?)),
            _ => return invalid(at, format!("unknown value type {vt}")),
        })
    }
}
