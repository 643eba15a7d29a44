//! ishizuki: the command-line front end; the library part is shared with its tests.

pub mod fetch;
