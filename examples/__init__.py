"""Packages that extend fedray from outside it (each imports only fedray's public modules)."""
