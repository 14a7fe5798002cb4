//! A small map keyed by CPU number: a Vec sorted by CPU. The policy builds a
//! few per-RT-CPU tables at every step (ARTiS §2.3's RT-load weighting and
//! run-queue lengths); a handful of entries each, where a B-tree allocates
//! and chases nodes for nothing. Same order and lookups as a BTreeMap.

/// CPU → `V`, iterated in CPU order.
#[derive(Debug, Clone)]
pub(super) struct CpuMap<V> {
    items: Vec<(u32, V)>,
}

impl<V> Default for CpuMap<V> {
    fn default() -> Self {
        CpuMap { items: Vec::new() }
    }
}

impl<V> FromIterator<(u32, V)> for CpuMap<V> {
    /// Like BTreeMap's: of several values for one CPU, the last one stays.
    fn from_iter<I: IntoIterator<Item = (u32, V)>>(iter: I) -> Self {
        let mut items: Vec<(u32, V)> = iter.into_iter().collect();
        items.sort_by_key(|&(cpu, _)| cpu); // stable: equal CPUs keep their order
                                            // In place: of a run of equal CPUs the first entry stays, holding
                                            // the last value.
        items.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(&mut later.1, &mut kept.1);
            }
            same
        });
        CpuMap { items }
    }
}

impl<V> CpuMap<V> {
    fn find(&self, cpu: u32) -> Result<usize, usize> {
        self.items.binary_search_by_key(&cpu, |&(c, _)| c)
    }

    pub(super) fn get(&self, cpu: u32) -> Option<&V> {
        self.find(cpu).ok().map(|i| &self.items[i].1)
    }

    pub(super) fn contains_key(&self, cpu: u32) -> bool {
        self.find(cpu).is_ok()
    }

    pub(super) fn get_mut(&mut self, cpu: u32) -> Option<&mut V> {
        self.find(cpu).ok().map(|i| &mut self.items[i].1)
    }

    /// The value of `cpu`, inserted as `V::default()` if absent.
    pub(super) fn or_default(&mut self, cpu: u32) -> &mut V
    where
        V: Default,
    {
        let i = match self.find(cpu) {
            Ok(i) => i,
            Err(i) => {
                self.items.insert(i, (cpu, V::default()));
                i
            }
        };
        &mut self.items[i].1
    }

    /// The same CPUs with `f` of each value: already in order, no sorting.
    pub(super) fn map_values<W>(&self, f: impl FnMut(&V) -> W) -> CpuMap<W> {
        let mut f = f;
        CpuMap {
            items: self.items.iter().map(|(c, v)| (*c, f(v))).collect(),
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &V)> {
        self.items.iter().map(|(c, v)| (*c, v))
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut V)> {
        self.items.iter_mut().map(|(c, v)| (*c, v))
    }
}

impl<V> std::ops::Index<u32> for CpuMap<V> {
    type Output = V;
    fn index(&self, cpu: u32) -> &V {
        self.get(cpu).expect("CPU in the map")
    }
}

#[cfg(test)]
mod tests {
    use super::CpuMap;
    use std::collections::BTreeMap;

    #[test]
    fn behaves_like_a_btree_map() {
        let pairs = [(5, 'a'), (2, 'b'), (5, 'c'), (9, 'd'), (2, 'e'), (0, 'f')];
        let m: CpuMap<char> = pairs.iter().copied().collect();
        let b: BTreeMap<u32, char> = pairs.iter().copied().collect();
        assert_eq!(
            m.iter().map(|(c, v)| (c, *v)).collect::<Vec<_>>(),
            b.iter().map(|(c, v)| (*c, *v)).collect::<Vec<_>>()
        );
        for cpu in 0..11 {
            assert_eq!(m.get(cpu), b.get(&cpu));
            assert_eq!(m.contains_key(cpu), b.contains_key(&cpu));
        }
        let mut m = m;
        let mut counts: CpuMap<usize> = m.map_values(|_| 0);
        *counts.or_default(7) += 1;
        *counts.or_default(5) += 2;
        *counts.get_mut(9).unwrap() += 3;
        assert_eq!(
            counts.iter().map(|(c, v)| (c, *v)).collect::<Vec<_>>(),
            [(0, 0), (2, 0), (5, 2), (7, 1), (9, 3)]
        );
        for (_, v) in m.iter_mut() {
            *v = 'z';
        }
        assert_eq!(m[9], 'z');
    }
}
