// Re-exports llguidance's C interface (llguidance.h) from a static library of a fixed name.
pub use llguidance::ffi::*;
