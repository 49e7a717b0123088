"""The benchmark job in Flower's simulation engine (run in its own virtual environment).

    .flower-venv/bin/python experiments/benchmark/flower_job.py SPEC.json DATA_DIR OUT.json

Imports numpy and flwr only (fedray is not installed in the Flower environment). DATA_DIR holds
the federation fedray's silos load, dumped by ``run.py`` as .npy files (x, y, n, xt, yt, nt);
every client memory-maps them and reads only its own silo. The job is the one of
``numpy_loop.py``, in Flower's message API:

- one virtual SuperNode per silo; each round the FedAvg strategy samples M of them (all when
  M = N) and sends the current model;
- the client evaluates the received model on its silo (training loss and test error, the
  metrics fedray computes every round), draws K of its n records without replacement, takes
  the clipped logistic minibatch gradient, adds N(0, noise_std^2 I) and returns
  ``w - step_size * noisy_gradient`` with weight 1, so FedAvg's average is the minibatch SGD step;
- after the last round one federated evaluation gives the final training loss.

Clients run in Ray actors of Flower's Ray backend, one CPU each (two actors on two cores).
Round end times come from the strategy's ``evaluate_fn``, which Flower calls after every round.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from numpy_loop import clipped_minibatch_gradients, logistic_loss, sample_without_replacement  # noqa: E402

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

SPEC: dict = {}
DATA_DIR = ""
OUT_PATH = ""
_ARRAYS: dict = {}


def _silo(pid: int):
    """Silo ``pid``'s records, read from the memory-mapped federation (once per actor)."""
    if not _ARRAYS:
        for key in ("x", "y", "n", "xt", "yt", "nt"):
            _ARRAYS[key] = np.load(Path(DATA_DIR) / f"{key}.npy", mmap_mode="r")
    a = _ARRAYS
    n, nt = int(a["n"][pid]), int(a["nt"][pid])
    return (np.asarray(a["x"][pid]), np.asarray(a["y"][pid]), n,
            np.asarray(a["xt"][pid, :nt]), np.asarray(a["yt"][pid, :nt]))


def _client_metrics(w, x, y, n, xt, yt) -> dict:
    mc = SPEC["margin_clip"]
    loss = float(logistic_loss(x[:n] @ w, y[:n], mc).mean())
    errors = float(((xt @ w > 0.0) != (yt > 0.5)).sum()) if len(yt) else 0.0
    return {"train_loss": loss, "test_error_sum": errors, "test_count": float(len(yt)), "num-examples": 1}


client = ClientApp()


@client.train()
def train(msg: Message, context: Context) -> Message:
    pid = int(context.node_config["partition-id"])
    server_round = int(msg.content["config"]["server-round"])
    w = msg.content["arrays"].to_numpy_ndarrays()[0]
    x, y, n, xt, yt = _silo(pid)
    metrics = _client_metrics(w, x, y, n, xt, yt)
    rng = np.random.default_rng([SPEC["seed"], 104729, server_round, pid])
    norms = np.sqrt(np.einsum("nd,nd->n", x, x))[None]
    idx = sample_without_replacement(rng, np.array([n]), x.shape[0], SPEC["batch_size"])
    grad = clipped_minibatch_gradients(w, x[None], y[None], norms, idx, SPEC["l2_clip"], SPEC["margin_clip"])[0]
    grad += SPEC["noise_std"] * rng.standard_normal(grad.shape)
    new_w = w - SPEC["step_size"] * grad
    content = RecordDict({"arrays": ArrayRecord([new_w]), "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


@client.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    pid = int(context.node_config["partition-id"])
    w = msg.content["arrays"].to_numpy_ndarrays()[0]
    metrics = _client_metrics(w, *_silo(pid))
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)


class FinalEvaluationFedAvg(FedAvg):
    """FedAvg that runs federated evaluation only after the last round."""

    def __init__(self, num_rounds: int, **kwargs):
        super().__init__(**kwargs)
        self.num_rounds = num_rounds

    def configure_evaluate(self, server_round, arrays, config, grid):
        if server_round < self.num_rounds:
            return []
        return super().configure_evaluate(server_round, arrays, config, grid)


server = ServerApp()


@server.main()
def main_server(grid: Grid, context: Context) -> None:
    num_silos, m, rounds = SPEC["num_silos"], SPEC["silos_per_round"], SPEC["flower_rounds"]
    strategy = FinalEvaluationFedAvg(
        rounds,
        fraction_train=m / num_silos,
        fraction_evaluate=1.0,
        min_train_nodes=m,
        min_evaluate_nodes=num_silos,
        min_available_nodes=num_silos,
    )
    round_ends: list[float] = []

    def stamp(server_round: int, arrays: ArrayRecord):
        if server_round > 0:
            round_ends.append(time.time())
        return None

    w0 = np.zeros(SPEC["dim"])
    result = strategy.start(grid, initial_arrays=ArrayRecord([w0]), num_rounds=rounds,
                            timeout=24 * 3600, evaluate_fn=stamp)
    train = [float(result.train_metrics_clientapp[r]["train_loss"]) for r in sorted(result.train_metrics_clientapp)]
    final = result.evaluate_metrics_clientapp.get(rounds)
    out = {
        "round_ends": round_ends,
        "train_loss": train,
        "final_train_loss": None if final is None else float(final["train_loss"]),
        "num_rounds": rounds,
    }
    Path(OUT_PATH).write_text(json.dumps(out))


def main(spec_path: str, data_dir: str, out_path: str) -> None:
    global DATA_DIR, OUT_PATH
    SPEC.update(json.loads(Path(spec_path).read_text()))
    DATA_DIR, OUT_PATH = data_dir, out_path
    run_simulation(
        server_app=server,
        client_app=client,
        num_supernodes=SPEC["num_silos"],
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                        "init_args": {"num_cpus": 2, "log_to_driver": False}},
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])
