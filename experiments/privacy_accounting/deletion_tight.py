"""Seed 003's output perturbation under the paper's constants against ``privacy.calibration=tight``.

Per release of the three presets (sc_output_pert_synthetic; phased_erm_synthetic, whose 17 phases
share one budget; strongly_convex_sco_synthetic, its localizing release and its equal phases),
from the planner itself: the release's (eps, delta), users n, kappa; the two factors the tight
calibration removes, each alone,
  noise:  sigma / Delta of Alg. 1, Thm 3.3's sqrt(2 ln(2/delta2)) 8 kappa / eps2 against the
          exact hockey-stick of the same coupling (``deletion_tight``),
  cert:   Delta0 of App. C's certificate, (2r + 1) gamma0 / (mu (n - r - 1)), against the smooth
          route (``deletion.smooth_deletion_bound``) at the release's mu;
and c = sigma mu n sqrt(m) / G' under each (the spec's c', 1.1e11 for Phased-ERM's phases).

    python experiments/privacy_accounting/deletion_tight.py
"""

from __future__ import annotations

import math
from dataclasses import replace

import fedray
from fedray.protocols.user_level.deletion import DelOutputPert

PRESETS = ("sc_output_pert_synthetic", "phased_erm_synthetic", "strongly_convex_sco_synthetic")


def releases(plan) -> list[tuple[str, object]]:
    protocol = plan.protocol
    if hasattr(protocol, "mechanisms"):
        return [("release", protocol.mechanisms[0])]
    rows = [] if protocol.localization is None else [("localization", protocol.localization.mechanisms[0])]
    return rows + [(f"phase 1 of {len(protocol.phases)}", protocol.phases[0].mechanisms[0])]


def constant(mechanism) -> float:
    return (mechanism.noise_std * mechanism.strong_convexity * mechanism.num_users
            * math.sqrt(mechanism.items_per_user) / mechanism.lipschitz)


def rows() -> list[dict]:
    out = []
    for preset in PRESETS:
        paper_plan = fedray.make_plan([f"experiment={preset}", "privacy.calibration=paper"])
        tight_plan = fedray.make_plan([f"experiment={preset}", "privacy.calibration=tight"])
        for (name, paper), (_, tight) in zip(releases(paper_plan), releases(tight_plan)):
            unit = DelOutputPert(paper.epsilon2, paper.delta2, 1.0)
            exact = DelOutputPert(paper.epsilon2, paper.delta2, 1.0, calibration="tight")
            # the certificate's factor at the paper's mu (the phases' lambda_i differ between the plans)
            smooth = replace(paper, calibration="tight", smoothness=tight.smoothness)
            out.append({"preset": preset, "release": name, "eps": paper.epsilon, "delta": paper.delta,
                        "n": paper.num_users, "kappa": paper.kappa,
                        "noise": unit.noise_std / exact.noise_std,
                        "cert": paper.sensitivity / smooth.sensitivity,
                        "c_paper": constant(paper), "c_tight": constant(tight)})
    return out


def main() -> None:
    print(f"{'preset':<31}{'release':<15}{'eps':>7}{'delta':>9}{'n':>7}{'kappa':>6}"
          f"{'noise x':>9}{'cert x':>9}{'c paper':>10}{'c tight':>10}{'c ratio':>9}")
    for r in rows():
        print(f"{r['preset']:<31}{r['release']:<15}{r['eps']:>7.4f}{r['delta']:>9.2g}{r['n']:>7}{r['kappa']:>6}"
              f"{r['noise']:>9.2f}{r['cert']:>9.1f}{r['c_paper']:>10.3g}{r['c_tight']:>10.3g}"
              f"{r['c_paper'] / r['c_tight']:>9.0f}")


if __name__ == "__main__":
    main()
