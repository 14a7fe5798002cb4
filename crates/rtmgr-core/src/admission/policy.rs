//! Who may reserve what (rtkit's limits for unprivileged clients: maximum
//! priority, RLIMIT_RTTIME, request rate; McKenney §5 rule 2: caps on
//! utilisation): `[[client]]` rules of the daemon's TOML, first match wins.
//! Root is matched like any user: it gets what the config allows (the
//! default config has one rule, for root).

use serde::{Deserialize, Serialize};

/// One `[[client]]` rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientRule {
    /// User names or numeric uids ("*" = everyone).
    #[serde(default)]
    pub users: Vec<String>,
    /// Group names or numeric gids (primary or supplementary).
    #[serde(default)]
    pub groups: Vec<String>,
    /// Most utilisation one user may hold, summed over its reservations and CPUs.
    pub max_utilisation: Option<f64>,
    /// Highest SCHED_FIFO priority of a soft reservation (1..98).
    #[serde(default = "default_max_priority")]
    pub max_priority: u8,
    /// May ask for hard (SCHED_DEADLINE) reservations.
    #[serde(default = "yes")]
    pub hard: bool,
    /// May steer an IRQ to its reservation's CPU.
    #[serde(default)]
    pub irq: bool,
    /// RLIMIT_RTTIME (µs) set on the client: CPU time a SCHED_FIFO thread may
    /// use without blocking before SIGXCPU (soft) / SIGKILL (hard).
    #[serde(default = "default_rttime_us")]
    pub rttime_us: u64,
    /// RLIMIT_MEMLOCK (bytes) set on the client so it can mlockall.
    #[serde(default = "default_memlock")]
    pub memlock_bytes: u64,
    /// Most reservations one user may hold at once.
    #[serde(default = "default_max_reservations")]
    pub max_reservations: u32,
    /// Requests (reserve and release) per burst, and the burst length.
    #[serde(default = "default_per_burst")]
    pub requests_per_burst: u32,
    #[serde(default = "default_burst_s")]
    pub burst_s: u32,
}

fn default_max_priority() -> u8 {
    50
}
fn yes() -> bool {
    true
}
fn default_rttime_us() -> u64 {
    200_000
}
fn default_memlock() -> u64 {
    64 << 20
}
fn default_max_reservations() -> u32 {
    64
}
fn default_per_burst() -> u32 {
    100
}
fn default_burst_s() -> u32 {
    10
}

impl ClientRule {
    /// A rule for `users` with the defaults.
    pub fn for_users(users: &[&str]) -> Self {
        ClientRule {
            users: users.iter().map(|s| s.to_string()).collect(),
            groups: Vec::new(),
            max_utilisation: None,
            max_priority: default_max_priority(),
            hard: true,
            irq: false,
            rttime_us: default_rttime_us(),
            memlock_bytes: default_memlock(),
            max_reservations: default_max_reservations(),
            requests_per_burst: default_per_burst(),
            burst_s: default_burst_s(),
        }
    }

    fn matches(&self, p: &Peer) -> bool {
        let name_or_id = |names: &[String], id: u32, name: Option<&str>| {
            names
                .iter()
                .any(|n| n == "*" || n == &id.to_string() || Some(n.as_str()) == name)
        };
        name_or_id(&self.users, p.uid, p.user.as_deref())
            || p.groups
                .iter()
                .any(|(gid, name)| name_or_id(&self.groups, *gid, name.as_deref()))
    }
}

/// The policy: the rules and the cap over every client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientPolicy {
    /// Most utilisation all clients together may hold (None: only the
    /// per-CPU admission caps apply).
    pub max_total_utilisation: Option<f64>,
    #[serde(default, rename = "client")]
    pub rules: Vec<ClientRule>,
}

impl Default for ClientPolicy {
    /// Root only, with the rule defaults plus priorities up to 98 and IRQs.
    fn default() -> Self {
        let mut root = ClientRule::for_users(&["root"]);
        root.max_priority = crate::class::RT1_MAX_PRIORITY;
        root.irq = true;
        ClientPolicy {
            max_total_utilisation: None,
            rules: vec![root],
        }
    }
}

/// Who is asking (from SO_PEERCRED and /proc).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Peer {
    pub uid: u32,
    pub user: Option<String>,
    /// (gid, name) of the primary and supplementary groups.
    pub groups: Vec<(u32, Option<String>)>,
}

impl Peer {
    pub fn label(&self) -> String {
        match &self.user {
            Some(n) => format!("user {n} (uid {})", self.uid),
            None => format!("uid {}", self.uid),
        }
    }
}

/// What a reserve request asks, as the policy weighs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ask {
    /// W/P times the number of threads.
    pub utilisation: f64,
    pub hard: bool,
    pub priority: Option<u8>,
    pub irq: bool,
}

/// What the user holds now.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Usage {
    pub user_utilisation: f64,
    pub user_reservations: u32,
    pub total_utilisation: f64,
}

/// Why the policy says no, with the numbers.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyRefusal {
    #[error("{0} may not reserve: no [[client]] rule of the daemon's config names the user or one of its groups")]
    NotAllowed(String),
    #[error("{who}: utilisation would be {would:.2} > {limit:.2} allowed per user")]
    UserUtilisation { who: String, would: f64, limit: f64 },
    #[error("all clients: utilisation would be {would:.2} > {limit:.2} allowed in total")]
    TotalUtilisation { would: f64, limit: f64 },
    #[error("{who}: SCHED_FIFO priority {asked} > {limit} allowed")]
    Priority { who: String, asked: u8, limit: u8 },
    #[error("{0}: hard (SCHED_DEADLINE) reservations are not allowed; ask for class rt1")]
    Hard(String),
    #[error("{0}: IRQ steering is not allowed")]
    Irq(String),
    #[error("{who}: {limit} reservations at once is the most allowed")]
    Count { who: String, limit: u32 },
}

/// The limits a grant sets on the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowance {
    pub rule: usize,
    pub rttime_us: u64,
    pub memlock_bytes: u64,
    pub requests_per_burst: u32,
    pub burst_s: u32,
}

impl ClientPolicy {
    /// The first rule naming this peer.
    pub fn rule_for(&self, p: &Peer) -> Option<(usize, &ClientRule)> {
        self.rules.iter().enumerate().find(|(_, r)| r.matches(p))
    }

    /// The rule's rate limit for this peer (None: not allowed at all).
    pub fn rate_for(&self, p: &Peer) -> Option<(u32, u32)> {
        self.rule_for(p)
            .map(|(_, r)| (r.requests_per_burst, r.burst_s))
    }

    /// May `p`, holding `usage`, make this request?
    pub fn decide(&self, p: &Peer, ask: &Ask, usage: &Usage) -> Result<Allowance, PolicyRefusal> {
        let who = p.label();
        let (i, r) = self
            .rule_for(p)
            .ok_or_else(|| PolicyRefusal::NotAllowed(who.clone()))?;
        if ask.hard && !r.hard {
            return Err(PolicyRefusal::Hard(who));
        }
        if let Some(asked) = ask.priority {
            if asked > r.max_priority {
                return Err(PolicyRefusal::Priority {
                    who,
                    asked,
                    limit: r.max_priority,
                });
            }
        }
        if ask.irq && !r.irq {
            return Err(PolicyRefusal::Irq(who));
        }
        if usage.user_reservations >= r.max_reservations {
            return Err(PolicyRefusal::Count {
                who,
                limit: r.max_reservations,
            });
        }
        if let Some(limit) = r.max_utilisation {
            let would = usage.user_utilisation + ask.utilisation;
            if would > limit + 1e-12 {
                return Err(PolicyRefusal::UserUtilisation { who, would, limit });
            }
        }
        if let Some(limit) = self.max_total_utilisation {
            let would = usage.total_utilisation + ask.utilisation;
            if would > limit + 1e-12 {
                return Err(PolicyRefusal::TotalUtilisation { would, limit });
            }
        }
        Ok(Allowance {
            rule: i,
            rttime_us: r.rttime_us,
            memlock_bytes: r.memlock_bytes,
            requests_per_burst: r.requests_per_burst,
            burst_s: r.burst_s,
        })
    }

    /// Values a config must not have.
    pub fn validate(&self) -> Result<(), String> {
        let bad_u = |u: Option<f64>| u.is_some_and(|u| !(u.is_finite() && u > 0.0));
        if bad_u(self.max_total_utilisation) {
            return Err("max_total_utilisation must be a number > 0".into());
        }
        for (i, r) in self.rules.iter().enumerate() {
            let n = i + 1;
            if r.users.is_empty() && r.groups.is_empty() {
                return Err(format!("[[client]] rule {n} names no user and no group"));
            }
            if bad_u(r.max_utilisation) {
                return Err(format!("[[client]] rule {n}: max_utilisation must be > 0"));
            }
            if !(1..=crate::class::RT1_MAX_PRIORITY).contains(&r.max_priority) {
                return Err(format!("[[client]] rule {n}: max_priority must be 1..98"));
            }
            if r.requests_per_burst == 0 || r.burst_s == 0 {
                return Err(format!(
                    "[[client]] rule {n}: requests_per_burst and burst_s must be > 0"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Peer {
        Peer {
            uid: 1000,
            user: Some("alice".into()),
            groups: vec![(1000, Some("alice".into())), (29, Some("audio".into()))],
        }
    }

    fn ask(u: f64) -> Ask {
        Ask {
            utilisation: u,
            hard: false,
            priority: Some(40),
            irq: false,
        }
    }

    #[test]
    fn default_policy_is_root_only() {
        let p = ClientPolicy::default();
        let e = p
            .decide(&alice(), &ask(0.1), &Usage::default())
            .unwrap_err();
        assert!(e
            .to_string()
            .contains("user alice (uid 1000) may not reserve"));
        let root = Peer {
            uid: 0,
            user: Some("root".into()),
            groups: vec![],
        };
        assert!(p.decide(&root, &ask(0.1), &Usage::default()).is_ok());
    }

    #[test]
    fn group_rule_limits_with_numbers() {
        let mut r = ClientRule::for_users(&[]);
        r.groups = vec!["audio".into()];
        r.max_utilisation = Some(0.5);
        r.hard = false;
        let p = ClientPolicy {
            max_total_utilisation: Some(1.0),
            rules: vec![r],
        };
        p.validate().unwrap();
        let used = Usage {
            user_utilisation: 0.4,
            user_reservations: 1,
            total_utilisation: 0.95,
        };
        let e = p.decide(&alice(), &ask(0.2), &used).unwrap_err();
        assert_eq!(
            e.to_string(),
            "user alice (uid 1000): utilisation would be 0.60 > 0.50 allowed per user"
        );
        let e = p.decide(&alice(), &ask(0.1), &used).unwrap_err();
        assert!(
            e.to_string().contains("1.05 > 1.00 allowed in total"),
            "{e}"
        );
        let mut hard = ask(0.01);
        hard.hard = true;
        assert!(matches!(
            p.decide(&alice(), &hard, &Usage::default()),
            Err(PolicyRefusal::Hard(_))
        ));
        let mut high = ask(0.01);
        high.priority = Some(60);
        assert!(p
            .decide(&alice(), &high, &Usage::default())
            .unwrap_err()
            .to_string()
            .contains("priority 60 > 50"));
    }
}
