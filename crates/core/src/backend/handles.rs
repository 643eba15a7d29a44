//! Opaque handles to what a backend owns: activation buffers, loaded weights, KV storage and a
//! forward's metadata. The decoder holds them and passes them back; only the backend that
//! made one looks inside (a handle of another backend is an error, never a reinterpretation).
use crate::{Error, GgmlType, Result};
use std::any::Any;
use std::sync::Arc;

type Inner = Box<dyn Any + Send + Sync>;

fn foreign(what: &str) -> Error {
    Error::Backend(format!("{what} was made by another backend"))
}

/// `len` f32s in a backend's memory (an activation, a norm weight or a bias); ops say how
/// many of them they use, so a buffer may be larger than one forward needs.
pub struct Buffer {
    len: usize,
    inner: Inner,
}

impl Buffer {
    pub fn new(len: usize, inner: impl Any + Send + Sync) -> Buffer {
        Buffer {
            len,
            inner: Box::new(inner),
        }
    }

    /// Capacity in f32s.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The backend's own representation, or an error for another backend's buffer.
    pub fn get<T: 'static>(&self) -> Result<&T> {
        self.inner.downcast_ref().ok_or_else(|| foreign("a buffer"))
    }

    pub fn get_mut<T: 'static>(&mut self) -> Result<&mut T> {
        self.inner.downcast_mut().ok_or_else(|| foreign("a buffer"))
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({} f32)", self.len)
    }
}

/// What a weight is loaded for: the backend keeps the layouts those ops read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightRole {
    /// Multiplied by activations (`matmul`).
    pub matmul: bool,
    /// Rows gathered by `embed`.
    pub embed: bool,
}

impl WeightRole {
    pub const MATMUL: WeightRole = WeightRole {
        matmul: true,
        embed: false,
    };
    pub const EMBED: WeightRole = WeightRole {
        matmul: false,
        embed: true,
    };
    pub const BOTH: WeightRole = WeightRole {
        matmul: true,
        embed: true,
    };
}

/// A 2-D weight loaded by a backend, its kernel chosen at load: `n_out` rows of `n_in`
/// elements of `ty`.
pub struct LoadedWeight {
    pub ty: GgmlType,
    pub n_out: usize,
    pub n_in: usize,
    /// Memory the backend holds for it beyond the mapped file (a packed or device copy).
    pub bytes: usize,
    inner: Inner,
}

impl LoadedWeight {
    pub fn new(
        ty: GgmlType,
        n_out: usize,
        n_in: usize,
        bytes: usize,
        inner: impl Any + Send + Sync,
    ) -> LoadedWeight {
        LoadedWeight {
            ty,
            n_out,
            n_in,
            bytes,
            inner: Box::new(inner),
        }
    }

    pub fn get<T: 'static>(&self) -> Result<&T> {
        self.inner.downcast_ref().ok_or_else(|| foreign("a weight"))
    }
}

impl std::fmt::Debug for LoadedWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ty, o, i, b) = (self.ty, self.n_out, self.n_in, self.bytes);
        write!(f, "LoadedWeight({ty} {o}x{i}, {b} bytes held)")
    }
}

/// Where a weight's bytes come from: a view of them and the owner that keeps them mapped, so a
/// backend that reads them in place (the CPU) may hold on to them.
pub struct WeightSource<'a> {
    /// The tensor's name, for errors.
    pub name: &'a str,
    pub view: super::WeightView<'a>,
    /// Keeps `view.data` valid and unmoved while it lives.
    pub owner: Arc<dyn Any + Send + Sync>,
    pub role: WeightRole,
}

/// The KV cache of one sequence: `n_layer` layers of keys and values for `capacity`
/// positions of `n_head_kv` heads of `head_dim`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvShape {
    pub n_layer: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub capacity: usize,
}

impl KvShape {
    /// Elements of keys and values together, or None past the address space.
    pub fn n_elements(&self) -> Option<usize> {
        [
            self.n_layer,
            2,
            self.n_head_kv,
            self.head_dim,
            self.capacity,
        ]
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
    }
}

/// KV storage allocated by a backend; `models` keeps the bookkeeping (lengths, tokens).
pub struct KvStore {
    pub shape: KvShape,
    /// Memory it holds.
    pub bytes: usize,
    inner: Inner,
}

impl KvStore {
    pub fn new(shape: KvShape, bytes: usize, inner: impl Any + Send + Sync) -> KvStore {
        KvStore {
            shape,
            bytes,
            inner: Box::new(inner),
        }
    }

    pub fn get<T: 'static>(&self) -> Result<&T> {
        self.inner
            .downcast_ref()
            .ok_or_else(|| foreign("a KV cache"))
    }

    pub fn get_mut<T: 'static>(&mut self) -> Result<&mut T> {
        self.inner
            .downcast_mut()
            .ok_or_else(|| foreign("a KV cache"))
    }
}

/// One forward's metadata, uploaded once by `Backend::prepare` before its first op.
#[derive(Default)]
pub struct ForwardMeta {
    /// The tokens, one per row.
    pub tokens: Vec<u32>,
    /// Row r's position; rows are consecutive positions of one sequence.
    pub positions: Vec<u32>,
    /// The rows whose output (logits or argmax) the caller reads back, ascending.
    pub out_rows: Vec<u32>,
    /// Keys visible to the last row (its position + 1).
    pub n_kv: usize,
    /// The backend's copy (device memory, say), made by `prepare`.
    pub device: Option<Inner>,
}

impl ForwardMeta {
    /// A forward of `tokens` at positions `start..`, reading back rows `out_rows`.
    pub fn new(tokens: &[u32], start: usize, out_rows: Vec<u32>) -> ForwardMeta {
        let positions: Vec<u32> = (start..start + tokens.len()).map(|p| p as u32).collect();
        ForwardMeta {
            tokens: tokens.to_vec(),
            n_kv: start + tokens.len(),
            positions,
            out_rows,
            device: None,
        }
    }

    pub fn rows(&self) -> usize {
        self.tokens.len()
    }

    pub fn device<T: 'static>(&self) -> Result<&T> {
        let inner = self.device.as_ref().ok_or_else(|| {
            Error::Backend("a forward's metadata was used before `prepare`".into())
        })?;
        inner
            .downcast_ref()
            .ok_or_else(|| foreign("a forward's metadata"))
    }
}
