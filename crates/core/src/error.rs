use crate::dtype::GgmlType;

pub type Result<T> = std::result::Result<T, Error>;

/// Errors that cross crate boundaries. Format-specific parse errors live in their crate and
/// convert into `Error::Format`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("tensor type {0} is recognised but not supported for {1}")]
    UnsupportedType(GgmlType, &'static str),
    #[error("tensor `{tensor}` is {ty}, which the {backend} backend has no kernel for")]
    UnsupportedWeight {
        tensor: String,
        ty: GgmlType,
        backend: &'static str,
    },
    #[error("unknown ggml tensor type id {0}")]
    UnknownType(u32),
    #[error("shape mismatch: {0}")]
    Shape(String),
    #[error("{0}")]
    Format(String),
    #[error("model: {0}")]
    Model(String),
    #[error("prompt of {n_prompt} tokens does not fit the context of {n_ctx} tokens")]
    ContextOverflow { n_prompt: usize, n_ctx: usize },
    /// A backend's own failure (a device error, another backend's handle, out of memory).
    #[error("backend: {0}")]
    Backend(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}
