use super::*;
use crate::trace::{parse_nodes, parse_pods};
use std::path::Path;

#[test]
fn sampling_stops_at_the_first_pod_that_reaches_the_target() {
    // One 1000-milli pod: exactly three draws reach 3000.
    assert_eq!(sample(&[1000], 3000, 42), vec![0, 0, 0]);
    // Zero-GPU pods are drawn too but never count: exactly two 500s reach 1000.
    let s = sample(&[500, 0], 1000, 7);
    assert_eq!(s.iter().filter(|&&i| i == 0).count(), 2);
    // In general: the sum reaches the target, and dropping the largest draw falls short.
    let reqs = [0, 250, 1000, 4000, 8000];
    for seed in 42..52 {
        let s = sample(&reqs, 20_000, seed);
        let sum: u64 = s.iter().map(|&i| reqs[i]).sum();
        let max = s.iter().map(|&i| reqs[i]).max().unwrap();
        assert!(
            sum >= 20_000 && sum - max < 20_000,
            "seed {seed}: sum {sum}, max {max}"
        );
        assert_eq!(
            s,
            sample(&reqs, 20_000, seed),
            "same seed, same arrival list"
        );
    }
    assert_ne!(sample(&reqs, 20_000, 42), sample(&reqs, 20_000, 43));
    assert!(
        sample(&[0, 0], 1000, 1).is_empty(),
        "no GPU pods: nothing to sample"
    );
}

#[test]
fn the_simulators_arrival_is_the_whole_trace_then_appended_draws() {
    // Two 1000-milli pods, target 5000: the trace (2000) in some order, then
    // exactly three draws (3000 -> 5000); a fourth would pass the target.
    let s = trace_then_sampled(&[1000, 1000], 5000, 42);
    assert_eq!(s.len(), 5);
    let mut head = s[..2].to_vec();
    head.sort_unstable();
    assert_eq!(head, vec![0, 1], "every trace pod once, first");
    // In general: the trace first, each pod once; the total stays within the
    // target; the order of the trace depends on the seed.
    let reqs = [0, 250, 1000, 4000, 8000];
    for seed in 42..52 {
        let s = trace_then_sampled(&reqs, 40_000, seed);
        let mut head = s[..reqs.len()].to_vec();
        head.sort_unstable();
        assert_eq!(head, vec![0, 1, 2, 3, 4], "seed {seed}");
        let sum: u64 = s.iter().map(|&i| reqs[i]).sum();
        assert!(sum <= 40_000, "seed {seed}: {sum}");
        assert!(sum > 40_000 - 8000, "seed {seed}: stopped early at {sum}");
    }
    assert_ne!(
        trace_then_sampled(&reqs, 40_000, 42)[..5],
        trace_then_sampled(&reqs, 40_000, 43)[..5]
    );
}

#[test]
fn the_simulators_reading_averages_the_pods_that_round_to_100_percent() {
    // One GPU (1000 thousandths).
    let mut a = Accounting::new(1000);
    a.record(990, true); // arrived 99.0 %: before the window
    assert_eq!(a.window_100(), None);
    a.record(8, false); // 99.8 %: allocated 99.0 %, unallocated 1.0
    a.record(4, true); // 100.2 %: allocated 99.4 %, unallocated 0.6
    a.record(10, true); // 101.2 %: after the window
    let w = a.window_100().expect("two pods in the window");
    assert!((w - 0.8).abs() < 1e-9, "{w}");
    // The first crossing of 100 % reads the 100.2 % pod alone.
    assert!((a.at_100().expect("crossed") - 0.6).abs() < 1e-9);
}

#[test]
fn arrival_accounting_reads_the_curve_when_each_percent_is_crossed() {
    // 4 GPUs. Worked by hand:
    //   +1000 placed  -> arrived 25 %, allocated 1000
    //   +2000 skipped -> arrived 75 %
    //   +500 placed   -> arrived 87.5 %: points 80..=87 read 100 - 1500/4000 = 62.5
    //   +500 placed   -> arrived 100 %: points 88..=100 read 100 - 2000/4000 = 50
    let mut a = Accounting::new(4000);
    a.record(1000, true);
    a.record(2000, false);
    assert!(a.curve.is_empty());
    a.record(500, true);
    assert_eq!(a.curve.len(), 8);
    assert!(a
        .curve
        .iter()
        .all(|&(p, v)| (80..=87).contains(&p) && v == 62.5));
    assert_eq!(a.at_100(), None);
    a.record(500, true);
    assert_eq!(a.at_100(), Some(50.0));
    assert_eq!(a.curve.last(), Some(&(100, 50.0)));
    assert!(!a.done());
    a.record(1200, false); // 130 %
    assert!(a.done());
    assert_eq!(a.curve.last(), Some(&(130, 50.0)));
}

#[test]
fn typical_pods_cover_the_threshold_one_step_at_a_time() {
    // Shapes by count: a 5, b 3, cpu-only c 2, d 1, e 1 (12 pods).
    let mut csv = String::from("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n");
    for (n, row) in [
        (5, "1000,1024,1,500"),
        (3, "2000,1024,1,1000"),
        (2, "4000,1024,0,0"),
        (1, "3000,1024,2,1000"),
        (1, "5000,1024,1,250"),
    ] {
        for _ in 0..n {
            csv.push_str(&format!("p,{row}\n"));
        }
    }
    let pods = parse_pods(Path::new("pods.csv"), &csv).unwrap();
    let mut c = Cluster::new(0);
    let weights = |cfg: &TypicalConfig, c: &mut Cluster| -> Vec<f64> {
        typical_pods(c, &pods, cfg)
            .iter()
            .map(|t| t.weight)
            .collect()
    };
    // FGD's configuration: 95 % of 12 = 11.4 pods: 5, 8, 10, 11 are short, all five shapes.
    assert_eq!(weights(&FGD_TYPICAL, &mut c), vec![5.0, 3.0, 2.0, 1.0, 1.0]);
    // 60 %: 7.2 pods, reached after two shapes (8).
    let sixty = TypicalConfig {
        threshold_pct: 60.0,
        ..FGD_TYPICAL
    };
    assert_eq!(weights(&sixty, &mut c), vec![5.0, 3.0]);
    // Without CPU-only pods: 60 % of 10 = 6 pods, two shapes again; step 10 takes all four.
    let gpu_only = TypicalConfig {
        with_cpu_pods: false,
        ..sixty
    };
    assert_eq!(weights(&gpu_only, &mut c), vec![5.0, 3.0]);
    let coarse = TypicalConfig {
        step: 10,
        ..gpu_only
    };
    assert_eq!(weights(&coarse, &mut c), vec![5.0, 3.0, 1.0, 1.0]);
}

fn tiny(nodes: &str, pods: &str) -> (Vec<Node>, Vec<Pod>) {
    (
        parse_nodes(Path::new("nodes.csv"), nodes).unwrap(),
        parse_pods(Path::new("pods.csv"), pods).unwrap(),
    )
}

#[test]
fn the_100_percent_crossing_on_a_hand_made_trace() {
    // One node with 2 GPUs, pods of 600 thousandths only. Target 1.3 x 2000 =
    // 2600: five pods arrive (3000). Two fit (one per GPU), the rest are skipped.
    // Arrived after each: 30, 60, 90, 120, 150 %; the crossing is the fourth pod,
    // when 1200 of 2000 are allocated: 40 % unallocated, whatever the policy.
    let (nodes, pods) = tiny(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,T4\n",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,600\n",
    );
    let b = Bench::new(&nodes, &pods);
    assert_eq!(b.capacity_milli, 2000);
    for p in Policy::BENCHMARKED {
        let r = b.run(p, 42, Arrival::Sampled);
        assert_eq!((r.pods, r.placed), (5, 2), "{}", p.name());
        assert_eq!(r.unallocated_at_100, Some(40.0), "{}", p.name());
        assert_eq!(r.curve.first(), Some(&(80, 40.0)));
    }
}

#[test]
fn whole_gpu_pods_wait_for_idle_gpus() {
    // 1 node, 2 GPUs; pods: a 1-GPU whole pod (1000) and a 300 share.
    // Target 2600. Whatever the order, a whole pod needs an idle GPU and a
    // share takes part of one; the crossing reads exactly 100 - placed/2000.
    let (nodes, pods) = tiny(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,T4\n",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nw,1000,1024,1,1000\ns,1000,1024,1,300\n",
    );
    let b = Bench::new(&nodes, &pods);
    let r = b.run(Policy::Gpushare, 42, Arrival::Sampled);
    let order = sample(&b.gpu_requests, 2600, 42);
    // Replay by hand: shares pack on one GPU (3 fit in 1000), whole pods need the other.
    let (mut whole_left, mut share_room, mut arrived, mut alloc, mut at100) =
        (2u32, 0u64, 0u64, 0u64, None);
    for &i in &order {
        let g = b.gpu_requests[i];
        let ok = if g == 1000 {
            if whole_left > 0 {
                whole_left -= 1;
                true
            } else {
                false
            }
        } else if share_room >= 300 {
            share_room -= 300;
            true
        } else if whole_left > 0 {
            whole_left -= 1;
            share_room = 700;
            true
        } else {
            false
        };
        arrived += g;
        if ok {
            alloc += g;
        }
        if at100.is_none() && arrived >= 2000 {
            at100 = Some(100.0 - 100.0 * alloc as f64 / 2000.0);
        }
    }
    assert_eq!(r.unallocated_at_100, at100);
}

#[test]
fn the_lp_bound_worked_by_hand() {
    // 550 fits beside no other item: weight 1 each; two 460s share a GPU:
    // 1/2 each. Total 3 = the optimum; L1 says 3 (2020), L2 3 as well.
    let b = lp_bound(&[550, 550, 460, 460]).expect("solves");
    assert_eq!(b.gpus, 3);
    assert!((b.value - 3.0).abs() < 1e-6, "{b:?}");
    // Two 340s fit a GPU (680), three do not (1020): 1/2 each, 1.5 in all, so 2.
    assert_eq!(lp_bound(&[340, 340, 340]).expect("solves").gpus, 2);
    assert_eq!(lp_bound(&[]).expect("solves").gpus, 0);
    assert_eq!(lp_bound(&[1200]), None, "an item larger than a GPU");
}

#[test]
fn the_lp_bound_of_the_default_traces_sharing_pods() {
    // gpu_milli and count of the 3,078 sharing pods of openb_pod_list_default.csv.
    let counts: [(u64, usize); 20] = [
        (810, 1078),
        (470, 750),
        (320, 328),
        (650, 253),
        (230, 140),
        (460, 128),
        (590, 75),
        (160, 74),
        (550, 72),
        (220, 62),
        (370, 47),
        (110, 24),
        (480, 19),
        (50, 7),
        (330, 7),
        (350, 6),
        (270, 4),
        (440, 2),
        (290, 1),
        (140, 1),
    ];
    let sizes: Vec<u64> = counts
        .iter()
        .flat_map(|&(s, c)| std::iter::repeat_n(s, c))
        .collect();
    let (_, l2) = lower_bounds(&sizes);
    assert_eq!(l2, 1922);
    // A certificate by hand: 810 -> 1, 550-650 -> 2/3, 460-480 -> 1/2,
    // 320-440 -> 1/3, 230-290 -> 1/4, 220 -> 1/12, smaller -> 0; no GPU's
    // fill weighs over 1, and the pods weigh 23575/12 = 1964.58 in all.
    let b = lp_bound(&sizes).expect("solves");
    assert!((b.value - 23575.0 / 12.0).abs() < 1e-4, "{}", b.value);
    assert_eq!(b.gpus, 1965);
}

#[test]
fn lower_bounds_worked_by_hand() {
    // Three items over half a GPU need three GPUs although they sum to 1.8.
    assert_eq!(lower_bounds(&[600, 600, 600]), (2, 3));
    // 810 + 190 and 500 + 500 fill two GPUs exactly.
    assert_eq!(lower_bounds(&[810, 190, 500, 500]), (2, 2));
    assert_eq!(lower_bounds(&[]), (0, 0));
}

#[test]
fn median_of_even_and_odd_lists() {
    assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(median(&[]), None);
}
