//! Per-round histograms in reports, written compactly (issue 28;
//! docs/report-schema.md "RoundFigures"; McKenney §3's full distributions,
//! kept per round for the bootstrap): a HistData's buckets as one string,
//! so evaluate's and ablate's per-round histograms cost hundreds of kB, not
//! ten MB of pretty-printed pairs. Serde `with` modules.

/// A HistData with its buckets as one string, `"value:count value:count …"`
/// (ascending, as `HistData::buckets`), so a report with per-round
/// histograms stays a few hundred kB instead of ten MB of pretty-printed pairs.
pub(crate) mod hist {
    use rtmgr_core::stats::HistData;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Compact {
        sigfig: u8,
        n: u64,
        min_ns: Option<i64>,
        max_ns: Option<i64>,
        sum_ns: i64,
        buckets: String,
    }

    pub fn serialize<S: Serializer>(h: &HistData, s: S) -> Result<S::Ok, S::Error> {
        let buckets: Vec<String> = h.buckets.iter().map(|(v, c)| format!("{v}:{c}")).collect();
        Compact {
            sigfig: h.sigfig,
            n: h.n,
            min_ns: h.min_ns,
            max_ns: h.max_ns,
            sum_ns: h.sum_ns,
            buckets: buckets.join(" "),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<HistData, D::Error> {
        let c = Compact::deserialize(d)?;
        let buckets = c
            .buckets
            .split_whitespace()
            .map(|p| {
                let (v, n) = p.split_once(':')?;
                Some((v.parse().ok()?, n.parse().ok()?))
            })
            .collect::<Option<Vec<(i64, u64)>>>()
            .ok_or_else(|| serde::de::Error::custom("buckets: expected \"value:count …\""))?;
        Ok(HistData {
            sigfig: c.sigfig,
            n: c.n,
            min_ns: c.min_ns,
            max_ns: c.max_ns,
            sum_ns: c.sum_ns,
            buckets,
        })
    }
}

/// `hist` for a list of histograms (`evaluate --ablate`'s rounds).
pub(crate) mod list {
    use rtmgr_core::stats::HistData;
    use serde::{Deserialize, Deserializer, Serializer};

    #[derive(serde::Serialize, Deserialize)]
    struct Wrap(#[serde(with = "super::hist")] HistData);

    pub fn serialize<S: Serializer>(hs: &[HistData], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(hs.iter().map(|h| Wrap(h.clone())))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<HistData>, D::Error> {
        Ok(Vec::<Wrap>::deserialize(d)?
            .into_iter()
            .map(|w| w.0)
            .collect())
    }
}

/// `hist` for an optional histogram.
pub(crate) mod opt {
    use rtmgr_core::stats::HistData;
    use serde::{Deserialize, Deserializer, Serializer};

    #[derive(serde::Serialize, Deserialize)]
    struct Wrap(#[serde(with = "super::hist")] HistData);

    pub fn serialize<S: Serializer>(h: &Option<HistData>, s: S) -> Result<S::Ok, S::Error> {
        match h {
            Some(h) => s.serialize_some(&Wrap(h.clone())),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<HistData>, D::Error> {
        Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
    }
}
