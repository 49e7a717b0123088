"""fedray: private federated convex optimization experiments on Ray."""

__version__ = "0.1.0"
