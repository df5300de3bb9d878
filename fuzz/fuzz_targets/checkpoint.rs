//! Any bytes as a checkpoint file: refused with a message or parsed, never a panic, an abort
//! or an allocation the file's length fields ask for; what parses serialises back to itself.
//! The input is tried as it is and framed as a file with the right magic number and checksum,
//! so that the lengths and the header behind them are reached too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sim_core::checkpoint::Checkpoint;

fuzz_target!(|data: &[u8]| {
    let mut framed = b"ESOFLOW-CKPT\0\0\0\x01".to_vec();
    framed.extend_from_slice(data);
    let crc = crc32fast::hash(&framed);
    framed.extend_from_slice(&crc.to_le_bytes());
    for bytes in [data, &framed[..]] {
        if let Ok(c) = Checkpoint::from_bytes(bytes) {
            let again = Checkpoint::from_bytes(&c.to_bytes()).expect("a parsed checkpoint parses again");
            assert_eq!(again.to_bytes(), c.to_bytes(), "the same bytes again");
        }
    }
});
