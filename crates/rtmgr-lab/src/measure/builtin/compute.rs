//! The built-in computing load (ARTiS §3.1 "computing load"; stress-ng `cpu`):
//! integer multiply, divide and xor-shift chains beside a float square root
//! and multiply-add, one busy thread per load CPU.

use super::Workers;
use std::hint::black_box;

pub(super) const NAME: &str = "int-float";
const OP: &str = "4096 rounds of 64-bit integer multiply, divide and xor-shift plus a float square root and multiply-add";

pub(super) fn start(instances: usize, w: &mut Workers) -> std::io::Result<()> {
    let ops = w.counter(NAME, OP);
    for i in 0..instances {
        let ops = ops.clone();
        w.spawn(NAME, move |env| {
            let (mut x, mut f) = (0x9e37_79b9_7f4a_7c15u64 ^ i as u64, 1.0f64);
            while !env.stopped() {
                (x, f) = rounds(x, f);
                ops.add(1);
            }
            black_box((x, f));
            Ok(())
        })?;
    }
    Ok(())
}

/// One operation: 4096 dependent rounds (nothing the compiler can skip).
pub(super) fn rounds(mut x: u64, mut f: f64) -> (u64, f64) {
    for _ in 0..4096 {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        x ^= x / ((x >> 40) | 1);
        x ^= x >> 29;
        f = f * 0.999_999 + ((x >> 11) as f64).sqrt();
    }
    (black_box(x), black_box(f))
}
