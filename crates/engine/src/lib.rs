//! ishizuki-engine
