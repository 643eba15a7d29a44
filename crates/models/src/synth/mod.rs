//! Random-weight GGUF files of real architectures' shapes, quantized by our own quantizers with
//! llama.cpp's per-tensor recipe, so speed can be measured at sizes we have no weights for.
//! Weights are gaussian (std 0.02) rounded to f16, so an F16 file quantized by llama-quantize
//! and our quantized file start from the same values.
mod recipe;

pub use recipe::{tensor_type, Recipe, Role, Slot};

use ishizuki_core::quant::{f16_to_f32, f32_to_f16, quantize_row};
use ishizuki_core::GgmlType;
use ishizuki_formats::{GgufWriteError, GgufWriter, Value};
use std::path::Path;

/// A model shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Preset {
    pub name: &'static str,
    pub arch: &'static str,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub n_vocab: usize,
    pub n_ctx: usize,
    pub rope_theta: f32,
    /// The token embedding doubles as the output head (no `output.weight`).
    pub tied: bool,
}

pub const PRESETS: &[Preset] = &[
    Preset {
        name: "llama3-8b",
        arch: "llama",
        n_embd: 4096,
        n_ff: 14336,
        n_layer: 32,
        n_head: 32,
        n_head_kv: 8,
        n_vocab: 128_256,
        n_ctx: 131_072,
        rope_theta: 500_000.0,
        tied: false,
    },
    Preset {
        name: "llama3-1b",
        arch: "llama",
        n_embd: 2048,
        n_ff: 8192,
        n_layer: 16,
        n_head: 32,
        n_head_kv: 8,
        n_vocab: 128_256,
        n_ctx: 131_072,
        rope_theta: 500_000.0,
        tied: true,
    },
    Preset {
        name: "llama-tiny",
        arch: "llama",
        n_embd: 256,
        n_ff: 768,
        n_layer: 4,
        n_head: 4,
        n_head_kv: 2,
        n_vocab: 1024,
        n_ctx: 4096,
        rope_theta: 10_000.0,
        tied: false,
    },
];

pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("synth: {0}")]
    Invalid(String),
    #[error(transparent)]
    Write(#[from] GgufWriteError),
    #[error(transparent)]
    Core(#[from] ishizuki_core::Error),
}

#[derive(Clone, Debug)]
pub struct SynthOptions {
    pub recipe: Recipe,
    pub seed: u64,
    /// Quantizing threads (0: all cores).
    pub threads: usize,
    /// Fewer layers than the preset (a slice of the shape for quick checks).
    pub n_layer: Option<usize>,
}

/// What was written: bytes, parameters, and the tensor count and bytes of each type.
#[derive(Debug, Default)]
pub struct SynthReport {
    pub file_bytes: u64,
    pub n_params: u64,
    pub types: Vec<(GgmlType, usize, u64)>,
}

/// One tensor of the file: name, ggml dims (dims[0] is the row), role, layer.
struct Planned {
    name: String,
    dims: Vec<u64>,
    role: Role,
    layer: usize,
}

fn plan_tensors(p: &Preset, n_layer: usize) -> Vec<Planned> {
    let head_dim = p.n_embd / p.n_head;
    let (e, ff, kv) = (
        p.n_embd as u64,
        p.n_ff as u64,
        (p.n_head_kv * head_dim) as u64,
    );
    let q = (p.n_head * head_dim) as u64;
    let mut out = Vec::new();
    let mut add = |name: String, dims: Vec<u64>, layer: usize| {
        let role = Role::of(&name, dims.len());
        out.push(Planned {
            name,
            dims,
            role,
            layer,
        });
    };
    add("token_embd.weight".into(), vec![e, p.n_vocab as u64], 0);
    for i in 0..n_layer {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        add(n("attn_norm"), vec![e], i);
        add(n("attn_q"), vec![e, q], i);
        add(n("attn_k"), vec![e, kv], i);
        add(n("attn_v"), vec![e, kv], i);
        add(n("attn_output"), vec![q, e], i);
        add(n("ffn_norm"), vec![e], i);
        add(n("ffn_gate"), vec![e, ff], i);
        add(n("ffn_up"), vec![e, ff], i);
        add(n("ffn_down"), vec![ff, e], i);
    }
    add("output_norm.weight".into(), vec![e], 0);
    if !p.tied {
        add("output.weight".into(), vec![e, p.n_vocab as u64], 0);
    }
    out
}

/// Writes a random-weight GGUF of `preset`'s shape to `path`.
pub fn synth(preset: &Preset, opts: &SynthOptions, path: &Path) -> Result<SynthReport, SynthError> {
    if preset.arch != "llama" {
        return Err(SynthError::Invalid(format!(
            "only the llama architecture is synthesized, not {}",
            preset.arch
        )));
    }
    let n_layer = opts.n_layer.unwrap_or(preset.n_layer);
    if n_layer == 0 || n_layer > preset.n_layer {
        return Err(SynthError::Invalid(format!(
            "layers must be 1..={}, got {n_layer}",
            preset.n_layer
        )));
    }
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        t => t,
    };
    let mut w = GgufWriter::new();
    add_metadata(&mut w, preset, n_layer, opts.recipe)?;
    let mut report = SynthReport::default();
    for (index, t) in plan_tensors(preset, n_layer).into_iter().enumerate() {
        let slot = Slot {
            layer: t.layer,
            n_layer,
            n_in: t.dims[0],
            tied_output: preset.tied,
        };
        let ty = tensor_type(opts.recipe, t.role, slot);
        let data = if t.role == Role::Vector {
            quantized(ty, &t.dims, threads, |_, row| row.fill(1.0))?
        } else {
            let seed = opts.seed ^ ((index as u64) << 40);
            quantized(ty, &t.dims, threads, |r, row| {
                gaussian_f16(seed ^ r as u64, row)
            })?
        };
        report.n_params += t.dims.iter().product::<u64>();
        tally(&mut report.types, ty, data.len() as u64);
        w.add_tensor(t.name, &t.dims, ty, data)?;
    }
    report.file_bytes = w.write_file(path)?;
    Ok(report)
}

fn tally(types: &mut Vec<(GgmlType, usize, u64)>, ty: GgmlType, bytes: u64) {
    match types.iter_mut().find(|(t, _, _)| *t == ty) {
        Some(e) => {
            e.1 += 1;
            e.2 += bytes;
        }
        None => types.push((ty, 1, bytes)),
    }
}

/// The tensor's bytes: each row filled by `fill(row_index, row)` and quantized to `ty`, rows
/// spread over `threads`.
fn quantized(
    ty: GgmlType,
    dims: &[u64],
    threads: usize,
    fill: impl Fn(usize, &mut [f32]) + Sync,
) -> Result<Vec<u8>, SynthError> {
    let n_in = dims[0] as usize;
    let rows: usize = dims[1..].iter().product::<u64>() as usize;
    let row_bytes = ty
        .row_bytes(n_in as u64)
        .ok_or_else(|| SynthError::Invalid(format!("{n_in} elements are not whole {ty} blocks")))?
        as usize;
    let mut data = vec![0u8; rows * row_bytes];
    let per = rows.div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        let workers: Vec<_> = data
            .chunks_mut(per * row_bytes)
            .enumerate()
            .map(|(c, chunk)| {
                let fill = &fill;
                s.spawn(move || -> Result<(), SynthError> {
                    let mut x = vec![0f32; n_in];
                    for (i, out) in chunk.chunks_exact_mut(row_bytes).enumerate() {
                        fill(c * per + i, &mut x);
                        quantize_row(ty, &x, out)?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|h| h.join().expect("a synth worker panicked"))
    })?;
    Ok(data)
}

/// splitmix64: a fast, well-mixed stream from any seed.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Approximately gaussian values (a sum of four uniforms), std 0.02, rounded to f16.
fn gaussian_f16(seed: u64, row: &mut [f32]) {
    let mut s = seed.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    for v in row.iter_mut() {
        let r = splitmix(&mut s);
        let u = |k: u32| ((r >> (16 * k)) & 0xFFFF) as f32 / 65536.0;
        let g = (u(0) + u(1) + u(2) + u(3) - 2.0) * 3f32.sqrt();
        *v = f16_to_f32(f32_to_f16(0.02 * g));
    }
}

fn add_metadata(
    w: &mut GgufWriter,
    p: &Preset,
    n_layer: usize,
    recipe: Recipe,
) -> Result<(), SynthError> {
    let a = p.arch;
    let head_dim = (p.n_embd / p.n_head) as u32;
    w.add_metadata("general.architecture", a)?;
    w.add_metadata("general.name", format!("synthetic {}", p.name))?;
    w.add_metadata("general.file_type", Value::U32(recipe.file_type()))?;
    w.add_metadata(format!("{a}.context_length"), Value::U32(p.n_ctx as u32))?;
    w.add_metadata(format!("{a}.embedding_length"), Value::U32(p.n_embd as u32))?;
    w.add_metadata(format!("{a}.block_count"), Value::U32(n_layer as u32))?;
    w.add_metadata(
        format!("{a}.feed_forward_length"),
        Value::U32(p.n_ff as u32),
    )?;
    w.add_metadata(
        format!("{a}.attention.head_count"),
        Value::U32(p.n_head as u32),
    )?;
    let kv_heads = Value::U32(p.n_head_kv as u32);
    w.add_metadata(format!("{a}.attention.head_count_kv"), kv_heads)?;
    w.add_metadata(format!("{a}.rope.freq_base"), Value::F32(p.rope_theta))?;
    w.add_metadata(format!("{a}.rope.dimension_count"), Value::U32(head_dim))?;
    let eps = Value::F32(1e-5);
    w.add_metadata(format!("{a}.attention.layer_norm_rms_epsilon"), eps)?;
    w.add_metadata(format!("{a}.vocab_size"), Value::U32(p.n_vocab as u32))?;
    add_vocab(w, p.n_vocab)
}

/// A sentencepiece-style vocabulary llama.cpp and we both load: `<unk>`, `<s>`, `</s>`, the 256
/// byte tokens, then distinct word pieces.
fn add_vocab(w: &mut GgufWriter, n_vocab: usize) -> Result<(), SynthError> {
    const SPECIALS: usize = 3;
    if n_vocab < SPECIALS + 256 + 1 {
        return Err(SynthError::Invalid(format!(
            "a vocabulary needs at least 260 tokens, got {n_vocab}"
        )));
    }
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![2i32, 3, 3]; // unknown, control, control
    for b in 0..256 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6); // byte
    }
    for i in tokens.len()..n_vocab {
        tokens.push(format!("\u{2581}w{i}"));
        types.push(1); // normal
    }
    let scores = (0..n_vocab).map(|i| Value::F32(-(i as f32))).collect();
    w.add_metadata("tokenizer.ggml.model", "llama")?;
    let tokens = tokens.into_iter().map(Value::String).collect();
    w.add_metadata("tokenizer.ggml.tokens", Value::Array(tokens))?;
    w.add_metadata("tokenizer.ggml.scores", Value::Array(scores))?;
    let types = types.into_iter().map(Value::I32).collect();
    w.add_metadata("tokenizer.ggml.token_type", Value::Array(types))?;
    w.add_metadata("tokenizer.ggml.unknown_token_id", Value::U32(0))?;
    w.add_metadata("tokenizer.ggml.bos_token_id", Value::U32(1))?;
    w.add_metadata("tokenizer.ggml.eos_token_id", Value::U32(2))?;
    Ok(())
}
