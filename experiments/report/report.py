"""`python -m experiments.report <experiment>`: the paper's figure, numbers and claims from an MLflow store.

Reads every finished job run of one MLflow experiment (the children of the sweeps' parent runs),
and for each (setting N/M, algorithm, eps, trial) applies the paper's protocol (seed-004 §5):

1. F* by Newton on the trial's pooled training data (``fedray.analysis``; the federation is
   rebuilt from the run's logged ``data.spec``, seed and trial, simulation-only, and cached).
2. Among all step sizes (and, for insurance, clip thresholds: one run per clip), select the one
   minimising the mean over the 3 repetitions of the training excess loss F^(w) - F*; a
   non-finite loss counts as +inf (diverged).
3. Report the mean over those 3 repetitions of the test metric: classification error, or for a
   regression the relative RMSE (``fedray.analysis.relative_rmse``). The model evaluated is the
   average of the last 8 iterates (``final_*_avg``), as the authors' code does.

Then over trials: mean, 5th and 95th percentiles (the paper's 90% band) and the trial count.
Writes ``results.csv``, ``selection.csv`` (one row per selected cell), ``figure.png`` (test metric
vs eps, one line per private algorithm, non-private baselines as horizontal lines, bands from
the 5th to the 95th percentile) and ``claims.md`` (the paper's claims checked on these numbers).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from mlflow.tracking import MlflowClient

from fedray import analysis

PRIVATE = ("isrl_dp_mb_sgd", "isrl_dp_local_sgd")
EXTRA = ("isrl_dp_accelerated",)   # curves beyond the paper's figure; no claim is checked on them
BASELINES = ("mb_sgd", "local_sgd")
LABELS = {"isrl_dp_mb_sgd": "ISRL-DP MB-SGD", "isrl_dp_local_sgd": "ISRL-DP Local SGD",
          "isrl_dp_accelerated": "ISRL-DP accelerated MB-SGD (extra)",
          "mb_sgd": "MB-SGD (non-private)", "local_sgd": "Local SGD (non-private)"}
COLORS = {"isrl_dp_mb_sgd": "tab:blue", "isrl_dp_local_sgd": "tab:orange", "isrl_dp_accelerated": "tab:purple",
          "mb_sgd": "tab:green",
          "local_sgd": "tab:red"}


# -- reading the store ---------------------------------------------------------------------------
def _value(text: str):
    return None if text == "None" else yaml.safe_load(text)


def _replicas(summary: dict, key: str, count: int) -> np.ndarray:
    """A final metric of every replica, from the run's summary.json (NaN where it is missing)."""
    return np.broadcast_to(np.asarray(summary.get(key, np.nan), dtype=np.float64), (count,)).copy()


def _summary(client: MlflowClient, run_id: str, tmp: str) -> dict:
    """Every replica's final metrics: the run's summary.json (the store keeps only their min, mean
    and max as metrics once a run carries more than tracking.replica_curves replicas)."""
    return json.loads(Path(client.download_artifacts(run_id, "summary.json", tmp)).read_text())


def read_runs(uri: str, experiment_name: str) -> list[dict]:
    """One dict per finished job run (the latest run wins when a job was run twice)."""
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        raise SystemExit(f"error: no MLflow experiment {experiment_name!r} in {uri}")
    runs = client.search_runs([experiment.experiment_id], filter_string="attributes.status = 'FINISHED'",
                              max_results=50000, order_by=["attributes.start_time ASC"])
    jobs: dict[tuple, dict] = {}
    tmp = tempfile.TemporaryDirectory()
    for run in runs:
        tags, params = run.data.tags, run.data.params
        if "algorithm" not in tags or "resolved.step_sizes" not in params:
            continue  # a parent run, or a run logged before step sizes were recorded
        count = int(params["resolved.num_replicas"])
        summary = _summary(client, run.info.run_id, tmp.name)
        spec = {k[len("data.spec."):]: _value(v) for k, v in params.items() if k.startswith("data.spec.")}
        loss = {k[len("data.loss."):]: _value(v) for k, v in params.items() if k.startswith("data.loss.")}
        private = tags["trust_model"] != "none"
        settings = {key: np.array(summary[f"replicas.{key}"]) if f"replicas.{key}" in summary
                    else np.array(json.loads(params[f"resolved.{key}"]))       # a run logged before summaries held them
                    for key in ("step_sizes", "repetitions", "replica_epsilons", "replica_clips")
                    if f"replicas.{key}" in summary or f"resolved.{key}" in params}
        job = {
            "run_id": run.info.run_id,
            "algorithm": tags["algorithm"],
            "private": private,
            "epsilon": float(params["privacy.epsilon"]) if private and "replica_epsilons" not in settings
            else math.nan,
            "l2_clip": np.broadcast_to(np.asarray(settings["replica_clips"] if "replica_clips" in settings else
                                                  _value(params.get("privacy.l2_clip", "None")), dtype=object),
                                       (count,)),
            "num_silos": int(params["resolved.num_silos"]),
            "silos_per_round": int(params["participation.silos_per_round"]),
            "seed": int(params["seed"]),
            "trial": int(params["trial"]),
            "spec": spec,
            "loss": loss,
            "step_sizes": settings["step_sizes"],
            "repetitions": settings["repetitions"],
            "train_loss": _replicas(summary, "final_train_loss_avg", count),
            "test_error": _replicas(summary, "final_test_error_avg", count),
            # the accountant's epsilon for what ran (max over silos and replicas), next to the target
            "epsilon_spent": _replicas(summary, "epsilon_spent_max", count) if private else np.full(count, np.nan),
            "accountant": tags.get("accountant", ""),
        }
        for part in split_by_setting(job, settings.get("replica_epsilons")):
            key = (part["algorithm"], part["epsilon"] if private else None, part["l2_clip"], part["num_silos"],
                   part["silos_per_round"], part["trial"], part["seed"])
            jobs[key] = part
    return list(jobs.values())


def _budget_key(epsilon: float) -> float | None:
    """A budget as a dict key: None for NaN (no budget), since two NaN floats are two keys and
    would split one cell."""
    return None if math.isnan(epsilon) else epsilon


REPLICA_ARRAYS = ("step_sizes", "repetitions", "train_loss", "test_error", "epsilon_spent", "l2_clip")


def split_by_setting(job: dict, replica_epsilons) -> list[dict]:
    """A run carrying a budget grid (``replica_epsilons``, one per replica) or a clip grid as
    replicas is one job per (budget, clip)."""
    count = len(job["step_sizes"])
    levels = np.asarray(replica_epsilons, dtype=np.float64) if replica_epsilons is not None \
        else np.full(count, job["epsilon"])
    parts = []
    budgets = [_budget_key(eps) for eps in levels.tolist()]
    for eps, clip in dict.fromkeys(zip(budgets, job["l2_clip"].tolist())):
        rows = (np.isnan(levels) if eps is None else levels == eps) & (job["l2_clip"] == clip)
        part = dict(job, **{k: job[k][rows] for k in REPLICA_ARRAYS})
        part.update(epsilon=math.nan if eps is None else float(eps), l2_clip=clip,
                    epsilon_accountant=float(np.nanmax(part["epsilon_spent"])) if job["private"] else math.nan)
        parts.append(part)
    return parts


# -- per-trial analysis (cached) -----------------------------------------------------------------
def _instantiate(config: dict):
    from hydra.utils import instantiate

    return instantiate({k: v for k, v in config.items()})


def trial_analysis(job: dict, cache: dict) -> dict:
    """F*, upsilon*^2 and the regression baseline of the job's federation, cached by data key."""
    key = json.dumps({"spec": job["spec"], "loss": job["loss"], "seed": job["seed"], "trial": job["trial"]},
                     sort_keys=True, default=str)
    if key not in cache:
        spec, loss = _instantiate(job["spec"]), _instantiate(job["loss"])
        fed = spec.load(job["seed"], job["trial"])
        opt = analysis.newton_optimum(loss, fed)
        entry = {"f_star": opt.value, "newton_steps": opt.steps, "newton_converged": opt.converged,
                 "upsilon2": analysis.heterogeneity(loss, opt.params, fed), "task": fed.task}
        if fed.task == "regression":
            _, total, count = analysis.regression_baseline(fed)
            entry.update(test_total_ss=total, test_count=count,
                         newton_relative_rmse=analysis.relative_rmse_of(opt.params, fed))
        cache[key] = entry
    return cache[key]


def evaluation_metric(errors: np.ndarray, info: dict) -> np.ndarray:
    """Classification error as logged, or relative RMSE from the logged test mean squared error."""
    if info["task"] == "regression":
        return np.sqrt(errors * info["test_count"] / info["test_total_ss"])
    return errors


# -- the protocol ----------------------------------------------------------------------------------
def select(jobs: list[dict], cache: dict) -> pd.DataFrame:
    """One row per (N, M, algorithm, eps, trial): the selected (step, clip) and its test metric."""
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for job in jobs:
        cells[(job["num_silos"], job["silos_per_round"], job["algorithm"], _budget_key(job["epsilon"]),
               job["trial"])].append(job)
    rows = []
    for (num_silos, m, algorithm, eps, trial), group in cells.items():
        eps = math.nan if eps is None else eps
        info = trial_analysis(group[0], cache)
        best = None
        for job in group:
            excess = job["train_loss"] - info["f_star"]
            metric = evaluation_metric(job["test_error"], info)
            for step in np.unique(job["step_sizes"]):
                chosen = job["step_sizes"] == step
                values = excess[chosen]
                score = float(np.mean(values)) if np.all(np.isfinite(values)) else math.inf
                candidate = (score, float(step), job["l2_clip"], float(np.mean(metric[chosen])), int(chosen.sum()))
                if best is None or candidate[0] < best[0]:
                    best = candidate
        score, step, clip, metric, reps = best
        grid = np.unique(np.concatenate([j["step_sizes"] for j in group]))
        rows.append({
            "num_silos": num_silos, "silos_per_round": m, "algorithm": algorithm,
            "private": algorithm in PRIVATE + EXTRA, "epsilon": eps, "trial": trial,
            "step_size": step, "step_at_grid_edge": bool(step in (grid.min(), grid.max())),
            "l2_clip": clip, "clips_tried": len(group), "repetitions": reps,
            "excess_loss": score, "test_metric": metric if math.isfinite(score) else math.nan,
            "f_star": info["f_star"], "upsilon2": info["upsilon2"],
            "epsilon_accountant": max(j["epsilon_accountant"] for j in group), "accountant": group[0]["accountant"],
        })
    return pd.DataFrame(rows).sort_values(["num_silos", "silos_per_round", "algorithm", "epsilon", "trial"])


def complete_trials(selection: pd.DataFrame) -> tuple[pd.DataFrame, list]:
    """Keep, per setting (N, M), only the trials that have every (algorithm, eps) cell of that
    setting, so every point of a figure averages the same trials. Returns (kept, dropped)."""
    kept, dropped = [], []
    for (n, m), part in selection.groupby(["num_silos", "silos_per_round"]):
        cells = part["algorithm"] + "|" + part["epsilon"].map(lambda e: f"{e:g}")
        wanted = set(cells)
        for trial, rows in part.groupby("trial"):
            if set(cells[rows.index]) == wanted:
                kept.append(rows)
            else:
                dropped.append((int(n), int(m), int(trial), len(wanted) - len(set(cells[rows.index]))))
    return pd.concat(kept) if kept else selection.iloc[:0], dropped


def summarise(selection: pd.DataFrame) -> pd.DataFrame:
    """Mean and 5th/95th percentiles over trials for every (N, M, algorithm, eps)."""
    keys = ["num_silos", "silos_per_round", "algorithm", "private", "epsilon"]
    out = []
    for key, group in selection.groupby(keys, dropna=False, sort=True):
        values = group["test_metric"].to_numpy(dtype=float)
        finite = values[np.isfinite(values)]
        out.append(dict(zip(keys, key)) | {
            "trials": len(group),
            "diverged_trials": int(len(values) - len(finite)),
            "metric_mean": float(np.mean(finite)) if finite.size else math.nan,
            "metric_p5": float(np.percentile(finite, 5)) if finite.size else math.nan,
            "metric_p95": float(np.percentile(finite, 95)) if finite.size else math.nan,
            "excess_loss_mean": float(group["excess_loss"].mean()),
            "step_sizes": ";".join(f"{s:.4g}" for s in group["step_size"]),
            "steps_at_grid_edge": int(group["step_at_grid_edge"].sum()),
            "l2_clips": ";".join(f"{c:.0e}" if c is not None and np.isfinite(c) else "none" for c in group["l2_clip"]),
            "upsilon2_mean": float(group["upsilon2"].mean()),
            "f_star_mean": float(group["f_star"].mean()),
            "epsilon_accountant_max": float(group["epsilon_accountant"].max()),
            "accountant": group["accountant"].iloc[0],
        })
    return pd.DataFrame(out)


# -- figure ----------------------------------------------------------------------------------------
def figure(results: pd.DataFrame, path: Path, metric_name: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    settings = sorted({(int(n), int(m)) for n, m in zip(results["num_silos"], results["silos_per_round"])})
    fig, axes = plt.subplots(1, len(settings), figsize=(max(7.0, 5.2 * len(settings)), 4.4), squeeze=False)
    for ax, (n, m) in zip(axes[0], settings):
        part = results[(results["num_silos"] == n) & (results["silos_per_round"] == m)]
        eps_grid = np.sort(part.loc[part["private"], "epsilon"].unique())
        trials = part["trials"].min() if len(part) else 0
        for algorithm in PRIVATE + EXTRA:
            rows = part[part["algorithm"] == algorithm].sort_values("epsilon")
            if rows.empty:
                continue
            style = "o-" if algorithm in PRIVATE else "s:"
            ax.plot(rows["epsilon"], rows["metric_mean"], style, color=COLORS[algorithm], label=LABELS[algorithm])
            ax.fill_between(rows["epsilon"], rows["metric_p5"], rows["metric_p95"], color=COLORS[algorithm], alpha=0.2)
        for algorithm in BASELINES:
            rows = part[part["algorithm"] == algorithm]
            if rows.empty or len(eps_grid) == 0:
                continue
            row = rows.iloc[0]
            ax.hlines(row["metric_mean"], eps_grid[0], eps_grid[-1], colors=COLORS[algorithm], linestyles="--",
                      label=LABELS[algorithm])
            ax.fill_between([eps_grid[0], eps_grid[-1]], row["metric_p5"], row["metric_p95"],
                            color=COLORS[algorithm], alpha=0.1)
        ax.set_xscale("log")
        ax.set_xticks(eps_grid)
        ax.set_xticklabels([f"{e:g}" for e in eps_grid])
        ax.xaxis.set_minor_formatter(NullFormatter())      # only the grid's budgets are labelled
        ax.set(xlabel="epsilon", ylabel=metric_name, title=f"N = {n}, M = {m} ({trials} trials)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{title}\nmean over trials; band: 5th-95th percentile over trials", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- claims (seed-004 §5 'Reported', §7 T14/T15) --------------------------------------------------
def _metric(results, n, m, algorithm, eps=None) -> float:
    rows = results[(results["num_silos"] == n) & (results["silos_per_round"] == m)
                   & (results["algorithm"] == algorithm)]
    if eps is not None:
        rows = rows[np.isclose(rows["epsilon"], eps)]
    return float(rows["metric_mean"].iloc[0]) if len(rows) else math.nan


def _verdict(ok: bool | None) -> str:
    return "n/a (not run)" if ok is None else ("holds" if ok else "does not hold")


def _settings(results):
    return sorted({(int(n), int(m)) for n, m in zip(results["num_silos"], results["silos_per_round"])})


def _eps(results, n, m):
    part = results[(results["num_silos"] == n) & (results["silos_per_round"] == m) & results["private"]]
    return sorted(part["epsilon"].unique())


def claims_mnist(results: pd.DataFrame) -> list[tuple[str, str, str]]:
    rows = []
    for n, m in _settings(results):
        eps_all = _eps(results, n, m)
        high = [e for e in eps_all if e >= 12]
        nums = {e: (_metric(results, n, m, "isrl_dp_mb_sgd", e), _metric(results, n, m, "local_sgd")) for e in high}
        ok = (all(a < b for a, b in nums.values()) if nums and all(np.isfinite(b) for _, b in nums.values()) else None)
        rows.append((f"M={m}: ISRL-DP MB-SGD test error < non-private Local SGD at eps >= 12",
                     "; ".join(f"eps {e:g}: {a:.4f} vs {b:.4f}" for e, (a, b) in nums.items()), _verdict(ok)))
        nums = {e: (_metric(results, n, m, "isrl_dp_mb_sgd", e), _metric(results, n, m, "isrl_dp_local_sgd", e))
                for e in eps_all}
        ok = all(a < b for a, b in nums.values()) if nums else None
        rows.append((f"M={m}: ISRL-DP MB-SGD < ISRL-DP Local SGD at every eps",
                     "; ".join(f"eps {e:g}: {a:.4f} vs {b:.4f}" for e, (a, b) in nums.items()), _verdict(ok)))
    ups = float(results["upsilon2_mean"].mean())
    rows.append(("upsilon*^2 ~ 0.17 at p = 0 (§7 T14)", f"{ups:.3f}", _verdict(abs(ups - 0.17) < 0.03)))
    return rows


def claims_insurance(results: pd.DataFrame) -> list[tuple[str, str, str]]:
    rows = []
    for n, m in _settings(results):
        eps_all = _eps(results, n, m)
        low = [e for e in eps_all if e <= 2]
        nums = {e: (_metric(results, n, m, "isrl_dp_mb_sgd", e), _metric(results, n, m, "isrl_dp_local_sgd", e))
                for e in low}
        ok = all(a < b for a, b in nums.values()) if nums else None
        rows.append((f"N={n},M={m}: ISRL-DP MB-SGD rel. RMSE < ISRL-DP Local SGD for eps <= 2",
                     "; ".join(f"eps {e:g}: {a:.3f} vs {b:.3f}" for e, (a, b) in nums.items()), _verdict(ok)))
        local = _metric(results, n, m, "local_sgd")
        high = {e: _metric(results, n, m, "isrl_dp_mb_sgd", e) for e in eps_all if e >= 2}
        ok = (all(abs(a - local) <= 0.1 * local for a in high.values()) if high and np.isfinite(local) else None)
        rows.append((f"N={n},M={m}: for eps >= 2 ISRL-DP MB-SGD in line with non-private Local SGD (within 10%)",
                     "; ".join(f"eps {e:g}: {a:.3f}" for e, a in high.items()) + f" vs {local:.3f}", _verdict(ok)))
        mb = {e: _metric(results, n, m, "isrl_dp_mb_sgd", e) for e in eps_all}
        below = sum(v < 1 for v in mb.values())
        rows.append((f"N={n},M={m}: ISRL-DP MB-SGD rel. RMSE < 1 for most eps",
                     f"{below} of {len(mb)} eps below 1 ({', '.join(f'{v:.3f}' for v in mb.values())})",
                     _verdict(below > len(mb) / 2 if mb else None)))
        one = mb.get(1.0, math.nan)
        rows.append((f"N={n},M={m}: at eps = 1 ISRL-DP MB-SGD 30-40% better than naive (rel. RMSE 0.6-0.7)",
                     f"{one:.3f}", _verdict(0.6 <= one <= 0.7 if np.isfinite(one) else None)))
    return rows


def claims_obesity(results: pd.DataFrame) -> list[tuple[str, str, str]]:
    rows = []
    for n, m in _settings(results):
        for e in _eps(results, n, m):
            a, b = _metric(results, n, m, "isrl_dp_mb_sgd", e), _metric(results, n, m, "isrl_dp_local_sgd", e)
            gain = (b - a) / b
            rows.append((f"eps {e:g}: ISRL-DP MB-SGD error 10-30% below ISRL-DP Local SGD",
                         f"{a:.3f} vs {b:.3f} ({100 * gain:+.0f}%)", _verdict(0.10 <= gain <= 0.30)))
    return rows


EXPERIMENTS = {
    "e1_mnist": ("test error", "E1 MNIST logistic regression", claims_mnist),
    "e2_insurance": ("relative test RMSE", "E2 insurance linear regression", claims_insurance),
    "e3_obesity": ("test error", "E3 obesity softmax regression", claims_obesity),
}


def claims_table(rows: list[tuple[str, str, str]]) -> str:
    lines = ["| claim | our numbers | holds / does not hold |", "|---|---|---|"]
    lines += [f"| {c} | {n} | {v} |" for c, n, v in rows]
    return "\n".join(lines) + "\n"


def report(experiment: str, uri: str, out: Path, cache_path: Path) -> pd.DataFrame:
    metric_name, title, claims = EXPERIMENTS[experiment]
    jobs = read_runs(uri, experiment)
    if not jobs:
        raise SystemExit(f"error: no finished job runs in experiment {experiment!r} of {uri}")
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    selection = select(jobs, cache)
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    cache_path.write_text(json.dumps(cache, indent=1))
    selection, dropped = complete_trials(selection)
    for n, m, trial, missing in dropped:
        print(f"note: N={n} M={m} trial {trial} left out: {missing} (algorithm, eps) cells not finished")
    results = summarise(selection)
    out.mkdir(parents=True, exist_ok=True)
    selection.to_csv(out / "selection.csv", index=False, float_format="%.6g")
    results.to_csv(out / "results.csv", index=False, float_format="%.6g")
    figure(results, out / "figure.png", metric_name, title)
    (out / "claims.md").write_text(claims_table(claims(results)))
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m experiments.report", description=__doc__.splitlines()[0])
    parser.add_argument("experiment", choices=sorted(EXPERIMENTS))
    parser.add_argument("--uri", help="MLflow tracking URI (default: sqlite:///mlruns/<experiment>.db)")
    parser.add_argument("--out", type=Path, help="output folder (default: experiments/<experiment>)")
    parser.add_argument("--cache", type=Path, help="F* cache (default: mlruns/<experiment>-analysis.json)")
    args = parser.parse_args(argv)
    uri = args.uri or f"sqlite:///{Path('mlruns').resolve() / (args.experiment + '.db')}"
    out = args.out or Path("experiments") / args.experiment
    cache = args.cache or Path("mlruns") / f"{args.experiment}-analysis.json"
    results = report(args.experiment, uri, out, cache)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(results[["num_silos", "silos_per_round", "algorithm", "epsilon", "trials", "metric_mean",
                       "metric_p5", "metric_p95", "excess_loss_mean", "steps_at_grid_edge"]].to_string(index=False))
    print(f"wrote {out}/results.csv, selection.csv, figure.png, claims.md")


