"""The example protocol written outside fedray (examples/dp_fedavg) passes fedray.testing's checks,
and runs from the command line in a directory outside the checkout, shipped to the Ray workers by
``runtime.py_modules``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from fedray.errors import ConfigError
from fedray.testing import ProtocolCase, checks
from tests.conftest import REPO, shared_ray_address

SEARCHPATH = "hydra.searchpath=[pkg://examples.dp_fedavg.conf]"
# 6 clients of 100 noisy-label records (a well-conditioned logistic problem), 3 per round.
SMALL = (SEARCHPATH, "algorithm=dp_fedavg", "data=synthetic", "data.spec.num_silos=6", "data.spec.samples_per_silo=100",
         "data.spec.dim=4", "data.spec.test_samples_per_silo=20", "+data.spec.noise=2.0", "privacy=central_user",
         "participation.silos_per_round=3", "num_rounds=30")


def neighbours(plan):
    """Worst case for one client: its clipped delta is +C e_1 on D and -C e_1 on D' (the others
    send 0): the sum of deltas moves by 2C, the replace-one sensitivity."""
    clip = plan.protocol.resolved["l2_clip"]
    d = np.zeros((plan.shape.num_silos, plan.shape.dim, plan.loss.num_outputs))
    d_prime = d.copy()
    d[0, 0, 0], d_prime[0, 0, 0] = clip, -clip
    return d, d_prime


def half_noise(plan):
    """The same plan and ledger, with a protocol that adds half the noise."""
    algorithm = plan.protocol.algorithm
    half = replace(algorithm.noise, noise_multiplier=algorithm.noise.noise_multiplier / 2)
    return replace(plan, protocol=replace(plan.protocol, algorithm=replace(algorithm, noise=half)))


# One round, every client: the ledger's claim is the round's epsilon, 2 (RDP; the Gaussian's exact
# epsilon is 1.84, and 4.0 with half the noise). With 200,000 draws per neighbour the audit's lower
# bound on half the noise is 2.51 here and 2.93 in the Poisson case (2.42 and 2.01 at 100,000: too close).
CASE = ProtocolCase(SMALL, privacy_round=("num_rounds=1", "participation.silos_per_round=6", "privacy.epsilon=2"),
                    neighbours=neighbours, weaken=half_noise, audit_draws=200_000)
SLOW = {"audit"}


def add_one(plan):
    """Worst case under add/remove: D' adds a client whose clipped delta is C e_1 (on D it is absent,
    sending nothing): the sum moves by C."""
    d, d_prime = neighbours(plan)
    d_prime[0, 0, 0] = 0.0
    return d_prime, d


# Poisson sampling (q = 0.5 over 30 rounds); the privacy round takes every client (q = 1), eps = 2.
POISSON = ProtocolCase(tuple(o for o in SMALL if not o.startswith("participation.")) + (
                           "participation=poisson", "participation.probability=0.5"), privacy_round=("num_rounds=1", "participation.probability=1.0",
                                                                         "privacy.epsilon=2"),
                       neighbours=add_one, weaken=half_noise, audit_draws=200_000)


@pytest.mark.parametrize("name,check", [pytest.param(n, c, marks=[pytest.mark.slow] if n != "noise_matches_ledger" else [], id=n)
                                        for n, c in checks(POISSON) if n in ("noise_matches_ledger", "audit", "deterministic")])
def test_fedray_testing_check_with_poisson_sampling(name, check):
    found = check()
    if found:
        print(name, found)


@pytest.mark.slow
def test_poisson_add_remove_needs_at_most_half_the_noise_of_replace_one():
    """The same budget (eps = 1, 30 rounds, 3 of 6 clients expected): sigma = z C under add/remove
    with Poisson sampling against z' 2C under replace-one with K of N (measured 5.64 against 22.77:
    the sensitivity halves and dp-accounting's RDP bound for sampling without replacement is the
    looser one)."""
    from fedray.testing import _plan

    uniform, poisson = _plan(CASE), _plan(POISSON)
    ratio = poisson.protocol.resolved["noise_std"] / uniform.protocol.resolved["noise_std"]
    print(f"noise std: poisson add/remove {poisson.protocol.resolved['noise_std']:.3f}, "
          f"uniform replace-one {uniform.protocol.resolved['noise_std']:.3f}, ratio {ratio:.3f}")
    assert poisson.privacy.relation == "add_remove" and ratio < 0.5


@pytest.mark.same_worker("dp_fedavg_small")    # "contract" plans SMALL, as tests/privacy/test_server_noise.py does
@pytest.mark.parametrize("name,check", [pytest.param(n, c, marks=[pytest.mark.slow] if n in SLOW else [], id=n)
                                        for n, c in checks(CASE)])
def test_fedray_testing_check(name, check):
    found = check()
    if found:
        print(name, found)


def test_the_kit_catches_a_protocol_whose_noise_the_ledger_does_not_price():
    """noise_matches_ledger fails on the half-noise variant (the ledger prices z, it adds z / 2)."""
    from fedray import testing

    weak = ProtocolCase(SMALL, privacy_round=CASE.privacy_round, neighbours=neighbours)
    original = testing._plan
    testing._plan = lambda case, *extra: half_noise(original(case, *extra))
    try:
        with pytest.raises(AssertionError, match="the ledger prices a noise multiplier"):
            testing.noise_matches_ledger(weak)
    finally:
        testing._plan = original


def test_a_same_named_builtin_config_is_an_error(tmp_path):
    """A searchpath whose algorithm/isrl_dp_mb_sgd.yaml would lose to fedray's is refused."""
    import fedray

    (tmp_path / "algorithm").mkdir()
    (tmp_path / "algorithm" / "isrl_dp_mb_sgd.yaml").write_text("_target_: mine.Protocol\nname: mine\n")
    with pytest.raises(ConfigError, match="algorithm/isrl_dp_mb_sgd.yaml is fedray's too"):
        fedray.config([f"hydra.searchpath=[file://{tmp_path}]", "algorithm=isrl_dp_mb_sgd"])


def test_the_command_line_refuses_a_same_named_config_before_planning(tmp_path):
    (tmp_path / "algorithm").mkdir()
    (tmp_path / "algorithm" / "isrl_dp_mb_sgd.yaml").write_text("_target_: mine.Protocol\nname: mine\n")
    done = subprocess.run([sys.executable, "-m", "fedray", f"hydra.searchpath=[file://{tmp_path}]",
                           "algorithm=isrl_dp_mb_sgd", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "algorithm/isrl_dp_mb_sgd.yaml is fedray's too" in done.stdout, done.stdout[-2000:]


def test_py_modules_must_be_importable_packages():
    import fedray

    with pytest.raises(ConfigError, match="runtime.py_modules"):
        fedray.make_plan([*SMALL, "runtime.py_modules=[no_such_package_here]"])


@pytest.mark.slow        # a `python -m fedray` with Ray and MLflow
def test_runs_from_the_command_line_outside_the_checkout(tmp_path, ray_local, monkeypatch):
    """A copy of the example renamed to ``userpkg`` in a folder outside the checkout: the driver
    finds it in its working directory, the Ray workers through ``runtime.py_modules``. The run joins
    the test run's shared local Ray (a job's runtime_env ships the package there as to a cluster's)."""
    package = tmp_path / "userpkg"
    shutil.copytree(REPO / "examples" / "dp_fedavg", package, ignore=shutil.ignore_patterns("__pycache__"))
    for path in package.rglob("*.py"):
        path.write_text(path.read_text().replace("examples.dp_fedavg", "userpkg"))
    config = package / "conf" / "algorithm" / "dp_fedavg.yaml"
    config.write_text(config.read_text().replace("examples.dp_fedavg", "userpkg"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}       # fedray itself; the user's package is not on it
    overrides = [a.replace("examples.dp_fedavg", "userpkg") for a in SMALL] + [
        "num_rounds=3", "runtime.py_modules=[userpkg]", "runtime.num_actors=2",
        f"runtime.address={shared_ray_address(ray_local, monkeypatch)}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", "progress=false"]
    done = subprocess.run([sys.executable, "-m", "fedray", *overrides], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"dp_fedavg", done.stdout), done.stdout[-2000:]


@pytest.mark.slow
def test_py_modules_ship_the_package_to_every_worker(tmp_path, ray_local, monkeypatch):
    """``runtime.py_modules`` reaches the workers as Ray's shipped copy (what a multi-node cluster
    needs; on one machine Ray also hands the workers the driver's ``sys.path``). The script joins
    the test run's shared local Ray, as a driver joins a cluster."""
    shutil.copytree(REPO / "examples" / "dp_fedavg", tmp_path / "shipped_pkg", ignore=shutil.ignore_patterns("__pycache__"))
    for path in (tmp_path / "shipped_pkg").rglob("*.py"):
        path.write_text(path.read_text().replace("examples.dp_fedavg", "shipped_pkg"))
    script = (f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
              "import ray\n"
              "from fedray.runtime.driver import connect\n"
              "import shipped_pkg; sys.path.pop(0)\n"       # found here, then off the path Ray forwards
              f"connect({{'py_modules': ['shipped_pkg'], 'address': {shared_ray_address(ray_local, monkeypatch)!r}}})\n"
              "def where():\n"
              "    import shipped_pkg\n"
              "    return shipped_pkg.__file__\n"
              "print('WORKER', ray.get(ray.remote(where).remote()))\n"
              "ray.shutdown()\n")
    (tmp_path / "elsewhere").mkdir()
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path / "elsewhere", env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = done.stdout.split("WORKER ", 1)[1].strip()
    assert "runtime_resources" in found and not found.startswith(str(tmp_path)), found
