//! `general.file_type`: llama.cpp's name for how a file was quantized (`llama_ftype`).
use super::GgufFile;

/// The ftype names llama.cpp's quantize tool writes, by id (ids it retired are absent).
const FILE_TYPES: &[(u64, &str)] = &[
    (0, "F32"),
    (1, "F16"),
    (2, "Q4_0"),
    (3, "Q4_1"),
    (7, "Q8_0"),
    (8, "Q5_0"),
    (9, "Q5_1"),
    (10, "Q2_K"),
    (11, "Q3_K_S"),
    (12, "Q3_K_M"),
    (13, "Q3_K_L"),
    (14, "Q4_K_S"),
    (15, "Q4_K_M"),
    (16, "Q5_K_S"),
    (17, "Q5_K_M"),
    (18, "Q6_K"),
    (19, "IQ2_XXS"),
    (20, "IQ2_XS"),
    (21, "Q2_K_S"),
    (22, "IQ3_XS"),
    (23, "IQ3_XXS"),
    (24, "IQ1_S"),
    (25, "IQ4_NL"),
    (26, "IQ3_S"),
    (27, "IQ3_M"),
    (28, "IQ2_S"),
    (29, "IQ2_M"),
    (30, "IQ4_XS"),
    (31, "IQ1_M"),
    (32, "BF16"),
    (36, "TQ1_0"),
    (37, "TQ2_0"),
    (38, "MXFP4_MOE"),
];

pub fn file_type_name(id: u64) -> Option<&'static str> {
    FILE_TYPES.iter().find(|(i, _)| *i == id).map(|(_, n)| *n)
}

impl GgufFile {
    /// The file's quantization: `general.file_type` by name, else the tensor type holding the
    /// most bytes (as `Q4_K`).
    pub fn quantization(&self) -> String {
        let named = self.get_u64("general.file_type").and_then(file_type_name);
        if let Some(name) = named {
            return name.to_string();
        }
        let mut bytes_by_type: Vec<(&str, u64)> = Vec::new();
        for t in &self.tensors {
            match bytes_by_type.iter_mut().find(|(n, _)| *n == t.ty.name()) {
                Some((_, b)) => *b += t.n_bytes,
                None => bytes_by_type.push((t.ty.name(), t.n_bytes)),
            }
        }
        let dominant = bytes_by_type.into_iter().max_by_key(|(_, b)| *b);
        dominant.map_or("unknown", |(n, _)| n).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_ids_have_llama_cpp_names() {
        assert_eq!(file_type_name(15), Some("Q4_K_M"));
        assert_eq!(file_type_name(3), Some("Q4_1"));
        assert_eq!(file_type_name(4), None);
    }
}
