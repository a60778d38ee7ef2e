//! Stopping a long call from Python: Ctrl-C, and a wall-clock budget (`max_wall_s` of `run`
//! and `evaluate`, as `servesim run --max-wall-s`). Either sets the run's interrupt flag,
//! which the simulation polls at every tick.
//!
//! Python's SIGINT handler only sets a flag that Python code checks, so a simulation without
//! Python policies runs on a thread of its own while the calling thread lets Python handle
//! its signals ([`Stop::without_python`]). A simulation with Python policies runs on the
//! calling thread, holding the GIL, and a policy may loop for ever (a search candidate):
//! there a watchdog thread raises an exception in the calling thread when the budget is spent
//! ([`Stop::with_python`]), as `PyThreadState_SetAsyncExc` lets one thread interrupt another's
//! Python code.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::RunError;

// What the watchdog raises in a policy's code: a BaseException, as KeyboardInterrupt is, so
// that a policy's `except Exception` cannot swallow it (the call then raises `RunError`).
pyo3::create_exception!(
    servesim,
    WallTimeSpent,
    pyo3::exceptions::PyBaseException,
    "max_wall_s ran out while a Python policy ran."
);

/// The interrupt flag of a call's runs, and its wall-clock budget.
pub struct Stop {
    pub flag: Arc<AtomicBool>,
    budget: Option<Duration>,
    spent: Arc<AtomicBool>,
}

impl Stop {
    /// `max_wall_s`: seconds, finite and > 0, or none.
    pub fn new(max_wall_s: Option<f64>) -> PyResult<Stop> {
        let budget = match max_wall_s {
            None => None,
            Some(s) if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s.min(1e9))),
            Some(s) => {
                return Err(PyValueError::new_err(format!(
                    "max_wall_s must be a finite number of seconds > 0, got {s}"
                )));
            }
        };
        Ok(Stop {
            flag: Arc::new(AtomicBool::new(false)),
            budget,
            spent: Arc::new(AtomicBool::new(false)),
        })
    }

    /// `app`, every run it builds stopped by this flag (for calls that run many
    /// simulations without an interrupt setting of their own: `check_real`, `calibrate`).
    pub fn for_every_run(&self, app: servesim::ServesimApp) -> servesim::ServesimApp {
        let flag = self.flag.clone();
        app.with(move |app| {
            app.insert_resource(servesim::setup::AppInterrupt(flag.clone()));
        })
    }

    /// The error a call whose budget ran out raises, whatever its run said.
    fn spent_error(&self) -> Option<PyErr> {
        let budget = self.budget?;
        self.spent.load(Ordering::Relaxed).then(|| {
            RunError::new_err(format!(
                "stopped after max_wall_s = {} s of wall time; nothing was written",
                budget.as_secs_f64()
            ))
        })
    }

    /// Runs `work` (no Python code in it) on a thread of its own, without the GIL, while
    /// this thread lets Python handle its signals every 50 ms and watches the budget: what a
    /// signal handler raises (KeyboardInterrupt) or a spent budget sets the flag, and is
    /// raised once the work has returned.
    pub fn without_python<T: Send>(
        &self,
        py: Python<'_>,
        work: impl FnOnce() -> T + Send,
    ) -> PyResult<T> {
        #[expect(
            clippy::disallowed_methods,
            reason = "a wall-clock budget; nothing simulated reads it"
        )]
        let started = Instant::now();
        std::thread::scope(|s| {
            let waiting = std::thread::current();
            let worker = s.spawn(move || {
                let done = work();
                waiting.unpark();
                done
            });
            let mut raised = None;
            while !worker.is_finished() {
                py.detach(|| std::thread::park_timeout(Duration::from_millis(50)));
                if raised.is_none()
                    && let Err(e) = py.check_signals()
                {
                    self.flag.store(true, Ordering::Relaxed);
                    raised = Some(e);
                }
                if self.budget.is_some_and(|b| started.elapsed() >= b) {
                    self.spent.store(true, Ordering::Relaxed);
                    self.flag.store(true, Ordering::Relaxed);
                }
            }
            let done = worker
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            match raised.or_else(|| self.spent_error()) {
                Some(e) => Err(e),
                None => Ok(done),
            }
        })
    }

    /// Runs `work` (which calls Python policies) on this thread, holding the GIL; with a
    /// budget, a watchdog thread sets the flag when it is spent and raises [`WallTimeSpent`]
    /// in this thread's Python code, should a policy be looping (a policy that catches
    /// every BaseException for ever cannot be stopped). Ctrl-C reaches the policies' code
    /// as Python's own KeyboardInterrupt.
    pub fn with_python<T>(&self, py: Python<'_>, work: impl FnOnce() -> T) -> PyResult<T> {
        let Some(budget) = self.budget else {
            return Ok(work());
        };
        let watch = Watch::start(budget, self.flag.clone(), self.spent.clone());
        let done = work();
        watch.finish(py);
        match self.spent_error() {
            Some(e) => Err(e),
            None => Ok(done),
        }
    }
}

/// A watchdog thread over a call that holds the GIL.
struct Watch {
    /// `true` once the call has ended: no exception may be raised after it.
    ended: Arc<(Mutex<bool>, Condvar)>,
    thread: std::ffi::c_ulong,
    raised: Arc<AtomicBool>,
}

impl Watch {
    fn start(budget: Duration, flag: Arc<AtomicBool>, spent: Arc<AtomicBool>) -> Watch {
        // SAFETY: called with the GIL held (a #[pyfunction]'s thread); reads this thread's id.
        let thread = unsafe { pyo3::ffi::PyThread_get_thread_ident() };
        let ended = Arc::new((Mutex::new(false), Condvar::new()));
        let raised = Arc::new(AtomicBool::new(false));
        let (watched, told) = (ended.clone(), raised.clone());
        std::thread::spawn(move || {
            let (lock, wake) = &*watched;
            let Ok(guard) = lock.lock() else { return };
            let Ok((guard, wait)) = wake.wait_timeout_while(guard, budget, |ended| !*ended) else {
                return;
            };
            if *guard || !wait.timed_out() {
                return;
            }
            drop(guard);
            spent.store(true, Ordering::Relaxed);
            flag.store(true, Ordering::Relaxed);
            // The simulation stops at its next tick; a policy that never returns to it gets
            // an exception at its next bytecode, again every 100 ms should it swallow it.
            // `ended` is read under the GIL, which the call holds while it sets it, so
            // nothing is raised after the call has ended.
            loop {
                let raised = Python::attach(|py| {
                    if lock.lock().map_or(true, |ended| *ended) {
                        return false;
                    }
                    let error = py.get_type::<WallTimeSpent>();
                    // SAFETY: the GIL is held; `thread` is the id of the thread running
                    // the call.
                    unsafe {
                        pyo3::ffi::PyThreadState_SetAsyncExc(thread as _, error.as_ptr());
                    }
                    told.store(true, Ordering::Relaxed);
                    true
                });
                let again = Duration::from_millis(100);
                let still = lock
                    .lock()
                    .ok()
                    .and_then(|g| wake.wait_timeout_while(g, again, |ended| !*ended).ok())
                    .is_some_and(|(ended, _)| !*ended);
                if !raised || !still {
                    return;
                }
            }
        });
        Watch {
            ended,
            thread,
            raised,
        }
    }

    /// The call has ended (with the GIL held): the watchdog stands down, and an exception
    /// it raised that no bytecode has met yet is taken back.
    fn finish(self, _py: Python<'_>) {
        let (lock, wake) = &*self.ended;
        if let Ok(mut ended) = lock.lock() {
            *ended = true;
        }
        wake.notify_all();
        if self.raised.load(Ordering::Relaxed) {
            // SAFETY: the GIL is held; a null exception clears a pending one.
            unsafe {
                pyo3::ffi::PyThreadState_SetAsyncExc(self.thread as _, std::ptr::null_mut());
            }
        }
    }
}
