//! The kernel table: one module for the type-independent ops, compiled when the backend
//! starts, and one per weight type, compiled when the first weight of that type loads. Every
//! entry point's name carries its input and output precisions (`matmul_q4_k_f32_f32`: Q4_K
//! weights, f32 activations in, f32 out), and the cache key carries the whole source, so a
//! kernel is never taken for another type's.
use crate::compile::{cubin, Target};
use cudarc::driver::{CudaContext, CudaFunction};
use cudarc::nvrtc::Ptx;
use ishizuki_core::{Error, GgmlType, Result};
use std::path::Path;
use std::sync::Arc;

const COMMON: &str = include_str!("kernels/common.cuh");
const DEQUANT: &str = include_str!("kernels/dequant.cuh");
const MATMUL: &str = include_str!("kernels/matmul.cu");
const MATMUL_Q8: &str = include_str!("kernels/matmul_q8.cu");
const OPS: &str = include_str!("kernels/ops.cu");
const ATTENTION: &str = include_str!("kernels/attention.cu");
const SELECT: &str = include_str!("kernels/select.cu");

/// Weight types with CUDA kernels, with the name their entry points carry.
pub const WEIGHT_TYPES: [(GgmlType, &str); 16] = {
    use GgmlType::*;
    [
        (F32, "f32"),
        (F16, "f16"),
        (BF16, "bf16"),
        (Q4_0, "q4_0"),
        (Q4_1, "q4_1"),
        (Q5_0, "q5_0"),
        (Q5_1, "q5_1"),
        (Q8_0, "q8_0"),
        (Q2_K, "q2_k"),
        (Q3_K, "q3_k"),
        (Q4_K, "q4_k"),
        (Q5_K, "q5_k"),
        (Q6_K, "q6_k"),
        (Q8_K, "q8_k"),
        (IQ4_NL, "iq4_nl"),
        (IQ4_XS, "iq4_xs"),
    ]
};

/// The name a weight type's entry points carry, or None when it has no CUDA kernel.
pub fn weight_type_name(ty: GgmlType) -> Option<&'static str> {
    WEIGHT_TYPES.iter().find(|(t, _)| *t == ty).map(|(_, n)| *n)
}

/// `matmul_<type>_f32_f32` and `embed_<type>_f32`.
pub fn weight_kernel_names(ty: GgmlType) -> Option<(String, String)> {
    let n = weight_type_name(ty)?;
    Some((format!("matmul_{n}_f32_f32"), format!("embed_{n}_f32")))
}

/// `dequant_<type>_f16`: `ty` weight rows to f16 (the prefill GEMM's operand).
pub fn dequant_name(ty: GgmlType) -> Option<String> {
    Some(format!("dequant_{}_f16", weight_type_name(ty)?))
}

/// Weight types the prefill GEMM takes, dequantised to f16: f32 and bf16 keep the f32 kernel,
/// their range being wider than f16's.
pub fn f16_gemm_takes(ty: GgmlType) -> bool {
    !matches!(ty, GgmlType::F32 | GgmlType::BF16)
}

/// Types with a few-row matmul on 8-bit activations (`matmul_q8.cu`).
pub const Q8_ACTIVATION_TYPES: [GgmlType; 3] = [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0];

/// Weight steps a lane of the 8-bit matmul loads in one round (`Q8_AHEAD`).
pub const Q8_AHEAD: usize = 4;

/// Elements of a weight row one warp step of the 8-bit matmul covers (`Q8Frag`'s `per_step`
/// blocks of `elems`).
fn q8_step_elems(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q8_0 => 16 * 32,
        _ => 4 * 256,
    }
}

/// Warps sharing an output row of the 8-bit matmul (its `parts`): the fewest of 1, 2 and 4
/// whose shares of the row's steps fit one round of loads, so every lane of a short row has
/// all its loads in flight and a long row is split. A function of the weight alone, so a
/// row's sum is added in the same order whatever the batch.
pub fn q8_parts(ty: GgmlType, n_in: usize) -> usize {
    let steps = n_in.div_ceil(q8_step_elems(ty));
    [1, 2, 4]
        .into_iter()
        .find(|p| steps.div_ceil(*p) <= Q8_AHEAD)
        .unwrap_or(4)
}

/// Types whose rows the GPU keeps planar (`dequant.cuh`), repacked at load so lanes load 16
/// aligned bytes.
pub const PLANAR_TYPES: [GgmlType; 2] = [GgmlType::Q6_K, GgmlType::Q8_0];

/// `repack_<type>_planar_<type>`: ggml's rows of `ty` into its planar rows; None when the
/// type stays as ggml lays it out.
pub fn repack_name(ty: GgmlType) -> Option<String> {
    let n = weight_type_name(ty)?;
    PLANAR_TYPES
        .contains(&ty)
        .then(|| format!("repack_{n}_planar_{n}"))
}

/// Activation rows of the 8-bit kernels' instantiations (a launch takes the smallest that
/// holds its rows, up to the last, which passes over more in blocks of it).
pub const Q8_ROW_VARIANTS: [usize; 4] = [1, 2, 4, 8];

/// Query heads of one KV head that an attention block takes (`attention_f32_f16_g<G>`).
pub const ATTN_HEAD_VARIANTS: [usize; 4] = [1, 2, 4, 8];

/// `matmul_<type>_q8_f32_r<R>`: `ty` weights, 8-bit activations in, f32 out, R rows a block;
/// None when the type has no such kernel.
pub fn q8_matmul_name(ty: GgmlType, rows: usize) -> Option<String> {
    q8_name("matmul", ty, rows)
}

/// `matmul_glu_<type>_q8_f32_r<R>`: the FFN's gated product of two `ty` weights on 8-bit
/// activations, f32 out.
pub fn q8_glu_name(ty: GgmlType, rows: usize) -> Option<String> {
    q8_name("matmul_glu", ty, rows)
}

fn q8_name(kind: &str, ty: GgmlType, rows: usize) -> Option<String> {
    let n = weight_type_name(ty)?;
    (Q8_ACTIVATION_TYPES.contains(&ty) && Q8_ROW_VARIANTS.contains(&rows))
        .then(|| format!("{kind}_{n}_q8_f32_r{rows}"))
}

/// The 8-bit entry points of a type, one per row variant.
fn q8_entry_points(ty: GgmlType) -> String {
    let id = ty as u32;
    let mut src = String::new();
    for r in Q8_ROW_VARIANTS {
        let (Some(name), Some(glu)) = (q8_matmul_name(ty, r), q8_glu_name(ty, r)) else {
            return String::new();
        };
        src += &format!(
            "extern \"C\" __global__ void {name}(const u8* w0, const u8* w1, const u8* w2, \
             float* out0, float* out1, float* out2, int n0, int n1, int n2, const i8* xq, \
             const float* xd, int n_in, int rows, u64 row_bytes, int parts) {{ \
             matmul_q8_body<{id}, {r}>(w0, w1, w2, out0, out1, out2, n0, n1, n2, xq, xd, n_in, \
             rows, row_bytes, parts); }}\n\
             extern \"C\" __global__ void {glu}(const u8* wg, const u8* wu, const i8* xq, \
             const float* xd, float* out, int n_out, int n_in, int rows, u64 row_bytes, \
             int act) {{ matmul_glu_q8_body<{id}, {r}>(wg, wu, xq, xd, out, n_out, n_in, rows, \
             row_bytes, act); }}\n"
        );
    }
    src
}

/// The source of `ty`'s module: the shared header, the dequantiser, the templates and their
/// entry points for this type.
pub fn weight_module_source(ty: GgmlType) -> Option<String> {
    let (matmul, embed) = weight_kernel_names(ty)?;
    let dequant = dequant_name(ty)?;
    let id = ty as u32;
    let mut q8 = match q8_entry_points(ty) {
        e if e.is_empty() => e,
        e => format!("{MATMUL_Q8}\n{e}"),
    };
    if let Some(repack) = repack_name(ty) {
        q8 += &format!(
            "extern \"C\" __global__ void {repack}(const u8* src, u8* dst, int n_rows, int nb, \
             u64 src_row, u64 dst_row) {{ PDL_ENTER(); \
             repack_planar_body<{id}>(src, dst, n_rows, nb, src_row, dst_row); }}\n"
        );
    }
    Some(format!(
        "{COMMON}\n{DEQUANT}\n{MATMUL}\n{q8}\n\
         extern \"C\" __global__ void {matmul}(const u8* w, const float* x, float* out, \
         int n_out, int n_in, int rows, u64 row_bytes) {{ PDL_ENTER(); \
         matmul_body<{id}>(w, x, out, n_out, n_in, rows, row_bytes); }}\n\
         extern \"C\" __global__ void {embed}(const u8* table, const u32* tokens, float* out, \
         int n_in, u64 row_bytes) {{ PDL_ENTER(); embed_body<{id}>(table, tokens, out, n_in, row_bytes); }}\n\
         extern \"C\" __global__ void {dequant}(const u8* w, u16* out, int row0, int n_rows, \
         int n_in, u64 row_bytes) {{ PDL_ENTER(); dequant_f16_body<{id}>(w, out, row0, n_rows, n_in, row_bytes); }}\n"
    ))
}

/// The type-independent ops' module.
pub fn ops_module_source() -> String {
    format!("{COMMON}\n{OPS}\n{ATTENTION}\n{SELECT}\n")
}

/// Entry points of the ops module.
pub struct OpKernels {
    pub rms_norm: CudaFunction,
    pub add_bias: CudaFunction,
    pub add: CudaFunction,
    pub scale: CudaFunction,
    pub softcap: CudaFunction,
    pub glu: CudaFunction,
    pub rope: CudaFunction,
    pub rope_kv: CudaFunction,
    pub write_kv: CudaFunction,
    pub gather_rows: CudaFunction,
    pub argmax: CudaFunction,
    pub top_k: CudaFunction,
    /// One per ATTN_HEAD_VARIANTS entry: the query heads a block takes.
    pub attention: Vec<CudaFunction>,
    pub attention_merge: CudaFunction,
    pub quantize_q8: CudaFunction,
    pub convert_f16: CudaFunction,
}

/// A weight type's entry points.
pub struct WeightKernels {
    pub matmul: CudaFunction,
    pub embed: CudaFunction,
    /// The few-row matmul on 8-bit activations (up to three weights a launch), for the types
    /// that have one, and its gated pair: one per Q8_ROW_VARIANTS entry.
    pub matmul_q8: Option<Vec<CudaFunction>>,
    pub matmul_glu_q8: Option<Vec<CudaFunction>>,
    pub dequant_f16: CudaFunction,
    /// ggml's rows into planar ones, for the PLANAR_TYPES.
    pub repack: Option<CudaFunction>,
}

fn load(
    ctx: &Arc<CudaContext>,
    name: &str,
    source: &str,
    target: &Target,
    cache: Option<&Path>,
) -> Result<Arc<cudarc::driver::CudaModule>> {
    let image = cubin(name, source, target, cache)?;
    ctx.load_module(Ptx::from_binary(image))
        .map_err(|e| Error::Backend(format!("cuda: loading module {name}: {e}")))
}

fn function(m: &Arc<cudarc::driver::CudaModule>, name: &str) -> Result<CudaFunction> {
    m.load_function(name)
        .map_err(|e| Error::Backend(format!("cuda: kernel {name}: {e}")))
}

impl OpKernels {
    pub fn load(ctx: &Arc<CudaContext>, target: &Target, cache: Option<&Path>) -> Result<Self> {
        let m = load(ctx, "ops", &ops_module_source(), target, cache)?;
        Ok(OpKernels {
            rms_norm: function(&m, "rms_norm_f32_f32")?,
            add_bias: function(&m, "add_bias_f32")?,
            add: function(&m, "add_f32")?,
            scale: function(&m, "scale_f32")?,
            softcap: function(&m, "softcap_f32")?,
            glu: function(&m, "glu_f32")?,
            rope: function(&m, "rope_f32")?,
            rope_kv: function(&m, "rope_kv_f32_f16")?,
            write_kv: function(&m, "write_kv_f32_f16")?,
            gather_rows: function(&m, "gather_rows_f32")?,
            argmax: function(&m, "argmax_f32")?,
            top_k: function(&m, "top_k_f32")?,
            attention: ATTN_HEAD_VARIANTS
                .iter()
                .map(|g| function(&m, &format!("attention_f32_f16_g{g}")))
                .collect::<Result<_>>()?,
            attention_merge: function(&m, "attention_merge_f32")?,
            quantize_q8: function(&m, "quantize_q8_f32_i8")?,
            convert_f16: function(&m, "convert_f32_f16")?,
        })
    }
}

impl WeightKernels {
    /// `ty`'s module, or None when the type has no CUDA kernel.
    pub fn load(
        ctx: &Arc<CudaContext>,
        ty: GgmlType,
        target: &Target,
        cache: Option<&Path>,
    ) -> Result<Option<Self>> {
        let (Some(source), Some((matmul, embed))) =
            (weight_module_source(ty), weight_kernel_names(ty))
        else {
            return Ok(None);
        };
        let m = load(
            ctx,
            &format!("weights_{}", weight_type_name(ty).unwrap_or("")),
            &source,
            target,
            cache,
        )?;
        let variants = |name: fn(GgmlType, usize) -> Option<String>| {
            Q8_ROW_VARIANTS
                .iter()
                .map(|&r| name(ty, r).map(|n| function(&m, &n)))
                .collect::<Option<Result<Vec<_>>>>()
                .transpose()
        };
        let matmul_q8 = variants(q8_matmul_name)?;
        let matmul_glu_q8 = variants(q8_glu_name)?;
        Ok(Some(WeightKernels {
            matmul_glu_q8,
            matmul: function(&m, &matmul)?,
            embed: function(&m, &embed)?,
            matmul_q8,
            dequant_f16: function(&m, &dequant_name(ty).unwrap_or_default())?,
            repack: repack_name(ty).map(|n| function(&m, &n)).transpose()?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_point_names_its_precisions_and_its_source_differs_by_type() {
        let mut sources = std::collections::HashSet::new();
        for (ty, name) in WEIGHT_TYPES {
            let (matmul, embed) = weight_kernel_names(ty).unwrap();
            assert_eq!(matmul, format!("matmul_{name}_f32_f32"));
            assert_eq!(embed, format!("embed_{name}_f32"));
            let src = weight_module_source(ty).unwrap();
            assert!(src.contains(&format!("void {matmul}(")), "{ty}");
            assert!(src.contains(&format!("matmul_body<{}>", ty as u32)), "{ty}");
            for r in Q8_ROW_VARIANTS {
                let Some(q8) = q8_matmul_name(ty, r) else {
                    assert!(!Q8_ACTIVATION_TYPES.contains(&ty), "{ty}");
                    continue;
                };
                assert_eq!(q8, format!("matmul_{name}_q8_f32_r{r}"));
                assert!(src.contains(&format!("void {q8}(")), "{ty}");
                let body = format!("matmul_q8_body<{}, {r}>", ty as u32);
                assert!(src.contains(&body), "{ty}");
                let glu = q8_glu_name(ty, r).unwrap();
                assert_eq!(glu, format!("matmul_glu_{name}_q8_f32_r{r}"));
                assert!(src.contains(&format!("void {glu}(")), "{ty}");
            }
            assert!(q8_matmul_name(ty, 3).is_none(), "{ty}");
            match repack_name(ty) {
                Some(r) => assert!(src.contains(&format!("void {r}(")), "{ty}"),
                None => assert!(!PLANAR_TYPES.contains(&ty), "{ty}"),
            }
            assert!(sources.insert(src), "{ty}'s module is another type's");
        }
        assert!(weight_kernel_names(GgmlType::IQ2_XXS).is_none());
    }

    /// Every kernel waits for the one before it first: launched with PDL, one that did not
    /// could read its input while it is still being written. The 8-bit matmuls and the norm
    /// load weights first, rope and attention the forward's metadata (uploaded before its
    /// first kernel), and the 8-bit bodies wait once, before any activation.
    #[test]
    fn every_kernel_waits_for_its_predecessor_first() {
        let weights_first = [
            "matmul_q8_body<",
            "matmul_glu_q8_body<",
            "rms_norm_f32_f32",
            "rope_kv_f32_f16",
            "attention_heads<",
        ];
        for body in ["void matmul_q8_body(", "void matmul_glu_q8_body("] {
            let at = MATMUL_Q8.find(body).unwrap();
            let end = at + MATMUL_Q8[at..].find("\n}\n").unwrap();
            let src = &MATMUL_Q8[at + MATMUL_Q8[at..].find('{').unwrap()..end];
            assert_eq!(src.matches("PDL_ENTER();").count(), 1, "{body}");
            let before = &src[..src.find("PDL_ENTER();").unwrap()];
            assert!(!before.contains("xq") && !before.contains("out["), "{body}");
        }
        let mut sources = vec![ops_module_source()];
        sources.extend(
            WEIGHT_TYPES
                .iter()
                .filter_map(|&(ty, _)| weight_module_source(ty)),
        );
        let mut kernels = 0;
        for src in sources {
            for (at, _) in src.match_indices("__global__ void") {
                let body = &src[at..][src[at..].find('{').unwrap() + 1..];
                let name = src[at..].split('(').next().unwrap();
                let first = body.trim_start_matches(|c: char| c.is_whitespace() || c == '\\');
                let exempt = weights_first
                    .iter()
                    .any(|w| first.starts_with(w) || name.ends_with(w));
                assert!(first.starts_with("PDL_ENTER();") || exempt, "{name}");
                kernels += 1;
            }
        }
        assert!(kernels >= 88, "{kernels} kernels");
    }

    /// The host's step geometry of the 8-bit matmul is the kernels' (`Q8Frag` per type), and
    /// a row's warps cover its steps in one round when four can.
    #[test]
    fn q8_parts_follow_the_kernels_steps() {
        for ty in Q8_ACTIVATION_TYPES {
            let tag = format!("struct Q8Frag<T_{ty:?}> {{");
            let at = MATMUL_Q8.find(&tag).unwrap_or_else(|| panic!("{tag}"));
            let decl = &MATMUL_Q8[at..][..MATMUL_Q8[at..].find(';').unwrap()];
            let num = |key: &str| -> usize {
                let v = &decl[decl.find(key).unwrap() + key.len()..];
                v.split(|c: char| !c.is_ascii_digit())
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            };
            assert_eq!(
                num("per_step = ") * num("elems = "),
                q8_step_elems(ty),
                "{ty}"
            );
        }
        use GgmlType::{Q4_K, Q6_K, Q8_0};
        assert_eq!(q8_parts(Q4_K, 4096), 1);
        assert_eq!(q8_parts(Q4_K, 8192), 2);
        assert_eq!(q8_parts(Q6_K, 14336), 4);
        assert_eq!(q8_parts(Q8_0, 4096), 2);
        assert_eq!(q8_parts(Q8_0, 28672), 4);
        assert_eq!(q8_parts(Q4_K, 256), 1);
    }

    /// The grids the Rust side launches are the ones the kernels index by.
    #[test]
    fn the_kernels_shape_constants_are_the_launchers() {
        use crate::select::SELECT_THREADS;
        use crate::{
            ATTN_MAX_HEAD_DIM, ATTN_MAX_SPLITS, MATMUL_ROWS, MATMUL_WARPS, MERGE_THREADS,
            ROW_THREADS,
        };
        use ishizuki_core::backend::TOP_K_MAX;
        for (src, line) in [
            (MATMUL, format!("#define MATMUL_ROWS {MATMUL_ROWS}\n")),
            (MATMUL, format!("#define MATMUL_WARPS {MATMUL_WARPS}\n")),
            (MATMUL_Q8, format!("#define Q8_WARPS {MATMUL_WARPS}\n")),
            (MATMUL_Q8, format!("#define Q8_AHEAD {Q8_AHEAD}\n")),
            (
                ATTENTION,
                format!("#define ATTN_MAX_DIM {ATTN_MAX_HEAD_DIM}\n"),
            ),
            (
                ATTENTION,
                format!("#define ATTN_MAX_SPLITS {ATTN_MAX_SPLITS}\n"),
            ),
            (ATTENTION, format!("#define ATTN_THREADS {ROW_THREADS}\n")),
            (SELECT, format!("#define SELECT_THREADS {SELECT_THREADS}\n")),
            (SELECT, format!("#define SELECT_MAX_K {TOP_K_MAX}\n")),
            (
                ATTENTION,
                format!("#define MERGE_THREADS {MERGE_THREADS}\n"),
            ),
        ] {
            assert!(src.contains(&line), "a kernel lacks {line:?}");
        }
    }

    /// Every module compiles for Hopper wherever NVRTC loads (no GPU needed); CI installs it
    /// from PyPI, elsewhere this skips unless ISHIZUKI_REQUIRE_NVRTC is set.
    #[test]
    fn every_module_compiles_with_nvrtc() {
        let nvrtc = match crate::compile::nvrtc_version() {
            Ok(v) => v,
            Err(e) => {
                assert!(std::env::var_os("ISHIZUKI_REQUIRE_NVRTC").is_none(), "{e}");
                eprintln!("skipped: {e}");
                return;
            }
        };
        let target = Target {
            arch: 90,
            nvrtc,
            defines: Vec::new(),
        };
        let mut modules = vec![("ops".to_string(), ops_module_source())];
        for (ty, name) in WEIGHT_TYPES {
            modules.push((format!("weights_{name}"), weight_module_source(ty).unwrap()));
        }
        for (name, source) in modules {
            let bin = cubin(&name, &source, &target, None).unwrap_or_else(|e| panic!("{e}"));
            assert!(bin.starts_with(b"\x7fELF"), "{name}: not a cubin");
        }
    }
}
