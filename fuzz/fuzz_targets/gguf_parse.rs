//! Arbitrary bytes through the GGUF reader: it must answer with a typed error or a file
//! whose every tensor slice is in bounds, and re-writing an accepted file must be stable.
#![no_main]

use ishizuki_formats::{GgufFile, GgufWriter};
use libfuzzer_sys::fuzz_target;

/// Metadata and tensors of `f` written back through the writer.
fn rewrite(f: &GgufFile) -> Vec<u8> {
    let mut w = GgufWriter::new();
    for (key, value) in &f.metadata {
        w.add_metadata(key.clone(), value.clone())
            .expect("writer accepts what the reader accepted");
    }
    for t in &f.tensors {
        w.add_tensor(t.name.clone(), &t.dims, t.ty, f.tensor_data(t))
            .expect("writer accepts what the reader accepted");
    }
    w.to_bytes()
}

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::from_bytes(data) else {
        return;
    };
    for t in &f.tensors {
        let bytes = f.try_tensor_data(t).expect("validated tensor is readable");
        assert_eq!(bytes.len() as u64, t.n_bytes);
    }
    for (key, _) in &f.metadata {
        assert!(f.get(key).is_some());
    }
    // A valid alignment may be up to 2^31: re-writing would need that much padding.
    if f.alignment > 1 << 16 {
        return;
    }
    // Compared as bytes, not values: NaN floats are not equal to themselves.
    let once = rewrite(&f);
    let reread = GgufFile::from_bytes(once.clone()).expect("writer output parses");
    assert_eq!(rewrite(&reread), once);
});
