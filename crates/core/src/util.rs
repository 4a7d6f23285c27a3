//! The few small system helpers every crate shares: the clock in whole seconds, this
//! machine's host name, locks that outlive a panicked holder, and the delays of an
//! exponential backoff (`backon`).
//!
//! They are the one exception to this crate's rule of no I/O and no clock: the pure
//! modules (the model, the placement engine, the planner, the renderers) never call
//! them; they live here only because every other crate depends on this one.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// Seconds since the Unix epoch, from the system clock (0 if the clock is before 1970).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// This machine's host name, best effort: `/proc/sys/kernel/hostname`, then
/// `/etc/hostname`, then `$HOSTNAME`, else `unknown-host`.
pub fn hostname() -> String {
    for p in ["/proc/sys/kernel/hostname", "/etc/hostname"] {
        if let Ok(s) = std::fs::read_to_string(p) {
            let s = s.trim();
            if !s.is_empty() {
                return s.to_string();
            }
        }
    }
    std::env::var("HOSTNAME").unwrap_or_else(|_| "unknown-host".into())
}

/// Lock `m`, taking the value over if a holder panicked: every value kept behind
/// these locks is left consistent between statements, so a poisoned one is still
/// good to use (and one panic does not become a panic in every later caller).
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// [`lock`] for reading an `RwLock`.
pub fn read_lock<T: ?Sized>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// [`lock`] for writing an `RwLock`.
pub fn write_lock<T: ?Sized>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

/// An exponential backoff: `first`, then doubling up to `cap`, never ending and without
/// jitter; add `.with_jitter()` or `.with_max_times(n)` for those.
/// [`backoff_delays`] is its sequence of delays.
pub fn backoff(first: Duration, cap: Duration) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(first)
        .with_max_delay(cap.max(first))
        .with_factor(2.0)
        .without_max_times()
}

/// The delays of [`backoff`]: `first`, `2 × first`, `4 × first`, ... up to `cap`, then
/// `cap` forever. (backon doubles in `f32`, so a delay under the cap may be a few
/// nanoseconds off the exact double; the cap itself is exact.)
pub fn backoff_delays(first: Duration, cap: Duration) -> ExponentialBackoff {
    backoff(first, cap).build()
}

/// An error and its sources, `a: b: c` (a source whose text the chain already
/// holds is not repeated).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let next = c.to_string();
        if !s.contains(&next) {
            s.push_str(": ");
            s.push_str(&next);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal within a microsecond (backon doubles in `f32`).
    fn close(a: Duration, b: Duration) -> bool {
        a.abs_diff(b) < Duration::from_micros(1)
    }

    #[test]
    fn backoff_doubles_from_the_first_delay_and_stays_at_the_cap() {
        let got: Vec<Duration> =
            backoff_delays(Duration::from_millis(50), Duration::from_millis(500))
                .take(8)
                .collect();
        let want = [50, 100, 200, 400, 500, 500, 500, 500].map(Duration::from_millis);
        assert!(
            got.iter().zip(&want).all(|(g, w)| close(*g, *w)),
            "{got:?} != {want:?}"
        );
        assert_eq!(got[4..], want[4..], "the cap is exact");
    }

    #[test]
    fn backoff_never_ends() {
        let mut d = backoff_delays(Duration::from_millis(200), Duration::from_secs(10));
        assert_eq!(d.nth(10_000), Some(Duration::from_secs(10)));
    }

    #[test]
    fn a_cap_below_the_first_delay_is_the_first_delay() {
        let got: Vec<Duration> = backoff_delays(Duration::from_secs(2), Duration::from_secs(1))
            .take(3)
            .collect();
        assert_eq!(got, vec![Duration::from_secs(2); 3]);
    }

    #[test]
    fn jitter_stays_within_one_delay_above_the_sequence() {
        let mut d = backoff(Duration::from_secs(1), Duration::from_secs(4))
            .with_jitter()
            .build();
        for base in [1, 2, 4, 4] {
            let w = d.next().expect("never ends");
            let base = Duration::from_secs(base);
            assert!(w >= base && w <= base * 2, "{w:?} for {base:?}");
        }
    }

    #[test]
    fn lock_takes_over_a_poisoned_mutex() {
        let m = Mutex::new(vec![1]);
        let poisoned = std::panic::catch_unwind(|| {
            let mut g = m.lock().expect("not poisoned yet");
            g.push(2);
            panic!("a holder panics");
        });
        assert!(poisoned.is_err());
        assert!(m.is_poisoned());
        let mut g = lock(&m);
        assert_eq!(*g, vec![1, 2]);
        g.push(3);
        drop(g);
        assert_eq!(*lock(&m), vec![1, 2, 3]);
    }

    #[test]
    fn read_and_write_lock_take_over_a_poisoned_rwlock() {
        let l = RwLock::new(1);
        let poisoned = std::panic::catch_unwind(|| {
            let mut g = l.write().expect("not poisoned yet");
            *g = 2;
            panic!("a writer panics");
        });
        assert!(poisoned.is_err());
        assert!(l.is_poisoned());
        assert_eq!(*read_lock(&l), 2);
        *write_lock(&l) = 3;
        assert_eq!(*read_lock(&l), 3);
    }

    #[test]
    fn unix_now_is_after_2020() {
        assert!(unix_now() > 1_577_836_800);
    }

    #[test]
    fn hostname_is_never_empty() {
        assert!(!hostname().trim().is_empty());
    }
}

/// `n` and the noun that goes with it: `1 host`, `2 hosts`, `0 hosts`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod count_tests {
    /// Issue 45 item 5, regression: "1 hosts", "on 1 GPUs".
    #[test]
    fn one_is_singular() {
        assert_eq!(super::count(1, "host", "hosts"), "1 host");
        assert_eq!(super::count(0, "host", "hosts"), "0 hosts");
        assert_eq!(super::count(2, "GPU", "GPUs"), "2 GPUs");
    }
}
