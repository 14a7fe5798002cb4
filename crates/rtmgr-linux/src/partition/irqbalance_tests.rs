//! The irqbalance knob against a fake irqbalance (crate::fake::irqbalance)
//! in a fake machine tree with an `irqbalance` process.

use super::*;
use crate::fake::FakeMachine;
use crate::partition::{apply, reset, ApplyOptions};

const PID: u32 = 500;
const JOURNAL: &str = "/run/rtmgr/journal.jsonl";

use crate::fake::irqbalance::Heard;

fn fake_irqbalance(m: &FakeMachine, ban: Option<&str>) -> std::sync::Arc<std::sync::Mutex<Heard>> {
    crate::fake::irqbalance::serve(m, PID, ban)
}

fn machine() -> FakeMachine {
    FakeMachine::new(2)
        .typical_tasks()
        .task(PID, "irqbalance")
        .build()
}

fn plan(host: &Host, mode: IrqbalanceMode) -> PartitionPlan {
    let cfg = rtmgr_core::partition::PartitionConfig {
        irqbalance: Some(mode),
        ..Default::default()
    };
    rtmgr_core::partition::validate(&cfg, Some(&CpuSet::single(1)), &cpus::online(host).unwrap())
        .unwrap()
}

fn opts() -> ApplyOptions {
    ApplyOptions {
        journal: JOURNAL.into(),
        replace: false,
    }
}

#[test]
fn the_running_irqbalance_is_found_by_name() {
    let m = machine();
    let ib = running(&m.host()).unwrap();
    assert_eq!(ib.pid, PID);
    assert_eq!(
        ib.socket,
        PathBuf::from("/run/irqbalance/irqbalance500.sock")
    );
    assert_eq!(
        running(&FakeMachine::new(2).typical_tasks().build().host()),
        None
    );
}

#[test]
fn apply_refuses_beside_irqbalance_and_changes_nothing() {
    let m = machine();
    let host = m.host();
    let heard = fake_irqbalance(&m, None);
    let err = apply(&host, &plan(&host, IrqbalanceMode::Refuse), &opts()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("irqbalance (pid 500) is running") && text.contains("--irqbalance ban"),
        "{text}"
    );
    assert!(!host.exists(JOURNAL), "refused before the journal");
    assert!(heard.lock().unwrap().commands.is_empty());
}

#[test]
fn ban_adds_the_rt_cpus_and_reset_gives_back_its_own_rules() {
    let m = machine();
    let host = m.host();
    let heard = fake_irqbalance(&m, None);
    let (_, report) = apply(&host, &plan(&host, IrqbalanceMode::Ban), &opts()).unwrap();
    let knob = report
        .knobs
        .iter()
        .find(|k| k.knob == KnobId::Irqbalance)
        .unwrap();
    assert!(knob.lines[0].contains("bans CPUs 1"), "{knob:?}");
    assert_eq!(
        Heard::wait_for(&heard, 2).commands,
        ["setup", "settings cpus 1"]
    );
    let rep = reset(&host, Path::new(JOURNAL)).unwrap();
    assert!(
        rep.notes.iter().any(|n| n.contains("settings cpus NULL")),
        "{rep:?}"
    );
    let h = Heard::wait_for(&heard, 3);
    assert_eq!(h.commands.last().unwrap(), "settings cpus NULL");
    assert_eq!(h.ban, None, "irqbalance follows its own rules again");
}

#[test]
fn a_ban_given_before_is_kept_and_restored_after_a_crash() {
    let m = machine();
    let host = m.host();
    let heard = fake_irqbalance(&m, Some("0"));
    apply(&host, &plan(&host, IrqbalanceMode::Ban), &opts()).unwrap();
    assert_eq!(
        Heard::wait_for(&heard, 2).ban,
        Some(CpuSet::parse_list("0-1").unwrap())
    );
    // After a kill -9 of the applier, reset works from the journal alone.
    let fresh = Host::fake(m.root());
    reset(&fresh, Path::new(JOURNAL)).unwrap();
    let h = Heard::wait_for(&heard, 3);
    assert_eq!(h.commands.last().unwrap(), "settings cpus 0");
    assert_eq!(h.ban, Some(CpuSet::single(0)));
}

#[test]
fn a_restarted_irqbalance_is_left_to_its_config() {
    let m = machine();
    let host = m.host();
    let heard = fake_irqbalance(&m, None);
    apply(&host, &plan(&host, IrqbalanceMode::Ban), &opts()).unwrap();
    // Another irqbalance under the same pid: a different start time.
    let stat = m.root().join(format!("proc/{PID}/stat"));
    let text = std::fs::read_to_string(&stat).unwrap();
    std::fs::write(&stat, text.replace(" 1500 ", " 9999 ")).unwrap();
    let rep = reset(&host, Path::new(JOURNAL)).unwrap();
    assert!(rep.notes.iter().any(|n| n.contains("is gone")), "{rep:?}");
    drop(Heard::wait_for(&heard, 2));
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(
        heard.lock().unwrap().commands.len(),
        2,
        "nothing sent to it"
    );
}

#[test]
fn ban_without_a_socket_refuses_with_the_config_variable() {
    let m = machine();
    let host = m.host();
    let err = apply(&host, &plan(&host, IrqbalanceMode::Ban), &opts()).unwrap_err();
    assert!(
        err.to_string().contains("IRQBALANCE_BANNED_CPULIST=1"),
        "{err}"
    );
    assert!(!host.exists(JOURNAL));
}

#[test]
fn its_default_ban_comes_from_its_environment_or_the_boot_isolation() {
    let m = machine();
    let host = m.host();
    assert!(its_default(&host, Some(PID)).is_empty());
    std::fs::write(
        m.root().join(format!("proc/{PID}/environ")),
        "LANG=C\0IRQBALANCE_BANNED_CPULIST=1\0",
    )
    .unwrap();
    assert_eq!(its_default(&host, Some(PID)), CpuSet::single(1));
}
