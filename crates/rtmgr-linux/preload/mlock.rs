//! LD_PRELOAD library for `rtmgr run --mlock` (McKenney §2.1: real-time
//! processes lock their memory). mlockall() does not survive exec, so this
//! tiny constructor runs it inside the new program before main(). Built by
//! rtmgr-linux's build.rs with plain rustc, no_std, a few KB.
#![no_std]

use core::panic::PanicInfo;

#[panic_handler]
fn panic(_: &PanicInfo) -> ! {
    loop {}
}

#[link(name = "c")]
extern "C" {
    fn mlockall(flags: i32) -> i32;
    fn write(fd: i32, buf: *const u8, n: usize) -> isize;
}

const MCL_CURRENT: i32 = 1;
const MCL_FUTURE: i32 = 2;

extern "C" fn rtmgr_mlock_init() {
    // SAFETY: plain system calls; the message is a static byte string.
    unsafe {
        if mlockall(MCL_CURRENT | MCL_FUTURE) != 0 {
            let m =
                b"rtmgr-mlock: mlockall failed: memory NOT locked (RLIMIT_MEMLOCK? not root?)\n";
            write(2, m.as_ptr(), m.len());
        }
    }
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = rtmgr_mlock_init;
