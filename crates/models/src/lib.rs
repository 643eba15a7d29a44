//! ishizuki-models
