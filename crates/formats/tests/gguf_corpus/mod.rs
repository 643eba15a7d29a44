//! Malformed-GGUF corpus: files that each break one reader rule, built byte by byte with
//! an unvalidated builder (the writer refuses such files), with the error each must get.
pub mod metadata;
pub mod tensors;

use ishizuki_formats::gguf::{MAX_ARRAY_DEPTH, MAX_DIMS};
pub use ishizuki_formats::GgufError as E;
use ishizuki_formats::ValueType;

/// One malformed file and the error it must get.
pub struct Case {
    pub name: &'static str,
    pub bytes: Vec<u8>,
    /// The byte offset the error must name.
    pub at: u64,
    pub check: fn(&E) -> bool,
}

/// Pushes a case whose error must match `$pat` and name byte `$at`. Invoked with braces,
/// which rustfmt leaves as written, so each case stays one table row.
macro_rules! case {
    ($cases:ident, $name:literal, $raw:expr, $at:expr, $pat:pat) => {
        $cases.push(Case {
            name: $name,
            bytes: $raw.0,
            at: $at,
            check: |e| matches!(e, $pat),
        })
    };
}
use case;

pub fn all_cases() -> Vec<Case> {
    let mut c = Vec::new();
    metadata::header_cases(&mut c);
    metadata::string_cases(&mut c);
    metadata::value_type_cases(&mut c);
    metadata::array_cases(&mut c);
    metadata::key_cases(&mut c);
    tensors::tensor_info_cases(&mut c);
    tensors::layout_cases(&mut c);
    tensors::patched_writer_cases(&mut c);
    c
}

pub const U8: u32 = ValueType::U8 as u32;
pub const U16: u32 = ValueType::U16 as u32;
pub const I32: u32 = ValueType::I32 as u32;
pub const U32: u32 = ValueType::U32 as u32;
pub const BOOL: u32 = ValueType::Bool as u32;
pub const STRING: u32 = ValueType::String as u32;
pub const ARRAY: u32 = ValueType::Array as u32;
pub const U64: u32 = ValueType::U64 as u32;
pub const F64: u32 = ValueType::F64 as u32;

/// ggml type ids used by the cases.
pub const F32_T: u32 = 0;
pub const Q4_0_T: u32 = 2;
pub const Q4_K_T: u32 = 12;
pub const I64_T: u32 = 27;

#[derive(Clone, Default)]
pub struct Raw(pub Vec<u8>);

impl Raw {
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        Raw(b"GGUF".to_vec()).u32(version).u64(n_tensors).u64(n_kv)
    }

    /// A v3 header.
    pub fn gguf(n_tensors: u64, n_kv: u64) -> Raw {
        Raw::header(3, n_tensors, n_kv)
    }

    pub fn len(&self) -> u64 {
        self.0.len() as u64
    }

    /// Records the current length (the offset of the next field) into `at`.
    pub fn mark(self, at: &mut u64) -> Raw {
        *at = self.len();
        self
    }

    pub fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }

    pub fn u8(self, v: u8) -> Raw {
        self.bytes(&[v])
    }

    pub fn u32(self, v: u32) -> Raw {
        self.bytes(&v.to_le_bytes())
    }

    pub fn u64(self, v: u64) -> Raw {
        self.bytes(&v.to_le_bytes())
    }

    /// u64 length, then the bytes.
    pub fn str(self, s: &[u8]) -> Raw {
        self.u64(s.len() as u64).bytes(s)
    }

    /// A KV's key and value type; the caller appends the value.
    pub fn kv(self, key: &str, ty: u32) -> Raw {
        self.str(key.as_bytes()).u32(ty)
    }

    /// An array header: element type, u64 length; the caller appends the elements.
    pub fn array(self, elem: u32, len: u64) -> Raw {
        self.u32(elem).u64(len)
    }

    pub fn tensor(self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Raw {
        let r = self.str(name.as_bytes()).u32(dims.len() as u32);
        dims.iter().fold(r, |r, &d| r.u64(d)).u32(ty).u64(offset)
    }

    pub fn zeros(self, n: u64) -> Raw {
        self.bytes(&vec![0; n as usize])
    }

    /// Zero padding up to a multiple of `align`.
    pub fn pad(self, align: u64) -> Raw {
        let n = self.len().next_multiple_of(align) - self.len();
        self.zeros(n)
    }

    pub fn patch_u32(mut self, at: u64, v: u32) -> Raw {
        self.0[at as usize..at as usize + 4].copy_from_slice(&v.to_le_bytes());
        self
    }
}

/// File offsets of one tensor info's fields, recorded by `Raw::tensor_at`.
#[derive(Clone, Copy, Default)]
pub struct InfoMarks {
    pub start: u64,
    pub dims: u64,
    pub ty: u64,
    pub offset: u64,
}

impl Raw {
    /// `tensor`, recording where each field landed.
    pub fn tensor_at(
        self,
        name: &str,
        dims: &[u64],
        ty: u32,
        offset: u64,
        m: &mut InfoMarks,
    ) -> Raw {
        m.start = self.len();
        m.dims = m.start + 8 + name.len() as u64 + 4;
        m.ty = m.dims + 8 * dims.len() as u64;
        m.offset = m.ty + 4;
        self.tensor(name, dims, ty, offset)
    }
}
