//! ishizuki-engine

pub mod sampler;
