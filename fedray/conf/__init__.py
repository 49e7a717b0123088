"""fedray's Hydra config tree, shipped in the package so that an installed wheel finds it through
Hydra's package search path (``pkg://fedray.conf``)."""
