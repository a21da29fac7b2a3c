"""The machine a run is on: torch threads, signals, devices, the allocator, memory limits."""
