//! ishizuki-text
