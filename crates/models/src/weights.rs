//! Weights as stored in the file: quantization belongs to the `Weight`, never to the model.
use crate::config::TransformerConfig;
use crate::ModelError;
use ishizuki_core::{quant::dequantize_row, Backend, PackedWeight, WeightView};
use ishizuki_formats::{GgufFile, TensorAt, TensorInfo};
use std::sync::Arc;

/// A 2-D matrix in the mapped file: `n_out` rows of `n_in` elements, and the backend's packed
/// copy once `pack` made one.
#[derive(Clone, Debug)]
pub struct Weight {
    pub n_out: usize,
    pub n_in: usize,
    info: TensorInfo,
    /// Where its bytes lie in the file it was loaded from.
    at: TensorAt,
    packed: Option<Arc<PackedWeight>>,
}

impl Weight {
    pub fn view<'a>(&'a self, file: &'a GgufFile) -> WeightView<'a> {
        let packed = self.packed.as_deref();
        let data = match packed.and_then(|p| p.resident.as_deref()) {
            Some(copy) => copy,
            // its bytes in the file it came from; in another file, the tensor of its name
            None => file
                .data_at(self.at)
                .unwrap_or_else(|| file.tensor_data(&self.info)),
        };
        WeightView {
            packed,
            ..WeightView::new(self.info.ty, self.n_out, self.n_in, data)
        }
    }

    /// Lets `be` make its packed copy; the file's pages of this weight leave the resident set
    /// as they are packed (read again from the file only if something still needs them, like
    /// an embedding lookup), so packing holds one copy at a time. Returns the bytes the copy
    /// holds.
    pub fn pack(&mut self, be: &dyn Backend, file: &GgufFile) -> usize {
        let Some(packed) = be.pack(&self.view(file), &mut |done| file.release_pages(done)) else {
            return 0;
        };
        let bytes = packed.bytes;
        self.packed = Some(Arc::new(packed));
        bytes
    }

    pub fn ty(&self) -> ishizuki_core::GgmlType {
        self.info.ty
    }
}

pub struct LayerWeights {
    pub attn_norm: Vec<f32>,              // (n_embd)
    pub wq: Weight,                       // (n_head*head_dim, n_embd)
    pub wk: Weight,                       // (n_head_kv*head_dim, n_embd)
    pub wv: Weight,                       // (n_head_kv*head_dim, n_embd)
    pub wo: Weight,                       // (n_embd, n_head*head_dim)
    pub bq: Option<Vec<f32>>,             // (n_head*head_dim)
    pub bk: Option<Vec<f32>>,             // (n_head_kv*head_dim)
    pub bv: Option<Vec<f32>>,             // (n_head_kv*head_dim)
    pub q_norm: Option<Vec<f32>>,         // (head_dim)
    pub k_norm: Option<Vec<f32>>,         // (head_dim)
    pub post_attn_norm: Option<Vec<f32>>, // (n_embd)
    pub ffn_norm: Vec<f32>,               // (n_embd)
    pub w_gate: Weight,                   // (n_ff, n_embd)
    pub w_up: Weight,                     // (n_ff, n_embd)
    pub w_down: Weight,                   // (n_embd, n_ff)
    pub post_ffn_norm: Option<Vec<f32>>,  // (n_embd)
}

pub struct ModelWeights {
    pub tok_embd: Weight, // (n_vocab, n_embd)
    pub layers: Vec<LayerWeights>,
    pub out_norm: Vec<f32>, // (n_embd)
    /// `None` when the output projection is tied to `tok_embd`.
    pub lm_head: Option<Weight>, // (n_vocab, n_embd)
}

struct Loader<'a> {
    file: &'a GgufFile,
}

impl Loader<'_> {
    fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.file.tensor(name)
    }

    /// A matrix with ggml dims `[n_in, n_out]`.
    fn matrix(&self, name: &str, n_out: usize, n_in: usize) -> Result<Weight, ModelError> {
        let located = self
            .file
            .tensor_position(name)
            .and_then(|p| Some((self.file.tensors.get(p)?, self.file.locate(p)?)));
        let Some((info, at)) = located else {
            return Err(ModelError::MissingTensor(name.to_string()));
        };
        let want = [n_in as u64, n_out as u64];
        if info.dims != want {
            return Err(ModelError::TensorShape {
                name: name.to_string(),
                want: want.to_vec(),
                got: info.dims.clone(),
            });
        }
        Ok(Weight {
            n_out,
            n_in,
            info: info.clone(),
            at,
            packed: None,
        })
    }

    fn opt_matrix(
        &self,
        name: &str,
        n_out: usize,
        n_in: usize,
    ) -> Result<Option<Weight>, ModelError> {
        match self.info(name) {
            None => Ok(None),
            Some(_) => self.matrix(name, n_out, n_in).map(Some),
        }
    }

    /// A small 1-D tensor (norm weight, bias) dequantized to f32.
    fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, ModelError> {
        self.opt_vector(name, n)?
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))
    }

    fn opt_vector(&self, name: &str, n: usize) -> Result<Option<Vec<f32>>, ModelError> {
        let Some(info) = self.info(name) else {
            return Ok(None);
        };
        if info.dims != [n as u64] {
            return Err(ModelError::TensorShape {
                name: name.to_string(),
                want: vec![n as u64],
                got: info.dims.clone(),
            });
        }
        let mut out = vec![0f32; n];
        dequantize_row(info.ty, self.file.tensor_data(info), &mut out)?;
        Ok(Some(out))
    }
}

pub fn load_weights(file: &GgufFile, c: &TransformerConfig) -> Result<ModelWeights, ModelError> {
    let l = Loader { file };
    let (e, q, kv) = (c.n_embd, c.q_dim(), c.kv_dim());
    let layers = (0..c.n_layer)
        .map(|i| {
            let n = |s: &str| format!("blk.{i}.{s}");
            Ok(LayerWeights {
                attn_norm: l.vector(&n("attn_norm.weight"), e)?,
                wq: l.matrix(&n("attn_q.weight"), q, e)?,
                wk: l.matrix(&n("attn_k.weight"), kv, e)?,
                wv: l.matrix(&n("attn_v.weight"), kv, e)?,
                wo: l.matrix(&n("attn_output.weight"), e, q)?,
                bq: l.opt_vector(&n("attn_q.bias"), q)?,
                bk: l.opt_vector(&n("attn_k.bias"), kv)?,
                bv: l.opt_vector(&n("attn_v.bias"), kv)?,
                q_norm: l.opt_vector(&n("attn_q_norm.weight"), c.head_dim)?,
                k_norm: l.opt_vector(&n("attn_k_norm.weight"), c.head_dim)?,
                post_attn_norm: l.opt_vector(&n("post_attention_norm.weight"), e)?,
                ffn_norm: l.vector(&n("ffn_norm.weight"), e)?,
                w_gate: l.matrix(&n("ffn_gate.weight"), c.n_ff, e)?,
                w_up: l.matrix(&n("ffn_up.weight"), c.n_ff, e)?,
                w_down: l.matrix(&n("ffn_down.weight"), e, c.n_ff)?,
                post_ffn_norm: l.opt_vector(&n("post_ffw_norm.weight"), e)?,
            })
        })
        .collect::<Result<Vec<_>, ModelError>>()?;
    check_layer_slots(c, &layers)?;
    Ok(ModelWeights {
        tok_embd: l.matrix("token_embd.weight", c.n_vocab, e)?,
        layers,
        out_norm: l.vector("output_norm.weight", e)?,
        lm_head: l.opt_matrix("output.weight", c.n_vocab, e)?,
    })
}

impl ModelWeights {
    /// Every matrix a matmul reads, `tok_embd` too when it doubles as the output projection.
    fn matmul_weights(&mut self) -> impl Iterator<Item = &mut Weight> {
        let head = match &mut self.lm_head {
            Some(w) => w,
            None => &mut self.tok_embd,
        };
        let layers = self.layers.iter_mut().flat_map(|l| {
            [&mut l.wq, &mut l.wk, &mut l.wv, &mut l.wo]
                .into_iter()
                .chain([&mut l.w_gate, &mut l.w_up, &mut l.w_down])
        });
        layers.chain(std::iter::once(head))
    }

    /// Lets `be` pack every matmul weight; returns the bytes the packed copies hold.
    pub fn pack(&mut self, be: &dyn Backend, file: &GgufFile) -> usize {
        self.matmul_weights().map(|w| w.pack(be, file)).sum()
    }
}

/// The config's flags and the tensors present must agree, layer by layer.
fn check_layer_slots(c: &TransformerConfig, layers: &[LayerWeights]) -> Result<(), ModelError> {
    for (i, l) in layers.iter().enumerate() {
        let missing = |what: &str| Err(ModelError::MissingTensor(format!("blk.{i}.{what}")));
        if c.qk_norm && (l.q_norm.is_none() || l.k_norm.is_none()) {
            return missing("attn_q_norm/attn_k_norm.weight");
        }
        if c.post_norms && (l.post_attn_norm.is_none() || l.post_ffn_norm.is_none()) {
            return missing("post_attention_norm/post_ffw_norm.weight");
        }
    }
    Ok(())
}
