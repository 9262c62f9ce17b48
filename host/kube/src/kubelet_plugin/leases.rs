//! Who works on what: a claim is prepared or unprepared by one call at a
//! time (the kubelet retries a call that timed out while the first may
//! still be rolling back), and whatever else a driver's claims share is
//! held by one claim at a time (vp2p: an IOMMU group, as two claims may
//! hold devices of one group). Everything else runs at once; no lease is
//! needed to read the API server or sysfs.

use std::collections::BTreeSet;
use std::sync::{Condvar, Mutex};

use super::deadline::Deadline;

/// Keys in use, each by one holder at a time.
#[derive(Debug, Default)]
pub struct Leases<K: Ord + Clone> {
    held: Mutex<BTreeSet<K>>,
    freed: Condvar,
}

/// Keys held until dropped.
#[derive(Debug)]
pub struct Lease<'a, K: Ord + Clone> {
    leases: &'a Leases<K>,
    keys: Vec<K>,
}

impl<K: Ord + Clone> Leases<K> {
    /// No key held.
    pub fn new() -> Self {
        Self {
            held: Mutex::new(BTreeSet::new()),
            freed: Condvar::new(),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, BTreeSet<K>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds every key of `keys` at once, waiting while any is held by
    /// another, until `deadline`; `None` when it passed first. Taking all
    /// or none means two holders of overlapping sets never wait on each
    /// other in a circle.
    pub fn acquire(
        &self,
        keys: impl IntoIterator<Item = K>,
        deadline: Deadline,
    ) -> Option<Lease<'_, K>> {
        let keys: Vec<K> = keys
            .into_iter()
            .collect::<BTreeSet<K>>()
            .into_iter()
            .collect();
        let mut held = self.held();
        loop {
            if keys.iter().all(|k| !held.contains(k)) {
                held.extend(keys.iter().cloned());
                return Some(Lease { leases: self, keys });
            }
            held = match deadline.remaining() {
                None => self.freed.wait(held).unwrap_or_else(|e| e.into_inner()),
                Some(r) if r.is_zero() => return None,
                Some(r) => {
                    self.freed
                        .wait_timeout(held, r)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }
}

impl<K: Ord + Clone> Drop for Lease<'_, K> {
    fn drop(&mut self) {
        let mut held = self.leases.held();
        for k in &self.keys {
            held.remove(k);
        }
        drop(held);
        self.leases.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn a_held_key_waits_others_do_not_and_a_deadline_ends_the_wait() {
        let leases = Leases::new();
        let a = leases.acquire([1u32, 2], Deadline::NONE).unwrap();
        // Disjoint keys: at once.
        let b = leases.acquire([3u32], Deadline::NONE).unwrap();
        // Overlapping: until the deadline.
        let t0 = Instant::now();
        let d = Deadline::after(t0, Duration::from_millis(200));
        assert!(leases.acquire([3u32, 4], d).is_none());
        assert!(t0.elapsed() >= Duration::from_millis(180));
        drop(b);
        let c = leases.acquire([3u32, 4], Deadline::NONE).unwrap();
        drop((a, c));
        assert!(leases.held().is_empty());
    }

    #[test]
    fn a_waiter_gets_the_key_when_its_holder_lets_go() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let leases = Arc::new(Leases::new());
        let released = Arc::new(AtomicBool::new(false));
        let held = leases
            .acquire(["claim-1".to_string()], Deadline::NONE)
            .unwrap();
        let (l, r) = (leases.clone(), released.clone());
        let waiter = std::thread::spawn(move || {
            let _lease = l.acquire(["claim-1".to_string()], Deadline::NONE).unwrap();
            r.load(Ordering::SeqCst)
        });
        std::thread::sleep(Duration::from_millis(100));
        released.store(true, Ordering::SeqCst);
        drop(held);
        assert!(
            waiter.join().unwrap(),
            "the waiter got the key only once it was let go"
        );
    }
}
