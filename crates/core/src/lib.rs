//! Types shared by every crate: ggml tensor types and their block layouts, the error type,
//! and the `Backend` trait the decoder is written against.
pub mod backend;
pub mod dtype;
pub mod error;
pub mod huge;
pub mod quant;

pub use backend::{
    Backend, Buffer, ForwardMeta, KvShape, KvStore, LoadedWeight, PackedWeight, WeightRole,
    WeightSource, WeightView,
};
pub use dtype::GgmlType;
pub use error::{Error, Result};
