//! Model file formats over mmap. Knows nothing about backends.
pub mod gguf;

pub use gguf::{
    GgufError, GgufFile, GgufWriteError, GgufWriter, TensorAt, TensorInfo, Value, ValueType,
};
