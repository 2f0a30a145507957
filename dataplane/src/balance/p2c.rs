//! Weighted power of two choices: draw two endpoints with probability proportional to
//! their weight, send to the one with the lower load (peak-EWMA latency × in-flight work). Cheap (no sort, no scan of loads), and it keeps a slow or busy
//! endpoint from attracting traffic while weights still set the shares.

use std::sync::Arc;

use rand::Rng;

use super::endpoint::Endpoint;

fn draw<R: Rng>(candidates: &[&Arc<Endpoint>], total: u64, rng: &mut R) -> usize {
    let mut x = rng.random_range(0..total);
    for (i, c) in candidates.iter().enumerate() {
        let w = u64::from(c.weight());
        if x < w {
            return i;
        }
        x -= w;
    }
    candidates.len() - 1
}

/// Pick from `candidates` (all with weight > 0).
pub fn choose<'a, R: Rng>(
    candidates: &[&'a Arc<Endpoint>],
    rng: &mut R,
) -> Option<&'a Arc<Endpoint>> {
    match candidates.len() {
        0 => None,
        1 => Some(candidates[0]),
        _ => {
            let total: u64 = candidates.iter().map(|c| u64::from(c.weight())).sum();
            if total == 0 {
                return None;
            }
            let a = draw(candidates, total, rng);
            let b = draw(candidates, total, rng);
            // Both draws on one endpoint: take it. (Forcing a second, distinct choice
            // would hand a weight-1 endpoint half the traffic whenever it is idler.)
            let (ea, eb) = (candidates[a], candidates[b]);
            Some(if ea.load() <= eb.load() { ea } else { eb })
        }
    }
}
