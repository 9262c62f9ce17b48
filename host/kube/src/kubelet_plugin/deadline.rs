//! The kubelet's deadline for a call, as the driver keeps it. The kubelet
//! calls NodePrepareResources with a context timeout (45 s unless its
//! plugin registration says otherwise: k8s.io/kubernetes v1.37.2,
//! pkg/kubelet/cm/dra/plugin/dra_plugin.go, `defaultClientCallTimeout`),
//! which gRPC sends as the `grpc-timeout` header ("Timeout → TimeoutValue
//! TimeoutUnit", at most eight digits and one of H M S m u n: gRPC over
//! HTTP/2, PROTOCOL-HTTP2.md). A claim whose preparation would outlive it is
//! abandoned and rolled back before the kubelet stops listening, so that
//! the kubelet's retry finds nothing half done.

use std::time::{Duration, Instant};

/// When work for a call must be over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    at: Option<Instant>,
    /// The timeout the caller gave, for messages.
    given: Option<Duration>,
}

/// The part of the caller's timeout kept back to roll back and answer
/// before the caller gives up: a tenth, at most a second.
fn margin(timeout: Duration) -> Duration {
    (timeout / 10).min(Duration::from_secs(1))
}

impl Deadline {
    /// No deadline: the work takes what it takes (a caller without a timeout).
    pub const NONE: Self = Self {
        at: None,
        given: None,
    };

    /// A deadline `timeout` after `start`, less the margin to roll back and
    /// answer in.
    pub fn after(start: Instant, timeout: Duration) -> Self {
        Self {
            at: Some(start + timeout - margin(timeout)),
            given: Some(timeout),
        }
    }

    /// The deadline a `grpc-timeout` header value sets, counted from
    /// `start`; `None` for a value that is not one (gRPC then treats the call
    /// as having none, and so does the driver).
    pub fn from_grpc_timeout(value: &str, start: Instant) -> Option<Self> {
        let unit = value.chars().last()?;
        let digits = &value[..value.len() - unit.len_utf8()];
        if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: u64 = digits.parse().ok()?;
        let timeout = match unit {
            'H' => Duration::from_secs(n * 3600),
            'M' => Duration::from_secs(n * 60),
            'S' => Duration::from_secs(n),
            'm' => Duration::from_millis(n),
            'u' => Duration::from_micros(n),
            'n' => Duration::from_nanos(n),
            _ => return None,
        };
        Some(Self::after(start, timeout))
    }

    /// The time left, or `None` without a deadline.
    pub fn remaining(&self) -> Option<Duration> {
        self.at
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// The deadline has passed.
    pub fn passed(&self) -> bool {
        self.remaining() == Some(Duration::ZERO)
    }

    /// `limit`, or the time left when that is shorter.
    pub fn bound(&self, limit: Duration) -> Duration {
        self.remaining().map_or(limit, |r| r.min(limit))
    }

    /// Why work stops at `step`: for messages.
    pub fn describe(&self, step: &str) -> String {
        match self.given {
            Some(t) => format!("abandoned {step}: the kubelet's deadline ({t:?}) would pass"),
            None => format!("abandoned {step}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_read_as_the_protocol_spells_them() {
        let t0 = Instant::now();
        // PROTOCOL-HTTP2.md: value then unit; 45 s is the kubelet's default.
        for (v, d) in [
            ("45S", Duration::from_secs(45)),
            ("2M", Duration::from_secs(120)),
            ("1H", Duration::from_secs(3600)),
            ("44999m", Duration::from_millis(44_999)),
            ("500000u", Duration::from_millis(500)),
            ("99999999n", Duration::from_nanos(99_999_999)),
        ] {
            assert_eq!(
                Deadline::from_grpc_timeout(v, t0),
                Some(Deadline::after(t0, d)),
                "{v}"
            );
        }
        for bad in [
            "",
            "S",
            "45",
            "45s",
            "123456789S",
            "-1S",
            "4 5S",
            "1.5S",
            "45Sx",
        ] {
            assert_eq!(Deadline::from_grpc_timeout(bad, t0), None, "{bad:?}");
        }
    }

    #[test]
    fn the_margin_is_a_tenth_and_at_most_a_second() {
        let t0 = Instant::now();
        assert_eq!(
            Deadline::after(t0, Duration::from_secs(45)).at,
            Some(t0 + Duration::from_secs(44))
        );
        assert_eq!(
            Deadline::after(t0, Duration::from_secs(2)).at,
            Some(t0 + Duration::from_millis(1800))
        );
        assert!(!Deadline::NONE.passed());
        assert_eq!(
            Deadline::NONE.bound(Duration::from_secs(7)),
            Duration::from_secs(7)
        );
        let gone = Deadline::after(t0 - Duration::from_secs(10), Duration::from_secs(1));
        assert!(gone.passed());
        assert_eq!(gone.bound(Duration::from_secs(7)), Duration::ZERO);
    }
}
