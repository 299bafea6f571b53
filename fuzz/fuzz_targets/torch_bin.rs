//! A PyTorch checkpoint (`pytorch_model.bin`: torch's zip of `data.pkl` and
//! raw storages) never panics, never allocates past a bound set by its own
//! size, never runs a global other than tensor storage, and every tensor it
//! yields reads or fails cleanly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

use lmkit::checkpoint::torch_bin;

fuzz_target!(|data: &[u8]| {
    if let Ok(st) = torch_bin::from_bytes(data, Path::new("fuzz.bin")) {
        for name in st.names().to_vec() {
            let _ = st.tensor_f32(&name);
            let _ = st.shape(&name);
        }
    }
});
