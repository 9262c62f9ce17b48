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

/// One size of the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MixEntry {
    /// GPUs a VM of this size asks for: 2, 4 or 8.
    pub gpus: u8,
    /// Its share of the arrivals, in percent.
    pub percent: u32,
    /// Whether it asks for an RDMA NIC beside them.
    pub nic: bool,
}

/// The mix of VM sizes (`--mix`), shares adding to 100.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mix(pub Vec<MixEntry>);

impl Mix {
    /// The default: 60 % 2-GPU VMs, 30 % 4-GPU VMs with a NIC (as the
    /// shipped template asks), 10 % 8-GPU VMs. By GPUs asked that is 37.5,
    /// 37.5 and 25 %: every size asks a comparable share of the fleet, so
    /// each size's refusals show.
    pub fn standard() -> Self {
        Mix(vec![
            MixEntry {
                gpus: 2,
                percent: 60,
                nic: false,
            },
            MixEntry {
                gpus: 4,
                percent: 30,
                nic: true,
            },
            MixEntry {
                gpus: 8,
                percent: 10,
                nic: false,
            },
        ])
    }

    /// A mix written `2=60,4+nic=30,8=10`: sizes of 2, 4 or 8 GPUs, each
    /// once, shares adding to 100; `+nic` on the 4-GPU size, whose claims
    /// ask for an RDMA NIC in every policy, and on no other.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (size, pct) = item
                .split_once('=')
                .ok_or_else(|| format!("{item}: not SIZE=PERCENT (e.g. 4+nic=30)"))?;
            let (gpus, nic) = match size.strip_suffix("+nic") {
                Some(g) => (g, true),
                None => (size, false),
            };
            let gpus: u8 = gpus
                .parse()
                .ok()
                .filter(|g| [2, 4, 8].contains(g))
                .ok_or_else(|| format!("{item}: a VM takes 2, 4 or 8 GPUs"))?;
            let percent: u32 = pct
                .parse()
                .map_err(|_| format!("{item}: {pct} is not a whole percentage"))?;
            // Every policy's claim for four GPUs asks for a NIC (the
            // shipped template does), and no other size's does.
            if nic != (gpus == 4) {
                return Err(format!(
                    "{item}: 4-GPU VMs, and only they, ask for a NIC in every policy's claims (write 4+nic)"
                ));
            }
            if out.iter().any(|e: &MixEntry| e.gpus == gpus) {
                return Err(format!("{item}: {gpus}-GPU VMs named twice"));
            }
            out.push(MixEntry { gpus, percent, nic });
        }
        let total: u32 = out.iter().map(|e| e.percent).sum();
        if total != 100 {
            return Err(format!("the shares add up to {total} %, not 100"));
        }
        Ok(Mix(out))
    }

    /// GPUs an arrival asks for on average.
    pub fn mean_gpus(&self) -> f64 {
        self.0
            .iter()
            .map(|e| f64::from(e.gpus) * f64::from(e.percent))
            .sum::<f64>()
            / 100.0
    }

    /// The next size: (GPUs, asks for a NIC).
    fn draw(&self, rng: &mut Rng) -> (u8, bool) {
        let mut roll = rng.below(100) as u32;
        for e in &self.0 {
            if roll < e.percent {
                return (e.gpus, e.nic);
            }
            roll -= e.percent;
        }
        let last = self.0.last().expect("a mix has a size");
        (last.gpus, last.nic)
    }
}

impl std::fmt::Display for Mix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let items: Vec<String> = self
            .0
            .iter()
            .map(|e| {
                format!(
                    "{}{}={}",
                    e.gpus,
                    if e.nic { "+nic" } else { "" },
                    e.percent
                )
            })
            .collect();
        f.write_str(&items.join(","))
    }
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
pub fn arrivals(seed: u64, regime: Regime, fleet_gpus: usize, mix: &Mix) -> Vec<Vm> {
    let mut sizes = Rng::new(seed ^ 0x5641_4D53); // "VAMS": a stream apart from the nodes'
    let mut clock = Rng::new(seed ^ 0x5449_4D45); // "TIME"
    let mut out = Vec::new();
    match regime {
        Regime::Fill { demand } => {
            let want = demand * fleet_gpus as f64;
            let mut asked = 0.0;
            while asked < want {
                let (gpus, nic) = mix.draw(&mut sizes);
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
            let rate = load * fleet_gpus as f64 / mix.mean_gpus();
            let end = warmup + window;
            let mut t = clock.exp(1.0 / rate);
            while t < end {
                let (gpus, nic) = mix.draw(&mut sizes);
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

/// Which shape each of `n` nodes takes, at random in proportion to
/// `weights` (one per shape; all 1 draws uniformly).
pub fn draw_nodes(seed: u64, weights: &[u32], n: usize) -> Vec<usize> {
    let mut rng = Rng::new(seed ^ 0x4E4F_4445); // "NODE"
    let total: u32 = weights.iter().sum();
    (0..n)
        .map(|_| {
            let mut roll = rng.below(total.max(1) as usize) as u32;
            weights
                .iter()
                .position(|&w| {
                    if roll < w {
                        true
                    } else {
                        roll -= w;
                        false
                    }
                })
                .unwrap_or(0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first `n` VMs of the stream of `seed`, all at time 0: the fill
    /// regime's order without its stop.
    fn stream(seed: u64, n: usize, mix: &Mix) -> Vec<Vm> {
        let mut rng = Rng::new(seed ^ 0x5641_4D53);
        (0..n)
            .map(|index| {
                let (gpus, nic) = mix.draw(&mut rng);
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

    #[test]
    fn splitmix64_gives_the_published_first_outputs_for_seed_zero() {
        // The reference implementation (Vigna, splitmix64.c) from state 0.
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn a_mix_reads_back_as_written_and_bad_ones_say_why() {
        let m = Mix::parse("2=60,4+nic=30,8=10").unwrap();
        assert_eq!(m, Mix::standard());
        assert_eq!(m.to_string(), "2=60,4+nic=30,8=10");
        assert!((m.mean_gpus() - 3.2).abs() < 1e-12);
        assert!(Mix::parse("2=60,4+nic=30").unwrap_err().contains("90 %"));
        assert!(Mix::parse("2=70,4=30").unwrap_err().contains("write 4+nic"));
        assert!(Mix::parse("2+nic=100").unwrap_err().contains("only they"));
        assert!(Mix::parse("3=100").unwrap_err().contains("2, 4 or 8"));
        assert!(Mix::parse("2=50,2=50").unwrap_err().contains("twice"));
        assert!(Mix::parse("2").unwrap_err().contains("SIZE=PERCENT"));
    }

    #[test]
    fn nodes_are_drawn_in_proportion_to_their_weights() {
        let draw = draw_nodes(9, &[3, 1, 0], 40_000);
        let share = |i| draw.iter().filter(|&&d| d == i).count() as f64 / 40_000.0;
        assert!(
            (share(0) - 0.75).abs() < 0.01 && share(2) == 0.0,
            "{}",
            share(0)
        );
    }

    #[test]
    fn fill_stops_once_the_demand_passes_110_percent_of_the_fleet() {
        let list = arrivals(3, Regime::Fill { demand: 1.1 }, 1000, &Mix::standard());
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
        assert_eq!(list, stream(3, list.len(), &Mix::standard()));
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
        let list = arrivals(5, regime, 1000, &Mix::standard());
        let asked: f64 = list.iter().map(|v| f64::from(v.gpus)).sum::<f64>() / 200.0;
        assert!((asked / 1000.0 - 1.0).abs() < 0.03, "offered {asked}");
        let life = list.iter().map(|v| v.leave - v.arrive).sum::<f64>() / list.len() as f64;
        assert!((life - 1.0).abs() < 0.03, "mean lifetime {life}");
        assert!(list.windows(2).all(|w| w[0].arrive <= w[1].arrive));
        assert!(list.last().unwrap().arrive < 200.0);
    }

    #[test]
    fn the_stream_follows_the_mix_within_two_points_over_ten_thousand_vms() {
        let vms = stream(7, 10_000, &Mix::standard());
        for MixEntry {
            gpus,
            percent: pct,
            nic,
        } in Mix::standard().0
        {
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
