//! Independent runs, one per seed, on up to `jobs` threads (no `multi_threaded` Bevy: each
//! run is its own World on its own thread).

/// Runs `f` for every seed on up to `jobs` threads (`jobs` ≤ 1: on this thread, stopping at
/// the first error); results in seed order, or the first error in seed order. The results do
/// not depend on `jobs`.
pub fn per_seed<T: Send, E: Send>(
    seeds: &[u64],
    jobs: usize,
    f: impl Fn(u64) -> Result<T, E> + Sync,
) -> Result<Vec<T>, E> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    if jobs <= 1 {
        // On the calling thread (which may hold a lock its callbacks need, e.g. Python's).
        return seeds.iter().map(|&s| f(s)).collect();
    }
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<T, E>>>> =
        Mutex::new((0..seeds.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, seeds.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&seed) = seeds.get(k) else { break };
                    let r = f(seed);
                    results.lock().expect("no thread panics holding it")[k] = Some(r);
                }
            });
        }
    });
    results
        .into_inner()
        .expect("no thread panicked")
        .into_iter()
        .map(|r| r.expect("every seed was run"))
        .collect()
}
