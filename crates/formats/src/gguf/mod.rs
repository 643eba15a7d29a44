//! GGUF v2/v3 reader and v3 writer. Layout: header, metadata KVs, tensor infos,
//! padding to `general.alignment`, tensor data. The reader validates the whole
//! layout before handing out anything; the writer refuses what the reader would reject.
mod error;
mod file_type;
mod reader;
mod value;
mod writer;

pub use error::GgufError;
pub use file_type::file_type_name;
pub use value::{Value, ValueType};
pub use writer::{GgufWriteError, GgufWriter};

use ishizuki_core::GgmlType;
use memmap2::Mmap;
use std::{collections::HashMap, fs::File, ops::Deref, path::Path};

pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";
/// Version the writer emits; the reader accepts 2 and 3 (same little-endian layout).
pub const GGUF_VERSION: u32 = 3;
pub const DEFAULT_ALIGNMENT: u64 = 32;
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// ggml's GGML_MAX_DIMS.
pub const MAX_DIMS: usize = 4;
/// Deepest array-of-array nesting accepted; a flat array is depth 1.
pub const MAX_ARRAY_DEPTH: usize = 8;
/// Magic, u32 version, u64 tensor count, u64 KV count.
pub const HEADER_BYTES: u64 = 4 + 4 + 8 + 8;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: dims[0] is the contiguous (row) dimension.
    pub dims: Vec<u64>,
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

/// The bytes a GGUF file was parsed from: a read-only map or an owned buffer.
enum Storage {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Deref for Storage {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

pub struct GgufFile {
    /// Shared, so what reads tensors in place (a CPU backend's weights) keeps it mapped.
    storage: std::sync::Arc<Storage>,
    /// Unique among the files this process opened: a `TensorAt` names bytes of this one only.
    id: u64,
    pub version: u32,
    /// In file order.
    pub metadata: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    /// In file order.
    pub tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    pub alignment: u64,
    /// Absolute file offset of the data section.
    pub data_offset: u64,
}

/// Where one tensor's bytes lie in the file that located it (`GgufFile::locate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorAt {
    file: u64,
    start: usize,
    len: usize,
}

impl GgufFile {
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let file = File::open(path)?;
        // SAFETY: the file is mapped read-only; model files are not modified while loaded.
        let mmap = unsafe { Mmap::map(&file)? };
        Self::from_storage(Storage::Mapped(mmap))
    }

    /// Parses an in-memory file (tests, fuzzing, downloads not yet on disk).
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Result<GgufFile, GgufError> {
        Self::from_storage(Storage::Owned(bytes.into()))
    }

    fn from_storage(storage: Storage) -> Result<GgufFile, GgufError> {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let p = reader::parse(&storage)?;
        Ok(GgufFile {
            storage: std::sync::Arc::new(storage),
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            version: p.version,
            metadata: p.metadata,
            index: p.index,
            tensors: p.tensors,
            tensor_index: p.tensor_index,
            alignment: p.alignment,
            data_offset: p.data_offset,
        })
    }

    /// What keeps the file's bytes mapped and unmoved: every slice of `bytes` stays valid as
    /// long as it lives, also past this `GgufFile`.
    pub fn owner(&self) -> std::sync::Arc<dyn std::any::Any + Send + Sync> {
        self.storage.clone()
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        &self.storage
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.get(key)?.as_f64()
    }

    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    pub fn get_array(&self, key: &str) -> Option<&[Value]> {
        self.get(key)?.as_array()
    }

    /// `general.architecture`, e.g. "llama".
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor of this file (validated at open). An info that is
    /// not one of this file's tensors yields an empty slice; see `try_tensor_data`.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        self.try_tensor_data(t).unwrap_or(&[])
    }

    /// Where `name` is in `tensors`.
    pub fn tensor_position(&self, name: &str) -> Option<usize> {
        self.tensor_index.get(name).copied()
    }

    /// Where the bytes of `tensors[position]` lie, for `data_at`.
    pub fn locate(&self, position: usize) -> Option<TensorAt> {
        let bytes = self.byte_range(self.tensors.get(position)?);
        Some(TensorAt {
            file: self.id,
            start: bytes.start,
            len: bytes.len(),
        })
    }

    /// The bytes `at` names if this file handed it out (`locate`), else None. Decode views
    /// every weight each token: this reads no tensor info, whose name and dims would be cold
    /// cache lines after a token's stream of weights.
    pub fn data_at(&self, at: TensorAt) -> Option<&[u8]> {
        if at.file != self.id {
            return None;
        }
        self.storage.get(at.start..at.start.checked_add(at.len)?)
    }

    /// The bytes of a tensor, refusing an info that is not one of this file's tensors.
    pub fn try_tensor_data(&self, t: &TensorInfo) -> Result<&[u8], GgufError> {
        match self.tensor(&t.name) {
            Some(own) if own == t => Ok(self.data_of(own)),
            _ => Err(GgufError::ForeignTensor {
                name: t.name.clone(),
            }),
        }
    }

    /// The bytes of one of this file's tensors.
    fn data_of(&self, own: &TensorInfo) -> &[u8] {
        // Checked at open: data_offset + offset + n_bytes <= file length.
        &self.storage[self.byte_range(own)]
    }

    /// Where one of this file's tensors lies in it.
    fn byte_range(&self, own: &TensorInfo) -> std::ops::Range<usize> {
        let start = (self.data_offset + own.offset) as usize;
        start..start + own.n_bytes as usize
    }

    /// Drops the whole pages of `bytes` (a part of this file's mapping) from the process's
    /// resident set, for a caller that keeps its own copy; a later read maps them again from
    /// the file. Bytes of a file read into memory, or from elsewhere, are left alone.
    pub fn release_pages(&self, bytes: &[u8]) {
        let Storage::Mapped(map) = &*self.storage else {
            return;
        };
        let (base, at) = (map.as_ptr() as usize, bytes.as_ptr() as usize);
        if at < base || at + bytes.len() > base + map.len() {
            return;
        }
        // whole pages inside `bytes` only, so neighbouring tensors stay resident
        let page = 4096;
        let start = (at - base).next_multiple_of(page);
        let end = (at - base + bytes.len()) / page * page;
        if end > start {
            // SAFETY: the map is a read-only file mapping, so dropped pages come back
            // unchanged from the file; the advice is best-effort, a refusal leaves them.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
            };
        }
    }

    /// The bytes of the named tensor, if the file has it.
    pub fn tensor_bytes(&self, name: &str) -> Option<&[u8]> {
        self.tensor(name).map(|t| self.tensor_data(t))
    }
}

#[cfg(test)]
mod tests;
