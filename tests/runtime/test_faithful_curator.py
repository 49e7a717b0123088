"""runtime.faithful for trusted curators: the curator's noise, vertex draws and selections come
from secret words of OS entropy drawn at planning (``fedray.plan.secret_words``), so the run
record MLflow holds (config, seed, metrics, tags, artifacts) does not let anyone recompute them,
while simulations keep every bit they had.

The attacker of the second test holds everything the tracked run wrote and the released output,
and replays the logged configuration as a simulation on the data it suspects: if the replay
gives the release bit for bit, the release is a deterministic function of the data (neighbours
are told apart with certainty). Before the secret words, every family below failed it."""

import hashlib
import json
import re

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from fedray.core.protocol import RoundKeys
from fedray.plan import SECRET_WORDS, make_plan
from fedray.rng import Stream
from fedray.runtime.driver import run
from fedray.tracking import tracker_from_config
from tests.conftest import compose, mlflow_store

FAMILIES = {
    # seed 003: user-level output perturbation (a driver-side program)
    "output_perturbation": ["experiment=output_perturbation_synthetic", "data.spec.num_silos=300",
                            "data.spec.samples_per_silo=8", "data.spec.dim=4", "+data.spec.noise=1.0"],
    # seed 001's Alg. 1: the curator's vertex draws
    "smd": ["experiment=smd_bilinear", "data.spec.num_samples=3000", "data.spec.dim=8", "repetitions=2",
            "evaluate_every=1000"],
    # seed 000's central Gaussian baseline (P_SGD, the curator's noise on each batch's sum)
    "central_gaussian": ["experiment=p_sgd_synthetic", "data.spec.num_silos=600", "data.spec.dim=3",
                         "participation.batch_size=7", "num_rounds=80", "evaluate_every=25",
                         "privacy=central_gaussian"],
    # seed 000's pan-private AC-SA (two fresh draws per batch)
    "pan_private": ["experiment=p_sgd_synthetic", "algorithm=p_agd", "data.spec.num_silos=600", "data.spec.dim=3",
                    "participation.batch_size=7", "num_rounds=80", "evaluate_every=25", "algorithm.radius=0.8",
                    "privacy=pan_private", "privacy.epsilon=0.5",
                    "algorithm.step_size=0.5"],     # the preset's P_SGD step, which p_agd took before tuning/
}

# sha256 (first 16 hex digits) of each family's simulated model at seed 0, computed at f99de65,
# before the secret words: a simulation must not move by a bit.
SIMULATED = {"output_perturbation": "c589604bd165e189", "smd": "b6bcc2b43c5f6db2",
             "central_gaussian": "dcb41ba081ebabac", "pan_private": "268ff1bf74070846"}


def _run(family: str, *overrides, tracker=None):
    plan = make_plan(compose(*FAMILIES[family], "progress=false", *overrides))
    if tracker is not None:
        tracker.log_plan(plan)
    result = run(plan, tracker=tracker, inline=True)
    if tracker is not None:
        tracker.finish(plan, result)
    return plan, result


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


@pytest.mark.parametrize("family", FAMILIES)
def test_two_faithful_runs_of_one_config_differ_and_simulations_keep_their_bits(family):
    _, first = _run(family, "runtime.faithful=true")
    _, second = _run(family, "runtime.faithful=true")
    assert not np.array_equal(first.model, second.model)
    _, simulated = _run(family)
    assert _digest(simulated.model) == SIMULATED[family]


def _record(client: MlflowClient, run_id: str, tmp_path) -> tuple[dict, str]:
    """The logged configuration and every text the run record holds (params, tags, metric keys
    and values, artifacts), joined."""
    data = client.get_run(run_id).data
    folder = client.download_artifacts(run_id, "", str(tmp_path / "download"))
    texts = [json.dumps(data.params), json.dumps(data.tags), json.dumps(data.metrics)]
    for artifact in client.list_artifacts(run_id):
        if artifact.path.endswith(".npz"):            # the released outputs, as numbers
            with np.load(f"{folder}/{artifact.path}") as arrays:
                texts.append(repr({name: arrays[name].tolist() for name in arrays.files}))
        elif not artifact.path.endswith(".png"):
            texts.append(open(f"{folder}/{artifact.path}").read())
    config = json.loads(open(f"{folder}/config.json").read())
    return config, "\n".join(texts)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One MLflow store for the module's tracked runs."""
    folder = tmp_path_factory.mktemp("mlflow")
    return [f"tracking.uri={mlflow_store(folder, 'm.db')}", f"tracking.artifact_location={folder}/a", "tracking.figure=false"]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_run_record_does_not_replay_a_faithful_curators_release(family, store, tmp_path):
    plan = make_plan(compose(*FAMILIES[family], "progress=false", "runtime.faithful=true", *store))
    tracker = tracker_from_config(plan.tracking)
    tracker.log_plan(plan)
    released = run(plan, tracker=tracker, inline=True)
    tracker.finish(plan, released)
    config, record = _record(MlflowClient(tracking_uri=tracker.uri), tracker.run_id, tmp_path)

    # No secret word is written anywhere (words of 6 digits or more: a shorter one could occur by chance).
    secret = plan.replicas.streams[0, -SECRET_WORDS:]
    assert all(re.search(rf"\b{w}\b", record) is None for w in secret if w >= 10**5)
    # The attacker's replay: the run the record describes (its resolved config is config.json but
    # for runtime.faithful), as a simulation on the same data.
    replay = make_plan(compose(*FAMILIES[family], "progress=false", *store))
    config["runtime"]["faithful"] = False
    assert json.loads(json.dumps(replay.config, default=str)) == config
    assert not np.array_equal(run(replay, inline=True).model, released.model)


def test_subtracting_the_noise_of_the_logged_seed_no_longer_gives_the_minimiser(tmp_path):
    # Output perturbation releases W^ + sigma N with N drawn from the OUTPUT_NOISE stream; with the
    # seed and the stream key of the logged config, N was recomputable and W^ came back to 1e-16.
    plan, released = _run("output_perturbation", "runtime.faithful=true")
    sigma = released.history[0]["noise_std"][0]
    logged = make_plan(compose(*FAMILIES["output_perturbation"], "progress=false"))    # what the record rebuilds
    keys = RoundKeys(logged.seed, logged.repetitions, 0, logged.replicas.streams)
    recomputed = keys.generator(Stream.OUTPUT_NOISE, 0).standard_normal(released.model.shape[1:])
    _, exact = _run("output_perturbation", "privacy=none")                              # the non-private W^
    error = np.linalg.norm(released.model[0] - sigma * recomputed - exact.model[0])
    assert sigma > 0.1 and error > 0.1 * sigma, error
