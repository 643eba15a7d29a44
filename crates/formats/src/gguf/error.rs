//! Typed GGUF read errors: each names the byte offset where the rule broke and the rule.
use super::value::ValueType;
use ishizuki_core::GgmlType;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("gguf: io: {0}")]
    Io(#[from] std::io::Error),
    #[error("gguf: byte 0: magic must be \"GGUF\", found {found:02x?}")]
    BadMagic { found: [u8; 4] },
    #[error("gguf: byte {offset}: version must be 2 or 3, found {version}")]
    UnsupportedVersion { offset: u64, version: u32 },
    #[error("gguf: byte {offset}: truncated: {need} bytes needed, {available} left")]
    Truncated {
        offset: u64,
        need: u64,
        available: u64,
    },
    #[error(
        "gguf: byte {offset}: {count} metadata entries cannot fit in the {available} bytes left"
    )]
    TooManyKvs {
        offset: u64,
        count: u64,
        available: u64,
    },
    #[error("gguf: byte {offset}: {count} tensor infos cannot fit in the {available} bytes left")]
    TooManyTensors {
        offset: u64,
        count: u64,
        available: u64,
    },
    #[error("gguf: byte {offset}: string of {len} bytes runs past the {available} bytes left")]
    StringOutOfBounds {
        offset: u64,
        len: u64,
        available: u64,
    },
    #[error(
        "gguf: byte {offset}: array of {len} {elem} values cannot fit in the {available} bytes left"
    )]
    ArrayOutOfBounds {
        offset: u64,
        len: u64,
        elem: ValueType,
        available: u64,
    },
    #[error("gguf: byte {offset}: string is not valid UTF-8")]
    InvalidUtf8 { offset: u64 },
    #[error("gguf: byte {offset}: unknown metadata value type {type_id}")]
    UnknownValueType { offset: u64, type_id: u32 },
    #[error("gguf: byte {offset}: bool must be 0 or 1, found {byte}")]
    InvalidBool { offset: u64, byte: u8 },
    #[error("gguf: byte {offset}: arrays nested deeper than {max} levels")]
    NestingTooDeep { offset: u64, max: usize },
    #[error("gguf: byte {offset}: duplicate metadata key {key:?}")]
    DuplicateKey { offset: u64, key: String },
    #[error("gguf: byte {offset}: general.alignment must be a u32, found {found}")]
    AlignmentType { offset: u64, found: ValueType },
    #[error(
        "gguf: byte {offset}: general.alignment must be a non-zero power of two, found {value}"
    )]
    AlignmentNotPowerOfTwo { offset: u64, value: u32 },
    #[error("gguf: byte {offset}: duplicate tensor name {name:?}")]
    DuplicateTensor { offset: u64, name: String },
    #[error("gguf: byte {offset}: tensor {name:?} has {n_dims} dims, must have 1..=4")]
    BadDimCount {
        offset: u64,
        name: String,
        n_dims: u32,
    },
    #[error("gguf: byte {offset}: tensor {name:?} dim {axis} is 0, every dim must be > 0")]
    ZeroDim {
        offset: u64,
        name: String,
        axis: usize,
    },
    #[error("gguf: byte {offset}: tensor {name:?} element count overflows i64")]
    ElementCountOverflow { offset: u64, name: String },
    #[error("gguf: byte {offset}: tensor {name:?} has unknown ggml type id {type_id}")]
    UnknownTensorType {
        offset: u64,
        name: String,
        type_id: u32,
    },
    #[error(
        "gguf: byte {offset}: tensor {name:?} row of {row} elements is not a multiple of \
         the {ty} block size {block}"
    )]
    RowNotBlockMultiple {
        offset: u64,
        name: String,
        ty: GgmlType,
        row: u64,
        block: u64,
    },
    #[error("gguf: byte {offset}: tensor {name:?} byte size overflows u64")]
    ByteSizeOverflow { offset: u64, name: String },
    #[error(
        "gguf: byte {offset}: tensor {name:?} data offset {data_offset} is not a multiple of \
         the alignment {alignment}"
    )]
    MisalignedTensor {
        offset: u64,
        name: String,
        data_offset: u64,
        alignment: u64,
    },
    #[error(
        "gguf: byte {offset}: tensor {name:?} data [{start}, {end}) runs past the end of \
         the {file_len}-byte file"
    )]
    TensorOutOfBounds {
        offset: u64,
        name: String,
        start: u64,
        end: u64,
        file_len: u64,
    },
    #[error("gguf: byte {offset}: tensor {name:?} data overlaps tensor {other:?}")]
    TensorOverlap {
        offset: u64,
        name: String,
        other: String,
    },
    #[error("gguf: tensor {name:?} is not a tensor of this file")]
    ForeignTensor { name: String },
}

impl GgufError {
    /// The byte offset the error points at, where it has one.
    pub fn offset(&self) -> Option<u64> {
        use GgufError::*;
        match self {
            Io(_) | ForeignTensor { .. } => None,
            BadMagic { .. } => Some(0),
            UnsupportedVersion { offset, .. }
            | Truncated { offset, .. }
            | TooManyKvs { offset, .. }
            | TooManyTensors { offset, .. }
            | StringOutOfBounds { offset, .. }
            | ArrayOutOfBounds { offset, .. }
            | InvalidUtf8 { offset }
            | UnknownValueType { offset, .. }
            | InvalidBool { offset, .. }
            | NestingTooDeep { offset, .. }
            | DuplicateKey { offset, .. }
            | AlignmentType { offset, .. }
            | AlignmentNotPowerOfTwo { offset, .. }
            | DuplicateTensor { offset, .. }
            | BadDimCount { offset, .. }
            | ZeroDim { offset, .. }
            | ElementCountOverflow { offset, .. }
            | UnknownTensorType { offset, .. }
            | RowNotBlockMultiple { offset, .. }
            | ByteSizeOverflow { offset, .. }
            | MisalignedTensor { offset, .. }
            | TensorOutOfBounds { offset, .. }
            | TensorOverlap { offset, .. } => Some(*offset),
        }
    }

    /// Whether the error means the file ends before something it declares.
    pub fn is_truncation(&self) -> bool {
        use GgufError::*;
        matches!(
            self,
            Truncated { .. }
                | TooManyKvs { .. }
                | TooManyTensors { .. }
                | StringOutOfBounds { .. }
                | ArrayOutOfBounds { .. }
                | TensorOutOfBounds { .. }
        )
    }
}

impl From<GgufError> for ishizuki_core::Error {
    fn from(e: GgufError) -> Self {
        ishizuki_core::Error::Format(e.to_string())
    }
}
