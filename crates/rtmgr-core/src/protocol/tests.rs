//! The parser: round trips, one error per kind of malformed input, and
//! (proptest) no input makes it panic.

use super::*;
use proptest::prelude::*;

fn reserve() -> ReserveRequest {
    let mut r = ReserveRequest::new(4_000_000, 1_000_000);
    r.class = "rt1:40".into();
    r.cpu = Some(1);
    r.threads = vec![123, 124];
    r.irq = Some(IrqRef::Name("virtio3-rx".into()));
    r
}

#[test]
fn refusal_kinds_all_lists_each_kind_once() {
    // A new kind fails to compile here: place it last, and list it in ALL.
    let place = |k: RefusalKind| match k {
        RefusalKind::Admission => 0,
        RefusalKind::Policy => 1,
        RefusalKind::Rate => 2,
        RefusalKind::NotServed => 3,
        RefusalKind::Permission => 4,
        RefusalKind::Irq => 5,
        RefusalKind::Resource => 6,
    };
    for (i, k) in RefusalKind::ALL.into_iter().enumerate() {
        assert_eq!(place(k), i, "{k:?}");
    }
}

#[test]
fn requests_round_trip() {
    for op in [
        Op::Reserve(reserve()),
        Op::Release { id: 7 },
        Op::List,
        Op::Status,
    ] {
        let line = Request::new(op.clone()).to_line();
        assert!(line.ends_with('\n') && line.contains("\"v\":1"), "{line}");
        let back = parse_request(line.trim_end().as_bytes()).unwrap();
        assert_eq!(back.op, op);
    }
}

#[test]
fn each_kind_of_bad_input_has_its_code() {
    let code = |s: &str| parse_request(s.as_bytes()).unwrap_err().code;
    assert_eq!(code("{\"v\":1,\"op\":\"list\""), ErrorCode::BadJson);
    assert_eq!(code("[1,2]"), ErrorCode::BadJson);
    assert_eq!(code("{\"op\":\"list\"}"), ErrorCode::UnsupportedVersion);
    assert_eq!(
        code("{\"v\":3,\"op\":\"list\"}"),
        ErrorCode::UnsupportedVersion
    );
    assert_eq!(
        code("{\"v\":\"1\",\"op\":\"list\"}"),
        ErrorCode::UnsupportedVersion
    );
    assert_eq!(
        code("{\"v\":1,\"op\":\"format_disk\"}"),
        ErrorCode::UnknownOp
    );
    assert_eq!(code("{\"v\":1}"), ErrorCode::BadRequest);
    assert_eq!(
        code("{\"v\":1,\"op\":\"reserve\",\"period_ns\":\"4ms\",\"budget_ns\":1}"),
        ErrorCode::BadRequest
    );
    assert_eq!(
        code("{\"v\":1,\"op\":\"reserve\",\"period_ns\":4,\"budget_ns\":1,\"evil\":true}"),
        ErrorCode::BadRequest
    );
    assert_eq!(
        code("{\"v\":1,\"op\":\"release\",\"id\":-1}"),
        ErrorCode::BadRequest
    );
    let big = format!(
        "{{\"v\":1,\"op\":\"list\",\"x\":\"{}\"}}",
        "a".repeat(MAX_MESSAGE)
    );
    assert_eq!(code(&big), ErrorCode::TooLarge);
    assert_eq!(
        parse_request(&[0xff, 0xfe]).unwrap_err().code,
        ErrorCode::BadJson
    );
}

#[test]
fn validation_errors_and_resource_fields() {
    let mut r = reserve();
    assert!(r.validate().is_ok());
    r.deadline_ns = Some(5_000_000);
    assert!(matches!(r.validate(), Err(reserve::Invalid::Error(_))));
    let mut r = reserve();
    r.class = "linux".into();
    assert!(matches!(r.validate(), Err(reserve::Invalid::Error(_))));
    let mut r = reserve();
    r.threads = vec![5, 5];
    assert!(matches!(r.validate(), Err(reserve::Invalid::Error(_))));
    let mut r = reserve();
    r.memlock_bytes = Some(1 << 20);
    r.io_class = Some("rt".into());
    r.cache_share = Some(0.25);
    let v = r.validate().unwrap();
    assert_eq!(
        (v.memlock_bytes, v.io_class, v.cache_share),
        (Some(1 << 20), Some(reserve::IoClass::Rt), Some(0.25))
    );
    r.io_class = Some("fast".into());
    assert!(matches!(r.validate(), Err(reserve::Invalid::Error(_))));
}

#[test]
fn the_builder_sets_the_resource_fields_as_the_wire_spells_them() {
    let r = ReserveRequest::new(4_000_000, 1_000_000)
        .with_class("rt1:30")
        .with_memlock(8 << 20)
        .with_io_class(IoClass::Be)
        .with_cache_share(0.5);
    let line = Request::new(Op::Reserve(r.clone())).to_line();
    for field in [
        "\"class\":\"rt1:30\"",
        "\"memlock_bytes\":8388608",
        "\"io_class\":\"be\"",
        "\"cache_share\":0.5",
    ] {
        assert!(line.contains(field), "{field} in {line}");
    }
    let v = r.validate().unwrap();
    assert_eq!(v.io_class, Some(IoClass::Be));
    let bad = ReserveRequest::new(4_000_000, 1_000_000).with_cache_share(1.5);
    assert!(matches!(bad.validate(), Err(reserve::Invalid::Error(_))));
}

#[test]
fn responses_round_trip() {
    let r = Response::refused(RefusalKind::Rate, "slow down");
    let back = parse_response(r.to_line().as_bytes()).unwrap();
    assert_eq!(back, r);
    let e = Response::error(ErrorCode::TooLarge, "x");
    assert!(e.to_line().contains("\"result\":\"error\""));
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        ".{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("v".to_string()),
                    Just("op".to_string()),
                    Just("period_ns".to_string()),
                    Just("budget_ns".to_string()),
                    Just("threads".to_string()),
                    Just("class".to_string()),
                    Just("irq".to_string()),
                    Just("deadline_ns".to_string()),
                    Just("cache_share".to_string()),
                    Just("name".to_string()),
                    "[a-z_]{1,8}"
                ],
                inner,
                0..6
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_request(&bytes);
    }

    /// Structured garbage with the right keys: parse and validate never
    /// panic, and whatever parses serializes back to the same request.
    #[test]
    fn arbitrary_json_never_panics_and_round_trips(mut v in json_value(), op in 0..5usize) {
        if let serde_json::Value::Object(m) = &mut v {
            m.insert("v".into(), 1.into());
            let ops = ["reserve", "release", "list", "status", "x"];
            m.insert("op".into(), ops[op].into());
        }
        let line = v.to_string();
        if let Ok(req) = parse_request(line.as_bytes()) {
            if let Op::Reserve(r) = &req.op {
                let _ = r.validate();
            }
            let again = parse_request(req.to_line().trim_end().as_bytes()).unwrap();
            prop_assert_eq!(again, req);
        }
    }
}

/// Found by the fuzz target (fuzz/): a float must parse to the value a
/// client wrote, so that the request a daemon logs or journals is the one
/// sent (serde_json's default float parser may be one ULP off).
#[test]
fn floats_parse_exactly_and_round_trip() {
    let line =
        br#"{"v":1,"op":"reserve","period_ns":1000000,"budget_ns":100000,"cache_share":0.231e085}"#;
    let req = parse_request(line).unwrap();
    let Op::Reserve(r) = &req.op else {
        panic!("a reserve request")
    };
    assert_eq!(r.cache_share, Some(0.231e085));
    let again = parse_request(req.to_line().trim_end().as_bytes()).unwrap();
    assert_eq!(again, req);
}

#[test]
fn a_request_for_an_existing_process_is_version_2_and_others_stay_version_1() {
    let own = Request::new(Op::Reserve(reserve()));
    assert_eq!(own.v, 1, "a new client still talks to a version 1 daemon");
    let other = ReserveRequest::new(4_000_000, 1_000_000).for_process(4242, vec![4243]);
    let line = Request::new(Op::Reserve(other.clone())).to_line();
    assert!(
        line.contains("\"v\":2") && line.contains("\"pid\":4242"),
        "{line}"
    );
    assert_eq!(
        parse_request(line.trim_end().as_bytes()).unwrap().op,
        Op::Reserve(other.clone())
    );
    let v = other.validate().unwrap();
    assert_eq!(
        v.target,
        Some(reserve::Target {
            pid: 4242,
            all_threads: false
        })
    );
    // Version 1 does not carry a pid: the client is told which version does.
    let v1 = line.replace("\"v\":2", "\"v\":1");
    let e = parse_request(v1.trim_end().as_bytes()).unwrap_err();
    assert_eq!(e.code, ErrorCode::UnsupportedVersion);
    assert!(
        e.message.contains("needs protocol version 2"),
        "{}",
        e.message
    );
    // An old client's request is answered in its version.
    let resp = Response::new(Reply::Released { id: 1 }).in_version(1);
    assert!(resp.to_line().contains("\"v\":1"));
    assert_eq!(
        parse_request(b"{\"v\":3,\"op\":\"list\"}")
            .unwrap_err()
            .code,
        ErrorCode::UnsupportedVersion
    );
}

#[test]
fn a_target_is_a_pid_with_threads_or_all_of_them() {
    let all = ReserveRequest::new(4_000_000, 1_000_000).for_all_threads_of(77);
    assert!(all.validate().unwrap().target.unwrap().all_threads);
    let bad = |r: ReserveRequest| matches!(r.validate(), Err(reserve::Invalid::Error(_)));
    let mut no_pid = ReserveRequest::new(4_000_000, 1_000_000);
    no_pid.all_threads = true;
    assert!(bad(no_pid));
    assert!(bad(
        ReserveRequest::new(4_000_000, 1_000_000).for_process(0, vec![])
    ));
    let mut both = all.clone();
    both.threads = vec![78];
    assert!(bad(both));
}

/// `pending` (and the status counters) are optional: absent when empty,
/// so an older client's reply is unchanged; a reply without them parses.
#[test]
fn pending_threads_are_sent_only_when_there_are_some() {
    let line = r#"{"v":1,"result":"granted","reservation":{"id":3,"pid":9,"uid":0,"name":null,"cpu":1,"class":"rt0","policy":"SCHED_DEADLINE","period_ns":10,"budget_ns":1,"deadline_ns":10,"threads":[9],"rttime_us":0,"memlock_bytes":0}}"#;
    let r = parse_response(line.as_bytes()).unwrap();
    let Reply::Granted { mut reservation } = r.reply.clone() else {
        panic!("{r:?}")
    };
    assert!(reservation.pending.is_empty());
    assert!(!r.to_line().contains("pending"));
    reservation.pending = vec![9];
    let with = Response::new(Reply::Granted { reservation });
    assert!(with.to_line().contains("\"pending\":[9]"));
    assert_eq!(parse_response(with.to_line().as_bytes()).unwrap(), with);
    let st: StatusInfo =
        serde_json::from_str(&serde_json::to_string(&StatusInfo::default()).unwrap()).unwrap();
    assert_eq!((st.pending_fallbacks, st.pending.len()), (0, 0));
}
