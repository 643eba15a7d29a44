use super::CliResult;
use ishizuki_formats::{GgufFile, Value};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct InspectArgs {
    /// A GGUF file.
    file: PathBuf,
}

pub fn run(a: InspectArgs) -> CliResult {
    let f = GgufFile::open(&a.file)?;
    println!(
        "GGUF v{}, {} metadata keys, {} tensors, alignment {}",
        f.version,
        f.metadata.len(),
        f.tensors.len(),
        f.alignment
    );
    for (key, value) in &f.metadata {
        println!("{key} = {}", show(value));
    }
    println!(
        "{:<40} {:<8} {:>24} {:>12}",
        "tensor", "type", "dims", "bytes"
    );
    for t in &f.tensors {
        let dims = format!("{:?}", t.dims);
        println!(
            "{:<40} {:<8} {:>24} {:>12}",
            t.name,
            t.ty.name(),
            dims,
            t.n_bytes
        );
    }
    Ok(())
}

/// One line per value: long arrays show their length and first elements.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) if s.len() > 120 => format!(
            "{:?}… ({} bytes)",
            &s[..s.floor_char_boundary(120)],
            s.len()
        ),
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) if a.len() > 8 => {
            let head: Vec<String> = a.iter().take(5).map(show).collect();
            format!("[{}, …] ({} items)", head.join(", "), a.len())
        }
        Value::Array(a) => format!("[{}]", a.iter().map(show).collect::<Vec<_>>().join(", ")),
        other => format!("{other:?}")
            .split(['(', ')'])
            .nth(1)
            .unwrap_or_default()
            .to_string(),
    }
}
