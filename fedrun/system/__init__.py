"""The simulated system clients run on (``system.*``, docs/systems.md): dropout, stragglers, devices and their
traces, deadlines, over-selection and the simulated clock. Bookkeeping only: it decides who trains how much and
who reports, and the engines (one layer up) do the training."""
