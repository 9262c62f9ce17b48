//! What arrives and where the fleet's nodes come from, both fixed by the
//! seed, so every policy sees the same nodes and the same VMs in the same
//! order.

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014): small, and the same sequence everywhere.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n > 0), by Lemire's multiply-shift (bias below 2^-32 for small n).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// A number in [0, 1): the top 53 bits as a fraction.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An exponential variate of mean `mean`, by inversion.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// One VM of an arrival list.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Vm {
    /// Its place in the list, from 0.
    pub index: usize,
    /// GPUs it asks for: 2, 4 or 8.
    pub gpus: u8,
    /// Whether it asks for an RDMA NIC beside them.
    pub nic: bool,
    /// When it arrives, in mean lifetimes (0 in the fill regime).
    pub arrive: f64,
    /// When it leaves if placed (infinite in the fill regime).
    pub leave: f64,
}

/// The mix of VM sizes: (GPUs, share of arrivals in percent, asks for a NIC).
/// A 4-GPU VM asks for a NIC, as the shipped template does; 2-GPU VMs are
/// compute alone; 8-GPU VMs take a whole node and its NICs are not asked.
pub const MIX: [(u8, u32, bool); 3] = [(2, 60, false), (4, 30, true), (8, 10, false)];

/// GPUs an arrival asks for on average under [`MIX`].
pub fn mean_gpus() -> f64 {
    MIX.iter()
        .map(|(g, p, _)| f64::from(*g) * f64::from(*p))
        .sum::<f64>()
        / 100.0
}

/// How VMs come and go in a run. Time is counted in mean lifetimes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Regime {
    /// Nobody leaves; VMs arrive until what they ask reaches `demand` times
    /// the fleet's GPUs (1.1: the fleet is asked for more than it has).
    Fill {
        /// Demand as a multiple of the fleet's GPUs.
        demand: f64,
    },
    /// Poisson arrivals and exponential lifetimes (mean 1) at an offered
    /// load (arrival rate x mean GPUs x mean lifetime / the fleet's GPUs);
    /// counted over `[warmup, warmup + window)`.
    Churn {
        /// Offered load, a multiple of the fleet's GPUs.
        load: f64,
        /// Time before counting starts.
        warmup: f64,
        /// Time counted.
        window: f64,
    },
}

impl Regime {
    /// Its name in records: `fill`, or `churn-100` for a load of 1.0.
    pub fn name(&self) -> String {
        match self {
            Regime::Fill { .. } => "fill".into(),
            Regime::Churn { load, .. } => format!("churn-{:.0}", load * 100.0),
        }
    }

    /// The span arrivals are counted in.
    pub fn window(&self) -> (f64, f64) {
        match *self {
            Regime::Fill { .. } => (0.0, f64::INFINITY),
            Regime::Churn { warmup, window, .. } => (warmup, warmup + window),
        }
    }
}

/// The arrival list of `seed` under `regime` for a fleet of `fleet_gpus`:
/// the same for every policy. Sizes come from the seed's size stream (the
/// same order in every regime), times from a stream of their own.
pub fn arrivals(seed: u64, regime: Regime, fleet_gpus: usize) -> Vec<Vm> {
    let mut sizes = Rng::new(seed ^ 0x5641_4D53); // "VAMS": a stream apart from the nodes'
    let mut clock = Rng::new(seed ^ 0x5449_4D45); // "TIME"
    let mut out = Vec::new();
    match regime {
        Regime::Fill { demand } => {
            let want = demand * fleet_gpus as f64;
            let mut asked = 0.0;
            while asked < want {
                let (gpus, nic) = size(&mut sizes);
                asked += f64::from(gpus);
                out.push(Vm {
                    index: out.len(),
                    gpus,
                    nic,
                    arrive: 0.0,
                    leave: f64::INFINITY,
                });
            }
        }
        Regime::Churn {
            load,
            warmup,
            window,
        } => {
            let rate = load * fleet_gpus as f64 / mean_gpus();
            let end = warmup + window;
            let mut t = clock.exp(1.0 / rate);
            while t < end {
                let (gpus, nic) = size(&mut sizes);
                out.push(Vm {
                    index: out.len(),
                    gpus,
                    nic,
                    arrive: t,
                    leave: t + clock.exp(1.0),
                });
                t += clock.exp(1.0 / rate);
            }
        }
    }
    out
}

/// The next size of the mix.
fn size(rng: &mut Rng) -> (u8, bool) {
    let mut roll = rng.below(100) as u32;
    for (gpus, pct, nic) in MIX {
        if roll < pct {
            return (gpus, nic);
        }
        roll -= pct;
    }
    let (gpus, _, nic) = MIX[MIX.len() - 1];
    (gpus, nic)
}

/// The first `n` VMs of the stream of `seed`, all at time 0: the fill
/// regime's order without its stop.
pub fn stream(seed: u64, n: usize) -> Vec<Vm> {
    let mut rng = Rng::new(seed ^ 0x5641_4D53);
    (0..n)
        .map(|index| {
            let (gpus, nic) = size(&mut rng);
            Vm {
                index,
                gpus,
                nic,
                arrive: 0.0,
                leave: f64::INFINITY,
            }
        })
        .collect()
}

/// Which of `shapes` shapes each of `n` nodes takes, uniformly at random.
pub fn draw_nodes(seed: u64, shapes: usize, n: usize) -> Vec<usize> {
    let mut rng = Rng::new(seed ^ 0x4E4F_4445); // "NODE"
    (0..n).map(|_| rng.below(shapes)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_gives_the_published_first_outputs_for_seed_zero() {
        // The reference implementation (Vigna, splitmix64.c) from state 0.
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn fill_stops_once_the_demand_passes_110_percent_of_the_fleet() {
        let list = arrivals(3, Regime::Fill { demand: 1.1 }, 1000);
        let asked: u32 = list.iter().map(|v| u32::from(v.gpus)).sum();
        let before_last = asked - u32::from(list.last().unwrap().gpus);
        assert!(
            asked >= 1100 && before_last < 1100,
            "{asked}, {before_last}"
        );
        assert!(list
            .iter()
            .all(|v| v.arrive == 0.0 && v.leave.is_infinite()));
        // The fill list is the size stream's head.
        assert_eq!(list, stream(3, list.len()));
    }

    #[test]
    fn churn_offers_the_load_asked_within_three_percent() {
        // Over 200 mean lifetimes at load 1.0 on 1000 GPUs: the rate is
        // 1000 / 3.2 arrivals per lifetime, so about 62,500 arrivals (the
        // count's sd is 250, 0.4 %). GPUs asked per lifetime / fleet GPUs
        // is the offered load; lifetimes average 1.
        let regime = Regime::Churn {
            load: 1.0,
            warmup: 0.0,
            window: 200.0,
        };
        let list = arrivals(5, regime, 1000);
        let asked: f64 = list.iter().map(|v| f64::from(v.gpus)).sum::<f64>() / 200.0;
        assert!((asked / 1000.0 - 1.0).abs() < 0.03, "offered {asked}");
        let life = list.iter().map(|v| v.leave - v.arrive).sum::<f64>() / list.len() as f64;
        assert!((life - 1.0).abs() < 0.03, "mean lifetime {life}");
        assert!(list.windows(2).all(|w| w[0].arrive <= w[1].arrive));
        assert!(list.last().unwrap().arrive < 200.0);
    }

    #[test]
    fn the_stream_follows_the_mix_within_two_points_over_ten_thousand_vms() {
        let vms = stream(7, 10_000);
        for (gpus, pct, nic) in MIX {
            let n = vms.iter().filter(|v| v.gpus == gpus).count();
            let share = n as f64 / 100.0;
            assert!(
                (share - pct as f64).abs() < 2.0,
                "{gpus}-GPU VMs: {share}% vs {pct}%"
            );
            assert!(vms.iter().filter(|v| v.gpus == gpus).all(|v| v.nic == nic));
        }
    }
}
