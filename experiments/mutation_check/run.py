"""Hand-written mutants of fedray's privacy-critical code, each run against the fast tier's tests.

Issue 40 item 4: does the fast tier notice when the privacy arithmetic is wrong? Each mutant is
one textual change to one module (noise calibration, ledger pricing and accounting, participation
and record sampling, the shuffler, P_vec, the Gaussian sums), written as (file, old text, new
text). The script copies the clone's tracked files into a temporary folder once, applies one
mutant at a time to that copy (the working tree is never touched), runs the mutant's test files
there (``python -m pytest -x``: the fast tier, ``slow`` tests deselected by tests/conftest.py) and
records the first failing test, or "survived". Every mutant's old text must occur exactly once.

Usage (from the clone's root; one pytest at a time, about 10-20 minutes on 2 busy cores)::

    python experiments/mutation_check/run.py                 # every mutant; writes results.md
    python experiments/mutation_check/run.py gauss-classic-log   # only the named mutants (no file written)
    python experiments/mutation_check/run.py --table         # results.md again from results.csv

A survivor is either killed by a new test or argued harmless in ``HARMLESS`` below, which the
table prints next to it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PRIVACY = "tests/privacy"


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str           # module, relative to the clone
    old: str            # text that occurs exactly once in the module
    new: str
    what: str           # the bug it stands for
    tests: tuple        # test files or folders, most specific first (pytest -x stops at the first failure)


MUTANTS = [
    # Gaussian calibration (fedray/privacy/gaussian.py, gaussian_sum.py, mechanisms.py)
    Mutant("gauss-profile-sensitivity", "fedray/privacy/gaussian.py",
           "    s = sensitivity / sigma\n", "    s = 0.5 * sensitivity / sigma\n",
           "the exact Gaussian profile reads half the sensitivity (sigma too small by 2)",
           ("tests/privacy/test_gaussian.py", "tests/privacy/test_gaussian_sum.py", PRIVACY)),
    Mutant("gauss-classic-log", "fedray/privacy/gaussian.py",
           "math.log(1.25 / delta)", "math.log(1.0 / delta)",
           "classic sigma with ln(1/delta) instead of ln(1.25/delta)",
           ("tests/privacy/test_gaussian.py", PRIVACY)),
    Mutant("gauss-private-side", "fedray/privacy/gaussian.py",
           "while gaussian_delta(sigma, sensitivity, epsilon) > delta:", "while False:",
           "the root of the profile is not moved to the private side",
           ("tests/privacy/test_gaussian.py", PRIVACY)),
    Mutant("sum-release-sensitivity", "fedray/privacy/gaussian_sum.py",
           "return analytic_sigma(epsilon, delta, 2.0 * l2_bound)", "return analytic_sigma(epsilon, delta, l2_bound)",
           "a Gaussian sum calibrated to add/remove sensitivity L instead of replace-one 2 L",
           ("tests/privacy/test_gaussian_sum.py", PRIVACY)),
    Mutant("sum-pan-private-constant", "fedray/privacy/gaussian_sum.py",
           "math.sqrt(8.0 * math.log(2.0 / delta))", "math.sqrt(2.0 * math.log(2.0 / delta))",
           "pan-private AC-SA's zeta with 2 ln(2/delta) instead of 8 ln(2/delta)",
           ("tests/privacy/test_gaussian_sum.py", PRIVACY)),
    Mutant("sum-central-half-noise", "fedray/privacy/gaussian_sum.py",
           "return total + self.sigma * self._noise(total, _required(keys)).sum(axis=1)",
           "return total + 0.5 * self.sigma * self._noise(total, _required(keys)).sum(axis=1)",
           "the central sum adds half the calibrated noise",
           ("tests/privacy/test_gaussian_sum.py", PRIVACY)),
    Mutant("sum-local-half-noise", "fedray/privacy/gaussian_sum.py",
           "block + self.sigma * rng.standard_normal(block.shape)",
           "block + 0.5 * self.sigma * rng.standard_normal(block.shape)",
           "each user adds half its calibrated noise (local DP)",
           ("tests/privacy/test_gaussian_sum.py", PRIVACY)),
    Mutant("clip-sensitivity", "fedray/privacy/mechanisms.py",
           "return 2.0 * self.l2_clip / records", "return self.l2_clip / records",
           "replace-one sensitivity of a clipped mean taken as C/K instead of 2C/K",
           (PRIVACY, "tests/protocols/isrl_dp")),
    Mutant("silo-half-noise", "fedray/privacy/mechanisms.py",
           "return x + std * standard_normal, {", "return x + 0.5 * std * standard_normal, {",
           "the silo adds half the noise its event states",
           (PRIVACY, "tests/protocols/isrl_dp")),
    Mutant("server-half-noise", "fedray/privacy/mechanisms.py",
           "return x + std.reshape(std.shape + (1,) * (x.ndim - 1)) * normals, {",
           "return x + 0.5 * std.reshape(std.shape + (1,) * (x.ndim - 1)) * normals, {",
           "the trusted server adds half the noise its event states (central user-level DP-SGD, DP-FedAvg)",
           ("tests/privacy/test_server_noise.py", PRIVACY)),
    # Accounting (fedray/privacy/accounting.py)
    Mutant("acct-drop-releases", "fedray/privacy/accounting.py",
           "total = int(releases) * int(count)", "total = int(count)",
           "a participation of K releases (Local SGD) charged as one release",
           ("tests/privacy/test_accounting.py", PRIVACY)),
    Mutant("acct-sampling-rate", "fedray/privacy/accounting.py",
           "SampledWithoutReplacementDpEvent(int(dataset_size), int(sample_size), gaussian)",
           "SampledWithoutReplacementDpEvent(int(dataset_size), max(1, int(sample_size) // 2), gaussian)",
           "the event claims half the sampling rate the silo uses",
           ("tests/privacy/test_accounting.py", PRIVACY)),
    Mutant("acct-rdp-count-off-by-one", "fedray/privacy/accounting.py",
           "return float(epsilons[count - 1])", "return float(epsilons[max(count - 2, 0)])",
           "the RDP ledger prices c participations as c - 1",
           ("tests/privacy/test_accounting.py", PRIVACY)),
    Mutant("acct-rdp-no-composition", "fedray/privacy/accounting.py",
           "compute_epsilon(orders, count * curve, delta)", "compute_epsilon(orders, curve, delta)",
           "RDP curves are not multiplied by the count (no composition)",
           ("tests/privacy/test_accounting.py", PRIVACY)),
    Mutant("acct-calibrate-one-participation", "fedray/privacy/accounting.py",
           "return participation_event(z, sample_size, dataset_size, releases, participations)",
           "return participation_event(z, sample_size, dataset_size, releases, 1)",
           "the accountant calibration prices one participation instead of all of them",
           ("tests/privacy/test_accounting.py", PRIVACY)),
    Mutant("acct-full-batch-sampled", "fedray/privacy/accounting.py",
           "if sample_size >= dataset_size:", "if sample_size >= dataset_size + 1:",
           "a full batch written as a sampled event of rate 1",
           ("tests/privacy/test_accounting.py", PRIVACY)),
    Mutant("events-full-batch-sampled", "fedray/privacy/event_data.py",
           "    if sample_size >= dataset_size:\n        return event", "    if sample_size >= dataset_size + 1:\n        return event",
           "the ledger's event data writes a full batch as a sampled event of rate 1",
           ("tests/privacy/test_accounting.py", "tests/privacy/test_mechanism_events.py", PRIVACY)),
    Mutant("calibrated-half-noise", "fedray/privacy/mechanisms.py",
           "return x + scale * standard_normal, {", "return x + 0.5 * scale * standard_normal, {",
           "a formula-calibrated server step (Gaussian SMD, output perturbation) adds half the noise it is priced for",
           ("tests/privacy/test_calibrated_noise.py", PRIVACY)),
    Mutant("theorem-covers-half-noise", "fedray/privacy/mechanisms.py",
           "covered = np.all(np.asarray(self.noise_std) >= np.asarray(self.required_std), axis=1)",
           "covered = np.all(np.asarray(self.noise_std) >= 0.5 * np.asarray(self.required_std), axis=1)",
           "a theorem-priced step (phased SGD, Alg. 3, SCOutputPert) keeps its claim with half the required noise",
           ("tests/privacy/test_calibrated_noise.py", PRIVACY)),
    # Ledger pricing (fedray/privacy/ledger.py)
    Mutant("ledger-parallel-sampling-credit", "fedray/privacy/ledger.py",
           "sample_size = n if self.parallel_composition else min(self.sample_size, n)",
           "sample_size = min(self.sample_size, n)",
           "a one-pass (parallel-composition) silo still gets sampling credit",
           ("tests/privacy/test_accounting.py", "tests/privacy/test_ledger.py", PRIVACY)),
    Mutant("ledger-rounds-all-not-any", "fedray/privacy/ledger.py",
           "charge.any(axis=1, keepdims=True)", "charge.all(axis=1, keepdims=True)",
           "a federation-wide round charges only when every unit took part",
           ("tests/privacy/test_ledger.py", PRIVACY)),
    Mutant("ledger-guard-slack", "fedray/privacy/ledger.py",
           "if np.all(excess <= 1e-9):", "if np.all(excess <= 1e-1):",
           "the budget guard admits plans 0.1 over the target epsilon",
           ("tests/privacy/test_ledger.py", PRIVACY)),
    Mutant("ledger-delta-guard-off", "fedray/privacy/ledger.py",
           "if np.any(over > 1e-15):", "if np.any(over > 1e-3):",
           "the guard ignores a delta that grows past the target",
           ("tests/privacy/test_ledger.py", PRIVACY)),
    Mutant("ledger-releases-per-participation", "fedray/privacy/ledger.py",
           "else counts * self.releases_per_participation", "else counts",
           "a plan charges one release per participation whatever the program's phases",
           ("tests/privacy/test_ledger.py", PRIVACY, "tests/protocols/user_level")),
    # Composition (fedray/privacy/composition.py)
    Mutant("comp-advanced-sqrt", "fedray/privacy/composition.py",
           "epsilon = np.sqrt(2 * count * np.log(1 / delta_slack)) * epsilon0 + count * epsilon0 * np.expm1(epsilon0)",
           "epsilon = np.sqrt(count * np.log(1 / delta_slack)) * epsilon0 + count * epsilon0 * np.expm1(epsilon0)",
           "advanced composition without the factor 2 under the root",
           ("tests/privacy/test_composition.py", PRIVACY)),
    Mutant("comp-advanced-delta", "fedray/privacy/composition.py",
           "return epsilon, count * delta0 + delta_slack", "return epsilon, delta0 + delta_slack",
           "advanced composition's delta without the k delta0 term",
           ("tests/privacy/test_composition.py", PRIVACY)),
    Mutant("comp-table-misplaced", "fedray/privacy/composition.py",
           "position[distinct] = np.arange(distinct.size)", "position[distinct] = np.arange(distinct.size)[::-1]",
           "a large count table's prices gathered onto the cells of other counts",
           ("tests/privacy/test_composition.py", PRIVACY)),
    Mutant("comp-table-per-replica", "fedray/privacy/composition.py",
           "if all(np.ndim(getattr(self, spec.name)) == 0 for spec in fields(self)):", "if True:",
           "per-replica parameters priced by one table of counts, as if every replica had the first one's",
           ("tests/privacy/test_composition.py", PRIVACY)),
    # Participation and record sampling (fedray/core/sampling.py, fedray/rng.py, isrl_dp)
    Mutant("sample-uniform-count-off-by-one", "fedray/core/sampling.py",
           "num_units:\n            return np.full((len(repetitions), num_units), num_rounds, dtype=np.int64)",
           "num_units:\n            return np.full((len(repetitions), num_units), num_rounds - 1, dtype=np.int64)",
           "everyone-every-round participation counted one round short",
           ("tests/core/test_sampling.py", PRIVACY)),
    Mutant("sample-poisson-certain-count-off-by-one", "fedray/core/sampling.py",
           "1.0:\n            return np.full((len(repetitions), num_units), num_rounds, dtype=np.int64)",
           "1.0:\n            return np.full((len(repetitions), num_units), num_rounds - 1, dtype=np.int64)",
           "Poisson participation at probability 1 counted one round short",
           ("tests/core/test_sampling.py", PRIVACY)),
    Mutant("sample-accumulated-short", "fedray/core/sampling.py",
           "for r in range(num_rounds):\n        counts +=", "for r in range(num_rounds - 1):\n        counts +=",
           "random samplers' planned counts miss the last round",
           ("tests/core/test_sampling.py", PRIVACY)),
    Mutant("sample-records-with-replacement", "fedray/protocols/isrl_dp/minibatch_sgd.py",
           "idx = draws.without_replacement(silos.sizes, self.batch_size, by_repetition=True)",
           "idx = draws.with_replacement(silos.sizes, self.batch_size, by_repetition=True)",
           "MB-SGD samples records with replacement while its event says without",
           ("tests/protocols/isrl_dp/test_minibatch_sgd.py", "tests/protocols/isrl_dp", PRIVACY)),
    Mutant("sample-epoch-overlap", "fedray/rng.py",
           "permutation[..., r * k:(r + 1) * k]", "permutation[..., r:r + k]",
           "one-pass batches overlap (records reused under parallel composition)",
           ("tests/test_rng.py", "tests/protocols/isrl_dp", PRIVACY)),
    # The shuffler (fedray/runtime/shuffler.py)
    Mutant("shuffler-no-permutation", "fedray/runtime/shuffler.py",
           "out[p, : rows.size] = messages[p, rows[perm]]", "out[p, : rows.size] = messages[p, rows]",
           "the shuffler forwards messages in sender order",
           ("tests/runtime/test_shuffler.py", PRIVACY)),
    Mutant("shuffler-sum-ignores-mask", "fedray/runtime/shuffler.py",
           "out[:, 0] = (messages * mask.reshape(mask.shape + (1,) * len(message_shape))).sum(axis=1)",
           "out[:, 0] = messages.sum(axis=1)",
           "the summing shuffler adds the messages of non-participants",
           ("tests/runtime/test_shuffler.py", PRIVACY)),
    # P_vec (fedray/privacy/vector_sum.py, vector_sum_tight.py)
    Mutant("pvec-eps-hat", "fedray/privacy/vector_sum.py",
           "eps_hat = epsilon / (18.0 * math.sqrt(log_gamma))", "eps_hat = epsilon / (9.0 * math.sqrt(log_gamma))",
           "P_vec's per-coordinate epsilon twice too large",
           ("tests/privacy/test_vector_sum.py", PRIVACY)),
    Mutant("pvec-delta-hat", "fedray/privacy/vector_sum.py",
           "    delta_hat = delta / (d + 1)\n", "    delta_hat = delta / d\n",
           "P_vec splits delta over d coordinates, forgetting the slack gamma",
           ("tests/privacy/test_vector_sum.py", PRIVACY)),
    Mutant("pvec-half-bit-probability", "fedray/privacy/vector_sum.py",
           "p = 90.0 * scale**2 * log_two / (noise_bits * eps_hat**2 * n)",
           "p = 45.0 * scale**2 * log_two / (noise_bits * eps_hat**2 * n)",
           "P_vec's noise bits with half the probability (half the binomial noise)",
           ("tests/privacy/test_vector_sum.py", PRIVACY)),
    Mutant("pvec-scale-range", "fedray/privacy/vector_sum.py",
           "math.ceil(max(2.0 * l2_bound * math.sqrt(n), math.sqrt(d), 4.0))",
           "math.ceil(max(l2_bound * math.sqrt(n), math.sqrt(d), 4.0))",
           "P_vec's fixed-point scale g from Delta2 instead of 2 Delta2",
           ("tests/privacy/test_vector_sum.py", PRIVACY)),
    Mutant("pvec-no-projection", "fedray/privacy/vector_sum.py",
           "x = x * np.minimum(1.0, params.l2_bound / norms)", "x = x * 1.0",
           "P_vec does not project inputs onto the Delta2 ball (only per-coordinate clipping)",
           ("tests/privacy/test_vector_sum.py", PRIVACY)),
    Mutant("pvec-dropout-epsilon", "fedray/privacy/vector_sum.py",
           "return params.epsilon * params.num_users / num_arrived", "return params.epsilon",
           "drop-outs do not raise the invocation's epsilon",
           ("tests/privacy/test_vector_sum.py", PRIVACY)),
    Mutant("pvec-dropout-debias", "fedray/privacy/vector_sum.py",
           "debias = params.noise_mean * n_u / params.num_users", "debias = params.noise_mean",
           "the analyzer debiases with n instead of the users that arrived",
           ("tests/privacy/test_vector_sum.py", PRIVACY)),
    Mutant("pvec-tight-shift", "fedray/privacy/vector_sum_tight.py",
           "math.floor(math.sqrt(dim) * scale) + dim))", "math.floor(math.sqrt(dim) * scale)))",
           "the tight calibration's l1 bound on rounding shifts forgets the +d of the rounding",
           ("tests/privacy/test_vector_sum_tight.py", PRIVACY)),
    # P_vec over T rounds (fedray/privacy/vector_sum_rounds.py)
    Mutant("pvec-rounds-not-composed", "fedray/privacy/vector_sum_rounds.py",
           "return unit_shift_count(dim, scale) * int(num_rounds), int(trials) // int(scale)",
           "return unit_shift_count(dim, scale), int(trials) // int(scale)",
           "P_GD's T rounds of P_vec priced as one round (K = L instead of L T unit pairs)",
           ("tests/privacy/test_vector_sum_rounds.py", PRIVACY)),
    Mutant("pvec-rounds-no-lower-tail", "fedray/privacy/vector_sum_rounds.py",
           "    while z > 1:", "    while False:",
           "the moment bound leaves out the binomial's mass below the summed window (no longer an upper bound)",
           ("tests/privacy/test_vector_sum_rounds.py", PRIVACY)),
]

# Mutants that survive and why that is harmless (name -> argument). Filled in from the runs.
HARMLESS: dict[str, str] = {}

# What the first full run found, and what was done about it.
HISTORY = """The first full run (2026-11-28, before the two tests named here existed) killed 34 of 36. Survivors:
ledger-guard-slack (no fast test put a plan a little over its budget; only the slow
test_budgets refusal of 3.003 against 3 did), killed since by
tests/privacy/test_ledger.py::test_the_guard_refuses_an_overspend_of_a_thousandth_and_admits_the_target_itself;
pvec-tight-shift (no test pinned L = min(d g, floor(sqrt(d) g) + d) against encodings), killed since by
tests/privacy/test_vector_sum_tight.py::test_the_unit_shift_count_covers_encodings_that_differ_by_more_than_sqrt_d_g.

The second full run (after the fast tier left its Ray integration tests to the whole suite, and
the ledger came to price the silos' own noise events) killed 35 of 37. sum-central-half-noise had
matched the pan-private intruder view once the central release moved to round keys; re-pointed at
the release, it is killed. events-full-batch-sampled (new: the ledger's event data) survived: no
test priced a full batch through a ledger; killed since by the same full-batch test, which now
checks the ledger's event and epsilon too.

The third full run (after the fast tier stopped calibrating by the RDP accountant where the
calibration was not the subject, on a busy machine) killed 37 of 37. Then the trusted server's
Gaussian step became a mechanism value the ledger prices (central user-level DP-SGD, item-level
DP-SGD, DP-FedAvg): server-half-noise was added and run alone (killed), and the federation-wide
charge, which the new accountants had copied twice, became one rule (a mixin) that
ledger-rounds-all-not-any mutates (run alone: killed). Then the Gaussian of the formula- and
theorem-priced central protocols (Gaussian SMD, output perturbation; phased SGD, Alg. 3,
SCOutputPert) became mechanism values their ledgers price: calibrated-half-noise and
theorem-covers-half-noise were added and run alone (both killed).

The fourth full run (2026-11-29, after tests that plan one RDP calibration were dealt to one
xdist worker and test_server_noise's Poisson route was computed once per replica and count; the
2-core machine shared with two other sessions, load 1.8-7.4) killed 41 of 41, each by the same
first failing test as before; baseline 251 s, all mutants 1,024 s.

The fifth full run (2026-11-29, after the P_vec rounds' moments were summed one order at a time:
the same bits) added two mutants of fedray/privacy/vector_sum_rounds.py, the T rounds priced as
one and the moment bound without its lower tail; it killed 43 of 43, the 41 older ones each by
the same first failing test as in the fourth run; baseline 77 s, all mutants 400 s on an
otherwise idle 2-core machine.

The sixth full run (2026-11-29, after composition.py began pricing a large table of counts once
per distinct count, the same bits, and the ledger's plan began leaving counts as they are when a
participation is one release) added two mutants of that table, a gather onto the wrong counts and
per-replica parameters priced as one; the ledger mutant was rewritten for its new line. It killed
45 of 45, the 43 older ones each by the same first failing test as in the fifth run; baseline
62 s, all mutants 263 s on an otherwise idle 2-core machine.
"""


def tracked_copy(target: Path) -> None:
    """The clone's tracked files (and not-yet-committed ones, as the working tree has them)."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout.splitlines()
    for name in names:
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def run_tests(copy: Path, tests: tuple) -> tuple[int, str, float]:
    env = dict(os.environ, PYTHONPATH=str(copy))
    env.pop("FEDRAY_CACHE_DIR", None)       # tests/conftest.py gives each session a fresh store
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                           "--durations=0", "-o", "addopts=-ra", *tests],
                          cwd=copy, env=env, capture_output=True, text=True, timeout=1800)
    return done.returncode, done.stdout + done.stderr, time.perf_counter() - start


def first_failure(output: str) -> str:
    match = re.search(r"^(?:FAILED|ERROR) (\S+)", output, flags=re.MULTILINE)
    if match:
        return match.group(1)
    return "error: " + (output.strip().splitlines() or ["no output"])[-1][:120]


RESULTS = HERE / "results.csv"


def _done() -> dict:
    """Mutants already run (results.csv), so an interrupted check resumes where it stopped."""
    if not RESULTS.exists():
        return {}
    rows = [line.split(",", 2) for line in RESULTS.read_text().splitlines()[1:] if line]
    return {name: (float(seconds), verdict) for name, seconds, verdict in rows}


def main(names: list[str]) -> None:
    table_only = names == ["--table"]          # rebuild results.md from results.csv, run nothing
    names = [] if table_only else names
    chosen = [m for m in MUTANTS if not names or m.name in names]
    done = {} if names else _done()
    if table_only:
        return write_table(chosen, done, names)
    if not names and not RESULTS.exists():
        RESULTS.write_text("mutant,seconds,verdict\n")
    with tempfile.TemporaryDirectory(prefix="fedray-mutants-") as folder:
        copy = Path(folder)
        tracked_copy(copy)
        for mutant in chosen:                      # every patch must apply before anything runs
            text = (copy / mutant.path).read_text()
            if text.count(mutant.old) != 1:
                raise SystemExit(f"mutant {mutant.name}: its text occurs {text.count(mutant.old)} times in {mutant.path}")
        if not names and "baseline" not in done:
            code, output, seconds = run_tests(copy, tuple(dict.fromkeys(t for m in chosen for t in m.tests)))
            if code != 0:
                raise SystemExit(f"the unmutated copy fails its tests:\n{output[-3000:]}")
            with RESULTS.open("a") as out:
                out.write(f"baseline,{seconds:.0f},passes\n")
            print(f"baseline: the unmutated copy passes ({seconds:.0f} s)", flush=True)
        for mutant in chosen:
            if mutant.name in done:
                continue
            module = copy / mutant.path
            original = module.read_text()
            module.write_text(original.replace(mutant.old, mutant.new))
            try:
                # The mutant's own test file first (one collection of one file, usually enough), then
                # the rest of its tests only if that file passes.
                code, output, seconds = run_tests(copy, mutant.tests[:1])
                if code == 0 and len(mutant.tests) > 1:
                    code, output, more = run_tests(copy, mutant.tests[1:])
                    seconds += more
            finally:
                module.write_text(original)
            verdict = "survived" if code == 0 else first_failure(output)
            done[mutant.name] = (seconds, verdict)
            if not names:
                with RESULTS.open("a") as out:
                    out.write(f"{mutant.name},{seconds:.0f},{verdict}\n")
            print(f"{mutant.name:36s} {seconds:6.0f} s  {verdict}", flush=True)
    write_table(chosen, done, names)


def write_table(chosen: list, done: dict, names: list) -> None:
    rows = [(m, *done[m.name][::-1]) for m in chosen if m.name in done]
    killed = sum(verdict != "survived" for _, verdict, _ in rows)
    lines = [f"# Mutation check of the privacy-critical modules ({killed} of {len(rows)} killed)", "",
             "Command: `python experiments/mutation_check/run.py` (from the clone's root; it writes this file "
             "and results.csv). Each mutant runs its own test file, then, if that passes, the rest of its "
             "tests, in the fast tier with `pytest -x`; seconds are wall time on a 2-core machine.", "",
             "| mutant | module | the bug it stands for | killed by (first failing test) | seconds |",
             "|---|---|---|---|---|"]
    for mutant, verdict, seconds in rows:
        if verdict == "survived":
            verdict = f"survived: {HARMLESS.get(mutant.name, 'NOT ARGUED')}"
        lines.append(f"| {mutant.name} | {mutant.path} | {mutant.what} | {verdict} | {seconds:.0f} |")
    table = "\n".join(lines + ["", HISTORY])
    print(table)
    if not names:
        (HERE / "results.md").write_text(table)


if __name__ == "__main__":
    main(sys.argv[1:])
