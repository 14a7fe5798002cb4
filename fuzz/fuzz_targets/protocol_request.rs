//! Fuzz target for the daemon's request parser (docs/protocol.md "Fuzzing"):
//! every received line goes through `parse_request`, and a parsed reserve
//! request through `validate`, exactly as the daemon's server does. Neither
//! may panic, and whatever parses must serialize back to the same request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rtmgr_core::protocol::{parse_request, Op};

fuzz_target!(|line: &[u8]| {
    let Ok(req) = parse_request(line) else {
        return;
    };
    if let Op::Reserve(r) = &req.op {
        if let Ok(valid) = r.validate() {
            assert!(valid.demand.budget_ns <= valid.demand.deadline_ns);
            assert!(valid.demand.deadline_ns <= valid.demand.period_ns);
        }
    }
    let again = parse_request(req.to_line().trim_end().as_bytes())
        .expect("a parsed request serializes to a line that parses");
    assert_eq!(again, req);
});
