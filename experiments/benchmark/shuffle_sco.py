"""Seed 000's shuffle-private SCO through fedray against one-process numpy loops.

Three measurements, each fedray through its normal path (Hydra overrides -> make_plan -> local Ray
with runtime.num_actors=2 -> fedray.runtime.driver.run) next to a numpy implementation written
here, independently of fedray's code (fedray's ``vector_sum_parameters`` gives P_vec's g, b, p and
the planner's per-round budget is checked against the formula; nothing else of fedray runs in the
reference loops). The data are the same records: the loops read the plan's dataset.

1. P_vec in count form (M2), one invocation per round: a P_GD plan with n users of dimension d
   (default n = 10^6, d = 100), a few rounds. Per round fedray computes every user's clipped
   logistic gradient and P_vec counts (randomized rounding + Binomial(b, p) per user and
   coordinate) in the two silo-group actors, the shuffler actor sums the counts, the driver
   debiases and steps. The numpy reference does the same per-user counts for all n users in one
   process, in chunks of users, sums them, debiases and steps. Seconds per round, peak memory of
   the reference (tracemalloc, one extra untimed round) and of fedray's actors (VmHWM from /proc).
2. P_SGD with P_vec per batch: n = 10^6 users, B = 1,000 per step, T = n / B, d = 10. Seconds per
   run, fedray vs a numpy loop doing the same steps with per-user counts (M2, the same draws
   fedray makes; the M3 aggregate, which draws d binomials per step instead of B d, is shown too).
3. P_GD with P_vec per round: n = 10^5 users, d = 10, T = 50 rounds, radius 5, step size 0.5.
For 2 and 3, the same runs with privacy=none (exact sums; clip 1 kept) check that fedray's and
numpy's final iterates agree to rounding. With privacy the draws differ (fedray keys its draws by
(seed, round, block of 64 users)), so the private iterates are compared against the spread the
P_vec noise gives them (approximate z-scores). Benchmarks print numbers and ratios; nothing is
asserted on time.

    python experiments/benchmark/shuffle_sco.py                       # the sizes above
    python experiments/benchmark/shuffle_sco.py --pvec-users 100000 --sgd-users 100000 --gd-users 10000
    python experiments/benchmark/shuffle_sco.py --only 1 --pvec-rounds 2
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path

# The reference is one process on one core: no BLAS threads (the Ray actors get one each anyway).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from fedray.compose import compose_plan  # noqa: E402  (after the thread settings above)

SEED = 20261124          # the numpy loops' own generator (fedray draws from its run seed)
GIB = 1024.0 ** 3


# ----------------------------------------------------------------------------------------------
# The numpy reference: written from the paper's algorithms (seed-000 Alg. 1-3, 5), not fedray's code.
# ----------------------------------------------------------------------------------------------

def clipped_gradients(x: np.ndarray, y: np.ndarray, theta: np.ndarray, clip: float, margin_clip: float) -> np.ndarray:
    """(m, d) per-user logistic gradients (sigmoid(clip(<theta, x>)) - y) x, each scaled to l2 norm <= clip."""
    residual = 1.0 / (1.0 + np.exp(-np.clip(x @ theta, -margin_clip, margin_clip))) - y
    norms = np.abs(residual) * np.sqrt(np.einsum("ij,ij->i", x, x))
    scale = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
    return x * (residual * scale)[:, None]


def user_counts(v: np.ndarray, g: int, b: int, p: float, bound: float, rng: np.random.Generator) -> np.ndarray:
    """(m, d) int64 P_vec counts (M2) of users' vectors v: randomized rounding of (v_j + bound) g / (2 bound)
    plus Binomial(b, p) per user and coordinate (the number of 1-bits the user sends for label j)."""
    norms = np.sqrt(np.einsum("ij,ij->i", v, v))
    v = v * np.minimum(1.0, bound / np.maximum(norms, 1e-300))[:, None]     # onto the bound-ball (a no-op here)
    t = np.clip((v + bound) * (g / (2.0 * bound)), 0.0, float(g))
    low = np.floor(t)
    rounded = (low + (rng.random(t.shape) < t - low)).astype(np.int64)
    return rounded + rng.binomial(b, p, size=t.shape)


def aggregate_ones(v: np.ndarray, g: int, b: int, p: float, bound: float, rng: np.random.Generator) -> np.ndarray:
    """(d,) int64 M3 counts: the users' rounded values summed, plus one Binomial(m b, p) per coordinate."""
    norms = np.sqrt(np.einsum("ij,ij->i", v, v))
    v = v * np.minimum(1.0, bound / np.maximum(norms, 1e-300))[:, None]
    t = np.clip((v + bound) * (g / (2.0 * bound)), 0.0, float(g))
    low = np.floor(t)
    rounded = (low + (rng.random(t.shape) < t - low)).astype(np.int64).sum(axis=0)
    return rounded + rng.binomial(np.int64(v.shape[0]) * np.int64(b), p, size=v.shape[1])


def debias(ones: np.ndarray, users: int, g: int, b: int, p: float, bound: float) -> np.ndarray:
    """The analyzer: the unbiased estimate of the users' vector sum from the summed 1-bit counts."""
    return (2.0 * bound / g) * (ones - p * b * users) - users * bound


def project(theta: np.ndarray, radius: float | None) -> np.ndarray:
    if radius is None:
        return theta
    norm = float(np.sqrt(theta @ theta))
    return theta if norm <= radius else theta * (radius / norm)


def pgd_numpy(x, y, rounds: int, step: float, radius, clip: float, margin_clip: float, pvec, mode: str,
              chunk: int, rng) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """P_GD: every user every round. ``mode``: "none" (exact sum), "M2" (per-user counts), "M3".
    Returns (theta_bar, theta_T, seconds of each round)."""
    n, d = x.shape
    theta, total, seconds = project(np.zeros(d), radius), np.zeros(d), []
    for _ in range(rounds):
        start = time.perf_counter()
        summed = np.zeros(d) if mode == "none" else np.zeros(d, dtype=np.int64)
        for lo in range(0, n, chunk):
            grads = clipped_gradients(x[lo:lo + chunk], y[lo:lo + chunk], theta, clip, margin_clip)
            if mode == "none":
                summed += grads.sum(axis=0)
            elif mode == "M2":
                summed += user_counts(grads, pvec.scale, pvec.noise_bits, pvec.bit_probability, clip, rng).sum(axis=0)
            else:
                summed += aggregate_ones(grads, pvec.scale, pvec.noise_bits, pvec.bit_probability, clip, rng)
        if mode != "none":
            summed = debias(summed, n, pvec.scale, pvec.noise_bits, pvec.bit_probability, clip)
        total += theta
        theta = project(theta - step * summed / n, radius)
        seconds.append(time.perf_counter() - start)
    return total / rounds, theta, seconds


def psgd_numpy(x, y, batch: int, steps: int, step: float, radius, clip: float, margin_clip: float, pvec,
               mode: str, rng) -> tuple[np.ndarray, np.ndarray, float]:
    """P_SGD: step t uses users [t B, (t + 1) B). Returns (theta_bar, theta_T, seconds)."""
    d = x.shape[1]
    theta, total = project(np.zeros(d), radius), np.zeros(d)
    start = time.perf_counter()
    for t in range(steps):
        grads = clipped_gradients(x[t * batch:(t + 1) * batch], y[t * batch:(t + 1) * batch], theta, clip, margin_clip)
        if mode == "none":
            summed = grads.sum(axis=0)
        else:
            g, b, p = pvec.scale, pvec.noise_bits, pvec.bit_probability
            ones = user_counts(grads, g, b, p, clip, rng).sum(axis=0) if mode == "M2" else \
                aggregate_ones(grads, g, b, p, clip, rng)
            summed = debias(ones, batch, g, b, p, clip)
        total += theta
        theta = project(theta - step * summed / batch, radius)
    return total / steps, theta, time.perf_counter() - start


def sum_std(pvec, users: int) -> float:
    """Per-coordinate std of P_vec's sum estimate over ``users`` users, rounding's part at its maximum."""
    step = 2.0 * pvec.l2_bound / pvec.scale
    return step * math.sqrt(users * (0.25 + pvec.noise_bits * pvec.bit_probability * (1.0 - pvec.bit_probability)))


# ----------------------------------------------------------------------------------------------
# fedray's side, and what we watch while it runs
# ----------------------------------------------------------------------------------------------

class ProcessWatch:
    """What runs while a measurement runs, polled from /proc every ``every`` seconds: the peak RSS
    (VmHWM) of every process below this one (Ray's raylet, GCS, workers, actors), the largest sum of
    their current RSS, and the CPU used by processes outside this tree (other load on the machine).
    RSS includes shared object-store pages a process has touched, so the sum counts them more than
    once. The CPU of a process that ends between two polls is missed for its last interval."""

    def __init__(self, every: float = 0.25):
        self.every, self.peak, self.names, self.largest_sum = every, {}, {}, 0
        self._cpu: dict[int, int] = {}            # clock ticks used by each of our processes, last seen
        self._busy: list[int] = []                # the machine's busy ticks, first and last poll
        self._ours: list[int] = []
        self._seconds: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()

    def mark(self) -> int:
        """Poll now; the poll's index, for ``other_cores``."""
        self._sample()
        return len(self._busy) - 1

    def other_cores(self, first: int, last: int) -> float:
        """Average number of cores busy with processes outside this one and its descendants
        between the polls ``first`` and ``last``."""
        seconds = self._seconds[last] - self._seconds[first]
        if seconds <= 0:
            return float("nan")
        ticks = (self._busy[last] - self._busy[first]) - (self._ours[last] - self._ours[first])
        return max(0.0, ticks / os.sysconf("SC_CLK_TCK") / seconds)

    def _scan(self) -> tuple[list[int], dict[int, int]]:
        """(this process and its descendants, CPU ticks of every process)."""
        children: dict[int, list[int]] = {}
        cpu: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                children.setdefault(int(fields[1]), []).append(int(entry))
                cpu[int(entry)] = int(fields[11]) + int(fields[12])
        found, todo = [os.getpid()], [os.getpid()]
        while todo:
            for child in children.get(todo.pop(), []):
                found.append(child)
                todo.append(child)
        return found, cpu

    def _sample(self) -> None:
        with self._lock:
            self._sample_locked()

    def _sample_locked(self) -> None:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]
        busy = sum(ticks) - ticks[3] - ticks[4]            # all but idle and iowait
        now = time.perf_counter()
        ours, cpu = self._scan()
        total = 0
        for pid in ours:
            self._cpu[pid] = max(self._cpu.get(pid, 0), cpu.get(pid, 0))
            if pid == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    name = f.read().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            total += int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
            self.peak[pid] = max(self.peak.get(pid, 0), int(fields.get("VmHWM", "0 kB").split()[0]) * 1024)
            if name.startswith("ray::") and not name.startswith("ray::IDLE"):
                self.names[pid] = name.split()[0]
            else:
                self.names.setdefault(pid, os.path.basename(name.split()[0]) if name else "?")
        self.largest_sum = max(self.largest_sum, total)
        self._busy.append(busy)
        self._ours.append(sum(self._cpu.values()))
        self._seconds.append(now)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.every)

    def actor_peaks(self, prefix: str) -> list[float]:
        return sorted(self.peak[p] / GIB for p, name in self.names.items() if name.startswith(prefix))


def vm_hwm() -> float:
    """This process's peak resident memory so far, GiB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) * 1024 / GIB


def run_fedray(plan) -> tuple[object, list[float], float]:
    """(result, times at which rounds / blocks settled, seconds from the call's start), through run(plan)."""
    from fedray.runtime.driver import run

    stamps: list[float] = []
    start = time.perf_counter()
    result = run(plan, progress=lambda step, metrics: stamps.append(time.perf_counter()))
    return result, [s - start for s in stamps], time.perf_counter() - start


def load_users(plan) -> tuple[np.ndarray, np.ndarray]:
    """The plan's records as the loops read them: one record per user, (n, d) and (n,)."""
    fed = plan.dataset.load(plan.seed, plan.trial)
    return np.ascontiguousarray(fed.x_train[:, 0, :]), np.ascontiguousarray(fed.y_train[:, 0])


def table(title: str, unit: str, rows: list[tuple[str, float]], base: float) -> None:
    print(f"\n{title}")
    print(f"| runner | {unit} | ratio to numpy |")
    print("|---|---:|---:|")
    for name, value in rows:
        print(f"| {name} | {value:.3g} | {value / base:.2f} |")


def check_pvec(plan_resolved: dict, epsilon: float, delta: float, rounds: int) -> tuple[float, float]:
    """P_GD's per-round budget by the paper's formula (spec §3.5), or the planner's shrunk one."""
    eps0 = epsilon / (2.0 * math.sqrt(2.0 * rounds * math.log(1.0 / delta)))
    delta0 = delta / (rounds + 1)
    if plan_resolved.get("eps0_shrunk"):
        print(f"  note: the planner shrank eps0 from {eps0:.6g} to {plan_resolved['eps0']:.6g} (advanced composition)")
        eps0 = plan_resolved["eps0"]
    elif not (math.isclose(eps0, plan_resolved["eps0"], rel_tol=1e-12) and math.isclose(delta0, plan_resolved["delta0"])):
        raise SystemExit(f"per-round budget: formula ({eps0}, {delta0}) vs plan {plan_resolved}")
    return eps0, delta0


def pgd_overrides(users: int, dim: int, rounds: int, step: float, radius: float, private: bool) -> list[str]:
    privacy = ["privacy.epsilon=4.0", "privacy.delta=1e-6", "privacy.l2_clip=1.0"] if private else \
        ["privacy=none", "privacy.l2_clip=1.0"]
    return ["experiment=p_gd_synthetic", *privacy, "algorithm.parameters=manual", f"num_rounds={rounds}",
            f"algorithm.step_size={step}", f"algorithm.radius={radius}", f"data.spec.num_silos={users}",
            f"data.spec.dim={dim}", f"evaluate_every={rounds + 1}", "progress=false", "runtime.num_actors=2"]


# ----------------------------------------------------------------------------------------------
# The three measurements
# ----------------------------------------------------------------------------------------------

def load_line(watch: ProcessWatch, fedray: tuple[int, int], numpy_: tuple[int, int]) -> str:
    return (f"other load on the machine (CPU of processes outside this benchmark): "
            f"{watch.other_cores(*fedray):.2f} cores during fedray's runs, {watch.other_cores(*numpy_):.2f} during numpy's")


def measure_pvec(args, watch: ProcessWatch) -> None:
    from fedray.privacy.vector_sum import vector_sum_parameters

    n, d, rounds, step, radius = args.pvec_users, args.pvec_dim, args.pvec_rounds, 0.5, 5.0
    plan = compose_plan(pgd_overrides(n, d, rounds, step, radius, private=True))
    eps0, delta0 = check_pvec(plan.protocol.resolved, 4.0, 1e-6, rounds)
    pvec = vector_sum_parameters(eps0, delta0, d, n, 1.0)
    print(f"\n## 1. P_vec count form (M2): n = {n:,} users, d = {d}, one invocation per round, {rounds} rounds "
          f"(P_GD, eta = {step}, radius {radius}); P_vec at the plan's per-round (eps0, delta0) = ({eps0:.4g}, "
          f"{delta0:.3g}) from (eps, delta) = (4, 1e-6) over {rounds} rounds: g = {pvec.scale}, b = {pvec.noise_bits:,}, "
          f"p = {pvec.bit_probability:.10f}")

    before = watch.mark()
    result, stamps, call = run_fedray(plan)
    after = watch.mark()
    driver_after_fedray = vm_hwm()
    intervals = np.diff(stamps)
    fed_round = float(np.median(intervals)) if intervals.size else float("nan")

    load_start = time.perf_counter()
    x, y = load_users(plan)
    load_seconds = time.perf_counter() - load_start
    margin = plan.loss.margin_clip
    rng = np.random.default_rng(SEED)
    _, last, seconds = pgd_numpy(x, y, rounds, step, radius, 1.0, margin, pvec, "M2", args.chunk, rng)
    numpy_round = float(np.median(seconds))
    _, _, m3_seconds = pgd_numpy(x, y, rounds, step, radius, 1.0, margin, pvec, "M3", args.chunk, rng)
    numpy_done = watch.mark()
    tracemalloc.start()
    pgd_numpy(x, y, 1, step, radius, 1.0, margin, pvec, "M2", args.chunk, rng)
    traced_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    driver_peak = vm_hwm()

    rows = [(f"numpy, one process, per-user counts M2 (median of {rounds} rounds)", numpy_round),
            (f"fedray, 2 silo-group actors + shuffler (median of {intervals.size} round-to-round intervals)", fed_round),
            ("numpy, M3 aggregate (d binomials per round; same law, not the same work)", float(np.median(m3_seconds)))]
    table("Seconds per round (one P_vec invocation over all users, plus the gradients and the step)", "s/round",
          rows, numpy_round)
    print(f"fedray whole run: {result.wall_time:.1f} s for {rounds} rounds; start-up to the end of round 0 "
          f"(time_to_first_round: Ray, actors, each actor generating its {n // 2:,} users, round 0 with an "
          f"evaluation) {result.time_to_first_round:.1f} s; round ends at {', '.join(f'{s:.1f}' for s in stamps)} s "
          f"after run() was called; final evaluation and close {call - stamps[-1]:.1f} s")
    print(f"numpy: data load (dataset.load, not timed above) {load_seconds:.1f} s; chunks of {args.chunk:,} users")
    data = (x.nbytes + y.nbytes) / GIB
    silo = ", ".join(f"{v:.2f}" for v in watch.actor_peaks("ray::SiloGroup"))
    shuffler = ", ".join(f"{v:.2f}" for v in watch.actor_peaks("ray::Shuffler"))
    print("\nPeak memory (GiB)")
    print("| process | peak |")
    print("|---|---:|")
    print(f"| numpy reference: allocations during one round (tracemalloc peak; the data are extra) | {traced_peak / GIB:.3f} |")
    print(f"| numpy reference: its input data, x and y | {data:.2f} |")
    print(f"| this process (fedray's driver) after the fedray run (VmHWM) | {driver_after_fedray:.2f} |")
    print(f"| this process after the numpy data load and reference (VmHWM) | {driver_peak:.2f} |")
    print(f"| fedray silo-group actors, each (VmHWM) | {silo or '-'} |")
    print(f"| fedray shuffler actor (VmHWM) | {shuffler or '-'} |")
    print(f"| all Ray processes, largest sum of current RSS (shared object-store pages counted per process) | "
          f"{watch.largest_sum / GIB:.2f} |")
    spread = step * math.sqrt(2.0 * rounds) * sum_std(pvec, n) / n
    z = np.abs(result.outputs["last"][0, :, 0] - last) / spread
    print(f"private iterates: max over {d} coordinates of |theta_T(fedray) - theta_T(numpy)| / (eta sqrt(2T) "
          f"std(sum)/n = {spread:.2e}) = {z.max():.2f} (mean {z.mean():.2f}; independent noise, so O(1) expected)")
    print(load_line(watch, (before, after), (after, numpy_done)))
    print(f"target fedray <= 1.2x numpy per invocation: {fed_round / numpy_round:.2f}x -> "
          f"{'met' if fed_round <= 1.2 * numpy_round else 'not met'}")


def measure_psgd(args, watch: ProcessWatch) -> None:
    from fedray.privacy.vector_sum import vector_sum_parameters

    n, batch, d, step = args.sgd_users, args.sgd_batch, args.sgd_dim, 0.5
    steps = n // batch
    base = ["experiment=p_sgd_synthetic", f"num_rounds={steps}", f"participation.batch_size={batch}",
            f"data.spec.num_silos={n}", f"data.spec.dim={d}", f"algorithm.step_size={step}",
            f"algorithm.block_steps={args.block_steps}", f"evaluate_every={steps + 1}", "progress=false",
            "runtime.num_actors=2"]
    private = compose_plan(base + ["privacy.epsilon=4.0", "privacy.delta=1e-6", "privacy.l2_clip=1.0"])
    exact = compose_plan(base + ["privacy=none", "privacy.l2_clip=1.0"])
    pvec = vector_sum_parameters(4.0, 1e-6, d, batch, 1.0)
    print(f"\n## 2. P_SGD with P_vec per batch: n = {n:,} users, B = {batch:,}, T = {steps:,} steps, d = {d}, "
          f"eta = {step}, (eps, delta) = (4, 1e-6) per batch: g = {pvec.scale}, b = {pvec.noise_bits:,}, "
          f"p = {pvec.bit_probability:.6f}; fedray blocks of <= {args.block_steps} steps")

    before = watch.mark()
    result, stamps, _ = run_fedray(private)
    result_none, stamps_none, _ = run_fedray(exact)
    after = watch.mark()
    x, y = load_users(private)
    margin = private.loss.margin_clip
    rng = np.random.default_rng(SEED)
    numpy_start = watch.mark()
    m2 = [psgd_numpy(x, y, batch, steps, step, None, 1.0, margin, pvec, "M2", rng) for _ in range(3)]
    m3 = [psgd_numpy(x, y, batch, steps, step, None, 1.0, margin, pvec, "M3", rng) for _ in range(3)]
    none = [psgd_numpy(x, y, batch, steps, step, None, 1.0, margin, None, "none", rng) for _ in range(3)]
    numpy_done = watch.mark()
    m2_s, m3_s, none_s = (float(np.median([r[2] for r in runs])) for runs in (m2, m3, none))

    def steps_only(stamps_: list[float]) -> float:
        """The block steps' time scaled to all T steps: (last block end - first block end) over the
        steps after the first block (its end includes start-up)."""
        first_block = min(args.block_steps, n // 2 // batch, steps)
        return (stamps_[-1] - stamps_[0]) * steps / (steps - first_block) if len(stamps_) > 1 else float("nan")

    rows = [("numpy loop, per-user counts M2 (median of 3)", m2_s),
            ("fedray, steps only (block ends, scaled to T steps)", steps_only(stamps)),
            ("fedray, whole run (Ray actors, data of n users, steps, evaluation)", result.wall_time),
            ("numpy loop, M3 aggregate (d binomials per step; same law, less work)", m3_s)]
    table("With privacy (P_vec per batch): seconds per run", "s/run", rows, m2_s)
    rows = [("numpy loop, exact sums (median of 3)", none_s),
            ("fedray, steps only (block ends, scaled to T steps)", steps_only(stamps_none)),
            ("fedray, whole run", result_none.wall_time)]
    table("Without privacy (privacy=none, clip 1): seconds per run", "s/run", rows, none_s)
    print(f"fedray start-up to the end of its first block (time_to_first_round, includes "
          f"{min(args.block_steps, n // 2 // batch, steps)} steps): {result.time_to_first_round:.1f} s private, "
          f"{result_none.time_to_first_round:.1f} s none")
    for name, out in (("avg", 0), ("last", 1)):
        diff = np.max(np.abs(result_none.outputs[name][0, :, 0] - none[0][out]))
        print(f"privacy=none: largest |theta_{name}(fedray) - theta_{name}(numpy)| = {diff:.2e}")
    spread = step * math.sqrt(2.0 * steps) * sum_std(pvec, batch) / batch
    z = np.abs(result.outputs["last"][0, :, 0] - m2[0][1]) / spread
    print(f"private: max |theta_T(fedray) - theta_T(numpy M2)| / (eta sqrt(2T) std(sum)/B = {spread:.2e}) = "
          f"{z.max():.2f} (no feedback counted, so an upper-side yardstick)")
    print(load_line(watch, (before, after), (numpy_start, numpy_done)))
    ratio = steps_only(stamps) / m2_s
    print(f"target fedray <= 2x numpy per run: steps only {ratio:.2f}x -> {'met' if ratio <= 2 else 'not met'}; "
          f"whole run {result.wall_time / m2_s:.2f}x")


def measure_pgd(args, watch: ProcessWatch) -> None:
    from fedray.privacy.vector_sum import vector_sum_parameters

    n, d, rounds, step, radius = args.gd_users, args.gd_dim, args.gd_rounds, 0.5, 5.0
    private = compose_plan(pgd_overrides(n, d, rounds, step, radius, private=True))
    exact = compose_plan(pgd_overrides(n, d, rounds, step, radius, private=False))
    eps0, delta0 = check_pvec(private.protocol.resolved, 4.0, 1e-6, rounds)
    pvec = vector_sum_parameters(eps0, delta0, d, n, 1.0)
    print(f"\n## 3. P_GD with P_vec per round: n = {n:,} users, d = {d}, T = {rounds} rounds, eta = {step}, radius "
          f"{radius}; (eps, delta) = (4, 1e-6) for the run, per round ({eps0:.4g}, {delta0:.3g}): g = {pvec.scale}, "
          f"b = {pvec.noise_bits:,}, p = {pvec.bit_probability:.10f}")

    before = watch.mark()
    result, stamps, _ = run_fedray(private)
    result_none, stamps_none, _ = run_fedray(exact)
    after = watch.mark()
    x, y = load_users(private)
    margin = private.loss.margin_clip
    rng = np.random.default_rng(SEED)
    numpy_start = watch.mark()
    runs = {mode: [pgd_numpy(x, y, rounds, step, radius, 1.0, margin, pvec, mode, n, rng) for _ in range(3)]
            for mode in ("M2", "M3", "none")}
    numpy_done = watch.mark()
    per_run = {mode: float(np.median([sum(r[2]) for r in found])) for mode, found in runs.items()}

    def rounds_only(stamps_: list[float]) -> float:
        """Round ends after round 0 (whose end includes start-up), scaled to all T rounds."""
        return (stamps_[-1] - stamps_[0]) * rounds / (rounds - 1) if len(stamps_) > 1 else float("nan")

    rows = [("numpy loop, per-user counts M2 (median of 3)", per_run["M2"]),
            ("fedray, rounds only (round ends after round 0, scaled to T rounds)", rounds_only(stamps)),
            ("fedray, whole run (Ray actors, data, rounds, evaluation)", result.wall_time),
            ("numpy loop, M3 aggregate (d binomials per round; same law, less work)", per_run["M3"])]
    table("With privacy (P_vec per round): seconds per run", "s/run", rows, per_run["M2"])
    rows = [("numpy loop, exact sums (median of 3)", per_run["none"]),
            ("fedray, rounds only (scaled to T rounds)", rounds_only(stamps_none)),
            ("fedray, whole run", result_none.wall_time)]
    table("Without privacy (privacy=none, clip 1): seconds per run", "s/run", rows, per_run["none"])
    print(f"fedray start-up to the end of round 0 (time_to_first_round): {result.time_to_first_round:.1f} s private, "
          f"{result_none.time_to_first_round:.1f} s none; median round {np.median(np.diff(stamps)):.3g} s private, "
          f"{np.median(np.diff(stamps_none)):.3g} s none")
    reference = runs["none"][0]
    for name, out in (("avg", 0), ("last", 1)):
        diff = np.max(np.abs(result_none.outputs[name][0, :, 0] - reference[out]))
        print(f"privacy=none: largest |theta_{name}(fedray) - theta_{name}(numpy)| = {diff:.2e}")
    spread = step * math.sqrt(2.0 * rounds) * sum_std(pvec, n) / n
    z = np.abs(result.outputs["last"][0, :, 0] - runs["M2"][0][1]) / spread
    print(f"private: max |theta_T(fedray) - theta_T(numpy M2)| / (eta sqrt(2T) std(sum)/n = {spread:.2e}) = "
          f"{z.max():.2f} (no feedback counted, so an upper-side yardstick)")
    print(load_line(watch, (before, after), (numpy_start, numpy_done)))
    ratio = rounds_only(stamps) / per_run["M2"]
    print(f"target fedray <= 2x numpy per run: rounds only {ratio:.2f}x -> {'met' if ratio <= 2 else 'not met'}; "
          f"whole run {result.wall_time / per_run['M2']:.2f}x")


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", type=int, nargs="*", choices=(1, 2, 3), default=[1, 2, 3])
    parser.add_argument("--pvec-users", type=int, default=1_000_000)
    parser.add_argument("--pvec-dim", type=int, default=100)
    parser.add_argument("--pvec-rounds", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=65_536, help="users per numpy chunk in measurement 1")
    parser.add_argument("--sgd-users", type=int, default=1_000_000)
    parser.add_argument("--sgd-batch", type=int, default=1_000)
    parser.add_argument("--sgd-dim", type=int, default=10)
    parser.add_argument("--block-steps", type=int, default=100, help="fedray's P_SGD steps per Ray call")
    parser.add_argument("--gd-users", type=int, default=100_000)
    parser.add_argument("--gd-dim", type=int, default=10)
    parser.add_argument("--gd-rounds", type=int, default=50)
    args = parser.parse_args(argv)

    from fedray.resolvers import register

    register()
    started = time.perf_counter()
    print(f"numpy {np.__version__}; 2 silo-group actors; started {time.strftime('%Y-%m-%d %H:%M:%S')}; "
          f"load average {load_average()}")
    with ProcessWatch() as watch:
        for number, measure in ((1, measure_pvec), (2, measure_psgd), (3, measure_pgd)):
            if number in args.only:
                measure(args, watch)
    print(f"\nwall time of this invocation: {time.perf_counter() - started:.0f} s; load average at the end "
          f"{load_average()}")


if __name__ == "__main__":
    main()
