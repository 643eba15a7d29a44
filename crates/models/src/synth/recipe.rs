//! Which type each tensor gets: llama.cpp's `llama_tensor_get_type` for the dense llama family,
//! so a synthetic Q4_K_M reads the bytes per token a real one does.
use ishizuki_core::GgmlType;

/// A whole-file quantization recipe (llama.cpp's `LLAMA_FTYPE_*`).
#[allow(non_camel_case_types)] // spelled as llama.cpp spells them
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recipe {
    F16,
    Q8_0,
    Q4_K_M,
}

impl Recipe {
    pub fn parse(s: &str) -> Option<Recipe> {
        match s.to_ascii_lowercase().as_str() {
            "f16" => Some(Recipe::F16),
            "q8_0" => Some(Recipe::Q8_0),
            "q4_k_m" => Some(Recipe::Q4_K_M),
            _ => None,
        }
    }

    /// `general.file_type` (llama.cpp's `llama_ftype`).
    pub fn file_type(self) -> u32 {
        match self {
            Recipe::F16 => 1,
            Recipe::Q8_0 => 7,
            Recipe::Q4_K_M => 15,
        }
    }

    fn default_type(self) -> GgmlType {
        match self {
            Recipe::F16 => GgmlType::F16,
            Recipe::Q8_0 => GgmlType::Q8_0,
            Recipe::Q4_K_M => GgmlType::Q4_K,
        }
    }
}

/// What a tensor is, as far as the recipe cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// 1-D tensors (norms, biases): always F32.
    Vector,
    TokenEmbd,
    Output,
    AttnQ,
    AttnK,
    AttnV,
    AttnOutput,
    FfnGate,
    FfnUp,
    FfnDown,
}

impl Role {
    /// The role of a tensor by its GGUF name (`blk.N.attn_v.weight`, `output.weight`, ...).
    pub fn of(name: &str, n_dims: usize) -> Role {
        if n_dims < 2 {
            return Role::Vector;
        }
        let base = name.rsplit_once(".weight").map_or(name, |(b, _)| b);
        let leaf = base.rsplit('.').next().unwrap_or(base);
        match leaf {
            "token_embd" => Role::TokenEmbd,
            "output" => Role::Output,
            "attn_q" => Role::AttnQ,
            "attn_k" => Role::AttnK,
            "attn_v" => Role::AttnV,
            "attn_output" => Role::AttnOutput,
            "ffn_gate" => Role::FfnGate,
            "ffn_up" => Role::FfnUp,
            "ffn_down" => Role::FfnDown,
            _ => Role::AttnQ, // any other matrix takes the recipe's default type
        }
    }
}

/// Where a tensor sits: its layer, the model's layer count, its row length, and whether the
/// token embedding doubles as the output head.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    pub layer: usize,
    pub n_layer: usize,
    pub n_in: u64,
    pub tied_output: bool,
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third between.
fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The type `recipe` gives a tensor of `role` at `slot`.
pub fn tensor_type(recipe: Recipe, role: Role, slot: Slot) -> GgmlType {
    let base = recipe.default_type();
    let k_quant = recipe == Recipe::Q4_K_M;
    let ty = match role {
        Role::Vector => return GgmlType::F32,
        Role::Output => output_type(base, slot.n_in),
        Role::TokenEmbd if slot.tied_output => output_type(base, slot.n_in),
        Role::AttnV | Role::FfnDown if k_quant && use_more_bits(slot.layer, slot.n_layer) => {
            GgmlType::Q6_K
        }
        _ => base,
    };
    fallback(ty, slot.n_in)
}

/// The output head: Q8_0 when rows are not whole 256-blocks of the base type, else Q6_K
/// unless the recipe is Q8_0 (or wider).
fn output_type(base: GgmlType, n_in: u64) -> GgmlType {
    if !n_in.is_multiple_of(base.block_size() as u64) {
        GgmlType::Q8_0
    } else if matches!(base, GgmlType::Q8_0 | GgmlType::F16) {
        base
    } else {
        GgmlType::Q6_K
    }
}

/// llama.cpp's fallback for rows that are not whole super-blocks: Q4_K -> Q5_0, Q6_K -> Q8_0,
/// and F16 when even that block does not divide the row.
fn fallback(ty: GgmlType, n_in: u64) -> GgmlType {
    if n_in.is_multiple_of(ty.block_size() as u64) {
        return ty;
    }
    let alt = match ty {
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        other => other,
    };
    if n_in.is_multiple_of(alt.block_size() as u64) {
        alt
    } else {
        GgmlType::F16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_bits_layers_match_llama_cpp() {
        // 32 layers: 0..4, 28..32, and (i - 4) % 3 == 2 between
        let got: Vec<usize> = (0..32).filter(|&i| use_more_bits(i, 32)).collect();
        let want = vec![0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31];
        assert_eq!(got, want);
    }

    #[test]
    fn roles_come_from_names() {
        assert_eq!(Role::of("blk.3.attn_v.weight", 2), Role::AttnV);
        assert_eq!(Role::of("blk.3.attn_norm.weight", 1), Role::Vector);
        assert_eq!(Role::of("output.weight", 2), Role::Output);
        assert_eq!(Role::of("token_embd.weight", 2), Role::TokenEmbd);
        assert_eq!(Role::of("blk.0.ffn_down.weight", 2), Role::FfnDown);
    }

    #[test]
    fn rows_off_the_block_fall_back() {
        let slot = |n_in| Slot {
            layer: 5,
            n_layer: 24,
            n_in,
            tied_output: false,
        };
        use GgmlType::*;
        assert_eq!(tensor_type(Recipe::Q4_K_M, Role::AttnQ, slot(896)), Q5_0);
        assert_eq!(tensor_type(Recipe::Q4_K_M, Role::AttnV, slot(896)), Q8_0);
        assert_eq!(tensor_type(Recipe::Q4_K_M, Role::Output, slot(896)), Q8_0);
        assert_eq!(tensor_type(Recipe::Q4_K_M, Role::AttnQ, slot(4096)), Q4_K);
        assert_eq!(tensor_type(Recipe::Q8_0, Role::Output, slot(4096)), Q8_0);
        assert_eq!(tensor_type(Recipe::Q8_0, Role::AttnQ, slot(48)), F16);
    }
}
