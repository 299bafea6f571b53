//! A safetensors file (header and data) never panics, never allocates past
//! its own size, and every tensor it lists reads or fails cleanly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lmkit::checkpoint::SafeTensors;

fuzz_target!(|data: &[u8]| {
    let Ok(st) = SafeTensors::from_bytes(data.to_vec(), "fuzz.safetensors") else {
        return;
    };
    for name in st.names().to_vec() {
        let _ = st.tensor_f32(&name);
        let _ = st.shape(&name);
    }
});
