//! `rtmgr evaluate`'s rounds (docs/architecture.md "Measuring": the
//! configurations interleaved, each round in the other order, so drift hits
//! them alike): each segment's partition, preemption model and live balancer
//! (ARTiS §2.3) set up and undone around it, its data added up per configuration.

use super::config::EvaluateConfig;
use super::configs::Config;
use super::prepare::Prepared;
use crate::experiment::background_balancer::{background_config, BackgroundBalancer};
use crate::experiment::long_run::{write_checkpoint, CHECKPOINT_EVERY};
use crate::experiment::segment_session::SegmentSession;
use crate::experiment::{progress_line, Context, Error, Reporter, Result};
use crate::load::ComponentMetrics;
use crate::measure::disturb;
use crate::measure::host_split::HostSplit;
use crate::measure::segment::{
    merged, merged_wakeups, rt_prepare, run_segment, Segment, SegmentPlan,
};
use crate::report::{BalancerSummary, Disturbance, Report, RoundFigures};
use crate::trace::Attribution;
use rtmgr_core::balance::Balancer;
use rtmgr_core::stats::Hist;
use rtmgr_linux::balance::guard::SampleFeed;
use rtmgr_linux::balance::lending_prior;
use rtmgr_linux::partition::{Applied, PartitionGuard};
use rtmgr_linux::Host;
use std::time::Instant;

/// One configuration's data over the rounds.
#[derive(Default)]
pub(super) struct Acc {
    pub(super) hist: Hist,
    pub(super) missed: u64,
    pub(super) metrics: Vec<Vec<ComponentMetrics>>,
    pub(super) segments: u32,
    pub(super) disturbance: Disturbance,
    /// The wake-ups alone; late samples the tracer explained; events it lost.
    pub(super) wakeups: Hist,
    pub(super) attributions: Vec<Attribution>,
    pub(super) events_lost: u64,
    /// What the live balancer did over the segments ("balanced").
    pub(super) balancer: Option<BalancerSummary>,
    /// The samples the host did not stall, and what it took.
    pub(super) host: HostSplit,
    /// Each round's figures, for the intervals.
    pub(super) rounds: Vec<RoundFigures>,
}

/// Builds the report so far from the data, the rounds done and why it is partial.
pub(super) type BuildReport<'a> = &'a dyn Fn(&[Acc], u32, Option<String>) -> Report;

/// What the rounds read.
pub(super) struct Rounds<'a> {
    pub host: &'a Host,
    pub cfg: &'a EvaluateConfig,
    pub prep: &'a Prepared,
    pub session: &'a SegmentSession,
    /// The report so far, from the data, the rounds done and why it is partial.
    pub build: BuildReport<'a>,
}

/// What the rounds carry from segment to segment.
pub(super) struct Tally {
    pub acc: Vec<Acc>,
    pub rounds_done: u32,
    /// The balancer's policy lives across the "balanced" segments (its
    /// lending controller, back-offs and baselines), and evaluate's probe is
    /// its latency guard: no second SCHED_FIFO thread on the RT CPU.
    feed: SampleFeed,
    policy: Option<Balancer>,
    t0: Instant,
    last_checkpoint: Instant,
}

impl Rounds<'_> {
    /// Run every round; the data, and the failure that ended them early.
    pub(super) fn run(&self, rep: &mut dyn Reporter) -> (Tally, Option<Error>) {
        let mut tally = Tally {
            acc: self.prep.configs.iter().map(|_| Acc::default()).collect(),
            rounds_done: 0,
            feed: SampleFeed::new(&self.prep.plan.rt),
            policy: None,
            t0: Instant::now(),
            last_checkpoint: Instant::now(),
        };
        for r in 0..self.prep.rounds {
            match self.round(r, &mut tally, rep) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => return (tally, Some(e)),
            }
        }
        (tally, None)
    }

    /// One round, every configuration once; false when stopped.
    fn round(&self, r: u32, tally: &mut Tally, rep: &mut dyn Reporter) -> Result<bool> {
        // Alternate the order so no configuration always runs first or last.
        let mut order: Vec<Config> = self.prep.configs.clone();
        if r % 2 == 1 {
            order.reverse();
        }
        let mut guard: Option<PartitionGuard> = None;
        for c in order {
            if self.session.stopped() {
                return Ok(false);
            }
            if c.partitioned() && guard.is_none() {
                rep.progress(
                    tally.t0.elapsed(),
                    &format!("round {} applying partition", r + 1),
                );
                let t = Instant::now();
                let applied = PartitionGuard::apply(self.host, &self.prep.plan, &self.prep.opts);
                tracing::debug!("partition apply took {:?}", t.elapsed());
                guard = Some(applied.context("apply the partition")?);
            }
            if !c.partitioned() {
                if let Some(g) = guard.take() {
                    g.reset().context("reset the partition")?;
                }
            }
            self.segment(r, c, guard.as_ref().map(|g| g.applied()), tally, rep)?;
        }
        if let Some(g) = guard.take() {
            g.reset().context("reset the partition")?;
        }
        if !self.session.stopped() {
            tally.rounds_done += 1;
        }
        Ok(true)
    }

    /// One configuration's segment: its preemption model and balancer set up
    /// and undone around it, its data added to its configuration's.
    fn segment(
        &self,
        r: u32,
        c: Config,
        applied: Option<&Applied>,
        tally: &mut Tally,
        rep: &mut dyn Reporter,
    ) -> Result<()> {
        let (host, cfg, prep) = (self.host, self.cfg, self.prep);
        let prepare = applied.map(|a| rt_prepare(host, a));
        let load = c.load_plan(cfg.load, &prep.program, &prep.online, &prep.plan);
        let i = prep.configs.iter().position(|x| *x == c).expect("listed");
        // The preemption model is switched for this segment only.
        let preempt = match c {
            Config::Preempt => Some(self.full_preemption()?),
            _ => None,
        };
        let seg_start = Instant::now();
        // The live balancer runs during the "balanced" segment.
        let balancer = match (c, applied) {
            (Config::Balanced, Some(a)) => Some(self.start_balancer(a, tally)),
            _ => None,
        };
        let plan = SegmentPlan {
            probe: &self.session.probe,
            load: load.as_ref(),
            applied,
            prepare,
            trace: cfg.trace,
            guard_feed: balancer.is_some().then(|| tally.feed.clone()),
        };
        let t0 = tally.t0;
        let seg = run_segment(host, plan, &self.session.stop, &mut |p, _| {
            let msg = format!(
                "round {}/{} {:6} {}",
                r + 1,
                prep.rounds,
                c.name(),
                progress_line(p)
            );
            rep.progress(t0.elapsed(), &msg)
        });
        tracing::debug!(
            "round {} {}: segment took {:?}",
            r + 1,
            c.name(),
            seg_start.elapsed()
        );
        if let Some(Err(e)) = preempt.map(|g| g.reset()) {
            return Err(Error::from(e).context("restore the preemption model"));
        }
        let mut live = None;
        if let Some(b) = balancer {
            let (report, p) = b.finish();
            tally.policy = p;
            live = Some(report);
        }
        let seg = match (seg, live) {
            (Ok(_), Some(Err(e))) => Err(Error::from(e).context("live balancer")),
            (Ok(seg), Some(Ok(report))) => {
                let now = rtmgr_sys::time::mono_ns();
                let sum = tally.acc[i]
                    .balancer
                    .get_or_insert_with(BalancerSummary::default);
                sum.add_run(&report, tally.policy.as_ref(), now);
                Ok(seg)
            }
            (seg, _) => seg.map_err(Error::from),
        };
        let seg = seg.map_err(|e| e.context(format!("round {} {}", r + 1, c.name())))?;
        add_segment(&mut tally.acc[i], r, seg);
        self.checkpoint(r, tally, rep);
        Ok(())
    }

    /// The full preemption model, for the preempt segment.
    fn full_preemption(&self) -> Result<PartitionGuard> {
        match PartitionGuard::apply(self.host, &self.prep.preempt_plan, &self.prep.opts) {
            Ok(g) if g.report().knobs.iter().all(|k| k.available) => Ok(g),
            Ok(g) => {
                let why = g.report().knobs.iter().flat_map(|k| k.lines.clone());
                Err(Error::Failed(format!(
                    "the kernel offered full preemption but refused it: {}",
                    why.collect::<Vec<_>>().join("; ")
                )))
            }
            Err(e) => Err(Error::from(e).context("switch to full preemption")),
        }
    }

    /// The live balancer, with the policy of the previous "balanced" segments.
    fn start_balancer(&self, applied: &Applied, tally: &mut Tally) -> BackgroundBalancer {
        let mut live = background_config(applied, Some(tally.feed.clone()));
        // The host test is the controller's prior (the first run only:
        // the policy's memory carries it on).
        live.read_host_cache = false;
        live.host_prior = match &tally.policy {
            None => self.prep.host_test.as_ref().map(lending_prior),
            Some(_) => None,
        };
        let p = tally
            .policy
            .take()
            .unwrap_or_else(|| Balancer::new(live.policy.clone()));
        BackgroundBalancer::start(self.host, applied, live, p)
    }

    /// Write the report so far, at most every `CHECKPOINT_EVERY`, when asked.
    fn checkpoint(&self, r: u32, tally: &mut Tally, rep: &mut dyn Reporter) {
        let Some(path) = &self.cfg.checkpoint else {
            return;
        };
        if tally.last_checkpoint.elapsed() < CHECKPOINT_EVERY {
            return;
        }
        tally.last_checkpoint = Instant::now();
        let why = format!(
            "in progress: round {} of {} (written every minute)",
            r + 1,
            self.prep.rounds
        );
        let report = (self.build)(&tally.acc, tally.rounds_done, Some(why));
        if let Err(e) = write_checkpoint(path, &report) {
            rep.note(&format!(
                "rtmgr: writing the report so far to {}: {e}",
                path.display()
            ));
        }
    }
}

/// Add one segment's data to its configuration's.
fn add_segment(a: &mut Acc, r: u32, seg: Segment) {
    let (h, m) = merged(&seg.threads);
    let split = HostSplit::of(&seg.threads);
    if !seg.interrupted {
        a.rounds.push(RoundFigures::of(
            r + 1,
            &h,
            m,
            Some((&split.guest, split.guest_missed)),
            seg.metrics.clone(),
        ));
    }
    a.hist.merge(&h);
    a.wakeups.merge(&merged_wakeups(&seg.threads));
    a.missed += m;
    a.host.merge(&split);
    if !seg.metrics.is_empty() {
        a.metrics.push(seg.metrics);
    }
    if !seg.interrupted {
        a.segments += 1;
    }
    if let Some(t) = seg.tail {
        a.attributions.extend(t.attributions);
        a.events_lost += t.stats.lost;
    }
    disturb::accumulate(&mut a.disturbance, &seg.disturbance);
}
