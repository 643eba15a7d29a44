//! Reading a `TokenizerSpec` from GGUF metadata (llama.cpp's `tokenizer.ggml.*` keys).
use super::{SpmFlavor, TokenType, TokenizerError, TokenizerModel, TokenizerSpec};
use ishizuki_formats::{GgufFile, Value};

fn array<'a>(file: &'a GgufFile, key: &'static str) -> Result<Option<&'a [Value]>, TokenizerError> {
    match file.get(key) {
        None => Ok(None),
        Some(v) => v.as_array().map(Some).ok_or(TokenizerError::Invalid {
            key,
            rule: "not an array".into(),
        }),
    }
}

fn strings(file: &GgufFile, key: &'static str) -> Result<Vec<String>, TokenizerError> {
    let Some(values) = array(file, key)? else {
        return Ok(Vec::new());
    };
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| TokenizerError::Invalid {
                    key,
                    rule: format!("entry {i} is not a string"),
                })
        })
        .collect()
}

fn numbers<T>(
    file: &GgufFile,
    key: &'static str,
    convert: impl Fn(&Value) -> Option<T>,
) -> Result<Vec<T>, TokenizerError> {
    let Some(values) = array(file, key)? else {
        return Ok(Vec::new());
    };
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            convert(v).ok_or_else(|| TokenizerError::Invalid {
                key,
                rule: format!("entry {i} is not a number"),
            })
        })
        .collect()
}

fn token_type_code(v: &Value) -> Option<TokenType> {
    let code = match *v {
        Value::I32(c) => c as i64,
        Value::I64(c) => c,
        _ => v.as_u64()? as i64,
    };
    Some(TokenType::from_code(code))
}

fn id(file: &GgufFile, key: &'static str) -> Result<Option<u32>, TokenizerError> {
    match file.get(key) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(i) => Ok(u32::try_from(i).ok()),
            // Some converters write -1 for "none".
            None if matches!(v, Value::I32(-1) | Value::I64(-1)) => Ok(None),
            None => Err(TokenizerError::Invalid {
                key,
                rule: format!("{v:?} is not a token id"),
            }),
        },
    }
}

fn flag(file: &GgufFile, key: &'static str) -> Result<Option<bool>, TokenizerError> {
    match file.get(key) {
        None => Ok(None),
        Some(v) => v.as_bool().map(Some).ok_or(TokenizerError::Invalid {
            key,
            rule: format!("{v:?} is not a bool"),
        }),
    }
}

pub(super) fn spec_from_gguf(file: &GgufFile) -> Result<TokenizerSpec, TokenizerError> {
    let model_name = file
        .get("tokenizer.ggml.model")
        .and_then(Value::as_str)
        .ok_or(TokenizerError::Missing("tokenizer.ggml.model"))?;
    let model = match model_name {
        "gpt2" => TokenizerModel::Bpe,
        "llama" => TokenizerModel::Spm,
        other => return Err(TokenizerError::UnsupportedModel(other.to_owned())),
    };
    let architecture = file.get("general.architecture").and_then(Value::as_str);
    // transformers treats these architectures' SentencePiece files specially (see SpmFlavor).
    let spm_flavor = match architecture {
        Some("gemma" | "gemma2" | "gemma3") => SpmFlavor::Gemma,
        _ => SpmFlavor::Default,
    };
    let tokens = strings(file, "tokenizer.ggml.tokens")?;
    if tokens.is_empty() {
        return Err(TokenizerError::Missing("tokenizer.ggml.tokens"));
    }
    Ok(TokenizerSpec {
        model,
        pre: file
            .get("tokenizer.ggml.pre")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_owned(),
        tokens,
        token_types: numbers(file, "tokenizer.ggml.token_type", token_type_code)?,
        scores: numbers(file, "tokenizer.ggml.scores", |v| {
            v.as_f64().map(|f| f as f32)
        })?,
        merges: strings(file, "tokenizer.ggml.merges")?,
        bos_id: id(file, "tokenizer.ggml.bos_token_id")?,
        eos_id: id(file, "tokenizer.ggml.eos_token_id")?,
        unk_id: id(file, "tokenizer.ggml.unknown_token_id")?,
        eot_id: id(file, "tokenizer.ggml.eot_token_id")?,
        eom_id: id(file, "tokenizer.ggml.eom_token_id")?,
        add_bos: flag(file, "tokenizer.ggml.add_bos_token")?,
        add_eos: flag(file, "tokenizer.ggml.add_eos_token")?,
        add_space_prefix: flag(file, "tokenizer.ggml.add_space_prefix")?,
        spm_flavor,
    })
}
