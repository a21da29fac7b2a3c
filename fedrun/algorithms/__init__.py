"""Federated algorithms: one module per method, each overriding only what differs from FedAvg."""
