//! ishizuki-cpu
