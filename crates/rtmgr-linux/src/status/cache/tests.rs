//! `cache_allocation` on fake trees: no resctrl at all (this machine's
//! case), mountable, mounted with its CLOS and ways, and what a daemon
//! config's rt_cache_share would do in each.

use super::*;
use crate::fake::FakeMachine;

fn put(m: &FakeMachine, p: &str, s: &str) {
    let path = m.root().join(p.trim_start_matches('/'));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, s).unwrap();
}

const FILESYSTEMS: &str = "nodev\tsysfs\nnodev\tproc\nnodev\tcgroup2\n";

fn mounted(m: &FakeMachine) {
    put(
        m,
        "/proc/filesystems",
        &format!("{FILESYSTEMS}nodev\tresctrl\n"),
    );
    put(
        m,
        "/proc/cpuinfo",
        "processor\t: 0\nflags\t\t: fpu cat_l3 rdt_a\n",
    );
    put(
        m,
        "/sys/fs/resctrl/schemata",
        "    MB:0=100\n    L3:0=fffff;1=fffff\n",
    );
    put(m, "/sys/fs/resctrl/info/L3/cbm_mask", "fffff\n");
    put(m, "/sys/fs/resctrl/info/L3/min_cbm_bits", "1\n");
    put(m, "/sys/fs/resctrl/info/L3/num_closids", "16\n");
}

#[test]
fn no_resctrl_says_so_clearly_with_what_the_daemon_would_do() {
    let m = FakeMachine::new(2).build();
    put(&m, "/proc/filesystems", FILESYSTEMS);
    put(&m, "/proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu sse2\n");
    let host = m.host();
    let c = cache_allocation_with(&host, Some(Ok(Some(0.5))));
    assert_eq!((c.resctrl, c.num_closids, c.ways), ("absent", None, None));
    let i = cache_item(&c);
    assert_eq!(i.verdict, Verdict::Warn);
    assert!(
        i.value
            .starts_with("not available: no resctrl filesystem in this kernel")
            && i.value.contains("no cat_l3 / rdt_a flag")
            && i.value.contains("rt_cache_share 0.5 cannot be done here"),
        "{i:?}"
    );
    assert!(i.why.contains("share the whole L3"), "{i:?}");
    let none = cache_item(&cache_allocation_with(&host, None));
    assert!(
        none.value
            .contains("no daemon config at /etc/rtmgr/rtmgr.toml"),
        "{none:?}"
    );
    // The kernel has it, the CPU not.
    put(
        &m,
        "/proc/filesystems",
        &format!("{FILESYSTEMS}nodev\tresctrl\n"),
    );
    let c = cache_allocation_with(&host, Some(Ok(None)));
    assert_eq!(c.resctrl, "no-cpu-support");
    let i = cache_item(&c);
    assert!(
        i.value.contains("offers no L3 cache allocation")
            && i.value.contains("sets no [resources] rt_cache_share"),
        "{i:?}"
    );
}

#[test]
fn mountable_resctrl_names_the_mount_command() {
    let m = FakeMachine::new(2).build();
    put(
        &m,
        "/proc/filesystems",
        &format!("{FILESYSTEMS}nodev\tresctrl\n"),
    );
    put(
        &m,
        "/proc/cpuinfo",
        "processor\t: 0\nflags\t\t: fpu cat_l3\n",
    );
    let c = cache_allocation_with(&m.host(), Some(Ok(None)));
    assert_eq!(
        (c.resctrl, c.cpu_flags.clone()),
        ("mountable", vec!["cat_l3".to_string()])
    );
    let i = cache_item(&c);
    assert_eq!(i.verdict, Verdict::Warn);
    assert!(
        i.value.contains("mount -t resctrl resctrl /sys/fs/resctrl"),
        "{i:?}"
    );
}

#[test]
fn mounted_resctrl_gives_clos_ways_and_the_daemon_s_split() {
    let m = FakeMachine::new(2).build();
    mounted(&m);
    let host = m.host();
    let c = cache_allocation_with(&host, Some(Ok(Some(0.25))));
    assert_eq!(
        (
            c.resctrl,
            c.num_closids,
            c.ways,
            c.min_cbm_bits,
            c.domains.clone()
        ),
        ("mounted", Some(16), Some(20), Some(1), vec![0, 1])
    );
    let i = cache_item(&c);
    assert_eq!(i.verdict, Verdict::Ok);
    assert!(
        i.value.starts_with("resctrl mounted at /sys/fs/resctrl: L3 allocation with 16 CLOS, 20 ways (cbm_mask fffff, at least 1 per group), 2 domain(s)")
            && i.value.contains("rt_cache_share 0.25 would give L3: RT CPUs and clients 5 of 20 ways"),
        "{i:?}"
    );
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["num_closids"], 16);
    assert_eq!(json["resctrl"], "mounted");
    // A share this L3 cannot split: the daemon would not start.
    put(&m, "/sys/fs/resctrl/info/L3/cbm_mask", "1\n");
    let i = cache_item(&cache_allocation_with(&host, Some(Ok(Some(0.5)))));
    assert!(i.value.contains("would refuse to start"), "{i:?}");
}
