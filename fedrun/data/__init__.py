"""Datasets (sources/), partitions (partitions/) and the on-device federated view of them."""
