//! Weights loaded by the backend from the file: quantization belongs to the weight, never to
//! the model; norms and biases are backend buffers too.
use crate::config::TransformerConfig;
use crate::ModelError;
use ishizuki_core::{quant::dequantize_row, Backend, Buffer, LoadedWeight, WeightRole};
use ishizuki_core::{WeightSource, WeightView};
use ishizuki_formats::{GgufFile, TensorInfo};

pub struct LayerWeights {
    pub attn_norm: Buffer,              // (n_embd)
    pub wq: LoadedWeight,               // (n_head*head_dim, n_embd)
    pub wk: LoadedWeight,               // (n_head_kv*head_dim, n_embd)
    pub wv: LoadedWeight,               // (n_head_kv*head_dim, n_embd)
    pub wo: LoadedWeight,               // (n_embd, n_head*head_dim)
    pub bq: Option<Buffer>,             // (n_head*head_dim)
    pub bk: Option<Buffer>,             // (n_head_kv*head_dim)
    pub bv: Option<Buffer>,             // (n_head_kv*head_dim)
    pub q_norm: Option<Buffer>,         // (head_dim)
    pub k_norm: Option<Buffer>,         // (head_dim)
    pub post_attn_norm: Option<Buffer>, // (n_embd)
    pub ffn_norm: Buffer,               // (n_embd)
    pub w_gate: LoadedWeight,           // (n_ff, n_embd)
    pub w_up: LoadedWeight,             // (n_ff, n_embd)
    pub w_down: LoadedWeight,           // (n_embd, n_ff)
    pub post_ffn_norm: Option<Buffer>,  // (n_embd)
}

pub struct ModelWeights {
    pub tok_embd: LoadedWeight, // (n_vocab, n_embd)
    pub layers: Vec<LayerWeights>,
    pub out_norm: Buffer, // (n_embd)
    /// `None` when the output projection is tied to `tok_embd`.
    pub lm_head: Option<LoadedWeight>, // (n_vocab, n_embd)
}

struct Loader<'a> {
    file: &'a GgufFile,
    be: &'a dyn Backend,
}

impl Loader<'_> {
    fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.file.tensor(name)
    }

    /// A matrix with ggml dims `[n_in, n_out]`, loaded by the backend for `role`; its file
    /// pages leave the resident set as the backend finishes reading them (read again only if
    /// something still needs them), so loading holds one copy at a time.
    fn matrix(
        &self,
        name: &str,
        n_out: usize,
        n_in: usize,
        role: WeightRole,
    ) -> Result<LoadedWeight, ModelError> {
        let Some(info) = self.info(name) else {
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
        let src = WeightSource {
            name,
            view: WeightView::new(info.ty, n_out, n_in, self.file.tensor_data(info)),
            owner: self.file.owner(),
            role,
        };
        let file = self.file;
        Ok(self
            .be
            .load_weight(&src, &mut |done| file.release_pages(done))?)
    }

    fn opt_matrix(
        &self,
        name: &str,
        n_out: usize,
        n_in: usize,
    ) -> Result<Option<LoadedWeight>, ModelError> {
        match self.info(name) {
            None => Ok(None),
            Some(_) => self.matrix(name, n_out, n_in, WeightRole::MATMUL).map(Some),
        }
    }

    /// A small 1-D tensor (norm weight, bias) dequantized to f32 into a backend buffer.
    fn vector(&self, name: &str, n: usize) -> Result<Buffer, ModelError> {
        self.opt_vector(name, n)?
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))
    }

    fn opt_vector(&self, name: &str, n: usize) -> Result<Option<Buffer>, ModelError> {
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
        Ok(Some(self.be.load_vector(&out)?))
    }
}

/// Loads every weight of `c` from `file` into `be`.
pub fn load_weights(
    file: &GgufFile,
    c: &TransformerConfig,
    be: &dyn Backend,
) -> Result<ModelWeights, ModelError> {
    let l = Loader { file, be };
    let (e, q, kv) = (c.n_embd, c.q_dim(), c.kv_dim());
    let m = WeightRole::MATMUL;
    let layers = (0..c.n_layer)
        .map(|i| {
            let n = |s: &str| format!("blk.{i}.{s}");
            Ok(LayerWeights {
                attn_norm: l.vector(&n("attn_norm.weight"), e)?,
                wq: l.matrix(&n("attn_q.weight"), q, e, m)?,
                wk: l.matrix(&n("attn_k.weight"), kv, e, m)?,
                wv: l.matrix(&n("attn_v.weight"), kv, e, m)?,
                wo: l.matrix(&n("attn_output.weight"), e, q, m)?,
                bq: l.opt_vector(&n("attn_q.bias"), q)?,
                bk: l.opt_vector(&n("attn_k.bias"), kv)?,
                bv: l.opt_vector(&n("attn_v.bias"), kv)?,
                q_norm: l.opt_vector(&n("attn_q_norm.weight"), c.head_dim)?,
                k_norm: l.opt_vector(&n("attn_k_norm.weight"), c.head_dim)?,
                post_attn_norm: l.opt_vector(&n("post_attention_norm.weight"), e)?,
                ffn_norm: l.vector(&n("ffn_norm.weight"), e)?,
                w_gate: l.matrix(&n("ffn_gate.weight"), c.n_ff, e, m)?,
                w_up: l.matrix(&n("ffn_up.weight"), c.n_ff, e, m)?,
                w_down: l.matrix(&n("ffn_down.weight"), e, c.n_ff, m)?,
                post_ffn_norm: l.opt_vector(&n("post_ffw_norm.weight"), e)?,
            })
        })
        .collect::<Result<Vec<_>, ModelError>>()?;
    check_layer_slots(c, &layers)?;
    let lm_head = l.opt_matrix("output.weight", c.n_vocab, e)?;
    // a tied output projection multiplies by the embedding table
    let embd_role = match lm_head {
        Some(_) => WeightRole::EMBED,
        None => WeightRole::BOTH,
    };
    Ok(ModelWeights {
        tok_embd: l.matrix("token_embd.weight", c.n_vocab, e, embd_role)?,
        layers,
        out_norm: l.vector("output_norm.weight", e)?,
        lm_head,
    })
}

impl ModelWeights {
    /// Memory the backend holds for the weights beyond the mapped file.
    pub fn backend_bytes(&self) -> usize {
        let layers = self.layers.iter().flat_map(|l| {
            [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down].map(|w| w.bytes)
        });
        let head = self.lm_head.as_ref().map_or(0, |w| w.bytes);
        layers.sum::<usize>() + head + self.tok_embd.bytes
    }

    /// The output projection: `lm_head`, or the embedding table when tied.
    pub fn head(&self) -> &LoadedWeight {
        self.lm_head.as_ref().unwrap_or(&self.tok_embd)
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
